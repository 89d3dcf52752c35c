//! The conversion of SDK values into their Python views. Kept out of `views/`, whose
//! operation views wait through `calls`, so that `errors`, `progress` and `calls` can hand
//! out views without depending back on them.

use pyo3::prelude::*;
use pyo3::types::PyList;

/// Conversion of an SDK value into its Python view.
pub(crate) trait IntoView {
    fn into_view(self, py: Python<'_>, client: &openshell_sdk::Client) -> PyResult<Py<PyAny>>;
}

impl<T: IntoView> IntoView for Vec<T> {
    fn into_view(self, py: Python<'_>, client: &openshell_sdk::Client) -> PyResult<Py<PyAny>> {
        let items = self
            .into_iter()
            .map(|item| item.into_view(py, client))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, items)?.into_any().unbind())
    }
}

impl<T: IntoView> IntoView for Option<T> {
    fn into_view(self, py: Python<'_>, client: &openshell_sdk::Client) -> PyResult<Py<PyAny>> {
        match self {
            Some(value) => value.into_view(py, client),
            None => Ok(py.None()),
        }
    }
}
