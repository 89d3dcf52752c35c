//! Group commit of sandbox writes.
//!
//! Alone, a sandbox write is five statements and so five round trips to the
//! store: BEGIN, the lock of its sandbox, its change, its operation, COMMIT.
//! On PostgreSQL each round trip wakes the gateway and a database backend
//! once more, and at 16 concurrent writers that, not the work of the
//! statements, used up the machine: about 2,400 commits a second with both
//! cores busy. Writes to different sandboxes that queue up while a
//! transaction runs therefore share the next one, in statements over all of
//! them: BEGIN, one lock of all their sandboxes (in id order, as every
//! multi-row lock), each write's policy if it has one, one write of all
//! their settings, one insert of all their operations and fanout intents,
//! COMMIT. On SQLite, where a statement is a call into the same process, the
//! settings and operations are written one write at a time, and the group
//! saves the commits.
//!
//! Writes are spread over [`WRITE_LANES`] lanes by sandbox, each lane
//! committing one group at a time, so two writes to one sandbox commit in
//! the order they arrived and never wait for each other in two groups at
//! once. A group holds at most one write per sandbox: a second one waits for
//! the next group, since it must see the first one's revision. A lone write
//! commits as it did before groups, in a transaction of its own.
//!
//! A group commits whole or not at all. When any of its writes fails (a
//! refused expected revision, a lost idempotency race, a store error) the
//! group rolls back and each of its writes runs again alone, so a write
//! answers with what it alone would have met and one write's refusal never
//! costs another its commit.

use std::collections::{HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;

use super::{ConfigTarget, InTx, Prepared, QueuedWrite, commit_alone, finish_in_tx, prepare_in_tx};
use crate::error::{GatewayError, Result};
use crate::metrics::Metrics;
use crate::store::{NewOperation, SettingWrite, Store, WritePlace};

/// Lanes committing sandbox writes side by side. Fewer lanes make bigger
/// groups and fewer round trips; more keep a write that waits for a row lock
/// another transaction holds from holding up as many others. With 16
/// concurrent writers on PostgreSQL, 2 lanes committed 4,200-4,400 writes a
/// second and 4 lanes, whose groups are half as big, about 3,300.
pub const WRITE_LANES: usize = 2;

/// Most writes in one group: bounds how long a group holds its sandboxes.
pub const MAX_GROUP_WRITES: usize = 32;

/// Commits `UpdateConfig` writes. Cheap to clone; its lanes stop when the
/// last clone is dropped.
#[derive(Clone)]
pub struct ConfigWriter {
    store: Store,
    lanes: Arc<[UnboundedSender<LaneEntry>]>,
    counts: Arc<GroupCounts>,
}

/// What the lanes did, for the metrics and the tests.
#[derive(Debug, Default)]
pub struct GroupCounts {
    /// Sandbox writes sent to a lane and not yet taken into a transaction.
    pub queued: AtomicUsize,
    /// Sandbox writes taken into a transaction, alone or in a group.
    pub writes_started: AtomicU64,
    /// Groups of two writes or more that committed.
    pub groups_committed: AtomicU64,
    /// Writes those groups committed.
    pub writes_grouped: AtomicU64,
    /// Groups rolled back because one of their writes failed.
    pub groups_failed: AtomicU64,
}

impl GroupCounts {
    /// Exports the counts as counters, read at each scrape, so an operator
    /// sees how many writes share a transaction.
    pub fn register_metrics(counts: &Arc<Self>, metrics: &mut Metrics) {
        type Count = fn(&GroupCounts) -> &AtomicU64;
        let counters: [(&'static str, &'static str, Count); 4] = [
            (
                "config_writes_started",
                "Sandbox configuration writes taken into a transaction, alone or in a group",
                |c| &c.writes_started,
            ),
            (
                "config_write_groups",
                "Transactions that committed two or more sandbox configuration writes together (group commit)",
                |c| &c.groups_committed,
            ),
            (
                "config_writes_grouped",
                "Sandbox configuration writes committed in a group with others",
                |c| &c.writes_grouped,
            ),
            (
                "config_write_groups_failed",
                "Groups rolled back because one of their writes failed; each of their writes then committed or failed alone",
                |c| &c.groups_failed,
            ),
        ];
        for (name, help, count) in counters {
            let counts = counts.clone();
            metrics.register_sampled_counter(name, help, move || {
                count(&counts).load(Ordering::SeqCst)
            });
        }
    }
}

impl std::fmt::Debug for ConfigWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigWriter")
            .field("lanes", &self.lanes.len())
            .finish_non_exhaustive()
    }
}

/// A write waiting in a lane, and where its answer goes.
type LaneEntry = (Arc<QueuedWrite>, oneshot::Sender<Result<InTx>>);

impl ConfigWriter {
    /// Starts the lanes on the current runtime.
    pub fn spawn(store: Store) -> Self {
        let counts = Arc::new(GroupCounts::default());
        let lanes = (0..WRITE_LANES)
            .map(|_| {
                let (send, queue) = unbounded_channel();
                tokio::spawn(run_lane(store.clone(), queue, counts.clone()));
                send
            })
            .collect();
        Self {
            store,
            lanes,
            counts,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn counts(&self) -> &GroupCounts {
        &self.counts
    }

    /// The counts, for a reader that outlives this handle (a metric).
    pub fn counts_handle(&self) -> Arc<GroupCounts> {
        self.counts.clone()
    }

    /// The lane that commits this sandbox's writes.
    pub fn lane_of(&self, sandbox_id: &str) -> usize {
        lane_of(sandbox_id, self.lanes.len())
    }

    pub(super) async fn commit_sandbox_write(&self, write: Arc<QueuedWrite>) -> Result<InTx> {
        let lane = self.lane_of(sandbox_of(&write));
        let (reply, answer) = oneshot::channel();
        self.counts.queued.fetch_add(1, Ordering::SeqCst);
        if self.lanes[lane].send((write, reply)).is_err() {
            self.counts.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(stopped());
        }
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> GatewayError {
    GatewayError::Unavailable("the gateway is stopping and takes no more writes; retry".into())
}

fn sandbox_of(write: &QueuedWrite) -> &str {
    match &write.update.target {
        ConfigTarget::Sandbox(id) => id,
        ConfigTarget::Workspace(_) | ConfigTarget::Global => "",
    }
}

fn lane_of(sandbox_id: &str, lanes: usize) -> usize {
    let mut hasher = DefaultHasher::new();
    sandbox_id.hash(&mut hasher);
    usize::try_from(hasher.finish() % lanes.max(1) as u64).unwrap_or(0)
}

async fn run_lane(store: Store, mut queue: UnboundedReceiver<LaneEntry>, counts: Arc<GroupCounts>) {
    let mut waiting = VecDeque::new();
    loop {
        let first = match waiting.pop_front() {
            Some(write) => write,
            None => match queue.recv().await {
                Some(write) => write,
                None => return,
            },
        };
        let group = next_group(first, &mut waiting, &mut queue);
        counts.queued.fetch_sub(group.len(), Ordering::SeqCst);
        counts
            .writes_started
            .fetch_add(group.len() as u64, Ordering::SeqCst);
        // On a task of its own, so that a panic costs this group's writes
        // their answer (their callers see the gateway unavailable), not the
        // lane every later write to its sandboxes.
        let committing = tokio::spawn(commit_group(store.clone(), group, counts.clone()));
        if committing.await.is_err() {
            tracing::error!("a group of configuration writes stopped unexpectedly");
        }
    }
}

/// `first` and the writes queued behind it, at most one per sandbox and
/// [`MAX_GROUP_WRITES`] in all. The others stay in `waiting`, in the order
/// they arrived.
fn next_group(
    first: LaneEntry,
    waiting: &mut VecDeque<LaneEntry>,
    queue: &mut UnboundedReceiver<LaneEntry>,
) -> Vec<LaneEntry> {
    let mut sandboxes = HashSet::from([sandbox_of(&first.0).to_owned()]);
    let mut group = vec![first];
    let mut deferred = VecDeque::new();
    while group.len() < MAX_GROUP_WRITES {
        // What already waited goes before what is still in the queue.
        let next = match waiting.pop_front() {
            Some(write) => write,
            None => match queue.try_recv() {
                Ok(write) => write,
                Err(_) => break,
            },
        };
        if sandboxes.insert(sandbox_of(&next.0).to_owned()) {
            group.push(next);
        } else {
            deferred.push_back(next);
        }
    }
    deferred.append(waiting);
    *waiting = deferred;
    group
}

async fn commit_group(store: Store, group: Vec<LaneEntry>, counts: Arc<GroupCounts>) {
    let store = &store;
    let (writes, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    if let [write] = writes.as_slice() {
        let answer = commit_alone(store, write.clone())
            .await
            .map(|committed| InTx::Written(Box::new(committed)));
        if let Some(reply) = replies.into_iter().next() {
            let _ = reply.send(answer);
        }
        return;
    }
    let place = if writes.iter().any(|w| w.place == WritePlace::WriterThread) {
        WritePlace::WriterThread
    } else {
        WritePlace::Caller
    };
    let writes: Arc<[Arc<QueuedWrite>]> = writes.into();
    let (in_group, group_store) = (writes.clone(), store.clone());
    let outcome = store
        .run_write(
            place,
            async move { write_group(&group_store, &in_group).await },
        )
        .await;
    match outcome {
        Ok(answers) => {
            counts.groups_committed.fetch_add(1, Ordering::SeqCst);
            counts
                .writes_grouped
                .fetch_add(answers.len() as u64, Ordering::SeqCst);
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Err(e) => {
            counts.groups_failed.fetch_add(1, Ordering::SeqCst);
            tracing::debug!(
                error = %e,
                writes = writes.len(),
                "a write of a group failed; the group's writes commit one by one"
            );
            let alone = writes.iter().zip(replies).map(|(write, reply)| async move {
                let answer = commit_alone(store, write.clone())
                    .await
                    .map(|committed| InTx::Written(Box::new(committed)));
                let _ = reply.send(answer);
            });
            futures::future::join_all(alone).await;
        }
    }
}

/// Every write of the group in one transaction, which commits only if
/// every write succeeded; their operations are inserted together.
async fn write_group(store: &Store, writes: &[Arc<QueuedWrite>]) -> Result<Vec<InTx>> {
    let mut tx = store.begin_write().await?;
    let sandbox_ids: Vec<String> = writes.iter().map(|w| sandbox_of(w).to_owned()).collect();
    let mut locked = tx.lock_sandboxes_with_policy_hash(&sandbox_ids).await?;
    let mut prepared = Vec::with_capacity(writes.len());
    for write in writes {
        let sandbox_id = sandbox_of(write);
        let sandbox = locked
            .remove(sandbox_id)
            .ok_or_else(|| GatewayError::NotFound(format!("sandbox {sandbox_id} not found")))?;
        prepared.push(
            prepare_in_tx(
                &mut tx,
                &write.update,
                &write.validated,
                write.idempotency_retention_ms,
                Some(sandbox),
            )
            .await?,
        );
    }
    let settings: Vec<(&str, &[SettingWrite])> = writes
        .iter()
        .zip(&prepared)
        .filter(|(write, p)| {
            matches!(p, Prepared::Ready(_)) && !write.validated.settings.is_empty()
        })
        .map(|(write, _)| (sandbox_of(write), write.validated.settings.as_slice()))
        .collect();
    let mut revisions = tx.write_sandbox_settings(&settings).await?.into_iter();
    for (write, p) in writes.iter().zip(prepared.iter_mut()) {
        if let Prepared::Ready(ready) = p
            && !write.validated.settings.is_empty()
            && let Some(revision) = revisions.next().flatten()
        {
            ready.op.settings_revision = revision;
            ready.op.no_op = false;
        }
    }
    let ops: Vec<NewOperation> = prepared
        .iter()
        .filter_map(|p| match p {
            Prepared::Ready(ready) => Some(ready.op.clone()),
            Prepared::Replay(_) => None,
        })
        .collect();
    let mut inserted = tx.insert_operations(&ops).await?.into_iter();
    let mut answers = Vec::with_capacity(writes.len());
    for write in prepared {
        answers.push(match write {
            Prepared::Replay(operation_id) => InTx::Replay(operation_id),
            Prepared::Ready(ready) => {
                let operation = inserted.next().ok_or_else(|| {
                    GatewayError::Corrupt("a grouped write's operation was not inserted".into())
                })?;
                finish_in_tx(store, &mut tx, ready, operation).await?
            }
        });
    }
    tx.commit().await?;
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_always_commits_in_the_same_lane() {
        let lanes: HashSet<usize> = (0..5).map(|_| lane_of("sb-1", WRITE_LANES)).collect();
        assert_eq!(lanes.len(), 1);
        let spread: HashSet<usize> = (0..64)
            .map(|i| lane_of(&format!("sb-{i}"), WRITE_LANES))
            .collect();
        assert_eq!(spread.len(), WRITE_LANES, "64 sandboxes use every lane");
    }
}
