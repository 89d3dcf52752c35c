//! Publication: after a write commits, mark every affected push session
//! dirty. Admission never blocks the writer and never drops a mark; in
//! poll mode there are no push sessions and publication does nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::marks::{Component, Lane, Mark};
use super::task::SessionDelivery;
use crate::error::Result;
use crate::store::{FanoutIntent, Store, WriteTx};

/// Which sessions a committed write affects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicationScope {
    Sandbox(String),
    Workspace(String),
    Global,
    /// Only sessions whose sandbox attaches this provider.
    Provider(String),
}

/// One committed write.
#[derive(Debug, Clone)]
pub struct Publication {
    pub scope: PublicationScope,
    pub components: Vec<Component>,
}

impl Publication {
    pub fn sandbox(id: &str, components: &[Component]) -> Self {
        Self {
            scope: PublicationScope::Sandbox(id.to_string()),
            components: components.to_vec(),
        }
    }

    /// Records this publication as the write's durable fanout intent, inside its transaction,
    /// so the other replicas replay exactly what this one publishes locally after the commit.
    /// One typed value serves both: they cannot disagree.
    pub async fn record(&self, tx: &mut WriteTx, operation_id: Option<&str>) -> Result<()> {
        let (scope, scope_id) = match &self.scope {
            PublicationScope::Sandbox(id) => ("sandbox", id.as_str()),
            PublicationScope::Workspace(name) => ("workspace", name.as_str()),
            PublicationScope::Global => ("global", ""),
            PublicationScope::Provider(id) => ("provider", id.as_str()),
        };
        let components: Vec<&str> = self.components.iter().map(|c| c.as_str()).collect();
        Ok(tx
            .insert_fanout_intent(scope, scope_id, &components, operation_id)
            .await?)
    }

    /// The publication an intent records; None for one this replica does not understand
    /// (written by a newer one).
    pub fn from_intent(intent: &FanoutIntent) -> Option<Self> {
        let scope = match intent.scope.as_str() {
            "sandbox" => PublicationScope::Sandbox(intent.scope_id.clone()),
            "workspace" => PublicationScope::Workspace(intent.scope_id.clone()),
            "provider" => PublicationScope::Provider(intent.scope_id.clone()),
            "global" => PublicationScope::Global,
            _ => return None,
        };
        let components = intent
            .components
            .split(',')
            .map(|name| Component::ALL.into_iter().find(|c| c.as_str() == name))
            .collect::<Option<Vec<_>>>()?;
        (!components.is_empty()).then_some(Self { scope, components })
    }
}

/// The push sessions of this replica, by sandbox.
#[derive(Debug, Default, Clone)]
pub struct Publisher {
    /// Every open push delivery of a sandbox, oldest first: usually one, two
    /// while a new session of the sandbox replaces an old one.
    ///
    /// Ordered by sandbox id, so a fanout wakes its sessions, and their
    /// acknowledgements come back, in id order: each batch of acks the
    /// resolver writes then touches neighbouring rows of the id-keyed
    /// tables. In hash order every ack of a batch dirtied a page of its own,
    /// and a 10k fanout's ack batches cost the SQLite writer four times the
    /// work (page writes to the WAL, index pages out of cache).
    sessions: Arc<Mutex<BTreeMap<String, Vec<Arc<SessionDelivery>>>>>,
}

impl Publisher {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<Arc<SessionDelivery>>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a session's delivery beside any other of its sandbox. Which of
    /// two sessions lives is the session registry's decision, made when one
    /// is accepted, and each closes and unregisters its own delivery: when
    /// the newer one replaced the older here, two sessions opening at once
    /// could leave the one accepted last with its delivery closed by the
    /// other, and no write reached it again.
    pub fn register(&self, delivery: Arc<SessionDelivery>) {
        self.lock()
            .entry(delivery.sandbox_id.clone())
            .or_default()
            .push(delivery);
    }

    pub fn unregister(&self, delivery: &SessionDelivery) {
        let mut map = self.lock();
        if let Some(open) = map.get_mut(&delivery.sandbox_id) {
            open.retain(|d| d.session_id != delivery.session_id);
            if open.is_empty() {
                map.remove(&delivery.sandbox_id);
            }
        }
    }

    /// The sandbox's newest open delivery.
    pub fn get(&self, sandbox_id: &str) -> Option<Arc<SessionDelivery>> {
        self.lock()
            .get(sandbox_id)
            .and_then(|open| open.last().cloned())
    }

    /// Every open delivery of the sandbox.
    fn all_of(&self, sandbox_id: &str) -> Vec<Arc<SessionDelivery>> {
        self.lock().get(sandbox_id).cloned().unwrap_or_default()
    }

    /// Calls `f` with every open delivery, under the publisher's lock: `f`
    /// must not register, unregister or publish.
    pub(super) fn for_each(&self, mut f: impl FnMut(&Arc<SessionDelivery>)) {
        for delivery in self.lock().values().flatten() {
            f(delivery);
        }
    }

    /// The open deliveries `keep` accepts, in sandbox id order.
    fn in_id_order(&self, keep: impl Fn(&SessionDelivery) -> bool) -> Vec<Arc<SessionDelivery>> {
        self.lock()
            .values()
            .flatten()
            .filter(|d| keep(d))
            .cloned()
            .collect()
    }

    /// Sandboxes with an open delivery.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Components of this replica's push sessions marked for a rebuild and
    /// not built yet (see [`SessionDelivery::pending_marks`]), summed.
    pub fn pending_marks(&self) -> usize {
        let sessions: Vec<_> = self.lock().values().flatten().cloned().collect();
        sessions.iter().map(|d| d.pending_marks()).sum()
    }

    /// Marks the affected sessions; returns how many were marked.
    pub async fn publish(&self, store: &Store, publication: &Publication) -> usize {
        if self.is_empty() {
            return 0;
        }
        let targets: Vec<Arc<SessionDelivery>> = match &publication.scope {
            PublicationScope::Sandbox(id) => self.all_of(id),
            PublicationScope::Workspace(ws) => self.in_id_order(|d| &d.workspace == ws),
            PublicationScope::Global => self.in_id_order(|_| true),
            PublicationScope::Provider(provider_id) => {
                match store.attaching_sandboxes(provider_id).await {
                    Ok(ids) => ids.iter().flat_map(|id| self.all_of(id)).collect(),
                    Err(e) => {
                        // Reconcile repairs what this misses.
                        tracing::warn!(error = %e, provider = %provider_id, "cannot resolve provider fanout");
                        Vec::new()
                    }
                }
            }
        };
        let lane = match publication.scope {
            PublicationScope::Sandbox(_) => Lane::Sandbox,
            _ => Lane::Fanout,
        };
        let mark = Mark::new(&publication.components, lane);
        let marked = targets.len();
        if lane == Lane::Fanout && marked > WAKES_PER_ROUND {
            for delivery in &targets {
                delivery.merge_mark(mark, true);
            }
            // Detached: a caller that stops waiting leaves no session marked
            // yet asleep.
            let woken = tokio::spawn(wake_in_rounds(targets, |delivery| delivery.wake()));
            if let Err(e) = woken.await {
                tracing::error!(error = %e, "fanout wake-up task failed");
            }
        } else {
            for delivery in &targets {
                delivery.mark(mark, true);
            }
        }
        marked
    }
}

/// Delivery tasks a fanout wakes before it lets the runtime run others.
/// Woken all at once, a 10k fanout's tasks filled the runtime's queues, and
/// whatever woke after them (a sandbox write's commit or ack) waited until
/// all 10k had run once; woken in rounds, the queue stays short.
pub const WAKES_PER_ROUND: usize = 64;

async fn wake_in_rounds<T>(targets: Vec<T>, wake: impl Fn(&T)) {
    for round in targets.chunks(WAKES_PER_ROUND) {
        for target in round {
            wake(target);
        }
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn delivery(session_id: &str) -> Arc<SessionDelivery> {
        Arc::new(SessionDelivery::new(
            "sb".into(),
            session_id.into(),
            "default".into(),
            1,
            true,
        ))
    }

    /// Two sessions of one sandbox open at once (a reconnect racing its old
    /// connection, or two processes with one credential): the second to
    /// open is accepted first and then replaced by the first, whose
    /// delivery must still get every write once the second has gone. Chaos
    /// found the session left without pushes for good when a newer
    /// registration closed and displaced the older delivery.
    #[tokio::test]
    #[allow(clippy::unwrap_used)]
    async fn a_session_outlasting_a_later_opened_one_of_its_sandbox_still_gets_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite_for_tests(dir.path()).await;
        let publisher = Publisher::default();
        let (first, second) = (delivery("ss-1"), delivery("ss-2"));
        publisher.register(first.clone());
        publisher.register(second.clone());
        // The registry accepts the first last and closes the second, which
        // tears its own delivery down.
        second.close();
        publisher.unregister(&second);

        let write = Publication::sandbox("sb", &[Component::SandboxConfig]);
        assert_eq!(publisher.publish(&store, &write).await, 1);
        assert!(!first.is_closed());
        assert_eq!(first.pending_marks(), 1);
        assert_eq!(
            publisher.get("sb").map(|d| d.session_id.clone()),
            Some("ss-1".into())
        );

        publisher.unregister(&first);
        assert!(publisher.is_empty());
        assert_eq!(publisher.publish(&store, &write).await, 0);
    }

    /// Acks come back in about the order a fanout woke the sessions, and
    /// the resolver writes them in batches: in sandbox id order a batch
    /// touches neighbouring rows (see [`Publisher`]).
    #[test]
    fn a_fanout_goes_through_the_sessions_in_sandbox_id_order() {
        let publisher = Publisher::default();
        let mut ids: Vec<String> = (0..200)
            .map(|n| format!("sb-{:03}", (n * 7919) % 200))
            .collect();
        for id in &ids {
            publisher.register(Arc::new(SessionDelivery::new(
                id.clone(),
                format!("ss-{id}"),
                "default".into(),
                1,
                true,
            )));
        }
        let visited: Vec<String> = publisher
            .in_id_order(|_| true)
            .iter()
            .map(|d| d.sandbox_id.clone())
            .collect();
        ids.sort();
        assert_eq!(visited, ids);
    }

    /// Another task runs between two rounds of a fanout's wake-ups: what
    /// wakes during a fanout does not wait until all of it has woken.
    #[tokio::test(flavor = "current_thread")]
    async fn a_fanout_wakes_its_sessions_in_rounds_and_lets_others_run_between() {
        let targets = 5 * WAKES_PER_ROUND;
        let woken = Arc::new(AtomicUsize::new(0));
        let waking = tokio::spawn({
            let woken = woken.clone();
            wake_in_rounds(vec![(); targets], move |()| {
                woken.fetch_add(1, Ordering::SeqCst);
            })
        });
        let mut seen = Vec::new();
        while !waking.is_finished() {
            seen.push(woken.load(Ordering::SeqCst));
            tokio::task::yield_now().await;
        }
        waking.await.unwrap();
        assert_eq!(woken.load(Ordering::SeqCst), targets);
        assert!(
            seen.iter().any(|&n| 0 < n && n < targets),
            "nothing ran between the rounds: {seen:?}"
        );
        assert!(seen.iter().all(|&n| n % WAKES_PER_ROUND == 0), "{seen:?}");
    }
}
