//! The `openshell-supervisor` binary against the in-process fake gateway: the workload starts
//! after the bootstrap with the provider environment, gets the reload signal on a live change,
//! receives forwarded signals, and its exit code becomes the supervisor's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use openshell_proto::v1::ConfigApplyStatus;
use openshell_proto::v1::gateway_message::Payload as Out;
use tokio::process::{Child, Command};

const DEADLINE: Duration = Duration::from_secs(30);

fn accept_push() -> Answer {
    Answer::Accept {
        apply: true,
        heartbeat_ms: 0,
        poll_ms: 0,
    }
}

fn supervisor(gateway: &FakeGateway, dir: &Path, workload: &str) -> Child {
    supervisor_running(gateway, dir, &["sh", "-c", workload])
}

fn supervisor_running(gateway: &FakeGateway, dir: &Path, command: &[&str]) -> Child {
    supervisor_logging(gateway, dir, command, "debug")
}

fn supervisor_logging(gateway: &FakeGateway, dir: &Path, command: &[&str], log: &str) -> Child {
    let credential = dir.join("credential");
    std::fs::write(&credential, format!("{CREDENTIAL}\n")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_openshell-supervisor"))
        .current_dir(dir)
        .env_remove("OPENSHELL_GATEWAY")
        .args(["--gateway", &gateway.url(), "--sandbox", SANDBOX])
        .arg("--credential-file")
        .arg(&credential)
        .args(["--state-dir", "state", "--heartbeat-interval", "100ms"])
        .args(["--poll-interval", "100ms", "--log", log])
        .arg("--")
        .args(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn finish(child: Child) -> (i32, String) {
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("supervisor did not exit")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn wait_for_file(path: &Path) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !path.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn workload_runs_after_bootstrap_with_provider_env_and_exit_code() {
    let gateway = FakeGateway::start(accept_push()).await;
    let dir = tempfile::tempdir().unwrap();
    let child = supervisor(
        &gateway,
        dir.path(),
        "echo \"$GITHUB_TOKEN|$OPENSHELL_SANDBOX_ID|$OPENSHELL_POLICY_FILE\" > seen; exit 5",
    );
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 5, "{stderr}");
    let seen = std::fs::read_to_string(dir.path().join("seen")).unwrap();
    let state = std::fs::canonicalize(dir.path().join("state")).unwrap();
    assert_eq!(
        seen.trim(),
        format!(
            "{PROVIDER_SECRET}|{SANDBOX}|{}",
            state.join("active/policy.json").display()
        )
    );
    let bootstrap = gateway.recorded(|r| r.bootstrap_results());
    assert!(bootstrap[0].applied);
    let env_file = state.join("active/provider-env.json");
    assert_eq!(
        std::fs::metadata(&env_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(stderr.contains("workload exited"), "{stderr}");
    assert!(
        !stderr.contains(PROVIDER_SECRET),
        "logs leak a provider value"
    );
    assert!(!stderr.contains(CREDENTIAL), "logs leak the credential");
}

/// Everything logged at the most verbose level, the gRPC and HTTP/2 libraries' own lines
/// included, while the credential goes out on every call: it is never among them.
#[tokio::test]
async fn the_credential_is_never_logged_even_at_trace_level() {
    let gateway = FakeGateway::start(Answer::Accept {
        apply: false,
        heartbeat_ms: 50,
        poll_ms: 0,
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    // Polls, reports, a session and its heartbeats all go out before the workload ends.
    let child = supervisor_logging(
        &gateway,
        dir.path(),
        &["sh", "-c", "sleep 1; exit 0"],
        "trace",
    );
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 0, "{stderr}");
    gateway.recorded(|r| {
        assert!(!r.reports.is_empty() && r.heartbeats() > 0);
        assert_eq!(r.unauthenticated, 0, "every call carried the credential");
    });
    // Not vacuous: the HTTP/2 library traced sending the headers the credential is among.
    assert!(stderr.contains("send_headers"), "no trace-level logs");
    assert!(!stderr.contains(CREDENTIAL), "logs leak the credential");
    assert!(
        !stderr.contains(PROVIDER_SECRET),
        "logs leak a provider value"
    );
}

#[tokio::test]
async fn live_change_signals_workload_and_sigterm_is_forwarded() {
    let gateway = FakeGateway::start(accept_push()).await;
    let dir = tempfile::tempdir().unwrap();
    let child = supervisor(
        &gateway,
        dir.path(),
        "trap 'touch hup' HUP; trap 'exit 42' TERM; touch started; \
         while true; do sleep 0.05; done",
    );
    let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    wait_for_file(&dir.path().join("started")).await;
    assert!(
        !dir.path().join("hup").exists(),
        "the first activation is not signalled"
    );

    let (config, _) = snapshot_pair(2, "env-1");
    gateway
        .push(Out::ConfigUpdate(config_update(20, 3, config)))
        .await;
    gateway
        .wait_until("an ack", |r| !r.update_results().is_empty())
        .await;
    assert_eq!(
        gateway.recorded(|r| r.update_results()[0].status()),
        ConfigApplyStatus::Applied
    );
    wait_for_file(&dir.path().join("hup")).await;

    kill(pid, Signal::SIGTERM).unwrap();
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 42, "{stderr}");
}

/// Defect: after SIGTERM, while the workload was stopping, the supervisor still applied a
/// revision that arrived and acknowledged it APPLIED. Now a change that arrives once the
/// supervisor is shutting down is neither applied nor answered.
#[tokio::test]
async fn a_change_pushed_after_sigterm_is_not_applied_nor_acked() {
    let gateway = FakeGateway::start(accept_push()).await;
    let dir = tempfile::tempdir().unwrap();
    // Stops only when told to: the shutdown lasts as long as the test needs.
    let child = supervisor(
        &gateway,
        dir.path(),
        "trap 'touch term' TERM; touch started; while [ ! -f release ]; do sleep 0.05; done",
    );
    let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    wait_for_file(&dir.path().join("started")).await;
    kill(pid, Signal::SIGTERM).unwrap();
    // The supervisor begins shutting down before it forwards the signal.
    wait_for_file(&dir.path().join("term")).await;

    let (config, _) = snapshot_pair(2, "env-1");
    gateway
        .push(Out::ConfigUpdate(config_update(20, 10, config.clone())))
        .await;
    // Frames are handled in order: once this stale one is answered, the change before it
    // was handled too.
    gateway
        .push(Out::ConfigUpdate(config_update(21, 5, config)))
        .await;
    gateway
        .wait_until("the stale frame answered", |r| {
            r.update_results().iter().any(|u| u.delivery_id == 21)
        })
        .await;
    let results = gateway.recorded(|r| r.update_results());
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].status(), ConfigApplyStatus::Stale);
    let active = std::fs::read_to_string(dir.path().join("state/active/revisions.json")).unwrap();
    let revisions: serde_json::Value = serde_json::from_str(&active).unwrap();
    assert_eq!(
        revisions["policy_revision"], 1,
        "still the bootstrap's: {active}"
    );

    std::fs::write(dir.path().join("release"), "").unwrap();
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("configuration not applied: the supervisor is shutting down"),
        "{stderr}"
    );
}

#[tokio::test]
async fn permanent_rejection_exits_1_with_error_line() {
    let gateway = FakeGateway::start(Answer::Reject {
        reason: "sandbox deleted".into(),
        permanent: true,
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let child = supervisor(&gateway, dir.path(), "touch ran");
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("error: gateway rejected the session permanently: sandbox deleted"),
        "{stderr}"
    );
    assert!(!dir.path().join("ran").exists(), "workload never starts");
}

/// True while `pid` is a live process (not gone, not a zombie left for its reaper).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn a_killed_supervisor_takes_its_workload_with_it() {
    let gateway = FakeGateway::start(accept_push()).await;
    let dir = tempfile::tempdir().unwrap();
    // `exec` keeps the pid: the one written is the workload's.
    let child = supervisor(
        &gateway,
        dir.path(),
        "echo $$ > pid.tmp; mv pid.tmp pid; exec sleep 300",
    );
    wait_for_file(&dir.path().join("pid")).await;
    let workload: i32 = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(workload));
    let supervisor_pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    kill(supervisor_pid, Signal::SIGKILL).unwrap();
    let (code, _) = finish(child).await;
    assert_eq!(code, -1, "killed by a signal");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while alive(workload) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "workload {workload} outlived its killed supervisor"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_workload_that_cannot_run_exits_127_naming_it() {
    let gateway = FakeGateway::start(accept_push()).await;
    let dir = tempfile::tempdir().unwrap();
    let child = supervisor_running(&gateway, dir.path(), &["/no/such/workload", "arg"]);
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 127, "as a shell does: {stderr}");
    assert!(
        stderr
            .contains("error: cannot start workload /no/such/workload: No such file or directory"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_workload_that_ends_at_once_passes_on_its_exit_code() {
    let gateway = FakeGateway::start(accept_push()).await;
    let dir = tempfile::tempdir().unwrap();
    for code in [0, 3, 127] {
        let (got, stderr) = finish(supervisor(&gateway, dir.path(), &format!("exit {code}"))).await;
        assert_eq!(got, code, "{stderr}");
    }
}
