//! The coordinator: starts the gateway and swarm processes, creates sandboxes through the SDK,
//! runs the scenarios in phases that share setup, and writes the report.
//!
//! Phase 1 (`--sessions`, 1k): single-sandbox latency in push, fleet convergence, then the
//! gateway restarts in poll mode for poll latency.
//! Phase 2 (`--fleet-sessions`, 10k): idle cost in push (fresh gateway process), fleet
//! convergence, no starvation, reconnect storm, then idle cost in poll (fresh gateway process).
//! Phase 3: commit throughput on fresh SQLite and PostgreSQL stores.
//! Phase 4 (`--replicas-sessions`, 1k; PostgreSQL only): 2, then 3 gateway replicas on one
//! database, sessions spread over them, writes through the owning and a non-owning replica.
//!
//! A fleet operation targets every live sandbox of the store, so each phase's store holds
//! exactly as many sandboxes as there are sessions (phase 2 adds sandboxes to phase 1's).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use clap::ValueEnum;
use openshell_core::Secret;
use openshell_gateway::DeliveryMode;
use openshell_sdk::{
    Client, OperationState, SandboxRef, Target, UpdateConfig, UpdateMode, UpdateResult,
};
use rand::Rng;

use crate::gateway::{GatewayLauncher, GatewayProc, ReplicaSpec, StoreSpec, TlsMaterial};
use crate::pgbench::{self, PgbenchRun};
use crate::report::{
    self, ConnectRecord, FleetParams, FleetRound, FleetRun, FleetScenario, GroupCommit, Harness,
    IdleParams, IdleRun, IdleScenario, LatencyParams, LatencyRun, LatencyScenario, ReplicaWrites,
    ReplicasFleetParams, ReplicasFleetScenario, ReplicasParams, ReplicasRun, ReplicasScenario,
    Report, Scenarios, SerialCeiling, StarvationParams, StarvationScenario, StormParams,
    StormScenario, ThroughputParams, ThroughputRun, ThroughputScenario,
};
use crate::setup::{self, BenchSandbox, policy_with_port};
use crate::stats::{Summary, median, round3};
use crate::swarm::{Collected, SimSandbox, SwarmProc, Until};
use crate::sys::{Machine, MachineCpu, mono_ns, ms_between, pause, raise_fd_limit};

/// The setting fleet changes write (an integer, so every round can use a new value).
const FLEET_KEY: &str = "log_rate_limit_per_second";
/// Production poll interval of supervisors.
const PRODUCTION_POLL: Duration = Duration::from_secs(10);
/// Gateway heartbeat and reconcile defaults (the harness does not change them).
const HEARTBEAT_S: u64 = openshell_gateway::config::DEFAULT_HEARTBEAT_INTERVAL.as_secs();
const RECONCILE_S: u64 = 30;
const BACKOFF: &str = "supervisor default: 1 s × 1.6 per attempt, ±20 % jitter, cap 30 s";
/// Replica counts of the cross-replica scenario, in the order they run.
const REPLICA_COUNTS: [usize; 2] = [2, 3];
/// Samples of each part of the latency floor, at least (quick mode takes few latency samples).
const FLOOR_SAMPLES_MIN: usize = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioId {
    /// 1. Single-sandbox latency, push and poll.
    Latency,
    /// 2. Fleet convergence at --sessions and --fleet-sessions.
    Fleet,
    /// 3. Sandbox writes while a fleet fanout is in flight.
    Starvation,
    /// 4. Gateway memory and CPU per idle session, push and poll.
    Idle,
    /// 5. COMMIT_ONLY writes per second, SQLite and PostgreSQL.
    Throughput,
    /// 6. Every supervisor reconnecting after a gateway restart.
    Storm,
    /// 7. Writes through a replica that does not own the session, PostgreSQL.
    Replicas,
    /// 8. Three replicas with --fleet-sessions each, one global change, PostgreSQL.
    ReplicasFleet,
}

/// Options of a benchmark run (the default command).
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Small N and few samples: a smoke test that finishes well under a minute (CI runs it).
    #[arg(long)]
    pub quick: bool,
    /// Where report.json, report.md and the child processes' logs go.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Store of the gateway under test for scenarios 1-4 and 6.
    #[arg(long, value_enum, default_value_t = StoreKind::Sqlite)]
    pub store: StoreKind,
    /// Admin URL of a PostgreSQL server. A fresh database is created for each use and dropped
    /// afterwards. Required by `--store postgres`; with SQLite it adds the PostgreSQL
    /// commit-throughput run.
    #[arg(long, env = "OPENSHELL_BENCH_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<String>,
    /// Sessions for single-sandbox latency and the smaller fleet [default: 1000; quick: 50].
    #[arg(long)]
    pub sessions: Option<usize>,
    /// Sessions for the larger fleet, no starvation, idle cost and the reconnect storm
    /// [default: 10000; quick: 200].
    #[arg(long)]
    pub fleet_sessions: Option<usize>,
    /// Sessions spread over the replicas of the cross-replica scenario
    /// [default: 1000; quick: 50].
    #[arg(long)]
    pub replicas_sessions: Option<usize>,
    /// Push latency samples; in the cross-replica scenario, writes through each route
    /// [default: 200; quick: 5].
    #[arg(long)]
    pub samples: Option<usize>,
    /// Poll latency samples at the production 10 s interval [default: 10; quick: 0].
    #[arg(long)]
    pub poll_samples: Option<usize>,
    /// Poll latency samples at --short-poll-interval [default: 30; quick: 3].
    #[arg(long)]
    pub short_poll_samples: Option<usize>,
    /// Poll interval of the measured supervisor for the short-interval poll run
    /// [default: 1s; quick: 250ms].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub short_poll_interval: Option<Duration>,
    /// Global changes per fleet size, and puts per etcd watcher count [default: 7; quick: 1].
    #[arg(long)]
    pub fleet_rounds: Option<usize>,
    /// Idle time after connecting before memory is read [default: 60s, so reconcile is in its
    /// steady state; quick: 1s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle_settle: Option<Duration>,
    /// CPU measurement window with idle sessions [default: 30s, a whole number of heartbeat
    /// (15 s), poll (10 s) and reconcile (30 s) intervals; quick: 2s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle_window: Option<Duration>,
    /// Length of each commit-throughput run [default: 10s; quick: 2s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub throughput_duration: Option<Duration>,
    /// Concurrent clients of the commit-throughput run (each its own connection and sandbox).
    #[arg(long, default_value_t = 16)]
    pub throughput_clients: usize,
    /// CPU niceness (0-19) of the simulated fleet in the no-starvation scenario. The written
    /// sandboxes' supervisors run in a process of their own at normal priority: a real
    /// supervisor does not share the gateway's cores with ten thousand others. 0 gives the
    /// fleet an equal share of the cores.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=19))]
    pub fleet_nice: u8,
    /// Sandbox WAIT_FOR_APPLY writes to time during fanouts in the no-starvation scenario
    /// (at least; fanouts run back to back until there are this many) [quick: 3, full: 400].
    /// With a hundred or so, the p99 is one of the two largest samples and swings from run to run.
    #[arg(long)]
    pub starvation_samples: Option<usize>,
    /// HTTP/2 connections the simulated supervisors share; 0 (the default): each supervisor
    /// holds a connection of its own, as real supervisors do.
    #[arg(long, default_value_t = 0)]
    pub channels: usize,
    /// Gateways serve TLS (a self-signed certificate made for the run), as in production;
    /// supervisors and clients verify it. The etcd baseline stays plaintext.
    #[arg(long)]
    pub tls: bool,
    /// Sessions started at a time when setting up (the storm scenario starts all at once).
    #[arg(long, default_value_t = 1000)]
    pub connect_batch: usize,
    /// Gateway store pool size (gateway default when absent).
    #[arg(long)]
    pub db_pool: Option<u32>,
    /// Scenarios to run (comma-separated); all when absent.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scenarios: Vec<ScenarioId>,
    /// The etcd server of the baseline measured beside each fleet size [default: `etcd` on
    /// PATH]. Without one the comparison is skipped and the report says so.
    #[arg(long)]
    pub etcd: Option<PathBuf>,
    /// Profiling: run each gateway process under this command, e.g. `heaptrack` or
    /// `valgrind --tool=callgrind` (split on whitespace).
    #[arg(long, hide = true)]
    pub gateway_wrapper: Option<String>,
    /// Log filter of the gateway and swarm processes (their logs go to the output directory).
    #[arg(long, default_value = "warn")]
    pub log: String,
}

/// Resolved parameters.
#[derive(Debug, Clone)]
struct Params {
    quick: bool,
    sessions: usize,
    fleet_sessions: usize,
    replicas_sessions: usize,
    warmup: usize,
    samples: usize,
    poll_samples: usize,
    short_poll_samples: usize,
    short_poll_interval: Duration,
    fleet_rounds: usize,
    starvation_baseline: usize,
    starvation_min_samples: usize,
    starvation_max_fanouts: usize,
    starvation_writers: usize,
    fleet_nice: u8,
    idle_settle: Duration,
    idle_window: Duration,
    throughput_duration: Duration,
    throughput_clients: usize,
    channels: usize,
    connect_batch: usize,
    wait: Duration,
    scenarios: Vec<ScenarioId>,
    etcd: Option<PathBuf>,
}

impl Params {
    fn resolve(a: &RunArgs) -> Result<Self> {
        let q = a.quick;
        let pick =
            |v: Option<usize>, quick: usize, full: usize| v.unwrap_or(if q { quick } else { full });
        let pick_d = |v: Option<Duration>, quick: u64, full: u64| {
            v.unwrap_or(Duration::from_millis(if q { quick } else { full }))
        };
        let sessions = pick(a.sessions, 50, 1000);
        let fleet_sessions = pick(a.fleet_sessions, 200, 10_000);
        if sessions < 2 {
            bail!("--sessions must be at least 2 (the latency scenario measures two sandboxes)");
        }
        if fleet_sessions < sessions {
            bail!(
                "--fleet-sessions ({fleet_sessions}) must be at least --sessions ({sessions}): \
                 the larger fleet reuses the smaller one's sandboxes"
            );
        }
        let replicas_sessions = pick(a.replicas_sessions, 50, 1000);
        let most_replicas = REPLICA_COUNTS.iter().copied().max().unwrap_or(1);
        if replicas_sessions < most_replicas {
            bail!(
                "--replicas-sessions must be at least {most_replicas} (every replica of the cross-replica scenario holds a session)"
            );
        }
        if a.throughput_clients == 0 || a.connect_batch == 0 {
            bail!("--throughput-clients and --connect-batch must be positive");
        }
        if let Some(etcd) = a.etcd.as_deref().filter(|path| !path.is_file()) {
            bail!(
                "--etcd {}: no such file; name the etcd server binary, or leave --etcd out to use the one on PATH",
                etcd.display()
            );
        }
        let scenarios = if a.scenarios.is_empty() {
            ScenarioId::value_variants().to_vec()
        } else {
            a.scenarios.clone()
        };
        Ok(Self {
            quick: q,
            sessions,
            fleet_sessions,
            replicas_sessions,
            warmup: if q { 2 } else { 10 },
            samples: pick(a.samples, 5, 200).max(1),
            poll_samples: pick(a.poll_samples, 0, 10),
            short_poll_samples: pick(a.short_poll_samples, 3, 30),
            short_poll_interval: pick_d(a.short_poll_interval, 250, 1000),
            // Seven: the median of three moved etcd's 10k notify-all between 131 and 172 ms
            // from one run to the next, and the ratios to it with it.
            fleet_rounds: pick(a.fleet_rounds, 1, 7).max(1),
            // 200, as the p99 of the writes during a fanout is judged against this one's:
            // of 20 writes the p99 is the slowest, and that moved 6-33 ms between runs.
            starvation_baseline: if q { 3 } else { 200 },
            starvation_min_samples: pick(a.starvation_samples, 3, 400).max(1),
            // About 60 writes fit in one 10k fanout; the bound only stops a
            // run whose writes never finish.
            starvation_max_fanouts: if q { 2 } else { 10 }
                .max(a.starvation_samples.unwrap_or(0) / 20),
            starvation_writers: 8.min(fleet_sessions),
            fleet_nice: a.fleet_nice,
            idle_settle: pick_d(a.idle_settle, 1000, 60_000),
            idle_window: pick_d(a.idle_window, 2000, 30_000),
            throughput_duration: pick_d(a.throughput_duration, 2000, 10_000),
            throughput_clients: a.throughput_clients,
            channels: a.channels,
            connect_batch: a.connect_batch,
            wait: Duration::from_secs(if q { 30 } else { 120 }),
            scenarios,
            etcd: a.etcd.clone(),
        })
    }

    fn runs(&self, s: ScenarioId) -> bool {
        self.scenarios.contains(&s)
    }
}

/// Values that make every write a real change.
struct Counters {
    port: u32,
    value: u64,
}

impl Counters {
    fn next_policy(&mut self) -> String {
        self.port = if self.port >= 60_000 {
            1024
        } else {
            self.port + 1
        };
        policy_with_port(self.port)
    }

    fn next_value(&mut self) -> u64 {
        self.value = if self.value >= 100_000 {
            1
        } else {
            self.value + 1
        };
        self.value
    }
}

fn sandbox_target(sb: &BenchSandbox) -> Target {
    Target::Sandbox(SandboxRef::from(sb.id.as_str()))
}

/// Elapsed time since the run started, for progress lines.
struct Clock(Instant);

impl Clock {
    fn log(&self, text: impl AsRef<str>) {
        eprintln!(
            "[{:7.1}s] {}",
            self.0.elapsed().as_secs_f64(),
            text.as_ref()
        );
    }
}

struct Bench {
    p: Params,
    machine: Machine,
    clock: Clock,
    launcher: GatewayLauncher,
    exe: PathBuf,
    out: PathBuf,
    work: tempfile::TempDir,
    /// Holds only the sandboxes; every scenario runs on a fresh copy of it.
    template: StoreSpec,
    copies: usize,
    store_name: &'static str,
    postgres_url: Option<String>,
    pg_databases: Vec<String>,
    addr: Option<SocketAddr>,
    sandboxes: Vec<BenchSandbox>,
    swarm: Option<SwarmProc>,
    counters: Counters,
    scenarios: Scenarios,
    connects: Vec<ConnectRecord>,
    notes: Vec<String>,
    db_pool: u32,
}

/// Runs the benchmark and writes the report.
pub async fn run(args: RunArgs) -> Result<()> {
    let p = Params::resolve(&args)?;
    let started = Instant::now();
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let fd_limit = raise_fd_limit();
    let out = args.out.clone();
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    for log in ["gateway.log", "swarm.log"] {
        // Fresh logs per run.
        std::fs::write(out.join(log), b"")
            .with_context(|| format!("cannot write {}", out.join(log).display()))?;
    }
    let exe = std::env::current_exe().context("cannot find the benchmark binary")?;
    let work = tempfile::Builder::new()
        .prefix("openshell-bench-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let token = format!("bench-{}", uuid::Uuid::now_v7().simple());
    let machine = Machine::detect();
    let clock = Clock(started);
    let mut pg_databases = Vec::new();
    let (store, store_name) = match args.store {
        StoreKind::Sqlite => (setup::sqlite_store(&work.path().join("main"))?, "sqlite"),
        StoreKind::Postgres => {
            let url = args.postgres_url.as_deref().ok_or_else(|| {
                anyhow!("--store postgres needs --postgres-url (an admin URL; a fresh database is created)")
            })?;
            let (store, name) = setup::postgres_store(url, &work.path().join("main")).await?;
            pg_databases.push(name);
            (store, "postgres")
        }
    };
    clock.log(format!(
        "openshell-bench {} mode, store {store_name}, machine: {}",
        if p.quick { "quick" } else { "full" },
        machine.summary()
    ));
    let mut bench = Bench {
        launcher: GatewayLauncher {
            exe: exe.clone(),
            token,
            log: args.log.clone(),
            log_path: out.join("gateway.log"),
            db_pool: args.db_pool,
            wrapper: args
                .gateway_wrapper
                .as_deref()
                .map(|w| w.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            tls: args
                .tls
                .then(|| TlsMaterial::create(&work.path().join("tls")))
                .transpose()?,
        },
        p,
        machine,
        clock,
        exe,
        out: out.clone(),
        work,
        template: store,
        copies: 0,
        store_name,
        postgres_url: args.postgres_url.clone(),
        pg_databases,
        addr: None,
        sandboxes: Vec::new(),
        swarm: None,
        counters: Counters {
            port: 1024,
            value: 1000,
        },
        scenarios: Scenarios {
            tls: args.tls,
            ..Scenarios::default()
        },
        connects: Vec::new(),
        notes: Vec::new(),
        db_pool: 0,
    };
    // Ctrl-C or SIGTERM still stops the children and drops the PostgreSQL databases.
    let result = tokio::select! {
        r = bench.run_phases() => r,
        () = interrupted() => Err(anyhow!("interrupted")),
    };
    if let Some(swarm) = bench.swarm.take() {
        swarm.finish().await.ok();
    }
    if let Some(url) = &bench.postgres_url {
        for name in &bench.pg_databases {
            setup::drop_postgres_database(url, name).await;
        }
    }
    result?;
    let mut notes = std::mem::take(&mut bench.notes);
    notes.push(
        "Latency and convergence times are taken with CLOCK_MONOTONIC, shared by the coordinator and the swarm process; \
         'call' times are measured by the SDK caller, 'ack' times when the supervisor library sent its acknowledgement."
            .into(),
    );
    notes.push(
        "The gateway, the swarm of simulated supervisors and the coordinator share this machine's cores; \
         supervisor-side work (applying, acking) therefore competes with the gateway for CPU. \
         In the no-starvation scenario the fleet's swarm runs at the niceness its parameters give, \
         and the written sandboxes' supervisors in a process of their own at normal priority."
            .into(),
    );
    let report = Report {
        tool: "openshell-bench",
        version: env!("CARGO_PKG_VERSION"),
        mode: if bench.p.quick { "quick" } else { "full" },
        store: bench.store_name,
        started_at,
        duration_s: round3(started.elapsed().as_secs_f64()),
        machine: bench.machine.clone(),
        harness: Harness {
            gateway_process: "gateway in its own process (openshell_gateway::start), restarted as a new process",
            supervisor_process: "simulated supervisors in one swarm process (openshell_supervisor::Supervisor + MemoryApplier)",
            channels: bench.p.channels,
            connect_batch: bench.p.connect_batch,
            gateway_db_pool: bench.db_pool,
            gateway_heartbeat_s: HEARTBEAT_S,
            gateway_reconcile_s: RECONCILE_S,
            supervisor_reconnect_backoff: BACKOFF,
            fd_limit,
            connects: bench.connects.clone(),
        },
        targets: report::evaluate_targets(&bench.scenarios),
        scenarios: bench.scenarios.clone(),
        notes,
    };
    report::write(&report, &out)?;
    println!("{}", report::markdown(&report));
    bench.clock.log(format!(
        "wrote {} and {}",
        out.join("report.json").display(),
        out.join("report.md").display()
    ));
    Ok(())
}

impl Bench {
    async fn run_phases(&mut self) -> Result<()> {
        use ScenarioId::*;
        if self.p.runs(Latency) || self.p.runs(Fleet) {
            self.phase_small()
                .await
                .context("phase 1 (single-sandbox latency, 1k fleet)")?;
        }
        if self.p.runs(Fleet) || self.p.runs(Starvation) || self.p.runs(Idle) || self.p.runs(Storm)
        {
            self.phase_large()
                .await
                .context("phase 2 (large fleet, no starvation, idle cost, reconnect storm)")?;
        }
        if self.p.runs(Fleet) {
            self.phase_etcd()
                .await
                .context("the etcd baseline beside the fleet sizes")?;
        }
        if self.p.runs(Throughput) {
            self.phase_throughput()
                .await
                .context("phase 3 (commit throughput)")?;
        }
        if self.p.runs(Replicas) {
            self.phase_replicas()
                .await
                .context("phase 4 (writes through a replica that does not own the session)")?;
        }
        if self.p.runs(ReplicasFleet) {
            self.phase_replicas_fleet()
                .await
                .context("phase 5 (a global change over three replicas)")?;
        }
        Ok(())
    }

    /// The etcd baseline at each fleet size measured, with the simulated supervisors'
    /// connection shape.
    async fn phase_etcd(&mut self) -> Result<()> {
        let mut sizes: Vec<usize> = self
            .scenarios
            .fleet_convergence
            .iter()
            .flat_map(|f| f.runs.iter().map(|run| run.sessions))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut baseline = crate::etcd::EtcdBaseline::default();
        let Some(exe) = crate::etcd::find(self.p.etcd.as_deref()) else {
            let why = "no etcd server found (install Debian's etcd-server, or pass --etcd PATH)";
            self.clock.log(format!("etcd baseline skipped: {why}"));
            baseline.skipped = Some(why.into());
            self.scenarios.etcd_baseline = Some(baseline);
            return Ok(());
        };
        baseline.version = crate::etcd::version(&exe);
        for watchers in sizes {
            self.clock.log(format!(
                "etcd baseline: {watchers} watchers, {}, {} rounds",
                report::connection_shape(self.p.channels),
                self.p.fleet_rounds
            ));
            let data = tempfile::tempdir_in(self.work.path()).context("no directory for etcd")?;
            let server =
                crate::etcd::EtcdServer::start(&exe, data.path(), &self.out.join("etcd.log"))
                    .await?;
            let run =
                crate::etcd::measure(&server, watchers, self.p.channels, self.p.fleet_rounds).await;
            server.stop().await;
            let run = run?;
            self.clock.log(format!(
                "  etcd: put → last of {watchers} watchers notified, median {:.1} ms; {:.1} KiB per watcher",
                run.median_notify_all_ms, run.kib_per_watcher
            ));
            baseline.runs.push(run);
        }
        self.scenarios.etcd_baseline = Some(baseline);
        Ok(())
    }

    async fn start_gateway(
        &mut self,
        store: &StoreSpec,
        mode: DeliveryMode,
    ) -> Result<GatewayProc> {
        let gw = self.launcher.start(store, mode, self.addr).await?;
        self.addr = Some(gw.addr);
        self.db_pool = gw.db_pool;
        self.clock.log(format!(
            "gateway started in {} mode at {} (pid {})",
            mode.as_str(),
            gw.addr,
            gw.pid().unwrap_or(0)
        ));
        Ok(gw)
    }

    /// Brings the template store to `n` sandboxes.
    async fn prepare(&mut self, n: usize) -> Result<()> {
        if self.sandboxes.len() >= n {
            return Ok(());
        }
        let template = self.template.clone();
        let gw = self.start_gateway(&template, DeliveryMode::Push).await?;
        let endpoint = gw.endpoint();
        self.ensure_sandboxes(&endpoint, n).await?;
        gw.stop().await?;
        Ok(())
    }

    /// A fresh copy of the template store for one scenario.
    async fn fresh_store(&mut self, label: &str) -> Result<StoreSpec> {
        self.copies += 1;
        let dir = self.work.path().join(format!("{:02}-{label}", self.copies));
        let (store, pg) =
            setup::clone_store(&self.template, self.postgres_url.as_deref(), &dir).await?;
        self.pg_databases.extend(pg);
        Ok(store)
    }

    fn swarm(&mut self, endpoint: &str) -> Result<&mut SwarmProc> {
        if self.swarm.is_none() {
            self.swarm = Some(SwarmProc::spawn(
                &self.exe,
                &[endpoint.to_string()],
                self.p.channels,
                self.launcher.ca_file(),
                &self.launcher.log,
                &self.out.join("swarm.log"),
                0,
            )?);
        }
        self.swarm
            .as_mut()
            .ok_or_else(|| anyhow!("swarm process missing"))
    }

    /// Makes sure the store has sandboxes `bench-0 … bench-{n-1}`.
    async fn ensure_sandboxes(&mut self, endpoint: &str, n: usize) -> Result<()> {
        let have = self.sandboxes.len();
        if have >= n {
            return Ok(());
        }
        let client = self.launcher.client(endpoint).await?;
        let t = Instant::now();
        let created = setup::create_sandboxes(&client, "bench", have..n, 16).await?;
        self.sandboxes.extend(created);
        self.clock.log(format!(
            "created {} sandboxes in {:.1} s ({} in the store)",
            n - have,
            t.elapsed().as_secs_f64(),
            self.sandboxes.len()
        ));
        Ok(())
    }

    /// Starts supervisors for `sims` in batches and waits until each is ready.
    async fn connect(
        &mut self,
        endpoint: &str,
        sims: Vec<SimSandbox>,
        push: bool,
        what: &str,
    ) -> Result<f64> {
        let batch = self.p.connect_batch;
        let total = sims.len();
        let t = Instant::now();
        let swarm = self.swarm(endpoint)?;
        for chunk in sims.chunks(batch) {
            start_ready(swarm, chunk.to_vec(), push).await?;
        }
        let seconds = round3(t.elapsed().as_secs_f64());
        self.clock.log(format!(
            "{total} sessions ready in {} mode after {seconds:.1} s ({what})",
            if push { "push" } else { "poll" }
        ));
        self.connects.push(ConnectRecord {
            what: what.into(),
            sessions: total,
            mode: if push { "push" } else { "poll" },
            seconds,
        });
        Ok(seconds)
    }

    async fn stop_sessions(&mut self) -> Result<()> {
        if let Some(swarm) = self.swarm.as_mut() {
            swarm.stop_all().await?;
        }
        Ok(())
    }

    fn sims(&self, n: usize, poll_ms: impl Fn(usize) -> u64) -> Vec<SimSandbox> {
        self.sandboxes[..n]
            .iter()
            .enumerate()
            .map(|(i, sb)| sb.sim(poll_ms(i)))
            .collect()
    }

    // ---------------- phase 1 ----------------

    async fn phase_small(&mut self) -> Result<()> {
        let n = self.p.sessions;
        self.prepare(n).await?;
        let production_ms = ms(PRODUCTION_POLL);
        let store = self.fresh_store("push-1k").await?;
        let mut gw = self.start_gateway(&store, DeliveryMode::Push).await?;
        let endpoint = gw.endpoint();
        let client = self.launcher.client(&endpoint).await?;
        let sims = self.sims(n, |_| production_ms);
        self.connect(
            &endpoint,
            sims,
            true,
            "single-sandbox latency and fleet, push",
        )
        .await?;
        pause(Duration::from_secs(1)).await;

        let mut push_run = None;
        let mut floor = None;
        if self.p.runs(ScenarioId::Latency) {
            self.clock.log(format!(
                "scenario 1: single-sandbox latency, push, {} sessions, {} samples",
                n, self.p.samples
            ));
            push_run = Some(
                self.latency_run("push", None, &client, 0, self.p.samples, false)
                    .await?,
            );
            self.clock
                .log("scenario 1: the floor (SQLite commit, apply fsync, gRPC round trip)");
            let scratch =
                tempfile::tempdir_in(&self.out).context("no scratch directory for the floor")?;
            floor = Some(
                crate::floor::measure(
                    scratch.path(),
                    &client,
                    self.p.samples.max(FLOOR_SAMPLES_MIN),
                )
                .await?,
            );
        }
        if self.p.runs(ScenarioId::Fleet) {
            let run = self.fleet_run(&client, &mut gw, n).await?;
            self.add_fleet_run(run);
        }
        self.stop_sessions().await?;
        gw.stop().await?;

        let Some(push) = push_run else {
            return Ok(());
        };
        let mut poll_production = None;
        let mut poll_short = None;
        if self.p.poll_samples > 0 || self.p.short_poll_samples > 0 {
            let store = self.fresh_store("poll-1k").await?;
            let gw = self.start_gateway(&store, DeliveryMode::Poll).await?;
            let client = self.launcher.client(&gw.endpoint()).await?;
            let short_ms = ms(self.p.short_poll_interval);
            // Sandbox 0 polls at the production interval, sandbox 1 at the short one; every
            // other session polls at the production interval, as a real fleet would.
            let sims = self.sims(n, |i| if i == 1 { short_ms } else { production_ms });
            self.connect(&gw.endpoint(), sims, false, "single-sandbox latency, poll")
                .await?;
            pause(Duration::from_secs(1)).await;
            if self.p.poll_samples > 0 {
                self.clock.log(format!(
                    "scenario 1: single-sandbox latency, poll every 10 s, {} samples (about {} s)",
                    self.p.poll_samples,
                    self.p.poll_samples * 10
                ));
                poll_production = Some(
                    self.latency_run(
                        "poll",
                        Some(PRODUCTION_POLL),
                        &client,
                        0,
                        self.p.poll_samples,
                        true,
                    )
                    .await?,
                );
            }
            if self.p.short_poll_samples > 0 {
                self.clock.log(format!(
                    "scenario 1: single-sandbox latency, poll every {:?}, {} samples",
                    self.p.short_poll_interval, self.p.short_poll_samples
                ));
                poll_short = Some(
                    self.latency_run(
                        "poll",
                        Some(self.p.short_poll_interval),
                        &client,
                        1,
                        self.p.short_poll_samples,
                        true,
                    )
                    .await?,
                );
            }
            self.stop_sessions().await?;
            gw.stop().await?;
        }
        let ratio = poll_production
            .as_ref()
            .filter(|p| p.call.count > 0 && push.call.p50_ms > 0.0)
            .map(|p| round3(p.call.p50_ms / push.call.p50_ms));
        let scenario = LatencyScenario {
            machine: self.machine.clone(),
            params: LatencyParams {
                store: self.store_name,
                sessions: n,
                warmup: self.p.warmup,
                write: "sandbox-scoped policy update (one network port changes), UpdateConfig WAIT_FOR_APPLY, one at a time",
                latency: "UpdateConfig call start → response with operation APPLIED (SDK caller)",
                supervisor_latency: "same call start → the supervisor library sent its ack (push) / its status report was accepted (poll)",
            },
            poll_production,
            poll_short,
            p50_ratio_poll_over_push: ratio,
            push_p50_over_floor: floor
                .as_ref()
                .filter(|f| f.p50_ms > 0.0 && push.call.count > 0)
                .map(|f| round3(push.call.p50_ms / f.p50_ms)),
            push_p99_over_p50: (push.call.count > 0 && push.call.p50_ms > 0.0)
                .then(|| round3(push.call.p99_ms / push.call.p50_ms)),
            floor,
            push,
        };
        println!(
            "{}",
            report::scenario_block("scenario 1: single-sandbox latency", &scenario)
        );
        self.scenarios.single_sandbox_latency = Some(scenario);
        Ok(())
    }

    /// Sequential WAIT_FOR_APPLY policy writes to sandbox `index`.
    async fn latency_run(
        &mut self,
        mode: &'static str,
        poll_interval: Option<Duration>,
        client: &Client,
        index: usize,
        samples: usize,
        random_phase: bool,
    ) -> Result<LatencyRun> {
        let sandbox = self.sandboxes[index].clone();
        let warmup = if poll_interval.is_some() {
            0
        } else {
            self.p.warmup
        };
        let mut call = Vec::new();
        let mut ack = Vec::new();
        let mut not_applied = 0;
        for i in 0..warmup + samples {
            if let Some(interval) = poll_interval.filter(|_| random_phase) {
                // Writes land at a random point of the poll cycle, as real writes do.
                let delay = rand::rng().random_range(0..ms(interval).max(1));
                pause(Duration::from_millis(delay)).await;
            }
            let policy = self.counters.next_policy();
            let swarm = self.swarm.as_mut().ok_or_else(|| anyhow!("no swarm"))?;
            let s =
                policy_write(client, Some((swarm, index)), &sandbox, policy, self.p.wait).await?;
            if i < warmup {
                continue;
            }
            if !s.applied {
                not_applied += 1;
                continue;
            }
            call.push(s.call_ms);
            if let Some(a) = s.ack_ms {
                ack.push(a);
            }
        }
        Ok(LatencyRun {
            mode,
            poll_interval_ms: poll_interval.map(ms),
            samples,
            call: Summary::of(&call),
            supervisor_ack: Summary::of(&ack),
            not_applied,
        })
    }

    // ---------------- fleet ----------------

    async fn fleet_run(
        &mut self,
        client: &Client,
        gw: &mut GatewayProc,
        n: usize,
    ) -> Result<FleetRun> {
        self.clock.log(format!(
            "scenario 2: fleet convergence, {n} sessions, {} rounds",
            self.p.fleet_rounds
        ));
        let mut rounds = Vec::new();
        for _ in 0..self.p.fleet_rounds {
            let value = self.counters.next_value();
            let swarm = self.swarm.as_mut().ok_or_else(|| anyhow!("no swarm"))?;
            let round =
                fleet_round(client, &mut [&mut *gw], &mut [swarm], value, self.p.wait).await?;
            self.clock.log(format!(
                "  round: last frame sent {}, all acked {:.1} ms, operation {:.1} ms ({}, {} missing)",
                round
                    .last_frame_sent_ms
                    .map_or("unknown".to_owned(), |ms| format!("{ms:.0} ms")),
                round.all_acked_ms,
                round.operation_ms,
                round.operation_state,
                round.sessions_missing
            ));
            let finished = !matches!(round.operation_state.as_str(), "PENDING" | "DELIVERED")
                && !round.operation_state.starts_with("error");
            rounds.push(round);
            if !finished {
                self.notes.push(format!(
                    "fleet convergence at {n} sessions: the fleet operation was not terminal when its {} s wait ended; \
                     later rounds at this size were skipped",
                    self.p.wait.as_secs()
                ));
                break;
            }
            pause(Duration::from_millis(500)).await;
        }
        let acked: Vec<f64> = rounds.iter().map(|r| r.all_acked_ms).collect();
        let ops: Vec<f64> = rounds.iter().map(|r| r.operation_ms).collect();
        let sent: Vec<f64> = rounds.iter().filter_map(|r| r.last_frame_sent_ms).collect();
        Ok(FleetRun {
            sessions: n,
            median_all_acked_ms: median(&acked),
            median_operation_ms: median(&ops),
            median_last_frame_sent_ms: (!sent.is_empty()).then(|| median(&sent)),
            max_all_acked_ms: Summary::of(&acked).max_ms,
            max_operation_ms: Summary::of(&ops).max_ms,
            rounds,
        })
    }

    fn add_fleet_run(&mut self, run: FleetRun) {
        let scenario = self
            .scenarios
            .fleet_convergence
            .get_or_insert_with(|| FleetScenario {
                machine: self.machine.clone(),
                params: FleetParams {
                    store: self.store_name,
                    write: "global setting change (log_rate_limit_per_second), UpdateConfig on Target::Global with WAIT_FOR_APPLY",
                    rounds: self.p.fleet_rounds,
                    all_acked: "call start → the last session's supervisor sent its ack for the new global settings revision",
                    operation: "call start → UpdateConfig returned (fleet operation terminal, per-target counts)",
                },
                runs: Vec::new(),
            });
        scenario.runs.push(run.clone());
        println!(
            "{}",
            report::scenario_block(
                &format!("scenario 2: fleet convergence ({} sessions)", run.sessions),
                &serde_json::json!({"machine": scenario.machine, "params": scenario.params, "run": run}),
            )
        );
    }

    // ---------------- phase 2 ----------------

    async fn phase_large(&mut self) -> Result<()> {
        let n = self.p.fleet_sessions;
        let production_ms = ms(PRODUCTION_POLL);
        self.prepare(n).await?;
        let run_idle = self.p.runs(ScenarioId::Idle);
        let mut idle_push = None;

        if run_idle || self.p.runs(ScenarioId::Storm) {
            // A fresh gateway process with no session yet, so its RSS baseline is clean.
            let store = self.fresh_store("idle-push-storm").await?;
            let mut gw = self.start_gateway(&store, DeliveryMode::Push).await?;
            if run_idle {
                self.clock
                    .log(format!("scenario 4: idle cost, push, {n} sessions"));
                idle_push = Some(self.idle_run(&mut gw, n, true).await?);
            } else {
                let sims = self.sims(n, |_| production_ms);
                self.connect(&gw.endpoint(), sims, true, "reconnect storm")
                    .await?;
            }
            gw.save_metrics(&self.out.join("gateway-metrics-idle-push.txt"))
                .await;
            if self.p.runs(ScenarioId::Storm) {
                pause(Duration::from_secs(1)).await;
                let (scenario, new_gw) = self.storm(gw, n).await?;
                gw = new_gw;
                println!(
                    "{}",
                    report::scenario_block("scenario 6: reconnect storm", &scenario)
                );
                self.scenarios.reconnect_storm = Some(scenario);
            }
            self.stop_sessions().await?;
            gw.stop().await?;
        }

        if self.p.runs(ScenarioId::Fleet) {
            let store = self.fresh_store("fleet-large").await?;
            let mut gw = self.start_gateway(&store, DeliveryMode::Push).await?;
            let client = self.launcher.client(&gw.endpoint()).await?;
            let sims = self.sims(n, |_| production_ms);
            self.connect(&gw.endpoint(), sims, true, "fleet convergence")
                .await?;
            pause(Duration::from_secs(1)).await;
            let run = self.fleet_run(&client, &mut gw, n).await?;
            self.add_fleet_run(run);
            gw.save_metrics(&self.out.join("gateway-metrics-fleet.txt"))
                .await;
            self.stop_sessions().await?;
            gw.stop().await?;
        }

        if self.p.runs(ScenarioId::Starvation) {
            let store = self.fresh_store("starvation").await?;
            let gw = self.start_gateway(&store, DeliveryMode::Push).await?;
            let client = self.launcher.client(&gw.endpoint()).await?;
            let mut fleet = self.sims(n, |_| production_ms);
            let writers: Vec<SimSandbox> = fleet.drain(..self.p.starvation_writers).collect();
            let mut writers_swarm = SwarmProc::spawn(
                &self.exe,
                &[gw.endpoint()],
                1,
                self.launcher.ca_file(),
                &self.launcher.log,
                &self.out.join("swarm-writers.log"),
                0,
            )?;
            start_ready(&mut writers_swarm, writers, true).await?;
            // The fleet's swarm for this scenario only: a niceness cannot be lowered again.
            if let Some(swarm) = self.swarm.take() {
                swarm.finish().await?;
            }
            self.swarm = Some(SwarmProc::spawn(
                &self.exe,
                &[gw.endpoint()],
                self.p.channels,
                self.launcher.ca_file(),
                &self.launcher.log,
                &self.out.join("swarm.log"),
                self.p.fleet_nice,
            )?);
            self.connect(&gw.endpoint(), fleet, true, "no starvation")
                .await?;
            pause(Duration::from_secs(1)).await;
            let scenario = self.starvation(&client, n).await?;
            writers_swarm.finish().await?;
            if let Some(swarm) = self.swarm.take() {
                swarm.finish().await?;
            }
            println!(
                "{}",
                report::scenario_block("scenario 3: no starvation", &scenario)
            );
            self.scenarios.no_starvation = Some(scenario);
            self.stop_sessions().await?;
            gw.stop().await?;
        }

        if run_idle {
            let store = self.fresh_store("idle-poll").await?;
            let mut gw = self.start_gateway(&store, DeliveryMode::Poll).await?;
            self.clock.log(format!(
                "scenario 4: idle cost, poll every 10 s, {n} sessions"
            ));
            let idle_poll = self.idle_run(&mut gw, n, false).await?;
            gw.save_metrics(&self.out.join("gateway-metrics-idle-poll.txt"))
                .await;
            self.stop_sessions().await?;
            gw.stop().await?;
            let scenario = IdleScenario {
                machine: self.machine.clone(),
                params: IdleParams {
                    store: self.store_name,
                    sessions: n,
                    settle_s: self.p.idle_settle.as_secs_f64(),
                    cpu_window_s: self.p.idle_window.as_secs_f64(),
                    heartbeat_s: HEARTBEAT_S,
                    poll_interval_s: PRODUCTION_POLL.as_secs(),
                    method: "fresh gateway process; VmRSS from its /proc/self/status before connecting and after connecting + settling; CPU = utime+stime from its /proc/self/stat over the window",
                },
                push: idle_push,
                poll: Some(idle_poll),
            };
            println!(
                "{}",
                report::scenario_block("scenario 4: idle cost", &scenario)
            );
            self.scenarios.idle_cost = Some(scenario);
        }
        Ok(())
    }

    async fn idle_run(&mut self, gw: &mut GatewayProc, n: usize, push: bool) -> Result<IdleRun> {
        pause(Duration::from_secs(2)).await;
        let (before, _) = gw.usage().await?;
        let sims = self.sims(n, |_| ms(PRODUCTION_POLL));
        let endpoint = gw.endpoint();
        let connect_s = self
            .connect(
                &endpoint,
                sims,
                push,
                if push {
                    "idle cost, push"
                } else {
                    "idle cost, poll"
                },
            )
            .await?;
        self.clock.log(format!(
            "  settling {:?} before measuring",
            self.p.idle_settle
        ));
        pause(self.p.idle_settle).await;
        let (after, sessions) = gw.usage().await?;
        if sessions < n {
            self.notes.push(format!(
                "idle cost ({}): only {sessions} of {n} sessions were registered when memory was read",
                if push { "push" } else { "poll" }
            ));
        }
        let (a, _) = gw.usage().await?;
        pause(self.p.idle_window).await;
        let (z, _) = gw.usage().await?;
        let secs = (z.at_ns.saturating_sub(a.at_ns)) as f64 / 1e9;
        let cpu_ms_per_s = if secs > 0.0 {
            (z.cpu_ms - a.cpu_ms) / secs
        } else {
            0.0
        };
        let swarm_rss_kib = match self.swarm.as_mut() {
            Some(s) => s.usage().await.map(|u| u.rss_kib).unwrap_or(0),
            None => 0,
        };
        let per_session_kib = (after.rss_kib as f64 - before.rss_kib as f64) / n as f64;
        let run = IdleRun {
            mode: if push { "push" } else { "poll" },
            sessions: n,
            connect_s,
            rss_before_kib: before.rss_kib,
            rss_after_kib: after.rss_kib,
            hwm_after_kib: z.hwm_kib,
            per_session_kib: round3(per_session_kib),
            cpu_ms_per_s: round3(cpu_ms_per_s),
            cpu_us_per_session_per_s: round3(cpu_ms_per_s * 1000.0 / n as f64),
            gateway_threads: z.threads,
            swarm_rss_kib,
        };
        self.clock.log(format!(
            "  {}: {:.1} KiB/session, {:.1} ms CPU/s",
            run.mode, run.per_session_kib, run.cpu_ms_per_s
        ));
        Ok(run)
    }

    async fn starvation(&mut self, client: &Client, n: usize) -> Result<StarvationScenario> {
        let writers: Vec<BenchSandbox> = self.sandboxes[..self.p.starvation_writers].to_vec();
        self.clock.log(format!(
            "scenario 3: no starvation, {n} sessions, writers on {} sandboxes",
            writers.len()
        ));
        let wait = self.p.wait;
        let mut baseline = Vec::new();
        let mut not_applied = 0;
        for i in 0..self.p.starvation_baseline {
            let policy = self.counters.next_policy();
            let s = policy_write(client, None, &writers[i % writers.len()], policy, wait).await?;
            if s.applied {
                baseline.push(s.call_ms);
            } else {
                not_applied += 1;
            }
        }
        let mut during_wait = Vec::new();
        let mut during_commit = Vec::new();
        let mut fanout_acked = Vec::new();
        let mut fanout_op = Vec::new();
        let mut fanouts = 0;
        let mut k = 0usize;
        for _ in 0..self.p.starvation_max_fanouts {
            let value = self.counters.next_value();
            let swarm = self.swarm.as_mut().ok_or_else(|| anyhow!("no swarm"))?;
            swarm
                .arm("fanout", None, Until::GlobalSettingsChange, false)
                .await?;
            let fanout_client = client.clone();
            let t0 = mono_ns();
            let fanout = tokio::spawn(async move {
                let r = fanout_client
                    .update_config(
                        UpdateConfig::new(Target::Global)
                            .set(FLEET_KEY, value.to_string())
                            .mode(UpdateMode::WaitForApply)
                            .wait_timeout(wait),
                    )
                    .await;
                (r, mono_ns())
            });
            let mut samples = Vec::new();
            // Bounded: a fanout that never ends still ends the loop through the server-side wait.
            while !fanout.is_finished() && samples.len() < 100_000 {
                let sb = &writers[k % writers.len()];
                k += 1;
                let policy = self.counters.next_policy();
                let w = policy_write(client, None, sb, policy, wait).await?;
                let value = self.counters.next_value();
                let c = setting_write(client, sb, value).await;
                samples.push((w, c));
            }
            let (result, t1) = fanout.await.context("fanout task failed")?;
            let swarm = self.swarm.as_mut().ok_or_else(|| anyhow!("no swarm"))?;
            let got = swarm.collect("fanout", Duration::from_secs(60)).await?;
            fanouts += 1;
            let finished = match &result {
                Ok(r) => r
                    .operation
                    .as_ref()
                    .is_some_and(|op| op.state.is_terminal()),
                Err(e) => {
                    self.notes
                        .push(format!("no starvation: a fanout failed: {e}"));
                    false
                }
            };
            fanout_op.push(round3(ms_between(t0, t1)));
            fanout_acked.push(round3(got.last().map_or(f64::NAN, |t| ms_between(t0, t))));
            for (w, c) in samples {
                if w.start_ns < t1 {
                    // A write that was not applied within the wait counts with the time it
                    // took to give up (a lower bound): leaving it out would hide starvation.
                    during_wait.push(w.call_ms);
                    if !w.applied {
                        not_applied += 1;
                    }
                }
                if let Some((start, ms)) = c
                    && start < t1
                {
                    during_commit.push(ms);
                }
            }
            self.clock.log(format!(
                "  fanout {fanouts}: operation {:.0} ms, {} sandbox writes in flight so far",
                ms_between(t0, t1),
                during_wait.len()
            ));
            if during_wait.len() >= self.p.starvation_min_samples {
                break;
            }
            if !finished {
                self.notes.push(format!(
                    "no starvation at {n} sessions: a fanout was not terminal when its {} s wait ended; no further fanouts were started",
                    self.p.wait.as_secs()
                ));
                break;
            }
            pause(Duration::from_millis(500)).await;
        }
        Ok(StarvationScenario {
            machine: self.machine.clone(),
            params: StarvationParams {
                store: self.store_name,
                sessions: n,
                fanout: "global setting change, UpdateConfig(Global, WAIT_FOR_APPLY), back to back until enough samples",
                writer: format!(
                    "one sequential writer, round-robin over {} sandboxes whose simulated supervisors run in a process of their own: a policy update with WAIT_FOR_APPLY, then a setting update with COMMIT_ONLY",
                    writers.len()
                ),
                fleet_nice: self.p.fleet_nice,
                min_samples: self.p.starvation_min_samples,
                max_fanouts: self.p.starvation_max_fanouts,
            },
            baseline_wait_for_apply: Summary::of(&baseline),
            during_fanout_wait_for_apply: Summary::of(&during_wait),
            during_fanout_commit_only: Summary::of(&during_commit),
            fanouts,
            fanout_all_acked_ms: fanout_acked,
            fanout_operation_ms: fanout_op,
            not_applied,
        })
    }

    async fn storm(&mut self, gw: GatewayProc, n: usize) -> Result<(StormScenario, GatewayProc)> {
        let store = gw.store.clone();
        self.clock
            .log(format!("scenario 6: reconnect storm, {n} sessions"));
        let swarm = self.swarm.as_mut().ok_or_else(|| anyhow!("no swarm"))?;
        swarm
            .arm("storm", None, Until::Ready { push: true }, false)
            .await?;
        let t_stop = mono_ns();
        gw.stop().await?;
        let t_stopped = mono_ns();
        let mut gw = self.start_gateway(&store, DeliveryMode::Push).await?;
        let t_listen = mono_ns();
        let swarm = self.swarm.as_mut().ok_or_else(|| anyhow!("no swarm"))?;
        let got = swarm.collect("storm", Duration::from_secs(600)).await?;
        let (usage, _) = gw.usage().await?;
        gw.save_metrics(&self.out.join("gateway-metrics-storm.txt"))
            .await;
        let per: Vec<f64> = got
            .reached
            .iter()
            .map(|t| ms_between(t_listen, *t))
            .collect();
        let last = got.last().unwrap_or(t_listen);
        let scenario = StormScenario {
            machine: self.machine.clone(),
            params: StormParams {
                store: self.store_name,
                sessions: n,
                restart: "graceful stop of the gateway process, then a new process on the same address and store",
                reconnect_backoff: BACKOFF,
            },
            shutdown_ms: round3(ms_between(t_stop, t_stopped)),
            start_ms: round3(ms_between(t_stopped, t_listen)),
            all_bootstrapped_ms: round3(ms_between(t_listen, last)),
            all_bootstrapped_since_stop_ms: round3(ms_between(t_stop, last)),
            per_session: Summary::of(&per),
            sessions_missing: got.missing,
            gateway_hwm_kib: usage.hwm_kib,
            gateway_rss_after_kib: usage.rss_kib,
        };
        self.clock.log(format!(
            "  all {} sessions re-bootstrapped {:.2} s after the new gateway listened ({} missing), peak RSS {} KiB",
            got.reached.len(),
            scenario.all_bootstrapped_ms / 1000.0,
            got.missing,
            usage.hwm_kib
        ));
        Ok((scenario, gw))
    }

    // ---------------- phase 3 ----------------

    async fn phase_throughput(&mut self) -> Result<()> {
        let mut runs = Vec::new();
        let mut pgbench = None;
        let sqlite = setup::sqlite_store(&self.work.path().join("throughput-sqlite"))?;
        runs.push(self.throughput_run(&sqlite).await?);
        if let Some(url) = self.postgres_url.clone() {
            let (pg, name) =
                setup::postgres_store(&url, &self.work.path().join("throughput-postgres")).await?;
            self.pg_databases.push(name);
            runs.push(self.throughput_run(&pg).await?);
            pgbench = self.pgbench_run(&url).await?;
        } else {
            self.notes.push(
                "commit throughput on PostgreSQL was skipped: no --postgres-url (or OPENSHELL_BENCH_POSTGRES_URL) given"
                    .into(),
            );
        }
        let scenario = ThroughputScenario {
            machine: self.machine.clone(),
            params: ThroughputParams {
                clients: self.p.throughput_clients,
                duration_s: self.p.throughput_duration.as_secs_f64(),
                write: "sandbox-scoped setting change (log_rate_limit_per_second), UpdateConfig COMMIT_ONLY; each client has its own connection and sandbox; fresh store, no supervisor connected",
            },
            runs,
            pgbench,
        };
        println!(
            "{}",
            report::scenario_block("scenario 5: commit throughput", &scenario)
        );
        self.scenarios.commit_throughput = Some(scenario);
        Ok(())
    }

    /// PostgreSQL's own commit rate on the same server, right after the gateway's.
    async fn pgbench_run(&mut self, admin_url: &str) -> Result<Option<PgbenchRun>> {
        let Some(exe) = pgbench::find() else {
            self.notes.push(
                "PostgreSQL's pgbench was not found on PATH: the commit throughput has no database baseline".into(),
            );
            return Ok(None);
        };
        let (db, name) =
            setup::postgres_store(admin_url, &self.work.path().join("throughput-pgbench")).await?;
        self.pg_databases.push(name);
        let clients = self.p.throughput_clients;
        self.clock.log(format!(
            "scenario 5: pgbench simple-update on the same server, {clients} clients, {:?}",
            self.p.throughput_duration
        ));
        let run = pgbench::run(&exe, &db.url, clients, self.p.throughput_duration)
            .await
            .context("pgbench baseline")?;
        self.clock.log(format!(
            "  pgbench: {:.0} transactions/s; one client: {:.0}/s",
            run.tps, run.serial_tps
        ));
        Ok(Some(run))
    }

    async fn throughput_run(&mut self, store: &StoreSpec) -> Result<ThroughputRun> {
        let clients_n = self.p.throughput_clients;
        self.clock.log(format!(
            "scenario 5: commit throughput on {}, {clients_n} clients, {:?}",
            store.backend, self.p.throughput_duration
        ));
        let mut gw = self.launcher.start(store, DeliveryMode::Push, None).await?;
        let endpoint = gw.endpoint();
        let admin = self.launcher.client(&endpoint).await?;
        let sandboxes = setup::create_sandboxes(&admin, "tp", 0..clients_n, 16).await?;
        let mut clients = Vec::with_capacity(clients_n);
        for _ in 0..clients_n {
            clients.push(self.launcher.client(&endpoint).await?);
        }
        // Warm up every connection and sandbox.
        for (c, sb) in clients.iter().zip(&sandboxes) {
            for v in 1..=3 {
                setting_write(c, sb, v).await;
            }
        }
        let duration = self.p.throughput_duration;
        let serial = vec![(clients[0].clone(), sandboxes[0].clone())];
        let groups_before = group_commit_counts(&gw.metrics().await?);
        let (latencies, errors, seconds) =
            drive_writes(clients.into_iter().zip(sandboxes).collect(), duration).await?;
        let groups = group_commit_counts(&gw.metrics().await?).since(&groups_before);
        // The serial ceiling: the same writes, one at a time, on the same store. What the
        // clients together commit beyond it is what concurrent writes share (a group commit).
        let (serial_latencies, serial_errors, serial_seconds) =
            drive_writes(serial, duration).await?;
        let db_pool = gw.db_pool;
        gw.stop().await?;
        let commits = latencies.len() as u64;
        let commits_per_s = round3(commits as f64 / seconds.max(1e-9));
        let serial_commits_per_s = round3(serial_latencies.len() as f64 / serial_seconds.max(1e-9));
        let run = ThroughputRun {
            store: store.backend,
            db_pool,
            commits,
            errors,
            seconds: round3(seconds),
            commits_per_s,
            latency: Summary::of(&latencies),
            serial: SerialCeiling {
                commits: serial_latencies.len() as u64,
                errors: serial_errors,
                commits_per_s: serial_commits_per_s,
                latency: Summary::of(&serial_latencies),
            },
            over_serial: round3(commits_per_s / serial_commits_per_s.max(1e-9)),
            groups,
        };
        self.clock.log(format!(
            "  {}: {:.0} commits/s ({} errors; {:.1} writes per group); one client: {:.0} commits/s ({} errors); {:.2}x",
            run.store,
            run.commits_per_s,
            run.errors,
            run.groups.mean_group_writes(),
            run.serial.commits_per_s,
            run.serial.errors,
            run.over_serial
        ));
        Ok(run)
    }
}

impl Bench {
    // ---------------- phase 4 ----------------

    async fn phase_replicas(&mut self) -> Result<()> {
        let Some(url) =
            self.replicas_store("writes through a replica that does not own the session")
        else {
            return Ok(());
        };
        let n = self.p.replicas_sessions;
        self.fresh_replica_logs(REPLICA_COUNTS.iter().copied().max().unwrap_or(0))?;
        let specs = replica_specs(REPLICA_COUNTS.iter().copied().max().unwrap_or(1));
        let spec = |i: usize| specs[i].clone();
        // The sandboxes are created once, through replica-0 (so the copies hold no other
        // replica's registration), and every replica count runs on a copy of that database.
        let (template, name) =
            setup::postgres_store(&url, &self.work.path().join("replicas-template")).await?;
        self.pg_databases.push(name);
        let gw = self
            .replica_launcher(0)
            .start_replica(&template, DeliveryMode::Push, &spec(0))
            .await?;
        let admin = self.launcher.client(&gw.endpoint()).await?;
        let t = Instant::now();
        let sandboxes = setup::create_sandboxes(&admin, "replica", 0..n, 16).await?;
        drop(admin);
        gw.stop().await?;
        self.clock.log(format!(
            "scenario 7: created {n} sandboxes on PostgreSQL in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        let mut runs = Vec::new();
        for r in REPLICA_COUNTS {
            let specs: Vec<ReplicaSpec> = (0..r).map(spec).collect();
            runs.push(
                self.replicas_run(&template, &url, &sandboxes, &specs)
                    .await?,
            );
        }
        let scenario = ReplicasScenario {
            machine: self.machine.clone(),
            params: ReplicasParams {
                store: "postgres",
                sessions: n,
                warmup: self.p.warmup,
                samples: self.p.samples,
                placement: "one gateway process per replica on one fresh PostgreSQL database (peer secret and credential key shared, production delivery settings); the session of the i-th sandbox is held by replica i mod R",
                write: "a random sandbox's policy update (one network port changes), UpdateConfig WAIT_FOR_APPLY, once through the replica holding its session and once through another replica (chosen at random), alternating which goes first; one write at a time",
                latency: "UpdateConfig call start → response with operation APPLIED (SDK caller connected to the replica written through)",
                supervisor_latency: "same call start → the supervisor library sent its ack (to the owning replica)",
            },
            runs,
        };
        println!(
            "{}",
            report::scenario_block(
                "scenario 7: writes through a replica that does not own the session",
                &scenario
            )
        );
        self.scenarios.cross_replica = Some(scenario);
        Ok(())
    }

    /// Each replica logs to a file of its own, so its lines can be told apart.
    fn replica_log(&self, i: usize) -> PathBuf {
        self.out.join(format!("gateway-replica-{i}.log"))
    }

    /// Empties the logs of replicas `0..count` for this run.
    fn fresh_replica_logs(&self, count: usize) -> Result<()> {
        for i in 0..count {
            let log = self.replica_log(i);
            std::fs::write(&log, b"").with_context(|| format!("cannot write {}", log.display()))?;
        }
        Ok(())
    }

    /// The PostgreSQL admin URL replicas need; without one, notes that `what` was skipped.
    fn replicas_store(&mut self, what: &str) -> Option<String> {
        if self.postgres_url.is_none() {
            self.notes.push(format!(
                "{what}: skipped, as replicas share PostgreSQL and no --postgres-url (or OPENSHELL_BENCH_POSTGRES_URL) was given"
            ));
        }
        self.postgres_url.clone()
    }

    fn replica_launcher(&self, i: usize) -> GatewayLauncher {
        GatewayLauncher {
            log_path: self.replica_log(i),
            ..self.launcher.clone()
        }
    }

    /// One replica count: `specs.len()` gateways on a copy of `template`, every sandbox's
    /// session on replica (index mod count), then timed writes through both routes.
    /// Three replicas on one PostgreSQL database, --fleet-sessions sessions on each (every
    /// replica's sessions in a swarm process of their own: one file descriptor per
    /// connection), and global changes written through replica 0.
    async fn phase_replicas_fleet(&mut self) -> Result<()> {
        const REPLICAS: usize = 3;
        let Some(url) = self.replicas_store("the global change over three replicas") else {
            return Ok(());
        };
        let per = self.p.fleet_sessions;
        let total = per * REPLICAS;
        self.clock.log(format!(
            "scenario 8: {REPLICAS} replicas on PostgreSQL, {per} sessions each, {} rounds",
            self.p.fleet_rounds
        ));
        self.fresh_replica_logs(REPLICAS)?;
        let (store, name) =
            setup::postgres_store(&url, &self.work.path().join("replicas-fleet")).await?;
        self.pg_databases.push(name);
        let specs = replica_specs(REPLICAS);
        let mut gws = Vec::with_capacity(REPLICAS);
        for (i, spec) in specs.iter().enumerate() {
            gws.push(
                self.replica_launcher(i)
                    .start_replica(&store, DeliveryMode::Push, spec)
                    .await?,
            );
        }
        let endpoints: Vec<String> = gws.iter().map(GatewayProc::endpoint).collect();
        let client = self.launcher.client(&endpoints[0]).await?;
        let t = Instant::now();
        let sandboxes = setup::create_sandboxes(&client, "replicas-fleet", 0..total, 16).await?;
        self.clock.log(format!(
            "  created {total} sandboxes in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        if let Some(swarm) = self.swarm.take() {
            swarm.finish().await?;
        }
        let mut swarms = Vec::with_capacity(REPLICAS);
        for (i, endpoint) in endpoints.iter().enumerate() {
            swarms.push(SwarmProc::spawn(
                &self.exe,
                std::slice::from_ref(endpoint),
                self.p.channels,
                self.launcher.ca_file(),
                &self.launcher.log,
                &self.out.join(format!("swarm-replica-{i}.log")),
                0,
            )?);
        }
        let t = Instant::now();
        for (i, swarm) in swarms.iter_mut().enumerate() {
            let sims: Vec<SimSandbox> = sandboxes
                .iter()
                .skip(i)
                .step_by(REPLICAS)
                .map(|sb| sb.sim(ms(PRODUCTION_POLL)))
                .collect();
            for chunk in sims.chunks(self.p.connect_batch) {
                start_ready(swarm, chunk.to_vec(), true).await?;
            }
        }
        let seconds = round3(t.elapsed().as_secs_f64());
        self.clock.log(format!(
            "  {total} sessions ready in push mode after {seconds:.1} s"
        ));
        self.connects.push(ConnectRecord {
            what: format!("global change over {REPLICAS} replicas"),
            sessions: total,
            mode: "push",
            seconds,
        });
        let mut sessions_per_replica = Vec::with_capacity(REPLICAS);
        for gw in &mut gws {
            sessions_per_replica.push(gw.usage().await?.1);
        }
        pause(Duration::from_secs(1)).await;
        let mut rounds = Vec::new();
        for _ in 0..self.p.fleet_rounds {
            let value = self.counters.next_value();
            let mut gw_refs: Vec<&mut GatewayProc> = gws.iter_mut().collect();
            let mut swarm_refs: Vec<&mut SwarmProc> = swarms.iter_mut().collect();
            let round =
                fleet_round(&client, &mut gw_refs, &mut swarm_refs, value, self.p.wait).await?;
            self.clock.log(format!(
                "  round: all acked {:.1} ms, operation {:.1} ms ({}, {} missing)",
                round.all_acked_ms,
                round.operation_ms,
                round.operation_state,
                round.sessions_missing
            ));
            let finished = round.operation_state == "APPLIED";
            rounds.push(round);
            if !finished {
                self.notes.push(format!(
                    "global change over {REPLICAS} replicas: a round's operation ended {}; later rounds were skipped",
                    rounds.last().map_or("", |r| r.operation_state.as_str())
                ));
                break;
            }
            pause(Duration::from_millis(500)).await;
        }
        for (i, gw) in gws.iter_mut().enumerate() {
            gw.save_metrics(
                &self
                    .out
                    .join(format!("gateway-metrics-replicas-fleet-replica-{i}.txt")),
            )
            .await;
        }
        for mut swarm in swarms {
            swarm.stop_all().await?;
            swarm.finish().await?;
        }
        for gw in gws {
            gw.stop().await?;
        }
        let acked: Vec<f64> = rounds.iter().map(|r| r.all_acked_ms).collect();
        let ops: Vec<f64> = rounds.iter().map(|r| r.operation_ms).collect();
        let scenario = ReplicasFleetScenario {
            machine: self.machine.clone(),
            params: ReplicasFleetParams {
                store: "postgres",
                replicas: REPLICAS,
                sessions_per_replica: per,
                placement: "one gateway process per replica on one fresh PostgreSQL database; the sessions of each replica in a swarm process of their own, one connection each; the global change is written through replica 0",
            },
            sessions_held: sessions_per_replica,
            median_all_acked_ms: median(&acked),
            median_operation_ms: median(&ops),
            rounds,
        };
        println!(
            "{}",
            report::scenario_block("scenario 8: a global change over three replicas", &scenario)
        );
        self.scenarios.replicas_fleet = Some(scenario);
        Ok(())
    }

    async fn replicas_run(
        &mut self,
        template: &StoreSpec,
        admin_url: &str,
        sandboxes: &[BenchSandbox],
        specs: &[ReplicaSpec],
    ) -> Result<ReplicasRun> {
        let r = specs.len();
        let n = sandboxes.len();
        self.copies += 1;
        let dir = self
            .work
            .path()
            .join(format!("{:02}-replicas-{r}", self.copies));
        let (store, pg) = setup::clone_store(template, Some(admin_url), &dir).await?;
        self.pg_databases.extend(pg);
        self.clock.log(format!(
            "scenario 7: {r} replicas on PostgreSQL, {n} sessions, {} samples per route",
            self.p.samples
        ));
        let mut gws = Vec::with_capacity(r);
        for (i, spec) in specs.iter().enumerate() {
            let gw = self
                .replica_launcher(i)
                .start_replica(&store, DeliveryMode::Push, spec)
                .await?;
            self.clock.log(format!(
                "  {} started at {} (pid {})",
                spec.id,
                gw.addr,
                gw.pid().unwrap_or(0)
            ));
            gws.push(gw);
        }
        let endpoints: Vec<String> = gws.iter().map(GatewayProc::endpoint).collect();
        let mut clients = Vec::with_capacity(r);
        for endpoint in &endpoints {
            clients.push(self.launcher.client(endpoint).await?);
        }
        // One swarm, its sessions spread over the replicas; a swarm bound to an earlier
        // gateway has no use any more.
        if let Some(swarm) = self.swarm.take() {
            swarm.finish().await?;
        }
        self.swarm = Some(SwarmProc::spawn(
            &self.exe,
            &endpoints,
            self.p.channels,
            self.launcher.ca_file(),
            &self.launcher.log,
            &self.out.join("swarm.log"),
            0,
        )?);
        let sims: Vec<SimSandbox> = sandboxes
            .iter()
            .enumerate()
            .map(|(i, sb)| SimSandbox {
                gateway: i % r,
                ..sb.sim(ms(PRODUCTION_POLL))
            })
            .collect();
        self.connect(
            &endpoints[0],
            sims,
            true,
            &format!("cross-replica writes, {r} replicas"),
        )
        .await?;
        let mut sessions_per_replica = Vec::with_capacity(r);
        for (i, gw) in gws.iter_mut().enumerate() {
            let (_, sessions) = gw.usage().await?;
            let expected = (0..n).filter(|j| j % r == i).count();
            if sessions != expected {
                self.notes.push(format!(
                    "cross-replica writes, {r} replicas: replica-{i} held {sessions} sessions where {expected} were connected to it"
                ));
            }
            sessions_per_replica.push(sessions);
        }
        pause(Duration::from_secs(1)).await;

        let warmup = self.p.warmup;
        let mut owner = RouteSamples::default();
        let mut other = RouteSamples::default();
        for k in 0..warmup + self.p.samples {
            let i = rand::rng().random_range(0..n);
            let holder = i % r;
            let elsewhere = (holder + 1 + rand::rng().random_range(0..r - 1)) % r;
            let routes = if k % 2 == 0 {
                [(holder, true), (elsewhere, false)]
            } else {
                [(elsewhere, false), (holder, true)]
            };
            for (via, through_owner) in routes {
                let policy = self.counters.next_policy();
                let swarm = self.swarm.as_mut().ok_or_else(|| anyhow!("no swarm"))?;
                // The swarm started the sandboxes in order, so session index = sandbox index.
                let s = policy_write(
                    &clients[via],
                    Some((swarm, i)),
                    &sandboxes[i],
                    policy,
                    self.p.wait,
                )
                .await?;
                if k >= warmup {
                    if through_owner {
                        owner.add(&s);
                    } else {
                        other.add(&s);
                    }
                }
            }
        }
        for (i, gw) in gws.iter_mut().enumerate() {
            gw.save_metrics(
                &self
                    .out
                    .join(format!("gateway-metrics-replicas-{r}-replica-{i}.txt")),
            )
            .await;
        }
        self.stop_sessions().await?;
        if let Some(swarm) = self.swarm.take() {
            swarm.finish().await?;
        }
        for gw in gws {
            gw.stop().await?;
        }
        let run = ReplicasRun::new(r, sessions_per_replica, owner.done(), other.done());
        self.clock.log(format!(
            "  {r} replicas: call → APPLIED p50 / p99 through the owner {:.2} / {:.2} ms, through another replica {:.2} / {:.2} ms",
            run.owner.call.p50_ms,
            run.owner.call.p99_ms,
            run.non_owner.call.p50_ms,
            run.non_owner.call.p99_ms
        ));
        Ok(run)
    }
}

/// Timed writes through one route (the owning replica, or another one).
#[derive(Default)]
struct RouteSamples {
    call: Vec<f64>,
    ack: Vec<f64>,
    not_applied: usize,
}

impl RouteSamples {
    fn add(&mut self, s: &WriteSample) {
        if !s.applied {
            self.not_applied += 1;
            return;
        }
        self.call.push(s.call_ms);
        if let Some(a) = s.ack_ms {
            self.ack.push(a);
        }
    }

    fn done(self) -> ReplicaWrites {
        ReplicaWrites {
            call: Summary::of(&self.call),
            supervisor_ack: Summary::of(&self.ack),
            not_applied: self.not_applied,
        }
    }
}

async fn interrupted() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One timed write.
struct WriteSample {
    start_ns: u64,
    call_ms: f64,
    ack_ms: Option<f64>,
    applied: bool,
}

/// Starts sessions for `sims` in `swarm` and waits until each is ready.
async fn start_ready(swarm: &mut SwarmProc, sims: Vec<SimSandbox>, push: bool) -> Result<()> {
    let count = sims.len();
    let first = swarm.start(sims).await?;
    swarm
        .arm(
            "ready",
            Some((first..first + count).collect()),
            Until::Ready { push },
            true,
        )
        .await?;
    let got = swarm.collect("ready", Duration::from_secs(600)).await?;
    if got.missing > 0 {
        bail!(
            "{} of {count} sessions did not become ready ({} mode) within 10 minutes; see the swarm logs and gateway.log",
            got.missing,
            if push { "push" } else { "poll" }
        );
    }
    Ok(())
}

/// A WAIT_FOR_APPLY policy update of `sandbox`; with a swarm, also when its supervisor acked.
async fn policy_write(
    client: &Client,
    swarm: Option<(&mut SwarmProc, usize)>,
    sandbox: &BenchSandbox,
    policy: String,
    wait: Duration,
) -> Result<WriteSample> {
    let mut swarm = swarm;
    if let Some((s, index)) = swarm.as_mut() {
        s.arm("write", Some(vec![*index]), Until::PolicyChange, false)
            .await?;
    }
    let update = UpdateConfig::new(sandbox_target(sandbox))
        .policy(policy)
        .mode(UpdateMode::WaitForApply)
        .wait_timeout(wait);
    let start_ns = mono_ns();
    let result = client.update_config(update).await;
    let end_ns = mono_ns();
    let applied = is_applied(&result);
    let ack_ms = match swarm {
        Some((s, _)) => {
            let timeout = Duration::from_secs(if applied { 10 } else { 1 });
            s.collect("write", timeout)
                .await?
                .last()
                .map(|t| ms_between(start_ns, t))
        }
        None => None,
    };
    Ok(WriteSample {
        start_ns,
        call_ms: ms_between(start_ns, end_ns),
        ack_ms,
        applied,
    })
}

/// A COMMIT_ONLY setting update of `sandbox`: (start, ms), or None on error.
/// Each client writes to its own sandbox, one write after another, for `duration`.
/// Returns every write's latency (ms), the failed writes and the seconds it took.
async fn drive_writes(
    writers: Vec<(Client, BenchSandbox)>,
    duration: Duration,
) -> Result<(Vec<f64>, u64, f64)> {
    let errors = Arc::new(AtomicU64::new(0));
    let t0 = mono_ns();
    let deadline = tokio::time::Instant::now() + duration;
    let tasks: Vec<_> = writers
        .into_iter()
        .map(|(client, sb)| {
            let errors = errors.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut value = 10u64;
                while tokio::time::Instant::now() < deadline {
                    value = if value >= 100_000 { 10 } else { value + 1 };
                    match setting_write(&client, &sb, value).await {
                        Some((_, ms)) => latencies.push(ms),
                        None => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.context("throughput client failed")?);
    }
    let seconds = ms_between(t0, mono_ns()) / 1000.0;
    Ok((latencies, errors.load(Ordering::Relaxed), seconds))
}

async fn setting_write(client: &Client, sandbox: &BenchSandbox, value: u64) -> Option<(u64, f64)> {
    let update = UpdateConfig::new(sandbox_target(sandbox))
        .set(FLEET_KEY, value.to_string())
        .mode(UpdateMode::CommitOnly);
    let start = mono_ns();
    let result = client.update_config(update).await;
    let end = mono_ns();
    result.ok().map(|_| (start, ms_between(start, end)))
}

fn is_applied(result: &Result<UpdateResult, openshell_sdk::SdkError>) -> bool {
    matches!(result, Ok(r) if r.operation.as_ref().is_some_and(|op| op.state == OperationState::Applied))
}

/// Replicas of one store: they share the key sealing provider credentials, and the peer
/// secret authenticates their hints to each other. Fresh per call.
fn replica_specs(count: usize) -> Vec<ReplicaSpec> {
    let key: [u8; 32] = rand::random();
    let credential_key = Secret::new(base64::engine::general_purpose::STANDARD.encode(key));
    let peer_secret = Secret::generate();
    (0..count)
        .map(|i| ReplicaSpec {
            id: format!("replica-{i}"),
            peer_secret: peer_secret.clone(),
            credential_key: credential_key.clone(),
        })
        .collect()
}

/// One global change through `client`, reaching the sessions of every swarm; `gws` are the
/// gateways the sessions are connected to (their last-frame metric is read after it).
async fn fleet_round(
    client: &Client,
    gws: &mut [&mut GatewayProc],
    swarms: &mut [&mut SwarmProc],
    value: u64,
    wait: Duration,
) -> Result<FleetRound> {
    for swarm in swarms.iter_mut() {
        swarm
            .arm("fleet", None, Until::GlobalSettingsChange, false)
            .await?;
    }
    let update = UpdateConfig::new(Target::Global)
        .set(FLEET_KEY, value.to_string())
        .mode(UpdateMode::WaitForApply)
        .wait_timeout(wait);
    let gateways_cpu0 = gateways_cpu_ms(gws).await;
    let started_wall = std::time::SystemTime::now();
    let cpu0 = MachineCpu::read();
    let t0 = mono_ns();
    let result = client.update_config(update).await;
    let t1 = mono_ns();
    let machine_cpu_s = cpu0
        .zip(MachineCpu::read())
        .map(|(before, after)| round3(after.busy_s_since(&before)));
    let ok = result.is_ok();
    let mut got = Collected {
        reached: Vec::new(),
        missing: 0,
    };
    for swarm in swarms.iter_mut() {
        let one = swarm
            .collect("fleet", Duration::from_secs(if ok { 60 } else { 5 }))
            .await?;
        got.reached.extend(one.reached);
        got.missing += one.missing;
    }
    // The gateways' own clocks: when the last of them handed the fanout's last frame to a
    // session's stream (no other configuration frame goes out between rounds).
    let mut last_frame_sent_ms = None;
    for gw in gws.iter_mut() {
        let Some(ms) = gw
            .metrics()
            .await
            .ok()
            .and_then(|text| last_frame_sent_since(&text, started_wall))
        else {
            last_frame_sent_ms = None;
            break;
        };
        last_frame_sent_ms = Some(last_frame_sent_ms.map_or(ms, |m: f64| m.max(ms)));
    }
    // Read after every ack was collected: the gateways' share of the round's work.
    let gateways_cpu_s = gateways_cpu0
        .zip(gateways_cpu_ms(gws).await)
        .map(|(before, after)| round3((after - before) / 1000.0));
    let per: Vec<f64> = got.reached.iter().map(|t| ms_between(t0, *t)).collect();
    let (state, fleet, server_ms) = match &result {
        Ok(UpdateResult {
            operation: Some(op),
            ..
        }) => {
            let server_ms = match (&op.created_at, &op.completed_at) {
                (Some(c), Some(d)) => match (
                    humantime::parse_rfc3339_weak(c),
                    humantime::parse_rfc3339_weak(d),
                ) {
                    (Ok(c), Ok(d)) => d.duration_since(c).ok().map(|x| x.as_secs_f64() * 1000.0),
                    _ => None,
                },
                _ => None,
            };
            (
                op.state.to_string(),
                op.fleet.unwrap_or_default(),
                server_ms,
            )
        }
        Ok(_) => ("no operation".to_owned(), Default::default(), None),
        Err(e) => (format!("error: {e}"), Default::default(), None),
    };
    Ok(FleetRound {
        last_frame_sent_ms: last_frame_sent_ms.map(round3),
        all_acked_ms: round3(got.last().map_or(f64::NAN, |t| ms_between(t0, t))),
        per_session: Summary::of(&per),
        operation_ms: round3(ms_between(t0, t1)),
        operation_server_ms: server_ms,
        machine_cpu_s,
        gateways_cpu_s,
        operation_state: state,
        fleet_targets: fleet.targets,
        fleet_applied: fleet.applied,
        fleet_failed: fleet.failed,
        fleet_pending: fleet.pending,
        sessions_missing: got.missing,
    })
}

/// The CPU time the gateway processes have used so far, summed; `None` if one cannot say.
async fn gateways_cpu_ms(gws: &mut [&mut GatewayProc]) -> Option<f64> {
    let mut sum = 0.0;
    for gw in gws.iter_mut() {
        sum += gw.usage().await.ok()?.0.cpu_ms;
    }
    Some(sum)
}

/// Milliseconds from `since` to the gateway's `supervisor_config_frame_last_sent`
/// gauge in a metrics scrape; `None` when the gauge is absent or older.
fn last_frame_sent_since(metrics: &str, since: std::time::SystemTime) -> Option<f64> {
    let sent_s = series_value(
        metrics,
        "openshell_supervisor_config_frame_last_sent_timestamp_seconds",
    )?;
    let since_s = since
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    let ms = (sent_s - since_s) * 1000.0;
    (ms >= 0.0).then_some(ms)
}

/// The value of `series` (its name and labels as written) in a metrics scrape.
fn series_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.trim().parse().ok())?
        })
}

/// The group commit counters of one metrics scrape.
fn group_commit_counts(metrics: &str) -> GroupCommit {
    let value = |series: &str| series_value(metrics, series).map_or(0, |v| v as u64);
    GroupCommit {
        groups: value("openshell_config_write_groups_total"),
        writes_grouped: value("openshell_config_writes_grouped_total"),
        writes_started: value("openshell_config_writes_started_total"),
    }
}

impl GroupCommit {
    /// What happened between `before` and this reading.
    fn since(&self, before: &GroupCommit) -> GroupCommit {
        GroupCommit {
            groups: self.groups.saturating_sub(before.groups),
            writes_grouped: self.writes_grouped.saturating_sub(before.writes_grouped),
            writes_started: self.writes_started.saturating_sub(before.writes_started),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn group_commit_is_read_from_the_counters_and_taken_between_two_scrapes() {
        let scrape = |groups: u64, grouped: u64, started: u64| {
            format!(
                "# TYPE openshell_config_write_groups counter\n\
                 openshell_config_write_groups_total {groups}\n\
                 openshell_config_write_groups_failed_total 7\n\
                 openshell_config_writes_grouped_total {grouped}\n\
                 openshell_config_writes_started_total {started}\n"
            )
        };
        let before = group_commit_counts(&scrape(2, 5, 9));
        assert_eq!(
            (before.groups, before.writes_grouped, before.writes_started),
            (2, 5, 9)
        );
        let during = group_commit_counts(&scrape(12, 45, 59)).since(&before);
        assert_eq!(
            (during.groups, during.writes_grouped, during.writes_started),
            (10, 40, 50)
        );
        assert_eq!(during.mean_group_writes(), 4.0);
        // No group at all: no division by zero.
        assert_eq!(
            group_commit_counts("")
                .since(&GroupCommit::default())
                .mean_group_writes(),
            0.0
        );
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn the_last_frame_is_read_from_the_gateway_metric() {
        let since = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
        let scrape = "# HELP openshell_supervisor_config_frame_last_sent_timestamp_seconds x\n\
                      openshell_supervisor_config_frame_last_sent_timestamp_seconds 1000.25\n";
        let ms = last_frame_sent_since(scrape, since).unwrap();
        assert!((ms - 250.0).abs() < 1e-6, "{ms}");
        // Older than the call: no frame of this round went out.
        assert_eq!(
            last_frame_sent_since(scrape, since + Duration::from_secs(1)),
            None
        );
        assert_eq!(last_frame_sent_since("openshell_other 1\n", since), None);
    }

    fn resolve(args: &[&str]) -> Result<Params> {
        let cli =
            Cli::try_parse_from(std::iter::once("openshell-bench").chain(args.iter().copied()))?;
        Params::resolve(&cli.run)
    }

    #[test]
    fn an_etcd_path_that_is_not_a_file_is_refused_by_name() {
        let err = match resolve(&["--quick", "--etcd", "/no/such/etcd"]) {
            Ok(_) => panic!("a missing --etcd was accepted"),
            Err(err) => err.to_string(),
        };
        assert!(err.contains("--etcd /no/such/etcd: no such file"), "{err}");
        assert!(resolve(&["--quick"]).is_ok());
    }
}
