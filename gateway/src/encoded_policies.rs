//! Stored policies in wire form and parsed, by hash. Many sandboxes share one policy
//! (the global one above all): a fanout converts and encodes it once, and
//! every snapshot holds a reference to the same bytes, not a copy of the
//! policy's message tree. A hash names its content, so an entry never goes
//! stale.
//!
//! The store consults this too: a build whose policy is here reads only the
//! policy's hash from the store, not its stored text, which keeps reconcile
//! from reading every sandbox's policy row every 30 s.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use openshell_core::policy::{PolicyError, SandboxPolicy, parse_policy};
use openshell_proto::sandbox::v1 as sb;
use prost::bytes::Bytes;

/// One stored policy, in wire form and parsed.
#[derive(Clone)]
struct Kept {
    encoded: Bytes,
    parsed: Arc<SandboxPolicy>,
}

static KEPT_POLICIES: LazyLock<Mutex<HashMap<String, Kept>>> = LazyLock::new(Mutex::default);

/// Distinct policies kept. The map is emptied when it grows past this,
/// which costs one read and one encoding per policy in use.
const KEPT: usize = 1024;

fn kept(hash: &str) -> Option<Kept> {
    KEPT_POLICIES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(hash)
        .cloned()
}

/// The encoded policy of `hash`, when it is here.
pub fn get(hash: &str) -> Option<Bytes> {
    kept(hash).map(|k| k.encoded)
}

/// The policy of `hash` as parsed from its stored text, when it is here: a
/// write checks the sandbox's latest policy against the request's static
/// sections without reading and parsing its text inside the transaction.
pub fn parsed(hash: &str) -> Option<Arc<SandboxPolicy>> {
    kept(hash).map(|k| k.parsed)
}

/// The wire form of a stored policy (canonical JSON, valid when stored),
/// kept for the next build that names `hash`. An error means the stored
/// text is not a policy (the store is corrupt).
pub fn encode(hash: &str, policy_json: &str) -> Result<Bytes, PolicyError> {
    if let Some(encoded) = get(hash) {
        return Ok(encoded);
    }
    Ok(insert(hash, Arc::new(parse_policy(policy_json)?)).encoded)
}

/// Keeps a policy a write is storing under `hash`, so that the build its
/// publication starts neither reads the stored text nor parses it (on the
/// single-sandbox path that read is one statement of the few between the
/// commit and the snapshot going out), nor does the sandbox's next write.
/// An entry for a write that then rolls back is harmless: the hash names
/// the content. The kept policy is the one a build would read back from
/// the stored text because every document parses back from its canonical
/// JSON unchanged (`core/tests/corpus.rs` holds each accepted upstream
/// document to that).
pub fn keep(hash: &str, policy: &SandboxPolicy) -> Arc<SandboxPolicy> {
    match parsed(hash) {
        Some(parsed) => parsed,
        None => insert(hash, Arc::new(policy.clone())).parsed,
    }
}

fn insert(hash: &str, parsed: Arc<SandboxPolicy>) -> Kept {
    let encoded = Bytes::from(prost::Message::encode_to_vec(&sb::SandboxPolicy::from(
        &*parsed,
    )));
    let kept = Kept { encoded, parsed };
    let mut map = KEPT_POLICIES.lock().unwrap_or_else(PoisonError::into_inner);
    if map.len() >= KEPT {
        map.clear();
    }
    map.insert(hash.to_string(), kept.clone());
    kept
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_kept_policy_is_the_encoding_of_its_stored_text() {
        let policy = parse_policy(include_str!("../../examples/policy.yaml")).unwrap();
        let stored = policy.canonical_json();
        // The map is shared by the whole process: names of this test's own.
        keep("kept-by-the-write", &policy);
        let from_text = encode("read-from-the-store", &stored).unwrap();
        assert_eq!(get("kept-by-the-write").unwrap(), from_text);
        assert!(!from_text.is_empty());
        assert_eq!(
            parsed("kept-by-the-write"),
            parsed("read-from-the-store"),
            "a write's static-section check sees the same policy either way"
        );
    }
}
