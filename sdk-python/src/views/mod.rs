//! Read-only Python views of the SDK's result types.
//!
//! Each view keeps the SDK value it shows and exposes its fields as
//! properties, so names, enum spellings and `to_dict()` (the serde shape the
//! CLI prints with `-o json`) come from the SDK and cannot drift. Views that
//! contain operations also keep the client, so `operation.result()` can wait.

mod config;
mod gateway;
mod logs;
mod operation;
mod provider;
mod sandbox;
mod session;
mod targets;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// Implements `IntoView` for views that hold only the SDK value.
macro_rules! plain_view {
    ($($sdk:ty => $view:ident),+ $(,)?) => {$(
        impl $crate::into_view::IntoView for $sdk {
            fn into_view(
                self,
                py: ::pyo3::Python<'_>,
                _client: &::openshell_sdk::Client,
            ) -> ::pyo3::PyResult<::pyo3::Py<::pyo3::PyAny>> {
                Ok(::pyo3::Py::new(py, $view { inner: self })?.into_any())
            }
        }
    )+};
}

/// Implements `IntoView` for views that also keep the client.
macro_rules! client_view {
    ($($sdk:ty => $view:ident),+ $(,)?) => {$(
        impl $crate::into_view::IntoView for $sdk {
            fn into_view(
                self,
                py: ::pyo3::Python<'_>,
                client: &::openshell_sdk::Client,
            ) -> ::pyo3::PyResult<::pyo3::Py<::pyo3::PyAny>> {
                Ok(::pyo3::Py::new(py, $view { inner: self, client: client.clone() })?.into_any())
            }
        }
    )+};
}

pub(crate) use logs::SandboxLogWatch;
pub(crate) use {client_view, plain_view};

static JSON_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The serde shape of `value` as plain Python dicts and lists.
pub(crate) fn to_dict(py: Python<'_>, value: &impl serde::Serialize) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|err| PyRuntimeError::new_err(format!("cannot serialize: {err}")))?;
    Ok(JSON_LOADS
        .import(py, "json", "loads")?
        .call1((text,))?
        .unbind())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<operation::Operation>()?;
    m.add_class::<operation::FleetProgress>()?;
    m.add_class::<operation::UpdateResult>()?;
    m.add_class::<operation::DryRunResult>()?;
    m.add_class::<operation::PolicyDiff>()?;
    m.add_class::<operation::PolicyChange>()?;
    m.add_class::<operation::SettingDiff>()?;
    m.add_class::<targets::OperationTarget>()?;
    m.add_class::<targets::OperationTargets>()?;
    m.add_class::<sandbox::Sandbox>()?;
    m.add_class::<sandbox::CreatedSandbox>()?;
    m.add_class::<sandbox::DeletedSandbox>()?;
    m.add_class::<sandbox::Attachment>()?;
    m.add_class::<provider::Provider>()?;
    m.add_class::<provider::ProviderWrite>()?;
    m.add_class::<session::SessionSummary>()?;
    m.add_class::<session::SessionInspection>()?;
    m.add_class::<session::ComponentDelivery>()?;
    m.add_class::<session::DeliveryEvent>()?;
    m.add_class::<session::RuntimeReadiness>()?;
    m.add_class::<session::MiddlewareReadiness>()?;
    m.add_class::<session::CredentialExpiry>()?;
    m.add_class::<gateway::GatewayInfo>()?;
    m.add_class::<logs::SandboxLogLine>()?;
    m.add_class::<logs::SandboxLogs>()?;
    m.add_class::<logs::SandboxLogEvent>()?;
    m.add_class::<logs::SandboxLogWatch>()?;
    m.add_class::<config::PolicyRevision>()?;
    m.add_class::<config::SandboxPolicy>()?;
    m.add_class::<config::Setting>()?;
    m.add_class::<config::ScopeSettings>()?;
    m.add_class::<config::SettingDefinition>()?;
    Ok(())
}
