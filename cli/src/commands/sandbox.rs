//! `openshell sandbox …`: sandbox records and lifecycle.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use openshell_sdk::{
    Client, CreatedSandbox, Operation, OperationState, Sandbox, SandboxLifecycle, SandboxRef,
    SupervisorCredential,
};
use serde::Serialize;

use crate::cli::SandboxCommand;
use crate::commands::read_input;
use crate::context::Ctx;
use crate::exit::{self, UsageError};
use crate::output::{Output, finish, sanitize};
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
    credential_file: Option<(PathBuf, bool)>,
) -> anyhow::Result<u8> {
    let policy = policy.map(|p| read_input(&p, "policy")).transpose()?;
    // Open the file before creating: the gateway keeps only a hash, so a
    // credential that cannot be saved afterwards would be lost.
    let file = credential_file
        .as_ref()
        .map(|(path, force)| CredentialFile::open(path, *force))
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

/// A new file for the credential, made before the sandbox exists so that a
/// credential which could not be saved is never minted.
///
/// Without `--force` it is created at `path` itself, exclusively: an existing
/// file, or a symlink even to nothing, is refused, never overwritten or
/// followed. With `--force` it is created exclusively beside `path` and
/// renamed over it once written: a rename replaces a symlink rather than
/// writing through it, and a sandbox that fails to create leaves the old
/// file as it was.
struct CredentialFile {
    /// Where the credential ends up.
    path: PathBuf,
    /// What was created and is written: `path`, or with `--force` a sibling of it.
    created: PathBuf,
    file: File,
}

impl CredentialFile {
    fn open(path: &Path, force: bool) -> anyhow::Result<Self> {
        let created = if force {
            check_replaceable(path)?;
            temporary_sibling(path)?
        } else {
            path.to_owned()
        };
        let file = match create_private(&created) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && !force => {
                return Err(UsageError(format!(
                    "credential file {} already exists; use --force to replace it",
                    path.display()
                ))
                .into());
            }
            Err(err) => {
                return Err(anyhow::Error::new(err)
                    .context(format!("cannot create credential file {}", path.display())));
            }
        };
        Ok(Self {
            path: path.to_owned(),
            created,
            file,
        })
    }

    fn write(mut self, credential: &SupervisorCredential) -> anyhow::Result<()> {
        let written = self.fill(credential).and_then(|()| self.put_in_place());
        if written.is_err() {
            // Never leave part of a secret behind; what was created is ours to remove.
            let _ = std::fs::remove_file(&self.created);
        }
        written
    }

    fn fill(&mut self, credential: &SupervisorCredential) -> anyhow::Result<()> {
        self.file.write_all(credential.expose().as_bytes())?;
        self.file.write_all(b"\n")?;
        self.file.sync_all()?;
        Ok(())
    }

    fn put_in_place(&self) -> anyhow::Result<()> {
        if self.created != self.path {
            // Checked again: whatever is at the path may have changed while the gateway answered.
            check_replaceable(&self.path)?;
            std::fs::rename(&self.created, &self.path)
                .with_context(|| format!("cannot replace {}", self.path.display()))?;
        }
        Ok(())
    }

    fn discard(self) {
        drop(self.file);
        // Best effort: an empty file left behind holds no secret.
        let _ = std::fs::remove_file(&self.created);
    }
}

/// Creates `path` only if nothing, not even a dangling symlink, is there,
/// readable and writable by the owner alone.
fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // create_new already refuses a symlink; O_NOFOLLOW keeps refusing should that ever change.
        options
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits());
    }
    let file = options.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // On the open file (fchmod), so the mode is exactly 0600 whatever the umask.
        if let Err(err) = file.set_permissions(std::fs::Permissions::from_mode(0o600)) {
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(err);
        }
    }
    Ok(file)
}

/// `--force` replaces a regular file or a symlink, nothing else: a
/// directory or device at the path is surely not an old credential.
fn check_replaceable(path: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() || meta.file_type().is_symlink() => Ok(()),
        Ok(_) => Err(UsageError(format!(
            "credential file {} exists and is not a regular file or a symlink; refusing to replace it",
            path.display()
        ))
        .into()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(anyhow::Error::new(err)
            .context(format!("cannot inspect credential file {}", path.display()))),
    }
}

/// A fresh name in the same directory, so the final rename stays on one filesystem.
fn temporary_sibling(path: &Path) -> anyhow::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        UsageError(format!(
            "credential file {} does not name a file",
            path.display()
        ))
    })?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!(".{}-{nanos}.tmp", std::process::id()));
    Ok(path.with_file_name(temp))
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    fn usage_message(err: &anyhow::Error) -> String {
        err.downcast_ref::<UsageError>()
            .map(|u| u.0.clone())
            .unwrap_or_else(|| panic!("not a usage error: {err:#}"))
    }

    /// Names in `dir`, to see that nothing (such as a temporary file) was left behind.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_credential_file_is_created_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        let file = CredentialFile::open(&path, false).unwrap();
        file.write(&SupervisorCredential::new("cred-1")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "cred-1\n");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(names(dir.path()), ["cred"]);
    }

    #[test]
    fn a_symlink_to_another_file_is_refused_and_the_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        // Stands for a file of another user that the link points at.
        let target = dir.path().join("victim");
        std::fs::write(&target, "victim's data\n").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.path().join("cred");
        symlink(&target, &link).unwrap();

        let err = CredentialFile::open(&link, false).err().unwrap();
        let message = usage_message(&err);
        assert!(message.contains(&link.display().to_string()), "{message}");
        assert!(message.contains("--force"), "{message}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "victim's data\n");
        assert_eq!(mode(&target), 0o644);

        // --force replaces the link itself and still leaves the target alone.
        let file = CredentialFile::open(&link, true).unwrap();
        file.write(&SupervisorCredential::new("cred-1")).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_file()
        );
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "cred-1\n");
        assert_eq!(mode(&link), 0o600);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "victim's data\n");
        assert_eq!(mode(&target), 0o644);
        assert_eq!(names(dir.path()), ["cred", "victim"]);
    }

    #[test]
    fn a_dangling_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        let link = dir.path().join("cred");
        symlink(&target, &link).unwrap();

        let err = CredentialFile::open(&link, false).err().unwrap();
        assert!(usage_message(&err).contains("--force"));
        assert!(!target.exists(), "nothing was created through the link");

        let file = CredentialFile::open(&link, true).unwrap();
        file.write(&SupervisorCredential::new("cred-1")).unwrap();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "cred-1\n");
        assert!(!target.exists(), "nothing was created through the link");
    }

    #[test]
    fn an_existing_file_needs_force_and_is_then_replaced_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::write(&path, "old contents that are longer").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();

        let err = CredentialFile::open(&path, false).err().unwrap();
        let message = usage_message(&err);
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("use --force"), "{message}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "old contents that are longer"
        );

        let file = CredentialFile::open(&path, true).unwrap();
        file.write(&SupervisorCredential::new("cred-1")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "cred-1\n");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(names(dir.path()), ["cred"]);
    }

    #[test]
    fn force_never_replaces_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::create_dir(&path).unwrap();
        let err = CredentialFile::open(&path, true).err().unwrap();
        assert!(
            usage_message(&err).contains("not a regular file"),
            "{err:#}"
        );
        assert!(path.is_dir());
    }

    #[test]
    fn the_mode_is_0600_under_a_permissive_umask() {
        use nix::sys::stat::{Mode, umask};
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh");
        let replaced = dir.path().join("replaced");
        std::fs::write(&replaced, "old").unwrap();
        // Process-wide, so put back at once; other tests' files only come out wider meanwhile.
        let old = umask(Mode::empty());
        let opened = CredentialFile::open(&fresh, false)
            .and_then(|f| f.write(&SupervisorCredential::new("cred-1")))
            .and_then(|()| CredentialFile::open(&replaced, true))
            .and_then(|f| f.write(&SupervisorCredential::new("cred-2")));
        umask(old);
        opened.unwrap();
        assert_eq!(mode(&fresh), 0o600);
        assert_eq!(mode(&replaced), 0o600);
    }

    #[test]
    fn discarding_removes_what_was_created_and_keeps_an_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh");
        CredentialFile::open(&fresh, false).unwrap().discard();
        assert!(!fresh.exists());
        // A sandbox that failed to create must not cost the old credential.
        let kept = dir.path().join("kept");
        std::fs::write(&kept, "x").unwrap();
        CredentialFile::open(&kept, true).unwrap().discard();
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "x");
        assert_eq!(names(dir.path()), ["kept"]);
    }
}
