//! The stream of a followed sandbox's logs (`Client::watch_sandbox_logs`).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use openshell_proto::v1 as pb;

use crate::SdkError;
use crate::types::SandboxLogEvent;

/// A followed sandbox's log lines (`WatchSandbox`): the recent ones, then new ones as they
/// arrive. It does not end by itself while the sandbox lives; drop it to stop following.
pub struct SandboxLogStream {
    inner: tonic::Streaming<pb::SandboxStreamEvent>,
    finished: bool,
}

impl Stream for SandboxLogStream {
    type Item = Result<SandboxLogEvent, SdkError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.finished {
                return Poll::Ready(None);
            }
            return match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(event))) => match SandboxLogEvent::from_proto(event) {
                    Some(event) => Poll::Ready(Some(Ok(event))),
                    // An event kind this client does not know: skip it.
                    None => continue,
                },
                Poll::Ready(Some(Err(status))) => {
                    this.finished = true;
                    Poll::Ready(Some(Err(status.into())))
                }
                Poll::Ready(None) => {
                    this.finished = true;
                    Poll::Ready(None)
                }
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

impl fmt::Debug for SandboxLogStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxLogStream")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl SandboxLogStream {
    pub(crate) fn new(inner: tonic::Streaming<pb::SandboxStreamEvent>) -> Self {
        Self {
            inner,
            finished: false,
        }
    }

    /// The next event, `None` once the stream ended; for callers without `StreamExt`.
    pub async fn next_event(&mut self) -> Option<Result<SandboxLogEvent, SdkError>> {
        self.next().await
    }
}
