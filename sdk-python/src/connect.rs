//! Building the SDK client from the constructor arguments both clients share.

use openshell_sdk::ClientOptions;
use pyo3::prelude::*;

use crate::args::{Pem, Seconds};
use crate::errors;
use crate::runtime::runtime;

const ENDPOINT_ENV: &str = "OPENSHELL_GATEWAY";
const TOKEN_ENV: &str = "OPENSHELL_TOKEN";
const CA_CERT_ENV: &str = "OPENSHELL_CA_CERT";

/// An environment variable's value; unset and empty are the same, as for the CLI.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// Makes a client that connects on its first call, so constructing one
/// never blocks and works before an event loop exists.
///
/// What the caller leaves out comes from the CLI's environment variables:
/// `OPENSHELL_GATEWAY` (else `http://127.0.0.1:7070`), `OPENSHELL_TOKEN`, and
/// `OPENSHELL_CA_CERT`, the path of a PEM file.
pub(crate) fn connect(
    py: Python<'_>,
    endpoint: Option<String>,
    token: Option<String>,
    ca_cert_pem: Option<Pem>,
    timeout: Option<Seconds>,
) -> PyResult<openshell_sdk::Client> {
    let endpoint = endpoint
        .or_else(|| env(ENDPOINT_ENV))
        .unwrap_or_else(|| ClientOptions::default().endpoint);
    let mut options = ClientOptions::new(endpoint);
    if let Some(token) = token.filter(|t| !t.is_empty()).or_else(|| env(TOKEN_ENV)) {
        options = options.with_token(token);
    }
    if let Some(Pem(pem)) = ca_cert_pem {
        options = options.with_ca_cert_pem(pem);
    } else if let Some(path) = env(CA_CERT_ENV) {
        let pem = std::fs::read(&path).map_err(|err| {
            errors::invalid_argument(
                py,
                CA_CERT_ENV,
                &format!("cannot read the CA certificate file {path}: {err}"),
            )
        })?;
        options = options.with_ca_cert_pem(pem);
    }
    if let Some(Seconds(limit)) = timeout {
        options = options.with_request_timeout(limit);
    }
    // The lazy channel spawns its worker on the current runtime.
    let _entered = runtime().enter();
    openshell_sdk::Client::connect_lazy(options).map_err(|err| errors::plain(py, err))
}
