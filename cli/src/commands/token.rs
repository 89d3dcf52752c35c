//! `openshell token …`: operator tokens the gateway keeps in its store. A
//! secret is printed once, by `create`; `list` never has one to print.

use std::time::SystemTime;

use openshell_sdk::{CreatedToken, TokenInfo, TokenRole};

use crate::cli::{TokenCommand, TokenRoleArg};
use crate::context::Ctx;
use crate::exit;
use crate::output::{Column, Output, age, dash, finish};

fn role(arg: TokenRoleArg) -> TokenRole {
    match arg {
        TokenRoleArg::Viewer => TokenRole::Viewer,
        TokenRoleArg::Operator => TokenRole::Operator,
        TokenRoleArg::Admin => TokenRole::Admin,
    }
}

pub async fn run(ctx: &Ctx, cmd: TokenCommand) -> anyhow::Result<u8> {
    match cmd {
        TokenCommand::Create {
            name,
            role: wanted,
            workspace,
        } => {
            let created = ctx
                .client()
                .await?
                .create_token(&name, role(wanted), workspace.as_deref())
                .await?;
            ctx.out.print(&created, |o| created_table(o, &created))?;
        }
        TokenCommand::List => {
            let tokens = ctx.client().await?.list_tokens().await?;
            ctx.out.print(&tokens, |o| tokens_table(o, &tokens))?;
        }
        TokenCommand::Revoke { name } => {
            let revoked = ctx.client().await?.revoke_token(&name).await?;
            ctx.out.print(&revoked, |o| {
                finish(o.kv([
                    ("revoked", revoked.name.clone()),
                    ("role", role_text(&revoked)),
                    ("workspace", workspace_text(&revoked)),
                ]))
            })?;
        }
    }
    Ok(exit::SUCCESS)
}

/// As `--role` takes it.
fn role_text(token: &TokenInfo) -> String {
    token.role.as_str().to_ascii_lowercase()
}

fn workspace_text(token: &TokenInfo) -> String {
    token.workspace.clone().unwrap_or_else(|| "*".to_owned())
}

fn created_table(out: &Output, created: &CreatedToken) -> String {
    let token = &created.token;
    let mut text = finish(out.kv([
        ("name", token.name.clone()),
        ("role", role_text(token)),
        ("workspace", workspace_text(token)),
        ("secret", created.secret.expose().to_owned()),
    ]));
    text.push_str(
        "\nThe secret is shown only now: the gateway keeps its hash. Use it with --token or \
         OPENSHELL_TOKEN, or save it with `openshell gateway login`.\n",
    );
    text
}

fn tokens_table(out: &Output, tokens: &[TokenInfo]) -> String {
    let now = SystemTime::now();
    out.table(
        tokens,
        &[
            Column::new("NAME", |t: &TokenInfo| t.name.clone()),
            Column::new("ROLE", role_text),
            Column::new("WORKSPACE", workspace_text),
            Column::new("SOURCE", |t: &TokenInfo| t.source.clone()),
            Column::new("CREATED BY", |t: &TokenInfo| dash(t.created_by.as_deref())).wide(),
            Column::new("AGE", move |t: &TokenInfo| {
                age(t.created_at.as_deref(), now)
            }),
        ],
    )
}
