//! Faults of the gateway's store (docs/reliability.md): its PostgreSQL server restarted and
//! killed, and the file system of its database full. The gateway process must ride through
//! both without a restart: writes refused with a status that says what is wrong and that
//! nothing was written, reads served where the store can still read, and everything
//! committed again once the store is back, under the random workload and fanouts, with the
//! checker's guarantees at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use openshell_e2e::chaos::store_faults::{
    PrivatePostgres, Probe, Refusal, Tmpfs, fill_to_enospc, latest_revision, patient_api,
};
use openshell_e2e::chaos::workload::{self, Outcome, WriteKind};
use openshell_e2e::chaos::{ChaosConfig, GatewayProcess, Run};
use openshell_e2e::{Api, Backend, TestStore};
use openshell_proto::v1 as pb;
use tonic::Code;

/// What a driver or the operating system says, which a client must never be handed.
const DRIVER_WORDS: [&str; 7] = [
    "sqlx",
    "error returned from database",
    "error communicating",
    "os error",
    "pool timed out",
    "connection refused",
    "(code:",
];

/// Records a violation unless `refusal` has `code` and a message with `says` and nothing of
/// the driver's.
fn check_refusal(run: &Run, refusal: &Refusal, code: Code, says: &[&str]) {
    let message = refusal.status.message();
    eprintln!(
        "  write {} refused: {:?} {message:?}",
        refusal.key,
        refusal.status.code()
    );
    let lower = message.to_lowercase();
    if refusal.status.code() != code
        || !says.iter().all(|s| lower.contains(s))
        || DRIVER_WORDS.iter().any(|w| lower.contains(w))
    {
        run.violation(format!(
            "write {} was refused with {:?} {message:?}; expected {code:?} saying {says:?} \
             without the driver's words",
            refusal.key,
            refusal.status.code()
        ));
    }
}

/// After the store is back: each refused probe write left no revision, commits once when
/// retried with its key, and a second retry replays that commit.
async fn retried_refusals_commit_once(
    run: &Run,
    api: &mut Api,
    probe: &mut Probe,
    refusals: &[Refusal],
) {
    for refusal in refusals {
        let before = probe.revision;
        let committed = openshell_e2e::eventually(
            "the refused write, retried with its key, commits",
            Duration::from_secs(90),
            || {
                let mut api = api.clone();
                let mut attempt = probe.clone();
                let refusal = refusal.clone();
                async move { attempt.retry(&mut api, &refusal).await.ok() }
            },
        )
        .await;
        probe.revision = probe.revision.max(u64::from(committed.version));
        if u64::from(committed.version) != before + 1 {
            run.violation(format!(
                "refused write {} committed as revision {} after revision {before}: a refused \
                 attempt left a revision",
                refusal.key, committed.version
            ));
        }
        let replay = probe.retry(api, refusal).await;
        match replay {
            Ok(replay)
                if replay.version == committed.version
                    && replay.operation.as_ref().map(|o| &o.id)
                        == committed.operation.as_ref().map(|o| &o.id) => {}
            other => run.violation(format!(
                "write {} retried again after its commit did not replay it: {other:?}",
                refusal.key
            )),
        }
    }
    match latest_revision(api, &probe.sandbox).await {
        Ok(latest) if latest == probe.revision => {}
        other => run.violation(format!(
            "the probe sandbox is at revision {other:?}; the probe's commits made {}",
            probe.revision
        )),
    }
}

/// (2) The gateway's PostgreSQL server restarted (`pg_ctl -m fast restart`) and killed
/// (SIGKILL of the postmaster, then started again) under the workload and a fanout each time.
/// The server is the run's own: the shared test server is never touched.
async fn postgres_restart(seed: u64) {
    let pg = match tokio::task::block_in_place(|| PrivatePostgres::start(None)) {
        Ok(pg) => pg,
        Err(why) => {
            eprintln!("SKIPPED postgres-restart: no private PostgreSQL cluster here ({why})");
            return;
        }
    };
    let config = ChaosConfig::from_env(seed, Duration::from_secs(10), 8);
    let store = TestStore {
        backend: Backend::Postgres,
        url: pg.url(),
        dir: tempfile::tempdir().unwrap(),
    };
    let mut run = Run::start_on(GatewayProcess::start(store), config.clone(), &[]).await;
    let pid = run.gateway.running_pid().unwrap();
    let mut api = patient_api(&run.gateway.endpoint());
    let mut probe = Probe::create(&mut api, &format!("pg-{seed}")).await;
    run.start_workload();
    let end = Instant::now() + config.duration;
    let mut refusals = Vec::new();
    let mut round = 0u32;
    while Instant::now() < end || round < 2 {
        round += 1;
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(300), Duration::from_secs(1)),
        )
        .await;
        let fanout = run.fanout();
        tokio::time::sleep(run.rng.between(Duration::ZERO, Duration::from_millis(300))).await;
        if round % 2 == 1 {
            run.fault("PostgreSQL fast restart");
            if let Err(e) = tokio::task::block_in_place(|| pg.restart_fast()) {
                panic!("pg_ctl restart: {e}");
            }
        } else {
            run.fault("SIGKILL of the PostgreSQL postmaster");
            tokio::task::block_in_place(|| pg.kill()).unwrap();
            // Down until a write was refused: the gateway waits ten seconds for a connection
            // before it gives up, so a shorter outage only delays writes.
            match probe.write(&mut api).await {
                Ok(response) => run.violation(format!(
                    "a write committed (revision {}) while PostgreSQL was down",
                    response.version
                )),
                Err(refusal) => {
                    check_refusal(&run, &refusal, Code::Unavailable, &["unavailable"]);
                    refusals.push(refusal);
                }
            }
            if let Err(e) = tokio::task::block_in_place(|| pg.start_server()) {
                panic!("PostgreSQL did not start again after its SIGKILL: {e}");
            }
        }
        fanout.await.unwrap();
    }
    retried_refusals_commit_once(&run, &mut api, &mut probe, &refusals).await;
    if let Err(status) = api
        .get_sandbox(pb::GetSandboxRequest {
            name: probe.sandbox.to_string(),
            workspace_scope: None,
        })
        .await
    {
        run.violation(format!("no read after PostgreSQL came back: {status}"));
    }
    if run.gateway.running_pid() != Some(pid) {
        run.violation("the gateway process did not survive PostgreSQL's restarts");
    }
    let report = run.finish("postgres-restart").await;
    assert!(
        !refusals.is_empty() && report.retried > 0,
        "the outages refused no write ({} probe refusals, {} workload writes retried): the \
         fault did not hit",
        refusals.len(),
        report.retried
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_postgres_restart_postgres() {
    postgres_restart(31).await;
}

/// Reads the gateway must serve while its store cannot write: a sandbox, the sessions, an
/// operation, and a wait on it.
async fn reads_served(run: &Run, api: &mut Api, sandbox: &str, operation: &str) {
    let mut failed = Vec::new();
    if let Err(s) = api
        .get_sandbox(pb::GetSandboxRequest {
            name: sandbox.to_string(),
            workspace_scope: None,
        })
        .await
    {
        failed.push(format!("GetSandbox: {s}"));
    }
    if let Err(s) = api.list_sessions(pb::ListSessionsRequest {}).await {
        failed.push(format!("ListSessions: {s}"));
    }
    if let Err(s) = api
        .get_operation(pb::GetOperationRequest {
            id: operation.into(),
        })
        .await
    {
        failed.push(format!("GetOperation: {s}"));
    }
    let wait = api
        .wait_for_apply(pb::WaitForApplyRequest {
            id: operation.into(),
            wait: openshell_e2e::wait_for(Duration::from_secs(5)),
        })
        .await;
    match wait {
        Ok(stream) => match stream.into_inner().message().await {
            Ok(Some(_)) => {}
            other => failed.push(format!("WaitForApply's first message: {other:?}")),
        },
        Err(s) => failed.push(format!("WaitForApply: {s}")),
    }
    if !failed.is_empty() {
        run.violation(format!(
            "reads refused with the store's disk full: {}",
            failed.join("; ")
        ));
    }
}

/// (8) The file system of the gateway's database full: a filler file written to ENOSPC
/// while the workload writes, for a few seconds, then removed. `dir` is that file system.
async fn disk_full(mut run: Run, dir: &Path, scenario: &str) {
    let seed = run.config.seed;
    let pid = run.gateway.running_pid().unwrap();
    let mut api = patient_api(&run.gateway.endpoint());
    let mut probe = Probe::create(&mut api, &format!("disk-{seed}")).await;
    let member = run.fleet.members[0].name.clone();
    let before = workload::write_recorded(
        &mut api,
        WriteKind::SandboxSetting {
            sandbox: member.clone(),
            value: "before-the-fault".into(),
        },
        format!("chaos-{seed}-before-the-fault"),
        &run.history,
    )
    .await;
    let Outcome::Committed {
        operation: Some(operation),
        ..
    } = before
    else {
        panic!("the write before the fault did not commit: {before:?}");
    };
    run.start_workload();
    let end = Instant::now() + run.config.duration;
    let mut refusals = Vec::new();
    let mut round = 0u32;
    while Instant::now() < end || round < 2 {
        round += 1;
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(300), Duration::from_secs(1)),
        )
        .await;
        run.fault("the gateway's database file system full");
        let filler = tokio::task::block_in_place(|| fill_to_enospc(dir));
        // Space the database's files already hold (a WAL that was reset, free pages) still
        // takes writes: probe until one needs more.
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            let revision = probe.revision;
            match probe.write(&mut api).await {
                Ok(response) if u64::from(response.version) == revision + 1 => {}
                Ok(response) => run.violation(format!(
                    "a probe write committed as revision {} after {revision}",
                    response.version
                )),
                Err(refusal) => {
                    check_refusal(
                        &run,
                        &refusal,
                        Code::ResourceExhausted,
                        &["disk space", "not made"],
                    );
                    match latest_revision(&mut api, &probe.sandbox).await {
                        Ok(latest) if latest == probe.revision => {}
                        other => run.violation(format!(
                            "after the refused write {} the probe sandbox is at revision \
                             {other:?}, not {}",
                            refusal.key, probe.revision
                        )),
                    }
                    refusals.push(refusal);
                    break;
                }
            }
            if Instant::now() > give_up {
                run.violation("no write was refused in 30 s with the database's disk full");
                break;
            }
        }
        reads_served(&run, &mut api, &member, &operation.id).await;
        // The workload keeps writing into the full disk a while.
        tokio::time::sleep(
            run.rng
                .between(Duration::from_secs(1), Duration::from_secs(3)),
        )
        .await;
        std::fs::remove_file(filler).unwrap();
    }
    retried_refusals_commit_once(&run, &mut api, &mut probe, &refusals).await;
    if run.gateway.running_pid() != Some(pid) {
        run.violation("the gateway process did not survive its disk filling up");
    }
    let report = run.finish(scenario).await;
    assert!(
        !refusals.is_empty() && report.retried > 0,
        "the full disk refused no write ({} probe refusals, {} workload writes retried): the \
         fault did not hit",
        refusals.len(),
        report.retried
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_gateway_disk_full_sqlite() {
    let config = ChaosConfig::from_env(41, Duration::from_secs(8), 4);
    let tmpfs = match Tmpfs::mount("16m") {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            eprintln!("SKIPPED gateway-disk-full: this test process cannot mount a tmpfs ({why})");
            return;
        }
    };
    let store = TestStore {
        backend: Backend::Sqlite,
        url: format!("sqlite://{}", tmpfs.path().join("gateway.db").display()),
        dir: tempfile::tempdir().unwrap(),
    };
    let run = Run::start_on(GatewayProcess::start(store), config, &[]).await;
    disk_full(run, tmpfs.path(), "gateway-disk-full").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_gateway_disk_full_postgres() {
    let config = ChaosConfig::from_env(42, Duration::from_secs(8), 4);
    let pg = match tokio::task::block_in_place(|| PrivatePostgres::start(Some("64m"))) {
        Ok(pg) => pg,
        Err(why) => {
            eprintln!(
                "SKIPPED gateway-disk-full: no private PostgreSQL cluster on a tmpfs ({why})"
            );
            return;
        }
    };
    let store = TestStore {
        backend: Backend::Postgres,
        url: pg.url(),
        dir: tempfile::tempdir().unwrap(),
    };
    let run = Run::start_on(GatewayProcess::start(store), config, &[]).await;
    disk_full(run, pg.tmpfs().unwrap(), "gateway-disk-full").await;
}
