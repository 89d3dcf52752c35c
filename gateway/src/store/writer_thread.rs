//! The thread where SQLite write transactions run while the gateway's
//! runtime is crowded.
//!
//! Every statement is a round trip to the connection's worker thread, and
//! the task that awaits it must be polled again before the next statement
//! goes out. On the gateway's runtime during a fleet fanout, that task
//! waits behind thousands of ready session tasks each time, holding the one
//! writer meanwhile. On a runtime of its own, a write waits only for other
//! writes. When to use it is decided by the caller
//! ([`WritePlace`](super::WritePlace); `delivery/activity.rs`).

use std::future::Future;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

use super::error::{Result, StoreError};

/// A single-threaded runtime on a thread of its own; it stops, cancelling
/// what still runs on it, when this handle is dropped.
#[derive(Debug)]
pub(super) struct WriterThread {
    handle: Handle,
    _stop: oneshot::Sender<()>,
}

impl WriterThread {
    pub(super) async fn start() -> Result<Self> {
        let (started, handle) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("openshell-store-writes".into())
            .spawn(move || {
                let runtime = match Builder::new_current_thread().enable_time().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                };
                if started.send(Ok(runtime.handle().clone())).is_ok() {
                    // Dropped here, on its own thread, once the store is gone.
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                }
            })
            .map_err(|e| writes_unavailable(&e))?;
        let handle = handle
            .await
            .map_err(|e| writes_unavailable(&e))?
            .map_err(|e| writes_unavailable(&e))?;
        Ok(Self {
            handle,
            _stop: stop,
        })
    }

    /// Runs `write` to completion on the writer thread, even if the
    /// returned future is dropped.
    pub(super) async fn run<T, E>(
        &self,
        write: impl Future<Output = Result<T, E>> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.handle
            .spawn(write)
            .await
            .map_err(|e| writes_unavailable(&e))?
    }

    /// Starts a long-lived task on the writer thread.
    pub(super) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(task);
    }
}

/// A write that could not run, or whose task panicked: the detail is
/// logged, not returned.
pub(super) fn writes_unavailable(e: &dyn std::fmt::Display) -> StoreError {
    tracing::error!(error = %e, "a store write task failed");
    StoreError::Unavailable("the store cannot take writes now; retry".into())
}
