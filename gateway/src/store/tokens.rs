//! Operator tokens created through the API. The store keeps each one's
//! name, role, workspace and the SHA-256 of its secret, never the secret.

use sqlx::{AssertSqlSafe, Row};

use super::error::{Result, StoreError};
use super::{Store, now_ms};

/// A stored operator token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub name: String,
    /// `viewer`, `operator` or `admin`.
    pub role: String,
    pub workspace: Option<String>,
    pub created_by: String,
    pub created_at: i64,
}

const TOKEN_COLUMNS: &str = "name, role, workspace, created_by, created_at";

fn token_from_row(row: &sqlx::any::AnyRow) -> Result<TokenRecord> {
    Ok(TokenRecord {
        name: row.try_get("name")?,
        role: row.try_get("role")?,
        workspace: row.try_get("workspace")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
    })
}

impl Store {
    /// Stores a token by the hash of its secret; a taken name is `AlreadyExists`.
    pub async fn insert_token(
        &self,
        name: &str,
        secret_hash: &str,
        role: &str,
        workspace: Option<&str>,
        created_by: &str,
    ) -> Result<TokenRecord> {
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query(
            "INSERT INTO operator_tokens (name, secret_hash, role, workspace, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(secret_hash)
        .bind(role)
        .bind(workspace)
        .bind(created_by)
        .bind(now_ms())
        .execute(tx.conn())
        .await?
        .rows_affected();
        if inserted == 0 {
            return Err(StoreError::AlreadyExists(format!(
                "token {name:?} already exists"
            )));
        }
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS} FROM operator_tokens WHERE name = $1"
        )))
        .bind(name)
        .fetch_one(tx.conn())
        .await?;
        let record = token_from_row(&row)?;
        tx.commit().await?;
        Ok(record)
    }

    /// The token whose secret hashes to `secret_hash`, read on every call it
    /// makes: nothing is cached, so a revoked token is refused at once on
    /// every replica.
    pub async fn token_by_secret_hash(
        &self,
        secret_hash: &str,
    ) -> Result<Option<(TokenRecord, String)>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS}, secret_hash FROM operator_tokens WHERE secret_hash = $1"
        )))
        .bind(secret_hash)
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| Ok((token_from_row(&row)?, row.try_get("secret_hash")?)))
            .transpose()
    }

    /// Every stored token, by name.
    pub async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS} FROM operator_tokens ORDER BY name"
        )))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(token_from_row).collect()
    }

    /// Removes a token; `NotFound` when there is none of that name.
    pub async fn delete_token(&self, name: &str) -> Result<TokenRecord> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {TOKEN_COLUMNS} FROM operator_tokens WHERE name = $1{}",
            tx.for_update()
        )))
        .bind(name)
        .fetch_optional(tx.conn())
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("token {name:?} not found")))?;
        let record = token_from_row(&row)?;
        sqlx::query("DELETE FROM operator_tokens WHERE name = $1")
            .bind(name)
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        self.token_revocations.send_modify(|revoked| *revoked += 1);
        Ok(record)
    }

    /// Whether a stored token of this name exists (it has not been revoked).
    pub async fn token_exists(&self, name: &str) -> Result<bool> {
        let row = sqlx::query("SELECT name FROM operator_tokens WHERE name = $1")
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.is_some())
    }

    /// Changes with every token revoked through this replica.
    pub fn token_revocations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.token_revocations.subscribe()
    }
}
