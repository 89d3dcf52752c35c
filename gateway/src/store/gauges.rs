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
        let expiry = sqlx::query(
            "SELECT MIN(expires_at) AS earliest FROM providers WHERE expires_at IS NOT NULL",
        )
        .fetch_one(self.pool())
        .await?;
        let replicas =
            sqlx::query("SELECT COUNT(*) AS silent FROM replicas WHERE heartbeat_at < $1")
                .bind(live_since_ms)
                .fetch_one(self.pool())
                .await?;
        Ok(StoreGauges {
            operations_pending: operations.try_get("pending")?,
            oldest_pending_created_at_ms: operations.try_get("oldest")?,
            earliest_credential_expiry_ms: expiry.try_get("earliest")?,
            replicas_silent: replicas.try_get("silent")?,
        })
    }
}
