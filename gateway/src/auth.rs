//! Operator authentication: every operator call needs
//! `authorization: Bearer <token>`; the token's name becomes the caller
//! recorded on operations and scoping idempotency keys. The supervisor
//! calls of the same service present a supervisor credential instead,
//! which their handlers check (`supervisor_api::identity`).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;
use tonic::{Request, Status};

use crate::config::OperatorToken;
use crate::crypto::constant_time_eq;

/// The authenticated principal, put into request extensions.
#[derive(Debug, Clone)]
pub struct Caller(pub String);

/// Checks bearer tokens against the configured operator tokens.
#[derive(Clone)]
pub struct OperatorAuth {
    tokens: Arc<Vec<OperatorToken>>,
}

impl OperatorAuth {
    pub fn new(tokens: Vec<OperatorToken>) -> Self {
        Self {
            tokens: Arc::new(tokens),
        }
    }

    fn authenticate(&self, header: Option<&str>) -> Result<Caller, Status> {
        let Some(header) = header else {
            return Err(Status::unauthenticated(
                "missing operator token: send `authorization: Bearer <token>` (CLI: --token or OPENSHELL_TOKEN)",
            ));
        };
        let presented = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| {
                Status::unauthenticated("authorization header must be `Bearer <token>`")
            })?;
        // Check every token so the time taken does not reveal which matched.
        let mut found = None;
        for token in self.tokens.iter() {
            if constant_time_eq(token.token.expose().as_bytes(), presented.trim().as_bytes()) {
                found = Some(token.name.clone());
            }
        }
        found
            .map(Caller)
            .ok_or_else(|| Status::unauthenticated("operator token is not valid"))
    }
}

/// The methods of service `OpenShell` that supervisors call.
pub const SUPERVISOR_METHODS: [&str; 6] = [
    "ConnectSupervisor",
    "GetSandboxConfig",
    "GetGatewayConfig",
    "GetSandboxProviderEnvironment",
    "ReportPolicyStatus",
    "PushSandboxLogs",
];

fn is_supervisor_call(path: &str) -> bool {
    path.rsplit_once('/')
        .is_some_and(|(_, method)| SUPERVISOR_METHODS.contains(&method))
}

/// A service whose operator calls must pass [`OperatorAuth`] before they
/// reach it; the supervisor calls pass through to their own check. An
/// interceptor cannot do this: it does not see which method is called.
#[derive(Clone)]
pub struct Authenticated<S> {
    inner: S,
    auth: OperatorAuth,
}

impl<S> Authenticated<S> {
    pub fn new(inner: S, auth: OperatorAuth) -> Self {
        Self { inner, auth }
    }
}

impl<S> Service<http::Request<Body>> for Authenticated<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        if !is_supervisor_call(request.uri().path()) {
            let header = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            match self.auth.authenticate(header) {
                Ok(caller) => {
                    request.extensions_mut().insert(caller);
                }
                Err(status) => return Box::pin(async move { Ok(status.into_http()) }),
            }
        }
        Box::pin(self.inner.call(request))
    }
}

impl<S: NamedService> NamedService for Authenticated<S> {
    const NAME: &'static str = S::NAME;
}

/// The caller of a request that passed [`OperatorAuth`].
pub fn caller_of<T>(request: &Request<T>) -> Result<String, Status> {
    request
        .extensions()
        .get::<Caller>()
        .map(|c| c.0.clone())
        .ok_or_else(|| Status::unauthenticated("request was not authenticated"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openshell_core::Secret;

    fn auth() -> OperatorAuth {
        OperatorAuth::new(vec![OperatorToken {
            name: "ci".into(),
            token: Secret::new("tok-1"),
        }])
    }

    #[test]
    fn accepts_the_right_token_and_names_the_caller() {
        let caller = auth().authenticate(Some("Bearer tok-1")).unwrap();
        assert_eq!(caller.0, "ci");
    }

    #[test]
    fn only_the_supervisor_methods_skip_the_operator_token() {
        assert!(is_supervisor_call(
            "/openshell.v1.OpenShell/GetSandboxConfig"
        ));
        assert!(is_supervisor_call(
            "/openshell.v1.OpenShell/ConnectSupervisor"
        ));
        assert!(!is_supervisor_call("/openshell.v1.OpenShell/UpdateConfig"));
        // Reading an operation's targets names sandboxes: operators only.
        assert!(!is_supervisor_call(
            "/openshell.v1.OpenShell/ListOperationTargets"
        ));
        assert!(!is_supervisor_call(
            "/openshell.v1.OpenShell/GetSandboxConfigX"
        ));
        assert!(!is_supervisor_call("GetSandboxConfig"));
    }

    #[test]
    fn rejects_missing_malformed_and_wrong_tokens() {
        for header in [None, Some("tok-1"), Some("Bearer tok-2"), Some("Bearer ")] {
            let err = auth().authenticate(header).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{header:?}");
            assert!(!err.message().contains("tok-1"));
        }
    }
}
