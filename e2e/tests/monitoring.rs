//! The monitoring assets of `deploy/monitoring/` against a running gateway
//! binary: every metric the alert rules and the Grafana dashboard name is
//! one the gateway's `/metrics` listener exports, and the gauges the rules
//! use carry real values.
//!
//! A family with labels appears in the exposition only once it has a series,
//! so the gateway first serves what a deployment sees: a current supervisor
//! (push, acks, bootstraps), a legacy one (polls), a fleet write (the fanout
//! lane) and a write no supervisor applies (pending).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openshell_e2e::process::{free_port, spawn_gateway, spawn_supervisor};
use openshell_e2e::{TOKEN, eventually, scrape_metrics};
use openshell_sdk::{
    ClientOptions, OperationState, ProviderSpec, Target, UpdateConfig, UpdateMode,
};

const POLICY: &str = include_str!("../../examples/policy.yaml");

fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

/// The series names a query may use for each family the text declares:
/// `name` for a gauge, `name_total` for a counter, `name_bucket`, `_sum` and
/// `_count` for a histogram. Families without series yet are declared too.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Metric names (`openshell_…`) in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("openshell_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        // A name starts at a boundary, not inside a longer identifier.
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// Every `expr` of the alert rules, by alert name.
fn rule_exprs() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(monitoring_dir().join("alerts.yml")).unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let mut exprs = Vec::new();
    for group in doc["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let name = rule["alert"]
                .as_str()
                .or_else(|| rule["record"].as_str())
                .unwrap();
            exprs.push((name.to_string(), rule["expr"].as_str().unwrap().to_string()));
        }
    }
    exprs
}

/// Every `expr` of the dashboard's panel targets, by panel title.
fn dashboard_exprs() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(monitoring_dir().join("dashboard.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut exprs = Vec::new();
    for panel in doc["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push((
                panel["title"].as_str().unwrap().to_string(),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    exprs
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs() as f64
}

#[tokio::test]
async fn every_metric_the_rules_and_dashboard_name_is_exported_with_the_stores_values() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let metrics_listen = format!("127.0.0.1:{metrics_port}");
    let data_dir = dir.path().join("data");
    let token_arg = format!("ci={TOKEN}");
    let args = [
        "--listen",
        listen.as_str(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--operator-token",
        token_arg.as_str(),
        "--metrics-listen",
        metrics_listen.as_str(),
        "--config-delivery-mode",
        "push",
    ];
    let gateway = spawn_gateway(&args, &[], dir.path().join("gateway.log"), port);

    // Nothing pending, nothing expiring: both gauges read 0.
    let idle = scrape_metrics(metrics_port);
    assert_eq!(
        value(&idle, "openshell_operations_pending"),
        Some(0.0),
        "{idle}"
    );
    assert_eq!(
        value(
            &idle,
            "openshell_provider_credentials_earliest_expiry_timestamp_seconds"
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &idle,
            "openshell_supervisor_config_frame_last_sent_timestamp_seconds"
        ),
        Some(0.0),
        "no session, no configuration frame yet"
    );

    let started = SystemTime::now();
    let endpoint = format!("http://{listen}");
    let client =
        openshell_sdk::Client::connect(ClientOptions::new(endpoint.clone()).with_token(TOKEN))
            .await
            .unwrap();
    let mut supervisors = Vec::new();
    for (name, extra) in [
        ("demo", &[][..]),
        ("old", &["--protocol-revision", "0"][..]),
    ] {
        let created = client
            .create_sandbox(name, None, Some(POLICY))
            .await
            .unwrap();
        supervisors.push(spawn_supervisor(
            &endpoint,
            &created.sandbox.id,
            created.supervisor_credential.expose(),
            &dir.path().join(name),
            extra,
        ));
    }
    let applied = client
        .update_config(
            UpdateConfig::new(Target::Sandbox("demo".into()))
                .set("log_level", "debug")
                .mode(UpdateMode::WaitForApply)
                .wait_timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap()
        .operation
        .unwrap();
    assert_eq!(applied.state, OperationState::Applied, "{applied:?}");
    // A fleet write goes through the fanout lane; the legacy supervisor
    // cannot report an apply, so half the fleet ends the wait.
    client
        .update_config(
            UpdateConfig::new(Target::Global)
                .set("log_level", "info")
                .mode(UpdateMode::WaitForApply)
                .threshold(0.5)
                .wait_timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap();

    // The legacy supervisor connects and polls on its own schedule.
    eventually(
        "the legacy session and its polls",
        Duration::from_secs(60),
        || async {
            let text = scrape_metrics(metrics_port);
            (value(
                &text,
                "openshell_supervisor_protocol_legacy_sessions_connected",
            ) == Some(1.0)
                && text.contains("openshell_config_poll_requests_total{"))
            .then_some(())
        },
    )
    .await;

    let expires = UNIX_EPOCH + Duration::from_secs(4_102_444_800); // 2100-01-01
    let sooner = UNIX_EPOCH + Duration::from_secs(4_000_000_000);
    for (name, at) in [("registry", expires), ("github", sooner)] {
        client
            .create_provider(&ProviderSpec {
                name: name.into(),
                provider_type: "generic".into(),
                credentials: [("TOKEN".to_string(), "value".to_string())].into(),
                expires_at: Some(at),
                ..ProviderSpec::default()
            })
            .await
            .unwrap();
    }
    // No supervisor runs for this sandbox: its write stays PENDING.
    client.create_sandbox("idle", None, None).await.unwrap();
    client
        .update_config(UpdateConfig::new(Target::Sandbox("idle".into())).set("log_level", "warn"))
        .await
        .unwrap();

    let mut text = scrape_metrics(metrics_port);
    let waiting = client
        .list_operations(
            None,
            &[OperationState::Pending, OperationState::Delivered],
            0,
        )
        .await
        .unwrap();
    assert!(!waiting.is_empty());
    assert_eq!(
        value(&text, "openshell_operations_pending"),
        Some(waiting.len() as f64),
        "{waiting:?}\n{text}"
    );
    // Every pending operation was created by this test.
    let oldest = value(
        &text,
        "openshell_operations_oldest_pending_created_timestamp_seconds",
    )
    .unwrap();
    assert!(
        (unix_seconds(started) - 1.0..=unix_seconds(SystemTime::now())).contains(&oldest),
        "the oldest pending operation was created at {oldest}, not during this test"
    );
    assert_eq!(
        value(
            &text,
            "openshell_provider_credentials_earliest_expiry_timestamp_seconds"
        ),
        Some(unix_seconds(sooner))
    );
    // The push session got its bootstrap and the sandbox and fleet writes.
    let last_frame = value(
        &text,
        "openshell_supervisor_config_frame_last_sent_timestamp_seconds",
    )
    .unwrap();
    assert!(
        // Whole seconds, the gauge has milliseconds.
        (unix_seconds(started)..=unix_seconds(SystemTime::now()) + 1.0).contains(&last_frame),
        "the last configuration frame went out at {last_frame}, not during this test"
    );
    assert_eq!(value(&text, "openshell_replicas_silent"), Some(0.0));
    assert_eq!(
        value(
            &text,
            "openshell_supervisor_protocol_legacy_sessions_connected"
        ),
        Some(1.0),
        "{text}"
    );

    let rules = rule_exprs();
    let alerts: BTreeSet<&str> = rules.iter().map(|(name, _)| name.as_str()).collect();
    for alert in [
        "OpenShellLegacySupervisorsConnected",
        "OpenShellOperationsPendingTooLong",
        "OpenShellAcksFailing",
        "OpenShellFanoutQueueGrowing",
        "OpenShellReplicasMissingHeartbeats",
        "OpenShellProviderCredentialsExpiringSoon",
    ] {
        assert!(alerts.contains(alert), "alerts.yml has no {alert}");
    }
    let panels = dashboard_exprs();
    assert!(
        panels.len() >= 10,
        "the dashboard has {} queries",
        panels.len()
    );
    let mut named = Vec::new();
    for (source, expr) in rules.iter().chain(&panels) {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "{source}: no openshell_ metric in {expr}"
        );
        named.extend(names.into_iter().map(|name| (source.clone(), name)));
    }
    // Counters of acks and builds are counted as the delivery task gets to
    // them, which may be just after the waits above returned.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (missing, exported) = loop {
        let exported = exported_names(&text);
        let missing: Vec<String> = named
            .iter()
            .filter(|(_, name)| !exported.contains(name))
            .map(|(source, name)| format!("{source}: {name}"))
            .collect();
        if missing.is_empty() || std::time::Instant::now() > deadline {
            break (missing, exported);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        text = scrape_metrics(metrics_port);
    };
    assert!(
        missing.is_empty(),
        "named by deploy/monitoring/ but not exported by the gateway:\n{}\nexported: {exported:?}",
        missing.join("\n")
    );
    drop(supervisors);
    drop(gateway);
}

#[test]
fn metric_names_are_read_from_queries() {
    assert_eq!(
        metric_names(
            r#"sum(rate(openshell_config_acks_total{status="FAILED"}[5m])) / max(xopenshell_no)"#
        ),
        BTreeSet::from(["openshell_config_acks_total".to_string()])
    );
    assert_eq!(
        exported_names(
            "# TYPE openshell_a counter\n# TYPE openshell_b histogram\n# TYPE openshell_c gauge\n"
        ),
        BTreeSet::from(
            [
                "openshell_a_total",
                "openshell_b_bucket",
                "openshell_b_count",
                "openshell_b_sum",
                "openshell_c"
            ]
            .map(String::from)
        )
    );
}

/// The store gauges on both backends: operations not terminal, the earliest
/// credential expiry, and registered replicas past the liveness window.
async fn store_gauges_read_the_store(backend: openshell_e2e::Backend) {
    use openshell_gateway::metrics::StoreGauges;
    use openshell_gateway::store::now_ms;

    let gw = openshell_e2e::TestGateway::start(backend).await;
    let store = &gw.state().store;
    assert_eq!(
        store.gauges(now_ms()).await.unwrap(),
        StoreGauges::default()
    );

    let client =
        openshell_sdk::Client::connect(ClientOptions::new(gw.endpoint()).with_token(TOKEN))
            .await
            .unwrap();
    let expiry = UNIX_EPOCH + Duration::from_millis(4_000_000_000_123);
    client
        .create_provider(&ProviderSpec {
            name: "github".into(),
            provider_type: "generic".into(),
            credentials: [("TOKEN".to_string(), "value".to_string())].into(),
            expires_at: Some(expiry),
            ..ProviderSpec::default()
        })
        .await
        .unwrap();
    client.create_sandbox("idle", None, None).await.unwrap();
    let before = now_ms();
    for level in ["warn", "error"] {
        client
            .update_config(
                UpdateConfig::new(Target::Sandbox("idle".into())).set("log_level", level),
            )
            .await
            .unwrap();
    }
    store
        .register_replica("replica-gone", "127.0.0.1:1")
        .await
        .unwrap();

    // Live since now: the replica just registered is not silent.
    let live = store.gauges(before).await.unwrap();
    assert_eq!(live.operations_pending, 2, "{live:?}");
    let oldest = live.oldest_pending_created_at_ms.unwrap();
    assert!((before..=now_ms()).contains(&oldest), "{live:?}");
    assert_eq!(live.earliest_credential_expiry_ms, Some(4_000_000_000_123));
    assert_eq!(live.replicas_silent, 0);
    // Live only from a moment on that its heartbeat predates: silent.
    let later = store.gauges(now_ms() + 60_000).await.unwrap();
    assert_eq!(later.replicas_silent, 1, "{later:?}");
}

#[tokio::test]
async fn store_gauges_read_the_store_sqlite() {
    store_gauges_read_the_store(openshell_e2e::Backend::Sqlite).await;
}

#[tokio::test]
async fn store_gauges_read_the_store_postgres() {
    store_gauges_read_the_store(openshell_e2e::Backend::Postgres).await;
}
