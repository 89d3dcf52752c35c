//! The serde types of the policy document, in the upstream OpenShell shape.
//!
//! Every struct rejects unknown fields: a misspelt key that is silently ignored would leave a
//! sandbox with less (or more) access than the operator wrote down. Enumerated values such as
//! `protocol` or `access` are kept as the strings the operator wrote, so a document comes back
//! exactly as it was sent; [`super::validate`] decides which values are allowed and reports the
//! others with their field paths, as upstream does.
//!
//! Empty strings, empty lists and zero limits are left out when a document is written, which
//! is also how upstream writes them: reading such a field back gives the same value, so the
//! round trip is exact.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The only schema version this crate understands.
pub const SUPPORTED_VERSION: u32 = 1;

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
        deserialize_with = "unique_keys"
    )]
    pub network_policies: BTreeMap<String, NetworkPolicy>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys"
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

/// Static: which paths the workload may read, and which it may also write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemPolicy {
    /// Always written, as upstream writes it, so `false` is visible in what comes back.
    #[serde(default)]
    pub include_workdir: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<String>,
}

/// Static: how strictly the Landlock LSM must be enforced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Landlock {
    /// Absent means [`LandlockCompatibility::BestEffort`]; kept absent so `landlock: {}` comes
    /// back as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<LandlockCompatibility>,
}

impl Landlock {
    /// The mode in force: the written one, or upstream's default.
    pub fn effective_compatibility(&self) -> LandlockCompatibility {
        self.compatibility.unwrap_or_default()
    }
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

impl LandlockCompatibility {
    pub const ALL: [Self; 2] = [Self::BestEffort, Self::HardRequirement];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BestEffort => "best_effort",
            Self::HardRequirement => "hard_requirement",
        }
    }
}

/// Static: the identity the workload runs as. An absent or empty field leaves the choice to
/// the runtime.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<String>,
}

/// One entry of `network_policies`: which binaries may reach which endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    /// A display name for logs; the map key stays the entry's identity. Defaults to the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binaries: Vec<Binary>,
}

impl NetworkPolicy {
    /// The name upstream shows in logs: `name` when set, otherwise the map key.
    pub fn display_name<'a>(&'a self, key: &'a str) -> &'a str {
        match self.name.as_deref() {
            Some(name) if !name.is_empty() => name,
            _ => key,
        }
    }
}

/// One allowed destination and how its traffic is inspected.
///
/// `port` and `ports` are `u32` although ports fit in `u16`: a value such as 70000 must reach
/// validation, which reports it with its field path, instead of failing as a type error.
/// `rules`, `deny_rules` and GraphQL `fields` are optional lists because upstream refuses an
/// explicitly empty list, which must therefore stay distinguishable from an absent one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Host name, IP literal or DNS glob. May be empty when `allowed_ips` names the
    /// destinations.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// HTTP path glob choosing between L7 endpoints that share a host and port.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u32>,
    /// One of [`super::PROTOCOLS`] (any letter case), or empty for TCP passthrough.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// One of [`super::TLS_MODES`], or empty for automatic TLS termination.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tls: String,
    /// One of [`super::ENFORCEMENT_MODES`], or empty (audit).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub enforcement: String,
    /// One of [`super::ACCESS_PRESETS`], or empty when `rules` say what is allowed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub access: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<Rule>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_ips: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_rules: Option<Vec<RuleMatch>>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_encoded_slash: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub websocket_credential_rewrite: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub request_body_credential_rewrite: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_uninspected_credentials: bool,
    /// `deny` or `allow_registered`; empty means `deny`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub persisted_queries: String,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys"
    )]
    pub graphql_persisted_queries: BTreeMap<String, GraphqlOperation>,
    /// Zero means upstream's default (64 KiB).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graphql_max_body_bytes: u32,
    /// One of [`super::CREDENTIAL_SIGNING_MODES`], or empty for no signing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub credential_signing: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signing_service: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signing_region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_rpc: Option<JsonRpcConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpConfig>,
}

impl Endpoint {
    /// The ports this endpoint covers: `ports` when given, otherwise `port`.
    pub fn effective_ports(&self) -> Vec<u32> {
        if self.ports.is_empty() {
            self.port.into_iter().collect()
        } else {
            self.ports.clone()
        }
    }

    /// The allow rules, empty when none are given.
    pub fn allow_rules(&self) -> &[Rule] {
        self.rules.as_deref().unwrap_or_default()
    }

    /// The deny rules, empty when none are given.
    pub fn deny_rule_list(&self) -> &[RuleMatch] {
        self.deny_rules.as_deref().unwrap_or_default()
    }
}

/// `json_rpc:` options of a `protocol: json-rpc` endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRpcConfig {
    /// Zero means upstream's default (64 KiB).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_body_bytes: u32,
}

/// `mcp:` options of a `protocol: mcp` endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// Zero means upstream's default (64 KiB).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_body_bytes: u32,
    /// Absent means `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_tool_names: Option<bool>,
    /// Absent means `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_all_known_mcp_methods: Option<bool>,
}

/// One trusted GraphQL persisted query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphqlOperation {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
}

/// One entry of `rules`: upstream wraps what a rule matches in `allow`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub allow: RuleMatch,
}

/// What one allow rule (under `allow`) or one `deny_rules` entry matches. Which keys apply
/// depends on the endpoint's protocol: `method`/`path`/`query` for REST and WebSocket,
/// `command` for SQL, `operation_type`/`operation_name`/`fields` for GraphQL, `method`/`tool`/
/// `params` for MCP and `method` for JSON-RPC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleMatch {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub method: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys"
    )]
    pub query: BTreeMap<String, QueryMatcher>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<QueryMatcher>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys"
    )]
    pub params: BTreeMap<String, ParamMatcher>,
}

impl RuleMatch {
    /// True when the rule names any GraphQL operation field.
    pub fn has_graphql_fields(&self) -> bool {
        !self.operation_type.is_empty() || !self.operation_name.is_empty() || self.fields.is_some()
    }

    /// True when the rule names any HTTP request field.
    pub fn has_transport_fields(&self) -> bool {
        !self.method.is_empty() || !self.path.is_empty() || !self.query.is_empty()
    }

    /// True when the rule selects MCP tools, by `tool` or by `params.name`.
    pub fn has_tool_selector(&self) -> bool {
        self.tool.is_some() || self.params.contains_key("name")
    }

    /// True when, as an allow rule, this names nothing a request could be matched on: no
    /// method, path, command, GraphQL operation or MCP tool. Upstream refuses rules that all
    /// look like this, because together they would deny every request.
    pub fn allows_nothing(&self) -> bool {
        self.method.is_empty()
            && self.path.is_empty()
            && self.command.is_empty()
            && self.operation_type.is_empty()
            && self.operation_name.is_empty()
            && !self.has_tool_selector()
    }
}

/// A value matcher: a glob (`repo: "NVIDIA/*"`) or a list of them (`repo: {any: [...]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QueryMatcher {
    Glob(String),
    Any(AnyMatcher),
}

impl QueryMatcher {
    /// Every glob this matcher holds.
    pub fn globs(&self) -> Vec<&str> {
        match self {
            QueryMatcher::Glob(glob) => vec![glob.as_str()],
            QueryMatcher::Any(any) => any.any.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnyMatcher {
    #[serde(default)]
    pub any: Vec<String>,
}

/// An MCP parameter matcher: a value matcher, or a map of nested parameter matchers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamMatcher {
    Matcher(QueryMatcher),
    Object(BTreeMap<String, ParamMatcher>),
}

/// An executable allowed to use a network policy's endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binary {
    // Defaulted so a missing path is reported by validation, with the other problems.
    #[serde(default)]
    pub path: String,
    /// Deprecated upstream and without effect; accepted and returned so old files load and
    /// come back as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<bool>,
}

/// One entry of `network_middlewares`: an HTTP middleware and the hosts it runs for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkMiddleware {
    /// A display name; defaults to the map key, which stays the entry's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    // Defaulted so a missing implementation is reported by validation, with the other problems.
    #[serde(default)]
    pub middleware: String,
    /// Lower runs first; unique across the policy. Defaults to 0.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub order: i32,
    /// Owned by the middleware implementation; only its shape (a map) is checked here.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys"
    )]
    pub config: BTreeMap<String, Value>,
    /// One of [`super::ON_ERROR_MODES`], or empty (`fail_closed`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub on_error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<EndpointSelector>,
}

impl NetworkMiddleware {
    /// Whether a failure of this middleware refuses the request (the default).
    pub fn fails_closed(&self) -> bool {
        self.on_error.is_empty() || self.on_error == "fail_closed"
    }
}

/// The hosts a middleware runs for: any `include` pattern, unless an `exclude` pattern matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSelector {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

/// Deserializes a string-keyed map, rejecting a key that appears twice. Both serde_json and
/// serde_norway would otherwise keep the last entry and silently drop the earlier one.
/// A null map (`network_policies:` with nothing after it) reads as empty.
fn unique_keys<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct KeysVisitor<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for KeysVisitor<V> {
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
            while let Some(key) = map.next_key::<String>()? {
                if out.contains_key(&key) {
                    return Err(de::Error::custom(format!(
                        "duplicate key `{key}`; keys must be unique"
                    )));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_option(KeysVisitor(PhantomData))
}
