//! Upstream calls this gateway deliberately does not serve. Upstream's
//! `openshell.v1.OpenShell` service also carries calls that belong to other
//! parts of OpenShell; a caller that reaches this gateway with one of them
//! gets `UNIMPLEMENTED` and a message naming where the call belongs, not the
//! bare "not implemented" of an unknown method, so a misrouted supervisor or
//! client can be told apart from a broken one. Answered before operator
//! authentication: the call is refused whoever makes it.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;

/// Upstream methods of service `OpenShell` this gateway does not serve, with
/// the reason given to their callers.
pub const UNSERVED_METHODS: [(&str, &str); 2] = [
    (
        "RelayStream",
        "relay channels (SSH and exec into a sandbox) belong to OpenShell's sandbox access \
         path, not to this configuration gateway",
    ),
    (
        "SubmitPolicyAnalysis",
        "policy analysis (denial summaries and draft policy proposals) belongs to OpenShell's \
         policy advisor, not to this configuration gateway; policy changes are written with \
         UpdateConfig",
    ),
];

/// The `UNIMPLEMENTED` answer for `path` when it names an unserved upstream
/// method of `service`.
pub fn unserved(service: &str, path: &str) -> Option<Status> {
    let method = path
        .strip_prefix('/')?
        .strip_prefix(service)?
        .strip_prefix('/')?;
    UNSERVED_METHODS
        .iter()
        .find(|(name, _)| *name == method)
        .map(|(name, why)| {
            Status::unimplemented(format!(
                "{service}/{name} is not served by this gateway: {why}"
            ))
        })
}

/// Answers the unserved upstream methods of the wrapped service itself and
/// passes every other call through.
#[derive(Clone)]
pub struct Unserved<S> {
    inner: S,
}

impl<S> Unserved<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S> Service<http::Request<Body>> for Unserved<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + NamedService,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if let Some(status) = unserved(S::NAME, request.uri().path()) {
            return Box::pin(async move { Ok(status.into_http()) });
        }
        Box::pin(self.inner.call(request))
    }
}

impl<S: NamedService> NamedService for Unserved<S> {
    const NAME: &'static str = S::NAME;
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: &str = "openshell.v1.OpenShell";

    #[test]
    fn the_unserved_upstream_methods_are_named_with_where_they_belong() {
        let relay = unserved(SERVICE, "/openshell.v1.OpenShell/RelayStream").unwrap();
        assert_eq!(relay.code(), tonic::Code::Unimplemented);
        assert!(
            relay.message().contains("RelayStream"),
            "{}",
            relay.message()
        );
        assert!(
            relay.message().contains("sandbox access"),
            "{}",
            relay.message()
        );
        let analysis = unserved(SERVICE, "/openshell.v1.OpenShell/SubmitPolicyAnalysis").unwrap();
        assert_eq!(analysis.code(), tonic::Code::Unimplemented);
        assert!(
            analysis.message().contains("policy advisor"),
            "{}",
            analysis.message()
        );
    }

    #[test]
    fn served_methods_and_other_services_pass_through() {
        assert!(unserved(SERVICE, "/openshell.v1.OpenShell/UpdateConfig").is_none());
        assert!(unserved(SERVICE, "/openshell.v1.OpenShell/RelayStreamX").is_none());
        assert!(unserved(SERVICE, "/openshell.v1.GatewayPeer/RelayStream").is_none());
        assert!(unserved(SERVICE, "RelayStream").is_none());
    }
}
