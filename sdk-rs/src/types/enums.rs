//! The contract's enums as view types: serialized as `SCREAMING_SNAKE_CASE`
//! names without the proto prefix (`"PENDING"`, not `"OPERATION_STATE_PENDING"`),
//! and converted to and from the wire `i32` without ever failing, because a
//! newer gateway may send a value this SDK does not know yet.

use std::fmt;
use std::str::FromStr;

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

/// A text that names no variant of the enum it was parsed for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}; expected one of: {}", allowed.join(", "))]
pub struct ParseEnumError {
    pub kind: &'static str,
    pub value: String,
    pub allowed: Vec<&'static str>,
}

/// Case-insensitive, and `-` stands for `_`, so `commit-only` parses as `COMMIT_ONLY`.
fn normalize(text: &str) -> String {
    text.trim().replace('-', "_").to_ascii_uppercase()
}

macro_rules! view_enum {
    (
        $(#[$meta:meta])*
        $name:ident($kind:literal) => pb::$proto:ident, unknown = $unknown:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $pvariant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every variant, in wire order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The serialized name of every variant, in wire order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The serialized name, e.g. `"PENDING"`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl From<pb::$proto> for $name {
            fn from(value: pb::$proto) -> Self {
                match value {
                    $(pb::$proto::$pvariant => Self::$variant,)+
                }
            }
        }

        impl From<$name> for pb::$proto {
            fn from(value: $name) -> Self {
                match value {
                    $($name::$variant => pb::$proto::$pvariant,)+
                }
            }
        }

        impl From<i32> for $name {
            fn from(value: i32) -> Self {
                pb::$proto::try_from(value).map(Self::from).unwrap_or(Self::$unknown)
            }
        }

        impl From<$name> for i32 {
            fn from(value: $name) -> Self {
                pb::$proto::from(value) as i32
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ParseEnumError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                let wanted = normalize(text);
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == wanted)
                    .ok_or_else(|| ParseEnumError {
                        kind: $kind,
                        value: text.to_owned(),
                        allowed: Self::ALL.iter().map(|v| v.as_str()).collect(),
                    })
            }
        }
    };
}

view_enum! {
    /// State of a durable operation. Terminal states are final.
    OperationState("operation state") => pb::OperationState, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        /// Committed; not yet known to be in effect.
        Pending = Pending => "PENDING",
        /// Sent over a push session; not yet acknowledged.
        Delivered = Delivered => "DELIVERED",
        /// The exact revision is in effect.
        Applied = Applied => "APPLIED",
        /// The supervisor rejected it; last-known-good stays active.
        Failed = Failed => "FAILED",
        /// A newer revision was delivered or applied first.
        Superseded = Superseded => "SUPERSEDED",
        /// Not in effect: sandbox stopped, or local policy retained.
        Inactive = Inactive => "INACTIVE",
        /// The sandbox was deleted before the change was applied.
        Cancelled = Cancelled => "CANCELLED",
    }
}

impl OperationState {
    /// True for the final states; a terminal operation never changes again.
    /// The rule is the contract's, defined once on the proto enum.
    pub fn is_terminal(self) -> bool {
        pb::OperationState::from(self).is_terminal()
    }

    /// The terminal states, in wire order.
    pub fn terminal() -> impl Iterator<Item = Self> {
        Self::ALL
            .iter()
            .copied()
            .filter(|state| state.is_terminal())
    }
}

view_enum! {
    /// What the supervisor reported for a terminal operation.
    ApplyOutcome("apply outcome") => pb::ApplyOutcome, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        Applied = Applied => "APPLIED",
        Duplicate = Duplicate => "DUPLICATE",
        Stale = Stale => "STALE",
        RetainedLocalOverride = RetainedLocalOverride => "RETAINED_LOCAL_OVERRIDE",
        FailedRetainedLastKnownGood = FailedRetainedLastKnownGood => "FAILED_RETAINED_LAST_KNOWN_GOOD",
        FailedClosed = FailedClosed => "FAILED_CLOSED",
        /// Resolved by a lifecycle change rather than by the supervisor.
        Lifecycle = Lifecycle => "LIFECYCLE",
        /// Resolved because a newer revision took its place.
        SupersededByNewer = SupersededByNewer => "SUPERSEDED_BY_NEWER",
        /// Not in effect: the global policy replaces the sandbox's.
        ShadowedByGlobal = ShadowedByGlobal => "SHADOWED_BY_GLOBAL",
    }
}

view_enum! {
    /// What an operation targets.
    TargetKind("target kind") => pb::TargetKind, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        Sandbox = Sandbox => "SANDBOX",
        Workspace = Workspace => "WORKSPACE",
        Global = Global => "GLOBAL",
        Provider = Provider => "PROVIDER",
    }
}

view_enum! {
    /// Lifecycle of a sandbox as the gateway records it.
    SandboxLifecycle("sandbox lifecycle") => pb::SandboxLifecycle, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        /// Created; no supervisor has bootstrapped it yet.
        Pending = Pending => "PENDING",
        /// A supervisor applied its configuration and runs the workload.
        Running = Running => "RUNNING",
        /// Stopped by an operator; configuration changes are not in effect.
        Stopped = Stopped => "STOPPED",
        /// Deleted; kept so operations and history stay readable.
        Deleted = Deleted => "DELETED",
    }
}

view_enum! {
    /// Scope a setting value belongs to or comes from.
    SettingScope("setting scope") => pb::SettingScope, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        Global = Global => "GLOBAL",
        Workspace = Workspace => "WORKSPACE",
        Sandbox = Sandbox => "SANDBOX",
        /// No scope set a value; the registry default is in effect.
        Default = Default => "DEFAULT",
    }
}

view_enum! {
    /// How configuration reaches a supervisor session.
    DeliveryMode("delivery mode") => pb::DeliveryMode, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        /// The supervisor polls.
        Poll = Poll => "POLL",
        /// Snapshots are pushed but the supervisor still applies from polls.
        ShadowPush = ShadowPush => "SHADOW_PUSH",
        /// Snapshots are pushed, applied and acknowledged on the stream.
        Push = Push => "PUSH",
    }
}

view_enum! {
    /// Where a sandbox's effective policy comes from.
    PolicySource("policy source") => pb::PolicySource, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        Sandbox = Sandbox => "SANDBOX",
        /// The global policy replaces every sandbox policy while set.
        Global = Global => "GLOBAL",
        /// A local policy file on the supervisor keeps precedence.
        Local = Local => "LOCAL",
    }
}

view_enum! {
    /// What an operator token may do; each role has the rights of the one before it.
    TokenRole("token role") => pb::TokenRole, unknown = Unspecified {
        Unspecified = Unspecified => "UNSPECIFIED",
        /// Reads and follows operations, sessions and logs.
        Viewer = Viewer => "VIEWER",
        /// Also writes sandboxes, their and workspaces' configuration, providers and attachments.
        Operator = Operator => "OPERATOR",
        /// Also writes the global policy and settings and manages tokens.
        Admin = Admin => "ADMIN",
    }
}

/// How `UpdateConfig` returns. The wire's UNSPECIFIED means commit-only, so
/// this enum has no such variant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UpdateMode {
    /// Return right after commit.
    #[default]
    CommitOnly,
    /// Wait server-side until the operation is terminal or the wait deadline.
    WaitForApply,
}

impl UpdateMode {
    pub const ALL: &'static [Self] = &[Self::CommitOnly, Self::WaitForApply];
    pub const NAMES: &'static [&'static str] = &["COMMIT_ONLY", "WAIT_FOR_APPLY"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::CommitOnly => "COMMIT_ONLY",
            Self::WaitForApply => "WAIT_FOR_APPLY",
        }
    }
}

impl From<pb::UpdateMode> for UpdateMode {
    fn from(value: pb::UpdateMode) -> Self {
        match value {
            pb::UpdateMode::Unspecified | pb::UpdateMode::CommitOnly => Self::CommitOnly,
            pb::UpdateMode::WaitForApply => Self::WaitForApply,
        }
    }
}

impl From<UpdateMode> for pb::UpdateMode {
    fn from(value: UpdateMode) -> Self {
        match value {
            UpdateMode::CommitOnly => Self::CommitOnly,
            UpdateMode::WaitForApply => Self::WaitForApply,
        }
    }
}

impl From<i32> for UpdateMode {
    fn from(value: i32) -> Self {
        pb::UpdateMode::try_from(value)
            .map(Self::from)
            .unwrap_or(Self::CommitOnly)
    }
}

impl From<UpdateMode> for i32 {
    fn from(value: UpdateMode) -> Self {
        pb::UpdateMode::from(value) as i32
    }
}

impl fmt::Display for UpdateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for UpdateMode {
    type Err = ParseEnumError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = normalize(text);
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.as_str() == wanted)
            .ok_or_else(|| ParseEnumError {
                kind: "update mode",
                value: text.to_owned(),
                allowed: Self::ALL.iter().map(|v| v.as_str()).collect(),
            })
    }
}

/// Each enum of this module by type name, with its members' serialized names
/// in wire order: what the bindings' enums are held to. Python builds its
/// enum classes from it; Node's napi enums are checked against it by test.
pub const CONTRACT_ENUMS: &[(&str, &[&str])] = &[
    ("OperationState", OperationState::NAMES),
    ("ApplyOutcome", ApplyOutcome::NAMES),
    ("TargetKind", TargetKind::NAMES),
    ("SandboxLifecycle", SandboxLifecycle::NAMES),
    ("SettingScope", SettingScope::NAMES),
    ("DeliveryMode", DeliveryMode::NAMES),
    ("PolicySource", PolicySource::NAMES),
    ("UpdateMode", UpdateMode::NAMES),
];

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn operation_state_round_trips_through_i32() {
        for state in OperationState::ALL {
            let wire: i32 = (*state).into();
            assert_eq!(OperationState::from(wire), *state);
        }
        assert_eq!(
            i32::from(OperationState::Applied),
            pb::OperationState::Applied as i32
        );
        assert_eq!(OperationState::from(99), OperationState::Unspecified);
    }

    #[test]
    fn every_enum_round_trips() {
        for v in ApplyOutcome::ALL {
            assert_eq!(ApplyOutcome::from(i32::from(*v)), *v);
        }
        for v in TargetKind::ALL {
            assert_eq!(TargetKind::from(i32::from(*v)), *v);
        }
        for v in SandboxLifecycle::ALL {
            assert_eq!(SandboxLifecycle::from(i32::from(*v)), *v);
        }
        for v in SettingScope::ALL {
            assert_eq!(SettingScope::from(i32::from(*v)), *v);
        }
        for v in DeliveryMode::ALL {
            assert_eq!(DeliveryMode::from(i32::from(*v)), *v);
        }
        for v in PolicySource::ALL {
            assert_eq!(PolicySource::from(i32::from(*v)), *v);
        }
        for v in UpdateMode::ALL {
            assert_eq!(UpdateMode::from(i32::from(*v)), *v);
        }
    }

    #[test]
    fn wire_values_match_proto() {
        assert_eq!(
            i32::from(ApplyOutcome::FailedRetainedLastKnownGood),
            pb::ApplyOutcome::FailedRetainedLastKnownGood as i32
        );
        assert_eq!(i32::from(DeliveryMode::ShadowPush), 2);
        assert_eq!(i32::from(SandboxLifecycle::Stopped), 3);
        assert_eq!(i32::from(UpdateMode::WaitForApply), 2);
        assert_eq!(UpdateMode::from(0), UpdateMode::CommitOnly);
    }

    #[test]
    fn serializes_as_screaming_names() {
        let json = serde_json::to_string(&OperationState::Pending).unwrap();
        assert_eq!(json, "\"PENDING\"");
        let json = serde_json::to_string(&ApplyOutcome::RetainedLocalOverride).unwrap();
        assert_eq!(json, "\"RETAINED_LOCAL_OVERRIDE\"");
        let json = serde_json::to_string(&UpdateMode::WaitForApply).unwrap();
        assert_eq!(json, "\"WAIT_FOR_APPLY\"");
        let back: DeliveryMode = serde_json::from_str("\"SHADOW_PUSH\"").unwrap();
        assert_eq!(back, DeliveryMode::ShadowPush);
        for v in ApplyOutcome::ALL {
            let json = serde_json::to_string(v).unwrap();
            assert_eq!(json, format!("\"{}\"", v.as_str()));
        }
    }

    #[test]
    fn parses_loosely() {
        assert_eq!(
            "pending".parse::<OperationState>(),
            Ok(OperationState::Pending)
        );
        assert_eq!(
            "commit-only".parse::<UpdateMode>(),
            Ok(UpdateMode::CommitOnly)
        );
        let err = "bogus".parse::<OperationState>().unwrap_err();
        assert!(err.to_string().contains("APPLIED"), "{err}");
    }

    /// The names prost knows for a proto enum, without the enum's prefix
    /// (`OPERATION_STATE_PENDING` is `PENDING`), in wire order.
    macro_rules! proto_names {
        ($proto:ident) => {{
            let prefix = screaming(stringify!($proto));
            (0..)
                .map_while(|n| pb::$proto::try_from(n).ok())
                .map(|v| {
                    v.as_str_name()
                        .strip_prefix(&prefix)
                        .expect("prost names start with the enum's name")
                        .to_owned()
                })
                .collect::<Vec<_>>()
        }};
    }

    /// `OperationState` as protobuf spells enum value prefixes: `OPERATION_STATE_`.
    fn screaming(name: &str) -> String {
        let mut out = String::new();
        for c in name.chars() {
            if c.is_ascii_uppercase() && !out.is_empty() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out.push('_');
        out
    }

    #[test]
    fn contract_enums_name_every_proto_value_in_wire_order() {
        let mut update_modes = proto_names!(UpdateMode);
        // The wire's UNSPECIFIED means commit-only; the SDK has no such mode.
        update_modes.retain(|name| name != "UNSPECIFIED");
        let expected = vec![
            ("OperationState", proto_names!(OperationState)),
            ("ApplyOutcome", proto_names!(ApplyOutcome)),
            ("TargetKind", proto_names!(TargetKind)),
            ("SandboxLifecycle", proto_names!(SandboxLifecycle)),
            ("SettingScope", proto_names!(SettingScope)),
            ("DeliveryMode", proto_names!(DeliveryMode)),
            ("PolicySource", proto_names!(PolicySource)),
            ("UpdateMode", update_modes),
        ];
        let exported: Vec<_> = CONTRACT_ENUMS
            .iter()
            .map(|(name, members)| (*name, members.iter().map(|m| m.to_string()).collect()))
            .collect();
        assert_eq!(exported, expected);
    }

    #[test]
    fn names_are_the_serialized_names() {
        // The macro's enums take both from one literal; UpdateMode spells NAMES out.
        let names: Vec<_> = UpdateMode::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(names, UpdateMode::NAMES);
        let names: Vec<_> = ApplyOutcome::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(names, ApplyOutcome::NAMES);
    }

    #[test]
    fn terminal_states() {
        let terminal: Vec<_> = OperationState::terminal().map(|s| s.as_str()).collect();
        assert_eq!(
            terminal,
            ["APPLIED", "FAILED", "SUPERSEDED", "INACTIVE", "CANCELLED"]
        );
    }
}
