//! The state directory on disk: atomic file replacement and the previous versions kept for
//! rollback (last-known-good).
//!
//! Every file is replaced by writing a temporary file in the same directory, syncing it,
//! renaming it over the target and syncing the directory, so a reader (or a crash) sees either
//! the old or the new content, never a torn mix.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::stage::StagedFile;

const ACTIVE_DIR: &str = "active";
const TEMP_MARKER: &str = ".tmp-";

/// Layout of a supervisor's state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory holding the active configuration files.
    pub fn active_dir(&self) -> PathBuf {
        self.root.join(ACTIVE_DIR)
    }

    pub fn active_file(&self, name: &str) -> PathBuf {
        self.active_dir().join(name)
    }

    /// Creates the directories and removes temporary files a crash may have left behind.
    pub fn prepare(&self) -> io::Result<()> {
        let active = self.active_dir();
        fs::create_dir_all(&active)?;
        for entry in fs::read_dir(&active)? {
            let entry = entry?;
            if is_temp_name(&entry.file_name().to_string_lossy()) {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
}

fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(TEMP_MARKER)
}

/// Replaces `path` with `bytes` atomically; the file has `mode` from its first byte on, so a
/// credential file is never readable by others, not even briefly.
pub fn atomic_write(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = parent(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}{TEMP_MARKER}{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let result = write_synced(&temp, bytes, mode).and_then(|()| fs::rename(&temp, path));
    if let Err(err) = result {
        let _ = fs::remove_file(&temp);
        return Err(err);
    }
    sync_dir(dir)
}

fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    // The umask may have narrowed the mode; widen it back to what was asked for.
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Removes `path` if present and makes the removal durable.
pub fn remove_durably(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(parent(path)?),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

fn parent(path: &Path) -> io::Result<&Path> {
    path.parent().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no parent directory", path.display()),
        )
    })
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What a file held before [`replace_all`] overwrote it.
struct PreviousFile {
    path: PathBuf,
    /// `None` when the file did not exist.
    content: Option<(Vec<u8>, u32)>,
}

impl Drop for PreviousFile {
    /// The previous provider env file holds credentials; do not leave them in freed memory.
    fn drop(&mut self) {
        if let Some((bytes, _)) = &mut self.content {
            bytes.iter_mut().for_each(|b| *b = 0);
            std::hint::black_box(bytes);
        }
    }
}

/// The versions [`replace_all`] replaced, in write order; [`Previous::restore`] puts them back.
pub struct Previous {
    files: Vec<PreviousFile>,
}

impl Previous {
    /// Restores every file to what it was, newest write first; files that did not exist are
    /// removed. Keeps going past a failing file so as much as possible is restored.
    pub fn restore(&self) -> io::Result<()> {
        let mut first_error = None;
        for file in self.files.iter().rev() {
            let result = match &file.content {
                Some((bytes, mode)) => atomic_write(&file.path, bytes, *mode),
                None => remove_durably(&file.path),
            };
            if let Err(err) = result {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Atomically replaces each staged file in `dir`, in order. If one write fails, the files
/// already written are restored before the error is returned.
pub fn replace_all(dir: &Path, files: &[StagedFile]) -> io::Result<Previous> {
    let mut previous = Previous { files: Vec::new() };
    for file in files {
        let path = dir.join(file.name);
        let written = read_previous(&path)
            .and_then(|content| atomic_write(&path, &file.bytes, file.mode).map(|()| content));
        match written {
            Ok(content) => previous.files.push(PreviousFile { path, content }),
            Err(err) => {
                let _ = previous.restore();
                return Err(err);
            }
        }
    }
    Ok(previous)
}

fn read_previous(path: &Path) -> io::Result<Option<(Vec<u8>, u32)>> {
    match fs::read(path) {
        Ok(bytes) => {
            let mode = fs::metadata(path)?.permissions().mode() & 0o7777;
            Ok(Some((bytes, mode)))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        atomic_write(&path, b"old", 0o644).unwrap();
        atomic_write(&path, b"new", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(entries(dir.path()), ["f.json"]);
    }

    #[test]
    fn failed_write_keeps_old_content_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        atomic_write(&path, b"old", 0o644).unwrap();
        // Renaming a file over a non-empty directory fails after the temp file was written.
        let blocker = dir.path().join("blocked");
        fs::create_dir(&blocker).unwrap();
        fs::write(blocker.join("x"), b"x").unwrap();
        assert!(atomic_write(&blocker, b"new", 0o644).is_err());
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(dir.path()), ["blocked", "f.json"]);
    }

    #[test]
    fn replace_all_then_restore_brings_back_previous_state() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), b"a1").unwrap();
        let staged = vec![
            StagedFile {
                name: "a",
                bytes: b"a2".to_vec(),
                mode: 0o644,
            },
            StagedFile {
                name: "b",
                bytes: b"b2".to_vec(),
                mode: 0o600,
            },
        ];
        let previous = replace_all(dir.path(), &staged).unwrap();
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"a2");
        assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"b2");
        previous.restore().unwrap();
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"a1");
        assert!(!dir.path().join("b").exists());
        assert_eq!(entries(dir.path()), ["a"]);
    }

    #[test]
    fn replace_all_failure_midway_restores_earlier_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), b"a1").unwrap();
        let blocker = dir.path().join("b");
        fs::create_dir(&blocker).unwrap();
        fs::write(blocker.join("x"), b"x").unwrap();
        let staged = vec![
            StagedFile {
                name: "a",
                bytes: b"a2".to_vec(),
                mode: 0o644,
            },
            StagedFile {
                name: "b",
                bytes: b"b2".to_vec(),
                mode: 0o644,
            },
        ];
        assert!(replace_all(dir.path(), &staged).is_err());
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"a1");
        assert_eq!(entries(dir.path()), ["a", "b"]);
    }

    #[test]
    fn prepare_removes_stale_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        fs::create_dir_all(state.active_dir()).unwrap();
        fs::write(state.active_file(".policy.json.tmp-1-00"), b"x").unwrap();
        fs::write(state.active_file("policy.json"), b"{}").unwrap();
        state.prepare().unwrap();
        assert_eq!(entries(&state.active_dir()), ["policy.json"]);
    }
}
