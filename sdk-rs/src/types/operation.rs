//! Durable operations: the record of one committed write and how far its
//! delivery got.

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::{ApplyOutcome, OperationState, SettingValue, TargetKind, non_empty};
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
    /// The durable operation of the write; `None` only for a validate-only
    /// request ([`crate::UpdateConfig::validate_only`]), which writes nothing.
    pub operation: Option<Operation>,
    /// An earlier request with the same idempotency key was found; nothing was written.
    pub idempotent_replay: bool,
    /// Static sections (`filesystem_policy`, `landlock`, `process`) the
    /// sandbox policy omitted and that were kept from the sandbox's latest
    /// revision (would be kept, for a validate-only request).
    #[serde(default)]
    pub kept_static_sections: Vec<String>,
    /// The request was validate-only: checked, nothing written.
    #[serde(default)]
    pub validate_only: bool,
    /// Validate-only with a policy: how it differs from the target's current policy.
    #[serde(default)]
    pub policy_diff: Option<PolicyDiff>,
    /// Validate-only: the settings that would change at the target's scope.
    #[serde(default)]
    pub setting_changes: Vec<SettingDiff>,
    /// With policy edits: what the gateway's merge kept or rewrote instead of
    /// doing it literally, one line each (empty for an idempotent replay).
    #[serde(default)]
    pub merge_notes: Vec<String>,
    /// A sandbox policy written (or, validate-only, checked) while a global policy is set:
    /// the revision of that global policy, which replaces the sandbox's policy. The write's
    /// operation then ends INACTIVE with `SHADOWED_BY_GLOBAL`, never APPLIED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadowed_by_global_policy: Option<u64>,
}

impl UpdateResult {
    /// A result of a committed write, for callers that build one from an
    /// operation they followed.
    pub fn committed(operation: Operation, idempotent_replay: bool) -> Self {
        Self {
            operation: Some(operation),
            idempotent_replay,
            kept_static_sections: Vec::new(),
            validate_only: false,
            policy_diff: None,
            setting_changes: Vec::new(),
            merge_notes: Vec::new(),
            shadowed_by_global_policy: None,
        }
    }
}

/// What a policy would change compared with the target's current policy,
/// rule by rule (a validate-only `update_config`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDiff {
    /// Network policies (by map key) only in the new policy.
    pub added_policies: Vec<String>,
    /// Network policies only in the current policy.
    pub removed_policies: Vec<String>,
    /// Network policies on both sides whose content differs.
    pub changed_policies: Vec<PolicyChange>,
    /// Static sections whose content would change (a sandbox's first policy,
    /// or the global policy; a sandbox update that changes one is refused).
    pub changed_static_sections: Vec<String>,
    /// Other top-level sections that differ, e.g. `network_middlewares`.
    pub changed_sections: Vec<String>,
    /// The sandbox's latest policy revision or the global policy revision
    /// compared against; 0 when the target has no policy yet.
    pub current_revision: u64,
    pub current_policy_hash: Option<String>,
    /// The hash the stored policy would have, kept sections included.
    pub new_policy_hash: String,
}

impl PolicyDiff {
    /// True when the policy would change nothing.
    pub fn is_empty(&self) -> bool {
        self.added_policies.is_empty()
            && self.removed_policies.is_empty()
            && self.changed_policies.is_empty()
            && self.changed_static_sections.is_empty()
            && self.changed_sections.is_empty()
    }
}

impl From<pb::PolicyDiff> for PolicyDiff {
    fn from(p: pb::PolicyDiff) -> Self {
        Self {
            added_policies: p.added_policies,
            removed_policies: p.removed_policies,
            changed_policies: p
                .changed_policies
                .into_iter()
                .map(PolicyChange::from)
                .collect(),
            changed_static_sections: p.changed_static_sections,
            changed_sections: p.changed_sections,
            current_revision: p.current_revision,
            current_policy_hash: non_empty(p.current_policy_hash),
            new_policy_hash: p.new_policy_hash,
        }
    }
}

/// One network policy on both sides with different content. Endpoints are
/// named by host, ports and path (`api.example.com:443/v1/**`), or by
/// position (`endpoints[2]`) when they have no host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyChange {
    pub name: String,
    pub added_endpoints: Vec<String>,
    pub removed_endpoints: Vec<String>,
    pub changed_endpoints: Vec<String>,
    /// Fields other than `endpoints` that differ, e.g. `binaries`;
    /// `endpoints` itself when only their order changed.
    pub changed_fields: Vec<String>,
}

impl From<pb::PolicyChange> for PolicyChange {
    fn from(p: pb::PolicyChange) -> Self {
        Self {
            name: p.name,
            added_endpoints: p.added_endpoints,
            removed_endpoints: p.removed_endpoints,
            changed_endpoints: p.changed_endpoints,
            changed_fields: p.changed_fields,
        }
    }
}

/// One setting a validate-only update would change at the target's scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingDiff {
    pub key: String,
    /// Stored at the scope now; `None` when the key is not set there.
    pub old_value: Option<SettingValue>,
    /// What it would be; `None` when the change deletes it.
    pub new_value: Option<SettingValue>,
}

impl From<pb::SettingDiff> for SettingDiff {
    fn from(p: pb::SettingDiff) -> Self {
        Self {
            key: p.key,
            old_value: SettingValue::from_proto(p.old_value),
            new_value: SettingValue::from_proto(p.new_value),
        }
    }
}

/// One sandbox an operation targets, and how far the change got there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationTarget {
    pub sandbox_id: String,
    /// `None` when the sandbox record is gone.
    pub sandbox_name: Option<String>,
    pub workspace: Option<String>,
    pub state: OperationState,
    /// Supervisor outcome, set once terminal.
    pub outcome: ApplyOutcome,
    /// Why the target is where it is: the sanitized error of a terminal
    /// target, or `no session` for a live one no supervisor is connected for.
    pub reason: Option<String>,
    /// Time of the target's last state change.
    pub updated_at: Option<String>,
}

impl OperationTarget {
    /// `WORKSPACE/NAME` when the sandbox is known, else its id: how a
    /// person finds it again.
    pub fn display_name(&self) -> String {
        match (&self.workspace, &self.sandbox_name) {
            (Some(ws), Some(name)) => format!("{ws}/{name}"),
            (None, Some(name)) => name.clone(),
            _ => self.sandbox_id.clone(),
        }
    }
}

impl From<pb::OperationTarget> for OperationTarget {
    fn from(p: pb::OperationTarget) -> Self {
        Self {
            sandbox_id: p.sandbox_id,
            sandbox_name: non_empty(p.sandbox_name),
            workspace: non_empty(p.workspace),
            state: p.state.into(),
            outcome: p.outcome.into(),
            reason: non_empty(p.reason),
            updated_at: timefmt::timestamp(p.updated_at),
        }
    }
}

/// One page of an operation's targets, in sandbox id order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationTargets {
    pub targets: Vec<OperationTarget>,
    /// Pass it back for the next page; `None` after the last page.
    pub next_page_token: Option<String>,
    /// Counts over every target of the operation, whatever the filter and page.
    pub counts: FleetProgress,
}

impl From<pb::ListOperationTargetsResponse> for OperationTargets {
    fn from(p: pb::ListOperationTargetsResponse) -> Self {
        Self {
            targets: p.targets.into_iter().map(Into::into).collect(),
            next_page_token: non_empty(p.next_page_token),
            counts: p.counts.map(FleetProgress::from).unwrap_or_default(),
        }
    }
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
    fn a_write_needs_its_operation_and_a_dry_run_has_none() {
        let written = pb::UpdateConfigResponse {
            operation: Some(wire()),
            kept_static_sections: vec!["process".into()],
            ..Default::default()
        };
        let result = UpdateResult::from_proto(written, false).unwrap();
        assert_eq!(result.kept_static_sections, ["process"]);
        assert_eq!(result.into_operation().unwrap().id, "op-1");

        let err = UpdateResult::from_proto(pb::UpdateConfigResponse::default(), false).unwrap_err();
        assert!(err.to_string().contains("missing operation"), "{err}");

        let checked = pb::UpdateConfigResponse {
            policy_diff: Some(pb::PolicyDiff {
                removed_policies: vec!["pypi".into()],
                current_revision: 3,
                current_policy_hash: "abc".into(),
                ..Default::default()
            }),
            setting_changes: vec![pb::SettingDiff {
                key: "log_level".into(),
                old_value: None,
                new_value: Some(pb::SettingValue {
                    kind: Some(pb::setting_value::Kind::StringValue("debug".into())),
                }),
            }],
            ..Default::default()
        };
        let result = UpdateResult::from_proto(checked, true).unwrap();
        assert!(result.validate_only);
        let diff = result.policy_diff.clone().unwrap();
        assert_eq!(diff.removed_policies, ["pypi"]);
        assert_eq!(diff.current_policy_hash.as_deref(), Some("abc"));
        assert!(!diff.is_empty());
        assert_eq!(result.setting_changes[0].old_value, None);
        assert_eq!(
            result.setting_changes[0].new_value,
            Some(SettingValue::String("debug".into()))
        );
        let value = serde_json::to_value(&result).unwrap();
        assert!(value["operation"].is_null());
        assert_eq!(value["validate_only"], true);
        assert_eq!(value["setting_changes"][0]["new_value"], "debug");
        assert_eq!(
            result.into_operation().unwrap_err().code(),
            "INVALID_ARGUMENT"
        );
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
