//! `openshell policy …`: sandbox and global policies.

use openshell_sdk::{SandboxRef, Target, UpdateConfig};

use crate::cli::{OutputFormat, PolicyCommand};
use crate::commands::read_input;
use crate::context::Ctx;
use crate::output::write_stdout;
use crate::{exit, report, views};

pub async fn run(ctx: &Ctx, cmd: PolicyCommand) -> anyhow::Result<u8> {
    match cmd {
        PolicyCommand::Set {
            sandbox,
            global: _,
            file,
            wait,
        } => {
            // Read before connecting so a bad path fails without touching the gateway.
            let text = read_input(&file, "policy")?;
            let target = match sandbox {
                Some(sb) => Target::Sandbox(SandboxRef::from(sb)),
                None => Target::Global,
            };
            let update = report::configure(
                UpdateConfig::new(target).policy(text),
                &wait,
                ctx.stdout_is_terminal(),
            );
            let client = ctx.client().await?;
            report::apply_update(ctx, &client, update).await
        }
        PolicyCommand::ClearGlobal { wait } => {
            let update = report::configure(
                UpdateConfig::new(Target::Global).clear_global_policy(),
                &wait,
                ctx.stdout_is_terminal(),
            );
            let client = ctx.client().await?;
            report::apply_update(ctx, &client, update).await
        }
        PolicyCommand::Get { sandbox, revision } => {
            let client = ctx.client().await?;
            let policy = client
                .get_sandbox_policy(&SandboxRef::from(sandbox), revision)
                .await?;
            if ctx.out.format == OutputFormat::Yaml {
                // The policy text itself, so `policy get -o yaml > p.yaml`
                // round-trips into `policy set -f p.yaml`.
                let yaml = policy.policy.policy_yaml.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "revision {} came back without its policy text",
                        policy.policy.revision
                    )
                })?;
                let mut text = yaml.to_owned();
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                write_stdout(&text)?;
            } else {
                ctx.out.print(&policy, |o| views::policy(o, &policy))?;
            }
            Ok(exit::SUCCESS)
        }
        PolicyCommand::History { sandbox, limit } => {
            let client = ctx.client().await?;
            let revisions = client
                .list_sandbox_policies(&SandboxRef::from(sandbox), limit)
                .await?;
            ctx.out
                .print(&revisions, |o| views::policy_history(o, &revisions))?;
            Ok(exit::SUCCESS)
        }
    }
}
