//! The apply log: one JSON line per configuration that became active, appended to
//! `STATE/apply-log.jsonl` and synced before the apply is reported.
//!
//! It is the supervisor's own account of what it ran, for an operator reading back a
//! sandbox's history and for the fault-injection suite, which checks that every operation the
//! gateway resolved APPLIED names a revision this log says was active, and that no
//! configuration that failed validation ever was.
//!
//! Ordering, which is what makes it trustworthy after a crash:
//! 1. the new generation is published (`active` switched) and the on-apply hook accepts it;
//! 2. the entry is appended and synced; if that fails, the generation is rolled back and the
//!    apply fails as transient, so an active generation always has its entry;
//! 3. only then is the apply reported to the gateway.
//!
//! A crash between 1 and 2 leaves an active generation without an entry, one the hook may
//! not have accepted yet: the next start makes the last recorded generation active again
//! (`FileApplier::new`). A state directory from before the apply log has its active
//! generation recorded as `recovered` ([`record_recovered`]). A crash or a full disk in the
//! middle of an append leaves a torn last line, which [`read`] skips; the next append
//! starts on a line of its own.
//!
//! The log is kept small: past [`MAX_LOG_BYTES`] it is renamed to `apply-log.jsonl.1`
//! (replacing the previous one) and a new one starts.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::desired::DesiredConfig;

pub const APPLY_LOG_FILE: &str = "apply-log.jsonl";
pub const ROTATED_APPLY_LOG_FILE: &str = "apply-log.jsonl.1";
/// Size past which the log is rotated: about five thousand entries.
pub const MAX_LOG_BYTES: u64 = 1 << 20;

/// Why a configuration became active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyLogOutcome {
    /// It passed validation and the on-apply hook, and was activated.
    Activated,
    /// The last-known-good configuration again, with the deny-all quarantine marker.
    Quarantined,
    /// Found active at the first start with an apply log: the state directory is from before it.
    Recovered,
}

/// One activation. Revisions and hashes only: never a policy, setting or provider value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyLogEntry {
    pub outcome: ApplyLogOutcome,
    /// The state directory generation that became active.
    pub generation: u64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub policy_revision: u64,
    pub policy_hash: String,
    pub global_policy_revision: u64,
    pub global_settings_revision: u64,
    pub workspace_settings_revision: u64,
    pub sandbox_settings_revision: u64,
    pub provider_env_revision: String,
    pub attachment_epoch: u64,
}

impl ApplyLogEntry {
    /// The entry for activating `desired` as `generation`.
    pub fn for_desired(outcome: ApplyLogOutcome, generation: u64, desired: &DesiredConfig) -> Self {
        let r = desired.revisions();
        Self {
            outcome,
            generation,
            at_ms: now_ms(),
            policy_revision: r.policy_revision,
            policy_hash: r.policy_hash,
            global_policy_revision: r.global_policy_revision,
            global_settings_revision: r.global_settings_revision,
            workspace_settings_revision: r.workspace_settings_revision,
            sandbox_settings_revision: r.sandbox_settings_revision,
            provider_env_revision: r.provider_env_revision,
            attachment_epoch: desired.provider_env.attachment_epoch,
        }
    }

    /// The entry for a generation whose revisions are its `revisions.json`: one found active
    /// at start, or the last-known-good one republished with the quarantine marker.
    pub fn from_revisions(
        outcome: ApplyLogOutcome,
        generation: u64,
        revisions: &serde_json::Value,
    ) -> Self {
        let number = |key: &str| revisions[key].as_u64().unwrap_or(0);
        let text = |key: &str| revisions[key].as_str().unwrap_or_default().to_string();
        Self {
            outcome,
            generation,
            at_ms: now_ms(),
            policy_revision: number("policy_revision"),
            policy_hash: text("policy_hash"),
            global_policy_revision: number("global_policy_revision"),
            global_settings_revision: number("global_settings_revision"),
            workspace_settings_revision: number("workspace_settings_revision"),
            sandbox_settings_revision: number("sandbox_settings_revision"),
            provider_env_revision: text("provider_env_revision"),
            attachment_epoch: number("attachment_epoch"),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Creates an empty log under `root` unless there is one, durably.
pub fn start(root: &Path) -> io::Result<()> {
    if root.join(APPLY_LOG_FILE).exists() || root.join(ROTATED_APPLY_LOG_FILE).exists() {
        return Ok(());
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join(APPLY_LOG_FILE))?
        .sync_all()?;
    File::open(root)?.sync_all()
}

/// Appends `entry` to the log under `root` and syncs it, rotating the log first when it is
/// past [`MAX_LOG_BYTES`].
pub fn append(root: &Path, entry: &ApplyLogEntry) -> io::Result<()> {
    let path = root.join(APPLY_LOG_FILE);
    if fs::metadata(&path).is_ok_and(|meta| meta.len() > MAX_LOG_BYTES) {
        fs::rename(&path, root.join(ROTATED_APPLY_LOG_FILE))?;
    }
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(&path)?;
    // A torn end (a crash, or a full disk, in the middle of an earlier append) must stay a
    // line of its own: glued to it, this entry would not parse and would be skipped with
    // it, and an active generation would have no entry.
    let len = file.metadata()?.len();
    let mut last = [b'\n'];
    if len > 0 {
        file.read_exact_at(&mut last, len - 1)?;
    }
    let mut line = Vec::new();
    if last[0] != b'\n' {
        line.push(b'\n');
    }
    serde_json::to_writer(&mut line, entry).map_err(io::Error::other)?;
    line.push(b'\n');
    file.write_all(&line)?;
    file.sync_data()?;
    // A new log file is only durable once its directory entry is.
    File::open(root)?.sync_all()
}

/// Every entry under `root`, oldest first (the rotated log, then the current one). A line
/// that does not parse is the torn end of an append a crash interrupted, and is skipped.
pub fn read(root: &Path) -> io::Result<Vec<ApplyLogEntry>> {
    let mut entries = Vec::new();
    for name in [ROTATED_APPLY_LOG_FILE, APPLY_LOG_FILE] {
        let text = match fs::read_to_string(root.join(name)) {
            Ok(text) => text,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        entries.extend(
            text.lines()
                .filter_map(|line| serde_json::from_str::<ApplyLogEntry>(line).ok()),
        );
    }
    Ok(entries)
}

/// Records the generation active at start when the log's last entry is not about it: a crash
/// came after the switch and before the append. An empty generation (nothing applied yet)
/// needs no entry.
pub fn record_recovered(
    root: &Path,
    generation: u64,
    revisions: Option<&serde_json::Value>,
) -> io::Result<()> {
    let Some(revisions) = revisions else {
        return Ok(());
    };
    if read(root)?.last().map(|last| last.generation) == Some(generation) {
        return Ok(());
    }
    append(
        root,
        &ApplyLogEntry::from_revisions(ApplyLogOutcome::Recovered, generation, revisions),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn entry(generation: u64) -> ApplyLogEntry {
        ApplyLogEntry {
            outcome: ApplyLogOutcome::Activated,
            generation,
            at_ms: 1,
            policy_revision: generation,
            policy_hash: format!("hash-{generation}"),
            global_policy_revision: 0,
            global_settings_revision: 2,
            workspace_settings_revision: 3,
            sandbox_settings_revision: 4,
            provider_env_revision: "env".into(),
            attachment_epoch: 5,
        }
    }

    /// What an append that stopped part-way (a crash, a full disk) leaves behind.
    fn tear_an_append(state_dir: &Path) {
        let mut file = OpenOptions::new()
            .append(true)
            .open(state_dir.join(APPLY_LOG_FILE))
            .unwrap();
        file.write_all(br#"{"outcome":"activated","genera"#)
            .unwrap();
    }

    #[test]
    fn entries_read_back_in_order_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &entry(1)).unwrap();
        append(dir.path(), &entry(2)).unwrap();
        tear_an_append(dir.path());
        assert_eq!(read(dir.path()).unwrap(), [entry(1), entry(2)]);
    }

    /// Found by the fault-injection suite (a full state directory, seed 11): an append that
    /// failed part-way left a fragment, the next entry was written onto its end, and the
    /// generation it recorded, active and reported APPLIED, had no entry that parsed.
    #[test]
    fn an_entry_after_a_torn_append_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &entry(1)).unwrap();
        tear_an_append(dir.path());
        append(dir.path(), &entry(2)).unwrap();
        append(dir.path(), &entry(3)).unwrap();
        assert_eq!(read(dir.path()).unwrap(), [entry(1), entry(2), entry(3)]);
    }

    #[test]
    fn a_long_log_is_rotated_and_both_parts_are_read() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &entry(1)).unwrap();
        let big = vec![b' '; usize::try_from(MAX_LOG_BYTES).unwrap() + 1];
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.path().join(APPLY_LOG_FILE))
            .unwrap();
        file.write_all(&big).unwrap();
        file.write_all(b"\n").unwrap();
        append(dir.path(), &entry(2)).unwrap();
        assert!(dir.path().join(ROTATED_APPLY_LOG_FILE).exists());
        assert_eq!(
            fs::read_to_string(dir.path().join(APPLY_LOG_FILE))
                .unwrap()
                .lines()
                .count(),
            1
        );
        assert_eq!(read(dir.path()).unwrap(), [entry(1), entry(2)]);
    }

    #[test]
    fn a_generation_found_without_its_entry_is_recorded_once() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &entry(1)).unwrap();
        let revisions = serde_json::json!({
            "policy_revision": 7,
            "policy_hash": "h7",
            "provider_env_revision": "e7",
            "attachment_epoch": 2,
        });
        record_recovered(dir.path(), 1, Some(&revisions)).unwrap();
        assert_eq!(
            read(dir.path()).unwrap().len(),
            1,
            "generation 1 has its entry"
        );
        record_recovered(dir.path(), 2, Some(&revisions)).unwrap();
        record_recovered(dir.path(), 2, Some(&revisions)).unwrap();
        let entries = read(dir.path()).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].outcome, ApplyLogOutcome::Recovered);
        assert_eq!(entries[1].generation, 2);
        assert_eq!(entries[1].policy_revision, 7);
        assert_eq!(entries[1].policy_hash, "h7");
        record_recovered(dir.path(), 3, None).unwrap();
        assert_eq!(
            read(dir.path()).unwrap().len(),
            2,
            "nothing applied, nothing to record"
        );
    }
}
