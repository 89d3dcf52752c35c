//! Providers as the operator API shows them: credential names, never values.

use std::collections::BTreeMap;

use pyo3::prelude::*;

use super::{client_view, plain_view, to_dict};
use crate::into_view::IntoView;
use crate::repr::quote;

/// A provider record.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Provider {
    inner: openshell_sdk::Provider,
}

plain_view!(openshell_sdk::Provider => Provider);

#[pymethods]
impl Provider {
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
    fn provider_type(&self) -> &str {
        &self.inner.provider_type
    }

    #[getter]
    fn env(&self) -> BTreeMap<String, String> {
        self.inner.env.clone()
    }

    #[getter]
    fn credential_names(&self) -> Vec<String> {
        self.inner.credential_names.clone()
    }

    #[getter]
    fn revision(&self) -> u64 {
        self.inner.revision
    }

    #[getter]
    fn expires_at(&self) -> Option<&str> {
        self.inner.expires_at.as_deref()
    }

    #[getter]
    fn attached_sandbox_ids(&self) -> Vec<String> {
        self.inner.attached_sandbox_ids.clone()
    }

    /// When it was created (RFC 3339).
    #[getter]
    fn created_at(&self) -> Option<&str> {
        self.inner.created_at.as_deref()
    }

    /// When it was last written: an update or a credential refresh (RFC 3339).
    #[getter]
    fn updated_at(&self) -> Option<&str> {
        self.inner.updated_at.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let p = &self.inner;
        format!(
            "Provider(id={}, name={}, workspace={}, provider_type={}, credential_names=[{}])",
            quote(&p.id),
            quote(&p.name),
            quote(&p.workspace),
            quote(&p.provider_type),
            p.credential_names
                .iter()
                .map(|name| quote(name))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Result of creating a provider.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct ProviderWrite {
    inner: openshell_sdk::ProviderWrite,
    client: openshell_sdk::Client,
}

client_view!(openshell_sdk::ProviderWrite => ProviderWrite);

#[pymethods]
impl ProviderWrite {
    #[getter]
    fn provider(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.provider.clone().into_view(py, &self.client)
    }

    /// Fleet operation over the attaching sandboxes, when any attach it.
    #[getter]
    fn operation(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.operation.clone().into_view(py, &self.client)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
}
