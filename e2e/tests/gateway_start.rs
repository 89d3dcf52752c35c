//! A gateway that cannot start says why, on one line, and exits non-zero: operator tokens
//! it refuses, and a store it cannot open. Each test runs the real `openshell-gateway`
//! binary and fails without its fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::process::{binary, free_port};

/// Only a bound for a gateway that would not exit at all: the checks are on the message.
const EXIT_DEADLINE: Duration = Duration::from_secs(60);

/// Runs the gateway to its exit and returns its exit code and stderr.
async fn run_gateway(data_dir: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = vec![
        "--listen",
        listen.as_str(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--metrics-listen",
        "off",
    ];
    args.extend_from_slice(extra);
    let child = tokio::process::Command::new(binary("openshell-gateway"))
        .args(&args)
        // An expected failure prints no backtrace, even when one is asked for.
        .env("RUST_BACKTRACE", "1")
        .env_remove("OPENSHELL_OPERATOR_TOKENS")
        .env_remove("OPENSHELL_DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(EXIT_DEADLINE, child.wait_with_output())
        .await
        .expect("the gateway did not exit")
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The whole of stderr is the one error line: no log lines before it, no backtrace after.
fn only_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr:\n{stderr}");
    assert!(!stderr.contains("backtrace"), "stderr:\n{stderr}");
    lines[0]
}

/// Probe: duplicate names, one secret under two names (the caller recorded as the last),
/// a name with a space and a 1-character secret were all accepted, and the gateway served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_tokens_it_refuses_stop_the_gateway_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "first-secret-0123456789";
    let config = dir.path().join("gateway.toml");
    for (file, expected) in [
        (
            format!(
                "[[operator_tokens]]\nname = \"ci\"\ntoken = \"{secret}\"\n\n\
                 [[operator_tokens]]\nname = \"ci\"\ntoken = \"second-secret-0123456789\"\n"
            ),
            "error: invalid gateway configuration: operator_tokens[1] (\"ci\"): the name is \
             already taken by operator_tokens[0] (\"ci\"): give each token a name of its own",
        ),
        (
            format!(
                "[[operator_tokens]]\nname = \"ci\"\ntoken = \"{secret}\"\n\n\
                 [[operator_tokens]]\nname = \"dashboard\"\ntoken = \"{secret}\"\n"
            ),
            "error: invalid gateway configuration: operator_tokens[1] (\"dashboard\"): the same \
             token as operator_tokens[0] (\"ci\"): each name needs a token of its own, or calls \
             with it are recorded under only one of the names",
        ),
        (
            format!("[[operator_tokens]]\nname = \"ci bot\"\ntoken = \"{secret}\"\n"),
            "error: invalid gateway configuration: operator_tokens[0] (\"ci bot\"): name may \
             contain only lowercase letters, digits and '-', found ' '",
        ),
        (
            "[[operator_tokens]]\nname = \"ci\"\ntoken = \"x\"\n".to_string(),
            "error: invalid gateway configuration: operator_tokens[0] (\"ci\"): the token is \
             shorter than 16 characters",
        ),
    ] {
        std::fs::write(&config, &file).unwrap();
        let (code, stderr) = run_gateway(
            &dir.path().join("data"),
            &["--config", config.to_str().unwrap()],
        )
        .await;
        assert_eq!(code, Some(1), "{file}\nstderr:\n{stderr}");
        assert_eq!(only_line(&stderr), expected, "{file}");
        assert!(!stderr.contains(secret), "{stderr}");
    }
    // From the flag, entries are named by their place.
    let (code, stderr) =
        run_gateway(&dir.path().join("data"), &["--operator-token", "ci=short"]).await;
    assert_eq!(code, Some(1), "stderr:\n{stderr}");
    assert_eq!(
        only_line(&stderr),
        "error: invalid gateway configuration: operator token 1 of \
         --operator-token/OPENSHELL_OPERATOR_TOKENS: the token is shorter than 16 characters"
    );
}

/// Probe: a data dir the gateway could not write gave "pool timed out while waiting for an
/// open connection" and a backtrace after 10 s; the cause ("unable to open database file")
/// was only in ERROR log lines. The gateway now exits at once with the cause and the path.
///
/// Tests run as root, which a read-only directory does not stop, so the store is made
/// unopenable in a way that stops root too: SQLite's WAL index (`gateway.db-shm`, which
/// SQLite opens without following links) is a dangling symlink. The database file opens and
/// its WAL index cannot be created: the very failure a read-only directory gives a gateway
/// not running as root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_whose_wal_index_cannot_be_created_stops_the_gateway_with_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("no-such-directory/shm"),
        data.join("gateway.db-shm"),
    )
    .unwrap();
    let token = format!("ci={}", openshell_e2e::TOKEN);
    let (code, stderr) = run_gateway(&data, &["--operator-token", &token]).await;
    assert_eq!(code, Some(1), "stderr:\n{stderr}");
    let line = only_line(&stderr);
    assert!(
        line.starts_with(&format!(
            "error: cannot open the store: SQLite database {}: ",
            data.join("gateway.db").display()
        )),
        "{line}"
    );
    assert!(line.contains("unable to open database file"), "{line}");
    assert!(line.contains("`-wal` and `-shm`"), "{line}");
    assert!(!line.contains("pool timed out"), "{line}");
}

/// A data directory that cannot be created (its parent is a regular file, which stops root
/// too) is named as such, with the system's reason; it was reported as a TLS file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_that_cannot_be_created_stops_the_gateway_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let under_a_file = file.join("data");
    let token = format!("ci={}", openshell_e2e::TOKEN);
    let (code, stderr) = run_gateway(&under_a_file, &["--operator-token", &token]).await;
    assert_eq!(code, Some(1), "stderr:\n{stderr}");
    assert_eq!(
        only_line(&stderr),
        format!(
            "error: cannot create the data directory {}: Not a directory (os error 20)",
            under_a_file.display()
        )
    );
}

/// A log written to a file carries no colour codes: a file is not a terminal, and escape
/// sequences in it break `grep` and log shippers alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_to_a_file_carries_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("gateway.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let token = format!("admin={}", openshell_e2e::TOKEN);
    let data_dir = dir.path().join("data");
    let _gateway = tokio::process::Command::new(binary("openshell-gateway"))
        .args([
            "--listen",
            listen.as_str(),
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--metrics-listen",
            "off",
            "--operator-token",
            token.as_str(),
        ])
        // Colour must stay out because stderr is a file, not because the caller asked.
        .env_remove("NO_COLOR")
        .env_remove("OPENSHELL_OPERATOR_TOKENS")
        .env_remove("OPENSHELL_DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let text =
        openshell_e2e::eventually("the gateway to log that it listens", EXIT_DEADLINE, || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            async move { text.contains("gateway listening").then_some(text) }
        })
        .await;
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in the log: {text:?}"
    );
}
