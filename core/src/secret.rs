//! A string that must never reach logs, errors, operations or API responses.

use std::fmt;

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A secret value such as a provider credential or a supervisor token.
///
/// `Debug` and `Display` print a placeholder, and there is deliberately no `Serialize` impl:
/// a struct holding a `Secret` cannot be turned into JSON or YAML by accident. Reading the
/// value takes an explicit [`Secret::expose`] call, which is easy to find in review.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// A fresh random token: 32 bytes from the thread RNG, base64url without padding.
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::random();
        Self(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The secret value. Call sites are the places where the secret leaves this type.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Lowercase hex SHA-256 of the value, so credentials can be stored and compared hashed.
    pub fn sha256_hex(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_string())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl PartialEq for Secret {
    /// Compares without an early exit on the first differing byte, so the time taken does not
    /// reveal how much of a guessed token was right. Only the length can leak.
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl Eq for Secret {}

impl Drop for Secret {
    /// Best effort: overwrite the heap buffer so freed memory does not keep the value.
    fn drop(&mut self) {
        let mut bytes = std::mem::take(&mut self.0).into_bytes();
        bytes.iter_mut().for_each(|b| *b = 0);
        // Keeps the optimiser from treating the writes as dead stores.
        std::hint::black_box(&bytes);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const VALUE: &str = "ghp_supersecretvalue123";

    #[test]
    fn debug_and_display_hide_value() {
        let s = Secret::new(VALUE);
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(format!("{s}"), "***");
        assert_eq!(format!("{s:#?}"), "Secret(***)");
        assert!(!format!("{s:?}{s}{s:#?}").contains(VALUE));
    }

    #[test]
    fn nested_debug_hides_value() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Provider {
            name: String,
            token: Secret,
            tokens: Vec<Secret>,
            maybe: Option<Secret>,
        }
        let p = Provider {
            name: "github".to_string(),
            token: Secret::new(VALUE),
            tokens: vec![Secret::new(VALUE)],
            maybe: Some(Secret::new(VALUE)),
        };
        let out = format!("{p:?} {p:#?}");
        assert!(!out.contains(VALUE), "{out}");
        assert!(out.contains("github"));
        assert!(out.contains("Secret(***)"));
    }

    #[test]
    fn expose_returns_value() {
        assert_eq!(Secret::new(VALUE).expose(), VALUE);
        assert_eq!(Secret::from(VALUE.to_string()).expose(), VALUE);
    }

    #[test]
    fn equality() {
        assert_eq!(Secret::new("abc"), Secret::new("abc"));
        assert_ne!(Secret::new("abc"), Secret::new("abd"));
        assert_ne!(Secret::new("abc"), Secret::new("abcd"));
        assert_eq!(Secret::new(""), Secret::new(""));
    }

    #[test]
    fn deserializes_from_string() {
        let s: Secret = serde_json::from_str(&format!("\"{VALUE}\"")).unwrap();
        assert_eq!(s.expose(), VALUE);

        #[derive(Deserialize, Debug)]
        struct Wrapper {
            token: Secret,
        }
        let w: Wrapper = serde_json::from_str(&format!(r#"{{"token":"{VALUE}"}}"#)).unwrap();
        assert_eq!(w.token.expose(), VALUE);
        assert!(!format!("{w:?}").contains(VALUE));
    }

    #[test]
    fn generate_is_random_and_url_safe() {
        let a = Secret::generate();
        let b = Secret::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 43);
        assert!(
            a.expose()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }

    #[test]
    fn sha256_hex_is_stable() {
        assert_eq!(
            Secret::new("abc").sha256_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
