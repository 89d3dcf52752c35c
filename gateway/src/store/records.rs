//! What the store hands out: plain records, decoded from rows, with the
//! state enums stored as their lowercase or SCREAMING names.

use std::collections::BTreeMap;

use sqlx::Row;
use sqlx::any::AnyRow;

use super::error::{Result, StoreError};

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Result<Self> {
                match text {
                    $($text => Ok(Self::$variant),)+
                    other => Err(StoreError::Corrupt(format!(
                        concat!("unknown ", stringify!($name), " {:?}"), other
                    ))),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// Lifecycle of a sandbox.
    Lifecycle { Pending => "pending", Running => "running", Stopped => "stopped", Deleted => "deleted" }
}

string_enum! {
    /// State of a durable operation.
    OperationState {
        Pending => "PENDING",
        Delivered => "DELIVERED",
        Applied => "APPLIED",
        Failed => "FAILED",
        Superseded => "SUPERSEDED",
        Inactive => "INACTIVE",
        Cancelled => "CANCELLED",
    }
}

impl OperationState {
    /// Terminal states are final: nothing moves an operation out of them.
    /// Which ones are terminal is the contract's rule, defined once on the
    /// proto enum; this only names the wire state. (Not via `wire.rs`: the
    /// store must not import it, as it imports the store.)
    pub fn is_terminal(self) -> bool {
        use openshell_proto::v1::OperationState as Wire;
        match self {
            Self::Pending => Wire::Pending,
            Self::Delivered => Wire::Delivered,
            Self::Applied => Wire::Applied,
            Self::Failed => Wire::Failed,
            Self::Superseded => Wire::Superseded,
            Self::Inactive => Wire::Inactive,
            Self::Cancelled => Wire::Cancelled,
        }
        .is_terminal()
    }
}

string_enum! {
    /// What a supervisor (or a lifecycle change) reported for a terminal operation.
    Outcome {
        None => "",
        Applied => "APPLIED",
        Duplicate => "DUPLICATE",
        Stale => "STALE",
        RetainedLocalOverride => "RETAINED_LOCAL_OVERRIDE",
        FailedRetainedLastKnownGood => "FAILED_RETAINED_LAST_KNOWN_GOOD",
        FailedClosed => "FAILED_CLOSED",
        Lifecycle => "LIFECYCLE",
        SupersededByNewer => "SUPERSEDED_BY_NEWER",
        ShadowedByGlobal => "SHADOWED_BY_GLOBAL",
    }
}

string_enum! {
    /// What an operation targets.
    TargetKind { Sandbox => "sandbox", Workspace => "workspace", Global => "global", Provider => "provider" }
}

/// A sandbox as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRecord {
    pub id: String,
    pub name: String,
    pub workspace: String,
    pub lifecycle: Lifecycle,
    pub policy_revision: u64,
    pub settings_revision: u64,
    pub attachment_epoch: u64,
    pub providers: Vec<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One stored sandbox policy revision.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRevisionRecord {
    pub sandbox_id: String,
    pub revision: u64,
    pub policy_hash: String,
    pub policy_json: String,
    pub operation_id: Option<String>,
    pub created_at: i64,
}

/// The global policy in effect, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalPolicyRecord {
    pub revision: u64,
    pub policy_hash: String,
    pub policy_json: String,
}

/// Per-target counts of a fleet operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetCounts {
    pub targets: u32,
    pub applied: u32,
    pub failed: u32,
    pub pending: u32,
    pub inactive: u32,
    pub superseded: u32,
    pub cancelled: u32,
    /// Targets are still being listed: `targets` may grow, and the
    /// operation cannot end until the listing is done.
    pub listing: bool,
}

/// A durable operation as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationRecord {
    pub id: String,
    pub target_kind: TargetKind,
    pub target: String,
    pub sandbox_id: Option<String>,
    pub state: OperationState,
    pub outcome: Outcome,
    pub error: String,
    pub policy_revision: u64,
    pub settings_revision: u64,
    pub global_policy_revision: u64,
    pub no_op: bool,
    pub touches_policy: bool,
    pub caller: String,
    pub idempotency_key: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
    pub fleet: Option<FleetCounts>,
    /// Set for an attach or detach: the provider environment revision it tracks.
    pub provider_env_revision: Option<String>,
}

/// A provider as stored; credential values stay sealed.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRecord {
    pub id: String,
    pub name: String,
    pub workspace: String,
    pub provider_type: String,
    pub env: BTreeMap<String, String>,
    pub credential_names: Vec<String>,
    pub revision: u64,
    pub expires_at: Option<i64>,
    /// Expiry of single credential values (ms since the epoch), by name.
    pub value_expires_at: BTreeMap<String, i64>,
    pub attached_sandbox_ids: Vec<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl ProviderRecord {
    /// When a credential stops being valid: its own expiry or the provider's,
    /// whichever comes first.
    pub fn credential_expires_at(&self, name: &str) -> Option<i64> {
        match (self.value_expires_at.get(name).copied(), self.expires_at) {
            (Some(value), Some(provider)) => Some(value.min(provider)),
            (value, provider) => value.or(provider),
        }
    }

    /// The first time any of its credentials expires.
    pub fn earliest_credential_expiry(&self) -> Option<i64> {
        self.credential_names
            .iter()
            .filter_map(|name| self.credential_expires_at(name))
            .min()
            .or(self.expires_at)
    }

    /// Every environment variable the provider exports, plain and credential.
    pub fn variable_names(&self) -> Vec<&str> {
        self.env
            .keys()
            .map(String::as_str)
            .chain(self.credential_names.iter().map(String::as_str))
            .collect()
    }
}

pub(crate) fn u64_col(row: &AnyRow, col: &str) -> Result<u64> {
    non_negative(row.try_get(col)?, col)
}

fn non_negative(value: i64, col: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative {col}")))
}

/// A sandbox's stored columns, [`super::sandboxes::SANDBOX_COLUMNS`] in
/// order: read from a row, or from the JSON array an aggregated read
/// ([`super::Backend::json_rows`]) gives for them. [`Self::record`] is the
/// one place either becomes a [`SandboxRecord`].
#[derive(Debug, serde::Deserialize)]
pub(crate) struct SandboxColumns {
    id: String,
    name: String,
    workspace: String,
    lifecycle: String,
    policy_revision: i64,
    settings_revision: i64,
    attachment_epoch: i64,
    created_at: i64,
    updated_at: i64,
}

impl SandboxColumns {
    fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(Self {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            workspace: row.try_get("workspace")?,
            lifecycle: row.try_get("lifecycle")?,
            policy_revision: row.try_get("policy_revision")?,
            settings_revision: row.try_get("settings_revision")?,
            attachment_epoch: row.try_get("attachment_epoch")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
        })
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn policy_revision(&self) -> Result<u64> {
        non_negative(self.policy_revision, "policy_revision")
    }

    pub(crate) fn record(&self) -> Result<SandboxRecord> {
        Ok(SandboxRecord {
            id: self.id.clone(),
            name: self.name.clone(),
            workspace: self.workspace.clone(),
            lifecycle: Lifecycle::parse(&self.lifecycle)?,
            policy_revision: self.policy_revision()?,
            settings_revision: non_negative(self.settings_revision, "settings_revision")?,
            attachment_epoch: non_negative(self.attachment_epoch, "attachment_epoch")?,
            providers: Vec::new(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

pub(crate) fn sandbox_from_row(row: &AnyRow) -> Result<SandboxRecord> {
    SandboxColumns::from_row(row)?.record()
}

pub(crate) fn policy_revision_from_row(row: &AnyRow) -> Result<PolicyRevisionRecord> {
    Ok(PolicyRevisionRecord {
        sandbox_id: row.try_get("sandbox_id")?,
        revision: u64_col(row, "revision")?,
        policy_hash: row.try_get("policy_hash")?,
        policy_json: row.try_get("policy_json")?,
        operation_id: row.try_get("operation_id")?,
        created_at: row.try_get("created_at")?,
    })
}

pub(crate) fn operation_from_row(row: &AnyRow) -> Result<OperationRecord> {
    let no_op: i64 = row.try_get("no_op")?;
    let target_kind = TargetKind::parse(&row.try_get::<String, _>("target_kind")?)?;
    Ok(OperationRecord {
        id: row.try_get("id")?,
        target_kind,
        target: row.try_get("target")?,
        sandbox_id: row.try_get("sandbox_id")?,
        state: OperationState::parse(&row.try_get::<String, _>("state")?)?,
        outcome: Outcome::parse(&row.try_get::<String, _>("outcome")?)?,
        error: row.try_get("error")?,
        policy_revision: u64_col(row, "policy_revision")?,
        settings_revision: u64_col(row, "settings_revision")?,
        global_policy_revision: u64_col(row, "global_policy_revision")?,
        no_op: no_op != 0,
        touches_policy: row.try_get::<i64, _>("touches_policy")? != 0,
        caller: row.try_get("caller")?,
        idempotency_key: row.try_get("idempotency_key")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        completed_at: row.try_get("completed_at")?,
        fleet: if target_kind == TargetKind::Sandbox {
            None
        } else {
            Some(fleet_counts_from_row(row)?)
        },
        provider_env_revision: row.try_get("provider_env_revision")?,
    })
}

/// The per-state target counts kept on a fleet operation's row.
pub(crate) fn fleet_counts_from_row(row: &AnyRow) -> Result<FleetCounts> {
    let count = |col: &str| u64_col(row, col).map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    Ok(FleetCounts {
        targets: count("targets_total")?,
        pending: count("targets_pending")?,
        applied: count("targets_applied")?,
        failed: count("targets_failed")?,
        superseded: count("targets_superseded")?,
        inactive: count("targets_inactive")?,
        cancelled: count("targets_cancelled")?,
        listing: row.try_get::<i64, _>("targets_listing")? != 0,
    })
}
