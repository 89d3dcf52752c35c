//! Waiting on durable operations: a server-side wait that never holds a
//! transaction, re-reading the operation until it is terminal or the
//! deadline passes. A deadline is not a failure: the live operation is
//! returned flagged `wait_timed_out`.

use std::time::Duration;

use std::sync::Arc;

use tokio::time::Instant;

use crate::error::{GatewayError, Result};
use crate::store::{OperationRecord, OperationSignal, Store};

/// Default server-side wait.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// Longest server-side wait a caller may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

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
    signal: Arc<OperationSignal>,
    /// Changes of the signal that `last` already reflects.
    changes_seen: u64,
    /// `last` may be stale (nothing read yet, or the fallback re-read is due).
    must_read: bool,
}

impl OperationWatch {
    pub fn new(store: Store, id: String, wait: Duration, threshold: f64) -> Self {
        let signal = store.operation_events().subscribe(&id);
        Self::with_signal(store, id, wait, threshold, signal)
    }

    /// Watches an operation from its row as committed, without reading it
    /// again: `signal` was subscribed inside the committing transaction, so
    /// every later change reaches it.
    pub fn from_committed(
        store: Store,
        committed: OperationRecord,
        signal: Arc<OperationSignal>,
        wait: Duration,
        threshold: f64,
    ) -> Self {
        let mut watch = Self::with_signal(store, committed.id.clone(), wait, threshold, signal);
        watch.changes_seen = 0;
        watch.last = Some(committed);
        watch.must_read = false;
        watch
    }

    fn with_signal(
        store: Store,
        id: String,
        wait: Duration,
        threshold: f64,
        signal: Arc<OperationSignal>,
    ) -> Self {
        Self {
            changes_seen: signal.changes().0,
            signal,
            store,
            id,
            deadline: Instant::now() + wait,
            threshold,
            last: None,
            done: false,
            stopping: None,
            must_read: true,
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

    /// The watched operation's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// True once the watch has yielded its last item.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// True when the watch ended on a live operation because the gateway is stopping, not
    /// because its deadline passed: the caller must hear that the gateway went away, not that
    /// its wait timed out.
    pub fn ended_by_stopping(&self) -> bool {
        self.done
            && self.is_stopping()
            && Instant::now() < self.deadline
            && self
                .last
                .as_ref()
                .is_some_and(|op| ended_by_deadline(op, self.threshold))
    }

    /// The operation as it is now, when known without reading: nothing
    /// changed since `last`, or the latest change handed over its row.
    fn known_current(&mut self) -> Option<OperationRecord> {
        let (changes, row) = self.signal.changes();
        let seen = std::mem::replace(&mut self.changes_seen, changes);
        if self.must_read {
            return None;
        }
        if changes == seen {
            return self.last.clone();
        }
        row
    }

    /// The next change, or None once the watch has ended.
    pub async fn next(&mut self) -> Option<Result<OperationRecord>> {
        if self.done {
            return None;
        }
        loop {
            // Armed before looking, so a change committed in between still wakes us.
            let signal = self.signal.clone();
            let woken = signal.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let current = match self.known_current() {
                Some(current) => current,
                None => match self.store.get_operation(&self.id).await {
                    Ok(op) => op,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e.into()));
                    }
                },
            };
            self.must_read = false;
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
            // Waiters are woken on change, also by another replica's
            // (`store/notices.rs`); the slow re-read only covers a missed wake-up.
            let sleep_for = (self.store.operation_events().recheck_interval())
                .min(self.deadline.saturating_duration_since(Instant::now()));
            let mut stopping = self.stopping.clone();
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep(sleep_for) => {
                    self.must_read = true;
                }
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

/// Said, as UNAVAILABLE, to a waiter whose gateway stops while its operation is still live.
pub fn stopping_status(operation_id: &str) -> tonic::Status {
    tonic::Status::unavailable(format!(
        "the gateway is stopping; operation {operation_id} goes on: wait for it again \
         (`openshell operations wait {operation_id}`) once a gateway serves"
    ))
}

/// A wait ended on a live operation: its deadline passed first.
pub fn ended_by_deadline(op: &OperationRecord, threshold: f64) -> bool {
    !op.state.is_terminal() && !threshold_reached(op, threshold)
}

/// Follows `watch` until the operation is terminal (or reaches the
/// threshold, or the deadline passes) and returns its last version and
/// whether the deadline ended the wait.
/// A wait cut short by the gateway stopping is an error, UNAVAILABLE, naming the operation.
pub async fn wait_for_terminal(
    store: &Store,
    mut watch: OperationWatch,
) -> Result<(OperationRecord, bool), tonic::Status> {
    let (id, threshold) = (watch.id.clone(), watch.threshold);
    let mut last = None;
    while let Some(item) = watch.next().await {
        last = Some(item?);
    }
    if watch.ended_by_stopping() {
        return Err(stopping_status(&id));
    }
    match last {
        Some(op) => {
            let timed_out = ended_by_deadline(&op, threshold);
            Ok((op, timed_out))
        }
        None => Ok((
            store.get_operation(&id).await.map_err(GatewayError::from)?,
            true,
        )),
    }
}
