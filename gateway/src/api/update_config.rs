//! `UpdateConfig`: decoding the request into a configuration write and encoding its answer.

use std::time::Duration;

use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::config_update::{
    ConfigTarget, ConfigUpdate, SettingChange, commit_update, dry_run_update,
};
use crate::error::GatewayError;
use crate::operations::resolution::settle_from_last_reports;
use crate::operations::{OperationWatch, wait_deadline, wait_for_terminal};
use crate::store::{OperationRecord, TargetKind};
use crate::wire;

use super::OpenShellApi;
use super::{dry_run, workspace_scope};

impl OpenShellApi {
    /// What an `UpdateConfig` writes to: `global`, `workspace_settings` (the settings of
    /// `workspace_scope`'s workspace), or the `sandbox` (in `workspace_scope`'s workspace),
    /// if the principal may write there: the global scope needs `global.write`.
    pub(super) async fn update_target_for(
        &self,
        who: &crate::authz::Principal,
        req: &pb::UpdateConfigRequest,
    ) -> Result<ConfigTarget, Status> {
        if req.global && req.workspace_settings {
            return Err(GatewayError::invalid(
                "workspace_settings",
                "choose one scope: global or workspace_settings, not both",
            )
            .into());
        }
        // A sandbox beside a scope would be ignored: the write would reach every sandbox (of
        // the workspace) while its caller meant one.
        let scope = if req.global {
            Some("global")
        } else if req.workspace_settings {
            Some("workspace_settings")
        } else {
            None
        };
        if let Some(scope) = scope
            && !req.sandbox.is_empty()
        {
            return Err(GatewayError::invalid(
                "sandbox",
                format!(
                    "sandbox and {scope} are both set: choose one target, the sandbox or \
                     the {scope} scope, not both"
                ),
            )
            .into());
        }
        if req.global && req.workspace_scope.is_some() {
            return Err(GatewayError::invalid(
                "workspace_scope",
                "workspace_scope and global are both set: the global scope is every workspace's; \
                 for one workspace's settings send workspace_settings with workspace_scope",
            )
            .into());
        }
        if req.global {
            who.check_global(Permission::GlobalWrite)?;
            return Ok(ConfigTarget::Global);
        }
        let workspace =
            workspace_scope::addressed("workspace_scope", req.workspace_scope.as_ref())?;
        if req.workspace_settings {
            who.check_in(Permission::ConfigWrite, workspace)?;
            return Ok(ConfigTarget::Workspace(workspace.to_string()));
        }
        if req.sandbox.is_empty() {
            return Err(GatewayError::invalid(
                "sandbox",
                "a sandbox name is required (or global, or workspace_settings with workspace_scope)",
            )
            .into());
        }
        Ok(ConfigTarget::Sandbox(
            self.resolve_sandbox_id_for(who, Permission::ConfigWrite, &req.sandbox, workspace)
                .await?,
        ))
    }

    /// The hash of the policy an operation's write left in effect at its
    /// target, for upstream's `policy_hash`; empty when there is none.
    pub(super) async fn policy_hash_after(
        &self,
        operation: &OperationRecord,
    ) -> Result<String, Status> {
        let store = &self.state.store;
        let hash = match (operation.target_kind, operation.sandbox_id.as_deref()) {
            (TargetKind::Sandbox, Some(sandbox_id)) if operation.policy_revision > 0 => Some(
                store
                    .policy_revision(sandbox_id, operation.policy_revision)
                    .await
                    .map_err(GatewayError::from)?
                    .policy_hash,
            ),
            // The global policy now in effect: this write's, or a newer one.
            (TargetKind::Global, _) => store
                .global_policy()
                .await
                .map_err(GatewayError::from)?
                .1
                .map(|g| g.policy_hash),
            _ => None,
        };
        Ok(hash.unwrap_or_default())
    }
}

/// The request's mode; a number outside the enum is refused rather than read as unset.
fn update_mode(raw: i32) -> Result<pb::UpdateMode, Status> {
    pb::UpdateMode::try_from(raw).map_err(|_| {
        GatewayError::invalid(
            "mode",
            format!(
                "unknown mode {raw}; expected COMMIT_ONLY or WAIT_FOR_APPLY, or leave it unset"
            ),
        )
        .into()
    })
}

pub(super) fn wait_options(wait: Option<&pb::WaitOptions>) -> Result<(Duration, f64), Status> {
    let timeout = match wait.and_then(|w| w.timeout.as_ref()) {
        Some(d) => {
            if d.seconds < 0 || d.nanos < 0 {
                return Err(GatewayError::invalid("wait.timeout", "must not be negative").into());
            }
            Some(Duration::new(
                u64::try_from(d.seconds).unwrap_or(0),
                u32::try_from(d.nanos).unwrap_or(0),
            ))
        }
        None => None,
    };
    let threshold = wait.map_or(0.0, |w| w.threshold);
    if !(0.0..=1.0).contains(&threshold) || threshold.is_nan() {
        return Err(
            GatewayError::invalid("wait.threshold", "must be a fraction between 0 and 1").into(),
        );
    }
    Ok((wait_deadline(timeout), threshold))
}

/// The policy of an `UpdateConfig` as text: `policy_text` as given, or the
/// typed `policy` written as its canonical JSON (the same document).
fn policy_text(req: &pb::UpdateConfigRequest) -> Result<Option<String>, Status> {
    if !req.annotations.is_empty() {
        return Err(GatewayError::invalid(
            "annotations",
            "annotations of a write are not served yet; send the request without them",
        )
        .into());
    }
    match (&req.policy, req.policy_text.is_empty()) {
        (Some(_), false) => Err(GatewayError::invalid(
            "policy",
            "give the policy once: typed in `policy` or as text in `policy_text`, not both",
        )
        .into()),
        (Some(typed), true) => {
            let policy = openshell_core::policy::SandboxPolicy::try_from(typed).map_err(|e| {
                GatewayError::from_violations(
                    e.violations
                        .into_iter()
                        .map(|v| openshell_core::Violation {
                            field: format!("policy.{}", v.field),
                            message: v.message,
                        })
                        .collect(),
                )
            })?;
            Ok(Some(policy.canonical_json()))
        }
        (None, false) => Ok(Some(req.policy_text.clone())),
        (None, true) => Ok(None),
    }
}

/// The setting changes of an `UpdateConfig`: upstream's single
/// `setting_key`, then this project's `settings`.
/// The setting key upstream stores the global policy under.
const POLICY_SETTING_KEY: &str = "policy";

/// Upstream's client clears the global policy by deleting the reserved `policy` setting
/// at global scope; this project's clients set `clear_global_policy`.
fn clears_global_policy(req: &pb::UpdateConfigRequest) -> bool {
    req.clear_global_policy
        || (req.global && req.delete_setting && req.setting_key == POLICY_SETTING_KEY)
}

fn setting_changes(
    req: &pb::UpdateConfigRequest,
    target: &ConfigTarget,
) -> Result<Vec<SettingChange>, Status> {
    let mut changes = Vec::with_capacity(req.settings.len() + 1);
    if req.setting_key.is_empty() {
        if req.delete_setting || req.setting_value.is_some() {
            return Err(GatewayError::invalid(
                "setting_key",
                "required with setting_value or delete_setting",
            )
            .into());
        }
    } else if req.setting_key == POLICY_SETTING_KEY {
        // Upstream keeps the global policy under this reserved key: deleting it at global
        // scope clears the global policy (see `clears_global_policy`); nothing else may
        // name it.
        if !(req.delete_setting && matches!(target, ConfigTarget::Global)) {
            return Err(GatewayError::invalid(
                "setting_key",
                "the reserved key \"policy\" is written with the policy field; only deleting it at global scope (which clears the global policy) is accepted",
            )
            .into());
        }
    } else if req.delete_setting {
        changes.push(SettingChange::Delete(req.setting_key.clone()));
    } else {
        let value = req
            .setting_value
            .as_ref()
            .and_then(wire::setting_value_from_sandbox)
            .ok_or_else(|| {
                GatewayError::invalid(
                    "setting_value",
                    "a string, bool or int value is required with setting_key",
                )
            })?;
        changes.push(SettingChange::Value(req.setting_key.clone(), value));
    }
    for change in &req.settings {
        changes.push(match &change.change {
            Some(pb::setting_change::Change::Value(v)) => match wire::setting_value_from_pb(v) {
                Some(value) => SettingChange::Value(change.key.clone(), value),
                None => {
                    return Err(GatewayError::invalid(
                        format!("settings.{}", change.key),
                        "a value is required",
                    )
                    .into());
                }
            },
            Some(pb::setting_change::Change::Raw(raw)) => {
                SettingChange::Raw(change.key.clone(), raw.clone())
            }
            Some(pb::setting_change::Change::Delete(true)) => {
                SettingChange::Delete(change.key.clone())
            }
            _ => {
                return Err(GatewayError::invalid(
                    format!("settings.{}", change.key),
                    "give a value, a raw value, or delete",
                )
                .into());
            }
        });
    }
    Ok(changes)
}

pub(super) async fn update_config(
    api: &OpenShellApi,
    request: Request<pb::UpdateConfigRequest>,
) -> Result<Response<pb::UpdateConfigResponse>, Status> {
    let who = principal_of(&request)?;
    let caller = who.name.clone();
    let req = request.into_inner();
    let target = api.update_target_for(&who, &req).await?;
    let setting_changes = setting_changes(&req, &target)?;
    let policy = policy_text(&req)?;
    let policy_edits = openshell_core::policy::wire::edits_from_wire(&req.merge_operations)
        .map_err(|e| GatewayError::from_violations(e.violations))?;
    let mode = update_mode(req.mode)?;
    let (wait, threshold) = wait_options(req.wait.as_ref())?;
    // Refused before anything is written: a refused call leaves no operation behind.
    let _wait_permit = (mode == pb::UpdateMode::WaitForApply && !req.validate_only)
        .then(|| api.waits.try_acquire(&caller))
        .transpose()?;
    let delete_setting = req.delete_setting;
    let update = ConfigUpdate {
        target,
        policy,
        policy_edits,
        expected_policy_revision: Some(req.expected_resource_version).filter(|v| *v != 0),
        clear_global_policy: clears_global_policy(&req),
        settings: setting_changes,
        idempotency_key: Some(req.request_id).filter(|k| !k.is_empty()),
        caller: caller.clone(),
    };
    if req.validate_only {
        let dry_run = dry_run_update(&api.state.store, &update).await?;
        tracing::info!(
            target_kind = ?update.target,
            replay = dry_run.idempotent_replay,
            %caller,
            "configuration checked (validate only): nothing written"
        );
        return Ok(Response::new(dry_run::dry_run(&dry_run)));
    }
    let retention = crate::store::duration_ms(api.state.config.idempotency_retention);
    let place = api.state.activity.write_place();
    // From here to its publication, writes made beside this one move to
    // the writer thread: its fanout is about to crowd the runtime.
    let fleet_write = (!matches!(update.target, ConfigTarget::Sandbox(_)))
        .then(|| api.state.activity.fleet_write());
    let committed = commit_update(&api.state.config_writer, &update, retention, place).await?;
    tracing::info!(
        operation = %committed.operation.id,
        target = %committed.operation.target,
        policy_revision = committed.operation.policy_revision,
        settings_revision = committed.operation.settings_revision,
        no_op = committed.operation.no_op,
        replay = committed.idempotent_replay,
        %caller,
        "configuration committed"
    );
    if let Some(publication) = committed.publication.clone() {
        api.state.announcer.publish(publication).await;
    }
    drop(fleet_write);
    let mut operation = committed.operation;
    if !committed.idempotent_replay && operation.no_op {
        // The revision may already be in effect: settle it from the last report.
        settle_from_last_reports(&api.state.store, &operation).await?;
        operation = api
            .state
            .store
            .get_operation(&operation.id)
            .await
            .map_err(GatewayError::from)?;
    }
    let mut wait_timed_out = false;
    if mode == pb::UpdateMode::WaitForApply && !operation.state.is_terminal() {
        let waiting = std::time::Instant::now();
        let store = &api.state.store;
        let watch = match committed.signal {
            Some(signal) => {
                OperationWatch::from_committed(store.clone(), operation, signal, wait, threshold)
            }
            None => OperationWatch::new(store.clone(), operation.id, wait, threshold),
        };
        let (op, timed_out) =
            wait_for_terminal(store, watch.until_stopping(api.state.stopping.clone())).await?;
        api.state
            .metrics
            .observe_wait("UpdateConfig", timed_out, waiting.elapsed());
        operation = op;
        wait_timed_out = timed_out;
    }
    let policy_hash = match committed.sandbox_policy_hash {
        Some(hash) => hash,
        None => api.policy_hash_after(&operation).await?,
    };
    let mut pb_operation = wire::operation(&operation);
    pb_operation.wait_timed_out = wait_timed_out;
    Ok(Response::new(pb::UpdateConfigResponse {
        version: wire::version_u32(match operation.target_kind {
            TargetKind::Global => operation.global_policy_revision,
            _ => operation.policy_revision,
        }),
        policy_hash,
        settings_revision: operation.settings_revision,
        deleted: delete_setting && !operation.no_op,
        operation: Some(pb_operation),
        idempotent_replay: committed.idempotent_replay,
        kept_static_sections: committed.kept_static_sections,
        merge_notes: committed.merge_notes,
        shadowed_by_global_policy: committed.shadowed_by_global_policy.unwrap_or(0),
        ..Default::default()
    }))
}
