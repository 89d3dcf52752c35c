//! SQLite commits leave their pages in the write-ahead log; the gateway
//! copies them into the database file in the background, so a commit does
//! not pay for that copy and its fsync.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{Backend, POLICY, TestGateway, create_sandbox, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_pages_reach_the_database_file_without_a_commit_checkpointing() {
    let gateway = TestGateway::start(Backend::Sqlite).await;
    let db_file = gateway.store.data_dir().join("gateway.db");
    let size = || std::fs::metadata(&db_file).map(|m| m.len()).unwrap_or(0);
    // Whatever the migrations wrote has had its checkpoint chance first.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = size();

    let mut api = gateway.api().await;
    for i in 0..100 {
        create_sandbox(&mut api, &format!("wal-{i}"), POLICY).await;
    }
    // Far below the writer's own checkpoint threshold (100,000 pages), so only
    // the background checkpoint can grow the database file.
    let grown = eventually(
        "the database file to take in the committed pages",
        Duration::from_secs(30),
        || async {
            let now = size();
            (now >= before + 32 * 1024).then_some(now)
        },
    )
    .await;
    assert!(grown > before);
}
