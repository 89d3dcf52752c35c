use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use openshell_core::policy::parse_and_validate;

use super::*;

#[test]
fn entries_parse_and_bad_ones_name_the_problem() {
    assert_eq!(
        parse_entry("audit=127.0.0.1:9000").unwrap(),
        RegisteredMiddleware {
            name: "audit".into(),
            endpoint: "127.0.0.1:9000".into()
        }
    );
    assert_eq!(
        parse_entry("v6=[::1]:80").unwrap().endpoint,
        "[::1]:80".to_string()
    );
    assert_eq!(parse_entry("dns=mw.local:443").unwrap().name, "dns");
    for (bad, says) in [
        ("audit", "no '='"),
        ("=h:1", "empty NAME"),
        ("a b=h:1", "NAME must not"),
        ("audit=host", "no port"),
        ("audit=:80", "HOST must be"),
        ("audit=::1:80", "HOST must be"),
        ("audit=h:0", "PORT must be"),
        ("audit=h:70000", "PORT must be"),
        ("audit=h:http", "PORT must be"),
    ] {
        let err = parse_entry(bad).unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains("NAME=HOST:PORT"), "{bad}: {err}");
        assert!(err.contains(bad), "{bad}: the entry is named: {err}");
    }
}

#[test]
fn a_name_registered_twice_is_refused() {
    let entries = ["a=h:1", "b=h:2", "a=h:3"].map(|e| parse_entry(e).unwrap());
    let err = MiddlewareRegistry::new(entries).unwrap_err().to_string();
    assert!(err.contains("--middleware a is given twice"), "{err}");
    assert!(err.contains("h:1") && err.contains("h:3"), "{err}");
}

fn registry(entries: &[&str]) -> MiddlewareRegistry {
    MiddlewareRegistry::new(entries.iter().map(|e| parse_entry(e).unwrap())).unwrap()
}

const POLICY: &str = "version: 1
network_middlewares:
  audit: {middleware: auditor, order: 1, endpoints: {include: [\"**\"]}}
  trace: {middleware: tracer, order: 2, on_error: fail_open, endpoints: {include: [\"**\"]}}
  regex: {middleware: openshell/regex, order: 3, endpoints: {include: [\"**\"]}}
  ghost: {middleware: unknown, order: 4, on_error: fail_open, endpoints: {include: [\"**\"]}}
";

#[test]
fn built_in_names_need_no_connection_and_unregistered_remote_ones_are_kept() {
    let policy = parse_and_validate(POLICY).unwrap();
    let required = required(
        &policy,
        &registry(&["auditor=127.0.0.1:1", "tracer=127.0.0.1:2"]),
    );
    let summary: Vec<(&str, Option<&str>, bool)> = required
        .iter()
        .map(|r| (r.name.as_str(), r.endpoint.as_deref(), r.fail_closed))
        .collect();
    assert_eq!(
        summary,
        [
            ("audit", Some("127.0.0.1:1"), true),
            ("ghost", None, false),
            ("trace", Some("127.0.0.1:2"), false),
        ]
    );
    // A registered built-in name runs elsewhere, so it is checked.
    let moved = required_names(&policy, &registry(&["openshell/regex=h:1"]));
    assert!(moved.contains(&"regex".to_string()), "{moved:?}");
}

fn required_names(policy: &SandboxPolicy, registry: &MiddlewareRegistry) -> Vec<String> {
    required(policy, registry)
        .into_iter()
        .map(|r| r.name)
        .collect()
}

fn state(name: &str, reachable: bool, fail_closed: bool) -> MiddlewareState {
    MiddlewareState {
        name: name.into(),
        implementation: name.into(),
        endpoint: "127.0.0.1:9".into(),
        reachable,
        fail_closed,
        error: (!reachable).then(|| "connection refused".to_string()),
    }
}

#[test]
fn the_decision_blocks_on_fail_closed_and_degrades_on_fail_open() {
    assert_eq!(Readiness::decide(vec![]).workload, WorkloadStart::Started);
    assert_eq!(
        Readiness::decide(vec![state("a", true, true), state("b", true, false)]).workload,
        WorkloadStart::Started
    );
    let degraded = Readiness::decide(vec![state("a", true, true), state("b", false, false)]);
    assert_eq!(degraded.workload, WorkloadStart::StartedDegraded);
    assert!(degraded.to_pb().workload_started);
    let blocked = Readiness::decide(vec![state("audit", false, true), state("b", false, false)]);
    assert_eq!(blocked.workload, WorkloadStart::Blocked);
    assert!(!blocked.to_pb().workload_started);
    assert!(
        blocked.summary().contains(
            "middleware audit (fail_closed) unreachable at 127.0.0.1:9: connection refused"
        ),
        "{}",
        blocked.summary()
    );
}

/// Answers for the endpoints in `up`; counts attempts per endpoint.
#[derive(Default)]
struct FakeProbe {
    up: Mutex<BTreeSet<String>>,
    attempts: Mutex<BTreeMap<String, u32>>,
}

impl FakeProbe {
    fn bring_up(&self, endpoint: &str) {
        self.up.lock().unwrap().insert(endpoint.to_string());
    }

    fn attempts(&self, endpoint: &str) -> u32 {
        self.attempts
            .lock()
            .unwrap()
            .get(endpoint)
            .copied()
            .unwrap_or(0)
    }
}

impl Probe for FakeProbe {
    fn connect<'a>(
        &'a self,
        endpoint: &'a str,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<(), String>> {
        *self
            .attempts
            .lock()
            .unwrap()
            .entry(endpoint.to_string())
            .or_default() += 1;
        let up = self.up.lock().unwrap().contains(endpoint);
        Box::pin(async move {
            if up {
                Ok(())
            } else {
                Err("connection refused".to_string())
            }
        })
    }
}

fn remote(name: &str, endpoint: Option<&str>, fail_closed: bool) -> RequiredMiddleware {
    RequiredMiddleware {
        name: name.into(),
        implementation: name.into(),
        endpoint: endpoint.map(str::to_string),
        fail_closed,
    }
}

#[tokio::test(start_paused = true)]
async fn the_check_retries_with_backoff_until_the_deadline() {
    let probe = FakeProbe::default();
    probe.bring_up("up:1");
    let required = [
        remote("up", Some("up:1"), true),
        remote("down", Some("down:1"), false),
        remote("ghost", None, false),
    ];
    let readiness = check(&required, &probe, &ReadinessConfig::default()).await;
    assert_eq!(readiness.workload, WorkloadStart::StartedDegraded);
    // Reachable once is enough; the unreachable one is tried again and again with growing
    // delays (200 ms, 400 ms, 800 ms, 1.6 s, then 2 s) until the 10 s deadline: 8 to 9 tries.
    assert_eq!(probe.attempts("up:1"), 1);
    let tries = probe.attempts("down:1");
    assert!((7..=10).contains(&tries), "{tries} tries");
    let ghost = &readiness.middlewares[2];
    assert_eq!(ghost.error.as_deref(), Some(NOT_REGISTERED));
    assert!(!ghost.reachable);
}

#[tokio::test(start_paused = true)]
async fn a_blocked_start_waits_for_the_fail_closed_middleware() {
    let probe = std::sync::Arc::new(FakeProbe::default());
    let config = ReadinessConfig {
        deadline: Duration::from_secs(1),
        ..ReadinessConfig::default()
    };
    let required = vec![
        remote("audit", Some("audit:9"), true),
        remote("trace", Some("trace:9"), false),
    ];
    let published = Mutex::new(Vec::new());
    let waiter = {
        let probe = probe.clone();
        let required = required.clone();
        let published = &published;
        async move {
            await_startable(
                || required.clone(),
                &*probe,
                &config,
                |r| {
                    published.lock().unwrap().push(r.clone());
                },
            )
            .await
        }
    };
    tokio::pin!(waiter);
    // Blocked, and still blocked a minute later: it retries, never gives up.
    let blocked = tokio::select! {
        r = &mut waiter => panic!("started while blocked: {r:?}"),
        () = tokio::time::sleep(Duration::from_secs(60)) => published.lock().unwrap().clone(),
    };
    assert_eq!(blocked.len(), 1, "one outcome published while unchanged");
    assert_eq!(blocked[0].workload, WorkloadStart::Blocked);
    let retries = probe.attempts("audit:9");
    // Retries are at most 5 s apart once capped.
    assert!(retries >= 12, "{retries} attempts in a minute");
    probe.bring_up("audit:9");
    let started = waiter.await;
    assert_eq!(started.workload, WorkloadStart::StartedDegraded);
    assert!(started.middlewares[0].reachable);
    let published = published.lock().unwrap();
    assert_eq!(published.last(), Some(&started));
}

#[tokio::test(start_paused = true)]
async fn a_policy_change_that_drops_the_blocking_middleware_unblocks() {
    let probe = FakeProbe::default();
    let config = ReadinessConfig {
        deadline: Duration::from_millis(500),
        ..ReadinessConfig::default()
    };
    let calls = Mutex::new(0u32);
    let readiness = await_startable(
        || {
            let mut n = calls.lock().unwrap();
            *n += 1;
            if *n < 3 {
                vec![remote("audit", Some("audit:9"), true)]
            } else {
                Vec::new()
            }
        },
        &probe,
        &config,
        |_| {},
    )
    .await;
    assert_eq!(readiness.workload, WorkloadStart::Started);
    assert!(readiness.middlewares.is_empty());
}

#[tokio::test]
async fn the_tcp_probe_tells_refused_from_open() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap().to_string();
    assert_eq!(
        TcpProbe.connect(&open, Duration::from_secs(5)).await,
        Ok(())
    );
    drop(listener);
    let err = TcpProbe
        .connect(&open, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err, "connection refused");
}
