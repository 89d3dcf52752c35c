//! Operator authentication: every public API call needs
//! `authorization: Bearer <token>`; the token's name becomes the caller
//! recorded on operations and scoping idempotency keys.

use std::sync::Arc;

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

impl tonic::service::Interceptor for OperatorAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let caller = self.authenticate(header)?;
        request.extensions_mut().insert(caller);
        Ok(request)
    }
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
    fn rejects_missing_malformed_and_wrong_tokens() {
        for header in [None, Some("tok-1"), Some("Bearer tok-2"), Some("Bearer ")] {
            let err = auth().authenticate(header).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{header:?}");
            assert!(!err.message().contains("tok-1"));
        }
    }
}
