//! Operation changes announced across replicas (PostgreSQL).
//!
//! A write through one replica is often resolved by another: the one holding
//! the sandbox's session receives its acknowledgement. The writer's
//! `WAIT_FOR_APPLY` would learn of it only at its next re-read, up to a
//! second later. So a transaction that changed operations sends their ids
//! with `pg_notify` (delivered when it commits, and only then), and every
//! replica listens and wakes the waiters of those ids, which re-read the row.
//! A replica skips its own announcements: it woke its waiters in process.

use std::time::Duration;

use sqlx::postgres::PgListener;

use super::events::{ChangedOperation, OperationEvents};

/// The PostgreSQL channel operation changes are announced on.
pub(super) const CHANNEL: &str = "openshell_operation_changes";

/// PostgreSQL refuses payloads of 8000 bytes or more; past this many, an
/// announcement names no ids and wakes every waiter instead.
const MAX_PAYLOAD_BYTES: usize = 7000;

/// Stands for "too many to name": every waiter re-reads.
const EVERY_OPERATION: &str = "*";

const RECONNECT_FIRST_DELAY: Duration = Duration::from_millis(100);
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(5);

/// The announcement of `changed`, made by replica `replica_id`:
/// `REPLICA|ID,ID,…`, or `REPLICA|*`.
pub(super) fn payload(replica_id: &str, changed: &[ChangedOperation]) -> String {
    let mut ids: Vec<&str> = changed.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let named = ids.join(",");
    if replica_id.len() + 1 + named.len() > MAX_PAYLOAD_BYTES {
        format!("{replica_id}|{EVERY_OPERATION}")
    } else {
        format!("{replica_id}|{named}")
    }
}

/// What an announcement asks of this replica.
#[derive(Debug, PartialEq, Eq)]
enum Wake<'a> {
    /// Its own, or unreadable: nothing.
    Nothing,
    Every,
    These(Vec<&'a str>),
}

fn parse<'a>(payload: &'a str, own_replica: &str) -> Wake<'a> {
    let Some((replica, ids)) = payload.split_once('|') else {
        return Wake::Nothing;
    };
    if replica == own_replica {
        return Wake::Nothing;
    }
    if ids == EVERY_OPERATION {
        return Wake::Every;
    }
    Wake::These(ids.split(',').filter(|id| !id.is_empty()).collect())
}

/// Listens for other replicas' announcements until the task is dropped,
/// reconnecting with backoff. Whatever was announced while a connection was
/// down is lost, so every waiter re-reads once one is back.
pub(super) async fn listen(url: String, replica_id: String, events: OperationEvents) {
    let mut delay = RECONNECT_FIRST_DELAY;
    let mut first = true;
    loop {
        let error = listen_until_error(&url, &replica_id, &events, &mut delay, first).await;
        first = false;
        tracing::warn!(error = %error, retry_in = ?delay,
            "cannot listen for other replicas' operation changes; waiters re-read meanwhile");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RECONNECT_MAX_DELAY);
    }
}

/// Listens on one listener until it fails; `delay` starts over once it listens.
/// `first`: no listener came before, so no announcement was lost (a waiter
/// that started before the store could listen re-reads on its own schedule).
async fn listen_until_error(
    url: &str,
    replica_id: &str,
    events: &OperationEvents,
    delay: &mut Duration,
    first: bool,
) -> sqlx::Error {
    let mut listener = match PgListener::connect(url).await {
        Ok(listener) => listener,
        Err(e) => return e,
    };
    if let Err(e) = listener.listen(CHANNEL).await {
        return e;
    }
    *delay = RECONNECT_FIRST_DELAY;
    if !first {
        // Changes committed while no listener was up were not heard.
        events.wake_all();
    }
    loop {
        match listener.try_recv().await {
            Ok(Some(notice)) => match parse(notice.payload(), replica_id) {
                Wake::Nothing => {}
                Wake::Every => events.wake_all(),
                Wake::These(ids) => events.wake(&ids),
            },
            // The connection was lost and opened again, listening anew:
            // what was announced in between was not heard.
            Ok(None) => events.wake_all(),
            Err(e) => return e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(id: &str) -> ChangedOperation {
        ChangedOperation {
            id: id.into(),
            row: None,
        }
    }

    #[test]
    fn announcements_name_each_operation_once_and_skip_the_senders_own() {
        let sent = payload(
            "replica-a",
            &[changed("op-2"), changed("op-1"), changed("op-2")],
        );
        assert_eq!(sent, "replica-a|op-1,op-2");
        assert_eq!(parse(&sent, "replica-b"), Wake::These(vec!["op-1", "op-2"]));
        assert_eq!(parse(&sent, "replica-a"), Wake::Nothing);
        assert_eq!(parse("no separator", "replica-b"), Wake::Nothing);
    }

    #[test]
    fn too_many_operations_to_name_wake_every_waiter() {
        let many: Vec<ChangedOperation> =
            (0..1000).map(|i| changed(&format!("op-{i:026}"))).collect();
        let sent = payload("replica-a", &many);
        assert!(sent.len() < MAX_PAYLOAD_BYTES);
        assert_eq!(parse(&sent, "replica-b"), Wake::Every);
    }
}
