//! Errors that stop a supervisor. Everything transient (an unreachable gateway, a failed
//! apply) is retried or reported instead and never surfaces here.

use std::path::PathBuf;

use crate::applier::ApplyError;
use crate::identity::IdentityError;
use crate::local_policy::LocalPolicyError;

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("invalid gateway address {url:?}: {reason}")]
    GatewayAddress { url: String, reason: String },
    #[error("cannot read CA certificate {path}: {source}")]
    CaFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read image policy {path}: {source}")]
    ImagePolicyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("gateway rejected the session permanently: {reason}")]
    Rejected { reason: String },
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    LocalPolicy(#[from] LocalPolicyError),
    #[error("state directory {path}: {source}")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the initial configuration did not apply: {0}")]
    InitialApply(ApplyError),
    #[error("cannot start the workload {program:?}: {source}")]
    Workload {
        program: String,
        source: std::io::Error,
    },
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("{0}")]
    Usage(String),
}
