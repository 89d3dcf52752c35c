//! Changes to stored data that SQL alone cannot make, run once at start after the schema
//! migrations. Each is recorded by name in `data_migrations` inside its own transaction, and
//! the record is written first: a second replica starting at the same moment waits on it
//! (PostgreSQL) and then finds the change made.

use openshell_core::policy::{hash_of_canonical_json, migrate_legacy_policy_json};
use sqlx::{AnyPool, Row};

use super::error::Result;
use super::now_ms;

/// Stored policies written before the policy schema became upstream OpenShell's.
const UPSTREAM_POLICY_SCHEMA: &str = "upstream_policy_schema";

/// What the policy conversion did, for the start-up log and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PolicyConversion {
    pub converted: usize,
    pub unchanged: usize,
    /// Rows that cannot be expressed in the new schema; kept as they were (see the log).
    pub refused: usize,
}

/// Rewrites every stored sandbox and global policy revision in upstream's shape and
/// recomputes its hash; a no-op once it has run.
pub async fn convert_stored_policies(pool: &AnyPool) -> Result<Option<PolicyConversion>> {
    let mut tx = pool.begin().await?;
    let claimed = sqlx::query(
        "INSERT INTO data_migrations (name, applied_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
    )
    .bind(UPSTREAM_POLICY_SCHEMA)
    .bind(now_ms())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if claimed == 0 {
        tx.commit().await?;
        return Ok(None);
    }
    let mut outcome = PolicyConversion::default();
    let sandbox_rows = sqlx::query(
        "SELECT sandbox_id, revision, policy_json FROM policy_revisions ORDER BY sandbox_id, revision",
    )
    .fetch_all(&mut *tx)
    .await?;
    for row in &sandbox_rows {
        let sandbox_id: String = row.try_get("sandbox_id")?;
        let revision: i64 = row.try_get("revision")?;
        let old: String = row.try_get("policy_json")?;
        let what = format!("sandbox {sandbox_id} policy revision {revision}");
        if let Some((json, hash)) = convert(&old, &what, &mut outcome) {
            sqlx::query(
                "UPDATE policy_revisions SET policy_json = $3, policy_hash = $4 \
                 WHERE sandbox_id = $1 AND revision = $2",
            )
            .bind(&sandbox_id)
            .bind(revision)
            .bind(json)
            .bind(hash)
            .execute(&mut *tx)
            .await?;
        }
    }
    let global_rows = sqlx::query(
        "SELECT revision, policy_json FROM global_policy_revisions \
         WHERE policy_json IS NOT NULL ORDER BY revision",
    )
    .fetch_all(&mut *tx)
    .await?;
    for row in &global_rows {
        let revision: i64 = row.try_get("revision")?;
        let old: String = row.try_get("policy_json")?;
        let what = format!("global policy revision {revision}");
        if let Some((json, hash)) = convert(&old, &what, &mut outcome) {
            sqlx::query(
                "UPDATE global_policy_revisions SET policy_json = $2, policy_hash = $3 WHERE revision = $1",
            )
            .bind(revision)
            .bind(json)
            .bind(hash)
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    tracing::info!(
        converted = outcome.converted,
        unchanged = outcome.unchanged,
        refused = outcome.refused,
        "stored policies converted to upstream OpenShell's policy schema"
    );
    Ok(Some(outcome))
}

/// The converted JSON and its hash, or None when the row stays as it is.
fn convert(old: &str, what: &str, outcome: &mut PolicyConversion) -> Option<(String, String)> {
    match migrate_legacy_policy_json(old) {
        Ok(json) if json == old => {
            outcome.unchanged += 1;
            None
        }
        Ok(json) => {
            outcome.converted += 1;
            let hash = hash_of_canonical_json(&json);
            Some((json, hash))
        }
        Err(e) => {
            // Refusing to start would leave the operator no gateway to fix it with; the row
            // stays, its supervisor keeps last-known-good, and a new policy replaces it.
            outcome.refused += 1;
            tracing::error!(policy = %what, error = %e,
                "a stored policy cannot be expressed in upstream OpenShell's schema; it is kept \
                 as it was: set a new policy for it");
            None
        }
    }
}
