//! Runs the examples of docs/sdk-rust.md against a real gateway and
//! supervisor, and checks the page quotes this file verbatim.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use openshell_e2e::process::spawn_supervisor;
use openshell_e2e::{TOKEN, TestGateway, create_sandbox};
use openshell_gateway::DeliveryMode;
use openshell_sdk::{
    Client, ClientOptions, EditSpecs, Operation, OperationState, SandboxRef, SdkError, Target,
    UpdateConfig, UpdateMode,
};

async fn set_policy_and_wait(
    endpoint: &str,
    token: &str,
    policy: &str,
) -> Result<Operation, SdkError> {
    let client = Client::connect(ClientOptions::new(endpoint).with_token(token)).await?;
    let result = client
        .update_config(
            UpdateConfig::new(Target::Sandbox("web".into()))
                .policy(policy)
                .mode(UpdateMode::WaitForApply)
                .wait_timeout(Duration::from_secs(120)),
        )
        .await?;
    result.into_operation()
}

async fn commit_then_follow(client: &Client, policy: &str) -> Result<Operation, SdkError> {
    let change = UpdateConfig::new(Target::Sandbox("web".into()))
        .policy(policy)
        .mode(UpdateMode::CommitOnly)
        .idempotency_key("rust-guide-commit-only-policy");
    let first = client
        .update_config(change.clone())
        .await?
        .into_operation()?;
    let retry = client.update_config(change).await?;
    assert!(retry.idempotent_replay);
    assert_eq!(retry.into_operation()?.id, first.id);
    let mut states = Vec::new();
    let done = client
        .wait_for_apply_final(&first.id, Some(Duration::from_secs(120)), None, |op| {
            states.push(op.state)
        })
        .await?;
    println!("seen: {states:?}");
    Ok(done)
}

async fn preview_policy(client: &Client, policy: &str) -> Result<Vec<String>, SdkError> {
    let checked = client
        .update_config(
            UpdateConfig::new(Target::Sandbox("web".into()))
                .policy(policy)
                .validate_only(),
        )
        .await?;
    assert!(checked.operation.is_none(), "a dry run writes nothing");
    let mut lines = Vec::new();
    if let Some(diff) = &checked.policy_diff {
        for name in &diff.added_policies {
            lines.push(format!("+ network policy {name}"));
        }
        for name in &diff.removed_policies {
            lines.push(format!("- network policy {name}"));
        }
        for change in &diff.changed_policies {
            for endpoint in &change.added_endpoints {
                lines.push(format!("~ {}: + endpoint {endpoint}", change.name));
            }
            for endpoint in &change.removed_endpoints {
                lines.push(format!("~ {}: - endpoint {endpoint}", change.name));
            }
        }
    }
    println!(
        "kept from the current policy: {:?}",
        checked.kept_static_sections
    );
    Ok(lines)
}

async fn allow_npm_once(client: &Client) -> Result<Vec<String>, SdkError> {
    let web = SandboxRef::from("web");
    for _ in 0..3 {
        let current = client.get_sandbox_policy(&web, None).await?.policy;
        if current
            .policy_yaml
            .unwrap_or_default()
            .contains("registry.npmjs.org")
        {
            return Ok(Vec::new()); // decided on what was read: already allowed
        }
        let change = UpdateConfig::new(Target::Sandbox(web.clone()))
            .edit_specs(&EditSpecs {
                add_endpoints: vec!["registry.npmjs.org:443:read-only:rest:enforce".into()],
                add_allow: vec!["registry.npmjs.org:443:post:/-/npm/**".into()],
                binaries: vec!["/usr/bin/npm".into()],
                ..EditSpecs::default()
            })?
            .expected_revision(current.revision);
        match client.update_config(change).await {
            // Someone wrote in between, so the decision may be stale: read again.
            Err(SdkError::FailedPrecondition(message)) => println!("{message}"),
            result => return Ok(result?.merge_notes),
        }
    }
    Err(SdkError::FailedPrecondition(
        "the policy of web kept changing".into(),
    ))
}

async fn show_errors(client: &Client) {
    let bad = UpdateConfig::new(Target::Sandbox("web".into())).policy("version: 1\nnetwork_policies:\n  x:\n    endpoints:\n      - host: api.example.com\n        port: 70000\n");
    match client.update_config(bad).await {
        Err(SdkError::InvalidArgument { violations, .. }) => {
            for v in &violations {
                println!("{}: {}", v.field, v.message);
            }
        }
        other => panic!("expected a violation, got {other:?}"),
    }
    match client
        .wait_for_apply_final("op-unknown", None, None, |_| {})
        .await
    {
        Err(e) => println!("{} ({})", e, e.code()),
        Ok(op) => panic!("unexpected {op:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_sdk_guide_examples_work() {
    let policy = include_str!("../../examples/policy.yaml");
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "web", policy).await;
    let _supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &gw.store.dir.path().join("s"),
        &[],
    );

    let applied = set_policy_and_wait(
        &gw.endpoint(),
        TOKEN,
        &policy.replacen("port: 443", "port: 8443", 1),
    )
    .await
    .unwrap();
    assert_eq!(applied.state, OperationState::Applied);
    assert_eq!(applied.policy_revision, 2);

    let client = Client::connect(ClientOptions::new(gw.endpoint()).with_token(TOKEN))
        .await
        .unwrap();
    let done = commit_then_follow(&client, &policy.replacen("port: 443", "port: 9443", 1))
        .await
        .unwrap();
    assert_eq!(done.state, OperationState::Applied);
    let revision = client
        .get_sandbox(&"web".into())
        .await
        .unwrap()
        .policy_revision;
    let preview = preview_policy(&client, &policy.replacen("port: 443", "port: 7443", 1))
        .await
        .unwrap();
    assert_eq!(
        preview,
        [
            "~ github: + endpoint api.github.com:7443",
            "~ github: - endpoint api.github.com:9443"
        ]
    );
    assert_eq!(
        client
            .get_sandbox(&"web".into())
            .await
            .unwrap()
            .policy_revision,
        revision
    );

    let notes = allow_npm_once(&client).await.unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("access preset read-only of endpoint registry.npmjs.org:443")),
        "{notes:?}"
    );
    let web = client
        .get_sandbox_policy(&"web".into(), None)
        .await
        .unwrap();
    assert_eq!(web.policy.revision, revision + 1);
    let yaml = web.policy.policy_yaml.unwrap();
    assert!(
        yaml.contains("/-/npm/**") && yaml.contains("/usr/bin/npm"),
        "{yaml}"
    );
    // Decided on what it reads: the second call finds the endpoint and writes nothing.
    assert!(allow_npm_once(&client).await.unwrap().is_empty());
    let stale = client
        .update_config(
            UpdateConfig::new(Target::Sandbox("web".into()))
                .policy(policy)
                .expected_revision(revision),
        )
        .await;
    assert!(
        matches!(&stale, Err(SdkError::FailedPrecondition(m)) if m.contains(&format!("is at revision {}, not the expected {revision}", revision + 1))),
        "{stale:?}"
    );
    assert_eq!(
        client
            .get_sandbox(&"web".into())
            .await
            .unwrap()
            .policy_revision,
        revision + 1
    );
    show_errors(&client).await;
}

#[test]
fn the_guide_quotes_this_file() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let guide = std::fs::read_to_string(root.join("docs/sdk-rust.md")).unwrap();
    let this = std::fs::read_to_string(root.join("e2e/tests/sdk_rust_guide.rs")).unwrap();
    let mut blocks = 0;
    let mut current: Option<String> = None;
    for line in guide.lines() {
        match &mut current {
            None if line == "```rust" => current = Some(String::new()),
            Some(block) if line == "```" => {
                assert!(
                    this.contains(block.as_str()),
                    "docs/sdk-rust.md block not in the test:\n{block}"
                );
                blocks += 1;
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    assert_eq!(blocks, 5);
}
