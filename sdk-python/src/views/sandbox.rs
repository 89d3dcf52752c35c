//! Sandbox records and what creating, deleting and attaching return.

use pyo3::prelude::*;

use super::{client_view, plain_view, to_dict};
use crate::enums::PyEnum;
use crate::into_view::IntoView;
use crate::repr::quote;

/// A sandbox record.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Sandbox {
    inner: openshell_sdk::Sandbox,
}

plain_view!(openshell_sdk::Sandbox => Sandbox);

#[pymethods]
impl Sandbox {
    #[getter]
    fn id(&self) -> &str {
        &self.inner.id
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    #[getter]
    fn workspace(&self) -> &str {
        &self.inner.workspace
    }

    #[getter]
    fn lifecycle<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.lifecycle.to_py(py)
    }

    #[getter]
    fn policy_revision(&self) -> u64 {
        self.inner.policy_revision
    }

    #[getter]
    fn settings_revision(&self) -> u64 {
        self.inner.settings_revision
    }

    #[getter]
    fn attachment_epoch(&self) -> u64 {
        self.inner.attachment_epoch
    }

    #[getter]
    fn providers(&self) -> Vec<String> {
        self.inner.providers.clone()
    }

    #[getter]
    fn created_at(&self) -> Option<&str> {
        self.inner.created_at.as_deref()
    }

    #[getter]
    fn updated_at(&self) -> Option<&str> {
        self.inner.updated_at.as_deref()
    }

    #[getter]
    fn applied_policy_revision(&self) -> u64 {
        self.inner.applied_policy_revision
    }

    #[getter]
    fn applied_policy_hash(&self) -> Option<&str> {
        self.inner.applied_policy_hash.as_deref()
    }

    /// Set while the sandbox is quarantined (a failed apply under `fail_closed`: all
    /// network access denied until a configuration applies): the reason reported.
    #[getter]
    fn quarantine_reason(&self) -> Option<&str> {
        self.inner.quarantine_reason.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let sb = &self.inner;
        format!(
            "Sandbox(id={}, name={}, workspace={}, lifecycle={}, policy_revision={})",
            quote(&sb.id),
            quote(&sb.name),
            quote(&sb.workspace),
            sb.lifecycle,
            sb.policy_revision
        )
    }
}

/// What `create_sandbox` returns.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct CreatedSandbox {
    inner: openshell_sdk::CreatedSandbox,
    client: openshell_sdk::Client,
}

client_view!(openshell_sdk::CreatedSandbox => CreatedSandbox);

#[pymethods]
impl CreatedSandbox {
    #[getter]
    fn sandbox(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.sandbox.clone().into_view(py, &self.client)
    }

    /// The only copy of the supervisor credential; hand it to the sandbox's supervisor.
    #[getter]
    fn supervisor_credential(&self) -> &str {
        self.inner.supervisor_credential.expose()
    }

    #[getter]
    fn operation(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.operation.clone().into_view(py, &self.client)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    /// Never shows the credential, so results can be logged.
    fn __repr__(&self) -> String {
        format!(
            "CreatedSandbox(id={}, name={}, supervisor_credential=***)",
            quote(&self.inner.sandbox.id),
            quote(&self.inner.sandbox.name)
        )
    }
}

/// What `delete_sandbox` returns.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct DeletedSandbox {
    inner: openshell_sdk::DeletedSandbox,
}

plain_view!(openshell_sdk::DeletedSandbox => DeletedSandbox);

#[pymethods]
impl DeletedSandbox {
    #[getter]
    fn sandbox(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(
            py,
            Sandbox {
                inner: self.inner.sandbox.clone(),
            },
        )?
        .into_any())
    }

    /// Pending operations that ended `CANCELLED`.
    #[getter]
    fn cancelled_operations(&self) -> u32 {
        self.inner.cancelled_operations
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
}

/// What attaching a provider returns.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Attachment {
    inner: openshell_sdk::Attachment,
    client: openshell_sdk::Client,
}

client_view!(openshell_sdk::Attachment => Attachment);

#[pymethods]
impl Attachment {
    #[getter]
    fn sandbox(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.sandbox.clone().into_view(py, &self.client)
    }

    /// Tracks delivery of the new provider environment.
    #[getter]
    fn operation(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.operation.clone().into_view(py, &self.client)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
}
