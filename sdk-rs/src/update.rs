//! `UpdateConfig`: what to change, where and how long to wait for it, and
//! reading the gateway's answer into an [`UpdateResult`]. The answer's
//! readers live here rather than beside the type, so the value types need no
//! error type (which itself holds an [`Operation`]).

use std::time::Duration;

use openshell_core::policy::{EditSpecs, PolicyEdit};
use openshell_proto::v1 as pb;

use crate::timefmt::to_proto_duration;
use crate::types::workspace_selector;
use crate::{Operation, PolicyDiff, SandboxRef, SdkError, SettingDiff, UpdateMode, UpdateResult};

/// The gateway's wait when the caller names none (DESIGN §7).
pub(crate) const DEFAULT_SERVER_WAIT: Duration = Duration::from_secs(60);

/// Where a configuration change applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One sandbox: its policy and/or sandbox-scope settings.
    Sandbox(SandboxRef),
    /// Every sandbox of a workspace: workspace-scope settings.
    Workspace(String),
    /// Everything: global settings and/or the global policy.
    Global,
}

impl Target {
    /// The request's target fields: upstream's `sandbox`, `workspace_scope` and `global`,
    /// and this project's `workspace_settings`.
    fn fill(&self, req: &mut pb::UpdateConfigRequest) {
        match self {
            Self::Sandbox(sandbox) => {
                req.sandbox = sandbox.id_or_name.clone();
                req.workspace_scope = sandbox.workspace_scope();
            }
            Self::Workspace(name) => {
                req.workspace_settings = true;
                req.workspace_scope = workspace_selector(Some(name));
            }
            Self::Global => req.global = true,
        }
    }
}

/// One setting change; values are sent as text and typed by the gateway's
/// registry, so every binding parses `"true"`, `"42"` or `"info"` alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingChange {
    Set {
        key: String,
        raw: String,
    },
    /// Removes the key from the scope so a lower scope or the default applies.
    Delete {
        key: String,
    },
}

impl SettingChange {
    pub fn set(key: impl Into<String>, raw: impl Into<String>) -> Self {
        Self::Set {
            key: key.into(),
            raw: raw.into(),
        }
    }

    pub fn delete(key: impl Into<String>) -> Self {
        Self::Delete { key: key.into() }
    }

    fn to_proto(&self) -> pb::SettingChange {
        use pb::setting_change::Change;
        match self {
            Self::Set { key, raw } => pb::SettingChange {
                key: key.clone(),
                change: Some(Change::Raw(raw.clone())),
            },
            Self::Delete { key } => pb::SettingChange {
                key: key.clone(),
                change: Some(Change::Delete(true)),
            },
        }
    }
}

/// A policy and/or settings write, committed as one durable operation.
///
/// Build one with [`UpdateConfig::new`] and the chainable setters, or with
/// struct-update syntax over `UpdateConfig::new(target)`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateConfig {
    pub target: Target,
    /// New policy text (YAML or JSON); `None` leaves the policy unchanged.
    pub policy: Option<String>,
    /// Sandbox target only, instead of `policy`: incremental edits the
    /// gateway applies to the sandbox's latest policy revision in the write's
    /// own transaction, so concurrent edits never lose one another.
    pub policy_edits: Vec<PolicyEdit>,
    /// The policy revision this change was made against (the sandbox's, or
    /// the global policy's); a target that has moved on refuses the write
    /// with `FailedPrecondition` and nothing is written.
    pub expected_revision: Option<u64>,
    /// Global target only: remove the global policy so sandbox policies apply again.
    pub clear_global_policy: bool,
    pub settings: Vec<SettingChange>,
    pub mode: UpdateMode,
    /// Makes the write safe to retry: unique per target and caller for 24 h.
    pub idempotency_key: Option<String>,
    /// Server-side wait for `WaitForApply` (gateway default 60 s, at most 10 min).
    pub wait_timeout: Option<Duration>,
    /// Fleet targets: finish the wait once this fraction (0, 1] of targets applied.
    pub threshold: Option<f64>,
    /// Check only: the gateway runs every check of the write and reports
    /// what it would change, writing nothing (see [`UpdateConfig::validate_only`]).
    pub validate_only: bool,
}

impl UpdateConfig {
    /// An empty commit-only change of `target`.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            policy: None,
            policy_edits: Vec::new(),
            expected_revision: None,
            clear_global_policy: false,
            settings: Vec::new(),
            mode: UpdateMode::CommitOnly,
            idempotency_key: None,
            wait_timeout: None,
            threshold: None,
            validate_only: false,
        }
    }

    pub fn policy(mut self, text: impl Into<String>) -> Self {
        self.policy = Some(text.into());
        self
    }

    pub fn edit(mut self, edit: PolicyEdit) -> Self {
        self.policy_edits.push(edit);
        self
    }

    /// Adds the edits of upstream's command-line forms (`--add-endpoint
    /// HOST:PORT[:ACCESS[:PROTOCOL[:ENFORCEMENT[:OPTIONS]]]]`, `--add-allow
    /// HOST:PORT:METHOD:PATH`, …), refusing malformed ones with the option
    /// that holds them (`add_endpoints[1]`).
    pub fn edit_specs(mut self, specs: &EditSpecs) -> Result<Self, SdkError> {
        let edits = specs
            .to_edits()
            .map_err(|violations| SdkError::invalid_violations("policy edits", violations))?;
        self.policy_edits.extend(edits);
        Ok(self)
    }

    pub fn expected_revision(mut self, revision: u64) -> Self {
        self.expected_revision = Some(revision);
        self
    }

    pub fn clear_global_policy(mut self) -> Self {
        self.clear_global_policy = true;
        self
    }

    pub fn set(mut self, key: impl Into<String>, raw: impl Into<String>) -> Self {
        self.settings.push(SettingChange::set(key, raw));
        self
    }

    pub fn delete(mut self, key: impl Into<String>) -> Self {
        self.settings.push(SettingChange::delete(key));
        self
    }

    pub fn mode(mut self, mode: UpdateMode) -> Self {
        self.mode = mode;
        self
    }

    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    pub fn threshold(mut self, fraction: f64) -> Self {
        self.threshold = Some(fraction);
        self
    }

    /// A dry run, like `kubectl apply --dry-run=server`: the gateway parses
    /// and validates the policy, applies the static-section rule against the
    /// stored policy (keeping sections the policy omits), checks setting keys
    /// and types, and answers with what would change, committing nothing: no
    /// revision, no operation, no settings change, and the idempotency key
    /// stays unused. `mode`, `wait_timeout` and `threshold` are ignored.
    #[doc(alias = "dry_run")]
    pub fn validate_only(mut self) -> Self {
        self.validate_only = true;
        self
    }

    /// True when a repeat of this request cannot write twice: it carries a
    /// key, or writes nothing at all.
    pub(crate) fn is_idempotent(&self) -> bool {
        self.validate_only
            || self
                .idempotency_key
                .as_deref()
                .is_some_and(|k| !k.is_empty())
    }

    pub(crate) fn to_proto(&self) -> Result<pb::UpdateConfigRequest, SdkError> {
        let wait = wait_options(self.wait_timeout, self.threshold)?;
        if let Some(policy) = &self.policy {
            SdkError::check_policy_size(policy)?;
        }
        let mut req = pb::UpdateConfigRequest {
            // Sent as text, so the gateway reports problems with the document's own paths.
            policy_text: self.policy.clone().unwrap_or_default(),
            merge_operations: self.policy_edits.iter().map(Into::into).collect(),
            expected_resource_version: self.expected_revision.unwrap_or_default(),
            clear_global_policy: self.clear_global_policy,
            settings: self.settings.iter().map(SettingChange::to_proto).collect(),
            mode: self.mode.into(),
            request_id: self.idempotency_key.clone().unwrap_or_default(),
            wait,
            validate_only: self.validate_only,
            ..Default::default()
        };
        self.target.fill(&mut req);
        Ok(req)
    }
}

impl UpdateResult {
    /// The operation of a committed write. A validate-only result has none,
    /// which is an error here, so code that only writes can use `?`.
    pub fn into_operation(self) -> Result<Operation, SdkError> {
        self.operation.ok_or_else(|| SdkError::InvalidArgument {
            message: "a validate-only update writes nothing and has no operation".to_owned(),
            violations: Vec::new(),
        })
    }

    pub(crate) fn from_proto(
        p: pb::UpdateConfigResponse,
        validate_only: bool,
    ) -> Result<Self, SdkError> {
        let operation = match p.operation {
            Some(op) => Some(Operation::from(op)),
            None if validate_only => None,
            None => return Err(SdkError::missing("operation")),
        };
        Ok(Self {
            operation,
            idempotent_replay: p.idempotent_replay,
            kept_static_sections: p.kept_static_sections,
            validate_only,
            policy_diff: p.policy_diff.map(PolicyDiff::from),
            setting_changes: p
                .setting_changes
                .into_iter()
                .map(SettingDiff::from)
                .collect(),
            merge_notes: p.merge_notes,
            shadowed_by_global_policy: Some(p.shadowed_by_global_policy).filter(|r| *r != 0),
        })
    }
}

/// Checks the threshold here so a bad value fails before anything is sent.
pub(crate) fn wait_options(
    timeout: Option<Duration>,
    threshold: Option<f64>,
) -> Result<Option<pb::WaitOptions>, SdkError> {
    if let Some(t) = threshold
        && !(t > 0.0 && t <= 1.0)
    {
        return Err(SdkError::InvalidArgument {
            message: format!("threshold {t} must be in (0, 1]"),
            violations: vec![crate::FieldViolation {
                field: "wait.threshold".to_owned(),
                message: "must be greater than 0 and at most 1".to_owned(),
            }],
        });
    }
    if timeout.is_none() && threshold.is_none() {
        return Ok(None);
    }
    Ok(Some(pb::WaitOptions {
        timeout: timeout.map(to_proto_duration),
        threshold: threshold.unwrap_or(0.0),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Probe: a 1.4 MB policy met the transport's "decoded message length too large" first.
    #[test]
    fn an_over_large_policy_is_refused_naming_the_policy_limit() {
        let big = "#".repeat(openshell_core::policy::MAX_POLICY_BYTES + 1);
        let update = UpdateConfig::new(Target::Sandbox(SandboxRef::from("demo"))).policy(big);
        let err = update.to_proto().unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert_eq!(err.violations()[0].field, "policy");
        assert!(
            err.to_string().contains("the limit is 262144 bytes"),
            "{err}"
        );
        let at_limit = "#".repeat(openshell_core::policy::MAX_POLICY_BYTES);
        let update = UpdateConfig::new(Target::Sandbox(SandboxRef::from("demo"))).policy(at_limit);
        assert!(update.to_proto().is_ok());
    }

    #[test]
    fn builds_wire_request() {
        let update = UpdateConfig::new(Target::Sandbox(SandboxRef::from("team/demo")))
            .policy("version: 1")
            .set("log_level", "debug")
            .delete("old_key")
            .mode(UpdateMode::WaitForApply)
            .idempotency_key("k1")
            .wait_timeout(Duration::from_secs(120));
        let req = update.to_proto().unwrap();
        assert_eq!(req.policy_text, "version: 1");
        assert!(req.policy.is_none());
        assert_eq!(req.mode, pb::UpdateMode::WaitForApply as i32);
        assert_eq!(req.request_id, "k1");
        assert_eq!(req.settings.len(), 2);
        assert_eq!(
            req.settings[1].change,
            Some(pb::setting_change::Change::Delete(true))
        );
        assert_eq!(req.sandbox, "demo");
        assert_eq!(req.workspace_scope, workspace_selector(Some("team")));
        assert!(!req.global && !req.workspace_settings);
        assert_eq!(req.wait.unwrap().timeout.unwrap().seconds, 120);
        assert!(update.is_idempotent());
    }

    #[test]
    fn global_and_workspace_targets() {
        let req = UpdateConfig::new(Target::Global)
            .clear_global_policy()
            .to_proto()
            .unwrap();
        assert!(req.clear_global_policy);
        assert!(req.global && req.sandbox.is_empty() && req.workspace_scope.is_none());
        assert_eq!(req.mode, pb::UpdateMode::CommitOnly as i32);
        assert!(req.wait.is_none());
        let req = UpdateConfig::new(Target::Workspace("team".into()))
            .to_proto()
            .unwrap();
        assert!(req.workspace_settings && !req.global);
        assert_eq!(req.workspace_scope, workspace_selector(Some("team")));
    }

    #[test]
    fn rejects_bad_threshold() {
        for bad in [0.0, -0.5, 1.5, f64::NAN] {
            let err = UpdateConfig::new(Target::Global)
                .threshold(bad)
                .to_proto()
                .unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT");
            assert_eq!(err.violations()[0].field, "wait.threshold");
        }
        assert!(
            UpdateConfig::new(Target::Global)
                .threshold(1.0)
                .to_proto()
                .is_ok()
        );
    }

    #[test]
    fn validate_only_is_sent_and_safe_to_retry() {
        let update = UpdateConfig::new(Target::Sandbox(SandboxRef::from("demo")))
            .policy("version: 1")
            .validate_only();
        let req = update.to_proto().unwrap();
        assert!(req.validate_only);
        assert!(update.is_idempotent());
        let write =
            UpdateConfig::new(Target::Sandbox(SandboxRef::from("demo"))).policy("version: 1");
        assert!(!write.to_proto().unwrap().validate_only);
    }

    #[test]
    fn empty_key_is_not_idempotent() {
        assert!(
            !UpdateConfig::new(Target::Global)
                .idempotency_key("")
                .is_idempotent()
        );
        assert!(!UpdateConfig::new(Target::Global).is_idempotent());
    }
}
