//! Waiting for an operation to take effect: the raw `WaitForApply` stream,
//! and a helper that follows it to the end and survives gateway restarts.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use openshell_proto::v1 as pb;
use tokio::time::{Instant, Sleep};

use crate::client::deadline_error;
use crate::retry::Idempotency;
use crate::types::Operation;
use crate::update::{DEFAULT_SERVER_WAIT, wait_options};
use crate::{Client, SdkError};

/// Times a broken wait stream is reopened before giving up; operations
/// survive gateway restarts, so a reconnect usually picks up where it was.
const MAX_RESUBSCRIBES: u32 = 2;

/// The state changes of one operation, as the gateway streams them, until
/// it is terminal or the wait deadline passes. The first item is the state
/// at subscription time.
pub struct OperationStream {
    inner: tonic::Streaming<pb::Operation>,
    /// Client-side guard against a gateway that never closes the stream.
    deadline: Option<(Pin<Box<Sleep>>, Duration)>,
    finished: bool,
}

impl OperationStream {
    fn new(inner: tonic::Streaming<pb::Operation>, limit: Option<Duration>) -> Self {
        Self {
            inner,
            deadline: limit.map(|l| (Box::pin(tokio::time::sleep(l)), l)),
            finished: false,
        }
    }
}

impl Stream for OperationStream {
    type Item = Result<Operation, SdkError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        if let Some((sleep, limit)) = this.deadline.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            this.finished = true;
            return Poll::Ready(Some(Err(deadline_error(*limit))));
        }
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(op))) => Poll::Ready(Some(Ok(op.into()))),
            Poll::Ready(Some(Err(status))) => {
                this.finished = true;
                Poll::Ready(Some(Err(status.into())))
            }
            Poll::Ready(None) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl fmt::Debug for OperationStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperationStream")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Subscribes to an operation's state changes (server-streaming
    /// `WaitForApply`). `timeout` is the server-side wait (gateway default
    /// 60 s, at most 10 min); `threshold` lets a fleet wait end once that
    /// fraction of targets applied.
    pub async fn wait_for_apply(
        &self,
        id: &str,
        timeout: Option<Duration>,
        threshold: Option<f64>,
    ) -> Result<OperationStream, SdkError> {
        let request = pb::WaitForApplyRequest {
            id: id.to_owned(),
            wait: wait_options(timeout, threshold)?,
        };
        let streaming = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.plane.wait_for_apply(r).await
            })
            .await?;
        let limit = self
            .request_timeout()
            .map(|t| t + timeout.unwrap_or(DEFAULT_SERVER_WAIT));
        Ok(OperationStream::new(streaming, limit))
    }

    /// Follows an operation until it is terminal, the fleet `threshold` is
    /// met, or the deadline passes, calling `on_progress` for every update.
    ///
    /// Returns the last operation seen. When the deadline passes with the
    /// operation still live the result is [`SdkError::WaitTimedOut`] carrying
    /// it, so the caller can report its id and wait again later. A terminal
    /// but failed operation is `Ok`: inspect its state.
    pub async fn wait_for_apply_final(
        &self,
        id: &str,
        timeout: Option<Duration>,
        threshold: Option<f64>,
        mut on_progress: impl FnMut(&Operation),
    ) -> Result<Operation, SdkError> {
        let deadline = Instant::now() + timeout.unwrap_or(DEFAULT_SERVER_WAIT);
        let mut last: Option<Operation> = None;
        let mut resubscribes = 0;
        let mut wait = timeout;
        loop {
            let mut stream = self.wait_for_apply(id, wait, threshold).await?;
            let mut broken = false;
            while let Some(item) = stream.next().await {
                match item {
                    Ok(op) => {
                        on_progress(&op);
                        if is_done(&op, threshold) {
                            return Ok(op);
                        }
                        last = Some(op);
                    }
                    Err(err)
                        if err.is_retryable()
                            && resubscribes < MAX_RESUBSCRIBES
                            && Instant::now() < deadline =>
                    {
                        tracing::debug!(operation = id, error = %err, "wait stream broke; resubscribing");
                        broken = true;
                        break;
                    }
                    Err(err) => return Err(err),
                }
            }
            if !broken {
                break;
            }
            resubscribes += 1;
            wait = Some(deadline.saturating_duration_since(Instant::now()));
        }
        let op = match last {
            Some(op) => op,
            // A stream that closed without a single update still leaves the
            // operation readable; report its real state rather than guess.
            None => self.get_operation(id).await?,
        };
        if is_done(&op, threshold) {
            Ok(op)
        } else {
            Err(SdkError::WaitTimedOut {
                operation: Box::new(op),
            })
        }
    }
}

fn is_done(op: &Operation, threshold: Option<f64>) -> bool {
    op.is_terminal() || threshold.is_some_and(|t| op.threshold_met(t))
}
