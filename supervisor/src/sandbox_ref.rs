//! What `--sandbox` names, an id or a name, and turning a name into the sandbox's id with the
//! gateway before anything else uses it.

use std::path::Path;

use openshell_proto::sandbox::v1::GetSandboxConfigRequest;

use crate::args::Args;
use crate::backoff::{Backoff, BackoffConfig};
use crate::client::{client, lazy_channel};
use crate::error::SupervisorError;
use crate::identity::Identity;

/// Whether a `--sandbox` value is an id (`sb-…`); anything else is a name or `WORKSPACE/NAME`.
pub fn is_sandbox_id(reference: &str) -> bool {
    reference.starts_with(SANDBOX_ID_PREFIX)
}

const SANDBOX_ID_PREFIX: &str = "sb-";

/// Turns `--sandbox NAME` or `WORKSPACE/NAME` into the sandbox's id before anything else
/// uses it (the state directory's environment, the snapshots' sandbox check): the gateway
/// answers a configuration request that names the sandbox by name when the credential is
/// that sandbox's, and its answer carries the id. An id is returned as it is, unasked.
///
/// A refusal (the credential is not that sandbox's, the name is unknown) ends the
/// supervisor; anything that can pass (the gateway is down, the sandbox is stopped) is
/// retried with `backoff`, as a session would be.
pub async fn resolve_sandbox_id(
    reference: String,
    credential_file: &Path,
    channel: tonic::transport::Channel,
    backoff: BackoffConfig,
) -> Result<String, SupervisorError> {
    if is_sandbox_id(&reference) {
        return Ok(reference);
    }
    let identity = Identity::from_credential_file(reference.clone(), credential_file)?;
    let mut client = client(channel, &identity)?;
    let mut delays = Backoff::new(backoff);
    loop {
        let request = GetSandboxConfigRequest {
            sandbox_id: reference.clone(),
        };
        match client.get_sandbox_config(request).await {
            Ok(response) => {
                let id = response.into_inner().sandbox_id;
                if is_sandbox_id(&id) {
                    tracing::info!(sandbox = %reference, id = %id, "sandbox name resolved");
                    return Ok(id);
                }
                return Err(SupervisorError::Rejected {
                    reason: format!(
                        "the gateway resolved sandbox {reference:?} to no sandbox id; \
                         pass --sandbox with the sandbox's id (sb-…)"
                    ),
                });
            }
            Err(status) if refusal_is_final(status.code()) => {
                return Err(SupervisorError::Rejected {
                    reason: status.message().to_string(),
                });
            }
            Err(status) => {
                let delay = delays.next_delay();
                tracing::warn!(
                    sandbox = %reference,
                    code = ?status.code(),
                    error = %status.message(),
                    retry_in_ms = delay.as_millis() as u64,
                    "cannot resolve the sandbox name yet"
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The sandbox id `--sandbox` means: as given for an id or in standalone mode, resolved with
/// the gateway (see [`resolve_sandbox_id`]) for a name. `None` without `--sandbox`.
pub async fn sandbox_id_from_args(args: &Args) -> Result<Option<String>, SupervisorError> {
    let reference = match &args.sandbox {
        Some(reference) if !args.standalone && !is_sandbox_id(reference) => reference.clone(),
        other => return Ok(other.clone()),
    };
    let (Some(gateway), Some(credential_file)) = (&args.gateway, &args.credential_file) else {
        // Left for the startup's own check, which names the missing flags.
        return Ok(Some(reference));
    };
    let ca_pem = match &args.ca_file {
        Some(path) => Some(
            std::fs::read(path).map_err(|source| SupervisorError::CaFile {
                path: path.clone(),
                source,
            })?,
        ),
        None => None,
    };
    let channel = lazy_channel(gateway, ca_pem.as_deref(), RESOLVE_CONNECT_TIMEOUT)?;
    resolve_sandbox_id(
        reference,
        credential_file,
        channel,
        BackoffConfig::apply_retry(),
    )
    .await
    .map(Some)
}

/// Bound on connecting for the name lookup, as a session's connect is bounded.
const RESOLVE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Codes no retry can change: the gateway said who this is not.
fn refusal_is_final(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unauthenticated
            | tonic::Code::PermissionDenied
            | tonic::Code::NotFound
            | tonic::Code::InvalidArgument
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_told_from_names() {
        assert!(is_sandbox_id("sb-01a2"));
        assert!(!is_sandbox_id("web"));
        assert!(!is_sandbox_id("team/web"));
        assert!(refusal_is_final(tonic::Code::Unauthenticated));
        assert!(!refusal_is_final(tonic::Code::Unavailable));
        assert!(!refusal_is_final(tonic::Code::FailedPrecondition));
    }
}
