//! The session-owner index: which replica holds the live session of a
//! sandbox, under which session id and epoch. Other replicas read it to
//! send hints; a new session raises the epoch so late writes of an old one
//! are ignored.
//!
//! Claims are group-committed (`crate::group_commit`, [`OwnerClaims`]): after
//! a gateway restart every supervisor reconnects at once; each accepted
//! session must record itself as its sandbox's owner before it is
//! acknowledged. One task commits whatever claims have queued up in one
//! transaction instead of one serialised transaction per session.

use sqlx::Row;
use tokio::sync::{mpsc, oneshot};

use super::error::{Result, StoreError};
use super::records::u64_col;
use super::{Store, WriteTx, now_ms};
use crate::group_commit::take_queued;

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

/// Most claims committed in one transaction.
const MAX_CLAIM_BATCH: usize = 512;

type ClaimJob = (OwnerClaim, oneshot::Sender<Result<u64>>);

/// Handle to the claims task; cheap to clone.
#[derive(Clone, Debug)]
pub struct OwnerClaims {
    // Unbounded: each session waits for its own claim, so the queue never
    // holds more than one claim per connecting session.
    jobs: mpsc::UnboundedSender<ClaimJob>,
}

impl OwnerClaims {
    /// Starts the claims task; it ends when every handle is dropped.
    pub fn spawn(store: Store) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(commit_claims(store, queue));
        Self { jobs }
    }

    /// Records the session as its sandbox's owner; returns the new epoch.
    pub async fn claim(&self, claim: OwnerClaim) -> Result<u64> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((claim, reply))
            .map_err(|_| StoreError::stopping())?;
        answer.await.map_err(|_| StoreError::stopping())?
    }
}

async fn commit_claims(store: Store, mut queue: mpsc::UnboundedReceiver<ClaimJob>) {
    while let Some(first) = queue.recv().await {
        let (claims, replies): (Vec<OwnerClaim>, Vec<_>) =
            take_queued(&mut queue, first, MAX_CLAIM_BATCH)
                .into_iter()
                .unzip();
        match store.claim_sessions(&claims).await {
            Ok(epochs) => {
                for (reply, epoch) in replies.into_iter().zip(epochs) {
                    let _ = reply.send(Ok(epoch));
                }
            }
            Err(e) => {
                // One claim's failure must not fail the others: retry alone.
                tracing::debug!(error = %e, claims = claims.len(), "batched owner claims failed; claiming one by one");
                for (claim, reply) in claims.into_iter().zip(replies) {
                    let outcome = store
                        .claim_sessions(std::slice::from_ref(&claim))
                        .await
                        .map(|epochs| epochs.first().copied().unwrap_or(0));
                    let _ = reply.send(outcome);
                }
            }
        }
    }
}
