//! `UpdateConfig`: validate, then in one transaction write the new
//! revision(s), the durable operation and the fanout intent, then commit.
//!
//! Nothing is written unless everything validates, so a rejected write
//! changes no state. Publication to sessions happens after commit, never
//! inside the transaction.
//!
//! A dry run ([`dry_run_update`]) runs the same checks, the static-section
//! rule included ([`prepare_sandbox_policy`], shared with the write), against
//! what is stored, and reports what the write would change without opening a
//! write transaction at all.

use std::borrow::Cow;
use std::sync::Arc;

use openshell_core::Violation;
use openshell_core::policy::{
    PolicyEdit, PolicyError, SandboxPolicy, apply_edits, hash_of_canonical_json,
};
use openshell_core::settings::{self, Scope, SettingValue};
use sha2::{Digest, Sha256};

use crate::delivery::{Component, Publication, PublicationScope};
use crate::encoded_policies;
use crate::error::{GatewayError, Result};
use crate::operations::fleet_targets;
use crate::policy_diff::{self, PolicyDiff};
use crate::store::{
    GlobalPolicyRecord, Lifecycle, LockedSandbox, NewOperation, OperationRecord, OperationSignal,
    OperationState, Outcome, SandboxRecord, Store, TargetKind, WritePlace, WriteTx, new_id, now_ms,
};

mod dry_run;
mod groups;
mod scopes;
mod static_sections;

pub use dry_run::{DryRun, PolicyPreview, SettingPreview, dry_run_update};
use scopes::{
    TargetWrite, check_expected_revision, edit_policy, global_to_edit, list_fleet_targets,
    write_to_global, write_to_sandbox, write_to_workspace,
};
pub use static_sections::{
    PolicyWrite, PreparedPolicy, prepare_sandbox_policy, write_sandbox_policy,
};
use static_sections::{in_policy, kept_by_replayed, latest_stored_policy, parse_stored};

pub use groups::{ConfigWriter, GroupCounts};

/// What to write.
#[derive(Debug, Clone)]
pub enum ConfigTarget {
    /// A sandbox by id; the transaction reads and locks it.
    Sandbox(String),
    Workspace(String),
    Global,
}

/// One requested setting change, before validation.
#[derive(Debug, Clone)]
pub enum SettingChange {
    /// A typed value (from an SDK).
    Value(String, SettingValue),
    /// Text parsed by the key's registry type (from the CLI).
    Raw(String, String),
    Delete(String),
}

impl SettingChange {
    fn key(&self) -> &str {
        match self {
            Self::Value(key, _) | Self::Raw(key, _) | Self::Delete(key) => key,
        }
    }
}

/// An `UpdateConfig` request after the API layer resolved its target.
#[derive(Debug, Clone)]
pub struct ConfigUpdate {
    pub target: ConfigTarget,
    pub policy: Option<String>,
    /// Incremental edits of a sandbox's policy, applied to its latest revision inside the
    /// write's transaction (so concurrent edits never lose one another).
    pub policy_edits: Vec<PolicyEdit>,
    /// The policy revision the caller read (the sandbox's, or the global policy's); a write
    /// whose target has moved on since is refused and writes nothing.
    pub expected_policy_revision: Option<u64>,
    pub clear_global_policy: bool,
    pub settings: Vec<SettingChange>,
    pub idempotency_key: Option<String>,
    pub caller: String,
}

/// The committed result.
#[derive(Debug, Clone)]
pub struct Committed {
    pub operation: OperationRecord,
    /// True when an earlier request with the same key was found; nothing was written.
    pub idempotent_replay: bool,
    /// Subscribed before the commit, so no change of the new operation is
    /// missed by a waiter that starts from `operation`; None for a replay.
    pub signal: Option<Arc<OperationSignal>>,
    /// What the write changed, recorded as its fanout intent in the same transaction and
    /// published locally after the commit; None for a replay, which wrote nothing.
    pub publication: Option<Publication>,
    /// Static sections the sandbox policy omitted and that were kept from
    /// the sandbox's latest revision (see [`prepare_sandbox_policy`]).
    pub kept_static_sections: Vec<String>,
    /// The hash of the sandbox policy in effect after a sandbox write, known
    /// to the write itself; None when the answer must look it up (a replay,
    /// a fleet write).
    pub sandbox_policy_hash: Option<String>,
    /// What applying `policy_edits` did other than literally (see [`openshell_core::policy::Edited`]).
    pub merge_notes: Vec<String>,
    /// A sandbox policy write made while a global policy is set: that global policy's
    /// revision, which replaces the sandbox's policy (the operation ended INACTIVE with
    /// `SHADOWED_BY_GLOBAL` at commit). None otherwise, and for a replay.
    pub shadowed_by_global_policy: Option<u64>,
}

/// Longest accepted idempotency key.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 128;

struct Validated {
    policy: Option<SandboxPolicy>,
    edits: Vec<PolicyEdit>,
    expected_policy_revision: Option<u64>,
    settings: Vec<(String, Option<SettingValue>)>,
    fingerprint: String,
}

impl ConfigUpdate {
    fn scope(&self) -> Scope {
        match self.target {
            ConfigTarget::Sandbox(_) => Scope::Sandbox,
            ConfigTarget::Workspace(_) => Scope::Workspace,
            ConfigTarget::Global => Scope::Global,
        }
    }

    fn target_key(&self) -> (TargetKind, String) {
        match &self.target {
            ConfigTarget::Sandbox(id) => (TargetKind::Sandbox, id.clone()),
            ConfigTarget::Workspace(ws) => (TargetKind::Workspace, ws.clone()),
            ConfigTarget::Global => (TargetKind::Global, String::new()),
        }
    }

    /// Every problem with the request, each with its field path. The policy text, if any, was
    /// parsed beforehand by [`crate::policy_parse`], off the async workers.
    fn validate(&self, parsed: Option<Result<SandboxPolicy, PolicyError>>) -> Result<Validated> {
        let mut violations = Vec::new();
        let has_policy = self.policy.as_deref().is_some_and(|p| !p.trim().is_empty());
        let has_edits = !self.policy_edits.is_empty();
        if !has_policy && !has_edits && !self.clear_global_policy && self.settings.is_empty() {
            violations.push(Violation {
                field: String::new(),
                message:
                    "nothing to change: give a policy, policy edits, setting changes, or clear_global_policy"
                        .into(),
            });
        }
        if has_edits && matches!(self.target, ConfigTarget::Workspace(_)) {
            violations.push(Violation::new(
                "merge_operations",
                "incremental edits apply to a sandbox's policy or the global policy; a workspace has no policy",
            ));
        }
        if has_edits && self.clear_global_policy {
            violations.push(Violation::new(
                "merge_operations",
                "give either incremental edits or clear_global_policy, not both",
            ));
        }
        if has_edits && has_policy {
            violations.push(Violation::new(
                "merge_operations",
                "give either a whole policy or incremental edits, not both",
            ));
        }
        if self.expected_policy_revision.is_some()
            && matches!(self.target, ConfigTarget::Workspace(_))
        {
            violations.push(Violation::new(
                "expected_resource_version",
                "a workspace has no policy revision to compare; send 0",
            ));
        }
        if let Some(key) = &self.idempotency_key {
            if key.is_empty() || key.chars().count() > MAX_IDEMPOTENCY_KEY_CHARS {
                violations.push(Violation {
                    field: "request_id".into(),
                    message: format!("must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters"),
                });
            } else if key.chars().any(char::is_control) {
                // Keys are shown back by `operations get`; an escape sequence would drive the
                // reader's terminal.
                violations.push(Violation::new(
                    "request_id",
                    "must not contain control characters",
                ));
            }
        }
        if has_policy && matches!(self.target, ConfigTarget::Workspace(_)) {
            violations.push(Violation {
                field: "policy".into(),
                message: "a policy can be set for a sandbox or globally, not for a workspace"
                    .into(),
            });
        }
        if self.clear_global_policy && !matches!(self.target, ConfigTarget::Global) {
            violations.push(Violation {
                field: "clear_global_policy".into(),
                message: "only valid with the global target".into(),
            });
        }
        if self.clear_global_policy && has_policy {
            violations.push(Violation {
                field: "clear_global_policy".into(),
                message: "cannot both set and clear the global policy".into(),
            });
        }
        let policy = match parsed {
            Some(parsed) => match parsed {
                Ok(policy) => Some(policy),
                Err(err) => {
                    violations.extend(err.violations().into_iter().map(|v| Violation {
                        field: if v.field.is_empty() {
                            "policy".into()
                        } else {
                            format!("policy.{}", v.field)
                        },
                        message: v.message,
                    }));
                    None
                }
            },
            None => None,
        };
        let scope = self.scope();
        let mut settings_out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for change in &self.settings {
            let key = change.key();
            if !seen.insert(key.to_string()) {
                violations.push(Violation {
                    field: format!("settings.{key}"),
                    message: "key given more than once".into(),
                });
                continue;
            }
            let checked = match change {
                SettingChange::Value(key, value) => settings::check_value(key, value, scope)
                    .map(|()| (key.clone(), Some(value.clone()))),
                SettingChange::Raw(key, raw) => {
                    settings::parse_setting(key, raw, scope).map(|v| (key.clone(), Some(v)))
                }
                SettingChange::Delete(key) => match settings::lookup(key) {
                    Some(_) => Ok((key.clone(), None)),
                    None => Err(Violation {
                        field: format!("settings.{key}"),
                        message: "unknown setting key".into(),
                    }),
                },
            };
            match checked {
                Ok(pair) => settings_out.push(pair),
                Err(v) => violations.push(v),
            }
        }
        if !violations.is_empty() {
            return Err(GatewayError::from_violations(violations));
        }
        settings_out.sort_by(|a, b| a.0.cmp(&b.0));
        let fingerprint =
            request_fingerprint(&self.target_key(), policy.as_ref(), self, &settings_out);
        Ok(Validated {
            policy,
            edits: self.policy_edits.clone(),
            expected_policy_revision: self.expected_policy_revision,
            settings: settings_out,
            fingerprint,
        })
    }
}

/// Equal requests get equal fingerprints whatever their formatting: the
/// policy enters by its canonical hash.
fn request_fingerprint(
    target: &(TargetKind, String),
    policy: Option<&SandboxPolicy>,
    update: &ConfigUpdate,
    settings: &[(String, Option<SettingValue>)],
) -> String {
    let mut doc = serde_json::json!({
        "target": [target.0.as_str(), target.1],
        "policy": policy.map(SandboxPolicy::policy_hash),
        "clear_global_policy": update.clear_global_policy,
        "settings": settings,
    });
    // Only present when used, so keys stored before edits existed still match their requests.
    if !update.policy_edits.is_empty() {
        doc["policy_edits"] = serde_json::json!(update.policy_edits);
    }
    if let Some(expected) = update.expected_policy_revision {
        doc["expected_policy_revision"] = serde_json::json!(expected);
    }
    hex::encode(Sha256::digest(doc.to_string().as_bytes()))
}

/// Runs an `UpdateConfig` write to commit; a fleet write's targets are
/// listed when it returns (see `operations::fleet_targets`).
///
/// Once asked for, the write runs to its end on a task of its own, whether or
/// not its caller still waits: a client that hangs up while its policy is
/// parsed or its transaction waits must still find its change committed.
pub async fn commit_update(
    writer: &ConfigWriter,
    update: &ConfigUpdate,
    idempotency_retention_ms: i64,
    place: WritePlace,
) -> Result<Committed> {
    let (writer, update) = (writer.clone(), update.clone());
    tokio::spawn(async move {
        commit_update_to_end(&writer, update, idempotency_retention_ms, place).await
    })
    .await
    .map_err(|_| GatewayError::Unavailable("the write stopped unexpectedly; retry".into()))?
}

async fn commit_update_to_end(
    writer: &ConfigWriter,
    update: ConfigUpdate,
    idempotency_retention_ms: i64,
    place: WritePlace,
) -> Result<Committed> {
    let parsed = match update.policy.as_deref().filter(|p| !p.trim().is_empty()) {
        Some(text) => {
            Some(crate::policy_parse::parse_and_validate_untrusted(text.to_owned()).await)
        }
        None => None,
    };
    let validated = update.validate(parsed)?;
    let store = writer.store();
    let sandbox_write = matches!(update.target, ConfigTarget::Sandbox(_));
    let write = Arc::new(QueuedWrite {
        update,
        validated,
        idempotency_retention_ms,
        place,
    });
    if sandbox_write {
        return match writer.commit_sandbox_write(write.clone()).await? {
            InTx::Written(committed) => Ok(*committed),
            InTx::Replay(operation_id) => {
                replayed(store, &write.update, &write.validated, &operation_id).await
            }
        };
    }
    let committed = commit_alone(store, write).await?;
    let listing = committed.operation.fleet.is_some_and(|f| f.listing);
    if listing && !committed.idempotent_replay {
        fleet_targets::list_targets(store, &committed.operation).await;
        return Ok(Committed {
            operation: store.get_operation(&committed.operation.id).await?,
            ..committed
        });
    }
    Ok(committed)
}

/// A validated write on its way to the store.
struct QueuedWrite {
    update: ConfigUpdate,
    validated: Validated,
    idempotency_retention_ms: i64,
    place: WritePlace,
}

/// Commits one write in a transaction of its own.
async fn commit_alone(store: &Store, write: Arc<QueuedWrite>) -> Result<Committed> {
    let writes = store.clone();
    store
        .run_write(write.place, async move {
            // A concurrent request with the same key can win the unique index
            // between our lookup and insert (PostgreSQL); the retry then finds
            // its operation.
            let mut attempt = 0;
            loop {
                attempt += 1;
                match try_commit(
                    &writes,
                    &write.update,
                    &write.validated,
                    write.idempotency_retention_ms,
                )
                .await
                {
                    Err(GatewayError::Store(e)) if attempt < 3 && e.is_unique_violation() => {
                        continue;
                    }
                    other => return other,
                }
            }
        })
        .await
}

async fn try_commit(
    store: &Store,
    update: &ConfigUpdate,
    validated: &Validated,
    idempotency_retention_ms: i64,
) -> Result<Committed> {
    let mut tx = store.begin_write().await?;
    match write_in_tx(store, &mut tx, update, validated, idempotency_retention_ms).await? {
        InTx::Written(committed) => {
            tx.commit().await?;
            Ok(*committed)
        }
        InTx::Replay(operation_id) => {
            drop(tx);
            replayed(store, update, validated, &operation_id).await
        }
    }
}

/// What a write did inside a transaction it does not commit.
enum InTx {
    /// Written; the answer once the transaction commits.
    Written(Box<Committed>),
    /// The idempotency key names this earlier operation: nothing was written.
    Replay(String),
}

/// A write's statements inside `tx`, which the caller commits.
async fn write_in_tx(
    store: &Store,
    tx: &mut WriteTx,
    update: &ConfigUpdate,
    validated: &Validated,
    idempotency_retention_ms: i64,
) -> Result<InTx> {
    match prepare_in_tx(tx, update, validated, idempotency_retention_ms, None).await? {
        Prepared::Replay(operation_id) => Ok(InTx::Replay(operation_id)),
        Prepared::Ready(ready) => {
            let inserted = tx.insert_operation(&ready.op).await?;
            finish_in_tx(store, tx, ready, inserted).await
        }
    }
}

/// A write whose changes are made and whose operation is not inserted yet.
struct Ready<'a> {
    op: NewOperation,
    written: TargetWrite<'a>,
}

enum Prepared<'a> {
    Ready(Box<Ready<'a>>),
    /// The idempotency key names this earlier operation: nothing was written.
    Replay(String),
}

/// A write's changes inside `tx`, short of its operation, which the caller
/// inserts. `group` is set for a sandbox write that is one of a group
/// (`groups.rs`): the group locked its sandbox, given here, and writes its
/// settings changes with the other writes' before the operations.
async fn prepare_in_tx<'a>(
    tx: &mut WriteTx,
    update: &'a ConfigUpdate,
    validated: &Validated,
    idempotency_retention_ms: i64,
    group: Option<LockedSandbox>,
) -> Result<Prepared<'a>> {
    let (target_kind, target) = update.target_key();
    if let Some(key) = &update.idempotency_key
        && let Some(found) = tx
            .find_idempotent(target_kind, &target, &update.caller, key)
            .await?
    {
        if found.request_fingerprint != validated.fingerprint {
            return Err(key_used_for_another_request(key, &found.operation_id));
        }
        return Ok(Prepared::Replay(found.operation_id));
    }
    let mut op = NewOperation {
        id: new_id("op"),
        target_kind,
        target,
        sandbox_id: None,
        policy_revision: 0,
        settings_revision: 0,
        global_policy_revision: None,
        no_op: true,
        touches_policy: validated.policy.is_some()
            || !validated.edits.is_empty()
            || update.clear_global_policy,
        caller: update.caller.clone(),
        idempotency_key: update.idempotency_key.clone(),
        request_fingerprint: update
            .idempotency_key
            .as_ref()
            .map(|_| validated.fingerprint.clone()),
        idempotency_expires_at: update
            .idempotency_key
            .as_ref()
            .map(|_| now_ms().saturating_add(idempotency_retention_ms)),
        provider_env_revision: None,
    };
    let written = match &update.target {
        ConfigTarget::Sandbox(sandbox_id) => {
            write_to_sandbox(tx, sandbox_id, validated, &mut op, group).await?
        }
        ConfigTarget::Workspace(workspace) => {
            write_to_workspace(tx, workspace, validated, &mut op).await?
        }
        ConfigTarget::Global => write_to_global(tx, update, validated, &mut op).await?,
    };
    written.publication.record(tx, Some(&op.id)).await?;
    Ok(Prepared::Ready(Box::new(Ready { op, written })))
}

/// What follows the insert of a prepared write's operation, `inserted`.
async fn finish_in_tx(
    store: &Store,
    tx: &mut WriteTx,
    ready: Box<Ready<'_>>,
    inserted: OperationRecord,
) -> Result<InTx> {
    let Ready { op, written } = *ready;
    let mut operation = inserted;
    let signal = tx.subscribe(&op.id);
    // A sandbox write's operation is returned as inserted; ending it at once
    // or counting fleet targets changes the row, which is then read back.
    let mut changed_after_insert = false;
    if let Some(reason) = written.inactive_reason {
        tx.resolve_operation_by_lifecycle(&op.id, OperationState::Inactive, reason)
            .await?;
        changed_after_insert = true;
    } else if let Some(global) = written.shadowed_by_global_policy {
        // Nothing the supervisor could report would put this policy in effect while the
        // global policy is set: saying so now is the truth, and waiting would never end it.
        tx.finish_operation(
            &op.id,
            OperationState::Inactive,
            Outcome::ShadowedByGlobal,
            &shadowed_reason(op.policy_revision, global),
        )
        .await?;
        changed_after_insert = true;
    }
    if let Some(fleet) = written.fleet {
        list_fleet_targets(store, tx, &op.id, fleet.workspace()).await?;
        changed_after_insert = true;
    }
    if changed_after_insert {
        operation = tx.get_operation(&op.id).await?;
    }
    Ok(InTx::Written(Box::new(Committed {
        operation,
        idempotent_replay: false,
        signal: Some(signal),
        publication: Some(written.publication),
        kept_static_sections: written.kept_static_sections,
        sandbox_policy_hash: written.sandbox_policy_hash,
        merge_notes: written.merge_notes,
        shadowed_by_global_policy: written.shadowed_by_global_policy,
    })))
}

/// Why a sandbox policy revision written under a global policy is not in effect.
pub fn shadowed_reason(policy_revision: u64, global_revision: u64) -> String {
    format!(
        "policy revision {policy_revision} is stored but not in effect: the global policy \
         (revision {global_revision}) replaces every sandbox's policy; the sandbox's policy \
         takes effect when the global policy is cleared"
    )
}

/// The answer to a request whose idempotency key already made `operation_id`.
async fn replayed(
    store: &Store,
    update: &ConfigUpdate,
    validated: &Validated,
    operation_id: &str,
) -> Result<Committed> {
    let operation = store.get_operation(operation_id).await?;
    let kept_static_sections = match (&update.target, &validated.policy) {
        (ConfigTarget::Sandbox(_), Some(policy)) => {
            kept_by_replayed(store, &operation, policy).await?
        }
        _ => Vec::new(),
    };
    Ok(Committed {
        operation,
        idempotent_replay: true,
        signal: None,
        publication: None,
        kept_static_sections,
        sandbox_policy_hash: None,
        // Not stored with the operation; the replay wrote nothing to note.
        merge_notes: Vec::new(),
        shadowed_by_global_policy: None,
    })
}

fn key_used_for_another_request(key: &str, operation_id: &str) -> GatewayError {
    GatewayError::invalid(
        "request_id",
        format!(
            "key {key:?} was already used with a different request (operation {operation_id}); \
             use a new key for a new change"
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use openshell_core::policy::parse_and_validate;

    use super::*;

    const NETWORK: &str = "network_policies:\n  api:\n    endpoints:\n      - host: api.example.com\n        port: 443\n";

    fn policy(static_dir: &str, network: bool) -> SandboxPolicy {
        let mut text = format!("version: 1\nfilesystem_policy:\n  read_only: [{static_dir}]\n");
        if network {
            text.push_str(NETWORK);
        }
        parse_and_validate(&text).unwrap()
    }

    async fn write(
        tx: &mut WriteTx,
        sandbox: &SandboxRecord,
        locked_hash: Option<&str>,
        policy: &SandboxPolicy,
    ) -> Result<PolicyWrite> {
        write_sandbox_policy(tx, sandbox, locked_hash, policy, "op-static").await
    }

    /// The static-section rule holds whether the sandbox's latest policy is
    /// read from the store (no hash from the lock: another replica wrote
    /// it, or this process restarted) or taken as kept by the write that
    /// stored it.
    #[tokio::test]
    async fn static_sections_are_checked_against_the_latest_policy_kept_or_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite_for_tests(dir.path()).await;
        let mut tx = store.begin_write().await.unwrap();
        tx.ensure_workspace("default").await.unwrap();
        let mut sandbox = tx
            .insert_sandbox("sb-static", "static", "default", "credential-hash")
            .await
            .unwrap();
        let first = write(&mut tx, &sandbox, None, &policy("/usr", false))
            .await
            .unwrap();
        let (revision, first_hash) = first.revision.unwrap();
        sandbox.policy_revision = revision;
        tx.commit().await.unwrap();
        assert!(encoded_policies::parsed(&first_hash).is_some());

        for locked_hash in [None, Some(first_hash.as_str())] {
            let mut tx = store.begin_write().await.unwrap();
            let changed = write(&mut tx, &sandbox, locked_hash, &policy("/opt", true))
                .await
                .unwrap_err();
            assert!(
                changed.to_string().contains("policy.filesystem_policy"),
                "{locked_hash:?}: {changed}"
            );
            // The same document as the latest: nothing is written.
            let again = write(&mut tx, &sandbox, locked_hash, &policy("/usr", false))
                .await
                .unwrap();
            assert_eq!(again, PolicyWrite::default(), "{locked_hash:?}");
            let omitted = parse_and_validate(&format!("version: 1\n{NETWORK}")).unwrap();
            let kept = write(&mut tx, &sandbox, locked_hash, &omitted)
                .await
                .unwrap();
            assert_eq!(
                kept.kept_static_sections,
                ["filesystem_policy"],
                "{locked_hash:?}"
            );
            let (_, kept_hash) = kept.revision.unwrap();
            assert_eq!(
                kept_hash,
                policy("/usr", true).policy_hash(),
                "{locked_hash:?}"
            );
            drop(tx);
        }
    }
}
