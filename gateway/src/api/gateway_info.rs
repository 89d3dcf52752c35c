//! What the gateway says about itself.

use std::time::Duration;

use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::wire;

use super::OpenShellApi;

/// How long `Health` waits for the store before it reports the gateway degraded.
const STORE_ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Serving, or serving with a store that does not answer (reads of what is cached
/// work, writes fail until it is back).
async fn status(api: &OpenShellApi) -> pb::ServiceStatus {
    if api.state.store.answers(STORE_ANSWER_WITHIN).await {
        pb::ServiceStatus::Healthy
    } else {
        pb::ServiceStatus::Degraded
    }
}

pub(super) async fn health(
    api: &OpenShellApi,
    _request: Request<pb::HealthRequest>,
) -> Result<Response<pb::HealthResponse>, Status> {
    Ok(Response::new(pb::HealthResponse {
        status: status(api).await as i32,
        version: env!("CARGO_PKG_VERSION").to_string(),
    }))
}

pub(super) async fn info(
    api: &OpenShellApi,
    _request: Request<pb::GetGatewayInfoRequest>,
) -> Result<Response<pb::GetGatewayInfoResponse>, Status> {
    let state = &api.state;
    let replicas = state
        .announcer
        .replicas(&state.config.replica_id)
        .await
        .map_err(Status::from)?;
    let details = pb::GatewayInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        config_delivery_mode: state.config.config_delivery_mode.as_str().to_string(),
        store_backend: state.store.backend().as_str().to_string(),
        replica_id: state.config.replica_id.clone(),
        protocol_revision: crate::PROTOCOL_REVISION,
        replicas,
        sessions: u32::try_from(state.sessions.count()).unwrap_or(u32::MAX),
        started_at: Some(wire::timestamp(state.started_at_ms)),
    };
    Ok(Response::new(pb::GetGatewayInfoResponse {
        status: status(api).await as i32,
        gateway_version: details.version.clone(),
        details: Some(details),
    }))
}
