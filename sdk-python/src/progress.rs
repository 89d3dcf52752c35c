//! Following an operation with a Python progress callback.
//!
//! The SDK's `wait_for_apply_final` reports each update to a plain Rust
//! closure. Here that closure only queues the update; a second future hands
//! the queue to Python in order, so a callback may be slow, async, or raise,
//! and an exception from it ends the wait (the operation itself keeps going
//! on the gateway).

use std::time::Duration;

use openshell_sdk::SdkError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::sync::mpsc;

use crate::errors;
use crate::into_view::IntoView;
use crate::runtime;

/// Where a progress callback runs.
pub(crate) enum Progress {
    /// On the thread blocked in a `Client` call, between network reads.
    OnCaller(Py<PyAny>),
    /// On the asyncio loop of the awaiting task; an async callback is awaited.
    OnLoop(Py<PyAny>),
}

impl Progress {
    pub(crate) async fn deliver(
        &self,
        operation: openshell_sdk::Operation,
        client: &openshell_sdk::Client,
    ) -> PyResult<()> {
        match self {
            Self::OnCaller(callback) => Python::attach(|py| {
                callback.call1(py, (operation.into_view(py, client)?,))?;
                Ok(())
            }),
            Self::OnLoop(callback) => {
                let done = Python::attach(|py| {
                    let locals = pyo3_async_runtimes::tokio::get_current_locals(py)?;
                    let coroutine = runtime::call_progress(py)?
                        .call1((callback.bind(py), operation.into_view(py, client)?))?;
                    pyo3_async_runtimes::into_future_with_locals(&locals, coroutine)
                })?;
                done.await.map(drop)
            }
        }
    }
}

/// Waits like `Client.wait_for_apply_final`, reporting every update to
/// `progress` before the result is returned.
pub(crate) async fn follow(
    client: &openshell_sdk::Client,
    id: &str,
    timeout: Option<Duration>,
    threshold: Option<f64>,
    progress: Option<&Progress>,
) -> PyResult<openshell_sdk::Operation> {
    let Some(progress) = progress else {
        let result = client
            .wait_for_apply_final(id, timeout, threshold, |_| {})
            .await;
        return sdk_result(result, client);
    };
    let (updates, mut queued) = mpsc::unbounded_channel();
    let wait = client.wait_for_apply_final(id, timeout, threshold, move |op| {
        // The receiver lives until the wait ends, so a send cannot fail
        // while anyone still listens.
        let _ = updates.send(op.clone());
    });
    // Ends once the wait has finished (dropping the sender) and every queued
    // update was delivered; or early, with the first callback error.
    let deliver = async {
        while let Some(op) = queued.recv().await {
            progress.deliver(op, client).await?;
        }
        Ok::<(), PyErr>(())
    };
    tokio::pin!(wait, deliver);
    let mut finished: Option<Result<openshell_sdk::Operation, SdkError>> = None;
    loop {
        tokio::select! {
            result = &mut wait, if finished.is_none() => finished = Some(result),
            delivered = &mut deliver => {
                delivered?;
                break;
            }
        }
    }
    match finished {
        Some(result) => sdk_result(result, client),
        None => Err(PyRuntimeError::new_err(
            "progress delivery ended before the wait did",
        )),
    }
}

fn sdk_result(
    result: Result<openshell_sdk::Operation, SdkError>,
    client: &openshell_sdk::Client,
) -> PyResult<openshell_sdk::Operation> {
    result.map_err(|err| Python::attach(|py| errors::to_py(py, err, client)))
}
