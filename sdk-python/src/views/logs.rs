//! Sandbox log lines, and the follow of a sandbox's logs as a Python iterator
//! (`for event in watch`) and async iterator (`async for event in watch`).

use std::collections::BTreeMap;
use std::sync::Arc;

use openshell_sdk::{SandboxLogEvent as SdkEvent, SdkError};
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;
use tokio::sync::{Mutex, mpsc};
use tokio::task::AbortHandle;

use super::{plain_view, to_dict};
use crate::errors;
use crate::into_view::IntoView;
use crate::repr::quote;
use crate::runtime::{self, Call};

/// One log line of a sandbox; provider values arrive masked (`***`).
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SandboxLogLine {
    inner: openshell_sdk::SandboxLogLine,
}

/// Recent log lines of a sandbox, and how many were lost on the way.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SandboxLogs {
    inner: openshell_sdk::SandboxLogs,
}

/// One item of a followed sandbox's logs: a `line`, or `dropped` lines.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SandboxLogEvent {
    inner: SdkEvent,
}

plain_view!(
    openshell_sdk::SandboxLogLine => SandboxLogLine,
    openshell_sdk::SandboxLogs => SandboxLogs,
    SdkEvent => SandboxLogEvent,
);

#[pymethods]
impl SandboxLogLine {
    /// RFC 3339 with milliseconds.
    #[getter]
    fn time(&self) -> Option<&str> {
        self.inner.time.as_deref()
    }
    #[getter]
    fn timestamp_ms(&self) -> i64 {
        self.inner.timestamp_ms
    }
    #[getter]
    fn level(&self) -> &str {
        &self.inner.level
    }
    /// `"supervisor"` or `"workload"`.
    #[getter]
    fn source(&self) -> &str {
        &self.inner.source
    }
    /// The supervisor module, or the workload's `stdout` / `stderr`.
    #[getter]
    fn target(&self) -> &str {
        &self.inner.target
    }
    #[getter]
    fn message(&self) -> &str {
        &self.inner.message
    }
    #[getter]
    fn fields(&self) -> BTreeMap<String, String> {
        self.inner.fields.clone()
    }
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
    fn __repr__(&self) -> String {
        format!(
            "SandboxLogLine(level={}, source={}, message={})",
            quote(&self.inner.level),
            quote(&self.inner.source),
            quote(&self.inner.message)
        )
    }
}

#[pymethods]
impl SandboxLogs {
    /// Oldest first.
    #[getter]
    fn lines(&self, py: Python<'_>) -> PyResult<Vec<Py<SandboxLogLine>>> {
        self.inner
            .lines
            .iter()
            .map(|l| Py::new(py, SandboxLogLine { inner: l.clone() }))
            .collect()
    }
    /// Lines the gateway replica holds for the sandbox, before filtering.
    #[getter]
    fn buffer_total(&self) -> u32 {
        self.inner.buffer_total
    }
    /// Lines the supervisor dropped because its buffer was full.
    #[getter]
    fn supervisor_dropped_lines(&self) -> u64 {
        self.inner.supervisor_dropped_lines
    }
    /// Lines the gateway replica dropped from its per-sandbox bound.
    #[getter]
    fn gateway_dropped_lines(&self) -> u64 {
        self.inner.gateway_dropped_lines
    }
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
    fn __repr__(&self) -> String {
        format!(
            "SandboxLogs(lines={}, supervisor_dropped_lines={}, gateway_dropped_lines={})",
            self.inner.lines.len(),
            self.inner.supervisor_dropped_lines,
            self.inner.gateway_dropped_lines
        )
    }
}

#[pymethods]
impl SandboxLogEvent {
    /// `"line"` or `"dropped"`.
    #[getter]
    fn kind(&self) -> &str {
        match self.inner {
            SdkEvent::Line(_) => "line",
            SdkEvent::Dropped { .. } => "dropped",
        }
    }
    #[getter]
    fn line(&self, py: Python<'_>) -> PyResult<Option<Py<SandboxLogLine>>> {
        match &self.inner {
            SdkEvent::Line(l) => Ok(Some(Py::new(py, SandboxLogLine { inner: l.clone() })?)),
            SdkEvent::Dropped { .. } => Ok(None),
        }
    }
    /// For `"dropped"`: how many lines were lost.
    #[getter]
    fn dropped_lines(&self) -> u64 {
        match &self.inner {
            SdkEvent::Dropped { dropped_lines, .. } => *dropped_lines,
            SdkEvent::Line(_) => 0,
        }
    }
    #[getter]
    fn message(&self) -> Option<&str> {
        match &self.inner {
            SdkEvent::Dropped { message, .. } => Some(message),
            SdkEvent::Line(_) => None,
        }
    }
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }
    fn __repr__(&self) -> String {
        match &self.inner {
            SdkEvent::Line(l) => format!(
                "SandboxLogEvent(kind='line', message={})",
                quote(&l.message)
            ),
            SdkEvent::Dropped { dropped_lines, .. } => {
                format!("SandboxLogEvent(kind='dropped', dropped_lines={dropped_lines})")
            }
        }
    }
}

type Events = Arc<Mutex<mpsc::Receiver<Result<SdkEvent, SdkError>>>>;

/// A followed sandbox's logs: the recent lines, then new ones as they arrive.
/// Iterate it with `for` (blocking) or `async for`; it does not end by itself
/// while the sandbox lives: `break` and `cancel()`, or leave the `with` block.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SandboxLogWatch {
    events: Events,
    task: AbortHandle,
    client: openshell_sdk::Client,
}

impl SandboxLogWatch {
    pub(crate) fn start(
        client: openshell_sdk::Client,
        sandbox: openshell_sdk::SandboxRef,
        query: openshell_sdk::LogQuery,
    ) -> Self {
        // Bounded: a reader that stops reading holds the gateway's stream back, not memory.
        let (tx, rx) = mpsc::channel(256);
        let follower = client.clone();
        let task = runtime::runtime()
            .spawn(async move {
                let mut stream = match follower.watch_sandbox_logs(&sandbox, &query).await {
                    Ok(stream) => stream,
                    Err(err) => {
                        let _ = tx.send(Err(err)).await;
                        return;
                    }
                };
                while let Some(event) = stream.next_event().await {
                    let failed = event.is_err();
                    if tx.send(event).await.is_err() || failed {
                        return;
                    }
                }
            })
            .abort_handle();
        Self {
            events: Arc::new(Mutex::new(rx)),
            task,
            client,
        }
    }

    /// The next event as a view; `end` is raised once the follow ended.
    fn next_call(&self, end: fn() -> PyErr) -> Call {
        let events = self.events.clone();
        let client = self.client.clone();
        Box::pin(async move {
            let next = events.lock().await.recv().await;
            Python::attach(|py| match next {
                None => Err(end()),
                Some(Ok(event)) => event.into_view(py, &client),
                Some(Err(err)) => Err(errors::to_py(py, err, &client)),
            })
        })
    }
}

#[pymethods]
impl SandboxLogWatch {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        runtime::block(py, self.next_call(|| PyStopIteration::new_err(())))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        runtime::awaitable(py, self.next_call(|| PyStopAsyncIteration::new_err(())))
    }

    /// Stops following: closes the stream to the gateway; iteration ends.
    fn cancel(&self) {
        self.task.abort();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.task.abort();
    }
}

impl Drop for SandboxLogWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
