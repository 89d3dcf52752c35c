//! `Target`: where an `update_config` change applies.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use openshell_sdk::TargetKind;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::args::{self, FromArg, arg};
use crate::enums::PyEnum;
use crate::repr::quote;

/// One sandbox, every sandbox of a workspace, or everything.
#[pyclass(frozen, eq, module = "openshell")]
#[derive(Clone, PartialEq)]
pub(crate) struct Target {
    pub(crate) inner: openshell_sdk::Target,
}

#[pymethods]
impl Target {
    /// One sandbox by `NAME`, `ID` or `WORKSPACE/NAME`; `workspace` resolves a bare name.
    #[staticmethod]
    #[pyo3(signature = (sandbox, workspace=None))]
    fn sandbox(
        #[pyo3(from_py_with = arg::sandbox)] sandbox: String,
        #[pyo3(from_py_with = arg::workspace)] workspace: Option<String>,
    ) -> Self {
        let reference = match workspace {
            Some(ws) => openshell_sdk::SandboxRef::in_workspace(&sandbox, ws),
            None => openshell_sdk::SandboxRef::from(sandbox.as_str()),
        };
        Self {
            inner: openshell_sdk::Target::Sandbox(reference),
        }
    }

    /// Every sandbox of a workspace (workspace-scope settings).
    #[staticmethod]
    fn workspace(#[pyo3(from_py_with = arg::name)] name: String) -> Self {
        Self {
            inner: openshell_sdk::Target::Workspace(name),
        }
    }

    /// Everything: global settings and the global policy. The trailing
    /// underscore keeps clear of the `global` keyword.
    #[staticmethod]
    #[pyo3(name = "global_")]
    fn global() -> Self {
        Self {
            inner: openshell_sdk::Target::Global,
        }
    }

    #[getter]
    fn kind<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let kind = match self.inner {
            openshell_sdk::Target::Sandbox(_) => TargetKind::Sandbox,
            openshell_sdk::Target::Workspace(_) => TargetKind::Workspace,
            openshell_sdk::Target::Global => TargetKind::Global,
        };
        kind.to_py(py)
    }

    /// The sandbox reference or workspace name; `None` for the global target.
    #[getter]
    fn name(&self) -> Option<String> {
        match &self.inner {
            openshell_sdk::Target::Sandbox(sandbox) => Some(sandbox.to_string()),
            openshell_sdk::Target::Workspace(name) => Some(name.clone()),
            openshell_sdk::Target::Global => None,
        }
    }

    fn __hash__(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.__repr__().hash(&mut hasher);
        hasher.finish()
    }

    fn __repr__(&self) -> String {
        match &self.inner {
            openshell_sdk::Target::Sandbox(sandbox) => {
                format!("Target.sandbox({})", quote(&sandbox.to_string()))
            }
            openshell_sdk::Target::Workspace(name) => format!("Target.workspace({})", quote(name)),
            openshell_sdk::Target::Global => "Target.global_()".to_owned(),
        }
    }
}

/// A `Target`, or a string naming a sandbox.
impl FromArg for openshell_sdk::Target {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        if let Ok(target) = value.cast::<Target>() {
            return Ok(target.get().inner.clone());
        }
        match value.cast::<PyString>() {
            Ok(text) => Ok(Self::Sandbox(openshell_sdk::SandboxRef::from(
                text.to_cow()?.as_ref(),
            ))),
            Err(_) => Err(args::wrong_type(
                value,
                field,
                "a str (NAME, ID or WORKSPACE/NAME) or a Target",
            )),
        }
    }
}
