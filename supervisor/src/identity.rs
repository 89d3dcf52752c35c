//! Who this supervisor is: its sandbox id and the credential issued at sandbox creation.

use std::path::{Path, PathBuf};

use openshell_core::Secret;
use openshell_proto::v1::SupervisorIdentity;

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
        Ok(Self::new(sandbox_id, credential))
    }

    /// The identity as the wire carries it. The result holds the credential in plain text, so
    /// it goes straight into a request and is never logged.
    pub fn to_proto(&self) -> SupervisorIdentity {
        SupervisorIdentity {
            sandbox_id: self.sandbox_id.clone(),
            credential: self.credential.expose().to_string(),
        }
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
        assert_eq!(id.to_proto().credential, "tok-123");
        assert!(!format!("{id:?}").contains("tok-123"));
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
}
