//! One `ConnectSupervisor` session: hello, authentication, negotiation,
//! acceptance (nothing is sent before it), heartbeats both ways, and
//! registration in the session registry and the owner index.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use openshell_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::Streaming;
use tonic::metadata::MetadataMap;

use super::claims;
use super::context::SessionContext;
use super::identity::{Refusal, authenticate};
use super::negotiate::{Capabilities, Negotiation, negotiate};
use crate::config_update::{ConfigTarget, ConfigUpdate, commit_update};
use crate::delivery::task::sleep_until_opt;
use crate::delivery::{self, Ack, Component, Frame, SessionDelivery};
use crate::limits::MAX_MESSAGE_BYTES;
use crate::metrics::{ModeLabel, OutcomeLabel, StatusLabel};
use crate::operations::resolution::{ReportedRevisions, sanitize_error};
use crate::operations::{ReportStatus, SupervisorReport};
use crate::session_registry::{SessionCloser, SessionInfo};
use crate::snapshot::{self, Built, SnapshotSource, StoreSource, build_bootstrap};
use crate::store::{Lifecycle, OwnerClaim, SandboxRecord, new_id, now_ms};
use crate::ticks::on_shared_tick;
use crate::wire::timestamp;

/// How long a supervisor has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Sessions silent for this many heartbeat intervals are closed.
const MISSED_HEARTBEATS: u32 = 3;

/// Heartbeats go out on shared ticks of this fraction of the interval (1 s
/// at upstream's 15 s): a session's first comes within one interval and
/// one tick of its acceptance.
const HEARTBEAT_TICKS: u32 = 15;

/// Starts the session task; the returned stream is what the gateway sends.
///
/// A task's memory is the size of its largest state, held for the
/// session's whole life; the one-off steps (authentication, startup
/// exchange, bootstrap, owner claim) and rare events are boxed so an idle
/// session only holds what its read loop needs.
/// Control frames (acceptance, heartbeats) always go out before
/// configuration frames waiting at the same time.
pub fn spawn(
    state: Arc<SessionContext>,
    metadata: MetadataMap,
    inbound: Streaming<pb::SupervisorMessage>,
) -> impl Stream<Item = pb::GatewayMessage> {
    let (control_tx, control_rx) = mpsc::channel(16);
    let (config_tx, config_rx) = mpsc::channel(4);
    let tasks = state.session_tasks.clone();
    let metrics = state.metrics.clone();
    tasks.spawn(run(state, metadata, inbound, control_tx, config_tx));
    futures::stream::unfold(
        (control_rx, config_rx, false, metrics),
        |(mut control, mut config, mut config_done, metrics)| async move {
            loop {
                tokio::select! {
                    biased;
                    frame = control.recv() => {
                        // The session ends with its control channel.
                        return frame.map(|f| (*f, (control, config, config_done, metrics)));
                    }
                    frame = config.recv(), if !config_done => match frame {
                        Some(f) => {
                            metrics.config_frame_last_sent.set(now_ms() as f64 / 1000.0);
                            return Some((*f, (control, config, config_done, metrics)));
                        }
                        None => config_done = true,
                    },
                }
            }
        },
    )
}

fn rejected(refusal: Refusal) -> Frame {
    Box::new(pb::GatewayMessage {
        payload: Some(pb::gateway_message::Payload::SessionRejected(
            pb::SessionRejected {
                reason: refusal.reason,
                permanent: refusal.permanent,
            },
        )),
    })
}

fn heartbeat() -> Frame {
    Box::new(pb::GatewayMessage {
        payload: Some(pb::gateway_message::Payload::Heartbeat(
            pb::GatewayHeartbeat {
                sent_at: Some(timestamp(now_ms())),
            },
        )),
    })
}

async fn read_hello(
    inbound: &mut Streaming<pb::SupervisorMessage>,
) -> Result<pb::SupervisorHello, Refusal> {
    let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.next()).await;
    match first {
        Ok(Some(Ok(pb::SupervisorMessage {
            payload: Some(pb::supervisor_message::Payload::Hello(hello)),
        }))) => Ok(hello),
        Ok(Some(Ok(_))) => Err(Refusal {
            reason: "the first frame of a session must be SupervisorHello".into(),
            permanent: true,
        }),
        Ok(Some(Err(status))) => Err(Refusal {
            reason: format!("stream error before hello: {}", status.message()),
            permanent: false,
        }),
        Ok(None) => Err(Refusal {
            reason: "stream closed before hello".into(),
            permanent: false,
        }),
        Err(_) => Err(Refusal {
            reason: format!("no SupervisorHello within {HELLO_TIMEOUT:?}"),
            permanent: false,
        }),
    }
}

/// A session that ends before acceptance: what the supervisor is told, and
/// which counter records it.
struct Turnaway {
    refusal: Refusal,
    counted_as: TurnawayCount,
    /// The sandbox, once the credential named it: its inspection shows the refusal.
    sandbox_id: Option<String>,
}

enum TurnawayCount {
    /// The supervisor itself was refused (hello, identity, lifecycle,
    /// startup exchange).
    Rejected,
    /// The gateway could not build the bootstrap.
    BootstrapBuildFailed,
    /// The gateway could not record the session; the supervisor is not at fault.
    Uncounted,
}

impl Turnaway {
    fn rejected(refusal: Refusal) -> Self {
        Self {
            refusal,
            counted_as: TurnawayCount::Rejected,
            sandbox_id: None,
        }
    }

    fn of_sandbox(mut self, sandbox_id: &str) -> Self {
        self.sandbox_id = Some(sandbox_id.to_string());
        self
    }

    async fn send(self, state: &SessionContext, tx: &mpsc::Sender<Frame>) {
        if let Some(sandbox_id) = &self.sandbox_id {
            state
                .sessions
                .record_refusal(sandbox_id, &self.refusal.reason);
        }
        match self.counted_as {
            TurnawayCount::Rejected => {
                state.metrics.sessions_rejected.inc();
            }
            TurnawayCount::BootstrapBuildFailed => {
                state
                    .metrics
                    .bootstraps
                    .get_or_create(&OutcomeLabel {
                        outcome: "build_failed",
                    })
                    .inc();
            }
            TurnawayCount::Uncounted => {}
        }
        tracing::warn!(reason = %self.refusal.reason, "supervisor session rejected");
        let _ = tx.send(rejected(self.refusal)).await;
    }
}

/// A supervisor that may have a session: who it is and what it negotiated.
struct Admitted {
    hello: pb::SupervisorHello,
    sandbox: SandboxRecord,
    negotiation: Negotiation,
}

/// A session recorded everywhere it must be before acceptance is sent.
struct Opened {
    session_id: String,
    delivery: Option<Arc<SessionDelivery>>,
    bootstrap: Option<Box<BootstrapFrames>>,
}

/// An accepted session, as its read loop and its teardown need it.
struct Established {
    sandbox_id: String,
    session_id: String,
    delivery: Option<Arc<SessionDelivery>>,
    bootstrap: Option<Box<BootstrapFrames>>,
    closer: Arc<SessionCloser>,
    apply_enabled: bool,
    legacy: bool,
    accepted: Frame,
}

async fn run(
    state: Arc<SessionContext>,
    metadata: MetadataMap,
    mut inbound: Streaming<pb::SupervisorMessage>,
    tx: mpsc::Sender<Frame>,
    config_tx: mpsc::Sender<Frame>,
) {
    // A task's memory is its future's largest state, held for its whole life. The
    // admission's state (hello, sandbox record, bootstrap frames) lives in this boxed
    // step and is freed with it, so an idle session's task holds its read loop only.
    let Some(established) = Box::pin(establish(&state, metadata, &mut inbound, &tx)).await else {
        return;
    };
    let Established {
        sandbox_id,
        session_id,
        delivery,
        bootstrap,
        closer,
        apply_enabled,
        legacy,
        accepted,
    } = established;
    if tx.send(accepted).await.is_ok() {
        let mut session = LiveSession {
            state: &state,
            sandbox_id: &sandbox_id,
            session_id: &session_id,
            tx: &tx,
            config_tx,
            delivery: delivery.clone(),
            bootstrap,
            awaiting_bootstrap_until: None,
            delivery_task: None,
            closer,
        };
        if apply_enabled {
            session.awaiting_bootstrap_until =
                Some(tokio::time::Instant::now() + state.tuning.bootstrap_result_timeout);
        } else {
            session.start_delivery();
        }
        session
            .serve(&mut inbound, state.config.heartbeat_interval)
            .await;
        if let Some(task) = session.delivery_task.take() {
            task.abort();
        }
    }
    if let Some(delivery) = &delivery {
        delivery.close();
        state.publisher.unregister(delivery);
    }
    state.sessions.unregister(&sandbox_id, &session_id);
    state.metrics.sessions_connected.dec();
    if legacy {
        state.metrics.legacy_sessions_connected.dec();
    }
    if let Err(e) = Box::pin(state.store.release_session(&sandbox_id, &session_id)).await {
        tracing::warn!(error = %e, sandbox = %sandbox_id, "cannot release session owner");
    }
    tracing::info!(sandbox = %sandbox_id, session = %session_id, "supervisor session closed");
}

/// Admits the supervisor, opens its session and registers it; `None` when it was
/// turned away (and told so).
async fn establish(
    state: &SessionContext,
    metadata: MetadataMap,
    inbound: &mut Streaming<pb::SupervisorMessage>,
    tx: &mpsc::Sender<Frame>,
) -> Option<Established> {
    // The metadata moves into the admission and is freed with it: an idle session
    // keeps no copy of its request headers.
    let admitted = match admit(state, metadata, inbound, tx).await {
        Ok(admitted) => admitted,
        Err(turnaway) => {
            turnaway.send(state, tx).await;
            return None;
        }
    };
    let opened = match open(state, &admitted).await {
        Ok(opened) => opened,
        Err(turnaway) => {
            turnaway
                .of_sandbox(&admitted.sandbox.id)
                .send(state, tx)
                .await;
            return None;
        }
    };
    let Admitted {
        hello,
        sandbox,
        negotiation,
    } = admitted;
    let Opened {
        session_id,
        delivery,
        bootstrap,
    } = opened;
    let heartbeat_interval = state.config.heartbeat_interval;
    let accepted = pb::SessionAccepted {
        session_id: session_id.clone(),
        config_push_enabled: negotiation.push_enabled,
        config_apply_enabled: negotiation.apply_enabled,
        bootstrap_config: bootstrap.as_ref().map(|b| b.config_frame.clone()),
        bootstrap_provider_environment: bootstrap.as_ref().map(|b| b.env_frame.clone()),
        heartbeat_interval_ms: u32::try_from(heartbeat_interval.as_millis()).unwrap_or(u32::MAX),
        // Upstream supervisors read whole seconds; never 0, which they may take as "no heartbeat".
        heartbeat_interval_secs: u32::try_from(heartbeat_interval.as_secs().max(1))
            .unwrap_or(u32::MAX),
        poll_interval_ms: 0,
        replica_id: state.config.replica_id.clone(),
    };
    let closer = register(state, &hello, &sandbox, &negotiation, &session_id);
    if let Some(delivery) = &delivery {
        delivery.attach_closer(closer.clone());
    }
    Some(Established {
        sandbox_id: sandbox.id,
        session_id,
        delivery,
        bootstrap,
        closer,
        apply_enabled: negotiation.apply_enabled,
        legacy: negotiation.legacy,
        accepted: Box::new(pb::GatewayMessage {
            payload: Some(pb::gateway_message::Payload::SessionAccepted(accepted)),
        }),
    })
}

/// Hello, identity, lifecycle, negotiation, and the startup exchange of a
/// first start with an image policy.
async fn admit(
    state: &SessionContext,
    metadata: MetadataMap,
    inbound: &mut Streaming<pb::SupervisorMessage>,
    tx: &mpsc::Sender<Frame>,
) -> Result<Admitted, Turnaway> {
    let hello = read_hello(inbound).await.map_err(Turnaway::rejected)?;
    let sandbox = authenticate(&state.store, &hello.sandbox_id, &metadata)
        .await
        .map_err(Turnaway::rejected)?;
    if sandbox.lifecycle == Lifecycle::Stopped {
        return Err(Turnaway::rejected(Refusal {
            reason: crate::snapshot::STOPPED_SANDBOX_REASON.into(),
            permanent: false,
        })
        .of_sandbox(&sandbox.id));
    }
    let silence_limit = state.config.heartbeat_interval * MISSED_HEARTBEATS;
    if let Some(holder) = state
        .sessions
        .live_holder(&sandbox.id, &hello.instance_id, silence_limit)
    {
        state.metrics.duplicate_sessions_refused.inc();
        let reason = crate::session_registry::held_elsewhere_reason(&holder, now_ms());
        tracing::warn!(
            sandbox = %sandbox.id,
            holder = %holder.session_id,
            "a second supervisor process with this sandbox's credential was refused"
        );
        return Err(Turnaway::rejected(Refusal {
            reason,
            permanent: false,
        })
        .of_sandbox(&sandbox.id));
    }
    let caps = Capabilities {
        protocol_revision: hello.protocol_revision,
        supports_config_snapshots: hello.supports_config_snapshots,
        supports_config_apply: hello.supports_config_apply,
    };
    let negotiation = negotiate(state.config.config_delivery_mode, caps);
    if negotiation.legacy {
        state.metrics.legacy_sessions.inc();
        tracing::warn!(
            sandbox = %sandbox.id,
            version = %hello.supervisor_version,
            "legacy supervisor (protocol revision 0) accepted; it keeps polling"
        );
    }
    if negotiation.apply_enabled
        && !hello.image_policy.trim().is_empty()
        && sandbox.lifecycle == Lifecycle::Pending
    {
        startup_exchange(state, &sandbox, &hello.image_policy, inbound, tx)
            .await
            .map_err(|refusal| {
                tracing::warn!(sandbox = %sandbox.id, reason = %refusal.reason, "startup exchange failed");
                Turnaway::rejected(refusal).of_sandbox(&sandbox.id)
            })?;
    }
    Ok(Admitted {
        hello,
        sandbox,
        negotiation,
    })
}

/// Registers a push session's delivery, builds its bootstrap and claims the
/// sandbox's owner row; undoes the registration when a later step fails.
async fn open(state: &SessionContext, admitted: &Admitted) -> Result<Opened, Turnaway> {
    let Admitted {
        hello,
        sandbox,
        negotiation,
    } = admitted;
    let session_id = new_id("ss");
    // Push sessions are registered before the bootstrap is built, so a write
    // committed meanwhile marks them and is rebuilt after the bootstrap.
    let delivery = negotiation.push_enabled.then(|| {
        let delivery = Arc::new(SessionDelivery::new(
            sandbox.id.clone(),
            session_id.clone(),
            sandbox.workspace.clone(),
            snapshot::FIRST_SEQUENCE,
            negotiation.apply_enabled,
        ));
        state.publisher.register(delivery.clone());
        delivery
    });
    let unregister = || {
        if let Some(delivery) = &delivery {
            state.publisher.unregister(delivery);
        }
    };
    let bootstrap = match &delivery {
        Some(delivery) => match build_bootstrap_frames(state, delivery).await {
            Ok(frames) => Some(Box::new(frames)),
            Err(reason) => {
                unregister();
                tracing::warn!(sandbox = %sandbox.id, %reason, "bootstrap could not be built");
                return Err(Turnaway {
                    refusal: Refusal {
                        reason,
                        permanent: false,
                    },
                    counted_as: TurnawayCount::BootstrapBuildFailed,
                    sandbox_id: None,
                });
            }
        },
        None => None,
    };
    let claim = OwnerClaim {
        sandbox_id: sandbox.id.clone(),
        replica_id: state.config.replica_id.clone(),
        session_id: session_id.clone(),
        supervisor_version: hello.supervisor_version.clone(),
        protocol_revision: hello.protocol_revision,
        mode: negotiation.mode.as_str(),
    };
    if let Err(e) = state.owner_claims.claim(claim).await {
        unregister();
        tracing::warn!(error = %e, sandbox = %sandbox.id, "cannot record session owner");
        return Err(Turnaway {
            refusal: Refusal {
                reason: "the gateway's store is unavailable; retry later".into(),
                permanent: false,
            },
            counted_as: TurnawayCount::Uncounted,
            sandbox_id: None,
        });
    }
    Ok(Opened {
        session_id,
        delivery,
        bootstrap,
    })
}

/// Records an accepted session in this replica's registry, closing the one
/// it replaces, and counts it.
fn register(
    state: &SessionContext,
    hello: &pb::SupervisorHello,
    sandbox: &SandboxRecord,
    negotiation: &Negotiation,
    session_id: &str,
) -> Arc<SessionCloser> {
    let now = now_ms();
    let closer = Arc::new(SessionCloser::default());
    let replaced = state.sessions.register(SessionInfo {
        session_id: session_id.to_string(),
        sandbox_id: sandbox.id.clone(),
        sandbox_name: sandbox.name.clone(),
        mode: negotiation.mode,
        mode_reason: negotiation.reason.clone(),
        supervisor_version: hello.supervisor_version.clone(),
        instance_id: hello.instance_id.clone(),
        protocol_revision: hello.protocol_revision,
        supports_config_snapshots: hello.supports_config_snapshots,
        supports_config_apply: hello.supports_config_apply,
        local_policy_override: hello.local_policy_override,
        connected_at_ms: now,
        last_heartbeat_ms: now,
        replaced_sessions: 0,
        last_replaced_at_ms: None,
        runtime_readiness: None,
        closer: closer.clone(),
    });
    if let Some(old) = replaced {
        state.metrics.sessions_replaced.inc();
        tracing::warn!(
            sandbox = %sandbox.id,
            session = %session_id,
            replaced = %old.session_id,
            "a new session replaced an open one of the same sandbox; the old one is closed"
        );
    }
    state.metrics.sessions_connected.inc();
    if negotiation.legacy {
        state.metrics.legacy_sessions_connected.inc();
    }
    state
        .metrics
        .sessions_accepted
        .get_or_create(&ModeLabel {
            mode: negotiation.mode.as_str(),
        })
        .inc();
    tracing::info!(
        sandbox = %sandbox.id,
        session = %session_id,
        mode = negotiation.mode.as_str(),
        version = %hello.supervisor_version,
        protocol_revision = hello.protocol_revision,
        "supervisor session accepted"
    );
    closer
}

/// First start with an image policy: offer the stored policy if there is one,
/// else the image's; the supervisor prepares it; whatever it hands back is
/// untrusted input and goes through the normal validated update path.
async fn startup_exchange(
    state: &SessionContext,
    sandbox: &SandboxRecord,
    image_policy: &str,
    inbound: &mut Streaming<pb::SupervisorMessage>,
    tx: &mpsc::Sender<Frame>,
) -> Result<(), Refusal> {
    let unavailable = |e: crate::error::GatewayError| {
        tracing::warn!(error = %e, "startup exchange store error");
        Refusal {
            reason: "the gateway's store is unavailable; retry later".into(),
            permanent: false,
        }
    };
    let stored = state
        .store
        .latest_policy(&sandbox.id)
        .await
        .map_err(|e| unavailable(e.into()))?;
    let (origin, candidate) = match &stored {
        Some(revision) => (
            "stored",
            openshell_core::policy::parse_policy(&revision.policy_json)
                .map(|p| p.to_yaml())
                .map_err(|e| unavailable(crate::error::GatewayError::Corrupt(e.to_string())))?,
        ),
        None => ("image", image_policy.to_string()),
    };
    let frame = pb::GatewayMessage {
        payload: Some(pb::gateway_message::Payload::StartupCandidate(
            pb::StartupConfigCandidate {
                origin: origin.into(),
                policy: candidate.clone(),
            },
        )),
    };
    tx.send(Box::new(frame)).await.map_err(|_| Refusal {
        reason: "session closed during the startup exchange".into(),
        permanent: false,
    })?;
    let limit = state.tuning.startup_prepare_deadline;
    let deadline = tokio::time::Instant::now() + limit;
    let prepared = loop {
        let frame = tokio::time::timeout_at(deadline, inbound.next())
            .await
            .map_err(|_| Refusal {
                reason: format!("no StartupConfigPrepared within {limit:?}"),
                permanent: false,
            })?;
        match frame {
            Some(Ok(pb::SupervisorMessage {
                payload: Some(pb::supervisor_message::Payload::StartupPrepared(prepared)),
            })) => break prepared,
            Some(Ok(pb::SupervisorMessage {
                payload: Some(pb::supervisor_message::Payload::Heartbeat(_)),
            })) => continue,
            Some(Ok(_)) => {
                return Err(Refusal {
                    reason: "expected StartupConfigPrepared during the startup exchange".into(),
                    permanent: false,
                });
            }
            Some(Err(_)) | None => {
                return Err(Refusal {
                    reason: "session closed during the startup exchange".into(),
                    permanent: false,
                });
            }
        }
    };
    let to_commit = match prepared.result {
        Some(pb::startup_config_prepared::Result::Unchanged(_)) => {
            (origin == "image").then_some(candidate)
        }
        // The operator's stored policy stays what the sandbox runs: a supervisor may only
        // prepare its image's policy, never rewrite one the gateway already holds.
        Some(pb::startup_config_prepared::Result::PreparedPolicy(policy)) if origin == "stored" => {
            if policy != candidate {
                tracing::warn!(
                    sandbox = %sandbox.id,
                    "the supervisor prepared another policy than the stored one it was offered; the stored policy is kept"
                );
            }
            None
        }
        Some(pb::startup_config_prepared::Result::PreparedPolicy(policy)) => Some(policy),
        Some(pb::startup_config_prepared::Result::Failure(reason)) => {
            return Err(invalid_startup_policy(
                state,
                sandbox,
                format!(
                    "startup preparation failed on the supervisor: {}",
                    sanitize_error(&reason)
                ),
            ));
        }
        None => {
            return Err(Refusal {
                reason: "StartupConfigPrepared carried no result".into(),
                permanent: false,
            });
        }
    };
    if let Some(policy) = to_commit {
        let update = ConfigUpdate {
            target: ConfigTarget::Sandbox(sandbox.id.clone()),
            policy: Some(policy),
            policy_edits: Vec::new(),
            // Only while the sandbox still has no policy: one an operator stored during
            // the exchange is kept, and the next session is offered it.
            expected_policy_revision: Some(sandbox.policy_revision),
            clear_global_policy: false,
            settings: Vec::new(),
            idempotency_key: None,
            caller: format!("supervisor:{}", sandbox.id),
        };
        let retention = crate::store::duration_ms(state.config.idempotency_retention);
        let committed = commit_update(
            &state.config_writer,
            &update,
            retention,
            state.activity.write_place(),
        )
        .await
        .map_err(|e| {
            let status = tonic::Status::from(e);
            let reason = sanitize_error(status.message());
            if status.code() == tonic::Code::InvalidArgument {
                invalid_startup_policy(
                    state,
                    sandbox,
                    format!("the startup policy was rejected: {reason}"),
                )
            } else {
                Refusal {
                    reason: format!("the startup policy could not be stored: {reason}"),
                    permanent: false,
                }
            }
        })?;
        tracing::info!(
            sandbox = %sandbox.id,
            origin,
            operation = %committed.operation.id,
            policy_revision = committed.operation.policy_revision,
            "startup policy committed"
        );
    }
    Ok(())
}

/// The refusal of a first start whose policy is invalid (the supervisor could not prepare it,
/// or the gateway would not commit what it prepared). It is refused for a while as something
/// an operator can fix (`policy set` stores a valid policy, which the next attempt offers
/// instead), then for good, so that a supervisor does not retry a broken image forever.
fn invalid_startup_policy(
    state: &SessionContext,
    sandbox: &SandboxRecord,
    reason: String,
) -> Refusal {
    let wait = state.tuning.invalid_startup_policy_wait;
    let waited = state
        .sessions
        .invalid_startup_policy_since(&sandbox.id)
        .elapsed();
    let fix = format!("`openshell policy set {} --policy FILE`", sandbox.id);
    match wait.checked_sub(waited).filter(|left| !left.is_zero()) {
        Some(left) => Refusal {
            reason: format!(
                "{reason}; set a valid policy with {fix} within {} or this start fails",
                humantime::format_duration(Duration::from_secs(left.as_secs().max(1)))
            ),
            permanent: false,
        },
        None => Refusal {
            reason: format!(
                "{reason}; no valid policy was set within {} of the first refusal, so this start fails: set one with {fix}, then start \
                 the sandbox's supervisor again",
                humantime::format_duration(wait)
            ),
            permanent: true,
        },
    }
}

struct BootstrapFrames {
    config_frame: pb::ConfigUpdate,
    env_frame: pb::ConfigUpdate,
    config: Built,
    env: Built,
}

async fn build_bootstrap_frames(
    state: &SessionContext,
    delivery: &SessionDelivery,
) -> Result<BootstrapFrames, String> {
    let deadline = state.tuning.bootstrap_deadline;
    let (config, env) = match tokio::time::timeout(
        deadline,
        build_bootstrap(&state.store, &delivery.sandbox_id),
    )
    .await
    {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(format!("bootstrap build failed: {e}")),
        Err(_) => {
            return Err(format!(
                "bootstrap build exceeded its {deadline:?} deadline"
            ));
        }
    };
    let first = delivery.next_sequence();
    // The second frame's number, taken so the delivery task numbers on after it.
    delivery.next_sequence();
    let (config_frame, env_frame) = snapshot::number_bootstrap(&config, &env, first);
    // Writes that change a bootstrap check it against the same limit before they commit
    // (`snapshot::prospective_bootstrap_bytes`); this catches one made too large otherwise.
    let size = snapshot::bootstrap_bytes(&config_frame, &env_frame);
    if size > MAX_MESSAGE_BYTES {
        return Err(format!(
            "bootstrap is {size} bytes; the limit is {MAX_MESSAGE_BYTES} bytes"
        ));
    }
    delivery.note_sent(&config_frame);
    delivery.note_sent(&env_frame);
    Ok(BootstrapFrames {
        config_frame,
        env_frame,
        config,
        env,
    })
}

/// An accepted session while it lives.
struct LiveSession<'a> {
    state: &'a Arc<SessionContext>,
    sandbox_id: &'a str,
    session_id: &'a str,
    tx: &'a mpsc::Sender<Frame>,
    config_tx: mpsc::Sender<Frame>,
    delivery: Option<Arc<SessionDelivery>>,
    bootstrap: Option<Box<BootstrapFrames>>,
    awaiting_bootstrap_until: Option<tokio::time::Instant>,
    delivery_task: Option<tokio::task::JoinHandle<()>>,
    closer: Arc<SessionCloser>,
}

impl LiveSession<'_> {
    fn start_delivery(&mut self) {
        let Some(delivery) = &self.delivery else {
            return;
        };
        // The bootstrap snapshots are not needed past this point; an idle
        // session should hold no copy of its configuration.
        if let Some(bootstrap) = self.bootstrap.take() {
            delivery.record_bootstrap(&bootstrap.config, &bootstrap.env);
        }
        let source: Arc<dyn SnapshotSource> = Arc::new(StoreSource {
            store: self.state.store.clone(),
            activity: self.state.activity.clone(),
        });
        self.delivery_task = Some(tokio::spawn(delivery::task::run(
            delivery.clone(),
            source,
            self.state.permits.clone(),
            self.config_tx.clone(),
            self.state.tuning.clone(),
            self.state.metrics.clone(),
        )));
    }

    /// Ends the session with a reason the supervisor can log.
    /// Ends the session for a frame no supervisor sends at this point: a peer that speaks the
    /// protocol wrongly is told so, and its inspection shows why it is not connected.
    async fn end_for_protocol_error(&self, what: &str) {
        let reason = format!("protocol error: {what}");
        self.state.sessions.record_refusal(self.sandbox_id, &reason);
        self.close_with(reason).await;
    }

    async fn close_with(&self, reason: String) {
        tracing::warn!(sandbox = %self.sandbox_id, %reason, "closing session");
        let _ = self
            .tx
            .send(rejected(Refusal {
                reason,
                permanent: false,
            }))
            .await;
    }

    /// `urgent`: the report may end an operation someone waits for.
    fn report(
        &self,
        status: ReportStatus,
        revisions: ReportedRevisions,
        reason: &str,
        urgent: bool,
    ) {
        let report = SupervisorReport {
            sandbox_id: self.sandbox_id.to_string(),
            status,
            revisions,
            reason: reason.to_string(),
        };
        self.state
            .metrics
            .reports
            .get_or_create(&StatusLabel {
                status: status.as_str(),
            })
            .inc();
        // Resolution is not awaited: the read loop must keep reading
        // heartbeats however long the store takes.
        self.state.reports.submit(report, urgent);
    }

    /// The revisions an answer reports, when the store can hold them and this session sent
    /// what they name; otherwise the session ends for a protocol error (no honest
    /// supervisor reports a configuration it was not sent).
    async fn claimed(
        &self,
        revisions: Option<&pb::AppliedRevisions>,
        field: &str,
    ) -> Option<ReportedRevisions> {
        let claim = match claims::revisions(revisions, field) {
            Ok(claim) => claim,
            Err(refusal) => {
                self.count_refused_claim("out_of_range");
                Box::pin(self.end_for_protocol_error(&refusal.to_string())).await;
                return None;
            }
        };
        if let Some(delivery) = &self.delivery
            && !delivery.sent_all_of(&claim)
        {
            self.count_refused_claim("never_sent");
            Box::pin(self.end_for_protocol_error(&claims::unhanded(&claim, self.sandbox_id))).await;
            return None;
        }
        Some(claim)
    }

    fn count_refused_claim(&self, reason: &'static str) {
        claims::count_refused(&self.state.metrics, reason);
    }

    /// Returns false when the session must end.
    async fn on_bootstrap_result(&mut self, result: pb::BootstrapResult) -> bool {
        if self.awaiting_bootstrap_until.take().is_none() {
            tracing::warn!(sandbox = %self.sandbox_id, "unexpected bootstrap result ignored");
            return true;
        }
        let Some(revisions) = self
            .claimed(result.revisions.as_ref(), "bootstrap_result.revisions")
            .await
        else {
            return false;
        };
        let metrics = &self.state.metrics;
        if !result.applied && (result.kept_last_known_good || result.policy_rejected) {
            return self.on_refused_bootstrap(&result, revisions);
        }
        if !result.applied {
            metrics
                .bootstraps
                .get_or_create(&OutcomeLabel { outcome: "failed" })
                .inc();
            self.report(
                ReportStatus::Failed {
                    failed_closed: false,
                },
                revisions,
                &result.reason,
                false,
            );
            self.close_with(format!(
                "bootstrap failed on the supervisor: {}",
                sanitize_error(&result.reason)
            ))
            .await;
            return false;
        }
        let expected = self
            .bootstrap
            .as_ref()
            .map(|b| (b.config.policy_revision, b.config.settings_revision));
        let got = result.revisions.is_some().then_some((
            revisions.policy_revision,
            revisions.sandbox_settings_revision,
        ));
        if expected.is_some() && got != expected {
            metrics
                .bootstraps
                .get_or_create(&OutcomeLabel {
                    outcome: "mismatch",
                })
                .inc();
            self.close_with(format!(
                "bootstrap result reports revisions {got:?} but {expected:?} were sent"
            ))
            .await;
            return false;
        }
        metrics
            .bootstraps
            .get_or_create(&OutcomeLabel { outcome: "applied" })
            .inc();
        self.report(ReportStatus::Applied, revisions, "", false);
        self.start_delivery();
        true
    }

    /// A bootstrap the supervisor refused while it keeps running what it had before (its
    /// last-known-good, or a fail_closed quarantine): the refusal is reported like a failed
    /// delivery and the session goes on. Its `sandbox_config` is parked, so it is not sent
    /// again until a write changes it: no reject loop across reconnects and gateway restarts.
    fn on_refused_bootstrap(
        &mut self,
        result: &pb::BootstrapResult,
        revisions: ReportedRevisions,
    ) -> bool {
        let (outcome, status) = if result.policy_rejected {
            ("policy_rejected", ReportStatus::RetainedRejectedPolicy)
        } else {
            (
                "failed_kept_last_known_good",
                ReportStatus::Failed {
                    failed_closed: false,
                },
            )
        };
        self.state
            .metrics
            .bootstraps
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
        tracing::warn!(
            sandbox = %self.sandbox_id,
            reason = %sanitize_error(&result.reason),
            policy_rejected = result.policy_rejected,
            "bootstrap refused on the supervisor; it keeps its last-known-good and the session goes on"
        );
        self.report(status, revisions, &result.reason, false);
        if let (Some(delivery), Some(bootstrap)) = (&self.delivery, self.bootstrap.take()) {
            delivery.record_refused_bootstrap(
                &bootstrap.config,
                &bootstrap.env,
                result.policy_rejected,
                &sanitize_error(&result.reason),
            );
        }
        self.start_delivery();
        true
    }

    /// Returns false when the session must end.
    async fn on_config_result(&self, result: pb::ConfigUpdateResult) -> bool {
        let Some(delivery) = &self.delivery else {
            tracing::debug!(sandbox = %self.sandbox_id, "config result on a session without push ignored");
            return true;
        };
        if !delivery.was_sent(result.delivery_id) {
            // Nothing this session sent: its report would speak for no configuration.
            tracing::warn!(sandbox = %self.sandbox_id, delivery_id = result.delivery_id, "result for a delivery this session never sent ignored");
            return true;
        }
        let Some(revisions) = self
            .claimed(result.revisions.as_ref(), "config_update_result.revisions")
            .await
        else {
            return false;
        };
        let status = pb::ConfigApplyStatus::try_from(result.status)
            .unwrap_or(pb::ConfigApplyStatus::Unspecified);
        let component = match pb::ConfigComponent::try_from(result.component) {
            Ok(pb::ConfigComponent::ProviderEnvironment) => Component::ProviderEnvironment,
            _ => Component::SandboxConfig,
        };
        let report_status = match status {
            pb::ConfigApplyStatus::Applied | pb::ConfigApplyStatus::Duplicate => {
                Some(ReportStatus::Applied)
            }
            pb::ConfigApplyStatus::Failed => Some(ReportStatus::Failed {
                failed_closed: result.failed_closed,
            }),
            pb::ConfigApplyStatus::RetainedLocalOverride => {
                Some(ReportStatus::RetainedLocalOverride)
            }
            pb::ConfigApplyStatus::RetainedLastKnownGoodPolicy => {
                Some(ReportStatus::RetainedRejectedPolicy)
            }
            _ => None,
        };
        if let Some(report_status) = report_status {
            let urgent = delivery.carries_pending_operation(component, result.delivery_id);
            self.report(report_status, revisions, &result.reason, urgent);
        }
        delivery.ack(Ack {
            delivery_id: result.delivery_id,
            component,
            status,
            reason: sanitize_error(&result.reason),
        });
        true
    }

    /// Heartbeats out, frames in, until either side goes away or goes silent.
    async fn serve(
        &mut self,
        inbound: &mut Streaming<pb::SupervisorMessage>,
        heartbeat_interval: Duration,
    ) {
        // On the shared grid, so the heartbeats of many sessions go out in one wake-up.
        let first = on_shared_tick(
            tokio::time::Instant::now() + heartbeat_interval,
            heartbeat_interval / HEARTBEAT_TICKS,
        );
        let mut ticker = tokio::time::interval_at(first, heartbeat_interval);
        let silence_limit = heartbeat_interval * MISSED_HEARTBEATS;
        let mut last_heard = tokio::time::Instant::now();
        loop {
            let bootstrap_deadline = self.awaiting_bootstrap_until;
            tokio::select! {
                _ = ticker.tick() => {
                    if last_heard.elapsed() > silence_limit {
                        let reason = format!(
                            "no frame from the supervisor within {silence_limit:?} ({MISSED_HEARTBEATS} heartbeat intervals of {heartbeat_interval:?}); the session was closed"
                        );
                        Box::pin(self.close_with(reason)).await;
                        return;
                    }
                    if self.tx.send(heartbeat()).await.is_err() {
                        return;
                    }
                }
                () = self.state.stopped() => {
                    tracing::debug!(sandbox = %self.sandbox_id, "gateway stopping; ending session");
                    return;
                }
                reason = self.closer.closed() => {
                    Box::pin(self.close_with(reason)).await;
                    return;
                }
                () = sleep_until_opt(bootstrap_deadline) => {
                    self.state.metrics.bootstraps.get_or_create(&OutcomeLabel { outcome: "timed_out" }).inc();
                    let reason = format!(
                        "no bootstrap result within {:?}; the session was closed",
                        self.state.tuning.bootstrap_result_timeout
                    );
                    // Its inspection says why the sandbox is not connected.
                    self.state.sessions.record_refusal(self.sandbox_id, &reason);
                    Box::pin(self.close_with(reason)).await;
                    return;
                }
                frame = inbound.next() => {
                    match frame {
                        Some(Ok(msg)) => {
                            last_heard = tokio::time::Instant::now();
                            self.state.sessions.heartbeat(self.sandbox_id, self.session_id);
                            match msg.payload {
                                Some(pb::supervisor_message::Payload::Heartbeat(_)) | None => {}
                                Some(pb::supervisor_message::Payload::BootstrapResult(result)) => {
                                    if !Box::pin(self.on_bootstrap_result(result)).await {
                                        return;
                                    }
                                }
                                Some(pb::supervisor_message::Payload::ConfigUpdateResult(result)) => {
                                    if !Box::pin(self.on_config_result(result)).await {
                                        return;
                                    }
                                }
                                Some(pb::supervisor_message::Payload::Hello(_)) => {
                                    Box::pin(self.end_for_protocol_error(
                                        "a second SupervisorHello on one session; a supervisor starts a new session instead",
                                    ))
                                    .await;
                                    return;
                                }
                                Some(pb::supervisor_message::Payload::StartupPrepared(_)) => {
                                    Box::pin(self.end_for_protocol_error(
                                        "StartupConfigPrepared outside the startup exchange; it only answers a StartupConfigCandidate, before SessionAccepted",
                                    ))
                                    .await;
                                    return;
                                }
                                Some(pb::supervisor_message::Payload::RuntimeReadiness(readiness)) => {
                                    tracing::debug!(sandbox = %self.sandbox_id, workload_started = readiness.workload_started, "runtime readiness reported");
                                    self.state.sessions.set_readiness(self.sandbox_id, self.session_id, readiness);
                                }
                            }
                        }
                        Some(Err(status)) => {
                            // A frame over the size limit, or one that does not decode: the
                            // supervisor learns which before the session ends.
                            let reason = format!("the session's stream failed: {}", status.message());
                            Box::pin(self.close_with(reason)).await;
                            return;
                        }
                        None => return,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::codec::Codec;

    use super::*;
    use crate::config::GatewayConfig;

    /// A session task costs its future's largest state for the session's whole life, so the
    /// one-off admission (hello, sandbox record, bootstrap frames) must not count toward it.
    /// With them inline the future was about 9 KiB in a release build.
    const MAX_SESSION_TASK_BYTES: usize = 3 * 1024;

    #[tokio::test]
    async fn a_session_task_is_sized_by_its_read_loop_not_its_admission() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = GatewayConfig::for_data_dir(dir.path(), "test-operator-token");
        let store = crate::server::open_store(&config)
            .await
            .expect("the store opens");
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        let api = crate::server::supervisor_api(store, config, stopping);
        let decoder =
            tonic_prost::ProstCodec::<pb::SupervisorMessage, pb::SupervisorMessage>::new()
                .decoder();
        let inbound = Streaming::new_request(
            decoder,
            http_body_util::Full::new(prost::bytes::Bytes::new()),
            None,
            None,
        );
        let (control_tx, _control_rx) = mpsc::channel(1);
        let (config_tx, _config_rx) = mpsc::channel(1);
        let session = run(
            api.state.clone(),
            MetadataMap::new(),
            inbound,
            control_tx,
            config_tx,
        );
        let bytes = std::mem::size_of_val(&session);
        assert!(
            bytes <= MAX_SESSION_TASK_BYTES,
            "a session task's future is {bytes} bytes; at most {MAX_SESSION_TASK_BYTES} expected"
        );
    }
}
