//! Build permits. `max(4, 2 × db_pool)` in all; a quarter (at least one)
//! is reserved for the sandbox lane. Sandbox builds take whichever pool
//! frees first; fanout builds only use the general pool, which always keeps
//! at least one permit. Both pools are FIFO-fair (tokio semaphores).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::marks::Lane;

/// The two permit pools.
#[derive(Debug)]
pub struct Permits {
    general: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    total: usize,
}

/// A held build permit; dropping it returns it to its pool.
#[derive(Debug)]
pub struct BuildPermit {
    _permit: OwnedSemaphorePermit,
    pub from_reserve: bool,
}

impl Permits {
    /// Sizes the pools from the store's connection pool size.
    pub fn for_pool(db_pool: usize) -> Self {
        let total = (2 * db_pool).max(4);
        let reserve = (total / 4).max(1);
        Self::with_sizes(total - reserve, reserve)
    }

    pub fn with_sizes(general: usize, reserve: usize) -> Self {
        Self {
            general: Arc::new(Semaphore::new(general.max(1))),
            reserve: Arc::new(Semaphore::new(reserve.max(1))),
            total: general.max(1) + reserve.max(1),
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// True while fanout builds hold every permit of the general pool.
    pub fn fanout_saturated(&self) -> bool {
        self.general.available_permits() == 0
    }

    pub async fn acquire(&self, lane: Lane) -> BuildPermit {
        match lane {
            Lane::Fanout => BuildPermit {
                _permit: acquire_owned(&self.general).await,
                from_reserve: false,
            },
            Lane::Sandbox => {
                tokio::select! {
                    biased;
                    permit = acquire_owned(&self.reserve) => BuildPermit { _permit: permit, from_reserve: true },
                    permit = acquire_owned(&self.general) => BuildPermit { _permit: permit, from_reserve: false },
                }
            }
        }
    }
}

async fn acquire_owned(semaphore: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    loop {
        // The semaphores are never closed; a closed one would only mean shutdown.
        if let Ok(permit) = semaphore.clone().acquire_owned().await {
            return permit;
        }
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sizing_follows_the_pool() {
        let p = Permits::for_pool(1);
        assert_eq!(p.total(), 4);
        let p = Permits::for_pool(8);
        assert_eq!(p.total(), 16);
    }

    #[tokio::test(start_paused = true)]
    async fn sandbox_lane_is_served_while_fanout_holds_every_general_permit() {
        let permits = Arc::new(Permits::with_sizes(2, 1));
        let a = permits.acquire(Lane::Fanout).await;
        let b = permits.acquire(Lane::Fanout).await;
        // A third fanout build waits…
        let waiting = {
            let permits = permits.clone();
            tokio::spawn(async move { permits.acquire(Lane::Fanout).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished());
        // …but a sandbox build gets the reserve at once.
        let s = tokio::time::timeout(Duration::from_millis(1), permits.acquire(Lane::Sandbox))
            .await
            .expect("sandbox lane must not wait behind fanout");
        assert!(s.from_reserve);
        drop(a);
        let third = waiting.await.unwrap();
        assert!(!third.from_reserve);
        drop((b, s, third));
    }
}
