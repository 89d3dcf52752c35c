//! The authoritative store: embedded SQLite (default, one replica) or
//! PostgreSQL (several replicas), behind one set of queries.
//!
//! Queries use `$N` placeholders, which both backends accept, and only
//! portable types (TEXT, 64-bit integers, bytes), so the two backends share
//! almost every statement; where the dialects differ (row locks, a list
//! bound as one JSON parameter) one helper renders each dialect's form,
//! and the migrations are per backend. SQLite allows one writer at a
//! time, so writes take an in-process lock there instead of failing with
//! SQLITE_BUSY; PostgreSQL relies on row locks.

mod build_inputs;
mod data_migrations;
mod error;
mod events;
mod fanout_intents;
mod gauges;
mod notices;
mod operation_targets;
mod operations;
mod policies;
pub use policies::PolicyLog;
mod providers;
mod records;
mod replicas;
mod reports;
mod sandboxes;
mod session_owners;
mod settings;
mod tokens;
mod writer_thread;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{Any, AnyPool, AssertSqlSafe, Executor, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio_util::task::AbortOnDropHandle;

use crate::crypto::CredentialCipher;
use crate::in_flight::InFlight;

use build_inputs::InputReads;
pub use build_inputs::{
    ConfigInputRevisions, OwnPolicy, PendingInputs, PolicyBody, ReadPriority, SandboxConfigInputs,
    SharedInputCache,
};
pub use error::{Constraint, Result, StoreError};
use events::ChangedOperation;
pub use events::{DEFAULT_WAIT_RECHECK, OperationEvents, OperationSignal};
pub use fanout_intents::FanoutIntent;
pub use operation_targets::{OperationTargetRecord, TargetPage, target_page_sql};
pub use operations::{
    IdempotentMatch, ListedTargets, NewOperation, OperationFilter, STOPPED_TARGET_REASON,
};
pub use providers::ProviderValues;
pub use records::*;
pub use replicas::LivePeer;
pub use reports::{LastReport, LiveTarget, PolicyProgress, ReportRow, RoundInputs};
pub use sandboxes::LockedSandbox;
pub use session_owners::{OwnerClaim, OwnerClaims, SessionOwner};
pub use settings::{ScopedSettings, SettingWrite};
pub use tokens::TokenRecord;
use writer_thread::WriterThread;

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Which database the store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// Handle to the store; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    /// Where write transactions run. On SQLite, one connection of its own:
    /// the one writer keeps its page cache and prepared statements warm
    /// instead of re-reading pages another connection's commit invalidated.
    /// On PostgreSQL, the shared pool.
    writer: AnyPool,
    /// PostgreSQL: the connections of writes on the writer thread, opened
    /// there (see `writer_thread.rs`). SQLite's one writer serves both.
    writer_thread_pool: AnyPool,
    backend: Backend,
    write_lock: Arc<Mutex<()>>,
    /// Write transactions waiting for `write_lock` (SQLite).
    writers_waiting: Arc<AtomicUsize>,
    cipher: CredentialCipher,
    events: OperationEvents,
    shared_inputs: SharedInputCache,
    input_reads: InputReads,
    /// Where write transactions run while the runtime is crowded
    /// (see `writer_thread.rs`).
    writer_thread: Arc<WriterThread>,
    _checkpointer: Option<Arc<AbortOnDropHandle<()>>>,
    /// Hears other replicas' operation changes (PostgreSQL; `notices.rs`).
    _notices: Option<Arc<AbortOnDropHandle<()>>>,
    replica_id: Arc<str>,
    /// Counts the operator tokens revoked through this replica, so that what a token
    /// holds open (a wait) ends at once (`tokens.rs`).
    token_revocations: Arc<tokio::sync::watch::Sender<u64>>,
}

/// Where [`Store::run_write`] runs a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePlace {
    /// In the caller's task. Cheaper when the runtime is not crowded: on the
    /// writer thread, a write sleeps and wakes once per statement, which
    /// cost a quarter of the commit throughput of 16 concurrent clients.
    Caller,
    /// On the writer thread (see `writer_thread.rs`). When thousands of
    /// session tasks are ready, as in a fleet fanout, a write's statements
    /// do not queue behind them there.
    WriterThread,
}

/// A write transaction. Dropping it without [`commit`](WriteTx::commit) rolls back.
pub struct WriteTx {
    tx: Transaction<'static, Any>,
    backend: Backend,
    _sqlite_writer: Option<OwnedMutexGuard<()>>,
    events: OperationEvents,
    changed_operations: Vec<ChangedOperation>,
    ended_operations: Vec<OperationState>,
    replica_id: Arc<str>,
    /// Fanout intents recorded and not yet written (PostgreSQL): they go out
    /// with the operation's insert, or else just before the commit.
    pending_intents: Vec<fanout_intents::PendingIntent>,
}

impl WriteTx {
    /// Commits, then wakes the waiters of every operation this transaction
    /// changed and counts the ones it ended.
    pub async fn commit(mut self) -> Result<()> {
        self.write_pending_intents().await?;
        if self.backend == Backend::Postgres && !self.changed_operations.is_empty() {
            // Delivered to the other replicas' listeners when, and only if, this commits.
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(notices::CHANNEL)
                .bind(notices::payload(&self.replica_id, &self.changed_operations))
                .execute(&mut *self.tx)
                .await?;
        }
        self.tx.commit().await?;
        self.events.notify(&self.changed_operations);
        self.events.count_ended(&self.ended_operations);
        Ok(())
    }

    /// Remembers that an operation row changed, to wake its waiters after commit.
    pub(crate) fn operation_changed(&mut self, id: impl Into<String>) {
        self.changed_operations.push(ChangedOperation {
            id: id.into(),
            row: None,
        });
    }

    /// Remembers that an operation row changed to `row`: its waiters get it
    /// after commit without reading it back.
    pub(crate) fn operation_changed_to(&mut self, row: OperationRecord) {
        if row.state.is_terminal() {
            self.ended_operations.push(row.state);
        }
        self.changed_operations.push(ChangedOperation {
            id: row.id.clone(),
            row: Some(row),
        });
    }

    /// Remembers that an operation ended in `state`: its waiters are woken
    /// and it is counted after commit.
    pub(crate) fn operation_ended(&mut self, id: impl Into<String>, state: OperationState) {
        self.operation_changed(id);
        self.ended_operations.push(state);
    }

    /// Registers a waiter for an operation this transaction creates, before
    /// anything else can change it: every later change reaches the signal.
    pub fn subscribe(&self, operation_id: &str) -> Arc<OperationSignal> {
        self.events.subscribe(operation_id)
    }

    pub(crate) fn conn(&mut self) -> &mut sqlx::AnyConnection {
        &mut self.tx
    }

    /// Runs a [`Backend::json_rows`] statement whose one parameter is
    /// `param`, and reads its rows.
    pub(crate) async fn fetch_json_rows<T: serde::de::DeserializeOwned>(
        &mut self,
        sql: String,
        param: String,
    ) -> Result<Vec<T>> {
        fetch_json_rows(self.conn(), AssertSqlSafe(sql), param).await
    }

    /// Row-lock suffix for a read that precedes a write of the same row.
    pub(crate) fn for_update(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE",
        }
    }
}

/// Options for opening a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub url: String,
    pub max_connections: u32,
    /// This replica, recorded on the fanout intents it writes.
    pub replica_id: String,
    /// How often an operation's waiter re-reads it without a wake-up.
    pub wait_recheck_interval: Duration,
}

impl Store {
    /// Connects, creates the SQLite file if needed, and runs migrations.
    pub async fn open(options: &StoreOptions, cipher: CredentialCipher) -> Result<Self> {
        install_default_drivers();
        let backend = if options.url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if options.url.starts_with("postgres:") || options.url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(StoreError::BadUrl(
                "expected a sqlite:// or postgres:// URL".into(),
            ));
        };
        let url = match backend {
            Backend::Sqlite => sqlite_url_with_create(&options.url)?,
            Backend::Postgres => options.url.clone(),
        };
        open_first_connection(backend, &url).await?;
        let pool = connect(backend, &url, options.max_connections, false).await?;
        let writer = match backend {
            Backend::Sqlite => connect(backend, &url, 1, true).await?,
            Backend::Postgres => pool.clone(),
        };
        // Ends with the last handle to the store, so it never keeps a
        // dropped store's connections open.
        let checkpointer = (backend == Backend::Sqlite).then(|| {
            Arc::new(AbortOnDropHandle::new(tokio::spawn(
                checkpoint_in_background(pool.clone()),
            )))
        });
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator
            .run(&pool)
            .await
            .map_err(|e| StoreError::Database(sqlx::Error::Migrate(Box::new(e))))?;
        data_migrations::convert_stored_policies(&writer).await?;
        let input_reads = InputReads::start(pool.clone(), backend);
        let writer_thread = Arc::new(WriterThread::start(backend == Backend::Postgres).await?);
        let writer_thread_pool = match backend {
            Backend::Sqlite => writer.clone(),
            Backend::Postgres => {
                let url = url.clone();
                writer_thread
                    .run(async move {
                        connect(backend, &url, WRITER_THREAD_CONNECTIONS, true).await
                    })
                    .await?
            }
        };
        let events = OperationEvents::with_recheck(options.wait_recheck_interval);
        let notices = (backend == Backend::Postgres).then(|| {
            Arc::new(AbortOnDropHandle::new(tokio::spawn(notices::listen(
                url.clone(),
                options.replica_id.clone(),
                events.clone(),
            ))))
        });
        Ok(Self {
            pool,
            writer,
            writer_thread_pool,
            backend,
            write_lock: Arc::new(Mutex::new(())),
            writers_waiting: Arc::new(AtomicUsize::new(0)),
            cipher,
            events,
            shared_inputs: SharedInputCache::default(),
            input_reads,
            writer_thread,
            _checkpointer: checkpointer,
            _notices: notices,
            replica_id: options.replica_id.as_str().into(),
            token_revocations: Arc::new(tokio::sync::watch::Sender::new(0)),
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Whether the store answers a trivial read within `within` (for `Health`).
    pub async fn answers(&self, within: Duration) -> bool {
        let read = sqlx::query("SELECT 1").execute(&self.pool);
        matches!(tokio::time::timeout(within, read).await, Ok(Ok(_)))
    }

    /// Wake-ups for operation waiters in this process.
    pub fn operation_events(&self) -> &OperationEvents {
        &self.events
    }

    /// Snapshot inputs shared by many sandboxes, cached by revision.
    pub(crate) fn shared_inputs(&self) -> &SharedInputCache {
        &self.shared_inputs
    }

    /// The batched read of the build statement.
    pub(crate) fn input_reads(&self) -> &InputReads {
        &self.input_reads
    }

    pub(crate) fn cipher(&self) -> &CredentialCipher {
        &self.cipher
    }

    /// Starts a write transaction (serialised in-process on SQLite).
    pub async fn begin_write(&self) -> Result<WriteTx> {
        let guard = match self.backend {
            Backend::Sqlite => {
                // Counted while waiting, also when the wait is given up.
                let _waiting = InFlight::enter(&self.writers_waiting);
                Some(self.write_lock.clone().lock_owned().await)
            }
            Backend::Postgres => None,
        };
        let pool = if self.writer_thread.is_current() {
            &self.writer_thread_pool
        } else {
            &self.writer
        };
        let tx = pool.begin().await?;
        Ok(WriteTx {
            tx,
            backend: self.backend,
            _sqlite_writer: guard,
            events: self.events.clone(),
            changed_operations: Vec::new(),
            ended_operations: Vec::new(),
            replica_id: self.replica_id.clone(),
            pending_intents: Vec::new(),
        })
    }

    /// Runs a series of write transactions in `place`. On the writer thread
    /// it runs to the end even if the caller stops waiting: a transaction
    /// commits or rolls back on its own terms, not when a client hangs up.
    /// In the caller's task, dropping the future rolls back what has not
    /// committed.
    ///
    /// `write` fails with its caller's error, so a write may refuse on a
    /// domain rule; the store's own failures convert into it.
    pub async fn run_write<T, E>(
        &self,
        place: WritePlace,
        write: impl std::future::Future<Output = Result<T, E>> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        match place {
            WritePlace::Caller => write.await,
            WritePlace::WriterThread => self.writer_thread.run(write).await,
        }
    }

    /// Starts a long-lived writing task (the report resolver) on the writer
    /// thread, so that what it waits for wakes it there.
    pub fn spawn_on_writer_thread(
        &self,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.writer_thread.spawn(task);
    }

    /// Write transactions waiting for the SQLite writer. A long series of
    /// writes (the report resolver's) commits early when this is not zero,
    /// so a waiting write is not held up behind all of it. Always zero on
    /// PostgreSQL, where writes wait only for the rows they touch.
    pub fn writers_waiting(&self) -> usize {
        self.writers_waiting.load(Ordering::SeqCst)
    }

    /// Whether [`Store::close`] has run.
    pub fn is_closed(&self) -> bool {
        self.writer.is_closed()
    }

    pub async fn close(&self) {
        self.writer.close().await;
        self.writer_thread_pool.close().await;
        self.pool.close().await;
    }
}

/// WAL pages after which the SQLite writer checkpoints inside its own
/// commit. Only a backstop: [`checkpoint_in_background`] copies the pages,
/// and the log starts over from its beginning at the first write after a
/// pause. Without a pause it only grows; at a backstop of 10,000 pages, back
/// to back 10k fanouts reached it, and from then on commits copied what the
/// background checkpoint had not yet: 18-43 ms instead of about 1.
const WRITER_AUTOCHECKPOINT_PAGES: u32 = 100_000;

/// What the WAL file is cut back to when the log starts over, so that a
/// burst which grew it does not keep its disk space.
const WAL_SIZE_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// Page cache of the SQLite writer, in KiB (SQLite's default is 2 MiB). A
/// batch of a fleet operation's acks touches pages of targets and reports
/// all over both tables; with the default cache, pages were written out to
/// the WAL and read back within one transaction.
const WRITER_CACHE_KIB: u32 = 6 * 1024;

/// How often the background checkpoint runs.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// Copies committed WAL pages into the SQLite database from a reader
/// connection, off the writer's path. A passive checkpoint never waits for
/// the writer or for readers; what it cannot copy yet, the next one does.
async fn checkpoint_in_background(pool: AnyPool) {
    let mut tick = tokio::time::interval(CHECKPOINT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        if let Err(e) = pool.execute("PRAGMA wal_checkpoint(PASSIVE)").await {
            tracing::debug!(error = %e, "background WAL checkpoint failed; the next one retries");
        }
    }
}

/// PostgreSQL connections of the writes on the writer thread, besides the
/// shared pool's `max_connections`. The writes there are the report
/// resolver's and those made while a fanout crowds the runtime; they take
/// turns on one thread, and a fifth waits for one of the four to commit.
const WRITER_THREAD_CONNECTIONS: u32 = 4;

/// `writer`: the connection that runs write transactions (SQLite), or the
/// pool of the writer thread (PostgreSQL).
/// A pooled PostgreSQL connection idle this long is pinged before use.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

async fn connect(
    backend: Backend,
    url: &str,
    max_connections: u32,
    writer: bool,
) -> Result<AnyPool> {
    let pool = AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // A ping before every acquire is a round trip per statement. A
        // SQLite file connection cannot go stale the way a network one can;
        // a PostgreSQL one is pinged only after it sat idle, since a busy
        // connection has just shown it works.
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            Box::pin(async move {
                if backend == Backend::Postgres && meta.idle_for >= PING_WHEN_IDLE_FOR {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .after_connect(move |conn, _meta| Box::pin(prepare_connection(conn, backend, writer)))
        .after_release(move |conn, _meta| {
            Box::pin(async move {
                if backend != Backend::Sqlite || !writer {
                    return Ok(true);
                }
                // SQLite rolls a transaction back by itself on some errors (a full disk among
                // them); the driver's ROLLBACK then fails and leaves its count of open
                // transactions one too high, so its next BEGIN is a SAVEPOINT. If a statement
                // of that transaction fails too, its rollback to the savepoint leaves SQLite's
                // own transaction open, and every later commit only releases a savepoint
                // inside it: acknowledged, never made. A connection that comes back still
                // counted in a transaction is closed instead; the next write opens a fresh
                // one. The count is only ever high after a transaction ended unfinished, so
                // a connection back from a commit skips the round trip of the ping, which
                // runs after the rollback a dropped transaction queued.
                if !sqlx::Connection::is_in_transaction(&*conn) {
                    return Ok(true);
                }
                sqlx::Connection::ping(&mut *conn).await?;
                Ok(!sqlx::Connection::is_in_transaction(&*conn))
            })
        })
        .connect(url)
        .await?;
    Ok(pool)
}

/// Readies a new connection of the store: on SQLite, its journal and pragmas.
async fn prepare_connection(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    writer: bool,
) -> std::result::Result<(), sqlx::Error> {
    if backend == Backend::Sqlite {
        // WAL lets readers run beside the one writer; NORMAL
        // sync is durable across process crashes in WAL mode.
        // Statement journals (a multi-row statement inside a
        // transaction) stay in memory instead of a temp file.
        conn.execute(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 10000; \
             PRAGMA temp_store = MEMORY;",
        )
        .await?;
        if writer {
            conn.execute(AssertSqlSafe(format!(
                "PRAGMA wal_autocheckpoint = {WRITER_AUTOCHECKPOINT_PAGES}; \
                 PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES}; \
                 PRAGMA cache_size = -{WRITER_CACHE_KIB}"
            )))
            .await?;
        }
    }
    Ok(())
}

/// How long opening the store waits for a PostgreSQL server that refuses connections (one
/// starting beside the gateway): the pool's own acquire timeout.
const OPEN_RETRY_FOR: Duration = Duration::from_secs(10);

/// Opens and readies one connection before any pool exists, failing with the database's own
/// error. A pool retries a connection its setup refused until its acquire timeout and then
/// says only "pool timed out" (the cause goes to the log, once per attempt): a SQLite file
/// in a read-only directory, whose WAL index cannot be created, took 10 s to fail so. A
/// PostgreSQL server that refuses connections is still waited for, as the pool would.
async fn open_first_connection(backend: Backend, url: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + OPEN_RETRY_FOR;
    let mut backoff = Duration::from_millis(50);
    loop {
        let attempt = async {
            let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(url).await?;
            prepare_connection(&mut conn, backend, false).await?;
            // A read, so SQLite opens what every later connection needs: on a new file the
            // switch to WAL succeeds without the WAL index, and only the next connection,
            // the pool's, would find that it cannot be created.
            let probe = match backend {
                Backend::Sqlite => "SELECT count(*) FROM sqlite_master",
                Backend::Postgres => "SELECT 1",
            };
            conn.execute(probe).await?;
            sqlx::Connection::close(conn).await
        };
        let error = match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let starting = match &error {
            sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
            // too_many_connections (a connection just closed is not noticed yet) and
            // cannot_connect_now ("the database system is starting up"), as the pool retries.
            sqlx::Error::Database(db) => {
                matches!(db.code().as_deref(), Some("53300" | "57P03"))
            }
            _ => false,
        };
        if backend == Backend::Postgres
            && starting
            && tokio::time::Instant::now() + backoff < deadline
        {
            tracing::debug!(error = %error, "the store refuses connections; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
            continue;
        }
        return Err(StoreError::Open {
            store: describe_store(backend, url),
            hint: match backend {
                Backend::Sqlite => SQLITE_OPEN_HINT,
                Backend::Postgres => "",
            },
            source: error,
        });
    }
}

const SQLITE_OPEN_HINT: &str = " (the gateway must be able to create and write files in \
    the database's directory: SQLite keeps its write-ahead log and WAL index, `-wal` and \
    `-shm`, beside the database file)";

/// The store a URL names, for an error: the SQLite file's path, or PostgreSQL's host, port
/// and database without the user, password or parameters.
fn describe_store(backend: Backend, url: &str) -> String {
    match backend {
        Backend::Sqlite => format!("SQLite database {}", sqlite_path(url)),
        Backend::Postgres => {
            let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
            let rest = rest.split('?').next().unwrap_or(rest);
            let place = rest.rsplit_once('@').map_or(rest, |(_, place)| place);
            format!("PostgreSQL database {place}")
        }
    }
}

/// The file path of a `sqlite:` URL.
fn sqlite_path(url: &str) -> &str {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    path.split('?').next().unwrap_or(path)
}

fn sqlite_url_with_create(url: &str) -> Result<String> {
    let path = sqlite_path(url);
    if let Some(parent) = std::path::Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|e| {
            StoreError::BadUrl(format!("cannot create directory {}: {e}", parent.display()))
        })?;
    }
    Ok(if url.contains('?') {
        url.to_string()
    } else {
        format!("{url}?mode=rwc")
    })
}

impl Backend {
    /// The predicate tail "is one of the strings of the JSON array bound as
    /// `$param`", written after a column: `id {}`. A list of any length is
    /// one parameter and one statement text, so the statement is prepared
    /// once per connection, not once per length. On PostgreSQL the list is
    /// an array (`= ANY(ARRAY(…))`), not an `IN (subquery)`: the planner
    /// turned the subquery into a hash semi-join over a whole table (every
    /// target of a 10k fleet operation, every sandbox) for each batch of 32
    /// reports, where the array is an index lookup per element; resolving a
    /// 10k fleet's acknowledgements took 13 s of such scans instead of well
    /// under one.
    pub(crate) fn in_json_list(self, param: usize) -> String {
        match self {
            Self::Sqlite => format!("IN (SELECT value FROM json_each(${param}))"),
            Self::Postgres => {
                format!("= ANY(ARRAY(SELECT jsonb_array_elements_text(CAST(${param} AS jsonb))))")
            }
        }
    }

    /// `select`'s rows as one row whose column `json_rows` holds a JSON
    /// array with one array of `columns` per row, in `order`. SQLite's
    /// driver hands each row from its connection thread to the awaiting
    /// task as a message of its own: on a crowded machine a read of 64 rows
    /// inside a write transaction can wake its task 64 times while it holds
    /// the one writer. One row wakes it once.
    pub(crate) fn json_rows(self, select: &str, columns: &[&str], order: &str) -> String {
        let row = self.json_array(columns);
        match self {
            Self::Sqlite => format!(
                "SELECT json_group_array({row} ORDER BY {order}) AS json_rows FROM ({select})"
            ),
            Self::Postgres => format!(
                "SELECT CAST(COALESCE(json_agg({row} ORDER BY {order}), '[]') AS TEXT) \
                 AS json_rows FROM ({select}) AS r"
            ),
        }
    }

    /// The expression of a JSON array of `columns`: a row of
    /// [`Backend::json_rows`], or a group of columns nested in one.
    pub(crate) fn json_array(self, columns: &[&str]) -> String {
        let columns = columns.join(", ");
        match self {
            Self::Sqlite => format!("json_array({columns})"),
            Self::Postgres => format!("json_build_array({columns})"),
        }
    }
}

/// Runs a [`Backend::json_rows`] statement whose one parameter is `param`
/// on `executor`, and reads its rows.
pub(crate) async fn fetch_json_rows<'e, T: serde::de::DeserializeOwned>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
    sql: impl sqlx::SqlSafeStr,
    param: String,
) -> Result<Vec<T>> {
    let row = sqlx::query(sql).bind(param).fetch_one(executor).await?;
    json_rows_of(&row, "json_rows")
}

/// The rows aggregated into `column` of `row` (see [`Backend::json_rows`]).
pub(crate) fn json_rows_of<T: serde::de::DeserializeOwned>(
    row: &sqlx::any::AnyRow,
    column: &str,
) -> Result<Vec<T>> {
    let rows: String = sqlx::Row::try_get(row, column)?;
    serde_json::from_str(&rows)
        .map_err(|e| StoreError::Corrupt(format!("unreadable aggregated rows: {e}")))
}

/// A list as the JSON array that [`Backend::in_json_list`] reads.
pub(crate) fn json_list<T: serde::Serialize>(items: &[T]) -> Result<String> {
    serde_json::to_string(items).map_err(|e| StoreError::Database(sqlx::Error::Encode(Box::new(e))))
}

/// Milliseconds since the Unix epoch, the store's time unit.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(duration_ms)
        .unwrap_or(0)
}

/// A duration in the store's time unit, milliseconds.
pub fn duration_ms(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A new id with a type prefix: time-ordered, so ids sort by creation.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7())
}

/// A store on a new SQLite file in `dir`, for unit tests.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) async fn sqlite_for_tests(dir: &std::path::Path) -> Store {
    let cipher = CredentialCipher::load(None, dir).unwrap();
    let options = StoreOptions {
        url: format!("sqlite://{}", dir.join("gateway.db").display()),
        max_connections: 2,
        replica_id: "test".into(),
        wait_recheck_interval: events::DEFAULT_WAIT_RECHECK,
    };
    Store::open(&options, cipher).await.unwrap()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The linked SQLite is built as `.cargo/config.toml` asks: a page cache
    /// per connection and no global memory statistics. Otherwise the writer
    /// and every reader take the same two mutexes on each page they touch and
    /// each allocation (a sixth of the gateway's `futex` calls in a fanout).
    #[tokio::test]
    async fn sqlite_gives_each_connection_a_page_cache_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let options: Vec<String> = sqlx::query("PRAGMA compile_options")
            .fetch_all(store.pool())
            .await
            .unwrap()
            .iter()
            .map(|row| sqlx::Row::try_get(row, 0).unwrap())
            .collect();
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{options:?}"
        );
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
    }
}
