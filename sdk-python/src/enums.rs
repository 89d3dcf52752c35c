//! The SDK's enums as the Python enums of `openshell._enums`, converted by
//! their wire name so both sides spell every value the same way.
//!
//! `_enums.py` builds those classes from `CONTRACT_ENUMS` and
//! `TERMINAL_OPERATION_STATES`, registered here from the SDK's own lists and
//! terminal rule, so Python keeps no copy of either.

use std::str::FromStr;

use openshell_sdk::{
    ApplyOutcome, CONTRACT_ENUMS, DeliveryMode, OperationState, ParseEnumError, PolicySource,
    SandboxLifecycle, SettingScope, TargetKind, UpdateMode,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyFrozenSet, PyString, PyTuple, PyType};

use crate::args::{self, FromArg};
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

        impl FromArg for $rust {
            fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
                parse(value, field)
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
/// `"commit-only"` works too); `field` names the argument in the error.
fn parse<T: PyEnum>(value: &Bound<'_, PyAny>, field: &str) -> PyResult<T> {
    let Ok(text) = value.cast::<PyString>() else {
        let expected = format!("a {} member or its name as str", T::CLASS);
        return Err(args::wrong_type(value, field, &expected));
    };
    text.to_cow()?
        .parse::<T>()
        .map_err(|err| errors::invalid_argument(value.py(), field, &err.to_string()))
}

/// Adds `CONTRACT_ENUMS` (each enum's type name to its members' wire names,
/// in wire order) and `TERMINAL_OPERATION_STATES` (wire names) to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let enums = PyDict::new(py);
    for (name, members) in CONTRACT_ENUMS {
        enums.set_item(name, PyTuple::new(py, members.iter())?)?;
    }
    m.add("CONTRACT_ENUMS", enums)?;
    let terminal = OperationState::terminal().map(OperationState::as_str);
    m.add("TERMINAL_OPERATION_STATES", PyFrozenSet::new(py, terminal)?)?;
    Ok(())
}
