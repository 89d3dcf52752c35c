//! The OpenShell sandbox supervisor.
//!
//! It owns the supervisor's side of the gRPC contract (the supervisor calls of the gateway's
//! `OpenShell` service, in upstream OpenShell's wire layout) and everything between a
//! delivered snapshot and a running workload:
//!
//! - the `ConnectSupervisor` session ([`Supervisor`], [`run_session`]): hello with capability
//!   flags, acceptance or rejection, heartbeats, reconnecting with jittered backoff
//!   ([`backoff`]); in push mode the bootstrap and `ConfigUpdate` acks (`STALE`, `DUPLICATE`,
//!   `AWAITING_COMPONENT`, …); otherwise polling with status reports through an outbox;
//! - applying configuration behind the [`Applier`] trait: [`FileApplier`] stages, validates and
//!   atomically activates files under the state directory with an on-apply hook, last-known-good
//!   rollback and fail-closed quarantine ([`file_applier`]); [`MemoryApplier`] keeps it in memory for
//!   tests and the fleet benchmark;
//! - the local policy override and standalone mode ([`local_policy`], [`standalone`]);
//! - the workload process: environment, reload and termination signals, exit code
//!   ([`workload`]), started once every remote middleware the policy requires answers, or
//!   degraded when only `fail_open` ones do not ([`middleware`]);
//! - log lines for operators: its own events and the workload's output, bounded, masked and
//!   pushed to the gateway ([`logs`]).
//!
//! It does not own the policy schema, the settings registry or the secret type (those are
//! `openshell-core`), nor the wire format (`openshell-proto`). It does not enforce the policy
//! either: it writes the active configuration and tells the workload; enforcing network and
//! filesystem rules is the job of whatever reads the state directory. Failure reasons it sends
//! never carry provider values or credentials ([`sanitize`]).

pub mod applier;
pub mod args;
pub mod backoff;
pub mod desired;
pub mod error;
pub mod file_applier;
pub mod identity;
pub mod local_policy;
pub mod logging;
pub mod logs;
pub mod memory_applier;
pub mod middleware;
pub mod options;
pub mod reload;
pub mod replay;
pub mod sanitize;
pub mod signals;
pub mod standalone;
pub mod status;
pub mod supervisor;
pub mod workload;

mod app;
mod client;
mod engine;
mod expiry;
mod gateway_session;
mod outbox;
mod poll;
mod push;
mod sandbox_ref;

pub use app::run as run_cli;
pub use applier::{Applier, ApplyError, ApplyErrorKind, ApplyReport, ApplyStage, BoxFuture};
pub use backoff::{Backoff, BackoffConfig};
pub use desired::{DesiredConfig, FailureMode};
pub use error::SupervisorError;
pub use file_applier::state_dir::{WriteFault, WriteStep};
pub use file_applier::{FileApplier, FileApplierConfig};
pub use identity::Identity;
pub use local_policy::LocalPolicy;
pub use memory_applier::MemoryApplier;
pub use options::SupervisorOptions;
pub use reload::ReloadSignal;
pub use replay::PushReplay;
pub use status::{SessionState, SupervisorStatus};
pub use supervisor::{Supervisor, run_session};

/// Reason sent with `RETAINED_LOCAL_OVERRIDE`.
pub const LOCAL_OVERRIDE_REASON: &str = "local policy file keeps precedence";
