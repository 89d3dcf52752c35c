//! One source of truth for starting a sandbox: a real supervisor process starts its workload
//! from an accepted bootstrap (push) or, under a session negotiated as poll, from its first
//! successful poll; never from polled configuration after its push startup was refused.
//! The supervisor's on-apply hook refuses while a marker file exists, which is the cause the
//! tests fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use openshell_e2e::inspect;
use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{
    Api, POLICY, TestGateway, create_sandbox, eventually, lifecycle, metric, policy_with_port,
    state, terminal_operation, wait_started,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;

const DEADLINE: Duration = Duration::from_secs(60);
const POLLS: &str = "openshell_config_poll_requests_total{rpc=\"GetSandboxConfig\"}";
const BOOTSTRAPS_APPLIED: &str = "openshell_config_bootstraps_total{outcome=\"applied\"}";
const BOOTSTRAPS_FAILED: &str = "openshell_config_bootstraps_total{outcome=\"failed\"}";
const NOT_STARTED: &str = "sandbox has not started";

/// An on-apply hook that refuses every configuration while `marker` exists.
fn refusing_hook(marker: &Path) -> String {
    format!(
        "if [ -e '{}' ]; then echo 'the startup marker is present' >&2; exit 3; fi",
        marker.display()
    )
}

async fn commit_policy(api: &Api, id: &str, policy: String) -> pb::Operation {
    api.clone()
        .update_config(pb::UpdateConfigRequest {
            sandbox: id.into(),
            policy_text: policy,
            mode: pb::UpdateMode::CommitOnly as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
}

/// The not-started hint, once the supervisor's refusal has been reported.
async fn not_started_hint(api: &Api, id: &str) -> String {
    eventually("the not-started hint", DEADLINE, || async {
        inspect(api, id)
            .await
            .hints
            .into_iter()
            .find(|h| h.contains(NOT_STARTED))
    })
    .await
}

/// A push startup refused by the supervisor (its bootstrap failed) is retried with backoff,
/// and while it is refused the supervisor does not poll, though the gateway would serve the
/// configuration: nothing but an accepted bootstrap starts the workload. Once the cause is
/// fixed, the next session's bootstrap starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_push_startup_never_starts_the_workload_from_polled_configuration() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "refused", POLICY).await;
    let dir = gw.store.dir.path().join("refused");
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("refuse");
    std::fs::write(&marker, "").unwrap();
    let hook = refusing_hook(&marker);
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir,
        &["--on-apply", &hook],
    );

    eventually("a failed bootstrap", DEADLINE, || async {
        (metric(&gw, BOOTSTRAPS_FAILED).await >= 1.0).then_some(())
    })
    .await;
    // A change committed meanwhile travels in the next bootstrap, which fails too: its
    // operation ends FAILED with the hook's refusal.
    let op = commit_policy(&api, &id, policy_with_port(8443)).await;
    assert_eq!(op.policy_revision, 2);
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Failed, "{done:?}");
    assert!(done.error.contains("on-apply"), "{}", done.error);
    eventually("several refused startups", DEADLINE, || async {
        (metric(&gw, BOOTSTRAPS_FAILED).await >= 3.0).then_some(())
    })
    .await;

    // Refused: the sandbox stays pending, the workload has not started, nothing was polled,
    // and the inspection says why and what happens next.
    assert_eq!(lifecycle(&api, &id).await, pb::SandboxLifecycle::Pending);
    assert!(
        !supervisor.workload_started(),
        "{:?}",
        supervisor.workload_lines()
    );
    assert_eq!(
        metric(&gw, POLLS).await,
        0.0,
        "a refused startup polls nothing"
    );
    let hint = not_started_hint(&api, &id).await;
    assert!(hint.contains("on-apply"), "{hint}");
    assert!(hint.contains("waits for an accepted bootstrap"), "{hint}");
    assert!(
        !inspect(&api, &id)
            .await
            .hints
            .iter()
            .any(|h| h.contains("last-known-good")),
        "nothing ran before, so nothing is kept"
    );
    let log = supervisor.guard.log_text();
    assert!(log.contains("bootstrap failed on the supervisor"), "{log}");
    assert!(log.contains("startup not accepted"), "{log}");
    assert!(!log.contains("polling takes over"), "{log}");

    // The cause is fixed: the next session's bootstrap starts the workload.
    std::fs::remove_file(&marker).unwrap();
    wait_started(&supervisor).await;
    eventually("the sandbox to be RUNNING", DEADLINE, || async {
        (lifecycle(&api, &id).await == pb::SandboxLifecycle::Running).then_some(())
    })
    .await;
    assert_eq!(metric(&gw, BOOTSTRAPS_APPLIED).await, 1.0);
    assert_eq!(metric(&gw, POLLS).await, 0.0, "started from the bootstrap");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443"),
        "revision 2 came with the bootstrap"
    );
    let inspection = inspect(&api, &id).await;
    assert!(inspection.connected);
    assert_eq!(inspection.negotiated_mode, pb::DeliveryMode::Push as i32);
    assert!(
        !inspection.hints.iter().any(|h| h.contains(NOT_STARTED)),
        "{:?}",
        inspection.hints
    );
    assert!(
        inspection.last_report.starts_with("APPLIED"),
        "{}",
        inspection.last_report
    );
}

/// A session negotiated as poll (a gateway that does not offer push, or a legacy supervisor)
/// starts the workload from its first successful poll: a poll whose apply failed starts
/// nothing, and the first one that applies does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_negotiated_as_poll_starts_the_workload_from_its_first_successful_poll() {
    let cases: [(&str, DeliveryMode, &[&str]); 2] = [
        ("poll-gateway", DeliveryMode::Poll, &[]),
        (
            "legacy-supervisor",
            DeliveryMode::Push,
            &["--protocol-revision", "0"],
        ),
    ];
    for (name, mode, flags) in cases {
        let gw = TestGateway::start_for_delivery(mode).await;
        let mut api = gw.api().await;
        let (id, credential) = create_sandbox(&mut api, name, POLICY).await;
        let dir = gw.store.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("refuse");
        std::fs::write(&marker, "").unwrap();
        let hook = refusing_hook(&marker);
        let mut args = vec!["--on-apply", hook.as_str()];
        args.extend_from_slice(flags);
        let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &args);

        // The first poll's apply failed: nothing started, the session stays up in poll mode.
        let hint = not_started_hint(&api, &id).await;
        assert!(hint.contains("on-apply"), "{name}: {hint}");
        let inspection = inspect(&api, &id).await;
        assert!(inspection.connected, "{name}");
        assert_eq!(
            inspection.negotiated_mode,
            pb::DeliveryMode::Poll as i32,
            "{name}"
        );
        assert!(
            inspection.last_report.starts_with("FAILED"),
            "{name}: {}",
            inspection.last_report
        );
        assert_eq!(
            lifecycle(&api, &id).await,
            pb::SandboxLifecycle::Pending,
            "{name}"
        );
        assert!(!supervisor.workload_started(), "{name}");

        // Fixed, and a new revision to poll: it applies, and the workload starts from it.
        std::fs::remove_file(&marker).unwrap();
        let op = commit_policy(&api, &id, policy_with_port(8443)).await;
        let done = terminal_operation(&api, &op.id).await;
        assert_eq!(
            state(&done),
            pb::OperationState::Applied,
            "{name}: {done:?}"
        );
        assert_eq!(done.outcome, pb::ApplyOutcome::Applied as i32, "{name}");
        wait_started(&supervisor).await;
        eventually("the sandbox to be RUNNING", DEADLINE, || async {
            (lifecycle(&api, &id).await == pb::SandboxLifecycle::Running).then_some(())
        })
        .await;
        assert!(metric(&gw, POLLS).await > 0.0, "{name}");
        assert_eq!(metric(&gw, BOOTSTRAPS_APPLIED).await, 0.0, "{name}");
        assert!(
            supervisor
                .active_file("policy.json")
                .unwrap()
                .contains("8443"),
            "{name}"
        );
        let inspection = inspect(&api, &id).await;
        assert!(
            !inspection.hints.iter().any(|h| h.contains(NOT_STARTED)),
            "{name}: {:?}",
            inspection.hints
        );
    }
}
