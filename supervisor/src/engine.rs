//! The one path every configuration takes on its way to the applier.
//!
//! Push, polling and the local policy watcher all offer configurations here. The engine
//! serializes applies, keeps one view of what is active, applies the local policy override,
//! skips configurations that are already active (or already failed: no reject loops), and
//! turns the result into a verdict the caller reports. It also owns the switch between push and
//! poll, so that a poll result fetched just before a push session took over can never overwrite
//! what the push session applied.
//!
//! A failure is either a verdict on the content or an accident of the moment
//! ([`ApplyError::is_transient`]). Rejected content is parked until different content arrives.
//! A transient failure (a full disk, say) is retried with backoff ([`Engine::retry`]), by
//! whichever side applies at the time: the push session, which acks the success, or the poll
//! side, which reports it. Without that, nothing would ever apply it: the gateway does not
//! resend what the supervisor answered `FAILED`, and a poll of unchanged content is skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use openshell_core::Secret;
use openshell_proto::v1::AppliedRevisions;
use tokio::sync::{Mutex, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::applier::{Applier, ApplyError, ApplyStage};
use crate::backoff::{Backoff, BackoffConfig};
use crate::desired::DesiredConfig;
use crate::local_policy::{GatewayPolicyId, LocalPolicy, gateway_policy_retained};
use crate::logs::LogBuffer;
use crate::sanitize::sanitize_reason;
use crate::status::SupervisorStatus;

/// Who offers a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A poll result: ignored while a push session applies; after a failure the same content
    /// is not offered again (a transient failure is retried by the engine instead).
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
    /// Settings and provider environment are in effect; the gateway's policy is not, because
    /// this supervisor rejected it: the last-known-good policy stays in effect with them. The
    /// reason names the rejected revision ([`RejectedPolicy::message`]).
    RetainedRejectedPolicy { reason: String },
    /// Not applied: the supervisor is shutting down ([`Engine::begin_shutdown`]). Not
    /// answered either: the gateway keeps the operation pending and delivers the
    /// configuration to the next session, not knowing it as applied or refused.
    ShuttingDown,
}

/// A gateway policy the supervisor rejected while it had a last-known-good one, which stays
/// in effect. Later configurations bringing the same policy (a settings or provider change
/// while it is rejected) apply with the last-known-good policy instead of being refused
/// whole; a different policy ends it.
#[derive(Debug, Clone)]
struct RejectedPolicy {
    id: GatewayPolicyId,
    reason: String,
}

impl RejectedPolicy {
    /// "policy revision N was rejected: REASON; fix it first", what every answer says while
    /// the policy stays rejected.
    fn message(&self) -> String {
        let which = if self.id.global_policy_revision > 0 && self.id.policy_revision == 0 {
            format!("global policy revision {}", self.id.global_policy_revision)
        } else {
            format!("policy revision {}", self.id.policy_revision)
        };
        format!("{which} was rejected: {}; fix it first", self.reason)
    }
}

/// `gateway` with the policy of `active` in place of its own: what a configuration whose
/// policy is rejected applies instead.
fn with_policy_of(gateway: &DesiredConfig, active: &DesiredConfig) -> DesiredConfig {
    let mut merged = gateway.clone();
    merged.set_policy(active.shared_policy().cloned());
    let (to, from) = (&mut merged.sandbox_config, &active.sandbox_config);
    to.policy_source = from.policy_source;
    to.policy_revision = from.policy_revision;
    to.version = from.version;
    to.policy_hash.clone_from(&from.policy_hash);
    to.global_policy_revision = from.global_policy_revision;
    to.global_policy_version = from.global_policy_version;
    merged.policy_is_local = active.policy_is_local;
    merged
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    pub verdict: Verdict,
    /// Revisions of the offered gateway configuration (not of the local override).
    pub revisions: AppliedRevisions,
}

/// Whether polling may apply configuration, and how often to poll.
///
/// Polling starts switched off: sessions decide. A push session switches it off; a session
/// without apply switches it on. Once a configuration is in effect, a lost session or an
/// unreachable gateway switches it on too; before that they switch it off, so the workload
/// starts only from an accepted bootstrap or a poll under a session negotiated as poll. So an
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

/// The mode a session establishes.
pub(crate) fn mode_for(polling: bool, poll_interval: Duration) -> Mode {
    Mode {
        polling,
        poll_interval,
        first_poll_delay: Duration::ZERO,
    }
}

#[derive(Default)]
struct EngineState {
    local: Option<LocalPolicy>,
    polling: bool,
    active_fingerprint: Option<String>,
    last_gateway: Option<Arc<DesiredConfig>>,
    last_gateway_fingerprint: Option<String>,
    last_failed: bool,
    /// Whether the last gateway configuration offered brings a policy the local one keeps out
    /// of effect: what a retry that applies it reports.
    last_retained: bool,
    seen_policy: Option<GatewayPolicyId>,
    retry: Option<Retry>,
    /// The configuration in effect (after any local override): the last-known-good.
    active: Option<Arc<DesiredConfig>>,
    rejected_policy: Option<RejectedPolicy>,
}

/// The last gateway configuration failed to apply for a reason that can pass: when to try
/// it again.
struct Retry {
    gateway_fingerprint: String,
    backoff: Backoff,
    due: Instant,
}

pub(crate) struct Engine {
    applier: Arc<dyn Applier>,
    sandbox_id: String,
    credential: Secret,
    state: Mutex<EngineState>,
    status: watch::Sender<SupervisorStatus>,
    mode: watch::Sender<Mode>,
    retry_backoff: BackoffConfig,
    /// When the pending retry is due, for [`Engine::retry_ready`].
    retry_at: watch::Sender<Option<Instant>>,
    /// Set once the supervisor began to stop: nothing is applied after it.
    shutting_down: AtomicBool,
    /// The log lines leaving the sandbox, masked with every value before it is applied.
    logs: Option<LogBuffer>,
}

/// Whether `origin` is the side that applies while polling is `polling`.
fn applies_now(origin: Origin, polling: bool) -> bool {
    match origin {
        Origin::Poll => polling,
        Origin::Push => !polling,
    }
}

impl Engine {
    pub fn new(
        applier: Arc<dyn Applier>,
        sandbox_id: String,
        credential: Secret,
        local: Option<LocalPolicy>,
        poll_interval: Duration,
        retry_backoff: BackoffConfig,
        status: watch::Sender<SupervisorStatus>,
    ) -> Self {
        let (mode, _) = watch::channel(mode_for(false, poll_interval));
        let (retry_at, _) = watch::channel(None);
        // Not published as the status's active configuration: the workload starts from what
        // the gateway's bootstrap (or first poll) leaves in effect, which is this one only
        // when the gateway's latest policy is refused.
        let active = applier
            .last_known_good()
            .filter(|recovered| recovered.sandbox_config.sandbox_id == sandbox_id)
            .map(Arc::new);
        Self {
            applier,
            sandbox_id,
            credential,
            state: Mutex::new(EngineState {
                local,
                active,
                ..EngineState::default()
            }),
            status,
            mode,
            retry_backoff,
            retry_at,
            shutting_down: AtomicBool::new(false),
            logs: None,
        }
    }

    /// Masks the values of every configuration out of `logs` from before it is applied, so
    /// the workload cannot print one that its output is not yet masked with.
    pub fn with_log_masks(mut self, logs: Option<LogBuffer>) -> Self {
        self.logs = logs;
        self
    }

    /// From now on nothing is applied: the workload is being stopped, and a configuration
    /// applied now would be acknowledged as in effect in a sandbox that is going away. An
    /// apply already under way finishes (and is answered) first: every apply takes the state
    /// lock and looks at this after taking it.
    pub fn begin_shutdown(&self) {
        if !self.shutting_down.swap(true, Ordering::SeqCst) {
            info!("shutting down: configuration that arrives from now on is not applied");
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// The error for a local policy edit that arrives while shutting down.
    fn shutting_down_error() -> ApplyError {
        ApplyError {
            stage: ApplyStage::Stage,
            kind: crate::applier::ApplyErrorKind::Rejected,
            reason: "the supervisor is shutting down; nothing more is applied".into(),
            failed_closed: false,
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
    ) -> Option<openshell_proto::v1::GetSandboxProviderEnvironmentResponse> {
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
        if self.is_shutting_down() {
            return outcome(Verdict::ShuttingDown);
        }
        if origin == Origin::Poll && !state.polling {
            return outcome(Verdict::Unchanged);
        }
        let fingerprint = gateway.fingerprint();
        let policy_id = GatewayPolicyId::of(&gateway.sandbox_config);
        let rejected = state
            .rejected_policy
            .clone()
            .filter(|r| r.id == policy_id && state.local.is_none());
        let seen_before = state.last_gateway_fingerprint.as_deref() == Some(fingerprint.as_str());
        // A push session (a bootstrap after a reconnect, say) is told again that the policy
        // stays rejected; the rejected policy itself is not tried again.
        let push_again = origin == Origin::Push && (state.last_failed || rejected.is_some());
        if seen_before && !push_again {
            return outcome(Verdict::Unchanged);
        }
        let retained = state.local.is_some()
            && gateway_policy_retained(state.seen_policy.as_ref(), &policy_id);
        let gateway = Arc::new(gateway);
        let verdict = match rejected {
            Some(rejected) => {
                self.apply_without_policy(&mut state, &gateway, rejected)
                    .await
            }
            None => {
                let (effective, effective_fingerprint) = effective(&state, &gateway, &fingerprint);
                let result = self
                    .activate(&mut state, effective, effective_fingerprint)
                    .await;
                match result {
                    Ok(()) => {
                        state.rejected_policy = None;
                        if retained {
                            Verdict::RetainedLocalOverride
                        } else {
                            Verdict::Applied
                        }
                    }
                    Err(err) => {
                        let verdict = self.after_rejection(&mut state, &gateway, &err).await;
                        self.settle_retry(&mut state, &Err(err), &fingerprint);
                        verdict
                    }
                }
            }
        };
        if !matches!(verdict, Verdict::Failed { .. }) {
            self.settle_retry(&mut state, &Ok(()), &fingerprint);
        }
        state.last_failed = matches!(verdict, Verdict::Failed { .. });
        state.last_retained = retained;
        state.last_gateway_fingerprint = Some(fingerprint);
        state.last_gateway = Some(gateway);
        state.seen_policy = Some(policy_id);
        outcome(verdict)
    }

    /// After `gateway` was refused with `err`: when the content was rejected (not a failure
    /// that can pass, not a fail_closed quarantine), a last-known-good configuration is
    /// active, no local policy overrides the gateway's and the gateway's policy differs from
    /// the one in effect, the same configuration is applied with the policy in effect. If that
    /// applies, the policy was what the supervisor refused: it is parked as rejected, and
    /// settings and provider environment are in effect. Otherwise the failure stands.
    async fn after_rejection(
        &self,
        state: &mut EngineState,
        gateway: &Arc<DesiredConfig>,
        err: &ApplyError,
    ) -> Verdict {
        let failed = Verdict::Failed {
            reason: err.reason.clone(),
            failed_closed: err.failed_closed,
        };
        let Some(active) = state.active.clone() else {
            return failed;
        };
        let policy_id = GatewayPolicyId::of(&gateway.sandbox_config);
        if err.is_transient()
            || err.failed_closed
            || state.local.is_some()
            || GatewayPolicyId::of(&active.sandbox_config) == policy_id
        {
            return failed;
        }
        let fallback = Arc::new(with_policy_of(gateway, &active));
        let fallback_fingerprint = fallback.fingerprint();
        match self.activate(state, fallback, fallback_fingerprint).await {
            Ok(()) => {
                let rejected = RejectedPolicy {
                    id: policy_id,
                    reason: err.reason.clone(),
                };
                let reason = rejected.message();
                warn!(%reason, "the gateway's policy was rejected; its settings and provider environment apply with the last-known-good policy");
                state.rejected_policy = Some(rejected);
                Verdict::RetainedRejectedPolicy { reason }
            }
            Err(_) => failed,
        }
    }

    /// Applies `gateway`, whose policy is `rejected`, with the policy in effect.
    async fn apply_without_policy(
        &self,
        state: &mut EngineState,
        gateway: &Arc<DesiredConfig>,
        rejected: RejectedPolicy,
    ) -> Verdict {
        let reason = rejected.message();
        let Some(active) = state.active.clone() else {
            return Verdict::Failed {
                reason,
                failed_closed: false,
            };
        };
        let fallback = Arc::new(with_policy_of(gateway, &active));
        let fallback_fingerprint = fallback.fingerprint();
        match self.activate(state, fallback, fallback_fingerprint).await {
            Ok(()) => Verdict::RetainedRejectedPolicy { reason },
            Err(err) => Verdict::Failed {
                reason: format!(
                    "{reason} (with the last-known-good policy this change failed too: {})",
                    err.reason
                ),
                failed_closed: err.failed_closed,
            },
        }
    }

    /// Whether a configuration is in effect: the last-known-good a failed bootstrap leaves
    /// running.
    pub async fn has_active(&self) -> bool {
        self.state.lock().await.active.is_some()
    }

    /// Replaces the local policy (the file was edited) and re-applies the last gateway
    /// configuration on top of it. `None` when there is no gateway configuration yet.
    pub async fn set_local_policy(&self, local: LocalPolicy) -> Option<Result<(), ApplyError>> {
        let mut state = self.state.lock().await;
        if self.is_shutting_down() {
            return Some(Err(Self::shutting_down_error()));
        }
        state.local = Some(local.clone());
        let gateway = state.last_gateway.clone()?;
        let gateway_fingerprint = state.last_gateway_fingerprint.clone().unwrap_or_default();
        let effective = local.overlay(&gateway);
        let fingerprint = effective.fingerprint();
        let result = self
            .activate(&mut state, Arc::new(effective), fingerprint)
            .await;
        self.settle_retry(&mut state, &result, &gateway_fingerprint);
        Some(result)
    }

    /// Completes once a retry is due and `origin` is the side that applies now, so that
    /// [`Engine::retry`] from the same side will try it. Holds nothing between polls: safe to
    /// drop in a `select!`.
    pub async fn retry_ready(&self, origin: Origin) {
        let mut due = self.retry_at.subscribe();
        let mut mode = self.mode.subscribe();
        loop {
            let at = *due.borrow_and_update();
            let ours = applies_now(origin, mode.borrow_and_update().polling);
            let wait = async move {
                match (ours, at) {
                    (true, Some(at)) => tokio::time::sleep_until(at).await,
                    _ => std::future::pending().await,
                }
            };
            // The senders live as long as `self`, so neither `changed` fails here.
            tokio::select! {
                () = wait => return,
                _ = due.changed() => {}
                _ = mode.changed() => {}
            }
        }
    }

    /// Applies the last gateway configuration again if it failed for a reason that can pass
    /// and its retry is due, and `origin` is the side that applies now (the answer then goes
    /// where the gateway expects it). Returns the outcome to report once it applied; a
    /// failure again is logged and retried later, not reported again (the gateway knows it
    /// failed), and a rejection now parks it.
    pub async fn retry(&self, origin: Origin) -> Option<Outcome> {
        let mut state = self.state.lock().await;
        if self.is_shutting_down() {
            // Dropped, so that `retry_ready` waits for good instead of firing again at once.
            state.retry = None;
            self.publish_retry(&state);
            return None;
        }
        if !applies_now(origin, state.polling) {
            return None;
        }
        let retry = state.retry.as_ref()?;
        if retry.due > Instant::now() {
            return None;
        }
        let gateway_fingerprint = retry.gateway_fingerprint.clone();
        let gateway = match &state.last_gateway {
            Some(gateway)
                if state.last_gateway_fingerprint.as_deref()
                    == Some(gateway_fingerprint.as_str()) =>
            {
                gateway.clone()
            }
            // Other content arrived meanwhile; its own offer decided.
            _ => {
                state.retry = None;
                self.publish_retry(&state);
                return None;
            }
        };
        let attempt = retry.backoff.attempts();
        let (effective, effective_fingerprint) = effective(&state, &gateway, &gateway_fingerprint);
        self.status.send_modify(|s| s.apply_retries += 1);
        let result = self
            .activate(&mut state, effective, effective_fingerprint)
            .await;
        state.last_failed = result.is_err();
        self.settle_retry(&mut state, &result, &gateway_fingerprint);
        result.ok()?;
        let revisions = gateway.revisions();
        info!(
            policy_revision = revisions.policy_revision,
            provider_env_revision = %revisions.provider_env_revision,
            attempt,
            "configuration applied on retry"
        );
        Some(Outcome {
            verdict: if state.last_retained {
                Verdict::RetainedLocalOverride
            } else {
                Verdict::Applied
            },
            revisions,
        })
    }

    /// After an apply of the gateway configuration `gateway_fingerprint`: schedules the next
    /// retry after a transient failure (the backoff goes on growing while the same content
    /// keeps failing), or drops any retry after a success or a rejection.
    fn settle_retry(
        &self,
        state: &mut EngineState,
        result: &Result<(), ApplyError>,
        gateway_fingerprint: &str,
    ) {
        state.retry = match result {
            Err(err) if err.is_transient() => {
                let mut backoff = match state.retry.take() {
                    Some(retry) if retry.gateway_fingerprint == gateway_fingerprint => {
                        retry.backoff
                    }
                    _ => Backoff::new(self.retry_backoff),
                };
                let delay = backoff.next_delay();
                warn!(
                    retry_in = ?delay,
                    attempt = backoff.attempts(),
                    "the apply failure can pass; applying the same configuration again after a delay"
                );
                Some(Retry {
                    gateway_fingerprint: gateway_fingerprint.to_string(),
                    backoff,
                    due: Instant::now() + delay,
                })
            }
            _ => None,
        };
        self.publish_retry(state);
    }

    fn publish_retry(&self, state: &EngineState) {
        let due = state.retry.as_ref().map(|retry| retry.due);
        self.retry_at.send_if_modified(|current| {
            let changed = *current != due;
            *current = due;
            changed
        });
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
        // The gateway states each credential's expiry; an expired one never reaches the
        // workload, whatever configuration it arrives in.
        let now = crate::desired::now_ms();
        let (effective, fingerprint) = match effective.without_expired_credentials(now) {
            Some(kept) => {
                warn!(
                    withheld = ?effective.expired_credentials(now),
                    "credentials past their expiry are withheld from the workload"
                );
                let fingerprint = kept.fingerprint();
                (Arc::new(kept), fingerprint)
            }
            None => (effective, fingerprint),
        };
        if state.active_fingerprint.as_deref() == Some(fingerprint.as_str()) {
            return Ok(());
        }
        let r = effective.revisions();
        let source = effective.policy_source_name();
        if let Some(logs) = &self.logs {
            logs.learn_secrets(effective.sensitive_values());
        }
        match self.applier.apply_shared(&effective).await {
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
                    provider_values = effective.provider_env.environment.len(),
                    first_activation = report.first_activation,
                    "configuration applied"
                );
                state.active_fingerprint = Some(fingerprint);
                state.active = Some(effective.clone());
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

    /// When the next credential of the configuration in effect expires.
    pub async fn next_credential_expiry(&self) -> Option<i64> {
        let state = self.state.lock().await;
        state.active.as_ref()?.next_credential_expiry()
    }

    /// Activates the configuration in effect again without the credentials that expired
    /// since it was applied (see [`crate::expiry`]).
    pub async fn withhold_expired_credentials(&self) {
        let mut state = self.state.lock().await;
        if self.is_shutting_down() {
            return;
        }
        let Some(active) = state.active.clone() else {
            return;
        };
        let fingerprint = active.fingerprint();
        // A failure is logged and counted by `activate`; the applier keeps the last
        // configuration, and the next gateway snapshot is applied as usual.
        let _ = self.activate(&mut state, active, fingerprint).await;
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

/// The configuration to activate for `gateway`: the gateway's own, or with the local policy
/// in place of its policy. Without a local policy it is shared, and fingerprinted once (a
/// fanout offers every supervisor a new one).
fn effective(
    state: &EngineState,
    gateway: &Arc<DesiredConfig>,
    gateway_fingerprint: &str,
) -> (Arc<DesiredConfig>, String) {
    match &state.local {
        Some(local) => {
            let overlaid = local.overlay(gateway);
            let overlaid_fingerprint = overlaid.fingerprint();
            (Arc::new(overlaid), overlaid_fingerprint)
        }
        None => (gateway.clone(), gateway_fingerprint.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::desired::tests::{sample, set_message, version_9_policy};
    use crate::file_applier::state_dir::{WriteFault, WriteStep};
    use crate::file_applier::{FileApplier, FileApplierConfig};
    use crate::{ApplyErrorKind, MemoryApplier};
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    fn rotate_token(d: &mut DesiredConfig) {
        d.provider_env
            .environment
            .insert("GITHUB_TOKEN".into(), "ghp_rotated0001".into());
    }

    async fn engine(applier: Arc<MemoryApplier>, local: Option<LocalPolicy>) -> Engine {
        engine_with(applier, local, BackoffConfig::apply_retry()).await
    }

    async fn engine_with(
        applier: Arc<dyn Applier>,
        local: Option<LocalPolicy>,
        retry_backoff: BackoffConfig,
    ) -> Engine {
        let (status, _) = watch::channel(SupervisorStatus::default());
        let e = Engine::new(
            applier,
            "sb-1".into(),
            Secret::new("supervisor-credential-xyz"),
            local,
            Duration::from_secs(10),
            retry_backoff,
            status,
        );
        e.set_mode(mode_for(true, Duration::from_secs(10))).await;
        e
    }

    /// Waits until a retry is due for `origin` and returns how long that took; panics when
    /// none comes within an hour (of paused time: at once).
    async fn next_retry(e: &Engine, origin: Origin) -> Duration {
        let start = Instant::now();
        tokio::time::timeout(Duration::from_secs(3600), e.retry_ready(origin))
            .await
            .expect("no retry was scheduled");
        Instant::now() - start
    }

    /// No retry is due for `origin` within an hour (of paused time: checked at once).
    async fn assert_no_retry(e: &Engine, origin: Origin) {
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), e.retry_ready(origin))
                .await
                .is_err(),
            "a retry was scheduled"
        );
    }

    /// 1, 2, 4, … s without jitter, so the test can check each delay exactly.
    fn exact_backoff() -> BackoffConfig {
        BackoffConfig {
            jitter: 0.0,
            ..BackoffConfig::apply_retry()
        }
    }

    /// A state directory whose disk is full while `full` is set: every write fails the way a
    /// real one does, with ENOSPC. Counts the generations it was asked to write.
    struct Disk {
        full: Arc<AtomicBool>,
        attempts: Arc<AtomicUsize>,
        applier: Arc<FileApplier>,
        _dir: tempfile::TempDir,
    }

    fn disk(full: bool) -> Disk {
        let dir = tempfile::tempdir().unwrap();
        let full = Arc::new(AtomicBool::new(full));
        let attempts = Arc::new(AtomicUsize::new(0));
        let mut config = FileApplierConfig::new(dir.path(), "sb-1");
        let (is_full, counted) = (full.clone(), attempts.clone());
        config.write_fault = Some(WriteFault::new(move |step| {
            if step == WriteStep::CreateGeneration {
                counted.fetch_add(1, Ordering::SeqCst);
                if is_full.load(Ordering::SeqCst) {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ENOSPC));
                }
            }
            Ok(())
        }));
        Disk {
            full,
            attempts,
            applier: Arc::new(FileApplier::new(config).unwrap()),
            _dir: dir,
        }
    }

    fn active_policy_revision(disk: &Disk) -> Option<u64> {
        let generation = disk.applier.state_dir().read_active().unwrap()?;
        let revisions: serde_json::Value =
            serde_json::from_slice(generation.file("revisions.json")?).unwrap();
        revisions["policy_revision"].as_u64()
    }

    /// Defect: a write that failed on a full disk was answered FAILED and never tried again,
    /// so the desired configuration stayed parked until a restart.
    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_retried_with_backoff_until_it_applies() {
        let disk = disk(true);
        let e = engine_with(disk.applier.clone(), None, exact_backoff()).await;
        let o = e.offer(sample(1, "e1"), Origin::Poll).await;
        match &o.verdict {
            Verdict::Failed { reason, .. } => {
                assert!(reason.contains("No space left on device"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(active_policy_revision(&disk), None);
        assert_eq!(e.retry(Origin::Poll).await, None, "not due yet");

        // Still full: each retry waits twice as long as the one before.
        for expected in [1, 2, 4, 8] {
            assert_eq!(
                next_retry(&e, Origin::Poll).await,
                Duration::from_secs(expected)
            );
            assert_eq!(
                e.retry(Origin::Poll).await,
                None,
                "still failing: nothing to report"
            );
        }
        assert_eq!(disk.attempts.load(Ordering::SeqCst), 5);

        // Space is freed. Without any new content the same configuration applies, and the
        // outcome to report names its revisions.
        disk.full.store(false, Ordering::SeqCst);
        next_retry(&e, Origin::Poll).await;
        let o = e.retry(Origin::Poll).await.expect("applied on retry");
        assert_eq!(o.verdict, Verdict::Applied);
        assert_eq!(o.revisions, sample(1, "e1").revisions());
        assert_eq!(active_policy_revision(&disk), Some(1));
        assert_eq!(e.status.borrow().apply_retries, 5);

        // Done: no more retries, and the same content offered again is unchanged.
        assert_no_retry(&e, Origin::Poll).await;
        assert_eq!(
            e.offer(sample(1, "e1"), Origin::Poll).await.verdict,
            Verdict::Unchanged
        );
        assert_eq!(disk.attempts.load(Ordering::SeqCst), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn the_backoff_stops_growing_at_thirty_seconds() {
        let disk = disk(true);
        let e = engine_with(disk.applier.clone(), None, exact_backoff()).await;
        e.offer(sample(1, "e1"), Origin::Poll).await;
        let mut delays = Vec::new();
        for _ in 0..8 {
            delays.push(next_retry(&e, Origin::Poll).await.as_secs());
            assert_eq!(e.retry(Origin::Poll).await, None);
        }
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[tokio::test(start_paused = true)]
    async fn rejected_content_is_parked_not_retried() {
        // Invalid content, on a disk that would take it.
        let disk = disk(false);
        let e = engine_with(disk.applier.clone(), None, exact_backoff()).await;
        e.offer(sample(1, "e1"), Origin::Poll).await;
        let mut bad = sample(2, "e1");
        set_message(&mut bad, version_9_policy());
        // Only its policy differs from what is in effect: the policy is parked as rejected.
        assert!(matches!(
            e.offer(bad.clone(), Origin::Poll).await.verdict,
            Verdict::RetainedRejectedPolicy { .. }
        ));
        // A hook (here: the memory applier's) refusing the content.
        let refusing = Arc::new(MemoryApplier::failing("on-apply hook exited with status 3"));
        let e2 = engine_with(refusing.clone(), None, exact_backoff()).await;
        assert!(matches!(
            e2.offer(sample(1, "e1"), Origin::Poll).await.verdict,
            Verdict::Failed { .. }
        ));
        for engine in [&e, &e2] {
            assert_no_retry(engine, Origin::Poll).await;
            assert_eq!(engine.retry(Origin::Poll).await, None);
        }
        assert_eq!(refusing.failure_count(), 1);
        assert_eq!(
            disk.attempts.load(Ordering::SeqCst),
            1,
            "only the good apply wrote"
        );
        assert_eq!(
            e.offer(bad, Origin::Poll).await.verdict,
            Verdict::Unchanged,
            "the same rejected content stays parked"
        );
    }

    /// Defect: after SIGTERM the supervisor still applied (and acknowledged) a revision that
    /// arrived while the workload was stopping. Once shutting down, nothing applies: not a
    /// push, not a poll, not a local policy edit, not a retry, not an expiry.
    #[tokio::test(start_paused = true)]
    async fn once_shutting_down_nothing_is_applied() {
        let applier = Arc::new(MemoryApplier::new());
        let e = engine_with(applier.clone(), None, exact_backoff()).await;
        assert_eq!(
            e.offer(sample(1, "e1"), Origin::Poll).await.verdict,
            Verdict::Applied
        );
        // A change that failed for a reason that can pass waits for its retry.
        applier.set_transient_failure(Some("disk full".into()));
        assert!(matches!(
            e.offer(sample(2, "e1"), Origin::Poll).await.verdict,
            Verdict::Failed { .. }
        ));
        applier.set_transient_failure(None);
        let (applies, failures) = (applier.apply_count(), applier.failure_count());

        e.begin_shutdown();
        assert!(e.is_shutting_down());
        assert_eq!(
            e.offer(sample(3, "e1"), Origin::Poll).await.verdict,
            Verdict::ShuttingDown
        );
        e.set_mode(mode_for(false, Duration::from_secs(10))).await;
        assert_eq!(
            e.offer(sample(4, "e1"), Origin::Push).await.verdict,
            Verdict::ShuttingDown
        );
        next_retry(&e, Origin::Push).await;
        assert_eq!(e.retry(Origin::Push).await, None);
        // The retry is dropped, not left due: a session would wake for it again at once.
        assert_no_retry(&e, Origin::Push).await;
        let local = LocalPolicy::parse(Path::new("p.yaml"), "version: 1\n").unwrap();
        assert!(matches!(e.set_local_policy(local).await, Some(Err(_))));
        e.withhold_expired_credentials().await;

        assert_eq!(applier.apply_count(), applies, "nothing was applied");
        assert_eq!(applier.failure_count(), failures, "nor tried");
        assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_side_that_applies_retries_and_new_content_replaces_a_retry() {
        let applier = Arc::new(MemoryApplier::new());
        applier.set_transient_failure(Some("disk full".into()));
        let e = engine_with(applier.clone(), None, exact_backoff()).await;
        e.set_mode(mode_for(false, Duration::from_secs(10))).await;
        assert!(matches!(
            e.offer(sample(1, "e1"), Origin::Push).await.verdict,
            Verdict::Failed { .. }
        ));
        // A push session applies: polling does not retry.
        assert_no_retry(&e, Origin::Poll).await;
        assert_eq!(e.retry(Origin::Poll).await, None);
        // The session is lost and polling takes over: now the poll side retries.
        e.set_mode(mode_for(true, Duration::from_secs(10))).await;
        next_retry(&e, Origin::Poll).await;
        assert_eq!(e.retry(Origin::Push).await, None);
        assert_eq!(e.retry(Origin::Poll).await, None, "still failing");

        // Different content arrives and applies: the retry of the old one is dropped.
        applier.set_transient_failure(None);
        assert_eq!(
            e.offer(sample(2, "e1"), Origin::Poll).await.verdict,
            Verdict::Applied
        );
        assert_no_retry(&e, Origin::Poll).await;
        assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 2);
    }

    #[test]
    fn error_kinds() {
        let d = sample(1, "e1");
        let activate = ApplyError::new(ApplyStage::Activate, "disk full", &d);
        assert!(activate.is_transient());
        for stage in [ApplyStage::Stage, ApplyStage::Hook] {
            assert!(!ApplyError::new(stage, "no", &d).is_transient());
        }
        let spawn = ApplyError::new(ApplyStage::Hook, "cannot start", &d)
            .with_kind(ApplyErrorKind::Transient);
        assert!(spawn.is_transient());
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
        rotate_token(&mut env_only);
        assert_eq!(
            e.offer(env_only, Origin::Push).await.verdict,
            Verdict::Applied
        );
        assert_eq!(
            applier.active().unwrap().provider_env.environment["GITHUB_TOKEN"],
            "ghp_rotated0001"
        );

        // A new gateway policy revision: retained, and nothing new to apply.
        let before = applier.apply_count();
        let mut policy_only = sample(2, "e2");
        rotate_token(&mut policy_only);
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

    /// An expired credential never reaches the applier: dropped when the configuration
    /// arrives already past it, and withdrawn once it expires while in effect.
    #[tokio::test]
    async fn expired_credentials_never_reach_the_workload() {
        let applier = Arc::new(MemoryApplier::new());
        let e = engine(applier.clone(), None).await;
        let now = crate::desired::now_ms();
        let mut expired = sample(1, "e1");
        expired.provider_env.credential_expires_at_ms =
            [("GITHUB_TOKEN".to_string(), now - 1_000)].into();
        assert_eq!(
            e.offer(expired, Origin::Poll).await.verdict,
            Verdict::Applied
        );
        let active = applier.active().unwrap();
        assert!(!active.provider_env.environment.contains_key("GITHUB_TOKEN"));
        assert!(active.provider_env.environment.contains_key("GITHUB_HOST"));

        let expiring_at = crate::desired::now_ms() + 200;
        let mut fresh = sample(1, "e2");
        fresh.provider_env.credential_expires_at_ms =
            [("GITHUB_TOKEN".to_string(), expiring_at)].into();
        e.offer(fresh, Origin::Poll).await;
        assert!(
            applier
                .active()
                .unwrap()
                .provider_env
                .environment
                .contains_key("GITHUB_TOKEN")
        );
        assert_eq!(e.next_credential_expiry().await, Some(expiring_at));
        // Real time must pass the expiry; only then is the withdrawal due.
        while crate::desired::now_ms() < expiring_at {
            std::thread::sleep(Duration::from_millis(20));
        }
        let applies = applier.apply_count();
        e.withhold_expired_credentials().await;
        assert_eq!(applier.apply_count(), applies + 1);
        assert!(
            !applier
                .active()
                .unwrap()
                .provider_env
                .environment
                .contains_key("GITHUB_TOKEN")
        );
        assert_eq!(e.next_credential_expiry().await, None);
        // Nothing more to withdraw: no further activation.
        e.withhold_expired_credentials().await;
        assert_eq!(applier.apply_count(), applies + 1);
    }
}
