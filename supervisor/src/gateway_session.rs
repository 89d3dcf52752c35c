//! The ConnectSupervisor session: hello, acceptance or rejection, heartbeats, push-mode
//! frames, and reconnecting with jittered backoff when the session is lost.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use openshell_proto::v1::gateway_message::Payload as Inbound;
use openshell_proto::v1::startup_config_prepared::Result as Prepared;
use openshell_proto::v1::supervisor_message::Payload as Outbound;
use openshell_proto::v1::{
    GatewayHeartbeat, GatewayMessage, SessionAccepted, StartupConfigCandidate,
    StartupConfigPrepared, SupervisorHeartbeat, SupervisorMessage,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tracing::{debug, error, info, warn};

use crate::backoff::Backoff;
use crate::client::GatewayClient;
use crate::engine::{Engine, Origin, mode_for};
use crate::middleware::Readiness;
use crate::options::SupervisorOptions;
use crate::poll::{effective_poll_interval, mode_after_session};
use crate::push::{apply_bootstrap, handle_update};
use crate::status::{SessionState, SupervisorStatus};

/// Frames queued for the gateway before the sender blocks.
const OUTBOUND_QUEUE: usize = 32;

/// Why one session ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("gateway unreachable: {0}")]
    Transport(String),
    #[error("gateway rejected the session: {reason}")]
    Rejected { reason: String, permanent: bool },
    #[error("gateway closed the session")]
    Closed,
    #[error("no answer to the hello within {0:?}")]
    AcceptTimeout(Duration),
    #[error("no frame from the gateway for {0:?}")]
    Idle(Duration),
    #[error("the supervisor is shutting down")]
    ShuttingDown,
}

/// How one session ended, and how long it had been accepted.
struct Ended {
    result: Result<(), SessionError>,
    accepted_for: Option<Duration>,
}

pub(crate) struct SessionRunner {
    pub client: GatewayClient,
    pub options: Arc<SupervisorOptions>,
    pub engine: Arc<Engine>,
    pub status: watch::Sender<SupervisorStatus>,
    pub readiness: watch::Sender<Option<Readiness>>,
}

/// How long a stopping supervisor waits for the gateway to close its side.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Closes our side of the session and reads until the gateway closes its
/// side. Dropping the response stream instead would reset the stream and
/// discard frames still queued on it, such as the ack of the last apply.
async fn close_gracefully(
    tx: mpsc::Sender<SupervisorMessage>,
    mut inbound: Streaming<GatewayMessage>,
) {
    drop(tx);
    let drained = async { while let Ok(Some(_)) = inbound.message().await {} };
    if tokio::time::timeout(CLOSE_GRACE, drained).await.is_err() {
        debug!("gateway did not close the session within {CLOSE_GRACE:?}");
    }
}

/// Aborts a spawned task when the session that owns it ends.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl SessionRunner {
    /// Keeps a session up until `shutdown` turns true. Returns an error (the gateway's reason)
    /// only for a permanent rejection: everything else is retried.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), String> {
        let mut backoff = Backoff::new(self.options.reconnect_backoff);
        loop {
            let ended = self.run_once(&mut shutdown).await;
            self.status
                .send_modify(|s| s.session = SessionState::Disconnected);
            // Silence without a close is what a network partition looks like: the connection
            // under the session may be dead with nothing to tell, and another session on it
            // would wait in silence again (until HTTP/2 keepalive gives up on it, some 40 s).
            // The next session opens a connection of its own.
            if matches!(
                ended.result,
                Err(SessionError::Idle(_) | SessionError::AcceptTimeout(_))
            ) {
                self.new_connection();
            }
            match ended.result {
                Ok(()) => return Ok(()),
                Err(SessionError::Rejected {
                    reason,
                    permanent: true,
                }) => {
                    error!(reason = %reason, "gateway rejected the session permanently");
                    return Err(reason);
                }
                Err(SessionError::ShuttingDown) => {}
                Err(err) => warn!(error = %err, "session lost"),
            }
            // A new session would bring a bootstrap this supervisor must not apply; the log
            // shipper goes on until the workload is gone.
            if self.engine.is_shutting_down() {
                info!("shutting down: not reconnecting to the gateway");
                let _ = shutdown.wait_for(|stop| *stop).await;
                return Ok(());
            }
            let current = *self.engine.mode().borrow();
            let started = self.engine.has_active().await;
            let mode = mode_after_session(current, ended.accepted_for.is_some(), started);
            if mode != current {
                if mode.polling {
                    debug!(
                        first_poll_in = ?mode.first_poll_delay,
                        "polling takes over until a session is back"
                    );
                }
                self.engine.set_mode(mode).await;
            }
            if !started {
                info!(
                    "startup not accepted; the workload waits for an accepted bootstrap (or a session negotiated as poll), not for polled configuration"
                );
            }
            if ended
                .accepted_for
                .is_some_and(|d| d > self.options.backoff_reset_after)
            {
                backoff.reset();
            }
            let delay = backoff.next_delay();
            info!(retry_in = ?delay, attempt = backoff.attempts(), "reconnecting to the gateway");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            }
        }
    }

    /// Replaces the client by one on a new connection (a channel the options injected is
    /// kept: there is nothing to build another from).
    fn new_connection(&mut self) {
        if self.options.channel.is_some() {
            return;
        }
        match crate::options::gateway_client(&self.options) {
            Ok(client) => {
                debug!("the next session opens a new connection");
                self.client = client;
            }
            Err(err) => warn!(error = %err, "no new connection; the next session reuses the last"),
        }
    }

    async fn run_once(&self, shutdown: &mut watch::Receiver<bool>) -> Ended {
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        let mut accepted_at = None;
        let result = self.session(tx, rx, &mut accepted_at, shutdown).await;
        Ended {
            result,
            accepted_for: accepted_at.map(|at: Instant| at.elapsed()),
        }
    }

    /// One session. Shutdown is honoured while waiting, never in the middle of an apply, so
    /// the state directory and the acks stay consistent.
    async fn session(
        &self,
        tx: mpsc::Sender<SupervisorMessage>,
        rx: mpsc::Receiver<SupervisorMessage>,
        accepted_at: &mut Option<Instant>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), SessionError> {
        send(&tx, Outbound::Hello(self.options.hello())).await?;
        let handshake = async {
            let mut client = self.client.clone();
            // A gateway answers the call at once and the hello later (up to the accept
            // timeout); no answer at all means the request never arrived, as on a connection
            // that lost its way to the gateway without closing.
            let bound = self.options.rpc_timeout;
            let response =
                tokio::time::timeout(bound, client.connect_supervisor(ReceiverStream::new(rx)))
                    .await
                    .map_err(|_| SessionError::AcceptTimeout(bound))?
                    .map_err(|status| SessionError::Transport(status_text(&status)))?;
            let mut inbound = response.into_inner();
            let accepted = self.await_acceptance(&tx, &mut inbound).await?;
            Ok::<_, SessionError>((inbound, accepted))
        };
        let (inbound, accepted) = tokio::select! {
            r = handshake => r?,
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        };
        *accepted_at = Some(Instant::now());
        self.on_accepted(tx, inbound, accepted, shutdown).await
    }

    async fn await_acceptance(
        &self,
        tx: &mpsc::Sender<SupervisorMessage>,
        inbound: &mut Streaming<GatewayMessage>,
    ) -> Result<SessionAccepted, SessionError> {
        let deadline = Instant::now() + self.options.accept_timeout;
        loop {
            let frame = tokio::time::timeout_at(deadline, inbound.message())
                .await
                .map_err(|_| SessionError::AcceptTimeout(self.options.accept_timeout))?;
            match next_message(frame)? {
                Inbound::SessionAccepted(accepted) => return Ok(accepted),
                Inbound::SessionRejected(rejected) => {
                    return Err(SessionError::Rejected {
                        reason: rejected.reason,
                        permanent: rejected.permanent,
                    });
                }
                Inbound::StartupCandidate(candidate) => {
                    send(tx, Outbound::StartupPrepared(prepare_candidate(&candidate))).await?;
                }
                Inbound::Heartbeat(_) => {}
                Inbound::ConfigUpdate(_) => {
                    warn!("configuration frame before SessionAccepted ignored");
                }
            }
        }
    }

    async fn on_accepted(
        &self,
        tx: mpsc::Sender<SupervisorMessage>,
        mut inbound: Streaming<GatewayMessage>,
        accepted: SessionAccepted,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), SessionError> {
        let heartbeat = heartbeat_interval(&accepted, self.options.heartbeat_interval);
        let poll_interval =
            effective_poll_interval(accepted.poll_interval_ms, self.options.poll_interval);
        let push_apply = accepted.config_apply_enabled && self.options.supports_config_apply();
        if accepted.config_apply_enabled && !push_apply {
            warn!(
                "gateway enabled config apply although this supervisor did not offer it; polling"
            );
        }
        info!(
            session_id = %accepted.session_id,
            replica = %accepted.replica_id,
            push = accepted.config_push_enabled,
            apply = push_apply,
            heartbeat = ?heartbeat,
            "session accepted"
        );
        self.status.send_modify(|s| {
            s.session = SessionState::Accepted {
                session_id: accepted.session_id.clone(),
                push_apply,
            };
            s.sessions_accepted += 1;
        });
        let gateway_heartbeat = Arc::new(tokio::sync::Notify::new());
        let _heartbeats = AbortOnDrop(tokio::spawn(send_heartbeats(
            tx.clone(),
            heartbeat,
            gateway_heartbeat.clone(),
        )));
        self.engine
            .set_mode(mode_for(!push_apply, poll_interval))
            .await;

        let mut push = None;
        if push_apply {
            let applied = apply_bootstrap(
                &self.engine,
                accepted.bootstrap_config.as_ref(),
                accepted.bootstrap_provider_environment.as_ref(),
            )
            .await;
            let Some((state, result)) = applied else {
                info!(
                    "bootstrap not applied: the supervisor is shutting down; closing the session"
                );
                drop(_heartbeats);
                close_gracefully(tx, inbound).await;
                return Err(SessionError::ShuttingDown);
            };
            info!(applied = result.applied, reason = %result.reason, "bootstrap result");
            send(&tx, Outbound::BootstrapResult(result)).await?;
            self.status.send_modify(|s| s.acks_sent += 1);
            push = Some(state);
        }

        // Readiness is reported on every session: a gateway that restarted knows nothing of it.
        let mut readiness = self.readiness.subscribe();
        let mut readiness_sent = None;
        self.report_readiness(&tx, &mut readiness, &mut readiness_sent)
            .await?;

        let idle_limit = self
            .options
            .idle_timeout
            .unwrap_or_else(|| (heartbeat * 4).max(Duration::from_secs(20)));
        // Armed by the first gateway heartbeat, so a gateway that sends none is not cut off.
        let mut idle_deadline: Option<Instant> = None;
        loop {
            let idle = async {
                match idle_deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            // Biased: frames that queued up during a long apply count as heard before the idle
            // deadline is judged.
            let frame = tokio::select! {
                biased;
                _ = async { shutdown.wait_for(|stop| *stop).await.map(|_| ()) } => {
                    drop(_heartbeats);
                    close_gracefully(tx, inbound).await;
                    return Ok(());
                }
                frame = inbound.message() => frame,
                () = idle => return Err(SessionError::Idle(idle_limit)),
                // The sender is `self.readiness`, so the wait cannot fail.
                changed = readiness.changed() => {
                    if changed.is_ok() {
                        self.report_readiness(&tx, &mut readiness, &mut readiness_sent).await?;
                    }
                    continue;
                }
                // The gateway does not resend what was answered FAILED: a failure that can
                // pass is retried here, and its success acked, while this session applies.
                () = self.engine.retry_ready(Origin::Push), if push.is_some() => {
                    if let Some(state) = push.as_mut()
                        && let Some(outcome) = self.engine.retry(Origin::Push).await
                    {
                        let result = state.finish_retry(outcome);
                        info!(
                            delivery_id = result.delivery_id,
                            status = result.status().as_str_name(),
                            "configuration applied on retry; acknowledged"
                        );
                        send(&tx, Outbound::ConfigUpdateResult(result)).await?;
                        self.status.send_modify(|s| s.acks_sent += 1);
                    }
                    continue;
                }
            };
            match next_message(frame)? {
                Inbound::Heartbeat(_) => {
                    idle_deadline = Some(Instant::now() + idle_limit);
                    gateway_heartbeat.notify_one();
                }
                Inbound::ConfigUpdate(update) => {
                    if idle_deadline.is_some() {
                        idle_deadline = Some(Instant::now() + idle_limit);
                    }
                    let delivery_id = update.delivery_id;
                    let Some(state) = push.as_mut() else {
                        debug!(
                            sequence = update.sequence,
                            "pushed snapshot ignored: apply not negotiated, polling"
                        );
                        continue;
                    };
                    let Some(result) = handle_update(state, &self.engine, update).await else {
                        info!(
                            delivery_id,
                            "configuration not applied: the supervisor is shutting down; left unanswered"
                        );
                        continue;
                    };
                    debug!(
                        delivery_id = result.delivery_id,
                        status = result.status().as_str_name(),
                        "config update answered"
                    );
                    send(&tx, Outbound::ConfigUpdateResult(result)).await?;
                    self.status.send_modify(|s| s.acks_sent += 1);
                }
                Inbound::SessionRejected(rejected) => {
                    return Err(SessionError::Rejected {
                        reason: rejected.reason,
                        permanent: rejected.permanent,
                    });
                }
                Inbound::SessionAccepted(_) | Inbound::StartupCandidate(_) => {
                    warn!("unexpected handshake frame in an accepted session ignored");
                }
            }
        }
    }
}

impl SessionRunner {
    /// Sends the workload's readiness when it is known and differs from what this session sent.
    /// A legacy supervisor (protocol revision 0) sends none of this project's frames.
    async fn report_readiness(
        &self,
        tx: &mpsc::Sender<SupervisorMessage>,
        readiness: &mut watch::Receiver<Option<Readiness>>,
        sent: &mut Option<Readiness>,
    ) -> Result<(), SessionError> {
        if self.options.protocol_revision == 0 {
            return Ok(());
        }
        let current = readiness.borrow_and_update().clone();
        let Some(current) = current else {
            return Ok(());
        };
        if sent.as_ref() == Some(&current) {
            return Ok(());
        }
        debug!(workload = ?current.workload, "readiness reported to the gateway");
        send(tx, Outbound::RuntimeReadiness(current.to_pb())).await?;
        *sent = Some(current);
        Ok(())
    }
}

/// Prepares a startup candidate: checking it can run here, so this supervisor's own
/// validation must accept it before the workload starts.
pub(crate) fn prepare_candidate(candidate: &StartupConfigCandidate) -> StartupConfigPrepared {
    let result = match openshell_core::policy::parse_and_validate(&candidate.policy) {
        Ok(_) => {
            debug!(origin = %candidate.origin, "startup candidate accepted unchanged");
            Prepared::Unchanged(true)
        }
        Err(err) => {
            let reason = crate::sanitize::sanitize_reason(&err.to_string(), std::iter::empty());
            warn!(origin = %candidate.origin, %reason, "startup candidate refused");
            Prepared::Failure(reason)
        }
    };
    StartupConfigPrepared {
        result: Some(result),
    }
}

/// The heartbeat interval a session asks for: our gateway's milliseconds when it sends them,
/// else upstream's whole seconds, else `configured`.
fn heartbeat_interval(accepted: &SessionAccepted, configured: Duration) -> Duration {
    if accepted.heartbeat_interval_ms > 0 {
        Duration::from_millis(u64::from(accepted.heartbeat_interval_ms))
    } else if accepted.heartbeat_interval_secs > 0 {
        Duration::from_secs(u64::from(accepted.heartbeat_interval_secs))
    } else {
        configured
    }
}

fn next_message(
    frame: Result<Option<GatewayMessage>, tonic::Status>,
) -> Result<Inbound, SessionError> {
    match frame {
        Ok(Some(GatewayMessage {
            payload: Some(payload),
        })) => Ok(payload),
        // An empty frame from a newer gateway: a message kind this supervisor does not know
        // (upstream's relay frames among them). It proves the gateway is alive, like a heartbeat.
        Ok(Some(GatewayMessage { payload: None })) => {
            Ok(Inbound::Heartbeat(GatewayHeartbeat::default()))
        }
        Ok(None) => Err(SessionError::Closed),
        Err(status) => Err(SessionError::Transport(status_text(&status))),
    }
}

async fn send(tx: &mpsc::Sender<SupervisorMessage>, payload: Outbound) -> Result<(), SessionError> {
    tx.send(SupervisorMessage {
        payload: Some(payload),
    })
    .await
    .map_err(|_| SessionError::Closed)
}

/// Sends a heartbeat every interval. Once the gateway's own heartbeats are
/// heard, ours answers each of them instead (one a gateway interval apart,
/// as before): a gateway sends the heartbeats of many sessions in one burst
/// (see its `ticks.rs`), and the answers then reach it together, in a few
/// wake-ups rather than one each. Our own timer stays as the fallback, a
/// quarter interval late, so a gateway that stops sending still hears us.
async fn send_heartbeats(
    tx: mpsc::Sender<SupervisorMessage>,
    every: Duration,
    gateway_heartbeat: Arc<tokio::sync::Notify>,
) {
    let mut last_sent = Instant::now();
    let mut heard_gateway = false;
    loop {
        let fallback = if heard_gateway {
            every + every / 4
        } else {
            every
        };
        let answering = tokio::select! {
            () = tokio::time::sleep_until(last_sent + fallback) => false,
            () = gateway_heartbeat.notified() => true,
        };
        heard_gateway |= answering;
        // The gateway's first heartbeat can come right after our timer's: one is enough.
        if answering && last_sent.elapsed() < every / 2 {
            continue;
        }
        let beat = Outbound::Heartbeat(SupervisorHeartbeat {
            sent_at: Some(SystemTime::now().into()),
        });
        if send(&tx, beat).await.is_err() {
            return;
        }
        last_sent = Instant::now();
    }
}

fn status_text(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heartbeats leave every interval until the gateway's are heard, then answer each of
    /// them, never two within half an interval; silent again, the gateway still hears one
    /// every interval and a quarter.
    #[tokio::test(start_paused = true)]
    async fn heartbeats_answer_the_gateways_once_heard() {
        let (tx, mut rx) = mpsc::channel(64);
        let heard = Arc::new(tokio::sync::Notify::new());
        let start = Instant::now();
        tokio::spawn(send_heartbeats(tx, Duration::from_secs(15), heard.clone()));
        let mut sent_at = Vec::new();
        let mut wait_beat = async |sent_at: &mut Vec<u128>| {
            rx.recv().await.unwrap();
            sent_at.push(start.elapsed().as_millis());
        };
        wait_beat(&mut sent_at).await;
        // The gateway's first, just after our own: not answered.
        tokio::time::sleep_until(start + Duration::from_millis(15_400)).await;
        heard.notify_one();
        for gateway_ms in [30_400, 45_400, 60_400] {
            tokio::time::sleep_until(start + Duration::from_millis(gateway_ms)).await;
            heard.notify_one();
            wait_beat(&mut sent_at).await;
        }
        // The gateway falls silent: our own timer, 18.75 s after the last.
        wait_beat(&mut sent_at).await;
        wait_beat(&mut sent_at).await;
        assert_eq!(
            sent_at,
            vec![15_000, 30_400, 45_400, 60_400, 79_150, 97_900]
        );
    }

    /// `SupervisorMessage` as a gateway from before `runtime_readiness` knows it.
    #[derive(Clone, PartialEq, prost::Message)]
    struct OlderSupervisorMessage {
        #[prost(oneof = "OlderPayload", tags = "1, 2, 100, 101, 102")]
        payload: Option<OlderPayload>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    enum OlderPayload {
        #[prost(message, tag = "2")]
        Heartbeat(SupervisorHeartbeat),
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn an_older_gateway_reads_the_readiness_frame_as_an_empty_one() {
        use prost::Message;
        let readiness = crate::middleware::Readiness::decide(Vec::new());
        let frame = SupervisorMessage {
            payload: Some(Outbound::RuntimeReadiness(readiness.to_pb())),
        };
        let older = OlderSupervisorMessage::decode(frame.encode_to_vec().as_slice()).unwrap();
        // An empty frame is what such a gateway already skips (as a heartbeat).
        assert_eq!(older.payload, None);
    }

    #[test]
    fn the_heartbeat_interval_prefers_milliseconds_then_seconds() {
        let configured = Duration::from_secs(5);
        let accepted = |secs, ms| SessionAccepted {
            heartbeat_interval_secs: secs,
            heartbeat_interval_ms: ms,
            ..SessionAccepted::default()
        };
        assert_eq!(
            heartbeat_interval(&accepted(3, 250), configured),
            Duration::from_millis(250)
        );
        // An upstream gateway states whole seconds only.
        assert_eq!(
            heartbeat_interval(&accepted(3, 0), configured),
            Duration::from_secs(3)
        );
        assert_eq!(heartbeat_interval(&accepted(0, 0), configured), configured);
    }
}
