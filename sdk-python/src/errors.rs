//! The one mapping from the SDK's errors to the exception classes of
//! `openshell.errors`. The classes live in Python so users can subclass,
//! pickle and document them like any exception; this file only picks one.

use openshell_sdk::{FieldViolation, SdkError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyModule};

use crate::into_view::IntoView;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The exception class for each SDK error; `Other` keeps its gRPC code on
/// the base class so callers can still tell `INTERNAL` from `PERMISSION_DENIED`.
fn class_name(err: &SdkError) -> &'static str {
    match err {
        SdkError::NotFound(_) => "NotFound",
        SdkError::InvalidArgument { .. } => "InvalidArgument",
        SdkError::AlreadyExists(_) => "AlreadyExists",
        SdkError::FailedPrecondition(_) => "FailedPrecondition",
        SdkError::Unauthenticated(_) => "Unauthenticated",
        SdkError::Unavailable(_) => "Unavailable",
        SdkError::DeadlineExceeded(_) => "DeadlineExceeded",
        SdkError::WaitTimedOut { .. } => "WaitTimeout",
        SdkError::Transport(_) => "TransportError",
        SdkError::Other { .. } => "OpenShellError",
    }
}

/// Converts an SDK error; an operation it carries is bound to `client`, so
/// `err.operation.result()` can wait on it again.
pub(crate) fn to_py(py: Python<'_>, err: SdkError, client: &openshell_sdk::Client) -> PyErr {
    let class = class_name(&err);
    let code = err.code();
    let message = err.to_string();
    match err {
        SdkError::WaitTimedOut { operation } => raise(py, class, message, code, |kwargs| {
            kwargs.set_item("operation", (*operation).into_view(py, client)?)
        }),
        other => plain_with(py, class, message, code, other),
    }
}

/// Converts an error raised where no operation can occur (client setup).
pub(crate) fn plain(py: Python<'_>, err: SdkError) -> PyErr {
    let class = class_name(&err);
    let code = err.code();
    let message = err.to_string();
    match err {
        // Only waits time out, and they convert through `to_py`; without a
        // client the operation cannot be bound, so report the code alone.
        SdkError::WaitTimedOut { .. } => raise(py, "OpenShellError", message, code, |_| Ok(())),
        other => plain_with(py, class, message, code, other),
    }
}

fn plain_with(py: Python<'_>, class: &str, message: String, code: &str, err: SdkError) -> PyErr {
    raise(py, class, message, code, |kwargs| {
        if let SdkError::InvalidArgument { violations, .. } = &err {
            kwargs.set_item("violations", violation_list(py, violations)?)?;
        }
        Ok(())
    })
}

/// A bad argument found before anything was sent; `field` names the parameter.
pub(crate) fn invalid_argument(py: Python<'_>, field: &str, message: &str) -> PyErr {
    plain(
        py,
        SdkError::InvalidArgument {
            message: format!("{field}: {message}"),
            violations: vec![FieldViolation {
                field: field.to_owned(),
                message: message.to_owned(),
            }],
        },
    )
}

/// An argument of the wrong type, refused before anything was sent: an
/// `InvalidArgumentType`, which is both `InvalidArgument` and `TypeError`.
pub(crate) fn wrong_type(py: Python<'_>, field: &str, expected: &str, got: &str) -> PyErr {
    let message = format!("expected {expected}, got {got}");
    let violations = [FieldViolation {
        field: field.to_owned(),
        message: message.clone(),
    }];
    raise(
        py,
        "InvalidArgumentType",
        format!("{field}: {message}"),
        "INVALID_ARGUMENT",
        |kwargs| kwargs.set_item("violations", violation_list(py, &violations)?),
    )
}

/// What `Operation.result()` raises for an operation that ended `FAILED`.
pub(crate) fn operation_failed(
    py: Python<'_>,
    operation: openshell_sdk::Operation,
    client: &openshell_sdk::Client,
) -> PyErr {
    let reason = operation
        .error
        .clone()
        .unwrap_or_else(|| operation.outcome.to_string());
    let message = format!("operation {} failed: {reason}", operation.id);
    raise(
        py,
        "OperationFailed",
        message,
        "OPERATION_FAILED",
        |kwargs| kwargs.set_item("operation", operation.into_view(py, client)?),
    )
}

fn violation_list<'py>(
    py: Python<'py>,
    violations: &[FieldViolation],
) -> PyResult<Bound<'py, PyList>> {
    let class = errors_module(py)?.getattr("Violation")?;
    let items = violations
        .iter()
        .map(|v| class.call1((v.field.as_str(), v.message.as_str())))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Instantiates `openshell.errors.<class>(message, code=code, **extra)`. If
/// that itself fails (the package is broken), the failure is what surfaces.
fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    code: &str,
    extra: impl FnOnce(&Bound<'_, PyDict>) -> PyResult<()>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = errors_module(py)?.getattr(class)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("code", code)?;
        extra(&kwargs)?;
        Ok(PyErr::from_value(class.call((message,), Some(&kwargs))?))
    };
    build().unwrap_or_else(|failure| failure)
}

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("openshell.errors")?.unbind())
        })
        .map(|module| module.bind(py))
}
