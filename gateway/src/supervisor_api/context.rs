//! The handles supervisor sessions and the poll RPCs use.

use std::sync::Arc;

use crate::config::GatewayConfig;
use crate::delivery::{DeliveryTuning, FanoutActivity, Permits, Publisher};
use crate::metrics::Metrics;
use crate::operations::ReportResolver;
use crate::session_registry::SessionRegistry;
use crate::store::{OwnerClaims, Store};

/// What supervisor sessions and the poll RPCs touch: the store, this
/// replica's sessions and push delivery, and where reports and owner
/// claims go.
pub struct SessionContext {
    pub store: Store,
    /// Where a supervisor's startup policy is written.
    pub config_writer: crate::config_update::ConfigWriter,
    pub config: Arc<GatewayConfig>,
    pub sessions: SessionRegistry,
    pub metrics: Arc<Metrics>,
    /// Push sessions of this replica; dormant (empty) in poll mode.
    pub publisher: Publisher,
    pub permits: Arc<Permits>,
    pub tuning: DeliveryTuning,
    /// Whether a fanout is under way, and so where the startup write runs.
    pub activity: Arc<FanoutActivity>,
    /// Where poll reports and push acks go to resolve operations.
    pub reports: ReportResolver,
    /// Where accepted sessions record themselves as their sandbox's owner.
    pub owner_claims: OwnerClaims,
    /// Session tasks, which outlive their response streams for a moment
    /// (owner release): shutdown waits for them before closing the store.
    pub session_tasks: tokio_util::task::TaskTracker,
    /// What each sandbox was last served by poll, to read upstream
    /// supervisors' version-only reports.
    pub served: Arc<super::legacy::ServedRevisions>,
    /// Flips to true when the gateway stops, ending the sessions.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Where pushed log lines are kept.
    pub logs: crate::sandbox_logs::SandboxLogs,
}

impl SessionContext {
    /// Resolves once the gateway is stopping.
    pub async fn stopped(&self) {
        let mut stopping = self.stopping.clone();
        let _ = stopping.wait_for(|s| *s).await;
    }
}
