//! An applier that keeps the active configuration in memory, for tests and for the fleet
//! benchmark that runs thousands of supervisors in one process.
//!
//! It validates exactly like the real applier (same staging checks) and honours
//! `fail_closed`, so the statuses a gateway sees from it are the ones a real sandbox would send.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::applier::{Applier, ApplyError, ApplyErrorKind, ApplyReport, ApplyStage, BoxFuture};
use crate::desired::{DesiredConfig, FailureMode};
use crate::file_applier::stage::{PolicyMemo, validate};

#[derive(Default)]
struct MemoryState {
    active: Option<Arc<DesiredConfig>>,
    applies: u64,
    failures: u64,
    injected_failure: Option<String>,
    injected_transient: Option<String>,
    quarantined: bool,
    policies: PolicyMemo,
}

/// Keeps the last applied configuration; can be told to fail.
#[derive(Default)]
pub struct MemoryApplier {
    state: Mutex<MemoryState>,
}

impl MemoryApplier {
    pub fn new() -> Self {
        Self::default()
    }

    /// An applier whose every apply fails with `reason` until [`MemoryApplier::set_failure`]
    /// clears it.
    pub fn failing(reason: impl Into<String>) -> Self {
        let applier = Self::default();
        applier.set_failure(Some(reason.into()));
        applier
    }

    /// Makes later applies fail (as if the hook refused them), or succeed again with `None`.
    pub fn set_failure(&self, reason: Option<String>) {
        self.lock().injected_failure = reason;
    }

    /// Makes later applies fail for a reason that can pass (as if the state directory could
    /// not be written), or succeed again with `None`.
    pub fn set_transient_failure(&self, reason: Option<String>) {
        self.lock().injected_transient = reason;
    }

    /// The configuration last applied successfully.
    pub fn active(&self) -> Option<Arc<DesiredConfig>> {
        self.lock().active.clone()
    }

    /// Successful applies so far.
    pub fn apply_count(&self) -> u64 {
        self.lock().applies
    }

    /// Failed applies so far.
    pub fn failure_count(&self) -> u64 {
        self.lock().failures
    }

    pub fn is_quarantined(&self) -> bool {
        self.lock().quarantined
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        // The state stays consistent across a panic in another thread: every update is a
        // plain assignment.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `keep` gives what becomes the active configuration when `desired` applies.
    fn apply_now(
        &self,
        desired: &DesiredConfig,
        keep: impl FnOnce() -> Arc<DesiredConfig>,
    ) -> Result<ApplyReport, ApplyError> {
        let mut state = self.lock();
        let result = match validate(desired, &mut state.policies) {
            Ok(_) => match (&state.injected_transient, &state.injected_failure) {
                (Some(reason), _) => Err(ApplyError::new(ApplyStage::Activate, reason, desired)
                    .with_kind(ApplyErrorKind::Transient)),
                (None, Some(reason)) => Err(ApplyError::new(ApplyStage::Hook, reason, desired)),
                (None, None) => Ok(()),
            },
            Err(err) => Err(err),
        };
        match result {
            Ok(()) => {
                let first_activation = state.active.is_none();
                state.active = Some(keep());
                state.applies += 1;
                state.quarantined = false;
                Ok(ApplyReport {
                    revisions: desired.revisions(),
                    first_activation,
                })
            }
            Err(err) => {
                state.failures += 1;
                let closed = desired.failure_mode() == FailureMode::FailClosed;
                state.quarantined |= closed;
                Err(err.with_failed_closed(closed))
            }
        }
    }
}

impl Applier for MemoryApplier {
    fn apply<'a>(
        &'a self,
        desired: &'a DesiredConfig,
    ) -> BoxFuture<'a, Result<ApplyReport, ApplyError>> {
        Box::pin(std::future::ready(
            self.apply_now(desired, || Arc::new(desired.clone())),
        ))
    }

    // Thousands of these run in one benchmark process: a copy of every configuration applied
    // cost that process more than the apply itself.
    fn apply_shared<'a>(
        &'a self,
        desired: &'a Arc<DesiredConfig>,
    ) -> BoxFuture<'a, Result<ApplyReport, ApplyError>> {
        Box::pin(std::future::ready(
            self.apply_now(desired, || desired.clone()),
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::desired::tests::{sample, set_message, unconvertible_policy};

    #[tokio::test]
    async fn keeps_last_good_and_injects_failures() {
        let a = MemoryApplier::new();
        let r = a.apply(&sample(1, "e1")).await.unwrap();
        assert!(r.first_activation);
        a.set_failure(Some("boom".into()));
        let err = a.apply(&sample(2, "e1")).await.unwrap_err();
        assert_eq!(err.reason, "boom");
        assert_eq!(
            a.active().unwrap().sandbox_config.policy_revision,
            1,
            "last-known-good stays"
        );
        a.set_failure(None);
        let r = a.apply(&sample(3, "e1")).await.unwrap();
        assert!(!r.first_activation);
        assert_eq!(a.apply_count(), 2);
        assert_eq!(a.failure_count(), 1);
    }

    #[tokio::test]
    async fn keeps_a_shared_configuration_without_copying_it() {
        let a = MemoryApplier::new();
        let shared = Arc::new(sample(1, "e1"));
        a.apply_shared(&shared).await.unwrap();
        assert!(Arc::ptr_eq(&a.active().unwrap(), &shared));
    }

    #[tokio::test]
    async fn rejects_invalid_policy() {
        let a = MemoryApplier::new();
        let mut d = sample(1, "e1");
        set_message(&mut d, unconvertible_policy());
        assert!(a.apply(&d).await.is_err());
        assert!(a.active().is_none());
    }
}
