//! Sandbox log lines: what a sandbox's supervisor pushed to the gateway (its own events and
//! the workload's stdout and stderr), as `GetSandboxLogs` and `WatchSandbox` return them.

use std::collections::BTreeMap;

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use crate::timefmt;

/// One log line of a sandbox. Provider values and the supervisor credential are masked
/// (`***`) by the supervisor before the line leaves the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxLogLine {
    /// RFC 3339 with milliseconds.
    pub time: Option<String>,
    /// Milliseconds since the epoch, as the wire carries it.
    pub timestamp_ms: i64,
    /// `TRACE`, `DEBUG`, `INFO`, `WARN` or `ERROR`.
    pub level: String,
    /// `"supervisor"` (its own events) or `"workload"` (stdout and stderr).
    pub source: String,
    /// The supervisor module that wrote it, or the workload's `stdout` / `stderr`.
    pub target: String,
    pub message: String,
    /// Structured fields of a supervisor event.
    pub fields: BTreeMap<String, String>,
}

impl From<pb::SandboxLogLine> for SandboxLogLine {
    fn from(p: pb::SandboxLogLine) -> Self {
        Self {
            time: timefmt::timestamp(Some(timefmt::ms_to_proto_timestamp(p.timestamp_ms))),
            timestamp_ms: p.timestamp_ms,
            level: p.level,
            source: p.source,
            target: p.target,
            message: p.message,
            fields: p.fields.into_iter().collect(),
        }
    }
}

/// Recent log lines of a sandbox, and how many were lost on the way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxLogs {
    /// Oldest first.
    pub lines: Vec<SandboxLogLine>,
    /// Lines the gateway replica holds for the sandbox, before filtering.
    pub buffer_total: u32,
    /// Lines the supervisor dropped because its buffer was full.
    pub supervisor_dropped_lines: u64,
    /// Lines the gateway replica dropped from its per-sandbox bound.
    pub gateway_dropped_lines: u64,
}

impl From<pb::GetSandboxLogsResponse> for SandboxLogs {
    fn from(p: pb::GetSandboxLogsResponse) -> Self {
        Self {
            lines: p.logs.into_iter().map(Into::into).collect(),
            buffer_total: p.buffer_total,
            supervisor_dropped_lines: p.supervisor_dropped_lines,
            gateway_dropped_lines: p.gateway_dropped_lines,
        }
    }
}

/// Which lines to read or follow. The default: the gateway's default count, every time,
/// source and level.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQuery {
    /// Most lines (the newest); 0 means the gateway's default (2000 for a read, 200 replayed
    /// before following).
    pub lines: u32,
    /// Only lines at or after this time (ms since the epoch); 0 means all.
    pub since_ms: i64,
    /// Only these sources (`supervisor`, `workload`); empty means all.
    pub sources: Vec<String>,
    /// Only lines at or above this level; `None` means all.
    pub min_level: Option<String>,
}

/// One item of a followed sandbox's logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SandboxLogEvent {
    Line(SandboxLogLine),
    /// Lines were lost: dropped by the supervisor or the gateway, or because the follower
    /// fell behind.
    Dropped {
        dropped_lines: u64,
        message: String,
    },
}

impl SandboxLogEvent {
    pub(crate) fn from_proto(p: pb::SandboxStreamEvent) -> Option<Self> {
        match p.payload? {
            pb::sandbox_stream_event::Payload::Log(line) => Some(Self::Line(line.into())),
            pb::sandbox_stream_event::Payload::Warning(w) => Some(Self::Dropped {
                dropped_lines: w.dropped_lines,
                message: w.message,
            }),
        }
    }
}
