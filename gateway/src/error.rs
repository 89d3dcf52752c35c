//! Errors of the gateway's domain and store layers, and their one mapping to
//! gRPC status codes (done only at the API edge).

use openshell_core::Violation;

/// Everything a gateway operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The request is malformed; each violation names its field path.
    #[error("{summary}")]
    Invalid {
        summary: String,
        violations: Vec<Violation>,
    },
    /// A named object does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A name is already taken.
    #[error("{0}")]
    AlreadyExists(String),
    /// The current state forbids the write.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The caller is not who it claims to be.
    #[error("{0}")]
    Unauthenticated(String),
    /// The store failed; details are logged, not returned.
    #[error("store error: {0}")]
    Store(#[from] sqlx::Error),
    /// The gateway cannot serve the request now (it is stopping); retry.
    #[error("{0}")]
    Unavailable(String),
    /// Stored data could not be decoded (corruption or a bad key).
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
}

impl GatewayError {
    /// A bad-input error for one field.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::from_violations(vec![Violation {
            field: field.into(),
            message: message.into(),
        }])
    }

    /// A bad-input error carrying every violation found.
    pub fn from_violations(violations: Vec<Violation>) -> Self {
        let summary = match violations.as_slice() {
            [one] => one.to_string(),
            many => format!("{} problems found", many.len()),
        };
        Self::Invalid {
            summary,
            violations,
        }
    }

    /// The gateway is shutting down and no longer takes this request.
    pub fn stopping() -> Self {
        Self::Unavailable("the gateway is stopping".into())
    }

    /// True when the store refused a write because a unique index was hit.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            Self::Store(sqlx::Error::Database(db)) => db.is_unique_violation(),
            _ => false,
        }
    }
}

impl From<GatewayError> for tonic::Status {
    fn from(err: GatewayError) -> Self {
        match err {
            GatewayError::Invalid {
                summary,
                violations,
            } => {
                // First line is the summary; every violation follows on its own
                // line as `field: message`, which the SDK parses back.
                let mut message = summary;
                if violations.len() > 1 {
                    for v in &violations {
                        message.push('\n');
                        message.push_str(&v.to_string());
                    }
                } else if let [v] = violations.as_slice() {
                    message = v.to_string();
                }
                tonic::Status::invalid_argument(message)
            }
            GatewayError::NotFound(m) => tonic::Status::not_found(m),
            GatewayError::AlreadyExists(m) => tonic::Status::already_exists(m),
            GatewayError::FailedPrecondition(m) => tonic::Status::failed_precondition(m),
            GatewayError::Unauthenticated(m) => tonic::Status::unauthenticated(m),
            GatewayError::Unavailable(m) => tonic::Status::unavailable(m),
            GatewayError::Store(e) => {
                tracing::error!(error = %e, "store error");
                tonic::Status::unavailable("the gateway's store is unavailable; retry later")
            }
            GatewayError::Corrupt(m) => {
                tracing::error!(error = %m, "stored data unreadable");
                tonic::Status::internal("stored data is unreadable; see the gateway log")
            }
        }
    }
}

pub type Result<T, E = GatewayError> = std::result::Result<T, E>;
