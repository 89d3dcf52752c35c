//! Stored policy revisions of a sandbox.

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::{PolicySource, non_empty};
use crate::timefmt;

/// One stored policy revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRevision {
    /// Sandbox id; `None` for the global policy.
    pub sandbox_id: Option<String>,
    pub revision: u64,
    /// Lowercase hex SHA-256 of the policy's canonical form.
    pub policy_hash: String,
    /// Canonical YAML, accepted unchanged by `update_config`; `None` in history lists.
    pub policy_yaml: Option<String>,
    pub created_at: Option<String>,
    /// Operation that created the revision.
    pub operation_id: Option<String>,
}

/// A history entry, in upstream's layout; the list carries no policy.
impl From<pb::SandboxPolicyRevision> for PolicyRevision {
    fn from(p: pb::SandboxPolicyRevision) -> Self {
        Self {
            sandbox_id: non_empty(p.sandbox_id),
            // An upstream gateway has only the 32-bit version.
            revision: if p.revision == 0 {
                u64::from(p.version)
            } else {
                p.revision
            },
            policy_hash: p.policy_hash,
            policy_yaml: None,
            created_at: timefmt::timestamp(p.created_time),
            operation_id: non_empty(p.operation_id),
        }
    }
}

impl From<pb::PolicyRevision> for PolicyRevision {
    fn from(p: pb::PolicyRevision) -> Self {
        Self {
            sandbox_id: non_empty(p.sandbox_id),
            revision: p.revision,
            policy_hash: p.policy_hash,
            policy_yaml: non_empty(p.policy_yaml),
            created_at: timefmt::timestamp(p.created_at),
            operation_id: non_empty(p.operation_id),
        }
    }
}

/// A sandbox's policy revision together with what is actually in effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// The sandbox's own revision.
    pub policy: PolicyRevision,
    /// `GLOBAL` while a global policy replaces the sandbox's own.
    pub effective_source: PolicySource,
    /// Global policy revision in effect, 0 when none.
    pub global_policy_revision: u64,
}
