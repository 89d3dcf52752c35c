//! Running the real `openshell` binary in tests, never on a terminal.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::TOKEN;
use crate::process::binary;

/// One finished CLI run.
#[derive(Debug)]
pub struct CliRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    /// Asserts the exit code, showing both streams when it differs.
    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", self.stdout, self.stderr))
    }
}

/// Runs `openshell ARGS` against `gateway` with the test operator token,
/// feeding `stdin` when given.
pub async fn openshell(gateway: &str, args: &[&str], stdin: Option<&str>) -> CliRun {
    let mut child = tokio::process::Command::new(binary("openshell"))
        .args(args)
        .env("OPENSHELL_GATEWAY", gateway)
        .env("OPENSHELL_TOKEN", TOKEN)
        .env_remove("OPENSHELL_CA_CERT")
        .env_remove("OPENSHELL_GATEWAY_ENDPOINT")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).await.unwrap();
    }
    let output = child.wait_with_output().await.unwrap();
    CliRun {
        // A run killed by a signal has no code; -1 fails every code assertion.
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}
