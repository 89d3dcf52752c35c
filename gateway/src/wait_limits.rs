//! How many server-side waits one operator token may hold open on this
//! replica: `UpdateConfig` calls with `WAIT_FOR_APPLY` and `WaitForApply`
//! streams, counted together. Each wait holds a task, a subscription to its
//! operation and periodic store re-reads until it ends; without a bound, one
//! client that opens waits in a loop takes them from everyone. Past the
//! bound a call is refused `RESOURCE_EXHAUSTED` at once, naming the bound and
//! how to go on, rather than queued: a wait that queued would only end later.
//!
//! The refusal says when to come back, in its message and as
//! [`RETRY_PUSHBACK_METADATA`]: a client told only "retry when one ends"
//! cannot know when that is, and retrying at once (or all at the same moment)
//! only makes more refusals.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::Rng;
use tonic::Status;
use tonic::metadata::MetadataValue;

/// The metadata a refusal carries its retry delay in, whole milliseconds: gRPC's own name
/// for a server's pushback (gRFC A6), so a client whose channel has a retry policy honours
/// it as it is.
pub const RETRY_PUSHBACK_METADATA: &str = "grpc-retry-pushback-ms";

/// The least a refused caller is told to wait. Waits end when supervisors apply, which
/// takes about this long; plus up to as much again at random, so callers refused together
/// come back spread out rather than as one burst.
const RETRY_AFTER: Duration = Duration::from_secs(1);

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
            return Err(refusal(token, self.max_per_token, retry_after()));
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

fn retry_after() -> Duration {
    let spread = u64::try_from(RETRY_AFTER.as_millis()).unwrap_or(1000);
    RETRY_AFTER + Duration::from_millis(rand::rng().random_range(0..=spread))
}

fn refusal(token: &str, max_per_token: usize, retry_after: Duration) -> Status {
    let millis = retry_after.as_millis();
    let mut status = Status::resource_exhausted(format!(
        "token '{token}' already has {max_per_token} waits open on this replica, the limit \
         (max_waits_per_token); retry in {millis} ms ({RETRY_PUSHBACK_METADATA}), when one \
         has ended, or write with COMMIT_ONLY and follow the operation with GetOperation"
    ));
    if let Ok(value) = MetadataValue::try_from(millis.to_string()) {
        status.metadata_mut().insert(RETRY_PUSHBACK_METADATA, value);
    }
    status
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
        let pushback: u64 = err
            .metadata()
            .get(RETRY_PUSHBACK_METADATA)
            .expect("a refusal carries its retry delay")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1000..=2000).contains(&pushback), "{pushback}");
        assert!(
            err.message().contains(&format!("retry in {pushback} ms")),
            "{err:?}"
        );
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
