//! Who this supervisor is: its sandbox id and the credential issued at sandbox creation.
//!
//! The credential travels only as `authorization: Bearer <credential>` metadata, attached to
//! every call by [`crate::client`]'s interceptor; requests name the sandbox by id and carry no
//! secret, so no message the supervisor builds or logs can hold the credential.

use std::path::{Path, PathBuf};

use openshell_core::Secret;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};

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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

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
