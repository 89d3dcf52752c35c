//! What one replica is made of, and the one handle its write paths share.
//!
//! No layer takes the whole: `server.rs` builds a [`GatewayState`] and hands
//! each layer its own context with the few handles it uses
//! (`api::ApiContext`, `supervisor_api::SessionContext`,
//! `peers::PeerContext`), so what a layer can touch is written in its
//! signature. Tests and the benchmark read the whole through
//! `GatewayHandle::state`.

use std::sync::Arc;

use crate::config::GatewayConfig;
use crate::config_update::ConfigWriter;
use crate::delivery::{
    DeliveryTuning, FanoutActivity, Permits, Publication, PublicationScope, Publisher,
};
use crate::metrics::Metrics;
use crate::operations::ReportResolver;
use crate::peers::notifier::PeerNotifier;
use crate::sandbox_logs::SandboxLogs;
use crate::session_registry::SessionRegistry;
use crate::store::{OwnerClaims, Store};

/// Every part of a running replica.
pub struct GatewayState {
    pub store: Store,
    /// Where `UpdateConfig` writes commit (group commit of sandbox writes).
    pub config_writer: ConfigWriter,
    pub config: Arc<GatewayConfig>,
    pub sessions: SessionRegistry,
    pub metrics: Arc<Metrics>,
    pub started_at_ms: i64,
    /// Push sessions of this replica; dormant (empty) in poll mode.
    pub publisher: Publisher,
    pub permits: Arc<Permits>,
    pub tuning: DeliveryTuning,
    /// Where poll reports and push acks go to resolve operations.
    pub reports: ReportResolver,
    /// Where accepted sessions record themselves as their sandbox's owner.
    pub owner_claims: OwnerClaims,
    /// Session tasks, which outlive their response streams for a moment
    /// (owner release): shutdown waits for them before closing the store.
    pub session_tasks: tokio_util::task::TaskTracker,
    /// Flips to true when the gateway stops: sessions and waits end so the
    /// server can drain.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Whether a fanout is under way, and so where writes run.
    pub activity: Arc<FanoutActivity>,
    /// Hints to the other replicas of a PostgreSQL store; None with one
    /// replica (SQLite) or without a peer secret.
    pub peers: Option<Arc<PeerNotifier>>,
    /// Recent sandbox log lines pushed to this replica.
    pub logs: SandboxLogs,
}

impl GatewayState {
    /// The handle every write path announces its commits through.
    pub fn announcer(&self) -> Announcer {
        Announcer {
            store: self.store.clone(),
            publisher: self.publisher.clone(),
            peers: self.peers.clone(),
        }
    }
}

/// Announces committed writes to the push sessions they concern: this
/// replica's at once, the other replicas' by a hint. Cheap to clone.
#[derive(Clone)]
pub struct Announcer {
    store: Store,
    publisher: Publisher,
    peers: Option<Arc<PeerNotifier>>,
}

impl Announcer {
    /// Tells the affected push sessions about a committed write, here and
    /// on the peer replicas. Never fails the write: a missed mark is
    /// repaired by reconcile.
    pub async fn publish(&self, publication: Publication) {
        let marked = self.publisher.publish(&self.store, &publication).await;
        if marked > 0 {
            tracing::debug!(scope = ?publication.scope, marked, "publication marked sessions");
        }
        if let Some(peers) = &self.peers {
            let owned_here = matches!(&publication.scope,
                PublicationScope::Sandbox(id) if self.publisher.get(id).is_some());
            peers.notify(&publication, owned_here);
        }
    }

    /// The replicas of this store that are alive now, this one first.
    pub async fn replicas(&self, this_replica: &str) -> crate::error::Result<Vec<String>> {
        let mut replicas = vec![this_replica.to_string()];
        if let Some(peers) = &self.peers {
            replicas.extend(
                peers
                    .live_peers()
                    .await?
                    .into_iter()
                    .map(|peer| peer.replica_id),
            );
        }
        Ok(replicas)
    }
}
