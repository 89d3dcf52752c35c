//! Prometheus metrics of the gateway and the `/metrics` listener.
//!
//! Labels are closed sets (RPC names, statuses, states); no label or value
//! ever carries a credential, a policy or a provider value.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabel {
    pub rpc: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    pub mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaneLabel {
    pub lane: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub component: &'static str,
    pub lane: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// Who dropped log lines: the supervisor (its buffer was full) or this
/// replica (its per-sandbox bound).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedByLabel {
    pub by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabel {
    pub component: &'static str,
}

/// A wait for an operation: which RPC waited, and whether the operation
/// ended (`terminal`) or the wait did first (`deadline`, also when the
/// gateway stops).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WaitLabels {
    pub rpc: &'static str,
    pub ended: &'static str,
}

fn queue_wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 10))
}

/// 1 ms to about 4 min.
fn operation_wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

/// Store-wide readings, taken at each scrape (`Store::gauges`): the state
/// they describe is shared by every replica, so each exports the same values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreGauges {
    /// Operations not terminal yet (`PENDING` or `DELIVERED`).
    pub operations_pending: i64,
    /// When the oldest of them was created (ms since the epoch).
    pub oldest_pending_created_at_ms: Option<i64>,
    /// The earliest `expires_at` over every provider's credentials (ms).
    pub earliest_credential_expiry_ms: Option<i64>,
    /// Registered replicas whose heartbeat is older than the liveness window.
    pub replicas_silent: i64,
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    /// Sessions accepted from legacy (revision 0) supervisors.
    pub legacy_sessions: Counter,
    /// Sessions accepted, by negotiated mode.
    pub sessions_accepted: Family<ModeLabel, Counter>,
    /// Sessions rejected (bad credential, unknown or deleted sandbox, bad hello).
    pub sessions_rejected: Counter,
    /// Open sessions closed because a newer session of the same sandbox replaced them.
    pub sessions_replaced: Counter,
    /// Sessions refused because another supervisor process holds the sandbox's live session.
    pub duplicate_sessions_refused: Counter,
    /// Sessions currently connected to this replica.
    pub sessions_connected: Gauge,
    /// Poll RPCs served (`GetSandboxConfig`, `GetSandboxProviderEnvironment`).
    pub poll_requests: Family<RpcLabel, Counter>,
    /// Supervisor reports and acks received, by status.
    pub reports: Family<StatusLabel, Counter>,
    /// Supervisor reports refused before they reached the store, by reason: a revision out
    /// of the store's range, or a configuration never sent to that supervisor.
    pub refused_claims: Family<ReasonLabel, Counter>,
    /// Operations that reached a terminal state through a report.
    pub operations_resolved: Counter,
    /// Snapshot builds by component, lane and outcome.
    pub builds: Family<DeliveryLabels, Counter>,
    /// Time a build waited for its permit, by lane (seconds).
    pub queue_wait: Family<LaneLabel, Histogram, fn() -> Histogram>,
    /// Push acks by status.
    pub acks: Family<StatusLabel, Counter>,
    /// Snapshots not resent because the supervisor already rejected them.
    pub suppressed_resends: Counter,
    /// Reconcile passes started.
    pub reconcile_passes: Counter,
    /// Reconcile passes that found a session's input revisions where its
    /// latest build read them, so nothing was rebuilt.
    pub reconcile_unchanged: Counter,
    /// Bootstraps by outcome.
    pub bootstraps: Family<OutcomeLabel, Counter>,
    /// Snapshots sent on push sessions, by component.
    pub sends: Family<ComponentLabel, Counter>,
    /// When a configuration frame was last handed to a session's stream
    /// (Unix seconds, millisecond precision; 0 before the first): after a
    /// fanout, when its last frame went out.
    pub config_frame_last_sent: Gauge<f64, AtomicU64>,
    /// Time callers waited for an operation (seconds).
    pub operation_waits: Family<WaitLabels, Histogram, fn() -> Histogram>,
    /// Hints sent to peer replicas, by result (`delivered`, `stale_owner`,
    /// `no_session`, `unsupported_peer`, `rejected`, `unreachable`).
    pub peer_notifies: Family<ResultLabel, Counter>,
    /// Supervisor sessions of legacy (revision 0) supervisors connected now.
    pub legacy_sessions_connected: Gauge,
    /// [`StoreGauges::operations_pending`].
    pub operations_pending: Gauge,
    /// [`StoreGauges::oldest_pending_created_at_ms`], in seconds; 0 when none.
    pub oldest_pending_created: Gauge,
    /// [`StoreGauges::earliest_credential_expiry_ms`], in seconds; 0 when none.
    pub earliest_credential_expiry: Gauge,
    /// [`StoreGauges::replicas_silent`].
    pub replicas_silent: Gauge,
    /// Sandbox log lines received from supervisors.
    pub log_lines_received: Counter,
    /// Sandbox log lines dropped, by who dropped them (`supervisor`, `gateway`).
    pub log_lines_dropped: Family<DroppedByLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(Family::default())
    }
}

impl Metrics {
    /// `operations_ended`: the store's count of operations ended, by
    /// terminal state ([`crate::store::OperationEvents::ended_counts`]).
    pub fn new(operations_ended: Family<StateLabel, Counter>) -> Self {
        let mut registry = Registry::with_prefix("openshell");
        registry.register(
            "operations_ended",
            "Operations this replica ended, by terminal state",
            operations_ended,
        );
        let legacy_sessions = Counter::default();
        registry.register(
            "supervisor_protocol_legacy_sessions",
            "Sessions accepted from legacy (protocol revision 0) supervisors",
            legacy_sessions.clone(),
        );
        let sessions_accepted = Family::<ModeLabel, Counter>::default();
        registry.register(
            "supervisor_sessions_accepted",
            "Supervisor sessions accepted, by negotiated delivery mode",
            sessions_accepted.clone(),
        );
        let sessions_rejected = Counter::default();
        registry.register(
            "supervisor_sessions_rejected",
            "Supervisor sessions rejected before acceptance",
            sessions_rejected.clone(),
        );
        let sessions_replaced = Counter::default();
        registry.register(
            "supervisor_sessions_replaced",
            "Open supervisor sessions closed because a newer session of the same sandbox replaced them",
            sessions_replaced.clone(),
        );
        let duplicate_sessions_refused = Counter::default();
        registry.register(
            "supervisor_duplicate_sessions_refused",
            "Supervisor sessions refused because another supervisor process holds the sandbox's live session (a shared sandbox credential)",
            duplicate_sessions_refused.clone(),
        );
        let sessions_connected = Gauge::default();
        registry.register(
            "supervisor_sessions_connected",
            "Supervisor sessions connected to this replica",
            sessions_connected.clone(),
        );
        let poll_requests = Family::<RpcLabel, Counter>::default();
        registry.register(
            "config_poll_requests",
            "Poll RPCs served to supervisors",
            poll_requests.clone(),
        );
        let reports = Family::<StatusLabel, Counter>::default();
        registry.register(
            "supervisor_reports",
            "Apply reports and acks received from supervisors, by status",
            reports.clone(),
        );
        let refused_claims = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "supervisor_reports_refused",
            "Supervisor reports refused before reaching the store, by reason (out_of_range, never_sent)",
            refused_claims.clone(),
        );
        let operations_resolved = Counter::default();
        registry.register(
            "operations_resolved",
            "Operations resolved to a terminal state by supervisor reports",
            operations_resolved.clone(),
        );
        let builds = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "config_builds",
            "Snapshot builds by component, lane and outcome",
            builds.clone(),
        );
        let queue_wait = Family::<LaneLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            queue_wait_histogram,
        );
        registry.register(
            "config_build_queue_wait_seconds",
            "Time a build waited for a permit, by lane",
            queue_wait.clone(),
        );
        let acks = Family::<StatusLabel, Counter>::default();
        registry.register("config_acks", "Push acks received, by status", acks.clone());
        let suppressed_resends = Counter::default();
        registry.register(
            "config_suppressed_resends",
            "Snapshots not resent because the supervisor rejected the same content",
            suppressed_resends.clone(),
        );
        let reconcile_passes = Counter::default();
        registry.register(
            "config_reconcile_passes",
            "Reconcile passes started",
            reconcile_passes.clone(),
        );
        let reconcile_unchanged = Counter::default();
        registry.register(
            "config_reconcile_unchanged",
            "Reconcile passes that found the session's input revisions unchanged and rebuilt nothing",
            reconcile_unchanged.clone(),
        );
        let bootstraps = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "config_bootstraps",
            "Bootstraps by outcome",
            bootstraps.clone(),
        );
        let sends = Family::<ComponentLabel, Counter>::default();
        registry.register(
            "config_sends",
            "Snapshots sent on push sessions, by component",
            sends.clone(),
        );
        let operation_waits =
            Family::<WaitLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                operation_wait_histogram,
            );
        registry.register(
            "operation_wait_seconds",
            "Time UpdateConfig(WAIT_FOR_APPLY) and WaitForApply waited, by RPC and by whether the operation ended first",
            operation_waits.clone(),
        );
        let peer_notifies = Family::<ResultLabel, Counter>::default();
        registry.register(
            "peer_notifies",
            "Hints sent to peer replicas about committed writes, by result",
            peer_notifies.clone(),
        );
        let legacy_sessions_connected = Gauge::default();
        registry.register(
            "supervisor_protocol_legacy_sessions_connected",
            "Sessions of legacy (protocol revision 0) supervisors connected to this replica",
            legacy_sessions_connected.clone(),
        );
        let operations_pending = Gauge::default();
        registry.register(
            "operations_pending",
            "Operations in the store not terminal yet (PENDING or DELIVERED)",
            operations_pending.clone(),
        );
        let oldest_pending_created = Gauge::default();
        registry.register(
            "operations_oldest_pending_created_timestamp_seconds",
            "Creation time of the oldest operation not terminal yet (Unix seconds; 0 when there is none)",
            oldest_pending_created.clone(),
        );
        let earliest_credential_expiry = Gauge::default();
        registry.register(
            "provider_credentials_earliest_expiry_timestamp_seconds",
            "Earliest expiry of any provider's credentials (Unix seconds; 0 when none expires)",
            earliest_credential_expiry.clone(),
        );
        let replicas_silent = Gauge::default();
        registry.register(
            "replicas_silent",
            "Registered replicas whose heartbeat is older than the liveness window",
            replicas_silent.clone(),
        );
        let config_frame_last_sent = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "supervisor_config_frame_last_sent_timestamp_seconds",
            "When this replica last handed a configuration frame to a supervisor session's stream (Unix seconds; 0 before the first)",
            config_frame_last_sent.clone(),
        );
        let log_lines_received = Counter::default();
        registry.register(
            "sandbox_log_lines_received",
            "Sandbox log lines received from supervisors",
            log_lines_received.clone(),
        );
        let log_lines_dropped = Family::<DroppedByLabel, Counter>::default();
        registry.register(
            "sandbox_log_lines_dropped",
            "Sandbox log lines dropped: by the supervisor (its buffer was full) or by this replica's per-sandbox bound",
            log_lines_dropped.clone(),
        );
        Self {
            log_lines_received,
            log_lines_dropped,
            legacy_sessions_connected,
            operations_pending,
            oldest_pending_created,
            earliest_credential_expiry,
            replicas_silent,
            peer_notifies,
            sends,
            config_frame_last_sent,
            operation_waits,
            builds,
            queue_wait,
            acks,
            suppressed_resends,
            reconcile_passes,
            reconcile_unchanged,
            bootstraps,
            registry,
            legacy_sessions,
            sessions_accepted,
            sessions_rejected,
            sessions_replaced,
            duplicate_sessions_refused,
            sessions_connected,
            poll_requests,
            reports,
            refused_claims,
            operations_resolved,
        }
    }

    /// Records one finished wait for an operation.
    pub fn observe_wait(&self, rpc: &'static str, timed_out: bool, waited: std::time::Duration) {
        let ended = if timed_out { "deadline" } else { "terminal" };
        self.operation_waits
            .get_or_create(&WaitLabels { rpc, ended })
            .observe(waited.as_secs_f64());
    }

    /// Sets the store-wide gauges from one reading.
    pub fn record_store(&self, gauges: &StoreGauges) {
        let seconds = |ms: Option<i64>| ms.map_or(0, |ms| ms.div_euclid(1000));
        self.operations_pending.set(gauges.operations_pending);
        self.oldest_pending_created
            .set(seconds(gauges.oldest_pending_created_at_ms));
        self.earliest_credential_expiry
            .set(seconds(gauges.earliest_credential_expiry_ms));
        self.replicas_silent.set(gauges.replicas_silent);
    }

    /// Exports `sample()` as gauge `name`, read at each scrape: for a value
    /// kept elsewhere in pieces (one per session, say), which a gauge set on
    /// every change would have to follow through each of them.
    pub fn register_sampled_gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        sample: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.registry.register_collector(Box::new(Sampled {
            name,
            help,
            sample: SampledValue::Gauge(Box::new(sample)),
        }));
    }

    /// Exports `sample()` as counter `name` (`_total` is appended), read at
    /// each scrape: for a count a component keeps in its own atomics.
    pub fn register_sampled_counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        sample: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.registry.register_collector(Box::new(Sampled {
            name,
            help,
            sample: SampledValue::Counter(Box::new(sample)),
        }));
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::warn!("metrics encoding failed");
        }
        out
    }
}

/// A metric whose value is read when the metrics are encoded.
struct Sampled {
    name: &'static str,
    help: &'static str,
    sample: SampledValue,
}

enum SampledValue {
    Gauge(Box<dyn Fn() -> i64 + Send + Sync>),
    Counter(Box<dyn Fn() -> u64 + Send + Sync>),
}

impl std::fmt::Debug for Sampled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampled")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl prometheus_client::collector::Collector for Sampled {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        match &self.sample {
            SampledValue::Gauge(sample) => {
                let gauge = prometheus_client::metrics::gauge::ConstGauge::new(sample());
                let metric =
                    encoder.encode_descriptor(self.name, self.help, None, gauge.metric_type())?;
                gauge.encode(metric)
            }
            SampledValue::Counter(sample) => {
                let counter = prometheus_client::metrics::counter::ConstCounter::new(sample());
                let metric =
                    encoder.encode_descriptor(self.name, self.help, None, counter.metric_type())?;
                counter.encode(metric)
            }
        }
    }
}

/// Serves `GET /metrics` until the task is aborted. Each scrape first takes
/// a store reading from `read_store`; when that fails (`None`) the store
/// gauges keep their last values.
pub async fn serve<R, F>(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    read_store: R,
) -> std::io::Result<()>
where
    R: Fn() -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Option<StoreGauges>> + Send + 'static,
{
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            let read_store = read_store.clone();
            async move {
                if let Some(gauges) = read_store().await {
                    metrics.record_store(&gauges);
                }
                (
                    [(
                        http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.render(),
                )
            }
        }),
    );
    axum::serve(listener, app).await
}
