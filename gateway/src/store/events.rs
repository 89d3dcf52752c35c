//! In-process wake-ups for operation waiters. A write transaction records
//! which operations it changed and, once committed, wakes only their
//! waiters, so thousands of waiters cost one signal each and no polling
//! storm. A change that wrote the whole row (a sandbox operation marked
//! delivered or ended) hands its waiters the row itself: during a fanout a
//! read on the crowded runtime costs milliseconds, and a `WAIT_FOR_APPLY`
//! write used to read twice. On PostgreSQL a transaction that changed
//! operations also announces them to the other replicas (`notices.rs`), whose
//! waiters re-read at once. Waiters still re-read slowly as a fallback, so a
//! missed wake-up cannot hang them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use super::{OperationRecord, OperationState};
use crate::metrics::StateLabel;

/// What the waiters of one operation share.
#[derive(Debug, Default)]
pub struct OperationSignal {
    notify: Notify,
    seen: Mutex<SignalledChanges>,
}

#[derive(Debug, Default)]
struct SignalledChanges {
    count: u64,
    /// The operation as the latest change left it, when that change wrote
    /// the whole row. A terminal row stays: terminal operations never change.
    row: Option<OperationRecord>,
}

impl OperationSignal {
    fn lock(&self) -> std::sync::MutexGuard<'_, SignalledChanges> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves at the next change; enable it before reading [`Self::changes`]
    /// so a change in between is not missed.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// How many changes were committed since the first waiter subscribed,
    /// and the row as the latest one left it, if that change wrote it.
    pub fn changes(&self) -> (u64, Option<OperationRecord>) {
        let seen = self.lock();
        (seen.count, seen.row.clone())
    }

    fn changed(&self, row: Option<&OperationRecord>) {
        {
            let mut seen = self.lock();
            seen.count += 1;
            if !seen.row.as_ref().is_some_and(|r| r.state.is_terminal()) {
                seen.row = row.cloned();
            }
        }
        self.notify.notify_waiters();
    }
}

/// One operation a committed transaction changed.
#[derive(Debug)]
pub(crate) struct ChangedOperation {
    pub id: String,
    /// The whole row after the change, when the statement returned it.
    pub row: Option<OperationRecord>,
}

/// How often a waiter re-reads its operation in case a wake-up was missed.
pub const DEFAULT_WAIT_RECHECK: Duration = Duration::from_secs(1);

/// Registry of per-operation signals, and the count of operations each
/// terminal state ended (committed on this replica); cheap to clone.
#[derive(Debug, Clone)]
pub struct OperationEvents {
    waiters: Arc<Mutex<HashMap<String, Weak<OperationSignal>>>>,
    ended: Family<StateLabel, Counter>,
    recheck: Duration,
}

impl Default for OperationEvents {
    fn default() -> Self {
        Self::with_recheck(DEFAULT_WAIT_RECHECK)
    }
}

impl OperationEvents {
    /// Events whose waiters re-read every `recheck` (tests lengthen it to
    /// show that a wake-up, not the re-read, ended a wait).
    pub fn with_recheck(recheck: Duration) -> Self {
        Self {
            waiters: Arc::default(),
            ended: Family::default(),
            recheck,
        }
    }

    /// How often a waiter re-reads its operation without a wake-up.
    pub fn recheck_interval(&self) -> Duration {
        self.recheck
    }

    /// Wakes the waiters of operations another replica changed: they re-read.
    pub(crate) fn wake(&self, operation_ids: &[&str]) {
        let map = self.lock();
        for id in operation_ids {
            if let Some(signal) = map.get(*id).and_then(Weak::upgrade) {
                signal.changed(None);
            }
        }
    }

    /// Wakes every waiter: changes may have been missed (a lost listener
    /// connection, or too many to name).
    pub(crate) fn wake_all(&self) {
        let signals: Vec<Arc<OperationSignal>> =
            self.lock().values().filter_map(Weak::upgrade).collect();
        for signal in signals {
            signal.changed(None);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<OperationSignal>>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The signal of one operation, shared by all its waiters; it stays
    /// registered while one of them holds it.
    pub fn subscribe(&self, operation_id: &str) -> Arc<OperationSignal> {
        let mut map = self.lock();
        if let Some(existing) = map.get(operation_id).and_then(Weak::upgrade) {
            return existing;
        }
        // Drop entries whose waiters are all gone before adding one.
        if map.len() > 1024 {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let signal = Arc::new(OperationSignal::default());
        map.insert(operation_id.to_string(), Arc::downgrade(&signal));
        signal
    }

    /// Wakes the waiters of these operations.
    pub(crate) fn notify(&self, changed: &[ChangedOperation]) {
        let map = self.lock();
        for change in changed {
            if let Some(signal) = map.get(&change.id).and_then(Weak::upgrade) {
                signal.changed(change.row.as_ref());
            }
        }
    }

    /// Counts operations a committed transaction ended, by terminal state.
    pub fn count_ended(&self, states: &[OperationState]) {
        for state in states {
            self.ended
                .get_or_create(&StateLabel {
                    state: state.as_str(),
                })
                .inc();
        }
    }

    /// The counts of ended operations, for the gateway's metrics.
    pub fn ended_counts(&self) -> Family<StateLabel, Counter> {
        self.ended.clone()
    }

    pub fn waiting_operations(&self) -> usize {
        self.lock()
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Outcome, TargetKind};
    use std::time::Duration;

    fn changed(id: &str, row: Option<OperationRecord>) -> ChangedOperation {
        ChangedOperation {
            id: id.to_string(),
            row,
        }
    }

    fn row(id: &str, state: OperationState) -> OperationRecord {
        OperationRecord {
            id: id.to_string(),
            target_kind: TargetKind::Sandbox,
            target: "sb-1".into(),
            sandbox_id: Some("sb-1".into()),
            state,
            outcome: Outcome::None,
            error: String::new(),
            policy_revision: 2,
            settings_revision: 0,
            global_policy_revision: 0,
            no_op: false,
            touches_policy: true,
            caller: "test".into(),
            idempotency_key: None,
            created_at: 1,
            updated_at: 2,
            completed_at: None,
            fleet: None,
            provider_env_revision: None,
        }
    }

    #[tokio::test]
    async fn only_the_changed_operation_is_woken() {
        let events = OperationEvents::default();
        let a = events.subscribe("op-a");
        let b = events.subscribe("op-b");
        {
            let woke_a = a.notified();
            let woke_b = b.notified();
            tokio::pin!(woke_a, woke_b);
            woke_a.as_mut().enable();
            woke_b.as_mut().enable();
            events.notify(&[changed("op-a", None)]);
            tokio::time::timeout(Duration::from_secs(1), woke_a)
                .await
                .unwrap();
            assert!(
                tokio::time::timeout(Duration::from_millis(20), woke_b)
                    .await
                    .is_err()
            );
        }
        assert_eq!(a.changes().0, 1);
        assert_eq!(b.changes().0, 0);
        drop((a, b));
        assert_eq!(events.waiting_operations(), 0);
    }

    #[test]
    fn a_row_is_handed_on_only_while_it_is_the_latest_change() {
        let events = OperationEvents::default();
        let signal = events.subscribe("op-a");
        let delivered = row("op-a", OperationState::Delivered);
        events.notify(&[changed("op-a", Some(delivered.clone()))]);
        assert_eq!(signal.changes(), (1, Some(delivered)));
        // A change that did not return the row makes the last one stale.
        events.notify(&[changed("op-a", None)]);
        assert_eq!(signal.changes(), (2, None));
        let applied = row("op-a", OperationState::Applied);
        events.notify(&[changed("op-a", Some(applied.clone()))]);
        // A late notice of an earlier change cannot hide the terminal row.
        events.notify(&[changed(
            "op-a",
            Some(row("op-a", OperationState::Delivered)),
        )]);
        events.notify(&[changed("op-a", None)]);
        assert_eq!(signal.changes(), (5, Some(applied)));
    }
}
