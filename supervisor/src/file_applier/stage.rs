//! Stage and validate: turn a desired configuration into the exact bytes of the active files,
//! or refuse it, before anything on disk is touched.

use std::sync::Arc;
use std::time::SystemTime;

use openshell_core::policy::{SandboxPolicy, hash_of_canonical_json, parse_and_validate};
use openshell_core::{validate_env_name, validate_env_value};
use openshell_proto::v1::{SettingScope, setting_value};
use serde_json::{Map, Value, json};

use crate::applier::{ApplyError, ApplyStage};
use crate::desired::DesiredConfig;

pub const POLICY_FILE: &str = "policy.json";
pub const SETTINGS_FILE: &str = "settings.json";
pub const PROVIDER_ENV_FILE: &str = "provider-env.json";
pub const REVISIONS_FILE: &str = "revisions.json";
pub const QUARANTINE_FILE: &str = "quarantine.json";

/// Files readable by the workload's runtime user as usual.
pub const PUBLIC_MODE: u32 = 0o644;
/// Files holding credentials.
pub const SECRET_MODE: u32 = 0o600;

/// One file of the active configuration, rendered but not yet written.
pub struct StagedFile {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

impl Drop for StagedFile {
    /// The provider env file holds credentials in plain text; do not leave them in freed memory.
    fn drop(&mut self) {
        self.bytes.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&self.bytes);
    }
}

/// A policy that passed validation, with its canonical JSON: what `policy.json` holds and
/// what the policy hash is taken over.
#[derive(Debug, PartialEq)]
pub struct CheckedPolicy {
    pub policy: SandboxPolicy,
    pub canonical_json: String,
}

/// The last policy text that passed validation. Validation is a pure function of the
/// policy text and the hash the snapshot states for it, so a change that leaves both as
/// they were (a settings change, a provider refresh) reuses the result instead of
/// parsing, validating and hashing the same policy again.
#[derive(Debug, Default)]
pub struct PolicyMemo {
    last: Option<(String, String, Arc<CheckedPolicy>)>,
}

impl PolicyMemo {
    /// Checks a non-empty policy text against its stated hash (none when empty).
    fn check(
        &mut self,
        policy_json: &str,
        policy_hash: &str,
    ) -> Result<Arc<CheckedPolicy>, String> {
        if let Some((json, hash, checked)) = &self.last
            && json == policy_json
            && hash == policy_hash
        {
            return Ok(checked.clone());
        }
        let policy =
            parse_and_validate(policy_json).map_err(|err| format!("policy rejected: {err}"))?;
        let canonical_json = policy.canonical_json();
        if !policy_hash.is_empty() {
            let actual = hash_of_canonical_json(&canonical_json);
            if actual != policy_hash {
                return Err(format!(
                    "policy hash mismatch: snapshot says {policy_hash}, content hashes to {actual}"
                ));
            }
        }
        let checked = Arc::new(CheckedPolicy {
            policy,
            canonical_json,
        });
        self.last = Some((
            policy_json.to_string(),
            policy_hash.to_string(),
            checked.clone(),
        ));
        Ok(checked)
    }
}

/// A desired configuration that passed validation, with its files ready to write.
pub struct Staged {
    pub policy: Arc<CheckedPolicy>,
    /// The files of one generation; they become active together (see `state_dir`).
    pub files: Vec<StagedFile>,
}

/// Decodes and checks everything an activation relies on, without rendering any file.
/// `memo` remembers the last policy that passed, for the next call.
pub fn validate(
    desired: &DesiredConfig,
    memo: &mut PolicyMemo,
) -> Result<Arc<CheckedPolicy>, ApplyError> {
    let fail = |reason: String| Err(ApplyError::new(ApplyStage::Stage, &reason, desired));
    let config = &desired.sandbox_config;
    let env = &desired.provider_env;
    if !desired.pair_matches() {
        return fail(format!(
            "provider environment revision {:?} does not match the {:?} the sandbox config expects",
            env.provider_env_revision, config.provider_env_revision
        ));
    }
    if !config.sandbox_id.is_empty()
        && !env.sandbox_id.is_empty()
        && config.sandbox_id != env.sandbox_id
    {
        return fail(
            "sandbox config and provider environment belong to different sandboxes".into(),
        );
    }
    let checked = if config.policy_json.trim().is_empty() {
        // No policy yet: the sandbox runs with the empty policy, which allows no network access.
        let policy = SandboxPolicy::default();
        Arc::new(CheckedPolicy {
            canonical_json: policy.canonical_json(),
            policy,
        })
    } else {
        match memo.check(&config.policy_json, &config.policy_hash) {
            Ok(checked) => checked,
            Err(reason) => return fail(reason),
        }
    };
    for value in &env.values {
        if let Err(violation) = validate_env_name("provider_environment", &value.name) {
            return fail(format!("invalid provider value name: {violation}"));
        }
        if let Err(violation) =
            validate_env_value("provider_environment", &value.name, &value.value)
        {
            return fail(format!("invalid provider value: {}", violation.message));
        }
    }
    Ok(checked)
}

/// Validates and renders every file of the active configuration.
pub fn stage(desired: &DesiredConfig, memo: &mut PolicyMemo) -> Result<Staged, ApplyError> {
    let policy = validate(desired, memo)?;
    let mut policy_json = String::with_capacity(policy.canonical_json.len() + 1);
    policy_json.push_str(&policy.canonical_json);
    policy_json.push('\n');
    let files = vec![
        StagedFile {
            name: POLICY_FILE,
            bytes: policy_json.into_bytes(),
            mode: PUBLIC_MODE,
        },
        StagedFile {
            name: SETTINGS_FILE,
            bytes: pretty(&settings_document(desired)),
            mode: PUBLIC_MODE,
        },
        StagedFile {
            name: PROVIDER_ENV_FILE,
            bytes: pretty(&provider_env_document(desired)),
            mode: SECRET_MODE,
        },
        StagedFile {
            name: REVISIONS_FILE,
            bytes: pretty(&revisions_document(desired, SystemTime::now())),
            mode: PUBLIC_MODE,
        },
    ];
    Ok(Staged { policy, files })
}

/// The quarantine marker: whoever enforces network policy denies everything while it exists.
pub fn quarantine_document(desired: &DesiredConfig, reason: &str) -> Vec<u8> {
    pretty(&json!({
        "quarantined": true,
        "network": "deny_all",
        "reason": reason,
        "attempted": revisions_value(desired),
        "since": humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    }))
}

fn pretty(value: &Value) -> Vec<u8> {
    // Serializing a serde_json::Value cannot fail.
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn settings_document(desired: &DesiredConfig) -> Value {
    let config = &desired.sandbox_config;
    let mut settings = Map::new();
    for setting in &config.settings {
        let value = match setting.value.as_ref().and_then(|v| v.kind.as_ref()) {
            Some(setting_value::Kind::BoolValue(b)) => json!(b),
            Some(setting_value::Kind::IntValue(i)) => json!(i),
            Some(setting_value::Kind::StringValue(s)) => json!(s),
            None => Value::Null,
        };
        settings.insert(
            setting.key.clone(),
            json!({ "value": value, "scope": scope_name(setting.scope()) }),
        );
    }
    json!({
        "settings": settings,
        "revisions": {
            "global": config.global_settings_revision,
            "workspace": config.workspace_settings_revision,
            "sandbox": config.sandbox_settings_revision,
        },
    })
}

fn provider_env_document(desired: &DesiredConfig) -> Value {
    let env = &desired.provider_env;
    let mut values = Map::new();
    for value in &env.values {
        values.insert(
            value.name.clone(),
            json!({
                "value": value.value,
                "class": class_name(value.class()),
                "provider": value.provider,
            }),
        );
    }
    json!({
        "provider_env_revision": env.provider_env_revision,
        "attachment_epoch": env.attachment_epoch,
        "expires_at": env.expires_at.as_ref().map(timestamp_text),
        "values": values,
    })
}

fn revisions_document(desired: &DesiredConfig, now: SystemTime) -> Value {
    let mut doc = revisions_value(desired);
    if let Value::Object(map) = &mut doc {
        map.insert(
            "applied_at".into(),
            json!(humantime::format_rfc3339_seconds(now).to_string()),
        );
    }
    doc
}

fn revisions_value(desired: &DesiredConfig) -> Value {
    let r = desired.revisions();
    json!({
        "sandbox_id": desired.sandbox_config.sandbox_id,
        "policy_source": source_name(desired.sandbox_config.policy_source()),
        "policy_revision": r.policy_revision,
        "policy_hash": r.policy_hash,
        "global_policy_revision": r.global_policy_revision,
        "global_settings_revision": r.global_settings_revision,
        "workspace_settings_revision": r.workspace_settings_revision,
        "sandbox_settings_revision": r.sandbox_settings_revision,
        "provider_env_revision": r.provider_env_revision,
        "attachment_epoch": desired.provider_env.attachment_epoch,
    })
}

fn timestamp_text(ts: &prost_types::Timestamp) -> String {
    match SystemTime::try_from(*ts) {
        Ok(t) => humantime::format_rfc3339_seconds(t).to_string(),
        Err(_) => String::new(),
    }
}

fn scope_name(scope: SettingScope) -> &'static str {
    match scope {
        SettingScope::Global => "global",
        SettingScope::Workspace => "workspace",
        SettingScope::Sandbox => "sandbox",
        SettingScope::Default | SettingScope::Unspecified => "default",
    }
}

fn class_name(class: openshell_proto::v1::ValueClass) -> &'static str {
    match class {
        openshell_proto::v1::ValueClass::NonSecret => "NON_SECRET",
        _ => "CREDENTIAL",
    }
}

fn source_name(source: openshell_proto::v1::PolicySource) -> &'static str {
    use openshell_proto::v1::PolicySource;
    match source {
        PolicySource::Sandbox => "sandbox",
        PolicySource::Global => "global",
        PolicySource::Local => "local",
        PolicySource::Unspecified => "unspecified",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::desired::tests::sample;

    #[test]
    fn renders_four_files_in_order() {
        let staged = stage(&sample(1, "e1"), &mut PolicyMemo::default()).unwrap();
        let names: Vec<&str> = staged.files.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                POLICY_FILE,
                SETTINGS_FILE,
                PROVIDER_ENV_FILE,
                REVISIONS_FILE
            ]
        );
        let env: Value = serde_json::from_slice(&staged.files[2].bytes).unwrap();
        assert_eq!(env["values"]["GITHUB_TOKEN"]["value"], "ghp_secretvalue42");
        assert_eq!(env["values"]["GITHUB_TOKEN"]["class"], "CREDENTIAL");
        assert_eq!(staged.files[2].mode, SECRET_MODE);
        let settings: Value = serde_json::from_slice(&staged.files[1].bytes).unwrap();
        assert_eq!(
            settings["settings"]["policy_validation_failure_mode"]["scope"],
            "default"
        );
    }

    #[test]
    fn empty_policy_means_default_policy() {
        let mut d = sample(0, "e1");
        d.sandbox_config.policy_json.clear();
        d.sandbox_config.policy_hash.clear();
        let staged = stage(&d, &mut PolicyMemo::default()).unwrap();
        assert_eq!(staged.policy.policy, SandboxPolicy::default());
    }

    #[test]
    fn an_unchanged_policy_is_checked_once() {
        let mut memo = PolicyMemo::default();
        let first = validate(&sample(1, "e1"), &mut memo).unwrap();
        // A settings or provider change leaves the policy text and hash as they were.
        let mut settings_change = sample(1, "e2");
        settings_change.sandbox_config.global_settings_revision = 9;
        let again = validate(&settings_change, &mut memo).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the unchanged policy was checked again"
        );

        let other =
            openshell_core::parse_and_validate(include_str!("../../../examples/policy.yaml"))
                .unwrap();
        let mut policy_change = sample(2, "e2");
        policy_change.sandbox_config.policy_json = other.canonical_json();
        policy_change.sandbox_config.policy_hash = other.policy_hash();
        let changed = validate(&policy_change, &mut memo).unwrap();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.policy, other);
    }

    #[test]
    fn the_memo_never_vouches_for_other_text() {
        let mut memo = PolicyMemo::default();
        let good = sample(1, "e1");
        validate(&good, &mut memo).unwrap();

        let other =
            openshell_core::parse_and_validate(include_str!("../../../examples/policy.yaml"))
                .unwrap();
        let mut tampered = good.clone();
        tampered.sandbox_config.policy_json = other.canonical_json();
        let err = validate(&tampered, &mut memo).unwrap_err();
        assert!(err.reason.contains("hash mismatch"), "{}", err.reason);

        let mut broken = good.clone();
        broken.sandbox_config.policy_json = "{nope".into();
        let err = validate(&broken, &mut memo).unwrap_err();
        assert!(err.reason.contains("policy rejected"), "{}", err.reason);

        let mut wrong_hash = good;
        wrong_hash.sandbox_config.policy_hash = "00".into();
        let err = validate(&wrong_hash, &mut memo).unwrap_err();
        assert!(err.reason.contains("hash mismatch"), "{}", err.reason);
    }

    #[test]
    fn rejects_invalid_policy_mismatched_pair_and_hash() {
        let mut d = sample(1, "e1");
        d.sandbox_config.policy_json = "version: 7".into();
        let err = validate(&d, &mut PolicyMemo::default()).unwrap_err();
        assert_eq!(err.stage, ApplyStage::Stage);
        assert!(err.reason.contains("version"), "{}", err.reason);

        let mut d = sample(1, "e1");
        d.provider_env.provider_env_revision = "e2".into();
        assert!(
            validate(&d, &mut PolicyMemo::default())
                .unwrap_err()
                .reason
                .contains("does not match")
        );

        let mut d = sample(1, "e1");
        d.sandbox_config.policy_hash = "00".into();
        assert!(
            validate(&d, &mut PolicyMemo::default())
                .unwrap_err()
                .reason
                .contains("hash mismatch")
        );

        let mut d = sample(1, "e1");
        d.provider_env.values[0].name = "BAD=NAME".into();
        assert!(
            validate(&d, &mut PolicyMemo::default())
                .unwrap_err()
                .reason
                .contains("BAD=NAME")
        );
    }
}
