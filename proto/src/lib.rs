//! The OpenShell gRPC contract, `openshell.v1` and `openshell.sandbox.v1`,
//! as generated Rust code.
//!
//! Owns the wire format: messages, enums and the client/server stubs of the
//! `OpenShell` and `GatewayPeer` services, plus the few rules the contract
//! itself states (which operation states are terminal). It holds no other
//! behaviour; validation, storage and delivery live in the crates above it.
//! The `.proto` sources in `openshell/` are the contract's documentation.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// `openshell.v1`: every message and service of the contract.
pub mod v1 {
    tonic::include_proto!("openshell.v1");
}

/// `openshell.sandbox.v1`: upstream OpenShell's typed sandbox policy and the supervisor's
/// configuration messages, with this project's extensions (fields 100 and up).
/// `openshell_core::policy::wire` converts the policy to and from the policy document.
pub mod sandbox {
    pub mod v1 {
        tonic::include_proto!("openshell.sandbox.v1");
    }
}

/// `openshell.datamodel.v1`: upstream OpenShell's object metadata and workspace selector.
pub mod datamodel {
    pub mod v1 {
        tonic::include_proto!("openshell.datamodel.v1");
    }
}

pub use v1::*;

pub mod codec;
mod operation_state;
mod redact;
mod sandbox_fields;
mod snapshot;
