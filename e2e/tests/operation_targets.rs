//! `ListOperationTargets` on both stores: a fleet operation's targets page
//! in sandbox id order, each exactly once, with names, states, reasons and
//! the operation's counts; the state filter; a sandbox operation's one
//! target; the errors (unknown operation, page too large, foreign token);
//! and `ListOperations` for a sandbox showing the fleet operations that
//! targeted it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use futures::TryStreamExt;
use openshell_e2e::{
    Api, Backend, POLICY, TOKEN, TestGateway, create_sandbox, eventually, raw_setting, sandbox_ref,
    to_global, to_sandbox,
};
use openshell_proto::v1 as pb;
use openshell_sdk::{Client, ClientOptions, OperationState};

const DEADLINE: Duration = Duration::from_secs(30);
const FLEET: usize = 23;
const PAGE: u32 = 5;

/// A commit-only global settings write; returns its operation id.
async fn global_write(api: &mut Api) -> String {
    let mut req = to_global();
    req.settings = vec![raw_setting("log_level", "debug")];
    req.mode = pb::UpdateMode::CommitOnly as i32;
    let op = api.update_config(req).await.unwrap().into_inner();
    op.operation.unwrap().id
}

/// Waits until every sandbox is listed as a target (SQLite lists them after the commit).
async fn listed(api: &Api, op_id: &str, n: u32) {
    eventually("every target listed", DEADLINE, || {
        let mut api = api.clone();
        let id = op_id.to_string();
        async move {
            let op = api
                .get_operation(pb::GetOperationRequest { id })
                .await
                .ok()?
                .into_inner();
            (op.fleet?.targets == n).then_some(())
        }
    })
    .await;
}

async fn page(
    api: &mut Api,
    op_id: &str,
    states: &[pb::OperationState],
    page_size: u32,
    token: &str,
) -> Result<pb::ListOperationTargetsResponse, tonic::Status> {
    api.list_operation_targets(pb::ListOperationTargetsRequest {
        operation_id: op_id.into(),
        states: states.iter().map(|s| *s as i32).collect(),
        page_size,
        page_token: token.into(),
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Every page, in order; panics if a token repeats.
async fn all_pages(
    api: &mut Api,
    op_id: &str,
    states: &[pb::OperationState],
) -> (Vec<pb::OperationTarget>, usize) {
    let (mut targets, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let got = page(api, op_id, states, PAGE, &token).await.unwrap();
        pages += 1;
        assert!(got.targets.len() <= PAGE as usize);
        targets.extend(got.targets);
        if got.next_page_token.is_empty() {
            return (targets, pages);
        }
        assert_ne!(got.next_page_token, token, "a token repeated");
        token = got.next_page_token;
    }
}

async fn fleet_targets_page_once_each(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let mut ids = BTreeSet::new();
    for i in 0..FLEET {
        ids.insert(
            create_sandbox(&mut api, &format!("fleet-{i:02}"), POLICY)
                .await
                .0,
        );
    }
    let op_id = global_write(&mut api).await;
    listed(&api, &op_id, FLEET as u32).await;

    let (targets, pages) = all_pages(&mut api, &op_id, &[]).await;
    assert_eq!(pages, FLEET.div_ceil(PAGE as usize), "{backend:?}");
    let seen: Vec<&str> = targets.iter().map(|t| t.sandbox_id.as_str()).collect();
    let expected: Vec<&str> = ids.iter().map(String::as_str).collect();
    // Exactly once each, in sandbox id order.
    assert_eq!(seen, expected, "{backend:?}");
    for t in &targets {
        assert!(t.sandbox_name.starts_with("fleet-"), "{t:?}");
        assert_eq!(t.workspace, "default");
        assert_eq!(t.state, pb::OperationState::Pending as i32, "{t:?}");
        // No supervisor ever connected.
        assert_eq!(t.reason, "no session", "{t:?}");
        assert!(t.updated_at.is_some());
    }

    // The Rust SDK's stream pages the same way: every target once, in order.
    let client = Client::connect(ClientOptions::new(gw.endpoint()).with_token(TOKEN))
        .await
        .unwrap();
    let streamed: Vec<String> = client
        .operation_targets(&op_id, &[], PAGE)
        .map_ok(|t| t.sandbox_id)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(streamed, expected, "{backend:?}");
    let first = client
        .list_operation_targets(&op_id, &[OperationState::Pending], PAGE, None)
        .await
        .unwrap();
    assert_eq!(first.targets.len(), PAGE as usize);
    assert_eq!(first.counts.targets, FLEET as u32);
    assert_eq!(first.targets[0].reason.as_deref(), Some("no session"));
    let second = client
        .list_operation_targets(
            &op_id,
            &[OperationState::Pending],
            PAGE,
            first.next_page_token.as_deref(),
        )
        .await
        .unwrap();
    assert_eq!(second.targets[0].sandbox_id, expected[PAGE as usize]);

    // A stopped sandbox's target ends INACTIVE, and the filter finds it alone.
    let stopped = expected[7].to_string();
    api.set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
        sandbox: sandbox_ref(&stopped),
        lifecycle: pb::SandboxLifecycle::Stopped as i32,
    })
    .await
    .unwrap();
    let inactive = eventually("the stopped sandbox's target to end", DEADLINE, || {
        let mut api = api.clone();
        let op_id = op_id.clone();
        async move {
            let got = page(&mut api, &op_id, &[pb::OperationState::Inactive], 0, "")
                .await
                .ok()?;
            (!got.targets.is_empty()).then_some(got)
        }
    })
    .await;
    assert_eq!(inactive.targets.len(), 1, "{inactive:?}");
    assert_eq!(inactive.targets[0].sandbox_id, stopped);
    assert!(!inactive.targets[0].reason.is_empty(), "{inactive:?}");
    let counts = inactive.counts.unwrap();
    assert_eq!(
        (counts.targets, counts.inactive, counts.pending),
        (FLEET as u32, 1, FLEET as u32 - 1)
    );
    let (live, _) = all_pages(
        &mut api,
        &op_id,
        &[pb::OperationState::Pending, pb::OperationState::Delivered],
    )
    .await;
    assert_eq!(live.len(), FLEET - 1);
    assert!(live.iter().all(|t| t.sandbox_id != stopped));

    // The sandbox's operations include the global one that targeted it.
    let ops = api
        .list_operations(pb::ListOperationsRequest {
            sandbox: sandbox_ref(&stopped),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operations;
    assert!(ops.iter().any(|o| o.id == op_id), "{backend:?}: {ops:?}");
    // A sandbox created after the write was no target of it.
    let (late, _) = create_sandbox(&mut api, "late", POLICY).await;
    let ops = api
        .list_operations(pb::ListOperationsRequest {
            sandbox: sandbox_ref(&late),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operations;
    assert!(ops.iter().all(|o| o.id != op_id), "{backend:?}: {ops:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_targets_page_once_each_sqlite() {
    fleet_targets_page_once_each(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_targets_page_once_each_postgres() {
    fleet_targets_page_once_each(Backend::Postgres).await;
}

async fn sandbox_operation_and_errors(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "solo", POLICY).await;
    let mut req = to_sandbox("solo");
    req.settings = vec![raw_setting("log_level", "debug")];
    req.mode = pb::UpdateMode::CommitOnly as i32;
    let op = api
        .update_config(req)
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();

    let got = page(&mut api, &op.id, &[], 0, "").await.unwrap();
    assert_eq!(got.targets.len(), 1, "{got:?}");
    assert_eq!(got.targets[0].sandbox_id, id);
    assert_eq!(got.targets[0].sandbox_name, "solo");
    assert_eq!(got.targets[0].state, op.state);
    assert_eq!(got.next_page_token, "");
    assert_eq!(got.counts.unwrap().targets, 1);
    let failed = page(&mut api, &op.id, &[pb::OperationState::Failed], 0, "")
        .await
        .unwrap();
    assert!(failed.targets.is_empty(), "{failed:?}");

    let missing = page(&mut api, "op-nope", &[], 0, "").await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(
        missing.message().contains("op-nope"),
        "{}",
        missing.message()
    );
    let big = page(&mut api, &op.id, &[], 1001, "").await.unwrap_err();
    assert_eq!(big.code(), tonic::Code::InvalidArgument);
    assert!(
        big.message().contains("page_size") && big.message().contains("1000"),
        "{}",
        big.message()
    );
    let foreign = page(&mut api, &op.id, &[], 0, "100").await.unwrap_err();
    assert_eq!(foreign.code(), tonic::Code::InvalidArgument);
    assert!(
        foreign.message().contains("page_token"),
        "{}",
        foreign.message()
    );
    let no_token = gw
        .api_with_token(None)
        .await
        .list_operation_targets(pb::ListOperationTargetsRequest {
            operation_id: op.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(no_token.code(), tonic::Code::Unauthenticated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_operation_has_one_target_and_bad_requests_are_named_sqlite() {
    sandbox_operation_and_errors(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_operation_has_one_target_and_bad_requests_are_named_postgres() {
    sandbox_operation_and_errors(Backend::Postgres).await;
}

/// The plan each store makes of a page: a search along the targets'
/// primary key from the previous page's last sandbox, with the filter and
/// the limit, never a scan of every target (a fleet has 10k of them).
async fn a_page_is_a_key_range_search(backend: Backend) {
    use sqlx::{Connection, Row};

    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    for i in 0..3 {
        create_sandbox(&mut api, &format!("plan-{i}"), POLICY).await;
    }
    let op_id = global_write(&mut api).await;
    listed(&api, &op_id, 3).await;
    for states in [
        vec![],
        vec![OperationState::Failed, OperationState::Pending],
    ] {
        let states: Vec<openshell_gateway::store::OperationState> = states
            .iter()
            .map(|s| openshell_gateway::store::OperationState::parse(s.as_str()).unwrap())
            .collect();
        let sql = openshell_gateway::store::target_page_sql(&states);
        let plan: Vec<String> = match backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&gw.store.url)
                    .await
                    .unwrap();
                sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind(&op_id)
                    .bind("")
                    .bind(101_i64)
                    .fetch_all(&mut conn)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get::<String, _>("detail"))
                    .collect()
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&gw.store.url).await.unwrap();
                // A three-row table is cheapest to scan; what matters is that
                // the key can serve the page, so scans are priced out.
                sqlx::query("SET enable_seqscan = off")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
                    .bind(&op_id)
                    .bind("")
                    .bind(101_i64)
                    .fetch_all(&mut conn)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get::<String, _>(0))
                    .collect()
            }
        };
        let text = plan.join("\n");
        match backend {
            Backend::Sqlite => {
                assert!(
                    text.contains(
                        "SEARCH t USING INDEX sqlite_autoindex_operation_targets_1 \
                         (operation_id=? AND sandbox_id>?)"
                    ),
                    "{text}"
                );
                assert!(!text.contains("SCAN t"), "{text}");
                assert!(
                    !text.contains("TEMP B-TREE"),
                    "sorted, not read in order: {text}"
                );
            }
            Backend::Postgres => {
                assert!(text.contains("operation_targets_pkey"), "{text}");
                assert!(!text.contains("Seq Scan on operation_targets"), "{text}");
                assert!(!text.contains("Sort"), "sorted, not read in order: {text}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_is_a_key_range_search_sqlite() {
    a_page_is_a_key_range_search(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_is_a_key_range_search_postgres() {
    a_page_is_a_key_range_search(Backend::Postgres).await;
}
