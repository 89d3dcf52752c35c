//! Standalone mode: no gateway. The policy file is the whole configuration; edits to it are
//! applied and signalled like live changes, and an invalid edit keeps the last-known-good. An
//! edit whose apply failed for a reason that can pass (a full disk) is retried with backoff,
//! since the file will not change again to prompt it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{info, warn};

use crate::applier::Applier;
use crate::backoff::{Backoff, BackoffConfig};
use crate::desired::DesiredConfig;
use crate::error::SupervisorError;
use crate::file_applier::FileApplier;
use crate::local_policy::{LocalPolicy, LocalPolicyError, PolicyFileWatcher, WatchEvent};
use crate::middleware::{
    MiddlewareRegistry, ReadinessConfig, TcpProbe, await_startable, log_readiness, required_by,
};
use crate::signals::{Signals, signal_exit_code};
use crate::workload::{Launch, Workload, supervise};

/// Sandbox id used for `OPENSHELL_SANDBOX_ID` when none is given.
pub const STANDALONE_SANDBOX_ID: &str = "standalone";

pub struct StandaloneOptions {
    pub policy_file: PathBuf,
    pub sandbox_id: String,
    pub watch_interval: Duration,
    pub command: Vec<String>,
    pub launch: Launch,
    /// Delays between attempts to apply an edit that failed for a reason that can pass.
    pub apply_retry_backoff: BackoffConfig,
    /// Remote middleware the policy may name, checked before the workload starts.
    pub middlewares: MiddlewareRegistry,
    pub readiness: ReadinessConfig,
}

/// Applies the policy file, runs the workload and reloads the file on change. Returns the
/// workload's exit code.
pub async fn run(
    options: StandaloneOptions,
    applier: Arc<FileApplier>,
    signals: &mut Signals,
) -> Result<i32, SupervisorError> {
    let mut watcher = PolicyFileWatcher::new(&options.policy_file);
    let initial = match watcher.check() {
        WatchEvent::Changed(result) => result?,
        WatchEvent::Unreadable(err) => return Err(err.into()),
        // A first check always reads the file.
        WatchEvent::Unchanged => LocalPolicy::load(&options.policy_file)?,
    };
    let desired = initial.standalone_config(&options.sandbox_id);
    applier
        .apply(&desired)
        .await
        .map_err(SupervisorError::InitialApply)?;
    info!(policy_hash = %initial.hash(), file = %options.policy_file.display(), "standalone policy applied");

    // Without a gateway the log is the only report; the check itself is the same.
    let required = required_by(&desired, &options.middlewares);
    tokio::select! {
        _ = await_startable(|| required.clone(), &TcpProbe, &options.readiness, log_readiness) => {}
        signal = signals.recv() => {
            info!(signal = %signal, "stopped before the workload started");
            return Ok(signal_exit_code(signal));
        }
    }

    let workload = Workload::spawn(
        &options.command,
        &[],
        &applier.state_env(),
        &options.launch,
        None,
    )
    .await?;
    let reload = applier.subscribe();
    let (stopping_tx, stopping) = watch::channel(false);
    let watch = tokio::spawn(watch_file(
        watcher,
        applier.clone(),
        options.sandbox_id.clone(),
        options.watch_interval,
        options.apply_retry_backoff,
        stopping,
    ));
    let code = supervise(
        workload,
        reload,
        signals,
        std::future::pending(),
        move || {
            stopping_tx.send_replace(true);
        },
    )
    .await;
    watch.abort();
    Ok(code)
}

async fn watch_file(
    mut watcher: PolicyFileWatcher,
    applier: Arc<FileApplier>,
    sandbox_id: String,
    every: Duration,
    retry_backoff: BackoffConfig,
    mut stopping: watch::Receiver<bool>,
) {
    let mut checks = tokio::time::interval_at(Instant::now() + every, every);
    checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut unreadable = false;
    let mut pending: Option<Pending> = None;
    loop {
        let retry_due = pending.as_ref().map(|p| p.due);
        let retry = async move {
            match retry_due {
                Some(due) => tokio::time::sleep_until(due).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // The workload is being stopped: an edit from now on is not applied (one being
            // applied when it began finished first).
            Ok(()) = async { stopping.wait_for(|stop| *stop).await.map(|_| ()) } => {
                info!("shutting down: edits of the policy file are no longer applied");
                return;
            }
            _ = checks.tick() => {}
            () = retry => {
                if let Some(retry) = pending.take() {
                    pending = apply_edit(
                        &applier,
                        retry.desired,
                        retry.hash,
                        Some(retry.backoff),
                        retry_backoff,
                    )
                    .await;
                }
                continue;
            }
        }
        match watcher.check() {
            WatchEvent::Unchanged => {}
            WatchEvent::Unreadable(err) => {
                if !unreadable {
                    warn!(error = %err, "policy file unreadable; keeping the last-known-good policy");
                }
                unreadable = true;
                continue;
            }
            WatchEvent::Changed(Ok(policy)) => {
                let desired = policy.standalone_config(&sandbox_id);
                // A newer edit replaces one still waiting for its retry.
                pending = apply_edit(
                    &applier,
                    desired,
                    policy.hash().to_string(),
                    None,
                    retry_backoff,
                )
                .await;
            }
            WatchEvent::Changed(Err(err)) => log_invalid(&err),
        }
        unreadable = false;
    }
}

/// An edit waiting to be applied again.
struct Pending {
    desired: DesiredConfig,
    hash: String,
    backoff: Backoff,
    due: Instant,
}

/// Applies an edit of the policy file. Returns it as pending when it failed for a reason
/// that can pass; `backoff` carries the delays of earlier attempts at the same edit.
async fn apply_edit(
    applier: &FileApplier,
    desired: DesiredConfig,
    hash: String,
    backoff: Option<Backoff>,
    config: BackoffConfig,
) -> Option<Pending> {
    match applier.apply(&desired).await {
        Ok(_) => {
            info!(policy_hash = %hash, "policy file changed; applied");
            None
        }
        Err(err) if err.is_transient() => {
            let mut backoff = backoff.unwrap_or_else(|| Backoff::new(config));
            let delay = backoff.next_delay();
            warn!(reason = %err, retry_in = ?delay, "policy file changed but did not apply; keeping the last-known-good policy and trying again");
            Some(Pending {
                desired,
                hash,
                backoff,
                due: Instant::now() + delay,
            })
        }
        Err(err) => {
            warn!(reason = %err, "policy file changed but did not apply; keeping the last-known-good policy");
            None
        }
    }
}

/// Logs each violation on its own line so an operator can fix the file in one pass.
pub fn log_invalid(err: &LocalPolicyError) {
    match err {
        LocalPolicyError::Invalid { path, error } => {
            for violation in error.violations() {
                warn!(file = %path.display(), violation = %violation, "policy file invalid");
            }
            warn!(file = %path.display(), "keeping the last-known-good policy");
        }
        LocalPolicyError::Read { .. } => {
            warn!(error = %err, "keeping the last-known-good policy");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;
    use crate::file_applier::FileApplierConfig;
    use crate::file_applier::state_dir::{WriteFault, WriteStep};

    const EDITED: &str = "version: 1\nnetwork_policies:\n  local:\n    endpoints:\n      - host: api.local.example\n        port: 443\n";

    /// Waits (in paused time) until `cond` holds; panics after an hour of it.
    async fn eventually(what: &str, cond: impl Fn() -> bool) {
        for _ in 0..36_000 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("timed out waiting for: {what}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_edit_that_failed_for_a_reason_that_can_pass_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.yaml");
        std::fs::write(&file, "version: 1\n").unwrap();
        let full = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(AtomicUsize::new(0));
        let mut config = FileApplierConfig::new(dir.path().join("state"), "local");
        let (is_full, counted) = (full.clone(), attempts.clone());
        config.write_fault = Some(WriteFault::new(move |step| {
            if step == WriteStep::CreateGeneration {
                counted.fetch_add(1, Ordering::SeqCst);
                if is_full.load(Ordering::SeqCst) {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ENOSPC));
                }
            }
            Ok(())
        }));
        let applier = Arc::new(FileApplier::new(config).unwrap());
        let mut watcher = PolicyFileWatcher::new(&file);
        let WatchEvent::Changed(Ok(initial)) = watcher.check() else {
            panic!("the first check reads the file");
        };
        applier
            .apply(&initial.standalone_config("local"))
            .await
            .unwrap();

        full.store(true, Ordering::SeqCst);
        std::fs::write(&file, EDITED).unwrap();
        let task = tokio::spawn(watch_file(
            watcher,
            applier.clone(),
            "local".into(),
            Duration::from_secs(1),
            BackoffConfig::apply_retry(),
            watch::channel(false).1,
        ));
        eventually("three failed attempts", || {
            attempts.load(Ordering::SeqCst) >= 4
        })
        .await;
        let policy = applier.state_dir().active_file("policy.json");
        assert!(
            !std::fs::read_to_string(&policy)
                .unwrap()
                .contains("api.local.example")
        );

        // Space is freed; the file does not change again.
        full.store(false, Ordering::SeqCst);
        eventually("the edit to apply", || {
            std::fs::read_to_string(&policy)
                .unwrap()
                .contains("api.local.example")
        })
        .await;
        task.abort();
    }
}
