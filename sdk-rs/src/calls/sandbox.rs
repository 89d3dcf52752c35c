//! Sandbox records and lifecycle.

use openshell_proto::datamodel::v1::workspace_selector::Selection;
use openshell_proto::datamodel::v1::{AllWorkspaces, WorkspaceSelector};
use openshell_proto::v1 as pb;

use crate::retry::Idempotency;
use crate::types::workspace_selector;
use crate::types::{
    CreatedSandbox, DeletedSandbox, Sandbox, SandboxLifecycle, SandboxRef, SupervisorCredential,
};
use crate::{Client, SdkError};

/// Stops paging a gateway that keeps handing out tokens; far beyond any real fleet.
const MAX_PAGES: usize = 10_000;

impl Client {
    /// Creates a sandbox, optionally with its first policy (revision 1, which
    /// fixes the static sections). The returned credential is the only copy.
    pub async fn create_sandbox(
        &self,
        name: &str,
        workspace: Option<&str>,
        policy: Option<&str>,
    ) -> Result<CreatedSandbox, SdkError> {
        SdkError::check_policy_size(policy.unwrap_or_default())?;
        let request = pb::CreateSandboxRequest {
            name: name.to_owned(),
            workspace: workspace.unwrap_or_default().to_owned(),
            policy: policy.unwrap_or_default().to_owned(),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.openshell.create_sandbox(r).await
            })
            .await?;
        Ok(CreatedSandbox {
            sandbox: response
                .sandbox
                .ok_or_else(|| SdkError::missing("sandbox"))?
                .into(),
            supervisor_credential: SupervisorCredential::new(response.supervisor_credential),
            operation: response.operation.map(Into::into),
        })
    }

    pub async fn get_sandbox(&self, sandbox: &SandboxRef) -> Result<Sandbox, SdkError> {
        let request = pb::GetSandboxRequest {
            name: sandbox.id_or_name.clone(),
            workspace_scope: sandbox.workspace_scope(),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.openshell.get_sandbox(r).await
            })
            .await?;
        Ok(response
            .sandbox
            .ok_or_else(|| SdkError::missing("sandbox"))?
            .into())
    }

    /// Lists sandboxes, following page tokens until the last page.
    pub async fn list_sandboxes(
        &self,
        workspace: Option<&str>,
        include_deleted: bool,
    ) -> Result<Vec<Sandbox>, SdkError> {
        let mut sandboxes = Vec::new();
        let mut page_token = String::new();
        for _ in 0..MAX_PAGES {
            let request = pb::ListSandboxesRequest {
                // No workspace: every one the token may see, as this client always listed.
                workspace_scope: Some(workspace_selector(workspace).unwrap_or(WorkspaceSelector {
                    selection: Some(Selection::AllWorkspaces(AllWorkspaces {})),
                })),
                include_deleted,
                page_size: 0,
                page_token: page_token.clone(),
                label_selector: String::new(),
            };
            let response = self
                .unary(Idempotency::Safe, request, |mut c, r| async move {
                    c.openshell.list_sandboxes(r).await
                })
                .await?;
            sandboxes.extend(response.sandboxes.into_iter().map(Sandbox::from));
            if response.next_page_token.is_empty() || response.next_page_token == page_token {
                break;
            }
            page_token = response.next_page_token;
        }
        Ok(sandboxes)
    }

    /// Deletes a sandbox; its pending operations end `CANCELLED`.
    pub async fn delete_sandbox(&self, sandbox: &SandboxRef) -> Result<DeletedSandbox, SdkError> {
        let request = pb::DeleteSandboxRequest {
            sandbox: Some(sandbox.to_proto()),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.openshell.delete_sandbox(r).await
            })
            .await?;
        Ok(DeletedSandbox {
            sandbox: response
                .sandbox
                .ok_or_else(|| SdkError::missing("sandbox"))?
                .into(),
            cancelled_operations: response.cancelled_operations,
        })
    }

    /// Stops (`STOPPED`) or restarts (`PENDING`) a sandbox; `RUNNING` is the
    /// gateway's to set once a supervisor bootstraps.
    pub async fn set_sandbox_lifecycle(
        &self,
        sandbox: &SandboxRef,
        lifecycle: SandboxLifecycle,
    ) -> Result<Sandbox, SdkError> {
        let request = pb::SetSandboxLifecycleRequest {
            sandbox: Some(sandbox.to_proto()),
            lifecycle: lifecycle.into(),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.plane.set_sandbox_lifecycle(r).await
            })
            .await?;
        Ok(response.into())
    }
}
