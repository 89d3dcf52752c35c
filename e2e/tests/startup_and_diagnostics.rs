//! The startup exchange (image policies on first start), provider fanout
//! touching only attaching sessions, `sessions inspect` hints for each
//! abnormal state, and retention of idempotency keys and operations.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::inspect;
use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{
    Api, Backend, POLICY, TestGateway, create_sandbox, eventually, sandbox_ref, terminal_operation,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;

const DEADLINE: Duration = Duration::from_secs(30);

async fn commit(api: &Api, id: &str, policy: String) -> pb::Operation {
    api.clone()
        .update_config(pb::UpdateConfigRequest {
            sandbox: id.into(),
            workspace_scope: openshell_e2e::workspace_scope(String::new()),
            policy_text: policy,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
}

async fn hints_eventually(api: &Api, id: &str, needle: &str) -> Vec<String> {
    eventually(
        &format!("a hint containing {needle:?}"),
        DEADLINE,
        || async {
            let i = inspect(api, id).await;
            i.hints
                .iter()
                .any(|h| h.contains(needle))
                .then_some(i.hints)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_policy_is_adopted_on_first_start_and_a_stored_one_wins() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let dir = gw.store.dir.path().to_path_buf();
    let image = dir.join("image-policy.yaml");
    std::fs::write(&image, POLICY.replacen("port: 443", "port: 6443", 1)).unwrap();

    // No stored policy: the image's is validated and stored as revision 1.
    let (fresh, credential) = create_sandbox(&mut api, "fresh", "").await;
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &fresh,
        &credential,
        &dir.join("fresh"),
        &["--image-policy", image.to_str().unwrap()],
    );
    eventually("the image policy to be active", DEADLINE, || async {
        supervisor
            .active_file("policy.json")
            .filter(|p| p.contains("6443"))
            .map(|_| ())
    })
    .await;
    let stored = api
        .get_sandbox_policy(pb::GetSandboxPolicyRequest {
            sandbox: sandbox_ref(&fresh),
            revision: 0,
            global: false,
        })
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap();
    assert_eq!(stored.revision, 1);
    assert!(stored.policy_yaml.contains("6443"));
    let op = terminal_operation(&api, &stored.operation_id).await;
    assert_eq!(op.state, pb::OperationState::Applied as i32, "{op:?}");
    assert!(op.caller.starts_with("supervisor:"), "{op:?}");

    // A stored policy wins over the image's.
    let (kept, credential) = create_sandbox(&mut api, "kept", POLICY).await;
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &kept,
        &credential,
        &dir.join("kept"),
        &["--image-policy", image.to_str().unwrap()],
    );
    eventually("the stored policy to be active", DEADLINE, || async {
        supervisor
            .active_file("policy.json")
            .filter(|p| p.contains("\"port\":443"))
            .map(|_| ())
    })
    .await;
    assert!(
        !supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("6443")
    );

    // An invalid image policy rejects the session and stores nothing.
    let bad = dir.join("bad-policy.yaml");
    std::fs::write(&bad, "version: 1\nnetwork_policies:\n  x:\n    endpoints:\n      - host: '*.com'\n        port: 443\n").unwrap();
    let (refused, credential) = create_sandbox(&mut api, "refused", "").await;
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &refused,
        &credential,
        &dir.join("refused"),
        &["--image-policy", bad.to_str().unwrap()],
    );
    eventually("the refusal in the supervisor log", DEADLINE, || async {
        let log = supervisor.guard.log_text();
        (log.contains("startup") && log.contains("host")).then_some(())
    })
    .await;
    // Polling takes over after the refusal and may already have applied the
    // gateway's (empty) policy; the image's is never active.
    assert!(
        supervisor
            .active_file("policy.json")
            .is_none_or(|p| !p.contains("*.com")),
        "{:?}",
        supervisor.active_file("policy.json")
    );
    assert_eq!(
        gw.state()
            .store
            .policy_revision_count(&refused)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_change_rebuilds_only_the_sandboxes_that_attach_it() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let dir = gw.store.dir.path().to_path_buf();
    let (with, c1) = create_sandbox(&mut api, "with", POLICY).await;
    let (without, c2) = create_sandbox(&mut api, "without", POLICY).await;
    openshell_e2e::attach_new_provider(
        &mut api,
        &with,
        "acme",
        "acme",
        vec![openshell_e2e::plain_value("ACME_REGION", "eu-1")],
    )
    .await;
    let s1 = spawn_supervisor(&gw.endpoint(), &with, &c1, &dir.join("with"), &[]);
    let s2 = spawn_supervisor(&gw.endpoint(), &without, &c2, &dir.join("without"), &[]);
    for id in [&with, &without] {
        eventually("bootstrap", DEADLINE, || async {
            inspect(&api, id)
                .await
                .recent_events
                .iter()
                .any(|e| e.text == "bootstrap applied")
                .then_some(())
        })
        .await;
    }
    api.update_provider(pb::UpdateProviderRequest {
        provider: "acme".into(),
        values: vec![pb::ProviderValueInput {
            name: "ACME_REGION".into(),
            value: "us-2".into(),
            class: pb::ValueClass::NonSecret as i32,
            expires_at: None,
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    eventually(
        "the new environment at the attaching sandbox",
        DEADLINE,
        || async {
            s1.active_file("provider-env.json")
                .filter(|t| t.contains("us-2"))
                .map(|_| ())
        },
    )
    .await;
    let untouched = inspect(&api, &without).await;
    assert!(
        !untouched
            .recent_events
            .iter()
            .any(|e| e.text.contains("provider_environment delivery")),
        "{:?}",
        untouched.recent_events
    );
    assert!(
        !s2.active_file("provider-env.json")
            .unwrap_or_default()
            .contains("ACME_REGION")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_inspect_names_every_abnormal_state() {
    let dir = tempfile::tempdir().unwrap();
    // Poll gateway.
    let gw = TestGateway::start_for_delivery(DeliveryMode::Poll).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "polled", POLICY).await;
    let _s = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir.path().join("polled"),
        &[],
    );
    hints_eventually(&api, &id, "gateway is in poll mode").await;
    drop(gw);

    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    // Disconnected: no supervisor at all.
    let (lonely, _) = create_sandbox(&mut api, "lonely", POLICY).await;
    hints_eventually(&api, &lonely, "no supervisor is connected").await;
    // Legacy supervisor.
    let (legacy, credential) = create_sandbox(&mut api, "legacy", POLICY).await;
    let _l = spawn_supervisor(
        &gw.endpoint(),
        &legacy,
        &credential,
        &dir.path().join("legacy"),
        &["--protocol-revision", "0"],
    );
    hints_eventually(&api, &legacy, "legacy supervisor").await;
    // Healthy push: no hints at all.
    let (healthy, credential) = create_sandbox(&mut api, "healthy", POLICY).await;
    let _h = spawn_supervisor(
        &gw.endpoint(),
        &healthy,
        &credential,
        &dir.path().join("healthy"),
        &[],
    );
    let op = commit(
        &api,
        &healthy,
        POLICY.replacen("port: 443", "port: 8443", 1),
    )
    .await;
    terminal_operation(&api, &op.id).await;
    let inspection = inspect(&api, &healthy).await;
    assert!(inspection.hints.is_empty(), "{:?}", inspection.hints);
    assert_eq!(inspection.negotiated_mode, pb::DeliveryMode::Push as i32);
    assert!(
        inspection
            .components
            .iter()
            .all(|c| c.ack_status.starts_with("APPLIED")),
        "{:?}",
        inspection.components
    );
    // Failed apply.
    let (failing, credential) = create_sandbox(&mut api, "failing", POLICY).await;
    let _f = spawn_supervisor(
        &gw.endpoint(),
        &failing,
        &credential,
        &dir.path().join("failing"),
        &[
            "--on-apply",
            "grep -q 9999 \"$OPENSHELL_POLICY_FILE\" && exit 3 || exit 0",
        ],
    );
    eventually("the failing sandbox's session", DEADLINE, || async {
        inspect(&api, &failing).await.connected.then_some(())
    })
    .await;
    let op = commit(
        &api,
        &failing,
        POLICY.replacen("port: 443", "port: 9999", 1),
    )
    .await;
    terminal_operation(&api, &op.id).await;
    let hints = hints_eventually(&api, &failing, "last update failed").await;
    assert!(
        hints.iter().any(|h| h.contains("last-known-good")),
        "{hints:?}"
    );
    // Local override.
    let (local, credential) = create_sandbox(&mut api, "local", POLICY).await;
    let local_file = dir.path().join("local.yaml");
    std::fs::write(&local_file, POLICY).unwrap();
    let _o = spawn_supervisor(
        &gw.endpoint(),
        &local,
        &credential,
        &dir.path().join("local"),
        &["--policy-file", local_file.to_str().unwrap()],
    );
    hints_eventually(&api, &local, "local policy override").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_idempotency_keys_are_released_and_old_operations_removed() {
    for backend in Backend::ALL {
        let gw = TestGateway::start(backend).await;
        let mut api = gw.api().await;
        let (id, _) = create_sandbox(&mut api, "retained", POLICY).await;
        let first = api
            .update_config(pb::UpdateConfigRequest {
                sandbox: id.clone(),
                workspace_scope: openshell_e2e::workspace_scope(String::new()),
                policy_text: POLICY.replacen("port: 443", "port: 8443", 1),
                request_id: "short-lived".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .operation
            .unwrap();
        let store = &gw.state().store;
        // Nothing has expired yet: the key stays reserved.
        assert_eq!(store.expire_idempotency_keys().await.unwrap(), 0);
        // As if the retention had passed.
        assert_eq!(store.expire_idempotency_keys_at(i64::MAX).await.unwrap(), 1);
        let reused = api
            .update_config(pb::UpdateConfigRequest {
                sandbox: id.clone(),
                workspace_scope: openshell_e2e::workspace_scope(String::new()),
                policy_text: POLICY.replacen("port: 443", "port: 9443", 1),
                request_id: "short-lived".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            !reused.idempotent_replay,
            "{backend:?}: an expired key can be reused for a new change"
        );
        assert_ne!(reused.operation.unwrap().id, first.id);

        // Operations: only terminal ones past retention are removed.
        api.delete_sandbox(pb::DeleteSandboxRequest {
            sandbox: sandbox_ref(&id),
        })
        .await
        .unwrap();
        let before = store.count_operations().await.unwrap();
        assert_eq!(
            store.remove_operations_completed_before(0).await.unwrap(),
            0
        );
        let removed = store
            .remove_operations_completed_before(i64::MAX)
            .await
            .unwrap();
        assert_eq!(removed, before, "{backend:?}");
        let err = api
            .get_operation(pb::GetOperationRequest {
                id: first.id.clone(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
    }
}

/// A policy that validation refuses: a wildcard host needs a label before the TLD.
const INVALID_POLICY: &str = "version: 1\nnetwork_policies:\n  x:\n    endpoints:\n      - host: '*.com'\n        port: 443\n";

/// A gateway in push mode that waits `wait` for an invalid startup policy to be fixed.
async fn gateway_waiting(wait: Duration) -> TestGateway {
    TestGateway::start_with(
        openshell_e2e::TestStore::new(Backend::Sqlite).await,
        DeliveryMode::Push,
        |config| config.delivery.invalid_startup_policy_wait = wait,
    )
    .await
}

/// The refusal `sessions inspect` shows for `id`, once it contains `needle`.
async fn refusal_eventually(api: &Api, id: &str, needle: &str) -> String {
    let hints = hints_eventually(api, id, needle).await;
    hints.into_iter().find(|h| h.contains(needle)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_image_policy_waits_for_an_operator_to_set_a_valid_one() {
    let gw = gateway_waiting(Duration::from_secs(600)).await;
    let mut api = gw.api().await;
    let dir = gw.store.dir.path().to_path_buf();
    let bad = dir.join("bad-policy.yaml");
    std::fs::write(&bad, INVALID_POLICY).unwrap();
    let (id, credential) = create_sandbox(&mut api, "fixable", "").await;
    let mut supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir.join("fixable"),
        &["--image-policy", bad.to_str().unwrap()],
    );
    let refusal = refusal_eventually(&api, &id, "set a valid policy with").await;
    assert!(refusal.contains("host"), "{refusal}");
    assert!(
        refusal.contains(&format!("openshell policy set {id} --policy FILE")),
        "{refusal}"
    );
    assert!(supervisor.workload_lines().is_empty());

    // The operator's policy is what the next attempt offers, and the start goes on.
    let op = commit(&api, &id, POLICY.replacen("port: 443", "port: 7443", 1)).await;
    let op = terminal_operation(&api, &op.id).await;
    assert_eq!(op.state, pb::OperationState::Applied as i32, "{op:?}");
    eventually("the workload to start", DEADLINE, || async {
        (!supervisor.workload_lines().is_empty()).then_some(())
    })
    .await;
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("7443")
    );
    assert!(supervisor.is_running());
    let inspection = inspect(&api, &id).await;
    assert!(inspection.connected, "{inspection:?}");
    assert!(
        !inspection.hints.iter().any(|h| h.contains("refused")),
        "{:?}",
        inspection.hints
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_image_policy_left_unfixed_ends_the_start_after_the_wait() {
    let gw = gateway_waiting(Duration::from_secs(3)).await;
    let mut api = gw.api().await;
    let dir = gw.store.dir.path().to_path_buf();
    let bad = dir.join("bad-policy.yaml");
    std::fs::write(&bad, INVALID_POLICY).unwrap();
    let (id, credential) = create_sandbox(&mut api, "unfixed", "").await;
    let mut supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir.join("unfixed"),
        &["--image-policy", bad.to_str().unwrap()],
    );
    refusal_eventually(&api, &id, "set a valid policy with").await;
    let refusal = refusal_eventually(&api, &id, "no valid policy was set within 3s").await;
    assert!(refusal.contains("this start fails"), "{refusal}");
    let deadline = std::time::Instant::now() + DEADLINE;
    while supervisor.is_running() {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor kept running: {}",
            supervisor.guard.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(supervisor.workload_lines().is_empty());
    assert!(supervisor.active_file("policy.json").is_none());
    let log = supervisor.guard.log_text();
    assert!(log.contains("no valid policy was set within 3s"), "{log}");
    assert!(!inspect(&api, &id).await.connected);
    assert_eq!(
        gw.state().store.policy_revision_count(&id).await.unwrap(),
        0
    );
}
