//! Stored policies from before the schema became upstream OpenShell's are converted when a
//! gateway starts, on SQLite and PostgreSQL: the old spelling comes back in upstream's, with a
//! hash that matches it, once; a policy upstream's schema cannot express stays as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use openshell_e2e::{Backend, POLICY, TestGateway, TestStore, create_sandbox, sandbox_ref};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use sqlx::Connection;

/// The example policy as this project stored it before (canonical JSON of the old schema).
const OLD_STORED: &str = r#"{"filesystem_policy":{"include_workdir":true,"read_only":["/usr","/etc"],"read_write":["/sandbox","/tmp"]},"landlock":{"compatibility":"best_effort"},"network_policies":{"github":{"binaries":[{"path":"/usr/bin/git"}],"endpoints":[{"enforcement":"enforce","host":"api.github.com","port":443,"protocol":"rest","rules":[{"methods":["GET"],"paths":["/repos/**"]}]},{"access":"read_only","host":"*.githubusercontent.com","ports":[443],"protocol":"https"}]}},"process":{"run_as_group":"sandbox","run_as_user":"sandbox"},"version":1}"#;

/// Upstream has no UDP: this one cannot be converted.
const OLD_UDP: &str = r#"{"network_policies":{"dns":{"endpoints":[{"host":"dns.example.com","port":53,"protocol":"udp"}]}},"version":1}"#;

async fn raw(store: &TestStore, statements: &[(&'static str, Vec<String>)]) {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&store.url).await.unwrap();
    for (sql, binds) in statements {
        let mut query = sqlx::query(*sql);
        for bind in binds {
            query = query.bind(bind.clone());
        }
        query.execute(&mut conn).await.unwrap();
    }
}

async fn stored_policy(api: &mut openshell_e2e::Api, id: &str) -> pb::GetSandboxPolicyResponse {
    api.get_sandbox_policy(pb::GetSandboxPolicyRequest {
        sandbox: sandbox_ref(id),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_policies_are_converted_to_upstreams_schema_once() {
    for backend in Backend::ALL {
        let store = TestStore::new(backend).await;
        let gw = TestGateway::start_on(store, DeliveryMode::Poll).await;
        let mut api = gw.api().await;
        let (old, _) = create_sandbox(&mut api, "old", POLICY).await;
        let (udp, _) = create_sandbox(&mut api, "udp", POLICY).await;
        let store = {
            let TestGateway { handle, store } = gw;
            handle.shutdown().await;
            store
        };
        // Put the rows back as an earlier version wrote them, and forget the conversion.
        let set = "UPDATE policy_revisions SET policy_json = $1, policy_hash = 'stale' WHERE sandbox_id = $2";
        raw(
            &store,
            &[
                (set, vec![OLD_STORED.into(), old.clone()]),
                (set, vec![OLD_UDP.into(), udp.clone()]),
                ("DELETE FROM data_migrations", vec![]),
            ],
        )
        .await;

        let gw = TestGateway::start_on(store, DeliveryMode::Poll).await;
        let mut api = gw.api().await;
        let converted = stored_policy(&mut api, &old).await;
        let revision = converted.policy.unwrap();
        let yaml = revision.policy_yaml.clone();
        assert!(yaml.contains("access: read-only"), "{backend:?}: {yaml}");
        assert!(yaml.contains("method: GET"), "{backend:?}: {yaml}");
        assert!(
            !yaml.contains("read_only\n") && !yaml.contains("methods"),
            "{yaml}"
        );
        let reparsed = openshell_core::parse_and_validate(&yaml).unwrap();
        assert_eq!(revision.policy_hash, reparsed.policy_hash(), "{backend:?}");
        // The unconvertible row is left as it was, hash and all.
        let kept = stored_policy(&mut api, &udp).await.policy.unwrap();
        assert_eq!(kept.policy_hash, "stale", "{backend:?}");

        // A second start converts nothing again: the recorded run is not repeated.
        raw(
            &gw.store,
            &[(
                "UPDATE policy_revisions SET policy_hash = 'untouched' WHERE sandbox_id = $1",
                vec![old.clone()],
            )],
        )
        .await;
        let gw = gw.restart().await;
        let mut api = gw.api().await;
        let again = stored_policy(&mut api, &old).await.policy.unwrap();
        assert_eq!(again.policy_hash, "untouched", "{backend:?}");
    }
}
