//! Reading settings and the settings registry.

use std::collections::BTreeMap;

use openshell_core::settings::{self, Scope};
use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::error::GatewayError;
use crate::lifecycle::workspace_or_default;
use crate::wire;

use super::OpenShellApi;

pub(super) async fn get(
    api: &OpenShellApi,
    request: Request<pb::GetSettingsRequest>,
) -> Result<Response<pb::GetSettingsResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let store = &api.state.store;
    let to_pb = |values: &BTreeMap<String, openshell_core::SettingValue>, scope: Scope| {
        values
            .iter()
            .map(|(key, value)| pb::Setting {
                key: key.clone(),
                value: Some(wire::setting_value(value)),
                scope: wire::scope(Some(scope)) as i32,
            })
            .collect::<Vec<_>>()
    };
    let response = match pb::SettingScope::try_from(req.scope) {
        Ok(pb::SettingScope::Global) => {
            let global = store
                .settings_at(Scope::Global, "")
                .await
                .map_err(GatewayError::from)?;
            pb::GetSettingsResponse {
                values: to_pb(&global.values, Scope::Global),
                revision: global.revision,
                effective: Vec::new(),
            }
        }
        Ok(pb::SettingScope::Workspace) => {
            let workspace = workspace_or_default(&req.workspace);
            who.check_in(Permission::SettingsRead, workspace)?;
            if !store
                .workspace_exists(workspace)
                .await
                .map_err(GatewayError::from)?
            {
                return Err(
                    GatewayError::NotFound(format!("workspace {workspace:?} not found")).into(),
                );
            }
            let scoped = store
                .settings_at(Scope::Workspace, workspace)
                .await
                .map_err(GatewayError::from)?;
            pb::GetSettingsResponse {
                values: to_pb(&scoped.values, Scope::Workspace),
                revision: scoped.revision,
                effective: Vec::new(),
            }
        }
        Ok(pb::SettingScope::Sandbox) => {
            let sandbox = api
                .resolve_for(&who, Permission::SettingsRead, req.sandbox.as_ref())
                .await?;
            let own = store
                .settings_at(Scope::Sandbox, &sandbox.id)
                .await
                .map_err(GatewayError::from)?;
            let workspace = store
                .settings_at(Scope::Workspace, &sandbox.workspace)
                .await
                .map_err(GatewayError::from)?;
            let global = store
                .settings_at(Scope::Global, "")
                .await
                .map_err(GatewayError::from)?;
            let effective = settings::effective(&global.values, &workspace.values, &own.values);
            pb::GetSettingsResponse {
                values: to_pb(&own.values, Scope::Sandbox),
                revision: own.revision,
                effective: effective
                    .iter()
                    .map(|e| pb::Setting {
                        key: e.key.clone(),
                        value: Some(wire::setting_value(&e.value)),
                        scope: wire::scope(e.source) as i32,
                    })
                    .collect(),
            }
        }
        _ => {
            return Err(
                GatewayError::invalid("scope", "expected GLOBAL, WORKSPACE or SANDBOX").into(),
            );
        }
    };
    Ok(Response::new(response))
}

pub(super) async fn definitions(
    _api: &OpenShellApi,
    _request: Request<pb::ListSettingDefinitionsRequest>,
) -> Result<Response<pb::ListSettingDefinitionsResponse>, Status> {
    let definitions = settings::registry()
        .iter()
        .map(|def| pb::SettingDefinition {
            key: def.key.to_string(),
            kind: def.kind.name().to_string(),
            default_value: Some(wire::setting_value(&def.default_value())),
            allowed_values: def
                .kind
                .allowed_values()
                .iter()
                .map(|v| (*v).to_string())
                .collect(),
            description: def.description.to_string(),
        })
        .collect();
    Ok(Response::new(pb::ListSettingDefinitionsResponse {
        definitions,
    }))
}
