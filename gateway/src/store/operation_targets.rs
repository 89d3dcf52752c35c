//! Reading an operation's targets a page at a time, for operators who need
//! to know which sandboxes of a fleet write are behind and why.
//!
//! A page is read along the `(operation_id, sandbox_id)` primary key from
//! the last sandbox of the previous page, and stops at its limit: a fleet
//! of 10k sandboxes costs one page of rows per call, never the whole fleet.

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::Store;
use super::error::Result;
use super::records::{OperationRecord, OperationState, Outcome};

/// One sandbox an operation targets, with its sandbox's name and whether a
/// supervisor session of it is connected to any replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationTargetRecord {
    pub sandbox_id: String,
    /// Empty when the sandbox row is gone.
    pub sandbox_name: String,
    pub workspace: String,
    pub state: OperationState,
    pub outcome: Outcome,
    pub error: String,
    pub updated_at: i64,
    pub has_session: bool,
}

/// Which targets of an operation to read: those after sandbox id `after`,
/// in the given states (all when empty), at most `limit`.
#[derive(Debug, Clone, Default)]
pub struct TargetPage {
    pub after: String,
    pub states: Vec<OperationState>,
    pub limit: usize,
}

/// The columns of the sandbox and its session, joined by sandbox id.
const SANDBOX_JOIN: &str = "LEFT JOIN sandboxes s ON s.id = t.sandbox_id \
     LEFT JOIN session_owners o ON o.sandbox_id = t.sandbox_id";

fn target_from_row(row: &AnyRow) -> Result<OperationTargetRecord> {
    let has_session: i64 = row.try_get("has_session")?;
    Ok(OperationTargetRecord {
        sandbox_id: row.try_get("sandbox_id")?,
        sandbox_name: row.try_get("sandbox_name")?,
        workspace: row.try_get("workspace")?,
        state: OperationState::parse(&row.try_get::<String, _>("state")?)?,
        outcome: Outcome::parse(&row.try_get::<String, _>("outcome")?)?,
        error: row.try_get("error")?,
        updated_at: row.try_get("updated_at")?,
        has_session: has_session != 0,
    })
}

/// `state IN (…)`, or nothing for every state. The states come from a
/// closed enum, never from input text.
fn state_filter(column: &str, states: &[OperationState]) -> String {
    if states.is_empty() {
        return String::new();
    }
    let states: Vec<String> = states.iter().map(|s| format!("'{}'", s.as_str())).collect();
    format!(" AND {column} IN ({})", states.join(", "))
}

/// The query of one page of targets in `states` (all when empty), bound
/// to the operation id (`$1`), the last sandbox id of the previous page
/// (`$2`) and the limit (`$3`). Public so the plan each store makes of it
/// can be checked: a search along the primary key, never a scan.
pub fn target_page_sql(states: &[OperationState]) -> String {
    format!(
        "SELECT t.sandbox_id, COALESCE(s.name, '') AS sandbox_name, \
         COALESCE(s.workspace, '') AS workspace, t.state, t.outcome, t.error, t.updated_at, \
         CAST(CASE WHEN o.sandbox_id IS NULL THEN 0 ELSE 1 END AS BIGINT) AS has_session \
         FROM operation_targets t {SANDBOX_JOIN} \
         WHERE t.operation_id = $1 AND t.sandbox_id > $2{} \
         ORDER BY t.sandbox_id LIMIT $3",
        state_filter("t.state", states)
    )
}

impl Store {
    /// One page of a fleet operation's targets, in sandbox id order.
    pub async fn operation_targets_page(
        &self,
        operation_id: &str,
        page: &TargetPage,
    ) -> Result<Vec<OperationTargetRecord>> {
        let sql = target_page_sql(&page.states);
        sqlx::query(AssertSqlSafe(sql))
            .bind(operation_id)
            .bind(&page.after)
            .bind(i64::try_from(page.limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await?
            .iter()
            .map(target_from_row)
            .collect()
    }

    /// The one target of a sandbox operation: the operation's own state,
    /// outcome and error, on its sandbox. None when it has no sandbox.
    pub async fn sandbox_operation_target(
        &self,
        operation: &OperationRecord,
    ) -> Result<Option<OperationTargetRecord>> {
        let Some(sandbox_id) = &operation.sandbox_id else {
            return Ok(None);
        };
        let row = sqlx::query(
            "SELECT COALESCE(s.name, '') AS sandbox_name, COALESCE(s.workspace, '') AS workspace, \
             CAST(CASE WHEN o.sandbox_id IS NULL THEN 0 ELSE 1 END AS BIGINT) AS has_session \
             FROM (SELECT $1 AS id) t LEFT JOIN sandboxes s ON s.id = t.id \
             LEFT JOIN session_owners o ON o.sandbox_id = t.id",
        )
        .bind(sandbox_id)
        .fetch_one(self.pool())
        .await?;
        let has_session: i64 = row.try_get("has_session")?;
        Ok(Some(OperationTargetRecord {
            sandbox_id: sandbox_id.clone(),
            sandbox_name: row.try_get("sandbox_name")?,
            workspace: row.try_get("workspace")?,
            state: operation.state,
            outcome: operation.outcome,
            error: operation.error.clone(),
            updated_at: operation.updated_at,
            has_session: has_session != 0,
        }))
    }
}
