//! Endpoint checks: ports, hosts, address allowlists, protocol choice and the L7 rules of each
//! protocol. These follow upstream's policy crate and the supervisor's L7 validator; where
//! upstream only warns, this module records a warning rather than a violation.

use std::net::IpAddr;

use super::host;
use super::schema::{Endpoint, QueryMatcher, RuleMatch};
use super::validate::Findings;
use super::{
    ACCESS_PRESETS, CREDENTIAL_SIGNING_MODES, ENFORCEMENT_MODES, GRAPHQL_OPERATION_TYPES,
    HTTP_METHODS, PERSISTED_QUERY_MODES, PROTOCOLS, TLS_MODES, WEBSOCKET_METHODS, glob,
};

/// The protocols an endpoint may name, matched regardless of letter case as upstream does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Explicit L4 passthrough, no request inspection.
    Tcp,
    Rest,
    Websocket,
    Graphql,
    Sql,
    JsonRpc,
    Mcp,
}

impl Protocol {
    pub const ALL: [Self; 7] = [
        Self::Tcp,
        Self::Rest,
        Self::Websocket,
        Self::Graphql,
        Self::Sql,
        Self::JsonRpc,
        Self::Mcp,
    ];

    /// `None` for an empty or unknown protocol.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(text))
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Rest => "rest",
            Self::Websocket => "websocket",
            Self::Graphql => "graphql",
            Self::Sql => "sql",
            Self::JsonRpc => "json-rpc",
            Self::Mcp => "mcp",
        }
    }

    /// True for the protocols whose requests are inspected (all but `tcp`).
    pub const fn inspects_requests(self) -> bool {
        !matches!(self, Self::Tcp)
    }

    /// JSON-RPC and MCP, which share the JSON-RPC request machinery.
    pub const fn is_json_rpc_family(self) -> bool {
        matches!(self, Self::JsonRpc | Self::Mcp)
    }
}

/// Per-endpoint facts the rule checks need.
struct Ctx<'a> {
    base: &'a str,
    protocol: Option<Protocol>,
    strict_tool_names: bool,
    allow_all_mcp: bool,
}

impl Ctx<'_> {
    fn is(&self, p: Protocol) -> bool {
        self.protocol == Some(p)
    }
}

pub(super) fn check_endpoint(out: &mut Findings, base: &str, ep: &Endpoint) {
    let protocol = Protocol::parse(&ep.protocol);
    let ctx = Ctx {
        base,
        protocol,
        strict_tool_names: ep
            .mcp
            .as_ref()
            .and_then(|m| m.strict_tool_names)
            .unwrap_or(true),
        allow_all_mcp: ep
            .mcp
            .as_ref()
            .and_then(|m| m.allow_all_known_mcp_methods)
            .unwrap_or(false),
    };
    check_host_and_ports(out, &ctx, ep);
    check_allowed_ips(out, base, &ep.allowed_ips);
    check_modes(out, &ctx, ep);
    check_semantics(out, &ctx, ep);
    check_credentials(out, base, ep);
    check_graphql_registry(out, base, ep);
    check_deny_rules(out, &ctx, ep);
    check_allow_rules(out, &ctx, ep);
}

fn check_host_and_ports(out: &mut Findings, ctx: &Ctx<'_>, ep: &Endpoint) {
    let base = ctx.base;
    let host = ep.host.trim();
    if host.is_empty() {
        if let Some(p @ (Protocol::Mcp | Protocol::Tcp)) = ctx.protocol {
            out.error(
                format!("{base}.host"),
                format!(
                    "protocol {} requires a host; allowed_ips alone do not name the destination",
                    p.as_str()
                ),
            );
        } else if ep.allowed_ips.is_empty() {
            out.error(
                format!("{base}.host"),
                "host is required unless allowed_ips names the destination addresses",
            );
        }
    } else if let Some(problem) = host::endpoint_host_problem(&ep.host) {
        out.error(format!("{base}.host"), problem);
    }

    match (ep.port, ep.ports.is_empty()) {
        (None, true) => out.error(
            format!("{base}.port"),
            "port is required: set `port` or a non-empty `ports` list",
        ),
        // Upstream's writers send `port` and a copy of it in `ports`, and its readers take
        // `ports` when it is not empty; only a port the list leaves out is worth a word.
        (Some(port), false) if !ep.ports.contains(&port) => out.warn(
            format!("{base}.port"),
            format!("port {port} is not opened: ports is given too and wins; add {port} to ports or remove port"),
        ),
        _ => {}
    }
    if let Some(port) = ep.port {
        check_port(out, format!("{base}.port"), port);
    }
    for (i, port) in ep.ports.iter().enumerate() {
        check_port(out, format!("{base}.ports[{i}]"), *port);
    }
}

fn check_port(out: &mut Findings, field: String, port: u32) {
    if !(1..=65535).contains(&port) {
        out.error(
            field,
            format!("port {port} is out of range; must be 1-65535"),
        );
    }
}

/// Address ranges no allowlist may open: loopback, link-local and the unspecified address,
/// which would let a workload reach the sandbox host itself.
const FORBIDDEN_V4: [([u8; 4], u8, &str); 3] = [
    ([127, 0, 0, 0], 8, "loopback 127.0.0.0/8"),
    ([169, 254, 0, 0], 16, "link-local 169.254.0.0/16"),
    ([0, 0, 0, 0], 32, "the unspecified address 0.0.0.0"),
];

fn check_allowed_ips(out: &mut Findings, base: &str, entries: &[String]) {
    for (i, entry) in entries.iter().enumerate() {
        let field = format!("{base}.allowed_ips[{i}]");
        match parse_cidr(entry) {
            None => out.error(
                field,
                format!(
                    "{entry:?} is not an IP address or CIDR range, e.g. 10.0.5.0/24 or fd00::/8"
                ),
            ),
            Some(range) => {
                if let Some(what) = forbidden_overlap(range) {
                    out.error(
                        field,
                        format!("{entry:?} overlaps {what}, which an allowlist may never open"),
                    );
                }
            }
        }
    }
}

/// An address and prefix length, as a 128-bit value (IPv4 in its own space, flagged).
#[derive(Debug, Clone, Copy)]
struct Cidr {
    v4: bool,
    bits: u128,
    prefix: u8,
}

fn parse_cidr(text: &str) -> Option<Cidr> {
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let ip: IpAddr = addr.trim().parse().ok()?;
    let (v4, bits, max) = match ip {
        IpAddr::V4(v4) => (true, u128::from(u32::from(v4)), 32u8),
        IpAddr::V6(v6) => (false, u128::from(v6), 128u8),
    };
    let prefix = match prefix {
        None => max,
        Some(p) => {
            let p: u8 = p.trim().parse().ok()?;
            (p <= max).then_some(p)?
        }
    };
    Some(Cidr { v4, bits, prefix })
}

fn forbidden_overlap(range: Cidr) -> Option<&'static str> {
    let overlaps = |other: Cidr| {
        if other.v4 != range.v4 {
            return false;
        }
        let width = if range.v4 { 32 } else { 128 };
        let common = range.prefix.min(other.prefix);
        let shift = width - u32::from(common);
        let mask = |bits: u128| if shift >= 128 { 0 } else { bits >> shift };
        mask(range.bits) == mask(other.bits)
    };
    for (octets, prefix, what) in FORBIDDEN_V4 {
        let bits = u128::from(u32::from_be_bytes(octets));
        if overlaps(Cidr {
            v4: true,
            bits,
            prefix,
        }) {
            return Some(what);
        }
    }
    let v6 = [
        (1u128, 128u8, "loopback ::1"),
        (0xfe80u128 << 112, 10, "link-local fe80::/10"),
        (0, 128, "the unspecified address ::"),
    ];
    for (bits, prefix, what) in v6 {
        if overlaps(Cidr {
            v4: false,
            bits,
            prefix,
        }) {
            return Some(what);
        }
    }
    None
}

fn check_modes(out: &mut Findings, ctx: &Ctx<'_>, ep: &Endpoint) {
    let base = ctx.base;
    if !ep.protocol.is_empty() && ctx.protocol.is_none() {
        out.error(
            format!("{base}.protocol"),
            format!(
                "unknown protocol {:?}; expected one of {}, or no protocol for TCP passthrough",
                ep.protocol,
                PROTOCOLS.join(", ")
            ),
        );
    }
    one_of(out, format!("{base}.tls"), "tls", &ep.tls, TLS_MODES);
    one_of(
        out,
        format!("{base}.enforcement"),
        "enforcement",
        &ep.enforcement,
        ENFORCEMENT_MODES,
    );
    one_of(
        out,
        format!("{base}.access"),
        "access",
        &ep.access,
        ACCESS_PRESETS,
    );
    one_of(
        out,
        format!("{base}.persisted_queries"),
        "persisted_queries",
        &ep.persisted_queries,
        PERSISTED_QUERY_MODES,
    );
    if matches!(ep.tls.as_str(), "terminate" | "passthrough") {
        out.warn(
            format!("{base}.tls"),
            format!(
                "tls: {} is deprecated and has no effect; TLS is terminated automatically, \
                 use tls: skip to turn that off",
                ep.tls
            ),
        );
    }
    if !ep.path.is_empty() && !ep.path.starts_with('/') && ep.path != "**" {
        out.error(
            format!("{base}.path"),
            format!("endpoint path {:?} must start with '/' or be '**'", ep.path),
        );
    }
    if ctx.is(Protocol::Sql) && ep.enforcement == "enforce" {
        out.error(
            format!("{base}.enforcement"),
            "SQL enforcement needs full SQL parsing, which is not available; use enforcement: audit",
        );
    }
    if ep.mcp.is_some() && !ctx.is(Protocol::Mcp) && !ctx.is(Protocol::Tcp) {
        out.error(
            format!("{base}.mcp"),
            "mcp options are only valid for protocol mcp",
        );
    }
    if ep.tls == "skip"
        && ctx.protocol.is_some_and(Protocol::inspects_requests)
        && ep.effective_ports().contains(&443)
    {
        out.warn(
            format!("{base}.tls"),
            "tls: skip with L7 inspection on port 443: encrypted traffic cannot be inspected",
        );
    }
    let graphql_capable = ctx.is(Protocol::Graphql) || ctx.is(Protocol::Websocket);
    if !graphql_capable
        && !ctx.is(Protocol::Tcp)
        && (!ep.persisted_queries.is_empty()
            || !ep.graphql_persisted_queries.is_empty()
            || ep.graphql_max_body_bytes > 0)
    {
        out.warn(
            base,
            "GraphQL endpoint fields are ignored unless protocol is graphql or websocket",
        );
    }
    if ep.json_rpc.is_some()
        && !ctx.protocol.is_some_and(Protocol::is_json_rpc_family)
        && !ctx.is(Protocol::Tcp)
    {
        out.warn(
            format!("{base}.json_rpc"),
            "json_rpc options are ignored unless protocol is json-rpc or mcp",
        );
    }
    if ep.websocket_credential_rewrite
        && !(ctx.is(Protocol::Rest) || ctx.is(Protocol::Websocket) || ctx.is(Protocol::Tcp))
    {
        out.warn(
            format!("{base}.websocket_credential_rewrite"),
            "ignored unless protocol is rest or websocket",
        );
    }
    if ep.request_body_credential_rewrite && !(ctx.is(Protocol::Rest) || ctx.is(Protocol::Tcp)) {
        out.warn(
            format!("{base}.request_body_credential_rewrite"),
            "ignored unless protocol is rest",
        );
    }
}

fn one_of(out: &mut Findings, field: String, what: &str, value: &str, allowed: &[&str]) {
    if !value.is_empty() && !allowed.contains(&value) {
        out.error(
            field,
            format!(
                "unknown {what} value {value:?}; expected one of {}",
                allowed.join(", ")
            ),
        );
    }
}

/// The combination rules of upstream's shared L7 validator.
fn check_semantics(out: &mut Findings, ctx: &Ctx<'_>, ep: &Endpoint) {
    let base = ctx.base;
    let rules = ep.allow_rules();
    let denies = ep.deny_rule_list();
    let has_rules = !rules.is_empty();
    let has_denies = !denies.is_empty();
    let has_access = !ep.access.is_empty();
    let inspected = ctx.protocol.is_some_and(Protocol::inspects_requests);
    let mcp = ctx.is(Protocol::Mcp);
    let json_rpc = ctx.is(Protocol::JsonRpc);
    let name = ep.protocol.as_str();

    if ep.rules.as_ref().is_some_and(Vec::is_empty) {
        out.error(
            format!("{base}.rules"),
            "rules list is empty, which would deny all traffic; use access: full or remove rules",
        );
    }
    if ep.deny_rules.as_ref().is_some_and(Vec::is_empty) {
        out.error(
            format!("{base}.deny_rules"),
            "deny_rules list is empty and would have no effect; remove it",
        );
    }
    if ctx.is(Protocol::Tcp) {
        if has_access || has_rules || has_denies {
            out.error(
                format!("{base}.protocol"),
                "protocol tcp does not support access, rules or deny_rules; remove those L7 fields",
            );
        }
        for field in tcp_incompatible_fields(ep) {
            out.error(
                format!("{base}.{field}"),
                format!("protocol tcp does not support the L7-only field {field}; remove it"),
            );
        }
    }
    if has_rules && has_access {
        out.error(
            format!("{base}.access"),
            "rules and access are mutually exclusive; set one of them",
        );
    }
    if ctx.protocol.is_some_and(Protocol::is_json_rpc_family) && has_access {
        let hint = if mcp {
            "use rules/deny_rules, or set mcp.allow_all_known_mcp_methods: true to allow every MCP method"
        } else {
            "use explicit rules with allow.method, such as \"*\""
        };
        out.error(
            format!("{base}.access"),
            format!("protocol {name} does not support access presets; {hint}"),
        );
    }
    if json_rpc && !has_rules && !has_access {
        out.error(
            format!("{base}.rules"),
            format!("protocol {name} requires explicit rules with allow.method"),
        );
    }
    if inspected && !mcp && !json_rpc && !has_rules && !has_access {
        out.error(
            format!("{base}.rules"),
            format!("protocol {name} requires rules or access to define the allowed traffic"),
        );
    }
    if mcp && !has_rules && !has_access && !ctx.allow_all_mcp {
        out.error(
            format!("{base}.rules"),
            "protocol mcp requires rules when mcp.allow_all_known_mcp_methods is not true",
        );
    }
    let deny_all = has_rules && rules.iter().all(|r| r.allow.allows_nothing());
    if deny_all && !(mcp && ctx.allow_all_mcp) {
        out.error(
            format!("{base}.rules"),
            "rules would deny all traffic (no rule names a method, path, command, operation or \
             tool); use access: full or add what each rule allows",
        );
    }
    if has_denies && !inspected {
        out.error(
            format!("{base}.deny_rules"),
            "deny_rules require an inspecting protocol (rest, websocket, graphql, sql, json-rpc \
             or mcp)",
        );
    }
    if has_denies && !mcp && !has_rules && !has_access {
        out.error(
            format!("{base}.deny_rules"),
            "deny_rules require rules or access to define the base allow set",
        );
    }
}

/// Fields that only mean something under request inspection, as authored on this endpoint.
fn tcp_incompatible_fields(ep: &Endpoint) -> Vec<&'static str> {
    let mut fields = Vec::new();
    let checks: [(&'static str, bool); 10] = [
        ("enforcement", !ep.enforcement.is_empty()),
        ("path", !ep.path.is_empty()),
        ("allow_encoded_slash", ep.allow_encoded_slash),
        (
            "websocket_credential_rewrite",
            ep.websocket_credential_rewrite,
        ),
        (
            "request_body_credential_rewrite",
            ep.request_body_credential_rewrite,
        ),
        ("persisted_queries", !ep.persisted_queries.is_empty()),
        (
            "graphql_persisted_queries",
            !ep.graphql_persisted_queries.is_empty(),
        ),
        ("graphql_max_body_bytes", ep.graphql_max_body_bytes > 0),
        ("json_rpc", ep.json_rpc.is_some()),
        ("mcp", ep.mcp.is_some()),
    ];
    for (field, present) in checks {
        if present {
            fields.push(field);
        }
    }
    fields
}

fn check_credentials(out: &mut Findings, base: &str, ep: &Endpoint) {
    if ep.credential_signing.is_empty() {
        return;
    }
    if !CREDENTIAL_SIGNING_MODES.contains(&ep.credential_signing.as_str()) {
        out.error(
            format!("{base}.credential_signing"),
            format!(
                "unknown credential_signing value {:?}; expected one of {}",
                ep.credential_signing,
                CREDENTIAL_SIGNING_MODES.join(", ")
            ),
        );
    }
    if ep.signing_service.is_empty() {
        out.error(
            format!("{base}.signing_service"),
            "signing_service is required when credential_signing is set, e.g. bedrock or s3",
        );
    }
    if ep.request_body_credential_rewrite {
        out.error(
            format!("{base}.request_body_credential_rewrite"),
            "credential_signing and request_body_credential_rewrite are mutually exclusive",
        );
    }
}

fn check_graphql_registry(out: &mut Findings, base: &str, ep: &Endpoint) {
    for (key, op) in &ep.graphql_persisted_queries {
        let loc = format!(
            "{base}.graphql_persisted_queries{}",
            super::key_segment(key)
        );
        check_graphql_fields(
            out,
            &loc,
            &op.operation_type,
            &op.operation_name,
            op.fields.as_deref(),
            true,
        );
    }
}

fn check_graphql_rule(out: &mut Findings, loc: &str, rule: &RuleMatch) {
    check_graphql_fields(
        out,
        loc,
        &rule.operation_type,
        &rule.operation_name,
        rule.fields.as_deref(),
        true,
    );
}

fn check_graphql_fields(
    out: &mut Findings,
    loc: &str,
    operation_type: &str,
    operation_name: &str,
    fields: Option<&[String]>,
    required: bool,
) {
    if operation_type.is_empty() {
        if required {
            out.error(
                format!("{loc}.operation_type"),
                format!(
                    "operation_type is required for GraphQL rules; expected one of {}",
                    GRAPHQL_OPERATION_TYPES.join(", ")
                ),
            );
        }
    } else if !GRAPHQL_OPERATION_TYPES.contains(&operation_type.to_ascii_lowercase().as_str()) {
        out.error(
            format!("{loc}.operation_type"),
            format!(
                "unknown operation_type {operation_type:?}; expected one of {}",
                GRAPHQL_OPERATION_TYPES.join(", ")
            ),
        );
    }
    if !operation_name.is_empty()
        && let Some(problem) = bracket_problem(operation_name)
    {
        out.warn(format!("{loc}.operation_name"), problem);
    }
    let Some(fields) = fields else { return };
    if fields.is_empty() {
        out.error(
            format!("{loc}.fields"),
            "fields list is empty; omit fields to match every root field",
        );
    }
    for (i, field) in fields.iter().enumerate() {
        if field.is_empty() {
            out.error(format!("{loc}.fields[{i}]"), "field glob is empty");
        } else if let Some(problem) = bracket_problem(field) {
            out.warn(format!("{loc}.fields[{i}]"), problem);
        }
    }
}

/// Upstream's glob lint, a warning only: unbalanced `[]` or `{}`.
fn bracket_problem(pattern: &str) -> Option<String> {
    for (open, close) in [('[', ']'), ('{', '}')] {
        let mut depth = 0i32;
        for c in pattern.chars() {
            if c == open {
                depth += 1;
            } else if c == close {
                if depth == 0 {
                    return Some(format!("glob {pattern:?} has an unmatched {close:?}"));
                }
                depth -= 1;
            }
        }
        if depth > 0 {
            return Some(format!("glob {pattern:?} has an unclosed {open:?}"));
        }
    }
    None
}

fn endpoint_has_tool_allow_selectors(ctx: &Ctx<'_>, ep: &Endpoint) -> bool {
    ctx.is(Protocol::Mcp) && ep.allow_rules().iter().any(|r| r.allow.has_tool_selector())
}

fn method_covers_tools_call(method: &str) -> bool {
    method == "tools/call"
        || method == "*"
        || glob::path_tokens(method).is_some_and(|t| glob::tokens_match(&t, "tools/call"))
}

fn check_deny_rules(out: &mut Findings, ctx: &Ctx<'_>, ep: &Endpoint) {
    let tool_allows = endpoint_has_tool_allow_selectors(ctx, ep);
    for (i, deny) in ep.deny_rule_list().iter().enumerate() {
        let loc = format!("{}.deny_rules[{i}]", ctx.base);
        if tool_allows && method_covers_tools_call(&deny.method) && !deny.has_tool_selector() {
            out.error(
                format!("{loc}.method"),
                "this method denies every tool call and conflicts with the MCP tool allow rules; \
                 add tool or params.name to deny specific tools, or remove the tool allow rules",
            );
        }
        check_http_method(out, ctx, &format!("{loc}.method"), &deny.method);
        if !deny.path.is_empty()
            && let Some(problem) = bracket_problem(&deny.path)
        {
            out.warn(format!("{loc}.path"), problem);
        }
        check_query(out, &loc, deny);
        check_json_rpc_rule(out, ctx, &loc, deny);
        if !deny.command.is_empty() && ctx.is(Protocol::Rest) {
            out.warn(
                format!("{loc}.command"),
                "command is for the SQL protocol and is ignored on REST",
            );
        }
        check_graphql_usage(out, ctx, &loc, deny, "deny");
    }
}

fn check_allow_rules(out: &mut Findings, ctx: &Ctx<'_>, ep: &Endpoint) {
    let tool_allows = endpoint_has_tool_allow_selectors(ctx, ep);
    let websocket_graphql = ctx.is(Protocol::Websocket) && endpoint_has_graphql_policy(ep);
    for (i, rule) in ep.allow_rules().iter().enumerate() {
        let loc = format!("{}.rules[{i}].allow", ctx.base);
        let allow = &rule.allow;
        if ctx.is(Protocol::Rest) || ctx.is(Protocol::Websocket) {
            check_http_method(out, ctx, &format!("{loc}.method"), &allow.method);
            check_query(out, &loc, allow);
        }
        if tool_allows && !allow.has_tool_selector() {
            let broad = method_covers_tools_call(&allow.method)
                || (allow.method.is_empty() && ctx.allow_all_mcp);
            if broad {
                out.error(
                    format!("{loc}.method"),
                    "this method allows every tool call and conflicts with the MCP tool allow \
                     rules; add tool or params.name to narrow tools/call, or remove the tool \
                     allow rules",
                );
            }
        }
        check_json_rpc_rule(out, ctx, &loc, allow);
        if websocket_graphql && allow.method.eq_ignore_ascii_case("WEBSOCKET_TEXT") {
            out.error(
                format!("{loc}.method"),
                "a WebSocket endpoint with GraphQL operation policy must allow client messages \
                 with operation_type/operation_name/fields rules, not WEBSOCKET_TEXT",
            );
        }
        check_graphql_usage(out, ctx, &loc, allow, "allow");
    }
}

fn check_graphql_usage(out: &mut Findings, ctx: &Ctx<'_>, loc: &str, rule: &RuleMatch, kind: &str) {
    let graphql_fields = rule.has_graphql_fields();
    if ctx.is(Protocol::Websocket) && graphql_fields && rule.has_transport_fields() {
        out.error(
            loc,
            format!(
                "WebSocket GraphQL {kind} rules must not combine method/path/query with \
                 operation_type/operation_name/fields; use separate rules"
            ),
        );
    }
    if ctx.is(Protocol::Graphql) || (ctx.is(Protocol::Websocket) && graphql_fields) {
        check_graphql_rule(out, loc, rule);
    } else if graphql_fields {
        out.warn(
            loc,
            "GraphQL rule fields are ignored unless protocol is graphql or websocket",
        );
    }
}

fn endpoint_has_graphql_policy(ep: &Endpoint) -> bool {
    !ep.graphql_persisted_queries.is_empty()
        || (!ep.persisted_queries.is_empty() && ep.persisted_queries != "deny")
        || ep
            .allow_rules()
            .iter()
            .any(|r| r.allow.has_graphql_fields())
        || ep
            .deny_rule_list()
            .iter()
            .any(RuleMatch::has_graphql_fields)
}

fn check_http_method(out: &mut Findings, ctx: &Ctx<'_>, field: &str, method: &str) {
    if method.is_empty() || !(ctx.is(Protocol::Rest) || ctx.is(Protocol::Websocket)) {
        return;
    }
    let known = if ctx.is(Protocol::Websocket) {
        WEBSOCKET_METHODS
    } else {
        HTTP_METHODS
    };
    if !known.contains(&method.to_ascii_uppercase().as_str()) {
        out.warn(
            field,
            format!(
                "unknown HTTP/WebSocket method {method:?}; standard methods: {}",
                known.join(", ")
            ),
        );
    }
}

fn check_query(out: &mut Findings, loc: &str, rule: &RuleMatch) {
    for (key, matcher) in &rule.query {
        let field = format!("{loc}.query{}", super::key_segment(key));
        check_matcher(out, &field, matcher);
    }
}

fn check_matcher(out: &mut Findings, field: &str, matcher: &QueryMatcher) {
    match matcher {
        QueryMatcher::Glob(glob) => {
            if let Some(problem) = bracket_problem(glob) {
                out.warn(field, problem);
            }
        }
        QueryMatcher::Any(any) => {
            if any.any.is_empty() {
                out.error(
                    format!("{field}.any"),
                    "any list is empty; list at least one glob",
                );
            }
            for glob in &any.any {
                if let Some(problem) = bracket_problem(glob) {
                    out.warn(format!("{field}.any"), problem);
                }
            }
        }
    }
}

fn matcher_has_wildcard(matcher: &QueryMatcher) -> bool {
    matcher.globs().into_iter().any(glob::has_wildcard)
}

/// The JSON-RPC-family rule surface: `method`, MCP's `tool` and `params`, and which of them
/// other protocols may not use.
fn check_json_rpc_rule(out: &mut Findings, ctx: &Ctx<'_>, loc: &str, rule: &RuleMatch) {
    let method = rule.method.as_str();
    let has_path_or_query = !rule.path.is_empty() || !rule.query.is_empty();
    if ctx.is(Protocol::JsonRpc) {
        if method.is_empty() {
            out.error(
                format!("{loc}.method"),
                "method is required in json-rpc rules",
            );
        } else if method != "*" && glob::has_wildcard(method) {
            out.error(
                format!("{loc}.method"),
                "json-rpc method rules take an exact method name, or \"*\" for every method; \
                 other wildcards are not supported",
            );
        }
        if !rule.params.is_empty() {
            out.error(
                format!("{loc}.params"),
                "json-rpc rules do not support params matchers yet",
            );
        }
        if rule.tool.is_some() {
            out.error(
                format!("{loc}.tool"),
                "tool matching is only valid for protocol mcp",
            );
        }
        if has_path_or_query {
            out.error(loc, "json-rpc rules match on method, not path or query");
        }
        return;
    }
    if ctx.is(Protocol::Mcp) {
        if !method.is_empty() {
            if let Some(problem) = bracket_problem(method) {
                out.warn(format!("{loc}.method"), problem);
            }
            if glob::has_wildcard(method) && !method.starts_with("tools/") {
                out.error(
                    format!("{loc}.method"),
                    "MCP method globs are only valid for the tools/ method family; omit method \
                     to use the endpoint method profile",
                );
            }
        }
        if method.is_empty() && !ctx.allow_all_mcp {
            out.error(
                format!("{loc}.method"),
                "method is required when mcp.allow_all_known_mcp_methods is not true",
            );
        } else if rule.has_tool_selector() && !method.is_empty() && method != "tools/call" {
            out.error(
                format!("{loc}.method"),
                format!(
                    "must be tools/call when the rule uses tool or params.name, got {method:?}"
                ),
            );
        }
        if let Some(tool) = &rule.tool {
            check_matcher(out, &format!("{loc}.tool"), tool);
            if !ctx.strict_tool_names && matcher_has_wildcard(tool) {
                out.error(
                    format!("{loc}.tool"),
                    "wildcard tool-name matchers require mcp.strict_tool_names to stay enabled",
                );
            }
        }
        check_mcp_params(out, ctx, loc, rule);
        if has_path_or_query {
            out.error(loc, "mcp rules match on method and tool, not path or query");
        }
        return;
    }
    if rule.tool.is_some() {
        out.error(
            format!("{loc}.tool"),
            "tool matching is only valid for protocol mcp",
        );
    }
    if !rule.params.is_empty() {
        out.error(
            format!("{loc}.params"),
            "params matching is only valid for protocol mcp",
        );
    }
}

fn check_mcp_params(out: &mut Findings, ctx: &Ctx<'_>, loc: &str, rule: &RuleMatch) {
    use super::schema::ParamMatcher;
    if rule.tool.is_some() && rule.params.contains_key("name") {
        out.error(
            format!("{loc}.params.name"),
            "an MCP rule may use tool or params.name, not both",
        );
    }
    for (key, matcher) in &rule.params {
        let field = format!("{loc}.params{}", super::key_segment(key));
        match (key.as_str(), matcher) {
            ("name", ParamMatcher::Matcher(m)) => {
                check_matcher(out, &field, m);
                if !ctx.strict_tool_names && matcher_has_wildcard(m) {
                    out.error(
                        field,
                        "wildcard tool-name matchers require mcp.strict_tool_names to stay enabled",
                    );
                }
            }
            _ => out.error(
                field,
                "MCP tool argument matching is not supported yet; only params.name may be matched",
            ),
        }
    }
}
