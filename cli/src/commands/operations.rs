//! `openshell operations …`: reading and waiting on durable operations.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use openshell_sdk::{Client, Operation, SandboxRef, TargetKind};

use crate::cli::OperationsCommand;
use crate::context::Ctx;
use crate::follow::follow;
use crate::{exit, outcome, views};

pub async fn run(ctx: &Ctx, cmd: OperationsCommand) -> anyhow::Result<u8> {
    let client = ctx.client().await?;
    match cmd {
        OperationsCommand::Get { id } => {
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
            outcome::finish_wait(ctx, waited, threshold, |op| {
                ctx.out.print(op, |o| views::operation(o, op))
            })
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
