//! The gRPC channel to the gateway, and the client every supervisor call goes through.
//!
//! The channel connects lazily and reconnects by itself, so the session and the poll loop
//! share it and each simply retries its own calls. The client attaches the supervisor
//! credential to every call ([`Bearer`]), so no call site handles the credential.

use std::fmt;
use std::time::Duration;

use openshell_proto::v1::open_shell_client::OpenShellClient;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use crate::error::SupervisorError;
use crate::identity::Identity;

/// The client of the gateway's `OpenShell` service as the supervisor uses it.
pub type GatewayClient = OpenShellClient<InterceptedService<Channel, Bearer>>;

/// Snapshots are bounded (policy 256 KiB plus settings and provider values); leave headroom.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A lazily connecting channel to the gateway at `url`, or to any of several replicas when
/// `url` lists them comma-separated (`http://a:7070,http://b:7070`). With several, each call
/// goes to a replica that is up: a call to one that is down fails, the caller retries with
/// its backoff as always, and the retry goes to another. An `https` URL needs `ca_pem`: no
/// system roots are built into this binary.
pub fn lazy_channel(
    url: &str,
    ca_pem: Option<&[u8]>,
    connect_timeout: Duration,
) -> Result<Channel, SupervisorError> {
    let addresses = gateway_addresses(url)?;
    let mut endpoints = addresses
        .iter()
        .map(|address| endpoint(address, ca_pem, connect_timeout))
        .collect::<Result<Vec<_>, _>>()?;
    match endpoints.len() {
        1 => Ok(endpoints.remove(0).connect_lazy()),
        _ => Ok(Channel::balance_list(endpoints.into_iter())),
    }
}

/// The addresses of a `--gateway` value: one, or several comma-separated, none empty and
/// none repeated.
pub fn gateway_addresses(value: &str) -> Result<Vec<&str>, SupervisorError> {
    let addresses: Vec<&str> = value.split(',').map(str::trim).collect();
    let bad = |reason: String| SupervisorError::GatewayAddress {
        url: value.to_string(),
        reason,
    };
    if let Some(position) = addresses.iter().position(|a| a.is_empty()) {
        return Err(bad(format!(
            "address {} of the list is empty; expected URLs separated by commas, e.g. \
             http://gw-a:7070,http://gw-b:7070",
            position + 1
        )));
    }
    for (i, address) in addresses.iter().enumerate() {
        if addresses[..i].contains(address) {
            return Err(bad(format!("{address} is listed twice")));
        }
    }
    Ok(addresses)
}

fn endpoint(
    url: &str,
    ca_pem: Option<&[u8]>,
    connect_timeout: Duration,
) -> Result<Endpoint, SupervisorError> {
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
    Ok(endpoint)
}

/// A client on `channel` whose every call carries `identity`'s credential. Fails only when
/// the credential cannot travel in a header.
pub fn client(channel: Channel, identity: &Identity) -> Result<GatewayClient, SupervisorError> {
    let bearer = Bearer {
        authorization: identity.authorization()?,
    };
    Ok(OpenShellClient::with_interceptor(channel, bearer)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// Adds `authorization: Bearer <supervisor credential>` to every call: the gateway
/// authenticates each supervisor call by it, streams included.
#[derive(Clone)]
pub struct Bearer {
    /// Marked sensitive (see [`Identity::authorization`]).
    authorization: AsciiMetadataValue,
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.authorization.clone());
        Ok(request)
    }
}

/// The client (and so everything holding one) may be printed; the credential never is.
impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bearer(***)")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use openshell_core::Secret;

    use super::*;

    const CREDENTIAL: &str = "cred-never-printed-0123";

    fn bearer() -> Bearer {
        let identity = Identity::new("sb-1", Secret::new(CREDENTIAL));
        Bearer {
            authorization: identity.authorization().unwrap(),
        }
    }

    #[test]
    fn every_call_carries_the_credential_as_bearer_metadata() {
        let mut bearer = bearer();
        for _ in 0..2 {
            let request = bearer.call(Request::new(())).unwrap();
            let header = request.metadata().get("authorization").unwrap();
            assert_eq!(header.to_str().unwrap(), format!("Bearer {CREDENTIAL}"));
            assert!(header.is_sensitive());
            // What tonic or a request log would print of the call's metadata.
            let printed = format!("{:?} {request:?}", request.metadata());
            assert!(!printed.contains(CREDENTIAL), "{printed}");
        }
    }

    #[test]
    fn a_gateway_list_names_each_replica_once() {
        assert_eq!(
            gateway_addresses("http://a:1, http://b:2").unwrap(),
            ["http://a:1", "http://b:2"]
        );
        assert_eq!(gateway_addresses("http://a:1").unwrap(), ["http://a:1"]);
        let empty = gateway_addresses("http://a:1,,http://b:2").unwrap_err();
        assert!(
            empty.to_string().contains("address 2 of the list is empty"),
            "{empty}"
        );
        let twice = gateway_addresses("http://a:1,http://a:1").unwrap_err();
        assert!(twice.to_string().contains("listed twice"), "{twice}");
    }

    #[tokio::test]
    async fn each_address_of_a_list_is_checked() {
        let err = lazy_channel("http://a:1,https://b:2", None, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("https://b:2"), "{err}");
        assert!(err.to_string().contains("--ca-file"), "{err}");
        assert!(lazy_channel("http://a:1,http://b:2", None, Duration::from_secs(1)).is_ok());
    }

    #[tokio::test]
    async fn the_client_prints_without_the_credential() {
        let channel = Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
        let identity = Identity::new("sb-1", Secret::new(CREDENTIAL));
        let client = client(channel, &identity).unwrap();
        for printed in [
            format!("{client:?}"),
            format!("{:?}", bearer()),
            format!("{identity:?}"),
        ] {
            assert!(!printed.contains(CREDENTIAL), "{printed}");
        }
    }
}
