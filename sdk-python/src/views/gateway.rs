//! Description of the gateway a client talks to.

use pyo3::prelude::*;

use super::{plain_view, to_dict};
use crate::repr::quote;

#[pyclass(frozen, module = "openshell")]
pub(crate) struct GatewayInfo {
    inner: openshell_sdk::GatewayInfo,
}

plain_view!(openshell_sdk::GatewayInfo => GatewayInfo);

#[pymethods]
impl GatewayInfo {
    #[getter]
    fn version(&self) -> &str {
        &self.inner.version
    }

    /// `"poll"` or `"push"`.
    #[getter]
    fn config_delivery_mode(&self) -> &str {
        &self.inner.config_delivery_mode
    }

    /// `"sqlite"` or `"postgres"`.
    #[getter]
    fn store_backend(&self) -> &str {
        &self.inner.store_backend
    }

    #[getter]
    fn replica_id(&self) -> &str {
        &self.inner.replica_id
    }

    #[getter]
    fn protocol_revision(&self) -> u32 {
        self.inner.protocol_revision
    }

    #[getter]
    fn replicas(&self) -> Vec<String> {
        self.inner.replicas.clone()
    }

    #[getter]
    fn sessions(&self) -> u32 {
        self.inner.sessions
    }

    #[getter]
    fn started_at(&self) -> Option<&str> {
        self.inner.started_at.as_deref()
    }

    /// The gateway's clock when it answered, to the second, if it said.
    #[getter]
    fn answered_at(&self) -> Option<&str> {
        self.inner.answered_at.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let g = &self.inner;
        format!(
            "GatewayInfo(version={}, config_delivery_mode={}, store_backend={}, sessions={})",
            quote(&g.version),
            quote(&g.config_delivery_mode),
            quote(&g.store_backend),
            g.sessions
        )
    }
}
