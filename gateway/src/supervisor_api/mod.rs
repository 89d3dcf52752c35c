//! The supervisor-facing RPCs of service `OpenShell`, in upstream's
//! layout: the long-lived `ConnectSupervisor` session
//! (`connect_supervisor`), the poll RPCs that project the one snapshot
//! builder, and poll-mode reports that resolve operations. `api` routes
//! these calls here; they authenticate by the supervisor credential, not
//! by an operator token.

pub mod claims;
pub mod connect_supervisor;
pub mod context;
pub mod identity;
pub mod legacy;
pub mod negotiate;

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use openshell_core::settings::{self, Scope};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;
use tonic::codec::Codec;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::{DroppedByLabel, RpcLabel, StatusLabel};
use crate::operations::resolution::ReportedRevisions;
use crate::operations::{ReportStatus, SupervisorReport};
use crate::snapshot;
use crate::store::{Lifecycle, SandboxRecord};
use crate::wire;
pub use context::SessionContext;
use identity::authenticate;

/// Most log lines accepted in one batch.
const MAX_LOG_LINES_PER_BATCH: usize = 1000;
/// Longest log line kept, in bytes.
const MAX_LOG_LINE_BYTES: usize = 8 * 1024;
/// Most structured fields kept per log line.
const MAX_LOG_FIELDS: usize = 16;

/// The supervisor-facing calls; cheap to clone.
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

/// A pushed line as kept: of the stream's sandbox whatever it claimed, each
/// text cut to its bound, and at most [`MAX_LOG_FIELDS`] fields.
fn bounded_line(line: pb::SandboxLogLine, sandbox_id: &str) -> pb::SandboxLogLine {
    let cut = |text: &str, max: usize| truncate(text, max).to_string();
    pb::SandboxLogLine {
        sandbox_id: sandbox_id.to_string(),
        timestamp_ms: line.timestamp_ms,
        level: cut(&line.level, 16),
        target: cut(&line.target, 128),
        message: cut(&line.message, MAX_LOG_LINE_BYTES),
        source: cut(&line.source, 32),
        fields: line
            .fields
            .iter()
            .take(MAX_LOG_FIELDS)
            .map(|(k, v)| (cut(k, 64), cut(v, 1024)))
            .collect(),
    }
}

pub type GatewayStream = Pin<Box<dyn Stream<Item = Result<pb::GatewayMessage, Status>> + Send>>;

impl SupervisorApi {
    fn count_poll(&self, rpc: &'static str) {
        self.state
            .metrics
            .poll_requests
            .get_or_create(&RpcLabel { rpc })
            .inc();
    }

    pub fn connect_supervisor(
        &self,
        request: Request<Streaming<pb::SupervisorMessage>>,
    ) -> Response<GatewayStream> {
        let (metadata, _, inbound) = request.into_parts();
        let outbound = connect_supervisor::spawn(self.state.clone(), metadata, inbound);
        Response::new(Box::pin(outbound.map(Ok)))
    }

    /// Runs one `ConnectSupervisor` session in process and returns every frame the gateway
    /// sent until it ended. `body` is the request body as the wire carries it:
    /// length-prefixed gRPC frames of `SupervisorMessage`, decoded with the server's message
    /// limit, so a malformed frame ends the session as a stream error, as over the network.
    /// `metadata` holds what the request headers would (the supervisor credential).
    pub async fn session_from_wire(
        &self,
        metadata: MetadataMap,
        body: prost::bytes::Bytes,
    ) -> Vec<pb::GatewayMessage> {
        let decoder =
            tonic_prost::ProstCodec::<pb::SupervisorMessage, pb::SupervisorMessage>::new()
                .decoder();
        let inbound = Streaming::new_request(
            decoder,
            http_body_util::Full::new(body),
            None,
            Some(crate::limits::MAX_MESSAGE_BYTES),
        );
        connect_supervisor::spawn(self.state.clone(), metadata, inbound)
            .collect()
            .await
    }

    pub async fn get_sandbox_config(
        &self,
        request: Request<sb::GetSandboxConfigRequest>,
    ) -> Result<Response<sb::GetSandboxConfigResponse>, Status> {
        let sandbox = authenticate(
            &self.state.store,
            &request.get_ref().sandbox_id,
            request.metadata(),
        )
        .await?;
        self.count_poll("GetSandboxConfig");
        let snapshot = snapshot::build_sandbox_config(&self.state.store, &sandbox.id).await?;
        self.state.served.record(&snapshot);
        Ok(Response::new(snapshot))
    }

    pub async fn get_gateway_config(
        &self,
        request: Request<sb::GetGatewayConfigRequest>,
    ) -> Result<Response<sb::GetGatewayConfigResponse>, Status> {
        // Any supervisor may read the global settings, as upstream's may.
        identity::authenticate_any(&self.state.store, request.metadata()).await?;
        self.count_poll("GetGatewayConfig");
        let global = self
            .state
            .store
            .settings_at(Scope::Global, "")
            .await
            .map_err(crate::error::GatewayError::from)?;
        let settings = settings::registry()
            .iter()
            .map(|def| {
                let value = global
                    .values
                    .get(def.key)
                    .map(wire::sandbox_setting_value)
                    .unwrap_or_default();
                (def.key.to_string(), value)
            })
            .collect();
        Ok(Response::new(sb::GetGatewayConfigResponse {
            settings,
            settings_revision: global.revision,
        }))
    }

    pub async fn get_sandbox_provider_environment(
        &self,
        request: Request<pb::GetSandboxProviderEnvironmentRequest>,
    ) -> Result<Response<pb::GetSandboxProviderEnvironmentResponse>, Status> {
        let sandbox = authenticate(
            &self.state.store,
            &request.get_ref().sandbox_id,
            request.metadata(),
        )
        .await?;
        self.count_poll("GetSandboxProviderEnvironment");
        let snapshot = snapshot::build_provider_environment(&self.state.store, &sandbox.id).await?;
        Ok(Response::new(snapshot))
    }

    pub async fn report_policy_status(
        &self,
        request: Request<pb::ReportPolicyStatusRequest>,
    ) -> Result<Response<pb::ReportPolicyStatusResponse>, Status> {
        let sandbox = authenticate(
            &self.state.store,
            &request.get_ref().sandbox_id,
            request.metadata(),
        )
        .await?;
        let req = request.into_inner();
        let report = match pb::PolicyLoadStatus::try_from(req.load_status) {
            Ok(pb::PolicyLoadStatus::Unspecified) | Err(_) => {
                legacy::report(&self.state.served, &sandbox.id, &req)?
            }
            Ok(load_status) => SupervisorReport {
                sandbox_id: sandbox.id.clone(),
                status: match load_status {
                    pb::PolicyLoadStatus::Loaded => ReportStatus::Applied,
                    pb::PolicyLoadStatus::Failed => ReportStatus::Failed {
                        failed_closed: req.failed_closed,
                    },
                    pb::PolicyLoadStatus::RetainedLocalOverride => {
                        ReportStatus::RetainedLocalOverride
                    }
                    pb::PolicyLoadStatus::RetainedLastKnownGoodPolicy
                    | pb::PolicyLoadStatus::Unspecified => ReportStatus::RetainedRejectedPolicy,
                },
                revisions: claims::revisions(req.revisions.as_ref(), "revisions")
                    .inspect_err(|_| self.count_refused_claim("out_of_range"))?,
                reason: req.load_error,
            },
        };
        let report = self.vouched(&sandbox, report).await?;
        let status = report.status;
        self.state
            .metrics
            .reports
            .get_or_create(&StatusLabel {
                status: status.as_str(),
            })
            .inc();
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

    /// `report` as far as this gateway can vouch for it. What this replica served the
    /// sandbox stands as reported. Anything else proves only its policy, and only one the
    /// store holds for a sandbox that is not stopped (a stopped sandbox is served nothing);
    /// its settings and provider environment are left unclaimed. A report naming a
    /// configuration that was never served is refused, so it moves no operation.
    async fn vouched(
        &self,
        sandbox: &SandboxRecord,
        mut report: SupervisorReport,
    ) -> Result<SupervisorReport, Status> {
        if self
            .state
            .served
            .served_all_of(&sandbox.id, &report.revisions)
        {
            return Ok(report);
        }
        let claim = &report.revisions;
        let holds = sandbox.lifecycle != Lifecycle::Stopped
            && self
                .state
                .store
                .holds_policy_claim(
                    &sandbox.id,
                    claim.policy_revision,
                    claim.global_policy_revision,
                    &claim.policy_hash,
                )
                .await
                .map_err(crate::error::GatewayError::from)?;
        if !holds {
            self.count_refused_claim("never_sent");
            return Err(Status::failed_precondition(claims::unhanded(
                claim,
                &sandbox.id,
            )));
        }
        report.revisions = ReportedRevisions {
            policy_revision: claim.policy_revision,
            policy_hash: claim.policy_hash.clone(),
            global_policy_revision: claim.global_policy_revision,
            ..ReportedRevisions::default()
        };
        Ok(report)
    }

    fn count_refused_claim(&self, reason: &'static str) {
        claims::count_refused(&self.state.metrics, reason);
    }

    pub async fn push_sandbox_logs(
        &self,
        request: Request<Streaming<pb::PushSandboxLogsRequest>>,
    ) -> Result<Response<pb::PushSandboxLogsResponse>, Status> {
        let (metadata, _, mut inbound) = request.into_parts();
        let metrics = &self.state.metrics;
        let mut accepted = 0u64;
        // (as the stream's first batch named it, the sandbox's id): a supervisor may name
        // its sandbox by name, and every batch must name it the same way.
        let mut sandbox_id: Option<(String, String)> = None;
        while let Some(batch) = inbound.message().await? {
            let id = match &sandbox_id {
                Some((named, id)) if *named == batch.sandbox_id => id.clone(),
                Some((named, _)) => {
                    return Err(Status::permission_denied(format!(
                        "sandbox_id: this stream pushes the logs of {named}, not of {}",
                        truncate(&batch.sandbox_id, 64)
                    )));
                }
                None => {
                    let sandbox =
                        authenticate(&self.state.store, &batch.sandbox_id, &metadata).await?;
                    sandbox_id = Some((batch.sandbox_id.clone(), sandbox.id.clone()));
                    sandbox.id
                }
            };
            let received = batch.logs.len();
            let over_batch = received.saturating_sub(MAX_LOG_LINES_PER_BATCH) as u64;
            let lines: Vec<pb::SandboxLogLine> = batch
                .logs
                .into_iter()
                .take(MAX_LOG_LINES_PER_BATCH)
                .map(|line| bounded_line(line, &id))
                .collect();
            metrics.log_lines_received.inc_by(received as u64);
            let supervisor_dropped = batch.dropped_lines;
            if supervisor_dropped > 0 {
                metrics
                    .log_lines_dropped
                    .get_or_create(&DroppedByLabel { by: "supervisor" })
                    .inc_by(supervisor_dropped);
            }
            let appended = self.state.logs.append(&id, lines, supervisor_dropped);
            let gateway_dropped = appended.evicted + over_batch;
            if gateway_dropped > 0 {
                metrics
                    .log_lines_dropped
                    .get_or_create(&DroppedByLabel { by: "gateway" })
                    .inc_by(gateway_dropped);
            }
            accepted += appended.kept;
        }
        Ok(Response::new(pb::PushSandboxLogsResponse {
            accepted_lines: accepted,
        }))
    }
}
