//! What the store fails with: facts about the database and the rows in it, not the rules of
//! the domain. The domain error wraps it (`GatewayError::Store`); only the API edge turns it
//! into a gRPC status, so nothing here knows about status codes.

/// Everything a store call can fail with.
///
/// The messages of the typed outcomes (a missing row, a taken name) are the ones clients
/// read, so they name the object the way a request does.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed or could not be reached. The detail is for the log: it may quote
    /// SQL, hosts or rows.
    #[error("store error: {0}")]
    Database(sqlx::Error),
    /// The database refused a write that breaks one of its constraints: a row it refers to
    /// is gone, or a row it deletes is still referred to (a foreign key), a key is taken, or
    /// a value is outside what a column allows. Not an outage: the same write fails the same
    /// way however often it is retried, and nothing of it was made. The detail is for the
    /// log.
    #[error("the write breaks a {kind} constraint of the store: {source}")]
    Constraint {
        kind: Constraint,
        source: sqlx::Error,
    },
    /// A stored value could not be decoded (corruption or a bad key).
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// The row a call reads or updates does not exist.
    #[error("{0}")]
    NotFound(String),
    /// An insert hit a unique key: the name is taken.
    #[error("{0}")]
    AlreadyExists(String),
    /// The store cannot run the call now: its writer or its batched reader is gone, or the
    /// gateway is stopping. A retry may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// The database URL names no backend the store runs on, or its SQLite directory cannot
    /// be created.
    #[error("database_url: {0}")]
    BadUrl(String),
    /// The store's first connection could not be opened or readied, when the gateway starts.
    /// `store` names the file or server (never credentials).
    #[error("{store}: {source}{hint}")]
    Open {
        store: String,
        /// What to check, for failures whose cause the database does not say.
        hint: &'static str,
        source: sqlx::Error,
    },
}

/// Which kind of constraint a refused write broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Constraint {
    /// A row refers to one that does not exist, or a deleted row is still referred to.
    ForeignKey,
    /// A unique index or primary key is taken.
    Unique,
    /// A `CHECK` or `NOT NULL` rule of a column.
    Check,
}

impl std::fmt::Display for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ForeignKey => "foreign key",
            Self::Unique => "unique",
            Self::Check => "check",
        })
    }
}

/// Every database error becomes a store error here, so a constraint the database enforces
/// is told apart from an outage wherever a statement fails, on SQLite and PostgreSQL alike
/// (both drivers classify their codes: SQLite's extended `SQLITE_CONSTRAINT_*`,
/// PostgreSQL's SQLSTATE class 23).
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match constraint_of(&e) {
            Some(kind) => Self::Constraint { kind, source: e },
            None => Self::Database(e),
        }
    }
}

fn constraint_of(e: &sqlx::Error) -> Option<Constraint> {
    use sqlx::error::ErrorKind;
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    match db.kind() {
        ErrorKind::ForeignKeyViolation => Some(Constraint::ForeignKey),
        ErrorKind::UniqueViolation => Some(Constraint::Unique),
        ErrorKind::CheckViolation | ErrorKind::NotNullViolation => Some(Constraint::Check),
        _ => None,
    }
}

impl StoreError {
    /// The part of the store that answers a call has shut down with the gateway.
    pub fn stopping() -> Self {
        Self::Unavailable("the gateway is stopping".into())
    }

    /// True when the database refused a write because a unique index was hit. Inserts that
    /// know which name is taken report [`StoreError::AlreadyExists`] instead; this is for a
    /// caller that retries a write racing another for the same key.
    pub fn is_unique_violation(&self) -> bool {
        self.constraint() == Some(Constraint::Unique)
    }

    /// The constraint a refused write broke, if that is why it failed.
    pub fn constraint(&self) -> Option<Constraint> {
        match self {
            Self::Constraint { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// True when the database refused a write for want of disk space: SQLite's
    /// `SQLITE_FULL` (its unix file layer reports ENOSPC so), PostgreSQL's `disk_full`
    /// (SQLSTATE 53100), or a bare I/O error that says so. The write was rolled back, so the
    /// client may be told it was not made.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Database(e) => is_disk_full(e),
            _ => false,
        }
    }
}

fn is_disk_full(e: &sqlx::Error) -> bool {
    /// SQLite's primary result code; extended codes keep it in the low byte.
    const SQLITE_FULL: u32 = 13;
    const POSTGRES_DISK_FULL: &str = "53100";
    match e {
        // Both backends report their code as digits: which one spoke decides how to read it.
        sqlx::Error::Database(db)
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
        {
            db.code()
                .and_then(|code| code.parse::<u32>().ok())
                .is_some_and(|code| code & 0xff == SQLITE_FULL)
        }
        sqlx::Error::Database(db) => db.code().is_some_and(|code| code == POSTGRES_DISK_FULL),
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::StorageFull,
        _ => false,
    }
}

pub(super) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::{NewOperation, TargetKind, sqlite_for_tests};

    fn keyed_operation(id: &str) -> NewOperation {
        NewOperation {
            id: id.into(),
            target_kind: TargetKind::Global,
            target: String::new(),
            sandbox_id: None,
            policy_revision: 0,
            settings_revision: 0,
            global_policy_revision: None,
            no_op: false,
            touches_policy: false,
            caller: "ops".into(),
            idempotency_key: Some("k1".into()),
            request_fingerprint: None,
            idempotency_expires_at: None,
            provider_env_revision: None,
        }
    }

    /// A write racing another for the same idempotency key is retried on this (see
    /// `config_update`), so it must recognise the index hit the database reports.
    #[tokio::test]
    async fn a_second_operation_under_one_key_is_a_unique_violation() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let mut tx = store.begin_write().await.unwrap();
        tx.insert_operation(&keyed_operation("op-1")).await.unwrap();
        let err = tx
            .insert_operation(&keyed_operation("op-2"))
            .await
            .unwrap_err();
        assert!(err.is_unique_violation(), "{err:?}");
        assert!(!StoreError::NotFound("operation op-2 not found".into()).is_unique_violation());
    }

    /// Runs `sql` in a write transaction on a writer whose database may not grow (SQLite's
    /// page limit fails a write as a full disk does) and returns its error.
    async fn fails_full(store: &crate::store::Store, sql: &'static str) -> StoreError {
        let mut tx = store.begin_write().await.unwrap();
        sqlx::raw_sql("PRAGMA max_page_count = 1")
            .execute(tx.conn())
            .await
            .unwrap();
        let err = StoreError::Database(sqlx::raw_sql(sql).execute(tx.conn()).await.unwrap_err());
        assert!(err.is_disk_full(), "{err:?}");
        err
    }

    /// Probe (the gateway's disk-full chaos scenario): after a full disk failed a write that
    /// SQLite rolled back by itself and then a statement of the next one, every later write
    /// was acknowledged as committed and never became visible, because the writer's
    /// connection stayed inside a transaction nothing ended. A write after a full disk is
    /// made, or refused.
    #[tokio::test]
    async fn writes_after_a_full_disk_are_made() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let mut tx = store.begin_write().await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE filler (x BLOB); \
             CREATE TABLE filler_rows (x BLOB NOT NULL UNIQUE);",
        )
        .execute(tx.conn())
        .await
        .unwrap();
        tx.commit().await.unwrap();
        // SQLite rolls the whole transaction back on this one.
        fails_full(&store, "INSERT INTO filler VALUES (zeroblob(1000000));").await;
        // This one, a multi-row statement that may abort, only rolls itself back.
        fails_full(
            &store,
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) \
             INSERT INTO filler_rows SELECT randomblob(100000) FROM n;",
        )
        .await;
        let mut tx = store.begin_write().await.unwrap();
        sqlx::raw_sql("PRAGMA max_page_count = 1000000")
            .execute(tx.conn())
            .await
            .unwrap();
        tx.ensure_workspace("default").await.unwrap();
        tx.insert_sandbox("sb-after", "after", "default", "hash")
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let seen = store.get_sandbox("sb-after").await.unwrap();
        assert_eq!(seen.name, "after");
    }

    /// The start-up error names the setting as it did when the store built a bad-input error.
    #[tokio::test]
    async fn an_unknown_url_scheme_names_database_url() {
        let dir = tempfile::tempdir().unwrap();
        let cipher = crate::crypto::CredentialCipher::load(None, dir.path()).unwrap();
        let options = crate::store::StoreOptions {
            url: "mysql://localhost/gateway".into(),
            max_connections: 1,
            replica_id: "test".into(),
            wait_recheck_interval: std::time::Duration::from_secs(1),
        };
        let err = crate::store::Store::open(&options, cipher)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "database_url: expected a sqlite:// or postgres:// URL"
        );
    }
}
