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
//! on every build.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use openshell_core::settings::Scope;
use sqlx::any::AnyRow;
use sqlx::{AnyPool, AssertSqlSafe, Row};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::task::AbortOnDropHandle;

use super::error::{Result, StoreError};
use super::policies::CURRENT_GLOBAL_POLICY_REVISION;
use super::records::{GlobalPolicyRecord, SandboxRecord, sandbox_from_row, u64_col};
use super::sandboxes::SANDBOX_COLUMNS;
use super::settings::ScopedSettings;
use super::{Backend, Store, json_list};

/// Everything a `sandbox_config` snapshot is built from.
#[derive(Debug, Clone)]
pub struct SandboxConfigInputs {
    pub sandbox: SandboxRecord,
    /// Hash and canonical JSON of the sandbox's own latest policy.
    pub own_policy: Option<(String, String)>,
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
/// `$1`. Rendered once per backend: every build runs it.
static SANDBOX_CONFIG_INPUTS_SQL: LazyLock<[String; 2]> = LazyLock::new(|| {
    let columns: Vec<String> = SANDBOX_COLUMNS
        .split(',')
        .map(|c| format!("s.{}", c.trim()))
        .collect();
    // The sandbox's counter always names its latest policy revision.
    let select = format!(
        "SELECT {}, p.policy_hash AS own_policy_hash, p.policy_json AS own_policy_json, \
         w.settings_revision AS workspace_settings_revision, \
         (SELECT value FROM counters WHERE name = 'global_settings_revision') AS global_settings_revision, \
         {CURRENT_GLOBAL_POLICY_REVISION} AS global_policy_revision, \
         CAST(CASE WHEN EXISTS (SELECT 1 FROM operations o \
         WHERE o.sandbox_id = s.id AND o.state = 'PENDING') THEN 1 ELSE 0 END AS BIGINT) \
         AS pending_operation \
         FROM sandboxes s JOIN workspaces w ON w.name = s.workspace \
         LEFT JOIN policy_revisions p ON p.sandbox_id = s.id AND p.revision = s.policy_revision \
         WHERE s.id ",
        columns.join(", ")
    );
    [Backend::Sqlite, Backend::Postgres].map(|b| format!("{select}{}", b.in_json_list(1)))
});

fn sandbox_config_inputs_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => &SANDBOX_CONFIG_INPUTS_SQL[0],
        Backend::Postgres => &SANDBOX_CONFIG_INPUTS_SQL[1],
    }
}

/// The per-sandbox part of the build statement's row.
#[derive(Debug)]
struct SandboxInputs {
    sandbox: SandboxRecord,
    own_policy: Option<(String, String)>,
    global_policy_revision: u64,
    global_settings_revision: u64,
    workspace_settings_revision: u64,
    pending_operation: bool,
}

impl SandboxInputs {
    fn from_row(row: &AnyRow) -> Result<Self> {
        let own_policy = match (
            row.try_get::<Option<String>, _>("own_policy_hash")?,
            row.try_get::<Option<String>, _>("own_policy_json")?,
        ) {
            (Some(hash), Some(json)) => Some((hash, json)),
            _ => None,
        };
        Ok(Self {
            sandbox: sandbox_from_row(row)?,
            own_policy,
            global_policy_revision: u64_col(row, "global_policy_revision")?,
            global_settings_revision: u64_col(row, "global_settings_revision")?,
            workspace_settings_revision: u64_col(row, "workspace_settings_revision")?,
            pending_operation: row.try_get::<i64, _>("pending_operation")? != 0,
        })
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
        let sql = sandbox_config_inputs_sql(backend);
        let (foreground, foreground_reads) = mpsc::unbounded_channel();
        let (background, background_reads) = mpsc::unbounded_channel();
        let batchers = [foreground_reads, background_reads].map(|incoming| {
            AbortOnDropHandle::new(tokio::spawn(batch_reads(pool.clone(), sql, incoming)))
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
    sql: &'static str,
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
            answer_batch(&pool, sql, batch).await;
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

async fn answer_batch(pool: &AnyPool, sql: &'static str, batch: Vec<InputRead>) {
    let ids: Vec<&str> = batch.iter().map(|r| r.sandbox_id.as_str()).collect();
    let rows = match json_list(&ids) {
        Ok(ids) => sqlx::query(AssertSqlSafe(sql))
            .bind(ids)
            .fetch_all(pool)
            .await
            .map_err(StoreError::from),
        Err(e) => Err(e),
    };
    let rows = match rows {
        Ok(rows) => rows,
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
    let by_id: HashMap<String, &AnyRow> = rows
        .iter()
        .filter_map(|row| Some((row.try_get::<String, _>("id").ok()?, row)))
        .collect();
    for read in batch {
        let inputs = match by_id.get(&read.sandbox_id) {
            Some(row) => SandboxInputs::from_row(row),
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
