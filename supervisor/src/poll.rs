//! Poll mode: fetch the snapshots with the unary RPCs, apply what changed, report the outcome.
//!
//! The loop runs on its own, independent of the session, so it keeps working while the session
//! is down; it pauses only while a session has push apply negotiated.

use std::time::Duration;

use openshell_proto::v1::supervisor_client::SupervisorClient;
use openshell_proto::v1::{
    GetSandboxConfigRequest, GetSandboxProviderEnvironmentRequest, PolicyLoadStatus,
    ProviderEnvironmentSnapshot,
};
use std::sync::Arc;
use tokio::sync::watch;
use tonic::transport::Channel;
use tracing::{debug, warn};

use crate::desired::DesiredConfig;
use crate::engine::{Engine, Mode, Origin, Verdict};
use crate::identity::Identity;
use crate::outbox::{Outbox, StatusReport};

pub(crate) struct PollLoop {
    pub client: SupervisorClient<Channel>,
    pub identity: Identity,
    pub engine: Arc<Engine>,
    pub outbox: Outbox,
    pub rpc_timeout: Duration,
    /// The provider environment fetched last, reused while its revision is the expected one.
    pub cached_env: Option<ProviderEnvironmentSnapshot>,
    /// Consecutive failed polls, so an unreachable gateway logs once, not every interval.
    pub failures: u32,
}

impl PollLoop {
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut mode = self.engine.mode();
        loop {
            let current = tokio::select! {
                m = mode.wait_for(|m| m.polling) => match m {
                    Ok(m) => *m,
                    Err(_) => return,
                },
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            // Fetching may be abandoned at shutdown; an apply, once started, is not.
            let fetched = tokio::select! {
                fetched = self.fetch() => fetched,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            self.apply(fetched).await;
            tokio::select! {
                _ = tokio::time::sleep(current.poll_interval) => {}
                changed = mode.changed() => if changed.is_err() { return },
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        }
    }

    async fn apply(&mut self, fetched: Result<Option<DesiredConfig>, String>) {
        let desired = match fetched {
            Ok(Some(desired)) => desired,
            Ok(None) => return,
            Err(err) => {
                self.failures += 1;
                if self.failures == 1 {
                    warn!(error = %err, "polling the gateway failed; will keep trying");
                } else {
                    debug!(error = %err, failures = self.failures, "poll failed");
                }
                return;
            }
        };
        self.failures = 0;
        let outcome = self.engine.offer(desired, Origin::Poll).await;
        let (status, reason, failed_closed) = match outcome.verdict {
            Verdict::Unchanged => return,
            Verdict::Applied => (PolicyLoadStatus::Loaded, String::new(), false),
            Verdict::RetainedLocalOverride => (
                PolicyLoadStatus::RetainedLocalOverride,
                crate::LOCAL_OVERRIDE_REASON.to_string(),
                false,
            ),
            Verdict::Failed {
                reason,
                failed_closed,
            } => (PolicyLoadStatus::Failed, reason, failed_closed),
        };
        self.outbox.submit(StatusReport {
            status,
            revisions: outcome.revisions,
            reason,
            failed_closed,
        });
    }

    /// Both snapshots as a matching pair, or `None` when the pair does not match yet (the
    /// provider environment moved on between the two calls; the next poll sorts it out).
    async fn fetch(&mut self) -> Result<Option<DesiredConfig>, String> {
        let mut client = self.client.clone();
        let request = GetSandboxConfigRequest {
            identity: Some(self.identity.to_proto()),
        };
        let config = rpc(self.rpc_timeout, client.get_sandbox_config(request)).await?;
        if self.cached_env.is_none() {
            self.cached_env = self.engine.last_gateway_env().await;
        }
        let cached_matches = self
            .cached_env
            .as_ref()
            .is_some_and(|env| env.provider_env_revision == config.provider_env_revision);
        if !cached_matches {
            let request = GetSandboxProviderEnvironmentRequest {
                identity: Some(self.identity.to_proto()),
            };
            let env = rpc(
                self.rpc_timeout,
                client.get_sandbox_provider_environment(request),
            )
            .await?;
            self.cached_env = Some(env);
        }
        let env = self.cached_env.clone().unwrap_or_default();
        let desired = DesiredConfig::new(config, env);
        if !desired.pair_matches() {
            debug!(
                expected = %desired.sandbox_config.provider_env_revision,
                got = %desired.provider_env.provider_env_revision,
                "provider environment does not match the sandbox config yet; retrying next poll"
            );
            return Ok(None);
        }
        Ok(Some(desired))
    }
}

async fn rpc<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

/// Poll interval for a session's `poll_interval_ms`, falling back to the configured one.
pub(crate) fn effective_poll_interval(accepted_ms: u32, configured: Duration) -> Duration {
    if accepted_ms == 0 {
        configured
    } else {
        Duration::from_millis(u64::from(accepted_ms))
    }
}

/// The mode a session establishes.
pub(crate) fn mode_for(polling: bool, poll_interval: Duration) -> Mode {
    Mode {
        polling,
        poll_interval,
    }
}
