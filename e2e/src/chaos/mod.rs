//! Fault injection on real processes: a gateway process on SQLite or PostgreSQL, supervisor
//! processes, a seeded random workload of writes ([`workload`]), faults made by the
//! scenarios of `e2e/tests/chaos.rs`, and a checker ([`checker`]) that reads the histories at
//! the end and names every violation of the product's guarantees.
//!
//! A run is reproducible from its seed: the workload's choices and the faults' timing come
//! from one [`Prng`]. What the machine does in between (scheduling, the kernel) is not, which
//! is why the checker judges histories, not timings.
//!
//! Knobs, from the environment (`scripts/chaos.sh` sets them):
//! - `OPENSHELL_CHAOS_SEED`: the seed (default: the scenario's own);
//! - `OPENSHELL_CHAOS_DURATION`: how long faults are injected, e.g. `10m` (default: a few
//!   seconds, what CI affords);
//! - `OPENSHELL_CHAOS_SUPERVISORS`: supervisor processes per run (default: the scenario's);
//! - `OPENSHELL_CHAOS_REPORT`: a file each run appends its figures to, one JSON line.

pub mod checker;
pub mod fault_proxy;
pub mod prng;
pub mod replicas;
pub mod store_faults;
pub mod workload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_proto::v1 as pb;
use tonic::transport::Endpoint;

use self::prng::Prng;
use crate::process::{ChildGuard, SupervisorProcess, spawn_gateway, spawn_supervisor_with};
use crate::{Api, BearerToken, TOKEN, TestStore};

pub const SEED_ENV: &str = "OPENSHELL_CHAOS_SEED";
pub const DURATION_ENV: &str = "OPENSHELL_CHAOS_DURATION";
pub const SUPERVISORS_ENV: &str = "OPENSHELL_CHAOS_SUPERVISORS";

/// The on-apply hook every chaos supervisor runs: refuses a policy with a port in
/// [`workload::REFUSED_PORTS`].
pub const REFUSING_HOOK: &str =
    r#"! grep -Eq '"port": ?66[0-9][0-9][^0-9]' "$OPENSHELL_POLICY_FILE""#;

/// How big and how long a run is.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub seed: u64,
    /// How long the workload runs while faults are injected.
    pub duration: Duration,
    pub supervisors: usize,
    /// How long, after the last fault healed, every operation has to end and every supervisor
    /// to converge before the checker calls it a violation.
    pub convergence_bound: Duration,
}

impl ChaosConfig {
    /// The scenario's defaults, overridden by the environment.
    pub fn from_env(seed: u64, duration: Duration, supervisors: usize) -> Self {
        let seed = std::env::var(SEED_ENV)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(seed);
        let duration = std::env::var(DURATION_ENV)
            .ok()
            .and_then(|s| parse_duration(s.trim()))
            .unwrap_or(duration);
        let supervisors = std::env::var(SUPERVISORS_ENV)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(supervisors);
        Self {
            seed,
            duration,
            supervisors,
            convergence_bound: Duration::from_secs(90),
        }
    }
}

/// `90s`, `10m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let n: u64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

/// A client whose channel connects lazily and reconnects after the gateway comes back, with a
/// deadline on every call, so a request to a dead or partitioned gateway fails instead of
/// hanging the workload.
pub fn lazy_api(endpoint: &str) -> Api {
    let channel = Endpoint::from_shared(endpoint.to_string())
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .connect_lazy();
    crate::Api::new(channel, BearerToken(Some(TOKEN.into())))
}

/// A gateway process on a store that outlives it, restartable on the same port.
pub struct GatewayProcess {
    pub store: TestStore,
    pub port: u16,
    args: Vec<String>,
    guard: Option<ChildGuard>,
    starts: u32,
    /// Where the directory went once kept ([`GatewayProcess::keep_files`]).
    kept_at: Option<PathBuf>,
}

impl GatewayProcess {
    /// Starts a push-mode gateway on `store` (its data dir holds the generated keys, so a
    /// restart opens what the last run sealed).
    pub fn start(store: TestStore) -> Self {
        Self::start_with(store, &[])
    }

    /// [`GatewayProcess::start`] with `extra` arguments after the usual ones (a replica's id
    /// and shared secrets, more operator tokens).
    pub fn start_with(store: TestStore, extra: &[String]) -> Self {
        let port = crate::process::free_port();
        let data_dir = store.dir.path().join("gateway-data");
        std::fs::create_dir_all(&data_dir).unwrap();
        let args = vec![
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--database-url".into(),
            store.url.clone(),
            "--operator-token".into(),
            format!("ci={TOKEN}"),
            "--metrics-listen".into(),
            "off".into(),
            "--config-delivery-mode".into(),
            "push".into(),
            "--heartbeat-interval".into(),
            "500ms".into(),
        ];
        let args = [args, extra.to_vec()].concat();
        let mut gateway = Self {
            store,
            port,
            args,
            guard: None,
            starts: 0,
            kept_at: None,
        };
        gateway.spawn();
        gateway
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let log = self.log_path(self.starts);
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.guard = Some(spawn_gateway(&args, &[], log, self.port));
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn api(&self) -> Api {
        lazy_api(&self.endpoint())
    }

    pub fn is_up(&self) -> bool {
        self.guard.is_some()
    }

    /// The process id while the gateway process runs: the same one before and after a fault
    /// proves it recovered without a restart.
    pub fn running_pid(&mut self) -> Option<u32> {
        let guard = self.guard.as_mut()?;
        matches!(guard.child.try_wait(), Ok(None)).then(|| guard.child.id())
    }

    /// SIGKILL: no graceful anything.
    pub fn kill(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            guard.child.kill().ok();
            guard.child.wait().ok();
        }
    }

    /// Starts it again after [`GatewayProcess::kill`]; waits until it listens.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Keeps this gateway's directory (its store, data directory and logs, and the fleet's
    /// state directories when they were put there) past the test, for a post-mortem; returns
    /// where it is.
    pub fn keep_files(&mut self) -> PathBuf {
        let dir = std::mem::replace(&mut self.store.dir, tempfile::tempdir().unwrap());
        let kept = dir.keep();
        // Log paths are derived from the directory: later reads must find them where they are.
        self.kept_at = Some(kept.clone());
        kept
    }

    fn log_path(&self, start: u32) -> PathBuf {
        self.kept_at
            .as_deref()
            .unwrap_or(self.store.dir.path())
            .join(format!("gateway-{start}.log"))
    }

    /// Every log this gateway wrote, for a failure message.
    pub fn logs(&self) -> String {
        (1..=self.starts)
            .map(|n| {
                let path = self.log_path(n);
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                format!("--- {}\n{}", path.display(), tail(&text, 4000))
            })
            .collect()
    }
}

fn tail(text: &str, bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// One sandbox of the run and its supervisor process.
pub struct Member {
    pub id: String,
    pub name: String,
    pub credential: String,
    pub dir: PathBuf,
    pub supervisor: Option<SupervisorProcess>,
    /// Extra environment for its supervisor (a test hook).
    pub env: Vec<(String, String)>,
}

impl Member {
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Starts (or starts again) its supervisor on `endpoint`, with the refusing hook.
    pub fn start_supervisor(&mut self, endpoint: &str) {
        self.stop_supervisor();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.supervisor = Some(spawn_supervisor_with(
            endpoint,
            &self.id,
            &self.credential,
            &self.dir,
            &["--on-apply", REFUSING_HOOK],
            &env,
        ));
    }

    /// SIGKILL of the supervisor and its workload.
    pub fn stop_supervisor(&mut self) {
        if let Some(supervisor) = self.supervisor.take() {
            supervisor.kill();
        }
    }

    /// Whether a line its supervisor logged since its last start holds both `event` and
    /// `detail`.
    pub fn logged(&self, event: &str, detail: &str) -> bool {
        std::fs::read_to_string(self.dir.join("supervisor.log"))
            .unwrap_or_default()
            .lines()
            .any(|line| line.contains(event) && line.contains(detail))
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("supervisor.log")).unwrap_or_default();
        tail(&text, 3000).to_string()
    }
}

/// The sandboxes of a run with their supervisors.
pub struct Fleet {
    pub members: Vec<Member>,
}

impl Fleet {
    /// Creates `count` sandboxes with the example policy and starts a supervisor for each.
    pub async fn start(
        api: &mut Api,
        endpoint: &str,
        root: &Path,
        count: usize,
        env: &[(String, String)],
    ) -> Self {
        Self::start_each(api, root, count, env, |_| endpoint.to_string()).await
    }

    pub fn ids(&self) -> Vec<String> {
        self.members.iter().map(|m| m.id.clone()).collect()
    }

    /// Waits until every running supervisor has a session.
    pub async fn wait_connected(&self, api: &Api, deadline: Duration) {
        let want: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.supervisor.is_some())
            .map(|m| m.id.clone())
            .collect();
        crate::eventually("every supervisor's session", deadline, || {
            let mut api = api.clone();
            let want = want.clone();
            async move {
                let sessions = api
                    .list_sessions(pb::ListSessionsRequest {})
                    .await
                    .ok()?
                    .into_inner()
                    .sessions;
                want.iter()
                    .all(|id| sessions.iter().any(|s| &s.sandbox_id == id))
                    .then_some(())
            }
        })
        .await;
    }
}

/// One run: a gateway process on a store, the fleet, and the workload once started.
pub struct Run {
    pub config: ChaosConfig,
    pub gateway: GatewayProcess,
    pub fleet: Fleet,
    pub history: workload::SharedHistory,
    /// Choices of the scenario itself (fault timing, victims).
    pub rng: Prng,
    workload_rng: Prng,
    workload: Option<workload::Workload>,
    backend: crate::Backend,
    fanouts: u32,
    /// File systems the scenario mounted, unmounted when the run is dropped.
    mounts: Vec<PathBuf>,
}

impl Drop for Run {
    /// Supervisors first: they hold files open on the mounts.
    fn drop(&mut self) {
        for member in &mut self.fleet.members {
            member.stop_supervisor();
        }
        for mount in self.mounts.drain(..) {
            let _ = std::process::Command::new("umount").arg(&mount).status();
        }
    }
}

impl Run {
    /// Starts the gateway, creates the provider and the sandboxes, starts their supervisors
    /// (with `supervisor_env`) and waits for their sessions.
    pub async fn start(
        backend: crate::Backend,
        config: ChaosConfig,
        supervisor_env: &[(String, String)],
    ) -> Self {
        Self::start_routed(backend, config, supervisor_env, GatewayProcess::endpoint).await
    }

    /// [`Run::start`] with the supervisors connecting where `route` says, given the started
    /// gateway (a [`fault_proxy::FaultProxy`] in front of it, say); the scenario's own calls
    /// still go to the gateway itself.
    pub async fn start_routed(
        backend: crate::Backend,
        config: ChaosConfig,
        supervisor_env: &[(String, String)],
        route: impl FnOnce(&GatewayProcess) -> String,
    ) -> Self {
        let gateway = GatewayProcess::start(TestStore::new(backend).await);
        Self::start_fleet(gateway, config, supervisor_env, route).await
    }

    /// [`Run::start`] on a gateway the scenario started on a store of its own (a private
    /// database server, a database on a file system it can fill).
    pub async fn start_on(
        gateway: GatewayProcess,
        config: ChaosConfig,
        supervisor_env: &[(String, String)],
    ) -> Self {
        Self::start_fleet(gateway, config, supervisor_env, GatewayProcess::endpoint).await
    }

    /// Creates the provider and the sandboxes on `gateway`, starts their supervisors on
    /// the address `route` gives and waits for their sessions.
    async fn start_fleet(
        gateway: GatewayProcess,
        config: ChaosConfig,
        supervisor_env: &[(String, String)],
        route: impl FnOnce(&GatewayProcess) -> String,
    ) -> Self {
        let backend = gateway.store.backend;
        let root = gateway.store.dir.path().to_path_buf();
        let mut api = gateway.api();
        workload::create_provider(&mut api).await;
        let fleet = Fleet::start(
            &mut api,
            &route(&gateway),
            &root,
            config.supervisors,
            supervisor_env,
        )
        .await;
        fleet.wait_connected(&api, Duration::from_secs(120)).await;
        Self::assemble(backend, config, gateway, fleet)
    }

    pub fn api(&self) -> Api {
        self.gateway.api()
    }

    /// Starts the random workload.
    pub fn start_workload(&mut self) {
        self.start_workload_on(false);
    }

    /// Starts the random workload, with stops and starts of the fleet's sandboxes among its
    /// writes: for scenarios that never wait for every session in the middle of the run.
    pub fn start_workload_with_lifecycle(&mut self) {
        self.start_workload_on(true);
    }

    fn start_workload_on(&mut self, lifecycle: bool) {
        let targets = workload::Targets {
            sandboxes: self.fleet.members.iter().map(|m| m.name.clone()).collect(),
            seed: self.config.seed,
            lifecycle,
        };
        self.workload = Some(workload::Workload::start(
            self.api(),
            targets,
            self.workload_rng.clone(),
            self.history.clone(),
        ));
    }

    /// A global setting write: a fanout to every supervisor, recorded like the workload's.
    /// Returns once committed (the write is retried through a gateway restart).
    pub fn fanout(&mut self) -> tokio::task::JoinHandle<workload::Outcome> {
        self.fanouts += 1;
        let value = 50_000 + i64::from(self.fanouts);
        let key = format!("chaos-{}-fanout-{}", self.config.seed, self.fanouts);
        let mut api = self.api();
        let history = self.history.clone();
        tokio::spawn(async move {
            workload::write_recorded(
                &mut api,
                workload::WriteKind::GlobalSetting { value },
                key,
                &history,
            )
            .await
        })
    }

    /// Moves member `index`'s state directory onto a tmpfs of `size` (`1m`) of its own, so the
    /// scenario can fill it or make it read-only; the supervisor restarts on the empty state
    /// directory and bootstraps from the gateway. `Err` when this process may not mount (not
    /// root, no CAP_SYS_ADMIN), with the reason.
    pub fn mount_state_dir(&mut self, index: usize, size: &str) -> Result<PathBuf, String> {
        let endpoint = self.gateway.endpoint();
        let member = &mut self.fleet.members[index];
        member.stop_supervisor();
        let dir = member.state_dir();
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|err| format!("mount could not be run: {err}"))?;
        if !status.status.success() {
            member.start_supervisor(&endpoint);
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&status.stderr).trim()
            ));
        }
        self.mounts.push(dir.clone());
        member.start_supervisor(&endpoint);
        Ok(dir)
    }

    /// Writes an accepted policy to every sandbox whose last policy write is one the hook
    /// refuses. Under `fail_closed` (the default failure mode, which the runs keep) such a
    /// sandbox stays quarantined and takes no later change until a policy it accepts
    /// arrives, by design: without this, whether its settings converge would depend on
    /// where the workload's last policy write happened to land.
    async fn end_on_accepted_policies(&mut self) {
        let mut last: std::collections::HashMap<String, bool> = Default::default();
        for w in &self.history.lock().unwrap().writes {
            if let workload::WriteKind::Policy {
                sandbox, refused, ..
            } = &w.kind
                && !matches!(w.outcome, workload::Outcome::Refused { .. })
            {
                last.insert(sandbox.clone(), *refused);
            }
        }
        let mut api = self.api();
        let mut refused: Vec<String> = last
            .into_iter()
            .filter_map(|(sandbox, refused)| refused.then_some(sandbox))
            .collect();
        refused.sort();
        for (n, sandbox) in refused.into_iter().enumerate() {
            let port = 9000 + u32::try_from(n).unwrap_or(0);
            let key = format!("chaos-{}-final-{n}", self.config.seed);
            let kind = workload::WriteKind::Policy {
                sandbox,
                port,
                refused: false,
            };
            workload::write_recorded(&mut api, kind, key, &self.history).await;
        }
    }

    /// Records what a scenario found wrong on the spot; [`Run::finish`] fails with it.
    pub fn violation(&self, what: impl Into<String>) {
        self.history.lock().unwrap().violations.push(what.into());
    }

    /// Records a fault in the history.
    pub fn fault(&self, what: impl Into<String>) {
        workload::History::fault(&self.history, what);
    }

    /// Stops the workload, marks the heal, runs the checker, and fails the test with the
    /// violations and the logs that tell them, if any.
    pub async fn finish(mut self, scenario: &str) -> checker::Report {
        if let Some(workload) = self.workload.take() {
            workload.stop().await;
        }
        self.end_on_accepted_policies().await;
        workload::History::healed(&self.history);
        let views: Vec<checker::SupervisorView> = self
            .fleet
            .members
            .iter_mut()
            .map(|m| checker::SupervisorView {
                sandbox_id: m.id.clone(),
                state_dir: m.state_dir(),
                live: m.supervisor.as_mut().is_some_and(|s| s.is_running()),
            })
            .collect();
        let mut report = checker::check(
            &self.api(),
            &self.history,
            &views,
            self.config.convergence_bound,
        )
        .await;
        report.scenario = scenario.into();
        report.backend = format!("{:?}", self.backend).to_lowercase();
        report.seed = self.config.seed;
        report.supervisors = self.fleet.members.len();
        report.append_to_report_file();
        eprintln!(
            "chaos {scenario} on {} seed {}: {} supervisors, {} faults, {} writes ({} committed, \
             {} refused, {} unknown, {} retried; {} sandbox stops, starts, creations and \
             deletions), {} operations ({} applied, {} failed), {} lost, \
             {} stuck, converged {} ms after the heal",
            report.backend,
            report.seed,
            report.supervisors,
            report.faults,
            report.writes,
            report.committed,
            report.refused,
            report.unknown,
            report.retried,
            report.sandbox_lifecycle_writes,
            report.operations,
            report.applied,
            report.failed,
            report.lost_updates,
            report.stuck_operations,
            report.convergence_ms
        );
        for w in self.history.lock().unwrap().writes.iter() {
            if !matches!(w.outcome, workload::Outcome::Committed { .. }) {
                eprintln!("  write {} {:?}: {:?}", w.seq, w.kind, w.outcome);
            }
        }
        if !report.violations.is_empty() {
            // The logs of the supervisors a violation names, else of the first.
            let named: Vec<&Member> = self
                .fleet
                .members
                .iter()
                .filter(|m| report.violations.iter().any(|v| v.contains(&m.id)))
                .take(3)
                .collect();
            let shown = if named.is_empty() {
                self.fleet.members.iter().take(1).collect()
            } else {
                named
            };
            let logs: String = shown
                .iter()
                .map(|m| format!("--- supervisor {} ({})\n{}\n", m.name, m.id, m.log_tail()))
                .collect();
            // Kept for a post-mortem: the stores, state directories and every log.
            let kept = self.gateway.keep_files();
            panic!(
                "chaos {scenario} (seed {}) found {} violation(s) (everything is kept in {}):\n{}\n{}\n{logs}",
                self.config.seed,
                report.violations.len(),
                kept.display(),
                report.violations.join("\n"),
                self.gateway.logs()
            );
        }
        report
    }
}
