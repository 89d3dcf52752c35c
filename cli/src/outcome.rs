//! Turning a configuration write or a wait into output, stderr notes and
//! an exit code, the same way for every command that writes config.

use std::time::Instant;

use openshell_sdk::{
    ApplyOutcome, Client, Operation, OperationState, UpdateConfig, UpdateMode, UpdateResult,
};

use crate::cli::WaitArgs;
use crate::context::Ctx;
use crate::exit;
use crate::follow::{Waited, follow, interrupted_hint, lost_hint, stragglers, waiting_reason};
use crate::output::sanitize;
use crate::views;

/// `--wait` (or `--timeout`) waits; otherwise the write returns once committed.
/// Never the terminal: a script and a person typing the same command get the same
/// result and exit code; a terminal only changes how progress is drawn.
pub fn resolve_mode(args: &WaitArgs) -> UpdateMode {
    if !args.commit_only && (args.wait || args.timeout.is_some()) {
        UpdateMode::WaitForApply
    } else {
        UpdateMode::CommitOnly
    }
}

/// Applies the wait flags to an update.
pub fn configure(mut update: UpdateConfig, args: &WaitArgs) -> UpdateConfig {
    update.mode = resolve_mode(args);
    update.idempotency_key = args.idempotency_key.clone().filter(|k| !k.is_empty());
    update.wait_timeout = args.timeout;
    update.threshold = args.threshold;
    update
}

/// Sends an update, prints its result and returns the exit code.
///
/// A waiting update is committed COMMIT_ONLY and then followed (see
/// `follow.rs`), so progress is live and Ctrl-C leaves a committed
/// operation behind that can be waited on again.
pub async fn apply_update(ctx: &Ctx, client: &Client, update: UpdateConfig) -> anyhow::Result<u8> {
    let started = Instant::now();
    let mode = update.mode;
    let timeout = update.wait_timeout;
    let threshold = update.threshold;
    let commit = UpdateConfig {
        mode: UpdateMode::CommitOnly,
        wait_timeout: None,
        threshold: None,
        ..update
    };
    let result = client.update_config(commit).await?;
    let Some(operation) = result.operation.clone() else {
        anyhow::bail!("the gateway answered the write without its operation");
    };
    if result.idempotent_replay {
        ctx.note(format!(
            "the idempotency key matched an earlier request: nothing new was written; operation {} is the original",
            operation.id
        ));
    }
    note_kept_sections(ctx, &result);
    note_merge(ctx, &result);
    warn_shadowed(ctx, &result);
    match mode {
        UpdateMode::CommitOnly => {
            ctx.out
                .print(&result, |o| views::update_result(o, &result))?;
            if !operation.is_terminal() {
                if let Some(reason) = waiting_reason(client, &operation).await {
                    ctx.warn(reason);
                }
                ctx.note(format!(
                    "committed as operation {id} ({state}); follow it with: openshell operations wait {id}",
                    id = operation.id,
                    state = operation.state
                ));
            }
            Ok(exit::SUCCESS)
        }
        UpdateMode::WaitForApply => {
            let waited = follow(ctx, client, operation, timeout, threshold, started).await?;
            finish_wait(ctx, client, waited, threshold, |op| {
                let result = UpdateResult {
                    operation: Some(op.clone()),
                    ..result.clone()
                };
                ctx.out.print(&result, |o| views::update_result(o, &result))
            })
            .await
        }
    }
}

/// Sends an update as a dry run, prints what it would change and returns
/// the exit code: 0 when the gateway accepted it (whether or not it changes
/// anything); a refusal is an error like a refused write's.
pub async fn dry_run(ctx: &Ctx, client: &Client, update: UpdateConfig) -> anyhow::Result<u8> {
    let result = client.update_config(update.validate_only()).await?;
    note_kept_sections(ctx, &result);
    note_merge(ctx, &result);
    warn_shadowed(ctx, &result);
    ctx.out.print(&result, |o| views::dry_run(o, &result))?;
    Ok(exit::SUCCESS)
}

/// Which static sections came from the sandbox's current policy: a note on
/// stderr for people; `-o json|yaml` carry them as `kept_static_sections`.
fn note_kept_sections(ctx: &Ctx, result: &UpdateResult) {
    if ctx.out.format.is_table() && !result.kept_static_sections.is_empty() {
        ctx.note(format!(
            "kept from the current policy: {}",
            result.kept_static_sections.join(", ")
        ));
    }
}

/// What the gateway's merge of `policy update` edits did other than
/// literally; `-o json|yaml` carry it as `merge_notes`.
fn note_merge(ctx: &Ctx, result: &UpdateResult) {
    use crate::output::OutputFormat::{Json, Yaml};
    if !matches!(ctx.out.format, Json | Yaml) {
        for note in &result.merge_notes {
            ctx.note(format!("merge: {note}"));
        }
    }
}

/// A sandbox policy written under a global policy never runs while that global policy is set:
/// said before any wait, whatever the output format (`-o json|yaml` carry it as
/// `shadowed_by_global_policy`).
fn warn_shadowed(ctx: &Ctx, result: &UpdateResult) {
    if let Some(global) = result.shadowed_by_global_policy {
        let stored = if result.validate_only {
            "would be stored"
        } else {
            "is stored"
        };
        ctx.warn(format!(
            "the global policy (revision {global}) is set and replaces every sandbox's policy: \
             this sandbox policy {stored} but is not in effect until the global policy is cleared \
             (openshell policy clear-global)"
        ));
    }
}

/// Prints how a wait ended (through `print`) and returns its exit code.
/// An interrupted wait, or one that lost the gateway, prints no result: it has none yet.
/// A fleet operation not applied everywhere names its first stragglers and failures.
pub async fn finish_wait(
    ctx: &Ctx,
    client: &Client,
    waited: Waited,
    threshold: Option<f64>,
    print: impl FnOnce(&Operation) -> anyhow::Result<()>,
) -> anyhow::Result<u8> {
    match waited {
        Waited::Done(op) | Waited::TimedOut(op) => {
            print(&op)?;
            if let Some(summary) = stragglers(client, &op).await {
                eprintln!("{}", sanitize(&summary));
            }
            Ok(conclude(ctx, &op, threshold))
        }
        Waited::Interrupted(op) => {
            eprintln!("{}", sanitize(&interrupted_hint(&op)));
            Ok(exit::INTERRUPTED)
        }
        Waited::Lost { last, error } => {
            eprintln!("{}", sanitize(&lost_hint(&last, &error)));
            Ok(exit::GATEWAY_UNAVAILABLE)
        }
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
            "{}",
            sanitize(&format!(
                "error: operation {} failed ({}){reason}; {}",
                op.id,
                op.outcome,
                what_runs_after_a_failure(op.outcome)
            ))
        ),
        OperationState::Inactive => ctx.warn(format!(
            "operation {} is not in effect (INACTIVE, {}){reason}",
            op.id, op.outcome
        )),
        OperationState::Cancelled => ctx.warn(format!(
            "operation {} was cancelled: the sandbox was deleted before it applied{reason}",
            op.id
        )),
        _ if code == exit::WAIT_TIMED_OUT => eprintln!("{}", sanitize(&timed_out_hint(op))),
        _ => {}
    }
    code
}

/// What the sandbox runs after a failed apply: a quarantine is not last-known-good.
fn what_runs_after_a_failure(outcome: ApplyOutcome) -> &'static str {
    match outcome {
        ApplyOutcome::FailedClosed => {
            "the sandbox is quarantined: all network access is denied until a configuration applies"
        }
        _ => "the last-known-good configuration stays active",
    }
}

pub fn timed_out_hint(op: &Operation) -> String {
    format!(
        "operation {id} is still {state} after the wait deadline; it keeps going.\n\
         follow it with: openshell operations wait {id}",
        id = op.id,
        state = op.state
    )
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
        assert_eq!(resolve_mode(&commit), UpdateMode::CommitOnly);
        let wait = WaitArgs {
            wait: true,
            ..WaitArgs::default()
        };
        assert_eq!(resolve_mode(&wait), UpdateMode::WaitForApply);
        let timeout = WaitArgs {
            timeout: Some(Duration::from_secs(5)),
            ..WaitArgs::default()
        };
        assert_eq!(resolve_mode(&timeout), UpdateMode::WaitForApply);
    }

    #[test]
    fn without_wait_flags_a_write_returns_at_commit() {
        assert_eq!(resolve_mode(&WaitArgs::default()), UpdateMode::CommitOnly);
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
        let update = configure(UpdateConfig::new(Target::Global), &args);
        assert_eq!(update.mode, UpdateMode::WaitForApply);
        assert_eq!(update.wait_timeout, Some(Duration::from_secs(120)));
        assert_eq!(update.threshold, Some(0.9));
        assert_eq!(update.idempotency_key.as_deref(), Some("k"));
    }

    #[test]
    fn timed_out_hint_names_the_follow_up() {
        let hint = timed_out_hint(&operation(OperationState::Pending));
        assert!(hint.contains("op-0193"));
        assert!(hint.contains("openshell operations wait op-0193"));
    }
}
