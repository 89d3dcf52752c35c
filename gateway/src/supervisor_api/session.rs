//! One `ConnectSupervisor` session: hello, authentication, negotiation,
//! acceptance (nothing is sent before it), heartbeats both ways, and
//! registration in the session registry and the owner index.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use openshell_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::identity::{Refusal, authenticate};
use super::negotiate::{Capabilities, negotiate};
use crate::api::convert::timestamp;
use crate::metrics::ModeLabel;
use crate::sessions::SessionInfo;
use crate::state::GatewayState;
use crate::store::{OwnerClaim, new_id, now_ms};

/// How long a supervisor has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Sessions silent for this many heartbeat intervals are closed.
const MISSED_HEARTBEATS: u32 = 3;

/// Starts the session task; the returned stream is what the gateway sends.
pub fn spawn(
    state: Arc<GatewayState>,
    inbound: Streaming<pb::SupervisorMessage>,
) -> impl Stream<Item = pb::GatewayMessage> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run(state, inbound, tx));
    ReceiverStream::new(rx)
}

fn rejected(refusal: Refusal) -> pb::GatewayMessage {
    pb::GatewayMessage {
        message: Some(pb::gateway_message::Message::Rejected(
            pb::SessionRejected {
                reason: refusal.reason,
                permanent: refusal.permanent,
            },
        )),
    }
}

fn heartbeat() -> pb::GatewayMessage {
    pb::GatewayMessage {
        message: Some(pb::gateway_message::Message::Heartbeat(pb::Heartbeat {
            sent_at: Some(timestamp(now_ms())),
        })),
    }
}

async fn read_hello(
    inbound: &mut Streaming<pb::SupervisorMessage>,
) -> Result<pb::SupervisorHello, Refusal> {
    let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.next()).await;
    match first {
        Ok(Some(Ok(pb::SupervisorMessage {
            message: Some(pb::supervisor_message::Message::Hello(hello)),
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

async fn run(
    state: Arc<GatewayState>,
    mut inbound: Streaming<pb::SupervisorMessage>,
    tx: mpsc::Sender<pb::GatewayMessage>,
) {
    let hello = match read_hello(&mut inbound).await {
        Ok(hello) => hello,
        Err(refusal) => {
            state.metrics.sessions_rejected.inc();
            tracing::warn!(reason = %refusal.reason, "supervisor session rejected");
            let _ = tx.send(rejected(refusal)).await;
            return;
        }
    };
    let sandbox = match authenticate(&state.store, hello.identity.as_ref()).await {
        Ok(sandbox) => sandbox,
        Err(refusal) => {
            state.metrics.sessions_rejected.inc();
            tracing::warn!(reason = %refusal.reason, "supervisor session rejected");
            let _ = tx.send(rejected(refusal)).await;
            return;
        }
    };
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
    let session_id = new_id("ss");
    let heartbeat_interval = state.config.heartbeat_interval;
    let accepted = pb::SessionAccepted {
        session_id: session_id.clone(),
        config_push_enabled: negotiation.push_enabled,
        config_apply_enabled: negotiation.apply_enabled,
        bootstrap_config: None,
        bootstrap_provider_environment: None,
        heartbeat_interval_ms: u32::try_from(heartbeat_interval.as_millis()).unwrap_or(u32::MAX),
        poll_interval_ms: 0,
        replica_id: state.config.replica_id.clone(),
    };
    let claim = OwnerClaim {
        sandbox_id: &sandbox.id,
        replica_id: &state.config.replica_id,
        session_id: &session_id,
        supervisor_version: &hello.supervisor_version,
        protocol_revision: hello.protocol_revision,
        mode: negotiation.mode.as_str(),
    };
    if let Err(e) = state.store.claim_session(&claim).await {
        tracing::warn!(error = %e, sandbox = %sandbox.id, "cannot record session owner");
        let _ = tx
            .send(rejected(Refusal {
                reason: "the gateway's store is unavailable; retry later".into(),
                permanent: false,
            }))
            .await;
        return;
    }
    let now = now_ms();
    state.sessions.register(SessionInfo {
        session_id: session_id.clone(),
        sandbox_id: sandbox.id.clone(),
        mode: negotiation.mode,
        mode_reason: negotiation.reason.clone(),
        supervisor_version: hello.supervisor_version.clone(),
        protocol_revision: hello.protocol_revision,
        supports_config_snapshots: hello.supports_config_snapshots,
        supports_config_apply: hello.supports_config_apply,
        local_policy_override: hello.local_policy_override,
        connected_at_ms: now,
        last_heartbeat_ms: now,
    });
    state.metrics.sessions_connected.inc();
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
    let accepted_frame = pb::GatewayMessage {
        message: Some(pb::gateway_message::Message::Accepted(accepted)),
    };
    if tx.send(accepted_frame).await.is_ok() {
        serve(
            &state,
            &sandbox.id,
            &session_id,
            &mut inbound,
            &tx,
            heartbeat_interval,
        )
        .await;
    }
    state.sessions.unregister(&sandbox.id, &session_id);
    state.metrics.sessions_connected.dec();
    if let Err(e) = state.store.release_session(&sandbox.id, &session_id).await {
        tracing::warn!(error = %e, sandbox = %sandbox.id, "cannot release session owner");
    }
    tracing::info!(sandbox = %sandbox.id, session = %session_id, "supervisor session closed");
}

/// Heartbeats out, frames in, until either side goes away or goes silent.
async fn serve(
    state: &GatewayState,
    sandbox_id: &str,
    session_id: &str,
    inbound: &mut Streaming<pb::SupervisorMessage>,
    tx: &mpsc::Sender<pb::GatewayMessage>,
    heartbeat_interval: Duration,
) {
    let mut ticker = tokio::time::interval(heartbeat_interval);
    ticker.tick().await;
    let silence_limit = heartbeat_interval * MISSED_HEARTBEATS;
    let mut last_heard = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                if last_heard.elapsed() > silence_limit {
                    tracing::warn!(sandbox = %sandbox_id, "supervisor went silent; closing its session");
                    return;
                }
                if tx.send(heartbeat()).await.is_err() {
                    return;
                }
            }
            frame = inbound.next() => {
                match frame {
                    Some(Ok(msg)) => {
                        last_heard = tokio::time::Instant::now();
                        state.sessions.heartbeat(sandbox_id, session_id);
                        match msg.message {
                            Some(pb::supervisor_message::Message::Heartbeat(_)) | None => {}
                            Some(pb::supervisor_message::Message::Hello(_)) => {
                                tracing::warn!(sandbox = %sandbox_id, "second hello on a session ignored");
                            }
                            Some(other) => {
                                tracing::debug!(sandbox = %sandbox_id, frame = ?std::mem::discriminant(&other), "frame ignored on a polling session");
                            }
                        }
                    }
                    Some(Err(status)) => {
                        tracing::debug!(sandbox = %sandbox_id, error = %status.message(), "session stream error");
                        return;
                    }
                    None => return,
                }
            }
        }
    }
}
