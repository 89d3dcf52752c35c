//! Operator authentication: every operator call needs
//! `authorization: Bearer <token>`. A token is one of the gateway
//! configuration or one created with `CreateToken` and kept, hashed, in the
//! store; either way it names a [`Principal`] (name, role, workspace) whose
//! name becomes the caller recorded on operations and scoping idempotency
//! keys. The role is checked against the method's permission here
//! (`authz::RPC_PERMISSIONS`), before the call reaches its handler. The
//! supervisor calls of the same service present a supervisor credential
//! instead, which their handlers check (`supervisor_api::identity`).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;
use tonic::{Request, Status};

use crate::authz::{Principal, Role, permission_for};
use crate::config::OperatorToken;
use crate::crypto::{constant_time_eq, hash_credential};
use crate::store::Store;

/// Checks bearer tokens against the configured operator tokens, then the
/// stored ones.
#[derive(Clone)]
pub struct OperatorAuth {
    tokens: Arc<Vec<OperatorToken>>,
    store: Option<Store>,
}

impl OperatorAuth {
    /// Configured tokens only.
    pub fn new(tokens: Vec<OperatorToken>) -> Self {
        Self {
            tokens: Arc::new(tokens),
            store: None,
        }
    }

    /// Configured tokens, then the tokens kept in `store`.
    pub fn with_store(tokens: Vec<OperatorToken>, store: Store) -> Self {
        Self {
            tokens: Arc::new(tokens),
            store: Some(store),
        }
    }

    async fn authenticate(&self, header: Option<&str>) -> Result<Principal, Status> {
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
            })?
            .trim();
        // Check every token so the time taken does not reveal which matched.
        let mut found = None;
        for token in self.tokens.iter() {
            if constant_time_eq(token.token.expose().as_bytes(), presented.as_bytes()) {
                found = Some(Principal {
                    name: token.name.clone(),
                    role: token.role,
                    workspace: token.workspace.clone(),
                    stored: false,
                });
            }
        }
        if let Some(principal) = found {
            return Ok(principal);
        }
        if let (Some(store), false) = (&self.store, presented.is_empty()) {
            // Stored tokens are found by the SHA-256 of the secret. A token is
            // 256 random bits, so a fast hash leaves nothing to brute-force
            // (a slow one would only cost every call), and the lookup compares
            // digests the caller cannot steer byte by byte, so its timing says
            // nothing about the secret. Read on every call, never cached: a
            // revoked token fails its next call on every replica.
            let hash = hash_credential(presented);
            match store.token_by_secret_hash(&hash).await {
                Ok(Some((record, stored)))
                    if constant_time_eq(stored.as_bytes(), hash.as_bytes()) =>
                {
                    let role = Role::parse(&record.role).ok_or_else(|| {
                        tracing::error!(token = %record.name, role = %record.role, "stored token has an unknown role");
                        Status::internal("stored operator token is unreadable")
                    })?;
                    return Ok(Principal {
                        name: record.name,
                        role,
                        workspace: record.workspace,
                        stored: true,
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read operator tokens");
                    return Err(Status::unavailable(
                        "cannot check the operator token now: the store is unavailable; retry",
                    ));
                }
            }
        }
        Err(Status::unauthenticated(
            "operator token is not valid (unknown or revoked)",
        ))
    }

    /// Authenticates the caller of `method` and checks that its role holds
    /// the method's permission.
    async fn authorize(&self, method: &str, header: Option<&str>) -> Result<Principal, Status> {
        let principal = self.authenticate(header).await?;
        // Every method of the service has a permission (a test holds the table
        // to the proto), so a method without one is not a method of this gateway.
        let permission = permission_for(method).ok_or_else(|| {
            Status::unimplemented(format!("{method} is not a method of this gateway"))
        })?;
        principal.check(permission)?;
        Ok(principal)
    }
}

/// How often a stream held open by a stored token looks whether another replica revoked
/// it; a revocation through this replica ends the stream at once.
pub const REVOCATION_RECHECK: Duration = Duration::from_secs(5);

/// Resolves once `principal`'s token is revoked: what it holds open (a `WaitForApply`
/// stream) must end then, not at its deadline. Never, for a configured token.
pub async fn revoked(store: &Store, principal: &Principal) {
    if !principal.stored {
        return std::future::pending().await;
    }
    let mut revocations = store.token_revocations();
    loop {
        // A store that cannot be read says nothing of the token: look again later.
        if let Ok(false) = store.token_exists(&principal.name).await {
            return;
        }
        tokio::select! {
            changed = revocations.changed() => {
                if changed.is_err() {
                    // The store is gone; only the recheck is left.
                    tokio::time::sleep(REVOCATION_RECHECK).await;
                }
            }
            () = tokio::time::sleep(REVOCATION_RECHECK) => {}
        }
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

/// The methods anyone may call: upstream's `Health`, which load balancers and `openshell
/// status` ask before they hold a token, and which tells nothing but that the gateway serves.
pub const OPEN_METHODS: [&str; 1] = ["Health"];

fn is_open_call(path: &str) -> bool {
    path.strip_prefix("/openshell.v1.OpenShell/")
        .is_some_and(|method| OPEN_METHODS.contains(&method))
}

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
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path().to_string();
        if is_supervisor_call(&path) || is_open_call(&path) {
            return Box::pin(self.inner.call(request));
        }
        // The clone is the one polled ready; this call takes it (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        Box::pin(async move {
            let header = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let method = path.rsplit_once('/').map_or("", |(_, m)| m);
            match auth.authorize(method, header.as_deref()).await {
                Ok(principal) => {
                    request.extensions_mut().insert(principal);
                }
                Err(status) => return Ok(status.into_http()),
            }
            inner.call(request).await
        })
    }
}

impl<S: NamedService> NamedService for Authenticated<S> {
    const NAME: &'static str = S::NAME;
}

/// The principal of a request that passed [`OperatorAuth`].
pub fn principal_of<T>(request: &Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("request was not authenticated"))
}

/// The caller (token name) of a request that passed [`OperatorAuth`].
pub fn caller_of<T>(request: &Request<T>) -> Result<String, Status> {
    principal_of(request).map(|p| p.name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use openshell_core::Secret;

    fn auth() -> OperatorAuth {
        OperatorAuth::new(vec![
            OperatorToken::admin("ci", Secret::new("tok-1")),
            OperatorToken {
                name: "watcher".into(),
                token: Secret::new("tok-view"),
                role: Role::Viewer,
                workspace: Some("team".into()),
            },
        ])
    }

    #[tokio::test]
    async fn accepts_the_right_token_and_names_the_caller() {
        let caller = auth().authenticate(Some("Bearer tok-1")).await.unwrap();
        assert_eq!(caller.name, "ci");
        assert_eq!(caller.role, Role::Admin);
        let watcher = auth().authenticate(Some("Bearer tok-view")).await.unwrap();
        assert_eq!(watcher.role, Role::Viewer);
        assert_eq!(watcher.workspace.as_deref(), Some("team"));
    }

    #[tokio::test]
    async fn the_role_is_checked_against_the_methods_permission() {
        let auth = auth();
        auth.authorize("GetSandbox", Some("Bearer tok-view"))
            .await
            .unwrap();
        let err = auth
            .authorize("CreateSandbox", Some("Bearer tok-view"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            err.message(),
            "token 'watcher' (role viewer, workspace 'team') lacks permission sandbox.write"
        );
        // A method the table does not name is refused, whoever calls it.
        let err = auth
            .authorize("DropEverything", Some("Bearer tok-1"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented);
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

    #[tokio::test]
    async fn rejects_missing_malformed_and_wrong_tokens() {
        for header in [None, Some("tok-1"), Some("Bearer tok-2"), Some("Bearer ")] {
            let err = auth().authenticate(header).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{header:?}");
            assert!(!err.message().contains("tok-1"));
        }
    }
}
