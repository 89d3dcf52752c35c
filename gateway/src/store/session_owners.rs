//! The session-owner index: which replica holds the live session of a
//! sandbox, under which session id and epoch. Other replicas read it to
//! send hints; a new session raises the epoch so late writes of an old one
//! are ignored.

use sqlx::Row;

use super::records::u64_col;
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
pub struct OwnerClaim {
    pub sandbox_id: String,
    pub replica_id: String,
    pub session_id: String,
    pub supervisor_version: String,
    pub protocol_revision: u32,
    pub mode: &'static str,
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

    /// Records each session as its sandbox's owner in one transaction;
    /// returns the new epochs, in order.
    pub async fn claim_sessions(&self, claims: &[OwnerClaim]) -> Result<Vec<u64>> {
        let mut tx = self.begin_write().await?;
        let mut epochs = Vec::with_capacity(claims.len());
        for claim in claims {
            epochs.push(tx.claim_session(claim).await?);
        }
        tx.commit().await?;
        Ok(epochs)
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
    /// One statement: the upsert raises the epoch of an existing row and
    /// holds its row lock (PostgreSQL) until commit.
    async fn claim_session(&mut self, claim: &OwnerClaim) -> Result<u64> {
        let row = sqlx::query(
            "INSERT INTO session_owners (sandbox_id, replica_id, session_id, epoch, supervisor_version, \
             protocol_revision, mode, connected_at, heartbeat_at) VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $7) \
             ON CONFLICT (sandbox_id) DO UPDATE SET replica_id = excluded.replica_id, \
             session_id = excluded.session_id, epoch = session_owners.epoch + 1, \
             supervisor_version = excluded.supervisor_version, protocol_revision = excluded.protocol_revision, \
             mode = excluded.mode, connected_at = excluded.connected_at, heartbeat_at = excluded.heartbeat_at \
             RETURNING epoch",
        )
        .bind(&claim.sandbox_id)
        .bind(&claim.replica_id)
        .bind(&claim.session_id)
        .bind(&claim.supervisor_version)
        .bind(i64::from(claim.protocol_revision))
        .bind(claim.mode)
        .bind(now_ms())
        .fetch_one(self.conn())
        .await?;
        u64_col(&row, "epoch")
    }
}
