//! `openshell settings …`: typed settings at global, workspace or sandbox scope.

use openshell_sdk::{SandboxRef, Target, UpdateConfig};

use crate::cli::{ScopeArgs, SettingsCommand};
use crate::context::Ctx;
use crate::{exit, report, views};

fn target(scope: ScopeArgs) -> Target {
    match (scope.sandbox, scope.workspace) {
        (Some(sb), _) => Target::Sandbox(SandboxRef::from(sb)),
        (None, Some(ws)) => Target::Workspace(ws),
        // clap's required group guarantees --global here.
        (None, None) => Target::Global,
    }
}

pub async fn run(ctx: &Ctx, cmd: SettingsCommand) -> anyhow::Result<u8> {
    let client = ctx.client().await?;
    match cmd {
        SettingsCommand::Set { scope, pairs, wait } => {
            let update = pairs
                .into_iter()
                .fold(UpdateConfig::new(target(scope)), |u, (k, v)| u.set(k, v));
            let update = report::configure(update, &wait, ctx.stdout_is_terminal());
            report::apply_update(ctx, &client, update).await
        }
        SettingsCommand::Delete { scope, keys, wait } => {
            let update = keys
                .into_iter()
                .fold(UpdateConfig::new(target(scope)), UpdateConfig::delete);
            let update = report::configure(update, &wait, ctx.stdout_is_terminal());
            report::apply_update(ctx, &client, update).await
        }
        SettingsCommand::Get { scope } => {
            let settings = client.get_settings(&target(scope)).await?;
            ctx.out
                .print(&settings, |o| views::settings(o, &settings))?;
            Ok(exit::SUCCESS)
        }
        SettingsCommand::Keys => {
            let definitions = client.list_setting_definitions().await?;
            ctx.out.print(&definitions, |o| {
                views::setting_definitions(o, &definitions)
            })?;
            Ok(exit::SUCCESS)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn scope_flags_pick_the_target() {
        let sb = ScopeArgs {
            sandbox: Some("team/demo".into()),
            workspace: None,
            global: false,
        };
        assert_eq!(
            target(sb),
            Target::Sandbox(SandboxRef::in_workspace("demo", "team"))
        );
        let ws = ScopeArgs {
            sandbox: None,
            workspace: Some("team".into()),
            global: false,
        };
        assert_eq!(target(ws), Target::Workspace("team".into()));
        let global = ScopeArgs {
            sandbox: None,
            workspace: None,
            global: true,
        };
        assert_eq!(target(global), Target::Global);
    }
}
