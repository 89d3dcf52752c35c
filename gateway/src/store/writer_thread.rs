//! The thread where write transactions run while the gateway's runtime is
//! crowded.
//!
//! Every statement is a round trip (to SQLite's connection thread, or to
//! PostgreSQL over the network), and the task that awaits it must be polled
//! again before the next statement goes out. On the gateway's runtime during
//! a fleet fanout, that task waits behind thousands of ready session tasks
//! each time: on SQLite it holds the one writer meanwhile, and on
//! PostgreSQL the report resolver, one task among ten thousand, fell a
//! thousand acknowledgements behind the fanout, so a 10k fleet operation
//! completed hundreds of milliseconds after its last acknowledgement. On a
//! runtime of its own, a write waits only for other writes. When to use it
//! is decided by the caller ([`WritePlace`](super::WritePlace);
//! `delivery/activity.rs`).
//!
//! On PostgreSQL the runtime drives I/O, and writes that run here take
//! their connections from a pool of their own, opened from here: a socket
//! is registered with the runtime that opened it, so a connection opened
//! on the crowded runtime would wake its writer-thread task only when that
//! runtime got round to polling its I/O driver, which a fanout keeps
//! busy.

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
    /// `network`: statements go over sockets (PostgreSQL), so the runtime
    /// drives I/O. Without it (SQLite) it drives timers only and parks on a
    /// condition variable, a cheaper wake-up per statement.
    pub(super) async fn start(network: bool) -> Result<Self> {
        let (started, handle) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("openshell-store-writes".into())
            .spawn(move || {
                let mut builder = Builder::new_current_thread();
                builder.enable_time();
                if network {
                    builder.enable_io();
                }
                let runtime = match builder.build() {
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

    /// Whether the calling task runs on the writer thread.
    pub(super) fn is_current(&self) -> bool {
        Handle::try_current().is_ok_and(|current| current.id() == self.handle.id())
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

#[cfg(test)]
mod tests {
    use super::*;

    // Which pool a PostgreSQL write takes its connection from follows this answer.
    #[tokio::test]
    async fn knows_whether_a_task_runs_on_the_writer_thread() -> Result<()> {
        let thread = std::sync::Arc::new(WriterThread::start(true).await?);
        assert!(!thread.is_current());
        let probe = thread.clone();
        let answer = thread
            .run(async move { Ok::<_, StoreError>(probe.is_current()) })
            .await?;
        assert!(answer);
        Ok(())
    }
}
