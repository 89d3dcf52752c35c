//! The sandbox policy document: schema, parsing, validation, canonical form and hashing.
//!
//! The schema follows the upstream OpenShell shape so existing policy files load. Every struct
//! rejects unknown fields, because a misspelt key that is silently ignored would leave a
//! sandbox with less (or more) access than the operator wrote down.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv6Addr};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::provider::is_slug_char;
use crate::violation::Violation;

/// Largest accepted policy document, in bytes.
pub const MAX_POLICY_BYTES: usize = 256 * 1024;
/// Most entries in each of `read_only` and `read_write`.
pub const MAX_PATHS: usize = 256;
/// Longest accepted path, in characters.
pub const MAX_PATH_CHARS: usize = 4096;
/// Longest network policy or middleware name.
pub const MAX_POLICY_NAME_CHARS: usize = 63;
/// The only schema version this crate understands.
pub const SUPPORTED_VERSION: u32 = 1;
/// Values accepted in `endpoints[].protocol`.
pub const PROTOCOLS: &[&str] = &["tcp", "udp", "http", "https", "rest", "tls"];
/// Values accepted in `rules[].methods`.
pub const HTTP_METHODS: &[&str] = &[
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "*",
];

const STATIC_SECTION_MESSAGE: &str = "static section is fixed at the sandbox's first policy \
     revision; only network_policies and network_middlewares may change";

/// A complete sandbox policy document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxPolicy {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem_policy: Option<FilesystemPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock: Option<Landlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessPolicy>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_names"
    )]
    pub network_policies: BTreeMap<String, NetworkPolicy>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_names"
    )]
    pub network_middlewares: BTreeMap<String, NetworkMiddleware>,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            version: SUPPORTED_VERSION,
            filesystem_policy: None,
            landlock: None,
            process: None,
            network_policies: BTreeMap::new(),
            network_middlewares: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemPolicy {
    #[serde(default, skip_serializing_if = "is_false")]
    pub include_workdir: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Landlock {
    #[serde(default)]
    pub compatibility: LandlockCompatibility,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandlockCompatibility {
    /// Apply what the kernel supports and carry on without the rest.
    #[default]
    BestEffort,
    /// Refuse to start the sandbox when the kernel cannot enforce the policy in full.
    HardRequirement,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    /// Upstream policies repeat the map key here; when given it must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binaries: Vec<Binary>,
}

/// One allowed destination.
///
/// `port` and `ports` are `u32` although ports fit in `u16`: a value such as 70000 must reach
/// validation, which reports it with its field path, instead of failing as a type error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    // Defaulted so a missing host is reported by validation, with the other problems.
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    // Upstream policies spell these with a hyphen.
    #[serde(alias = "read-only")]
    ReadOnly,
    #[serde(alias = "read-write")]
    ReadWrite,
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Block traffic the policy does not allow.
    Enforce,
    /// Allow it but record it, for trying a policy out.
    Audit,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The upstream single-rule form: `- allow: {method: GET, path: "/repos/**"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<AllowRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
}

/// One allowed request: an HTTP method (or `*`) and a path pattern.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowRule {
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binary {
    // Defaulted so a missing path is reported by validation, with the other problems.
    #[serde(default)]
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkMiddleware {
    #[serde(default)]
    pub middleware: String,
    /// Opaque to the gateway; the middleware itself interprets it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    FailOpen,
    FailClosed,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Deserializes a name-keyed map, rejecting a name that appears twice. Both serde_json and
/// serde_norway would otherwise keep the last entry and silently drop the earlier one.
/// A null section (`network_policies:` with nothing after it) reads as empty.
fn unique_names<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct NamesVisitor<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for NamesVisitor<V> {
        type Value = BTreeMap<String, V>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map from names to entries")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                if out.contains_key(&name) {
                    return Err(de::Error::custom(format!(
                        "duplicate name `{name}`; names must be unique"
                    )));
                }
                let value = map.next_value()?;
                out.insert(name, value);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_option(NamesVisitor(PhantomData))
}

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
    pub fn violations(&self) -> Vec<Violation> {
        match self {
            PolicyError::TooLarge { .. } | PolicyError::Syntax(_) | PolicyError::TooDeep(_) => {
                vec![Violation::document(self.to_string())]
            }
            PolicyError::Invalid(list) => list.clone(),
        }
    }
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
            Err(json_err) => Err(PolicyError::Syntax(json_err.to_string())),
        };
    }
    serde_norway::from_str::<SandboxPolicy>(text)
        .map_err(|err| PolicyError::Syntax(err.to_string()))
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

/// Parses and validates; the usual entry point for policies coming from operators.
/// The policy hash of an already rendered [`SandboxPolicy::canonical_json`], for callers
/// that need both and should not render twice.
pub fn hash_of_canonical_json(canonical_json: &str) -> String {
    hex::encode(Sha256::digest(canonical_json.as_bytes()))
}

pub fn parse_and_validate(text: &str) -> Result<SandboxPolicy, PolicyError> {
    let policy = parse_policy(text)?;
    policy.validate().map_err(PolicyError::Invalid)?;
    Ok(policy)
}

impl SandboxPolicy {
    /// Checks every rule and returns all violations at once, so an operator can fix a policy
    /// in one pass.
    pub fn validate(&self) -> Result<(), Vec<Violation>> {
        let mut out = Vec::new();
        if self.version != SUPPORTED_VERSION {
            out.push(Violation::new(
                "version",
                format!(
                    "unsupported policy version {}; only version {SUPPORTED_VERSION} is supported",
                    self.version
                ),
            ));
        }
        if let Some(fs) = &self.filesystem_policy {
            check_path_list(
                &mut out,
                "filesystem_policy.read_only",
                &fs.read_only,
                false,
            );
            check_path_list(
                &mut out,
                "filesystem_policy.read_write",
                &fs.read_write,
                true,
            );
        }
        for (name, policy) in &self.network_policies {
            let base = format!("network_policies{}", key_segment(name));
            check_entry_name(&mut out, &base, "network policy", name);
            if let Some(inner) = &policy.name
                && inner != name
            {
                out.push(Violation::new(
                    format!("{base}.name"),
                    format!("{inner:?} does not match the policy's key {name:?}"),
                ));
            }
            for (i, endpoint) in policy.endpoints.iter().enumerate() {
                check_endpoint(&mut out, &format!("{base}.endpoints[{i}]"), endpoint);
            }
            for (i, binary) in policy.binaries.iter().enumerate() {
                check_path(
                    &mut out,
                    &format!("{base}.binaries[{i}].path"),
                    &binary.path,
                );
            }
        }
        for (name, middleware) in &self.network_middlewares {
            let base = format!("network_middlewares{}", key_segment(name));
            check_entry_name(&mut out, &base, "middleware", name);
            if middleware.middleware.trim().is_empty() {
                out.push(Violation::new(
                    format!("{base}.middleware"),
                    "middleware is required: name the middleware implementation to run",
                ));
            }
        }
        if out.is_empty() { Ok(()) } else { Err(out) }
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

    /// YAML that [`parse_policy`] reads back to an equal policy.
    pub fn to_yaml(&self) -> String {
        // JSON is also valid input to parse_policy, so it is a faithful fallback should YAML
        // serialization ever fail.
        serde_norway::to_string(self).unwrap_or_else(|_| self.canonical_json())
    }

    /// Static sections (filesystem_policy, landlock, process) that differ in `newer`, one
    /// violation per section. They are applied once when the sandbox starts and cannot be
    /// changed on a running sandbox, so a sandbox-scoped update may not touch them.
    ///
    /// An absent `filesystem_policy` or `process` section counts the same as an empty one.
    pub fn static_section_changes(&self, newer: &SandboxPolicy) -> Vec<Violation> {
        let empty_fs = FilesystemPolicy::default();
        let empty_process = ProcessPolicy::default();
        let mut out = Vec::new();
        if self.filesystem_policy.as_ref().unwrap_or(&empty_fs)
            != newer.filesystem_policy.as_ref().unwrap_or(&empty_fs)
        {
            out.push(Violation::new("filesystem_policy", STATIC_SECTION_MESSAGE));
        }
        if self.landlock != newer.landlock {
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

fn reach(policy: &NetworkPolicy) -> BTreeSet<(String, u32)> {
    policy
        .endpoints
        .iter()
        .flat_map(|ep| {
            let host = ep.host.to_ascii_lowercase();
            ep.port
                .into_iter()
                .chain(ep.ports.iter().copied())
                .map(move |port| (host.clone(), port))
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

/// `.name` for a well-formed name, `["name"]` otherwise, so a path stays unambiguous even when
/// the name itself is what is wrong (empty, or containing dots).
fn key_segment(name: &str) -> String {
    if !name.is_empty() && name.chars().all(is_slug_char) {
        format!(".{name}")
    } else {
        format!("[{name:?}]")
    }
}

fn check_entry_name(out: &mut Vec<Violation>, field: &str, what: &str, name: &str) {
    let len = name.chars().count();
    let message = if name.is_empty() {
        format!("{what} name is empty")
    } else if len > MAX_POLICY_NAME_CHARS {
        format!("{what} name is {len} characters; the limit is {MAX_POLICY_NAME_CHARS}")
    } else if let Some(bad) = name.chars().find(|c| !is_slug_char(*c)) {
        format!(
            "{what} name may contain only lowercase letters, digits, '_' and '-', found {bad:?}"
        )
    } else {
        return;
    };
    out.push(Violation::new(field, message));
}

fn check_path_list(out: &mut Vec<Violation>, field: &str, paths: &[String], writable: bool) {
    if paths.len() > MAX_PATHS {
        out.push(Violation::new(
            field,
            format!("{} paths listed; the limit is {MAX_PATHS}", paths.len()),
        ));
    }
    for (i, path) in paths.iter().enumerate() {
        let field = format!("{field}[{i}]");
        check_path(out, &field, path);
        if writable && is_root(path) {
            out.push(Violation::new(
                field,
                "the root directory `/` may not be read-write; list the directories that need writing",
            ));
        }
    }
}

fn check_path(out: &mut Vec<Violation>, field: &str, path: &str) {
    if path.is_empty() {
        out.push(Violation::new(field, "path is empty"));
        return;
    }
    let len = path.chars().count();
    if len > MAX_PATH_CHARS {
        out.push(Violation::new(
            field,
            format!("path is {len} characters; the limit is {MAX_PATH_CHARS}"),
        ));
    }
    if !path.starts_with('/') {
        out.push(Violation::new(
            field,
            format!("path {path:?} must be absolute (start with '/')"),
        ));
    }
    if path.split('/').any(|component| component == "..") {
        out.push(Violation::new(
            field,
            "path must not contain a '..' component",
        ));
    }
    if path.contains('\0') {
        out.push(Violation::new(
            field,
            "path must not contain a NUL character",
        ));
    }
}

/// True for `/` and spellings of it such as `//` or `/.`.
fn is_root(path: &str) -> bool {
    path.starts_with('/') && path.split('/').all(|c| c.is_empty() || c == ".")
}

fn check_endpoint(out: &mut Vec<Violation>, base: &str, ep: &Endpoint) {
    if let Some(message) = host_problem(&ep.host) {
        out.push(Violation::new(format!("{base}.host"), message));
    }
    match (ep.port, ep.ports.is_empty()) {
        (None, true) => out.push(Violation::new(
            format!("{base}.port"),
            "port is required: set `port` or a non-empty `ports` list",
        )),
        (Some(_), false) => out.push(Violation::new(
            base,
            "set either `port` or `ports`, not both",
        )),
        _ => {}
    }
    if let Some(port) = ep.port {
        check_port(out, format!("{base}.port"), port);
    }
    for (i, port) in ep.ports.iter().enumerate() {
        check_port(out, format!("{base}.ports[{i}]"), *port);
    }
    if let Some(protocol) = &ep.protocol
        && !PROTOCOLS.contains(&protocol.as_str())
    {
        out.push(Violation::new(
            format!("{base}.protocol"),
            format!(
                "unknown protocol {protocol:?}; expected one of {}",
                PROTOCOLS.join(", ")
            ),
        ));
    }
    if ep.access.is_some() && !ep.rules.is_empty() {
        out.push(Violation::new(
            base,
            "set either `access` or `rules`, not both",
        ));
    }
    for (i, rule) in ep.rules.iter().enumerate() {
        if let Some(allow) = &rule.allow {
            if !HTTP_METHODS.contains(&allow.method.as_str()) {
                out.push(Violation::new(
                    format!("{base}.rules[{i}].allow.method"),
                    format!(
                        "unknown HTTP method {:?}; expected one of {}",
                        allow.method,
                        HTTP_METHODS.join(", ")
                    ),
                ));
            }
            if !(allow.path.starts_with('/') || allow.path.starts_with('*')) {
                out.push(Violation::new(
                    format!("{base}.rules[{i}].allow.path"),
                    format!(
                        "request path pattern {:?} must start with '/' or '*'",
                        allow.path
                    ),
                ));
            }
        }
        for (j, method) in rule.methods.iter().enumerate() {
            if !HTTP_METHODS.contains(&method.as_str()) {
                out.push(Violation::new(
                    format!("{base}.rules[{i}].methods[{j}]"),
                    format!(
                        "unknown HTTP method {method:?}; expected one of {}",
                        HTTP_METHODS.join(", ")
                    ),
                ));
            }
        }
        for (j, path) in rule.paths.iter().enumerate() {
            if !(path.starts_with('/') || path.starts_with('*')) {
                out.push(Violation::new(
                    format!("{base}.rules[{i}].paths[{j}]"),
                    format!("request path pattern {path:?} must start with '/' or '*'"),
                ));
            }
        }
    }
}

fn check_port(out: &mut Vec<Violation>, field: String, port: u32) {
    if !(1..=65535).contains(&port) {
        out.push(Violation::new(
            field,
            format!("port {port} is out of range; must be 1-65535"),
        ));
    }
}

/// Why `host` is not an acceptable endpoint host, if it is not.
fn host_problem(host: &str) -> Option<String> {
    if host.is_empty() {
        return Some("host is required".to_string());
    }
    if host.parse::<IpAddr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<Ipv6Addr>().is_ok())
    {
        return None;
    }
    if host == "*" || host == "**" {
        return Some(format!(
            "wildcard {host:?} would allow every host; name a domain, e.g. *.example.com"
        ));
    }
    let (wildcard, rest) = if let Some(rest) = host.strip_prefix("**.") {
        ("**.", rest)
    } else if let Some(rest) = host.strip_prefix("*.") {
        ("*.", rest)
    } else {
        ("", host)
    };
    if rest.contains('*') {
        return Some(format!(
            "host {host:?}: '*' is allowed only as a whole leading label, as in *.example.com or **.example.com"
        ));
    }
    if let Some(bad) = rest
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '.' || *c == '-'))
    {
        return Some(format!(
            "host {host:?} may contain only letters, digits, '.' and '-', found {bad:?}"
        ));
    }
    if rest.len() > 253 {
        return Some(format!(
            "host is {} characters; the limit is 253",
            rest.len()
        ));
    }
    let labels: Vec<&str> = rest.split('.').collect();
    if labels.iter().any(|label| label.is_empty()) {
        return Some(format!(
            "host {host:?} has an empty label (a leading, trailing or doubled '.')"
        ));
    }
    if labels.iter().any(|label| label.len() > 63) {
        return Some(format!(
            "host {host:?} has a label longer than 63 characters"
        ));
    }
    if !wildcard.is_empty() && labels.len() < 2 {
        return Some(format!(
            "wildcard {host:?} covers the whole top-level domain .{rest}; \
             name at least one more label, e.g. {wildcard}example.{rest}"
        ));
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../examples/policy.yaml");

    fn invalid(yaml: &str) -> Vec<Violation> {
        parse_policy(yaml).unwrap().validate().unwrap_err()
    }

    fn one_endpoint(host: &str) -> String {
        format!(
            "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - host: {host:?}\n        port: 443\n"
        )
    }

    #[test]
    fn example_policy_parses_and_validates() {
        let policy = parse_and_validate(EXAMPLE).unwrap();
        assert_eq!(policy.version, 1);
        let fs = policy.filesystem_policy.as_ref().unwrap();
        assert!(fs.include_workdir);
        assert!(fs.read_write.contains(&"/sandbox".to_string()));
        assert_eq!(
            policy.landlock.as_ref().unwrap().compatibility,
            LandlockCompatibility::BestEffort
        );
        assert_eq!(
            policy.process.as_ref().unwrap().run_as_user.as_deref(),
            Some("sandbox")
        );
        let github = &policy.network_policies["github"];
        assert_eq!(github.endpoints[0].host, "api.github.com");
        assert_eq!(github.endpoints[0].port, Some(443));
        assert_eq!(github.endpoints[1].host, "*.githubusercontent.com");
        assert_eq!(github.endpoints[1].ports, vec![443]);
        assert!(policy.network_policies.contains_key("pypi"));
        assert_eq!(policy.network_middlewares.len(), 1);
    }

    #[test]
    fn minimal_policy() {
        let policy = parse_and_validate("version: 1\n").unwrap();
        assert_eq!(policy, SandboxPolicy::default());
        assert_eq!(policy.canonical_json(), r#"{"version":1}"#);
    }

    #[test]
    fn version_must_be_one() {
        let v = invalid("version: 2\n");
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "version");
        assert!(v[0].message.contains("only version 1"), "{}", v[0]);
    }

    #[test]
    fn missing_version_is_a_syntax_error() {
        let err = parse_policy("network_policies: {}\n").unwrap_err();
        assert!(matches!(err, PolicyError::Syntax(_)));
        assert!(err.to_string().contains("version"), "{err}");
    }

    #[test]
    fn bad_port_has_exact_field_path() {
        let yaml = r#"
version: 1
network_policies:
  github:
    endpoints:
      - host: api.github.com
        port: 443
      - host: github.com
        port: 443
      - host: codeload.github.com
        ports: [70000, 443]
"#;
        let v = invalid(yaml);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "network_policies.github.endpoints[2].ports[0]");
        assert!(v[0].message.contains("must be 1-65535"), "{}", v[0]);
        assert!(v[0].message.contains("70000"));
    }

    #[test]
    fn port_zero_and_single_port_field() {
        let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { host: a.example.com, port: 0 }\n      - { host: b.example.com, port: 65536 }\n      - { host: c.example.com, port: 65535 }\n      - { host: d.example.com, port: 1 }\n";
        let v = invalid(yaml);
        let f: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            f,
            vec![
                "network_policies.p.endpoints[0].port",
                "network_policies.p.endpoints[1].port"
            ]
        );
    }

    #[test]
    fn negative_port_is_a_type_error() {
        let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { host: a.example.com, port: -1 }\n";
        assert!(matches!(parse_policy(yaml), Err(PolicyError::Syntax(_))));
    }

    #[test]
    fn port_or_ports_but_not_both() {
        let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { host: a.example.com }\n      - { host: b.example.com, port: 443, ports: [80] }\n      - { host: c.example.com, ports: [] }\n";
        let v = invalid(yaml);
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(v[0].field, "network_policies.p.endpoints[0].port");
        assert!(v[0].message.contains("port is required"));
        assert_eq!(v[1].field, "network_policies.p.endpoints[1]");
        assert!(v[1].message.contains("not both"));
        assert_eq!(v[2].field, "network_policies.p.endpoints[2].port");
    }

    #[test]
    fn every_violation_is_returned() {
        let yaml = r#"
version: 3
filesystem_policy:
  read_write: [/]
network_policies:
  github:
    endpoints:
      - host: ""
        port: 443
"#;
        let v = invalid(yaml);
        assert_eq!(
            v.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
            vec![
                "version",
                "filesystem_policy.read_write[0]",
                "network_policies.github.endpoints[0].host",
            ]
        );
        let err = parse_and_validate(yaml).unwrap_err();
        assert_eq!(err.violations(), v);
        let text = err.to_string();
        assert!(text.starts_with("policy is invalid: version: "), "{text}");
        for violation in &v {
            assert!(text.contains(&violation.to_string()), "{text}");
        }
    }

    #[test]
    fn host_required() {
        let yaml = "version: 1\nnetwork_policies:\n  github:\n    endpoints:\n      - port: 443\n";
        let v = invalid(yaml);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "network_policies.github.endpoints[0].host");
        assert_eq!(v[0].message, "host is required");
    }

    #[test]
    fn tld_wildcards_rejected() {
        for host in ["*.com", "**.io", "*", "**", "*.io", "**.com"] {
            let v = invalid(&one_endpoint(host));
            assert_eq!(v.len(), 1, "{host}: {v:?}");
            assert_eq!(v[0].field, "network_policies.p.endpoints[0].host");
            assert!(
                v[0].message.contains("whole top-level domain")
                    || v[0].message.contains("every host"),
                "{host}: {}",
                v[0]
            );
        }
    }

    #[test]
    fn domain_wildcards_accepted() {
        for host in [
            "*.github.com",
            "**.example.org",
            "api.github.com",
            "localhost",
            "10.0.0.1",
            "::1",
            "[2001:db8::1]",
            "Example.COM",
            "my-host.internal",
        ] {
            parse_and_validate(&one_endpoint(host)).unwrap_or_else(|e| panic!("{host}: {e}"));
        }
    }

    #[test]
    fn misplaced_wildcards_and_bad_chars_rejected() {
        for host in [
            "api.*.com",
            "api*.github.com",
            "*github.com",
            "*.*.github.com",
            "***.github.com",
            "github.com.*",
            "git_hub.com",
            "api.github.com/path",
            "https://github.com",
            "a..b.com",
            ".github.com",
            "github.com.",
            "host with space",
        ] {
            let v = invalid(&one_endpoint(host));
            assert_eq!(v.len(), 1, "{host}: {v:?}");
            assert_eq!(v[0].field, "network_policies.p.endpoints[0].host", "{host}");
        }
    }

    #[test]
    fn protocol_must_be_known() {
        let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { host: a.example.com, port: 443, protocol: grpc }\n      - { host: a.example.com, port: 443, protocol: tls }\n";
        let v = invalid(yaml);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "network_policies.p.endpoints[0].protocol");
        assert!(
            v[0].message.contains("tcp, udp, http, https, rest, tls"),
            "{}",
            v[0]
        );
    }

    #[test]
    fn rule_methods_and_paths() {
        let yaml = r#"
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        rules:
          - methods: [GET, HEAD, "*"]
            paths: ["/v1/**", "*"]
          - methods: [POST, FETCH, get]
            paths: ["v1/items"]
            access: read_write
"#;
        let v = invalid(yaml);
        assert_eq!(
            v.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
            vec![
                "network_policies.api.endpoints[0].rules[1].methods[1]",
                "network_policies.api.endpoints[0].rules[1].methods[2]",
                "network_policies.api.endpoints[0].rules[1].paths[0]",
            ]
        );
        assert!(
            v[0].message
                .contains("GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS")
        );
    }

    #[test]
    fn access_and_rules_are_exclusive() {
        let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - host: a.example.com\n        port: 443\n        access: full\n        rules: [{ methods: [GET] }]\n";
        let v = invalid(yaml);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "network_policies.p.endpoints[0]");
    }

    #[test]
    fn filesystem_path_rules() {
        let yaml = r#"
version: 1
filesystem_policy:
  read_only:
    - /usr
    - relative/path
    - /usr/../etc
    - ""
  read_write:
    - /tmp
    - /sandbox
    - /var/lib
    - ../up
"#;
        let v = invalid(yaml);
        let got: Vec<(&str, &str)> = v
            .iter()
            .map(|v| (v.field.as_str(), v.message.as_str()))
            .collect();
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(got[0].0, "filesystem_policy.read_only[1]");
        assert!(got[0].1.contains("absolute"));
        assert_eq!(got[1].0, "filesystem_policy.read_only[2]");
        assert!(got[1].1.contains("'..'"));
        assert_eq!(got[2].0, "filesystem_policy.read_only[3]");
        assert!(got[2].1.contains("empty"));
        assert_eq!(got[3].0, "filesystem_policy.read_write[3]");
        assert!(got[3].1.contains("absolute"));
        assert_eq!(got[4].0, "filesystem_policy.read_write[3]");
        assert!(got[4].1.contains("'..'"));
    }

    #[test]
    fn dotdot_inside_a_name_is_fine() {
        parse_and_validate(
            "version: 1\nfilesystem_policy:\n  read_only: [/opt/a..b, /x/..hidden]\n",
        )
        .unwrap();
    }

    #[test]
    fn root_never_read_write() {
        for root in ["/", "//", "/."] {
            let yaml = format!("version: 1\nfilesystem_policy:\n  read_write: [/tmp, {root:?}]\n");
            let v = invalid(&yaml);
            assert_eq!(v.len(), 1, "{root}");
            assert_eq!(v[0].field, "filesystem_policy.read_write[1]");
            assert!(v[0].message.contains("root"), "{}", v[0]);
            assert!(v[0].message.contains("read-write"), "{}", v[0]);
        }
        // Read-only root is allowed.
        parse_and_validate("version: 1\nfilesystem_policy:\n  read_only: [/]\n").unwrap();
    }

    #[test]
    fn path_limits() {
        let mut policy = SandboxPolicy::default();
        let fs = FilesystemPolicy {
            include_workdir: false,
            read_only: (0..MAX_PATHS).map(|i| format!("/p{i}")).collect(),
            read_write: (0..=MAX_PATHS).map(|i| format!("/w{i}")).collect(),
        };
        policy.filesystem_policy = Some(fs);
        let v = policy.validate().unwrap_err();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "filesystem_policy.read_write");
        assert!(v[0].message.contains("257"), "{}", v[0]);
        assert!(v[0].message.contains("256"), "{}", v[0]);

        let long = format!("/{}", "a".repeat(MAX_PATH_CHARS));
        let ok = format!("/{}", "a".repeat(MAX_PATH_CHARS - 1));
        policy.filesystem_policy = Some(FilesystemPolicy {
            read_only: vec![ok, long],
            ..FilesystemPolicy::default()
        });
        let v = policy.validate().unwrap_err();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "filesystem_policy.read_only[1]");
        assert!(v[0].message.contains("4096"), "{}", v[0]);
    }

    #[test]
    fn binary_paths_must_be_absolute() {
        let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints: [{ host: a.example.com, port: 443 }]\n    binaries:\n      - path: /usr/bin/git\n      - path: git\n      - {}\n";
        let v = invalid(yaml);
        assert_eq!(
            v.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
            vec![
                "network_policies.p.binaries[1].path",
                "network_policies.p.binaries[2].path"
            ]
        );
    }

    #[test]
    fn policy_and_middleware_names() {
        let long = "a".repeat(64);
        let yaml = format!(
            r#"
version: 1
network_policies:
  GitHub:
    endpoints: [{{ host: a.example.com, port: 443 }}]
  "":
    endpoints: [{{ host: a.example.com, port: 443 }}]
  {long}:
    endpoints: [{{ host: a.example.com, port: 443 }}]
  ok_name-1:
    endpoints: [{{ host: a.example.com, port: 443 }}]
network_middlewares:
  "bad.name":
    middleware: logger
  nameless:
    middleware: ""
"#
        );
        let v = invalid(&yaml);
        let got: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            got,
            vec![
                "network_policies[\"\"]",
                "network_policies[\"GitHub\"]",
                format!("network_policies.{long}").as_str(),
                "network_middlewares[\"bad.name\"]",
                "network_middlewares.nameless.middleware",
            ]
        );
        assert!(v[0].message.contains("empty"));
        assert!(v[1].message.contains("lowercase"));
        assert!(v[2].message.contains("63"));
    }

    #[test]
    fn duplicate_names_rejected() {
        let yaml =
            "version: 1\nnetwork_policies:\n  p:\n    endpoints: []\n  p:\n    endpoints: []\n";
        let err = parse_policy(yaml).unwrap_err();
        assert!(err.to_string().contains("duplicate"), "{err}");
        let json = r#"{"version":1,"network_middlewares":{"m":{"middleware":"a"},"m":{"middleware":"b"}}}"#;
        let err = parse_policy(json).unwrap_err();
        assert!(err.to_string().contains("duplicate name `m`"), "{err}");
    }

    #[test]
    fn null_sections_read_as_empty() {
        let p = parse_policy("version: 1\nnetwork_policies:\nnetwork_middlewares: ~\n").unwrap();
        assert!(p.network_policies.is_empty());
        assert!(p.network_middlewares.is_empty());
        let p = parse_policy(r#"{"version":1,"network_policies":null}"#).unwrap();
        assert!(p.network_policies.is_empty());
    }

    #[test]
    fn unknown_field_top_level() {
        let err = parse_policy("version: 1\nnetwork_polices: {}\n").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PolicyError::Syntax(_)));
        assert!(text.contains("network_polices"), "{text}");
        assert!(text.contains("line 2"), "{text}");
    }

    #[test]
    fn unknown_field_nested() {
        let yaml = "version: 1\nnetwork_policies:\n  github:\n    endpoints:\n      - host: api.github.com\n        port: 443\n        hots: x\n";
        let err = parse_policy(yaml).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("hots"), "{text}");
        assert!(text.contains("line 7"), "{text}");
        for nested in [
            "version: 1\nfilesystem_policy:\n  read_only: []\n  writable: []\n",
            "version: 1\nlandlock:\n  mode: strict\n",
            "version: 1\nprocess:\n  user: root\n",
            "version: 1\nnetwork_policies:\n  p:\n    title: p\n",
            "version: 1\nnetwork_policies:\n  p:\n    binaries: [{ path: /bin/sh, sha: x }]\n",
            "version: 1\nnetwork_policies:\n  p:\n    endpoints: [{ host: a.b, port: 1, rules: [{ deny: {} }] }]\n",
            "version: 1\nnetwork_middlewares:\n  m:\n    middleware: x\n    priority: 1\n",
        ] {
            assert!(
                matches!(parse_policy(nested), Err(PolicyError::Syntax(_))),
                "{nested}"
            );
        }
        let err = parse_policy(r#"{"version": 1, "process": {"run_as": "x"}}"#).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("run_as"), "{text}");
        assert!(text.contains("line 1 column"), "{text}");
    }

    #[test]
    fn bad_enum_values_are_syntax_errors() {
        for doc in [
            "version: 1\nlandlock:\n  compatibility: strict\n",
            "version: 1\nnetwork_policies:\n  p:\n    endpoints: [{ host: a.b, port: 1, access: write }]\n",
            "version: 1\nnetwork_middlewares:\n  m: { middleware: x, on_error: ignore }\n",
        ] {
            assert!(
                matches!(parse_policy(doc), Err(PolicyError::Syntax(_))),
                "{doc}"
            );
        }
    }

    #[test]
    fn empty_document() {
        for doc in ["", "   \n\t", "# only a comment\n", "---\n"] {
            let err = parse_policy(doc).unwrap_err();
            assert!(err.to_string().contains("empty"), "{doc:?}: {err}");
            let v = err.violations();
            assert_eq!(v.len(), 1);
            assert_eq!(v[0].field, "");
        }
    }

    /// Probe defect 1: a document nested 10k-131k levels deep under the size limit cost the
    /// parser minutes of CPU. The depth bound must refuse it before any parser runs, for every
    /// nesting shape the YAML grammar offers.
    #[test]
    fn deeply_nested_documents_are_refused_before_parsing() {
        let flow = |levels: usize| {
            format!(
                "version: 1\nx: {}1{}\n",
                "[".repeat(levels),
                "]".repeat(levels)
            )
        };
        let deepest_under_limit = (MAX_POLICY_BYTES - 16) / 2;
        let docs = [
            flow(10_000),
            flow(deepest_under_limit),
            format!("{}{}", "{\"a\":".repeat(20_000), "}".repeat(20_000)),
            format!("version: 1\nx:\n{}1\n", "- ".repeat(100_000)),
            format!("version: 1\nx:\r{}1\r", "- ".repeat(100_000)),
            format!("version: 1\nx: {}\n", "[".repeat(MAX_POLICY_BYTES - 32)),
        ];
        for doc in &docs {
            assert!(doc.len() <= MAX_POLICY_BYTES);
            let err = parse_policy(doc).unwrap_err();
            assert!(matches!(err, PolicyError::TooDeep(_)), "{err}");
            let message = err.to_string();
            assert!(
                message.contains("at most 64 levels"),
                "the error names the limit: {message}"
            );
            assert!(message.len() < 200, "the error does not echo the input");
        }
        // Real nesting up to the limit still parses to a field-level verdict.
        let at_limit = flow(60);
        assert!(matches!(
            parse_policy(&at_limit),
            Err(PolicyError::Syntax(msg)) if msg.contains("unknown field `x`")
        ));
    }

    #[test]
    fn null_documents_are_empty_without_a_second_parse() {
        for doc in ["~\n", "--- null\n", "---\n...\n", "# c\nnull # also c\n"] {
            let err = parse_policy(doc).unwrap_err();
            assert!(err.to_string().contains("empty"), "{doc:?}: {err}");
        }
        let err = parse_policy("version: [1\n").unwrap_err();
        assert!(!err.to_string().contains("empty"));
    }

    #[test]
    fn garbage_is_a_syntax_error() {
        for doc in ["{ not json", "version: [1", "- a\n- b\n", "just text"] {
            let err = parse_policy(doc).unwrap_err();
            assert!(matches!(err, PolicyError::Syntax(_)), "{doc}");
            assert!(
                err.to_string()
                    .starts_with("policy is not valid YAML or JSON: ")
            );
        }
    }

    #[test]
    fn oversize_rejected_before_parsing() {
        let mut doc = String::from("version: 1\n");
        doc.push_str(&"#".repeat(MAX_POLICY_BYTES));
        let err = parse_policy(&doc).unwrap_err();
        match &err {
            PolicyError::TooLarge { size, limit } => {
                assert_eq!(*size, doc.len());
                assert_eq!(*limit, MAX_POLICY_BYTES);
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(&doc.len().to_string()), "{text}");
        assert!(text.contains("262144"), "{text}");
        let v = err.violations();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "");

        let mut at_limit = String::from("version: 1\n");
        at_limit.push_str(&"#".repeat(MAX_POLICY_BYTES - at_limit.len()));
        assert_eq!(at_limit.len(), MAX_POLICY_BYTES);
        parse_policy(&at_limit).unwrap();
    }

    #[test]
    fn json_and_yaml_parse_equal() {
        let yaml = parse_policy(EXAMPLE).unwrap();
        let json_text = serde_json::to_string_pretty(&yaml).unwrap();
        assert!(json_text.trim_start().starts_with('{'));
        let json = parse_policy(&json_text).unwrap();
        assert_eq!(yaml, json);

        let yaml = parse_policy("version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - host: x.example.com\n        ports: [80, 443]\n").unwrap();
        let json = parse_policy(
            r#"  {"network_policies": {"a": {"endpoints": [{"ports": [80, 443], "host": "x.example.com"}]}}, "version": 1}"#,
        )
        .unwrap();
        assert_eq!(yaml, json);
    }

    #[test]
    fn yaml_flow_mapping_is_accepted() {
        let p = parse_policy("{version: 1, process: {run_as_user: app}}").unwrap();
        assert_eq!(p.process.unwrap().run_as_user.as_deref(), Some("app"));
    }

    #[test]
    fn hash_stable_across_formatting() {
        let a = r#"
# comment
version: 1
network_policies:
  pypi:
    endpoints:
      - host: pypi.org
        port: 443
  github:
    binaries: [{path: /usr/bin/git}]
    endpoints: [{port: 443, host: api.github.com}]
filesystem_policy:
  include_workdir: false
  read_only: [/usr]
landlock: {}
"#;
        let b = r#"{
  "landlock": {"compatibility": "best_effort"},
  "filesystem_policy": {"read_only": ["/usr"]},
  "version": 1,
  "network_policies": {
    "github": {"endpoints": [{"host": "api.github.com", "port": 443}], "binaries": [{"path": "/usr/bin/git"}]},
    "pypi": {"endpoints": [{"host": "pypi.org", "port": 443}]}
  }
}"#;
        let pa = parse_policy(a).unwrap();
        let pb = parse_policy(b).unwrap();
        assert_eq!(pa, pb);
        assert_eq!(pa.canonical_json(), pb.canonical_json());
        assert_eq!(pa.policy_hash(), pb.policy_hash());
        assert_eq!(pa.policy_hash().len(), 64);
        assert!(
            pa.policy_hash()
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );

        let mut changed = pa.clone();
        changed.network_policies.remove("pypi");
        assert_ne!(changed.policy_hash(), pa.policy_hash());
    }

    #[test]
    fn canonical_json_is_sorted_and_compact() {
        let policy = parse_policy(
            "version: 1\nnetwork_middlewares:\n  m:\n    order: 2\n    middleware: x\n    config: {zeta: 1, alpha: {b: 2, a: 1}}\n",
        )
        .unwrap();
        assert_eq!(
            policy.canonical_json(),
            r#"{"network_middlewares":{"m":{"config":{"alpha":{"a":1,"b":2},"zeta":1},"middleware":"x","order":2}},"version":1}"#
        );
        assert_eq!(
            SandboxPolicy::default().policy_hash(),
            hex::encode(Sha256::digest(br#"{"version":1}"#))
        );
    }

    #[test]
    fn to_yaml_round_trips() {
        let policy = parse_policy(EXAMPLE).unwrap();
        let yaml = policy.to_yaml();
        let back = parse_policy(&yaml).unwrap();
        assert_eq!(back, policy);
        assert_eq!(back.policy_hash(), policy.policy_hash());

        // Strings that YAML could mistake for other types must survive.
        let tricky = SandboxPolicy {
            process: Some(ProcessPolicy {
                run_as_user: Some("true".into()),
                run_as_group: Some("1000".into()),
            }),
            network_policies: BTreeMap::from([(
                "p".to_string(),
                NetworkPolicy {
                    name: None,
                    endpoints: vec![Endpoint {
                        host: "*.example.com".into(),
                        ports: vec![443, 8443],
                        protocol: Some("null".into()),
                        ..Endpoint::default()
                    }],
                    binaries: vec![Binary {
                        path: "/bin/~".into(),
                    }],
                },
            )]),
            network_middlewares: BTreeMap::from([(
                "m".to_string(),
                NetworkMiddleware {
                    middleware: "yes".into(),
                    config: serde_json::json!({"n": 1.5, "s": "on", "list": [1, "2", null]}),
                    on_error: Some(OnError::FailClosed),
                    order: Some(-3),
                },
            )]),
            ..SandboxPolicy::default()
        };
        assert_eq!(parse_policy(&tricky.to_yaml()).unwrap(), tricky);
        assert_eq!(
            parse_policy("version: 1\n").unwrap().to_yaml(),
            "version: 1\n"
        );
    }

    #[test]
    fn serialization_omits_empty_fields() {
        let yaml = "version: 1\nfilesystem_policy:\n  include_workdir: false\n  read_only: []\nnetwork_policies:\n  p:\n    endpoints:\n      - host: a.example.com\n        port: 443\n        rules: []\n    binaries: []\nnetwork_middlewares: {}\n";
        let p = parse_policy(yaml).unwrap();
        assert_eq!(
            p.canonical_json(),
            r#"{"filesystem_policy":{},"network_policies":{"p":{"endpoints":[{"host":"a.example.com","port":443}]}},"version":1}"#
        );
    }

    #[test]
    fn static_sections_fixed() {
        let first = parse_policy(EXAMPLE).unwrap();
        let mut next = first.clone();
        next.network_policies.remove("pypi");
        next.network_middlewares.clear();
        assert!(first.static_section_changes(&next).is_empty());

        next.filesystem_policy
            .as_mut()
            .unwrap()
            .read_write
            .push("/data".into());
        next.landlock = Some(Landlock {
            compatibility: LandlockCompatibility::HardRequirement,
        });
        next.process = None;
        let v = first.static_section_changes(&next);
        assert_eq!(
            v.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
            vec!["filesystem_policy", "landlock", "process"]
        );
        assert!(
            v[0].message
                .contains("only network_policies and network_middlewares")
        );

        let bare = SandboxPolicy::default();
        let empty_sections = SandboxPolicy {
            filesystem_policy: Some(FilesystemPolicy::default()),
            process: Some(ProcessPolicy::default()),
            ..SandboxPolicy::default()
        };
        assert!(bare.static_section_changes(&empty_sections).is_empty());
    }

    #[test]
    fn removed_network_access() {
        let old = parse_policy(EXAMPLE).unwrap();
        assert!(old.removes_network_access(&old).is_empty());

        let mut new = old.clone();
        new.network_policies.remove("pypi");
        assert_eq!(old.removes_network_access(&new), vec!["pypi".to_string()]);

        let mut new = old.clone();
        new.network_policies
            .get_mut("github")
            .unwrap()
            .endpoints
            .pop();
        assert_eq!(old.removes_network_access(&new), vec!["github".to_string()]);

        // Moving a port between `port` and `ports`, or adding endpoints, is not a removal.
        let mut new = old.clone();
        let github = new.network_policies.get_mut("github").unwrap();
        github.endpoints[0].port = None;
        github.endpoints[0].ports = vec![443, 80];
        github.endpoints.push(Endpoint {
            host: "github.com".into(),
            port: Some(22),
            ..Endpoint::default()
        });
        assert!(old.removes_network_access(&new).is_empty());
        assert!(new.removes_network_access(&old) == vec!["github".to_string()]);
    }

    #[test]
    fn policy_error_violations() {
        let err = PolicyError::Invalid(vec![
            Violation::new("version", "bad"),
            Violation::new("a", "b"),
        ]);
        assert_eq!(err.to_string(), "policy is invalid: version: bad; a: b");
        assert_eq!(err.violations().len(), 2);
        let err = PolicyError::Syntax("oops".into());
        assert_eq!(
            err.violations(),
            vec![Violation::document(
                "policy is not valid YAML or JSON: oops"
            )]
        );
    }

    #[test]
    fn upstream_shaped_policies_load() {
        let text = "version: 1\nnetwork_policies:\n  github:\n    name: github\n    endpoints:\n      - host: api.github.com\n        port: 443\n        protocol: rest\n        rules:\n          - allow:\n              method: GET\n              path: \"/repos/**\"\n      - host: uploads.github.com\n        port: 443\n        access: read-only\n";
        let policy = parse_and_validate(text).expect("an upstream-shaped policy loads");
        assert_eq!(
            policy.network_policies["github"].name.as_deref(),
            Some("github")
        );
        let renamed = text.replace("name: github", "name: gitlab");
        let err = parse_and_validate(&renamed).unwrap_err();
        assert!(
            err.violations()
                .iter()
                .any(|v| v.field == "network_policies.github.name")
        );
        let bad_method = text.replace("method: GET", "method: FETCH");
        let err = parse_and_validate(&bad_method).unwrap_err();
        assert!(
            err.violations()
                .iter()
                .any(|v| v.field == "network_policies.github.endpoints[0].rules[0].allow.method")
        );
    }
}
