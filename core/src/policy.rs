//! The sandbox policy document: schema, parsing, validation, canonical form and hashing.
//!
//! The schema is upstream OpenShell's (`crates/openshell-policy`), field for field, so policy
//! files written for OpenShell load here unchanged and come back unchanged: values are kept
//! in the spelling the operator used, and nothing they wrote is dropped. Validation follows
//! upstream's rules and reports every violation at once, each with the field path an operator
//! would edit (`network_policies.github.endpoints[2].ports[0]`). `docs/policy.md` describes the
//! schema field by field and lists where this project still differs from upstream.
//!
//! - [`schema`]: the serde types;
//! - `validate`, `l7`, `middleware`, `ambiguity`: the rules, by part of the document;
//! - `host`, `glob`: host patterns and the small glob languages the rules need;
//! - [`edit`]: incremental edits of the network rules (upstream's merge operations);
//! - `migrate`: turning policies stored by earlier versions of this project into this shape;
//! - [`wire`]: the same document as upstream's typed protobuf message, and back.

use std::collections::BTreeSet;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::violation::Violation;

mod ambiguity;
pub mod edit;
mod glob;
mod host;
mod l7;
mod middleware;
mod migrate;
pub mod schema;
mod validate;
pub mod wire;

pub use edit::{EditSpecs, Edited, PolicyEdit, apply_edits, generated_rule_name};
pub use l7::Protocol;
pub use migrate::migrate_legacy_policy_json;
pub use schema::{
    AnyMatcher, Binary, Endpoint, EndpointSelector, FilesystemPolicy, GraphqlOperation,
    JsonRpcConfig, Landlock, LandlockCompatibility, McpConfig, NetworkMiddleware, NetworkPolicy,
    ParamMatcher, ProcessPolicy, QueryMatcher, Rule, RuleMatch, SUPPORTED_VERSION, SandboxPolicy,
};
pub use validate::is_sandbox_identity;
pub use wire::WireError;

/// Largest accepted policy document, in bytes.
pub const MAX_POLICY_BYTES: usize = 256 * 1024;
/// Most filesystem paths, `read_only` and `read_write` together (upstream's limit).
pub const MAX_PATHS: usize = 256;
/// Longest accepted filesystem or binary path, in bytes (upstream's limit).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest network policy or middleware map key, in characters.
pub const MAX_POLICY_KEY_CHARS: usize = 256;
/// Most entries in `network_middlewares` (upstream's limit).
pub const MAX_MIDDLEWARES: usize = 10;
/// Most `include` and `exclude` patterns of one middleware selector, together.
pub const MAX_SELECTOR_PATTERNS: usize = 32;
/// Lowest numeric user or group ID a sandbox may run as.
pub const MIN_SANDBOX_ID: u32 = 1000;
/// Highest numeric user or group ID a sandbox may run as.
pub const MAX_SANDBOX_ID: u32 = 2_000_000_000;

/// Values accepted in `endpoints[].protocol` (in any letter case); empty means TCP passthrough.
pub const PROTOCOLS: &[&str] = &[
    "tcp",
    "rest",
    "websocket",
    "graphql",
    "sql",
    "json-rpc",
    "mcp",
];
/// Values accepted in `endpoints[].access`.
pub const ACCESS_PRESETS: &[&str] = &["read-only", "read-write", "full"];
/// Values accepted in `endpoints[].tls`; `terminate` and `passthrough` are deprecated no-ops.
pub const TLS_MODES: &[&str] = &["skip", "terminate", "passthrough"];
/// Values accepted in `endpoints[].enforcement`.
pub const ENFORCEMENT_MODES: &[&str] = &["enforce", "audit"];
/// Values accepted in `endpoints[].credential_signing`.
pub const CREDENTIAL_SIGNING_MODES: &[&str] = &["sigv4", "sigv4:body", "sigv4:no_body"];
/// Values accepted in `endpoints[].persisted_queries`.
pub const PERSISTED_QUERY_MODES: &[&str] = &["deny", "allow_registered"];
/// Values accepted in GraphQL `operation_type` (in any letter case).
pub const GRAPHQL_OPERATION_TYPES: &[&str] = &["query", "mutation", "subscription", "*"];
/// Values accepted in `network_middlewares.*.on_error`.
pub const ON_ERROR_MODES: &[&str] = &["fail_closed", "fail_open"];
/// Standard REST methods; others are accepted with a warning, as upstream does.
pub const HTTP_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "*",
];
/// Standard WebSocket rule methods; others are accepted with a warning, as upstream does.
pub const WEBSOCKET_METHODS: &[&str] = &["GET", "WEBSOCKET_TEXT", "*"];

const STATIC_SECTION_MESSAGE: &str = "static section is fixed at the sandbox's first policy \
     revision; only network_policies and network_middlewares may change";

/// Why a policy document was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy is {size} bytes; the limit is {limit} bytes (256 KiB)")]
    TooLarge { size: usize, limit: usize },
    #[error("policy is not valid YAML or JSON: {0}")]
    Syntax(String),
    #[error("policy is refused: {0}")]
    TooDeep(crate::nesting::TooDeep),
    #[error("policy is invalid: {}", join_violations(.0))]
    Invalid(Vec<Violation>),
}

fn join_violations(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl PolicyError {
    /// The problems as field-addressed violations, for APIs that return a list.
    ///
    /// A YAML syntax or type error that the parser located (`network_policies.gh.endpoints[0]:
    /// unknown field `hots``) is addressed by that path, and an unknown field by the field
    /// itself; anything else concerns the whole document and has an empty field.
    pub fn violations(&self) -> Vec<Violation> {
        match self {
            PolicyError::Syntax(message) => vec![
                located_syntax_error(message)
                    .unwrap_or_else(|| Violation::document(self.to_string())),
            ],
            PolicyError::TooLarge { .. } | PolicyError::TooDeep(_) => {
                vec![Violation::document(self.to_string())]
            }
            PolicyError::Invalid(list) => list.clone(),
        }
    }
}

/// The field a parser error names, if it names one.
fn located_syntax_error(message: &str) -> Option<Violation> {
    // Schema field names start with a lowercase letter; this also keeps prefixes such as
    // "JSON:" from reading as a path.
    let is_path = |p: &str| {
        p.starts_with(|c: char| c.is_ascii_lowercase())
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']'))
    };
    let (path, detail) = match message.split_once(": ") {
        Some((path, detail)) if is_path(path) => (path, detail),
        _ => ("", message),
    };
    let unknown = detail
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next());
    let field = match (path, unknown) {
        ("", None) => return None,
        ("", Some(name)) => name.to_string(),
        (path, Some(name)) => format!("{path}.{name}"),
        (path, None) => path.to_string(),
    };
    Some(Violation::new(
        field,
        format!("policy is not valid YAML or JSON: {detail}"),
    ))
}

/// Parses a policy from YAML or JSON without validating it.
///
/// A document whose first non-blank character is `{` is read as JSON, anything else as YAML.
/// If such a document is not JSON but is a YAML flow mapping (`{version: 1}`), it is still
/// accepted; errors then report the JSON reading, which is what the author most likely meant.
pub fn parse_policy(text: &str) -> Result<SandboxPolicy, PolicyError> {
    if text.len() > MAX_POLICY_BYTES {
        return Err(PolicyError::TooLarge {
            size: text.len(),
            limit: MAX_POLICY_BYTES,
        });
    }
    // Before any parser: the YAML scanner's cost grows with the square of nesting depth.
    crate::nesting::check_nesting(text, crate::nesting::MAX_NESTING_DEPTH)
        .map_err(PolicyError::TooDeep)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let body = text.trim_start();
    if body.is_empty() || is_null_document(body) {
        return Err(empty_document());
    }
    if body.starts_with('{') {
        return match serde_json::from_str::<SandboxPolicy>(text) {
            Ok(policy) => Ok(policy),
            Err(json_err) if json_err.is_syntax() || json_err.is_eof() => {
                serde_norway::from_str::<SandboxPolicy>(text)
                    .map_err(|_| PolicyError::Syntax(format!("JSON: {json_err}")))
            }
            // JSON is also YAML, and the YAML reader names the path of the bad field, which
            // serde_json does not; prefer its message when it has one.
            Err(json_err) => Err(PolicyError::Syntax(
                serde_norway::from_str::<SandboxPolicy>(text)
                    .err()
                    .map_or_else(|| json_err.to_string(), |e| yaml_error(&e)),
            )),
        };
    }
    serde_norway::from_str::<SandboxPolicy>(text)
        .map_err(|err| PolicyError::Syntax(yaml_error(&err)))
}

/// A YAML error's text; the parser's refusal of an alias bomb names no cause, so it is told here.
fn yaml_error(err: &serde_norway::Error) -> String {
    let text = err.to_string();
    if text.contains("repetition limit exceeded") {
        return "its aliases (`*name`) expand to far more values than the document holds (an alias \
                bomb); write the values out instead"
            .into();
    }
    text
}

/// A document of only comments, `---`/`...` markers and at most a null scalar: YAML reads it as
/// null, and saying so plainly beats serde's "invalid type: unit value". Decided from the text so
/// the document is parsed once.
fn is_null_document(body: &str) -> bool {
    let mut scalars = body
        .lines()
        .map(|line| match line.find('#') {
            Some(at) if at == 0 || line[..at].ends_with([' ', '\t']) => &line[..at],
            _ => line,
        })
        .map(str::trim)
        .filter(|line| !line.is_empty() && *line != "---" && *line != "...");
    match (scalars.next(), scalars.next()) {
        (None, _) => true,
        (Some(only), None) => matches!(only, "~" | "null" | "Null" | "NULL" | "--- ~" | "--- null"),
        _ => false,
    }
}

fn empty_document() -> PolicyError {
    PolicyError::Syntax("the policy document is empty; it needs at least `version: 1`".into())
}

/// The policy hash of an already rendered [`SandboxPolicy::canonical_json`], for callers
/// that need both and should not render twice.
pub fn hash_of_canonical_json(canonical_json: &str) -> String {
    hex::encode(Sha256::digest(canonical_json.as_bytes()))
}

/// Parses and validates; the usual entry point for policies coming from operators.
pub fn parse_and_validate(text: &str) -> Result<SandboxPolicy, PolicyError> {
    let policy = parse_policy(text)?;
    policy.validate().map_err(PolicyError::Invalid)?;
    Ok(policy)
}

/// `.key` for a plain key, `["key"]` otherwise, so a path stays unambiguous even when the key
/// itself is what is wrong (empty, or containing dots or brackets).
pub(crate) fn key_segment(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!(".{key}")
    } else {
        format!("[{key:?}]")
    }
}

impl SandboxPolicy {
    /// Checks every rule and returns all violations at once, so an operator can fix a policy
    /// in one pass.
    pub fn validate(&self) -> Result<(), Vec<Violation>> {
        let findings = validate::check(self);
        if findings.errors.is_empty() {
            Ok(())
        } else {
            Err(findings.errors)
        }
    }

    /// What upstream accepts but flags: deprecated values, fields the chosen protocol ignores,
    /// non-standard HTTP methods, unbalanced glob brackets. Never a reason to refuse a policy.
    pub fn warnings(&self) -> Vec<Violation> {
        validate::check(self).warnings
    }

    /// Deterministic compact JSON with object keys sorted at every level, so the same policy
    /// always produces the same bytes whatever its source formatting was.
    pub fn canonical_json(&self) -> String {
        // Serializing these types cannot fail: every map key is a string and no field has a
        // fallible Serialize impl.
        let value = serde_json::to_value(self).unwrap_or_default();
        sorted(value).to_string()
    }

    /// Lowercase hex SHA-256 of [`SandboxPolicy::canonical_json`].
    pub fn policy_hash(&self) -> String {
        hash_of_canonical_json(&self.canonical_json())
    }

    /// YAML in upstream's spelling that [`parse_policy`] reads back to an equal policy.
    pub fn to_yaml(&self) -> String {
        // JSON is also valid input to parse_policy, so it is a faithful fallback should YAML
        // serialization ever fail.
        serde_norway::to_string(self).unwrap_or_else(|_| self.canonical_json())
    }

    /// Static sections (filesystem_policy, landlock, process) that differ in `newer`, one
    /// violation per section. They are applied once when the sandbox starts and cannot be
    /// changed on a running sandbox, so a sandbox-scoped update may not touch them.
    ///
    /// An absent `filesystem_policy` or `process` section counts the same as an empty one, and
    /// a `landlock` section without `compatibility` the same as `best_effort`.
    pub fn static_section_changes(&self, newer: &SandboxPolicy) -> Vec<Violation> {
        let empty_fs = FilesystemPolicy::default();
        let empty_process = ProcessPolicy::default();
        let mut out = Vec::new();
        if self.filesystem_policy.as_ref().unwrap_or(&empty_fs)
            != newer.filesystem_policy.as_ref().unwrap_or(&empty_fs)
        {
            out.push(Violation::new("filesystem_policy", STATIC_SECTION_MESSAGE));
        }
        let landlock = |p: &SandboxPolicy| {
            p.landlock
                .as_ref()
                .map(schema::Landlock::effective_compatibility)
        };
        if landlock(self) != landlock(newer) {
            out.push(Violation::new("landlock", STATIC_SECTION_MESSAGE));
        }
        if self.process.as_ref().unwrap_or(&empty_process)
            != newer.process.as_ref().unwrap_or(&empty_process)
        {
            out.push(Violation::new("process", STATIC_SECTION_MESSAGE));
        }
        out
    }

    /// Names of network policies that lose reach in `newer`: removed outright, or with some
    /// (host, port) pair no longer covered by any endpoint. Sorted by name.
    ///
    /// Narrowing within a pair (access, rules, binaries) is not counted; the result is meant
    /// for asking an operator to confirm an obviously breaking change, not for proving that
    /// nothing was narrowed.
    pub fn removes_network_access(&self, newer: &SandboxPolicy) -> Vec<String> {
        self.network_policies
            .iter()
            .filter(|(name, old)| match newer.network_policies.get(*name) {
                None => true,
                Some(new) => !reach(old).is_subset(&reach(new)),
            })
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// The (host or address range, port) pairs an entry reaches.
fn reach(policy: &NetworkPolicy) -> BTreeSet<(String, u32)> {
    policy
        .endpoints
        .iter()
        .flat_map(|ep| {
            let mut destinations: Vec<String> = ep.allowed_ips.clone();
            if !ep.host.is_empty() || destinations.is_empty() {
                destinations.push(ep.host.to_ascii_lowercase());
            }
            let ports = ep.effective_ports();
            destinations
                .into_iter()
                .flat_map(move |d| ports.clone().into_iter().map(move |p| (d.clone(), p)))
        })
        .collect()
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            // serde_json keeps insertion order when another crate in the build enables its
            // `preserve_order` feature, so sort explicitly rather than rely on the default map.
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests;
