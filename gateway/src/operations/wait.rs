//! Waiting on durable operations: a server-side wait that never holds a
//! transaction, re-reading the operation until it is terminal or the
//! deadline passes. A deadline is not a failure: the live operation is
//! returned flagged `wait_timed_out`.

use std::time::Duration;

use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::Result;
use crate::store::{OperationRecord, Store};

/// Default server-side wait.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// Longest server-side wait a caller may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// Waiters are woken on change; this slow re-read only covers missed
/// wake-ups and changes committed by another replica.
const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// Clamps a requested wait into (0, MAX_WAIT]; zero means the default.
pub fn wait_deadline(requested: Option<Duration>) -> Duration {
    match requested {
        None => DEFAULT_WAIT,
        Some(d) if d.is_zero() => DEFAULT_WAIT,
        Some(d) => d.min(MAX_WAIT),
    }
}

/// Whether a fleet operation has reached the caller's threshold of applied targets.
pub fn threshold_reached(op: &OperationRecord, threshold: f64) -> bool {
    match &op.fleet {
        Some(fleet) if threshold > 0.0 && fleet.targets > 0 => {
            f64::from(fleet.applied) / f64::from(fleet.targets) >= threshold
        }
        _ => false,
    }
}

/// Yields each distinct version of the operation until it is terminal,
/// reaches the threshold, or the deadline passes.
pub struct OperationWatch {
    store: Store,
    id: String,
    deadline: Instant,
    threshold: f64,
    last: Option<OperationRecord>,
    done: bool,
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
    wake: Arc<Notify>,
}

impl OperationWatch {
    pub fn new(store: Store, id: String, wait: Duration, threshold: f64) -> Self {
        let wake = store.operation_events().subscribe(&id);
        Self {
            wake,
            store,
            id,
            deadline: Instant::now() + wait,
            threshold,
            last: None,
            done: false,
            stopping: None,
        }
    }

    /// Ends the watch early (with the current state) when the gateway stops.
    pub fn until_stopping(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    fn is_stopping(&self) -> bool {
        self.stopping.as_ref().is_some_and(|s| *s.borrow())
    }

    /// True once the watch has yielded its last item.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The next change, or None once the watch has ended.
    pub async fn next(&mut self) -> Option<Result<OperationRecord>> {
        if self.done {
            return None;
        }
        loop {
            // Armed before the read, so a change committed in between still wakes us.
            let wake = self.wake.clone();
            let woken = wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let current = match self.store.get_operation(&self.id).await {
                Ok(op) => op,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            let finished =
                current.state.is_terminal() || threshold_reached(&current, self.threshold);
            let changed = self.last.as_ref() != Some(&current);
            if finished {
                self.done = true;
                self.last = Some(current.clone());
                return Some(Ok(current));
            }
            if Instant::now() >= self.deadline || self.is_stopping() {
                // The last item of a timed-out watch is always sent, so the
                // caller sees the live state it is giving up on.
                self.done = true;
                self.last = Some(current.clone());
                return Some(Ok(current));
            }
            if changed {
                self.last = Some(current.clone());
                return Some(Ok(current));
            }
            let sleep_for =
                FALLBACK_RECHECK.min(self.deadline.saturating_duration_since(Instant::now()));
            let mut stopping = self.stopping.clone();
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep(sleep_for) => {}
                _ = async {
                    match stopping.as_mut() {
                        Some(s) => s.wait_for(|v| *v).await.map(|_| ()),
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }
}

/// A wait ended on a live operation: its deadline passed first.
pub fn ended_by_deadline(op: &OperationRecord, threshold: f64) -> bool {
    !op.state.is_terminal() && !threshold_reached(op, threshold)
}

/// Waits until terminal (or threshold, or deadline) and returns the last version.
pub async fn wait_for_terminal(
    store: &Store,
    id: &str,
    wait: Duration,
    threshold: f64,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(OperationRecord, bool)> {
    let mut watch = OperationWatch::new(store.clone(), id.to_string(), wait, threshold)
        .until_stopping(stopping);
    let mut last = None;
    while let Some(item) = watch.next().await {
        last = Some(item?);
    }
    match last {
        Some(op) => {
            let timed_out = ended_by_deadline(&op, threshold);
            Ok((op, timed_out))
        }
        None => Ok((store.get_operation(id).await?, true)),
    }
}
