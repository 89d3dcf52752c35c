//! The native client class: one async method per call of
//! `openshell_sdk::Client`, each converting options in and views out.
//!
//! Nothing here decides behaviour (retries, timeouts, error codes, what is
//! terminal); that is the sdk's, so Node cannot drift from the CLI or Python.

use napi_derive::napi;
use openshell_sdk::{self as sdk, SandboxRef};

use crate::enums::SandboxLifecycle;
use crate::error::IntoNapi;
use crate::logs::{LogOptions, SandboxLogWatch, SandboxLogs};
use crate::options::{
    ConfigTarget, ConnectOptions, CreateSandboxOptions, ListOperationsOptions,
    ListSandboxesOptions, ProviderSpec, ProviderUpdate, UpdateConfigOptions, WatchOptions, millis,
};
use crate::targets::{ListOperationTargetsOptions, OperationTargets};
use crate::views::{
    Attachment, CreatedSandbox, DeletedSandbox, GatewayInfo, Operation, PolicyRevision, Provider,
    ProviderWrite, Sandbox, SandboxPolicy, ScopeSettings, SessionInspection, SessionSummary,
    SettingDefinition, UpdateResult,
};
use crate::watch::OperationWatch;

/// Connects to a gateway, failing fast when it cannot be reached.
#[napi]
pub async fn connect(options: ConnectOptions) -> napi::Result<NativeClient> {
    let options = options.into_sdk().into_napi()?;
    let inner = sdk::Client::connect(options).await.into_napi()?;
    Ok(NativeClient { inner })
}

/// A connection to one gateway; wrapped by `Client` in `index.js`, which
/// turns rejections into the exported error classes.
#[napi]
pub struct NativeClient {
    inner: sdk::Client,
}

/// Revisions are plain JS numbers; a negative or fractional one names nothing.
fn revision(value: Option<f64>) -> Result<Option<u64>, sdk::SdkError> {
    match value {
        None => Ok(None),
        Some(r) if r.is_finite() && r >= 1.0 && r.fract() == 0.0 && r <= 2f64.powi(53) => {
            // The guard above makes this cast exact: a whole number in 1..=2^53.
            Ok(Some(r as u64))
        }
        Some(_) => Err(crate::error::invalid(
            "revision",
            "must be a positive integer",
        )),
    }
}

#[napi]
impl NativeClient {
    #[napi(getter)]
    pub fn endpoint(&self) -> String {
        self.inner.endpoint().to_owned()
    }

    #[napi]
    pub async fn create_sandbox(
        &self,
        options: CreateSandboxOptions,
    ) -> napi::Result<CreatedSandbox> {
        self.inner
            .create_sandbox(
                &options.name,
                options.workspace.as_deref(),
                options.policy.as_deref(),
            )
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn get_sandbox(&self, sandbox: String) -> napi::Result<Sandbox> {
        self.inner
            .get_sandbox(&SandboxRef::from(sandbox))
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn list_sandboxes(
        &self,
        options: Option<ListSandboxesOptions>,
    ) -> napi::Result<Vec<Sandbox>> {
        let (workspace, include_deleted) = options
            .map(|o| (o.workspace, o.include_deleted.unwrap_or(false)))
            .unwrap_or_default();
        self.inner
            .list_sandboxes(workspace.as_deref(), include_deleted)
            .await
            .map(|list| list.into_iter().map(Into::into).collect())
            .into_napi()
    }

    #[napi]
    pub async fn delete_sandbox(&self, sandbox: String) -> napi::Result<DeletedSandbox> {
        self.inner
            .delete_sandbox(&SandboxRef::from(sandbox))
            .await
            .map(Into::into)
            .into_napi()
    }

    /// `STOPPED` stops a sandbox, `PENDING` restarts it.
    #[napi]
    pub async fn set_sandbox_lifecycle(
        &self,
        sandbox: String,
        lifecycle: SandboxLifecycle,
    ) -> napi::Result<Sandbox> {
        self.inner
            .set_sandbox_lifecycle(&SandboxRef::from(sandbox), lifecycle.into())
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn create_provider(&self, spec: ProviderSpec) -> napi::Result<ProviderWrite> {
        let spec = spec.into_sdk().into_napi()?;
        self.inner
            .create_provider(&spec)
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn update_provider(&self, update: ProviderUpdate) -> napi::Result<ProviderWrite> {
        let update = update.into_sdk().into_napi()?;
        self.inner
            .update_provider(&update)
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn delete_provider(
        &self,
        provider: String,
        workspace: Option<String>,
    ) -> napi::Result<()> {
        self.inner
            .delete_provider(&provider, workspace.as_deref())
            .await
            .into_napi()
    }

    #[napi]
    pub async fn get_provider(
        &self,
        provider: String,
        workspace: Option<String>,
    ) -> napi::Result<Provider> {
        self.inner
            .get_provider(&provider, workspace.as_deref())
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn list_providers(&self, workspace: Option<String>) -> napi::Result<Vec<Provider>> {
        self.inner
            .list_providers(workspace.as_deref())
            .await
            .map(|list| list.into_iter().map(Into::into).collect())
            .into_napi()
    }

    #[napi]
    pub async fn attach_provider(
        &self,
        sandbox: String,
        provider: String,
    ) -> napi::Result<Attachment> {
        self.inner
            .attach_provider(&SandboxRef::from(sandbox), &provider)
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn detach_provider(
        &self,
        sandbox: String,
        provider: String,
    ) -> napi::Result<Attachment> {
        self.inner
            .detach_provider(&SandboxRef::from(sandbox), &provider)
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn get_sandbox_policy(
        &self,
        sandbox: String,
        revision_number: Option<f64>,
    ) -> napi::Result<SandboxPolicy> {
        let wanted = revision(revision_number).into_napi()?;
        self.inner
            .get_sandbox_policy(&SandboxRef::from(sandbox), wanted)
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn list_sandbox_policies(
        &self,
        sandbox: String,
        limit: Option<u32>,
    ) -> napi::Result<Vec<PolicyRevision>> {
        self.inner
            .list_sandbox_policies(&SandboxRef::from(sandbox), limit.unwrap_or(0))
            .await
            .map(|list| list.into_iter().map(Into::into).collect())
            .into_napi()
    }

    /// The global policy's latest revision, or `revisionNumber`; a revision that cleared
    /// it has no `policyYaml` and an empty hash.
    #[napi]
    pub async fn get_global_policy(
        &self,
        revision_number: Option<f64>,
    ) -> napi::Result<SandboxPolicy> {
        let wanted = revision(revision_number).into_napi()?;
        self.inner
            .get_global_policy(wanted)
            .await
            .map(Into::into)
            .into_napi()
    }

    /// The global policy's revisions, newest first, without their YAML.
    #[napi]
    pub async fn list_global_policies(
        &self,
        limit: Option<u32>,
    ) -> napi::Result<Vec<PolicyRevision>> {
        self.inner
            .list_global_policies(limit.unwrap_or(0))
            .await
            .map(|list| list.into_iter().map(Into::into).collect())
            .into_napi()
    }

    #[napi]
    pub async fn get_settings(
        &self,
        #[napi(ts_arg_type = "{ sandbox: string } | { workspace: string } | { global: true }")]
        target: ConfigTarget,
    ) -> napi::Result<ScopeSettings> {
        let target = target.into_sdk().into_napi()?;
        self.inner
            .get_settings(&target)
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn list_setting_definitions(&self) -> napi::Result<Vec<SettingDefinition>> {
        self.inner
            .list_setting_definitions()
            .await
            .map(|list| list.into_iter().map(Into::into).collect())
            .into_napi()
    }

    #[napi]
    pub async fn update_config(&self, options: UpdateConfigOptions) -> napi::Result<UpdateResult> {
        let update = options.into_sdk().into_napi()?;
        self.inner
            .update_config(update)
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn get_operation(&self, id: String) -> napi::Result<Operation> {
        self.inner
            .get_operation(&id)
            .await
            .map(Into::into)
            .into_napi()
    }

    /// Starts following an operation; see `OperationWatch`.
    #[napi]
    pub fn watch_operation(
        &self,
        id: String,
        options: Option<WatchOptions>,
    ) -> napi::Result<OperationWatch> {
        let (timeout_ms, threshold) = options
            .map(|o| (o.timeout_ms, o.threshold))
            .unwrap_or_default();
        let timeout = millis("timeoutMs", timeout_ms).into_napi()?;
        Ok(OperationWatch::start(
            self.inner.clone(),
            id,
            timeout,
            threshold,
        ))
    }

    #[napi]
    pub async fn list_operations(
        &self,
        options: Option<ListOperationsOptions>,
    ) -> napi::Result<Vec<Operation>> {
        let (sandbox, states, page_size) = match options {
            Some(o) => (
                o.sandbox.map(SandboxRef::from),
                o.states
                    .unwrap_or_default()
                    .into_iter()
                    .map(sdk::OperationState::from)
                    .collect(),
                o.page_size.unwrap_or(0),
            ),
            None => (None, Vec::new(), 0),
        };
        self.inner
            .list_operations(sandbox.as_ref(), &states, page_size)
            .await
            .map(|list| list.into_iter().map(Into::into).collect())
            .into_napi()
    }

    #[napi]
    pub async fn list_operation_targets(
        &self,
        operation_id: String,
        options: Option<ListOperationTargetsOptions>,
    ) -> napi::Result<OperationTargets> {
        let (states, page_size, page_token) = options
            .map(ListOperationTargetsOptions::into_sdk)
            .unwrap_or_default();
        self.inner
            .list_operation_targets(&operation_id, &states, page_size, page_token.as_deref())
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn list_sessions(&self) -> napi::Result<Vec<SessionSummary>> {
        self.inner
            .list_sessions()
            .await
            .map(|list| list.into_iter().map(Into::into).collect())
            .into_napi()
    }

    #[napi]
    pub async fn inspect_session(&self, sandbox: String) -> napi::Result<SessionInspection> {
        self.inner
            .inspect_session(&SandboxRef::from(sandbox))
            .await
            .map(Into::into)
            .into_napi()
    }

    #[napi]
    pub async fn get_sandbox_logs(
        &self,
        sandbox: String,
        options: Option<LogOptions>,
    ) -> napi::Result<SandboxLogs> {
        let query = options
            .map(LogOptions::into_sdk)
            .transpose()
            .into_napi()?
            .unwrap_or_default();
        self.inner
            .get_sandbox_logs(&SandboxRef::from(sandbox), &query)
            .await
            .map(Into::into)
            .into_napi()
    }

    /// Starts following a sandbox's logs; see `SandboxLogWatch`.
    #[napi]
    pub fn watch_sandbox_logs(
        &self,
        sandbox: String,
        options: Option<LogOptions>,
    ) -> napi::Result<SandboxLogWatch> {
        let query = options
            .map(LogOptions::into_sdk)
            .transpose()
            .into_napi()?
            .unwrap_or_default();
        Ok(SandboxLogWatch::start(
            self.inner.clone(),
            SandboxRef::from(sandbox),
            query,
        ))
    }

    #[napi]
    pub async fn gateway_info(&self) -> napi::Result<GatewayInfo> {
        self.inner.gateway_info().await.map(Into::into).into_napi()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn revision_must_be_a_positive_integer() {
        assert_eq!(revision(None).unwrap(), None);
        assert_eq!(revision(Some(3.0)).unwrap(), Some(3));
        for bad in [0.0, -1.0, 1.5, f64::NAN, 1e300] {
            assert_eq!(revision(Some(bad)).unwrap_err().code(), "INVALID_ARGUMENT");
        }
    }
}
