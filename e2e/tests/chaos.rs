//! The fault-injection catalog (docs/reliability.md): each scenario runs real gateway and
//! supervisor processes on SQLite and on PostgreSQL, drives the seeded random workload,
//! injects its fault, and hands the histories to the checker, which fails the test on any
//! lost write, stuck operation, false APPLIED, refused configuration run, or supervisor that
//! did not converge after the heal.
//!
//! CI runs each once at small scale; `scripts/chaos.sh --seed N --duration 10m` runs them
//! long (the knobs are in `openshell_e2e::chaos`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use openshell_e2e::Backend;
use openshell_e2e::chaos::checker::whole_generation;
use openshell_e2e::chaos::{ChaosConfig, Run};
use openshell_supervisor::file_applier::state_dir::TEST_WRITE_DELAY_ENV;

/// Supervisors per run in CI: enough that a fanout is in flight when the fault lands, few
/// enough for a two-core runner. Long runs take more (`OPENSHELL_CHAOS_SUPERVISORS`).
const CI_SUPERVISORS: usize = 32;

/// (1) SIGKILL of the gateway in the middle of a fanout to every supervisor and of the
/// workload's stream of writes, again and again; it restarts on the same store.
async fn gateway_sigkill(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(10), CI_SUPERVISORS);
    let mut run = Run::start(backend, config.clone(), &[]).await;
    run.start_workload_with_lifecycle();
    let end = Instant::now() + config.duration;
    while Instant::now() < end {
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(500), Duration::from_secs(2)),
        )
        .await;
        let fanout = run.fanout();
        tokio::time::sleep(run.rng.between(Duration::ZERO, Duration::from_millis(300))).await;
        run.fault("SIGKILL gateway during a fanout");
        run.gateway.kill();
        tokio::time::sleep(run.rng.between(Duration::ZERO, Duration::from_secs(1))).await;
        run.gateway.restart();
        fanout.await.unwrap();
    }
    run.finish("gateway-sigkill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_gateway_sigkill_sqlite() {
    gateway_sigkill(Backend::Sqlite, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_gateway_sigkill_postgres() {
    gateway_sigkill(Backend::Postgres, 2).await;
}

/// (6) Supervisors SIGKILLed in the middle of applies, many times. Each step of writing the
/// state directory is slowed (the supervisor's test hook) so the kills land between stage
/// and activate, between two files, between the switch and the apply log. Right after each
/// kill the state directory must hold one whole configuration, old or new; restarted, the
/// supervisor must report the truth (the checker's APPLIED-against-apply-log check) and
/// converge.
async fn supervisor_sigkill_mid_apply(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(12), 6);
    let env = [(TEST_WRITE_DELAY_ENV.to_string(), "40ms".to_string())];
    let mut run = Run::start(backend, config.clone(), &env).await;
    run.start_workload();
    let endpoint = run.gateway.endpoint();
    let end = Instant::now() + config.duration;
    while Instant::now() < end {
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(100), Duration::from_millis(600)),
        )
        .await;
        let victim = run.rng.index(run.fleet.members.len());
        run.fault(format!("SIGKILL supervisor {victim} mid-apply"));
        let member = &mut run.fleet.members[victim];
        member.stop_supervisor();
        if let Err(mix) = whole_generation(&member.state_dir()) {
            let id = member.id.clone();
            run.violation(format!("after a SIGKILL of the supervisor of {id}: {mix}"));
            continue;
        }
        let member = &mut run.fleet.members[victim];
        member.start_supervisor(&endpoint);
    }
    run.finish("supervisor-sigkill-mid-apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_supervisor_sigkill_mid_apply_sqlite() {
    supervisor_sigkill_mid_apply(Backend::Sqlite, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_supervisor_sigkill_mid_apply_postgres() {
    supervisor_sigkill_mid_apply(Backend::Postgres, 7).await;
}

/// (9) Truncated and corrupted state files: a supervisor is stopped, one file of its active
/// configuration damaged (cut in half, emptied, or overwritten with garbage), and it is
/// started again. It must not run on or report the damaged configuration: it is replaced
/// from the gateway, whole (the checker's convergence includes the whole-generation check).
async fn corrupted_state_files(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(10), 6);
    let mut run = Run::start(backend, config.clone(), &[]).await;
    run.start_workload();
    let endpoint = run.gateway.endpoint();
    let end = Instant::now() + config.duration;
    let files = [
        "policy.json",
        "settings.json",
        "provider-env.json",
        "revisions.json",
    ];
    while Instant::now() < end {
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(300), Duration::from_secs(1)),
        )
        .await;
        let victim = run.rng.index(run.fleet.members.len());
        let file = files[run.rng.index(files.len())];
        let damage = run.rng.index(3);
        let member = &mut run.fleet.members[victim];
        member.stop_supervisor();
        let path = member.state_dir().join("active").join(file);
        let Ok(bytes) = std::fs::read(&path) else {
            // Nothing applied yet: nothing to damage.
            member.start_supervisor(&endpoint);
            continue;
        };
        let damaged: Vec<u8> = match damage {
            0 => bytes[..bytes.len() / 2].to_vec(),
            1 => Vec::new(),
            _ => b"\x00\xffnot json at all{{{".to_vec(),
        };
        std::fs::write(&path, damaged).unwrap();
        member.start_supervisor(&endpoint);
        run.fault(format!("damaged {file} of supervisor {victim} ({damage})"));
    }
    run.finish("corrupted-state-files").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_corrupted_state_files_sqlite() {
    corrupted_state_files(Backend::Sqlite, 9).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_corrupted_state_files_postgres() {
    corrupted_state_files(Backend::Postgres, 10).await;
}

/// Fills the file system at `dir` with a filler file until it reports ENOSPC.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 16 * 1024];
    while file.write_all(&chunk).is_ok() {}
    // What a partial chunk left: byte by byte to the last one.
    while file.write_all(&[0]).is_ok() {}
    path
}

fn remount(dir: &std::path::Path, option: &str) {
    assert!(
        try_remount(dir, option),
        "remount,{option} of {}",
        dir.display()
    );
}

/// Remounting read-only fails while a file is open for writing there (a slowed-down stage):
/// tried for a while, `false` if it never took.
fn try_remount(dir: &std::path::Path, option: &str) -> bool {
    for _ in 0..40 {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,{option}")])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        if status.success() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// (7) A supervisor's state directory full (a small tmpfs filled to ENOSPC) or read-only
/// (remounted so): its applies fail with the reason and are retried, its last-known-good
/// stays whole, it does not crash; once space returns it converges. Needs to mount a tmpfs
/// (root or CAP_SYS_ADMIN); without, the scenario says so and checks nothing.
async fn state_dir_full_or_read_only(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(10), 4);
    let mut run = Run::start(backend, config.clone(), &[]).await;
    let victim = 0;
    let dir = match run.mount_state_dir(victim, "2m") {
        Ok(dir) => dir,
        Err(why) => {
            eprintln!("SKIPPED state-dir-full: this test process cannot mount a tmpfs ({why})");
            return;
        }
    };
    run.fleet
        .wait_connected(&run.api(), Duration::from_secs(60))
        .await;
    run.start_workload();
    let end = Instant::now() + config.duration;
    while Instant::now() < end {
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(500), Duration::from_secs(1)),
        )
        .await;
        let read_only = run.rng.chance(50);
        let filler = if read_only {
            run.fault("state directory read-only");
            remount(&dir, "ro");
            None
        } else {
            run.fault("state directory full");
            Some(fill(&dir))
        };
        tokio::time::sleep(
            run.rng
                .between(Duration::from_secs(1), Duration::from_secs(3)),
        )
        .await;
        let member = &mut run.fleet.members[victim];
        let running = member.supervisor.as_mut().is_some_and(|s| s.is_running());
        let state_dir = member.state_dir();
        let id = member.id.clone();
        if !running {
            run.violation(format!(
                "the supervisor of {id} exited with its state directory full"
            ));
        }
        if let Err(mix) = whole_generation(&state_dir) {
            run.violation(format!("with the state directory of {id} full: {mix}"));
        }
        match filler {
            Some(filler) => std::fs::remove_file(filler).unwrap(),
            None => remount(&dir, "rw"),
        }
    }
    run.finish("state-dir-full").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_state_dir_full_sqlite() {
    state_dir_full_or_read_only(Backend::Sqlite, 11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_state_dir_full_postgres() {
    state_dir_full_or_read_only(Backend::Postgres, 12).await;
}

/// (10) Two supervisors started with the same sandbox credential, each with a state
/// directory of its own, while the workload writes and one of them is now and then killed and
/// started again. One process owns the sandbox's session: the other is refused with a reason it
/// logs, and retries, so it takes the sandbox only when the owner is gone. Checked: at the end
/// one twin holds the session and the other logs its refusal; every operation of the sandbox
/// resolves once along a legal path, each APPLIED is in one of the two apply logs, nothing is
/// lost, and the owner ends on the store's configuration.
async fn shared_credential(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(10), 3);
    let mut run = Run::start(backend, config.clone(), &[]).await;
    let endpoint = run.gateway.endpoint();
    let first = &run.fleet.members[0];
    let mut twin = openshell_e2e::chaos::Member {
        id: first.id.clone(),
        name: first.name.clone(),
        credential: first.credential.clone(),
        dir: first.dir.with_file_name(format!("{}-twin", first.name)),
        supervisor: None,
        env: Vec::new(),
    };
    twin.start_supervisor(&endpoint);
    run.fleet.members.push(twin);
    run.start_workload();
    let end = Instant::now() + config.duration;
    let twins = [0, run.fleet.members.len() - 1];
    while Instant::now() < end {
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(500), Duration::from_secs(2)),
        )
        .await;
        let victim = twins[run.rng.index(2)];
        run.fault(format!("restart of twin supervisor {victim}"));
        run.fleet.members[victim].start_supervisor(&endpoint);
    }
    let api = run.api();
    let sandbox = run.fleet.members[0].id.clone();
    let holder = openshell_e2e::eventually(
        "one twin to hold the session",
        Duration::from_secs(60),
        || {
            let api = api.clone();
            let sandbox = sandbox.clone();
            let members = &run.fleet.members;
            async move {
                let session = openshell_e2e::inspect(&api, &sandbox).await.session_id;
                let accepted = format!("session_id={session}");
                twins.into_iter().find(|&t| {
                    !session.is_empty() && members[t].logged("session accepted", &accepted)
                })
            }
        },
    )
    .await;
    let refused = twins[usize::from(holder == twins[0])];
    openshell_e2e::eventually(
        "the other twin to log its refusal",
        Duration::from_secs(60),
        || async {
            run.fleet.members[refused]
                .logged(
                    "gateway rejected the session",
                    "two supervisors are using the same sandbox credential",
                )
                .then_some(())
        },
    )
    .await;
    // The refused twin keeps its last-known-good; only the owner must converge.
    run.fleet.members[refused].stop_supervisor();
    run.finish("shared-credential").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_shared_credential_sqlite() {
    shared_credential(Backend::Sqlite, 13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_shared_credential_postgres() {
    shared_credential(Backend::Postgres, 14).await;
}

/// The random mode: each round picks one fault of the catalog by the seed and lands it at a
/// random moment of the workload: a gateway SIGKILL, a supervisor SIGKILL mid-apply, a damaged
/// state file, a second supervisor with a sandbox's credential for a while (10), and the state
/// directory of one supervisor full or read-only for a while (7; only where this process may
/// mount a tmpfs). CI runs a few seeds; `scripts/chaos.sh --scenario random` runs it long.
async fn random_faults(backend: Backend, seed: u64) {
    let config = ChaosConfig::from_env(seed, Duration::from_secs(10), 8);
    let env = [(TEST_WRITE_DELAY_ENV.to_string(), "20ms".to_string())];
    let mut run = Run::start(backend, config.clone(), &env).await;
    let endpoint = run.gateway.endpoint();
    // Member 0's state directory on a tmpfs of its own, to fill and make read-only.
    let small_dir = match run.mount_state_dir(0, "2m") {
        Ok(dir) => Some(dir),
        Err(why) => {
            eprintln!("random mode without full or read-only state directories: {why}");
            None
        }
    };
    run.fleet
        .wait_connected(&run.api(), Duration::from_secs(60))
        .await;
    run.start_workload_with_lifecycle();
    let fleet_size = run.fleet.members.len();
    let end = Instant::now() + config.duration;
    let mut twins = 0;
    while Instant::now() < end {
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(200), Duration::from_secs(1)),
        )
        .await;
        let victim = run.rng.index(fleet_size);
        let kinds = if small_dir.is_some() { 5 } else { 4 };
        match run.rng.below(kinds) {
            0 => {
                run.fault("SIGKILL gateway");
                run.gateway.kill();
                tokio::time::sleep(run.rng.between(Duration::ZERO, Duration::from_millis(800)))
                    .await;
                run.gateway.restart();
            }
            1 => {
                run.fault(format!("SIGKILL supervisor {victim}"));
                let member = &mut run.fleet.members[victim];
                member.stop_supervisor();
                let checked = whole_generation(&member.state_dir());
                let id = member.id.clone();
                member.start_supervisor(&endpoint);
                if let Err(mix) = checked {
                    run.violation(format!("after a SIGKILL of the supervisor of {id}: {mix}"));
                }
            }
            2 => {
                run.fault(format!("damaged revisions.json of supervisor {victim}"));
                let member = &mut run.fleet.members[victim];
                member.stop_supervisor();
                let path = member.state_dir().join("active/revisions.json");
                if let Ok(bytes) = std::fs::read(&path) {
                    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
                }
                member.start_supervisor(&endpoint);
            }
            3 => {
                // Kept among the members, stopped: the checker reads its apply log too, in
                // case it ever held the session.
                twins += 1;
                run.fault(format!(
                    "a second supervisor with the credential of {victim}"
                ));
                let original = &run.fleet.members[victim];
                let mut twin = openshell_e2e::chaos::Member {
                    id: original.id.clone(),
                    name: original.name.clone(),
                    credential: original.credential.clone(),
                    dir: original
                        .dir
                        .with_file_name(format!("{}-twin-{twins}", original.name)),
                    supervisor: None,
                    env: Vec::new(),
                };
                twin.start_supervisor(&endpoint);
                tokio::time::sleep(
                    run.rng
                        .between(Duration::from_secs(1), Duration::from_secs(3)),
                )
                .await;
                twin.stop_supervisor();
                run.fleet.members.push(twin);
            }
            _ => {
                let Some(dir) = &small_dir else { continue };
                // A stage writing slowly keeps files open for writing: then it is filled.
                let read_only = run.rng.chance(50) && try_remount(dir, "ro");
                let filler = if read_only {
                    run.fault("state directory of supervisor 0 read-only");
                    None
                } else {
                    run.fault("state directory of supervisor 0 full");
                    Some(fill(dir))
                };
                tokio::time::sleep(
                    run.rng
                        .between(Duration::from_secs(1), Duration::from_secs(3)),
                )
                .await;
                let member = &mut run.fleet.members[0];
                let running = member.supervisor.as_mut().is_some_and(|s| s.is_running());
                let id = member.id.clone();
                let checked = whole_generation(&member.state_dir());
                match filler {
                    Some(filler) => std::fs::remove_file(filler).unwrap(),
                    None => remount(dir, "rw"),
                }
                if !running {
                    run.violation(format!(
                        "the supervisor of {id} exited with its state directory full or read-only"
                    ));
                }
                if let Err(mix) = checked {
                    run.violation(format!(
                        "with the state directory of {id} full or read-only: {mix}"
                    ));
                }
            }
        }
    }
    run.finish("random").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_random_seed_21_sqlite() {
    random_faults(Backend::Sqlite, 21).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_random_seed_22_postgres() {
    random_faults(Backend::Postgres, 22).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_random_seed_23_sqlite() {
    random_faults(Backend::Sqlite, 23).await;
}
