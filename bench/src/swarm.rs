//! The simulated supervisors: one child process (`openshell-bench swarm`, hidden) holding many
//! sessions of the real supervisor library, each with an in-memory applier. Sessions share a
//! handful of HTTP/2 channels (streams multiplex), so thousands of sessions cost a few sockets.
//!
//! The coordinator tells the swarm what to watch for (`Arm`) before it changes something, then
//! collects, per session, the `CLOCK_MONOTONIC` time at which the condition held (`Collect`).
//! Conditions are read from each supervisor's status channel: a revision became active *and* the
//! supervisor sent its acknowledgement (push ack or accepted poll-mode report).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use openshell_core::Secret;
use openshell_supervisor::{
    Identity, MemoryApplier, SessionState, Supervisor, SupervisorOptions, SupervisorStatus,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::ctl::{ChildIo, ChildProc, init_child_logging};
use crate::sys::{Usage, mono_ns, raise_fd_limit};

/// Arguments of the hidden `swarm` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct SwarmArgs {
    /// Gateway URL, e.g. `http://127.0.0.1:7070`; repeated for replicas, which a sandbox
    /// picks by index ([`SimSandbox::gateway`]).
    #[arg(long, required = true)]
    pub gateway: Vec<String>,
    /// HTTP/2 connections shared by all sessions of one gateway; 0: each session connects on
    /// its own, as a real supervisor does.
    #[arg(long, default_value_t = 0)]
    pub channels: usize,
    #[arg(long, default_value = "warn")]
    pub log: String,
    /// PEM CA of gateways that serve TLS (`https://` URLs).
    #[arg(long)]
    pub ca_file: Option<std::path::PathBuf>,
}

/// One sandbox the swarm runs a supervisor for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimSandbox {
    pub id: String,
    pub credential: String,
    /// Poll interval of this supervisor (used when the gateway does not push).
    pub poll_interval_ms: u64,
    /// Index of the swarm's gateway this session connects to.
    #[serde(default)]
    pub gateway: usize,
}

/// What a session must reach for `Arm`/`Collect`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Until {
    /// A new session was accepted in this delivery mode and its configuration is active and
    /// acknowledged (bootstrap result in push, accepted status report in poll).
    Ready { push: bool },
    /// A newer sandbox policy revision is active and acknowledged.
    PolicyChange,
    /// A newer global settings revision is active and acknowledged.
    GlobalSettingsChange,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum SwarmCommand {
    Start {
        sandboxes: Vec<SimSandbox>,
    },
    StopAll,
    Arm {
        key: String,
        /// Session indices; all sessions when absent.
        indices: Option<Vec<usize>>,
        until: Until,
        /// Count from a fresh supervisor's zero state instead of the current one.
        from_zero: bool,
    },
    Collect {
        key: String,
        timeout_ms: u64,
    },
    Usage,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum SwarmReply {
    Started {
        total: usize,
    },
    Stopped {
        count: usize,
    },
    Armed {
        key: String,
        count: usize,
    },
    Collected {
        key: String,
        /// `CLOCK_MONOTONIC` ns at which each session reached the condition.
        reached: Vec<u64>,
        missing: usize,
    },
    Usage {
        usage: Usage,
        sessions: usize,
    },
    Error {
        message: String,
    },
}

/// Counters and revisions captured when a condition is armed.
#[derive(Debug, Clone, Copy, Default)]
struct Baseline {
    sessions_accepted: u64,
    acks_sent: u64,
    reports_sent: u64,
    policy_revision: u64,
    global_settings_revision: u64,
}

impl Baseline {
    fn of(s: &SupervisorStatus) -> Self {
        let config = s.active.as_ref().map(|a| &a.sandbox_config);
        Self {
            sessions_accepted: s.sessions_accepted,
            acks_sent: s.acks_sent,
            reports_sent: s.reports_sent,
            policy_revision: config.map_or(0, |c| c.policy_revision),
            global_settings_revision: config.map_or(0, |c| c.global_settings_revision),
        }
    }
}

fn reached(until: Until, base: &Baseline, s: &SupervisorStatus) -> bool {
    let acked = s.acks_sent > base.acks_sent || s.reports_sent > base.reports_sent;
    let config = s.active.as_ref().map(|a| &a.sandbox_config);
    match until {
        Until::Ready { push } => {
            let accepted = matches!(&s.session, SessionState::Accepted { push_apply, .. } if *push_apply == push);
            let confirmed = if push {
                s.acks_sent > base.acks_sent
            } else {
                s.reports_sent > base.reports_sent
            };
            accepted
                && s.sessions_accepted > base.sessions_accepted
                && s.active.is_some()
                && confirmed
        }
        Until::PolicyChange => {
            acked && config.is_some_and(|c| c.policy_revision > base.policy_revision)
        }
        Until::GlobalSettingsChange => {
            acked
                && config
                    .is_some_and(|c| c.global_settings_revision > base.global_settings_revision)
        }
    }
}

struct Sim {
    supervisor: Supervisor,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Swarm {
    gateways: Vec<String>,
    /// Per gateway, the connections its sessions share; none when each session connects on
    /// its own.
    channels: Vec<Vec<Channel>>,
    /// The gateways' CA when they serve TLS.
    ca_pem: Option<Vec<u8>>,
    /// Per gateway, sessions started on it so far (they take its connections in turn).
    started: Vec<usize>,
    sims: Vec<Sim>,
    armed: HashMap<String, JoinSet<u64>>,
}

fn channel(url: &str, ca_pem: Option<&[u8]>) -> Result<Channel> {
    let mut endpoint =
        Endpoint::from_shared(url.to_string()).with_context(|| format!("bad gateway URL {url}"))?;
    if let Some(pem) = ca_pem {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            .with_context(|| format!("cannot use the CA for {url}"))?;
    }
    Ok(endpoint
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        // Thousands of streams share one connection: give the connection-level flow-control
        // window room for a fleet-wide burst of snapshots (the per-stream window is unchanged).
        .initial_connection_window_size(Some(16 * 1024 * 1024))
        .connect_lazy())
}

impl Swarm {
    fn start(&mut self, sandboxes: Vec<SimSandbox>) -> Result<usize> {
        if let Some(sb) = sandboxes
            .iter()
            .find(|sb| sb.gateway >= self.gateways.len())
        {
            bail!(
                "sandbox {} names gateway {} but the swarm has {} (--gateway)",
                sb.id,
                sb.gateway,
                self.gateways.len()
            );
        }
        for sb in sandboxes {
            let nth = self.started[sb.gateway];
            self.started[sb.gateway] += 1;
            let identity = Identity::new(sb.id.clone(), Secret::new(sb.credential));
            let mut options = SupervisorOptions::new(self.gateways[sb.gateway].clone(), identity);
            let channels = &self.channels[sb.gateway];
            // Without shared channels the supervisor library opens its own connection.
            options.channel =
                (!channels.is_empty()).then(|| channels[nth % channels.len()].clone());
            options.ca_pem = self.ca_pem.clone();
            options.poll_interval = Duration::from_millis(sb.poll_interval_ms.max(1));
            let supervisor = Supervisor::new(options, Arc::new(MemoryApplier::new()));
            let (stop, mut stopped) = watch::channel(false);
            let runner = supervisor.clone();
            let task = tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                if let Err(e) = runner.run(shutdown).await {
                    tracing::error!(sandbox = %sb.id, error = %e, "simulated supervisor ended");
                }
            });
            self.sims.push(Sim {
                supervisor,
                stop,
                task,
            });
        }
        Ok(self.sims.len())
    }

    async fn stop_all(&mut self) -> usize {
        let sims = std::mem::take(&mut self.sims);
        let count = sims.len();
        self.started.fill(0);
        for sim in &sims {
            let _ = sim.stop.send(true);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for sim in sims {
            let mut task = sim.task;
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
            }
        }
        self.armed.clear();
        count
    }

    fn arm(
        &mut self,
        key: String,
        indices: Option<Vec<usize>>,
        until: Until,
        from_zero: bool,
    ) -> Result<usize> {
        let indices = indices.unwrap_or_else(|| (0..self.sims.len()).collect());
        let mut set = JoinSet::new();
        for i in &indices {
            let sim = self
                .sims
                .get(*i)
                .ok_or_else(|| anyhow!("no session {i} (the swarm has {})", self.sims.len()))?;
            let mut rx = sim.supervisor.status();
            let base = if from_zero {
                Baseline::default()
            } else {
                Baseline::of(&rx.borrow())
            };
            set.spawn(async move {
                // An error means the supervisor is gone; the collector counts it as missing.
                let ok = rx.wait_for(|s| reached(until, &base, s)).await.is_ok();
                if !ok {
                    std::future::pending::<()>().await;
                }
                mono_ns()
            });
        }
        let count = indices.len();
        self.armed.insert(key, set);
        Ok(count)
    }

    async fn collect(&mut self, key: &str, timeout: Duration) -> Result<(Vec<u64>, usize)> {
        let mut set = self
            .armed
            .remove(key)
            .ok_or_else(|| anyhow!("nothing armed under {key:?}"))?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut reached = Vec::with_capacity(set.len());
        loop {
            match tokio::time::timeout_at(deadline, set.join_next()).await {
                Ok(Some(Ok(at))) => reached.push(at),
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let missing = set.len();
        set.abort_all();
        Ok((reached, missing))
    }
}

/// Body of the hidden `swarm` subcommand.
pub async fn child_main(args: SwarmArgs) -> Result<()> {
    init_child_logging(&args.log);
    raise_fd_limit();
    let ca_pem = args
        .ca_file
        .as_ref()
        .map(|path| std::fs::read(path).with_context(|| format!("cannot read {}", path.display())))
        .transpose()?;
    let channels = args
        .gateway
        .iter()
        .map(|url| {
            (0..args.channels)
                .map(|_| channel(url, ca_pem.as_deref()))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let mut swarm = Swarm {
        gateways: args.gateway.clone(),
        ca_pem,
        started: vec![0; channels.len()],
        channels,
        sims: Vec::new(),
        armed: HashMap::new(),
    };
    let mut io = ChildIo::new();
    loop {
        let command = match io.next::<SwarmCommand>().await {
            Ok(Some(command)) => command,
            Ok(None) => break,
            Err(e) => {
                io.reply(&SwarmReply::Error {
                    message: e.to_string(),
                })
                .await?;
                continue;
            }
        };
        let reply = match command {
            SwarmCommand::Start { sandboxes } => match swarm.start(sandboxes) {
                Ok(total) => SwarmReply::Started { total },
                Err(e) => SwarmReply::Error {
                    message: e.to_string(),
                },
            },
            SwarmCommand::StopAll => SwarmReply::Stopped {
                count: swarm.stop_all().await,
            },
            SwarmCommand::Arm {
                key,
                indices,
                until,
                from_zero,
            } => match swarm.arm(key.clone(), indices, until, from_zero) {
                Ok(count) => SwarmReply::Armed { key, count },
                Err(e) => SwarmReply::Error {
                    message: e.to_string(),
                },
            },
            SwarmCommand::Collect { key, timeout_ms } => {
                match swarm.collect(&key, Duration::from_millis(timeout_ms)).await {
                    Ok((reached, missing)) => SwarmReply::Collected {
                        key,
                        reached,
                        missing,
                    },
                    Err(e) => SwarmReply::Error {
                        message: e.to_string(),
                    },
                }
            }
            SwarmCommand::Usage => SwarmReply::Usage {
                usage: Usage::read_self()?,
                sessions: swarm.sims.len(),
            },
        };
        io.reply(&reply).await?;
    }
    swarm.stop_all().await;
    Ok(())
}

/// The coordinator's handle on the swarm process.
pub struct SwarmProc {
    proc: ChildProc,
    pub size: usize,
}

/// What `collect` found.
#[derive(Debug, Clone)]
pub struct Collected {
    pub reached: Vec<u64>,
    pub missing: usize,
}

impl Collected {
    /// The time the last session reached the condition.
    pub fn last(&self) -> Option<u64> {
        self.reached.iter().copied().max()
    }
}

impl SwarmProc {
    /// A swarm whose sessions connect to `gateways[sandbox.gateway]`.
    pub fn spawn(
        exe: &std::path::Path,
        gateways: &[String],
        channels: usize,
        ca_file: Option<&std::path::Path>,
        log: &str,
        log_path: &std::path::Path,
        nice: u8,
    ) -> Result<Self> {
        let mut args = vec!["swarm".to_string()];
        for gateway in gateways {
            args.push("--gateway".into());
            args.push(gateway.clone());
        }
        if let Some(ca) = ca_file {
            args.push("--ca-file".into());
            args.push(ca.display().to_string());
        }
        args.extend([
            "--channels".into(),
            channels.to_string(),
            "--log".into(),
            log.to_string(),
        ]);
        // Through nice(1): a niceness set before exec applies to every thread.
        let proc = if nice == 0 {
            ChildProc::spawn("swarm", exe, &args, log_path)?
        } else {
            let mut niced = vec![
                "-n".to_string(),
                nice.to_string(),
                exe.display().to_string(),
            ];
            niced.append(&mut args);
            ChildProc::spawn("swarm", std::path::Path::new("nice"), &niced, log_path)?
        };
        Ok(Self { proc, size: 0 })
    }

    async fn call(&mut self, command: &SwarmCommand, timeout: Duration) -> Result<SwarmReply> {
        match self.proc.call(command, timeout).await? {
            SwarmReply::Error { message } => bail!("swarm: {message}"),
            reply => Ok(reply),
        }
    }

    /// Starts supervisors for `sandboxes`; returns the index of the first one.
    pub async fn start(&mut self, sandboxes: Vec<SimSandbox>) -> Result<usize> {
        let first = self.size;
        match self
            .call(&SwarmCommand::Start { sandboxes }, Duration::from_secs(120))
            .await?
        {
            SwarmReply::Started { total } => {
                self.size = total;
                Ok(first)
            }
            other => bail!("unexpected reply from the swarm: {other:?}"),
        }
    }

    pub async fn stop_all(&mut self) -> Result<usize> {
        match self
            .call(&SwarmCommand::StopAll, Duration::from_secs(120))
            .await?
        {
            SwarmReply::Stopped { count } => {
                self.size = 0;
                Ok(count)
            }
            other => bail!("unexpected reply from the swarm: {other:?}"),
        }
    }

    pub async fn arm(
        &mut self,
        key: &str,
        indices: Option<Vec<usize>>,
        until: Until,
        from_zero: bool,
    ) -> Result<usize> {
        let command = SwarmCommand::Arm {
            key: key.to_string(),
            indices,
            until,
            from_zero,
        };
        match self.call(&command, Duration::from_secs(60)).await? {
            SwarmReply::Armed { count, .. } => Ok(count),
            other => bail!("unexpected reply from the swarm: {other:?}"),
        }
    }

    pub async fn collect(&mut self, key: &str, timeout: Duration) -> Result<Collected> {
        let command = SwarmCommand::Collect {
            key: key.to_string(),
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        };
        match self
            .call(&command, timeout + Duration::from_secs(60))
            .await?
        {
            SwarmReply::Collected {
                reached, missing, ..
            } => Ok(Collected { reached, missing }),
            other => bail!("unexpected reply from the swarm: {other:?}"),
        }
    }

    pub async fn usage(&mut self) -> Result<Usage> {
        match self
            .call(&SwarmCommand::Usage, Duration::from_secs(30))
            .await?
        {
            SwarmReply::Usage { usage, .. } => Ok(usage),
            other => bail!("unexpected reply from the swarm: {other:?}"),
        }
    }

    pub async fn finish(self) -> Result<()> {
        self.proc.finish(Duration::from_secs(90)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_a_new_accepted_and_acknowledged_session() {
        let base = Baseline::default();
        let mut s = SupervisorStatus::default();
        assert!(!reached(Until::Ready { push: true }, &base, &s));
        s.session = SessionState::Accepted {
            session_id: "ss-1".into(),
            push_apply: true,
        };
        s.sessions_accepted = 1;
        s.active = Some(Arc::default());
        assert!(
            !reached(Until::Ready { push: true }, &base, &s),
            "no ack yet"
        );
        s.acks_sent = 1;
        assert!(reached(Until::Ready { push: true }, &base, &s));
        assert!(
            !reached(Until::Ready { push: false }, &base, &s),
            "wrong mode"
        );
        let later = Baseline::of(&s);
        assert!(
            !reached(Until::Ready { push: true }, &later, &s),
            "same session"
        );
    }
}
