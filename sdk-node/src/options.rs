//! The option objects calls accept, and their checked conversion into the
//! sdk's request types.
//!
//! JS hands over doubles and loosely shaped objects, so everything a caller
//! can get wrong (a negative timeout, a target naming two scopes, a bad
//! timestamp) becomes an `INVALID_ARGUMENT` naming the field here rather than
//! a panic or a silently clamped value.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use napi::bindgen_prelude::Either3;
use napi_derive::napi;
use openshell_sdk::{self as sdk, SdkError};

use crate::enums::{OperationState, UpdateMode};
use crate::error::invalid;

/// How to reach a gateway. `Client.connect` fills what is left out from the
/// CLI's environment variables: `OPENSHELL_GATEWAY`, `OPENSHELL_TOKEN` and
/// `OPENSHELL_CA_CERT` (the path of a PEM file).
#[napi(object)]
pub struct ConnectOptions {
    /// `http://host:port` or `https://host:port` (default: `OPENSHELL_GATEWAY`,
    /// else `http://127.0.0.1:7070`).
    pub endpoint: Option<String>,
    /// Operator token, sent as `authorization: Bearer <token>` (default: `OPENSHELL_TOKEN`).
    pub token: Option<String>,
    /// PEM CA certificate(s) to trust for an `https` endpoint.
    pub ca_cert_pem: Option<String>,
    /// Bound on establishing the connection (default 10 000).
    pub connect_timeout_ms: Option<f64>,
    /// Bound on each call; waiting calls get their wait time on top (default: none).
    pub request_timeout_ms: Option<f64>,
}

impl ConnectOptions {
    pub(crate) fn into_sdk(self) -> Result<sdk::ClientOptions, SdkError> {
        let mut options = match self.endpoint {
            Some(endpoint) => sdk::ClientOptions::new(endpoint),
            None => sdk::ClientOptions::default(),
        };
        if let Some(token) = self.token.filter(|t| !t.is_empty()) {
            options = options.with_token(token);
        }
        if let Some(pem) = self.ca_cert_pem {
            options = options.with_ca_cert_pem(pem.into_bytes());
        }
        if let Some(limit) = millis("connectTimeoutMs", self.connect_timeout_ms)? {
            options = options.with_connect_timeout(limit);
        }
        if let Some(limit) = millis("requestTimeoutMs", self.request_timeout_ms)? {
            options = options.with_request_timeout(limit);
        }
        Ok(options)
    }
}

/// A JS millisecond count as a `Duration`, refusing what no wait can mean.
pub(crate) fn millis(field: &str, value: Option<f64>) -> Result<Option<Duration>, SdkError> {
    let Some(ms) = value else {
        return Ok(None);
    };
    if !ms.is_finite() || ms < 0.0 {
        return Err(invalid(
            field,
            "must be a finite number of milliseconds >= 0",
        ));
    }
    Duration::try_from_secs_f64(ms / 1000.0)
        .map(Some)
        .map_err(|_| invalid(field, "is too large"))
}

/// Where a configuration change applies: exactly one of the three keys.
#[napi(object)]
pub struct ConfigTarget {
    /// Sandbox id, name, or `WORKSPACE/NAME`.
    pub sandbox: Option<String>,
    pub workspace: Option<String>,
    pub global: Option<bool>,
}

impl ConfigTarget {
    pub(crate) fn into_sdk(self) -> Result<sdk::Target, SdkError> {
        match (self.sandbox, self.workspace, self.global.unwrap_or(false)) {
            (Some(sandbox), None, false) => {
                Ok(sdk::Target::Sandbox(sdk::SandboxRef::from(sandbox)))
            }
            (None, Some(workspace), false) => Ok(sdk::Target::Workspace(workspace)),
            (None, None, true) => Ok(sdk::Target::Global),
            _ => Err(invalid(
                "target",
                "name exactly one of { sandbox }, { workspace } or { global: true }",
            )),
        }
    }
}

/// A setting value as JS may give it, as the text the gateway's registry
/// parses, so `5`, `"5"` and `true`/`"true"` are one request
/// and retrying with either spelling replays the same idempotent write.
fn setting_text(key: &str, value: Either3<String, f64, bool>) -> Result<String, SdkError> {
    match value {
        Either3::A(text) => Ok(text),
        Either3::B(number) if number.is_finite() && number.fract() == 0.0 => {
            Ok(format!("{number:.0}"))
        }
        Either3::B(number) if number.is_finite() => Ok(number.to_string()),
        Either3::B(_) => Err(invalid(
            &format!("settings.{key}"),
            "must be a finite number",
        )),
        Either3::C(flag) => Ok(flag.to_string()),
    }
}

/// A policy and/or settings write, committed as one durable operation.
#[napi(object)]
pub struct UpdateConfigOptions {
    #[napi(ts_type = "{ sandbox: string } | { workspace: string } | { global: true }")]
    pub target: ConfigTarget,
    /// New policy text (YAML or JSON); absent leaves the policy unchanged.
    pub policy: Option<String>,
    /// Global target only: remove the global policy so sandbox policies apply again.
    pub clear_global_policy: Option<bool>,
    /// Settings to set, `KEY: VALUE`; values are typed by the gateway's registry.
    pub settings: Option<BTreeMap<String, Either3<String, f64, bool>>>,
    /// Setting keys to remove from the target's scope.
    pub delete_settings: Option<Vec<String>>,
    /// `COMMIT_ONLY` (the default) returns after commit; `WAIT_FOR_APPLY` waits until applied.
    pub mode: Option<UpdateMode>,
    /// Makes the write safe to retry: unique per target and caller for 24 h.
    pub idempotency_key: Option<String>,
    /// `WAIT_FOR_APPLY` only: server-side wait (gateway default 60 000, at most 600 000).
    pub wait_timeout_ms: Option<f64>,
    /// Fleet targets: finish the wait once this fraction (0, 1] of targets applied.
    pub threshold: Option<f64>,
    /// Dry run: the gateway runs every check of the write against what is stored and resolves
    /// with what would change (`policyDiff`, `settingChanges`, `keptStaticSections`) and no
    /// operation, writing nothing. `mode`, `waitTimeoutMs` and `threshold` are ignored.
    pub validate_only: Option<bool>,
    /// Sandbox target only, instead of `policy`: edits the gateway applies to the sandbox's
    /// latest policy revision, in the CLI's forms (`openshell policy update --add-endpoint`).
    /// What the merge did differently from the literal request is in `mergeNotes`.
    pub policy_edits: Option<PolicyEdits>,
    /// The policy revision this change was made against (the sandbox's, or the global
    /// policy's); a target that has moved on rejects with `FailedPreconditionError` and
    /// nothing is written.
    pub expected_revision: Option<f64>,
}

/// Incremental edits of a sandbox policy's network rules, in the CLI's forms; the gateway
/// applies them in this order: added endpoints, removed endpoints, removed rules, allow
/// rules, deny rules.
#[napi(object)]
pub struct PolicyEdits {
    /// `HOST:PORT[:ACCESS[:PROTOCOL[:ENFORCEMENT[:OPTIONS]]]]`, each a rule of its own (or
    /// merged into the rule that already allows that host and port).
    pub add_endpoints: Option<Vec<String>>,
    /// `HOST:PORT`: the port is removed from every endpoint of that host.
    pub remove_endpoints: Option<Vec<String>>,
    /// `HOST:PORT:METHOD:PATH`: an allow rule on the REST endpoint serving `HOST:PORT`.
    pub add_allow: Option<Vec<String>>,
    /// `HOST:PORT:METHOD:PATH`: a deny rule on the REST endpoint serving `HOST:PORT`.
    pub add_deny: Option<Vec<String>>,
    /// Keys of `network_policies` entries to remove.
    pub remove_rules: Option<Vec<String>>,
    /// Binaries the added endpoints are for (only with `addEndpoints`).
    pub binaries: Option<Vec<String>>,
    /// The key of the rule one added endpoint goes to; by default `allow_HOST_PORT`.
    pub rule_name: Option<String>,
}

impl From<PolicyEdits> for sdk::EditSpecs {
    fn from(edits: PolicyEdits) -> Self {
        Self {
            add_endpoints: edits.add_endpoints.unwrap_or_default(),
            remove_endpoints: edits.remove_endpoints.unwrap_or_default(),
            add_allow: edits.add_allow.unwrap_or_default(),
            add_deny: edits.add_deny.unwrap_or_default(),
            remove_rules: edits.remove_rules.unwrap_or_default(),
            binaries: edits.binaries.unwrap_or_default(),
            rule_name: edits.rule_name,
        }
    }
}

/// A JS number as a policy revision: a whole number from 1 on, exact in a double.
fn revision(field: &str, value: Option<f64>) -> Result<Option<u64>, SdkError> {
    const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
    let Some(number) = value else {
        return Ok(None);
    };
    if number.fract() != 0.0 || !(1.0..=MAX_SAFE_INTEGER).contains(&number) {
        return Err(invalid(
            field,
            "must be a revision number: an integer from 1 to Number.MAX_SAFE_INTEGER",
        ));
    }
    // Exact: a whole number within the range a double holds without rounding.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Some(number as u64))
}

impl UpdateConfigOptions {
    pub(crate) fn into_sdk(self) -> Result<sdk::UpdateConfig, SdkError> {
        let mode = self.mode.map_or(sdk::UpdateMode::CommitOnly, Into::into);
        let mut update = sdk::UpdateConfig::new(self.target.into_sdk()?).mode(mode);
        update.policy = self.policy;
        update.clear_global_policy = self.clear_global_policy.unwrap_or(false);
        // BTreeMap order makes a retried request byte-identical, which the
        // gateway's idempotency fingerprint relies on.
        for (key, value) in self.settings.unwrap_or_default() {
            let text = setting_text(&key, value)?;
            update = update.set(key, text);
        }
        for key in self.delete_settings.unwrap_or_default() {
            update = update.delete(key);
        }
        update.idempotency_key = self.idempotency_key;
        update.wait_timeout = millis("waitTimeoutMs", self.wait_timeout_ms)?;
        update.threshold = self.threshold;
        update.validate_only = self.validate_only.unwrap_or(false);
        if let Some(edits) = self.policy_edits {
            update = update.edit_specs(&edits.into())?;
        }
        update.expected_revision = revision("expectedRevision", self.expected_revision)?;
        Ok(update)
    }
}

/// How long and for what to wait on an operation.
#[napi(object)]
pub struct WatchOptions {
    /// Server-side wait (gateway default 60 000, at most 600 000).
    pub timeout_ms: Option<f64>,
    /// Fleet operations: finish once this fraction (0, 1] of targets applied.
    pub threshold: Option<f64>,
}

#[napi(object)]
pub struct CreateSandboxOptions {
    /// A DNS label, unique in its workspace.
    pub name: String,
    /// Default: the gateway's default workspace.
    pub workspace: Option<String>,
    /// First policy (revision 1); it fixes the static sections.
    pub policy: Option<String>,
}

#[napi(object)]
pub struct ListSandboxesOptions {
    pub workspace: Option<String>,
    pub include_deleted: Option<bool>,
}

#[napi(object)]
pub struct ListOperationsOptions {
    /// Only operations of this sandbox (id, name or `WORKSPACE/NAME`).
    pub sandbox: Option<String>,
    /// Only operations in one of these states.
    pub states: Option<Vec<OperationState>>,
    /// One page of at most this many, newest first (gateway default 100, cap 1000).
    pub page_size: Option<u32>,
}

/// A provider to create. Credentials are encrypted at rest and never returned.
#[napi(object)]
pub struct ProviderSpec {
    pub name: String,
    pub workspace: Option<String>,
    #[napi(js_name = "type")]
    pub provider_type: String,
    /// Plain environment values.
    pub env: Option<BTreeMap<String, String>>,
    /// Secret values.
    pub credentials: Option<BTreeMap<String, String>>,
    /// RFC 3339 timestamp (a `Date` is accepted by the JS layer).
    pub expires_at: Option<String>,
}

impl ProviderSpec {
    pub(crate) fn into_sdk(self) -> Result<sdk::ProviderSpec, SdkError> {
        Ok(sdk::ProviderSpec {
            name: self.name,
            workspace: self.workspace,
            provider_type: self.provider_type,
            env: self.env.unwrap_or_default(),
            credentials: self.credentials.unwrap_or_default(),
            expires_at: timestamp("expiresAt", self.expires_at)?,
        })
    }
}

/// The complete new value set of an existing provider; it replaces the old set.
#[napi(object)]
pub struct ProviderUpdate {
    /// Provider id or name.
    pub provider: String,
    pub workspace: Option<String>,
    pub env: Option<BTreeMap<String, String>>,
    pub credentials: Option<BTreeMap<String, String>>,
    /// RFC 3339 timestamp; absent clears the expiry.
    pub expires_at: Option<String>,
}

impl ProviderUpdate {
    pub(crate) fn into_sdk(self) -> Result<sdk::ProviderUpdate, SdkError> {
        Ok(sdk::ProviderUpdate {
            provider: self.provider,
            workspace: self.workspace,
            env: self.env.unwrap_or_default(),
            credentials: self.credentials.unwrap_or_default(),
            expires_at: timestamp("expiresAt", self.expires_at)?,
        })
    }
}

fn timestamp(field: &str, text: Option<String>) -> Result<Option<SystemTime>, SdkError> {
    text.map(|t| {
        humantime::parse_rfc3339_weak(t.trim())
            .map_err(|err| invalid(field, format!("not an RFC 3339 timestamp: {err}")))
    })
    .transpose()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn millis_refuses_nonsense() {
        assert_eq!(millis("t", None).unwrap(), None);
        assert_eq!(
            millis("t", Some(1500.0)).unwrap(),
            Some(Duration::from_millis(1500))
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e300] {
            let err = millis("waitTimeoutMs", Some(bad)).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT");
            assert_eq!(err.violations()[0].field, "waitTimeoutMs");
        }
    }

    #[test]
    fn target_needs_exactly_one_scope() {
        let target = |sandbox: Option<&str>, workspace: Option<&str>, global| ConfigTarget {
            sandbox: sandbox.map(str::to_owned),
            workspace: workspace.map(str::to_owned),
            global,
        };
        assert_eq!(
            target(Some("team/demo"), None, None).into_sdk().unwrap(),
            sdk::Target::Sandbox(sdk::SandboxRef::in_workspace("demo", "team"))
        );
        assert_eq!(
            target(None, None, Some(true)).into_sdk().unwrap(),
            sdk::Target::Global
        );
        for bad in [
            target(None, None, None),
            target(None, None, Some(false)),
            target(Some("a"), Some("b"), None),
            target(Some("a"), None, Some(true)),
        ] {
            let err = bad.into_sdk().unwrap_err();
            assert_eq!(err.violations()[0].field, "target");
        }
    }

    #[test]
    fn setting_values_become_registry_text() {
        assert_eq!(setting_text("k", Either3::B(5.0)).unwrap(), "5");
        assert_eq!(setting_text("k", Either3::B(0.5)).unwrap(), "0.5");
        assert_eq!(setting_text("k", Either3::C(true)).unwrap(), "true");
        assert_eq!(
            setting_text("k", Either3::A("debug".into())).unwrap(),
            "debug"
        );
        let err = setting_text("k", Either3::B(f64::NAN)).unwrap_err();
        assert_eq!(err.violations()[0].field, "settings.k");
    }

    #[test]
    fn update_keeps_settings_in_key_order() {
        let update = UpdateConfigOptions {
            target: ConfigTarget {
                sandbox: None,
                workspace: None,
                global: Some(true),
            },
            policy: None,
            clear_global_policy: None,
            settings: Some(BTreeMap::from([
                ("b".to_owned(), Either3::A("2".to_owned())),
                ("a".to_owned(), Either3::C(false)),
            ])),
            delete_settings: Some(vec!["c".to_owned()]),
            mode: Some(UpdateMode::WaitForApply),
            idempotency_key: Some("k".to_owned()),
            wait_timeout_ms: Some(300.0),
            threshold: None,
            validate_only: Some(true),
            policy_edits: None,
            expected_revision: Some(3.0),
        }
        .into_sdk()
        .unwrap();
        assert_eq!(
            update.settings,
            vec![
                sdk::SettingChange::set("a", "false"),
                sdk::SettingChange::set("b", "2"),
                sdk::SettingChange::delete("c"),
            ]
        );
        assert_eq!(update.mode, sdk::UpdateMode::WaitForApply);
        assert_eq!(update.wait_timeout, Some(Duration::from_millis(300)));
        assert!(update.validate_only);
        assert_eq!(update.expected_revision, Some(3));
    }

    #[test]
    fn mode_defaults_to_commit_only() {
        let update = UpdateConfigOptions {
            target: ConfigTarget {
                sandbox: Some("demo".to_owned()),
                workspace: None,
                global: None,
            },
            policy: None,
            clear_global_policy: None,
            settings: None,
            delete_settings: None,
            mode: None,
            idempotency_key: None,
            wait_timeout_ms: None,
            threshold: None,
            validate_only: None,
            policy_edits: None,
            expected_revision: None,
        }
        .into_sdk()
        .unwrap();
        assert_eq!(update.mode, sdk::UpdateMode::CommitOnly);
        assert!(update.policy_edits.is_empty());
        assert_eq!(update.expected_revision, None);
    }

    #[test]
    fn a_revision_is_a_whole_number_from_one() {
        assert_eq!(revision("r", None).unwrap(), None);
        assert_eq!(revision("r", Some(1.0)).unwrap(), Some(1));
        assert_eq!(
            revision("r", Some(9_007_199_254_740_991.0)).unwrap(),
            Some(9_007_199_254_740_991)
        );
        for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY, 1e300] {
            let err = revision("expectedRevision", Some(bad)).unwrap_err();
            assert_eq!(err.violations()[0].field, "expectedRevision", "{bad}");
        }
    }

    #[test]
    fn bad_expiry_names_the_field() {
        let err = timestamp("expiresAt", Some("tomorrow".into())).unwrap_err();
        assert_eq!(err.violations()[0].field, "expiresAt");
        assert!(
            timestamp("expiresAt", Some("2030-01-01T00:00:00Z".into()))
                .unwrap()
                .is_some()
        );
    }
}
