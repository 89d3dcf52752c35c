//! The configuration half of a push session without its transport.
//!
//! [`PushReplay`] takes the frames a gateway sends (the `SessionAccepted` with its bootstrap,
//! `ConfigUpdate`s, startup candidates) and answers them through the same bookkeeping
//! ([`crate::push`]) and the same engine a live session uses, against any [`Applier`]. With a
//! [`crate::MemoryApplier`] nothing touches a disk or a network: the fuzz targets of `fuzz/`
//! drive it with frames decoded from arbitrary bytes, and the regression tests below keep
//! what they found.

use std::sync::Arc;
use std::time::Duration;

use openshell_core::Secret;
use openshell_proto::v1::gateway_message::Payload as Inbound;
use openshell_proto::v1::supervisor_message::Payload as Outbound;
use openshell_proto::v1::{GatewayMessage, SupervisorMessage};
use tokio::sync::watch;

use crate::applier::Applier;
use crate::backoff::BackoffConfig;
use crate::engine::{Engine, mode_for};
use crate::gateway_session::prepare_candidate;
use crate::push::{PushState, apply_bootstrap, handle_update};
use crate::status::SupervisorStatus;

/// Poll interval the engine is given; a replayed session never polls.
const POLL_INTERVAL: Duration = Duration::from_secs(10);

/// An apply-capable push session's handling of gateway frames, fed one frame at a time.
pub struct PushReplay {
    engine: Engine,
    /// `None` until a `SessionAccepted` with apply enabled bootstraps the session.
    push: Option<PushState>,
}

impl PushReplay {
    /// A session of sandbox `sandbox_id` (snapshots of another sandbox are refused, as on a
    /// live session) applying through `applier`.
    pub fn new(sandbox_id: &str, applier: Arc<dyn Applier>) -> Self {
        let (status, _) = watch::channel(SupervisorStatus::default());
        Self {
            engine: Engine::new(
                applier,
                sandbox_id.to_string(),
                Secret::new("replay-credential"),
                None,
                POLL_INTERVAL,
                BackoffConfig::apply_retry(),
                status,
            ),
            push: None,
        }
    }

    /// Handles one frame as a session that offered config apply does, and returns the frame
    /// it answers with, if any. A `SessionAccepted` (again) starts the bookkeeping afresh from
    /// its bootstrap, as a new session would; frames that need no answer return `None`.
    pub async fn receive(&mut self, frame: GatewayMessage) -> Option<SupervisorMessage> {
        let answer = match frame.payload? {
            Inbound::SessionAccepted(accepted) => {
                if !accepted.config_apply_enabled {
                    self.push = None;
                    return None;
                }
                self.engine.set_mode(mode_for(false, POLL_INTERVAL)).await;
                // A replayed session never shuts down, so every bootstrap is answered.
                let (state, result) = apply_bootstrap(
                    &self.engine,
                    accepted.bootstrap_config.as_ref(),
                    accepted.bootstrap_provider_environment.as_ref(),
                )
                .await?;
                self.push = Some(state);
                Outbound::BootstrapResult(result)
            }
            Inbound::ConfigUpdate(update) => {
                let state = self.push.as_mut()?;
                Outbound::ConfigUpdateResult(handle_update(state, &self.engine, update).await?)
            }
            Inbound::StartupCandidate(candidate) => {
                Outbound::StartupPrepared(prepare_candidate(&candidate))
            }
            Inbound::Heartbeat(_) | Inbound::SessionRejected(_) => return None,
        };
        Some(SupervisorMessage {
            payload: Some(answer),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use openshell_proto::v1::{
        ConfigApplyStatus, ConfigComponent, ConfigUpdate, SandboxConfigSnapshot, SessionAccepted,
        config_update::Snapshot,
    };

    use super::*;
    use crate::MemoryApplier;
    use crate::desired::tests::sample;

    fn accepted(policy_revision: u64) -> GatewayMessage {
        let d = sample(policy_revision, "e1");
        let config = ConfigUpdate {
            delivery_id: 1,
            sequence: 1,
            component: ConfigComponent::SandboxConfig as i32,
            fingerprint: String::new(),
            snapshot: Some(Snapshot::SandboxConfig(
                SandboxConfigSnapshot::from_response(&d.to_response()),
            )),
        };
        let env = ConfigUpdate {
            delivery_id: 2,
            sequence: 2,
            component: ConfigComponent::ProviderEnvironment as i32,
            fingerprint: String::new(),
            snapshot: Some(Snapshot::ProviderEnvironment(d.provider_env)),
        };
        GatewayMessage {
            payload: Some(Inbound::SessionAccepted(SessionAccepted {
                config_apply_enabled: true,
                config_push_enabled: true,
                bootstrap_config: Some(config),
                bootstrap_provider_environment: Some(env),
                ..SessionAccepted::default()
            })),
        }
    }

    #[tokio::test]
    async fn a_bootstrap_applies_and_a_replayed_update_is_stale() {
        let applier = Arc::new(MemoryApplier::new());
        let mut replay = PushReplay::new("sb-1", applier.clone());
        let Some(Outbound::BootstrapResult(result)) =
            replay.receive(accepted(3)).await.unwrap().payload
        else {
            panic!("a bootstrap is answered with its result");
        };
        assert!(result.applied, "{}", result.reason);
        assert_eq!(applier.apply_count(), 1);

        let Some(Inbound::SessionAccepted(again)) = accepted(3).payload else {
            unreachable!()
        };
        let update = GatewayMessage {
            payload: Some(Inbound::ConfigUpdate(again.bootstrap_config.unwrap())),
        };
        let Some(Outbound::ConfigUpdateResult(ack)) = replay.receive(update).await.unwrap().payload
        else {
            panic!("an update is answered with its result");
        };
        assert_eq!(ack.status(), ConfigApplyStatus::Stale);
        assert_eq!(applier.apply_count(), 1);
    }

    #[tokio::test]
    async fn updates_before_a_bootstrap_and_heartbeats_are_not_answered() {
        let mut replay = PushReplay::new("sb-1", Arc::new(MemoryApplier::new()));
        let update = GatewayMessage {
            payload: Some(Inbound::ConfigUpdate(ConfigUpdate::default())),
        };
        assert!(replay.receive(update).await.is_none());
        assert!(replay.receive(GatewayMessage::default()).await.is_none());
    }
}
