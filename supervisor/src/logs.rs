//! Log lines that leave the sandbox for the gateway: the supervisor's own `tracing` events
//! ([`BufferLayer`]) and the workload's stdout and stderr, line by line
//! ([`crate::workload`]), gathered in one bounded [`LogBuffer`] and pushed by a
//! [`LogShipper`] over `PushSandboxLogs`, in push and poll mode alike.
//!
//! The buffer is bounded in lines and bytes; when full, the oldest lines go and are counted,
//! and the count travels with the next push so the gateway can say how many were lost. A
//! failed push puts its lines back (an unreachable gateway does not lose what the bound
//! keeps). Every line is masked before it leaves: the supervisor credential and every provider
//! value the supervisor has held never reach the gateway ([`crate::sanitize`]). The buffer
//! holds what to mask ([`LogBuffer::learn_secrets`]), learnt before a value can reach the
//! workload, so the workload's output is masked as it is captured, before it is cut into
//! lines of bounded length, and the lines are masked again on their way out.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openshell_core::Secret;
use openshell_proto::v1 as pb;
use tokio::sync::{Notify, watch};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber, warn};
use tracing_subscriber::layer::{Context, Layer};

use crate::backoff::{Backoff, BackoffConfig};
use crate::client::GatewayClient;
use crate::sanitize::{Masker, sanitize_with};
use crate::status::SupervisorStatus;

/// Most lines the buffer holds.
pub const MAX_BUFFER_LINES: usize = 4000;
/// Most bytes of line text the buffer holds.
pub const MAX_BUFFER_BYTES: usize = 1024 * 1024;
/// Longest line sent, in bytes (the gateway keeps no more).
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// Most lines in one push.
const MAX_BATCH_LINES: usize = 500;
/// Most distinct provider values remembered for masking.
const MAX_MASKED_VALUES: usize = 4096;

/// The `source` of the supervisor's own lines.
pub const SOURCE_SUPERVISOR: &str = "supervisor";
/// The `source` of the workload's stdout and stderr lines.
pub const SOURCE_WORKLOAD: &str = "workload";

/// One line, before masking.
#[derive(Clone, PartialEq, Eq)]
pub struct LogLine {
    pub timestamp_ms: i64,
    pub level: String,
    pub target: String,
    pub message: String,
    pub source: &'static str,
    pub fields: Vec<(String, String)>,
}

// The text may hold a provider value until it is masked on the way out.
impl fmt::Debug for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogLine")
            .field("timestamp_ms", &self.timestamp_ms)
            .field("level", &self.level)
            .field("source", &self.source)
            .field("message_bytes", &self.message.len())
            .finish_non_exhaustive()
    }
}

impl LogLine {
    /// A line of the workload's `stream` ("stdout" or "stderr").
    pub fn workload(stream: &str, message: String) -> Self {
        Self {
            timestamp_ms: now_ms(),
            level: "INFO".into(),
            target: stream.to_string(),
            message,
            source: SOURCE_WORKLOAD,
            fields: Vec::new(),
        }
    }

    fn bytes(&self) -> usize {
        self.message.len()
            + self.target.len()
            + self
                .fields
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[derive(Default)]
struct Buffered {
    lines: VecDeque<LogLine>,
    bytes: usize,
    /// Lines dropped and not yet reported to the gateway.
    dropped: u64,
}

/// What lines are masked with: the credential and every provider value seen so far (a line
/// written before a rotation may carry the old value).
#[derive(Default)]
struct Secrets {
    values: Vec<String>,
    masker: Arc<Masker>,
}

/// The bounded buffer between the line sources and the shipper; cheap to clone.
#[derive(Clone)]
pub struct LogBuffer {
    inner: Arc<Mutex<Buffered>>,
    notify: Arc<Notify>,
    secrets: Arc<Mutex<Secrets>>,
    max_lines: usize,
    max_bytes: usize,
}

impl fmt::Debug for LogBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogBuffer")
            .field("lines", &self.len())
            .field("max_lines", &self.max_lines)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

impl Default for LogBuffer {
    fn default() -> Self {
        Self::new(MAX_BUFFER_LINES, MAX_BUFFER_BYTES)
    }
}

impl LogBuffer {
    pub fn new(max_lines: usize, max_bytes: usize) -> Self {
        Self {
            inner: Arc::default(),
            notify: Arc::default(),
            secrets: Arc::default(),
            max_lines: max_lines.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    /// The process's buffer: the one the logger fills and the binary's shipper empties.
    pub fn global() -> &'static LogBuffer {
        static GLOBAL: OnceLock<LogBuffer> = OnceLock::new();
        GLOBAL.get_or_init(LogBuffer::default)
    }

    // Nothing here may log: the logger itself writes into this buffer.
    fn lock(&self) -> MutexGuard<'_, Buffered> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn evict(&self, b: &mut Buffered) {
        while b.lines.len() > self.max_lines || b.bytes > self.max_bytes {
            let Some(old) = b.lines.pop_front() else {
                break;
            };
            b.bytes -= old.bytes();
            b.dropped += 1;
        }
    }

    pub fn push(&self, line: LogLine) {
        {
            let mut b = self.lock();
            b.bytes += line.bytes();
            b.lines.push_back(line);
            self.evict(&mut b);
        }
        self.notify.notify_one();
    }

    /// Up to `max` of the oldest lines, and the count of lines dropped since the last take.
    pub fn take(&self, max: usize) -> (Vec<LogLine>, u64) {
        let mut b = self.lock();
        let n = max.min(b.lines.len());
        let lines: Vec<LogLine> = b.lines.drain(..n).collect();
        b.bytes -= lines.iter().map(LogLine::bytes).sum::<usize>();
        (lines, std::mem::take(&mut b.dropped))
    }

    /// Puts back what a failed push took, ahead of newer lines; the bound still holds.
    pub fn restore(&self, lines: Vec<LogLine>, dropped: u64) {
        let mut b = self.lock();
        b.dropped += dropped;
        for line in lines.into_iter().rev() {
            b.bytes += line.bytes();
            b.lines.push_front(line);
        }
        self.evict(&mut b);
    }

    pub fn len(&self) -> usize {
        self.lock().lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lines dropped and not yet reported.
    pub fn unreported_drops(&self) -> u64 {
        self.lock().dropped
    }

    /// Adds `values` to what every line is masked with, from now on. Called before a value
    /// can reach the workload: with the provider values it starts with, and before every
    /// activation.
    pub fn learn_secrets<'a>(&self, values: impl IntoIterator<Item = &'a str>) {
        let mut secrets = self.secrets.lock().unwrap_or_else(|p| p.into_inner());
        let mut learnt = false;
        for value in values {
            if secrets.values.len() >= MAX_MASKED_VALUES {
                break;
            }
            if !secrets.values.iter().any(|v| v == value) {
                secrets.values.push(value.to_string());
                learnt = true;
            }
        }
        if learnt {
            secrets.masker = Arc::new(Masker::new(secrets.values.iter().map(String::as_str)));
        }
    }

    /// What lines are masked with now.
    pub fn masker(&self) -> Arc<Masker> {
        self.secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .masker
            .clone()
    }

    async fn wait_for_lines(&self) {
        loop {
            let notified = self.notify.notified();
            {
                let b = self.lock();
                if !b.lines.is_empty() || b.dropped > 0 {
                    return;
                }
            }
            notified.await;
        }
    }
}

/// A `tracing` layer that copies the supervisor's events into a [`LogBuffer`].
pub struct BufferLayer {
    buffer: LogBuffer,
}

impl BufferLayer {
    pub fn new(buffer: LogBuffer) -> Self {
        Self { buffer }
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields
                .push((field.name().to_string(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.fields.push((field.name().to_string(), text));
        }
    }
}

impl<S: Subscriber> Layer<S> for BufferLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.buffer.push(LogLine {
            timestamp_ms: now_ms(),
            level: meta.level().as_str().to_string(),
            target: meta.target().to_string(),
            message: fields.message,
            source: SOURCE_SUPERVISOR,
            fields: fields.fields,
        });
    }
}

/// `line` as it leaves for the gateway, masked with `masker` and bounded.
fn wire_line(masker: &Masker, sandbox_id: &str, line: &LogLine) -> pb::SandboxLogLine {
    pb::SandboxLogLine {
        sandbox_id: sandbox_id.to_string(),
        timestamp_ms: line.timestamp_ms,
        level: line.level.clone(),
        target: sanitize_with(masker, &line.target, 128),
        message: sanitize_with(masker, &line.message, MAX_LINE_BYTES),
        source: line.source.to_string(),
        fields: line
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), sanitize_with(masker, v, 1024)))
            .collect(),
    }
}

/// Learns the provider values of the configuration in effect.
fn learn_active(buffer: &LogBuffer, status: &SupervisorStatus) {
    if let Some(active) = &status.active {
        buffer.learn_secrets(active.sensitive_values());
    }
}

/// Pushes the buffer's lines to the gateway until stopped, with a backoff after failures.
pub struct LogShipper {
    pub client: GatewayClient,
    pub sandbox_id: String,
    pub buffer: LogBuffer,
    pub status: watch::Receiver<SupervisorStatus>,
    pub credential: Secret,
    /// Lines gather this long before a push, so a chatty workload makes one call, not many.
    pub flush_interval: Duration,
    pub backoff: BackoffConfig,
    pub rpc_timeout: Duration,
}

impl LogShipper {
    pub async fn run(self, mut stopped: watch::Receiver<bool>) {
        self.buffer.learn_secrets([self.credential.expose()]);
        let mut backoff = Backoff::new(self.backoff);
        loop {
            tokio::select! {
                () = self.buffer.wait_for_lines() => {}
                _ = stopped.wait_for(|s| *s) => break,
            }
            tokio::select! {
                () = tokio::time::sleep(self.flush_interval) => {}
                _ = stopped.wait_for(|s| *s) => break,
            }
            learn_active(&self.buffer, &self.status.borrow());
            if let Err(reason) = self.push_all().await {
                let delay = backoff.next_delay();
                warn!(%reason, retry_in = ?delay, "cannot push log lines to the gateway; keeping them");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stopped.wait_for(|s| *s) => break,
                }
            } else {
                backoff.reset();
            }
        }
        // The last lines (the workload's final words, why the supervisor stops) are worth one try.
        learn_active(&self.buffer, &self.status.borrow());
        let _ = self.push_all().await;
    }

    /// Pushes the lines buffered when it starts; a failed push puts its lines back. Lines
    /// logged meanwhile wait for the next flush, so that a flush always ends.
    async fn push_all(&self) -> Result<(), String> {
        let masker = self.buffer.masker();
        let mut left = self.buffer.len();
        loop {
            let (lines, dropped) = self.buffer.take(MAX_BATCH_LINES.min(left));
            if lines.is_empty() && dropped == 0 {
                return Ok(());
            }
            left -= lines.len();
            let request = pb::PushSandboxLogsRequest {
                sandbox_id: self.sandbox_id.clone(),
                logs: lines
                    .iter()
                    .map(|l| wire_line(&masker, &self.sandbox_id, l))
                    .collect(),
                dropped_lines: dropped,
            };
            let mut client = self.client.clone();
            let call = client.push_sandbox_logs(futures::stream::iter([request]));
            let outcome = match tokio::time::timeout(self.rpc_timeout, call).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
                Err(_) => Err(format!("no answer within {:?}", self.rpc_timeout)),
            };
            if let Err(reason) = outcome {
                self.buffer.restore(lines, dropped);
                return Err(reason);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn line(message: &str) -> LogLine {
        LogLine::workload("stdout", message.to_string())
    }

    #[test]
    fn a_full_buffer_drops_the_oldest_and_counts_them() {
        let buffer = LogBuffer::new(3, usize::MAX);
        for i in 0..5 {
            buffer.push(line(&format!("m{i}")));
        }
        assert_eq!(buffer.len(), 3);
        let (lines, dropped) = buffer.take(10);
        let messages: Vec<&str> = lines.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages, ["m2", "m3", "m4"]);
        assert_eq!(dropped, 2);
        // The count is reported once.
        assert_eq!(buffer.take(10).1, 0);
    }

    #[test]
    fn the_byte_bound_holds_too() {
        // "stdout" (6) + 4 bytes of message = 10 bytes a line.
        let buffer = LogBuffer::new(100, 25);
        for i in 0..4 {
            buffer.push(line(&format!("m{i:03}")));
        }
        assert_eq!(buffer.len(), 2);
        assert_eq!(buffer.unreported_drops(), 2);
    }

    #[test]
    fn a_failed_push_puts_lines_back_in_order_within_the_bound() {
        let buffer = LogBuffer::new(3, usize::MAX);
        buffer.push(line("a"));
        buffer.push(line("b"));
        let (taken, dropped) = buffer.take(10);
        buffer.push(line("c"));
        buffer.push(line("d"));
        buffer.restore(taken, dropped);
        let (lines, dropped) = buffer.take(10);
        let messages: Vec<&str> = lines.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages, ["b", "c", "d"]);
        assert_eq!(dropped, 1);
    }

    #[test]
    fn lines_are_masked_before_they_leave() {
        let credential = Secret::new("supervisor-credential-xyz");
        let buffer = LogBuffer::default();
        buffer.learn_secrets([credential.expose(), "ghp_provider_value_123"]);
        let mut l = line("token=ghp_provider_value_123 cred=supervisor-credential-xyz");
        l.fields
            .push(("header".into(), "Bearer ghp_provider_value_123".into()));
        let out = wire_line(&buffer.masker(), "sb", &l);
        assert_eq!(out.message, "token=*** cred=***");
        assert_eq!(
            out.fields.get("header").map(String::as_str),
            Some("Bearer ***")
        );
        assert_eq!(out.source, SOURCE_WORKLOAD);
        assert!(
            !format!("{l:?}").contains("ghp_"),
            "Debug must not show the text"
        );
    }

    #[test]
    fn the_layer_copies_events_with_their_fields() {
        use tracing_subscriber::layer::SubscriberExt;
        let buffer = LogBuffer::new(10, usize::MAX);
        let subscriber = tracing_subscriber::registry().with(BufferLayer::new(buffer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(policy_revision = 7, reason = "disk full", "apply failed");
        });
        let (lines, _) = buffer.take(10);
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        assert_eq!(l.level, "WARN");
        assert_eq!(l.source, SOURCE_SUPERVISOR);
        assert_eq!(l.message, "apply failed");
        assert!(l.fields.contains(&("policy_revision".into(), "7".into())));
        assert!(l.fields.contains(&("reason".into(), "disk full".into())));
    }
}
