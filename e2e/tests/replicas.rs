//! Replicas sharing PostgreSQL tell each other about writes: a write made
//! through one replica reaches a session held by another at once, not at
//! the owner's next reconcile; the writer's `WAIT_FOR_APPLY` wakes when the
//! owner resolves the operation (announced over PostgreSQL), not at a re-read;
//! hints are authenticated, checked and answered; an unreachable peer never
//! holds up a write.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::process::{SupervisorProcess, spawn_supervisor};
use openshell_e2e::{
    Api, Backend, POLICY, TestGateway, TestStore, create_sandbox, eventually, metric,
    policy_with_port, raw_setting, state,
};
use openshell_gateway::store::SessionOwner;
use openshell_gateway::{DeliveryMode, GatewayConfig};
use openshell_proto::v1 as pb;
use openshell_proto::v1::gateway_peer_client::GatewayPeerClient;
use tonic::transport::Channel;

const PEER_SECRET: &str = "replicas-share-this";
/// Replicas of one store must share the credential key: each one opens what another sealed.
/// (32 bytes, base64.)
const CREDENTIAL_KEY: &str = "cmVwbGljYXMtc2hhcmUtb25lLWNyZWRlbnRpYWwta2U=";
const DEADLINE: Duration = Duration::from_secs(30);
/// Long enough that only a hint, never a reconcile or replay pass, can
/// deliver a change within a test's wait.
const NOT_WITHIN_A_TEST: Duration = Duration::from_secs(600);

/// A push gateway on a store of its own, set up by [`as_replica`].
async fn replica(backend: Backend, id: &'static str) -> TestGateway {
    TestGateway::start_with(
        TestStore::new(backend).await,
        DeliveryMode::Push,
        as_replica(id),
    )
    .await
}

fn as_replica(id: &'static str) -> impl FnOnce(&mut GatewayConfig) {
    move |config| {
        config.replica_id = id.into();
        config.peer_secret = Some(PEER_SECRET.into());
        config.credential_key = Some(CREDENTIAL_KEY.into());
        config.delivery.reconcile_interval = NOT_WITHIN_A_TEST;
        config.delivery.reconcile_first_min = NOT_WITHIN_A_TEST;
        config.delivery.intent_replay_interval = NOT_WITHIN_A_TEST;
        // A wait on another replica's resolution ends only by its announcement.
        config.delivery.wait_recheck_interval = NOT_WITHIN_A_TEST;
    }
}

/// Two replicas on one fresh PostgreSQL database, in push mode.
async fn two_replicas() -> (TestGateway, TestGateway) {
    two_replicas_configured(|_| {}).await
}

/// Two replicas as [`two_replicas`], each configured further by `tweak`.
async fn two_replicas_configured(tweak: fn(&mut GatewayConfig)) -> (TestGateway, TestGateway) {
    let first = TestGateway::start_with(
        TestStore::new(Backend::Postgres).await,
        DeliveryMode::Push,
        |config| {
            as_replica("replica-a")(config);
            tweak(config);
        },
    )
    .await;
    let shared = TestStore {
        backend: Backend::Postgres,
        url: first.store.url.clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let second = TestGateway::start_with(shared, DeliveryMode::Push, |config| {
        as_replica("replica-b")(config);
        tweak(config);
    })
    .await;
    (first, second)
}

/// Runs one statement on the test's PostgreSQL database, behind the gateway's back.
async fn pg_execute(url: &str, sql: impl Into<String>) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.into()))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// Intents recorded long ago (at time 0) and since.
async fn intent_counts(url: &str) -> (i64, i64) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_as(
        "SELECT COUNT(*) FILTER (WHERE created_at = 0), COUNT(*) FILTER (WHERE created_at > 0) \
         FROM fanout_intents",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

async fn peer_client(gateway: &TestGateway) -> GatewayPeerClient<Channel> {
    let channel = Channel::from_shared(gateway.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    GatewayPeerClient::new(channel)
}

fn hint(
    scope: pb::PeerScope,
    scope_id: &str,
    session_id: &str,
) -> pb::PeerNotifyConfigUpdateRequest {
    pb::PeerNotifyConfigUpdateRequest {
        scope: scope as i32,
        scope_id: scope_id.into(),
        session_id: session_id.into(),
        components: vec!["sandbox_config".into()],
        from_replica: "replica-test".into(),
        peer_secret: PEER_SECRET.into(),
    }
}

/// A sandbox created through `first` whose supervisor connects to
/// `second`, once the session-owner index says so.
async fn supervised_by_second(
    first: &TestGateway,
    second: &TestGateway,
    api: &mut Api,
) -> (String, SupervisorProcess, SessionOwner) {
    let (id, credential) = create_sandbox(api, "web", POLICY).await;
    let dir = first.store.dir.path().join("web");
    let supervisor = spawn_supervisor(&second.endpoint(), &id, &credential, &dir, &[]);
    let owner = eventually("the session to be owned by replica-b", DEADLINE, || async {
        let owner = first.state().store.session_owner(&id).await.ok()??;
        (owner.replica_id == "replica-b").then_some(owner)
    })
    .await;
    (id, supervisor, owner)
}

/// `request` sent with `WAIT_FOR_APPLY`; the operation it returns. The wait
/// is as long as the gateway allows (10 minutes): a wait that no wake-up ends
/// (re-reads are not due within a test either) outlasts the test's own limit,
/// where a wait ended at its deadline would re-read and look the same.
async fn wait_for_apply(api: &mut Api, request: pb::UpdateConfigRequest) -> pb::Operation {
    api.update_config(pb::UpdateConfigRequest {
        mode: pb::UpdateMode::WaitForApply as i32,
        wait: openshell_e2e::wait_for(Duration::from_secs(600)),
        ..request
    })
    .await
    .unwrap()
    .into_inner()
    .operation
    .unwrap()
}

fn policy_write(sandbox: &str, port: u32) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        sandbox: String::from(sandbox),
        policy_text: policy_with_port(port),
        ..Default::default()
    }
}

fn global_setting(key: &str, raw: &str) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        global: true,
        settings: vec![raw_setting(key, raw)],
        ..Default::default()
    }
}

/// The writer's waits end although no re-read is due within the test: replica-b
/// resolved the operations and announced them (`store/notices.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_replica_reaches_a_session_held_by_another() {
    let (first, second) = two_replicas().await;
    let mut api = first.api().await;
    let (id, supervisor, _) = supervised_by_second(&first, &second, &mut api).await;

    let applied = wait_for_apply(&mut api, policy_write(&id, 8443)).await;
    assert_eq!(state(&applied), pb::OperationState::Applied, "{applied:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );
    let delivered = "openshell_peer_notifies_total{result=\"delivered\"}";
    assert!(metric(&first, delivered).await >= 1.0);

    // A fleet write goes to every live peer.
    let global = wait_for_apply(&mut api, global_setting("log_level", "debug")).await;
    assert_eq!(state(&global), pb::OperationState::Applied, "{global:?}");
    assert!(metric(&first, delivered).await >= 2.0);

    let info = api
        .get_gateway_info(pb::GetGatewayInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.details.unwrap().replicas, ["replica-a", "replica-b"]);

    // The replica that owns the session sends itself nothing.
    assert_eq!(metric(&second, delivered).await, 0.0);
    let debug = format!("{:?}", first.state().peers);
    assert!(
        debug.contains("replica-a") && !debug.contains(PEER_SECRET),
        "{debug}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_are_authenticated_checked_and_answered() {
    let gw = replica(Backend::Sqlite, "replica-a").await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "web", POLICY).await;
    let mut peer = peer_client(&gw).await;

    let mut wrong = hint(pb::PeerScope::Sandbox, &id, "");
    wrong.peer_secret = "guess".into();
    let refused = peer.peer_notify_config_update(wrong).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert!(!refused.message().contains(PEER_SECRET));

    let answer = |r: pb::PeerNotifyConfigUpdateResponse| r.result();
    let no_session = peer
        .peer_notify_config_update(hint(pb::PeerScope::Sandbox, &id, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer(no_session), pb::PeerNotifyResult::NoSession);

    let dir = gw.store.dir.path().join("web");
    let _supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    let session_id = eventually("the push session", DEADLINE, || async {
        gw.state().publisher.get(&id).map(|d| d.session_id.clone())
    })
    .await;
    let stale = peer
        .peer_notify_config_update(hint(pb::PeerScope::Sandbox, &id, "an-older-session"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer(stale), pb::PeerNotifyResult::StaleOwner);
    for request in [
        hint(pb::PeerScope::Sandbox, &id, &session_id),
        hint(pb::PeerScope::Workspace, "default", ""),
        hint(pb::PeerScope::Global, "", ""),
    ] {
        let delivered = peer.peer_notify_config_update(request).await.unwrap();
        assert_eq!(
            answer(delivered.into_inner()),
            pb::PeerNotifyResult::Delivered
        );
    }

    let mut unknown = hint(pb::PeerScope::Global, "", "");
    unknown.components = vec!["policy".into()];
    let invalid = peer.peer_notify_config_update(unknown).await.unwrap_err();
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);
    assert!(
        invalid
            .message()
            .starts_with("components[0]: unknown component"),
        "{}",
        invalid.message()
    );
    let unspecified = peer
        .peer_notify_config_update(hint(pb::PeerScope::Unspecified, "", ""))
        .await
        .unwrap_err();
    assert_eq!(unspecified.code(), tonic::Code::InvalidArgument);

    // A replica in poll mode has nothing to push; one without a secret takes no hints.
    let polling = TestGateway::start_with(
        TestStore::new(Backend::Sqlite).await,
        DeliveryMode::Poll,
        as_replica("replica-p"),
    )
    .await;
    let unsupported = peer_client(&polling)
        .await
        .peer_notify_config_update(hint(pb::PeerScope::Global, "", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer(unsupported), pb::PeerNotifyResult::UnsupportedPeer);
    let closed = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let status = peer_client(&closed)
        .await
        .peer_notify_config_update(hint(pb::PeerScope::Global, "", ""))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_peer_costs_a_write_nothing_and_is_counted() {
    let (first, second) = two_replicas().await;
    // The second replica stops: it leaves the registry, and nothing is sent to it.
    second.handle.shutdown().await;
    let live = first
        .state()
        .store
        .live_peers("replica-a", 0)
        .await
        .unwrap();
    assert!(live.is_empty(), "{live:?}");
    // A replica that died without leaving: registered, fresh heartbeat, nobody listening.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    first
        .state()
        .store
        .register_replica("replica-gone", &address)
        .await
        .unwrap();

    let mut api = first.api().await;
    let committed = api
        .update_config(global_setting("log_level", "warn"))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert!(!committed.id.is_empty());
    eventually("the unreachable peer to be counted", DEADLINE, || async {
        (metric(
            &first,
            "openshell_peer_notifies_total{result=\"unreachable\"}",
        )
        .await
            >= 1.0)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_serving_tls_hint_each_other_over_tls() {
    let certs = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let tls = openshell_gateway::config::TlsFiles {
        cert: certs.path().join("cert.pem"),
        key: certs.path().join("key.pem"),
    };
    std::fs::write(&tls.cert, cert.cert.pem()).unwrap();
    std::fs::write(&tls.key, cert.signing_key.serialize_pem()).unwrap();
    let with_tls = |id: &'static str, tls: openshell_gateway::config::TlsFiles| {
        move |config: &mut GatewayConfig| {
            as_replica(id)(config);
            config.tls = Some(tls);
        }
    };
    let first = TestGateway::start_with(
        TestStore::new(Backend::Postgres).await,
        DeliveryMode::Push,
        with_tls("replica-a", tls.clone()),
    )
    .await;
    let shared = TestStore {
        backend: Backend::Postgres,
        url: first.store.url.clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let second =
        TestGateway::start_with(shared, DeliveryMode::Push, with_tls("replica-b", tls)).await;
    let peers = first
        .state()
        .store
        .live_peers("replica-a", 0)
        .await
        .unwrap();
    assert_eq!(peers.len(), 1);
    assert_eq!(
        peers[0].peer_address,
        format!("https://{}", second.handle.addr)
    );

    // The second replica has no sessions: its answer, over TLS, is no_session.
    let endpoint = format!("https://localhost:{}", first.handle.addr.port());
    let client = openshell_sdk::Client::connect(
        openshell_sdk::ClientOptions::new(endpoint)
            .with_token(openshell_e2e::TOKEN)
            .with_ca_cert_pem(cert.cert.pem().into_bytes()),
    )
    .await
    .unwrap();
    client
        .update_config(
            openshell_sdk::UpdateConfig::new(openshell_sdk::Target::Global)
                .set("log_level", "info"),
        )
        .await
        .unwrap();
    eventually("the TLS peer's answer", DEADLINE, || async {
        (metric(
            &first,
            "openshell_peer_notifies_total{result=\"no_session\"}",
        )
        .await
            >= 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        metric(
            &first,
            "openshell_peer_notifies_total{result=\"unreachable\"}"
        )
        .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_hints_a_replica_replays_the_others_intents_within_seconds() {
    let (first, second) = two_replicas_configured(|config| {
        config.peer_secret = None;
        config.delivery.intent_replay_interval = Duration::from_millis(200);
    })
    .await;
    assert!(first.state().peers.is_none());
    let mut api = first.api().await;
    let (id, supervisor, _) = supervised_by_second(&first, &second, &mut api).await;
    let applied = wait_for_apply(&mut api, policy_write(&id, 8443)).await;
    assert_eq!(state(&applied), pb::OperationState::Applied, "{applied:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );
    assert_eq!(
        metric(
            &first,
            "openshell_peer_notifies_total{result=\"delivered\"}"
        )
        .await,
        0.0,
        "no hint was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_intents_and_silent_replicas_are_removed_and_a_sqlite_store_records_no_intents() {
    let gw = replica(Backend::Postgres, "replica-a").await;
    // An intent recorded long ago (ids grow with time: it comes first)…
    pg_execute(
        &gw.store.url,
        "INSERT INTO fanout_intents (scope, scope_id, components, created_at, replica_id) \
         VALUES ('global', '', 'sandbox_config', 0, 'replica-gone')",
    )
    .await;
    // …and fresh ones, from writes now.
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "web", POLICY).await;
    for port in [8443, 9443] {
        api.update_config(policy_write(&id, port)).await.unwrap();
    }
    let (_, fresh) = intent_counts(&gw.store.url).await;
    assert_eq!(fresh, 2, "one intent per write");
    // Housekeeping, at start and every minute, may have come first.
    openshell_gateway::peers::replay::remove_old_intents(&gw.state().store).await;
    assert_eq!(
        intent_counts(&gw.store.url).await,
        (0, fresh),
        "only the old one goes"
    );

    // A replica that crashed long ago leaves the registry; a live one stays.
    let store = &gw.state().store;
    store
        .register_replica("replica-crashed", "http://127.0.0.1:9")
        .await
        .unwrap();
    pg_execute(
        &gw.store.url,
        "UPDATE replicas SET heartbeat_at = 0 WHERE replica_id = 'replica-crashed'",
    )
    .await;
    let an_hour_ago = openshell_gateway::store::now_ms() - 3_600_000;
    assert_eq!(store.remove_silent_replicas(an_hour_ago).await.unwrap(), 1);
    assert!(
        store.heartbeat_replica("replica-a").await.unwrap(),
        "the live replica stays"
    );

    let sqlite = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = sqlite.api().await;
    let (id, _) = create_sandbox(&mut api, "web", POLICY).await;
    api.update_config(policy_write(&id, 8443)).await.unwrap();
    let mut conn = {
        use sqlx::Connection;
        sqlx::SqliteConnection::connect(&sqlite.store.url)
            .await
            .unwrap()
    };
    let count: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM fanout_intents")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(count.0, 0, "one replica has nothing to replay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_to_a_stale_owner_is_sent_once_more_then_dropped() {
    let (first, second) = two_replicas().await;
    let mut api = first.api().await;
    let (id, _supervisor, owner) = supervised_by_second(&first, &second, &mut api).await;
    let set_owner_session = |session: &str| {
        pg_execute(
            &first.store.url,
            format!("UPDATE session_owners SET session_id = '{session}' WHERE sandbox_id = '{id}'"),
        )
    };
    let stale = "openshell_peer_notifies_total{result=\"stale_owner\"}";
    let delivered = "openshell_peer_notifies_total{result=\"delivered\"}";

    // The index names a session replica-b no longer holds: the hint comes
    // back stale, the owner is looked up again (still stale), and it stops.
    set_owner_session("an-older-session").await;
    api.update_config(policy_write(&id, 8443)).await.unwrap();
    eventually("both stale answers", DEADLINE, || async {
        (metric(&first, stale).await >= 2.0).then_some(())
    })
    .await;

    // With the index right again, the next write is delivered, and the
    // stale hint was not retried meanwhile.
    set_owner_session(&owner.session_id).await;
    api.update_config(policy_write(&id, 9443)).await.unwrap();
    eventually("the hint to be delivered", DEADLINE, || async {
        (metric(&first, delivered).await >= 1.0).then_some(())
    })
    .await;
    assert_eq!(metric(&first, stale).await, 2.0);
}

/// Every kind of write made through one replica reaches a session the other replica owns by
/// its fanout intent alone (no hints, no reconcile): sandbox policy and settings, workspace and
/// global settings, provider attach, update and detach, and a sandbox stop and start. Before
/// each write recorded the publication it made, a provider update's intent named only the
/// provider environment and a stop or start recorded none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_write_reaches_the_other_replicas_session_by_its_intent() {
    let (first, second) = two_replicas_configured(|config| {
        config.peer_secret = None;
        config.delivery.intent_replay_interval = Duration::from_millis(200);
    })
    .await;
    let mut api = first.api().await;
    let (id, supervisor, _) = supervised_by_second(&first, &second, &mut api).await;
    let file_has = |name: &'static str, needle: String| {
        let supervisor = &supervisor;
        async move {
            eventually(
                &format!("{name} to contain {needle:?}"),
                DEADLINE,
                || async {
                    supervisor
                        .active_file(name)
                        .filter(|text| text.contains(&needle))
                        .map(|_| ())
                },
            )
            .await;
        }
    };
    let writer = api.clone();
    let commit = |request: pb::UpdateConfigRequest| {
        let mut api = writer.clone();
        async move { api.update_config(request).await.unwrap() }
    };

    commit(policy_write(&id, 8443)).await;
    file_has("policy.json", "8443".into()).await;
    commit(pb::UpdateConfigRequest {
        sandbox: String::from(&id),
        settings: vec![raw_setting("environment_label", "sandbox-scope")],
        ..Default::default()
    })
    .await;
    file_has("settings.json", "sandbox-scope".into()).await;
    commit(pb::UpdateConfigRequest {
        workspace_settings: true,
        workspace_scope: openshell_e2e::workspace_scope("default"),
        settings: vec![raw_setting("log_rate_limit_per_second", "4321")],
        ..Default::default()
    })
    .await;
    file_has("settings.json", "4321".into()).await;
    commit(global_setting("ocsf_schema_version", "1.3.0-global")).await;
    file_has("settings.json", "1.3.0-global".into()).await;

    let value = |org: &str| pb::ProviderValueInput {
        name: "GITHUB_ORG".into(),
        value: org.into(),
        class: pb::ValueClass::NonSecret as i32,
        expires_at: None,
    };
    api.create_provider(pb::CreateProviderRequest {
        name: "github".into(),
        r#type: "github".into(),
        values: vec![value("acme-org")],
        ..Default::default()
    })
    .await
    .unwrap();
    api.attach_provider(pb::AttachProviderRequest {
        sandbox: openshell_e2e::sandbox_ref(&id),
        provider: "github".into(),
    })
    .await
    .unwrap();
    file_has("provider-env.json", "acme-org".into()).await;
    api.update_provider(pb::UpdateProviderRequest {
        provider: "github".into(),
        values: vec![value("beta-org")],
        ..Default::default()
    })
    .await
    .unwrap();
    file_has("provider-env.json", "beta-org".into()).await;
    api.detach_provider(pb::DetachProviderRequest {
        sandbox: openshell_e2e::sandbox_ref(&id),
        provider: "github".into(),
    })
    .await
    .unwrap();
    eventually("the detached provider's value to go", DEADLINE, || async {
        supervisor
            .active_file("provider-env.json")
            .filter(|text| !text.contains("beta-org"))
            .map(|_| ())
    })
    .await;

    let lifecycle = |wanted: pb::SandboxLifecycle| pb::SetSandboxLifecycleRequest {
        sandbox: openshell_e2e::sandbox_ref(&id),
        lifecycle: wanted as i32,
    };
    api.set_sandbox_lifecycle(lifecycle(pb::SandboxLifecycle::Stopped))
        .await
        .unwrap();
    commit(policy_write(&id, 9443)).await;
    api.set_sandbox_lifecycle(lifecycle(pb::SandboxLifecycle::Pending))
        .await
        .unwrap();
    file_has("policy.json", "9443".into()).await;
    assert_eq!(
        metric(
            &second,
            "openshell_peer_notifies_total{result=\"delivered\"}"
        )
        .await,
        0.0,
        "no hint was sent"
    );
}

/// A supervisor given both replicas' addresses keeps its sandbox supplied when the replica
/// holding its session stops: it reconnects to the other, where the next write applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_given_every_replica_moves_to_another_when_its_replica_stops() {
    let (first, second) = two_replicas().await;
    let mut api = first.api().await;
    let (id, credential) = create_sandbox(&mut api, "web", POLICY).await;
    let dir = first.store.dir.path().join("web");
    let both = format!("{},{}", first.endpoint(), second.endpoint());
    let supervisor = spawn_supervisor(&both, &id, &credential, &dir, &[]);
    let owner = eventually("a replica to hold the session", DEADLINE, || async {
        first.state().store.session_owner(&id).await.ok()?
    })
    .await;

    let (stopped, survivor) = if owner.replica_id == "replica-a" {
        (first, second)
    } else {
        (second, first)
    };
    let TestGateway {
        handle,
        store: _kept,
    } = stopped;
    handle.shutdown().await;

    let mut api = survivor.api().await;
    let survivor_id = survivor.state().config.replica_id.clone();
    let applied = wait_for_apply(&mut api, policy_write(&id, 8555)).await;
    assert_eq!(state(&applied), pb::OperationState::Applied, "{applied:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8555")
    );
    eventually("the survivor to own the session", DEADLINE, || async {
        let owner = survivor.state().store.session_owner(&id).await.ok()??;
        (owner.replica_id == survivor_id).then_some(())
    })
    .await;
}

/// An address that never answers, listed first, does not keep a supervisor from the
/// gateway listed after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_address_in_the_list_does_not_keep_a_supervisor_from_the_live_one() {
    let gw = replica(Backend::Sqlite, "replica-a").await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "web", POLICY).await;
    let dead = format!("http://127.0.0.1:{}", openshell_e2e::process::free_port());
    let list = format!("{dead},{}", gw.endpoint());
    let dir = gw.store.dir.path().join("web");
    let supervisor = spawn_supervisor(&list, &id, &credential, &dir, &[]);
    let applied = wait_for_apply(&mut api, policy_write(&id, 8556)).await;
    assert_eq!(state(&applied), pb::OperationState::Applied, "{applied:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8556")
    );
}
