//! The rule-level difference between the policy a target has and the one a write would store,
//! for dry runs (`UpdateConfig` with `validate_only`).
//!
//! It is computed over the canonical JSON of both policies, not over the schema's types, so it
//! follows the schema wherever it goes: a field the schema gains is compared without a change
//! here. Only the shape that names things is assumed: `network_policies` is a map keyed by
//! policy name whose entries hold an `endpoints` list, and an endpoint may have a `host`,
//! `port`, `ports` and `path`.

use std::collections::{BTreeMap, BTreeSet};

use openshell_core::policy::SandboxPolicy;
use serde_json::{Map, Value};

/// The sections fixed at a sandbox's first policy revision, in document order.
pub const STATIC_SECTIONS: [&str; 3] = ["filesystem_policy", "landlock", "process"];

const NETWORK_POLICIES: &str = "network_policies";
const ENDPOINTS: &str = "endpoints";
const VERSION: &str = "version";

/// What a new policy changes, section by section and network policy by network policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyDiff {
    /// Network policies only in the new policy, sorted.
    pub added_policies: Vec<String>,
    /// Network policies only in the current policy, sorted.
    pub removed_policies: Vec<String>,
    /// Network policies on both sides whose content differs, sorted by name.
    pub changed_policies: Vec<PolicyChange>,
    /// Static sections whose content differs, in document order.
    pub changed_static_sections: Vec<String>,
    /// Other top-level sections that differ, sorted.
    pub changed_sections: Vec<String>,
}

/// One network policy present on both sides with different content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyChange {
    pub name: String,
    /// Endpoint names (see [`endpoint_names`]) only in the new entry, in its order.
    pub added_endpoints: Vec<String>,
    /// Endpoint names only in the current entry, in its order.
    pub removed_endpoints: Vec<String>,
    /// Endpoints on both sides with different content, in the new entry's order.
    pub changed_endpoints: Vec<String>,
    /// Fields other than `endpoints` that differ, sorted; `endpoints` itself when only the
    /// order of the endpoints changed.
    pub changed_fields: Vec<String>,
}

impl PolicyDiff {
    /// True when the two policies are the same rule for rule.
    pub fn is_empty(&self) -> bool {
        self.added_policies.is_empty()
            && self.removed_policies.is_empty()
            && self.changed_policies.is_empty()
            && self.changed_static_sections.is_empty()
            && self.changed_sections.is_empty()
    }
}

/// Compares `current` (None when the target has no policy yet) with `new`.
///
/// Static sections are compared with the static-section rule itself
/// ([`SandboxPolicy::static_section_changes`]), so "would change" here means what the rule
/// means: an absent section is the same as an empty one. Without a current policy, every
/// static section the new policy gives counts as changed.
pub fn diff(current: Option<&SandboxPolicy>, new: &SandboxPolicy) -> PolicyDiff {
    let new_value = to_value(new);
    let current_value = match current {
        Some(policy) => to_value(policy),
        // A first policy: everything it says is new, but its schema version is not a change.
        None => {
            let mut base = Map::new();
            if let Some(version) = new_value.get(VERSION) {
                base.insert(VERSION.to_owned(), version.clone());
            }
            Value::Object(base)
        }
    };
    let mut out = diff_values(&current_value, &new_value);
    out.changed_static_sections = match current {
        Some(current) => current
            .static_section_changes(new)
            .into_iter()
            .map(|v| v.field)
            .collect(),
        None => STATIC_SECTIONS
            .iter()
            .filter(|s| new_value.get(**s).is_some_and(|v| !v.is_null()))
            .map(|s| (*s).to_owned())
            .collect(),
    };
    out
}

fn to_value(policy: &SandboxPolicy) -> Value {
    // canonical_json is always one JSON object; should that ever fail, comparing two empty
    // documents is the safe reading: it reports no change rather than a made-up one.
    serde_json::from_str(&policy.canonical_json()).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// The diff of two canonical policy documents, static sections left out (see [`diff`]).
fn diff_values(current: &Value, new: &Value) -> PolicyDiff {
    let empty = Map::new();
    let old_doc = current.as_object().unwrap_or(&empty);
    let new_doc = new.as_object().unwrap_or(&empty);
    let mut out = PolicyDiff::default();

    let old_policies = old_doc
        .get(NETWORK_POLICIES)
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let new_policies = new_doc
        .get(NETWORK_POLICIES)
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let names: BTreeSet<&String> = old_policies.keys().chain(new_policies.keys()).collect();
    for name in names {
        match (old_policies.get(name), new_policies.get(name)) {
            (None, Some(_)) => out.added_policies.push(name.clone()),
            (Some(_), None) => out.removed_policies.push(name.clone()),
            (Some(old), Some(new)) if old != new => {
                out.changed_policies.push(diff_policy(name, old, new));
            }
            _ => {}
        }
    }

    let sections: BTreeSet<&String> = old_doc.keys().chain(new_doc.keys()).collect();
    out.changed_sections = sections
        .into_iter()
        .filter(|k| k.as_str() != NETWORK_POLICIES && !STATIC_SECTIONS.contains(&k.as_str()))
        .filter(|k| old_doc.get(*k) != new_doc.get(*k))
        .cloned()
        .collect();
    out
}

fn diff_policy(name: &str, old: &Value, new: &Value) -> PolicyChange {
    let empty_map = Map::new();
    let empty_list = Vec::new();
    let old_entry = old.as_object().unwrap_or(&empty_map);
    let new_entry = new.as_object().unwrap_or(&empty_map);
    let old_eps = old_entry
        .get(ENDPOINTS)
        .and_then(Value::as_array)
        .unwrap_or(&empty_list);
    let new_eps = new_entry
        .get(ENDPOINTS)
        .and_then(Value::as_array)
        .unwrap_or(&empty_list);
    let old_named: BTreeMap<String, &Value> =
        endpoint_names(old_eps).into_iter().zip(old_eps).collect();
    let new_names = endpoint_names(new_eps);
    let new_named: BTreeMap<&String, &Value> = new_names.iter().zip(new_eps).collect();

    let mut change = PolicyChange {
        name: name.to_owned(),
        ..PolicyChange::default()
    };
    for (ep_name, ep) in new_names.iter().zip(new_eps) {
        match old_named.get(ep_name) {
            None => change.added_endpoints.push(ep_name.clone()),
            Some(old_ep) if *old_ep != ep => change.changed_endpoints.push(ep_name.clone()),
            Some(_) => {}
        }
    }
    for ep_name in endpoint_names(old_eps) {
        if !new_named.contains_key(&ep_name) {
            change.removed_endpoints.push(ep_name);
        }
    }

    let fields: BTreeSet<&String> = old_entry.keys().chain(new_entry.keys()).collect();
    change.changed_fields = fields
        .into_iter()
        .filter(|k| k.as_str() != ENDPOINTS && old_entry.get(*k) != new_entry.get(*k))
        .cloned()
        .collect();
    let endpoints_moved = old_entry.get(ENDPOINTS) != new_entry.get(ENDPOINTS)
        && change.added_endpoints.is_empty()
        && change.removed_endpoints.is_empty()
        && change.changed_endpoints.is_empty();
    if endpoints_moved {
        change.changed_fields.push(ENDPOINTS.to_owned());
        change.changed_fields.sort();
    }
    change
}

/// A name for each endpoint of one network policy, unique within it: `host:ports` and the
/// path when it has one (`api.example.com:443`, `api.example.com:80,443/v1/**`), or
/// `endpoints[i]` when it has no host (an `allowed_ips` endpoint). A name that repeats gets
/// `#2`, `#3`… so that two endpoints never collapse into one.
pub fn endpoint_names(endpoints: &[Value]) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    endpoints
        .iter()
        .enumerate()
        .map(|(index, ep)| {
            let base = endpoint_name(ep, index);
            let count = seen.entry(base.clone()).or_insert(0);
            *count += 1;
            if *count == 1 {
                base
            } else {
                format!("{base}#{count}")
            }
        })
        .collect()
}

fn endpoint_name(ep: &Value, index: usize) -> String {
    let host = ep.get("host").and_then(Value::as_str).unwrap_or_default();
    if host.is_empty() {
        return format!("endpoints[{index}]");
    }
    // Host names are case-insensitive, and `port: 443` names the same ports as `ports: [443]`.
    let mut name = host.to_ascii_lowercase();
    let mut ports: Vec<u64> = ep
        .get("port")
        .into_iter()
        .chain(
            ep.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        )
        .filter_map(Value::as_u64)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    if !ports.is_empty() {
        name.push(':');
        name.push_str(
            &ports
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    match ep.get("path").and_then(Value::as_str) {
        Some(path) if path.starts_with('/') => name.push_str(path),
        Some(path) if !path.is_empty() => {
            name.push(' ');
            name.push_str(path);
        }
        _ => {}
    }
    name
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use openshell_core::policy::parse_and_validate;

    fn policy(text: &str) -> SandboxPolicy {
        parse_and_validate(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    const BASE: &str = "version: 1
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
  github:
    endpoints:
      - { host: api.github.com, port: 443, protocol: rest, access: read-only }
      - { host: uploads.github.com, port: 443 }
    binaries:
      - path: /usr/bin/git
  pypi:
    endpoints:
      - { host: pypi.org, port: 443 }
";

    #[test]
    fn the_same_policy_has_no_differences() {
        let a = policy(BASE);
        assert!(diff(Some(&a), &a).is_empty());
        // Formatting and key order are not differences.
        let b = policy(&BASE.replace(
            "      - { host: pypi.org, port: 443 }\n",
            "      - port: 443\n        host: pypi.org\n",
        ));
        assert!(diff(Some(&a), &b).is_empty());
    }

    #[test]
    fn added_and_removed_network_policies() {
        let a = policy(BASE);
        let b = policy(&BASE.replace(
            "  pypi:\n    endpoints:\n      - { host: pypi.org, port: 443 }\n",
            "  npm:\n    endpoints:\n      - { host: registry.npmjs.org, port: 443 }\n",
        ));
        let d = diff(Some(&a), &b);
        assert_eq!(d.added_policies, ["npm"]);
        assert_eq!(d.removed_policies, ["pypi"]);
        assert!(d.changed_policies.is_empty());
        assert!(d.changed_static_sections.is_empty());
        assert!(d.changed_sections.is_empty());
    }

    #[test]
    fn endpoints_added_removed_and_changed_within_a_policy() {
        let a = policy(BASE);
        let b = policy(
            &BASE
                .replace(
                    "      - { host: uploads.github.com, port: 443 }\n",
                    "      - { host: objects.githubusercontent.com, ports: [443, 80] }\n",
                )
                .replace("access: read-only", "access: read-write"),
        );
        let d = diff(Some(&a), &b);
        assert_eq!(d.changed_policies.len(), 1);
        let change = &d.changed_policies[0];
        assert_eq!(change.name, "github");
        assert_eq!(
            change.added_endpoints,
            ["objects.githubusercontent.com:80,443"]
        );
        assert_eq!(change.removed_endpoints, ["uploads.github.com:443"]);
        assert_eq!(change.changed_endpoints, ["api.github.com:443"]);
        assert!(change.changed_fields.is_empty());
    }

    #[test]
    fn fields_besides_endpoints_and_reordering_are_reported() {
        let a = policy(BASE);
        let b = policy(&BASE.replace("/usr/bin/git", "/usr/bin/gh"));
        let d = diff(Some(&a), &b);
        assert_eq!(d.changed_policies[0].changed_fields, ["binaries"]);
        assert!(d.changed_policies[0].changed_endpoints.is_empty());

        let swapped = BASE.replace(
            "      - { host: api.github.com, port: 443, protocol: rest, access: read-only }\n      - { host: uploads.github.com, port: 443 }\n",
            "      - { host: uploads.github.com, port: 443 }\n      - { host: api.github.com, port: 443, protocol: rest, access: read-only }\n",
        );
        let d = diff(Some(&a), &policy(&swapped));
        assert_eq!(d.changed_policies.len(), 1);
        assert_eq!(d.changed_policies[0].changed_fields, ["endpoints"]);
    }

    #[test]
    fn endpoints_with_a_path_or_without_a_host_have_names_of_their_own() {
        let eps: Vec<Value> = serde_json::from_str(
            r#"[{"host":"api.example.com","port":443,"path":"/v1/**"},
                {"host":"api.example.com","port":443,"path":"/v2/**"},
                {"allowed_ips":["10.0.0.0/8"],"port":5432},
                {"host":"api.example.com","ports":[443]},
                {"host":"api.example.com","port":443},
                {"host":"bare.example.com"}]"#,
        )
        .unwrap();
        assert_eq!(
            endpoint_names(&eps),
            [
                "api.example.com:443/v1/**",
                "api.example.com:443/v2/**",
                "endpoints[2]",
                "api.example.com:443",
                "api.example.com:443#2",
                "bare.example.com",
            ]
        );
    }

    #[test]
    fn static_and_other_sections() {
        let a = policy(BASE);
        let b = policy(&BASE.replace("run_as_user: sandbox", "run_as_user: '1500'"));
        let d = diff(Some(&a), &b);
        assert_eq!(d.changed_static_sections, ["process"]);
        assert!(d.changed_policies.is_empty());

        let with_middleware = format!(
            "{BASE}network_middlewares:\n  audit:\n    name: audit\n    middleware: request_logger\n    order: 10\n    endpoints:\n      include: [api.github.com]\n"
        );
        let d = diff(Some(&a), &policy(&with_middleware));
        assert_eq!(d.changed_sections, ["network_middlewares"]);
    }

    #[test]
    fn a_first_policy_adds_everything_it_gives() {
        let d = diff(None, &policy(BASE));
        assert_eq!(d.added_policies, ["github", "pypi"]);
        assert_eq!(d.changed_static_sections, ["process"]);
        // The schema version alone is not a change.
        assert!(d.changed_sections.is_empty());
        assert!(diff(None, &policy("version: 1\n")).is_empty());
    }
}
