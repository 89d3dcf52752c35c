//! Supervisor authentication: the per-sandbox credential issued at
//! creation, compared with its stored hash. A credential only ever opens
//! its own sandbox.

use openshell_proto::v1 as pb;
use tonic::Status;

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

/// Checks an identity and returns the live sandbox it names.
pub async fn authenticate(
    store: &Store,
    identity: Option<&pb::SupervisorIdentity>,
) -> Result<SandboxRecord, Refusal> {
    let Some(identity) = identity.filter(|i| !i.sandbox_id.is_empty()) else {
        return Err(Refusal {
            reason: "the supervisor identity (sandbox id and credential) is missing".into(),
            permanent: true,
        });
    };
    let unknown = || Refusal {
        reason: format!(
            "credential is not valid for sandbox {}; use the credential issued when the sandbox was created",
            identity.sandbox_id
        ),
        permanent: true,
    };
    let stored = match store.sandbox_credential_hash(&identity.sandbox_id).await {
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
    let presented = hash_credential(&identity.credential);
    if !constant_time_eq(stored.as_bytes(), presented.as_bytes()) {
        return Err(unknown());
    }
    let sandbox = store
        .get_sandbox(&identity.sandbox_id)
        .await
        .map_err(|e| match e {
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
