//! The delivery task of one push session: wait for a mark (or a timer),
//! take a build permit in the mark's lane, build complete snapshots, keep
//! the newest per component in a latest-wins slot, and send it once the
//! previous one of that component is acknowledged.
//!
//! Rules kept here: at most one unacked and one unsent snapshot per
//! component; a fingerprint the supervisor rejected is not sent again until
//! a build differs (no reject loops); a fingerprint the supervisor already
//! applied is not resent; build failures back off 1-2-4-8-16-30 s and a new
//! write cuts the wait. Reconcile (`reconcile.rs`) marks a session when
//! its inputs moved since its latest build, or a component failed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use openshell_proto::v1 as pb;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::handed::Handed;
use super::marks::{Component, Lane, Mark};
use super::permits::{BuildPermit, Permits};
use super::tuning::DeliveryTuning;
use crate::metrics::{ComponentLabel, DeliveryLabels, Metrics, StatusLabel};
use crate::operations::resolution::ReportedRevisions;
use crate::session_registry::SessionCloser;
use crate::snapshot::{BuildError, Built, SnapshotSource};
use crate::store::{ConfigInputRevisions, now_ms};
use crate::ticks::on_shared_tick;

/// The supervisor's answer to one delivery, as the scheduler needs it.
#[derive(Debug, Clone)]
pub struct Ack {
    pub delivery_id: u64,
    pub component: Component,
    pub status: pb::ConfigApplyStatus,
    pub reason: String,
}

#[derive(Debug, Clone, Default)]
struct InFlight {
    delivery_id: u64,
    fingerprint: String,
    summary: String,
    sent_at: Option<Instant>,
    /// See [`Built::pending_operation`].
    pending_operation: bool,
}

/// Per-component delivery state, also what `sessions inspect` shows.
#[derive(Debug, Clone, Default)]
pub struct ComponentState {
    pub desired: String,
    pub sent: String,
    pub sent_at_ms: Option<i64>,
    pub acked: String,
    pub ack_status: String,
    pub acked_at_ms: Option<i64>,
    pub held: bool,
    pub last_failure: String,
    pub backoff: Duration,
    pub dirty: bool,
    pub lane: String,
    slot: Option<Built>,
    in_flight: Option<InFlight>,
    rejected_fingerprint: Option<String>,
    /// Delivery and summary of the rejected snapshot: a supervisor that failed it for a
    /// reason that can pass (a full disk) retries and acks that same delivery APPLIED later.
    rejected_delivery: Option<(u64, String)>,
    applied_fingerprint: Option<String>,
    failed_last: bool,
    /// Provider environment revision of the latest build of this component.
    built_env_revision: String,
    /// For `sandbox_config`: the input revisions of its latest build.
    built_revisions: Option<ConfigInputRevisions>,
}

/// Per-component state and recent events (time in ms, text) of a session.
pub type Diagnostics = (Vec<(Component, ComponentState)>, Vec<(i64, String)>);

/// Most recent events kept per session.
const RECENT_EVENTS: usize = 20;

#[derive(Debug, Default)]
struct Inner {
    mark: Mark,
    /// The mark the task took and is building: waiting for its permit, or
    /// in its builds. Still pending until those builds are recorded.
    taken: Mark,
    /// A write (not reconcile) arrived: cuts any build backoff.
    write_pending: bool,
    acks: VecDeque<Ack>,
    components: [ComponentState; 2],
    failures: u32,
    backoff_until: Option<Instant>,
    events: VecDeque<(i64, String)>,
    /// When reconcile next looks at this session; None until its task runs.
    next_reconcile: Option<Instant>,
    reconcile_passes: u32,
    /// What this session sent, bootstrap included: the only configurations its
    /// supervisor's answers may speak for.
    handed: Handed,
}

/// Shared state of one push session's delivery: marked by publications,
/// fed acks by the session loop, drained by the delivery task.
#[derive(Debug)]
pub struct SessionDelivery {
    pub sandbox_id: String,
    pub session_id: String,
    pub workspace: String,
    inner: Mutex<Inner>,
    notify: Notify,
    closed: AtomicBool,
    sequence: AtomicU64,
    /// The first delivery id of the session; ids below it were never sent.
    first_sequence: u64,
    /// False for shadow push: snapshots are sent but never acknowledged.
    expects_acks: bool,
    /// Ends the session when a build finds that the sandbox is no longer served.
    closer: OnceLock<Arc<SessionCloser>>,
}

impl SessionDelivery {
    pub fn new(
        sandbox_id: String,
        session_id: String,
        workspace: String,
        first_sequence: u64,
        expects_acks: bool,
    ) -> Self {
        Self {
            expects_acks,
            sandbox_id,
            session_id,
            workspace,
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            sequence: AtomicU64::new(first_sequence),
            first_sequence,
            closer: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Merges a mark; `from_write` marks cut a build backoff.
    pub fn mark(&self, mark: Mark, from_write: bool) {
        if self.merge_mark(mark, from_write) {
            self.wake();
        }
    }

    /// Merges a mark without waking the task (see [`Self::wake`]); says
    /// whether there was anything to merge.
    pub fn merge_mark(&self, mark: Mark, from_write: bool) -> bool {
        if mark.is_empty() {
            return false;
        }
        let mut inner = self.lock();
        inner.mark.merge(mark);
        inner.write_pending |= from_write;
        true
    }

    /// Wakes the task to take what was merged.
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    pub fn ack(&self, ack: Ack) {
        self.lock().acks.push_back(ack);
        self.notify.notify_one();
    }

    /// Whether the unacked delivery `delivery_id` carried a pending sandbox
    /// operation, which its ack may end and someone may be waiting for.
    pub fn carries_pending_operation(&self, component: Component, delivery_id: u64) -> bool {
        self.lock().components[component.index()]
            .in_flight
            .as_ref()
            .is_some_and(|f| f.delivery_id == delivery_id && f.pending_operation)
    }

    /// Records a snapshot sent outside the delivery task: the bootstrap's.
    pub fn note_sent(&self, update: &pb::ConfigUpdate) {
        self.lock().handed.sent(update);
    }

    /// Whether every configuration `report` names was sent on this session.
    pub fn sent_all_of(&self, report: &ReportedRevisions) -> bool {
        self.lock().handed.vouches_for(report)
    }

    /// Gives the delivery the means to end its whole session (see [`Self::end_session`]).
    pub fn attach_closer(&self, closer: Arc<SessionCloser>) {
        // Set once, when the session is registered; a second call changes nothing.
        let _ = self.closer.set(closer);
    }

    /// Ends the session this delivery serves, telling its supervisor `reason`.
    pub fn end_session(&self, reason: &str) {
        if let Some(closer) = self.closer.get() {
            closer.close(reason);
        }
        self.close();
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Components marked for a rebuild and not built yet: marked and not
    /// taken, or taken and waiting for a permit or in their build.
    pub fn pending_marks(&self) -> usize {
        let inner = self.lock();
        let mut pending = inner.mark;
        pending.merge(inner.taken);
        pending.components().count()
    }

    /// Whether `delivery_id` is one this session has handed out.
    pub fn was_sent(&self, delivery_id: u64) -> bool {
        (self.first_sequence..self.sequence.load(Ordering::SeqCst)).contains(&delivery_id)
    }

    /// The next per-session sequence number (also used as delivery id).
    pub fn next_sequence(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::SeqCst)
    }

    /// Records that the bootstrap put these fingerprints in effect.
    pub fn record_bootstrap(&self, config: &Built, provider_env: &Built) {
        let mut inner = self.lock();
        for built in [config, provider_env] {
            let state = &mut inner.components[built.component.index()];
            state.built_env_revision = built.provider_env_revision.clone();
            state.built_revisions = built.input_revisions.clone();
            state.desired = built.summary.clone();
            state.sent = built.summary.clone();
            state.sent_at_ms = Some(now_ms());
            state.acked = built.summary.clone();
            state.ack_status = "APPLIED (bootstrap)".into();
            state.acked_at_ms = Some(now_ms());
            state.applied_fingerprint = Some(built.fingerprint.clone());
        }
        push_event(&mut inner, "bootstrap applied".into());
    }

    /// Records a bootstrap the supervisor refused while it keeps running what it had: its
    /// `sandbox_config` is parked like a rejected delivery, so it is not sent again until a
    /// build yields different content. With `policy_rejected` only its policy was refused
    /// and the provider environment is in effect; otherwise that is parked too.
    pub fn record_refused_bootstrap(
        &self,
        config: &Built,
        provider_env: &Built,
        policy_rejected: bool,
        reason: &str,
    ) {
        let mut inner = self.lock();
        for built in [config, provider_env] {
            let in_effect = policy_rejected && built.component == Component::ProviderEnvironment;
            let state = &mut inner.components[built.component.index()];
            state.built_env_revision = built.provider_env_revision.clone();
            state.built_revisions = built.input_revisions.clone();
            state.desired = built.summary.clone();
            state.sent = built.summary.clone();
            state.sent_at_ms = Some(now_ms());
            state.acked = built.summary.clone();
            state.acked_at_ms = Some(now_ms());
            if in_effect {
                state.ack_status = "APPLIED (bootstrap)".into();
                state.applied_fingerprint = Some(built.fingerprint.clone());
            } else {
                state.ack_status = if policy_rejected {
                    "RETAINED_LAST_KNOWN_GOOD_POLICY (bootstrap)".into()
                } else {
                    "FAILED (bootstrap)".into()
                };
                state.rejected_fingerprint = Some(built.fingerprint.clone());
                state.failed_last = true;
                state.last_failure = reason.to_string();
            }
        }
        push_event(
            &mut inner,
            format!("bootstrap refused; the supervisor keeps its last-known-good: {reason}"),
        );
    }

    /// A copy of the per-component state and recent events, for diagnostics.
    pub fn diagnostics(&self) -> Diagnostics {
        let inner = self.lock();
        let now = Instant::now();
        let components = Component::ALL
            .iter()
            .map(|c| {
                let mut state = inner.components[c.index()].clone();
                state.dirty = inner.mark.contains(*c);
                state.lane = if state.dirty {
                    inner.mark.lane().as_str().into()
                } else {
                    String::new()
                };
                state.held = state.in_flight.is_some() && state.slot.is_some();
                state.backoff = inner
                    .backoff_until
                    .map(|until| until.saturating_duration_since(now))
                    .unwrap_or_default();
                (*c, state)
            })
            .collect();
        (components, inner.events.iter().cloned().collect())
    }
}

/// How a due session's pass started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileDue {
    /// It was marked for a rebuild without asking the store.
    Rebuilt,
    /// It waits for its sandbox's input revisions.
    Check,
}

/// What reconcile asks of a session (`reconcile.rs`).
impl SessionDelivery {
    /// Starts this session's reconcile pass if one is due at `now`, and
    /// schedules the next. Marks at once whatever it rebuilds whatever the
    /// store says: a component the supervisor last failed to apply, a
    /// `sandbox_config` without known input revisions, every component on
    /// a full-rebuild pass, and anything already marked (merged as before).
    pub(super) fn start_reconcile_pass(
        &self,
        now: Instant,
        tuning: &DeliveryTuning,
    ) -> Option<ReconcileDue> {
        let mut inner = self.lock();
        if inner.next_reconcile.is_none_or(|at| now < at) {
            return None;
        }
        inner.next_reconcile = Some(on_shared_tick(
            now + tuning.reconcile_interval,
            tuning.reconcile_tick(),
        ));
        inner.reconcile_passes = inner.reconcile_passes.wrapping_add(1);
        let full_pass = tuning.reconcile_full_rebuild_every > 0
            && inner
                .reconcile_passes
                .is_multiple_of(tuning.reconcile_full_rebuild_every);
        let config = &inner.components[Component::SandboxConfig.index()];
        let env = &inner.components[Component::ProviderEnvironment.index()];
        let rebuild_config = full_pass
            || config.failed_last
            || config.built_revisions.is_none()
            || !inner.mark.is_empty()
            || !inner.taken.is_empty();
        let mut components = Vec::with_capacity(2);
        if rebuild_config {
            components.push(Component::SandboxConfig);
        }
        if env.failed_last {
            components.push(Component::ProviderEnvironment);
        }
        let mark = Mark::new(&components, Lane::Fanout);
        if !mark.is_empty() {
            inner.mark.merge(mark);
            drop(inner);
            self.wake();
        }
        Some(if rebuild_config {
            ReconcileDue::Rebuilt
        } else {
            ReconcileDue::Check
        })
    }

    /// Ends a reconcile check: marks `sandbox_config` for a rebuild unless
    /// its latest build read exactly `current` (None: the sandbox is gone,
    /// or its revisions could not be read). Says whether it marked.
    pub(super) fn rebuild_unless_built_from(&self, current: Option<&ConfigInputRevisions>) -> bool {
        let built_from_current = {
            let inner = self.lock();
            current.is_some()
                && inner.components[Component::SandboxConfig.index()]
                    .built_revisions
                    .as_ref()
                    == current
        };
        if !built_from_current {
            self.mark(Mark::new(&[Component::SandboxConfig], Lane::Fanout), false);
        }
        !built_from_current
    }
}

fn push_event(inner: &mut Inner, text: String) {
    if inner.events.len() == RECENT_EVENTS {
        inner.events.pop_front();
    }
    inner.events.push_back((now_ms(), text));
}

/// Runs until the session closes or its outbound channel does.
/// Every session runs this for its whole life, so its state is kept
/// small: the steps that are not waiting (building, sending) are boxed.
pub async fn run(
    delivery: Arc<SessionDelivery>,
    source: Arc<dyn SnapshotSource>,
    permits: Arc<Permits>,
    out: mpsc::Sender<super::Frame>,
    tuning: DeliveryTuning,
    metrics: Arc<Metrics>,
) {
    {
        let first_reconcile = tuning.reconcile_first_min + jitter(tuning.reconcile_interval);
        delivery.lock().next_reconcile = Some(on_shared_tick(
            Instant::now() + first_reconcile,
            tuning.reconcile_tick(),
        ));
    }
    loop {
        if delivery.is_closed() || out.is_closed() {
            return;
        }
        let wake_at = next_wake(&delivery, &tuning);
        tokio::select! {
            () = delivery.notify.notified() => {}
            () = sleep_until_opt(wake_at) => {}
            () = out.closed() => return,
        }
        process_acks(&delivery, &metrics);
        expire_ack_waits(&delivery, &tuning);
        let Some(mark) = take_mark(&delivery) else {
            if !Box::pin(send_ready(&delivery, &source, &out, &metrics)).await {
                return;
            }
            continue;
        };
        let mut mark = mark;
        let queued_at = Instant::now();
        let mut builds = start_builds(&*source, &delivery.sandbox_id, &mark);
        let (permit, raised) = Box::pin(acquire_permit(&delivery, &permits, &mut mark)).await;
        if raised {
            // The raising write may have committed after the inputs were read.
            builds = start_builds(&*source, &delivery.sandbox_id, &mark);
        }
        let lane = mark.lane();
        metrics
            .queue_wait
            .get_or_create(&crate::metrics::LaneLabel {
                lane: lane.as_str(),
            })
            .observe(queued_at.elapsed().as_secs_f64());
        for (component, build) in builds {
            let deadline = match component {
                Component::SandboxConfig => tuning.sandbox_config_deadline,
                Component::ProviderEnvironment => tuning.provider_environment_deadline,
            };
            let result = match Box::pin(tokio::time::timeout(deadline, build)).await {
                Ok(result) => result,
                Err(_) => Err(BuildError::Deadline(deadline)),
            };
            let outcome = record_build(&delivery, component, result, &tuning, &metrics);
            metrics
                .builds
                .get_or_create(&DeliveryLabels {
                    component: component.as_str(),
                    lane: lane.as_str(),
                    outcome,
                })
                .inc();
        }
        drop(permit);
        delivery.lock().taken = Mark::default();
        if delivery.is_closed() {
            // A late build of a closed session is discarded.
            return;
        }
        if !Box::pin(send_ready(&delivery, &source, &out, &metrics)).await {
            return;
        }
    }
}

/// The builds of a mark's components, started in order.
fn start_builds<'a>(
    source: &'a dyn SnapshotSource,
    sandbox_id: &'a str,
    mark: &Mark,
) -> Vec<(Component, BoxFuture<'a, Result<Built, BuildError>>)> {
    mark.components()
        .map(|component| (component, source.build(sandbox_id, component, mark.lane())))
        .collect()
}

/// Waits for a build permit in the mark's lane; says whether the lane was
/// raised. A sandbox write that arrives while this session waits in the
/// fanout queue raises the lane: its mark joins the one being waited for
/// and the wait moves to the sandbox lane, so a session queued behind a
/// fleet-wide fanout does not hold its own sandbox's write back for the
/// whole fanout.
async fn acquire_permit(
    delivery: &SessionDelivery,
    permits: &Permits,
    mark: &mut Mark,
) -> (BuildPermit, bool) {
    if mark.lane() == Lane::Sandbox {
        return (permits.acquire(Lane::Sandbox).await, false);
    }
    let mut raised_by_write = false;
    let mut woken = false;
    let permit = {
        let fanout = permits.acquire(Lane::Fanout);
        tokio::pin!(fanout);
        loop {
            tokio::select! {
                permit = &mut fanout => break permit,
                () = delivery.notify.notified() => {
                    woken = true;
                    let raised = {
                        let mut inner = delivery.lock();
                        (!inner.mark.is_empty() && inner.mark.lane() == Lane::Sandbox).then(|| {
                            inner.write_pending = false;
                            let raised = std::mem::take(&mut inner.mark);
                            inner.taken.merge(raised);
                            raised
                        })
                    };
                    if let Some(raised) = raised {
                        mark.merge(raised);
                        raised_by_write = true;
                        break permits.acquire(Lane::Sandbox).await;
                    }
                }
            }
        }
    };
    if woken {
        // The wake may also have been an ack: the main loop looks again.
        delivery.notify.notify_one();
    }
    (permit, raised_by_write)
}

fn jitter(range: Duration) -> Duration {
    use rand::Rng;
    let millis = u64::try_from(range.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(rand::rng().random_range(0..millis))
}

/// When the task must look again without a wake-up: a build backoff ending
/// or an ack wait running out. Reconcile wakes it by a mark.
fn next_wake(delivery: &SessionDelivery, tuning: &DeliveryTuning) -> Option<Instant> {
    let inner = delivery.lock();
    let backoff_end = inner.backoff_until.filter(|_| !inner.mark.is_empty());
    let ack_waits_end = inner
        .components
        .iter()
        .filter_map(|state| match &state.in_flight {
            Some(InFlight {
                sent_at: Some(at), ..
            }) => Some(*at + tuning.ack_timeout),
            _ => None,
        });
    backoff_end.into_iter().chain(ack_waits_end).min()
}

/// Sleeps until `deadline`, or forever without one.
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Takes the pending mark unless a build backoff is running (a write cuts it).
fn take_mark(delivery: &SessionDelivery) -> Option<Mark> {
    let mut inner = delivery.lock();
    if inner.mark.is_empty() {
        return None;
    }
    if inner.write_pending {
        inner.backoff_until = None;
        inner.write_pending = false;
    }
    if inner
        .backoff_until
        .is_some_and(|until| Instant::now() < until)
    {
        return None;
    }
    let mark = std::mem::take(&mut inner.mark);
    inner.taken = mark;
    Some(mark)
}

fn process_acks(delivery: &SessionDelivery, metrics: &Metrics) {
    let mut inner = delivery.lock();
    while let Some(ack) = inner.acks.pop_front() {
        let status_name = ack
            .status
            .as_str_name()
            .trim_start_matches("CONFIG_APPLY_STATUS_");
        metrics
            .acks
            .get_or_create(&StatusLabel {
                status: static_status(ack.status),
            })
            .inc();
        let state = &mut inner.components[ack.component.index()];
        let Some(in_flight) = state
            .in_flight
            .take_if(|f| f.delivery_id == ack.delivery_id)
        else {
            if ack.status == pb::ConfigApplyStatus::Applied
                && let Some((_, summary)) = state
                    .rejected_delivery
                    .take_if(|(id, _)| *id == ack.delivery_id)
            {
                // The rejected delivery applied on a retry: it is in effect after all, and its
                // content is no longer parked.
                state.applied_fingerprint = state.rejected_fingerprint.take();
                state.acked = summary;
                state.ack_status = status_name.to_string();
                state.acked_at_ms = Some(now_ms());
                state.failed_last = false;
                state.last_failure.clear();
                let text = format!(
                    "{} delivery {} applied on the supervisor's retry",
                    ack.component.as_str(),
                    ack.delivery_id
                );
                push_event(&mut inner, text);
            }
            // Otherwise an ack for something no longer in flight (resent after a timeout):
            // nothing held.
            continue;
        };
        state.acked = in_flight.summary.clone();
        state.ack_status = status_name.to_string();
        state.acked_at_ms = Some(now_ms());
        match ack.status {
            pb::ConfigApplyStatus::Applied
            | pb::ConfigApplyStatus::Duplicate
            | pb::ConfigApplyStatus::RetainedLocalOverride => {
                state.applied_fingerprint = Some(in_flight.fingerprint);
                state.rejected_fingerprint = None;
                state.rejected_delivery = None;
                state.failed_last = false;
                state.last_failure.clear();
            }
            pb::ConfigApplyStatus::RetainedLastKnownGoodPolicy => {
                // Its settings and provider environment are in effect, its policy was
                // refused: parked like a rejection, so it is not sent again until it changes.
                state.rejected_fingerprint = Some(in_flight.fingerprint);
                state.rejected_delivery = None;
                state.failed_last = true;
                state.last_failure = ack.reason.clone();
            }
            pb::ConfigApplyStatus::Failed => {
                state.rejected_delivery = Some((ack.delivery_id, in_flight.summary.clone()));
                state.rejected_fingerprint = Some(in_flight.fingerprint);
                state.failed_last = true;
                state.last_failure = ack.reason.clone();
            }
            _ => {}
        }
        let text = format!(
            "{} delivery {} acked {status_name}{}",
            ack.component.as_str(),
            ack.delivery_id,
            if ack.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", ack.reason)
            }
        );
        push_event(&mut inner, text);
    }
}

fn static_status(status: pb::ConfigApplyStatus) -> &'static str {
    match status {
        pb::ConfigApplyStatus::Applied => "APPLIED",
        pb::ConfigApplyStatus::Failed => "FAILED",
        pb::ConfigApplyStatus::RetainedLocalOverride => "RETAINED_LOCAL_OVERRIDE",
        pb::ConfigApplyStatus::RetainedLastKnownGoodPolicy => "RETAINED_LAST_KNOWN_GOOD_POLICY",
        pb::ConfigApplyStatus::AwaitingComponent => "AWAITING_COMPONENT",
        pb::ConfigApplyStatus::Duplicate => "DUPLICATE",
        pb::ConfigApplyStatus::Stale => "STALE",
        pb::ConfigApplyStatus::Unspecified => "UNSPECIFIED",
    }
}

/// An unacked delivery past the ack timeout is forgotten and the latest rebuilt.
fn expire_ack_waits(delivery: &SessionDelivery, tuning: &DeliveryTuning) {
    let now = Instant::now();
    let mut expired = Vec::new();
    {
        let mut inner = delivery.lock();
        for c in Component::ALL {
            let state = &mut inner.components[c.index()];
            if state
                .in_flight
                .as_ref()
                .and_then(|f| f.sent_at)
                .is_some_and(|at| now >= at + tuning.ack_timeout)
            {
                state.in_flight = None;
                expired.push(c);
            }
        }
        for c in &expired {
            push_event(
                &mut inner,
                format!("{} ack timed out; resending the latest", c.as_str()),
            );
        }
    }
    if !expired.is_empty() {
        delivery.mark(Mark::new(&expired, Lane::Fanout), false);
    }
}

fn record_build(
    delivery: &SessionDelivery,
    component: Component,
    result: Result<Built, BuildError>,
    tuning: &DeliveryTuning,
    metrics: &Metrics,
) -> &'static str {
    let mut inner = delivery.lock();
    match result {
        Ok(built) => {
            inner.failures = 0;
            inner.backoff_until = None;
            inner.components[component.index()].built_env_revision =
                built.provider_env_revision.clone();
            // A config expecting another provider environment than the one last
            // built (a change this session's marks missed, e.g. made through
            // another replica) pulls the environment in too.
            if component == Component::SandboxConfig {
                let env = &inner.components[Component::ProviderEnvironment.index()];
                if !env.built_env_revision.is_empty()
                    && env.built_env_revision != built.provider_env_revision
                {
                    inner
                        .mark
                        .merge(Mark::new(&[Component::ProviderEnvironment], Lane::Fanout));
                }
            }
            let state = &mut inner.components[component.index()];
            state.desired = built.summary.clone();
            state.built_revisions = built.input_revisions.clone();
            if state.rejected_fingerprint.as_deref() == Some(built.fingerprint.as_str()) {
                // No reject loop: the supervisor already refused exactly this.
                state.slot = None;
                metrics.suppressed_resends.inc();
                return "suppressed_rejected";
            }
            let in_flight_same = state.in_flight.as_ref().map(|f| f.fingerprint.as_str())
                == Some(built.fingerprint.as_str());
            let applied_same =
                state.applied_fingerprint.as_deref() == Some(built.fingerprint.as_str());
            if in_flight_same || (applied_same && state.in_flight.is_none()) {
                state.slot = None;
                return "unchanged";
            }
            state.slot = Some(built);
            "built"
        }
        Err(BuildError::Undeliverable(reason)) => {
            // Stopped or deleted since the session opened (possibly through another
            // replica): its supervisor gets nothing more, and learns why.
            push_event(&mut inner, format!("session closed: {reason}"));
            drop(inner);
            delivery.end_session(&reason);
            "undeliverable"
        }
        Err(err) => {
            inner.failures += 1;
            let backoff = tuning.backoff(inner.failures);
            inner.backoff_until = Some(Instant::now() + backoff);
            inner.mark.merge(Mark::new(&[component], Lane::Fanout));
            let state = &mut inner.components[component.index()];
            state.last_failure = format!("build failed: {err}");
            push_event(
                &mut inner,
                format!(
                    "{} build failed: {err}; retry in {backoff:?}",
                    component.as_str()
                ),
            );
            "failed"
        }
    }
}

/// Sends every slotted snapshot whose component has nothing in flight.
/// Returns false once the session's outbound side is gone.
async fn send_ready(
    delivery: &SessionDelivery,
    source: &Arc<dyn SnapshotSource>,
    out: &mpsc::Sender<super::Frame>,
    metrics: &Metrics,
) -> bool {
    for component in Component::ALL {
        let ready = {
            let mut inner = delivery.lock();
            let state = &mut inner.components[component.index()];
            if state.in_flight.is_some() {
                None
            } else {
                state.slot.take()
            }
        };
        let Some(mut built) = ready else { continue };
        let sequence = delivery.next_sequence();
        // Moved, not cloned: a snapshot carries the whole policy.
        let mut update = std::mem::take(&mut built.update);
        update.delivery_id = sequence;
        update.sequence = sequence;
        {
            let mut inner = delivery.lock();
            inner.handed.sent(&update);
            let state = &mut inner.components[component.index()];
            if delivery.expects_acks {
                state.in_flight = Some(InFlight {
                    delivery_id: sequence,
                    fingerprint: built.fingerprint.clone(),
                    summary: built.summary.clone(),
                    sent_at: Some(Instant::now()),
                    pending_operation: built.pending_operation,
                });
            } else {
                // Shadow push: nothing will be acknowledged, so nothing is held.
                state.applied_fingerprint = Some(built.fingerprint.clone());
            }
            state.sent = built.summary.clone();
            state.sent_at_ms = Some(now_ms());
            push_event(
                &mut inner,
                format!(
                    "{} delivery {sequence} sent: {}",
                    component.as_str(),
                    built.summary
                ),
            );
        }
        let frame = pb::GatewayMessage {
            payload: Some(pb::gateway_message::Payload::ConfigUpdate(update)),
        };
        if out.send(Box::new(frame)).await.is_err() {
            return false;
        }
        metrics
            .sends
            .get_or_create(&ComponentLabel {
                component: component.as_str(),
            })
            .inc();
        if component == Component::SandboxConfig && built.pending_operation {
            source.delivered(&delivery.sandbox_id, &built).await;
        }
    }
    true
}
