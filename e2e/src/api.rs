//! The raw gRPC client of the tests: upstream's service `OpenShell` and this project's
//! `ConfigPlane` on one channel, so a test calls either by the method's name. The calls
//! of `OpenShell` come through `Deref`; those of `ConfigPlane` are forwarded below.

use std::ops::{Deref, DerefMut};

use openshell_proto::v1 as pb;
use openshell_proto::v1::config_plane_client::ConfigPlaneClient;
use openshell_proto::v1::open_shell_client::OpenShellClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{IntoRequest, Response, Status, Streaming};

use crate::BearerToken;

type Authed = InterceptedService<Channel, BearerToken>;

/// Authenticated raw gRPC client of both services.
#[derive(Clone)]
pub struct Api {
    openshell: OpenShellClient<Authed>,
    plane: ConfigPlaneClient<Authed>,
}

impl Api {
    pub fn new(channel: Channel, token: BearerToken) -> Self {
        Self {
            openshell: OpenShellClient::with_interceptor(channel.clone(), token.clone()),
            plane: ConfigPlaneClient::with_interceptor(channel, token),
        }
    }

    /// This project's service alone.
    pub fn plane(&mut self) -> &mut ConfigPlaneClient<Authed> {
        &mut self.plane
    }
}

impl Deref for Api {
    type Target = OpenShellClient<Authed>;

    fn deref(&self) -> &Self::Target {
        &self.openshell
    }
}

impl DerefMut for Api {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.openshell
    }
}

macro_rules! forward {
    ($($name:ident($request:ty) -> $response:ty;)*) => {
        impl Api {
            $(
                pub async fn $name(
                    &mut self,
                    request: impl IntoRequest<$request>,
                ) -> Result<Response<$response>, Status> {
                    self.plane.$name(request).await
                }
            )*
        }
    };
}

forward! {
    set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest) -> pb::Sandbox;
    attach_provider(pb::AttachProviderRequest) -> pb::AttachmentResponse;
    detach_provider(pb::DetachProviderRequest) -> pb::AttachmentResponse;
    get_sandbox_policy(pb::GetSandboxPolicyRequest) -> pb::GetSandboxPolicyResponse;
    get_settings(pb::GetSettingsRequest) -> pb::GetSettingsResponse;
    list_setting_definitions(pb::ListSettingDefinitionsRequest) -> pb::ListSettingDefinitionsResponse;
    get_operation(pb::GetOperationRequest) -> pb::Operation;
    wait_for_apply(pb::WaitForApplyRequest) -> Streaming<pb::Operation>;
    list_operations(pb::ListOperationsRequest) -> pb::ListOperationsResponse;
    list_operation_targets(pb::ListOperationTargetsRequest) -> pb::ListOperationTargetsResponse;
    list_sessions(pb::ListSessionsRequest) -> pb::ListSessionsResponse;
    inspect_session(pb::InspectSessionRequest) -> pb::SessionInspection;
    create_token(pb::CreateTokenRequest) -> pb::CreateTokenResponse;
    list_tokens(pb::ListTokensRequest) -> pb::ListTokensResponse;
    revoke_token(pb::RevokeTokenRequest) -> pb::RevokeTokenResponse;
}
