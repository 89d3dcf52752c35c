//! Providers (credentials sealed at rest) and their attachments to sandboxes.

use std::collections::BTreeMap;

use openshell_core::Secret;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::error::{Result, StoreError, is_unique_violation};
use super::records::{ProviderRecord, u64_col};
use super::{Store, WriteTx, now_ms};

const PROVIDER_COLUMNS: &str = "id, name, workspace, provider_type, env_json, credential_names, \
     revision, expires_at, value_expires_json, created_at, updated_at";

/// The providers attached to a sandbox (`$1`), by name, credentials sealed.
const ATTACHED_PROVIDERS: &str = "SELECT p.id, p.name, p.workspace, p.provider_type, p.env_json, \
     p.credential_names, p.revision, p.expires_at, p.value_expires_json, p.created_at, p.updated_at FROM attachments a \
     JOIN providers p ON p.id = a.provider_id WHERE a.sandbox_id = $1 ORDER BY p.name";

/// Values of a provider write; credentials are sealed before they reach SQL.
#[derive(Debug, Clone)]
pub struct ProviderValues {
    pub env: BTreeMap<String, String>,
    pub credentials: BTreeMap<String, Secret>,
    pub expires_at: Option<i64>,
    /// Expiry of single credential values, by name.
    pub value_expires_at: BTreeMap<String, i64>,
}

fn provider_from_row(row: &AnyRow) -> Result<ProviderRecord> {
    let env_json: String = row.try_get("env_json")?;
    let names_json: String = row.try_get("credential_names")?;
    let expires_json: String = row.try_get("value_expires_json")?;
    Ok(ProviderRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        workspace: row.try_get("workspace")?,
        provider_type: row.try_get("provider_type")?,
        env: serde_json::from_str(&env_json)
            .map_err(|e| StoreError::Corrupt(format!("provider env: {e}")))?,
        credential_names: serde_json::from_str(&names_json)
            .map_err(|e| StoreError::Corrupt(format!("provider credential names: {e}")))?,
        revision: u64_col(row, "revision")?,
        expires_at: row.try_get("expires_at")?,
        value_expires_at: serde_json::from_str(&expires_json)
            .map_err(|e| StoreError::Corrupt(format!("provider value expiry: {e}")))?,
        attached_sandbox_ids: Vec::new(),
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The JSON columns of a provider write: env, credential names, value expiry.
fn encode_env(values: &ProviderValues) -> Result<(String, String, String)> {
    let env = serde_json::to_string(&values.env)
        .map_err(|e| StoreError::Corrupt(format!("provider env: {e}")))?;
    let names: Vec<&String> = values.credentials.keys().collect();
    let names = serde_json::to_string(&names)
        .map_err(|e| StoreError::Corrupt(format!("provider credential names: {e}")))?;
    let expiry = serde_json::to_string(&values.value_expires_at)
        .map_err(|e| StoreError::Corrupt(format!("provider value expiry: {e}")))?;
    Ok((env, names, expiry))
}

impl Store {
    /// Resolves a provider id (`pv-…`) or a name in `workspace`. The caller
    /// refuses an empty reference.
    pub async fn resolve_provider(
        &self,
        id_or_name: &str,
        workspace: &str,
    ) -> Result<ProviderRecord> {
        let row = if id_or_name.starts_with("pv-") {
            sqlx::query(AssertSqlSafe(format!(
                "SELECT {PROVIDER_COLUMNS} FROM providers WHERE id = $1"
            )))
            .bind(id_or_name)
            .fetch_optional(self.pool())
            .await?
        } else {
            sqlx::query(AssertSqlSafe(format!(
                "SELECT {PROVIDER_COLUMNS} FROM providers WHERE workspace = $1 AND name = $2"
            )))
            .bind(workspace)
            .bind(id_or_name)
            .fetch_optional(self.pool())
            .await?
        };
        let row = row.ok_or_else(|| {
            StoreError::NotFound(format!(
                "provider {id_or_name:?} not found in workspace {workspace:?}"
            ))
        })?;
        let mut record = provider_from_row(&row)?;
        record.attached_sandbox_ids = self.attaching_sandboxes(&record.id).await?;
        Ok(record)
    }

    pub async fn list_providers(&self, workspace: Option<&str>) -> Result<Vec<ProviderRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {PROVIDER_COLUMNS} FROM providers WHERE ($1 = '' OR workspace = $1) \
             ORDER BY workspace, name"
        )))
        .bind(workspace.unwrap_or(""))
        .fetch_all(self.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut record = provider_from_row(row)?;
            record.attached_sandbox_ids = self.attaching_sandboxes(&record.id).await?;
            out.push(record);
        }
        Ok(out)
    }

    /// Sandboxes that attach a provider: the scope of a provider change.
    pub async fn attaching_sandboxes(&self, provider_id: &str) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT a.sandbox_id FROM attachments a JOIN sandboxes s ON s.id = a.sandbox_id \
             WHERE a.provider_id = $1 AND s.lifecycle <> 'deleted' ORDER BY a.sandbox_id",
        )
        .bind(provider_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("sandbox_id").map_err(Into::into))
            .collect()
    }

    /// A provider's credentials, opened: what a refresh keeps of them.
    pub async fn provider_credentials(&self, id: &str) -> Result<BTreeMap<String, Secret>> {
        let row = sqlx::query("SELECT name, credentials_box FROM providers WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("provider {id} not found")))?;
        let name: String = row.try_get("name")?;
        let sealed: Vec<u8> = row.try_get("credentials_box")?;
        self.cipher()
            .open(&sealed)
            .map_err(|e| StoreError::Corrupt(format!("provider {name}: {e}")))
    }

    /// Every provider attached to a sandbox, by name; credentials stay sealed.
    pub async fn attached_providers(&self, sandbox_id: &str) -> Result<Vec<ProviderRecord>> {
        let rows = sqlx::query(ATTACHED_PROVIDERS)
            .bind(sandbox_id)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(provider_from_row).collect()
    }

    /// Every provider attached to a sandbox, with its credentials opened.
    /// Only the provider-environment snapshot may call this.
    pub async fn attached_providers_with_credentials(
        &self,
        sandbox_id: &str,
    ) -> Result<Vec<(ProviderRecord, BTreeMap<String, Secret>)>> {
        let rows = sqlx::query(ATTACHED_PROVIDERS_SEALED)
            .bind(sandbox_id)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(|row| self.opened_provider(row)).collect()
    }

    /// A provider row with its `credentials_box` opened.
    fn opened_provider(&self, row: &AnyRow) -> Result<(ProviderRecord, BTreeMap<String, Secret>)> {
        let record = provider_from_row(row)?;
        let sealed: Vec<u8> = row.try_get("credentials_box")?;
        let credentials = self
            .cipher()
            .open(&sealed)
            .map_err(|e| StoreError::Corrupt(format!("provider {}: {e}", record.name)))?;
        Ok((record, credentials))
    }

    /// [`Self::attached_providers_with_credentials`] as `tx` sees them, before it commits:
    /// for a write to measure the provider environment it is about to make. Only the
    /// bootstrap limit's check may call this.
    pub async fn attached_providers_in(
        &self,
        tx: &mut WriteTx,
        sandbox_id: &str,
    ) -> Result<Vec<(ProviderRecord, BTreeMap<String, Secret>)>> {
        let rows = sqlx::query(ATTACHED_PROVIDERS_SEALED)
            .bind(sandbox_id)
            .fetch_all(tx.conn())
            .await?;
        rows.iter().map(|row| self.opened_provider(row)).collect()
    }

    /// One provider with its credentials opened, as `tx` sees it; None when it is gone.
    pub async fn provider_in(
        &self,
        tx: &mut WriteTx,
        id: &str,
    ) -> Result<Option<(ProviderRecord, BTreeMap<String, Secret>)>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {PROVIDER_COLUMNS}, credentials_box FROM providers WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(tx.conn())
        .await?;
        row.as_ref()
            .map(|row| self.opened_provider(row))
            .transpose()
    }
}

/// [`ATTACHED_PROVIDERS`] with the sealed credentials.
const ATTACHED_PROVIDERS_SEALED: &str = "SELECT p.id, p.name, p.workspace, p.provider_type, \
     p.env_json, p.credential_names, p.revision, p.expires_at, p.value_expires_json, \
     p.created_at, p.updated_at, p.credentials_box FROM attachments a \
     JOIN providers p ON p.id = a.provider_id WHERE a.sandbox_id = $1 ORDER BY p.name";

impl WriteTx {
    pub async fn insert_provider(
        &mut self,
        id: &str,
        name: &str,
        workspace: &str,
        provider_type: &str,
        values: &ProviderValues,
        sealed: &[u8],
    ) -> Result<()> {
        let (env, names, expiry) = encode_env(values)?;
        let now = now_ms();
        let result = sqlx::query(
            "INSERT INTO providers (id, name, workspace, provider_type, env_json, credential_names, \
             credentials_box, revision, expires_at, created_at, updated_at, value_expires_json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $9, $10)",
        )
        .bind(id)
        .bind(name)
        .bind(workspace)
        .bind(provider_type)
        .bind(env)
        .bind(names)
        .bind(sealed.to_vec())
        .bind(values.expires_at)
        .bind(now)
        .bind(expiry)
        .execute(self.conn())
        .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if is_unique_violation(&e) => Err(StoreError::AlreadyExists(format!(
                "a provider named {name:?} already exists in workspace {workspace:?}"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces a provider's values; returns the new revision. With
    /// `expected_revision`, only a provider still at that revision is written
    /// (None back otherwise): a credential refresh that lost a race with
    /// another write, or another replica's refresh, writes nothing.
    pub async fn update_provider(
        &mut self,
        id: &str,
        values: &ProviderValues,
        sealed: &[u8],
        expected_revision: Option<u64>,
    ) -> Result<Option<u64>> {
        let (env, names, expiry) = encode_env(values)?;
        let expected = expected_revision.map(|r| i64::try_from(r).unwrap_or(i64::MAX));
        let row = sqlx::query(
            "UPDATE providers SET env_json = $2, credential_names = $3, credentials_box = $4, \
             expires_at = $5, value_expires_json = $7, revision = revision + 1, updated_at = $6 \
             WHERE id = $1 AND ($8 < 0 OR revision = $8) RETURNING revision",
        )
        .bind(id)
        .bind(env)
        .bind(names)
        .bind(sealed.to_vec())
        .bind(values.expires_at)
        .bind(now_ms())
        .bind(expiry)
        .bind(expected.unwrap_or(-1))
        .fetch_optional(self.conn())
        .await?;
        match (row, expected_revision) {
            (Some(row), _) => Ok(Some(u64_col(&row, "revision")?)),
            (None, Some(_)) => Ok(None),
            (None, None) => Err(StoreError::NotFound(format!("provider {id} not found"))),
        }
    }

    /// Attachments of a provider, to sandboxes of any lifecycle.
    pub async fn provider_attachment_count(&mut self, id: &str) -> Result<u64> {
        let attached = sqlx::query("SELECT COUNT(*) AS n FROM attachments WHERE provider_id = $1")
            .bind(id)
            .fetch_one(self.conn())
            .await?;
        u64_col(&attached, "n")
    }

    /// `WORKSPACE/NAME` of the first `limit` sandboxes attaching a provider,
    /// by name, for a refusal that names them.
    pub async fn provider_attachment_names(&mut self, id: &str, limit: i64) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT s.workspace, s.name FROM attachments a JOIN sandboxes s ON s.id = a.sandbox_id \
             WHERE a.provider_id = $1 ORDER BY s.workspace, s.name LIMIT $2",
        )
        .bind(id)
        .bind(limit)
        .fetch_all(self.conn())
        .await?;
        rows.iter()
            .map(|row| {
                let workspace: String = row.try_get("workspace")?;
                let name: String = row.try_get("name")?;
                Ok(format!("{workspace}/{name}"))
            })
            .collect()
    }

    pub async fn delete_provider(&mut self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM providers WHERE id = $1")
            .bind(id)
            .execute(self.conn())
            .await?;
        Ok(())
    }

    /// Attaches; returns the new attachment epoch, or None if already attached.
    pub async fn attach(&mut self, sandbox_id: &str, provider_id: &str) -> Result<Option<u64>> {
        let result = sqlx::query(
            "INSERT INTO attachments (sandbox_id, provider_id, attached_at) VALUES ($1, $2, $3) \
             ON CONFLICT (sandbox_id, provider_id) DO NOTHING",
        )
        .bind(sandbox_id)
        .bind(provider_id)
        .bind(now_ms())
        .execute(self.conn())
        .await?;
        if result.rows_affected() == 0 {
            return Ok(None);
        }
        self.bump_attachment_epoch(sandbox_id).await.map(Some)
    }

    /// Providers that share a live sandbox with `provider_id` (attached beside it), other than
    /// itself: whose variables its own must not shadow.
    pub async fn co_attached_providers(
        &mut self,
        provider_id: &str,
    ) -> Result<Vec<ProviderRecord>> {
        let rows = sqlx::query(
            "SELECT DISTINCT p.id, p.name, p.workspace, p.provider_type, p.env_json, \
             p.credential_names, p.revision, p.expires_at, p.value_expires_json, p.created_at, p.updated_at FROM attachments mine \
             JOIN attachments other ON other.sandbox_id = mine.sandbox_id \
             JOIN providers p ON p.id = other.provider_id \
             JOIN sandboxes s ON s.id = mine.sandbox_id \
             WHERE mine.provider_id = $1 AND other.provider_id <> $1 AND s.lifecycle <> 'deleted' \
             ORDER BY p.name",
        )
        .bind(provider_id)
        .fetch_all(self.conn())
        .await?;
        rows.iter().map(provider_from_row).collect()
    }

    /// Live sandboxes (not deleted) that attach a provider, by id.
    pub async fn live_attaching_sandboxes(
        &mut self,
        provider_id: &str,
    ) -> Result<Vec<super::SandboxRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {} FROM sandboxes WHERE lifecycle <> 'deleted' AND id IN \
             (SELECT sandbox_id FROM attachments WHERE provider_id = $1) ORDER BY id",
            super::sandboxes::SANDBOX_COLUMNS
        )))
        .bind(provider_id)
        .fetch_all(self.conn())
        .await?;
        rows.iter().map(super::records::sandbox_from_row).collect()
    }

    /// Providers attached to a sandbox, without their credentials.
    pub async fn attached_providers(&mut self, sandbox_id: &str) -> Result<Vec<ProviderRecord>> {
        let rows = sqlx::query(ATTACHED_PROVIDERS)
            .bind(sandbox_id)
            .fetch_all(self.conn())
            .await?;
        rows.iter().map(provider_from_row).collect()
    }

    /// Detaches; returns the new attachment epoch, or None if it was not attached.
    pub async fn detach(&mut self, sandbox_id: &str, provider_id: &str) -> Result<Option<u64>> {
        let result =
            sqlx::query("DELETE FROM attachments WHERE sandbox_id = $1 AND provider_id = $2")
                .bind(sandbox_id)
                .bind(provider_id)
                .execute(self.conn())
                .await?;
        if result.rows_affected() == 0 {
            return Ok(None);
        }
        self.bump_attachment_epoch(sandbox_id).await.map(Some)
    }

    pub async fn detach_all(&mut self, sandbox_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM attachments WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .execute(self.conn())
            .await?;
        Ok(())
    }
}

impl Store {
    /// (provider id, revision) of every attached provider, by id.
    pub async fn attached_provider_revisions(
        &self,
        sandbox_id: &str,
        attachment_epoch: u64,
    ) -> Result<Vec<(String, u64)>> {
        // Epoch 0: nothing was ever attached, so there is nothing to read.
        if attachment_epoch == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT p.id, p.revision FROM attachments a JOIN providers p ON p.id = a.provider_id \
             WHERE a.sandbox_id = $1 ORDER BY p.id",
        )
        .bind(sandbox_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get::<String, _>("id")?, u64_col(r, "revision")?)))
            .collect()
    }
}
