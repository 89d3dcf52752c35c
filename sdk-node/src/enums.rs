//! The contract's enums as JS string unions, spelled exactly as the sdk
//! serializes them (`'APPLIED'`, `'WAIT_FOR_APPLY'`), so JSON printed by the
//! CLI and objects returned here compare equal.
//!
//! The variant lists below are napi's to turn into TypeScript; `mirror!`
//! ties each one to the sdk's at compile time, and `contractEnums()` and
//! `terminalOperationStates()` export the sdk's lists and terminal rule, which
//! `test/enums.test.mjs` holds the exported enums (and the docs) to.

use napi_derive::napi;
use openshell_sdk as sdk;

/// State of a durable operation. `APPLIED`, `FAILED`, `SUPERSEDED`,
/// `INACTIVE` and `CANCELLED` are terminal and final.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum OperationState {
    Unspecified,
    Pending,
    Delivered,
    Applied,
    Failed,
    Superseded,
    Inactive,
    Cancelled,
}

/// What the supervisor reported for a terminal operation.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum ApplyOutcome {
    Unspecified,
    Applied,
    Duplicate,
    Stale,
    RetainedLocalOverride,
    FailedRetainedLastKnownGood,
    FailedClosed,
    Lifecycle,
    SupersededByNewer,
    ShadowedByGlobal,
}

/// What an operation targets.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum TargetKind {
    Unspecified,
    Sandbox,
    Workspace,
    Global,
    Provider,
}

/// Lifecycle of a sandbox as the gateway records it.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum SandboxLifecycle {
    Unspecified,
    Pending,
    Running,
    Stopped,
    Deleted,
}

/// Scope a setting value belongs to or comes from.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum SettingScope {
    Unspecified,
    Global,
    Workspace,
    Sandbox,
    Default,
}

/// How configuration reaches a supervisor session.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum DeliveryMode {
    Unspecified,
    Poll,
    ShadowPush,
    Push,
}

/// Where a sandbox's effective policy comes from.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum PolicySource {
    Unspecified,
    Sandbox,
    Global,
    Local,
}

/// How `updateConfig` returns: right after commit, or once the operation is
/// terminal or the wait deadline passed.
#[napi(string_enum = "UPPER_SNAKE")]
pub enum UpdateMode {
    CommitOnly,
    WaitForApply,
}

/// Both directions are exhaustive matches, so a variant added to the sdk
/// fails this build instead of silently mapping to `UNSPECIFIED`.
macro_rules! mirror {
    ($name:ident { $($variant:ident),+ $(,)? }) => {
        impl From<sdk::$name> for $name {
            fn from(value: sdk::$name) -> Self {
                match value {
                    $(sdk::$name::$variant => Self::$variant,)+
                }
            }
        }

        impl From<$name> for sdk::$name {
            fn from(value: $name) -> Self {
                match value {
                    $($name::$variant => Self::$variant,)+
                }
            }
        }
    };
}

mirror!(OperationState {
    Unspecified,
    Pending,
    Delivered,
    Applied,
    Failed,
    Superseded,
    Inactive,
    Cancelled,
});
mirror!(ApplyOutcome {
    Unspecified,
    Applied,
    Duplicate,
    Stale,
    RetainedLocalOverride,
    FailedRetainedLastKnownGood,
    FailedClosed,
    Lifecycle,
    SupersededByNewer,
    ShadowedByGlobal,
});
mirror!(TargetKind {
    Unspecified,
    Sandbox,
    Workspace,
    Global,
    Provider,
});
mirror!(SandboxLifecycle {
    Unspecified,
    Pending,
    Running,
    Stopped,
    Deleted,
});
mirror!(SettingScope {
    Unspecified,
    Global,
    Workspace,
    Sandbox,
    Default,
});
mirror!(DeliveryMode {
    Unspecified,
    Poll,
    ShadowPush,
    Push,
});
mirror!(PolicySource {
    Unspecified,
    Sandbox,
    Global,
    Local,
});
mirror!(UpdateMode {
    CommitOnly,
    WaitForApply,
});

/// One contract enum as the Rust core lists it.
#[napi(object)]
pub struct ContractEnum {
    /// The type name, e.g. `OperationState`.
    pub name: String,
    /// The members' wire names, in wire order.
    pub members: Vec<String>,
}

/// The contract's enums as the Rust core defines them, for tests that check
/// the string enums of this package against them.
#[napi]
pub fn contract_enums() -> Vec<ContractEnum> {
    sdk::CONTRACT_ENUMS
        .iter()
        .map(|(name, members)| ContractEnum {
            name: (*name).to_owned(),
            members: members.iter().map(|m| (*m).to_owned()).collect(),
        })
        .collect()
}

/// The operation states an operation never leaves, by the Rust core's rule.
#[napi]
pub fn terminal_operation_states() -> Vec<OperationState> {
    sdk::OperationState::terminal().map(Into::into).collect()
}
