//! The objects calls resolve to: camelCase mirrors of `openshell_sdk`'s view
//! types, declared as `#[napi(object)]` so the generated `.d.ts` names every
//! field and every enum value exactly.
//!
//! Conversions only rename and widen; any meaning (what is terminal, what an
//! empty wire string stands for) was already decided by the sdk's views.

use std::collections::BTreeMap;

use napi::bindgen_prelude::Either3;
use napi_derive::napi;
use openshell_sdk as sdk;

use crate::enums::{
    ApplyOutcome, DeliveryMode, OperationState, PolicySource, SandboxLifecycle, SettingScope,
    TargetKind,
};

/// JS numbers are doubles; revisions and epochs stay far below 2^53 in
/// practice, and saturating beats wrapping if one ever did not.
pub(crate) fn js_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Per-target counts of a fleet operation (workspace, global or provider writes).
#[napi(object)]
pub struct FleetProgress {
    pub targets: u32,
    pub applied: u32,
    pub failed: u32,
    pub pending: u32,
    pub inactive: u32,
    pub superseded: u32,
    pub cancelled: u32,
}

impl From<sdk::FleetProgress> for FleetProgress {
    fn from(f: sdk::FleetProgress) -> Self {
        Self {
            targets: f.targets,
            applied: f.applied,
            failed: f.failed,
            pending: f.pending,
            inactive: f.inactive,
            superseded: f.superseded,
            cancelled: f.cancelled,
        }
    }
}

/// A durable record of one committed write.
#[napi(object)]
pub struct Operation {
    /// `op-` followed by a UUID.
    pub id: String,
    pub target_kind: TargetKind,
    /// Sandbox id, workspace name or provider id; empty for global.
    pub target: String,
    pub state: OperationState,
    /// Supervisor outcome, set once terminal (`UNSPECIFIED` before).
    pub outcome: ApplyOutcome,
    /// Sanitized error text, at most 1 KiB.
    pub error: Option<String>,
    /// Policy revision this operation waits to see applied; 0 when policy was untouched.
    pub policy_revision: i64,
    /// Settings revision of the written scope; 0 when settings were untouched.
    pub settings_revision: i64,
    pub global_policy_revision: i64,
    /// The write changed nothing; the operation tracks the current revision.
    pub no_op: bool,
    pub idempotency_key: Option<String>,
    /// RFC 3339 with milliseconds.
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub completed_at: Option<String>,
    /// A server-side wait hit its deadline while the operation was still live.
    pub wait_timed_out: bool,
    /// Set for fleet operations only.
    pub fleet: Option<FleetProgress>,
    /// Principal that issued the write.
    pub caller: String,
}

impl From<sdk::Operation> for Operation {
    fn from(op: sdk::Operation) -> Self {
        Self {
            id: op.id,
            target_kind: op.target_kind.into(),
            target: op.target,
            state: op.state.into(),
            outcome: op.outcome.into(),
            error: op.error,
            policy_revision: js_int(op.policy_revision),
            settings_revision: js_int(op.settings_revision),
            global_policy_revision: js_int(op.global_policy_revision),
            no_op: op.no_op,
            idempotency_key: op.idempotency_key,
            created_at: op.created_at,
            updated_at: op.updated_at,
            completed_at: op.completed_at,
            wait_timed_out: op.wait_timed_out,
            fleet: op.fleet.map(Into::into),
            caller: op.caller,
        }
    }
}

/// What `updateConfig` resolves to.
#[napi(object)]
pub struct UpdateResult {
    /// The durable operation of the write; absent only for a `validateOnly` request.
    pub operation: Option<Operation>,
    /// An earlier request with the same idempotency key was found; nothing was written.
    pub idempotent_replay: bool,
    /// Static sections (`filesystem_policy`, `landlock`, `process`) the sandbox policy omitted
    /// and that were kept from the sandbox's latest revision (would be, for `validateOnly`).
    pub kept_static_sections: Vec<String>,
    /// The request was validate-only: checked, nothing written.
    pub validate_only: bool,
    /// `validateOnly` with a policy: how it differs from the target's current policy.
    pub policy_diff: Option<PolicyDiff>,
    /// `validateOnly`: the settings that would change at the target's scope.
    pub setting_changes: Vec<SettingDiff>,
    /// With `policyEdits`: what the gateway's merge kept or rewrote instead of doing it
    /// literally, one line each (empty for an idempotent replay).
    pub merge_notes: Vec<String>,
    /// A sandbox policy written (or checked) while a global policy is set: that global
    /// policy's revision, which replaces it; the operation ends INACTIVE with
    /// `SHADOWED_BY_GLOBAL`. Absent when no global policy is set.
    pub shadowed_by_global_policy: Option<i64>,
}

impl From<sdk::UpdateResult> for UpdateResult {
    fn from(r: sdk::UpdateResult) -> Self {
        Self {
            operation: r.operation.map(Into::into),
            idempotent_replay: r.idempotent_replay,
            kept_static_sections: r.kept_static_sections,
            validate_only: r.validate_only,
            policy_diff: r.policy_diff.map(Into::into),
            setting_changes: r.setting_changes.into_iter().map(Into::into).collect(),
            merge_notes: r.merge_notes,
            shadowed_by_global_policy: r.shadowed_by_global_policy.map(js_int),
        }
    }
}

/// What a policy would change compared with the target's current policy, rule by rule.
#[napi(object)]
pub struct PolicyDiff {
    /// Network policies (by map key) only in the new policy.
    pub added_policies: Vec<String>,
    /// Network policies only in the current policy.
    pub removed_policies: Vec<String>,
    /// Network policies on both sides whose content differs.
    pub changed_policies: Vec<PolicyChange>,
    /// Static sections whose content would change (a sandbox's first policy, or the global one).
    pub changed_static_sections: Vec<String>,
    /// Other top-level sections that differ, e.g. `network_middlewares`.
    pub changed_sections: Vec<String>,
    /// The revision compared against; 0 when the target has no policy yet.
    pub current_revision: i64,
    pub current_policy_hash: Option<String>,
    /// The hash the stored policy would have, kept sections included.
    pub new_policy_hash: String,
}

impl From<sdk::PolicyDiff> for PolicyDiff {
    fn from(d: sdk::PolicyDiff) -> Self {
        Self {
            added_policies: d.added_policies,
            removed_policies: d.removed_policies,
            changed_policies: d.changed_policies.into_iter().map(Into::into).collect(),
            changed_static_sections: d.changed_static_sections,
            changed_sections: d.changed_sections,
            current_revision: js_int(d.current_revision),
            current_policy_hash: d.current_policy_hash,
            new_policy_hash: d.new_policy_hash,
        }
    }
}

/// One network policy on both sides with different content. Endpoints are named by host,
/// ports and path (`api.example.com:443/v1/**`), or `endpoints[i]` when they have no host.
#[napi(object)]
pub struct PolicyChange {
    pub name: String,
    pub added_endpoints: Vec<String>,
    pub removed_endpoints: Vec<String>,
    pub changed_endpoints: Vec<String>,
    /// Fields other than `endpoints` that differ, e.g. `binaries`.
    pub changed_fields: Vec<String>,
}

impl From<sdk::PolicyChange> for PolicyChange {
    fn from(c: sdk::PolicyChange) -> Self {
        Self {
            name: c.name,
            added_endpoints: c.added_endpoints,
            removed_endpoints: c.removed_endpoints,
            changed_endpoints: c.changed_endpoints,
            changed_fields: c.changed_fields,
        }
    }
}

/// One setting a `validateOnly` update would change at the target's scope.
#[napi(object)]
pub struct SettingDiff {
    pub key: String,
    /// Stored at the scope now; absent when the key is not set there.
    pub old_value: Option<Either3<bool, i64, String>>,
    /// What it would be; absent when the change deletes it.
    pub new_value: Option<Either3<bool, i64, String>>,
}

impl From<sdk::SettingDiff> for SettingDiff {
    fn from(d: sdk::SettingDiff) -> Self {
        Self {
            key: d.key,
            old_value: d.old_value.map(setting_value),
            new_value: d.new_value.map(setting_value),
        }
    }
}

/// A sandbox record.
#[napi(object)]
pub struct Sandbox {
    /// `sb-` followed by a UUID.
    pub id: String,
    pub name: String,
    pub workspace: String,
    pub lifecycle: SandboxLifecycle,
    /// Latest policy revision of the sandbox itself; 0 when it has none.
    pub policy_revision: i64,
    /// Sandbox-scope settings revision; 0 when never written.
    pub settings_revision: i64,
    /// Increases on every provider attach or detach.
    pub attachment_epoch: i64,
    /// Names of the attached providers, sorted.
    pub providers: Vec<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    /// Policy revision the supervisor last reported applied; 0 when none.
    pub applied_policy_revision: i64,
    /// Hash of that applied policy; absent when none has been applied.
    pub applied_policy_hash: Option<String>,
    /// Set while the sandbox is quarantined (a failed apply under `fail_closed`: all network
    /// access denied until a configuration applies): the reason its supervisor reported.
    pub quarantine_reason: Option<String>,
}

impl From<sdk::Sandbox> for Sandbox {
    fn from(s: sdk::Sandbox) -> Self {
        Self {
            id: s.id,
            name: s.name,
            workspace: s.workspace,
            lifecycle: s.lifecycle.into(),
            policy_revision: js_int(s.policy_revision),
            settings_revision: js_int(s.settings_revision),
            attachment_epoch: js_int(s.attachment_epoch),
            providers: s.providers,
            created_at: s.created_at,
            updated_at: s.updated_at,
            applied_policy_revision: js_int(s.applied_policy_revision),
            applied_policy_hash: s.applied_policy_hash,
            quarantine_reason: s.quarantine_reason,
        }
    }
}

/// What `createSandbox` resolves to.
#[napi(object)]
pub struct CreatedSandbox {
    pub sandbox: Sandbox,
    /// The only copy of the supervisor credential: hand it to the sandbox's
    /// supervisor (`--credential-file`); the gateway keeps only its hash.
    pub supervisor_credential: String,
    /// Operation of the initial policy, when one was given.
    pub operation: Option<Operation>,
}

impl From<sdk::CreatedSandbox> for CreatedSandbox {
    fn from(c: sdk::CreatedSandbox) -> Self {
        Self {
            sandbox: c.sandbox.into(),
            supervisor_credential: c.supervisor_credential.expose().to_owned(),
            operation: c.operation.map(Into::into),
        }
    }
}

/// What `deleteSandbox` resolves to.
#[napi(object)]
pub struct DeletedSandbox {
    /// The sandbox, now `DELETED`.
    pub sandbox: Sandbox,
    /// Pending operations that ended `CANCELLED`.
    pub cancelled_operations: u32,
}

impl From<sdk::DeletedSandbox> for DeletedSandbox {
    fn from(d: sdk::DeletedSandbox) -> Self {
        Self {
            sandbox: d.sandbox.into(),
            cancelled_operations: d.cancelled_operations,
        }
    }
}

/// What attaching or detaching a provider resolves to.
#[napi(object)]
pub struct Attachment {
    /// The sandbox with its new attachment epoch.
    pub sandbox: Sandbox,
    /// Operation tracking delivery of the new provider environment.
    pub operation: Option<Operation>,
}

impl From<sdk::Attachment> for Attachment {
    fn from(a: sdk::Attachment) -> Self {
        Self {
            sandbox: a.sandbox.into(),
            operation: a.operation.map(Into::into),
        }
    }
}

/// A provider record: credential names, never values.
#[napi(object)]
pub struct Provider {
    /// `pv-…`.
    pub id: String,
    pub name: String,
    pub workspace: String,
    #[napi(js_name = "type")]
    pub provider_type: String,
    /// Plain (non-secret) environment values.
    pub env: BTreeMap<String, String>,
    /// Names of the credential values; the values are never returned.
    pub credential_names: Vec<String>,
    pub revision: i64,
    pub expires_at: Option<String>,
    pub attached_sandbox_ids: Vec<String>,
    /// When it was created, and last written (an update or a credential refresh).
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

impl From<sdk::Provider> for Provider {
    fn from(p: sdk::Provider) -> Self {
        Self {
            id: p.id,
            name: p.name,
            workspace: p.workspace,
            provider_type: p.provider_type,
            env: p.env,
            credential_names: p.credential_names,
            revision: js_int(p.revision),
            expires_at: p.expires_at,
            attached_sandbox_ids: p.attached_sandbox_ids,
            created_at: p.created_at,
            updated_at: p.updated_at,
        }
    }
}

/// What creating or updating a provider resolves to.
#[napi(object)]
pub struct ProviderWrite {
    pub provider: Provider,
    /// Fleet operation over the attaching sandboxes, when any attach it.
    pub operation: Option<Operation>,
}

impl From<sdk::ProviderWrite> for ProviderWrite {
    fn from(w: sdk::ProviderWrite) -> Self {
        Self {
            provider: w.provider.into(),
            operation: w.operation.map(Into::into),
        }
    }
}

/// One stored policy revision.
#[napi(object)]
pub struct PolicyRevision {
    /// Sandbox id; absent for the global policy.
    pub sandbox_id: Option<String>,
    pub revision: i64,
    /// Lowercase hex SHA-256 of the policy's canonical form.
    pub policy_hash: String,
    /// Canonical YAML, accepted unchanged by `updateConfig`; absent in history lists.
    pub policy_yaml: Option<String>,
    pub created_at: Option<String>,
    /// Operation that created the revision.
    pub operation_id: Option<String>,
}

impl From<sdk::PolicyRevision> for PolicyRevision {
    fn from(p: sdk::PolicyRevision) -> Self {
        Self {
            sandbox_id: p.sandbox_id,
            revision: js_int(p.revision),
            policy_hash: p.policy_hash,
            policy_yaml: p.policy_yaml,
            created_at: p.created_at,
            operation_id: p.operation_id,
        }
    }
}

/// A sandbox's policy revision together with what is actually in effect.
#[napi(object)]
pub struct SandboxPolicy {
    /// The sandbox's own revision.
    pub policy: PolicyRevision,
    /// `GLOBAL` while a global policy replaces the sandbox's own.
    pub effective_source: PolicySource,
    /// Global policy revision in effect, 0 when none.
    pub global_policy_revision: i64,
}

impl From<sdk::SandboxPolicy> for SandboxPolicy {
    fn from(p: sdk::SandboxPolicy) -> Self {
        Self {
            policy: p.policy.into(),
            effective_source: p.effective_source.into(),
            global_policy_revision: js_int(p.global_policy_revision),
        }
    }
}

/// A typed setting value as the gateway's registry types it. Spelled out at
/// each use because the `.d.ts` generator does not emit Rust type aliases.
fn setting_value(value: sdk::SettingValue) -> Either3<bool, i64, String> {
    match value {
        sdk::SettingValue::Bool(b) => Either3::A(b),
        sdk::SettingValue::Int(i) => Either3::B(i),
        sdk::SettingValue::String(s) => Either3::C(s),
    }
}

/// One setting as stored at a scope, or as effective for a sandbox.
#[napi(object)]
pub struct Setting {
    pub key: String,
    pub value: Option<Either3<bool, i64, String>>,
    /// Scope the value comes from (`DEFAULT` when the registry default applies).
    pub scope: SettingScope,
}

impl From<sdk::Setting> for Setting {
    fn from(s: sdk::Setting) -> Self {
        Self {
            key: s.key,
            value: s.value.map(setting_value),
            scope: s.scope.into(),
        }
    }
}

/// What `getSettings` resolves to for one scope.
#[napi(object)]
pub struct ScopeSettings {
    /// The scope that was read.
    pub scope: SettingScope,
    /// Values stored at that scope.
    pub values: Vec<Setting>,
    /// Revision of that scope.
    pub revision: i64,
    /// Sandbox scope only: every registry key with its effective value and source.
    pub effective: Vec<Setting>,
}

impl From<sdk::ScopeSettings> for ScopeSettings {
    fn from(s: sdk::ScopeSettings) -> Self {
        Self {
            scope: s.scope.into(),
            values: s.values.into_iter().map(Into::into).collect(),
            revision: js_int(s.revision),
            effective: s.effective.into_iter().map(Into::into).collect(),
        }
    }
}

/// A key of the settings registry.
#[napi(object)]
pub struct SettingDefinition {
    pub key: String,
    /// `"bool"`, `"int"`, `"string"` or `"enum"`.
    pub kind: String,
    pub default_value: Option<Either3<bool, i64, String>>,
    /// Allowed values of enum keys.
    pub allowed_values: Vec<String>,
    pub description: String,
}

impl From<sdk::SettingDefinition> for SettingDefinition {
    fn from(d: sdk::SettingDefinition) -> Self {
        Self {
            key: d.key,
            kind: d.kind,
            default_value: d.default_value.map(setting_value),
            allowed_values: d.allowed_values,
            description: d.description,
        }
    }
}

/// One connected supervisor session.
#[napi(object)]
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
    pub policy_revision: i64,
    /// Policy revision the supervisor last reported applied; 0 when none.
    pub applied_policy_revision: i64,
}

impl From<sdk::SessionSummary> for SessionSummary {
    fn from(s: sdk::SessionSummary) -> Self {
        Self {
            sandbox_id: s.sandbox_id,
            sandbox_name: s.sandbox_name,
            session_id: s.session_id,
            mode: s.mode.into(),
            supervisor_version: s.supervisor_version,
            protocol_revision: s.protocol_revision,
            replica_id: s.replica_id,
            connected_at: s.connected_at,
            last_heartbeat_at: s.last_heartbeat_at,
            policy_revision: js_int(s.policy_revision),
            applied_policy_revision: js_int(s.applied_policy_revision),
        }
    }
}

/// Delivery state of one component (`sandbox_config` or `provider_environment`).
#[napi(object)]
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

impl From<sdk::ComponentDelivery> for ComponentDelivery {
    fn from(c: sdk::ComponentDelivery) -> Self {
        Self {
            component: c.component,
            desired: c.desired,
            sent: c.sent,
            sent_at: c.sent_at,
            acked: c.acked,
            ack_status: c.ack_status,
            acked_at: c.acked_at,
            dirty: c.dirty,
            lane: c.lane,
            held: c.held,
            last_failure: c.last_failure,
            backoff: c.backoff,
        }
    }
}

/// One recent delivery event.
#[napi(object)]
pub struct DeliveryEvent {
    pub at: Option<String>,
    pub text: String,
}

impl From<sdk::DeliveryEvent> for DeliveryEvent {
    fn from(e: sdk::DeliveryEvent) -> Self {
        Self {
            at: e.at,
            text: e.text,
        }
    }
}

/// How configuration reaches one sandbox, and what is wrong with it if anything.
#[napi(object)]
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
    /// needs; absent when it reported nothing.
    pub runtime_readiness: Option<RuntimeReadiness>,
    /// When each credential of the sandbox's providers expires, soonest first.
    pub credential_expiry: Vec<CredentialExpiry>,
}

/// One credential of an attached provider and when it stops being valid (its name, never
/// its value).
#[napi(object)]
pub struct CredentialExpiry {
    pub name: String,
    pub provider: String,
    pub expires_at: Option<String>,
}

impl From<sdk::CredentialExpiry> for CredentialExpiry {
    fn from(c: sdk::CredentialExpiry) -> Self {
        Self {
            name: c.name,
            provider: c.provider,
            expires_at: c.expires_at,
        }
    }
}

/// A supervisor's word on starting its workload: it connects to every remote middleware the
/// policy requires first.
#[napi(object)]
pub struct RuntimeReadiness {
    /// False while an unreachable `fail_closed` middleware holds the workload back.
    pub workload_started: bool,
    pub middlewares: Vec<MiddlewareReadiness>,
}

impl From<sdk::RuntimeReadiness> for RuntimeReadiness {
    fn from(r: sdk::RuntimeReadiness) -> Self {
        Self {
            workload_started: r.workload_started,
            middlewares: r.middlewares.into_iter().map(Into::into).collect(),
        }
    }
}

/// One remote middleware a supervisor's policy requires.
#[napi(object)]
pub struct MiddlewareReadiness {
    /// The policy entry's key.
    pub name: String,
    /// The implementation it names.
    pub implementation: String,
    /// `HOST:PORT`; absent when the implementation is not registered on the supervisor.
    pub endpoint: Option<String>,
    pub reachable: bool,
    /// `on_error: fail_closed`: while unreachable, the workload does not start.
    pub fail_closed: bool,
    /// Why it is unreachable.
    pub error: Option<String>,
}

impl From<sdk::MiddlewareReadiness> for MiddlewareReadiness {
    fn from(m: sdk::MiddlewareReadiness) -> Self {
        Self {
            name: m.name,
            implementation: m.implementation,
            endpoint: m.endpoint,
            reachable: m.reachable,
            fail_closed: m.fail_closed,
            error: m.error,
        }
    }
}

impl From<sdk::SessionInspection> for SessionInspection {
    fn from(s: sdk::SessionInspection) -> Self {
        Self {
            sandbox: s.sandbox.map(Into::into),
            gateway_mode: s.gateway_mode,
            connected: s.connected,
            negotiated_mode: s.negotiated_mode.into(),
            negotiated_reason: s.negotiated_reason,
            supervisor_version: s.supervisor_version,
            protocol_revision: s.protocol_revision,
            supports_config_snapshots: s.supports_config_snapshots,
            supports_config_apply: s.supports_config_apply,
            owner_replica: s.owner_replica,
            session_id: s.session_id,
            connected_at: s.connected_at,
            last_heartbeat_at: s.last_heartbeat_at,
            components: s.components.into_iter().map(Into::into).collect(),
            pending_operations: s.pending_operations.into_iter().map(Into::into).collect(),
            recent_events: s.recent_events.into_iter().map(Into::into).collect(),
            hints: s.hints,
            last_report: s.last_report,
            last_report_at: s.last_report_at,
            runtime_readiness: s.runtime_readiness.map(Into::into),
            credential_expiry: s.credential_expiry.into_iter().map(Into::into).collect(),
        }
    }
}

/// What `gatewayInfo` resolves to.
#[napi(object)]
pub struct GatewayInfo {
    pub version: String,
    /// `"poll"` or `"push"`.
    pub config_delivery_mode: String,
    /// `"sqlite"` or `"postgres"`.
    pub store_backend: String,
    pub replica_id: String,
    /// Highest supervisor protocol revision this gateway speaks.
    pub protocol_revision: u32,
    /// Live replicas sharing the store.
    pub replicas: Vec<String>,
    /// Sessions connected to this replica.
    pub sessions: u32,
    pub started_at: Option<String>,
    /// The gateway's clock when it answered, to the second, if it said.
    pub answered_at: Option<String>,
}

impl From<sdk::GatewayInfo> for GatewayInfo {
    fn from(g: sdk::GatewayInfo) -> Self {
        Self {
            version: g.version,
            config_delivery_mode: g.config_delivery_mode,
            store_backend: g.store_backend,
            replica_id: g.replica_id,
            protocol_revision: g.protocol_revision,
            replicas: g.replicas,
            sessions: g.sessions,
            started_at: g.started_at,
            answered_at: g.answered_at,
        }
    }
}
