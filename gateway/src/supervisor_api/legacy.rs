//! Upstream (legacy) supervisors: they poll `GetSandboxConfig` and report
//! with upstream's four fields only, naming the policy version they loaded
//! and nothing about settings or provider environment. The gateway keeps
//! what it last served each sandbox by poll, and reads such a report as
//! "the snapshot served with this policy version is active": that snapshot
//! is what the supervisor loaded, settings included.
//!
//! What is kept lives in this replica's memory. A report that reaches a
//! replica which did not serve the snapshot (another replica, or this one
//! before a restart) proves only the policy revision, and only one the store
//! holds for a sandbox that is not stopped (`supervisor_api::report_policy_status`);
//! it settles no operation that also changed settings, which stay pending
//! until a report from the serving replica or the operation's deadline.

use std::collections::HashMap;
use std::sync::Mutex;

use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use tonic::Status;

use crate::delivery::handed::Handed;
use crate::operations::resolution::ReportedRevisions;
use crate::operations::{ReportStatus, SupervisorReport};

/// What this replica served each sandbox by poll.
#[derive(Debug, Default)]
pub struct ServedRevisions {
    by_sandbox: Mutex<HashMap<String, Served>>,
}

#[derive(Debug, Default)]
struct Served {
    /// The revisions of the snapshot served last.
    last: ReportedRevisions,
    /// Every recent snapshot served, for a report that names its revisions.
    handed: Handed,
}

impl ServedRevisions {
    pub fn record(&self, snapshot: &sb::GetSandboxConfigResponse) {
        if let Ok(mut map) = self.by_sandbox.lock() {
            let served = map.entry(snapshot.sandbox_id.clone()).or_default();
            served.last = revisions_of(snapshot);
            served.handed.served(snapshot);
        }
    }

    fn served(&self, sandbox_id: &str) -> Option<ReportedRevisions> {
        Some(self.by_sandbox.lock().ok()?.get(sandbox_id)?.last.clone())
    }

    /// Whether this replica served `sandbox_id` every configuration `report` names.
    pub fn served_all_of(&self, sandbox_id: &str, report: &ReportedRevisions) -> bool {
        self.by_sandbox
            .lock()
            .ok()
            .and_then(|map| {
                map.get(sandbox_id)
                    .map(|served| served.handed.vouches_for(report))
            })
            .unwrap_or(false)
    }

    /// Forgets a sandbox (deleted, or its supervisor reconnected with push).
    pub fn forget(&self, sandbox_id: &str) {
        if let Ok(mut map) = self.by_sandbox.lock() {
            map.remove(sandbox_id);
        }
    }
}

/// The revisions a sandbox_config snapshot carries.
pub fn revisions_of(snapshot: &sb::GetSandboxConfigResponse) -> ReportedRevisions {
    ReportedRevisions {
        policy_revision: snapshot.policy_revision,
        policy_hash: snapshot.policy_hash.clone(),
        global_policy_revision: snapshot.global_policy_revision,
        global_settings_revision: snapshot.global_settings_revision,
        workspace_settings_revision: snapshot.workspace_settings_revision,
        sandbox_settings_revision: snapshot.sandbox_settings_revision,
        provider_env_revision: snapshot.provider_env_fingerprint.clone(),
    }
}

/// Reads an upstream report (status and version only) as this project's.
pub fn report(
    served: &ServedRevisions,
    sandbox_id: &str,
    req: &pb::ReportPolicyStatusRequest,
) -> Result<SupervisorReport, Status> {
    let status = match pb::PolicyStatus::try_from(req.status) {
        Ok(pb::PolicyStatus::Loaded) => ReportStatus::Applied,
        Ok(pb::PolicyStatus::Failed) => ReportStatus::Failed {
            failed_closed: false,
        },
        _ => {
            return Err(Status::invalid_argument(
                "status: expected POLICY_STATUS_LOADED or POLICY_STATUS_FAILED (or load_status)",
            ));
        }
    };
    let version = u64::from(req.version);
    let revisions = match served.served(sandbox_id) {
        // The served snapshot is the one this version came in.
        Some(revisions) if crate::wire::version_u32(revisions.policy_revision) == req.version => {
            revisions
        }
        _ => ReportedRevisions {
            policy_revision: version,
            ..ReportedRevisions::default()
        },
    };
    Ok(SupervisorReport {
        sandbox_id: sandbox_id.to_string(),
        status,
        revisions,
        reason: req.load_error.clone(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn snapshot(
        policy_revision: u64,
        sandbox_settings_revision: u64,
    ) -> sb::GetSandboxConfigResponse {
        sb::GetSandboxConfigResponse {
            sandbox_id: "sb-1".into(),
            version: u32::try_from(policy_revision).unwrap(),
            policy_revision,
            policy_hash: format!("h{policy_revision}"),
            sandbox_settings_revision,
            ..Default::default()
        }
    }

    fn loaded(version: u32) -> pb::ReportPolicyStatusRequest {
        pb::ReportPolicyStatusRequest {
            sandbox_id: "sb-1".into(),
            version,
            status: pb::PolicyStatus::Loaded as i32,
            ..Default::default()
        }
    }

    #[test]
    fn a_loaded_version_stands_for_the_snapshot_it_was_served_in() {
        let served = ServedRevisions::default();
        served.record(&snapshot(3, 7));
        let report = report(&served, "sb-1", &loaded(3)).unwrap();
        assert_eq!(report.status, ReportStatus::Applied);
        assert_eq!(report.revisions.policy_revision, 3);
        assert_eq!(report.revisions.policy_hash, "h3");
        assert_eq!(report.revisions.sandbox_settings_revision, 7);
    }

    #[test]
    fn a_version_not_served_here_proves_only_itself() {
        let served = ServedRevisions::default();
        served.record(&snapshot(4, 7));
        let report = report(&served, "sb-1", &loaded(3)).unwrap();
        assert_eq!(report.revisions.policy_revision, 3);
        assert_eq!(report.revisions.sandbox_settings_revision, 0);
        let unknown = report_for_unknown();
        assert_eq!(unknown.revisions.sandbox_settings_revision, 0);
    }

    fn report_for_unknown() -> SupervisorReport {
        report(&ServedRevisions::default(), "sb-2", &loaded(1)).unwrap()
    }

    #[test]
    fn a_failure_carries_its_reason_and_other_statuses_are_refused() {
        let served = ServedRevisions::default();
        let failed = pb::ReportPolicyStatusRequest {
            status: pb::PolicyStatus::Failed as i32,
            load_error: "bad rule".into(),
            ..loaded(2)
        };
        let report = report(&served, "sb-1", &failed).unwrap();
        assert!(matches!(report.status, ReportStatus::Failed { .. }));
        assert_eq!(report.reason, "bad rule");
        let pending = pb::ReportPolicyStatusRequest {
            status: pb::PolicyStatus::Pending as i32,
            ..loaded(2)
        };
        let err = super::report(&served, "sb-1", &pending).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
}
