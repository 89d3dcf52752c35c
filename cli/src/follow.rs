//! Following one operation until it ends, with live progress: used after a
//! committed write (`--wait`) and by `operations wait`.
//!
//! A write with `--wait` is committed COMMIT_ONLY and then followed through
//! the `WaitForApply` stream, rather than sent WAIT_FOR_APPLY, so progress is
//! live; the stream ends on the same terminal state, threshold or deadline
//! as a server-side wait, so the result and exit code are the same.

use std::time::{Duration, Instant};

use futures::StreamExt;
use openshell_sdk::{Client, FleetProgress, Operation, OperationState, OperationTarget, SdkError};

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

/// How long a wait that lost its gateway keeps reconnecting before it gives
/// up (never past its own deadline): a gateway restart takes seconds.
pub const RECONNECT_WINDOW: Duration = Duration::from_secs(30);
/// Sets another window, as a duration such as `10s` or `2m`.
pub const RECONNECT_WINDOW_ENV: &str = "OPENSHELL_WAIT_RECONNECT_WINDOW";

/// The reconnect window: [`RECONNECT_WINDOW`] unless [`RECONNECT_WINDOW_ENV`] sets one.
fn reconnect_window() -> Result<Duration, exit::UsageError> {
    match std::env::var(RECONNECT_WINDOW_ENV) {
        Ok(text) => humantime::parse_duration(text.trim()).map_err(|e| {
            exit::UsageError(format!(
                "{RECONNECT_WINDOW_ENV}={text:?}: {e}; expected a duration such as 30s or 2m"
            ))
        }),
        Err(_) => Ok(RECONNECT_WINDOW),
    }
}
const RECONNECT_FIRST_DELAY: Duration = Duration::from_millis(250);
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(2);

/// How often a wait asks the gateway again why its operation is still live: nothing on
/// the operation's stream changes while no supervisor is there to apply it.
const WAIT_REASON_RECHECK: Duration = Duration::from_secs(5);

/// The reason of a live target whose sandbox no supervisor is connected for, on any
/// replica (the gateway's `ListOperationTargets`).
const NO_SESSION: &str = "no session";

/// Why a live operation is not applied yet, when the gateway knows of a reason that no
/// state change will show: its sandboxes with no supervisor connected. `None` when every
/// pending target has a supervisor, or the gateway cannot say (the wait goes on without).
pub async fn waiting_reason(client: &Client, op: &Operation) -> Option<String> {
    if op.is_terminal() {
        return None;
    }
    let page = u32::try_from(STRAGGLER_NAMES + 1).unwrap_or(u32::MAX);
    let targets = client
        .list_operation_targets(
            &op.id,
            &[OperationState::Pending, OperationState::Delivered],
            page,
            None,
        )
        .await
        .ok()?
        .targets;
    let unattended: Vec<String> = targets
        .iter()
        .filter(|t| t.reason.as_deref() == Some(NO_SESSION))
        .map(OperationTarget::display_name)
        .collect();
    if unattended.is_empty() {
        return None;
    }
    if op.fleet.is_none() {
        return Some(format!(
            "no supervisor is connected for sandbox {}: the change is committed and applies when one connects",
            unattended.join(", ")
        ));
    }
    let shown: Vec<&str> = unattended
        .iter()
        .take(STRAGGLER_NAMES)
        .map(String::as_str)
        .collect();
    let more = if targets.len() > STRAGGLER_NAMES {
        " and maybe more"
    } else {
        ""
    };
    Some(format!(
        "no supervisor is connected for {}{more}: they apply the change when one connects",
        shown.join(", ")
    ))
}

/// Follows `op` (just committed, or just read) until it is done, the
/// deadline passes, or the user presses Ctrl-C. A lost gateway (a restart)
/// is reconnected to for up to [`reconnect_window`], with a note, and the
/// wait goes on; only then is the wait [`Waited::Lost`].
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
    let window = reconnect_window()?;
    let mut interrupt = Interrupt::listen()?;
    let mut progress = Progress::start(ctx.progress_mode(), &op, threshold, started);
    if op.is_terminal() || threshold.is_some_and(|t| op.threshold_met(t)) {
        progress.finish(&op);
        return Ok(Waited::Done(op));
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut last = op.clone();
    // Said while it holds, not only at the end: a wait on a sandbox nobody supervises
    // otherwise shows a bare "delivered" until its deadline.
    let mut reason = waiting_reason(client, &op).await;
    if let Some(text) = &reason {
        progress.note(&format!("waiting: {text}"));
    }
    let mut recheck = Instant::now() + WAIT_REASON_RECHECK;
    // Since when, and with what backoff, the gateway has been lost.
    let mut lost: Option<(Instant, Duration)> = None;
    loop {
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let subscribed = tokio::select! {
            subscribed = client.wait_for_apply(&op.id, remaining, threshold) => subscribed,
            () = interrupt.recv() => {
                progress.abandon();
                return Ok(Waited::Interrupted(last));
            }
        };
        let broke = match subscribed {
            Ok(mut stream) => {
                if lost.take().is_some() {
                    progress.note(&reconnected_note(&op.id));
                }
                loop {
                    let item = tokio::select! {
                        item = stream.next() => item,
                        () = held_line(progress.held_due()) => {
                            progress.flush();
                            continue;
                        }
                        () = tokio::time::sleep_until(recheck.into()) => {
                            recheck = Instant::now() + WAIT_REASON_RECHECK;
                            let now = waiting_reason(client, &last).await;
                            if now != reason {
                                match &now {
                                    Some(text) => progress.note(&format!("waiting: {text}")),
                                    None if reason.is_some() => progress.note(
                                        "waiting: a supervisor is connected now; waiting for it to apply the change",
                                    ),
                                    None => {}
                                }
                                reason = now;
                            }
                            continue;
                        }
                        () = interrupt.recv() => {
                            progress.abandon();
                            return Ok(Waited::Interrupted(last));
                        }
                    };
                    match item {
                        Some(Ok(seen)) => {
                            progress.update(&seen);
                            let done = seen.is_terminal()
                                || threshold.is_some_and(|t| seen.threshold_met(t));
                            last = seen;
                            if done {
                                progress.finish(&last);
                                return Ok(Waited::Done(last));
                            }
                        }
                        Some(Err(error)) => break Some(error),
                        // The server-side wait ended at its deadline.
                        None => break None,
                    }
                }
            }
            Err(error) => Some(error),
        };
        let error = match broke {
            None => {
                let mut live = last;
                live.wait_timed_out = true;
                progress.finish(&live);
                return Ok(Waited::TimedOut(live));
            }
            Some(error) if exit::for_wait_error(&error) == exit::GATEWAY_UNAVAILABLE => error,
            Some(error) => {
                progress.abandon();
                return Err(error.into());
            }
        };
        let now = Instant::now();
        let (since, delay) = *lost.get_or_insert_with(|| {
            progress.note(&format!(
                "note: lost the gateway while waiting for operation {} ({error}); reconnecting for up to {}",
                op.id,
                humantime::format_duration(window)
            ));
            (now, RECONNECT_FIRST_DELAY)
        });
        let out_of_time = deadline.is_some_and(|d| now + delay >= d);
        if now.duration_since(since) + delay > window || out_of_time {
            progress.abandon();
            return Ok(Waited::Lost { last, error });
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = interrupt.recv() => {
                progress.abandon();
                return Ok(Waited::Interrupted(last));
            }
        }
        lost = Some((since, (delay * 2).min(RECONNECT_MAX_DELAY)));
    }
}

/// Resolves when a progress line held back by its interval is due; never
/// when none is held.
async fn held_line(due: Option<Duration>) {
    match due {
        Some(due) => tokio::time::sleep(due).await,
        None => std::future::pending().await,
    }
}

fn reconnected_note(operation_id: &str) -> String {
    format!("note: reconnected to the gateway; still waiting for operation {operation_id}")
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

/// What to tell someone whose wait lost the gateway and could not reconnect
/// within [`reconnect_window`]: not a failure, an unknown outcome.
pub fn lost_hint(last: &Operation, error: &SdkError) -> String {
    format!(
        "error: lost the gateway while waiting for operation {id} (last seen {state}) and could not reconnect: {error}\n\
         gateway unavailable; the operation may still complete: check with `openshell operations get {id}`",
        id = last.id,
        state = last.state
    )
}

/// Names shown per kind of straggler before "and N more".
pub const STRAGGLER_NAMES: usize = 5;

/// For a fleet operation that ended (or stopped waiting) without every
/// target applied: which sandboxes are still pending and which failed,
/// the first [`STRAGGLER_NAMES`] of each, with why. None when there is
/// nothing to name, or when the gateway cannot list targets: the wait's
/// own result stands without it.
pub async fn stragglers(client: &Client, op: &Operation) -> Option<String> {
    let counts = op.fleet?;
    if counts.pending == 0 && counts.failed == 0 {
        return None;
    }
    // One more than shown tells whether to point at the full list.
    let page = u32::try_from(STRAGGLER_NAMES + 1).unwrap_or(u32::MAX);
    let named = |states: &'static [OperationState], count: u32| async move {
        if count == 0 {
            return Ok(Vec::new());
        }
        client
            .list_operation_targets(&op.id, states, page, None)
            .await
            .map(|p| p.targets)
    };
    let pending = named(
        &[OperationState::Pending, OperationState::Delivered],
        counts.pending,
    )
    .await
    .ok()?;
    let failed = named(&[OperationState::Failed], counts.failed).await.ok()?;
    Some(straggler_summary(op, &counts, &pending, &failed))
}

/// `31/32 applied; pending: team/sb-7 (no session); failed: team/sb-9 (…)`,
/// then where to see the rest when some were left out.
pub fn straggler_summary(
    op: &Operation,
    counts: &FleetProgress,
    pending: &[OperationTarget],
    failed: &[OperationTarget],
) -> String {
    let mut text = format!("{}/{} applied", counts.applied, counts.targets);
    let mut more = false;
    for (kind, targets, total) in [
        ("pending", pending, counts.pending),
        ("failed", failed, counts.failed),
    ] {
        if total == 0 || targets.is_empty() {
            continue;
        }
        let names: Vec<String> = targets
            .iter()
            .take(STRAGGLER_NAMES)
            .map(|t| match &t.reason {
                Some(reason) => format!("{} ({reason})", t.display_name()),
                None => t.display_name(),
            })
            .collect();
        text.push_str(&format!("; {kind}: {}", names.join(", ")));
        let shown = u32::try_from(names.len()).unwrap_or(u32::MAX);
        if total > shown {
            text.push_str(&format!(" and {} more", total - shown));
            more = true;
        }
    }
    if more {
        text.push_str(&format!(
            " — see `openshell operations get {} --targets`",
            op.id
        ));
    }
    text
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

    fn target(name: &str, reason: Option<&str>) -> OperationTarget {
        OperationTarget {
            sandbox_id: format!("sb-{name}"),
            sandbox_name: Some(name.into()),
            workspace: Some("team".into()),
            state: OperationState::Pending,
            outcome: openshell_sdk::ApplyOutcome::Unspecified,
            reason: reason.map(Into::into),
            updated_at: None,
        }
    }

    #[test]
    fn stragglers_are_named_with_why_and_the_rest_counted() {
        let op = operation(OperationState::Pending);
        let counts = FleetProgress {
            targets: 32,
            applied: 31,
            pending: 1,
            ..FleetProgress::default()
        };
        let text = straggler_summary(&op, &counts, &[target("sb-7", Some("no session"))], &[]);
        assert_eq!(text, "31/32 applied; pending: team/sb-7 (no session)");

        let counts = FleetProgress {
            targets: 40,
            applied: 30,
            pending: 8,
            failed: 2,
            ..FleetProgress::default()
        };
        let pending: Vec<_> = (0..6).map(|i| target(&format!("p{i}"), None)).collect();
        let failed = [
            target("f0", Some("policy rejected: exit 3")),
            target("f1", Some("policy rejected: exit 3")),
        ];
        let text = straggler_summary(&op, &counts, &pending, &failed);
        assert_eq!(
            text,
            "30/40 applied; pending: team/p0, team/p1, team/p2, team/p3, team/p4 and 3 more; \
             failed: team/f0 (policy rejected: exit 3), team/f1 (policy rejected: exit 3) \
             — see `openshell operations get op-0193 --targets`"
        );
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
