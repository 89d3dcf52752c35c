//! Counting what is under way: a guard that holds one count of a shared
//! counter for as long as it lives, also when the work is given up.

use std::sync::atomic::{AtomicUsize, Ordering};

/// One count of `counter`, given back when dropped.
#[derive(Debug)]
pub struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    pub fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_lasts_as_long_as_its_guard() {
        let counter = AtomicUsize::new(0);
        let first = InFlight::enter(&counter);
        let second = InFlight::enter(&counter);
        assert_eq!(counter.load(Ordering::SeqCst), 2);
        drop(first);
        assert_eq!(counter.load(Ordering::SeqCst), 1);
        drop(second);
        assert_eq!(counter.load(Ordering::SeqCst), 0);
    }
}
