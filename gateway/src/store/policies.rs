//! Sandbox policy history and the global policy.

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::error::{Result, StoreError};
use super::records::{GlobalPolicyRecord, PolicyRevisionRecord, policy_revision_from_row, u64_col};
use super::sandboxes::to_i64;
use super::{Store, WriteTx, now_ms};

const REVISION_COLUMNS: &str =
    "sandbox_id, revision, policy_hash, policy_json, operation_id, created_at";

/// The current global policy revision (0 before any), as a scalar subquery
/// that other statements embed instead of reading it with a statement of
/// their own. It takes no lock: readers only record which revision was current.
pub(super) const CURRENT_GLOBAL_POLICY_REVISION: &str =
    "(SELECT COALESCE(MAX(revision), 0) FROM global_policy_revisions)";

/// Whose policy revisions a read is about: one sandbox's, or the global policy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyLog<'a> {
    Sandbox(&'a str),
    Global,
}

/// The global policy's revisions in the shape of `policy_revisions`: no sandbox, and a
/// revision that cleared the global policy with an empty hash and text.
const GLOBAL_AS_REVISIONS: &str = "(SELECT '' AS sandbox_id, revision, \
     COALESCE(policy_hash, '') AS policy_hash, COALESCE(policy_json, '') AS policy_json, \
     operation_id, created_at FROM global_policy_revisions) g";

impl PolicyLog<'_> {
    fn source(self) -> &'static str {
        match self {
            Self::Sandbox(_) => "policy_revisions",
            Self::Global => GLOBAL_AS_REVISIONS,
        }
    }

    /// The `sandbox_id` its rows carry.
    fn id(self) -> String {
        match self {
            Self::Sandbox(id) => id.to_owned(),
            Self::Global => String::new(),
        }
    }

    fn describe(self) -> String {
        match self {
            Self::Sandbox(id) => format!("sandbox {id}"),
            Self::Global => "the global policy".to_owned(),
        }
    }
}

impl Store {
    /// The newest revision of a sandbox's own policy.
    pub async fn latest_policy(&self, sandbox_id: &str) -> Result<Option<PolicyRevisionRecord>> {
        Ok(self
            .policy_history_of(PolicyLog::Sandbox(sandbox_id), 1, None)
            .await?
            .pop())
    }

    /// One revision of a sandbox's policy.
    pub async fn policy_revision(
        &self,
        sandbox_id: &str,
        revision: u64,
    ) -> Result<PolicyRevisionRecord> {
        self.policy_revision_of(PolicyLog::Sandbox(sandbox_id), revision)
            .await
    }

    /// One revision of a sandbox's or the global policy.
    pub async fn policy_revision_of(
        &self,
        log: PolicyLog<'_>,
        revision: u64,
    ) -> Result<PolicyRevisionRecord> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {REVISION_COLUMNS} FROM {} WHERE sandbox_id = $1 AND revision = $2",
            log.source()
        )))
        .bind(log.id())
        .bind(to_i64(revision))
        .fetch_optional(self.pool())
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!(
                "{} has no policy revision {revision}",
                log.describe()
            ))
        })?;
        policy_revision_from_row(&row)
    }

    /// Revisions newest first.
    pub async fn policy_history(
        &self,
        sandbox_id: &str,
        limit: i64,
    ) -> Result<Vec<PolicyRevisionRecord>> {
        self.policy_history_of(PolicyLog::Sandbox(sandbox_id), limit, None)
            .await
    }

    /// At most `limit` revisions of a sandbox's or the global policy, newest first, all
    /// older than `before` when given (a page after the one that ended there).
    pub async fn policy_history_of(
        &self,
        log: PolicyLog<'_>,
        limit: i64,
        before: Option<u64>,
    ) -> Result<Vec<PolicyRevisionRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {REVISION_COLUMNS} FROM {} WHERE sandbox_id = $1 AND revision < $2 \
             ORDER BY revision DESC LIMIT $3",
            log.source()
        )))
        .bind(log.id())
        .bind(before.map_or(i64::MAX, to_i64))
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(policy_revision_from_row).collect()
    }

    /// Whether the store holds the policy a supervisor claims to run: the sandbox's own
    /// policy at `revision` (0: it has none), whose hash is `hash`, unless the global
    /// policy at `global_revision` is the one with that hash (it overrides the sandbox's).
    /// An empty `hash` checks the revision alone.
    pub async fn holds_policy_claim(
        &self,
        sandbox_id: &str,
        revision: u64,
        global_revision: u64,
        hash: &str,
    ) -> Result<bool> {
        let own_hash: Option<String> = if revision == 0 {
            None
        } else {
            let row = sqlx::query(
                "SELECT policy_hash FROM policy_revisions WHERE sandbox_id = $1 AND revision = $2",
            )
            .bind(sandbox_id)
            .bind(to_i64(revision))
            .fetch_optional(self.pool())
            .await?;
            match row {
                Some(row) => Some(row.try_get("policy_hash")?),
                None => return Ok(false),
            }
        };
        if hash.is_empty() || own_hash.as_deref() == Some(hash) {
            return Ok(true);
        }
        if global_revision == 0 {
            return Ok(false);
        }
        let row =
            sqlx::query("SELECT policy_hash FROM global_policy_revisions WHERE revision = $1")
                .bind(to_i64(global_revision))
                .fetch_optional(self.pool())
                .await?;
        let global_hash: Option<String> = match row {
            Some(row) => row.try_get("policy_hash")?,
            None => None,
        };
        Ok(global_hash.as_deref() == Some(hash))
    }

    /// Number of stored revisions of a sandbox (the bad-input tests count them).
    pub async fn policy_revision_count(&self, sandbox_id: &str) -> Result<u64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM policy_revisions WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .fetch_one(self.pool())
            .await?;
        u64_col(&row, "n")
    }

    /// The global policy revision counter and, if set, the policy in effect.
    pub async fn global_policy(&self) -> Result<(u64, Option<GlobalPolicyRecord>)> {
        let row = sqlx::query(
            "SELECT revision, policy_hash, policy_json FROM global_policy_revisions \
             ORDER BY revision DESC LIMIT 1",
        )
        .fetch_optional(self.pool())
        .await?;
        global_from_row(row.as_ref())
    }
}

fn global_from_row(row: Option<&AnyRow>) -> Result<(u64, Option<GlobalPolicyRecord>)> {
    let Some(row) = row else {
        return Ok((0, None));
    };
    let revision = u64_col(row, "revision")?;
    let hash: Option<String> = row.try_get("policy_hash")?;
    let json: Option<String> = row.try_get("policy_json")?;
    Ok((
        revision,
        match (hash, json) {
            (Some(policy_hash), Some(policy_json)) => Some(GlobalPolicyRecord {
                revision,
                policy_hash,
                policy_json,
            }),
            _ => None,
        },
    ))
}

impl WriteTx {
    pub async fn latest_policy(
        &mut self,
        sandbox_id: &str,
    ) -> Result<Option<PolicyRevisionRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {REVISION_COLUMNS} FROM policy_revisions WHERE sandbox_id = $1 \
             ORDER BY revision DESC LIMIT 1"
        )))
        .bind(sandbox_id)
        .fetch_optional(self.conn())
        .await?;
        row.as_ref().map(policy_revision_from_row).transpose()
    }

    /// Stores a new revision and moves the sandbox's counter to it.
    pub async fn insert_policy_revision(
        &mut self,
        sandbox_id: &str,
        revision: u64,
        policy_hash: &str,
        policy_json: &str,
        operation_id: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO policy_revisions (sandbox_id, revision, policy_hash, policy_json, \
             operation_id, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(sandbox_id)
        .bind(to_i64(revision))
        .bind(policy_hash)
        .bind(policy_json)
        .bind(operation_id)
        .bind(now_ms())
        .execute(self.conn())
        .await?;
        self.bump_sandbox_policy_revision(sandbox_id, revision)
            .await
    }

    pub async fn global_policy(&mut self) -> Result<(u64, Option<GlobalPolicyRecord>)> {
        let sql = format!(
            "SELECT revision, policy_hash, policy_json FROM global_policy_revisions \
             ORDER BY revision DESC LIMIT 1{}",
            self.for_update()
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .fetch_optional(self.conn())
            .await?;
        global_from_row(row.as_ref())
    }

    /// The revision of the global policy in effect, `None` when none is set (never set, or
    /// cleared). Takes no lock, unlike [`WriteTx::global_policy`]: a sandbox write only
    /// notes which global policy replaces its own, and a global write committed after this
    /// read is caught when the supervisor reports the newer global revision (see
    /// `operations::resolution`).
    pub async fn global_policy_in_effect(&mut self) -> Result<Option<u64>> {
        let row = sqlx::query(
            "SELECT revision, policy_hash FROM global_policy_revisions \
             ORDER BY revision DESC LIMIT 1",
        )
        .fetch_optional(self.conn())
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let hash: Option<String> = row.try_get("policy_hash")?;
        Ok(match hash {
            Some(_) => Some(u64_col(&row, "revision")?),
            None => None,
        })
    }

    /// Records a new global policy revision; `policy` None clears it.
    pub async fn insert_global_policy_revision(
        &mut self,
        revision: u64,
        policy: Option<(&str, &str)>,
        operation_id: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO global_policy_revisions (revision, policy_hash, policy_json, operation_id, \
             created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(to_i64(revision))
        .bind(policy.map(|(hash, _)| hash.to_string()))
        .bind(policy.map(|(_, json)| json.to_string()))
        .bind(operation_id)
        .bind(now_ms())
        .execute(self.conn())
        .await?;
        Ok(())
    }
}
