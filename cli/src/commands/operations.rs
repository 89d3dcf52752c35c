//! `openshell operations …`: reading and waiting on durable operations.

use openshell_sdk::{SandboxRef, SdkError};

use crate::cli::OperationsCommand;
use crate::context::Ctx;
use crate::report::{self, ProgressLines};
use crate::{exit, views};

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
            let mut lines = ProgressLines::default();
            let quiet = ctx.global.quiet;
            let result = client
                .wait_for_apply_final(&id, timeout, threshold, |op| {
                    if let Some(line) = lines.observe(op)
                        && !quiet
                    {
                        eprintln!("{line}");
                    }
                })
                .await;
            match result {
                Ok(op) => {
                    ctx.out.print(&op, |o| views::operation(o, &op))?;
                    Ok(report::conclude(ctx, &op, threshold))
                }
                Err(SdkError::WaitTimedOut { operation }) => {
                    ctx.out
                        .print(&*operation, |o| views::operation(o, &operation))?;
                    eprintln!("{}", report::timed_out_hint(&operation));
                    Ok(exit::WAIT_TIMED_OUT)
                }
                Err(err) => Err(err.into()),
            }
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
