//! The `Supervisor` service: the long-lived `ConnectSupervisor` session
//! (`connect_supervisor`), the poll RPCs that project the one snapshot builder, and
//! poll-mode reports that resolve operations.

pub mod connect_supervisor;
pub mod context;
pub mod identity;
pub mod negotiate;

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use openshell_proto::v1 as pb;
use openshell_proto::v1::supervisor_server::Supervisor;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::{RpcLabel, StatusLabel};
use crate::operations::{ReportStatus, SupervisorReport};
use crate::snapshot;
use crate::wire::revisions_from_pb;
pub use context::SessionContext;
use identity::authenticate;

/// Most log lines accepted in one batch.
const MAX_LOG_LINES_PER_BATCH: usize = 1000;
/// Longest log line kept, in bytes.
const MAX_LOG_LINE_BYTES: usize = 8 * 1024;

#[derive(Clone)]
pub struct SupervisorApi {
    state: Arc<SessionContext>,
}

impl SupervisorApi {
    pub fn new(state: SessionContext) -> Self {
        Self {
            state: Arc::new(state),
        }
    }
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

type GatewayStream = Pin<Box<dyn Stream<Item = Result<pb::GatewayMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Supervisor for SupervisorApi {
    type ConnectSupervisorStream = GatewayStream;

    async fn connect_supervisor(
        &self,
        request: Request<Streaming<pb::SupervisorMessage>>,
    ) -> Result<Response<Self::ConnectSupervisorStream>, Status> {
        let inbound = request.into_inner();
        let outbound = connect_supervisor::spawn(self.state.clone(), inbound);
        Ok(Response::new(Box::pin(outbound.map(Ok))))
    }

    async fn get_sandbox_config(
        &self,
        request: Request<pb::GetSandboxConfigRequest>,
    ) -> Result<Response<pb::SandboxConfigSnapshot>, Status> {
        let sandbox = authenticate(&self.state.store, request.get_ref().identity.as_ref()).await?;
        self.state
            .metrics
            .poll_requests
            .get_or_create(&RpcLabel {
                rpc: "GetSandboxConfig",
            })
            .inc();
        let snapshot = snapshot::build_sandbox_config(&self.state.store, &sandbox.id).await?;
        Ok(Response::new(snapshot))
    }

    async fn get_sandbox_provider_environment(
        &self,
        request: Request<pb::GetSandboxProviderEnvironmentRequest>,
    ) -> Result<Response<pb::ProviderEnvironmentSnapshot>, Status> {
        let sandbox = authenticate(&self.state.store, request.get_ref().identity.as_ref()).await?;
        self.state
            .metrics
            .poll_requests
            .get_or_create(&RpcLabel {
                rpc: "GetSandboxProviderEnvironment",
            })
            .inc();
        let snapshot = snapshot::build_provider_environment(&self.state.store, &sandbox.id).await?;
        Ok(Response::new(snapshot))
    }

    async fn report_policy_status(
        &self,
        request: Request<pb::ReportPolicyStatusRequest>,
    ) -> Result<Response<pb::ReportPolicyStatusResponse>, Status> {
        let req = request.into_inner();
        let sandbox = authenticate(&self.state.store, req.identity.as_ref()).await?;
        let status = match pb::PolicyLoadStatus::try_from(req.status) {
            Ok(pb::PolicyLoadStatus::Loaded) => ReportStatus::Applied,
            Ok(pb::PolicyLoadStatus::Failed) => ReportStatus::Failed {
                failed_closed: req.failed_closed,
            },
            Ok(pb::PolicyLoadStatus::RetainedLocalOverride) => ReportStatus::RetainedLocalOverride,
            Ok(pb::PolicyLoadStatus::RetainedLastKnownGoodPolicy) => {
                ReportStatus::RetainedRejectedPolicy
            }
            _ => {
                return Err(Status::invalid_argument(
                    "status: expected LOADED, FAILED, RETAINED_LOCAL_OVERRIDE or RETAINED_LAST_KNOWN_GOOD_POLICY",
                ));
            }
        };
        self.state
            .metrics
            .reports
            .get_or_create(&StatusLabel {
                status: status.as_str(),
            })
            .inc();
        let report = SupervisorReport {
            sandbox_id: sandbox.id.clone(),
            status,
            revisions: revisions_from_pb(req.revisions.as_ref()),
            reason: req.reason,
        };
        let resolved = self.state.reports.resolve(report.clone()).await?;
        tracing::info!(
            sandbox = %sandbox.id,
            status = status.as_str(),
            policy_revision = report.revisions.policy_revision,
            settings_revision = report.revisions.sandbox_settings_revision,
            resolved,
            "poll report"
        );
        Ok(Response::new(pb::ReportPolicyStatusResponse {
            resolved_operations: resolved,
        }))
    }

    async fn push_sandbox_logs(
        &self,
        request: Request<Streaming<pb::SandboxLogBatch>>,
    ) -> Result<Response<pb::PushSandboxLogsResponse>, Status> {
        let mut inbound = request.into_inner();
        let mut accepted = 0u64;
        let mut sandbox_id: Option<String> = None;
        while let Some(batch) = inbound.message().await? {
            let id = match &sandbox_id {
                Some(id) => id.clone(),
                None => {
                    let sandbox = authenticate(&self.state.store, batch.identity.as_ref()).await?;
                    sandbox_id = Some(sandbox.id.clone());
                    sandbox.id
                }
            };
            for line in batch.lines.iter().take(MAX_LOG_LINES_PER_BATCH) {
                tracing::info!(
                    target: "openshell::sandbox_log",
                    sandbox = %id,
                    source = %truncate(&line.source, 32),
                    level = %truncate(&line.level, 16),
                    "{}",
                    truncate(&line.message, MAX_LOG_LINE_BYTES)
                );
                accepted += 1;
            }
        }
        Ok(Response::new(pb::PushSandboxLogsResponse {
            accepted_lines: accepted,
        }))
    }
}
