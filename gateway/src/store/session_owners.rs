//! The session-owner index: which replica holds the live session of a
//! sandbox, under which session id and epoch. Other replicas read it to
//! send hints; a new session raises the epoch so late writes of an old one
//! are ignored.

use sqlx::Row;

use super::records::u64_col;
use super::sandboxes::to_i64;
use super::{Store, WriteTx, now_ms};
use crate::error::Result;

/// One row of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOwner {
    pub sandbox_id: String,
    pub replica_id: String,
    pub session_id: String,
    pub epoch: u64,
}

/// What is recorded when a session is accepted.
#[derive(Debug, Clone)]
pub struct OwnerClaim<'a> {
    pub sandbox_id: &'a str,
    pub replica_id: &'a str,
    pub session_id: &'a str,
    pub supervisor_version: &'a str,
    pub protocol_revision: u32,
    pub mode: &'a str,
}

impl Store {
    pub async fn session_owner(&self, sandbox_id: &str) -> Result<Option<SessionOwner>> {
        let row = sqlx::query(
            "SELECT sandbox_id, replica_id, session_id, epoch FROM session_owners WHERE sandbox_id = $1",
        )
        .bind(sandbox_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| {
            Ok(SessionOwner {
                sandbox_id: row.try_get("sandbox_id")?,
                replica_id: row.try_get("replica_id")?,
                session_id: row.try_get("session_id")?,
                epoch: u64_col(&row, "epoch")?,
            })
        })
        .transpose()
    }

    /// Records this session as the owner; returns the new epoch.
    pub async fn claim_session(&self, claim: &OwnerClaim<'_>) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let epoch = tx.claim_session(claim).await?;
        tx.commit().await?;
        Ok(epoch)
    }

    /// Drops the row if it still names this session.
    pub async fn release_session(&self, sandbox_id: &str, session_id: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM session_owners WHERE sandbox_id = $1 AND session_id = $2")
            .bind(sandbox_id)
            .bind(session_id)
            .execute(tx.conn())
            .await?;
        tx.commit().await
    }

    /// Drops every row this replica owns (on start: its old sessions are gone).
    pub async fn release_replica_sessions(&self, replica_id: &str) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let result = sqlx::query("DELETE FROM session_owners WHERE replica_id = $1")
            .bind(replica_id)
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        Ok(result.rows_affected())
    }
}

impl WriteTx {
    async fn claim_session(&mut self, claim: &OwnerClaim<'_>) -> Result<u64> {
        let now = now_ms();
        let sql = format!(
            "SELECT epoch FROM session_owners WHERE sandbox_id = $1{}",
            self.for_update()
        );
        let previous = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(claim.sandbox_id)
            .fetch_optional(self.conn())
            .await?
            .map(|row| u64_col(&row, "epoch"))
            .transpose()?
            .unwrap_or(0);
        let epoch = previous + 1;
        sqlx::query(
            "INSERT INTO session_owners (sandbox_id, replica_id, session_id, epoch, supervisor_version, \
             protocol_revision, mode, connected_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) \
             ON CONFLICT (sandbox_id) DO UPDATE SET replica_id = excluded.replica_id, \
             session_id = excluded.session_id, epoch = excluded.epoch, \
             supervisor_version = excluded.supervisor_version, protocol_revision = excluded.protocol_revision, \
             mode = excluded.mode, connected_at = excluded.connected_at, heartbeat_at = excluded.heartbeat_at",
        )
        .bind(claim.sandbox_id)
        .bind(claim.replica_id)
        .bind(claim.session_id)
        .bind(to_i64(epoch))
        .bind(claim.supervisor_version)
        .bind(i64::from(claim.protocol_revision))
        .bind(claim.mode)
        .bind(now)
        .execute(self.conn())
        .await?;
        Ok(epoch)
    }
}
