//! The workspace half of authorization (`authz`): the role was checked
//! before the call reached its handler; these check that the target lies in
//! the token's workspace, once the handler knows where it lies.
//!
//! A name is resolved in the workspace the request names, so that workspace
//! is checked before the lookup: a token limited to one workspace cannot
//! learn which names exist in another. An id may name an object of any
//! workspace, so the object's own workspace is checked after it is read.

use openshell_proto::v1 as pb;
use tonic::Status;

use super::OpenShellApi;
use crate::authz::{Permission, Principal};
use crate::error::GatewayError;
use crate::lifecycle::{self, workspace_or_default};
use crate::providers;
use crate::store::{Lifecycle, OperationRecord, ProviderRecord, SandboxRecord, TargetKind};

/// Whether `reference` is an id (which names its object in any workspace).
fn is_id(reference: &str) -> bool {
    openshell_core::names::ID_PREFIXES
        .iter()
        .any(|prefix| reference.starts_with(prefix))
}

impl OpenShellApi {
    /// A sandbox the principal may use for `permission`.
    pub(super) async fn resolve_for(
        &self,
        who: &Principal,
        permission: Permission,
        sandbox: Option<&pb::SandboxRef>,
    ) -> Result<SandboxRecord, Status> {
        if let Some(reference) = sandbox
            && !is_id(&reference.id_or_name)
        {
            who.check_in(permission, workspace_or_default(&reference.workspace))?;
        }
        let record = self.resolve(sandbox).await?;
        who.check_in(permission, &record.workspace)?;
        Ok(record)
    }

    /// [`Self::resolve_for`] of a sandbox that is not deleted.
    pub(super) async fn resolve_live_for(
        &self,
        who: &Principal,
        permission: Permission,
        sandbox: Option<&pb::SandboxRef>,
    ) -> Result<SandboxRecord, Status> {
        let record = self.resolve_for(who, permission, sandbox).await?;
        if record.lifecycle == Lifecycle::Deleted {
            return Err(
                GatewayError::NotFound(format!("sandbox {} was deleted", record.id)).into(),
            );
        }
        Ok(record)
    }

    /// A sandbox named as upstream's requests name it, for `permission`.
    pub(super) async fn resolve_named_for(
        &self,
        who: &Principal,
        permission: Permission,
        name: &str,
        workspace: &str,
    ) -> Result<SandboxRecord, Status> {
        if !name.is_empty() && !is_id(name) {
            who.check_in(permission, workspace_or_default(workspace))?;
        }
        let record = self.resolve_named(name, workspace).await?;
        who.check_in(permission, &record.workspace)?;
        Ok(record)
    }

    /// The sandbox id an `UpdateConfig` names, for `permission`.
    pub(super) async fn resolve_sandbox_id_for(
        &self,
        who: &Principal,
        permission: Permission,
        name: &str,
        workspace: &str,
    ) -> Result<String, Status> {
        if !is_id(name) {
            who.check_in(permission, workspace_or_default(workspace))?;
        }
        let id =
            lifecycle::resolve_sandbox_id(&self.state.store, name, workspace_or_default(workspace))
                .await?;
        if who.workspace.is_some() {
            // Only a limited token pays the read: the write reads it again in its transaction.
            match self.state.store.get_sandbox(&id).await {
                Ok(record) => who.check_in(permission, &record.workspace)?,
                Err(e) => return Err(GatewayError::from(e).into()),
            }
        }
        Ok(id)
    }

    /// A provider the principal may use for `permission`.
    pub(super) async fn provider_for(
        &self,
        who: &Principal,
        permission: Permission,
        provider: &str,
        workspace: &str,
    ) -> Result<ProviderRecord, Status> {
        if !provider.is_empty() && !is_id(provider) {
            let (_, searched) = providers::split_reference(provider, workspace)?;
            who.check_in(permission, searched)?;
        }
        let record = providers::resolve(&self.state.store, provider, workspace).await?;
        who.check_in(permission, &record.workspace)?;
        Ok(record)
    }

    /// Whether the principal may follow `operation`: one of a sandbox or a
    /// workspace is checked in that workspace; a global one spans every
    /// workspace, so a token limited to one never sees it.
    pub(super) async fn check_operation(
        &self,
        who: &Principal,
        operation: &OperationRecord,
    ) -> Result<(), Status> {
        if who.workspace.is_none() {
            return Ok(());
        }
        let permission = Permission::OperationRead;
        match operation.target_kind {
            TargetKind::Workspace => who.check_in(permission, &operation.target),
            TargetKind::Sandbox => {
                let sandbox_id = operation.sandbox_id.as_deref().unwrap_or(&operation.target);
                let record = self
                    .state
                    .store
                    .get_sandbox(sandbox_id)
                    .await
                    .map_err(GatewayError::from)?;
                who.check_in(permission, &record.workspace)
            }
            TargetKind::Global | TargetKind::Provider => who.check_global(permission),
        }
    }

    /// Reads an operation the principal may follow.
    pub(super) async fn operation_for(
        &self,
        who: &Principal,
        id: &str,
    ) -> Result<OperationRecord, Status> {
        let operation = self
            .state
            .store
            .get_operation(id)
            .await
            .map_err(GatewayError::from)?;
        self.check_operation(who, &operation).await?;
        Ok(operation)
    }
}
