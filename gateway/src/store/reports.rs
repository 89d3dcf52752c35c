//! Writes that resolve operations from supervisor reports, and the last
//! report per sandbox (shown by `sessions inspect`).

use sqlx::{AssertSqlSafe, Row};

use super::operations::OPERATION_COLUMNS;
use super::records::{
    OperationRecord, OperationState, Outcome, TargetKind, operation_from_row, u64_col,
};
use super::{Store, WriteTx, now_ms};
use crate::error::Result;

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
        row.map(|row| {
            Ok(LastReport {
                status: row.try_get("status")?,
                revisions_json: row.try_get("revisions_json")?,
                reason: row.try_get("reason")?,
                reported_at: row.try_get("reported_at")?,
            })
        })
        .transpose()
    }
}

impl WriteTx {
    /// Live operations that target one sandbox directly, oldest first.
    pub async fn live_sandbox_operations(
        &mut self,
        sandbox_id: &str,
    ) -> Result<Vec<OperationRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {OPERATION_COLUMNS} FROM operations WHERE sandbox_id = $1 \
             AND state IN ('PENDING', 'DELIVERED') ORDER BY created_at, id"
        )))
        .bind(sandbox_id)
        .fetch_all(self.conn())
        .await?;
        rows.iter().map(operation_from_row).collect()
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
        let result = sqlx::query(
            "UPDATE operations SET state = $2, outcome = $3, error = $4, updated_at = $5, completed_at = $5 \
             WHERE id = $1 AND state IN ('PENDING', 'DELIVERED')",
        )
        .bind(id)
        .bind(state.as_str())
        .bind(outcome.as_str())
        .bind(error)
        .bind(now)
        .execute(self.conn())
        .await?;
        let changed = result.rows_affected() > 0;
        if changed {
            self.operation_changed(id);
        }
        Ok(changed)
    }

    /// Fleet targets of one sandbox that are still live.
    pub async fn live_targets_for_sandbox(&mut self, sandbox_id: &str) -> Result<Vec<LiveTarget>> {
        let rows = sqlx::query(
            "SELECT o.id, o.target_kind, o.settings_revision, o.global_policy_revision, o.touches_policy \
             FROM operation_targets t JOIN operations o ON o.id = t.operation_id \
             WHERE t.sandbox_id = $1 AND t.state IN ('PENDING', 'DELIVERED') ORDER BY o.created_at",
        )
        .bind(sandbox_id)
        .fetch_all(self.conn())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(LiveTarget {
                    operation_id: row.try_get("id")?,
                    target_kind: TargetKind::parse(&row.try_get::<String, _>("target_kind")?)?,
                    settings_revision: u64_col(row, "settings_revision")?,
                    global_policy_revision: u64_col(row, "global_policy_revision")?,
                    touches_policy: row.try_get::<i64, _>("touches_policy")? != 0,
                })
            })
            .collect()
    }

    /// Ends one sandbox's live target of a fleet operation, and the
    /// operation itself when that was its last live target. Returns whether
    /// the operation ended.
    pub async fn finish_target(
        &mut self,
        operation_id: &str,
        sandbox_id: &str,
        state: OperationState,
        outcome: Outcome,
        error: &str,
    ) -> Result<bool> {
        let result = sqlx::query(
            "UPDATE operation_targets SET state = $3, outcome = $4, error = $5, updated_at = $6 \
             WHERE operation_id = $1 AND sandbox_id = $2 AND state IN ('PENDING', 'DELIVERED')",
        )
        .bind(operation_id)
        .bind(sandbox_id)
        .bind(state.as_str())
        .bind(outcome.as_str())
        .bind(error)
        .bind(now_ms())
        .execute(self.conn())
        .await?;
        if result.rows_affected() == 0 {
            return Ok(false);
        }
        self.count_finished_targets(operation_id, state, 1).await
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
             WHERE id = $1 RETURNING targets_pending, targets_applied, targets_failed"
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
        if row.try_get::<i64, _>("targets_pending")? > 0 {
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
        } else {
            (OperationState::Inactive, Outcome::Lifecycle, String::new())
        };
        self.finish_operation(operation_id, state, outcome, &error)
            .await
    }

    pub async fn record_report(
        &mut self,
        sandbox_id: &str,
        status: &str,
        revisions_json: &str,
        reason: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO supervisor_reports (sandbox_id, status, revisions_json, reason, reported_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (sandbox_id) DO UPDATE SET status = excluded.status, \
             revisions_json = excluded.revisions_json, reason = excluded.reason, reported_at = excluded.reported_at",
        )
        .bind(sandbox_id)
        .bind(status)
        .bind(revisions_json)
        .bind(reason)
        .bind(now_ms())
        .execute(self.conn())
        .await?;
        Ok(())
    }

    /// A successful first apply moves a pending sandbox to running.
    pub async fn mark_running(&mut self, sandbox_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE sandboxes SET lifecycle = 'running', updated_at = $2 WHERE id = $1 AND lifecycle = 'pending'",
        )
        .bind(sandbox_id)
        .bind(now_ms())
        .execute(self.conn())
        .await?;
        Ok(())
    }
}
