//! In-process wake-ups for operation waiters. A write transaction records
//! which operations it changed and, once committed, wakes only their
//! waiters, so thousands of waiters cost one `Notify` each and no polling
//! storm. Waiters still re-read slowly as a fallback, so a missed wake-up
//! (or a change made by another replica) cannot hang them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Notify;

use super::OperationState;
use crate::metrics::StateLabel;

/// Registry of per-operation notifiers, and the count of operations each
/// terminal state ended (committed on this replica); cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct OperationEvents {
    waiters: Arc<Mutex<HashMap<String, Weak<Notify>>>>,
    ended: Family<StateLabel, Counter>,
}

impl OperationEvents {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Notify>>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The notifier of one operation, shared by all its waiters.
    pub fn subscribe(&self, operation_id: &str) -> Arc<Notify> {
        let mut map = self.lock();
        if let Some(existing) = map.get(operation_id).and_then(Weak::upgrade) {
            return existing;
        }
        // Drop entries whose waiters are all gone before adding one.
        if map.len() > 1024 {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let notify = Arc::new(Notify::new());
        map.insert(operation_id.to_string(), Arc::downgrade(&notify));
        notify
    }

    /// Wakes the waiters of these operations.
    pub fn notify<'a>(&self, operation_ids: impl IntoIterator<Item = &'a String>) {
        let map = self.lock();
        for id in operation_ids {
            if let Some(notify) = map.get(id).and_then(Weak::upgrade) {
                notify.notify_waiters();
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
    use std::time::Duration;

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
            events.notify(&["op-a".to_string()]);
            tokio::time::timeout(Duration::from_secs(1), woke_a)
                .await
                .unwrap();
            assert!(
                tokio::time::timeout(Duration::from_millis(20), woke_b)
                    .await
                    .is_err()
            );
        }
        drop((a, b));
        assert_eq!(events.waiting_operations(), 0);
    }
}
