//! The one path every configuration takes on its way to the applier.
//!
//! Push, polling and the local policy watcher all offer configurations here. The engine
//! serializes applies, keeps one view of what is active, applies the local policy override,
//! skips configurations that are already active (or already failed: no reject loops), and
//! turns the result into a verdict the caller reports. It also owns the switch between push and
//! poll, so that a poll result fetched just before a push session took over can never overwrite
//! what the push session applied.

use std::sync::Arc;
use std::time::Duration;

use openshell_core::Secret;
use openshell_proto::v1::AppliedRevisions;
use tokio::sync::{Mutex, watch};
use tracing::{info, warn};

use crate::applier::{Applier, ApplyError, ApplyStage};
use crate::desired::DesiredConfig;
use crate::local_policy::{GatewayPolicyId, LocalPolicy, gateway_policy_retained};
use crate::poll::mode_for;
use crate::sanitize::sanitize_reason;
use crate::status::SupervisorStatus;

/// Who offers a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A poll result: ignored while a push session applies, never retried after a failure.
    Poll,
    /// A pushed snapshot or bootstrap: a configuration that failed before is tried again.
    Push,
}

/// What became of an offered configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to do: the same configuration was offered before (or a push session owns
    /// applying right now). Not reported again.
    Unchanged,
    /// The configuration is in effect.
    Applied,
    /// Settings and provider environment are in effect; the gateway's new policy is not,
    /// because the local policy file keeps precedence.
    RetainedLocalOverride,
    /// The previous configuration stays active (or the sandbox is quarantined).
    Failed { reason: String, failed_closed: bool },
}

#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub verdict: Verdict,
    /// Revisions of the offered gateway configuration (not of the local override).
    pub revisions: AppliedRevisions,
}

/// Whether polling may apply configuration, and how often to poll.
///
/// Polling starts switched off: the first session attempt decides. A push session switches it
/// off; a session without apply, a lost session or an unreachable gateway switches it on. So an
/// apply-capable supervisor never polls while push works, not even once at start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Mode {
    pub polling: bool,
    pub poll_interval: Duration,
    /// Wait before the first poll under this mode. Set when polling takes over from a lost
    /// push session: a gateway restart drops the sessions of the whole fleet at once, and
    /// polling all at that instant would pile a poll storm onto the reconnect storm.
    pub first_poll_delay: Duration,
}

#[derive(Default)]
struct EngineState {
    local: Option<LocalPolicy>,
    polling: bool,
    active_fingerprint: Option<String>,
    last_gateway: Option<Arc<DesiredConfig>>,
    last_gateway_fingerprint: Option<String>,
    last_failed: bool,
    seen_policy: Option<GatewayPolicyId>,
}

pub(crate) struct Engine {
    applier: Arc<dyn Applier>,
    sandbox_id: String,
    credential: Secret,
    state: Mutex<EngineState>,
    status: watch::Sender<SupervisorStatus>,
    mode: watch::Sender<Mode>,
}

impl Engine {
    pub fn new(
        applier: Arc<dyn Applier>,
        sandbox_id: String,
        credential: Secret,
        local: Option<LocalPolicy>,
        poll_interval: Duration,
        status: watch::Sender<SupervisorStatus>,
    ) -> Self {
        let (mode, _) = watch::channel(mode_for(false, poll_interval));
        Self {
            applier,
            sandbox_id,
            credential,
            state: Mutex::new(EngineState {
                local,
                ..EngineState::default()
            }),
            status,
            mode,
        }
    }

    pub fn mode(&self) -> watch::Receiver<Mode> {
        self.mode.subscribe()
    }

    /// Switches polling on or off. Taken under the apply lock, so no poll result is applied
    /// after a push session took over.
    pub async fn set_mode(&self, mode: Mode) {
        let mut state = self.state.lock().await;
        state.polling = mode.polling;
        self.mode.send_if_modified(|current| {
            let changed = *current != mode;
            *current = mode;
            changed
        });
    }

    /// The provider environment last offered by the gateway, so polling can skip refetching
    /// it while its revision holds.
    pub async fn last_gateway_env(
        &self,
    ) -> Option<openshell_proto::v1::ProviderEnvironmentSnapshot> {
        let state = self.state.lock().await;
        state.last_gateway.as_ref().map(|d| d.provider_env.clone())
    }

    /// Offers the gateway's desired configuration.
    pub async fn offer(&self, gateway: DesiredConfig, origin: Origin) -> Outcome {
        let revisions = gateway.revisions();
        let outcome = |verdict| Outcome {
            verdict,
            revisions: revisions.clone(),
        };
        if let Some(reason) = self.foreign_sandbox(&gateway) {
            return outcome(Verdict::Failed {
                reason,
                failed_closed: false,
            });
        }
        let mut state = self.state.lock().await;
        if origin == Origin::Poll && !state.polling {
            return outcome(Verdict::Unchanged);
        }
        let fingerprint = gateway.fingerprint();
        let seen_before = state.last_gateway_fingerprint.as_deref() == Some(fingerprint.as_str());
        if seen_before && !(state.last_failed && origin == Origin::Push) {
            return outcome(Verdict::Unchanged);
        }
        let policy_id = GatewayPolicyId::of(&gateway.sandbox_config);
        let retained = state.local.is_some()
            && gateway_policy_retained(state.seen_policy.as_ref(), &policy_id);
        // Without a local policy the gateway's configuration is the effective one: shared,
        // and fingerprinted once (a fanout offers every supervisor a new one).
        let gateway = Arc::new(gateway);
        let (effective, effective_fingerprint) = match &state.local {
            Some(local) => {
                let overlaid = local.overlay(&gateway);
                let overlaid_fingerprint = overlaid.fingerprint();
                (Arc::new(overlaid), overlaid_fingerprint)
            }
            None => (gateway.clone(), fingerprint.clone()),
        };
        let result = self
            .activate(&mut state, effective, effective_fingerprint)
            .await;
        state.last_failed = result.is_err();
        state.last_gateway_fingerprint = Some(fingerprint);
        state.last_gateway = Some(gateway);
        state.seen_policy = Some(policy_id);
        outcome(match result {
            Ok(()) if retained => Verdict::RetainedLocalOverride,
            Ok(()) => Verdict::Applied,
            Err(err) => Verdict::Failed {
                reason: err.reason,
                failed_closed: err.failed_closed,
            },
        })
    }

    /// Replaces the local policy (the file was edited) and re-applies the last gateway
    /// configuration on top of it. `None` when there is no gateway configuration yet.
    pub async fn set_local_policy(&self, local: LocalPolicy) -> Option<Result<(), ApplyError>> {
        let mut state = self.state.lock().await;
        state.local = Some(local.clone());
        let gateway = state.last_gateway.clone()?;
        let effective = local.overlay(&gateway);
        let fingerprint = effective.fingerprint();
        Some(
            self.activate(&mut state, Arc::new(effective), fingerprint)
                .await,
        )
    }

    fn foreign_sandbox(&self, desired: &DesiredConfig) -> Option<String> {
        let config_id = &desired.sandbox_config.sandbox_id;
        let env_id = &desired.provider_env.sandbox_id;
        let foreign = |id: &String| !id.is_empty() && *id != self.sandbox_id;
        (foreign(config_id) || foreign(env_id))
            .then(|| "snapshot belongs to another sandbox; refusing it".to_string())
    }

    /// Applies `effective` (whose fingerprint is `fingerprint`) unless it is already active.
    async fn activate(
        &self,
        state: &mut EngineState,
        effective: Arc<DesiredConfig>,
        fingerprint: String,
    ) -> Result<(), ApplyError> {
        if state.active_fingerprint.as_deref() == Some(fingerprint.as_str()) {
            return Ok(());
        }
        let r = effective.revisions();
        let source = effective.sandbox_config.policy_source().as_str_name();
        match self.applier.apply(&effective).await {
            Ok(report) => {
                info!(
                    policy_source = source,
                    policy_revision = r.policy_revision,
                    policy_hash = %r.policy_hash,
                    global_policy_revision = r.global_policy_revision,
                    global_settings_revision = r.global_settings_revision,
                    workspace_settings_revision = r.workspace_settings_revision,
                    sandbox_settings_revision = r.sandbox_settings_revision,
                    provider_env_revision = %r.provider_env_revision,
                    provider_values = effective.provider_env.values.len(),
                    first_activation = report.first_activation,
                    "configuration applied"
                );
                state.active_fingerprint = Some(fingerprint);
                self.status.send_modify(|s| {
                    s.active = Some(effective);
                    s.applies += 1;
                    s.quarantined = false;
                });
                Ok(())
            }
            Err(err) => {
                let err = self.sanitized(err, &effective);
                warn!(
                    policy_revision = r.policy_revision,
                    policy_hash = %r.policy_hash,
                    provider_env_revision = %r.provider_env_revision,
                    failed_closed = err.failed_closed,
                    reason = %err.reason,
                    "configuration apply failed; last-known-good stays active"
                );
                self.status.send_modify(|s| {
                    s.failures += 1;
                    s.last_failure = Some(err.reason.clone());
                    s.quarantined = err.failed_closed;
                });
                Err(err)
            }
        }
    }

    /// Applier errors are sanitized already; this adds the credential, which only the engine
    /// knows, so no applier can leak it.
    fn sanitized(&self, mut err: ApplyError, desired: &DesiredConfig) -> ApplyError {
        err.reason = sanitize_reason(
            &err.reason,
            desired
                .sensitive_values()
                .chain(std::iter::once(self.credential.expose())),
        );
        if err.reason.is_empty() {
            err.reason = match err.stage {
                ApplyStage::Stage => "configuration rejected".into(),
                ApplyStage::Activate => "activation failed".into(),
                ApplyStage::Hook => "on-apply hook failed".into(),
            };
        }
        err
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::MemoryApplier;
    use crate::desired::tests::sample;
    use std::path::Path;

    async fn engine(applier: Arc<MemoryApplier>, local: Option<LocalPolicy>) -> Engine {
        let (status, _) = watch::channel(SupervisorStatus::default());
        let e = Engine::new(
            applier,
            "sb-1".into(),
            Secret::new("supervisor-credential-xyz"),
            local,
            Duration::from_secs(10),
            status,
        );
        e.set_mode(mode_for(true, Duration::from_secs(10))).await;
        e
    }

    #[tokio::test]
    async fn applies_once_and_skips_repeats() {
        let applier = Arc::new(MemoryApplier::new());
        let e = engine(applier.clone(), None).await;
        let o = e.offer(sample(1, "e1"), Origin::Poll).await;
        assert_eq!(o.verdict, Verdict::Applied);
        assert_eq!(o.revisions.policy_revision, 1);
        let o = e.offer(sample(1, "e1"), Origin::Poll).await;
        assert_eq!(o.verdict, Verdict::Unchanged);
        assert_eq!(applier.apply_count(), 1);
    }

    #[tokio::test]
    async fn failed_config_is_not_retried_by_poll_but_is_by_push() {
        let applier = Arc::new(MemoryApplier::failing("hook says no"));
        let e = engine(applier.clone(), None).await;
        let o = e.offer(sample(1, "e1"), Origin::Poll).await;
        assert!(matches!(o.verdict, Verdict::Failed { .. }));
        applier.set_failure(None);
        assert_eq!(
            e.offer(sample(1, "e1"), Origin::Poll).await.verdict,
            Verdict::Unchanged,
            "same fingerprint: no reject loop"
        );
        assert_eq!(applier.apply_count(), 0);
        assert_eq!(
            e.offer(sample(1, "e1"), Origin::Push).await.verdict,
            Verdict::Applied
        );
        assert_eq!(
            e.offer(sample(2, "e1"), Origin::Poll).await.verdict,
            Verdict::Applied
        );
    }

    #[tokio::test]
    async fn poll_offers_are_ignored_while_push_applies() {
        let applier = Arc::new(MemoryApplier::new());
        let e = engine(applier.clone(), None).await;
        e.set_mode(mode_for(false, Duration::from_secs(1))).await;
        assert_eq!(
            e.offer(sample(1, "e1"), Origin::Poll).await.verdict,
            Verdict::Unchanged
        );
        assert_eq!(applier.apply_count(), 0);
    }

    #[tokio::test]
    async fn foreign_snapshot_is_refused() {
        let applier = Arc::new(MemoryApplier::new());
        let e = engine(applier.clone(), None).await;
        let mut d = sample(1, "e1");
        d.sandbox_config.sandbox_id = "sb-other".into();
        assert!(matches!(
            e.offer(d, Origin::Push).await.verdict,
            Verdict::Failed { .. }
        ));
        assert_eq!(applier.apply_count(), 0);
    }

    #[tokio::test]
    async fn local_override_statuses() {
        let local = LocalPolicy::parse(Path::new("p.yaml"), "version: 1\n").unwrap();
        let applier = Arc::new(MemoryApplier::new());
        let e = engine(applier.clone(), Some(local.clone())).await;

        // The gateway has a policy the local file keeps out of effect.
        let o = e.offer(sample(1, "e1"), Origin::Push).await;
        assert_eq!(o.verdict, Verdict::RetainedLocalOverride);
        assert_eq!(
            o.revisions.policy_revision, 1,
            "reports the gateway's revisions"
        );
        let active = applier.active().unwrap();
        assert_eq!(active.sandbox_config.policy_hash, local.hash());

        // Only the provider environment changes: applied.
        let mut env_only = sample(1, "e2");
        env_only.provider_env.values[0].value = "ghp_rotated0001".into();
        assert_eq!(
            e.offer(env_only, Origin::Push).await.verdict,
            Verdict::Applied
        );
        assert_eq!(
            applier.active().unwrap().provider_env.values[0].value,
            "ghp_rotated0001"
        );

        // A new gateway policy revision: retained, and nothing new to apply.
        let before = applier.apply_count();
        let mut policy_only = sample(2, "e2");
        policy_only.provider_env.values[0].value = "ghp_rotated0001".into();
        let o = e.offer(policy_only, Origin::Push).await;
        assert_eq!(o.verdict, Verdict::RetainedLocalOverride);
        assert_eq!(o.revisions.policy_revision, 2);
        assert_eq!(
            applier.apply_count(),
            before,
            "effective config did not change"
        );
    }

    #[tokio::test]
    async fn reasons_never_carry_the_credential_or_values() {
        let applier = Arc::new(MemoryApplier::failing(
            "boom supervisor-credential-xyz ghp_secretvalue42 github.example",
        ));
        let e = engine(applier, None).await;
        match e.offer(sample(1, "e1"), Origin::Push).await.verdict {
            Verdict::Failed { reason, .. } => {
                assert!(!reason.contains("supervisor-credential-xyz"), "{reason}");
                assert!(!reason.contains("ghp_secretvalue42"), "{reason}");
                assert!(!reason.contains("github.example"), "{reason}");
                assert!(reason.starts_with("boom"));
            }
            other => panic!("{other:?}"),
        }
    }
}
