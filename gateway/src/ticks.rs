//! Shared ticks: the periodic timers of many sessions (reconcile passes,
//! heartbeats) rounded up onto one grid, counted from one instant for the
//! whole process, so the timers due within a tick fire together and the
//! runtime wakes once for all of them instead of once for each. An idle
//! gateway with 10k sessions spent most of its CPU on those wake-ups.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// The first tick boundary at or after `at` on the grid of `tick`; `at`
/// itself when `tick` is zero.
pub fn on_shared_tick(at: Instant, tick: Duration) -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let tick_nanos = tick.as_nanos();
    if tick_nanos == 0 {
        return at;
    }
    let since = at.saturating_duration_since(*EPOCH.get_or_init(Instant::now));
    let into_tick = since.as_nanos() % tick_nanos;
    if into_tick == 0 {
        return at;
    }
    at + Duration::from_nanos(u64::try_from(tick_nanos - into_tick).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timers due anywhere within one tick fire together at its end, never
    /// before they are due, and stay together when each repeats at a whole
    /// number of ticks (a heartbeat every 15 ticks).
    #[tokio::test(start_paused = true)]
    async fn timers_due_within_one_tick_fire_together_and_stay_together() {
        let tick = Duration::from_secs(1);
        let base = on_shared_tick(Instant::now() + tick, tick);
        let firsts: Vec<Instant> = [1, 400, 999]
            .iter()
            .map(|ms| {
                let due = base + Duration::from_millis(*ms);
                let at = on_shared_tick(due, tick);
                assert!(at >= due);
                at
            })
            .collect();
        assert!(firsts.iter().all(|at| *at == base + tick), "{firsts:?}");
        let period = 15 * tick;
        assert_eq!(on_shared_tick(firsts[0] + period, tick), firsts[0] + period);
        assert_eq!(on_shared_tick(base, Duration::ZERO), base);
    }
}
