//! Description of the gateway a client talks to.

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use crate::timefmt;

/// What `GetGatewayInfo` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayInfo {
    pub version: String,
    /// `"poll"` or `"push"`.
    pub config_delivery_mode: String,
    /// `"sqlite"` or `"postgres"`.
    pub store_backend: String,
    pub replica_id: String,
    /// Highest supervisor protocol revision this gateway speaks.
    pub protocol_revision: u32,
    /// Live replicas sharing the store.
    pub replicas: Vec<String>,
    /// Sessions connected to this replica.
    pub sessions: u32,
    pub started_at: Option<String>,
    /// The gateway's clock when it answered this call, to the second (the
    /// HTTP `date` header of the answer), if it sent one: for checking clock skew.
    pub answered_at: Option<String>,
}

impl From<pb::GatewayInfo> for GatewayInfo {
    fn from(p: pb::GatewayInfo) -> Self {
        Self {
            version: p.version,
            config_delivery_mode: p.config_delivery_mode,
            store_backend: p.store_backend,
            replica_id: p.replica_id,
            protocol_revision: p.protocol_revision,
            replicas: p.replicas,
            sessions: p.sessions,
            started_at: timefmt::timestamp(p.started_at),
            answered_at: None,
        }
    }
}
