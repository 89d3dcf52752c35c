//! Where SDK futures run: one Tokio runtime shared by both clients (the one
//! pyo3-async-runtimes drives asyncio futures with), and the two ways Python
//! waits for a future: blocking with the GIL released, or as a coroutine.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;

/// One SDK call, ending in the Python object it returns.
pub(crate) type Call = Pin<Box<dyn Future<Output = PyResult<Py<PyAny>>> + Send>>;

/// How often a blocking wait looks for Ctrl-C; a wait may last minutes.
const SIGNAL_CHECK: Duration = Duration::from_millis(200);

pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs `call` to completion without holding the GIL, so other Python
/// threads keep running, and still raises `KeyboardInterrupt` promptly.
pub(crate) fn block(py: Python<'_>, call: Call) -> PyResult<Py<PyAny>> {
    py.detach(|| {
        if tokio::runtime::Handle::try_current().is_err() {
            // The future runs on this thread, so a blocking client's
            // progress callbacks run on the thread that called it.
            return runtime().block_on(interruptible(call));
        }
        // Already inside the runtime (a blocking call from a progress
        // callback): `block_on` would panic there, so hand the call to a
        // worker and wait for its answer instead.
        let (tx, rx) = std::sync::mpsc::channel();
        runtime().spawn(async move {
            let _ = tx.send(call.await);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(PyRuntimeError::new_err("the SDK runtime dropped a call")))
    })
}

async fn interruptible(mut call: Call) -> PyResult<Py<PyAny>> {
    let mut ticks = tokio::time::interval(SIGNAL_CHECK);
    loop {
        tokio::select! {
            biased;
            result = &mut call => return result,
            _ = ticks.tick() => Python::attach(|py| py.check_signals())?,
        }
    }
}

/// Wraps `call` in a coroutine (`openshell._aio.run`) that creates the
/// asyncio future only once it runs inside an event loop. Cancelling the
/// coroutine drops the Rust future; nothing on the gateway is cancelled.
pub(crate) fn awaitable(py: Python<'_>, call: Call) -> PyResult<Py<PyAny>> {
    let slot = Mutex::new(Some(call));
    let start = PyCFunction::new_closure(
        py,
        Some(c"start"),
        None,
        move |args, _kwargs| -> PyResult<Py<PyAny>> {
            let call = slot
                .lock()
                .map_err(|_| PyRuntimeError::new_err("an earlier start of this call panicked"))?
                .take()
                .ok_or_else(|| PyRuntimeError::new_err("this call was already awaited"))?;
            Ok(pyo3_async_runtimes::tokio::future_into_py(args.py(), call)?.unbind())
        },
    )?;
    Ok(aio(py, &RUN, "run")?.call1((start,))?.unbind())
}

/// A coroutine that returns `value` at once (`openshell._aio.ready`), for
/// the awaitables Python's protocols expect, such as `__aenter__`.
pub(crate) fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
    Ok(aio(py, &READY, "ready")?.call1((value,))?.unbind())
}

static RUN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static READY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static CALL_PROGRESS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `openshell._aio.call_progress`, which runs one callback on the event loop.
pub(crate) fn call_progress(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    aio(py, &CALL_PROGRESS, "call_progress")
}

fn aio<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.import(py, "openshell._aio", name)
}
