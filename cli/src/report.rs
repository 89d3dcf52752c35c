//! Turning a configuration write or a wait into output, stderr notes and
//! an exit code, the same way for every command that writes config.

use openshell_sdk::{Client, FleetProgress, Operation, OperationState, UpdateConfig, UpdateMode};

use crate::cli::WaitArgs;
use crate::context::Ctx;
use crate::exit;
use crate::views;

/// `--commit-only` and `--wait` (or `--timeout`) decide; otherwise wait for
/// a person at a terminal and return at once for scripts and pipes.
pub fn resolve_mode(args: &WaitArgs, stdout_is_terminal: bool) -> UpdateMode {
    if args.commit_only {
        UpdateMode::CommitOnly
    } else if args.wait || args.timeout.is_some() || stdout_is_terminal {
        UpdateMode::WaitForApply
    } else {
        UpdateMode::CommitOnly
    }
}

/// Applies the wait flags to an update.
pub fn configure(
    mut update: UpdateConfig,
    args: &WaitArgs,
    stdout_is_terminal: bool,
) -> UpdateConfig {
    update.mode = resolve_mode(args, stdout_is_terminal);
    update.idempotency_key = args.idempotency_key.clone().filter(|k| !k.is_empty());
    update.wait_timeout = args.timeout;
    update.threshold = args.threshold;
    update
}

/// Sends an update, prints its result and returns the exit code.
pub async fn apply_update(ctx: &Ctx, client: &Client, update: UpdateConfig) -> anyhow::Result<u8> {
    let mode = update.mode;
    let threshold = update.threshold;
    if mode == UpdateMode::WaitForApply && ctx.show_progress() {
        let limit = update.wait_timeout.map_or_else(
            || "the gateway's default 60s".to_owned(),
            |d| humantime::format_duration(d).to_string(),
        );
        eprintln!("committing and waiting for the change to apply (up to {limit})...");
    }
    let result = client.update_config(update).await?;
    ctx.out
        .print(&result, |o| views::update_result(o, &result))?;
    let op = &result.operation;
    if result.idempotent_replay {
        ctx.note(format!(
            "the idempotency key matched an earlier request: nothing new was written; operation {} is the original",
            op.id
        ));
    }
    match mode {
        UpdateMode::CommitOnly => {
            if !op.is_terminal() {
                ctx.note(format!(
                    "committed as operation {id} ({state}); follow it with: openshell operations wait {id}",
                    id = op.id,
                    state = op.state
                ));
            }
            Ok(exit::SUCCESS)
        }
        UpdateMode::WaitForApply => Ok(conclude(ctx, op, threshold)),
    }
}

/// Explains a waited-on operation's end on stderr and returns its exit code.
pub fn conclude(ctx: &Ctx, op: &Operation, threshold: Option<f64>) -> u8 {
    let code = exit::for_waited(op, threshold);
    let reason = op
        .error
        .as_deref()
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    match op.state {
        OperationState::Superseded => ctx.warn(format!(
            "operation {} was superseded: a newer revision reached the sandbox first",
            op.id
        )),
        OperationState::Failed => eprintln!(
            "error: operation {} failed ({}){reason}; the last-known-good configuration stays active",
            op.id, op.outcome
        ),
        OperationState::Inactive => ctx.warn(format!(
            "operation {} is not in effect (INACTIVE, {}){reason}",
            op.id, op.outcome
        )),
        OperationState::Cancelled => ctx.warn(format!(
            "operation {} was cancelled: the sandbox was deleted before it applied{reason}",
            op.id
        )),
        _ if code == exit::WAIT_TIMED_OUT => eprintln!("{}", timed_out_hint(op)),
        _ => {}
    }
    code
}

pub fn timed_out_hint(op: &Operation) -> String {
    format!(
        "operation {id} is still {state} after the wait deadline; it keeps going.\n\
         follow it with: openshell operations wait {id}",
        id = op.id,
        state = op.state
    )
}

/// Prints one line per observed change of an operation during a wait.
#[derive(Debug, Default)]
pub struct ProgressLines {
    last: Option<(OperationState, Option<FleetProgress>)>,
}

impl ProgressLines {
    /// The line to print for `op`, or `None` when nothing changed.
    pub fn observe(&mut self, op: &Operation) -> Option<String> {
        let seen = (op.state, op.fleet);
        if self.last == Some(seen) {
            return None;
        }
        self.last = Some(seen);
        let mut line = format!("operation {}: {}", op.id, op.state);
        if let Some(fleet) = &op.fleet {
            line.push_str(&format!(
                " ({}/{} applied, {} failed, {} pending)",
                fleet.applied, fleet.targets, fleet.failed, fleet.pending
            ));
        }
        if op.is_terminal() {
            line.push_str(&format!(", outcome {}", op.outcome));
        }
        Some(line)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use openshell_sdk::Target;

    use super::*;
    use crate::exit::tests::operation;

    #[test]
    fn explicit_flags_decide_the_mode() {
        let commit = WaitArgs {
            commit_only: true,
            ..WaitArgs::default()
        };
        assert_eq!(resolve_mode(&commit, true), UpdateMode::CommitOnly);
        let wait = WaitArgs {
            wait: true,
            ..WaitArgs::default()
        };
        assert_eq!(resolve_mode(&wait, false), UpdateMode::WaitForApply);
        let timeout = WaitArgs {
            timeout: Some(Duration::from_secs(5)),
            ..WaitArgs::default()
        };
        assert_eq!(resolve_mode(&timeout, false), UpdateMode::WaitForApply);
    }

    #[test]
    fn default_mode_follows_the_terminal() {
        let none = WaitArgs::default();
        assert_eq!(resolve_mode(&none, true), UpdateMode::WaitForApply);
        assert_eq!(resolve_mode(&none, false), UpdateMode::CommitOnly);
    }

    #[test]
    fn configure_copies_wait_flags() {
        let args = WaitArgs {
            wait: true,
            timeout: Some(Duration::from_secs(120)),
            threshold: Some(0.9),
            idempotency_key: Some("k".into()),
            ..WaitArgs::default()
        };
        let update = configure(UpdateConfig::new(Target::Global), &args, false);
        assert_eq!(update.mode, UpdateMode::WaitForApply);
        assert_eq!(update.wait_timeout, Some(Duration::from_secs(120)));
        assert_eq!(update.threshold, Some(0.9));
        assert_eq!(update.idempotency_key.as_deref(), Some("k"));
    }

    #[test]
    fn progress_prints_only_changes() {
        let mut lines = ProgressLines::default();
        let pending = operation(OperationState::Pending);
        assert_eq!(
            lines.observe(&pending).as_deref(),
            Some("operation op-0193: PENDING")
        );
        assert_eq!(lines.observe(&pending), None);
        let applied = operation(OperationState::Applied);
        assert!(
            lines
                .observe(&applied)
                .unwrap()
                .contains("APPLIED, outcome")
        );
    }

    #[test]
    fn timed_out_hint_names_the_follow_up() {
        let hint = timed_out_hint(&operation(OperationState::Pending));
        assert!(hint.contains("op-0193"));
        assert!(hint.contains("openshell operations wait op-0193"));
    }
}
