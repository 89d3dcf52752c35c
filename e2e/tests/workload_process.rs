//! The workload as a process, with a real gateway and the real supervisor binary: it leads a
//! process group of its own, which the supervisor stops whole (nothing it started is left
//! behind holding the provider credentials), and it starts with default signal handling
//! whatever the supervisor was started with, so its reloads are not lost. Each test fails
//! without its fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal, kill};
use nix::unistd::Pid;
use openshell_e2e::process::ChildGuard;
use openshell_e2e::{
    POLICY, TestGateway, attach_new_provider, create_sandbox, credential_value, eventually,
    policy_with_port, to_sandbox,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;

const DEADLINE: Duration = Duration::from_secs(60);

/// The supervisor command for sandbox `id` running `sh -c WORKLOAD`, after `prefix` (a
/// program that execs it, such as `nohup`); the workload finds `dir` in `MARKERS`.
fn supervisor_command(
    gw: &TestGateway,
    prefix: &[&str],
    id: &str,
    credential: &str,
    dir: &Path,
    workload: &str,
) -> (Command, std::path::PathBuf) {
    let (mut cmd, log) = openshell_e2e::process::supervisor_command(
        prefix,
        &gw.endpoint(),
        id,
        credential,
        dir,
        &["--log", "info"],
        workload,
    );
    cmd.env("MARKERS", dir);
    (cmd, log)
}

/// Pids of the live processes whose environment holds `value`.
fn processes_holding(value: &str) -> Vec<i32> {
    let needle = value.as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// Defect: SIGTERM reached the workload's main process only. `sh -c 'sleep A & sleep B; true'`
/// lost its shell and left both sleeps running under init, the provider credential in their
/// environment. Now the supervisor signals the workload's whole process group, and nothing
/// holding the credential is left once it has exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_supervisor_stops_everything_the_workload_started() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "grouped", POLICY).await;
    // Unique to this run: the processes holding it are this workload's and no other's.
    let marker = format!("group-credential-{}", uuid::Uuid::now_v7().simple());
    attach_new_provider(
        &mut api,
        "grouped",
        "marked",
        "generic",
        vec![credential_value("MARKED_TOKEN", &marker)],
    )
    .await;
    let dir = gw.store.dir.path().join("grouped");
    let (mut cmd, log) = supervisor_command(
        &gw,
        &[],
        &id,
        &credential,
        &dir,
        "sleep 300 & sleep 301; true",
    );
    let mut supervisor = ChildGuard {
        child: cmd.spawn().unwrap(),
        log,
    };
    // The shell and both sleeps.
    eventually("the workload and what it started", DEADLINE, || async {
        (processes_holding(&marker).len() >= 3).then_some(())
    })
    .await;

    let pid = Pid::from_raw(i32::try_from(supervisor.child.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let status = eventually("the supervisor to exit", DEADLINE, || {
        let exited = supervisor.child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert_eq!(
        status.code(),
        Some(143),
        "the workload's exit (SIGTERM) is the supervisor's; log:\n{}",
        supervisor.log_text()
    );
    eventually(
        "no process left holding the workload's credential",
        DEADLINE,
        || async {
            let left = processes_holding(&marker);
            left.is_empty().then_some(())
        },
    )
    .await;
    let log = supervisor.log_text();
    assert!(
        log.contains("forwarding signal to the workload's process group"),
        "{log}"
    );
}

/// A workload that records its start and every SIGHUP it gets.
const RELOAD_WORKLOAD: &str = r#"trap 'echo reload >> "$MARKERS/reloads"' HUP; touch "$MARKERS/started"; while :; do sleep 0.1 & wait $!; done"#;

/// Starts a supervisor through `prefix` for a new sandbox, changes its policy once it runs,
/// and waits for the workload to record the reload.
async fn a_policy_change_reloads_the_workload(
    name: &str,
    prefix: &[&str],
    block_in_spawner: Option<Signal>,
) {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, name, POLICY).await;
    let dir = gw.store.dir.path().join(name);
    let (mut cmd, log) = supervisor_command(&gw, prefix, &id, &credential, &dir, RELOAD_WORKLOAD);
    // A thread of its own: a signal it blocks stays blocked in what it starts.
    let child = std::thread::spawn(move || {
        if let Some(signal) = block_in_spawner {
            let mut blocked = SigSet::empty();
            blocked.add(signal);
            blocked.thread_block().unwrap();
        }
        cmd.spawn().unwrap()
    })
    .join()
    .unwrap();
    let supervisor = ChildGuard { child, log };
    eventually("the workload to start", DEADLINE, || async {
        dir.join("started").exists().then_some(())
    })
    .await;

    let operation = api
        .update_config(pb::UpdateConfigRequest {
            policy_text: policy_with_port(8443),
            mode: pb::UpdateMode::WaitForApply as i32,
            wait: openshell_e2e::wait_for(DEADLINE),
            ..to_sandbox(name)
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(
        openshell_e2e::state(&operation),
        pb::OperationState::Applied,
        "{operation:?}"
    );
    eventually(
        "the workload to get its reload signal",
        DEADLINE,
        || async {
            std::fs::read_to_string(dir.join("reloads"))
                .is_ok_and(|r| r.contains("reload"))
                .then_some(())
        },
    )
    .await;
    let log = supervisor.log_text();
    assert!(
        log.contains("configuration changed; signalling the workload"),
        "{log}"
    );
}

/// Defect: started under `nohup`, the supervisor passed SIGHUP on ignored, so the workload's
/// trap never took (a shell cannot trap a signal ignored at its start) and every reload was
/// lost while the log said "signalling the workload" and the operation said APPLIED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_started_under_nohup_still_reloads_its_workload() {
    a_policy_change_reloads_the_workload("nohup", &["nohup"], None).await;
}

/// The same with SIGHUP blocked in whatever started the supervisor: a blocked signal stays
/// blocked through fork and exec, and the workload would never see one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_started_with_sighup_blocked_still_reloads_its_workload() {
    a_policy_change_reloads_the_workload("blocked", &[], Some(Signal::SIGHUP)).await;
}
