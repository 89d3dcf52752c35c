//! The `openshell` CLI end to end: the real binary against a real in-process
//! gateway in push mode and real supervisor processes.
//!
//! Every command group has a scenario, `-o json` output is parsed and
//! checked, and every documented exit code is reached by a real scenario
//! (0 applied, 0 superseded, 1 failed, 2 usage, 3 inactive, 69 gateway lost
//! while waiting, 124 wait timed out, 130 interrupted). Runs without a terminal must print no control
//! characters; the pseudo-terminal tests drive the CLI through a pty to see
//! the live progress and answer a confirmation prompt.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::process::{SupervisorProcess, binary, spawn_supervisor};
use openshell_e2e::{
    Api, TOKEN, TestGateway, create_sandbox, lifecycle, policy_with_extra, wait_running,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const POLICY: &str = include_str!("../../examples/policy.yaml");
const DEADLINE: Duration = Duration::from_secs(30);
/// A rejected apply: the supervisor's hook refuses any policy that opens port 9999.
const REJECT_9999: &str = r#"grep -q 9999 "$OPENSHELL_POLICY_FILE" && exit 3 || exit 0"#;

/// The example policy with its first `port: 443` changed: a new revision
/// that takes away the 443 reach of that endpoint.
fn policy_with_port(port: u32) -> String {
    POLICY.replacen("port: 443", &format!("port: {port}"), 1)
}

/// One finished CLI run.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self.expect_plain();
        self
    }

    /// Not on a terminal: no escape sequences, no carriage returns, nothing but text.
    fn expect_plain(&self) {
        for (name, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            assert!(
                !text
                    .chars()
                    .any(|c| c.is_control() && c != '\n' && c != '\t'),
                "{name} has control characters: {text:?}"
            );
        }
    }
}

/// Runs the real `openshell` against one gateway, never on a terminal.
struct Cli {
    gateway: String,
    dir: PathBuf,
}

impl Cli {
    fn new(gw: &TestGateway) -> Self {
        let dir = gw.store.dir.path().join("cli");
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            gateway: gw.endpoint(),
            dir,
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(binary("openshell"));
        cmd.args(args)
            .env("OPENSHELL_GATEWAY", &self.gateway)
            .env("OPENSHELL_TOKEN", TOKEN)
            .env_remove("OPENSHELL_CA_CERT")
            // Control characters must stay away because there is no terminal, not because of NO_COLOR.
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, args: &[&str]) -> Run {
        finish(self.command(args).output().await.unwrap())
    }

    async fn run_with_stdin(&self, args: &[&str], input: &str) -> Run {
        let mut child = self.command(args).stdin(Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        drop(stdin);
        finish(child.wait_with_output().await.unwrap())
    }

    async fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        finish(cmd.output().await.unwrap())
    }

    /// Writes a file for `-f` and returns its path.
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

fn finish(output: std::process::Output) -> Run {
    Run {
        // A run killed by a signal has no code; -1 fails every code assertion.
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// A push-mode gateway, the CLI, and an API client for setup and checks.
async fn setup() -> (TestGateway, Cli, Api) {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let cli = Cli::new(&gw);
    let api = gw.api().await;
    (gw, cli, api)
}

/// A sandbox with the example policy and a running supervisor.
async fn supervised(
    gw: &TestGateway,
    api: &mut Api,
    name: &str,
    extra: &[&str],
) -> (String, SupervisorProcess) {
    let (id, credential) = create_sandbox(api, name, POLICY).await;
    let dir = gw.store.dir.path().join(name);
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, extra);
    wait_running(api, &id).await;
    (id, supervisor)
}

fn op_state(op: &Value) -> &str {
    op["state"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_commands_create_list_get_and_refuse_an_unconfirmed_delete() {
    let (_gw, cli, api) = setup().await;
    let policy = cli.file("policy.yaml", POLICY);

    let created = cli
        .run(&["sandbox", "create", "web", "-f", &policy, "-o", "json"])
        .await;
    let created = created.expect_code(0).json();
    assert_eq!(created["sandbox"]["name"], "web");
    assert_eq!(created["sandbox"]["workspace"], "default");
    assert_eq!(created["sandbox"]["policy_revision"], 1);
    assert!(created["supervisor_credential"].as_str().unwrap().len() > 16);
    let id = created["sandbox"]["id"].as_str().unwrap().to_string();

    let cred = cli.dir.join("cred");
    let saved = cli
        .run(&[
            "sandbox",
            "create",
            "api",
            "--credential-file",
            cred.to_str().unwrap(),
            "-o",
            "json",
        ])
        .await;
    let saved = saved.expect_code(0).json();
    assert!(saved["supervisor_credential"].is_null());
    assert!(!std::fs::read_to_string(&cred).unwrap().trim().is_empty());

    let list = cli
        .run(&["sandbox", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{list}");
    assert!(names.contains(&"web") && names.contains(&"api"), "{list}");

    let yaml = cli.run(&["sandbox", "get", "web", "-o", "yaml"]).await;
    let yaml: serde_norway::Value = serde_norway::from_str(&yaml.expect_code(0).stdout).unwrap();
    assert_eq!(yaml["id"].as_str(), Some(id.as_str()));
    assert_eq!(yaml["lifecycle"].as_str(), Some("PENDING"));
    let table = cli.run(&["sandbox", "get", "web"]).await;
    assert!(table.expect_code(0).stdout.contains(&id));

    // No terminal and no --yes: refused as a usage error, and nothing is deleted.
    let refused = cli.run(&["sandbox", "delete", "web"]).await;
    refused.expect_code(2);
    assert!(refused.stderr.contains("--yes"), "{}", refused.stderr);
    assert_eq!(lifecycle(&api, &id).await, pb::SandboxLifecycle::Pending);

    let deleted = cli
        .run(&["sandbox", "delete", "web", "--yes", "-o", "json"])
        .await;
    let deleted = deleted.expect_code(0).json();
    assert_eq!(deleted["sandbox"]["lifecycle"], "DELETED");
    assert_eq!(lifecycle(&api, &id).await, pb::SandboxLifecycle::Deleted);
    let list = cli
        .run(&["sandbox", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let all = cli
        .run(&["sandbox", "list", "--all", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");

    let missing = cli.run(&["sandbox", "get", "nope"]).await;
    missing.expect_code(1);
    assert!(missing.stderr.starts_with("error:"), "{}", missing.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_set_wait_applies_with_progress_lines_and_round_trips() {
    let (gw, cli, mut api) = setup().await;
    let (id, supervisor) = supervised(&gw, &mut api, "web", &[]).await;
    let moved = cli.file("p8443.yaml", &policy_with_port(8443));

    // Moving 443 to 8443 takes reach away, so a script must confirm with --yes.
    let set = cli
        .run(&[
            "policy", "set", "web", "-f", &moved, "--wait", "--yes", "-o", "json",
        ])
        .await;
    let result = set.expect_code(0).json();
    let op = &result["operation"];
    assert_eq!(op_state(op), "APPLIED", "{result}");
    assert_eq!(op["outcome"], "APPLIED");
    assert_eq!(op["policy_revision"], 2);
    assert_eq!(op["wait_timed_out"], false);
    assert_eq!(result["idempotent_replay"], false);
    let op_id = op["id"].as_str().unwrap();
    // One plain line per state change, in order, ending with the terminal
    // one. How many there are depends on how fast the supervisor acks: the
    // commit may already return DELIVERED.
    let prefix = format!("operation {op_id} ");
    let states: Vec<&str> = set
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let (state, elapsed) = rest.split_once(' ').unwrap();
            assert!(
                elapsed.starts_with('(') && elapsed.ends_with("s)"),
                "{rest}"
            );
            state
        })
        .collect();
    let order = ["PENDING", "DELIVERED", "APPLIED"];
    let ranks: Vec<usize> = states
        .iter()
        .map(|s| order.iter().position(|o| o == s).unwrap())
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{}", set.stderr);
    assert_eq!(states.last(), Some(&"APPLIED"), "{}", set.stderr);
    assert!(
        supervisor
            .active_file("policy.json")
            .unwrap()
            .contains("8443")
    );

    // `policy get -o yaml` is accepted unchanged by `policy set -f -`: a no-op.
    let yaml = cli
        .run(&["policy", "get", "web", "-o", "yaml"])
        .await
        .expect_code(0)
        .stdout
        .clone();
    assert!(yaml.contains("8443"), "{yaml}");
    let again = cli
        .run_with_stdin(
            &["policy", "set", "web", "-f", "-", "--wait", "-o", "json"],
            &yaml,
        )
        .await;
    let again = again.expect_code(0).json();
    assert_eq!(again["operation"]["no_op"], true, "{again}");
    assert_eq!(again["operation"]["policy_revision"], 2);
    assert_eq!(op_state(&again["operation"]), "APPLIED");
    let same = cli
        .run_with_stdin(&["policy", "diff", "web", "-f", "-"], &yaml)
        .await;
    assert!(
        same.expect_code(0).stdout.starts_with("no differences"),
        "{}",
        same.stdout
    );

    // diff(1)-like: 1 when different, with the removed reach named.
    let original = cli.file("policy.yaml", POLICY);
    let diff = cli
        .run(&["policy", "diff", "web", "-f", &original, "-o", "json"])
        .await;
    let diff = diff.expect_code(1).json();
    assert_eq!(diff["changed"], true);
    assert_eq!(
        diff["removed_network_access"],
        serde_json::json!(["github"])
    );
    let text = diff["diff"].as_str().unwrap();
    assert!(text.contains("-      port: 8443"), "{text}");
    assert!(text.contains("+      port: 443"), "{text}");
    let table = cli.run(&["policy", "diff", "web", "-f", &original]).await;
    table.expect_code(1);
    assert!(
        table.stdout.contains("removes network access: github"),
        "{}",
        table.stdout
    );

    let got = cli
        .run(&["policy", "get", id.as_str(), "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(got["policy"]["revision"], 2);
    assert_eq!(got["effective_source"], "SANDBOX");
    let history = cli
        .run(&["policy", "history", "web", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    let revisions: Vec<u64> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(revisions, vec![2, 1]);

    // --quiet: no progress lines at all.
    let quiet = cli
        .run(&[
            "policy", "set", "web", "-f", &original, "--wait", "--yes", "--quiet", "-o", "json",
        ])
        .await;
    assert_eq!(
        op_state(&quiet.expect_code(0).json()["operation"]),
        "APPLIED"
    );
    assert_eq!(quiet.stderr, "", "quiet prints nothing on success");

    // Commit-only with an idempotency key; the same key again is a replay.
    let extra = cli.file("extra.yaml", &policy_with_extra("npm"));
    let args = [
        "policy",
        "set",
        "web",
        "-f",
        &extra,
        "--commit-only",
        "--idempotency-key",
        "k-1",
        "-o",
        "json",
    ];
    let first = cli.run(&args).await.expect_code(0).json();
    let replay = cli.run(&args).await.expect_code(0).json();
    assert_eq!(replay["idempotent_replay"], true);
    assert_eq!(replay["operation"]["id"], first["operation"]["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_apply_exits_1() {
    let (gw, cli, mut api) = setup().await;
    let (_id, supervisor) = supervised(&gw, &mut api, "picky", &["--on-apply", REJECT_9999]).await;
    // The default (as upstream) is fail_closed; this sandbox keeps last-known-good.
    cli.run(&[
        "settings",
        "set",
        "--sandbox",
        "picky",
        "policy_validation_failure_mode=retain_last_valid",
        "--wait",
    ])
    .await
    .expect_code(0);
    let good = supervisor.active_file("policy.json").unwrap();
    let bad = cli.file("p9999.yaml", &policy_with_port(9999));

    let run = cli
        .run(&[
            "policy", "set", "picky", "-f", &bad, "--wait", "--yes", "-o", "json",
        ])
        .await;
    let result = run.expect_code(1).json();
    assert_eq!(op_state(&result["operation"]), "FAILED", "{result}");
    assert_eq!(
        result["operation"]["outcome"],
        "FAILED_RETAINED_LAST_KNOWN_GOOD"
    );
    assert!(run.stderr.contains("error: operation"), "{}", run.stderr);
    assert!(run.stderr.contains("last-known-good"), "{}", run.stderr);
    assert_eq!(supervisor.active_file("policy.json").unwrap(), good);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_and_unconfirmed_writes_exit_2() {
    let (_gw, cli, mut api) = setup().await;
    let (id, _) = create_sandbox(&mut api, "web", POLICY).await;
    let bad = cli.file("p9999.yaml", &policy_with_port(9999));

    for args in [
        vec!["policy", "set", "web"],
        vec!["policy", "set", "web", "-f", "p.yaml", "--timeout", "soon"],
        vec![
            "policy",
            "set",
            "web",
            "-f",
            "p.yaml",
            "--wait",
            "--commit-only",
        ],
        vec!["settings", "set", "--global", "log_level"],
        vec!["sandbox", "frobnicate"],
    ] {
        let run = cli.run(&args).await;
        run.expect_code(2);
        assert!(run.stderr.contains("error"), "{args:?}: {}", run.stderr);
    }

    // Writes that need a confirmation no one can give here.
    for args in [
        vec!["policy", "set", "web", "-f", bad.as_str()],
        vec!["policy", "set", "--global", "-f", bad.as_str()],
        vec!["policy", "clear-global"],
        vec!["settings", "set", "--global", "log_level=debug"],
        vec!["settings", "delete", "--global", "log_level"],
        vec!["sandbox", "delete", "web"],
    ] {
        let run = cli.run(&args).await;
        run.expect_code(2);
        assert!(
            run.stderr.contains("refusing to") && run.stderr.contains("--yes"),
            "{args:?}: {}",
            run.stderr
        );
    }
    let empty = cli
        .run_with_stdin(&["policy", "set", "web", "-f", "-"], "\n")
        .await;
    empty.expect_code(2);
    assert!(empty.stderr.contains("empty"), "{}", empty.stderr);
    let broken = cli.file("broken.yaml", "version: 1\nbogus: true\n");
    cli.run(&["policy", "diff", "web", "-f", &broken])
        .await
        .expect_code(2);

    // None of it wrote anything.
    let ops = cli
        .run(&["operations", "list", "--sandbox", id.as_str(), "-o", "json"])
        .await;
    let ops = ops.expect_code(0).json();
    assert_eq!(
        ops.as_array().unwrap().len(),
        1,
        "only the creation's policy operation: {ops}"
    );
    assert_eq!(lifecycle(&api, &id).await, pb::SandboxLifecycle::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_a_stopped_sandbox_exits_3() {
    let (gw, cli, mut api) = setup().await;
    let (id, _supervisor) = supervised(&gw, &mut api, "web", &[]).await;

    let stopped = cli
        .run(&["sandbox", "stop", "web", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(stopped["lifecycle"], "STOPPED");
    let extra = cli.file("extra.yaml", &policy_with_extra("npm"));
    let run = cli
        .run(&["policy", "set", "web", "-f", &extra, "--wait", "-o", "json"])
        .await;
    let result = run.expect_code(3).json();
    assert_eq!(op_state(&result["operation"]), "INACTIVE", "{result}");
    assert!(run.stderr.contains("not in effect"), "{}", run.stderr);

    let started = cli
        .run(&["sandbox", "start", "web", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(started["id"], id.as_str());
    assert_ne!(started["lifecycle"], "STOPPED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_times_out_exits_124_and_can_be_resumed() {
    let (gw, cli, mut api) = setup().await;
    let (id, credential) = create_sandbox(&mut api, "web", POLICY).await;
    let extra = cli.file("extra.yaml", &policy_with_extra("npm"));

    // No supervisor yet: nothing can apply it.
    let run = cli
        .run(&[
            "policy",
            "set",
            "web",
            "-f",
            &extra,
            "--wait",
            "--timeout",
            "300ms",
            "-o",
            "json",
        ])
        .await;
    let result = run.expect_code(124).json();
    let op = &result["operation"];
    assert_eq!(op_state(op), "PENDING", "{result}");
    assert_eq!(op["wait_timed_out"], true);
    let op_id = op["id"].as_str().unwrap().to_string();
    assert!(
        run.stderr
            .contains(&format!("openshell operations wait {op_id}")),
        "{}",
        run.stderr
    );

    let got = cli
        .run(&["operations", "get", &op_id, "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(op_state(&got), "PENDING");
    let listed = cli
        .run(&[
            "operations",
            "list",
            "--sandbox",
            "web",
            "--state",
            "pending",
            "-o",
            "json",
        ])
        .await;
    let listed = listed.expect_code(0).json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == op_id.as_str()),
        "{listed}"
    );
    cli.run(&["operations", "wait", &op_id, "--timeout", "300ms"])
        .await
        .expect_code(124);

    // The operation went on; once a supervisor connects, waiting again ends it.
    let dir = gw.store.dir.path().join("web");
    let _supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    let resumed = cli
        .run(&[
            "operations",
            "wait",
            &op_id,
            "--timeout",
            "30s",
            "-o",
            "json",
        ])
        .await;
    let resumed = resumed.expect_code(0).json();
    assert_eq!(op_state(&resumed), "APPLIED", "{resumed}");
    assert!(resumed["completed_at"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_operation_exits_0_with_a_warning() {
    let (gw, cli, mut api) = setup().await;
    let (id, credential) = create_sandbox(&mut api, "web", POLICY).await;
    // Two revisions committed while no supervisor runs: the bootstrap
    // delivers the newer one, which supersedes the older.
    let older = cli.file("older.yaml", &policy_with_extra("npm"));
    let newer = cli.file("newer.yaml", &policy_with_extra("crates"));
    let first = cli
        .run(&[
            "policy",
            "set",
            "web",
            "-f",
            &older,
            "--commit-only",
            "-o",
            "json",
        ])
        .await;
    let first_id = first.expect_code(0).json()["operation"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        first
            .stderr
            .contains(&format!("openshell operations wait {first_id}"))
    );
    cli.run(&[
        "policy",
        "set",
        "web",
        "-f",
        &newer,
        "--commit-only",
        "--yes",
    ])
    .await
    .expect_code(0);

    let dir = gw.store.dir.path().join("web");
    let _supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    let run = cli
        .run(&[
            "operations",
            "wait",
            &first_id,
            "--timeout",
            "30s",
            "-o",
            "json",
        ])
        .await;
    let op = run.expect_code(0).json();
    assert_eq!(op_state(&op), "SUPERSEDED", "{op}");
    assert!(run.stderr.contains("warning:"), "{}", run.stderr);
    assert!(run.stderr.contains("superseded"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_a_wait_exits_130_and_leaves_the_operation_pending() {
    let (_gw, cli, mut api) = setup().await;
    create_sandbox(&mut api, "web", POLICY).await;
    let extra = cli.file("extra.yaml", &policy_with_extra("npm"));

    let mut child = cli
        .command(&[
            "policy",
            "set",
            "web",
            "-f",
            &extra,
            "--wait",
            "--timeout",
            "60s",
        ])
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    // The first progress line means the wait has begun (and Ctrl-C is handled).
    let first = tokio::time::timeout(DEADLINE, stderr.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.contains(" PENDING ("), "{first}");
    let op_id = first.split_whitespace().nth(1).unwrap().to_string();
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut rest = Vec::new();
    while let Some(line) = tokio::time::timeout(DEADLINE, stderr.next_line())
        .await
        .unwrap()
        .unwrap()
    {
        rest.push(line);
    }
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    let rest = rest.join("\n");
    assert!(
        rest.contains(&format!("resume with: openshell operations wait {op_id}")),
        "{rest}"
    );
    assert!(!rest.contains('\u{1b}'), "{rest:?}");

    let op = cli
        .run(&["operations", "get", &op_id, "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(op_state(&op), "PENDING", "the operation is untouched: {op}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_commands_and_fleet_progress() {
    let (gw, cli, mut api) = setup().await;
    let (_id, _supervisor) = supervised(&gw, &mut api, "web", &[]).await;

    let keys = cli
        .run(&["settings", "keys", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert!(
        keys.as_array()
            .unwrap()
            .iter()
            .any(|k| k["key"] == "log_level"),
        "{keys}"
    );

    let set = cli
        .run(&[
            "settings",
            "set",
            "--sandbox",
            "web",
            "log_level=debug",
            "--wait",
            "-o",
            "json",
        ])
        .await;
    let set = set.expect_code(0).json();
    assert_eq!(op_state(&set["operation"]), "APPLIED", "{set}");
    let got = cli
        .run(&["settings", "get", "--sandbox", "web", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    let effective = got["effective"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "log_level")
        .unwrap()
        .clone();
    assert_eq!(effective["value"], "debug", "{got}");
    assert_eq!(effective["scope"], "SANDBOX", "{got}");

    // A global write is a fleet operation: N/M progress lines, per-target counts.
    let global = cli
        .run(&[
            "settings",
            "set",
            "--global",
            "log_level=warn",
            "--wait",
            "--yes",
            "-o",
            "json",
        ])
        .await;
    let result = global.expect_code(0).json();
    let op = &result["operation"];
    assert_eq!(op["target_kind"], "GLOBAL");
    assert_eq!(op_state(op), "APPLIED", "{result}");
    assert_eq!(op["fleet"]["targets"], 1);
    assert_eq!(op["fleet"]["applied"], 1);
    assert!(
        global.stderr.contains("1/1 applied, 0 failed, 0 pending"),
        "{}",
        global.stderr
    );
    let table = cli
        .run(&["settings", "get", "--global"])
        .await
        .expect_code(0)
        .stdout
        .clone();
    assert!(
        table.contains("log_level") && table.contains("warn"),
        "{table}"
    );

    let workspace = cli
        .run(&[
            "settings",
            "set",
            "--workspace",
            "default",
            "log_level=info",
            "--wait",
            "--threshold",
            "1",
            "-o",
            "json",
        ])
        .await;
    let workspace = workspace.expect_code(0).json();
    assert_eq!(workspace["operation"]["target_kind"], "WORKSPACE");

    let deleted = cli
        .run(&[
            "settings",
            "delete",
            "--global",
            "log_level",
            "--yes",
            "--wait",
            "-o",
            "yaml",
        ])
        .await;
    let deleted: serde_norway::Value =
        serde_norway::from_str(&deleted.expect_code(0).stdout).unwrap();
    assert_eq!(deleted["operation"]["state"].as_str(), Some("APPLIED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_commands_never_print_credentials() {
    let (_gw, cli, mut api) = setup().await;
    create_sandbox(&mut api, "web", POLICY).await;
    let secret = "ghp_e2e_secret_value_123";

    let created = cli
        .run_with_env(
            &[
                "provider",
                "create",
                "gh",
                "--type",
                "github",
                "--env",
                "GH_HOST=github.com",
                "--credential-from-env",
                "GITHUB_TOKEN",
                "-o",
                "json",
            ],
            &[("GITHUB_TOKEN", secret)],
        )
        .await;
    let json = created.expect_code(0).json();
    assert_eq!(json["provider"]["name"], "gh");
    assert_eq!(
        json["provider"]["credential_names"],
        serde_json::json!(["GITHUB_TOKEN"])
    );
    assert_eq!(json["provider"]["env"]["GH_HOST"], "github.com");
    assert!(!created.stdout.contains(secret) && !created.stderr.contains(secret));

    let attached = cli
        .run(&["provider", "attach", "web", "gh", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(attached["sandbox"]["providers"], serde_json::json!(["gh"]));
    let got = cli.run(&["provider", "get", "gh"]).await;
    assert!(!got.expect_code(0).stdout.contains(secret));
    let list = cli
        .run(&["provider", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["attached_sandbox_ids"].as_array().unwrap().len(), 1);
    // Attached providers cannot go.
    cli.run(&["provider", "delete", "gh"]).await.expect_code(1);
    let detached = cli
        .run(&["provider", "detach", "web", "gh", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(detached["sandbox"]["providers"], serde_json::json!([]));
    let deleted = cli
        .run(&["provider", "delete", "gh", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(
        deleted,
        serde_json::json!({"provider": "gh", "deleted": true})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_gateway_and_completions() {
    let (gw, cli, mut api) = setup().await;
    let (id, _supervisor) = supervised(&gw, &mut api, "web", &[]).await;
    create_sandbox(&mut api, "lonely", POLICY).await;

    let sessions = cli
        .run(&["sessions", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    let sessions = sessions.as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["sandbox_id"], id.as_str());
    assert_eq!(sessions[0]["mode"], "PUSH");

    let inspect = cli
        .run(&["sessions", "inspect", "web", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(inspect["connected"], true);
    assert_eq!(inspect["negotiated_mode"], "PUSH");
    assert_eq!(inspect["gateway_mode"], "push");
    assert!(inspect["hints"].is_array());

    // Hints stand out in their own section, one marked line each.
    let lonely = cli.run(&["sessions", "inspect", "lonely"]).await;
    let text = &lonely.expect_code(0).stdout;
    let hints = text.split("\nHints:\n").nth(1).unwrap();
    let first = hints.lines().next().unwrap();
    assert!(
        first.starts_with("  ! ") && first.contains("supervisor"),
        "{text}"
    );
    let healthy = cli.run(&["sessions", "inspect", "web"]).await;
    let text = &healthy.expect_code(0).stdout;
    assert!(text.contains("\nHints:\n"), "{text}");
    if inspect["hints"].as_array().unwrap().is_empty() {
        assert!(text.contains("delivery looks healthy"), "{text}");
    }

    let info = cli
        .run(&["gateway", "info", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(info["config_delivery_mode"], "push");
    assert_eq!(info["sessions"], 1);

    let bash = cli.run(&["completions", "bash"]).await;
    assert!(bash.expect_code(0).stdout.contains("openshell"));
    let zsh = cli.run(&["completions", "zsh"]).await;
    assert!(zsh.expect_code(0).stdout.contains("#compdef openshell"));
    let docs = cli.run(&["docs", "markdown"]).await;
    assert!(
        docs.expect_code(0)
            .stdout
            .starts_with("# `openshell` command reference")
    );
}

/// Drives `openshell` on a pseudo-terminal; everything blocking runs off the runtime.
mod pty {
    use expectrl::process::unix::WaitStatus;
    use expectrl::{Eof, Expect, Regex, Session};

    use super::*;

    /// Generous: the CLI is debug-built and CI machines are small.
    const PTY_DEADLINE: Duration = Duration::from_secs(60);

    pub fn spawn(
        gateway: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> expectrl::session::OsSession {
        let mut cmd = std::process::Command::new(binary("openshell"));
        cmd.args(args)
            .env("OPENSHELL_GATEWAY", gateway)
            .env("OPENSHELL_TOKEN", TOKEN)
            .env("TERM", "xterm-256color")
            .env_remove("NO_COLOR");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut session = Session::spawn(cmd).unwrap();
        session.get_process_mut().set_window_size(160, 40).unwrap();
        session.set_expect_timeout(Some(PTY_DEADLINE));
        session
    }

    /// Reads to the end and returns (exit code, everything printed).
    pub fn finish(mut session: expectrl::session::OsSession, seen: &[u8]) -> (i32, String) {
        let rest = session.expect(Eof).unwrap();
        let mut all = seen.to_vec();
        // `as_bytes` is everything read up to and including the match.
        all.extend_from_slice(rest.as_bytes());
        let status = session.get_process().wait().unwrap();
        let code = match status {
            WaitStatus::Exited(_, code) => code,
            other => panic!("openshell did not exit normally: {other:?}"),
        };
        (code, String::from_utf8_lossy(&all).into_owned())
    }

    pub fn wait_and_delete(gateway: &str, policy: &str) -> (i32, String, i32, String) {
        // A wait on a terminal draws the stages live and leaves the final line.
        let mut session = spawn(
            gateway,
            &["policy", "set", "web", "-f", policy, "--wait"],
            &[],
        );
        let staged = session.expect(Regex("operation op-[0-9a-f-]+: ")).unwrap();
        let mut seen = staged.as_bytes().to_vec();
        let applied = session.expect("applied (").unwrap();
        seen.extend_from_slice(applied.as_bytes());
        let (wait_code, wait_output) = finish(session, &seen);

        // A delete asks first; 'y' answers without Enter.
        let mut session = spawn(gateway, &["sandbox", "delete", "web"], &[]);
        let prompt = session.expect("Delete sandbox web?").unwrap();
        let seen = prompt.as_bytes().to_vec();
        session.send("y").unwrap();
        let (delete_code, delete_output) = finish(session, &seen);
        (wait_code, wait_output, delete_code, delete_output)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_gets_live_progress_and_a_confirmation_prompt() {
    let (gw, cli, mut api) = setup().await;
    let (id, _supervisor) = supervised(&gw, &mut api, "web", &[]).await;
    let extra = cli.file("extra.yaml", &policy_with_extra("npm"));

    let gateway = gw.endpoint();
    let policy = extra.clone();
    let (wait_code, wait_output, delete_code, delete_output) =
        tokio::task::spawn_blocking(move || pty::wait_and_delete(&gateway, &policy))
            .await
            .unwrap();

    assert_eq!(wait_code, 0, "{wait_output}");
    // The live view: a colored spinner line redrawn in place, then the stages, all done.
    assert!(wait_output.contains('\u{1b}'), "{wait_output:?}");
    assert!(wait_output.contains("committed"), "{wait_output:?}");
    assert!(wait_output.contains("delivered"), "{wait_output:?}");
    assert!(
        wait_output.contains("\u{1b}[32m✔\u{1b}[0m applied ("),
        "{wait_output:?}"
    );
    assert!(wait_output.contains("APPLIED"), "{wait_output:?}");

    assert_eq!(delete_code, 0, "{delete_output}");
    assert!(
        delete_output.contains("This deletes sandbox default/web"),
        "{delete_output:?}"
    );
    assert!(delete_output.contains("[y/N]"), "{delete_output:?}");
    assert_eq!(lifecycle(&api, &id).await, pb::SandboxLifecycle::Deleted);

    // The same wait without a terminal: plain lines, no control characters.
    let other = create_sandbox(&mut api, "plain", POLICY).await;
    let dir = gw.store.dir.path().join("plain");
    let _plain = spawn_supervisor(&gw.endpoint(), &other.0, &other.1, &dir, &[]);
    wait_running(&api, &other.0).await;
    let run = cli
        .run(&["policy", "set", "plain", "-f", &extra, "--wait"])
        .await;
    run.expect_code(0);
    assert!(run.stderr.contains(" APPLIED ("), "{}", run.stderr);
    assert!(run.stdout.contains("APPLIED"), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_color_keeps_a_terminal_free_of_color() {
    use expectrl::Expect;

    let (gw, cli, mut api) = setup().await;
    let (_id, _supervisor) = supervised(&gw, &mut api, "web", &[]).await;
    let extra = cli.file("extra.yaml", &policy_with_extra("npm"));
    let gateway = gw.endpoint();

    let (code, output) = tokio::task::spawn_blocking(move || {
        let mut session = pty::spawn(
            &gateway,
            &["policy", "set", "web", "-f", &extra, "--wait"],
            &[("NO_COLOR", "1")],
        );
        let staged = session.expect("✔ applied (").unwrap();
        let seen = staged.as_bytes().to_vec();
        pty::finish(session, &seen)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{output}");
    // Still redrawn in place (cursor control), but never colored or bold.
    for sgr in ["\u{1b}[32m", "\u{1b}[36m", "\u{1b}[1m"] {
        assert!(!output.contains(sgr), "{sgr:?} in {output:?}");
    }
    assert!(output.contains("APPLIED"), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_file_is_never_written_through_a_symlink_or_over_a_file() {
    use std::os::unix::fs::PermissionsExt;

    let (_gw, cli, _api) = setup().await;
    // Stands for a file of another user that a planted link points at.
    let victim = cli.file("victim", "someone else's data\n");
    let link = cli.dir.join("cred");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let link = link.to_str().unwrap();

    let refused = cli
        .run(&["sandbox", "create", "web", "--credential-file", link])
        .await;
    refused.expect_code(2);
    assert!(refused.stderr.contains(link), "{}", refused.stderr);
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "someone else's data\n"
    );
    // Refused before the gateway was asked, so no credential was minted and lost.
    let list = cli
        .run(&["sandbox", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");

    let forced = cli
        .run(&[
            "sandbox",
            "create",
            "web",
            "--credential-file",
            link,
            "--force",
            "-o",
            "json",
        ])
        .await;
    let forced = forced.expect_code(0).json();
    assert!(forced["supervisor_credential"].is_null(), "{forced}");
    let meta = std::fs::symlink_metadata(link).unwrap();
    assert!(meta.file_type().is_file(), "the link itself was replaced");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(link).unwrap().trim().len() > 16);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "someone else's data\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_above_ten_minutes_exits_2_before_anything_is_sent() {
    // No gateway listens here: the flag is refused before one is needed.
    let cli = Cli {
        gateway: "http://127.0.0.1:9".into(),
        dir: std::env::temp_dir(),
    };
    for args in [
        vec![
            "policy",
            "set",
            "web",
            "-f",
            "p.yaml",
            "--wait",
            "--timeout",
            "11m",
        ],
        vec!["settings", "set", "--global", "a=b", "--timeout", "11m"],
        vec!["operations", "wait", "op-1", "--timeout", "11m"],
    ] {
        let run = cli.run(&args).await;
        run.expect_code(2);
        for needed in ["--timeout", "11m", "at most 10m"] {
            assert!(run.stderr.contains(needed), "{args:?}: {}", run.stderr);
        }
    }
}

/// A gateway process (so it can die the way a crash does, and start again on
/// the same address and store) in push mode, and a CLI pointed at it.
struct GatewayProcess {
    dir: tempfile::TempDir,
    port: u16,
    guard: openshell_e2e::process::ChildGuard,
}

impl GatewayProcess {
    fn spawn(dir: tempfile::TempDir, port: u16) -> Self {
        let listen = format!("127.0.0.1:{port}");
        let data_dir = dir.path().join("data");
        let token = format!("ci={TOKEN}");
        let args = [
            "--listen",
            listen.as_str(),
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--operator-token",
            token.as_str(),
            "--metrics-listen",
            "off",
            "--config-delivery-mode",
            "push",
        ];
        let log = dir.path().join(format!("gateway-{}.log", rand_suffix()));
        let guard = openshell_e2e::process::spawn_gateway(&args, &[], log, port);
        Self { dir, port, guard }
    }

    fn start() -> Self {
        Self::spawn(
            tempfile::tempdir().unwrap(),
            openshell_e2e::process::free_port(),
        )
    }

    fn kill(&mut self) {
        self.guard.child.kill().unwrap();
        self.guard.child.wait().unwrap();
    }

    /// Kills it and starts a new one on the same address and store.
    fn restart(mut self) -> Self {
        self.kill();
        let Self { dir, port, guard } = self;
        drop(guard);
        Self::spawn(dir, port)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn cli(&self) -> Cli {
        Cli {
            gateway: self.endpoint(),
            dir: self.dir.path().to_path_buf(),
        }
    }
}

/// The next line a CLI process writes on stderr, or None at its end.
async fn next_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) -> Option<String> {
    loop {
        let line = tokio::time::timeout(DEADLINE, lines.next_line())
            .await
            .expect("the CLI writes a line or ends within the deadline")
            .unwrap();
        // Why the wait waits (these sandboxes have no supervisor) is said at its start and
        // again whenever it changes; these tests follow the operation's own lines.
        if !line.as_deref().is_some_and(|l| l.starts_with("waiting: ")) {
            return line;
        }
    }
}

/// The rest of a CLI process's stderr, once it has exited, and how it exited.
async fn until_exit(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    child: &mut tokio::process::Child,
) -> (std::process::ExitStatus, String) {
    let mut rest = Vec::new();
    while let Some(line) = next_line(lines).await {
        rest.push(line);
    }
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("the CLI exits within the deadline")
        .unwrap();
    (status, rest.join("\n"))
}

/// A distinct log file name per gateway process of one test.
fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_gateway_dies_exits_69_naming_the_operation() {
    let mut gateway = GatewayProcess::start();
    let cli = gateway.cli();
    // Two sandboxes and no supervisors: a global change stays PENDING.
    for name in ["a", "b"] {
        cli.run(&["sandbox", "create", name]).await.expect_code(0);
    }

    let mut child = cli
        .command(&[
            "settings",
            "set",
            "--global",
            "log_level=debug",
            "--wait",
            "--yes",
            "--timeout",
            "5m",
        ])
        // Reconnecting is tried, briefly: this gateway does not come back.
        .env("OPENSHELL_WAIT_RECONNECT_WINDOW", "2s")
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = next_line(&mut stderr).await.unwrap();
    assert!(first.contains("2 pending"), "{first}");
    let op_id = first.split_whitespace().nth(1).unwrap().to_string();
    // Stopping one target changes the counts; that line can only come over
    // the open WaitForApply stream, so the gateway dies under it.
    cli.run(&["sandbox", "stop", "b"]).await.expect_code(0);
    let second = next_line(&mut stderr).await.unwrap();
    assert!(second.contains("1 pending"), "{second}");

    gateway.kill();
    let (status, rest) = until_exit(&mut stderr, &mut child).await;
    assert_eq!(status.code(), Some(69), "{rest}");
    assert!(
        rest.contains(&format!(
            "note: lost the gateway while waiting for operation {op_id}"
        )) && rest.contains("reconnecting for up to 2s"),
        "{rest}"
    );
    assert!(rest.contains("could not reconnect"), "{rest}");
    assert!(rest.contains(&format!("operation {op_id}")), "{rest}");
    assert!(
        rest.contains(&format!("check with `openshell operations get {op_id}`")),
        "{rest}"
    );
    assert!(!rest.contains("FAILED"), "{rest}");
}

/// A gateway restarted under `operations wait` costs the wait nothing but a
/// note: it reconnects, goes on waiting, and ends on the operation's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_survives_a_gateway_restart() {
    let gateway = GatewayProcess::start();
    let cli = gateway.cli();
    let mut credentials = Vec::new();
    for name in ["a", "b"] {
        let created = cli
            .run(&["sandbox", "create", name, "-o", "json"])
            .await
            .expect_code(0)
            .json();
        credentials.push((
            created["sandbox"]["id"].as_str().unwrap().to_string(),
            created["supervisor_credential"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    // No supervisors yet: a global change waits for both sandboxes.
    let set = cli
        .run(&[
            "settings",
            "set",
            "--global",
            "log_level=debug",
            "--commit-only",
            "--yes",
            "-o",
            "json",
        ])
        .await
        .expect_code(0)
        .json();
    let op_id = set["operation"]["id"].as_str().unwrap().to_string();

    let mut child = cli
        .command(&["operations", "wait", &op_id, "--timeout", "5m"])
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = next_line(&mut stderr).await.unwrap();
    assert!(first.contains("2 pending"), "{first}");
    // This line can only come over the open WaitForApply stream: the
    // restart below breaks a wait that is under way.
    cli.run(&["sandbox", "stop", "b"]).await.expect_code(0);
    let second = next_line(&mut stderr).await.unwrap();
    assert!(second.contains("1 pending"), "{second}");

    let gateway = gateway.restart();
    let lost = next_line(&mut stderr).await.unwrap();
    assert!(
        lost.contains(&format!(
            "note: lost the gateway while waiting for operation {op_id}"
        )),
        "{lost}"
    );
    let (id, credential) = &credentials[0];
    let dir = gateway.dir.path().join("supervisor-a");
    let _supervisor = spawn_supervisor(&gateway.endpoint(), id, credential, &dir, &[]);
    let (status, rest) = until_exit(&mut stderr, &mut child).await;
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(
        rest.contains(&format!(
            "note: reconnected to the gateway; still waiting for operation {op_id}"
        )),
        "{rest}"
    );
    assert!(rest.contains("APPLIED"), "{rest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_from_users_and_the_gateway_is_printed_escaped() {
    let (_gw, cli, mut api) = setup().await;
    create_sandbox(&mut api, "web", POLICY).await;
    let extra = cli.file("extra.yaml", &policy_with_extra("npm"));

    // `expect_code` also checks that neither stream carries a control character. A key with
    // one is refused, and the refusal does not echo it.
    let key = "deploy-\u{1b}[31m42";
    let set = cli
        .run(&[
            "policy",
            "set",
            "web",
            "-f",
            &extra,
            "--commit-only",
            "--idempotency-key",
            key,
        ])
        .await;
    set.expect_code(1);
    assert!(
        set.stderr.contains("request_id") && set.stderr.contains("control characters"),
        "{}",
        set.stderr
    );

    let value = "\u{1b}]0;pwned\u{7}\u{9b}2J";
    let created = cli
        .run(&[
            "provider",
            "create",
            "gh",
            "--type",
            "github",
            "--env",
            &format!("GH_HOST={value}"),
        ])
        .await;
    created.expect_code(0);
    let shown = cli.run(&["provider", "get", "gh"]).await;
    shown.expect_code(0);
    assert!(
        shown.stdout.contains("GH_HOST=\\x1b]0;pwned\\x07\\u{9b}2J"),
        "{}",
        shown.stdout
    );
    let json = cli.run(&["provider", "get", "gh", "-o", "json"]).await;
    assert_eq!(json.expect_code(0).json()["env"]["GH_HOST"], value);
}

/// Probe: 2,000 bad ports under a 200-character policy key made the gateway answer with a
/// 27 KB `grpc-status-details-bin`, past the client's header-list limit: `policy set`,
/// `--dry-run` and `sandbox create` printed "h2 protocol error: http2 error". The refusal
/// now fits: the CLI prints the summary, the first violations by field and how many more
/// there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_long_violations_print_the_first_ones_and_how_many_more() {
    let (_gw, cli, mut api) = setup().await;
    create_sandbox(&mut api, "web", POLICY).await;
    let key = "k".repeat(200);
    let mut text = format!("version: 1\nnetwork_policies:\n  {key}:\n    endpoints:\n");
    for i in 0..2000 {
        text.push_str(&format!("      - {{ host: h{i}.example.com, port: 0 }}\n"));
    }
    let file = cli.file("many-bad-ports.yaml", &text);
    for args in [
        &[
            "--yes",
            "policy",
            "set",
            "web",
            "-f",
            &file,
            "--commit-only",
        ][..],
        &["policy", "set", "web", "-f", &file, "--dry-run"],
        &["sandbox", "create", "other", "-f", &file],
    ] {
        let run = cli.run(args).await;
        run.expect_code(1);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(
            lines[0], "error: 2000 problems found",
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            lines[1].starts_with("  - ")
                && lines[1].contains(&format!(
                    "network_policies.{key}.endpoints[0].port: port 0 is out of range"
                )),
            "{args:?}: {}",
            run.stderr
        );
        let listed = lines[1..lines.len() - 1]
            .iter()
            .filter(|line| {
                line.starts_with("  - ")
                    && line.contains(&format!("network_policies.{key}.endpoints["))
            })
            .count();
        assert_eq!(listed, lines.len() - 2, "{args:?}: {}", run.stderr);
        assert!(listed > 0, "{args:?}: {}", run.stderr);
        assert_eq!(
            lines.last().copied(),
            Some(format!("  - … and {} more violations", 2000 - listed).as_str()),
            "{args:?}: {}",
            run.stderr
        );
    }
}

/// A fleet write that ends with a sandbox behind says which one and why;
/// `operations get --targets` lists every sandbox of it with its state;
/// `operations list --sandbox` shows the fleet operation among the sandbox's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_wait_names_its_stragglers_and_get_targets_lists_every_sandbox() {
    let (gw, cli, mut api) = setup().await;
    let (_a, _supervisor_a) = supervised(&gw, &mut api, "up-a", &[]).await;
    let (_b, _supervisor_b) = supervised(&gw, &mut api, "up-b", &[]).await;
    // Its hook rejects the new policy: its target fails.
    let (_picky, _supervisor_picky) =
        supervised(&gw, &mut api, "picky", &["--on-apply", REJECT_9999]).await;
    // No supervisor: its target stays pending.
    let (down, _) = create_sandbox(&mut api, "down", POLICY).await;
    let policy = cli.file(
        "global.yaml",
        &policy_with_extra("fleet").replace(
            "fleet.example.com, port: 443",
            "fleet.example.com, port: 9999",
        ),
    );

    let set = cli
        .run(&[
            "policy",
            "set",
            "--global",
            "-f",
            &policy,
            "--wait",
            "--yes",
            "--timeout",
            "5s",
            "-o",
            "json",
        ])
        .await;
    let op = set.expect_code(124).json();
    let op_id = op["operation"]["id"].as_str().unwrap().to_string();
    assert!(
        set.stderr
            .contains("2/4 applied; pending: default/down (no session); failed: default/picky ("),
        "{}",
        set.stderr
    );

    let listed = cli
        .run(&["operations", "get", &op_id, "--targets", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(listed["counts"]["targets"], 4, "{listed}");
    assert_eq!(listed["truncated"], false, "{listed}");
    let targets = listed["targets"].as_array().unwrap();
    let mut states: Vec<(&str, &str)> = targets
        .iter()
        .map(|t| {
            (
                t["sandbox_name"].as_str().unwrap(),
                t["state"].as_str().unwrap(),
            )
        })
        .collect();
    states.sort_unstable();
    assert_eq!(
        states,
        [
            ("down", "PENDING"),
            ("picky", "FAILED"),
            ("up-a", "APPLIED"),
            ("up-b", "APPLIED")
        ],
        "{listed}"
    );

    let table = cli.run(&["operations", "get", &op_id, "--targets"]).await;
    let stdout = &table.expect_code(0).stdout;
    let row = stdout
        .lines()
        .find(|l| l.starts_with("default/down"))
        .unwrap_or_else(|| panic!("no row for the straggler:\n{stdout}"));
    assert!(
        row.contains("PENDING") && row.contains("no session") && row.ends_with(&down),
        "{row}"
    );

    let pending = cli
        .run(&[
            "operations",
            "get",
            &op_id,
            "--targets",
            "--state",
            "pending,failed",
            "-o",
            "json",
        ])
        .await
        .expect_code(0)
        .json();
    let pending = pending["targets"].as_array().unwrap();
    assert_eq!(pending.len(), 2, "{pending:?}");
    let down_row = pending.iter().find(|t| t["sandbox_id"] == down.as_str());
    assert_eq!(down_row.unwrap()["reason"], "no session", "{pending:?}");
    let failed = pending.iter().find(|t| t["state"] == "FAILED").unwrap();
    assert_eq!(failed["sandbox_name"], "picky", "{pending:?}");
    assert!(
        failed["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{pending:?}"
    );
    let limited = cli
        .run(&[
            "operations",
            "get",
            &op_id,
            "--targets",
            "--limit",
            "1",
            "-o",
            "json",
        ])
        .await
        .expect_code(0)
        .json();
    assert_eq!(limited["targets"].as_array().unwrap().len(), 1, "{limited}");
    assert_eq!(limited["truncated"], true, "{limited}");

    let ops = cli
        .run(&["operations", "list", "--sandbox", "down", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert!(
        ops.as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == op_id.as_str()),
        "the global operation is among the sandbox's: {ops}"
    );

    // Waiting again ends the same way, with the same names.
    let wait = cli
        .run(&["operations", "wait", &op_id, "--timeout", "1s"])
        .await;
    wait.expect_code(124);
    assert!(
        wait.stderr
            .contains("2/4 applied; pending: default/down (no session); failed: default/picky ("),
        "{}",
        wait.stderr
    );
}

/// The same write, on a terminal and not: both return once committed with exit 0, and the
/// operation is left PENDING for a sandbox whose supervisor is away. Before, the terminal
/// run waited for the apply and exited 124 while the redirected one exited 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_does_the_same_with_and_without_a_terminal() {
    let (gw, cli, mut api) = setup().await;
    // No supervisor: a run that waited could only end by its timeout.
    create_sandbox(&mut api, "away", POLICY).await;
    let piped = cli
        .run(&["settings", "set", "--sandbox", "away", "log_level=warn"])
        .await;
    piped.expect_code(0);

    let gateway = gw.endpoint();
    let (code, output) = tokio::task::spawn_blocking(move || {
        let session = pty::spawn(
            &gateway,
            &["settings", "set", "--sandbox", "away", "log_level=debug"],
            &[],
        );
        pty::finish(session, &[])
    })
    .await
    .unwrap();
    assert_eq!(code, piped.code, "{output}");
    assert!(output.contains("PENDING"), "{output:?}");
    assert!(piped.stdout.contains("PENDING"), "{}", piped.stdout);
}
