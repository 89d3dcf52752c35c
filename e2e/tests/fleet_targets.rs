//! Listing a fleet operation's targets after its commit (SQLite): every live
//! sandbox created by the commit is listed once, in chunks; the operation
//! does not end while the listing goes on; a report resolved before its
//! sandbox was listed still settles the target; a listing that fails is
//! taken up again; and a listing a stopped gateway left is finished when it
//! starts again. In the commit (PostgreSQL): a sandbox deleted or stopped
//! while the listing runs never keeps a pending target that nothing ends, and
//! a no-op write is settled by a report whose resolution was under way as it
//! committed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openshell_e2e::{
    Api, Backend, POLICY, TestGateway, create_sandbox, eventually, raw_setting, sandbox_ref,
    terminal_operation, to_global, to_workspace,
};
use openshell_gateway::operations::fleet_targets::{list_from, retry_listing};
use openshell_gateway::operations::resolution::ReportedRevisions;
use openshell_gateway::operations::{ReportStatus, SupervisorReport};
use openshell_gateway::store::{
    Lifecycle, NewOperation, OperationRecord, OperationState, ReportRow, Store, TargetKind,
    WriteTx, new_id,
};
use openshell_proto::v1 as pb;
use tracing::instrument::WithSubscriber;

const DEADLINE: Duration = Duration::from_secs(30);

fn report(
    sandbox_id: &str,
    status: ReportStatus,
    global_settings_revision: u64,
) -> SupervisorReport {
    SupervisorReport {
        sandbox_id: sandbox_id.to_string(),
        status,
        revisions: ReportedRevisions {
            global_settings_revision,
            ..Default::default()
        },
        reason: "bad setting".into(),
    }
}

/// Resolves one report through the gateway's resolver, as an ack would be.
async fn resolve(gw: &TestGateway, sandbox_id: &str, status: ReportStatus, global_settings: u64) {
    gw.state()
        .reports
        .resolve(report(sandbox_id, status, global_settings))
        .await
        .unwrap();
}

/// A global operation at settings revision 5, committed with its targets
/// still to be listed, as a fleet write on SQLite commits it.
async fn listing_operation(store: &Store) -> OperationRecord {
    let id = new_id("op");
    let mut tx = store.begin_write().await.unwrap();
    tx.insert_operation(&NewOperation {
        id: id.clone(),
        target_kind: TargetKind::Global,
        target: String::new(),
        sandbox_id: None,
        policy_revision: 0,
        settings_revision: 5,
        global_policy_revision: Some(0),
        no_op: false,
        touches_policy: false,
        caller: "test".into(),
        idempotency_key: None,
        request_fingerprint: None,
        idempotency_expires_at: None,
        provider_env_revision: None,
    })
    .await
    .unwrap();
    tx.begin_target_listing(&id).await.unwrap();
    tx.commit().await.unwrap();
    store.get_operation(&id).await.unwrap()
}

/// Lists one chunk of `chunk` sandboxes and returns the last one listed.
async fn list_one_chunk(store: &Store, op: &OperationRecord, chunk: usize) -> String {
    let mut tx = store.begin_write().await.unwrap();
    let last = tx
        .list_targets_after(&op.id, None, op.created_at, "", chunk)
        .await
        .unwrap()
        .expect("more sandboxes than one chunk");
    tx.commit().await.unwrap();
    last
}

/// Sandboxes named `prefix-0..n`, ids sorted.
async fn sandboxes(gw: &TestGateway, prefix: &str, n: usize) -> Vec<String> {
    let mut api = gw.api().await;
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            create_sandbox(&mut api, &format!("{prefix}-{i}"), POLICY)
                .await
                .0,
        );
    }
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_live_sandbox_the_commit_saw_is_listed_once_in_chunks() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let store = &gw.state().store;
    let mut live = sandboxes(&gw, "listed", 5).await;
    let deleted = live.remove(2);
    gw.api()
        .await
        .delete_sandbox(pb::DeleteSandboxRequest {
            sandbox: sandbox_ref(&deleted),
        })
        .await
        .unwrap();
    let op = listing_operation(store).await;
    // Created after the commit, in a later millisecond: it starts with the change, not a
    // target.
    eventually("a millisecond after the commit", DEADLINE, || async {
        (openshell_gateway::store::now_ms() > op.created_at).then_some(())
    })
    .await;
    let (late, _) = create_sandbox(&mut gw.api().await, "late", POLICY).await;

    list_from(store, &op, String::new(), op.created_at, 2)
        .await
        .unwrap();

    assert_eq!(store.operation_target_ids(&op.id).await.unwrap(), live);
    let op = store.get_operation(&op.id).await.unwrap();
    let fleet = op.fleet.unwrap();
    assert!(!fleet.listing);
    assert_eq!((fleet.targets, fleet.pending), (4, 4), "{op:?}");
    assert_eq!(op.state, OperationState::Pending);
    assert!(!live.contains(&late));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_does_not_end_while_its_targets_are_listed() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let store = &gw.state().store;
    let ids = sandboxes(&gw, "chunked", 4).await;
    let op = listing_operation(store).await;
    let after = list_one_chunk(store, &op, 2).await;
    for id in &ids[..2] {
        resolve(&gw, id, ReportStatus::Applied, 5).await;
    }
    let mid = store.get_operation(&op.id).await.unwrap();
    let fleet = mid.fleet.unwrap();
    assert_eq!((fleet.targets, fleet.applied, fleet.pending), (2, 2, 0));
    assert_eq!(
        mid.state,
        OperationState::Pending,
        "ended mid-listing: {mid:?}"
    );

    list_from(store, &op, after, op.created_at, 2)
        .await
        .unwrap();
    for id in &ids[2..] {
        resolve(&gw, id, ReportStatus::Applied, 5).await;
    }
    let done = store.get_operation(&op.id).await.unwrap();
    assert_eq!(done.state, OperationState::Applied, "{done:?}");
    assert_eq!(done.fleet.unwrap().applied, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_resolved_before_their_sandbox_was_listed_settle_its_target() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let store = &gw.state().store;
    let ids = sandboxes(&gw, "early", 4).await;
    let op = listing_operation(store).await;
    let after = list_one_chunk(store, &op, 1).await;
    assert_eq!(after, ids[0]);
    // Not listed yet: their reports find no target of the operation.
    resolve(&gw, &ids[1], ReportStatus::Applied, 5).await;
    let failed = ReportStatus::Failed {
        failed_closed: false,
    };
    resolve(&gw, &ids[2], failed, 5).await;
    // Below the operation's revision: the target stays pending.
    resolve(&gw, &ids[3], ReportStatus::Applied, 4).await;

    list_from(store, &op, after, op.created_at, 1)
        .await
        .unwrap();

    let op = store.get_operation(&op.id).await.unwrap();
    let fleet = op.fleet.unwrap();
    assert_eq!(
        (fleet.targets, fleet.applied, fleet.failed, fleet.pending),
        (4, 1, 1, 2),
        "{op:?}"
    );
    assert_eq!(op.state, OperationState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_a_stopped_gateway_left_is_finished_when_it_starts() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let ids = sandboxes(&gw, "resumed", 3).await;
    let op = listing_operation(&gw.state().store).await;
    list_one_chunk(&gw.state().store, &op, 1).await;
    resolve(&gw, &ids[2], ReportStatus::Applied, 5).await;

    let gw = gw.restart().await;

    let store = &gw.state().store;
    assert_eq!(store.operation_target_ids(&op.id).await.unwrap(), ids);
    let op = store.get_operation(&op.id).await.unwrap();
    let fleet = op.fleet.unwrap();
    assert!(!fleet.listing);
    assert_eq!(
        (fleet.targets, fleet.applied, fleet.pending),
        (3, 1, 2),
        "{op:?}"
    );
    assert!(store.unfinished_target_listings().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_write_over_no_sandbox_is_applied_once_listed() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let op = listing_operation(&gw.state().store).await;
    list_from(&gw.state().store, &op, String::new(), op.created_at, 2)
        .await
        .unwrap();
    let op = gw.state().store.get_operation(&op.id).await.unwrap();
    assert_eq!(op.state, OperationState::Applied, "{op:?}");
    assert_eq!(op.fleet.unwrap().targets, 0);
}

/// What the background listing logs each time an attempt fails.
const RETRY_FAILED: &str = "listing a fleet operation's targets failed again";

/// The log lines of one task, for waiting on what it did.
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<u8>>>);

impl Logged {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logged {
    type Writer = Logged;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_that_fails_is_taken_up_again() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let store = &gw.state().store;
    let ids = sandboxes(&gw, "retried", 3).await;
    let op = listing_operation(store).await;
    list_one_chunk(store, &op, 1).await;
    openshell_e2e::alter_sqlite_store(
        &gw,
        "ALTER TABLE operation_targets RENAME TO operation_targets_away",
    )
    .await;
    let err = list_from(store, &op, ids[0].clone(), op.created_at, 1)
        .await
        .expect_err("the targets table is away");
    assert!(err.to_string().contains("operation_targets"), "{err}");
    let logged = Logged::default();
    let retry = tokio::spawn(
        retry_listing(store.clone(), op.clone(), Duration::from_millis(20)).with_subscriber(
            tracing_subscriber::fmt()
                .with_writer(logged.clone())
                .with_ansi(false)
                .finish(),
        ),
    );
    // Failing meanwhile, it keeps trying: a second failed attempt means it tried again
    // after the first.
    eventually("two failed attempts", DEADLINE, || async {
        (logged.text().matches(RETRY_FAILED).count() >= 2).then_some(())
    })
    .await;
    openshell_e2e::alter_sqlite_store(
        &gw,
        "ALTER TABLE operation_targets_away RENAME TO operation_targets",
    )
    .await;

    eventually(
        "the listing to be done",
        Duration::from_secs(30),
        || async {
            let op = store.get_operation(&op.id).await.unwrap();
            (!op.fleet.unwrap().listing).then_some(())
        },
    )
    .await;
    retry.await.unwrap();
    assert_eq!(store.operation_target_ids(&op.id).await.unwrap(), ids);
    assert_eq!(
        store
            .get_operation(&op.id)
            .await
            .unwrap()
            .fleet
            .unwrap()
            .targets,
        3
    );
}

/// A stop or delete whose transaction is open while a fleet write lists its targets on
/// PostgreSQL (the write reaches its listing after the lifecycle change ended the sandbox's
/// live targets, and before it commits). Without a lock between the two, the listing saw the
/// sandbox still live and gave it a pending target that the lifecycle change could not see:
/// the operation stayed PENDING for good after a delete (a chaos run found one 90 s after
/// its heal). Returns the operation once it ended.
async fn fleet_write_racing_a_lifecycle_change(
    wanted: Lifecycle,
    fleet_write: pb::UpdateConfigRequest,
) -> pb::Operation {
    let gw = TestGateway::start(Backend::Postgres).await;
    let mut api = gw.api().await;
    let (sandbox, _) = create_sandbox(&mut api, "racing", POLICY).await;

    let store = &gw.state().store;
    let mut lifecycle = store.begin_write().await.unwrap();
    lifecycle.lock_sandbox(&sandbox).await.unwrap();
    lifecycle.set_lifecycle(&sandbox, wanted).await.unwrap();
    let ended = match wanted {
        Lifecycle::Deleted => OperationState::Cancelled,
        _ => OperationState::Inactive,
    };
    lifecycle
        .resolve_live_operations_for_lifecycle(&sandbox, ended, "test")
        .await
        .unwrap();

    // The write either waits for the lifecycle change (its lock is taken) or, unprotected,
    // commits before it: only then is the lifecycle change committed.
    let op = write_then_commit_held(
        &gw,
        &api,
        fleet_write,
        lifecycle,
        "the fleet write to wait for the lifecycle change, or to commit",
    )
    .await;
    let pending = api
        .list_operation_targets(pb::ListOperationTargetsRequest {
            operation_id: op.id.clone(),
            states: vec![pb::OperationState::Pending as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .targets;
    assert!(
        pending.is_empty(),
        "the {wanted:?} sandbox keeps a pending target: {pending:?}"
    );
    terminal_operation(&api, &op.id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_deleted_during_a_fleet_listing_keeps_no_pending_target_on_postgres() {
    let global = pb::UpdateConfigRequest {
        settings: vec![raw_setting("log_rate_limit_per_second", "77")],
        ..to_global()
    };
    let op = fleet_write_racing_a_lifecycle_change(Lifecycle::Deleted, global).await;
    // The only sandbox is gone: nothing was listed, or its target was cancelled.
    assert_ne!(openshell_e2e::state(&op), pb::OperationState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_stopped_during_a_fleet_listing_is_an_inactive_target_on_postgres() {
    let workspace = pb::UpdateConfigRequest {
        settings: vec![raw_setting("environment_label", "racing")],
        ..to_workspace("default")
    };
    let op = fleet_write_racing_a_lifecycle_change(Lifecycle::Stopped, workspace).await;
    assert_eq!(
        openshell_e2e::state(&op),
        pb::OperationState::Inactive,
        "{op:?}"
    );
    assert_eq!(op.fleet.map(|f| (f.targets, f.inactive)), Some((1, 1)));
}

/// Sends `request` while `held`, a transaction of the test's own, is open, and commits
/// `held` once the write waits for a lock (PostgreSQL) or has answered without waiting.
/// Returns the write's operation.
async fn write_then_commit_held(
    gw: &TestGateway,
    api: &Api,
    request: pb::UpdateConfigRequest,
    held: WriteTx,
    what: &str,
) -> pb::Operation {
    let mut writer = api.clone();
    let write = tokio::spawn(async move {
        writer
            .update_config(request)
            .await
            .unwrap()
            .into_inner()
            .operation
            .unwrap()
    });
    let watcher = sqlx::PgPool::connect(&gw.store.url).await.unwrap();
    eventually(what, Duration::from_secs(30), || {
        let finished = write.is_finished();
        let watcher = watcher.clone();
        async move {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE NOT l.granted AND a.datname = current_database()",
            )
            .fetch_one(&watcher)
            .await
            .unwrap();
            (finished || waiting > 0).then_some(())
        }
    })
    .await;
    held.commit().await.unwrap();
    write.await.unwrap()
}

/// A global write that changes nothing tracks the revision the fleet may already run, and
/// settles each target from its sandbox's last report. Here the sandbox's report of that
/// revision is being resolved as the no-op write commits (on PostgreSQL: the resolution
/// locked the sandbox and read its live targets before the no-op's existed, and has not
/// committed its report yet). Read before that report committed, the last report was the
/// one before it, and the no-op's target stayed pending for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_write_is_settled_by_a_report_resolved_as_it_commits_on_postgres() {
    let gw = TestGateway::start(Backend::Postgres).await;
    let mut api = gw.api().await;
    let (sandbox, _) = create_sandbox(&mut api, "settled", POLICY).await;
    let change = pb::UpdateConfigRequest {
        settings: vec![raw_setting("log_rate_limit_per_second", "55")],
        ..to_global()
    };
    let first = api
        .update_config(change.clone())
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();

    // The supervisor's report of that revision, its resolution still open.
    let store = &gw.state().store;
    let mut resolution = store.begin_write().await.unwrap();
    resolution
        .lock_sandboxes(std::slice::from_ref(&sandbox))
        .await
        .unwrap();
    let revisions = ReportedRevisions {
        global_settings_revision: first.settings_revision,
        ..Default::default()
    };
    resolution
        .record_reports(&[ReportRow {
            sandbox_id: &sandbox,
            status: ReportStatus::Applied.as_str(),
            revisions_json: serde_json::to_string(&revisions).unwrap(),
            reason: "",
            policy_revision: 0,
            policy_hash: "",
        }])
        .await
        .unwrap();

    let no_op = write_then_commit_held(
        &gw,
        &api,
        change,
        resolution,
        "the no-op write to wait for the report's resolution, or to answer",
    )
    .await;
    assert!(no_op.no_op, "{no_op:?}");
    assert_eq!(no_op.settings_revision, first.settings_revision);
    let settled = terminal_operation(&api, &no_op.id).await;
    assert_eq!(
        openshell_e2e::state(&settled),
        pb::OperationState::Applied,
        "{settled:?}"
    );
}
