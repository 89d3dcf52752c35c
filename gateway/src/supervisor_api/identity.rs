//! Supervisor authentication: the per-sandbox credential issued at
//! creation, presented as `authorization: Bearer <credential>` metadata as
//! upstream supervisors present their token, compared with its stored hash.
//! The request names the sandbox; a credential only ever opens its own.

use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::crypto::{constant_time_eq, hash_credential};
use crate::store::{Lifecycle, SandboxRecord, Store, StoreError};

/// Why a supervisor was turned away; the text is safe to send back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    /// Retrying with the same identity cannot succeed.
    pub permanent: bool,
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Self {
        Status::unauthenticated(r.reason)
    }
}

/// The credential a supervisor call presents, if it presents one.
pub fn presented_credential(metadata: &MetadataMap) -> Option<&str> {
    let header = metadata.get("authorization")?.to_str().ok()?;
    header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|c| !c.is_empty())
}

/// Checks the credential a call presents for the sandbox it names, and
/// returns that live sandbox.
pub async fn authenticate(
    store: &Store,
    sandbox_id: &str,
    metadata: &MetadataMap,
) -> Result<SandboxRecord, Refusal> {
    if sandbox_id.is_empty() {
        return Err(Refusal {
            reason: "sandbox_id is missing: a supervisor names its sandbox by id".into(),
            permanent: true,
        });
    }
    let Some(credential) = presented_credential(metadata) else {
        return Err(Refusal {
            reason: "missing supervisor credential: send `authorization: Bearer <credential>` with the credential issued when the sandbox was created".into(),
            permanent: true,
        });
    };
    let unknown = || Refusal {
        reason: format!(
            "credential is not valid for sandbox {sandbox_id}; use the credential issued when the sandbox was created"
        ),
        permanent: true,
    };
    if !sandbox_id.starts_with("sb-") {
        return authenticate_by_name(store, sandbox_id, credential)
            .await?
            .ok_or_else(unknown);
    }
    authenticate_id(store, sandbox_id, credential).await
}

/// [`authenticate`] for a sandbox named by id.
async fn authenticate_id(
    store: &Store,
    sandbox_id: &str,
    credential: &str,
) -> Result<SandboxRecord, Refusal> {
    let unknown = || Refusal {
        reason: format!(
            "credential is not valid for sandbox {sandbox_id}; use the credential issued when the sandbox was created"
        ),
        permanent: true,
    };
    let stored = match store.sandbox_credential_hash(sandbox_id).await {
        Ok(Some(hash)) => hash,
        Ok(None) => return Err(unknown()),
        Err(e) => {
            tracing::warn!(error = %e, "credential lookup failed");
            return Err(Refusal {
                reason: "the gateway's store is unavailable; retry later".into(),
                permanent: false,
            });
        }
    };
    let presented = hash_credential(credential);
    if !constant_time_eq(stored.as_bytes(), presented.as_bytes()) {
        return Err(unknown());
    }
    let sandbox = store.get_sandbox(sandbox_id).await.map_err(|e| match e {
        StoreError::NotFound(_) => unknown(),
        other => {
            tracing::warn!(error = %other, "sandbox lookup failed");
            Refusal {
                reason: "the gateway's store is unavailable; retry later".into(),
                permanent: false,
            }
        }
    })?;
    if sandbox.lifecycle == Lifecycle::Deleted {
        return Err(Refusal {
            reason: format!("sandbox {} was deleted", sandbox.id),
            permanent: true,
        });
    }
    Ok(sandbox)
}

/// A sandbox named by `NAME` or `WORKSPACE/NAME` instead of its id: the
/// credential picks the sandbox, and the name must be that sandbox's, so a
/// name opens nothing a credential would not. `None` when they disagree.
async fn authenticate_by_name(
    store: &Store,
    reference: &str,
    credential: &str,
) -> Result<Option<SandboxRecord>, Refusal> {
    let id = match store
        .sandbox_id_by_credential_hash(&hash_credential(credential))
        .await
    {
        Ok(Some(id)) => id,
        Ok(None) => return Ok(None),
        Err(e) => {
            tracing::warn!(error = %e, "credential lookup failed");
            return Err(Refusal {
                reason: "the gateway's store is unavailable; retry later".into(),
                permanent: false,
            });
        }
    };
    let sandbox = authenticate_id(store, &id, credential).await?;
    let matches = match reference.split_once('/') {
        Some((workspace, name)) => sandbox.workspace == workspace && sandbox.name == name,
        None => sandbox.name == reference,
    };
    Ok(matches.then_some(sandbox))
}

/// Checks a credential presented without a sandbox id (upstream's
/// `GetGatewayConfig` names none): it must open some live sandbox.
pub async fn authenticate_any(
    store: &Store,
    metadata: &MetadataMap,
) -> Result<SandboxRecord, Refusal> {
    let Some(credential) = presented_credential(metadata) else {
        return authenticate(store, "", metadata).await;
    };
    match store
        .sandbox_id_by_credential_hash(&hash_credential(credential))
        .await
    {
        Ok(Some(sandbox_id)) => authenticate(store, &sandbox_id, metadata).await,
        Ok(None) => Err(Refusal {
            reason: "supervisor credential is not valid; use the credential issued when the sandbox was created".into(),
            permanent: true,
        }),
        Err(e) => {
            tracing::warn!(error = %e, "credential lookup failed");
            Err(Refusal {
                reason: "the gateway's store is unavailable; retry later".into(),
                permanent: false,
            })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::sqlite_for_tests;

    fn bearer(credential: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "authorization",
            format!("Bearer {credential}").parse().unwrap(),
        );
        metadata
    }

    #[tokio::test]
    async fn a_name_opens_only_the_credentials_own_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let mut tx = store.begin_write().await.unwrap();
        tx.ensure_workspace("default").await.unwrap();
        tx.insert_sandbox("sb-1", "web", "default", &hash_credential("cred-web"))
            .await
            .unwrap();
        tx.insert_sandbox("sb-2", "api", "default", &hash_credential("cred-api"))
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let web = bearer("cred-web");
        for name in ["web", "default/web", "sb-1"] {
            let sandbox = authenticate(&store, name, &web).await.unwrap();
            assert_eq!(sandbox.id, "sb-1", "{name}");
        }
        // Another sandbox's name, another workspace, or an unknown credential: refused alike.
        for (name, metadata) in [
            ("api", &web),
            ("default/api", &web),
            ("other/web", &web),
            ("web", &bearer("nobody")),
        ] {
            let refusal = authenticate(&store, name, metadata).await.unwrap_err();
            assert!(refusal.permanent, "{name}");
            assert!(
                refusal
                    .reason
                    .contains(&format!("credential is not valid for sandbox {name}")),
                "{}",
                refusal.reason
            );
        }
    }
}
