//! The real applier: stage → validate → activate into the state directory, with an optional
//! on-apply hook, last-known-good rollback, fail-closed quarantine and a reload notice for the
//! workload.
//!
//! State directory layout (`--state-dir`, default `./openshell-state`):
//!
//! ```text
//! active -> generations/gen-N   symlink to the active generation, switched by one rename
//! active/policy.json            effective policy, canonical JSON (0644)
//! active/settings.json          effective settings: key → {value, scope}, plus scope revisions (0644)
//! active/provider-env.json      provider values: name → {value, class, provider} (0600)
//! active/revisions.json         revisions and hash of what is active (0644)
//! active/quarantine.json        present only while quarantined: deny all network access (0644)
//! generations/gen-N/            one complete configuration; the others are removed
//! apply-log.jsonl               one line per activation, appended and synced before it is
//!                               reported ([`apply_log`]); rotated to apply-log.jsonl.1
//! ```
//!
//! Every activation writes a whole new generation and then switches `active` to it, so the
//! files under `active/` always belong to one configuration, even after a crash
//! ([`state_dir`]).

pub mod activate;
pub mod apply_log;
pub mod hook;
pub mod stage;
pub mod state_dir;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::Mutex;
use tracing::{error, info, warn};

use self::activate::{Hook, activate, quarantine, state_env};
use self::stage::{
    POLICY_FILE, PolicyMemo, REVISIONS_FILE, SANDBOX_CONFIG_FILE, recovered_config, stage,
};
use self::state_dir::{StateDir, WriteFault};
use crate::applier::{Applier, ApplyError, ApplyErrorKind, ApplyReport, BoxFuture};
use crate::desired::{DesiredConfig, FailureMode, RELOAD_SIGNAL_KEY};
use crate::reload::{ReloadReceiver, ReloadSender, ReloadSignal, notify, reload_channel};

/// How a [`FileApplier`] behaves.
#[derive(Debug, Clone)]
pub struct FileApplierConfig {
    pub state_dir: PathBuf,
    /// Passed to the hook as `OPENSHELL_SANDBOX_ID`.
    pub sandbox_id: String,
    /// Shell command run after every activation; a failure rolls the activation back.
    pub on_apply: Option<String>,
    pub hook_timeout: Duration,
    /// Signal for live changes, unless the `reload_signal` setting is set at some scope.
    pub reload_signal: ReloadSignal,
    /// Consulted before every write to the state directory; for tests that need a full disk
    /// or a crash at a given step. `None` in production.
    pub write_fault: Option<WriteFault>,
}

impl FileApplierConfig {
    pub fn new(state_dir: impl Into<PathBuf>, sandbox_id: impl Into<String>) -> Self {
        Self {
            state_dir: state_dir.into(),
            sandbox_id: sandbox_id.into(),
            on_apply: None,
            hook_timeout: hook::DEFAULT_HOOK_TIMEOUT,
            reload_signal: ReloadSignal::default(),
            write_fault: None,
        }
    }
}

/// Applies configurations to files under the state directory.
pub struct FileApplier {
    config: FileApplierConfig,
    dir: StateDir,
    reload: ReloadSender,
    /// Serializes applies.
    applying: Mutex<ApplyState>,
    /// The configuration found in effect at start, if it can be read back.
    recovered: Option<DesiredConfig>,
}

#[derive(Default)]
struct ApplyState {
    /// Counted so the first activation is known.
    activations: u64,
    policies: PolicyMemo,
}

impl FileApplier {
    /// Creates the state directory, or brings it back to one whole generation after a crash
    /// (see [`StateDir::prepare`]).
    pub fn new(mut config: FileApplierConfig) -> std::io::Result<Self> {
        // Before `prepare`, which removes every generation but the active one.
        roll_back_unrecorded(&StateDir::new(&config.state_dir))?;
        let generation = StateDir::new(&config.state_dir).prepare()?;
        // Absolute, because the hook and the workload get it in their environment and may
        // change directory.
        config.state_dir = std::fs::canonicalize(&config.state_dir)?;
        let dir = StateDir::new(&config.state_dir).with_fault(config.write_fault.clone());
        let generation = set_aside_if_damaged(&dir, generation)?;
        let revisions = log_recovered(&dir, generation);
        // The record only; a state directory that cannot take it now fails the next apply,
        // which is where the supervisor says so to the gateway.
        if let Err(err) = apply_log::record_recovered(dir.root(), generation, revisions.as_ref()) {
            warn!(error = %err, "recording the configuration found at start in the apply log failed");
        }
        // With a log, a first activation the hook refused and a crash left active is rolled
        // back at the next start, as every later one is; without one it would be taken for a
        // state directory from before the log.
        if let Err(err) = apply_log::start(dir.root()) {
            warn!(error = %err, "starting the apply log failed");
        }
        let recovered = read_recovered(&dir);
        let (reload, _) = reload_channel();
        Ok(Self {
            config,
            dir,
            reload,
            applying: Mutex::new(ApplyState::default()),
            recovered,
        })
    }

    pub fn state_dir(&self) -> &StateDir {
        &self.dir
    }

    /// `active/policy.json`, as the hook and the workload see it in `OPENSHELL_POLICY_FILE`.
    pub fn policy_file(&self) -> PathBuf {
        self.dir.active_file(POLICY_FILE)
    }

    /// `OPENSHELL_STATE_DIR`, `OPENSHELL_POLICY_FILE` and `OPENSHELL_SANDBOX_ID`.
    pub fn state_env(&self) -> Vec<(&'static str, String)> {
        state_env(&self.dir, &self.policy_file(), &self.config.sandbox_id)
    }

    /// Live-change notices for the workload. A new receiver counts every earlier activation
    /// as seen, so subscribing right before starting the workload skips the first one.
    pub fn subscribe(&self) -> ReloadReceiver {
        self.reload.subscribe()
    }

    fn reload_signal_for(&self, desired: &DesiredConfig) -> ReloadSignal {
        match desired.string_setting(RELOAD_SIGNAL_KEY) {
            Some((name, true)) => name.parse().unwrap_or(self.config.reload_signal),
            _ => self.config.reload_signal,
        }
    }

    async fn apply_locked(&self, desired: &DesiredConfig) -> Result<ApplyReport, ApplyError> {
        let mut applying = self.applying.lock().await;
        let result = self
            .stage_and_activate(desired, &mut applying.policies)
            .await;
        match result {
            Ok(()) => {
                let first_activation = applying.activations == 0;
                applying.activations += 1;
                notify(&self.reload, self.reload_signal_for(desired));
                Ok(ApplyReport {
                    revisions: desired.revisions(),
                    first_activation,
                })
            }
            Err(err) => Err(self.fail(desired, err).await),
        }
    }

    async fn stage_and_activate(
        &self,
        desired: &DesiredConfig,
        policies: &mut PolicyMemo,
    ) -> Result<(), ApplyError> {
        let staged = stage(desired, policies)?;
        let hook = self.config.on_apply.as_deref().map(|command| Hook {
            command,
            timeout: self.config.hook_timeout,
            env: self.state_env(),
        });
        activate(&self.dir, staged, hook, desired).await
    }

    /// Applies the failure mode the desired configuration asks for.
    async fn fail(&self, desired: &DesiredConfig, err: ApplyError) -> ApplyError {
        if desired.failure_mode() != FailureMode::FailClosed {
            return err;
        }
        match quarantine(&self.dir, desired, &err.reason).await {
            Ok(()) => {
                warn!(
                    "apply failed with policy_validation_failure_mode = fail_closed: sandbox quarantined"
                );
                notify(&self.reload, self.reload_signal_for(desired));
                err.with_failed_closed(true)
            }
            // The operator asked for fail_closed and did not get it: the report must say so,
            // and the failure is one that can pass, so the apply (and quarantine) is retried.
            Err(io) => {
                let mut err = err.with_kind(ApplyErrorKind::Transient);
                err.reason = format!(
                    "{}; policy_validation_failure_mode = fail_closed, but the sandbox could not \
                     be quarantined ({io}): it keeps its last-known-good configuration",
                    err.reason
                );
                err
            }
        }
    }
}

/// An active generation without its apply log line is an activation that never finished:
/// the supervisor stopped while the on-apply hook was judging it (the hook sees it as the
/// active configuration) or before recording it, or the disk (full, read-only) refused the
/// roll-back after the hook refused it. The hook never accepted it, so it must not
/// stay in effect: the last generation the log names becomes active again (it is still on
/// disk, as it is removed only once the new one is accepted and recorded), or an empty one
/// when there is none; the gateway delivers the configuration again and the hook judges it
/// then. A state directory without an apply log (from before it existed; every start makes
/// one) is left as it is.
pub(super) fn roll_back_unrecorded(dir: &StateDir) -> std::io::Result<()> {
    let root = dir.root();
    if !root.join(apply_log::APPLY_LOG_FILE).exists()
        && !root.join(apply_log::ROTATED_APPLY_LOG_FILE).exists()
    {
        return Ok(());
    }
    // A link `prepare` cannot read either is its to report.
    let Ok(Some(active)) = dir.current() else {
        return Ok(());
    };
    let last = apply_log::read(root)?.last().map(|entry| entry.generation);
    if last == Some(active) {
        return Ok(());
    }
    // Nothing applied yet: an empty generation needs no entry.
    if dir
        .read_active()?
        .is_some_and(|active| active.names().next().is_none())
    {
        return Ok(());
    }
    match last {
        Some(last) if dir.has_generation(last) => {
            warn!(
                generation = active,
                restored = last,
                "the active configuration was never recorded as applied (the supervisor \
                 stopped while the on-apply hook judged it): the last recorded one is active again"
            );
            dir.switch_to(last)
        }
        _ => {
            warn!(
                generation = active,
                "the active configuration was never recorded as applied and no recorded one is \
                 left: it is set aside until the gateway's configuration arrives"
            );
            let empty = dir.publish(&[])?;
            dir.keep(empty)
        }
    }
}

/// What is wrong with a generation's files, if anything: a file that is not the JSON this
/// supervisor writes, or a policy whose hash is not the one `revisions.json` names. Only the
/// files present are judged (an empty generation is whole).
fn damage(generation: &state_dir::Generation) -> Option<String> {
    let mut json = std::collections::BTreeMap::new();
    for name in generation.names() {
        let Some(bytes) = generation.file(name) else {
            continue;
        };
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(value) if value.is_object() => {
                json.insert(name.to_string(), value);
            }
            Ok(_) => return Some(format!("{name} is not a JSON object")),
            Err(err) => return Some(format!("{name} is not JSON ({err})")),
        }
    }
    if let (Some(policy), Some(revisions)) =
        (generation.file(POLICY_FILE), json.get(REVISIONS_FILE))
    {
        let text = String::from_utf8_lossy(policy);
        let hash = openshell_core::policy::hash_of_canonical_json(text.trim_end_matches('\n'));
        if revisions["policy_hash"].as_str() != Some(hash.as_str()) {
            return Some(format!(
                "{POLICY_FILE} does not have the hash {REVISIONS_FILE} names"
            ));
        }
    }
    None
}

/// A damaged active generation (a file cut short, emptied or overwritten behind the
/// supervisor's back) is never served, reported or carried into a quarantine: an empty
/// generation takes its place until the gateway's configuration arrives. Returns the number
/// of the generation active afterwards.
fn set_aside_if_damaged(dir: &StateDir, generation: u64) -> std::io::Result<u64> {
    let Some(active) = dir.read_active()? else {
        return Ok(generation);
    };
    let Some(why) = damage(&active) else {
        return Ok(generation);
    };
    error!(
        generation,
        damage = %why,
        "the active configuration in the state directory is damaged: it is set aside and \
         the gateway's configuration replaces it"
    );
    let empty = dir.publish(&[])?;
    let number = empty.generation();
    dir.keep(empty)?;
    Ok(number)
}

/// The configuration of the active generation (whole and recorded by now), when it has the
/// sandbox config a supervisor of this version writes beside the other files.
fn read_recovered(dir: &StateDir) -> Option<DesiredConfig> {
    let active = match dir.read_active() {
        Ok(active) => active?,
        Err(err) => {
            warn!(error = %err, "reading the active configuration generation failed");
            return None;
        }
    };
    let bytes = active.file(SANDBOX_CONFIG_FILE)?;
    match recovered_config(bytes) {
        Ok(desired) => Some(desired),
        Err(why) => {
            warn!(
                file = SANDBOX_CONFIG_FILE,
                %why,
                "the configuration found at start cannot be kept as the last-known-good"
            );
            None
        }
    }
}

/// Says what the state directory held when this supervisor started: the configuration the
/// workload finds until the gateway's arrives. Returns its `revisions.json`.
fn log_recovered(dir: &StateDir, generation: u64) -> Option<serde_json::Value> {
    let revisions = match dir.read_active() {
        Ok(Some(active)) => active
            .file(REVISIONS_FILE)
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(bytes).ok()),
        Ok(None) => None,
        Err(err) => {
            warn!(error = %err, "reading the active configuration generation failed");
            return None;
        }
    };
    match &revisions {
        Some(revisions) => info!(
            generation,
            policy_revision = %revisions["policy_revision"],
            provider_env_revision = %revisions["provider_env_revision"],
            "state directory holds a configuration from before this start"
        ),
        None => info!(generation, "state directory holds no configuration yet"),
    }
    revisions
}

impl Applier for FileApplier {
    fn last_known_good(&self) -> Option<DesiredConfig> {
        self.recovered.clone()
    }

    fn apply<'a>(
        &'a self,
        desired: &'a DesiredConfig,
    ) -> BoxFuture<'a, Result<ApplyReport, ApplyError>> {
        Box::pin(self.apply_locked(desired))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
