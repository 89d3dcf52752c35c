//! Who this supervisor is: its sandbox id and the credential issued at sandbox creation.
//!
//! The credential travels only as `authorization: Bearer <credential>` metadata, attached to
//! every call by [`crate::client`]'s interceptor; requests name the sandbox by id and carry no
//! secret, so no message the supervisor builds or logs can hold the credential.

use std::path::{Path, PathBuf};

use openshell_core::Secret;
use openshell_proto::sandbox::v1::GetSandboxConfigRequest;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};

use crate::args::Args;
use crate::backoff::{Backoff, BackoffConfig};
use crate::error::SupervisorError;

/// The sandbox id and its supervisor credential. `Debug` never shows the credential.
#[derive(Debug, Clone)]
pub struct Identity {
    pub sandbox_id: String,
    pub credential: Secret,
}

/// Why the credential file could not be used. Never carries the file's content.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read credential file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("credential file {path} is empty")]
    Empty { path: PathBuf },
    #[error("sandbox id is empty")]
    NoSandbox,
    /// The credential cannot travel in an `authorization` header (a control character or a
    /// non-ASCII byte, say). Which character is not said: it is part of the secret.
    #[error("the supervisor credential holds characters an authorization header cannot carry")]
    CredentialNotHeaderSafe,
}

impl Identity {
    pub fn new(sandbox_id: impl Into<String>, credential: Secret) -> Self {
        Self {
            sandbox_id: sandbox_id.into(),
            credential,
        }
    }

    /// Reads the credential from a file; surrounding whitespace (a trailing newline written by
    /// `echo` or a secret mount) is not part of it.
    pub fn from_credential_file(
        sandbox_id: impl Into<String>,
        path: &Path,
    ) -> Result<Self, IdentityError> {
        let sandbox_id = sandbox_id.into();
        if sandbox_id.trim().is_empty() {
            return Err(IdentityError::NoSandbox);
        }
        let raw =
            Secret::new(
                std::fs::read_to_string(path).map_err(|source| IdentityError::Read {
                    path: path.to_path_buf(),
                    source,
                })?,
            );
        let credential = Secret::new(raw.expose().trim());
        if credential.is_empty() {
            return Err(IdentityError::Empty {
                path: path.to_path_buf(),
            });
        }
        let identity = Self::new(sandbox_id, credential);
        // Checked here too, so the binary refuses a bad file at start instead of at its first
        // call.
        identity.authorization()?;
        Ok(identity)
    }

    /// The `authorization` metadata value every supervisor call carries. Marked sensitive:
    /// its `Debug` prints `Sensitive` and HTTP/2 sends it never-indexed, so neither a log of
    /// the request nor a proxy's header table keeps the credential.
    pub fn authorization(&self) -> Result<AsciiMetadataValue, IdentityError> {
        let mut value = MetadataValue::try_from(format!("Bearer {}", self.credential.expose()))
            .map_err(|_| IdentityError::CredentialNotHeaderSafe)?;
        // The header type takes bytes above 127 too, but a gateway reads the header as
        // visible ASCII: such a credential would be refused there as if none were sent.
        if value.to_str().is_err() {
            return Err(IdentityError::CredentialNotHeaderSafe);
        }
        value.set_sensitive(true);
        Ok(value)
    }
}

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
    let mut client = crate::client::client(channel, &identity)?;
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
    let channel = crate::client::lazy_channel(gateway, ca_pem.as_deref(), RESOLVE_CONNECT_TIMEOUT)?;
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
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

    #[test]
    fn reads_and_trims_credential_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::write(&path, "  tok-123\n").unwrap();
        let id = Identity::from_credential_file("sb-1", &path).unwrap();
        assert_eq!(id.credential.expose(), "tok-123");
        let header = id.authorization().unwrap();
        assert_eq!(header.to_str().unwrap(), "Bearer tok-123");
        assert!(header.is_sensitive());
        assert!(!format!("{id:?}").contains("tok-123"));
        assert!(!format!("{header:?}").contains("tok-123"), "{header:?}");
    }

    #[test]
    fn empty_or_missing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(
            Identity::from_credential_file("sb-1", &path),
            Err(IdentityError::Empty { .. })
        ));
        assert!(matches!(
            Identity::from_credential_file("sb-1", &dir.path().join("nope")),
            Err(IdentityError::Read { .. })
        ));
        assert!(matches!(
            Identity::from_credential_file(" ", &path),
            Err(IdentityError::NoSandbox)
        ));
    }

    #[test]
    fn a_credential_no_header_can_carry_is_refused_without_showing_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        for credential in ["tok\u{7f}secret", "tok-sécret"] {
            std::fs::write(&path, format!("{credential}\n")).unwrap();
            let err = Identity::from_credential_file("sb-1", &path).unwrap_err();
            assert!(matches!(err, IdentityError::CredentialNotHeaderSafe));
            assert!(!err.to_string().contains("ecret"), "{err}");
        }
    }
}
