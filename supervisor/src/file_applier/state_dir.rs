//! The state directory on disk: generations of the active configuration, and the one symlink
//! that says which generation is active.
//!
//! ```text
//! STATE/active -> generations/gen-N   the only switch point, replaced by one rename
//! STATE/generations/gen-N/…           one complete configuration, never modified once published
//! ```
//!
//! The active configuration is several files (policy, settings, provider environment,
//! revisions) that only make sense together. Replacing them one at a time, each atomically,
//! still let a crash between two of them leave a mix: a new policy beside old revisions.
//! So a new configuration is written whole into a generation directory of its own, every file
//! and the directory synced, and only then does `active` move to it: a fresh symlink
//! `active.tmp` is renamed over `active`, which the kernel does atomically. Whoever opens
//! `STATE/active/…`, before, during or after a crash, finds one whole generation.
//!
//! A generation that `active` does not name is either the previous one, kept until the
//! on-apply hook accepted the new one so it can be switched back, or one a crash interrupted;
//! [`StateDir::prepare`] removes them at startup.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::warn;

use super::stage::StagedFile;

const ACTIVE: &str = "active";
const ACTIVE_TEMP: &str = "active.tmp";
const GENERATIONS: &str = "generations";
const GENERATION_PREFIX: &str = "gen-";
/// Temporary files of the layout before generations, which replaced files in `active/` one by
/// one: `.NAME.tmp-PID-RANDOM`.
const LEGACY_TEMP_MARKER: &str = ".tmp-";

/// A step of writing the state directory, as a [`WriteFault`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep<'a> {
    /// Creating a new generation's directory.
    CreateGeneration,
    /// Creating one file of the new generation.
    CreateFile(&'a str),
    /// Writing and syncing that file's content.
    FillFile(&'a str),
    /// Syncing the new generation's directory and the directory that holds it.
    SyncGeneration,
    /// Creating the `active.tmp` symlink that names the new generation.
    Link,
    /// Renaming `active.tmp` over `active`: the switch itself.
    Switch,
    /// Removing a generation that is no longer active.
    RemoveGeneration,
}

/// Called before every step of writing the state directory. An error fails that step as if
/// the file system had returned it; a panic stops the writer on the spot, as `kill -9` would.
/// For tests of how the supervisor copes with a full disk or a crash.
#[derive(Clone)]
pub struct WriteFault(Arc<dyn Fn(WriteStep<'_>) -> io::Result<()> + Send + Sync>);

impl WriteFault {
    pub fn new(fault: impl Fn(WriteStep<'_>) -> io::Result<()> + Send + Sync + 'static) -> Self {
        Self(Arc::new(fault))
    }
}

/// Test hook, read only by the supervisor binary: a duration (`200ms`) slept before every
/// step of writing the state directory. It widens the window in which a `kill -9` lands
/// between two steps (the fault-injection suite kills supervisors there on purpose) and makes
/// a supervisor slow to apply. Unset, nothing is slept and nothing changes.
pub const TEST_WRITE_DELAY_ENV: &str = "OPENSHELL_SUPERVISOR_TEST_WRITE_DELAY";

impl WriteFault {
    /// The fault [`TEST_WRITE_DELAY_ENV`] asks for, `None` when it is unset or empty.
    pub fn delay_from_env() -> Result<Option<Self>, String> {
        let Some(raw) = std::env::var_os(TEST_WRITE_DELAY_ENV) else {
            return Ok(None);
        };
        let raw = raw.to_string_lossy();
        if raw.trim().is_empty() {
            return Ok(None);
        }
        let delay = humantime::parse_duration(raw.trim()).map_err(|err| {
            format!("{TEST_WRITE_DELAY_ENV}={raw:?} is not a duration such as 200ms: {err}")
        })?;
        Ok(Some(Self::new(move |_| {
            std::thread::sleep(delay);
            Ok(())
        })))
    }
}

impl fmt::Debug for WriteFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WriteFault")
    }
}

/// Layout of a supervisor's state directory, and the only code that writes it.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    fault: Option<WriteFault>,
    /// A roll-back the disk refused, which left a generation the hook refused active; shared
    /// by the clones that write for one applier.
    roll_back_unfinished: Arc<Mutex<Option<Published>>>,
}

/// A generation that [`StateDir::publish`] made active, while the on-apply hook decides
/// whether it stays ([`StateDir::keep`]) or goes ([`StateDir::roll_back`]).
#[derive(Debug)]
#[must_use = "keep or roll back a published generation"]
pub struct Published {
    previous: Option<u64>,
    current: u64,
}

impl Published {
    /// The number of the generation made active.
    pub fn generation(&self) -> u64 {
        self.current
    }
}

/// One generation as read back from disk.
pub struct Generation {
    pub number: u64,
    files: BTreeMap<String, (Vec<u8>, u32)>,
}

impl Generation {
    pub fn file(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).map(|(bytes, _)| bytes.as_slice())
    }

    /// Permission bits of a file.
    pub fn mode(&self, name: &str) -> Option<u32> {
        self.files.get(name).map(|(_, mode)| *mode)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

impl fmt::Debug for Generation {
    /// Names only: the provider environment file holds credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generation")
            .field("number", &self.number)
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Drop for Generation {
    /// The provider environment file holds credentials; do not leave them in freed memory.
    fn drop(&mut self) {
        for (bytes, _) in self.files.values_mut() {
            bytes.iter_mut().for_each(|b| *b = 0);
            std::hint::black_box(bytes);
        }
    }
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            fault: None,
            roll_back_unfinished: Arc::new(Mutex::new(None)),
        }
    }

    /// Finishes a roll-back the disk refused earlier (see [`Self::roll_back`]); a no-op when
    /// there is none. Called before anything else is written: else the next roll-back would
    /// return to the refused files, and a quarantine would keep them as last-known-good.
    pub fn finish_unfinished_roll_back(&self) -> io::Result<()> {
        let unfinished = self
            .roll_back_unfinished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match unfinished {
            Some(published) => {
                warn!(
                    generation = published.current,
                    "restoring the configuration before one the on-apply hook refused, which \
                     the disk did not let be restored then"
                );
                self.roll_back(published)
            }
            None => Ok(()),
        }
    }

    pub fn with_fault(mut self, fault: Option<WriteFault>) -> Self {
        self.fault = fault;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `STATE/active`: the symlink to the active generation. A path through it, such as
    /// `STATE/active/policy.json`, names the same file of whichever generation is active.
    pub fn active_dir(&self) -> PathBuf {
        self.root.join(ACTIVE)
    }

    pub fn active_file(&self, name: &str) -> PathBuf {
        self.active_dir().join(name)
    }

    pub fn generations_dir(&self) -> PathBuf {
        self.root.join(GENERATIONS)
    }

    /// True when generation `number` is on disk.
    pub fn has_generation(&self, number: u64) -> bool {
        self.generation_path(number).is_dir()
    }

    fn generation_path(&self, number: u64) -> PathBuf {
        self.generations_dir().join(generation_name(number))
    }

    fn step(&self, step: WriteStep<'_>) -> io::Result<()> {
        match &self.fault {
            Some(fault) => (fault.0)(step),
            None => Ok(()),
        }
    }

    /// Brings the directory to a consistent state at startup and returns the number of the
    /// active generation: finishes the move from the layout before generations (a plain
    /// `active/` directory), starts an empty generation when there is none, and removes
    /// every generation `active` does not name, whole or interrupted, and a stale
    /// `active.tmp`.
    pub fn prepare(&self) -> io::Result<u64> {
        fs::create_dir_all(&self.root)?;
        fs::create_dir_all(self.generations_dir())?;
        let active = self.active_dir();
        let temp = self.root.join(ACTIVE_TEMP);
        match fs::symlink_metadata(&active) {
            // `active.tmp` beside `active` is a switch that never happened.
            Ok(meta) if meta.file_type().is_symlink() => remove_file_if_present(&temp)?,
            Ok(meta) if meta.is_dir() => self.migrate_legacy()?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is neither a directory nor a symlink", active.display()),
                ));
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => self.finish_migration()?,
            Err(err) => return Err(err),
        }
        let current = match self.current()? {
            Some(current) => current,
            None => {
                if fs::symlink_metadata(&active).is_ok() {
                    warn!(
                        link = %active.display(),
                        "the active configuration generation is missing; starting from an empty one"
                    );
                }
                let published = self.publish(&[])?;
                published.current
            }
        };
        self.remove_other_generations(current)?;
        Ok(current)
    }

    /// Turns a plain `active/` directory (the layout before generations) into the first
    /// generation. `active.tmp` is made durable before the directory moves, so a crash
    /// between the two renames is finished by [`Self::finish_migration`].
    fn migrate_legacy(&self) -> io::Result<()> {
        let active = self.active_dir();
        for entry in fs::read_dir(&active)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.contains(LEGACY_TEMP_MARKER) {
                fs::remove_file(entry.path())?;
            }
        }
        let number = self.next_number()?;
        let temp = self.root.join(ACTIVE_TEMP);
        remove_file_if_present(&temp)?;
        symlink(link_target(number), &temp)?;
        sync_dir(&self.root)?;
        fs::rename(&active, self.generation_path(number))?;
        sync_dir(&self.generations_dir())?;
        sync_dir(&self.root)?;
        fs::rename(&temp, &active)?;
        sync_dir(&self.root)
    }

    /// Without `active`, an `active.tmp` naming an existing generation is a move from the
    /// old layout that stopped between its two renames: finish it. Any other `active.tmp` is
    /// stale.
    fn finish_migration(&self) -> io::Result<()> {
        let temp = self.root.join(ACTIVE_TEMP);
        match self.link_target(&temp)? {
            Some(number) if self.generation_path(number).is_dir() => {
                fs::rename(&temp, self.active_dir())?;
                sync_dir(&self.root)
            }
            _ => remove_file_if_present(&temp),
        }
    }

    /// The generation `link` names, `None` when there is no such link.
    fn link_target(&self, link: &Path) -> io::Result<Option<u64>> {
        let target = match fs::read_link(link) {
            Ok(target) => target,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) if err.kind() == io::ErrorKind::InvalidInput => {
                // Not a symlink at all.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is not a symlink", link.display()),
                ));
            }
            Err(err) => return Err(err),
        };
        let number = target
            .file_name()
            .and_then(|name| parse_generation(&name.to_string_lossy()));
        match number {
            Some(number)
                if target == Path::new(GENERATIONS).join(generation_name(number))
                    || target == self.generation_path(number) =>
            {
                Ok(Some(number))
            }
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} points to {}, which is not a configuration generation",
                    link.display(),
                    target.display()
                ),
            )),
        }
    }

    /// The active generation's number; `None` when there is none or it is missing.
    pub fn current(&self) -> io::Result<Option<u64>> {
        Ok(self
            .link_target(&self.active_dir())?
            .filter(|number| self.generation_path(*number).is_dir()))
    }

    /// Reads every file of the active generation. They are read from the generation's own
    /// directory, not one by one through `active`, so they belong together even if another
    /// generation becomes active meanwhile (then the read may fail with `NotFound`, as the
    /// one it started on is removed).
    pub fn read_active(&self) -> io::Result<Option<Generation>> {
        let Some(number) = self.current()? else {
            return Ok(None);
        };
        let dir = self.generation_path(number);
        let mut files = BTreeMap::new();
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let path = entry.path();
            let bytes = fs::read(&path)?;
            let mode = entry.metadata()?.permissions().mode() & 0o7777;
            files.insert(
                entry.file_name().to_string_lossy().into_owned(),
                (bytes, mode),
            );
        }
        Ok(Some(Generation { number, files }))
    }

    fn next_number(&self) -> io::Result<u64> {
        let mut highest = None;
        for entry in fs::read_dir(self.generations_dir())? {
            let name = entry?.file_name();
            if let Some(number) = parse_generation(&name.to_string_lossy()) {
                highest = highest.max(Some(number));
            }
        }
        let current = self.link_target(&self.active_dir()).unwrap_or(None);
        Ok(highest.max(current).map_or(0, |n| n.saturating_add(1)))
    }

    /// Writes `files` as a new generation and makes it the active one. The previous
    /// generation stays on disk until [`StateDir::keep`], or becomes active again with
    /// [`StateDir::roll_back`].
    ///
    /// On an error readers see no change: `active` still names the previous generation, and
    /// what was written of the new one is removed (what a crash leaves, `prepare` removes).
    pub fn publish(&self, files: &[StagedFile]) -> io::Result<Published> {
        let previous = self.current()?;
        let number = self.next_number()?;
        let dir = self.generation_path(number);
        let written = self
            .write_generation(&dir, files)
            .and_then(|()| self.switch_to(number));
        if let Err(err) = written {
            if dir.exists()
                && let Err(cleanup) = fs::remove_dir_all(&dir)
            {
                warn!(error = %cleanup, dir = %dir.display(), "removing an unfinished configuration generation failed; it is removed at the next start");
            }
            return Err(err);
        }
        Ok(Published {
            previous,
            current: number,
        })
    }

    fn write_generation(&self, dir: &Path, files: &[StagedFile]) -> io::Result<()> {
        self.step(WriteStep::CreateGeneration)?;
        fs::create_dir(dir)?;
        for file in files {
            self.step(WriteStep::CreateFile(file.name))?;
            let mut out = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(file.mode)
                .open(dir.join(file.name))?;
            // The umask may have narrowed the mode; widen it back to what was asked for. The
            // file had at most `mode` from its first byte on, so a credential file is never
            // readable by others, not even briefly.
            out.set_permissions(fs::Permissions::from_mode(file.mode))?;
            self.step(WriteStep::FillFile(file.name))?;
            out.write_all(&file.bytes)?;
            out.sync_all()?;
        }
        self.step(WriteStep::SyncGeneration)?;
        sync_dir(dir)?;
        sync_dir(&self.generations_dir())
    }

    /// Points `active` at generation `number` with one rename. Once the rename succeeded the
    /// switch happened for every reader, so a failing sync after it is logged, not returned:
    /// [`StateDir::keep`] syncs again before it removes the generation a lost rename would
    /// bring back.
    pub(crate) fn switch_to(&self, number: u64) -> io::Result<()> {
        let temp = self.root.join(ACTIVE_TEMP);
        remove_file_if_present(&temp)?;
        self.step(WriteStep::Link)?;
        symlink(link_target(number), &temp)?;
        let renamed = self
            .step(WriteStep::Switch)
            .and_then(|()| fs::rename(&temp, self.active_dir()));
        if let Err(err) = renamed {
            let _ = fs::remove_file(&temp);
            return Err(err);
        }
        if let Err(err) = sync_dir(&self.root) {
            warn!(error = %err, "syncing the state directory after switching the active configuration failed");
        }
        Ok(())
    }

    /// Keeps a published generation: every other one is removed.
    pub fn keep(&self, published: Published) -> io::Result<()> {
        sync_dir(&self.root)?;
        self.remove_other_generations(published.current)
    }

    /// Makes the generation that was active before `published` active again, and removes
    /// `published`. When the disk refuses, the roll-back is remembered, and
    /// [`Self::finish_unfinished_roll_back`] tries it again; the generation before is still on
    /// disk then, as only [`Self::keep`] and a finished roll-back remove generations.
    pub fn roll_back(&self, published: Published) -> io::Result<()> {
        let restored = match published.previous {
            Some(previous) => self.switch_to(previous).map(|()| previous),
            // Nothing was active before: an empty generation stands for that.
            None => self.publish(&[]).map(|empty| empty.current),
        };
        let finished = restored.and_then(|restored| self.remove_other_generations(restored));
        if finished.is_err() {
            *self
                .roll_back_unfinished
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(published);
        }
        finished
    }

    /// Removes every entry of `generations/` but generation `keep`. Goes on past a failure,
    /// so as much as possible is removed, and returns the first one.
    fn remove_other_generations(&self, keep: u64) -> io::Result<()> {
        let keep = generation_name(keep);
        let generations = self.generations_dir();
        let mut first_error = None;
        for entry in fs::read_dir(&generations)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy() == keep.as_str() {
                continue;
            }
            let removed = self.step(WriteStep::RemoveGeneration).and_then(|()| {
                if entry.file_type()?.is_dir() {
                    fs::remove_dir_all(entry.path())
                } else {
                    fs::remove_file(entry.path())
                }
            });
            if let Err(err) = removed {
                first_error.get_or_insert(err);
            }
        }
        if let Err(err) = sync_dir(&generations) {
            first_error.get_or_insert(err);
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn generation_name(number: u64) -> String {
    format!("{GENERATION_PREFIX}{number}")
}

fn parse_generation(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(GENERATION_PREFIX)?;
    // Only the names this code writes: no sign, no leading zeros.
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Relative, so the state directory can be moved or mounted elsewhere.
fn link_target(number: u64) -> PathBuf {
    Path::new(GENERATIONS).join(generation_name(number))
}

fn remove_file_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
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

    fn file(name: &'static str, bytes: &[u8], mode: u32) -> StagedFile {
        StagedFile {
            name,
            bytes: bytes.to_vec(),
            mode,
        }
    }

    fn prepared() -> (tempfile::TempDir, StateDir) {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        state.prepare().unwrap();
        (dir, state)
    }

    #[test]
    fn prepare_starts_with_an_empty_generation() {
        let (_dir, state) = prepared();
        assert_eq!(
            fs::read_link(state.active_dir()).unwrap(),
            Path::new("generations/gen-0")
        );
        assert!(entries(&state.active_dir()).is_empty());
        assert_eq!(entries(state.root()), ["active", "generations"]);
        // Preparing again changes nothing.
        assert_eq!(state.prepare().unwrap(), 0);
        assert_eq!(entries(&state.generations_dir()), ["gen-0"]);
    }

    #[test]
    fn publish_keep_replaces_the_generation_with_modes() {
        let (_dir, state) = prepared();
        let p = state
            .publish(&[file("a", b"a1", 0o644), file("b", b"b1", 0o600)])
            .unwrap();
        state.keep(p).unwrap();
        assert_eq!(fs::read(state.active_file("a")).unwrap(), b"a1");
        let mode = fs::metadata(state.active_file("b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(entries(&state.generations_dir()), ["gen-1"]);

        let p = state.publish(&[file("a", b"a2", 0o644)]).unwrap();
        state.keep(p).unwrap();
        assert_eq!(fs::read(state.active_file("a")).unwrap(), b"a2");
        assert!(
            !state.active_file("b").exists(),
            "a generation holds only its own files"
        );
        assert_eq!(entries(&state.generations_dir()), ["gen-2"]);
        assert_eq!(entries(state.root()), ["active", "generations"]);
        let read = state.read_active().unwrap().unwrap();
        assert_eq!(read.number, 2);
        assert_eq!(read.file("a"), Some(&b"a2"[..]));
        assert_eq!(read.names().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn roll_back_brings_back_the_previous_generation() {
        let (_dir, state) = prepared();
        let p = state.publish(&[file("a", b"a1", 0o644)]).unwrap();
        state.keep(p).unwrap();
        let p = state
            .publish(&[file("a", b"a2", 0o644), file("b", b"b2", 0o600)])
            .unwrap();
        assert_eq!(fs::read(state.active_file("a")).unwrap(), b"a2");
        state.roll_back(p).unwrap();
        assert_eq!(fs::read(state.active_file("a")).unwrap(), b"a1");
        assert!(!state.active_file("b").exists());
        assert_eq!(entries(&state.generations_dir()), ["gen-1"]);
    }

    #[test]
    fn a_failed_write_changes_nothing_and_cleans_up() {
        let (_dir, state) = prepared();
        let p = state.publish(&[file("a", b"a1", 0o644)]).unwrap();
        state.keep(p).unwrap();
        let failing = state.clone().with_fault(Some(WriteFault::new(|step| {
            if step == WriteStep::FillFile("b") {
                Err(io::Error::from_raw_os_error(nix::libc::ENOSPC))
            } else {
                Ok(())
            }
        })));
        let err = failing
            .publish(&[file("a", b"a2", 0o644), file("b", b"b2", 0o644)])
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(nix::libc::ENOSPC));
        assert_eq!(fs::read(state.active_file("a")).unwrap(), b"a1");
        assert_eq!(entries(&state.generations_dir()), ["gen-1"]);
        assert_eq!(entries(state.root()), ["active", "generations"]);

        // A failed switch, too.
        let failing = state.clone().with_fault(Some(WriteFault::new(|step| {
            if step == WriteStep::Switch {
                Err(io::Error::other("no"))
            } else {
                Ok(())
            }
        })));
        assert!(failing.publish(&[file("a", b"a3", 0o644)]).is_err());
        assert_eq!(fs::read(state.active_file("a")).unwrap(), b"a1");
        assert_eq!(entries(&state.generations_dir()), ["gen-1"]);
        assert_eq!(entries(state.root()), ["active", "generations"]);
    }

    #[test]
    fn prepare_removes_leftovers_and_keeps_numbering_ahead_of_them() {
        let (_dir, state) = prepared();
        let p = state.publish(&[file("a", b"a1", 0o644)]).unwrap();
        state.keep(p).unwrap();
        // What crashes leave: an unfinished generation, a stray file, a switch never made.
        fs::create_dir(state.generations_dir().join("gen-7")).unwrap();
        fs::write(state.generations_dir().join("gen-7/a"), b"half").unwrap();
        fs::write(state.generations_dir().join("junk"), b"x").unwrap();
        symlink("generations/gen-7", state.root().join(ACTIVE_TEMP)).unwrap();
        assert_eq!(state.next_number().unwrap(), 8);
        assert_eq!(state.prepare().unwrap(), 1);
        assert_eq!(entries(&state.generations_dir()), ["gen-1"]);
        assert_eq!(entries(state.root()), ["active", "generations"]);
        assert_eq!(fs::read(state.active_file("a")).unwrap(), b"a1");
    }

    #[test]
    fn prepare_moves_the_old_layout_into_a_generation() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let legacy = dir.path().join("active");
        fs::create_dir(&legacy).unwrap();
        fs::write(legacy.join("policy.json"), b"{}").unwrap();
        fs::write(legacy.join(".policy.json.tmp-1-00"), b"x").unwrap();
        assert_eq!(state.prepare().unwrap(), 0);
        assert_eq!(
            fs::read_link(state.active_dir()).unwrap(),
            Path::new("generations/gen-0")
        );
        assert_eq!(entries(&state.active_dir()), ["policy.json"]);
        assert_eq!(entries(state.root()), ["active", "generations"]);
    }

    #[test]
    fn prepare_finishes_a_move_that_stopped_between_its_renames() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        fs::create_dir_all(state.generations_dir().join("gen-0")).unwrap();
        fs::write(state.generations_dir().join("gen-0/policy.json"), b"{}").unwrap();
        symlink("generations/gen-0", dir.path().join(ACTIVE_TEMP)).unwrap();
        assert_eq!(state.prepare().unwrap(), 0);
        assert_eq!(fs::read(state.active_file("policy.json")).unwrap(), b"{}");
        assert_eq!(entries(state.root()), ["active", "generations"]);
    }

    #[test]
    fn a_dangling_active_link_starts_over_empty() {
        let (_dir, state) = prepared();
        fs::remove_dir(state.generations_dir().join("gen-0")).unwrap();
        assert_eq!(state.prepare().unwrap(), 1);
        assert!(entries(&state.active_dir()).is_empty());
    }

    #[test]
    fn a_foreign_active_link_is_an_error_not_a_guess() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        symlink("/etc", dir.path().join(ACTIVE)).unwrap();
        let err = state.prepare().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    #[test]
    fn generation_names() {
        assert_eq!(parse_generation("gen-0"), Some(0));
        assert_eq!(parse_generation("gen-42"), Some(42));
        for bad in [
            "gen-",
            "gen-01",
            "gen-+1",
            "gen--1",
            "gen-1x",
            "gen-1.tmp",
            "x-1",
        ] {
            assert_eq!(parse_generation(bad), None, "{bad}");
        }
    }
}
