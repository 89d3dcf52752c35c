//! Connected supervisor sessions on this replica: who is connected, in
//! which negotiated mode, and when they were last heard from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use openshell_proto::v1 as pb;

use crate::api::convert::timestamp;
use crate::store::now_ms;

/// What a session negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegotiatedMode {
    Poll,
    ShadowPush,
    Push,
}

impl NegotiatedMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Poll => "poll",
            Self::ShadowPush => "shadow_push",
            Self::Push => "push",
        }
    }

    pub fn to_pb(self) -> pb::DeliveryMode {
        match self {
            Self::Poll => pb::DeliveryMode::Poll,
            Self::ShadowPush => pb::DeliveryMode::ShadowPush,
            Self::Push => pb::DeliveryMode::Push,
        }
    }
}

/// One live session.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub session_id: String,
    pub sandbox_id: String,
    pub sandbox_name: String,
    pub mode: NegotiatedMode,
    pub mode_reason: String,
    pub supervisor_version: String,
    pub protocol_revision: u32,
    pub supports_config_snapshots: bool,
    pub supports_config_apply: bool,
    pub local_policy_override: bool,
    pub connected_at_ms: i64,
    pub last_heartbeat_ms: i64,
}

/// The registry; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SessionRegistry {
    inner: Arc<Mutex<HashMap<String, SessionInfo>>>,
}

impl SessionRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionInfo>> {
        // A panic while holding the lock leaves a plain map behind; keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a session, replacing an older one of the same sandbox.
    pub fn register(&self, info: SessionInfo) -> Option<SessionInfo> {
        self.lock().insert(info.sandbox_id.clone(), info)
    }

    /// Removes the session if it is still the registered one.
    pub fn unregister(&self, sandbox_id: &str, session_id: &str) -> bool {
        let mut map = self.lock();
        if map
            .get(sandbox_id)
            .is_some_and(|s| s.session_id == session_id)
        {
            map.remove(sandbox_id);
            return true;
        }
        false
    }

    pub fn heartbeat(&self, sandbox_id: &str, session_id: &str) {
        if let Some(s) = self.lock().get_mut(sandbox_id)
            && s.session_id == session_id
        {
            s.last_heartbeat_ms = now_ms();
        }
    }

    pub fn get(&self, sandbox_id: &str) -> Option<SessionInfo> {
        self.lock().get(sandbox_id).cloned()
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Sessions ordered by sandbox name.
    pub fn list(&self, replica_id: &str) -> Vec<pb::SessionSummary> {
        let mut out: Vec<pb::SessionSummary> = self
            .lock()
            .values()
            .map(|s| pb::SessionSummary {
                sandbox_id: s.sandbox_id.clone(),
                sandbox_name: s.sandbox_name.clone(),
                session_id: s.session_id.clone(),
                mode: s.mode.to_pb() as i32,
                supervisor_version: s.supervisor_version.clone(),
                protocol_revision: s.protocol_revision,
                replica_id: replica_id.to_string(),
                connected_at: Some(timestamp(s.connected_at_ms)),
                last_heartbeat_at: Some(timestamp(s.last_heartbeat_ms)),
            })
            .collect();
        out.sort_by(|a, b| a.sandbox_name.cmp(&b.sandbox_name));
        out
    }
}
