//! The answer to a validate-only `UpdateConfig` on the wire.

use openshell_proto::v1 as pb;

use crate::config_update::DryRun;
use crate::policy_diff::PolicyChange;
use crate::wire::setting_value;

/// The answer to a validate-only `UpdateConfig`: no operation, what would change.
pub fn dry_run(d: &DryRun) -> pb::UpdateConfigResponse {
    pb::UpdateConfigResponse {
        operation: None,
        idempotent_replay: d.idempotent_replay,
        kept_static_sections: d.kept_static_sections.clone(),
        merge_notes: d.merge_notes.clone(),
        shadowed_by_global_policy: d.shadowed_by_global_policy.unwrap_or(0),
        policy_diff: d.policy.as_ref().map(|p| pb::PolicyDiff {
            added_policies: p.diff.added_policies.clone(),
            removed_policies: p.diff.removed_policies.clone(),
            changed_policies: p.diff.changed_policies.iter().map(policy_change).collect(),
            changed_static_sections: p.diff.changed_static_sections.clone(),
            changed_sections: p.diff.changed_sections.clone(),
            current_revision: p.current_revision,
            current_policy_hash: p.current_policy_hash.clone().unwrap_or_default(),
            new_policy_hash: p.new_policy_hash.clone(),
        }),
        setting_changes: d
            .settings
            .iter()
            .map(|s| pb::SettingDiff {
                key: s.key.clone(),
                old_value: s.old.as_ref().map(setting_value),
                new_value: s.new.as_ref().map(setting_value),
            })
            .collect(),
        // Upstream's fields describe a write; a dry run made none.
        ..Default::default()
    }
}

fn policy_change(c: &PolicyChange) -> pb::PolicyChange {
    pb::PolicyChange {
        name: c.name.clone(),
        added_endpoints: c.added_endpoints.clone(),
        removed_endpoints: c.removed_endpoints.clone(),
        changed_endpoints: c.changed_endpoints.clone(),
        changed_fields: c.changed_fields.clone(),
    }
}
