//! Credentials leave the workload's environment when they expire.
//!
//! The gateway states each credential's expiry in the provider environment
//! snapshot. Every activation drops the ones already past it (see
//! `Engine::activate`); this task wakes at the next expiry of the
//! configuration in effect and activates it again without that credential, so
//! the provider environment file stops carrying it and the workload is told to
//! reload, as for any change. A refreshed credential arrives as a new snapshot
//! from the gateway, as any provider change does.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::desired::now_ms;
use crate::engine::Engine;
use crate::status::SupervisorStatus;

/// Longest sleep without anything expiring: a bound, not a poll.
const IDLE: Duration = Duration::from_secs(3600);
/// Wait before withholding an expired credential again after a failed activation.
const RETRY: Duration = Duration::from_secs(5);

/// Runs until `stopped` turns true.
pub(crate) async fn run(
    engine: Arc<Engine>,
    mut status: watch::Receiver<SupervisorStatus>,
    mut stopped: watch::Receiver<bool>,
) {
    // The expiry last acted on: if its activation failed, the next try waits
    // instead of spinning on a time already past.
    let mut acted_on = None;
    loop {
        let next = engine.next_credential_expiry().await;
        let wait = match next {
            Some(at) if acted_on == Some(at) => RETRY,
            Some(at) => Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)),
            None => IDLE,
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {
                acted_on = next;
                engine.withhold_expired_credentials().await;
            }
            // A new configuration brings new expiry times.
            changed = status.changed() => if changed.is_err() { return },
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}
