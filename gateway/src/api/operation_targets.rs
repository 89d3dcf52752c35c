//! `ListOperationTargets`: which sandboxes an operation targets, where each
//! one is, and why, a page at a time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use openshell_proto::v1 as pb;
use tonic::Status;

use super::paging::page_size;
use crate::error::GatewayError;
use crate::session_registry::SessionRegistry;
use crate::store::{
    FleetCounts, OperationRecord, OperationState, OperationTargetRecord, Store, TargetKind,
    TargetPage,
};
use crate::wire;

/// The reason shown for a live target whose sandbox has no supervisor
/// connected to any replica: the change cannot reach it until one connects.
pub const NO_SESSION_REASON: &str = "no session";

/// Tokens carry this prefix so a token from another list call is refused
/// rather than read as a sandbox id.
const TOKEN_PREFIX: &str = "t1.";

/// The opaque token that continues after `sandbox_id`.
pub fn page_token(sandbox_id: &str) -> String {
    format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(sandbox_id))
}

/// The sandbox id a token continues after; "" for the first page.
fn after_token(token: &str) -> Result<String, Status> {
    if token.is_empty() {
        return Ok(String::new());
    }
    token
        .strip_prefix(TOKEN_PREFIX)
        .and_then(|t| URL_SAFE_NO_PAD.decode(t).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            GatewayError::invalid(
                "page_token",
                "not a token from a previous ListOperationTargets response",
            )
            .into()
        })
}

fn states(requested: &[i32]) -> Result<Vec<OperationState>, Status> {
    requested
        .iter()
        .enumerate()
        .map(|(i, s)| {
            wire::operation_state_from_pb(*s).ok_or_else(|| {
                Status::from(GatewayError::invalid(
                    format!("states[{i}]"),
                    "unknown operation state",
                ))
            })
        })
        .collect()
}

/// A sandbox operation's counts: its one target, in the operation's state.
fn sandbox_counts(state: OperationState) -> FleetCounts {
    let mut counts = FleetCounts {
        targets: 1,
        ..FleetCounts::default()
    };
    match state {
        OperationState::Pending | OperationState::Delivered => counts.pending = 1,
        OperationState::Applied => counts.applied = 1,
        OperationState::Failed => counts.failed = 1,
        OperationState::Superseded => counts.superseded = 1,
        OperationState::Inactive => counts.inactive = 1,
        OperationState::Cancelled => counts.cancelled = 1,
    }
    counts
}

/// Why a target is where it is: its recorded error, or for a live target
/// without one, that no supervisor of its sandbox is connected.
fn reason(target: &OperationTargetRecord, sessions: &SessionRegistry) -> String {
    if !target.error.is_empty() || target.state.is_terminal() {
        return target.error.clone();
    }
    // The replica's own registry knows a session its owner claim has not reached yet.
    if target.has_session || sessions.get(&target.sandbox_id).is_some() {
        String::new()
    } else {
        NO_SESSION_REASON.to_string()
    }
}

fn target(t: &OperationTargetRecord, sessions: &SessionRegistry) -> pb::OperationTarget {
    pb::OperationTarget {
        sandbox_id: t.sandbox_id.clone(),
        sandbox_name: t.sandbox_name.clone(),
        workspace: t.workspace.clone(),
        state: wire::operation_state(t.state) as i32,
        outcome: wire::outcome(t.outcome) as i32,
        reason: reason(t, sessions),
        updated_at: Some(wire::timestamp(t.updated_at)),
    }
}

/// Answers `ListOperationTargets`.
pub async fn list(
    store: &Store,
    sessions: &SessionRegistry,
    req: &pb::ListOperationTargetsRequest,
) -> Result<pb::ListOperationTargetsResponse, Status> {
    if req.operation_id.is_empty() {
        return Err(GatewayError::invalid("operation_id", "an operation id is required").into());
    }
    let limit = page_size("page_size", req.page_size)? as usize;
    let page = TargetPage {
        after: after_token(&req.page_token)?,
        states: states(&req.states)?,
        // One more than the page tells whether another page follows.
        limit: limit + 1,
    };
    let operation = store
        .get_operation(&req.operation_id)
        .await
        .map_err(GatewayError::from)?;
    let (mut records, counts) = match operation.target_kind {
        TargetKind::Sandbox => (
            sandbox_target(store, &operation, &page).await?,
            sandbox_counts(operation.state),
        ),
        _ => (
            store
                .operation_targets_page(&operation.id, &page)
                .await
                .map_err(GatewayError::from)?,
            operation.fleet.unwrap_or_default(),
        ),
    };
    let next_page_token = if records.len() > limit {
        records.truncate(limit);
        records
            .last()
            .map(|t| page_token(&t.sandbox_id))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(pb::ListOperationTargetsResponse {
        targets: records.iter().map(|t| target(t, sessions)).collect(),
        next_page_token,
        counts: Some(wire::fleet(&counts)),
    })
}

/// A sandbox operation's one target, when the page and filter take it in.
async fn sandbox_target(
    store: &Store,
    operation: &OperationRecord,
    page: &TargetPage,
) -> Result<Vec<OperationTargetRecord>, Status> {
    let Some(target) = store
        .sandbox_operation_target(operation)
        .await
        .map_err(GatewayError::from)?
    else {
        return Ok(Vec::new());
    };
    let in_page = target.sandbox_id.as_str() > page.after.as_str()
        && (page.states.is_empty() || page.states.contains(&target.state));
    Ok(if in_page { vec![target] } else { Vec::new() })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_foreign_ones_are_refused() {
        let token = page_token("sb-0193abc");
        assert_eq!(after_token(&token).unwrap(), "sb-0193abc");
        assert_eq!(after_token("").unwrap(), "");
        for bad in ["100", "t1.", "t1.!!", "sb-0193abc"] {
            let err = after_token(bad).unwrap_err();
            assert!(
                err.message().contains("page_token"),
                "{bad}: {}",
                err.message()
            );
        }
    }

    #[test]
    fn a_sandbox_operation_counts_its_one_target() {
        let counts = sandbox_counts(OperationState::Delivered);
        assert_eq!((counts.targets, counts.pending), (1, 1));
        let counts = sandbox_counts(OperationState::Failed);
        assert_eq!((counts.targets, counts.failed, counts.pending), (1, 1, 0));
    }
}
