//! Unit tests of parsing, validation and the canonical form. The corpus of whole documents
//! lives in `core/tests/corpus.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use super::*;

const EXAMPLE: &str = include_str!("../../../examples/policy.yaml");

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
        policy.landlock.as_ref().unwrap().effective_compatibility(),
        LandlockCompatibility::BestEffort
    );
    assert_eq!(
        policy.network_policies["github"].display_name("github"),
        "github-api"
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
fn a_port_is_required_and_ports_win_over_port() {
    let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { host: a.example.com }\n      - { host: c.example.com, ports: [] }\n";
    let v = invalid(yaml);
    assert_eq!(
        fields(&v),
        [
            "network_policies.p.endpoints[0].port",
            "network_policies.p.endpoints[1].port"
        ]
    );
    assert!(v[0].message.contains("port is required"), "{v:?}");

    // Upstream's client sends `port` and its copy in `ports`; that is one port, said twice.
    let copied = parse_and_validate(
        "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { host: a.example.com, port: 443, ports: [443] }\n",
    )
    .unwrap();
    assert!(copied.warnings().is_empty(), "{:?}", copied.warnings());
    assert_eq!(
        copied.network_policies["p"].endpoints[0].effective_ports(),
        [443]
    );

    // A port the list leaves out is not opened, and the author is told.
    let both = parse_and_validate(
        "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { host: b.example.com, port: 80, ports: [443, 8443] }\n",
    )
    .unwrap();
    assert_eq!(
        both.network_policies["p"].endpoints[0].effective_ports(),
        [443, 8443]
    );
    let warnings = both.warnings();
    assert_eq!(fields(&warnings), ["network_policies.p.endpoints[0].port"]);
    assert!(
        warnings[0].message.contains("port 80 is not opened"),
        "{warnings:?}"
    );
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
    assert!(v[0].message.starts_with("host is required"), "{}", v[0]);
}

#[test]
fn tld_wildcards_rejected() {
    for host in ["*.com", "**.io", "*", "**", "*.io", "**.com"] {
        let v = invalid(&one_endpoint(host));
        assert_eq!(v.len(), 1, "{host}: {v:?}");
        assert_eq!(v[0].field, "network_policies.p.endpoints[0].host");
        assert!(
            v[0].message.contains("whole top-level domain") || v[0].message.contains("every host"),
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
        "git_hub.com",
        "api.*.com",
        "api*.github.com",
        "*.*.github.com",
        "github.com.*",
        "*-aiplatform.googleapis.com",
    ] {
        parse_and_validate(&one_endpoint(host)).unwrap_or_else(|e| panic!("{host}: {e}"));
    }
}

#[test]
fn misplaced_wildcards_and_bad_chars_rejected() {
    for host in [
        "*github.com",
        "***.github.com",
        "api.**.github.com",
        "api.git*.com",
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
    parse_and_validate("version: 1\nfilesystem_policy:\n  read_only: [/opt/a..b, /x/..hidden]\n")
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

    let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
    let ok = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
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
  "landlock": {},
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
        compatibility: Some(LandlockCompatibility::HardRequirement),
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
    let err = PolicyError::Syntax("JSON: expected value at line 1 column 2".into());
    assert_eq!(err.violations()[0].field, "");
}

#[test]
fn parser_errors_name_their_field() {
    let cases = [
        (
            "version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - host: a.example.com\n        port: 1\n        hots: x\n",
            "network_policies.gh.endpoints[0].hots",
        ),
        ("version: 1\ncolour: blue\n", "colour"),
        (
            "version: 1\nlandlock:\n  compatibility: strict\n",
            "landlock.compatibility",
        ),
        (
            r#"{"version": 1, "process": {"run_as": "x"}}"#,
            "process.run_as",
        ),
        (
            r#"{"version": 1, "network_policies": {"p": {"endpoints": [{"host": "a.b.c", "port": -1}]}}}"#,
            "network_policies.p.endpoints[0].port",
        ),
    ];
    for (doc, field) in cases {
        let v = parse_policy(doc).unwrap_err().violations();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, field, "{doc}: {}", v[0]);
        assert!(v[0].message.contains("line "), "{}", v[0]);
    }
}

fn fields(v: &[Violation]) -> Vec<&str> {
    v.iter().map(|v| v.field.as_str()).collect()
}

fn endpoint_doc(endpoint: &str) -> String {
    format!("version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {endpoint}\n")
}

#[test]
fn protocols_are_upstreams() {
    for protocol in PROTOCOLS.iter().chain(["REST", "Json-Rpc"].iter()) {
        let doc = endpoint_doc(&format!(
            "{{ host: a.example.com, port: 443, protocol: {protocol:?} }}"
        ));
        let v = parse_policy(&doc)
            .unwrap()
            .validate()
            .err()
            .unwrap_or_default();
        assert!(
            !v.iter().any(
                |v| v.field.ends_with(".protocol") && v.message.starts_with("unknown protocol")
            ),
            "{protocol}: {v:?}"
        );
    }
    for protocol in ["https", "http", "udp", "tls", "grpc"] {
        let doc = endpoint_doc(&format!(
            "{{ host: a.example.com, port: 443, protocol: {protocol} }}"
        ));
        let v = invalid(&doc);
        assert_eq!(
            fields(&v),
            ["network_policies.p.endpoints[0].protocol"],
            "{protocol}"
        );
        assert!(
            v[0].message
                .contains("tcp, rest, websocket, graphql, sql, json-rpc, mcp"),
            "{}",
            v[0]
        );
    }
}

#[test]
fn access_is_spelt_as_upstream_spells_it() {
    let ok = endpoint_doc("{ host: a.example.com, port: 443, protocol: rest, access: read-only }");
    let policy = parse_and_validate(&ok).unwrap();
    assert_eq!(
        policy.network_policies["p"].endpoints[0].access,
        "read-only"
    );
    assert!(
        policy.to_yaml().contains("access: read-only"),
        "{}",
        policy.to_yaml()
    );
    assert!(policy.canonical_json().contains(r#""access":"read-only""#));
    let old = ok.replace("read-only", "read_only");
    let v = invalid(&old);
    assert_eq!(fields(&v), ["network_policies.p.endpoints[0].access"]);
    assert!(
        v[0].message.contains("read-only, read-write, full"),
        "{}",
        v[0]
    );
}

#[test]
fn old_rule_shapes_are_unknown_fields() {
    let doc = endpoint_doc(
        "{ host: a.example.com, port: 443, protocol: rest, rules: [{ methods: [GET], paths: [/x] }] }",
    );
    let err = parse_policy(&doc).unwrap_err();
    assert!(matches!(err, PolicyError::Syntax(_)));
    assert!(err.to_string().contains("methods"), "{err}");
}

#[test]
fn access_and_rules_are_exclusive() {
    let doc = endpoint_doc(
        "{ host: a.example.com, port: 443, protocol: rest, access: full, rules: [{ allow: { method: GET, path: /x } }] }",
    );
    let v = invalid(&doc);
    assert_eq!(fields(&v), ["network_policies.p.endpoints[0].access"]);
    assert!(v[0].message.contains("mutually exclusive"));
}

#[test]
fn binaries_need_a_path_and_harness_is_kept() {
    let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints: [{ host: a.example.com, port: 443 }]\n    binaries:\n      - path: /usr/bin/git\n        harness: true\n      - path: git\n      - {}\n";
    let v = invalid(yaml);
    assert_eq!(fields(&v), ["network_policies.p.binaries[2].path"]);
    let mut fixed = parse_policy(yaml).unwrap();
    fixed.network_policies.get_mut("p").unwrap().binaries.pop();
    assert_eq!(fixed.network_policies["p"].binaries[0].harness, Some(true));
    let back = parse_policy(&fixed.to_yaml()).unwrap();
    assert_eq!(back, fixed);
    assert!(fixed.to_yaml().contains("harness: true"));
}

#[test]
fn policy_and_middleware_keys() {
    let long = "a".repeat(MAX_POLICY_KEY_CHARS + 1);
    let yaml = format!(
        r#"
version: 1
network_policies:
  GitHub.API:
    endpoints: [{{ host: a.example.com, port: 443 }}]
  "":
    endpoints: [{{ host: b.example.com, port: 443 }}]
  {long}:
    endpoints: [{{ host: c.example.com, port: 443 }}]
  ok_name-1:
    endpoints: [{{ host: d.example.com, port: 443 }}]
network_middlewares:
  "":
    middleware: logger
    endpoints: {{ include: [a.example.com] }}
  nameless:
    middleware: ""
    order: 1
    endpoints: {{ include: [a.example.com] }}
"#
    );
    let v = invalid(&yaml);
    assert_eq!(
        fields(&v),
        vec![
            "network_policies[\"\"]",
            format!("network_policies.{long}").as_str(),
            "network_middlewares[\"\"]",
            "network_middlewares.nameless.middleware",
        ]
    );
    assert!(v[0].message.contains("empty"));
    assert!(v[1].message.contains("256"));
}

#[test]
fn duplicate_keys_rejected() {
    let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints: []\n  p:\n    endpoints: []\n";
    let err = parse_policy(yaml).unwrap_err();
    assert!(err.to_string().contains("duplicate"), "{err}");
    let json =
        r#"{"version":1,"network_middlewares":{"m":{"middleware":"a"},"m":{"middleware":"b"}}}"#;
    let err = parse_policy(json).unwrap_err();
    assert!(err.to_string().contains("duplicate key `m`"), "{err}");
}

#[test]
fn bad_landlock_mode_is_a_syntax_error_other_values_are_violations() {
    let err = parse_policy("version: 1\nlandlock:\n  compatibility: strict\n").unwrap_err();
    assert!(matches!(err, PolicyError::Syntax(_)), "{err}");
    let doc = "version: 1\nnetwork_policies:\n  p:\n    endpoints: [{ host: a.b.example, port: 1, access: write, tls: off, enforcement: block }]\nnetwork_middlewares:\n  m: { middleware: x, on_error: ignore, endpoints: { include: [a.example.com] } }\n";
    assert_eq!(
        fields(&invalid(doc)),
        [
            "network_policies.p.endpoints[0].tls",
            "network_policies.p.endpoints[0].enforcement",
            "network_policies.p.endpoints[0].access",
            "network_middlewares.m.on_error",
        ]
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
                name: Some("null".into()),
                endpoints: vec![Endpoint {
                    host: "*.example.com".into(),
                    ports: vec![443, 8443],
                    protocol: "null".into(),
                    signing_region: "~".into(),
                    ..Endpoint::default()
                }],
                binaries: vec![Binary {
                    path: "/bin/~".into(),
                    harness: None,
                }],
            },
        )]),
        network_middlewares: BTreeMap::from([(
            "m".to_string(),
            NetworkMiddleware {
                name: Some("yes".into()),
                middleware: "on".into(),
                config: BTreeMap::from([
                    ("n".to_string(), serde_json::json!(1.5)),
                    ("s".to_string(), serde_json::json!("on")),
                    ("list".to_string(), serde_json::json!([1, "2", null])),
                ]),
                on_error: "fail_closed".into(),
                order: -3,
                endpoints: None,
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
fn serialization_drops_only_what_reads_back_equal() {
    let yaml = "version: 1\nfilesystem_policy:\n  read_only: []\nlandlock: {}\nnetwork_policies:\n  p:\n    endpoints:\n      - host: a.example.com\n        port: 443\n        path: ''\n        allowed_ips: []\n        graphql_max_body_bytes: 0\n    binaries: []\nnetwork_middlewares: {}\n";
    let p = parse_policy(yaml).unwrap();
    assert_eq!(
        p.canonical_json(),
        r#"{"filesystem_policy":{"include_workdir":false},"landlock":{},"network_policies":{"p":{"endpoints":[{"host":"a.example.com","port":443}]}},"version":1}"#
    );
    // An explicitly empty rules list is kept: upstream refuses it, so it must stay visible.
    let with_rules = endpoint_doc("{ host: a.example.com, port: 443, protocol: rest, rules: [] }");
    let p = parse_policy(&with_rules).unwrap();
    assert!(p.canonical_json().contains(r#""rules":[]"#));
    assert_eq!(
        fields(&p.validate().unwrap_err()),
        [
            "network_policies.p.endpoints[0].rules",
            "network_policies.p.endpoints[0].rules"
        ]
    );
}

#[test]
fn name_is_a_display_name_that_may_differ_from_the_key() {
    let text = "version: 1\nnetwork_policies:\n  github_api:\n    name: github-api-readonly\n    endpoints:\n      - host: api.github.com\n        port: 443\n        protocol: rest\n        rules:\n          - allow:\n              method: FETCH\n              path: \"/repos/**\"\n";
    let policy = parse_and_validate(text).expect("upstream accepts this");
    let entry = &policy.network_policies["github_api"];
    assert_eq!(entry.display_name("github_api"), "github-api-readonly");
    // Upstream only warns about a method outside the standard set.
    let warnings = policy.warnings();
    assert_eq!(
        fields(&warnings),
        ["network_policies.github_api.endpoints[0].rules[0].allow.method"]
    );
}

#[test]
fn hostless_endpoints_need_allowed_ips() {
    let ok = endpoint_doc("{ port: 5432, allowed_ips: [10.0.5.0/24, \"fd00::/8\"] }");
    parse_and_validate(&ok).unwrap();
    let bad = endpoint_doc("{ port: 5432, allowed_ips: [127.0.0.1, 10.0.0.0/33, 0.0.0.0/0, db] }");
    assert_eq!(
        fields(&invalid(&bad)),
        [
            "network_policies.p.endpoints[0].allowed_ips[0]",
            "network_policies.p.endpoints[0].allowed_ips[1]",
            "network_policies.p.endpoints[0].allowed_ips[2]",
            "network_policies.p.endpoints[0].allowed_ips[3]",
        ]
    );
}

#[test]
fn process_identity_is_sandbox_or_a_sandbox_range_id() {
    for ok in ["sandbox", "1000", "2000000000", ""] {
        let doc = format!("version: 1\nprocess:\n  run_as_user: {ok:?}\n");
        parse_and_validate(&doc).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in ["root", "0", "999", "2000000001", "nobody"] {
        let doc = format!("version: 1\nprocess:\n  run_as_group: {bad:?}\n");
        assert_eq!(fields(&invalid(&doc)), ["process.run_as_group"], "{bad}");
    }
}

#[test]
fn middleware_rules() {
    let doc = r#"
version: 1
network_policies:
  raw:
    endpoints:
      - { host: "*.vendor.example.com", port: 443, tls: skip }
network_middlewares:
  a: { middleware: x, order: 1, endpoints: { include: ["api.vendor.example.com"] } }
  b: { middleware: x, order: 1, endpoints: { include: ["api.other.example.com"] } }
  c: { middleware: x, order: 2 }
  d: { middleware: x, order: 3, endpoints: { include: [], exclude: ["api[.x.com"] } }
  e: { middleware: x, order: 4, on_error: fail_open, endpoints: { include: ["**"] } }
"#;
    assert_eq!(
        fields(&invalid(doc)),
        [
            "network_middlewares.a.endpoints",
            "network_middlewares.b.order",
            "network_middlewares.c.endpoints",
            "network_middlewares.d.endpoints.include",
            "network_middlewares.d.endpoints.exclude[0]",
        ]
    );
}

#[test]
fn overlapping_endpoints_must_agree_on_connection_handling() {
    let doc = r#"
version: 1
network_policies:
  a:
    endpoints: [{ host: "*.example.com", port: 443, tls: skip }]
  b:
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: api.example.com, port: 8443 }
      - { host: api.other.com, port: 443 }
"#;
    let v = invalid(doc);
    assert_eq!(fields(&v), ["network_policies.b.endpoints[0]"]);
    assert!(
        v[0].message.contains("network_policies.a.endpoints[0]"),
        "{}",
        v[0]
    );
    assert!(v[0].message.contains("tls"), "{}", v[0]);
}

#[test]
fn overlap_checks_are_bounded_and_report_each_endpoint_once() {
    // Hosts made of wildcard labels make every comparison a long search; the work is capped.
    let stars = "*.".repeat(100);
    let mut doc = String::from("version: 1\nnetwork_policies:\n  p:\n    endpoints:\n");
    for i in 0..600 {
        let enforcement = if i % 2 == 0 { "enforce" } else { "audit" };
        doc.push_str(&format!(
            "      - {{host: \"{stars}x.io\", port: 443, path: /a{i}, protocol: rest, access: full, enforcement: {enforcement}}}\n"
        ));
    }
    let v = invalid(&doc);
    assert!(
        v.iter()
            .any(|v| v.field == "network_policies" && v.message.contains("too many")),
        "{v:?}"
    );

    // Every endpoint clashes with every earlier one, yet each is reported once.
    let mut doc = String::from("version: 1\nnetwork_policies:\n  p:\n    endpoints:\n");
    for i in 0..50 {
        let tls = if i % 2 == 0 { "skip" } else { "terminate" };
        doc.push_str(&format!(
            "      - {{host: api.example.com, port: 443, tls: {tls}}}\n"
        ));
    }
    let v = invalid(&doc);
    assert_eq!(v.len(), 49, "{v:?}");
    assert!(v[0].message.contains("network_policies.p.endpoints[0]"));
}

#[test]
fn an_alias_bomb_is_refused_by_name() {
    let mut doc = String::from(
        "version: 1\nnetwork_middlewares:\n  m:\n    middleware: request_logger\n    config:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 1..10 {
        let aliases = vec![format!("*a{}", i - 1); 10].join(", ");
        doc.push_str(&format!("      a{i}: &a{i} [{aliases}]\n"));
    }
    let err = parse_policy(&doc).unwrap_err();
    assert!(matches!(err, PolicyError::Syntax(_)), "{err}");
    assert!(err.to_string().contains("alias bomb"), "{err}");
}
