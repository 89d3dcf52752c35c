//! The one place where operations are resolved from what a supervisor
//! reports, whatever the transport (poll `ReportPolicyStatus` or push ack).
//!
//! A sandbox operation is APPLIED when the reported revisions equal its
//! exact `(policy_revision, settings_revision)` tuple, SUPERSEDED when the
//! report is newer in one part and not older in any, and stays live when the
//! report is older. Fleet targets count as applied once the report reaches
//! or passes the revision of their scope.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::store::{
    Lifecycle, OperationRecord, OperationState, Outcome, Store, TargetKind, WriteTx,
};

/// Longest error text stored on an operation.
pub const MAX_ERROR_BYTES: usize = 1024;

/// What the supervisor says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReportStatus {
    /// The reported revisions are active.
    Applied,
    /// The reported revisions were rejected; last-known-good stays active.
    Failed { failed_closed: bool },
    /// Settings and provider environment are active; a local policy file keeps precedence.
    RetainedLocalOverride,
}

impl ReportStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "APPLIED",
            Self::Failed {
                failed_closed: false,
            } => "FAILED",
            Self::Failed {
                failed_closed: true,
            } => "FAILED_CLOSED",
            Self::RetainedLocalOverride => "RETAINED_LOCAL_OVERRIDE",
        }
    }
}

/// Revisions a supervisor reports as active (or attempted, on failure).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedRevisions {
    pub policy_revision: u64,
    pub policy_hash: String,
    pub global_policy_revision: u64,
    pub global_settings_revision: u64,
    pub workspace_settings_revision: u64,
    pub sandbox_settings_revision: u64,
    pub provider_env_revision: String,
}

/// One report from one sandbox's supervisor.
#[derive(Debug, Clone)]
pub struct SupervisorReport {
    pub sandbox_id: String,
    pub status: ReportStatus,
    pub revisions: ReportedRevisions,
    pub reason: String,
}

/// Bounds and cleans supervisor-provided text before it is stored or shown.
pub fn sanitize_error(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .collect();
    if cleaned.len() <= MAX_ERROR_BYTES {
        return cleaned;
    }
    let mut end = MAX_ERROR_BYTES - 3;
    while !cleaned.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &cleaned[..end])
}

#[derive(Debug, PartialEq, Eq)]
enum Position {
    Exact,
    Newer,
    Older,
}

/// Where a report stands relative to an operation's tuple.
fn position(
    op_policy: u64,
    op_settings: u64,
    reported_policy: u64,
    reported_settings: u64,
) -> Position {
    if (reported_policy, reported_settings) == (op_policy, op_settings) {
        Position::Exact
    } else if reported_policy >= op_policy && reported_settings >= op_settings {
        Position::Newer
    } else {
        Position::Older
    }
}

/// A no-op write tracks revisions the supervisor may already run: replay
/// each target sandbox's last report against it.
pub async fn settle_from_last_reports(store: &Store, operation: &OperationRecord) -> Result<()> {
    let sandboxes = match &operation.sandbox_id {
        Some(id) => vec![id.clone()],
        None => store.operation_target_ids(&operation.id).await?,
    };
    for sandbox_id in sandboxes {
        let Some(last) = store.last_report(&sandbox_id).await? else {
            continue;
        };
        let Ok(revisions) = serde_json::from_str::<ReportedRevisions>(&last.revisions_json) else {
            continue;
        };
        let status = match last.status.as_str() {
            "APPLIED" => ReportStatus::Applied,
            "RETAINED_LOCAL_OVERRIDE" => ReportStatus::RetainedLocalOverride,
            // A failure is not replayed: the no-op write asked for nothing new.
            _ => continue,
        };
        let report = SupervisorReport {
            sandbox_id,
            status,
            revisions,
            reason: last.reason,
        };
        resolve(store, &report, false).await?;
    }
    Ok(())
}

async fn resolve(store: &Store, report: &SupervisorReport, record: bool) -> Result<u32> {
    let mut tx = store.begin_write().await?;
    let resolved = resolve_in(&mut tx, report, record).await?;
    tx.commit().await?;
    Ok(resolved)
}

/// Resolves every operation the report settles inside `tx`; returns how
/// many it ended. `record` keeps the report as the sandbox's last one.
pub(super) async fn resolve_in(
    tx: &mut WriteTx,
    report: &SupervisorReport,
    record: bool,
) -> Result<u32> {
    let reason = sanitize_error(&report.reason);
    let r = &report.revisions;
    let sandbox = tx.lock_sandbox(&report.sandbox_id).await?;
    let mut resolved = 0u32;
    for op in tx.live_sandbox_operations(&report.sandbox_id).await? {
        let pos = position(
            op.policy_revision,
            op.settings_revision,
            r.policy_revision,
            r.sandbox_settings_revision,
        );
        let verdict = match (pos, report.status) {
            (Position::Older, _) => None,
            (Position::Newer, _) => Some((
                OperationState::Superseded,
                Outcome::SupersededByNewer,
                "a newer revision reached the supervisor first".to_string(),
            )),
            (Position::Exact, ReportStatus::Applied) => {
                Some((OperationState::Applied, Outcome::Applied, String::new()))
            }
            (Position::Exact, ReportStatus::Failed { failed_closed }) => Some((
                OperationState::Failed,
                if failed_closed {
                    Outcome::FailedClosed
                } else {
                    Outcome::FailedRetainedLastKnownGood
                },
                reason.clone(),
            )),
            (Position::Exact, ReportStatus::RetainedLocalOverride) if op.touches_policy => Some((
                OperationState::Inactive,
                Outcome::RetainedLocalOverride,
                "local policy file keeps precedence; the gateway policy is not in effect"
                    .to_string(),
            )),
            (Position::Exact, ReportStatus::RetainedLocalOverride) => {
                Some((OperationState::Applied, Outcome::Applied, String::new()))
            }
        };
        if let Some((state, outcome, error)) = verdict
            && tx.finish_operation(&op.id, state, outcome, &error).await?
        {
            resolved += 1;
        }
    }
    for target in tx.live_targets_for_sandbox(&report.sandbox_id).await? {
        let reached = match target.target_kind {
            TargetKind::Global => {
                r.global_settings_revision >= target.settings_revision
                    && r.global_policy_revision >= target.global_policy_revision
            }
            TargetKind::Workspace => r.workspace_settings_revision >= target.settings_revision,
            TargetKind::Sandbox | TargetKind::Provider => false,
        };
        if !reached {
            continue;
        }
        let (state, outcome, error) = match report.status {
            ReportStatus::Applied => (OperationState::Applied, Outcome::Applied, String::new()),
            ReportStatus::Failed { failed_closed } => (
                OperationState::Failed,
                if failed_closed {
                    Outcome::FailedClosed
                } else {
                    Outcome::FailedRetainedLastKnownGood
                },
                reason.clone(),
            ),
            ReportStatus::RetainedLocalOverride if target.touches_policy => (
                OperationState::Inactive,
                Outcome::RetainedLocalOverride,
                "local policy file keeps precedence".to_string(),
            ),
            ReportStatus::RetainedLocalOverride => {
                (OperationState::Applied, Outcome::Applied, String::new())
            }
        };
        if tx
            .finish_target(
                &target.operation_id,
                &report.sandbox_id,
                state,
                outcome,
                &error,
            )
            .await?
        {
            resolved += 1;
        }
    }
    if record {
        let revisions_json = serde_json::to_string(r).unwrap_or_default();
        tx.record_report(
            &report.sandbox_id,
            report.status.as_str(),
            &revisions_json,
            &reason,
        )
        .await?;
    }
    if sandbox.lifecycle == Lifecycle::Pending
        && report.status
            != (ReportStatus::Failed {
                failed_closed: true,
            })
    {
        tx.mark_running(&report.sandbox_id).await?;
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_newer_and_older_reports() {
        assert_eq!(position(2, 1, 2, 1), Position::Exact);
        assert_eq!(position(2, 1, 3, 1), Position::Newer);
        assert_eq!(position(2, 1, 2, 2), Position::Newer);
        assert_eq!(position(2, 1, 1, 5), Position::Older);
        assert_eq!(position(2, 1, 2, 0), Position::Older);
    }

    #[test]
    fn errors_are_bounded_and_cleaned() {
        let long = "é".repeat(2000);
        let cleaned = sanitize_error(&long);
        assert!(cleaned.len() <= MAX_ERROR_BYTES);
        assert!(cleaned.ends_with("..."));
        assert_eq!(sanitize_error("bad\u{1b}[31m"), "bad [31m");
    }
}
