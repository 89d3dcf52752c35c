//! Jittered exponential backoff, shared by session reconnects, report retries and retries of
//! applies that failed for a reason that can pass, and the jitter that spreads the first poll
//! after a lost push session.
//!
//! Jitter matters here more than usual: when a gateway restarts, every supervisor of the fleet
//! loses its session at the same instant, and without jitter they would all come back in lockstep.

use std::time::Duration;

use rand::Rng;

/// Shape of a backoff sequence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// Delay before the first retry (before jitter).
    pub initial: Duration,
    /// Growth per attempt.
    pub factor: f64,
    /// Upper bound of any delay, jitter included.
    pub max: Duration,
    /// Relative jitter: each delay is drawn uniformly from `base × (1 ± jitter)`.
    pub jitter: f64,
}

impl Default for BackoffConfig {
    /// 1 s × 1.6 per attempt, capped at 30 s, ±20 % jitter.
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            factor: 1.6,
            max: Duration::from_secs(30),
            jitter: 0.2,
        }
    }
}

impl BackoffConfig {
    /// Retrying an apply that failed for a reason that can pass (a full disk, say): 1, 2, 4, …
    /// seconds, at most 30, ±10 %. Doubling, because the retry costs only local work and the
    /// cause (someone freeing space) is usually quick or slow, rarely in between.
    pub fn apply_retry() -> Self {
        Self {
            initial: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(30),
            jitter: 0.1,
        }
    }

    /// The same growth with every duration scaled down, for tests that cannot wait seconds.
    pub fn fast(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            ..Self::default()
        }
    }

    /// The delay before retry number `attempt` (0-based) without jitter, already capped.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let exp = self.factor.max(1.0).powi(attempt.min(64) as i32);
        let secs = self.initial.as_secs_f64() * exp;
        let max = self.max.as_secs_f64();
        Duration::from_secs_f64(if secs.is_finite() { secs.min(max) } else { max })
    }

    /// The jittered delay for `attempt`, where `unit` in `[0, 1]` picks the point inside the
    /// jitter band (0 is the low edge, 1 the high edge). Never exceeds `max`.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let base = self.base_delay(attempt).as_secs_f64();
        let jitter = self.jitter.clamp(0.0, 1.0);
        let low = base * (1.0 - jitter);
        let high = base * (1.0 + jitter);
        let secs = low + (high - low) * unit.clamp(0.0, 1.0);
        Duration::from_secs_f64(secs.min(self.max.as_secs_f64()).max(0.0))
    }
}

/// A running backoff: each call to [`Backoff::next_delay`] moves one attempt further.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    attempt: u32,
}

impl Backoff {
    pub fn new(config: BackoffConfig) -> Self {
        Self { config, attempt: 0 }
    }

    /// The delay to wait now; the next call returns a longer one until the cap.
    pub fn next_delay(&mut self) -> Duration {
        let unit: f64 = rand::rng().random_range(0.0..=1.0);
        let delay = self.config.delay(self.attempt, unit);
        self.attempt = self.attempt.saturating_add(1);
        delay
    }

    /// Back to the initial delay, after something succeeded for long enough.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Retries since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

/// A delay drawn uniformly from `[0, within)`; zero when `within` is zero.
pub(crate) fn spread(within: Duration) -> Duration {
    let nanos = u64::try_from(within.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rand::rng().random_range(0..nanos))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn approx(a: Duration, secs: f64) -> bool {
        (a.as_secs_f64() - secs).abs() < 1e-6
    }

    #[test]
    fn base_sequence_grows_by_factor_and_caps() {
        let c = BackoffConfig::default();
        let expected = [
            1.0, 1.6, 2.56, 4.096, 6.5536, 10.48576, 16.777216, 26.8435456,
        ];
        for (attempt, secs) in expected.iter().enumerate() {
            assert!(
                approx(c.base_delay(attempt as u32), *secs),
                "attempt {attempt}: {:?}",
                c.base_delay(attempt as u32)
            );
        }
        assert!(approx(c.base_delay(8), 30.0));
        assert!(approx(c.base_delay(1000), 30.0));
        assert!(approx(c.base_delay(u32::MAX), 30.0));
    }

    #[test]
    fn apply_retries_double_up_to_thirty_seconds() {
        let c = BackoffConfig::apply_retry();
        let bases: Vec<f64> = (0..7).map(|a| c.base_delay(a).as_secs_f64()).collect();
        assert_eq!(bases, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]);
        assert!(c.delay(100, 1.0) <= Duration::from_secs(30));
    }

    #[test]
    fn jitter_band_edges() {
        let c = BackoffConfig::default();
        assert!(approx(c.delay(0, 0.0), 0.8));
        assert!(approx(c.delay(0, 1.0), 1.2));
        assert!(approx(c.delay(0, 0.5), 1.0));
        assert!(approx(c.delay(2, 0.0), 2.56 * 0.8));
        // At the cap the high edge is clipped, the low edge is not.
        assert!(approx(c.delay(20, 0.0), 24.0));
        assert!(approx(c.delay(20, 1.0), 30.0));
    }

    #[test]
    fn random_delays_stay_in_bounds_and_reset() {
        let c = BackoffConfig::default();
        let mut b = Backoff::new(c);
        for attempt in 0..40u32 {
            let d = b.next_delay().as_secs_f64();
            let base = c.base_delay(attempt).as_secs_f64();
            assert!(
                d >= base * 0.8 - 1e-9,
                "attempt {attempt}: {d} < {base}*0.8"
            );
            assert!(d <= (base * 1.2).min(30.0) + 1e-9, "attempt {attempt}: {d}");
            assert!(d <= 30.0 + 1e-9);
        }
        assert_eq!(b.attempts(), 40);
        b.reset();
        assert_eq!(b.attempts(), 0);
        let d = b.next_delay().as_secs_f64();
        assert!((0.8..=1.2).contains(&d), "{d}");
    }

    #[test]
    fn jitter_actually_varies() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let mut b = Backoff::new(BackoffConfig::default());
            seen.insert(b.next_delay().as_micros());
        }
        assert!(seen.len() > 1, "50 draws gave one value: no jitter");
    }

    #[test]
    fn spread_stays_below_its_bound_and_varies() {
        assert_eq!(spread(Duration::ZERO), Duration::ZERO);
        let within = Duration::from_secs(10);
        let draws: std::collections::BTreeSet<_> = (0..50).map(|_| spread(within)).collect();
        assert!(draws.iter().all(|d| *d < within), "{draws:?}");
        assert!(draws.len() > 1, "50 draws gave one value: no jitter");
    }
}
