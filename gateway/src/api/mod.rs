//! The operator API: upstream's service `OpenShell` (its operator calls, and the
//! supervisor calls handed to `supervisor_api`) and this project's own service
//! `ConfigPlane`. Each area's handlers live in a module of their own and only decode
//! the request, resolve its target, call the write or read, and encode the answer;
//! the writes themselves live in `config_update`, `lifecycle` and `providers`.

mod access;
mod dry_run;
mod gateway_info;
mod logs;
mod operation_targets;
mod operations;
mod paging;
mod policies;
mod providers;
mod sandboxes;
mod sessions;
mod settings;
mod tokens;
mod update_config;
mod workspace_scope;

use std::sync::Arc;

use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use openshell_proto::v1::config_plane_server::ConfigPlane;
use openshell_proto::v1::open_shell_server::OpenShell;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::config::GatewayConfig;
use crate::delivery::{FanoutActivity, Publisher};
use crate::metrics::Metrics;
use crate::session_registry::SessionRegistry;
use crate::state::Announcer;
use crate::store::Store;
use crate::supervisor_api::{GatewayStream, SupervisorApi};

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
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl OpenShell for OpenShellApi {
    async fn health(&self, request: Request<pb::HealthRequest>) -> Answer<pb::HealthResponse> {
        gateway_info::health(self, request).await
    }

    async fn get_gateway_info(
        &self,
        request: Request<pb::GetGatewayInfoRequest>,
    ) -> Answer<pb::GetGatewayInfoResponse> {
        gateway_info::info(self, request).await
    }

    async fn create_sandbox(
        &self,
        request: Request<pb::CreateSandboxRequest>,
    ) -> Answer<pb::CreateSandboxResponse> {
        sandboxes::create(self, request).await
    }

    async fn get_sandbox(
        &self,
        request: Request<pb::GetSandboxRequest>,
    ) -> Answer<pb::SandboxResponse> {
        sandboxes::get(self, request).await
    }

    async fn list_sandboxes(
        &self,
        request: Request<pb::ListSandboxesRequest>,
    ) -> Answer<pb::ListSandboxesResponse> {
        sandboxes::list(self, request).await
    }

    async fn delete_sandbox(
        &self,
        request: Request<pb::DeleteSandboxRequest>,
    ) -> Answer<pb::DeleteSandboxResponse> {
        sandboxes::delete(self, request).await
    }

    async fn create_provider(
        &self,
        request: Request<pb::CreateProviderRequest>,
    ) -> Answer<pb::ProviderWriteResponse> {
        providers::create(self, request).await
    }

    async fn update_provider(
        &self,
        request: Request<pb::UpdateProviderRequest>,
    ) -> Answer<pb::ProviderWriteResponse> {
        providers::update(self, request).await
    }

    async fn delete_provider(
        &self,
        request: Request<pb::DeleteProviderRequest>,
    ) -> Answer<pb::DeleteProviderResponse> {
        providers::delete(self, request).await
    }

    async fn get_provider(&self, request: Request<pb::GetProviderRequest>) -> Answer<pb::Provider> {
        providers::get(self, request).await
    }

    async fn list_providers(
        &self,
        request: Request<pb::ListProvidersRequest>,
    ) -> Answer<pb::ListProvidersResponse> {
        providers::list(self, request).await
    }

    async fn list_sandbox_policies(
        &self,
        request: Request<pb::ListSandboxPoliciesRequest>,
    ) -> Answer<pb::ListSandboxPoliciesResponse> {
        policies::list(self, request).await
    }

    async fn get_sandbox_policy_status(
        &self,
        request: Request<pb::GetSandboxPolicyStatusRequest>,
    ) -> Answer<pb::GetSandboxPolicyStatusResponse> {
        policies::status(self, request).await
    }

    async fn update_config(
        &self,
        request: Request<pb::UpdateConfigRequest>,
    ) -> Answer<pb::UpdateConfigResponse> {
        update_config::update_config(self, request).await
    }

    async fn get_sandbox_logs(
        &self,
        request: Request<pb::GetSandboxLogsRequest>,
    ) -> Answer<pb::GetSandboxLogsResponse> {
        logs::get(self, request).await
    }

    async fn watch_sandbox(
        &self,
        request: Request<pb::WatchSandboxRequest>,
    ) -> Answer<logs::SandboxEventStream> {
        logs::watch(self, request).await
    }

    async fn connect_supervisor(
        &self,
        request: Request<tonic::Streaming<pb::SupervisorMessage>>,
    ) -> Answer<GatewayStream> {
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
    ) -> Answer<sb::GetSandboxConfigResponse> {
        self.supervisor.get_sandbox_config(request).await
    }

    async fn get_gateway_config(
        &self,
        request: Request<sb::GetGatewayConfigRequest>,
    ) -> Answer<sb::GetGatewayConfigResponse> {
        self.supervisor.get_gateway_config(request).await
    }

    async fn get_sandbox_provider_environment(
        &self,
        request: Request<pb::GetSandboxProviderEnvironmentRequest>,
    ) -> Answer<pb::GetSandboxProviderEnvironmentResponse> {
        self.supervisor
            .get_sandbox_provider_environment(request)
            .await
    }

    async fn report_policy_status(
        &self,
        request: Request<pb::ReportPolicyStatusRequest>,
    ) -> Answer<pb::ReportPolicyStatusResponse> {
        self.supervisor.report_policy_status(request).await
    }

    async fn push_sandbox_logs(
        &self,
        request: Request<tonic::Streaming<pb::PushSandboxLogsRequest>>,
    ) -> Answer<pb::PushSandboxLogsResponse> {
        self.supervisor.push_sandbox_logs(request).await
    }
}

#[tonic::async_trait]
impl ConfigPlane for OpenShellApi {
    async fn set_sandbox_lifecycle(
        &self,
        request: Request<pb::SetSandboxLifecycleRequest>,
    ) -> Answer<pb::Sandbox> {
        sandboxes::set_lifecycle(self, request).await
    }

    async fn attach_provider(
        &self,
        request: Request<pb::AttachProviderRequest>,
    ) -> Answer<pb::AttachmentResponse> {
        providers::attach(self, request).await
    }

    async fn detach_provider(
        &self,
        request: Request<pb::DetachProviderRequest>,
    ) -> Answer<pb::AttachmentResponse> {
        providers::detach(self, request).await
    }

    async fn get_sandbox_policy(
        &self,
        request: Request<pb::GetSandboxPolicyRequest>,
    ) -> Answer<pb::GetSandboxPolicyResponse> {
        policies::get(self, request).await
    }

    async fn get_settings(
        &self,
        request: Request<pb::GetSettingsRequest>,
    ) -> Answer<pb::GetSettingsResponse> {
        settings::get(self, request).await
    }

    async fn list_setting_definitions(
        &self,
        request: Request<pb::ListSettingDefinitionsRequest>,
    ) -> Answer<pb::ListSettingDefinitionsResponse> {
        settings::definitions(self, request).await
    }

    async fn get_operation(
        &self,
        request: Request<pb::GetOperationRequest>,
    ) -> Answer<pb::Operation> {
        operations::get(self, request).await
    }

    async fn wait_for_apply(
        &self,
        request: Request<pb::WaitForApplyRequest>,
    ) -> Answer<operations::OperationStream> {
        operations::wait_for_apply(self, request).await
    }

    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Answer<pb::ListOperationsResponse> {
        operations::list(self, request).await
    }

    async fn list_operation_targets(
        &self,
        request: Request<pb::ListOperationTargetsRequest>,
    ) -> Answer<pb::ListOperationTargetsResponse> {
        operations::targets(self, request).await
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Answer<pb::ListSessionsResponse> {
        sessions::list(self, request).await
    }

    async fn inspect_session(
        &self,
        request: Request<pb::InspectSessionRequest>,
    ) -> Answer<pb::SessionInspection> {
        sessions::inspect(self, request).await
    }

    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Answer<pb::CreateTokenResponse> {
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
    ) -> Answer<pb::ListTokensResponse> {
        principal_of(&request)?.check_global(Permission::TokenManage)?;
        let listed = tokens::list(&self.state.store, &self.state.config.operator_tokens).await?;
        Ok(Response::new(listed))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Answer<pb::RevokeTokenResponse> {
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
}
