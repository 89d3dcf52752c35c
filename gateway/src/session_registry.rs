//! Connected supervisor sessions on this replica: who is connected, in
//! which negotiated mode, and when they were last heard from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use openshell_proto::v1 as pb;

use crate::store::now_ms;
use crate::wire::timestamp;

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
    /// The supervisor process (`SupervisorHello.instance_id`); empty when it sends none.
    pub instance_id: String,
    pub protocol_revision: u32,
    pub supports_config_snapshots: bool,
    pub supports_config_apply: bool,
    pub local_policy_override: bool,
    pub connected_at_ms: i64,
    pub last_heartbeat_ms: i64,
    /// Sessions of this sandbox that a newer one replaced while they were still open, counted
    /// over the registry's life: more than a few means two supervisors share a credential.
    pub replaced_sessions: u32,
    pub last_replaced_at_ms: Option<i64>,
    /// The supervisor's latest word on whether its workload started and the remote middleware
    /// it needs (`RuntimeReadiness`); `None` until it sends one (older supervisors never do).
    pub runtime_readiness: Option<pb::RuntimeReadiness>,
    /// Asks the session to end with a reason its supervisor logs: a newer session of the same
    /// sandbox took its place, or the sandbox was stopped.
    pub closer: Arc<SessionCloser>,
}

/// A request to end one session, with the reason to tell its supervisor.
#[derive(Debug, Default)]
pub struct SessionCloser {
    notify: Notify,
    reason: Mutex<Option<String>>,
}

impl SessionCloser {
    /// Asks the session to close; the first reason given wins.
    pub fn close(&self, reason: &str) {
        let mut slot = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(reason.to_string());
        }
        drop(slot);
        self.notify.notify_one();
    }

    /// Resolves with the reason once the session is asked to close.
    pub async fn closed(&self) -> String {
        loop {
            if let Some(reason) = self
                .reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
            {
                return reason;
            }
            self.notify.notified().await;
        }
    }
}

/// Told to a session that a newer one of its sandbox replaced: only one supervisor may hold a
/// sandbox's session, and a second process with the same credential is the usual cause.
pub const SUPERSEDED_REASON: &str = "a newer session for this sandbox replaced this one; \
     if this repeats, two supervisors are using the same sandbox credential";

/// Told to a supervisor refused because another process holds its sandbox's session.
pub fn held_elsewhere_reason(holder: &SessionInfo, now_ms: i64) -> String {
    format!(
        "sandbox {} already has a live session from another supervisor process (connected {}s \
         ago, last heard {}s ago); two supervisors are using the same sandbox credential: stop \
         the extra one. This one retries and connects once that session ends",
        holder.sandbox_id,
        (now_ms - holder.connected_at_ms).max(0) / 1000,
        (now_ms - holder.last_heartbeat_ms).max(0) / 1000,
    )
}

/// Middleware entries kept per readiness report: a policy has at most 10, so more is noise.
const MAX_READINESS_ENTRIES: usize = 32;

/// Supervisor text is bounded and cleaned before it is kept and shown.
fn bounded_readiness(mut readiness: pb::RuntimeReadiness) -> pb::RuntimeReadiness {
    use crate::operations::resolution::sanitize_error;
    readiness.middlewares.truncate(MAX_READINESS_ENTRIES);
    for m in &mut readiness.middlewares {
        m.name = sanitize_error(&m.name);
        m.implementation = sanitize_error(&m.implementation);
        m.endpoint = sanitize_error(&m.endpoint);
        m.error = sanitize_error(&m.error);
    }
    readiness
}

/// The registry; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SessionRegistry {
    inner: Arc<Mutex<HashMap<String, SessionInfo>>>,
    /// Why each sandbox's last session was refused here, and when (ms), until
    /// one is accepted: `sessions inspect` says why a sandbox is not connected.
    refusals: Arc<Mutex<HashMap<String, (i64, String)>>>,
    /// Since when each sandbox's first start has been refused for an invalid startup policy,
    /// until a session is accepted: the wait for an operator to fix it is bounded.
    invalid_startup_policy: Arc<Mutex<HashMap<String, tokio::time::Instant>>>,
}

/// Refusals kept at most; past this, the oldest are forgotten first.
const MAX_REFUSALS_KEPT: usize = 10_000;

/// Before `sandbox_id` is added to a per-sandbox memory of refusals, forgets its oldest entry
/// (by `age`) if the memory is full, so that sandboxes that never connect cannot grow it.
fn make_room<V, T: Ord>(map: &mut HashMap<String, V>, sandbox_id: &str, age: impl Fn(&V) -> T) {
    if map.len() < MAX_REFUSALS_KEPT || map.contains_key(sandbox_id) {
        return;
    }
    let oldest = map
        .iter()
        .min_by_key(|(_, value)| age(value))
        .map(|(id, _)| id.clone());
    if let Some(oldest) = oldest {
        map.remove(&oldest);
    }
}

impl SessionRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionInfo>> {
        // A panic while holding the lock leaves a plain map behind; keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a session. An older open session of the same sandbox is told to close (its
    /// supervisor is either gone or a second one holding the same credential) and returned.
    pub fn register(&self, mut info: SessionInfo) -> Option<SessionInfo> {
        let mut map = self.lock();
        let old = map.get(&info.sandbox_id).cloned();
        if let Some(old) = &old {
            info.replaced_sessions = old.replaced_sessions.saturating_add(1);
            info.last_replaced_at_ms = Some(info.connected_at_ms);
            old.closer.close(SUPERSEDED_REASON);
        }
        self.refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&info.sandbox_id);
        self.invalid_startup_policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&info.sandbox_id);
        map.insert(info.sandbox_id.clone(), info);
        old
    }

    /// The open session of `sandbox_id` if another supervisor process holds it and was heard
    /// from within `silence_limit`: one process owns a sandbox, and a second one with the same
    /// credential is refused rather than allowed to take over. The same process reconnecting
    /// (its old connection not yet seen as gone), a holder gone silent (about to be closed for
    /// missed heartbeats) and supervisors that send no instance id replace the open session.
    pub fn live_holder(
        &self,
        sandbox_id: &str,
        instance_id: &str,
        silence_limit: std::time::Duration,
    ) -> Option<SessionInfo> {
        let map = self.lock();
        let holder = map.get(sandbox_id)?;
        let limit_ms = i64::try_from(silence_limit.as_millis()).unwrap_or(i64::MAX);
        let other_process = !instance_id.is_empty()
            && !holder.instance_id.is_empty()
            && holder.instance_id != instance_id;
        (other_process && now_ms() - holder.last_heartbeat_ms <= limit_ms).then(|| holder.clone())
    }

    /// Remembers why a session of `sandbox_id` was refused.
    pub fn record_refusal(&self, sandbox_id: &str, reason: &str) {
        let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        make_room(&mut refusals, sandbox_id, |(at, _)| *at);
        refusals.insert(sandbox_id.to_string(), (now_ms(), reason.to_string()));
    }

    /// When this replica first refused `sandbox_id`'s start for an invalid startup policy,
    /// counting from now if it has not before; forgotten once a session is accepted.
    pub fn invalid_startup_policy_since(&self, sandbox_id: &str) -> tokio::time::Instant {
        let mut since = self
            .invalid_startup_policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        make_room(&mut since, sandbox_id, |at| *at);
        *since
            .entry(sandbox_id.to_string())
            .or_insert_with(tokio::time::Instant::now)
    }

    /// Why the sandbox's last session was refused here, and when (ms), unless
    /// one was accepted since.
    pub fn last_refusal(&self, sandbox_id: &str) -> Option<(i64, String)> {
        self.refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sandbox_id)
            .cloned()
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

    /// Asks the sandbox's session, if one is open here, to close with `reason`.
    pub fn close(&self, sandbox_id: &str, reason: &str) -> bool {
        match self.lock().get(sandbox_id) {
            Some(session) => {
                session.closer.close(reason);
                true
            }
            None => false,
        }
    }

    pub fn heartbeat(&self, sandbox_id: &str, session_id: &str) {
        if let Some(s) = self.lock().get_mut(sandbox_id)
            && s.session_id == session_id
        {
            s.last_heartbeat_ms = now_ms();
        }
    }

    /// Keeps the readiness a session reported, bounded, if that session is still the
    /// registered one.
    pub fn set_readiness(
        &self,
        sandbox_id: &str,
        session_id: &str,
        readiness: pb::RuntimeReadiness,
    ) {
        if let Some(s) = self.lock().get_mut(sandbox_id)
            && s.session_id == session_id
        {
            s.runtime_readiness = Some(bounded_readiness(readiness));
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
                // Filled from the store by the API, which has it.
                policy_revision: 0,
                applied_policy_revision: 0,
            })
            .collect();
        out.sort_by(|a, b| a.sandbox_name.cmp(&b.sandbox_name));
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_full_refusal_memory_forgets_its_oldest_entry_first() {
        let mut map: HashMap<String, u64> = (0..MAX_REFUSALS_KEPT as u64)
            .map(|age| (format!("sb-{age}"), age))
            .collect();
        make_room(&mut map, "sb-5", |at| *at);
        assert_eq!(
            map.len(),
            MAX_REFUSALS_KEPT,
            "a known sandbox makes no room"
        );
        make_room(&mut map, "sb-new", |at| *at);
        assert_eq!(map.len(), MAX_REFUSALS_KEPT - 1);
        assert!(!map.contains_key("sb-0") && map.contains_key("sb-1"));
    }

    fn session(session_id: &str) -> SessionInfo {
        SessionInfo {
            session_id: session_id.into(),
            sandbox_id: "sb-1".into(),
            sandbox_name: "web".into(),
            mode: NegotiatedMode::Push,
            mode_reason: String::new(),
            supervisor_version: String::new(),
            instance_id: "i-1".into(),
            protocol_revision: 1,
            supports_config_snapshots: true,
            supports_config_apply: true,
            local_policy_override: false,
            connected_at_ms: 0,
            last_heartbeat_ms: 0,
            replaced_sessions: 0,
            last_replaced_at_ms: None,
            runtime_readiness: None,
            closer: Arc::default(),
        }
    }

    #[test]
    fn another_live_process_holds_the_sandbox_and_the_same_or_a_silent_one_does_not() {
        let registry = SessionRegistry::default();
        let limit = std::time::Duration::from_secs(15);
        assert!(
            registry.live_holder("sb-1", "i-2", limit).is_none(),
            "no session yet"
        );
        let mut open = session("s-1");
        open.last_heartbeat_ms = now_ms();
        open.connected_at_ms = now_ms() - 20_000;
        registry.register(open.clone());
        let holder = registry.live_holder("sb-1", "i-2", limit).unwrap();
        assert_eq!(holder.session_id, "s-1");
        let reason = held_elsewhere_reason(&holder, now_ms());
        assert!(reason.contains("same sandbox credential"), "{reason}");
        assert!(reason.contains("connected 20s ago"), "{reason}");
        assert!(
            registry.live_holder("sb-1", "i-1", limit).is_none(),
            "the same process reconnecting replaces its session"
        );
        assert!(
            registry.live_holder("sb-1", "", limit).is_none(),
            "a supervisor without an instance id cannot be told apart"
        );
        open.last_heartbeat_ms = now_ms() - 16_000;
        registry.register(open);
        assert!(
            registry.live_holder("sb-1", "i-2", limit).is_none(),
            "a holder silent past the limit is replaced"
        );
    }

    #[test]
    fn readiness_is_kept_bounded_and_only_for_the_registered_session() {
        let registry = SessionRegistry::default();
        registry.register(session("s-2"));
        let entry = |error: String| pb::MiddlewareReadiness {
            name: "audit\u{1b}[2J".into(),
            error,
            ..Default::default()
        };
        let readiness = pb::RuntimeReadiness {
            workload_started: false,
            middlewares: (0..40).map(|_| entry("x".repeat(5000))).collect(),
        };
        // A replaced session's late frame changes nothing.
        registry.set_readiness("sb-1", "s-1", readiness.clone());
        assert_eq!(registry.get("sb-1").unwrap().runtime_readiness, None);
        registry.set_readiness("sb-1", "s-2", readiness);
        let kept = registry.get("sb-1").unwrap().runtime_readiness.unwrap();
        assert_eq!(kept.middlewares.len(), MAX_READINESS_ENTRIES);
        let first = &kept.middlewares[0];
        assert!(!first.name.contains('\u{1b}'), "{:?}", first.name);
        assert!(first.error.len() <= 1024, "{}", first.error.len());
    }
}
