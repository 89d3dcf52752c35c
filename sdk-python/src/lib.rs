//! The native half of the `openshell` Python package (`openshell._native`).
//!
//! It exposes the OpenShell Rust SDK (`openshell-sdk`) to Python: a blocking
//! `Client` that releases the GIL while it waits, an `AsyncClient` whose
//! methods are coroutines, typed view objects, and the one mapping from the
//! SDK's errors to the exception classes of `openshell.errors`.
//!
//! What it is not: a second client. Connections, retries, wait streams,
//! validation of waits and the error codes all come from `openshell-sdk`, so
//! Python behaves exactly like the CLI and the Node SDK. The pure-Python side
//! (`python/openshell/`) holds only what Python code must own: the exception
//! classes, the enums, the coroutine glue and the type stubs.

mod args;
mod calls;
mod client;
mod connect;
mod enums;
mod errors;
mod into_view;
mod progress;
mod repr;
mod runtime;
mod target;
mod views;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<client::AsyncClient>()?;
    m.add_class::<target::Target>()?;
    views::register(m)?;
    enums::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
