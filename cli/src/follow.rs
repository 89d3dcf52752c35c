//! Following one operation until it ends, with live progress: used after a
//! committed write (`--wait`) and by `operations wait`.
//!
//! A write with `--wait` is committed COMMIT_ONLY and then followed through
//! the `WaitForApply` stream, rather than sent WAIT_FOR_APPLY, so progress is
//! live; the stream ends on the same terminal state, threshold or deadline
//! as a server-side wait, so the result and exit code are the same.

use std::time::{Duration, Instant};

use openshell_sdk::{Client, Operation, SdkError};

use crate::context::Ctx;
use crate::exit;
use crate::progress::Progress;

/// How a wait ended.
#[derive(Debug)]
pub enum Waited {
    /// Terminal, or a fleet threshold was met.
    Done(Operation),
    /// The deadline passed first; the operation is still live and flagged `wait_timed_out`.
    TimedOut(Operation),
    /// Ctrl-C stopped the wait; the last version seen. The operation goes on.
    Interrupted(Operation),
    /// The gateway was lost (see [`exit::for_wait_error`]); the last version
    /// seen. The operation may still complete.
    Lost { last: Operation, error: SdkError },
}

/// Follows `op` (just committed, or just read) until it is done, the
/// deadline passes, or the user presses Ctrl-C.
pub async fn follow(
    ctx: &Ctx,
    client: &Client,
    op: Operation,
    timeout: Option<Duration>,
    threshold: Option<f64>,
    started: Instant,
) -> anyhow::Result<Waited> {
    // Listen before the first progress line, so whoever sees the wait
    // begin can interrupt it and get the resume hint; a Ctrl-C before this
    // point (nothing committed yet, or just the commit) ends the process as usual.
    let mut interrupt = Interrupt::listen()?;
    let mut progress = Progress::start(ctx.progress_mode(), &op, threshold, started);
    if op.is_terminal() || threshold.is_some_and(|t| op.threshold_met(t)) {
        progress.finish(&op);
        return Ok(Waited::Done(op));
    }
    let mut last = op.clone();
    let ended = {
        let on_progress = |seen: &Operation| {
            progress.update(seen);
            last = seen.clone();
        };
        tokio::select! {
            result = client.wait_for_apply_final(&op.id, timeout, threshold, on_progress) => Some(result),
            () = interrupt.recv() => None,
        }
    };
    match ended {
        None => {
            progress.abandon();
            Ok(Waited::Interrupted(last))
        }
        Some(Ok(done)) => {
            progress.finish(&done);
            Ok(Waited::Done(done))
        }
        Some(Err(SdkError::WaitTimedOut { operation })) => {
            let mut live = *operation;
            live.wait_timed_out = true;
            progress.finish(&live);
            Ok(Waited::TimedOut(live))
        }
        Some(Err(error)) => {
            progress.abandon();
            match exit::for_wait_error(&error) {
                exit::GATEWAY_UNAVAILABLE => Ok(Waited::Lost { last, error }),
                _ => Err(error.into()),
            }
        }
    }
}

/// What to tell someone who stopped a wait with Ctrl-C.
pub fn interrupted_hint(op: &Operation) -> String {
    format!(
        "interrupted: stopped waiting; operation {id} is {state} and goes on at the gateway (nothing was cancelled).\n\
         resume with: openshell operations wait {id}",
        id = op.id,
        state = op.state
    )
}

/// What to tell someone whose wait lost the gateway: not a failure, an unknown outcome.
pub fn lost_hint(last: &Operation, error: &SdkError) -> String {
    format!(
        "error: lost the gateway while waiting for operation {id} (last seen {state}): {error}\n\
         gateway unavailable; the operation may still complete: check with `openshell operations get {id}`",
        id = last.id,
        state = last.state
    )
}

/// Ctrl-C (SIGINT) as an awaitable event.
struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn listen() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use anyhow::Context as _;
            use tokio::signal::unix::{SignalKind, signal};
            // Registered now, not on first poll, so no Ctrl-C slips past.
            let signal = signal(SignalKind::interrupt()).context("cannot listen for Ctrl-C")?;
            Ok(Self { signal })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            if self.signal.recv().await.is_none() {
                // The signal source is gone; never report an interrupt that did not happen.
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use openshell_sdk::OperationState;

    use super::*;
    use crate::exit::tests::operation;

    #[test]
    fn interrupted_hint_says_how_to_resume() {
        let hint = interrupted_hint(&operation(OperationState::Delivered));
        assert!(hint.contains("op-0193 is DELIVERED"), "{hint}");
        assert!(hint.contains("openshell operations wait op-0193"), "{hint}");
        assert!(hint.contains("nothing was cancelled"), "{hint}");
    }

    #[test]
    fn lost_hint_names_the_operation_and_how_to_check_it() {
        let error = SdkError::Other {
            code: "UNKNOWN".into(),
            message: "h2 protocol error: error reading a body from connection".into(),
        };
        let hint = lost_hint(&operation(OperationState::Delivered), &error);
        assert!(hint.starts_with("error: lost the gateway"), "{hint}");
        assert!(
            hint.contains("operation op-0193 (last seen DELIVERED)"),
            "{hint}"
        );
        assert!(hint.contains("h2 protocol error"), "{hint}");
        assert!(
            hint.contains(
                "the operation may still complete: check with `openshell operations get op-0193`"
            ),
            "{hint}"
        );
    }
}
