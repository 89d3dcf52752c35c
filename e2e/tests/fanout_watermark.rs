//! The fanout watermark, how far a replica has replayed the other replicas' intents, is kept
//! in the store: it survives a restart on either backend, never moves back, and a replica on
//! PostgreSQL saves it as it replays, then resumes from it after a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{Backend, TestGateway, TestStore, eventually};
use openshell_gateway::DeliveryMode;
use openshell_gateway::peers::replay::resume_point;

const DEADLINE: Duration = Duration::from_secs(30);

async fn the_fanout_watermark_survives_a_restart(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let store = &gw.state().store;
    assert_eq!(store.fanout_watermark("replica-x").await.unwrap(), None);
    store.save_fanout_watermark("replica-x", 7).await.unwrap();
    // A late save from an older pass does not move it back.
    store.save_fanout_watermark("replica-x", 5).await.unwrap();
    store.save_fanout_watermark("replica-y", 2).await.unwrap();

    let gw = gw.restart().await;
    let store = &gw.state().store;
    assert_eq!(
        store.fanout_watermark("replica-x").await.unwrap(),
        Some(7),
        "{backend:?}"
    );
    assert_eq!(store.fanout_watermark("replica-y").await.unwrap(), Some(2));
    assert_eq!(store.fanout_watermark("replica-z").await.unwrap(), None);
    // Only watermarks not saved since the cut-off are removed (on PostgreSQL, the gateway's
    // own replay saves one too).
    assert_eq!(store.remove_fanout_watermarks_before(0).await.unwrap(), 0);
    let removed = store
        .remove_fanout_watermarks_before(i64::MAX)
        .await
        .unwrap();
    assert!(removed >= 2, "{backend:?}: {removed}");
    assert_eq!(store.fanout_watermark("replica-x").await.unwrap(), None);
    assert_eq!(store.fanout_watermark("replica-y").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fanout_watermark_survives_a_restart_on_sqlite() {
    the_fanout_watermark_survives_a_restart(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fanout_watermark_survives_a_restart_on_postgres() {
    the_fanout_watermark_survives_a_restart(Backend::Postgres).await;
}

/// Records an intent of another replica, old enough to be replayed at once and young enough
/// to be kept.
async fn record_intent(url: &str, sandbox: &str) -> i64 {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO fanout_intents (scope, scope_id, components, created_at, replica_id) \
         VALUES ('sandbox', $1, 'sandbox_config', $2, 'replica-a') RETURNING id",
    )
    .bind(sandbox)
    .bind(openshell_gateway::store::now_ms() - 5_000)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    id
}

/// A replica on PostgreSQL with a stable id.
async fn replica_b(store: TestStore) -> TestGateway {
    TestGateway::start_with(store, DeliveryMode::Push, |config| {
        config.replica_id = "replica-b".into();
        config.delivery.intent_replay_interval = Duration::from_millis(100);
    })
    .await
}

async fn saved_watermark(gw: &TestGateway) -> Option<i64> {
    gw.state()
        .store
        .fanout_watermark("replica-b")
        .await
        .unwrap()
}

async fn saved_watermark_reaches(gw: &TestGateway, id: i64) {
    eventually(
        &format!("replica-b's saved watermark to reach intent {id}"),
        DEADLINE,
        || async { (saved_watermark(gw).await == Some(id)).then_some(()) },
    )
    .await;
}

/// The replay saves its watermark as it moves; intents recorded while the replica is down
/// lie after it, so the restarted replica resumes there (and replays them), not after the
/// newest intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_saves_its_watermark_as_it_replays_and_resumes_from_it_after_a_restart() {
    let gw = replica_b(TestStore::new(Backend::Postgres).await).await;
    let url = gw.store.url.clone();
    let first = record_intent(&url, "sb-1").await;
    saved_watermark_reaches(&gw, first).await;

    let TestGateway { handle, store } = gw;
    handle.shutdown().await;
    let while_down = record_intent(&url, "sb-2").await;
    let newest = record_intent(&url, "sb-3").await;
    assert!(first < while_down && while_down < newest);
    // Where the replica will start, read from the store before it does.
    let reopened = openshell_gateway::store::Store::open(
        &openshell_gateway::store::StoreOptions {
            url: url.clone(),
            max_connections: 1,
            replica_id: "replica-b".into(),
            wait_recheck_interval: openshell_gateway::store::DEFAULT_WAIT_RECHECK,
        },
        openshell_gateway::crypto::CredentialCipher::load(None, store.dir.path()).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        resume_point(&reopened, "replica-b").await.unwrap(),
        first,
        "resumes after the last intent it replayed"
    );
    assert_eq!(
        resume_point(&reopened, "replica-new").await.unwrap(),
        newest
    );
    drop(reopened);

    let gw = replica_b(store).await;
    saved_watermark_reaches(&gw, newest).await;
}

/// A push session of `sandbox` registered on `gw`'s publisher, with no supervisor behind it:
/// enough to see whether the replay marked it.
fn listening_session(
    gw: &TestGateway,
    sandbox: &str,
) -> std::sync::Arc<openshell_gateway::delivery::task::SessionDelivery> {
    let session = std::sync::Arc::new(openshell_gateway::delivery::task::SessionDelivery::new(
        sandbox.into(),
        format!("ss-{sandbox}"),
        "default".into(),
        1,
        true,
    ));
    gw.state().publisher.register(session.clone());
    session
}

fn marked(session: &openshell_gateway::delivery::task::SessionDelivery) -> bool {
    let (components, _) = session.diagnostics();
    components.iter().any(|(c, state)| {
        *c == openshell_gateway::delivery::Component::SandboxConfig && state.dirty
    })
}

/// A write that took its intent id before another write's, and commits after replica-b has
/// replayed that later one (a slow commit on a busy machine), is replayed too: replica-b keeps
/// looking for the missing id, and its saved watermark stays below it until it is replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_committed_after_a_later_one_is_replayed_on_postgres() {
    use sqlx::Connection;
    let gw = replica_b(TestStore::new(Backend::Postgres).await).await;
    let url = gw.store.url.clone();
    let late_session = listening_session(&gw, "sb-late");
    let next_session = listening_session(&gw, "sb-next");
    let first = record_intent(&url, "sb-first").await;
    saved_watermark_reaches(&gw, first).await;

    let mut slow = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut slow_write = slow.begin().await.unwrap();
    let (late,): (i64,) = sqlx::query_as(
        "INSERT INTO fanout_intents (scope, scope_id, components, created_at, replica_id) \
         VALUES ('sandbox', 'sb-late', 'sandbox_config', $1, 'replica-a') RETURNING id",
    )
    .bind(openshell_gateway::store::now_ms() - 5_000)
    .fetch_one(&mut *slow_write)
    .await
    .unwrap();
    let next = record_intent(&url, "sb-next").await;
    assert!(first < late && late < next);
    eventually("replica-b to replay the later intent", DEADLINE, || async {
        marked(&next_session).then_some(())
    })
    .await;
    assert!(!marked(&late_session));
    assert_eq!(
        saved_watermark(&gw).await,
        Some(first),
        "the watermark waits below the missing id"
    );

    slow_write.commit().await.unwrap();
    eventually("replica-b to replay the late intent", DEADLINE, || async {
        marked(&late_session).then_some(())
    })
    .await;
    saved_watermark_reaches(&gw, next).await;
}
