//! Durable operations, their fleet targets, and fanout intents.

use std::sync::LazyLock;

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::error::{Result, StoreError};
use super::policies::CURRENT_GLOBAL_POLICY_REVISION;
use super::records::{
    OperationRecord, OperationState, Outcome, TargetKind, operation_from_row, u64_col,
};
use super::reports::last_report_from_row;
use super::sandboxes::to_i64;
use super::{Backend, LastReport, Store, WritePlace, WriteTx, json_list, now_ms};

pub(crate) const OPERATION_COLUMNS: &str = "id, target_kind, target, sandbox_id, state, outcome, error, \
     policy_revision, settings_revision, global_policy_revision, no_op, touches_policy, caller, \
     idempotency_key, created_at, updated_at, completed_at, targets_total, targets_pending, \
     targets_applied, targets_failed, targets_superseded, targets_inactive, targets_cancelled, \
     targets_listing, provider_env_revision";

/// The columns a new operation sets, in the order both inserts give them.
const INSERT_INTO_OPERATIONS: &str = "INSERT INTO operations (id, target_kind, target, sandbox_id, \
     state, outcome, error, policy_revision, settings_revision, global_policy_revision, no_op, \
     caller, idempotency_key, request_fingerprint, idempotency_expires_at, created_at, \
     updated_at, touches_policy, provider_env_revision)";

/// Every write runs it, so it is rendered once. `$7` None takes the
/// current global policy revision.
static INSERT_OPERATION_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{INSERT_INTO_OPERATIONS} VALUES ($1, $2, $3, $4, 'PENDING', '', '', $5, $6, \
         COALESCE($7, {CURRENT_GLOBAL_POLICY_REVISION}), \
         $8, $9, $10, $11, $12, $13, $13, $14, $15) RETURNING {OPERATION_COLUMNS}"
    )
});

/// [`INSERT_OPERATION_SQL`] for the operations of a JSON array bound as `$1`
/// ([`OperationRow`]s), at the time `$2` (PostgreSQL).
static INSERT_OPERATIONS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{INSERT_INTO_OPERATIONS} SELECT r.id, r.target_kind, r.target, r.sandbox_id, 'PENDING', '', '', \
         r.policy_revision, r.settings_revision, \
         COALESCE(r.global_policy_revision, {CURRENT_GLOBAL_POLICY_REVISION}), \
         r.no_op, r.caller, r.idempotency_key, r.request_fingerprint, r.idempotency_expires_at, \
         $2, $2, r.touches_policy, r.provider_env_revision \
         FROM jsonb_to_recordset(CAST($1 AS jsonb)) AS r(id TEXT, target_kind TEXT, \
         target TEXT, sandbox_id TEXT, policy_revision BIGINT, settings_revision BIGINT, \
         global_policy_revision BIGINT, no_op BIGINT, caller TEXT, idempotency_key TEXT, \
         request_fingerprint TEXT, idempotency_expires_at BIGINT, touches_policy BIGINT, \
         provider_env_revision TEXT) \
         RETURNING {OPERATION_COLUMNS}"
    )
});

/// `insert`, preceded by the insert of the pending fanout intents bound as
/// parameter `param` unless there are none: they ride the operation's
/// statement instead of costing a round trip of their own.
fn with_pending_intents(insert: &str, no_intents: bool, param: usize) -> String {
    if no_intents {
        insert.to_owned()
    } else {
        format!(
            "WITH intents AS ({}) {insert}",
            super::fanout_intents::insert_pending_sql(param)
        )
    }
}

/// One operation as an element of [`INSERT_OPERATIONS_SQL`]'s array.
#[derive(serde::Serialize)]
struct OperationRow<'a> {
    id: &'a str,
    target_kind: &'static str,
    target: &'a str,
    sandbox_id: Option<&'a str>,
    policy_revision: i64,
    settings_revision: i64,
    global_policy_revision: Option<i64>,
    no_op: i64,
    caller: &'a str,
    idempotency_key: Option<&'a str>,
    request_fingerprint: Option<&'a str>,
    idempotency_expires_at: Option<i64>,
    touches_policy: i64,
    provider_env_revision: Option<&'a str>,
}

impl<'a> From<&'a NewOperation> for OperationRow<'a> {
    fn from(op: &'a NewOperation) -> Self {
        Self {
            id: &op.id,
            target_kind: op.target_kind.as_str(),
            target: &op.target,
            sandbox_id: op.sandbox_id.as_deref(),
            policy_revision: to_i64(op.policy_revision),
            settings_revision: to_i64(op.settings_revision),
            global_policy_revision: op.global_policy_revision.map(to_i64),
            no_op: i64::from(op.no_op),
            caller: &op.caller,
            idempotency_key: op.idempotency_key.as_deref(),
            request_fingerprint: op.request_fingerprint.as_deref(),
            idempotency_expires_at: op.idempotency_expires_at,
            touches_policy: i64::from(op.touches_policy),
            provider_env_revision: op.provider_env_revision.as_deref(),
        }
    }
}

/// Everything needed to insert an operation row.
#[derive(Debug, Clone)]
pub struct NewOperation {
    pub id: String,
    pub target_kind: TargetKind,
    pub target: String,
    pub sandbox_id: Option<String>,
    pub policy_revision: u64,
    pub settings_revision: u64,
    /// `None` records the global policy revision current when the row is
    /// inserted, read by the insert itself rather than by a statement of its own.
    pub global_policy_revision: Option<u64>,
    pub no_op: bool,
    /// The write carried a policy, so a retained local policy makes it INACTIVE.
    pub touches_policy: bool,
    pub caller: String,
    pub idempotency_key: Option<String>,
    pub request_fingerprint: Option<String>,
    pub idempotency_expires_at: Option<i64>,
    /// An attach or detach: the provider environment revision it makes desired, which the
    /// supervisor must report for the operation to be APPLIED.
    pub provider_env_revision: Option<String>,
}

/// Filter for listing operations.
#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    pub sandbox_id: Option<String>,
    /// Only operations of this workspace: its own (workspace scope) and its
    /// sandboxes'; global ones are left out.
    pub workspace: Option<String>,
    pub states: Vec<OperationState>,
    pub limit: i64,
    pub offset: i64,
}

/// An earlier operation found under the same idempotency key.
#[derive(Debug, Clone)]
pub struct IdempotentMatch {
    pub operation_id: String,
    pub request_fingerprint: String,
}

impl Store {
    pub async fn get_operation(&self, id: &str) -> Result<OperationRecord> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {OPERATION_COLUMNS} FROM operations WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("operation {id} not found")))?;
        operation_from_row(&row)
    }

    /// Newest first. With a sandbox, its own operations and the fleet
    /// operations that listed it as a target.
    pub async fn list_operations(&self, filter: &OperationFilter) -> Result<Vec<OperationRecord>> {
        let mut states = String::new();
        if !filter.states.is_empty() {
            let names: Vec<String> = filter
                .states
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            // The states come from a closed enum, never from input text.
            states = format!(" AND state IN ({})", names.join(", "));
        }
        // The workspace is bound as $4 only when there is one to bind.
        let own_fleet = if filter.workspace.is_some() {
            " AND target_kind = 'workspace' AND target = $4"
        } else {
            ""
        };
        let workspace = if filter.workspace.is_some() {
            " AND ((target_kind = 'workspace' AND target = $4) OR (target_kind = 'sandbox' \
             AND sandbox_id IN (SELECT id FROM sandboxes WHERE workspace = $4)))"
        } else {
            ""
        };
        let mut sql = if filter.sandbox_id.is_some() {
            // Two indexed branches rather than one OR: the sandbox's own
            // operations by sandbox id, and the (few) fleet operations by
            // kind, each probed for the sandbox along the targets' key.
            format!(
                "SELECT {OPERATION_COLUMNS} FROM operations WHERE sandbox_id = $1{states} \
                 UNION ALL \
                 SELECT {OPERATION_COLUMNS} FROM operations WHERE target_kind IN ('workspace', 'global', 'provider') \
                 AND EXISTS (SELECT 1 FROM operation_targets t WHERE t.operation_id = operations.id \
                 AND t.sandbox_id = $1){states}{own_fleet}"
            )
        } else {
            format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE $1 = ''{states}{workspace}")
        };
        sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3");
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(filter.sandbox_id.clone().unwrap_or_default())
            .bind(filter.limit)
            .bind(filter.offset);
        if let Some(workspace) = &filter.workspace {
            query = query.bind(workspace.clone());
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(operation_from_row).collect()
    }

    pub async fn count_operations(&self) -> Result<u64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM operations")
            .fetch_one(self.pool())
            .await?;
        u64_col(&row, "n")
    }

    /// Removes terminal operations completed before `cutoff_ms`, with their targets.
    pub async fn remove_operations_completed_before(&self, cutoff_ms: i64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "DELETE FROM operation_targets WHERE operation_id IN (SELECT id FROM operations \
             WHERE completed_at IS NOT NULL AND completed_at < $1)",
        )
        .bind(cutoff_ms)
        .execute(tx.conn())
        .await?;
        let result = sqlx::query(
            "DELETE FROM operations WHERE completed_at IS NOT NULL AND completed_at < $1",
        )
        .bind(cutoff_ms)
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(result.rows_affected())
    }

    /// Frees idempotency keys past their retention so they can be reused.
    pub async fn expire_idempotency_keys(&self) -> Result<u64> {
        self.expire_idempotency_keys_at(now_ms()).await
    }

    /// Frees idempotency keys whose retention ends at or before `now`.
    pub async fn expire_idempotency_keys_at(&self, now: i64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let result = sqlx::query(
            "UPDATE operations SET idempotency_key = NULL, request_fingerprint = NULL, \
             idempotency_expires_at = NULL WHERE idempotency_expires_at IS NOT NULL \
             AND idempotency_expires_at <= $1",
        )
        .bind(now)
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(result.rows_affected())
    }
}

/// How many targets a listing step recorded, by the state they start in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListedTargets {
    pub pending: u64,
    pub inactive: u64,
}

impl ListedTargets {
    fn add(&mut self, stopped: bool, n: u64) {
        if stopped {
            self.inactive += n;
        } else {
            self.pending += n;
        }
    }
}

/// Why a stopped sandbox's target ends at once; the words a sandbox-scoped write uses too.
pub const STOPPED_TARGET_REASON: &str =
    "sandbox is stopped; the change takes effect when it starts";

/// Advisory lock classes (PostgreSQL) of a fleet listing's scope: every sandbox, or one
/// workspace's (keyed by the hash of its name). Any two numbers no other lock of the
/// database's users takes would do.
const FLEET_LISTING_LOCK_ALL: i32 = 0x4f53_0001;
const FLEET_LISTING_LOCK_WORKSPACE: i32 = 0x4f53_0002;

fn stopped_filter(stopped: bool) -> &'static str {
    if stopped {
        "lifecycle = 'stopped'"
    } else {
        "lifecycle <> 'stopped'"
    }
}

fn target_state(stopped: bool) -> OperationState {
    if stopped {
        OperationState::Inactive
    } else {
        OperationState::Pending
    }
}

fn target_outcome(stopped: bool) -> &'static str {
    if stopped {
        Outcome::Lifecycle.as_str()
    } else {
        ""
    }
}

fn target_error(stopped: bool) -> &'static str {
    if stopped { STOPPED_TARGET_REASON } else { "" }
}

const FIND_IDEMPOTENT_SQL: &str = "SELECT id, request_fingerprint, idempotency_expires_at \
     FROM operations \
     WHERE target_kind = $1 AND target = $2 AND caller = $3 AND idempotency_key = $4";

/// The operation a key names, and whether its retention ended at or before `now`. The sweep
/// that frees expired keys runs once a minute; a lookup must not wait for it, so a key is
/// free from the moment its retention ends.
fn idempotent_match(row: Option<AnyRow>, now: i64) -> Result<Option<(IdempotentMatch, bool)>> {
    row.map(|row| {
        let expires_at: Option<i64> = row.try_get("idempotency_expires_at")?;
        Ok((
            IdempotentMatch {
                operation_id: row.try_get("id")?,
                request_fingerprint: row
                    .try_get::<Option<String>, _>("request_fingerprint")?
                    .unwrap_or_default(),
            },
            expires_at.is_some_and(|at| at <= now),
        ))
    })
    .transpose()
}

impl Store {
    /// The operation registered under an idempotency key, if any, read outside a write: a
    /// dry run uses it to say what the write would do with the key, without taking it.
    pub async fn find_idempotent(
        &self,
        target_kind: TargetKind,
        target: &str,
        caller: &str,
        key: &str,
    ) -> Result<Option<IdempotentMatch>> {
        let row = sqlx::query(FIND_IDEMPOTENT_SQL)
            .bind(target_kind.as_str())
            .bind(target)
            .bind(caller)
            .bind(key)
            .fetch_optional(self.pool())
            .await?;
        Ok(idempotent_match(row, now_ms())?
            .filter(|(_, expired)| !expired)
            .map(|(found, _)| found))
    }
}

impl WriteTx {
    /// The operation registered under an idempotency key, if any and its retention has not
    /// ended. A key past its retention is released here, in this transaction, so the write
    /// can take it (the operations' unique index holds a key until it is released).
    pub async fn find_idempotent(
        &mut self,
        target_kind: TargetKind,
        target: &str,
        caller: &str,
        key: &str,
    ) -> Result<Option<IdempotentMatch>> {
        let row = sqlx::query(FIND_IDEMPOTENT_SQL)
            .bind(target_kind.as_str())
            .bind(target)
            .bind(caller)
            .bind(key)
            .fetch_optional(self.conn())
            .await?;
        match idempotent_match(row, now_ms())? {
            Some((found, true)) => {
                sqlx::query(
                    "UPDATE operations SET idempotency_key = NULL, request_fingerprint = NULL, \
                     idempotency_expires_at = NULL WHERE id = $1",
                )
                .bind(&found.operation_id)
                .execute(self.conn())
                .await?;
                Ok(None)
            }
            Some((found, false)) => Ok(Some(found)),
            None => Ok(None),
        }
    }

    /// Inserts the operation `PENDING` and returns the row as stored; fanout
    /// intents recorded before it go out in the same statement.
    pub async fn insert_operation(&mut self, op: &NewOperation) -> Result<OperationRecord> {
        let now = now_ms();
        let intents = std::mem::take(&mut self.pending_intents);
        // The operation's own parameters are $1-$15.
        let sql = with_pending_intents(&INSERT_OPERATION_SQL, intents.is_empty(), 16);
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(&op.id)
            .bind(op.target_kind.as_str())
            .bind(&op.target)
            .bind(op.sandbox_id.clone())
            .bind(to_i64(op.policy_revision))
            .bind(to_i64(op.settings_revision))
            .bind(op.global_policy_revision.map(to_i64))
            .bind(i64::from(op.no_op))
            .bind(&op.caller)
            .bind(op.idempotency_key.clone())
            .bind(op.request_fingerprint.clone())
            .bind(op.idempotency_expires_at)
            .bind(now)
            .bind(i64::from(op.touches_policy))
            .bind(op.provider_env_revision.clone());
        if !intents.is_empty() {
            query = query.bind(json_list(&intents)?);
        }
        let row = query.fetch_one(self.conn()).await?;
        operation_from_row(&row)
    }

    /// Inserts several operations (and the pending fanout intents) at once:
    /// one statement on PostgreSQL, where each statement is a round trip;
    /// one per operation on SQLite, where it is a call into the same
    /// process. Answers in the order of `ops`.
    pub async fn insert_operations(
        &mut self,
        ops: &[NewOperation],
    ) -> Result<Vec<OperationRecord>> {
        if self.backend == Backend::Sqlite || ops.len() < 2 {
            let mut inserted = Vec::with_capacity(ops.len());
            for op in ops {
                inserted.push(self.insert_operation(op).await?);
            }
            return Ok(inserted);
        }
        let intents = std::mem::take(&mut self.pending_intents);
        let sql = with_pending_intents(&INSERT_OPERATIONS_SQL, intents.is_empty(), 3);
        let rows: Vec<OperationRow<'_>> = ops.iter().map(OperationRow::from).collect();
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(&rows)?)
            .bind(now_ms());
        if !intents.is_empty() {
            query = query.bind(json_list(&intents)?);
        }
        let mut by_id = std::collections::HashMap::with_capacity(ops.len());
        for row in query.fetch_all(self.conn()).await? {
            let operation = operation_from_row(&row)?;
            by_id.insert(operation.id.clone(), operation);
        }
        ops.iter()
            .map(|op| {
                by_id.remove(&op.id).ok_or_else(|| {
                    StoreError::Corrupt(format!("operation {} was not inserted", op.id))
                })
            })
            .collect()
    }

    /// Records every live sandbox (of `workspace`, or of all) as a target of a fleet operation,
    /// in statements that never carry the ids through the gateway: running and pending
    /// sandboxes as pending targets, stopped ones as INACTIVE at once (nothing is delivered to
    /// a stopped sandbox, so nothing would ever end their target). Returns the counts.
    pub async fn insert_live_targets(
        &mut self,
        operation_id: &str,
        workspace: Option<&str>,
    ) -> Result<ListedTargets> {
        self.lock_fleet_scope(workspace).await?;
        let mut listed = ListedTargets::default();
        for stopped in [false, true] {
            let inserted = sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO operation_targets (operation_id, sandbox_id, state, outcome, error, updated_at) \
                 SELECT $1, id, $4, $5, $6, $2 FROM sandboxes \
                 WHERE ($3 = '' OR workspace = $3) AND lifecycle <> 'deleted' AND {}",
                stopped_filter(stopped)
            )))
            .bind(operation_id)
            .bind(now_ms())
            .bind(workspace.unwrap_or(""))
            .bind(target_state(stopped).as_str())
            .bind(target_outcome(stopped))
            .bind(target_error(stopped))
            .execute(self.conn())
            .await?
            .rows_affected();
            listed.add(stopped, inserted);
        }
        self.count_listed_targets(operation_id, listed).await?;
        Ok(listed)
    }

    /// Takes the lock of a fleet operation's scope (all sandboxes, or those of `workspace`)
    /// for the rest of the transaction, on PostgreSQL. There a fleet write lists its targets
    /// in its own transaction, in statements that lock no sandbox row. A stop or delete
    /// committing meanwhile ends the live targets it can see, and the listing's are not
    /// visible to it yet: the target would stay pending on a deleted sandbox, and its
    /// operation with it, for good (on a stopped one, until it starts). Every lifecycle
    /// change takes the locks of its sandbox's scopes, shared
    /// ([`Self::hold_off_fleet_listings`]), so whichever of the two comes second sees what
    /// the first committed. SQLite has one writer: nothing to do.
    async fn lock_fleet_scope(&mut self, workspace: Option<&str>) -> Result<()> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        let (class, name) = match workspace {
            Some(workspace) => (FLEET_LISTING_LOCK_WORKSPACE, workspace),
            None => (FLEET_LISTING_LOCK_ALL, ""),
        };
        sqlx::query(
            "SELECT true FROM (SELECT pg_advisory_xact_lock($1, hashtext($2))) AS scope_locked",
        )
        .bind(class)
        .bind(name)
        .execute(self.conn())
        .await?;
        Ok(())
    }

    /// Before a sandbox's lifecycle changes, on PostgreSQL: waits for the fleet listings in
    /// progress over its scopes, and holds new ones off until this transaction ends (see
    /// [`Self::lock_fleet_scope`]). Lifecycle changes do not wait for each other.
    pub(crate) async fn hold_off_fleet_listings(&mut self, sandbox_id: &str) -> Result<()> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        sqlx::query(
            "SELECT true FROM (SELECT pg_advisory_xact_lock_shared($2, hashtext('')), \
             pg_advisory_xact_lock_shared($3, hashtext(workspace)) \
             FROM sandboxes WHERE id = $1) AS scopes_locked",
        )
        .bind(sandbox_id)
        .bind(FLEET_LISTING_LOCK_ALL)
        .bind(FLEET_LISTING_LOCK_WORKSPACE)
        .execute(self.conn())
        .await?;
        Ok(())
    }

    /// Lists, as targets of a fleet operation, the next at most `limit` live sandboxes (of
    /// `workspace`, or of all) in id order after `after`, of those created no later than
    /// `created_until` (ms), and counts them in; stopped sandboxes are listed INACTIVE, as in
    /// [`Self::insert_live_targets`]. Returns the last id listed, or None once none is left.
    pub async fn list_targets_after(
        &mut self,
        operation_id: &str,
        workspace: Option<&str>,
        created_until: i64,
        after: &str,
        limit: usize,
    ) -> Result<Option<String>> {
        const SCOPE: &str = "($1 = '' OR workspace = $1) AND lifecycle <> 'deleted' \
             AND created_at <= $2 AND id > $3";
        let workspace = workspace.unwrap_or("");
        let offset = i64::try_from(limit.saturating_sub(1)).unwrap_or(i64::MAX);
        let boundary: Option<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT id FROM sandboxes WHERE {SCOPE} ORDER BY id LIMIT 1 OFFSET $4"
        )))
        .bind(workspace)
        .bind(created_until)
        .bind(after)
        .bind(offset)
        .fetch_optional(self.conn())
        .await?;
        let mut listed = ListedTargets::default();
        for stopped in [false, true] {
            let inserted = sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO operation_targets (operation_id, sandbox_id, state, outcome, error, updated_at) \
                 SELECT $5, id, $7, $8, $9, $6 FROM sandboxes WHERE {SCOPE} AND ($4 = '' OR id <= $4) AND {}",
                stopped_filter(stopped)
            )))
            .bind(workspace)
            .bind(created_until)
            .bind(after)
            .bind(boundary.clone().unwrap_or_default())
            .bind(operation_id)
            .bind(now_ms())
            .bind(target_state(stopped).as_str())
            .bind(target_outcome(stopped))
            .bind(target_error(stopped))
            .execute(self.conn())
            .await?
            .rows_affected();
            listed.add(stopped, inserted);
        }
        self.count_listed_targets(operation_id, listed).await?;
        Ok(boundary)
    }

    async fn count_listed_targets(
        &mut self,
        operation_id: &str,
        listed: ListedTargets,
    ) -> Result<()> {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(
            "UPDATE operations SET targets_total = targets_total + $2 + $3, \
             targets_pending = targets_pending + $2, targets_inactive = targets_inactive + $3 \
             WHERE id = $1",
        )
        .bind(operation_id)
        .bind(count(listed.pending))
        .bind(count(listed.inactive))
        .execute(self.conn())
        .await?;
        Ok(())
    }

    /// Marks a fleet operation's targets as still to be listed.
    pub async fn begin_target_listing(&mut self, operation_id: &str) -> Result<()> {
        sqlx::query("UPDATE operations SET targets_listing = 1 WHERE id = $1")
            .bind(operation_id)
            .execute(self.conn())
            .await?;
        Ok(())
    }

    /// Ends a fleet operation's listing; ends the operation too when no
    /// target is pending (or none was listed). Returns whether it ended.
    pub async fn finish_target_listing(&mut self, operation_id: &str) -> Result<bool> {
        let total: Option<i64> = sqlx::query_scalar(
            "UPDATE operations SET targets_listing = 0 WHERE id = $1 AND targets_listing <> 0 \
             RETURNING targets_total",
        )
        .bind(operation_id)
        .fetch_optional(self.conn())
        .await?;
        match total {
            None => Ok(false),
            Some(0) => {
                self.complete_empty_fleet_operation(operation_id).await?;
                Ok(true)
            }
            Some(_) => {
                self.count_finished_targets(operation_id, OperationState::Applied, 0)
                    .await
            }
        }
    }

    /// The last reports, kept at or after `since` (ms), of the sandboxes
    /// whose target of the operation is still live, as `(sandbox id, report)`.
    pub async fn last_reports_of_live_targets(
        &mut self,
        operation_id: &str,
        since: i64,
    ) -> Result<Vec<(String, LastReport)>> {
        let rows = sqlx::query(
            "SELECT r.sandbox_id, r.status, r.revisions_json, r.reason, r.reported_at \
             FROM supervisor_reports r JOIN operation_targets t ON t.sandbox_id = r.sandbox_id \
             WHERE r.reported_at >= $2 AND t.operation_id = $1 AND t.state IN ('PENDING', 'DELIVERED') \
             ORDER BY r.sandbox_id",
        )
        .bind(operation_id)
        .bind(since)
        .fetch_all(self.conn())
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("sandbox_id")?, last_report_from_row(row)?)))
            .collect()
    }

    /// A fleet operation with no targets has nothing to wait for.
    pub async fn complete_empty_fleet_operation(&mut self, operation_id: &str) -> Result<()> {
        let now = now_ms();
        let ended = sqlx::query(
            "UPDATE operations SET state = 'APPLIED', outcome = $2, updated_at = $3, completed_at = $3 \
             WHERE id = $1 AND state IN ('PENDING', 'DELIVERED')",
        )
        .bind(operation_id)
        .bind(Outcome::Applied.as_str())
        .bind(now)
        .execute(self.conn())
        .await?;
        if ended.rows_affected() > 0 {
            self.operation_ended(operation_id, OperationState::Applied);
        }
        Ok(())
    }

    /// Durable record that sessions in `scope` must rebuild `components`,
    /// for the other replicas of a PostgreSQL store. A SQLite store has one
    /// replica, whose sessions a restart ends anyway: nothing is recorded.
    /// The row is written with the transaction's next operation insert, or
    /// else just before it commits: one round trip fewer for a write.
    pub async fn insert_fanout_intent(
        &mut self,
        scope: &str,
        scope_id: &str,
        components: &[&str],
        operation_id: Option<&str>,
    ) -> Result<()> {
        if self.backend == Backend::Sqlite {
            return Ok(());
        }
        self.pending_intents
            .push(super::fanout_intents::PendingIntent {
                scope: scope.to_string(),
                scope_id: scope_id.to_string(),
                components: components.join(","),
                operation_id: operation_id.map(str::to_string),
                created_at: now_ms(),
                replica_id: self.replica_id.to_string(),
            });
        Ok(())
    }

    /// Ends every live operation of a sandbox and its fleet targets in
    /// `state`, and the fleet operations left without a live target.
    pub async fn resolve_live_operations_for_lifecycle(
        &mut self,
        sandbox_id: &str,
        state: OperationState,
        error: &str,
    ) -> Result<u64> {
        let now = now_ms();
        let ended = sqlx::query(AssertSqlSafe(format!(
            "UPDATE operations SET state = $2, outcome = $3, error = $4, updated_at = $5, completed_at = $5 \
             WHERE sandbox_id = $1 AND state IN ('PENDING', 'DELIVERED') RETURNING {OPERATION_COLUMNS}"
        )))
        .bind(sandbox_id)
        .bind(state.as_str())
        .bind(Outcome::Lifecycle.as_str())
        .bind(error)
        .bind(now)
        .fetch_all(self.conn())
        .await?;
        for row in &ended {
            self.operation_changed_to(operation_from_row(row)?);
        }
        let fleet = sqlx::query(
            "UPDATE operation_targets SET state = $2, outcome = $3, error = $4, updated_at = $5 \
             WHERE sandbox_id = $1 AND state IN ('PENDING', 'DELIVERED') RETURNING operation_id",
        )
        .bind(sandbox_id)
        .bind(state.as_str())
        .bind(Outcome::Lifecycle.as_str())
        .bind(error)
        .bind(now)
        .fetch_all(self.conn())
        .await?;
        let mut ended_targets: std::collections::BTreeMap<String, u64> = Default::default();
        for row in &fleet {
            *ended_targets
                .entry(row.try_get("operation_id")?)
                .or_default() += 1;
        }
        for (operation_id, n) in ended_targets {
            self.count_finished_targets(&operation_id, state, n).await?;
        }
        Ok(u64::try_from(ended.len()).unwrap_or(u64::MAX))
    }

    pub async fn get_operation(&mut self, id: &str) -> Result<OperationRecord> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {OPERATION_COLUMNS} FROM operations WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.conn())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("operation {id} not found")))?;
        operation_from_row(&row)
    }
}

impl WriteTx {
    /// Ends one live operation because of the sandbox's lifecycle.
    pub async fn resolve_operation_by_lifecycle(
        &mut self,
        operation_id: &str,
        state: OperationState,
        error: &str,
    ) -> Result<()> {
        let now = now_ms();
        let ended = sqlx::query(AssertSqlSafe(format!(
            "UPDATE operations SET state = $2, outcome = $3, error = $4, updated_at = $5, completed_at = $5 \
             WHERE id = $1 AND state IN ('PENDING', 'DELIVERED') RETURNING {OPERATION_COLUMNS}"
        )))
        .bind(operation_id)
        .bind(state.as_str())
        .bind(Outcome::Lifecycle.as_str())
        .bind(error)
        .bind(now)
        .fetch_optional(self.conn())
        .await?;
        if let Some(row) = ended {
            self.operation_changed_to(operation_from_row(&row)?);
        }
        Ok(())
    }
}

impl Store {
    /// A snapshot carrying `(policy_revision, settings_revision)` was sent:
    /// pending operations with exactly that tuple are DELIVERED, and pending
    /// ones it leaves behind were never sent and are SUPERSEDED. Called only
    /// for a snapshot whose build saw a pending operation
    /// ([`SandboxConfigInputs::pending_operation`](super::SandboxConfigInputs)),
    /// so fanouts and reconciles stay off the store's write lock.
    pub async fn mark_delivered(
        &self,
        place: WritePlace,
        sandbox_id: &str,
        policy_revision: u64,
        settings_revision: u64,
    ) -> Result<u64> {
        let (store, sandbox_id) = (self.clone(), sandbox_id.to_string());
        self.run_write(place, async move {
            store
                .mark_delivered_now(&sandbox_id, policy_revision, settings_revision)
                .await
        })
        .await
    }

    async fn mark_delivered_now(
        &self,
        sandbox_id: &str,
        policy_revision: u64,
        settings_revision: u64,
    ) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let now = now_ms();
        let delivered = sqlx::query(AssertSqlSafe(format!(
            "UPDATE operations SET state = 'DELIVERED', updated_at = $4 WHERE sandbox_id = $1 \
             AND state = 'PENDING' AND policy_revision = $2 AND settings_revision = $3 \
             AND provider_env_revision IS NULL RETURNING {OPERATION_COLUMNS}"
        )))
        .bind(sandbox_id)
        .bind(to_i64(policy_revision))
        .bind(to_i64(settings_revision))
        .bind(now)
        .fetch_all(tx.conn())
        .await?;
        let superseded = sqlx::query(AssertSqlSafe(format!(
            "UPDATE operations SET state = 'SUPERSEDED', outcome = $5, \
             error = 'a newer revision was delivered before this one', updated_at = $4, completed_at = $4 \
             WHERE sandbox_id = $1 AND state = 'PENDING' AND policy_revision <= $2 AND settings_revision <= $3 \
             AND NOT (policy_revision = $2 AND settings_revision = $3) \
             AND provider_env_revision IS NULL RETURNING {OPERATION_COLUMNS}"
        )))
        .bind(sandbox_id)
        .bind(to_i64(policy_revision))
        .bind(to_i64(settings_revision))
        .bind(now)
        .bind(Outcome::SupersededByNewer.as_str())
        .fetch_all(tx.conn())
        .await?;
        for row in delivered.iter().chain(&superseded) {
            tx.operation_changed_to(operation_from_row(row)?);
        }
        tx.commit().await?;
        Ok(u64::try_from(delivered.len() + superseded.len()).unwrap_or(u64::MAX))
    }
}

impl Store {
    /// Live fleet operations whose targets were being listed when the
    /// gateway stopped.
    pub async fn unfinished_target_listings(&self) -> Result<Vec<OperationRecord>> {
        sqlx::query(AssertSqlSafe(format!(
            "SELECT {OPERATION_COLUMNS} FROM operations WHERE targets_listing <> 0 \
             AND state IN ('PENDING', 'DELIVERED') ORDER BY created_at, id"
        )))
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(operation_from_row)
        .collect()
    }

    /// The greatest sandbox id listed so far as a target of the operation
    /// (listing goes in id order), or "" for none.
    pub async fn last_listed_target(&self, operation_id: &str) -> Result<String> {
        let last: Option<String> = sqlx::query_scalar(
            "SELECT MAX(sandbox_id) FROM operation_targets WHERE operation_id = $1",
        )
        .bind(operation_id)
        .fetch_one(self.pool())
        .await?;
        Ok(last.unwrap_or_default())
    }

    /// Sandboxes a fleet operation targets.
    pub async fn operation_target_ids(&self, operation_id: &str) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT sandbox_id FROM operation_targets WHERE operation_id = $1 ORDER BY sandbox_id",
        )
        .bind(operation_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("sandbox_id").map_err(Into::into))
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::sqlite_for_tests;

    fn keyed(id: &str, expires_at: i64) -> NewOperation {
        NewOperation {
            id: id.into(),
            target_kind: TargetKind::Global,
            target: String::new(),
            sandbox_id: None,
            policy_revision: 0,
            settings_revision: 0,
            global_policy_revision: None,
            no_op: true,
            touches_policy: false,
            caller: "ops".into(),
            idempotency_key: Some("deploy-42".into()),
            request_fingerprint: Some(format!("fingerprint of {id}")),
            idempotency_expires_at: Some(expires_at),
            provider_env_revision: None,
        }
    }

    async fn lookups(store: &Store) -> (Option<String>, Option<String>) {
        let read = store
            .find_idempotent(TargetKind::Global, "", "ops", "deploy-42")
            .await
            .unwrap()
            .map(|found| found.operation_id);
        let mut tx = store.begin_write().await.unwrap();
        let in_write = tx
            .find_idempotent(TargetKind::Global, "", "ops", "deploy-42")
            .await
            .unwrap()
            .map(|found| found.operation_id);
        drop(tx);
        (read, in_write)
    }

    /// Probe: a key stayed reserved up to 60 s past its retention, until the sweep (every
    /// 60 s) released it. A lookup now reads the key's expiry itself: the key's time is
    /// written in the store as ended, no sweep runs, and the key is free for a new write.
    #[tokio::test]
    async fn a_key_past_its_retention_is_free_at_lookup_without_a_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let hour = 3_600_000;
        let mut tx = store.begin_write().await.unwrap();
        tx.insert_operation(&keyed("op-live", now_ms() + hour))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let held = Some("op-live".to_string());
        assert_eq!(lookups(&store).await, (held.clone(), held));

        // Its retention ends: nothing but the stored expiry changes.
        sqlx::query("UPDATE operations SET idempotency_expires_at = $1 WHERE id = 'op-live'")
            .bind(now_ms() - 1)
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(lookups(&store).await, (None, None));

        // The write that finds it free takes it: the old operation's hold is released in
        // the same transaction, or the unique index would refuse the insert.
        let mut tx = store.begin_write().await.unwrap();
        assert!(
            tx.find_idempotent(TargetKind::Global, "", "ops", "deploy-42")
                .await
                .unwrap()
                .is_none()
        );
        tx.insert_operation(&keyed("op-new", now_ms() + hour))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let held = Some("op-new".to_string());
        assert_eq!(lookups(&store).await, (held.clone(), held));
        assert_eq!(store.expire_idempotency_keys().await.unwrap(), 0);
    }
}
