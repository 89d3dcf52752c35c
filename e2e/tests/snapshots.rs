//! The snapshot builder's shared inputs (global policy, global and
//! workspace settings) are cached by revision: a build must still see a
//! write made through another replica sharing the store. Concurrent builds
//! share one read statement: each must still get its own sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::FutureExt;
use openshell_e2e::{Backend, POLICY, TestGateway, TestStore, create_sandbox, policy_with_port};
use openshell_gateway::DeliveryMode;
use openshell_gateway::delivery::Component;
use openshell_gateway::error::GatewayError;
use openshell_gateway::snapshot::{build_sandbox_config, start_build};
use openshell_gateway::store::{ReadPriority, StoreError};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;

fn setting(target: pb::UpdateConfigRequest, key: &str, value: &str) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        settings: vec![pb::SettingChange {
            key: key.into(),
            change: Some(pb::setting_change::Change::Raw(value.into())),
        }],
        mode: pb::UpdateMode::CommitOnly as i32,
        ..target
    }
}

fn value_of(snapshot: &sb::GetSandboxConfigResponse, key: &str) -> String {
    format!("{:?}", snapshot.settings[key].value)
}

/// Every port the snapshot's policy allows.
fn ports_of(snapshot: &sb::GetSandboxConfigResponse) -> Vec<u32> {
    snapshot
        .policy
        .iter()
        .flat_map(|p| p.network_policies.values())
        .flat_map(|rule| rule.endpoints.iter())
        .flat_map(|e| std::iter::once(e.port).chain(e.ports.iter().copied()))
        .filter(|port| *port != 0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_sees_shared_writes_made_through_another_replica() {
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
    let mut api = first.api().await;
    let (id, _) = create_sandbox(&mut api, "cached", POLICY).await;
    let store = &first.state().store;
    let before = build_sandbox_config(store, &id).await.unwrap();

    let mut other = second.api().await;
    other
        .update_config(setting(
            openshell_e2e::to_global(),
            "log_rate_limit_per_second",
            "77",
        ))
        .await
        .unwrap();
    other
        .update_config(setting(
            openshell_e2e::to_workspace("default"),
            "log_level",
            "debug",
        ))
        .await
        .unwrap();
    other
        .update_config(pb::UpdateConfigRequest {
            global: true,
            policy_text: openshell_e2e::policy_with_port(9443),
            mode: pb::UpdateMode::CommitOnly as i32,
            ..Default::default()
        })
        .await
        .unwrap();

    let after = build_sandbox_config(store, &id).await.unwrap();
    assert_eq!(
        after.global_settings_revision,
        before.global_settings_revision + 1
    );
    assert_eq!(
        after.workspace_settings_revision,
        before.workspace_settings_revision + 1
    );
    assert_eq!(
        after.global_policy_revision,
        before.global_policy_revision + 1
    );
    assert!(
        value_of(&after, "log_rate_limit_per_second").contains("77"),
        "{after:?}"
    );
    assert!(value_of(&after, "log_level").contains("debug"), "{after:?}");
    assert_eq!(after.policy_source, sb::PolicySource::Global as i32);
    assert!(ports_of(&after).contains(&9443), "{after:?}");
}

async fn concurrent_builds_each_get_their_own_sandbox(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let mut sandboxes = Vec::new();
    for i in 0..40u32 {
        let port = 10_000 + i;
        let (id, _) =
            create_sandbox(&mut api, &format!("batched-{i}"), &policy_with_port(port)).await;
        sandboxes.push((id, port));
    }
    let store = &gw.state().store;
    // Every sandbox three times over, and two that do not exist, all at once:
    // far more reads than statements run at a time, so they share statements.
    let mut ids: Vec<String> = (0..3)
        .flat_map(|_| sandboxes.iter().map(|(id, _)| id.clone()))
        .collect();
    ids.push("sb-missing-1".into());
    ids.push("sb-missing-2".into());
    let builds =
        futures::future::join_all(ids.iter().map(|id| build_sandbox_config(store, id))).await;

    for (id, build) in ids.iter().zip(builds) {
        match sandboxes.iter().find(|(sandbox, _)| sandbox == id) {
            Some((_, port)) => {
                let snapshot = build.unwrap();
                assert_eq!(&snapshot.sandbox_id, id);
                // The example policy's other endpoints keep port 443.
                let ports = ports_of(&snapshot);
                assert!(
                    ports.contains(port) && ports.iter().all(|p| p == port || *p == 443),
                    "{id} got another sandbox's policy: ports {ports:?}"
                );
            }
            None => match build {
                Err(GatewayError::Store(StoreError::NotFound(message))) => {
                    assert!(message.contains(id), "{message}")
                }
                other => panic!("{id}: expected not found, got {other:?}"),
            },
        }
    }
}

mod concurrent_builds_each_get_their_own_sandbox {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::concurrent_builds_each_get_their_own_sandbox(openshell_e2e::Backend::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::concurrent_builds_each_get_their_own_sandbox(openshell_e2e::Backend::Postgres).await
    }
}

async fn a_build_someone_waits_for_does_not_queue_behind_a_fanouts_reads(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "foreground", POLICY).await;
    let store = &gw.state().store;
    // Warm the shared caches, so a read that is answered completes at once.
    build_sandbox_config(store, &id).await.unwrap();
    // A fanout's reads, asked for ahead: 1,563 statements of 64 sandboxes, far
    // more than the few that run beside the foreground build however slowly the
    // machine gives that build a core.
    let fanout: Vec<_> = (0..FANOUT_READS)
        .map(|_| store.request_sandbox_config_inputs(&id, ReadPriority::Background))
        .collect();
    build_sandbox_config(store, &id).await.unwrap();
    let mut unanswered = 0;
    for read in fanout {
        // Unconstrained: tokio's task budget would make answered reads look
        // pending after the first hundred or so polls.
        match tokio::task::unconstrained(read.inputs(store)).now_or_never() {
            Some(inputs) => assert_eq!(inputs.unwrap().sandbox.id, id),
            None => unanswered += 1,
        }
    }
    // Sharing the fanout's queue, it would have been answered after every one
    // of the fanout's reads, which were asked for before it. How many are left
    // depends on how fast the machine ran the fanout's statements meanwhile, so
    // only "some" is asserted.
    assert!(
        unanswered > 0,
        "the foreground build waited for all {FANOUT_READS} of the fanout's reads"
    );
}

/// Reads of the fanout in [`a_build_someone_waits_for_does_not_queue_behind_a_fanouts_reads`].
const FANOUT_READS: usize = 100_000;

// SQLite only: the batchers are the same on both backends, and a cold
// PostgreSQL pool may open the foreground read's connection only after the
// fanout's statements took the open ones, which makes the timing vary.
// One runtime thread: the batchers cannot answer any of the fanout's reads
// while the test asks for them, only while the foreground build is awaited.
#[tokio::test(flavor = "current_thread")]
async fn a_build_someone_waits_for_does_not_queue_behind_a_fanouts_reads_sqlite() {
    a_build_someone_waits_for_does_not_queue_behind_a_fanouts_reads(Backend::Sqlite).await
}

/// A policy's hash names its content: a build whose policy is already in
/// wire form in the gateway does not need the stored text, and one whose
/// hash is new reads it (here, text that is no policy at all). The write
/// that stores a policy keeps it in wire form, so the unseen hash is one
/// this gateway never wrote, as when another replica wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_policy_text_is_read_only_for_a_hash_not_yet_encoded() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let mut api = gw.api().await;
    let store = &gw.state().store;
    let (encoded, _) = create_sandbox(&mut api, "encoded", &policy_with_port(12_001)).await;
    let (unseen, _) = create_sandbox(&mut api, "unseen", &policy_with_port(12_002)).await;
    build_sandbox_config(store, &encoded).await.unwrap();

    openshell_e2e::alter_sqlite_store(
        &gw,
        &format!(
            "UPDATE policy_revisions SET policy_json = 'not a policy'; \
             UPDATE policy_revisions SET policy_hash = 'written-by-another-replica' \
             WHERE sandbox_id = '{unseen}'"
        ),
    )
    .await;

    let again = build_sandbox_config(store, &encoded).await.unwrap();
    assert!(ports_of(&again).contains(&12_001), "{again:?}");
    match build_sandbox_config(store, &unseen).await {
        Err(GatewayError::Corrupt(message)) => assert!(!message.is_empty()),
        other => panic!("expected the unseen policy's text to be read and refused, got {other:?}"),
    }
}

/// The revisions reconcile reads for a sandbox are exactly those its build
/// read (else every pass would rebuild, or a missed write would never be
/// found), and every kind of write that changes its snapshot moves them.
async fn reconcile_reads_the_revisions_a_build_reads(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let store = &gw.state().store;
    let (id, _) = create_sandbox(&mut api, "revisions", POLICY).await;
    let agreed = || async {
        let built = start_build(
            store,
            &id,
            Component::SandboxConfig,
            ReadPriority::Foreground,
        )
        .await
        .unwrap();
        let read = store
            .config_input_revisions(&[id.as_str(), "sb-missing"])
            .await
            .unwrap();
        assert_eq!(read.len(), 1, "a missing sandbox is left out: {read:?}");
        assert_eq!(Some(&read[&id]), built.input_revisions.as_ref());
        read[&id].clone()
    };
    let mut last = agreed().await;
    let writes: Vec<(&str, pb::UpdateConfigRequest)> = vec![
        (
            "sandbox policy",
            pb::UpdateConfigRequest {
                policy_text: policy_with_port(9101),
                mode: pb::UpdateMode::CommitOnly as i32,
                ..openshell_e2e::to_sandbox(&id)
            },
        ),
        (
            "sandbox setting",
            setting(openshell_e2e::to_sandbox(&id), "log_level", "debug"),
        ),
        (
            "workspace setting",
            setting(openshell_e2e::to_workspace("default"), "log_level", "warn"),
        ),
        (
            "global setting",
            setting(
                openshell_e2e::to_global(),
                "log_rate_limit_per_second",
                "55",
            ),
        ),
        (
            "global policy",
            pb::UpdateConfigRequest {
                policy_text: policy_with_port(9102),
                mode: pb::UpdateMode::CommitOnly as i32,
                ..openshell_e2e::to_global()
            },
        ),
    ];
    for (what, write) in writes {
        api.update_config(write).await.unwrap();
        let now = agreed().await;
        assert_ne!(now, last, "a {what} write moved nothing");
        last = now;
    }

    openshell_e2e::attach_new_provider(
        &mut api,
        &id,
        "org",
        "github",
        vec![openshell_e2e::plain_value("GITHUB_ORG", "acme")],
    )
    .await;
    let attached = agreed().await;
    assert_eq!(attached.attached_providers, 1);
    assert_ne!(attached, last);
    api.update_provider(pb::UpdateProviderRequest {
        provider: "org".into(),
        workspace: "default".into(),
        values: vec![openshell_e2e::plain_value("GITHUB_ORG", "example")],
        expires_at: None,
    })
    .await
    .unwrap();
    let updated = agreed().await;
    assert_eq!(updated.attachment_epoch, attached.attachment_epoch);
    assert!(updated.attached_provider_revision_sum > attached.attached_provider_revision_sum);

    // Stopped, it builds nothing; reconcile sees that it stopped.
    api.set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
        sandbox: openshell_e2e::sandbox_ref(&id),
        lifecycle: pb::SandboxLifecycle::Stopped as i32,
    })
    .await
    .unwrap();
    let stopped = &store.config_input_revisions(&[id.as_str()]).await.unwrap()[&id];
    assert!(stopped.stopped);
    assert_ne!(*stopped, updated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_reads_the_revisions_a_build_reads_sqlite() {
    reconcile_reads_the_revisions_a_build_reads(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_reads_the_revisions_a_build_reads_postgres() {
    reconcile_reads_the_revisions_a_build_reads(Backend::Postgres).await
}
