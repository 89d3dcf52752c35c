//! `openshell operations …`: reading and waiting on durable operations.

use std::time::Instant;

use openshell_sdk::SandboxRef;

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
            ctx.out.print(&ops, |o| views::operations(o, &ops))?;
            Ok(exit::SUCCESS)
        }
    }
}
