//! `openshell sandbox …`: sandbox records and lifecycle.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use openshell_sdk::{
    Client, CreatedSandbox, Operation, OperationState, Sandbox, SandboxLifecycle, SandboxRef,
    SupervisorCredential,
};
use serde::Serialize;

use crate::cli::SandboxCommand;
use crate::commands::read_input;
use crate::context::Ctx;
use crate::exit;
use crate::output::{Output, finish};
use crate::views;

pub async fn run(ctx: &Ctx, cmd: SandboxCommand) -> anyhow::Result<u8> {
    match cmd {
        SandboxCommand::Create {
            name,
            workspace,
            policy,
            credential_file,
        } => create(ctx, &name, workspace.as_deref(), policy, credential_file).await,
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
    Ok(text)
}

/// The printed form of a created sandbox: the credential itself, or where it was saved.
#[derive(Debug, Serialize)]
struct CreatedOutput<'a> {
    sandbox: &'a Sandbox,
    supervisor_credential: Option<&'a SupervisorCredential>,
    credential_file: Option<&'a Path>,
    operation: Option<&'a Operation>,
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
        finish(out.kv(rows))
    }
}

async fn create(
    ctx: &Ctx,
    name: &str,
    workspace: Option<&str>,
    policy: Option<String>,
    credential_file: Option<PathBuf>,
) -> anyhow::Result<u8> {
    let policy = policy.map(|p| read_input(&p, "policy")).transpose()?;
    // Open the file before creating: the gateway keeps only a hash, so a
    // credential that cannot be saved afterwards would be lost.
    let file = credential_file
        .as_deref()
        .map(CredentialFile::open)
        .transpose()?;
    let client = ctx.client().await?;
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
            match file.write(&created.supervisor_credential) {
                Ok(()) => Some(path),
                Err(err) => {
                    eprintln!(
                        "error: cannot write the supervisor credential to {}: {err:#}; printing it instead because the gateway keeps no copy",
                        path.display()
                    );
                    None
                }
            }
        }
        None => None,
    };
    print_created(ctx, &created, saved_to.as_deref())?;
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
    };
    ctx.out.print(&view, |o| view.table(o))
}

/// A file opened for the credential before the sandbox exists.
struct CredentialFile {
    path: PathBuf,
    file: File,
    existed: bool,
}

impl CredentialFile {
    fn open(path: &Path) -> anyhow::Result<Self> {
        let existed = path.exists();
        let mut options = OpenOptions::new();
        // No truncation yet: a failed create must not wipe an existing file.
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let file = options
            .open(path)
            .with_context(|| format!("cannot open credential file {}", path.display()))?;
        Ok(Self {
            path: path.to_owned(),
            file,
            existed,
        })
    }

    fn write(mut self, credential: &SupervisorCredential) -> anyhow::Result<()> {
        // An existing file keeps its old mode on open; narrow it before the secret lands.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            self.file
                .set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        self.file.set_len(0)?;
        self.file.write_all(credential.expose().as_bytes())?;
        self.file.write_all(b"\n")?;
        self.file.sync_all()?;
        Ok(())
    }

    fn discard(self) {
        if !self.existed {
            drop(self.file);
            // Best effort: leaving an empty file behind is harmless.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn credential_file_is_private_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::write(&path, "old contents that are longer").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let file = CredentialFile::open(&path).unwrap();
        file.write(&SupervisorCredential::new("cred-1")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "cred-1\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn discarding_removes_only_new_files() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh");
        CredentialFile::open(&fresh).unwrap().discard();
        assert!(!fresh.exists());
        let kept = dir.path().join("kept");
        std::fs::write(&kept, "x").unwrap();
        CredentialFile::open(&kept).unwrap().discard();
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "x");
    }
}
