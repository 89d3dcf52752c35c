//! What every request handler shares: the store, the configuration and the
//! live sessions of this replica.

use std::sync::Arc;

use crate::config::GatewayConfig;
use crate::metrics::Metrics;
use crate::sessions::SessionRegistry;
use crate::store::Store;

pub struct GatewayState {
    pub store: Store,
    pub config: GatewayConfig,
    pub sessions: SessionRegistry,
    pub metrics: Arc<Metrics>,
    pub started_at_ms: i64,
}
