//! Starting and stopping a gateway: open the store, bind the listener,
//! serve the API (TLS when configured) and run housekeeping loops.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openshell_proto::v1::config_plane_server::ConfigPlaneServer;
use openshell_proto::v1::gateway_peer_server::GatewayPeerServer;
use openshell_proto::v1::open_shell_server::OpenShellServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use crate::api::{ApiContext, OpenShellApi};
use crate::auth::{Authenticated, OperatorAuth};
use crate::config::{GatewayConfig, TokenSource, validate_operator_tokens};
use crate::config_update::{ConfigWriter, GroupCounts};
use crate::crypto::CredentialCipher;
use crate::delivery::{FanoutActivity, Permits, Publisher};
use crate::error::GatewayError;
use crate::limits::{MAX_MESSAGE_BYTES, MAX_PEER_MESSAGE_BYTES};
use crate::metrics::Metrics;
use crate::operations::ReportResolver;
use crate::peers::{PeerApi, PeerContext, PeerNotifier};
use crate::session_registry::SessionRegistry;
use crate::snapshot::StoreSource;
use crate::state::GatewayState;
use crate::store::{Backend, OwnerClaims, Store, StoreOptions, now_ms};
use crate::supervisor_api::{SessionContext, SupervisorApi};
use crate::unserved::Unserved;

/// How long shutdown waits for in-flight calls.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How often expired idempotency keys and old operations are cleaned up. A lookup does not
/// wait for it: a key past its retention is free at once (`WriteTx::find_idempotent`).
const IDEMPOTENCY_GC_INTERVAL: Duration = Duration::from_secs(60);

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "no operator token configured: pass --operator-token NAME=TOKEN or set OPENSHELL_OPERATOR_TOKENS"
    )]
    NoOperatorToken,
    #[error("invalid gateway configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Crypto(#[from] crate::crypto::CryptoError),
    #[error("cannot open the store: {0}")]
    Store(#[from] crate::error::GatewayError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read TLS file {path}: {source}")]
    TlsFile {
        path: String,
        source: std::io::Error,
    },
    #[error("TLS setup failed: {0}")]
    Tls(#[from] tonic::transport::Error),
}

/// A running gateway.
pub struct GatewayHandle {
    pub addr: SocketAddr,
    /// Where `/metrics` is served, when enabled.
    pub metrics_addr: Option<SocketAddr>,
    pub state: Arc<GatewayState>,
    shutdown: Option<oneshot::Sender<()>>,
    stopping: tokio::sync::watch::Sender<bool>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    housekeeping: JoinHandle<()>,
    /// Renews provider credentials before they expire (idle without hooks).
    credential_refresh: JoinHandle<()>,
    /// Reconcile passes of this replica's push sessions.
    reconcile: JoinHandle<()>,
    metrics_task: Option<JoinHandle<()>>,
    /// The replica heartbeat, the hint senders and the intent replay.
    peer_tasks: Vec<JoinHandle<()>>,
}

impl GatewayHandle {
    /// Stops accepting, lets in-flight calls finish, and closes the store.
    pub async fn shutdown(mut self) {
        // End long-lived streams first so the server can drain.
        let _ = self.stopping.send(true);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.housekeeping.abort();
        self.credential_refresh.abort();
        self.reconcile.abort();
        if let Some(task) = &self.metrics_task {
            task.abort();
        }
        match tokio::time::timeout(DRAIN_TIMEOUT, &mut self.server).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "server ended with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "server task failed"),
            Ok(Ok(Ok(()))) => {}
            Err(_) => {
                tracing::warn!(
                    "in-flight calls did not finish within {DRAIN_TIMEOUT:?}; stopping anyway"
                );
                self.server.abort();
            }
        }
        // Sessions release their owner rows and queue their last acks on the
        // way out; both need the store, so it closes after them.
        self.state.session_tasks.close();
        if tokio::time::timeout(DRAIN_TIMEOUT, self.state.session_tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("sessions did not end within {DRAIN_TIMEOUT:?}; stopping anyway");
        }
        self.state.reports.flush().await;
        for task in &self.peer_tasks {
            task.abort();
        }
        if let Some(peers) = &self.state.peers {
            peers.deregister().await;
        }
        self.state.store.close().await;
    }

    /// Waits until the server ends on its own.
    pub async fn wait(&mut self) {
        let _ = (&mut self.server).await;
    }
}

/// Starts a gateway on `config`.
pub async fn start(config: GatewayConfig) -> Result<GatewayHandle, StartError> {
    if config.operator_tokens.is_empty() {
        return Err(StartError::NoOperatorToken);
    }
    // Again here for a configuration built in code rather than resolved from flags and file.
    validate_operator_tokens(&config.operator_tokens, TokenSource::File)?;
    let store = open_store(&config).await?;
    refuse_names_of_stored_tokens(&store, &config).await?;
    let (tls, tls_cert) = tls_setup(&config)?;
    let listener = bind(config.listen).await?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    // Sessions this replica owned before a restart are gone.
    store
        .release_replica_sessions(&config.replica_id)
        .await
        .map_err(GatewayError::from)?;
    crate::operations::fleet_targets::finish_interrupted_listings(&store).await?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(false);
    let state = Arc::new(assemble(store, config, tls_cert, stopping_rx));
    // Before serving: a replica that cannot register does not start.
    let mut peer_tasks = match &state.peers {
        Some(peers) => {
            peers
                .start(peer_address(&state.config, addr), &state.stopping)
                .await?
        }
        None => Vec::new(),
    };
    if state.store.backend() == Backend::Postgres {
        peer_tasks.push(tokio::spawn(crate::peers::replay::run(peer_context(
            &state,
        ))));
    }
    let metrics_task = metrics_listener.map(|listener| {
        let metrics = state.metrics.clone();
        let store = state.store.clone();
        let read_store = move || {
            let store = store.clone();
            async move {
                let live = i64::try_from(crate::peers::REPLICA_LIVE_WITHIN.as_millis())
                    .unwrap_or(i64::MAX);
                match store.gauges(now_ms().saturating_sub(live)).await {
                    Ok(gauges) => Some(gauges),
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics: cannot read the store gauges");
                        None
                    }
                }
            }
        };
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve(listener, metrics, read_store).await {
                tracing::warn!(error = %e, "metrics listener ended");
            }
        })
    });
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let serves_tls = tls.is_some();
    let router = router(&state, tls)?;
    let server = tokio::spawn(async move {
        let shutdown = async {
            let _ = shutdown_rx.await;
        };
        if serves_tls {
            router
                .serve_with_incoming_shutdown(plaintext::tls_only(listener), shutdown)
                .await
        } else {
            router
                .serve_with_incoming_shutdown(accepted_without_nagle(listener), shutdown)
                .await
        }
    });
    let housekeeping = tokio::spawn(housekeeping(state.store.clone(), state.config.clone()));
    let credential_refresh = tokio::spawn(crate::provider_refresh::run(
        state.store.clone(),
        state.announcer(),
        Arc::new(state.config.provider_refresh.clone()),
        state.config.provider_refresh_check,
        state.stopping.clone(),
    ));
    let reconcile = tokio::spawn(crate::delivery::reconcile::run(
        state.publisher.clone(),
        Arc::new(StoreSource {
            store: state.store.clone(),
            activity: state.activity.clone(),
        }),
        state.tuning.clone(),
        state.metrics.clone(),
        state.stopping.clone(),
    ));
    tracing::info!(
        %addr,
        replica = %state.config.replica_id,
        backend = state.store.backend().as_str(),
        config_delivery_mode = state.config.config_delivery_mode.as_str(),
        tls = state.config.tls.is_some(),
        "gateway listening"
    );
    Ok(GatewayHandle {
        addr,
        metrics_addr,
        metrics_task,
        state,
        shutdown: Some(shutdown_tx),
        stopping: stopping_tx,
        server,
        housekeeping,
        credential_refresh,
        reconcile,
        peer_tasks,
    })
}

pub(crate) async fn open_store(config: &GatewayConfig) -> Result<Store, StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        path: config.data_dir.display().to_string(),
        source,
    })?;
    let cipher = CredentialCipher::load(config.credential_key.as_ref(), &config.data_dir)?;
    Ok(Store::open(
        &StoreOptions {
            url: config.database_url.clone(),
            max_connections: config.db_pool_size,
            replica_id: config.replica_id.clone(),
            wait_recheck_interval: config.delivery.wait_recheck_interval,
        },
        cipher,
    )
    .await
    .map_err(GatewayError::from)?)
}

/// A configured token may not take the name of one created through the API: both would
/// be recorded as the same caller and share its idempotency keys. `CreateToken` refuses a
/// configured name; this catches a token created before the configured one was added.
async fn refuse_names_of_stored_tokens(
    store: &Store,
    config: &GatewayConfig,
) -> Result<(), StartError> {
    let stored = store.list_tokens().await.map_err(GatewayError::from)?;
    let taken = config
        .operator_tokens
        .iter()
        .find(|token| stored.iter().any(|created| created.name == token.name));
    match taken {
        Some(token) => Err(crate::config::ConfigError::Invalid(format!(
            "configured operator token {:?}: the name is taken by a token created through the \
             API (`openshell token list`): rename the configured token",
            token.name
        ))
        .into()),
        None => Ok(()),
    }
}

/// The server's TLS identity, and its certificate for the peer hints, when
/// TLS is configured.
fn tls_setup(
    config: &GatewayConfig,
) -> Result<(Option<ServerTlsConfig>, Option<Vec<u8>>), StartError> {
    let Some(files) = &config.tls else {
        return Ok((None, None));
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| StartError::TlsFile {
            path: path.display().to_string(),
            source,
        })
    };
    let cert = read(&files.cert)?;
    let identity = Identity::from_pem(cert.clone(), read(&files.key)?);
    Ok((Some(ServerTlsConfig::new().identity(identity)), Some(cert)))
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// Every part of the replica, wired to the store.
fn assemble(
    store: Store,
    config: GatewayConfig,
    tls_cert: Option<Vec<u8>>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> GatewayState {
    let publisher = Publisher::default();
    let mut metrics = Metrics::new(store.operation_events().ended_counts());
    let sessions = publisher.clone();
    metrics.register_sampled_gauge(
        "config_pending_marks",
        "Components of this replica's push sessions marked for a rebuild and not built yet",
        move || i64::try_from(sessions.pending_marks()).unwrap_or(i64::MAX),
    );
    let config_writer = ConfigWriter::spawn(store.clone());
    let counts = config_writer.counts_handle();
    metrics.register_sampled_gauge(
        "config_writes_queued",
        "Sandbox configuration writes waiting in a lane for a transaction; writes that queue up commit together",
        move || i64::try_from(counts.queued.load(Ordering::SeqCst)).unwrap_or(i64::MAX),
    );
    GroupCounts::register_metrics(&config_writer.counts_handle(), &mut metrics);
    let metrics = Arc::new(metrics);
    let permits = Arc::new(Permits::for_pool(config.db_pool_size as usize));
    let activity = Arc::new(FanoutActivity::new(permits.clone()));
    let peers = match (&config.peer_secret, store.backend()) {
        (Some(secret), Backend::Postgres) => Some(PeerNotifier::new(
            store.clone(),
            config.replica_id.clone(),
            secret.clone(),
            metrics.clone(),
            tls_cert,
        )),
        (Some(_), Backend::Sqlite) => {
            tracing::info!("peer secret not used: a SQLite store has one replica");
            None
        }
        (None, Backend::Postgres) => {
            tracing::info!(
                "no peer secret: replicas sharing this store see each other's writes by intent replay, within seconds, not at once"
            );
            None
        }
        (None, Backend::Sqlite) => None,
    };
    GatewayState {
        peers,
        reports: ReportResolver::spawn(store.clone(), metrics.clone(), activity.clone()),
        owner_claims: OwnerClaims::spawn(store.clone()),
        config_writer,
        session_tasks: tokio_util::task::TaskTracker::new(),
        stopping,
        store,
        sessions: SessionRegistry::default(),
        metrics,
        started_at_ms: now_ms(),
        publisher,
        permits,
        activity,
        tuning: config.delivery.clone(),
        config: Arc::new(config),
        logs: crate::sandbox_logs::SandboxLogs::default(),
    }
}

/// The services, each given the handles its layer uses.
fn router(
    state: &GatewayState,
    tls: Option<ServerTlsConfig>,
) -> Result<tonic::transport::server::Router, StartError> {
    let supervisor = SupervisorApi::new(session_context(state));
    let api = OpenShellApi::new(
        ApiContext {
            store: state.store.clone(),
            config_writer: state.config_writer.clone(),
            config: state.config.clone(),
            announcer: state.announcer(),
            activity: state.activity.clone(),
            sessions: state.sessions.clone(),
            publisher: state.publisher.clone(),
            metrics: state.metrics.clone(),
            stopping: state.stopping.clone(),
            started_at_ms: state.started_at_ms,
            logs: state.logs.clone(),
        },
        supervisor,
    );
    let auth = OperatorAuth::with_store(state.config.operator_tokens.clone(), state.store.clone());
    let config_plane = Authenticated::new(
        ConfigPlaneServer::new(api.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES),
        auth.clone(),
    );
    let api = Unserved::new(Authenticated::new(
        OpenShellServer::new(api).max_decoding_message_size(MAX_MESSAGE_BYTES),
        auth,
    ));
    let peer = GatewayPeerServer::new(PeerApi::new(peer_context(state)))
        .max_decoding_message_size(MAX_PEER_MESSAGE_BYTES);
    let mut builder = Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    Ok(builder
        .add_service(api)
        .add_service(config_plane)
        .add_service(peer))
}

fn session_context(state: &GatewayState) -> SessionContext {
    SessionContext {
        store: state.store.clone(),
        config_writer: state.config_writer.clone(),
        config: state.config.clone(),
        sessions: state.sessions.clone(),
        metrics: state.metrics.clone(),
        publisher: state.publisher.clone(),
        permits: state.permits.clone(),
        tuning: state.tuning.clone(),
        activity: state.activity.clone(),
        reports: state.reports.clone(),
        owner_claims: state.owner_claims.clone(),
        session_tasks: state.session_tasks.clone(),
        served: Arc::default(),
        stopping: state.stopping.clone(),
        logs: state.logs.clone(),
    }
}

/// The supervisor-facing calls of a replica over `store`, wired as [`start`] wires them but
/// with no listener, so `ConnectSupervisor` sessions can be driven in process
/// ([`SupervisorApi::session_from_wire`]): the fuzz targets of `fuzz/` do, with frames from
/// arbitrary bytes. Its background tasks (report resolution, owner claims) are spawned on the
/// current tokio runtime, which must exist.
pub fn supervisor_api(
    store: Store,
    config: GatewayConfig,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> SupervisorApi {
    let state = assemble(store, config, None, stopping);
    SupervisorApi::new(session_context(&state))
}

fn peer_context(state: &GatewayState) -> PeerContext {
    PeerContext {
        store: state.store.clone(),
        config: state.config.clone(),
        publisher: state.publisher.clone(),
        tuning: state.tuning.clone(),
    }
}

/// The URL peers reach this replica at: the configured one, else the
/// listen address, unless that is a wildcard no peer can dial.
fn peer_address(config: &GatewayConfig, addr: SocketAddr) -> Option<String> {
    if let Some(address) = &config.peer_address {
        return Some(address.clone());
    }
    if addr.ip().is_unspecified() {
        tracing::warn!(
            %addr,
            "listening on a wildcard address without --peer-address: peers cannot hint this replica, whose sessions see their writes by intent replay, within seconds"
        );
        return None;
    }
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    Some(format!("{scheme}://{addr}"))
}

/// Accepted connections with Nagle's algorithm off, as clients already
/// have it. A push, an RPC response or a stream's next message is often a
/// small write right after another; with Nagle on it waits until the peer
/// acknowledges the previous one, and a peer that delays its ACK makes that
/// 40 ms on Linux.
fn accepted_without_nagle(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

async fn housekeeping(store: Store, config: Arc<GatewayConfig>) {
    let mut tick = tokio::time::interval(IDEMPOTENCY_GC_INTERVAL);
    loop {
        tick.tick().await;
        match store.expire_idempotency_keys().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(released = n, "expired idempotency keys released"),
            Err(e) => tracing::warn!(error = %e, "idempotency key expiry failed"),
        }
        let retention = crate::store::duration_ms(config.operation_retention);
        match store
            .remove_operations_completed_before(now_ms().saturating_sub(retention))
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "operations past retention removed"),
            Err(e) => tracing::warn!(error = %e, "operation retention failed"),
        }
        if store.backend() == Backend::Postgres {
            crate::peers::replay::remove_old_intents(&store).await;
        }
    }
}

mod plaintext;

#[cfg(test)]
mod wire_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    #[tokio::test]
    async fn accepted_connections_send_small_writes_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = accepted_without_nagle(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.nodelay().unwrap(), "Nagle's algorithm is on");
    }
}
