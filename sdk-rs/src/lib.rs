//! The OpenShell client core: every operator-facing call of the `openshell.v1`
//! API, with typed errors, safe retries and serde view types.
//!
//! The `openshell` CLI and the Node and Python bindings are thin layers over
//! this crate, so connection handling, retry rules, error codes and the JSON
//! shape of every object are decided here once and cannot drift between them.
//!
//! Boundaries: this crate speaks gRPC to a gateway and converts to and from the
//! generated `openshell_proto` types; it does not validate policies or
//! settings (the gateway does, and reports violations that [`SdkError`]
//! carries), prints nothing and holds no state besides the connection.
//!
//! ```no_run
//! use openshell_sdk::{Client, ClientOptions, SandboxRef};
//!
//! # async fn demo() -> Result<(), openshell_sdk::SdkError> {
//! let client = Client::connect(ClientOptions::new("http://127.0.0.1:7070")).await?;
//! let sandbox = client.get_sandbox(&SandboxRef::from("demo")).await?;
//! println!("{} is {}", sandbox.name, sandbox.lifecycle);
//! # Ok(())
//! # }
//! ```

mod calls;
mod client;
mod error;
mod log_stream;
mod options;
mod retry;
mod timefmt;
pub mod types;
mod update;
mod wait;

pub use calls::provider::{ProviderSpec, ProviderUpdate};
pub use client::Client;
pub use error::{FieldViolation, SdkError};
pub use log_stream::SandboxLogStream;
pub use openshell_core::Secret;
pub use openshell_core::policy::{EditSpecs, PolicyEdit};
pub use options::ClientOptions;
pub use types::*;
pub use update::{SettingChange, Target, UpdateConfig};
pub use wait::OperationStream;
