use super::*;
use crate::policy::parse_policy;

fn policy(yaml: &str) -> SandboxPolicy {
    parse_policy(yaml).expect("test policy parses")
}

fn specs(f: impl FnOnce(&mut EditSpecs)) -> Result<Vec<PolicyEdit>, Vec<Violation>> {
    let mut specs = EditSpecs::default();
    f(&mut specs);
    specs.to_edits()
}

fn edited(base: &SandboxPolicy, f: impl FnOnce(&mut EditSpecs)) -> Edited {
    let edits = specs(f).expect("specs are valid");
    apply_edits(base, &edits).expect("edits apply")
}

const GITHUB: &str = r"
version: 1
network_policies:
  github:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        access: read-only
    binaries:
      - path: /usr/bin/gh
";

#[test]
fn generated_rule_names_follow_upstream() {
    assert_eq!(
        generated_rule_name("api.github.com", 443),
        "allow_api_github_com_443"
    );
    assert_eq!(
        generated_rule_name("my-host.example", 8080),
        "allow_my_host_example_8080"
    );
}

#[test]
fn an_added_endpoint_becomes_a_rule_of_its_own_and_validates() {
    let out = edited(&SandboxPolicy::default(), |s| {
        s.add_endpoints = vec!["pypi.org:443:read-only:rest:enforce".into()];
        s.binaries = vec!["/usr/bin/pip".into(), "/usr/bin/pip".into()];
    });
    let rule = &out.policy.network_policies["allow_pypi_org_443"];
    assert_eq!(rule.endpoints[0].host, "pypi.org");
    assert_eq!(rule.endpoints[0].port, Some(443));
    assert_eq!(rule.endpoints[0].access, "read-only");
    assert_eq!(rule.endpoints[0].enforcement, "enforce");
    assert_eq!(rule.binaries.len(), 1, "duplicate binaries are dropped");
    out.policy.validate().expect("the edited policy is valid");
    assert!(out.notes.is_empty(), "{:?}", out.notes);
}

#[test]
fn an_endpoint_already_allowed_merges_into_its_rule() {
    let base = policy(GITHUB);
    let out = edited(&base, |s| {
        s.add_endpoints = vec!["api.github.com:443:read-write".into()];
        s.binaries = vec!["/usr/bin/curl".into()];
    });
    assert_eq!(out.policy.network_policies.len(), 1, "no second rule");
    let rule = &out.policy.network_policies["github"];
    let paths: Vec<&str> = rule.binaries.iter().map(|b| b.path.as_str()).collect();
    assert_eq!(paths, ["/usr/bin/gh", "/usr/bin/curl"]);
    assert_eq!(rule.endpoints[0].access, "read-only", "set fields are kept");
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("merged into rule github")),
        "{:?}",
        out.notes
    );
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("keeps its access preset")),
        "{:?}",
        out.notes
    );
}

#[test]
fn a_new_port_of_a_known_host_is_united_with_the_endpoint() {
    let base = policy(GITHUB);
    let out = apply_edits(
        &base,
        &[PolicyEdit::AddRule {
            rule_name: "github".into(),
            rule: NetworkPolicy {
                endpoints: vec![Endpoint {
                    host: "api.github.com".into(),
                    ports: vec![443, 8443],
                    ..Endpoint::default()
                }],
                ..NetworkPolicy::default()
            },
        }],
    )
    .expect("applies");
    let endpoint = &out.policy.network_policies["github"].endpoints[0];
    assert_eq!(endpoint.port, None);
    assert_eq!(endpoint.ports, vec![443, 8443]);
}

#[test]
fn allow_rules_expand_an_access_preset_first() {
    let out = edited(&policy(GITHUB), |s| {
        s.add_allow = vec!["api.github.com:443:post:/repos/*/issues".into()];
    });
    let endpoint = &out.policy.network_policies["github"].endpoints[0];
    assert!(endpoint.access.is_empty());
    let methods: Vec<&str> = endpoint
        .allow_rules()
        .iter()
        .map(|r| r.allow.method.as_str())
        .collect();
    assert_eq!(methods, ["GET", "HEAD", "OPTIONS", "POST"]);
    assert!(out.notes[0].contains("expanded"), "{:?}", out.notes);
    out.policy.validate().expect("valid");
}

#[test]
fn deny_rules_need_an_inspected_endpoint_that_allows_something() {
    let out = edited(&policy(GITHUB), |s| {
        s.add_deny = vec!["api.github.com:443:DELETE:/repos/**".into()];
    });
    assert_eq!(
        out.policy.network_policies["github"].endpoints[0].deny_rule_list()[0].method,
        "DELETE"
    );
    let plain = policy(
        "version: 1\nnetwork_policies:\n  db:\n    endpoints:\n      - host: db.internal\n        port: 5432\n    binaries:\n      - path: /usr/bin/psql\n",
    );
    let edits = specs(|s| s.add_deny = vec!["db.internal:5432:GET:/x".into()]).unwrap();
    let err = apply_edits(&plain, &edits).unwrap_err();
    assert_eq!(err[0].field, "merge_operations[0].add_deny_rules");
    assert!(err[0].message.contains("not inspected"), "{}", err[0]);
    let edits = specs(|s| s.add_allow = vec!["nowhere.example:443:GET:/x".into()]).unwrap();
    let err = apply_edits(&plain, &edits).unwrap_err();
    assert!(
        err[0].message.contains("no endpoint nowhere.example:443"),
        "{}",
        err[0]
    );
}

#[test]
fn removing_a_port_keeps_the_others_and_an_emptied_rule_goes() {
    let base = policy(
        "version: 1\nnetwork_policies:\n  multi:\n    endpoints:\n      - host: api.example.com\n        ports: [80, 443]\n    binaries:\n      - path: /usr/bin/curl\n",
    );
    let out = edited(&base, |s| {
        s.remove_endpoints = vec!["api.example.com:443".into()]
    });
    let endpoint = &out.policy.network_policies["multi"].endpoints[0];
    assert_eq!((endpoint.port, endpoint.ports.is_empty()), (Some(80), true));
    let out = edited(&out.policy, |s| {
        s.remove_endpoints = vec!["API.example.com:80".into()]
    });
    assert!(out.policy.network_policies.is_empty());
}

#[test]
fn removing_what_is_not_there_changes_nothing_and_says_so() {
    let base = policy(GITHUB);
    let out = edited(&base, |s| {
        s.remove_endpoints = vec!["nowhere.example:443".into()];
        s.remove_rules = vec!["nothing".into()];
    });
    assert_eq!(out.policy, base);
    assert_eq!(out.notes.len(), 2, "{:?}", out.notes);
}

#[test]
fn removing_the_last_binary_removes_the_rule() {
    let base = policy(GITHUB);
    let out = apply_edits(
        &base,
        &[PolicyEdit::RemoveBinary {
            rule_name: "github".into(),
            binary_path: "/usr/bin/gh".into(),
        }],
    )
    .unwrap();
    assert!(out.policy.network_policies.is_empty());
}

#[test]
fn every_bad_spec_is_reported_with_its_option() {
    let err = specs(|s| {
        s.add_endpoints = vec![
            "api.github.com".into(),
            "h:0".into(),
            "h:443:write-ish".into(),
            "h:443::rest:strict".into(),
            "h:443:::enforce".into(),
            "h:443:full:sql::websocket-credential-rewrite".into(),
        ];
        s.add_allow = vec!["h:443:GET:relative".into()];
        s.add_deny = vec!["h:443".into()];
        s.remove_rules = vec![" ".into()];
        s.rule_name = Some("mine".into());
    })
    .unwrap_err();
    let fields: Vec<&str> = err.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "rule_name",
            "add_endpoints[0]",
            "add_endpoints[1]",
            "add_endpoints[2]",
            "add_endpoints[3]",
            "add_endpoints[4]",
            "add_endpoints[5]",
            "remove_rules[0]",
            "add_allow[0]",
            "add_deny[0]",
        ]
    );
    assert!(err[2].message.contains("expected 1 to 65535"), "{}", err[2]);
    assert!(
        err[3].message.contains("read-only, read-write, full"),
        "{}",
        err[3]
    );
    assert!(err[5].message.contains("without PROTOCOL"), "{}", err[5]);
    assert!(
        err[6].message.contains("needs PROTOCOL rest or websocket"),
        "{}",
        err[6]
    );
}

#[test]
fn binaries_and_rule_name_apply_only_to_added_endpoints() {
    let err = specs(|s| {
        s.remove_rules = vec!["x".into()];
        s.binaries = vec!["/bin/sh".into()];
        s.rule_name = Some("y".into());
    })
    .unwrap_err();
    let fields: Vec<&str> = err.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(fields, ["binaries", "rule_name"]);
    let err = specs(|_| {}).unwrap_err();
    assert!(
        err[0].message.starts_with("nothing to change"),
        "{}",
        err[0]
    );
}

#[test]
fn a_rule_name_names_the_added_rule_and_edits_keep_upstreams_order() {
    let edits = specs(|s| {
        s.add_deny = vec![
            "b:443:GET:/x".into(),
            "a:443:GET:/y".into(),
            "a:443:PUT:/z".into(),
        ];
        s.add_allow = vec!["a:443:GET:/w".into()];
        s.remove_rules = vec!["old".into()];
        s.remove_endpoints = vec!["c:80".into()];
        s.add_endpoints = vec!["a:443:full:rest".into()];
        s.rule_name = Some("mine".into());
    })
    .unwrap();
    let kinds: Vec<&str> = edits.iter().map(PolicyEdit::kind).collect();
    assert_eq!(
        kinds,
        [
            "add_rule",
            "remove_endpoint",
            "remove_rule",
            "add_allow_rules",
            "add_deny_rules",
            "add_deny_rules",
        ]
    );
    assert!(matches!(&edits[0], PolicyEdit::AddRule { rule_name, .. } if rule_name == "mine"));
    assert!(
        matches!(&edits[4], PolicyEdit::AddDenyRules { host, deny_rules, .. } if host == "a" && deny_rules.len() == 2)
    );
}
