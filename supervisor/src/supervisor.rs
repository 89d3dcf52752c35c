//! A gateway-backed supervisor without a workload: the session, the poll loop and the status
//! outbox around one applier. The binary adds the workload; the fleet benchmark runs thousands
//! of these with in-memory appliers.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use openshell_proto::v1::SupervisorHello;
use tokio::sync::watch;
use tonic::transport::Channel;
use tracing::Instrument;

use crate::applier::{Applier, ApplyError};
use crate::backoff::BackoffConfig;
use crate::client::{GatewayClient, client, lazy_channel};
use crate::engine::Engine;
use crate::error::SupervisorError;
use crate::gateway_session::SessionRunner;
use crate::identity::Identity;
use crate::local_policy::LocalPolicy;
use crate::logs::{LogBuffer, LogShipper};
use crate::middleware::Readiness;
use crate::outbox::{Outbox, OutboxTask};
use crate::poll::{PollLoop, PollRetries};
use crate::status::SupervisorStatus;

/// Protocol revision this supervisor speaks by default.
pub const PROTOCOL_REVISION: u32 = 1;

/// This process among the supervisors of a sandbox (`SupervisorHello.instance_id`): random,
/// drawn once per process start, so a restarted supervisor is told apart from the one before
/// it. Supervisors sharing a process (the fleet benchmark) share it; their sandbox ids differ.
pub fn instance_id() -> &'static str {
    static INSTANCE_ID: LazyLock<String> =
        LazyLock::new(|| format!("{:032x}", rand::random::<u128>()));
    &INSTANCE_ID
}

/// Everything a gateway-backed supervisor needs. [`SupervisorOptions::new`] fills in the
/// production defaults; tests shorten the intervals.
#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    /// Gateway URL, e.g. `http://127.0.0.1:7070`.
    pub gateway: String,
    /// A ready channel to use instead of connecting to `gateway` (lets many simulated
    /// supervisors share connections).
    pub channel: Option<Channel>,
    /// PEM CA certificate for an `https` gateway.
    pub ca_pem: Option<Vec<u8>>,
    pub identity: Identity,
    /// 0 emulates a legacy supervisor: it advertises no capability at all.
    pub protocol_revision: u32,
    /// Advertise `supports_config_apply` (false: `--no-config-apply`, snapshots only).
    pub config_apply: bool,
    /// A local policy file that keeps precedence over the gateway's policy.
    pub local_policy: Option<LocalPolicy>,
    /// Image policy text offered in the hello for the startup exchange.
    pub image_policy: Option<String>,
    pub poll_interval: Duration,
    /// Used unless the gateway's `SessionAccepted` names one.
    pub heartbeat_interval: Duration,
    /// Silence after which a session that has seen gateway heartbeats counts as lost;
    /// `None`: four heartbeat intervals, at least 20 s.
    pub idle_timeout: Option<Duration>,
    /// Bound on waiting for `SessionAccepted` (the gateway may take 45 s to build a bootstrap).
    pub accept_timeout: Duration,
    pub connect_timeout: Duration,
    /// Bound on each unary call (polls and reports).
    pub rpc_timeout: Duration,
    pub reconnect_backoff: BackoffConfig,
    /// A session accepted for longer than this resets the reconnect backoff.
    pub backoff_reset_after: Duration,
    pub report_backoff: BackoffConfig,
    /// Delays between attempts to apply a configuration that failed for a reason that can pass
    /// (a full disk, say); see [`BackoffConfig::apply_retry`].
    pub apply_retry_backoff: BackoffConfig,
    /// Log lines to push to the gateway (`PushSandboxLogs`); `None` pushes none.
    pub logs: Option<LogBuffer>,
    /// How long log lines gather before a push.
    pub log_flush_interval: Duration,
}

/// A client of the gateway on the options' channel, or else on a new lazily connecting one:
/// each call makes a connection of its own, which is how a session that went silent gets away
/// from a connection that may be dead.
pub(crate) fn gateway_client(
    options: &SupervisorOptions,
) -> Result<GatewayClient, SupervisorError> {
    let channel = match &options.channel {
        Some(channel) => channel.clone(),
        None => lazy_channel(
            &options.gateway,
            options.ca_pem.as_deref(),
            options.connect_timeout,
        )?,
    };
    client(channel, &options.identity)
}

impl SupervisorOptions {
    pub fn new(gateway: impl Into<String>, identity: Identity) -> Self {
        Self {
            gateway: gateway.into(),
            channel: None,
            ca_pem: None,
            identity,
            protocol_revision: PROTOCOL_REVISION,
            config_apply: true,
            local_policy: None,
            image_policy: None,
            poll_interval: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(5),
            idle_timeout: None,
            accept_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            rpc_timeout: Duration::from_secs(30),
            reconnect_backoff: BackoffConfig::default(),
            backoff_reset_after: Duration::from_secs(30),
            report_backoff: BackoffConfig::default(),
            apply_retry_backoff: BackoffConfig::apply_retry(),
            logs: None,
            log_flush_interval: Duration::from_millis(500),
        }
    }

    /// Advertises receiving snapshots.
    pub fn supports_config_snapshots(&self) -> bool {
        self.protocol_revision > 0
    }

    /// Advertises applying and acknowledging snapshots.
    pub fn supports_config_apply(&self) -> bool {
        self.protocol_revision > 0 && self.config_apply
    }

    /// The first frame of every session. The credential is not in it: it travels as metadata
    /// of the call (see [`crate::client`]).
    pub fn hello(&self) -> SupervisorHello {
        SupervisorHello {
            sandbox_id: self.identity.sandbox_id.clone(),
            instance_id: instance_id().to_string(),
            protocol_revision: self.protocol_revision,
            supervisor_version: env!("CARGO_PKG_VERSION").to_string(),
            supports_config_snapshots: self.supports_config_snapshots(),
            supports_config_apply: self.supports_config_apply(),
            image_policy: self.image_policy.clone().unwrap_or_default(),
            local_policy_override: self.local_policy.is_some(),
        }
    }
}

/// A gateway-backed supervisor. Cheap to clone; clones share one state.
#[derive(Clone)]
pub struct Supervisor {
    options: Arc<SupervisorOptions>,
    engine: Arc<Engine>,
    status: watch::Sender<SupervisorStatus>,
    /// Whether the workload started and the state of the remote middleware it needs; `None`
    /// until the first check is done (or without a workload). Apart from the status so that
    /// an accepted session, which reports it, is not woken by every apply and ack.
    readiness: watch::Sender<Option<Readiness>>,
}

impl Supervisor {
    pub fn new(options: SupervisorOptions, applier: Arc<dyn Applier>) -> Self {
        let (status, _) = watch::channel(SupervisorStatus::default());
        if let Some(logs) = &options.logs {
            logs.learn_secrets([options.identity.credential.expose()]);
        }
        let engine = Arc::new(
            Engine::new(
                applier,
                options.identity.sandbox_id.clone(),
                options.identity.credential.clone(),
                options.local_policy.clone(),
                options.poll_interval,
                options.apply_retry_backoff,
                status.clone(),
            )
            .with_log_masks(options.logs.clone()),
        );
        Self {
            options: Arc::new(options),
            engine,
            status,
            readiness: watch::channel(None).0,
        }
    }

    pub fn options(&self) -> &SupervisorOptions {
        &self.options
    }

    /// Progress, for waiting on a condition (`status().wait_for(…)`).
    pub fn status(&self) -> watch::Receiver<SupervisorStatus> {
        self.status.subscribe()
    }

    /// Records whether the workload started and why; an accepted session tells the gateway.
    pub fn set_readiness(&self, readiness: Readiness) {
        self.readiness.send_replace(Some(readiness));
    }

    /// The supervisor is stopping: from now on it applies no configuration (see
    /// [`Engine::begin_shutdown`]); the session stays up for the last log lines.
    pub fn begin_shutdown(&self) {
        self.engine.begin_shutdown();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.engine.is_shutting_down()
    }

    /// Replaces the local policy after its file changed and re-applies the gateway's
    /// configuration on top of it. `None` when no gateway configuration arrived yet.
    pub async fn set_local_policy(&self, policy: LocalPolicy) -> Option<Result<(), ApplyError>> {
        self.engine.set_local_policy(policy).await
    }

    /// Runs the session, the poll loop and the status outbox until `shutdown` completes.
    /// Returns an error only when the gateway rejects the session permanently (or the
    /// gateway address or the credential is unusable); everything else is retried.
    pub async fn run<F>(&self, shutdown: F) -> Result<(), SupervisorError>
    where
        F: Future<Output = ()> + Send,
    {
        let span = tracing::info_span!("supervisor", sandbox = %self.options.identity.sandbox_id);
        self.run_inner(shutdown).instrument(span).await
    }

    async fn run_inner<F>(&self, shutdown: F) -> Result<(), SupervisorError>
    where
        F: Future<Output = ()> + Send,
    {
        let options = &self.options;
        let client = gateway_client(options)?;
        let (stop, stopped) = watch::channel(false);
        let (outbox, outbox_task) = Outbox::spawn(
            OutboxTask {
                client: client.clone(),
                sandbox_id: options.identity.sandbox_id.clone(),
                backoff: options.report_backoff,
                rpc_timeout: options.rpc_timeout,
                status: self.status.clone(),
            },
            stopped.clone(),
        );
        let retries = PollRetries {
            engine: self.engine.clone(),
            outbox: outbox.clone(),
        };
        let retry_task = tokio::spawn(retries.run(stopped.clone()).in_current_span());
        let expiry_task = tokio::spawn(
            crate::expiry::run(
                self.engine.clone(),
                self.status.subscribe(),
                stopped.clone(),
            )
            .in_current_span(),
        );
        let poll = PollLoop {
            client: client.clone(),
            sandbox_id: options.identity.sandbox_id.clone(),
            engine: self.engine.clone(),
            outbox,
            rpc_timeout: options.rpc_timeout,
            cached_env: None,
            failures: 0,
        };
        let poll_task = tokio::spawn(poll.run(stopped.clone()).in_current_span());
        let log_task = options.logs.clone().map(|buffer| {
            let shipper = LogShipper {
                client: client.clone(),
                sandbox_id: options.identity.sandbox_id.clone(),
                buffer,
                status: self.status.subscribe(),
                credential: options.identity.credential.clone(),
                flush_interval: options.log_flush_interval,
                backoff: options.report_backoff,
                rpc_timeout: options.rpc_timeout,
            };
            tokio::spawn(shipper.run(stopped.clone()))
        });
        let session = SessionRunner {
            client,
            options: options.clone(),
            engine: self.engine.clone(),
            status: self.status.clone(),
            readiness: self.readiness.clone(),
        };
        let session_task = session.run(stopped);
        tokio::pin!(session_task);
        tokio::pin!(shutdown);
        let result = tokio::select! {
            r = &mut session_task => r,
            () = &mut shutdown => {
                let _ = stop.send(true);
                // Let an apply in progress finish, so files and acks stay consistent.
                session_task.await
            }
        };
        let _ = stop.send(true);
        let _ = poll_task.await;
        let _ = retry_task.await;
        let _ = expiry_task.await;
        let _ = outbox_task.await;
        if let Some(task) = log_task {
            let _ = task.await;
        }
        result.map_err(|reason| SupervisorError::Rejected { reason })
    }
}

/// Runs a gateway-backed supervisor around `applier` until `shutdown` completes, without a
/// workload. See [`Supervisor::run`].
pub async fn run_session<F>(
    options: SupervisorOptions,
    applier: Arc<dyn Applier>,
    shutdown: F,
) -> Result<(), SupervisorError>
where
    F: Future<Output = ()> + Send,
{
    Supervisor::new(options, applier).run(shutdown).await
}
