//! The public `OpenShell` service: request decoding, target resolution and
//! conversion of domain errors to gRPC status codes. The writes themselves
//! live in `config_update`, `lifecycle` and `providers`.

mod access;
mod dry_run;
mod operation_targets;
mod paging;
mod tokens;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use openshell_core::settings::{self, Scope};
use openshell_core::{Secret, ValueClass};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use openshell_proto::v1::open_shell_server::OpenShell;
use tokio::sync::broadcast;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::config::GatewayConfig;
use crate::config_update::{
    ConfigTarget, ConfigUpdate, SettingChange, commit_update, dry_run_update,
};
use crate::delivery::{FanoutActivity, Publisher};
use crate::error::GatewayError;
use crate::lifecycle::{self, workspace_or_default};
use crate::metrics::Metrics;
use crate::operations::resolution::settle_from_last_reports;
use crate::operations::{
    OperationWatch, ended_by_deadline, stopping_status, wait_deadline, wait_for_terminal,
};
use crate::providers::{self, ProviderInput};
use crate::sandbox_logs::{self, LogEvent, LogFilter};
use crate::session_registry::SessionRegistry;
use crate::state::Announcer;
use crate::store::Store;
use crate::store::{
    Lifecycle, OperationFilter, OperationRecord, OperationState, PolicyRevisionRecord,
    SandboxRecord, StoreError, TargetKind,
};
use crate::supervisor_api::{GatewayStream, SupervisorApi};
use crate::wire;

use paging::{MAX_PAGE, page_size};

/// What the operator API touches: the store, the write path's announcer
/// and fanout gauge, and this replica's sessions for diagnostics.
pub struct ApiContext {
    pub store: Store,
    pub config_writer: crate::config_update::ConfigWriter,
    pub config: Arc<GatewayConfig>,
    pub announcer: Announcer,
    pub activity: Arc<FanoutActivity>,
    pub sessions: SessionRegistry,
    /// Read by `InspectSession` for the push sessions' delivery state.
    pub publisher: Publisher,
    pub metrics: Arc<Metrics>,
    pub stopping: tokio::sync::watch::Receiver<bool>,
    pub started_at_ms: i64,
    /// Recent sandbox log lines pushed to this replica.
    pub logs: crate::sandbox_logs::SandboxLogs,
}

/// The service; cheap to clone. Its supervisor calls go to `supervisor`.
#[derive(Clone)]
pub struct OpenShellApi {
    state: Arc<ApiContext>,
    supervisor: SupervisorApi,
    /// Server-side waits each token holds open (`max_waits_per_token`).
    waits: Arc<crate::wait_limits::WaitLimiter>,
    /// Places for supervisor sessions on this replica (`max_sessions`); a
    /// session's stream holds one until it ends.
    session_slots: Arc<tokio::sync::Semaphore>,
}

impl ApiContext {
    fn inspect_inputs(&self) -> crate::inspect::InspectInputs<'_> {
        crate::inspect::InspectInputs {
            store: &self.store,
            sessions: &self.sessions,
            publisher: &self.publisher,
            gateway_mode: self.config.config_delivery_mode,
            replica_id: &self.config.replica_id,
        }
    }
}

impl OpenShellApi {
    pub fn new(state: ApiContext, supervisor: SupervisorApi) -> Self {
        let waits = crate::wait_limits::WaitLimiter::new(state.config.max_waits_per_token);
        let session_slots = Arc::new(tokio::sync::Semaphore::new(state.config.max_sessions));
        Self {
            state: Arc::new(state),
            supervisor,
            waits,
            session_slots,
        }
    }

    /// Sandboxes as the API shows them, with the policy each one's
    /// supervisor last reported applied.
    async fn sandbox_views(&self, records: &[SandboxRecord]) -> Result<Vec<pb::Sandbox>, Status> {
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        let progress = self
            .state
            .store
            .policy_progress(&ids)
            .await
            .map_err(GatewayError::from)?;
        Ok(records
            .iter()
            .map(|r| wire::sandbox_with_applied(r, progress.get(&r.id)))
            .collect())
    }

    async fn resolve(&self, sandbox: Option<&pb::SandboxRef>) -> Result<SandboxRecord, Status> {
        let sandbox = sandbox.ok_or_else(|| {
            Status::from(GatewayError::invalid(
                "sandbox",
                "a sandbox id or name is required",
            ))
        })?;
        Ok(lifecycle::resolve_sandbox(
            &self.state.store,
            &sandbox.id_or_name,
            workspace_or_default(&sandbox.workspace),
        )
        .await?)
    }

    /// What an `UpdateConfig` writes to: `global`, `workspace_scope` with
    /// `workspace`, or the sandbox `name` (in `workspace`), if the principal
    /// may write there: the global scope needs `global.write`.
    async fn update_target_for(
        &self,
        who: &crate::authz::Principal,
        req: &pb::UpdateConfigRequest,
    ) -> Result<ConfigTarget, Status> {
        if req.global && req.workspace_scope {
            return Err(GatewayError::invalid(
                "workspace_scope",
                "choose one scope: global or workspace_scope, not both",
            )
            .into());
        }
        // A sandbox beside a scope would be ignored: the write would reach every sandbox (of
        // the workspace) while its caller meant one.
        let scope = if req.global {
            Some("global")
        } else if req.workspace_scope {
            Some("workspace_scope")
        } else {
            None
        };
        if let Some(scope) = scope
            && !req.name.is_empty()
        {
            return Err(GatewayError::invalid(
                "name",
                format!(
                    "name and {scope} are both set: choose one target, the sandbox (name) or \
                     the {scope} scope, not both"
                ),
            )
            .into());
        }
        if req.global && !req.workspace.is_empty() {
            return Err(GatewayError::invalid(
                "workspace",
                "workspace and global are both set: the global scope is every workspace's; \
                 for one workspace send workspace_scope with workspace",
            )
            .into());
        }
        if req.global {
            who.check_global(Permission::GlobalWrite)?;
            return Ok(ConfigTarget::Global);
        }
        if req.workspace_scope {
            let workspace = workspace_or_default(&req.workspace);
            who.check_in(Permission::ConfigWrite, workspace)?;
            return Ok(ConfigTarget::Workspace(workspace.to_string()));
        }
        if req.name.is_empty() {
            return Err(GatewayError::invalid(
                "name",
                "a sandbox name is required (or global, or workspace_scope with workspace)",
            )
            .into());
        }
        Ok(ConfigTarget::Sandbox(
            self.resolve_sandbox_id_for(who, Permission::ConfigWrite, &req.name, &req.workspace)
                .await?,
        ))
    }

    /// One stored revision of a sandbox's policy; 0 means the latest.
    async fn stored_revision(
        &self,
        sandbox: &SandboxRecord,
        revision: u64,
    ) -> Result<PolicyRevisionRecord, Status> {
        let store = &self.state.store;
        if revision != 0 {
            return Ok(store
                .policy_revision(&sandbox.id, revision)
                .await
                .map_err(GatewayError::from)?);
        }
        Ok(store
            .latest_policy(&sandbox.id)
            .await
            .map_err(GatewayError::from)?
            .ok_or_else(|| {
                GatewayError::NotFound(format!("sandbox {} has no policy yet", sandbox.name))
            })?)
    }

    /// A sandbox named as upstream's requests name it: `name` (or an id) in `workspace`.
    async fn resolve_named(&self, name: &str, workspace: &str) -> Result<SandboxRecord, Status> {
        if name.is_empty() {
            return Err(GatewayError::invalid("name", "a sandbox name is required").into());
        }
        Ok(
            lifecycle::resolve_sandbox(&self.state.store, name, workspace_or_default(workspace))
                .await?,
        )
    }

    /// A stored revision in upstream's shape, its status from the operation
    /// that wrote it; with its policy only when asked (one revision, not a list).
    async fn policy_revision_view(
        &self,
        record: &PolicyRevisionRecord,
        with_policy: bool,
    ) -> Result<pb::SandboxPolicyRevision, Status> {
        let (status, load_error, loaded_at_ms) = self.revision_status(record).await?;
        let policy = if with_policy {
            let policy = openshell_core::policy::parse_policy(&record.policy_json)
                .map_err(|e| GatewayError::Corrupt(e.to_string()))?;
            Some(sb::SandboxPolicy::from(&policy))
        } else {
            None
        };
        Ok(pb::SandboxPolicyRevision {
            version: wire::version_u32(record.revision),
            policy_hash: record.policy_hash.clone(),
            status: status as i32,
            load_error,
            created_at_ms: record.created_at,
            loaded_at_ms,
            policy,
            sandbox_id: record.sandbox_id.clone(),
            revision: record.revision,
            operation_id: record.operation_id.clone().unwrap_or_default(),
            provenance: Default::default(),
        })
    }

    /// Upstream's load status of a revision, read from its operation: the
    /// status, the failure reason, and when it was loaded.
    async fn revision_status(
        &self,
        record: &PolicyRevisionRecord,
    ) -> Result<(pb::PolicyStatus, String, i64), Status> {
        let Some(operation_id) = &record.operation_id else {
            return Ok((pb::PolicyStatus::Pending, String::new(), 0));
        };
        let operation = match self.state.store.get_operation(operation_id).await {
            Ok(operation) => operation,
            // Operations past their retention are gone: nothing is known.
            Err(StoreError::NotFound(_)) => {
                return Ok((pb::PolicyStatus::Unspecified, String::new(), 0));
            }
            Err(e) => return Err(GatewayError::from(e).into()),
        };
        Ok(match operation.state {
            OperationState::Applied => (
                pb::PolicyStatus::Loaded,
                String::new(),
                operation.completed_at.unwrap_or_default(),
            ),
            OperationState::Failed => (pb::PolicyStatus::Failed, operation.error, 0),
            OperationState::Superseded | OperationState::Cancelled => {
                (pb::PolicyStatus::Superseded, String::new(), 0)
            }
            OperationState::Pending | OperationState::Delivered | OperationState::Inactive => {
                (pb::PolicyStatus::Pending, String::new(), 0)
            }
        })
    }

    /// The hash of the policy an operation's write left in effect at its
    /// target, for upstream's `policy_hash`; empty when there is none.
    async fn policy_hash_after(&self, operation: &OperationRecord) -> Result<String, Status> {
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

    /// Publishes an attach or detach and settles a repeat from the last report, as
    /// `UpdateConfig` does for a no-op write.
    async fn attachment_response(
        &self,
        change: providers::AttachmentChange,
    ) -> Result<Response<pb::AttachmentResponse>, Status> {
        let mut operation = change.operation;
        match change.publication {
            Some(publication) => self.state.announcer.publish(publication).await,
            None => {
                settle_from_last_reports(&self.state.store, &operation).await?;
                operation = self
                    .state
                    .store
                    .get_operation(&operation.id)
                    .await
                    .map_err(GatewayError::from)?;
            }
        }
        Ok(Response::new(pb::AttachmentResponse {
            sandbox: Some(wire::sandbox(&change.sandbox)),
            operation: Some(wire::operation(&operation)),
        }))
    }
}

/// The page size of a list request's `field`, as the store's row limit.
fn page(field: &str, size: u32) -> Result<i64, Status> {
    Ok(i64::from(page_size(field, size)?))
}

fn offset(token: &str) -> Result<i64, Status> {
    if token.is_empty() {
        return Ok(0);
    }
    token
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            GatewayError::invalid("page_token", "not a token from a previous response").into()
        })
}

fn next_token(offset: i64, limit: i64, returned: usize) -> String {
    if i64::try_from(returned).unwrap_or(i64::MAX) < limit {
        String::new()
    } else {
        (offset + limit).to_string()
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

fn wait_options(wait: Option<&pb::WaitOptions>) -> Result<(Duration, f64), Status> {
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

fn provider_input(
    values: &[pb::ProviderValueInput],
    expires_at: Option<&prost_types::Timestamp>,
) -> ProviderInput {
    let mut env = BTreeMap::new();
    let mut credentials = BTreeMap::new();
    let mut classes = Vec::new();
    let mut value_expires_at = BTreeMap::new();
    let mut bad_times = Vec::new();
    let mut time = |field: String, at: &prost_types::Timestamp| {
        wire::timestamp_to_ms(&field, at)
            .map_err(|v| bad_times.extend(v))
            .ok()
    };
    for (i, v) in values.iter().enumerate() {
        if let Some(at) = v
            .expires_at
            .as_ref()
            .and_then(|at| time(format!("values[{i}].expires_at"), at))
        {
            value_expires_at.insert(i, (v.name.clone(), at));
        }
        let class = match pb::ValueClass::try_from(v.class) {
            Ok(pb::ValueClass::Credential) => Some(ValueClass::Credential),
            Ok(pb::ValueClass::NonSecret) => Some(ValueClass::NonSecret),
            _ => None,
        };
        classes.push((i, v.name.clone(), class));
        match class {
            Some(ValueClass::Credential) => {
                credentials.insert(v.name.clone(), Secret::new(v.value.clone()));
            }
            _ => {
                env.insert(v.name.clone(), v.value.clone());
            }
        }
    }
    let expires_at = expires_at.and_then(|at| time("expires_at".into(), at));
    ProviderInput {
        env,
        credentials,
        classes,
        expires_at,
        value_expires_at,
        bad_times,
    }
}

type OperationStream = Pin<Box<dyn Stream<Item = Result<pb::Operation, Status>> + Send>>;
type SandboxEventStream =
    Pin<Box<dyn Stream<Item = Result<pb::SandboxStreamEvent, Status>> + Send>>;

/// Lines `GetSandboxLogs` returns when `lines` is 0 (upstream's default).
const DEFAULT_LOG_LINES: u32 = 2000;
/// Lines `WatchSandbox` replays when `log_tail_lines` is 0.
const DEFAULT_LOG_TAIL: u32 = 200;

/// A log filter from a request's fields, naming `min_level_field` when its level is unknown.
fn log_filter(
    since_ms: i64,
    sources: Vec<String>,
    min_level: &str,
    min_level_field: &str,
) -> Result<LogFilter, Status> {
    let min_level = if min_level.trim().is_empty() {
        None
    } else {
        Some(sandbox_logs::level_rank(min_level).ok_or_else(|| {
            GatewayError::invalid(
                min_level_field,
                format!(
                    "unknown level {:?}; expected one of TRACE, DEBUG, INFO, WARN, ERROR",
                    min_level.chars().take(32).collect::<String>()
                ),
            )
        })?)
    };
    Ok(LogFilter {
        since_ms,
        sources,
        min_level,
    })
}

fn log_event(line: Arc<pb::SandboxLogLine>) -> pb::SandboxStreamEvent {
    pb::SandboxStreamEvent {
        payload: Some(pb::sandbox_stream_event::Payload::Log(
            Arc::unwrap_or_clone(line),
        )),
    }
}

fn dropped_event(dropped: u64, why: &str) -> pb::SandboxStreamEvent {
    pb::SandboxStreamEvent {
        payload: Some(pb::sandbox_stream_event::Payload::Warning(
            pb::SandboxStreamWarning {
                message: format!("{dropped} log lines dropped ({why})"),
                dropped_lines: dropped,
            },
        )),
    }
}

/// The parts of upstream's `WatchSandbox` this gateway does not serve.
fn refuse_unserved_watch(req: &pb::WatchSandboxRequest) -> Result<(), Status> {
    let unserved = [
        ("follow_status", req.follow_status),
        ("follow_events", req.follow_events),
        ("event_tail", req.event_tail != 0),
        ("stop_on_terminal", req.stop_on_terminal),
    ];
    if let Some((field, _)) = unserved.iter().find(|(_, set)| *set) {
        return Err(GatewayError::invalid(
            *field,
            "this gateway serves only the log lines of a sandbox (follow_logs); sandbox status and platform events are not served",
        )
        .into());
    }
    if !req.follow_logs {
        return Err(GatewayError::invalid(
            "follow_logs",
            "must be true: log lines are what this gateway streams",
        )
        .into());
    }
    Ok(())
}

/// The global policy's revision history is not in upstream's layout yet.
fn refuse_global_revisions(global: bool) -> Result<(), Status> {
    if global {
        return Err(GatewayError::invalid(
            "global",
            "the global policy's revisions are not served in this layout yet; GetSandboxPolicy reads the global policy in effect",
        )
        .into());
    }
    Ok(())
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
    } else if req.delete_setting {
        // Upstream's rule for its own field: a sandbox-scope delete is refused.
        if matches!(target, ConfigTarget::Sandbox(_)) {
            return Err(GatewayError::invalid(
                "delete_setting",
                "only a global setting can be deleted this way; to remove a sandbox value, send it in `settings` with delete",
            )
            .into());
        }
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

#[tonic::async_trait]
impl OpenShell for OpenShellApi {
    async fn create_sandbox(
        &self,
        request: Request<pb::CreateSandboxRequest>,
    ) -> Result<Response<pb::CreateSandboxResponse>, Status> {
        let who = principal_of(&request)?;
        let caller = who.name.clone();
        let req = request.into_inner();
        who.check_in(
            Permission::SandboxWrite,
            workspace_or_default(&req.workspace),
        )?;
        let policy = Some(req.policy.as_str()).filter(|p| !p.is_empty());
        let created = lifecycle::create_sandbox(
            &self.state.store,
            &req.name,
            &req.workspace,
            policy,
            &caller,
        )
        .await?;
        tracing::info!(sandbox = %created.sandbox.id, name = %created.sandbox.name, %caller, "sandbox created");
        Ok(Response::new(pb::CreateSandboxResponse {
            sandbox: Some(wire::sandbox(&created.sandbox)),
            supervisor_credential: created.credential.expose().to_string(),
            operation: created.operation.as_ref().map(wire::operation),
        }))
    }

    async fn get_sandbox(
        &self,
        request: Request<pb::GetSandboxRequest>,
    ) -> Result<Response<pb::Sandbox>, Status> {
        let who = principal_of(&request)?;
        let sandbox = self
            .resolve_for(
                &who,
                Permission::SandboxRead,
                request.get_ref().sandbox.as_ref(),
            )
            .await?;
        let views = self.sandbox_views(std::slice::from_ref(&sandbox)).await?;
        Ok(Response::new(
            views
                .into_iter()
                .next()
                .unwrap_or_else(|| wire::sandbox(&sandbox)),
        ))
    }

    async fn list_sandboxes(
        &self,
        request: Request<pb::ListSandboxesRequest>,
    ) -> Result<Response<pb::ListSandboxesResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let limit = page("page_size", req.page_size)?;
        let offset = offset(&req.page_token)?;
        let workspace = who.list_scope(
            Permission::SandboxRead,
            Some(req.workspace.as_str()).filter(|w| !w.is_empty()),
        )?;
        let records = self
            .state
            .store
            .list_sandboxes(workspace, req.include_deleted, limit, offset)
            .await
            .map_err(GatewayError::from)?;
        Ok(Response::new(pb::ListSandboxesResponse {
            next_page_token: next_token(offset, limit, records.len()),
            sandboxes: self.sandbox_views(&records).await?,
        }))
    }

    async fn delete_sandbox(
        &self,
        request: Request<pb::DeleteSandboxRequest>,
    ) -> Result<Response<pb::DeleteSandboxResponse>, Status> {
        let who = principal_of(&request)?;
        let caller = who.name.clone();
        let sandbox = self
            .resolve_live_for(
                &who,
                Permission::SandboxWrite,
                request.get_ref().sandbox.as_ref(),
            )
            .await?;
        let (deleted, cancelled, publication) =
            lifecycle::delete_sandbox(&self.state.store, &sandbox).await?;
        self.state.logs.remove(&deleted.id);
        // Like a stop: its supervisor is told why and is refused when it reconnects. A session
        // held by another replica is closed there, when the publication makes it rebuild.
        self.state
            .sessions
            .close(&deleted.id, crate::snapshot::DELETED_SANDBOX_REASON);
        self.state.announcer.publish(publication).await;
        tracing::info!(sandbox = %deleted.id, cancelled, %caller, "sandbox deleted");
        Ok(Response::new(pb::DeleteSandboxResponse {
            sandbox: Some(wire::sandbox(&deleted)),
            cancelled_operations: u32::try_from(cancelled).unwrap_or(u32::MAX),
        }))
    }

    async fn set_sandbox_lifecycle(
        &self,
        request: Request<pb::SetSandboxLifecycleRequest>,
    ) -> Result<Response<pb::Sandbox>, Status> {
        let req = request.get_ref();
        let wanted = match pb::SandboxLifecycle::try_from(req.lifecycle) {
            Ok(pb::SandboxLifecycle::Stopped) => Lifecycle::Stopped,
            Ok(pb::SandboxLifecycle::Pending) => Lifecycle::Pending,
            _ => {
                return Err(GatewayError::invalid(
                    "lifecycle",
                    "expected STOPPED, or PENDING to start the sandbox again",
                )
                .into());
            }
        };
        let who = principal_of(&request)?;
        let sandbox = self
            .resolve_live_for(&who, Permission::SandboxWrite, req.sandbox.as_ref())
            .await?;
        let change = lifecycle::set_lifecycle(&self.state.store, &sandbox, wanted).await?;
        let updated = change.sandbox;
        if updated.lifecycle == Lifecycle::Stopped {
            // Its supervisor learns why it gets nothing more; it reconnects, and is refused
            // until the sandbox starts again.
            self.state
                .sessions
                .close(&updated.id, crate::snapshot::STOPPED_SANDBOX_REASON);
        }
        if let Some(publication) = change.publication {
            self.state.announcer.publish(publication).await;
        }
        Ok(Response::new(wire::sandbox(&updated)))
    }

    async fn create_provider(
        &self,
        request: Request<pb::CreateProviderRequest>,
    ) -> Result<Response<pb::ProviderWriteResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        who.check_in(
            Permission::ProviderWrite,
            workspace_or_default(&req.workspace),
        )?;
        let input = provider_input(&req.values, req.expires_at.as_ref());
        let record = providers::create_provider(
            &self.state.store,
            &req.name,
            workspace_or_default(&req.workspace),
            &req.r#type,
            input,
        )
        .await?;
        tracing::info!(provider = %record.id, name = %record.name, "provider created");
        Ok(Response::new(pb::ProviderWriteResponse {
            provider: Some(wire::provider(&record)),
            operation: None,
        }))
    }

    async fn update_provider(
        &self,
        request: Request<pb::UpdateProviderRequest>,
    ) -> Result<Response<pb::ProviderWriteResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let existing = self
            .provider_for(
                &who,
                Permission::ProviderWrite,
                &req.provider,
                workspace_or_default(&req.workspace),
            )
            .await?;
        let input = provider_input(&req.values, req.expires_at.as_ref());
        let change = providers::update_provider(&self.state.store, &existing, input).await?;
        self.state.announcer.publish(change.publication).await;
        let record = change.provider;
        tracing::info!(provider = %record.id, revision = record.revision, "provider updated");
        Ok(Response::new(pb::ProviderWriteResponse {
            provider: Some(wire::provider(&record)),
            operation: None,
        }))
    }

    async fn delete_provider(
        &self,
        request: Request<pb::DeleteProviderRequest>,
    ) -> Result<Response<pb::DeleteProviderResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let existing = self
            .provider_for(
                &who,
                Permission::ProviderWrite,
                &req.provider,
                workspace_or_default(&req.workspace),
            )
            .await?;
        providers::delete_provider(&self.state.store, &existing).await?;
        Ok(Response::new(pb::DeleteProviderResponse {}))
    }

    async fn get_provider(
        &self,
        request: Request<pb::GetProviderRequest>,
    ) -> Result<Response<pb::Provider>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let record = self
            .provider_for(
                &who,
                Permission::ProviderRead,
                &req.provider,
                workspace_or_default(&req.workspace),
            )
            .await?;
        Ok(Response::new(wire::provider(&record)))
    }

    async fn list_providers(
        &self,
        request: Request<pb::ListProvidersRequest>,
    ) -> Result<Response<pb::ListProvidersResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let workspace = who.list_scope(
            Permission::ProviderRead,
            Some(req.workspace.as_str()).filter(|w| !w.is_empty()),
        )?;
        let records = self
            .state
            .store
            .list_providers(workspace)
            .await
            .map_err(GatewayError::from)?;
        Ok(Response::new(pb::ListProvidersResponse {
            providers: records.iter().map(wire::provider).collect(),
        }))
    }

    async fn attach_provider(
        &self,
        request: Request<pb::AttachProviderRequest>,
    ) -> Result<Response<pb::AttachmentResponse>, Status> {
        let who = principal_of(&request)?;
        let caller = who.name.clone();
        let req = request.into_inner();
        let sandbox = self
            .resolve_live_for(&who, Permission::AttachmentWrite, req.sandbox.as_ref())
            .await?;
        let provider = self
            .provider_for(
                &who,
                Permission::AttachmentWrite,
                &req.provider,
                &sandbox.workspace,
            )
            .await?;
        let change =
            providers::attach(&self.state.store, &sandbox, &provider, true, &caller).await?;
        self.attachment_response(change).await
    }

    async fn detach_provider(
        &self,
        request: Request<pb::DetachProviderRequest>,
    ) -> Result<Response<pb::AttachmentResponse>, Status> {
        let who = principal_of(&request)?;
        let caller = who.name.clone();
        let req = request.into_inner();
        let sandbox = self
            .resolve_live_for(&who, Permission::AttachmentWrite, req.sandbox.as_ref())
            .await?;
        let provider = self
            .provider_for(
                &who,
                Permission::AttachmentWrite,
                &req.provider,
                &sandbox.workspace,
            )
            .await?;
        let change =
            providers::attach(&self.state.store, &sandbox, &provider, false, &caller).await?;
        self.attachment_response(change).await
    }

    async fn get_sandbox_policy(
        &self,
        request: Request<pb::GetSandboxPolicyRequest>,
    ) -> Result<Response<pb::GetSandboxPolicyResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let sandbox = self
            .resolve_for(&who, Permission::SandboxRead, req.sandbox.as_ref())
            .await?;
        let store = &self.state.store;
        let revision = self.stored_revision(&sandbox, req.revision).await?;
        let (global_revision, global) = store.global_policy().await.map_err(GatewayError::from)?;
        Ok(Response::new(pb::GetSandboxPolicyResponse {
            policy: Some(wire::policy_revision(&revision, true)),
            effective_source: if global.is_some() {
                pb::PolicySource::Global
            } else {
                pb::PolicySource::Sandbox
            } as i32,
            global_policy_revision: global_revision,
        }))
    }

    async fn list_sandbox_policies(
        &self,
        request: Request<pb::ListSandboxPoliciesRequest>,
    ) -> Result<Response<pb::ListSandboxPoliciesResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        refuse_global_revisions(req.global)?;
        let sandbox = self
            .resolve_named_for(&who, Permission::SandboxRead, &req.name, &req.workspace)
            .await?;
        let skip = usize::try_from(req.offset).unwrap_or(usize::MAX);
        let records = self
            .state
            .store
            .policy_history(
                &sandbox.id,
                page("limit", req.limit)?.saturating_add(i64::from(req.offset)),
            )
            .await
            .map_err(GatewayError::from)?;
        let mut revisions = Vec::new();
        for record in records.iter().skip(skip) {
            revisions.push(self.policy_revision_view(record, false).await?);
        }
        Ok(Response::new(pb::ListSandboxPoliciesResponse { revisions }))
    }

    async fn get_sandbox_policy_status(
        &self,
        request: Request<pb::GetSandboxPolicyStatusRequest>,
    ) -> Result<Response<pb::GetSandboxPolicyStatusResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        refuse_global_revisions(req.global)?;
        let sandbox = self
            .resolve_named_for(&who, Permission::SandboxRead, &req.name, &req.workspace)
            .await?;
        let store = &self.state.store;
        let record = self
            .stored_revision(&sandbox, u64::from(req.version))
            .await?;
        let revision = self.policy_revision_view(&record, true).await?;
        // The newest revision loaded: its operation says APPLIED.
        let mut active_version = 0;
        for older in store
            .policy_history(&sandbox.id, i64::from(MAX_PAGE))
            .await
            .map_err(GatewayError::from)?
        {
            let (status, _, _) = self.revision_status(&older).await?;
            if status == pb::PolicyStatus::Loaded {
                active_version = wire::version_u32(older.revision);
                break;
            }
        }
        Ok(Response::new(pb::GetSandboxPolicyStatusResponse {
            revision: Some(revision),
            active_version,
        }))
    }

    async fn get_settings(
        &self,
        request: Request<pb::GetSettingsRequest>,
    ) -> Result<Response<pb::GetSettingsResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let store = &self.state.store;
        let to_pb = |values: &BTreeMap<String, openshell_core::SettingValue>, scope: Scope| {
            values
                .iter()
                .map(|(key, value)| pb::Setting {
                    key: key.clone(),
                    value: Some(wire::setting_value(value)),
                    scope: wire::scope(Some(scope)) as i32,
                })
                .collect::<Vec<_>>()
        };
        let response = match pb::SettingScope::try_from(req.scope) {
            Ok(pb::SettingScope::Global) => {
                let global = store
                    .settings_at(Scope::Global, "")
                    .await
                    .map_err(GatewayError::from)?;
                pb::GetSettingsResponse {
                    values: to_pb(&global.values, Scope::Global),
                    revision: global.revision,
                    effective: Vec::new(),
                }
            }
            Ok(pb::SettingScope::Workspace) => {
                let workspace = workspace_or_default(&req.workspace);
                who.check_in(Permission::SettingsRead, workspace)?;
                if !store
                    .workspace_exists(workspace)
                    .await
                    .map_err(GatewayError::from)?
                {
                    return Err(GatewayError::NotFound(format!(
                        "workspace {workspace:?} not found"
                    ))
                    .into());
                }
                let scoped = store
                    .settings_at(Scope::Workspace, workspace)
                    .await
                    .map_err(GatewayError::from)?;
                pb::GetSettingsResponse {
                    values: to_pb(&scoped.values, Scope::Workspace),
                    revision: scoped.revision,
                    effective: Vec::new(),
                }
            }
            Ok(pb::SettingScope::Sandbox) => {
                let sandbox = self
                    .resolve_for(&who, Permission::SettingsRead, req.sandbox.as_ref())
                    .await?;
                let own = store
                    .settings_at(Scope::Sandbox, &sandbox.id)
                    .await
                    .map_err(GatewayError::from)?;
                let workspace = store
                    .settings_at(Scope::Workspace, &sandbox.workspace)
                    .await
                    .map_err(GatewayError::from)?;
                let global = store
                    .settings_at(Scope::Global, "")
                    .await
                    .map_err(GatewayError::from)?;
                let effective = settings::effective(&global.values, &workspace.values, &own.values);
                pb::GetSettingsResponse {
                    values: to_pb(&own.values, Scope::Sandbox),
                    revision: own.revision,
                    effective: effective
                        .iter()
                        .map(|e| pb::Setting {
                            key: e.key.clone(),
                            value: Some(wire::setting_value(&e.value)),
                            scope: wire::scope(e.source) as i32,
                        })
                        .collect(),
                }
            }
            _ => {
                return Err(GatewayError::invalid(
                    "scope",
                    "expected GLOBAL, WORKSPACE or SANDBOX",
                )
                .into());
            }
        };
        Ok(Response::new(response))
    }

    async fn list_setting_definitions(
        &self,
        _request: Request<pb::ListSettingDefinitionsRequest>,
    ) -> Result<Response<pb::ListSettingDefinitionsResponse>, Status> {
        let definitions = settings::registry()
            .iter()
            .map(|def| pb::SettingDefinition {
                key: def.key.to_string(),
                kind: def.kind.name().to_string(),
                default_value: Some(wire::setting_value(&def.default_value())),
                allowed_values: def
                    .kind
                    .allowed_values()
                    .iter()
                    .map(|v| (*v).to_string())
                    .collect(),
                description: def.description.to_string(),
            })
            .collect();
        Ok(Response::new(pb::ListSettingDefinitionsResponse {
            definitions,
        }))
    }

    async fn update_config(
        &self,
        request: Request<pb::UpdateConfigRequest>,
    ) -> Result<Response<pb::UpdateConfigResponse>, Status> {
        let who = principal_of(&request)?;
        let caller = who.name.clone();
        let req = request.into_inner();
        let target = self.update_target_for(&who, &req).await?;
        let setting_changes = setting_changes(&req, &target)?;
        let policy = policy_text(&req)?;
        let policy_edits = openshell_core::policy::wire::edits_from_wire(&req.merge_operations)
            .map_err(|e| GatewayError::from_violations(e.violations))?;
        let mode = update_mode(req.mode)?;
        let (wait, threshold) = wait_options(req.wait.as_ref())?;
        // Refused before anything is written: a refused call leaves no operation behind.
        let _wait_permit = (mode == pb::UpdateMode::WaitForApply && !req.validate_only)
            .then(|| self.waits.try_acquire(&caller))
            .transpose()?;
        let delete_setting = req.delete_setting;
        let update = ConfigUpdate {
            target,
            policy,
            policy_edits,
            expected_policy_revision: Some(req.expected_resource_version).filter(|v| *v != 0),
            clear_global_policy: req.clear_global_policy,
            settings: setting_changes,
            idempotency_key: Some(req.idempotency_key).filter(|k| !k.is_empty()),
            caller: caller.clone(),
        };
        if req.validate_only {
            let dry_run = dry_run_update(&self.state.store, &update).await?;
            tracing::info!(
                target_kind = ?update.target,
                replay = dry_run.idempotent_replay,
                %caller,
                "configuration checked (validate only): nothing written"
            );
            return Ok(Response::new(dry_run::dry_run(&dry_run)));
        }
        let retention = crate::store::duration_ms(self.state.config.idempotency_retention);
        let place = self.state.activity.write_place();
        // From here to its publication, writes made beside this one move to
        // the writer thread: its fanout is about to crowd the runtime.
        let fleet_write = (!matches!(update.target, ConfigTarget::Sandbox(_)))
            .then(|| self.state.activity.fleet_write());
        let committed = commit_update(&self.state.config_writer, &update, retention, place).await?;
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
            self.state.announcer.publish(publication).await;
        }
        drop(fleet_write);
        let mut operation = committed.operation;
        if !committed.idempotent_replay && operation.no_op {
            // The revision may already be in effect: settle it from the last report.
            settle_from_last_reports(&self.state.store, &operation).await?;
            operation = self
                .state
                .store
                .get_operation(&operation.id)
                .await
                .map_err(GatewayError::from)?;
        }
        let mut wait_timed_out = false;
        if mode == pb::UpdateMode::WaitForApply && !operation.state.is_terminal() {
            let waiting = std::time::Instant::now();
            let store = &self.state.store;
            let watch = match committed.signal {
                Some(signal) => OperationWatch::from_committed(
                    store.clone(),
                    operation,
                    signal,
                    wait,
                    threshold,
                ),
                None => OperationWatch::new(store.clone(), operation.id, wait, threshold),
            };
            let (op, timed_out) =
                wait_for_terminal(store, watch.until_stopping(self.state.stopping.clone())).await?;
            self.state
                .metrics
                .observe_wait("UpdateConfig", timed_out, waiting.elapsed());
            operation = op;
            wait_timed_out = timed_out;
        }
        let policy_hash = match committed.sandbox_policy_hash {
            Some(hash) => hash,
            None => self.policy_hash_after(&operation).await?,
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
            ..Default::default()
        }))
    }

    async fn get_operation(
        &self,
        request: Request<pb::GetOperationRequest>,
    ) -> Result<Response<pb::Operation>, Status> {
        let id = &request.get_ref().id;
        if id.is_empty() {
            return Err(GatewayError::invalid("id", "an operation id is required").into());
        }
        let who = principal_of(&request)?;
        let op = self.operation_for(&who, id).await?;
        Ok(Response::new(wire::operation(&op)))
    }

    async fn wait_for_apply(
        &self,
        request: Request<pb::WaitForApplyRequest>,
    ) -> Result<Response<OperationStream>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        if req.id.is_empty() {
            return Err(GatewayError::invalid("id", "an operation id is required").into());
        }
        let (wait, threshold) = wait_options(req.wait.as_ref())?;
        // Fail fast on an unknown id rather than with an empty stream.
        self.operation_for(&who, &req.id).await?;
        // Held by the stream: its place is free when the stream ends or the client hangs up.
        let permit = self.waits.try_acquire(&who.name)?;
        let watch = OperationWatch::new(self.state.store.clone(), req.id, wait, threshold)
            .until_stopping(self.state.stopping.clone());
        let metrics = self.state.metrics.clone();
        let waiting = std::time::Instant::now();
        let store = self.state.store.clone();
        let token = who.name.clone();
        // A revoked token keeps nothing open: the stream ends as its next call would.
        let revoked: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            Box::pin(async move { crate::auth::revoked(&store, &who).await });
        let stream = futures::stream::unfold(
            (watch, false, revoked),
            move |(mut watch, told, mut revoked)| {
                let metrics = metrics.clone();
                let token = token.clone();
                let _held = &permit;
                async move {
                    if told {
                        return None;
                    }
                    let next = tokio::select! {
                        next = watch.next() => next,
                        () = &mut revoked => {
                            let status = Status::unauthenticated(format!(
                                "operator token '{token}' was revoked; the wait for operation {} ended (the operation goes on)",
                                watch.id()
                            ));
                            return Some((Err(status), (watch, true, revoked)));
                        }
                    };
                    let Some(item) = next else {
                        // After the last state, a waiter cut off by a stopping gateway hears why.
                        return watch
                            .ended_by_stopping()
                            .then(|| (Err(stopping_status(watch.id())), (watch, true, revoked)));
                    };
                    let item = item.map_err(Status::from).map(|op| {
                        let mut pb_op = wire::operation(&op);
                        pb_op.wait_timed_out = watch.is_done()
                            && ended_by_deadline(&op, threshold)
                            && !watch.ended_by_stopping();
                        if watch.is_done() {
                            metrics.observe_wait(
                                "WaitForApply",
                                pb_op.wait_timed_out,
                                waiting.elapsed(),
                            );
                        }
                        pb_op
                    });
                    Some((item, (watch, false, revoked)))
                }
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Result<Response<pb::ListOperationsResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let sandbox_id = match &req.sandbox {
            Some(sb) if !sb.id_or_name.is_empty() => Some(
                self.resolve_for(&who, Permission::OperationRead, Some(sb))
                    .await?
                    .id,
            ),
            _ => None,
        };
        let mut states = Vec::new();
        for (i, s) in req.states.iter().enumerate() {
            states.push(wire::operation_state_from_pb(*s).ok_or_else(|| {
                Status::from(GatewayError::invalid(
                    format!("states[{i}]"),
                    "unknown operation state",
                ))
            })?);
        }
        let limit = page("page_size", req.page_size)?;
        let offset = offset(&req.page_token)?;
        let records = self
            .state
            .store
            .list_operations(&OperationFilter {
                sandbox_id,
                workspace: who.workspace.clone(),
                states,
                limit,
                offset,
            })
            .await
            .map_err(GatewayError::from)?;
        Ok(Response::new(pb::ListOperationsResponse {
            next_page_token: next_token(offset, limit, records.len()),
            operations: records.iter().map(wire::operation).collect(),
        }))
    }

    async fn list_operation_targets(
        &self,
        request: Request<pb::ListOperationTargetsRequest>,
    ) -> Result<Response<pb::ListOperationTargetsResponse>, Status> {
        let who = principal_of(&request)?;
        let id = &request.get_ref().operation_id;
        if !id.is_empty() {
            self.operation_for(&who, id).await?;
        }
        let page =
            operation_targets::list(&self.state.store, &self.state.sessions, request.get_ref())
                .await?;
        Ok(Response::new(page))
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let who = principal_of(&request)?;
        let mut sessions = self.state.sessions.list(&self.state.config.replica_id);
        if let Some(own) = &who.workspace {
            // A token limited to a workspace sees the sessions of its sandboxes only.
            let mine = self
                .state
                .store
                .live_sandbox_ids(Some(own))
                .await
                .map_err(GatewayError::from)?;
            let mine: std::collections::HashSet<String> = mine.into_iter().collect();
            sessions.retain(|s| mine.contains(&s.sandbox_id));
        }
        let ids: Vec<String> = sessions.iter().map(|s| s.sandbox_id.clone()).collect();
        let progress = self
            .state
            .store
            .policy_progress(&ids)
            .await
            .map_err(GatewayError::from)?;
        for session in &mut sessions {
            if let Some(p) = progress.get(&session.sandbox_id) {
                session.policy_revision = p.desired;
                session.applied_policy_revision = p.applied;
            }
        }
        Ok(Response::new(pb::ListSessionsResponse { sessions }))
    }

    async fn inspect_session(
        &self,
        request: Request<pb::InspectSessionRequest>,
    ) -> Result<Response<pb::SessionInspection>, Status> {
        let who = principal_of(&request)?;
        let sandbox = self
            .resolve_for(
                &who,
                Permission::SessionRead,
                request.get_ref().sandbox.as_ref(),
            )
            .await?;
        let inspection = crate::inspect::inspect(&self.state.inspect_inputs(), &sandbox).await?;
        Ok(Response::new(inspection))
    }

    async fn get_gateway_info(
        &self,
        _request: Request<pb::GetGatewayInfoRequest>,
    ) -> Result<Response<pb::GatewayInfo>, Status> {
        let state = &self.state;
        let replicas = state
            .announcer
            .replicas(&state.config.replica_id)
            .await
            .map_err(Status::from)?;
        Ok(Response::new(pb::GatewayInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            config_delivery_mode: state.config.config_delivery_mode.as_str().to_string(),
            store_backend: state.store.backend().as_str().to_string(),
            replica_id: state.config.replica_id.clone(),
            protocol_revision: crate::PROTOCOL_REVISION,
            replicas,
            sessions: u32::try_from(state.sessions.count()).unwrap_or(u32::MAX),
            started_at: Some(wire::timestamp(state.started_at_ms)),
        }))
    }

    async fn get_sandbox_logs(
        &self,
        request: Request<pb::GetSandboxLogsRequest>,
    ) -> Result<Response<pb::GetSandboxLogsResponse>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        let filter = log_filter(req.since_ms, req.sources, &req.min_level, "min_level")?;
        let sandbox = self
            .resolve_named_for(&who, Permission::LogsRead, &req.sandbox_id, &req.workspace)
            .await?;
        let lines = if req.lines == 0 {
            DEFAULT_LOG_LINES
        } else {
            req.lines
        };
        let read = self.state.logs.read(&sandbox.id, &filter, lines as usize);
        Ok(Response::new(pb::GetSandboxLogsResponse {
            logs: read.lines.into_iter().map(Arc::unwrap_or_clone).collect(),
            buffer_total: u32::try_from(read.held).unwrap_or(u32::MAX),
            supervisor_dropped_lines: read.supervisor_dropped,
            gateway_dropped_lines: read.gateway_dropped,
        }))
    }

    async fn watch_sandbox(
        &self,
        request: Request<pb::WatchSandboxRequest>,
    ) -> Result<Response<SandboxEventStream>, Status> {
        let who = principal_of(&request)?;
        let req = request.into_inner();
        refuse_unserved_watch(&req)?;
        let filter = log_filter(
            req.log_since_ms,
            req.log_sources,
            &req.log_min_level,
            "log_min_level",
        )?;
        if req.id.is_empty() {
            return Err(GatewayError::invalid("id", "a sandbox id or name is required").into());
        }
        let sandbox = self
            .resolve_named_for(&who, Permission::LogsRead, &req.id, &req.workspace)
            .await?;
        let tail = if req.log_tail_lines == 0 {
            DEFAULT_LOG_TAIL
        } else {
            req.log_tail_lines
        };
        let (read, live) = self.state.logs.follow(&sandbox.id, &filter, tail as usize);
        let stopping = self.state.stopping.clone();
        // The stream ends when the client hangs up (tonic drops it), the gateway stops or the
        // sandbox is deleted (its lines are forgotten and the channel closes).
        let replay = futures::stream::iter(read.lines.into_iter().map(|l| Ok(log_event(l))));
        let follow = futures::stream::unfold(
            (live, stopping, filter),
            |(mut live, mut stopping, filter)| async move {
                loop {
                    let event = tokio::select! {
                        event = live.recv() => event,
                        _ = stopping.wait_for(|s| *s) => return None,
                    };
                    let item = match event {
                        Ok(LogEvent::Line(line)) if filter.matches(&line) => log_event(line),
                        Ok(LogEvent::Line(_)) => continue,
                        Ok(LogEvent::Dropped(n)) => {
                            dropped_event(n, "the supervisor's buffer was full")
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            dropped_event(n, "this follower fell behind")
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    };
                    return Some((Ok(item), (live, stopping, filter)));
                }
            },
        );
        let stream = futures::StreamExt::chain(replay, follow);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let who = principal_of(&request)?;
        who.check_global(Permission::TokenManage)?;
        let state = &self.state;
        let created = tokens::create(
            &state.store,
            &state.config.operator_tokens,
            &who,
            request.get_ref(),
        )
        .await?;
        Ok(Response::new(created))
    }

    async fn list_tokens(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        principal_of(&request)?.check_global(Permission::TokenManage)?;
        let listed = tokens::list(&self.state.store, &self.state.config.operator_tokens).await?;
        Ok(Response::new(listed))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let who = principal_of(&request)?;
        who.check_global(Permission::TokenManage)?;
        let state = &self.state;
        let revoked = tokens::revoke(
            &state.store,
            &state.config.operator_tokens,
            &who,
            request.get_ref(),
        )
        .await?;
        Ok(Response::new(revoked))
    }

    async fn connect_supervisor(
        &self,
        request: Request<tonic::Streaming<pb::SupervisorMessage>>,
    ) -> Result<Response<GatewayStream>, Status> {
        // Refused before the session starts: the supervisor retries with its backoff, and
        // with several replicas' addresses it reaches another one.
        let Ok(slot) = self.session_slots.clone().try_acquire_owned() else {
            tracing::warn!(
                max_sessions = self.state.config.max_sessions,
                "a supervisor session was refused: this replica holds its most sessions"
            );
            return Err(Status::resource_exhausted(format!(
                "this replica holds {} supervisor sessions, its limit (max_sessions); retry \
                 later or connect to another replica",
                self.state.config.max_sessions
            )));
        };
        Ok(self
            .supervisor
            .connect_supervisor(request)
            .map(|stream| -> GatewayStream {
                // The slot is given back when the session's stream is dropped: it ended,
                // or the supervisor hung up.
                Box::pin(futures::StreamExt::map(stream, move |item| {
                    let _held = &slot;
                    item
                }))
            }))
    }

    async fn get_sandbox_config(
        &self,
        request: Request<sb::GetSandboxConfigRequest>,
    ) -> Result<Response<sb::GetSandboxConfigResponse>, Status> {
        self.supervisor.get_sandbox_config(request).await
    }

    async fn get_gateway_config(
        &self,
        request: Request<sb::GetGatewayConfigRequest>,
    ) -> Result<Response<sb::GetGatewayConfigResponse>, Status> {
        self.supervisor.get_gateway_config(request).await
    }

    async fn get_sandbox_provider_environment(
        &self,
        request: Request<pb::GetSandboxProviderEnvironmentRequest>,
    ) -> Result<Response<pb::GetSandboxProviderEnvironmentResponse>, Status> {
        self.supervisor
            .get_sandbox_provider_environment(request)
            .await
    }

    async fn report_policy_status(
        &self,
        request: Request<pb::ReportPolicyStatusRequest>,
    ) -> Result<Response<pb::ReportPolicyStatusResponse>, Status> {
        self.supervisor.report_policy_status(request).await
    }

    async fn push_sandbox_logs(
        &self,
        request: Request<tonic::Streaming<pb::PushSandboxLogsRequest>>,
    ) -> Result<Response<pb::PushSandboxLogsResponse>, Status> {
        self.supervisor.push_sandbox_logs(request).await
    }
}
