//! The one snapshot builder. `sandbox_config` and `provider_environment`
//! are always complete snapshots of one component, built from the store at
//! build time, so a build reflects every write committed before it. The
//! poll RPCs and push delivery both project these, never their own copies.
//!
//! A stopped sandbox gets no snapshot at all, by poll, push or bootstrap: its
//! writes end INACTIVE ("takes effect when it starts"), and that must stay true
//! of what its supervisor holds. Starting it again publishes a rebuild.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use prost::bytes::Bytes;
use std::time::Duration;

use futures::future::BoxFuture;
use openshell_core::{Secret, settings};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use sha2::{Digest, Sha256};

use crate::delivery::activity::FanoutActivity;
use crate::delivery::marks::{Component, Lane};
use crate::encoded_policies;
use crate::error::{GatewayError, Result};
use crate::store::{
    ConfigInputRevisions, Lifecycle, OwnPolicy, PendingInputs, PolicyBody, ProviderRecord,
    ReadPriority, SandboxRecord, Store, now_ms,
};
use crate::wire;

/// Said to a stopped sandbox's supervisor when it asks for configuration.
pub const STOPPED_SANDBOX_REASON: &str = "the sandbox is stopped; the gateway delivers no \
     configuration until it is started again (`openshell sandbox start`)";

/// Said to a deleted sandbox's supervisor when its session is closed.
pub const DELETED_SANDBOX_REASON: &str =
    "the sandbox was deleted; the gateway delivers it nothing more and refuses its sessions";

/// A built snapshot, ready to be numbered and sent.
#[derive(Debug, Clone)]
pub struct Built {
    pub component: Component,
    pub update: pb::ConfigUpdate,
    pub fingerprint: String,
    /// Short revision summary for diagnostics (never values).
    pub summary: String,
    /// For `sandbox_config`: the tuple that operations are matched on.
    pub policy_revision: u64,
    pub settings_revision: u64,
    /// The provider environment revision this snapshot carries or expects.
    pub provider_env_revision: String,
    /// The build saw a `PENDING` sandbox operation, so sending it may deliver
    /// one; most sends (fanouts, reconcile) then skip the store entirely.
    pub pending_operation: bool,
    /// For `sandbox_config`: the revisions it was built from, which
    /// reconcile compares with the store's instead of rebuilding.
    pub input_revisions: Option<ConfigInputRevisions>,
}

/// Why a build failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BuildError {
    #[error("build exceeded its {0:?} deadline")]
    Deadline(Duration),
    #[error("{0}")]
    Store(String),
    /// The sandbox was stopped or deleted: its session must end (see [`ensure_deliverable`]).
    #[error("{0}")]
    Undeliverable(String),
}

/// Where snapshots come from, and who hears about deliveries. The gateway
/// uses [`StoreSource`]; scheduler tests use a fake.
pub trait SnapshotSource: Send + Sync + 'static {
    /// Starts a build. The scheduler calls this right after taking a mark
    /// and before waiting for a build permit, and polls the build once it
    /// holds one: a source may read its inputs in between (the store
    /// batches a fanout's reads), but only from this call on, so that the
    /// build reflects every write marked before. `lane` is the mark's.
    fn build<'a>(
        &'a self,
        sandbox_id: &'a str,
        component: Component,
        lane: Lane,
    ) -> BoxFuture<'a, Result<Built, BuildError>>;
    /// Called after a `sandbox_config` snapshot was handed to the session.
    fn delivered<'a>(&'a self, sandbox_id: &'a str, built: &'a Built) -> BoxFuture<'a, ()>;
    /// The current `sandbox_config` input revisions of these sandboxes, by
    /// id; one that does not exist is left out.
    fn input_revisions<'a>(
        &'a self,
        sandbox_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<HashMap<String, ConfigInputRevisions>, BuildError>>;
}

/// Refuses to build for a sandbox whose configuration must not reach its supervisor now.
fn ensure_deliverable(sandbox: &SandboxRecord) -> Result<()> {
    match sandbox.lifecycle {
        Lifecycle::Stopped => Err(GatewayError::Undeliverable(STOPPED_SANDBOX_REASON.into())),
        Lifecycle::Deleted => Err(GatewayError::Undeliverable(DELETED_SANDBOX_REASON.into())),
        Lifecycle::Pending | Lifecycle::Running => Ok(()),
    }
}

/// A build error as the delivery scheduler tells them apart.
fn build_error(error: GatewayError) -> BuildError {
    match error {
        GatewayError::Undeliverable(reason) => BuildError::Undeliverable(reason),
        other => BuildError::Store(other.to_string()),
    }
}

/// The `sandbox_config` component of one sandbox.
pub async fn build_sandbox_config(
    store: &Store,
    sandbox_id: &str,
) -> Result<sb::GetSandboxConfigResponse> {
    let read = store.request_sandbox_config_inputs(sandbox_id, ReadPriority::Foreground);
    let (mut snapshot, ..) = sandbox_config_from(store, sandbox_id, read).await?;
    // Sets `config_revision`, which upstream supervisors compare between polls.
    sandbox_config_fingerprint(&mut snapshot);
    snapshot
        .to_response()
        .map_err(|e| GatewayError::Corrupt(format!("a stored policy does not decode: {e}")))
}

/// [`build_sandbox_config`] from inputs already asked for, and whether a
/// sandbox operation was pending when they were read.
async fn sandbox_config_from(
    store: &Store,
    sandbox_id: &str,
    read: PendingInputs,
) -> Result<(pb::SandboxConfigSnapshot, bool, ConfigInputRevisions)> {
    let inputs = read.inputs(store).await?;
    ensure_deliverable(&inputs.sandbox)?;
    sandbox_config_of(sandbox_id, inputs)
}

/// The `sandbox_config` snapshot of inputs already read, whatever the sandbox's lifecycle.
fn sandbox_config_of(
    sandbox_id: &str,
    mut inputs: crate::store::SandboxConfigInputs,
) -> Result<(pb::SandboxConfigSnapshot, bool, ConfigInputRevisions)> {
    let revisions = inputs.revisions();
    let (policy, policy_hash, source) = match (&inputs.global_policy, inputs.own_policy.take()) {
        (Some(g), _) => (
            encoded_policies::encode(&g.policy_hash, &g.policy_json).map_err(corrupt_policy)?,
            g.policy_hash.clone(),
            sb::PolicySource::Global,
        ),
        (None, Some(OwnPolicy { hash, body })) => (
            match body {
                PolicyBody::Encoded(encoded) => encoded,
                PolicyBody::Json(json) => {
                    encoded_policies::encode(&hash, &json).map_err(corrupt_policy)?
                }
            },
            hash,
            sb::PolicySource::Sandbox,
        ),
        (None, None) => (Bytes::new(), String::new(), sb::PolicySource::Sandbox),
    };
    let sandbox = &inputs.sandbox;
    let effective = settings::effective(
        &inputs.global_settings.values,
        &inputs.workspace_settings.values,
        &inputs.sandbox_settings.values,
    );
    let failure_mode = effective
        .iter()
        .find(|e| e.key == "policy_validation_failure_mode")
        .map(|e| e.value.to_string())
        .unwrap_or_default();
    let provider_env = provider_env_revision_of(
        sandbox.attachment_epoch,
        &inputs.attached_provider_revisions,
    );
    let snapshot = pb::SandboxConfigSnapshot {
        policy,
        version: wire::version_u32(sandbox.policy_revision),
        policy_hash,
        settings: effective
            .iter()
            .map(|e| {
                (
                    e.key.clone(),
                    sb::EffectiveSetting {
                        value: Some(wire::sandbox_setting_value(&e.value)),
                        scope: wire::sandbox_setting_scope(e.source) as i32,
                    },
                )
            })
            .collect(),
        config_revision: 0,
        policy_source: source as i32,
        global_policy_version: match source {
            sb::PolicySource::Global => wire::version_u32(inputs.global_policy_revision),
            _ => 0,
        },
        provider_env_revision: wire::revision_number(&provider_env),
        supervisor_middleware_services: Vec::new(),
        workspace: sandbox.workspace.clone(),
        policy_validation_failure_mode: failure_mode,
        sandbox_id: sandbox_id.to_string(),
        policy_revision: sandbox.policy_revision,
        global_policy_revision: inputs.global_policy_revision,
        global_settings_revision: inputs.global_settings.revision,
        workspace_settings_revision: inputs.workspace_settings.revision,
        sandbox_settings_revision: inputs.sandbox_settings.revision,
        provider_env_fingerprint: provider_env,
        built_at: Some(wire::timestamp(now_ms())),
    };
    Ok((snapshot, inputs.pending_operation, revisions))
}

fn corrupt_policy(e: openshell_core::policy::PolicyError) -> GatewayError {
    GatewayError::Corrupt(e.to_string())
}

/// A cheap summary of the provider environment: the attachment epoch plus
/// every attached provider's revision. It changes whenever the environment
/// can, without opening any credential.
pub async fn provider_env_revision(
    store: &Store,
    sandbox_id: &str,
    attachment_epoch: u64,
) -> Result<String> {
    let attached = store
        .attached_provider_revisions(sandbox_id, attachment_epoch)
        .await?;
    Ok(provider_env_revision_of(attachment_epoch, &attached))
}

/// [`provider_env_revision`] from the attached `(provider id, revision)` pairs, by id.
pub fn provider_env_revision_of(attachment_epoch: u64, attached: &[(String, u64)]) -> String {
    let mut hasher = Sha256::new();
    for (id, revision) in attached {
        hasher.update(id.as_bytes());
        hasher.update(b":");
        hasher.update(revision.to_string().as_bytes());
        hasher.update(b";");
    }
    let digest = hex::encode(hasher.finalize());
    format!("e{attachment_epoch}-{}", &digest[..12])
}

/// The `provider_environment` component: env values and credentials of
/// every attached provider. Only ever sent to the sandbox it belongs to.
pub async fn build_provider_environment(
    store: &Store,
    sandbox_id: &str,
) -> Result<pb::GetSandboxProviderEnvironmentResponse> {
    let sandbox = store.get_sandbox(sandbox_id).await?;
    ensure_deliverable(&sandbox)?;
    let providers = store
        .attached_providers_with_credentials(sandbox_id)
        .await?;
    let fingerprint = provider_env_revision(store, sandbox_id, sandbox.attachment_epoch).await?;
    Ok(provider_environment_of(
        sandbox_id,
        sandbox.attachment_epoch,
        fingerprint,
        &providers,
    ))
}

/// The `provider_environment` snapshot of `providers` (attached, credentials opened, by
/// name) at `attachment_epoch`, whose revision is `fingerprint`.
fn provider_environment_of(
    sandbox_id: &str,
    attachment_epoch: u64,
    fingerprint: String,
    providers: &[(ProviderRecord, BTreeMap<String, Secret>)],
) -> pb::GetSandboxProviderEnvironmentResponse {
    let mut environment = BTreeMap::new();
    let mut sources = BTreeMap::new();
    let mut credential_expires_at_ms = BTreeMap::new();
    let mut expires_at: Option<i64> = None;
    for (provider, credentials) in providers {
        let source = |class: pb::ValueClass| pb::EnvValueSource {
            class: class as i32,
            provider: provider.name.clone(),
        };
        for (name, value) in &provider.env {
            environment.insert(name.clone(), value.clone());
            sources.insert(name.clone(), source(pb::ValueClass::NonSecret));
        }
        for (name, secret) in credentials {
            environment.insert(name.clone(), secret.expose().to_string());
            sources.insert(name.clone(), source(pb::ValueClass::Credential));
            if let Some(at) = provider.credential_expires_at(name) {
                credential_expires_at_ms.insert(name.clone(), at);
                expires_at = Some(expires_at.map_or(at, |e| e.min(at)));
            }
        }
        if let Some(at) = provider.expires_at {
            expires_at = Some(expires_at.map_or(at, |e| e.min(at)));
        }
    }
    pb::GetSandboxProviderEnvironmentResponse {
        environment,
        provider_env_revision: wire::revision_number(&fingerprint),
        credential_expires_at_ms,
        sandbox_id: sandbox_id.to_string(),
        provider_env_fingerprint: fingerprint,
        attachment_epoch,
        sources,
        expires_at: expires_at.map(wire::timestamp),
        built_at: Some(wire::timestamp(now_ms())),
    }
}

/// Sequence number of a session's first frame; the bootstrap's two frames are numbered
/// from it.
pub const FIRST_SEQUENCE: u64 = 1;

/// Bytes a bootstrap takes: its two frames as the session sends them. The one measure the
/// bootstrap limit is checked with, by the session before it sends one, and by every write
/// that changes what a sandbox's bootstrap holds, before it commits
/// ([`prospective_bootstrap_bytes`]).
pub fn bootstrap_bytes(config_frame: &pb::ConfigUpdate, env_frame: &pb::ConfigUpdate) -> usize {
    prost::Message::encoded_len(config_frame) + prost::Message::encoded_len(env_frame)
}

/// What a bootstrap built later may take beyond one built now of the same configuration:
/// its numbers (revisions, epoch, the revision numbers taken from fingerprints, build
/// time) are varints that may encode longer, up to 10 bytes each. A write is measured
/// with this added, so a bootstrap it let through is not refused for its size unless the
/// sandbox's policy or settings grew since (those writes are held to their own limits).
pub const BOOTSTRAP_GROWTH_BYTES: usize = 256;

/// A sandbox's `sandbox_config` as committed when it was read, whatever the sandbox's
/// lifecycle (a stopped sandbox gets its bootstrap when it starts): what a write that changes
/// the sandbox's provider environment measures the bootstrap it leads to with
/// ([`prospective_bootstrap_bytes`]). Read before the write's transaction begins: on
/// PostgreSQL a read from the pool inside it could wait for a connection that writes queued
/// behind the same sandbox hold.
#[derive(Debug, Clone)]
pub struct ConfigBase {
    snapshot: pb::SandboxConfigSnapshot,
    pending: bool,
    revisions: ConfigInputRevisions,
}

pub async fn config_base(store: &Store, sandbox_id: &str) -> Result<ConfigBase> {
    let read = store.request_sandbox_config_inputs(sandbox_id, ReadPriority::Foreground);
    let (snapshot, pending, revisions) = sandbox_config_of(sandbox_id, read.inputs(store).await?)?;
    Ok(ConfigBase {
        snapshot,
        pending,
        revisions,
    })
}

/// The size (as [`bootstrap_bytes`] counts it) of the bootstrap a sandbox would get with
/// `providers` (credentials opened, by name) attached at `attachment_epoch`, and `base` for
/// the rest. A write calls it inside its transaction, with the providers as that
/// transaction leaves them, and leaves [`BOOTSTRAP_GROWTH_BYTES`] spare.
pub fn prospective_bootstrap_bytes(
    base: &ConfigBase,
    attachment_epoch: u64,
    providers: &[(ProviderRecord, BTreeMap<String, Secret>)],
) -> usize {
    let mut revisions: Vec<(String, u64)> = providers
        .iter()
        .map(|(p, _)| (p.id.clone(), p.revision))
        .collect();
    revisions.sort();
    let fingerprint = provider_env_revision_of(attachment_epoch, &revisions);
    let mut config = base.snapshot.clone();
    config.provider_env_revision = wire::revision_number(&fingerprint);
    config.provider_env_fingerprint = fingerprint.clone();
    let sandbox_id = config.sandbox_id.clone();
    let env = provider_environment_of(&sandbox_id, attachment_epoch, fingerprint, providers);
    let config = sandbox_config_built(config, base.pending, Some(base.revisions.clone()));
    let env = provider_environment_built(env);
    let (config_frame, env_frame) = number_bootstrap(&config, &env, FIRST_SEQUENCE);
    bootstrap_bytes(&config_frame, &env_frame)
}

/// Encoded bytes of a provider environment of `providers` alone: what they add to any
/// sandbox's, up to the few bytes of its revision numbers. A write that does not make a
/// provider's part larger cannot make a bootstrap too large.
pub fn provider_environment_bytes(
    providers: &[(ProviderRecord, BTreeMap<String, Secret>)],
) -> usize {
    prost::Message::encoded_len(&provider_environment_of("", 0, String::new(), providers))
}

/// The bootstrap's frames, numbered from `first` as a session numbers them.
pub fn number_bootstrap(
    config: &Built,
    env: &Built,
    first: u64,
) -> (pb::ConfigUpdate, pb::ConfigUpdate) {
    let mut config_frame = config.update.clone();
    config_frame.sequence = first;
    config_frame.delivery_id = first;
    let mut env_frame = env.update.clone();
    env_frame.sequence = first + 1;
    env_frame.delivery_id = first + 1;
    (config_frame, env_frame)
}

/// Content fingerprint of a `sandbox_config` snapshot, so an unchanged
/// rebuild is recognised as a duplicate, and the `config_revision` upstream
/// supervisors compare, taken from it. Build time is left out, as the
/// supervisor's own fingerprint leaves it out. It is set aside during the
/// encoding and put back, which spares copying the snapshot on every build.
/// A policy with a hash is named by it: the hash is of the policy's content,
/// so hashing the policy's bytes as well (most of a snapshot, on every
/// build of every sandbox) would add nothing.
pub fn sandbox_config_fingerprint(s: &mut pb::SandboxConfigSnapshot) -> String {
    let built_at = s.built_at.take();
    s.config_revision = 0;
    let policy = (!s.policy_hash.is_empty()).then(|| std::mem::take(&mut s.policy));
    let fingerprint = fingerprint_of(&prost::Message::encode_to_vec(&*s));
    if let Some(policy) = policy {
        s.policy = policy;
    }
    s.built_at = built_at;
    s.config_revision = wire::revision_number(&fingerprint);
    fingerprint
}

/// Content fingerprint of a `provider_environment` snapshot (build time left
/// out, as for [`sandbox_config_fingerprint`]).
pub fn provider_environment_fingerprint(
    s: &mut pb::GetSandboxProviderEnvironmentResponse,
) -> String {
    let built_at = s.built_at.take();
    let fingerprint = fingerprint_of(&prost::Message::encode_to_vec(&*s));
    s.built_at = built_at;
    fingerprint
}

fn fingerprint_of(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

/// Starts building one component as a numbered-later `ConfigUpdate` with
/// its fingerprint and a value-free revision summary. The `sandbox_config`
/// inputs are asked for at once, not when the build is first polled, so
/// the build reflects every write committed before this call.
pub fn start_build<'a>(
    store: &'a Store,
    sandbox_id: &'a str,
    component: Component,
    priority: ReadPriority,
) -> BoxFuture<'a, Result<Built>> {
    match component {
        Component::SandboxConfig => {
            let read = store.request_sandbox_config_inputs(sandbox_id, priority);
            Box::pin(async move {
                let (snapshot, pending, revisions) =
                    sandbox_config_from(store, sandbox_id, read).await?;
                Ok(sandbox_config_built(snapshot, pending, Some(revisions)))
            })
        }
        Component::ProviderEnvironment => Box::pin(async move {
            let snapshot = build_provider_environment(store, sandbox_id).await?;
            Ok(provider_environment_built(snapshot))
        }),
    }
}

/// `pending_operation` and `input_revisions`: see [`Built`].
pub fn sandbox_config_built(
    mut snapshot: pb::SandboxConfigSnapshot,
    pending_operation: bool,
    input_revisions: Option<ConfigInputRevisions>,
) -> Built {
    let fingerprint = sandbox_config_fingerprint(&mut snapshot);
    let hash_prefix: String = snapshot.policy_hash.chars().take(12).collect();
    let summary = format!(
        "policy r{} {} (global r{}), settings g{}/w{}/s{}",
        snapshot.policy_revision,
        if hash_prefix.is_empty() {
            "-".to_string()
        } else {
            hash_prefix
        },
        snapshot.global_policy_revision,
        snapshot.global_settings_revision,
        snapshot.workspace_settings_revision,
        snapshot.sandbox_settings_revision,
    );
    Built {
        component: Component::SandboxConfig,
        policy_revision: snapshot.policy_revision,
        settings_revision: snapshot.sandbox_settings_revision,
        provider_env_revision: snapshot.provider_env_fingerprint.clone(),
        pending_operation,
        update: pb::ConfigUpdate {
            delivery_id: 0,
            sequence: 0,
            component: pb::ConfigComponent::SandboxConfig as i32,
            fingerprint: fingerprint.clone(),
            snapshot: Some(pb::config_update::Snapshot::SandboxConfig(snapshot)),
        },
        fingerprint,
        summary,
        input_revisions,
    }
}

pub fn provider_environment_built(
    mut snapshot: pb::GetSandboxProviderEnvironmentResponse,
) -> Built {
    let fingerprint = provider_environment_fingerprint(&mut snapshot);
    let summary = format!(
        "provider env {} ({} values)",
        snapshot.provider_env_fingerprint,
        snapshot.environment.len()
    );
    Built {
        component: Component::ProviderEnvironment,
        policy_revision: 0,
        settings_revision: 0,
        provider_env_revision: snapshot.provider_env_fingerprint.clone(),
        pending_operation: false,
        update: pb::ConfigUpdate {
            delivery_id: 0,
            sequence: 0,
            component: pb::ConfigComponent::ProviderEnvironment as i32,
            fingerprint: fingerprint.clone(),
            snapshot: Some(pb::config_update::Snapshot::ProviderEnvironment(snapshot)),
        },
        fingerprint,
        summary,
        input_revisions: None,
    }
}

/// Bootstrap: both components as a consistent pair. The provider revision
/// the config expects must match the environment built; a write between
/// the two builds is caught and the pair rebuilt, at most 3 times.
pub async fn build_bootstrap(
    store: &Store,
    sandbox_id: &str,
) -> Result<(Built, Built), BootstrapError> {
    let agreed = consistent_pair(|| async {
        // Only compared, never sent: no fingerprint, no upstream form.
        let read = store.request_sandbox_config_inputs(sandbox_id, ReadPriority::Foreground);
        let (config, ..) = sandbox_config_from(store, sandbox_id, read).await?;
        let env = build_provider_environment(store, sandbox_id).await?;
        let read = store.request_sandbox_config_inputs(sandbox_id, ReadPriority::Foreground);
        let (again, pending, again_revisions) =
            sandbox_config_from(store, sandbox_id, read).await?;
        Ok(Attempt {
            first: config,
            env,
            again,
            pending,
            again_revisions: Some(again_revisions),
        })
    })
    .await?;
    Ok((
        sandbox_config_built(agreed.again, agreed.pending, agreed.again_revisions),
        provider_environment_built(agreed.env),
    ))
}

/// Rebuilds after the first attempt whose halves disagree.
const MAX_BOOTSTRAP_REBUILDS: usize = 3;

/// One try at a bootstrap: the config read before and after the environment.
struct Attempt {
    first: pb::SandboxConfigSnapshot,
    env: pb::GetSandboxProviderEnvironmentResponse,
    again: pb::SandboxConfigSnapshot,
    /// Whether a sandbox operation was pending when `again` was read.
    pending: bool,
    /// The revisions `again` was built from.
    again_revisions: Option<ConfigInputRevisions>,
}

impl Attempt {
    fn consistent(&self) -> bool {
        self.first.provider_env_fingerprint == self.env.provider_env_fingerprint
            && self.again.provider_env_fingerprint == self.env.provider_env_fingerprint
            && self.again.policy_hash == self.first.policy_hash
    }
}

/// The first of `1 + MAX_BOOTSTRAP_REBUILDS` attempts whose halves agree.
async fn consistent_pair<F, Fut>(mut attempt: F) -> Result<Attempt, BootstrapError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt>>,
{
    for _ in 0..=MAX_BOOTSTRAP_REBUILDS {
        let tried = attempt().await?;
        if tried.consistent() {
            return Ok(tried);
        }
    }
    Err(BootstrapError::Inconsistent)
}

/// Why a bootstrap could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("configuration kept changing while the bootstrap was built; retry")]
    Inconsistent,
    #[error(transparent)]
    Store(#[from] crate::error::GatewayError),
}

/// The real source: the one snapshot builder over the store.
pub struct StoreSource {
    pub store: Store,
    pub activity: Arc<FanoutActivity>,
}

impl SnapshotSource for StoreSource {
    fn build<'a>(
        &'a self,
        sandbox_id: &'a str,
        component: Component,
        lane: Lane,
    ) -> BoxFuture<'a, Result<Built, BuildError>> {
        let priority = match lane {
            Lane::Sandbox => ReadPriority::Foreground,
            Lane::Fanout => ReadPriority::Background,
        };
        let build = start_build(&self.store, sandbox_id, component, priority);
        Box::pin(async move { build.await.map_err(build_error) })
    }

    fn delivered<'a>(&'a self, sandbox_id: &'a str, built: &'a Built) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Err(e) = self
                .store
                .mark_delivered(
                    self.activity.write_place(),
                    sandbox_id,
                    built.policy_revision,
                    built.settings_revision,
                )
                .await
            {
                tracing::warn!(error = %e, sandbox = %sandbox_id, "cannot mark operations delivered");
            }
        })
    }

    fn input_revisions<'a>(
        &'a self,
        sandbox_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<HashMap<String, ConfigInputRevisions>, BuildError>> {
        Box::pin(async move {
            self.store
                .config_input_revisions(sandbox_ids)
                .await
                .map_err(|e| BuildError::Store(e.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(env_fingerprint: &str, again_fingerprint: &str) -> Attempt {
        let config = |fingerprint: &str| pb::SandboxConfigSnapshot {
            provider_env_fingerprint: fingerprint.into(),
            policy_hash: "h1".into(),
            ..Default::default()
        };
        Attempt {
            first: config("e1-a"),
            env: pb::GetSandboxProviderEnvironmentResponse {
                provider_env_fingerprint: env_fingerprint.into(),
                ..Default::default()
            },
            again: config(again_fingerprint),
            pending: false,
            again_revisions: None,
        }
    }

    #[tokio::test]
    async fn halves_that_never_agree_are_given_up_after_three_rebuilds() {
        let mut tries = 0;
        let outcome = consistent_pair(|| {
            tries += 1;
            async { Ok(attempt("e1-a", "e1-b")) }
        })
        .await;
        assert!(matches!(outcome, Err(BootstrapError::Inconsistent)));
        assert_eq!(tries, 1 + MAX_BOOTSTRAP_REBUILDS);
    }

    #[tokio::test]
    async fn halves_that_agree_on_the_last_rebuild_are_used() {
        let mut tries = 0;
        let outcome = consistent_pair(|| {
            tries += 1;
            let agreed = tries == 1 + MAX_BOOTSTRAP_REBUILDS;
            async move { Ok(attempt("e1-a", if agreed { "e1-a" } else { "e1-c" })) }
        })
        .await;
        let agreed = outcome.unwrap();
        assert_eq!(
            agreed.again.provider_env_fingerprint,
            agreed.env.provider_env_fingerprint
        );
        assert_eq!(tries, 4);
    }

    #[test]
    fn the_fingerprint_ignores_build_time_only_and_names_the_config_revision() {
        let base = pb::SandboxConfigSnapshot {
            sandbox_id: "sb-1".into(),
            policy_revision: 2,
            built_at: Some(wire::timestamp(1)),
            ..Default::default()
        };
        let built_later = pb::SandboxConfigSnapshot {
            built_at: Some(wire::timestamp(2)),
            ..base.clone()
        };
        let next_revision = pb::SandboxConfigSnapshot {
            policy_revision: 3,
            ..base.clone()
        };
        assert_eq!(
            sandbox_config_fingerprint(&mut base.clone()),
            sandbox_config_fingerprint(&mut built_later.clone())
        );
        assert_ne!(
            sandbox_config_fingerprint(&mut base.clone()),
            sandbox_config_fingerprint(&mut next_revision.clone())
        );
        // The left-out field is put back, and the config revision follows the content.
        let mut fingerprinted = built_later.clone();
        let fingerprint = sandbox_config_fingerprint(&mut fingerprinted);
        assert_eq!(fingerprinted.built_at, built_later.built_at);
        assert_eq!(
            fingerprinted.config_revision,
            wire::revision_number(&fingerprint)
        );
        assert_ne!(fingerprinted.config_revision, 0);
        // Taking the fingerprint again gives the same answer.
        assert_eq!(sandbox_config_fingerprint(&mut fingerprinted), fingerprint);
    }

    #[test]
    fn a_hashed_policy_is_fingerprinted_by_its_hash_and_put_back() {
        let with_policy = |hash: &str, bytes: &'static [u8]| pb::SandboxConfigSnapshot {
            sandbox_id: "sb-1".into(),
            policy_hash: hash.into(),
            policy: prost::bytes::Bytes::from_static(bytes),
            ..Default::default()
        };
        let mut a = with_policy("h1", &[0x08, 0x01]);
        let fingerprint = sandbox_config_fingerprint(&mut a);
        assert_eq!(a.policy.as_ref(), &[0x08, 0x01], "the policy is put back");
        assert_eq!(
            sandbox_config_fingerprint(&mut with_policy("h1", &[0x08, 0x02])),
            fingerprint,
            "the hash names the content"
        );
        assert_ne!(
            sandbox_config_fingerprint(&mut with_policy("h2", &[0x08, 0x01])),
            fingerprint
        );
        // Without a hash, the bytes are all there is to tell policies apart.
        assert_ne!(
            sandbox_config_fingerprint(&mut with_policy("", &[0x08, 0x01])),
            sandbox_config_fingerprint(&mut with_policy("", &[0x08, 0x02]))
        );
    }
}
