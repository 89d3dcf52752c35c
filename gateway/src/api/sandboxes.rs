//! Sandboxes: create, read, list, delete, and stop or start.

use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::error::GatewayError;
use crate::lifecycle::{self, workspace_or_default};
use crate::store::{Lifecycle, SandboxRecord};
use crate::wire;

use super::OpenShellApi;
use super::paging::{next_token, offset, signed_page};
use super::workspace_scope;

impl OpenShellApi {
    /// Sandboxes as the API shows them, with the policy each one's
    /// supervisor last reported applied.
    pub(super) async fn sandbox_views(
        &self,
        records: &[SandboxRecord],
    ) -> Result<Vec<pb::Sandbox>, Status> {
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        let progress = self
            .state
            .store
            .policy_progress(&ids)
            .await
            .map_err(GatewayError::from)?;
        Ok(records
            .iter()
            .map(|r| wire::sandbox_with_applied(r, progress.get(&r.id)))
            .collect())
    }

    pub(super) async fn resolve(
        &self,
        sandbox: Option<&pb::SandboxRef>,
    ) -> Result<SandboxRecord, Status> {
        let sandbox = sandbox.ok_or_else(|| {
            Status::from(GatewayError::invalid(
                "sandbox",
                "a sandbox id or name is required",
            ))
        })?;
        Ok(lifecycle::resolve_sandbox(
            &self.state.store,
            &sandbox.id_or_name,
            workspace_or_default(&sandbox.workspace),
        )
        .await?)
    }

    /// A sandbox named as upstream's requests name it: `name` (or an id) in `workspace`.
    pub(super) async fn resolve_named(
        &self,
        name: &str,
        workspace: &str,
    ) -> Result<SandboxRecord, Status> {
        if name.is_empty() {
            return Err(GatewayError::invalid("name", "a sandbox name is required").into());
        }
        Ok(
            lifecycle::resolve_sandbox(&self.state.store, name, workspace_or_default(workspace))
                .await?,
        )
    }
}

pub(super) async fn create(
    api: &OpenShellApi,
    request: Request<pb::CreateSandboxRequest>,
) -> Result<Response<pb::CreateSandboxResponse>, Status> {
    let who = principal_of(&request)?;
    let caller = who.name.clone();
    let req = request.into_inner();
    who.check_in(
        Permission::SandboxWrite,
        workspace_or_default(&req.workspace),
    )?;
    let policy = Some(req.policy.as_str()).filter(|p| !p.is_empty());
    let created =
        lifecycle::create_sandbox(&api.state.store, &req.name, &req.workspace, policy, &caller)
            .await?;
    tracing::info!(sandbox = %created.sandbox.id, name = %created.sandbox.name, %caller, "sandbox created");
    Ok(Response::new(pb::CreateSandboxResponse {
        sandbox: Some(wire::sandbox(&created.sandbox)),
        supervisor_credential: created.credential.expose().to_string(),
        operation: created.operation.as_ref().map(wire::operation),
    }))
}

pub(super) async fn get(
    api: &OpenShellApi,
    request: Request<pb::GetSandboxRequest>,
) -> Result<Response<pb::SandboxResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.get_ref();
    let workspace = workspace_scope::addressed("workspace_scope", req.workspace_scope.as_ref())?;
    let sandbox = api
        .resolve_named_for(&who, Permission::SandboxRead, &req.name, workspace)
        .await?;
    let views = api.sandbox_views(std::slice::from_ref(&sandbox)).await?;
    Ok(Response::new(pb::SandboxResponse {
        sandbox: Some(
            views
                .into_iter()
                .next()
                .unwrap_or_else(|| wire::sandbox(&sandbox)),
        ),
    }))
}

pub(super) async fn list(
    api: &OpenShellApi,
    request: Request<pb::ListSandboxesRequest>,
) -> Result<Response<pb::ListSandboxesResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    if !req.label_selector.is_empty() {
        return Err(GatewayError::invalid(
            "label_selector",
            "this gateway stores no sandbox labels, so it cannot select by them; list without a selector",
        )
        .into());
    }
    let limit = signed_page("page_size", req.page_size)?;
    let offset = offset(&req.page_token)?;
    let workspace = who.list_scope(
        Permission::SandboxRead,
        workspace_scope::listed(req.workspace_scope.as_ref()),
    )?;
    let records = api
        .state
        .store
        .list_sandboxes(workspace, req.include_deleted, limit, offset)
        .await
        .map_err(GatewayError::from)?;
    Ok(Response::new(pb::ListSandboxesResponse {
        next_page_token: next_token(offset, limit, records.len()),
        sandboxes: api.sandbox_views(&records).await?,
    }))
}

pub(super) async fn delete(
    api: &OpenShellApi,
    request: Request<pb::DeleteSandboxRequest>,
) -> Result<Response<pb::DeleteSandboxResponse>, Status> {
    let who = principal_of(&request)?;
    let caller = who.name.clone();
    let sandbox = api
        .resolve_live_for(
            &who,
            Permission::SandboxWrite,
            request.get_ref().sandbox.as_ref(),
        )
        .await?;
    let (deleted, cancelled, publication) =
        lifecycle::delete_sandbox(&api.state.store, &sandbox).await?;
    api.state.logs.remove(&deleted.id);
    // Like a stop: its supervisor is told why and is refused when it reconnects. A session
    // held by another replica is closed there, when the publication makes it rebuild.
    api.state
        .sessions
        .close(&deleted.id, crate::snapshot::DELETED_SANDBOX_REASON);
    api.state.announcer.publish(publication).await;
    tracing::info!(sandbox = %deleted.id, cancelled, %caller, "sandbox deleted");
    Ok(Response::new(pb::DeleteSandboxResponse {
        sandbox: Some(wire::sandbox(&deleted)),
        cancelled_operations: u32::try_from(cancelled).unwrap_or(u32::MAX),
    }))
}

pub(super) async fn set_lifecycle(
    api: &OpenShellApi,
    request: Request<pb::SetSandboxLifecycleRequest>,
) -> Result<Response<pb::Sandbox>, Status> {
    let req = request.get_ref();
    let wanted = match pb::SandboxLifecycle::try_from(req.lifecycle) {
        Ok(pb::SandboxLifecycle::Stopped) => Lifecycle::Stopped,
        Ok(pb::SandboxLifecycle::Pending) => Lifecycle::Pending,
        _ => {
            return Err(GatewayError::invalid(
                "lifecycle",
                "expected STOPPED, or PENDING to start the sandbox again",
            )
            .into());
        }
    };
    let who = principal_of(&request)?;
    let sandbox = api
        .resolve_live_for(&who, Permission::SandboxWrite, req.sandbox.as_ref())
        .await?;
    let change = lifecycle::set_lifecycle(&api.state.store, &sandbox, wanted).await?;
    let updated = change.sandbox;
    if updated.lifecycle == Lifecycle::Stopped {
        // Its supervisor learns why it gets nothing more; it reconnects, and is refused
        // until the sandbox starts again.
        api.state
            .sessions
            .close(&updated.id, crate::snapshot::STOPPED_SANDBOX_REASON);
    }
    if let Some(publication) = change.publication {
        api.state.announcer.publish(publication).await;
    }
    Ok(Response::new(wire::sandbox(&updated)))
}
