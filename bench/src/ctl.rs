//! The control channel between the coordinator and its child processes (the gateway and the
//! supervisor swarm): one JSON object per line, commands on the child's stdin, replies on its
//! stdout. Every command gets exactly one reply, in order. The child's stderr (its logs) goes
//! to a file in the output directory.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A child process of the harness (the bench binary re-executed with a hidden subcommand).
pub struct ChildProc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl ChildProc {
    /// Starts `exe args…`; its logs are appended to `log_path`.
    pub fn spawn(name: &str, exe: &Path, args: &[String], log_path: &Path) -> Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .with_context(|| format!("cannot open log file {}", log_path.display()))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start the {name} process ({})", exe.display()))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("{name}: no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("{name}: no stdout"))?;
        Ok(Self {
            name: name.to_string(),
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout).lines(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the process has exited (reaping it if so).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub async fn send<C: Serialize>(&mut self, command: &C) -> Result<()> {
        let mut line = serde_json::to_string(command)?;
        line.push('\n');
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("{}: stdin already closed", self.name))?;
        stdin
            .write_all(line.as_bytes())
            .await
            .with_context(|| format!("{} process is gone", self.name))?;
        stdin.flush().await?;
        Ok(())
    }

    /// The next reply, waiting at most `timeout`.
    pub async fn recv<R: DeserializeOwned>(&mut self, timeout: Duration) -> Result<R> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // `next_line` is cancellation safe, so a timeout loses no reply.
            let line = tokio::time::timeout_at(deadline, self.stdout.next_line())
                .await
                .map_err(|_| anyhow!("{}: no reply within {timeout:?}", self.name))?
                .with_context(|| format!("{}: cannot read its output", self.name))?;
            let Some(line) = line else {
                bail!(
                    "{} process ended unexpectedly (see its log in the output directory)",
                    self.name
                );
            };
            // A profiler wrapping the child may print its own lines; replies are JSON objects.
            if !line.starts_with('{') {
                continue;
            }
            return serde_json::from_str(&line)
                .with_context(|| format!("{}: unreadable reply {line:?}", self.name));
        }
    }

    pub async fn call<C: Serialize, R: DeserializeOwned>(
        &mut self,
        command: &C,
        timeout: Duration,
    ) -> Result<R> {
        self.send(command).await?;
        self.recv(timeout).await
    }

    /// Closes stdin (the child treats that as "exit") and waits; kills it after `timeout`.
    pub async fn finish(mut self, timeout: Duration) -> Result<()> {
        drop(self.stdin.take());
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                self.child.kill().await.ok();
            }
        }
        Ok(())
    }
}

/// The child side: reads commands from stdin, writes replies to stdout.
pub struct ChildIo {
    stdin: Lines<BufReader<tokio::io::Stdin>>,
    stdout: tokio::io::Stdout,
}

impl Default for ChildIo {
    fn default() -> Self {
        Self::new()
    }
}

impl ChildIo {
    pub fn new() -> Self {
        Self {
            stdin: BufReader::new(tokio::io::stdin()).lines(),
            stdout: tokio::io::stdout(),
        }
    }

    /// The next command; `None` when the coordinator closed stdin (or went away); an error
    /// only for a line that is not a command.
    pub async fn next<C: DeserializeOwned>(&mut self) -> Result<Option<C>> {
        loop {
            // A read error means the coordinator is gone: same as end of input.
            let Ok(Some(line)) = self.stdin.next_line().await else {
                return Ok(None);
            };
            if line.trim().is_empty() {
                continue;
            }
            return serde_json::from_str(&line)
                .map(Some)
                .with_context(|| format!("unreadable command {line:?}"));
        }
    }

    pub async fn reply<R: Serialize>(&mut self, reply: &R) -> Result<()> {
        let mut line = serde_json::to_string(reply)?;
        line.push('\n');
        self.stdout.write_all(line.as_bytes()).await?;
        self.stdout.flush().await?;
        Ok(())
    }
}

/// Installs a stderr logger for a child process (`RUST_LOG` wins over `default`).
pub fn init_child_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(default))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}
