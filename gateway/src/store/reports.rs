//! Writes that resolve operations from supervisor reports, and the last
//! report per sandbox (shown by `sessions inspect`).

use sqlx::{AssertSqlSafe, Row};

use super::operations::OPERATION_COLUMNS;
use super::records::{
    OperationRecord, OperationState, Outcome, TargetKind, operation_from_row, u64_col,
};
use super::{Store, WriteTx, now_ms};
use crate::error::Result;

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

    pub async fn finish_target(
        &mut self,
        operation_id: &str,
        sandbox_id: &str,
        state: OperationState,
        outcome: Outcome,
        error: &str,
    ) -> Result<()> {
        sqlx::query(
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
        // The fleet operation's counts changed: its waiters want to know.
        self.operation_changed(operation_id);
        Ok(())
    }

    /// Ends a fleet operation once none of its targets is live. Any failed
    /// target makes it FAILED; otherwise any applied one makes it APPLIED.
    pub async fn complete_fleet_if_done(&mut self, operation_id: &str) -> Result<bool> {
        // Two last acks committing at once would each see the other's target
        // still live under READ COMMITTED and neither would end the operation.
        // Locking the operation row first serialises them: the second one's
        // count then sees the first one's committed target.
        let lock = format!(
            "SELECT id FROM operations WHERE id = $1{}",
            self.for_update()
        );
        sqlx::query(AssertSqlSafe(lock))
            .bind(operation_id)
            .fetch_optional(self.conn())
            .await?;
        let rows = sqlx::query(
            "SELECT state, COUNT(*) AS n FROM operation_targets WHERE operation_id = $1 GROUP BY state",
        )
        .bind(operation_id)
        .fetch_all(self.conn())
        .await?;
        let mut live = 0;
        let mut failed = 0;
        let mut applied = 0;
        let mut first_error = String::new();
        for row in &rows {
            let n = u64_col(row, "n")?;
            match OperationState::parse(&row.try_get::<String, _>("state")?)? {
                OperationState::Pending | OperationState::Delivered => live += n,
                OperationState::Failed => failed += n,
                OperationState::Applied => applied += n,
                _ => {}
            }
        }
        if live > 0 {
            return Ok(false);
        }
        if failed > 0 {
            first_error =
                format!("{failed} target(s) failed to apply; see `openshell operations get`");
        }
        let (state, outcome) = if failed > 0 {
            (OperationState::Failed, Outcome::FailedRetainedLastKnownGood)
        } else if applied > 0 {
            (OperationState::Applied, Outcome::Applied)
        } else {
            (OperationState::Inactive, Outcome::Lifecycle)
        };
        self.finish_operation(operation_id, state, outcome, &first_error)
            .await
    }

    /// Fleet operations with a target on this sandbox that are still live.
    pub async fn fleet_operations_touching(&mut self, sandbox_id: &str) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT DISTINCT o.id FROM operation_targets t JOIN operations o ON o.id = t.operation_id \
             WHERE t.sandbox_id = $1 AND o.state IN ('PENDING', 'DELIVERED')",
        )
        .bind(sandbox_id)
        .fetch_all(self.conn())
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("id").map_err(Into::into))
            .collect()
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
