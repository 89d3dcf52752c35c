//! Remote middleware readiness end to end: a real supervisor connects to the remote middleware
//! its policy requires before starting the workload, starts degraded past unreachable
//! `fail_open` ones, holds the workload back while a `fail_closed` one does not answer, and
//! reports all of it to the gateway (`sessions inspect`) and in its log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::cli::openshell;
use openshell_e2e::inspect;
use openshell_e2e::process::{SupervisorProcess, free_port, spawn_supervisor};
use openshell_e2e::{Api, TestGateway, create_sandbox, eventually, wait_started};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use tokio::net::TcpListener;

const DEADLINE: Duration = Duration::from_secs(30);

/// A policy whose only middleware, `audit`, is the remote implementation `auditor`.
fn policy(on_error: &str) -> String {
    format!(
        "version: 1
network_policies:
  pypi:
    endpoints:
      - {{ host: pypi.org, port: 443, protocol: rest, access: read-only }}
network_middlewares:
  audit:
    middleware: auditor
    order: 1
    on_error: {on_error}
    endpoints:
      include: [\"pypi.org\"]
"
    )
}

/// A middleware stand-in: accepts connections and closes them.
async fn listen(addr: &str) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    })
}

/// Waits until the connected supervisor's reported readiness satisfies `check`.
async fn readiness_where(
    api: &Api,
    sandbox: &str,
    what: &str,
    check: impl Fn(&pb::RuntimeReadiness) -> bool,
) -> pb::SessionInspection {
    eventually(what, DEADLINE, || async {
        let inspection = inspect(api, sandbox).await;
        inspection
            .runtime_readiness
            .as_ref()
            .is_some_and(&check)
            .then_some(inspection)
    })
    .await
}

struct Setup {
    gw: TestGateway,
    api: Api,
    id: String,
    supervisor: SupervisorProcess,
}

async fn setup(mode: DeliveryMode, on_error: &str, extra: &[&str]) -> Setup {
    let gw = TestGateway::start_for_delivery(mode).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "web", &policy(on_error)).await;
    let dir = gw.store.dir.path().join("web");
    let supervisor = spawn_supervisor(&gw.endpoint(), &id, &credential, &dir, extra);
    Setup {
        gw,
        api,
        id,
        supervisor,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reachable_remote_middleware_lets_the_workload_start() {
    let port = free_port();
    let endpoint = format!("127.0.0.1:{port}");
    let _middleware = listen(&endpoint).await;
    let registered = format!("auditor={endpoint}");
    let s = setup(
        DeliveryMode::Push,
        "fail_closed",
        &["--middleware", &registered],
    )
    .await;
    wait_started(&s.supervisor).await;
    let inspection = readiness_where(&s.api, &s.id, "a reachable middleware reported", |r| {
        r.workload_started && r.middlewares.iter().all(|m| m.reachable)
    })
    .await;
    let readiness = inspection.runtime_readiness.unwrap();
    assert_eq!(readiness.middlewares.len(), 1, "{readiness:?}");
    let audit = &readiness.middlewares[0];
    assert_eq!(
        (
            audit.name.as_str(),
            audit.implementation.as_str(),
            audit.endpoint.as_str()
        ),
        ("audit", "auditor", endpoint.as_str())
    );
    assert!(audit.fail_closed && audit.error.is_empty(), "{audit:?}");

    let text = openshell(&s.gw.endpoint(), &["sessions", "inspect", "web"], None).await;
    text.expect(0);
    assert!(
        text.stdout.contains(&format!(
            "\nMiddleware:\n  audit  {endpoint}  reachable  fail_closed\n  workload started\n"
        )),
        "{}",
        text.stdout
    );

    // A restarted gateway knows nothing of it: the supervisor tells the new session too.
    let Setup {
        gw, id, supervisor, ..
    } = s;
    let gw = gw.restart().await;
    let api = gw.api().await;
    readiness_where(
        &api,
        &id,
        "the readiness reported to the new session",
        |r| r.workload_started && r.middlewares.iter().all(|m| m.reachable),
    )
    .await;
    // Still the one workload start.
    let starts = supervisor
        .workload_lines()
        .iter()
        .filter(|l| l.starts_with("started"))
        .count();
    assert_eq!(starts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_fail_open_middleware_starts_the_workload_degraded() {
    // Nothing listens there.
    let endpoint = format!("127.0.0.1:{}", free_port());
    let registered = format!("auditor={endpoint}");
    let s = setup(
        DeliveryMode::Push,
        "fail_open",
        &[
            "--middleware",
            &registered,
            "--middleware-ready-timeout",
            "1s",
        ],
    )
    .await;
    wait_started(&s.supervisor).await;
    let inspection = readiness_where(&s.api, &s.id, "a degraded start reported", |r| {
        r.workload_started && r.middlewares.iter().any(|m| !m.reachable)
    })
    .await;
    let audit = &inspection.runtime_readiness.unwrap().middlewares[0];
    assert!(!audit.fail_closed, "{audit:?}");
    assert_eq!(audit.error, "connection refused", "{audit:?}");
    // Degraded is configured behaviour, not a delivery problem.
    assert!(
        !inspection.hints.iter().any(|h| h.contains("middleware")),
        "{:?}",
        inspection.hints
    );
    let text = openshell(&s.gw.endpoint(), &["sessions", "inspect", "web"], None).await;
    text.expect(0);
    assert!(
        text.stdout.contains(&format!(
            "\nMiddleware:\n  audit  {endpoint}  unreachable: connection refused  fail_open\n  started degraded\n"
        )),
        "{}",
        text.stdout
    );
    assert!(
        s.supervisor.guard.log_text().contains(&format!(
            "workload started degraded: middleware audit (fail_open) unreachable at {endpoint}: connection refused"
        )),
        "{}",
        s.supervisor.guard.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_middleware_name_without_a_registration_is_reported_not_ignored() {
    let s = setup(DeliveryMode::Push, "fail_closed", &[]).await;
    let inspection = readiness_where(&s.api, &s.id, "the unregistered middleware reported", |r| {
        !r.workload_started
    })
    .await;
    let audit = &inspection.runtime_readiness.unwrap().middlewares[0];
    assert_eq!(audit.endpoint, "", "{audit:?}");
    assert_eq!(
        audit.error, "not registered on this supervisor (--middleware NAME=HOST:PORT)",
        "{audit:?}"
    );
    assert!(!s.supervisor.workload_started());
}

mod a_fail_closed_middleware_holds_the_workload_back_until_it_answers {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn push() {
        super::a_fail_closed_middleware_holds_the_workload_back_until_it_answers(
            openshell_gateway::DeliveryMode::Push,
        )
        .await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn poll() {
        super::a_fail_closed_middleware_holds_the_workload_back_until_it_answers(
            openshell_gateway::DeliveryMode::Poll,
        )
        .await
    }
}

async fn a_fail_closed_middleware_holds_the_workload_back_until_it_answers(mode: DeliveryMode) {
    let endpoint = format!("127.0.0.1:{}", free_port());
    let registered = format!("auditor={endpoint}");
    let s = setup(
        mode,
        "fail_closed",
        &[
            "--middleware",
            &registered,
            "--middleware-ready-timeout",
            "1s",
        ],
    )
    .await;
    let blocked = format!(
        "workload not started: middleware audit (fail_closed) unreachable at {endpoint}: connection refused"
    );
    // The supervisor's own record, in both modes: its log.
    eventually(
        "the supervisor to log the blocked start",
        DEADLINE,
        || async {
            s.supervisor
                .guard
                .log_text()
                .contains(&blocked)
                .then_some(())
        },
    )
    .await;
    let inspection = readiness_where(&s.api, &s.id, "the blocked start reported", |r| {
        !r.workload_started
    })
    .await;
    // The readiness above was decided before it was reported: the workload was never started.
    assert!(
        !s.supervisor.workload_started(),
        "{:?}",
        s.supervisor.workload_lines()
    );
    let audit = &inspection.runtime_readiness.as_ref().unwrap().middlewares[0];
    assert!(audit.fail_closed && !audit.reachable, "{audit:?}");
    assert!(
        inspection
            .hints
            .iter()
            .any(|h| h.contains("workload not started: waiting for fail_closed middleware audit")),
        "{:?}",
        inspection.hints
    );
    let text = openshell(&s.gw.endpoint(), &["sessions", "inspect", "web"], None).await;
    text.expect(0);
    assert!(
        text.stdout
            .contains("\n  workload not started: waiting for fail_closed middleware audit\n"),
        "{}",
        text.stdout
    );

    let _middleware = listen(&endpoint).await;
    wait_started(&s.supervisor).await;
    readiness_where(&s.api, &s.id, "the start reported", |r| {
        r.workload_started && r.middlewares.iter().all(|m| m.reachable)
    })
    .await;
    assert!(
        s.supervisor
            .guard
            .log_text()
            .contains("workload started: every required middleware is reachable"),
        "{}",
        s.supervisor.guard.log_text()
    );
}

/// Without a gateway the same check runs; the log is its only report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_holds_the_workload_back_the_same_way() {
    use std::os::unix::process::CommandExt;

    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy("fail_closed")).unwrap();
    let endpoint = format!("127.0.0.1:{}", free_port());
    let workload_out = dir.path().join("workload.out");
    let log = dir.path().join("supervisor.log");
    let child = std::process::Command::new(openshell_e2e::process::binary("openshell-supervisor"))
        .process_group(0)
        .args(["--standalone", "--policy-file"])
        .arg(&policy_file)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["--middleware-ready-timeout", "1s", "--middleware"])
        .arg(format!("auditor={endpoint}"))
        .args([
            "--",
            "sh",
            "-c",
            "echo started >> \"$WORKLOAD_OUT\"; exec sleep 60",
        ])
        .env("WORKLOAD_OUT", &workload_out)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let supervisor = openshell_e2e::process::ChildGuard { child, log };
    let workload_started =
        || std::fs::read_to_string(&workload_out).is_ok_and(|t| t.contains("started"));
    eventually(
        "the supervisor to log the blocked start",
        DEADLINE,
        || async {
            supervisor
                .log_text()
                .contains(&format!(
                    "workload not started: middleware audit (fail_closed) unreachable at {endpoint}"
                ))
                .then_some(())
        },
    )
    .await;
    assert!(!workload_started(), "{}", supervisor.log_text());
    let _middleware = listen(&endpoint).await;
    eventually("the workload to start", DEADLINE, || async {
        workload_started().then_some(())
    })
    .await;
}
