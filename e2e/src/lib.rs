//! Test harness for the end-to-end suite: starts real gateways on real
//! stores (a temp SQLite file, or a fresh PostgreSQL database), real
//! processes, and hands out authenticated clients.
//!
//! PostgreSQL comes from `OPENSHELL_TEST_POSTGRES_URL` (an admin URL; each
//! test gets its own database). Without it, PostgreSQL tests fail loudly
//! rather than pass silently: `.ci/run` starts a server and sets the URL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
pub mod chaos;
pub mod cli;
pub mod process;

pub use api::Api;

use std::path::PathBuf;
use std::time::Duration;

use openshell_gateway::config::GatewayConfig;
use openshell_gateway::{DeliveryMode, GatewayHandle};
use sqlx::Connection;
use tempfile::TempDir;
use tonic::transport::Channel;

pub const TOKEN: &str = "test-operator-token";

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub const ALL: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];
}

/// A store location that outlives gateway restarts.
pub struct TestStore {
    pub backend: Backend,
    pub url: String,
    pub dir: TempDir,
}

impl TestStore {
    pub async fn new(backend: Backend) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = match backend {
            Backend::Sqlite => format!("sqlite://{}", dir.path().join("gateway.db").display()),
            Backend::Postgres => fresh_postgres_database().await,
        };
        Self { backend, url, dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn config(&self) -> GatewayConfig {
        let mut config = GatewayConfig::for_data_dir(self.dir.path(), TOKEN);
        config.database_url = self.url.clone();
        config
    }
}

/// The admin URL of the test PostgreSQL server.
pub fn postgres_admin_url() -> String {
    std::env::var("OPENSHELL_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "OPENSHELL_TEST_POSTGRES_URL is not set: PostgreSQL tests need a server \
             (run `bash .ci/run`, or start one and export the URL, e.g. \
             postgres://postgres:postgres@127.0.0.1:5432/postgres)"
        )
    })
}

/// Creates an empty database for one test and returns its URL.
pub async fn fresh_postgres_database() -> String {
    let admin = postgres_admin_url();
    let name = format!("openshell_test_{}", uuid::Uuid::now_v7().simple());
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    drop_old_test_databases(&mut conn).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b.to_string(), format!("?{q}")),
        None => (admin.clone(), String::new()),
    };
    let base = base
        .rsplit_once('/')
        .map_or(base.clone(), |(b, _)| b.to_string());
    format!("{base}/{name}{query}")
}

/// Test databases are never dropped by the test that made them (a test may fail or be
/// killed half-way), so each new one drops those made more than three hours ago: no test
/// runs that long, and a server that kept them all would take minutes to recover after a
/// crash. The name's UUIDv7 carries its creation time.
async fn drop_old_test_databases(conn: &mut sqlx::PgConnection) {
    const PREFIX: &str = "openshell_test_";
    const MAX_AGE_MS: u128 = 3 * 60 * 60 * 1000;
    let Ok(names) = sqlx::query_scalar::<_, String>(
        "SELECT datname FROM pg_database WHERE datname LIKE 'openshell\\_test\\_%'",
    )
    .fetch_all(&mut *conn)
    .await
    else {
        return;
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    for name in names {
        let created_ms = name
            .strip_prefix(PREFIX)
            .and_then(|uuid| uuid.get(..12))
            .and_then(|hex| u128::from_str_radix(hex, 16).ok());
        if created_ms.is_some_and(|created| now_ms.saturating_sub(created) > MAX_AGE_MS) {
            // Another test may be dropping it at the same moment: losing that race is fine.
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name}"
            )))
            .execute(&mut *conn)
            .await;
        }
    }
}

/// `GET /metrics` of a gateway process's metrics listener on `port`, over plain HTTP/1.0:
/// the exposition text.
pub fn scrape_metrics(port: u16) -> String {
    use std::io::{Read, Write};
    // The metrics listener may bind a moment after the API port a spawn waits for.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("the metrics listener on port {port} never answered: {e}"),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

#[derive(Clone)]
pub struct BearerToken(pub Option<String>);

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            req.metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        Ok(req)
    }
}

/// An in-process gateway on a test store.
pub struct TestGateway {
    pub handle: GatewayHandle,
    pub store: TestStore,
}

impl TestGateway {
    pub async fn start(backend: Backend) -> Self {
        Self::start_on(TestStore::new(backend).await, DeliveryMode::Poll).await
    }

    pub async fn start_on(store: TestStore, mode: DeliveryMode) -> Self {
        Self::start_with(store, mode, |_| {}).await
    }

    /// Starts with short reconcile and heartbeat intervals, as delivery tests want.
    pub async fn start_for_delivery(mode: DeliveryMode) -> Self {
        Self::start_with(TestStore::new(Backend::Sqlite).await, mode, |_| {}).await
    }

    pub async fn start_with(
        store: TestStore,
        mode: DeliveryMode,
        tweak: impl FnOnce(&mut GatewayConfig),
    ) -> Self {
        let mut config = store.config();
        config.config_delivery_mode = mode;
        config.heartbeat_interval = Duration::from_millis(500);
        config.delivery.reconcile_interval = Duration::from_secs(1);
        config.delivery.reconcile_first_min = Duration::from_secs(1);
        tweak(&mut config);
        let handle = openshell_gateway::start(config).await.unwrap();
        Self { handle, store }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.handle.addr)
    }

    pub async fn api(&self) -> Api {
        self.api_with_token(Some(TOKEN)).await
    }

    pub async fn api_with_token(&self, token: Option<&str>) -> Api {
        let channel = Channel::from_shared(self.endpoint())
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        Api::new(channel, BearerToken(token.map(str::to_string)))
    }

    /// Stops the gateway and starts a new one on the same store.
    pub async fn restart(self) -> Self {
        let Self { handle, store } = self;
        let mode = handle.state.config.config_delivery_mode;
        Self::restart_in(Self { handle, store }, mode).await
    }

    /// Stops the gateway and starts it again on the same store and address in `mode`.
    pub async fn restart_in(self, mode: DeliveryMode) -> Self {
        let Self { handle, store } = self;
        let addr = handle.addr;
        handle.shutdown().await;
        Self::start_with(store, mode, |config| config.listen = addr).await
    }

    pub fn state(&self) -> &openshell_gateway::state::GatewayState {
        &self.handle.state
    }
}

/// Runs `sql` on a SQLite test gateway's store file beside the gateway, as an
/// operator or a fault would.
pub async fn alter_sqlite_store(gw: &TestGateway, sql: &str) {
    let mut conn = sqlx::SqliteConnection::connect(&gw.store.url)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

/// Polls `check` until it returns Some, or panics after `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates a sandbox over the API and returns (id, supervisor credential).
pub async fn create_sandbox(api: &mut Api, name: &str, policy: &str) -> (String, String) {
    let created = api
        .create_sandbox(openshell_proto::v1::CreateSandboxRequest {
            name: name.into(),
            workspace: String::new(),
            policy: policy.into(),
        })
        .await
        .unwrap()
        .into_inner();
    (
        created.sandbox.unwrap().id().to_string(),
        created.supervisor_credential,
    )
}

/// Reads one metric's value from the gateway's `/metrics` text (0 when absent).
pub async fn metric(gateway: &TestGateway, series: &str) -> f64 {
    let text = gateway.handle.state.metrics.render();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
        .unwrap_or(0.0)
}

/// Bound on a real supervisor process getting somewhere (its session, a first apply, its
/// workload started), generous for a loaded machine.
pub const SUPERVISOR_DEADLINE: Duration = Duration::from_secs(60);

/// A sandbox's lifecycle as `GetSandbox` answers now.
pub async fn lifecycle(api: &Api, id_or_name: &str) -> openshell_proto::v1::SandboxLifecycle {
    openshell_proto::v1::SandboxLifecycle::try_from(get_sandbox(api, id_or_name).await.lifecycle)
        .unwrap()
}

/// Waits until the sandbox is RUNNING (its supervisor applied a first configuration). A
/// gateway that does not answer yet counts as not yet.
pub async fn wait_running(api: &Api, id_or_name: &str) {
    eventually("the sandbox to be RUNNING", SUPERVISOR_DEADLINE, || async {
        let sandbox = api
            .clone()
            .get_sandbox(openshell_proto::v1::GetSandboxRequest {
                name: id_or_name.to_string(),
                workspace_scope: None,
            })
            .await
            .ok()?
            .into_inner()
            .sandbox?;
        (sandbox.lifecycle == openshell_proto::v1::SandboxLifecycle::Running as i32).then_some(())
    })
    .await;
}

/// Waits until the supervisor's workload has started.
pub async fn wait_started(supervisor: &process::SupervisorProcess) {
    eventually("the workload to start", SUPERVISOR_DEADLINE, || async {
        supervisor.workload_started().then_some(())
    })
    .await;
}

/// A sandbox as `GetSandbox` answers for an id or a name.
pub async fn get_sandbox(api: &Api, id_or_name: &str) -> openshell_proto::v1::Sandbox {
    api.clone()
        .get_sandbox(openshell_proto::v1::GetSandboxRequest {
            name: id_or_name.to_string(),
            workspace_scope: None,
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap()
}

/// An operation as `GetOperation` answers now.
pub async fn get_operation(api: &Api, id: &str) -> openshell_proto::v1::Operation {
    api.clone()
        .get_operation(openshell_proto::v1::GetOperationRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
}

/// Waits until an operation is terminal and returns it.
pub async fn terminal_operation(api: &Api, id: &str) -> openshell_proto::v1::Operation {
    use openshell_proto::v1::OperationState as S;
    eventually(
        &format!("operation {id} to end"),
        Duration::from_secs(30),
        || {
            let mut api = api.clone();
            let id = id.to_string();
            async move {
                let op = api
                    .get_operation(openshell_proto::v1::GetOperationRequest { id })
                    .await
                    .ok()?
                    .into_inner();
                (!matches!(S::try_from(op.state), Ok(S::Pending | S::Delivered))).then_some(op)
            }
        },
    )
    .await
}

/// The example policy every test starts from.
pub const POLICY: &str = include_str!("../../examples/policy.yaml");

/// The example policy with its first port changed: a new revision that
/// touches only the network section.
pub fn policy_with_port(port: u32) -> String {
    POLICY.replacen("port: 443", &format!("port: {port}"), 1)
}

/// [`POLICY`] with one more network policy, `name`, reaching `name.example.com`.
pub fn policy_with_extra(name: &str) -> String {
    POLICY.replacen(
        "network_policies:\n",
        &format!(
            "network_policies:\n  {name}:\n    endpoints:\n      - {{ host: {name}.example.com, port: 443, protocol: rest, access: read-only }}\n"
        ),
        1,
    )
}

/// `InspectSession` of a sandbox (id or name in the default workspace).
pub async fn inspect(api: &Api, sandbox: &str) -> openshell_proto::v1::SessionInspection {
    api.clone()
        .inspect_session(openshell_proto::v1::InspectSessionRequest {
            sandbox: sandbox_ref(sandbox),
        })
        .await
        .unwrap()
        .into_inner()
}

pub fn sandbox_ref(id_or_name: &str) -> Option<openshell_proto::v1::SandboxRef> {
    Some(openshell_proto::v1::SandboxRef {
        id_or_name: id_or_name.into(),
        workspace: String::new(),
    })
}

/// An `UpdateConfig` for one sandbox (in the default workspace), to fill in.
pub fn to_sandbox(id_or_name: &str) -> openshell_proto::v1::UpdateConfigRequest {
    openshell_proto::v1::UpdateConfigRequest {
        sandbox: id_or_name.into(),
        ..Default::default()
    }
}

/// Upstream's selector of one workspace by name.
pub fn workspace_scope(
    name: impl Into<String>,
) -> Option<openshell_proto::datamodel::v1::WorkspaceSelector> {
    use openshell_proto::datamodel::v1::{WorkspaceSelector, workspace_selector::Selection};
    Some(WorkspaceSelector {
        selection: Some(Selection::Workspace(name.into())),
    })
}

/// An `UpdateConfig` for every sandbox, to fill in.
pub fn to_global() -> openshell_proto::v1::UpdateConfigRequest {
    openshell_proto::v1::UpdateConfigRequest {
        global: true,
        ..Default::default()
    }
}

/// An `UpdateConfig` for a workspace's settings, to fill in.
pub fn to_workspace(workspace: &str) -> openshell_proto::v1::UpdateConfigRequest {
    openshell_proto::v1::UpdateConfigRequest {
        workspace_settings: true,
        workspace_scope: crate::workspace_scope(workspace),
        ..Default::default()
    }
}

/// Wait options of `timeout` and no threshold (every target must end), for `UpdateConfig`
/// and `WaitForApply` requests.
pub fn wait_for(timeout: Duration) -> Option<openshell_proto::v1::WaitOptions> {
    Some(openshell_proto::v1::WaitOptions {
        timeout: Some(prost_types::Duration {
            seconds: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(timeout.subsec_nanos()).unwrap_or(0),
        }),
        threshold: 0.0,
    })
}

/// A provider value that is not a secret.
pub fn plain_value(name: &str, value: &str) -> openshell_proto::v1::ProviderValueInput {
    openshell_proto::v1::ProviderValueInput {
        name: name.into(),
        value: value.into(),
        class: openshell_proto::v1::ValueClass::NonSecret as i32,
        expires_at: None,
    }
}

/// A credential value of a provider.
pub fn credential_value(name: &str, value: &str) -> openshell_proto::v1::ProviderValueInput {
    openshell_proto::v1::ProviderValueInput {
        class: openshell_proto::v1::ValueClass::Credential as i32,
        ..plain_value(name, value)
    }
}

/// Creates a provider of `kind` in the default workspace with `values`, and attaches it to
/// `sandbox`.
pub async fn attach_new_provider(
    api: &mut Api,
    sandbox: &str,
    name: &str,
    kind: &str,
    values: Vec<openshell_proto::v1::ProviderValueInput>,
) {
    api.create_provider(openshell_proto::v1::CreateProviderRequest {
        name: name.into(),
        r#type: kind.into(),
        values,
        ..Default::default()
    })
    .await
    .unwrap();
    api.attach_provider(openshell_proto::v1::AttachProviderRequest {
        sandbox: sandbox_ref(sandbox),
        provider: name.into(),
    })
    .await
    .unwrap();
}

/// A setting change given as raw text, as the CLI sends it.
pub fn raw_setting(key: &str, raw: &str) -> openshell_proto::v1::SettingChange {
    openshell_proto::v1::SettingChange {
        key: key.into(),
        change: Some(openshell_proto::v1::setting_change::Change::Raw(raw.into())),
    }
}

/// The state of an operation as the enum.
pub fn state(op: &openshell_proto::v1::Operation) -> openshell_proto::v1::OperationState {
    openshell_proto::v1::OperationState::try_from(op.state)
        .unwrap_or(openshell_proto::v1::OperationState::Unspecified)
}
