//! Sandbox lifecycle writes: create (issuing the supervisor credential),
//! stop, start and delete, each resolving the operations it makes moot.

use openshell_core::Secret;
use openshell_core::names::validate_name;

use crate::config_update::write_sandbox_policy;
use crate::crypto::{hash_credential, new_supervisor_credential};
use crate::delivery::{Component, Publication};
use crate::error::{GatewayError, Result};
use crate::store::{
    Lifecycle, NewOperation, OperationRecord, OperationState, SandboxRecord, Store, TargetKind,
    new_id,
};

pub const DEFAULT_WORKSPACE: &str = "default";

/// A created sandbox with its one-time credential.
#[derive(Debug)]
pub struct CreatedSandbox {
    pub sandbox: SandboxRecord,
    pub credential: Secret,
    pub operation: Option<OperationRecord>,
}

pub fn workspace_or_default(workspace: &str) -> &str {
    if workspace.is_empty() {
        DEFAULT_WORKSPACE
    } else {
        workspace
    }
}

/// The sandbox a request names: an id (any lifecycle) or a live sandbox's name in
/// `workspace`.
pub async fn resolve_sandbox(
    store: &Store,
    id_or_name: &str,
    workspace: &str,
) -> Result<SandboxRecord> {
    require_sandbox_reference(id_or_name)?;
    Ok(store.resolve_sandbox(id_or_name, workspace).await?)
}

/// The sandbox id a request names, for a write that reads the sandbox in its own
/// transaction (see [`Store::resolve_sandbox_id`]).
pub async fn resolve_sandbox_id(
    store: &Store,
    id_or_name: &str,
    workspace: &str,
) -> Result<String> {
    require_sandbox_reference(id_or_name)?;
    Ok(store.resolve_sandbox_id(id_or_name, workspace).await?)
}

/// An empty reference is a malformed request, not a name that is missing.
fn require_sandbox_reference(id_or_name: &str) -> Result<()> {
    if id_or_name.is_empty() {
        return Err(GatewayError::invalid(
            "sandbox",
            "a sandbox id or name is required",
        ));
    }
    Ok(())
}

pub async fn create_sandbox(
    store: &Store,
    name: &str,
    workspace: &str,
    policy: Option<&str>,
    caller: &str,
) -> Result<CreatedSandbox> {
    let workspace = workspace_or_default(workspace);
    let mut violations = Vec::new();
    if let Err(v) = validate_name("name", name) {
        violations.push(v);
    }
    if let Err(v) = validate_name("workspace", workspace) {
        violations.push(v);
    }
    let policy = match policy.filter(|p| !p.trim().is_empty()) {
        Some(text) => {
            match crate::policy_parse::parse_and_validate_untrusted(text.to_owned()).await {
                Ok(p) => Some(p),
                Err(e) => {
                    violations.extend(e.violations().into_iter().map(|mut v| {
                        v.field = if v.field.is_empty() {
                            "policy".into()
                        } else {
                            format!("policy.{}", v.field)
                        };
                        v
                    }));
                    None
                }
            }
        }
        None => None,
    };
    if !violations.is_empty() {
        return Err(GatewayError::from_violations(violations));
    }
    let credential = new_supervisor_credential();
    let id = new_id("sb");
    let mut tx = store.begin_write().await?;
    tx.ensure_workspace(workspace).await?;
    let mut sandbox = tx
        .insert_sandbox(&id, name, workspace, &hash_credential(credential.expose()))
        .await?;
    let mut operation = None;
    if let Some(policy) = &policy {
        let op_id = new_id("op");
        let written = write_sandbox_policy(&mut tx, &sandbox, None, policy, &op_id).await?;
        sandbox.policy_revision = written.revision.map_or(0, |(revision, _)| revision);
        let inserted = tx
            .insert_operation(&NewOperation {
                id: op_id,
                target_kind: TargetKind::Sandbox,
                target: id.clone(),
                sandbox_id: Some(id.clone()),
                policy_revision: sandbox.policy_revision,
                settings_revision: 0,
                global_policy_revision: None,
                no_op: false,
                touches_policy: true,
                caller: caller.to_string(),
                idempotency_key: None,
                request_fingerprint: None,
                idempotency_expires_at: None,
                provider_env_revision: None,
            })
            .await?;
        operation = Some(inserted);
    }
    tx.commit().await?;
    Ok(CreatedSandbox {
        sandbox,
        credential,
        operation,
    })
}

/// Deletes a sandbox: detaches its providers and cancels its live operations.
/// Deletes a sandbox: its pending operations end CANCELLED, and the publication it records
/// makes the replica that holds its session (if another) close it.
pub async fn delete_sandbox(
    store: &Store,
    sandbox: &SandboxRecord,
) -> Result<(SandboxRecord, u64, Publication)> {
    let mut tx = store.begin_write().await?;
    let current = tx.lock_sandbox(&sandbox.id).await?;
    if current.lifecycle == Lifecycle::Deleted {
        return Err(GatewayError::NotFound(format!(
            "sandbox {} was already deleted",
            sandbox.id
        )));
    }
    tx.set_lifecycle(&sandbox.id, Lifecycle::Deleted).await?;
    tx.detach_all(&sandbox.id).await?;
    let cancelled = tx
        .resolve_live_operations_for_lifecycle(
            &sandbox.id,
            OperationState::Cancelled,
            "sandbox was deleted before the change was applied",
        )
        .await?;
    let publication = Publication::sandbox(&sandbox.id, &Component::ALL);
    publication.record(&mut tx, None).await?;
    tx.commit().await?;
    Ok((
        store.get_sandbox(&sandbox.id).await?,
        cancelled,
        publication,
    ))
}

/// Stops (pending operations end INACTIVE) or restarts a sandbox.
pub async fn set_lifecycle(
    store: &Store,
    sandbox: &SandboxRecord,
    wanted: Lifecycle,
) -> Result<LifecycleChange> {
    if !matches!(wanted, Lifecycle::Stopped | Lifecycle::Pending) {
        return Err(GatewayError::invalid(
            "lifecycle",
            "only STOPPED or PENDING (start) can be requested; RUNNING is set when a supervisor bootstraps",
        ));
    }
    let mut tx = store.begin_write().await?;
    let current = tx.lock_sandbox(&sandbox.id).await?;
    if current.lifecycle == Lifecycle::Deleted {
        return Err(GatewayError::NotFound(format!(
            "sandbox {} was deleted",
            sandbox.id
        )));
    }
    let unchanged = current.lifecycle == wanted
        || (wanted == Lifecycle::Pending && current.lifecycle == Lifecycle::Running);
    // A stop or start changes what the sandbox's session may be sent: its owner rebuilds.
    let publication = (!unchanged).then(|| Publication::sandbox(&sandbox.id, &Component::ALL));
    if let Some(publication) = &publication {
        tx.set_lifecycle(&sandbox.id, wanted).await?;
        if wanted == Lifecycle::Stopped {
            tx.resolve_live_operations_for_lifecycle(
                &sandbox.id,
                OperationState::Inactive,
                "sandbox was stopped; the change is not in effect",
            )
            .await?;
        }
        publication.record(&mut tx, None).await?;
    }
    tx.commit().await?;
    Ok(LifecycleChange {
        sandbox: store.get_sandbox(&sandbox.id).await?,
        publication,
    })
}

/// A sandbox after a stop or start, and the publication the change made (None: unchanged).
#[derive(Debug)]
pub struct LifecycleChange {
    pub sandbox: SandboxRecord,
    pub publication: Option<Publication>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::sqlite_for_tests;

    /// An empty reference is bad input, not a sandbox that is missing, whichever way the
    /// request resolves it.
    #[tokio::test]
    async fn an_empty_sandbox_reference_is_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let statuses = [
            resolve_sandbox(&store, "", "default").await.unwrap_err(),
            resolve_sandbox_id(&store, "", "default").await.unwrap_err(),
        ]
        .map(tonic::Status::from);
        for status in statuses {
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert_eq!(
                status.message(),
                "sandbox: a sandbox id or name is required"
            );
        }
    }
}
