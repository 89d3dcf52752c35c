//! `openshell sandbox …`: sandbox records and lifecycle.

use std::path::{Path, PathBuf};

use openshell_sdk::{
    Client, CreatedSandbox, Operation, OperationState, Sandbox, SandboxLifecycle, SandboxRef,
    SupervisorCredential,
};
use serde::Serialize;

use crate::cli::SandboxCommand;
use crate::commands::read_input;
use crate::context::{Ctx, Target};
use crate::exit;
use crate::output::{Output, finish, sanitize};
use crate::secret_file::SecretFile;
use crate::views;

pub async fn run(ctx: &Ctx, cmd: SandboxCommand) -> anyhow::Result<u8> {
    match cmd {
        SandboxCommand::Create {
            name,
            workspace,
            policy,
            credential_file,
            force,
        } => {
            let credential_file = credential_file.map(|path| (path, force));
            create(ctx, &name, workspace.as_deref(), policy, credential_file).await
        }
        SandboxCommand::Get { sandbox } => {
            let sb = ctx
                .client()
                .await?
                .get_sandbox(&SandboxRef::from(sandbox))
                .await?;
            ctx.out.print(&sb, |o| views::sandbox(o, &sb))?;
            Ok(exit::SUCCESS)
        }
        SandboxCommand::List { workspace, all } => {
            let list = ctx
                .client()
                .await?
                .list_sandboxes(workspace.as_deref(), all)
                .await?;
            ctx.out.print(&list, |o| views::sandboxes(o, &list))?;
            Ok(exit::SUCCESS)
        }
        SandboxCommand::Delete { sandbox } => delete(ctx, SandboxRef::from(sandbox)).await,
        SandboxCommand::Stop { sandbox } => {
            lifecycle(ctx, SandboxRef::from(sandbox), SandboxLifecycle::Stopped).await
        }
        SandboxCommand::Logs(args) => super::logs::run(ctx, args).await,
        SandboxCommand::Start { sandbox } => {
            // PENDING restarts: the gateway marks it RUNNING once a supervisor bootstraps.
            lifecycle(ctx, SandboxRef::from(sandbox), SandboxLifecycle::Pending).await
        }
    }
}

async fn lifecycle(ctx: &Ctx, sandbox: SandboxRef, to: SandboxLifecycle) -> anyhow::Result<u8> {
    let sb = ctx
        .client()
        .await?
        .set_sandbox_lifecycle(&sandbox, to)
        .await?;
    ctx.out.print(&sb, |o| views::sandbox(o, &sb))?;
    Ok(exit::SUCCESS)
}

async fn delete(ctx: &Ctx, sandbox: SandboxRef) -> anyhow::Result<u8> {
    let client = ctx.client().await?;
    let action = format!("delete sandbox {sandbox}");
    let question = format!("Delete sandbox {sandbox}?");
    if let Some(code) = ctx
        .confirm(true, &action, &question, describe_delete(&client, &sandbox))
        .await?
    {
        return Ok(code);
    }
    let deleted = client.delete_sandbox(&sandbox).await?;
    ctx.out
        .print(&deleted, |o| views::sandbox(o, &deleted.sandbox))?;
    if deleted.cancelled_operations > 0 {
        ctx.note(format!(
            "{} pending operation(s) cancelled",
            deleted.cancelled_operations
        ));
    }
    Ok(exit::SUCCESS)
}

/// What a delete takes away, for the confirmation prompt.
async fn describe_delete(client: &Client, sandbox: &SandboxRef) -> anyhow::Result<String> {
    let sb = client.get_sandbox(sandbox).await?;
    let live = [OperationState::Pending, OperationState::Delivered];
    // One page is enough to say "some"; the prompt is not an inventory.
    let pending = client.list_operations(Some(sandbox), &live, 100).await?;
    let mut text = format!(
        "This deletes sandbox {}/{} ({}, {}, policy revision {}).",
        sb.workspace, sb.name, sb.id, sb.lifecycle, sb.policy_revision
    );
    if !pending.is_empty() {
        text.push_str(&format!(
            "\n{} pending operation(s) will end CANCELLED.",
            pending.len()
        ));
    }
    Ok(sanitize(&text).into_owned())
}

/// The printed form of a created sandbox: the credential itself, or where it was saved.
#[derive(Debug, Serialize)]
struct CreatedOutput<'a> {
    sandbox: &'a Sandbox,
    supervisor_credential: Option<&'a SupervisorCredential>,
    credential_file: Option<&'a Path>,
    operation: Option<&'a Operation>,
    /// How to start the sandbox's supervisor; never holds the credential.
    supervisor_command: String,
}

impl CreatedOutput<'_> {
    fn table(&self, out: &Output) -> String {
        let mut rows = views::sandbox_rows(self.sandbox);
        if let Some(credential) = self.supervisor_credential {
            rows.push(("supervisor credential", credential.expose().to_owned()));
        }
        if let Some(path) = self.credential_file {
            rows.push(("credential file", path.display().to_string()));
        }
        if let Some(op) = self.operation {
            rows.push(("policy operation", format!("{} ({})", op.id, op.state)));
        }
        let mut text = finish(out.kv(rows));
        text.push_str("\nStart its supervisor with:\n  ");
        text.push_str(&sanitize(&self.supervisor_command));
        text.push('\n');
        text
    }
}

/// The `openshell-supervisor` command line for a new sandbox: the gateway
/// this CLI reached, the sandbox by WORKSPACE/NAME, and the credential by
/// file (a placeholder when it was printed instead), then the workload.
fn supervisor_command(
    target: &Target,
    sandbox: &Sandbox,
    credential_file: Option<&Path>,
) -> String {
    let mut words = vec![
        "openshell-supervisor".to_owned(),
        "--gateway".to_owned(),
        shell_word(&target.url),
        "--sandbox".to_owned(),
        shell_word(&format!("{}/{}", sandbox.workspace, sandbox.name)),
        "--credential-file".to_owned(),
        credential_file.map_or_else(
            || "CREDENTIAL_FILE".to_owned(),
            |p| shell_word(&p.display().to_string()),
        ),
    ];
    if let Some(ca) = &target.ca_cert {
        words.push("--ca-file".to_owned());
        words.push(shell_word(&ca.display().to_string()));
    }
    words.extend(["--".to_owned(), "COMMAND".to_owned()]);
    words.join(" ")
}

/// `word` as one POSIX shell word: as it is when that is safe, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

async fn create(
    ctx: &Ctx,
    name: &str,
    workspace: Option<&str>,
    policy: Option<String>,
    credential_file: Option<(PathBuf, bool)>,
) -> anyhow::Result<u8> {
    let policy = policy.map(|p| read_input(&p, "policy")).transpose()?;
    // Open the file before creating: the gateway keeps only a hash, so a
    // credential that cannot be saved afterwards would be lost.
    let file = credential_file
        .as_ref()
        .map(|(path, force)| SecretFile::open(path, *force, "credential file", "--force"))
        .transpose()?;
    let target = ctx.target()?;
    let client = target
        .connect(
            crate::context::CONNECT_TIMEOUT,
            crate::context::REQUEST_TIMEOUT,
        )
        .await?;
    let created = match client
        .create_sandbox(name, workspace, policy.as_deref())
        .await
    {
        Ok(created) => created,
        Err(err) => {
            if let Some(file) = file {
                file.discard();
            }
            return Err(err.into());
        }
    };
    let saved_to = match file {
        Some(file) => {
            let path = file.path.clone();
            match file.write(created.supervisor_credential.expose()) {
                Ok(()) => Some(path),
                Err(err) => {
                    eprintln!(
                        "{}",
                        sanitize(&format!(
                            "error: cannot write the supervisor credential to {}: {err:#}; printing it instead because the gateway keeps no copy",
                            path.display()
                        ))
                    );
                    None
                }
            }
        }
        None => None,
    };
    print_created(ctx, &target, &created, saved_to.as_deref())?;
    match &saved_to {
        Some(path) => ctx.note(format!(
            "supervisor credential written to {} (mode 0600)",
            path.display()
        )),
        None => ctx.note(
            "the supervisor credential is shown only this once: store it now (or use --credential-file)",
        ),
    }
    Ok(exit::SUCCESS)
}

fn print_created(
    ctx: &Ctx,
    target: &Target,
    created: &CreatedSandbox,
    saved_to: Option<&Path>,
) -> anyhow::Result<()> {
    let view = CreatedOutput {
        sandbox: &created.sandbox,
        supervisor_credential: match saved_to {
            Some(_) => None,
            None => Some(&created.supervisor_credential),
        },
        credential_file: saved_to,
        operation: created.operation.as_ref(),
        supervisor_command: supervisor_command(target, &created.sandbox, saved_to),
    };
    ctx.out.print(&view, |o| view.table(o))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("/run/cred"), "/run/cred");
        assert_eq!(shell_word("http://gw:7070"), "http://gw:7070");
        assert_eq!(shell_word("my cred"), "'my cred'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("$(x)"), "'$(x)'");
        assert_eq!(shell_word(""), "''");
    }
}
