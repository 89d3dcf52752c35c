//! Policies and settings: reading them, and writing them as one durable operation.

use openshell_proto::v1 as pb;

use crate::retry::Idempotency;
use crate::types::workspace_selector;
use crate::types::{
    PolicyRevision, SandboxPolicy, SandboxRef, ScopeSettings, Setting, SettingDefinition,
    SettingScope, UpdateMode, UpdateResult,
};
use crate::update::{DEFAULT_SERVER_WAIT, Target, UpdateConfig};
use crate::{Client, SdkError};

/// A list call's page size as upstream's signed field.
fn page_size(limit: u32) -> Result<i32, SdkError> {
    i32::try_from(limit).map_err(|_| SdkError::invalid(format!("limit: {limit} is too large")))
}

impl Client {
    /// Reads a sandbox's policy: the latest revision, or `revision` when given.
    pub async fn get_sandbox_policy(
        &self,
        sandbox: &SandboxRef,
        revision: Option<u64>,
    ) -> Result<SandboxPolicy, SdkError> {
        self.read_policy(pb::GetSandboxPolicyRequest {
            sandbox: Some(sandbox.to_proto()),
            revision: revision.unwrap_or(0),
            global: false,
        })
        .await
    }

    /// Reads the global policy: its latest revision, or `revision` when given. A revision
    /// that cleared the global policy has no `policy_yaml` and an empty hash.
    pub async fn get_global_policy(
        &self,
        revision: Option<u64>,
    ) -> Result<SandboxPolicy, SdkError> {
        self.read_policy(pb::GetSandboxPolicyRequest {
            sandbox: None,
            revision: revision.unwrap_or(0),
            global: true,
        })
        .await
    }

    async fn read_policy(
        &self,
        request: pb::GetSandboxPolicyRequest,
    ) -> Result<SandboxPolicy, SdkError> {
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.plane.get_sandbox_policy(r).await
            })
            .await?;
        Ok(SandboxPolicy {
            policy: response
                .policy
                .ok_or_else(|| SdkError::missing("policy"))?
                .into(),
            effective_source: response.effective_source.into(),
            global_policy_revision: response.global_policy_revision,
        })
    }

    /// Lists a sandbox's policy revisions, newest first, without their YAML; `limit` 0
    /// means the gateway's default page.
    pub async fn list_sandbox_policies(
        &self,
        sandbox: &SandboxRef,
        limit: u32,
    ) -> Result<Vec<PolicyRevision>, SdkError> {
        let sandbox = sandbox.to_proto();
        let workspace = Some(sandbox.workspace.as_str()).filter(|w| !w.is_empty());
        self.list_policies(pb::ListSandboxPoliciesRequest {
            sandbox: sandbox.id_or_name.clone(),
            page_size: page_size(limit)?,
            workspace_scope: workspace_selector(workspace),
            ..Default::default()
        })
        .await
    }

    /// Lists the global policy's revisions, newest first, without their YAML (a revision
    /// that cleared it has an empty hash); `limit` 0 means the gateway's default page.
    pub async fn list_global_policies(&self, limit: u32) -> Result<Vec<PolicyRevision>, SdkError> {
        self.list_policies(pb::ListSandboxPoliciesRequest {
            page_size: page_size(limit)?,
            global: true,
            ..Default::default()
        })
        .await
    }

    async fn list_policies(
        &self,
        request: pb::ListSandboxPoliciesRequest,
    ) -> Result<Vec<PolicyRevision>, SdkError> {
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.openshell.list_sandbox_policies(r).await
            })
            .await?;
        Ok(response.revisions.into_iter().map(Into::into).collect())
    }

    /// Reads the settings stored at a scope; for a sandbox also every
    /// registry key's effective value and the scope it comes from.
    pub async fn get_settings(&self, target: &Target) -> Result<ScopeSettings, SdkError> {
        let (scope, request) = match target {
            Target::Sandbox(sandbox) => (
                SettingScope::Sandbox,
                pb::GetSettingsRequest {
                    scope: pb::SettingScope::Sandbox.into(),
                    sandbox: Some(sandbox.to_proto()),
                    workspace: String::new(),
                },
            ),
            Target::Workspace(name) => (
                SettingScope::Workspace,
                pb::GetSettingsRequest {
                    scope: pb::SettingScope::Workspace.into(),
                    sandbox: None,
                    workspace: name.clone(),
                },
            ),
            Target::Global => (
                SettingScope::Global,
                pb::GetSettingsRequest {
                    scope: pb::SettingScope::Global.into(),
                    sandbox: None,
                    workspace: String::new(),
                },
            ),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.plane.get_settings(r).await
            })
            .await?;
        Ok(ScopeSettings {
            scope,
            values: response.values.into_iter().map(Setting::from).collect(),
            revision: response.revision,
            effective: response.effective.into_iter().map(Setting::from).collect(),
        })
    }

    /// Lists the settings registry: every known key, its type and default.
    pub async fn list_setting_definitions(&self) -> Result<Vec<SettingDefinition>, SdkError> {
        let response = self
            .unary(
                Idempotency::Safe,
                pb::ListSettingDefinitionsRequest {},
                |mut c, r| async move { c.plane.list_setting_definitions(r).await },
            )
            .await?;
        Ok(response.definitions.into_iter().map(Into::into).collect())
    }

    /// Writes policy and/or settings as one durable operation.
    ///
    /// With [`UpdateMode::CommitOnly`] this returns right after commit; with
    /// [`UpdateMode::WaitForApply`] the gateway waits until the operation is
    /// terminal or `wait_timeout` passes, and a passed deadline is *not* an
    /// error: the operation comes back still live with `wait_timed_out` set.
    /// A failed apply is not an error either; inspect `operation.state`.
    ///
    /// The request is retried on UNAVAILABLE only when it carries an
    /// idempotency key, because only then can the gateway recognise a repeat.
    ///
    /// With [`UpdateConfig::validate_only`] nothing is written: the gateway
    /// runs every check of the write against what is stored and answers with
    /// no operation, the policy's rule-level diff and the settings that would
    /// change (`policy_diff`, `setting_changes`). Such a request is always
    /// safe to retry.
    ///
    /// A sandbox policy that omits `filesystem_policy`, `landlock` or
    /// `process` keeps the sandbox's current section; `kept_static_sections`
    /// names them.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use openshell_sdk::{Client, OperationState, SandboxRef, Target, UpdateConfig, UpdateMode};
    ///
    /// # async fn demo(client: Client) -> Result<(), openshell_sdk::SdkError> {
    /// let result = client
    ///     .update_config(
    ///         UpdateConfig::new(Target::Sandbox(SandboxRef::from("team/demo")))
    ///             .policy(std::fs::read_to_string("policy.yaml").unwrap_or_default())
    ///             .set("log_level", "debug")
    ///             .mode(UpdateMode::WaitForApply)
    ///             .wait_timeout(Duration::from_secs(120))
    ///             .idempotency_key("deploy-42"),
    ///     )
    ///     .await?;
    /// let Some(operation) = result.operation else {
    ///     unreachable!("only a validate-only request comes back without an operation");
    /// };
    /// match operation.state {
    ///     OperationState::Applied => println!("in effect"),
    ///     state if !state.is_terminal() => println!("still {state}; wait again later"),
    ///     state => println!("ended {state}: {:?}", operation.error),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_config(&self, update: UpdateConfig) -> Result<UpdateResult, SdkError> {
        let request = update.to_proto()?;
        let idempotency = if update.is_idempotent() {
            Idempotency::Safe
        } else {
            Idempotency::Unsafe
        };
        // The server-side wait happens before the answer, so the client's
        // per-call budget must cover it.
        let timeout = match update.mode {
            UpdateMode::CommitOnly => self.request_timeout(),
            UpdateMode::WaitForApply => self
                .request_timeout()
                .map(|t| t + update.wait_timeout.unwrap_or(DEFAULT_SERVER_WAIT)),
        };
        let response = self
            .unary_within(idempotency, timeout, request, |mut c, r| async move {
                c.openshell.update_config(r).await
            })
            .await?;
        UpdateResult::from_proto(response, update.validate_only)
    }
}
