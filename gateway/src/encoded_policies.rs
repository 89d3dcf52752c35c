//! Stored policies in wire form, by hash. Many sandboxes share one policy
//! (the global one above all): a fanout converts and encodes it once, and
//! every snapshot holds a reference to the same bytes, not a copy of the
//! policy's message tree. A hash names its content, so an entry never goes
//! stale.
//!
//! The store consults this too: a build whose policy is here reads only the
//! policy's hash from the store, not its stored text, which keeps reconcile
//! from reading every sandbox's policy row every 30 s.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use openshell_core::policy::{PolicyError, parse_policy};
use openshell_proto::sandbox::v1 as sb;
use prost::bytes::Bytes;

static ENCODED: LazyLock<Mutex<HashMap<String, Bytes>>> = LazyLock::new(Mutex::default);

/// Distinct policies kept. The map is emptied when it grows past this,
/// which costs one read and one encoding per policy in use.
const KEPT: usize = 1024;

/// The encoded policy of `hash`, when it is here.
pub fn get(hash: &str) -> Option<Bytes> {
    ENCODED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(hash)
        .cloned()
}

/// The wire form of a stored policy (canonical JSON, valid when stored),
/// kept for the next build that names `hash`. An error means the stored
/// text is not a policy (the store is corrupt).
pub fn encode(hash: &str, policy_json: &str) -> Result<Bytes, PolicyError> {
    if let Some(encoded) = get(hash) {
        return Ok(encoded);
    }
    let policy = parse_policy(policy_json)?;
    let encoded = Bytes::from(prost::Message::encode_to_vec(&sb::SandboxPolicy::from(
        &policy,
    )));
    let mut map = ENCODED.lock().unwrap_or_else(PoisonError::into_inner);
    if map.len() >= KEPT {
        map.clear();
    }
    map.insert(hash.to_string(), encoded.clone());
    Ok(encoded)
}
