//! Activate: publish the staged files as a new generation of the state directory, let the
//! on-apply hook accept or refuse it, and switch back to the last-known-good generation when it
//! refuses.

use std::path::Path;
use std::time::Duration;

use tracing::{error, warn};

use super::apply_log::{self, ApplyLogEntry, ApplyLogOutcome};
use super::hook::{HookFailure, run_hook};
use super::stage::{
    POLICY_FILE, PROVIDER_ENV_FILE, QUARANTINE_FILE, REVISIONS_FILE, SANDBOX_CONFIG_FILE,
    SETTINGS_FILE, Staged, StagedFile, quarantine_document,
};
use super::state_dir::StateDir;
use crate::applier::{ApplyError, ApplyErrorKind, ApplyStage};
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

/// Publishes `staged` as the active generation and runs the hook. On a hook failure the
/// previous generation becomes active again before the error is returned, so the
/// last-known-good stays in effect.
pub async fn activate(
    dir: &StateDir,
    staged: Staged,
    hook: Option<Hook<'_>>,
    desired: &DesiredConfig,
) -> Result<(), ApplyError> {
    let files = staged.files;
    let writer = dir.clone();
    let published = blocking(move || {
        writer.finish_unfinished_roll_back()?;
        writer.publish(&files)
    })
    .await
    .map_err(|err| {
        // The content was fine; the disk was not (full, read-only, failing): that can pass.
        ApplyError::new(
            ApplyStage::Activate,
            &format!("writing the active configuration failed: {err}"),
            desired,
        )
        .with_kind(ApplyErrorKind::Transient)
    })?;
    let verdict = match hook {
        Some(hook) => run_hook(hook.command, &hook.env, hook.timeout).await,
        None => Ok(()),
    };
    let verdict = match verdict {
        // Recorded before it is reported, and undone when it cannot be: an active
        // generation always has its entry in the apply log.
        Ok(()) => {
            let entry = ApplyLogEntry::for_desired(
                ApplyLogOutcome::Activated,
                published.generation(),
                desired,
            );
            let root = dir.root().to_path_buf();
            blocking(move || apply_log::append(&root, &entry))
                .await
                .map_err(Refusal::Log)
        }
        Err(failure) => Err(Refusal::Hook(failure)),
    };
    match verdict {
        Ok(()) => {
            let writer = dir.clone();
            if let Err(err) = blocking(move || writer.keep(published)).await {
                // The new generation is active either way; what is left is removed at the
                // next start.
                warn!(error = %err, "removing the previous configuration generation failed");
            }
            Ok(())
        }
        Err(failure) => {
            let (stage, kind) = match &failure {
                Refusal::Hook(hook) => (ApplyStage::Hook, failure_kind(hook)),
                // The disk again, not the content: that can pass.
                Refusal::Log(_) => (ApplyStage::Activate, ApplyErrorKind::Transient),
            };
            let mut reason = failure.to_string();
            let writer = dir.clone();
            if let Err(err) = blocking(move || writer.roll_back(published)).await {
                error!(error = %err, "restoring the last-known-good configuration failed");
                reason.push_str("; restoring the previous configuration failed too");
            }
            Err(ApplyError::new(stage, &reason, desired).with_kind(kind))
        }
    }
}

/// Why a published generation is rolled back.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error(transparent)]
    Hook(HookFailure),
    #[error("recording the activation in the apply log failed: {0}")]
    Log(std::io::Error),
}

/// A hook that answered with a failing exit status refused the configuration. One that
/// could not be started gave no verdict: that can pass. One that did not answer in time, or
/// was killed, counts as refusing: trying again would put the configuration it did not
/// accept in front of the workload once more, for as long as the hook takes each time.
fn failure_kind(failure: &HookFailure) -> ApplyErrorKind {
    match failure {
        HookFailure::Spawn(_) => ApplyErrorKind::Transient,
        HookFailure::Exited { .. } | HookFailure::Killed { .. } | HookFailure::TimedOut { .. } => {
            ApplyErrorKind::Rejected
        }
    }
}

/// Publishes the last-known-good files with the deny-all quarantine marker beside them.
/// Returns false when that failed, in which case the sandbox is not quarantined and must not
/// be reported as such.
///
/// No need to lift it: the next configuration that applies is a generation of its own,
/// without the marker.
pub async fn quarantine(
    dir: &StateDir,
    desired: &DesiredConfig,
    reason: &str,
) -> Result<(), std::io::Error> {
    let marker = quarantine_document(desired, reason);
    let writer = dir.clone();
    let published = blocking(move || {
        writer.finish_unfinished_roll_back()?;
        let mut files = Vec::new();
        let mut revisions = serde_json::Value::Null;
        if let Some(current) = writer.read_active()? {
            if let Some(bytes) = current.file(REVISIONS_FILE) {
                revisions = serde_json::from_slice(bytes).unwrap_or_default();
            }
            for name in [
                POLICY_FILE,
                SETTINGS_FILE,
                PROVIDER_ENV_FILE,
                REVISIONS_FILE,
                SANDBOX_CONFIG_FILE,
            ] {
                if let (Some(bytes), Some(mode)) = (current.file(name), current.mode(name)) {
                    files.push(StagedFile {
                        name,
                        bytes: bytes.to_vec(),
                        mode,
                    });
                }
            }
        }
        files.push(StagedFile {
            name: QUARANTINE_FILE,
            bytes: marker,
            mode: super::stage::PUBLIC_MODE,
        });
        let published = writer.publish(&files)?;
        // Best effort: a quarantine that is not recorded is still better than none, and the
        // next start records the generation it finds (`apply_log::record_recovered`).
        // The revisions of the last-known-good files it keeps, not of the refused desired
        // configuration, which never runs.
        let entry = ApplyLogEntry::from_revisions(
            ApplyLogOutcome::Quarantined,
            published.generation(),
            &revisions,
        );
        if let Err(err) = apply_log::append(writer.root(), &entry) {
            warn!(error = %err, "recording the quarantine in the apply log failed");
        }
        if let Err(err) = writer.keep(published) {
            warn!(error = %err, "removing the previous configuration generation failed");
        }
        Ok(())
    })
    .await;
    if let Err(err) = &published {
        error!(error = %err, "writing the quarantine marker failed; the sandbox is NOT quarantined");
    }
    published
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

/// Runs blocking file I/O off the async workers. A panic in it (a test's simulated crash)
/// comes back as an error.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())))
}
