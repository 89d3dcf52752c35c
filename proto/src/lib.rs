//! The OpenShell gRPC contract, `openshell.v1`, as generated Rust code.
//!
//! Owns the wire format only: messages, enums and the client/server stubs
//! of the `OpenShell`, `Supervisor` and `GatewayPeer` services. It holds no
//! behaviour; validation, storage and delivery live in the crates above it.
//! The `.proto` sources in `openshell/v1/` are the contract's documentation.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// `openshell.v1`: every message and service of the contract.
pub mod v1 {
    tonic::include_proto!("openshell.v1");
}

pub use v1::*;

pub mod codec;
mod redact;
