//! The seeded choices of a run: the workload's writes and the faults' timing.

use std::time::Duration;

/// A small deterministic generator (SplitMix64): the same seed gives the same run of choices
/// on every machine, with no dependency on a crate's algorithm staying the same.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).unwrap_or(0)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration uniform in `low..high`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = u64::try_from((high.saturating_sub(low)).as_millis()).unwrap_or(0);
        low + Duration::from_millis(self.below(span.max(1)))
    }

    /// A generator of its own for another task, so each task's choices stay reproducible
    /// whatever order the tasks run in.
    pub fn fork(&mut self) -> Self {
        Self(self.next_u64())
    }
}
