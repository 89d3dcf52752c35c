//! Reading durable operations. Waiting on them lives in `wait.rs`.

use openshell_proto::v1 as pb;

use crate::retry::Idempotency;
use crate::types::{Operation, OperationState, SandboxRef};
use crate::{Client, SdkError};

impl Client {
    pub async fn get_operation(&self, id: &str) -> Result<Operation, SdkError> {
        let request = pb::GetOperationRequest { id: id.to_owned() };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.get_operation(r).await
            })
            .await?;
        Ok(response.into())
    }

    /// Lists the newest operations, optionally of one sandbox and in some
    /// states; one page of at most `page_size` (0 means the gateway's default
    /// of 100, the gateway caps it at 1000).
    pub async fn list_operations(
        &self,
        sandbox: Option<&SandboxRef>,
        states: &[OperationState],
        page_size: u32,
    ) -> Result<Vec<Operation>, SdkError> {
        let request = pb::ListOperationsRequest {
            sandbox: sandbox.map(SandboxRef::to_proto),
            states: states.iter().map(|s| i32::from(*s)).collect(),
            page_size,
            page_token: String::new(),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.list_operations(r).await
            })
            .await?;
        Ok(response.operations.into_iter().map(Into::into).collect())
    }
}
