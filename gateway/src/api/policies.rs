//! Reading policies: a revision, the history, and upstream's load status.

use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::error::GatewayError;
use crate::store::{OperationState, PolicyRevisionRecord, SandboxRecord, StoreError};
use crate::wire;

use super::OpenShellApi;
use super::paging::{MAX_PAGE, page};
use super::workspace_scope;

impl OpenShellApi {
    /// One stored revision of a sandbox's policy; 0 means the latest.
    pub(super) async fn stored_revision(
        &self,
        sandbox: &SandboxRecord,
        revision: u64,
    ) -> Result<PolicyRevisionRecord, Status> {
        let store = &self.state.store;
        if revision != 0 {
            return Ok(store
                .policy_revision(&sandbox.id, revision)
                .await
                .map_err(GatewayError::from)?);
        }
        Ok(store
            .latest_policy(&sandbox.id)
            .await
            .map_err(GatewayError::from)?
            .ok_or_else(|| {
                GatewayError::NotFound(format!("sandbox {} has no policy yet", sandbox.name))
            })?)
    }

    /// A stored revision in upstream's shape, its status from the operation
    /// that wrote it; with its policy only when asked (one revision, not a list).
    pub(super) async fn policy_revision_view(
        &self,
        record: &PolicyRevisionRecord,
        with_policy: bool,
    ) -> Result<pb::SandboxPolicyRevision, Status> {
        let (status, load_error, loaded_at_ms) = self.revision_status(record).await?;
        let policy = if with_policy {
            let policy = openshell_core::policy::parse_policy(&record.policy_json)
                .map_err(|e| GatewayError::Corrupt(e.to_string()))?;
            Some(sb::SandboxPolicy::from(&policy))
        } else {
            None
        };
        Ok(pb::SandboxPolicyRevision {
            version: wire::version_u32(record.revision),
            policy_hash: record.policy_hash.clone(),
            status: status as i32,
            load_error,
            created_at_ms: record.created_at,
            loaded_at_ms,
            policy,
            sandbox_id: record.sandbox_id.clone(),
            revision: record.revision,
            operation_id: record.operation_id.clone().unwrap_or_default(),
            provenance: Default::default(),
        })
    }

    /// Upstream's load status of a revision, read from its operation: the
    /// status, the failure reason, and when it was loaded.
    pub(super) async fn revision_status(
        &self,
        record: &PolicyRevisionRecord,
    ) -> Result<(pb::PolicyStatus, String, i64), Status> {
        let Some(operation_id) = &record.operation_id else {
            return Ok((pb::PolicyStatus::Pending, String::new(), 0));
        };
        let operation = match self.state.store.get_operation(operation_id).await {
            Ok(operation) => operation,
            // Operations past their retention are gone: nothing is known.
            Err(StoreError::NotFound(_)) => {
                return Ok((pb::PolicyStatus::Unspecified, String::new(), 0));
            }
            Err(e) => return Err(GatewayError::from(e).into()),
        };
        Ok(match operation.state {
            OperationState::Applied => (
                pb::PolicyStatus::Loaded,
                String::new(),
                operation.completed_at.unwrap_or_default(),
            ),
            OperationState::Failed => (pb::PolicyStatus::Failed, operation.error, 0),
            OperationState::Superseded | OperationState::Cancelled => {
                (pb::PolicyStatus::Superseded, String::new(), 0)
            }
            OperationState::Pending | OperationState::Delivered | OperationState::Inactive => {
                (pb::PolicyStatus::Pending, String::new(), 0)
            }
        })
    }
}

/// The global policy's revision history is not in upstream's layout yet.
fn refuse_global_revisions(global: bool) -> Result<(), Status> {
    if global {
        return Err(GatewayError::invalid(
            "global",
            "the global policy's revisions are not served in this layout yet; GetSandboxPolicy reads the global policy in effect",
        )
        .into());
    }
    Ok(())
}

pub(super) async fn get(
    api: &OpenShellApi,
    request: Request<pb::GetSandboxPolicyRequest>,
) -> Result<Response<pb::GetSandboxPolicyResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let sandbox = api
        .resolve_for(&who, Permission::SandboxRead, req.sandbox.as_ref())
        .await?;
    let store = &api.state.store;
    let revision = api.stored_revision(&sandbox, req.revision).await?;
    let (global_revision, global) = store.global_policy().await.map_err(GatewayError::from)?;
    Ok(Response::new(pb::GetSandboxPolicyResponse {
        policy: Some(wire::policy_revision(&revision, true)),
        effective_source: if global.is_some() {
            pb::PolicySource::Global
        } else {
            pb::PolicySource::Sandbox
        } as i32,
        global_policy_revision: global_revision,
    }))
}

pub(super) async fn list(
    api: &OpenShellApi,
    request: Request<pb::ListSandboxPoliciesRequest>,
) -> Result<Response<pb::ListSandboxPoliciesResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    refuse_global_revisions(req.global)?;
    let sandbox = api
        .resolve_named_for(&who, Permission::SandboxRead, &req.name, &req.workspace)
        .await?;
    let skip = usize::try_from(req.offset).unwrap_or(usize::MAX);
    let records = api
        .state
        .store
        .policy_history(
            &sandbox.id,
            page("limit", req.limit)?.saturating_add(i64::from(req.offset)),
        )
        .await
        .map_err(GatewayError::from)?;
    let mut revisions = Vec::new();
    for record in records.iter().skip(skip) {
        revisions.push(api.policy_revision_view(record, false).await?);
    }
    Ok(Response::new(pb::ListSandboxPoliciesResponse { revisions }))
}

pub(super) async fn status(
    api: &OpenShellApi,
    request: Request<pb::GetSandboxPolicyStatusRequest>,
) -> Result<Response<pb::GetSandboxPolicyStatusResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    refuse_global_revisions(req.global)?;
    let sandbox = api
        .resolve_named_for(
            &who,
            Permission::SandboxRead,
            &req.sandbox,
            workspace_scope::addressed("workspace_scope", req.workspace_scope.as_ref())?,
        )
        .await?;
    let store = &api.state.store;
    let record = api
        .stored_revision(&sandbox, u64::from(req.version))
        .await?;
    let revision = api.policy_revision_view(&record, true).await?;
    // The newest revision loaded: its operation says APPLIED.
    let mut active_version = 0;
    for older in store
        .policy_history(&sandbox.id, i64::from(MAX_PAGE))
        .await
        .map_err(GatewayError::from)?
    {
        let (status, _, _) = api.revision_status(&older).await?;
        if status == pb::PolicyStatus::Loaded {
            active_version = wire::version_u32(older.revision);
            break;
        }
    }
    Ok(Response::new(pb::GetSandboxPolicyStatusResponse {
        revision: Some(revision),
        active_version,
    }))
}
