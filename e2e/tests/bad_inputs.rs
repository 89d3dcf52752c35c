//! The bad-input catalog: one table of requests the gateway must refuse,
//! run against a real gateway on SQLite and on PostgreSQL. Each case checks
//! the gRPC code, that the message names the field path, limit or expected
//! form, that nothing changed (policy revisions, operations and their states,
//! settings of every scope, sandboxes, providers, sessions), and that the
//! gateway still answers the next request.
//!
//! Supervisor cases drive a raw `ConnectSupervisor` stream: a refused session
//! ends with a `SessionRejected` frame (the call itself is OK); a frame the
//! protocol tolerates is ignored and the session keeps serving.
//!
//! `docs/bad-inputs.md` is generated from this table;
//! `the_catalog_document_is_current` fails when it drifts, and rewrites it
//! when `OPENSHELL_REGENERATE_DOCS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use openshell_e2e::{
    Api, Backend, POLICY, TOKEN, TestGateway, TestStore, eventually, policy_with_port, sandbox_ref,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use pb::gateway_message::Payload as FromGateway;
use pb::supervisor_message::Payload as FromSupervisor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

const DEADLINE: Duration = Duration::from_secs(30);
/// Short, so that a silent session is closed within seconds; long enough (3 s of silence)
/// that a stalled test machine does not close the sessions that are meant to stay open.
const HEARTBEAT: Duration = Duration::from_secs(1);
const REGENERATE: &str = "OPENSHELL_REGENERATE_DOCS=1 cargo nextest run -p openshell-e2e --test bad_inputs -E 'test(the_catalog_document_is_current)'";
const DOC_PATH: &str = "docs/bad-inputs.md";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_refused_and_changes_nothing_sqlite() {
    every_bad_input_is_refused_and_changes_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_refused_and_changes_nothing_postgres() {
    every_bad_input_is_refused_and_changes_nothing(Backend::Postgres).await;
}

// ---------------------------------------------------------------- the table

/// One bad input: what to send, and what must come back.
struct Case {
    group: &'static str,
    name: String,
    /// What is sent, in a few words (for the generated document).
    input: String,
    call: Call,
    expect: Expect,
}

/// Who a call authenticates as.
#[derive(Clone)]
enum Who {
    Operator,
    Nobody,
    /// The `authorization` header exactly as given.
    Header(&'static str),
    /// The supervisor credential of a fixture sandbox.
    SupervisorOf(Pick),
}

/// A sandbox of the fixture, or a literal reference.
#[derive(Clone)]
enum Pick {
    /// `target`: the sandbox operator writes aim at.
    Target,
    /// `peer`: the sandbox raw supervisor sessions speak for.
    Peer,
    /// `gone`: a deleted sandbox whose credential was kept.
    Gone,
    Literal(String),
}

enum Call {
    Update(Who, Box<pb::UpdateConfigRequest>),
    CreateSandbox(pb::CreateSandboxRequest),
    CreateProvider(pb::CreateProviderRequest),
    UpdateProvider(pb::UpdateProviderRequest),
    AttachProvider(pb::AttachProviderRequest),
    GetSandbox(pb::SandboxRef),
    GetOperation(String),
    ListSandboxes(pb::ListSandboxesRequest),
    ListOperations(pb::ListOperationsRequest),
    /// `operation_id` is filled with the fixture's operation.
    ListOperationTargets(pb::ListOperationTargetsRequest),
    ListSandboxPolicies(pb::ListSandboxPoliciesRequest),
    GatewayInfo(Who),
    SandboxConfig(Who, Pick),
    /// A poll report; with revisions, one of this project's supervisors (LOADED with them).
    ReportPolicyStatus(Who, Pick, Option<pb::AppliedRevisions>),
    Session(Session),
    PlaintextToTls,
}

/// A raw supervisor session: frames before the hello, the hello (if any), frames after it.
struct Session {
    who: Who,
    sandbox: Pick,
    before_hello: Vec<pb::SupervisorMessage>,
    hello: bool,
    after_hello: Vec<pb::SupervisorMessage>,
}

enum Expect {
    /// The call fails with this code and a message holding every word.
    Status(Code, Vec<String>),
    /// The session is refused: a `SessionRejected` whose reason holds every word, then the end.
    Rejected(Vec<String>),
    /// The frames are ignored; the session is still open and heartbeating afterwards.
    Ignored,
}

fn words(needles: &[&str]) -> Vec<String> {
    needles.iter().map(|s| (*s).to_string()).collect()
}

fn invalid(needles: &[&str]) -> Expect {
    Expect::Status(Code::InvalidArgument, words(needles))
}

fn short(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { '·' } else { c })
        .collect();
    if one_line.chars().count() > 60 {
        format!(
            "{}… ({} bytes)",
            one_line.chars().take(48).collect::<String>(),
            text.len()
        )
    } else {
        one_line
    }
}

const MINIMAL: &str = "version: 1\nnetwork_policies:\n  github:\n    endpoints:\n      - host: api.github.com\n        port: 443\n";

fn update(request: pb::UpdateConfigRequest) -> Call {
    Call::Update(Who::Operator, Box::new(request))
}

fn to_target() -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        sandbox: "target".into(),
        ..Default::default()
    }
}

fn policy_case(name: &str, input: &str, policy: String, needles: &[&str]) -> Case {
    Case {
        group: "policy",
        name: name.into(),
        input: input.into(),
        call: update(pb::UpdateConfigRequest {
            policy_text: policy,
            ..to_target()
        }),
        expect: invalid(needles),
    }
}

fn setting_case(name: &str, key: &str, raw: &str, needles: &[&str]) -> Case {
    Case {
        group: "settings",
        name: name.into(),
        input: format!("settings `{}` = `{}`", short(key), short(raw)),
        call: update(pb::UpdateConfigRequest {
            settings: vec![openshell_e2e::raw_setting(key, raw)],
            ..to_target()
        }),
        expect: invalid(needles),
    }
}

fn typed_setting_case(
    name: &str,
    key: &str,
    value: pb::setting_value::Kind,
    needles: &[&str],
) -> Case {
    Case {
        group: "settings",
        name: name.into(),
        input: format!("settings `{key}` = typed {value:?}"),
        call: update(pb::UpdateConfigRequest {
            settings: vec![pb::SettingChange {
                key: key.into(),
                change: Some(pb::setting_change::Change::Value(pb::SettingValue {
                    kind: Some(value),
                })),
            }],
            ..to_target()
        }),
        expect: invalid(needles),
    }
}

fn update_case(
    group: &'static str,
    name: &str,
    input: &str,
    request: pb::UpdateConfigRequest,
    expect: Expect,
) -> Case {
    Case {
        group,
        name: name.into(),
        input: input.into(),
        call: update(request),
        expect,
    }
}

/// Every document of core's rejected policy corpus, one case each: the
/// corpus holds one document per validation rule, with the field paths it
/// must be refused at (`core/tests/corpus/rejected.tsv`).
fn corpus_cases() -> Vec<Case> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../core/tests/corpus");
    let table = std::fs::read_to_string(dir.join("rejected.tsv")).unwrap();
    table
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut cells = line.split('\t');
            let file = cells.next().unwrap().to_string();
            let fields: Vec<String> = cells
                .filter(|f| !f.is_empty())
                .map(|f| format!("policy.{f}"))
                .collect();
            let needles = if fields.is_empty() {
                // A document-level refusal: the message names what is missing.
                vec!["version".to_string()]
            } else {
                fields
            };
            let text = std::fs::read_to_string(dir.join("rejected").join(&file)).unwrap();
            let name = file
                .trim_end_matches(".yaml")
                .trim_end_matches(".json")
                .to_string();
            Case {
                group: "policy rules",
                name: format!("rule {name}"),
                input: format!("core/tests/corpus/rejected/{file}"),
                call: update(pb::UpdateConfigRequest {
                    policy_text: text,
                    ..to_target()
                }),
                expect: Expect::Status(Code::InvalidArgument, needles),
            }
        })
        .collect()
}

fn policy_shape_cases() -> Vec<Case> {
    let many_policies = |n: usize| {
        let mut text = String::from("version: 1\nnetwork_policies:\n");
        for i in 0..n {
            text.push_str(&format!(
                "  p{i}: {{endpoints: [{{host: h{i}.example.com, port: 443}}]}}\n"
            ));
        }
        text
    };
    // Middleware `config` takes any value, so the aliases reach the deserializer there.
    let billion_laughs = {
        let mut text = String::from(
            "version: 1\nnetwork_middlewares:\n  audit:\n    middleware: request_logger\n    config:\n      a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
        );
        for i in 1..10 {
            let prev = i - 1;
            let aliases = vec![format!("*a{prev}"); 10].join(", ");
            text.push_str(&format!("      a{i}: &a{i} [{aliases}]\n"));
        }
        text
    };
    let many_bad_ports = {
        let mut text = format!(
            "version: 1\nnetwork_policies:\n  {}:\n    endpoints:\n",
            "k".repeat(200)
        );
        for i in 0..2000 {
            text.push_str(&format!("      - {{ host: h{i}.example.com, port: 0 }}\n"));
        }
        text
    };
    vec![
        policy_case("malformed YAML", "an unclosed flow sequence", "version: 1\nnetwork_policies: [\n".into(), &["YAML"]),
        policy_case("unknown top-level field", "`colour: blue` beside a valid policy", format!("{MINIMAL}colour: blue\n"), &["colour"]),
        policy_case("unknown nested field", "`prot: tcp` in an endpoint", MINIMAL.replace("port: 443", "port: 443\n        prot: tcp"), &["prot"]),
        policy_case("port out of range", "port 70000", MINIMAL.replace("port: 443", "port: 70000"), &["policy.network_policies.github.endpoints[0].port", "65535"]),
        policy_case("port zero in a ports list", "ports [443, 0]", MINIMAL.replace("port: 443", "ports: [443, 0]"), &["policy.network_policies.github.endpoints[0].ports[1]"]),
        policy_case("TLD wildcard host", "host `*.com`", MINIMAL.replace("api.github.com", "'*.com'"), &["policy.network_policies.github.endpoints[0].host"]),
        policy_case("empty host", "host ``", MINIMAL.replace("api.github.com", "''"), &["policy.network_policies.github.endpoints[0].host"]),
        policy_case("static section changed after revision 1", "run_as_user changed from the first revision", POLICY.replace("run_as_user: sandbox", "run_as_user: \"4321\""), &["policy.process", "first policy revision"]),
        policy_case("every violation at once", "empty host and port 0 in one endpoint", "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - host: ''\n        port: 0\n".into(), &["policy.network_policies.a.endpoints[0].host", "policy.network_policies.a.endpoints[0].port"]),
        policy_case("empty document", "only whitespace and a comment", "  \n# nothing\n".into(), &["policy", "empty", "version: 1"]),
        policy_case("policy name with a control character", "network policy key `gi\\u0007t`", MINIMAL.replace("github:", "\"gi\\u0007t\":"), &["policy.network_policies[", "control characters"]),
        policy_case("policy name too long", "a 300-character network policy key", MINIMAL.replace("github:", &format!("{}:", "g".repeat(300))), &["policy.network_policies.ggg", "300 characters", "the limit is 256"]),
        policy_case("binary path empty", "binaries path ``", format!("{MINIMAL}    binaries:\n      - path: ''\n"), &["binaries[0].path", "required"]),
        Case {
            group: "sizes",
            name: "oversize policy".into(),
            input: "a 300 KiB policy (a long comment)".into(),
            call: update(pb::UpdateConfigRequest { policy_text: format!("{MINIMAL}# {}\n", "x".repeat(300 * 1024)), ..to_target() }),
            expect: invalid(&["262144"]),
        },
        Case {
            group: "sizes",
            name: "10k network policies".into(),
            input: "10,000 network policies with one endpoint each".into(),
            call: update(pb::UpdateConfigRequest { policy_text: many_policies(10_000), ..to_target() }),
            expect: invalid(&["262144"]),
        },
        Case {
            group: "sizes",
            name: "deeply nested flow YAML".into(),
            input: "10,000 nested `[`".into(),
            call: update(pb::UpdateConfigRequest { policy_text: format!("version: 1\nx: {}", "[".repeat(10_000)), ..to_target() }),
            expect: invalid(&["64 levels"]),
        },
        Case {
            group: "sizes",
            name: "deeply nested block YAML".into(),
            input: "100 levels of `- ` block sequences".into(),
            call: update(pb::UpdateConfigRequest { policy_text: format!("version: 1\nx:\n{}x\n", "- ".repeat(100)), ..to_target() }),
            expect: invalid(&["64 levels"]),
        },
        Case {
            group: "sizes",
            name: "YAML alias bomb".into(),
            input: "billion laughs: 10 anchors, each 10 aliases of the one before".into(),
            call: update(pb::UpdateConfigRequest { policy_text: billion_laughs, ..to_target() }),
            expect: invalid(&["policy", "aliases", "alias bomb"]),
        },
        Case {
            group: "sizes",
            name: "huge host string".into(),
            input: "a 200 KiB host name".into(),
            call: update(pb::UpdateConfigRequest { policy_text: MINIMAL.replace("api.github.com", &"a".repeat(200 * 1024)), ..to_target() }),
            expect: invalid(&["policy.network_policies.github.endpoints[0].host"]),
        },
        Case {
            group: "sizes",
            name: "huge path string".into(),
            input: "a 5,000-byte read_only path".into(),
            call: update(pb::UpdateConfigRequest { policy_text: format!("{MINIMAL}filesystem_policy:\n  read_only: [/{}]\n", "p".repeat(5000)), ..to_target() }),
            expect: invalid(&["policy.filesystem_policy.read_only[0]", "4096"]),
        },
        // Defect: an error with many long violations carried a 27 KB `grpc-status-details-bin`
        // (only the message was bounded), past the clients' header-list limits; the client saw
        // an h2 protocol error or RESOURCE_EXHAUSTED instead of the refusal.
        Case {
            group: "sizes",
            name: "thousands of long violations".into(),
            input: "2,000 endpoints with port 0 under a 200-character policy key".into(),
            call: update(pb::UpdateConfigRequest { policy_text: many_bad_ports, ..to_target() }),
            expect: invalid(&["2000 problems found", "policy.network_policies.kkk", "endpoints[0].port", "more violations"]),
        },
    ]
}

fn settings_cases() -> Vec<Case> {
    use pb::setting_value::Kind;
    let mut cases = vec![
        setting_case(
            "unknown setting key",
            "log_levle",
            "debug",
            &["settings.log_levle", "unknown setting key"],
        ),
        setting_case(
            "setting key empty",
            "",
            "debug",
            &["settings.", "unknown setting key"],
        ),
        setting_case(
            "setting key look-alike",
            "log_lev\u{435}l",
            "debug",
            &["unknown setting key", "log_level"],
        ),
        setting_case(
            "setting key with a control character",
            "log_level\u{7}",
            "debug",
            &["unknown setting key"],
        ),
        setting_case(
            "setting key path traversal",
            "../log_level",
            "debug",
            &["settings.../log_level", "unknown setting key"],
        ),
        setting_case(
            "setting key too long",
            &"k".repeat(100_000),
            "debug",
            &["settings.kkk", "(100000 characters)", "unknown setting key"],
        ),
        typed_setting_case(
            "typed value of the wrong type",
            "log_level",
            Kind::IntValue(3),
            &["settings.log_level", "expected one of"],
        ),
        typed_setting_case(
            "typed int out of range",
            "log_rate_limit_per_second",
            Kind::IntValue(-5),
            &["settings.log_rate_limit_per_second", "between 1 and 100000"],
        ),
        typed_setting_case(
            "typed string for a bool",
            "ocsf_json_enabled",
            Kind::StringValue("true".into()),
            &["settings.ocsf_json_enabled", "true or false"],
        ),
        setting_case(
            "string setting with a control character",
            "environment_label",
            "prod\u{1b}[31m",
            &["settings.environment_label", "control characters"],
        ),
        setting_case(
            "huge setting value",
            "environment_label",
            &"v".repeat(200 * 1024),
            &["settings.environment_label", "at most 128 characters"],
        ),
        Case {
            group: "settings",
            name: "setting without a change".into(),
            input: "a SettingChange with no value, raw or delete".into(),
            call: update(pb::UpdateConfigRequest {
                settings: vec![pb::SettingChange {
                    key: "log_level".into(),
                    change: None,
                }],
                ..to_target()
            }),
            expect: invalid(&["settings.log_level", "give a value"]),
        },
    ];
    cases.push(setting_case(
        "int setting not a number",
        "log_rate_limit_per_second",
        "lots",
        &["settings.log_rate_limit_per_second", "integer"],
    ));
    cases.push(setting_case(
        "int setting below its minimum",
        "log_rate_limit_per_second",
        "0",
        &["settings.log_rate_limit_per_second", "between 1 and 100000"],
    ));
    // One refusal per rule of the settings registry: each key's type and bounds.
    for def in openshell_core::settings::registry() {
        let key = def.key;
        let (raw, needles): (String, Vec<String>) = match def.kind {
            openshell_core::settings::SettingKind::Bool => {
                ("yes".into(), vec!["true or false".into()])
            }
            openshell_core::settings::SettingKind::Int { max, .. } => {
                ((max + 1).to_string(), vec![format!("{max}")])
            }
            openshell_core::settings::SettingKind::String { max_len } => (
                "s".repeat(max_len + 1),
                vec![format!("at most {max_len} characters")],
            ),
            openshell_core::settings::SettingKind::Enum(values) => {
                ("no-such-value".into(), vec![values[0].to_string()])
            }
        };
        let mut all = vec![format!("settings.{key}")];
        all.extend(needles);
        cases.push(Case {
            group: "settings rules",
            name: format!("rule {key}"),
            input: format!(
                "settings `{key}` = `{}` ({})",
                short(&raw),
                kind_name(def.kind)
            ),
            call: update(pb::UpdateConfigRequest {
                settings: vec![openshell_e2e::raw_setting(key, &raw)],
                ..to_target()
            }),
            expect: Expect::Status(Code::InvalidArgument, all),
        });
    }
    cases
}

fn kind_name(kind: openshell_core::settings::SettingKind) -> String {
    use openshell_core::settings::SettingKind;
    match kind {
        SettingKind::Bool => "a bool".into(),
        SettingKind::Int { min, max } => format!("an integer {min}..={max}"),
        SettingKind::String { max_len } => format!("a string of at most {max_len} characters"),
        SettingKind::Enum(values) => format!("one of {}", values.join(", ")),
    }
}

fn request_shape_cases() -> Vec<Case> {
    let remove_x = pb::PolicyMergeOperation {
        operation: Some(pb::policy_merge_operation::Operation::RemoveRule(
            pb::RemoveNetworkRule {
                rule_name: "x".into(),
            },
        )),
    };
    vec![
        update_case(
            "requests",
            "unknown sandbox",
            "name `no-such-sandbox`",
            pb::UpdateConfigRequest {
                sandbox: "no-such-sandbox".into(),
                policy_text: MINIMAL.into(),
                ..Default::default()
            },
            Expect::Status(Code::NotFound, words(&["no-such-sandbox"])),
        ),
        update_case(
            "requests",
            "no target",
            "no sandbox, global or workspace_settings",
            pb::UpdateConfigRequest {
                policy_text: MINIMAL.into(),
                ..Default::default()
            },
            invalid(&["sandbox", "sandbox name is required"]),
        ),
        update_case(
            "requests",
            "two scopes",
            "global and workspace_settings",
            pb::UpdateConfigRequest {
                global: true,
                workspace_settings: true,
                policy_text: MINIMAL.into(),
                ..Default::default()
            },
            invalid(&["workspace_settings", "not both"]),
        ),
        update_case(
            "requests",
            "upstream's incremental edits, empty",
            "one empty merge operation",
            pb::UpdateConfigRequest {
                merge_operations: vec![pb::PolicyMergeOperation::default()],
                ..to_target()
            },
            invalid(&["merge_operations[0]", "set one of add_rule"]),
        ),
        update_case(
            "requests",
            "edits beside a whole policy",
            "merge_operations and policy_text",
            pb::UpdateConfigRequest {
                policy_text: MINIMAL.into(),
                merge_operations: vec![remove_x.clone()],
                ..to_target()
            },
            invalid(&["merge_operations", "not both"]),
        ),
        update_case(
            "requests",
            "edits of a global policy that is not set",
            "merge_operations with global, no global policy",
            pb::UpdateConfigRequest {
                global: true,
                merge_operations: vec![remove_x],
                ..Default::default()
            },
            Expect::Status(
                Code::FailedPrecondition,
                words(&["no global policy is set", "nothing was written"]),
            ),
        ),
        update_case(
            "requests",
            "upstream's resource version, out of date",
            "expected_resource_version 7000",
            pb::UpdateConfigRequest {
                policy_text: MINIMAL.into(),
                expected_resource_version: 7_000,
                ..to_target()
            },
            Expect::Status(
                Code::FailedPrecondition,
                words(&["not the expected 7000", "read it again and retry"]),
            ),
        ),
        update_case(
            "requests",
            "resource version for a workspace",
            "expected_resource_version with workspace_settings",
            pb::UpdateConfigRequest {
                workspace_settings: true,
                workspace_scope: openshell_e2e::workspace_scope("default"),
                expected_resource_version: 3,
                settings: vec![openshell_e2e::raw_setting("log_level", "warn")],
                ..Default::default()
            },
            invalid(&["expected_resource_version", "workspace"]),
        ),
        update_case(
            "requests",
            "upstream's annotations",
            "annotations team=infra",
            pb::UpdateConfigRequest {
                annotations: [("team".to_string(), "infra".to_string())].into(),
                policy_text: MINIMAL.into(),
                ..to_target()
            },
            invalid(&["annotations", "not served yet"]),
        ),
        update_case(
            "requests",
            "a policy given twice",
            "typed policy and policy_text",
            pb::UpdateConfigRequest {
                policy: Some(openshell_proto::sandbox::v1::SandboxPolicy {
                    version: 1,
                    ..Default::default()
                }),
                policy_text: MINIMAL.into(),
                ..to_target()
            },
            invalid(&["policy", "not both"]),
        ),
        update_case(
            "requests",
            "a typed policy with a bad landlock value",
            "landlock.compatibility `sometimes`",
            pb::UpdateConfigRequest {
                policy: Some(openshell_proto::sandbox::v1::SandboxPolicy {
                    version: 1,
                    landlock: Some(openshell_proto::sandbox::v1::LandlockPolicy {
                        compatibility: "sometimes".into(),
                    }),
                    ..Default::default()
                }),
                ..to_target()
            },
            invalid(&["policy.landlock.compatibility"]),
        ),
        update_case(
            "requests",
            "upstream's reserved policy key on a sandbox",
            "setting_key policy with delete_setting on a sandbox",
            pb::UpdateConfigRequest {
                setting_key: "policy".into(),
                delete_setting: true,
                ..to_target()
            },
            invalid(&["setting_key", "reserved key"]),
        ),
        update_case(
            "requests",
            "a setting key without a value",
            "setting_key alone",
            pb::UpdateConfigRequest {
                setting_key: "log_level".into(),
                ..to_target()
            },
            invalid(&["setting_value"]),
        ),
        update_case(
            "requests",
            "nothing to change",
            "a target and nothing else",
            to_target(),
            invalid(&["nothing to change"]),
        ),
        update_case(
            "requests",
            "policy for a workspace",
            "policy_text with workspace_settings",
            pb::UpdateConfigRequest {
                workspace_settings: true,
                workspace_scope: openshell_e2e::workspace_scope("default"),
                policy_text: MINIMAL.into(),
                ..Default::default()
            },
            invalid(&["policy", "workspace"]),
        ),
        update_case(
            "requests",
            "clearing the global policy of a sandbox",
            "clear_global_policy on a sandbox",
            pb::UpdateConfigRequest {
                clear_global_policy: true,
                ..to_target()
            },
            invalid(&["clear_global_policy", "global"]),
        ),
        update_case(
            "requests",
            "setting and clearing the global policy",
            "clear_global_policy with policy_text",
            pb::UpdateConfigRequest {
                global: true,
                clear_global_policy: true,
                policy_text: MINIMAL.into(),
                ..Default::default()
            },
            invalid(&["clear_global_policy", "both set and clear"]),
        ),
        update_case(
            "requests",
            "wait threshold out of range",
            "wait.threshold 1.5",
            pb::UpdateConfigRequest {
                policy_text: policy_with_port(8081),
                wait: Some(pb::WaitOptions {
                    timeout: None,
                    threshold: 1.5,
                }),
                ..to_target()
            },
            invalid(&["wait.threshold"]),
        ),
        update_case(
            "requests",
            "unknown update mode",
            "mode 99",
            pb::UpdateConfigRequest {
                policy_text: policy_with_port(8082),
                mode: 99,
                ..to_target()
            },
            invalid(&["mode"]),
        ),
    ]
}

/// Defects: `UpdateConfig` with a sandbox and `global` (or `workspace_settings`) wrote to the
/// scope and silently ignored the sandbox; `ListSandboxes`, `ListOperations` and
/// `ListSandboxPolicies` cut a page over 1000 where `ListOperationTargets` refused it.
fn target_and_page_cases() -> Vec<Case> {
    let list = |name: &str, input: &str, call: Call, field: &str| Case {
        group: "requests",
        name: name.into(),
        input: input.into(),
        call,
        expect: invalid(&[field, "1001", "limit of 1000"]),
    };
    vec![
        update_case(
            "requests",
            "a sandbox and global",
            "sandbox `target` and global",
            pb::UpdateConfigRequest {
                global: true,
                policy_text: MINIMAL.into(),
                ..to_target()
            },
            invalid(&["sandbox", "global", "not both"]),
        ),
        update_case(
            "requests",
            "a sandbox and workspace_settings",
            "sandbox `target` and workspace_settings",
            pb::UpdateConfigRequest {
                workspace_settings: true,
                settings: vec![openshell_e2e::raw_setting("log_level", "debug")],
                ..to_target()
            },
            invalid(&["sandbox", "workspace_settings", "not both"]),
        ),
        update_case(
            "requests",
            "a workspace and global",
            "workspace_scope `default` and global",
            pb::UpdateConfigRequest {
                global: true,
                workspace_scope: openshell_e2e::workspace_scope("default"),
                policy_text: MINIMAL.into(),
                ..Default::default()
            },
            invalid(&["workspace_scope", "global", "workspace_settings"]),
        ),
        list(
            "ListSandboxes page over the limit",
            "page_size 1001",
            Call::ListSandboxes(pb::ListSandboxesRequest {
                page_size: 1001,
                ..Default::default()
            }),
            "page_size",
        ),
        list(
            "ListOperations page over the limit",
            "page_size 1001",
            Call::ListOperations(pb::ListOperationsRequest {
                page_size: 1001,
                ..Default::default()
            }),
            "page_size",
        ),
        list(
            "ListOperationTargets page over the limit",
            "page_size 1001",
            Call::ListOperationTargets(pb::ListOperationTargetsRequest {
                page_size: 1001,
                ..Default::default()
            }),
            "page_size",
        ),
        list(
            "ListSandboxPolicies page_size over the limit",
            "sandbox `target`, page_size 1001",
            Call::ListSandboxPolicies(pb::ListSandboxPoliciesRequest {
                sandbox: "target".into(),
                page_size: 1001,
                ..Default::default()
            }),
            "page_size",
        ),
    ]
}

fn idempotency_cases() -> Vec<Case> {
    let keyed = |name: &str, key: &str, policy: String| pb::UpdateConfigRequest {
        sandbox: name.into(),
        policy_text: policy,
        request_id: key.into(),
        ..Default::default()
    };
    vec![
        update_case(
            "idempotency",
            "same key, different body",
            "key `used-once` with another policy",
            keyed("target", "used-once", policy_with_port(8080)),
            invalid(&["request_id", "different request"]),
        ),
        update_case(
            "idempotency",
            "same key, settings instead of a policy",
            "key `used-once` with a setting change",
            pb::UpdateConfigRequest {
                settings: vec![openshell_e2e::raw_setting("log_level", "warn")],
                request_id: "used-once".into(),
                ..to_target()
            },
            invalid(&["request_id", "different request"]),
        ),
        update_case(
            "idempotency",
            "key too long",
            "a 129-character key",
            keyed("target", &"k".repeat(129), policy_with_port(8083)),
            invalid(&["request_id", "1 to 128 characters"]),
        ),
        update_case(
            "idempotency",
            "huge key",
            "a 100,000-character key",
            keyed("target", &"k".repeat(100_000), policy_with_port(8084)),
            invalid(&["request_id", "1 to 128 characters"]),
        ),
        update_case(
            "idempotency",
            "key with control characters",
            "key `k\\u001b[31m`",
            keyed("target", "k\u{1b}[31m", policy_with_port(8085)),
            invalid(&["request_id", "control characters"]),
        ),
    ]
}

fn create(name: &str, workspace: &str) -> Call {
    Call::CreateSandbox(pb::CreateSandboxRequest {
        name: name.into(),
        workspace: workspace.into(),
        policy: String::new(),
    })
}

fn provider(name: &str, workspace: &str, kind: &str, values: Vec<pb::ProviderValueInput>) -> Call {
    Call::CreateProvider(pb::CreateProviderRequest {
        name: name.into(),
        workspace: workspace.into(),
        r#type: kind.into(),
        values,
        expires_at: None,
    })
}

fn env(name: &str, value: &str) -> Vec<pb::ProviderValueInput> {
    vec![pb::ProviderValueInput {
        name: name.into(),
        value: value.into(),
        class: pb::ValueClass::NonSecret as i32,
        ..Default::default()
    }]
}

fn names_cases() -> Vec<Case> {
    // Each kind of name: empty, too long, look-alike, control character, traversal, shape.
    let bad_names: [(&str, String, &[&str]); 7] = [
        ("empty", String::new(), &["required"]),
        ("too long", "n".repeat(64), &["64 characters", "63"]),
        (
            "unicode look-alike",
            "t\u{430}rget".into(),
            &["lowercase letters", "'\u{430}'"],
        ),
        (
            "control character",
            "a\u{7}b".into(),
            &["lowercase letters", "'\\u{7}'"],
        ),
        (
            "path traversal",
            "../etc".into(),
            &["lowercase letters", "'.'"],
        ),
        ("upper case", "Target".into(), &["lowercase letters", "'T'"]),
        ("shaped like an id", "sb-target".into(), &["read as ids"]),
    ];
    let mut cases = Vec::new();
    for (what, name, needles) in &bad_names {
        let mut sandbox = vec!["name".to_string()];
        sandbox.extend(words(needles));
        cases.push(Case {
            group: "names",
            name: format!("sandbox name {what}"),
            input: format!("CreateSandbox name `{}`", short(name)),
            call: create(name, ""),
            expect: Expect::Status(Code::InvalidArgument, sandbox.clone()),
        });
        if !name.is_empty() {
            let mut workspace = vec!["workspace".to_string()];
            workspace.extend(words(needles));
            cases.push(Case {
                group: "names",
                name: format!("workspace name {what}"),
                input: format!("CreateSandbox workspace `{}`", short(name)),
                call: create("fine", name),
                expect: Expect::Status(Code::InvalidArgument, workspace),
            });
        }
        cases.push(Case {
            group: "names",
            name: format!("provider name {what}"),
            input: format!("CreateProvider name `{}`", short(name)),
            call: provider(name, "", "github", env("GITHUB_ORG", "acme")),
            expect: Expect::Status(Code::InvalidArgument, sandbox),
        });
    }
    cases.extend([
        Case {
            group: "names",
            name: "sandbox name taken".into(),
            input: "CreateSandbox name `target` again".into(),
            call: create("target", ""),
            expect: Expect::Status(Code::AlreadyExists, words(&["target"])),
        },
        Case {
            group: "names",
            name: "provider type with a bad character".into(),
            input: "CreateProvider type `Git.Hub`".into(),
            call: provider("gh", "", "Git.Hub", env("GITHUB_ORG", "acme")),
            expect: invalid(&["type", "lowercase letters"]),
        },
        Case {
            group: "names",
            name: "provider type empty".into(),
            input: "CreateProvider type ``".into(),
            call: provider("gh", "", "", env("GITHUB_ORG", "acme")),
            expect: invalid(&["type", "required"]),
        },
        Case {
            group: "names",
            name: "provider variable starting with a digit".into(),
            input: "CreateProvider value `1TOKEN`".into(),
            call: provider("gh", "", "github", env("1TOKEN", "x")),
            expect: invalid(&["values[0].name", "start with a letter"]),
        },
        Case {
            group: "names",
            name: "provider variable with a dash".into(),
            input: "CreateProvider value `GH-TOKEN`".into(),
            call: provider("gh", "", "github", env("GH-TOKEN", "x")),
            expect: invalid(&["values[0].name", "letters, digits and '_'"]),
        },
        Case {
            group: "names",
            name: "provider variable empty".into(),
            input: "CreateProvider value named ``".into(),
            call: provider("gh", "", "github", env("", "x")),
            expect: invalid(&["environment variable name is empty"]),
        },
        Case {
            group: "names",
            name: "provider value with a NUL byte".into(),
            input: "CreateProvider value `a\\0b`".into(),
            call: provider("gh", "", "github", env("GITHUB_ORG", "a\0b")),
            expect: invalid(&["values.GITHUB_ORG", "NUL"]),
        },
        Case {
            group: "ids",
            name: "operation id empty".into(),
            input: "GetOperation ``".into(),
            call: Call::GetOperation(String::new()),
            expect: invalid(&["id", "required"]),
        },
        Case {
            group: "ids",
            name: "operation id unknown".into(),
            input: "GetOperation `op-nope`".into(),
            call: Call::GetOperation("op-nope".into()),
            expect: Expect::Status(Code::NotFound, words(&["op-nope"])),
        },
        Case {
            group: "ids",
            name: "operation id path traversal".into(),
            input: "GetOperation `../op-1`".into(),
            call: Call::GetOperation("../op-1".into()),
            expect: Expect::Status(Code::NotFound, words(&["../op-1"])),
        },
        Case {
            group: "ids",
            name: "operation id look-alike".into(),
            input: "GetOperation `\u{43e}p-1` (Cyrillic o)".into(),
            call: Call::GetOperation("\u{43e}p-1".into()),
            expect: Expect::Status(Code::NotFound, words(&["\u{43e}p-1"])),
        },
        Case {
            group: "ids",
            name: "operation id huge".into(),
            input: "GetOperation with a 100,000-character id".into(),
            call: Call::GetOperation(format!("op-{}", "9".repeat(100_000))),
            expect: Expect::Status(Code::NotFound, words(&["op-999"])),
        },
        Case {
            group: "ids",
            name: "sandbox reference missing".into(),
            input: "GetSandbox without a reference".into(),
            call: Call::GetSandbox(pb::SandboxRef::default()),
            expect: invalid(&["sandbox"]),
        },
        Case {
            group: "ids",
            name: "sandbox reference path traversal".into(),
            input: "GetSandbox `../target`".into(),
            call: Call::GetSandbox(sandbox_ref("../target").unwrap()),
            expect: Expect::Status(Code::NotFound, words(&["../target"])),
        },
        Case {
            group: "ids",
            name: "sandbox reference look-alike".into(),
            input: "GetSandbox `t\u{430}rget` (Cyrillic a)".into(),
            call: Call::GetSandbox(sandbox_ref("t\u{430}rget").unwrap()),
            expect: Expect::Status(Code::NotFound, words(&["t\u{430}rget"])),
        },
        Case {
            group: "ids",
            name: "sandbox id unknown".into(),
            input: "GetSandbox `sb-nope`".into(),
            call: Call::GetSandbox(sandbox_ref("sb-nope").unwrap()),
            expect: Expect::Status(Code::NotFound, words(&["sb-nope"])),
        },
    ]);
    cases
}

fn hello_frame(sandbox_id: &str) -> pb::SupervisorMessage {
    pb::SupervisorMessage {
        payload: Some(FromSupervisor::Hello(pb::SupervisorHello {
            sandbox_id: sandbox_id.into(),
            instance_id: "raw".into(),
            protocol_revision: 1,
            supervisor_version: "test".into(),
            // Shadow push: the gateway sends snapshots and waits for acks, without a bootstrap.
            supports_config_snapshots: true,
            supports_config_apply: false,
            ..Default::default()
        })),
    }
}

fn heartbeat_frame() -> pb::SupervisorMessage {
    pb::SupervisorMessage {
        payload: Some(FromSupervisor::Heartbeat(pb::SupervisorHeartbeat {
            sent_at: None,
        })),
    }
}

fn ack_frame(delivery_id: u64, status: pb::ConfigApplyStatus) -> pb::SupervisorMessage {
    pb::SupervisorMessage {
        payload: Some(FromSupervisor::ConfigUpdateResult(pb::ConfigUpdateResult {
            delivery_id,
            component: pb::ConfigComponent::SandboxConfig as i32,
            revisions: None,
            status: status as i32,
            reason: String::new(),
            failed_closed: false,
        })),
    }
}

/// A frame larger than the gateway's 1 MiB message limit.
fn oversize_frame() -> pb::SupervisorMessage {
    pb::SupervisorMessage {
        payload: Some(FromSupervisor::RuntimeReadiness(pb::RuntimeReadiness {
            workload_started: true,
            middlewares: vec![pb::MiddlewareReadiness {
                error: "e".repeat(2 * 1024 * 1024),
                ..Default::default()
            }],
        })),
    }
}

fn session(
    who: Who,
    sandbox: Pick,
    before: Vec<pb::SupervisorMessage>,
    hello: bool,
    after: Vec<pb::SupervisorMessage>,
) -> Call {
    Call::Session(Session {
        who,
        sandbox,
        before_hello: before,
        hello,
        after_hello: after,
    })
}

fn supervisor_cases() -> Vec<Case> {
    let peer = || Who::SupervisorOf(Pick::Peer);
    let rejected = |needles: &[&str]| Expect::Rejected(words(needles));
    vec![
        Case {
            group: "supervisor protocol",
            name: "heartbeat before hello".into(),
            input: "ConnectSupervisor: a heartbeat as the first frame".into(),
            call: session(peer(), Pick::Peer, vec![heartbeat_frame()], false, vec![]),
            expect: rejected(&["first frame", "SupervisorHello"]),
        },
        Case {
            group: "supervisor protocol",
            name: "ack before hello".into(),
            input: "ConnectSupervisor: a ConfigUpdateResult as the first frame".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![ack_frame(1, pb::ConfigApplyStatus::Applied)],
                false,
                vec![],
            ),
            expect: rejected(&["first frame", "SupervisorHello"]),
        },
        Case {
            group: "supervisor protocol",
            name: "empty frame before hello".into(),
            input: "ConnectSupervisor: a frame with no payload first".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![pb::SupervisorMessage { payload: None }],
                false,
                vec![],
            ),
            expect: rejected(&["first frame", "SupervisorHello"]),
        },
        Case {
            group: "supervisor protocol",
            name: "oversize first frame".into(),
            input: "ConnectSupervisor: a 2 MiB frame before hello".into(),
            call: session(peer(), Pick::Peer, vec![oversize_frame()], false, vec![]),
            expect: rejected(&["1048576"]),
        },
        Case {
            group: "supervisor protocol",
            name: "hello without a sandbox id".into(),
            input: "ConnectSupervisor: hello with sandbox_id ``".into(),
            call: session(peer(), Pick::Literal(String::new()), vec![], true, vec![]),
            expect: rejected(&["sandbox_id is missing"]),
        },
        Case {
            group: "supervisor protocol",
            name: "second hello".into(),
            input: "ConnectSupervisor: a second hello after acceptance".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![],
                true,
                vec![hello_frame("sb-other")],
            ),
            expect: rejected(&["protocol error", "a second SupervisorHello"]),
        },
        Case {
            group: "supervisor protocol",
            name: "ack for an unknown delivery".into(),
            input: "ConnectSupervisor: ConfigUpdateResult for delivery 999999".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![],
                true,
                vec![ack_frame(999_999, pb::ConfigApplyStatus::Applied)],
            ),
            expect: Expect::Ignored,
        },
        Case {
            group: "supervisor protocol",
            name: "sequence regression".into(),
            input: "ConnectSupervisor: acks for delivery 5 then 0 and 1".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![],
                true,
                vec![
                    ack_frame(5, pb::ConfigApplyStatus::Failed),
                    ack_frame(0, pb::ConfigApplyStatus::Applied),
                    ack_frame(1, pb::ConfigApplyStatus::Stale),
                ],
            ),
            expect: Expect::Ignored,
        },
        Case {
            group: "supervisor protocol",
            name: "unknown apply status".into(),
            input: "ConnectSupervisor: ConfigUpdateResult with status 42".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![],
                true,
                vec![pb::SupervisorMessage {
                    payload: Some(FromSupervisor::ConfigUpdateResult(pb::ConfigUpdateResult {
                        delivery_id: 1,
                        status: 42,
                        ..Default::default()
                    })),
                }],
            ),
            expect: Expect::Ignored,
        },
        Case {
            group: "supervisor protocol",
            name: "bootstrap result nobody asked for".into(),
            input: "ConnectSupervisor: BootstrapResult on a shadow-push session".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![],
                true,
                vec![pb::SupervisorMessage {
                    payload: Some(FromSupervisor::BootstrapResult(pb::BootstrapResult {
                        applied: true,
                        ..Default::default()
                    })),
                }],
            ),
            expect: Expect::Ignored,
        },
        Case {
            group: "supervisor protocol",
            name: "startup frame outside the exchange".into(),
            input: "ConnectSupervisor: StartupConfigPrepared after acceptance".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![],
                true,
                vec![pb::SupervisorMessage {
                    payload: Some(FromSupervisor::StartupPrepared(pb::StartupConfigPrepared {
                        result: Some(pb::startup_config_prepared::Result::Unchanged(true)),
                    })),
                }],
            ),
            expect: rejected(&["protocol error", "outside the startup exchange"]),
        },
        Case {
            group: "supervisor protocol",
            name: "heartbeat flood".into(),
            input: "ConnectSupervisor: 10,000 heartbeats at once".into(),
            call: session(
                peer(),
                Pick::Peer,
                vec![],
                true,
                vec![heartbeat_frame(); 10_000],
            ),
            expect: Expect::Ignored,
        },
        Case {
            group: "supervisor protocol",
            name: "oversize frame".into(),
            input: "ConnectSupervisor: a 2 MiB frame after acceptance".into(),
            call: session(peer(), Pick::Peer, vec![], true, vec![oversize_frame()]),
            expect: rejected(&["1048576"]),
        },
        Case {
            group: "supervisor protocol",
            name: "silent session".into(),
            input: "ConnectSupervisor: hello, then no frame for 3 heartbeat intervals".into(),
            call: session(peer(), Pick::Peer, vec![], true, vec![]),
            expect: rejected(&["3 heartbeat intervals"]),
        },
    ]
}

fn auth_cases() -> Vec<Case> {
    let status = |needles: &[&str]| Expect::Status(Code::Unauthenticated, words(needles));
    let write = || pb::UpdateConfigRequest {
        policy_text: policy_with_port(8090),
        ..to_target()
    };
    vec![
        Case {
            group: "auth",
            name: "no token".into(),
            input: "UpdateConfig without authorization".into(),
            call: Call::Update(Who::Nobody, Box::new(write())),
            expect: status(&["missing operator token", "Bearer"]),
        },
        Case {
            group: "auth",
            name: "no token, read".into(),
            input: "GetGatewayInfo without authorization".into(),
            call: Call::GatewayInfo(Who::Nobody),
            expect: status(&["missing operator token"]),
        },
        Case {
            group: "auth",
            name: "wrong token".into(),
            input: "UpdateConfig with `Bearer wrong-token`".into(),
            call: Call::Update(Who::Header("Bearer wrong-token"), Box::new(write())),
            expect: status(&["operator token is not valid"]),
        },
        Case {
            group: "auth",
            name: "not a bearer header".into(),
            input: "UpdateConfig with `Basic dGVzdA==`".into(),
            call: Call::Update(Who::Header("Basic dGVzdA=="), Box::new(write())),
            expect: status(&["Bearer <token>"]),
        },
        Case {
            group: "auth",
            name: "empty bearer".into(),
            input: "UpdateConfig with `Bearer `".into(),
            call: Call::Update(Who::Header("Bearer "), Box::new(write())),
            expect: status(&["operator token is not valid"]),
        },
        Case {
            group: "auth",
            name: "supervisor credential on the operator API".into(),
            input: "UpdateConfig with the credential of `target`".into(),
            call: Call::Update(Who::SupervisorOf(Pick::Target), Box::new(write())),
            expect: status(&["operator token is not valid"]),
        },
        Case {
            group: "auth",
            name: "operator token on the supervisor API".into(),
            input: "GetSandboxConfig for `peer` with the operator token".into(),
            call: Call::SandboxConfig(Who::Operator, Pick::Peer),
            expect: status(&["credential is not valid for sandbox"]),
        },
        Case {
            group: "auth",
            name: "operator token on a supervisor session".into(),
            input: "ConnectSupervisor for `peer` with the operator token".into(),
            call: session(Who::Operator, Pick::Peer, vec![], true, vec![]),
            expect: Expect::Rejected(words(&["credential is not valid for sandbox"])),
        },
        Case {
            group: "auth",
            name: "no credential on the supervisor API".into(),
            input: "GetSandboxConfig for `peer` without authorization".into(),
            call: Call::SandboxConfig(Who::Nobody, Pick::Peer),
            expect: status(&["missing supervisor credential", "Bearer"]),
        },
        Case {
            group: "auth",
            name: "no credential on a supervisor session".into(),
            input: "ConnectSupervisor for `peer` without authorization".into(),
            call: session(Who::Nobody, Pick::Peer, vec![], true, vec![]),
            expect: Expect::Rejected(words(&["missing supervisor credential"])),
        },
        Case {
            group: "auth",
            name: "one sandbox's credential for another".into(),
            input: "GetSandboxConfig for `peer` with the credential of `target`".into(),
            call: Call::SandboxConfig(Who::SupervisorOf(Pick::Target), Pick::Peer),
            expect: status(&["credential is not valid for sandbox"]),
        },
        Case {
            group: "auth",
            name: "one sandbox's session with another's credential".into(),
            input: "ConnectSupervisor for `peer` with the credential of `target`".into(),
            call: session(
                Who::SupervisorOf(Pick::Target),
                Pick::Peer,
                vec![],
                true,
                vec![],
            ),
            expect: Expect::Rejected(words(&["credential is not valid for sandbox"])),
        },
        Case {
            group: "auth",
            name: "status report for another sandbox".into(),
            input: "ReportPolicyStatus for `peer` with the credential of `target`".into(),
            call: Call::ReportPolicyStatus(Who::SupervisorOf(Pick::Target), Pick::Peer, None),
            expect: status(&["credential is not valid for sandbox"]),
        },
        // What a supervisor reports it runs is checked before it reaches the store: a revision
        // the store's signed 64-bit columns cannot hold, and a configuration never served.
        Case {
            group: "auth",
            name: "status report beyond the store's range".into(),
            input: "ReportPolicyStatus for `peer`, LOADED policy revision 2^63".into(),
            call: Call::ReportPolicyStatus(
                Who::SupervisorOf(Pick::Peer),
                Pick::Peer,
                Some(pb::AppliedRevisions {
                    policy_revision: 1 << 63,
                    ..Default::default()
                }),
            ),
            expect: invalid(&["revisions.policy_revision", "largest revision"]),
        },
        Case {
            group: "auth",
            name: "status report of a revision never served".into(),
            input: "ReportPolicyStatus for `peer`, LOADED policy revision 7 with an invented hash"
                .into(),
            call: Call::ReportPolicyStatus(
                Who::SupervisorOf(Pick::Peer),
                Pick::Peer,
                Some(pb::AppliedRevisions {
                    policy_revision: 7,
                    policy_hash: "invented".into(),
                    ..Default::default()
                }),
            ),
            expect: Expect::Status(Code::FailedPrecondition, words(&["never sent"])),
        },
        Case {
            group: "auth",
            name: "a deleted sandbox's credential".into(),
            input: "GetSandboxConfig for deleted `gone` with its credential".into(),
            call: Call::SandboxConfig(Who::SupervisorOf(Pick::Gone), Pick::Gone),
            expect: status(&["was deleted"]),
        },
        Case {
            group: "auth",
            name: "a deleted sandbox's session".into(),
            input: "ConnectSupervisor for deleted `gone` with its credential".into(),
            call: session(
                Who::SupervisorOf(Pick::Gone),
                Pick::Gone,
                vec![],
                true,
                vec![],
            ),
            expect: Expect::Rejected(words(&["was deleted"])),
        },
        Case {
            group: "auth",
            name: "plaintext to a TLS listener".into(),
            input: "the HTTP/2 preface in plain text to a gateway serving TLS".into(),
            call: Call::PlaintextToTls,
            expect: Expect::Status(
                Code::Unavailable,
                words(&["serves TLS only", "without TLS", "use https://"]),
            ),
        },
    ]
}

// Probe defects of provider writes: (1) an attach or an update that made a sandbox's
// bootstrap larger than a session may send was accepted, and the sandbox could never start
// again; (3) expiry times outside a protobuf Timestamp's range were cut to fit; (4) a
// provider named `WORKSPACE/NAME` was looked up as a name in the sandbox's workspace. The
// fixture's sandbox `full` attaches `bulk` (16 values of 60,000 bytes) and `small`;
// `bulk-2`, as large, is attached nowhere.
fn provider_write_cases() -> Vec<Case> {
    let at = |seconds: i64, nanos: i32| Some(prost_types::Timestamp { seconds, nanos });
    let expiring = |name: &str, provider_at, value_at| {
        Call::CreateProvider(pb::CreateProviderRequest {
            name: name.into(),
            workspace: String::new(),
            r#type: "github".into(),
            values: vec![pb::ProviderValueInput {
                name: "GITHUB_TOKEN".into(),
                value: "t".into(),
                class: pb::ValueClass::Credential as i32,
                expires_at: value_at,
            }],
            expires_at: provider_at,
        })
    };
    let attach = |sandbox: &str, provider: &str| {
        Call::AttachProvider(pb::AttachProviderRequest {
            sandbox: sandbox_ref(sandbox),
            provider: provider.into(),
        })
    };
    vec![
        Case {
            group: "providers",
            name: "attach past the bootstrap limit".into(),
            input: "AttachProvider `bulk-2` (960,000 bytes of values) to `full`, which attaches as much".into(),
            call: attach("full", "bulk-2"),
            expect: Expect::Status(
                Code::FailedPrecondition,
                words(&["attaching provider default/bulk-2", "sandbox default/full", "the limit is 1048576 bytes"]),
            ),
        },
        Case {
            group: "providers",
            name: "provider update past the bootstrap limit".into(),
            input: "UpdateProvider `small` (attached to `full`) to 2 values of 60,000 bytes".into(),
            call: Call::UpdateProvider(pb::UpdateProviderRequest {
                provider: "small".into(),
                workspace: String::new(),
                values: (0..2)
                    .map(|i| pb::ProviderValueInput {
                        name: format!("SMALL_{i}"),
                        value: "x".repeat(60_000),
                        class: pb::ValueClass::NonSecret as i32,
                        expires_at: None,
                    })
                    .collect(),
                expires_at: None,
            }),
            expect: Expect::Status(
                Code::FailedPrecondition,
                words(&["the new values of provider default/small", "sandbox default/full", "the limit is 1048576 bytes"]),
            ),
        },
        Case {
            group: "providers",
            name: "provider expiry seconds past year 9999".into(),
            input: "CreateProvider `expires_at.seconds` = 2^63 - 1".into(),
            call: expiring("timed", at(i64::MAX, 0), None),
            expect: invalid(&["expires_at.seconds", "0001-01-01T00:00:00Z..9999-12-31T23:59:59Z"]),
        },
        Case {
            group: "providers",
            name: "provider expiry seconds before year 1".into(),
            input: "CreateProvider `expires_at.seconds` = -2^63".into(),
            call: expiring("timed", at(i64::MIN, 0), None),
            expect: invalid(&["expires_at.seconds", "-9223372036854775808"]),
        },
        Case {
            group: "providers",
            name: "credential expiry nanos negative".into(),
            input: "CreateProvider `values[0].expires_at.nanos` = -1".into(),
            call: expiring("timed", None, at(1_800_000_000, -1)),
            expect: invalid(&["values[0].expires_at.nanos", "0..999999999"]),
        },
        Case {
            group: "providers",
            name: "credential expiry nanos of two seconds".into(),
            input: "CreateProvider `values[0].expires_at.nanos` = 2,000,000,000".into(),
            call: expiring("timed", None, at(1_800_000_000, 2_000_000_000)),
            expect: invalid(&["values[0].expires_at.nanos", "2000000000"]),
        },
        Case {
            group: "providers",
            name: "provider named in a workspace that lacks it".into(),
            input: "AttachProvider `team/nope` to `target`".into(),
            call: attach("target", "team/nope"),
            expect: Expect::Status(Code::NotFound, words(&[r#"provider "nope" not found in workspace "team""#])),
        },
        Case {
            group: "providers",
            name: "provider reference with two slashes".into(),
            input: "AttachProvider `a/b/c` to `target`".into(),
            call: attach("target", "a/b/c"),
            expect: invalid(&["provider", "WORKSPACE/NAME"]),
        },
    ]
}

/// The whole catalog, in the order of the generated document.
fn catalog() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(corpus_cases());
    cases.extend(policy_shape_cases());
    cases.extend(settings_cases());
    cases.extend(request_shape_cases());
    cases.extend(target_and_page_cases());
    cases.extend(idempotency_cases());
    cases.extend(names_cases());
    cases.extend(provider_write_cases());
    cases.extend(supervisor_cases());
    cases.extend(auth_cases());
    cases
}

// --------------------------------------------------------------- the runner

struct Fixture {
    gw: TestGateway,
    tls: TestGateway,
    api: Api,
    ids: BTreeMap<&'static str, String>,
    credentials: BTreeMap<&'static str, String>,
    /// An operation of `target`, for the calls that read one.
    operation: String,
}

impl Fixture {
    async fn new(backend: Backend) -> Self {
        let gw = TestGateway::start_with(
            TestStore::new(backend).await,
            DeliveryMode::Push,
            |config| {
                config.heartbeat_interval = HEARTBEAT;
            },
        )
        .await;
        let tls = tls_gateway().await;
        let mut api = gw.api().await;
        let mut ids = BTreeMap::new();
        let mut credentials = BTreeMap::new();
        for name in ["target", "peer", "gone"] {
            let (id, credential) = openshell_e2e::create_sandbox(&mut api, name, POLICY).await;
            ids.insert(name, id);
            credentials.insert(name, credential);
        }
        api.delete_sandbox(pb::DeleteSandboxRequest {
            sandbox: sandbox_ref("gone"),
        })
        .await
        .unwrap();
        let operation = api
            .update_config(pb::UpdateConfigRequest {
                policy_text: policy_with_port(8443),
                request_id: "used-once".into(),
                ..to_target()
            })
            .await
            .unwrap()
            .into_inner()
            .operation
            .unwrap()
            .id;
        // For `provider_write_cases`: a sandbox whose bootstrap is near its limit.
        let (full, credential) = openshell_e2e::create_sandbox(&mut api, "full", POLICY).await;
        ids.insert("full", full);
        credentials.insert("full", credential);
        let bulky = |prefix: &str| -> Vec<pb::ProviderValueInput> {
            (0..16)
                .map(|i| pb::ProviderValueInput {
                    name: format!("{prefix}_{i}"),
                    value: "x".repeat(60_000),
                    class: pb::ValueClass::NonSecret as i32,
                    expires_at: None,
                })
                .collect()
        };
        for (name, values) in [
            ("bulk", bulky("BULK")),
            ("bulk-2", bulky("BULK_TWO")),
            ("small", vec![openshell_e2e::plain_value("SMALL", "s")]),
        ] {
            api.create_provider(pb::CreateProviderRequest {
                name: name.into(),
                r#type: "generic".into(),
                values,
                ..Default::default()
            })
            .await
            .unwrap();
        }
        for name in ["bulk", "small"] {
            api.attach_provider(pb::AttachProviderRequest {
                sandbox: sandbox_ref("full"),
                provider: name.into(),
            })
            .await
            .unwrap();
        }
        let fixture = Self {
            gw,
            tls,
            api,
            ids,
            credentials,
            operation,
        };
        // A first session moves `peer` out of pending; later sessions change nothing.
        let (tx, mut rx) = fixture
            .open(&Who::SupervisorOf(Pick::Peer), &Pick::Peer, vec![], true)
            .await;
        assert!(matches!(
            next(&mut rx).await,
            Some(FromGateway::SessionAccepted(_))
        ));
        drop(tx);
        drop(rx);
        fixture.sessions_settle(0).await;
        fixture
    }

    fn id(&self, pick: &Pick) -> String {
        match pick {
            Pick::Target => self.ids["target"].clone(),
            Pick::Peer => self.ids["peer"].clone(),
            Pick::Gone => self.ids["gone"].clone(),
            Pick::Literal(text) => text.clone(),
        }
    }

    fn header(&self, who: &Who) -> Option<String> {
        match who {
            Who::Operator => Some(format!("Bearer {TOKEN}")),
            Who::Nobody => None,
            Who::Header(h) => Some((*h).to_string()),
            Who::SupervisorOf(Pick::Target) => {
                Some(format!("Bearer {}", self.credentials["target"]))
            }
            Who::SupervisorOf(Pick::Peer) => Some(format!("Bearer {}", self.credentials["peer"])),
            Who::SupervisorOf(Pick::Gone) => Some(format!("Bearer {}", self.credentials["gone"])),
            Who::SupervisorOf(Pick::Literal(text)) => Some(format!("Bearer {text}")),
        }
    }

    fn request<T>(&self, who: &Who, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(header) = self.header(who) {
            request
                .metadata_mut()
                .insert("authorization", header.parse().unwrap());
        }
        request
    }

    async fn bare(&self) -> Api {
        self.gw.api_with_token(None).await
    }

    async fn open(
        &self,
        who: &Who,
        sandbox: &Pick,
        before: Vec<pb::SupervisorMessage>,
        hello: bool,
    ) -> (
        tokio::sync::mpsc::Sender<pb::SupervisorMessage>,
        tonic::Streaming<pb::GatewayMessage>,
    ) {
        let (tx, to_gateway) = tokio::sync::mpsc::channel(64);
        let id = self.id(sandbox);
        let mut first = before;
        if hello {
            first.push(hello_frame(&id));
        }
        // The first frames go out before the call, so the gateway reads them first.
        let queued = tokio::spawn({
            let tx = tx.clone();
            async move {
                for frame in first {
                    if tx.send(frame).await.is_err() {
                        return;
                    }
                }
            }
        });
        let inbound = self
            .bare()
            .await
            .connect_supervisor(self.request(who, ReceiverStream::new(to_gateway)))
            .await
            .unwrap()
            .into_inner();
        queued.await.unwrap();
        (tx, inbound)
    }

    async fn sessions_settle(&self, expected: usize) {
        eventually("sessions to close", DEADLINE, || async {
            (self.gw.state().sessions.count() == expected).then_some(())
        })
        .await;
    }

    /// Everything a bad input must leave as it was.
    async fn snapshot(&self) -> String {
        use openshell_core::settings::Scope;
        let store = &self.gw.state().store;
        let sandboxes: Vec<_> = store
            .list_sandboxes(None, true, 1000, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|s| {
                (
                    s.id,
                    s.name,
                    s.workspace,
                    format!("{:?}", s.lifecycle),
                    s.policy_revision,
                    s.settings_revision,
                    s.attachment_epoch,
                    s.providers,
                )
            })
            .collect();
        let mut revisions = Vec::new();
        let mut settings = Vec::new();
        let mut operations = Vec::new();
        for (name, id) in &self.ids {
            revisions.push(store.policy_revision_count(id).await.unwrap());
            settings.push(format!(
                "{:?}",
                store.settings_at(Scope::Sandbox, id).await.unwrap()
            ));
            let listed = self
                .api
                .clone()
                .list_operations(pb::ListOperationsRequest {
                    sandbox: sandbox_ref(id),
                    page_size: 1000,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            for op in listed.operations {
                operations.push((*name, op.id, op.state, op.outcome, op.error));
            }
        }
        settings.push(format!(
            "{:?}",
            store.settings_at(Scope::Global, "").await.unwrap()
        ));
        settings.push(format!(
            "{:?}",
            store
                .settings_at(Scope::Workspace, "default")
                .await
                .unwrap()
        ));
        let providers: Vec<_> = store
            .list_providers(None)
            .await
            .unwrap()
            .into_iter()
            .map(|p| (p.name, p.workspace, p.revision))
            .collect();
        format!(
            "sandboxes {sandboxes:?}\nrevisions {revisions:?}\nglobal policy {}\noperations {} {operations:?}\nsettings {settings:?}\nproviders {providers:?}\nsessions {}",
            store.global_policy().await.unwrap().0,
            store.count_operations().await.unwrap(),
            self.gw.state().sessions.count(),
        )
    }

    async fn run(&self, case: &Case) -> Outcome {
        let mut api = self.bare().await;
        let result = match &case.call {
            Call::Update(who, request) => api
                .update_config(self.request(who, (**request).clone()))
                .await
                .map(drop),
            Call::CreateSandbox(request) => api
                .create_sandbox(self.request(&Who::Operator, request.clone()))
                .await
                .map(drop),
            Call::CreateProvider(request) => api
                .create_provider(self.request(&Who::Operator, request.clone()))
                .await
                .map(drop),
            Call::UpdateProvider(request) => api
                .update_provider(self.request(&Who::Operator, request.clone()))
                .await
                .map(drop),
            Call::AttachProvider(request) => api
                .attach_provider(self.request(&Who::Operator, request.clone()))
                .await
                .map(drop),
            Call::GetSandbox(sandbox) => api
                .get_sandbox(self.request(
                    &Who::Operator,
                    pb::GetSandboxRequest {
                        name: sandbox.id_or_name.clone(),
                        workspace_scope: None,
                    },
                ))
                .await
                .map(drop),
            Call::GetOperation(id) => api
                .get_operation(
                    self.request(&Who::Operator, pb::GetOperationRequest { id: id.clone() }),
                )
                .await
                .map(drop),
            Call::ListSandboxes(request) => api
                .list_sandboxes(self.request(&Who::Operator, request.clone()))
                .await
                .map(drop),
            Call::ListOperations(request) => api
                .list_operations(self.request(&Who::Operator, request.clone()))
                .await
                .map(drop),
            Call::ListOperationTargets(request) => api
                .list_operation_targets(self.request(
                    &Who::Operator,
                    pb::ListOperationTargetsRequest {
                        operation_id: self.operation.clone(),
                        ..request.clone()
                    },
                ))
                .await
                .map(drop),
            Call::ListSandboxPolicies(request) => api
                .list_sandbox_policies(self.request(&Who::Operator, request.clone()))
                .await
                .map(drop),
            Call::GatewayInfo(who) => api
                .get_gateway_info(self.request(who, pb::GetGatewayInfoRequest {}))
                .await
                .map(drop),
            Call::SandboxConfig(who, sandbox) => api
                .get_sandbox_config(self.request(
                    who,
                    openshell_proto::sandbox::v1::GetSandboxConfigRequest {
                        sandbox_id: self.id(sandbox),
                    },
                ))
                .await
                .map(drop),
            Call::ReportPolicyStatus(who, sandbox, revisions) => api
                .report_policy_status(self.request(
                    who,
                    pb::ReportPolicyStatusRequest {
                        sandbox_id: self.id(sandbox),
                        version: 1,
                        status: pb::PolicyStatus::Loaded as i32,
                        load_status: if revisions.is_some() {
                            pb::PolicyLoadStatus::Loaded as i32
                        } else {
                            pb::PolicyLoadStatus::Unspecified as i32
                        },
                        revisions: revisions.clone(),
                        ..Default::default()
                    },
                ))
                .await
                .map(drop),
            Call::Session(session) => return self.run_session(session).await,
            Call::PlaintextToTls => return self.plaintext_to_tls().await,
        };
        match result {
            Ok(()) => Outcome::Accepted,
            Err(status) => Outcome::Status(status),
        }
    }

    async fn run_session(&self, session: &Session) -> Outcome {
        let (tx, mut rx) = self
            .open(
                &session.who,
                &session.sandbox,
                session.before_hello.clone(),
                session.hello,
            )
            .await;
        let outcome = if session.hello && session.before_hello.is_empty() {
            match next(&mut rx).await {
                Some(FromGateway::SessionAccepted(_)) => {
                    for frame in &session.after_hello {
                        if tx.send(frame.clone()).await.is_err() {
                            break;
                        }
                    }
                    if session.after_hello.is_empty() {
                        // The silent session: wait for the gateway to give up on it.
                        until_rejected(&mut rx).await
                    } else {
                        // Anything ignored: the session must still be heartbeating.
                        tx.send(heartbeat_frame()).await.ok();
                        let seen = until_heartbeat_or_rejected(&mut rx).await;
                        if matches!(seen, Outcome::Ignored) {
                            assert_eq!(
                                self.gw.state().sessions.count(),
                                1,
                                "the session is still registered"
                            );
                        }
                        seen
                    }
                }
                Some(FromGateway::SessionRejected(r)) => {
                    Outcome::Rejected(r.reason, rx.message().await.ok().flatten().is_none())
                }
                other => panic!("unexpected first frame {other:?}"),
            }
        } else {
            until_rejected(&mut rx).await
        };
        drop(tx);
        drop(rx);
        self.sessions_settle(0).await;
        outcome
    }

    async fn plaintext_to_tls(&self) -> Outcome {
        // A gRPC client configured with http:// for a gateway that serves TLS.
        let mut plaintext =
            openshell_e2e::chaos::lazy_api(&format!("http://{}", self.tls.handle.addr));
        let outcome = match plaintext
            .get_gateway_info(pb::GetGatewayInfoRequest {})
            .await
        {
            Ok(_) => Outcome::Accepted,
            Err(status) => Outcome::Status(status),
        };
        // The TLS listener still serves TLS clients.
        let client = openshell_sdk::Client::connect(
            openshell_sdk::ClientOptions::new(format!(
                "https://localhost:{}",
                self.tls.handle.addr.port()
            ))
            .with_token(TOKEN)
            .with_ca_cert_pem(std::fs::read(self.tls.store.dir.path().join("cert.pem")).unwrap()),
        )
        .await
        .unwrap();
        client.gateway_info().await.unwrap();
        outcome
    }
}

/// What a case got back.
#[derive(Debug)]
enum Outcome {
    Accepted,
    Status(tonic::Status),
    /// A `SessionRejected` reason, and whether the stream ended after it.
    Rejected(String, bool),
    Ignored,
}

async fn next(inbound: &mut tonic::Streaming<pb::GatewayMessage>) -> Option<FromGateway> {
    tokio::time::timeout(DEADLINE, inbound.message())
        .await
        .expect("the gateway says something within the deadline")
        .ok()
        .flatten()
        .and_then(|m| m.payload)
}

async fn until_rejected(rx: &mut tonic::Streaming<pb::GatewayMessage>) -> Outcome {
    loop {
        match next(rx).await {
            Some(FromGateway::SessionRejected(r)) => {
                let ended = next(rx).await.is_none();
                return Outcome::Rejected(r.reason, ended);
            }
            Some(_) => {}
            None => {
                return Outcome::Rejected(
                    "(the stream ended without a SessionRejected)".into(),
                    true,
                );
            }
        }
    }
}

async fn until_heartbeat_or_rejected(rx: &mut tonic::Streaming<pb::GatewayMessage>) -> Outcome {
    loop {
        match next(rx).await {
            Some(FromGateway::Heartbeat(_)) => return Outcome::Ignored,
            Some(FromGateway::SessionRejected(r)) => {
                let ended = next(rx).await.is_none();
                return Outcome::Rejected(r.reason, ended);
            }
            Some(_) => {}
            None => {
                return Outcome::Rejected(
                    "(the stream ended without a SessionRejected)".into(),
                    true,
                );
            }
        }
    }
}

async fn tls_gateway() -> TestGateway {
    let store = TestStore::new(Backend::Sqlite).await;
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_path, key_path) = (
        store.dir.path().join("cert.pem"),
        store.dir.path().join("key.pem"),
    );
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    TestGateway::start_with(store, DeliveryMode::Poll, |config| {
        config.tls = Some(openshell_gateway::config::TlsFiles {
            cert: cert_path,
            key: key_path,
        });
    })
    .await
}

/// What is wrong with an outcome, if anything.
fn check(case: &Case, outcome: &Outcome) -> Option<String> {
    let name = &case.name;
    let missing = |text: &str, needles: &[String]| {
        needles
            .iter()
            .find(|n| !text.contains(n.as_str()))
            .map(|n| format!("{name}: {text:?} should contain {n:?}"))
    };
    match (&case.expect, outcome) {
        (Expect::Status(code, needles), Outcome::Status(status)) => {
            if status.code() != *code {
                return Some(format!(
                    "{name}: code {:?}, expected {code:?}: {}",
                    status.code(),
                    status.message()
                ));
            }
            missing(status.message(), needles)
        }
        (Expect::Rejected(needles), Outcome::Rejected(reason, ended)) => {
            if !ended {
                return Some(format!("{name}: the stream goes on after SessionRejected"));
            }
            missing(reason, needles)
        }
        (Expect::Ignored, Outcome::Ignored) => None,
        (_, got) => Some(format!("{name}: got {got:?}")),
    }
}

async fn every_bad_input_is_refused_and_changes_nothing(backend: Backend) {
    let fixture = Fixture::new(backend).await;
    let cases = catalog();
    assert!(cases.len() >= 100, "only {} cases", cases.len());
    let mut before = fixture.snapshot().await;
    let mut api = fixture.api.clone();
    let mut failures = Vec::new();
    for case in &cases {
        let outcome = fixture.run(case).await;
        failures.extend(check(case, &outcome));
        let after = fixture.snapshot().await;
        if after != before {
            failures.push(format!(
                "{}: state changed\nbefore: {before}\nafter:  {after}",
                case.name
            ));
            before = after;
        }
        if let Err(e) = api.get_gateway_info(pb::GetGatewayInfoRequest {}).await {
            panic!("{}: the gateway stopped serving: {e}", case.name);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ------------------------------------------------------ the generated document

fn expected_code(expect: &Expect) -> String {
    match expect {
        Expect::Status(code, _) => format!("`{code:?}`"),
        Expect::Rejected(_) => "`Ok`, `SessionRejected`".into(),
        Expect::Ignored => "`Ok`, ignored; session continues".into(),
    }
}

fn expected_words(expect: &Expect) -> String {
    let list = match expect {
        Expect::Status(_, needles) | Expect::Rejected(needles) => needles.clone(),
        Expect::Ignored => Vec::new(),
    };
    if list.is_empty() {
        return "—".into();
    }
    list.iter()
        .map(|w| format!("`{}`", short(w).replace('|', "\\|").replace('`', "'")))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn render() -> String {
    let cases = catalog();
    let mut out = String::from(
        "# Bad inputs\n\n\
         <!-- Generated from e2e/tests/bad_inputs.rs; do not edit. -->\n\n\
         Every request below is refused by the gateway, on SQLite and on PostgreSQL, and leaves \
         everything as it was: policy revisions, operations and their states, settings of every \
         scope, sandboxes, providers and supervisor sessions. After each one the gateway answers \
         the next request. The end-to-end test `e2e/tests/bad_inputs.rs` runs the catalog against \
         a real gateway over gRPC; this page is generated from its table.\n\n\
         A refused supervisor session is a `ConnectSupervisor` call that returns `Ok` with a \
         `SessionRejected` frame carrying the reason, then ends. A frame the protocol tolerates \
         (an ack for a delivery the session never sent, a result nobody asked for) is ignored and \
         the session keeps heartbeating; a frame no supervisor sends (a second hello, a startup \
         frame after acceptance) ends the session with a protocol error. The policy rules are core's rejected corpus \
         (`core/tests/corpus/rejected`), one document per validation rule, each refused at the \
         field paths listed in `rejected.tsv`.\n\n",
    );
    out.push_str(&format!(
        "Regenerate after changing the table:\n\n```sh\n{REGENERATE}\n```\n"
    ));
    let mut group = "";
    for case in &cases {
        if case.group != group {
            group = case.group;
            let count = cases.iter().filter(|c| c.group == group).count();
            out.push_str(&format!(
                "\n## {} ({count})\n\n| Case | Input | Code | The message names |\n|---|---|---|---|\n",
                group[..1].to_uppercase() + &group[1..]
            ));
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            cell(&case.name),
            cell(&case.input),
            expected_code(&case.expect),
            expected_words(&case.expect)
        ));
    }
    out.push_str(&format!("\n{} cases in all.\n", cases.len()));
    out
}

#[test]
fn the_catalog_document_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(DOC_PATH);
    let fresh = render();
    if std::env::var_os("OPENSHELL_REGENERATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{DOC_PATH} is stale: it no longer matches the catalog in e2e/tests/bad_inputs.rs.\nRegenerate it from the workspace root with:\n  {REGENERATE}"
    );
}
