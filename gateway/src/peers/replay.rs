//! Replaying the other replicas' fanout intents: every few seconds a
//! replica on PostgreSQL reads the intents recorded since its last pass and
//! marks its own sessions for those another replica wrote, as the hint
//! would have. Hints make a change arrive at once; the replay makes it
//! arrive when a hint was lost (no peer secret, a peer restarting, a
//! network split). Marking a session twice costs a rebuild, not a resend:
//! an unchanged snapshot is not sent again.

use std::time::Duration;

use super::PeerContext;
use crate::delivery::Publication;
use crate::store::Store;
use crate::store::{duration_ms, now_ms};

/// Intents younger than this wait for the next pass: ids are taken at
/// insert and rows become visible at commit, so a younger intent may still
/// be joined by an older id committed a moment later.
pub const REPLAY_LAG: Duration = Duration::from_secs(1);
/// Intents older than this are removed.
pub const INTENT_RETENTION: Duration = Duration::from_secs(10 * 60);
/// Intents read per statement.
const REPLAY_BATCH: i64 = 1000;

/// Replays intents from the newest at start on, until the task is dropped.
pub async fn run(state: PeerContext) {
    // Sessions accepted from now on bootstrap from the store: older intents
    // concern no session of this replica.
    let mut watermark = loop {
        match state.store.latest_fanout_intent().await {
            Ok(latest) => break latest,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the fanout intents; retrying");
                tokio::time::sleep(state.tuning.intent_replay_interval).await;
            }
        }
    };
    let mut tick = tokio::time::interval(state.tuning.intent_replay_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match replay_from(&state, watermark).await {
            Ok(next) => watermark = next,
            // The owner's reconcile repairs what this misses meanwhile.
            Err(e) => tracing::warn!(error = %e, "fanout intent replay failed; retrying"),
        }
    }
}

/// Marks this replica's sessions for the other replicas' intents after
/// `watermark`; returns the new watermark.
async fn replay_from(state: &PeerContext, mut watermark: i64) -> crate::error::Result<i64> {
    let until = now_ms().saturating_sub(duration_ms(REPLAY_LAG));
    loop {
        let intents = state
            .store
            .fanout_intents_after(watermark, until, REPLAY_BATCH)
            .await?;
        for intent in &intents {
            watermark = intent.id;
            if intent.replica_id == state.config.replica_id {
                continue;
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
        if i64::try_from(intents.len()).unwrap_or(i64::MAX) < REPLAY_BATCH {
            return Ok(watermark);
        }
    }
}

/// Removes intents past [`INTENT_RETENTION`].
pub async fn remove_old_intents(store: &Store) {
    let before = now_ms().saturating_sub(duration_ms(INTENT_RETENTION));
    match store.remove_fanout_intents_before(before).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(removed = n, "old fanout intents removed"),
        Err(e) => tracing::warn!(error = %e, "fanout intent removal failed"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::delivery::{Component, PublicationScope};
    use crate::store::FanoutIntent;

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
