//! The connection to a gateway and the one path every call takes through it:
//! bearer token, per-call timeout, retry rule and error mapping.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use openshell_proto::v1::config_plane_client::ConfigPlaneClient;
use openshell_proto::v1::open_shell_client::OpenShellClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use crate::error::{error_chain, explain_tls_mismatch};
use crate::retry::{Idempotency, RetryPolicy};
use crate::{ClientOptions, SdkError};

type Authed = InterceptedService<Channel, BearerAuth>;

/// The two services of a gateway on one connection: upstream's `OpenShell` and this
/// project's `ConfigPlane` (operations, sessions, tokens, settings reads, attachments).
#[derive(Clone)]
pub(crate) struct Inner {
    pub(crate) openshell: OpenShellClient<Authed>,
    pub(crate) plane: ConfigPlaneClient<Authed>,
}

/// A connection to one OpenShell gateway.
///
/// Cloning is cheap and clones share the connection, so one `Client` can
/// serve a whole program. Every call sends the operator token, maps gRPC
/// failures to [`SdkError`], and retries UNAVAILABLE only where a repeat
/// cannot write twice (reads, and `update_config` with an idempotency key).
///
/// ```no_run
/// use std::time::Duration;
/// use openshell_sdk::{Client, ClientOptions, OperationState};
///
/// # async fn demo() -> Result<(), openshell_sdk::SdkError> {
/// let client = Client::connect(
///     ClientOptions::new("https://gateway.example:7070")
///         .with_token("operator-token")
///         .with_ca_cert_pem(std::fs::read("ca.pem").unwrap_or_default())
///         .with_request_timeout(Duration::from_secs(30)),
/// )
/// .await?;
/// for sandbox in client.list_sandboxes(None, false).await? {
///     println!("{} {}", sandbox.name, sandbox.lifecycle);
/// }
/// let pending = client
///     .list_operations(None, &[OperationState::Pending], 20)
///     .await?;
/// println!("{} operations pending", pending.len());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Inner,
    endpoint: String,
    pub(crate) request_timeout: Option<Duration>,
    retry: RetryPolicy,
}

impl Client {
    /// Connects to the gateway, failing fast when it cannot be reached.
    pub async fn connect(options: ClientOptions) -> Result<Self, SdkError> {
        let endpoint = build_endpoint(&options)?;
        let channel = endpoint.connect().await.map_err(|err| {
            SdkError::Unavailable(explain_tls_mismatch(format!(
                "cannot connect to gateway at {}: {}",
                options.endpoint,
                error_chain(&err)
            )))
        })?;
        Self::from_channel(channel, &options)
    }

    /// Builds a client without connecting; the first call connects. Needs a
    /// Tokio runtime, like every call.
    pub fn connect_lazy(options: ClientOptions) -> Result<Self, SdkError> {
        let channel = build_endpoint(&options)?.connect_lazy();
        Self::from_channel(channel, &options)
    }

    fn from_channel(channel: Channel, options: &ClientOptions) -> Result<Self, SdkError> {
        let auth = BearerAuth::new(options)?;
        Ok(Self {
            inner: Inner {
                openshell: OpenShellClient::with_interceptor(channel.clone(), auth.clone()),
                plane: ConfigPlaneClient::with_interceptor(channel, auth),
            },
            endpoint: options.endpoint.clone(),
            request_timeout: options.request_timeout,
            retry: RetryPolicy::DEFAULT,
        })
    }

    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub(crate) fn request_timeout(&self) -> Option<Duration> {
        self.request_timeout
    }

    /// Sends one unary request under the client's timeout and retry rule.
    pub(crate) async fn unary<Req, Resp, F, Fut>(
        &self,
        idempotency: Idempotency,
        request: Req,
        send: F,
    ) -> Result<Resp, SdkError>
    where
        Req: Clone,
        F: Fn(Inner, Req) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        self.unary_within(idempotency, self.request_timeout, request, send)
            .await
    }

    /// Like [`Client::unary`] with an explicit timeout, for calls that wait
    /// server-side longer than an ordinary request takes.
    pub(crate) async fn unary_within<Req, Resp, F, Fut>(
        &self,
        idempotency: Idempotency,
        timeout: Option<Duration>,
        request: Req,
        send: F,
    ) -> Result<Resp, SdkError>
    where
        Req: Clone,
        F: Fn(Inner, Req) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        self.unary_response(idempotency, timeout, request, send)
            .await
            .map(tonic::Response::into_inner)
    }

    /// Like [`Client::unary_within`], keeping the response's metadata.
    pub(crate) async fn unary_response<Req, Resp, F, Fut>(
        &self,
        idempotency: Idempotency,
        timeout: Option<Duration>,
        request: Req,
        send: F,
    ) -> Result<tonic::Response<Resp>, SdkError>
    where
        Req: Clone,
        F: Fn(Inner, Req) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        self.retry
            .run(idempotency, || {
                let call = send(self.inner.clone(), request.clone());
                async move {
                    let response = match timeout {
                        Some(limit) => tokio::time::timeout(limit, call)
                            .await
                            .map_err(|_| deadline_error(limit))?,
                        None => call.await,
                    };
                    response.map_err(|status| status_error(&self.endpoint, status))
                }
            })
            .await
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

pub(crate) fn deadline_error(limit: Duration) -> SdkError {
    SdkError::DeadlineExceeded(format!(
        "the gateway did not answer within {}",
        humantime::format_duration(limit)
    ))
}

/// Maps a failed call's status, naming the endpoint when the connection
/// itself failed: a status tonic made from a transport error carries it as
/// its source, one the gateway sent has none.
fn status_error(endpoint: &str, status: Status) -> SdkError {
    // The status says "tcp connect error"; its sources say why.
    let cause = std::error::Error::source(&status).map(error_chain);
    let unreachable = status.code() == tonic::Code::Unavailable;
    match (SdkError::from(status), cause) {
        (SdkError::Unavailable(mut message), Some(cause)) => {
            if !message.contains(&cause) {
                message = format!("{message}: {cause}");
            }
            SdkError::Unavailable(if unreachable {
                format!("cannot reach the gateway at {endpoint}: {message}")
            } else {
                format!("{message} (gateway at {endpoint})")
            })
        }
        (other, _) => other,
    }
}

fn build_endpoint(options: &ClientOptions) -> Result<Endpoint, SdkError> {
    let uri = options.endpoint.trim();
    let https = uri.starts_with("https://");
    if !https && !uri.starts_with("http://") {
        return Err(SdkError::invalid(format!(
            "gateway endpoint {uri:?} must start with http:// or https://"
        )));
    }
    let mut endpoint = Endpoint::from_shared(uri.to_owned())
        .map_err(|err| SdkError::invalid(format!("invalid gateway endpoint {uri:?}: {err}")))?
        .connect_timeout(options.connect_timeout)
        .tcp_nodelay(true)
        // Waits may idle on the wire for minutes; pings keep middleboxes
        // from dropping the connection underneath them.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if https {
        // The system's trusted roots (which `SSL_CERT_FILE` and `SSL_CERT_DIR` can point
        // elsewhere), so a gateway with a publicly signed certificate needs no CA file; a CA
        // file adds its certificate to them for a privately signed one.
        let mut tls = ClientTlsConfig::new().with_native_roots();
        if let Some(pem) = &options.ca_cert_pem {
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint = endpoint.tls_config(tls)?;
    } else if options.ca_cert_pem.is_some() {
        tracing::warn!(
            endpoint = uri,
            "CA certificate ignored for a plain-http endpoint"
        );
    }
    Ok(endpoint)
}

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub(crate) struct BearerAuth(Option<MetadataValue<Ascii>>);

impl BearerAuth {
    fn new(options: &ClientOptions) -> Result<Self, SdkError> {
        let Some(token) = &options.token else {
            return Ok(Self(None));
        };
        let mut value =
            MetadataValue::try_from(format!("Bearer {}", token.expose())).map_err(|_| {
                SdkError::invalid("the operator token contains characters not allowed in a header")
            })?;
        value.set_sensitive(true);
        Ok(Self(Some(value)))
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

impl fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "BearerAuth(***)"
        } else {
            "BearerAuth(none)"
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn client_debug_never_shows_token() {
        let opts = ClientOptions::new("http://127.0.0.1:1").with_token("tok-super-secret");
        let client = Client::connect_lazy(opts).unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("tok-super-secret"), "{shown}");
        assert!(shown.contains("127.0.0.1:1"));
        let auth = BearerAuth::new(&ClientOptions::new("http://x").with_token("tok-super-secret"))
            .unwrap();
        assert!(!format!("{auth:?}").contains("tok-super-secret"));
    }

    #[test]
    fn interceptor_sets_bearer_header() {
        let mut auth = BearerAuth::new(&ClientOptions::new("http://x").with_token("abc")).unwrap();
        let request = auth.call(Request::new(())).unwrap();
        let header = request.metadata().get("authorization").unwrap();
        assert_eq!(header.to_str().unwrap(), "Bearer abc");

        let mut none = BearerAuth::new(&ClientOptions::new("http://x")).unwrap();
        let request = none.call(Request::new(())).unwrap();
        assert!(request.metadata().get("authorization").is_none());
    }

    #[test]
    fn rejects_token_with_newline() {
        let err = BearerAuth::new(&ClientOptions::new("http://x").with_token("a\nb")).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(!err.to_string().contains("a\nb"));
    }

    #[test]
    fn endpoint_validation() {
        let err = build_endpoint(&ClientOptions::new("127.0.0.1:7070")).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        // https needs no CA file: the system's roots are trusted, a CA file adds to them.
        assert!(build_endpoint(&ClientOptions::new("https://gw:7070")).is_ok());
        assert!(build_endpoint(&ClientOptions::new("http://gw:7070")).is_ok());
    }

    #[tokio::test]
    async fn unreachable_gateway_is_unavailable() {
        // Port 1 on loopback is closed on any sane test machine.
        let opts =
            ClientOptions::new("http://127.0.0.1:1").with_connect_timeout(Duration::from_secs(2));
        let err = Client::connect(opts).await.unwrap_err();
        assert_eq!(err.code(), "UNAVAILABLE");
    }

    #[tokio::test]
    async fn unreachable_gateway_error_names_the_endpoint() {
        let opts =
            ClientOptions::new("http://127.0.0.1:1").with_connect_timeout(Duration::from_secs(2));
        let client = Client::connect_lazy(opts).unwrap();
        let err = client.gateway_info().await.unwrap_err();
        assert_eq!(err.code(), "UNAVAILABLE");
        assert!(
            err.to_string()
                .starts_with("cannot reach the gateway at http://127.0.0.1:1: "),
            "{err}"
        );
    }

    #[test]
    fn statuses_the_gateway_sent_keep_their_message() {
        let err = status_error("http://gw:1", Status::unavailable("shutting down"));
        assert_eq!(err.to_string(), "shutting down");
    }
}
