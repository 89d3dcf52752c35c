//! Fault-injection scenarios on several gateway processes and on one overloaded gateway
//! (docs/reliability.md): a replica of three SIGKILLed right after a fanout it committed,
//! and 200 callers waiting for their writes to apply while global changes fan out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use openshell_e2e::chaos::replicas::{
    addresses_from, api_as, rss_kib_of, sessions_by_gateway, start_replicas, wait_sessions_listed,
};
use openshell_e2e::chaos::workload::{self, SANDBOX_SETTING, WriteKind};
use openshell_e2e::chaos::{ChaosConfig, Fleet, GatewayProcess, Run};
use openshell_e2e::{Api, Backend, TestStore, raw_setting, sandbox_ref, to_sandbox};
use openshell_gateway::wait_limits::RETRY_PUSHBACK_METADATA;
use openshell_proto::v1 as pb;
use openshell_supervisor::file_applier::state_dir::TEST_WRITE_DELAY_ENV;
use tonic::Code;

/// How long supervisors may take to show up on a live replica after theirs was killed.
const RECONNECT_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `run.finish`, and on a violation shows the logs of the scenario's other gateways too
/// and keeps their files.
async fn finish_showing(run: Run, scenario: &str, others: &mut [GatewayProcess]) {
    if let Err(panic) = AssertUnwindSafe(run.finish(scenario)).catch_unwind().await {
        for gateway in others {
            let kept = gateway.keep_files();
            eprintln!("(kept in {})\n{}", kept.display(), gateway.logs());
        }
        std::panic::resume_unwind(panic);
    }
}

/// (3) Three replicas on one PostgreSQL database; every supervisor is given all three
/// addresses (rotated, so each replica holds some sessions). The workload writes through
/// replica-0, which stays up. Again and again a global change is written through another
/// replica (the one holding the most sessions), and that replica gets SIGKILL as soon as the
/// write is committed: its own sessions have some of the fanout's frames, its hints to the
/// other replicas may not have left. Checked on the spot: every supervisor is listed by a live
/// replica again (it reconnected elsewhere); at the end, the checker's guarantees (the fleet
/// operations end, the killed replica's fanout intents reach every supervisor by replay,
/// nothing lost, everyone converged). The killed replica is restarted before the next kill.
async fn replica_killed(seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(10), 12);
    let mut replicas = start_replicas(3).await;
    let writer = replicas.remove(0);
    let mut others = replicas;
    let root = writer.store.dir.path().to_path_buf();
    let mut api = writer.api();
    workload::create_provider(&mut api).await;
    let fleet = {
        let all: Vec<&GatewayProcess> = std::iter::once(&writer).chain(&others).collect();
        Fleet::start_each(&mut api, &root, config.supervisors, &[], |n| {
            addresses_from(&all, n)
        })
        .await
    };
    let ids = fleet.ids();
    {
        let all: Vec<&GatewayProcess> = std::iter::once(&writer).chain(&others).collect();
        if let Err(missing) = wait_sessions_listed(&all, &ids, RECONNECT_DEADLINE).await {
            panic!("no replica lists the sessions of {missing:?}");
        }
    }
    let mut run = Run::assemble(Backend::Postgres, config.clone(), writer, fleet);
    run.start_workload();
    let end = Instant::now() + config.duration;
    let mut kills = 0;
    let mut moved = 0;
    while kills < 3 || Instant::now() < end {
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(500), Duration::from_millis(1500)),
        )
        .await;
        // The replica with the most to move: others[i] is index i + 1 of `all`.
        let held = {
            let all: Vec<&GatewayProcess> = std::iter::once(&run.gateway).chain(&others).collect();
            sessions_by_gateway(&all).await
        };
        let counts: Vec<usize> = (1..=others.len())
            .map(|index| held.values().filter(|at| **at == index).count())
            .collect();
        let most = counts.iter().copied().max().unwrap_or(0);
        let candidates: Vec<usize> = (0..others.len()).filter(|i| counts[*i] == most).collect();
        let victim = candidates[run.rng.index(candidates.len())];

        kills += 1;
        let key = format!("chaos-{seed}-replica-fanout-{kills}");
        let kind = WriteKind::GlobalSetting {
            value: 60_000 + i64::from(kills),
        };
        let mut through_victim = others[victim].api();
        workload::write_recorded(&mut through_victim, kind, key, &run.history).await;
        run.fault(format!(
            "SIGKILL replica-{} right after a fanout it committed ({} sessions)",
            victim + 1,
            counts[victim]
        ));
        others[victim].kill();
        moved += counts[victim];

        let all: Vec<&GatewayProcess> = std::iter::once(&run.gateway).chain(&others).collect();
        let reconnected = wait_sessions_listed(&all, &ids, RECONNECT_DEADLINE).await;
        tokio::time::sleep(run.rng.between(Duration::ZERO, Duration::from_secs(1))).await;
        others[victim].restart();
        if let Err(missing) = reconnected {
            run.violation(format!(
                "{RECONNECT_DEADLINE:?} after replica-{} was killed no live replica lists the \
                 sessions of {missing:?}",
                victim + 1
            ));
            // One such round tells it; more would only outlast the test's time limit.
            break;
        }
    }
    if moved == 0 {
        run.violation("no killed replica held a session: nothing was moved");
    }
    eprintln!("replica-killed: {kills} kills, {moved} sessions moved");
    finish_showing(run, "replica-killed", &mut others).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_replica_killed_postgres() {
    replica_killed(31).await;
}

/// Callers of the overload scenario, spread over this many operator tokens.
const CALLERS: usize = 200;
const TOKENS: usize = 4;
/// Writes each caller makes at least, one after the other (more while the run's duration
/// lasts).
const WRITES_PER_CALLER: usize = 2;
/// The bound on the gateway's memory growth under the load: generous (the load itself
/// needs a few MiB), far below what waits held without bound would take.
const MAX_RSS_GROWTH_KIB: u64 = 256 * 1024;
/// Callers must all have an answer by then (after the run's duration); one still waiting
/// means a place never given back or a refusal that never lifts.
const CALLERS_DEADLINE: Duration = Duration::from_secs(600);

/// The server-side wait each waiting call asks for.
fn wait_options() -> Option<pb::WaitOptions> {
    openshell_e2e::wait_for(Duration::from_secs(60))
}

/// The retry delay a refusal carries, or why it carries none.
fn retry_hint(status: &tonic::Status) -> Result<Duration, String> {
    let value = status
        .metadata()
        .get(RETRY_PUSHBACK_METADATA)
        .ok_or_else(|| {
            format!(
                "a RESOURCE_EXHAUSTED without {RETRY_PUSHBACK_METADATA}: {}",
                status.message()
            )
        })?;
    let millis: u64 = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{RETRY_PUSHBACK_METADATA} is not a number: {value:?}"))?;
    Ok(Duration::from_millis(millis))
}

/// What one caller's writes came to.
#[derive(Debug, Default)]
struct CallerReport {
    /// Idempotency key → the operation it ended with.
    answers: Vec<(String, pb::Operation)>,
    refusals: u64,
    /// Calls cut off by the client's deadline or the connection, and retried.
    retried: u64,
}

/// Sends `call` until it is neither refused for load nor cut off: a refusal is retried after
/// the delay it names, with the same request (so the same idempotency key).
async fn until_answered<T, F, Fut>(report: &mut CallerReport, mut call: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    loop {
        match call().await {
            Ok(answer) => return Ok(answer),
            Err(status) if status.code() == Code::ResourceExhausted => {
                report.refusals += 1;
                tokio::time::sleep(retry_hint(&status)?).await;
            }
            Err(status)
                if matches!(
                    status.code(),
                    Code::DeadlineExceeded | Code::Unavailable | Code::Cancelled
                ) =>
            {
                report.retried += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => {
                return Err(format!("{:?}: {}", status.code(), status.message()));
            }
        }
    }
}

/// Follows operation `id` with `WaitForApply` streams until it is terminal.
async fn follow(
    api: &mut Api,
    id: &str,
    report: &mut CallerReport,
) -> Result<pb::Operation, String> {
    loop {
        let mut stream = until_answered(report, || {
            let mut api = api.clone();
            let id = id.to_string();
            async move {
                api.wait_for_apply(pb::WaitForApplyRequest {
                    id,
                    wait: wait_options(),
                })
                .await
            }
        })
        .await?
        .into_inner();
        let mut last = None;
        loop {
            match stream.message().await {
                Ok(Some(op)) => last = Some(op),
                Ok(None) => break,
                // Cut off mid-stream: open another.
                Err(_) => {
                    report.retried += 1;
                    break;
                }
            }
        }
        if let Some(op) = last
            && openshell_e2e::state(&op).is_terminal()
        {
            return Ok(op);
        }
    }
}

/// One caller: `WRITES_PER_CALLER` sandbox setting writes, each with its own key. Three of
/// four callers write with `WAIT_FOR_APPLY` (and follow the operation if their wait ended
/// first); the fourth writes `COMMIT_ONLY` and follows with a `WaitForApply` stream.
async fn caller(
    mut api: Api,
    index: usize,
    sandbox: String,
    seed: u64,
    until: Instant,
) -> Result<CallerReport, String> {
    let mut report = CallerReport::default();
    let mut k = 0;
    while k < WRITES_PER_CALLER || Instant::now() < until {
        k += 1;
        let key = format!("overload-{seed}-{index}-{k}");
        let waiting = index % 4 != 3;
        let request = pb::UpdateConfigRequest {
            settings: vec![raw_setting(SANDBOX_SETTING, &format!("load-{index}-{k}"))],
            request_id: key.clone(),
            mode: if waiting {
                pb::UpdateMode::WaitForApply
            } else {
                pb::UpdateMode::CommitOnly
            } as i32,
            wait: if waiting { wait_options() } else { None },
            ..to_sandbox(&sandbox)
        };
        let answer = until_answered(&mut report, || {
            let mut api = api.clone();
            let request = request.clone();
            async move { api.update_config(request).await }
        })
        .await
        .map_err(|e| format!("write {key}: {e}"))?
        .into_inner();
        let op = answer
            .operation
            .ok_or_else(|| format!("write {key}: an answer without its operation"))?;
        let op = if openshell_e2e::state(&op).is_terminal() {
            op
        } else {
            follow(&mut api, &op.id, &mut report)
                .await
                .map_err(|e| format!("following {key}: {e}"))?
        };
        report.answers.push((key, op));
    }
    Ok(report)
}

/// Every operation of `sandbox`, all pages.
async fn operations_of(api: &mut Api, sandbox: &str) -> Vec<pb::Operation> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = api
            .list_operations(pb::ListOperationsRequest {
                sandbox: sandbox_ref(sandbox),
                states: Vec::new(),
                page_size: 1000,
                page_token,
            })
            .await
            .unwrap()
            .into_inner();
        all.extend(page.operations);
        if page.next_page_token.is_empty() {
            return all;
        }
        page_token = page.next_page_token;
    }
}

/// (11) One gateway, 200 concurrent callers over four operator tokens (each past its 32
/// waits), each writing its sandbox (two writes at least, more for the run's duration) with `WAIT_FOR_APPLY` or following its operation with a
/// `WaitForApply` stream, while global changes fan out to every supervisor. Every refusal
/// must carry a retry delay, which the caller waits before retrying with the same key.
/// Checked: every caller ends with a terminal operation; each key names exactly one
/// operation, the caller's; the gateway's resident memory grows by less than 256 MiB at its
/// peak; after the load each token again gets all 32 of its places (none leaked) and no
/// more; then the checker's guarantees (fanouts end, supervisors converge).
async fn overload(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(5), 8);
    let store = TestStore::new(backend).await;
    let root = store.dir.path().to_path_buf();
    let tokens: Vec<String> = (0..TOKENS)
        .map(|n| format!("load-{n}-{seed}-operator-token"))
        .collect();
    let extra: Vec<String> = tokens
        .iter()
        .enumerate()
        .flat_map(|(n, token)| ["--operator-token".to_string(), format!("load-{n}={token}")])
        .collect();
    let gateway = GatewayProcess::start_with(store, &extra);
    let mut api = gateway.api();
    workload::create_provider(&mut api).await;
    // Applies slowed a little, so waits overlap and the bound is reached.
    let env = [(TEST_WRITE_DELAY_ENV.to_string(), "10ms".to_string())];
    let endpoint = gateway.endpoint();
    let fleet = Fleet::start_each(&mut api, &root, config.supervisors, &env, |_| {
        endpoint.clone()
    })
    .await;
    fleet.wait_connected(&api, RECONNECT_DEADLINE).await;
    let mut run = Run::assemble(backend, config.clone(), gateway, fleet);
    let pid = run.gateway.pid().unwrap();
    let before = rss_kib_of(pid).unwrap();
    let peak = Arc::new(AtomicU64::new(before));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Some(rss) = rss_kib_of(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let apis: Vec<Api> = tokens
        .iter()
        .map(|token| api_as(&endpoint, token, Duration::from_secs(90)))
        .collect();
    let sandboxes: Vec<String> = run.fleet.members.iter().map(|m| m.name.clone()).collect();
    let until = Instant::now() + config.duration;
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let api = apis[i % TOKENS].clone();
            let sandbox = sandboxes[i % sandboxes.len()].clone();
            tokio::spawn(caller(api, i, sandbox, seed, until))
        })
        .collect();
    let started = Instant::now();
    let mut fanouts = 0;
    while !callers.iter().all(|c| c.is_finished())
        && started.elapsed() < config.duration + CALLERS_DEADLINE
    {
        run.fanout().await.unwrap();
        fanouts += 1;
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(300), Duration::from_millis(800)),
        )
        .await;
    }
    let unfinished = callers.iter().filter(|c| !c.is_finished()).count();
    if unfinished > 0 {
        run.violation(format!(
            "{unfinished} of {CALLERS} callers had no answer {CALLERS_DEADLINE:?} after the \
             run's duration (a wait's place never given back, or a refusal that never lifts)"
        ));
    }
    let mut reports = Vec::new();
    for (i, c) in callers.into_iter().enumerate() {
        if !c.is_finished() {
            c.abort();
            continue;
        }
        match c.await.unwrap() {
            Ok(report) => reports.push(report),
            Err(why) => run.violation(format!("caller {i}: {why}")),
        }
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.await.unwrap();
    let after = rss_kib_of(pid).unwrap();
    let peak = peak.load(Ordering::Relaxed);

    let refusals: u64 = reports.iter().map(|r| r.refusals).sum();
    let retried: u64 = reports.iter().map(|r| r.retried).sum();
    if refusals == 0 {
        run.violation("no call was refused: the load never reached max_waits_per_token");
    }
    // Each key names one operation, the one its caller ended with.
    let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
    for sandbox in &sandboxes {
        for op in operations_of(&mut api, sandbox).await {
            by_key
                .entry(op.idempotency_key.clone())
                .or_default()
                .push(op.id);
        }
    }
    let mut answers = 0;
    for (key, op) in reports.iter().flat_map(|r| &r.answers) {
        answers += 1;
        if !openshell_e2e::state(op).is_terminal() {
            run.violation(format!("the caller of {key} ended on {op:?}"));
        }
        match by_key.get(key).map(Vec::as_slice) {
            Some([only]) if *only == op.id => {}
            other => run.violation(format!(
                "key {key}: the caller got operation {}, the store holds {other:?}",
                op.id
            )),
        }
    }
    let growth = peak.saturating_sub(before);
    eprintln!(
        "overload on {backend:?}: {CALLERS} callers on {TOKENS} tokens, {answers} answers, \
         {refusals} refusals with a retry hint, {retried} calls cut off and retried, \
         {fanouts} fanouts; gateway RSS {before} KiB before, {peak} KiB at the peak (+{growth} \
         KiB), {after} KiB after"
    );
    if growth > MAX_RSS_GROWTH_KIB {
        run.violation(format!(
            "the gateway's resident memory grew by {growth} KiB under the load (from {before} \
             to {peak} KiB), more than {MAX_RSS_GROWTH_KIB} KiB"
        ));
    }
    places_back(&mut run, &apis[0]).await;
    run.finish("overload").await;
}

/// After the load, a token has all its places again, and no more: 32 waits on an operation
/// that cannot end yet (its sandbox's supervisor stopped) are all accepted, the 33rd is
/// refused with a retry delay. Then the supervisor starts again and the operation applies.
async fn places_back(run: &mut Run, api: &Api) {
    const PLACES: usize = 32;
    let endpoint = run.gateway.endpoint();
    let sandbox = run.fleet.members[0].name.clone();
    run.fleet.members[0].stop_supervisor();
    let pending = run
        .api()
        .update_config(pb::UpdateConfigRequest {
            settings: vec![raw_setting(SANDBOX_SETTING, "after-the-load")],
            ..to_sandbox(&sandbox)
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    let mut held = Vec::new();
    for n in 0..=PLACES {
        let answer = api
            .clone()
            .wait_for_apply(pb::WaitForApplyRequest {
                id: pending.id.clone(),
                wait: wait_options(),
            })
            .await;
        match (n < PLACES, answer) {
            (true, Ok(stream)) => held.push(stream),
            (true, Err(status)) => {
                run.violation(format!(
                    "after the load, wait {} of a token's {PLACES} places was refused (a place \
                     never given back): {status:?}",
                    n + 1
                ));
                break;
            }
            (false, Ok(_)) => run.violation(format!(
                "after the load a token held {} waits, past its bound of {PLACES}",
                PLACES + 1
            )),
            (false, Err(status)) => {
                if status.code() != Code::ResourceExhausted {
                    run.violation(format!("wait {} past the bound: {status:?}", PLACES + 1));
                } else if let Err(why) = retry_hint(&status) {
                    run.violation(why);
                }
            }
        }
    }
    drop(held);
    run.fleet.members[0].start_supervisor(&endpoint);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_overload_sqlite() {
    overload(Backend::Sqlite, 41).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_overload_postgres() {
    overload(Backend::Postgres, 42).await;
}
