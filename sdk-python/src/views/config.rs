//! Stored policies and settings: what `get_sandbox_policy`,
//! `list_sandbox_policies`, `get_settings` and `list_setting_definitions` return.

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;

use super::{plain_view, to_dict};
use crate::enums::PyEnum;
use crate::into_view::IntoView;
use crate::repr::{quote, quote_opt};

/// A typed setting value as the Python value: `bool`, `int` or `str`.
fn setting_value(
    py: Python<'_>,
    value: Option<&openshell_sdk::SettingValue>,
) -> PyResult<Py<PyAny>> {
    match value {
        None => Ok(py.None()),
        Some(openshell_sdk::SettingValue::Bool(flag)) => flag.into_py_any(py),
        Some(openshell_sdk::SettingValue::Int(number)) => number.into_py_any(py),
        Some(openshell_sdk::SettingValue::String(text)) => text.into_py_any(py),
    }
}

/// One stored policy revision.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct PolicyRevision {
    inner: openshell_sdk::PolicyRevision,
}

plain_view!(openshell_sdk::PolicyRevision => PolicyRevision);

#[pymethods]
impl PolicyRevision {
    /// Sandbox id; `None` for the global policy.
    #[getter]
    fn sandbox_id(&self) -> Option<&str> {
        self.inner.sandbox_id.as_deref()
    }

    #[getter]
    fn revision(&self) -> u64 {
        self.inner.revision
    }

    /// Lowercase hex SHA-256 of the policy's canonical form.
    #[getter]
    fn policy_hash(&self) -> &str {
        &self.inner.policy_hash
    }

    /// Canonical YAML, accepted unchanged by `update_config`; `None` in history lists.
    #[getter]
    fn policy_yaml(&self) -> Option<&str> {
        self.inner.policy_yaml.as_deref()
    }

    #[getter]
    fn created_at(&self) -> Option<&str> {
        self.inner.created_at.as_deref()
    }

    /// The operation that created the revision.
    #[getter]
    fn operation_id(&self) -> Option<&str> {
        self.inner.operation_id.as_deref()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let p = &self.inner;
        format!(
            "PolicyRevision(sandbox_id={}, revision={}, policy_hash={})",
            quote_opt(p.sandbox_id.as_deref()),
            p.revision,
            quote(&p.policy_hash)
        )
    }
}

/// A sandbox's policy revision together with what is in effect.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SandboxPolicy {
    inner: openshell_sdk::SandboxPolicy,
}

plain_view!(openshell_sdk::SandboxPolicy => SandboxPolicy);

#[pymethods]
impl SandboxPolicy {
    /// The sandbox's own revision, with its YAML.
    #[getter]
    fn policy(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(
            py,
            PolicyRevision {
                inner: self.inner.policy.clone(),
            },
        )?
        .into_any())
    }

    /// `GLOBAL` while a global policy replaces the sandbox's own.
    #[getter]
    fn effective_source<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.effective_source.to_py(py)
    }

    /// The global policy revision in effect, 0 when none.
    #[getter]
    fn global_policy_revision(&self) -> u64 {
        self.inner.global_policy_revision
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "SandboxPolicy(revision={}, effective_source={}, global_policy_revision={})",
            self.inner.policy.revision,
            self.inner.effective_source,
            self.inner.global_policy_revision
        )
    }
}

/// One setting as stored at a scope, or as effective for a sandbox.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Setting {
    inner: openshell_sdk::Setting,
}

plain_view!(openshell_sdk::Setting => Setting);

#[pymethods]
impl Setting {
    #[getter]
    fn key(&self) -> &str {
        &self.inner.key
    }

    /// `bool`, `int` or `str` as the registry types the key; `None` when unset.
    #[getter]
    fn value(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        setting_value(py, self.inner.value.as_ref())
    }

    /// The scope the value comes from (`DEFAULT`: the registry default).
    #[getter]
    fn scope<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.scope.to_py(py)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let shown = self
            .inner
            .value
            .as_ref()
            .map_or_else(|| "None".to_owned(), |v| quote(&v.to_string()));
        format!(
            "Setting(key={}, value={shown}, scope={})",
            quote(&self.inner.key),
            self.inner.scope
        )
    }
}

/// The settings of one scope.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct ScopeSettings {
    inner: openshell_sdk::ScopeSettings,
}

plain_view!(openshell_sdk::ScopeSettings => ScopeSettings);

fn settings(py: Python<'_>, list: &[openshell_sdk::Setting]) -> PyResult<Vec<Py<Setting>>> {
    list.iter()
        .map(|s| Py::new(py, Setting { inner: s.clone() }))
        .collect()
}

#[pymethods]
impl ScopeSettings {
    /// The scope that was read.
    #[getter]
    fn scope<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.scope.to_py(py)
    }

    /// The values stored at that scope.
    #[getter]
    fn values(&self, py: Python<'_>) -> PyResult<Vec<Py<Setting>>> {
        settings(py, &self.inner.values)
    }

    #[getter]
    fn revision(&self) -> u64 {
        self.inner.revision
    }

    /// Sandbox scope only: every registry key with its effective value and source.
    #[getter]
    fn effective(&self, py: Python<'_>) -> PyResult<Vec<Py<Setting>>> {
        settings(py, &self.inner.effective)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "ScopeSettings(scope={}, revision={}, values={})",
            self.inner.scope,
            self.inner.revision,
            self.inner.values.len()
        )
    }
}

/// A key of the settings registry.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SettingDefinition {
    inner: openshell_sdk::SettingDefinition,
}

plain_view!(openshell_sdk::SettingDefinition => SettingDefinition);

#[pymethods]
impl SettingDefinition {
    #[getter]
    fn key(&self) -> &str {
        &self.inner.key
    }

    /// `"bool"`, `"int"`, `"string"` or `"enum"`.
    #[getter]
    fn kind(&self) -> &str {
        &self.inner.kind
    }

    #[getter]
    fn default_value(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        setting_value(py, self.inner.default_value.as_ref())
    }

    /// The allowed values of an enum key.
    #[getter]
    fn allowed_values(&self) -> Vec<String> {
        self.inner.allowed_values.clone()
    }

    #[getter]
    fn description(&self) -> &str {
        &self.inner.description
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "SettingDefinition(key={}, kind={})",
            quote(&self.inner.key),
            quote(&self.inner.kind)
        )
    }
}

/// Calls that answer nothing (`delete_provider`) return `None`.
impl IntoView for () {
    fn into_view(self, py: Python<'_>, _client: &openshell_sdk::Client) -> PyResult<Py<PyAny>> {
        Ok(py.None())
    }
}
