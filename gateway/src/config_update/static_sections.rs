//! A sandbox policy as it is stored: static sections fixed at the first revision and kept
//! from the latest when a request omits them, and the revision written only when it changes.

use super::*;

/// A sandbox policy as it would be stored: the request's, with the static
/// sections it omits taken from the sandbox's latest revision.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedPolicy<'a> {
    pub policy: Cow<'a, SandboxPolicy>,
    /// In document order: `filesystem_policy`, `landlock`, `process`.
    pub kept_static_sections: Vec<String>,
}

/// What [`write_sandbox_policy`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyWrite {
    /// The new revision and its hash; None when the policy equals the latest one.
    pub revision: Option<(u64, String)>,
    pub kept_static_sections: Vec<String>,
}

/// The sections a replayed request had kept: those it omits that the
/// revision its operation recorded has. Not stored with the operation, so a
/// replay answers as the original write did without a column of its own.
pub(super) async fn kept_by_replayed(
    store: &Store,
    operation: &OperationRecord,
    requested: &SandboxPolicy,
) -> Result<Vec<String>> {
    let Some(sandbox_id) = operation.sandbox_id.as_deref() else {
        return Ok(Vec::new());
    };
    if operation.policy_revision == 0 {
        return Ok(Vec::new());
    }
    let revision = store
        .policy_revision(sandbox_id, operation.policy_revision)
        .await?;
    let stored = parse_stored(&revision.policy_json, sandbox_id)?;
    Ok(sections_to_keep(&stored, requested))
}

pub(super) fn parse_stored(policy_json: &str, sandbox_id: &str) -> Result<SandboxPolicy> {
    openshell_core::policy::parse_policy(policy_json)
        .map_err(|e| GatewayError::Corrupt(format!("stored policy of {sandbox_id}: {e}")))
}

/// Static sections `requested` omits and `stored` has, in document order.
pub(super) fn sections_to_keep(stored: &SandboxPolicy, requested: &SandboxPolicy) -> Vec<String> {
    let mut kept = Vec::new();
    if requested.filesystem_policy.is_none() && stored.filesystem_policy.is_some() {
        kept.push("filesystem_policy".to_owned());
    }
    if requested.landlock.is_none() && stored.landlock.is_some() {
        kept.push("landlock".to_owned());
    }
    if requested.process.is_none() && stored.process.is_some() {
        kept.push("process".to_owned());
    }
    kept
}

/// Applies the sandbox static-section rule to a requested policy, for the
/// write and the dry run alike.
///
/// Static sections are applied once when a sandbox starts, so a later
/// revision must carry the same ones. A request that omits one keeps the
/// sandbox's current section (upstream users asked for this: a network-only
/// change should not have to repeat them, NVIDIA/OpenShell#3138); one that
/// gives a section with other content is refused with the section's path.
pub fn prepare_sandbox_policy<'a>(
    stored: Option<&SandboxPolicy>,
    requested: &'a SandboxPolicy,
) -> Result<PreparedPolicy<'a>> {
    let Some(stored) = stored else {
        return Ok(PreparedPolicy {
            policy: Cow::Borrowed(requested),
            kept_static_sections: Vec::new(),
        });
    };
    let kept_static_sections = sections_to_keep(stored, requested);
    let policy = if kept_static_sections.is_empty() {
        Cow::Borrowed(requested)
    } else {
        let mut merged = requested.clone();
        if merged.filesystem_policy.is_none() {
            merged
                .filesystem_policy
                .clone_from(&stored.filesystem_policy);
        }
        if merged.landlock.is_none() {
            merged.landlock.clone_from(&stored.landlock);
        }
        if merged.process.is_none() {
            merged.process.clone_from(&stored.process);
        }
        // Both halves passed validation, but a rule that spans a static
        // section and the rest of the document would not have seen them
        // together; what is stored must pass as a whole.
        merged
            .validate()
            .map_err(|violations| GatewayError::from_violations(in_policy(violations)))?;
        Cow::Owned(merged)
    };
    let changes = stored.static_section_changes(&policy);
    if !changes.is_empty() {
        return Err(GatewayError::from_violations(in_policy(changes)));
    }
    Ok(PreparedPolicy {
        policy,
        kept_static_sections,
    })
}

/// Addresses policy violations from the request's root, as `validate` does.
pub(super) fn in_policy(violations: Vec<Violation>) -> Vec<Violation> {
    violations
        .into_iter()
        .map(|v| Violation {
            field: if v.field.is_empty() {
                "policy".into()
            } else {
                format!("policy.{}", v.field)
            },
            message: v.message,
        })
        .collect()
}

/// The sandbox's latest stored policy and its hash. `locked_hash` is the
/// latest revision's hash as the sandbox's lock read it: a policy kept in
/// process under it is not read from the store again.
pub(super) async fn latest_stored_policy(
    tx: &mut WriteTx,
    sandbox_id: &str,
    locked_hash: Option<&str>,
) -> Result<Option<(String, Arc<SandboxPolicy>)>> {
    if let Some(hash) = locked_hash
        && let Some(parsed) = encoded_policies::parsed(hash)
    {
        return Ok(Some((hash.to_owned(), parsed)));
    }
    let Some(latest) = tx.latest_policy(sandbox_id).await? else {
        return Ok(None);
    };
    let stored = parse_stored(&latest.policy_json, sandbox_id)?;
    Ok(Some((latest.policy_hash, Arc::new(stored))))
}

/// Writes `policy` as the sandbox's next revision unless it equals the
/// latest one. Static sections are fixed at the first revision; ones the
/// policy omits are kept from the latest ([`prepare_sandbox_policy`]).
/// `locked_hash`: the latest revision's hash, when the caller's lock of the
/// sandbox read it.
pub async fn write_sandbox_policy(
    tx: &mut WriteTx,
    sandbox: &SandboxRecord,
    locked_hash: Option<&str>,
    policy: &SandboxPolicy,
    operation_id: &str,
) -> Result<PolicyWrite> {
    // Serialized once: its hash is checked and, when new, it is what is stored.
    let mut canonical = policy.canonical_json();
    let mut hash = hash_of_canonical_json(&canonical);
    // The same document again: nothing to check, nothing to keep.
    if locked_hash == Some(hash.as_str()) {
        return Ok(PolicyWrite::default());
    }
    let latest = latest_stored_policy(tx, &sandbox.id, locked_hash).await?;
    let stored = match &latest {
        Some((latest_hash, _)) if *latest_hash == hash => return Ok(PolicyWrite::default()),
        Some((_, stored)) => Some(&**stored),
        None => None,
    };
    let prepared = prepare_sandbox_policy(stored, policy)?;
    let kept_static_sections = prepared.kept_static_sections;
    if !kept_static_sections.is_empty() {
        canonical = prepared.policy.canonical_json();
        hash = hash_of_canonical_json(&canonical);
        if latest
            .as_ref()
            .is_some_and(|(latest_hash, _)| *latest_hash == hash)
        {
            return Ok(PolicyWrite {
                revision: None,
                kept_static_sections,
            });
        }
    }
    let revision = sandbox.policy_revision + 1;
    tx.insert_policy_revision(&sandbox.id, revision, &hash, &canonical, operation_id)
        .await?;
    encoded_policies::keep(&hash, &prepared.policy);
    Ok(PolicyWrite {
        revision: Some((revision, hash)),
        kept_static_sections,
    })
}
