//! Every wait of a session's start has a bound, and a session refused at it
//! leaves no trace in the sandbox's configuration and a reason in its
//! inspection: a supervisor that never prepares the startup candidate of its
//! image policy, one that never answers its bootstrap, and a bootstrap the
//! gateway cannot build (unreadable credentials, no time left, larger than a
//! message), each driven over a raw `ConnectSupervisor` stream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sqlx::Connection;

use openshell_e2e::{Backend, POLICY, TestGateway, TestStore, create_sandbox, metric, sandbox_ref};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use pb::gateway_message::Payload as FromGateway;
use pb::supervisor_message::Payload as FromSupervisor;
use tokio_stream::wrappers::ReceiverStream;

/// Generous: the refusal comes after `PREPARE_DEADLINE`, long before this.
const DEADLINE: Duration = Duration::from_secs(60);
const PREPARE_DEADLINE: Duration = Duration::from_millis(300);

/// Opens a raw session for `sandbox` with `hello`, as a supervisor that
/// applies pushed configuration would; the sender keeps its side open.
async fn open_session(
    gateway: &TestGateway,
    credential: &str,
    hello: pb::SupervisorHello,
) -> (
    tokio::sync::mpsc::Sender<pb::SupervisorMessage>,
    tonic::Streaming<pb::GatewayMessage>,
) {
    let (outbound, to_gateway) = tokio::sync::mpsc::channel(4);
    outbound
        .send(pb::SupervisorMessage {
            payload: Some(FromSupervisor::Hello(hello)),
        })
        .await
        .unwrap();
    let mut supervisor_api = gateway.api_with_token(Some(credential)).await;
    let inbound = supervisor_api
        .connect_supervisor(ReceiverStream::new(to_gateway))
        .await
        .unwrap()
        .into_inner();
    (outbound, inbound)
}

fn applying_supervisor(sandbox_id: &str) -> pb::SupervisorHello {
    pb::SupervisorHello {
        sandbox_id: sandbox_id.into(),
        instance_id: "raw-1".into(),
        protocol_revision: 1,
        supervisor_version: "test".into(),
        supports_config_snapshots: true,
        supports_config_apply: true,
        ..Default::default()
    }
}

/// The next frame's payload from the gateway.
async fn next(inbound: &mut tonic::Streaming<pb::GatewayMessage>) -> Option<FromGateway> {
    tokio::time::timeout(DEADLINE, inbound.message())
        .await
        .expect("the gateway says something within the deadline")
        .unwrap()
        .and_then(|m| m.payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_that_never_prepares_its_startup_candidate_is_refused_at_the_deadline() {
    let gateway = TestGateway::start_with(
        TestStore::new(Backend::Sqlite).await,
        DeliveryMode::Push,
        |config| config.delivery.startup_prepare_deadline = PREPARE_DEADLINE,
    )
    .await;
    let mut api = gateway.api().await;
    let (id, credential) = create_sandbox(&mut api, "silent", "").await;

    let hello = pb::SupervisorHello {
        image_policy: POLICY.into(),
        ..applying_supervisor(&id)
    };
    let (outbound, mut inbound) = open_session(&gateway, &credential, hello).await;
    assert!(
        matches!(
            next(&mut inbound).await,
            Some(FromGateway::StartupCandidate(_))
        ),
        "the image policy is offered first"
    );
    // The supervisor never answers (its side of the stream stays open).
    match next(&mut inbound).await {
        Some(FromGateway::SessionRejected(rejected)) => {
            assert!(
                rejected
                    .reason
                    .contains("no StartupConfigPrepared within 300ms"),
                "{rejected:?}"
            );
            assert!(!rejected.permanent, "the supervisor may try again");
        }
        other => panic!("expected the session to be refused, got {other:?}"),
    }
    drop(outbound);

    // Nothing was committed from the candidate, nothing waits for it.
    let sandbox = api
        .get_sandbox(pb::GetSandboxRequest {
            name: id.to_string(),
            workspace_scope: None,
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    assert_eq!(sandbox.policy_revision, 0, "{sandbox:?}");
    let operations = api
        .list_operations(pb::ListOperationsRequest {
            sandbox: sandbox_ref(&id),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operations;
    assert!(operations.is_empty(), "{operations:?}");

    let inspection = openshell_e2e::inspect(&api, &id).await;
    assert!(!inspection.connected);
    assert!(
        inspection
            .hints
            .iter()
            .any(|hint| hint.contains("refused the sandbox's last session")
                && hint.contains("no StartupConfigPrepared within 300ms")),
        "{:?}",
        inspection.hints
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_that_never_answers_its_bootstrap_is_closed_at_the_deadline() {
    let gateway = TestGateway::start_with(
        TestStore::new(Backend::Sqlite).await,
        DeliveryMode::Push,
        |config| config.delivery.bootstrap_result_timeout = PREPARE_DEADLINE,
    )
    .await;
    let mut api = gateway.api().await;
    let (id, credential) = create_sandbox(&mut api, "mute", POLICY).await;
    let (outbound, mut inbound) =
        open_session(&gateway, &credential, applying_supervisor(&id)).await;
    match next(&mut inbound).await {
        Some(FromGateway::SessionAccepted(accepted)) => {
            assert!(accepted.bootstrap_config.is_some(), "{accepted:?}");
        }
        other => panic!("expected the session to be accepted, got {other:?}"),
    }
    // The supervisor never sends its BootstrapResult.
    let closed = loop {
        match next(&mut inbound).await {
            Some(FromGateway::SessionRejected(closed)) => break closed,
            Some(FromGateway::Heartbeat(_) | FromGateway::ConfigUpdate(_)) => {}
            other => panic!("expected the session to be closed, got {other:?}"),
        }
    };
    assert!(
        closed.reason.contains("no bootstrap result within 300ms"),
        "{closed:?}"
    );
    assert!(!closed.permanent);
    drop(outbound);

    let timed_out = "openshell_config_bootstraps_total{outcome=\"timed_out\"}";
    assert_eq!(metric(&gateway, timed_out).await, 1.0);
    // The sandbox never ran its first revision.
    let sandbox = api
        .get_sandbox(pb::GetSandboxRequest {
            name: id.to_string(),
            workspace_scope: None,
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    assert_eq!(
        sandbox.lifecycle,
        pb::SandboxLifecycle::Pending as i32,
        "{sandbox:?}"
    );
    let inspection =
        openshell_e2e::eventually("the closed session to be gone", DEADLINE, || async {
            let inspection = openshell_e2e::inspect(&api, &id).await;
            (!inspection.connected).then_some(inspection)
        })
        .await;
    assert!(
        inspection
            .hints
            .iter()
            .any(|hint| hint.contains("no bootstrap result within 300ms")),
        "{:?}",
        inspection.hints
    );
}

/// How a bootstrap is kept from being built, and what the refusal says.
enum BrokenBootstrap {
    /// An attached provider's sealed credentials cannot be opened.
    UnreadableCredentials,
    /// The build gets no time at all.
    NoTimeToBuild,
    /// The attached providers' values, then a policy, make it larger than one message may
    /// be: attaches and provider updates that would are refused, a policy write is not.
    TooLarge,
}

/// The supervisor is refused with the reason, nothing is applied, the refusal is
/// counted and `sessions inspect` names it.
async fn a_bootstrap_that_cannot_be_built_refuses_the_session(broken: BrokenBootstrap) {
    let gateway = TestGateway::start_with(
        TestStore::new(Backend::Sqlite).await,
        DeliveryMode::Push,
        |config| {
            if matches!(broken, BrokenBootstrap::NoTimeToBuild) {
                config.delivery.bootstrap_deadline = Duration::ZERO;
            }
        },
    )
    .await;
    let mut api = gateway.api().await;
    let (id, credential) = create_sandbox(&mut api, "unbuilt", POLICY).await;
    let needle = match broken {
        BrokenBootstrap::UnreadableCredentials => {
            attach_provider(&mut api, &id, "github", &[("GITHUB_TOKEN", "ghp_x".into())]).await;
            let mut db = sqlx::AnyConnection::connect(&gateway.store.url)
                .await
                .unwrap();
            sqlx::query("UPDATE providers SET credentials_box = $1 WHERE name = 'github'")
                .bind(vec![0u8; 8])
                .execute(&mut db)
                .await
                .unwrap();
            "bootstrap build failed: stored data is unreadable"
        }
        BrokenBootstrap::NoTimeToBuild => "bootstrap build exceeded its 0ns deadline",
        BrokenBootstrap::TooLarge => {
            // A provider that leaves the bootstrap just under its limit…
            let value = "v".repeat(61_000);
            let values: Vec<(&str, String)> = (0..17)
                .map(|i| (leak(format!("VALUE_{i}")), value.clone()))
                .collect();
            attach_provider(&mut api, &id, "big", &values).await;
            // …and a policy that takes it over.
            let mut policy = String::from("version: 1\nnetwork_policies:\n");
            for i in 0..1000 {
                policy.push_str(&format!(
                    "  p{i}: {{endpoints: [{{host: h{i}.example.com, port: 443}}]}}\n"
                ));
            }
            api.update_config(pb::UpdateConfigRequest {
                sandbox: id.clone(),
                policy_text: policy,
                ..Default::default()
            })
            .await
            .unwrap();
            "the limit is 1048576 bytes"
        }
    };
    let (outbound, mut inbound) =
        open_session(&gateway, &credential, applying_supervisor(&id)).await;
    let refused = match next(&mut inbound).await {
        Some(FromGateway::SessionRejected(refused)) => refused,
        other => panic!("expected the session to be refused, got {other:?}"),
    };
    assert!(refused.reason.contains(needle), "{refused:?}");
    assert!(!refused.permanent, "the supervisor tries again later");
    drop(outbound);
    let failed = "openshell_config_bootstraps_total{outcome=\"build_failed\"}";
    assert_eq!(metric(&gateway, failed).await, 1.0);
    let inspection = openshell_e2e::inspect(&api, &id).await;
    assert!(!inspection.connected);
    assert_eq!(
        inspection.sandbox.unwrap().lifecycle,
        pb::SandboxLifecycle::Pending as i32,
        "nothing was applied"
    );
    assert!(
        inspection.hints.iter().any(
            |hint| hint.contains("refused the sandbox's last session") && hint.contains(needle)
        ),
        "{:?}",
        inspection.hints
    );
}

/// Names of environment variables live as long as the test.
fn leak(name: String) -> &'static str {
    Box::leak(name.into_boxed_str())
}

async fn attach_provider(
    api: &mut openshell_e2e::Api,
    sandbox_id: &str,
    name: &str,
    credentials: &[(&str, String)],
) {
    let values = credentials
        .iter()
        .map(|(key, value)| openshell_e2e::credential_value(key, value))
        .collect();
    openshell_e2e::attach_new_provider(api, sandbox_id, name, "generic", values).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_whose_credentials_cannot_be_opened_refuses_the_session() {
    a_bootstrap_that_cannot_be_built_refuses_the_session(BrokenBootstrap::UnreadableCredentials)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_past_its_build_deadline_refuses_the_session() {
    a_bootstrap_that_cannot_be_built_refuses_the_session(BrokenBootstrap::NoTimeToBuild).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_larger_than_a_message_refuses_the_session() {
    a_bootstrap_that_cannot_be_built_refuses_the_session(BrokenBootstrap::TooLarge).await;
}
