//! Fanout intents: every write on a PostgreSQL store records, in its own
//! transaction, which sessions must rebuild what. The other replicas
//! replay them (`peers/replay.rs`), so a write reaches their sessions even
//! when a hint is lost; old intents are removed. Each replica's watermark,
//! the last intent it replayed, is kept here too, so a restarted replica
//! resumes where it stopped.

use sqlx::{AssertSqlSafe, Row};

use super::error::Result;
use super::{Backend, Store, WriteTx, json_list};

/// An intent recorded by a write transaction and not yet written: it goes
/// out with the next statement that can carry it (see
/// [`WriteTx::insert_fanout_intent`]).
#[derive(Debug, serde::Serialize)]
pub(super) struct PendingIntent {
    pub scope: String,
    pub scope_id: String,
    pub components: String,
    pub operation_id: Option<String>,
    pub created_at: i64,
    pub replica_id: String,
}

/// Inserts the pending intents given as a JSON array in parameter `param`.
pub(super) fn insert_pending_sql(param: usize) -> String {
    format!(
        "INSERT INTO fanout_intents (scope, scope_id, components, operation_id, created_at, replica_id) \
         SELECT r.scope, r.scope_id, r.components, r.operation_id, r.created_at, r.replica_id \
         FROM jsonb_to_recordset(CAST(${param} AS jsonb)) AS r(scope TEXT, scope_id TEXT, \
         components TEXT, operation_id TEXT, created_at BIGINT, replica_id TEXT)"
    )
}

impl WriteTx {
    /// Writes the intents no operation insert carried (PostgreSQL).
    pub(super) async fn write_pending_intents(&mut self) -> Result<()> {
        if self.pending_intents.is_empty() {
            return Ok(());
        }
        let intents = std::mem::take(&mut self.pending_intents);
        sqlx::query(AssertSqlSafe(insert_pending_sql(1)))
            .bind(json_list(&intents)?)
            .execute(self.conn())
            .await?;
        Ok(())
    }
}

/// One recorded intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanoutIntent {
    pub id: i64,
    pub scope: String,
    pub scope_id: String,
    /// Comma-separated component names.
    pub components: String,
    /// The replica whose write recorded it.
    pub replica_id: String,
}

impl Store {
    /// The newest intent's id; 0 when there is none.
    pub async fn latest_fanout_intent(&self) -> Result<i64> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) AS latest FROM fanout_intents")
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get("latest")?)
    }

    /// Up to `limit` intents after `after_id`, oldest first.
    pub async fn fanout_intents_after(
        &self,
        after_id: i64,
        limit: i64,
    ) -> Result<Vec<FanoutIntent>> {
        let rows = sqlx::query(
            "SELECT id, scope, scope_id, components, replica_id FROM fanout_intents \
             WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after_id)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// The intents among `ids` that exist (committed since they were looked for), oldest first.
    pub async fn fanout_intents_with_ids(&self, ids: &[i64]) -> Result<Vec<FanoutIntent>> {
        let in_ids = match self.backend() {
            Backend::Sqlite => "IN (SELECT value FROM json_each($1))",
            Backend::Postgres => {
                "= ANY(ARRAY(SELECT CAST(jsonb_array_elements_text(CAST($1 AS jsonb)) AS BIGINT)))"
            }
        };
        let sql = format!(
            "SELECT id, scope, scope_id, components, replica_id FROM fanout_intents \
             WHERE id {in_ids} ORDER BY id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(ids)?)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// The last intent `replica_id` replayed, as it saved it; `None` when it
    /// never saved one (or it was forgotten).
    pub async fn fanout_watermark(&self, replica_id: &str) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT last_intent_id FROM fanout_watermarks WHERE replica_id = $1")
            .bind(replica_id)
            .fetch_optional(self.pool())
            .await?;
        row.map(|row| Ok(row.try_get("last_intent_id")?))
            .transpose()
    }

    /// Saves `replica_id`'s watermark. It never moves back: ids only grow, and
    /// a late save from an older pass must not undo a newer one.
    pub async fn save_fanout_watermark(&self, replica_id: &str, last_intent_id: i64) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO fanout_watermarks (replica_id, last_intent_id, updated_at) \
             VALUES ($1, $2, $3) ON CONFLICT (replica_id) DO UPDATE SET \
             last_intent_id = CASE WHEN excluded.last_intent_id > fanout_watermarks.last_intent_id \
             THEN excluded.last_intent_id ELSE fanout_watermarks.last_intent_id END, \
             updated_at = excluded.updated_at",
        )
        .bind(replica_id)
        .bind(last_intent_id)
        .bind(super::now_ms())
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Removes the watermarks not saved since `saved_before_ms` (replicas
    /// gone for good, or started under another id); returns how many.
    pub async fn remove_fanout_watermarks_before(&self, saved_before_ms: i64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let removed = sqlx::query("DELETE FROM fanout_watermarks WHERE updated_at < $1")
            .bind(saved_before_ms)
            .execute(tx.conn())
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(removed)
    }

    /// Removes intents recorded before `created_before_ms`; returns how many.
    /// Ids grow with time, so the old intents are those before the first
    /// young one, found by walking the primary key from its oldest end: no
    /// index on `created_at` slows every write down.
    pub async fn remove_fanout_intents_before(&self, created_before_ms: i64) -> Result<u64> {
        let removed = sqlx::query(
            "DELETE FROM fanout_intents WHERE id < COALESCE((SELECT id FROM fanout_intents \
             WHERE created_at >= $1 ORDER BY id LIMIT 1), 9223372036854775807)",
        )
        .bind(created_before_ms)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(removed)
    }
}

fn intent_from_row(row: &sqlx::any::AnyRow) -> Result<FanoutIntent> {
    Ok(FanoutIntent {
        id: row.try_get("id")?,
        scope: row.try_get("scope")?,
        scope_id: row.try_get("scope_id")?,
        components: row.try_get("components")?,
        replica_id: row.try_get("replica_id")?,
    })
}
