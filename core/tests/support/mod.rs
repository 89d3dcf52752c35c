//! Shared by the integration tests: a generator of valid policies of every endpoint kind,
//! with awkward text (quotes, colons, `#`, YAML keywords, non-ASCII) wherever the schema takes
//! free text.
// Each test crate compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use openshell_core::policy::{
    AnyMatcher, Binary, Endpoint, EndpointSelector, FilesystemPolicy, GraphqlOperation,
    JsonRpcConfig, Landlock, LandlockCompatibility, McpConfig, NetworkMiddleware, NetworkPolicy,
    ParamMatcher, ProcessPolicy, QueryMatcher, Rule, RuleMatch, SandboxPolicy,
};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

/// Free text: printable characters, plus strings YAML would read as something else.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,16}",
        select(vec![
            "yes", "no", "null", "~", "true", "1e3", "0x1F", "-", "- a", ": x", "#c", "'q'",
            "\"q\"", "a: b", "007", ".inf", "@x", "`x`", "a\tb", " lead", "trail ",
        ])
        .prop_map(str::to_string),
    ]
}

pub fn key() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,10}"
}

pub fn abs_path() -> impl Strategy<Value = String> {
    "(/[a-z0-9_.-]{1,10}){1,4}".prop_filter("no '..' components", |p| {
        !p.split('/').any(|c| c == ".." || c == ".")
    })
}

pub fn identity() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("sandbox".to_string())),
        (1000u32..=2_000_000_000).prop_map(|id| Some(id.to_string())),
    ]
}

pub fn glob_matcher() -> impl Strategy<Value = QueryMatcher> {
    prop_oneof![
        "[a-z*?-]{1,10}".prop_map(QueryMatcher::Glob),
        prop::collection::vec("[a-z_*]{1,10}", 1..3)
            .prop_map(|any| QueryMatcher::Any(AnyMatcher { any })),
    ]
}

/// Ports of endpoints that name a host; the ports above are kept for hostless ones.
pub const HOSTED_PORTS: std::ops::RangeInclusive<u32> = 1..=64_999;
pub const HOSTLESS_PORTS: std::ops::RangeInclusive<u32> = 65_000..=65_535;

pub fn ports() -> impl Strategy<Value = (Option<u32>, Vec<u32>)> {
    prop_oneof![
        HOSTED_PORTS.prop_map(|p| (Some(p), vec![])),
        prop::collection::vec(HOSTED_PORTS, 1..4).prop_map(|ps| (None, ps)),
    ]
}

/// One valid endpoint of a random kind; `host` is unique in the document, so endpoints never
/// overlap and their settings never need to agree. A hostless endpoint matches every host: it
/// takes a port no hosted endpoint uses, and settings every hostless one shares, so two of
/// them on one port agree.
pub fn endpoint(host: String) -> impl Strategy<Value = Endpoint> {
    let l4 = (
        ports(),
        select(vec!["", "skip", "passthrough"]),
        any::<bool>(),
        prop::collection::vec(
            select(vec!["10.1.0.0/16", "192.168.7.9", "fd00:1::/64"]),
            0..2,
        ),
    )
        .prop_map({
            let host = host.clone();
            move |((port, ports), tls, hostless, ips)| {
                if hostless && !ips.is_empty() {
                    let span = HOSTLESS_PORTS.end() - HOSTLESS_PORTS.start() + 1;
                    let hostless_port = |p: u32| HOSTLESS_PORTS.start() + p % span;
                    let ports: std::collections::BTreeSet<u32> =
                        ports.into_iter().map(hostless_port).collect();
                    return Endpoint {
                        port: port.map(hostless_port),
                        ports: ports.into_iter().collect(),
                        allowed_ips: vec!["10.1.0.0/16".to_string()],
                        ..Endpoint::default()
                    };
                }
                Endpoint {
                    host: if tls == "skip" {
                        format!("{host}.raw.example.net")
                    } else {
                        host.clone()
                    },
                    port,
                    ports,
                    tls: tls.to_string(),
                    allow_uninspected_credentials: tls == "skip",
                    allowed_ips: ips.into_iter().map(str::to_string).collect(),
                    ..Endpoint::default()
                }
            }
        });
    let rest = (
        ports(),
        select(vec!["read-only", "read-write", "full"]),
        select(vec!["", "enforce", "audit"]),
        any::<(bool, bool, bool)>(),
        prop::option::of((select(vec!["sigv4", "sigv4:body", "sigv4:no_body"]), text())),
        prop::collection::vec(("[A-Z]{3,6}", abs_path()), 0..3),
    )
        .prop_map({
            let host = host.clone();
            move |((port, ports), access, enforcement, flags, signing, denies)| {
                let (slash, ws, body) = flags;
                let (credential_signing, signing_region) = signing
                    .map(|(mode, region)| (mode.to_string(), region))
                    .unwrap_or_default();
                Endpoint {
                    host: host.clone(),
                    port,
                    ports,
                    protocol: "rest".into(),
                    access: access.into(),
                    enforcement: enforcement.into(),
                    allow_encoded_slash: slash,
                    websocket_credential_rewrite: ws,
                    request_body_credential_rewrite: body && credential_signing.is_empty(),
                    signing_service: if credential_signing.is_empty() {
                        String::new()
                    } else {
                        "s3".into()
                    },
                    credential_signing,
                    signing_region,
                    deny_rules: (!denies.is_empty()).then(|| {
                        denies
                            .into_iter()
                            .map(|(method, path)| RuleMatch {
                                method,
                                path,
                                ..RuleMatch::default()
                            })
                            .collect()
                    }),
                    ..Endpoint::default()
                }
            }
        });
    let rest_rules = (
        ports(),
        prop::collection::vec(
            (
                select(vec!["GET", "POST", "*", "PROPFIND"]),
                abs_path(),
                prop::collection::btree_map("[a-z]{1,6}", glob_matcher(), 0..3),
            ),
            1..4,
        ),
    )
        .prop_map({
            let host = host.clone();
            move |((port, ports), rules)| Endpoint {
                host: host.clone(),
                port,
                ports,
                protocol: "rest".into(),
                rules: Some(
                    rules
                        .into_iter()
                        .map(|(method, path, query)| Rule {
                            allow: RuleMatch {
                                method: method.into(),
                                path,
                                query,
                                ..RuleMatch::default()
                            },
                        })
                        .collect(),
                ),
                ..Endpoint::default()
            }
        });
    let graphql = (
        ports(),
        prop::collection::vec(
            (
                select(vec!["query", "mutation", "subscription", "*"]),
                text(),
                prop::option::of(prop::collection::vec("[a-zA-Z*]{1,8}", 1..3)),
            ),
            1..3,
        ),
        prop::collection::btree_map(
            "[a-f0-9]{6}",
            (text(), select(vec!["query", "mutation"])),
            0..2,
        ),
        0u32..1_000_000,
    )
        .prop_map({
            let host = host.clone();
            move |((port, ports), rules, registry, max_body)| Endpoint {
                host: host.clone(),
                port,
                ports,
                path: "/graphql".into(),
                protocol: "graphql".into(),
                persisted_queries: if registry.is_empty() {
                    String::new()
                } else {
                    "allow_registered".into()
                },
                graphql_persisted_queries: registry
                    .into_iter()
                    .map(|(hash, (name, kind))| {
                        (
                            hash,
                            GraphqlOperation {
                                operation_type: kind.into(),
                                operation_name: name,
                                fields: None,
                            },
                        )
                    })
                    .collect(),
                graphql_max_body_bytes: max_body,
                rules: Some(
                    rules
                        .into_iter()
                        .map(|(kind, name, fields)| Rule {
                            allow: RuleMatch {
                                operation_type: kind.into(),
                                operation_name: name,
                                fields,
                                ..RuleMatch::default()
                            },
                        })
                        .collect(),
                ),
                ..Endpoint::default()
            }
        });
    let json_rpc = (
        ports(),
        prop::collection::vec("[a-z]{1,8}(\\.[a-z]{1,8})?", 1..4),
        0u32..1_000_000,
    )
        .prop_map({
            let host = host.clone();
            move |((port, ports), methods, max_body)| Endpoint {
                host: host.clone(),
                port,
                ports,
                protocol: "json-rpc".into(),
                json_rpc: Some(JsonRpcConfig {
                    max_body_bytes: max_body,
                }),
                rules: Some(
                    methods
                        .into_iter()
                        .map(|method| Rule {
                            allow: RuleMatch {
                                method,
                                ..RuleMatch::default()
                            },
                        })
                        .collect(),
                ),
                ..Endpoint::default()
            }
        });
    let mcp = (
        ports(),
        any::<bool>(),
        prop::collection::vec(glob_matcher(), 0..3),
        glob_matcher(),
        0u32..1_000_000,
    )
        .prop_map({
            let host = host.clone();
            move |((port, ports), allow_all, tools, denied, max_body)| {
                let mut rules: Vec<Rule> = tools
                    .into_iter()
                    .enumerate()
                    .map(|(i, tool)| Rule {
                        allow: if i % 2 == 0 {
                            RuleMatch {
                                method: "tools/call".into(),
                                tool: Some(tool),
                                ..RuleMatch::default()
                            }
                        } else {
                            RuleMatch {
                                method: "tools/call".into(),
                                params: BTreeMap::from([(
                                    "name".to_string(),
                                    ParamMatcher::Matcher(tool),
                                )]),
                                ..RuleMatch::default()
                            }
                        },
                    })
                    .collect();
                if !allow_all {
                    rules.push(Rule {
                        allow: RuleMatch {
                            method: "initialize".into(),
                            ..RuleMatch::default()
                        },
                    });
                }
                Endpoint {
                    host: host.clone(),
                    port,
                    ports,
                    path: "/mcp".into(),
                    protocol: "mcp".into(),
                    mcp: Some(McpConfig {
                        max_body_bytes: max_body,
                        strict_tool_names: Some(true),
                        allow_all_known_mcp_methods: Some(allow_all),
                    }),
                    rules: (!rules.is_empty()).then_some(rules),
                    deny_rules: Some(vec![RuleMatch {
                        method: "tools/call".into(),
                        tool: Some(denied),
                        ..RuleMatch::default()
                    }]),
                    ..Endpoint::default()
                }
            }
        });
    let tcp = ports().prop_map(move |(port, ports)| Endpoint {
        host: host.clone(),
        port,
        ports,
        protocol: "TCP".into(),
        ..Endpoint::default()
    });
    prop_oneof![l4, rest, rest_rules, graphql, json_rpc, mcp, tcp]
}

pub fn network_policy(key: String) -> impl Strategy<Value = NetworkPolicy> {
    let endpoints: Vec<BoxedStrategy<Endpoint>> = (0..3)
        .map(|i| {
            let host = if i == 2 {
                format!("*.w{i}-{key}.example.com")
            } else {
                format!("e{i}-{key}.example.com")
            };
            endpoint(host).boxed()
        })
        .collect();
    (
        prop::option::of(text()),
        endpoints,
        1usize..=3,
        prop::collection::vec(("[a-z]{1,8}", prop::option::of(any::<bool>())), 0..3),
    )
        .prop_map(|(name, mut endpoints, count, binaries)| {
            endpoints.truncate(count);
            NetworkPolicy {
                name,
                endpoints,
                binaries: binaries
                    .into_iter()
                    .map(|(bin, harness)| Binary {
                        path: format!("/usr/bin/{bin}"),
                        harness,
                    })
                    .collect(),
            }
        })
}

pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

pub fn middlewares() -> impl Strategy<Value = BTreeMap<String, NetworkMiddleware>> {
    prop::collection::btree_map(
        key(),
        (
            prop::option::of(text()),
            "[a-z]{1,8}(/[a-z]{1,8})?",
            prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..3),
            select(vec!["", "fail_open", "fail_closed"]),
            prop::collection::vec("[a-z]{1,6}", 1..3),
            prop::collection::vec("[a-z]{1,6}", 0..2),
        ),
        0..4,
    )
    .prop_map(|entries| {
        entries
            .into_iter()
            .enumerate()
            .map(
                |(i, (key, (name, middleware, config, on_error, inc, exc)))| {
                    let order = i32::try_from(i).unwrap_or(0) * 10 - 5;
                    let mw = NetworkMiddleware {
                        name,
                        middleware,
                        order,
                        config,
                        on_error: on_error.into(),
                        endpoints: Some(EndpointSelector {
                            include: inc
                                .iter()
                                .map(|l| format!("*.{l}.mw.example.org"))
                                .collect(),
                            exclude: exc.iter().map(|l| format!("{l}.mw.example.org")).collect(),
                        }),
                    };
                    (key, mw)
                },
            )
            .collect()
    })
}

pub fn policy() -> impl Strategy<Value = SandboxPolicy> {
    (
        prop::option::of((
            any::<bool>(),
            prop::collection::vec(abs_path(), 0..4),
            prop::collection::vec(abs_path(), 0..4),
        )),
        prop::option::of(prop::option::of(select(
            LandlockCompatibility::ALL.to_vec(),
        ))),
        prop::option::of((identity(), identity())),
        prop::collection::btree_set(key(), 0..4).prop_flat_map(|keys| {
            keys.into_iter()
                .map(|k| network_policy(k.clone()).prop_map(move |np| (k.clone(), np)))
                .collect::<Vec<_>>()
        }),
        middlewares(),
    )
        .prop_map(
            |(fs, landlock, process, entries, network_middlewares)| SandboxPolicy {
                version: 1,
                filesystem_policy: fs.map(|(include_workdir, read_only, read_write)| {
                    FilesystemPolicy {
                        include_workdir,
                        read_only,
                        read_write,
                    }
                }),
                landlock: landlock.map(|compatibility| Landlock { compatibility }),
                process: process.map(|(run_as_user, run_as_group)| ProcessPolicy {
                    run_as_user,
                    run_as_group,
                }),
                network_policies: entries.into_iter().collect(),
                network_middlewares,
            },
        )
}
