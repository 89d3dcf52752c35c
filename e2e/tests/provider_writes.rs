//! Provider writes the outside probe found wrong, each against a real gateway. Each
//! section names its defect.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::cli::openshell;
use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{
    Api, Backend, POLICY, TestGateway, TestStore, create_sandbox, eventually, get_sandbox,
    sandbox_ref, terminal_operation,
};
use openshell_gateway::DeliveryMode;
use openshell_gateway::error::GatewayError;
use openshell_gateway::providers;
use openshell_gateway::store::Constraint;
use openshell_proto::v1 as pb;
use tonic::Code;

const DEADLINE: Duration = Duration::from_secs(60);

fn plain(name: &str, value: &str) -> pb::ProviderValueInput {
    pb::ProviderValueInput {
        name: name.into(),
        value: value.into(),
        class: pb::ValueClass::NonSecret as i32,
        expires_at: None,
    }
}

fn credential(name: &str, expires_at: Option<prost_types::Timestamp>) -> pb::ProviderValueInput {
    pb::ProviderValueInput {
        name: name.into(),
        value: "s3cret".into(),
        class: pb::ValueClass::Credential as i32,
        expires_at,
    }
}

/// `count` values of `bytes` each, named `PREFIX_0…`.
fn bulky(prefix: &str, count: usize, bytes: usize) -> Vec<pb::ProviderValueInput> {
    (0..count)
        .map(|i| plain(&format!("{prefix}_{i}"), &"x".repeat(bytes)))
        .collect()
}

async fn create_provider(api: &mut Api, name: &str, values: Vec<pb::ProviderValueInput>) {
    api.create_provider(pb::CreateProviderRequest {
        name: name.into(),
        r#type: "generic".into(),
        values,
        ..Default::default()
    })
    .await
    .unwrap();
}

fn attach(sandbox: &str, provider: &str) -> pb::AttachProviderRequest {
    pb::AttachProviderRequest {
        sandbox: sandbox_ref(sandbox),
        provider: provider.into(),
    }
}

async fn provider_revision(api: &Api, name: &str) -> u64 {
    api.clone()
        .get_provider(pb::GetProviderRequest {
            provider: name.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .revision
}

// ------------------------------------------------------------- attach racing delete

/// The attach whose provider was deleted after it was read, at the store and the domain
/// layer: deterministic, no race needed.
async fn an_attach_after_its_provider_was_deleted_is_not_found(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "web", POLICY).await;
    create_provider(&mut api, "doomed", vec![plain("DOOMED", "1")]).await;
    let store = &gw.state().store;
    let record = store.get_sandbox(&id).await.unwrap();
    let provider = providers::resolve(store, "doomed", "default")
        .await
        .unwrap();
    providers::delete_provider(store, &provider).await.unwrap();

    // The store says which constraint broke, and that is never an outage.
    let mut tx = store.begin_write().await.unwrap();
    let err = tx.attach(&id, &provider.id).await.unwrap_err();
    assert_eq!(err.constraint(), Some(Constraint::ForeignKey), "{err:?}");
    let status = tonic::Status::from(GatewayError::from(err));
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    drop(tx);

    // The attach names the provider that is gone.
    let err = providers::attach(store, &record, &provider, true, "test")
        .await
        .unwrap_err();
    let status = tonic::Status::from(err);
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert_eq!(
        status.message(),
        format!(
            "provider default/doomed ({}) was deleted; nothing was attached",
            provider.id
        )
    );
    let after = get_sandbox(&api, &id).await;
    assert_eq!(after.attachment_epoch, 0);

    // The delete that an attach beat between its count and its statement: the row the
    // attach made refers to the provider, and the store refuses the delete for it.
    create_provider(&mut api, "kept", vec![plain("KEPT", "1")]).await;
    api.attach_provider(attach(&id, "kept")).await.unwrap();
    let kept = providers::resolve(store, "kept", "default").await.unwrap();
    let mut tx = store.begin_write().await.unwrap();
    let err = tx.delete_provider(&kept.id).await.unwrap_err();
    assert_eq!(err.constraint(), Some(Constraint::ForeignKey), "{err:?}");
    let status = tonic::Status::from(GatewayError::from(err));
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_after_its_provider_was_deleted_is_not_found_on_sqlite() {
    an_attach_after_its_provider_was_deleted_is_not_found(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_after_its_provider_was_deleted_is_not_found_on_postgres() {
    an_attach_after_its_provider_was_deleted_is_not_found(Backend::Postgres).await;
}

const RACES: usize = 40;

/// Probe: of 40 attaches racing a delete of their provider, 29 answered UNAVAILABLE "store is
/// unavailable" on SQLite; on PostgreSQL 36 attaches and 4 deletes did. Each pair ends one
/// way or the other: the attach wins (the delete is refused naming the sandbox) or the
/// delete does (the attach is NOT_FOUND), and what is stored agrees with the answers.
async fn attaches_racing_deletes_are_never_unavailable(backend: Backend) {
    let gw = TestGateway::start_on(TestStore::new(backend).await, DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "raced", POLICY).await;
    for i in 0..RACES {
        create_provider(
            &mut api,
            &format!("p{i}"),
            vec![plain(&format!("V{i}"), "1")],
        )
        .await;
    }
    let pairs = (0..RACES).map(|i| {
        let (mut attacher, mut deleter) = (api.clone(), api.clone());
        let id = id.clone();
        async move {
            let name = format!("p{i}");
            let attached = attacher.attach_provider(attach(&id, &name));
            let deleted = deleter.delete_provider(pb::DeleteProviderRequest {
                provider: name.clone(),
                workspace: String::new(),
            });
            let (attached, deleted) = tokio::join!(attached, deleted);
            (name, attached.map(drop), deleted.map(drop))
        }
    });
    let outcomes = futures::future::join_all(pairs).await;
    let stored = get_sandbox(&api, &id).await.providers().to_vec();
    let mut problems = Vec::new();
    for (name, attached, deleted) in &outcomes {
        match (attached, deleted) {
            (Ok(()), Err(e)) if e.code() == Code::FailedPrecondition => {
                if !e.message().contains("default/raced") {
                    problems.push(format!("{name}: the refusal names no sandbox: {e:?}"));
                }
                if !stored.contains(name) {
                    problems.push(format!("{name}: attached, yet not stored"));
                }
            }
            (Err(e), Ok(())) if e.code() == Code::NotFound => {
                if !e.message().contains(name.as_str()) {
                    problems.push(format!("{name}: the NOT_FOUND names another: {e:?}"));
                }
                if stored.contains(name) {
                    problems.push(format!("{name}: deleted, yet still attached"));
                }
            }
            other => problems.push(format!("{name}: {other:?}")),
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {RACES} pairs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaches_racing_deletes_are_never_unavailable_on_sqlite() {
    attaches_racing_deletes_are_never_unavailable(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaches_racing_deletes_are_never_unavailable_on_postgres() {
    attaches_racing_deletes_are_never_unavailable(Backend::Postgres).await;
}

// ------------------------------------------------------------- expiry times

/// Probe: `expires_at` with seconds of ±2^63 or nanos of -1 or 2·10⁹ was cut to fit, so the
/// earliest-expiry gauge read -9223372036854776 and `provider list` showed `-` for a
/// credential long expired. Such times are refused naming the field; a time before 1970 is a
/// valid one, counted as it is and shown expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_times_follow_the_timestamp_rules() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let mut api = gw.api().await;
    let at = |seconds: i64, nanos: i32| Some(prost_types::Timestamp { seconds, nanos });
    let refused = [
        (at(i64::MAX, 0), None, "expires_at.seconds"),
        (at(i64::MIN, 0), None, "expires_at.seconds"),
        (None, at(0, -1), "values[2].expires_at.nanos"),
        (None, at(0, 2_000_000_000), "values[2].expires_at.nanos"),
        (None, at(253_402_300_800, 0), "values[2].expires_at.seconds"),
    ];
    for (provider_at, value_at, field) in refused {
        let err = api
            .create_provider(pb::CreateProviderRequest {
                name: "timed".into(),
                r#type: "generic".into(),
                values: vec![
                    plain("A", "1"),
                    plain("B", "2"),
                    credential("TOKEN", value_at),
                ],
                expires_at: provider_at,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().starts_with(field), "{field}: {err:?}");
    }
    let listed = api
        .list_providers(pb::ListProvidersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.providers.is_empty(), "{listed:?}");

    // 1960-01-01: valid, and long expired.
    api.create_provider(pb::CreateProviderRequest {
        name: "expired".into(),
        r#type: "generic".into(),
        values: vec![credential("TOKEN", at(-315_619_200, 0))],
        ..Default::default()
    })
    .await
    .unwrap();
    let store = &gw.state().store;
    let gauges = store.gauges(0).await.unwrap();
    assert_eq!(gauges.earliest_credential_expiry_ms, Some(-315_619_200_000));
    gw.state().metrics.record_store(&gauges);
    assert_eq!(
        openshell_e2e::metric(
            &gw,
            "openshell_provider_credentials_earliest_expiry_timestamp_seconds"
        )
        .await,
        -315_619_200.0
    );
    let run = openshell(&gw.endpoint(), &["provider", "list"], None).await;
    run.expect(0);
    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("expired "))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(
        row.contains("expired 1960-01-01T00:00:00.000Z"),
        "{}",
        run.stdout
    );
}

// ------------------------------------------------------------- WORKSPACE/NAME

/// Probe: `openshell provider attach SB ws/name` looked for a provider named `ws/name` in
/// the sandbox's workspace, and said so. It looks for `name` in `ws`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_named_with_its_workspace_is_looked_up_there() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let endpoint = gw.endpoint();
    let cli = |args: &'static [&'static str]| openshell(&endpoint, args, None);
    cli(&["sandbox", "create", "web", "--workspace", "team"])
        .await
        .expect(0);
    cli(&["sandbox", "create", "api"]).await.expect(0);
    cli(&[
        "provider",
        "create",
        "gh",
        "--type",
        "github",
        "--workspace",
        "team",
        "--env",
        "GITHUB_ORG=acme",
    ])
    .await
    .expect(0);

    let missing = cli(&["provider", "attach", "team/web", "team/nope"]).await;
    assert_ne!(missing.code, 0);
    assert!(
        missing
            .stderr
            .contains(r#"provider "nope" not found in workspace "team""#),
        "{}",
        missing.stderr
    );
    let elsewhere = cli(&["provider", "attach", "api", "team/gh"]).await;
    assert_ne!(elsewhere.code, 0);
    assert!(
        elsewhere
            .stderr
            .contains(r#"provider gh lives in workspace "team", the sandbox in "default""#),
        "{}",
        elsewhere.stderr
    );
    cli(&["provider", "attach", "team/web", "team/gh"])
        .await
        .expect(0);
    let shown = cli(&["provider", "get", "team/gh"]).await;
    shown.expect(0);
    assert!(
        shown.stdout.contains("attached sandboxes"),
        "{}",
        shown.stdout
    );
}

// ------------------------------------------------------------- the bootstrap limit

/// Probe: three providers of 16 × 60 KB values attached; every reconnect was then refused
/// ("bootstrap is 2883385 bytes; the limit is 1048576 bytes"), the workload never started
/// and operations stayed PENDING. The attach that would cross the limit is refused, so the
/// sandbox's supervisor starts and the attach that was accepted is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_past_the_bootstrap_limit_is_refused_and_the_sandbox_still_starts() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, secret) = create_sandbox(&mut api, "bulky", POLICY).await;
    for name in ["bulk-a", "bulk-b", "bulk-c"] {
        let prefix = name.replace('-', "_").to_uppercase();
        create_provider(&mut api, name, bulky(&prefix, 16, 60_000)).await;
    }
    let first = api
        .attach_provider(attach(&id, "bulk-a"))
        .await
        .unwrap()
        .into_inner();
    let before = get_sandbox(&api, &id).await;
    let operations_before = gw.state().store.count_operations().await.unwrap();

    for name in ["bulk-b", "bulk-c"] {
        let err = api.attach_provider(attach(&id, name)).await.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        let message = err.message();
        for needle in [
            format!("attaching provider default/{name}"),
            format!("sandbox default/bulky ({id})"),
            "the limit is 1048576 bytes".to_string(),
        ] {
            assert!(message.contains(&needle), "{needle:?} in {message}");
        }
        let size: usize = message
            .split("bytes;")
            .next()
            .and_then(|head| head.rsplit(' ').nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no size in {message}"));
        assert!(size > 1_048_576, "{message}");
    }
    let after = get_sandbox(&api, &id).await;
    assert_eq!(after.attachment_epoch, before.attachment_epoch);
    assert_eq!(after.providers(), before.providers());
    assert_eq!(
        gw.state().store.count_operations().await.unwrap(),
        operations_before,
        "a refused attach records no operation"
    );

    // A provider update that grows an attached provider past the limit is refused too;
    // one that keeps its size is not.
    create_provider(&mut api, "small", vec![plain("SMALL", "s")]).await;
    api.attach_provider(attach(&id, "small")).await.unwrap();
    let err = api
        .update_provider(pb::UpdateProviderRequest {
            provider: "small".into(),
            values: bulky("SMALL", 2, 60_000),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    for needle in [
        "the new values of provider default/small",
        "sandbox default/bulky",
        "the limit is 1048576 bytes",
    ] {
        assert!(err.message().contains(needle), "{needle:?} in {err:?}");
    }
    assert_eq!(provider_revision(&api, "small").await, 1);
    api.update_provider(pb::UpdateProviderRequest {
        provider: "bulk-a".into(),
        values: bulky("BULK_Y", 16, 60_000),
        ..Default::default()
    })
    .await
    .unwrap();

    let dir = gw.store.dir.path().join("bulky");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &secret, &dir, &[]);
    eventually("the workload to start", DEADLINE, || async {
        supervisor
            .workload_lines()
            .iter()
            .any(|l| l.starts_with("started"))
            .then_some(())
    })
    .await;
    // The attach accepted first ends (APPLIED, or SUPERSEDED by the writes after it), and
    // no operation of the sandbox is left waiting.
    let first = terminal_operation(&api, &first.operation.unwrap().id).await;
    assert!(
        [pb::OperationState::Applied, pb::OperationState::Superseded]
            .map(|s| s as i32)
            .contains(&first.state),
        "{first:?}"
    );
    eventually("every operation of the sandbox to end", DEADLINE, || {
        let mut api = api.clone();
        let id = id.clone();
        async move {
            let listed = api
                .list_operations(pb::ListOperationsRequest {
                    sandbox: sandbox_ref(&id),
                    page_size: 1000,
                    ..Default::default()
                })
                .await
                .ok()?
                .into_inner();
            let waiting =
                [pb::OperationState::Pending, pb::OperationState::Delivered].map(|s| s as i32);
            (!listed
                .operations
                .iter()
                .any(|op| waiting.contains(&op.state)))
            .then_some(())
        }
    })
    .await;
    assert_eq!(
        get_sandbox(&api, &id).await.lifecycle,
        pb::SandboxLifecycle::Running as i32
    );
}
