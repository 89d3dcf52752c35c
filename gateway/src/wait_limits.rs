//! How many server-side waits one operator token may hold open on this
//! replica: `UpdateConfig` calls with `WAIT_FOR_APPLY` and `WaitForApply`
//! streams, counted together. Each wait holds a task, a subscription to its
//! operation and periodic store re-reads until it ends; without a bound, one
//! client that opens waits in a loop takes them from everyone. Past the
//! bound a call is refused `RESOURCE_EXHAUSTED` at once, naming the bound and
//! how to go on, rather than queued: a wait that queued would only end later.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tonic::Status;

/// The open waits of every token, against one bound.
#[derive(Debug)]
pub struct WaitLimiter {
    max_per_token: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One open wait; dropping it (the wait ended, or its client hung up) frees
/// its place.
#[derive(Debug)]
pub struct WaitPermit {
    limiter: Arc<WaitLimiter>,
    token: String,
}

impl WaitLimiter {
    pub fn new(max_per_token: usize) -> Arc<Self> {
        Arc::new(Self {
            max_per_token,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more wait of `token`, or `RESOURCE_EXHAUSTED`.
    pub fn try_acquire(self: &Arc<Self>, token: &str) -> Result<WaitPermit, Status> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(token.to_string()).or_insert(0);
        if *count >= self.max_per_token {
            return Err(Status::resource_exhausted(format!(
                "token '{token}' already has {} waits open on this replica, the limit \
                 (max_waits_per_token); retry when one ends, or write with COMMIT_ONLY and \
                 follow the operation with GetOperation",
                self.max_per_token
            )));
        }
        *count += 1;
        Ok(WaitPermit {
            limiter: self.clone(),
            token: token.to_string(),
        })
    }

    /// Waits `token` holds open now.
    pub fn open(&self, token: &str) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for WaitPermit {
    fn drop(&mut self) {
        let mut open = self
            .limiter
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.token) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                // Tokens come and go (created, revoked): forget the idle ones.
                open.remove(&self.token);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_token_past_its_bound_is_refused_until_a_wait_ends() {
        let limiter = WaitLimiter::new(2);
        let first = limiter.try_acquire("ci").unwrap();
        let _second = limiter.try_acquire("ci").unwrap();
        let err = limiter.try_acquire("ci").unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(err.message().contains("max_waits_per_token"), "{err:?}");
        assert!(err.message().contains("retry"), "{err:?}");
        // Another token has its own places.
        let _other = limiter.try_acquire("ops").unwrap();
        drop(first);
        assert_eq!(limiter.open("ci"), 1);
        let _third = limiter.try_acquire("ci").unwrap();
    }

    #[test]
    fn idle_tokens_are_forgotten() {
        let limiter = WaitLimiter::new(1);
        drop(limiter.try_acquire("gone").unwrap());
        assert!(limiter.open.lock().unwrap().is_empty());
    }
}
