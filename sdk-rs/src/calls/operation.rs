//! Reading durable operations. Waiting on them lives in `wait.rs`.

use futures::Stream;
use openshell_proto::v1 as pb;

use crate::retry::Idempotency;
use crate::types::{Operation, OperationState, OperationTarget, OperationTargets, SandboxRef};
use crate::{Client, SdkError};

impl Client {
    pub async fn get_operation(&self, id: &str) -> Result<Operation, SdkError> {
        let request = pb::GetOperationRequest { id: id.to_owned() };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.plane.get_operation(r).await
            })
            .await?;
        Ok(response.into())
    }

    /// Lists the newest operations, optionally of one sandbox and in some
    /// states; one page of at most `page_size` (0 means the gateway's default
    /// of 100; more than 1000 is refused with `INVALID_ARGUMENT`).
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
                c.plane.list_operations(r).await
            })
            .await?;
        Ok(response.operations.into_iter().map(Into::into).collect())
    }

    /// One page of an operation's targets, in sandbox id order, optionally
    /// only those in some states. `page_size` 0 means the gateway's default
    /// of 100; more than 1000 is refused. Pass the page's
    /// `next_page_token` back as `page_token` for the next one. A sandbox
    /// operation has one target, its sandbox.
    pub async fn list_operation_targets(
        &self,
        operation_id: &str,
        states: &[OperationState],
        page_size: u32,
        page_token: Option<&str>,
    ) -> Result<OperationTargets, SdkError> {
        let request = pb::ListOperationTargetsRequest {
            operation_id: operation_id.to_owned(),
            states: states.iter().map(|s| i32::from(*s)).collect(),
            page_size,
            page_token: page_token.unwrap_or_default().to_owned(),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.plane.list_operation_targets(r).await
            })
            .await?;
        Ok(response.into())
    }

    /// Every target of an operation in the given states (all when empty),
    /// page after page of `page_size` (0: the gateway's default), in
    /// sandbox id order. Each target comes once, even while the operation
    /// resolves: pages continue after the last sandbox seen.
    pub fn operation_targets(
        &self,
        operation_id: &str,
        states: &[OperationState],
        page_size: u32,
    ) -> impl Stream<Item = Result<OperationTarget, SdkError>> + Send + 'static {
        struct Pages {
            client: Client,
            operation_id: String,
            states: Vec<OperationState>,
            page_size: u32,
            /// `None` once the last page was read.
            token: Option<String>,
            buffered: std::vec::IntoIter<OperationTarget>,
        }
        let pages = Pages {
            client: self.clone(),
            operation_id: operation_id.to_owned(),
            states: states.to_vec(),
            page_size,
            token: Some(String::new()),
            buffered: Vec::new().into_iter(),
        };
        futures::stream::try_unfold(pages, |mut pages| async move {
            loop {
                if let Some(target) = pages.buffered.next() {
                    return Ok(Some((target, pages)));
                }
                let Some(token) = pages.token.take() else {
                    return Ok(None);
                };
                let page = pages
                    .client
                    .list_operation_targets(
                        &pages.operation_id,
                        &pages.states,
                        pages.page_size,
                        Some(&token).filter(|t| !t.is_empty()).map(String::as_str),
                    )
                    .await?;
                // A token equal to the one sent would read the same page forever.
                pages.token = page.next_page_token.filter(|next| *next != token);
                pages.buffered = page.targets.into_iter();
            }
        })
    }
}
