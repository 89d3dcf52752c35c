//! What a running supervisor can tell about itself, for the binary (when to start the
//! workload), tests and the fleet benchmark (waiting for a condition instead of sleeping).

use std::sync::Arc;

use crate::desired::DesiredConfig;

/// State of the ConnectSupervisor session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SessionState {
    /// No session (not yet connected, or between reconnect attempts).
    #[default]
    Disconnected,
    /// The gateway accepted the session.
    Accepted {
        session_id: String,
        /// True when the gateway pushes configuration and polling is paused.
        push_apply: bool,
    },
}

/// A snapshot of the supervisor's progress. Counters only grow.
#[derive(Debug, Clone, Default)]
pub struct SupervisorStatus {
    pub session: SessionState,
    /// Sessions the gateway accepted so far.
    pub sessions_accepted: u64,
    /// The configuration in effect (after the local policy override, if any).
    pub active: Option<Arc<DesiredConfig>>,
    /// Successful applies.
    pub applies: u64,
    /// Failed applies.
    pub failures: u64,
    /// Applies tried again after a failure that can pass (counted before they run).
    pub apply_retries: u64,
    /// Sanitized reason of the latest failed apply.
    pub last_failure: Option<String>,
    /// True while the latest failure quarantined the sandbox.
    pub quarantined: bool,
    /// `ReportPolicyStatus` calls the gateway accepted.
    pub reports_sent: u64,
    /// `ConfigUpdateResult` and `BootstrapResult` frames sent.
    pub acks_sent: u64,
}
