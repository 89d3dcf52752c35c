//! Secrets at rest: provider credentials are sealed with XChaCha20-Poly1305,
//! supervisor credentials are stored only as SHA-256 hashes.
//!
//! The sealing key comes from configuration, or from a key file generated
//! with mode 0600 in the data dir. Replicas sharing PostgreSQL must share
//! the key, so they need it from configuration.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use openshell_core::Secret;
use rand::RngCore;
use sha2::{Digest, Sha256};

const NONCE_LEN: usize = 24;
const KEY_FILE: &str = "credential.key";

/// Why a key could not be loaded or a box opened.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("credential key must be base64 of exactly 32 bytes")]
    BadKey,
    #[error("cannot use key file {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error("a sealed credential box could not be opened (wrong credential key?)")]
    Open,
    #[error("credential sealing failed")]
    Seal,
}

/// Seals and opens provider credential sets.
#[derive(Clone)]
pub struct CredentialCipher {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for CredentialCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialCipher(***)")
    }
}

impl CredentialCipher {
    /// Uses the configured key, or loads (creating on first use) the key file in `data_dir`.
    pub fn load(configured: Option<&Secret>, data_dir: &Path) -> Result<Self, CryptoError> {
        let key = match configured {
            Some(secret) => decode_key(secret.expose())?,
            None => load_or_create_key_file(&data_dir.join(KEY_FILE))?,
        };
        Ok(Self {
            cipher: XChaCha20Poly1305::new((&key).into()),
        })
    }

    /// Seals a credential set as `nonce || ciphertext`.
    pub fn seal(&self, values: &BTreeMap<String, Secret>) -> Result<Vec<u8>, CryptoError> {
        let plain: BTreeMap<&str, &str> = values
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        let plaintext = serde_json::to_vec(&plain).map_err(|_| CryptoError::Seal)?;
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let ciphertext = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), plaintext.as_slice())
            .map_err(|_| CryptoError::Seal)?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&ciphertext);
        Ok(sealed)
    }

    /// Opens a box made by [`seal`](Self::seal).
    pub fn open(&self, sealed: &[u8]) -> Result<BTreeMap<String, Secret>, CryptoError> {
        if sealed.len() < NONCE_LEN {
            return Err(CryptoError::Open);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let plaintext = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), ciphertext)
            .map_err(|_| CryptoError::Open)?;
        let values: BTreeMap<String, String> =
            serde_json::from_slice(&plaintext).map_err(|_| CryptoError::Open)?;
        Ok(values
            .into_iter()
            .map(|(k, v)| (k, Secret::new(v)))
            .collect())
    }
}

fn decode_key(text: &str) -> Result<[u8; 32], CryptoError> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|_| CryptoError::BadKey)?;
    bytes.try_into().map_err(|_| CryptoError::BadKey)
}

fn load_or_create_key_file(path: &Path) -> Result<[u8; 32], CryptoError> {
    let io_err = |source| CryptoError::KeyFile {
        path: path.display().to_string(),
        source,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => decode_key(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; 32];
            rand::rng().fill_bytes(&mut key);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io_err)?;
            }
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let mut file = options.open(path).map_err(io_err)?;
            file.write_all(STANDARD.encode(key).as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(io_err)?;
            Ok(key)
        }
        Err(e) => Err(io_err(e)),
    }
}

/// A new supervisor credential: 32 random bytes, URL-safe base64, with a recognisable prefix.
pub fn new_supervisor_credential() -> Secret {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    Secret::new(format!("osc_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// The stored form of a supervisor credential. Credentials are 256-bit random,
/// so a fast hash is enough: there is nothing to brute-force.
pub fn hash_credential(credential: &str) -> String {
    hex::encode(Sha256::digest(credential.as_bytes()))
}

/// Compares without leaking where the first difference is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_tamper_detection() {
        let dir = tempfile::tempdir().unwrap();
        let cipher = CredentialCipher::load(None, dir.path()).unwrap();
        let mut values = BTreeMap::new();
        values.insert("TOKEN".to_string(), Secret::new("s3cr3t-value"));
        let mut sealed = cipher.seal(&values).unwrap();
        assert!(!String::from_utf8_lossy(&sealed).contains("s3cr3t-value"));
        let opened = cipher.open(&sealed).unwrap();
        assert_eq!(opened["TOKEN"].expose(), "s3cr3t-value");
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert!(matches!(cipher.open(&sealed), Err(CryptoError::Open)));
    }

    #[cfg(unix)]
    #[test]
    fn generated_key_file_is_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = CredentialCipher::load(None, dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut values = BTreeMap::new();
        values.insert("K".to_string(), Secret::new("v"));
        let sealed = first.seal(&values).unwrap();
        let second = CredentialCipher::load(None, dir.path()).unwrap();
        assert_eq!(second.open(&sealed).unwrap()["K"].expose(), "v");
    }

    #[test]
    fn configured_key_must_be_32_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let short = Secret::new(STANDARD.encode([1u8; 16]));
        assert!(matches!(
            CredentialCipher::load(Some(&short), dir.path()),
            Err(CryptoError::BadKey)
        ));
    }
}
