//! Scheduler properties with a fake builder and a paused clock: no lost
//! update, coalescing, lane isolation under a 10k fanout, holds until ack,
//! no reject loops, late builds of closed sessions discarded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use openshell_proto::v1 as pb;
use tokio::sync::mpsc;

use super::reconcile;
use super::task::{self, Ack, SessionDelivery};
use super::{Component, DeliveryTuning, Lane, Mark, Permits};
use crate::metrics::Metrics;
use crate::snapshot::{BuildError, Built, SnapshotSource};
use crate::store::ConfigInputRevisions;

/// Content is a version number per sandbox, read when a build starts;
/// builds take `delay`.
#[derive(Default)]
struct FakeSource {
    versions: Mutex<HashMap<String, u64>>,
    builds: AtomicUsize,
    /// Statements reconcile would have run.
    revision_reads: AtomicUsize,
    delay: Duration,
    fail: Mutex<bool>,
    /// Set: builds find the sandbox stopped or deleted, with this reason.
    undeliverable: Mutex<Option<String>>,
}

impl FakeSource {
    fn with_delay(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    fn set_version(&self, sandbox: &str, version: u64) {
        self.versions
            .lock()
            .unwrap()
            .insert(sandbox.to_string(), version);
    }

    fn builds(&self) -> usize {
        self.builds.load(Ordering::SeqCst)
    }
}

impl SnapshotSource for FakeSource {
    fn build<'a>(
        &'a self,
        sandbox_id: &'a str,
        component: Component,
        _lane: Lane,
    ) -> BoxFuture<'a, Result<Built, BuildError>> {
        // Read when the build starts, before its permit, as the store's
        // batched input reads are.
        let version = self
            .versions
            .lock()
            .unwrap()
            .get(sandbox_id)
            .copied()
            .unwrap_or(0);
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.builds.fetch_add(1, Ordering::SeqCst);
            if *self.fail.lock().unwrap() {
                return Err(BuildError::Store("injected".into()));
            }
            if let Some(reason) = self.undeliverable.lock().unwrap().clone() {
                return Err(BuildError::Undeliverable(reason));
            }
            Ok(Built {
                component,
                update: pb::ConfigUpdate {
                    fingerprint: format!("{sandbox_id}-{version}"),
                    ..Default::default()
                },
                fingerprint: format!("{sandbox_id}-{version}"),
                summary: format!("v{version}"),
                policy_revision: version,
                settings_revision: 0,
                provider_env_revision: "e0".into(),
                pending_operation: true,
                input_revisions: (component == Component::SandboxConfig)
                    .then(|| revisions(version)),
            })
        })
    }

    fn delivered<'a>(&'a self, _sandbox_id: &'a str, _built: &'a Built) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn input_revisions<'a>(
        &'a self,
        sandbox_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<HashMap<String, ConfigInputRevisions>, BuildError>> {
        self.revision_reads.fetch_add(1, Ordering::SeqCst);
        let versions = self.versions.lock().unwrap();
        let current = sandbox_ids
            .iter()
            .filter_map(|id| Some((id.to_string(), revisions(*versions.get(*id)?))))
            .collect();
        Box::pin(async move { Ok(current) })
    }
}

/// The fake's input revisions: its version stands for the policy revision.
fn revisions(version: u64) -> ConfigInputRevisions {
    ConfigInputRevisions {
        stopped: false,
        policy_revision: version,
        sandbox_settings_revision: 0,
        workspace_settings_revision: 0,
        global_settings_revision: 0,
        global_policy_revision: 0,
        attachment_epoch: 0,
        attached_providers: 0,
        attached_provider_revision_sum: 0,
    }
}

struct Harness {
    delivery: Arc<SessionDelivery>,
    out: mpsc::Receiver<super::Frame>,
    metrics: Arc<Metrics>,
}

fn quiet_tuning() -> DeliveryTuning {
    DeliveryTuning {
        // Far away, so only the tests' marks cause builds.
        reconcile_first_min: Duration::from_secs(3600),
        reconcile_interval: Duration::from_secs(3600),
        ..DeliveryTuning::default()
    }
}

fn start(
    source: Arc<FakeSource>,
    permits: Arc<Permits>,
    sandbox: &str,
    tuning: DeliveryTuning,
) -> Harness {
    let delivery = Arc::new(SessionDelivery::new(
        sandbox.into(),
        format!("ss-{sandbox}"),
        "default".into(),
        1,
        true,
    ));
    let (tx, out) = mpsc::channel(4);
    let metrics = Arc::new(Metrics::default());
    tokio::spawn(task::run(
        delivery.clone(),
        source,
        permits,
        tx,
        tuning,
        metrics.clone(),
    ));
    Harness {
        delivery,
        out,
        metrics,
    }
}

/// Sessions `fleet-0` … `fleet-{n-1}`, each with content version 1.
fn start_fleet(source: &Arc<FakeSource>, permits: &Arc<Permits>, n: usize) -> Vec<Harness> {
    (0..n)
        .map(|i| {
            let sandbox = format!("fleet-{i}");
            source.set_version(&sandbox, 1);
            start(source.clone(), permits.clone(), &sandbox, quiet_tuning())
        })
        .collect()
}

fn fingerprint(frame: &pb::GatewayMessage) -> (u64, String) {
    match &frame.payload {
        Some(pb::gateway_message::Payload::ConfigUpdate(u)) => {
            (u.delivery_id, u.fingerprint.clone())
        }
        other => panic!("expected a config update, got {other:?}"),
    }
}

async fn next_update(h: &mut Harness) -> (u64, String) {
    let frame = tokio::time::timeout(Duration::from_secs(600), h.out.recv())
        .await
        .expect("an update within the deadline")
        .expect("channel open");
    fingerprint(&frame)
}

fn ack(h: &Harness, delivery_id: u64, status: pb::ConfigApplyStatus) {
    h.delivery.ack(Ack {
        delivery_id,
        component: Component::SandboxConfig,
        status,
        reason: String::new(),
    });
}

fn config_mark(lane: Lane) -> Mark {
    Mark::new(&[Component::SandboxConfig], lane)
}

#[tokio::test(start_paused = true)]
async fn repeated_marks_coalesce_into_one_build() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(10)));
    source.set_version("sb", 1);
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        quiet_tuning(),
    );
    for _ in 0..100 {
        h.delivery.mark(config_mark(Lane::Sandbox), true);
    }
    let (_, fp) = next_update(&mut h).await;
    assert_eq!(fp, "sb-1");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(source.builds(), 1);
    assert!(h.out.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_is_held_until_the_previous_is_acked_and_only_the_latest_is_sent() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(1)));
    source.set_version("sb", 1);
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        quiet_tuning(),
    );
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (first_id, fp) = next_update(&mut h).await;
    assert_eq!(fp, "sb-1");
    for version in 2..=5 {
        source.set_version("sb", version);
        h.delivery.mark(config_mark(Lane::Sandbox), true);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Versions 2..5 were built but nothing is sent while sb-1 is unacked.
    assert!(h.out.try_recv().is_err());
    ack(&h, first_id, pb::ConfigApplyStatus::Applied);
    let (_, fp) = next_update(&mut h).await;
    assert_eq!(fp, "sb-5", "latest wins");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(h.out.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_rejected_fingerprint_is_parked_until_the_content_changes() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(1)));
    source.set_version("sb", 7);
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        quiet_tuning(),
    );
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (id, fp) = next_update(&mut h).await;
    assert_eq!(fp, "sb-7");
    ack(&h, id, pb::ConfigApplyStatus::Failed);
    // Reconcile-style rebuilds of the same content are not resent.
    for _ in 0..5 {
        h.delivery.mark(config_mark(Lane::Fanout), false);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(h.out.try_recv().is_err(), "no reject loop");
    assert!(
        h.metrics
            .render()
            .contains("openshell_config_suppressed_resends_total 5")
    );
    // A fix in the store yields a new fingerprint, which is sent.
    source.set_version("sb", 8);
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (_, fp) = next_update(&mut h).await;
    assert_eq!(fp, "sb-8");
}

/// A supervisor that failed a delivery for a reason that can pass (a full disk) retries it
/// and acks the same delivery APPLIED: the component is then in effect, not parked FAILED.
#[tokio::test(start_paused = true)]
async fn a_rejected_delivery_applied_on_a_retry_is_in_effect() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(1)));
    source.set_version("sb", 7);
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        quiet_tuning(),
    );
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (id, _) = next_update(&mut h).await;
    ack(&h, id, pb::ConfigApplyStatus::Failed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    ack(&h, id, pb::ConfigApplyStatus::Applied);
    h.delivery.mark(config_mark(Lane::Fanout), false);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (components, events) = h.delivery.diagnostics();
    let config = &components[0].1;
    assert_eq!(config.ack_status, "APPLIED", "{config:?}");
    assert!(config.last_failure.is_empty(), "{config:?}");
    assert!(
        events
            .iter()
            .any(|(_, e)| e.contains("applied on the supervisor's retry"))
    );
    // In effect: the same content is not sent again.
    assert!(h.out.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn an_unacked_snapshot_is_resent_after_the_ack_timeout() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(1)));
    source.set_version("sb", 1);
    let tuning = DeliveryTuning {
        ack_timeout: Duration::from_secs(60),
        ..quiet_tuning()
    };
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        tuning,
    );
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (first, _) = next_update(&mut h).await;
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert!(h.out.try_recv().is_err());
    let (second, fp) = next_update(&mut h).await;
    assert!(second > first);
    assert_eq!(fp, "sb-1");
}

#[tokio::test(start_paused = true)]
async fn build_failures_back_off_and_a_write_cuts_the_wait() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(1)));
    source.set_version("sb", 1);
    *source.fail.lock().unwrap() = true;
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        quiet_tuning(),
    );
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    // 1 s, 2 s, 4 s backoffs: four attempts within 7.5 s, not more.
    tokio::time::sleep(Duration::from_millis(7500)).await;
    assert_eq!(source.builds(), 4);
    *source.fail.lock().unwrap() = false;
    // The next retry would come at 15 s; a write cuts the wait.
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (_, fp) = tokio::time::timeout(Duration::from_millis(100), next_update(&mut h))
        .await
        .expect("a write cuts the backoff");
    assert_eq!(fp, "sb-1");
}

#[tokio::test(start_paused = true)]
async fn a_late_build_of_a_closed_session_is_discarded() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_secs(2)));
    source.set_version("sb", 1);
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        quiet_tuning(),
    );
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.delivery.close();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(source.builds(), 1);
    assert!(h.out.try_recv().is_err(), "nothing sent after close");
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_write_is_served_while_a_10k_fanout_is_queued() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(100)));
    let permits = Arc::new(Permits::for_pool(8));
    let fleet = start_fleet(&source, &permits, 10_000);
    let mut target = start(source.clone(), permits.clone(), "urgent", quiet_tuning());
    source.set_version("urgent", 1);
    for h in &fleet {
        h.delivery.mark(config_mark(Lane::Fanout), true);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = tokio::time::Instant::now();
    target.delivery.mark(config_mark(Lane::Sandbox), true);
    let (_, fp) = next_update(&mut target).await;
    assert_eq!(fp, "urgent-1");
    served_ahead_of_the_fleet(started, &source, 10_001).await;
}

/// A sandbox write was sent within a couple of build times of `started`,
/// while the 10k fleet (12 fanout permits × 100 ms builds, ~83 s of virtual
/// time) is still queued; the fanout then goes on to `builds` in all.
async fn served_ahead_of_the_fleet(
    started: tokio::time::Instant,
    source: &FakeSource,
    builds: usize,
) {
    assert!(
        started.elapsed() <= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert!(source.builds() < 10_000, "the fleet is still queued");
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert!(source.builds() >= builds, "the fanout stalled");
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_write_raises_the_lane_of_a_session_queued_in_the_fanout() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(100)));
    let permits = Arc::new(Permits::for_pool(8));
    let mut fleet = start_fleet(&source, &permits, 10_000);
    // The written sandbox is one of the fleet, queued at the fanout's end.
    let mut target = fleet.pop().unwrap();
    for h in fleet.iter().chain([&target]) {
        h.delivery.mark(config_mark(Lane::Fanout), true);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = tokio::time::Instant::now();
    source.set_version("fleet-9999", 2);
    target.delivery.mark(config_mark(Lane::Sandbox), true);
    let (_, fp) = next_update(&mut target).await;
    // One build carries both the fanout's change and the sandbox write.
    assert_eq!(fp, "fleet-9999-2");
    served_ahead_of_the_fleet(started, &source, 10_000).await;
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Write,
        Reconcile,
        AckLatest(bool),
        Wait(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Write),
            1 => Just(Step::Reconcile),
            2 => any::<bool>().prop_map(Step::AckLatest),
            2 => (1u64..3000).prop_map(Step::Wait),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the interleaving of writes, acks and rejections, the
        /// last write is eventually built and sent.
        #[test]
        fn the_last_write_is_always_eventually_sent(steps in prop::collection::vec(step(), 1..40)) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
            runtime.block_on(async move {
                let source = Arc::new(FakeSource::with_delay(Duration::from_millis(5)));
                let mut h = start(source.clone(), Arc::new(Permits::with_sizes(3, 1)), "sb", quiet_tuning());
                let mut version = 0u64;
                let mut last_sent: Option<(u64, String)> = None;
                let drain = |h: &mut Harness, last: &mut Option<(u64, String)>| {
                    while let Ok(frame) = h.out.try_recv() {
                        *last = Some(fingerprint(&frame));
                    }
                };
                for step in steps {
                    match step {
                        Step::Write => {
                            version += 1;
                            source.set_version("sb", version);
                            h.delivery.mark(config_mark(Lane::Sandbox), true);
                        }
                        Step::Reconcile => h.delivery.mark(config_mark(Lane::Fanout), false),
                        Step::AckLatest(ok) => {
                            drain(&mut h, &mut last_sent);
                            if let Some((id, _)) = &last_sent {
                                let status = if ok { pb::ConfigApplyStatus::Applied } else { pb::ConfigApplyStatus::Failed };
                                ack(&h, *id, status);
                            }
                        }
                        Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    }
                    tokio::task::yield_now().await;
                }
                if version == 0 {
                    return;
                }
                // Let everything settle, acking whatever arrives.
                for _ in 0..200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    drain(&mut h, &mut last_sent);
                    if let Some((id, fp)) = &last_sent {
                        if fp == &format!("sb-{version}") {
                            return;
                        }
                        ack(&h, *id, pb::ConfigApplyStatus::Applied);
                    }
                }
                panic!("last write sb-{version} never sent; last sent {last_sent:?}");
            });
        }
    }
}

/// The pending-marks gauge counts the components marked and not built yet: a mark not taken,
/// one taken and waiting for its permit, one in its build; read at each scrape.
#[tokio::test(start_paused = true)]
async fn pending_marks_count_what_is_marked_and_not_built_yet() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_secs(2)));
    source.set_version("sb", 1);
    let permits = Arc::new(Permits::with_sizes(1, 1));
    let publisher = super::Publisher::default();
    let mut metrics = Metrics::default();
    let sessions = publisher.clone();
    metrics.register_sampled_gauge("config_pending_marks", "test", move || {
        i64::try_from(sessions.pending_marks()).unwrap()
    });
    let scraped = |n: usize| {
        metrics
            .render()
            .contains(&format!("\nopenshell_config_pending_marks {n}\n"))
    };
    // The only fanout permit is busy.
    let busy = permits.acquire(Lane::Fanout).await;
    let mut h = start(source.clone(), permits.clone(), "sb", quiet_tuning());
    publisher.register(h.delivery.clone());
    assert_eq!(publisher.pending_marks(), 0);
    assert!(scraped(0), "{}", metrics.render());

    h.delivery
        .mark(Mark::new(&Component::ALL, Lane::Fanout), false);
    assert_eq!(publisher.pending_marks(), 2, "marked");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(source.builds(), 0);
    assert_eq!(publisher.pending_marks(), 2, "taken, waiting for a permit");
    assert!(scraped(2), "{}", metrics.render());

    drop(busy);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(publisher.pending_marks(), 2, "in its builds");
    next_update(&mut h).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(source.builds(), 2);
    assert_eq!(publisher.pending_marks(), 0, "built");
    assert!(scraped(0), "{}", metrics.render());
}

fn reconcile_tuning() -> DeliveryTuning {
    DeliveryTuning {
        reconcile_first_min: Duration::from_secs(30),
        reconcile_interval: Duration::from_secs(30),
        reconcile_full_rebuild_every: 10,
        ..DeliveryTuning::default()
    }
}

/// Sends `sb`'s current version and acks it APPLIED, as after a bootstrap.
async fn settle(h: &mut Harness) {
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (id, _) = next_update(h).await;
    ack(h, id, pb::ConfigApplyStatus::Applied);
    tokio::task::yield_now().await;
}

/// The replica's reconciler over `sessions`, with its own metrics.
fn start_reconciler(
    source: &Arc<FakeSource>,
    sessions: &[&Harness],
) -> (
    super::Publisher,
    Arc<Metrics>,
    tokio::sync::watch::Sender<bool>,
) {
    let publisher = super::Publisher::default();
    for h in sessions {
        publisher.register(h.delivery.clone());
    }
    let metrics = Arc::new(Metrics::default());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(reconcile::run(
        publisher.clone(),
        source.clone(),
        reconcile_tuning(),
        metrics.clone(),
        stopping,
    ));
    (publisher, metrics, stop)
}

/// A write whose mark never arrived (another replica's, its hint lost) is
/// delivered by the next pass; a session whose inputs did not move is
/// checked against the store's revisions and not rebuilt, all of a tick's
/// sessions in one read.
#[tokio::test(start_paused = true)]
async fn reconcile_rebuilds_only_the_sessions_whose_input_revisions_moved() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(1)));
    let permits = Arc::new(Permits::with_sizes(3, 1));
    source.set_version("still", 1);
    source.set_version("moved", 1);
    let mut still = start(source.clone(), permits.clone(), "still", reconcile_tuning());
    let mut moved = start(source.clone(), permits.clone(), "moved", reconcile_tuning());
    settle(&mut still).await;
    settle(&mut moved).await;
    assert_eq!(source.builds(), 2);
    let (publisher, metrics, _stop) = start_reconciler(&source, &[&still, &moved]);

    source.set_version("moved", 2);
    let (id, fp) = next_update(&mut moved).await;
    assert_eq!(fp, "moved-2");
    ack(&moved, id, pb::ConfigApplyStatus::Applied);
    // Past every session's first pass (30-60 s after it started).
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(source.builds(), 3, "only the moved session was rebuilt");
    assert!(still.out.try_recv().is_err());
    assert!(metrics.reconcile_unchanged.get() >= 1);

    // Sessions due in one tick: one read for all of them.
    let reads = source.revision_reads.load(Ordering::SeqCst);
    let unchanged = metrics.reconcile_unchanged.get();
    let later = tokio::time::Instant::now() + Duration::from_secs(3600);
    reconcile::pass(&publisher, &*source, &reconcile_tuning(), &metrics, later).await;
    assert_eq!(source.revision_reads.load(Ordering::SeqCst), reads + 1);
    assert_eq!(metrics.reconcile_unchanged.get(), unchanged + 2);
}

/// Every tenth pass of a session rebuilds whatever the revisions say, and
/// a component the supervisor failed is rebuilt on every pass: neither is
/// resent while its content is what the supervisor already has or refused.
#[tokio::test(start_paused = true)]
async fn reconcile_rebuilds_on_every_tenth_pass_and_while_a_component_failed() {
    let source = Arc::new(FakeSource::with_delay(Duration::from_millis(1)));
    let permits = Arc::new(Permits::with_sizes(3, 1));
    source.set_version("sb", 1);
    let mut h = start(source.clone(), permits.clone(), "sb", reconcile_tuning());
    settle(&mut h).await;
    let (_, metrics, _stop) = start_reconciler(&source, &[&h]);

    tokio::time::sleep(Duration::from_secs(60 + 30 * 25)).await;
    let passes = metrics.reconcile_passes.get();
    assert!(passes >= 25, "{passes}");
    assert_eq!(source.builds() as u64, 1 + passes / 10);
    assert_eq!(metrics.reconcile_unchanged.get(), passes - passes / 10);
    assert!(h.out.try_recv().is_err(), "nothing resent");

    // The supervisor refuses version 2: every pass rebuilds, none resends.
    source.set_version("sb", 2);
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (id, fp) = next_update(&mut h).await;
    assert_eq!(fp, "sb-2");
    ack(&h, id, pb::ConfigApplyStatus::Failed);
    tokio::task::yield_now().await;
    let (builds, passes) = (source.builds(), metrics.reconcile_passes.get());
    tokio::time::sleep(Duration::from_secs(30 * 5)).await;
    let new_passes = metrics.reconcile_passes.get() - passes;
    assert!(new_passes >= 4, "{new_passes}");
    assert_eq!((source.builds() - builds) as u64, new_passes);
    assert!(
        h.out.try_recv().is_err(),
        "the refused content is not resent"
    );
}

/// A build that finds its sandbox stopped or deleted (say, through another replica, whose
/// hint made this session rebuild) ends the whole session with that reason, instead of
/// backing off and building again for as long as the supervisor stays connected.
#[tokio::test(start_paused = true)]
async fn a_sandbox_gone_from_under_its_session_ends_the_session() {
    let source = Arc::new(FakeSource::default());
    source.set_version("sb", 1);
    let mut h = start(
        source.clone(),
        Arc::new(Permits::with_sizes(3, 1)),
        "sb",
        quiet_tuning(),
    );
    let closer = Arc::new(crate::session_registry::SessionCloser::default());
    h.delivery.attach_closer(closer.clone());
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let (id, _) = next_update(&mut h).await;
    ack(&h, id, pb::ConfigApplyStatus::Applied);

    *source.undeliverable.lock().unwrap() = Some("the sandbox was deleted".into());
    h.delivery.mark(config_mark(Lane::Sandbox), true);
    let reason = tokio::time::timeout(Duration::from_secs(60), closer.closed())
        .await
        .expect("the session is asked to close");
    assert_eq!(reason, "the sandbox was deleted");
    assert!(h.delivery.is_closed());
    let builds = source.builds();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(source.builds(), builds, "no build after the session ended");
}
