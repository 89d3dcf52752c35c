//! A policy file on the supervisor's own disk (`--policy-file`).
//!
//! With a gateway, an explicitly given local policy keeps precedence: the gateway's policy is
//! set aside while its settings and provider environment still apply, and gateway policy
//! changes are answered `RETAINED_LOCAL_OVERRIDE` so operators learn they are not in effect.
//! Without a gateway (standalone) the file is the whole configuration.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use openshell_core::policy::{PolicyError, SandboxPolicy, parse_and_validate};
use openshell_core::settings::{SettingValue as CoreSettingValue, registry};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use sha2::{Digest, Sha256};

use crate::desired::{DesiredConfig, SharedPolicy, config_revisions};

/// Why a local policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LocalPolicyError {
    #[error("cannot read policy file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy file {path}: {error}")]
    Invalid { path: PathBuf, error: PolicyError },
}

/// A validated local policy.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalPolicy {
    path: PathBuf,
    policy: SandboxPolicy,
    /// The policy as a sandbox config carries it, converted once and shared by clones.
    message: Arc<SharedPolicy>,
    hash: String,
}

impl LocalPolicy {
    pub fn load(path: &Path) -> Result<Self, LocalPolicyError> {
        let text = fs::read_to_string(path).map_err(|source| LocalPolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, LocalPolicyError> {
        let policy = parse_and_validate(text).map_err(|error| LocalPolicyError::Invalid {
            path: path.to_path_buf(),
            error,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            message: Arc::new(SharedPolicy::from_message(sb::SandboxPolicy::from(&policy))),
            hash: policy.policy_hash(),
            policy,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// Hash of the canonical form, as the gateway would compute it.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The gateway's configuration with this policy in place of the gateway's.
    pub fn overlay(&self, gateway: &DesiredConfig) -> DesiredConfig {
        let mut desired = gateway.clone();
        desired.set_policy(Some(self.message.clone()));
        let config = &mut desired.sandbox_config;
        config.policy_hash = self.hash.clone();
        config.policy_source = sb::PolicySource::Unspecified as i32;
        // Upstream's fields too: a revision left in `version` would be read as the local
        // policy's (see `config_revisions`).
        config.policy_revision = 0;
        config.version = 0;
        config.global_policy_revision = 0;
        config.global_policy_version = 0;
        desired.policy_is_local = true;
        desired
    }

    /// The whole configuration of a standalone supervisor: this policy, registry defaults for
    /// every setting, and no providers.
    pub fn standalone_config(&self, sandbox_id: &str) -> DesiredConfig {
        let settings = registry()
            .iter()
            .map(|def| {
                let setting = sb::EffectiveSetting {
                    value: Some(wire_value(def.default_value())),
                    scope: sb::SettingScope::Default as i32,
                };
                (def.key.to_string(), setting)
            })
            .collect();
        let mut desired = DesiredConfig::from_parts(
            sb::GetSandboxConfigResponse {
                sandbox_id: sandbox_id.to_string(),
                policy_hash: self.hash.clone(),
                settings,
                ..sb::GetSandboxConfigResponse::default()
            },
            Some(self.message.clone()),
            pb::GetSandboxProviderEnvironmentResponse {
                sandbox_id: sandbox_id.to_string(),
                ..pb::GetSandboxProviderEnvironmentResponse::default()
            },
        );
        desired.policy_is_local = true;
        desired
    }
}

fn wire_value(value: CoreSettingValue) -> sb::SettingValue {
    let value = match value {
        CoreSettingValue::Bool(b) => sb::setting_value::Value::BoolValue(b),
        CoreSettingValue::Int(i) => sb::setting_value::Value::IntValue(i),
        CoreSettingValue::String(s) => sb::setting_value::Value::StringValue(s),
    };
    sb::SettingValue { value: Some(value) }
}

/// Which gateway policy a snapshot carries: enough to notice that it changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GatewayPolicyId {
    pub policy_hash: String,
    pub policy_revision: u64,
    pub global_policy_revision: u64,
}

impl GatewayPolicyId {
    pub fn of(config: &sb::GetSandboxConfigResponse) -> Self {
        let revisions = config_revisions(config);
        Self {
            policy_hash: revisions.policy_hash,
            policy_revision: revisions.policy_revision,
            global_policy_revision: revisions.global_policy_revision,
        }
    }

    /// The gateway has no policy for the sandbox at all.
    pub fn is_empty(&self) -> bool {
        self.policy_hash.is_empty() && self.policy_revision == 0 && self.global_policy_revision == 0
    }
}

/// Whether a gateway snapshot brings a policy that the local override keeps out of effect:
/// the gateway's policy differs from the one last seen, or this is the first snapshot and the
/// gateway has a policy at all. Changes to settings or provider environment alone do not count.
pub fn gateway_policy_retained(
    previous: Option<&GatewayPolicyId>,
    current: &GatewayPolicyId,
) -> bool {
    match previous {
        Some(previous) => previous != current,
        None => !current.is_empty(),
    }
}

/// Notices edits to a policy file by modification time and content hash.
#[derive(Debug)]
pub struct PolicyFileWatcher {
    path: PathBuf,
    seen: Option<Seen>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    modified: Option<SystemTime>,
    len: u64,
    hash: [u8; 32],
}

/// What one check of the file found.
#[derive(Debug)]
pub enum WatchEvent {
    Unchanged,
    /// The content changed (or this was the first check): the new policy, or why it is unusable.
    Changed(Result<LocalPolicy, LocalPolicyError>),
    /// The file could not be read (for example mid-way through an editor's save); the next
    /// check tries again.
    Unreadable(LocalPolicyError),
}

impl PolicyFileWatcher {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            seen: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn check(&mut self) -> WatchEvent {
        let read_error = |source| {
            WatchEvent::Unreadable(LocalPolicyError::Read {
                path: self.path.clone(),
                source,
            })
        };
        let meta = match fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(err) => return read_error(err),
        };
        let modified = meta.modified().ok();
        if let Some(seen) = &self.seen
            && seen.modified.is_some()
            && seen.modified == modified
            && seen.len == meta.len()
        {
            return WatchEvent::Unchanged;
        }
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(err) => return read_error(err),
        };
        let hash: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let unchanged = self.seen.as_ref().is_some_and(|s| s.hash == hash);
        self.seen = Some(Seen {
            modified,
            len: meta.len(),
            hash,
        });
        if unchanged {
            return WatchEvent::Unchanged;
        }
        WatchEvent::Changed(LocalPolicy::parse(&self.path, &text))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::desired::tests::sample;

    const LOCAL: &str = "version: 1\nnetwork_policies:\n  local:\n    endpoints:\n      - host: api.local.example\n        port: 443\n";

    #[test]
    fn retained_only_when_gateway_policy_changes() {
        let a = GatewayPolicyId::of(&sample(1, "e1").sandbox_config);
        let b = GatewayPolicyId::of(&sample(2, "e1").sandbox_config);
        assert!(
            gateway_policy_retained(None, &a),
            "first sight of a gateway policy"
        );
        assert!(!gateway_policy_retained(None, &GatewayPolicyId::default()));
        assert!(!gateway_policy_retained(Some(&a), &a), "settings/env only");
        assert!(gateway_policy_retained(Some(&a), &b));
        let mut global = a.clone();
        global.global_policy_revision = 4;
        assert!(gateway_policy_retained(Some(&a), &global));
        let mut rehashed = a.clone();
        rehashed.policy_hash = "other".into();
        assert!(gateway_policy_retained(Some(&a), &rehashed));
    }

    #[test]
    fn overlay_replaces_policy_keeps_rest() {
        let local = LocalPolicy::parse(Path::new("p.yaml"), LOCAL).unwrap();
        let gateway = sample(5, "e3");
        let d = local.overlay(&gateway);
        assert!(d.policy_is_local);
        assert_eq!(d.policy_source_name(), "local");
        assert_eq!(d.sandbox_config.policy_hash, local.hash());
        let policy = d.policy().unwrap();
        assert_eq!(
            policy.network_policies["local"].endpoints[0].host,
            "api.local.example"
        );
        assert_eq!(d.revisions().policy_revision, 0);
        assert_eq!(d.provider_env, gateway.provider_env);
        assert_eq!(d.sandbox_config.settings, gateway.sandbox_config.settings);
        crate::file_applier::stage::validate(&d, &mut Default::default()).unwrap();
    }

    #[test]
    fn standalone_config_is_valid_and_complete() {
        let local = LocalPolicy::parse(Path::new("p.yaml"), LOCAL).unwrap();
        let d = local.standalone_config("local");
        crate::file_applier::stage::validate(&d, &mut Default::default()).unwrap();
        assert_eq!(d.sandbox_config.settings.len(), registry().len());
    }

    #[test]
    fn watcher_reports_changes_and_invalid_edits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        fs::write(&path, LOCAL).unwrap();
        let mut w = PolicyFileWatcher::new(&path);
        assert!(matches!(w.check(), WatchEvent::Changed(Ok(_))));
        assert!(matches!(w.check(), WatchEvent::Unchanged));

        fs::write(&path, "version: 1\nbogus: true\n").unwrap();
        match w.check() {
            WatchEvent::Changed(Err(LocalPolicyError::Invalid { error, .. })) => {
                assert!(error.to_string().contains("bogus"), "{error}");
            }
            other => panic!("expected invalid, got {other:?}"),
        }
        assert!(matches!(w.check(), WatchEvent::Unchanged));

        // Same content written again is not a change.
        fs::write(&path, "version: 1\nbogus: true\n").unwrap();
        assert!(matches!(w.check(), WatchEvent::Unchanged));

        fs::remove_file(&path).unwrap();
        assert!(matches!(w.check(), WatchEvent::Unreadable(_)));
        fs::write(&path, "version: 1\n").unwrap();
        assert!(matches!(w.check(), WatchEvent::Changed(Ok(_))));
    }
}
