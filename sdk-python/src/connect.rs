//! Building the SDK client from the constructor arguments both clients share.

use openshell_sdk::ClientOptions;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::args;
use crate::errors;
use crate::runtime::runtime;

/// Makes a client that connects on its first call, so constructing one
/// never blocks and works before an event loop exists.
pub(crate) fn connect(
    py: Python<'_>,
    endpoint: String,
    token: Option<String>,
    ca_cert_pem: Option<&Bound<'_, PyAny>>,
    timeout: Option<f64>,
) -> PyResult<openshell_sdk::Client> {
    let mut options = ClientOptions::new(endpoint);
    if let Some(token) = token {
        options = options.with_token(token);
    }
    if let Some(pem) = ca_cert_pem {
        options = options.with_ca_cert_pem(pem_bytes(pem)?);
    }
    if let Some(limit) = args::seconds(py, timeout, "timeout")? {
        options = options.with_request_timeout(limit);
    }
    // The lazy channel spawns its worker on the current runtime.
    let _entered = runtime().enter();
    openshell_sdk::Client::connect_lazy(options).map_err(|err| errors::plain(py, err))
}

fn pem_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    match obj.extract::<String>() {
        Ok(text) => Ok(text.into_bytes()),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(
            "ca_cert_pem must be str or bytes (PEM text)",
        )),
    }
}
