//! The seam between "what should be active" and "make it active".
//!
//! Sessions, polling and standalone mode decide *when* to apply; an [`Applier`] decides *how*.
//! The real one writes the state directory ([`crate::FileApplier`]); the in-memory one
//! ([`crate::MemoryApplier`]) lets tests and the fleet benchmark run many supervisors in one
//! process.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use openshell_proto::v1::AppliedRevisions;

use crate::desired::DesiredConfig;
use crate::sanitize::sanitize_reason;

/// A boxed, sendable future, so [`Applier`] stays usable as `Arc<dyn Applier>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Stages, validates and activates a desired configuration.
///
/// An implementation must leave the previous configuration active when it returns an error
/// (last-known-good), unless it reports `failed_closed`, in which case the sandbox is
/// quarantined instead.
pub trait Applier: Send + Sync {
    fn apply<'a>(
        &'a self,
        desired: &'a DesiredConfig,
    ) -> BoxFuture<'a, Result<ApplyReport, ApplyError>>;

    /// [`apply`](Applier::apply) of a configuration the caller holds shared, as the engine
    /// does: an applier that keeps what it applied keeps the `Arc` instead of a copy.
    fn apply_shared<'a>(
        &'a self,
        desired: &'a Arc<DesiredConfig>,
    ) -> BoxFuture<'a, Result<ApplyReport, ApplyError>> {
        self.apply(desired)
    }

    /// The configuration already in effect when this applier was made (from a state
    /// directory an earlier run left): the last-known-good a restarted supervisor keeps when
    /// the gateway's latest policy is refused. Its provider environment is empty.
    fn last_known_good(&self) -> Option<DesiredConfig> {
        None
    }
}

/// What a successful apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    /// Revisions now active.
    pub revisions: AppliedRevisions,
    /// True for the first activation of this applier's life (nothing was active before).
    pub first_activation: bool,
}

/// Where in the pipeline an apply failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyStage {
    /// Decoding or validating the snapshot; nothing was touched.
    Stage,
    /// Writing the active configuration.
    Activate,
    /// The on-apply hook refused the new configuration; the previous one was restored.
    Hook,
}

/// Whether a failure is a verdict on the configuration or an accident of the moment.
///
/// The engine acts on it: a rejected configuration is parked until different content arrives
/// (trying it again cannot succeed, and looping on it would flood the gateway), a transient
/// failure is retried with backoff until it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyErrorKind {
    /// The content was refused: it did not validate, or the on-apply hook said no.
    Rejected,
    /// Applying failed for a reason that can pass: the state directory could not be written
    /// (disk full, read-only, I/O error, permissions), the hook could not be started.
    Transient,
}

/// A failed apply. The reason is sanitized at construction: it never holds a provider value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ApplyError {
    pub stage: ApplyStage,
    pub kind: ApplyErrorKind,
    pub reason: String,
    /// True when the failure quarantined the sandbox (`fail_closed`).
    pub failed_closed: bool,
}

impl ApplyError {
    /// Builds an error whose reason is masked against every value of `desired`. Its kind
    /// follows from the stage: staging and the hook judge the content ([`ApplyErrorKind::Rejected`]),
    /// activation writes files ([`ApplyErrorKind::Transient`]); [`ApplyError::with_kind`]
    /// says otherwise where the stage does not tell.
    pub fn new(stage: ApplyStage, reason: &str, desired: &DesiredConfig) -> Self {
        let kind = match stage {
            ApplyStage::Stage | ApplyStage::Hook => ApplyErrorKind::Rejected,
            ApplyStage::Activate => ApplyErrorKind::Transient,
        };
        Self {
            stage,
            kind,
            reason: sanitize_reason(reason, desired.sensitive_values()),
            failed_closed: false,
        }
    }

    pub fn with_kind(mut self, kind: ApplyErrorKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn with_failed_closed(mut self, failed_closed: bool) -> Self {
        self.failed_closed = failed_closed;
        self
    }

    /// True when applying the same configuration again may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == ApplyErrorKind::Transient
    }
}
