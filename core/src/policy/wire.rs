//! The policy document as upstream OpenShell's typed message,
//! `openshell.sandbox.v1.SandboxPolicy`.
//!
//! `From<&SandboxPolicy>` writes a document into the message and `TryFrom<&pb::SandboxPolicy>`
//! reads one back. Fields below 1000 carry what they carry upstream, in upstream's spelling: a
//! display name, the `tool:` shorthand as `params["name"]`, the MCP body limit in
//! `json_rpc_max_body_bytes`, `tls`/`enforcement`/`access` as upstream's enums. Fields 1000
//! and up (this project's extensions, see `proto/openshell/sandbox/v1/sandbox.proto`) keep
//! what upstream's fields cannot tell apart.
//!
//! # Normal form
//!
//! The normal form of a policy, what a trip through the message gives back, is the policy
//! itself: `SandboxPolicy::try_from(&pb::SandboxPolicy::from(&p)) == Ok(p)` for every policy
//! whose canonical JSON nests at most [`MAX_NESTING_DEPTH`] levels, which includes every
//! policy parsed from text. So validation, warnings, the canonical JSON and the policy hash
//! are the same on both sides, and a receiver can check a stated hash against what it
//! decoded. Each distinction proto3 would otherwise lose has an extension field:
//!
//! - an absent value and an empty one (`rules: []`, `deny_rules: []`, GraphQL `fields: []`,
//!   `{any: []}`, `port: 0`, `name: ""`, `run_as_user: ""`, `harness: false`): a flag beside
//!   the upstream field. Validation refuses the first four and `port: 0` but accepts the
//!   absent forms, so losing them would turn refused policies into accepted ones; the rest
//!   mean the same as absent but would change the hash;
//! - a `json_rpc` section beside an `mcp` one, or one without a limit: its own message, since
//!   upstream's single body limit carries `mcp`'s;
//! - `tool:` beside `params.name`, and nested `params` maps (both refused by validation);
//! - middleware config numbers a double cannot bring back as written, and configs nested too
//!   deep for prost to decode as a Struct (see below).
//! - a `tls`, `enforcement` or `access` spelling the enum has no value for (refused by
//!   validation): the enum stays unset and the spelling travels in its `unknown_*` field.
//!
//! The other direction, message to document to message, is the identity on messages this
//! module wrote. A message from an upstream writer is read by upstream's meaning but may come
//! back spelled differently (upstream names an unnamed entry after its key, copies `port`
//! into `ports`, which reads as both with `ports` winning as upstream reads them, and writes
//! `tool:` as an unmarked `params.name`).
//!
//! # Middleware config numbers
//!
//! `google.protobuf.Struct` holds every number as a double. Integers up to 2^53 in magnitude
//! are exact doubles, and a double with no fraction in that range is read back as an integer,
//! so ordinary integer settings travel in the Struct alone. Numbers that would not come back
//! as written (larger integers, which upstream readers see rounded, and numbers written with
//! a zero fraction such as `1.0`, which would come back as `1`) make the writer add the whole
//! config as JSON text in `config_json`, which the reader prefers. A config nested deeper than
//! a Struct can be decoded travels in `config_json` alone. A Struct value that no JSON
//! document can hold (NaN, an infinity, a value of no kind) is refused with its field path.
//!
//! # What reading refuses
//!
//! Every problem is reported at once, each as a [`Violation`] addressed by the document's
//! field path (`network_middlewares.audit.config.limits[1]`): an unknown Landlock mode, a rule
//! without `allow`, a matcher with both a glob and a list, upstream's provenance flags
//! and derived fields (`advisor_proposed`, `provider_credentialed`, `token_grant_owner`),
//! which a document cannot hold, upstream's `credential_binding` and `mcp.versions`, which
//! this gateway cannot honour, an enum number upstream has not defined, malformed
//! extension fields, and a result nesting deeper than a document parsed from text may.

use std::collections::BTreeMap;

use openshell_proto::sandbox::v1 as pb;
use prost_types::value::Kind;
use serde_json::{Number, Value};

use super::schema::{
    AnyMatcher, Binary, Endpoint, EndpointSelector, FilesystemPolicy, GraphqlOperation,
    JsonRpcConfig, Landlock, LandlockCompatibility, McpConfig, NetworkMiddleware, NetworkPolicy,
    ParamMatcher, ProcessPolicy, QueryMatcher, Rule, RuleMatch, SandboxPolicy,
};
use super::{join_violations, key_segment};
use crate::nesting::{MAX_NESTING_DEPTH, check_nesting};
use crate::violation::Violation;

/// Why a `openshell.sandbox.v1.SandboxPolicy` message is not a policy document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy message cannot be read: {}", join_violations(.violations))]
pub struct WireError {
    /// Every problem found, addressed by the policy document's field paths.
    pub violations: Vec<Violation>,
}

/// Largest integer magnitude a double holds exactly, with every smaller integer.
const EXACT_DOUBLE_INT: u64 = 1 << 53;

/// Deepest middleware config (counting the config map itself as one level) written as a
/// Struct. An object level costs prost three nested messages (Value, Struct, map entry) and
/// prost refuses to decode messages nested past 100, which a bare `SandboxPolicy` reaches at
/// about 32 levels; 24 leaves room for the messages that carry the policy. A deeper config
/// would make the whole message undecodable, so it travels in `config_json` alone.
pub(crate) const STRUCT_MAX_DEPTH: usize = 24;

impl From<&SandboxPolicy> for pb::SandboxPolicy {
    fn from(policy: &SandboxPolicy) -> Self {
        pb::SandboxPolicy {
            version: policy.version,
            filesystem: policy
                .filesystem_policy
                .as_ref()
                .map(|fs| pb::FilesystemPolicy {
                    include_workdir: fs.include_workdir,
                    read_only: fs.read_only.clone(),
                    read_write: fs.read_write.clone(),
                }),
            landlock: policy.landlock.as_ref().map(|landlock| pb::LandlockPolicy {
                compatibility: landlock
                    .compatibility
                    .map(|c| c.as_str().to_string())
                    .unwrap_or_default(),
            }),
            process: policy.process.as_ref().map(|process| {
                let (run_as_user, explicit_empty_run_as_user) =
                    optional_text_to_wire(&process.run_as_user);
                let (run_as_group, explicit_empty_run_as_group) =
                    optional_text_to_wire(&process.run_as_group);
                pb::ProcessPolicy {
                    run_as_user,
                    run_as_group,
                    explicit_empty_run_as_user,
                    explicit_empty_run_as_group,
                }
            }),
            network_policies: policy
                .network_policies
                .iter()
                .map(|(key, np)| (key.clone(), network_policy_to_wire(np)))
                .collect(),
            network_middlewares: policy
                .network_middlewares
                .iter()
                .map(|(key, mw)| (key.clone(), middleware_to_wire(mw)))
                .collect(),
        }
    }
}

impl From<SandboxPolicy> for pb::SandboxPolicy {
    fn from(policy: SandboxPolicy) -> Self {
        Self::from(&policy)
    }
}

impl TryFrom<&pb::SandboxPolicy> for SandboxPolicy {
    type Error = WireError;

    fn try_from(message: &pb::SandboxPolicy) -> Result<Self, WireError> {
        let mut out = Reader::default();
        let policy = SandboxPolicy {
            version: message.version,
            filesystem_policy: message.filesystem.as_ref().map(|fs| FilesystemPolicy {
                include_workdir: fs.include_workdir,
                read_only: fs.read_only.clone(),
                read_write: fs.read_write.clone(),
            }),
            landlock: message
                .landlock
                .as_ref()
                .map(|landlock| out.landlock(landlock)),
            process: message.process.as_ref().map(|process| ProcessPolicy {
                run_as_user: optional_text_from_wire(
                    &process.run_as_user,
                    process.explicit_empty_run_as_user,
                ),
                run_as_group: optional_text_from_wire(
                    &process.run_as_group,
                    process.explicit_empty_run_as_group,
                ),
            }),
            network_policies: message
                .network_policies
                .iter()
                .map(|(key, np)| {
                    let base = format!("network_policies{}", key_segment(key));
                    (key.clone(), out.network_policy(&base, np))
                })
                .collect(),
            network_middlewares: message
                .network_middlewares
                .iter()
                .map(|(key, mw)| {
                    let base = format!("network_middlewares{}", key_segment(key));
                    (key.clone(), out.middleware(&base, mw))
                })
                .collect(),
        };
        if out.violations.is_empty() {
            // A document parsed from text never nests deeper than this; holding a decoded one
            // to the same bound keeps its canonical JSON readable by `parse_policy`.
            if let Err(too_deep) = check_nesting(&policy.canonical_json(), MAX_NESTING_DEPTH) {
                out.refuse("", format!("the policy {too_deep}"));
            }
        }
        if out.violations.is_empty() {
            Ok(policy)
        } else {
            Err(WireError {
                violations: out.violations,
            })
        }
    }
}

impl TryFrom<pb::SandboxPolicy> for SandboxPolicy {
    type Error = WireError;

    fn try_from(message: pb::SandboxPolicy) -> Result<Self, WireError> {
        Self::try_from(&message)
    }
}

// ---------------------------------------------------------------------------------------------
// Document to message.

/// The upstream string and the flag telling `Some("")` from `None`.
fn optional_text_to_wire(value: &Option<String>) -> (String, bool) {
    match value {
        None => (String::new(), false),
        Some(text) => (text.clone(), text.is_empty()),
    }
}

fn network_policy_to_wire(np: &NetworkPolicy) -> pb::NetworkPolicyRule {
    let (name, explicit_empty_name) = optional_text_to_wire(&np.name);
    pb::NetworkPolicyRule {
        name,
        endpoints: np.endpoints.iter().map(endpoint_to_wire).collect(),
        binaries: np.binaries.iter().map(binary_to_wire).collect(),
        explicit_empty_name,
    }
}

// `harness` is deprecated upstream but still part of the document, so it is carried.
#[allow(deprecated)]
fn binary_to_wire(binary: &Binary) -> pb::NetworkBinary {
    pb::NetworkBinary {
        path: binary.path.clone(),
        harness: binary.harness == Some(true),
        explicit_false_harness: binary.harness == Some(false),
    }
}

fn endpoint_to_wire(ep: &Endpoint) -> pb::NetworkEndpoint {
    let tls = WireMode::of(&ep.tls, TLS_SPELLINGS);
    let enforcement = WireMode::of(&ep.enforcement, ENFORCEMENT_SPELLINGS);
    let access = WireMode::of(&ep.access, ACCESS_SPELLINGS);
    pb::NetworkEndpoint {
        host: ep.host.clone(),
        port: ep.port.unwrap_or(0),
        protocol: ep.protocol.clone(),
        tls: tls.number,
        enforcement: enforcement.number,
        access: access.number,
        rules: ep
            .allow_rules()
            .iter()
            .map(|rule| pb::L7Rule {
                allow: Some(match_to_wire(&rule.allow).into()),
            })
            .collect(),
        allowed_ips: ep.allowed_ips.clone(),
        ports: ep.ports.clone(),
        deny_rules: ep
            .deny_rule_list()
            .iter()
            .map(|deny| match_to_wire(deny).into())
            .collect(),
        allow_encoded_slash: ep.allow_encoded_slash,
        persisted_queries: ep.persisted_queries.clone(),
        graphql_persisted_queries: ep
            .graphql_persisted_queries
            .iter()
            .map(|(hash, op)| {
                let wire = pb::GraphqlOperation {
                    operation_type: op.operation_type.clone(),
                    operation_name: op.operation_name.clone(),
                    fields: op.fields.clone().unwrap_or_default(),
                    explicit_empty_fields: op.fields.as_ref().is_some_and(Vec::is_empty),
                };
                (hash.clone(), wire)
            })
            .collect(),
        graphql_max_body_bytes: ep.graphql_max_body_bytes,
        path: ep.path.clone(),
        websocket_credential_rewrite: ep.websocket_credential_rewrite,
        request_body_credential_rewrite: ep.request_body_credential_rewrite,
        advisor_proposed: false,
        credential_signing: ep.credential_signing.clone(),
        signing_service: ep.signing_service.clone(),
        signing_region: ep.signing_region.clone(),
        // Upstream's one JSON-RPC body limit takes the `mcp` section's when there is one, as
        // upstream's own writer does; a `json_rpc` section then travels in its extension only.
        json_rpc_max_body_bytes: match (&ep.mcp, &ep.json_rpc) {
            (Some(mcp), _) => mcp.max_body_bytes,
            (None, Some(json_rpc)) => json_rpc.max_body_bytes,
            (None, None) => 0,
        },
        mcp: ep.mcp.as_ref().map(|mcp| pb::McpOptions {
            strict_tool_names: mcp.strict_tool_names,
            allow_all_known_mcp_methods: mcp.allow_all_known_mcp_methods,
            versions: Vec::new(),
        }),
        credential_binding: None,
        allow_uninspected_credentials: ep.allow_uninspected_credentials,
        provider_credentialed: false,
        token_grant_owner: String::new(),
        explicit_zero_port: ep.port == Some(0),
        explicit_empty_rules: ep.rules.as_ref().is_some_and(Vec::is_empty),
        explicit_empty_deny_rules: ep.deny_rules.as_ref().is_some_and(Vec::is_empty),
        json_rpc: ep.json_rpc.as_ref().map(|json_rpc| pb::JsonRpcOptions {
            max_body_bytes: json_rpc.max_body_bytes,
        }),
        unknown_tls: tls.unknown,
        unknown_enforcement: enforcement.unknown,
        unknown_access: access.unknown,
    }
}

/// The document's spellings of upstream's `NetworkTlsMode` values.
const TLS_SPELLINGS: &[(&str, i32)] = &[
    ("skip", pb::NetworkTlsMode::Skip as i32),
    ("terminate", pb::NetworkTlsMode::Terminate as i32),
    ("passthrough", pb::NetworkTlsMode::Passthrough as i32),
];
/// The document's spellings of upstream's `NetworkEnforcementMode` values.
const ENFORCEMENT_SPELLINGS: &[(&str, i32)] = &[
    ("enforce", pb::NetworkEnforcementMode::Enforce as i32),
    ("audit", pb::NetworkEnforcementMode::Audit as i32),
];
/// The document's spellings of upstream's `NetworkAccessPreset` values.
const ACCESS_SPELLINGS: &[(&str, i32)] = &[
    ("read-only", pb::NetworkAccessPreset::ReadOnly as i32),
    ("read-write", pb::NetworkAccessPreset::ReadWrite as i32),
    ("full", pb::NetworkAccessPreset::Full as i32),
];

/// One of an endpoint's enumerated modes as written: upstream's enum number, or (for a
/// spelling the enum has no value for, which validation refuses) 0 and the spelling itself in
/// the `unknown_*` extension, so the receiver refuses it again by the author's words.
struct WireMode {
    number: i32,
    unknown: String,
}

impl WireMode {
    fn of(text: &str, spellings: &[(&str, i32)]) -> Self {
        if text.is_empty() {
            return Self {
                number: 0,
                unknown: String::new(),
            };
        }
        match spellings.iter().find(|(spelling, _)| *spelling == text) {
            Some((_, number)) => Self {
                number: *number,
                unknown: String::new(),
            },
            None => Self {
                number: 0,
                unknown: text.to_owned(),
            },
        }
    }
}

/// The fields `L7Allow` and `L7DenyRule` share, so one conversion serves both.
#[derive(Default)]
struct WireMatch {
    method: String,
    path: String,
    command: String,
    query: BTreeMap<String, pb::L7QueryMatcher>,
    operation_type: String,
    operation_name: String,
    fields: Vec<String>,
    params: BTreeMap<String, pb::L7QueryMatcher>,
    explicit_empty_fields: bool,
    name_param_is_tool: bool,
    tool: Option<pb::L7QueryMatcher>,
    params_json: String,
}

macro_rules! wire_match_conversions {
    ($message:ty) => {
        impl From<WireMatch> for $message {
            fn from(m: WireMatch) -> Self {
                Self {
                    method: m.method,
                    path: m.path,
                    command: m.command,
                    query: m.query,
                    operation_type: m.operation_type,
                    operation_name: m.operation_name,
                    fields: m.fields,
                    params: m.params,
                    explicit_empty_fields: m.explicit_empty_fields,
                    name_param_is_tool: m.name_param_is_tool,
                    tool: m.tool,
                    params_json: m.params_json,
                }
            }
        }

        impl From<&$message> for WireMatch {
            fn from(m: &$message) -> Self {
                Self {
                    method: m.method.clone(),
                    path: m.path.clone(),
                    command: m.command.clone(),
                    query: m.query.clone(),
                    operation_type: m.operation_type.clone(),
                    operation_name: m.operation_name.clone(),
                    fields: m.fields.clone(),
                    params: m.params.clone(),
                    explicit_empty_fields: m.explicit_empty_fields,
                    name_param_is_tool: m.name_param_is_tool,
                    tool: m.tool.clone(),
                    params_json: m.params_json.clone(),
                }
            }
        }
    };
}

wire_match_conversions!(pb::L7Allow);
wire_match_conversions!(pb::L7DenyRule);

fn match_to_wire(rule: &RuleMatch) -> WireMatch {
    let nested = rule
        .params
        .values()
        .any(|p| matches!(p, ParamMatcher::Object(_)));
    let mut params = BTreeMap::new();
    for (key, matcher) in &rule.params {
        flatten_param(key, matcher, &mut params);
    }
    // `tool:` is upstream's shorthand for `params.name`, and upstream enforces it from there;
    // only when the rule also names its own `params.name` (refused by validation) must it
    // travel apart.
    let (name_param_is_tool, tool) = match &rule.tool {
        None => (false, None),
        Some(tool) if !rule.params.contains_key("name") => {
            params.insert("name".to_string(), matcher_to_wire(tool));
            (true, None)
        }
        Some(tool) => (false, Some(matcher_to_wire(tool))),
    };
    WireMatch {
        method: rule.method.clone(),
        path: rule.path.clone(),
        command: rule.command.clone(),
        query: rule
            .query
            .iter()
            .map(|(key, matcher)| (key.clone(), matcher_to_wire(matcher)))
            .collect(),
        operation_type: rule.operation_type.clone(),
        operation_name: rule.operation_name.clone(),
        fields: rule.fields.clone().unwrap_or_default(),
        params,
        explicit_empty_fields: rule.fields.as_ref().is_some_and(Vec::is_empty),
        name_param_is_tool,
        tool,
        params_json: if nested {
            params_to_json(&rule.params).to_string()
        } else {
            String::new()
        },
    }
}

/// Upstream's flat params keyspace: nested maps become dotted keys. Only for readers that skip
/// `params_json`; when two spellings collide the first in key order stays.
fn flatten_param(
    key: &str,
    matcher: &ParamMatcher,
    out: &mut BTreeMap<String, pb::L7QueryMatcher>,
) {
    match matcher {
        ParamMatcher::Matcher(m) => {
            out.entry(key.to_string())
                .or_insert_with(|| matcher_to_wire(m));
        }
        ParamMatcher::Object(children) => {
            for (child_key, child) in children {
                flatten_param(&format!("{key}.{child_key}"), child, out);
            }
        }
    }
}

/// The `params_json` shape: a glob is a string, an any-list an array, a nested map an object.
/// Unlike the document's own JSON it tells an empty nested map from `{any: []}`.
fn params_to_json(params: &BTreeMap<String, ParamMatcher>) -> Value {
    Value::Object(
        params
            .iter()
            .map(|(key, matcher)| (key.clone(), param_to_json(matcher)))
            .collect(),
    )
}

fn param_to_json(matcher: &ParamMatcher) -> Value {
    match matcher {
        ParamMatcher::Matcher(QueryMatcher::Glob(glob)) => Value::String(glob.clone()),
        ParamMatcher::Matcher(QueryMatcher::Any(any)) => {
            Value::Array(any.any.iter().cloned().map(Value::String).collect())
        }
        ParamMatcher::Object(children) => params_to_json(children),
    }
}

fn matcher_to_wire(matcher: &QueryMatcher) -> pb::L7QueryMatcher {
    match matcher {
        QueryMatcher::Glob(glob) => pb::L7QueryMatcher {
            glob: glob.clone(),
            ..pb::L7QueryMatcher::default()
        },
        QueryMatcher::Any(any) => pb::L7QueryMatcher {
            glob: String::new(),
            any: any.any.clone(),
            explicit_empty_any: any.any.is_empty(),
        },
    }
}

fn middleware_to_wire(mw: &NetworkMiddleware) -> pb::NetworkMiddlewareConfig {
    let (name, explicit_empty_name) = optional_text_to_wire(&mw.name);
    let depth = 1 + mw.config.values().map(json_depth).max().unwrap_or(0);
    let fits_struct = depth <= STRUCT_MAX_DEPTH;
    let exact = mw.config.values().all(exact_in_struct);
    pb::NetworkMiddlewareConfig {
        name,
        middleware: mw.middleware.clone(),
        config: (fits_struct && !mw.config.is_empty()).then(|| prost_types::Struct {
            fields: mw
                .config
                .iter()
                .map(|(key, value)| (key.clone(), json_to_struct_value(value)))
                .collect(),
        }),
        on_error: mw.on_error.clone(),
        endpoints: mw
            .endpoints
            .as_ref()
            .map(|selector| pb::MiddlewareEndpointSelector {
                include: selector.include.clone(),
                exclude: selector.exclude.clone(),
            }),
        order: mw.order,
        config_json: if fits_struct && exact {
            String::new()
        } else {
            // Serializing a map of JSON values cannot fail (string keys, no fallible impls).
            serde_json::to_string(&mw.config).unwrap_or_default()
        },
        explicit_empty_name,
    }
}

/// How many arrays and objects deep a value nests; a scalar is 0.
fn json_depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// True when the Struct form of `value` reads back as exactly `value`.
fn exact_in_struct(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u <= EXACT_DOUBLE_INT
            } else if let Some(i) = n.as_i64() {
                i.unsigned_abs() <= EXACT_DOUBLE_INT
            } else {
                // A float reads back as itself unless it would be taken for an integer
                // (which includes -0.0).
                !n.as_f64().is_some_and(reads_as_integer)
            }
        }
        Value::Array(items) => items.iter().all(exact_in_struct),
        Value::Object(map) => map.values().all(exact_in_struct),
        Value::Null | Value::Bool(_) | Value::String(_) => true,
    }
}

/// A double with no fraction and small enough that every integer up to it is exact.
fn reads_as_integer(x: f64) -> bool {
    x.fract() == 0.0 && x.abs() <= EXACT_DOUBLE_INT as f64
}

fn json_to_struct_value(value: &Value) -> prost_types::Value {
    let kind = match value {
        Value::Null => Kind::NullValue(prost_types::NullValue::NullValue.into()),
        Value::Bool(b) => Kind::BoolValue(*b),
        // Without serde_json's arbitrary_precision every number has an f64 reading.
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(json_to_struct_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(prost_types::Struct {
            fields: map
                .iter()
                .map(|(key, value)| (key.clone(), json_to_struct_value(value)))
                .collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

// ---------------------------------------------------------------------------------------------
// Message to document.

/// `Some("")` when the flag says the document wrote an empty string; the flag only counts
/// when the string is empty.
fn optional_text_from_wire(text: &str, explicit_empty: bool) -> Option<String> {
    (!text.is_empty() || explicit_empty).then(|| text.to_string())
}

/// Reads a message into a document, collecting every problem instead of stopping at the first.
#[derive(Default)]
struct Reader {
    violations: Vec<Violation>,
}

impl Reader {
    fn refuse(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation::new(field, message));
    }

    fn landlock(&mut self, landlock: &pb::LandlockPolicy) -> Landlock {
        let text = landlock.compatibility.as_str();
        let compatibility = if text.is_empty() {
            None
        } else {
            let mode = LandlockCompatibility::ALL
                .into_iter()
                .find(|mode| mode.as_str() == text);
            if mode.is_none() {
                let known: Vec<&str> = LandlockCompatibility::ALL
                    .iter()
                    .map(|m| m.as_str())
                    .collect();
                self.refuse(
                    "landlock.compatibility",
                    format!(
                        "unknown compatibility {text:?}; expected one of {}",
                        known.join(", ")
                    ),
                );
            }
            mode
        };
        Landlock { compatibility }
    }

    fn network_policy(&mut self, base: &str, np: &pb::NetworkPolicyRule) -> NetworkPolicy {
        NetworkPolicy {
            name: optional_text_from_wire(&np.name, np.explicit_empty_name),
            endpoints: np
                .endpoints
                .iter()
                .enumerate()
                .map(|(i, ep)| self.endpoint(&format!("{base}.endpoints[{i}]"), ep))
                .collect(),
            binaries: np.binaries.iter().map(binary_from_wire).collect(),
        }
    }

    fn endpoint(&mut self, base: &str, ep: &pb::NetworkEndpoint) -> Endpoint {
        if ep.advisor_proposed {
            self.refuse(
                format!("{base}.advisor_proposed"),
                "upstream's policy advisor provenance has no place in a policy document",
            );
        }
        if ep.provider_credentialed {
            self.refuse(
                format!("{base}.provider_credentialed"),
                "upstream's provider credential provenance has no place in a policy document",
            );
        }
        if !ep.token_grant_owner.is_empty() {
            self.refuse(
                format!("{base}.token_grant_owner"),
                "upstream's gateway derives the token grant owner itself; it has no place in a \
                 policy document",
            );
        }
        if ep.credential_binding.is_some() {
            self.refuse(
                format!("{base}.credential_binding"),
                "this gateway does not bind an endpoint's credentials to one provider; leave \
                 credential_binding out (attached providers' credentials apply to every endpoint)",
            );
        }
        if ep.mcp.as_ref().is_some_and(|mcp| !mcp.versions.is_empty()) {
            self.refuse(
                format!("{base}.mcp.versions"),
                "this gateway does not restrict MCP protocol versions; leave mcp.versions out",
            );
        }
        let tls = self.mode(base, "tls", ep.tls, &ep.unknown_tls, TLS_SPELLINGS);
        let enforcement = self.mode(
            base,
            "enforcement",
            ep.enforcement,
            &ep.unknown_enforcement,
            ENFORCEMENT_SPELLINGS,
        );
        let access = self.mode(
            base,
            "access",
            ep.access,
            &ep.unknown_access,
            ACCESS_SPELLINGS,
        );
        let rules = if !ep.rules.is_empty() {
            Some(
                ep.rules
                    .iter()
                    .enumerate()
                    .map(|(i, rule)| {
                        let loc = format!("{base}.rules[{i}].allow");
                        let allow = match &rule.allow {
                            Some(allow) => self.rule_match(&loc, WireMatch::from(allow)),
                            None => {
                                self.refuse(loc, "missing: a rule says what it allows under allow");
                                RuleMatch::default()
                            }
                        };
                        Rule { allow }
                    })
                    .collect(),
            )
        } else {
            ep.explicit_empty_rules.then(Vec::new)
        };
        let deny_rules = if !ep.deny_rules.is_empty() {
            Some(
                ep.deny_rules
                    .iter()
                    .enumerate()
                    .map(|(i, deny)| {
                        self.rule_match(&format!("{base}.deny_rules[{i}]"), WireMatch::from(deny))
                    })
                    .collect(),
            )
        } else {
            ep.explicit_empty_deny_rules.then(Vec::new)
        };
        // Without the extension (a message from upstream), field 22 is the `json_rpc` limit
        // unless an `mcp` section claims it.
        let json_rpc = match &ep.json_rpc {
            Some(json_rpc) => Some(JsonRpcConfig {
                max_body_bytes: json_rpc.max_body_bytes,
            }),
            None if ep.mcp.is_none() && ep.json_rpc_max_body_bytes > 0 => Some(JsonRpcConfig {
                max_body_bytes: ep.json_rpc_max_body_bytes,
            }),
            None => None,
        };
        Endpoint {
            host: ep.host.clone(),
            path: ep.path.clone(),
            port: (ep.port != 0 || ep.explicit_zero_port).then_some(ep.port),
            ports: ep.ports.clone(),
            protocol: ep.protocol.clone(),
            tls,
            enforcement,
            access,
            rules,
            allowed_ips: ep.allowed_ips.clone(),
            deny_rules,
            allow_encoded_slash: ep.allow_encoded_slash,
            websocket_credential_rewrite: ep.websocket_credential_rewrite,
            request_body_credential_rewrite: ep.request_body_credential_rewrite,
            allow_uninspected_credentials: ep.allow_uninspected_credentials,
            persisted_queries: ep.persisted_queries.clone(),
            graphql_persisted_queries: ep
                .graphql_persisted_queries
                .iter()
                .map(|(hash, op)| {
                    let op = GraphqlOperation {
                        operation_type: op.operation_type.clone(),
                        operation_name: op.operation_name.clone(),
                        fields: optional_list_from_wire(&op.fields, op.explicit_empty_fields),
                    };
                    (hash.clone(), op)
                })
                .collect(),
            graphql_max_body_bytes: ep.graphql_max_body_bytes,
            credential_signing: ep.credential_signing.clone(),
            signing_service: ep.signing_service.clone(),
            signing_region: ep.signing_region.clone(),
            json_rpc,
            mcp: ep.mcp.as_ref().map(|mcp| McpConfig {
                max_body_bytes: ep.json_rpc_max_body_bytes,
                strict_tool_names: mcp.strict_tool_names,
                allow_all_known_mcp_methods: mcp.allow_all_known_mcp_methods,
            }),
        }
    }

    /// An enumerated mode in the document's spelling: the enum's, or for UNSPECIFIED the
    /// `unknown_*` extension's (empty when absent). A number the enum does not have is refused.
    fn mode(
        &mut self,
        base: &str,
        field: &str,
        number: i32,
        unknown: &str,
        spellings: &[(&str, i32)],
    ) -> String {
        if number == 0 {
            return unknown.to_owned();
        }
        match spellings.iter().find(|(_, value)| *value == number) {
            Some((spelling, _)) => (*spelling).to_owned(),
            None => {
                let known: Vec<String> = spellings
                    .iter()
                    .map(|(spelling, value)| format!("{value} ({spelling})"))
                    .collect();
                self.refuse(
                    format!("{base}.{field}"),
                    format!(
                        "unknown {field} enum value {number}; expected 0 (unset) or one of {}",
                        known.join(", ")
                    ),
                );
                String::new()
            }
        }
    }

    fn rule_match(&mut self, loc: &str, mut m: WireMatch) -> RuleMatch {
        let named_tool = if m.name_param_is_tool {
            let tool = m.params.remove("name");
            if tool.is_none() {
                self.refuse(
                    format!("{loc}.tool"),
                    "name_param_is_tool is set but params has no name to take the tool from",
                );
            }
            tool
        } else {
            None
        };
        let tool = match (named_tool, m.tool.take()) {
            (Some(_), Some(_)) => {
                self.refuse(
                    format!("{loc}.tool"),
                    "the tool is given twice: in params.name (name_param_is_tool) and in tool",
                );
                None
            }
            (Some(tool), None) | (None, Some(tool)) => self.matcher(&format!("{loc}.tool"), &tool),
            (None, None) => None,
        };
        let params = if m.params_json.is_empty() {
            m.params
                .iter()
                .filter_map(|(key, matcher)| {
                    let field = format!("{loc}.params{}", key_segment(key));
                    let matcher = self.matcher(&field, matcher)?;
                    Some((key.clone(), ParamMatcher::Matcher(matcher)))
                })
                .collect()
        } else {
            self.params_json(&format!("{loc}.params"), &m.params_json)
        };
        RuleMatch {
            method: m.method,
            path: m.path,
            command: m.command,
            query: m
                .query
                .iter()
                .filter_map(|(key, matcher)| {
                    let field = format!("{loc}.query{}", key_segment(key));
                    Some((key.clone(), self.matcher(&field, matcher)?))
                })
                .collect(),
            operation_type: m.operation_type,
            operation_name: m.operation_name,
            fields: optional_list_from_wire(&m.fields, m.explicit_empty_fields),
            tool,
            params,
        }
    }

    /// `None` (with a violation) for a matcher that is both a glob and a list.
    fn matcher(&mut self, field: &str, matcher: &pb::L7QueryMatcher) -> Option<QueryMatcher> {
        let is_list = !matcher.any.is_empty() || matcher.explicit_empty_any;
        if is_list && !matcher.glob.is_empty() {
            self.refuse(
                field,
                "a matcher is one glob or an any-list of globs, not both",
            );
            return None;
        }
        Some(if is_list {
            QueryMatcher::Any(AnyMatcher {
                any: matcher.any.clone(),
            })
        } else {
            QueryMatcher::Glob(matcher.glob.clone())
        })
    }

    fn params_json(&mut self, field: &str, text: &str) -> BTreeMap<String, ParamMatcher> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => self.param_object(field, &map),
            Ok(_) => {
                self.refuse(field, "params_json is not a JSON object");
                BTreeMap::new()
            }
            Err(err) => {
                self.refuse(field, format!("params_json is not valid JSON: {err}"));
                BTreeMap::new()
            }
        }
    }

    fn param_object(
        &mut self,
        field: &str,
        map: &serde_json::Map<String, Value>,
    ) -> BTreeMap<String, ParamMatcher> {
        map.iter()
            .filter_map(|(key, value)| {
                let field = format!("{field}{}", key_segment(key));
                let matcher = match value {
                    Value::String(glob) => ParamMatcher::Matcher(QueryMatcher::Glob(glob.clone())),
                    Value::Array(items) => {
                        let globs: Option<Vec<String>> = items
                            .iter()
                            .map(|item| item.as_str().map(str::to_string))
                            .collect();
                        let Some(any) = globs else {
                            self.refuse(field, "an any-list in params_json holds only strings");
                            return None;
                        };
                        ParamMatcher::Matcher(QueryMatcher::Any(AnyMatcher { any }))
                    }
                    Value::Object(children) => {
                        ParamMatcher::Object(self.param_object(&field, children))
                    }
                    _ => {
                        self.refuse(
                            field,
                            "a params_json value is a string, an array of strings or an object",
                        );
                        return None;
                    }
                };
                Some((key.clone(), matcher))
            })
            .collect()
    }

    fn middleware(&mut self, base: &str, mw: &pb::NetworkMiddlewareConfig) -> NetworkMiddleware {
        let field = format!("{base}.config");
        let config = if !mw.config_json.is_empty() {
            match serde_json::from_str::<Value>(&mw.config_json) {
                Ok(Value::Object(map)) => map.into_iter().collect(),
                Ok(_) => {
                    self.refuse(field, "config_json is not a JSON object");
                    BTreeMap::new()
                }
                Err(err) => {
                    self.refuse(field, format!("config_json is not valid JSON: {err}"));
                    BTreeMap::new()
                }
            }
        } else {
            mw.config
                .as_ref()
                .map(|config| {
                    config
                        .fields
                        .iter()
                        .map(|(key, value)| {
                            let field = format!("{field}{}", key_segment(key));
                            (key.clone(), self.struct_value(&field, value))
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        NetworkMiddleware {
            name: optional_text_from_wire(&mw.name, mw.explicit_empty_name),
            middleware: mw.middleware.clone(),
            order: mw.order,
            config,
            on_error: mw.on_error.clone(),
            endpoints: mw.endpoints.as_ref().map(|selector| EndpointSelector {
                include: selector.include.clone(),
                exclude: selector.exclude.clone(),
            }),
        }
    }

    fn struct_value(&mut self, field: &str, value: &prost_types::Value) -> Value {
        match &value.kind {
            None => {
                self.refuse(field, "the value has no kind; use null_value for null");
                Value::Null
            }
            Some(Kind::NullValue(_)) => Value::Null,
            Some(Kind::BoolValue(b)) => Value::Bool(*b),
            Some(Kind::StringValue(s)) => Value::String(s.clone()),
            Some(Kind::NumberValue(x)) => match number_from_double(*x) {
                Some(n) => Value::Number(n),
                None => {
                    self.refuse(field, format!("{x} is not a number JSON can hold"));
                    Value::Null
                }
            },
            Some(Kind::ListValue(list)) => Value::Array(
                list.values
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.struct_value(&format!("{field}[{i}]"), item))
                    .collect(),
            ),
            Some(Kind::StructValue(object)) => Value::Object(
                object
                    .fields
                    .iter()
                    .map(|(key, item)| {
                        let field = format!("{field}{}", key_segment(key));
                        (key.clone(), self.struct_value(&field, item))
                    })
                    .collect(),
            ),
        }
    }
}

// `harness` is deprecated upstream but still part of the document, so it is carried.
#[allow(deprecated)]
fn binary_from_wire(binary: &pb::NetworkBinary) -> Binary {
    Binary {
        path: binary.path.clone(),
        harness: if binary.harness {
            Some(true)
        } else {
            binary.explicit_false_harness.then_some(false)
        },
    }
}

/// `Some(vec![])` when the flag says the document wrote an empty list; the flag only counts
/// when the list is empty.
fn optional_list_from_wire(items: &[String], explicit_empty: bool) -> Option<Vec<String>> {
    (!items.is_empty() || explicit_empty).then(|| items.to_vec())
}

/// An integer when the double has no fraction and is exact, so integer settings come back as
/// integers; otherwise the double itself. `None` for NaN and the infinities.
fn number_from_double(x: f64) -> Option<Number> {
    if reads_as_integer(x) {
        // In range and without fraction, so these casts are exact.
        let n = if x >= 0.0 {
            Number::from(x as u64)
        } else {
            Number::from(x as i64)
        };
        Some(n)
    } else {
        Number::from_f64(x)
    }
}

mod edits;
pub use edits::edits_from_wire;

#[cfg(test)]
mod tests;
