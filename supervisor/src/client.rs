//! The gRPC channel to the gateway.
//!
//! The channel connects lazily and reconnects by itself, so the session and the poll loop
//! share it and each simply retries its own calls.

use std::time::Duration;

use openshell_proto::v1::supervisor_client::SupervisorClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::error::SupervisorError;

/// Snapshots are bounded (policy 256 KiB plus settings and provider values); leave headroom.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A lazily connecting channel to `url`. An `https` URL needs `ca_pem`: no system roots are
/// built into this binary.
pub fn lazy_channel(
    url: &str,
    ca_pem: Option<&[u8]>,
    connect_timeout: Duration,
) -> Result<Channel, SupervisorError> {
    let bad = |reason: String| SupervisorError::GatewayAddress {
        url: url.to_string(),
        reason,
    };
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|err| bad(err.to_string()))?
        .connect_timeout(connect_timeout)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let https = url.starts_with("https://");
    match (https, ca_pem) {
        (true, Some(pem)) => {
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|err| bad(err.to_string()))?;
        }
        (true, None) => {
            return Err(bad(
                "an https gateway needs --ca-file with the CA that signed its certificate".into(),
            ));
        }
        (false, Some(_)) => {
            return Err(bad(
                "--ca-file is given but the gateway address is not https".into(),
            ));
        }
        (false, None) => {}
    }
    Ok(endpoint.connect_lazy())
}

pub fn client(channel: Channel) -> SupervisorClient<Channel> {
    SupervisorClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}
