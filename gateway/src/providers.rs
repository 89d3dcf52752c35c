//! Provider writes: values are classified, credentials sealed before they
//! reach the store, and attach/detach raise the sandbox's attachment epoch.

use std::collections::BTreeMap;

use openshell_core::{
    Secret, ValueClass, Violation, validate_env_name, validate_env_value, validate_name,
    validate_provider_type,
};

use crate::delivery::{Component, Publication, PublicationScope};
use crate::error::{GatewayError, Result};
use crate::limits::MAX_MESSAGE_BYTES;
use crate::snapshot::{
    BOOTSTRAP_GROWTH_BYTES, ConfigBase, prospective_bootstrap_bytes, provider_env_revision_of,
};
use crate::store::{
    Constraint, Lifecycle, NewOperation, OperationRecord, OperationState, ProviderRecord,
    ProviderValues, SandboxRecord, Store, TargetKind, WriteTx, new_id,
};

/// Most values one provider may hold.
pub const MAX_PROVIDER_VALUES: usize = 256;
/// Longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Decoded provider values; `classes` keeps each input's index for error paths.
#[derive(Debug)]
pub struct ProviderInput {
    pub env: BTreeMap<String, String>,
    pub credentials: BTreeMap<String, Secret>,
    pub classes: Vec<(usize, String, Option<ValueClass>)>,
    pub expires_at: Option<i64>,
    /// Expiry of single values, by input index (for error paths): (name, ms).
    pub value_expires_at: BTreeMap<usize, (String, i64)>,
    /// Expiry times outside a protobuf `Timestamp`'s range, refused with the rest.
    pub bad_times: Vec<Violation>,
}

impl ProviderInput {
    fn validate(&self, violations: &mut Vec<Violation>) {
        violations.extend(self.bad_times.iter().cloned());
        if self.classes.len() > MAX_PROVIDER_VALUES {
            violations.push(Violation {
                field: "values".into(),
                message: format!("at most {MAX_PROVIDER_VALUES} values"),
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, name, class) in &self.classes {
            let field = format!("values[{i}]");
            if let Err(mut v) = validate_env_name(&field, name) {
                v.field = format!("{field}.name");
                violations.push(v);
            }
            if class.is_none() {
                violations.push(Violation {
                    field: format!("{field}.class"),
                    message: "expected NON_SECRET or CREDENTIAL".into(),
                });
            }
            if !seen.insert(name.clone()) {
                violations.push(Violation {
                    field: format!("{field}.name"),
                    message: format!("{name} is given more than once"),
                });
            }
        }
        let too_long = self
            .env
            .iter()
            .map(|(k, v)| (k, v.len()))
            .chain(self.credentials.iter().map(|(k, v)| (k, v.expose().len())))
            .filter(|(_, len)| *len > MAX_VALUE_BYTES);
        let unpassable = self
            .env
            .iter()
            .map(|(k, v)| (k, v.as_str()))
            .chain(self.credentials.iter().map(|(k, v)| (k, v.expose())))
            .filter_map(|(name, value)| {
                validate_env_value(&format!("values.{name}"), name, value).err()
            });
        violations.extend(unpassable);
        for (i, (name, _)) in &self.value_expires_at {
            if !self.credentials.contains_key(name) {
                violations.push(Violation {
                    field: format!("values[{i}].expires_at"),
                    message: format!(
                        "{name} is not a credential; only a credential value has an expiry"
                    ),
                });
            }
        }
        for (name, len) in too_long {
            violations.push(Violation {
                field: format!("values.{name}"),
                message: format!("value is {len} bytes; the limit is {MAX_VALUE_BYTES}"),
            });
        }
    }

    fn into_values(self) -> ProviderValues {
        ProviderValues {
            env: self.env,
            credentials: self.credentials,
            expires_at: self.expires_at,
            value_expires_at: self.value_expires_at.into_values().collect(),
        }
    }
}

/// The provider a request names: an id (`pv-…`), a name in `workspace`, or
/// `WORKSPACE/NAME`, which names the workspace it is looked up in itself. An empty
/// reference is a malformed request, not a name that is missing.
pub async fn resolve(store: &Store, reference: &str, workspace: &str) -> Result<ProviderRecord> {
    let (id_or_name, workspace) = split_reference(reference, workspace)?;
    Ok(store.resolve_provider(id_or_name, workspace).await?)
}

/// A provider reference as (id or name, the workspace it is looked up in). Names never hold
/// a `/`, so one in a reference always separates a workspace from a name.
pub fn split_reference<'a>(reference: &'a str, workspace: &'a str) -> Result<(&'a str, &'a str)> {
    if reference.is_empty() {
        return Err(GatewayError::invalid(
            "provider",
            "a provider id or name is required",
        ));
    }
    match reference.split_once('/') {
        None => Ok((reference, workspace)),
        Some((ws, name)) if !ws.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((name, ws))
        }
        Some(_) => Err(GatewayError::invalid(
            "provider",
            format!("{reference:?} is not a provider id, name or WORKSPACE/NAME"),
        )),
    }
}

pub async fn create_provider(
    store: &Store,
    name: &str,
    workspace: &str,
    provider_type: &str,
    input: ProviderInput,
) -> Result<ProviderRecord> {
    let mut violations = Vec::new();
    if let Err(v) = validate_name("name", name) {
        violations.push(v);
    }
    if let Err(v) = validate_provider_type(provider_type) {
        violations.push(v);
    }
    input.validate(&mut violations);
    if !violations.is_empty() {
        return Err(GatewayError::from_violations(violations));
    }
    let values = input.into_values();
    let sealed = store
        .cipher()
        .seal(&values.credentials)
        .map_err(|e| GatewayError::Corrupt(e.to_string()))?;
    let id = new_id("pv");
    let mut tx = store.begin_write().await?;
    tx.ensure_workspace(workspace).await?;
    tx.insert_provider(&id, name, workspace, provider_type, &values, &sealed)
        .await?;
    tx.commit().await?;
    Ok(store.resolve_provider(&id, workspace).await?)
}

pub async fn update_provider(
    store: &Store,
    existing: &ProviderRecord,
    input: ProviderInput,
) -> Result<ProviderChange> {
    let mut violations = Vec::new();
    input.validate(&mut violations);
    if !violations.is_empty() {
        return Err(GatewayError::from_violations(violations));
    }
    write_values(store, existing, input.into_values(), None)
        .await?
        .ok_or_else(|| GatewayError::NotFound(format!("provider {} not found", existing.id)))
}

/// Replaces a provider's values and records the publication that rebuilds
/// the sandboxes attaching it (and only those). With `expected_revision`,
/// nothing is written (None back) when the provider moved on meanwhile.
pub(crate) async fn write_values(
    store: &Store,
    existing: &ProviderRecord,
    values: ProviderValues,
    expected_revision: Option<u64>,
) -> Result<Option<ProviderChange>> {
    let sealed = store
        .cipher()
        .seal(&values.credentials)
        .map_err(|e| GatewayError::Corrupt(e.to_string()))?;
    // The sandboxes whose bootstrap a larger provider must be measured in are known inside
    // the transaction, and their configuration is read outside it (`ConfigBase`): a write
    // that finds one it has not read rolls back, reads it, and tries again.
    let mut bases = BTreeMap::new();
    for _ in 0..MAX_MEASURE_ROUNDS {
        match write_values_once(store, existing, &values, &sealed, expected_revision, &bases)
            .await?
        {
            Written::Done(change) => return Ok(change.map(|c| *c)),
            Written::Unmeasured(ids) => {
                for id in ids {
                    let base = crate::snapshot::config_base(store, &id).await?;
                    bases.insert(id, base);
                }
            }
        }
    }
    Err(GatewayError::Unavailable(format!(
        "the sandboxes attaching provider {}/{} kept changing while its new values were \
         measured against their bootstrap; nothing was written: retry",
        existing.workspace, existing.name
    )))
}

/// Tries of [`write_values`]: the first finds the attaching sandboxes, the second writes,
/// a third covers a sandbox attached in between.
const MAX_MEASURE_ROUNDS: usize = 3;

/// How one try of [`write_values`] ended.
enum Written {
    Done(Option<Box<ProviderChange>>),
    /// Rolled back: these sandboxes must be measured and their configuration was not read.
    Unmeasured(Vec<String>),
}

async fn write_values_once(
    store: &Store,
    existing: &ProviderRecord,
    values: &ProviderValues,
    sealed: &[u8],
    expected_revision: Option<u64>,
    bases: &BTreeMap<String, ConfigBase>,
) -> Result<Written> {
    let mut tx = store.begin_write().await?;
    let names: Vec<&str> = values
        .env
        .keys()
        .chain(values.credentials.keys())
        .map(String::as_str)
        .collect();
    let beside = tx.co_attached_providers(&existing.id).await?;
    refuse_shadowing(&existing.name, &names, &beside)?;
    let before = store.provider_in(&mut tx, &existing.id).await?;
    if tx
        .update_provider(&existing.id, values, sealed, expected_revision)
        .await?
        .is_none()
    {
        return Ok(Written::Done(None));
    }
    let unmeasured =
        refuse_oversized_bootstraps(store, &mut tx, existing, before.as_ref(), bases).await?;
    if !unmeasured.is_empty() {
        return Ok(Written::Unmeasured(unmeasured));
    }
    // The sandbox config carries the provider environment revision it expects, so both
    // components of every attaching sandbox are rebuilt.
    let publication = Publication {
        scope: PublicationScope::Provider(existing.id.clone()),
        components: Component::ALL.to_vec(),
    };
    publication.record(&mut tx, None).await?;
    tx.commit().await?;
    let provider = store
        .resolve_provider(&existing.id, &existing.workspace)
        .await?;
    Ok(Written::Done(Some(Box::new(ProviderChange {
        provider,
        publication,
    }))))
}

/// Refuses a write that would make a sandbox's bootstrap larger than a session may send
/// ([`MAX_MESSAGE_BYTES`]): its supervisor could then never start, and every write to the
/// sandbox would stay PENDING. Measured inside the write's transaction, with the providers
/// as it leaves them, by the bootstrap's own measure
/// ([`crate::snapshot::prospective_bootstrap_bytes`]). `what` names the write.
async fn refuse_oversized_bootstrap(
    store: &Store,
    tx: &mut WriteTx,
    sandbox: &SandboxRecord,
    base: &ConfigBase,
    attachment_epoch: u64,
    what: impl FnOnce() -> String,
) -> Result<()> {
    let providers = store.attached_providers_in(tx, &sandbox.id).await?;
    let size = prospective_bootstrap_bytes(base, attachment_epoch, &providers);
    if size + BOOTSTRAP_GROWTH_BYTES <= MAX_MESSAGE_BYTES {
        return Ok(());
    }
    Err(GatewayError::FailedPrecondition(format!(
        "{} would make the bootstrap of sandbox {}/{} ({}) {size} bytes; the limit is \
         {MAX_MESSAGE_BYTES} bytes ({BOOTSTRAP_GROWTH_BYTES} of them kept for revision \
         numbers that grow), and a supervisor cannot start on a larger one: nothing was \
         written; detach a provider or make its values smaller",
        what(),
        sandbox.workspace,
        sandbox.name,
        sandbox.id
    )))
}

/// [`refuse_oversized_bootstrap`] for every live sandbox attaching a provider whose values
/// `tx` just replaced; the ids of those `bases` lacks, if any, measuring none. Only a
/// provider whose part of the provider environment grew can push a bootstrap over the
/// limit, so a write that keeps or shrinks it (most credential refreshes) reads no sandbox.
async fn refuse_oversized_bootstraps(
    store: &Store,
    tx: &mut WriteTx,
    existing: &ProviderRecord,
    before: Option<&(ProviderRecord, BTreeMap<String, Secret>)>,
    bases: &BTreeMap<String, ConfigBase>,
) -> Result<Vec<String>> {
    let Some(after) = store.provider_in(tx, &existing.id).await? else {
        return Ok(Vec::new());
    };
    let part = |provider: &(ProviderRecord, BTreeMap<String, Secret>)| {
        crate::snapshot::provider_environment_bytes(std::slice::from_ref(provider))
    };
    if before.is_some_and(|before| part(&after) <= part(before)) {
        return Ok(Vec::new());
    }
    let sandboxes = tx.live_attaching_sandboxes(&existing.id).await?;
    let unmeasured: Vec<String> = sandboxes
        .iter()
        .filter(|s| !bases.contains_key(&s.id))
        .map(|s| s.id.clone())
        .collect();
    if !unmeasured.is_empty() {
        return Ok(unmeasured);
    }
    for sandbox in &sandboxes {
        let Some(base) = bases.get(&sandbox.id) else {
            continue;
        };
        refuse_oversized_bootstrap(store, tx, sandbox, base, sandbox.attachment_epoch, || {
            format!(
                "the new values of provider {}/{}",
                existing.workspace, existing.name
            )
        })
        .await?;
    }
    Ok(Vec::new())
}

/// A committed provider update and the publication it made.
#[derive(Debug)]
pub struct ProviderChange {
    pub provider: ProviderRecord,
    pub publication: Publication,
}

/// Deletes a provider; refused while a sandbox attaches it, so no session is affected.
pub async fn delete_provider(store: &Store, existing: &ProviderRecord) -> Result<()> {
    // On PostgreSQL an attach may commit between the count and the delete (each statement
    // reads what is committed when it starts), and the database then refuses the delete for
    // the attachment row that refers to the provider: counting again gives the refusal that
    // names the sandbox. Three tries are enough for all but a storm of attach/detach pairs,
    // which gets the store's own answer (FAILED_PRECONDITION).
    let mut tries = 0;
    loop {
        tries += 1;
        match try_delete_provider(store, existing).await {
            Err(GatewayError::Store(e))
                if e.constraint() == Some(Constraint::ForeignKey) && tries < 3 =>
            {
                tracing::debug!(provider = %existing.id, "an attach committed during the delete; counting again");
            }
            outcome => return outcome,
        }
    }
}

async fn try_delete_provider(store: &Store, existing: &ProviderRecord) -> Result<()> {
    let mut tx = store.begin_write().await?;
    let count = tx.provider_attachment_count(&existing.id).await?;
    if count > 0 {
        let names = tx
            .provider_attachment_names(&existing.id, NAMED_IN_REFUSAL)
            .await?;
        return Err(GatewayError::FailedPrecondition(attached_refusal(
            existing, count, &names,
        )));
    }
    tx.delete_provider(&existing.id).await?;
    Ok(tx.commit().await?)
}

/// How many attaching sandboxes a delete refusal names; the rest are counted.
const NAMED_IN_REFUSAL: i64 = 5;

/// Why a provider cannot be deleted: which sandboxes attach it (the first
/// few, and how many more), and how to detach it.
fn attached_refusal(provider: &ProviderRecord, count: u64, names: &[String]) -> String {
    let mut listed = names.join(", ");
    let more = count.saturating_sub(names.len() as u64);
    if more > 0 {
        listed.push_str(&format!(" and {more} more"));
    }
    let sandboxes = if count == 1 { "sandbox" } else { "sandboxes" };
    let example = names.first().map_or("SANDBOX", String::as_str);
    format!(
        "provider {}/{} ({}) is attached to {count} {sandboxes}: {listed}; detach it first \
         (openshell provider detach {example} {})",
        provider.workspace, provider.name, provider.id, provider.name
    )
}

/// A sandbox's environment holds one value per variable: a provider whose variable another
/// attached provider already exports would silently shadow it (or be shadowed), so the write
/// that would bring them together is refused, naming both providers and the variables.
fn refuse_shadowing(provider: &str, names: &[&str], beside: &[ProviderRecord]) -> Result<()> {
    for other in beside {
        let theirs = other.variable_names();
        let shared: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| theirs.contains(n))
            .collect();
        if !shared.is_empty() {
            return Err(GatewayError::FailedPrecondition(format!(
                "provider {provider} and provider {} both export {}, and a sandbox attaches both; \
                 a sandbox's environment holds one value per variable: rename the variable or \
                 detach one provider",
                other.name,
                shared.join(", ")
            )));
        }
    }
    Ok(())
}

/// What an attach or detach committed: the sandbox after it and the operation that tracks
/// its provider environment reaching the supervisor.
#[derive(Debug)]
pub struct AttachmentChange {
    pub sandbox: SandboxRecord,
    pub operation: OperationRecord,
    /// None for a repeat, which changed nothing.
    pub publication: Option<Publication>,
}

/// Attaches (`attach` true) or detaches a provider; a repeat writes nothing and returns an
/// operation that tracks the environment already desired. The operation is APPLIED once the
/// supervisor reports exactly the provider environment revision the change made desired.
pub async fn attach(
    store: &Store,
    sandbox: &SandboxRecord,
    provider: &ProviderRecord,
    attach: bool,
    caller: &str,
) -> Result<AttachmentChange> {
    if provider.workspace != sandbox.workspace {
        return Err(GatewayError::FailedPrecondition(format!(
            "provider {} lives in workspace {:?}, the sandbox in {:?}",
            provider.name, provider.workspace, sandbox.workspace
        )));
    }
    // Read before the transaction: see `ConfigBase`.
    let base = if attach {
        Some(crate::snapshot::config_base(store, &sandbox.id).await?)
    } else {
        None
    };
    let mut tx = store.begin_write().await?;
    let current = tx.lock_sandbox(&sandbox.id).await?;
    if attach {
        let beside: Vec<ProviderRecord> = tx
            .attached_providers(&sandbox.id)
            .await?
            .into_iter()
            .filter(|p| p.id != provider.id)
            .collect();
        refuse_shadowing(&provider.name, &provider.variable_names(), &beside)?;
    }
    let epoch = if attach {
        match tx.attach(&sandbox.id, &provider.id).await {
            Err(e) if e.constraint() == Some(Constraint::ForeignKey) => {
                // The provider was read before this transaction began, and deleted since.
                return Err(GatewayError::NotFound(format!(
                    "provider {}/{} ({}) was deleted; nothing was attached",
                    provider.workspace, provider.name, provider.id
                )));
            }
            epoch => epoch?,
        }
    } else {
        tx.detach(&sandbox.id, &provider.id).await?
    };
    if let (Some(base), Some(epoch)) = (&base, epoch) {
        refuse_oversized_bootstrap(store, &mut tx, &current, base, epoch, || {
            format!(
                "attaching provider {}/{}",
                provider.workspace, provider.name
            )
        })
        .await?;
    }
    let operation_id = new_id("op");
    // Both components: the sandbox config names the provider environment revision it expects.
    let publication = epoch.map(|_| Publication::sandbox(&sandbox.id, &Component::ALL));
    if let Some(publication) = &publication {
        publication.record(&mut tx, Some(&operation_id)).await?;
    }
    let mut attached: Vec<(String, u64)> = tx
        .attached_providers(&sandbox.id)
        .await?
        .into_iter()
        .map(|p| (p.id, p.revision))
        .collect();
    attached.sort();
    let desired_epoch = epoch.unwrap_or(current.attachment_epoch);
    let operation = tx
        .insert_operation(&NewOperation {
            id: operation_id.clone(),
            target_kind: TargetKind::Sandbox,
            target: sandbox.id.clone(),
            sandbox_id: Some(sandbox.id.clone()),
            policy_revision: current.policy_revision,
            settings_revision: current.settings_revision,
            global_policy_revision: None,
            no_op: epoch.is_none(),
            touches_policy: false,
            caller: caller.to_string(),
            idempotency_key: None,
            request_fingerprint: None,
            idempotency_expires_at: None,
            provider_env_revision: Some(provider_env_revision_of(desired_epoch, &attached)),
        })
        .await?;
    let operation = if current.lifecycle == Lifecycle::Stopped {
        tx.resolve_operation_by_lifecycle(
            &operation_id,
            OperationState::Inactive,
            crate::store::STOPPED_TARGET_REASON,
        )
        .await?;
        tx.get_operation(&operation_id).await?
    } else {
        operation
    };
    tx.commit().await?;
    Ok(AttachmentChange {
        sandbox: store.get_sandbox(&sandbox.id).await?,
        operation,
        publication,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::sqlite_for_tests;

    #[test]
    fn a_refused_delete_names_the_first_sandboxes_and_counts_the_rest() {
        let provider = ProviderRecord {
            id: "pv-1".into(),
            name: "gh".into(),
            workspace: "team".into(),
            provider_type: "github".into(),
            env: BTreeMap::new(),
            credential_names: Vec::new(),
            revision: 1,
            expires_at: None,
            value_expires_at: BTreeMap::new(),
            attached_sandbox_ids: Vec::new(),
            created_at: 0,
            updated_at: 0,
        };
        let names: Vec<String> = (1..=5).map(|i| format!("team/sb{i}")).collect();
        let message = attached_refusal(&provider, 7, &names);
        assert_eq!(
            message,
            "provider team/gh (pv-1) is attached to 7 sandboxes: team/sb1, team/sb2, team/sb3, \
             team/sb4, team/sb5 and 2 more; detach it first (openshell provider detach team/sb1 gh)"
        );
    }

    /// The store only deletes; refusing while a sandbox attaches the provider is this
    /// layer's rule, and clients read the same refusal as when the store made it.
    #[tokio::test]
    async fn an_attached_provider_is_not_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let values = ProviderValues {
            env: BTreeMap::new(),
            credentials: BTreeMap::new(),
            expires_at: None,
            value_expires_at: BTreeMap::new(),
        };
        let mut tx = store.begin_write().await.unwrap();
        tx.ensure_workspace("default").await.unwrap();
        tx.insert_sandbox("sb-1", "web", "default", "hash")
            .await
            .unwrap();
        tx.insert_provider("pv-1", "gh", "default", "github", &values, b"")
            .await
            .unwrap();
        tx.attach("sb-1", "pv-1").await.unwrap();
        tx.commit().await.unwrap();
        let provider = resolve(&store, "gh", "default").await.unwrap();

        let status = tonic::Status::from(delete_provider(&store, &provider).await.unwrap_err());
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            "provider default/gh (pv-1) is attached to 1 sandbox: default/web; detach it first \
             (openshell provider detach default/web gh)"
        );

        let mut tx = store.begin_write().await.unwrap();
        tx.detach("sb-1", "pv-1").await.unwrap();
        tx.commit().await.unwrap();
        delete_provider(&store, &provider).await.unwrap();
        let gone = tonic::Status::from(resolve(&store, "pv-1", "default").await.unwrap_err());
        assert_eq!(gone.code(), tonic::Code::NotFound);
    }

    /// Probe: `provider attach SB ws/gh` looked for a provider named "ws/gh" in the sandbox's
    /// workspace. `WORKSPACE/NAME` names the workspace it is looked up in.
    #[tokio::test]
    async fn a_workspace_qualified_reference_is_looked_up_in_its_workspace() {
        assert_eq!(split_reference("gh", "default").unwrap(), ("gh", "default"));
        assert_eq!(split_reference("ws/gh", "default").unwrap(), ("gh", "ws"));
        for bad in ["/gh", "ws/", "a/b/c"] {
            let status = tonic::Status::from(split_reference(bad, "default").unwrap_err());
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(status.message().contains("WORKSPACE/NAME"), "{status:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let missing = tonic::Status::from(resolve(&store, "ws/gh", "default").await.unwrap_err());
        assert_eq!(missing.code(), tonic::Code::NotFound);
        assert_eq!(
            missing.message(),
            r#"provider "gh" not found in workspace "ws""#
        );
    }

    /// An empty reference is bad input, not a provider that is missing.
    #[tokio::test]
    async fn an_empty_provider_reference_is_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let status = tonic::Status::from(resolve(&store, "", "default").await.unwrap_err());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "provider: a provider id or name is required"
        );
    }
}
