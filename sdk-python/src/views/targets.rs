//! An operation's targets: each sandbox, where the change got there and why.

use pyo3::prelude::*;

use super::operation::FleetProgress;
use super::{plain_view, to_dict};
use crate::enums::PyEnum;
use crate::repr::quote;

/// One sandbox an operation targets.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct OperationTarget {
    inner: openshell_sdk::OperationTarget,
}

plain_view!(openshell_sdk::OperationTarget => OperationTarget);

#[pymethods]
impl OperationTarget {
    #[getter]
    fn sandbox_id(&self) -> &str {
        &self.inner.sandbox_id
    }

    /// None when the sandbox record is gone.
    #[getter]
    fn sandbox_name(&self) -> Option<&str> {
        self.inner.sandbox_name.as_deref()
    }

    #[getter]
    fn workspace(&self) -> Option<&str> {
        self.inner.workspace.as_deref()
    }

    #[getter]
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.state.to_py(py)
    }

    #[getter]
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.outcome.to_py(py)
    }

    /// The error of a terminal target, or "no session" for a live one no
    /// supervisor is connected for.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.inner.reason.as_deref()
    }

    #[getter]
    fn updated_at(&self) -> Option<&str> {
        self.inner.updated_at.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let t = &self.inner;
        let mut text = format!(
            "OperationTarget(sandbox={}, state={}",
            quote(&t.display_name()),
            t.state
        );
        if let Some(reason) = &t.reason {
            text.push_str(&format!(", reason={}", quote(reason)));
        }
        text.push(')');
        text
    }
}

/// One page of an operation's targets, in sandbox id order.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct OperationTargets {
    inner: openshell_sdk::OperationTargets,
}

plain_view!(openshell_sdk::OperationTargets => OperationTargets);

#[pymethods]
impl OperationTargets {
    #[getter]
    fn targets(&self, py: Python<'_>) -> PyResult<Vec<Py<OperationTarget>>> {
        self.inner
            .targets
            .iter()
            .map(|t| Py::new(py, OperationTarget { inner: t.clone() }))
            .collect()
    }

    /// Pass it as `page_token` for the next page; None after the last one.
    #[getter]
    fn next_page_token(&self) -> Option<&str> {
        self.inner.next_page_token.as_deref()
    }

    /// Counts over every target of the operation, whatever the filter and page.
    #[getter]
    fn counts(&self) -> FleetProgress {
        FleetProgress::from(self.inner.counts)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "OperationTargets(targets={}, next_page_token={})",
            self.inner.targets.len(),
            self.inner
                .next_page_token
                .as_deref()
                .map_or_else(|| "None".to_owned(), quote)
        )
    }
}
