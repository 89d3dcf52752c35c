//! Following one operation from JS: a pull-based handle over the sdk's
//! `wait_for_apply_final`, which JS drives with `next()` and may `cancel()`.
//!
//! The sdk's helper runs in a Tokio task that feeds a channel, so the
//! resubscribe-on-restart and final-read rules stay in the sdk; this module
//! only filters repeats and ends the task. Cancelling drops the wait stream
//! and nothing else: the gateway treats a vanished watcher like any client
//! disconnect, so the operation itself is never cancelled or altered.

use napi_derive::napi;
use openshell_sdk::{self as sdk, SdkError};
use tokio::sync::{Mutex, mpsc};
use tokio::task::AbortHandle;

use crate::error::to_napi;
use crate::views::Operation;

/// What one `next()` call found.
#[napi(string_enum = "camelCase")]
pub enum WatchEventKind {
    /// The operation changed state (or, for fleet operations, its counts).
    Progress,
    /// The operation is terminal, or the fleet threshold is met; the last event.
    Done,
    /// The wait deadline passed while the operation was still live; the last event.
    TimedOut,
}

#[napi(object)]
pub struct WatchEvent {
    pub kind: WatchEventKind,
    pub operation: Operation,
}

enum Step {
    Progress(sdk::Operation),
    Done(sdk::Operation),
    TimedOut(sdk::Operation),
    Failed(SdkError),
}

/// A running wait on one operation. Dropping it (when JS collects it) ends
/// the wait like `cancel()` does.
#[napi]
pub struct OperationWatch {
    steps: Mutex<mpsc::UnboundedReceiver<Step>>,
    task: AbortHandle,
}

impl OperationWatch {
    pub(crate) fn start(
        client: sdk::Client,
        id: String,
        timeout: Option<std::time::Duration>,
        threshold: Option<f64>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = napi::bindgen_prelude::spawn(async move {
            let mut last_seen: Option<(sdk::OperationState, Option<sdk::FleetProgress>)> = None;
            let result = client
                .wait_for_apply_final(&id, timeout, threshold, |op| {
                    // A resubscribe replays the current state first; callers
                    // asked for changes, so a repeat is not news.
                    let seen = (op.state, op.fleet);
                    if last_seen != Some(seen) {
                        last_seen = Some(seen);
                        // A closed receiver means JS stopped listening; the
                        // abort that follows ends this task.
                        let _ = tx.send(Step::Progress(op.clone()));
                    }
                })
                .await;
            let last = match result {
                Ok(op) => Step::Done(op),
                Err(SdkError::WaitTimedOut { operation }) => Step::TimedOut(*operation),
                Err(err) => Step::Failed(err),
            };
            let _ = tx.send(last);
        })
        .abort_handle();
        Self {
            steps: Mutex::new(rx),
            task,
        }
    }
}

#[napi]
impl OperationWatch {
    /// The next event, or `null` once the watch ended (after the last event
    /// or a `cancel()`). Rejects when the wait itself fails.
    #[napi]
    pub async fn next(&self) -> napi::Result<Option<WatchEvent>> {
        let step = self.steps.lock().await.recv().await;
        let (kind, op) = match step {
            None => return Ok(None),
            Some(Step::Failed(err)) => return Err(to_napi(err)),
            Some(Step::Progress(op)) => (WatchEventKind::Progress, op),
            Some(Step::Done(op)) => (WatchEventKind::Done, op),
            Some(Step::TimedOut(op)) => (WatchEventKind::TimedOut, op),
        };
        Ok(Some(WatchEvent {
            kind,
            operation: op.into(),
        }))
    }

    /// Stops waiting: closes the wait stream to the gateway and makes every
    /// pending and later `next()` resolve `null`. The operation is untouched.
    #[napi]
    pub fn cancel(&self) {
        self.task.abort();
    }
}

impl Drop for OperationWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
