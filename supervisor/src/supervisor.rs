//! A gateway-backed supervisor without a workload: the session, the poll loop and the status
//! outbox around one applier. The binary adds the workload; the fleet benchmark runs thousands
//! of these with in-memory appliers.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::Instrument;

use crate::applier::{Applier, ApplyError};
use crate::engine::Engine;
use crate::error::SupervisorError;
use crate::gateway_session::SessionRunner;
use crate::local_policy::LocalPolicy;
use crate::logs::LogShipper;
use crate::middleware::Readiness;
use crate::options::{SupervisorOptions, gateway_client};
use crate::outbox::{Outbox, OutboxTask};
use crate::poll::{PollLoop, PollRetries};
use crate::status::SupervisorStatus;

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
