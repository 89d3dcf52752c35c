//! Property: a policy converted to `openshell.sandbox.v1.SandboxPolicy`, encoded, decoded and
//! converted back is the same document (its normal form is itself), with the same hash, the
//! same validation verdict and violations, and the message it converts to again is the one it
//! came from. Checked on generated valid policies (`support`), on generated policies full of
//! the shapes proto3 cannot tell apart (mostly invalid ones, since validation is what those
//! shapes change), and on the whole corpus.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use openshell_core::policy::{
    AnyMatcher, Binary, Endpoint, EndpointSelector, FilesystemPolicy, GraphqlOperation,
    JsonRpcConfig, Landlock, LandlockCompatibility, McpConfig, NetworkMiddleware, NetworkPolicy,
    ParamMatcher, ProcessPolicy, QueryMatcher, Rule, RuleMatch, SandboxPolicy, parse_and_validate,
    parse_policy,
};
use openshell_proto::sandbox::v1 as pb;
use proptest::prelude::*;
use proptest::sample::select;
use prost::Message;
use serde_json::Value;

/// Converts, encodes, decodes and converts back, checking everything the normal form
/// promises on the way. Returns the failure as text so proptest can shrink it.
fn check_trip(policy: &SandboxPolicy) -> Result<(), String> {
    let message = pb::SandboxPolicy::from(policy);
    let decoded = pb::SandboxPolicy::decode(message.encode_to_vec().as_slice())
        .map_err(|e| format!("the encoded message does not decode: {e}"))?;
    if decoded != message {
        return Err("the message changed through its bytes".into());
    }
    let back = SandboxPolicy::try_from(&decoded).map_err(|e| format!("not read back: {e}"))?;
    if &back != policy {
        return Err(format!(
            "came back different:\n{}\ninstead of\n{}",
            back.canonical_json(),
            policy.canonical_json()
        ));
    }
    if back.policy_hash() != policy.policy_hash() {
        return Err("the hash changed".into());
    }
    if back.validate() != policy.validate() || back.warnings() != policy.warnings() {
        return Err("validation changed".into());
    }
    if pb::SandboxPolicy::from(&back) != message {
        return Err("the message it converts to again differs".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Policies of every awkward shape, valid or not.

fn word() -> impl Strategy<Value = String> {
    select(vec![
        "",
        "x",
        "a*",
        "GET",
        "tools/call",
        "/p/**",
        "a.b",
        "query",
        "skip",
        "[",
    ])
    .prop_map(str::to_string)
}

fn matcher() -> impl Strategy<Value = QueryMatcher> {
    prop_oneof![
        word().prop_map(QueryMatcher::Glob),
        prop::collection::vec(word(), 0..3).prop_map(|any| QueryMatcher::Any(AnyMatcher { any })),
    ]
}

fn param() -> impl Strategy<Value = ParamMatcher> {
    matcher()
        .prop_map(ParamMatcher::Matcher)
        .prop_recursive(3, 8, 3, |inner| {
            prop::collection::btree_map(select(vec!["name", "a", "b.c", ""]), inner, 0..3).prop_map(
                |m| ParamMatcher::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
            )
        })
}

fn rule_match() -> impl Strategy<Value = RuleMatch> {
    (
        (word(), word(), word()),
        prop::collection::btree_map(word(), matcher(), 0..2),
        (word(), word()),
        prop::option::of(prop::collection::vec(word(), 0..2)),
        prop::option::of(matcher()),
        prop::collection::btree_map(select(vec!["name", "a", "x.y"]), param(), 0..3),
    )
        .prop_map(
            |(
                (method, path, command),
                query,
                (operation_type, operation_name),
                fields,
                tool,
                params,
            )| {
                RuleMatch {
                    method,
                    path,
                    command,
                    query,
                    operation_type,
                    operation_name,
                    fields,
                    tool,
                    params: params
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                }
            },
        )
}

fn endpoint() -> impl Strategy<Value = Endpoint> {
    let basics = (
        select(vec!["", "a.example.com", "*.b.example.com"]),
        word(),
        prop::option::of(select(vec![0u32, 443, 70_000])),
        prop::collection::vec(select(vec![0u32, 80, 443]), 0..3),
        select(vec![
            "",
            "rest",
            "mcp",
            "json-rpc",
            "tcp",
            "graphql",
            "websocket",
            "Sql",
        ]),
        select(vec!["", "skip", "terminate"]),
        select(vec!["", "enforce", "audit"]),
        select(vec!["", "full", "read-only", "everything"]),
    );
    let rules = (
        prop::option::of(prop::collection::vec(rule_match(), 0..3)),
        prop::option::of(prop::collection::vec(rule_match(), 0..2)),
        prop::collection::vec(select(vec!["10.0.0.0/8", "127.0.0.1", "nope"]), 0..2),
        any::<(bool, bool, bool, bool)>(),
    );
    let graphql = (
        select(vec!["", "deny", "allow_registered"]),
        prop::collection::btree_map(
            word(),
            (
                word(),
                word(),
                prop::option::of(prop::collection::vec(word(), 0..2)),
            ),
            0..2,
        ),
        select(vec![0u32, 4096]),
    );
    let extras = (
        select(vec!["", "sigv4", "sigv4:body"]),
        (word(), word()),
        prop::option::of(select(vec![0u32, 1024])),
        prop::option::of((
            select(vec![0u32, 2048]),
            prop::option::of(any::<bool>()),
            prop::option::of(any::<bool>()),
        )),
    );
    (basics, rules, graphql, extras).prop_map(
        |(
            (host, path, port, ports, protocol, tls, enforcement, access),
            (rules, deny_rules, allowed_ips, (slash, ws, body, uninspected)),
            (persisted_queries, registry, graphql_max_body_bytes),
            (credential_signing, (signing_service, signing_region), json_rpc, mcp),
        )| Endpoint {
            host: host.into(),
            path,
            port,
            ports,
            protocol: protocol.into(),
            tls: tls.into(),
            enforcement: enforcement.into(),
            access: access.into(),
            rules: rules.map(|r| r.into_iter().map(|allow| Rule { allow }).collect()),
            allowed_ips: allowed_ips.into_iter().map(str::to_string).collect(),
            deny_rules,
            allow_encoded_slash: slash,
            websocket_credential_rewrite: ws,
            request_body_credential_rewrite: body,
            allow_uninspected_credentials: uninspected,
            persisted_queries: persisted_queries.into(),
            graphql_persisted_queries: registry
                .into_iter()
                .map(|(hash, (operation_type, operation_name, fields))| {
                    let op = GraphqlOperation {
                        operation_type,
                        operation_name,
                        fields,
                    };
                    (hash, op)
                })
                .collect(),
            graphql_max_body_bytes,
            credential_signing: credential_signing.into(),
            signing_service,
            signing_region,
            json_rpc: json_rpc.map(|max_body_bytes| JsonRpcConfig { max_body_bytes }),
            mcp: mcp.map(|(max_body_bytes, strict, allow_all)| McpConfig {
                max_body_bytes,
                strict_tool_names: strict,
                allow_all_known_mcp_methods: allow_all,
            }),
        },
    )
}

fn network_policy() -> impl Strategy<Value = NetworkPolicy> {
    (
        prop::option::of(word()),
        prop::collection::vec(endpoint(), 0..3),
        prop::collection::vec(
            (
                select(vec!["", "/usr/bin/curl"]),
                prop::option::of(any::<bool>()),
            ),
            0..2,
        ),
    )
        .prop_map(|(name, endpoints, binaries)| NetworkPolicy {
            name,
            endpoints,
            binaries: binaries
                .into_iter()
                .map(|(path, harness)| Binary {
                    path: path.into(),
                    harness,
                })
                .collect(),
        })
}

/// Numbers of every kind a JSON config can hold, with those a double would change.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |x| x.is_finite())
            .prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        select(vec![
            0.0,
            -0.0,
            1.0,
            0.5,
            9_007_199_254_740_992.0,
            9_007_199_254_740_994.0,
            1e300
        ])
        .prop_map(Value::from),
        select(vec![
            9_007_199_254_740_992u64,
            9_007_199_254_740_993,
            u64::MAX
        ])
        .prop_map(Value::from),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        word().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(word(), inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn middleware() -> impl Strategy<Value = NetworkMiddleware> {
    (
        prop::option::of(word()),
        select(vec!["", "audit", "openshell/x"]),
        select(vec![0i32, -3, 7]),
        prop::collection::btree_map(word(), json(), 0..3),
        select(vec!["", "fail_open", "sometimes"]),
        prop::option::of((
            prop::collection::vec(
                select(vec!["*.a.example.com", "b.example.com", "[", ""]),
                0..2,
            ),
            prop::collection::vec(select(vec!["c.b.example.com", ""]), 0..2),
        )),
    )
        .prop_map(
            |(name, middleware, order, config, on_error, endpoints)| NetworkMiddleware {
                name,
                middleware: middleware.into(),
                order,
                config,
                on_error: on_error.into(),
                endpoints: endpoints.map(|(include, exclude)| EndpointSelector {
                    include: include.into_iter().map(str::to_string).collect(),
                    exclude: exclude.into_iter().map(str::to_string).collect(),
                }),
            },
        )
}

fn awkward_policy() -> impl Strategy<Value = SandboxPolicy> {
    (
        select(vec![1u32, 0, 2]),
        prop::option::of((
            any::<bool>(),
            prop::collection::vec(select(vec!["/usr", "", "rel", "/"]), 0..2),
            prop::collection::vec(select(vec!["/tmp", "/"]), 0..2),
        )),
        prop::option::of(prop::option::of(select(
            LandlockCompatibility::ALL.to_vec(),
        ))),
        prop::option::of((
            prop::option::of(select(vec!["", "sandbox", "0", "1000"])),
            prop::option::of(select(vec!["", "sandbox", "root"])),
        )),
        prop::collection::btree_map(select(vec!["p", "", "a.b", "q"]), network_policy(), 0..3),
        prop::collection::btree_map(select(vec!["mw", "", "n"]), middleware(), 0..3),
    )
        .prop_map(
            |(version, fs, landlock, process, network_policies, network_middlewares)| {
                SandboxPolicy {
                    version,
                    filesystem_policy: fs.map(|(include_workdir, ro, rw)| FilesystemPolicy {
                        include_workdir,
                        read_only: ro.into_iter().map(str::to_string).collect(),
                        read_write: rw.into_iter().map(str::to_string).collect(),
                    }),
                    landlock: landlock.map(|compatibility| Landlock { compatibility }),
                    process: process.map(|(user, group)| ProcessPolicy {
                        run_as_user: user.map(str::to_string),
                        run_as_group: group.map(str::to_string),
                    }),
                    network_policies: network_policies
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                    network_middlewares: network_middlewares
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_policies_are_their_own_normal_form(policy in support::policy()) {
        prop_assert!(policy.validate().is_ok(), "the generator built an invalid policy");
        if let Err(failure) = check_trip(&policy) {
            prop_assert!(false, "{}\n{}", failure, policy.to_yaml());
        }
    }

    #[test]
    fn awkward_policies_are_their_own_normal_form(policy in awkward_policy()) {
        if let Err(failure) = check_trip(&policy) {
            prop_assert!(false, "{}\n{:#?}", failure, policy);
        }
    }
}

/// Every `.yaml` document of one corpus, by file name.
fn documents(kind: &str) -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(kind);
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

#[test]
fn the_accepted_corpus_trips_exactly() {
    let docs = documents("accepted");
    assert!(docs.len() >= 60, "only {} accepted documents", docs.len());
    for (name, text) in &docs {
        let policy = parse_and_validate(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_trip(&policy).unwrap_or_else(|failure| panic!("{name}: {failure}"));
    }
}

#[test]
fn the_rejected_corpus_trips_exactly_and_is_refused_again() {
    let docs = documents("rejected");
    let mut parsed = 0;
    for (name, text) in &docs {
        // Documents refused by the parser never become a policy to send.
        let Ok(policy) = parse_policy(text) else {
            continue;
        };
        parsed += 1;
        assert!(policy.validate().is_err(), "{name} validates");
        check_trip(&policy).unwrap_or_else(|failure| panic!("{name}: {failure}"));
    }
    assert!(parsed >= 40, "only {parsed} rejected documents parse");
}
