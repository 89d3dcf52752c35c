//! The one snapshot builder. `sandbox_config` and `provider_environment`
//! are always complete snapshots of one component, built from the store at
//! build time, so a build reflects every write committed before it. The
//! poll RPCs and push delivery both project these, never their own copies.
//!
//! A stopped sandbox gets no snapshot at all, by poll, push or bootstrap: its
//! writes end INACTIVE ("takes effect when it starts"), and that must stay true
//! of what its supervisor holds. Starting it again publishes a rebuild.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use openshell_core::settings;
use openshell_proto::v1 as pb;
use sha2::{Digest, Sha256};

use crate::delivery::activity::FanoutActivity;
use crate::delivery::marks::{Component, Lane};
use crate::error::{GatewayError, Result};
use crate::store::{Lifecycle, PendingInputs, ReadPriority, SandboxRecord, Store, now_ms};
use crate::wire;

/// Said to a stopped sandbox's supervisor when it asks for configuration.
pub const STOPPED_SANDBOX_REASON: &str = "the sandbox is stopped; the gateway delivers no \
     configuration until it is started again (`openshell sandbox start`)";

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
}

/// Why a build failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BuildError {
    #[error("build exceeded its {0:?} deadline")]
    Deadline(Duration),
    #[error("{0}")]
    Store(String),
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
}

/// Refuses to build for a sandbox whose configuration must not reach its supervisor now.
fn ensure_deliverable(sandbox: &SandboxRecord) -> Result<()> {
    match sandbox.lifecycle {
        Lifecycle::Stopped => Err(GatewayError::FailedPrecondition(
            STOPPED_SANDBOX_REASON.into(),
        )),
        _ => Ok(()),
    }
}

/// The `sandbox_config` component of one sandbox.
pub async fn build_sandbox_config(
    store: &Store,
    sandbox_id: &str,
) -> Result<pb::SandboxConfigSnapshot> {
    let read = store.request_sandbox_config_inputs(sandbox_id, ReadPriority::Foreground);
    Ok(sandbox_config_from(store, sandbox_id, read).await?.0)
}

/// [`build_sandbox_config`] from inputs already asked for, and whether a
/// sandbox operation was pending when they were read.
async fn sandbox_config_from(
    store: &Store,
    sandbox_id: &str,
    read: PendingInputs,
) -> Result<(pb::SandboxConfigSnapshot, bool)> {
    let mut inputs = read.inputs(store).await?;
    ensure_deliverable(&inputs.sandbox)?;
    let (policy_json, policy_hash, source) = match (&inputs.global_policy, inputs.own_policy.take())
    {
        (Some(g), _) => (
            g.policy_json.clone(),
            g.policy_hash.clone(),
            pb::PolicySource::Global,
        ),
        (None, Some((hash, json))) => (json, hash, pb::PolicySource::Sandbox),
        (None, None) => (String::new(), String::new(), pb::PolicySource::Sandbox),
    };
    let sandbox = &inputs.sandbox;
    let effective = settings::effective(
        &inputs.global_settings.values,
        &inputs.workspace_settings.values,
        &inputs.sandbox_settings.values,
    );
    let snapshot = pb::SandboxConfigSnapshot {
        sandbox_id: sandbox_id.to_string(),
        policy_json,
        policy_source: source as i32,
        policy_revision: sandbox.policy_revision,
        policy_hash,
        global_policy_revision: inputs.global_policy_revision,
        settings: effective
            .iter()
            .map(|e| pb::Setting {
                key: e.key.clone(),
                value: Some(wire::setting_value(&e.value)),
                scope: wire::scope(e.source) as i32,
            })
            .collect(),
        global_settings_revision: inputs.global_settings.revision,
        workspace_settings_revision: inputs.workspace_settings.revision,
        sandbox_settings_revision: inputs.sandbox_settings.revision,
        provider_env_revision: provider_env_revision_of(
            sandbox.attachment_epoch,
            &inputs.attached_provider_revisions,
        ),
        built_at: Some(wire::timestamp(now_ms())),
        lifecycle: wire::lifecycle(sandbox.lifecycle) as i32,
    };
    Ok((snapshot, inputs.pending_operation))
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
) -> Result<pb::ProviderEnvironmentSnapshot> {
    let sandbox = store.get_sandbox(sandbox_id).await?;
    ensure_deliverable(&sandbox)?;
    let providers = store
        .attached_providers_with_credentials(sandbox_id)
        .await?;
    let mut values = Vec::new();
    let mut expires_at: Option<i64> = None;
    for (provider, credentials) in &providers {
        for (name, value) in &provider.env {
            values.push(pb::EnvValue {
                name: name.clone(),
                value: value.clone(),
                class: pb::ValueClass::NonSecret as i32,
                provider: provider.name.clone(),
            });
        }
        for (name, secret) in credentials {
            values.push(pb::EnvValue {
                name: name.clone(),
                value: secret.expose().to_string(),
                class: pb::ValueClass::Credential as i32,
                provider: provider.name.clone(),
            });
        }
        if let Some(at) = provider.expires_at {
            expires_at = Some(expires_at.map_or(at, |e| e.min(at)));
        }
    }
    Ok(pb::ProviderEnvironmentSnapshot {
        sandbox_id: sandbox_id.to_string(),
        values,
        provider_env_revision: provider_env_revision(store, sandbox_id, sandbox.attachment_epoch)
            .await?,
        attachment_epoch: sandbox.attachment_epoch,
        expires_at: expires_at.map(wire::timestamp),
        built_at: Some(wire::timestamp(now_ms())),
    })
}

/// Content fingerprint of a `sandbox_config` snapshot, so an unchanged
/// rebuild is recognised as a duplicate. Build time and lifecycle are left
/// out, as the supervisor's own fingerprint leaves them out: a sandbox
/// turning running after its bootstrap is no reason to send it again.
/// They are set aside during the encoding and put back, which spares
/// copying the snapshot (and its policy) on every build.
pub fn sandbox_config_fingerprint(s: &mut pb::SandboxConfigSnapshot) -> String {
    let built_at = s.built_at.take();
    let lifecycle = std::mem::take(&mut s.lifecycle);
    let fingerprint = fingerprint_of(&prost::Message::encode_to_vec(&*s));
    s.built_at = built_at;
    s.lifecycle = lifecycle;
    fingerprint
}

/// Content fingerprint of a `provider_environment` snapshot (build time left
/// out, as for [`sandbox_config_fingerprint`]).
pub fn provider_environment_fingerprint(s: &mut pb::ProviderEnvironmentSnapshot) -> String {
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
                let (snapshot, pending) = sandbox_config_from(store, sandbox_id, read).await?;
                Ok(sandbox_config_built(snapshot, pending))
            })
        }
        Component::ProviderEnvironment => Box::pin(async move {
            let snapshot = build_provider_environment(store, sandbox_id).await?;
            Ok(provider_environment_built(snapshot))
        }),
    }
}

/// `pending_operation`: see [`Built::pending_operation`].
pub fn sandbox_config_built(
    mut snapshot: pb::SandboxConfigSnapshot,
    pending_operation: bool,
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
        provider_env_revision: snapshot.provider_env_revision.clone(),
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
    }
}

pub fn provider_environment_built(mut snapshot: pb::ProviderEnvironmentSnapshot) -> Built {
    let fingerprint = provider_environment_fingerprint(&mut snapshot);
    let summary = format!(
        "provider env {} ({} values)",
        snapshot.provider_env_revision,
        snapshot.values.len()
    );
    Built {
        component: Component::ProviderEnvironment,
        policy_revision: 0,
        settings_revision: 0,
        provider_env_revision: snapshot.provider_env_revision.clone(),
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
    }
}

/// Bootstrap: both components as a consistent pair. The provider revision
/// the config expects must match the environment built; a write between
/// the two builds is caught and the pair rebuilt, at most 3 times.
pub async fn build_bootstrap(
    store: &Store,
    sandbox_id: &str,
) -> Result<(Built, Built), BootstrapError> {
    const MAX_REBUILDS: usize = 3;
    for _ in 0..=MAX_REBUILDS {
        let config = build_sandbox_config(store, sandbox_id).await?;
        let env = build_provider_environment(store, sandbox_id).await?;
        let read = store.request_sandbox_config_inputs(sandbox_id, ReadPriority::Foreground);
        let (again, pending) = sandbox_config_from(store, sandbox_id, read).await?;
        let consistent = config.provider_env_revision == env.provider_env_revision
            && again.provider_env_revision == env.provider_env_revision
            && again.policy_hash == config.policy_hash;
        if consistent {
            return Ok((
                sandbox_config_built(again, pending),
                provider_environment_built(env),
            ));
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
        Box::pin(async move { build.await.map_err(|e| BuildError::Store(e.to_string())) })
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_ignores_build_time_and_lifecycle_only() {
        let base = pb::SandboxConfigSnapshot {
            sandbox_id: "sb-1".into(),
            policy_revision: 2,
            lifecycle: pb::SandboxLifecycle::Pending as i32,
            built_at: Some(wire::timestamp(1)),
            ..Default::default()
        };
        let running_later = pb::SandboxConfigSnapshot {
            lifecycle: pb::SandboxLifecycle::Running as i32,
            built_at: Some(wire::timestamp(2)),
            ..base.clone()
        };
        let next_revision = pb::SandboxConfigSnapshot {
            policy_revision: 3,
            ..base.clone()
        };
        assert_eq!(
            sandbox_config_fingerprint(&mut base.clone()),
            sandbox_config_fingerprint(&mut running_later.clone())
        );
        assert_ne!(
            sandbox_config_fingerprint(&mut base.clone()),
            sandbox_config_fingerprint(&mut next_revision.clone())
        );
        // The left-out fields are put back: what is sent is what was built.
        let mut fingerprinted = running_later.clone();
        sandbox_config_fingerprint(&mut fingerprinted);
        assert_eq!(fingerprinted, running_later);
    }
}
