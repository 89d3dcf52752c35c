//! Reconcile, the backstop for any mark a session missed (a lost peer
//! hint, a publication that failed to resolve): every reconcile interval
//! each push session gets a pass. One task per replica runs the passes due
//! on each tick, and reads the input revisions of all those sessions'
//! sandboxes in one statement. A session is rebuilt only where they moved
//! since its latest build, where the supervisor last failed a component,
//! and on every `reconcile_full_rebuild_every`-th pass, which picks up a
//! repair made in the store without a new revision.
//!
//! Rebuilding every session on every pass cost an idle gateway with 10k
//! sessions about 40 % of its CPU, for builds that almost always came out
//! unchanged.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::publish::Publisher;
use super::task::{ReconcileDue, SessionDelivery};
use super::tuning::DeliveryTuning;
use crate::metrics::Metrics;
use crate::snapshot::SnapshotSource;
use crate::ticks::on_shared_tick;

/// Runs the passes of this replica's push sessions until the gateway stops.
pub async fn run(
    publisher: Publisher,
    source: Arc<dyn SnapshotSource>,
    tuning: DeliveryTuning,
    metrics: Arc<Metrics>,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        // At least a millisecond on: a tick that is due now was just run.
        let next_tick = on_shared_tick(
            Instant::now() + Duration::from_millis(1),
            tuning.reconcile_tick(),
        );
        tokio::select! {
            () = tokio::time::sleep_until(next_tick) => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
        pass(&publisher, &*source, &tuning, &metrics, Instant::now()).await;
    }
}

/// Starts the passes due at `now` and ends those that need the store.
pub(super) async fn pass(
    publisher: &Publisher,
    source: &dyn SnapshotSource,
    tuning: &DeliveryTuning,
    metrics: &Metrics,
    now: Instant,
) {
    let mut checks: Vec<Arc<SessionDelivery>> = Vec::new();
    publisher.for_each(|delivery| {
        if let Some(due) = delivery.start_reconcile_pass(now, tuning) {
            metrics.reconcile_passes.inc();
            if due == ReconcileDue::Check {
                checks.push(delivery.clone());
            }
        }
    });
    if checks.is_empty() {
        return;
    }
    let ids: Vec<&str> = checks.iter().map(|d| d.sandbox_id.as_str()).collect();
    let current = match source.input_revisions(&ids).await {
        Ok(current) => current,
        Err(e) => {
            // Rebuilding reads the store again, with each session's own backoff.
            tracing::warn!(error = %e, sessions = checks.len(), "reconcile cannot read input revisions; rebuilding");
            Default::default()
        }
    };
    for delivery in &checks {
        if !delivery.rebuild_unless_built_from(current.get(&delivery.sandbox_id)) {
            metrics.reconcile_unchanged.inc();
        }
    }
}
