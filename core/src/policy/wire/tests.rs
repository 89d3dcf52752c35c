//! Unit tests of the wire conversion's tricky mappings. The property tests over generated and
//! corpus policies live in `core/tests/wire.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use prost::Message;
use serde_json::json;

use super::*;
use crate::policy::parse_policy;

const EXAMPLE: &str = include_str!("../../../../examples/policy.yaml");

/// Document to message, through the encoded bytes, and back.
fn trip(policy: &SandboxPolicy) -> Result<SandboxPolicy, WireError> {
    let bytes = pb::SandboxPolicy::from(policy).encode_to_vec();
    let message = pb::SandboxPolicy::decode(bytes.as_slice()).unwrap();
    SandboxPolicy::try_from(&message)
}

fn assert_trips(policy: &SandboxPolicy) {
    let back = trip(policy).unwrap();
    assert_eq!(&back, policy);
    assert_eq!(back.policy_hash(), policy.policy_hash());
    // And the message side: what this module wrote comes back unchanged.
    let message = pb::SandboxPolicy::from(policy);
    assert_eq!(pb::SandboxPolicy::from(&back), message);
}

fn fields(err: &WireError) -> Vec<&str> {
    err.violations.iter().map(|v| v.field.as_str()).collect()
}

fn with_endpoint(ep: Endpoint) -> SandboxPolicy {
    SandboxPolicy {
        network_policies: BTreeMap::from([(
            "p".to_string(),
            NetworkPolicy {
                endpoints: vec![ep],
                ..NetworkPolicy::default()
            },
        )]),
        ..SandboxPolicy::default()
    }
}

fn with_middleware(config: BTreeMap<String, Value>) -> SandboxPolicy {
    SandboxPolicy {
        network_middlewares: BTreeMap::from([(
            "mw".to_string(),
            NetworkMiddleware {
                middleware: "audit".into(),
                config,
                endpoints: Some(EndpointSelector {
                    include: vec!["*.example.com".into()],
                    exclude: vec![],
                }),
                ..NetworkMiddleware::default()
            },
        )]),
        ..SandboxPolicy::default()
    }
}

fn config_of(value: Value) -> BTreeMap<String, Value> {
    match value {
        Value::Object(map) => map.into_iter().collect(),
        other => panic!("not an object: {other}"),
    }
}

fn wire_endpoint(message: &pb::SandboxPolicy) -> &pb::NetworkEndpoint {
    &message.network_policies["p"].endpoints[0]
}

fn wire_middleware(message: &pb::SandboxPolicy) -> &pb::NetworkMiddlewareConfig {
    &message.network_middlewares["mw"]
}

/// A message with one endpoint, as an upstream writer could send it.
fn message_with_endpoint(ep: pb::NetworkEndpoint) -> pb::SandboxPolicy {
    pb::SandboxPolicy {
        version: 1,
        network_policies: BTreeMap::from([(
            "p".to_string(),
            pb::NetworkPolicyRule {
                name: "p".into(),
                endpoints: vec![ep],
                binaries: vec![],
                explicit_empty_name: false,
            },
        )]),
        ..pb::SandboxPolicy::default()
    }
}

fn rule(allow: RuleMatch) -> Rule {
    Rule { allow }
}

fn glob(text: &str) -> QueryMatcher {
    QueryMatcher::Glob(text.into())
}

fn any(globs: &[&str]) -> QueryMatcher {
    QueryMatcher::Any(AnyMatcher {
        any: globs.iter().map(|g| g.to_string()).collect(),
    })
}

#[test]
fn field_numbers_on_the_wire_are_upstreams() {
    let policy = with_endpoint(Endpoint {
        ports: vec![443],
        mcp: Some(McpConfig::default()),
        ..Endpoint::default()
    });
    let bytes = pb::SandboxPolicy::from(&policy).encode_to_vec();
    // Worked out by hand from the field numbers, each tag being (number << 3 | wire type):
    let expected = [
        0x08, 1, // version = 1, varint: 1
        0x2a, 14, // network_policies = 5, length-delimited (map entry)
        0x0a, 1, b'p', // entry key = 1: "p"
        0x12, 9, // entry value = 2: NetworkPolicyRule
        0x12, 7, // NetworkPolicyRule.endpoints = 2: NetworkEndpoint
        0x4a, 2, 0xbb, 0x03, // NetworkEndpoint.ports = 9, packed: [443]
        0xba, 0x01, 0, // NetworkEndpoint.mcp = 23 (a two-byte varint tag), empty message
    ];
    assert_eq!(bytes, expected);

    // An extension takes its own tag: explicit_empty_rules = 1001, varint.
    let empty_rules = with_endpoint(Endpoint {
        rules: Some(vec![]),
        ..Endpoint::default()
    });
    let endpoint =
        pb::SandboxPolicy::from(&empty_rules).network_policies["p"].endpoints[0].encode_to_vec();
    assert_eq!(endpoint, [0xc8, 0x3e, 1]);
}

#[test]
fn the_example_policy_trips_exactly() {
    assert_trips(&parse_policy(EXAMPLE).unwrap());
}

#[test]
fn landlock_modes_travel_as_upstream_strings() {
    for (compatibility, text) in [
        (None, ""),
        (Some(LandlockCompatibility::BestEffort), "best_effort"),
        (
            Some(LandlockCompatibility::HardRequirement),
            "hard_requirement",
        ),
    ] {
        let policy = SandboxPolicy {
            landlock: Some(Landlock { compatibility }),
            ..SandboxPolicy::default()
        };
        let message = pb::SandboxPolicy::from(&policy);
        assert_eq!(message.landlock.as_ref().unwrap().compatibility, text);
        assert_trips(&policy);
    }
    // No section at all is not the same as a section without a mode.
    assert_eq!(
        pb::SandboxPolicy::from(&SandboxPolicy::default()).landlock,
        None
    );

    let message = pb::SandboxPolicy {
        version: 1,
        landlock: Some(pb::LandlockPolicy {
            compatibility: "Best_Effort".into(),
        }),
        ..pb::SandboxPolicy::default()
    };
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(fields(&err), ["landlock.compatibility"]);
    assert!(
        err.to_string().contains("best_effort, hard_requirement"),
        "{err}"
    );
}

#[test]
fn integers_in_config_travel_in_the_struct_and_come_back_as_integers() {
    let policy = with_middleware(config_of(json!({
        "retries": 3,
        "offset": -7,
        "ratio": 0.25,
        "limit": 9_007_199_254_740_992u64, // 2^53, still exact
        "nested": {"list": [1, 2.5, null, true, "x"]},
    })));
    let message = pb::SandboxPolicy::from(&policy);
    let wire = wire_middleware(&message);
    assert_eq!(wire.config_json, "", "the Struct alone is exact");
    let fields = &wire.config.as_ref().unwrap().fields;
    assert_eq!(fields["retries"].kind, Some(Kind::NumberValue(3.0)));
    assert_eq!(fields["offset"].kind, Some(Kind::NumberValue(-7.0)));
    assert_trips(&policy);
    let back = trip(&policy).unwrap();
    let retries = &back.network_middlewares["mw"].config["retries"];
    assert!(retries.is_u64(), "{retries:?} came back as an integer");
}

#[test]
fn config_numbers_a_double_would_change_travel_as_json_too() {
    for value in [
        json!(9_007_199_254_740_993u64), // 2^53 + 1: rounds as a double
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1.0), // written with a fraction: a double would bring back the integer 1
        json!(-0.0),
        json!({"deep": [2.0]}),
    ] {
        let policy = with_middleware(config_of(json!({ "v": value, "plain": 1 })));
        let message = pb::SandboxPolicy::from(&policy);
        let wire = wire_middleware(&message);
        assert_ne!(wire.config_json, "", "{value}");
        // Upstream readers still get a Struct, with the nearest double.
        assert!(wire.config.is_some(), "{value}");
        assert_trips(&policy);
    }
    // Large doubles and fractions are doubles already.
    for value in [json!(1e300), json!(-2.5e-8), json!(0.1)] {
        let policy = with_middleware(config_of(json!({ "v": value })));
        assert_eq!(
            wire_middleware(&pb::SandboxPolicy::from(&policy)).config_json,
            "",
            "{value}"
        );
        assert_trips(&policy);
    }
}

#[test]
fn an_empty_config_sends_no_struct() {
    let policy = with_middleware(BTreeMap::new());
    let message = pb::SandboxPolicy::from(&policy);
    assert_eq!(wire_middleware(&message).config, None);
    assert_trips(&policy);
}

/// `[[[…1…]]]`, `levels` arrays deep.
fn nested_arrays(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

/// `{"o":{"o":…1…}}`, `levels` objects deep: the costliest nesting for a Struct, each level
/// being three prost messages.
fn nested_objects(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!({ "o": inner }))
}

#[test]
fn a_config_too_deep_for_prost_travels_as_json_alone() {
    // The config map is one level, so a value nesting one less fills the Struct's budget.
    let fits = with_middleware(config_of(
        json!({ "v": nested_objects(STRUCT_MAX_DEPTH - 1) }),
    ));
    let message = pb::SandboxPolicy::from(&fits);
    assert!(wire_middleware(&message).config.is_some());
    assert_eq!(wire_middleware(&message).config_json, "");
    // A receiver can decode it: prost's nesting limit is not reached.
    assert_trips(&fits);

    let deeper = with_middleware(config_of(json!({ "v": nested_objects(STRUCT_MAX_DEPTH) })));
    let message = pb::SandboxPolicy::from(&deeper);
    assert_eq!(wire_middleware(&message).config, None);
    assert_ne!(wire_middleware(&message).config_json, "");
    assert_trips(&deeper);
}

#[test]
fn a_config_text_allows_can_be_too_deep_for_a_struct() {
    // Why the bound exists: a config 40 objects deep parses from text (64 levels allowed), but
    // as a Struct it passes prost's decode limit and the whole message would be refused.
    let config = config_of(json!({ "v": nested_objects(40) }));
    parse_policy(&with_middleware(config.clone()).canonical_json()).unwrap();
    let mut message = pb::SandboxPolicy::from(&with_middleware(BTreeMap::new()));
    message.network_middlewares.get_mut("mw").unwrap().config = Some(prost_types::Struct {
        fields: config
            .iter()
            .map(|(key, value)| (key.clone(), json_to_struct_value(value)))
            .collect(),
    });
    assert!(pb::SandboxPolicy::decode(message.encode_to_vec().as_slice()).is_err());
    // The conversion sends it as JSON instead, which decodes.
    assert_trips(&with_middleware(config));
}

#[test]
fn a_decoded_policy_nests_no_deeper_than_a_parsed_one_may() {
    // The nesting scan counts the line as one level, and `{"network_middlewares":{"mw":
    // {"config":{"v":` opens four more before the value.
    let at_limit = with_middleware(config_of(
        json!({ "v": nested_arrays(MAX_NESTING_DEPTH - 5) }),
    ));
    assert_trips(&at_limit);
    parse_policy(&at_limit.canonical_json()).unwrap();

    let over = with_middleware(config_of(
        json!({ "v": nested_arrays(MAX_NESTING_DEPTH - 4) }),
    ));
    assert!(parse_policy(&over.canonical_json()).is_err());
    let err = trip(&over).unwrap_err();
    assert_eq!(fields(&err), [""]);
    assert!(
        err.to_string().contains("nests more than 64 levels"),
        "{err}"
    );
}

#[test]
fn struct_values_json_cannot_hold_are_refused_with_their_path() {
    let number = |x: f64| prost_types::Value {
        kind: Some(Kind::NumberValue(x)),
    };
    let mut message = pb::SandboxPolicy::from(&with_middleware(BTreeMap::new()));
    let list = prost_types::Value {
        kind: Some(Kind::ListValue(prost_types::ListValue {
            values: vec![
                number(1.0),
                prost_types::Value {
                    kind: Some(Kind::StructValue(prost_types::Struct {
                        fields: BTreeMap::from([("d".to_string(), number(f64::NAN))]),
                    })),
                },
            ],
        })),
    };
    message.network_middlewares.get_mut("mw").unwrap().config = Some(prost_types::Struct {
        fields: BTreeMap::from([
            ("a".to_string(), number(3.0)),
            ("b".to_string(), number(f64::INFINITY)),
            ("c".to_string(), list),
            ("no kind".to_string(), prost_types::Value { kind: None }),
        ]),
    });
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        [
            "network_middlewares.mw.config.b",
            "network_middlewares.mw.config.c[1].d",
            "network_middlewares.mw.config[\"no kind\"]",
        ]
    );
}

#[test]
fn a_struct_from_upstream_reads_whole_doubles_as_integers() {
    let mut message = pb::SandboxPolicy::from(&with_middleware(BTreeMap::new()));
    message.network_middlewares.get_mut("mw").unwrap().config = Some(prost_types::Struct {
        fields: BTreeMap::from([
            ("whole".to_string(), json_to_struct_value(&json!(3.0))),
            ("negative".to_string(), json_to_struct_value(&json!(-4.0))),
            ("half".to_string(), json_to_struct_value(&json!(0.5))),
            ("huge".to_string(), json_to_struct_value(&json!(1e20))),
        ]),
    });
    let policy = SandboxPolicy::try_from(&message).unwrap();
    assert_eq!(
        Value::Object(
            policy.network_middlewares["mw"]
                .config
                .clone()
                .into_iter()
                .collect()
        ),
        json!({"whole": 3, "negative": -4, "half": 0.5, "huge": 1e20})
    );
}

#[test]
fn malformed_config_json_is_refused() {
    for (text, expected) in [("[1]", "not a JSON object"), ("{\"a\":", "not valid JSON")] {
        let mut message = pb::SandboxPolicy::from(&with_middleware(BTreeMap::new()));
        message
            .network_middlewares
            .get_mut("mw")
            .unwrap()
            .config_json = text.into();
        let err = SandboxPolicy::try_from(&message).unwrap_err();
        assert_eq!(fields(&err), ["network_middlewares.mw.config"]);
        assert!(err.to_string().contains(expected), "{err}");
    }
}

#[test]
fn every_matcher_shape_keeps_its_shape() {
    for matcher in [glob("x*"), glob(""), any(&["a", "b*"]), any(&[])] {
        let policy = with_endpoint(Endpoint {
            rules: Some(vec![rule(RuleMatch {
                query: BTreeMap::from([("q".to_string(), matcher.clone())]),
                ..RuleMatch::default()
            })]),
            ..Endpoint::default()
        });
        assert_trips(&policy);
    }
    // The glob "" and the empty any-list differ only by the extension flag, and validation
    // refuses only the list, so losing the flag would turn a refused policy into an accepted one.
    assert_eq!(matcher_to_wire(&glob("")), pb::L7QueryMatcher::default());
    assert_eq!(
        matcher_to_wire(&any(&[])),
        pb::L7QueryMatcher {
            explicit_empty_any: true,
            ..pb::L7QueryMatcher::default()
        }
    );
}

#[test]
fn a_matcher_with_a_glob_and_a_list_is_refused() {
    let both = pb::L7QueryMatcher {
        glob: "x".into(),
        any: vec!["y".into()],
        explicit_empty_any: false,
    };
    let message = message_with_endpoint(pb::NetworkEndpoint {
        port: 443,
        rules: vec![pb::L7Rule {
            allow: Some(pb::L7Allow {
                method: "GET".into(),
                query: BTreeMap::from([("q".to_string(), both.clone())]),
                ..pb::L7Allow::default()
            }),
        }],
        deny_rules: vec![pb::L7DenyRule {
            params: BTreeMap::from([("a.b".to_string(), both)]),
            ..pb::L7DenyRule::default()
        }],
        ..pb::NetworkEndpoint::default()
    });
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        [
            "network_policies.p.endpoints[0].rules[0].allow.query.q",
            "network_policies.p.endpoints[0].deny_rules[0].params[\"a.b\"]",
        ]
    );
}

fn mcp_rule(tool: Option<QueryMatcher>, name: Option<QueryMatcher>) -> RuleMatch {
    RuleMatch {
        method: "tools/call".into(),
        tool,
        params: name
            .map(|m| BTreeMap::from([("name".to_string(), ParamMatcher::Matcher(m))]))
            .unwrap_or_default(),
        ..RuleMatch::default()
    }
}

fn allow_of(policy: &SandboxPolicy) -> pb::L7Allow {
    wire_endpoint(&pb::SandboxPolicy::from(policy)).rules[0]
        .allow
        .clone()
        .unwrap()
}

fn mcp_endpoint(rule: RuleMatch) -> SandboxPolicy {
    with_endpoint(Endpoint {
        host: "mcp.example.com".into(),
        port: Some(443),
        protocol: "mcp".into(),
        rules: Some(vec![Rule { allow: rule }]),
        ..Endpoint::default()
    })
}

#[test]
fn tool_travels_as_upstreams_params_name() {
    // `tool:` alone: upstream enforces it from params["name"].
    let policy = mcp_endpoint(mcp_rule(Some(glob("lookup_*")), None));
    policy.validate().unwrap();
    let allow = allow_of(&policy);
    assert_eq!(allow.params["name"].glob, "lookup_*");
    assert!(allow.name_param_is_tool);
    assert_eq!(allow.tool, None);
    assert_trips(&policy);

    // `params.name` alone is the same upstream field, unmarked.
    let policy = mcp_endpoint(mcp_rule(None, Some(any(&["a", "b"]))));
    let allow = allow_of(&policy);
    assert_eq!(allow.params["name"].any, ["a", "b"]);
    assert!(!allow.name_param_is_tool);
    assert_trips(&policy);

    // Both (refused by validation): the tool travels apart and is refused again after.
    let policy = mcp_endpoint(mcp_rule(Some(glob("t")), Some(glob("n"))));
    let allow = allow_of(&policy);
    assert_eq!(allow.params["name"].glob, "n");
    assert_eq!(allow.tool.as_ref().unwrap().glob, "t");
    assert_trips(&policy);
    assert_eq!(
        trip(&policy).unwrap().validate(),
        policy.validate(),
        "the same violations"
    );
}

#[test]
fn an_upstream_params_name_reads_as_params_name() {
    let message = message_with_endpoint(pb::NetworkEndpoint {
        host: "mcp.example.com".into(),
        port: 443,
        protocol: "mcp".into(),
        rules: vec![pb::L7Rule {
            allow: Some(pb::L7Allow {
                method: "tools/call".into(),
                params: BTreeMap::from([("name".to_string(), matcher_to_wire(&glob("lookup_*")))]),
                ..pb::L7Allow::default()
            }),
        }],
        ..pb::NetworkEndpoint::default()
    });
    let policy = SandboxPolicy::try_from(&message).unwrap();
    assert_eq!(
        policy,
        mcp_endpoint(mcp_rule(None, Some(glob("lookup_*")))).with_name("p")
    );
    policy.validate().unwrap();
}

#[test]
fn inconsistent_tool_extensions_are_refused() {
    let flagged_without_name = pb::L7Allow {
        method: "tools/call".into(),
        name_param_is_tool: true,
        ..pb::L7Allow::default()
    };
    let twice = pb::L7Allow {
        method: "tools/call".into(),
        name_param_is_tool: true,
        params: BTreeMap::from([("name".to_string(), matcher_to_wire(&glob("a")))]),
        tool: Some(matcher_to_wire(&glob("b"))),
        ..pb::L7Allow::default()
    };
    let message = message_with_endpoint(pb::NetworkEndpoint {
        port: 443,
        rules: vec![
            pb::L7Rule {
                allow: Some(flagged_without_name),
            },
            pb::L7Rule { allow: Some(twice) },
        ],
        ..pb::NetworkEndpoint::default()
    });
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        [
            "network_policies.p.endpoints[0].rules[0].allow.tool",
            "network_policies.p.endpoints[0].rules[1].allow.tool",
        ]
    );
}

#[test]
fn nested_params_travel_as_json_and_flattened_for_upstream() {
    let nested = BTreeMap::from([
        (
            "a".to_string(),
            ParamMatcher::Object(BTreeMap::from([
                ("b".to_string(), ParamMatcher::Matcher(glob("x"))),
                ("c".to_string(), ParamMatcher::Matcher(any(&[]))),
                ("d".to_string(), ParamMatcher::Object(BTreeMap::new())),
            ])),
        ),
        ("z".to_string(), ParamMatcher::Matcher(any(&["y"]))),
    ]);
    let policy = mcp_endpoint(RuleMatch {
        params: nested,
        ..mcp_rule(Some(glob("t")), None)
    });
    let allow = allow_of(&policy);
    assert_eq!(
        serde_json::from_str::<Value>(&allow.params_json).unwrap(),
        json!({"a": {"b": "x", "c": [], "d": {}}, "z": ["y"]})
    );
    assert_eq!(
        allow.params.keys().collect::<Vec<_>>(),
        ["a.b", "a.c", "name", "z"],
        "upstream's dotted keyspace, and the tool"
    );
    assert!(allow.name_param_is_tool);
    assert_trips(&policy);
    assert!(policy.validate().is_err());
    assert_eq!(trip(&policy).unwrap().validate(), policy.validate());
}

#[test]
fn malformed_params_json_is_refused() {
    for (text, field) in [
        (
            "[]",
            "network_policies.p.endpoints[0].rules[0].allow.params",
        ),
        ("{", "network_policies.p.endpoints[0].rules[0].allow.params"),
        (
            "{\"a\":1}",
            "network_policies.p.endpoints[0].rules[0].allow.params.a",
        ),
        (
            "{\"a\":{\"b\":[1]}}",
            "network_policies.p.endpoints[0].rules[0].allow.params.a.b",
        ),
    ] {
        let message = message_with_endpoint(pb::NetworkEndpoint {
            port: 443,
            rules: vec![pb::L7Rule {
                allow: Some(pb::L7Allow {
                    method: "tools/call".into(),
                    params_json: text.into(),
                    ..pb::L7Allow::default()
                }),
            }],
            ..pb::NetworkEndpoint::default()
        });
        let err = SandboxPolicy::try_from(&message).unwrap_err();
        assert_eq!(fields(&err), [field], "{text}");
    }
}

#[test]
fn json_rpc_and_mcp_limits_share_upstreams_one_field() {
    let json_rpc = |n| Some(JsonRpcConfig { max_body_bytes: n });
    let mcp = |n| {
        Some(McpConfig {
            max_body_bytes: n,
            strict_tool_names: Some(false),
            allow_all_known_mcp_methods: None,
        })
    };
    // (json_rpc, mcp) -> (field 22, extension json_rpc)
    let cases = [
        (None, None, 0, None),
        (json_rpc(0), None, 0, Some(0)),
        (json_rpc(7), None, 7, Some(7)),
        (None, mcp(0), 0, None),
        (None, mcp(9), 9, None),
        (json_rpc(7), mcp(9), 9, Some(7)),
        (json_rpc(0), mcp(9), 9, Some(0)),
    ];
    for (json_rpc, mcp, field22, extension) in cases {
        let policy = with_endpoint(Endpoint {
            json_rpc: json_rpc.clone(),
            mcp: mcp.clone(),
            ..Endpoint::default()
        });
        let message = pb::SandboxPolicy::from(&policy);
        let ep = wire_endpoint(&message);
        assert_eq!(ep.json_rpc_max_body_bytes, field22, "{json_rpc:?} {mcp:?}");
        assert_eq!(ep.json_rpc.as_ref().map(|j| j.max_body_bytes), extension);
        assert_eq!(ep.mcp.is_some(), mcp.is_some());
        assert_trips(&policy);
    }

    // Upstream's writer: the limit without the extension.
    let read = |mcp: Option<pb::McpOptions>| {
        let message = message_with_endpoint(pb::NetworkEndpoint {
            json_rpc_max_body_bytes: 5,
            mcp,
            ..pb::NetworkEndpoint::default()
        });
        let policy = SandboxPolicy::try_from(&message).unwrap();
        let ep = policy.network_policies["p"].endpoints[0].clone();
        (ep.json_rpc, ep.mcp)
    };
    assert_eq!(read(None), (json_rpc(5), None));
    assert_eq!(
        read(Some(pb::McpOptions {
            strict_tool_names: Some(false),
            allow_all_known_mcp_methods: None,
            versions: Vec::new(),
        })),
        (None, mcp(5))
    );
}

#[test]
fn empty_and_absent_stay_apart() {
    let policy = SandboxPolicy {
        process: Some(ProcessPolicy {
            run_as_user: Some(String::new()),
            run_as_group: None,
        }),
        network_policies: BTreeMap::from([(
            "p".to_string(),
            NetworkPolicy {
                name: Some(String::new()),
                endpoints: vec![Endpoint {
                    host: "api.example.com".into(),
                    port: Some(0),
                    ports: vec![443],
                    protocol: "graphql".into(),
                    rules: Some(vec![rule(RuleMatch {
                        operation_type: "query".into(),
                        fields: Some(vec![]),
                        ..RuleMatch::default()
                    })]),
                    deny_rules: Some(vec![]),
                    graphql_persisted_queries: BTreeMap::from([(
                        "abc".to_string(),
                        GraphqlOperation {
                            operation_type: "query".into(),
                            operation_name: String::new(),
                            fields: Some(vec![]),
                        },
                    )]),
                    ..Endpoint::default()
                }],
                binaries: vec![Binary {
                    path: "/usr/bin/curl".into(),
                    harness: Some(false),
                }],
            },
        )]),
        network_middlewares: with_middleware(BTreeMap::new())
            .network_middlewares
            .into_iter()
            .map(|(key, mw)| {
                let named = NetworkMiddleware {
                    name: Some(String::new()),
                    ..mw
                };
                (key, named)
            })
            .collect(),
        ..SandboxPolicy::default()
    };
    let message = pb::SandboxPolicy::from(&policy);
    let process = message.process.as_ref().unwrap();
    assert!(process.explicit_empty_run_as_user && !process.explicit_empty_run_as_group);
    let rule = &message.network_policies["p"];
    assert!(rule.explicit_empty_name);
    #[allow(deprecated)]
    let harness = rule.binaries[0].harness;
    assert!(!harness && rule.binaries[0].explicit_false_harness);
    let ep = &rule.endpoints[0];
    assert!(ep.explicit_zero_port && !ep.explicit_empty_rules && ep.explicit_empty_deny_rules);
    assert!(ep.rules[0].allow.as_ref().unwrap().explicit_empty_fields);
    assert!(ep.graphql_persisted_queries["abc"].explicit_empty_fields);
    assert!(wire_middleware(&message).explicit_empty_name);
    assert_trips(&policy);

    let refused = policy.validate().unwrap_err();
    for field in [
        "network_policies.p.endpoints[0].port",
        "network_policies.p.endpoints[0].deny_rules",
        "network_policies.p.endpoints[0].rules[0].allow.fields",
        "network_policies.p.endpoints[0].graphql_persisted_queries.abc.fields",
    ] {
        assert!(
            refused.iter().any(|v| v.field == field),
            "{field} in {refused:?}"
        );
    }
    assert_eq!(trip(&policy).unwrap().validate(), Err(refused));

    // `rules: []` is refused, no rules at all is not.
    let empty_rules = with_endpoint(Endpoint {
        host: "a.example.com".into(),
        port: Some(443),
        rules: Some(vec![]),
        ..Endpoint::default()
    });
    assert!(wire_endpoint(&pb::SandboxPolicy::from(&empty_rules)).explicit_empty_rules);
    assert_trips(&empty_rules);
    assert!(trip(&empty_rules).unwrap().validate().is_err());
}

#[test]
fn upstream_provenance_has_no_place_in_a_document() {
    let message = message_with_endpoint(pb::NetworkEndpoint {
        host: "a.example.com".into(),
        port: 443,
        advisor_proposed: true,
        provider_credentialed: true,
        ..pb::NetworkEndpoint::default()
    });
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        [
            "network_policies.p.endpoints[0].advisor_proposed",
            "network_policies.p.endpoints[0].provider_credentialed",
        ]
    );
}

#[test]
fn endpoint_modes_travel_as_upstreams_enums() {
    let policy = with_endpoint(Endpoint {
        host: "a.example.com".into(),
        port: Some(443),
        protocol: "rest".into(),
        tls: "skip".into(),
        enforcement: "enforce".into(),
        access: "read-write".into(),
        ..Endpoint::default()
    });
    let message = pb::SandboxPolicy::from(&policy);
    let ep = wire_endpoint(&message);
    assert_eq!(
        (ep.tls(), ep.enforcement(), ep.access()),
        (
            pb::NetworkTlsMode::Skip,
            pb::NetworkEnforcementMode::Enforce,
            pb::NetworkAccessPreset::ReadWrite
        )
    );
    assert_eq!(
        (
            &*ep.unknown_tls,
            &*ep.unknown_enforcement,
            &*ep.unknown_access
        ),
        ("", "", "")
    );
    assert_trips(&policy);

    // Each spelling has its own value, and every value reads back as its spelling.
    for (tls, enforcement, access) in [
        ("terminate", "audit", "read-only"),
        ("passthrough", "", "full"),
    ] {
        assert_trips(&with_endpoint(Endpoint {
            host: "a.example.com".into(),
            port: Some(443),
            protocol: "rest".into(),
            tls: tls.into(),
            enforcement: enforcement.into(),
            access: access.into(),
            ..Endpoint::default()
        }));
    }
}

#[test]
fn a_mode_no_enum_value_spells_is_refused_again_after_the_trip() {
    let policy = with_endpoint(Endpoint {
        host: "a.example.com".into(),
        port: Some(443),
        protocol: "rest".into(),
        tls: "off".into(),
        access: "write".into(),
        ..Endpoint::default()
    });
    let message = pb::SandboxPolicy::from(&policy);
    let ep = wire_endpoint(&message);
    // Upstream readers see no mode at all, never a wrong one.
    assert_eq!((ep.tls, ep.access), (0, 0));
    assert_eq!((&*ep.unknown_tls, &*ep.unknown_access), ("off", "write"));
    let back = SandboxPolicy::try_from(&message).unwrap();
    assert_eq!(back, policy);
    let violations = back.validate().unwrap_err();
    assert!(
        violations
            .iter()
            .any(|v| v.field == "network_policies.p.endpoints[0].tls"
                && v.message.contains("\"off\"")),
        "{violations:?}"
    );
}

#[test]
fn an_enum_value_upstream_has_not_defined_is_refused_by_path() {
    let message = message_with_endpoint(pb::NetworkEndpoint {
        host: "a.example.com".into(),
        port: 443,
        tls: 9,
        enforcement: 3,
        access: -1,
        ..pb::NetworkEndpoint::default()
    });
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        [
            "network_policies.p.endpoints[0].tls",
            "network_policies.p.endpoints[0].enforcement",
            "network_policies.p.endpoints[0].access",
        ]
    );
    assert!(
        err.violations[0]
            .message
            .contains("unknown tls enum value 9"),
        "{err}"
    );
}

#[test]
fn upstream_fields_this_gateway_cannot_honour_are_refused_by_name() {
    let message = message_with_endpoint(pb::NetworkEndpoint {
        host: "a.example.com".into(),
        port: 443,
        protocol: "mcp".into(),
        credential_binding: Some(pb::NetworkCredentialBinding {
            provider: "github".into(),
        }),
        token_grant_owner: "owner".into(),
        mcp: Some(pb::McpOptions {
            versions: vec!["2025-06-18".into()],
            ..pb::McpOptions::default()
        }),
        ..pb::NetworkEndpoint::default()
    });
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        [
            "network_policies.p.endpoints[0].token_grant_owner",
            "network_policies.p.endpoints[0].credential_binding",
            "network_policies.p.endpoints[0].mcp.versions",
        ]
    );
}

#[test]
fn upstreams_port_copied_into_ports_reads_as_one_valid_port() {
    let message = message_with_endpoint(pb::NetworkEndpoint {
        host: "a.example.com".into(),
        port: 443,
        ports: vec![443],
        protocol: "rest".into(),
        access: pb::NetworkAccessPreset::Full as i32,
        ..pb::NetworkEndpoint::default()
    });
    let policy = SandboxPolicy::try_from(&message).unwrap();
    let ep = &policy.network_policies["p"].endpoints[0];
    assert_eq!(ep.effective_ports(), [443]);
    assert_eq!(ep.access, "full");
    policy.validate().unwrap();
    // And it goes back to upstream as it came.
    assert_eq!(pb::SandboxPolicy::from(&policy), message);
}

#[test]
fn a_rule_without_allow_is_refused() {
    let message = message_with_endpoint(pb::NetworkEndpoint {
        host: "a.example.com".into(),
        port: 443,
        protocol: "rest".into(),
        rules: vec![pb::L7Rule { allow: None }],
        ..pb::NetworkEndpoint::default()
    });
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        ["network_policies.p.endpoints[0].rules[0].allow"]
    );
}

#[test]
fn map_keys_that_are_not_plain_are_quoted_in_paths() {
    let mut message = message_with_endpoint(pb::NetworkEndpoint {
        advisor_proposed: true,
        ..pb::NetworkEndpoint::default()
    });
    let entry = message.network_policies.remove("p").unwrap();
    message.network_policies.insert("a.b".to_string(), entry);
    let err = SandboxPolicy::try_from(&message).unwrap_err();
    assert_eq!(
        fields(&err),
        ["network_policies[\"a.b\"].endpoints[0].advisor_proposed"]
    );
}

impl SandboxPolicy {
    /// The same policy with its single network policy named, as upstream's writer names it.
    fn with_name(mut self, name: &str) -> Self {
        for np in self.network_policies.values_mut() {
            np.name = Some(name.to_string());
        }
        self
    }
}
