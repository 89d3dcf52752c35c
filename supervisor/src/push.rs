//! Push mode: the bootstrap in `SessionAccepted` and the `ConfigUpdate` frames after it.
//!
//! [`PushState`] is the per-session bookkeeping: the highest sequence seen (older frames are
//! `STALE`), the fingerprint of each component's active snapshot (`DUPLICATE`), and the latest
//! snapshot of each component, activated only as a matching pair (`AWAITING_COMPONENT`
//! meanwhile), and the last activation that failed, so that when the engine applies it on a
//! retry ([`crate::engine::Engine::retry`]) the success is acked for that delivery and
//! revisions. It is created fresh for every session, from that session's bootstrap.

use openshell_proto::v1::config_update::Snapshot;
use openshell_proto::v1::{
    AppliedRevisions, BootstrapResult, ConfigApplyStatus, ConfigComponent, ConfigUpdate,
    ConfigUpdateResult, GetSandboxProviderEnvironmentResponse, SandboxConfigSnapshot,
};

use std::sync::Arc;

use crate::desired::{
    DesiredConfig, SharedPolicy, config_fingerprint, config_revisions, env_fingerprint,
    env_revision, env_revisions,
};
use crate::engine::{Engine, Origin, Outcome, Verdict};

#[derive(Debug, Clone)]
struct Latest<T> {
    snapshot: T,
    fingerprint: String,
}

/// The latest `sandbox_config`, kept as it arrived, with its policy decoded. The next
/// snapshot with the same policy bytes shares that policy instead of decoding its own.
#[derive(Debug, Clone)]
struct LatestConfig {
    wire: SandboxConfigSnapshot,
    policy: Option<Arc<SharedPolicy>>,
    fingerprint: String,
    /// The `provider_environment` revision it was built against.
    expects_env: String,
}

/// What to do with one received `ConfigUpdate`.
#[derive(Debug)]
pub(crate) enum Step {
    /// Answer right away; nothing to apply.
    Ack(ConfigUpdateResult),
    /// The pair is complete: apply it, then [`PushState::finish`] builds the answer.
    Activate {
        /// Boxed: a pair of snapshots is large beside an answer.
        desired: Box<DesiredConfig>,
        delivery_id: u64,
        component: ConfigComponent,
    },
}

#[derive(Debug, Default)]
pub(crate) struct PushState {
    highest_sequence: Option<u64>,
    config: Option<LatestConfig>,
    env: Option<Latest<GetSandboxProviderEnvironmentResponse>>,
    active_config: Option<String>,
    active_env: Option<String>,
    failed: Option<FailedActivation>,
}

/// An activation that failed: the delivery it answered, and the fingerprints of the pair it
/// tried, which become the active ones if a retry applies it (later snapshots may have
/// arrived meanwhile, waiting for their other half).
#[derive(Debug)]
struct FailedActivation {
    delivery_id: u64,
    component: ConfigComponent,
    config: Option<String>,
    env: Option<String>,
}

impl PushState {
    /// Starts a session's bookkeeping from its bootstrap. Returns the pair to apply, or why
    /// the bootstrap is unusable.
    pub fn from_bootstrap(
        config: Option<&ConfigUpdate>,
        env: Option<&ConfigUpdate>,
    ) -> (Self, Result<DesiredConfig, String>) {
        let mut state = Self::default();
        let (Some(config), Some(env)) = (config, env) else {
            return (
                state,
                Err("bootstrap is incomplete: it needs both sandbox_config and provider_environment".into()),
            );
        };
        for update in [config, env] {
            state.see_sequence(update.sequence);
        }
        match (&config.snapshot, &env.snapshot) {
            (Some(Snapshot::SandboxConfig(wire)), Some(Snapshot::ProviderEnvironment(e))) => {
                let policy = match state.policy_of(wire) {
                    Ok(policy) => policy,
                    Err(reason) => return (state, Err(reason)),
                };
                let c = wire.to_response_without_policy();
                state.config = Some(LatestConfig {
                    wire: wire.clone(),
                    policy: policy.clone(),
                    fingerprint: fingerprint_of(config),
                    expects_env: config_revisions(&c).provider_env_revision,
                });
                state.env = Some(Latest {
                    snapshot: e.clone(),
                    fingerprint: fingerprint_of(env),
                });
                let desired = DesiredConfig::from_parts(c, policy, e.clone());
                if desired.pair_matches() {
                    (state, Ok(desired))
                } else {
                    (
                        state,
                        Err(format!(
                            "bootstrap components disagree: sandbox_config expects provider_env_revision {:?}, provider_environment has {:?}",
                            config_revisions(&desired.sandbox_config).provider_env_revision,
                            env_revision(e)
                        )),
                    )
                }
            }
            _ => (
                state,
                Err("bootstrap components do not carry the expected snapshots".into()),
            ),
        }
    }

    /// Marks the bootstrap pair active after it applied.
    pub fn bootstrap_applied(&mut self) {
        self.mark_active();
    }

    /// Remembers a bootstrap that failed, as its `sandbox_config` delivery.
    fn bootstrap_failed(&mut self, delivery_id: u64) {
        self.remember_failure(delivery_id, ConfigComponent::SandboxConfig);
    }

    fn remember_failure(&mut self, delivery_id: u64, component: ConfigComponent) {
        self.failed = Some(FailedActivation {
            delivery_id,
            component,
            config: self.config.as_ref().map(|c| c.fingerprint.clone()),
            env: self.env.as_ref().map(|e| e.fingerprint.clone()),
        });
    }

    /// A pushed `sandbox_config`'s policy, decoded, or shared with the latest snapshot's
    /// when the bytes are the same.
    fn policy_of(&self, wire: &SandboxConfigSnapshot) -> Result<Option<Arc<SharedPolicy>>, String> {
        if wire.policy.is_empty() {
            // An empty embedded message is not written: the snapshot has no policy.
            return Ok(None);
        }
        if let Some(latest) = &self.config
            && latest.wire.policy == wire.policy
        {
            return Ok(latest.policy.clone());
        }
        SharedPolicy::decode(&wire.policy)
            .map(|policy| Some(Arc::new(policy)))
            .map_err(|e| format!("sandbox_config does not decode: {e}"))
    }

    /// Takes the update by value: its snapshot is kept as the latest one, moved rather than
    /// copied (10k supervisors on one machine copied theirs on every push of a fanout).
    pub fn receive(&mut self, update: ConfigUpdate) -> Step {
        let component = update.component();
        let delivery_id = update.delivery_id;
        // Read once: its revisions go in every answer, and it is what gets applied.
        let config = match &update.snapshot {
            Some(Snapshot::SandboxConfig(c)) => Some(c.to_response_without_policy()),
            _ => None,
        };
        let revisions = match (&config, &update.snapshot) {
            (Some(c), _) => config_revisions(c),
            (None, Some(Snapshot::ProviderEnvironment(e))) => env_revisions(e),
            _ => AppliedRevisions::default(),
        };
        let ack = |status: ConfigApplyStatus, reason: &str| {
            Step::Ack(result(
                delivery_id,
                component,
                revisions.clone(),
                status,
                reason,
                false,
            ))
        };
        if let Some(highest) = self.highest_sequence
            && update.sequence <= highest
        {
            return ack(ConfigApplyStatus::Stale, "");
        }
        self.see_sequence(update.sequence);
        let fingerprint = fingerprint_of(&update);
        // The update's own `sandbox_config` and policy, when it carries one.
        let mut fresh = None;
        match (component, config, update.snapshot) {
            (ConfigComponent::SandboxConfig, Some(c), Some(Snapshot::SandboxConfig(wire))) => {
                let policy = match self.policy_of(&wire) {
                    Ok(policy) => policy,
                    Err(reason) => return ack(ConfigApplyStatus::Failed, &reason),
                };
                let duplicate = self.active_config.as_deref() == Some(fingerprint.as_str());
                self.config = Some(LatestConfig {
                    wire,
                    policy: policy.clone(),
                    fingerprint,
                    expects_env: revisions.provider_env_revision.clone(),
                });
                if duplicate {
                    return ack(ConfigApplyStatus::Duplicate, "");
                }
                fresh = Some((c, policy));
            }
            (
                ConfigComponent::ProviderEnvironment,
                None,
                Some(Snapshot::ProviderEnvironment(e)),
            ) => {
                let duplicate = self.active_env.as_deref() == Some(fingerprint.as_str());
                self.env = Some(Latest {
                    snapshot: e,
                    fingerprint,
                });
                if duplicate {
                    return ack(ConfigApplyStatus::Duplicate, "");
                }
            }
            _ => {
                return ack(
                    ConfigApplyStatus::Failed,
                    "update carries no snapshot, or one that does not match its component",
                );
            }
        }
        match (&self.config, &self.env) {
            (Some(c), Some(e)) if c.expects_env == env_revision(&e.snapshot) => {
                let (config, policy) = match fresh {
                    Some(fresh) => fresh,
                    None => (c.wire.to_response_without_policy(), c.policy.clone()),
                };
                Step::Activate {
                    desired: Box::new(DesiredConfig::from_parts(
                        config,
                        policy,
                        e.snapshot.clone(),
                    )),
                    delivery_id,
                    component,
                }
            }
            _ => ack(ConfigApplyStatus::AwaitingComponent, ""),
        }
    }

    /// Records the outcome of an activation and builds its answer.
    pub fn finish(
        &mut self,
        delivery_id: u64,
        component: ConfigComponent,
        outcome: Outcome,
    ) -> ConfigUpdateResult {
        match outcome.verdict {
            Verdict::Failed { .. } => self.remember_failure(delivery_id, component),
            // Not marked active: the same snapshot again must not be answered DUPLICATE (that
            // reads as applied); the engine answers it with the rejected policy again.
            Verdict::RetainedRejectedPolicy { .. } => self.failed = None,
            _ => {
                self.mark_active();
                self.failed = None;
            }
        }
        let (status, reason, failed_closed) = answer(outcome.verdict);
        result(
            delivery_id,
            component,
            outcome.revisions,
            status,
            &reason,
            failed_closed,
        )
    }

    /// Builds the answer for a configuration the engine applied on a retry: the delivery
    /// whose activation failed is acked again, now with the success, so the gateway resolves
    /// the operations waiting for those revisions.
    pub fn finish_retry(&mut self, outcome: Outcome) -> ConfigUpdateResult {
        let (delivery_id, component) = match self.failed.take() {
            Some(failed) => {
                self.active_config = failed.config;
                self.active_env = failed.env;
                (failed.delivery_id, failed.component)
            }
            // The retry was for a change this session did not deliver (the local policy file
            // was edited): no delivery to name, the revisions alone say what is in effect.
            None => (0, ConfigComponent::SandboxConfig),
        };
        let (status, reason, failed_closed) = answer(outcome.verdict);
        result(
            delivery_id,
            component,
            outcome.revisions,
            status,
            &reason,
            failed_closed,
        )
    }

    fn see_sequence(&mut self, sequence: u64) {
        self.highest_sequence = Some(self.highest_sequence.map_or(sequence, |h| h.max(sequence)));
    }

    fn mark_active(&mut self) {
        self.active_config = self.config.as_ref().map(|c| c.fingerprint.clone());
        self.active_env = self.env.as_ref().map(|e| e.fingerprint.clone());
    }
}

/// Handles one `ConfigUpdate` end to end and returns the answer to send; `None` when the
/// supervisor is shutting down and did not apply it (no answer leaves it pending).
pub(crate) async fn handle_update(
    state: &mut PushState,
    engine: &Engine,
    update: ConfigUpdate,
) -> Option<ConfigUpdateResult> {
    match state.receive(update) {
        Step::Ack(result) => Some(result),
        Step::Activate {
            desired,
            delivery_id,
            component,
        } => {
            let outcome = engine.offer(*desired, Origin::Push).await;
            if outcome.verdict == Verdict::ShuttingDown {
                return None;
            }
            Some(state.finish(delivery_id, component, outcome))
        }
    }
}

/// Applies a session's bootstrap and returns the new bookkeeping and the result frame;
/// `None` when the supervisor is shutting down and did not apply it. That is not answered:
/// a refused bootstrap is parked by the gateway, and the next supervisor must get it.
pub(crate) async fn apply_bootstrap(
    engine: &Engine,
    config: Option<&ConfigUpdate>,
    env: Option<&ConfigUpdate>,
) -> Option<(PushState, BootstrapResult)> {
    let (mut state, desired) = PushState::from_bootstrap(config, env);
    let desired = match desired {
        Ok(desired) => desired,
        Err(reason) => {
            let revisions = config.map(update_revisions).unwrap_or_default();
            return Some((
                state,
                BootstrapResult {
                    applied: false,
                    revisions: Some(revisions),
                    reason,
                    kept_last_known_good: engine.has_active().await,
                    policy_rejected: false,
                },
            ));
        }
    };
    let outcome = engine.offer(desired, Origin::Push).await;
    let (applied, reason, policy_rejected) = match outcome.verdict {
        Verdict::ShuttingDown => return None,
        Verdict::Applied | Verdict::Unchanged => (true, String::new(), false),
        Verdict::RetainedLocalOverride => (true, crate::LOCAL_OVERRIDE_REASON.to_string(), false),
        Verdict::RetainedRejectedPolicy { reason } => (false, reason, true),
        Verdict::Failed { reason, .. } => (false, reason, false),
    };
    if applied {
        state.bootstrap_applied();
    } else if !policy_rejected && let Some(config) = config {
        state.bootstrap_failed(config.delivery_id);
    }
    // A refused bootstrap does not end the session when a configuration from before (the
    // last-known-good, or a quarantine) keeps running: the gateway keeps the session and
    // does not resend what was refused. With nothing to run, the gateway ends it.
    let kept_last_known_good = !applied && engine.has_active().await;
    Some((
        state,
        BootstrapResult {
            applied,
            revisions: Some(outcome.revisions),
            reason,
            kept_last_known_good,
            policy_rejected,
        },
    ))
}

/// The status, reason and fail-closed flag that answer a verdict.
fn answer(verdict: Verdict) -> (ConfigApplyStatus, String, bool) {
    match verdict {
        Verdict::Applied | Verdict::Unchanged => (ConfigApplyStatus::Applied, String::new(), false),
        Verdict::RetainedLocalOverride => (
            ConfigApplyStatus::RetainedLocalOverride,
            crate::LOCAL_OVERRIDE_REASON.to_string(),
            false,
        ),
        Verdict::RetainedRejectedPolicy { reason } => (
            ConfigApplyStatus::RetainedLastKnownGoodPolicy,
            reason,
            false,
        ),
        Verdict::Failed {
            reason,
            failed_closed,
        } => (ConfigApplyStatus::Failed, reason, failed_closed),
        // The callers answer nothing for it; were it answered, never as applied.
        Verdict::ShuttingDown => (
            ConfigApplyStatus::Failed,
            "the supervisor is shutting down; not applied".to_string(),
            false,
        ),
    }
}

fn fingerprint_of(update: &ConfigUpdate) -> String {
    if !update.fingerprint.is_empty() {
        return update.fingerprint.clone();
    }
    match &update.snapshot {
        Some(Snapshot::SandboxConfig(c)) => config_fingerprint(c),
        Some(Snapshot::ProviderEnvironment(e)) => env_fingerprint(e),
        None => String::new(),
    }
}

fn update_revisions(update: &ConfigUpdate) -> AppliedRevisions {
    match &update.snapshot {
        Some(Snapshot::SandboxConfig(c)) => config_revisions(&c.to_response_without_policy()),
        Some(Snapshot::ProviderEnvironment(e)) => env_revisions(e),
        None => AppliedRevisions::default(),
    }
}

fn result(
    delivery_id: u64,
    component: ConfigComponent,
    revisions: AppliedRevisions,
    status: ConfigApplyStatus,
    reason: &str,
    failed_closed: bool,
) -> ConfigUpdateResult {
    ConfigUpdateResult {
        delivery_id,
        component: component as i32,
        revisions: Some(revisions),
        status: status as i32,
        reason: reason.to_string(),
        failed_closed,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
