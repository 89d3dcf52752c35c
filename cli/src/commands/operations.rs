//! `openshell operations …`: reading and waiting on durable operations.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use openshell_sdk::{
    Client, FleetProgress, Operation, OperationState, OperationTarget, SandboxRef, TargetKind,
};
use serde::Serialize;

use crate::cli::OperationsCommand;
use crate::context::Ctx;
use crate::follow::follow;
use crate::output::{Column, Output, dash};
use crate::{exit, outcome, views};

/// Most targets one call asks for: the gateway's limit.
const TARGET_PAGE: usize = crate::cli::MAX_PAGE as usize;

pub async fn run(ctx: &Ctx, cmd: OperationsCommand) -> anyhow::Result<u8> {
    let client = ctx.client().await?;
    match cmd {
        OperationsCommand::Get {
            id,
            targets: true,
            states,
            limit,
        } => {
            let listed = list_targets(&client, &id, &states, limit).await?;
            ctx.out
                .print(&listed, |o| targets_table(o, &listed.targets))?;
            if listed.truncated {
                ctx.note(format!(
                    "showing the first {} targets; more match (raise --limit, or drop it for all)",
                    listed.targets.len()
                ));
            }
            Ok(exit::SUCCESS)
        }
        OperationsCommand::Get { id, .. } => {
            let op = client.get_operation(&id).await?;
            ctx.out.print(&op, |o| views::operation(o, &op))?;
            Ok(exit::SUCCESS)
        }
        OperationsCommand::Wait {
            id,
            timeout,
            threshold,
        } => {
            let started = Instant::now();
            // Read first: an unknown id fails before any progress is drawn,
            // and the first version decides between a spinner and a fleet bar.
            let op = client.get_operation(&id).await?;
            let waited = follow(ctx, &client, op, timeout, threshold, started).await?;
            outcome::finish_wait(ctx, &client, waited, threshold, |op| {
                ctx.out.print(op, |o| views::operation(o, op))
            })
            .await
        }
        OperationsCommand::List {
            sandbox,
            states,
            limit,
        } => {
            let sandbox = sandbox.map(SandboxRef::from);
            let ops = client
                .list_operations(sandbox.as_ref(), &states, limit)
                .await?;
            let names = if ctx.out.format.is_table() {
                sandbox_names(&client, &ops).await
            } else {
                HashMap::new()
            };
            ctx.out
                .print(&ops, |o| views::operations(o, &ops, &names))?;
            Ok(exit::SUCCESS)
        }
    }
}

/// Names of the sandboxes these operations target, by id, for a table to
/// show names where it can. One read per distinct sandbox; one that
/// cannot be read keeps its id.
async fn sandbox_names(client: &Client, ops: &[Operation]) -> HashMap<String, String> {
    let ids: BTreeSet<&str> = ops
        .iter()
        .filter(|op| op.target_kind == TargetKind::Sandbox && !op.target.is_empty())
        .map(|op| op.target.as_str())
        .collect();
    let reads = ids
        .into_iter()
        .map(|id| async move { client.get_sandbox(&SandboxRef::new(id)).await.ok() });
    futures::future::join_all(reads)
        .await
        .into_iter()
        .flatten()
        .map(|sb| (sb.id, sb.name))
        .collect()
}

/// An operation's targets as `operations get --targets` shows them.
#[derive(Debug, Serialize)]
struct ListedTargets {
    operation_id: String,
    /// Counts over every target, whatever the filter.
    counts: FleetProgress,
    targets: Vec<OperationTarget>,
    /// `--limit` left some out.
    truncated: bool,
}

/// Every target in `states` (all when empty), page after page, up to `limit`.
async fn list_targets(
    client: &Client,
    operation_id: &str,
    states: &[OperationState],
    limit: Option<usize>,
) -> anyhow::Result<ListedTargets> {
    let page_size = limit.map_or(TARGET_PAGE, |l| l.clamp(1, TARGET_PAGE));
    let page_size = u32::try_from(page_size).unwrap_or(u32::MAX);
    let mut targets = Vec::new();
    let mut counts: FleetProgress;
    let mut token: Option<String> = None;
    let truncated = loop {
        let page = client
            .list_operation_targets(operation_id, states, page_size, token.as_deref())
            .await?;
        counts = page.counts;
        targets.extend(page.targets);
        if let Some(limit) = limit
            && targets.len() >= limit
        {
            let more = targets.len() > limit || page.next_page_token.is_some();
            targets.truncate(limit);
            break more;
        }
        match page.next_page_token {
            // A token equal to the one sent would read the same page forever.
            Some(next) if token.as_deref() != Some(next.as_str()) => token = Some(next),
            _ => break false,
        }
    };
    Ok(ListedTargets {
        operation_id: operation_id.to_owned(),
        counts,
        targets,
        truncated,
    })
}

/// The sandbox's name first, as people know it; its id last, for scripts.
/// The reason is free text, cut to fit; a gone sandbox's name is `-`.
fn targets_table(out: &Output, targets: &[OperationTarget]) -> String {
    out.table(
        targets,
        &[
            Column::new("NAME", |t: &OperationTarget| match &t.sandbox_name {
                Some(_) => t.display_name(),
                None => "-".to_string(),
            }),
            Column::new("STATE", |t: &OperationTarget| t.state.to_string()),
            Column::new("REASON", |t: &OperationTarget| dash(t.reason.as_deref())).cut(),
            Column::new("OUTCOME", |t: &OperationTarget| t.outcome.to_string()).wide(),
            Column::new("UPDATED", |t: &OperationTarget| {
                dash(t.updated_at.as_deref())
            })
            .wide(),
            Column::new("SANDBOX ID", |t: &OperationTarget| t.sandbox_id.clone()),
        ],
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use openshell_sdk::ApplyOutcome;

    use super::*;
    use crate::output::OutputFormat;

    fn target(
        id: &str,
        name: Option<&str>,
        state: OperationState,
        reason: Option<&str>,
    ) -> OperationTarget {
        OperationTarget {
            sandbox_id: id.into(),
            sandbox_name: name.map(Into::into),
            workspace: name.map(|_| "team".into()),
            state,
            outcome: ApplyOutcome::Unspecified,
            reason: reason.map(Into::into),
            updated_at: None,
        }
    }

    #[test]
    fn the_table_leads_with_the_name_and_ends_with_the_id() {
        let text = targets_table(
            &Output::plain(OutputFormat::Table),
            &[
                target(
                    "sb-1",
                    Some("web"),
                    OperationState::Pending,
                    Some("no session"),
                ),
                target("sb-2", None, OperationState::Applied, None),
            ],
        );
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| {
                l.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .collect();
        assert_eq!(
            lines[0],
            ["NAME", "STATE", "REASON", "SANDBOX ID"],
            "{text}"
        );
        assert_eq!(
            lines[1],
            ["team/web", "PENDING", "no session", "sb-1"],
            "{text}"
        );
        assert_eq!(lines[2], ["-", "APPLIED", "-", "sb-2"], "{text}");
    }
}
