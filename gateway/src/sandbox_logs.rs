//! The recent log lines of each sandbox, as its supervisor pushes them
//! (`PushSandboxLogs`), for operators to read (`GetSandboxLogs`) and follow
//! (`WatchSandbox`).
//!
//! Lines live in memory, per replica: a sandbox's lines are on the replica
//! its supervisor pushes to, and a restart loses them. They are a first
//! look at a misbehaving sandbox, not an archive; keeping them in the store
//! would put every workload's chatter on the write path that delivers
//! configuration. Each sandbox keeps at most [`MAX_LINES_PER_SANDBOX`] lines
//! and [`MAX_BYTES_PER_SANDBOX`] bytes of text; the oldest go first and are
//! counted.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use openshell_proto::v1 as pb;
use tokio::sync::broadcast;

/// Most lines kept per sandbox.
pub const MAX_LINES_PER_SANDBOX: usize = 2000;
/// Most bytes of line text (message, target and fields) kept per sandbox.
pub const MAX_BYTES_PER_SANDBOX: usize = 512 * 1024;
/// Lines a follower may fall behind before it misses some (and is told so).
const FOLLOW_QUEUE: usize = 1024;

/// Log levels in increasing severity; what `min_level` filters on.
const LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

/// The rank of a level name; `None` for a name outside [`LEVELS`].
pub fn level_rank(level: &str) -> Option<usize> {
    let upper = level.trim().to_ascii_uppercase();
    let upper = if upper == "WARNING" {
        "WARN".into()
    } else {
        upper
    };
    LEVELS.iter().position(|l| *l == upper)
}

/// Upstream names the lines a sandbox pushes `sandbox` (and its own `gateway`): here every
/// pushed line is the sandbox's, whether its supervisor's or its workload's.
const UPSTREAM_SANDBOX_SOURCE: &str = "sandbox";

fn source_matches(wanted: &str, line: &pb::SandboxLogLine) -> bool {
    wanted == line.source || wanted == UPSTREAM_SANDBOX_SOURCE
}

/// What a follower receives.
#[derive(Debug, Clone)]
pub enum LogEvent {
    Line(Arc<pb::SandboxLogLine>),
    /// Lines dropped before they reached this replica or by its bound.
    Dropped(u64),
}

/// Which lines a reader wants.
#[derive(Debug, Clone, Default)]
pub struct LogFilter {
    pub since_ms: i64,
    pub sources: Vec<String>,
    /// A rank from [`level_rank`]; `None` lets every level through.
    pub min_level: Option<usize>,
}

impl LogFilter {
    pub fn matches(&self, line: &pb::SandboxLogLine) -> bool {
        if self.since_ms > 0 && line.timestamp_ms < self.since_ms {
            return false;
        }
        if !self.sources.is_empty() && !self.sources.iter().any(|s| source_matches(s, line)) {
            return false;
        }
        match self.min_level {
            // A line of an unknown level is kept: hiding it would hide the unexpected.
            Some(min) => level_rank(&line.level).is_none_or(|rank| rank >= min),
            None => true,
        }
    }
}

/// A read of one sandbox's lines.
#[derive(Debug, Default)]
pub struct LogRead {
    pub lines: Vec<Arc<pb::SandboxLogLine>>,
    /// Lines held before filtering.
    pub held: usize,
    pub supervisor_dropped: u64,
    pub gateway_dropped: u64,
}

/// What [`SandboxLogs::append`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Appended {
    pub kept: u64,
    /// Older lines this append pushed out of the bound.
    pub evicted: u64,
}

struct Ring {
    lines: VecDeque<Arc<pb::SandboxLogLine>>,
    bytes: usize,
    supervisor_dropped: u64,
    gateway_dropped: u64,
    followers: broadcast::Sender<LogEvent>,
}

impl Ring {
    fn new() -> Self {
        Self {
            lines: VecDeque::new(),
            bytes: 0,
            supervisor_dropped: 0,
            gateway_dropped: 0,
            followers: broadcast::channel(FOLLOW_QUEUE).0,
        }
    }
}

fn line_bytes(line: &pb::SandboxLogLine) -> usize {
    line.message.len()
        + line.target.len()
        + line.level.len()
        + line.source.len()
        + line
            .fields
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

/// Every sandbox's recent lines on this replica; cheap to clone.
#[derive(Clone)]
pub struct SandboxLogs {
    inner: Arc<Mutex<HashMap<String, Ring>>>,
    max_lines: usize,
    max_bytes: usize,
}

impl Default for SandboxLogs {
    fn default() -> Self {
        Self::with_bounds(MAX_LINES_PER_SANDBOX, MAX_BYTES_PER_SANDBOX)
    }
}

impl SandboxLogs {
    pub fn with_bounds(max_lines: usize, max_bytes: usize) -> Self {
        Self {
            inner: Arc::default(),
            max_lines: max_lines.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Ring>> {
        // A panic while holding the lock leaves a ring that is still consistent enough to read.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `lines` of `sandbox_id` (already bounded in size by the caller) and
    /// records `supervisor_dropped` lines its supervisor could not send.
    pub fn append(
        &self,
        sandbox_id: &str,
        lines: Vec<pb::SandboxLogLine>,
        supervisor_dropped: u64,
    ) -> Appended {
        let mut map = self.lock();
        let ring = map.entry(sandbox_id.to_string()).or_insert_with(Ring::new);
        let mut result = Appended::default();
        if supervisor_dropped > 0 {
            ring.supervisor_dropped = ring.supervisor_dropped.saturating_add(supervisor_dropped);
            let _ = ring.followers.send(LogEvent::Dropped(supervisor_dropped));
        }
        for line in lines {
            let size = line_bytes(&line);
            let line = Arc::new(line);
            ring.bytes += size;
            ring.lines.push_back(line.clone());
            result.kept += 1;
            while ring.lines.len() > self.max_lines || ring.bytes > self.max_bytes {
                let Some(old) = ring.lines.pop_front() else {
                    break;
                };
                ring.bytes -= line_bytes(&old);
                result.evicted += 1;
            }
            // No follower is not an error.
            let _ = ring.followers.send(LogEvent::Line(line));
        }
        ring.gateway_dropped = ring.gateway_dropped.saturating_add(result.evicted);
        result
    }

    /// The newest `limit` lines of `sandbox_id` that pass `filter`, oldest first.
    pub fn read(&self, sandbox_id: &str, filter: &LogFilter, limit: usize) -> LogRead {
        let map = self.lock();
        let Some(ring) = map.get(sandbox_id) else {
            return LogRead::default();
        };
        read_ring(ring, filter, limit)
    }

    /// The newest `limit` lines that pass `filter`, and every line and drop
    /// after them: the read and the subscription happen under one lock, so a
    /// follower neither misses nor repeats a line.
    pub fn follow(
        &self,
        sandbox_id: &str,
        filter: &LogFilter,
        limit: usize,
    ) -> (LogRead, broadcast::Receiver<LogEvent>) {
        let mut map = self.lock();
        let ring = map.entry(sandbox_id.to_string()).or_insert_with(Ring::new);
        (read_ring(ring, filter, limit), ring.followers.subscribe())
    }

    /// Forgets a deleted sandbox's lines; its followers' streams end.
    pub fn remove(&self, sandbox_id: &str) {
        self.lock().remove(sandbox_id);
    }
}

fn read_ring(ring: &Ring, filter: &LogFilter, limit: usize) -> LogRead {
    let mut lines: Vec<Arc<pb::SandboxLogLine>> = ring
        .lines
        .iter()
        .rev()
        .filter(|l| filter.matches(l))
        .take(limit)
        .cloned()
        .collect();
    lines.reverse();
    LogRead {
        lines,
        held: ring.lines.len(),
        supervisor_dropped: ring.supervisor_dropped,
        gateway_dropped: ring.gateway_dropped,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn line(ts: i64, level: &str, source: &str, message: &str) -> pb::SandboxLogLine {
        pb::SandboxLogLine {
            sandbox_id: "sb".into(),
            timestamp_ms: ts,
            level: level.into(),
            target: String::new(),
            message: message.into(),
            source: source.into(),
            fields: Default::default(),
        }
    }

    #[test]
    fn the_line_bound_drops_the_oldest_and_counts_them() {
        let logs = SandboxLogs::with_bounds(3, usize::MAX);
        let batch = (0..5)
            .map(|i| line(i, "INFO", "workload", &format!("m{i}")))
            .collect();
        let appended = logs.append("sb", batch, 7);
        assert_eq!(
            appended,
            Appended {
                kept: 5,
                evicted: 2
            }
        );
        let read = logs.read("sb", &LogFilter::default(), 100);
        let messages: Vec<&str> = read.lines.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages, ["m2", "m3", "m4"]);
        assert_eq!(read.held, 3);
        assert_eq!(read.gateway_dropped, 2);
        assert_eq!(read.supervisor_dropped, 7);
    }

    #[test]
    fn the_byte_bound_drops_the_oldest() {
        // Each line is "INFO" + "workload" + 10 bytes of message = 22 bytes.
        let logs = SandboxLogs::with_bounds(100, 50);
        let batch = (0..4)
            .map(|i| line(i, "INFO", "workload", &format!("message-{i:02}")))
            .collect();
        let appended = logs.append("sb", batch, 0);
        assert_eq!(appended.evicted, 2);
        let read = logs.read("sb", &LogFilter::default(), 100);
        assert_eq!(read.lines.first().unwrap().message, "message-02");
    }

    #[test]
    fn filters_by_time_source_and_level_and_keeps_the_newest() {
        let logs = SandboxLogs::default();
        logs.append(
            "sb",
            vec![
                line(10, "DEBUG", "supervisor", "a"),
                line(20, "INFO", "workload", "b"),
                line(30, "ERROR", "supervisor", "c"),
                line(40, "WARN", "workload", "d"),
            ],
            0,
        );
        let since = LogFilter {
            since_ms: 20,
            ..Default::default()
        };
        let got: Vec<_> = logs
            .read("sb", &since, 100)
            .lines
            .iter()
            .map(|l| l.message.clone())
            .collect();
        assert_eq!(got, ["b", "c", "d"]);
        let warn = LogFilter {
            min_level: level_rank("warn"),
            ..Default::default()
        };
        let got: Vec<_> = logs
            .read("sb", &warn, 100)
            .lines
            .iter()
            .map(|l| l.message.clone())
            .collect();
        assert_eq!(got, ["c", "d"]);
        let workload = LogFilter {
            sources: vec!["workload".into()],
            ..Default::default()
        };
        let got: Vec<_> = logs
            .read("sb", &workload, 1)
            .lines
            .iter()
            .map(|l| l.message.clone())
            .collect();
        assert_eq!(got, ["d"]);
        // Upstream's names: `sandbox` is every pushed line, `gateway` none of them.
        let upstream = LogFilter {
            sources: vec!["sandbox".into()],
            ..Default::default()
        };
        assert_eq!(logs.read("sb", &upstream, 100).lines.len(), 4);
        let gateway = LogFilter {
            sources: vec!["gateway".into()],
            ..Default::default()
        };
        assert!(logs.read("sb", &gateway, 100).lines.is_empty());
        assert!(
            logs.read("other", &LogFilter::default(), 10)
                .lines
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_follower_gets_new_lines_and_drops_after_its_read() {
        let logs = SandboxLogs::default();
        logs.append("sb", vec![line(1, "INFO", "workload", "old")], 0);
        let (read, mut rx) = logs.follow("sb", &LogFilter::default(), 10);
        assert_eq!(read.lines.len(), 1);
        logs.append("sb", vec![line(2, "INFO", "workload", "new")], 3);
        match rx.recv().await.unwrap() {
            LogEvent::Dropped(n) => assert_eq!(n, 3),
            other => panic!("expected the drop first, got {other:?}"),
        }
        match rx.recv().await.unwrap() {
            LogEvent::Line(l) => assert_eq!(l.message, "new"),
            other => panic!("expected the line, got {other:?}"),
        }
    }
}
