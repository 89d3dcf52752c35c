//! Endpoints that can admit the same connection or request but disagree on how to handle it.
//!
//! Several endpoints may each allow part of a host's traffic, and their allow rules simply add
//! up. What cannot add up is how a connection is set up (TLS termination, passthrough, address
//! allowlist) or how a request is parsed and credentialed: the supervisor must pick exactly one
//! endpoint for that, and if two of equal path specificity disagree, which one wins would depend
//! on iteration order. Upstream refuses such policies; so does this module.

use std::collections::{BTreeSet, HashMap};

use super::glob::{self, Budget, Token};
use super::key_segment;
use super::l7::Protocol;
use super::schema::{Endpoint, SandboxPolicy};
use super::validate::Findings;

/// Upstream's default body limit for GraphQL and JSON-RPC inspection.
const DEFAULT_BODY_LIMIT: u32 = 64 * 1024;

/// Most pairs of endpoints compared in one policy. Only pairs that share a port and whose
/// hosts could overlap are compared at all, so real policies stay far below this; a document
/// built to make the check quadratic is refused instead of costing the gateway minutes.
pub const MAX_OVERLAP_CHECKS: usize = 200_000;

/// One endpoint with what the comparison needs, computed once.
struct Prepared<'a> {
    field: String,
    endpoint: &'a Endpoint,
    /// Distinct ports, ascending.
    ports: Vec<u32>,
    /// `None` for an endpoint without a host, which overlaps every host.
    host: Option<Vec<Token>>,
    /// The literal labels after the host's last wildcard label, lowercased. Two hosts can only
    /// match a common name when one's tail ends the other's, which is what the index uses.
    tail: Vec<String>,
}

fn prepare<'a>(field: String, endpoint: &'a Endpoint) -> Prepared<'a> {
    let mut ports: Vec<u32> = endpoint
        .effective_ports()
        .into_iter()
        .filter(|p| *p > 0)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    let lower = endpoint.host.to_ascii_lowercase();
    let labels: Vec<&str> = lower.split('.').collect();
    let literal_from = labels
        .iter()
        .rposition(|label| label.contains('*'))
        .map_or(0, |at| at + 1);
    Prepared {
        field,
        endpoint,
        ports,
        host: (!endpoint.host.is_empty()).then(|| glob::delimited_tokens(&endpoint.host)),
        tail: labels[literal_from..]
            .iter()
            .map(|l| l.to_string())
            .collect(),
    }
}

type Key<'a> = (u32, &'a [String]);

pub(super) fn check(out: &mut Findings, policy: &SandboxPolicy) {
    let prepared: Vec<Prepared<'_>> = policy
        .network_policies
        .iter()
        .flat_map(|(key, np)| {
            np.endpoints.iter().enumerate().map(move |(i, endpoint)| {
                prepare(
                    format!("network_policies{}.endpoints[{i}]", key_segment(key)),
                    endpoint,
                )
            })
        })
        .collect();
    // Indexes over the endpoints already visited: by port and exact tail, by port and every
    // suffix of the tail, hostless ones by port, and all by port.
    let mut exact: HashMap<Key<'_>, Vec<usize>> = HashMap::new();
    let mut ending: HashMap<Key<'_>, Vec<usize>> = HashMap::new();
    let mut hostless: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut by_port: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut seen_for = vec![usize::MAX; prepared.len()];
    let mut checks = 0usize;
    for (j, right) in prepared.iter().enumerate() {
        let mut candidates = Vec::new();
        let mut add = |list: Option<&Vec<usize>>, candidates: &mut Vec<usize>| {
            for &i in list.into_iter().flatten() {
                if seen_for[i] != j {
                    seen_for[i] = j;
                    candidates.push(i);
                }
            }
        };
        for &port in &right.ports {
            if right.host.is_none() {
                add(by_port.get(&port), &mut candidates);
                continue;
            }
            for k in 0..=right.tail.len() {
                add(exact.get(&(port, &right.tail[k..])), &mut candidates);
            }
            add(ending.get(&(port, right.tail.as_slice())), &mut candidates);
            add(hostless.get(&port), &mut candidates);
        }
        // Name the earliest conflicting endpoint, whatever order the indexes returned.
        candidates.sort_unstable();
        for i in candidates {
            checks += 1;
            if checks > MAX_OVERLAP_CHECKS {
                out.error(
                    "network_policies",
                    format!(
                        "too many endpoints share ports and hosts to check them for conflicts \
                         (more than {MAX_OVERLAP_CHECKS} pairs); merge endpoints that cover the \
                         same hosts"
                    ),
                );
                return;
            }
            if out.budget.exhausted() {
                return;
            }
            if let Some(message) = conflict(&prepared[i], right, &out.budget) {
                out.error(&right.field, message);
                // One report per endpoint: fixing it shows the next, and a policy of many
                // clashing endpoints does not produce a quadratic list.
                break;
            }
        }
        for &port in &right.ports {
            by_port.entry(port).or_default().push(j);
            if right.host.is_none() {
                hostless.entry(port).or_default().push(j);
                continue;
            }
            exact
                .entry((port, right.tail.as_slice()))
                .or_default()
                .push(j);
            for k in 0..=right.tail.len() {
                ending.entry((port, &right.tail[k..])).or_default().push(j);
            }
        }
    }
}

/// Why `right` cannot coexist with the earlier `left`, if it cannot.
fn conflict(left: &Prepared<'_>, right: &Prepared<'_>, budget: &Budget) -> Option<String> {
    let (a, b) = (left.endpoint, right.endpoint);
    let shared: Vec<u32> = left
        .ports
        .iter()
        .filter(|p| right.ports.binary_search(p).is_ok())
        .copied()
        .collect();
    let hosts_overlap = match (&left.host, &right.host) {
        (Some(x), Some(y)) => glob::tokens_overlap(x, y, '.', budget),
        _ => true,
    };
    if shared.is_empty() || !hosts_overlap {
        return None;
    }
    let mut conflicts = connection_conflicts(a, b);
    if shapes_requests(a)
        && shapes_requests(b)
        && paths_overlap(&a.path, &b.path, budget)
        && path_specificity(&a.path) == path_specificity(&b.path)
    {
        conflicts.extend(request_conflicts(a, b));
    }
    if conflicts.is_empty() {
        return None;
    }
    Some(format!(
        "overlaps {} on port(s) {} but disagrees on {}; endpoints that can match the same \
         connection must agree on these",
        left.field,
        shared
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        conflicts.join(", ")
    ))
}

fn paths_overlap(a: &str, b: &str, budget: &Budget) -> bool {
    let everything = |p: &str| p.is_empty() || p == "**" || p == "/**";
    if everything(a) || everything(b) {
        return true;
    }
    match (glob::path_tokens(a), glob::path_tokens(b)) {
        (Some(a), Some(b)) => glob::tokens_overlap(&a, &b, '/', budget),
        // A path the matcher would refuse is reported elsewhere; assume overlap here.
        _ => true,
    }
}

/// How specific a path selector is: the more non-star characters, the more specific.
fn path_specificity(path: &str) -> usize {
    path.chars().filter(|c| *c != '*').count()
}

fn is_tcp(ep: &Endpoint) -> bool {
    Protocol::parse(&ep.protocol) == Some(Protocol::Tcp)
}

/// Whether the endpoint takes part in choosing request handling, not just in admitting a host.
fn shapes_requests(ep: &Endpoint) -> bool {
    (!ep.protocol.is_empty() && !is_tcp(ep)) || !ep.allowed_ips.is_empty() || !ep.tls.is_empty()
}

fn push<T: PartialEq + std::fmt::Debug>(out: &mut Vec<String>, field: &str, a: T, b: T) {
    if a != b {
        out.push(format!("{field} ({a:?} vs {b:?})"));
    }
}

fn connection_conflicts(a: &Endpoint, b: &Endpoint) -> Vec<String> {
    let mut out = Vec::new();
    let transport = |ep: &Endpoint| if is_tcp(ep) { "tcp" } else { "proxied" };
    push(&mut out, "transport", transport(a), transport(b));
    let tls = |ep: &Endpoint| {
        if ep.tls == "skip" {
            "skip"
        } else {
            "terminate"
        }
    };
    push(&mut out, "tls", tls(a), tls(b));
    push(&mut out, "allowed_ips", ip_set(a), ip_set(b));
    out
}

fn ip_set(ep: &Endpoint) -> BTreeSet<String> {
    ep.allowed_ips
        .iter()
        .map(|ip| ip.trim().to_ascii_lowercase())
        .collect()
}

fn request_conflicts(a: &Endpoint, b: &Endpoint) -> Vec<String> {
    let mut out = Vec::new();
    let protocol = |ep: &Endpoint| {
        if is_tcp(ep) {
            String::new()
        } else {
            ep.protocol.to_ascii_lowercase()
        }
    };
    push(&mut out, "protocol", protocol(a), protocol(b));
    let enforcement = |ep: &Endpoint| {
        if ep.enforcement == "enforce" {
            "enforce"
        } else {
            "audit"
        }
    };
    push(&mut out, "enforcement", enforcement(a), enforcement(b));
    push(
        &mut out,
        "allow_encoded_slash",
        a.allow_encoded_slash,
        b.allow_encoded_slash,
    );
    push(
        &mut out,
        "websocket_credential_rewrite",
        a.websocket_credential_rewrite,
        b.websocket_credential_rewrite,
    );
    push(
        &mut out,
        "request_body_credential_rewrite",
        a.request_body_credential_rewrite,
        b.request_body_credential_rewrite,
    );
    let pa = Protocol::parse(&a.protocol);
    let pb = Protocol::parse(&b.protocol);
    if pa == Some(Protocol::Websocket) && pb == Some(Protocol::Websocket) {
        push(
            &mut out,
            "GraphQL operation policy",
            has_graphql_policy(a),
            has_graphql_policy(b),
        );
    }
    push(
        &mut out,
        "credential_signing",
        &a.credential_signing,
        &b.credential_signing,
    );
    push(
        &mut out,
        "signing_service",
        &a.signing_service,
        &b.signing_service,
    );
    push(
        &mut out,
        "signing_region",
        &a.signing_region,
        &b.signing_region,
    );
    if pa == Some(Protocol::Graphql) && pb == Some(Protocol::Graphql) {
        push(
            &mut out,
            "graphql_max_body_bytes",
            body_limit(a.graphql_max_body_bytes),
            body_limit(b.graphql_max_body_bytes),
        );
    }
    if pa == pb && pa.is_some_and(Protocol::is_json_rpc_family) {
        push(
            &mut out,
            "JSON-RPC max_body_bytes",
            body_limit(json_rpc_limit(a)),
            body_limit(json_rpc_limit(b)),
        );
    }
    if pa == Some(Protocol::Mcp) && pb == Some(Protocol::Mcp) {
        let strict = |ep: &Endpoint| {
            ep.mcp
                .as_ref()
                .and_then(|m| m.strict_tool_names)
                .unwrap_or(true)
        };
        push(&mut out, "mcp.strict_tool_names", strict(a), strict(b));
    }
    out
}

fn has_graphql_policy(ep: &Endpoint) -> bool {
    !ep.graphql_persisted_queries.is_empty()
        || (!ep.persisted_queries.is_empty() && ep.persisted_queries != "deny")
        || ep
            .allow_rules()
            .iter()
            .any(|r| r.allow.has_graphql_fields())
        || ep.deny_rule_list().iter().any(|d| d.has_graphql_fields())
}

/// The JSON-RPC body limit in force: MCP endpoints take it from `mcp`, as upstream does.
fn json_rpc_limit(ep: &Endpoint) -> u32 {
    match &ep.mcp {
        Some(mcp) => mcp.max_body_bytes,
        None => ep.json_rpc.as_ref().map_or(0, |j| j.max_body_bytes),
    }
}

fn body_limit(value: u32) -> u32 {
    if value == 0 {
        DEFAULT_BODY_LIMIT
    } else {
        value
    }
}
