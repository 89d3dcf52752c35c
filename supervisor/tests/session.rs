//! The supervisor against an in-process fake gateway: hello contents, rejection, poll mode and
//! push mode over real gRPC.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use openshell_core::Secret;
use openshell_proto::v1::gateway_message::Payload as Out;
use openshell_proto::v1::{
    ConfigApplyStatus, GatewayHeartbeat, PolicyLoadStatus, PolicyStatus, SupervisorHello,
};
use openshell_supervisor::{
    Applier, FileApplier, FileApplierConfig, Identity, LocalPolicy, MemoryApplier, SessionState,
    Supervisor, SupervisorError, SupervisorOptions, SupervisorStatus, WriteFault, WriteStep,
    run_session,
};
use prost::Message;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

fn accept(apply: bool) -> Answer {
    Answer::Accept {
        apply,
        heartbeat_ms: 0,
        poll_ms: 0,
    }
}

/// A running supervisor and the means to stop it.
struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), SupervisorError>>,
    supervisor: Supervisor,
}

impl Running {
    fn start(options: SupervisorOptions, applier: Arc<dyn Applier>) -> Self {
        let supervisor = Supervisor::new(options, applier);
        let (stop, stopped) = oneshot::channel::<()>();
        let runner = supervisor.clone();
        let task = tokio::spawn(async move {
            runner
                .run(async {
                    let _ = stopped.await;
                })
                .await
        });
        Self {
            stop: Some(stop),
            task,
            supervisor,
        }
    }

    /// Waits until the supervisor's status satisfies `cond`; panics after a generous deadline.
    async fn wait_status(&self, what: &str, cond: impl Fn(&SupervisorStatus) -> bool) {
        let mut status = self.supervisor.status();
        tokio::time::timeout(Duration::from_secs(20), status.wait_for(|s| cond(s)))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for: {what}"))
            .unwrap();
    }

    async fn stop(mut self) -> Result<(), SupervisorError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("supervisor did not stop")
            .unwrap()
    }
}

async fn first_hello(options: SupervisorOptions, gateway: &FakeGateway) -> SupervisorHello {
    let running = Running::start(options, Arc::new(MemoryApplier::new()));
    gateway
        .wait_until("a hello", |r| !r.hellos.is_empty())
        .await;
    running.stop().await.unwrap();
    gateway.recorded(|r| r.hellos[0].clone())
}

#[tokio::test]
async fn hello_default_advertises_apply() {
    let gateway = FakeGateway::start(accept(false)).await;
    let hello = first_hello(fast_options(&gateway), &gateway).await;
    assert_eq!(hello.sandbox_id, SANDBOX);
    assert!(!hello.instance_id.is_empty());
    // The credential travels as call metadata (which the fake checked), never in a message.
    assert!(
        !contains(&hello.encode_to_vec(), CREDENTIAL.as_bytes()),
        "the hello carries the credential"
    );
    assert_eq!(gateway.recorded(|r| r.unauthenticated), 0);
    assert_eq!(hello.protocol_revision, 1);
    assert_eq!(hello.supervisor_version, env!("CARGO_PKG_VERSION"));
    assert!(hello.supports_config_snapshots);
    assert!(hello.supports_config_apply);
    assert_eq!(hello.image_policy, "");
    assert!(!hello.local_policy_override);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn a_wrong_credential_is_refused_on_every_call() {
    let gateway = FakeGateway::start(accept(false)).await;
    let mut options = fast_options(&gateway);
    options.identity = Identity::new(SANDBOX, Secret::new("not-the-credential"));
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(options, applier.clone());
    // The sessions are all refused, again and again, and every hello counts as refused.
    // With no session accepted, nothing may start the sandbox, so nothing is polled either.
    gateway
        .wait_until("refused sessions", |r| {
            r.hellos.len() >= 3 && r.unauthenticated >= r.hellos.len() as u64
        })
        .await;
    gateway.recorded(|r| {
        assert!(r.unauthenticated <= r.hellos.len() as u64, "no poll on top");
        assert_eq!(r.get_config_calls, 0);
        assert!(r.reports.is_empty());
    });
    assert!(applier.active().is_none());
    running.stop().await.unwrap();
}

#[tokio::test]
async fn hello_legacy_protocol_revision_zero() {
    let gateway = FakeGateway::start(accept(false)).await;
    let mut options = fast_options(&gateway);
    options.protocol_revision = 0;
    let hello = first_hello(options, &gateway).await;
    assert_eq!(hello.protocol_revision, 0);
    assert!(!hello.supports_config_snapshots);
    assert!(!hello.supports_config_apply);
}

#[tokio::test]
async fn hello_no_config_apply_is_snapshots_only() {
    let gateway = FakeGateway::start(accept(false)).await;
    let mut options = fast_options(&gateway);
    options.config_apply = false;
    let hello = first_hello(options, &gateway).await;
    assert_eq!(hello.protocol_revision, 1);
    assert!(hello.supports_config_snapshots);
    assert!(!hello.supports_config_apply);
}

#[tokio::test]
async fn hello_announces_local_policy_override() {
    let gateway = FakeGateway::start(accept(false)).await;
    let mut options = fast_options(&gateway);
    options.local_policy =
        Some(LocalPolicy::parse(Path::new("local.yaml"), "version: 1\n").unwrap());
    let hello = first_hello(options, &gateway).await;
    assert!(hello.local_policy_override);
}

#[tokio::test]
async fn permanent_rejection_stops_the_supervisor() {
    let gateway = FakeGateway::start(Answer::Reject {
        reason: "credential does not match".into(),
        permanent: true,
    })
    .await;
    let options = fast_options(&gateway);
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        run_session(
            options,
            Arc::new(MemoryApplier::new()),
            std::future::pending(),
        ),
    )
    .await
    .expect("a permanent rejection must end the session loop");
    match result {
        Err(SupervisorError::Rejected { reason }) => {
            assert!(reason.contains("credential does not match"), "{reason}")
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(
        gateway.recorded(|r| r.hellos.len()),
        1,
        "no retry after a permanent rejection"
    );
}

#[tokio::test]
async fn transient_rejection_is_retried_and_nothing_starts_until_a_session_is_accepted() {
    let gateway = FakeGateway::start(Answer::Reject {
        reason: "replica draining".into(),
        permanent: false,
    })
    .await;
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(fast_options(&gateway), applier.clone());
    gateway
        .wait_until("three hellos", |r| r.hellos.len() >= 3)
        .await;
    // One process, one instance id, whichever session it opens.
    gateway.recorded(|r| {
        assert!(
            r.hellos
                .iter()
                .all(|h| h.instance_id == r.hellos[0].instance_id)
        )
    });
    // No session negotiated poll: configuration the poll RPCs would serve starts nothing.
    assert_eq!(gateway.recorded(|r| r.get_config_calls), 0);
    assert!(applier.active().is_none());
    // A session negotiated as poll: the first successful poll starts the sandbox.
    gateway.set_answer(accept(false));
    gateway
        .wait_until("a LOADED report", |r| {
            r.reports
                .iter()
                .any(|p| p.load_status() == PolicyLoadStatus::Loaded)
        })
        .await;
    assert!(applier.active().is_some());
    running.stop().await.unwrap();
}

/// A bootstrap that failed is a refused startup: neither the rest of that session nor the
/// refused reconnects let a poll start the sandbox, even once polled configuration would
/// apply; the next accepted bootstrap does.
#[tokio::test]
async fn a_refused_bootstrap_does_not_let_polling_start_the_sandbox() {
    let gateway = FakeGateway::start(accept(true)).await;
    let applier = Arc::new(MemoryApplier::failing("on-apply hook exited with status 3"));
    let running = Running::start(fast_options(&gateway), applier.clone());
    gateway
        .wait_until("a bootstrap result", |r| !r.bootstrap_results().is_empty())
        .await;
    let refused = gateway.recorded(|r| r.bootstrap_results()[0].clone());
    assert!(!refused.applied);
    assert!(!refused.kept_last_known_good, "nothing ran before");
    // The cause goes away, but the gateway ends the session and refuses the next ones.
    applier.set_failure(None);
    gateway.set_answer(Answer::Reject {
        reason: "bootstrap failed on the supervisor".into(),
        permanent: false,
    });
    gateway.close_session();
    gateway
        .wait_until("two refused reconnects", |r| r.hellos.len() >= 3)
        .await;
    running
        .wait_status("the session down", |s| {
            s.session == SessionState::Disconnected
        })
        .await;
    assert_eq!(gateway.recorded(|r| r.get_config_calls), 0, "no poll");
    assert!(applier.active().is_none(), "nothing started");

    gateway.set_answer(accept(true));
    gateway
        .wait_until("an applied bootstrap", |r| {
            r.bootstrap_results().iter().any(|b| b.applied)
        })
        .await;
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);
    assert_eq!(
        gateway.recorded(|r| r.get_config_calls),
        0,
        "started by push"
    );
    running.stop().await.unwrap();
}

#[tokio::test]
async fn poll_mode_applies_and_reports_loaded_with_snapshot_revisions() {
    let gateway = FakeGateway::start(accept(false)).await;
    gateway.set_config(snapshot_pair(7, "env-a"));
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(fast_options(&gateway), applier.clone());

    gateway
        .wait_until("a report", |r| !r.reports.is_empty())
        .await;
    let report = gateway.recorded(|r| r.reports[0].clone());
    assert_eq!(report.load_status(), PolicyLoadStatus::Loaded);
    assert_eq!(report.sandbox_id, SANDBOX);
    // Upstream's fields say the same.
    assert_eq!(report.status(), PolicyStatus::Loaded);
    assert_eq!(report.version, 7);
    assert!(!report.failed_closed);
    let revisions = report.revisions.unwrap();
    let (config, _) = snapshot_pair(7, "env-a");
    assert_eq!(revisions.policy_revision, 7);
    assert_eq!(revisions.policy_hash, config.policy_hash);
    assert_eq!(revisions.global_settings_revision, 3);
    assert_eq!(revisions.sandbox_settings_revision, 4);
    assert_eq!(revisions.provider_env_revision, "env-a");
    let active = applier.active().unwrap();
    assert_eq!(active.sandbox_config.policy_revision, 7);
    assert_eq!(
        active.provider_env.environment["GITHUB_TOKEN"],
        PROVIDER_SECRET
    );

    // Several more polls of the same configuration: no new report, no provider refetch.
    gateway
        .wait_until("five more polls", |r| r.get_config_calls >= 6)
        .await;
    gateway.recorded(|r| {
        assert_eq!(r.reports.len(), 1, "unchanged config is not reported again");
        assert_eq!(
            r.get_env_calls, 1,
            "provider env fetched only when its revision moves"
        );
        assert_eq!(r.unauthenticated, 0, "every call carried the credential");
    });

    // A policy change is applied and reported; the provider env is still not refetched.
    gateway.set_config(snapshot_pair(8, "env-a"));
    gateway
        .wait_until("a report for revision 8", |r| {
            r.reports
                .iter()
                .any(|p| p.revisions.as_ref().unwrap().policy_revision == 8)
        })
        .await;
    assert_eq!(gateway.recorded(|r| r.get_env_calls), 1);

    // A provider env change is fetched.
    gateway.set_config(snapshot_pair(8, "env-b"));
    gateway
        .wait_until("a report for env-b", |r| {
            r.reports
                .iter()
                .any(|p| p.revisions.as_ref().unwrap().provider_env_revision == "env-b")
        })
        .await;
    assert_eq!(gateway.recorded(|r| r.get_env_calls), 2);
    assert_eq!(applier.apply_count(), 3);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn poll_mode_reports_a_failure_once_without_retrying() {
    let gateway = FakeGateway::start(accept(false)).await;
    let applier = Arc::new(MemoryApplier::failing(format!(
        "hook printed {PROVIDER_SECRET} and {CREDENTIAL}"
    )));
    let running = Running::start(fast_options(&gateway), applier.clone());
    gateway
        .wait_until("a FAILED report", |r| !r.reports.is_empty())
        .await;
    let report = gateway.recorded(|r| r.reports[0].clone());
    assert_eq!(report.load_status(), PolicyLoadStatus::Failed);
    assert_eq!(report.status(), PolicyStatus::Failed);
    assert!(
        !report.load_error.contains(PROVIDER_SECRET),
        "{}",
        report.load_error
    );
    assert!(
        !report.load_error.contains(CREDENTIAL),
        "{}",
        report.load_error
    );
    assert!(
        report.load_error.starts_with("hook printed"),
        "{}",
        report.load_error
    );

    let calls = gateway.recorded(|r| r.get_config_calls);
    gateway
        .wait_until("five more polls", |r| r.get_config_calls >= calls + 5)
        .await;
    assert_eq!(gateway.recorded(|r| r.reports.len()), 1);
    assert_eq!(
        applier.failure_count(),
        1,
        "the same desired config is not retried"
    );

    // A new desired configuration is tried again.
    applier.set_failure(None);
    gateway.set_config(snapshot_pair(2, "env-1"));
    gateway
        .wait_until("a LOADED report", |r| {
            r.reports
                .iter()
                .any(|p| p.load_status() == PolicyLoadStatus::Loaded)
        })
        .await;
    running.stop().await.unwrap();
}

/// Upstream OpenShell's gateway accepts the hello without push, so the supervisor polls, and
/// its answers carry none of this project's extension fields (and a policy hash of upstream's
/// own encoding). The configuration applies all the same, and the reports name the policy
/// `version` it served, in upstream's fields.
#[tokio::test]
async fn an_upstream_gateway_is_polled_and_its_versions_are_reported() {
    let gateway = FakeGateway::start(Answer::AcceptUpstream { heartbeat_secs: 1 }).await;
    gateway.set_config(upstream_pair(7, 42));
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(fast_options(&gateway), applier.clone());

    gateway
        .wait_until("a report", |r| !r.reports.is_empty())
        .await;
    let report = gateway.recorded(|r| r.reports[0].clone());
    assert_eq!(
        report.status(),
        PolicyStatus::Loaded,
        "{}",
        report.load_error
    );
    assert_eq!(report.version, 7);
    assert_eq!(report.sandbox_id, SANDBOX);
    let revisions = report.revisions.unwrap();
    assert_eq!(revisions.policy_revision, 7);
    assert_eq!(revisions.provider_env_revision, "42");
    assert_eq!(revisions.sandbox_settings_revision, 0);
    running
        .wait_status("the session accepted without push", |s| {
            matches!(
                s.session,
                SessionState::Accepted {
                    push_apply: false,
                    ..
                }
            )
        })
        .await;
    let active = applier.active().unwrap();
    assert_eq!(active.revisions().policy_revision, 7);
    assert_eq!(
        active.provider_env.environment["GITHUB_TOKEN"],
        PROVIDER_SECRET
    );

    // A new policy version and a provider change: the environment is fetched again, and the
    // report names the new version.
    gateway.set_config(upstream_pair(8, 43));
    gateway
        .wait_until("a report of version 8", |r| {
            r.reports.iter().any(|p| {
                p.version == 8
                    && p.status() == PolicyStatus::Loaded
                    && p.revisions.as_ref().unwrap().provider_env_revision == "43"
            })
        })
        .await;
    assert_eq!(gateway.recorded(|r| r.get_env_calls), 2);
    // Heartbeats at upstream's whole-second interval.
    gateway
        .wait_until("a heartbeat", |r| r.heartbeats() >= 1)
        .await;
    assert_eq!(gateway.recorded(|r| r.unauthenticated), 0);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn local_policy_retains_override_in_poll_mode() {
    let gateway = FakeGateway::start(accept(false)).await;
    let applier = Arc::new(MemoryApplier::new());
    let mut options = fast_options(&gateway);
    let local = LocalPolicy::parse(Path::new("local.yaml"), "version: 1\n").unwrap();
    options.local_policy = Some(local.clone());
    let running = Running::start(options, applier.clone());

    gateway
        .wait_until("a report", |r| !r.reports.is_empty())
        .await;
    let report = gateway.recorded(|r| r.reports[0].clone());
    assert_eq!(
        report.load_status(),
        PolicyLoadStatus::RetainedLocalOverride
    );
    assert_eq!(report.load_error, "local policy file keeps precedence");
    assert_eq!(report.revisions.unwrap().policy_revision, 1);
    assert_eq!(
        applier.active().unwrap().sandbox_config.policy_hash,
        local.hash()
    );

    // Only the provider environment changes: LOADED.
    gateway.set_config(snapshot_pair(1, "env-2"));
    gateway
        .wait_until("a second report", |r| r.reports.len() >= 2)
        .await;
    assert_eq!(
        gateway.recorded(|r| r.reports[1].load_status()),
        PolicyLoadStatus::Loaded
    );
    running.stop().await.unwrap();
}

#[tokio::test]
async fn push_mode_bootstraps_acks_updates_and_does_not_poll() {
    let gateway = FakeGateway::start(accept(true)).await;
    gateway.set_config(snapshot_pair(1, "env-1"));
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(fast_options(&gateway), applier.clone());

    gateway
        .wait_until("a bootstrap result", |r| !r.bootstrap_results().is_empty())
        .await;
    let bootstrap = gateway.recorded(|r| r.bootstrap_results()[0].clone());
    assert!(bootstrap.applied, "{}", bootstrap.reason);
    assert_eq!(bootstrap.revisions.unwrap().policy_revision, 1);
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);

    let mut status = running.supervisor.status();
    status
        .wait_for(|s| {
            matches!(
                s.session,
                SessionState::Accepted {
                    push_apply: true,
                    ..
                }
            )
        })
        .await
        .unwrap();

    // A live update is applied and acknowledged.
    let (config2, _) = snapshot_pair(2, "env-1");
    gateway
        .push(Out::ConfigUpdate(config_update(10, 3, config2.clone())))
        .await;
    gateway
        .wait_until("an APPLIED ack", |r| !r.update_results().is_empty())
        .await;
    let ack = gateway.recorded(|r| r.update_results()[0].clone());
    assert_eq!(ack.delivery_id, 10);
    assert_eq!(ack.status(), ConfigApplyStatus::Applied);
    assert_eq!(ack.revisions.unwrap().policy_revision, 2);
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 2);

    // An old sequence is stale; the same snapshot again is a duplicate.
    let (config9, _) = snapshot_pair(9, "env-1");
    gateway
        .push(Out::ConfigUpdate(config_update(11, 2, config9)))
        .await;
    gateway
        .push(Out::ConfigUpdate(config_update(12, 4, config2)))
        .await;
    // A new provider env alone waits for its config.
    let (_, env2) = snapshot_pair(2, "env-2");
    gateway
        .push(Out::ConfigUpdate(env_update(13, 5, env2)))
        .await;
    let (config3, _) = snapshot_pair(3, "env-2");
    gateway
        .push(Out::ConfigUpdate(config_update(14, 6, config3)))
        .await;
    gateway
        .push(Out::Heartbeat(GatewayHeartbeat { sent_at: None }))
        .await;
    gateway
        .wait_until("five acks", |r| r.update_results().len() >= 5)
        .await;
    let statuses: Vec<(u64, ConfigApplyStatus)> = gateway.recorded(|r| {
        r.update_results()
            .iter()
            .map(|a| (a.delivery_id, a.status()))
            .collect()
    });
    assert_eq!(
        statuses,
        [
            (10, ConfigApplyStatus::Applied),
            (11, ConfigApplyStatus::Stale),
            (12, ConfigApplyStatus::Duplicate),
            (13, ConfigApplyStatus::AwaitingComponent),
            (14, ConfigApplyStatus::Applied),
        ]
    );
    let active = applier.active().unwrap();
    assert_eq!(active.sandbox_config.policy_revision, 3);
    assert_eq!(active.provider_env.provider_env_fingerprint, "env-2");

    gateway
        .wait_until("two heartbeats", |r| r.heartbeats() >= 2)
        .await;
    gateway.recorded(|r| {
        assert_eq!(r.get_config_calls, 0, "push mode does not poll");
        assert!(r.reports.is_empty(), "push mode acks instead of reporting");
        assert_eq!(r.unauthenticated, 0);
    });
    running.stop().await.unwrap();
}

#[tokio::test]
async fn polling_resumes_when_a_new_session_disables_apply() {
    let gateway = FakeGateway::start(accept(true)).await;
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(fast_options(&gateway), applier.clone());
    gateway
        .wait_until("a bootstrap result", |r| !r.bootstrap_results().is_empty())
        .await;
    assert_eq!(gateway.recorded(|r| r.get_config_calls), 0);

    // The gateway rolls back to poll mode and drops the session.
    gateway.set_answer(accept(false));
    gateway.set_config(snapshot_pair(5, "env-1"));
    gateway.close_session();
    gateway
        .wait_until("a second hello", |r| r.hellos.len() >= 2)
        .await;
    gateway
        .wait_until("a LOADED report for revision 5", |r| {
            r.reports.iter().any(|p| {
                p.load_status() == PolicyLoadStatus::Loaded
                    && p.revisions.as_ref().unwrap().policy_revision == 5
            })
        })
        .await;
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 5);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn polling_takes_over_after_a_push_session_is_lost() {
    let gateway = FakeGateway::start(accept(true)).await;
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(fast_options(&gateway), applier.clone());
    gateway
        .wait_until("a bootstrap result", |r| !r.bootstrap_results().is_empty())
        .await;
    assert_eq!(gateway.recorded(|r| r.get_config_calls), 0);

    // The session drops and the gateway refuses new ones: only the (delayed) fallback poll
    // can deliver the new configuration.
    gateway.set_answer(Answer::Reject {
        reason: "replica draining".into(),
        permanent: false,
    });
    gateway.set_config(snapshot_pair(5, "env-1"));
    gateway.close_session();
    gateway
        .wait_until("a LOADED report for revision 5", |r| {
            r.reports.iter().any(|p| {
                p.load_status() == PolicyLoadStatus::Loaded
                    && p.revisions.as_ref().unwrap().policy_revision == 5
            })
        })
        .await;
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 5);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn gateway_heartbeat_interval_is_honoured() {
    let gateway = FakeGateway::start(Answer::Accept {
        apply: false,
        heartbeat_ms: 20,
        poll_ms: 0,
    })
    .await;
    let mut options = fast_options(&gateway);
    options.heartbeat_interval = Duration::from_secs(3600);
    let running = Running::start(options, Arc::new(MemoryApplier::new()));
    gateway
        .wait_until("three heartbeats", |r| r.heartbeats() >= 3)
        .await;
    running.stop().await.unwrap();
}

/// A state directory whose disk is full while `full` is set: writing a generation fails with
/// ENOSPC, as on a real full file system. Counts the generations it was asked to write.
struct Disk {
    full: Arc<AtomicBool>,
    attempts: Arc<AtomicUsize>,
    applier: Arc<FileApplier>,
    _dir: tempfile::TempDir,
}

impl Disk {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let full = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(AtomicUsize::new(0));
        let mut config = FileApplierConfig::new(dir.path(), SANDBOX);
        let (is_full, counted) = (full.clone(), attempts.clone());
        config.write_fault = Some(WriteFault::new(move |step| {
            if step == WriteStep::CreateGeneration {
                counted.fetch_add(1, Ordering::SeqCst);
                if is_full.load(Ordering::SeqCst) {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ENOSPC));
                }
            }
            Ok(())
        }));
        Self {
            full,
            attempts,
            applier: Arc::new(FileApplier::new(config).unwrap()),
            _dir: dir,
        }
    }

    fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::SeqCst);
    }

    /// The policy revision `active/revisions.json` names.
    fn active_policy_revision(&self) -> u64 {
        let path = self.applier.state_dir().active_file("revisions.json");
        let revisions: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        revisions["policy_revision"].as_u64().unwrap()
    }
}

/// Defect: a change that failed on a full disk was acked FAILED, and once space was freed
/// nothing applied it again: the gateway does not resend what was answered FAILED.
#[tokio::test]
async fn push_a_transient_apply_failure_is_retried_and_acked_applied() {
    let gateway = FakeGateway::start(accept(true)).await;
    let disk = Disk::new();
    let running = Running::start(fast_options(&gateway), disk.applier.clone());
    gateway
        .wait_until("a bootstrap result", |r| !r.bootstrap_results().is_empty())
        .await;
    assert!(gateway.recorded(|r| r.bootstrap_results()[0].applied));
    assert_eq!(disk.active_policy_revision(), 1);

    disk.set_full(true);
    let (config2, _) = snapshot_pair(2, "env-1");
    gateway
        .push(Out::ConfigUpdate(config_update(10, 3, config2)))
        .await;
    gateway
        .wait_until("a FAILED ack", |r| !r.update_results().is_empty())
        .await;
    let failed = gateway.recorded(|r| r.update_results()[0].clone());
    assert_eq!(failed.status(), ConfigApplyStatus::Failed);
    assert!(
        failed.reason.contains("No space left on device"),
        "{}",
        failed.reason
    );
    assert_eq!(disk.active_policy_revision(), 1, "last-known-good stays");

    // It keeps trying while the disk is full, without acking each failure again.
    let attempts = disk.attempts.load(Ordering::SeqCst);
    running
        .wait_status("two retries", |s| s.apply_retries >= 2)
        .await;
    assert!(disk.attempts.load(Ordering::SeqCst) > attempts);
    assert_eq!(gateway.recorded(|r| r.update_results().len()), 1);

    // Space is freed; the gateway sends nothing new.
    disk.set_full(false);
    gateway
        .wait_until("an APPLIED ack for revision 2", |r| {
            r.update_results().iter().any(|a| {
                a.status() == ConfigApplyStatus::Applied
                    && a.revisions.as_ref().unwrap().policy_revision == 2
            })
        })
        .await;
    let acks = gateway.recorded(|r| r.update_results());
    assert_eq!(acks.len(), 2, "{acks:?}");
    assert_eq!(
        acks[1].delivery_id, 10,
        "the failed delivery is answered again"
    );
    assert_eq!(acks[1].revisions, failed.revisions);
    assert_eq!(disk.active_policy_revision(), 2);

    // Applied now: the same snapshot again is a duplicate.
    let (config2, _) = snapshot_pair(2, "env-1");
    gateway
        .push(Out::ConfigUpdate(config_update(11, 4, config2)))
        .await;
    gateway
        .wait_until("a third ack", |r| r.update_results().len() >= 3)
        .await;
    assert_eq!(
        gateway.recorded(|r| r.update_results()[2].status()),
        ConfigApplyStatus::Duplicate
    );
    running.stop().await.unwrap();
}

#[tokio::test]
async fn push_a_rejected_change_is_not_retried() {
    let gateway = FakeGateway::start(accept(true)).await;
    let applier = Arc::new(MemoryApplier::new());
    let running = Running::start(fast_options(&gateway), applier.clone());
    gateway
        .wait_until("a bootstrap result", |r| !r.bootstrap_results().is_empty())
        .await;
    applier.set_failure(Some("on-apply hook exited with status 3".into()));
    let (config2, _) = snapshot_pair(2, "env-1");
    gateway
        .push(Out::ConfigUpdate(config_update(10, 3, config2)))
        .await;
    gateway
        .wait_until("a FAILED ack", |r| !r.update_results().is_empty())
        .await;
    // A hook that would accept it now changes nothing: the rejection is parked.
    applier.set_failure(None);
    let beats = gateway.recorded(|r| r.heartbeats());
    gateway
        .wait_until("twenty more heartbeats", |r| r.heartbeats() >= beats + 20)
        .await;
    assert_eq!(gateway.recorded(|r| r.update_results().len()), 1);
    assert_eq!(applier.failure_count(), 1);
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);
    assert_eq!(running.supervisor.status().borrow().apply_retries, 0);
    running.stop().await.unwrap();
}

/// The same defect in poll mode: the FAILED report was the last word, and polls of the same
/// content are skipped.
#[tokio::test]
async fn poll_a_transient_apply_failure_is_retried_and_reported_loaded() {
    let gateway = FakeGateway::start(accept(false)).await;
    gateway.set_config(snapshot_pair(7, "env-a"));
    let disk = Disk::new();
    disk.set_full(true);
    let running = Running::start(fast_options(&gateway), disk.applier.clone());
    gateway
        .wait_until("a FAILED report", |r| !r.reports.is_empty())
        .await;
    let failed = gateway.recorded(|r| r.reports[0].clone());
    assert_eq!(failed.load_status(), PolicyLoadStatus::Failed);
    assert!(
        failed.load_error.contains("No space left on device"),
        "{}",
        failed.load_error
    );
    running
        .wait_status("two retries", |s| s.apply_retries >= 2)
        .await;
    assert_eq!(gateway.recorded(|r| r.reports.len()), 1);

    disk.set_full(false);
    gateway
        .wait_until("a LOADED report", |r| {
            r.reports
                .iter()
                .any(|p| p.load_status() == PolicyLoadStatus::Loaded)
        })
        .await;
    let reports = gateway.recorded(|r| r.reports.clone());
    let loaded = reports.last().unwrap();
    assert_eq!(loaded.revisions, failed.revisions, "the same revisions");
    assert_eq!(loaded.revisions.as_ref().unwrap().policy_revision, 7);
    assert_eq!(disk.active_policy_revision(), 7);
    running.stop().await.unwrap();
}

/// Defect (found by the partition scenario of the fault-injection suite): after a session
/// went silent (no gateway frame within the idle limit, what a network partition looks
/// like), the next session was opened on the same HTTP/2 connection, dead as far as anyone
/// knew, and waited in silence again until keepalive gave up on it, some 40 s. It goes on a
/// new connection.
#[tokio::test]
async fn a_session_that_went_silent_is_replaced_on_a_new_connection() {
    let gateway = FakeGateway::start(accept(true)).await;
    let mut options = fast_options(&gateway);
    options.idle_timeout = Some(Duration::from_millis(300));
    let running = Running::start(options, Arc::new(MemoryApplier::new()));
    gateway
        .wait_until("a bootstrap result", |r| !r.bootstrap_results().is_empty())
        .await;
    // One heartbeat arms the idle limit; then the gateway says nothing more.
    gateway
        .push(Out::Heartbeat(GatewayHeartbeat::default()))
        .await;
    gateway
        .wait_until("a second hello", |r| r.hellos.len() >= 2)
        .await;
    let peers = gateway.recorded(|r| r.hello_peers.clone());
    assert!(peers[0].is_some() && peers[1].is_some(), "{peers:?}");
    assert_ne!(
        peers[0], peers[1],
        "the session after the silent one came on the same connection"
    );
    running.stop().await.unwrap();
}

/// The same defect when the gateway never answers the session's call (its request lost on a
/// connection that carries nothing to the gateway any more): the supervisor waited for the
/// answer without a bound. It gives up after the call bound and tries a new connection.
#[tokio::test]
async fn an_unanswered_session_call_is_retried_on_a_new_connection() {
    let gateway = FakeGateway::start(Answer::Silent).await;
    let mut options = fast_options(&gateway);
    options.rpc_timeout = Duration::from_millis(300);
    let running = Running::start(options, Arc::new(MemoryApplier::new()));
    gateway
        .wait_until("a second hello", |r| r.hellos.len() >= 2)
        .await;
    let peers = gateway.recorded(|r| r.hello_peers.clone());
    assert!(peers[0].is_some() && peers[1].is_some(), "{peers:?}");
    assert_ne!(
        peers[0], peers[1],
        "the second call came on the same connection"
    );
    running.stop().await.unwrap();
}
