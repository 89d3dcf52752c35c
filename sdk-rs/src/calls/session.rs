//! Delivery diagnostics and gateway description.

use openshell_proto::v1 as pb;

use crate::retry::Idempotency;
use crate::types::{GatewayInfo, SandboxRef, SessionInspection, SessionSummary};
use crate::{Client, SdkError};

impl Client {
    /// Lists the connected supervisor sessions.
    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>, SdkError> {
        let response = self
            .unary(
                Idempotency::Safe,
                pb::ListSessionsRequest {},
                |mut c, r| async move { c.plane.list_sessions(r).await },
            )
            .await?;
        Ok(response.sessions.into_iter().map(Into::into).collect())
    }

    /// Explains configuration delivery for one sandbox, with hints for every
    /// abnormal state the gateway finds.
    pub async fn inspect_session(
        &self,
        sandbox: &SandboxRef,
    ) -> Result<SessionInspection, SdkError> {
        let request = pb::InspectSessionRequest {
            sandbox: Some(sandbox.to_proto()),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.plane.inspect_session(r).await
            })
            .await?;
        Ok(response.into())
    }

    /// The gateway's version, mode, store and replicas, and its clock when it
    /// answered ([`GatewayInfo::answered_at`]).
    pub async fn gateway_info(&self) -> Result<GatewayInfo, SdkError> {
        let response = self
            .unary_response(
                Idempotency::Safe,
                self.request_timeout,
                pb::GetGatewayInfoRequest {},
                |mut c, r| async move { c.openshell.get_gateway_info(r).await },
            )
            .await?;
        let answered_at = response
            .metadata()
            .get("date")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .map(|t| humantime::format_rfc3339_seconds(t).to_string());
        let mut info: GatewayInfo = response
            .into_inner()
            .details
            .ok_or_else(|| SdkError::missing("details"))?
            .into();
        info.answered_at = answered_at;
        Ok(info)
    }
}
