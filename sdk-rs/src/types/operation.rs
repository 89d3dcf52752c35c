//! Durable operations: the record of one committed write and how far its
//! delivery got.

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::{ApplyOutcome, OperationState, TargetKind, non_empty};
use crate::timefmt;

/// Per-target counts of a fleet operation (workspace, global or provider writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetProgress {
    /// Sandboxes the write affected, recorded at commit.
    pub targets: u32,
    pub applied: u32,
    pub failed: u32,
    pub pending: u32,
    pub inactive: u32,
    pub superseded: u32,
    pub cancelled: u32,
}

impl From<pb::FleetProgress> for FleetProgress {
    fn from(p: pb::FleetProgress) -> Self {
        Self {
            targets: p.targets,
            applied: p.applied,
            failed: p.failed,
            pending: p.pending,
            inactive: p.inactive,
            superseded: p.superseded,
            cancelled: p.cancelled,
        }
    }
}

/// A durable record of one committed write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// `op-` followed by a UUID.
    pub id: String,
    pub target_kind: TargetKind,
    /// Sandbox id, workspace name or provider id; empty for global.
    pub target: String,
    pub state: OperationState,
    /// Supervisor outcome, set once terminal.
    pub outcome: ApplyOutcome,
    /// Sanitized error text, at most 1 KiB.
    pub error: Option<String>,
    /// Policy revision this operation waits to see applied; 0 when policy was untouched.
    pub policy_revision: u64,
    /// Settings revision of the written scope; 0 when settings were untouched.
    pub settings_revision: u64,
    pub global_policy_revision: u64,
    /// The write changed nothing; the operation tracks the current revision.
    pub no_op: bool,
    pub idempotency_key: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub completed_at: Option<String>,
    /// A server-side wait hit its deadline while the operation was still live.
    pub wait_timed_out: bool,
    pub fleet: Option<FleetProgress>,
    /// Principal that issued the write.
    pub caller: String,
}

impl Operation {
    /// True once the operation reached a final state.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }

    /// For fleet operations: whether at least `fraction` of the targets
    /// applied, which ends a wait given that threshold before every target is done.
    pub fn threshold_met(&self, fraction: f64) -> bool {
        match &self.fleet {
            Some(fleet) if fleet.targets > 0 => {
                f64::from(fleet.applied) / f64::from(fleet.targets) >= fraction
            }
            _ => false,
        }
    }
}

impl From<pb::Operation> for Operation {
    fn from(p: pb::Operation) -> Self {
        Self {
            id: p.id,
            target_kind: p.target_kind.into(),
            target: p.target,
            state: p.state.into(),
            outcome: p.outcome.into(),
            error: non_empty(p.error),
            policy_revision: p.policy_revision,
            settings_revision: p.settings_revision,
            global_policy_revision: p.global_policy_revision,
            no_op: p.no_op,
            idempotency_key: non_empty(p.idempotency_key),
            created_at: timefmt::timestamp(p.created_at),
            updated_at: timefmt::timestamp(p.updated_at),
            completed_at: timefmt::timestamp(p.completed_at),
            wait_timed_out: p.wait_timed_out,
            fleet: p.fleet.map(FleetProgress::from),
            caller: p.caller,
        }
    }
}

/// What `update_config` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateResult {
    pub operation: Operation,
    /// An earlier request with the same idempotency key was found; nothing was written.
    pub idempotent_replay: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn wire() -> pb::Operation {
        pb::Operation {
            id: "op-1".into(),
            target_kind: pb::TargetKind::Sandbox as i32,
            target: "sb-1".into(),
            state: pb::OperationState::Pending as i32,
            policy_revision: 3,
            created_at: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            caller: "ops".into(),
            ..Default::default()
        }
    }

    #[test]
    fn converts_from_wire() {
        let op = Operation::from(wire());
        assert_eq!(op.state, OperationState::Pending);
        assert_eq!(op.target_kind, TargetKind::Sandbox);
        assert_eq!(op.error, None);
        assert_eq!(op.idempotency_key, None);
        assert_eq!(op.created_at.as_deref(), Some("2023-11-14T22:13:20.000Z"));
        assert_eq!(op.completed_at, None);
        assert!(!op.is_terminal());
    }

    #[test]
    fn json_shape_is_stable() {
        let op = Operation::from(wire());
        let value = serde_json::to_value(&op).unwrap();
        assert_eq!(value["state"], "PENDING");
        assert_eq!(value["outcome"], "UNSPECIFIED");
        assert_eq!(value["target_kind"], "SANDBOX");
        assert!(value["error"].is_null());
        assert!(value["fleet"].is_null());
        let back: Operation = serde_json::from_value(value).unwrap();
        assert_eq!(back, op);
    }
}
