//! Whether this replica is fanning out, and so where writes should run.
//!
//! During a fleet fanout the runtime has thousands of session tasks ready.
//! A write transaction awaits each of its statements, and each time its
//! task queues behind them before the next statement goes out, holding the
//! one SQLite writer all the while: a one-report resolution took 4-15 ms
//! for about 1 ms of work. Writes made then run on the store's writer
//! thread (`Store::run_write`). Otherwise they run in place, which is
//! cheaper: on the writer thread a write sleeps and wakes once per
//! statement, which cost single writes 0.7 ms and 16 concurrent clients up
//! to a quarter of their commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::permits::Permits;
use crate::in_flight::InFlight;
use crate::store::WritePlace;

/// Tasks waiting in the runtime's shared queue above which it counts as
/// crowded. Single writes and 16 concurrent writers stay below it: their
/// latency and commit rate are those of writes in place.
const CROWDED_QUEUE: usize = 32;

/// Fleet writes under way, the fanout's hold on the build permits, and the
/// runtime's queue of tasks woken from other threads.
#[derive(Debug)]
pub struct FanoutActivity {
    permits: Arc<Permits>,
    fleet_writes: AtomicUsize,
    runtime: Option<tokio::runtime::Handle>,
}

impl FanoutActivity {
    /// Watches `permits` and, when called on a runtime, that runtime.
    pub fn new(permits: Arc<Permits>) -> Self {
        Self {
            permits,
            fleet_writes: AtomicUsize::new(0),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// True while a fleet write commits and publishes, while its fanout
    /// holds every fanout build permit, or while more than
    /// [`CROWDED_QUEUE`] tasks woken from other threads (statement replies,
    /// writes finished on the writer thread) wait for the runtime, as when
    /// a fanout's acks arrive.
    pub fn crowded(&self) -> bool {
        self.fleet_writes.load(Ordering::SeqCst) > 0
            || self.permits.fanout_saturated()
            || self
                .runtime
                .as_ref()
                .is_some_and(|rt| rt.metrics().global_queue_depth() > CROWDED_QUEUE)
    }

    /// Where a write made now should run.
    pub fn write_place(&self) -> WritePlace {
        if self.crowded() {
            WritePlace::WriterThread
        } else {
            WritePlace::Caller
        }
    }

    /// Marks a fleet write (a global or workspace `UpdateConfig`) as under
    /// way, from before its commit until its publication, when the guard
    /// drops.
    pub fn fleet_write(&self) -> InFlight<'_> {
        InFlight::enter(&self.fleet_writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::Lane;

    #[tokio::test]
    async fn writes_move_to_the_writer_thread_while_a_fleet_write_or_its_fanout_runs() {
        let permits = Arc::new(Permits::with_sizes(2, 1));
        let activity = FanoutActivity::new(permits.clone());
        assert_eq!(activity.write_place(), WritePlace::Caller);

        let fleet_write = activity.fleet_write();
        assert_eq!(activity.write_place(), WritePlace::WriterThread);
        drop(fleet_write);
        assert_eq!(activity.write_place(), WritePlace::Caller);

        let first = permits.acquire(Lane::Fanout).await;
        assert_eq!(activity.write_place(), WritePlace::Caller);
        let second = permits.acquire(Lane::Fanout).await;
        assert_eq!(activity.write_place(), WritePlace::WriterThread);
        drop((first, second));
        assert_eq!(activity.write_place(), WritePlace::Caller);
    }
}
