//! The walking skeleton over real gRPC on both stores: sandboxes, policy
//! revisions, durable operations, idempotency, restarts. Bad input has its own catalog
//! (`bad_inputs.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use openshell_e2e::{
    Api, Backend, POLICY, TestGateway, policy_with_port, raw_setting, sandbox_ref,
};
use openshell_proto::v1 as pb;
use tonic::Code;

macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {
        $(mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() { super::$name(openshell_e2e::Backend::Sqlite).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() { super::$name(openshell_e2e::Backend::Postgres).await }
        })+
    };
}

on_both_backends!(
    create_commit_read_and_get_operation,
    idempotency_and_no_op_writes,
    restart_keeps_sandboxes_revisions_and_operations,
    lifecycle_resolves_pending_operations,
    fleet_writes_record_their_targets,
    fleet_targets_are_the_live_sandboxes_of_the_scope,
    settings_revisions_move_only_when_a_value_changes,
);

async fn create(api: &mut Api, name: &str, policy: &str) -> pb::CreateSandboxResponse {
    api.create_sandbox(pb::CreateSandboxRequest {
        name: name.into(),
        workspace: String::new(),
        policy: policy.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

fn set_policy(name: &str, policy: &str, key: &str) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        sandbox: name.into(),
        workspace_scope: openshell_e2e::workspace_scope(String::new()),
        policy_text: policy.into(),
        mode: pb::UpdateMode::CommitOnly as i32,
        request_id: key.into(),
        ..Default::default()
    }
}

async fn create_commit_read_and_get_operation(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let created = create(&mut api, "web", "").await;
    let sandbox = created.sandbox.unwrap();
    assert!(sandbox.id().starts_with("sb-"));
    assert!(created.supervisor_credential.starts_with("osc_"));
    assert_eq!(sandbox.policy_revision, 0);

    let committed = api
        .update_config(set_policy("web", POLICY, "k-1"))
        .await
        .unwrap()
        .into_inner();
    let op = committed.operation.unwrap();
    assert_eq!(op.state, pb::OperationState::Pending as i32);
    assert_eq!(op.policy_revision, 1);
    assert_eq!(op.target, sandbox.id());
    assert!(!op.no_op);
    assert!(!committed.idempotent_replay);

    let expected_hash = openshell_core::parse_and_validate(POLICY)
        .unwrap()
        .policy_hash();
    let read = api
        .get_sandbox_policy(pb::GetSandboxPolicyRequest {
            sandbox: sandbox_ref("web"),
            revision: 0,
            global: false,
        })
        .await
        .unwrap()
        .into_inner();
    let rev = read.policy.unwrap();
    assert_eq!(rev.revision, 1);
    assert_eq!(rev.policy_hash, expected_hash);
    assert_eq!(rev.operation_id, op.id);
    // The YAML we hand back is accepted unchanged and hashes the same.
    let round_trip = openshell_core::parse_and_validate(&rev.policy_yaml).unwrap();
    assert_eq!(round_trip.policy_hash(), expected_hash);

    let fetched = api
        .get_operation(pb::GetOperationRequest { id: op.id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fetched.id, op.id);
    assert_eq!(fetched.policy_revision, 1);
    assert_eq!(fetched.caller, "operator");
    assert_eq!(fetched.idempotency_key, "k-1");

    // A second, different revision lands as 2 and shows in the history.
    let second = api
        .update_config(set_policy("web", &policy_with_port(8443), ""))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(second.policy_revision, 2);
    let history = api
        .list_sandbox_policies(pb::ListSandboxPoliciesRequest {
            sandbox: "web".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let revisions: Vec<u64> = history.revisions.iter().map(|r| r.revision).collect();
    assert_eq!(revisions, vec![2, 1]);
    let old = api
        .get_sandbox_policy(pb::GetSandboxPolicyRequest {
            sandbox: sandbox_ref("web"),
            revision: 1,
            global: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(old.policy.unwrap().policy_hash, expected_hash);

    let listed = api
        .list_operations(pb::ListOperationsRequest {
            sandbox: sandbox_ref("web"),
            states: vec![pb::OperationState::Pending as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&str> = listed.operations.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, vec![second.id.as_str(), op.id.as_str()]);
}

async fn idempotency_and_no_op_writes(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let sandbox = create(&mut api, "idem", POLICY).await.sandbox.unwrap();
    assert_eq!(sandbox.policy_revision, 1);

    let change = policy_with_port(8443);
    let first = api
        .update_config(set_policy("idem", &change, "retry-me"))
        .await
        .unwrap()
        .into_inner();
    // Same key, same request (even reformatted as JSON): the original operation, nothing written.
    let as_json = serde_json::to_string(
        &serde_json::from_str::<serde_json::Value>(
            &openshell_core::parse_and_validate(&change)
                .unwrap()
                .canonical_json(),
        )
        .unwrap(),
    )
    .unwrap();
    let replay = api
        .update_config(set_policy("idem", &as_json, "retry-me"))
        .await
        .unwrap()
        .into_inner();
    assert!(replay.idempotent_replay);
    assert_eq!(
        replay.operation.unwrap().id,
        first.operation.as_ref().unwrap().id
    );
    let count = gw
        .state()
        .store
        .policy_revision_count(sandbox.id())
        .await
        .unwrap();
    assert_eq!(count, 2);

    // Same key, different request: an error that says so, nothing written.
    let err = api
        .update_config(set_policy("idem", &policy_with_port(9443), "retry-me"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("request_id"), "{}", err.message());
    assert!(
        err.message().contains("different request"),
        "{}",
        err.message()
    );
    assert_eq!(
        gw.state()
            .store
            .policy_revision_count(sandbox.id())
            .await
            .unwrap(),
        2
    );

    // A no-op write creates no revision; its operation tracks the current one.
    let ops_before = gw.state().store.count_operations().await.unwrap();
    let no_op = api
        .update_config(set_policy("idem", &change, ""))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert!(no_op.no_op);
    assert_eq!(no_op.policy_revision, 2);
    assert_eq!(
        gw.state()
            .store
            .policy_revision_count(sandbox.id())
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        gw.state().store.count_operations().await.unwrap(),
        ops_before + 1
    );

    // Settings: a write bumps the scope revision once; repeating it is a no-op.
    let settings = |raw: &str| pb::UpdateConfigRequest {
        sandbox: "idem".into(),
        workspace_scope: openshell_e2e::workspace_scope(String::new()),
        settings: vec![pb::SettingChange {
            key: "log_level".into(),
            change: Some(pb::setting_change::Change::Raw(raw.into())),
        }],
        ..Default::default()
    };
    let op = api
        .update_config(settings("debug"))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(op.settings_revision, 1);
    assert!(!op.no_op);
    let again = api
        .update_config(settings("debug"))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert!(again.no_op);
    assert_eq!(again.settings_revision, 1);
    let read = api
        .get_settings(pb::GetSettingsRequest {
            scope: pb::SettingScope::Sandbox as i32,
            sandbox: sandbox_ref("idem"),
            workspace: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let log_level = read
        .effective
        .iter()
        .find(|s| s.key == "log_level")
        .unwrap();
    assert_eq!(log_level.scope, pb::SettingScope::Sandbox as i32);
    assert_eq!(
        log_level.value.as_ref().unwrap().kind,
        Some(pb::setting_value::Kind::StringValue("debug".into()))
    );
}

async fn restart_keeps_sandboxes_revisions_and_operations(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let sandbox = create(&mut api, "durable", POLICY).await.sandbox.unwrap();
    let op = api
        .update_config(set_policy("durable", &policy_with_port(8443), "k"))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();

    let gw = gw.restart().await;
    let mut api = gw.api().await;
    let again = api
        .get_sandbox(pb::GetSandboxRequest {
            name: "durable".to_string(),
            workspace_scope: None,
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    assert_eq!(again.id(), sandbox.id());
    assert_eq!(again.policy_revision, 2);
    let fetched = api
        .get_operation(pb::GetOperationRequest { id: op.id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fetched.state, pb::OperationState::Pending as i32);
    assert_eq!(fetched.policy_revision, 2);
    // The idempotency key survives the restart as well.
    let replay = api
        .update_config(set_policy("durable", &policy_with_port(8443), "k"))
        .await
        .unwrap()
        .into_inner();
    assert!(replay.idempotent_replay);
    assert_eq!(replay.operation.unwrap().id, op.id);
}

async fn lifecycle_resolves_pending_operations(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    create(&mut api, "doomed", POLICY).await;
    let op = api
        .update_config(set_policy("doomed", &policy_with_port(8443), ""))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    let deleted = api
        .delete_sandbox(pb::DeleteSandboxRequest {
            sandbox: sandbox_ref("doomed"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.cancelled_operations, 2);
    let fetched = api
        .get_operation(pb::GetOperationRequest { id: op.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fetched.state, pb::OperationState::Cancelled as i32);
    assert_eq!(fetched.outcome, pb::ApplyOutcome::Lifecycle as i32);
    // The name is free again; the deleted sandbox is still readable by id.
    create(&mut api, "doomed", "").await;

    create(&mut api, "paused", POLICY).await;
    api.set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
        sandbox: sandbox_ref("paused"),
        lifecycle: pb::SandboxLifecycle::Stopped as i32,
    })
    .await
    .unwrap();
    let op = api
        .update_config(set_policy("paused", &policy_with_port(8443), ""))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(op.state, pb::OperationState::Inactive as i32);
    assert!(op.error.contains("stopped"), "{}", op.error);
}

async fn fleet_writes_record_their_targets(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    for name in ["a", "b", "c"] {
        create(&mut api, name, "").await;
    }
    let op = api
        .update_config(pb::UpdateConfigRequest {
            global: true,
            settings: vec![pb::SettingChange {
                key: "log_level".into(),
                change: Some(pb::setting_change::Change::Raw("warn".into())),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(op.target_kind, pb::TargetKind::Global as i32);
    let fleet = op.fleet.unwrap();
    assert_eq!((fleet.targets, fleet.pending, fleet.applied), (3, 3, 0));
    assert_eq!(op.settings_revision, 1);

    // A global value overrides the sandbox's own, and says where it came from.
    api.update_config(pb::UpdateConfigRequest {
        sandbox: String::from("a"),
        settings: vec![pb::SettingChange {
            key: "log_level".into(),
            change: Some(pb::setting_change::Change::Raw("debug".into())),
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let read = api
        .get_settings(pb::GetSettingsRequest {
            scope: pb::SettingScope::Sandbox as i32,
            sandbox: sandbox_ref("a"),
            workspace: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let log_level = read
        .effective
        .iter()
        .find(|s| s.key == "log_level")
        .unwrap();
    assert_eq!(log_level.scope, pb::SettingScope::Global as i32);

    let ws = api
        .update_config(pb::UpdateConfigRequest {
            workspace_settings: true,
            workspace_scope: openshell_e2e::workspace_scope("default"),
            settings: vec![pb::SettingChange {
                key: "environment_label".into(),
                change: Some(pb::setting_change::Change::Raw("staging".into())),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(ws.fleet.unwrap().targets, 3);

    // Global policy: set, then clear, each a new global revision.
    let set = api
        .update_config(pb::UpdateConfigRequest {
            global: true,
            policy_text: POLICY.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(set.global_policy_revision, 1);
    let cleared = api
        .update_config(pb::UpdateConfigRequest {
            global: true,
            clear_global_policy: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(cleared.global_policy_revision, 2);
}

async fn fleet_targets_are_the_live_sandboxes_of_the_scope(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    for name in ["kept", "gone"] {
        create(&mut api, name, "").await;
    }
    api.create_sandbox(pb::CreateSandboxRequest {
        name: "elsewhere".into(),
        workspace: "other".into(),
        policy: String::new(),
    })
    .await
    .unwrap();
    api.delete_sandbox(pb::DeleteSandboxRequest {
        sandbox: sandbox_ref("gone"),
    })
    .await
    .unwrap();
    let setting = |target| pb::UpdateConfigRequest {
        settings: vec![pb::SettingChange {
            key: "environment_label".into(),
            change: Some(pb::setting_change::Change::Raw("staging".into())),
        }],
        ..target
    };
    let targets_of = |op: pb::UpdateConfigResponse| op.operation.unwrap().fleet.unwrap().targets;

    let global = api
        .update_config(setting(openshell_e2e::to_global()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        targets_of(global),
        2,
        "every live sandbox, deleted ones not"
    );
    let workspace = api
        .update_config(setting(openshell_e2e::to_workspace("default")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        targets_of(workspace),
        1,
        "only the workspace's live sandbox"
    );
}

/// Sets, repeats and deletes settings at the sandbox and global scopes: the
/// scope's revision moves once per write that changes a value (one or several
/// keys), never for a write that changes nothing, and a deleted key is gone.
async fn settings_revisions_move_only_when_a_value_changes(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let sandbox = create(&mut api, "tuned", POLICY).await.sandbox.unwrap();
    let delete = |key: &str| pb::SettingChange {
        key: key.into(),
        change: Some(pb::setting_change::Change::Delete(true)),
    };
    let mut write = async |global: bool, settings: Vec<pb::SettingChange>| {
        api.update_config(pb::UpdateConfigRequest {
            sandbox: if global {
                String::new()
            } else {
                sandbox.id().to_string()
            },
            global,
            settings,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
    };
    for global in [false, true] {
        let first = write(global, vec![raw_setting("log_level", "debug")]).await;
        assert!(!first.no_op, "{first:?}");
        let base = first.settings_revision;
        let again = write(global, vec![raw_setting("log_level", "debug")]).await;
        assert!(again.no_op, "{again:?}");
        assert_eq!(again.settings_revision, base);
        let two = write(
            global,
            vec![
                raw_setting("log_level", "warn"),
                raw_setting("log_rate_limit_per_second", "77"),
            ],
        )
        .await;
        assert_eq!(two.settings_revision, base + 1, "{two:?}");
        let deleted = write(global, vec![delete("log_level")]).await;
        assert_eq!(deleted.settings_revision, base + 2, "{deleted:?}");
        let gone = write(global, vec![delete("log_level")]).await;
        assert!(
            gone.no_op,
            "deleting what is not there changes nothing: {gone:?}"
        );
        assert_eq!(gone.settings_revision, base + 2);
        let stored = if global {
            gw.state()
                .store
                .settings_at(openshell_core::settings::Scope::Global, "")
                .await
                .unwrap()
        } else {
            gw.state()
                .store
                .settings_at(openshell_core::settings::Scope::Sandbox, sandbox.id())
                .await
                .unwrap()
        };
        assert_eq!(stored.revision, base + 2);
        assert!(!stored.values.contains_key("log_level"), "{stored:?}");
        assert!(stored.values.contains_key("log_rate_limit_per_second"));
    }
}
