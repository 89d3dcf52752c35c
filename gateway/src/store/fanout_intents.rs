//! Fanout intents: every write on a PostgreSQL store records, in its own
//! transaction, which sessions must rebuild what. The other replicas
//! replay them (`peers/replay.rs`), so a write reaches their sessions even
//! when a hint is lost; old intents are removed.

use sqlx::Row;

use super::Store;
use super::error::Result;

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

    /// Up to `limit` intents after `after_id`, oldest first, recorded no
    /// later than `created_until_ms`.
    pub async fn fanout_intents_after(
        &self,
        after_id: i64,
        created_until_ms: i64,
        limit: i64,
    ) -> Result<Vec<FanoutIntent>> {
        let rows = sqlx::query(
            "SELECT id, scope, scope_id, components, replica_id FROM fanout_intents \
             WHERE id > $1 AND created_at <= $2 ORDER BY id LIMIT $3",
        )
        .bind(after_id)
        .bind(created_until_ms)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(FanoutIntent {
                    id: row.try_get("id")?,
                    scope: row.try_get("scope")?,
                    scope_id: row.try_get("scope_id")?,
                    components: row.try_get("components")?,
                    replica_id: row.try_get("replica_id")?,
                })
            })
            .collect()
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
