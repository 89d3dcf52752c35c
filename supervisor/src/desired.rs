//! The configuration a supervisor should have active: a `sandbox_config` snapshot together with
//! the `provider_environment` snapshot it expects.
//!
//! Both halves are the gateway's wire types, kept as they arrived, so what is written to the
//! state directory and what is reported back is exactly what the gateway built.

use std::fmt;

use openshell_core::ProviderValue;
use openshell_proto::v1::{
    AppliedRevisions, ProviderEnvironmentSnapshot, SandboxConfigSnapshot, Setting, SettingScope,
    ValueClass as WireValueClass, setting_value,
};
use prost::Message;
use sha2::{Digest, Sha256};

/// Setting that decides between last-known-good and quarantine after a failed apply.
pub const FAILURE_MODE_KEY: &str = "policy_validation_failure_mode";
/// Setting that overrides the `--reload-signal` flag when an operator sets it at some scope.
pub const RELOAD_SIGNAL_KEY: &str = "reload_signal";

/// What a failed apply leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// Keep the last configuration that applied.
    RetainLastValid,
    /// Quarantine the sandbox: deny all network access until a configuration applies.
    FailClosed,
}

/// A complete desired configuration. Cloning is cheap enough for the rates involved (one per
/// poll or pushed update).
///
/// `Debug` shows revisions and value names, never provider values.
#[derive(Clone, Default, PartialEq)]
pub struct DesiredConfig {
    pub sandbox_config: SandboxConfigSnapshot,
    pub provider_env: ProviderEnvironmentSnapshot,
}

impl DesiredConfig {
    pub fn new(
        sandbox_config: SandboxConfigSnapshot,
        provider_env: ProviderEnvironmentSnapshot,
    ) -> Self {
        Self {
            sandbox_config,
            provider_env,
        }
    }

    /// The revisions this configuration stands for, as results and reports carry them.
    pub fn revisions(&self) -> AppliedRevisions {
        AppliedRevisions {
            provider_env_revision: self.provider_env.provider_env_revision.clone(),
            ..config_revisions(&self.sandbox_config)
        }
    }

    /// True when the provider environment is the one the sandbox config was built against;
    /// only such a pair may be activated.
    pub fn pair_matches(&self) -> bool {
        self.sandbox_config.provider_env_revision == self.provider_env.provider_env_revision
    }

    /// Lowercase hex SHA-256 over both snapshots without their build times and lifecycle, so
    /// a rebuild of unchanged content compares equal.
    ///
    /// It covers provider values, so it is compared in memory only: never logged or sent.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(config_content(&self.sandbox_config));
        hasher.update(env_content(&self.provider_env));
        hex::encode(hasher.finalize())
    }

    pub fn setting(&self, key: &str) -> Option<&Setting> {
        self.sandbox_config.settings.iter().find(|s| s.key == key)
    }

    /// The string value of a string- or enum-typed setting, with whether an operator set it
    /// (as opposed to the registry default being in effect).
    pub fn string_setting(&self, key: &str) -> Option<(&str, bool)> {
        let setting = self.setting(key)?;
        match setting.value.as_ref()?.kind.as_ref()? {
            setting_value::Kind::StringValue(value) => {
                let explicit = !matches!(
                    setting.scope(),
                    SettingScope::Default | SettingScope::Unspecified
                );
                Some((value.as_str(), explicit))
            }
            _ => None,
        }
    }

    pub fn failure_mode(&self) -> FailureMode {
        // A snapshot without the key (an older gateway) gets the registry's default, the
        // same one the gateway applies.
        let default = openshell_core::settings::lookup(FAILURE_MODE_KEY)
            .map(|def| def.default_value())
            .and_then(|value| value.as_str().map(str::to_owned));
        let mode = self
            .string_setting(FAILURE_MODE_KEY)
            .map(|(value, _)| value.to_owned())
            .or(default);
        match mode.as_deref() {
            Some("retain_last_valid") => FailureMode::RetainLastValid,
            _ => FailureMode::FailClosed,
        }
    }

    /// Every provider value by name, credentials wrapped so they cannot be printed by accident.
    /// A value of unknown class is treated as a credential.
    pub fn provider_values(&self) -> Vec<(String, ProviderValue)> {
        self.provider_env
            .values
            .iter()
            .map(|v| {
                let value = match v.class() {
                    WireValueClass::NonSecret => ProviderValue::Plain(v.value.clone()),
                    _ => ProviderValue::Credential(v.value.clone().into()),
                };
                (v.name.clone(), value)
            })
            .collect()
    }

    /// Every provider value in plain text, for masking reasons; never for output.
    pub fn sensitive_values(&self) -> impl Iterator<Item = &str> {
        self.provider_env.values.iter().map(|v| v.value.as_str())
    }
}

impl fmt::Debug for DesiredConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.sandbox_config;
        let names: Vec<&str> = self
            .provider_env
            .values
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        f.debug_struct("DesiredConfig")
            .field("sandbox_id", &c.sandbox_id)
            .field("policy_source", &c.policy_source())
            .field("revisions", &self.revisions())
            .field("policy_bytes", &c.policy_json.len())
            .field("settings", &c.settings.len())
            .field("provider_value_names", &names)
            .finish()
    }
}

/// Revisions of a `sandbox_config` on its own: the provider env revision is the one it expects.
pub fn config_revisions(c: &SandboxConfigSnapshot) -> AppliedRevisions {
    AppliedRevisions {
        policy_revision: c.policy_revision,
        policy_hash: c.policy_hash.clone(),
        global_policy_revision: c.global_policy_revision,
        global_settings_revision: c.global_settings_revision,
        workspace_settings_revision: c.workspace_settings_revision,
        sandbox_settings_revision: c.sandbox_settings_revision,
        provider_env_revision: c.provider_env_revision.clone(),
    }
}

/// Revisions of a `provider_environment` on its own.
pub fn env_revisions(e: &ProviderEnvironmentSnapshot) -> AppliedRevisions {
    AppliedRevisions {
        provider_env_revision: e.provider_env_revision.clone(),
        ..AppliedRevisions::default()
    }
}

fn config_content(c: &SandboxConfigSnapshot) -> Vec<u8> {
    let mut c = c.clone();
    c.built_at = None;
    c.lifecycle = 0;
    framed(c.encode_to_vec())
}

fn env_content(e: &ProviderEnvironmentSnapshot) -> Vec<u8> {
    let mut e = e.clone();
    e.built_at = None;
    framed(e.encode_to_vec())
}

/// Length-prefixed, so the boundary between the two halves cannot shift unnoticed.
fn framed(bytes: Vec<u8>) -> Vec<u8> {
    let mut out = (bytes.len() as u64).to_be_bytes().to_vec();
    out.extend(bytes);
    out
}

/// Fingerprint of one component snapshot, for `DUPLICATE` detection when the gateway sent none.
pub fn config_fingerprint(c: &SandboxConfigSnapshot) -> String {
    hex::encode(Sha256::digest(config_content(c)))
}

/// See [`config_fingerprint`].
pub fn env_fingerprint(e: &ProviderEnvironmentSnapshot) -> String {
    hex::encode(Sha256::digest(env_content(e)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use openshell_proto::v1::{EnvValue, SettingValue as WireSettingValue};

    pub(crate) fn sample(policy_revision: u64, env_revision: &str) -> DesiredConfig {
        let policy = openshell_core::parse_and_validate("version: 1").unwrap();
        DesiredConfig::new(
            SandboxConfigSnapshot {
                sandbox_id: "sb-1".into(),
                policy_json: policy.canonical_json(),
                policy_hash: policy.policy_hash(),
                policy_revision,
                provider_env_revision: env_revision.into(),
                settings: vec![Setting {
                    key: FAILURE_MODE_KEY.into(),
                    value: Some(WireSettingValue {
                        kind: Some(setting_value::Kind::StringValue("retain_last_valid".into())),
                    }),
                    scope: SettingScope::Default as i32,
                }],
                ..Default::default()
            },
            ProviderEnvironmentSnapshot {
                sandbox_id: "sb-1".into(),
                provider_env_revision: env_revision.into(),
                values: vec![
                    EnvValue {
                        name: "GITHUB_TOKEN".into(),
                        value: "ghp_secretvalue42".into(),
                        class: WireValueClass::Credential as i32,
                        provider: "github".into(),
                    },
                    EnvValue {
                        name: "GITHUB_HOST".into(),
                        value: "github.example".into(),
                        class: WireValueClass::NonSecret as i32,
                        provider: "github".into(),
                    },
                ],
                ..Default::default()
            },
        )
    }

    #[test]
    fn fingerprint_ignores_build_time_and_lifecycle_only() {
        let a = sample(1, "e1");
        let mut b = a.clone();
        b.sandbox_config.built_at = Some(prost_types::Timestamp {
            seconds: 5,
            nanos: 0,
        });
        b.sandbox_config.lifecycle = 2;
        b.provider_env.built_at = Some(prost_types::Timestamp {
            seconds: 9,
            nanos: 0,
        });
        assert_eq!(a.fingerprint(), b.fingerprint());
        let mut c = a.clone();
        c.provider_env.values[0].value = "other".into();
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_ne!(a.fingerprint(), sample(2, "e1").fingerprint());
    }

    #[test]
    fn revisions_and_pairing() {
        let d = sample(3, "e7");
        let r = d.revisions();
        assert_eq!(r.policy_revision, 3);
        assert_eq!(r.provider_env_revision, "e7");
        assert!(d.pair_matches());
        let mut d2 = d.clone();
        d2.provider_env.provider_env_revision = "e8".into();
        assert!(!d2.pair_matches());
    }

    #[test]
    fn debug_hides_values() {
        let d = sample(1, "e1");
        let out = format!("{d:?}");
        assert!(!out.contains("ghp_secretvalue42"), "{out}");
        assert!(!out.contains("github.example"), "{out}");
        assert!(out.contains("GITHUB_TOKEN"));
        let values = d.provider_values();
        assert!(!format!("{values:?}").contains("ghp_secretvalue42"));
        assert_eq!(values[0].1.expose(), "ghp_secretvalue42");
    }

    #[test]
    fn failure_mode_reads_setting() {
        let mut d = sample(1, "e1");
        assert_eq!(d.failure_mode(), FailureMode::RetainLastValid);
        d.sandbox_config.settings[0].value = Some(WireSettingValue {
            kind: Some(setting_value::Kind::StringValue("fail_closed".into())),
        });
        assert_eq!(d.failure_mode(), FailureMode::FailClosed);
        // Without the key, upstream's default: fail closed.
        d.sandbox_config.settings.clear();
        assert_eq!(d.failure_mode(), FailureMode::FailClosed);
    }
}
