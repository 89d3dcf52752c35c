//! `CreateToken`, `ListTokens`, `RevokeToken`: operator tokens kept in the
//! store. Only an admin token of every workspace gets here (`authz`).

use openshell_core::{Secret, Violation};
use openshell_proto::v1 as pb;
use tonic::Status;

use crate::authz::{Principal, Role};
use crate::config::OperatorToken;
use crate::crypto::hash_credential;
use crate::error::GatewayError;
use crate::store::{Store, TokenRecord};
use crate::wire;

/// Stored tokens start with this, so a leaked one is recognisable (e.g. by
/// secret scanners) and never mistaken for a supervisor credential.
const TOKEN_PREFIX: &str = "ost_";

fn role_to_pb(role: Role) -> pb::TokenRole {
    match role {
        Role::Viewer => pb::TokenRole::Viewer,
        Role::Operator => pb::TokenRole::Operator,
        Role::Admin => pb::TokenRole::Admin,
    }
}

fn role_from_pb(role: i32) -> Result<Role, Violation> {
    match pb::TokenRole::try_from(role) {
        Ok(pb::TokenRole::Viewer) => Ok(Role::Viewer),
        Ok(pb::TokenRole::Operator) => Ok(Role::Operator),
        Ok(pb::TokenRole::Admin) => Ok(Role::Admin),
        _ => Err(Violation::new("role", "expected VIEWER, OPERATOR or ADMIN")),
    }
}

fn configured_info(token: &OperatorToken) -> pb::OperatorTokenInfo {
    pb::OperatorTokenInfo {
        name: token.name.clone(),
        role: role_to_pb(token.role) as i32,
        workspace: token.workspace.clone().unwrap_or_default(),
        source: "config".into(),
        created_at: None,
        created_by: String::new(),
    }
}

fn stored_info(record: &TokenRecord) -> pb::OperatorTokenInfo {
    pb::OperatorTokenInfo {
        name: record.name.clone(),
        role: Role::parse(&record.role).map_or(pb::TokenRole::Unspecified, role_to_pb) as i32,
        workspace: record.workspace.clone().unwrap_or_default(),
        source: "store".into(),
        created_at: Some(wire::timestamp(record.created_at)),
        created_by: record.created_by.clone(),
    }
}

pub(super) async fn create(
    store: &Store,
    configured: &[OperatorToken],
    who: &Principal,
    req: &pb::CreateTokenRequest,
) -> Result<pb::CreateTokenResponse, Status> {
    let mut violations = Vec::new();
    if let Err(v) = openshell_core::validate_name("name", &req.name) {
        violations.push(v);
    }
    let role = role_from_pb(req.role).map_err(|v| violations.push(v)).ok();
    if !req.workspace.is_empty()
        && let Err(v) = openshell_core::validate_name("workspace", &req.workspace)
    {
        violations.push(v);
    }
    let Some(role) = role.filter(|_| violations.is_empty()) else {
        return Err(GatewayError::from_violations(violations).into());
    };
    if configured.iter().any(|t| t.name == req.name) {
        return Err(GatewayError::AlreadyExists(format!(
            "token {:?} is configured in the gateway configuration; choose another name",
            req.name
        ))
        .into());
    }
    let secret = Secret::new(format!("{TOKEN_PREFIX}{}", Secret::generate().expose()));
    let workspace = Some(req.workspace.as_str()).filter(|w| !w.is_empty());
    let record = store
        .insert_token(
            &req.name,
            &hash_credential(secret.expose()),
            role.as_str(),
            workspace,
            &who.name,
        )
        .await
        .map_err(GatewayError::from)?;
    tracing::info!(token = %record.name, role = %record.role, workspace = ?record.workspace,
        caller = %who.name, "operator token created");
    Ok(pb::CreateTokenResponse {
        token: Some(stored_info(&record)),
        secret: secret.expose().to_string(),
    })
}

pub(super) async fn list(
    store: &Store,
    configured: &[OperatorToken],
) -> Result<pb::ListTokensResponse, Status> {
    let mut tokens: Vec<pb::OperatorTokenInfo> = configured.iter().map(configured_info).collect();
    tokens.sort_by(|a, b| a.name.cmp(&b.name));
    let stored = store.list_tokens().await.map_err(GatewayError::from)?;
    tokens.extend(stored.iter().map(stored_info));
    Ok(pb::ListTokensResponse { tokens })
}

pub(super) async fn revoke(
    store: &Store,
    configured: &[OperatorToken],
    who: &Principal,
    req: &pb::RevokeTokenRequest,
) -> Result<pb::RevokeTokenResponse, Status> {
    if req.name.is_empty() {
        return Err(GatewayError::invalid("name", "a token name is required").into());
    }
    if configured.iter().any(|t| t.name == req.name) {
        return Err(GatewayError::FailedPrecondition(format!(
            "token {:?} comes from the gateway configuration: remove it there and restart the gateway",
            req.name
        ))
        .into());
    }
    let record = store
        .delete_token(&req.name)
        .await
        .map_err(GatewayError::from)?;
    tracing::info!(token = %record.name, caller = %who.name, "operator token revoked");
    Ok(pb::RevokeTokenResponse {
        token: Some(stored_info(&record)),
    })
}
