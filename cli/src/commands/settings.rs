//! `openshell settings …`: typed settings at global, workspace or sandbox scope.

use openshell_sdk::{Client, SandboxRef, Setting, Target, UpdateConfig};

use crate::cli::{ScopeArgs, SettingsCommand, WaitArgs};
use crate::commands::sandbox_count;
use crate::context::Ctx;
use crate::output::sanitize;
use crate::{exit, outcome, views};

fn target(scope: ScopeArgs) -> Target {
    match (scope.sandbox, scope.workspace) {
        (Some(sb), _) => Target::Sandbox(SandboxRef::from(sb)),
        (None, Some(ws)) => Target::Workspace(ws),
        // clap's required group guarantees --global here.
        (None, None) => Target::Global,
    }
}

/// A dry run carries the write's idempotency key, so it can say whether the
/// write would be a replay; nothing else of the wait flags applies.
fn keyed(mut update: UpdateConfig, wait: &WaitArgs) -> UpdateConfig {
    update.idempotency_key = wait.idempotency_key.clone().filter(|k| !k.is_empty());
    update
}

pub async fn run(ctx: &Ctx, cmd: SettingsCommand) -> anyhow::Result<u8> {
    let client = ctx.client().await?;
    match cmd {
        SettingsCommand::Set {
            scope,
            pairs,
            dry_run,
            wait,
        } => {
            if dry_run {
                let update = pairs
                    .into_iter()
                    .fold(UpdateConfig::new(target(scope)), |u, (k, v)| u.set(k, v));
                return outcome::dry_run(ctx, &client, keyed(update, &wait)).await;
            }
            if scope.global {
                let changes: Vec<(&str, Option<&str>)> = pairs
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                    .collect();
                if let Some(code) = confirm_global(ctx, &client, "set", &changes).await? {
                    return Ok(code);
                }
            }
            let update = pairs
                .into_iter()
                .fold(UpdateConfig::new(target(scope)), |u, (k, v)| u.set(k, v));
            let update = outcome::configure(update, &wait);
            outcome::apply_update(ctx, &client, update).await
        }
        SettingsCommand::Delete {
            scope,
            keys,
            dry_run,
            wait,
        } => {
            if dry_run {
                let update = keys
                    .into_iter()
                    .fold(UpdateConfig::new(target(scope)), UpdateConfig::delete);
                return outcome::dry_run(ctx, &client, keyed(update, &wait)).await;
            }
            if scope.global {
                let changes: Vec<(&str, Option<&str>)> =
                    keys.iter().map(|k| (k.as_str(), None)).collect();
                if let Some(code) = confirm_global(ctx, &client, "delete", &changes).await? {
                    return Ok(code);
                }
            }
            let update = keys
                .into_iter()
                .fold(UpdateConfig::new(target(scope)), UpdateConfig::delete);
            let update = outcome::configure(update, &wait);
            outcome::apply_update(ctx, &client, update).await
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

/// Global settings override every other scope on every sandbox: ask first.
async fn confirm_global(
    ctx: &Ctx,
    client: &Client,
    verb: &str,
    changes: &[(&str, Option<&str>)],
) -> anyhow::Result<Option<u8>> {
    let details = async {
        let current = client.get_settings(&Target::Global).await?;
        let count = sandbox_count(client).await?;
        Ok(global_changes_text(&current.values, changes, count))
    };
    ctx.confirm(
        true,
        &format!("{verb} global settings"),
        "Apply to every sandbox?",
        details,
    )
    .await
}

/// `key: old → new` per change, under a line saying how far it reaches.
fn global_changes_text(
    current: &[Setting],
    changes: &[(&str, Option<&str>)],
    sandboxes: usize,
) -> String {
    let mut text = format!(
        "This global write reaches every sandbox ({sandboxes} now) and overrides their sandbox and workspace values:\n"
    );
    for (key, new) in changes {
        let old = current
            .iter()
            .find(|s| s.key == *key)
            .and_then(|s| s.value.as_ref())
            .map_or_else(|| "(unset)".to_owned(), ToString::to_string);
        let new = new.map_or_else(|| "(unset)".to_owned(), str::to_owned);
        text.push_str(&format!("  {key}: {old} → {new}\n"));
    }
    sanitize(&text).into_owned()
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

    #[test]
    fn global_changes_show_old_and_new_values() {
        use openshell_sdk::{SettingScope, SettingValue};
        let current = vec![Setting {
            key: "log_level".into(),
            value: Some(SettingValue::String("info".into())),
            scope: SettingScope::Global,
        }];
        let text = global_changes_text(
            &current,
            &[
                ("log_level", Some("debug")),
                ("other", Some("1")),
                ("gone", None),
            ],
            3,
        );
        assert!(text.contains("every sandbox (3 now)"), "{text}");
        assert!(text.contains("  log_level: info → debug\n"), "{text}");
        assert!(text.contains("  other: (unset) → 1\n"), "{text}");
        assert!(text.contains("  gone: (unset) → (unset)\n"), "{text}");
    }
}
