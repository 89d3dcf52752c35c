//! A sandbox's log lines: a one-shot read and a follow stream.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use openshell_proto::v1 as pb;
use tokio::sync::broadcast;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::error::GatewayError;
use crate::sandbox_logs::{self, LogEvent, LogFilter};

use super::OpenShellApi;

pub(super) type SandboxEventStream =
    Pin<Box<dyn Stream<Item = Result<pb::SandboxStreamEvent, Status>> + Send>>;

/// Lines `GetSandboxLogs` returns when `lines` is 0 (upstream's default).
const DEFAULT_LOG_LINES: u32 = 2000;

/// Lines `WatchSandbox` replays when `log_tail_lines` is 0.
const DEFAULT_LOG_TAIL: u32 = 200;

/// A log filter from a request's fields, naming `min_level_field` when its level is unknown.
fn log_filter(
    since_ms: i64,
    sources: Vec<String>,
    min_level: &str,
    min_level_field: &str,
) -> Result<LogFilter, Status> {
    let min_level = if min_level.trim().is_empty() {
        None
    } else {
        Some(sandbox_logs::level_rank(min_level).ok_or_else(|| {
            GatewayError::invalid(
                min_level_field,
                format!(
                    "unknown level {:?}; expected one of TRACE, DEBUG, INFO, WARN, ERROR",
                    min_level.chars().take(32).collect::<String>()
                ),
            )
        })?)
    };
    Ok(LogFilter {
        since_ms,
        sources,
        min_level,
    })
}

fn log_event(line: Arc<pb::SandboxLogLine>) -> pb::SandboxStreamEvent {
    pb::SandboxStreamEvent {
        payload: Some(pb::sandbox_stream_event::Payload::Log(
            Arc::unwrap_or_clone(line),
        )),
    }
}

fn dropped_event(dropped: u64, why: &str) -> pb::SandboxStreamEvent {
    pb::SandboxStreamEvent {
        payload: Some(pb::sandbox_stream_event::Payload::Warning(
            pb::SandboxStreamWarning {
                message: format!("{dropped} log lines dropped ({why})"),
                dropped_lines: dropped,
            },
        )),
    }
}

/// The parts of upstream's `WatchSandbox` this gateway does not serve.
fn refuse_unserved_watch(req: &pb::WatchSandboxRequest) -> Result<(), Status> {
    let unserved = [
        ("follow_status", req.follow_status),
        ("follow_events", req.follow_events),
        ("event_tail", req.event_tail != 0),
        ("stop_on_terminal", req.stop_on_terminal),
    ];
    if let Some((field, _)) = unserved.iter().find(|(_, set)| *set) {
        return Err(GatewayError::invalid(
            *field,
            "this gateway serves only the log lines of a sandbox (follow_logs); sandbox status and platform events are not served",
        )
        .into());
    }
    if !req.follow_logs {
        return Err(GatewayError::invalid(
            "follow_logs",
            "must be true: log lines are what this gateway streams",
        )
        .into());
    }
    Ok(())
}

pub(super) async fn get(
    api: &OpenShellApi,
    request: Request<pb::GetSandboxLogsRequest>,
) -> Result<Response<pb::GetSandboxLogsResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let filter = log_filter(req.since_ms, req.sources, &req.min_level, "min_level")?;
    let sandbox = api
        .resolve_named_for(&who, Permission::LogsRead, &req.sandbox_id, &req.workspace)
        .await?;
    let lines = if req.lines == 0 {
        DEFAULT_LOG_LINES
    } else {
        req.lines
    };
    let read = api.state.logs.read(&sandbox.id, &filter, lines as usize);
    Ok(Response::new(pb::GetSandboxLogsResponse {
        logs: read.lines.into_iter().map(Arc::unwrap_or_clone).collect(),
        buffer_total: u32::try_from(read.held).unwrap_or(u32::MAX),
        supervisor_dropped_lines: read.supervisor_dropped,
        gateway_dropped_lines: read.gateway_dropped,
    }))
}

pub(super) async fn watch(
    api: &OpenShellApi,
    request: Request<pb::WatchSandboxRequest>,
) -> Result<Response<SandboxEventStream>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    refuse_unserved_watch(&req)?;
    let filter = log_filter(
        req.log_since_ms,
        req.log_sources,
        &req.log_min_level,
        "log_min_level",
    )?;
    if req.id.is_empty() {
        return Err(GatewayError::invalid("id", "a sandbox id or name is required").into());
    }
    let sandbox = api
        .resolve_named_for(&who, Permission::LogsRead, &req.id, &req.workspace)
        .await?;
    let tail = if req.log_tail_lines == 0 {
        DEFAULT_LOG_TAIL
    } else {
        req.log_tail_lines
    };
    let (read, live) = api.state.logs.follow(&sandbox.id, &filter, tail as usize);
    let stopping = api.state.stopping.clone();
    // The stream ends when the client hangs up (tonic drops it), the gateway stops or the
    // sandbox is deleted (its lines are forgotten and the channel closes).
    let replay = futures::stream::iter(read.lines.into_iter().map(|l| Ok(log_event(l))));
    let follow = futures::stream::unfold(
        (live, stopping, filter),
        |(mut live, mut stopping, filter)| async move {
            loop {
                let event = tokio::select! {
                    event = live.recv() => event,
                    _ = stopping.wait_for(|s| *s) => return None,
                };
                let item = match event {
                    Ok(LogEvent::Line(line)) if filter.matches(&line) => log_event(line),
                    Ok(LogEvent::Line(_)) => continue,
                    Ok(LogEvent::Dropped(n)) => {
                        dropped_event(n, "the supervisor's buffer was full")
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        dropped_event(n, "this follower fell behind")
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                return Some((Ok(item), (live, stopping, filter)));
            }
        },
    );
    let stream = futures::StreamExt::chain(replay, follow);
    Ok(Response::new(Box::pin(stream)))
}
