//! Writes sent to the store's writer thread (as while a fanout crowds the
//! gateway's runtime): on SQLite a thread of the store's own, and on either
//! backend they run to the end once begun, whether or not the caller still
//! waits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::time::Duration;

use openshell_e2e::{Backend, POLICY, TestGateway, create_sandbox, eventually, metric};
use openshell_gateway::config_update::{ConfigTarget, ConfigUpdate, SettingChange, commit_update};
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
        commit_update(
            &gateway.state().config_writer,
            &update,
            60_000,
            WritePlace::WriterThread,
        ),
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

fn settings_write(sandbox: &str, value: u32) -> ConfigUpdate {
    ConfigUpdate {
        target: ConfigTarget::Sandbox(sandbox.into()),
        policy: None,
        policy_edits: Vec::new(),
        expected_policy_revision: None,
        clear_global_policy: false,
        settings: vec![SettingChange::Raw(
            "log_rate_limit_per_second".into(),
            value.to_string(),
        )],
        idempotency_key: None,
        caller: "test".into(),
    }
}

/// Writes to several sandboxes of one lane, queued while a transaction
/// holds the lane's first write: they commit as one group, each answering
/// with its own sandbox's revisions; two writes to one sandbox commit in the
/// order they came; one refused write costs the others nothing.
async fn queued_writes_commit_as_a_group(backend: Backend) {
    let gateway = TestGateway::start(backend).await;
    let mut api = gateway.api().await;
    let writer = gateway.state().config_writer.clone();
    let store = writer.store().clone();
    // Sandboxes in the lane of the first one, which is held.
    let mut sandboxes = Vec::new();
    let mut lane = None;
    for i in 0..40 {
        let (id, _) = create_sandbox(&mut api, &format!("group-{i}"), POLICY).await;
        let this_lane = writer.lane_of(&id);
        if *lane.get_or_insert(this_lane) == this_lane {
            sandboxes.push(id);
        }
        if sandboxes.len() == 5 {
            break;
        }
    }
    assert_eq!(sandboxes.len(), 5, "five sandboxes share a lane");
    let (held, grouped) = sandboxes.split_first().unwrap();

    for (round, base) in [("refused", 100), ("all committed", 200)] {
        let refuse = round == "refused";
        let before = writer.counts().groups_committed.load(Ordering::SeqCst);
        let failed_before = writer.counts().groups_failed.load(Ordering::SeqCst);
        let revisions_before = {
            let mut revisions = Vec::new();
            for id in grouped {
                revisions.push(store.get_sandbox(id).await.unwrap().settings_revision);
            }
            revisions
        };
        let mut holder = store.begin_write().await.unwrap();
        holder
            .lock_sandboxes(std::slice::from_ref(held))
            .await
            .unwrap();
        let started = writer.counts().writes_started.load(Ordering::SeqCst);
        let first = tokio::spawn({
            let writer = writer.clone();
            let update = settings_write(held, 1);
            async move { commit_update(&writer, &update, 60_000, WritePlace::Caller).await }
        });
        eventually(
            "the lane to start the held write",
            Duration::from_secs(30),
            || {
                let now = writer.counts().writes_started.load(Ordering::SeqCst);
                async move { (now == started + 1).then_some(()) }
            },
        )
        .await;
        // Queued one at a time, so the order they reach the lane is known.
        let mut queued = Vec::new();
        let mut sends = vec![(grouped[0].clone(), base), (grouped[0].clone(), base + 1)];
        sends.extend(grouped[1..].iter().map(|id| (id.clone(), base + 2)));
        for (n, (id, value)) in sends.into_iter().enumerate() {
            let mut update = settings_write(&id, value);
            if refuse && n == 2 {
                update.expected_policy_revision = Some(99);
            }
            let writer_for_write = writer.clone();
            queued.push((
                id,
                value,
                n,
                tokio::spawn(async move {
                    commit_update(&writer_for_write, &update, 60_000, WritePlace::Caller).await
                }),
            ));
            eventually("the write to be queued", Duration::from_secs(30), || {
                let waiting = writer.counts().queued.load(Ordering::SeqCst);
                async move { (waiting == n + 1).then_some(()) }
            })
            .await;
        }
        assert_eq!(
            metric(&gateway, "openshell_config_writes_queued").await,
            queued.len() as f64,
            "the metric counts the writes waiting in the lane"
        );
        drop(holder);
        first.await.unwrap().unwrap();
        let mut answers = Vec::new();
        for (id, value, n, write) in queued {
            answers.push((id, value, n, write.await.unwrap()));
        }
        for (id, _, n, answer) in &answers {
            match answer {
                Err(e) if refuse && *n == 2 => assert!(
                    e.to_string().contains("policy"),
                    "the stale write is refused for its expected revision: {e}"
                ),
                Err(e) => panic!("write {n} to {id} failed: {e}"),
                Ok(committed) => {
                    let stored = store.get_sandbox(id).await.unwrap();
                    assert_eq!(committed.operation.sandbox_id.as_deref(), Some(id.as_str()));
                    assert!(committed.operation.settings_revision <= stored.settings_revision);
                    assert!(!committed.operation.no_op, "write {n} changed a setting");
                }
            }
        }
        // The two writes to one sandbox: the later one holds, one revision after the other.
        let (first_rev, second_rev) = match (&answers[0].3, &answers[1].3) {
            (Ok(a), Ok(b)) => (a.operation.settings_revision, b.operation.settings_revision),
            _ => panic!("both writes to {} commit", grouped[0]),
        };
        assert_eq!(second_rev, first_rev + 1);
        assert_eq!(first_rev, revisions_before[0] + 1);
        let values = store
            .settings_at(openshell_core::settings::Scope::Sandbox, &grouped[0])
            .await
            .unwrap();
        assert_eq!(
            values
                .values
                .get("log_rate_limit_per_second")
                .map(|v| format!("{v:?}")),
            Some(format!(
                "{:?}",
                openshell_core::settings::SettingValue::Int(i64::from(base + 1))
            ))
        );
        // The refused write changed nothing of its sandbox.
        let untouched = store.get_sandbox(&grouped[1]).await.unwrap();
        if refuse {
            assert_eq!(untouched.settings_revision, revisions_before[1]);
            assert_eq!(
                writer.counts().groups_failed.load(Ordering::SeqCst),
                failed_before + 1,
                "the group with the refused write rolled back"
            );
        } else {
            assert_eq!(untouched.settings_revision, revisions_before[1] + 1);
            assert!(
                writer.counts().groups_committed.load(Ordering::SeqCst) > before,
                "the queued writes committed as a group"
            );
            assert_eq!(
                writer.counts().groups_failed.load(Ordering::SeqCst),
                failed_before
            );
        }
        // The counts are exported as they are, so an operator sees the group commit work.
        let counts = writer.counts();
        for (series, count) in [
            (
                "openshell_config_writes_started_total",
                &counts.writes_started,
            ),
            (
                "openshell_config_write_groups_total",
                &counts.groups_committed,
            ),
            (
                "openshell_config_writes_grouped_total",
                &counts.writes_grouped,
            ),
            (
                "openshell_config_write_groups_failed_total",
                &counts.groups_failed,
            ),
        ] {
            assert_eq!(
                metric(&gateway, series).await,
                count.load(Ordering::SeqCst) as f64,
                "{series}"
            );
        }
        if refuse {
            assert_eq!(
                metric(&gateway, "openshell_config_write_groups_failed_total").await,
                (failed_before + 1) as f64
            );
        } else {
            let groups = metric(&gateway, "openshell_config_write_groups_total").await;
            assert!(groups >= 1.0, "{groups}");
            assert!(
                metric(&gateway, "openshell_config_writes_grouped_total").await >= 2.0 * groups,
                "every group holds two writes or more"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_writes_commit_as_a_group_on_sqlite() {
    queued_writes_commit_as_a_group(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_writes_commit_as_a_group_on_postgres() {
    queued_writes_commit_as_a_group(Backend::Postgres).await;
}
