use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use openshell_proto::sandbox::v1 as sb;
use serde_json::Value;

use super::stage::{
    PROVIDER_ENV_FILE, QUARANTINE_FILE, REVISIONS_FILE, SANDBOX_CONFIG_FILE, SETTINGS_FILE,
};
use super::state_dir::WriteStep;
use super::*;
use crate::applier::ApplyStage;
use crate::desired::tests::{sample, set_message, set_policy, version_9_policy};
use crate::desired::{FAILURE_MODE_KEY, env_revision};

const CREDENTIAL: &str = "ghp_secretvalue42";

fn applier(dir: &std::path::Path, hook: Option<&str>) -> FileApplier {
    let mut config = FileApplierConfig::new(dir, "sb-1");
    config.on_apply = hook.map(str::to_string);
    config.hook_timeout = Duration::from_secs(10);
    FileApplier::new(config).unwrap()
}

fn read_json(applier: &FileApplier, name: &str) -> Value {
    serde_json::from_slice(&fs::read(applier.state_dir().active_file(name)).unwrap()).unwrap()
}

fn string_setting(value: &str) -> sb::EffectiveSetting {
    sb::EffectiveSetting {
        value: Some(sb::SettingValue {
            value: Some(sb::setting_value::Value::StringValue(value.into())),
        }),
        scope: sb::SettingScope::Sandbox as i32,
    }
}

fn with_failure_mode(mut d: DesiredConfig, mode: &str) -> DesiredConfig {
    d.sandbox_config
        .settings
        .insert(FAILURE_MODE_KEY.into(), string_setting(mode));
    d
}

/// Changes the credential's value, as a provider rotation does.
fn rotate(d: &mut DesiredConfig, value: &str) {
    d.provider_env
        .environment
        .insert("GITHUB_TOKEN".into(), value.into());
}

#[tokio::test]
async fn apply_writes_every_file_with_modes() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    let report = a.apply(&sample(1, "e1")).await.unwrap();
    assert!(report.first_activation);
    assert_eq!(report.revisions.policy_revision, 1);

    let env_path = a.state_dir().active_file(PROVIDER_ENV_FILE);
    let mode = fs::metadata(&env_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let env = read_json(&a, PROVIDER_ENV_FILE);
    assert_eq!(env["values"]["GITHUB_TOKEN"]["value"], CREDENTIAL);
    assert_eq!(env["provider_env_revision"], "e1");

    let policy: Value = read_json(&a, POLICY_FILE);
    assert_eq!(policy["version"], 1);
    let revisions = read_json(&a, REVISIONS_FILE);
    assert_eq!(revisions["policy_revision"], 1);
    assert_eq!(revisions["sandbox_id"], "sb-1");
    assert!(read_json(&a, SETTINGS_FILE)["settings"].is_object());
    assert!(!a.state_dir().active_file(QUARANTINE_FILE).exists());

    let second = a.apply(&sample(2, "e1")).await.unwrap();
    assert!(!second.first_activation);
    assert_eq!(read_json(&a, REVISIONS_FILE)["policy_revision"], 2);
}

#[tokio::test]
async fn hook_sees_new_files_and_env() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(
        dir.path(),
        Some(
            "test \"$OPENSHELL_SANDBOX_ID\" = sb-1 && test -f \"$OPENSHELL_POLICY_FILE\" && \
             grep -q '\"policy_revision\": 1' \"$OPENSHELL_STATE_DIR/active/revisions.json\"",
        ),
    );
    a.apply(&sample(1, "e1")).await.unwrap();
}

#[tokio::test]
async fn hook_failure_rolls_back_to_previous_files() {
    let dir = tempfile::tempdir().unwrap();
    // Accepts revision 1, refuses anything else.
    let a = applier(
        dir.path(),
        Some(
            "grep -q '\"policy_revision\": 1,' \"$OPENSHELL_STATE_DIR/active/revisions.json\" \
             || { echo refused by hook >&2; exit 4; }",
        ),
    );
    a.apply(&sample(1, "e1")).await.unwrap();
    let before_env = fs::read(a.state_dir().active_file(PROVIDER_ENV_FILE)).unwrap();
    let before_rev = fs::read(a.state_dir().active_file(REVISIONS_FILE)).unwrap();

    let mut next = sample(2, "e2");
    rotate(&mut next, "ghp_othersecret77");
    let err = a.apply(&next).await.unwrap_err();
    assert_eq!(err.stage, ApplyStage::Hook);
    assert!(
        err.reason.starts_with("on-apply hook exited with status 4"),
        "{}",
        err.reason
    );
    assert!(err.reason.contains("refused by hook"), "{}", err.reason);
    assert!(!err.failed_closed);

    assert_eq!(
        fs::read(a.state_dir().active_file(PROVIDER_ENV_FILE)).unwrap(),
        before_env
    );
    assert_eq!(
        fs::read(a.state_dir().active_file(REVISIONS_FILE)).unwrap(),
        before_rev
    );
    let mode = fs::metadata(a.state_dir().active_file(PROVIDER_ENV_FILE))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "restored credential file keeps its mode");
    assert!(!a.state_dir().active_file(QUARANTINE_FILE).exists());
}

#[tokio::test]
async fn first_activation_failure_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), Some("exit 1"));
    let err = a.apply(&sample(1, "e1")).await.unwrap_err();
    assert_eq!(err.reason, "on-apply hook exited with status 1");
    let left: Vec<_> = fs::read_dir(a.state_dir().active_dir()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn hook_stderr_never_leaks_provider_values() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(
        dir.path(),
        Some("cat \"$OPENSHELL_STATE_DIR/active/provider-env.json\" >&2; exit 2"),
    );
    let err = a.apply(&sample(1, "e1")).await.unwrap_err();
    assert!(!err.reason.contains(CREDENTIAL), "{}", err.reason);
    assert!(!err.reason.contains("github.example"), "{}", err.reason);
    assert!(err.reason.len() <= crate::sanitize::MAX_REASON_BYTES);
}

#[tokio::test]
async fn fail_closed_writes_quarantine_and_success_lifts_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();

    let mut bad = with_failure_mode(sample(2, "e1"), "fail_closed");
    set_message(&mut bad, version_9_policy());
    let err = a.apply(&bad).await.unwrap_err();
    assert!(err.failed_closed);
    assert_eq!(err.stage, ApplyStage::Stage);
    let q = read_json(&a, QUARANTINE_FILE);
    assert_eq!(q["quarantined"], true);
    assert_eq!(q["network"], "deny_all");
    assert_eq!(q["attempted"]["policy_revision"], 2);
    // The last-known-good files are still there underneath the marker.
    assert_eq!(read_json(&a, REVISIONS_FILE)["policy_revision"], 1);

    a.apply(&sample(3, "e1")).await.unwrap();
    assert!(!a.state_dir().active_file(QUARANTINE_FILE).exists());
}

#[tokio::test]
async fn retain_last_valid_does_not_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    let mut bad = sample(2, "e1");
    set_message(&mut bad, version_9_policy());
    let err = a.apply(&bad).await.unwrap_err();
    assert!(!err.failed_closed);
    assert!(!a.state_dir().active_file(QUARANTINE_FILE).exists());
    assert_eq!(read_json(&a, REVISIONS_FILE)["policy_revision"], 1);
}

#[tokio::test]
async fn reload_notice_after_each_activation_with_setting_override() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    // A receiver created now (the workload starting) has seen the first activation.
    let mut rx = a.subscribe();
    assert!(!rx.has_changed().unwrap());

    a.apply(&sample(2, "e1")).await.unwrap();
    assert!(rx.has_changed().unwrap());
    assert_eq!(rx.borrow_and_update().signal, ReloadSignal::Hup);

    let mut d = sample(3, "e1");
    d.sandbox_config
        .settings
        .insert(RELOAD_SIGNAL_KEY.into(), string_setting("SIGUSR2"));
    a.apply(&d).await.unwrap();
    assert_eq!(rx.borrow_and_update().signal, ReloadSignal::Usr2);
}

/// The four files of a configuration, in the order they are compared.
const CONFIG_FILES: [&str; 4] = [
    POLICY_FILE,
    SETTINGS_FILE,
    PROVIDER_ENV_FILE,
    REVISIONS_FILE,
];

/// What identifies a configuration in each of its files: the policy's bytes, the settings'
/// global revision, the provider environment's revision, and the policy revision that
/// `revisions.json` names. `None` for a file that is missing or unreadable.
type Signature = [Option<String>; 4];

fn signature(read: impl Fn(&str) -> Option<Vec<u8>>) -> Signature {
    let json =
        |name: &str| read(name).and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    [
        read(POLICY_FILE).map(|b| String::from_utf8_lossy(&b).into_owned()),
        json(SETTINGS_FILE).map(|v| v["revisions"]["global"].to_string()),
        json(PROVIDER_ENV_FILE).map(|v| v["provider_env_revision"].to_string()),
        json(REVISIONS_FILE).map(|v| v["policy_revision"].to_string()),
    ]
}

fn expected_signature(d: &DesiredConfig) -> Signature {
    let message = d.policy().unwrap();
    let policy = openshell_core::SandboxPolicy::try_from(message).unwrap();
    [
        Some(format!("{}\n", policy.canonical_json())),
        Some(d.sandbox_config.global_settings_revision.to_string()),
        Some(format!("{:?}", env_revision(&d.provider_env))),
        Some(d.sandbox_config.policy_revision.to_string()),
    ]
}

/// Which configuration `seen` is, whole; panics on a mix, naming `what` and the files.
fn whole(seen: &Signature, old: &Signature, new: &Signature, what: &str) -> &'static str {
    if seen == old {
        "old"
    } else if seen == new {
        "new"
    } else {
        let files: Vec<String> = CONFIG_FILES
            .iter()
            .zip(seen)
            .map(|(name, value)| {
                let side = match value {
                    None => "missing",
                    v if v == &old[CONFIG_FILES.iter().position(|n| n == name).unwrap()] => "old",
                    _ => "new",
                };
                format!("{name}: {side}")
            })
            .collect();
        panic!("{what}: a mix of two configurations: {files:?}")
    }
}

/// What the workload reads: each file by its documented path, through `active`.
fn workload_view(root: &Path) -> Signature {
    signature(|name| fs::read(root.join("active").join(name)).ok())
}

/// What the supervisor reads back at restart: the active generation, whole.
fn restart_view(applier: &FileApplier) -> Signature {
    let generation = applier.state_dir().read_active().unwrap().unwrap();
    signature(|name| generation.file(name).map(<[u8]>::to_vec))
}

/// Counts the state directory's write steps and panics at step `at`: a crash, since nothing
/// after the panic runs (no cleanup, no rollback).
struct Crash {
    steps: AtomicUsize,
    at: AtomicUsize,
}

impl Crash {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            steps: AtomicUsize::new(0),
            at: AtomicUsize::new(usize::MAX),
        })
    }
}

fn crashing_applier(dir: &Path, crash: &Arc<Crash>, hook: Option<&str>) -> FileApplier {
    let mut config = FileApplierConfig::new(dir, "sb-1");
    config.on_apply = hook.map(str::to_string);
    config.hook_timeout = Duration::from_secs(10);
    let crash = crash.clone();
    config.write_fault = Some(WriteFault::new(move |step: WriteStep<'_>| {
        let n = crash.steps.fetch_add(1, Ordering::SeqCst);
        if n == crash.at.load(Ordering::SeqCst) {
            panic!("simulated crash (kill -9) before {step:?}");
        }
        Ok(())
    }));
    FileApplier::new(config).unwrap()
}

/// Two configurations that differ in every file.
fn old_and_new() -> (DesiredConfig, DesiredConfig) {
    let mut old = sample(11, "e9");
    old.sandbox_config.global_settings_revision = 9;
    let other =
        openshell_core::parse_and_validate(include_str!("../../../examples/policy.yaml")).unwrap();
    let mut new = sample(12, "e10");
    set_policy(&mut new, &other);
    new.sandbox_config.global_settings_revision = 10;
    rotate(&mut new, "ghp_rotatedvalue43");
    (old, new)
}

/// Activates `old`, then `new` with a crash before write step `k` of the second activation
/// (no crash when `k` is past its last step). Returns what was seen before and after the
/// restart, and how many steps the second activation had.
async fn crash_during_second_activation(
    k: usize,
    hook: Option<&str>,
) -> (&'static str, &'static str, usize) {
    let (old, new) = old_and_new();
    let (old_sig, new_sig) = (expected_signature(&old), expected_signature(&new));
    let dir = tempfile::tempdir().unwrap();
    let crash = Crash::new();
    let applier = crashing_applier(dir.path(), &crash, hook);
    applier.apply(&old).await.unwrap();
    let start = crash.steps.load(Ordering::SeqCst);
    crash.at.store(start.saturating_add(k), Ordering::SeqCst);
    // Crashed or not, the outcome is read from disk.
    let _ = applier.apply(&new).await;
    let steps = crash.steps.load(Ordering::SeqCst) - start;
    drop(applier);
    let root = fs::canonicalize(dir.path()).unwrap();
    let before = whole(
        &workload_view(&root),
        &old_sig,
        &new_sig,
        &format!("step {k}, workload paths at the crash"),
    );

    // The restart: a new applier on the same directory.
    let restarted = applier_at(dir.path(), None);
    let after = whole(
        &restart_view(&restarted),
        &old_sig,
        &new_sig,
        &format!("step {k}, read back at restart"),
    );
    let workload_after = whole(
        &workload_view(&root),
        &old_sig,
        &new_sig,
        &format!("step {k}, workload paths after restart"),
    );
    assert_eq!(after, workload_after, "step {k}");
    // A new generation the crash left active before its apply log line (the hook had not
    // accepted it yet, or it was not recorded) is rolled back at the restart; nothing else
    // changes.
    assert!(
        before == after || (before == "new" && after == "old"),
        "step {k}: the restart changed the configuration from {before} to {after}"
    );
    let generations: Vec<_> = fs::read_dir(root.join("generations")).unwrap().collect();
    assert_eq!(generations.len(), 1, "step {k}: leftovers {generations:?}");
    assert!(
        !root.join("active.tmp").exists(),
        "step {k}: stale active.tmp"
    );
    // And the restarted supervisor goes on applying.
    restarted.apply(&new).await.unwrap();
    assert_eq!(restart_view(&restarted), new_sig, "step {k}");
    (before, after, steps)
}

fn applier_at(dir: &Path, hook: Option<&str>) -> FileApplier {
    applier(dir, hook)
}

/// Defect: the files were replaced one at a time, so a kill -9 between two of them left a
/// new policy beside old revisions. Every step of an activation is a possible crash point.
#[tokio::test]
async fn a_crash_at_any_step_of_an_activation_leaves_old_or_new_never_a_mix() {
    for hook in [None, Some("exit 0")] {
        let (_, _, steps) = crash_during_second_activation(usize::MAX, hook).await;
        assert!(steps >= 2 * CONFIG_FILES.len(), "{steps} write steps");
        let mut seen = Vec::new();
        for k in 0..=steps {
            let (before, _, _) = crash_during_second_activation(k, hook).await;
            seen.push(before);
        }
        // From the old configuration to the new one at exactly one step: the switch.
        assert_eq!(seen.first(), Some(&"old"), "{seen:?}");
        assert_eq!(seen.last(), Some(&"new"), "{seen:?}");
        let switch = seen.iter().position(|s| *s == "new").unwrap();
        assert!(
            seen[switch..].iter().all(|s| *s == "new"),
            "hook {hook:?}: {seen:?}"
        );
    }
}

/// A hook that refuses makes the previous generation active again; a crash anywhere in that
/// leaves one whole configuration as well.
#[tokio::test]
async fn a_crash_while_rolling_back_leaves_old_or_new_never_a_mix() {
    let hook = Some(
        "grep -q '\"policy_revision\": 11,' \"$OPENSHELL_STATE_DIR/active/revisions.json\" || exit 3",
    );
    let (_, _, steps) = crash_during_second_activation(usize::MAX, hook).await;
    for k in 0..=steps {
        crash_during_second_activation(k, hook).await;
    }
}

#[tokio::test]
async fn restart_removes_a_leftover_partial_generation() {
    let (old, new) = old_and_new();
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&old).await.unwrap();
    drop(a);
    let root = fs::canonicalize(dir.path()).unwrap();
    // What a crash while writing a generation leaves: part of its files, maybe a link to it
    // that never replaced `active`.
    let partial = root.join("generations/gen-9");
    fs::create_dir(&partial).unwrap();
    fs::write(partial.join(POLICY_FILE), b"{\"version\":").unwrap();
    std::os::unix::fs::symlink("generations/gen-9", root.join("active.tmp")).unwrap();

    let restarted = applier(dir.path(), None);
    assert_eq!(restart_view(&restarted), expected_signature(&old));
    assert_eq!(workload_view(&root), expected_signature(&old));
    assert!(!partial.exists(), "the partial generation is removed");
    assert!(!root.join("active.tmp").exists());

    restarted.apply(&new).await.unwrap();
    assert_eq!(workload_view(&root), expected_signature(&new));
    let generation = restarted.state_dir().read_active().unwrap().unwrap();
    let names: Vec<String> = fs::read_dir(root.join("generations"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [format!("gen-{}", generation.number)]);
}

#[tokio::test]
async fn restart_keeps_a_state_dir_from_before_generations() {
    let (old, _) = old_and_new();
    let dir = tempfile::tempdir().unwrap();
    // The old layout: files straight in `active/`.
    let staged = super::stage::stage(&old, &mut PolicyMemo::default()).unwrap();
    let active = dir.path().join("active");
    fs::create_dir(&active).unwrap();
    for file in &staged.files {
        fs::write(active.join(file.name), &file.bytes).unwrap();
        fs::set_permissions(
            active.join(file.name),
            fs::Permissions::from_mode(file.mode),
        )
        .unwrap();
    }
    let a = applier(dir.path(), None);
    let root = fs::canonicalize(dir.path()).unwrap();
    assert!(
        fs::symlink_metadata(root.join("active"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(workload_view(&root), expected_signature(&old));
    assert_eq!(restart_view(&a), expected_signature(&old));
    let mode = fs::metadata(a.state_dir().active_file(PROVIDER_ENV_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn quarantine_is_a_generation_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    let mut bad = with_failure_mode(sample(2, "e1"), "fail_closed");
    set_message(&mut bad, version_9_policy());
    assert!(a.apply(&bad).await.unwrap_err().failed_closed);
    let generation = a.state_dir().read_active().unwrap().unwrap();
    let mut names: Vec<&str> = generation.names().collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            POLICY_FILE,
            PROVIDER_ENV_FILE,
            QUARANTINE_FILE,
            REVISIONS_FILE,
            SANDBOX_CONFIG_FILE,
            SETTINGS_FILE
        ]
    );
    assert_eq!(generation.mode(PROVIDER_ENV_FILE), Some(0o600));
    drop(generation);
    a.apply(&sample(3, "e1")).await.unwrap();
    assert!(!a.state_dir().active_file(QUARANTINE_FILE).exists());
}

/// Probe: with `fail_closed` and a state directory that cannot be written, the operation said
/// nothing of the quarantine that did not happen. The reason says so, the sandbox is not
/// reported as failed closed, and the failure is retried once the disk allows.
#[tokio::test]
async fn a_quarantine_that_cannot_be_written_is_reported_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let read_only = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut config = FileApplierConfig::new(dir.path(), "sb-1");
    let flag = read_only.clone();
    config.write_fault = Some(WriteFault::new(move |_step: WriteStep<'_>| {
        if flag.load(Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(30)); // EROFS
        }
        Ok(())
    }));
    let a = FileApplier::new(config).unwrap();
    a.apply(&sample(1, "e1")).await.unwrap();
    read_only.store(true, Ordering::SeqCst);
    let mut bad = with_failure_mode(sample(2, "e1"), "fail_closed");
    set_message(&mut bad, version_9_policy());
    let err = a.apply(&bad).await.unwrap_err();
    assert!(!err.failed_closed, "nothing was quarantined");
    assert!(
        err.reason.contains("could not be quarantined"),
        "{}",
        err.reason
    );
    assert!(
        err.reason.contains("Read-only file system"),
        "{}",
        err.reason
    );
    assert!(
        err.is_transient(),
        "retried until the quarantine can be written"
    );
    read_only.store(false, Ordering::SeqCst);
    let err = a.apply(&bad).await.unwrap_err();
    assert!(err.failed_closed);
    assert!(a.state_dir().active_file(QUARANTINE_FILE).exists());
}

/// Every generation that stays active has its line in the apply log, written before the apply
/// returns; a refused one (validation, hook) has none; a quarantine records the last-known-good
/// revisions it keeps, not the refused ones.
#[tokio::test]
async fn the_apply_log_records_exactly_the_configurations_that_became_active() {
    use super::apply_log::{self, ApplyLogOutcome};
    let dir = tempfile::tempdir().unwrap();
    // Refuses revision 3 only.
    let a = applier(
        dir.path(),
        Some("! grep -q '\"policy_revision\": 3,' \"$OPENSHELL_STATE_DIR/active/revisions.json\""),
    );
    a.apply(&sample(1, "e1")).await.unwrap();
    a.apply(&sample(2, "e2")).await.unwrap();
    a.apply(&sample(3, "e3")).await.unwrap_err();
    let mut invalid = sample(4, "e3");
    set_message(&mut invalid, version_9_policy());
    a.apply(&invalid).await.unwrap_err();
    let bad = with_failure_mode(invalid, "fail_closed");
    assert!(a.apply(&bad).await.unwrap_err().failed_closed);

    let log = apply_log::read(a.state_dir().root()).unwrap();
    let seen: Vec<_> = log
        .iter()
        .map(|e| {
            (
                e.outcome,
                e.policy_revision,
                e.provider_env_revision.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (ApplyLogOutcome::Activated, 1, "e1"),
            (ApplyLogOutcome::Activated, 2, "e2"),
            (ApplyLogOutcome::Quarantined, 2, "e2"),
        ]
    );
    assert_eq!(log[1].policy_hash, sample(2, "e2").revisions().policy_hash);
    let active = a.state_dir().current().unwrap().unwrap();
    assert_eq!(log.last().unwrap().generation, active);

    // A restart finds its generation recorded and adds nothing.
    drop(a);
    let again = applier(dir.path(), None);
    assert_eq!(apply_log::read(again.state_dir().root()).unwrap().len(), 3);
}

/// An activation the apply log cannot record is undone and fails as transient: the log never
/// misses a configuration that ran.
#[tokio::test]
async fn an_activation_the_apply_log_cannot_record_is_rolled_back() {
    use super::apply_log::{self, APPLY_LOG_FILE};
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    // A directory where the log file is expected makes every append fail, even as root.
    let log = a.state_dir().root().join(APPLY_LOG_FILE);
    fs::rename(&log, dir.path().join("saved-log")).unwrap();
    fs::create_dir(&log).unwrap();
    let err = a.apply(&sample(2, "e2")).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(err.stage, ApplyStage::Activate);
    assert!(
        err.reason
            .starts_with("recording the activation in the apply log failed"),
        "{}",
        err.reason
    );
    assert_eq!(read_json(&a, REVISIONS_FILE)["policy_revision"], 1);

    fs::remove_dir(&log).unwrap();
    fs::rename(dir.path().join("saved-log"), &log).unwrap();
    a.apply(&sample(2, "e2")).await.unwrap();
    let revisions: Vec<_> = apply_log::read(a.state_dir().root())
        .unwrap()
        .iter()
        .map(|e| e.policy_revision)
        .collect();
    assert_eq!(revisions, [1, 2]);
}

/// A state directory from before the apply log: its active configuration is recorded as
/// `recovered` at the first start, before anything is reported.
#[tokio::test]
async fn a_state_dir_from_before_the_apply_log_is_recorded_as_recovered() {
    use super::apply_log::{self, APPLY_LOG_FILE, ApplyLogOutcome};
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    a.apply(&sample(2, "e2")).await.unwrap();
    drop(a);
    fs::remove_file(dir.path().join(APPLY_LOG_FILE)).unwrap();

    let again = applier(dir.path(), None);
    let log = apply_log::read(again.state_dir().root()).unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].outcome, ApplyLogOutcome::Recovered);
    assert_eq!(log[0].policy_revision, 2);
    assert_eq!(log[0].provider_env_revision, "e2");
    assert_eq!(
        log[0].generation,
        again.state_dir().current().unwrap().unwrap()
    );
    assert_eq!(read_json(&again, REVISIONS_FILE)["policy_revision"], 2);
}

#[tokio::test]
async fn a_damaged_active_configuration_is_set_aside_at_start() {
    use super::apply_log;
    let damages: [(&str, &[u8]); 5] = [
        (PROVIDER_ENV_FILE, b"{\"provider_env_rev"),
        (SETTINGS_FILE, b""),
        (REVISIONS_FILE, b"\x00\xffgarbage"),
        (POLICY_FILE, b"{\"version\":1,\"other\":2}\n"),
        (POLICY_FILE, b"[]"),
    ];
    for (file, bytes) in damages {
        let dir = tempfile::tempdir().unwrap();
        let a = applier(dir.path(), None);
        a.apply(&sample(1, "e1")).await.unwrap();
        drop(a);
        fs::write(dir.path().join("active").join(file), bytes).unwrap();

        let again = applier(dir.path(), None);
        let left: Vec<_> = fs::read_dir(again.state_dir().active_dir())
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{file}: {left:?}");
        assert_eq!(
            apply_log::read(again.state_dir().root()).unwrap().len(),
            1,
            "{file}: nothing recorded for the damaged generation"
        );
        // A failing apply now quarantines with nothing damaged underneath.
        let mut bad = with_failure_mode(sample(2, "e1"), "fail_closed");
        set_message(&mut bad, version_9_policy());
        assert!(again.apply(&bad).await.unwrap_err().failed_closed);
        assert!(!again.state_dir().active_file(file).exists() || file == QUARANTINE_FILE);
        // The gateway's configuration replaces it.
        again.apply(&sample(3, "e1")).await.unwrap();
        assert_eq!(read_json(&again, REVISIONS_FILE)["policy_revision"], 3);
    }

    // A whole generation is kept as it is.
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    drop(a);
    let again = applier(dir.path(), None);
    assert_eq!(read_json(&again, REVISIONS_FILE)["policy_revision"], 1);
}

/// A generation made active for the on-apply hook to judge, and never recorded because the
/// supervisor stopped first, is not in effect after a restart: the last recorded one is.
#[tokio::test]
async fn an_activation_stopped_while_the_hook_judged_it_is_rolled_back_at_start() {
    use super::apply_log;
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    // What a kill during the hook leaves: generation 2 published, not kept, not recorded.
    let mut staged = stage::stage(&sample(2, "e2"), &mut stage::PolicyMemo::default()).unwrap();
    let published = a.state_dir().publish(&staged.files).unwrap();
    staged.files.clear();
    // Neither kept nor rolled back: the crash came first.
    let _unjudged = published;
    assert_eq!(read_json(&a, REVISIONS_FILE)["policy_revision"], 2);
    drop(a);

    let again = applier(dir.path(), None);
    assert_eq!(read_json(&again, REVISIONS_FILE)["policy_revision"], 1);
    let log = apply_log::read(again.state_dir().root()).unwrap();
    assert_eq!(log.len(), 1, "nothing recorded for the unjudged generation");
    assert_eq!(
        log[0].generation,
        again.state_dir().current().unwrap().unwrap()
    );

    // The very first activation stopped the same way leaves nothing in effect.
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    fs::write(dir.path().join(apply_log::APPLY_LOG_FILE), b"").unwrap();
    drop(a);
    let again = applier(dir.path(), None);
    assert!(!again.state_dir().active_file(REVISIONS_FILE).exists());

    // A state directory from before the apply log keeps its configuration.
    let dir = tempfile::tempdir().unwrap();
    let a = applier(dir.path(), None);
    a.apply(&sample(1, "e1")).await.unwrap();
    fs::remove_file(dir.path().join(apply_log::APPLY_LOG_FILE)).unwrap();
    drop(a);
    let again = applier(dir.path(), None);
    assert_eq!(read_json(&again, REVISIONS_FILE)["policy_revision"], 1);
}

#[tokio::test]
async fn a_new_applier_keeps_what_the_last_one_left_in_effect_as_last_known_good() {
    let dir = tempfile::tempdir().unwrap();
    assert!(applier(dir.path(), None).last_known_good().is_none());
    let desired = sample(4, "e1");
    applier(dir.path(), None).apply(&desired).await.unwrap();
    let restarted = applier(dir.path(), None);
    let kept = restarted.last_known_good().unwrap();
    assert_eq!(kept.sandbox_config, desired.sandbox_config);
    assert!(
        kept.provider_env.environment.is_empty(),
        "credentials come from the gateway again, not from this file"
    );
    // A damaged file is set aside with its generation: nothing is kept.
    let file = dir.path().join("active").join(SANDBOX_CONFIG_FILE);
    std::fs::write(&file, b"{not json").unwrap();
    assert!(applier(dir.path(), None).last_known_good().is_none());
}

/// The state directory turns read-only for the `n`th link of a generation (from 0) only.
fn read_only_at_link(n: usize) -> WriteFault {
    let links = AtomicUsize::new(0);
    WriteFault::new(move |step: WriteStep<'_>| {
        if matches!(step, WriteStep::Link) && links.fetch_add(1, Ordering::SeqCst) == n {
            return Err(std::io::Error::from_raw_os_error(30)); // EROFS
        }
        Ok(())
    })
}

/// Applies what the hook refuses while the disk refuses the roll-back too.
async fn refused_without_roll_back(a: &FileApplier, refused: &DesiredConfig) -> ApplyError {
    let err = a.apply(refused).await.unwrap_err();
    assert!(
        err.reason
            .contains("restoring the previous configuration failed"),
        "{}",
        err.reason
    );
    err
}

/// The hook refuses a configuration and the disk refuses the roll-back (read-only for a
/// moment): the refused files are left active. What is written next must start from the
/// last-known-good, not from them: here the quarantine that follows keeps revision 1.
#[tokio::test]
async fn a_roll_back_the_disk_refused_is_finished_before_anything_else_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = FileApplierConfig::new(dir.path(), "sb-1");
    config.on_apply = Some(
        "grep -q '\"policy_revision\": 1,' \"$OPENSHELL_STATE_DIR/active/revisions.json\" \
         || exit 4"
            .into(),
    );
    config.hook_timeout = Duration::from_secs(10);
    // Two activations link a generation each; the third link is the roll-back's.
    config.write_fault = Some(read_only_at_link(2));
    let a = FileApplier::new(config).unwrap();
    a.apply(&sample(1, "e1")).await.unwrap();

    let refused = with_failure_mode(sample(2, "e2"), "fail_closed");
    let err = refused_without_roll_back(&a, &refused).await;
    assert!(err.failed_closed, "{}", err.reason);
    assert!(a.state_dir().active_file(QUARANTINE_FILE).exists());
    assert_eq!(read_json(&a, REVISIONS_FILE)["policy_revision"], 1);
    let log = super::apply_log::read(a.state_dir().root()).unwrap();
    assert!(
        log.iter().all(|entry| entry.policy_revision == 1),
        "{log:?}"
    );
}

/// A state directory whose first activation the hook refused, and whose roll-back the disk
/// refused (read-only for a moment): the refused files are active, and there is no
/// last-known-good configuration to return to.
async fn refused_first_activation(dir: &Path, failure_mode: &str) -> (FileApplier, ApplyError) {
    let mut config = FileApplierConfig::new(dir, "sb-1");
    config.on_apply = Some("exit 4".into());
    config.hook_timeout = Duration::from_secs(10);
    // The activation links its generation; the second link is the roll-back's.
    config.write_fault = Some(read_only_at_link(1));
    let a = FileApplier::new(config).unwrap();
    let refused = with_failure_mode(sample(1, "e1"), failure_mode);
    let err = refused_without_roll_back(&a, &refused).await;
    (a, err)
}

/// The first activation has no recorded generation before it: the quarantine that follows
/// must hold no configuration at all, not the refused one.
#[tokio::test]
async fn a_refused_first_activation_whose_roll_back_failed_is_not_kept_by_the_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let (a, err) = refused_first_activation(dir.path(), "fail_closed").await;
    assert!(err.failed_closed, "{}", err.reason);
    let active = a.state_dir().read_active().unwrap().unwrap();
    let names: Vec<&str> = active.names().collect();
    assert_eq!(names, [QUARANTINE_FILE], "the refused files were kept");
    let log = super::apply_log::read(a.state_dir().root()).unwrap();
    assert!(
        log.iter().all(|entry| entry.policy_revision != 1),
        "{log:?}"
    );
}

/// The supervisor stops before anything else is written: the next start must not take the
/// refused files for a configuration from before the apply log, and record them.
#[tokio::test]
async fn a_refused_first_activation_whose_roll_back_failed_is_set_aside_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = refused_first_activation(dir.path(), "retain_last_valid").await;
    assert!(a.state_dir().active_file(REVISIONS_FILE).exists());
    drop(a);

    let b = FileApplier::new(FileApplierConfig::new(dir.path(), "sb-1")).unwrap();
    let active = b.state_dir().read_active().unwrap().unwrap();
    assert_eq!(
        active.names().count(),
        0,
        "the refused files are active again"
    );
    let log = super::apply_log::read(b.state_dir().root()).unwrap();
    assert!(log.is_empty(), "{log:?}");
    b.apply(&sample(2, "e2")).await.unwrap();
    assert_eq!(read_json(&b, REVISIONS_FILE)["policy_revision"], 2);
}
