//! Sandbox log lines from JS: a one-shot read, and a pull-based follow that
//! JS drives with `next()` and may `cancel()`.

use std::collections::BTreeMap;

use napi_derive::napi;
use openshell_sdk::{self as sdk, SdkError};
use tokio::sync::{Mutex, mpsc};
use tokio::task::AbortHandle;

use crate::error::{invalid, to_napi};
use crate::views::js_int;

/// Which lines to read or follow.
#[napi(object)]
pub struct LogOptions {
    /// Most lines, the newest (default: 2000 for a read, 200 replayed before following).
    pub lines: Option<u32>,
    /// Only lines at or after this time (ms since the epoch).
    pub since_ms: Option<f64>,
    /// Only these sources: `supervisor`, `workload`.
    pub sources: Option<Vec<String>>,
    /// Only lines at or above this level: TRACE, DEBUG, INFO, WARN or ERROR.
    pub min_level: Option<String>,
}

impl LogOptions {
    pub(crate) fn into_sdk(self) -> Result<sdk::LogQuery, SdkError> {
        let since_ms = match self.since_ms {
            None => 0,
            Some(ms) if ms.is_finite() && ms >= 0.0 && ms.fract() == 0.0 && ms < 9.0e15 => {
                ms as i64
            }
            Some(_) => {
                return Err(invalid(
                    "sinceMs",
                    "must be a whole number of milliseconds since the epoch",
                ));
            }
        };
        Ok(sdk::LogQuery {
            lines: self.lines.unwrap_or(0),
            since_ms,
            sources: self.sources.unwrap_or_default(),
            min_level: self.min_level,
        })
    }
}

/// One log line of a sandbox; provider values arrive masked (`***`).
#[napi(object)]
pub struct SandboxLogLine {
    /// RFC 3339 with milliseconds.
    pub time: Option<String>,
    pub timestamp_ms: i64,
    pub level: String,
    /// `supervisor` or `workload`.
    pub source: String,
    /// The supervisor module, or the workload's `stdout` / `stderr`.
    pub target: String,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

impl From<sdk::SandboxLogLine> for SandboxLogLine {
    fn from(l: sdk::SandboxLogLine) -> Self {
        Self {
            time: l.time,
            timestamp_ms: l.timestamp_ms,
            level: l.level,
            source: l.source,
            target: l.target,
            message: l.message,
            fields: l.fields,
        }
    }
}

/// Recent log lines of a sandbox, and how many were lost on the way.
#[napi(object)]
pub struct SandboxLogs {
    /// Oldest first.
    pub lines: Vec<SandboxLogLine>,
    pub buffer_total: u32,
    pub supervisor_dropped_lines: i64,
    pub gateway_dropped_lines: i64,
}

impl From<sdk::SandboxLogs> for SandboxLogs {
    fn from(l: sdk::SandboxLogs) -> Self {
        Self {
            lines: l.lines.into_iter().map(Into::into).collect(),
            buffer_total: l.buffer_total,
            supervisor_dropped_lines: js_int(l.supervisor_dropped_lines),
            gateway_dropped_lines: js_int(l.gateway_dropped_lines),
        }
    }
}

/// One item of a followed sandbox's logs: a `line`, or `dropped` lines.
#[napi(object)]
pub struct SandboxLogEvent {
    /// `line` or `dropped`.
    pub kind: String,
    pub line: Option<SandboxLogLine>,
    pub dropped_lines: Option<i64>,
    pub message: Option<String>,
}

impl From<sdk::SandboxLogEvent> for SandboxLogEvent {
    fn from(e: sdk::SandboxLogEvent) -> Self {
        match e {
            sdk::SandboxLogEvent::Line(line) => Self {
                kind: "line".into(),
                line: Some(line.into()),
                dropped_lines: None,
                message: None,
            },
            sdk::SandboxLogEvent::Dropped {
                dropped_lines,
                message,
            } => Self {
                kind: "dropped".into(),
                line: None,
                dropped_lines: Some(js_int(dropped_lines)),
                message: Some(message),
            },
        }
    }
}

/// A followed sandbox's logs. Dropping it (when JS collects it) ends the
/// follow like `cancel()` does.
#[napi]
pub struct SandboxLogWatch {
    events: Mutex<mpsc::Receiver<Result<sdk::SandboxLogEvent, SdkError>>>,
    task: AbortHandle,
}

impl SandboxLogWatch {
    pub(crate) fn start(
        client: sdk::Client,
        sandbox: sdk::SandboxRef,
        query: sdk::LogQuery,
    ) -> Self {
        // Bounded: a follower that stops reading holds the gateway's stream back, not memory.
        let (tx, rx) = mpsc::channel(256);
        let task = napi::bindgen_prelude::spawn(async move {
            let mut stream = match client.watch_sandbox_logs(&sandbox, &query).await {
                Ok(stream) => stream,
                Err(err) => {
                    let _ = tx.send(Err(err)).await;
                    return;
                }
            };
            while let Some(event) = stream.next_event().await {
                let failed = event.is_err();
                if tx.send(event).await.is_err() || failed {
                    return;
                }
            }
        })
        .abort_handle();
        Self {
            events: Mutex::new(rx),
            task,
        }
    }
}

#[napi]
impl SandboxLogWatch {
    /// The next event, or `null` once the follow ended (the gateway closed it,
    /// or `cancel()`). Rejects when the follow fails.
    #[napi]
    pub async fn next(&self) -> napi::Result<Option<SandboxLogEvent>> {
        match self.events.lock().await.recv().await {
            None => Ok(None),
            Some(Ok(event)) => Ok(Some(event.into())),
            Some(Err(err)) => Err(to_napi(err)),
        }
    }

    /// Stops following: closes the stream to the gateway; every pending and
    /// later `next()` resolves `null`.
    #[napi]
    pub fn cancel(&self) {
        self.task.abort();
    }
}

impl Drop for SandboxLogWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
