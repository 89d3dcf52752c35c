//! The replica registry: each replica sharing a PostgreSQL store records
//! the address its peer service answers on and refreshes a heartbeat, so
//! the others know whom to send hints to.

use sqlx::Row;

use super::error::Result;
use super::{Store, now_ms};

/// A replica whose heartbeat is recent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePeer {
    pub replica_id: String,
    pub peer_address: String,
}

impl Store {
    /// Records this replica and its peer address, or refreshes both.
    pub async fn register_replica(&self, replica_id: &str, peer_address: &str) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO replicas (replica_id, peer_address, started_at, heartbeat_at) \
             VALUES ($1, $2, $3, $3) ON CONFLICT (replica_id) DO UPDATE SET \
             peer_address = excluded.peer_address, started_at = excluded.started_at, \
             heartbeat_at = excluded.heartbeat_at",
        )
        .bind(replica_id)
        .bind(peer_address)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Refreshes this replica's heartbeat; false when its row is gone (a
    /// peer removed it as dead), so the caller registers again.
    pub async fn heartbeat_replica(&self, replica_id: &str) -> Result<bool> {
        let updated = sqlx::query("UPDATE replicas SET heartbeat_at = $2 WHERE replica_id = $1")
            .bind(replica_id)
            .bind(now_ms())
            .execute(self.pool())
            .await?
            .rows_affected();
        Ok(updated > 0)
    }

    /// Removes replicas whose heartbeat is older than `silent_since_ms`:
    /// they stopped without leaving (a crash), and a replica that comes back
    /// registers again.
    pub async fn remove_silent_replicas(&self, silent_since_ms: i64) -> Result<u64> {
        let removed = sqlx::query("DELETE FROM replicas WHERE heartbeat_at < $1")
            .bind(silent_since_ms)
            .execute(self.pool())
            .await?
            .rows_affected();
        Ok(removed)
    }

    /// Removes this replica from the registry when it stops.
    pub async fn deregister_replica(&self, replica_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM replicas WHERE replica_id = $1")
            .bind(replica_id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Replicas other than `except` whose heartbeat is not older than
    /// `heartbeat_after_ms`.
    pub async fn live_peers(&self, except: &str, heartbeat_after_ms: i64) -> Result<Vec<LivePeer>> {
        let rows = sqlx::query(
            "SELECT replica_id, peer_address FROM replicas \
             WHERE replica_id <> $1 AND heartbeat_at >= $2 ORDER BY replica_id",
        )
        .bind(except)
        .bind(heartbeat_after_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(LivePeer {
                    replica_id: row.try_get("replica_id")?,
                    peer_address: row.try_get("peer_address")?,
                })
            })
            .collect()
    }
}
