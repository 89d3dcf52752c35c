//! Activate: write the staged files, let the on-apply hook accept or refuse them, and roll back
//! to the last-known-good files when it refuses.

use std::path::Path;
use std::time::Duration;

use tracing::{error, warn};

use super::hook::run_hook;
use super::stage::{QUARANTINE_FILE, Staged, quarantine_document};
use super::state_dir::{StateDir, atomic_write, remove_durably, replace_all};
use crate::applier::{ApplyError, ApplyStage};
use crate::desired::DesiredConfig;

/// Environment the hook (and the workload) use to find the active configuration.
pub const ENV_STATE_DIR: &str = "OPENSHELL_STATE_DIR";
pub const ENV_POLICY_FILE: &str = "OPENSHELL_POLICY_FILE";
pub const ENV_SANDBOX_ID: &str = "OPENSHELL_SANDBOX_ID";

/// The hook to run after the files are written.
pub struct Hook<'a> {
    pub command: &'a str,
    pub timeout: Duration,
    pub env: Vec<(&'static str, String)>,
}

/// Writes `staged` into the active directory and runs the hook. On a hook failure the previous
/// files are restored before the error is returned, so the last-known-good stays active.
pub async fn activate(
    dir: &StateDir,
    staged: Staged,
    hook: Option<Hook<'_>>,
    desired: &DesiredConfig,
) -> Result<(), ApplyError> {
    let active = dir.active_dir();
    let files = staged.files;
    let previous = blocking(move || replace_all(&active, &files))
        .await
        .map_err(|err| {
            ApplyError::new(
                ApplyStage::Activate,
                &format!("writing the active configuration failed: {err}"),
                desired,
            )
        })?;
    let Some(hook) = hook else {
        return Ok(());
    };
    let Err(failure) = run_hook(hook.command, &hook.env, hook.timeout).await else {
        return Ok(());
    };
    let mut reason = failure.to_string();
    match blocking(move || previous.restore()).await {
        Ok(()) => {}
        Err(err) => {
            error!(error = %err, "restoring the last-known-good configuration failed");
            reason.push_str("; restoring the previous configuration failed too");
        }
    }
    Err(ApplyError::new(ApplyStage::Hook, &reason, desired))
}

/// Writes the deny-all quarantine marker. Returns false when it could not be written, in
/// which case the sandbox is not quarantined and must not be reported as such.
pub async fn quarantine(dir: &StateDir, desired: &DesiredConfig, reason: &str) -> bool {
    let path = dir.active_file(QUARANTINE_FILE);
    let bytes = quarantine_document(desired, reason);
    match blocking(move || atomic_write(&path, &bytes, super::stage::PUBLIC_MODE)).await {
        Ok(()) => true,
        Err(err) => {
            error!(error = %err, "writing the quarantine marker failed; the sandbox is NOT quarantined");
            false
        }
    }
}

/// Lifts a quarantine after a configuration applied.
pub async fn lift_quarantine(dir: &StateDir) {
    let path = dir.active_file(QUARANTINE_FILE);
    if !path.exists() {
        return;
    }
    if let Err(err) = blocking(move || remove_durably(&path)).await {
        warn!(error = %err, "removing the quarantine marker failed");
    }
}

/// Environment naming the state directory, for the hook and the workload.
pub fn state_env(
    dir: &StateDir,
    policy_file: &Path,
    sandbox_id: &str,
) -> Vec<(&'static str, String)> {
    vec![
        (ENV_STATE_DIR, dir.root().display().to_string()),
        (ENV_POLICY_FILE, policy_file.display().to_string()),
        (ENV_SANDBOX_ID, sandbox_id.to_string()),
    ]
}

/// Runs blocking file I/O off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())))
}
