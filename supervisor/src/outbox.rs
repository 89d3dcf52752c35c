//! Poll-mode status reports (`ReportPolicyStatus`), sent from a background task.
//!
//! Only the latest report matters (it says what is active now), so the outbox holds at most
//! one pending report and a newer one replaces it. Sending retries with backoff and never
//! blocks the poll loop: a slow or unreachable gateway delays reports, not applies.

use std::time::Duration;

use openshell_proto::v1::{
    AppliedRevisions, PolicyLoadStatus, PolicyStatus, ReportPolicyStatusRequest,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::backoff::{Backoff, BackoffConfig};
use crate::client::GatewayClient;
use crate::status::SupervisorStatus;

/// One status report; the sandbox id is added when it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusReport {
    pub status: PolicyLoadStatus,
    pub revisions: AppliedRevisions,
    /// Sanitized.
    pub reason: String,
    pub failed_closed: bool,
}

/// Hands reports to the background sender.
#[derive(Clone)]
pub(crate) struct Outbox {
    pending: watch::Sender<Option<StatusReport>>,
}

pub(crate) struct OutboxTask {
    /// Attaches the credential to every call.
    pub client: GatewayClient,
    pub sandbox_id: String,
    pub backoff: BackoffConfig,
    pub rpc_timeout: Duration,
    pub status: watch::Sender<SupervisorStatus>,
}

impl Outbox {
    /// Starts the sender; it stops when `shutdown` turns true.
    pub fn spawn(task: OutboxTask, shutdown: watch::Receiver<bool>) -> (Self, JoinHandle<()>) {
        let (pending, rx) = watch::channel(None);
        let handle = tokio::spawn(task.run(rx, shutdown));
        (Self { pending }, handle)
    }

    /// Queues `report`, replacing any report not yet sent.
    pub fn submit(&self, report: StatusReport) {
        self.pending.send_replace(Some(report));
    }
}

impl OutboxTask {
    async fn run(
        self,
        mut pending: watch::Receiver<Option<StatusReport>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut backoff = Backoff::new(self.backoff);
        loop {
            tokio::select! {
                changed = pending.changed() => if changed.is_err() { return },
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            loop {
                let Some(report) = pending.borrow_and_update().clone() else {
                    break;
                };
                match self.send(&report).await {
                    Ok(()) => {
                        backoff.reset();
                        self.status.send_modify(|s| s.reports_sent += 1);
                        break;
                    }
                    Err(err) => {
                        let delay = backoff.next_delay();
                        warn!(error = %err, retry_in = ?delay, "status report failed");
                        // A newer report cuts the wait short: it is what should go out next.
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            changed = pending.changed() => if changed.is_err() { return },
                            _ = shutdown.wait_for(|stop| *stop) => return,
                        }
                    }
                }
            }
        }
    }

    async fn send(&self, report: &StatusReport) -> Result<(), String> {
        let request = report_request(&self.sandbox_id, report);
        let mut client = self.client.clone();
        match tokio::time::timeout(self.rpc_timeout, client.report_policy_status(request)).await {
            Ok(Ok(response)) => {
                debug!(
                    status = report.status.as_str_name(),
                    policy_revision = report.revisions.policy_revision,
                    resolved_operations = response.get_ref().resolved_operations,
                    "status reported"
                );
                Ok(())
            }
            Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(self.rpc_timeout)
            )),
        }
    }
}

/// The request for `report`. This project's gateway reads the finer `load_status` and the
/// revisions; upstream's four fields say it as upstream's gateway reads it: the policy
/// `version` attempted, `LOADED` when the configuration is in effect (with the local policy
/// file kept in its place, upstream has no word for), `FAILED` with the reason when that
/// version's policy is not loaded and the last-known-good stays, which is upstream's meaning
/// of `FAILED` and so also what a rejected policy with its settings in effect is there.
fn report_request(sandbox_id: &str, report: &StatusReport) -> ReportPolicyStatusRequest {
    let status = match report.status {
        PolicyLoadStatus::Loaded | PolicyLoadStatus::RetainedLocalOverride => PolicyStatus::Loaded,
        PolicyLoadStatus::Failed | PolicyLoadStatus::RetainedLastKnownGoodPolicy => {
            PolicyStatus::Failed
        }
        PolicyLoadStatus::Unspecified => PolicyStatus::Unspecified,
    };
    ReportPolicyStatusRequest {
        sandbox_id: sandbox_id.to_string(),
        // Saturating, as the gateway writes revisions into `version`: a revision past the
        // 32-bit range must not read as an older one.
        version: u32::try_from(report.revisions.policy_revision).unwrap_or(u32::MAX),
        status: status as i32,
        load_error: report.reason.clone(),
        load_status: report.status as i32,
        revisions: Some(report.revisions.clone()),
        failed_closed: report.failed_closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(status: PolicyLoadStatus, policy_revision: u64) -> StatusReport {
        StatusReport {
            status,
            revisions: AppliedRevisions {
                policy_revision,
                provider_env_revision: "env-1".into(),
                ..AppliedRevisions::default()
            },
            reason: "why".into(),
            failed_closed: true,
        }
    }

    #[test]
    fn a_report_says_it_in_upstream_fields_and_ours() {
        let request = report_request("sb-1", &report(PolicyLoadStatus::Loaded, 7));
        assert_eq!(request.sandbox_id, "sb-1");
        assert_eq!(request.version, 7);
        assert_eq!(request.status(), PolicyStatus::Loaded);
        assert_eq!(request.load_status(), PolicyLoadStatus::Loaded);
        assert_eq!(request.load_error, "why");
        assert!(request.failed_closed);
        assert_eq!(request.revisions.unwrap().provider_env_revision, "env-1");

        for (ours, upstream) in [
            (PolicyLoadStatus::Failed, PolicyStatus::Failed),
            (
                PolicyLoadStatus::RetainedLocalOverride,
                PolicyStatus::Loaded,
            ),
            // Upstream's FAILED: not loaded, the last-known-good policy stays.
            (
                PolicyLoadStatus::RetainedLastKnownGoodPolicy,
                PolicyStatus::Failed,
            ),
        ] {
            let request = report_request("sb-1", &report(ours, 7));
            assert_eq!(request.status(), upstream, "{ours:?}");
            assert_eq!(request.load_status(), ours);
        }

        let far = report_request("sb-1", &report(PolicyLoadStatus::Loaded, 1 << 40));
        assert_eq!(far.version, u32::MAX, "saturates, never wraps");
    }
}
