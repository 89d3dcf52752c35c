//! Durable operations after commit: listing a fleet operation's targets
//! (`fleet_targets`), waiting on them (`wait`) and resolving
//! them from what supervisors report and from lifecycle changes (`resolve`).
//! Poll reports and push acks both go through `resolver` (group commit) into
//! `resolve`, so there is one resolution path with two sources.

pub mod fleet_targets;
pub mod resolve;
pub mod resolver;
pub mod wait;

pub use resolve::{ReportStatus, SupervisorReport};
pub use resolver::ReportResolver;
pub use wait::{
    DEFAULT_WAIT, MAX_WAIT, OperationWatch, ended_by_deadline, stopping_status, threshold_reached,
    wait_deadline, wait_for_terminal,
};
