//! The OpenShell domain model, shared by the gateway, the supervisor, the CLI and the SDKs.
//!
//! This crate owns the rules every component must agree on:
//!
//! - [`policy`]: the sandbox policy schema (upstream OpenShell shape), parsing from YAML or
//!   JSON, validation with field paths, the canonical form and its hash, which parts of a
//!   policy may change after a sandbox's first revision, and its exact conversion to and from
//!   upstream's typed protobuf message (`openshell.sandbox.v1.SandboxPolicy`);
//! - [`settings`]: the registry of setting keys, their types, defaults and scopes, and how
//!   scoped values resolve to an effective value;
//! - [`secret`] and [`provider`]: credential values that never print, and provider value
//!   classification;
//! - [`nesting`]: the linear depth bound every document from the network passes before a parser;
//! - [`names`]: the naming rule for sandboxes, workspaces and providers;
//! - [`violation`]: the field-addressed validation error they all report.
//!
//! It deliberately does no I/O: no files, no network, no gRPC and no database (it uses the
//! generated message types of `openshell-proto` as plain data, never its services). Callers
//! read and store documents; this crate only decides what they mean and whether they are
//! valid, so the same decision is made wherever the check runs.

pub mod names;
pub mod nesting;
pub mod policy;
pub mod provider;
pub mod secret;
pub mod settings;
pub mod violation;

pub use names::validate_name;
pub use policy::{PolicyError, SandboxPolicy, parse_and_validate, parse_policy};
pub use provider::{
    ProviderValue, ValueClass, validate_env_name, validate_env_value, validate_provider_type,
};
pub use secret::Secret;
pub use settings::{EffectiveSetting, Scope, SettingDef, SettingKind, SettingValue};
pub use violation::Violation;
