//! `openshell provider …`: providers and their attachment to sandboxes.
//! Credential values are read from flags or the environment and never printed.

use std::collections::BTreeMap;

use openshell_sdk::{Attachment, ProviderSpec, ProviderUpdate, ProviderWrite, SandboxRef};
use serde::Serialize;

use crate::cli::{ProviderCommand, ProviderValues};
use crate::context::Ctx;
use crate::exit::{self, UsageError};
use crate::output::{Output, finish, sanitize};
use crate::views;

/// Env values and credentials, checked for names given twice.
#[derive(Debug, Default, PartialEq, Eq)]
struct Values {
    env: BTreeMap<String, String>,
    credentials: BTreeMap<String, String>,
}

fn collect_values(
    args: ProviderValues,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Values, UsageError> {
    let mut values = Values::default();
    for (key, value) in args.env {
        if values.env.insert(key.clone(), value).is_some() {
            return Err(UsageError(format!("--env {key} is given twice")));
        }
    }
    let from_env = args.credentials_from_env.into_iter().map(|key| {
        let value = lookup(&key).ok_or_else(|| {
            UsageError(format!(
                "environment variable {key} is not set (needed by --credential-from-env {key})"
            ))
        })?;
        Ok((key, value))
    });
    let given = args.credentials.iter().map(|text| {
        crate::parse::credential(text).map_err(|e| UsageError(format!("--credential: {e}")))
    });
    for item in given.chain(from_env) {
        let (key, value) = item?;
        if values.credentials.insert(key.clone(), value).is_some() {
            return Err(UsageError(format!("credential {key} is given twice")));
        }
    }
    Ok(values)
}

fn from_process_env(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

pub async fn run(ctx: &Ctx, cmd: ProviderCommand) -> anyhow::Result<u8> {
    match cmd {
        ProviderCommand::Create {
            name,
            provider_type,
            workspace,
            values,
        } => {
            let expires_at = values.expires_at;
            let Values { env, credentials } = collect_values(values, from_process_env)?;
            let spec = ProviderSpec {
                name,
                workspace,
                provider_type,
                env,
                credentials,
                expires_at,
            };
            let written = ctx.client().await?.create_provider(&spec).await?;
            print_write(ctx, &written)?;
        }
        ProviderCommand::Update {
            provider,
            workspace,
            values,
        } => {
            let expires_at = values.expires_at;
            let Values { env, credentials } = collect_values(values, from_process_env)?;
            let update = ProviderUpdate {
                provider,
                workspace,
                env,
                credentials,
                expires_at,
            };
            let written = ctx.client().await?.update_provider(&update).await?;
            print_write(ctx, &written)?;
        }
        ProviderCommand::Delete {
            provider,
            workspace,
        } => {
            ctx.client()
                .await?
                .delete_provider(&provider, workspace.as_deref())
                .await?;
            let done = Deleted {
                provider: &provider,
                deleted: true,
            };
            ctx.out.print(&done, |_| {
                sanitize(&format!("provider {provider} deleted\n")).into_owned()
            })?;
        }
        ProviderCommand::Get {
            provider,
            workspace,
        } => {
            let p = ctx
                .client()
                .await?
                .get_provider(&provider, workspace.as_deref())
                .await?;
            ctx.out.print(&p, |o| views::provider(o, &p))?;
        }
        ProviderCommand::List { workspace } => {
            let list = ctx
                .client()
                .await?
                .list_providers(workspace.as_deref())
                .await?;
            ctx.out.print(&list, |o| views::providers(o, &list))?;
        }
        ProviderCommand::Attach { sandbox, provider } => {
            let attachment = ctx
                .client()
                .await?
                .attach_provider(&SandboxRef::from(sandbox), &provider)
                .await?;
            print_attachment(ctx, &attachment)?;
        }
        ProviderCommand::Detach { sandbox, provider } => {
            let attachment = ctx
                .client()
                .await?
                .detach_provider(&SandboxRef::from(sandbox), &provider)
                .await?;
            print_attachment(ctx, &attachment)?;
        }
    }
    Ok(exit::SUCCESS)
}

#[derive(Serialize)]
struct Deleted<'a> {
    provider: &'a str,
    deleted: bool,
}

fn print_write(ctx: &Ctx, written: &ProviderWrite) -> anyhow::Result<()> {
    ctx.out.print(written, |o| {
        let mut text = views::provider(o, &written.provider);
        if let Some(op) = &written.operation {
            text.push_str(&sanitize(&format!(
                "\ndelivery: operation {} ({})\n",
                op.id, op.state
            )));
        }
        text
    })?;
    follow_hint(ctx, written.operation.as_ref());
    Ok(())
}

fn print_attachment(ctx: &Ctx, attachment: &Attachment) -> anyhow::Result<()> {
    ctx.out
        .print(attachment, |o| attachment_table(o, attachment))?;
    follow_hint(ctx, attachment.operation.as_ref());
    Ok(())
}

fn attachment_table(out: &Output, attachment: &Attachment) -> String {
    let mut rows = views::sandbox_rows(&attachment.sandbox);
    if let Some(op) = &attachment.operation {
        rows.push(("operation", format!("{} ({})", op.id, op.state)));
    }
    finish(out.kv(rows))
}

fn follow_hint(ctx: &Ctx, operation: Option<&openshell_sdk::Operation>) {
    if let Some(op) = operation.filter(|op| !op.is_terminal()) {
        ctx.note(format!(
            "follow delivery with: openshell operations wait {}",
            op.id
        ));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn args() -> ProviderValues {
        ProviderValues {
            env: vec![("HOST".into(), "github.com".into())],
            credentials: vec!["TOKEN=ghp_1".into()],
            credentials_from_env: vec!["OTHER".into()],
            expires_at: None,
        }
    }

    #[test]
    fn collects_flags_and_environment() {
        let values =
            collect_values(args(), |k| (k == "OTHER").then(|| "s3cret".to_string())).unwrap();
        assert_eq!(values.env["HOST"], "github.com");
        assert_eq!(values.credentials["TOKEN"], "ghp_1");
        assert_eq!(values.credentials["OTHER"], "s3cret");
    }

    #[test]
    fn malformed_credential_is_refused_without_its_value() {
        let mut a = args();
        a.credentials.push("sk-live-123".into());
        let err = collect_values(a, |_| Some("x".into())).unwrap_err();
        assert!(err.0.contains("NAME=VALUE"));
        assert!(!err.0.contains("sk-live-123"));
    }

    #[test]
    fn missing_environment_is_a_usage_error() {
        let err = collect_values(args(), |_| None).unwrap_err();
        assert!(err.0.contains("OTHER"));
    }

    #[test]
    fn duplicate_names_are_refused_without_values() {
        let mut a = args();
        a.credentials.push("TOKEN=ghp_2".into());
        let err = collect_values(a, |_| Some("x".into())).unwrap_err();
        assert!(err.0.contains("TOKEN"));
        assert!(!err.0.contains("ghp_"));
    }
}
