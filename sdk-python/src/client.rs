//! `Client` and `AsyncClient`: one Python surface, defined once by
//! `client_surface!`, run either blocking (GIL released) or as coroutines.
//! Defining it once is what keeps the two from drifting apart.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::SystemTime;

use openshell_sdk::{
    OperationState, ProviderSpec, ProviderUpdate, SandboxLifecycle, SandboxRef, SettingChange,
    Target, UpdateConfig, UpdateMode,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::args::{self, Callback, ExpectedRevision, Pem, PolicyEdits, Seconds, Settings, arg};
use crate::calls;
use crate::connect::connect;
use crate::errors;
use crate::progress::Progress;
use crate::repr::quote;
use crate::runtime;

/// A blocking connection to a gateway. Calls release the GIL while they wait.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Client {
    conn: Connection,
}

/// An asyncio connection to a gateway; every call is a coroutine.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct AsyncClient {
    conn: Connection,
}

/// The SDK client until `close()` drops it. Calls run on a clone, so closing
/// never cuts off a call already started; it refuses new ones.
struct Connection {
    endpoint: String,
    client: RwLock<Option<openshell_sdk::Client>>,
}

impl Connection {
    fn new(client: openshell_sdk::Client) -> Self {
        Self {
            endpoint: client.endpoint().to_owned(),
            client: RwLock::new(Some(client)),
        }
    }

    fn get(&self) -> PyResult<openshell_sdk::Client> {
        self.client
            .read()
            .map_err(|_| PyRuntimeError::new_err("the client's lock is poisoned"))?
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("the client is closed"))
    }

    fn close(&self) {
        if let Ok(mut client) = self.client.write() {
            client.take();
        }
    }
}

/// The methods both clients share. `$run` turns a `Call` into the Python
/// result (a value, or a coroutine); `$progress` says where callbacks run.
macro_rules! client_surface {
    ($class:ident, $run:path, $progress:path, { $($extra:tt)* }) => {
        #[pymethods]
        impl $class {
            $($extra)*

            /// `endpoint`, `token` and the CA default to `OPENSHELL_GATEWAY`,
            /// `OPENSHELL_TOKEN` and the PEM file `OPENSHELL_CA_CERT`, as for the CLI.
            #[new]
            #[pyo3(signature = (endpoint=None, token=None, ca_cert_pem=None, timeout=None))]
            fn new(
                py: Python<'_>,
                #[pyo3(from_py_with = arg::endpoint)] endpoint: Option<String>,
                #[pyo3(from_py_with = arg::token)] token: Option<String>,
                #[pyo3(from_py_with = arg::ca_cert_pem)] ca_cert_pem: Option<Pem>,
                #[pyo3(from_py_with = arg::timeout)] timeout: Option<Seconds>,
            ) -> PyResult<Self> {
                let client = connect(py, endpoint, token, ca_cert_pem, timeout)?;
                Ok(Self {
                    conn: Connection::new(client),
                })
            }

            #[getter]
            fn endpoint(&self) -> &str {
                &self.conn.endpoint
            }

            fn __repr__(&self) -> String {
                format!("{}(endpoint={})", stringify!($class), quote(&self.conn.endpoint))
            }

            /// Drops the connection; later calls raise `RuntimeError`. Calls
            /// already running finish. Closing twice is harmless.
            fn close(&self) {
                self.conn.close();
            }

            /// Stops (`STOPPED`) or restarts (`PENDING`) a sandbox.
            fn set_sandbox_lifecycle(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
                #[pyo3(from_py_with = arg::lifecycle)] lifecycle: SandboxLifecycle,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::set_sandbox_lifecycle(&self.conn.get()?, sandbox, lifecycle))
            }

            /// Replaces a provider's values (env, credentials, expiry); sandboxes
            /// that attach it receive the new environment.
            #[pyo3(signature = (provider, *, workspace=None, env=None, credentials=None, expires_at=None))]
            #[allow(clippy::too_many_arguments)] // one per Python keyword argument
            fn update_provider(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::provider)] provider: String,
                #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
                #[pyo3(from_py_with = arg::env)] env: Option<BTreeMap<String, String>>,
                #[pyo3(from_py_with = arg::credentials)] credentials: Option<BTreeMap<String, String>>,
                #[pyo3(from_py_with = arg::expires_at)] expires_at: Option<SystemTime>,
            ) -> PyResult<Py<PyAny>> {
                let update = ProviderUpdate {
                    provider,
                    workspace,
                    env: env.unwrap_or_default(),
                    credentials: credentials.unwrap_or_default(),
                    expires_at,
                };
                $run(py, calls::update_provider(&self.conn.get()?, update))
            }

            /// Deletes a provider; the gateway refuses while a sandbox attaches it.
            #[pyo3(signature = (provider, *, workspace=None))]
            fn delete_provider(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::provider)] provider: String,
                #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::delete_provider(&self.conn.get()?, provider, workspace))
            }

            /// Reads a provider by id or name.
            #[pyo3(signature = (provider, *, workspace=None))]
            fn get_provider(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::provider)] provider: String,
                #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::get_provider(&self.conn.get()?, provider, workspace))
            }

            /// Lists providers, of one workspace when given.
            #[pyo3(signature = (*, workspace=None))]
            fn list_providers(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_providers(&self.conn.get()?, workspace))
            }

            /// Detaches a provider from a sandbox.
            fn detach_provider(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
                #[pyo3(from_py_with = arg::provider)] provider: String,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::detach_provider(&self.conn.get()?, sandbox, provider))
            }

            /// Reads a sandbox's policy: the latest revision, or `revision`.
            #[pyo3(signature = (sandbox, revision=None))]
            fn get_sandbox_policy(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
                #[pyo3(from_py_with = arg::revision)] revision: Option<u64>,
            ) -> PyResult<Py<PyAny>> {
                if revision == Some(0) {
                    return Err(errors::invalid_argument(py, "revision", "must be a positive integer"));
                }
                $run(py, calls::get_sandbox_policy(&self.conn.get()?, sandbox, revision))
            }

            /// Lists a sandbox's policy revisions, newest first, without their YAML.
            #[pyo3(signature = (sandbox, *, limit=0))]
            fn list_sandbox_policies(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
                #[pyo3(from_py_with = arg::limit)] limit: u32,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_sandbox_policies(&self.conn.get()?, sandbox, limit))
            }

            /// Reads the global policy: the latest revision, or `revision`. A revision
            /// that cleared it has no `policy_yaml` and an empty hash.
            #[pyo3(signature = (revision=None))]
            fn get_global_policy(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::revision)] revision: Option<u64>,
            ) -> PyResult<Py<PyAny>> {
                if revision == Some(0) {
                    return Err(errors::invalid_argument(py, "revision", "must be a positive integer"));
                }
                $run(py, calls::get_global_policy(&self.conn.get()?, revision))
            }

            /// Lists the global policy's revisions, newest first, without their YAML.
            #[pyo3(signature = (*, limit=0))]
            fn list_global_policies(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::limit)] limit: u32,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_global_policies(&self.conn.get()?, limit))
            }

            /// Reads the settings stored at a scope; for a sandbox also every
            /// registry key's effective value and where it comes from.
            fn get_settings(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::target)] target: Target,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::get_settings(&self.conn.get()?, target))
            }

            /// Lists the settings registry: every key, its type and default.
            fn list_setting_definitions(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_setting_definitions(&self.conn.get()?))
            }

            /// Creates a sandbox; the returned supervisor credential is the only copy.
            #[pyo3(signature = (name, *, workspace=None, policy=None))]
            fn create_sandbox(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::name)] name: String,
                #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
                #[pyo3(from_py_with = arg::policy)] policy: Option<String>,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::create_sandbox(&self.conn.get()?, name, workspace, policy))
            }

            /// Reads a sandbox by `NAME`, `ID` or `WORKSPACE/NAME`.
            fn get_sandbox(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::get_sandbox(&self.conn.get()?, sandbox))
            }

            /// Lists sandboxes, every page.
            #[pyo3(signature = (*, workspace=None, include_deleted=false))]
            fn list_sandboxes(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
                #[pyo3(from_py_with = arg::include_deleted)] include_deleted: bool,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_sandboxes(&self.conn.get()?, workspace, include_deleted))
            }

            /// Deletes a sandbox; its pending operations end CANCELLED.
            fn delete_sandbox(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::delete_sandbox(&self.conn.get()?, sandbox))
            }

            /// Creates a provider; credential values are stored encrypted and never returned.
            #[pyo3(signature = (name, provider_type, *, workspace=None, env=None, credentials=None, expires_at=None))]
            #[allow(clippy::too_many_arguments)] // one per Python keyword argument
            fn create_provider(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::name)] name: String,
                #[pyo3(from_py_with = arg::provider_type)] provider_type: String,
                #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
                #[pyo3(from_py_with = arg::env)] env: Option<BTreeMap<String, String>>,
                #[pyo3(from_py_with = arg::credentials)] credentials: Option<BTreeMap<String, String>>,
                #[pyo3(from_py_with = arg::expires_at)] expires_at: Option<SystemTime>,
            ) -> PyResult<Py<PyAny>> {
                let spec = ProviderSpec {
                    name,
                    workspace,
                    provider_type,
                    env: env.unwrap_or_default(),
                    credentials: credentials.unwrap_or_default(),
                    expires_at,
                };
                $run(py, calls::create_provider(&self.conn.get()?, spec))
            }

            /// Attaches a provider (resolved in the sandbox's workspace) to a sandbox.
            fn attach_provider(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
                #[pyo3(from_py_with = arg::provider)] provider: String,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::attach_provider(&self.conn.get()?, sandbox, provider))
            }

            /// Writes policy and/or settings as one durable operation.
            #[pyo3(signature = (
                target,
                *,
                policy=None,
                settings=None,
                delete_settings=None,
                clear_global_policy=false,
                mode=None,
                idempotency_key=None,
                wait_timeout=None,
                threshold=None,
                validate_only=false,
                policy_edits=None,
                expected_revision=None,
            ))]
            #[allow(clippy::too_many_arguments)] // one per Python keyword argument
            fn update_config(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::target)] target: Target,
                #[pyo3(from_py_with = arg::policy)] policy: Option<String>,
                #[pyo3(from_py_with = arg::settings)] settings: Option<Settings>,
                #[pyo3(from_py_with = arg::delete_settings)] delete_settings: Option<Vec<String>>,
                #[pyo3(from_py_with = arg::clear_global_policy)] clear_global_policy: bool,
                #[pyo3(from_py_with = arg::mode)] mode: Option<UpdateMode>,
                #[pyo3(from_py_with = arg::idempotency_key)] idempotency_key: Option<String>,
                #[pyo3(from_py_with = arg::wait_timeout)] wait_timeout: Option<Seconds>,
                #[pyo3(from_py_with = arg::threshold)] threshold: Option<f64>,
                #[pyo3(from_py_with = arg::validate_only)] validate_only: bool,
                #[pyo3(from_py_with = arg::policy_edits)] policy_edits: Option<PolicyEdits>,
                #[pyo3(from_py_with = arg::expected_revision)] expected_revision: Option<
                    ExpectedRevision,
                >,
            ) -> PyResult<Py<PyAny>> {
                let mut update = UpdateConfig::new(target);
                if let Some(PolicyEdits(specs)) = policy_edits {
                    update = update.edit_specs(&specs).map_err(|err| errors::plain(py, err))?;
                }
                update.expected_revision = expected_revision.map(|ExpectedRevision(n)| n);
                update.policy = policy;
                update.clear_global_policy = clear_global_policy;
                if let Some(Settings(settings)) = settings {
                    update.settings = settings;
                }
                update.settings.extend(
                    delete_settings
                        .unwrap_or_default()
                        .into_iter()
                        .map(SettingChange::delete),
                );
                update.mode = mode.unwrap_or(UpdateMode::CommitOnly);
                update.idempotency_key = idempotency_key;
                update.wait_timeout = wait_timeout.map(|Seconds(limit)| limit);
                update.threshold = threshold;
                update.validate_only = validate_only;
                $run(py, calls::update_config(&self.conn.get()?, update))
            }

            /// Reads an operation by id.
            fn get_operation(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::id)] id: String,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::get_operation(&self.conn.get()?, id))
            }

            /// Follows an operation until it is terminal (or the fleet threshold is
            /// met); raises WaitTimeout when the deadline passes first.
            #[pyo3(signature = (id, timeout=None, threshold=None, on_progress=None))]
            fn wait_for_apply(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::id)] id: String,
                #[pyo3(from_py_with = arg::timeout)] timeout: Option<Seconds>,
                #[pyo3(from_py_with = arg::threshold)] threshold: Option<f64>,
                #[pyo3(from_py_with = arg::on_progress)] on_progress: Option<Callback>,
            ) -> PyResult<Py<PyAny>> {
                let wait = calls::Wait {
                    id,
                    known: None,
                    timeout: timeout.map(|Seconds(limit)| limit),
                    threshold,
                    progress: on_progress.map(|Callback(callback)| $progress(callback)),
                    raise_failed: false,
                };
                $run(py, calls::wait(&self.conn.get()?, wait))
            }

            /// Lists the newest operations, optionally of one sandbox and in some states.
            #[pyo3(signature = (*, sandbox=None, states=None, limit=0))]
            fn list_operations(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: Option<SandboxRef>,
                #[pyo3(from_py_with = arg::states)] states: Option<Vec<OperationState>>,
                #[pyo3(from_py_with = arg::limit)] limit: u32,
            ) -> PyResult<Py<PyAny>> {
                $run(
                    py,
                    calls::list_operations(
                        &self.conn.get()?,
                        sandbox,
                        states.unwrap_or_default(),
                        limit,
                    ),
                )
            }

            /// One page of an operation's targets, in sandbox id order: each
            /// sandbox, its state and why. Pass `next_page_token` back as
            /// `page_token` for the next page; `page_size` 0 is the gateway's
            /// default of 100, more than 1000 is refused.
            #[pyo3(signature = (id, *, states=None, page_size=0, page_token=None))]
            fn list_operation_targets(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::id)] id: String,
                #[pyo3(from_py_with = arg::states)] states: Option<Vec<OperationState>>,
                #[pyo3(from_py_with = arg::page_size)] page_size: u32,
                #[pyo3(from_py_with = arg::page_token)] page_token: Option<String>,
            ) -> PyResult<Py<PyAny>> {
                $run(
                    py,
                    calls::list_operation_targets(
                        &self.conn.get()?,
                        id,
                        states.unwrap_or_default(),
                        page_size,
                        page_token.filter(|t| !t.is_empty()),
                    ),
                )
            }

            /// Lists the connected supervisor sessions.
            fn list_sessions(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_sessions(&self.conn.get()?))
            }

            /// Explains configuration delivery for one sandbox.
            fn inspect_session(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::inspect_session(&self.conn.get()?, sandbox))
            }

            /// A sandbox's recent log lines (provider values masked), oldest first.
            #[pyo3(signature = (sandbox, *, lines=0, since_ms=0, sources=None, min_level=None))]
            #[allow(clippy::too_many_arguments)] // one per Python keyword argument
            fn get_sandbox_logs(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
                #[pyo3(from_py_with = arg::lines)] lines: u32,
                #[pyo3(from_py_with = arg::since_ms)] since_ms: i64,
                #[pyo3(from_py_with = arg::sources)] sources: Option<Vec<String>>,
                #[pyo3(from_py_with = arg::min_level)] min_level: Option<String>,
            ) -> PyResult<Py<PyAny>> {
                let query = args::log_query(py, lines, since_ms, sources, min_level)?;
                $run(py, calls::get_sandbox_logs(&self.conn.get()?, sandbox, query))
            }

            /// Follows a sandbox's log lines: iterate the result (`for`, or
            /// `async for` with `AsyncClient`) until you `break` or `cancel()`.
            #[pyo3(signature = (sandbox, *, lines=0, since_ms=0, sources=None, min_level=None))]
            #[allow(clippy::too_many_arguments)] // one per Python keyword argument
            fn watch_sandbox_logs(
                &self,
                py: Python<'_>,
                #[pyo3(from_py_with = arg::sandbox)] sandbox: SandboxRef,
                #[pyo3(from_py_with = arg::lines)] lines: u32,
                #[pyo3(from_py_with = arg::since_ms)] since_ms: i64,
                #[pyo3(from_py_with = arg::sources)] sources: Option<Vec<String>>,
                #[pyo3(from_py_with = arg::min_level)] min_level: Option<String>,
            ) -> PyResult<crate::views::SandboxLogWatch> {
                let query = args::log_query(py, lines, since_ms, sources, min_level)?;
                Ok(crate::views::SandboxLogWatch::start(
                    self.conn.get()?,
                    sandbox,
                    query,
                ))
            }

            /// Describes the gateway.
            fn gateway_info(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                $run(py, calls::gateway_info(&self.conn.get()?))
            }
        }
    };
}

client_surface!(Client, runtime::block, Progress::OnCaller, {
    /// `with Client(...) as client:` closes the client when the block ends.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) {
        self.conn.close();
    }
});

client_surface!(AsyncClient, runtime::awaitable, Progress::OnLoop, {
    /// `async with AsyncClient(...) as client:` closes the client when the block ends.
    fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        runtime::ready(py, slf.into_any())
    }

    #[pyo3(signature = (*_exc))]
    fn __aexit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        self.conn.close();
        runtime::ready(py, py.None())
    }
});
