//! Per-replica bounds, each refused RESOURCE_EXHAUSTED naming its setting:
//! a token holds at most `max_waits_per_token` server-side waits open
//! (`WaitForApply` streams and `UpdateConfig` with WAIT_FOR_APPLY, counted
//! together; an UpdateConfig so refused writes nothing; another token is not
//! affected), and a replica holds at most `max_sessions` supervisor
//! sessions. A wait or session that ends gives its place back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{
    Backend, POLICY, TestGateway, TestStore, create_sandbox, eventually, raw_setting, to_sandbox,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use pb::supervisor_message::Payload as FromSupervisor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

const LIMIT: usize = 2;

fn long_wait(id: &str) -> pb::WaitForApplyRequest {
    pb::WaitForApplyRequest {
        id: id.into(),
        wait: openshell_e2e::wait_for(Duration::from_secs(300)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_past_its_wait_limit_is_refused_until_a_wait_ends() {
    let store = TestStore::new(Backend::Sqlite).await;
    let gateway = TestGateway::start_with(store, DeliveryMode::Poll, |config| {
        config.max_waits_per_token = LIMIT;
    })
    .await;
    let mut admin = gateway.api().await;
    // No supervisor runs: the sandbox's policy operation stays pending, so waits stay open.
    let created = admin
        .create_sandbox(pb::CreateSandboxRequest {
            name: "idle".into(),
            workspace: String::new(),
            policy: POLICY.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let op = created.operation.unwrap().id;

    let mut open = Vec::new();
    for _ in 0..LIMIT {
        let stream = admin.wait_for_apply(long_wait(&op)).await.unwrap();
        open.push(stream.into_inner());
    }
    let err = admin.wait_for_apply(long_wait(&op)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message()
            .contains("token 'operator' already has 2 waits open"),
        "{err:?}"
    );
    assert!(err.message().contains("max_waits_per_token"), "{err:?}");

    // An UpdateConfig that would wait is refused before it writes anything.
    let operations = |api: &mut openshell_e2e::Api| {
        let mut api = api.clone();
        async move {
            api.list_operations(pb::ListOperationsRequest::default())
                .await
                .unwrap()
                .into_inner()
                .operations
                .len()
        }
    };
    let before = operations(&mut admin).await;
    let err = admin
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting("log_level", "warn")],
            mode: pb::UpdateMode::WaitForApply as i32,
            ..to_sandbox("idle")
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(operations(&mut admin).await, before);
    // Without waiting it is served as ever.
    admin
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting("log_level", "warn")],
            ..to_sandbox("idle")
        })
        .await
        .unwrap();

    // Another token has places of its own.
    let secret = admin
        .create_token(pb::CreateTokenRequest {
            name: "watcher".into(),
            role: pb::TokenRole::Viewer as i32,
            workspace: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .secret;
    let mut watcher = gateway.api_with_token(Some(&secret)).await;
    let _theirs = watcher.wait_for_apply(long_wait(&op)).await.unwrap();

    // A client that hangs up gives its place back.
    drop(open.pop());
    let _again = eventually(
        "a place to be free after a waiter hung up",
        Duration::from_secs(30),
        || {
            let mut admin = admin.clone();
            let op = op.clone();
            async move { admin.wait_for_apply(long_wait(&op)).await.ok() }
        },
    )
    .await;
    let err = admin.wait_for_apply(long_wait(&op)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
}

/// Opens a raw `ConnectSupervisor` session for a sandbox, as a supervisor
/// would, and waits for the gateway's first answer; the sender keeps the
/// session open.
async fn open_session(
    gateway: &TestGateway,
    sandbox_id: &str,
    credential: &str,
) -> Result<
    (
        tokio::sync::mpsc::Sender<pb::SupervisorMessage>,
        tonic::Streaming<pb::GatewayMessage>,
    ),
    tonic::Status,
> {
    let (outbound, to_gateway) = tokio::sync::mpsc::channel(4);
    outbound
        .send(pb::SupervisorMessage {
            payload: Some(FromSupervisor::Hello(pb::SupervisorHello {
                sandbox_id: sandbox_id.into(),
                instance_id: "raw-1".into(),
                protocol_revision: 1,
                supervisor_version: "test".into(),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
    let mut api = gateway.api_with_token(Some(credential)).await;
    let mut inbound = api
        .connect_supervisor(ReceiverStream::new(to_gateway))
        .await?
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(30), inbound.message())
        .await
        .expect("the gateway answers a hello");
    assert!(first.unwrap().is_some(), "the session was accepted");
    Ok((outbound, inbound))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_past_its_session_limit_refuses_until_a_session_ends() {
    let store = TestStore::new(Backend::Sqlite).await;
    let gateway = TestGateway::start_with(store, DeliveryMode::Poll, |config| {
        config.max_sessions = 1;
    })
    .await;
    let mut admin = gateway.api().await;
    let (a, a_credential) = create_sandbox(&mut admin, "a", POLICY).await;
    let (b, b_credential) = create_sandbox(&mut admin, "b", POLICY).await;

    let first = open_session(&gateway, &a, &a_credential).await.unwrap();
    let err = open_session(&gateway, &b, &b_credential).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("max_sessions"), "{err:?}");
    assert!(err.message().contains("retry"), "{err:?}");

    // The supervisor of `a` goes away: its place is free again.
    drop(first);
    let _second = eventually(
        "a session place to be free after a supervisor left",
        Duration::from_secs(30),
        || {
            let gateway = &gateway;
            let (b, b_credential) = (b.clone(), b_credential.clone());
            async move { open_session(gateway, &b, &b_credential).await.ok() }
        },
    )
    .await;
    let err = open_session(&gateway, &a, &a_credential).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
}
