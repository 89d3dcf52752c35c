//! Operations: read one, wait for one, list them and their targets.

use std::pin::Pin;

use futures::Stream;
use openshell_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::auth::principal_of;
use crate::authz::Permission;
use crate::error::GatewayError;
use crate::operations::{OperationWatch, ended_by_deadline, stopping_status};
use crate::store::OperationFilter;
use crate::wire;

use super::OpenShellApi;
use super::operation_targets;
use super::paging::{next_token, offset, page};
use super::update_config::wait_options;

pub(super) type OperationStream = Pin<Box<dyn Stream<Item = Result<pb::Operation, Status>> + Send>>;

pub(super) async fn get(
    api: &OpenShellApi,
    request: Request<pb::GetOperationRequest>,
) -> Result<Response<pb::Operation>, Status> {
    let id = &request.get_ref().id;
    if id.is_empty() {
        return Err(GatewayError::invalid("id", "an operation id is required").into());
    }
    let who = principal_of(&request)?;
    let op = api.operation_for(&who, id).await?;
    Ok(Response::new(wire::operation(&op)))
}

pub(super) async fn wait_for_apply(
    api: &OpenShellApi,
    request: Request<pb::WaitForApplyRequest>,
) -> Result<Response<OperationStream>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    if req.id.is_empty() {
        return Err(GatewayError::invalid("id", "an operation id is required").into());
    }
    let (wait, threshold) = wait_options(req.wait.as_ref())?;
    // Fail fast on an unknown id rather than with an empty stream.
    api.operation_for(&who, &req.id).await?;
    // Held by the stream: its place is free when the stream ends or the client hangs up.
    let permit = api.waits.try_acquire(&who.name)?;
    let watch = OperationWatch::new(api.state.store.clone(), req.id, wait, threshold)
        .until_stopping(api.state.stopping.clone());
    let metrics = api.state.metrics.clone();
    let waiting = std::time::Instant::now();
    let store = api.state.store.clone();
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

pub(super) async fn list(
    api: &OpenShellApi,
    request: Request<pb::ListOperationsRequest>,
) -> Result<Response<pb::ListOperationsResponse>, Status> {
    let who = principal_of(&request)?;
    let req = request.into_inner();
    let sandbox_id = match &req.sandbox {
        Some(sb) if !sb.id_or_name.is_empty() => Some(
            api.resolve_for(&who, Permission::OperationRead, Some(sb))
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
    let records = api
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

pub(super) async fn targets(
    api: &OpenShellApi,
    request: Request<pb::ListOperationTargetsRequest>,
) -> Result<Response<pb::ListOperationTargetsResponse>, Status> {
    let who = principal_of(&request)?;
    let id = &request.get_ref().operation_id;
    if !id.is_empty() {
        api.operation_for(&who, id).await?;
    }
    let page =
        operation_targets::list(&api.state.store, &api.state.sessions, request.get_ref()).await?;
    Ok(Response::new(page))
}
