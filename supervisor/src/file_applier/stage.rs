//! Stage and validate: turn a desired configuration into the exact bytes of the active files,
//! or refuse it, before anything on disk is touched.

use std::sync::Arc;
use std::time::SystemTime;

use openshell_core::policy::{PolicyError, SandboxPolicy, hash_of_canonical_json};
use openshell_core::{validate_env_name, validate_env_value};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use serde_json::{Map, Value, json};

use crate::applier::{ApplyError, ApplyStage};
use crate::desired::{DesiredConfig, SharedPolicy, from_upstream_gateway};

pub const POLICY_FILE: &str = "policy.json";
pub const SETTINGS_FILE: &str = "settings.json";
pub const PROVIDER_ENV_FILE: &str = "provider-env.json";
pub const REVISIONS_FILE: &str = "revisions.json";
/// The gateway's `sandbox_config` as applied (protobuf, hex): what a restarted supervisor
/// keeps in effect as its last-known-good when the gateway's latest is refused.
pub const SANDBOX_CONFIG_FILE: &str = "sandbox-config.json";
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

/// The last policy message that passed its checks. They are a pure function of the message,
/// the hash the snapshot states for it and whether that hash is to be checked, so a change
/// that leaves all three as they were (a settings change, a provider refresh) reuses the
/// result instead of converting, validating and hashing the same policy again.
#[derive(Debug, Default)]
pub struct PolicyMemo {
    last: Option<Memo>,
}

#[derive(Debug)]
struct Memo {
    /// The policy's digest (see [`SharedPolicy`]): equal digests mean equal messages, so no
    /// other message is ever vouched for. Comparing digests reads 32 bytes instead of
    /// walking a second copy of the policy, which in a process of thousands of supervisors
    /// is out of cache by the next change.
    digest: [u8; 32],
    stated_hash: Option<String>,
    checked: Arc<CheckedPolicy>,
}

impl PolicyMemo {
    /// Converts a policy message to the policy document and validates it. With a
    /// `stated_hash`, the document's hash (of its canonical JSON) must be that hash.
    fn check(
        &mut self,
        shared: &SharedPolicy,
        stated_hash: Option<&str>,
    ) -> Result<Arc<CheckedPolicy>, String> {
        let digest = *shared.digest();
        let policy = shared.message();
        if let Some(memo) = &self.last
            && memo.digest == digest
            && memo.stated_hash.as_deref() == stated_hash
        {
            return Ok(memo.checked.clone());
        }
        let document =
            SandboxPolicy::try_from(policy).map_err(|err| format!("policy rejected: {err}"))?;
        document.validate().map_err(|violations| {
            format!("policy rejected: {}", PolicyError::Invalid(violations))
        })?;
        let canonical_json = document.canonical_json();
        if let Some(stated) = stated_hash {
            let actual = hash_of_canonical_json(&canonical_json);
            if actual != stated {
                return Err(format!(
                    "policy hash mismatch: snapshot says {stated}, content hashes to {actual}"
                ));
            }
        }
        let checked = Arc::new(CheckedPolicy {
            policy: document,
            canonical_json,
        });
        self.last = Some(Memo {
            digest,
            stated_hash: stated_hash.map(str::to_owned),
            checked: checked.clone(),
        });
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
            crate::desired::env_revision(env),
            crate::desired::config_revisions(config).provider_env_revision
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
    let checked = match desired.shared_policy() {
        // No policy yet: the sandbox runs with the empty policy, which allows no network access.
        None => {
            let policy = SandboxPolicy::default();
            Arc::new(CheckedPolicy {
                canonical_json: policy.canonical_json(),
                policy,
            })
        }
        Some(policy) => {
            // An upstream gateway's hash is of the policy message in its own encoding, which
            // this supervisor does not compute: only this project's gateway's is checked.
            let stated_hash = (!config.policy_hash.is_empty() && !from_upstream_gateway(config))
                .then_some(config.policy_hash.as_str());
            match memo.check(policy, stated_hash) {
                Ok(checked) => checked,
                Err(reason) => return fail(reason),
            }
        }
    };
    for (name, value) in &env.environment {
        if let Err(violation) = validate_env_name("provider_environment", name) {
            return fail(format!("invalid provider value name: {violation}"));
        }
        if let Err(violation) = validate_env_value("provider_environment", name, value) {
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
        StagedFile {
            name: SANDBOX_CONFIG_FILE,
            bytes: pretty(&sandbox_config_document(desired)),
            mode: PUBLIC_MODE,
        },
    ];
    Ok(Staged { policy, files })
}

fn sandbox_config_document(desired: &DesiredConfig) -> Value {
    json!({
        "sandbox_config_protobuf_hex": hex::encode(prost::Message::encode_to_vec(&desired.to_response())),
        "policy_is_local": desired.policy_is_local,
    })
}

/// The configuration a generation's [`SANDBOX_CONFIG_FILE`] describes, as the supervisor's
/// last-known-good: its policy and revisions. It carries no provider environment (the
/// credentials stay in their own file), so it is only ever applied with the gateway's.
pub fn recovered_config(bytes: &[u8]) -> Result<DesiredConfig, String> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let hex_text = doc["sandbox_config_protobuf_hex"]
        .as_str()
        .ok_or("sandbox_config_protobuf_hex is missing")?;
    let encoded = hex::decode(hex_text).map_err(|e| format!("not hex: {e}"))?;
    let sandbox_config =
        <sb::GetSandboxConfigResponse as prost::Message>::decode(encoded.as_slice())
            .map_err(|e| format!("not a sandbox_config: {e}"))?;
    let mut desired = DesiredConfig::new(
        sandbox_config,
        pb::GetSandboxProviderEnvironmentResponse::default(),
    );
    desired.policy_is_local = doc["policy_is_local"].as_bool().unwrap_or(false);
    Ok(desired)
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
    for (key, setting) in &config.settings {
        let value = match setting.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(sb::setting_value::Value::BoolValue(b)) => json!(b),
            Some(sb::setting_value::Value::IntValue(i)) => json!(i),
            Some(sb::setting_value::Value::StringValue(s)) => json!(s),
            // No registry key holds bytes; an upstream gateway's may. Wrapped, so a reader
            // cannot take the hex for a string setting's value.
            Some(sb::setting_value::Value::BytesValue(b)) => json!({ "bytes_hex": hex::encode(b) }),
            None => Value::Null,
        };
        settings.insert(
            key.clone(),
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
    for (name, value) in &env.environment {
        let provider = env.sources.get(name).map_or("", |source| &source.provider);
        values.insert(
            name.clone(),
            json!({
                "value": value,
                "class": class_name(desired.value_class(name)),
                "provider": provider,
            }),
        );
    }
    json!({
        "provider_env_revision": crate::desired::env_revision(env),
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
        "policy_source": desired.policy_source_name(),
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

/// RFC 3339 to the second, or empty outside a protobuf `Timestamp`'s range (years 1 to
/// 9999). prost's own text, not humantime's: a credential may have expired before 1970,
/// which humantime's formatter panics on.
fn timestamp_text(ts: &prost_types::Timestamp) -> String {
    const YEAR_1: i64 = -62_135_596_800;
    const YEAR_9999_END: i64 = 253_402_300_799;
    if !(YEAR_1..=YEAR_9999_END).contains(&ts.seconds) {
        return String::new();
    }
    prost_types::Timestamp {
        seconds: ts.seconds,
        nanos: 0,
    }
    .to_string()
}

fn scope_name(scope: sb::SettingScope) -> &'static str {
    match scope {
        sb::SettingScope::Global => "global",
        sb::SettingScope::Workspace => "workspace",
        sb::SettingScope::Sandbox => "sandbox",
        sb::SettingScope::Default | sb::SettingScope::Unspecified => "default",
    }
}

/// A value of unknown class is written as a credential, as it is handled.
fn class_name(class: pb::ValueClass) -> &'static str {
    match class {
        pb::ValueClass::NonSecret => "NON_SECRET",
        _ => "CREDENTIAL",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::desired::tests::{
        sample, set_message, set_policy, unconvertible_policy, version_9_policy,
    };

    #[test]
    fn renders_five_files_in_order() {
        let staged = stage(&sample(1, "e1"), &mut PolicyMemo::default()).unwrap();
        let names: Vec<&str> = staged.files.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                POLICY_FILE,
                SETTINGS_FILE,
                PROVIDER_ENV_FILE,
                REVISIONS_FILE,
                SANDBOX_CONFIG_FILE
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

    /// Probe: a credential that expired before 1970 (a valid protobuf `Timestamp`) made the
    /// supervisor panic while staging its provider environment, in humantime's formatter.
    #[test]
    fn an_expiry_before_1970_is_staged() {
        let mut d = sample(1, "e1");
        d.provider_env.expires_at = Some(prost_types::Timestamp {
            seconds: -86_400,
            nanos: 0,
        });
        let staged = stage(&d, &mut PolicyMemo::default()).unwrap();
        let env: Value = serde_json::from_slice(&staged.files[2].bytes).unwrap();
        assert_eq!(env["expires_at"], "1969-12-31T00:00:00Z");
        d.provider_env.expires_at = Some(prost_types::Timestamp {
            seconds: 1_796_117_400,
            nanos: 123_000_000,
        });
        let staged = stage(&d, &mut PolicyMemo::default()).unwrap();
        let env: Value = serde_json::from_slice(&staged.files[2].bytes).unwrap();
        assert_eq!(env["expires_at"], "2026-12-01T09:30:00Z");
    }

    #[test]
    fn empty_policy_means_default_policy() {
        let mut d = sample(0, "e1");
        d.set_policy(None);
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
        set_policy(&mut policy_change, &other);
        let changed = validate(&policy_change, &mut memo).unwrap();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.policy, other);
    }

    #[test]
    fn the_memo_never_vouches_for_other_content() {
        let mut memo = PolicyMemo::default();
        let good = sample(1, "e1");
        validate(&good, &mut memo).unwrap();

        let other =
            openshell_core::parse_and_validate(include_str!("../../../examples/policy.yaml"))
                .unwrap();
        let mut tampered = good.clone();
        set_message(&mut tampered, sb::SandboxPolicy::from(&other));
        let err = validate(&tampered, &mut memo).unwrap_err();
        assert!(err.reason.contains("hash mismatch"), "{}", err.reason);

        // A message that is no policy document at all.
        let mut broken = good.clone();
        set_message(&mut broken, unconvertible_policy());
        let err = validate(&broken, &mut memo).unwrap_err();
        assert!(err.reason.contains("policy rejected"), "{}", err.reason);

        let mut wrong_hash = good;
        wrong_hash.sandbox_config.policy_hash = "00".into();
        let err = validate(&wrong_hash, &mut memo).unwrap_err();
        assert!(err.reason.contains("hash mismatch"), "{}", err.reason);
    }

    /// An upstream gateway's `policy_hash` is of its own encoding of the message: it is not
    /// checked, the policy itself is. The memo never lets that skip a check of this
    /// project's gateway's hash.
    #[test]
    fn an_upstream_gateways_hash_is_not_checked_but_its_policy_is() {
        let mut memo = PolicyMemo::default();
        let mut upstream = sample(0, "e1");
        let config = &mut upstream.sandbox_config;
        config.sandbox_id.clear();
        config.provider_env_fingerprint.clear();
        config.version = 4;
        config.policy_hash = "0f".repeat(32);
        upstream.provider_env.provider_env_fingerprint.clear();
        assert!(from_upstream_gateway(&upstream.sandbox_config));
        let checked = validate(&upstream, &mut memo).unwrap();
        assert_eq!(
            checked.policy,
            openshell_core::parse_and_validate("version: 1").unwrap()
        );

        let mut ours = sample(4, "e1");
        ours.sandbox_config.policy_hash = "0f".repeat(32);
        let err = validate(&ours, &mut memo).unwrap_err();
        assert!(err.reason.contains("hash mismatch"), "{}", err.reason);

        set_message(&mut upstream, version_9_policy());
        let err = validate(&upstream, &mut memo).unwrap_err();
        assert!(err.reason.contains("policy rejected"), "{}", err.reason);
    }

    #[test]
    fn rejects_invalid_policy_mismatched_pair_and_hash() {
        let mut d = sample(1, "e1");
        set_message(&mut d, version_9_policy());
        let err = validate(&d, &mut PolicyMemo::default()).unwrap_err();
        assert_eq!(err.stage, ApplyStage::Stage);
        assert!(err.reason.contains("version"), "{}", err.reason);

        let mut d = sample(1, "e1");
        d.provider_env.provider_env_fingerprint = "e2".into();
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
        let token = d.provider_env.environment.remove("GITHUB_TOKEN").unwrap();
        d.provider_env.environment.insert("BAD=NAME".into(), token);
        assert!(
            validate(&d, &mut PolicyMemo::default())
                .unwrap_err()
                .reason
                .contains("BAD=NAME")
        );
    }

    #[test]
    fn the_sandbox_config_reads_back_without_the_credentials() {
        let desired = sample(3, "e1");
        let staged = stage(&desired, &mut PolicyMemo::default()).unwrap();
        let file = staged
            .files
            .iter()
            .find(|f| f.name == SANDBOX_CONFIG_FILE)
            .unwrap();
        assert_eq!(file.mode, PUBLIC_MODE);
        assert!(
            !String::from_utf8_lossy(&file.bytes).contains("ghp_secretvalue42")
                && !String::from_utf8_lossy(&file.bytes)
                    .contains(&hex::encode("ghp_secretvalue42")),
            "no credential in a public file"
        );
        let recovered = recovered_config(&file.bytes).unwrap();
        assert_eq!(recovered.sandbox_config, desired.sandbox_config);
        assert!(desired.policy().is_some());
        assert_eq!(recovered.policy(), desired.policy());
        assert!(recovered.provider_env.environment.is_empty());
        assert!(!recovered.policy_is_local);
        let err = recovered_config(br#"{"sandbox_config_protobuf_hex": "zz"}"#).unwrap_err();
        assert!(err.contains("not hex"), "{err}");
        let err = recovered_config(b"{}").unwrap_err();
        assert!(err.contains("missing"), "{err}");
    }
}
