//! Listing a fleet operation's targets: every live sandbox of its scope.
//!
//! PostgreSQL lists them in the write's own commit: its writers wait only
//! for the rows they touch. SQLite has one writer, and listing 10k
//! sandboxes in the commit held it for 25-48 ms, so every sandbox write
//! that came meanwhile waited that long. There the commit only marks the
//! operation as listing; its targets follow in transactions of
//! [`LISTING_CHUNK`] sandboxes, in id order, and other writes go between.
//! The operation cannot end while it is listing.
//!
//! A sandbox written between two chunks can apply the fleet change, and
//! its report be resolved, before the sandbox is listed: nothing would
//! ever resolve its target, since a snapshot it already runs is not sent
//! again. So the last chunk replays the last reports kept since the
//! operation's commit against the targets still live. A gateway that
//! stops mid-listing finishes the listing when it starts again.

use std::time::Duration;

use crate::error::Result;
use crate::operations::resolution::{SupervisorReport, sanitize_error, target_verdict};
use crate::store::{
    Backend, LiveTarget, OperationRecord, Store, StoreError, TargetKind, WritePlace,
};

/// Sandboxes listed per transaction: about 2.5 ms of SQLite work.
pub const LISTING_CHUNK: usize = 1000;

/// Whether fleet targets are listed after the commit rather than in it.
pub fn lists_after_commit(store: &Store) -> bool {
    store.backend() == Backend::Sqlite
}

/// Lists a just-committed fleet operation's targets. The listing runs on
/// the store's writer thread, so it runs to the end even if the caller
/// stops waiting for it. The write is committed whatever happens here: a
/// listing that fails is logged and taken up again in the background, from
/// the last sandbox listed, until it is done or the store closes.
pub async fn list_targets(store: &Store, operation: &OperationRecord) {
    let (writes, listed) = (store.clone(), operation.clone());
    let ran = store
        .run_write(WritePlace::WriterThread, async move {
            // Reports kept before the commit cannot have reached its revision.
            let reports_since = listed.created_at;
            let first = list_from(
                &writes,
                &listed,
                String::new(),
                reports_since,
                LISTING_CHUNK,
            );
            if let Err(e) = first.await {
                tracing::warn!(operation = %listed.id, error = %e,
                    "listing a fleet operation's targets failed; retrying in the background");
                tokio::spawn(retry_listing(writes, listed, RETRY_FIRST_DELAY));
            }
            Ok::<_, StoreError>(())
        })
        .await;
    if let Err(e) = ran {
        tracing::error!(operation = %operation.id, error = %e,
            "cannot list a fleet operation's targets; the next gateway start finishes the listing");
    }
}

/// First wait before a failed listing is taken up again; it doubles up to
/// [`RETRY_MAX_DELAY`].
pub const RETRY_FIRST_DELAY: Duration = Duration::from_secs(1);
const RETRY_MAX_DELAY: Duration = Duration::from_secs(30);

/// Takes a failed listing up again from the last sandbox listed, with a
/// growing delay, until it is done or the store closes.
pub async fn retry_listing(store: Store, operation: OperationRecord, first_delay: Duration) {
    let mut delay = first_delay;
    loop {
        tokio::time::sleep(delay).await;
        if store.is_closed() {
            return;
        }
        let listed = async {
            let after = store.last_listed_target(&operation.id).await?;
            list_from(
                &store,
                &operation,
                after,
                operation.created_at,
                LISTING_CHUNK,
            )
            .await
        }
        .await;
        match listed {
            Ok(()) => {
                tracing::info!(operation = %operation.id, "fleet operation's targets listed after a retry");
                return;
            }
            Err(e) => {
                delay = (delay * 2).min(RETRY_MAX_DELAY);
                tracing::warn!(operation = %operation.id, error = %e, retry_in = ?delay,
                    "listing a fleet operation's targets failed again");
            }
        }
    }
}

/// Finishes the listings a stopped gateway left, before it serves again.
/// Returns how many it finished.
pub async fn finish_interrupted_listings(store: &Store) -> Result<usize> {
    let unfinished = store.unfinished_target_listings().await?;
    for operation in &unfinished {
        let after = store.last_listed_target(&operation.id).await?;
        tracing::info!(operation = %operation.id, after = %after, "finishing an interrupted target listing");
        // Every kept report: when the listing stopped is not known.
        list_from(store, operation, after, 0, LISTING_CHUNK).await?;
    }
    Ok(unfinished.len())
}

/// Lists the operation's targets after sandbox id `after`, `chunk` per
/// transaction; the last transaction replays the reports kept since
/// `reports_since` (ms) and ends the listing.
pub async fn list_from(
    store: &Store,
    operation: &OperationRecord,
    mut after: String,
    reports_since: i64,
    chunk: usize,
) -> Result<()> {
    let workspace = match operation.target_kind {
        TargetKind::Workspace => Some(operation.target.as_str()),
        _ => None,
    };
    let live_target = LiveTarget {
        operation_id: operation.id.clone(),
        target_kind: operation.target_kind,
        settings_revision: operation.settings_revision,
        global_policy_revision: operation.global_policy_revision,
        touches_policy: operation.touches_policy,
    };
    loop {
        let mut tx = store.begin_write().await?;
        let next = tx
            .list_targets_after(
                &operation.id,
                workspace,
                operation.created_at,
                &after,
                chunk,
            )
            .await?;
        let Some(last) = next else {
            for (sandbox_id, last) in tx
                .last_reports_of_live_targets(&operation.id, reports_since)
                .await?
            {
                let Some(report) = SupervisorReport::from_last(sandbox_id, &last) else {
                    continue;
                };
                let reason = sanitize_error(&report.reason);
                if let Some((state, outcome, error)) =
                    target_verdict(&live_target, &report, &reason)
                {
                    tx.finish_targets(
                        &operation.id,
                        std::slice::from_ref(&report.sandbox_id),
                        state,
                        outcome,
                        &error,
                    )
                    .await?;
                }
            }
            tx.finish_target_listing(&operation.id).await?;
            tx.commit().await?;
            return Ok(());
        };
        tx.commit().await?;
        after = last;
    }
}
