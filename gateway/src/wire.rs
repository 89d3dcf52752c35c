//! Store records to wire messages and back. The only place that knows both
//! shapes; the operator API, the snapshot builder, supervisor sessions and
//! `inspect` all use it, so it imports nothing of theirs (only the store's
//! records and the reported revisions operations are resolved on).

use openshell_core::settings::{Scope, SettingValue};
use openshell_proto::datamodel::v1::ObjectMeta;
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use sha2::{Digest, Sha256};

use crate::store::{
    FleetCounts, Lifecycle, OperationRecord, OperationState, Outcome, PolicyProgress,
    PolicyRevisionRecord, ProviderRecord, SandboxRecord, TargetKind,
};

pub fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// First second of 0001-01-01 and last of 9999-12-31 (UTC): the range of a protobuf
/// `Timestamp`, and of the RFC 3339 text clients show it as.
pub const MIN_TIMESTAMP_SECONDS: i64 = -62_135_596_800;
pub const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;

/// A client's `Timestamp` in milliseconds since the epoch, or the violations of the protobuf
/// rules (seconds within 0001-01-01..9999-12-31, nanos within 0..999,999,999) at `field`'s
/// `.seconds` and `.nanos`. Within that range the milliseconds always fit an `i64`, so
/// nothing is cut to fit later.
pub fn timestamp_to_ms(
    field: &str,
    ts: &prost_types::Timestamp,
) -> Result<i64, Vec<openshell_core::Violation>> {
    let mut violations = Vec::new();
    if !(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&ts.seconds) {
        violations.push(openshell_core::Violation::new(
            format!("{field}.seconds"),
            format!(
                "{} is outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z \
                 ({MIN_TIMESTAMP_SECONDS}..{MAX_TIMESTAMP_SECONDS})",
                ts.seconds
            ),
        ));
    }
    if !(0..=999_999_999).contains(&ts.nanos) {
        violations.push(openshell_core::Violation::new(
            format!("{field}.nanos"),
            format!("{} is outside 0..999999999", ts.nanos),
        ));
    }
    if !violations.is_empty() {
        return Err(violations);
    }
    Ok(ts.seconds * 1000 + i64::from(ts.nanos / 1_000_000))
}

pub fn lifecycle(l: Lifecycle) -> pb::SandboxLifecycle {
    match l {
        Lifecycle::Pending => pb::SandboxLifecycle::Pending,
        Lifecycle::Running => pb::SandboxLifecycle::Running,
        Lifecycle::Stopped => pb::SandboxLifecycle::Stopped,
        Lifecycle::Deleted => pb::SandboxLifecycle::Deleted,
    }
}

pub fn sandbox(s: &SandboxRecord) -> pb::Sandbox {
    sandbox_with_applied(s, None)
}

/// A sandbox with the policy its supervisor last reported applied.
pub fn sandbox_with_applied(s: &SandboxRecord, progress: Option<&PolicyProgress>) -> pb::Sandbox {
    let applied = progress.map_or(0, |p| p.applied);
    // A stopped or deleted sandbox has no supervisor to be quarantined by.
    let quarantine = progress
        .and_then(|p| p.quarantine.as_deref())
        .filter(|_| matches!(s.lifecycle, Lifecycle::Pending | Lifecycle::Running));
    pb::Sandbox {
        metadata: Some(ObjectMeta {
            id: s.id.clone(),
            name: s.name.clone(),
            workspace: s.workspace.clone(),
            resource_version: s.policy_revision,
            created_time: Some(timestamp(s.created_at)),
            // Deleted records are kept for history; the last change was the deletion.
            deletion_time: (s.lifecycle == Lifecycle::Deleted).then(|| timestamp(s.updated_at)),
            ..Default::default()
        }),
        spec: Some(pb::SandboxSpec {
            providers: s.providers.clone(),
            provider_attachment_epoch: s.attachment_epoch.to_string(),
        }),
        status: Some(pb::SandboxStatus {
            conditions: quarantine
                .map(|reason| pb::SandboxCondition {
                    r#type: "Quarantined".into(),
                    status: "True".into(),
                    reason: "FailedClosed".into(),
                    message: reason.to_owned(),
                })
                .into_iter()
                .collect(),
            phase: phase(s.lifecycle) as i32,
            current_policy_version: version_u32(applied),
        }),
        lifecycle: lifecycle(s.lifecycle) as i32,
        policy_revision: s.policy_revision,
        settings_revision: s.settings_revision,
        attachment_epoch: s.attachment_epoch,
        updated_at: Some(timestamp(s.updated_at)),
        applied_policy_revision: applied,
        applied_policy_hash: progress.map(|p| p.applied_hash.clone()).unwrap_or_default(),
        quarantine_reason: quarantine.unwrap_or_default().to_owned(),
    }
}

/// Upstream's phase of a lifecycle: this gateway's sandboxes run elsewhere, so it knows
/// only whether a supervisor has bootstrapped one, and what operators asked for.
fn phase(l: Lifecycle) -> pb::SandboxPhase {
    match l {
        Lifecycle::Pending => pb::SandboxPhase::Provisioning,
        Lifecycle::Running => pb::SandboxPhase::Ready,
        Lifecycle::Stopped => pb::SandboxPhase::Stopped,
        Lifecycle::Deleted => pb::SandboxPhase::Deleting,
    }
}

pub fn operation_state(s: OperationState) -> pb::OperationState {
    match s {
        OperationState::Pending => pb::OperationState::Pending,
        OperationState::Delivered => pb::OperationState::Delivered,
        OperationState::Applied => pb::OperationState::Applied,
        OperationState::Failed => pb::OperationState::Failed,
        OperationState::Superseded => pb::OperationState::Superseded,
        OperationState::Inactive => pb::OperationState::Inactive,
        OperationState::Cancelled => pb::OperationState::Cancelled,
    }
}

pub fn operation_state_from_pb(value: i32) -> Option<OperationState> {
    Some(match pb::OperationState::try_from(value).ok()? {
        pb::OperationState::Unspecified => return None,
        pb::OperationState::Pending => OperationState::Pending,
        pb::OperationState::Delivered => OperationState::Delivered,
        pb::OperationState::Applied => OperationState::Applied,
        pb::OperationState::Failed => OperationState::Failed,
        pb::OperationState::Superseded => OperationState::Superseded,
        pb::OperationState::Inactive => OperationState::Inactive,
        pb::OperationState::Cancelled => OperationState::Cancelled,
    })
}

pub fn outcome(o: Outcome) -> pb::ApplyOutcome {
    match o {
        Outcome::None => pb::ApplyOutcome::Unspecified,
        Outcome::Applied => pb::ApplyOutcome::Applied,
        Outcome::Duplicate => pb::ApplyOutcome::Duplicate,
        Outcome::Stale => pb::ApplyOutcome::Stale,
        Outcome::RetainedLocalOverride => pb::ApplyOutcome::RetainedLocalOverride,
        Outcome::FailedRetainedLastKnownGood => pb::ApplyOutcome::FailedRetainedLastKnownGood,
        Outcome::FailedClosed => pb::ApplyOutcome::FailedClosed,
        Outcome::Lifecycle => pb::ApplyOutcome::Lifecycle,
        Outcome::SupersededByNewer => pb::ApplyOutcome::SupersededByNewer,
        Outcome::ShadowedByGlobal => pb::ApplyOutcome::ShadowedByGlobal,
    }
}

fn target_kind(k: TargetKind) -> pb::TargetKind {
    match k {
        TargetKind::Sandbox => pb::TargetKind::Sandbox,
        TargetKind::Workspace => pb::TargetKind::Workspace,
        TargetKind::Global => pb::TargetKind::Global,
        TargetKind::Provider => pb::TargetKind::Provider,
    }
}

pub fn fleet(c: &FleetCounts) -> pb::FleetProgress {
    pb::FleetProgress {
        targets: c.targets,
        applied: c.applied,
        failed: c.failed,
        pending: c.pending,
        inactive: c.inactive,
        superseded: c.superseded,
        cancelled: c.cancelled,
    }
}

pub fn operation(o: &OperationRecord) -> pb::Operation {
    pb::Operation {
        id: o.id.clone(),
        target_kind: target_kind(o.target_kind) as i32,
        target: o.target.clone(),
        state: operation_state(o.state) as i32,
        outcome: outcome(o.outcome) as i32,
        error: o.error.clone(),
        policy_revision: o.policy_revision,
        settings_revision: o.settings_revision,
        global_policy_revision: o.global_policy_revision,
        no_op: o.no_op,
        idempotency_key: o.idempotency_key.clone().unwrap_or_default(),
        created_at: Some(timestamp(o.created_at)),
        updated_at: Some(timestamp(o.updated_at)),
        completed_at: o.completed_at.map(timestamp),
        wait_timed_out: false,
        fleet: o.fleet.as_ref().map(fleet),
        caller: o.caller.clone(),
    }
}

pub fn policy_revision(p: &PolicyRevisionRecord, with_body: bool) -> pb::PolicyRevision {
    let policy_yaml = if with_body {
        openshell_core::policy::parse_policy(&p.policy_json)
            .map(|policy| policy.to_yaml())
            .unwrap_or_default()
    } else {
        String::new()
    };
    pb::PolicyRevision {
        sandbox_id: p.sandbox_id.clone(),
        revision: p.revision,
        policy_hash: p.policy_hash.clone(),
        policy_yaml,
        created_at: Some(timestamp(p.created_at)),
        operation_id: p.operation_id.clone().unwrap_or_default(),
    }
}

pub fn provider(p: &ProviderRecord) -> pb::Provider {
    pb::Provider {
        id: p.id.clone(),
        name: p.name.clone(),
        workspace: p.workspace.clone(),
        r#type: p.provider_type.clone(),
        env: p.env.clone().into_iter().collect(),
        credential_names: p.credential_names.clone(),
        revision: p.revision,
        expires_at: p.expires_at.map(timestamp),
        attached_sandbox_ids: p.attached_sandbox_ids.clone(),
        created_at: Some(timestamp(p.created_at)),
        updated_at: Some(timestamp(p.updated_at)),
        credential_expires_at: p
            .credential_names
            .iter()
            .filter_map(|name| Some((name.clone(), timestamp(p.credential_expires_at(name)?))))
            .collect(),
    }
}

pub fn setting_value(v: &SettingValue) -> pb::SettingValue {
    pb::SettingValue {
        kind: Some(match v {
            SettingValue::Bool(b) => pb::setting_value::Kind::BoolValue(*b),
            SettingValue::Int(i) => pb::setting_value::Kind::IntValue(*i),
            SettingValue::String(s) => pb::setting_value::Kind::StringValue(s.clone()),
        }),
    }
}

pub fn setting_value_from_pb(v: &pb::SettingValue) -> Option<SettingValue> {
    Some(match v.kind.as_ref()? {
        pb::setting_value::Kind::BoolValue(b) => SettingValue::Bool(*b),
        pb::setting_value::Kind::IntValue(i) => SettingValue::Int(*i),
        pb::setting_value::Kind::StringValue(s) => SettingValue::String(s.clone()),
    })
}

pub fn scope(s: Option<Scope>) -> pb::SettingScope {
    match s {
        None => pb::SettingScope::Default,
        Some(Scope::Global) => pb::SettingScope::Global,
        Some(Scope::Workspace) => pb::SettingScope::Workspace,
        Some(Scope::Sandbox) => pb::SettingScope::Sandbox,
    }
}

/// A revision in upstream's 32-bit `version` fields: one past `u32::MAX`
/// stays at the maximum rather than wrapping to an older-looking number.
pub fn version_u32(revision: u64) -> u32 {
    u32::try_from(revision).unwrap_or(u32::MAX)
}

/// A textual revision (a fingerprint) as the number upstream's fields hold:
/// the first 8 bytes of its SHA-256, so equal texts give equal numbers and a
/// change gives another number.
pub fn revision_number(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// A setting value in the supervisor-facing (upstream) form.
pub fn sandbox_setting_value(v: &SettingValue) -> sb::SettingValue {
    sb::SettingValue {
        value: Some(match v {
            SettingValue::Bool(b) => sb::setting_value::Value::BoolValue(*b),
            SettingValue::Int(i) => sb::setting_value::Value::IntValue(*i),
            SettingValue::String(s) => sb::setting_value::Value::StringValue(s.clone()),
        }),
    }
}

/// A setting value in upstream's form, read back; bytes have no setting type.
pub fn setting_value_from_sandbox(v: &sb::SettingValue) -> Option<SettingValue> {
    Some(match v.value.as_ref()? {
        sb::setting_value::Value::BoolValue(b) => SettingValue::Bool(*b),
        sb::setting_value::Value::IntValue(i) => SettingValue::Int(*i),
        sb::setting_value::Value::StringValue(s) => SettingValue::String(s.clone()),
        sb::setting_value::Value::BytesValue(_) => return None,
    })
}

/// The scope a setting's value comes from, in the supervisor-facing form.
pub fn sandbox_setting_scope(s: Option<Scope>) -> sb::SettingScope {
    match s {
        None => sb::SettingScope::Default,
        Some(Scope::Global) => sb::SettingScope::Global,
        Some(Scope::Workspace) => sb::SettingScope::Workspace,
        Some(Scope::Sandbox) => sb::SettingScope::Sandbox,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(seconds: i64, nanos: i32) -> prost_types::Timestamp {
        prost_types::Timestamp { seconds, nanos }
    }

    /// Probe: out-of-range times were cut to fit (`seconds` of ±2^63 became i64::MIN or MAX
    /// milliseconds), so the earliest-expiry gauge read -9223372036854776. They are refused,
    /// naming the field.
    #[test]
    fn client_times_follow_the_timestamp_rules() {
        assert_eq!(
            timestamp_to_ms("expires_at", &at(1, 5_000_000)).unwrap(),
            1005
        );
        assert_eq!(
            timestamp_to_ms("expires_at", &at(MIN_TIMESTAMP_SECONDS, 0)).unwrap(),
            MIN_TIMESTAMP_SECONDS * 1000
        );
        assert_eq!(
            timestamp_to_ms("expires_at", &at(MAX_TIMESTAMP_SECONDS, 999_999_999)).unwrap(),
            MAX_TIMESTAMP_SECONDS * 1000 + 999
        );
        let fields = |ts| {
            timestamp_to_ms("values[2].expires_at", &ts)
                .unwrap_err()
                .into_iter()
                .map(|v| v.field)
                .collect::<Vec<_>>()
        };
        assert_eq!(fields(at(i64::MAX, 0)), ["values[2].expires_at.seconds"]);
        assert_eq!(fields(at(i64::MIN, 0)), ["values[2].expires_at.seconds"]);
        assert_eq!(
            fields(at(MAX_TIMESTAMP_SECONDS + 1, 0)),
            ["values[2].expires_at.seconds"]
        );
        assert_eq!(fields(at(0, -1)), ["values[2].expires_at.nanos"]);
        assert_eq!(
            fields(at(MIN_TIMESTAMP_SECONDS - 1, 2_000_000_000)),
            ["values[2].expires_at.seconds", "values[2].expires_at.nanos"]
        );
    }
}
