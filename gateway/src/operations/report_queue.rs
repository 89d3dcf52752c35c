//! Group commit of supervisor reports. Every session hands its reports to
//! one resolver task, which resolves whatever has queued up in a single
//! write transaction. A fanout to 10k sandboxes then costs a few dozen
//! transactions instead of 10k serialised ones, and a session's read loop
//! never waits on the store, so its heartbeats keep being read under load.
//!
//! Reports that someone waits for (an ack of a snapshot that carried a
//! pending sandbox operation, a poll report) go first: a sandbox write made
//! during a fanout does not wait behind the fanout's thousands of acks.
//! Each sandbox's reports still resolve in arrival order.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot};

use super::resolution::{
    REPORTS_BETWEEN_YIELDS, SupervisorReport, resolve_prefix, resolve_reports,
};
use crate::delivery::FanoutActivity;
use crate::error::{GatewayError, Result};
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, WritePlace};

/// Most reports taken from the queue at once. A large batch is cheaper per
/// report (fewer commits, and a page of targets or reports is written once
/// for many of them); a write that waits for the SQLite writer, or an
/// awaited report that arrives, makes it commit early (`resolve_prefix`).
const MAX_BATCH: usize = 1024;

enum Job {
    Report {
        report: SupervisorReport,
        /// Set when the caller waits for the outcome (a poll report's RPC).
        reply: Option<oneshot::Sender<Result<u32>>>,
        /// Resolve before reports nobody waits for.
        urgent: bool,
    },
    /// Answered once every report queued before it is resolved.
    Flush(oneshot::Sender<()>),
}

impl Job {
    fn is_urgent(&self) -> bool {
        matches!(self, Self::Report { urgent: true, .. })
    }

    fn sandbox_id(&self) -> Option<&str> {
        match self {
            Self::Report { report, .. } => Some(&report.sandbox_id),
            Self::Flush(_) => None,
        }
    }
}

/// Handle to the resolver task; cheap to clone.
#[derive(Clone, Debug)]
pub struct ReportResolver {
    // Unbounded because a bound would make session read loops wait again,
    // which is what this task removes; the queue is bounded in practice by
    // the sessions' in-flight acks (one per component each).
    jobs: mpsc::UnboundedSender<Job>,
    /// Urgent reports queued and not yet taken into a batch: a transaction
    /// in progress commits early when one arrives.
    urgent_queued: Arc<AtomicUsize>,
}

impl ReportResolver {
    /// Starts the resolver task; it ends when every handle is dropped.
    /// `activity` says when its transactions should run on the store's
    /// writer thread.
    pub fn spawn(store: Store, metrics: Arc<Metrics>, activity: Arc<FanoutActivity>) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        let urgent_queued = Arc::new(AtomicUsize::new(0));
        let resolver = Resolver {
            store: store.clone(),
            metrics,
            activity,
            urgent_queued: urgent_queued.clone(),
            // The runtime this is called on: the gateway's.
            gateway_runtime: tokio::runtime::Handle::current(),
        };
        store.spawn_on_writer_thread(resolver.serve(queue));
        Self {
            jobs,
            urgent_queued,
        }
    }

    /// Queues a report without waiting for it (push acks). `urgent`: an
    /// operation someone may wait for hangs on it, so it goes first.
    pub fn submit(&self, report: SupervisorReport, urgent: bool) {
        if urgent {
            self.urgent_queued.fetch_add(1, Ordering::SeqCst);
        }
        if self
            .jobs
            .send(Job::Report {
                report,
                reply: None,
                urgent,
            })
            .is_err()
        {
            tracing::warn!("report resolver has stopped; report dropped");
        }
    }

    /// Resolves a report and returns how many operations it ended.
    pub async fn resolve(&self, report: SupervisorReport) -> Result<u32> {
        let (reply, answer) = oneshot::channel();
        self.urgent_queued.fetch_add(1, Ordering::SeqCst);
        self.jobs
            .send(Job::Report {
                report,
                reply: Some(reply),
                urgent: true,
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

/// The resolver task's state. The task lives on the store's writer thread,
/// so that a report arriving during a fanout wakes it there and
/// not behind the gateway runtime's crowd; while that runtime is quiet, its
/// transactions run there instead, where a statement costs less (see
/// `delivery/activity.rs`).
struct Resolver {
    store: Store,
    metrics: Arc<Metrics>,
    activity: Arc<FanoutActivity>,
    urgent_queued: Arc<AtomicUsize>,
    gateway_runtime: tokio::runtime::Handle,
}

/// Where the resolver's next transaction should run, with `queued` reports
/// waiting. More than one step's worth of them means a fanout's acks are
/// coming in, even before `activity` sees the runtime crowded.
fn step_place(queued: usize, activity: &FanoutActivity) -> WritePlace {
    if queued > REPORTS_BETWEEN_YIELDS {
        WritePlace::WriterThread
    } else {
        activity.write_place()
    }
}

impl Resolver {
    /// Resolves queued reports, one transaction at a time, until every
    /// handle is gone.
    async fn serve(self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let mut backlog = VecDeque::new();
        loop {
            if backlog.is_empty() {
                match jobs.recv().await {
                    Some(job) => backlog.push_back(job),
                    None => return,
                }
            }
            while let Ok(job) = jobs.try_recv() {
                backlog.push_back(job);
            }
            // Everything queued before a flush at the front has been resolved.
            while let Some(Job::Flush(_)) = backlog.front() {
                if let Some(Job::Flush(done)) = backlog.pop_front() {
                    let _ = done.send(());
                }
            }
            if backlog.is_empty() {
                continue;
            }
            let place = step_place(backlog.len(), &self.activity);
            let taken = next_batch(&mut backlog, MAX_BATCH);
            let urgent_taken = taken.iter().filter(|job| job.is_urgent()).count();
            self.urgent_queued.fetch_sub(urgent_taken, Ordering::SeqCst);
            let mut batch: Vec<Queued> = taken
                .into_iter()
                .filter_map(|job| match job {
                    Job::Report {
                        report,
                        reply,
                        urgent,
                    } => Some((report, Waiter { reply, urgent })),
                    Job::Flush(_) => None,
                })
                .collect();
            // Sandbox order keeps row locks in one order across replicas; the
            // sort is stable, so one sandbox's reports keep their arrival order.
            batch.sort_by(|a, b| a.0.sandbox_id.cmp(&b.0.sandbox_id));
            let (taken, started) = (batch.len(), std::time::Instant::now());
            let (left, store_failed) = self.resolve_queued(place, batch).await;
            tracing::debug!(
                resolved = taken - left.len(),
                queued = backlog.len() + left.len(),
                took = ?started.elapsed(),
                ?place,
                "resolved a step of reports"
            );
            // What the transaction left goes first again, in its order, after
            // whatever is urgent.
            for (report, waiter) in left.into_iter().rev() {
                if waiter.urgent {
                    self.urgent_queued.fetch_add(1, Ordering::SeqCst);
                }
                backlog.push_front(Job::Report {
                    report,
                    reply: waiter.reply,
                    urgent: waiter.urgent,
                });
            }
            if store_failed {
                // The store could not take the acks: give it a moment before the next try
                // rather than failing them again at once.
                tokio::time::sleep(STORE_RETRY_AFTER).await;
            }
        }
    }

    /// Resolves a prefix of `batch` in one transaction (see
    /// [`resolve_prefix`]) in `place`, answers its waiters, and returns the
    /// reports left, with the acks the store failed (to resolve again, before
    /// anything their sandboxes reported later) and whether there were any.
    async fn resolve_queued(&self, place: WritePlace, batch: Vec<Queued>) -> (Vec<Queued>, bool) {
        let (reports, mut waiters): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let store = self.store.clone();
        let urgent_queued = self.urgent_queued.clone();
        let step = async move {
            // Another write waits for the SQLite writer, or someone waits for
            // a report not taken yet.
            let mut something_waits =
                || store.writers_waiting() > 0 || urgent_queued.load(Ordering::SeqCst) > 0;
            let resolved = resolve_prefix(&store, &reports, true, &mut something_waits).await;
            (reports, resolved)
        };
        let stepped = if place == WritePlace::Caller {
            self.gateway_runtime.spawn(step).await
        } else {
            Ok(step.await)
        };
        let (mut reports, resolved) = match stepped {
            Ok(stepped) => stepped,
            Err(e) => {
                // Only if the gateway's runtime is shutting down.
                tracing::error!(error = %e, reports = waiters.len(), "reports dropped unresolved");
                return (Vec::new(), false);
            }
        };
        // None: not tried, held back behind an earlier report of its sandbox that is tried
        // again.
        let outcomes: Vec<Option<Result<u32>>> = match resolved {
            Ok(resolved) => resolved.into_iter().map(|n| Some(Ok(n))).collect(),
            Err(e) => {
                // One report's failure must not lose the others: resolve each
                // on its own, so only the failing one reports its error.
                tracing::debug!(error = %e, reports = reports.len(), "batch resolution failed; resolving one by one");
                resolve_one_by_one(&reports, &waiters, |report| {
                    let store = self.store.clone();
                    let report = report.clone();
                    async move {
                        resolve_reports(&store, std::slice::from_ref(&report), true)
                            .await
                            .map(|n| n.first().copied().unwrap_or(0))
                    }
                })
                .await
            }
        };
        let left_reports = reports.split_off(outcomes.len());
        let left_waiters = waiters.split_off(outcomes.len());
        let mut again = Vec::new();
        for ((report, waiter), outcome) in reports.into_iter().zip(waiters).zip(outcomes) {
            let Some(outcome) = outcome else {
                again.push((report, waiter));
                continue;
            };
            match &outcome {
                Ok(n) => {
                    self.metrics.operations_resolved.inc_by(u64::from(*n));
                }
                Err(e) if is_retried(&waiter, e) => {
                    tracing::warn!(error = %e, sandbox = %report.sandbox_id, "cannot resolve operations from a report now; retrying");
                    again.push((report, waiter));
                    continue;
                }
                // A waiting caller gets the error itself; an ack's is only logged.
                Err(e) if waiter.reply.is_none() => {
                    tracing::warn!(error = %e, sandbox = %report.sandbox_id, "cannot resolve operations from a report");
                }
                Err(_) => {}
            }
            if let Some(reply) = waiter.reply {
                let _ = reply.send(outcome);
            }
        }
        let store_failed = !again.is_empty();
        again.extend(left_reports.into_iter().zip(left_waiters));
        (again, store_failed)
    }
}

type Queued = (SupervisorReport, Waiter);

/// How long the resolver waits after the store failed acks before it tries them again.
const STORE_RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// Resolves each report on its own with `resolve_alone`, in order. Once a report is to be
/// tried again, the later reports of its sandbox are held back (None), not tried: resolved
/// before it, a later report would be overwritten by it as the sandbox's last report, and
/// the operations only the later one reached would never see it again.
async fn resolve_one_by_one<F, Fut>(
    reports: &[SupervisorReport],
    waiters: &[Waiter],
    mut resolve_alone: F,
) -> Vec<Option<Result<u32>>>
where
    F: FnMut(&SupervisorReport) -> Fut,
    Fut: std::future::Future<Output = Result<u32>>,
{
    let mut outcomes = Vec::with_capacity(reports.len());
    let mut held_back: HashSet<&str> = HashSet::new();
    for (report, waiter) in reports.iter().zip(waiters) {
        if held_back.contains(report.sandbox_id.as_str()) {
            outcomes.push(None);
            continue;
        }
        let alone = resolve_alone(report).await;
        if alone.as_ref().is_err_and(|e| is_retried(waiter, e)) {
            held_back.insert(&report.sandbox_id);
        }
        outcomes.push(Some(alone));
    }
    outcomes
}

/// Whether a report the store failed is queued again. An ack is not sent again: dropped
/// while the store is down or its disk full, its operations would stay pending for good. A
/// caller that waits gets the error instead.
fn is_retried(waiter: &Waiter, e: &GatewayError) -> bool {
    waiter.reply.is_none() && store_cannot_write(e)
}

/// The store failed for a reason of its own (unreachable, out of space, its writer gone), not
/// because of the report: the same report may resolve later.
fn store_cannot_write(e: &GatewayError) -> bool {
    matches!(
        e,
        GatewayError::Store(StoreError::Database(_) | StoreError::Unavailable(_))
            | GatewayError::Unavailable(_)
    )
}

/// Who, if anyone, waits for a queued report's outcome.
struct Waiter {
    reply: Option<oneshot::Sender<Result<u32>>>,
    urgent: bool,
}

/// Takes the next batch of reports out of `backlog`, at most `max`: every
/// queued report of the sandboxes with an urgent one, in a batch of their
/// own so it is short, or else the oldest reports. What a batch takes of one
/// sandbox is always its oldest reports, so each sandbox's reports resolve
/// in arrival order. Flushes stay queued in place.
fn next_batch(backlog: &mut VecDeque<Job>, max: usize) -> Vec<Job> {
    let urgent: HashSet<String> = backlog
        .iter()
        .filter_map(|job| match job {
            Job::Report {
                report,
                urgent: true,
                ..
            } => Some(report.sandbox_id.clone()),
            _ => None,
        })
        .collect();
    let mut batch = Vec::new();
    if urgent.is_empty() {
        take_oldest(backlog, &mut batch, max);
    } else {
        take_where(backlog, &mut batch, max, |id| urgent.contains(id));
    }
    batch
}

/// Moves the oldest reports from `backlog` to `batch` until it holds `max`;
/// flushes among them keep their place at the front.
fn take_oldest(backlog: &mut VecDeque<Job>, batch: &mut Vec<Job>, max: usize) {
    let mut flushes = Vec::new();
    while batch.len() < max {
        match backlog.pop_front() {
            Some(job @ Job::Report { .. }) => batch.push(job),
            Some(flush) => flushes.push(flush),
            None => break,
        }
    }
    for flush in flushes.into_iter().rev() {
        backlog.push_front(flush);
    }
}

/// Moves the reports of sandboxes `wanted` accepts from `backlog` to
/// `batch`, oldest first, until `batch` holds `max`.
fn take_where(
    backlog: &mut VecDeque<Job>,
    batch: &mut Vec<Job>,
    max: usize,
    wanted: impl Fn(&str) -> bool,
) {
    let mut kept = VecDeque::with_capacity(backlog.len());
    while let Some(job) = backlog.pop_front() {
        if batch.len() < max && job.sandbox_id().is_some_and(&wanted) {
            batch.push(job);
        } else {
            kept.push_back(job);
        }
    }
    *backlog = kept;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::delivery::Permits;
    use crate::operations::resolution::{ReportStatus, ReportedRevisions};

    #[tokio::test]
    async fn steps_move_to_the_writer_thread_while_acks_pile_up_or_a_fleet_write_runs() {
        let activity = FanoutActivity::new(Arc::new(Permits::with_sizes(4, 1)));
        assert_eq!(step_place(1, &activity), WritePlace::Caller);
        assert_eq!(
            step_place(REPORTS_BETWEEN_YIELDS, &activity),
            WritePlace::Caller
        );
        assert_eq!(
            step_place(REPORTS_BETWEEN_YIELDS + 1, &activity),
            WritePlace::WriterThread
        );
        let fleet_write = activity.fleet_write();
        assert_eq!(step_place(1, &activity), WritePlace::WriterThread);
        drop(fleet_write);
        assert_eq!(step_place(1, &activity), WritePlace::Caller);
    }

    #[tokio::test]
    async fn a_report_tried_again_holds_back_its_sandboxs_later_reports() {
        let reports: Vec<SupervisorReport> = [("sb-a", 1), ("sb-a", 2), ("sb-b", 1), ("sb-a", 3)]
            .into_iter()
            .map(
                |(sandbox, revision)| match report(sandbox, revision, false) {
                    Job::Report { report, .. } => report,
                    Job::Flush(_) => unreachable!(),
                },
            )
            .collect();
        let waiters: Vec<Waiter> = reports
            .iter()
            .map(|_| Waiter {
                reply: None,
                urgent: false,
            })
            .collect();
        let mut tried = Vec::new();
        let outcomes = resolve_one_by_one(&reports, &waiters, |report| {
            tried.push((report.sandbox_id.clone(), report.revisions.policy_revision));
            // The store is full for the first one, and has room again for the others.
            let full = tried.len() == 1;
            async move {
                if full {
                    Err(GatewayError::Store(StoreError::Unavailable(
                        "disk full".into(),
                    )))
                } else {
                    Ok(1)
                }
            }
        })
        .await;
        assert_eq!(tried, vec![pair("sb-a", 1), pair("sb-b", 1)]);
        let shape: Vec<Option<bool>> = outcomes
            .iter()
            .map(|o| o.as_ref().map(Result::is_ok))
            .collect();
        assert_eq!(shape, vec![Some(false), None, Some(true), None]);
    }

    fn report(sandbox: &str, policy_revision: u64, urgent: bool) -> Job {
        Job::Report {
            report: SupervisorReport {
                sandbox_id: sandbox.into(),
                status: ReportStatus::Applied,
                revisions: ReportedRevisions {
                    policy_revision,
                    ..Default::default()
                },
                reason: String::new(),
            },
            reply: None,
            urgent,
        }
    }

    fn taken(batch: &[Job]) -> Vec<(String, u64)> {
        batch
            .iter()
            .filter_map(|job| match job {
                Job::Report { report, .. } => {
                    Some((report.sandbox_id.clone(), report.revisions.policy_revision))
                }
                Job::Flush(_) => None,
            })
            .collect()
    }

    fn pair(sandbox: &str, revision: u64) -> (String, u64) {
        (sandbox.to_string(), revision)
    }

    #[test]
    fn an_urgent_report_jumps_a_fanout_backlog_with_its_sandboxs_earlier_reports() {
        let mut backlog: VecDeque<Job> = (0..10)
            .map(|i| report(&format!("f{i}"), 1, false))
            .collect();
        backlog.push_back(report("w", 1, false));
        backlog.extend((10..20).map(|i| report(&format!("f{i}"), 1, false)));
        backlog.push_back(report("w", 2, true));

        let batch = next_batch(&mut backlog, 4);
        // The sandbox's older fanout ack first, then its urgent one, on their own.
        assert_eq!(taken(&batch), vec![pair("w", 1), pair("w", 2)]);
        assert_eq!(backlog.len(), 20);
        assert_eq!(
            taken(&next_batch(&mut backlog, 2)),
            vec![pair("f0", 1), pair("f1", 1)]
        );
    }

    #[test]
    fn a_batch_takes_only_the_oldest_reports_of_a_sandbox() {
        let mut backlog: VecDeque<Job> = VecDeque::new();
        backlog.push_back(report("a", 1, false));
        backlog.push_back(report("b", 1, false));
        backlog.push_back(report("a", 2, true));
        backlog.push_back(report("a", 3, false));
        // The limit cuts into sandbox a: what is left of it is its newest.
        assert_eq!(
            taken(&next_batch(&mut backlog, 2)),
            vec![pair("a", 1), pair("a", 2)]
        );
        assert_eq!(
            taken(&next_batch(&mut backlog, 10)),
            vec![pair("b", 1), pair("a", 3)]
        );
        assert!(backlog.is_empty());
    }

    #[test]
    fn a_flush_keeps_its_place_until_everything_before_it_is_taken() {
        let (done, _flushed) = oneshot::channel();
        let mut backlog: VecDeque<Job> = VecDeque::new();
        backlog.push_back(report("a", 1, false));
        backlog.push_back(Job::Flush(done));
        backlog.push_back(report("b", 1, false));
        backlog.push_back(report("c", 1, true));

        assert_eq!(taken(&next_batch(&mut backlog, 1)), vec![pair("c", 1)]);
        assert!(matches!(backlog.front(), Some(Job::Report { .. })));
        assert_eq!(
            taken(&next_batch(&mut backlog, 5)),
            vec![pair("a", 1), pair("b", 1)]
        );
        assert_eq!(backlog.len(), 1);
        assert!(matches!(backlog.front(), Some(Job::Flush(_))));
    }
}
