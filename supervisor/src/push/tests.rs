use std::sync::Arc;
use std::time::Duration;

use openshell_core::Secret;
use tokio::sync::watch;

use super::*;
use crate::MemoryApplier;
use crate::desired::tests::sample;
use crate::status::SupervisorStatus;

fn engine(applier: Arc<MemoryApplier>) -> Engine {
    let (status, _) = watch::channel(SupervisorStatus::default());
    Engine::new(
        applier,
        "sb-1".into(),
        Secret::new("cred-abcdef"),
        None,
        Duration::from_secs(10),
        crate::BackoffConfig::apply_retry(),
        status,
    )
}

fn config_update(seq: u64, policy_revision: u64, env_rev: &str) -> ConfigUpdate {
    let d = sample(policy_revision, env_rev);
    ConfigUpdate {
        delivery_id: 100 + seq,
        sequence: seq,
        component: ConfigComponent::SandboxConfig as i32,
        fingerprint: format!("cfg-{policy_revision}-{env_rev}"),
        snapshot: Some(Snapshot::SandboxConfig(
            openshell_proto::v1::SandboxConfigSnapshot::from_response(&d.to_response()),
        )),
    }
}

fn env_update(seq: u64, env_rev: &str) -> ConfigUpdate {
    let d = sample(1, env_rev);
    ConfigUpdate {
        delivery_id: 100 + seq,
        sequence: seq,
        component: ConfigComponent::ProviderEnvironment as i32,
        fingerprint: format!("env-{env_rev}"),
        snapshot: Some(Snapshot::ProviderEnvironment(d.provider_env)),
    }
}

/// The answer to an update; while not shutting down there always is one.
async fn answered(state: &mut PushState, e: &Engine, update: ConfigUpdate) -> ConfigUpdateResult {
    handle_update(state, e, update)
        .await
        .expect("an update is answered while not shutting down")
}

/// The answer to a bootstrap; while not shutting down there always is one.
async fn bootstrap_answer(
    e: &Engine,
    config: Option<&ConfigUpdate>,
    env: Option<&ConfigUpdate>,
) -> (PushState, BootstrapResult) {
    apply_bootstrap(e, config, env)
        .await
        .expect("a bootstrap is answered while not shutting down")
}

fn status_of(r: &ConfigUpdateResult) -> ConfigApplyStatus {
    r.status()
}

async fn bootstrapped(applier: Arc<MemoryApplier>) -> (Engine, PushState) {
    let e = engine(applier);
    let (state, result) = bootstrap_answer(
        &e,
        Some(&config_update(1, 1, "e1")),
        Some(&env_update(2, "e1")),
    )
    .await;
    assert!(result.applied, "{}", result.reason);
    assert_eq!(result.revisions.as_ref().unwrap().policy_revision, 1);
    (e, state)
}

#[tokio::test]
async fn stale_sequence_is_ignored() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    let r = answered(&mut state, &e, config_update(2, 5, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Stale);
    assert_eq!(r.delivery_id, 102);
    assert_eq!(r.revisions.unwrap().policy_revision, 5);
    assert_eq!(applier.apply_count(), 1);

    let r = answered(&mut state, &e, config_update(3, 5, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);
    let r = answered(&mut state, &e, config_update(3, 6, "e1")).await;
    assert_eq!(
        status_of(&r),
        ConfigApplyStatus::Stale,
        "equal sequence is stale too"
    );
}

#[tokio::test]
async fn same_fingerprint_as_active_is_duplicate() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    let r = answered(&mut state, &e, config_update(5, 1, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Duplicate);
    let r = answered(&mut state, &e, env_update(6, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Duplicate);
    assert_eq!(r.component(), ConfigComponent::ProviderEnvironment);
    assert_eq!(applier.apply_count(), 1);
}

#[tokio::test]
async fn waits_for_matching_pair_then_applies() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;

    // New provider env first: the active config still expects e1.
    let r = answered(&mut state, &e, env_update(3, "e2")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::AwaitingComponent);
    assert_eq!(r.revisions.unwrap().provider_env_revision, "e2");
    assert_eq!(applier.apply_count(), 1);

    // The config that expects e2 completes the pair.
    let r = answered(&mut state, &e, config_update(4, 2, "e2")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);
    assert_eq!(r.delivery_id, 104);
    let revs = r.revisions.unwrap();
    assert_eq!(revs.policy_revision, 2);
    assert_eq!(revs.provider_env_revision, "e2");
    let active = applier.active().unwrap();
    assert_eq!(active.sandbox_config.policy_revision, 2);
    assert_eq!(active.provider_env.provider_env_fingerprint, "e2");

    // Config ahead of its env: awaiting, then the env completes it.
    let r = answered(&mut state, &e, config_update(5, 3, "e3")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::AwaitingComponent);
    let r = answered(&mut state, &e, env_update(6, "e3")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);
    assert_eq!(r.component(), ConfigComponent::ProviderEnvironment);
    assert_eq!(r.revisions.unwrap().policy_revision, 3);
    // The pair was completed from the config kept while it waited: its policy too.
    assert_eq!(applier.active().unwrap().policy(), sample(3, "e3").policy());
    assert!(applier.active().unwrap().policy().is_some());
}

/// `config_update` with the example policy in place of the sample's.
fn example_policy_update(seq: u64, policy_revision: u64) -> ConfigUpdate {
    let mut d = sample(policy_revision, "e1");
    let example =
        openshell_core::parse_and_validate(include_str!("../../../examples/policy.yaml")).unwrap();
    crate::desired::tests::set_policy(&mut d, &example);
    ConfigUpdate {
        snapshot: Some(Snapshot::SandboxConfig(
            openshell_proto::v1::SandboxConfigSnapshot::from_response(&d.to_response()),
        )),
        ..config_update(seq, policy_revision, "e1")
    }
}

/// Updates that change settings or revisions but carry the same policy bytes share the
/// policy decoded before; new bytes are decoded.
#[tokio::test]
async fn a_policy_whose_bytes_did_not_change_is_shared_not_decoded_again() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    let bootstrapped_policy = applier.active().unwrap().shared_policy().unwrap().clone();

    let r = answered(&mut state, &e, config_update(3, 2, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);
    let active = applier.active().unwrap();
    assert_eq!(active.sandbox_config.policy_revision, 2);
    assert!(Arc::ptr_eq(
        active.shared_policy().unwrap(),
        &bootstrapped_policy
    ));

    let r = answered(&mut state, &e, example_policy_update(4, 3)).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied, "{}", r.reason);
    let active = applier.active().unwrap();
    let example =
        openshell_core::parse_and_validate(include_str!("../../../examples/policy.yaml")).unwrap();
    assert_eq!(
        active.policy(),
        Some(&openshell_proto::sandbox::v1::SandboxPolicy::from(&example))
    );
    assert!(!Arc::ptr_eq(
        active.shared_policy().unwrap(),
        &bootstrapped_policy
    ));
    // Back to the sample's policy: decoded again, equal to the first.
    let r = answered(&mut state, &e, config_update(5, 4, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);
    let back = applier.active().unwrap().shared_policy().unwrap().clone();
    assert!(!Arc::ptr_eq(&back, &bootstrapped_policy));
    assert_eq!(back, bootstrapped_policy);
}

#[tokio::test]
async fn a_rejected_policy_keeps_last_good_and_stays_parked() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    applier.set_failure(Some("on-apply hook exited with status 3".into()));
    // Only the policy differs from what is in effect: the policy is what was refused.
    let r = answered(&mut state, &e, config_update(3, 2, "e1")).await;
    assert_eq!(
        status_of(&r),
        ConfigApplyStatus::RetainedLastKnownGoodPolicy
    );
    assert_eq!(
        r.reason,
        "policy revision 2 was rejected: on-apply hook exited with status 3; fix it first"
    );
    assert_eq!(r.revisions.as_ref().unwrap().policy_revision, 2);
    assert!(!r.failed_closed);
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);
    applier.set_failure(None);

    // Not active, so the same snapshot again is not a duplicate, but the rejected policy is
    // parked: it is not tried again, and the answer says so again.
    let applies = applier.apply_count();
    let r = answered(&mut state, &e, config_update(4, 2, "e1")).await;
    assert_eq!(
        status_of(&r),
        ConfigApplyStatus::RetainedLastKnownGoodPolicy
    );
    assert_eq!(applier.apply_count(), applies);

    // A provider change applies, with the last-known-good policy.
    let r = answered(&mut state, &e, config_update(5, 2, "e2")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::AwaitingComponent);
    let r = answered(&mut state, &e, env_update(6, "e2")).await;
    assert_eq!(
        status_of(&r),
        ConfigApplyStatus::RetainedLastKnownGoodPolicy
    );
    let active = applier.active().unwrap();
    assert_eq!(active.sandbox_config.policy_revision, 1);
    assert_eq!(active.provider_env.provider_env_fingerprint, "e2");

    // A different policy is tried, and applies.
    let r = answered(&mut state, &e, config_update(7, 3, "e2")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 3);
}

#[tokio::test]
async fn a_change_that_fails_with_the_last_good_policy_too_is_failed() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    applier.set_failure(Some("on-apply hook exited with status 3".into()));
    // Policy and provider environment change together and both fail: nothing to blame on the
    // policy alone.
    answered(&mut state, &e, config_update(3, 2, "e2")).await;
    let r = answered(&mut state, &e, env_update(4, "e2")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Failed);
    assert_eq!(r.reason, "on-apply hook exited with status 3");
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);
}

#[tokio::test]
async fn a_refused_bootstrap_keeps_the_last_good_running() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    applier.set_failure(Some("on-apply hook exited with status 3".into()));
    answered(&mut state, &e, config_update(3, 2, "e1")).await;
    // A new session (after a gateway restart) bootstraps the rejected revision.
    let (_, r) = bootstrap_answer(
        &e,
        Some(&config_update(1, 2, "e1")),
        Some(&env_update(2, "e1")),
    )
    .await;
    assert!(!r.applied);
    assert!(r.policy_rejected && r.kept_last_known_good);
    assert!(
        r.reason.starts_with("policy revision 2 was rejected"),
        "{}",
        r.reason
    );
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);

    // With nothing in effect, a refused bootstrap keeps nothing.
    let fresh = Arc::new(MemoryApplier::failing("on-apply hook exited with status 3"));
    let (_, r) = bootstrap_answer(
        &engine(fresh),
        Some(&config_update(1, 1, "e1")),
        Some(&env_update(2, "e1")),
    )
    .await;
    assert!(!r.applied && !r.kept_last_known_good && !r.policy_rejected);
}

#[tokio::test]
async fn mismatched_component_is_failed() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    let mut u = env_update(3, "e2");
    u.component = ConfigComponent::SandboxConfig as i32;
    let r = answered(&mut state, &e, u).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Failed);
}

#[tokio::test]
async fn a_pushed_policy_that_does_not_decode_is_failed_and_changes_nothing() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    let applied = applier.apply_count();
    let mut u = config_update(3, 2, "e1");
    if let Some(Snapshot::SandboxConfig(c)) = &mut u.snapshot {
        // Field 1 of a SandboxPolicy with a truncated length: not a message.
        c.policy = prost::bytes::Bytes::from_static(&[0x0a, 0x7f]);
    }
    let r = answered(&mut state, &e, u).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Failed);
    assert!(r.reason.contains("does not decode"), "{}", r.reason);
    assert_eq!(applier.apply_count(), applied);
}

#[tokio::test]
async fn bootstrap_problems_are_reported_not_applied() {
    let applier = Arc::new(MemoryApplier::new());
    let e = engine(applier.clone());
    let (_, r) = bootstrap_answer(&e, Some(&config_update(1, 1, "e1")), None).await;
    assert!(!r.applied);
    assert!(r.reason.contains("incomplete"), "{}", r.reason);
    let (_, r) = bootstrap_answer(
        &e,
        Some(&config_update(1, 1, "e1")),
        Some(&env_update(2, "e9")),
    )
    .await;
    assert!(!r.applied);
    assert!(r.reason.contains("disagree"), "{}", r.reason);
    assert_eq!(applier.apply_count(), 0);
}

#[tokio::test]
async fn new_session_starts_sequences_fresh() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    let r = answered(&mut state, &e, config_update(50, 2, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);

    // Reconnect: the bootstrap restarts at sequence 1 and is not stale.
    let (mut state, result) = bootstrap_answer(
        &e,
        Some(&config_update(1, 2, "e1")),
        Some(&env_update(2, "e1")),
    )
    .await;
    assert!(result.applied);
    assert_eq!(
        applier.apply_count(),
        2,
        "unchanged bootstrap is not re-applied"
    );
    let r = answered(&mut state, &e, config_update(3, 3, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Applied);
}

/// After SIGTERM a pushed change is neither applied nor answered (an answer would say
/// APPLIED or FAILED for a sandbox that is going away; without one the gateway keeps the
/// operation pending and delivers the configuration to the next session), and a bootstrap
/// is not answered either (a refused one would be parked by the gateway).
#[tokio::test]
async fn while_shutting_down_updates_and_bootstraps_are_not_applied_nor_answered() {
    let applier = Arc::new(MemoryApplier::new());
    let (e, mut state) = bootstrapped(applier.clone()).await;
    e.begin_shutdown();
    assert_eq!(
        handle_update(&mut state, &e, config_update(3, 2, "e1")).await,
        None
    );
    assert!(
        apply_bootstrap(
            &e,
            Some(&config_update(4, 3, "e1")),
            Some(&env_update(5, "e1")),
        )
        .await
        .is_none()
    );
    assert_eq!(
        applier.apply_count(),
        1,
        "only the bootstrap before it applied"
    );
    assert_eq!(applier.active().unwrap().sandbox_config.policy_revision, 1);
    // What was active is still answered as it is: a duplicate is not an apply.
    let r = answered(&mut state, &e, config_update(6, 1, "e1")).await;
    assert_eq!(status_of(&r), ConfigApplyStatus::Duplicate);
}
