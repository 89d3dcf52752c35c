//! Provider credentials never leave the provider component: not in the
//! gateway's log (at debug level), not in API responses other than the
//! owning sandbox's provider environment, not in `Debug` output, and not in
//! the database file in plain text.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::process::{free_port, spawn_gateway};
use openshell_e2e::{BearerToken, TOKEN};
use openshell_proto::v1 as pb;
use tonic::transport::Channel;

const CREDENTIAL: &str = "ghp_0123456789SECRETabcdefTOKENvalue";
const ROTATED: &str = "ghp_rotated_SECRET_second_value_42";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_stay_out_of_logs_responses_debug_and_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data_dir = dir.path().join("data");
    let listen = format!("127.0.0.1:{port}");
    let token_arg = format!("ci={TOKEN}");
    let gateway = spawn_gateway(
        &[
            "--listen",
            &listen,
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--operator-token",
            &token_arg,
            "--metrics-listen",
            "off",
            "--log",
            "debug",
        ],
        &[],
        dir.path().join("gateway.log"),
        port,
    );
    let channel = Channel::from_shared(format!("http://{listen}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut api = openshell_e2e::Api::new(channel.clone(), BearerToken(Some(TOKEN.into())));
    let created = api
        .create_sandbox(pb::CreateSandboxRequest {
            name: "secretive".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let sandbox = created.sandbox.clone().unwrap();
    let value = |name: &str, value: &str, class: pb::ValueClass| pb::ProviderValueInput {
        name: name.into(),
        value: value.into(),
        class: class as i32,
        expires_at: None,
    };
    let request = pb::CreateProviderRequest {
        name: "github".into(),
        r#type: "github".into(),
        values: vec![
            value("GITHUB_TOKEN", CREDENTIAL, pb::ValueClass::Credential),
            value("GITHUB_ORG", "acme", pb::ValueClass::NonSecret),
        ],
        ..Default::default()
    };
    assert!(!format!("{request:?}").contains(CREDENTIAL));
    let provider = api.create_provider(request).await.unwrap().into_inner();
    let shown = format!("{provider:?}");
    assert!(!shown.contains(CREDENTIAL), "{shown}");
    assert!(
        shown.contains("GITHUB_TOKEN"),
        "credential names are shown: {shown}"
    );
    api.attach_provider(pb::AttachProviderRequest {
        sandbox: Some(pb::SandboxRef {
            id_or_name: "secretive".into(),
            workspace: String::new(),
        }),
        provider: "github".into(),
    })
    .await
    .unwrap();
    api.update_provider(pb::UpdateProviderRequest {
        provider: "github".into(),
        values: vec![
            value("GITHUB_TOKEN", ROTATED, pb::ValueClass::Credential),
            value("GITHUB_ORG", "acme", pb::ValueClass::NonSecret),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    let listed = api
        .list_providers(pb::ListProvidersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let listed_text = format!("{listed:?}");
    assert!(!listed_text.contains(ROTATED) && !listed_text.contains(CREDENTIAL));

    // The owning sandbox's supervisor does get the current credential.
    let mut supervisor = openshell_e2e::Api::new(
        channel.clone(),
        BearerToken(Some(created.supervisor_credential.clone())),
    );
    let env = supervisor
        .get_sandbox_provider_environment(pb::GetSandboxProviderEnvironmentRequest {
            sandbox_id: sandbox.id().to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(env.environment["GITHUB_TOKEN"], ROTATED);
    assert!(!format!("{env:?}").contains(ROTATED));

    // Another sandbox's credential opens nothing.
    let other = api
        .create_sandbox(pb::CreateSandboxRequest {
            name: "nosy".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut nosy = openshell_e2e::Api::new(
        channel,
        BearerToken(Some(other.supervisor_credential.clone())),
    );
    let err = nosy
        .get_sandbox_provider_environment(pb::GetSandboxProviderEnvironmentRequest {
            sandbox_id: sandbox.id().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert!(!err.message().contains(&other.supervisor_credential));

    drop(gateway);
    let log = std::fs::read_to_string(dir.path().join("gateway.log")).unwrap();
    assert!(
        log.contains("provider created"),
        "the log is captured: {log}"
    );
    for secret in [
        CREDENTIAL,
        ROTATED,
        created.supervisor_credential.as_str(),
        TOKEN,
    ] {
        assert!(!log.contains(secret), "log leaks {secret}");
    }
    for entry in std::fs::read_dir(&data_dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        for secret in [CREDENTIAL, ROTATED, created.supervisor_credential.as_str()] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds {secret} in plain text",
                path.display()
            );
        }
    }
}
