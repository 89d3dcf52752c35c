//! `Client` and `AsyncClient`: one Python surface, defined once by
//! `client_surface!`, run either blocking (GIL released) or as coroutines.
//! Defining it once is what keeps the two from drifting apart.

use openshell_sdk::{OperationState, ProviderSpec, SettingChange, UpdateConfig, UpdateMode};
use pyo3::prelude::*;

use crate::args;
use crate::calls;
use crate::connect::connect;
use crate::enums;
use crate::progress::Progress;
use crate::runtime;
use crate::views::quote;

/// A blocking connection to a gateway. Calls release the GIL while they wait.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Client {
    inner: openshell_sdk::Client,
}

/// An asyncio connection to a gateway; every call is a coroutine.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct AsyncClient {
    inner: openshell_sdk::Client,
}

/// The methods both clients share. `$run` turns a `Call` into the Python
/// result (a value, or a coroutine); `$progress` says where callbacks run.
macro_rules! client_surface {
    ($class:ident, $run:path, $progress:path) => {
        #[pymethods]
        impl $class {
            #[new]
            #[pyo3(signature = (endpoint, token=None, ca_cert_pem=None, timeout=None))]
            fn new(
                py: Python<'_>,
                endpoint: String,
                token: Option<String>,
                ca_cert_pem: Option<Bound<'_, PyAny>>,
                timeout: Option<f64>,
            ) -> PyResult<Self> {
                Ok(Self {
                    inner: connect(py, endpoint, token, ca_cert_pem.as_ref(), timeout)?,
                })
            }

            #[getter]
            fn endpoint(&self) -> &str {
                self.inner.endpoint()
            }

            fn __repr__(&self) -> String {
                format!("{}(endpoint={})", stringify!($class), quote(self.inner.endpoint()))
            }

            /// Creates a sandbox; the returned supervisor credential is the only copy.
            #[pyo3(signature = (name, *, workspace=None, policy=None))]
            fn create_sandbox(
                &self,
                py: Python<'_>,
                name: String,
                workspace: Option<String>,
                policy: Option<String>,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::create_sandbox(&self.inner, name, workspace, policy))
            }

            /// Reads a sandbox by `NAME`, `ID` or `WORKSPACE/NAME`.
            fn get_sandbox(&self, py: Python<'_>, sandbox: &str) -> PyResult<Py<PyAny>> {
                $run(py, calls::get_sandbox(&self.inner, args::sandbox_ref(sandbox)))
            }

            /// Lists sandboxes, every page.
            #[pyo3(signature = (*, workspace=None, include_deleted=false))]
            fn list_sandboxes(
                &self,
                py: Python<'_>,
                workspace: Option<String>,
                include_deleted: bool,
            ) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_sandboxes(&self.inner, workspace, include_deleted))
            }

            /// Deletes a sandbox; its pending operations end CANCELLED.
            fn delete_sandbox(&self, py: Python<'_>, sandbox: &str) -> PyResult<Py<PyAny>> {
                $run(py, calls::delete_sandbox(&self.inner, args::sandbox_ref(sandbox)))
            }

            /// Creates a provider; credential values are stored encrypted and never returned.
            #[pyo3(signature = (name, provider_type, *, workspace=None, env=None, credentials=None, expires_at=None))]
            #[allow(clippy::too_many_arguments)] // one per Python keyword argument
            fn create_provider(
                &self,
                py: Python<'_>,
                name: String,
                provider_type: String,
                workspace: Option<String>,
                env: Option<Bound<'_, PyAny>>,
                credentials: Option<Bound<'_, PyAny>>,
                expires_at: Option<Bound<'_, PyAny>>,
            ) -> PyResult<Py<PyAny>> {
                let spec = ProviderSpec {
                    name,
                    workspace,
                    provider_type,
                    env: args::string_map(env.as_ref(), "env")?,
                    credentials: args::string_map(credentials.as_ref(), "credentials")?,
                    expires_at: args::system_time(py, expires_at.as_ref(), "expires_at")?,
                };
                $run(py, calls::create_provider(&self.inner, spec))
            }

            /// Attaches a provider (resolved in the sandbox's workspace) to a sandbox.
            fn attach_provider(
                &self,
                py: Python<'_>,
                sandbox: &str,
                provider: String,
            ) -> PyResult<Py<PyAny>> {
                $run(
                    py,
                    calls::attach_provider(&self.inner, args::sandbox_ref(sandbox), provider),
                )
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
            ))]
            #[allow(clippy::too_many_arguments)] // one per Python keyword argument
            fn update_config(
                &self,
                py: Python<'_>,
                target: Bound<'_, PyAny>,
                policy: Option<String>,
                settings: Option<Bound<'_, PyAny>>,
                delete_settings: Option<Vec<String>>,
                clear_global_policy: bool,
                mode: Option<Bound<'_, PyAny>>,
                idempotency_key: Option<String>,
                wait_timeout: Option<f64>,
                threshold: Option<f64>,
                validate_only: bool,
            ) -> PyResult<Py<PyAny>> {
                let mut update = UpdateConfig::new(args::target(&target)?);
                update.policy = policy;
                update.clear_global_policy = clear_global_policy;
                if let Some(settings) = &settings {
                    update.settings = args::settings(settings)?;
                }
                update.settings.extend(
                    delete_settings
                        .unwrap_or_default()
                        .into_iter()
                        .map(SettingChange::delete),
                );
                update.mode = match &mode {
                    Some(mode) => enums::parse::<UpdateMode>(mode, "mode")?,
                    None => UpdateMode::CommitOnly,
                };
                update.idempotency_key = idempotency_key;
                update.wait_timeout = args::seconds(py, wait_timeout, "wait_timeout")?;
                update.threshold = threshold;
                update.validate_only = validate_only;
                $run(py, calls::update_config(&self.inner, update))
            }

            /// Reads an operation by id.
            fn get_operation(&self, py: Python<'_>, id: String) -> PyResult<Py<PyAny>> {
                $run(py, calls::get_operation(&self.inner, id))
            }

            /// Follows an operation until it is terminal (or the fleet threshold is
            /// met); raises WaitTimeout when the deadline passes first.
            #[pyo3(signature = (id, timeout=None, threshold=None, on_progress=None))]
            fn wait_for_apply(
                &self,
                py: Python<'_>,
                id: String,
                timeout: Option<f64>,
                threshold: Option<f64>,
                on_progress: Option<Py<PyAny>>,
            ) -> PyResult<Py<PyAny>> {
                let wait = calls::Wait {
                    id,
                    known: None,
                    timeout,
                    threshold,
                    progress: on_progress.map($progress),
                    raise_failed: false,
                };
                $run(py, calls::wait(py, &self.inner, wait)?)
            }

            /// Lists the newest operations, optionally of one sandbox and in some states.
            #[pyo3(signature = (*, sandbox=None, states=None, limit=0))]
            fn list_operations(
                &self,
                py: Python<'_>,
                sandbox: Option<&str>,
                states: Option<Vec<Bound<'_, PyAny>>>,
                limit: u32,
            ) -> PyResult<Py<PyAny>> {
                let states = states
                    .unwrap_or_default()
                    .iter()
                    .map(|state| enums::parse::<OperationState>(state, "states"))
                    .collect::<PyResult<Vec<_>>>()?;
                $run(
                    py,
                    calls::list_operations(
                        &self.inner,
                        sandbox.map(args::sandbox_ref),
                        states,
                        limit,
                    ),
                )
            }

            /// Lists the connected supervisor sessions.
            fn list_sessions(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                $run(py, calls::list_sessions(&self.inner))
            }

            /// Explains configuration delivery for one sandbox.
            fn inspect_session(&self, py: Python<'_>, sandbox: &str) -> PyResult<Py<PyAny>> {
                $run(py, calls::inspect_session(&self.inner, args::sandbox_ref(sandbox)))
            }

            /// Describes the gateway.
            fn gateway_info(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                $run(py, calls::gateway_info(&self.inner))
            }
        }
    };
}

client_surface!(Client, runtime::block, Progress::OnCaller);
client_surface!(AsyncClient, runtime::awaitable, Progress::OnLoop);
