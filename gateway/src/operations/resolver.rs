//! Group commit (`crate::group_commit`) of supervisor reports. Every
//! session hands its reports to one resolver task, which resolves whatever
//! has queued up in a single write transaction. A fanout to 10k sandboxes then costs a few dozen
//! transactions instead of 10k serialised ones, and a session's read loop
//! never waits on the store, so its heartbeats keep being read under load.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::resolve::{SupervisorReport, resolve_batch};
use crate::error::{GatewayError, Result};
use crate::group_commit::take_queued;
use crate::metrics::Metrics;
use crate::store::Store;

/// Most reports resolved in one transaction: large enough to absorb a
/// fanout's acks, small enough that one transaction stays short and a
/// sandbox write waiting for the store lock is not held up for long.
const MAX_BATCH: usize = 256;

enum Job {
    Report {
        report: SupervisorReport,
        /// Set when the caller waits for the outcome (a poll report's RPC).
        reply: Option<oneshot::Sender<Result<u32>>>,
    },
    /// Answered once every report queued before it is resolved.
    Flush(oneshot::Sender<()>),
}

/// Handle to the resolver task; cheap to clone.
#[derive(Clone, Debug)]
pub struct ReportResolver {
    // Unbounded because a bound would make session read loops wait again,
    // which is what this task removes; the queue is bounded in practice by
    // the sessions' in-flight acks (one per component each).
    jobs: mpsc::UnboundedSender<Job>,
}

impl ReportResolver {
    /// Starts the resolver task; it ends when every handle is dropped.
    pub fn spawn(store: Store, metrics: Arc<Metrics>) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(store, metrics, queue));
        Self { jobs }
    }

    /// Queues a report without waiting for it (push acks).
    pub fn submit(&self, report: SupervisorReport) {
        if self
            .jobs
            .send(Job::Report {
                report,
                reply: None,
            })
            .is_err()
        {
            tracing::warn!("report resolver has stopped; report dropped");
        }
    }

    /// Resolves a report and returns how many operations it ended.
    pub async fn resolve(&self, report: SupervisorReport) -> Result<u32> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Report {
                report,
                reply: Some(reply),
            })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Waits until every report queued so far is resolved.
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = flushed.await;
        }
    }
}

fn stopped() -> GatewayError {
    GatewayError::Unavailable("the gateway is stopping".into())
}

async fn run(store: Store, metrics: Arc<Metrics>, mut queue: mpsc::UnboundedReceiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut flushes = Vec::new();
    while let Some(first) = queue.recv().await {
        for job in take_queued(&mut queue, first, MAX_BATCH) {
            match job {
                Job::Report { report, reply } => batch.push((report, reply)),
                Job::Flush(done) => flushes.push(done),
            }
        }
        resolve_queued(&store, &metrics, &mut batch).await;
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

async fn resolve_queued(
    store: &Store,
    metrics: &Metrics,
    batch: &mut Vec<(SupervisorReport, Option<oneshot::Sender<Result<u32>>>)>,
) {
    if batch.is_empty() {
        return;
    }
    // Sandbox order keeps row locks in one order across replicas; the sort is
    // stable, so one sandbox's reports keep their arrival order.
    batch.sort_by(|a, b| a.0.sandbox_id.cmp(&b.0.sandbox_id));
    match resolve_together(store, batch).await {
        Ok(resolved) => {
            for ((_, reply), n) in batch.drain(..).zip(resolved) {
                metrics.operations_resolved.inc_by(u64::from(n));
                if let Some(reply) = reply {
                    let _ = reply.send(Ok(n));
                }
            }
        }
        Err(e) => {
            // One report's failure must not lose the others: resolve each on
            // its own, so only the failing one reports its error.
            tracing::debug!(error = %e, reports = batch.len(), "batch resolution failed; resolving one by one");
            for (report, reply) in batch.drain(..) {
                let outcome = resolve_alone(store, &report).await;
                match (&outcome, reply) {
                    (Ok(n), reply) => {
                        metrics.operations_resolved.inc_by(u64::from(*n));
                        if let Some(reply) = reply {
                            let _ = reply.send(outcome);
                        }
                    }
                    (Err(e), None) => {
                        tracing::warn!(error = %e, sandbox = %report.sandbox_id, "cannot resolve operations from a report");
                    }
                    (Err(_), Some(reply)) => {
                        let _ = reply.send(outcome);
                    }
                }
            }
        }
    }
}

async fn resolve_together(
    store: &Store,
    batch: &[(SupervisorReport, Option<oneshot::Sender<Result<u32>>>)],
) -> Result<Vec<u32>> {
    let reports: Vec<SupervisorReport> = batch.iter().map(|(r, _)| r.clone()).collect();
    let mut tx = store.begin_write().await?;
    let resolved = resolve_batch(&mut tx, &reports, true).await?;
    tx.commit().await?;
    Ok(resolved)
}

async fn resolve_alone(store: &Store, report: &SupervisorReport) -> Result<u32> {
    let mut tx = store.begin_write().await?;
    let resolved = resolve_batch(&mut tx, std::slice::from_ref(report), true).await?;
    tx.commit().await?;
    Ok(resolved.first().copied().unwrap_or(0))
}
