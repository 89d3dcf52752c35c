//! The CLI's tables end to end: the real `openshell` against a real
//! in-process gateway and real supervisors. Ids are printed whole on one
//! line at any width (a copied id is a right id), free text is cut to fit,
//! `-o wide` adds ids and hashes, `--no-headers` drops the header line, and
//! the desired policy revision is shown beside the one the supervisor applied.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::process::{SupervisorProcess, binary, spawn_supervisor};
use openshell_e2e::{
    Api, POLICY, TOKEN, TestGateway, create_sandbox, eventually, policy_with_extra,
};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use serde_json::Value;
use unicode_width::UnicodeWidthStr;

/// Generous: debug builds on a small machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// A DNS label of 63 characters, the longest name there is.
const LONG_NAME: &str = "payments-reconciliation-worker-with-a-very-long-name-for-tables";
const LONG_PROVIDER: &str = "github-enterprise-credentials-for-the-payments-team-in-the-east";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self) -> String {
        assert_eq!(
            self.code, 0,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self.stdout
    }

    fn json(self) -> Value {
        serde_json::from_str(&self.ok()).unwrap()
    }
}

/// Runs `openshell` with stdout on a pipe.
async fn run(gw: &TestGateway, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(binary("openshell"));
    cmd.args(args)
        .env("OPENSHELL_GATEWAY", gw.endpoint())
        .env("OPENSHELL_TOKEN", TOKEN)
        .env_remove("COLUMNS")
        .env_remove("OPENSHELL_CA_CERT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Runs `openshell` on an 80-column pseudo-terminal and returns what it printed.
/// `gateway` `None` leaves the saved gateways to choose.
fn run_on_terminal(gateway: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    use expectrl::process::unix::WaitStatus;
    use expectrl::{Eof, Expect, Session};

    let mut cmd = std::process::Command::new(binary("openshell"));
    cmd.args(args)
        .env_remove("OPENSHELL_GATEWAY")
        .env_remove("OPENSHELL_TOKEN")
        .env_remove("OPENSHELL_CA_CERT")
        .env("TERM", "xterm-256color")
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR");
    if let Some(gateway) = gateway {
        cmd.env("OPENSHELL_GATEWAY", gateway);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut session = Session::spawn(cmd).unwrap();
    session.get_process_mut().set_window_size(80, 24).unwrap();
    session.set_expect_timeout(Some(DEADLINE));
    let all = session.expect(Eof).unwrap().as_bytes().to_vec();
    let code = match session.get_process().wait().unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("openshell did not exit normally: {other:?}"),
    };
    (code, String::from_utf8_lossy(&all).into_owned())
}

/// Text without SGR sequences (bold headers) and carriage returns.
fn strip_styling(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else if c != '\r' {
            out.push(c);
        }
    }
    out
}

/// Every id-shaped word of `text` (`sb-…`, `op-…`, `pv-…`, `ss-…`).
fn printed_ids(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for line in text.lines() {
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            if ["sb-", "op-", "pv-", "ss-"]
                .iter()
                .any(|p| word.starts_with(p) && word.len() > 3)
            {
                found.push((word.to_owned(), line.to_owned()));
            }
        }
    }
    found
}

async fn applied_revision(api: &Api, id: &str) -> u64 {
    api.clone()
        .get_sandbox(pb::GetSandboxRequest {
            name: id.to_string(),
            workspace_scope: None,
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap()
        .applied_policy_revision
}

async fn supervised(
    gw: &TestGateway,
    api: &mut Api,
    name: &str,
) -> (String, String, SupervisorProcess) {
    let (id, credential) = create_sandbox(api, name, POLICY).await;
    let dir = gw.store.dir.path().join(name);
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, &[]);
    eventually("the supervisor to apply revision 1", DEADLINE, || async {
        (applied_revision(api, &id).await == 1).then_some(())
    })
    .await;
    (id, credential, supervisor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_print_whole_at_80_columns_and_the_token_never_prints() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (sandbox_id, _credential, _supervisor) = supervised(&gw, &mut api, LONG_NAME).await;
    let dir = gw.store.dir.path().join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let extra = dir.join("extra.yaml");
    std::fs::write(&extra, policy_with_extra("npm")).unwrap();
    let extra = extra.to_str().unwrap();
    run(
        &gw,
        &["policy", "set", LONG_NAME, "-f", extra, "--wait"],
        &[],
    )
    .await
    .ok();
    run(
        &gw,
        &[
            "provider",
            "create",
            LONG_PROVIDER,
            "--type",
            "github",
            "--env",
            "GH_HOST=github.example.com",
        ],
        &[],
    )
    .await
    .ok();

    // Every id the gateway knows of, from JSON.
    let mut known = BTreeSet::from([sandbox_id.clone()]);
    for op in run(&gw, &["operations", "list", "-o", "json"], &[])
        .await
        .json()
        .as_array()
        .unwrap()
    {
        known.insert(op["id"].as_str().unwrap().to_owned());
    }
    for p in run(&gw, &["provider", "list", "-o", "json"], &[])
        .await
        .json()
        .as_array()
        .unwrap()
    {
        known.insert(p["id"].as_str().unwrap().to_owned());
    }
    for s in run(&gw, &["sessions", "list", "-o", "json"], &[])
        .await
        .json()
        .as_array()
        .unwrap()
    {
        known.insert(s["session_id"].as_str().unwrap().to_owned());
    }
    assert!(known.len() >= 5, "{known:?}");

    let commands: Vec<Vec<&str>> = vec![
        vec!["sandbox", "list"],
        vec!["sandbox", "get", LONG_NAME],
        vec!["operations", "list"],
        vec!["sessions", "list"],
        vec!["provider", "list"],
        vec!["policy", "history", LONG_NAME],
        vec!["policy", "get", LONG_NAME],
        vec!["sessions", "inspect", LONG_NAME],
    ];
    let gateway = gw.endpoint();
    let outputs = tokio::task::spawn_blocking(move || {
        commands
            .into_iter()
            .map(|args| {
                let (code, text) =
                    run_on_terminal(Some(&gateway), &args, &[("OPENSHELL_TOKEN", TOKEN)]);
                (args.join(" "), code, text)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();

    let mut seen = BTreeSet::new();
    for (command, code, raw) in &outputs {
        assert_eq!(*code, 0, "{command}:\n{raw}");
        assert!(!raw.contains(TOKEN), "{command} printed the token:\n{raw}");
        let text = strip_styling(raw);
        for (word, line) in printed_ids(&text) {
            // A wrapped or cut id would show here as a part of a known one.
            assert!(
                known.contains(&word),
                "{command}: {word:?} is not a whole id, in line {line:?}\n{text}"
            );
            seen.insert(word);
        }
        assert!(!text.contains("…-"), "{command}: an id was cut:\n{text}");
    }
    // The lists did print ids: the check above had something to check.
    assert!(seen.contains(&sandbox_id), "{seen:?}");
    assert!(seen.iter().any(|id| id.starts_with("op-")), "{seen:?}");

    // A saved gateway's token stays out of the output too.
    let config = gw.store.dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let config = config.to_str().unwrap().to_owned();
    saved(&config, &["gateway", "add", "lab", &gw.endpoint()], None)
        .await
        .ok();
    saved(
        &config,
        &["gateway", "login", "lab"],
        Some(&format!("{TOKEN}\n")),
    )
    .await
    .ok();
    let (code, raw) = tokio::task::spawn_blocking(move || {
        run_on_terminal(
            None,
            &["sandbox", "list", "-o", "wide"],
            &[("XDG_CONFIG_HOME", &config)],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{raw}");
    assert!(raw.contains(&sandbox_id), "{raw}");
    assert!(!raw.contains(TOKEN), "{raw}");
}

/// Runs `openshell` with only the saved gateways of `config` to go by.
async fn saved(config: &str, args: &[&str], stdin: Option<&str>) -> Run {
    use tokio::io::AsyncWriteExt;

    let mut cmd = tokio::process::Command::new(binary("openshell"));
    cmd.args(args)
        .env("XDG_CONFIG_HOME", config)
        .env_remove("OPENSHELL_GATEWAY")
        .env_remove("OPENSHELL_TOKEN")
        .env_remove("OPENSHELL_CA_CERT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .await
        .unwrap();
    drop(input);
    let out = child.wait_with_output().await.unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_adds_ids_no_headers_drops_the_header_and_lists_fit_100_columns() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (sandbox_id, _credential, _supervisor) = supervised(&gw, &mut api, "web").await;
    let hash = api
        .clone()
        .get_sandbox(pb::GetSandboxRequest {
            name: sandbox_id.to_string(),
            workspace_scope: None,
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap()
        .applied_policy_hash;
    assert_eq!(hash.len(), 64, "{hash:?}");
    let ops = run(&gw, &["operations", "list", "-o", "json"], &[])
        .await
        .json();
    let op_id = ops[0]["id"].as_str().unwrap().to_owned();

    for list in [
        &["sandbox", "list"][..],
        &["operations", "list"],
        &["sessions", "list"],
    ] {
        // Piped: a stable layout with its header.
        let plain = run(&gw, list, &[]).await.ok();
        let header = plain.lines().next().unwrap();
        assert!(header.split_whitespace().any(|h| h == "AGE"), "{plain}");
        // Typical data fits 100 columns.
        for line in plain.lines() {
            assert!(line.width() <= 100, "{list:?}: {line:?}\n{plain}");
        }
        let bare = run(&gw, &[list, &["--no-headers"]].concat(), &[])
            .await
            .ok();
        assert_eq!(bare.lines().count(), plain.lines().count() - 1, "{bare}");
        assert!(!bare.contains("AGE"), "{bare}");
    }

    // The default sandbox list shows names and revisions; wide adds the id and applied hash.
    let plain = run(&gw, &["sandbox", "list"], &[]).await.ok();
    assert!(!plain.contains(&sandbox_id), "{plain}");
    let wide = run(&gw, &["sandbox", "list", "-o", "wide"], &[]).await.ok();
    assert!(wide.contains(&sandbox_id), "{wide}");
    assert!(wide.contains(&hash[..12]), "{wide}");
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    for column in ["NAME", "ID", "DESIRED", "APPLIED", "AGE", "CREATED"] {
        assert!(header.contains(&column), "{column}: {wide}");
    }
    let sessions = run(&gw, &["sessions", "list", "-o", "wide"], &[])
        .await
        .ok();
    assert!(sessions.contains(&sandbox_id), "{sessions}");
    assert!(sessions.contains("ss-"), "{sessions}");
    let history = run(&gw, &["policy", "history", "web"], &[]).await.ok();
    assert!(
        history.contains(&hash[..12]) && !history.contains(&hash),
        "{history}"
    );
    let history = run(&gw, &["policy", "history", "web", "-o", "wide"], &[])
        .await
        .ok();
    assert!(history.contains(&hash), "{history}");
    let ops = run(&gw, &["operations", "list"], &[]).await.ok();
    assert!(ops.contains(&op_id), "{ops}");
    // The target by name; -o wide adds its id.
    assert!(ops.lines().nth(1).unwrap().contains("  web  "), "{ops}");
    assert!(!ops.contains(&sandbox_id), "{ops}");
}

/// The `sandbox list --no-headers` row of `name`, split into its columns.
fn list_row(text: &str, name: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no row for {name}:\n{text}"))
}

/// The value of one key/value line of a `get` table.
fn kv<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .filter(|rest| rest.starts_with("  "))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no {key:?} line:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desired_and_applied_revisions_part_while_the_supervisor_is_away() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential, supervisor) = supervised(&gw, &mut api, "web").await;

    let shown = run(&gw, &["sandbox", "get", "web"], &[]).await.ok();
    assert_eq!(kv(&shown, "desired policy revision"), "1", "{shown}");
    assert!(
        kv(&shown, "applied policy revision").starts_with("1 (hash "),
        "{shown}"
    );
    let policy = run(&gw, &["policy", "get", "web"], &[]).await.ok();
    assert_eq!(kv(&policy, "revision"), "1 (applied)", "{policy}");

    // Stopped supervisor, new policy: desired moves on, applied stays.
    let state_dir = supervisor.kill();
    let dir = gw.store.dir.path().join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let extra = dir.join("extra.yaml");
    std::fs::write(&extra, policy_with_extra("npm")).unwrap();
    run(
        &gw,
        &["policy", "set", "web", "-f", extra.to_str().unwrap()],
        &[],
    )
    .await
    .ok();

    let json = run(&gw, &["sandbox", "get", "web", "-o", "json"], &[])
        .await
        .json();
    assert_eq!(json["policy_revision"], 2, "{json}");
    assert_eq!(json["applied_policy_revision"], 1, "{json}");
    assert_eq!(json["applied_policy_hash"].as_str().unwrap().len(), 64);
    let shown = run(&gw, &["sandbox", "get", "web"], &[]).await.ok();
    assert_eq!(kv(&shown, "desired policy revision"), "2", "{shown}");
    assert!(
        kv(&shown, "applied policy revision").starts_with("1 (hash "),
        "{shown}"
    );
    let list = run(&gw, &["sandbox", "list", "--no-headers"], &[])
        .await
        .ok();
    // NAME WORKSPACE LIFECYCLE DESIRED APPLIED PROVIDERS AGE
    let row = list_row(&list, "web");
    assert_eq!((row[3].as_str(), row[4].as_str()), ("2", "1"), "{list}");
    // A sandbox no supervisor ever reported for has applied nothing.
    create_sandbox(&mut api, "idle", POLICY).await;
    let list = run(&gw, &["sandbox", "list", "--no-headers"], &[])
        .await
        .ok();
    let row = list_row(&list, "idle");
    assert_eq!((row[3].as_str(), row[4].as_str()), ("1", "-"), "{list}");
    let policy = run(&gw, &["policy", "get", "web"], &[]).await.ok();
    assert_eq!(
        kv(&policy, "revision"),
        "2 (applied: 1, pending)",
        "{policy}"
    );

    // The supervisor comes back and applies revision 2.
    let supervisor_dir = state_dir.parent().unwrap().to_owned();
    let _supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &supervisor_dir, &[]);
    eventually("the supervisor to apply revision 2", DEADLINE, || async {
        (applied_revision(&api, &id).await == 2).then_some(())
    })
    .await;
    let list = run(&gw, &["sandbox", "list", "--no-headers"], &[])
        .await
        .ok();
    let row = list_row(&list, "web");
    assert_eq!((row[3].as_str(), row[4].as_str()), ("2", "2"), "{list}");
    let shown = run(&gw, &["sandbox", "get", "web"], &[]).await.ok();
    assert!(
        kv(&shown, "applied policy revision").starts_with("2 (hash "),
        "{shown}"
    );
    let policy = run(&gw, &["policy", "get", "web"], &[]).await.ok();
    assert_eq!(kv(&policy, "revision"), "2 (applied)", "{policy}");
    let sessions = run(&gw, &["sessions", "list", "-o", "json"], &[])
        .await
        .json();
    assert_eq!(sessions[0]["policy_revision"], 2, "{sessions}");
    assert_eq!(sessions[0]["applied_policy_revision"], 2, "{sessions}");
}
