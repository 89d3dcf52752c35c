//! Regressions for what a supervisor credential could make the gateway believe or keep: a
//! revision beyond the store's range that poisoned the store, acknowledgements of a
//! configuration never sent, a deleted sandbox whose session stayed open, a prepared startup
//! policy that replaced the operator's, and a revoked token whose wait went on. Each test
//! drives a raw `ConnectSupervisor` session (or the poll report) against a real gateway, and
//! fails without its fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{
    Api, Backend, POLICY, TestGateway, TestStore, create_sandbox, eventually, get_operation,
    get_sandbox, metric, policy_with_port, sandbox_ref, state, to_sandbox, wait_for,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use pb::gateway_message::Payload as FromGateway;
use pb::supervisor_message::Payload as FromSupervisor;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

const DEADLINE: Duration = Duration::from_secs(30);
/// 2^63: the first revision the store's signed 64-bit columns cannot hold.
const BEYOND_RANGE: u64 = 1 << 63;

/// An apply-capable supervisor written by hand: it sends exactly the frames a test gives it.
struct RawSupervisor {
    tx: mpsc::Sender<pb::SupervisorMessage>,
    rx: tonic::Streaming<pb::GatewayMessage>,
    accepted: pb::SessionAccepted,
    /// Keeps the session alive however long a busy machine takes between frames.
    heartbeats: tokio::task::JoinHandle<()>,
}

impl Drop for RawSupervisor {
    fn drop(&mut self) {
        self.heartbeats.abort();
    }
}

/// Heartbeats well inside the test gateway's silence limit (three of its intervals).
fn keep_alive(tx: mpsc::Sender<pb::SupervisorMessage>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let heartbeat = pb::SupervisorMessage {
            payload: Some(FromSupervisor::Heartbeat(pb::SupervisorHeartbeat {
                sent_at: None,
            })),
        };
        while tx.send(heartbeat.clone()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

fn hello(sandbox_id: &str, image_policy: &str) -> pb::SupervisorMessage {
    pb::SupervisorMessage {
        payload: Some(FromSupervisor::Hello(pb::SupervisorHello {
            sandbox_id: sandbox_id.into(),
            instance_id: "raw".into(),
            protocol_revision: 1,
            supervisor_version: "raw-test".into(),
            supports_config_snapshots: true,
            supports_config_apply: true,
            image_policy: image_policy.into(),
            local_policy_override: false,
        })),
    }
}

/// What a snapshot says its supervisor runs once applied, as the real supervisor reports it.
fn revisions_of(update: &pb::ConfigUpdate) -> pb::AppliedRevisions {
    match &update.snapshot {
        Some(pb::config_update::Snapshot::SandboxConfig(c)) => pb::AppliedRevisions {
            policy_revision: c.policy_revision,
            policy_hash: c.policy_hash.clone(),
            global_policy_revision: c.global_policy_revision,
            global_settings_revision: c.global_settings_revision,
            workspace_settings_revision: c.workspace_settings_revision,
            sandbox_settings_revision: c.sandbox_settings_revision,
            provider_env_revision: c.provider_env_fingerprint.clone(),
        },
        Some(pb::config_update::Snapshot::ProviderEnvironment(e)) => pb::AppliedRevisions {
            provider_env_revision: e.provider_env_fingerprint.clone(),
            ..Default::default()
        },
        None => pb::AppliedRevisions::default(),
    }
}

impl RawSupervisor {
    /// Connects and reads the gateway's first frame (after answering a startup candidate
    /// with `prepared`, when the hello offers an image policy).
    async fn connect(
        gw: &TestGateway,
        sandbox_id: &str,
        credential: &str,
        image_policy: &str,
        prepared: Option<pb::startup_config_prepared::Result>,
    ) -> Result<Self, String> {
        let mut api = gw.api_with_token(Some(credential)).await;
        let (tx, outbound) = mpsc::channel(16);
        tx.send(hello(sandbox_id, image_policy)).await.unwrap();
        let mut rx = api
            .connect_supervisor(ReceiverStream::new(outbound))
            .await
            .unwrap()
            .into_inner();
        loop {
            match next_payload(&mut rx).await {
                Some(FromGateway::SessionAccepted(accepted)) => {
                    let heartbeats = keep_alive(tx.clone());
                    return Ok(Self {
                        tx,
                        rx,
                        accepted,
                        heartbeats,
                    });
                }
                Some(FromGateway::SessionRejected(rejected)) => return Err(rejected.reason),
                Some(FromGateway::StartupCandidate(_)) => {
                    let result = prepared.clone().expect("no startup answer given");
                    tx.send(pb::SupervisorMessage {
                        payload: Some(FromSupervisor::StartupPrepared(pb::StartupConfigPrepared {
                            result: Some(result),
                        })),
                    })
                    .await
                    .unwrap();
                }
                Some(_) => {}
                None => return Err("the stream ended".into()),
            }
        }
    }

    /// Applies the bootstrap as a supervisor would, reporting exactly what it was sent.
    async fn apply_bootstrap(&self) {
        let config = self.accepted.bootstrap_config.as_ref().unwrap();
        self.send(FromSupervisor::BootstrapResult(pb::BootstrapResult {
            applied: true,
            revisions: Some(revisions_of(config)),
            ..Default::default()
        }))
        .await;
    }

    async fn send(&self, payload: FromSupervisor) {
        self.tx
            .send(pb::SupervisorMessage {
                payload: Some(payload),
            })
            .await
            .unwrap();
    }

    /// The next configuration update, skipping heartbeats.
    async fn next_update(&mut self) -> pb::ConfigUpdate {
        let wait = async {
            loop {
                match next_payload(&mut self.rx).await {
                    Some(FromGateway::ConfigUpdate(update)) => return update,
                    Some(FromGateway::SessionRejected(r)) => {
                        panic!("session ended: {}", r.reason)
                    }
                    Some(_) => {}
                    None => panic!("the session ended before an update"),
                }
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .expect("no update within the deadline")
    }

    /// The reason the gateway gives when it ends the session.
    async fn rejection(&mut self) -> String {
        let wait = async {
            loop {
                match next_payload(&mut self.rx).await {
                    Some(FromGateway::SessionRejected(r)) => return r.reason,
                    Some(_) => {}
                    None => panic!("the session ended without a reason"),
                }
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .expect("the gateway kept the session open")
    }

    async fn answer(&self, update: &pb::ConfigUpdate, revisions: pb::AppliedRevisions) {
        self.send(FromSupervisor::ConfigUpdateResult(pb::ConfigUpdateResult {
            delivery_id: update.delivery_id,
            component: update.component,
            revisions: Some(revisions),
            status: pb::ConfigApplyStatus::Applied as i32,
            reason: String::new(),
            failed_closed: false,
        }))
        .await;
    }
}

async fn next_payload(rx: &mut tonic::Streaming<pb::GatewayMessage>) -> Option<FromGateway> {
    match tokio::time::timeout(DEADLINE, rx.message()).await {
        Ok(Ok(Some(message))) => message.payload,
        Ok(_) => None,
        Err(_) => panic!("no frame from the gateway within {DEADLINE:?}"),
    }
}

/// A sandbox whose raw supervisor has applied its bootstrap.
async fn connected(gw: &TestGateway, name: &str) -> (String, String, RawSupervisor) {
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, name, POLICY).await;
    let raw = RawSupervisor::connect(gw, &id, &credential, "", None)
        .await
        .unwrap();
    raw.apply_bootstrap().await;
    eventually("the sandbox runs", DEADLINE, || {
        let api = api.clone();
        let id = id.clone();
        async move {
            let sandbox = get_sandbox(&api, &id).await;
            (sandbox.lifecycle == pb::SandboxLifecycle::Running as i32).then_some(())
        }
    })
    .await;
    (id, credential, raw)
}

/// A policy write that returns at commit.
async fn write_policy(api: &Api, id: &str, port: u32) -> pb::Operation {
    let mut request = to_sandbox(id);
    request.policy_text = policy_with_port(port);
    api.clone()
        .update_config(request)
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
}

async fn report(
    gw: &TestGateway,
    credential: &str,
    request: pb::ReportPolicyStatusRequest,
) -> Result<pb::ReportPolicyStatusResponse, tonic::Status> {
    gw.api_with_token(Some(credential))
        .await
        .report_policy_status(request)
        .await
        .map(tonic::Response::into_inner)
}

fn loaded(sandbox_id: &str, revisions: pb::AppliedRevisions) -> pb::ReportPolicyStatusRequest {
    pb::ReportPolicyStatusRequest {
        sandbox_id: sandbox_id.into(),
        version: u32::try_from(revisions.policy_revision).unwrap_or(u32::MAX),
        status: pb::PolicyStatus::Loaded as i32,
        load_status: pb::PolicyLoadStatus::Loaded as i32,
        revisions: Some(revisions),
        ..Default::default()
    }
}

/// The operator's view of a sandbox: every read that the poisoned store used to fail.
async fn operator_reads_work(gw: &TestGateway, id: &str) {
    let api = gw.api().await;
    get_sandbox(&api, id).await;
    api.clone()
        .list_sandboxes(pb::ListSandboxesRequest::default())
        .await
        .unwrap();
    openshell_e2e::inspect(&api, id).await;
}

/// Defect 1: an acknowledgement and a poll report naming revision 2^63 are refused before
/// they reach the store (the session ends with a protocol error naming the field; the poll
/// call is INVALID_ARGUMENT), and every operator read of the sandbox keeps working, also
/// after a restart. Before the fix SQLite kept the value as REAL and every read of the
/// sandbox failed UNAVAILABLE; PostgreSQL retried the report forever.
async fn a_revision_beyond_the_stores_range_is_refused(backend: Backend) {
    let store = TestStore::new(backend).await;
    let gw = TestGateway::start_on(store, DeliveryMode::Push).await;
    let api = gw.api().await;
    let (id, credential, mut raw) = connected(&gw, "range").await;

    let op = write_policy(&api, &id, 8443).await;
    let update = raw.next_update().await;
    let mut forged = revisions_of(&update);
    forged.policy_revision = BEYOND_RANGE;
    raw.answer(&update, forged.clone()).await;
    let reason = raw.rejection().await;
    assert!(
        reason.contains("policy_revision") && reason.contains("largest revision"),
        "{reason}"
    );
    assert_ne!(
        state(&get_operation(&api, &op.id).await),
        pb::OperationState::Applied
    );

    let refused = report(&gw, &credential, loaded(&id, forged))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("revisions.policy_revision"),
        "{}",
        refused.message()
    );
    assert!(
        metric(
            &gw,
            "openshell_supervisor_reports_refused_total{reason=\"out_of_range\"}"
        )
        .await
            >= 2.0
    );

    operator_reads_work(&gw, &id).await;
    let gw = gw.restart().await;
    operator_reads_work(&gw, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_beyond_the_stores_range_is_refused_sqlite() {
    a_revision_beyond_the_stores_range_is_refused(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_beyond_the_stores_range_is_refused_postgres() {
    a_revision_beyond_the_stores_range_is_refused(Backend::Postgres).await;
}

/// Defect 2: an acknowledgement of the delivery of revision 2 that claims revision 7 with
/// an invented hash ends the session and settles nothing (before the fix: applied 7, the
/// operation SUPERSEDED and `--wait` exited 0). The honest acknowledgement on the next
/// session then ends the operation APPLIED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledgement_of_a_configuration_never_sent_settles_nothing() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let api = gw.api().await;
    let (id, credential, mut raw) = connected(&gw, "forged").await;

    let op = write_policy(&api, &id, 8443).await;
    let update = raw.next_update().await;
    let honest = revisions_of(&update);
    let mut forged = honest.clone();
    forged.policy_revision = honest.policy_revision + 5;
    forged.policy_hash = "invented".into();
    raw.answer(&update, forged).await;
    let reason = raw.rejection().await;
    assert!(reason.contains("never sent"), "{reason}");
    let after_forgery = get_operation(&api, &op.id).await;
    assert!(
        !matches!(
            state(&after_forgery),
            pb::OperationState::Applied | pb::OperationState::Superseded
        ),
        "{after_forgery:?}"
    );
    let sandbox = get_sandbox(&api, &id).await;
    assert_ne!(sandbox.applied_policy_revision, honest.policy_revision + 5);

    // The right revision with another hash is no better.
    let mut raw = RawSupervisor::connect(&gw, &id, &credential, "", None)
        .await
        .unwrap();
    let bootstrap = raw.accepted.bootstrap_config.clone().unwrap();
    let mut wrong_hash = revisions_of(&bootstrap);
    wrong_hash.policy_hash = "not-the-one-sent".into();
    raw.send(FromSupervisor::BootstrapResult(pb::BootstrapResult {
        applied: true,
        revisions: Some(wrong_hash),
        ..Default::default()
    }))
    .await;
    assert!(raw.rejection().await.contains("never sent"));

    let raw = RawSupervisor::connect(&gw, &id, &credential, "", None)
        .await
        .unwrap();
    raw.apply_bootstrap().await;
    let op = openshell_e2e::terminal_operation(&api, &op.id).await;
    assert_eq!(state(&op), pb::OperationState::Applied, "{op:?}");
}

/// Defect 2, poll side: a stopped sandbox is served nothing, so its report of a revision
/// committed while it was stopped is refused and recorded nowhere; an APPLIED report of an
/// older revision after a newer one does not move the applied revision backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_report_speaks_only_for_what_was_served() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Poll).await;
    let api = gw.api().await;
    let mut admin = gw.api().await;
    let (id, credential) = create_sandbox(&mut admin, "polled", POLICY).await;
    let mut poller = gw.api_with_token(Some(&credential)).await;
    let served = |poller: &mut Api| {
        let mut poller = poller.clone();
        let id = id.clone();
        async move {
            poller
                .get_sandbox_config(openshell_proto::sandbox::v1::GetSandboxConfigRequest {
                    sandbox_id: id,
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    let first = served(&mut poller).await;
    let first_revisions = pb::AppliedRevisions {
        policy_revision: first.policy_revision,
        policy_hash: first.policy_hash.clone(),
        global_policy_revision: first.global_policy_revision,
        global_settings_revision: first.global_settings_revision,
        workspace_settings_revision: first.workspace_settings_revision,
        sandbox_settings_revision: first.sandbox_settings_revision,
        provider_env_revision: first.provider_env_fingerprint.clone(),
    };

    // A revision and hash never served.
    let mut invented = first_revisions.clone();
    invented.policy_revision += 6;
    invented.policy_hash = "invented".into();
    let refused = report(&gw, &credential, loaded(&id, invented))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused.message().contains("never sent"),
        "{}",
        refused.message()
    );

    // Revision 2, written and served; then revision 1's report arrives late.
    write_policy(&api, &id, 8443).await;
    let second = served(&mut poller).await;
    let second_revisions = pb::AppliedRevisions {
        policy_revision: second.policy_revision,
        policy_hash: second.policy_hash.clone(),
        sandbox_settings_revision: second.sandbox_settings_revision,
        global_policy_revision: second.global_policy_revision,
        global_settings_revision: second.global_settings_revision,
        workspace_settings_revision: second.workspace_settings_revision,
        provider_env_revision: second.provider_env_fingerprint.clone(),
    };
    report(&gw, &credential, loaded(&id, second_revisions))
        .await
        .unwrap();
    report(&gw, &credential, loaded(&id, first_revisions))
        .await
        .unwrap();
    assert_eq!(
        get_sandbox(&api, &id).await.applied_policy_revision,
        second.policy_revision
    );

    // Stopped, then revision 3 committed: it is never served, so its report is refused.
    admin
        .set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
            sandbox: sandbox_ref(&id),
            lifecycle: pb::SandboxLifecycle::Stopped as i32,
        })
        .await
        .unwrap();
    write_policy(&api, &id, 9443).await;
    let latest = api
        .clone()
        .get_sandbox_policy(pb::GetSandboxPolicyRequest {
            sandbox: sandbox_ref(&id),
            revision: 0,
            global: false,
        })
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap();
    let third = pb::AppliedRevisions {
        policy_revision: latest.revision,
        policy_hash: latest.policy_hash.clone(),
        sandbox_settings_revision: second.sandbox_settings_revision,
        ..Default::default()
    };
    let refused = report(&gw, &credential, loaded(&id, third))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(
        get_sandbox(&api, &id).await.applied_policy_revision,
        second.policy_revision
    );
}

/// Defect 3: deleting a sandbox closes its live push session, as stopping it does: the
/// supervisor is told why, the session leaves the registry, and reconnecting is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_sandbox_closes_its_session() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let api = gw.api().await;
    let (id, credential, mut raw) = connected(&gw, "doomed").await;
    assert_eq!(gw.state().sessions.count(), 1);

    api.clone()
        .delete_sandbox(pb::DeleteSandboxRequest {
            sandbox: sandbox_ref(&id),
        })
        .await
        .unwrap();
    let reason = raw.rejection().await;
    assert!(reason.contains("deleted"), "{reason}");
    eventually("the session is gone", DEADLINE, || async {
        (gw.state().sessions.count() == 0).then_some(())
    })
    .await;
    let again = RawSupervisor::connect(&gw, &id, &credential, "", None).await;
    assert!(again.is_err(), "a deleted sandbox's supervisor reconnected");
}

/// Defect 6: on first start, a supervisor offered the operator's stored policy cannot
/// replace it with one of its own: nothing is committed, and the stored policy is what the
/// bootstrap carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_policy_does_not_replace_the_stored_one() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "kept", POLICY).await;
    let before = get_sandbox(&api, &id).await;
    let other = policy_with_port(7443);
    let raw = RawSupervisor::connect(
        &gw,
        &id,
        &credential,
        &other,
        Some(pb::startup_config_prepared::Result::PreparedPolicy(
            other.clone(),
        )),
    )
    .await
    .unwrap();
    let after = get_sandbox(&api, &id).await;
    assert_eq!(after.policy_revision, before.policy_revision);
    let bootstrap = raw.accepted.bootstrap_config.as_ref().unwrap();
    assert_eq!(
        revisions_of(bootstrap).policy_revision,
        before.policy_revision
    );
}

/// Defect 10: a `WaitForApply` stream opened with a stored token ends UNAUTHENTICATED when
/// the token is revoked, instead of delivering until its deadline; the operation goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_ends_its_open_waits() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut admin = gw.api().await;
    // No supervisor: the operation stays pending for as long as the test needs.
    let (id, _) = create_sandbox(&mut admin, "waited", POLICY).await;
    let op = write_policy(&admin, &id, 8443).await;
    let created = admin
        .create_token(pb::CreateTokenRequest {
            name: "ci-waiter".into(),
            role: pb::TokenRole::Viewer as i32,
            workspace: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut waiter = gw.api_with_token(Some(&created.secret)).await;
    let mut stream = waiter
        .wait_for_apply(pb::WaitForApplyRequest {
            id: op.id.clone(),
            wait: wait_for(Duration::from_secs(600)),
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.id, op.id);
    admin
        .revoke_token(pb::RevokeTokenRequest {
            name: "ci-waiter".into(),
        })
        .await
        .unwrap();
    let ended = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the wait went on after its token was revoked");
    let status = ended.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(status.message().contains("revoked"), "{}", status.message());
    assert_ne!(
        state(&get_operation(&admin, &op.id).await),
        pb::OperationState::Cancelled
    );
}
