//! Files that hold a secret (a sandbox's supervisor credential, a saved
//! operator token): created readable by the owner alone and never written
//! through a symlink or over an existing file unless replacing was asked for.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

use crate::exit::UsageError;

/// A new file for a secret, opened before the secret exists so that one
/// which could not be saved is never minted.
///
/// Without `replace` it is created at `path` itself, exclusively: an existing
/// file, or a symlink even to nothing, is refused, never overwritten or
/// followed. With `replace` it is created exclusively beside `path` and
/// renamed over it once written: a rename replaces a symlink rather than
/// writing through it, and a secret that is never written leaves the old
/// file as it was.
pub struct SecretFile {
    /// Where the secret ends up.
    pub path: PathBuf,
    /// What was created and is written: `path`, or when replacing a sibling of it.
    created: PathBuf,
    file: File,
    /// How messages name the file, e.g. "credential file".
    what: &'static str,
}

impl SecretFile {
    /// `what` names the file in messages; `force_hint` is the flag that
    /// allows replacing, named when an existing file is refused.
    pub fn open(
        path: &Path,
        replace: bool,
        what: &'static str,
        force_hint: &str,
    ) -> anyhow::Result<Self> {
        let created = if replace {
            check_replaceable(path, what)?;
            temporary_sibling(path, what)?
        } else {
            path.to_owned()
        };
        let file = match create_private(&created) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && !replace => {
                return Err(UsageError(format!(
                    "{what} {} already exists; use {force_hint} to replace it",
                    path.display()
                ))
                .into());
            }
            Err(err) => {
                return Err(anyhow::Error::new(err)
                    .context(format!("cannot create {what} {}", path.display())));
            }
        };
        Ok(Self {
            path: path.to_owned(),
            created,
            file,
            what,
        })
    }

    /// Writes `secret` and a newline, then puts the file in place.
    pub fn write(mut self, secret: &str) -> anyhow::Result<()> {
        let written = self.fill(secret).and_then(|()| self.put_in_place());
        if written.is_err() {
            // Never leave part of a secret behind; what was created is ours to remove.
            let _ = std::fs::remove_file(&self.created);
        }
        written
    }

    fn fill(&mut self, secret: &str) -> anyhow::Result<()> {
        self.file.write_all(secret.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.file.sync_all()?;
        Ok(())
    }

    fn put_in_place(&self) -> anyhow::Result<()> {
        if self.created != self.path {
            // Checked again: whatever is at the path may have changed meanwhile.
            check_replaceable(&self.path, self.what)?;
            std::fs::rename(&self.created, &self.path)
                .with_context(|| format!("cannot replace {}", self.path.display()))?;
        }
        Ok(())
    }

    pub fn discard(self) {
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

/// Replacing takes a regular file or a symlink, nothing else: a directory
/// or device at the path is surely not an old secret.
fn check_replaceable(path: &Path, what: &str) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() || meta.file_type().is_symlink() => Ok(()),
        Ok(_) => Err(UsageError(format!(
            "{what} {} exists and is not a regular file or a symlink; refusing to replace it",
            path.display()
        ))
        .into()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => {
            Err(anyhow::Error::new(err)
                .context(format!("cannot inspect {what} {}", path.display())))
        }
    }
}

/// A fresh name in the same directory, so the final rename stays on one filesystem.
fn temporary_sibling(path: &Path, what: &str) -> anyhow::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| UsageError(format!("{what} {} does not name a file", path.display())))?;
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

    fn open(path: &Path, replace: bool) -> anyhow::Result<SecretFile> {
        SecretFile::open(path, replace, "credential file", "--force")
    }

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
        let file = open(&path, false).unwrap();
        file.write("cred-1").unwrap();
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

        let err = open(&link, false).err().unwrap();
        let message = usage_message(&err);
        assert!(message.contains(&link.display().to_string()), "{message}");
        assert!(message.contains("--force"), "{message}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "victim's data\n");
        assert_eq!(mode(&target), 0o644);

        // --force replaces the link itself and still leaves the target alone.
        let file = open(&link, true).unwrap();
        file.write("cred-1").unwrap();
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

        let err = open(&link, false).err().unwrap();
        assert!(usage_message(&err).contains("--force"));
        assert!(!target.exists(), "nothing was created through the link");

        let file = open(&link, true).unwrap();
        file.write("cred-1").unwrap();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "cred-1\n");
        assert!(!target.exists(), "nothing was created through the link");
    }

    #[test]
    fn an_existing_file_needs_force_and_is_then_replaced_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::write(&path, "old contents that are longer").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();

        let err = open(&path, false).err().unwrap();
        let message = usage_message(&err);
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("use --force"), "{message}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "old contents that are longer"
        );

        let file = open(&path, true).unwrap();
        file.write("cred-1").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "cred-1\n");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(names(dir.path()), ["cred"]);
    }

    #[test]
    fn force_never_replaces_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::create_dir(&path).unwrap();
        let err = open(&path, true).err().unwrap();
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
        let opened = open(&fresh, false)
            .and_then(|f| f.write("cred-1"))
            .and_then(|()| open(&replaced, true))
            .and_then(|f| f.write("cred-2"));
        umask(old);
        opened.unwrap();
        assert_eq!(mode(&fresh), 0o600);
        assert_eq!(mode(&replaced), 0o600);
    }

    #[test]
    fn discarding_removes_what_was_created_and_keeps_an_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh");
        open(&fresh, false).unwrap().discard();
        assert!(!fresh.exists());
        // A sandbox that failed to create must not cost the old credential.
        let kept = dir.path().join("kept");
        std::fs::write(&kept, "x").unwrap();
        open(&kept, true).unwrap().discard();
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "x");
        assert_eq!(names(dir.path()), ["kept"]);
    }
}
