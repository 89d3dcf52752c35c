//! Serde view types: the stable JSON/YAML shape of every object the API
//! returns, shared by the CLI's `-o json|yaml` and the language bindings.
//!
//! Conventions: snake_case fields; enums as their `SCREAMING_SNAKE_CASE`
//! names; timestamps as RFC 3339 strings with milliseconds; strings the wire
//! leaves empty to mean "none" become `null`, so absence is explicit.

mod enums;
mod gateway;
mod logs;
mod operation;
mod policy;
mod provider;
mod sandbox;
mod session;
mod settings;
mod token;

pub use enums::{
    ApplyOutcome, CONTRACT_ENUMS, DeliveryMode, OperationState, ParseEnumError, PolicySource,
    SandboxLifecycle, SettingScope, TargetKind, TokenRole, UpdateMode,
};
pub use gateway::GatewayInfo;
pub use logs::{LogQuery, SandboxLogEvent, SandboxLogLine, SandboxLogs};
pub use operation::{
    FleetProgress, Operation, OperationTarget, OperationTargets, PolicyChange, PolicyDiff,
    SettingDiff, UpdateResult,
};
pub use policy::{PolicyRevision, SandboxPolicy};
pub use provider::{Provider, ProviderWrite};
pub(crate) use sandbox::workspace_selector;
pub use sandbox::{
    Attachment, CreatedSandbox, DeletedSandbox, Sandbox, SandboxRef, SupervisorCredential,
};
pub use session::{
    ComponentDelivery, CredentialExpiry, DeliveryEvent, MiddlewareReadiness, RuntimeReadiness,
    SessionInspection, SessionSummary,
};
pub use settings::{ScopeSettings, Setting, SettingDefinition, SettingValue};
pub use token::{CreatedToken, TokenInfo, TokenSecret};

/// The wire uses empty strings for "not set"; views say so with `None`.
pub(crate) fn non_empty(value: String) -> Option<String> {
    if value.is_empty() { None } else { Some(value) }
}
