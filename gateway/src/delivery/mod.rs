//! Push delivery: dirty marks (`marks`), build permits with a sandbox-lane
//! reserve (`permits`), one delivery task per push session (`task`) with
//! latest-wins slots and ack holds, periodic reconcile (`reconcile`), publication of
//! committed writes to the affected sessions (`publish`), and whether a
//! fanout crowds the runtime, so where writes run (`activity`).
//!
//! Marks carry no data: a delivery task always builds complete snapshots
//! from the store, so whatever it sends reflects every earlier commit.

pub mod activity;
pub mod handed;
pub mod marks;
pub mod permits;
pub mod publish;
pub mod reconcile;
pub mod task;
pub mod tuning;

pub use activity::FanoutActivity;
pub use marks::{Component, Lane, Mark};
pub use permits::Permits;
pub use publish::{Publication, PublicationScope, Publisher};
pub use task::{Ack, SessionDelivery};
pub use tuning::DeliveryTuning;

/// A frame queued for a session's stream. Boxed because a `GatewayMessage`
/// is over 500 bytes (an acceptance holds two snapshots inline) and each
/// idle session keeps two channels whose slots are allocated 32 at a time.
pub type Frame = Box<openshell_proto::v1::GatewayMessage>;

#[cfg(test)]
mod tests;
