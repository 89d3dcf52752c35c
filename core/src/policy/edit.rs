//! Incremental edits of a sandbox policy's network rules: upstream's merge operations.
//!
//! An operator adds one endpoint or one allow rule without resending the whole document
//! (`openshell policy update SB --add-endpoint api.github.com:443:read-only`). The gateway
//! applies the edits, in order, to the sandbox's latest revision inside the write's
//! transaction, so two concurrent edits never lose one another, and validates the result as
//! any other policy. The semantics follow upstream's merge:
//!
//! - adding a rule whose key exists, or whose endpoint overlaps one already allowed (same
//!   host, same path, a shared port), merges into that rule instead of adding a second rule
//!   for the same destination: binaries and ports are united, empty fields are filled, and
//!   fields already set are kept (each kept difference becomes a [`Edited::notes`] line);
//! - allow and deny rules go to the endpoint that serves `host:port`, which must inspect
//!   REST; an access preset there is first expanded into the rules it stands for;
//! - removals of what is not there change nothing and say so in a note, so a retried edit
//!   is harmless; a rule left without endpoints, or without the last binary it named, goes.
//!
//! [`EditSpecs`] reads upstream's command-line forms (`HOST:PORT[:ACCESS[:PROTOCOL[:
//! ENFORCEMENT[:OPTIONS]]]]`, `HOST:PORT:METHOD:PATH`) so the CLI and every SDK accept the
//! same text and refuse it with the same words.

use std::collections::BTreeMap;

use serde::Serialize;

use super::schema::{Binary, Endpoint, NetworkPolicy, Rule, RuleMatch, SandboxPolicy};
use crate::violation::Violation;

/// One incremental change to a policy's `network_policies`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyEdit {
    /// Adds `rule` under `rule_name`, or merges it into the rule that already has that key
    /// or already allows one of its endpoints.
    AddRule {
        rule_name: String,
        rule: NetworkPolicy,
    },
    /// Removes `port` from every endpoint of `host` (in `rule_name` only, when given); an
    /// endpoint left without ports, and a rule left without endpoints, are removed.
    RemoveEndpoint {
        rule_name: Option<String>,
        host: String,
        port: u32,
    },
    RemoveRule {
        rule_name: String,
    },
    /// Appends deny rules to the REST endpoint serving `host:port`.
    AddDenyRules {
        host: String,
        port: u32,
        deny_rules: Vec<RuleMatch>,
    },
    /// Appends allow rules to the REST endpoint serving `host:port`.
    AddAllowRules {
        host: String,
        port: u32,
        rules: Vec<Rule>,
    },
    /// Removes one binary from a rule; a rule that loses its last binary is removed.
    RemoveBinary {
        rule_name: String,
        binary_path: String,
    },
}

impl PolicyEdit {
    /// Upstream's name of the operation, as in the wire message's `oneof`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::AddRule { .. } => "add_rule",
            Self::RemoveEndpoint { .. } => "remove_endpoint",
            Self::RemoveRule { .. } => "remove_rule",
            Self::AddDenyRules { .. } => "add_deny_rules",
            Self::AddAllowRules { .. } => "add_allow_rules",
            Self::RemoveBinary { .. } => "remove_binary",
        }
    }
}

/// A policy after edits, with what the merge did differently from the literal request.
#[derive(Debug, Clone, PartialEq)]
pub struct Edited {
    pub policy: SandboxPolicy,
    /// One line per kept field, expanded preset or removal that found nothing.
    pub notes: Vec<String>,
}

/// The key upstream gives a rule added for one endpoint: `allow_api_github_com_443`.
pub fn generated_rule_name(host: &str, port: u32) -> String {
    let host: String = host
        .chars()
        .map(|c| if matches!(c, '.' | '-') { '_' } else { c })
        .filter(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    format!("allow_{host}_{port}")
}

/// Applies `edits` in order to `policy`. Every edit that cannot apply is reported, each
/// addressed as `merge_operations[i]`; the result is not validated here (the caller
/// validates it as a whole, as any policy).
pub fn apply_edits(policy: &SandboxPolicy, edits: &[PolicyEdit]) -> Result<Edited, Vec<Violation>> {
    let mut out = Edited {
        policy: policy.clone(),
        notes: Vec::new(),
    };
    let mut violations = Vec::new();
    for (index, edit) in edits.iter().enumerate() {
        let field = format!("merge_operations[{index}].{}", edit.kind());
        if let Err(message) = apply_one(&mut out, edit) {
            violations.push(Violation::new(field, message));
        }
    }
    if violations.is_empty() {
        Ok(out)
    } else {
        Err(violations)
    }
}

fn apply_one(out: &mut Edited, edit: &PolicyEdit) -> Result<(), String> {
    let policies = &mut out.policy.network_policies;
    match edit {
        PolicyEdit::AddRule { rule_name, rule } => add_rule(out, rule_name, rule),
        PolicyEdit::RemoveEndpoint {
            rule_name,
            host,
            port,
        } => {
            if !remove_endpoint(policies, rule_name.as_deref(), host, *port) {
                out.notes.push(format!(
                    "no endpoint {host}:{port}{} to remove; nothing changed",
                    rule_name
                        .as_deref()
                        .map(|name| format!(" in rule {name}"))
                        .unwrap_or_default()
                ));
            }
            Ok(())
        }
        PolicyEdit::RemoveRule { rule_name } => {
            if policies.remove(rule_name).is_none() {
                out.notes
                    .push(format!("no rule {rule_name} to remove; nothing changed"));
            }
            Ok(())
        }
        PolicyEdit::AddDenyRules {
            host,
            port,
            deny_rules,
        } => {
            let endpoint = rest_endpoint(policies, host, *port)?;
            if endpoint.access.is_empty() && endpoint.allow_rules().is_empty() {
                return Err(format!(
                    "endpoint {host}:{port} allows nothing yet, so there is nothing to deny; give it an access preset or allow rules first"
                ));
            }
            append_unique(endpoint.deny_rules.get_or_insert_with(Vec::new), deny_rules);
            Ok(())
        }
        PolicyEdit::AddAllowRules { host, port, rules } => {
            let endpoint = rest_endpoint(policies, host, *port)?;
            let note = expand_access(endpoint, host, *port)?;
            append_unique(endpoint.rules.get_or_insert_with(Vec::new), rules);
            out.notes.extend(note);
            Ok(())
        }
        PolicyEdit::RemoveBinary {
            rule_name,
            binary_path,
        } => {
            let Some(rule) = policies.get_mut(rule_name) else {
                out.notes.push(format!(
                    "no rule {rule_name} to remove binary {binary_path} from; nothing changed"
                ));
                return Ok(());
            };
            let before = rule.binaries.len();
            rule.binaries.retain(|binary| binary.path != *binary_path);
            if rule.binaries.len() == before {
                out.notes.push(format!(
                    "rule {rule_name} does not name binary {binary_path}; nothing changed"
                ));
            } else if rule.binaries.is_empty() {
                policies.remove(rule_name);
                out.notes.push(format!(
                    "rule {rule_name} named no other binary and was removed"
                ));
            }
            Ok(())
        }
    }
}

fn add_rule(out: &mut Edited, rule_name: &str, incoming: &NetworkPolicy) -> Result<(), String> {
    if rule_name.trim().is_empty() {
        return Err("rule_name is required".into());
    }
    if incoming.endpoints.is_empty() {
        return Err(format!(
            "rule {rule_name} has no endpoint: an added rule allows at least one destination"
        ));
    }
    let policies = &mut out.policy.network_policies;
    // BTreeMap keys iterate sorted, so the rule merged into is the same on every replica.
    let target = if policies.contains_key(rule_name) {
        Some(rule_name.to_owned())
    } else {
        policies
            .iter()
            .find(|(_, existing)| shares_endpoint(existing, incoming))
            .map(|(key, _)| key.clone())
    };
    let Some(key) = target else {
        policies.insert(rule_name.to_owned(), incoming.clone());
        return Ok(());
    };
    let Some(existing) = policies.get_mut(&key) else {
        return Err(format!("rule {key} vanished while merging"));
    };
    if key != rule_name {
        out.notes.push(format!(
            "rule {rule_name} was merged into rule {key}, which already allows the same destination"
        ));
    }
    for binary in &incoming.binaries {
        if !existing.binaries.iter().any(|b| b.path == binary.path) {
            existing.binaries.push(Binary::clone(binary));
        }
    }
    for endpoint in &incoming.endpoints {
        match existing
            .endpoints
            .iter_mut()
            .find(|e| endpoints_overlap(e, endpoint))
        {
            Some(current) => merge_endpoint(current, endpoint, &mut out.notes)?,
            None => existing.endpoints.push(endpoint.clone()),
        }
    }
    Ok(())
}

fn shares_endpoint(existing: &NetworkPolicy, incoming: &NetworkPolicy) -> bool {
    incoming
        .endpoints
        .iter()
        .any(|i| existing.endpoints.iter().any(|e| endpoints_overlap(e, i)))
}

fn endpoints_overlap(a: &Endpoint, b: &Endpoint) -> bool {
    let ports = b.effective_ports();
    a.host.eq_ignore_ascii_case(&b.host)
        && a.path == b.path
        && a.effective_ports().iter().any(|p| ports.contains(p))
}

fn serves(endpoint: &Endpoint, host: &str, port: u32) -> bool {
    endpoint.host.eq_ignore_ascii_case(host) && endpoint.effective_ports().contains(&port)
}

/// The endpoint serving `host:port` (first by rule key), which must inspect REST.
fn rest_endpoint<'a>(
    policies: &'a mut BTreeMap<String, NetworkPolicy>,
    host: &str,
    port: u32,
) -> Result<&'a mut Endpoint, String> {
    let endpoint = policies
        .values_mut()
        .flat_map(|rule| rule.endpoints.iter_mut())
        .find(|endpoint| serves(endpoint, host, port))
        .ok_or_else(|| {
            format!(
                "no endpoint {host}:{port} in the policy; add it first (--add-endpoint {host}:{port}:read-only:rest)"
            )
        })?;
    match endpoint.protocol.to_ascii_lowercase().as_str() {
        "rest" => Ok(endpoint),
        "" => Err(format!(
            "endpoint {host}:{port} is not inspected (no protocol), so L7 rules cannot apply; set its protocol to rest"
        )),
        other => Err(format!(
            "endpoint {host}:{port} inspects {other}; method and path rules apply to rest endpoints only"
        )),
    }
}

/// Turns an access preset into the rules it stands for, so rules can be added beside it.
fn expand_access(endpoint: &mut Endpoint, host: &str, port: u32) -> Result<Option<String>, String> {
    if endpoint.access.is_empty() {
        return Ok(None);
    }
    let methods: &[&str] = match endpoint.access.as_str() {
        "read-only" => &["GET", "HEAD", "OPTIONS"],
        "read-write" => &["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"],
        "full" => &["*"],
        other => {
            return Err(format!(
                "endpoint {host}:{port} has access preset {other:?}, which cannot be expanded into rules"
            ));
        }
    };
    let expanded: Vec<Rule> = methods
        .iter()
        .map(|method| Rule {
            allow: RuleMatch {
                method: (*method).to_owned(),
                path: "**".to_owned(),
                ..RuleMatch::default()
            },
        })
        .collect();
    append_unique(endpoint.rules.get_or_insert_with(Vec::new), &expanded);
    let note = format!(
        "access preset {} of endpoint {host}:{port} was expanded into explicit rules",
        endpoint.access
    );
    endpoint.access.clear();
    Ok(Some(note))
}

fn merge_endpoint(
    current: &mut Endpoint,
    incoming: &Endpoint,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let host = if current.host.is_empty() {
        incoming.host.clone()
    } else {
        current.host.clone()
    };
    let mut ports = current.effective_ports();
    ports.extend(incoming.effective_ports());
    ports.sort_unstable();
    ports.dedup();
    let port = ports.first().copied().unwrap_or_default();
    if ports != current.effective_ports() {
        set_ports(current, ports);
    }
    for (name, field, wanted) in [
        ("protocol", &mut current.protocol, &incoming.protocol),
        (
            "enforcement",
            &mut current.enforcement,
            &incoming.enforcement,
        ),
        ("tls", &mut current.tls, &incoming.tls),
    ] {
        keep_or_fill(name, field, wanted, &host, port, notes);
    }
    if !incoming.allow_rules().is_empty() {
        notes.extend(expand_access(current, &host, port)?);
        append_unique(
            current.rules.get_or_insert_with(Vec::new),
            incoming.allow_rules(),
        );
        if !incoming.access.is_empty() {
            notes.push(ignored_access(&host, port, &incoming.access));
        }
    } else if !incoming.access.is_empty() {
        if !current.allow_rules().is_empty() {
            notes.push(ignored_access(&host, port, &incoming.access));
        } else {
            keep_or_fill(
                "access preset",
                &mut current.access,
                &incoming.access,
                &host,
                port,
                notes,
            );
        }
    }
    if !incoming.deny_rule_list().is_empty() {
        append_unique(
            current.deny_rules.get_or_insert_with(Vec::new),
            incoming.deny_rule_list(),
        );
    }
    append_unique(&mut current.allowed_ips, &incoming.allowed_ips);
    current.websocket_credential_rewrite |= incoming.websocket_credential_rewrite;
    Ok(())
}

fn keep_or_fill(
    name: &str,
    current: &mut String,
    wanted: &str,
    host: &str,
    port: u32,
    notes: &mut Vec<String>,
) {
    if wanted.is_empty() || current == wanted {
        return;
    }
    if current.is_empty() {
        wanted.clone_into(current);
    } else {
        notes.push(format!(
            "endpoint {host}:{port} keeps its {name} {current:?}; the requested {wanted:?} was ignored"
        ));
    }
}

fn ignored_access(host: &str, port: u32, access: &str) -> String {
    format!(
        "endpoint {host}:{port} already has explicit rules; the requested access preset {access:?} was ignored"
    )
}

/// Writes ports as an author would: one port in `port`, several in `ports`.
fn set_ports(endpoint: &mut Endpoint, ports: Vec<u32>) {
    if let [only] = ports.as_slice() {
        endpoint.port = Some(*only);
        endpoint.ports.clear();
    } else {
        endpoint.port = None;
        endpoint.ports = ports;
    }
}

fn append_unique<T: Clone + PartialEq>(list: &mut Vec<T>, items: &[T]) {
    for item in items {
        if !list.contains(item) {
            list.push(item.clone());
        }
    }
}

/// Removes `port` from the endpoints of `host`; true when anything matched.
fn remove_endpoint(
    policies: &mut BTreeMap<String, NetworkPolicy>,
    rule_name: Option<&str>,
    host: &str,
    port: u32,
) -> bool {
    let mut matched = false;
    let mut emptied = Vec::new();
    for (key, rule) in policies.iter_mut() {
        if rule_name.is_some_and(|name| name != key) {
            continue;
        }
        rule.endpoints.retain_mut(|endpoint| {
            if !serves(endpoint, host, port) {
                return true;
            }
            matched = true;
            let rest: Vec<u32> = endpoint
                .effective_ports()
                .into_iter()
                .filter(|p| *p != port)
                .collect();
            if rest.is_empty() {
                return false;
            }
            set_ports(endpoint, rest);
            true
        });
        if rule.endpoints.is_empty() {
            emptied.push(key.clone());
        }
    }
    for key in emptied {
        policies.remove(&key);
    }
    matched
}

/// Upstream's command-line forms of the edits, as `openshell policy update` takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EditSpecs {
    /// `HOST:PORT[:ACCESS[:PROTOCOL[:ENFORCEMENT[:OPTIONS]]]]`.
    pub add_endpoints: Vec<String>,
    /// `HOST:PORT`.
    pub remove_endpoints: Vec<String>,
    /// `HOST:PORT:METHOD:PATH`.
    pub add_allow: Vec<String>,
    /// `HOST:PORT:METHOD:PATH`.
    pub add_deny: Vec<String>,
    /// Rule keys.
    pub remove_rules: Vec<String>,
    /// Binaries the added endpoints are for (only with `add_endpoints`).
    pub binaries: Vec<String>,
    /// Key of the rule an added endpoint goes to (only with one `add_endpoints`); by default
    /// [`generated_rule_name`].
    pub rule_name: Option<String>,
}

/// Access presets, protocols and enforcement modes the command-line form accepts (upstream's).
const SPEC_ACCESS: &[&str] = &["read-only", "read-write", "full"];
const SPEC_PROTOCOLS: &[&str] = &["rest", "websocket", "sql"];
const SPEC_ENFORCEMENT: &[&str] = &["enforce", "audit"];
const ADD_ENDPOINT_FORM: &str = "HOST:PORT[:ACCESS[:PROTOCOL[:ENFORCEMENT[:OPTIONS]]]]";

impl EditSpecs {
    /// The edits, in upstream's order: added endpoints, removed endpoints, removed rules,
    /// allow rules, deny rules (the last two grouped by endpoint). Every malformed value
    /// is reported, each addressed by its option (`add_endpoints[1]`).
    pub fn to_edits(&self) -> Result<Vec<PolicyEdit>, Vec<Violation>> {
        let mut violations = Vec::new();
        let mut edits = Vec::new();
        let binaries = self.checked_binaries(&mut violations);
        let rule_name = self
            .rule_name
            .as_deref()
            .map(str::trim)
            .filter(|name| !name.is_empty());
        if self.rule_name.is_some() && self.add_endpoints.is_empty() {
            violations.push(Violation::new(
                "rule_name",
                "applies only with add_endpoints (--add-endpoint)",
            ));
        } else if rule_name.is_some() && self.add_endpoints.len() > 1 {
            violations.push(Violation::new(
                "rule_name",
                "applies to exactly one added endpoint; give one --add-endpoint per --rule-name",
            ));
        }
        for (i, spec) in self.add_endpoints.iter().enumerate() {
            let field = format!("add_endpoints[{i}]");
            match parse_add_endpoint(spec) {
                Ok(endpoint) => {
                    let port = endpoint.port.unwrap_or_default();
                    let rule_name = rule_name
                        .map_or_else(|| generated_rule_name(&endpoint.host, port), str::to_owned);
                    edits.push(PolicyEdit::AddRule {
                        rule_name,
                        rule: NetworkPolicy {
                            name: None,
                            endpoints: vec![endpoint],
                            binaries: binaries.clone(),
                        },
                    });
                }
                Err(message) => violations.push(Violation::new(field, message)),
            }
        }
        for (i, spec) in self.remove_endpoints.iter().enumerate() {
            match host_port(spec, "HOST:PORT") {
                Ok((host, port)) => edits.push(PolicyEdit::RemoveEndpoint {
                    rule_name: None,
                    host,
                    port,
                }),
                Err(message) => {
                    violations.push(Violation::new(format!("remove_endpoints[{i}]"), message));
                }
            }
        }
        for (i, name) in self.remove_rules.iter().enumerate() {
            let name = name.trim();
            if name.is_empty() {
                violations.push(Violation::new(
                    format!("remove_rules[{i}]"),
                    "must name a rule",
                ));
            } else {
                edits.push(PolicyEdit::RemoveRule {
                    rule_name: name.to_owned(),
                });
            }
        }
        let allow = group_l7("add_allow", &self.add_allow, &mut violations);
        edits.extend(
            allow
                .into_iter()
                .map(|((host, port), matches)| PolicyEdit::AddAllowRules {
                    host,
                    port,
                    rules: matches.into_iter().map(|allow| Rule { allow }).collect(),
                }),
        );
        let deny = group_l7("add_deny", &self.add_deny, &mut violations);
        edits.extend(
            deny.into_iter()
                .map(|((host, port), deny_rules)| PolicyEdit::AddDenyRules {
                    host,
                    port,
                    deny_rules,
                }),
        );
        if violations.is_empty() && edits.is_empty() {
            violations.push(Violation::new(
                "",
                "nothing to change: give at least one of --add-endpoint, --remove-endpoint, --add-allow, --add-deny, --remove-rule",
            ));
        }
        if violations.is_empty() {
            Ok(edits)
        } else {
            Err(violations)
        }
    }

    fn checked_binaries(&self, violations: &mut Vec<Violation>) -> Vec<Binary> {
        if !self.binaries.is_empty() && self.add_endpoints.is_empty() {
            violations.push(Violation::new(
                "binaries",
                "apply only with add_endpoints (--add-endpoint)",
            ));
        }
        let mut out: Vec<Binary> = Vec::new();
        for (i, path) in self.binaries.iter().enumerate() {
            let path = path.trim();
            if path.is_empty() {
                violations.push(Violation::new(
                    format!("binaries[{i}]"),
                    "must be a binary path",
                ));
            } else if !out.iter().any(|b| b.path == path) {
                out.push(Binary {
                    path: path.to_owned(),
                    harness: None,
                });
            }
        }
        out
    }
}

fn parse_add_endpoint(spec: &str) -> Result<Endpoint, String> {
    let parts: Vec<&str> = spec.split(':').map(str::trim).collect();
    if !(2..=6).contains(&parts.len()) {
        return Err(format!("expected {ADD_ENDPOINT_FORM}, got {spec:?}"));
    }
    let (host, port) = host_port(&parts[..2].join(":"), ADD_ENDPOINT_FORM)?;
    let segment = |i: usize| parts.get(i).copied().unwrap_or_default();
    let (access, protocol, enforcement, options) = (segment(2), segment(3), segment(4), segment(5));
    if parts.len() == 3 && access.is_empty() {
        return Err(format!(
            "the ACCESS segment of {spec:?} is empty; leave it out when you give no access or protocol"
        ));
    }
    if parts.len() == 6 && options.is_empty() {
        return Err(format!(
            "the OPTIONS segment of {spec:?} is empty; leave it out when you give no option"
        ));
    }
    one_of("ACCESS", access, SPEC_ACCESS, spec)?;
    one_of("PROTOCOL", protocol, SPEC_PROTOCOLS, spec)?;
    one_of("ENFORCEMENT", enforcement, SPEC_ENFORCEMENT, spec)?;
    if !enforcement.is_empty() && protocol.is_empty() {
        return Err(format!(
            "{spec:?} sets ENFORCEMENT without PROTOCOL; enforcement applies to inspected traffic"
        ));
    }
    let mut endpoint = Endpoint {
        host,
        port: Some(port),
        protocol: protocol.to_owned(),
        enforcement: enforcement.to_owned(),
        access: access.to_owned(),
        ..Endpoint::default()
    };
    for option in options
        .split(',')
        .map(str::trim)
        .filter(|_| !options.is_empty())
    {
        match option {
            "websocket-credential-rewrite" if matches!(protocol, "rest" | "websocket") => {
                endpoint.websocket_credential_rewrite = true;
            }
            "websocket-credential-rewrite" => {
                return Err(format!(
                    "option websocket-credential-rewrite of {spec:?} needs PROTOCOL rest or websocket"
                ));
            }
            "" => return Err(format!("the OPTIONS of {spec:?} hold an empty option")),
            other => {
                return Err(format!(
                    "unknown option {other:?} in {spec:?}; the only option is websocket-credential-rewrite"
                ));
            }
        }
    }
    Ok(endpoint)
}

fn one_of(segment: &str, value: &str, allowed: &[&str], spec: &str) -> Result<(), String> {
    if value.is_empty() || allowed.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "the {segment} segment of {spec:?} is {value:?}; expected one of {}",
            allowed.join(", ")
        ))
    }
}

fn host_port(spec: &str, form: &str) -> Result<(String, u32), String> {
    let mut parts = spec.split(':').map(str::trim);
    let (Some(host), Some(port), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("expected {form}, got {spec:?}"));
    };
    check_host(host, spec)?;
    Ok((host.to_owned(), check_port(port, spec)?))
}

fn check_host(host: &str, spec: &str) -> Result<(), String> {
    if host.is_empty() {
        Err(format!("the HOST of {spec:?} is empty"))
    } else if host.contains(char::is_whitespace) || host.contains('/') {
        Err(format!(
            "the HOST of {spec:?} holds whitespace or '/'; give a host name, IP or DNS glob"
        ))
    } else {
        Ok(())
    }
}

fn check_port(port: &str, spec: &str) -> Result<u32, String> {
    match port.parse::<u32>() {
        Ok(port @ 1..=65535) => Ok(port),
        Ok(other) => Err(format!(
            "the PORT of {spec:?} is {other}; expected 1 to 65535"
        )),
        Err(_) => Err(format!(
            "the PORT of {spec:?} is {port:?}; expected a number from 1 to 65535"
        )),
    }
}

/// `HOST:PORT:METHOD:PATH` values grouped by endpoint, in host-then-port order.
fn group_l7(
    option: &str,
    specs: &[String],
    violations: &mut Vec<Violation>,
) -> BTreeMap<(String, u32), Vec<RuleMatch>> {
    let mut grouped: BTreeMap<(String, u32), Vec<RuleMatch>> = BTreeMap::new();
    for (i, spec) in specs.iter().enumerate() {
        match parse_l7(spec) {
            Ok((endpoint, rule)) => grouped.entry(endpoint).or_default().push(rule),
            Err(message) => violations.push(Violation::new(format!("{option}[{i}]"), message)),
        }
    }
    grouped
}

fn parse_l7(spec: &str) -> Result<((String, u32), RuleMatch), String> {
    let parts: Vec<&str> = spec.split(':').map(str::trim).collect();
    let [host, port, method, path] = parts.as_slice() else {
        return Err(format!("expected HOST:PORT:METHOD:PATH, got {spec:?}"));
    };
    check_host(host, spec)?;
    let port = check_port(port, spec)?;
    if method.is_empty() || method.contains(char::is_whitespace) {
        return Err(format!(
            "the METHOD of {spec:?} must be one word such as GET or *"
        ));
    }
    if !(path.starts_with('/') || *path == "**" || path.starts_with("**/")) {
        return Err(format!(
            "the PATH of {spec:?} is {path:?}; it starts with '/' or is '**'"
        ));
    }
    let rule = RuleMatch {
        method: method.to_ascii_uppercase(),
        path: (*path).to_owned(),
        ..RuleMatch::default()
    };
    Ok(((host.to_string(), port), rule))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
