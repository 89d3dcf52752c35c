//! Group commit: a task that owns a queue of writes takes everything that
//! has queued up while its previous transaction ran and commits it in one
//! transaction. Under load (a reconnect storm's owner claims) this turns
//! thousands of serialised transactions into a few dozen; when idle, a lone
//! write is committed at once. The report resolver batches the same way but
//! picks what goes first (`operations/report_queue.rs`).

use tokio::sync::mpsc::UnboundedReceiver;

/// `first` plus whatever is already queued, at most `max` items.
pub fn take_queued<T>(queue: &mut UnboundedReceiver<T>, first: T, max: usize) -> Vec<T> {
    let mut batch = vec![first];
    while batch.len() < max {
        match queue.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_what_is_queued_up_to_the_limit() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 1..=5 {
            tx.send(i).unwrap();
        }
        assert_eq!(take_queued(&mut rx, 0, 3), vec![0, 1, 2]);
        assert_eq!(take_queued(&mut rx, 9, 10), vec![9, 3, 4, 5]);
    }
}
