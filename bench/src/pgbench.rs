//! PostgreSQL's own `pgbench` on the server the gateway's PostgreSQL store uses, in the
//! same run: how many small write transactions that server commits on this machine at
//! that hour, so the gateway's commit rate can be read against the database's own.
//!
//! The script is pgbench's built-in `simple-update` (`-N`): BEGIN, an UPDATE of one
//! account, a SELECT of it, an INSERT into the history table, END; five statements and
//! one commit per transaction, as a gateway write alone (BEGIN, lock, change, operation,
//! COMMIT). It runs on a fresh database at scale 1.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct PgbenchRun {
    pub version: String,
    pub script: &'static str,
    pub clients: usize,
    pub seconds: u64,
    /// Transactions per second with `clients` connections.
    pub tps: f64,
    /// The same with one connection.
    pub serial_tps: f64,
}

/// `pgbench` on `PATH` (Debian's PostgreSQL server package puts a wrapper there).
pub fn find() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("pgbench"))
            .find(|candidate| candidate.is_file())
    })
}

/// Initializes `database_url` (scale 1), then runs the simple-update script with
/// `clients` connections and with one, each for `duration` (whole seconds, at least 1).
pub async fn run(
    exe: &Path,
    database_url: &str,
    clients: usize,
    duration: Duration,
) -> Result<PgbenchRun> {
    let seconds = duration.as_secs().max(1);
    pgbench(exe, &["--initialize", "--scale=1", "--quiet", database_url]).await?;
    let timed = |connections: usize| {
        let threads = connections.min(2);
        [
            "--no-vacuum".to_string(),
            "--builtin=simple-update".to_string(),
            format!("--client={connections}"),
            format!("--jobs={threads}"),
            format!("--time={seconds}"),
            database_url.to_string(),
        ]
    };
    let many = timed(clients);
    let tps = tps_of(&pgbench(exe, &many.each_ref().map(String::as_str)).await?)?;
    let one = timed(1);
    let serial_tps = tps_of(&pgbench(exe, &one.each_ref().map(String::as_str)).await?)?;
    let version = pgbench(exe, &["--version"]).await?.trim().to_string();
    Ok(PgbenchRun {
        version,
        script: "simple-update (-N)",
        clients,
        seconds,
        tps,
        serial_tps,
    })
}

async fn pgbench(exe: &Path, args: &[&str]) -> Result<String> {
    let output = tokio::process::Command::new(exe)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("cannot run {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        // The URL carries the admin password: name the step, not the arguments.
        bail!(
            "pgbench {} failed ({}): {}",
            args.first().copied().unwrap_or_default(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(stdout)
}

/// The rate of a pgbench report: its `tps = N (without initial connection time)` line.
fn tps_of(report: &str) -> Result<f64> {
    report
        .lines()
        .find_map(|line| {
            let rest = line.trim().strip_prefix("tps = ")?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .with_context(|| format!("no `tps = ` line in pgbench's report: {report}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_from_the_report_and_a_report_without_one_is_an_error() {
        let report = "transaction type: <builtin: simple update>\n\
                      number of clients: 16\n\
                      latency average = 9.829 ms\n\
                      initial connection time = 41.190 ms\n\
                      tps = 1627.809535 (without initial connection time)\n";
        assert_eq!(tps_of(report).unwrap(), 1627.809535);
        let err = tps_of("latency average = 1 ms\n").unwrap_err().to_string();
        assert!(err.contains("tps = "), "{err}");
    }
}
