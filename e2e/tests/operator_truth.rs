//! What an operator is told is what is in effect: a sandbox policy written while a global
//! policy is set is reported as shadowed (never APPLIED) by the write, its dry run, the CLI
//! and `policy get`; a sandbox write or a fleet target overtaken by a later global write ends
//! SUPERSEDED, not APPLIED; and a quarantine is not reported as last-known-good. Real gateway,
//! real supervisors, the real CLI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::cli::openshell;
use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{
    Api, POLICY, TestGateway, create_sandbox, eventually, get_operation, policy_with_extra,
    policy_with_port, state, terminal_operation, to_global, wait_for,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;

const DEADLINE: Duration = Duration::from_secs(60);

async fn write(api: &Api, request: pb::UpdateConfigRequest) -> pb::UpdateConfigResponse {
    api.clone()
        .update_config(request)
        .await
        .unwrap()
        .into_inner()
}

/// `openshell policy set SB -f FILE FLAGS...` against `gw`.
async fn policy_set(
    gw: &TestGateway,
    sandbox: &str,
    file: &str,
    flags: &[&str],
) -> openshell_e2e::cli::CliRun {
    let mut args = vec!["policy", "set", sandbox, "-f", file];
    args.extend_from_slice(flags);
    openshell(&gw.endpoint(), &args, None).await
}

fn sandbox_policy(sandbox: &str, policy: String, mode: pb::UpdateMode) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        sandbox: sandbox.to_string(),
        policy_text: policy,
        mode: mode as i32,
        wait: (mode == pb::UpdateMode::WaitForApply)
            .then(|| wait_for(DEADLINE))
            .flatten(),
        ..Default::default()
    }
}

fn global_policy(policy: String, mode: pb::UpdateMode) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        policy_text: policy,
        mode: mode as i32,
        wait: (mode == pb::UpdateMode::WaitForApply)
            .then(|| wait_for(DEADLINE))
            .flatten(),
        ..to_global()
    }
}

fn clear_global() -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        clear_global_policy: true,
        mode: pb::UpdateMode::CommitOnly as i32,
        ..to_global()
    }
}

/// Issue 59, item 1: under a global policy, a sandbox policy write is committed, reported
/// as shadowed up front (dry run, write, CLI) and ends INACTIVE with SHADOWED_BY_GLOBAL,
/// never APPLIED; `policy get` says the global policy runs instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_write_under_a_global_policy_is_shadowed_and_never_applied() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "beta", POLICY).await;
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir.path().join("s"), &[]);
    let global = write(
        &api,
        global_policy(policy_with_extra("fleetwide"), pb::UpdateMode::WaitForApply),
    )
    .await;
    assert_eq!(
        state(global.operation.as_ref().unwrap()),
        pb::OperationState::Applied
    );
    let global_revision = u64::from(global.version);

    let dry = write(
        &api,
        pb::UpdateConfigRequest {
            validate_only: true,
            ..sandbox_policy(&id, policy_with_port(8443), pb::UpdateMode::CommitOnly)
        },
    )
    .await;
    assert_eq!(dry.shadowed_by_global_policy, global_revision);

    let written = write(
        &api,
        sandbox_policy(&id, policy_with_port(8443), pb::UpdateMode::WaitForApply),
    )
    .await;
    assert_eq!(written.shadowed_by_global_policy, global_revision);
    let op = written.operation.unwrap();
    assert_eq!(state(&op), pb::OperationState::Inactive, "{op:?}");
    assert_eq!(
        op.outcome,
        pb::ApplyOutcome::ShadowedByGlobal as i32,
        "{op:?}"
    );
    assert!(op.error.contains("not in effect"), "{}", op.error);
    // What the supervisor runs is the global policy, without the sandbox's new port.
    let active = supervisor.active_file("policy.json").unwrap();
    assert!(
        active.contains("fleetwide") && !active.contains("8443"),
        "{active}"
    );

    let file = dir.path().join("p.yaml");
    std::fs::write(&file, policy_with_port(9443)).unwrap();
    let cli = policy_set(
        &gw,
        &id,
        file.to_str().unwrap(),
        &["--wait", "--timeout", "60s", "--yes"],
    )
    .await;
    cli.expect(3);
    assert!(
        cli.stderr.contains("the global policy (revision")
            && cli
                .stderr
                .contains("not in effect until the global policy is cleared"),
        "{}",
        cli.stderr
    );
    assert!(cli.stderr.contains("SHADOWED_BY_GLOBAL"), "{}", cli.stderr);
    let dry_cli = policy_set(&gw, &id, file.to_str().unwrap(), &["--dry-run"]).await;
    dry_cli.expect(0);
    assert!(
        dry_cli.stderr.contains("would be stored"),
        "{}",
        dry_cli.stderr
    );

    let get = openshell(&gw.endpoint(), &["policy", "get", &id], None).await;
    get.expect(0);
    assert!(
        get.stdout.contains(&format!(
            "not in effect: the global policy, revision {global_revision}"
        )),
        "{}",
        get.stdout
    );
    assert!(!get.stdout.contains("(applied"), "{}", get.stdout);

    // Cleared, the sandbox's latest revision runs, and the clear's operation says so.
    let cleared = write(&api, clear_global()).await.operation.unwrap();
    let cleared = terminal_operation(&api, &cleared.id).await;
    assert_eq!(state(&cleared), pb::OperationState::Applied, "{cleared:?}");
    eventually("the sandbox policy to run", DEADLINE, || async {
        supervisor
            .active_file("policy.json")
            .filter(|p| p.contains("9443"))
    })
    .await;
}

/// Issue 59, item 1 (the race): a sandbox policy committed before a global policy was set,
/// and applied by its supervisor only after, ends SUPERSEDED: the supervisor runs the
/// global policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_write_overtaken_by_a_global_policy_is_superseded_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "late", POLICY).await;
    // No supervisor yet: both writes wait for it.
    let sandbox_op = write(
        &api,
        sandbox_policy(&id, policy_with_port(8443), pb::UpdateMode::CommitOnly),
    )
    .await
    .operation
    .unwrap();
    assert_eq!(state(&sandbox_op), pb::OperationState::Pending);
    write(
        &api,
        global_policy(policy_with_extra("fleetwide"), pb::UpdateMode::CommitOnly),
    )
    .await;

    let _supervisor =
        spawn_supervisor(&gw.endpoint(), &id, &credential, &dir.path().join("s"), &[]);

    let ended = terminal_operation(&api, &sandbox_op.id).await;
    assert_eq!(state(&ended), pb::OperationState::Superseded, "{ended:?}");
    assert!(
        ended.error.contains("global policy changed"),
        "{}",
        ended.error
    );
}

/// Issue 59, item 2: a global policy set while a sandbox's supervisor is down and cleared
/// before it comes back never ran there: that sandbox's target of the set ends SUPERSEDED,
/// the operation with it, while the clear's target is APPLIED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_target_overtaken_by_a_clear_is_superseded_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "gamma", POLICY).await;
    let set = write(
        &api,
        global_policy(policy_with_extra("fleetwide"), pb::UpdateMode::CommitOnly),
    )
    .await
    .operation
    .unwrap();
    let clear = write(&api, clear_global()).await.operation.unwrap();

    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir.path().join("s"), &[]);

    let clear = terminal_operation(&api, &clear.id).await;
    assert_eq!(state(&clear), pb::OperationState::Applied, "{clear:?}");
    let set = terminal_operation(&api, &set.id).await;
    assert_eq!(state(&set), pb::OperationState::Superseded, "{set:?}");
    let targets = api
        .clone()
        .list_operation_targets(pb::ListOperationTargetsRequest {
            operation_id: set.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .targets;
    assert_eq!(targets.len(), 1, "{targets:?}");
    assert_eq!(
        targets[0].state,
        pb::OperationState::Superseded as i32,
        "{targets:?}"
    );
    let active = supervisor.active_file("policy.json").unwrap();
    assert!(!active.contains("fleetwide"), "{active}");
    assert_eq!(
        state(&get_operation(&api, &set.id).await),
        pb::OperationState::Superseded
    );
}

/// Issue 59, item 3: a policy whose on-apply hook fails under `fail_closed` (the default)
/// quarantines the sandbox. The CLI says so instead of "last-known-good stays active", and
/// `sandbox list`, `sandbox get` and upstream's condition show the quarantine until a good
/// configuration applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_is_reported_as_a_quarantine_everywhere() {
    const REFUSING_HOOK: &str = "if grep -q 9999 \"$OPENSHELL_POLICY_FILE\"; then echo 'port 9999 is forbidden here' >&2; exit 3; fi";
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "closed", POLICY).await;
    let _supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &dir.path().join("s"),
        &["--on-apply", REFUSING_HOOK],
    );
    openshell_e2e::wait_running(&api, &id).await;

    let file = dir.path().join("p.yaml");
    std::fs::write(&file, policy_with_port(9999)).unwrap();
    let cli = policy_set(
        &gw,
        &id,
        file.to_str().unwrap(),
        &["--wait", "--timeout", "60s", "--yes"],
    )
    .await;
    cli.expect(1);
    assert!(
        cli.stderr.contains("FAILED_CLOSED") && cli.stderr.contains("quarantined"),
        "{}",
        cli.stderr
    );
    assert!(!cli.stderr.contains("last-known-good"), "{}", cli.stderr);

    let sandbox = openshell_e2e::get_sandbox(&api, &id).await;
    assert!(sandbox.quarantine_reason.contains("9999"), "{sandbox:?}");
    let conditions = &sandbox.status.as_ref().unwrap().conditions;
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert_eq!(
        (&*conditions[0].r#type, &*conditions[0].status),
        ("Quarantined", "True")
    );
    let list = openshell(&gw.endpoint(), &["sandbox", "list"], None).await;
    list.expect(0);
    assert!(
        list.stdout.contains("RUNNING (QUARANTINED)"),
        "{}",
        list.stdout
    );
    let get = openshell(&gw.endpoint(), &["sandbox", "get", &id], None).await;
    get.expect(0);
    assert!(
        get.stdout
            .contains("QUARANTINED: all network access denied"),
        "{}",
        get.stdout
    );

    // A good configuration ends the quarantine, and every view says so.
    let good = write(
        &api,
        sandbox_policy(&id, policy_with_port(8443), pb::UpdateMode::WaitForApply),
    )
    .await
    .operation
    .unwrap();
    assert_eq!(state(&good), pb::OperationState::Applied, "{good:?}");
    let sandbox = openshell_e2e::get_sandbox(&api, &id).await;
    assert_eq!(sandbox.quarantine_reason, "", "{sandbox:?}");
    assert!(sandbox.status.unwrap().conditions.is_empty());
    let list = openshell(&gw.endpoint(), &["sandbox", "list"], None).await;
    assert!(!list.stdout.contains("QUARANTINED"), "{}", list.stdout);
}

/// Issue 59, item 4: the global policy can be read as it can be written: `policy get
/// --global` (with `--rev` and `-o yaml`), `policy history --global` (a clear included),
/// `policy update --global` (edits merged into the global policy at the gateway) and
/// `policy diff --global`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_policy_has_get_history_update_and_diff() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let endpoint = gw.endpoint();
    let run = |args: Vec<String>| {
        let endpoint = endpoint.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            openshell(&endpoint, &args, None).await
        }
    };
    let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();

    let none = run(args(&["policy", "get", "--global"])).await;
    none.expect(1);
    assert!(
        none.stderr.contains("no global policy has been set"),
        "{}",
        none.stderr
    );

    let file = dir.path().join("global.yaml");
    std::fs::write(&file, policy_with_extra("fleetwide")).unwrap();
    let file = file.to_str().unwrap().to_owned();
    run(args(&["policy", "set", "--global", "-f", &file, "--yes"]))
        .await
        .expect(0);
    run(args(&[
        "policy",
        "update",
        "--global",
        "--add-endpoint",
        "updates.example.net:443",
        "--yes",
    ]))
    .await
    .expect(0);

    let get = run(args(&["policy", "get", "--global"])).await;
    get.expect(0);
    assert!(
        get.stdout
            .contains("in effect: replaces every sandbox's policy"),
        "{}",
        get.stdout
    );
    let yaml = run(args(&["policy", "get", "--global", "-o", "yaml"])).await;
    yaml.expect(0);
    assert!(
        yaml.stdout.contains("fleetwide") && yaml.stdout.contains("updates.example.net"),
        "{}",
        yaml.stdout
    );
    let first = run(args(&[
        "policy", "get", "--global", "--rev", "1", "-o", "yaml",
    ]))
    .await;
    first.expect(0);
    assert!(
        !first.stdout.contains("updates.example.net"),
        "{}",
        first.stdout
    );
    let old = run(args(&["policy", "get", "--global", "--rev", "1"])).await;
    assert!(
        old.stdout.contains("not in effect: revision 2 is"),
        "{}",
        old.stdout
    );

    // The file still lacks the endpoint the update added.
    let diff = run(args(&["policy", "diff", "--global", "-f", &file])).await;
    diff.expect(1);
    assert!(
        diff.stdout.contains("updates.example.net"),
        "{}",
        diff.stdout
    );

    run(args(&["policy", "clear-global", "--yes"]))
        .await
        .expect(0);
    let history = run(args(&["policy", "history", "--global", "-o", "json"])).await;
    history.expect(0);
    let revisions: Vec<(u64, String)> = history
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["revision"].as_u64().unwrap(),
                r["policy_hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        revisions.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
        [3, 2, 1]
    );
    assert!(
        revisions[0].1.is_empty(),
        "the clear has no hash: {revisions:?}"
    );
    assert!(!revisions[1].1.is_empty() && !revisions[2].1.is_empty());
    let table = run(args(&["policy", "history", "--global"])).await;
    assert!(table.stdout.contains("(cleared)"), "{}", table.stdout);
    let cleared = run(args(&["policy", "get", "--global", "-o", "yaml"])).await;
    cleared.expect(1);
    assert!(
        cleared.stderr.contains("cleared the global policy"),
        "{}",
        cleared.stderr
    );

    // Upstream's calls read the same history, page by page.
    let api = gw.api().await;
    let page = api
        .clone()
        .list_sandbox_policies(pb::ListSandboxPoliciesRequest {
            global: true,
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        page.revisions.iter().map(|r| r.version).collect::<Vec<_>>(),
        [3, 2]
    );
    let rest = api
        .clone()
        .list_sandbox_policies(pb::ListSandboxPoliciesRequest {
            global: true,
            page_size: 2,
            page_token: page.next_page_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rest.revisions.iter().map(|r| r.version).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(rest.next_page_token, "");
    let status = api
        .clone()
        .get_sandbox_policy_status(pb::GetSandboxPolicyStatusRequest {
            global: true,
            version: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let revision = status.revision.unwrap();
    assert_eq!(revision.version, 2);
    assert!(revision.policy.is_some());
}

/// Issue 59, item 5: a wait on a sandbox no supervisor is connected for says so while it
/// waits (before its deadline, in line mode too), a commit-only write warns up front, a
/// fleet wait names the unattended sandboxes at its start; with a supervisor there is
/// nothing to explain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_names_the_missing_supervisor_while_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (lonely, _) = create_sandbox(&mut api, "lonely", POLICY).await;
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, policy_with_port(8443)).unwrap();
    let file = file.to_str().unwrap();

    let waited = policy_set(&gw, &lonely, file, &["--wait", "--timeout", "2s", "--yes"]).await;
    waited.expect(124);
    let line = "waiting: no supervisor is connected for sandbox default/lonely";
    let said_at = waited
        .stderr
        .find(line)
        .unwrap_or_else(|| panic!("{}", waited.stderr));
    // Said while waiting, before the deadline's verdict.
    let timed_out_at = waited.stderr.find("after the wait deadline").unwrap();
    assert!(said_at < timed_out_at, "{}", waited.stderr);

    std::fs::write(dir.path().join("p.yaml"), policy_with_port(9443)).unwrap();
    let committed = policy_set(&gw, &lonely, file, &["--commit-only", "--yes"]).await;
    committed.expect(0);
    assert!(
        committed
            .stderr
            .contains("warning: no supervisor is connected for sandbox default/lonely"),
        "{}",
        committed.stderr
    );

    let (watched, credential) = create_sandbox(&mut api, "watched", POLICY).await;
    let _supervisor = spawn_supervisor(
        &gw.endpoint(),
        &watched,
        &credential,
        &dir.path().join("s"),
        &[],
    );
    openshell_e2e::wait_running(&api, &watched).await;
    let fleet = openshell(
        &gw.endpoint(),
        &[
            "settings",
            "set",
            "--global",
            "log_level=warn",
            "--wait",
            "--timeout",
            "2s",
            "--yes",
        ],
        None,
    )
    .await;
    fleet.expect(124);
    assert!(
        fleet
            .stderr
            .contains("waiting: no supervisor is connected for default/lonely"),
        "{}",
        fleet.stderr
    );
    assert!(
        !fleet.stderr.contains("default/watched"),
        "{}",
        fleet.stderr
    );

    std::fs::write(dir.path().join("p.yaml"), policy_with_port(7443)).unwrap();
    let attended = policy_set(
        &gw,
        &watched,
        file,
        &["--wait", "--timeout", "60s", "--yes"],
    )
    .await;
    attended.expect(0);
    assert!(
        !attended.stderr.contains("no supervisor"),
        "{}",
        attended.stderr
    );
}
