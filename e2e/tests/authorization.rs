//! Authorization by role and workspace, end to end: every operator call of
//! the service, made with a token of every role (viewer, operator, admin)
//! and every workspace scope (none, the target's, another), is allowed or
//! refused PERMISSION_DENIED naming the permission it lacks; on SQLite and
//! PostgreSQL. Then tokens through the CLI: created (the secret shown once),
//! listed (never the secret), revoked (refused on the next call), and the
//! token's name recorded as the caller of the operations it makes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use openshell_e2e::cli::openshell;
use openshell_e2e::process::{free_port, spawn_gateway};
use openshell_e2e::{Api, Backend, POLICY, TOKEN, TestGateway, raw_setting, workspace_scope};
use openshell_gateway::authz::{Permission, RPC_PERMISSIONS, Role};
use openshell_proto::datamodel::v1::workspace_selector::Selection;
use openshell_proto::datamodel::v1::{AllWorkspaces, WorkspaceSelector};
use openshell_proto::v1 as pb;
use tonic::{Code, Status};

/// The workspace every target of the matrix lives in.
const TEAM: &str = "team";
/// Another workspace, for the tokens scoped elsewhere.
const OTHER: &str = "other";

/// Where a call's target lies, which decides what a scoped token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In workspace `team`.
    Team,
    /// Nowhere in particular (the gateway, the settings registry, global
    /// settings, lists a scoped token sees only its part of).
    Anywhere,
    /// Every workspace: only a token without a workspace.
    Global,
}

/// One call of the matrix: the method, what it needs, and where it points.
struct Case {
    /// The method of service `OpenShell` it calls.
    rpc: &'static str,
    /// A variant of the call, when the method is tried more than one way.
    variant: &'static str,
    permission: &'static str,
    least: Role,
    place: Place,
}

const fn case(
    rpc: &'static str,
    variant: &'static str,
    permission: &'static str,
    least: Role,
    place: Place,
) -> Case {
    Case {
        rpc,
        variant,
        permission,
        least,
        place,
    }
}

const CASES: &[Case] = &[
    case(
        "CreateSandbox",
        "",
        "sandbox.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "GetSandbox",
        "by name",
        "sandbox.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "GetSandbox",
        "by id",
        "sandbox.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "ListSandboxes",
        "",
        "sandbox.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "DeleteSandbox",
        "",
        "sandbox.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "SetSandboxLifecycle",
        "",
        "sandbox.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "CreateProvider",
        "",
        "provider.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "UpdateProvider",
        "",
        "provider.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "DeleteProvider",
        "",
        "provider.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "GetProvider",
        "",
        "provider.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "ListProviders",
        "",
        "provider.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "AttachProvider",
        "",
        "attachment.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "DetachProvider",
        "",
        "attachment.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "GetSandboxPolicy",
        "",
        "sandbox.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "ListSandboxPolicies",
        "",
        "sandbox.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "GetSandboxPolicyStatus",
        "",
        "sandbox.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "GetSettings",
        "sandbox",
        "settings.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "GetSettings",
        "workspace",
        "settings.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "GetSettings",
        "global",
        "settings.read",
        Role::Viewer,
        Place::Anywhere,
    ),
    case(
        "ListSettingDefinitions",
        "",
        "settings.read",
        Role::Viewer,
        Place::Anywhere,
    ),
    case(
        "UpdateConfig",
        "sandbox",
        "config.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "UpdateConfig",
        "workspace",
        "config.write",
        Role::Operator,
        Place::Team,
    ),
    case(
        "UpdateConfig",
        "global",
        "global.write",
        Role::Admin,
        Place::Global,
    ),
    case(
        "GetOperation",
        "sandbox",
        "operation.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "GetOperation",
        "global",
        "operation.read",
        Role::Viewer,
        Place::Global,
    ),
    case(
        "WaitForApply",
        "",
        "operation.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "ListOperations",
        "of a sandbox",
        "operation.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "ListOperations",
        "all",
        "operation.read",
        Role::Viewer,
        Place::Anywhere,
    ),
    case(
        "ListOperationTargets",
        "",
        "operation.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "ListSessions",
        "",
        "session.read",
        Role::Viewer,
        Place::Anywhere,
    ),
    case(
        "InspectSession",
        "",
        "session.read",
        Role::Viewer,
        Place::Team,
    ),
    case(
        "GetGatewayInfo",
        "",
        "gateway.read",
        Role::Viewer,
        Place::Anywhere,
    ),
    case("GetSandboxLogs", "", "logs.read", Role::Viewer, Place::Team),
    case("WatchSandbox", "", "logs.read", Role::Viewer, Place::Team),
    case(
        "CreateToken",
        "",
        "token.manage",
        Role::Admin,
        Place::Global,
    ),
    case("ListTokens", "", "token.manage", Role::Admin, Place::Global),
    case(
        "RevokeToken",
        "",
        "token.manage",
        Role::Admin,
        Place::Global,
    ),
];

/// What the matrix expects: the role holds the permission, and a scoped
/// token's workspace is the target's (or the target is in none).
fn allowed(role: Role, scope: Option<&str>, case: &Case) -> bool {
    role >= case.least
        && match case.place {
            Place::Anywhere => true,
            Place::Team => scope.is_none_or(|ws| ws == TEAM),
            Place::Global => scope.is_none(),
        }
}

fn sandbox_in(workspace: &str, id_or_name: &str) -> Option<pb::SandboxRef> {
    Some(pb::SandboxRef {
        id_or_name: id_or_name.into(),
        workspace: workspace.into(),
    })
}

/// What every cell needs: a sandbox and a provider of `team`, an operation
/// of that sandbox and a global one.
struct Fixture {
    admin: Api,
    sandbox_id: String,
    sandbox_op: String,
    global_op: String,
}

impl Fixture {
    async fn new(gateway: &TestGateway) -> Self {
        let mut admin = gateway.api().await;
        let created = create_in_team(&mut admin, "shared").await;
        admin
            .create_provider(provider_request("shared-pv"))
            .await
            .unwrap();
        let global_op = admin
            .update_config(pb::UpdateConfigRequest {
                settings: vec![raw_setting("log_level", "info")],
                ..openshell_e2e::to_global()
            })
            .await
            .unwrap()
            .into_inner()
            .operation
            .unwrap()
            .id;
        Self {
            admin,
            sandbox_id: created.sandbox.unwrap().id().to_string(),
            sandbox_op: created.operation.unwrap().id,
            global_op,
        }
    }
}

async fn create_in_team(api: &mut Api, name: &str) -> pb::CreateSandboxResponse {
    api.create_sandbox(pb::CreateSandboxRequest {
        name: name.into(),
        workspace: TEAM.into(),
        policy: POLICY.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

fn provider_request(name: &str) -> pb::CreateProviderRequest {
    pb::CreateProviderRequest {
        name: name.into(),
        workspace: TEAM.into(),
        r#type: "github".into(),
        values: vec![pb::ProviderValueInput {
            name: "GITHUB_ORG".into(),
            value: "acme".into(),
            class: pb::ValueClass::NonSecret as i32,
            expires_at: None,
        }],
        expires_at: None,
    }
}

/// Makes `case`'s call with `api`; `cell` names what this cell creates, so
/// no two cells touch the same sandbox, provider or token by mistake.
async fn call(fx: &mut Fixture, api: &mut Api, case: &Case, cell: &str) -> Result<(), Status> {
    let shared = || sandbox_in(TEAM, "shared");
    match (case.rpc, case.variant) {
        ("CreateSandbox", _) => {
            api.create_sandbox(pb::CreateSandboxRequest {
                name: cell.into(),
                workspace: TEAM.into(),
                policy: String::new(),
            })
            .await?;
        }
        ("GetSandbox", "by name") => {
            api.get_sandbox(pb::GetSandboxRequest {
                name: "shared".into(),
                workspace_scope: workspace_scope(TEAM),
            })
            .await?;
        }
        ("GetSandbox", _) => {
            // By id, with no workspace named: the sandbox's own workspace counts.
            api.get_sandbox(pb::GetSandboxRequest {
                name: fx.sandbox_id.clone(),
                workspace_scope: None,
            })
            .await?;
        }
        ("ListSandboxes", _) => {
            api.list_sandboxes(pb::ListSandboxesRequest {
                workspace_scope: workspace_scope(TEAM),
                ..Default::default()
            })
            .await?;
        }
        ("DeleteSandbox", _) => {
            create_in_team(&mut fx.admin, cell).await;
            api.delete_sandbox(pb::DeleteSandboxRequest {
                sandbox: sandbox_in(TEAM, cell),
            })
            .await?;
        }
        ("SetSandboxLifecycle", _) => {
            create_in_team(&mut fx.admin, cell).await;
            api.set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
                sandbox: sandbox_in(TEAM, cell),
                lifecycle: pb::SandboxLifecycle::Stopped as i32,
            })
            .await?;
        }
        ("CreateProvider", _) => {
            api.create_provider(provider_request(cell)).await?;
        }
        ("UpdateProvider", _) => {
            api.update_provider(pb::UpdateProviderRequest {
                provider: "shared-pv".into(),
                workspace: TEAM.into(),
                values: provider_request("x").values,
                expires_at: None,
            })
            .await?;
        }
        ("DeleteProvider", _) => {
            fx.admin.create_provider(provider_request(cell)).await?;
            api.delete_provider(pb::DeleteProviderRequest {
                provider: cell.into(),
                workspace: TEAM.into(),
            })
            .await?;
        }
        ("GetProvider", _) => {
            api.get_provider(pb::GetProviderRequest {
                provider: "shared-pv".into(),
                workspace: TEAM.into(),
            })
            .await?;
        }
        ("ListProviders", _) => {
            api.list_providers(pb::ListProvidersRequest {
                workspace: TEAM.into(),
            })
            .await?;
        }
        ("AttachProvider", _) => {
            create_in_team(&mut fx.admin, cell).await;
            api.attach_provider(pb::AttachProviderRequest {
                sandbox: sandbox_in(TEAM, cell),
                provider: "shared-pv".into(),
            })
            .await?;
        }
        ("DetachProvider", _) => {
            create_in_team(&mut fx.admin, cell).await;
            fx.admin
                .attach_provider(pb::AttachProviderRequest {
                    sandbox: sandbox_in(TEAM, cell),
                    provider: "shared-pv".into(),
                })
                .await?;
            api.detach_provider(pb::DetachProviderRequest {
                sandbox: sandbox_in(TEAM, cell),
                provider: "shared-pv".into(),
            })
            .await?;
        }
        ("GetSandboxPolicy", _) => {
            api.get_sandbox_policy(pb::GetSandboxPolicyRequest {
                sandbox: shared(),
                revision: 0,
                global: false,
            })
            .await?;
        }
        ("ListSandboxPolicies", _) => {
            api.list_sandbox_policies(pb::ListSandboxPoliciesRequest {
                sandbox: "shared".into(),
                workspace_scope: openshell_e2e::workspace_scope(TEAM),
                ..Default::default()
            })
            .await?;
        }
        ("GetSandboxPolicyStatus", _) => {
            api.get_sandbox_policy_status(pb::GetSandboxPolicyStatusRequest {
                sandbox: "shared".into(),
                workspace_scope: workspace_scope(TEAM),
                version: 1,
                ..Default::default()
            })
            .await?;
        }
        ("GetSettings", variant) => {
            let request = match variant {
                "sandbox" => pb::GetSettingsRequest {
                    scope: pb::SettingScope::Sandbox as i32,
                    sandbox: shared(),
                    workspace: String::new(),
                },
                "workspace" => pb::GetSettingsRequest {
                    scope: pb::SettingScope::Workspace as i32,
                    sandbox: None,
                    workspace: TEAM.into(),
                },
                _ => pb::GetSettingsRequest {
                    scope: pb::SettingScope::Global as i32,
                    ..Default::default()
                },
            };
            api.get_settings(request).await?;
        }
        ("ListSettingDefinitions", _) => {
            api.list_setting_definitions(pb::ListSettingDefinitionsRequest {})
                .await?;
        }
        ("UpdateConfig", variant) => {
            let target = match variant {
                "sandbox" => pb::UpdateConfigRequest {
                    sandbox: "shared".into(),
                    workspace_scope: openshell_e2e::workspace_scope(TEAM),
                    ..Default::default()
                },
                "workspace" => openshell_e2e::to_workspace(TEAM),
                _ => openshell_e2e::to_global(),
            };
            api.update_config(pb::UpdateConfigRequest {
                settings: vec![raw_setting("log_level", "warn")],
                ..target
            })
            .await?;
        }
        ("GetOperation", variant) => {
            let id = if variant == "global" {
                fx.global_op.clone()
            } else {
                fx.sandbox_op.clone()
            };
            api.get_operation(pb::GetOperationRequest { id }).await?;
        }
        ("WaitForApply", _) => {
            api.wait_for_apply(pb::WaitForApplyRequest {
                id: fx.sandbox_op.clone(),
                wait: openshell_e2e::wait_for(std::time::Duration::from_secs(1)),
            })
            .await?;
        }
        ("ListOperations", variant) => {
            let sandbox = (variant != "all").then(shared).flatten();
            api.list_operations(pb::ListOperationsRequest {
                sandbox,
                ..Default::default()
            })
            .await?;
        }
        ("ListOperationTargets", _) => {
            api.list_operation_targets(pb::ListOperationTargetsRequest {
                operation_id: fx.sandbox_op.clone(),
                ..Default::default()
            })
            .await?;
        }
        ("ListSessions", _) => {
            api.list_sessions(pb::ListSessionsRequest {}).await?;
        }
        ("InspectSession", _) => {
            api.inspect_session(pb::InspectSessionRequest { sandbox: shared() })
                .await?;
        }
        ("GetGatewayInfo", _) => {
            api.get_gateway_info(pb::GetGatewayInfoRequest {}).await?;
        }
        ("GetSandboxLogs", _) => {
            api.get_sandbox_logs(pb::GetSandboxLogsRequest {
                sandbox_id: "shared".into(),
                workspace: TEAM.into(),
                ..Default::default()
            })
            .await?;
        }
        ("WatchSandbox", _) => {
            api.watch_sandbox(pb::WatchSandboxRequest {
                id: "shared".into(),
                workspace: TEAM.into(),
                follow_logs: true,
                ..Default::default()
            })
            .await?;
        }
        ("CreateToken", _) => {
            api.create_token(pb::CreateTokenRequest {
                name: cell.into(),
                role: pb::TokenRole::Viewer as i32,
                workspace: String::new(),
            })
            .await?;
        }
        ("ListTokens", _) => {
            api.list_tokens(pb::ListTokensRequest {}).await?;
        }
        ("RevokeToken", _) => {
            fx.admin
                .create_token(pb::CreateTokenRequest {
                    name: cell.into(),
                    role: pb::TokenRole::Viewer as i32,
                    workspace: String::new(),
                })
                .await?;
            api.revoke_token(pb::RevokeTokenRequest { name: cell.into() })
                .await?;
        }
        (rpc, variant) => panic!("no call for case {rpc} {variant}"),
    }
    Ok(())
}

fn pb_role(role: Role) -> pb::TokenRole {
    match role {
        Role::Viewer => pb::TokenRole::Viewer,
        Role::Operator => pb::TokenRole::Operator,
        Role::Admin => pb::TokenRole::Admin,
    }
}

fn method_permission(rpc: &str) -> Permission {
    RPC_PERMISSIONS
        .iter()
        .find(|(m, _)| *m == rpc)
        .map(|(_, p)| *p)
        .unwrap()
}

#[test]
fn the_matrix_calls_every_operator_method() {
    let covered: BTreeSet<&str> = CASES.iter().map(|c| c.rpc).collect();
    let methods: BTreeSet<&str> = RPC_PERMISSIONS.iter().map(|(m, _)| *m).collect();
    assert_eq!(covered, methods);
    // The cases name each method's permission as the gateway's table does
    // (UpdateConfig of the global scope needs global.write besides).
    for case in CASES {
        let permission = method_permission(case.rpc);
        let global_write = case.rpc == "UpdateConfig" && case.variant == "global";
        assert!(
            global_write || permission.as_str() == case.permission,
            "{} {}",
            case.rpc,
            case.variant
        );
    }
}

async fn matrix(backend: Backend) {
    let gateway = TestGateway::start(backend).await;
    let mut fx = Fixture::new(&gateway).await;
    let mut cells = 0;
    let mut denied = 0;
    for role in Role::ALL {
        for scope in [None, Some(TEAM), Some(OTHER)] {
            let name = format!("{}-{}", role.as_str(), scope.unwrap_or("all"));
            let created = fx
                .admin
                .create_token(pb::CreateTokenRequest {
                    name: name.clone(),
                    role: pb_role(role) as i32,
                    workspace: scope.unwrap_or_default().into(),
                })
                .await
                .unwrap()
                .into_inner();
            let mut api = gateway.api_with_token(Some(&created.secret)).await;
            for (i, case) in CASES.iter().enumerate() {
                let cell = format!("c{i}-{name}");
                let what = format!(
                    "{} {} with token {name} (role {role}, workspace {scope:?})",
                    case.rpc, case.variant
                );
                let result = call(&mut fx, &mut api, case, &cell).await;
                cells += 1;
                if allowed(role, scope, case) {
                    if let Err(status) = result {
                        panic!("{what}: expected allowed, got {status:?}");
                    }
                } else {
                    denied += 1;
                    let status = result.expect_err(&format!("{what}: expected PERMISSION_DENIED"));
                    assert_eq!(status.code(), Code::PermissionDenied, "{what}: {status:?}");
                    // The method's own permission is checked first, then the target's.
                    let method_permission = method_permission(case.rpc);
                    let missing = if role.allows(method_permission) {
                        case.permission
                    } else {
                        method_permission.as_str()
                    };
                    let expected = format!(
                        "token '{name}' (role {role}{}) lacks permission {missing}",
                        scope.map_or(String::new(), |ws| format!(", workspace '{ws}'")),
                    );
                    assert!(
                        status.message().starts_with(&expected),
                        "{what}: {:?} does not start with {expected:?}",
                        status.message()
                    );
                }
            }
        }
    }
    assert_eq!(cells, 9 * CASES.len());
    assert!(denied > cells / 3, "{denied} of {cells} denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix_on_sqlite() {
    matrix(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix_on_postgres() {
    matrix(Backend::Postgres).await;
}

/// A token limited to a workspace sees only that workspace in lists, and
/// named targets of another workspace are refused before they are looked
/// up, so it cannot tell which names exist there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_token_lists_only_its_workspace() {
    let gateway = TestGateway::start(Backend::Sqlite).await;
    let mut admin = gateway.api().await;
    create_in_team(&mut admin, "mine").await;
    let theirs = admin
        .create_sandbox(pb::CreateSandboxRequest {
            name: "theirs".into(),
            workspace: OTHER.into(),
            policy: POLICY.into(),
        })
        .await
        .unwrap()
        .into_inner();
    admin
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting("log_level", "warn")],
            ..openshell_e2e::to_global()
        })
        .await
        .unwrap();
    let secret = admin
        .create_token(pb::CreateTokenRequest {
            name: "team-viewer".into(),
            role: pb::TokenRole::Viewer as i32,
            workspace: TEAM.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .secret;
    let mut viewer = gateway.api_with_token(Some(&secret)).await;

    let listed = viewer
        .list_sandboxes(pb::ListSandboxesRequest {
            workspace_scope: Some(WorkspaceSelector {
                selection: Some(Selection::AllWorkspaces(AllWorkspaces {})),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.sandboxes.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["mine"]);

    // Its operations: the sandbox's policy operation, not the other
    // workspace's, nor the global one.
    let ops = viewer
        .list_operations(pb::ListOperationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .operations;
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].target_kind, pb::TargetKind::Sandbox as i32);
    let all = admin
        .list_operations(pb::ListOperationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .operations;
    assert_eq!(all.len(), 3, "{all:?}");

    // A name of another workspace is refused, whether it exists or not.
    for name in ["theirs", "nobody"] {
        let err = viewer
            .get_sandbox(pb::GetSandboxRequest {
                name: name.into(),
                workspace_scope: workspace_scope(OTHER),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{name}: {err:?}");
    }
    // By id, the sandbox's own workspace decides.
    let err = viewer
        .get_sandbox(pb::GetSandboxRequest {
            name: theirs.sandbox.unwrap().id().to_string(),
            workspace_scope: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().ends_with("on workspace 'other'"), "{err:?}");
    // Its operation too.
    let err = viewer
        .get_operation(pb::GetOperationRequest {
            id: theirs.operation.unwrap().id,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
}

/// A configured token without a role is an admin of every workspace; one
/// with a role and workspace in the configuration is held to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_tokens_keep_working_and_may_carry_a_role() {
    let store = openshell_e2e::TestStore::new(Backend::Sqlite).await;
    let gateway = TestGateway::start_with(store, openshell_gateway::DeliveryMode::Poll, |config| {
        config
            .operator_tokens
            .push(openshell_gateway::config::OperatorToken {
                name: "dash".into(),
                token: openshell_core::Secret::new("dash-secret-0123456789"),
                role: Role::Viewer,
                workspace: Some(TEAM.into()),
            });
    })
    .await;
    let mut admin = gateway.api().await;
    admin
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting("log_level", "warn")],
            ..openshell_e2e::to_global()
        })
        .await
        .unwrap();
    let mut dash = gateway.api_with_token(Some("dash-secret-0123456789")).await;
    let err = dash
        .create_sandbox(pb::CreateSandboxRequest {
            name: "x".into(),
            workspace: TEAM.into(),
            policy: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(
        err.message(),
        "token 'dash' (role viewer, workspace 'team') lacks permission sandbox.write"
    );
    // Configured tokens are listed with their role, and cannot be revoked here.
    let tokens = admin
        .list_tokens(pb::ListTokensRequest {})
        .await
        .unwrap()
        .into_inner()
        .tokens;
    let listed: Vec<(&str, i32, &str, &str)> = tokens
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.role,
                t.workspace.as_str(),
                t.source.as_str(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("dash", pb::TokenRole::Viewer as i32, TEAM, "config"),
            ("operator", pb::TokenRole::Admin as i32, "", "config"),
        ]
    );
    let err = admin
        .revoke_token(pb::RevokeTokenRequest {
            name: "dash".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let err = admin
        .create_token(pb::CreateTokenRequest {
            name: "dash".into(),
            role: pb::TokenRole::Viewer as i32,
            workspace: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
}

/// Tokens through the CLI against a gateway process: the secret is printed
/// by `create` only, never by `list` nor into the gateway's log; the token
/// works, its name is the caller of its operations (`operations get`), and
/// once revoked its next call is UNAUTHENTICATED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_created_listed_and_revoked_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let admin_token = format!("admin={TOKEN}");
    let gateway = spawn_gateway(
        &[
            "--listen",
            &listen,
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--operator-token",
            &admin_token,
            "--metrics-listen",
            "off",
            "--log",
            "debug",
        ],
        &[],
        dir.path().join("gateway.log"),
        port,
    );
    let endpoint = format!("http://{listen}");

    let created = openshell(
        &endpoint,
        &[
            "token", "create", "deployer", "--role", "operator", "-o", "json",
        ],
        None,
    )
    .await;
    created.expect(0);
    let created = created.json();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("ost_"), "{created}");
    assert_eq!(created["token"]["role"], "OPERATOR");
    assert_eq!(created["token"]["created_by"], "admin");
    // The table shows it once too, saying so.
    let shown = openshell(
        &endpoint,
        &[
            "token",
            "create",
            "reader",
            "--role",
            "viewer",
            "--workspace",
            "team",
        ],
        None,
    )
    .await;
    shown.expect(0);
    assert!(shown.stdout.contains("shown only now"), "{}", shown.stdout);

    for format in ["table", "wide", "json", "yaml"] {
        let listed = openshell(&endpoint, &["token", "list", "-o", format], None).await;
        listed.expect(0);
        assert!(
            !listed.stdout.contains(&secret),
            "{format}: {}",
            listed.stdout
        );
        assert!(
            listed.stdout.contains("deployer"),
            "{format}: {}",
            listed.stdout
        );
        assert!(
            listed.stdout.contains("reader"),
            "{format}: {}",
            listed.stdout
        );
    }
    let table = openshell(&endpoint, &["token", "list"], None).await;
    let deployer = table
        .stdout
        .lines()
        .find(|l| l.starts_with("deployer"))
        .unwrap();
    assert!(
        deployer.contains("operator") && deployer.contains("store"),
        "{deployer}"
    );

    // The new token writes, and its operations name it.
    let with_secret = |args: &[&str]| {
        let mut all = vec!["--token", secret.as_str()];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    let args = with_secret(&["sandbox", "create", "web", "-o", "json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    openshell(&endpoint, &args, None).await.expect(0);
    let args = with_secret(&[
        "settings",
        "set",
        "--sandbox",
        "web",
        "log_level=warn",
        "-o",
        "json",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let set = openshell(&endpoint, &args, None).await;
    set.expect(0);
    let op_id = set.json()["operation"]["id"].as_str().unwrap().to_string();
    let got = openshell(
        &endpoint,
        &["operations", "get", &op_id, "-o", "json"],
        None,
    )
    .await;
    got.expect(0);
    assert_eq!(got.json()["caller"], "deployer");
    let got = openshell(&endpoint, &["operations", "get", &op_id], None).await;
    assert!(
        got.stdout
            .lines()
            .any(|l| l.starts_with("caller") && l.contains("deployer")),
        "{}",
        got.stdout
    );
    // Its role stops it at the global scope.
    let args = with_secret(&["settings", "set", "--global", "log_level=warn", "--yes"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = openshell(&endpoint, &args, None).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused
            .stderr
            .contains("token 'deployer' (role operator) lacks permission global.write"),
        "{}",
        refused.stderr
    );

    openshell(&endpoint, &["token", "revoke", "deployer"], None)
        .await
        .expect(0);
    let args = with_secret(&["sandbox", "get", "web"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let after = openshell(&endpoint, &args, None).await;
    assert_ne!(after.code, 0);
    assert!(after.stderr.contains("not valid"), "{}", after.stderr);
    let listed = openshell(&endpoint, &["token", "list", "-o", "json"], None).await;
    let names: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["admin", "reader"]);

    // Revoking again says what is missing; the secret was never logged.
    let again = openshell(&endpoint, &["token", "revoke", "deployer"], None).await;
    assert_ne!(again.code, 0);
    assert!(again.stderr.contains("not found"), "{}", again.stderr);
    let log = gateway.log_text();
    assert!(log.contains("operator token created"), "{log}");
    assert!(!log.contains(&secret), "the secret reached the log");
    drop(gateway);
}
