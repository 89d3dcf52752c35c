//! Whole policy documents: `corpus/accepted` holds documents upstream OpenShell accepts, which
//! must validate and round-trip exactly; `corpus/rejected` holds documents upstream refuses,
//! each with the field paths of its violations listed in `corpus/rejected.tsv`.
//!
//! The accepted corpus must also use every field and every enumerated value of the schema, so
//! a field added to the schema without a document exercising it fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use openshell_core::policy::{
    ACCESS_PRESETS, CREDENTIAL_SIGNING_MODES, ENFORCEMENT_MODES, GRAPHQL_OPERATION_TYPES,
    ON_ERROR_MODES, PERSISTED_QUERY_MODES, PROTOCOLS, SandboxPolicy, TLS_MODES, parse_and_validate,
    parse_policy,
};
use serde_json::Value;

fn corpus_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(kind)
}

/// Every `.yaml` document of one corpus, by file name.
fn documents(kind: &str) -> BTreeMap<String, String> {
    std::fs::read_dir(corpus_dir(kind))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

fn assert_round_trips(name: &str, policy: &SandboxPolicy) {
    let yaml = policy.to_yaml();
    let from_yaml = parse_and_validate(&yaml)
        .unwrap_or_else(|e| panic!("{name}: its YAML does not load again: {e}\n{yaml}"));
    assert_eq!(&from_yaml, policy, "{name}: YAML round trip\n{yaml}");
    assert_eq!(from_yaml.policy_hash(), policy.policy_hash(), "{name}");
    let canonical = policy.canonical_json();
    let from_json = parse_policy(&canonical).unwrap();
    assert_eq!(&from_json, policy, "{name}: canonical JSON round trip");
    assert_eq!(from_json.canonical_json(), canonical, "{name}");
}

#[test]
fn accepted_documents_validate_and_round_trip() {
    let docs = documents("accepted");
    assert!(docs.len() >= 60, "only {} accepted documents", docs.len());
    for (name, text) in &docs {
        let policy = parse_and_validate(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_round_trips(name, &policy);
    }
}

/// The expected violations per rejected document, from `rejected.tsv`.
fn expectations() -> BTreeMap<String, Vec<String>> {
    let table = std::fs::read_to_string(corpus_dir("rejected.tsv")).unwrap();
    table
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut cells = line.split('\t');
            let name = cells.next().unwrap().to_string();
            (name, cells.map(str::to_string).collect())
        })
        .collect()
}

#[test]
fn rejected_documents_fail_with_their_field_paths() {
    let docs = documents("rejected");
    let expected = expectations();
    assert!(docs.len() >= 60, "only {} rejected documents", docs.len());
    assert_eq!(
        docs.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "rejected.tsv must list exactly the documents in rejected/"
    );
    let mut wrong = Vec::new();
    for (name, text) in &docs {
        let fields: Vec<String> = match parse_and_validate(text) {
            Ok(_) => vec!["<accepted>".to_string()],
            Err(err) => err.violations().into_iter().map(|v| v.field).collect(),
        };
        if fields != expected[name] {
            wrong.push(format!(
                "{name}: expected {:?}, got {fields:?}",
                expected[name]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Map keys the operator chooses; they are not schema fields.
const OPEN_MAPS: &[&str] = &[
    "network_policies",
    "network_middlewares",
    "graphql_persisted_queries",
    "query",
    "params",
];

/// Records the schema path of every value (`network_policies.*.endpoints[].host`) and, for
/// strings, the values seen at each path.
fn walk(
    value: &Value,
    path: &str,
    paths: &mut BTreeSet<String>,
    values: &mut BTreeMap<String, BTreeSet<String>>,
) {
    let last = path.rsplit('.').next().unwrap_or_default();
    match value {
        Value::Object(map) if path.ends_with(".config") => {
            assert!(!map.is_empty());
            paths.insert(path.to_string());
        }
        Value::Object(map) => {
            for (key, child) in map {
                let segment = if OPEN_MAPS.contains(&last) { "*" } else { key };
                let child_path = if path.is_empty() {
                    segment.to_string()
                } else {
                    format!("{path}.{segment}")
                };
                walk(child, &child_path, paths, values);
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, &format!("{path}[]"), paths, values);
            }
        }
        Value::String(s) => {
            paths.insert(path.to_string());
            values
                .entry(path.to_string())
                .or_default()
                .insert(s.clone());
        }
        _ => {
            paths.insert(path.to_string());
        }
    }
}

const EP: &str = "network_policies.*.endpoints[]";

/// Every leaf of the schema, as `walk` names it.
fn schema_paths() -> Vec<String> {
    let rule = [
        "method",
        "path",
        "command",
        "query.*",
        "query.*.any[]",
        "operation_type",
        "operation_name",
        "fields[]",
        "tool",
        "tool.any[]",
        "params.*",
        "params.*.any[]",
    ];
    let mut out: Vec<String> = [
        "version",
        "filesystem_policy.include_workdir",
        "filesystem_policy.read_only[]",
        "filesystem_policy.read_write[]",
        "landlock.compatibility",
        "process.run_as_user",
        "process.run_as_group",
        "network_policies.*.name",
        "network_policies.*.binaries[].path",
        "network_policies.*.binaries[].harness",
        "network_middlewares.*.name",
        "network_middlewares.*.middleware",
        "network_middlewares.*.order",
        "network_middlewares.*.config",
        "network_middlewares.*.on_error",
        "network_middlewares.*.endpoints.include[]",
        "network_middlewares.*.endpoints.exclude[]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for field in [
        "host",
        "path",
        "port",
        "ports[]",
        "protocol",
        "tls",
        "enforcement",
        "access",
        "allowed_ips[]",
        "allow_encoded_slash",
        "websocket_credential_rewrite",
        "request_body_credential_rewrite",
        "allow_uninspected_credentials",
        "persisted_queries",
        "graphql_persisted_queries.*.operation_type",
        "graphql_persisted_queries.*.operation_name",
        "graphql_persisted_queries.*.fields[]",
        "graphql_max_body_bytes",
        "credential_signing",
        "signing_service",
        "signing_region",
        "json_rpc.max_body_bytes",
        "mcp.max_body_bytes",
        "mcp.strict_tool_names",
        "mcp.allow_all_known_mcp_methods",
    ] {
        out.push(format!("{EP}.{field}"));
    }
    for field in rule {
        out.push(format!("{EP}.rules[].allow.{field}"));
        out.push(format!("{EP}.deny_rules[].{field}"));
    }
    out
}

#[test]
fn accepted_corpus_uses_every_field_and_value() {
    let mut paths = BTreeSet::new();
    let mut values = BTreeMap::new();
    let mut empty_landlock = false;
    for (name, text) in documents("accepted") {
        let policy = parse_policy(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        empty_landlock |= policy
            .landlock
            .as_ref()
            .is_some_and(|l| l.compatibility.is_none());
        walk(
            &serde_json::to_value(&policy).unwrap(),
            "",
            &mut paths,
            &mut values,
        );
    }
    assert!(empty_landlock, "a document with `landlock: {{}}`");
    let missing: Vec<String> = schema_paths()
        .into_iter()
        .filter(|p| !paths.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "fields no accepted document uses: {missing:?}"
    );
    let unknown: Vec<&String> = paths
        .iter()
        .filter(|p| !schema_paths().contains(p))
        .collect();
    assert!(
        unknown.is_empty(),
        "paths the coverage list lacks: {unknown:?}"
    );

    let seen = |path: &str| -> BTreeSet<String> {
        values
            .get(&format!("{EP}.{path}"))
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.to_ascii_lowercase())
            .collect()
    };
    let mut operation_types = seen("rules[].allow.operation_type");
    operation_types.extend(seen("deny_rules[].operation_type"));
    operation_types.extend(seen("graphql_persisted_queries.*.operation_type"));
    let checks: [(&str, BTreeSet<String>, &[&str]); 9] = [
        ("protocol", seen("protocol"), PROTOCOLS),
        ("tls", seen("tls"), TLS_MODES),
        ("enforcement", seen("enforcement"), ENFORCEMENT_MODES),
        ("access", seen("access"), ACCESS_PRESETS),
        (
            "credential_signing",
            seen("credential_signing"),
            CREDENTIAL_SIGNING_MODES,
        ),
        (
            "persisted_queries",
            seen("persisted_queries"),
            PERSISTED_QUERY_MODES,
        ),
        ("operation_type", operation_types, GRAPHQL_OPERATION_TYPES),
        (
            "on_error",
            values
                .get("network_middlewares.*.on_error")
                .cloned()
                .unwrap_or_default(),
            ON_ERROR_MODES,
        ),
        (
            "landlock.compatibility",
            values
                .get("landlock.compatibility")
                .cloned()
                .unwrap_or_default(),
            &["best_effort", "hard_requirement"],
        ),
    ];
    for (what, seen, all) in checks {
        let missing: Vec<&&str> = all.iter().filter(|v| !seen.contains(**v)).collect();
        assert!(
            missing.is_empty(),
            "{what} values no accepted document uses: {missing:?}"
        );
    }
}
