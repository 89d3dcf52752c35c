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

mod groups;

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

/// What a validate-only request would do; nothing of it was written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DryRun {
    /// The request's idempotency key matches an earlier, equal request: the
    /// write would return that operation and change nothing, so nothing else
    /// is reported.
    pub idempotent_replay: bool,
    /// Static sections that would be kept from the sandbox's latest revision.
    pub kept_static_sections: Vec<String>,
    /// What applying the request's policy edits would do other than literally.
    pub merge_notes: Vec<String>,
    /// Set when the request carries a policy or policy edits.
    pub policy: Option<PolicyPreview>,
    /// Settings whose stored value at the target's scope would change, by key.
    pub settings: Vec<SettingPreview>,
    /// A sandbox policy checked while a global policy is set: the revision of that global
    /// policy, which would replace it (see [`Committed::shadowed_by_global_policy`]).
    pub shadowed_by_global_policy: Option<u64>,
}

/// A policy a dry run checked, compared with the target's current policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyPreview {
    pub diff: PolicyDiff,
    /// The sandbox's latest revision or the global policy revision; 0 for none.
    pub current_revision: u64,
    pub current_policy_hash: Option<String>,
    /// The hash the stored policy would have, kept sections included.
    pub new_policy_hash: String,
}

/// One setting a dry run would change; `None` is "not set at this scope".
#[derive(Debug, Clone, PartialEq)]
pub struct SettingPreview {
    pub key: String,
    pub old: Option<SettingValue>,
    pub new: Option<SettingValue>,
}

/// A sandbox policy as it would be stored: the request's, with the static
/// sections it omits taken from the sandbox's latest revision.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedPolicy<'a> {
    pub policy: Cow<'a, SandboxPolicy>,
    /// In document order: `filesystem_policy`, `landlock`, `process`.
    pub kept_static_sections: Vec<String>,
}

/// What [`write_sandbox_policy`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyWrite {
    /// The new revision and its hash; None when the policy equals the latest one.
    pub revision: Option<(u64, String)>,
    pub kept_static_sections: Vec<String>,
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

/// The sandboxes a fleet write targets.
enum Fleet<'a> {
    Workspace(&'a str),
    All,
}

impl<'a> Fleet<'a> {
    fn workspace(&self) -> Option<&'a str> {
        match self {
            Self::Workspace(workspace) => Some(workspace),
            Self::All => None,
        }
    }
}

/// What writing to one target changed, besides the operation's revisions.
struct TargetWrite<'a> {
    publication: Publication,
    /// Set for a fleet write, whose operation tracks every live sandbox.
    fleet: Option<Fleet<'a>>,
    /// Set when the target is a stopped sandbox: the operation ends at once.
    inactive_reason: Option<&'static str>,
    kept_static_sections: Vec<String>,
    sandbox_policy_hash: Option<String>,
    merge_notes: Vec<String>,
    /// See [`Committed::shadowed_by_global_policy`].
    shadowed_by_global_policy: Option<u64>,
}

async fn write_to_sandbox<'a>(
    tx: &mut WriteTx,
    sandbox_id: &str,
    validated: &Validated,
    op: &mut NewOperation,
    group: Option<LockedSandbox>,
) -> Result<TargetWrite<'a>> {
    let grouped = group.is_some();
    let (current, mut policy_hash) = match group {
        Some(locked) => locked,
        None => tx.lock_sandbox_with_policy_hash(sandbox_id).await?,
    };
    if current.lifecycle == Lifecycle::Deleted {
        return Err(GatewayError::NotFound(format!(
            "sandbox {sandbox_id} was deleted"
        )));
    }
    check_expected_revision(
        validated.expected_policy_revision,
        current.policy_revision,
        "the sandbox's policy",
    )?;
    op.sandbox_id = Some(current.id.clone());
    op.policy_revision = current.policy_revision;
    op.settings_revision = current.settings_revision;
    let mut kept_static_sections = Vec::new();
    let mut merge_notes = Vec::new();
    let edited = if validated.edits.is_empty() {
        None
    } else {
        let latest = latest_stored_policy(tx, &current.id, policy_hash.as_deref()).await?;
        let edited = edit_policy(
            latest.as_ref().map(|(_, stored)| &**stored),
            &validated.edits,
        )?;
        merge_notes = edited.notes;
        Some(edited.policy)
    };
    let mut shadowed_by_global_policy = None;
    if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
        shadowed_by_global_policy = tx.global_policy_in_effect().await?;
        let written =
            write_sandbox_policy(tx, &current, policy_hash.as_deref(), policy, &op.id).await?;
        kept_static_sections = written.kept_static_sections;
        if let Some((revision, hash)) = written.revision {
            op.policy_revision = revision;
            op.no_op = false;
            policy_hash = Some(hash);
        }
    }
    // A group writes its writes' settings together, after this.
    if !grouped
        && !validated.settings.is_empty()
        && let Some(revision) = tx
            .write_settings(Scope::Sandbox, &current.id, &validated.settings)
            .await?
    {
        op.settings_revision = revision;
        op.no_op = false;
    }
    Ok(TargetWrite {
        publication: Publication::sandbox(&current.id, &[Component::SandboxConfig]),
        fleet: None,
        inactive_reason: (current.lifecycle == Lifecycle::Stopped)
            .then_some(crate::store::STOPPED_TARGET_REASON),
        kept_static_sections,
        // A sandbox without any policy revision answers with an empty hash.
        sandbox_policy_hash: Some(policy_hash.unwrap_or_default()),
        merge_notes,
        shadowed_by_global_policy,
    })
}

/// Refuses a write whose caller read an older revision than the one in effect.
fn check_expected_revision(expected: Option<u64>, current: u64, what: &str) -> Result<()> {
    match expected {
        Some(expected) if expected != current => Err(GatewayError::FailedPrecondition(format!(
            "{what} is at revision {current}, not the expected {expected}: it changed since it \
             was read; read it again and retry (nothing was written)"
        ))),
        _ => Ok(()),
    }
}

/// The stored policy (an empty one for a sandbox that has none) after `edits`, validated as
/// a whole, since an edit can make a valid document invalid (an endpoint two rules overlap).
fn edit_policy(
    stored: Option<&SandboxPolicy>,
    edits: &[PolicyEdit],
) -> Result<openshell_core::policy::Edited> {
    let empty = SandboxPolicy::default();
    let edited =
        apply_edits(stored.unwrap_or(&empty), edits).map_err(GatewayError::from_violations)?;
    edited
        .policy
        .validate()
        .map_err(|violations| GatewayError::from_violations(in_policy(violations)))?;
    Ok(edited)
}

async fn write_to_workspace<'a>(
    tx: &mut WriteTx,
    workspace: &'a str,
    validated: &Validated,
    op: &mut NewOperation,
) -> Result<TargetWrite<'a>> {
    if !tx.workspace_exists(workspace).await? {
        return Err(GatewayError::NotFound(format!(
            "workspace {workspace:?} not found"
        )));
    }
    let current = tx.settings_at(Scope::Workspace, workspace).await?;
    op.settings_revision = current.revision;
    if let Some(revision) = tx
        .write_settings(Scope::Workspace, workspace, &validated.settings)
        .await?
    {
        op.settings_revision = revision;
        op.no_op = false;
    }
    Ok(TargetWrite {
        publication: Publication {
            scope: PublicationScope::Workspace(workspace.to_string()),
            components: vec![Component::SandboxConfig],
        },
        fleet: Some(Fleet::Workspace(workspace)),
        inactive_reason: None,
        shadowed_by_global_policy: None,
        kept_static_sections: Vec::new(),
        sandbox_policy_hash: None,
        merge_notes: Vec::new(),
    })
}

async fn write_to_global<'a>(
    tx: &mut WriteTx,
    update: &ConfigUpdate,
    validated: &Validated,
    op: &mut NewOperation,
) -> Result<TargetWrite<'a>> {
    let (global_revision, current_global) = tx.global_policy().await?;
    check_expected_revision(
        validated.expected_policy_revision,
        global_revision,
        "the global policy",
    )?;
    op.global_policy_revision = Some(global_revision);
    let mut merge_notes = Vec::new();
    let edited = if validated.edits.is_empty() {
        None
    } else {
        let edited = edit_policy(
            Some(&global_to_edit(current_global.as_ref())?),
            &validated.edits,
        )?;
        merge_notes = edited.notes;
        Some(edited.policy)
    };
    if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
        let hash = policy.policy_hash();
        if current_global.as_ref().map(|g| g.policy_hash.as_str()) != Some(hash.as_str()) {
            op.global_policy_revision = Some(global_revision + 1);
            tx.insert_global_policy_revision(
                global_revision + 1,
                Some((&hash, &policy.canonical_json())),
                &op.id,
            )
            .await?;
            op.no_op = false;
        }
    } else if update.clear_global_policy && current_global.is_some() {
        op.global_policy_revision = Some(global_revision + 1);
        tx.insert_global_policy_revision(global_revision + 1, None, &op.id)
            .await?;
        op.no_op = false;
    }
    let current = tx.settings_at(Scope::Global, "").await?;
    op.settings_revision = current.revision;
    if !validated.settings.is_empty()
        && let Some(revision) = tx
            .write_settings(Scope::Global, "", &validated.settings)
            .await?
    {
        op.settings_revision = revision;
        op.no_op = false;
    }
    Ok(TargetWrite {
        publication: Publication {
            scope: PublicationScope::Global,
            components: vec![Component::SandboxConfig],
        },
        fleet: Some(Fleet::All),
        inactive_reason: None,
        shadowed_by_global_policy: None,
        kept_static_sections: Vec::new(),
        sandbox_policy_hash: None,
        merge_notes,
    })
}

/// The global policy that incremental edits apply to: there must be one.
fn global_to_edit(current: Option<&GlobalPolicyRecord>) -> Result<SandboxPolicy> {
    let current = current.ok_or_else(|| {
        GatewayError::FailedPrecondition(
            "no global policy is set, so there is nothing to edit; set one with a whole policy \
             (nothing was written)"
                .into(),
        )
    })?;
    parse_stored(&current.policy_json, "the global policy")
}

/// Lists a fleet operation's targets in its transaction, or leaves that to
/// the listing after commit when a big fleet would hold the writer too long.
async fn list_fleet_targets(
    store: &Store,
    tx: &mut WriteTx,
    operation_id: &str,
    workspace: Option<&str>,
) -> Result<()> {
    if fleet_targets::lists_after_commit(store) {
        return Ok(tx.begin_target_listing(operation_id).await?);
    }
    let listed = tx.insert_live_targets(operation_id, workspace).await?;
    if listed.pending + listed.inactive == 0 {
        tx.complete_empty_fleet_operation(operation_id).await?;
    } else if listed.pending == 0 {
        // Every target is a stopped sandbox: the operation ends INACTIVE now.
        tx.count_finished_targets(operation_id, OperationState::Inactive, 0)
            .await?;
    }
    Ok(())
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

/// The sections a replayed request had kept: those it omits that the
/// revision its operation recorded has. Not stored with the operation, so a
/// replay answers as the original write did without a column of its own.
async fn kept_by_replayed(
    store: &Store,
    operation: &OperationRecord,
    requested: &SandboxPolicy,
) -> Result<Vec<String>> {
    let Some(sandbox_id) = operation.sandbox_id.as_deref() else {
        return Ok(Vec::new());
    };
    if operation.policy_revision == 0 {
        return Ok(Vec::new());
    }
    let revision = store
        .policy_revision(sandbox_id, operation.policy_revision)
        .await?;
    let stored = parse_stored(&revision.policy_json, sandbox_id)?;
    Ok(sections_to_keep(&stored, requested))
}

fn parse_stored(policy_json: &str, sandbox_id: &str) -> Result<SandboxPolicy> {
    openshell_core::policy::parse_policy(policy_json)
        .map_err(|e| GatewayError::Corrupt(format!("stored policy of {sandbox_id}: {e}")))
}

/// Static sections `requested` omits and `stored` has, in document order.
fn sections_to_keep(stored: &SandboxPolicy, requested: &SandboxPolicy) -> Vec<String> {
    let mut kept = Vec::new();
    if requested.filesystem_policy.is_none() && stored.filesystem_policy.is_some() {
        kept.push("filesystem_policy".to_owned());
    }
    if requested.landlock.is_none() && stored.landlock.is_some() {
        kept.push("landlock".to_owned());
    }
    if requested.process.is_none() && stored.process.is_some() {
        kept.push("process".to_owned());
    }
    kept
}

/// Applies the sandbox static-section rule to a requested policy, for the
/// write and the dry run alike.
///
/// Static sections are applied once when a sandbox starts, so a later
/// revision must carry the same ones. A request that omits one keeps the
/// sandbox's current section (upstream users asked for this: a network-only
/// change should not have to repeat them, NVIDIA/OpenShell#3138); one that
/// gives a section with other content is refused with the section's path.
pub fn prepare_sandbox_policy<'a>(
    stored: Option<&SandboxPolicy>,
    requested: &'a SandboxPolicy,
) -> Result<PreparedPolicy<'a>> {
    let Some(stored) = stored else {
        return Ok(PreparedPolicy {
            policy: Cow::Borrowed(requested),
            kept_static_sections: Vec::new(),
        });
    };
    let kept_static_sections = sections_to_keep(stored, requested);
    let policy = if kept_static_sections.is_empty() {
        Cow::Borrowed(requested)
    } else {
        let mut merged = requested.clone();
        if merged.filesystem_policy.is_none() {
            merged
                .filesystem_policy
                .clone_from(&stored.filesystem_policy);
        }
        if merged.landlock.is_none() {
            merged.landlock.clone_from(&stored.landlock);
        }
        if merged.process.is_none() {
            merged.process.clone_from(&stored.process);
        }
        // Both halves passed validation, but a rule that spans a static
        // section and the rest of the document would not have seen them
        // together; what is stored must pass as a whole.
        merged
            .validate()
            .map_err(|violations| GatewayError::from_violations(in_policy(violations)))?;
        Cow::Owned(merged)
    };
    let changes = stored.static_section_changes(&policy);
    if !changes.is_empty() {
        return Err(GatewayError::from_violations(in_policy(changes)));
    }
    Ok(PreparedPolicy {
        policy,
        kept_static_sections,
    })
}

/// Addresses policy violations from the request's root, as `validate` does.
fn in_policy(violations: Vec<Violation>) -> Vec<Violation> {
    violations
        .into_iter()
        .map(|v| Violation {
            field: if v.field.is_empty() {
                "policy".into()
            } else {
                format!("policy.{}", v.field)
            },
            message: v.message,
        })
        .collect()
}

/// Checks an `UpdateConfig` request as [`commit_update`] would and reports
/// what it would change, writing nothing: no revision, no operation, no
/// settings, and the idempotency key stays free.
///
/// It reads the stored state outside any transaction, so a write committed
/// meanwhile can make the real write differ from the preview (kubectl's
/// server-side dry run has the same window); the write checks again.
pub async fn dry_run_update(store: &Store, update: &ConfigUpdate) -> Result<DryRun> {
    let parsed = match update.policy.as_deref().filter(|p| !p.trim().is_empty()) {
        Some(text) => {
            Some(crate::policy_parse::parse_and_validate_untrusted(text.to_owned()).await)
        }
        None => None,
    };
    let validated = update.validate(parsed)?;
    let (target_kind, target) = update.target_key();
    if let Some(key) = &update.idempotency_key
        && let Some(found) = store
            .find_idempotent(target_kind, &target, &update.caller, key)
            .await?
    {
        if found.request_fingerprint != validated.fingerprint {
            return Err(key_used_for_another_request(key, &found.operation_id));
        }
        return Ok(DryRun {
            idempotent_replay: true,
            ..DryRun::default()
        });
    }
    let mut out = DryRun::default();
    let (scope, scope_id) = match &update.target {
        ConfigTarget::Sandbox(sandbox_id) => {
            let sandbox = store.get_sandbox(sandbox_id).await?;
            if sandbox.lifecycle == Lifecycle::Deleted {
                return Err(GatewayError::NotFound(format!(
                    "sandbox {sandbox_id} was deleted"
                )));
            }
            check_expected_revision(
                validated.expected_policy_revision,
                sandbox.policy_revision,
                "the sandbox's policy",
            )?;
            let latest = match (&validated.policy, validated.edits.is_empty()) {
                (None, true) => None,
                _ => store.latest_policy(sandbox_id).await?,
            };
            let stored = latest
                .as_ref()
                .map(|l| parse_stored(&l.policy_json, sandbox_id))
                .transpose()?;
            let edited = if validated.edits.is_empty() {
                None
            } else {
                let edited = edit_policy(stored.as_ref(), &validated.edits)?;
                out.merge_notes = edited.notes;
                Some(edited.policy)
            };
            if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
                out.shadowed_by_global_policy = store.global_policy().await?.1.map(|g| g.revision);
                let prepared = prepare_sandbox_policy(stored.as_ref(), policy)?;
                out.policy = Some(PolicyPreview {
                    diff: policy_diff::diff(stored.as_ref(), &prepared.policy),
                    current_revision: latest.as_ref().map_or(0, |l| l.revision),
                    current_policy_hash: latest.map(|l| l.policy_hash),
                    new_policy_hash: prepared.policy.policy_hash(),
                });
                out.kept_static_sections = prepared.kept_static_sections;
            }
            (Scope::Sandbox, sandbox_id.as_str())
        }
        ConfigTarget::Workspace(workspace) => {
            if !store.workspace_exists(workspace).await? {
                return Err(GatewayError::NotFound(format!(
                    "workspace {workspace:?} not found"
                )));
            }
            (Scope::Workspace, workspace.as_str())
        }
        ConfigTarget::Global => {
            if let Some(expected) = validated.expected_policy_revision {
                let (revision, _) = store.global_policy().await?;
                check_expected_revision(Some(expected), revision, "the global policy")?;
            }
            let edited = if validated.edits.is_empty() {
                None
            } else {
                let (_, current) = store.global_policy().await?;
                let edited =
                    edit_policy(Some(&global_to_edit(current.as_ref())?), &validated.edits)?;
                out.merge_notes = edited.notes;
                Some(edited.policy)
            };
            if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
                let (_, current) = store.global_policy().await?;
                let stored = current
                    .as_ref()
                    .map(|g| parse_stored(&g.policy_json, "the global policy"))
                    .transpose()?;
                out.policy = Some(PolicyPreview {
                    diff: policy_diff::diff(stored.as_ref(), policy),
                    current_revision: current.as_ref().map_or(0, |g| g.revision),
                    current_policy_hash: current.map(|g| g.policy_hash),
                    new_policy_hash: policy.policy_hash(),
                });
            }
            (Scope::Global, "")
        }
    };
    if !validated.settings.is_empty() {
        let stored = store.settings_at(scope, scope_id).await?;
        out.settings = validated
            .settings
            .into_iter()
            .filter_map(|(key, new)| {
                let old = stored.values.get(&key).cloned();
                (old != new).then_some(SettingPreview { key, old, new })
            })
            .collect();
    }
    Ok(out)
}

/// The sandbox's latest stored policy and its hash. `locked_hash` is the
/// latest revision's hash as the sandbox's lock read it: a policy kept in
/// process under it is not read from the store again.
async fn latest_stored_policy(
    tx: &mut WriteTx,
    sandbox_id: &str,
    locked_hash: Option<&str>,
) -> Result<Option<(String, Arc<SandboxPolicy>)>> {
    if let Some(hash) = locked_hash
        && let Some(parsed) = encoded_policies::parsed(hash)
    {
        return Ok(Some((hash.to_owned(), parsed)));
    }
    let Some(latest) = tx.latest_policy(sandbox_id).await? else {
        return Ok(None);
    };
    let stored = parse_stored(&latest.policy_json, sandbox_id)?;
    Ok(Some((latest.policy_hash, Arc::new(stored))))
}

/// Writes `policy` as the sandbox's next revision unless it equals the
/// latest one. Static sections are fixed at the first revision; ones the
/// policy omits are kept from the latest ([`prepare_sandbox_policy`]).
/// `locked_hash`: the latest revision's hash, when the caller's lock of the
/// sandbox read it.
pub async fn write_sandbox_policy(
    tx: &mut WriteTx,
    sandbox: &SandboxRecord,
    locked_hash: Option<&str>,
    policy: &SandboxPolicy,
    operation_id: &str,
) -> Result<PolicyWrite> {
    // Serialized once: its hash is checked and, when new, it is what is stored.
    let mut canonical = policy.canonical_json();
    let mut hash = hash_of_canonical_json(&canonical);
    // The same document again: nothing to check, nothing to keep.
    if locked_hash == Some(hash.as_str()) {
        return Ok(PolicyWrite::default());
    }
    let latest = latest_stored_policy(tx, &sandbox.id, locked_hash).await?;
    let stored = match &latest {
        Some((latest_hash, _)) if *latest_hash == hash => return Ok(PolicyWrite::default()),
        Some((_, stored)) => Some(&**stored),
        None => None,
    };
    let prepared = prepare_sandbox_policy(stored, policy)?;
    let kept_static_sections = prepared.kept_static_sections;
    if !kept_static_sections.is_empty() {
        canonical = prepared.policy.canonical_json();
        hash = hash_of_canonical_json(&canonical);
        if latest
            .as_ref()
            .is_some_and(|(latest_hash, _)| *latest_hash == hash)
        {
            return Ok(PolicyWrite {
                revision: None,
                kept_static_sections,
            });
        }
    }
    let revision = sandbox.policy_revision + 1;
    tx.insert_policy_revision(&sandbox.id, revision, &hash, &canonical, operation_id)
        .await?;
    encoded_policies::keep(&hash, &prepared.policy);
    Ok(PolicyWrite {
        revision: Some((revision, hash)),
        kept_static_sections,
    })
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
