//! Replaying the other replicas' fanout intents: every few seconds a
//! replica on PostgreSQL reads the intents recorded since its last pass and
//! marks its own sessions for those another replica wrote, as the hint
//! would have. Hints make a change arrive at once; the replay makes it
//! arrive when a hint was lost (no peer secret, a peer restarting, a
//! network split). Marking a session twice costs a rebuild, not a resend:
//! an unchanged snapshot is not sent again.
//!
//! The watermark, the last intent before which none is missing, is saved in
//! the store after each pass that moves it, so a restarted replica resumes
//! there: intents committed while it was down or starting (one whose id
//! was taken before its start and whose commit came after, say) are replayed
//! too, instead of being skipped by starting after the newest one.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{PeerContext, REPLICA_FORGOTTEN_AFTER};
use crate::delivery::Publication;
use crate::error::Result;
use crate::store::{FanoutIntent, Store};
use crate::store::{duration_ms, now_ms};

/// How long an id missing below a replayed one is looked for again. Ids are taken at insert
/// and rows become visible at commit, so a write that took its id first can commit after one
/// that took a later id (a slow commit, a busy machine): its intent shows up late and is
/// replayed then. An id missing this long was rolled back (or skipped by the sequence).
pub const MISSING_ID_GIVE_UP: Duration = Duration::from_secs(5 * 60);
/// Missing ids looked for at most: a larger jump of the sequence (ids cached by a session
/// that ended) is not waited for beyond these.
const MISSING_IDS_TRACKED: usize = 4096;
/// Intents older than this are removed.
pub const INTENT_RETENTION: Duration = Duration::from_secs(10 * 60);
/// Intents read per statement.
const REPLAY_BATCH: i64 = 1000;

/// A saved watermark is saved again at least this often while no intent
/// moves it, so the row of a live replica never looks forgotten.
const WATERMARK_REFRESH: Duration = Duration::from_secs(60);

/// How far the replay has come. Every intent up to `watermark` is replayed; above it, up to
/// `highest`, every one but the `missing` ids, each with when it was first missed.
#[derive(Debug)]
pub struct ReplayCursor {
    watermark: i64,
    highest: i64,
    missing: BTreeMap<i64, Instant>,
    give_up_after: Duration,
}

impl ReplayCursor {
    /// A replay that has seen every intent up to `watermark`.
    pub fn after(watermark: i64) -> Self {
        Self::with_give_up(watermark, MISSING_ID_GIVE_UP)
    }

    pub fn with_give_up(watermark: i64, give_up_after: Duration) -> Self {
        Self {
            watermark,
            highest: watermark,
            missing: BTreeMap::new(),
            give_up_after,
        }
    }

    /// The last intent before which nothing is missing: where a restart resumes.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Ids below a replayed one not seen yet.
    pub fn missing(&self) -> usize {
        self.missing.len()
    }

    fn note_seen(&mut self, id: i64, now: Instant) {
        if id > self.highest {
            let room = MISSING_IDS_TRACKED.saturating_sub(self.missing.len());
            for skipped in (self.highest + 1..id).take(room) {
                self.missing.insert(skipped, now);
            }
            self.highest = id;
        } else {
            self.missing.remove(&id);
        }
    }

    fn settle(&mut self, now: Instant) {
        let give_up = self.give_up_after;
        self.missing
            .retain(|_, since| now.saturating_duration_since(*since) < give_up);
        self.watermark = self
            .missing
            .keys()
            .next()
            .map_or(self.highest, |first| first - 1);
    }
}

/// Replays intents from where this replica stopped (see [`resume_point`]),
/// saving the watermark as it goes, until the task is dropped.
pub async fn run(state: PeerContext) {
    let replica_id = state.config.replica_id.as_str();
    let mut cursor = loop {
        match resume_point(&state.store, replica_id).await {
            Ok(start) => break ReplayCursor::after(start),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the fanout intents; retrying");
                tokio::time::sleep(state.tuning.intent_replay_interval).await;
            }
        }
    };
    let mut saved: Option<(i64, Instant)> = None;
    let mut tick = tokio::time::interval(state.tuning.intent_replay_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // The owner's reconcile repairs what a failed pass misses meanwhile.
        if let Err(e) = replay_pass(&state, &mut cursor).await {
            tracing::warn!(error = %e, "fanout intent replay failed; retrying");
        }
        let watermark = cursor.watermark();
        let due =
            saved.is_none_or(|(at, when)| at != watermark || when.elapsed() >= WATERMARK_REFRESH);
        if due {
            match state
                .store
                .save_fanout_watermark(replica_id, watermark)
                .await
            {
                Ok(()) => saved = Some((watermark, Instant::now())),
                // Saved on a later pass; a restart meanwhile replays a little more.
                Err(e) => tracing::warn!(error = %e, "cannot save the fanout watermark; retrying"),
            }
        }
    }
}

/// Where replica `replica_id` starts replaying: after the watermark it
/// saved before it stopped, or, without one (its first start, an id not
/// seen for [`REPLICA_FORGOTTEN_AFTER`]), after the newest intent: the
/// sessions it accepts from now on bootstrap from the store, so older
/// intents concern none of them. A saved watermark past the newest intent
/// (a store restored from an older backup) is not trusted.
pub async fn resume_point(store: &Store, replica_id: &str) -> Result<i64> {
    let latest = store.latest_fanout_intent().await?;
    match store.fanout_watermark(replica_id).await? {
        Some(saved) if saved <= latest => {
            tracing::info!(
                watermark = saved,
                latest,
                "replaying the fanout intents recorded after this replica's saved watermark"
            );
            Ok(saved)
        }
        Some(saved) => {
            tracing::warn!(
                watermark = saved,
                latest,
                "the saved fanout watermark is past the newest intent; starting after the newest"
            );
            Ok(latest)
        }
        None => Ok(latest),
    }
}

/// Marks this replica's sessions for the other replicas' intents committed since the last
/// pass: those after the highest id seen, and those that took a missing id and committed late.
pub async fn replay_pass(state: &PeerContext, cursor: &mut ReplayCursor) -> Result<()> {
    if !cursor.missing.is_empty() {
        let ids: Vec<i64> = cursor.missing.keys().copied().collect();
        for intent in state.store.fanout_intents_with_ids(&ids).await? {
            tracing::debug!(
                id = intent.id,
                "a fanout intent committed after later ones; replayed"
            );
            cursor.note_seen(intent.id, Instant::now());
            publish_intent(state, &intent).await;
        }
    }
    loop {
        let intents = state
            .store
            .fanout_intents_after(cursor.highest, REPLAY_BATCH)
            .await?;
        for intent in &intents {
            cursor.note_seen(intent.id, Instant::now());
            publish_intent(state, intent).await;
        }
        if i64::try_from(intents.len()).unwrap_or(i64::MAX) < REPLAY_BATCH {
            break;
        }
    }
    cursor.settle(Instant::now());
    Ok(())
}

async fn publish_intent(state: &PeerContext, intent: &FanoutIntent) {
    if intent.replica_id == state.config.replica_id {
        return;
    }
    match Publication::from_intent(intent) {
        Some(publication) => {
            state.publisher.publish(&state.store, &publication).await;
        }
        None => tracing::warn!(
            id = intent.id,
            scope = %intent.scope,
            components = %intent.components,
            "fanout intent not understood; skipped"
        ),
    }
}

/// Removes intents past [`INTENT_RETENTION`], and the watermarks of
/// replicas not seen for [`REPLICA_FORGOTTEN_AFTER`] (a replica started
/// under a new id each time leaves one behind per start).
pub async fn remove_old_intents(store: &Store) {
    let before = now_ms().saturating_sub(duration_ms(INTENT_RETENTION));
    match store.remove_fanout_intents_before(before).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(removed = n, "old fanout intents removed"),
        Err(e) => tracing::warn!(error = %e, "fanout intent removal failed"),
    }
    let forgotten = now_ms().saturating_sub(duration_ms(REPLICA_FORGOTTEN_AFTER));
    match store.remove_fanout_watermarks_before(forgotten).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(removed = n, "watermarks of forgotten replicas removed"),
        Err(e) => tracing::warn!(error = %e, "fanout watermark removal failed"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::GatewayConfig;
    use crate::delivery::{Component, PublicationScope, Publisher, SessionDelivery};
    use crate::store::FanoutIntent;

    /// Records an intent of `replica-a` for one sandbox, long enough ago to be replayed.
    async fn record_intent(store: &Store, sandbox: &str) {
        sqlx::query(
            "INSERT INTO fanout_intents (scope, scope_id, components, created_at, replica_id) \
             VALUES ('sandbox', $1, 'sandbox_config', 0, 'replica-a')",
        )
        .bind(sandbox)
        .execute(store.pool())
        .await
        .unwrap();
    }

    /// `replica_id`'s context, with a push session for each of `sandboxes`.
    fn replica(
        store: &Store,
        dir: &std::path::Path,
        replica_id: &str,
        sandboxes: &[&str],
    ) -> (PeerContext, Vec<Arc<SessionDelivery>>) {
        let mut config = GatewayConfig::for_data_dir(dir, "token");
        config.replica_id = replica_id.into();
        let publisher = Publisher::default();
        let sessions: Vec<_> = sandboxes
            .iter()
            .map(|id| {
                let session = Arc::new(SessionDelivery::new(
                    (*id).into(),
                    format!("ss-{id}"),
                    "default".into(),
                    1,
                    true,
                ));
                publisher.register(session.clone());
                session
            })
            .collect();
        let state = PeerContext {
            store: store.clone(),
            config: Arc::new(config),
            publisher,
            tuning: crate::delivery::DeliveryTuning::default(),
        };
        (state, sessions)
    }

    fn marked(session: &SessionDelivery) -> bool {
        let (components, _) = session.diagnostics();
        components
            .iter()
            .any(|(c, state)| *c == Component::SandboxConfig && state.dirty)
    }

    /// Intents committed while a replica was down are replayed after it restarts, from the
    /// watermark it saved, not skipped by starting after the newest intent; the watermark
    /// it saves then never moves back.
    #[tokio::test]
    async fn a_restarted_replica_replays_the_intents_after_its_saved_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite_for_tests(dir.path()).await;
        record_intent(&store, "sb-before").await;
        // replica-b replayed up to here, then stopped; these came while it was down.
        store.save_fanout_watermark("replica-b", 1).await.unwrap();
        record_intent(&store, "sb-1").await;
        record_intent(&store, "sb-2").await;
        assert_eq!(store.latest_fanout_intent().await.unwrap(), 3);

        // Restarted, with its sessions back.
        let (state, sessions) = replica(&store, dir.path(), "replica-b", &["sb-1", "sb-2"]);
        let start = resume_point(&store, "replica-b").await.unwrap();
        assert_eq!(
            start, 1,
            "resumes after its saved watermark, not the newest intent"
        );
        assert!(sessions.iter().all(|s| !marked(s)));
        let mut cursor = ReplayCursor::after(start);
        replay_pass(&state, &mut cursor).await.unwrap();
        assert_eq!(cursor.watermark(), 3);
        assert!(sessions.iter().all(|s| marked(s)), "both intents replayed");

        store.save_fanout_watermark("replica-b", 3).await.unwrap();
        store.save_fanout_watermark("replica-b", 2).await.unwrap();
        assert_eq!(store.fanout_watermark("replica-b").await.unwrap(), Some(3));
        // A replica that saved none starts after the newest intent.
        assert_eq!(resume_point(&store, "replica-c").await.unwrap(), 3);
        // One that saved a watermark past the newest intent is not trusted.
        store.save_fanout_watermark("replica-d", 99).await.unwrap();
        assert_eq!(resume_point(&store, "replica-d").await.unwrap(), 3);
    }

    /// Records intent `id` of `replica-a` for one sandbox, as a write that took that id commits.
    async fn commit_intent_with_id(store: &Store, id: i64, sandbox: &str) {
        sqlx::query(
            "INSERT INTO fanout_intents (id, scope, scope_id, components, created_at, replica_id) \
             VALUES ($1, 'sandbox', $2, 'sandbox_config', 0, 'replica-a')",
        )
        .bind(id)
        .bind(sandbox)
        .execute(store.pool())
        .await
        .unwrap();
    }

    /// A write that took its id before another's and committed after it (and after a pass
    /// replayed the later one) is replayed on the next pass; the watermark stays below its id
    /// until then, so a restart looks for it again. An id missing past the give-up time (a
    /// rolled-back write) no longer holds the watermark back.
    #[tokio::test]
    async fn an_intent_committed_after_a_later_one_is_still_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite_for_tests(dir.path()).await;
        let (state, sessions) = replica(&store, dir.path(), "replica-b", &["sb-1", "sb-2", "sb-3"]);
        let [first, late, after] = [0, 1, 2].map(|i| sessions[i].clone());

        commit_intent_with_id(&store, 1, "sb-1").await;
        commit_intent_with_id(&store, 3, "sb-3").await;
        let mut cursor = ReplayCursor::after(0);
        replay_pass(&state, &mut cursor).await.unwrap();
        assert!(marked(&first) && marked(&after));
        assert!(!marked(&late));
        assert_eq!(cursor.watermark(), 1, "intent 2 may still commit");
        assert_eq!(cursor.missing(), 1);

        commit_intent_with_id(&store, 2, "sb-2").await;
        replay_pass(&state, &mut cursor).await.unwrap();
        assert!(marked(&late), "the late intent is replayed");
        assert_eq!(cursor.watermark(), 3);
        assert_eq!(cursor.missing(), 0);

        // Intent 4 never commits: given up at once with a zero give-up time.
        let mut impatient = ReplayCursor::with_give_up(3, Duration::ZERO);
        commit_intent_with_id(&store, 5, "sb-1").await;
        replay_pass(&state, &mut impatient).await.unwrap();
        assert_eq!(impatient.watermark(), 5);
        assert_eq!(impatient.missing(), 0);
    }

    fn intent(scope: &str, scope_id: &str, components: &str) -> FanoutIntent {
        FanoutIntent {
            id: 1,
            scope: scope.into(),
            scope_id: scope_id.into(),
            components: components.into(),
            replica_id: "replica-b".into(),
        }
    }

    #[test]
    fn intents_read_back_as_the_publications_they_record() {
        let sandbox =
            Publication::from_intent(&intent("sandbox", "sb-1", "sandbox_config")).unwrap();
        assert_eq!(sandbox.scope, PublicationScope::Sandbox("sb-1".into()));
        assert_eq!(sandbox.components, vec![Component::SandboxConfig]);
        let provider = Publication::from_intent(&intent(
            "provider",
            "pr-1",
            "provider_environment,sandbox_config",
        ))
        .unwrap();
        assert_eq!(provider.scope, PublicationScope::Provider("pr-1".into()));
        assert_eq!(
            provider.components,
            vec![Component::ProviderEnvironment, Component::SandboxConfig]
        );
        assert_eq!(
            Publication::from_intent(&intent("global", "", "sandbox_config"))
                .unwrap()
                .scope,
            PublicationScope::Global
        );
        assert!(Publication::from_intent(&intent("cluster", "", "sandbox_config")).is_none());
        assert!(
            Publication::from_intent(&intent("sandbox", "sb-1", "sandbox_config,policy")).is_none()
        );
        assert!(Publication::from_intent(&intent("workspace", "default", "")).is_none());
    }
}
