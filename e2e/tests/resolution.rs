//! Resolving operations from supervisor reports through the gateway's
//! resolver: reports queued together are committed together, a write that
//! waits for the SQLite writer goes between their transactions, a report
//! that cannot be resolved loses none of the others, one sandbox's reports
//! keep their order, and a fleet operation's last two acks, resolved at the
//! same moment by two replicas sharing PostgreSQL, end it exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{
    Backend, POLICY, TestGateway, TestStore, create_sandbox, eventually, policy_with_port,
};
use openshell_gateway::DeliveryMode;
use openshell_gateway::operations::resolution::ReportedRevisions;
use openshell_gateway::operations::{
    OperationWatch, ReportStatus, SupervisorReport, wait_for_terminal,
};
use openshell_gateway::store::{OperationRecord, OperationState, WritePlace};
use openshell_proto::v1 as pb;

fn applied(sandbox_id: &str, revisions: ReportedRevisions) -> SupervisorReport {
    SupervisorReport {
        sandbox_id: sandbox_id.to_string(),
        status: ReportStatus::Applied,
        revisions,
        reason: String::new(),
    }
}

/// Exactly the global revisions a global write made: what a supervisor that applied it
/// reports. (A report past them stands for a later write and supersedes it.)
async fn exactly(store: &openshell_gateway::store::Store, op_id: &str) -> ReportedRevisions {
    let op = store.get_operation(op_id).await.unwrap();
    ReportedRevisions {
        global_settings_revision: op.settings_revision,
        global_policy_revision: op.global_policy_revision,
        ..Default::default()
    }
}

async fn commit_only(api: &mut openshell_e2e::Api, request: pb::UpdateConfigRequest) -> String {
    api.update_config(pb::UpdateConfigRequest {
        mode: pb::UpdateMode::CommitOnly as i32,
        ..request
    })
    .await
    .unwrap()
    .into_inner()
    .operation
    .unwrap()
    .id
}

/// A new sandbox and the id of a `COMMIT_ONLY` policy write to it, still pending.
async fn sandbox_with_a_policy_write(api: &mut openshell_e2e::Api, name: &str) -> (String, String) {
    let (id, _) = create_sandbox(api, name, POLICY).await;
    let op_id = commit_only(
        api,
        pb::UpdateConfigRequest {
            sandbox: String::from(&id),
            policy_text: policy_with_port(8443),
            ..Default::default()
        },
    )
    .await;
    (id, op_id)
}

/// Exactly the revisions a sandbox operation writes.
fn revisions_of(op: &OperationRecord) -> ReportedRevisions {
    ReportedRevisions {
        policy_revision: op.policy_revision,
        sandbox_settings_revision: op.settings_revision,
        ..Default::default()
    }
}

fn global_setting(value: u32) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        global: true,
        settings: vec![pb::SettingChange {
            key: "log_rate_limit_per_second".into(),
            change: Some(pb::setting_change::Change::Raw(value.to_string())),
        }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_that_cannot_be_resolved_loses_none_of_its_batch() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let mut api = gw.api().await;
    let (id, op_id) = sandbox_with_a_policy_write(&mut api, "batched").await;
    let op = gw.state().store.get_operation(&op_id).await.unwrap();
    let exact = revisions_of(&op);
    // Queued at once, so they share transactions: the unknown sandboxes'
    // reports fail, the real one's must still commit.
    let resolver = gw.state().reports.clone();
    let mut queued = Vec::new();
    for i in 0..40 {
        let report = if i == 20 {
            applied(&id, exact.clone())
        } else {
            applied(&format!("sb-missing-{i}"), exact.clone())
        };
        let resolver = resolver.clone();
        queued.push(tokio::spawn(async move { resolver.resolve(report).await }));
    }
    let mut outcomes = Vec::new();
    for task in queued {
        outcomes.push(task.await.unwrap());
    }
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 20 {
            // Its own operation, and the sandbox's creation it supersedes.
            assert!(outcome.as_ref().is_ok_and(|n| *n >= 1), "{outcome:?}");
        } else {
            let err = outcome.as_ref().expect_err("unknown sandbox must fail");
            assert!(err.to_string().contains("sb-missing"), "{err}");
        }
    }
    let op = gw.state().store.get_operation(&op_id).await.unwrap();
    assert_eq!(op.state, OperationState::Applied, "{op:?}");
    let last = gw.state().store.last_report(&id).await.unwrap();
    assert_eq!(last.map(|r| r.status).as_deref(), Some("APPLIED"));
}

/// A fanout's acks commit in large transactions, but a write that waits for
/// the SQLite writer meanwhile makes the resolver commit early: the write
/// sees part of the series committed, not nothing and then everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_write_goes_between_the_resolvers_transactions() {
    const SANDBOXES: u32 = 131;
    let gw = TestGateway::start(Backend::Sqlite).await;
    let mut api = gw.api().await;
    let mut ids = Vec::new();
    for i in 0..SANDBOXES {
        ids.push(
            create_sandbox(&mut api, &format!("fleet-{i}"), POLICY)
                .await
                .0,
        );
    }
    let op_id = commit_only(&mut api, global_setting(7)).await;
    let store = gw.state().store.clone();
    let resolver = gw.state().reports.clone();
    let waiting = |n: usize| {
        let store = store.clone();
        async move {
            let what = format!("{n} writes waiting for the SQLite writer");
            eventually(&what, Duration::from_secs(30), || {
                let store = store.clone();
                async move { (store.writers_waiting() == n).then_some(()) }
            })
            .await;
        }
    };

    // The resolver takes the first report alone and waits for the held
    // writer; the rest then queue up as one long series.
    let revisions = exactly(&store, &op_id).await;
    let held = store.begin_write().await.unwrap();
    resolver.submit(applied(&ids[0], revisions.clone()), false);
    waiting(1).await;
    for id in &ids[1..] {
        resolver.submit(applied(id, revisions.clone()), false);
    }
    // A write that keeps asking for the writer, and notes how many targets
    // were applied each time it got it.
    let writer = {
        let store = store.clone();
        let op_id = op_id.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let tx = store.begin_write().await.unwrap();
                let op = store.get_operation(&op_id).await.unwrap();
                drop(tx);
                let applied = op.fleet.unwrap().applied;
                seen.push(applied);
                if applied == SANDBOXES {
                    return seen;
                }
            }
        })
    };
    waiting(2).await;
    drop(held);

    let seen = tokio::time::timeout(Duration::from_secs(60), writer)
        .await
        .expect("every target resolved")
        .unwrap();
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(
        seen.iter().any(|n| 1 < *n && *n < SANDBOXES),
        "the write waited for the whole series: {seen:?}"
    );
    let op = store.get_operation(&op_id).await.unwrap();
    assert_eq!(op.state, OperationState::Applied, "{op:?}");
}

/// Two sandboxes, each acked by a different replica at the same moment:
/// exactly one ack sees no target left, so the operation always ends.
async fn last_acks_end_the_fleet_operation(gateways: &[TestGateway]) {
    let mut api = gateways[0].api().await;
    let (a, _) = create_sandbox(&mut api, "left", POLICY).await;
    let (b, _) = create_sandbox(&mut api, "right", POLICY).await;
    for round in 0..10 {
        let op_id = commit_only(&mut api, global_setting(100 + round)).await;
        let first = gateways[0].state().reports.clone();
        let second = gateways[gateways.len() - 1].state().reports.clone();
        let revisions = exactly(&gateways[0].state().store, &op_id).await;
        let (ra, rb) = tokio::join!(
            first.resolve(applied(&a, revisions.clone())),
            second.resolve(applied(&b, revisions)),
        );
        // One of the two ended the fleet operation.
        assert_eq!(ra.unwrap() + rb.unwrap(), 1, "round {round}");
        let op = gateways[0]
            .state()
            .store
            .get_operation(&op_id)
            .await
            .unwrap();
        assert_eq!(op.state, OperationState::Applied, "round {round}: {op:?}");
        let fleet = op.fleet.unwrap();
        assert_eq!(
            (fleet.targets, fleet.applied, fleet.pending),
            (2, 2, 0),
            "round {round}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_last_acks_end_a_fleet_operation_on_sqlite() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    last_acks_end_the_fleet_operation(std::slice::from_ref(&gw)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_last_acks_on_two_replicas_end_a_fleet_operation_on_postgres() {
    let first = TestGateway::start(Backend::Postgres).await;
    let shared = TestStore {
        backend: Backend::Postgres,
        url: first.store.url.clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let second = TestGateway::start_with(shared, DeliveryMode::Poll, |config| {
        config.replica_id = "replica-b".into();
    })
    .await;
    last_acks_end_the_fleet_operation(&[first, second]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sandboxs_reports_in_one_batch_resolve_in_arrival_order() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "ordered", POLICY).await;
    let mut ops = Vec::new();
    for port in [8443, 9443] {
        let op_id = commit_only(
            &mut api,
            pb::UpdateConfigRequest {
                sandbox: String::from(&id),
                policy_text: policy_with_port(port),
                ..Default::default()
            },
        )
        .await;
        ops.push(gw.state().store.get_operation(&op_id).await.unwrap());
    }
    // The first change applied, then the second failed: in this order the
    // first ends APPLIED; the other way round the failure (newer) would
    // supersede it first. The second report is urgent, which must not let it
    // overtake its sandbox's earlier one.
    let resolver = gw.state().reports.clone();
    resolver.submit(applied(&id, revisions_of(&ops[0])), false);
    resolver.submit(
        SupervisorReport {
            status: ReportStatus::Failed {
                failed_closed: false,
            },
            reason: "port 9443 is taken".into(),
            ..applied(&id, revisions_of(&ops[1]))
        },
        true,
    );
    resolver.flush().await;
    let first = gw.state().store.get_operation(&ops[0].id).await.unwrap();
    let second = gw.state().store.get_operation(&ops[1].id).await.unwrap();
    assert_eq!(first.state, OperationState::Applied, "{first:?}");
    assert_eq!(second.state, OperationState::Failed, "{second:?}");
    assert!(second.error.contains("9443"), "{second:?}");
}

/// A change that writes a sandbox operation's whole row hands it to the
/// operation's waiters, who then need not read it back: it must be the row
/// as stored, and a terminal row must win over any later notice.
async fn waiters_are_handed_the_rows_changes_wrote(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let (id, op_id) = sandbox_with_a_policy_write(&mut api, "handed").await;
    let store = &gw.state().store;
    let signal = store.operation_events().subscribe(&op_id);
    assert_eq!(signal.changes(), (0, None));
    let op = store.get_operation(&op_id).await.unwrap();

    store
        .mark_delivered(
            WritePlace::Caller,
            &id,
            op.policy_revision,
            op.settings_revision,
        )
        .await
        .unwrap();
    let (changes, row) = signal.changes();
    assert_eq!(changes, 1);
    let delivered = row.expect("the delivered row is handed over");
    assert_eq!(delivered.state, OperationState::Delivered);
    assert_eq!(delivered, store.get_operation(&op_id).await.unwrap());

    gw.state()
        .reports
        .resolve(applied(&id, revisions_of(&op)))
        .await
        .unwrap();
    let (changes, row) = signal.changes();
    assert_eq!(changes, 2);
    let ended = row.expect("the ended row is handed over");
    assert_eq!(ended.state, OperationState::Applied);
    assert_eq!(ended, store.get_operation(&op_id).await.unwrap());

    // A watch that starts from the delivered row without reading follows
    // the signal to the ended one.
    let watch = OperationWatch::from_committed(
        store.clone(),
        delivered,
        signal.clone(),
        Duration::from_secs(20),
        0.0,
    );
    let (last, timed_out) = wait_for_terminal(store, watch).await.unwrap();
    assert!(!timed_out);
    assert_eq!(last, ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_handed_the_rows_changes_wrote_on_sqlite() {
    waiters_are_handed_the_rows_changes_wrote(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_handed_the_rows_changes_wrote_on_postgres() {
    waiters_are_handed_the_rows_changes_wrote(Backend::Postgres).await;
}
