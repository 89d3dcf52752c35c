//! Operator tokens: the configured ones and the ones created through the API.

use std::fmt;

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::{TokenRole, non_empty};
use crate::timefmt;

/// An operator token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// The caller recorded on the operations the token makes.
    pub name: String,
    pub role: TokenRole,
    /// The only workspace the token may touch; `None`: every workspace.
    pub workspace: Option<String>,
    /// `"config"` (the gateway configuration) or `"store"` (created through the API).
    pub source: String,
    /// `None` for configured tokens.
    pub created_at: Option<String>,
    /// The token that created it; `None` for configured tokens.
    pub created_by: Option<String>,
}

impl From<pb::OperatorTokenInfo> for TokenInfo {
    fn from(p: pb::OperatorTokenInfo) -> Self {
        Self {
            name: p.name,
            role: TokenRole::from(p.role),
            workspace: non_empty(p.workspace),
            source: p.source,
            created_at: timefmt::timestamp(p.created_at),
            created_by: non_empty(p.created_by),
        }
    }
}

/// A token's secret, returned once when it is created. It serializes, since
/// the caller needs it, but `Debug` redacts it so logs never hold it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TokenSecret(String);

impl TokenSecret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret, to send as `authorization: Bearer <secret>`.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(***)")
    }
}

/// What `create_token` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedToken {
    pub token: TokenInfo,
    /// The only copy of the secret: the gateway keeps its hash.
    pub secret: TokenSecret,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_serializes_but_never_shows_in_debug() {
        let created = CreatedToken {
            token: TokenInfo::from(pb::OperatorTokenInfo {
                name: "ci".into(),
                role: pb::TokenRole::Viewer as i32,
                ..Default::default()
            }),
            secret: TokenSecret::new("ost_do-not-print"),
        };
        assert!(!format!("{created:?}").contains("do-not-print"));
        let json = serde_json::to_string(&created).unwrap();
        assert!(json.contains("ost_do-not-print"), "{json}");
        assert!(json.contains("\"role\":\"VIEWER\""), "{json}");
        assert!(json.contains("\"workspace\":null"), "{json}");
    }
}
