//! Standalone mode: no gateway. The policy file is the whole configuration; edits to it are
//! applied and signalled like live changes, and an invalid edit keeps the last-known-good.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::applier::Applier;
use crate::apply::FileApplier;
use crate::error::SupervisorError;
use crate::local_policy::{LocalPolicy, LocalPolicyError, PolicyFileWatcher, WatchEvent};
use crate::signals::Signals;
use crate::workload::{Launch, Workload, supervise};

/// Sandbox id used for `OPENSHELL_SANDBOX_ID` when none is given.
pub const STANDALONE_SANDBOX_ID: &str = "standalone";

pub struct StandaloneOptions {
    pub policy_file: PathBuf,
    pub sandbox_id: String,
    pub watch_interval: Duration,
    pub command: Vec<String>,
    pub launch: Launch,
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

    let workload =
        Workload::spawn(&options.command, &[], &applier.state_env(), &options.launch).await?;
    let reload = applier.subscribe();
    let watch = tokio::spawn(watch_file(
        watcher,
        applier.clone(),
        options.sandbox_id.clone(),
        options.watch_interval,
    ));
    let code = supervise(workload, reload, signals, std::future::pending()).await;
    watch.abort();
    Ok(code)
}

async fn watch_file(
    mut watcher: PolicyFileWatcher,
    applier: Arc<FileApplier>,
    sandbox_id: String,
    every: Duration,
) {
    let mut unreadable = false;
    loop {
        tokio::time::sleep(every).await;
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
                match applier.apply(&desired).await {
                    Ok(_) => info!(policy_hash = %policy.hash(), "policy file changed; applied"),
                    Err(err) => {
                        warn!(reason = %err, "policy file changed but did not apply; keeping the last-known-good policy")
                    }
                }
            }
            WatchEvent::Changed(Err(err)) => log_invalid(&err),
        }
        unreadable = false;
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
