//! When a failed call may be sent again.
//!
//! Only requests that cannot change state twice are retried: reads, and
//! `UpdateConfig` carrying an idempotency key (the gateway answers a repeat
//! with the original operation). A plain write that died with UNAVAILABLE may
//! still have committed, so resending it could write twice.

use std::future::Future;
use std::time::Duration;

use crate::SdkError;

/// Whether a request may be repeated safely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// Reads, and writes carrying an idempotency key.
    Safe,
    /// Writes without a key: sent exactly once.
    Unsafe,
}

/// Backoff schedule for retrying UNAVAILABLE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    pub max_attempts: u32,
    pub first_delay: Duration,
    pub max_jitter: Duration,
}

impl RetryPolicy {
    /// 100 ms, then 200 ms, each plus up to 25 ms of jitter; at most 3 attempts.
    pub const DEFAULT: Self = Self {
        max_attempts: 3,
        first_delay: Duration::from_millis(100),
        max_jitter: Duration::from_millis(25),
    };

    /// Runs `attempt` until it succeeds, fails with a non-retryable error, the
    /// request is not idempotent, or attempts run out.
    pub async fn run<T, F, Fut>(
        &self,
        idempotency: Idempotency,
        mut attempt: F,
    ) -> Result<T, SdkError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError>>,
    {
        let mut delay = self.first_delay;
        let mut tried = 1;
        loop {
            match attempt().await {
                Err(err)
                    if idempotency == Idempotency::Safe
                        && err.is_retryable()
                        && tried < self.max_attempts =>
                {
                    tracing::debug!(attempt = tried, error = %err, "gateway unavailable; retrying");
                    tokio::time::sleep(delay + self.jitter()).await;
                    delay = delay.saturating_mul(2);
                    tried += 1;
                }
                result => return result,
            }
        }
    }

    /// Spreads retries of many clients hitting the same restart apart.
    fn jitter(&self) -> Duration {
        let max = u64::try_from(self.max_jitter.as_millis()).unwrap_or(u64::MAX);
        if max == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(rand::random_range(0..=max))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const FAST: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        first_delay: Duration::from_millis(1),
        max_jitter: Duration::from_millis(1),
    };

    fn unavailable() -> SdkError {
        SdkError::Unavailable("down".into())
    }

    #[tokio::test]
    async fn retries_safe_requests_until_success() {
        let calls = Cell::new(0);
        let result = FAST
            .run(Idempotency::Safe, || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move { if n < 3 { Err(unavailable()) } else { Ok(n) } }
            })
            .await;
        assert_eq!(result.ok(), Some(3));
        assert_eq!(calls.get(), 3);
    }

    #[tokio::test]
    async fn gives_up_after_max_attempts() {
        let calls = Cell::new(0);
        let result: Result<(), _> = FAST
            .run(Idempotency::Safe, || {
                calls.set(calls.get() + 1);
                async { Err(unavailable()) }
            })
            .await;
        assert!(matches!(result, Err(SdkError::Unavailable(_))));
        assert_eq!(calls.get(), 3);
    }

    #[tokio::test]
    async fn never_retries_unsafe_writes() {
        let calls = Cell::new(0);
        let result: Result<(), _> = FAST
            .run(Idempotency::Unsafe, || {
                calls.set(calls.get() + 1);
                async { Err(unavailable()) }
            })
            .await;
        assert!(result.is_err());
        assert_eq!(calls.get(), 1);
    }

    #[tokio::test]
    async fn does_not_retry_other_errors() {
        let calls = Cell::new(0);
        let result: Result<(), _> = FAST
            .run(Idempotency::Safe, || {
                calls.set(calls.get() + 1);
                async { Err(SdkError::NotFound("x".into())) }
            })
            .await;
        assert!(matches!(result, Err(SdkError::NotFound(_))));
        assert_eq!(calls.get(), 1);
    }
}
