//! What every request handler shares: the store, the configuration and the
//! live sessions of this replica.

use crate::config::GatewayConfig;
use crate::sessions::SessionRegistry;
use crate::store::Store;

pub struct GatewayState {
    pub store: Store,
    pub config: GatewayConfig,
    pub sessions: SessionRegistry,
    pub started_at_ms: i64,
}
