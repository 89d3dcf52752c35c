//! Sandbox log lines: a one-shot read and a follow.

use openshell_proto::v1 as pb;

use crate::log_stream::SandboxLogStream;
use crate::retry::Idempotency;
use crate::types::{LogQuery, SandboxLogs, SandboxRef};
use crate::{Client, SdkError};

impl Client {
    /// Reads a sandbox's recent log lines from the gateway replica its supervisor pushes to.
    pub async fn get_sandbox_logs(
        &self,
        sandbox: &SandboxRef,
        query: &LogQuery,
    ) -> Result<SandboxLogs, SdkError> {
        let request = pb::GetSandboxLogsRequest {
            sandbox_id: sandbox.id_or_name.clone(),
            lines: query.lines,
            since_ms: query.since_ms,
            sources: query.sources.clone(),
            min_level: query.min_level.clone().unwrap_or_default(),
            workspace: sandbox.workspace.clone().unwrap_or_default(),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.openshell.get_sandbox_logs(r).await
            })
            .await?;
        Ok(response.into())
    }

    /// Follows a sandbox's log lines: the newest `query.lines` (0: 200), then every new
    /// one, until the stream is dropped. The client's request timeout bounds only the start.
    pub async fn watch_sandbox_logs(
        &self,
        sandbox: &SandboxRef,
        query: &LogQuery,
    ) -> Result<SandboxLogStream, SdkError> {
        let request = pb::WatchSandboxRequest {
            id: sandbox.id_or_name.clone(),
            follow_logs: true,
            log_tail_lines: query.lines,
            log_since_ms: query.since_ms,
            log_sources: query.sources.clone(),
            log_min_level: query.min_level.clone().unwrap_or_default(),
            workspace: sandbox.workspace.clone().unwrap_or_default(),
            ..Default::default()
        };
        let inner = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.openshell.watch_sandbox(r).await
            })
            .await?;
        Ok(SandboxLogStream::new(inner))
    }
}
