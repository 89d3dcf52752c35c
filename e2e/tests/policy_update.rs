//! Incremental policy edits end to end: `openshell policy update` in upstream's argument
//! forms against a real gateway and a real supervisor, merged on the gateway; concurrent
//! edits that never lose one another; and `--expected-revision` (upstream's
//! `expected_resource_version`) refusing a write whose sandbox moved on, on SQLite and
//! PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use openshell_e2e::cli::openshell;
use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{Api, Backend, TestGateway, TestStore, create_sandbox};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use tonic::Code;

const POLICY: &str = include_str!("../../examples/policy.yaml");

async fn gateway(backend: Backend) -> TestGateway {
    TestGateway::start_on(TestStore::new(backend).await, DeliveryMode::Push).await
}

async fn latest_policy(gw: &TestGateway, sandbox_id: &str) -> (u64, String) {
    let latest = gw
        .state()
        .store
        .latest_policy(sandbox_id)
        .await
        .unwrap()
        .expect("the sandbox has a policy");
    (latest.revision, latest.policy_json)
}

fn add_rule(host: &str) -> pb::PolicyMergeOperation {
    let edit = openshell_core::policy::EditSpecs {
        add_endpoints: vec![format!("{host}:443")],
        ..Default::default()
    }
    .to_edits()
    .unwrap()
    .remove(0);
    pb::PolicyMergeOperation::from(&edit)
}

fn edit_request(sandbox_id: &str, edits: Vec<pb::PolicyMergeOperation>) -> pb::UpdateConfigRequest {
    pb::UpdateConfigRequest {
        sandbox: sandbox_id.into(),
        merge_operations: edits,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_update_edits_the_policy_on_the_gateway_and_the_supervisor_applies_it() {
    let gw = gateway(Backend::Sqlite).await;
    let endpoint = gw.endpoint();
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "edits", POLICY).await;
    let supervisor = spawn_supervisor(
        &endpoint,
        &id,
        &credential,
        &gw.store.dir.path().join("edits"),
        &[],
    );
    let cli = |args: Vec<&str>| {
        let endpoint = endpoint.clone();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            openshell(&endpoint, &args, None).await
        }
    };

    // Upstream's form, its `--timeout` in bare seconds included.
    let added = cli(vec![
        "policy",
        "update",
        "edits",
        "--add-endpoint",
        "registry.npmjs.org:443:read-only:rest:enforce",
        "--binary",
        "/usr/bin/npm",
        "--wait",
        "--timeout",
        "60",
        "-o",
        "json",
    ])
    .await;
    let result = added.expect(0).json();
    assert_eq!(result["operation"]["state"], "APPLIED", "{result}");
    assert_eq!(result["operation"]["policy_revision"], 2);
    // APPLIED is the supervisor's own report: the edited document is what it runs.
    let active = supervisor.active_file("policy.json").unwrap_or_default();
    assert!(
        active.contains("allow_registry_npmjs_org_443") && active.contains("api.github.com"),
        "{active}"
    );

    // An allow rule for an endpoint with an access preset: the merge expands the preset
    // first and says so. An endpoint some rule already allows is merged into that rule.
    let allowed = cli(vec![
        "policy",
        "update",
        "edits",
        "--add-allow",
        "registry.npmjs.org:443:post:/-/npm/**",
        "--add-endpoint",
        "pypi.org:443",
        "--binary",
        "/usr/bin/curl",
        "--commit-only",
    ])
    .await;
    allowed.expect(0);
    for note in [
        "merge: access preset read-only of endpoint registry.npmjs.org:443 was expanded",
        "merge: rule allow_pypi_org_443 was merged into rule pypi",
    ] {
        assert!(allowed.stderr.contains(note), "{note}\n{}", allowed.stderr);
    }
    let (revision, json) = latest_policy(&gw, &id).await;
    assert_eq!(revision, 3);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let npm = &doc["network_policies"]["allow_registry_npmjs_org_443"]["endpoints"][0];
    assert!(npm.get("access").is_none(), "{npm}");
    assert_eq!(npm["rules"].as_array().unwrap().len(), 4, "{npm}");
    let pypi_binaries = doc["network_policies"]["pypi"]["binaries"].to_string();
    assert!(pypi_binaries.contains("/usr/bin/curl"), "{pypi_binaries}");
    assert!(doc["network_policies"].get("allow_pypi_org_443").is_none());

    // Upstream's `policy list` and `policy get --rev N`.
    let listed = cli(vec!["policy", "list", "edits", "-o", "json"]).await;
    let revisions: Vec<u64> = listed
        .expect(0)
        .json()
        .as_array()
        .unwrap_or_else(|| panic!("{}", listed.stdout))
        .iter()
        .map(|r| r["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(revisions, [3, 2, 1]);
    let first = cli(vec!["policy", "get", "edits", "--rev", "1", "-o", "yaml"]).await;
    assert!(
        !first.expect(0).stdout.contains("npmjs"),
        "{}",
        first.stdout
    );
    let second = cli(vec!["policy", "get", "edits", "--rev", "2", "-o", "yaml"]).await;
    assert!(
        second.expect(0).stdout.contains("npmjs"),
        "{}",
        second.stdout
    );

    // A dry run reports the change and writes nothing.
    let preview = cli(vec![
        "policy",
        "update",
        "edits",
        "--remove-rule",
        "allow_registry_npmjs_org_443",
        "--dry-run",
        "-o",
        "json",
    ])
    .await;
    let preview = preview.expect(0).json();
    assert_eq!(preview["validate_only"], true, "{preview}");
    assert_eq!(
        preview["policy_diff"]["removed_policies"][0],
        "allow_registry_npmjs_org_443"
    );
    assert_eq!(latest_policy(&gw, &id).await.0, 3);

    // Malformed flags fail before anything is sent, naming the option.
    let malformed = cli(vec![
        "policy",
        "update",
        "edits",
        "--add-endpoint",
        "npmjs.org",
    ])
    .await;
    malformed.expect(1);
    assert!(
        malformed.stderr.contains("add_endpoints[0]")
            && malformed.stderr.contains("expected HOST:PORT"),
        "{}",
        malformed.stderr
    );
    // An edit the gateway cannot apply names the operation and changes nothing.
    let refused = cli(vec![
        "policy",
        "update",
        "edits",
        "--add-deny",
        "nowhere.example:443:GET:/x",
    ])
    .await;
    refused.expect(1);
    assert!(
        refused
            .stderr
            .contains("merge_operations[0].add_deny_rules")
            && refused.stderr.contains("no endpoint nowhere.example:443"),
        "{}",
        refused.stderr
    );
    // Removing what is not there is harmless: a no-op that says so.
    let gone = cli(vec![
        "policy",
        "update",
        "edits",
        "--remove-endpoint",
        "nowhere.example:443",
        "--commit-only",
        "-o",
        "json",
    ])
    .await;
    let gone_json = gone.expect(0).json();
    assert_eq!(gone_json["operation"]["no_op"], true, "{gone_json}");
    assert_eq!(
        gone_json["merge_notes"][0],
        "no endpoint nowhere.example:443 to remove; nothing changed"
    );
    assert_eq!(latest_policy(&gw, &id).await.0, 3);

    // `policy set --expected-revision`: a stale revision is refused and writes nothing.
    let file = gw.store.dir.path().join("p.yaml");
    std::fs::write(&file, POLICY).unwrap();
    let file = file.display().to_string();
    let stale = cli(vec![
        "policy",
        "set",
        "edits",
        "--policy",
        &file,
        "--expected-revision",
        "2",
        "--yes",
        "--commit-only",
    ])
    .await;
    stale.expect(1);
    assert!(
        stale.stderr.contains("at revision 3, not the expected 2")
            && stale.stderr.contains("read it again and retry"),
        "{}",
        stale.stderr
    );
    assert_eq!(latest_policy(&gw, &id).await.0, 3);
    cli(vec![
        "policy",
        "set",
        "edits",
        "--policy",
        &file,
        "--expected-revision",
        "3",
        "--yes",
        "--commit-only",
    ])
    .await
    .expect(0);
    assert_eq!(latest_policy(&gw, &id).await.0, 4);
}

/// Edits sent at once all land: each is applied to the revision before it inside the
/// write's transaction, never to a copy read outside it.
async fn concurrent_edits_never_lose_one_another(backend: Backend) {
    let gw = gateway(backend).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "busy", POLICY).await;
    let hosts: Vec<String> = (0..12).map(|i| format!("h{i}.example.com")).collect();
    let writes = hosts.iter().map(|host| {
        let mut api: Api = api.clone();
        let request = edit_request(&id, vec![add_rule(host)]);
        async move { api.update_config(request).await }
    });
    for answer in futures::future::join_all(writes).await {
        answer.unwrap();
    }
    let (revision, json) = latest_policy(&gw, &id).await;
    assert_eq!(revision, 1 + hosts.len() as u64);
    for host in &hosts {
        assert!(json.contains(host.as_str()), "{host} was lost: {json}");
    }
    assert!(json.contains("api.github.com"), "the original rules stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_edits_never_lose_one_another_sqlite() {
    concurrent_edits_never_lose_one_another(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_edits_never_lose_one_another_postgres() {
    concurrent_edits_never_lose_one_another(Backend::Postgres).await;
}

/// Writes made against the same revision: exactly one wins, the others are refused with
/// FAILED_PRECONDITION saying to retry, and nothing of theirs is written.
async fn an_expected_revision_lets_one_of_racing_writes_win(backend: Backend) {
    let gw = gateway(backend).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "race", POLICY).await;
    let (base, _) = latest_policy(&gw, &id).await;
    let writes = (0..6).map(|i| {
        let mut api: Api = api.clone();
        let mut request = edit_request(&id, vec![add_rule(&format!("r{i}.example.com"))]);
        request.expected_resource_version = base;
        async move { api.update_config(request).await }
    });
    let answers = futures::future::join_all(writes).await;
    let won = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!(won, 1, "{answers:?}");
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert!(
            refused.message().contains("read it again and retry"),
            "{refused:?}"
        );
    }
    let (revision, json) = latest_policy(&gw, &id).await;
    assert_eq!(revision, base + 1);
    assert_eq!(json.matches(".example.com").count(), 1, "{json}");

    // The global policy takes an expected revision too.
    let mut global = pb::UpdateConfigRequest {
        global: true,
        policy_text: POLICY.into(),
        expected_resource_version: 5,
        ..Default::default()
    };
    let stale = api.update_config(global.clone()).await.unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition, "{stale:?}");
    assert!(
        stale.message().contains("global policy is at revision 0"),
        "{stale:?}"
    );
    global.expected_resource_version = 0;
    api.update_config(global).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expected_revision_lets_one_of_racing_writes_win_sqlite() {
    an_expected_revision_lets_one_of_racing_writes_win(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expected_revision_lets_one_of_racing_writes_win_postgres() {
    an_expected_revision_lets_one_of_racing_writes_win(Backend::Postgres).await;
}
