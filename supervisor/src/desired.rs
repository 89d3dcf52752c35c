//! The configuration a supervisor should have active: a `sandbox_config` snapshot together with
//! the `provider_environment` snapshot it expects.
//!
//! Both halves are the gateway's wire types, kept as they arrived, so what is written to the
//! state directory and what is reported back is exactly what the gateway built.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openshell_core::ProviderValue;
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use openshell_proto::v1::AppliedRevisions;
use prost::Message;
use sha2::{Digest, Sha256};

/// Setting that decides between last-known-good and quarantine after a failed apply.
pub const FAILURE_MODE_KEY: &str = "policy_validation_failure_mode";
/// Setting that overrides the `--reload-signal` flag when an operator sets it at some scope.
pub const RELOAD_SIGNAL_KEY: &str = "reload_signal";

/// Milliseconds since the epoch, the unit of the gateway's expiry times.
pub(crate) fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// What a failed apply leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// Keep the last configuration that applied.
    RetainLastValid,
    /// Quarantine the sandbox: deny all network access until a configuration applies.
    FailClosed,
}

/// A policy message decoded once and shared by every configuration that carries the same
/// bytes: a supervisor's updates mostly change settings or provider values, and each would
/// otherwise decode, hash and free a copy of the whole policy tree.
#[derive(Debug)]
pub struct SharedPolicy {
    message: sb::SandboxPolicy,
    /// SHA-256 of the message's encoding as it arrived (or as prost writes it, for a message
    /// built here). Equal digests mean equal bytes and so equal messages; a message may have
    /// more than one digest (bytes with fields this build does not know), which only costs
    /// an extra check.
    digest: [u8; 32],
}

impl SharedPolicy {
    pub fn from_message(message: sb::SandboxPolicy) -> Self {
        let digest = Sha256::digest(message.encode_to_vec()).into();
        Self { message, digest }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, prost::DecodeError> {
        Ok(Self {
            message: sb::SandboxPolicy::decode(bytes)?,
            digest: Sha256::digest(bytes).into(),
        })
    }

    pub fn message(&self) -> &sb::SandboxPolicy {
        &self.message
    }

    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
}

impl PartialEq for SharedPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest || self.message == other.message
    }
}

/// A complete desired configuration. Cloning is cheap: the policy, most of a configuration,
/// is shared.
///
/// `Debug` shows revisions and value names, never provider values.
#[derive(Clone, Default, PartialEq)]
pub struct DesiredConfig {
    /// Upstream's message without its policy, which [`DesiredConfig::policy`] holds: its
    /// `policy` field is always None here.
    pub sandbox_config: sb::GetSandboxConfigResponse,
    policy: Option<Arc<SharedPolicy>>,
    pub provider_env: pb::GetSandboxProviderEnvironmentResponse,
    /// The policy is the local policy file's, not the gateway's. Kept
    /// here because the wire's `policy_source` (upstream's enum) has no value for it.
    pub policy_is_local: bool,
}

impl DesiredConfig {
    /// The configuration of a whole `sandbox_config` answer, its policy taken out to be held
    /// apart.
    pub fn new(
        mut sandbox_config: sb::GetSandboxConfigResponse,
        provider_env: pb::GetSandboxProviderEnvironmentResponse,
    ) -> Self {
        let policy = sandbox_config
            .policy
            .take()
            .map(|message| Arc::new(SharedPolicy::from_message(message)));
        Self::from_parts(sandbox_config, policy, provider_env)
    }

    /// The configuration of a `sandbox_config` whose policy is already held apart; a policy
    /// left in `sandbox_config` is dropped.
    pub fn from_parts(
        mut sandbox_config: sb::GetSandboxConfigResponse,
        policy: Option<Arc<SharedPolicy>>,
        provider_env: pb::GetSandboxProviderEnvironmentResponse,
    ) -> Self {
        sandbox_config.policy = None;
        Self {
            sandbox_config,
            policy,
            provider_env,
            policy_is_local: false,
        }
    }

    /// The policy message, if the configuration has one.
    pub fn policy(&self) -> Option<&sb::SandboxPolicy> {
        debug_assert!(
            self.sandbox_config.policy.is_none(),
            "the policy is held apart; use set_policy"
        );
        self.policy.as_deref().map(SharedPolicy::message)
    }

    pub fn shared_policy(&self) -> Option<&Arc<SharedPolicy>> {
        self.policy.as_ref()
    }

    pub fn set_policy(&mut self, policy: Option<Arc<SharedPolicy>>) {
        self.policy = policy;
    }

    /// The whole `sandbox_config` answer, policy included: a copy, for what is written down.
    pub fn to_response(&self) -> sb::GetSandboxConfigResponse {
        sb::GetSandboxConfigResponse {
            policy: self.policy().cloned(),
            ..self.sandbox_config.clone()
        }
    }

    /// The revisions this configuration stands for, as results and reports carry them.
    pub fn revisions(&self) -> AppliedRevisions {
        AppliedRevisions {
            provider_env_revision: env_revision(&self.provider_env),
            ..config_revisions(&self.sandbox_config)
        }
    }

    /// True when the provider environment is the one the sandbox config was built against;
    /// only such a pair may be activated.
    pub fn pair_matches(&self) -> bool {
        pair_matches(&self.sandbox_config, &self.provider_env)
    }

    /// Where the policy comes from, as `revisions.json` and the logs name it.
    pub fn policy_source_name(&self) -> &'static str {
        if self.policy_is_local {
            return "local";
        }
        match self.sandbox_config.policy_source() {
            sb::PolicySource::Sandbox => "sandbox",
            sb::PolicySource::Global => "global",
            sb::PolicySource::Unspecified => "unspecified",
        }
    }

    /// Lowercase hex SHA-256 over both snapshots without their build times (the policy by
    /// its digest), so a rebuild of unchanged content compares equal.
    ///
    /// It covers provider values, so it is compared in memory only: never logged or sent.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        hash_content(&mut hasher, &self.sandbox_config, CONFIG_BUILT_AT_FIELD);
        match &self.policy {
            Some(policy) => {
                hasher.update([1]);
                hasher.update(policy.digest());
            }
            None => hasher.update([0]),
        }
        hash_content(&mut hasher, &self.provider_env, ENV_BUILT_AT_FIELD);
        hasher.update([u8::from(self.policy_is_local)]);
        digest_hex(hasher)
    }

    pub fn setting(&self, key: &str) -> Option<&sb::EffectiveSetting> {
        self.sandbox_config.settings.get(key)
    }

    /// The string value of a string- or enum-typed setting, with whether an operator set it
    /// (as opposed to the registry default being in effect).
    pub fn string_setting(&self, key: &str) -> Option<(&str, bool)> {
        let setting = self.setting(key)?;
        match setting.value.as_ref()?.value.as_ref()? {
            sb::setting_value::Value::StringValue(value) => {
                let explicit = !matches!(
                    setting.scope(),
                    sb::SettingScope::Default | sb::SettingScope::Unspecified
                );
                Some((value.as_str(), explicit))
            }
            _ => None,
        }
    }

    pub fn failure_mode(&self) -> FailureMode {
        // Upstream's gateway states the mode in a field of its own as well; a snapshot with
        // neither (an older gateway) gets the registry's default, the one the gateway applies.
        let top_level = &self.sandbox_config.policy_validation_failure_mode;
        let mode = match self.string_setting(FAILURE_MODE_KEY) {
            Some((value, _)) => Some(value.to_owned()),
            None if !top_level.is_empty() => Some(top_level.clone()),
            None => openshell_core::settings::lookup(FAILURE_MODE_KEY)
                .map(|def| def.default_value())
                .and_then(|value| value.as_str().map(str::to_owned)),
        };
        match mode.as_deref() {
            Some("retain_last_valid") => FailureMode::RetainLastValid,
            _ => FailureMode::FailClosed,
        }
    }

    /// Every provider value by name, credentials wrapped so they cannot be printed by accident.
    /// A value whose class is unknown (no source given, or a class this supervisor does not
    /// know) is treated as a credential.
    pub fn provider_values(&self) -> Vec<(String, ProviderValue)> {
        self.provider_env
            .environment
            .iter()
            .map(|(name, value)| {
                let value = match self.value_class(name) {
                    pb::ValueClass::NonSecret => ProviderValue::Plain(value.clone()),
                    _ => ProviderValue::Credential(value.clone().into()),
                };
                (name.clone(), value)
            })
            .collect()
    }

    /// The class of the provider value `name`; [`pb::ValueClass::Unspecified`] when unknown.
    pub fn value_class(&self, name: &str) -> pb::ValueClass {
        self.provider_env
            .sources
            .get(name)
            .map_or(pb::ValueClass::Unspecified, |source| source.class())
    }

    /// Credentials still in the environment whose expiry has passed at `now_ms`.
    pub fn expired_credentials(&self, now_ms: i64) -> Vec<String> {
        let env = &self.provider_env;
        env.credential_expires_at_ms
            .iter()
            .filter(|(name, at)| **at <= now_ms && env.environment.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// When the next credential still in the environment expires (ms since the epoch).
    pub fn next_credential_expiry(&self) -> Option<i64> {
        let env = &self.provider_env;
        env.credential_expires_at_ms
            .iter()
            .filter(|(name, _)| env.environment.contains_key(*name))
            .map(|(_, at)| *at)
            .min()
    }

    /// This configuration without the credentials expired at `now_ms`, which the workload
    /// must never see; None when none has expired.
    pub fn without_expired_credentials(&self, now_ms: i64) -> Option<DesiredConfig> {
        let expired = self.expired_credentials(now_ms);
        if expired.is_empty() {
            return None;
        }
        let mut kept = self.clone();
        for name in &expired {
            kept.provider_env.environment.remove(name);
        }
        Some(kept)
    }

    /// Every provider value in plain text, for masking reasons; never for output.
    pub fn sensitive_values(&self) -> impl Iterator<Item = &str> {
        self.provider_env.environment.values().map(String::as_str)
    }
}

impl fmt::Debug for DesiredConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.sandbox_config;
        let names: Vec<&str> = self
            .provider_env
            .environment
            .keys()
            .map(String::as_str)
            .collect();
        f.debug_struct("DesiredConfig")
            .field("sandbox_id", &c.sandbox_id)
            .field("policy_source", &self.policy_source_name())
            .field("revisions", &self.revisions())
            .field("has_policy", &self.policy.is_some())
            .field("settings", &c.settings.len())
            .field("provider_value_names", &names)
            .finish()
    }
}

/// Revisions of a `sandbox_config` on its own: the provider env revision is the one it expects.
///
/// This project's gateway states them in extension fields. An upstream gateway sends none of
/// those, so each absent one is derived from upstream's own fields: the policy revision is
/// `version`, the global policy revision `global_policy_version`, the provider env revision the
/// decimal `provider_env_revision` (as [`env_revision`] reads the environment's), and the
/// settings revisions stay 0. Reports to such a gateway then name the `version` it served.
/// For this project's gateway the derived values are the stated ones whenever those are absent
/// (its `version` is the policy revision, cut to 32 bits), so reading field by field is safe.
pub fn config_revisions(c: &sb::GetSandboxConfigResponse) -> AppliedRevisions {
    let or_upstream = |ours: u64, upstream: u32| {
        if ours == 0 { u64::from(upstream) } else { ours }
    };
    AppliedRevisions {
        policy_revision: or_upstream(c.policy_revision, c.version),
        policy_hash: c.policy_hash.clone(),
        global_policy_revision: or_upstream(c.global_policy_revision, c.global_policy_version),
        global_settings_revision: c.global_settings_revision,
        workspace_settings_revision: c.workspace_settings_revision,
        sandbox_settings_revision: c.sandbox_settings_revision,
        provider_env_revision: revision_text(&c.provider_env_fingerprint, c.provider_env_revision),
    }
}

/// The revision of a `provider_environment`: the gateway's fingerprint, or (from an upstream
/// gateway, which has none) its `provider_env_revision` in decimal. See [`config_revisions`].
pub fn env_revision(e: &pb::GetSandboxProviderEnvironmentResponse) -> String {
    revision_text(&e.provider_env_fingerprint, e.provider_env_revision)
}

fn revision_text(fingerprint: &str, number: u64) -> String {
    if fingerprint.is_empty() {
        number.to_string()
    } else {
        fingerprint.to_string()
    }
}

/// Whether `c` comes from an upstream gateway: it sets none of this project's extension
/// fields. Its `policy_hash` is then upstream's hash of the policy message, not the hash of
/// the canonical JSON this supervisor can check.
pub fn from_upstream_gateway(c: &sb::GetSandboxConfigResponse) -> bool {
    c.sandbox_id.is_empty() && c.policy_revision == 0 && c.provider_env_fingerprint.is_empty()
}

/// True when `e` is the provider environment `c` was built against.
pub fn pair_matches(
    c: &sb::GetSandboxConfigResponse,
    e: &pb::GetSandboxProviderEnvironmentResponse,
) -> bool {
    config_revisions(c).provider_env_revision == env_revision(e)
}

/// Revisions of a `provider_environment` on its own.
pub fn env_revisions(e: &pb::GetSandboxProviderEnvironmentResponse) -> AppliedRevisions {
    AppliedRevisions {
        provider_env_revision: env_revision(e),
        ..AppliedRevisions::default()
    }
}

/// Field numbers of `built_at` in `GetSandboxConfigResponse` and
/// `GetSandboxProviderEnvironmentResponse`.
const CONFIG_BUILT_AT_FIELD: u64 = 107;
const ENV_BUILT_AT_FIELD: u64 = 105;

/// Hashes a message's content: its encoding without its top-level field `built_at_field`,
/// after the length of what is hashed, so the boundary between two contents hashed one
/// after the other cannot shift unnoticed. The digest is that of the encoding of the
/// message with the field unset, made without copying the message or its encoding (the
/// policy is most of a snapshot, and this runs on every update a supervisor receives).
///
/// Maps of the wire types are `BTreeMap`s (see the proto crate's build), so equal content
/// encodes to equal bytes. A `sandbox_config` hashes alike as upstream's message or as the
/// pushed snapshot: the two share one wire shape.
fn hash_content(hasher: &mut Sha256, message: &impl Message, built_at_field: u64) {
    hash_encoding_without(hasher, &message.encode_to_vec(), built_at_field);
}

/// See [`hash_content`]; bytes that are not prost's encoding of a message are hashed whole.
fn hash_encoding_without(hasher: &mut Sha256, encoded: &[u8], built_at_field: u64) {
    let kept = || {
        let mut rest = encoded;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let field_start = rest;
            // `None` here means the bytes are not prost's encoding of a message: nothing is
            // stripped then (see below).
            let number = skip_field(&mut rest);
            Some((number, &field_start[..field_start.len() - rest.len()]))
        })
        .filter(|(number, _)| *number != Some(built_at_field))
    };
    if kept().any(|(number, _)| number.is_none()) {
        hasher.update((encoded.len() as u64).to_be_bytes());
        hasher.update(encoded);
        return;
    }
    let length: usize = kept().map(|(_, field)| field.len()).sum();
    hasher.update((length as u64).to_be_bytes());
    for (_, field) in kept() {
        hasher.update(field);
    }
}

/// Moves `rest` past one field; returns its number, or None (and `rest` emptied) when `rest`
/// does not start with a whole field.
fn skip_field(rest: &mut &[u8]) -> Option<u64> {
    let number = skip_whole_field(rest);
    if number.is_none() {
        *rest = &[];
    }
    number
}

fn skip_whole_field(rest: &mut &[u8]) -> Option<u64> {
    let key = prost::encoding::decode_varint(rest).ok()?;
    let length = match prost::encoding::WireType::try_from(key & 0x7).ok()? {
        prost::encoding::WireType::Varint => {
            prost::encoding::decode_varint(rest).ok()?;
            0
        }
        prost::encoding::WireType::SixtyFourBit => 8,
        prost::encoding::WireType::ThirtyTwoBit => 4,
        prost::encoding::WireType::LengthDelimited => {
            usize::try_from(prost::encoding::decode_varint(rest).ok()?).ok()?
        }
        // proto3 messages never hold groups.
        prost::encoding::WireType::StartGroup | prost::encoding::WireType::EndGroup => {
            return None;
        }
    };
    *rest = rest.get(length..)?;
    Some(key >> 3)
}

/// A finished digest in lower-case hex.
fn digest_hex(hasher: Sha256) -> String {
    let mut text = [0u8; 64];
    // 32 bytes always fit 64 hex digits, which are ASCII; the fallbacks only keep this total.
    if hex::encode_to_slice(hasher.finalize(), &mut text).is_err() {
        return String::new();
    }
    String::from_utf8(text.to_vec()).unwrap_or_default()
}

/// Fingerprint of one component snapshot, for `DUPLICATE` detection when the gateway sent none.
/// A pushed snapshot has upstream's wire shape, so its bytes are those of the answer it
/// carries, and nothing needs decoding.
pub fn config_fingerprint(c: &pb::SandboxConfigSnapshot) -> String {
    let mut hasher = Sha256::new();
    hash_content(&mut hasher, c, CONFIG_BUILT_AT_FIELD);
    digest_hex(hasher)
}

/// See [`config_fingerprint`].
pub fn env_fingerprint(e: &pb::GetSandboxProviderEnvironmentResponse) -> String {
    let mut hasher = Sha256::new();
    hash_content(&mut hasher, e, ENV_BUILT_AT_FIELD);
    digest_hex(hasher)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use openshell_core::SandboxPolicy;

    /// Puts `policy` into `d`'s sandbox config the way the gateway does: the message and the
    /// hash of the document's canonical JSON.
    pub(crate) fn set_policy(d: &mut DesiredConfig, policy: &SandboxPolicy) {
        d.set_policy(Some(Arc::new(SharedPolicy::from_message(
            sb::SandboxPolicy::from(policy),
        ))));
        d.sandbox_config.policy_hash = policy.policy_hash();
    }

    /// Puts `message` into `d` as its policy, as a snapshot carrying it would.
    pub(crate) fn set_message(d: &mut DesiredConfig, message: sb::SandboxPolicy) {
        d.set_policy(Some(Arc::new(SharedPolicy::from_message(message))));
    }

    /// A policy message of an unsupported schema version: it converts, and validation
    /// refuses it.
    pub(crate) fn version_9_policy() -> sb::SandboxPolicy {
        sb::SandboxPolicy {
            version: 9,
            ..sb::SandboxPolicy::default()
        }
    }

    /// A policy message no document can be read from: upstream's provenance flag
    /// `advisor_proposed` is never part of a policy document.
    pub(crate) fn unconvertible_policy() -> sb::SandboxPolicy {
        let endpoint = sb::NetworkEndpoint {
            host: "api.example.com".into(),
            port: 443,
            advisor_proposed: true,
            ..sb::NetworkEndpoint::default()
        };
        let rule = sb::NetworkPolicyRule {
            endpoints: vec![endpoint],
            ..sb::NetworkPolicyRule::default()
        };
        sb::SandboxPolicy {
            version: 1,
            network_policies: [("proposed".to_string(), rule)].into(),
            ..sb::SandboxPolicy::default()
        }
    }

    fn string_setting(value: &str, scope: sb::SettingScope) -> sb::EffectiveSetting {
        sb::EffectiveSetting {
            value: Some(sb::SettingValue {
                value: Some(sb::setting_value::Value::StringValue(value.into())),
            }),
            scope: scope as i32,
        }
    }

    fn source(class: pb::ValueClass, provider: &str) -> pb::EnvValueSource {
        pb::EnvValueSource {
            class: class as i32,
            provider: provider.into(),
        }
    }

    pub(crate) fn sample(policy_revision: u64, env_revision: &str) -> DesiredConfig {
        let policy = openshell_core::parse_and_validate("version: 1").unwrap();
        let mut d = DesiredConfig::new(
            sb::GetSandboxConfigResponse {
                sandbox_id: "sb-1".into(),
                version: u32::try_from(policy_revision).unwrap_or(u32::MAX),
                policy_revision,
                provider_env_fingerprint: env_revision.into(),
                settings: [(
                    FAILURE_MODE_KEY.to_string(),
                    string_setting("retain_last_valid", sb::SettingScope::Default),
                )]
                .into(),
                ..Default::default()
            },
            pb::GetSandboxProviderEnvironmentResponse {
                sandbox_id: "sb-1".into(),
                provider_env_fingerprint: env_revision.into(),
                environment: [
                    ("GITHUB_TOKEN".to_string(), "ghp_secretvalue42".to_string()),
                    ("GITHUB_HOST".to_string(), "github.example".to_string()),
                ]
                .into(),
                sources: [
                    (
                        "GITHUB_TOKEN".to_string(),
                        source(pb::ValueClass::Credential, "github"),
                    ),
                    (
                        "GITHUB_HOST".to_string(),
                        source(pb::ValueClass::NonSecret, "github"),
                    ),
                ]
                .into(),
                ..Default::default()
            },
        );
        set_policy(&mut d, &policy);
        d
    }

    /// `d` as built at these times (seconds) of its two snapshots.
    fn built_at(mut d: DesiredConfig, config_seconds: i64, env_seconds: i64) -> DesiredConfig {
        let at = |seconds| Some(prost_types::Timestamp { seconds, nanos: 7 });
        d.sandbox_config.built_at = at(config_seconds);
        d.provider_env.built_at = at(env_seconds);
        d
    }

    #[test]
    fn fingerprint_ignores_build_time_only() {
        let a = sample(1, "e1");
        let b = built_at(a.clone(), 5, 9);
        assert_eq!(a.fingerprint(), b.fingerprint());
        let mut c = a.clone();
        c.provider_env
            .environment
            .insert("GITHUB_TOKEN".into(), "other".into());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_ne!(a.fingerprint(), sample(2, "e1").fingerprint());
        let mut local = a.clone();
        local.policy_is_local = true;
        assert_ne!(a.fingerprint(), local.fingerprint());
    }

    /// What is hashed of a message: the length, then the bytes, of its encoding with
    /// `built_at` unset.
    fn framed_digest(encoded: &[u8]) -> Vec<u8> {
        let mut hasher = Sha256::new();
        hasher.update((encoded.len() as u64).to_be_bytes());
        hasher.update(encoded);
        hasher.finalize().to_vec()
    }

    fn content_digest(message: &impl Message, built_at_field: u64) -> Vec<u8> {
        let mut hasher = Sha256::new();
        hash_content(&mut hasher, message, built_at_field);
        hasher.finalize().to_vec()
    }

    /// The fingerprint skips `built_at` in the encoding instead of encoding a copy without
    /// it: both must hash the same bytes, or a rebuild would look like a change.
    #[test]
    fn skipping_the_build_time_hashes_the_encoding_without_it() {
        let d = built_at(sample(4, "e2"), 1_700_000_000, 1_700_000_001);
        let mut unset = d.clone();
        unset.sandbox_config.built_at = None;
        unset.provider_env.built_at = None;
        assert_eq!(
            content_digest(&d.sandbox_config, CONFIG_BUILT_AT_FIELD),
            framed_digest(&unset.sandbox_config.encode_to_vec())
        );
        assert_eq!(
            content_digest(&d.provider_env, ENV_BUILT_AT_FIELD),
            framed_digest(&unset.provider_env.encode_to_vec())
        );
        assert!(
            d.sandbox_config.encode_to_vec().len() > unset.sandbox_config.encode_to_vec().len(),
            "the sample must carry a build time to skip"
        );
        assert_eq!(
            config_fingerprint(&pb::SandboxConfigSnapshot::from_response(&d.sandbox_config)),
            hex::encode(framed_digest(&unset.sandbox_config.encode_to_vec())),
            "a pushed snapshot without a policy hashes as upstream's message"
        );
        // Bytes that are not a message's encoding are hashed whole.
        for malformed in [vec![0x0b, 0x01], vec![0x0a, 0x05, 0x01]] {
            let mut hasher = Sha256::new();
            hash_encoding_without(&mut hasher, &malformed, 1);
            assert_eq!(hasher.finalize().to_vec(), framed_digest(&malformed));
        }
    }

    /// A policy has one digest whether it was decoded from prost's bytes or built here, so
    /// the same configuration fingerprints alike by push or by poll; the fingerprint follows
    /// the policy.
    #[test]
    fn a_policy_digests_alike_decoded_or_built() {
        let d = sample(1, "e1");
        let message = d.policy().unwrap().clone();
        let decoded = SharedPolicy::decode(&message.encode_to_vec()).unwrap();
        let built = SharedPolicy::from_message(message.clone());
        assert_eq!(decoded.digest(), built.digest());
        assert_eq!(decoded, built);
        let mut pushed = d.clone();
        pushed.set_policy(Some(Arc::new(decoded)));
        assert_eq!(pushed.fingerprint(), d.fingerprint());

        let mut other = d.clone();
        set_message(&mut other, version_9_policy());
        assert_ne!(other.fingerprint(), d.fingerprint());
        let mut none = d.clone();
        none.set_policy(None);
        assert_ne!(none.fingerprint(), d.fingerprint());
        // The whole answer carries the policy again.
        assert_eq!(d.to_response().policy, Some(message));
        assert_eq!(
            DesiredConfig::new(d.to_response(), d.provider_env.clone()),
            d
        );
    }

    #[test]
    fn revisions_and_pairing() {
        let d = sample(3, "e7");
        let r = d.revisions();
        assert_eq!(r.policy_revision, 3);
        assert_eq!(r.provider_env_revision, "e7");
        assert!(d.pair_matches());
        let mut d2 = d.clone();
        d2.provider_env.provider_env_fingerprint = "e8".into();
        assert!(!d2.pair_matches());
    }

    /// An upstream gateway sets none of the extension fields: what a report needs is read
    /// from upstream's own, and its two answers still pair up.
    #[test]
    fn an_upstream_gateways_config_is_read_by_upstreams_fields() {
        let config = sb::GetSandboxConfigResponse {
            policy: sample(1, "e1").policy().cloned(),
            version: 7,
            policy_hash: "hash-of-upstreams-encoding".into(),
            global_policy_version: 2,
            provider_env_revision: 42,
            ..Default::default()
        };
        assert!(from_upstream_gateway(&config));
        assert_eq!(
            config_revisions(&config),
            AppliedRevisions {
                policy_revision: 7,
                policy_hash: "hash-of-upstreams-encoding".into(),
                global_policy_revision: 2,
                global_settings_revision: 0,
                workspace_settings_revision: 0,
                sandbox_settings_revision: 0,
                provider_env_revision: "42".into(),
            }
        );
        let env = pb::GetSandboxProviderEnvironmentResponse {
            environment: [("TOKEN".to_string(), "value-1234".to_string())].into(),
            provider_env_revision: 42,
            ..Default::default()
        };
        assert_eq!(env_revision(&env), "42");
        let d = DesiredConfig::new(config, env);
        assert!(d.pair_matches());
        assert_eq!(d.revisions().policy_revision, 7);
        let mut moved_on = d.clone();
        moved_on.provider_env.provider_env_revision = 43;
        assert!(!moved_on.pair_matches());

        // This project's gateway states its revisions: they win over upstream's fields.
        let mut ours = sample(1 << 40, "e1").sandbox_config;
        ours.version = u32::MAX;
        ours.provider_env_revision = 42;
        assert!(!from_upstream_gateway(&ours));
        let r = config_revisions(&ours);
        assert_eq!(r.policy_revision, 1 << 40);
        assert_eq!(r.provider_env_revision, "e1");
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
        let (_, token) = values
            .iter()
            .find(|(name, _)| name == "GITHUB_TOKEN")
            .unwrap();
        assert_eq!(token.expose(), "ghp_secretvalue42");
        assert_eq!(token.class(), openshell_core::ValueClass::Credential);
        let (_, host) = values
            .iter()
            .find(|(name, _)| name == "GITHUB_HOST")
            .unwrap();
        assert_eq!(host.class(), openshell_core::ValueClass::NonSecret);
    }

    #[test]
    fn a_value_without_a_source_is_a_credential() {
        let mut d = sample(1, "e1");
        d.provider_env.sources.clear();
        for (name, value) in d.provider_values() {
            assert_eq!(
                value.class(),
                openshell_core::ValueClass::Credential,
                "{name}"
            );
        }
    }

    #[test]
    fn failure_mode_reads_setting() {
        let mut d = sample(1, "e1");
        assert_eq!(d.failure_mode(), FailureMode::RetainLastValid);
        d.sandbox_config.settings.insert(
            FAILURE_MODE_KEY.into(),
            string_setting("fail_closed", sb::SettingScope::Sandbox),
        );
        assert_eq!(d.failure_mode(), FailureMode::FailClosed);
        // Without the key, upstream's default: fail closed.
        d.sandbox_config.settings.clear();
        assert_eq!(d.failure_mode(), FailureMode::FailClosed);
        // Upstream's gateway states it in a field of its own.
        d.sandbox_config.policy_validation_failure_mode = "retain_last_valid".into();
        assert_eq!(d.failure_mode(), FailureMode::RetainLastValid);
    }

    #[test]
    fn expired_credentials_are_left_out_and_the_next_expiry_is_known() {
        let mut d = sample(1, "e1");
        assert_eq!(d.next_credential_expiry(), None);
        assert!(d.without_expired_credentials(5_000).is_none());
        d.provider_env.credential_expires_at_ms = [("GITHUB_TOKEN".to_string(), 4_000)].into();
        assert_eq!(d.next_credential_expiry(), Some(4_000));
        assert!(d.without_expired_credentials(3_999).is_none());
        let kept = d.without_expired_credentials(4_000).unwrap();
        assert!(!kept.provider_env.environment.contains_key("GITHUB_TOKEN"));
        assert!(kept.provider_env.environment.contains_key("GITHUB_HOST"));
        assert_ne!(
            kept.fingerprint(),
            d.fingerprint(),
            "a new activation follows"
        );
        // Once gone, nothing of it is left to expire or to withhold again.
        assert_eq!(kept.next_credential_expiry(), None);
        assert!(kept.without_expired_credentials(9_000).is_none());
    }
}
