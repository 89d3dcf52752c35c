//! Converting policies stored by earlier versions of this project to the upstream shape.
//!
//! Versions before the upstream schema stored their own canonical JSON: `read_only`/`read_write`
//! access spelt with underscores, `methods`/`paths` rule lists, protocols such as `https`, and
//! middlewares without host selectors. The gateway keeps every revision, so those documents
//! stay in its store; this function is what a store migration runs over each of them. It is
//! pure and idempotent: a document already in the new shape comes back as its canonical JSON.

use serde_json::{Map, Value, json};

use super::{PolicyError, key_segment, parse_policy};
use crate::violation::Violation;

/// Methods each old access level stood for, used when an old rule gave an access level
/// instead of methods (the same expansion upstream applies to endpoint access presets).
fn preset_methods(access: &str) -> Option<&'static [&'static str]> {
    match access {
        "read_only" | "read-only" => Some(&["GET", "HEAD", "OPTIONS"]),
        "read_write" | "read-write" => Some(&["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"]),
        "full" => Some(&["*"]),
        _ => None,
    }
}

/// Converts one stored policy (canonical JSON of any earlier version) to the canonical JSON of
/// the same policy in the upstream shape. The result parses with [`parse_policy`]; it is not
/// validated, because stored revisions are history and are read, not re-admitted.
///
/// Conversions (see also docs/policy.md, "Policies stored by earlier versions"):
/// - endpoint `access`: `read_only` → `read-only`, `read_write` → `read-write`;
/// - endpoint `protocol`: `http`/`https` → `rest`; `tls` → omitted (the proxy detects TLS
///   itself); `tcp`/`tls` on an endpoint that also has `access` or `rules` → `rest`, since
///   those only ever meant something under inspection; `udp` is refused (upstream has no UDP);
/// - rules: `{methods, paths, access}` → one `{allow: {method, path}}` per method and path
///   (no methods: the rule's access level's methods, else `*`; no paths: `**`); an `allow`
///   entry is kept; a rule naming nothing is dropped, and so is a `rules` list left empty;
/// - middlewares: a missing `endpoints` selector becomes `{include: ["**"]}` (every host, as
///   before); a null `config` or `order` is dropped; when two middlewares share an order, all
///   are renumbered 10, 20, 30… in their old (order, name) sequence; a `config` that is not a
///   map is refused.
pub fn migrate_legacy_policy_json(old: &str) -> Result<String, PolicyError> {
    let mut doc: Value = serde_json::from_str(old)
        .map_err(|e| PolicyError::Syntax(format!("stored policy is not JSON: {e}")))?;
    let mut problems = Vec::new();
    if let Some(policies) = doc
        .get_mut("network_policies")
        .and_then(Value::as_object_mut)
    {
        for (key, entry) in policies.iter_mut() {
            let base = format!("network_policies{}", key_segment(key));
            let Some(endpoints) = entry.get_mut("endpoints").and_then(Value::as_array_mut) else {
                continue;
            };
            for (i, endpoint) in endpoints.iter_mut().enumerate() {
                if let Some(endpoint) = endpoint.as_object_mut() {
                    migrate_endpoint(endpoint, &format!("{base}.endpoints[{i}]"), &mut problems);
                }
            }
        }
    }
    if let Some(middlewares) = doc
        .get_mut("network_middlewares")
        .and_then(Value::as_object_mut)
    {
        migrate_middlewares(middlewares, &mut problems);
    }
    if !problems.is_empty() {
        return Err(PolicyError::Invalid(problems));
    }
    Ok(parse_policy(&doc.to_string())?.canonical_json())
}

fn migrate_endpoint(ep: &mut Map<String, Value>, base: &str, problems: &mut Vec<Violation>) {
    if let Some(Value::String(access)) = ep.get_mut("access") {
        match access.as_str() {
            "read_only" => *access = "read-only".into(),
            "read_write" => *access = "read-write".into(),
            _ => {}
        }
    }
    if let Some(Value::Array(rules)) = ep.get("rules") {
        let converted: Vec<Value> = rules.iter().flat_map(migrate_rule).collect();
        if converted.is_empty() {
            ep.remove("rules");
        } else {
            ep.insert("rules".into(), Value::Array(converted));
        }
    }
    let has_l7 = ep.contains_key("access") || ep.contains_key("rules");
    let Some(Value::String(protocol)) = ep.get("protocol") else {
        return;
    };
    match protocol.to_ascii_lowercase().as_str() {
        "http" | "https" => {
            ep.insert("protocol".into(), json!("rest"));
        }
        "tcp" | "tls" if has_l7 => {
            ep.insert("protocol".into(), json!("rest"));
        }
        "tls" => {
            ep.remove("protocol");
        }
        "udp" => problems.push(Violation::new(
            format!("{base}.protocol"),
            "protocol udp has no upstream equivalent; this stored policy cannot be converted \
             without changing what it allows",
        )),
        _ => {}
    }
}

/// One old rule as zero or more upstream rules.
fn migrate_rule(rule: &Value) -> Vec<Value> {
    let Some(rule) = rule.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(allow) = rule.get("allow").and_then(Value::as_object) {
        let kept: Map<String, Value> = allow
            .iter()
            .filter(|(_, v)| !matches!(v, Value::Null) && v.as_str() != Some(""))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            out.push(json!({ "allow": kept }));
        }
    }
    let strings = |key: &str| -> Vec<String> {
        rule.get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut methods = strings("methods");
    let mut paths = strings("paths");
    let access = rule.get("access").and_then(Value::as_str);
    if methods.is_empty() && paths.is_empty() && access.is_none() {
        return out;
    }
    if methods.is_empty() {
        methods = access
            .and_then(preset_methods)
            .unwrap_or(&["*"])
            .iter()
            .map(|m| m.to_string())
            .collect();
    }
    if paths.is_empty() {
        paths.push("**".into());
    }
    for method in &methods {
        for path in &paths {
            out.push(json!({ "allow": { "method": method, "path": path } }));
        }
    }
    out
}

fn migrate_middlewares(middlewares: &mut Map<String, Value>, problems: &mut Vec<Violation>) {
    for (key, mw) in middlewares.iter_mut() {
        let Some(mw) = mw.as_object_mut() else {
            continue;
        };
        match mw.get("config") {
            Some(Value::Null) => {
                mw.remove("config");
            }
            Some(Value::Object(_)) | None => {}
            Some(_) => problems.push(Violation::new(
                format!("network_middlewares{}.config", key_segment(key)),
                "config is not a map, which upstream requires; this stored policy cannot be \
                 converted without changing its meaning",
            )),
        }
        if mw.get("order").is_some_and(Value::is_null) {
            mw.remove("order");
        }
        if !mw.contains_key("endpoints") {
            mw.insert("endpoints".into(), json!({ "include": ["**"] }));
        }
    }
    let order_of = |mw: &Value| mw.get("order").and_then(Value::as_i64).unwrap_or(0);
    let mut sequence: Vec<(i64, String)> = middlewares
        .iter()
        .map(|(key, mw)| (order_of(mw), key.clone()))
        .collect();
    sequence.sort();
    let collides = sequence.windows(2).any(|pair| pair[0].0 == pair[1].0);
    if collides {
        for (rank, (_, key)) in sequence.iter().enumerate() {
            if let Some(mw) = middlewares.get_mut(key).and_then(Value::as_object_mut) {
                mw.insert("order".into(), json!((rank + 1) * 10));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::policy::parse_and_validate;

    /// What the 0.1.x example policy looked like in the store.
    const OLD_EXAMPLE: &str = r#"{"filesystem_policy":{"include_workdir":true,"read_only":["/usr","/lib","/etc","/proc","/dev/urandom"],"read_write":["/sandbox","/tmp","/dev/null"]},"landlock":{"compatibility":"best_effort"},"network_middlewares":{"request_audit":{"config":{"max_body_bytes":4096,"redact_headers":["authorization","cookie"]},"middleware":"request_logger","on_error":"fail_open","order":10}},"network_policies":{"github":{"binaries":[{"path":"/usr/bin/git"},{"path":"/usr/bin/gh"}],"endpoints":[{"enforcement":"enforce","host":"api.github.com","port":443,"protocol":"rest","rules":[{"methods":["GET","HEAD"],"paths":["/repos/**","/user"]},{"access":"read_write","methods":["POST"],"paths":["/repos/*/*/issues","/repos/*/*/pulls"]}]},{"access":"read_only","host":"*.githubusercontent.com","ports":[443],"protocol":"https"}]},"pypi":{"binaries":[{"path":"/usr/bin/pip"},{"path":"/usr/local/bin/uv"}],"endpoints":[{"access":"read_only","host":"pypi.org","port":443,"protocol":"https"},{"access":"read_only","host":"files.pythonhosted.org","port":443,"protocol":"https"}]}},"process":{"run_as_group":"sandbox","run_as_user":"sandbox"},"version":1}"#;

    #[test]
    fn the_old_example_converts_and_validates() {
        let new = migrate_legacy_policy_json(OLD_EXAMPLE).unwrap();
        let policy = parse_and_validate(&new).unwrap();
        let github = &policy.network_policies["github"];
        let rules = github.endpoints[0].allow_rules();
        let pairs: Vec<(&str, &str)> = rules
            .iter()
            .map(|r| (r.allow.method.as_str(), r.allow.path.as_str()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("GET", "/repos/**"),
                ("GET", "/user"),
                ("HEAD", "/repos/**"),
                ("HEAD", "/user"),
                ("POST", "/repos/*/*/issues"),
                ("POST", "/repos/*/*/pulls"),
            ]
        );
        assert_eq!(github.endpoints[1].access, "read-only");
        assert_eq!(github.endpoints[1].protocol, "rest");
        let audit = &policy.network_middlewares["request_audit"];
        assert_eq!(
            audit.endpoints.as_ref().unwrap().include,
            vec!["**".to_string()]
        );
        assert_eq!(audit.order, 10);
        assert!(!new.contains(r#""access":"read_only""#), "{new}");
        assert!(!new.contains("methods"), "{new}");
    }

    #[test]
    fn migration_is_idempotent_and_canonical() {
        let once = migrate_legacy_policy_json(OLD_EXAMPLE).unwrap();
        let twice = migrate_legacy_policy_json(&once).unwrap();
        assert_eq!(once, twice);
        assert_eq!(parse_policy(&once).unwrap().canonical_json(), once);
        let current = include_str!("../../../examples/policy.yaml");
        let current = parse_policy(current).unwrap().canonical_json();
        assert_eq!(migrate_legacy_policy_json(&current).unwrap(), current);
    }

    #[test]
    fn protocols_map_to_upstream_equivalents() {
        let one = |endpoint: &str| {
            let doc = format!(
                r#"{{"version":1,"network_policies":{{"p":{{"endpoints":[{endpoint}]}}}}}}"#
            );
            migrate_legacy_policy_json(&doc)
                .map(|new| parse_policy(&new).unwrap().network_policies["p"].endpoints[0].clone())
        };
        let ep =
            one(r#"{"host":"a.example.com","port":80,"protocol":"http","access":"read_write"}"#)
                .unwrap();
        assert_eq!(
            (ep.protocol.as_str(), ep.access.as_str()),
            ("rest", "read-write")
        );
        let ep = one(r#"{"host":"a.example.com","port":443,"protocol":"tls"}"#).unwrap();
        assert_eq!(ep.protocol, "");
        let ep = one(r#"{"host":"a.example.com","port":22,"protocol":"tcp"}"#).unwrap();
        assert_eq!(ep.protocol, "tcp");
        let ep =
            one(r#"{"host":"a.example.com","port":443,"protocol":"tcp","access":"full"}"#).unwrap();
        assert_eq!(ep.protocol, "rest");
        let err = one(r#"{"host":"a.example.com","port":53,"protocol":"udp"}"#).unwrap_err();
        assert_eq!(
            err.violations()[0].field,
            "network_policies.p.endpoints[0].protocol"
        );
    }

    #[test]
    fn rules_expand_from_access_levels_and_defaults() {
        let doc = r#"{"version":1,"network_policies":{"p":{"endpoints":[{"host":"a.example.com","port":443,"protocol":"rest","rules":[{"access":"read_only","paths":["/v1/**"]},{"methods":["DELETE"]},{},{"allow":{"method":"GET","path":"/x"}}]}]}}}"#;
        let new = migrate_legacy_policy_json(doc).unwrap();
        let policy = parse_and_validate(&new).unwrap();
        let pairs: Vec<(String, String)> = policy.network_policies["p"].endpoints[0]
            .allow_rules()
            .iter()
            .map(|r| (r.allow.method.clone(), r.allow.path.clone()))
            .collect();
        let expected: Vec<(String, String)> = [
            ("GET", "/v1/**"),
            ("HEAD", "/v1/**"),
            ("OPTIONS", "/v1/**"),
            ("DELETE", "**"),
            ("GET", "/x"),
        ]
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
        assert_eq!(pairs, expected);

        let only_empty = r#"{"version":1,"network_policies":{"p":{"endpoints":[{"host":"a.example.com","port":443,"rules":[{}]}]}}}"#;
        let new = migrate_legacy_policy_json(only_empty).unwrap();
        assert!(
            parse_policy(&new).unwrap().network_policies["p"].endpoints[0]
                .rules
                .is_none()
        );
    }

    #[test]
    fn middlewares_gain_selectors_and_unique_orders() {
        let doc = r#"{"version":1,"network_middlewares":{"b":{"middleware":"x","order":5},"a":{"middleware":"y","order":5,"config":null},"c":{"middleware":"z"}}}"#;
        let new = migrate_legacy_policy_json(doc).unwrap();
        let policy = parse_and_validate(&new).unwrap();
        let orders: Vec<(&str, i32)> = policy
            .network_middlewares
            .iter()
            .map(|(k, m)| (k.as_str(), m.order))
            .collect();
        assert_eq!(orders, vec![("a", 20), ("b", 30), ("c", 10)]);

        let bad = r#"{"version":1,"network_middlewares":{"m":{"middleware":"x","config":[1]}}}"#;
        let err = migrate_legacy_policy_json(bad).unwrap_err();
        assert_eq!(err.violations()[0].field, "network_middlewares.m.config");
        assert!(matches!(
            migrate_legacy_policy_json("not json"),
            Err(PolicyError::Syntax(_))
        ));
    }
}
