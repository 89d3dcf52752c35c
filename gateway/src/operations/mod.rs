//! Durable operations after commit: listing a fleet operation's targets
//! (`fleet_targets`), waiting on them (`wait`) and resolving
//! them from what supervisors report and from lifecycle changes (`resolution`).
//! Poll reports and push acks both go through `report_queue` (the report
//! resolver's group commit) into `resolution`, so there is one resolution path
//! with two sources.

pub mod fleet_targets;
pub mod report_queue;
pub mod resolution;
pub mod wait;

pub use report_queue::ReportResolver;
pub use resolution::{ReportStatus, SupervisorReport};
pub use wait::{
    DEFAULT_WAIT, MAX_WAIT, OperationWatch, ended_by_deadline, stopping_status, threshold_reached,
    wait_deadline, wait_for_terminal,
};
