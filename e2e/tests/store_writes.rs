//! Writes sent to the store's writer thread (as while a fanout crowds the
//! gateway's runtime): on SQLite a thread of the store's own, and on either
//! backend they run to the end once begun, whether or not the caller still
//! waits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{Backend, POLICY, TestGateway, create_sandbox, eventually};
use openshell_gateway::config_update::{ConfigTarget, ConfigUpdate, commit_update};
use openshell_gateway::store::{StoreError, WritePlace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writes_run_on_the_stores_writer_thread() {
    let gateway = TestGateway::start(Backend::Sqlite).await;
    let thread = gateway
        .state()
        .store
        .run_write(WritePlace::WriterThread, async {
            Ok::<_, StoreError>(std::thread::current().name().map(str::to_string))
        })
        .await
        .unwrap();
    assert_eq!(thread.as_deref(), Some("openshell-store-writes"));
}

async fn a_write_commits_after_its_caller_hangs_up(backend: Backend) {
    let gateway = TestGateway::start(backend).await;
    let mut api = gateway.api().await;
    let (sandbox, _) = create_sandbox(&mut api, "hang-up", POLICY).await;
    let store = &gateway.state().store;
    let before = store.policy_revision_count(&sandbox).await.unwrap();
    let update = ConfigUpdate {
        target: ConfigTarget::Sandbox(sandbox.clone()),
        policy: Some(POLICY.replace("443", "8443")),
        policy_edits: Vec::new(),
        expected_policy_revision: None,
        clear_global_policy: false,
        settings: Vec::new(),
        idempotency_key: None,
        caller: "test".into(),
    };
    // Another transaction holds the sandbox (and, on SQLite, the writer), so
    // the write cannot finish before its caller gives up on it.
    let mut holder = store.begin_write().await.unwrap();
    holder
        .lock_sandboxes(std::slice::from_ref(&sandbox))
        .await
        .unwrap();
    // Polled once, then dropped: the caller stops waiting right after asking.
    let abandoned = tokio::time::timeout(
        Duration::ZERO,
        commit_update(store, &update, 60_000, WritePlace::WriterThread),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the write finished while the sandbox was held"
    );
    drop(holder);
    eventually(
        "the abandoned write to commit",
        Duration::from_secs(30),
        || async {
            (store.policy_revision_count(&sandbox).await.unwrap() == before + 1).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_commits_after_its_caller_hangs_up_on_sqlite() {
    a_write_commits_after_its_caller_hangs_up(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_commits_after_its_caller_hangs_up_on_postgres() {
    a_write_commits_after_its_caller_hangs_up(Backend::Postgres).await;
}
