//! What a run produces: `report.json` (everything measured, with parameters and machine per
//! scenario) and `report.md` (the same as tables, plus the targets with met / not met).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::etcd::EtcdBaseline;
use crate::floor::LatencyFloor;
use crate::stats::{Summary, fmt_ms, round3};
use crate::sys::Machine;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    /// `quick` or `full`.
    pub mode: &'static str,
    /// Store of scenarios 1-4 and 6 (scenario 7 always runs on PostgreSQL).
    pub store: &'static str,
    pub started_at: String,
    pub duration_s: f64,
    pub machine: Machine,
    pub harness: Harness,
    pub scenarios: Scenarios,
    pub targets: Vec<TargetCheck>,
    pub notes: Vec<String>,
}

/// How the simulated supervisors reach the gateway, in words.
pub fn connection_shape(channels: usize) -> String {
    match channels {
        0 => "one HTTP/2 connection each".into(),
        n => format!("{n} shared HTTP/2 connections"),
    }
}

/// How the harness ran the system under test.
#[derive(Debug, Clone, Serialize)]
pub struct Harness {
    pub gateway_process: &'static str,
    pub supervisor_process: &'static str,
    /// Connections the simulated supervisors share; 0: one per supervisor.
    pub channels: usize,
    pub connect_batch: usize,
    pub gateway_db_pool: u32,
    pub gateway_heartbeat_s: u64,
    pub gateway_reconcile_s: u64,
    pub supervisor_reconnect_backoff: &'static str,
    pub fd_limit: Option<u64>,
    /// Time to connect every session of a batch run (informational).
    pub connects: Vec<ConnectRecord>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConnectRecord {
    pub what: String,
    pub sessions: usize,
    pub mode: &'static str,
    pub seconds: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Scenarios {
    pub single_sandbox_latency: Option<LatencyScenario>,
    pub fleet_convergence: Option<FleetScenario>,
    pub no_starvation: Option<StarvationScenario>,
    pub idle_cost: Option<IdleScenario>,
    pub commit_throughput: Option<ThroughputScenario>,
    pub reconnect_storm: Option<StormScenario>,
    pub cross_replica: Option<ReplicasScenario>,
    pub replicas_fleet: Option<ReplicasFleetScenario>,
    /// The peer measured beside the fleet sizes.
    pub etcd_baseline: Option<EtcdBaseline>,
    /// Every gateway of the run served TLS (`--tls`); the etcd baseline does not.
    pub tls: bool,
}

// ---- 1. single-sandbox latency ----

#[derive(Debug, Clone, Serialize)]
pub struct LatencyScenario {
    pub machine: Machine,
    pub params: LatencyParams,
    pub push: LatencyRun,
    /// Poll mode at the production interval (10 s).
    pub poll_production: Option<LatencyRun>,
    /// Poll mode with the measured sandbox at a shorter interval (other sessions at 10 s).
    pub poll_short: Option<LatencyRun>,
    /// p50 of poll (production interval) over p50 of push.
    pub p50_ratio_poll_over_push: Option<f64>,
    /// What one change cannot avoid on this machine, measured beside the push run.
    pub floor: Option<LatencyFloor>,
    /// p50 of push over the floor's p50.
    pub push_p50_over_floor: Option<f64>,
    /// p99 of push over its p50.
    pub push_p99_over_p50: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencyParams {
    pub store: &'static str,
    pub sessions: usize,
    pub warmup: usize,
    pub write: &'static str,
    pub latency: &'static str,
    pub supervisor_latency: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencyRun {
    pub mode: &'static str,
    /// Poll interval of the measured supervisor (poll mode only).
    pub poll_interval_ms: Option<u64>,
    pub samples: usize,
    /// UpdateConfig(WAIT_FOR_APPLY) call start → response with APPLIED.
    pub call: Summary,
    /// Same call start → the supervisor library sent its ack (push) / its report was accepted (poll).
    pub supervisor_ack: Summary,
    /// Responses that were not APPLIED, or errors.
    pub not_applied: usize,
}

// ---- 2. fleet convergence ----

#[derive(Debug, Clone, Serialize)]
pub struct FleetScenario {
    pub machine: Machine,
    pub params: FleetParams,
    pub runs: Vec<FleetRun>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetParams {
    pub store: &'static str,
    pub write: &'static str,
    pub rounds: usize,
    pub all_acked: &'static str,
    pub operation: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetRun {
    pub sessions: usize,
    pub rounds: Vec<FleetRound>,
    pub median_all_acked_ms: f64,
    pub median_operation_ms: f64,
    /// Median over the rounds that could read it of [`FleetRound::last_frame_sent_ms`].
    pub median_last_frame_sent_ms: Option<f64>,
    pub max_all_acked_ms: f64,
    pub max_operation_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetRound {
    /// Call start (wall clock) → the gateway handed the last configuration frame to a
    /// session's stream (its metric, milliseconds); `None` when not readable.
    pub last_frame_sent_ms: Option<f64>,
    /// Call start → every session applied and acked (supervisor side).
    pub all_acked_ms: f64,
    /// Distribution over sessions of call start → that session acked.
    pub per_session: Summary,
    /// Call start → UpdateConfig(Global, WAIT_FOR_APPLY) returned.
    pub operation_ms: f64,
    /// The operation's own completed_at - created_at (ms resolution).
    pub operation_server_ms: Option<f64>,
    /// CPU seconds the whole machine (gateways, swarms, database) spent busy from the call
    /// to its return; `None` when `/proc/stat` was not readable.
    pub machine_cpu_s: Option<f64>,
    /// CPU seconds the gateway processes used from just before the call until every ack
    /// was collected; `None` when a gateway did not say.
    pub gateways_cpu_s: Option<f64>,
    pub operation_state: String,
    pub fleet_targets: u32,
    pub fleet_applied: u32,
    pub fleet_failed: u32,
    pub fleet_pending: u32,
    pub sessions_missing: usize,
}

// ---- 8. a global change over three replicas ----

#[derive(Debug, Clone, Serialize)]
pub struct ReplicasFleetScenario {
    pub machine: Machine,
    pub params: ReplicasFleetParams,
    /// Sessions each replica held when the rounds began.
    pub sessions_held: Vec<usize>,
    pub median_all_acked_ms: f64,
    pub median_operation_ms: f64,
    pub rounds: Vec<FleetRound>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicasFleetParams {
    pub store: &'static str,
    pub replicas: usize,
    pub sessions_per_replica: usize,
    pub placement: &'static str,
}

// ---- 3. no starvation ----

#[derive(Debug, Clone, Serialize)]
pub struct StarvationScenario {
    pub machine: Machine,
    pub params: StarvationParams,
    /// Sandbox writes (WAIT_FOR_APPLY) with no fanout running.
    pub baseline_wait_for_apply: Summary,
    /// Sandbox writes (WAIT_FOR_APPLY) started while a fleet fanout was in flight; writes not
    /// applied within the wait are included with the time until the wait gave up.
    pub during_fanout_wait_for_apply: Summary,
    /// Sandbox writes (COMMIT_ONLY) started while a fleet fanout was in flight.
    pub during_fanout_commit_only: Summary,
    pub fanouts: usize,
    /// Per fanout: call start → all sessions acked.
    pub fanout_all_acked_ms: Vec<f64>,
    /// Per fanout: call start → fleet operation returned.
    pub fanout_operation_ms: Vec<f64>,
    /// WAIT_FOR_APPLY writes (baseline or during a fanout) that were not applied within the wait.
    pub not_applied: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct StarvationParams {
    pub store: &'static str,
    pub sessions: usize,
    pub fanout: &'static str,
    pub writer: String,
    /// CPU niceness of the fleet's swarm process (0: an equal share of the cores).
    pub fleet_nice: u8,
    pub min_samples: usize,
    pub max_fanouts: usize,
}

// ---- 4. idle cost ----

#[derive(Debug, Clone, Serialize)]
pub struct IdleScenario {
    pub machine: Machine,
    pub params: IdleParams,
    pub push: Option<IdleRun>,
    pub poll: Option<IdleRun>,
}

#[derive(Debug, Clone, Serialize)]
pub struct IdleParams {
    pub store: &'static str,
    pub sessions: usize,
    pub settle_s: f64,
    pub cpu_window_s: f64,
    pub heartbeat_s: u64,
    pub poll_interval_s: u64,
    pub method: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct IdleRun {
    pub mode: &'static str,
    pub sessions: usize,
    pub connect_s: f64,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub hwm_after_kib: u64,
    pub per_session_kib: f64,
    /// Gateway CPU time per wall-clock second over the window (1000 = one core busy).
    pub cpu_ms_per_s: f64,
    pub cpu_us_per_session_per_s: f64,
    pub gateway_threads: u64,
    /// Swarm (client side) RSS for reference; not the gateway's cost.
    pub swarm_rss_kib: u64,
}

// ---- 5. commit throughput ----

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputScenario {
    pub machine: Machine,
    pub params: ThroughputParams,
    pub runs: Vec<ThroughputRun>,
    /// PostgreSQL's own pgbench on the same server, right after the gateway's run.
    pub pgbench: Option<crate::pgbench::PgbenchRun>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputParams {
    pub clients: usize,
    pub duration_s: f64,
    pub write: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRun {
    pub store: &'static str,
    pub db_pool: u32,
    pub commits: u64,
    pub errors: u64,
    pub seconds: f64,
    pub commits_per_s: f64,
    pub latency: Summary,
    /// One client on the same gateway right after, for the same time.
    pub serial: SerialCeiling,
    /// `commits_per_s` over the serial ceiling's.
    pub over_serial: f64,
    /// How the clients' writes shared transactions, from the gateway's metrics.
    pub groups: GroupCommit,
}

/// The gateway's group commit over the clients' run (`openshell_config_write*` counters).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GroupCommit {
    /// Transactions of two writes or more.
    pub groups: u64,
    /// Writes committed in them.
    pub writes_grouped: u64,
    /// Writes taken into a transaction, alone or grouped.
    pub writes_started: u64,
}

impl GroupCommit {
    /// Writes per group on average (0 without a group).
    pub fn mean_group_writes(&self) -> f64 {
        self.writes_grouped as f64 / self.groups.max(1) as f64
    }
}

/// The serial commit ceiling: the same writes, one at a time.
#[derive(Debug, Clone, Serialize)]
pub struct SerialCeiling {
    pub commits: u64,
    pub errors: u64,
    pub commits_per_s: f64,
    pub latency: Summary,
}

// ---- 6. reconnect storm ----

#[derive(Debug, Clone, Serialize)]
pub struct StormScenario {
    pub machine: Machine,
    pub params: StormParams,
    /// Old gateway: stop requested → process gone.
    pub shutdown_ms: f64,
    /// New gateway process spawned → listening.
    pub start_ms: f64,
    /// New gateway listening → every session re-bootstrapped.
    pub all_bootstrapped_ms: f64,
    /// Stop requested → every session re-bootstrapped.
    pub all_bootstrapped_since_stop_ms: f64,
    /// Per session: new gateway listening → that session re-bootstrapped.
    pub per_session: Summary,
    pub sessions_missing: usize,
    /// Peak RSS of the new gateway process (its whole life: start + storm).
    pub gateway_hwm_kib: u64,
    pub gateway_rss_after_kib: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StormParams {
    pub store: &'static str,
    pub sessions: usize,
    pub restart: &'static str,
    pub reconnect_backoff: &'static str,
}

// ---- 7. writes through a replica that does not own the session ----

/// The non-owner's p50 may be at most this many times the owner's, plus
/// [`NON_OWNER_P50_SLACK_MS`].
pub const NON_OWNER_P50_FACTOR: f64 = 2.0;
pub const NON_OWNER_P50_SLACK_MS: f64 = 2.0;
/// The non-owner's p99 may be at most this many times the owner's.
pub const NON_OWNER_P99_FACTOR: f64 = 3.0;

#[derive(Debug, Clone, Serialize)]
pub struct ReplicasScenario {
    pub machine: Machine,
    pub params: ReplicasParams,
    /// One per replica count (2, then 3).
    pub runs: Vec<ReplicasRun>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicasParams {
    pub store: &'static str,
    pub sessions: usize,
    pub warmup: usize,
    /// Timed writes per route and replica count.
    pub samples: usize,
    pub placement: &'static str,
    pub write: &'static str,
    pub latency: &'static str,
    pub supervisor_latency: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicasRun {
    pub replicas: usize,
    /// Sessions each replica held when the writes began.
    pub sessions_per_replica: Vec<usize>,
    /// Writes through the replica holding the sandbox's session.
    pub owner: ReplicaWrites,
    /// Writes through a replica that does not hold it.
    pub non_owner: ReplicaWrites,
    /// Target bounds from the owner's figures of the same run.
    pub non_owner_p50_limit_ms: f64,
    pub non_owner_p99_limit_ms: f64,
    pub p50_ratio_non_owner_over_owner: Option<f64>,
    pub p99_ratio_non_owner_over_owner: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicaWrites {
    /// UpdateConfig(WAIT_FOR_APPLY) call start → response with APPLIED.
    pub call: Summary,
    /// Same call start → the supervisor library sent its ack.
    pub supervisor_ack: Summary,
    /// Responses that were not APPLIED, or errors.
    pub not_applied: usize,
}

impl ReplicasRun {
    pub fn new(
        replicas: usize,
        sessions_per_replica: Vec<usize>,
        owner: ReplicaWrites,
        non_owner: ReplicaWrites,
    ) -> Self {
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| round3(a / b));
        let both = owner.call.count > 0 && non_owner.call.count > 0;
        Self {
            replicas,
            sessions_per_replica,
            non_owner_p50_limit_ms: round3(
                NON_OWNER_P50_FACTOR * owner.call.p50_ms + NON_OWNER_P50_SLACK_MS,
            ),
            non_owner_p99_limit_ms: round3(NON_OWNER_P99_FACTOR * owner.call.p99_ms),
            p50_ratio_non_owner_over_owner: ratio(non_owner.call.p50_ms, owner.call.p50_ms)
                .filter(|_| both),
            p99_ratio_non_owner_over_owner: ratio(non_owner.call.p99_ms, owner.call.p99_ms)
                .filter(|_| both),
            owner,
            non_owner,
        }
    }

    /// Both routes measured, and every write applied within its wait.
    fn complete(&self) -> bool {
        self.owner.call.count > 0
            && self.non_owner.call.count > 0
            && self.owner.not_applied == 0
            && self.non_owner.not_applied == 0
    }
}

// ---- targets ----

#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub target: String,
    pub goal: String,
    pub measured: String,
    /// None when the scenario did not run at the target's scale.
    pub met: Option<bool>,
    pub note: String,
}

impl TargetCheck {
    fn status(&self) -> &'static str {
        match self.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "n/a",
        }
    }
}

/// Median over `rounds` of the machine's busy CPU seconds, when every round has it.
fn median_machine_cpu_s(rounds: &[FleetRound]) -> Option<f64> {
    median_of(rounds, |r| r.machine_cpu_s)
}

/// Median over `rounds` of `value`, when every round has it.
fn median_of(rounds: &[FleetRound], value: impl Fn(&FleetRound) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = rounds.iter().map(value).collect::<Option<_>>()?;
    (!values.is_empty()).then(|| crate::stats::median(&values))
}

/// "X CPU-s, Y cores busy": the machine's CPU over a round of `ms` milliseconds.
fn fmt_machine_cpu(cpu_s: f64, ms: f64) -> String {
    format!(
        "{cpu_s:.2} CPU-s, {:.2} cores busy",
        cpu_s / (ms / 1000.0).max(f64::EPSILON)
    )
}

/// Idle push sessions cost at most 5 % of a core and a tenth of what 10 s polling costs the
/// same gateway for the same sessions; without a polling run only the first is judged.
fn idle_cpu_target(push: &IdleRun, poll: Option<&IdleRun>) -> TargetCheck {
    let share_met = push.cpu_ms_per_s <= 50.0;
    let (goal, measured, met) = match poll {
        Some(poll) => {
            let ratio = push.cpu_ms_per_s / poll.cpu_ms_per_s.max(f64::EPSILON);
            (
                "≤ 5 % of a core and ≤ 0.1× 10 s polling's, same run",
                format!(
                    "{:.1}% of a core; {ratio:.3}× ({:.1} against {:.1} ms/s; {} sessions)",
                    push.cpu_ms_per_s / 10.0,
                    push.cpu_ms_per_s,
                    poll.cpu_ms_per_s,
                    push.sessions
                ),
                share_met && ratio <= 0.1,
            )
        }
        None => (
            "≤ 5 % of a core (polling not measured)",
            format!(
                "{:.1}% of a core ({:.1} ms/s; {} sessions)",
                push.cpu_ms_per_s / 10.0,
                push.cpu_ms_per_s,
                push.sessions
            ),
            share_met,
        ),
    };
    TargetCheck {
        target: "Gateway CPU for idle sessions (push)".into(),
        goal: goal.into(),
        measured,
        met: (push.sessions >= 10_000).then_some(met),
        note: "gateway process CPU time over the window, after the settle time".into(),
    }
}

/// Evaluates the targets against what ran. A target measured below its scale (e.g.
/// in quick mode) is reported but not judged.
pub fn evaluate_targets(s: &Scenarios) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    let judged = |ok: bool, at_scale: bool| at_scale.then_some(ok);
    if let Some(l) = &s.single_sandbox_latency {
        let at_scale = l.params.sessions >= 1000;
        let p = &l.push.call;
        let scale = format!("{} sessions", l.params.sessions);
        out.push(TargetCheck {
            target: "Single-sandbox push latency p50".into(),
            goal: "≤ 3 ms with 1k sessions".into(),
            measured: format!("{} ms ({scale})", fmt_ms(p.p50_ms)),
            met: judged(p.count > 0 && p.p50_ms <= 3.0, at_scale),
            note: "UpdateConfig(WAIT_FOR_APPLY) call → APPLIED response".into(),
        });
        out.push(TargetCheck {
            target: "Single-sandbox push latency p99".into(),
            goal: "≤ 15 ms with 1k sessions".into(),
            measured: format!("{} ms ({scale})", fmt_ms(p.p99_ms)),
            met: judged(p.count > 0 && p.p99_ms <= 15.0, at_scale),
            note: "UpdateConfig(WAIT_FOR_APPLY) call → APPLIED response".into(),
        });
        if let (Some(floor), Some(ratio)) = (&l.floor, l.push_p50_over_floor) {
            out.push(TargetCheck {
                target: "Single-sandbox push p50 over the floor (same run)".into(),
                goal: "≤ 3× with 1k sessions".into(),
                measured: format!("{ratio:.2}× (floor {} ms, {scale})", fmt_ms(floor.p50_ms)),
                met: judged(ratio <= 3.0, at_scale),
                note: "floor: SQLite commit + apply fsync + gRPC round trip, p50s".into(),
            });
        }
        if let Some(ratio) = l.push_p99_over_p50 {
            out.push(TargetCheck {
                target: "Single-sandbox push p99 over p50 (same run)".into(),
                goal: "≤ 3× with 1k sessions".into(),
                measured: format!("{ratio:.2}× ({scale})"),
                met: judged(ratio <= 3.0, at_scale),
                note: "UpdateConfig(WAIT_FOR_APPLY) call → APPLIED response".into(),
            });
        }
    }
    if let Some(f) = &s.fleet_convergence {
        for run in &f.runs {
            let (goal_ms, label, at_scale) = if run.sessions >= 10_000 {
                (1000.0, "10k", true)
            } else {
                (100.0, "1k", run.sessions >= 1000 && run.sessions < 10_000)
            };
            out.push(TargetCheck {
                target: format!("Global change applied and acked by all ({label})"),
                goal: format!("≤ {} ms for {label} sessions", goal_ms),
                measured: format!(
                    "median {} ms, worst {} ms ({} sessions, {} rounds)",
                    fmt_ms(run.median_all_acked_ms),
                    fmt_ms(run.max_all_acked_ms),
                    run.sessions,
                    run.rounds.len()
                ),
                met: judged(
                    !run.rounds.is_empty() && run.median_all_acked_ms <= goal_ms,
                    at_scale,
                ),
                note: "supervisor side: call start → last session's ack sent; judged on the median round".into(),
            });
            out.push(TargetCheck {
                target: format!("Global fleet operation complete ({label})"),
                goal: format!("≤ {} ms for {label} sessions", goal_ms),
                measured: format!(
                    "median {} ms, worst {} ms ({} sessions)",
                    fmt_ms(run.median_operation_ms),
                    fmt_ms(run.max_operation_ms),
                    run.sessions
                ),
                met: judged(
                    !run.rounds.is_empty() && run.median_operation_ms <= goal_ms,
                    at_scale,
                ),
                note: "gateway side: UpdateConfig(Global, WAIT_FOR_APPLY) returned with every target resolved".into(),
            });
            let ratio = run.median_operation_ms / run.median_all_acked_ms.max(f64::EPSILON);
            out.push(TargetCheck {
                target: format!("Global fleet operation complete over all acked ({label})"),
                goal: "≤ 1.2× the all-acked time, same rounds".into(),
                measured: format!(
                    "{ratio:.2}× ({} ms against {} ms)",
                    fmt_ms(run.median_operation_ms),
                    fmt_ms(run.median_all_acked_ms)
                ),
                met: judged(!run.rounds.is_empty() && ratio <= 1.2, at_scale),
                note: "medians of the rounds: the operation resolved against the last ack sent"
                    .into(),
            });
        }
    }
    if let (Some(f), Some(etcd)) = (&s.fleet_convergence, &s.etcd_baseline) {
        for run in &f.runs {
            let Some(peer) = etcd.runs.iter().find(|e| e.watchers == run.sessions) else {
                continue;
            };
            let ratio = run.median_all_acked_ms / peer.median_notify_all_ms.max(f64::EPSILON);
            let cpu = match (median_machine_cpu_s(&run.rounds), peer.median_machine_cpu_s) {
                (Some(ours), Some(etcd)) => format!(
                    "; the whole machine's CPU {:.2}× etcd's ({ours:.2} against {etcd:.2} CPU-s)",
                    ours / etcd.max(f64::EPSILON)
                ),
                _ => String::new(),
            };
            out.push(TargetCheck {
                target: format!(
                    "Global change all acked over etcd's notify-all ({} sessions)",
                    run.sessions
                ),
                goal: "≤ 2× etcd, same N and connection shape, same run".into(),
                measured: format!(
                    "{ratio:.2}× ({} ms against {} ms{cpu})",
                    fmt_ms(run.median_all_acked_ms),
                    fmt_ms(peer.median_notify_all_ms)
                ),
                met: judged(!run.rounds.is_empty(), run.sessions >= 1000)
                    .map(|ran| ran && ratio <= 2.0),
                note: "medians of the rounds; etcd: put → the last watcher has the event".into(),
            });
            if let Some(sent) = run.median_last_frame_sent_ms {
                let ratio = sent / peer.median_notify_all_ms.max(f64::EPSILON);
                out.push(TargetCheck {
                    target: format!(
                        "Global change, the gateway's last frame sent over etcd's notify-all ({} sessions)",
                        run.sessions
                    ),
                    goal: "≤ 1× etcd, same N and connection shape, same run".into(),
                    measured: format!(
                        "{ratio:.2}× ({} ms against {} ms)",
                        fmt_ms(sent),
                        fmt_ms(peer.median_notify_all_ms)
                    ),
                    met: judged(true, run.sessions >= 1000).map(|ran| ran && ratio <= 1.0),
                    note: "call start → the gateway handed the last session its frame (gateway metric)".into(),
                });
            }
        }
    }
    if let Some(st) = &s.no_starvation {
        let d = &st.during_fanout_wait_for_apply;
        out.push(TargetCheck {
            target: "Sandbox writes during a 10k fanout p99".into(),
            goal: "≤ 50 ms".into(),
            measured: format!(
                "{} ms (p50 {} ms, n={}, {} not applied within the wait; {} sessions, fleet at nice {})",
                fmt_ms(d.p99_ms),
                fmt_ms(d.p50_ms),
                d.count,
                st.not_applied,
                st.params.sessions,
                st.params.fleet_nice
            ),
            met: judged(
                d.count > 0 && d.p99_ms <= 50.0 && st.not_applied == 0,
                st.params.sessions >= 10_000,
            ),
            note: "WAIT_FOR_APPLY sandbox policy writes started while the fleet operation was in flight".into(),
        });
        let quiet = &st.baseline_wait_for_apply;
        let ratio = d.p99_ms / quiet.p99_ms.max(f64::EPSILON);
        out.push(TargetCheck {
            target: "Sandbox writes during a 10k fanout p99 over their no-fanout p99".into(),
            goal: "≤ 5×, same run".into(),
            measured: format!(
                "{ratio:.2}× ({} ms against {} ms, n={} and {})",
                fmt_ms(d.p99_ms),
                fmt_ms(quiet.p99_ms),
                d.count,
                quiet.count
            ),
            met: judged(
                d.count > 0 && quiet.count > 0 && ratio <= 5.0 && st.not_applied == 0,
                st.params.sessions >= 10_000,
            ),
            note:
                "WAIT_FOR_APPLY sandbox policy writes, with and without a fleet operation in flight"
                    .into(),
        });
    }
    if let Some(i) = &s.idle_cost
        && let Some(push) = &i.push
    {
        // Judged against etcd's memory per watcher in the same run, with as many watchers on
        // the same connection shape: an absolute figure depends on the HTTP/2 crate's buffer
        // sizes, which this project takes as published.
        let peer = s
            .etcd_baseline
            .as_ref()
            .and_then(|etcd| etcd.runs.iter().find(|run| run.watchers == push.sessions))
            .filter(|run| run.kib_per_watcher > 0.0);
        let (measured, met) = match peer {
            Some(run) => {
                let ratio = push.per_session_kib / run.kib_per_watcher;
                (
                    format!(
                        "{ratio:.2}× ({:.1} KiB per session against etcd's {:.1} KiB per watcher, {} sessions)",
                        push.per_session_kib, run.kib_per_watcher, push.sessions
                    ),
                    judged(ratio <= 0.5, push.sessions >= 1000),
                )
            }
            None => (
                format!(
                    "{:.1} KiB ({} sessions); no etcd run of that size to compare with",
                    push.per_session_kib, push.sessions
                ),
                None,
            ),
        };
        out.push(TargetCheck {
            target: "Gateway memory per idle session (push) over etcd's per watcher".into(),
            goal: "≤ 0.5× etcd, same N and connection shape, same run".into(),
            measured,
            met,
            note: "(VmRSS after − before connecting) / sessions, gateway process only; etcd: its resident memory growth per watcher".into(),
        });
        out.push(idle_cpu_target(push, i.poll.as_ref()));
    }
    if let Some(t) = &s.commit_throughput {
        let full_size = t.params.clients >= 16 && t.params.duration_s >= 5.0;
        for run in &t.runs {
            let measured = format!(
                "{:.0} commits/s ({} clients); one client: {:.0}/s; {:.2}×",
                run.commits_per_s, t.params.clients, run.serial.commits_per_s, run.over_serial
            );
            let note = "COMMIT_ONLY sandbox setting writes; one client: the serial ceiling, same gateway right after".into();
            // Issue 29: SQLite's writes must share commits (group commit); PostgreSQL,
            // which commits writes to different sandboxes side by side, a rate.
            let (goal, met) = if run.store == "sqlite" {
                (
                    "≥ 1.5× the serial ceiling (same run)",
                    run.over_serial >= 1.5,
                )
            } else {
                ("≥ 4,000 commits/s", run.commits_per_s >= 4000.0)
            };
            let measured = match (&t.pgbench, run.store) {
                (Some(pg), "postgres") => format!(
                    "{measured}; pgbench simple-update on the same server: {:.0}/s, the gateway {:.2}× it",
                    pg.tps,
                    run.commits_per_s / pg.tps.max(1e-9)
                ),
                _ => measured,
            };
            out.push(TargetCheck {
                target: format!("Commit throughput ({})", run.store),
                goal: goal.into(),
                measured,
                met: judged(met, full_size),
                note,
            });
        }
    }
    if let Some(st) = &s.reconnect_storm {
        out.push(TargetCheck {
            target: "Reconnect storm bootstrapped".into(),
            goal: "≤ 10 s for 10k sessions".into(),
            measured: format!(
                "{:.2} s after the new gateway listened ({:.2} s since stop; {} sessions, {} missing)",
                st.all_bootstrapped_ms / 1000.0,
                st.all_bootstrapped_since_stop_ms / 1000.0,
                st.params.sessions,
                st.sessions_missing
            ),
            met: judged(
                st.sessions_missing == 0 && st.all_bootstrapped_ms <= 10_000.0,
                st.params.sessions >= 10_000,
            ),
            note: "gateway restarted as a new process on the same address and store".into(),
        });
    }
    if let Some(x) = &s.replicas_fleet {
        let total = x.params.replicas * x.params.sessions_per_replica;
        let one = s.fleet_convergence.as_ref().and_then(|f| {
            f.runs
                .iter()
                .find(|run| run.sessions == x.params.sessions_per_replica)
        });
        let complete = !x.rounds.is_empty()
            && x.rounds
                .iter()
                .all(|r| r.operation_state == "APPLIED" && r.sessions_missing == 0);
        let (measured, met) = match one {
            Some(one) => {
                let ratio = x.median_all_acked_ms / one.median_all_acked_ms.max(f64::EPSILON);
                // The work is three times one replica's; on a machine one replica already
                // keeps busy, that is the time ratio's floor.
                let cpu = match (
                    median_machine_cpu_s(&x.rounds),
                    median_machine_cpu_s(&one.rounds),
                ) {
                    (Some(three), Some(single)) => format!(
                        "; the whole machine's CPU {:.2}× one replica's ({three:.2} against {single:.2} CPU-s)",
                        three / single.max(f64::EPSILON)
                    ),
                    _ => String::new(),
                };
                (
                    format!(
                        "{ratio:.2}× ({} ms against one replica's {} ms; {total} sessions{cpu})",
                        fmt_ms(x.median_all_acked_ms),
                        fmt_ms(one.median_all_acked_ms)
                    ),
                    judged(
                        complete && ratio <= 1.5,
                        x.params.sessions_per_replica >= 10_000,
                    ),
                )
            }
            None => (
                format!(
                    "{} ms ({total} sessions); no one-replica fleet of {} in this run",
                    fmt_ms(x.median_all_acked_ms),
                    x.params.sessions_per_replica
                ),
                None,
            ),
        };
        out.push(TargetCheck {
            target: format!(
                "{} replicas, {total} sessions: global change all acked",
                x.params.replicas
            ),
            goal: "≤ 1.5× one replica's, same sessions per replica, same run".into(),
            measured,
            met,
            note: "medians of the rounds; written through replica 0, every replica's sessions in a swarm process of their own".into(),
        });
    }
    if let Some(x) = &s.cross_replica {
        let at_scale = x.params.sessions >= 1000;
        for run in &x.runs {
            let (o, no) = (&run.owner, &run.non_owner);
            let scale = format!(
                "{} replicas, {} sessions, n={}/{}, {} not applied",
                run.replicas,
                x.params.sessions,
                o.call.count,
                no.call.count,
                o.not_applied + no.not_applied
            );
            out.push(TargetCheck {
                target: format!("Write through a non-owner replica p50 ({} replicas)", run.replicas),
                goal: format!(
                    "≤ {NON_OWNER_P50_FACTOR:.0} × owner p50 + {NON_OWNER_P50_SLACK_MS:.0} ms"
                ),
                measured: format!(
                    "{} ms against a limit of {} ms (owner p50 {} ms; {scale})",
                    fmt_ms(no.call.p50_ms),
                    fmt_ms(run.non_owner_p50_limit_ms),
                    fmt_ms(o.call.p50_ms)
                ),
                met: judged(
                    run.complete() && no.call.p50_ms <= run.non_owner_p50_limit_ms,
                    at_scale,
                ),
                note: "UpdateConfig(WAIT_FOR_APPLY) call → APPLIED through a replica not holding the session, against the holder in the same run".into(),
            });
            out.push(TargetCheck {
                target: format!("Write through a non-owner replica p99 ({} replicas)", run.replicas),
                goal: format!("≤ {NON_OWNER_P99_FACTOR:.0} × owner p99"),
                measured: format!(
                    "{} ms against a limit of {} ms (owner p99 {} ms; {scale})",
                    fmt_ms(no.call.p99_ms),
                    fmt_ms(run.non_owner_p99_limit_ms),
                    fmt_ms(o.call.p99_ms)
                ),
                met: judged(
                    run.complete() && no.call.p99_ms <= run.non_owner_p99_limit_ms,
                    at_scale,
                ),
                note: "UpdateConfig(WAIT_FOR_APPLY) call → APPLIED through a replica not holding the session, against the holder in the same run".into(),
            });
        }
    }
    out
}

fn kib(v: u64) -> String {
    if v >= 10 * 1024 {
        format!("{:.1} MiB", v as f64 / 1024.0)
    } else {
        format!("{v} KiB")
    }
}

/// One row of the summary table.
struct Row {
    scenario: String,
    params: String,
    metric: String,
    value: String,
}

fn rows(r: &Report) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut row = |scenario: &str, params: String, metric: &str, value: String| {
        rows.push(Row {
            scenario: scenario.into(),
            params,
            metric: metric.into(),
            value,
        });
    };
    let s = &r.scenarios;
    if let Some(l) = &s.single_sandbox_latency {
        let base = format!("{} sessions, {}", l.params.sessions, l.params.store);
        let runs = [
            Some(&l.push),
            l.poll_production.as_ref(),
            l.poll_short.as_ref(),
        ];
        for run in runs.into_iter().flatten() {
            let label = match run.poll_interval_ms {
                Some(ms) => format!("{}, poll every {}", run.mode, fmt_interval(ms)),
                None => run.mode.to_string(),
            };
            row(
                "1. Single-sandbox latency",
                format!("{base}, {label}, {} samples", run.samples),
                "call → APPLIED p50/p90/p99/max",
                run.call.cell(),
            );
            row(
                "1. Single-sandbox latency",
                format!("{base}, {label}"),
                "call → supervisor ack p50/p90/p99/max",
                run.supervisor_ack.cell(),
            );
        }
        if let Some(ratio) = l.p50_ratio_poll_over_push {
            row(
                "1. Single-sandbox latency",
                base.clone(),
                "p50 poll (10 s) / p50 push",
                format!("{ratio:.0}×"),
            );
        }
        if let Some(floor) = &l.floor {
            let params = format!("{} samples each, same run", floor.samples);
            for (metric, part) in [
                ("floor: SQLite commit p50/p90/p99/max", &floor.sqlite_commit),
                ("floor: apply fsync p50/p90/p99/max", &floor.apply_fsync),
                (
                    "floor: gRPC round trip p50/p90/p99/max",
                    &floor.grpc_round_trip,
                ),
            ] {
                row(
                    "1. Single-sandbox latency",
                    params.clone(),
                    metric,
                    part.cell(),
                );
            }
            row(
                "1. Single-sandbox latency",
                params,
                "floor p50 (sum of the three)",
                format!("{} ms", fmt_ms(floor.p50_ms)),
            );
        }
        if let Some(ratio) = l.push_p50_over_floor {
            row(
                "1. Single-sandbox latency",
                base.clone(),
                "p50 push / floor p50",
                format!("{ratio:.2}×"),
            );
        }
    }
    if let Some(f) = &s.fleet_convergence {
        for run in &f.runs {
            let params = format!(
                "{} sessions, push, {}, {} rounds",
                run.sessions,
                f.params.store,
                run.rounds.len()
            );
            row(
                "2. Fleet convergence",
                params.clone(),
                "all applied+acked (median / worst)",
                format!(
                    "{} / {} ms",
                    fmt_ms(run.median_all_acked_ms),
                    fmt_ms(run.max_all_acked_ms)
                ),
            );
            if let Some(sent) = run.median_last_frame_sent_ms {
                row(
                    "2. Fleet convergence",
                    params.clone(),
                    "gateway: last configuration frame sent (median)",
                    format!("{} ms", fmt_ms(sent)),
                );
            }
            if let Some(cpu_s) = median_machine_cpu_s(&run.rounds) {
                row(
                    "2. Fleet convergence",
                    params.clone(),
                    "whole machine's CPU, call → operation returned (median)",
                    fmt_machine_cpu(cpu_s, run.median_operation_ms),
                );
            }
            if let Some(cpu_s) = median_of(&run.rounds, |r| r.gateways_cpu_s) {
                row(
                    "2. Fleet convergence",
                    params.clone(),
                    "gateway process CPU over the round (median)",
                    format!("{cpu_s:.2} CPU-s"),
                );
            }
            row(
                "2. Fleet convergence",
                params.clone(),
                "fleet operation complete (median / worst)",
                format!(
                    "{} / {} ms",
                    fmt_ms(run.median_operation_ms),
                    fmt_ms(run.max_operation_ms)
                ),
            );
            if let Some(last) = run.rounds.last() {
                row(
                    "2. Fleet convergence",
                    params,
                    "last round: state, targets/applied/failed/pending",
                    format!(
                        "{} {}/{}/{}/{}",
                        last.operation_state,
                        last.fleet_targets,
                        last.fleet_applied,
                        last.fleet_failed,
                        last.fleet_pending
                    ),
                );
            }
        }
    }
    if let Some(etcd) = &s.etcd_baseline {
        let version = etcd.version.as_deref().unwrap_or("etcd");
        if let Some(why) = &etcd.skipped {
            row(
                "2. Fleet convergence",
                "etcd baseline".into(),
                "skipped",
                why.clone(),
            );
        }
        for peer in &etcd.runs {
            let params = format!(
                "{} watchers, {}, {version}, {} rounds",
                peer.watchers,
                connection_shape(peer.channels),
                peer.rounds_ms.len()
            );
            row(
                "2. Fleet convergence",
                params.clone(),
                "etcd: put → last watcher notified (median)",
                format!("{} ms", fmt_ms(peer.median_notify_all_ms)),
            );
            if let Some(cpu_s) = peer.median_machine_cpu_s {
                row(
                    "2. Fleet convergence",
                    params.clone(),
                    "etcd: whole machine's CPU, put → last watcher notified (median)",
                    fmt_machine_cpu(cpu_s, peer.median_notify_all_ms),
                );
            }
            row(
                "2. Fleet convergence",
                params,
                "etcd: resident memory per watcher",
                format!("{:.1} KiB", peer.kib_per_watcher),
            );
            if let Some(run) = s
                .fleet_convergence
                .iter()
                .flat_map(|f| f.runs.iter())
                .find(|run| run.sessions == peer.watchers)
            {
                let over = |ours: f64| ours / peer.median_notify_all_ms.max(f64::EPSILON);
                row(
                    "2. Fleet convergence",
                    format!("{} sessions, same run", peer.watchers),
                    "all acked / etcd notify-all; operation complete / etcd notify-all",
                    format!(
                        "{:.2}× / {:.2}×",
                        over(run.median_all_acked_ms),
                        over(run.median_operation_ms)
                    ),
                );
                if let Some(sent) = run.median_last_frame_sent_ms {
                    row(
                        "2. Fleet convergence",
                        format!("{} sessions, same run", peer.watchers),
                        "gateway's last frame sent / etcd notify-all",
                        format!("{:.2}×", over(sent)),
                    );
                }
            }
            if let Some(idle) = s
                .idle_cost
                .as_ref()
                .and_then(|i| i.push.as_ref())
                .filter(|idle| idle.sessions == peer.watchers && peer.kib_per_watcher > 0.0)
            {
                row(
                    "4. Idle cost",
                    format!("{} sessions, same run", peer.watchers),
                    "gateway memory per session / etcd per watcher",
                    format!("{:.2}×", idle.per_session_kib / peer.kib_per_watcher),
                );
            }
        }
    }
    if let Some(st) = &s.no_starvation {
        let params = format!(
            "{} sessions, {}, {} fanouts, fleet at nice {}",
            st.params.sessions, st.params.store, st.fanouts, st.params.fleet_nice
        );
        row(
            "3. No starvation",
            params.clone(),
            "sandbox WAIT_FOR_APPLY, no fanout p50/p90/p99/max",
            st.baseline_wait_for_apply.cell(),
        );
        row(
            "3. No starvation",
            params.clone(),
            "sandbox WAIT_FOR_APPLY during fanout p50/p90/p99/max",
            st.during_fanout_wait_for_apply.cell(),
        );
        row(
            "3. No starvation",
            params.clone(),
            "sandbox COMMIT_ONLY during fanout p50/p90/p99/max",
            st.during_fanout_commit_only.cell(),
        );
        row(
            "3. No starvation",
            params.clone(),
            "sandbox WAIT_FOR_APPLY writes not applied within the wait",
            st.not_applied.to_string(),
        );
        row(
            "3. No starvation",
            params,
            "fanout all acked / operation (each fanout)",
            st.fanout_all_acked_ms
                .iter()
                .zip(&st.fanout_operation_ms)
                .map(|(a, o)| format!("{} / {} ms", fmt_ms(*a), fmt_ms(*o)))
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
    if let Some(i) = &s.idle_cost {
        for run in [i.push.as_ref(), i.poll.as_ref()].into_iter().flatten() {
            let params = format!(
                "{} sessions, {}, {}",
                run.sessions,
                i.params.store,
                if run.mode == "poll" {
                    format!("poll every {} s", i.params.poll_interval_s)
                } else {
                    format!("push, heartbeat {} s", i.params.heartbeat_s)
                }
            );
            row(
                "4. Idle cost",
                params.clone(),
                "gateway RSS per session",
                format!(
                    "{:.1} KiB ({} → {})",
                    run.per_session_kib,
                    kib(run.rss_before_kib),
                    kib(run.rss_after_kib)
                ),
            );
            row(
                "4. Idle cost",
                params,
                &format!("gateway CPU over {:.0} s", i.params.cpu_window_s),
                format!(
                    "{:.1} ms/s ({:.1}% of a core, {:.2} µs/session/s)",
                    run.cpu_ms_per_s,
                    run.cpu_ms_per_s / 10.0,
                    run.cpu_us_per_session_per_s
                ),
            );
        }
    }
    if let Some(t) = &s.commit_throughput {
        for run in &t.runs {
            row(
                "5. Commit throughput",
                format!(
                    "{}, {} clients, {:.0} s, pool {}",
                    run.store, t.params.clients, run.seconds, run.db_pool
                ),
                "COMMIT_ONLY commits/s (latency p50/p90/p99/max)",
                format!(
                    "{:.0}/s ({}; {} errors)",
                    run.commits_per_s,
                    run.latency.cell(),
                    run.errors
                ),
            );
            row(
                "5. Commit throughput",
                format!(
                    "{}, {} clients, {:.0} s",
                    run.store, t.params.clients, run.seconds
                ),
                "group commit: writes per group (mean); writes grouped / all",
                format!(
                    "{:.1} ({} groups); {} / {}",
                    run.groups.mean_group_writes(),
                    run.groups.groups,
                    run.groups.writes_grouped,
                    run.groups.writes_started
                ),
            );
            row(
                "5. Commit throughput",
                format!("{}, 1 client, {:.0} s", run.store, t.params.duration_s),
                "serial ceiling: commits/s (latency p50/p90/p99/max); clients over it",
                format!(
                    "{:.0}/s ({}; {} errors); {:.2}×",
                    run.serial.commits_per_s,
                    run.serial.latency.cell(),
                    run.serial.errors,
                    run.over_serial
                ),
            );
        }
    }
    if let Some(pg) = s
        .commit_throughput
        .as_ref()
        .and_then(|t| t.pgbench.as_ref())
    {
        row(
            "5. Commit throughput",
            format!(
                "pgbench {}, {} clients / 1 client, {} s, same PostgreSQL server",
                pg.script, pg.clients, pg.seconds
            ),
            "PostgreSQL's own transactions/s (the database's ceiling on this machine now)",
            format!("{:.0}/s / {:.0}/s ({})", pg.tps, pg.serial_tps, pg.version),
        );
    }
    if let Some(st) = &s.reconnect_storm {
        let params = format!("{} sessions, {}", st.params.sessions, st.params.store);
        row(
            "6. Reconnect storm",
            params.clone(),
            "all re-bootstrapped after new gateway listens",
            format!(
                "{:.2} s (since stop: {:.2} s; missing {})",
                st.all_bootstrapped_ms / 1000.0,
                st.all_bootstrapped_since_stop_ms / 1000.0,
                st.sessions_missing
            ),
        );
        row(
            "6. Reconnect storm",
            params.clone(),
            "per-session re-bootstrap p50/p90/p99/max",
            st.per_session.cell(),
        );
        row(
            "6. Reconnect storm",
            params,
            "gateway peak RSS (VmHWM) / RSS after",
            format!(
                "{} / {}",
                kib(st.gateway_hwm_kib),
                kib(st.gateway_rss_after_kib)
            ),
        );
    }
    if let Some(x) = &s.replicas_fleet {
        let params = format!(
            "{} replicas × {} sessions, {}, {} rounds",
            x.params.replicas,
            x.params.sessions_per_replica,
            x.params.store,
            x.rounds.len()
        );
        row(
            "8. Three replicas",
            params.clone(),
            "sessions held by each replica",
            format!("{:?}", x.sessions_held),
        );
        row(
            "8. Three replicas",
            params.clone(),
            "global change all applied+acked / fleet operation complete (medians)",
            format!(
                "{} / {} ms",
                fmt_ms(x.median_all_acked_ms),
                fmt_ms(x.median_operation_ms)
            ),
        );
        let sent: Vec<f64> = x
            .rounds
            .iter()
            .filter_map(|r| r.last_frame_sent_ms)
            .collect();
        if !sent.is_empty() {
            row(
                "8. Three replicas",
                params.clone(),
                "the last replica's last configuration frame sent (median)",
                format!("{} ms", fmt_ms(crate::stats::median(&sent))),
            );
        }
        if let Some(cpu_s) = median_machine_cpu_s(&x.rounds) {
            let ms: Vec<f64> = x.rounds.iter().map(|r| r.operation_ms).collect();
            row(
                "8. Three replicas",
                params.clone(),
                "whole machine's CPU, call → operation returned (median)",
                fmt_machine_cpu(cpu_s, crate::stats::median(&ms)),
            );
        }
        if let Some(cpu_s) = median_of(&x.rounds, |r| r.gateways_cpu_s) {
            row(
                "8. Three replicas",
                params.clone(),
                "the replicas' gateway processes' CPU over the round, together (median)",
                format!("{cpu_s:.2} CPU-s"),
            );
        }
        if let Some(last) = x.rounds.last() {
            row(
                "8. Three replicas",
                params,
                "last round: state, targets/applied/failed/pending, sessions missing",
                format!(
                    "{} {}/{}/{}/{}, {}",
                    last.operation_state,
                    last.fleet_targets,
                    last.fleet_applied,
                    last.fleet_failed,
                    last.fleet_pending,
                    last.sessions_missing
                ),
            );
        }
    }
    if let Some(x) = &s.cross_replica {
        for run in &x.runs {
            let params = format!(
                "{} replicas, {} sessions ({} per replica), {}, {} samples per route",
                run.replicas,
                x.params.sessions,
                run.sessions_per_replica
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("/"),
                x.params.store,
                x.params.samples
            );
            for (route, w) in [("owner", &run.owner), ("non-owner", &run.non_owner)] {
                row(
                    "7. Cross-replica writes",
                    params.clone(),
                    &format!("via {route}: call → APPLIED p50/p90/p99/max"),
                    w.call.cell(),
                );
                row(
                    "7. Cross-replica writes",
                    params.clone(),
                    &format!("via {route}: call → supervisor ack p50/p90/p99/max"),
                    w.supervisor_ack.cell(),
                );
            }
            let ratio = |r: Option<f64>| r.map_or("n/a".to_string(), |r| format!("{r:.2}×"));
            row(
                "7. Cross-replica writes",
                params.clone(),
                "non-owner / owner, p50 and p99",
                format!(
                    "{} / {}",
                    ratio(run.p50_ratio_non_owner_over_owner),
                    ratio(run.p99_ratio_non_owner_over_owner)
                ),
            );
            row(
                "7. Cross-replica writes",
                params,
                "writes not applied within the wait (owner / non-owner)",
                format!("{} / {}", run.owner.not_applied, run.non_owner.not_applied),
            );
        }
    }
    rows
}

fn fmt_interval(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

fn esc(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The results table alone (docs/benchmarks.md quotes its main rows).
pub fn results_table(r: &Report) -> String {
    let mut md = String::new();
    md.push_str("| Scenario | Parameters | Metric | Result |\n|---|---|---|---|\n");
    for row in rows(r) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            esc(&row.scenario),
            esc(&row.params),
            esc(&row.metric),
            esc(&row.value)
        );
    }
    md
}

pub fn targets_table(r: &Report) -> String {
    let mut md = String::new();
    md.push_str("| Target | Goal | Measured | Status | How |\n|---|---|---|---|---|\n");
    for t in &r.targets {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            esc(&t.target),
            esc(&t.goal),
            esc(&t.measured),
            t.status(),
            esc(&t.note)
        );
    }
    md
}

pub fn markdown(r: &Report) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# OpenShell benchmark results\n");
    let _ = writeln!(
        md,
        "- Mode: **{}** · store: **{}** · started {} · took {:.0} s",
        r.mode, r.store, r.started_at, r.duration_s
    );
    let _ = writeln!(md, "- Machine: {}", r.machine.summary());
    let h = &r.harness;
    let _ = writeln!(
        md,
        "- Harness: {}; {}; {}{}; gateway db pool {}, heartbeat {} s, reconcile {} s; supervisor reconnect backoff {}",
        h.gateway_process,
        h.supervisor_process,
        connection_shape(h.channels),
        if r.scenarios.tls {
            ", TLS (the etcd baseline without)"
        } else {
            ", plaintext"
        },
        h.gateway_db_pool,
        h.gateway_heartbeat_s,
        h.gateway_reconcile_s,
        h.supervisor_reconnect_backoff
    );
    md.push('\n');
    md.push_str("## Results\n\n");
    md.push_str(&results_table(r));
    md.push_str("\n## Targets\n\n");
    md.push_str(&targets_table(r));
    if !h.connects.is_empty() {
        md.push_str("\n## Session setup (informational)\n\n| What | Sessions | Mode | Seconds |\n|---|---|---|---|\n");
        for c in &h.connects {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1} |",
                esc(&c.what),
                c.sessions,
                c.mode,
                c.seconds
            );
        }
    }
    if !r.notes.is_empty() {
        md.push_str("\n## Notes\n\n");
        for n in &r.notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

/// A scenario's parameters, machine and results, as printed when it finishes.
pub fn scenario_block<T: Serialize>(title: &str, scenario: &T) -> String {
    let body = serde_json::to_string_pretty(scenario).unwrap_or_else(|e| format!("<{e}>"));
    format!("== {title}\n{body}\n")
}

pub fn write(r: &Report, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let json = serde_json::to_string_pretty(r)?;
    std::fs::write(dir.join("report.json"), json)
        .with_context(|| format!("cannot write {}", dir.join("report.json").display()))?;
    std::fs::write(dir.join("report.md"), markdown(r))
        .with_context(|| format!("cannot write {}", dir.join("report.md").display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(samples: &[f64], not_applied: usize) -> ReplicaWrites {
        ReplicaWrites {
            call: Summary::of(samples),
            supervisor_ack: Summary::of(samples),
            not_applied,
        }
    }

    fn scenario(sessions: usize, runs: Vec<ReplicasRun>) -> Scenarios {
        Scenarios {
            cross_replica: Some(ReplicasScenario {
                machine: Machine::detect(),
                params: ReplicasParams {
                    store: "postgres",
                    sessions,
                    warmup: 0,
                    samples: 100,
                    placement: "",
                    write: "",
                    latency: "",
                    supervisor_latency: "",
                },
                runs,
            }),
            ..Scenarios::default()
        }
    }

    fn verdicts(s: &Scenarios) -> Vec<(String, Option<bool>)> {
        evaluate_targets(s)
            .into_iter()
            .map(|t| (t.target, t.met))
            .collect()
    }

    #[test]
    fn non_owner_targets_are_ratios_of_the_owner_in_the_same_run() {
        // Owner: p50 3 ms, p99 10 ms. Limits: p50 2 × 3 + 2 = 8 ms, p99 3 × 10 = 30 ms.
        let mut owner: Vec<f64> = vec![3.0; 98];
        owner.extend([10.0, 10.0]);
        let mut within: Vec<f64> = vec![8.0; 98];
        within.extend([30.0, 30.0]);
        let mut beyond: Vec<f64> = vec![8.5; 98];
        beyond.extend([31.0, 31.0]);
        let runs = vec![
            ReplicasRun::new(2, vec![500, 500], writes(&owner, 0), writes(&within, 0)),
            ReplicasRun::new(
                3,
                vec![334, 333, 333],
                writes(&owner, 0),
                writes(&beyond, 0),
            ),
        ];
        assert_eq!(runs[0].non_owner_p50_limit_ms, 8.0);
        assert_eq!(runs[0].non_owner_p99_limit_ms, 30.0);
        assert_eq!(runs[1].p50_ratio_non_owner_over_owner, Some(2.833));
        assert_eq!(
            verdicts(&scenario(1000, runs.clone())),
            vec![
                (
                    "Write through a non-owner replica p50 (2 replicas)".into(),
                    Some(true)
                ),
                (
                    "Write through a non-owner replica p99 (2 replicas)".into(),
                    Some(true)
                ),
                (
                    "Write through a non-owner replica p50 (3 replicas)".into(),
                    Some(false)
                ),
                (
                    "Write through a non-owner replica p99 (3 replicas)".into(),
                    Some(false)
                ),
            ]
        );
        // Below 1k sessions (quick mode) the figures are reported, not judged.
        assert!(
            verdicts(&scenario(50, runs))
                .iter()
                .all(|(_, met)| met.is_none())
        );
    }

    fn idle(mode: &'static str, cpu_ms_per_s: f64) -> IdleRun {
        IdleRun {
            mode,
            sessions: 10_000,
            connect_s: 0.0,
            rss_before_kib: 0,
            rss_after_kib: 0,
            hwm_after_kib: 0,
            per_session_kib: 0.0,
            cpu_ms_per_s,
            cpu_us_per_session_per_s: 0.0,
            gateway_threads: 0,
            swarm_rss_kib: 0,
        }
    }

    #[test]
    fn idle_cpu_is_judged_against_polling_in_the_same_run() {
        let met = |push: f64, poll: Option<f64>| {
            let poll = poll.map(|cpu| idle("poll", cpu));
            idle_cpu_target(&idle("push", push), poll.as_ref()).met
        };
        assert_eq!(met(19.0, Some(264.0)), Some(true));
        // Under 5 % of a core, but more than a tenth of polling.
        assert_eq!(met(30.0, Some(231.0)), Some(false));
        // A tenth of polling, but over 5 % of a core.
        assert_eq!(met(60.0, Some(900.0)), Some(false));
        assert_eq!(met(19.0, None), Some(true));
        assert_eq!(met(60.0, None), Some(false));
    }

    #[test]
    fn a_write_not_applied_fails_the_non_owner_targets() {
        let run = ReplicasRun::new(2, vec![500, 500], writes(&[3.0], 0), writes(&[3.0], 1));
        assert!(
            verdicts(&scenario(1000, vec![run]))
                .iter()
                .all(|(_, met)| *met == Some(false))
        );
    }

    #[test]
    fn the_markdown_report_shows_both_routes_and_the_targets() {
        let run = ReplicasRun::new(2, vec![500, 500], writes(&[3.0], 0), writes(&[5.0], 0));
        let scenarios = scenario(1000, vec![run]);
        let report = Report {
            tool: "openshell-bench",
            version: "0",
            mode: "full",
            store: "postgres",
            started_at: String::new(),
            duration_s: 0.0,
            machine: Machine::detect(),
            harness: Harness {
                gateway_process: "",
                supervisor_process: "",
                channels: 8,
                connect_batch: 1000,
                gateway_db_pool: 8,
                gateway_heartbeat_s: 5,
                gateway_reconcile_s: 30,
                supervisor_reconnect_backoff: "",
                fd_limit: None,
                connects: Vec::new(),
            },
            targets: evaluate_targets(&scenarios),
            scenarios,
            notes: Vec::new(),
        };
        let md = markdown(&report);
        assert!(md.contains("| 7. Cross-replica writes | 2 replicas, 1000 sessions (500/500 per replica), postgres, 100 samples per route | via owner: call → APPLIED p50/p90/p99/max | 3.00 / 3.00 / 3.00 / 3.00 ms (n=1) |"), "{md}");
        assert!(md.contains("via non-owner: call → APPLIED p50/p90/p99/max | 5.00 / 5.00 / 5.00 / 5.00 ms (n=1) |"), "{md}");
        assert!(
            md.contains("| non-owner / owner, p50 and p99 | 1.67× / 1.67× |"),
            "{md}"
        );
        assert!(md.contains("| Write through a non-owner replica p50 (2 replicas) | ≤ 2 × owner p50 + 2 ms | 5.00 ms against a limit of 8.00 ms (owner p50 3.00 ms; 2 replicas, 1000 sessions, n=1/1, 0 not applied) | met |"), "{md}");
        assert!(md.contains("| Write through a non-owner replica p99 (2 replicas) | ≤ 3 × owner p99 | 5.00 ms against a limit of 9.00 ms"), "{md}");
    }
}
