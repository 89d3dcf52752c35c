//! The `--on-apply` hook: an operator command that checks or loads a freshly written
//! configuration, and whose failure rolls the activation back.
//!
//! It runs bounded in time, in its own process group so a timeout also ends whatever it
//! started, and only the tail of its stderr is kept for the failure reason.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::sanitize::tail_bytes;

/// Default bound on one hook run.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// Most stderr bytes carried into a failure reason.
pub const STDERR_TAIL_BYTES: usize = 512;
/// Most stderr bytes held in memory while the hook runs.
const STDERR_BUFFER_BYTES: usize = 8 * 1024;
/// How long to wait for stderr to close after the hook exited (a child it left behind may
/// keep the pipe open).
const STDERR_GRACE: Duration = Duration::from_secs(1);

/// Why the hook did not succeed. The stderr tail is raw: the caller sanitizes it.
#[derive(Debug, thiserror::Error)]
pub enum HookFailure {
    #[error("on-apply hook exited with status {code}{}", stderr_suffix(.stderr))]
    Exited { code: i32, stderr: String },
    #[error("on-apply hook was killed by signal {signal}{}", stderr_suffix(.stderr))]
    Killed { signal: i32, stderr: String },
    #[error("on-apply hook timed out after {}", humantime::format_duration(*.timeout))]
    TimedOut { timeout: Duration },
    #[error("on-apply hook could not be started: {0}")]
    Spawn(std::io::Error),
}

fn stderr_suffix(stderr: &str) -> String {
    let stderr = stderr.trim();
    let tail = tail_bytes(stderr, STDERR_TAIL_BYTES);
    // A tail cut out of longer output starts where a line starts: a cut inside a line may
    // fall inside a value the hook printed, and the rest of that value would not be
    // recognised to be masked. Whole values and whole lines of values are.
    let tail = if tail.len() < stderr.len() {
        match tail.split_once('\n') {
            Some((_, whole_lines)) => whole_lines.trim(),
            None => {
                return format!(
                    ": (its last line of stderr is longer than {STDERR_TAIL_BYTES} bytes; not shown)"
                );
            }
        }
    } else {
        tail
    };
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    }
}

/// Runs `command` with `sh -c` and the given environment added, within `timeout`.
pub async fn run_hook(
    command: &str,
    env: &[(&str, String)],
    timeout: Duration,
) -> Result<(), HookFailure> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let mut child = cmd.spawn().map_err(HookFailure::Spawn)?;
    let pid = child.id();
    let mut stderr = child.stderr.take();
    let reader = tokio::spawn(async move {
        let mut kept = Vec::new();
        if let Some(stderr) = stderr.as_mut() {
            let mut chunk = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&chunk[..n]);
                if kept.len() > STDERR_BUFFER_BYTES {
                    kept.drain(..kept.len() - STDERR_BUFFER_BYTES);
                }
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    });
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => status,
        Ok(Err(err)) => return Err(HookFailure::Spawn(err)),
        Err(_) => {
            kill_group(pid);
            let _ = child.kill().await;
            reader.abort();
            return Err(HookFailure::TimedOut { timeout });
        }
    };
    // Whatever the hook left running in its group must not outlive it.
    kill_group(pid);
    let stderr = match tokio::time::timeout(STDERR_GRACE, reader).await {
        Ok(Ok(text)) => text,
        _ => String::new(),
    };
    if status.success() {
        return Ok(());
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => Err(HookFailure::Exited { code, stderr }),
        (None, Some(signal)) => Err(HookFailure::Killed { signal, stderr }),
        (None, None) => Err(HookFailure::Exited { code: -1, stderr }),
    }
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // The group may already be gone; that is the common, fine case.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn success_and_env() {
        run_hook(
            "test \"$OPENSHELL_SANDBOX_ID\" = sb-9",
            &[("OPENSHELL_SANDBOX_ID", "sb-9".to_string())],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn non_zero_exit_reports_status_and_stderr_tail() {
        let long = "x".repeat(2000);
        let err = run_hook(
            &format!("echo {long} >&2; echo last words >&2; exit 3"),
            &[],
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("on-apply hook exited with status 3: "),
            "{text}"
        );
        assert!(text.ends_with("last words"), "{text}");
        assert!(text.len() <= "on-apply hook exited with status 3: ".len() + STDERR_TAIL_BYTES);
    }

    /// Defect class of the workload's logs: a tail cut inside a long value the hook printed
    /// kept the value's end in clear, and masking, which looks for whole values, missed it.
    #[tokio::test]
    async fn a_tail_never_starts_inside_a_line() {
        let value: String = (0..1000)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        for script in [
            format!("echo {value} >&2; exit 1"),
            format!("echo {value} >&2; echo last words >&2; exit 1"),
        ] {
            let text = run_hook(&script, &[], Duration::from_secs(10))
                .await
                .unwrap_err()
                .to_string();
            let fragments: Vec<&str> = (0..value.len() - 16).map(|i| &value[i..i + 16]).collect();
            assert!(
                !fragments.iter().any(|f| text.contains(f)),
                "part of the value is shown: {text}"
            );
            assert!(
                text.starts_with("on-apply hook exited with status 1: "),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn timeout_kills_the_hook() {
        let started = std::time::Instant::now();
        let err = run_hook("sleep 30", &[], Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(err, HookFailure::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
