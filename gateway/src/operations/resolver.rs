//! Group commit (`crate::group_commit`) of supervisor reports. Every
//! session hands its reports to one resolver task, which resolves whatever
//! has queued up in a single write transaction. A fanout to 10k sandboxes then costs a few dozen
//! transactions instead of 10k serialised ones, and a session's read loop
//! never waits on the store, so its heartbeats keep being read under load.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::resolve::{SupervisorReport, resolve_reports};
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
            .map_err(|_| GatewayError::stopping())?;
        answer.await.map_err(|_| GatewayError::stopping())?
    }

    /// Waits until every report queued so far is resolved.
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = flushed.await;
        }
    }
}

async fn run(store: Store, metrics: Arc<Metrics>, mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = queue.recv().await {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut flushes = Vec::new();
        for job in take_queued(&mut queue, first, MAX_BATCH) {
            match job {
                Job::Report { report, reply } => batch.push((report, reply)),
                Job::Flush(done) => flushes.push(done),
            }
        }
        // Sandbox order keeps row locks in one order across replicas; the
        // sort is stable, so one sandbox's reports keep their arrival order.
        batch.sort_by(|a, b| a.0.sandbox_id.cmp(&b.0.sandbox_id));
        let (reports, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        resolve_queued(&store, &metrics, &reports, replies).await;
        for done in flushes {
            let _ = done.send(());
        }
    }
}

async fn resolve_queued(
    store: &Store,
    metrics: &Metrics,
    reports: &[SupervisorReport],
    replies: Vec<Option<oneshot::Sender<Result<u32>>>>,
) {
    if reports.is_empty() {
        return;
    }
    let outcomes = match resolve_reports(store, reports, true).await {
        Ok(resolved) => resolved.into_iter().map(Ok).collect(),
        Err(e) => {
            // One report's failure must not lose the others: resolve each on
            // its own, so only the failing one reports its error.
            tracing::debug!(error = %e, reports = reports.len(), "batch resolution failed; resolving one by one");
            let mut outcomes = Vec::with_capacity(reports.len());
            for report in reports {
                let alone = resolve_reports(store, std::slice::from_ref(report), true).await;
                outcomes.push(alone.map(|n| n.first().copied().unwrap_or(0)));
            }
            outcomes
        }
    };
    for ((report, reply), outcome) in reports.iter().zip(replies).zip(outcomes) {
        match &outcome {
            Ok(n) => {
                metrics.operations_resolved.inc_by(u64::from(*n));
            }
            // A waiting caller gets the error itself; an ack's is only logged.
            Err(e) if reply.is_none() => {
                tracing::warn!(error = %e, sandbox = %report.sandbox_id, "cannot resolve operations from a report");
            }
            Err(_) => {}
        }
        if let Some(reply) = reply {
            let _ = reply.send(outcome);
        }
    }
}
