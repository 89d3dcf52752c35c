//! SQLite commits leave their pages in the write-ahead log; the gateway
//! copies them into the database file in the background, so a commit does
//! not pay for that copy and its fsync.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{Backend, POLICY, TestGateway, create_sandbox, eventually};
use sqlx::Connection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_pages_reach_the_database_file_without_a_commit_checkpointing() {
    let gateway = TestGateway::start(Backend::Sqlite).await;
    let db_file = gateway.store.data_dir().join("gateway.db");
    let size = || std::fs::metadata(&db_file).map(|m| m.len()).unwrap_or(0);
    // Every page committed so far (the migrations') is copied into the file first, so that
    // the file grows below only by the pages committed there.
    let mut conn = sqlx::SqliteConnection::connect(&gateway.store.url)
        .await
        .unwrap();
    let (busy, log, copied): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(FULL)")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!((busy, log), (0, copied), "the checkpoint copied every page");
    conn.close().await.unwrap();
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
