//! Reading policies: a revision, the history, and upstream's load status, of a sandbox's
//! policy or of the global policy.

use openshell_proto::datamodel::v1::WorkspaceSelector;
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::{Permission, Principal};
use crate::error::GatewayError;
use crate::store::{OperationState, PolicyLog, PolicyRevisionRecord, StoreError};
use crate::wire;

use super::OpenShellApi;
use super::paging::{MAX_PAGE, signed_page};
use super::workspace_scope;

impl OpenShellApi {
    /// One stored revision of a sandbox's or the global policy; 0 means the latest.
    pub(super) async fn stored_revision(
        &self,
        log: PolicyLog<'_>,
        revision: u64,
    ) -> Result<PolicyRevisionRecord, Status> {
        let store = &self.state.store;
        if revision != 0 {
            return Ok(store
                .policy_revision_of(log, revision)
                .await
                .map_err(GatewayError::from)?);
        }
        Ok(store
            .policy_history_of(log, 1, None)
            .await
            .map_err(GatewayError::from)?
            .pop()
            .ok_or_else(|| {
                GatewayError::NotFound(match log {
                    PolicyLog::Sandbox(id) => format!("sandbox {id} has no policy yet"),
                    PolicyLog::Global => "no global policy has been set".to_owned(),
                })
            })?)
    }

    /// Whose policy a read names: `global`, or the sandbox the caller may read.
    async fn policy_log_for(
        &self,
        who: &Principal,
        global: bool,
        sandbox: &str,
        workspace_scope: Option<&WorkspaceSelector>,
    ) -> Result<Option<String>, Status> {
        let workspace = workspace_scope::addressed("workspace_scope", workspace_scope)?;
        if global {
            if !sandbox.is_empty() {
                return Err(GatewayError::invalid(
                    "global",
                    "name either a sandbox or the global policy, not both",
                )
                .into());
            }
            who.check(Permission::SandboxRead)?;
            return Ok(None);
        }
        let sandbox = self
            .resolve_named_for(who, Permission::SandboxRead, sandbox, workspace)
            .await?;
        Ok(Some(sandbox.id))
    }

    /// A stored revision in upstream's shape, its status from the operation
    /// that wrote it; with its policy only when asked (one revision, not a list).
    /// A revision that cleared the global policy has no policy.
    pub(super) async fn policy_revision_view(
        &self,
        record: &PolicyRevisionRecord,
        with_policy: bool,
    ) -> Result<pb::SandboxPolicyRevision, Status> {
        let (status, load_error, loaded_at) = self.revision_status(record).await?;
        let policy = if with_policy && !record.policy_json.is_empty() {
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
            created_time: Some(wire::timestamp(record.created_at)),
            loaded_time: loaded_at.map(wire::timestamp),
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
    ) -> Result<(pb::PolicyStatus, String, Option<i64>), Status> {
        let Some(operation_id) = &record.operation_id else {
            return Ok((pb::PolicyStatus::Pending, String::new(), None));
        };
        let operation = match self.state.store.get_operation(operation_id).await {
            Ok(operation) => operation,
            // Operations past their retention are gone: nothing is known.
            Err(StoreError::NotFound(_)) => {
                return Ok((pb::PolicyStatus::Unspecified, String::new(), None));
            }
            Err(e) => return Err(GatewayError::from(e).into()),
        };
        Ok(match operation.state {
            OperationState::Applied => (
                pb::PolicyStatus::Loaded,
                String::new(),
                operation.completed_at,
            ),
            OperationState::Failed => (pb::PolicyStatus::Failed, operation.error, None),
            OperationState::Superseded | OperationState::Cancelled => {
                (pb::PolicyStatus::Superseded, String::new(), None)
            }
            OperationState::Pending | OperationState::Delivered | OperationState::Inactive => {
                (pb::PolicyStatus::Pending, String::new(), None)
            }
        })
    }
}

pub(super) async fn get(
    api: &OpenShellApi,
    request: Request<pb::GetSandboxPolicyRequest>,
) -> Result<Response<pb::GetSandboxPolicyResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let store = &api.state.store;
    let revision = if req.global {
        if req.sandbox.is_some() {
            return Err(GatewayError::invalid(
                "global",
                "name either a sandbox or the global policy, not both",
            )
            .into());
        }
        who.check(Permission::SandboxRead)?;
        api.stored_revision(PolicyLog::Global, req.revision).await?
    } else {
        let sandbox = api
            .resolve_for(&who, Permission::SandboxRead, req.sandbox.as_ref())
            .await?;
        api.stored_revision(PolicyLog::Sandbox(&sandbox.id), req.revision)
            .await?
    };
    let (global_revision, global) = store.global_policy().await.map_err(GatewayError::from)?;
    Ok(Response::new(pb::GetSandboxPolicyResponse {
        policy: Some(wire::policy_revision(&revision, true)),
        effective_source: if global.is_some() {
            pb::PolicySource::Global
        } else {
            pb::PolicySource::Sandbox
        } as i32,
        global_policy_revision: if global.is_some() { global_revision } else { 0 },
    }))
}

/// A page of a policy's history ends at a revision; the next page starts below it.
fn page_start(token: &str) -> Result<Option<u64>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    token
        .parse::<u64>()
        .ok()
        .filter(|revision| *revision > 0)
        .map(Some)
        .ok_or_else(|| {
            GatewayError::invalid("page_token", "not a token from a previous response").into()
        })
}

pub(super) async fn list(
    api: &OpenShellApi,
    request: Request<pb::ListSandboxPoliciesRequest>,
) -> Result<Response<pb::ListSandboxPoliciesResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let limit = signed_page("page_size", req.page_size)?;
    let before = page_start(&req.page_token)?;
    let sandbox = api
        .policy_log_for(&who, req.global, &req.sandbox, req.workspace_scope.as_ref())
        .await?;
    let log = sandbox
        .as_deref()
        .map_or(PolicyLog::Global, PolicyLog::Sandbox);
    let records = api
        .state
        .store
        .policy_history_of(log, limit, before)
        .await
        .map_err(GatewayError::from)?;
    let mut revisions = Vec::with_capacity(records.len());
    for record in &records {
        revisions.push(api.policy_revision_view(record, false).await?);
    }
    // A full page may have older revisions after it; the oldest one here is where the next
    // page starts. Revision 1 has nothing older.
    let next_page_token = match records.last() {
        Some(last) if records.len() as i64 == limit && last.revision > 1 => {
            last.revision.to_string()
        }
        _ => String::new(),
    };
    Ok(Response::new(pb::ListSandboxPoliciesResponse {
        revisions,
        next_page_token,
    }))
}

pub(super) async fn status(
    api: &OpenShellApi,
    request: Request<pb::GetSandboxPolicyStatusRequest>,
) -> Result<Response<pb::GetSandboxPolicyStatusResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let sandbox = api
        .policy_log_for(&who, req.global, &req.sandbox, req.workspace_scope.as_ref())
        .await?;
    let log = sandbox
        .as_deref()
        .map_or(PolicyLog::Global, PolicyLog::Sandbox);
    let store = &api.state.store;
    let record = api.stored_revision(log, u64::from(req.version)).await?;
    let revision = api.policy_revision_view(&record, true).await?;
    // The newest revision loaded: its operation says APPLIED.
    let mut active_version = 0;
    for older in store
        .policy_history_of(log, i64::from(MAX_PAGE), None)
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
