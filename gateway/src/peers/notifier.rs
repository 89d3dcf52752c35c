//! Sending hints: after a commit, find which peers the write concerns (the
//! owner of a sandbox's session, or every live peer for a fleet write) and
//! tell them, never holding up the write. Hints to the same peer and scope
//! merge while they wait; at most [`HINTS_IN_FLIGHT`] are in flight.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openshell_core::Secret;
use openshell_proto::v1::gateway_peer_client::GatewayPeerClient;
use openshell_proto::v1::{PeerNotifyConfigUpdateRequest, PeerNotifyResult, PeerScope};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::{
    HINT_TIMEOUT, HINTS_IN_FLIGHT, REPLICA_FORGOTTEN_AFTER, REPLICA_HEARTBEAT, REPLICA_LIVE_WITHIN,
};
use crate::delivery::{Component, Publication, PublicationScope};
use crate::metrics::{Metrics, ResultLabel};
use crate::store::{LivePeer, Store, duration_ms, now_ms};

/// How long a read of the live peers is reused.
const LIVE_PEERS_FRESH_FOR: Duration = Duration::from_secs(1);

/// One peer and what a hint to it concerns; hints with the same key merge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct HintKey {
    address: String,
    scope: PeerScope,
    scope_id: String,
}

#[derive(Debug, Clone)]
struct Hint {
    components: Vec<Component>,
    /// The session the sender believes owns the sandbox (sandbox scope).
    session_id: String,
    /// Whether the owner was already looked up again after `stale_owner`.
    resolved_again: bool,
}

#[derive(Debug, Default)]
struct HintQueue {
    order: VecDeque<HintKey>,
    waiting: HashMap<HintKey, Hint>,
}

impl HintQueue {
    /// Queues `hint`, or merges it into the one waiting with the same key;
    /// true when it queued a new one.
    fn push(&mut self, key: HintKey, hint: Hint) -> bool {
        if let Some(waiting) = self.waiting.get_mut(&key) {
            for component in hint.components {
                if !waiting.components.contains(&component) {
                    waiting.components.push(component);
                }
            }
            waiting.session_id = hint.session_id;
            return false;
        }
        self.order.push_back(key.clone());
        self.waiting.insert(key, hint);
        true
    }

    fn pop(&mut self) -> Option<(HintKey, Hint)> {
        let key = self.order.pop_front()?;
        let hint = self.waiting.remove(&key)?;
        Some((key, hint))
    }
}

/// Where a hint goes and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub address: String,
    pub session_id: String,
}

/// Sends this replica's hints to its peers.
pub struct PeerNotifier {
    store: Store,
    replica_id: String,
    secret: Secret,
    metrics: Arc<Metrics>,
    /// PEM roots for `https://` peers: the replicas' own certificate chain.
    tls_roots: Option<Vec<u8>>,
    queue: Mutex<HintQueue>,
    ready: Notify,
    channels: Mutex<HashMap<String, Channel>>,
    /// The live peers as last read, and when: every write not owned here
    /// asks, and the registry changes only every few seconds.
    live: Mutex<Option<(tokio::time::Instant, Vec<LivePeer>)>>,
}

impl std::fmt::Debug for PeerNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerNotifier")
            .field("replica_id", &self.replica_id)
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

fn peer_scope(scope: &PublicationScope) -> (PeerScope, String) {
    match scope {
        PublicationScope::Sandbox(id) => (PeerScope::Sandbox, id.clone()),
        PublicationScope::Provider(id) => (PeerScope::Provider, id.clone()),
        PublicationScope::Workspace(ws) => (PeerScope::Workspace, ws.clone()),
        PublicationScope::Global => (PeerScope::Global, String::new()),
    }
}

fn result_label(result: PeerNotifyResult) -> &'static str {
    match result {
        PeerNotifyResult::Delivered => "delivered",
        PeerNotifyResult::StaleOwner => "stale_owner",
        PeerNotifyResult::NoSession => "no_session",
        PeerNotifyResult::UnsupportedPeer => "unsupported_peer",
        PeerNotifyResult::Unspecified => "rejected",
    }
}

impl PeerNotifier {
    pub fn new(
        store: Store,
        replica_id: String,
        secret: Secret,
        metrics: Arc<Metrics>,
        tls_roots: Option<Vec<u8>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            replica_id,
            secret,
            metrics,
            tls_roots,
            queue: Mutex::new(HintQueue::default()),
            ready: Notify::new(),
            channels: Mutex::new(HashMap::new()),
            live: Mutex::new(None),
        })
    }

    /// Registers this replica at `peer_address` (None: it takes no hints,
    /// as its address is unknown) and starts the heartbeat and the senders;
    /// they stop when `stopping` flips.
    pub async fn start(
        self: &Arc<Self>,
        peer_address: Option<String>,
        stopping: &watch::Receiver<bool>,
    ) -> crate::error::Result<Vec<JoinHandle<()>>> {
        let mut tasks = Vec::with_capacity(HINTS_IN_FLIGHT + 1);
        if let Some(address) = peer_address {
            self.store
                .register_replica(&self.replica_id, &address)
                .await?;
            tasks.push(tokio::spawn(until_stopping(
                stopping.clone(),
                self.clone().heartbeat(address),
            )));
        }
        for _ in 0..HINTS_IN_FLIGHT {
            tasks.push(tokio::spawn(until_stopping(
                stopping.clone(),
                self.clone().send_hints(),
            )));
        }
        Ok(tasks)
    }

    /// Removes this replica from the registry, so peers stop hinting it.
    pub async fn deregister(&self) {
        if let Err(e) = self.store.deregister_replica(&self.replica_id).await {
            tracing::warn!(error = %e, "cannot remove this replica from the registry");
        }
    }

    async fn heartbeat(self: Arc<Self>, address: String) {
        let mut tick = tokio::time::interval(REPLICA_HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let refreshed = match self.store.heartbeat_replica(&self.replica_id).await {
                Ok(true) => Ok(()),
                Ok(false) => {
                    self.store
                        .register_replica(&self.replica_id, &address)
                        .await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = refreshed {
                tracing::warn!(error = %e, "replica heartbeat failed; peers may stop hinting this replica");
            }
            let forgotten = now_ms().saturating_sub(duration_ms(REPLICA_FORGOTTEN_AFTER));
            match self.store.remove_silent_replicas(forgotten).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    removed = n,
                    "replicas silent for an hour removed from the registry"
                ),
                Err(e) => tracing::warn!(error = %e, "cannot remove silent replicas"),
            }
        }
    }

    /// Tells the peers a committed write concerns, in the background.
    /// `owned_here`: the write's sandbox has its session on this replica.
    pub fn notify(self: &Arc<Self>, publication: &Publication, owned_here: bool) {
        if owned_here {
            return;
        }
        let this = self.clone();
        let publication = publication.clone();
        tokio::spawn(async move {
            match this.destinations(&publication.scope).await {
                Ok(destinations) => {
                    let (scope, scope_id) = peer_scope(&publication.scope);
                    for destination in destinations {
                        this.enqueue(
                            HintKey {
                                address: destination.address,
                                scope,
                                scope_id: scope_id.clone(),
                            },
                            Hint {
                                components: publication.components.clone(),
                                session_id: destination.session_id,
                                resolved_again: false,
                            },
                        );
                    }
                }
                // The owners' intent replay repairs what this misses.
                Err(e) => {
                    tracing::warn!(error = %e, scope = ?publication.scope, "cannot find the peers to hint")
                }
            }
        });
    }

    /// The other replicas whose heartbeat is recent, read at most once per
    /// [`LIVE_PEERS_FRESH_FOR`].
    pub async fn live_peers(&self) -> crate::error::Result<Vec<LivePeer>> {
        if let Some((read_at, peers)) = &*self.live.lock().unwrap_or_else(PoisonError::into_inner)
            && read_at.elapsed() < LIVE_PEERS_FRESH_FOR
        {
            return Ok(peers.clone());
        }
        let peers = self
            .store
            .live_peers(
                &self.replica_id,
                now_ms().saturating_sub(duration_ms(REPLICA_LIVE_WITHIN)),
            )
            .await?;
        *self.live.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((tokio::time::Instant::now(), peers.clone()));
        Ok(peers)
    }

    /// The live peers a write to `scope` concerns: the replica owning the
    /// sandbox's session, or every live peer for a fleet scope.
    pub async fn destinations(
        &self,
        scope: &PublicationScope,
    ) -> crate::error::Result<Vec<Destination>> {
        let PublicationScope::Sandbox(sandbox_id) = scope else {
            return Ok(self
                .live_peers()
                .await?
                .into_iter()
                .map(|peer| Destination {
                    address: peer.peer_address,
                    session_id: String::new(),
                })
                .collect());
        };
        let Some(owner) = self.store.session_owner(sandbox_id).await? else {
            // No session anywhere: the next one bootstraps from the store.
            return Ok(Vec::new());
        };
        if owner.replica_id == self.replica_id {
            return Ok(Vec::new());
        }
        Ok(self
            .live_peers()
            .await?
            .into_iter()
            .filter(|peer| peer.replica_id == owner.replica_id)
            .map(|peer| Destination {
                address: peer.peer_address,
                session_id: owner.session_id.clone(),
            })
            .collect())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HintQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn enqueue(&self, key: HintKey, hint: Hint) {
        if self.lock().push(key, hint) {
            self.ready.notify_one();
        }
    }

    fn take(&self) -> Option<(HintKey, Hint)> {
        self.lock().pop()
    }

    /// One of the senders: takes waiting hints one at a time.
    async fn send_hints(self: Arc<Self>) {
        loop {
            // Registered before looking, so an enqueue in between is not missed.
            let ready = self.ready.notified();
            let Some((key, hint)) = self.take() else {
                ready.await;
                continue;
            };
            let result = self.send(&key, &hint).await;
            self.metrics
                .peer_notifies
                .get_or_create(&ResultLabel { result })
                .inc();
            if result == "stale_owner" && !hint.resolved_again {
                self.resend_to_current_owner(&key, hint).await;
            }
        }
    }

    /// After `stale_owner`: the session moved; hint its owner now, once.
    async fn resend_to_current_owner(&self, key: &HintKey, hint: Hint) {
        let scope = PublicationScope::Sandbox(key.scope_id.clone());
        match self.destinations(&scope).await {
            Ok(destinations) => {
                for destination in destinations {
                    self.enqueue(
                        HintKey {
                            address: destination.address,
                            scope: key.scope,
                            scope_id: key.scope_id.clone(),
                        },
                        Hint {
                            components: hint.components.clone(),
                            session_id: destination.session_id,
                            resolved_again: true,
                        },
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, sandbox = %key.scope_id, "cannot find the sandbox's new owner")
            }
        }
    }

    fn channel(&self, address: &str) -> Result<Channel, tonic::transport::Error> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(address) {
            return Ok(channel.clone());
        }
        let mut endpoint = Endpoint::from_shared(address.to_string())?
            .connect_timeout(HINT_TIMEOUT)
            .tcp_nodelay(true);
        if address.starts_with("https://")
            && let Some(roots) = &self.tls_roots
        {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(roots)))?;
        }
        let channel = endpoint.connect_lazy();
        channels.insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    async fn send(&self, key: &HintKey, hint: &Hint) -> &'static str {
        let channel = match self.channel(&key.address) {
            Ok(channel) => channel,
            Err(e) => {
                tracing::warn!(peer = %key.address, error = %e, "peer address is not usable");
                return "unreachable";
            }
        };
        let request = PeerNotifyConfigUpdateRequest {
            scope: key.scope as i32,
            scope_id: key.scope_id.clone(),
            session_id: hint.session_id.clone(),
            components: hint
                .components
                .iter()
                .map(|c| c.as_str().to_string())
                .collect(),
            from_replica: self.replica_id.clone(),
            peer_secret: self.secret.expose().to_string(),
        };
        let mut client = GatewayPeerClient::new(channel);
        match tokio::time::timeout(HINT_TIMEOUT, client.peer_notify_config_update(request)).await {
            Err(_) => {
                tracing::warn!(peer = %key.address, "peer hint timed out after {HINT_TIMEOUT:?}");
                "unreachable"
            }
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => "unsupported_peer",
            Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
                tracing::debug!(peer = %key.address, error = %status.message(), "peer unreachable");
                "unreachable"
            }
            Ok(Err(status)) => {
                tracing::warn!(
                    peer = %key.address,
                    code = ?status.code(),
                    error = %status.message(),
                    "peer rejected a hint"
                );
                "rejected"
            }
            Ok(Ok(response)) => result_label(response.into_inner().result()),
        }
    }
}

async fn until_stopping(mut stopping: watch::Receiver<bool>, work: impl Future<Output = ()>) {
    tokio::select! {
        _ = stopping.wait_for(|s| *s) => {}
        () = work => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn key(address: &str) -> HintKey {
        HintKey {
            address: address.into(),
            scope: PeerScope::Sandbox,
            scope_id: "sb-1".into(),
        }
    }

    fn hint(components: &[Component], session_id: &str) -> Hint {
        Hint {
            components: components.to_vec(),
            session_id: session_id.into(),
            resolved_again: false,
        }
    }

    #[test]
    fn hints_to_the_same_peer_and_scope_merge_while_they_wait() {
        let mut queue = HintQueue::default();
        assert!(queue.push(key("http://b"), hint(&[Component::SandboxConfig], "s-1")));
        assert!(queue.push(key("http://c"), hint(&[Component::SandboxConfig], "s-9")));
        assert!(!queue.push(
            key("http://b"),
            hint(
                &[Component::ProviderEnvironment, Component::SandboxConfig],
                "s-2"
            ),
        ));
        let (first, merged) = queue.pop().unwrap();
        assert_eq!(first, key("http://b"));
        assert_eq!(
            merged.components,
            vec![Component::SandboxConfig, Component::ProviderEnvironment]
        );
        assert_eq!(merged.session_id, "s-2", "the newest owner's session wins");
        assert_eq!(queue.pop().unwrap().0, key("http://c"));
        assert!(queue.pop().is_none());
        // A hint already taken no longer merges: a new one waits on its own.
        assert!(queue.push(key("http://b"), hint(&[Component::SandboxConfig], "s-2")));
    }
}
