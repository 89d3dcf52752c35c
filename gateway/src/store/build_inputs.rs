//! What the snapshot builder reads for one sandbox's `sandbox_config`, in as
//! few statements as possible: a fanout or a reconnect storm builds one
//! snapshot per sandbox, so each statement saved is saved ten thousand times.
//!
//! One statement reads the sandbox, its own policy and the revisions of the
//! scopes it inherits from. The global policy and the global and workspace
//! settings are shared by many sandboxes: they are cached in process, keyed
//! by revision. The content of a revision never changes, so a cached entry
//! is valid for as long as that revision is current, also when another
//! replica made the write; the revisions come from the store on every build.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use openshell_core::settings::Scope;
use sqlx::{AssertSqlSafe, Row};

use super::Store;
use super::policies::CURRENT_GLOBAL_POLICY_REVISION;
use super::records::{GlobalPolicyRecord, SandboxRecord, sandbox_from_row, u64_col};
use super::sandboxes::SANDBOX_COLUMNS;
use super::settings::ScopedSettings;
use crate::error::{GatewayError, Result};

/// Everything a `sandbox_config` snapshot is built from.
#[derive(Debug, Clone)]
pub struct SandboxConfigInputs {
    pub sandbox: SandboxRecord,
    /// Hash and canonical JSON of the sandbox's own latest policy.
    pub own_policy: Option<(String, String)>,
    pub global_policy_revision: u64,
    pub global_policy: Option<Arc<GlobalPolicyRecord>>,
    pub global_settings: Arc<ScopedSettings>,
    pub workspace_settings: Arc<ScopedSettings>,
    pub sandbox_settings: ScopedSettings,
    /// `(provider id, revision)` of every attached provider, by id.
    pub attached_provider_revisions: Vec<(String, u64)>,
    /// A sandbox operation was `PENDING` when the inputs were read. Only
    /// then can sending this snapshot deliver one: an operation committed
    /// later is not in the snapshot.
    pub pending_operation: bool,
}

/// Shared build inputs by revision; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SharedInputCache {
    inner: Arc<Mutex<CachedInputs>>,
}

#[derive(Debug, Default)]
struct CachedInputs {
    global_policy: Option<(u64, Option<Arc<GlobalPolicyRecord>>)>,
    global_settings: Option<Arc<ScopedSettings>>,
    workspace_settings: HashMap<String, Arc<ScopedSettings>>,
}

impl SharedInputCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CachedInputs> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The one statement of a build, rendered once: every build runs it.
static SANDBOX_CONFIG_INPUTS_SQL: LazyLock<String> = LazyLock::new(|| {
    let columns: Vec<String> = SANDBOX_COLUMNS
        .split(',')
        .map(|c| format!("s.{}", c.trim()))
        .collect();
    // The sandbox's counter always names its latest policy revision.
    format!(
        "SELECT {}, p.policy_hash AS own_policy_hash, p.policy_json AS own_policy_json, \
         w.settings_revision AS workspace_settings_revision, \
         (SELECT value FROM counters WHERE name = 'global_settings_revision') AS global_settings_revision, \
         {CURRENT_GLOBAL_POLICY_REVISION} AS global_policy_revision, \
         CAST(CASE WHEN EXISTS (SELECT 1 FROM operations o \
         WHERE o.sandbox_id = s.id AND o.state = 'PENDING') THEN 1 ELSE 0 END AS BIGINT) \
         AS pending_operation \
         FROM sandboxes s JOIN workspaces w ON w.name = s.workspace \
         LEFT JOIN policy_revisions p ON p.sandbox_id = s.id AND p.revision = s.policy_revision \
         WHERE s.id = $1",
        columns.join(", ")
    )
});

impl Store {
    /// Reads the inputs of one sandbox's `sandbox_config` snapshot.
    pub async fn sandbox_config_inputs(&self, sandbox_id: &str) -> Result<SandboxConfigInputs> {
        let row = sqlx::query(AssertSqlSafe(SANDBOX_CONFIG_INPUTS_SQL.as_str()))
            .bind(sandbox_id)
            .fetch_optional(self.pool())
            .await?
            .ok_or_else(|| GatewayError::NotFound(format!("sandbox {sandbox_id} not found")))?;
        let sandbox = sandbox_from_row(&row)?;
        let own_policy = match (
            row.try_get::<Option<String>, _>("own_policy_hash")?,
            row.try_get::<Option<String>, _>("own_policy_json")?,
        ) {
            (Some(hash), Some(json)) => Some((hash, json)),
            _ => None,
        };
        let global_policy_revision = u64_col(&row, "global_policy_revision")?;
        let global_settings_revision = u64_col(&row, "global_settings_revision")?;
        let workspace_settings_revision = u64_col(&row, "workspace_settings_revision")?;
        let pending_operation = row.try_get::<i64, _>("pending_operation")? != 0;

        let (global_policy_revision, global_policy) =
            self.cached_global_policy(global_policy_revision).await?;
        let global_settings = self
            .cached_settings(Scope::Global, "", global_settings_revision)
            .await?;
        let workspace_settings = self
            .cached_settings(
                Scope::Workspace,
                &sandbox.workspace,
                workspace_settings_revision,
            )
            .await?;
        // Revision 0: nothing was ever written there, so there is nothing to read.
        let sandbox_settings = if sandbox.settings_revision == 0 {
            ScopedSettings::default()
        } else {
            self.settings_at(Scope::Sandbox, sandbox_id).await?
        };
        let attached_provider_revisions = self
            .attached_provider_revisions(sandbox_id, sandbox.attachment_epoch)
            .await?;
        Ok(SandboxConfigInputs {
            sandbox,
            own_policy,
            global_policy_revision,
            global_policy,
            global_settings,
            workspace_settings,
            sandbox_settings,
            attached_provider_revisions,
            pending_operation,
        })
    }

    async fn cached_global_policy(
        &self,
        revision: u64,
    ) -> Result<(u64, Option<Arc<GlobalPolicyRecord>>)> {
        if let Some((cached, policy)) = &self.shared_inputs().lock().global_policy
            && *cached == revision
        {
            return Ok((revision, policy.clone()));
        }
        // Revision and content come from one statement, so they match even
        // when a write landed after the revision was read above.
        let (loaded, policy) = self.global_policy().await?;
        let policy = policy.map(Arc::new);
        self.shared_inputs().lock().global_policy = Some((loaded, policy.clone()));
        Ok((loaded, policy))
    }

    async fn cached_settings(
        &self,
        scope: Scope,
        scope_id: &str,
        revision: u64,
    ) -> Result<Arc<ScopedSettings>> {
        {
            let cache = self.shared_inputs().lock();
            let cached = match scope {
                Scope::Global => cache.global_settings.as_ref(),
                _ => cache.workspace_settings.get(scope_id),
            };
            if let Some(settings) = cached
                && settings.revision == revision
            {
                return Ok(settings.clone());
            }
        }
        let loaded = Arc::new(self.settings_at(scope, scope_id).await?);
        let mut cache = self.shared_inputs().lock();
        match scope {
            Scope::Global => cache.global_settings = Some(loaded.clone()),
            _ => {
                cache
                    .workspace_settings
                    .insert(scope_id.to_string(), loaded.clone());
            }
        }
        Ok(loaded)
    }
}
