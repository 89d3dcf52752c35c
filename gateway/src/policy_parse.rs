//! Policy documents from the network are parsed here, off the async workers and a few at a
//! time, so that no request, however crafted, can hold the runtime that serves heartbeats,
//! sessions and every other RPC.
//!
//! `openshell-core` already bounds the work of one parse (size and nesting depth are checked in
//! one linear pass before the parser runs); this module bounds how many run at once and keeps
//! them on the blocking pool. A caller that gives up while waiting for a permit drops its
//! future and costs nothing further.

use openshell_core::policy::{PolicyError, SandboxPolicy, parse_and_validate};
use tokio::sync::Semaphore;

/// Parses that may run at once; the rest wait in FIFO order for a permit.
pub const MAX_CONCURRENT_PARSES: usize = 2;

/// A bound on concurrent parses; the gateway shares one, tests make their own.
pub struct PolicyParser {
    permits: Semaphore,
}

static SHARED: PolicyParser = PolicyParser::new(MAX_CONCURRENT_PARSES);

impl PolicyParser {
    pub const fn new(concurrent: usize) -> Self {
        Self {
            permits: Semaphore::const_new(concurrent),
        }
    }

    /// Parses and validates an untrusted policy document on the blocking pool.
    pub async fn parse_and_validate(&self, text: String) -> Result<SandboxPolicy, PolicyError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| PolicyError::Syntax("the gateway is shutting down".into()))?;
        tokio::task::spawn_blocking(move || parse_and_validate(&text))
            .await
            .map_err(|_| PolicyError::Syntax("the policy parser stopped unexpectedly".into()))?
    }
}

/// Parses and validates an untrusted policy document with the gateway's shared bound.
pub async fn parse_and_validate_untrusted(text: String) -> Result<SandboxPolicy, PolicyError> {
    SHARED.parse_and_validate(text).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_most_the_bound_hold_a_permit_at_once() {
        static PARSER: PolicyParser = PolicyParser::new(2);
        let held: Vec<_> = (0..2).map(|_| PARSER.permits.try_acquire()).collect();
        assert!(held.iter().all(Result::is_ok));
        let mut waiting = tokio::spawn(PARSER.parse_and_validate("version: 1\n".into()));
        // Without the bound this parse ends in microseconds; with it, it cannot end at all
        // while the permits are held, so the wait can only pass when the bound is missing.
        let early = tokio::time::timeout(std::time::Duration::from_millis(300), &mut waiting).await;
        assert!(early.is_err(), "a parse ran without a permit");
        drop(held);
        assert!(waiting.await.is_ok_and(|r| r.is_ok()));
    }

    #[tokio::test]
    async fn a_deep_document_is_refused_with_the_limit() {
        let doc = format!("version: 1\nx: {}\n", "[".repeat(100_000));
        let err = parse_and_validate_untrusted(doc).await.unwrap_err();
        assert!(matches!(err, PolicyError::TooDeep(_)), "{err}");
    }
}
