//! Configuration delivery end to end, with real supervisor processes and a
//! small workload, in poll and in push mode: apply and reload, failed
//! apply with last-known-good, local override, provider environment,
//! credentials, the compatibility matrix, restarts and rollback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::time::Duration;

use openshell_e2e::process::{SupervisorProcess, spawn_supervisor};
use openshell_e2e::{
    Api, POLICY, TestGateway, create_sandbox, eventually, metric, policy_with_port, state,
    terminal_operation, wait_running, wait_started,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;

const DEADLINE: Duration = Duration::from_secs(30);

macro_rules! in_both_modes {
    ($($name:ident),+ $(,)?) => {
        $(mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn poll() { super::$name(openshell_gateway::DeliveryMode::Poll).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn push() { super::$name(openshell_gateway::DeliveryMode::Push).await }
        })+
    };
}

in_both_modes!(
    a_committed_change_is_applied_signalled_and_resolved,
    a_rejected_apply_keeps_last_known_good,
    a_rejected_revision_never_cuts_a_sandbox_off,
    a_restarted_supervisor_keeps_its_last_known_good_when_the_latest_policy_is_refused,
    a_local_policy_file_keeps_precedence_but_settings_apply,
    provider_environment_reaches_the_workload_and_credentials_stay_private,
);

async fn commit_policy(api: &mut Api, sandbox: &str, policy: &str) -> pb::Operation {
    api.update_config(pb::UpdateConfigRequest {
        sandbox: String::from(sandbox),
        policy_text: policy.into(),
        mode: pb::UpdateMode::CommitOnly as i32,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .operation
    .unwrap()
}

async fn commit_setting(api: &mut Api, sandbox: &str, key: &str, raw: &str) -> pb::Operation {
    api.update_config(pb::UpdateConfigRequest {
        sandbox: String::from(sandbox),
        settings: vec![pb::SettingChange {
            key: key.into(),
            change: Some(pb::setting_change::Change::Raw(raw.into())),
        }],
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .operation
    .unwrap()
}

/// The on-apply hook of the last-known-good tests: a policy with port 9999 is refused.
const REFUSING_HOOK: &str = "if grep -q 9999 \"$OPENSHELL_POLICY_FILE\"; then echo 'port 9999 is forbidden here' >&2; exit 3; fi";

/// Makes `sandbox` keep its last-known-good policy when one is refused; the default (as
/// upstream) is fail_closed, which quarantines it instead.
async fn retain_last_valid(api: &mut Api, sandbox: &str) {
    let retain = commit_setting(
        api,
        sandbox,
        "policy_validation_failure_mode",
        "retain_last_valid",
    )
    .await;
    terminal_operation(api, &retain.id).await;
}

async fn a_committed_change_is_applied_signalled_and_resolved(mode: DeliveryMode) {
    let gw = TestGateway::start_for_delivery(mode).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "web", POLICY).await;
    let dir = gw.store.dir.path().join("web");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    wait_started(&supervisor).await;
    wait_running(&api, &id).await;
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("api.github.com")
    );
    let polls_before = metric(
        &gw,
        "openshell_config_poll_requests_total{rpc=\"GetSandboxConfig\"}",
    )
    .await;

    let op = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
    assert_eq!(op.policy_revision, 2);
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert_eq!(done.outcome, pb::ApplyOutcome::Applied as i32);
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );
    eventually("the workload's reload signal", DEADLINE, || async {
        (supervisor.reloads() >= 1).then_some(())
    })
    .await;

    let polls_after = metric(
        &gw,
        "openshell_config_poll_requests_total{rpc=\"GetSandboxConfig\"}",
    )
    .await;
    match mode {
        DeliveryMode::Push => {
            assert_eq!(polls_before, 0.0, "a push supervisor never polls");
            assert_eq!(polls_after, 0.0, "a push supervisor never polls");
            assert_eq!(
                metric(
                    &gw,
                    "openshell_config_bootstraps_total{outcome=\"applied\"}"
                )
                .await,
                1.0
            );
        }
        DeliveryMode::Poll => assert!(polls_after > polls_before),
    }
    // The config the supervisor reports back is exactly what was committed.
    let inspect = api
        .inspect_session(pb::InspectSessionRequest {
            sandbox: Some(pb::SandboxRef {
                id_or_name: id.clone(),
                workspace: String::new(),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(inspect.connected);
    assert!(
        inspect.last_report.starts_with("APPLIED"),
        "{}",
        inspect.last_report
    );
    assert!(
        inspect.last_report.contains("\"policy_revision\":2"),
        "{}",
        inspect.last_report
    );
}

async fn a_rejected_apply_keeps_last_known_good(mode: DeliveryMode) {
    let gw = TestGateway::start_for_delivery(mode).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "picky", POLICY).await;
    let dir = gw.store.dir.path().join("picky");
    // The hook refuses any policy that opens port 9999.
    let mut supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir,
        &["--on-apply", REFUSING_HOOK],
    );
    wait_started(&supervisor).await;
    wait_running(&api, &id).await;
    retain_last_valid(&mut api, &id).await;
    let good = supervisor.active_file("policy.json").unwrap();

    let op = commit_policy(&mut api, &id, &policy_with_port(9999)).await;
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Failed, "{done:?}");
    assert_eq!(
        done.outcome,
        pb::ApplyOutcome::FailedRetainedLastKnownGood as i32
    );
    assert!(done.error.contains("on-apply"), "{}", done.error);
    assert_eq!(
        supervisor.active_file("policy.json").unwrap(),
        good,
        "last-known-good stays active"
    );
    assert!(supervisor.is_running());
    let starts = supervisor
        .workload_lines()
        .iter()
        .filter(|l| l.starts_with("started"))
        .count();
    assert_eq!(starts, 1, "the workload was not restarted");

    if mode == DeliveryMode::Push {
        // Reconcile rebuilds the same rejected content every second; it is not resent.
        eventually("suppressed resends", DEADLINE, || async {
            (metric(&gw, "openshell_config_suppressed_resends_total").await >= 2.0).then_some(())
        })
        .await;
        // Its settings and provider environment were in effect already; its policy is not.
        assert_eq!(
            metric(
                &gw,
                "openshell_config_acks_total{status=\"RETAINED_LAST_KNOWN_GOOD_POLICY\"}"
            )
            .await,
            1.0
        );
    }

    // A fix in the store is picked up and applied.
    let fixed = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
    let done = terminal_operation(&api, &fixed.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );
}

/// Bootstraps the gateway has an outcome for, whatever the outcome.
async fn bootstraps_answered(gw: &TestGateway) -> f64 {
    let mut answered = 0.0;
    for outcome in [
        "applied",
        "mismatch",
        "failed",
        "policy_rejected",
        "failed_kept_last_known_good",
        "timed_out",
        "build_failed",
    ] {
        answered += metric(
            gw,
            &format!("openshell_config_bootstraps_total{{outcome=\"{outcome}\"}}"),
        )
        .await;
    }
    answered
}

async fn inspect_hints(api: &Api, sandbox: &str) -> Vec<String> {
    api.clone()
        .inspect_session(pb::InspectSessionRequest {
            sandbox: Some(pb::SandboxRef {
                id_or_name: sandbox.to_string(),
                workspace: String::new(),
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .hints
}

/// Defect: a sandbox whose policy revision was rejected by its on-apply hook was fine until the
/// gateway restarted; then every reconnect's bootstrap carried the rejected revision, the
/// supervisor refused it, the gateway closed the session ("bootstrap failed on the
/// supervisor"), and the supervisor reconnected in a loop; an unrelated settings write then
/// ended FAILED with the policy's error. Now the session stays on last-known-good, settings
/// still apply, and inspect names the rejected revision.
async fn a_rejected_revision_never_cuts_a_sandbox_off(mode: DeliveryMode) {
    let gw = TestGateway::start_for_delivery(mode).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "cutoff", POLICY).await;
    let dir = gw.store.dir.path().join("cutoff");
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir,
        &["--on-apply", REFUSING_HOOK],
    );
    wait_started(&supervisor).await;
    wait_running(&api, &id).await;
    retain_last_valid(&mut api, &id).await;
    let good = supervisor.active_file("policy.json").unwrap();

    let bad = commit_policy(&mut api, &id, &policy_with_port(9999)).await;
    let rejected = bad.policy_revision;
    let done = terminal_operation(&api, &bad.id).await;
    assert_eq!(state(&done), pb::OperationState::Failed, "{done:?}");
    let named = format!("policy revision {rejected} was rejected: ");
    assert!(done.error.contains(&named), "{}", done.error);
    assert!(done.error.contains("on-apply"), "{}", done.error);

    // The gateway restarts: every session reconnects and gets a fresh bootstrap, which
    // carries the rejected revision.
    let gw = gw.restart().await;
    let api = gw.api().await;
    session_mode(&api, &id).await;
    // Past the point where the loop began: in push mode the bootstrap after the restart has
    // been answered (a refusal that cut the session off counts as `failed`), in poll mode
    // the supervisor has polled the rejected revision.
    match mode {
        DeliveryMode::Push => {
            eventually(
                "the bootstrap after the restart to be answered",
                DEADLINE,
                || async { (bootstraps_answered(&gw).await >= 1.0).then_some(()) },
            )
            .await;
        }
        DeliveryMode::Poll => {
            eventually("a poll after the restart", DEADLINE, || async {
                (metric(
                    &gw,
                    "openshell_config_poll_requests_total{rpc=\"GetSandboxConfig\"}",
                )
                .await
                    >= 1.0)
                    .then_some(())
            })
            .await;
        }
    }
    let log = std::fs::read_to_string(dir.join("supervisor.log")).unwrap();
    assert!(
        !log.contains("bootstrap failed on the supervisor"),
        "the session was cut off:\n{log}"
    );
    assert_eq!(
        metric(&gw, "openshell_config_bootstraps_total{outcome=\"failed\"}").await,
        0.0
    );
    if mode == DeliveryMode::Push {
        assert_eq!(
            metric(
                &gw,
                "openshell_config_bootstraps_total{outcome=\"policy_rejected\"}"
            )
            .await,
            1.0,
            "one bootstrap, refused once, and the session kept"
        );
    }
    let listed = api
        .clone()
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        listed.sessions.iter().any(|s| s.sandbox_id == id),
        "the sandbox dropped out of the session list: {listed:?}"
    );
    let hints = inspect_hints(&api, &id).await;
    assert!(
        hints
            .iter()
            .any(|h| h.contains(&named) && h.contains("on-apply") && h.contains("fix it first")),
        "{hints:?}"
    );

    // An unrelated settings write applies, with the last-known-good policy.
    let mut api = api;
    let op = commit_setting(&mut api, &id, "log_level", "debug").await;
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert!(
        supervisor
            .active_file("settings.json")
            .unwrap()
            .contains("debug")
    );
    assert_eq!(
        supervisor.active_file("policy.json").unwrap(),
        good,
        "last-known-good policy stays in effect"
    );
    let starts = supervisor
        .workload_lines()
        .iter()
        .filter(|l| l.starts_with("started"))
        .count();
    assert_eq!(starts, 1, "the workload was not restarted");
    let hints = inspect_hints(&api, &id).await;
    assert!(hints.iter().any(|h| h.contains(&named)), "{hints:?}");

    // A fix applies, and the hint is gone.
    let fixed = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
    let done = terminal_operation(&api, &fixed.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );
    let hints = inspect_hints(&api, &id).await;
    assert!(
        !hints.iter().any(|h| h.contains("was rejected")),
        "{hints:?}"
    );
}

/// A supervisor restarted (SIGKILL, then started on the same state directory) while its
/// sandbox's latest policy is one its hook refuses (under `retain_last_valid`) keeps the
/// last-known-good it finds on disk:
/// its session is accepted, the workload starts with that policy, settings still apply, and
/// inspect names the rejected revision.
async fn a_restarted_supervisor_keeps_its_last_known_good_when_the_latest_policy_is_refused(
    mode: DeliveryMode,
) {
    let gw = TestGateway::start_for_delivery(mode).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "restarted", POLICY).await;
    let dir = gw.store.dir.path().join("restarted");
    let first = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir,
        &["--on-apply", REFUSING_HOOK],
    );
    wait_started(&first).await;
    wait_running(&api, &id).await;
    retain_last_valid(&mut api, &id).await;
    let good = first.active_file("policy.json").unwrap();
    let bad = commit_policy(&mut api, &id, &policy_with_port(9999)).await;
    let done = terminal_operation(&api, &bad.id).await;
    assert_eq!(state(&done), pb::OperationState::Failed, "{done:?}");
    let named = format!("policy revision {} was rejected: ", bad.policy_revision);

    first.kill();
    let second = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir,
        &["--on-apply", REFUSING_HOOK],
    );
    eventually("the workload to start again", DEADLINE, || async {
        (second
            .workload_lines()
            .iter()
            .filter(|l| l.starts_with("started"))
            .count()
            == 2)
            .then_some(())
    })
    .await;
    assert_eq!(
        second.active_file("policy.json").unwrap(),
        good,
        "the last-known-good policy is in effect"
    );
    let log = second.guard.log_text();
    assert!(
        !log.contains("gateway rejected the session"),
        "the session was refused:\n{log}"
    );
    // Settings still reach it, with the last-known-good policy.
    let op = commit_setting(&mut api, &id, "log_level", "debug").await;
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert!(
        second
            .active_file("settings.json")
            .unwrap()
            .contains("debug")
    );
    assert_eq!(second.active_file("policy.json").unwrap(), good);
    let hints = inspect_hints(&api, &id).await;
    assert!(hints.iter().any(|h| h.contains(&named)), "{hints:?}");
}

async fn a_local_policy_file_keeps_precedence_but_settings_apply(mode: DeliveryMode) {
    let gw = TestGateway::start_for_delivery(mode).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "local", POLICY).await;
    let dir = gw.store.dir.path().join("local");
    std::fs::create_dir_all(&dir).unwrap();
    let local = dir.join("local-policy.yaml");
    std::fs::write(&local, policy_with_port(7443)).unwrap();
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir,
        &["--policy-file", local.to_str().unwrap()],
    );
    wait_started(&supervisor).await;
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("7443")
    );

    let op = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Inactive, "{done:?}");
    assert_eq!(done.outcome, pb::ApplyOutcome::RetainedLocalOverride as i32);
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("7443")
    );

    let op = commit_setting(&mut api, &id, "log_level", "debug").await;
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    let settings = supervisor.active_file("settings.json").unwrap();
    assert!(settings.contains("debug"), "{settings}");
}

async fn provider_environment_reaches_the_workload_and_credentials_stay_private(
    mode: DeliveryMode,
) {
    const TOKEN: &str = "ghp_e2e_SECRET_value_0123456789";
    let gw = TestGateway::start_for_delivery(mode).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "env", POLICY).await;
    api.create_provider(pb::CreateProviderRequest {
        name: "github".into(),
        r#type: "github".into(),
        values: vec![
            pb::ProviderValueInput {
                name: "GITHUB_TOKEN".into(),
                value: TOKEN.into(),
                class: pb::ValueClass::Credential as i32,
                expires_at: None,
            },
            pb::ProviderValueInput {
                name: "GITHUB_ORG".into(),
                value: "acme".into(),
                class: pb::ValueClass::NonSecret as i32,
                expires_at: None,
            },
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    api.attach_provider(pb::AttachProviderRequest {
        sandbox: Some(pb::SandboxRef {
            id_or_name: id.clone(),
            workspace: String::new(),
        }),
        provider: "github".into(),
    })
    .await
    .unwrap();
    let dir = gw.store.dir.path().join("env");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    wait_started(&supervisor).await;
    let started = supervisor
        .workload_lines()
        .into_iter()
        .find(|l| l.starts_with("started"))
        .unwrap();
    assert_eq!(
        started,
        format!("started org=acme token_len={}", TOKEN.len())
    );

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let env_file = supervisor
            .state_dir
            .join("active")
            .join("provider-env.json");
        let mode = std::fs::metadata(&env_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "credential file must be private");
    }
    // A credential rotation reaches the supervisor's files.
    api.update_provider(pb::UpdateProviderRequest {
        provider: "github".into(),
        values: vec![pb::ProviderValueInput {
            name: "GITHUB_TOKEN".into(),
            value: format!("{TOKEN}-rotated"),
            class: pb::ValueClass::Credential as i32,
            expires_at: None,
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    eventually("the rotated credential", DEADLINE, || async {
        supervisor
            .active_file("provider-env.json")
            .filter(|t| t.contains("-rotated"))
            .map(|_| ())
    })
    .await;
    let log = supervisor.guard.log_text();
    assert!(
        log.contains("configuration applied"),
        "the supervisor log is captured"
    );
    assert!(
        !log.contains(TOKEN),
        "the supervisor log leaks the credential"
    );
    assert!(
        !log.contains(&credential),
        "the supervisor log leaks its own credential"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_mode_reloads_on_file_change_without_a_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let state_dir = dir.path().join("state");
    let out = dir.path().join("workload.out");
    let log = dir.path().join("supervisor.log");
    let child = std::process::Command::new(openshell_e2e::process::binary("openshell-supervisor"))
        .process_group(0)
        .args(["--standalone", "--policy-file"])
        .arg(&policy)
        .arg("--state-dir")
        .arg(&state_dir)
        .args([
            "--watch-interval",
            "100ms",
            "--",
            "sh",
            "-c",
            openshell_e2e::process::SAMPLE_WORKLOAD,
        ])
        .env("WORKLOAD_OUT", &out)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let supervisor = SupervisorProcess {
        guard: openshell_e2e::process::ChildGuard { child, log },
        state_dir,
        workload_out: out,
    };
    wait_started(&supervisor).await;
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("api.github.com")
    );
    std::fs::write(&policy, policy_with_port(8443)).unwrap();
    eventually("the edited file to be active", DEADLINE, || async {
        supervisor
            .active_file("policy.json")
            .filter(|p| p.contains("8443"))
            .map(|_| ())
    })
    .await;
    eventually("the reload signal", DEADLINE, || async {
        (supervisor.reloads() >= 1).then_some(())
    })
    .await;
    // An invalid edit keeps last-known-good. Its policy key (`x`) is in no earlier version,
    // so the supervisor has read this edit once it names the key in a refusal (of the file,
    // or of the apply), or once the active policy changed.
    let edited = supervisor.active_file("policy.json").unwrap();
    std::fs::write(&policy, "version: 1\nnetwork_policies:\n  x:\n    endpoints:\n      - host: '*.com'\n        port: 1\n").unwrap();
    eventually("the invalid edit to be read", DEADLINE, || async {
        let refused = supervisor.guard.log_text().contains("network_policies.x");
        let replaced = supervisor.active_file("policy.json").as_ref() != Some(&edited);
        (refused || replaced).then_some(())
    })
    .await;
    assert_eq!(
        supervisor.active_file("policy.json").unwrap(),
        edited,
        "the invalid edit replaced the last-known-good policy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_and_foreign_credentials_are_rejected_and_legacy_supervisors_poll() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, _credential) = create_sandbox(&mut api, "guarded", POLICY).await;
    let (_other_id, other_credential) = create_sandbox(&mut api, "other", POLICY).await;
    for (name, credential) in [
        ("wrong", "osc_not-the-credential".to_string()),
        ("foreign", other_credential.clone()),
    ] {
        let dir = gw.store.dir.path().join(name);
        let mut supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
        let status = eventually("the rejected supervisor to exit", DEADLINE, || {
            let status = supervisor.guard.child.try_wait().unwrap();
            async move { status }
        })
        .await;
        assert!(
            !status.success(),
            "{name}: a rejected supervisor exits with an error"
        );
        assert!(
            supervisor.active_file("policy.json").is_none(),
            "{name}: received nothing"
        );
        assert!(
            supervisor.workload_lines().is_empty(),
            "{name}: no workload started"
        );
        let log = supervisor.guard.log_text();
        assert!(
            log.contains("not valid"),
            "{name}: the reason is logged: {log}"
        );
    }
    assert!(metric(&gw, "openshell_supervisor_sessions_rejected_total").await >= 2.0);

    let dir = gw.store.dir.path().join("legacy");
    let (legacy_id, legacy_credential) = create_sandbox(&mut api, "legacy", POLICY).await;
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &legacy_id,
        &legacy_credential,
        &dir,
        &["--protocol-revision", "0"],
    );
    wait_started(&supervisor).await;
    assert_eq!(
        metric(&gw, "openshell_supervisor_protocol_legacy_sessions_total").await,
        1.0
    );
    let op = commit_policy(&mut api, &legacy_id, &policy_with_port(8443)).await;
    assert_eq!(
        state(&terminal_operation(&api, &op.id).await),
        pb::OperationState::Applied
    );
    assert!(
        metric(
            &gw,
            "openshell_config_poll_requests_total{rpc=\"GetSandboxConfig\"}"
        )
        .await
            > 0.0
    );
}

async fn session_mode(api: &Api, sandbox: &str) -> pb::DeliveryMode {
    eventually(&format!("a session for {sandbox}"), DEADLINE, || {
        let mut api = api.clone();
        let sandbox = sandbox.to_string();
        async move {
            let sessions = api
                .list_sessions(pb::ListSessionsRequest {})
                .await
                .ok()?
                .into_inner();
            sessions
                .sessions
                .iter()
                .find(|s| s.sandbox_id == sandbox)
                .map(|s| pb::DeliveryMode::try_from(s.mode).unwrap())
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compatibility_matrix() {
    for (gateway_mode, flags, expected) in [
        (DeliveryMode::Poll, &[][..], pb::DeliveryMode::Poll),
        (
            DeliveryMode::Push,
            &["--protocol-revision", "0"][..],
            pb::DeliveryMode::Poll,
        ),
        (
            DeliveryMode::Push,
            &["--no-config-apply"][..],
            pb::DeliveryMode::ShadowPush,
        ),
        (DeliveryMode::Push, &[][..], pb::DeliveryMode::Push),
    ] {
        let gw = TestGateway::start_for_delivery(gateway_mode).await;
        let mut api = gw.api().await;
        let (id, credential) = create_sandbox(&mut api, "matrix", POLICY).await;
        let dir = gw.store.dir.path().join("matrix");
        let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, flags);
        wait_started(&supervisor).await;
        assert_eq!(
            session_mode(&api, &id).await,
            expected,
            "{gateway_mode:?} {flags:?}"
        );
        // Every pairing applies changes and resolves operations.
        let op = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
        let done = terminal_operation(&api, &op.id).await;
        assert_eq!(
            state(&done),
            pb::OperationState::Applied,
            "{gateway_mode:?} {flags:?}: {done:?}"
        );
        let polled = metric(
            &gw,
            "openshell_config_poll_requests_total{rpc=\"GetSandboxConfig\"}",
        )
        .await;
        assert_eq!(
            polled > 0.0,
            expected != pb::DeliveryMode::Push,
            "{gateway_mode:?} {flags:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_supervisor_gets_a_fresh_bootstrap_with_changes_made_while_it_was_down() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "phoenix", POLICY).await;
    let dir = gw.store.dir.path().join("phoenix");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    wait_started(&supervisor).await;
    wait_running(&api, &id).await;
    supervisor.kill();
    eventually("the session to end", DEADLINE, || {
        let mut api = api.clone();
        async move {
            let sessions = api
                .list_sessions(pb::ListSessionsRequest {})
                .await
                .ok()?
                .into_inner();
            sessions.sessions.is_empty().then_some(())
        }
    })
    .await;
    let op = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );
    assert_eq!(
        metric(
            &gw,
            "openshell_config_bootstraps_total{outcome=\"applied\"}"
        )
        .await,
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_the_gateway_back_to_poll_mode_loses_no_change() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "rollback", POLICY).await;
    let dir = gw.store.dir.path().join("rollback");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    wait_started(&supervisor).await;
    assert_eq!(session_mode(&api, &id).await, pb::DeliveryMode::Push);

    let gw = gw.restart_in(DeliveryMode::Poll).await;
    let mut api = gw.api().await;
    assert_eq!(session_mode(&api, &id).await, pb::DeliveryMode::Poll);
    let op = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );
    assert!(
        metric(
            &gw,
            "openshell_config_poll_requests_total{rpc=\"GetSandboxConfig\"}"
        )
        .await
            > 0.0
    );
}

/// A pushed change is `DELIVERED` while the supervisor has it but has not
/// acked it yet, then `APPLIED`. The supervisor's on-apply hook holds the
/// ack until the test opens a gate file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_change_is_delivered_before_it_is_acked() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "held", POLICY).await;
    let dir = gw.store.dir.path().join("held");
    std::fs::create_dir_all(&dir).unwrap();
    let gate = dir.join("gate");
    std::fs::write(&gate, "").unwrap();
    let hook = format!("while [ ! -e '{}' ]; do sleep 0.05; done", gate.display());
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir,
        &["--on-apply", &hook],
    );
    wait_started(&supervisor).await;
    wait_running(&api, &id).await;

    std::fs::remove_file(&gate).unwrap();
    let op = commit_policy(&mut api, &id, &policy_with_port(8443)).await;
    eventually("the operation to be DELIVERED", DEADLINE, || {
        let api = api.clone();
        let op_id = op.id.clone();
        async move {
            let now = api
                .clone()
                .get_operation(pb::GetOperationRequest { id: op_id })
                .await
                .unwrap()
                .into_inner();
            assert_ne!(
                state(&now),
                pb::OperationState::Applied,
                "acked before the gate opened"
            );
            (state(&now) == pb::OperationState::Delivered).then_some(())
        }
    })
    .await;
    std::fs::write(&gate, "").unwrap();
    let done = terminal_operation(&api, &op.id).await;
    assert_eq!(state(&done), pb::OperationState::Applied, "{done:?}");
}

/// A write whose publication never reached the session (made through another replica whose
/// hint and fanout intent were both lost, here written into the store directly) is delivered
/// by reconcile: the pass finds the sandbox's revisions moved. Passes that find nothing moved
/// rebuild nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_delivers_a_write_whose_mark_was_missed() {
    let store = openshell_e2e::TestStore::new(openshell_e2e::Backend::Sqlite).await;
    let gw = TestGateway::start_with(store, DeliveryMode::Push, |config| {
        // Only the revisions decide here: no full-rebuild pass.
        config.delivery.reconcile_full_rebuild_every = 0;
    })
    .await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "missed", POLICY).await;
    let dir = gw.store.dir.path().join("missed");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    wait_started(&supervisor).await;
    wait_running(&api, &id).await;
    let op = commit_setting(&mut api, &id, "log_level", "debug").await;
    assert_eq!(
        state(&terminal_operation(&api, &op.id).await),
        pb::OperationState::Applied
    );
    assert!(
        supervisor
            .active_file("settings.json")
            .unwrap()
            .contains("debug")
    );

    eventually(
        "reconcile passes that find nothing moved",
        DEADLINE,
        || async {
            (metric(&gw, "openshell_config_reconcile_unchanged_total").await >= 3.0).then_some(())
        },
    )
    .await;
    let reconcile_builds = "openshell_config_builds_total{component=\"sandbox_config\",lane=\"fanout\",outcome=\"unchanged\"}";
    assert_eq!(metric(&gw, reconcile_builds).await, 0.0);

    openshell_e2e::alter_sqlite_store(
        &gw,
        &format!(
            "UPDATE settings SET value_json = replace(value_json, 'debug', 'warn') \
             WHERE scope = 'sandbox' AND scope_id = '{id}'; \
             UPDATE sandboxes SET settings_revision = settings_revision + 1 WHERE id = '{id}'"
        ),
    )
    .await;
    eventually("the missed write applied", DEADLINE, || async {
        supervisor
            .active_file("settings.json")
            .filter(|settings| settings.contains("warn"))
    })
    .await;
    assert_eq!(
        metric(
            &gw,
            "openshell_config_builds_total{component=\"sandbox_config\",lane=\"fanout\",outcome=\"built\"}"
        )
        .await,
        1.0
    );
}
