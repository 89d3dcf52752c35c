//! How to reach a gateway: endpoint, operator token, TLS trust and timeouts.

use std::fmt;
use std::time::Duration;

use crate::Secret;

/// The endpoint used when the caller names none; matches the gateway's default listener.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7070";

/// Connection settings for [`Client::connect`](crate::Client::connect).
///
/// `Debug` never shows the token or the CA bytes, so options can be logged.
#[derive(Clone)]
pub struct ClientOptions {
    /// `http://host:port` or `https://host:port`.
    pub endpoint: String,
    /// Operator token, sent as `authorization: Bearer <token>` on every call.
    pub token: Option<Secret>,
    /// PEM CA certificate(s) to trust for an `https` endpoint.
    pub ca_cert_pem: Option<Vec<u8>>,
    /// Bound on establishing the connection.
    pub connect_timeout: Duration,
    /// Bound on each unary call. Calls that wait server-side (`UpdateConfig`
    /// with `WAIT_FOR_APPLY`, `WaitForApply`) get their wait time on top.
    pub request_timeout: Option<Duration>,
}

impl ClientOptions {
    /// Options for `endpoint` with no token, no custom CA, a 10 s connect
    /// timeout and no per-call timeout.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            token: None,
            ca_cert_pem: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: None,
        }
    }

    pub fn with_token(mut self, token: impl Into<Secret>) -> Self {
        self.token = Some(token.into());
        self
    }

    pub fn with_ca_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_cert_pem = Some(pem.into());
        self
    }

    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self::new(DEFAULT_ENDPOINT)
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("ca_cert_pem", &self.ca_cert_pem.as_ref().map(Vec::len))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_token() {
        let opts = ClientOptions::new("http://gw:7070").with_token("tok-very-secret");
        let shown = format!("{opts:?}");
        assert!(!shown.contains("tok-very-secret"), "{shown}");
        assert!(shown.contains("***"));
        assert!(shown.contains("http://gw:7070"));
    }
}
