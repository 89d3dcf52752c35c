//! Supervisor sessions as operators see them.

use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::error::GatewayError;

use super::OpenShellApi;

pub(super) async fn list(
    api: &OpenShellApi,
    request: Request<pb::ListSessionsRequest>,
) -> Result<Response<pb::ListSessionsResponse>, Status> {
    let who = principal_of(&request)?;
    let mut sessions = api.state.sessions.list(&api.state.config.replica_id);
    if let Some(own) = &who.workspace {
        // A token limited to a workspace sees the sessions of its sandboxes only.
        let mine = api
            .state
            .store
            .live_sandbox_ids(Some(own))
            .await
            .map_err(GatewayError::from)?;
        let mine: std::collections::HashSet<String> = mine.into_iter().collect();
        sessions.retain(|s| mine.contains(&s.sandbox_id));
    }
    let ids: Vec<String> = sessions.iter().map(|s| s.sandbox_id.clone()).collect();
    let progress = api
        .state
        .store
        .policy_progress(&ids)
        .await
        .map_err(GatewayError::from)?;
    for session in &mut sessions {
        if let Some(p) = progress.get(&session.sandbox_id) {
            session.policy_revision = p.desired;
            session.applied_policy_revision = p.applied;
        }
    }
    Ok(Response::new(pb::ListSessionsResponse { sessions }))
}

pub(super) async fn inspect(
    api: &OpenShellApi,
    request: Request<pb::InspectSessionRequest>,
) -> Result<Response<pb::SessionInspection>, Status> {
    let who = principal_of(&request)?;
    let sandbox = api
        .resolve_for(
            &who,
            Permission::SessionRead,
            request.get_ref().sandbox.as_ref(),
        )
        .await?;
    let inspection = crate::inspect::inspect(&api.state.inspect_inputs(), &sandbox).await?;
    Ok(Response::new(inspection))
}
