//! Supervisor sessions and the delivery diagnostics of one sandbox.

use pyo3::prelude::*;

use super::{client_view, plain_view, to_dict};
use crate::enums::PyEnum;
use crate::into_view::IntoView;
use crate::repr::{quote, quote_opt};

/// One connected supervisor session.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SessionSummary {
    inner: openshell_sdk::SessionSummary,
}

plain_view!(openshell_sdk::SessionSummary => SessionSummary);

#[pymethods]
impl SessionSummary {
    #[getter]
    fn sandbox_id(&self) -> &str {
        &self.inner.sandbox_id
    }

    #[getter]
    fn sandbox_name(&self) -> &str {
        &self.inner.sandbox_name
    }

    #[getter]
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.mode.to_py(py)
    }

    #[getter]
    fn supervisor_version(&self) -> &str {
        &self.inner.supervisor_version
    }

    #[getter]
    fn protocol_revision(&self) -> u32 {
        self.inner.protocol_revision
    }

    #[getter]
    fn replica_id(&self) -> &str {
        &self.inner.replica_id
    }

    #[getter]
    fn connected_at(&self) -> Option<&str> {
        self.inner.connected_at.as_deref()
    }

    #[getter]
    fn last_heartbeat_at(&self) -> Option<&str> {
        self.inner.last_heartbeat_at.as_deref()
    }

    #[getter]
    fn policy_revision(&self) -> u64 {
        self.inner.policy_revision
    }

    #[getter]
    fn applied_policy_revision(&self) -> u64 {
        self.inner.applied_policy_revision
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let s = &self.inner;
        format!(
            "SessionSummary(sandbox_id={}, sandbox_name={}, mode={}, session_id={})",
            quote(&s.sandbox_id),
            quote(&s.sandbox_name),
            s.mode,
            quote(&s.session_id)
        )
    }
}

/// Delivery state of one component (`sandbox_config` or `provider_environment`).
#[pyclass(frozen, module = "openshell")]
pub(crate) struct ComponentDelivery {
    inner: openshell_sdk::ComponentDelivery,
}

plain_view!(openshell_sdk::ComponentDelivery => ComponentDelivery);

#[pymethods]
impl ComponentDelivery {
    #[getter]
    fn component(&self) -> &str {
        &self.inner.component
    }

    #[getter]
    fn desired(&self) -> &str {
        &self.inner.desired
    }

    #[getter]
    fn sent(&self) -> &str {
        &self.inner.sent
    }

    #[getter]
    fn sent_at(&self) -> Option<&str> {
        self.inner.sent_at.as_deref()
    }

    #[getter]
    fn acked(&self) -> &str {
        &self.inner.acked
    }

    #[getter]
    fn ack_status(&self) -> &str {
        &self.inner.ack_status
    }

    #[getter]
    fn acked_at(&self) -> Option<&str> {
        self.inner.acked_at.as_deref()
    }

    #[getter]
    fn dirty(&self) -> bool {
        self.inner.dirty
    }

    #[getter]
    fn lane(&self) -> Option<&str> {
        self.inner.lane.as_deref()
    }

    #[getter]
    fn held(&self) -> bool {
        self.inner.held
    }

    #[getter]
    fn last_failure(&self) -> Option<&str> {
        self.inner.last_failure.as_deref()
    }

    #[getter]
    fn backoff(&self) -> Option<&str> {
        self.inner.backoff.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
}

/// One recent delivery event.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct DeliveryEvent {
    inner: openshell_sdk::DeliveryEvent,
}

plain_view!(openshell_sdk::DeliveryEvent => DeliveryEvent);

#[pymethods]
impl DeliveryEvent {
    #[getter]
    fn at(&self) -> Option<&str> {
        self.inner.at.as_deref()
    }

    #[getter]
    fn text(&self) -> &str {
        &self.inner.text
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "DeliveryEvent(at={}, text={})",
            quote_opt(self.inner.at.as_deref()),
            quote(&self.inner.text)
        )
    }
}

/// How configuration reaches one sandbox, and what is wrong with it if anything.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SessionInspection {
    inner: openshell_sdk::SessionInspection,
    client: openshell_sdk::Client,
}

client_view!(openshell_sdk::SessionInspection => SessionInspection);

#[pymethods]
impl SessionInspection {
    #[getter]
    fn sandbox(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.sandbox.clone().into_view(py, &self.client)
    }

    #[getter]
    fn gateway_mode(&self) -> &str {
        &self.inner.gateway_mode
    }

    #[getter]
    fn connected(&self) -> bool {
        self.inner.connected
    }

    #[getter]
    fn negotiated_mode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.negotiated_mode.to_py(py)
    }

    #[getter]
    fn negotiated_reason(&self) -> &str {
        &self.inner.negotiated_reason
    }

    #[getter]
    fn supervisor_version(&self) -> &str {
        &self.inner.supervisor_version
    }

    #[getter]
    fn protocol_revision(&self) -> u32 {
        self.inner.protocol_revision
    }

    #[getter]
    fn supports_config_snapshots(&self) -> bool {
        self.inner.supports_config_snapshots
    }

    #[getter]
    fn supports_config_apply(&self) -> bool {
        self.inner.supports_config_apply
    }

    #[getter]
    fn owner_replica(&self) -> Option<&str> {
        self.inner.owner_replica.as_deref()
    }

    #[getter]
    fn session_id(&self) -> Option<&str> {
        self.inner.session_id.as_deref()
    }

    #[getter]
    fn connected_at(&self) -> Option<&str> {
        self.inner.connected_at.as_deref()
    }

    #[getter]
    fn last_heartbeat_at(&self) -> Option<&str> {
        self.inner.last_heartbeat_at.as_deref()
    }

    #[getter]
    fn components(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.components.clone().into_view(py, &self.client)
    }

    #[getter]
    fn pending_operations(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner
            .pending_operations
            .clone()
            .into_view(py, &self.client)
    }

    #[getter]
    fn recent_events(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.recent_events.clone().into_view(py, &self.client)
    }

    /// Plain-language hints for each abnormal state found.
    #[getter]
    fn hints(&self) -> Vec<String> {
        self.inner.hints.clone()
    }

    #[getter]
    fn last_report(&self) -> Option<&str> {
        self.inner.last_report.as_deref()
    }

    #[getter]
    fn last_report_at(&self) -> Option<&str> {
        self.inner.last_report_at.as_deref()
    }

    /// Whether the connected supervisor started its workload, and the remote middleware it
    /// needs; `None` when it reported nothing.
    #[getter]
    fn runtime_readiness(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner
            .runtime_readiness
            .clone()
            .into_view(py, &self.client)
    }

    /// When each credential of the sandbox's providers expires, soonest first.
    #[getter]
    fn credential_expiry(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let list = pyo3::types::PyList::empty(py);
        for c in &self.inner.credential_expiry {
            list.append(Py::new(py, CredentialExpiry { inner: c.clone() })?)?;
        }
        Ok(list.into_any().unbind())
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
}

/// A supervisor's word on starting its workload: it connects to every remote middleware the
/// policy requires first.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct RuntimeReadiness {
    inner: openshell_sdk::RuntimeReadiness,
}

plain_view!(openshell_sdk::RuntimeReadiness => RuntimeReadiness);

#[pymethods]
impl RuntimeReadiness {
    /// False while an unreachable `fail_closed` middleware holds the workload back.
    #[getter]
    fn workload_started(&self) -> bool {
        self.inner.workload_started
    }

    #[getter]
    fn middlewares(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let list = pyo3::types::PyList::empty(py);
        for m in &self.inner.middlewares {
            list.append(Py::new(py, MiddlewareReadiness { inner: m.clone() })?)?;
        }
        Ok(list.into_any().unbind())
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "RuntimeReadiness(workload_started={}, middlewares={})",
            if self.inner.workload_started {
                "True"
            } else {
                "False"
            },
            self.inner.middlewares.len()
        )
    }
}

/// One credential of an attached provider and when it stops being valid (its name, never
/// its value).
#[pyclass(frozen, module = "openshell")]
pub(crate) struct CredentialExpiry {
    inner: openshell_sdk::CredentialExpiry,
}

#[pymethods]
impl CredentialExpiry {
    /// The environment variable's name.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// The provider it comes from.
    #[getter]
    fn provider(&self) -> &str {
        &self.inner.provider
    }

    /// When it expires (RFC 3339).
    #[getter]
    fn expires_at(&self) -> Option<&str> {
        self.inner.expires_at.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "CredentialExpiry(name={}, provider={}, expires_at={})",
            quote(&self.inner.name),
            quote(&self.inner.provider),
            quote_opt(self.inner.expires_at.as_deref())
        )
    }
}

/// One remote middleware a supervisor's policy requires.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct MiddlewareReadiness {
    inner: openshell_sdk::MiddlewareReadiness,
}

#[pymethods]
impl MiddlewareReadiness {
    /// The policy entry's key.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// The implementation it names.
    #[getter]
    fn implementation(&self) -> &str {
        &self.inner.implementation
    }

    /// `HOST:PORT`; `None` when the implementation is not registered on the supervisor.
    #[getter]
    fn endpoint(&self) -> Option<&str> {
        self.inner.endpoint.as_deref()
    }

    #[getter]
    fn reachable(&self) -> bool {
        self.inner.reachable
    }

    /// `on_error: fail_closed`: while unreachable, the workload does not start.
    #[getter]
    fn fail_closed(&self) -> bool {
        self.inner.fail_closed
    }

    /// Why it is unreachable.
    #[getter]
    fn error(&self) -> Option<&str> {
        self.inner.error.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "MiddlewareReadiness(name={}, reachable={})",
            quote(&self.inner.name),
            if self.inner.reachable {
                "True"
            } else {
                "False"
            }
        )
    }
}
