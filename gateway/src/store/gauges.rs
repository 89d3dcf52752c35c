//! Store-wide readings for the gateway's `/metrics`: what the alert rules in
//! `deploy/monitoring/` need and no replica's own counters can see, because
//! the state lives in the shared store (operations still waiting, provider
//! credential expiry, replicas gone quiet). Read at each scrape.

use sqlx::Row;

use super::Store;
use super::error::Result;
use crate::metrics::StoreGauges;

impl Store {
    /// Reads the gauges; `live_since_ms`: a replica whose heartbeat is older
    /// counts as silent.
    pub async fn gauges(&self, live_since_ms: i64) -> Result<StoreGauges> {
        let operations = sqlx::query(
            "SELECT COUNT(*) AS pending, MIN(created_at) AS oldest FROM operations \
             WHERE state IN ('PENDING', 'DELIVERED')",
        )
        .fetch_one(self.pool())
        .await?;
        // Value expiry is a JSON column; providers are few, so the minimum is taken here.
        let expiry_rows = sqlx::query(
            "SELECT expires_at, value_expires_json FROM providers \
             WHERE expires_at IS NOT NULL OR value_expires_json <> '{}'",
        )
        .fetch_all(self.pool())
        .await?;
        let mut earliest: Option<i64> = None;
        for row in &expiry_rows {
            let provider: Option<i64> = row.try_get("expires_at")?;
            let values: String = row.try_get("value_expires_json")?;
            let values: std::collections::BTreeMap<String, i64> = serde_json::from_str(&values)
                .map_err(|e| super::StoreError::Corrupt(format!("provider value expiry: {e}")))?;
            for at in provider.into_iter().chain(values.into_values()) {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        }
        let replicas =
            sqlx::query("SELECT COUNT(*) AS silent FROM replicas WHERE heartbeat_at < $1")
                .bind(live_since_ms)
                .fetch_one(self.pool())
                .await?;
        Ok(StoreGauges {
            operations_pending: operations.try_get("pending")?,
            oldest_pending_created_at_ms: operations.try_get("oldest")?,
            earliest_credential_expiry_ms: earliest,
            replicas_silent: replicas.try_get("silent")?,
        })
    }
}
