//! What a write changes at each kind of target, inside its transaction: one sandbox (its
//! policy revision, edits merged, its settings), a workspace's settings, or the global
//! policy and settings, and the fleet operation's targets.

use super::*;

/// The sandboxes a fleet write targets.
pub(super) enum Fleet<'a> {
    Workspace(&'a str),
    All,
}

impl<'a> Fleet<'a> {
    pub(super) fn workspace(&self) -> Option<&'a str> {
        match self {
            Self::Workspace(workspace) => Some(workspace),
            Self::All => None,
        }
    }
}

/// What writing to one target changed, besides the operation's revisions.
pub(super) struct TargetWrite<'a> {
    pub(super) publication: Publication,
    /// Set for a fleet write, whose operation tracks every live sandbox.
    pub(super) fleet: Option<Fleet<'a>>,
    /// Set when the target is a stopped sandbox: the operation ends at once.
    pub(super) inactive_reason: Option<&'static str>,
    pub(super) kept_static_sections: Vec<String>,
    pub(super) sandbox_policy_hash: Option<String>,
    pub(super) merge_notes: Vec<String>,
    /// See [`Committed::shadowed_by_global_policy`].
    pub(super) shadowed_by_global_policy: Option<u64>,
}

pub(super) async fn write_to_sandbox<'a>(
    tx: &mut WriteTx,
    sandbox_id: &str,
    validated: &Validated,
    op: &mut NewOperation,
    group: Option<LockedSandbox>,
) -> Result<TargetWrite<'a>> {
    let grouped = group.is_some();
    let (current, mut policy_hash) = match group {
        Some(locked) => locked,
        None => tx.lock_sandbox_with_policy_hash(sandbox_id).await?,
    };
    if current.lifecycle == Lifecycle::Deleted {
        return Err(GatewayError::NotFound(format!(
            "sandbox {sandbox_id} was deleted"
        )));
    }
    check_expected_revision(
        validated.expected_policy_revision,
        current.policy_revision,
        "the sandbox's policy",
    )?;
    op.sandbox_id = Some(current.id.clone());
    op.policy_revision = current.policy_revision;
    op.settings_revision = current.settings_revision;
    let mut kept_static_sections = Vec::new();
    let mut merge_notes = Vec::new();
    let edited = if validated.edits.is_empty() {
        None
    } else {
        let latest = latest_stored_policy(tx, &current.id, policy_hash.as_deref()).await?;
        let edited = edit_policy(
            latest.as_ref().map(|(_, stored)| &**stored),
            &validated.edits,
        )?;
        merge_notes = edited.notes;
        Some(edited.policy)
    };
    let mut shadowed_by_global_policy = None;
    if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
        shadowed_by_global_policy = tx.global_policy_in_effect().await?;
        let written =
            write_sandbox_policy(tx, &current, policy_hash.as_deref(), policy, &op.id).await?;
        kept_static_sections = written.kept_static_sections;
        if let Some((revision, hash)) = written.revision {
            op.policy_revision = revision;
            op.no_op = false;
            policy_hash = Some(hash);
        }
    }
    // A group writes its writes' settings together, after this.
    if !grouped
        && !validated.settings.is_empty()
        && let Some(revision) = tx
            .write_settings(Scope::Sandbox, &current.id, &validated.settings)
            .await?
    {
        op.settings_revision = revision;
        op.no_op = false;
    }
    Ok(TargetWrite {
        publication: Publication::sandbox(&current.id, &[Component::SandboxConfig]),
        fleet: None,
        inactive_reason: (current.lifecycle == Lifecycle::Stopped)
            .then_some(crate::store::STOPPED_TARGET_REASON),
        kept_static_sections,
        // A sandbox without any policy revision answers with an empty hash.
        sandbox_policy_hash: Some(policy_hash.unwrap_or_default()),
        merge_notes,
        shadowed_by_global_policy,
    })
}

/// Refuses a write whose caller read an older revision than the one in effect.
pub(super) fn check_expected_revision(
    expected: Option<u64>,
    current: u64,
    what: &str,
) -> Result<()> {
    match expected {
        Some(expected) if expected != current => Err(GatewayError::FailedPrecondition(format!(
            "{what} is at revision {current}, not the expected {expected}: it changed since it \
             was read; read it again and retry (nothing was written)"
        ))),
        _ => Ok(()),
    }
}

/// The stored policy (an empty one for a sandbox that has none) after `edits`, validated as
/// a whole, since an edit can make a valid document invalid (an endpoint two rules overlap).
pub(super) fn edit_policy(
    stored: Option<&SandboxPolicy>,
    edits: &[PolicyEdit],
) -> Result<openshell_core::policy::Edited> {
    let empty = SandboxPolicy::default();
    let edited =
        apply_edits(stored.unwrap_or(&empty), edits).map_err(GatewayError::from_violations)?;
    edited
        .policy
        .validate()
        .map_err(|violations| GatewayError::from_violations(in_policy(violations)))?;
    Ok(edited)
}

pub(super) async fn write_to_workspace<'a>(
    tx: &mut WriteTx,
    workspace: &'a str,
    validated: &Validated,
    op: &mut NewOperation,
) -> Result<TargetWrite<'a>> {
    if !tx.workspace_exists(workspace).await? {
        return Err(GatewayError::NotFound(format!(
            "workspace {workspace:?} not found"
        )));
    }
    let current = tx.settings_at(Scope::Workspace, workspace).await?;
    op.settings_revision = current.revision;
    if let Some(revision) = tx
        .write_settings(Scope::Workspace, workspace, &validated.settings)
        .await?
    {
        op.settings_revision = revision;
        op.no_op = false;
    }
    Ok(TargetWrite {
        publication: Publication {
            scope: PublicationScope::Workspace(workspace.to_string()),
            components: vec![Component::SandboxConfig],
        },
        fleet: Some(Fleet::Workspace(workspace)),
        inactive_reason: None,
        shadowed_by_global_policy: None,
        kept_static_sections: Vec::new(),
        sandbox_policy_hash: None,
        merge_notes: Vec::new(),
    })
}

pub(super) async fn write_to_global<'a>(
    tx: &mut WriteTx,
    update: &ConfigUpdate,
    validated: &Validated,
    op: &mut NewOperation,
) -> Result<TargetWrite<'a>> {
    let (global_revision, current_global) = tx.global_policy().await?;
    check_expected_revision(
        validated.expected_policy_revision,
        global_revision,
        "the global policy",
    )?;
    op.global_policy_revision = Some(global_revision);
    let mut merge_notes = Vec::new();
    let edited = if validated.edits.is_empty() {
        None
    } else {
        let edited = edit_policy(
            Some(&global_to_edit(current_global.as_ref())?),
            &validated.edits,
        )?;
        merge_notes = edited.notes;
        Some(edited.policy)
    };
    if let Some(policy) = edited.as_ref().or(validated.policy.as_ref()) {
        let hash = policy.policy_hash();
        if current_global.as_ref().map(|g| g.policy_hash.as_str()) != Some(hash.as_str()) {
            op.global_policy_revision = Some(global_revision + 1);
            tx.insert_global_policy_revision(
                global_revision + 1,
                Some((&hash, &policy.canonical_json())),
                &op.id,
            )
            .await?;
            op.no_op = false;
        }
    } else if update.clear_global_policy && current_global.is_some() {
        op.global_policy_revision = Some(global_revision + 1);
        tx.insert_global_policy_revision(global_revision + 1, None, &op.id)
            .await?;
        op.no_op = false;
    }
    let current = tx.settings_at(Scope::Global, "").await?;
    op.settings_revision = current.revision;
    if !validated.settings.is_empty()
        && let Some(revision) = tx
            .write_settings(Scope::Global, "", &validated.settings)
            .await?
    {
        op.settings_revision = revision;
        op.no_op = false;
    }
    Ok(TargetWrite {
        publication: Publication {
            scope: PublicationScope::Global,
            components: vec![Component::SandboxConfig],
        },
        fleet: Some(Fleet::All),
        inactive_reason: None,
        shadowed_by_global_policy: None,
        kept_static_sections: Vec::new(),
        sandbox_policy_hash: None,
        merge_notes,
    })
}

/// The global policy that incremental edits apply to: there must be one.
pub(super) fn global_to_edit(current: Option<&GlobalPolicyRecord>) -> Result<SandboxPolicy> {
    let current = current.ok_or_else(|| {
        GatewayError::FailedPrecondition(
            "no global policy is set, so there is nothing to edit; set one with a whole policy \
             (nothing was written)"
                .into(),
        )
    })?;
    parse_stored(&current.policy_json, "the global policy")
}

/// Lists a fleet operation's targets in its transaction, or leaves that to
/// the listing after commit when a big fleet would hold the writer too long.
pub(super) async fn list_fleet_targets(
    store: &Store,
    tx: &mut WriteTx,
    operation_id: &str,
    workspace: Option<&str>,
) -> Result<()> {
    if fleet_targets::lists_after_commit(store) {
        return Ok(tx.begin_target_listing(operation_id).await?);
    }
    let listed = tx.insert_live_targets(operation_id, workspace).await?;
    if listed.pending + listed.inactive == 0 {
        tx.complete_empty_fleet_operation(operation_id).await?;
    } else if listed.pending == 0 {
        // Every target is a stopped sandbox: the operation ends INACTIVE now.
        tx.count_finished_targets(operation_id, OperationState::Inactive, 0)
            .await?;
    }
    Ok(())
}
