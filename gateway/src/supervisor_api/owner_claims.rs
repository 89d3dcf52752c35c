//! Group commit (`crate::group_commit`) of session-owner claims. After a
//! gateway restart every supervisor reconnects at once; each accepted
//! session must record itself as its sandbox's owner before it is
//! acknowledged. One task commits whatever claims have queued up in one
//! transaction instead of one serialised transaction per session.

use tokio::sync::{mpsc, oneshot};

use crate::error::{GatewayError, Result};
use crate::group_commit::take_queued;
use crate::store::{OwnerClaim, Store};

/// Most claims committed in one transaction.
const MAX_BATCH: usize = 512;

type Job = (OwnerClaim, oneshot::Sender<Result<u64>>);

/// Handle to the claims task; cheap to clone.
#[derive(Clone, Debug)]
pub struct OwnerClaims {
    // Unbounded: each session waits for its own claim, so the queue never
    // holds more than one claim per connecting session.
    jobs: mpsc::UnboundedSender<Job>,
}

impl OwnerClaims {
    /// Starts the claims task; it ends when every handle is dropped.
    pub fn spawn(store: Store) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(store, queue));
        Self { jobs }
    }

    /// Records the session as its sandbox's owner; returns the new epoch.
    pub async fn claim(&self, claim: OwnerClaim) -> Result<u64> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((claim, reply))
            .map_err(|_| GatewayError::stopping())?;
        answer.await.map_err(|_| GatewayError::stopping())?
    }
}

async fn run(store: Store, mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = queue.recv().await {
        let (claims, replies): (Vec<OwnerClaim>, Vec<_>) =
            take_queued(&mut queue, first, MAX_BATCH)
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
