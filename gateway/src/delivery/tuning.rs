//! Intervals and bounds of push delivery, with production defaults.
//! Tests shorten them; operators normally never touch them.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct DeliveryTuning {
    /// Every session gets a reconcile pass this often: `sandbox_config` is
    /// rebuilt if its input revisions moved (`reconcile.rs`).
    pub reconcile_interval: Duration,
    /// Every this-many-th pass of a session rebuilds whatever the revisions
    /// say (0: never), so a repair made in the store without a new revision
    /// is picked up too.
    pub reconcile_full_rebuild_every: u32,
    /// The first reconcile pass comes at a random point in
    /// `[reconcile_first_min, reconcile_first_min + reconcile_interval)` after registration.
    pub reconcile_first_min: Duration,
    /// How long a sent snapshot may wait for its ack before the latest is resent.
    pub ack_timeout: Duration,
    /// Build deadlines, counted from when the permit is held.
    pub sandbox_config_deadline: Duration,
    pub provider_environment_deadline: Duration,
    pub bootstrap_deadline: Duration,
    /// Build failure backoff: doubles from `backoff_base` up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long the gateway waits for a bootstrap result before closing the session.
    pub bootstrap_result_timeout: Duration,
    /// How long a supervisor has to prepare the startup candidate of an image policy.
    pub startup_prepare_deadline: Duration,
    /// How long a first start refused for an invalid startup policy (the image's, or one the
    /// supervisor prepared) is retried while an operator may set a valid one; after this the
    /// refusal is permanent and the supervisor stops.
    pub invalid_startup_policy_wait: Duration,
    /// How often a replica on PostgreSQL replays the other replicas' fanout
    /// intents (`peers/replay.rs`).
    pub intent_replay_interval: Duration,
    /// How often a waiter on an operation re-reads it without a wake-up; every
    /// change wakes it, on PostgreSQL also one committed by another replica.
    pub wait_recheck_interval: Duration,
}

impl Default for DeliveryTuning {
    fn default() -> Self {
        Self {
            reconcile_interval: Duration::from_secs(30),
            reconcile_full_rebuild_every: 10,
            reconcile_first_min: Duration::from_secs(30),
            ack_timeout: Duration::from_secs(60),
            sandbox_config_deadline: Duration::from_secs(5),
            provider_environment_deadline: Duration::from_secs(20),
            bootstrap_deadline: Duration::from_secs(45),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            bootstrap_result_timeout: Duration::from_secs(45),
            startup_prepare_deadline: Duration::from_secs(45),
            invalid_startup_policy_wait: Duration::from_secs(5 * 60),
            intent_replay_interval: Duration::from_secs(2),
            wait_recheck_interval: crate::store::DEFAULT_WAIT_RECHECK,
        }
    }
}

impl DeliveryTuning {
    /// Reconcile passes start on shared ticks of a tenth of the interval (3 s in
    /// production), so one statement reads the revisions of all the sessions due in a tick
    /// (`reconcile.rs`). Each tick looks at every session for the ones due: at a thirtieth,
    /// that look alone was 7 % of an idle gateway's CPU with 10k sessions.
    pub fn reconcile_tick(&self) -> Duration {
        self.reconcile_interval / 10
    }

    /// Backoff after `failures` consecutive build failures: 1, 2, 4, 8, 16, then 30 s.
    pub fn backoff(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32 << (failures - 1).min(16);
        self.backoff_base
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_1_2_4_8_16_then_30() {
        let t = DeliveryTuning::default();
        let secs: Vec<u64> = (1..=8).map(|n| t.backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(t.backoff(0), Duration::ZERO);
    }
}
