//! Supervisor sessions and the delivery diagnostics of one sandbox.

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::{DeliveryMode, Operation, Sandbox, non_empty};
use crate::timefmt;

/// One connected supervisor session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub sandbox_id: String,
    pub sandbox_name: String,
    pub session_id: String,
    /// Negotiated delivery mode.
    pub mode: DeliveryMode,
    pub supervisor_version: String,
    pub protocol_revision: u32,
    /// Replica owning the session.
    pub replica_id: String,
    pub connected_at: Option<String>,
    pub last_heartbeat_at: Option<String>,
    /// The sandbox's desired (latest) policy revision; 0 when none.
    #[serde(default)]
    pub policy_revision: u64,
    /// Policy revision the supervisor last reported applied; 0 when none.
    #[serde(default)]
    pub applied_policy_revision: u64,
}

impl From<pb::SessionSummary> for SessionSummary {
    fn from(p: pb::SessionSummary) -> Self {
        Self {
            sandbox_id: p.sandbox_id,
            sandbox_name: p.sandbox_name,
            session_id: p.session_id,
            mode: p.mode.into(),
            supervisor_version: p.supervisor_version,
            protocol_revision: p.protocol_revision,
            replica_id: p.replica_id,
            connected_at: timefmt::timestamp(p.connected_at),
            last_heartbeat_at: timefmt::timestamp(p.last_heartbeat_at),
            policy_revision: p.policy_revision,
            applied_policy_revision: p.applied_policy_revision,
        }
    }
}

/// Delivery state of one component (`sandbox_config` or `provider_environment`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentDelivery {
    pub component: String,
    /// Revision summary the store wants delivered.
    pub desired: String,
    /// Revision summary last sent.
    pub sent: String,
    pub sent_at: Option<String>,
    /// Revision summary last acknowledged, with its status.
    pub acked: String,
    pub ack_status: String,
    pub acked_at: Option<String>,
    /// Marked dirty and waiting for a build.
    pub dirty: bool,
    /// `"sandbox"` or `"fanout"` while dirty.
    pub lane: Option<String>,
    /// A built snapshot waits for the previous one's ack.
    pub held: bool,
    pub last_failure: Option<String>,
    /// Current build backoff, e.g. `"4s"`.
    pub backoff: Option<String>,
}

impl From<pb::ComponentDelivery> for ComponentDelivery {
    fn from(p: pb::ComponentDelivery) -> Self {
        Self {
            component: p.component,
            desired: p.desired,
            sent: p.sent,
            sent_at: timefmt::timestamp(p.sent_at),
            acked: p.acked,
            ack_status: p.ack_status,
            acked_at: timefmt::timestamp(p.acked_at),
            dirty: p.dirty,
            lane: non_empty(p.lane),
            held: p.held,
            last_failure: non_empty(p.last_failure),
            backoff: timefmt::duration(p.backoff),
        }
    }
}

/// One recent delivery event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryEvent {
    pub at: Option<String>,
    pub text: String,
}

impl From<pb::DeliveryEvent> for DeliveryEvent {
    fn from(p: pb::DeliveryEvent) -> Self {
        Self {
            at: timefmt::timestamp(p.at),
            text: p.text,
        }
    }
}

/// How configuration reaches one sandbox, and what is wrong with it if anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInspection {
    pub sandbox: Option<Sandbox>,
    /// The gateway's configured mode (`"poll"` or `"push"`).
    pub gateway_mode: String,
    /// Whether a supervisor is connected.
    pub connected: bool,
    pub negotiated_mode: DeliveryMode,
    /// Why that mode was negotiated.
    pub negotiated_reason: String,
    pub supervisor_version: String,
    pub protocol_revision: u32,
    pub supports_config_snapshots: bool,
    pub supports_config_apply: bool,
    pub owner_replica: Option<String>,
    pub session_id: Option<String>,
    pub connected_at: Option<String>,
    pub last_heartbeat_at: Option<String>,
    pub components: Vec<ComponentDelivery>,
    /// Operations of this sandbox that are not terminal yet.
    pub pending_operations: Vec<Operation>,
    pub recent_events: Vec<DeliveryEvent>,
    /// Plain-language hints for each abnormal state found.
    pub hints: Vec<String>,
    /// Last status the supervisor reported.
    pub last_report: Option<String>,
    pub last_report_at: Option<String>,
    /// Whether the connected supervisor started its workload, and the remote middleware it
    /// needs; `None` when it reported nothing.
    #[serde(default)]
    pub runtime_readiness: Option<RuntimeReadiness>,
    /// When each credential of the sandbox's providers expires, soonest first.
    #[serde(default)]
    pub credential_expiry: Vec<CredentialExpiry>,
}

/// One credential of an attached provider and when it stops being valid (its name,
/// never its value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialExpiry {
    pub name: String,
    pub provider: String,
    pub expires_at: Option<String>,
}

impl From<pb::CredentialExpiry> for CredentialExpiry {
    fn from(p: pb::CredentialExpiry) -> Self {
        Self {
            name: p.name,
            provider: p.provider,
            expires_at: timefmt::timestamp(p.expires_at),
        }
    }
}

/// A supervisor's word on starting its workload: it connects to every remote middleware the
/// policy requires first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeReadiness {
    /// False while an unreachable `fail_closed` middleware holds the workload back.
    pub workload_started: bool,
    pub middlewares: Vec<MiddlewareReadiness>,
}

impl RuntimeReadiness {
    /// The unreachable `fail_closed` middleware (by name) that keeps the workload from
    /// starting; empty once it started.
    pub fn blocked_by(&self) -> Vec<&str> {
        if self.workload_started {
            return Vec::new();
        }
        self.middlewares
            .iter()
            .filter(|m| !m.reachable && m.fail_closed)
            .map(|m| m.name.as_str())
            .collect()
    }

    /// Started although some middleware did not answer.
    pub fn degraded(&self) -> bool {
        self.workload_started && self.middlewares.iter().any(|m| !m.reachable)
    }
}

impl From<pb::RuntimeReadiness> for RuntimeReadiness {
    fn from(p: pb::RuntimeReadiness) -> Self {
        Self {
            workload_started: p.workload_started,
            middlewares: p.middlewares.into_iter().map(Into::into).collect(),
        }
    }
}

/// One remote middleware a supervisor's policy requires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MiddlewareReadiness {
    /// The policy entry's key.
    pub name: String,
    /// The implementation it names.
    pub implementation: String,
    /// `HOST:PORT`; `None` when the implementation is not registered on the supervisor.
    pub endpoint: Option<String>,
    pub reachable: bool,
    /// `on_error: fail_closed`: while unreachable, the workload does not start.
    pub fail_closed: bool,
    /// Why it is unreachable.
    pub error: Option<String>,
}

impl From<pb::MiddlewareReadiness> for MiddlewareReadiness {
    fn from(p: pb::MiddlewareReadiness) -> Self {
        Self {
            name: p.name,
            implementation: p.implementation,
            endpoint: non_empty(p.endpoint),
            reachable: p.reachable,
            fail_closed: p.fail_closed,
            error: non_empty(p.error),
        }
    }
}

impl From<pb::SessionInspection> for SessionInspection {
    fn from(p: pb::SessionInspection) -> Self {
        Self {
            sandbox: p.sandbox.map(Sandbox::from),
            gateway_mode: p.gateway_mode,
            connected: p.connected,
            negotiated_mode: p.negotiated_mode.into(),
            negotiated_reason: p.negotiated_reason,
            supervisor_version: p.supervisor_version,
            protocol_revision: p.protocol_revision,
            supports_config_snapshots: p.supports_config_snapshots,
            supports_config_apply: p.supports_config_apply,
            owner_replica: non_empty(p.owner_replica),
            session_id: non_empty(p.session_id),
            connected_at: timefmt::timestamp(p.connected_at),
            last_heartbeat_at: timefmt::timestamp(p.last_heartbeat_at),
            components: p.components.into_iter().map(Into::into).collect(),
            pending_operations: p.pending_operations.into_iter().map(Into::into).collect(),
            recent_events: p.recent_events.into_iter().map(Into::into).collect(),
            hints: p.hints,
            last_report: non_empty(p.last_report),
            last_report_at: timefmt::timestamp(p.last_report_at),
            runtime_readiness: p.runtime_readiness.map(Into::into),
            credential_expiry: p.credential_expiry.into_iter().map(Into::into).collect(),
        }
    }
}
