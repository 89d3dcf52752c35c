//! Providers as the operator API shows them: credential names, never values.

use std::collections::BTreeMap;

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::Operation;
use crate::timefmt;

/// A provider record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provider {
    /// `pv-…`.
    pub id: String,
    pub name: String,
    pub workspace: String,
    #[serde(rename = "type")]
    pub provider_type: String,
    /// Plain (non-secret) environment values.
    pub env: BTreeMap<String, String>,
    /// Names of the credential values; the values are never returned.
    pub credential_names: Vec<String>,
    pub revision: u64,
    pub expires_at: Option<String>,
    pub attached_sandbox_ids: Vec<String>,
    /// When it was created, and last written (an update or a credential refresh).
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// When each credential stops being valid, by name: the earlier of its own expiry and the
    /// provider's `expires_at`. A credential that never expires is absent.
    #[serde(default)]
    pub credential_expires_at: BTreeMap<String, String>,
}

impl Provider {
    /// The first time one of its credentials stops being valid: the earliest of
    /// `credential_expires_at` and `expires_at`.
    pub fn earliest_expiry(&self) -> Option<&str> {
        // Every time here has the same fixed-width UTC form, so text order is time order.
        self.credential_expires_at
            .values()
            .chain(self.expires_at.as_ref())
            .map(String::as_str)
            .min()
    }
}

impl From<pb::Provider> for Provider {
    fn from(p: pb::Provider) -> Self {
        Self {
            id: p.id,
            name: p.name,
            workspace: p.workspace,
            provider_type: p.r#type,
            env: p.env.into_iter().collect(),
            credential_names: p.credential_names,
            revision: p.revision,
            expires_at: timefmt::timestamp(p.expires_at),
            attached_sandbox_ids: p.attached_sandbox_ids,
            created_at: timefmt::timestamp(p.created_at),
            updated_at: timefmt::timestamp(p.updated_at),
            credential_expires_at: p
                .credential_expires_at
                .into_iter()
                .filter_map(|(name, at)| Some((name, timefmt::timestamp(Some(at))?)))
                .collect(),
        }
    }
}

/// Result of creating or updating a provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderWrite {
    pub provider: Provider,
    /// Fleet operation over the attaching sandboxes, when any attach it.
    pub operation: Option<Operation>,
}
