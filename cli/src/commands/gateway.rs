//! `openshell gateway …`

use crate::cli::GatewayCommand;
use crate::context::Ctx;
use crate::exit;
use crate::views;

pub async fn run(ctx: &Ctx, cmd: GatewayCommand) -> anyhow::Result<u8> {
    match cmd {
        GatewayCommand::Info => {
            let info = ctx.client().await?.gateway_info().await?;
            ctx.out.print(&info, |o| views::gateway(o, &info))?;
        }
    }
    Ok(exit::SUCCESS)
}
