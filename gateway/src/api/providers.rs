//! Providers and their attachment to sandboxes.

use std::collections::BTreeMap;

use openshell_core::{Secret, ValueClass};
use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::{Permission, Principal};
use crate::error::GatewayError;
use crate::lifecycle::workspace_or_default;
use crate::operations::resolution::settle_from_last_reports;
use crate::providers::{self, ProviderInput};
use crate::wire;

use super::OpenShellApi;

impl OpenShellApi {
    /// Attaches (or detaches) a provider to a live sandbox of the principal's, publishes
    /// the change, and settles a repeat from the last report, as `UpdateConfig` does for
    /// a no-op write.
    pub(super) async fn change_attachment(
        &self,
        who: &Principal,
        sandbox: Option<&pb::SandboxRef>,
        provider: &str,
        attached: bool,
    ) -> Result<Response<pb::AttachmentResponse>, Status> {
        let sandbox = self
            .resolve_live_for(who, Permission::AttachmentWrite, sandbox)
            .await?;
        let provider = self
            .provider_for(
                who,
                Permission::AttachmentWrite,
                provider,
                &sandbox.workspace,
            )
            .await?;
        let change =
            providers::attach(&self.state.store, &sandbox, &provider, attached, &who.name).await?;
        let mut operation = change.operation;
        match change.publication {
            Some(publication) => self.state.announcer.publish(publication).await,
            None => {
                settle_from_last_reports(&self.state.store, &operation).await?;
                operation = self
                    .state
                    .store
                    .get_operation(&operation.id)
                    .await
                    .map_err(GatewayError::from)?;
            }
        }
        Ok(Response::new(pb::AttachmentResponse {
            sandbox: Some(wire::sandbox(&change.sandbox)),
            operation: Some(wire::operation(&operation)),
        }))
    }
}

fn provider_input(
    values: &[pb::ProviderValueInput],
    expires_at: Option<&prost_types::Timestamp>,
) -> ProviderInput {
    let mut env = BTreeMap::new();
    let mut credentials = BTreeMap::new();
    let mut classes = Vec::new();
    let mut value_expires_at = BTreeMap::new();
    let mut bad_times = Vec::new();
    let mut time = |field: String, at: &prost_types::Timestamp| {
        wire::timestamp_to_ms(&field, at)
            .map_err(|v| bad_times.extend(v))
            .ok()
    };
    for (i, v) in values.iter().enumerate() {
        if let Some(at) = v
            .expires_at
            .as_ref()
            .and_then(|at| time(format!("values[{i}].expires_at"), at))
        {
            value_expires_at.insert(i, (v.name.clone(), at));
        }
        let class = match pb::ValueClass::try_from(v.class) {
            Ok(pb::ValueClass::Credential) => Some(ValueClass::Credential),
            Ok(pb::ValueClass::NonSecret) => Some(ValueClass::NonSecret),
            _ => None,
        };
        classes.push((i, v.name.clone(), class));
        match class {
            Some(ValueClass::Credential) => {
                credentials.insert(v.name.clone(), Secret::new(v.value.clone()));
            }
            _ => {
                env.insert(v.name.clone(), v.value.clone());
            }
        }
    }
    let expires_at = expires_at.and_then(|at| time("expires_at".into(), at));
    ProviderInput {
        env,
        credentials,
        classes,
        expires_at,
        value_expires_at,
        bad_times,
    }
}

pub(super) async fn create(
    api: &OpenShellApi,
    request: Request<pb::CreateProviderRequest>,
) -> Result<Response<pb::ProviderWriteResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    who.check_in(
        Permission::ProviderWrite,
        workspace_or_default(&req.workspace),
    )?;
    let input = provider_input(&req.values, req.expires_at.as_ref());
    let record = providers::create_provider(
        &api.state.store,
        &req.name,
        workspace_or_default(&req.workspace),
        &req.r#type,
        input,
    )
    .await?;
    tracing::info!(provider = %record.id, name = %record.name, "provider created");
    Ok(Response::new(pb::ProviderWriteResponse {
        provider: Some(wire::provider(&record)),
        operation: None,
    }))
}

pub(super) async fn update(
    api: &OpenShellApi,
    request: Request<pb::UpdateProviderRequest>,
) -> Result<Response<pb::ProviderWriteResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let existing = api
        .provider_for(
            &who,
            Permission::ProviderWrite,
            &req.provider,
            workspace_or_default(&req.workspace),
        )
        .await?;
    let input = provider_input(&req.values, req.expires_at.as_ref());
    let change = providers::update_provider(&api.state.store, &existing, input).await?;
    api.state.announcer.publish(change.publication).await;
    let record = change.provider;
    tracing::info!(provider = %record.id, revision = record.revision, "provider updated");
    Ok(Response::new(pb::ProviderWriteResponse {
        provider: Some(wire::provider(&record)),
        operation: None,
    }))
}

pub(super) async fn delete(
    api: &OpenShellApi,
    request: Request<pb::DeleteProviderRequest>,
) -> Result<Response<pb::DeleteProviderResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let existing = api
        .provider_for(
            &who,
            Permission::ProviderWrite,
            &req.provider,
            workspace_or_default(&req.workspace),
        )
        .await?;
    providers::delete_provider(&api.state.store, &existing).await?;
    Ok(Response::new(pb::DeleteProviderResponse {}))
}

pub(super) async fn get(
    api: &OpenShellApi,
    request: Request<pb::GetProviderRequest>,
) -> Result<Response<pb::Provider>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let record = api
        .provider_for(
            &who,
            Permission::ProviderRead,
            &req.provider,
            workspace_or_default(&req.workspace),
        )
        .await?;
    Ok(Response::new(wire::provider(&record)))
}

pub(super) async fn list(
    api: &OpenShellApi,
    request: Request<pb::ListProvidersRequest>,
) -> Result<Response<pb::ListProvidersResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let workspace = who.list_scope(
        Permission::ProviderRead,
        Some(req.workspace.as_str()).filter(|w| !w.is_empty()),
    )?;
    let records = api
        .state
        .store
        .list_providers(workspace)
        .await
        .map_err(GatewayError::from)?;
    Ok(Response::new(pb::ListProvidersResponse {
        providers: records.iter().map(wire::provider).collect(),
    }))
}

pub(super) async fn attach(
    api: &OpenShellApi,
    request: Request<pb::AttachProviderRequest>,
) -> Result<Response<pb::AttachmentResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    api.change_attachment(&who, req.sandbox.as_ref(), &req.provider, true)
        .await
}

pub(super) async fn detach(
    api: &OpenShellApi,
    request: Request<pb::DetachProviderRequest>,
) -> Result<Response<pb::AttachmentResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    api.change_attachment(&who, req.sandbox.as_ref(), &req.provider, false)
        .await
}
