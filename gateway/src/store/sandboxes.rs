//! Sandboxes and workspaces.

use std::collections::HashMap;

use sqlx::{AssertSqlSafe, Row};

use super::error::{Result, StoreError, is_unique_violation};
use super::records::{Lifecycle, SandboxRecord, sandbox_from_row};
use super::{Store, WriteTx, json_list, now_ms};

pub(super) const SANDBOX_COLUMNS: &str = "id, name, workspace, lifecycle, policy_revision, settings_revision, \
     attachment_epoch, created_at, updated_at";

impl Store {
    /// Reads a sandbox by id, deleted ones included.
    pub async fn get_sandbox(&self, id: &str) -> Result<SandboxRecord> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("sandbox {id} not found")))?;
        let mut record = sandbox_from_row(&row)?;
        record.providers = self.attached_provider_names(&record.id).await?;
        Ok(record)
    }

    /// Resolves an id (any lifecycle) or a live sandbox's name in `workspace`.
    pub async fn resolve_sandbox(
        &self,
        id_or_name: &str,
        workspace: &str,
    ) -> Result<SandboxRecord> {
        let id = self.resolve_sandbox_id(id_or_name, workspace).await?;
        self.get_sandbox(&id).await
    }

    /// The id a reference names, for a write that reads the sandbox itself
    /// inside its transaction: an id is returned unread (the transaction
    /// reports it unknown or deleted), a name costs one indexed read. The
    /// caller refuses an empty reference.
    pub async fn resolve_sandbox_id(&self, id_or_name: &str, workspace: &str) -> Result<String> {
        if id_or_name.starts_with("sb-") {
            return Ok(id_or_name.to_string());
        }
        let row = sqlx::query(
            "SELECT id FROM sandboxes WHERE workspace = $1 AND name = $2 AND lifecycle <> 'deleted'",
        )
        .bind(workspace)
        .bind(id_or_name)
        .fetch_optional(self.pool())
        .await?;
        match row {
            Some(row) => Ok(row.try_get("id")?),
            None => Err(StoreError::NotFound(format!(
                "sandbox {id_or_name:?} not found in workspace {workspace:?}{}",
                self.did_you_mean(id_or_name, workspace).await?
            ))),
        }
    }

    /// `; did you mean W/NAME?` when live sandboxes of that name exist in
    /// other workspaces (at most three named), else nothing. Every operator
    /// token sees every workspace, so naming them leaks nothing the caller
    /// could not list.
    async fn did_you_mean(&self, name: &str, workspace: &str) -> Result<String> {
        let rows = sqlx::query(
            "SELECT workspace FROM sandboxes WHERE name = $1 AND workspace <> $2 \
             AND lifecycle <> 'deleted' ORDER BY workspace LIMIT 3",
        )
        .bind(name)
        .bind(workspace)
        .fetch_all(self.pool())
        .await?;
        let mut others = Vec::with_capacity(rows.len());
        for row in &rows {
            let other: String = row.try_get("workspace")?;
            others.push(format!("{other}/{name}"));
        }
        Ok(match others.as_slice() {
            [] => String::new(),
            [only] => format!("; did you mean {only}?"),
            [rest @ .., last] => format!("; did you mean {} or {last}?", rest.join(", ")),
        })
    }

    /// Lists sandboxes ordered by creation, `limit` from `offset`.
    pub async fn list_sandboxes(
        &self,
        workspace: Option<&str>,
        include_deleted: bool,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<SandboxRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandboxes \
             WHERE ($1 = '' OR workspace = $1) AND ($2 = 1 OR lifecycle <> 'deleted') \
             ORDER BY created_at, id LIMIT $3 OFFSET $4"
        )))
        .bind(workspace.unwrap_or(""))
        .bind(i64::from(include_deleted))
        .bind(limit)
        .bind(offset)
        .fetch_all(self.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut record = sandbox_from_row(row)?;
            record.providers = self.attached_provider_names(&record.id).await?;
            out.push(record);
        }
        Ok(out)
    }

    /// Ids of every live sandbox, optionally within one workspace.
    pub async fn live_sandbox_ids(&self, workspace: Option<&str>) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT id FROM sandboxes WHERE ($1 = '' OR workspace = $1) AND lifecycle <> 'deleted' \
             ORDER BY id",
        )
        .bind(workspace.unwrap_or(""))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("id").map_err(Into::into))
            .collect()
    }

    /// The stored hash of a sandbox's supervisor credential.
    pub async fn sandbox_credential_hash(&self, id: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT credential_hash FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.map(|r| r.try_get("credential_hash")).transpose()?)
    }

    /// The sandbox whose supervisor credential hashes to `hash`, for calls
    /// that present a credential without naming a sandbox. Rare (the
    /// gateway-global settings), so a scan of the sandboxes is cheaper than
    /// an index every sandbox write would maintain.
    pub async fn sandbox_id_by_credential_hash(&self, hash: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT id FROM sandboxes WHERE credential_hash = $1")
            .bind(hash)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.map(|r| r.try_get("id")).transpose()?)
    }

    /// Whether a workspace exists.
    pub async fn workspace_exists(&self, name: &str) -> Result<bool> {
        let row = sqlx::query("SELECT name FROM workspaces WHERE name = $1")
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.is_some())
    }

    async fn attached_provider_names(&self, sandbox_id: &str) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT p.name FROM attachments a JOIN providers p ON p.id = a.provider_id \
             WHERE a.sandbox_id = $1 ORDER BY p.name",
        )
        .bind(sandbox_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("name").map_err(Into::into))
            .collect()
    }
}

impl WriteTx {
    /// Creates the workspace on first use.
    pub async fn ensure_workspace(&mut self, name: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO workspaces (name, settings_revision, created_at) VALUES ($1, 0, $2) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(now_ms())
        .execute(self.conn())
        .await?;
        Ok(())
    }

    /// Inserts a new sandbox in `pending`.
    pub async fn insert_sandbox(
        &mut self,
        id: &str,
        name: &str,
        workspace: &str,
        credential_hash: &str,
    ) -> Result<SandboxRecord> {
        let now = now_ms();
        let result = sqlx::query(
            "INSERT INTO sandboxes (id, name, workspace, lifecycle, credential_hash, \
             policy_revision, settings_revision, attachment_epoch, created_at, updated_at) \
             VALUES ($1, $2, $3, 'pending', $4, 0, 0, 0, $5, $5)",
        )
        .bind(id)
        .bind(name)
        .bind(workspace)
        .bind(credential_hash)
        .bind(now)
        .execute(self.conn())
        .await;
        match result {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => {
                return Err(StoreError::AlreadyExists(format!(
                    "a sandbox named {name:?} already exists in workspace {workspace:?}"
                )));
            }
            Err(e) => return Err(e.into()),
        }
        Ok(SandboxRecord {
            id: id.to_string(),
            name: name.to_string(),
            workspace: workspace.to_string(),
            lifecycle: Lifecycle::Pending,
            policy_revision: 0,
            settings_revision: 0,
            attachment_epoch: 0,
            providers: Vec::new(),
            created_at: now,
            updated_at: now,
        })
    }

    /// Reads a sandbox and, on PostgreSQL, locks its row for this transaction,
    /// which serialises concurrent revisions of the same sandbox.
    pub async fn lock_sandbox(&mut self, id: &str) -> Result<SandboxRecord> {
        let sql = format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = $1{}",
            self.for_update()
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(self.conn())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("sandbox {id} not found")))?;
        sandbox_from_row(&row)
    }

    /// [`Self::lock_sandbox`], with the hash of its current policy revision
    /// (None before its first): a write answers with it without another
    /// round trip to the store after its commit.
    pub async fn lock_sandbox_with_policy_hash(&mut self, id: &str) -> Result<LockedSandbox> {
        let sql = format!(
            "{} WHERE id = $1{}",
            locked_with_hash_select(),
            self.for_update()
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(self.conn())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("sandbox {id} not found")))?;
        Ok((sandbox_from_row(&row)?, row.try_get("current_policy_hash")?))
    }

    /// [`Self::lock_sandbox_with_policy_hash`] for several sandboxes in one
    /// statement, locked in id order (the order every multi-row lock takes,
    /// so that two such transactions never wait on each other in a cycle).
    /// Sandboxes not found are absent from the answer.
    pub async fn lock_sandboxes_with_policy_hash(
        &mut self,
        ids: &[String],
    ) -> Result<HashMap<String, LockedSandbox>> {
        let sql = format!(
            "{} WHERE id {} ORDER BY id{}",
            locked_with_hash_select(),
            self.backend.in_json_list(1),
            self.for_update()
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(json_list(ids)?)
            .fetch_all(self.conn())
            .await?;
        let mut locked = HashMap::with_capacity(rows.len());
        for row in rows {
            let sandbox = sandbox_from_row(&row)?;
            let hash: Option<String> = row.try_get("current_policy_hash")?;
            locked.insert(sandbox.id.clone(), (sandbox, hash));
        }
        Ok(locked)
    }

    /// Changes a sandbox's lifecycle. On PostgreSQL it first waits for the fleet listings of
    /// its scopes in progress, and holds new ones off until commit
    /// ([`WriteTx::hold_off_fleet_listings`]).
    pub async fn set_lifecycle(&mut self, id: &str, lifecycle: Lifecycle) -> Result<()> {
        self.hold_off_fleet_listings(id).await?;
        sqlx::query("UPDATE sandboxes SET lifecycle = $2, updated_at = $3 WHERE id = $1")
            .bind(id)
            .bind(lifecycle.as_str())
            .bind(now_ms())
            .execute(self.conn())
            .await?;
        Ok(())
    }

    pub(crate) async fn bump_sandbox_policy_revision(
        &mut self,
        id: &str,
        revision: u64,
    ) -> Result<()> {
        sqlx::query("UPDATE sandboxes SET policy_revision = $2, updated_at = $3 WHERE id = $1")
            .bind(id)
            .bind(to_i64(revision))
            .bind(now_ms())
            .execute(self.conn())
            .await?;
        Ok(())
    }

    pub(crate) async fn bump_attachment_epoch(&mut self, id: &str) -> Result<u64> {
        let row = sqlx::query(
            "UPDATE sandboxes SET attachment_epoch = attachment_epoch + 1, updated_at = $2 \
             WHERE id = $1 RETURNING attachment_epoch",
        )
        .bind(id)
        .bind(now_ms())
        .fetch_one(self.conn())
        .await?;
        super::records::u64_col(&row, "attachment_epoch")
    }
}

/// A sandbox read and locked inside a write transaction, with the hash of
/// its current policy revision (None before its first).
pub type LockedSandbox = (SandboxRecord, Option<String>);

fn locked_with_hash_select() -> String {
    format!(
        "SELECT {SANDBOX_COLUMNS}, (SELECT p.policy_hash FROM policy_revisions p \
         WHERE p.sandbox_id = sandboxes.id AND p.revision = sandboxes.policy_revision) \
         AS current_policy_hash FROM sandboxes"
    )
}

/// Revisions are u64 in the API and BIGINT in the store.
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl WriteTx {
    /// Live sandbox ids inside this transaction: the targets of a fleet write.
    pub async fn workspace_exists(&mut self, name: &str) -> Result<bool> {
        let row = sqlx::query("SELECT name FROM workspaces WHERE name = $1")
            .bind(name)
            .fetch_optional(self.conn())
            .await?;
        Ok(row.is_some())
    }
}
