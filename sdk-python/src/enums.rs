//! The SDK's enums as the Python enums of `openshell._enums`, converted by
//! their wire name so both sides spell every value the same way.

use std::str::FromStr;

use openshell_sdk::{
    ApplyOutcome, DeliveryMode, OperationState, ParseEnumError, PolicySource, SandboxLifecycle,
    SettingScope, TargetKind, UpdateMode,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::errors;

/// A Rust enum with a Python twin in `openshell._enums`.
pub(crate) trait PyEnum: Copy + FromStr<Err = ParseEnumError> {
    const CLASS: &'static str;
    fn cell() -> &'static PyOnceLock<Py<PyType>>;
    fn wire_name(self) -> &'static str;

    /// The Python member, e.g. `OperationState.APPLIED`.
    fn to_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        Self::cell()
            .import(py, "openshell._enums", Self::CLASS)?
            .call1((self.wire_name(),))
    }
}

macro_rules! py_enum {
    ($($rust:ident),+ $(,)?) => {$(
        impl PyEnum for $rust {
            const CLASS: &'static str = stringify!($rust);

            fn cell() -> &'static PyOnceLock<Py<PyType>> {
                static CELL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
                &CELL
            }

            fn wire_name(self) -> &'static str {
                self.as_str()
            }
        }
    )+};
}

py_enum!(
    OperationState,
    ApplyOutcome,
    UpdateMode,
    TargetKind,
    SandboxLifecycle,
    DeliveryMode,
    PolicySource,
    SettingScope
);

/// Reads a member of the Python enum or its name as a string (loosely:
/// `"commit-only"` works too); `param` names the argument in the error.
pub(crate) fn parse<T: PyEnum>(value: &Bound<'_, PyAny>, param: &str) -> PyResult<T> {
    let text: String = value.extract().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{param} must be a {} or its name as str",
            T::CLASS
        ))
    })?;
    text.parse::<T>()
        .map_err(|err| errors::invalid_argument(value.py(), param, &err.to_string()))
}
