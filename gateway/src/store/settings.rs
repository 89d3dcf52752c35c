//! Settings per scope, each scope with its own revision counter.

use std::collections::BTreeMap;

use openshell_core::settings::{Scope, SettingValue};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::error::{Result, StoreError};
use super::records::u64_col;
use super::{Backend, Store, WriteTx, json_list, now_ms};

/// Settings stored at one scope.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScopedSettings {
    pub revision: u64,
    pub values: BTreeMap<String, SettingValue>,
}

/// A change to one key; `None` deletes it.
pub type SettingWrite = (String, Option<SettingValue>);

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "global",
        Scope::Workspace => "workspace",
        Scope::Sandbox => "sandbox",
    }
}

/// Revision and values of one scope in one statement, so the two always
/// match (the scope's row left-joined with its settings; no settings gives
/// one row with NULL key).
fn scoped_settings_query(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => {
            "SELECT c.value AS revision, s.key, s.value_json FROM counters c \
             LEFT JOIN settings s ON s.scope = 'global' AND s.scope_id = $1 \
             WHERE c.name = 'global_settings_revision' ORDER BY s.key"
        }
        Scope::Workspace => {
            "SELECT w.settings_revision AS revision, s.key, s.value_json FROM workspaces w \
             LEFT JOIN settings s ON s.scope = 'workspace' AND s.scope_id = w.name \
             WHERE w.name = $1 ORDER BY s.key"
        }
        Scope::Sandbox => {
            "SELECT x.settings_revision AS revision, s.key, s.value_json FROM sandboxes x \
             LEFT JOIN settings s ON s.scope = 'sandbox' AND s.scope_id = x.id \
             WHERE x.id = $1 ORDER BY s.key"
        }
    }
}

fn scoped_settings_from_rows(rows: &[AnyRow]) -> Result<ScopedSettings> {
    let Some(first) = rows.first() else {
        return Ok(ScopedSettings::default());
    };
    let mut values = BTreeMap::new();
    for row in rows {
        let Some(key) = row.try_get::<Option<String>, _>("key")? else {
            continue;
        };
        let json: String = row.try_get("value_json")?;
        let value: SettingValue = serde_json::from_str(&json)
            .map_err(|e| StoreError::Corrupt(format!("setting {key}: {e}")))?;
        values.insert(key, value);
    }
    Ok(ScopedSettings {
        revision: u64_col(first, "revision")?,
        values,
    })
}

impl Store {
    /// Values and revision of one scope (`scope_id` is "" for global).
    pub async fn settings_at(&self, scope: Scope, scope_id: &str) -> Result<ScopedSettings> {
        let rows = sqlx::query(scoped_settings_query(scope))
            .bind(scope_id)
            .fetch_all(self.pool())
            .await?;
        scoped_settings_from_rows(&rows)
    }
}

impl WriteTx {
    pub async fn settings_at(&mut self, scope: Scope, scope_id: &str) -> Result<ScopedSettings> {
        let rows = sqlx::query(scoped_settings_query(scope))
            .bind(scope_id)
            .fetch_all(self.conn())
            .await?;
        scoped_settings_from_rows(&rows)
    }

    /// Applies the writes that change something and bumps the scope's
    /// revision once. Returns the new revision, or None when every write
    /// matched the stored value (a no-op writes no revision). The store
    /// decides what changed (an upsert that skips equal values, a delete of
    /// what exists), so no read precedes the writes.
    pub async fn write_settings(
        &mut self,
        scope: Scope,
        scope_id: &str,
        writes: &[SettingWrite],
    ) -> Result<Option<u64>> {
        if self.backend == Backend::Postgres {
            return self.write_settings_at_once(scope, scope_id, writes).await;
        }
        let now = now_ms();
        let mut changed = false;
        for (key, value) in writes {
            let result = match value {
                Some(value) => {
                    let json = serde_json::to_string(value)
                        .map_err(|e| StoreError::Corrupt(format!("setting {key}: {e}")))?;
                    sqlx::query(
                        "INSERT INTO settings (scope, scope_id, key, value_json, updated_at) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, scope_id, key) \
                         DO UPDATE SET value_json = excluded.value_json, updated_at = excluded.updated_at \
                         WHERE settings.value_json <> excluded.value_json",
                    )
                    .bind(scope_name(scope))
                    .bind(scope_id)
                    .bind(key)
                    .bind(json)
                    .bind(now)
                    .execute(self.conn())
                    .await?
                }
                None => {
                    sqlx::query(
                        "DELETE FROM settings WHERE scope = $1 AND scope_id = $2 AND key = $3",
                    )
                    .bind(scope_name(scope))
                    .bind(scope_id)
                    .bind(key)
                    .execute(self.conn())
                    .await?
                }
            };
            changed |= result.rows_affected() > 0;
        }
        if !changed {
            return Ok(None);
        }
        let row = sqlx::query(bump_revision_sql(scope, "true"))
            .bind(scope_id)
            .fetch_optional(self.conn())
            .await?
            .ok_or_else(|| {
                StoreError::NotFound(format!("settings scope {scope_id:?} not found"))
            })?;
        Ok(Some(u64_col(&row, "revision")?))
    }
}

/// Bumps a scope's settings revision (scope id `$1`) where `condition` holds,
/// returning the new one as `revision`.
fn bump_revision_sql(scope: Scope, condition: &str) -> sqlx::AssertSqlSafe<String> {
    let (table, column, row) = match scope {
        Scope::Global => (
            "counters",
            "value",
            "name = 'global_settings_revision' AND $1 = ''",
        ),
        Scope::Workspace => ("workspaces", "settings_revision", "name = $1"),
        Scope::Sandbox => ("sandboxes", "settings_revision", "id = $1"),
    };
    sqlx::AssertSqlSafe(format!(
        "UPDATE {table} SET {column} = {column} + 1 WHERE {row} AND {condition} \
         RETURNING {column} AS revision"
    ))
}

impl WriteTx {
    /// [`Self::write_settings`] for several sandboxes, each with its own
    /// changes: one statement on PostgreSQL, one write per sandbox on
    /// SQLite. Answers each sandbox's new settings revision, None where
    /// nothing changed, in the order of `writes`. A sandbox may appear once.
    pub async fn write_sandbox_settings(
        &mut self,
        writes: &[(&str, &[SettingWrite])],
    ) -> Result<Vec<Option<u64>>> {
        if self.backend == Backend::Sqlite || writes.len() < 2 {
            let mut revisions = Vec::with_capacity(writes.len());
            for (sandbox_id, settings) in writes {
                revisions.push(
                    self.write_settings(Scope::Sandbox, sandbox_id, settings)
                        .await?,
                );
            }
            return Ok(revisions);
        }
        #[derive(serde::Serialize)]
        struct Input<'a> {
            scope_id: &'a str,
            key: &'a str,
            /// None deletes the key.
            value_json: Option<String>,
        }
        let mut inputs = Vec::new();
        for (sandbox_id, settings) in writes {
            for (key, value) in settings.iter() {
                let value_json = value
                    .as_ref()
                    .map(serde_json::to_string)
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("setting {key}: {e}")))?;
                inputs.push(Input {
                    scope_id: sandbox_id,
                    key,
                    value_json,
                });
            }
        }
        // As in `write_settings_at_once`, per sandbox: an equal value writes
        // nothing, and only a sandbox whose settings changed gets a revision.
        let sql = "WITH input AS (SELECT r.scope_id, r.key, r.value_json FROM \
             jsonb_to_recordset(CAST($1 AS jsonb)) AS r(scope_id TEXT, key TEXT, value_json TEXT)), \
             upserted AS (INSERT INTO settings (scope, scope_id, key, value_json, updated_at) \
             SELECT 'sandbox', scope_id, key, value_json, $2 FROM input WHERE value_json IS NOT NULL \
             ON CONFLICT (scope, scope_id, key) DO UPDATE SET value_json = excluded.value_json, \
             updated_at = excluded.updated_at WHERE settings.value_json <> excluded.value_json \
             RETURNING settings.scope_id), \
             deleted AS (DELETE FROM settings s USING input i WHERE s.scope = 'sandbox' \
             AND s.scope_id = i.scope_id AND s.key = i.key AND i.value_json IS NULL \
             RETURNING s.scope_id) \
             UPDATE sandboxes SET settings_revision = settings_revision + 1 \
             WHERE id IN (SELECT scope_id FROM upserted UNION SELECT scope_id FROM deleted) \
             RETURNING id, settings_revision";
        let rows = sqlx::query(sql)
            .bind(json_list(&inputs)?)
            .bind(now_ms())
            .fetch_all(self.conn())
            .await?;
        let mut bumped = std::collections::HashMap::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get("id")?;
            bumped.insert(id, super::records::u64_col(&row, "settings_revision")?);
        }
        Ok(writes
            .iter()
            .map(|(sandbox_id, _)| bumped.get(*sandbox_id).copied())
            .collect())
    }

    /// [`Self::write_settings`] in one statement (PostgreSQL): the upserts,
    /// the deletes and the revision bump are parts of one `WITH`, so a
    /// settings write costs one round trip however many keys it changes.
    async fn write_settings_at_once(
        &mut self,
        scope: Scope,
        scope_id: &str,
        writes: &[SettingWrite],
    ) -> Result<Option<u64>> {
        #[derive(serde::Serialize)]
        struct Input<'a> {
            key: &'a str,
            /// None deletes the key.
            value_json: Option<String>,
        }
        let mut inputs = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            let value_json = value
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| StoreError::Corrupt(format!("setting {key}: {e}")))?;
            inputs.push(Input { key, value_json });
        }
        let bump = bump_revision_sql(
            scope,
            "(EXISTS (SELECT 1 FROM upserted) OR EXISTS (SELECT 1 FROM deleted))",
        );
        // The equal-value upsert writes nothing and returns nothing, as in the loop.
        let sql = format!(
            "WITH input AS (SELECT r.key, r.value_json FROM \
             jsonb_to_recordset(CAST($2 AS jsonb)) AS r(key TEXT, value_json TEXT)), \
             upserted AS (INSERT INTO settings (scope, scope_id, key, value_json, updated_at) \
             SELECT $3, $1, key, value_json, $4 FROM input WHERE value_json IS NOT NULL \
             ON CONFLICT (scope, scope_id, key) DO UPDATE SET value_json = excluded.value_json, \
             updated_at = excluded.updated_at WHERE settings.value_json <> excluded.value_json \
             RETURNING 1), \
             deleted AS (DELETE FROM settings s USING input i WHERE s.scope = $3 \
             AND s.scope_id = $1 AND s.key = i.key AND i.value_json IS NULL RETURNING 1), \
             bumped AS ({}) \
             SELECT (SELECT COUNT(*) FROM upserted) + (SELECT COUNT(*) FROM deleted) AS changed, \
             (SELECT revision FROM bumped) AS revision",
            bump.0
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(scope_id)
            .bind(json_list(&inputs)?)
            .bind(scope_name(scope))
            .bind(now_ms())
            .fetch_one(self.conn())
            .await?;
        if row.try_get::<i64, _>("changed")? == 0 {
            return Ok(None);
        }
        match row.try_get::<Option<i64>, _>("revision")? {
            Some(revision) => Ok(Some(u64::try_from(revision).unwrap_or(0))),
            None => Err(StoreError::NotFound(format!(
                "settings scope {scope_id:?} not found"
            ))),
        }
    }
}
