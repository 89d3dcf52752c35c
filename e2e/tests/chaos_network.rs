//! Network faults and slow peers of the fault-injection catalog (docs/reliability.md):
//! partitions between supervisors and the gateway made by a fault proxy
//! (`openshell_e2e::chaos::fault_proxy`), and supervisors whose applies take seconds during a
//! fanout. Real gateway and supervisor processes on SQLite and on PostgreSQL, the seeded
//! random workload, and the checker at the end, as in `chaos.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use openshell_e2e::chaos::checker::whole_generation;
use openshell_e2e::chaos::fault_proxy::{FaultProxy, Partition};
use openshell_e2e::chaos::workload::{
    CHURN_PREFIX, GLOBAL_SETTING, History, Outcome, SANDBOX_SETTING, SharedHistory, WriteKind,
    WriteRecord, write_recorded,
};
use openshell_e2e::chaos::{ChaosConfig, Run};
use openshell_e2e::{Api, Backend, eventually, raw_setting, to_global, to_sandbox};
use openshell_proto::v1 as pb;
use openshell_supervisor::file_applier::apply_log::{self, ApplyLogEntry};
use openshell_supervisor::file_applier::state_dir::TEST_WRITE_DELAY_ENV;

/// Generous: a deadline for something the product does in seconds, never a measurement.
const DEADLINE: Duration = Duration::from_secs(120);

/// Every open session, by sandbox id; `None` when the gateway did not answer.
async fn sessions(api: &Api) -> Option<HashMap<String, pb::SessionSummary>> {
    let sessions = api
        .clone()
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .ok()?
        .into_inner()
        .sessions;
    Some(
        sessions
            .into_iter()
            .map(|s| (s.sandbox_id.clone(), s))
            .collect(),
    )
}

fn millis(at: Option<&prost_types::Timestamp>) -> i64 {
    at.map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

/// (4) Partitions between the supervisors and the gateway that drop packets without closing
/// anything: both ways, then only what the supervisors send, then only what the gateway
/// sends. Each partition lasts until the gateway shows it noticed (the sessions it can no
/// longer hear from are gone; with only the gateway's frames lost it is the supervisors that
/// notice, by the missing gateway heartbeats, and open new sessions), and a while more. While
/// partitioned: every supervisor still runs on a whole last-known-good generation, and a write
/// to a partitioned sandbox does not end APPLIED. After the heal: every supervisor opens a
/// session that works again, and the checker's convergence and operation checks pass.
async fn partition(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(3), 6);
    let mut proxy = None;
    let mut run = Run::start_routed(backend, config.clone(), &[], |gateway| {
        let started = FaultProxy::start(gateway.port);
        let endpoint = started.endpoint();
        proxy = Some(started);
        endpoint
    })
    .await;
    let proxy = proxy.unwrap();
    let api = run.api();
    let ids = run.fleet.ids();
    run.start_workload();
    let kinds = [
        Partition::Blackhole,
        Partition::DropToGateway,
        Partition::DropToSupervisor,
    ];
    let end = Instant::now() + config.duration;
    let mut round = 0;
    while round < kinds.len() || Instant::now() < end {
        let kind = kinds[round % kinds.len()];
        round += 1;
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(500), Duration::from_millis(1500)),
        )
        .await;
        let before: HashMap<String, String> = sessions(&api)
            .await
            .unwrap()
            .into_iter()
            .map(|(id, s)| (id, s.session_id))
            .collect();
        let dropped_before = proxy.dropped().snapshot();
        run.fault(format!("partition {kind:?}"));
        proxy.set(kind);
        let partitioned = Instant::now();

        // Noticed: with the supervisors' frames lost the gateway closes their sessions after
        // missed heartbeats; with only the gateway's lost, the supervisors give up on their
        // sessions and open new ones, which replace the old on the gateway.
        eventually(&format!("the {kind:?} partition noticed"), DEADLINE, || {
            let api = api.clone();
            let ids = ids.clone();
            let before = before.clone();
            async move {
                let now = sessions(&api).await?;
                ids.iter()
                    .all(|id| match kind {
                        Partition::DropToSupervisor => now
                            .get(id)
                            .is_none_or(|s| before.get(id) != Some(&s.session_id)),
                        _ => !now.contains_key(id),
                    })
                    .then_some(())
            }
        })
        .await;
        eprintln!("{kind:?} noticed after {:?}", partitioned.elapsed());
        if kind != Partition::DropToSupervisor {
            let why = openshell_e2e::inspect(&api, &ids[0]).await;
            assert!(!why.connected, "{why:?}");
        }

        // A write to a partitioned sandbox: it cannot reach its supervisor, so it must not
        // end APPLIED before the heal.
        let member = run.rng.index(run.fleet.members.len());
        let sandbox = run.fleet.members[member].name.clone();
        let probe = write_recorded(
            &mut api.clone(),
            WriteKind::SandboxSetting {
                sandbox: sandbox.clone(),
                value: format!("partitioned-{round}"),
            },
            format!("chaos-{seed}-partition-{round}"),
            &run.history,
        )
        .await;
        tokio::time::sleep(
            run.rng
                .between(Duration::from_secs(1), Duration::from_secs(3)),
        )
        .await;
        let mut found = Vec::new();
        for member in &mut run.fleet.members {
            if !member.supervisor.as_mut().is_some_and(|s| s.is_running()) {
                found.push(format!(
                    "the supervisor of {} exited while partitioned",
                    member.id
                ));
            }
            if let Err(mix) = whole_generation(&member.state_dir()) {
                found.push(format!(
                    "while partitioned ({kind:?}), {}: {mix}",
                    member.id
                ));
            }
        }
        for what in found {
            run.violation(what);
        }
        if let Outcome::Committed {
            operation: Some(op),
            ..
        } = &probe
        {
            let now = api
                .clone()
                .get_operation(pb::GetOperationRequest { id: op.id.clone() })
                .await
                .unwrap()
                .into_inner();
            if openshell_e2e::state(&now) == pb::OperationState::Applied {
                run.violation(format!(
                    "operation {} to {sandbox} ended APPLIED while partitioned ({kind:?})",
                    op.id
                ));
            }
        } else {
            panic!("the write to {sandbox} while partitioned did not commit: {probe:?}");
        }

        let dropped = proxy.dropped().snapshot();
        let (to_gateway, to_supervisor) =
            (dropped.0 - dropped_before.0, dropped.1 - dropped_before.1);
        if matches!(kind, Partition::Blackhole | Partition::DropToGateway) {
            assert!(to_gateway > 0, "{kind:?} dropped nothing to the gateway");
        }
        if matches!(kind, Partition::Blackhole | Partition::DropToSupervisor) {
            assert!(
                to_supervisor > 0,
                "{kind:?} dropped nothing to the supervisors"
            );
        }

        let healed_at = openshell_gateway::store::now_ms();
        let healed = Instant::now();
        proxy.set(Partition::Pass);
        run.fault(format!(
            "healed {kind:?} ({to_gateway} bytes to the gateway and {to_supervisor} to the supervisors dropped)"
        ));
        // Back: a session opened after the heal that has been heard from since, which a
        // session whose acceptance was lost on a broken connection never is.
        eventually(&format!("reconnected after {kind:?}"), DEADLINE, || {
            let api = api.clone();
            let ids = ids.clone();
            async move {
                let now = sessions(&api).await?;
                ids.iter()
                    .all(|id| {
                        now.get(id).is_some_and(|s| {
                            let connected = millis(s.connected_at.as_ref());
                            connected >= healed_at
                                && millis(s.last_heartbeat_at.as_ref()) > connected + 1000
                        })
                    })
                    .then_some(())
            }
        })
        .await;
        eprintln!(
            "{kind:?}: reconnected {:?} after the heal",
            healed.elapsed()
        );
    }
    let report = run.finish("partition").await;
    assert!(report.violations.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_partition_sqlite() {
    partition(Backend::Sqlite, 41).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_partition_postgres() {
    partition(Backend::Postgres, 42).await;
}

/// Records a write the scenario made itself, sent at `sent_at`, so the checker judges it like
/// the workload's.
fn record(
    history: &SharedHistory,
    kind: WriteKind,
    key: String,
    op: pb::Operation,
    sent_at: Instant,
) {
    let mut h = history.lock().unwrap();
    let states = h.operation_states.entry(op.id.clone()).or_default();
    let state = openshell_e2e::state(&op);
    if states.last() != Some(&state) {
        states.push(state);
    }
    let seq = u64::try_from(h.writes.len()).unwrap() + 2_000_000;
    h.writes.push(WriteRecord {
        seq,
        key,
        kind,
        outcome: Outcome::Committed {
            operation: Some(Box::new(op)),
            policy_revision: 0,
            policy_hash: String::new(),
        },
        attempts: 1,
        sent_at,
        answered_at: Instant::now(),
    });
}

/// How the fanout ended for the fleet.
enum FanoutEnd {
    /// APPLIED or FAILED.
    Ended(Box<pb::Operation>),
    /// Every fleet sandbox's target ended; what is left pending are sandboxes the workload
    /// created without a supervisor, which keep a fleet operation open until they are deleted.
    ReachedTheFleet,
}

/// Waits up to [`DEADLINE`] for fanout `id` to end for the fleet; else returns its pending
/// targets with what `sessions inspect` says of each.
async fn fanout_end(api: &Api, id: &str) -> Result<FanoutEnd, String> {
    let deadline = Instant::now() + DEADLINE;
    let mut pending_targets = Vec::new();
    loop {
        if let Ok(op) = api
            .clone()
            .get_operation(pb::GetOperationRequest { id: id.into() })
            .await
        {
            let op = op.into_inner();
            if matches!(
                openshell_e2e::state(&op),
                pb::OperationState::Applied | pb::OperationState::Failed
            ) {
                return Ok(FanoutEnd::Ended(Box::new(op)));
            }
        }
        if let Ok(targets) = api
            .clone()
            .list_operation_targets(pb::ListOperationTargetsRequest {
                operation_id: id.into(),
                states: vec![
                    pb::OperationState::Pending.into(),
                    pb::OperationState::Delivered.into(),
                ],
                page_size: 1000,
                page_token: String::new(),
            })
            .await
        {
            pending_targets = targets.into_inner().targets;
            if pending_targets
                .iter()
                .all(|t| t.sandbox_name.starts_with(CHURN_PREFIX))
            {
                return Ok(FanoutEnd::ReachedTheFleet);
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut pending = Vec::new();
    for target in pending_targets {
        let seen = openshell_e2e::inspect(api, &target.sandbox_id).await;
        pending.push(format!(
            "{target:?}; inspect: connected {}, session {:?}, components {:?}",
            seen.connected, seen.session_id, seen.components
        ));
    }
    Err(pending.join("\n"))
}

/// When the supervisor first had global settings revision `revision` (or a later one) active.
fn activated_at(state_dir: &Path, revision: u64) -> Option<u64> {
    let entries: Vec<ApplyLogEntry> = apply_log::read(state_dir).ok()?;
    entries
        .iter()
        .filter(|e| e.global_settings_revision >= revision)
        .map(|e| e.at_ms)
        .min()
}

/// Per step of writing the state directory; an apply takes a dozen steps, so several seconds.
const SLOW_STEP: &str = "500ms";

/// (5) Slow supervisors: a third of the fleet writes its state directory slowly (the
/// supervisor's test hook), so each of their applies takes seconds. Global changes (fanouts)
/// and sandbox writes go on meanwhile. Checked by the order of events, not by durations: every
/// fast supervisor activated the fanout's revision before any slow one did; a WAIT_FOR_APPLY
/// write to a fast sandbox, made right after the fanout, ended APPLIED (or SUPERSEDED by the
/// workload's own later write to that sandbox) while no slow supervisor
/// had the fanout active yet; the fanout's operation ends for every fleet sandbox (sandboxes the
/// workload created without a supervisor keep it open until deleted), and the checker passes.
async fn slow_supervisors(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(6), 6);
    let mut run = Run::start(backend, config.clone(), &[]).await;
    let api = run.api();
    let endpoint = run.gateway.endpoint();
    let count = run.fleet.members.len();
    let slow: Vec<usize> = (0..count).filter(|i| i % 3 == 0).collect();
    let fast: Vec<usize> = (0..count).filter(|i| i % 3 != 0).collect();
    for &i in &slow {
        let member = &mut run.fleet.members[i];
        member.env = vec![(TEST_WRITE_DELAY_ENV.to_string(), SLOW_STEP.to_string())];
        member.start_supervisor(&endpoint);
    }
    run.fleet.wait_connected(&api, DEADLINE).await;
    // Under fail_closed, the default, a fast sandbox whose latest policy is one its hook
    // refuses stays quarantined and applies no later change, so a probe write to it would
    // fail for a reason this scenario is not about; with last-known-good it keeps applying.
    let retain = api
        .clone()
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting(
                "policy_validation_failure_mode",
                "retain_last_valid",
            )],
            request_id: format!("chaos-{seed}-slow-retain"),
            ..to_global()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    let retain = openshell_e2e::terminal_operation(&api, &retain.id).await;
    assert_eq!(
        openshell_e2e::state(&retain),
        pb::OperationState::Applied,
        "{retain:?}"
    );
    run.start_workload();
    let end = Instant::now() + config.duration;
    let mut round: i64 = 0;
    while round == 0 || Instant::now() < end {
        round += 1;
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(300), Duration::from_secs(1)),
        )
        .await;
        let value = 70_000 + round;
        let key = format!("chaos-{seed}-slow-fanout-{round}");
        let sent_at = Instant::now();
        let response = api
            .clone()
            .update_config(pb::UpdateConfigRequest {
                settings: vec![raw_setting(GLOBAL_SETTING, &value.to_string())],
                request_id: key.clone(),
                ..to_global()
            })
            .await
            .unwrap()
            .into_inner();
        let revision = response.settings_revision;
        let fanout = response.operation.clone().unwrap();
        record(
            &run.history,
            WriteKind::GlobalSetting { value },
            key,
            fanout.clone(),
            sent_at,
        );
        run.fault(format!(
            "fanout of global settings revision {revision} to slow supervisors"
        ));

        let target = fast[run.rng.index(fast.len())];
        let sandbox = run.fleet.members[target].name.clone();
        let key = format!("chaos-{seed}-slow-fast-{round}");
        let value = format!("fast-{round}");
        let sent_at = Instant::now();
        let applied = api
            .clone()
            .update_config(pb::UpdateConfigRequest {
                settings: vec![raw_setting(SANDBOX_SETTING, &value)],
                request_id: key.clone(),
                mode: pb::UpdateMode::WaitForApply.into(),
                wait: openshell_e2e::wait_for(Duration::from_secs(120)),
                ..to_sandbox(&sandbox)
            })
            .await
            .unwrap()
            .into_inner()
            .operation
            .unwrap();
        let applied_state = openshell_e2e::state(&applied);
        let slow_done: Vec<String> = slow
            .iter()
            .filter(|&&i| activated_at(&run.fleet.members[i].state_dir(), revision).is_some())
            .map(|&i| run.fleet.members[i].name.clone())
            .collect();
        record(
            &run.history,
            WriteKind::SandboxSetting {
                sandbox: sandbox.clone(),
                value,
            },
            key,
            applied.clone(),
            sent_at,
        );
        // The workload writes to fleet sandboxes too: a later write to the same sandbox that
        // reaches it first supersedes this one, which is as quick an end as APPLIED.
        if !matches!(
            applied_state,
            pb::OperationState::Applied | pb::OperationState::Superseded
        ) {
            run.violation(format!(
                "the WAIT_FOR_APPLY write to fast {sandbox} during the slow fanout ended {applied_state:?}: {applied:?}"
            ));
        }
        if !slow_done.is_empty() {
            run.violation(format!(
                "the write to fast {sandbox} waited for the slow fanout: {slow_done:?} had revision {revision} active first"
            ));
        }

        // The fanout ends once the slow supervisors are through.
        let ended = match fanout_end(&api, &fanout.id).await {
            Ok(FanoutEnd::Ended(op)) => format!("ended {:?}", openshell_e2e::state(&op)),
            Ok(FanoutEnd::ReachedTheFleet) => {
                "reached every fleet supervisor (only sandboxes without one pending)".into()
            }
            Err(pending) => {
                run.violation(format!(
                    "fanout {} (global settings revision {revision}) did not end within \
                     {DEADLINE:?}; pending: {pending}",
                    fanout.id
                ));
                break;
            }
        };
        History::fault(&run.history, format!("fanout {} {ended}", fanout.id));
        let times = |members: &[usize]| -> Vec<(String, Option<u64>)> {
            members
                .iter()
                .map(|&i| {
                    let m = &run.fleet.members[i];
                    (m.name.clone(), activated_at(&m.state_dir(), revision))
                })
                .collect()
        };
        let fast_times = times(&fast);
        let slow_times = times(&slow);
        let last_fast = fast_times
            .iter()
            .map(|(_, t)| *t)
            .collect::<Option<Vec<u64>>>()
            .and_then(|times| times.into_iter().max());
        let first_slow = slow_times.iter().filter_map(|(_, t)| *t).min();
        eprintln!(
            "fanout of revision {revision}: the last fast supervisor activated it at {last_fast:?}, \
             the first slow one at {first_slow:?} (ms since the epoch)"
        );
        match (last_fast, first_slow) {
            (Some(fast_at), Some(slow_at)) if fast_at < slow_at => {}
            _ => run.violation(format!(
                "revision {revision}: a fast supervisor did not activate it before every slow one \
                 (fast {fast_times:?}, slow {slow_times:?})"
            )),
        }
    }
    let report = run.finish("slow-supervisors").await;
    assert!(report.violations.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_slow_supervisors_sqlite() {
    slow_supervisors(Backend::Sqlite, 51).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_slow_supervisors_postgres() {
    slow_supervisors(Backend::Postgres, 52).await;
}
