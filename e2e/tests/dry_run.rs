//! Validate before you write, end to end: `openshell policy set --dry-run`,
//! `settings set --dry-run` and `UpdateConfig{validate_only}` against a real
//! gateway on SQLite and PostgreSQL leave revisions, operations and settings
//! as they were and report the rule-level diff; a policy that omits static
//! sections keeps the sandbox's own, on a real write and in a dry run; and
//! `openshell policy validate` checks a file with no gateway at all.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use openshell_core::settings::Scope;
use openshell_e2e::cli::CliRun;
use openshell_e2e::{Api, Backend, TestGateway, create_sandbox, raw_setting};
use openshell_proto::v1 as pb;

const STATIC: &str = "filesystem_policy:
  read_only: [/usr, /etc]
  read_write: [/tmp]
process:
  run_as_user: sandbox
  run_as_group: sandbox
";

const NETWORK: &str = "network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: old.example.com, port: 443 }
";

/// Network only: `api` gains one endpoint and loses another, `pypi` is new.
const NETWORK_ONLY: &str = "version: 1
network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: new.example.com, port: 8443 }
  pypi:
    endpoints:
      - { host: pypi.org, port: 443 }
";

fn full() -> String {
    format!("version: 1\n{STATIC}{NETWORK}")
}

/// Runs the real `openshell` against `gateway`, never on a terminal.
async fn openshell(gateway: &str, args: &[&str]) -> CliRun {
    openshell_e2e::cli::openshell(gateway, args, None).await
}

fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Everything a dry run must leave alone, for one sandbox.
#[derive(Debug, PartialEq)]
struct Written {
    policy_revisions: u64,
    sandbox_policy_revision: u64,
    operations: u64,
    settings: openshell_gateway::store::ScopedSettings,
    global_policy_revision: u64,
}

async fn written(gw: &TestGateway, sandbox: &str) -> Written {
    let store = &gw.state().store;
    Written {
        policy_revisions: store.policy_revision_count(sandbox).await.unwrap(),
        sandbox_policy_revision: store.get_sandbox(sandbox).await.unwrap().policy_revision,
        operations: store.count_operations().await.unwrap(),
        settings: store.settings_at(Scope::Sandbox, sandbox).await.unwrap(),
        global_policy_revision: store.global_policy().await.unwrap().0,
    }
}

async fn cli_dry_run_writes_nothing_and_keeps_static_sections(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "web", &full()).await;
    let endpoint = gw.endpoint();
    let dir = gw.store.dir.path().join("files");
    std::fs::create_dir_all(&dir).unwrap();
    let network_only = write_file(&dir, "network.yaml", NETWORK_ONLY);
    let before = written(&gw, &id).await;

    // The readable diff, and the sections the file leaves out named on stderr.
    let run = openshell(
        &endpoint,
        &["policy", "set", "web", "-f", &network_only, "--dry-run"],
    )
    .await;
    run.expect(0);
    for line in [
        "dry run: nothing was written",
        "policy compared with: revision 1",
        "+ network policy pypi",
        "~ network policy api: + endpoint new.example.com:8443",
        "~ network policy api: - endpoint old.example.com:443",
    ] {
        assert!(
            run.stdout.lines().any(|l| l == line),
            "{line:?} missing:\n{}",
            run.stdout
        );
    }
    assert!(
        run.stderr
            .contains("kept from the current policy: filesystem_policy, process"),
        "{}",
        run.stderr
    );
    assert_eq!(written(&gw, &id).await, before, "a dry run wrote");

    // The same as JSON, for CI: no operation, the structure of the diff.
    let run = openshell(
        &endpoint,
        &[
            "policy",
            "set",
            "web",
            "-f",
            &network_only,
            "--dry-run",
            "-o",
            "json",
        ],
    )
    .await;
    let json = run.expect(0).json();
    assert!(json["operation"].is_null(), "{json}");
    assert_eq!(json["validate_only"], true);
    assert_eq!(
        json["kept_static_sections"],
        serde_json::json!(["filesystem_policy", "process"])
    );
    let diff = &json["policy_diff"];
    assert_eq!(diff["added_policies"], serde_json::json!(["pypi"]));
    assert_eq!(diff["removed_policies"], serde_json::json!([]));
    assert_eq!(
        diff["changed_policies"],
        serde_json::json!([{
            "name": "api",
            "added_endpoints": ["new.example.com:8443"],
            "removed_endpoints": ["old.example.com:443"],
            "changed_endpoints": [],
            "changed_fields": [],
        }])
    );
    assert_eq!(diff["changed_static_sections"], serde_json::json!([]));
    assert_eq!(diff["current_revision"], 1);

    // Settings are checked and previewed too, from what to what.
    let run = openshell(
        &endpoint,
        &[
            "settings",
            "set",
            "--sandbox",
            "web",
            "log_level=debug",
            "--dry-run",
            "-o",
            "json",
        ],
    )
    .await;
    let json = run.expect(0).json();
    assert_eq!(
        json["setting_changes"],
        serde_json::json!([{"key": "log_level", "old_value": null, "new_value": "debug"}])
    );
    let run = openshell(
        &endpoint,
        &[
            "settings",
            "set",
            "--sandbox",
            "web",
            "log_level=debug",
            "--dry-run",
        ],
    )
    .await;
    assert!(
        run.expect(0)
            .stdout
            .lines()
            .any(|l| l == "+ setting log_level: (unset) -> debug"),
        "{}",
        run.stdout
    );
    let run = openshell(
        &endpoint,
        &[
            "settings",
            "set",
            "--sandbox",
            "web",
            "log_levle=debug",
            "--dry-run",
        ],
    )
    .await;
    assert!(
        run.expect(1).stderr.contains("settings.log_levle"),
        "{}",
        run.stderr
    );

    // A file that changes a static section is refused, naming the section.
    let changed = write_file(
        &dir,
        "changed.yaml",
        &full().replace("run_as_user: sandbox", "run_as_user: '1500'"),
    );
    let run = openshell(
        &endpoint,
        &["policy", "set", "web", "-f", &changed, "--dry-run"],
    )
    .await;
    assert!(
        run.expect(1).stderr.contains("policy.process"),
        "{}",
        run.stderr
    );
    assert_eq!(written(&gw, &id).await, before, "a refused dry run wrote");

    // A dry run takes no idempotency key: the write with the same key commits.
    let run = openshell(
        &endpoint,
        &[
            "policy",
            "set",
            "web",
            "-f",
            &network_only,
            "--dry-run",
            "--idempotency-key",
            "k-1",
        ],
    )
    .await;
    run.expect(0);
    assert_eq!(written(&gw, &id).await, before, "a keyed dry run wrote");

    // The real write keeps the omitted sections and says so, in JSON as a field.
    let run = openshell(
        &endpoint,
        &[
            "policy",
            "set",
            "web",
            "-f",
            &network_only,
            "--commit-only",
            "--idempotency-key",
            "k-1",
            "-o",
            "json",
            "--yes",
        ],
    )
    .await;
    let json = run.expect(0).json();
    assert_eq!(json["idempotent_replay"], false, "the dry run took the key");
    assert_eq!(json["operation"]["policy_revision"], 2);
    assert_eq!(
        json["kept_static_sections"],
        serde_json::json!(["filesystem_policy", "process"])
    );
    let yaml = openshell(&endpoint, &["policy", "get", "web", "-o", "yaml"]).await;
    let stored = &yaml.expect(0).stdout;
    assert!(stored.contains("run_as_user: sandbox"), "{stored}");
    assert!(stored.contains("/etc"), "{stored}");
    assert!(stored.contains("pypi.org"), "{stored}");
    assert!(!stored.contains("old.example.com"), "{stored}");

    // The same file again changes nothing: with its kept sections it is the latest revision.
    let run = openshell(
        &endpoint,
        &[
            "policy",
            "set",
            "web",
            "-f",
            &network_only,
            "--commit-only",
            "--yes",
        ],
    )
    .await;
    assert!(
        run.expect(0)
            .stderr
            .contains("kept from the current policy: filesystem_policy, process"),
        "{}",
        run.stderr
    );
    assert_eq!(
        gw.state().store.policy_revision_count(&id).await.unwrap(),
        2,
        "an unchanged policy made a revision"
    );
    let run = openshell(
        &endpoint,
        &["policy", "set", "web", "-f", &network_only, "--dry-run"],
    )
    .await;
    assert!(
        run.expect(0).stdout.lines().any(|l| l == "no changes"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_dry_run_writes_nothing_and_keeps_static_sections_sqlite() {
    cli_dry_run_writes_nothing_and_keeps_static_sections(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_dry_run_writes_nothing_and_keeps_static_sections_postgres() {
    cli_dry_run_writes_nothing_and_keeps_static_sections(Backend::Postgres).await;
}

fn dry_run_request(target: pb::UpdateConfigRequest, policy: &str) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        policy_text: policy.into(),
        validate_only: true,
        ..target
    }
}

async fn grpc_validate_only_writes_nothing(backend: Backend) {
    let gw = TestGateway::start(backend).await;
    let mut api: Api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "api-dry", &full()).await;
    let before = written(&gw, &id).await;

    let response = api
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting("log_level", "debug")],
            request_id: "grpc-1".into(),
            mode: pb::UpdateMode::WaitForApply.into(),
            ..dry_run_request(openshell_e2e::to_sandbox(&id), NETWORK_ONLY)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.operation, None);
    assert!(!response.idempotent_replay);
    assert_eq!(
        response.kept_static_sections,
        ["filesystem_policy", "process"]
    );
    let diff = response.policy_diff.unwrap();
    assert_eq!(diff.added_policies, ["pypi"]);
    assert_eq!(diff.changed_policies.len(), 1);
    assert_eq!(
        diff.changed_policies[0].added_endpoints,
        ["new.example.com:8443"]
    );
    assert_eq!(diff.current_revision, 1);
    assert!(!diff.current_policy_hash.is_empty());
    assert_ne!(diff.new_policy_hash, diff.current_policy_hash);
    assert_eq!(response.setting_changes.len(), 1);
    assert_eq!(response.setting_changes[0].key, "log_level");
    assert_eq!(response.setting_changes[0].old_value, None);
    assert_eq!(written(&gw, &id).await, before, "validate_only wrote");

    // Refusals are the write's: a changed static section, with its path.
    let err = api
        .update_config(dry_run_request(
            openshell_e2e::to_sandbox(&id),
            &full().replace("read_write: [/tmp]", "read_write: [/tmp, /var]"),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("policy.filesystem_policy"),
        "{}",
        err.message()
    );
    assert_eq!(written(&gw, &id).await, before);

    // The key was not consumed: the real write with it is no replay, and keeps the sections.
    let committed = api
        .update_config(pb::UpdateConfigRequest {
            sandbox: String::from(&id),
            policy_text: NETWORK_ONLY.into(),
            settings: vec![raw_setting("log_level", "debug")],
            request_id: "grpc-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!committed.idempotent_replay);
    assert_eq!(committed.operation.unwrap().policy_revision, 2);
    assert_eq!(
        committed.kept_static_sections,
        ["filesystem_policy", "process"]
    );
    // A dry run of that same request now says the write would be a replay.
    let replay = api
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting("log_level", "debug")],
            request_id: "grpc-1".into(),
            ..dry_run_request(openshell_e2e::to_sandbox(&id), NETWORK_ONLY)
        })
        .await
        .unwrap()
        .into_inner();
    assert!(replay.idempotent_replay);
    assert_eq!(replay.operation, None);

    // The global policy: the first one adds everything, static sections included.
    let after = written(&gw, &id).await;
    let response = api
        .update_config(dry_run_request(openshell_e2e::to_global(), &full()))
        .await
        .unwrap()
        .into_inner();
    let diff = response.policy_diff.unwrap();
    assert_eq!(diff.current_revision, 0);
    assert_eq!(diff.added_policies, ["api"]);
    assert_eq!(
        diff.changed_static_sections,
        ["filesystem_policy", "process"]
    );
    assert!(response.kept_static_sections.is_empty());
    assert_eq!(written(&gw, &id).await, after, "a global dry run wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_validate_only_writes_nothing_sqlite() {
    grpc_validate_only_writes_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_validate_only_writes_nothing_postgres() {
    grpc_validate_only_writes_nothing(Backend::Postgres).await;
}

/// No gateway runs here: the address points at a port nothing listens on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_validate_works_offline_with_exit_codes_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = "http://127.0.0.1:9";
    let good = write_file(dir.path(), "good.yaml", &full());
    let bad = write_file(
        dir.path(),
        "bad.yaml",
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - { host: '*.com', port: 443 }\n      - { host: api.example.com, port: 70000 }\n",
    );

    let run = openshell(nowhere, &["policy", "validate", "-f", &good]).await;
    assert_eq!(run.expect(0).stdout, "valid\n");
    let json = openshell(nowhere, &["policy", "validate", "-f", &good, "-o", "json"]).await;
    assert_eq!(
        json.expect(0).json(),
        serde_json::json!({"valid": true, "violations": []})
    );

    // Every violation, one per line, as `field: message`.
    let run = openshell(nowhere, &["policy", "validate", "-f", &bad]).await;
    let lines: Vec<&str> = run.expect(1).stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(
        lines[0].starts_with("network_policies.api.endpoints[0].host: "),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("network_policies.api.endpoints[1].port: "),
        "{lines:?}"
    );
    let json = openshell(nowhere, &["policy", "validate", "-f", &bad, "-o", "json"]).await;
    let json = json.expect(1).json();
    assert_eq!(json["valid"], false);
    let fields: Vec<&str> = json["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "network_policies.api.endpoints[0].host",
            "network_policies.api.endpoints[1].port"
        ]
    );
    assert!(
        json["violations"][0]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );

    // Not a policy at all: a violation too, not a usage error.
    let empty = write_file(dir.path(), "empty.yaml", "");
    let run = openshell(nowhere, &["policy", "validate", "-f", &empty]).await;
    assert!(run.expect(1).stdout.contains("empty"), "{}", run.stdout);
    let run = openshell(
        nowhere,
        &["policy", "validate", "-f", "/nonexistent/p.yaml"],
    )
    .await;
    assert_ne!(run.code, 0);
}
