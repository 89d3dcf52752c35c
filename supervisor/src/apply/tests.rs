use std::fs;
use std::os::unix::fs::PermissionsExt;

use openshell_proto::v1::{SettingValue as WireSettingValue, setting_value};
use serde_json::Value;

use super::stage::{PROVIDER_ENV_FILE, QUARANTINE_FILE, REVISIONS_FILE, SETTINGS_FILE};
use super::*;
use crate::applier::ApplyStage;
use crate::desired::tests::sample;

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

fn with_failure_mode(mut d: DesiredConfig, mode: &str) -> DesiredConfig {
    d.sandbox_config.settings[0].value = Some(WireSettingValue {
        kind: Some(setting_value::Kind::StringValue(mode.into())),
    });
    d
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
    next.provider_env.values[0].value = "ghp_othersecret77".into();
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
    bad.sandbox_config.policy_json = "version: 9".into();
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
    bad.sandbox_config.policy_json = "version: 9".into();
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
        .push(openshell_proto::v1::Setting {
            key: RELOAD_SIGNAL_KEY.into(),
            value: Some(WireSettingValue {
                kind: Some(setting_value::Kind::StringValue("SIGUSR2".into())),
            }),
            scope: openshell_proto::v1::SettingScope::Sandbox as i32,
        });
    a.apply(&d).await.unwrap();
    assert_eq!(rx.borrow_and_update().signal, ReloadSignal::Usr2);
}
