//! The native half of `@openshell/sdk`, the Node.js SDK of OpenShell.
//!
//! It exposes `openshell_sdk::Client` to JavaScript through napi-rs: one
//! Promise-returning method per call, camelCase objects whose TypeScript
//! types are generated from the structs here, and an `OperationWatch`
//! handle that follows an operation and can be cancelled.
//!
//! What it is not: a second client. It speaks no gRPC and decides no
//! behaviour; connection handling, retries, error codes and waiting are the
//! sdk's, so Node behaves like the CLI and the Python SDK. The idiomatic
//! surface (the `Client` class, `Error` subclasses, `AbortSignal` and
//! `onProgress`) lives in the package's JavaScript files, which wrap these
//! exports; callers should import the package, not this library.

mod client;
mod enums;
mod error;
mod logs;
mod options;
mod targets;
mod views;
mod watch;

// napi registers exports through generated constructors that are compiled out
// of test builds; naming the entry points here keeps them reachable in every
// build, so dead-code analysis sees what JS sees.
pub use client::{NativeClient, connect};
pub use enums::{contract_enums, terminal_operation_states};
pub use watch::OperationWatch;
