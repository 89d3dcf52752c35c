//! Writes that resolve operations from supervisor reports, and the last
//! report per sandbox (shown by `sessions inspect`).

use std::collections::HashMap;
use std::sync::LazyLock;

use sqlx::{AssertSqlSafe, Row};

use super::error::Result;
use super::operations::OPERATION_COLUMNS;
use super::records::{
    Lifecycle, OperationRecord, OperationState, Outcome, TargetKind, operation_from_row, u64_col,
};
use super::{Backend, Store, WriteTx, json_list, json_rows_of, now_ms};

/// Ends a live operation and returns the row, so its waiters need not read it.
static FINISH_OPERATION_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE operations SET state = $2, outcome = $3, error = $4, updated_at = $5, completed_at = $5 \
         WHERE id = $1 AND state IN ('PENDING', 'DELIVERED') RETURNING {OPERATION_COLUMNS}"
    )
});

/// The count column of a fleet operation that holds its targets in `state`.
fn target_count_column(state: OperationState) -> &'static str {
    match state {
        OperationState::Pending | OperationState::Delivered => "targets_pending",
        OperationState::Applied => "targets_applied",
        OperationState::Failed => "targets_failed",
        OperationState::Superseded => "targets_superseded",
        OperationState::Inactive => "targets_inactive",
        OperationState::Cancelled => "targets_cancelled",
    }
}

/// A fleet operation's pending target for one sandbox.
#[derive(Debug, Clone)]
pub struct LiveTarget {
    pub operation_id: String,
    pub target_kind: TargetKind,
    pub settings_revision: u64,
    pub global_policy_revision: u64,
    pub touches_policy: bool,
}

/// What one round of reports (one per sandbox) is resolved against.
#[derive(Debug, Default)]
pub struct RoundInputs {
    /// The lifecycle of each sandbox found; the others do not exist.
    pub lifecycles: HashMap<String, Lifecycle>,
    /// Live operations that target these sandboxes directly, oldest first.
    pub sandbox_operations: Vec<OperationRecord>,
    /// Live fleet targets of these sandboxes, as `(sandbox id, target)`.
    pub targets: Vec<(String, LiveTarget)>,
}

/// A live target as [`live_targets_sql`] reads it: sandbox, operation,
/// kind, settings revision, global policy revision, touches policy.
type LiveTargetRow = (String, String, String, u64, u64, i64);

/// The live fleet targets of the sandboxes in parameter 1, as one
/// aggregated row (see [`Backend::json_rows`]) of [`LiveTargetRow`]s, oldest
/// operation first.
fn live_targets_sql(backend: Backend) -> String {
    let select = format!(
        "SELECT t.sandbox_id, o.id, o.target_kind, o.settings_revision, \
         o.global_policy_revision, o.touches_policy, o.created_at \
         FROM operation_targets t JOIN operations o ON o.id = t.operation_id \
         WHERE t.sandbox_id {} AND t.state IN ('PENDING', 'DELIVERED')",
        backend.in_json_list(1)
    );
    backend.json_rows(
        &select,
        &[
            "sandbox_id",
            "id",
            "target_kind",
            "settings_revision",
            "global_policy_revision",
            "touches_policy",
        ],
        "created_at, id",
    )
}

fn live_target(row: LiveTargetRow) -> Result<(String, LiveTarget)> {
    let (sandbox_id, operation_id, kind, settings, global_policy, touches_policy) = row;
    Ok((
        sandbox_id,
        LiveTarget {
            operation_id,
            target_kind: TargetKind::parse(&kind)?,
            settings_revision: settings,
            global_policy_revision: global_policy,
            touches_policy: touches_policy != 0,
        },
    ))
}

/// One sandbox's report, as kept for `sessions inspect`.
#[derive(Debug, serde::Serialize)]
pub struct ReportRow<'a> {
    pub sandbox_id: &'a str,
    pub status: &'a str,
    pub revisions_json: String,
    pub reason: &'a str,
    /// The reported policy revision and hash; kept as the applied policy
    /// only when `status` is `APPLIED`.
    pub policy_revision: u64,
    pub policy_hash: &'a str,
}

/// A sandbox's desired policy revision beside the one its supervisor last
/// reported applied (0 and empty when none has been).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyProgress {
    pub desired: u64,
    pub applied: u64,
    pub applied_hash: String,
    /// The reason of the supervisor's last report when it was a failed apply that
    /// quarantined the sandbox (`fail_closed`); None otherwise.
    pub quarantine: Option<String>,
}

/// The stored last report of a sandbox.
#[derive(Debug, Clone)]
pub struct LastReport {
    pub status: String,
    pub revisions_json: String,
    pub reason: String,
    pub reported_at: i64,
}

impl Store {
    pub async fn last_report(&self, sandbox_id: &str) -> Result<Option<LastReport>> {
        let row = sqlx::query(
            "SELECT status, revisions_json, reason, reported_at FROM supervisor_reports WHERE sandbox_id = $1",
        )
        .bind(sandbox_id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(last_report_from_row).transpose()
    }

    /// Desired and applied policy revisions of these sandboxes, by id;
    /// unknown ids are absent.
    pub async fn policy_progress(
        &self,
        sandbox_ids: &[String],
    ) -> Result<HashMap<String, PolicyProgress>> {
        if sandbox_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT s.id, s.policy_revision, COALESCE(r.applied_policy_revision, 0) AS applied_revision, \
             COALESCE(r.applied_policy_hash, '') AS applied_hash, \
             COALESCE(r.status, '') AS report_status, COALESCE(r.reason, '') AS report_reason \
             FROM sandboxes s LEFT JOIN supervisor_reports r ON r.sandbox_id = s.id \
             WHERE s.id {}",
            self.backend().in_json_list(1)
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(sandbox_ids)?)
            .fetch_all(self.pool())
            .await?;
        let mut progress = HashMap::with_capacity(rows.len());
        for row in &rows {
            progress.insert(
                row.try_get("id")?,
                PolicyProgress {
                    desired: u64_col(row, "policy_revision")?,
                    applied: u64_col(row, "applied_revision")?,
                    applied_hash: row.try_get("applied_hash")?,
                    quarantine: match row.try_get::<String, _>("report_status")?.as_str() {
                        "FAILED_CLOSED" => Some(row.try_get("report_reason")?),
                        _ => None,
                    },
                },
            );
        }
        Ok(progress)
    }
}

/// A `supervisor_reports` row as kept.
pub(super) fn last_report_from_row(row: &sqlx::any::AnyRow) -> Result<LastReport> {
    Ok(LastReport {
        status: row.try_get("status")?,
        revisions_json: row.try_get("revisions_json")?,
        reason: row.try_get("reason")?,
        reported_at: row.try_get("reported_at")?,
    })
}

impl WriteTx {
    /// Locks these sandboxes, in id order so that replicas lock in one
    /// order, and returns the lifecycle of each one found.
    pub async fn lock_sandboxes(&mut self, ids: &[String]) -> Result<HashMap<String, Lifecycle>> {
        let select = format!(
            "SELECT id, lifecycle FROM sandboxes WHERE id {} ORDER BY id{}",
            self.backend.in_json_list(1),
            self.for_update()
        );
        let sql = self.backend.json_rows(&select, &["id", "lifecycle"], "id");
        let rows: Vec<(String, String)> = self.fetch_json_rows(sql, json_list(ids)?).await?;
        let mut found = HashMap::with_capacity(rows.len());
        for (id, lifecycle) in rows {
            found.insert(id, Lifecycle::parse(&lifecycle)?);
        }
        Ok(found)
    }

    /// The last reports kept of these sandboxes, as `(sandbox id, report)`.
    pub async fn last_reports_of(
        &mut self,
        sandbox_ids: &[String],
    ) -> Result<Vec<(String, LastReport)>> {
        let sql = format!(
            "SELECT sandbox_id, status, revisions_json, reason, reported_at \
             FROM supervisor_reports WHERE sandbox_id {} ORDER BY sandbox_id",
            self.backend.in_json_list(1)
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(sandbox_ids)?)
            .fetch_all(self.conn())
            .await?
            .iter()
            .map(|row| Ok((row.try_get("sandbox_id")?, last_report_from_row(row)?)))
            .collect()
    }

    /// Live operations that target these sandboxes directly, oldest first.
    pub async fn live_sandbox_operations_of(
        &mut self,
        sandbox_ids: &[String],
    ) -> Result<Vec<OperationRecord>> {
        let sql = format!(
            "SELECT {OPERATION_COLUMNS} FROM operations WHERE sandbox_id {} \
             AND state IN ('PENDING', 'DELIVERED') ORDER BY created_at, id",
            self.backend.in_json_list(1)
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(sandbox_ids)?)
            .fetch_all(self.conn())
            .await?
            .iter()
            .map(operation_from_row)
            .collect()
    }

    /// Live fleet targets of these sandboxes, as `(sandbox id, target)`.
    pub async fn live_targets_of(
        &mut self,
        sandbox_ids: &[String],
    ) -> Result<Vec<(String, LiveTarget)>> {
        let sql = live_targets_sql(self.backend);
        let rows: Vec<LiveTargetRow> = self.fetch_json_rows(sql, json_list(sandbox_ids)?).await?;
        rows.into_iter().map(live_target).collect()
    }

    /// Locks these sandboxes and reads what one round of their reports is
    /// resolved against.
    pub async fn round_inputs(&mut self, sandbox_ids: &[String]) -> Result<RoundInputs> {
        match self.backend {
            // One statement each, after the locks: a statement sees what was
            // committed when it started, so one that waited for a lock would
            // miss what the lock's holder wrote.
            Backend::Postgres => Ok(RoundInputs {
                lifecycles: self.lock_sandboxes(sandbox_ids).await?,
                sandbox_operations: self.live_sandbox_operations_of(sandbox_ids).await?,
                targets: self.live_targets_of(sandbox_ids).await?,
            }),
            Backend::Sqlite => self.round_inputs_at_once(sandbox_ids).await,
        }
    }

    /// [`WriteTx::round_inputs`] on SQLite, whose one writer holds the whole
    /// database, so nothing changes between reads: one statement reads the
    /// sandboxes, which of them have a live operation of their own, and their
    /// live targets. Each statement is a hand-off to the connection's thread
    /// and back; a fanout's acks resolve in rounds of a few dozen, and three
    /// statements a round were a third of them.
    async fn round_inputs_at_once(&mut self, sandbox_ids: &[String]) -> Result<RoundInputs> {
        let sql = format!(
            "SELECT (SELECT json_group_array(json_array(s.id, s.lifecycle, \
             EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id \
             AND o.state IN ('PENDING', 'DELIVERED'))) ORDER BY s.id) \
             FROM sandboxes s WHERE s.id {}) AS sandboxes, ({}) AS targets",
            self.backend.in_json_list(1),
            live_targets_sql(self.backend)
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(sandbox_ids)?)
            .fetch_one(self.conn())
            .await?;
        let sandboxes: Vec<(String, String, i64)> = json_rows_of(&row, "sandboxes")?;
        let targets: Vec<LiveTargetRow> = json_rows_of(&row, "targets")?;
        let mut lifecycles = HashMap::with_capacity(sandboxes.len());
        let mut with_operations = Vec::new();
        for (id, lifecycle, has_operation) in sandboxes {
            lifecycles.insert(id.clone(), Lifecycle::parse(&lifecycle)?);
            if has_operation != 0 {
                with_operations.push(id);
            }
        }
        // A fanout's sandboxes have none: the operations are read only when
        // there are some.
        let sandbox_operations = if with_operations.is_empty() {
            Vec::new()
        } else {
            self.live_sandbox_operations_of(&with_operations).await?
        };
        Ok(RoundInputs {
            lifecycles,
            sandbox_operations,
            targets: targets
                .into_iter()
                .map(live_target)
                .collect::<Result<_>>()?,
        })
    }

    /// Moves a live operation to a terminal state; terminal ones never change.
    pub async fn finish_operation(
        &mut self,
        id: &str,
        state: OperationState,
        outcome: Outcome,
        error: &str,
    ) -> Result<bool> {
        let now = now_ms();
        let ended = sqlx::query(AssertSqlSafe(FINISH_OPERATION_SQL.as_str()))
            .bind(id)
            .bind(state.as_str())
            .bind(outcome.as_str())
            .bind(error)
            .bind(now)
            .fetch_optional(self.conn())
            .await?;
        match ended {
            Some(row) => {
                self.operation_changed_to(operation_from_row(&row)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Ends these sandboxes' live targets of one fleet operation, and the
    /// operation itself when no target is left pending. Returns whether the
    /// operation ended.
    pub async fn finish_targets(
        &mut self,
        operation_id: &str,
        sandbox_ids: &[String],
        state: OperationState,
        outcome: Outcome,
        error: &str,
    ) -> Result<bool> {
        let sql = format!(
            "UPDATE operation_targets SET state = $2, outcome = $3, error = $4, updated_at = $5 \
             WHERE operation_id = $1 AND state IN ('PENDING', 'DELIVERED') AND sandbox_id {}",
            self.backend.in_json_list(6)
        );
        let finished = sqlx::query(AssertSqlSafe(sql))
            .bind(operation_id)
            .bind(state.as_str())
            .bind(outcome.as_str())
            .bind(error)
            .bind(now_ms())
            .bind(json_list(sandbox_ids)?)
            .execute(self.conn())
            .await?
            .rows_affected();
        if finished == 0 {
            return Ok(false);
        }
        self.count_finished_targets(operation_id, state, finished)
            .await
    }

    /// Moves `n` targets of a fleet operation from pending to `state` in
    /// its counts, and ends the operation when none is left pending.
    /// Returns whether the operation ended.
    pub(crate) async fn count_finished_targets(
        &mut self,
        operation_id: &str,
        state: OperationState,
        n: u64,
    ) -> Result<bool> {
        let column = target_count_column(state);
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        // The row update also locks the row (PostgreSQL) until commit, so of
        // two last acks committing at once only the second sees zero pending.
        let row = sqlx::query(AssertSqlSafe(format!(
            "UPDATE operations SET targets_pending = targets_pending - $2, {column} = {column} + $2 \
             WHERE id = $1 RETURNING targets_pending, targets_applied, targets_failed, \
             targets_superseded, targets_listing"
        )))
        .bind(operation_id)
        .bind(n)
        .fetch_optional(self.conn())
        .await?;
        // The fleet operation's counts changed: its waiters want to know.
        self.operation_changed(operation_id);
        let Some(row) = row else {
            return Ok(false);
        };
        // Targets still being listed may be pending yet.
        if row.try_get::<i64, _>("targets_pending")? > 0
            || row.try_get::<i64, _>("targets_listing")? != 0
        {
            return Ok(false);
        }
        let applied = u64_col(&row, "targets_applied")?;
        let failed = u64_col(&row, "targets_failed")?;
        let (state, outcome, error) = if failed > 0 {
            (
                OperationState::Failed,
                Outcome::FailedRetainedLastKnownGood,
                format!("{failed} target(s) failed to apply; see `openshell operations get`"),
            )
        } else if applied > 0 {
            (OperationState::Applied, Outcome::Applied, String::new())
        } else if u64_col(&row, "targets_superseded")? > 0 {
            // No target ran this revision: a later write reached each first.
            (
                OperationState::Superseded,
                Outcome::SupersededByNewer,
                "a newer write reached every target first".to_string(),
            )
        } else {
            (OperationState::Inactive, Outcome::Lifecycle, String::new())
        };
        self.finish_operation(operation_id, state, outcome, &error)
            .await
    }

    /// Keeps each sandbox's report as its last one (one report per sandbox).
    pub async fn record_reports(&mut self, reports: &[ReportRow<'_>]) -> Result<()> {
        // The rows travel as one JSON array of objects: one parameter and
        // one statement text whatever the number of reports.
        let rows = match self.backend {
            Backend::Sqlite => {
                "SELECT json_extract(value, '$.sandbox_id'), json_extract(value, '$.status'), \
                 json_extract(value, '$.revisions_json'), json_extract(value, '$.reason'), $2, \
                 CASE WHEN json_extract(value, '$.status') = 'APPLIED' \
                 THEN json_extract(value, '$.policy_revision') ELSE 0 END, \
                 CASE WHEN json_extract(value, '$.status') = 'APPLIED' \
                 THEN json_extract(value, '$.policy_hash') ELSE '' END \
                 FROM json_each($1) WHERE true"
            }
            Backend::Postgres => {
                "SELECT r.sandbox_id, r.status, r.revisions_json, r.reason, $2, \
                 CASE WHEN r.status = 'APPLIED' THEN r.policy_revision ELSE 0 END, \
                 CASE WHEN r.status = 'APPLIED' THEN r.policy_hash ELSE '' END \
                 FROM jsonb_to_recordset(CAST($1 AS jsonb)) \
                 AS r(sandbox_id TEXT, status TEXT, revisions_json TEXT, reason TEXT, \
                 policy_revision BIGINT, policy_hash TEXT)"
            }
        };
        // Only an APPLIED report moves the applied policy: a failed or
        // retained one names the revision attempted, not the one running.
        // And only forward: a late or replayed report of an older revision
        // (or one of the provider environment alone, which names revision 0)
        // does not make the sandbox look as if it ran that one again.
        // `WHERE true` above: SQLite needs it before an upsert's ON CONFLICT.
        let moves_forward = "excluded.status = 'APPLIED' AND excluded.applied_policy_revision \
             >= supervisor_reports.applied_policy_revision";
        let sql = format!(
            "INSERT INTO supervisor_reports (sandbox_id, status, revisions_json, reason, reported_at, \
             applied_policy_revision, applied_policy_hash) \
             {rows} ON CONFLICT (sandbox_id) DO UPDATE SET status = excluded.status, \
             revisions_json = excluded.revisions_json, reason = excluded.reason, \
             reported_at = excluded.reported_at, \
             applied_policy_revision = CASE WHEN {moves_forward} \
             THEN excluded.applied_policy_revision ELSE supervisor_reports.applied_policy_revision END, \
             applied_policy_hash = CASE WHEN {moves_forward} \
             THEN excluded.applied_policy_hash ELSE supervisor_reports.applied_policy_hash END"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(reports)?)
            .bind(now_ms())
            .execute(self.conn())
            .await?;
        Ok(())
    }

    /// A successful first apply moves pending sandboxes to running.
    pub async fn mark_running(&mut self, sandbox_ids: &[String]) -> Result<()> {
        if sandbox_ids.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "UPDATE sandboxes SET lifecycle = 'running', updated_at = $1 \
             WHERE lifecycle = 'pending' AND id {}",
            self.backend.in_json_list(2)
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(now_ms())
            .bind(json_list(sandbox_ids)?)
            .execute(self.conn())
            .await?;
        Ok(())
    }
}
