//! `openshell sessions …`: delivery diagnostics.

use openshell_sdk::SandboxRef;

use crate::cli::SessionsCommand;
use crate::context::Ctx;
use crate::exit;
use crate::views;

pub async fn run(ctx: &Ctx, cmd: SessionsCommand) -> anyhow::Result<u8> {
    let client = ctx.client().await?;
    match cmd {
        SessionsCommand::List => {
            let sessions = client.list_sessions().await?;
            ctx.out
                .print(&sessions, |o| views::sessions(o, &sessions))?;
        }
        SessionsCommand::Inspect { sandbox } => {
            let inspection = client.inspect_session(&SandboxRef::from(sandbox)).await?;
            ctx.out
                .print(&inspection, |o| views::inspection(o, &inspection))?;
        }
    }
    Ok(exit::SUCCESS)
}
