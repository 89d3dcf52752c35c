//! Delivery diagnostics and gateway description.

use std::time::SystemTime;

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
                |mut c, r| async move { c.list_sessions(r).await },
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
                c.inspect_session(r).await
            })
            .await?;
        Ok(response.into())
    }

    pub async fn gateway_info(&self) -> Result<GatewayInfo, SdkError> {
        Ok(self.gateway_info_dated().await?.0)
    }

    /// [`Client::gateway_info`] and the gateway's clock when it answered:
    /// the HTTP `date` header of the response, to one second, if the
    /// gateway sent one. For checking clock skew.
    pub async fn gateway_info_dated(&self) -> Result<(GatewayInfo, Option<SystemTime>), SdkError> {
        let response = self
            .unary_response(
                Idempotency::Safe,
                self.request_timeout,
                pb::GetGatewayInfoRequest {},
                |mut c, r| async move { c.get_gateway_info(r).await },
            )
            .await?;
        let date = response
            .metadata()
            .get("date")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok());
        Ok((response.into_inner().into(), date))
    }
}
