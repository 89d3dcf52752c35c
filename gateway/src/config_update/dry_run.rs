//! The dry run of an `UpdateConfig` (`validate_only`): the write's checks, the static-section
//! rule included, against what is stored, and what the write would change, without opening
//! a write transaction.

use super::*;

/// What a validate-only request would do; nothing of it was written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DryRun {
    /// The request's idempotency key matches an earlier, equal request: the
    /// write would return that operation and change nothing, so nothing else
    /// is reported.
    pub idempotent_replay: bool,
    /// Static sections that would be kept from the sandbox's latest revision.
    pub kept_static_sections: Vec<String>,
    /// What applying the request's policy edits would do other than literally.
    pub merge_notes: Vec<String>,
    /// Set when the request carries a policy or policy edits.
    pub policy: Option<PolicyPreview>,
    /// Settings whose stored value at the target's scope would change, by key.
    pub settings: Vec<SettingPreview>,
    /// A sandbox policy checked while a global policy is set: the revision of that global
    /// policy, which would replace it (see [`Committed::shadowed_by_global_policy`]).
    pub shadowed_by_global_policy: Option<u64>,
}

/// A policy a dry run checked, compared with the target's current policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyPreview {
    pub diff: PolicyDiff,
    /// The sandbox's latest revision or the global policy revision; 0 for none.
    pub current_revision: u64,
    pub current_policy_hash: Option<String>,
    /// The hash the stored policy would have, kept sections included.
    pub new_policy_hash: String,
}

/// One setting a dry run would change; `None` is "not set at this scope".
#[derive(Debug, Clone, PartialEq)]
pub struct SettingPreview {
    pub key: String,
    pub old: Option<SettingValue>,
    pub new: Option<SettingValue>,
}

/// Checks an `UpdateConfig` request as [`commit_update`] would and reports
/// what it would change, writing nothing: no revision, no operation, no
/// settings, and the idempotency key stays free.
///
/// It reads the stored state outside any transaction, so a write committed
/// meanwhile can make the real write differ from the preview (kubectl's
/// server-side dry run has the same window); the write checks again.
pub async fn dry_run_update(store: &Store, update: &ConfigUpdate) -> Result<DryRun> {
    let parsed = match update.policy.as_deref().filter(|p| !p.trim().is_empty()) {
        Some(text) => {
            Some(crate::policy_parse::parse_and_validate_untrusted(text.to_owned()).await)
        }
        None => None,
    };
    let validated = update.validate(parsed)?;
    let (target_kind, target) = update.target_key();
    if let Some(key) = &update.idempotency_key
        && let Some(found) = store
            .find_idempotent(target_kind, &target, &update.caller, key)
            .await?
    {
        if found.request_fingerprint != validated.fingerprint {
            return Err(key_used_for_another_request(key, &found.operation_id));
        }
        return Ok(DryRun {
            idempotent_replay: true,
            ..DryRun::default()
        });
    }
    let mut out = DryRun::default();
    let (scope, scope_id) = match &update.target {
        ConfigTarget::Sandbox(sandbox_id) => {
            let sandbox = store.get_sandbox(sandbox_id).await?;
            if sandbox.lifecycle == Lifecycle::Deleted {
                return Err(GatewayError::NotFound(format!(
                    "sandbox {sandbox_id} was deleted"
                )));
            }
            check_expected_revision(
                validated.expected_policy_revision,
                sandbox.policy_revision,
                "the sandbox's policy",
            )?;
            let latest = match (&validated.policy, validated.edits.is_empty()) {
                (None, true) => None,
                _ => store.latest_policy(sandbox_id).await?,
            };
            let stored = latest
                .as_ref()
                .map(|l| parse_stored(&l.policy_json, sandbox_id))
                .transpose()?;
            let edited = if validated.edits.is_empty() {
                None
            } else {
                let edited = edit_policy(stored.as_ref(), &validated.edits)?;
                out.merge_notes = edited.notes;
                Some(edited.policy)
            };
            if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
                out.shadowed_by_global_policy = store.global_policy().await?.1.map(|g| g.revision);
                let prepared = prepare_sandbox_policy(stored.as_ref(), policy)?;
                out.policy = Some(PolicyPreview {
                    diff: policy_diff::diff(stored.as_ref(), &prepared.policy),
                    current_revision: latest.as_ref().map_or(0, |l| l.revision),
                    current_policy_hash: latest.map(|l| l.policy_hash),
                    new_policy_hash: prepared.policy.policy_hash(),
                });
                out.kept_static_sections = prepared.kept_static_sections;
            }
            (Scope::Sandbox, sandbox_id.as_str())
        }
        ConfigTarget::Workspace(workspace) => {
            if !store.workspace_exists(workspace).await? {
                return Err(GatewayError::NotFound(format!(
                    "workspace {workspace:?} not found"
                )));
            }
            (Scope::Workspace, workspace.as_str())
        }
        ConfigTarget::Global => {
            if let Some(expected) = validated.expected_policy_revision {
                let (revision, _) = store.global_policy().await?;
                check_expected_revision(Some(expected), revision, "the global policy")?;
            }
            let edited = if validated.edits.is_empty() {
                None
            } else {
                let (_, current) = store.global_policy().await?;
                let edited =
                    edit_policy(Some(&global_to_edit(current.as_ref())?), &validated.edits)?;
                out.merge_notes = edited.notes;
                Some(edited.policy)
            };
            if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
                let (_, current) = store.global_policy().await?;
                let stored = current
                    .as_ref()
                    .map(|g| parse_stored(&g.policy_json, "the global policy"))
                    .transpose()?;
                out.policy = Some(PolicyPreview {
                    diff: policy_diff::diff(stored.as_ref(), policy),
                    current_revision: current.as_ref().map_or(0, |g| g.revision),
                    current_policy_hash: current.map(|g| g.policy_hash),
                    new_policy_hash: policy.policy_hash(),
                });
            }
            (Scope::Global, "")
        }
    };
    if !validated.settings.is_empty() {
        let stored = store.settings_at(scope, scope_id).await?;
        out.settings = validated
            .settings
            .into_iter()
            .filter_map(|(key, new)| {
                let old = stored.values.get(&key).cloned();
                (old != new).then_some(SettingPreview { key, old, new })
            })
            .collect();
    }
    Ok(out)
}
