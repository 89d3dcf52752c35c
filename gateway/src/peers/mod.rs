//! Replicas sharing a PostgreSQL store tell each other about writes: after
//! a commit, a write for a sandbox whose session lives on another replica
//! sends that replica a hint (`notifier`), and every replica answers hints
//! by marking its own sessions (`service`). Hints carry no configuration:
//! the owner rebuilds from the store. Every replica also replays the
//! fanout intents the others recorded (`replay`), which repairs a lost hint
//! within seconds, and its reconcile repairs the rest. One replica, or one
//! on SQLite, does none of this.

pub mod notifier;
pub mod replay;
pub mod service;

use std::sync::Arc;
use std::time::Duration;

pub use notifier::PeerNotifier;
pub use service::PeerApi;

use crate::config::GatewayConfig;
use crate::delivery::{DeliveryTuning, Publisher};
use crate::store::Store;

/// What answering hints and replaying intents touch: the store and this
/// replica's push sessions.
#[derive(Clone)]
pub struct PeerContext {
    pub store: Store,
    pub config: Arc<GatewayConfig>,
    pub publisher: Publisher,
    pub tuning: DeliveryTuning,
}

/// How often a replica refreshes its row in the registry.
pub const REPLICA_HEARTBEAT: Duration = Duration::from_secs(5);
/// A replica whose heartbeat is older than this gets no hints.
pub const REPLICA_LIVE_WITHIN: Duration = Duration::from_secs(15);
/// A replica silent for this long is removed from the registry.
pub const REPLICA_FORGOTTEN_AFTER: Duration = Duration::from_secs(3600);
/// Hints in flight at once, over all peers.
pub const HINTS_IN_FLIGHT: usize = 8;
/// How long one hint may take before it counts as unreachable.
pub const HINT_TIMEOUT: Duration = Duration::from_secs(5);
