//! `openshell sandbox logs` (and upstream's `openshell logs`): a sandbox's recent log lines,
//! optionally followed.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use openshell_sdk::{LogQuery, SandboxLogEvent, SandboxLogLine, SandboxLogs, SandboxRef};

use crate::cli::LogsArgs;
use crate::context::Ctx;
use crate::exit;
use crate::output::{OutputFormat, json_line, sanitize, write_stdout};

pub async fn run(ctx: &Ctx, args: LogsArgs) -> anyhow::Result<u8> {
    let sandbox = SandboxRef::from(args.sandbox.as_str());
    let query = LogQuery {
        lines: args.lines.unwrap_or(0),
        since_ms: args.since.map_or(0, since_ms),
        sources: args.source,
        min_level: args.level,
    };
    let client = ctx.client().await?;
    if !args.follow {
        let logs = client.get_sandbox_logs(&sandbox, &query).await?;
        ctx.out.print(&logs, |_| text(&logs.lines))?;
        if ctx.out.format.is_table() {
            if let Some(note) = dropped_note(&logs) {
                ctx.warn(note);
            }
            if logs.lines.is_empty() {
                ctx.note(empty_note(&sandbox, &logs));
            }
        }
        return Ok(exit::SUCCESS);
    }
    let mut stream = client.watch_sandbox_logs(&sandbox, &query).await?;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                ctx.warn(format!("the log stream ended: {err}"));
                return Ok(exit::for_wait_error(&err));
            }
        };
        match ctx.out.format {
            OutputFormat::Json => write_stdout(&json_line(&event)?)?,
            OutputFormat::Yaml => {
                let doc = ctx.out.render(&event, |_| String::new())?;
                write_stdout(&format!("---\n{doc}"))?;
            }
            OutputFormat::Table | OutputFormat::Wide => match &event {
                SandboxLogEvent::Line(line) => write_stdout(&text(std::slice::from_ref(line)))?,
                SandboxLogEvent::Dropped { message, .. } => ctx.warn(sanitize(message)),
            },
        }
    }
    // The gateway ends a follow when it stops or the sandbox is deleted.
    ctx.note("the gateway ended the log stream (it stopped, or the sandbox was deleted)");
    Ok(exit::GATEWAY_UNAVAILABLE)
}

/// Milliseconds since the epoch `ago` before now.
fn since_ms(ago: std::time::Duration) -> i64 {
    let at = SystemTime::now()
        .checked_sub(ago)
        .unwrap_or(UNIX_EPOCH)
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // 0 means "no filter" on the wire; the epoch itself is as good as no filter.
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// One line per log line: time, level, source, target and message, then the fields. Every
/// part is text from the sandbox, so every part is made safe for a terminal.
pub fn text(lines: &[SandboxLogLine]) -> String {
    let mut out = String::new();
    for line in lines {
        let time = line.time.as_deref().unwrap_or("-");
        let _ = write!(
            out,
            "{time} {:<5} {} {}: {}",
            sanitize(&line.level),
            sanitize(&line.source),
            sanitize(&line.target),
            // A line is one line: a newline in it would pass for another line.
            sanitize(&line.message.replace('\n', "\\n")),
        );
        for (key, value) in &line.fields {
            let _ = write!(
                out,
                " {}={}",
                sanitize(key),
                sanitize(&value.replace('\n', "\\n"))
            );
        }
        out.push('\n');
    }
    out
}

fn dropped_note(logs: &SandboxLogs) -> Option<String> {
    let mut parts = Vec::new();
    if logs.supervisor_dropped_lines > 0 {
        parts.push(format!(
            "{} dropped by the supervisor (its buffer was full)",
            logs.supervisor_dropped_lines
        ));
    }
    if logs.gateway_dropped_lines > 0 {
        parts.push(format!(
            "{} dropped by the gateway (it keeps the newest lines per sandbox)",
            logs.gateway_dropped_lines
        ));
    }
    (!parts.is_empty()).then(|| format!("log lines lost: {}", parts.join("; ")))
}

fn empty_note(sandbox: &SandboxRef, logs: &SandboxLogs) -> String {
    if logs.buffer_total > 0 {
        format!(
            "no log line of {sandbox} matches; the gateway holds {} for it",
            logs.buffer_total
        )
    } else {
        format!(
            "no log lines for {sandbox} on this gateway: its supervisor has not pushed any here (lines live on the replica the supervisor pushes to, in memory)"
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn text_escapes_terminal_controls_and_keeps_one_line_per_line() {
        let line = SandboxLogLine {
            time: Some("2026-12-01T21:00:00.000Z".into()),
            timestamp_ms: 0,
            level: "INFO".into(),
            source: "workload".into(),
            target: "stdout".into(),
            message: "hello \u{1b}[31mred\nsecond".into(),
            fields: [("k".to_string(), "v\u{9b}".to_string())].into(),
        };
        let out = text(&[line]);
        assert_eq!(
            out,
            "2026-12-01T21:00:00.000Z INFO  workload stdout: hello \\x1b[31mred\\nsecond k=v\\u{9b}\n"
        );
    }

    #[test]
    fn since_is_in_the_past() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let since = since_ms(std::time::Duration::from_secs(300));
        assert!(since <= now - 300_000 && since > now - 310_000);
    }
}
