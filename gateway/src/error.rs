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

/// Longest line of a status message: a violation or a reason. Errors may quote input (a name,
/// a value, a parser's view of a document), and an unbounded quote of a megabyte-sized input
/// overflows the response headers, so the client would see RESOURCE_EXHAUSTED instead of the
/// real error.
pub const MAX_STATUS_LINE_CHARS: usize = 512;
/// Longest status message in all, however many violations it lists.
pub const MAX_STATUS_MESSAGE_CHARS: usize = 8 * 1024;

/// Cuts a line of a status message to [`MAX_STATUS_LINE_CHARS`], saying so.
fn bounded_line(line: &str) -> String {
    match line.char_indices().nth(MAX_STATUS_LINE_CHARS) {
        Some((cut, _)) => format!("{}… ({} more bytes cut)", &line[..cut], line.len() - cut),
        None => line.to_string(),
    }
}

/// Bounds every line, then the whole message, of a status message.
fn bounded_message(message: &str) -> String {
    let mut out = String::new();
    for (i, line) in message.split('\n').enumerate() {
        let line = bounded_line(line);
        if out.len() + line.len() + 1 > MAX_STATUS_MESSAGE_CHARS {
            out.push_str(&format!(
                "\n… and {} more line(s)",
                message.split('\n').count() - i
            ));
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&line);
    }
    out
}

impl From<GatewayError> for tonic::Status {
    fn from(err: GatewayError) -> Self {
        let status = unbounded_status(err);
        if status.message().len() <= MAX_STATUS_LINE_CHARS {
            return status;
        }
        tonic::Status::new(status.code(), bounded_message(status.message()))
    }
}

fn unbounded_status(err: GatewayError) -> tonic::Status {
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

pub type Result<T, E = GatewayError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Probe: an error quoting a 1.4 MB input reached the client as RESOURCE_EXHAUSTED.
    #[test]
    fn status_messages_are_bounded_per_line_and_in_all() {
        let huge = "x".repeat(1_400_000);
        let status = tonic::Status::from(GatewayError::NotFound(format!(
            "sandbox {huge:?} not found"
        )));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert!(status.message().len() < MAX_STATUS_LINE_CHARS + 64);
        assert!(status.message().contains("more bytes cut"));

        let many: Vec<Violation> = (0..500)
            .map(|i| Violation {
                field: format!("values[{i}].name"),
                message: huge[..2000].to_string(),
            })
            .collect();
        let status = tonic::Status::from(GatewayError::from_violations(many));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().len() <= MAX_STATUS_MESSAGE_CHARS + 64);
        assert!(
            status
                .message()
                .starts_with("500 problems found\nvalues[0].name: ")
        );
        assert!(status.message().ends_with("more line(s)"));
    }

    #[test]
    fn short_messages_pass_unchanged() {
        let status = tonic::Status::from(GatewayError::invalid("policy.version", "must be 1"));
        assert_eq!(status.message(), "policy.version: must be 1");
    }
}
