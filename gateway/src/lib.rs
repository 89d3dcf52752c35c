//! The OpenShell gateway: the authoritative holder of sandbox configuration.
//!
//! It validates and commits every write as a durable operation
//! (`config_update`, `lifecycle`, `providers`), serves the operator API
//! (`api`, `auth`), holds supervisor sessions (`supervisor_api`) and tracks
//! them (`session_registry`, `inspect`), and keeps all state in the `store`
//! (SQLite or PostgreSQL). It does not apply configuration (the supervisor
//! does) and does not parse policy itself (`openshell-core` does).
//!
//! A change flows: `api::update_config` → `config_update::commit_update`
//! (one transaction: revision, operation, fanout intent; concurrent sandbox
//! writes share one, `config_update/groups.rs`) → `operations`
//! (waits) → resolution by supervisor reports.

pub mod api;
pub mod auth;
pub mod authz;
pub mod config;
pub mod config_update;
pub mod crypto;
pub mod delivery;
pub mod encoded_policies;
pub mod error;
pub mod group_commit;
pub mod in_flight;
pub mod inspect;
pub mod lifecycle;
pub mod limits;
pub mod metrics;
pub mod operations;
pub mod peers;
pub mod policy_diff;
pub mod policy_parse;
pub mod provider_refresh;
pub mod providers;
pub mod sandbox_logs;
pub mod server;
pub mod session_registry;
pub mod snapshot;
pub mod state;
pub mod store;
pub mod supervisor_api;
pub mod ticks;
pub mod unserved;
pub mod wait_limits;
pub mod wire;

pub use config::{DeliveryMode, GatewayConfig};
pub use server::{GatewayHandle, start};

/// Highest supervisor protocol revision this gateway speaks.
pub const PROTOCOL_REVISION: u32 = 1;
