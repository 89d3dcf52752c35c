//! `listOperationTargets`: which sandboxes an operation targets, where each
//! one is and why, a page at a time.

use napi_derive::napi;
use openshell_sdk as sdk;

use crate::enums::{ApplyOutcome, OperationState};
use crate::views::FleetProgress;

#[napi(object)]
pub struct ListOperationTargetsOptions {
    /// Only targets in one of these states.
    pub states: Option<Vec<OperationState>>,
    /// At most this many (gateway default 100; more than 1000 is refused).
    pub page_size: Option<u32>,
    /// `nextPageToken` of the previous page.
    pub page_token: Option<String>,
}

/// One sandbox an operation targets, and how far the change got there.
#[napi(object)]
pub struct OperationTarget {
    pub sandbox_id: String,
    /// Absent when the sandbox record is gone.
    pub sandbox_name: Option<String>,
    pub workspace: Option<String>,
    pub state: OperationState,
    /// Supervisor outcome, set once terminal (`UNSPECIFIED` before).
    pub outcome: ApplyOutcome,
    /// The error of a terminal target, or `no session` for a live one no
    /// supervisor is connected for.
    pub reason: Option<String>,
    /// RFC 3339 with milliseconds.
    pub updated_at: Option<String>,
}

impl From<sdk::OperationTarget> for OperationTarget {
    fn from(t: sdk::OperationTarget) -> Self {
        Self {
            sandbox_id: t.sandbox_id,
            sandbox_name: t.sandbox_name,
            workspace: t.workspace,
            state: t.state.into(),
            outcome: t.outcome.into(),
            reason: t.reason,
            updated_at: t.updated_at,
        }
    }
}

/// One page of an operation's targets, in sandbox id order.
#[napi(object)]
pub struct OperationTargets {
    pub targets: Vec<OperationTarget>,
    /// Pass it as `pageToken` for the next page; absent after the last one.
    pub next_page_token: Option<String>,
    /// Counts over every target of the operation, whatever the filter and page.
    pub counts: FleetProgress,
}

impl From<sdk::OperationTargets> for OperationTargets {
    fn from(p: sdk::OperationTargets) -> Self {
        Self {
            targets: p.targets.into_iter().map(Into::into).collect(),
            next_page_token: p.next_page_token,
            counts: p.counts.into(),
        }
    }
}

impl ListOperationTargetsOptions {
    pub(crate) fn into_sdk(self) -> (Vec<sdk::OperationState>, u32, Option<String>) {
        (
            self.states
                .unwrap_or_default()
                .into_iter()
                .map(sdk::OperationState::from)
                .collect(),
            self.page_size.unwrap_or(0),
            self.page_token.filter(|t| !t.is_empty()),
        )
    }
}
