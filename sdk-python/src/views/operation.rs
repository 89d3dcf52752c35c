//! Durable operations, fleet counts and what `update_config` returns.

use pyo3::prelude::*;

use super::{IntoView, client_view, quote, to_dict};
use crate::calls;
use crate::enums::PyEnum;
use crate::progress::Progress;
use crate::runtime;

/// A durable record of one committed write and how far its delivery got.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Operation {
    pub(crate) inner: openshell_sdk::Operation,
    pub(crate) client: openshell_sdk::Client,
}

client_view!(openshell_sdk::Operation => Operation);

impl Operation {
    fn wait_call(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        threshold: Option<f64>,
        progress: Option<Progress>,
    ) -> PyResult<runtime::Call> {
        calls::wait(
            py,
            &self.client,
            calls::Wait {
                id: self.inner.id.clone(),
                known: Some(self.inner.clone()),
                timeout,
                threshold,
                progress,
                raise_failed: true,
            },
        )
    }
}

#[pymethods]
impl Operation {
    #[getter]
    fn id(&self) -> &str {
        &self.inner.id
    }

    #[getter]
    fn target_kind<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.target_kind.to_py(py)
    }

    #[getter]
    fn target(&self) -> &str {
        &self.inner.target
    }

    #[getter]
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.state.to_py(py)
    }

    #[getter]
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.outcome.to_py(py)
    }

    #[getter]
    fn error(&self) -> Option<&str> {
        self.inner.error.as_deref()
    }

    #[getter]
    fn policy_revision(&self) -> u64 {
        self.inner.policy_revision
    }

    #[getter]
    fn settings_revision(&self) -> u64 {
        self.inner.settings_revision
    }

    #[getter]
    fn global_policy_revision(&self) -> u64 {
        self.inner.global_policy_revision
    }

    #[getter]
    fn no_op(&self) -> bool {
        self.inner.no_op
    }

    #[getter]
    fn idempotency_key(&self) -> Option<&str> {
        self.inner.idempotency_key.as_deref()
    }

    #[getter]
    fn created_at(&self) -> Option<&str> {
        self.inner.created_at.as_deref()
    }

    #[getter]
    fn updated_at(&self) -> Option<&str> {
        self.inner.updated_at.as_deref()
    }

    #[getter]
    fn completed_at(&self) -> Option<&str> {
        self.inner.completed_at.as_deref()
    }

    #[getter]
    fn wait_timed_out(&self) -> bool {
        self.inner.wait_timed_out
    }

    #[getter]
    fn fleet(&self) -> Option<FleetProgress> {
        self.inner.fleet.map(FleetProgress::from)
    }

    #[getter]
    fn caller(&self) -> &str {
        &self.inner.caller
    }

    #[getter]
    fn is_terminal(&self) -> bool {
        self.inner.is_terminal()
    }

    fn threshold_met(&self, fraction: f64) -> bool {
        self.inner.threshold_met(fraction)
    }

    /// Blocks (without the GIL) until the operation is terminal.
    #[pyo3(signature = (timeout=None, *, threshold=None, on_progress=None))]
    fn result(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        threshold: Option<f64>,
        on_progress: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let call = self.wait_call(py, timeout, threshold, on_progress.map(Progress::OnCaller))?;
        runtime::block(py, call)
    }

    /// The coroutine form of `result`.
    #[pyo3(signature = (timeout=None, *, threshold=None, on_progress=None))]
    fn result_async(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        threshold: Option<f64>,
        on_progress: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let call = self.wait_call(py, timeout, threshold, on_progress.map(Progress::OnLoop))?;
        runtime::awaitable(py, call)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        repr(&self.inner)
    }
}

fn repr(op: &openshell_sdk::Operation) -> String {
    let mut text = format!("Operation(id={}, state={}", quote(&op.id), op.state);
    if op.outcome != openshell_sdk::ApplyOutcome::Unspecified {
        text.push_str(&format!(", outcome={}", op.outcome));
    }
    if op.policy_revision != 0 {
        text.push_str(&format!(", policy_revision={}", op.policy_revision));
    }
    if op.settings_revision != 0 {
        text.push_str(&format!(", settings_revision={}", op.settings_revision));
    }
    if let Some(fleet) = op.fleet {
        text.push_str(&format!(
            ", fleet={}",
            FleetProgress::from(fleet).__repr__()
        ));
    }
    if op.wait_timed_out {
        text.push_str(", wait_timed_out=True");
    }
    if let Some(error) = &op.error {
        text.push_str(&format!(", error={}", quote(error)));
    }
    text.push(')');
    text
}

/// Per-target counts of a fleet operation (workspace, global or provider writes).
#[pyclass(frozen, get_all, eq, module = "openshell")]
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct FleetProgress {
    targets: u32,
    applied: u32,
    failed: u32,
    pending: u32,
    inactive: u32,
    superseded: u32,
    cancelled: u32,
}

impl From<openshell_sdk::FleetProgress> for FleetProgress {
    fn from(p: openshell_sdk::FleetProgress) -> Self {
        Self {
            targets: p.targets,
            applied: p.applied,
            failed: p.failed,
            pending: p.pending,
            inactive: p.inactive,
            superseded: p.superseded,
            cancelled: p.cancelled,
        }
    }
}

#[pymethods]
impl FleetProgress {
    fn __repr__(&self) -> String {
        format!(
            "FleetProgress(targets={}, applied={}, failed={}, pending={}, inactive={}, superseded={}, cancelled={})",
            self.targets,
            self.applied,
            self.failed,
            self.pending,
            self.inactive,
            self.superseded,
            self.cancelled
        )
    }
}

/// What `update_config` returns.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct UpdateResult {
    inner: openshell_sdk::UpdateResult,
    client: openshell_sdk::Client,
}

client_view!(openshell_sdk::UpdateResult => UpdateResult);

#[pymethods]
impl UpdateResult {
    #[getter]
    fn operation(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.operation.clone().into_view(py, &self.client)
    }

    /// An earlier request with the same idempotency key was found; nothing was written.
    #[getter]
    fn idempotent_replay(&self) -> bool {
        self.inner.idempotent_replay
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "UpdateResult(operation={}, idempotent_replay={})",
            repr(&self.inner.operation),
            if self.inner.idempotent_replay {
                "True"
            } else {
                "False"
            }
        )
    }
}
