//! Poll-mode status reports (`ReportPolicyStatus`), sent from a background task.
//!
//! Only the latest report matters (it says what is active now), so the outbox holds at most
//! one pending report and a newer one replaces it. Sending retries with backoff and never
//! blocks the poll loop: a slow or unreachable gateway delays reports, not applies.

use std::time::Duration;

use openshell_proto::v1::supervisor_client::SupervisorClient;
use openshell_proto::v1::{AppliedRevisions, PolicyLoadStatus, ReportPolicyStatusRequest};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tracing::{debug, warn};

use crate::backoff::{Backoff, BackoffConfig};
use crate::identity::Identity;
use crate::status::SupervisorStatus;

/// One status report; the identity is added when it is sent.
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
    pub client: SupervisorClient<Channel>,
    pub identity: Identity,
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
        let request = ReportPolicyStatusRequest {
            identity: Some(self.identity.to_proto()),
            status: report.status as i32,
            revisions: Some(report.revisions.clone()),
            reason: report.reason.clone(),
            failed_closed: report.failed_closed,
        };
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
