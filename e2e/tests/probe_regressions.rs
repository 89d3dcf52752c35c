//! Regressions for the defects an outside probe found in the gateway: a parser stall, zombie
//! sessions, fleet writes that never end, stopped sandboxes that still receive configuration,
//! provider values no process can receive, sandboxes made RUNNING by a failure report, and
//! names that read as ids. Each test fails without its fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::inspect;
use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{
    Api, Backend, POLICY, TestGateway, create_sandbox, eventually, get_sandbox, metric,
    policy_with_port, raw_setting, sandbox_ref, state, terminal_operation,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;

const DEADLINE: Duration = Duration::from_secs(60);

async fn set_policy(api: &Api, id: &str, policy: String) -> Result<pb::Operation, tonic::Status> {
    api.clone()
        .update_config(pb::UpdateConfigRequest {
            sandbox: String::from(id),
            policy_text: policy,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().operation.unwrap())
}

async fn set_lifecycle(api: &Api, id: &str, lifecycle: pb::SandboxLifecycle) -> pb::Sandbox {
    api.clone()
        .set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
            sandbox: sandbox_ref(id),
            lifecycle: lifecycle as i32,
        })
        .await
        .unwrap()
        .into_inner()
}

/// Defect 1: a policy nested thousands of levels deep is refused by the depth bound, the
/// refusal names the limit, nothing is written, and the gateway goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_policy_is_refused_and_changes_nothing() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "nested", POLICY).await;
    let before = get_sandbox(&api, &id).await;
    let depth = 120_000;
    let deep = format!(
        "version: 1\nx: {}1{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let err = set_policy(&api, &id, deep).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("at most 64 levels"),
        "{}",
        err.message()
    );
    assert!(
        err.message().len() < 1024,
        "the refusal does not echo the input"
    );
    let after = get_sandbox(&api, &id).await;
    assert_eq!(before.policy_revision, after.policy_revision);
    // The same bound guards a sandbox's first policy.
    let err = api
        .create_sandbox(pb::CreateSandboxRequest {
            name: "nested-too".into(),
            policy: format!("version: 1\nx:\n{}1\n", "- ".repeat(100_000)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let op = set_policy(&api, &id, policy_with_port(8443)).await.unwrap();
    assert_eq!(op.policy_revision, before.policy_revision + 1);
}

/// Defect 2: two supervisors with one credential leave no zombie. The process holding the
/// sandbox's session keeps it; the second is refused with a reason it logs and `sessions
/// inspect` shows, and retries; once the first is gone, the second takes the sandbox and applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_supervisor_with_the_same_credential_is_refused_and_leaves_no_zombie() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "twins", POLICY).await;
    let first = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir.path().join("a"), &[]);
    let first_session = eventually("the first session", DEADLINE, || async {
        let i = inspect(&api, &id).await;
        (i.connected && !i.session_id.is_empty()).then_some(i.session_id)
    })
    .await;
    let second = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir.path().join("b"), &[]);
    eventually(
        "the second supervisor to log its refusal",
        DEADLINE,
        || async {
            second
                .guard
                .log_text()
                .contains("two supervisors are using the same sandbox credential")
                .then_some(())
        },
    )
    .await;
    assert!(metric(&gw, "openshell_supervisor_duplicate_sessions_refused_total").await >= 1.0);
    assert_eq!(
        metric(&gw, "openshell_supervisor_sessions_replaced_total").await,
        0.0,
        "the first session was not replaced"
    );
    let i = inspect(&api, &id).await;
    assert_eq!(i.session_id, first_session, "the first keeps the sandbox");
    assert!(
        i.hints
            .iter()
            .any(|h| h.contains("refused another") && h.contains("credential")),
        "{:?}",
        i.hints
    );
    assert!(
        !first.guard.log_text().contains("replaced this one"),
        "the first was never told to close"
    );
    // The holder still gets and applies what is written.
    let op = set_policy(&api, &id, policy_with_port(8443)).await.unwrap();
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert!(
        first
            .active_file("policy.json")
            .is_some_and(|p| p.contains("8443"))
    );
    // Once the holder is gone, the refused one retries, takes the sandbox and applies.
    first.kill();
    eventually("the second supervisor's session", DEADLINE, || async {
        let i = inspect(&api, &id).await;
        (i.connected && i.session_id != first_session).then_some(())
    })
    .await;
    let op = set_policy(&api, &id, policy_with_port(9443)).await.unwrap();
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    eventually(
        "the second supervisor's state to hold the write",
        DEADLINE,
        || async {
            second
                .active_file("policy.json")
                .filter(|p| p.contains("9443"))
        },
    )
    .await;
}

/// Defect 5: a fleet write whose targets include stopped sandboxes ends; they count INACTIVE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_write_over_stopped_sandboxes_ends_inactive() {
    for backend in Backend::ALL {
        let gw = TestGateway::start(backend).await;
        let mut api = gw.api().await;
        let mut ids = Vec::new();
        for name in ["st-a", "st-b", "st-c"] {
            let created = api
                .create_sandbox(pb::CreateSandboxRequest {
                    name: name.into(),
                    workspace: "st".into(),
                    policy: POLICY.into(),
                })
                .await
                .unwrap()
                .into_inner();
            ids.push(created.sandbox.unwrap().id().to_string());
        }
        for id in &ids {
            set_lifecycle(&api, id, pb::SandboxLifecycle::Stopped).await;
        }
        let response = api
            .update_config(pb::UpdateConfigRequest {
                workspace_settings: true,
                workspace_scope: openshell_e2e::workspace_scope("st"),
                settings: vec![raw_setting("log_level", "warn")],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let op = terminal_operation(&api, &response.operation.unwrap().id).await;
        assert_eq!(
            state(&op),
            pb::OperationState::Inactive,
            "{backend:?}: {op:?}"
        );
        let fleet = op.fleet.unwrap();
        assert_eq!(
            (fleet.targets, fleet.inactive, fleet.pending),
            (3, 3, 0),
            "{backend:?}"
        );
    }
}

/// Defect 7: a stopped sandbox's supervisor is told why and gets nothing, so INACTIVE is the
/// truth; starting the sandbox delivers the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_sandbox_receives_no_configuration_until_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "paused", POLICY).await;
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir.path().join("s"), &[]);
    eventually("the supervisor to bootstrap", DEADLINE, || async {
        supervisor.active_file("policy.json").map(|_| ())
    })
    .await;
    set_lifecycle(&api, &id, pb::SandboxLifecycle::Stopped).await;
    let op = set_policy(&api, &id, policy_with_port(8443)).await.unwrap();
    assert_eq!(state(&op), pb::OperationState::Inactive, "{op:?}");
    // Told once when its session closes, again when its reconnect is refused: by then any
    // delivery would have happened.
    eventually(
        "the supervisor to be refused while stopped",
        DEADLINE,
        || async {
            (supervisor
                .guard
                .log_text()
                .matches("the sandbox is stopped")
                .count()
                >= 2)
                .then_some(())
        },
    )
    .await;
    assert!(!inspect(&api, &id).await.connected);
    let active = supervisor.active_file("policy.json").unwrap();
    assert!(
        !active.contains("8443"),
        "a stopped sandbox received a write"
    );
    set_lifecycle(&api, &id, pb::SandboxLifecycle::Pending).await;
    eventually("the write to arrive once started", DEADLINE, || async {
        supervisor
            .active_file("policy.json")
            .filter(|p| p.contains("8443"))
    })
    .await;
    let running = eventually("the sandbox to run again", DEADLINE, || async {
        let sandbox = get_sandbox(&api, &id).await;
        (sandbox.lifecycle == pb::SandboxLifecycle::Running as i32).then_some(sandbox)
    })
    .await;
    assert_eq!(running.policy_revision, op.policy_revision);
}

/// Defect 6: a provider value with a NUL byte is refused at the API, naming the variable and
/// not the value; a failure report does not make a pending sandbox RUNNING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpassable_values_and_failure_reports_change_nothing() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    for class in [pb::ValueClass::Credential, pb::ValueClass::NonSecret] {
        let err = api
            .create_provider(pb::CreateProviderRequest {
                name: "nul".into(),
                r#type: "github".into(),
                values: vec![pb::ProviderValueInput {
                    name: "GITHUB_TOKEN".into(),
                    value: "v\0secret-part".into(),
                    class: class as i32,
                    expires_at: None,
                }],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("GITHUB_TOKEN"), "{}", err.message());
        assert!(err.message().contains("NUL"), "{}", err.message());
        assert!(!err.message().contains("secret-part"), "{}", err.message());
    }
    let providers = api
        .list_providers(pb::ListProvidersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(providers.providers.is_empty(), "{providers:?}");

    let (id, credential) = create_sandbox(&mut api, "never-ran", POLICY).await;
    let mut supervisor = gw.api_with_token(Some(&credential)).await;
    for failed_closed in [false, true] {
        supervisor
            .report_policy_status(pb::ReportPolicyStatusRequest {
                sandbox_id: id.clone(),
                status: pb::PolicyStatus::Failed as i32,
                load_status: pb::PolicyLoadStatus::Failed as i32,
                load_error: "forged".into(),
                failed_closed,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // Reports resolve in the background: once the last one is kept, both were processed.
    eventually(
        "the failure to be kept as the last report",
        DEADLINE,
        || async {
            inspect(&api, &id)
                .await
                .hints
                .iter()
                .any(|h| h.contains("forged"))
                .then_some(())
        },
    )
    .await;
    let sandbox = get_sandbox(&api, &id).await;
    assert_eq!(sandbox.lifecycle, pb::SandboxLifecycle::Pending as i32);
}

/// Defect 8: a name that would be read back as an id is refused, for sandboxes and providers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_shaped_like_ids_are_refused() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (existing, _) = create_sandbox(&mut api, "real", POLICY).await;
    for name in ["sb-zzz".to_string(), existing.clone()] {
        let err = api
            .create_sandbox(pb::CreateSandboxRequest {
                name: name.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{name}: {err:?}");
        assert!(err.message().contains("read as ids"), "{}", err.message());
    }
    let err = api
        .create_provider(pb::CreateProviderRequest {
            name: "pv-github".into(),
            r#type: "github".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let listed = api
        .list_sandboxes(pb::ListSandboxesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.sandboxes.len(), 1, "{listed:?}");
}

/// Probe: two attached providers exporting one variable shadowed each other silently. The
/// write that would bring them together, an attach or an update, is refused naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_that_would_shadow_each_other_are_refused() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "shadowed", POLICY).await;
    let value = |name: &str| pb::ProviderValueInput {
        name: name.into(),
        value: "v".into(),
        class: pb::ValueClass::NonSecret as i32,
        expires_at: None,
    };
    for (name, var) in [("first", "SHARED"), ("second", "SHARED"), ("third", "OWN")] {
        api.create_provider(pb::CreateProviderRequest {
            name: name.into(),
            r#type: "generic".into(),
            values: vec![value(var)],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let attach = |provider: &str| pb::AttachProviderRequest {
        sandbox: sandbox_ref(&id),
        provider: provider.into(),
    };
    let epoch = api
        .attach_provider(attach("first"))
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap()
        .attachment_epoch;
    let err = api.attach_provider(attach("second")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    for needle in ["first", "second", "SHARED"] {
        assert!(err.message().contains(needle), "{}", err.message());
    }
    api.attach_provider(attach("third")).await.unwrap();
    let err = api
        .update_provider(pb::UpdateProviderRequest {
            provider: "third".into(),
            values: vec![value("OWN"), value("SHARED")],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    let sandbox = get_sandbox(&api, &id).await;
    assert_eq!(
        sandbox.attachment_epoch,
        epoch + 1,
        "only `third` was attached since"
    );
    let third = api
        .get_provider(pb::GetProviderRequest {
            provider: "third".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(third.revision, 1, "the refused update wrote nothing");
}

/// Probe: `provider attach`/`detach` returned no operation though the contract promises one.
/// Each returns an operation that ends APPLIED once the supervisor runs exactly the provider
/// environment it made desired; a repeat tracks the environment already in effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_and_detach_are_tracked_operations() {
    for mode in [DeliveryMode::Push, DeliveryMode::Poll] {
        let dir = tempfile::tempdir().unwrap();
        let gw = TestGateway::start_for_delivery(mode).await;
        let mut api = gw.api().await;
        let (id, credential) = create_sandbox(&mut api, "attaching", POLICY).await;
        api.create_provider(pb::CreateProviderRequest {
            name: "github".into(),
            r#type: "github".into(),
            values: vec![pb::ProviderValueInput {
                name: "GITHUB_ORG".into(),
                value: "acme".into(),
                class: pb::ValueClass::NonSecret as i32,
                expires_at: None,
            }],
            ..Default::default()
        })
        .await
        .unwrap();
        let _supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, dir.path(), &[]);
        eventually("the supervisor to connect", DEADLINE, || async {
            inspect(&api, &id).await.connected.then_some(())
        })
        .await;
        let attach = pb::AttachProviderRequest {
            sandbox: sandbox_ref(&id),
            provider: "github".into(),
        };
        let mut seen = Vec::new();
        for round in 0..3 {
            let response = match round {
                0 | 1 => api.attach_provider(attach.clone()).await,
                _ => {
                    api.detach_provider(pb::DetachProviderRequest {
                        sandbox: sandbox_ref(&id),
                        provider: "github".into(),
                    })
                    .await
                }
            }
            .unwrap()
            .into_inner();
            let op = response
                .operation
                .expect("an attach or detach returns its operation");
            assert_eq!(op.target, id);
            assert_eq!(op.no_op, round == 1, "{mode:?} round {round}: {op:?}");
            let done = terminal_operation(&api, &op.id).await;
            assert_eq!(
                state(&done),
                pb::OperationState::Applied,
                "{mode:?} round {round}: {done:?}"
            );
            seen.push(done.id);
        }
        seen.dedup();
        assert_eq!(seen.len(), 3, "each call has an operation of its own");
        set_lifecycle(&api, &id, pb::SandboxLifecycle::Stopped).await;
        let op = api
            .attach_provider(attach)
            .await
            .unwrap()
            .into_inner()
            .operation
            .unwrap();
        assert_eq!(state(&op), pb::OperationState::Inactive, "{mode:?}: {op:?}");
    }
}

/// Probe: a wait whose gateway stopped was told its wait timed out (the CLI exited 124)
/// although its deadline was far off. Both waits, `WaitForApply` and `UpdateConfig`'s
/// `WAIT_FOR_APPLY`, now end UNAVAILABLE naming the operation, which goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cut_off_by_a_stopping_gateway_is_unavailable_not_timed_out() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "unsupervised", POLICY).await;
    let op = set_policy(&api, &id, policy_with_port(8443)).await.unwrap();
    let mut stream = api
        .clone()
        .wait_for_apply(pb::WaitForApplyRequest {
            id: op.id.clone(),
            wait: openshell_e2e::wait_for(Duration::from_secs(60)),
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.id, op.id);
    let mut waiting = api.clone();
    let wait_request = pb::UpdateConfigRequest {
        sandbox: String::from(&id),
        policy_text: policy_with_port(9443),
        mode: pb::UpdateMode::WaitForApply as i32,
        ..Default::default()
    };
    let blocked = tokio::spawn(async move { waiting.update_config(wait_request).await });
    eventually("the second write to be committed", DEADLINE, || async {
        (get_sandbox(&api, &id).await.policy_revision == op.policy_revision + 1).then_some(())
    })
    .await;
    gw.handle.shutdown().await;
    let mut last = None;
    let ended = loop {
        match stream.message().await {
            Ok(Some(op)) => last = Some(op),
            Ok(None) => panic!("the stream ended without saying why: {last:?}"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
    assert!(ended.message().contains(&op.id), "{}", ended.message());
    assert!(
        last.is_none_or(|op| !op.wait_timed_out),
        "a stop is not a timeout"
    );
    let status = blocked.await.unwrap().unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("operation op-"),
        "{}",
        status.message()
    );
}
