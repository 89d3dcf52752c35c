//! Credential refresh end to end: a gateway with a refresh hook renews a provider's
//! expiring credential and only the sandbox attaching that provider gets it; a hook that
//! keeps failing leaves the credential to expire, and the supervisor then withholds it
//! from the workload until the provider is updated. Real gateway, real supervisors, a real
//! hook process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use openshell_e2e::inspect;
use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{Api, Backend, TestGateway, TestStore, create_sandbox, eventually};
use openshell_gateway::DeliveryMode;
use openshell_gateway::config::ProviderRefreshHook;
use openshell_proto::v1 as pb;

const POLICY: &str = include_str!("../../examples/policy.yaml");
const DEADLINE: Duration = Duration::from_secs(60);

fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms / 1000,
        nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap(),
    }
}

/// A hook script: `body` runs under `sh`, and each run is counted in `runs`.
fn hook_script(dir: &Path, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("refresh.sh");
    let runs = dir.join("runs");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho \"$OPENSHELL_PROVIDER\" >> '{}'\n{body}\n",
            runs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn hook_runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

async fn gateway_with_hook(dir: &Path, body: &str) -> TestGateway {
    let command = hook_script(dir, body);
    TestGateway::start_with(
        TestStore::new(Backend::Sqlite).await,
        DeliveryMode::Push,
        |config| {
            config.provider_refresh = vec![ProviderRefreshHook {
                workspace: "default".into(),
                provider: "github".into(),
                command: vec![command],
                timeout: Duration::from_secs(10),
                lead: Duration::from_secs(60),
                max_backoff: Duration::from_secs(1),
            }];
            config.provider_refresh_check = Duration::from_millis(200);
        },
    )
    .await
}

/// The `github` provider with one credential that expires at `expires_at_ms`, attached
/// to `sandbox_id`.
async fn github_provider(api: &mut Api, sandbox_id: &str, token: &str, expires_at_ms: i64) {
    api.create_provider(pb::CreateProviderRequest {
        name: "github".into(),
        r#type: "github".into(),
        values: vec![pb::ProviderValueInput {
            name: "GITHUB_TOKEN".into(),
            value: token.into(),
            class: pb::ValueClass::Credential as i32,
            expires_at: Some(timestamp(expires_at_ms)),
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    api.attach_provider(pb::AttachProviderRequest {
        sandbox: openshell_e2e::sandbox_ref(sandbox_id),
        provider: "github".into(),
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_credential_is_refreshed_for_the_sandboxes_attaching_its_provider_only() {
    let hook_dir = tempfile::tempdir().unwrap();
    let renewed_until = "2099-01-01T00:00:00Z";
    let gw = gateway_with_hook(
        hook_dir.path(),
        &format!(
            "printf '{{\"credentials\": {{\"GITHUB_TOKEN\": {{\"value\": \"ghp_renewed_value\", \"expires_at\": \"{renewed_until}\"}}}}}}'"
        ),
    )
    .await;
    let mut api = gw.api().await;
    let (attached, attached_credential) = create_sandbox(&mut api, "attached", POLICY).await;
    let (other, other_credential) = create_sandbox(&mut api, "other", POLICY).await;
    let dir = gw.store.dir.path();
    let bystander = spawn_supervisor(
        &gw.endpoint(),
        &other,
        &other_credential,
        &dir.join("other"),
        &[],
    );
    eventually(
        "the bystander to apply its configuration",
        DEADLINE,
        || async { bystander.active_file("provider-env.json") },
    )
    .await;
    let bystander_env = bystander.active_file("provider-env.json").unwrap();
    let bystander_revisions = bystander.active_file("revisions.json").unwrap();

    // Expiring within the hook's lead time: the refresh is due at once.
    github_provider(
        &mut api,
        &attached,
        "ghp_old_value",
        openshell_gateway::store::now_ms() + 30_000,
    )
    .await;
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &attached,
        &attached_credential,
        &dir.join("attached"),
        &[],
    );
    eventually(
        "the renewed credential in the sandbox",
        DEADLINE,
        || async {
            supervisor
                .active_file("provider-env.json")
                .filter(|env| env.contains("ghp_renewed_value"))
        },
    )
    .await;
    let provider = gw
        .state()
        .store
        .resolve_provider("github", "default")
        .await
        .unwrap();
    assert_eq!(provider.revision, 2, "one refresh wrote one revision");
    assert_eq!(
        hook_runs(hook_dir.path()),
        1,
        "renewed until 2099: no second run"
    );
    let inspection = inspect(&api, &attached).await;
    let expiry = &inspection.credential_expiry;
    assert_eq!(expiry.len(), 1, "{expiry:?}");
    assert_eq!(expiry[0].name, "GITHUB_TOKEN");
    assert_eq!(expiry[0].provider, "github");
    assert_eq!(expiry[0].expires_at.unwrap().seconds, 4_070_908_800);
    // The sandbox that does not attach the provider got nothing new.
    assert_eq!(
        bystander.active_file("provider-env.json").unwrap(),
        bystander_env
    );
    assert_eq!(
        bystander.active_file("revisions.json").unwrap(),
        bystander_revisions
    );
    // The hook's output is a credential: it never reaches the gateway's log or the
    // supervisor's.
    assert!(!supervisor.guard.log_text().contains("ghp_renewed_value"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_that_could_not_be_refreshed_is_withheld_once_it_expires() {
    let hook_dir = tempfile::tempdir().unwrap();
    let gw = gateway_with_hook(hook_dir.path(), "exit 3").await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "expiring", POLICY).await;
    let expires_at = openshell_gateway::store::now_ms() + 4_000;
    github_provider(&mut api, &id, "ghp_short_lived", expires_at).await;
    let supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &gw.store.dir.path().join("expiring"),
        &[],
    );
    eventually("the credential before it expires", DEADLINE, || async {
        supervisor
            .active_file("provider-env.json")
            .filter(|env| env.contains("ghp_short_lived"))
    })
    .await;
    // The hook keeps failing (and is tried again, with backoff) ...
    eventually("the hook to be tried again", DEADLINE, || async {
        (hook_runs(hook_dir.path()) >= 2).then_some(())
    })
    .await;
    // ... so once the credential expires the supervisor takes it away.
    let env = eventually(
        "the expired credential to be withheld",
        DEADLINE,
        || async {
            supervisor
                .active_file("provider-env.json")
                .filter(|env| !env.contains("GITHUB_TOKEN"))
        },
    )
    .await;
    assert!(
        openshell_gateway::store::now_ms() >= expires_at,
        "withheld before it expired: {env}"
    );
    let inspection = inspect(&api, &id).await;
    assert!(
        inspection
            .hints
            .iter()
            .any(|h| h.contains("credential GITHUB_TOKEN of provider github expired")),
        "{:?}",
        inspection.hints
    );
    // The CLI shows it as the operator reads it.
    let shown =
        openshell_e2e::cli::openshell(&gw.endpoint(), &["sessions", "inspect", "expiring"], None)
            .await;
    shown.expect(0);
    assert!(
        shown.stdout.contains("Credentials")
            && shown.stdout.contains("GITHUB_TOKEN (github): expired"),
        "{}",
        shown.stdout
    );
    let provider = gw
        .state()
        .store
        .resolve_provider("github", "default")
        .await
        .unwrap();
    assert_eq!(provider.revision, 1, "a failed refresh writes nothing");

    // An operator's update brings a valid credential back.
    api.update_provider(pb::UpdateProviderRequest {
        provider: "github".into(),
        values: vec![pb::ProviderValueInput {
            name: "GITHUB_TOKEN".into(),
            value: "ghp_rotated_by_hand".into(),
            class: pb::ValueClass::Credential as i32,
            expires_at: None,
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    eventually("the rotated credential", DEADLINE, || async {
        supervisor
            .active_file("provider-env.json")
            .filter(|env| env.contains("ghp_rotated_by_hand"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_credential_has_an_expiry_of_its_own() {
    let gw = TestGateway::start(Backend::Sqlite).await;
    let mut api = gw.api().await;
    let refused = api
        .create_provider(pb::CreateProviderRequest {
            name: "plain".into(),
            r#type: "generic".into(),
            values: vec![pb::ProviderValueInput {
                name: "REGION".into(),
                value: "eu".into(),
                class: pb::ValueClass::NonSecret as i32,
                expires_at: Some(timestamp(openshell_gateway::store::now_ms() + 60_000)),
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("values[0].expires_at"),
        "{refused:?}"
    );
}
