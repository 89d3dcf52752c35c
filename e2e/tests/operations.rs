//! Durable operations end to end: server-side waits, supersession,
//! lifecycle outcomes, streaming waits, retries after timed-out waits,
//! gateway crashes with pending operations, and fleet operations.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use openshell_e2e::process::{free_port, spawn_gateway, spawn_supervisor};
use openshell_e2e::{
    Api, BearerToken, POLICY, TOKEN, TestGateway, create_sandbox, eventually, metric,
    policy_with_port, sandbox_ref, state, terminal_operation,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use tonic::transport::Channel;

const DEADLINE: Duration = Duration::from_secs(30);

fn wait(ms: u64) -> Option<pb::WaitOptions> {
    openshell_e2e::wait_for(Duration::from_millis(ms))
}

async fn set_policy(
    api: &mut Api,
    id: &str,
    policy: &str,
    mode: pb::UpdateMode,
    wait_ms: u64,
    key: &str,
) -> pb::Operation {
    api.update_config(pb::UpdateConfigRequest {
        sandbox: String::from(id),
        policy_text: policy.into(),
        mode: mode as i32,
        request_id: key.into(),
        wait: wait(wait_ms),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .operation
    .unwrap()
}

async fn wait_connected(api: &Api, id: &str) {
    eventually("the supervisor session", DEADLINE, || {
        let mut api = api.clone();
        let id = id.to_string();
        async move {
            let s = api
                .list_sessions(pb::ListSessionsRequest {})
                .await
                .ok()?
                .into_inner();
            s.sessions.iter().any(|s| s.sandbox_id == id).then_some(())
        }
    })
    .await;
}

async fn wait_disconnected(api: &Api, id: &str) {
    eventually("the session to end", DEADLINE, || {
        let mut api = api.clone();
        let id = id.to_string();
        async move {
            let s = api
                .list_sessions(pb::ListSessionsRequest {})
                .await
                .ok()?
                .into_inner();
            (!s.sessions.iter().any(|s| s.sandbox_id == id)).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_apply_returns_the_exact_revision_in_both_modes() {
    for mode in [DeliveryMode::Push, DeliveryMode::Poll] {
        let gw = TestGateway::start_for_delivery(mode).await;
        let mut api = gw.api().await;
        let (id, credential) = create_sandbox(&mut api, "waiter", POLICY).await;
        let _supervisor = spawn_supervisor(
            &gw.endpoint(),
            &id,
            &credential,
            &gw.store.dir.path().join("s"),
            &[],
        );
        wait_connected(&api, &id).await;
        let op = set_policy(
            &mut api,
            &id,
            &policy_with_port(8443),
            pb::UpdateMode::WaitForApply,
            20_000,
            "",
        )
        .await;
        assert_eq!(state(&op), pb::OperationState::Applied, "{mode:?}: {op:?}");
        assert_eq!((op.policy_revision, op.settings_revision), (2, 0));
        assert!(!op.wait_timed_out);
        assert_eq!(
            metric(
                &gw,
                "openshell_operation_wait_seconds_count{rpc=\"UpdateConfig\",ended=\"terminal\"}"
            )
            .await,
            1.0,
            "{mode:?}"
        );
        let sends = metric(
            &gw,
            "openshell_config_sends_total{component=\"sandbox_config\"}",
        )
        .await;
        match mode {
            DeliveryMode::Push => assert!(sends >= 1.0, "the change was pushed: {sends}"),
            DeliveryMode::Poll => assert_eq!(sends, 0.0, "nothing is pushed in poll mode"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_changes_while_disconnected_supersede_then_apply() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "quick", POLICY).await;
    let dir = gw.store.dir.path().join("s");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    wait_connected(&api, &id).await;
    supervisor.kill();
    wait_disconnected(&api, &id).await;
    let first = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::CommitOnly,
        0,
        "",
    )
    .await;
    let second = set_policy(
        &mut api,
        &id,
        &policy_with_port(9443),
        pb::UpdateMode::CommitOnly,
        0,
        "",
    )
    .await;
    let _supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    let first = terminal_operation(&api, &first.id).await;
    let second = terminal_operation(&api, &second.id).await;
    assert_eq!(state(&first), pb::OperationState::Superseded, "{first:?}");
    assert_eq!(first.outcome, pb::ApplyOutcome::SupersededByNewer as i32);
    assert_eq!(state(&second), pb::OperationState::Applied, "{second:?}");
    for ended in ["SUPERSEDED", "APPLIED"] {
        let series = format!("openshell_operations_ended_total{{state=\"{ended}\"}}");
        assert!(metric(&gw, &series).await >= 1.0, "{series}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_and_deleted_sandboxes_end_waits_inactive_and_cancelled() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "paused", POLICY).await;
    api.set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
        sandbox: sandbox_ref(&id),
        lifecycle: pb::SandboxLifecycle::Stopped as i32,
    })
    .await
    .unwrap();
    let op = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::WaitForApply,
        20_000,
        "",
    )
    .await;
    assert_eq!(state(&op), pb::OperationState::Inactive, "{op:?}");

    // No supervisor: the wait stays open until the sandbox is deleted.
    let (id, _) = create_sandbox(&mut api, "doomed", POLICY).await;
    let op = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::CommitOnly,
        0,
        "",
    )
    .await;
    let mut stream = api
        .wait_for_apply(pb::WaitForApplyRequest {
            id: op.id.clone(),
            wait: wait(30_000),
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(state(&first), pb::OperationState::Pending);
    let mut deleter = api.clone();
    let id_for_delete = id.clone();
    tokio::spawn(async move {
        deleter
            .delete_sandbox(pb::DeleteSandboxRequest {
                sandbox: sandbox_ref(&id_for_delete),
            })
            .await
            .unwrap();
    });
    let mut last = first;
    while let Some(item) = stream.next().await {
        last = item.unwrap();
    }
    assert_eq!(state(&last), pb::OperationState::Cancelled, "{last:?}");
    assert!(!last.wait_timed_out);
    for ended in ["INACTIVE", "CANCELLED"] {
        let series = format!("openshell_operations_ended_total{{state=\"{ended}\"}}");
        assert!(metric(&gw, &series).await >= 1.0, "{series}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_wait_keeps_the_operation_and_an_idempotent_retry_returns_it() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "late", POLICY).await;
    let op = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::WaitForApply,
        300,
        "retry-1",
    )
    .await;
    assert_eq!(state(&op), pb::OperationState::Pending);
    assert!(op.wait_timed_out, "a deadline is flagged, not an error");
    // The retry after the timed-out wait: same operation, no second revision.
    let again = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::WaitForApply,
        300,
        "retry-1",
    )
    .await;
    assert_eq!(again.id, op.id);
    assert_eq!(
        gw.state().store.policy_revision_count(&id).await.unwrap(),
        2
    );
    assert_eq!(
        metric(
            &gw,
            "openshell_operation_wait_seconds_count{rpc=\"UpdateConfig\",ended=\"deadline\"}"
        )
        .await,
        2.0
    );

    // A client that walks away mid-wait changes nothing either.
    let mut stream = api
        .wait_for_apply(pb::WaitForApplyRequest {
            id: op.id.clone(),
            wait: wait(30_000),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        state(&stream.next().await.unwrap().unwrap()),
        pb::OperationState::Pending
    );
    drop(stream);
    let _supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &gw.store.dir.path().join("s"),
        &[],
    );
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_apply_streams_each_state_change_in_order() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "streamed", POLICY).await;
    let op = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::CommitOnly,
        0,
        "",
    )
    .await;
    let mut stream = api
        .wait_for_apply(pb::WaitForApplyRequest {
            id: op.id.clone(),
            wait: wait(30_000),
        })
        .await
        .unwrap()
        .into_inner();
    let _supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &gw.store.dir.path().join("s"),
        &[],
    );
    let mut states = Vec::new();
    while let Some(item) = stream.next().await {
        states.push(state(&item.unwrap()));
    }
    assert_eq!(states.first(), Some(&pb::OperationState::Pending));
    assert_eq!(states.last(), Some(&pb::OperationState::Applied));
    let mut sorted = states.clone();
    sorted.dedup();
    assert_eq!(sorted, states, "each item is a change");
    assert_eq!(
        metric(
            &gw,
            "openshell_operation_wait_seconds_count{rpc=\"WaitForApply\",ended=\"terminal\"}"
        )
        .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_operations_survive_a_gateway_crash_and_resolve_after_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let data_dir = dir.path().join("data");
    let token_arg = format!("ci={TOKEN}");
    let args = [
        "--listen",
        listen.as_str(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--operator-token",
        token_arg.as_str(),
        "--metrics-listen",
        "off",
        "--config-delivery-mode",
        "push",
        "--heartbeat-interval",
        "500ms",
    ];
    let gateway = spawn_gateway(&args, &[], dir.path().join("gateway-1.log"), port);
    let endpoint = format!("http://{listen}");
    let connect = || async {
        let channel = Channel::from_shared(endpoint.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        openshell_e2e::Api::new(channel, BearerToken(Some(TOKEN.into())))
    };
    let mut api = connect().await;
    let (id, credential) = create_sandbox(&mut api, "crashy", POLICY).await;
    let supervisor = spawn_supervisor(&endpoint, &id, &credential, &dir.path().join("s"), &[]);
    wait_connected(&api, &id).await;
    supervisor.kill();
    wait_disconnected(&api, &id).await;
    let pending = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::CommitOnly,
        0,
        "crash-key",
    )
    .await;

    let mut gateway = gateway;
    gateway.child.kill().unwrap(); // SIGKILL: no graceful anything.
    gateway.child.wait().unwrap();
    drop(gateway);
    let _gateway = spawn_gateway(&args, &[], dir.path().join("gateway-2.log"), port);
    let mut api = connect().await;
    let fetched = api
        .get_operation(pb::GetOperationRequest {
            id: pending.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        state(&fetched),
        pb::OperationState::Pending,
        "survived the crash"
    );
    let _supervisor = spawn_supervisor(&endpoint, &id, &credential, &dir.path().join("s"), &[]);
    let done = terminal_operation(&api, &pending.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    // Nothing duplicated: one revision, one operation for the key.
    let replay = set_policy(
        &mut api,
        &id,
        &policy_with_port(8443),
        pb::UpdateMode::CommitOnly,
        0,
        "crash-key",
    )
    .await;
    assert_eq!(replay.id, pending.id);
    let history = api
        .list_sandbox_policies(pb::ListSandboxPoliciesRequest {
            sandbox: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(history.revisions.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_change_across_fifty_supervisors_is_one_fleet_operation() {
    const FLEET: usize = 50;
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let mut supervisors = Vec::new();
    for i in 0..FLEET {
        let (id, credential) = create_sandbox(&mut api, &format!("fleet-{i}"), POLICY).await;
        // One member refuses any configuration labelled "canary-breaker".
        let extra: &[&str] = if i == 7 {
            &[
                "--on-apply",
                "grep -q canary-breaker \"$OPENSHELL_STATE_DIR/active/settings.json\" && exit 3 || exit 0",
            ]
        } else {
            &[]
        };
        let dir = gw.store.dir.path().join(format!("s{i}"));
        supervisors.push((
            id.clone(),
            spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, extra),
        ));
    }
    eventually("every supervisor session", Duration::from_secs(120), || {
        let mut api = api.clone();
        let ids: Vec<String> = supervisors.iter().map(|(id, _)| id.clone()).collect();
        async move {
            let s = api
                .list_sessions(pb::ListSessionsRequest {})
                .await
                .ok()?
                .into_inner();
            ids.iter()
                .all(|id| {
                    s.sessions
                        .iter()
                        .any(|s| &s.sandbox_id == id && s.mode == pb::DeliveryMode::Push as i32)
                })
                .then_some(())
        }
    })
    .await;
    let global = |key: &str, value: &str, threshold: f64| pb::UpdateConfigRequest {
        global: true,
        settings: vec![pb::SettingChange {
            key: key.into(),
            change: Some(pb::setting_change::Change::Raw(value.into())),
        }],
        mode: pb::UpdateMode::WaitForApply as i32,
        wait: Some(pb::WaitOptions {
            timeout: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            threshold,
        }),
        ..Default::default()
    };
    let op = api
        .update_config(global("log_level", "debug", 0.0))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(state(&op), pb::OperationState::Applied, "{op:?}");
    let fleet = op.fleet.unwrap();
    assert_eq!(
        (fleet.targets, fleet.applied, fleet.failed, fleet.pending),
        (50, 50, 0, 0)
    );

    let op = api
        .update_config(global("environment_label", "canary-breaker", 0.0))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(state(&op), pb::OperationState::Failed, "{op:?}");
    let fleet = op.fleet.unwrap();
    assert_eq!(
        (fleet.targets, fleet.applied, fleet.failed, fleet.pending),
        (50, 49, 1, 0)
    );

    // A threshold lets a caller finish before every target is done.
    let op = api
        .update_config(global("environment_label", "steady", 0.5))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    let fleet = op.fleet.unwrap();
    assert!(f64::from(fleet.applied) >= 25.0, "{fleet:?}");
}
