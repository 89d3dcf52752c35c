//! What the snapshot builder reads for one sandbox's `sandbox_config`, in as
//! few statements as possible: a fanout or a reconnect storm builds one
//! snapshot per sandbox, so each statement saved is saved ten thousand times.
//!
//! One statement reads the sandbox, its own policy and the revisions of the
//! scopes it inherits from, and it reads them for every build that is
//! waiting at the time ([`InputReads`]). A fanout's builds ask for their
//! reads before they wait for a build permit ([`ReadPriority::Background`]),
//! so their reads fill whole statements. The global policy and the global
//! and workspace settings are shared by many sandboxes: they are cached in
//! process, keyed by revision. The content of a revision never changes, so
//! a cached entry is valid for as long as that revision is current, also
//! when another replica made the write; the revisions come from the store
//! on every build. A sandbox's own policy is read as its hash alone when
//! the policy is already in wire form in process ([`crate::encoded_policies`]):
//! its stored text, the bulk of a sandbox's rows, is read only for hashes
//! not seen lately, by a second statement for the whole batch.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use openshell_core::settings::Scope;
use prost::bytes::Bytes;
use sqlx::{AnyPool, AssertSqlSafe, Row};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::task::AbortOnDropHandle;

use super::error::{Result, StoreError};
use super::policies::CURRENT_GLOBAL_POLICY_REVISION;
use super::records::{GlobalPolicyRecord, Lifecycle, SandboxColumns, SandboxRecord, u64_col};
use super::sandboxes::SANDBOX_COLUMNS;
use super::settings::ScopedSettings;
use super::{Backend, Store, fetch_json_rows, json_list};
use crate::encoded_policies;

/// Everything a `sandbox_config` snapshot is built from.
#[derive(Debug, Clone)]
pub struct SandboxConfigInputs {
    pub sandbox: SandboxRecord,
    /// The sandbox's own latest policy.
    pub own_policy: Option<OwnPolicy>,
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

impl SandboxConfigInputs {
    /// The revisions these inputs were read at: see [`ConfigInputRevisions`].
    pub fn revisions(&self) -> ConfigInputRevisions {
        ConfigInputRevisions {
            stopped: self.sandbox.lifecycle == Lifecycle::Stopped,
            policy_revision: self.sandbox.policy_revision,
            sandbox_settings_revision: self.sandbox_settings.revision,
            workspace_settings_revision: self.workspace_settings.revision,
            global_settings_revision: self.global_settings.revision,
            global_policy_revision: self.global_policy_revision,
            attachment_epoch: self.sandbox.attachment_epoch,
            attached_providers: self.attached_provider_revisions.len() as u64,
            attached_provider_revision_sum: self
                .attached_provider_revisions
                .iter()
                .map(|(_, revision)| *revision)
                .sum(),
        }
    }
}

/// The revisions a `sandbox_config` snapshot is built from. Each names
/// content that never changes while it is current, so inputs at equal
/// revisions build the same snapshot: reconcile reads these for every due
/// session in one statement and rebuilds only where they moved
/// (`delivery/reconcile.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigInputRevisions {
    /// A stopped sandbox gets no snapshot; the other lifecycle states build
    /// the same one, so a sandbox that went from pending to running once its
    /// supervisor connected is not rebuilt for it.
    pub stopped: bool,
    pub policy_revision: u64,
    pub sandbox_settings_revision: u64,
    pub workspace_settings_revision: u64,
    pub global_settings_revision: u64,
    pub global_policy_revision: u64,
    pub attachment_epoch: u64,
    /// Within one attachment epoch the set of attached providers is fixed
    /// and each provider's revision only grows, so their count and the sum
    /// of their revisions move whenever the provider environment can.
    pub attached_providers: u64,
    pub attached_provider_revision_sum: u64,
}

/// A sandbox's own latest policy, as a build reads it.
#[derive(Debug, Clone)]
pub struct OwnPolicy {
    pub hash: String,
    pub body: PolicyBody,
}

#[derive(Debug, Clone)]
pub enum PolicyBody {
    /// Already in wire form: the stored text was not read.
    Encoded(Bytes),
    /// The stored canonical JSON.
    Json(String),
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

/// The one statement of a build, for every sandbox id in the JSON array
/// `$1`, as one row of [`BuildRow`]s ([`Backend::json_rows`]): SQLite's
/// driver hands every row of a result to the reading task as a message of
/// its own, and a 10k fanout's reads, 64 rows a statement, woke the task
/// and the connection's thread in turn for each. Rendered once per backend:
/// every build runs it.
static SANDBOX_CONFIG_INPUTS_SQL: LazyLock<[String; 2]> = LazyLock::new(|| {
    let sandbox_columns: Vec<&str> = SANDBOX_COLUMNS.split(',').map(str::trim).collect();
    let selected: Vec<String> = sandbox_columns.iter().map(|c| format!("s.{c}")).collect();
    let selected = selected.join(", ");
    [Backend::Sqlite, Backend::Postgres].map(|backend| {
        // SQLite's planner prefers the primary key, which makes it read the
        // table row with the policy's text; the hash index answers alone.
        let policy_index = match backend {
            Backend::Sqlite => "INDEXED BY policy_revisions_hash ",
            Backend::Postgres => "",
        };
        // The sandbox's counter always names its latest policy revision.
        let select = format!(
            "SELECT {selected}, p.policy_hash AS own_policy_hash, \
             w.settings_revision AS workspace_settings_revision, \
             (SELECT value FROM counters WHERE name = 'global_settings_revision') AS global_settings_revision, \
             {CURRENT_GLOBAL_POLICY_REVISION} AS global_policy_revision, \
             CAST(CASE WHEN EXISTS (SELECT 1 FROM operations o \
             WHERE o.sandbox_id = s.id AND o.state = 'PENDING') THEN 1 ELSE 0 END AS BIGINT) \
             AS pending_operation \
             FROM sandboxes s JOIN workspaces w ON w.name = s.workspace \
             LEFT JOIN policy_revisions p {policy_index}\
             ON p.sandbox_id = s.id AND p.revision = s.policy_revision \
             WHERE s.id {}",
            backend.in_json_list(1)
        );
        let sandbox = backend.json_array(&sandbox_columns);
        backend.json_rows(
            &select,
            &[
                &sandbox,
                "own_policy_hash",
                "workspace_settings_revision",
                "global_settings_revision",
                "global_policy_revision",
                "pending_operation",
            ],
            "id",
        )
    })
});

/// One sandbox's row of the build statement, in its column order.
#[derive(Debug, serde::Deserialize)]
struct BuildRow {
    sandbox: SandboxColumns,
    own_policy_hash: Option<String>,
    workspace_settings_revision: u64,
    global_settings_revision: u64,
    global_policy_revision: u64,
    pending_operation: i64,
}

fn sandbox_config_inputs_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => &SANDBOX_CONFIG_INPUTS_SQL[0],
        Backend::Postgres => &SANDBOX_CONFIG_INPUTS_SQL[1],
    }
}

/// [`ConfigInputRevisions`] of every sandbox id in the JSON array `$1`:
/// index reads only, no policy text, no settings values.
static CONFIG_INPUT_REVISIONS_SQL: LazyLock<[String; 2]> = LazyLock::new(|| {
    [Backend::Sqlite, Backend::Postgres].map(|backend| {
        let select = format!(
            "SELECT s.id, s.lifecycle, s.policy_revision, s.settings_revision, s.attachment_epoch, \
             w.settings_revision AS workspace_settings_revision, \
             (SELECT value FROM counters WHERE name = 'global_settings_revision') AS global_settings_revision, \
             {CURRENT_GLOBAL_POLICY_REVISION} AS global_policy_revision, \
             CAST((SELECT COUNT(*) FROM attachments a JOIN providers p ON p.id = a.provider_id \
             WHERE a.sandbox_id = s.id) AS BIGINT) AS attached_providers, \
             CAST((SELECT COALESCE(SUM(p.revision), 0) FROM attachments a JOIN providers p ON p.id = a.provider_id \
             WHERE a.sandbox_id = s.id) AS BIGINT) AS attached_provider_revision_sum \
             FROM sandboxes s JOIN workspaces w ON w.name = s.workspace \
             WHERE s.id {}",
            backend.in_json_list(1)
        );
        // One aggregated row: a reconcile tick reads a few hundred sandboxes,
        // and the driver hands each row over as a message of its own.
        backend.json_rows(&select, &RevisionsRow::COLUMNS, "id")
    })
});

/// A row of [`CONFIG_INPUT_REVISIONS_SQL`], its columns in this order.
#[derive(Debug, serde::Deserialize)]
struct RevisionsRow {
    id: String,
    lifecycle: String,
    policy_revision: u64,
    settings_revision: u64,
    attachment_epoch: u64,
    workspace_settings_revision: u64,
    global_settings_revision: u64,
    global_policy_revision: u64,
    attached_providers: u64,
    attached_provider_revision_sum: u64,
}

impl RevisionsRow {
    const COLUMNS: [&str; 10] = [
        "id",
        "lifecycle",
        "policy_revision",
        "settings_revision",
        "attachment_epoch",
        "workspace_settings_revision",
        "global_settings_revision",
        "global_policy_revision",
        "attached_providers",
        "attached_provider_revision_sum",
    ];
}

/// Sandboxes per revisions statement: one reconcile tick of 10k sessions
/// due over 30 s is about 340.
const REVISIONS_PER_STATEMENT: usize = 512;

/// The stored text of given revisions of sandbox policies, for the
/// hashes of a batch that are not in wire form in process. Each sandbox id
/// and each revision is a JSON list; the caller keeps the pairs it asked for.
static POLICY_TEXT_SQL: LazyLock<[String; 2]> = LazyLock::new(|| {
    [Backend::Sqlite, Backend::Postgres].map(|b| {
        format!(
            "SELECT sandbox_id, revision, policy_json FROM policy_revisions \
             WHERE sandbox_id {} AND CAST(revision AS TEXT) {}",
            b.in_json_list(1),
            b.in_json_list(2)
        )
    })
});

/// The per-sandbox part of the build statement's row.
#[derive(Debug)]
struct SandboxInputs {
    sandbox: SandboxRecord,
    own_policy: Option<OwnPolicy>,
    global_policy_revision: u64,
    global_settings_revision: u64,
    workspace_settings_revision: u64,
    pending_operation: bool,
}

impl SandboxInputs {
    /// `row`'s inputs, the sandbox's policy taken from `policies`.
    fn from_row(row: &BuildRow, policies: &BatchPolicies) -> Result<Self> {
        let sandbox = row.sandbox.record()?;
        let own_policy = match &row.own_policy_hash {
            Some(hash) => Some(policies.own_policy(&sandbox, hash.clone())?),
            None => None,
        };
        Ok(Self {
            sandbox,
            own_policy,
            global_policy_revision: row.global_policy_revision,
            global_settings_revision: row.global_settings_revision,
            workspace_settings_revision: row.workspace_settings_revision,
            pending_operation: row.pending_operation != 0,
        })
    }
}

/// The own policies of one batch's sandboxes: in wire form by hash, looked
/// up once per batch, and the stored text of the revisions whose hash was
/// not there, by `(sandbox id, revision)`.
#[derive(Debug, Default)]
struct BatchPolicies {
    encoded: HashMap<String, Bytes>,
    texts: HashMap<(String, u64), String>,
}

impl BatchPolicies {
    /// Looks up every row's policy hash and reads the text of those not in
    /// wire form, in one statement.
    async fn read(pool: &AnyPool, backend: Backend, rows: &[BuildRow]) -> Result<Self> {
        let mut policies = Self::default();
        let mut unread: Vec<(String, u64)> = Vec::new();
        for row in rows {
            // A row that does not decode fails its own read, in `from_row`.
            let (Some(hash), Ok(revision)) = (&row.own_policy_hash, row.sandbox.policy_revision())
            else {
                continue;
            };
            if policies.encoded.contains_key(hash) {
                continue;
            }
            match encoded_policies::get(hash) {
                Some(encoded) => {
                    policies.encoded.insert(hash.clone(), encoded);
                }
                None => unread.push((row.sandbox.id().to_string(), revision)),
            }
        }
        if unread.is_empty() {
            return Ok(policies);
        }
        let ids: Vec<&str> = unread.iter().map(|(id, _)| id.as_str()).collect();
        let revisions: Vec<String> = unread.iter().map(|(_, r)| r.to_string()).collect();
        let sql = match backend {
            Backend::Sqlite => &POLICY_TEXT_SQL[0],
            Backend::Postgres => &POLICY_TEXT_SQL[1],
        };
        let rows = sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(json_list(&ids)?)
            .bind(json_list(&revisions)?)
            .fetch_all(pool)
            .await?;
        // Other revisions of these sandboxes match the two lists too.
        for row in &rows {
            let key = (
                row.try_get::<String, _>("sandbox_id")?,
                u64_col(row, "revision")?,
            );
            if unread.contains(&key) {
                policies.texts.insert(key, row.try_get("policy_json")?);
            }
        }
        Ok(policies)
    }

    fn own_policy(&self, sandbox: &SandboxRecord, hash: String) -> Result<OwnPolicy> {
        let body = match self.encoded.get(&hash) {
            Some(encoded) => PolicyBody::Encoded(encoded.clone()),
            None => PolicyBody::Json(
                self.texts
                    .get(&(sandbox.id.clone(), sandbox.policy_revision))
                    .cloned()
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "sandbox {} names policy revision {}, which is not stored",
                            sandbox.id, sandbox.policy_revision
                        ))
                    })?,
            ),
        };
        Ok(OwnPolicy { hash, body })
    }
}

/// Whether a build waits for its inputs now or reads them ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPriority {
    /// Someone waits for this build now: a poll, a bootstrap, a sandbox write.
    Foreground,
    /// A fanout or reconcile build, asked for before its build permit.
    Background,
}

/// Most sandboxes one build statement reads.
const MAX_BATCH: usize = 64;

/// Build statements running at once for each priority. While all are busy,
/// the reads that arrive queue up and go into the next statement together.
const BATCHES_IN_FLIGHT: usize = 2;

/// Batches the build statement: reads that arrive while others run are
/// answered by one statement. A fanout asks for thousands of sandboxes at
/// once, and on SQLite each statement costs two thread hand-offs and a pool
/// round trip besides its rows. A read that finds nothing running is sent
/// at once. Every statement starts after each of its reads was asked for,
/// so it sees every write committed before that. Foreground and background
/// reads have batchers of their own, so a poll or a sandbox write never
/// waits for a fanout's statements.
#[derive(Debug, Clone)]
pub(crate) struct InputReads {
    foreground: mpsc::UnboundedSender<InputRead>,
    background: mpsc::UnboundedSender<InputRead>,
    _batchers: Arc<[AbortOnDropHandle<()>; 2]>,
}

#[derive(Debug)]
struct InputRead {
    sandbox_id: String,
    reply: oneshot::Sender<Result<SandboxInputs>>,
}

/// One sandbox's build inputs, asked for when this was made: the batcher
/// may read them before [`PendingInputs::inputs`] is awaited.
#[derive(Debug)]
pub struct PendingInputs {
    sandbox_id: String,
    answer: oneshot::Receiver<Result<SandboxInputs>>,
}

impl InputReads {
    /// Starts the batchers; they end with the last handle.
    pub(crate) fn start(pool: AnyPool, backend: Backend) -> Self {
        let (foreground, foreground_reads) = mpsc::unbounded_channel();
        let (background, background_reads) = mpsc::unbounded_channel();
        let batchers = [foreground_reads, background_reads].map(|incoming| {
            AbortOnDropHandle::new(tokio::spawn(batch_reads(pool.clone(), backend, incoming)))
        });
        Self {
            foreground,
            background,
            _batchers: Arc::new(batchers),
        }
    }

    fn request(&self, sandbox_id: &str, priority: ReadPriority) -> PendingInputs {
        let (reply, answer) = oneshot::channel();
        let batcher = match priority {
            ReadPriority::Foreground => &self.foreground,
            ReadPriority::Background => &self.background,
        };
        // A batcher that is gone drops the reply with the request, and
        // awaiting the answer then says that the gateway is stopping.
        let _ = batcher.send(InputRead {
            sandbox_id: sandbox_id.to_string(),
            reply,
        });
        PendingInputs {
            sandbox_id: sandbox_id.to_string(),
            answer,
        }
    }
}

async fn batch_reads(
    pool: AnyPool,
    backend: Backend,
    mut incoming: mpsc::UnboundedReceiver<InputRead>,
) {
    let slots = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    // Owned here, so a batch in flight is aborted with the batcher.
    let mut running = JoinSet::new();
    while let Some(first) = incoming.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let batch = next_batch(first, &mut incoming);
        if batch.is_empty() {
            continue;
        }
        let pool = pool.clone();
        running.spawn(async move {
            answer_batch(&pool, backend, batch).await;
            drop(slot);
        });
        while running.try_join_next().is_some() {}
    }
}

/// `first` and what else waits, up to [`MAX_BATCH`]. Reads whose builder
/// gave up (a closed session, a passed deadline) are dropped unread.
fn next_batch(
    first: InputRead,
    incoming: &mut mpsc::UnboundedReceiver<InputRead>,
) -> Vec<InputRead> {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut next = Some(first);
    while let Some(read) = next {
        if !read.reply.is_closed() {
            batch.push(read);
        }
        if batch.len() == MAX_BATCH {
            break;
        }
        next = incoming.try_recv().ok();
    }
    batch
}

async fn answer_batch(pool: &AnyPool, backend: Backend, batch: Vec<InputRead>) {
    let ids: Vec<&str> = batch.iter().map(|r| r.sandbox_id.as_str()).collect();
    let read = async {
        let rows: Vec<BuildRow> = fetch_json_rows(
            pool,
            AssertSqlSafe(sandbox_config_inputs_sql(backend)),
            json_list(&ids)?,
        )
        .await?;
        let policies = BatchPolicies::read(pool, backend, &rows).await?;
        Ok::<_, StoreError>((rows, policies))
    };
    let (rows, policies) = match read.await {
        Ok(read) => read,
        Err(e) => {
            // sqlx errors cannot be cloned: each read gets the message.
            let message = format!("reading build inputs failed: {e}");
            for read in batch {
                let _ = read
                    .reply
                    .send(Err(StoreError::Unavailable(message.clone())));
            }
            return;
        }
    };
    let by_id: HashMap<&str, &BuildRow> = rows.iter().map(|row| (row.sandbox.id(), row)).collect();
    for read in batch {
        let inputs = match by_id.get(read.sandbox_id.as_str()) {
            Some(row) => SandboxInputs::from_row(row, &policies),
            None => Err(StoreError::NotFound(format!(
                "sandbox {} not found",
                read.sandbox_id
            ))),
        };
        // The reader may have given up (its build deadline passed).
        let _ = read.reply.send(inputs);
    }
}

impl Store {
    /// Asks for the inputs of one sandbox's `sandbox_config` snapshot; the
    /// read sees every write committed before this call.
    pub fn request_sandbox_config_inputs(
        &self,
        sandbox_id: &str,
        priority: ReadPriority,
    ) -> PendingInputs {
        self.input_reads().request(sandbox_id, priority)
    }
}

impl PendingInputs {
    /// The inputs, once read, completed from the shared caches.
    pub async fn inputs(self, store: &Store) -> Result<SandboxConfigInputs> {
        let Self { sandbox_id, answer } = self;
        let sandbox_id = sandbox_id.as_str();
        let SandboxInputs {
            sandbox,
            own_policy,
            global_policy_revision,
            global_settings_revision,
            workspace_settings_revision,
            pending_operation,
        } = answer.await.map_err(|_| StoreError::stopping())??;
        let (global_policy_revision, global_policy) =
            store.cached_global_policy(global_policy_revision).await?;
        let global_settings = store
            .cached_settings(Scope::Global, "", global_settings_revision)
            .await?;
        let workspace_settings = store
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
            store.settings_at(Scope::Sandbox, sandbox_id).await?
        };
        let attached_provider_revisions = store
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
}

impl Store {
    /// The current [`ConfigInputRevisions`] of these sandboxes, by id; a
    /// sandbox that does not exist is left out.
    pub async fn config_input_revisions(
        &self,
        sandbox_ids: &[&str],
    ) -> Result<HashMap<String, ConfigInputRevisions>> {
        let sql = match self.backend() {
            Backend::Sqlite => &CONFIG_INPUT_REVISIONS_SQL[0],
            Backend::Postgres => &CONFIG_INPUT_REVISIONS_SQL[1],
        };
        let mut revisions = HashMap::with_capacity(sandbox_ids.len());
        for ids in sandbox_ids.chunks(REVISIONS_PER_STATEMENT) {
            let rows: Vec<RevisionsRow> =
                fetch_json_rows(self.pool(), AssertSqlSafe(sql.as_str()), json_list(ids)?).await?;
            for row in rows {
                revisions.insert(
                    row.id,
                    ConfigInputRevisions {
                        stopped: Lifecycle::parse(&row.lifecycle)? == Lifecycle::Stopped,
                        policy_revision: row.policy_revision,
                        sandbox_settings_revision: row.settings_revision,
                        workspace_settings_revision: row.workspace_settings_revision,
                        global_settings_revision: row.global_settings_revision,
                        global_policy_revision: row.global_policy_revision,
                        attachment_epoch: row.attachment_epoch,
                        attached_providers: row.attached_providers,
                        attached_provider_revision_sum: row.attached_provider_revision_sum,
                    },
                );
            }
        }
        Ok(revisions)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(id: &str) -> (InputRead, oneshot::Receiver<Result<SandboxInputs>>) {
        let (reply, answer) = oneshot::channel();
        let read = InputRead {
            sandbox_id: id.to_string(),
            reply,
        };
        (read, answer)
    }

    fn ids(batch: &[InputRead]) -> Vec<&str> {
        batch.iter().map(|r| r.sandbox_id.as_str()).collect()
    }

    /// Reconcile runs this statement for every session every 30 s: reading
    /// each sandbox's policy row for it made SQLite page in every stored
    /// policy text, most of a fleet's store, where the hash is all it needs.
    #[tokio::test]
    async fn the_build_statement_reads_the_policy_hash_from_its_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite_for_tests(dir.path()).await;
        let sql = format!(
            "EXPLAIN QUERY PLAN {}",
            sandbox_config_inputs_sql(Backend::Sqlite)
        );
        let plan: Vec<String> = sqlx::query(AssertSqlSafe(sql))
            .bind("[\"sb-1\"]")
            .fetch_all(store.pool())
            .await
            .unwrap()
            .iter()
            .map(|row| row.try_get::<String, _>("detail").unwrap())
            .collect();
        assert!(
            plan.iter()
                .any(|step| step.contains("USING COVERING INDEX policy_revisions_hash")),
            "{plan:#?}"
        );
        assert!(
            !sandbox_config_inputs_sql(Backend::Postgres).contains("policy_json"),
            "the statement reads the policy text"
        );
    }

    /// One statement reads a whole batch: a sandbox whose stored row does not
    /// decode fails its own read, naming why, and the rest of the batch is read.
    #[tokio::test]
    async fn a_sandbox_row_that_does_not_decode_fails_only_its_own_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite_for_tests(dir.path()).await;
        let mut tx = store.begin_write().await.unwrap();
        tx.ensure_workspace("default").await.unwrap();
        for (id, name) in [("sb-1", "web"), ("sb-2", "db")] {
            tx.insert_sandbox(id, name, "default", "hash")
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
        sqlx::query("UPDATE sandboxes SET lifecycle = 'melted' WHERE id = 'sb-2'")
            .execute(store.pool())
            .await
            .unwrap();

        let (reads, answers): (Vec<_>, Vec<_>) =
            ["sb-2", "sb-1", "sb-none"].into_iter().map(read).unzip();
        answer_batch(store.pool(), Backend::Sqlite, reads).await;
        let mut answers = answers.into_iter();
        let mut next = async || answers.next().unwrap().await.unwrap();

        let broken = next().await.unwrap_err();
        assert!(
            broken.to_string().contains("unknown Lifecycle \"melted\""),
            "{broken}"
        );
        let good = next().await.unwrap();
        assert_eq!(
            (good.sandbox.id.as_str(), good.sandbox.name.as_str()),
            ("sb-1", "web")
        );
        assert_eq!(good.sandbox.lifecycle, Lifecycle::Pending);
        assert!(good.own_policy.is_none());
        assert!(matches!(next().await, Err(StoreError::NotFound(_))));
    }

    #[test]
    fn a_batch_takes_what_waits_in_order_and_skips_reads_nobody_waits_for() {
        let (tx, mut incoming) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        for i in 0..MAX_BATCH + 10 {
            let (r, a) = read(&format!("sandbox-{i}"));
            tx.send(r).unwrap();
            answers.push(a);
        }
        // The session of sandbox-1 closed while its read waited.
        answers.remove(1);
        let (first, _a) = read("first");
        let batch = next_batch(first, &mut incoming);
        assert_eq!(batch.len(), MAX_BATCH);
        assert_eq!(ids(&batch)[..3], ["first", "sandbox-0", "sandbox-2"]);
        let rest = incoming.try_recv().unwrap();
        assert_eq!(rest.sandbox_id, format!("sandbox-{MAX_BATCH}"));
    }
}
