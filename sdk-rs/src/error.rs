//! The SDK's error type and its one mapping from gRPC status codes.
//!
//! Bindings expose [`SdkError::code`] as a stable string, so those codes are
//! part of the public contract and must not change.

use serde::{Deserialize, Serialize};
use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::types::Operation;

/// One validation finding reported by the gateway, addressed by field path
/// (e.g. `network_policies.github.endpoints[2].ports[0]`). `field` is empty for
/// problems with a document as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldViolation {
    pub field: String,
    pub message: String,
}

/// Everything an SDK call can fail with.
///
/// A failed *operation* is not an error here: a call that returns an
/// [`Operation`] succeeded, and the caller inspects its state.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    /// The named object does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request was rejected as invalid; `violations` names each bad field.
    #[error("{message}")]
    InvalidArgument {
        message: String,
        violations: Vec<FieldViolation>,
    },
    /// A name is already taken.
    #[error("{0}")]
    AlreadyExists(String),
    /// The current state forbids the write.
    #[error("{0}")]
    FailedPrecondition(String),
    /// No operator token, or a wrong one.
    #[error("{0}")]
    Unauthenticated(String),
    /// The gateway cannot be reached or asked to retry later.
    #[error("{0}")]
    Unavailable(String),
    /// A deadline passed before the gateway answered.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// A wait helper's deadline passed while the operation was still live; the
    /// operation keeps going and can be waited on again.
    #[error("operation {} is still {} after the wait deadline", operation.id, operation.state)]
    WaitTimedOut { operation: Box<Operation> },
    /// Connection setup failed (bad CA, TLS or endpoint configuration).
    #[error("{0}")]
    Transport(String),
    /// Any other gRPC status; `code` is its canonical name (e.g. `INTERNAL`).
    #[error("{message}")]
    Other { code: String, message: String },
}

impl SdkError {
    /// A stable, machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "NOT_FOUND",
            Self::InvalidArgument { .. } => "INVALID_ARGUMENT",
            Self::AlreadyExists(_) => "ALREADY_EXISTS",
            Self::FailedPrecondition(_) => "FAILED_PRECONDITION",
            Self::Unauthenticated(_) => "UNAUTHENTICATED",
            Self::Unavailable(_) => "UNAVAILABLE",
            Self::DeadlineExceeded(_) => "DEADLINE_EXCEEDED",
            Self::WaitTimedOut { .. } => "WAIT_TIMED_OUT",
            Self::Transport(_) => "TRANSPORT",
            Self::Other { code, .. } => static_code_name(code),
        }
    }

    /// The violations of an `InvalidArgument`, empty for every other error.
    pub fn violations(&self) -> &[FieldViolation] {
        match self {
            Self::InvalidArgument { violations, .. } => violations,
            _ => &[],
        }
    }

    /// Whether retrying the same idempotent request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// A client-side input error that never reached the gateway.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            message: message.into(),
            violations: Vec::new(),
        }
    }

    /// A client-side input error with its findings, each addressed by field.
    pub(crate) fn invalid_violations(
        what: &str,
        violations: Vec<openshell_core::Violation>,
    ) -> Self {
        let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
        Self::InvalidArgument {
            message: format!("{what} are invalid: {}", listed.join("; ")),
            violations: violations
                .into_iter()
                .map(|v| FieldViolation {
                    field: v.field,
                    message: v.message,
                })
                .collect(),
        }
    }

    /// Refuses a policy larger than the gateway accepts before it is sent: the gateway's
    /// transport limit would otherwise answer first, with an error that names no policy limit.
    pub(crate) fn check_policy_size(text: &str) -> Result<(), Self> {
        use openshell_core::policy::MAX_POLICY_BYTES;
        if text.len() <= MAX_POLICY_BYTES {
            return Ok(());
        }
        let message = format!(
            "policy is {} bytes; the limit is {MAX_POLICY_BYTES} bytes (256 KiB)",
            text.len()
        );
        Err(Self::InvalidArgument {
            message: format!("policy: {message}"),
            violations: vec![FieldViolation {
                field: "policy".to_owned(),
                message,
            }],
        })
    }

    /// The gateway answered with a message missing a field the contract promises.
    pub(crate) fn missing(what: &str) -> Self {
        Self::Other {
            code: "INTERNAL".to_owned(),
            message: format!("gateway response is missing {what}"),
        }
    }
}

impl From<Status> for SdkError {
    fn from(status: Status) -> Self {
        let message = status.message().to_owned();
        match status.code() {
            Code::NotFound => Self::NotFound(message),
            // Field paths come from the standard `google.rpc.BadRequest` details; the message
            // is for people: its first line is the summary.
            Code::InvalidArgument => {
                let violations = status
                    .get_details_bad_request()
                    .map(|details| {
                        details
                            .field_violations
                            .into_iter()
                            .map(|v| FieldViolation {
                                field: v.field,
                                message: v.description,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let summary = message.lines().next().unwrap_or_default().trim().to_owned();
                Self::InvalidArgument {
                    message: summary,
                    violations,
                }
            }
            Code::AlreadyExists => Self::AlreadyExists(message),
            Code::FailedPrecondition => Self::FailedPrecondition(message),
            Code::Unauthenticated => Self::Unauthenticated(message),
            Code::Unavailable => Self::Unavailable(explain_tls_mismatch(message)),
            // A stream or call cut by a broken connection (the gateway died mid-response)
            // reaches tonic as UNKNOWN or CANCELLED carrying the transport error as its
            // source; a status the gateway sent has none. It is the gateway going away, not
            // an answer, so it is retried and reported as such.
            Code::Unknown | Code::Cancelled if std::error::Error::source(&status).is_some() => {
                Self::Unavailable(format!("the connection to the gateway broke: {message}"))
            }
            Code::DeadlineExceeded => Self::DeadlineExceeded(message),
            other => Self::Other {
                code: code_name(other).to_owned(),
                message,
            },
        }
    }
}

impl From<tonic::transport::Error> for SdkError {
    fn from(err: tonic::transport::Error) -> Self {
        Self::Transport(explain_tls_mismatch(error_chain(&err)))
    }
}

/// What rustls reports when a TLS client reads a plain-HTTP answer: a record whose content
/// type is not TLS's.
const PLAIN_HTTP_ANSWER: &str = "InvalidContentType";

/// Says in words what a TLS library's error means when an `https://` address reaches a
/// gateway that serves plain HTTP.
pub(crate) fn explain_tls_mismatch(text: String) -> String {
    if text.contains(PLAIN_HTTP_ANSWER) {
        format!(
            "the gateway answered in plain HTTP, not TLS: use its http:// address instead of \
             https:// ({text})"
        )
    } else {
        text
    }
}

/// Joins an error with its sources, since tonic's transport errors say only
/// "transport error" at the top and keep the useful part in the chain.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Maps a stored code name back to a `'static` one so `code()` can stay allocation-free.
fn static_code_name(code: &str) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES
        .iter()
        .find(|name| **name == code)
        .copied()
        .unwrap_or("UNKNOWN")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn map(status: Status) -> SdkError {
        SdkError::from(status)
    }

    /// A wait whose gateway died surfaced as UNKNOWN "h2 protocol error", which the CLI
    /// then reported like a failed apply.
    #[test]
    fn a_broken_connection_is_unavailable_but_a_sent_unknown_is_not() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let mut broken = Status::unknown("h2 protocol error: error reading a body from connection");
        broken.set_source(std::sync::Arc::new(io));
        let err = map(broken);
        assert_eq!(err.code(), "UNAVAILABLE", "{err}");
        assert!(err.is_retryable());
        assert!(err.to_string().contains("connection to the gateway broke"));
        let sent = map(Status::unknown("something the gateway said"));
        assert_eq!(sent.code(), "UNKNOWN");
    }

    #[test]
    fn simple_codes_map_to_variants() {
        let cases: Vec<(Status, &str)> = vec![
            (Status::not_found("sandbox demo not found"), "NOT_FOUND"),
            (Status::already_exists("name taken"), "ALREADY_EXISTS"),
            (
                Status::failed_precondition("provider is attached"),
                "FAILED_PRECONDITION",
            ),
            (Status::unauthenticated("bad token"), "UNAUTHENTICATED"),
            (Status::unavailable("store down"), "UNAVAILABLE"),
            (Status::deadline_exceeded("slow"), "DEADLINE_EXCEEDED"),
            (Status::internal("boom"), "INTERNAL"),
            (Status::permission_denied("no"), "PERMISSION_DENIED"),
            (Status::unimplemented("later"), "UNIMPLEMENTED"),
            (Status::unknown("?"), "UNKNOWN"),
        ];
        for (status, code) in cases {
            let message = status.message().to_owned();
            let err = map(status);
            assert_eq!(err.code(), code);
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn variants_are_the_expected_ones() {
        assert!(matches!(map(Status::not_found("x")), SdkError::NotFound(m) if m == "x"));
        assert!(matches!(
            map(Status::already_exists("x")),
            SdkError::AlreadyExists(_)
        ));
        assert!(matches!(
            map(Status::failed_precondition("x")),
            SdkError::FailedPrecondition(_)
        ));
        assert!(matches!(
            map(Status::unauthenticated("x")),
            SdkError::Unauthenticated(_)
        ));
        assert!(matches!(
            map(Status::unavailable("x")),
            SdkError::Unavailable(_)
        ));
        assert!(matches!(
            map(Status::internal("x")),
            SdkError::Other { code, message } if code == "INTERNAL" && message == "x"
        ));
    }

    #[test]
    fn only_unavailable_is_retryable() {
        assert!(map(Status::unavailable("x")).is_retryable());
        assert!(!map(Status::internal("x")).is_retryable());
        assert!(!map(Status::invalid_argument("x")).is_retryable());
    }

    fn bad_request(message: &str, violations: &[(&str, &str)]) -> Status {
        let details = tonic_types::ErrorDetails::with_bad_request(
            violations
                .iter()
                .map(|(field, message)| tonic_types::FieldViolation::new(*field, *message))
                .collect::<Vec<_>>(),
        );
        Status::with_error_details(Code::InvalidArgument, message, details)
    }

    #[test]
    fn violations_come_from_bad_request_details() {
        let err = map(bad_request(
            "2 problems found\nnetwork_policies.github.endpoints[2].ports[0]: must be 1-65535\nfilesystem_policy.read_write[0]: / is never writable",
            &[
                (
                    "network_policies.github.endpoints[2].ports[0]",
                    "must be 1-65535",
                ),
                ("filesystem_policy.read_write[0]", "/ is never writable"),
            ],
        ));
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert_eq!(err.to_string(), "2 problems found");
        assert_eq!(
            err.violations(),
            &[
                FieldViolation {
                    field: "network_policies.github.endpoints[2].ports[0]".into(),
                    message: "must be 1-65535".into(),
                },
                FieldViolation {
                    field: "filesystem_policy.read_write[0]".into(),
                    message: "/ is never writable".into(),
                },
            ]
        );
    }

    /// The message is not parsed for field paths: text that merely looks like one is prose.
    #[test]
    fn a_message_without_details_has_no_violations() {
        let err = map(Status::invalid_argument("version: must be 1"));
        assert_eq!(err.to_string(), "version: must be 1");
        assert!(err.violations().is_empty());
        let err = map(Status::invalid_argument(
            "2 problems found\nversion: must be 1",
        ));
        assert_eq!(err.to_string(), "2 problems found");
        assert!(err.violations().is_empty());
    }

    #[test]
    fn a_document_level_violation_keeps_its_empty_field() {
        let err = map(bad_request(
            "policy is larger than 256 KiB",
            &[("", "policy is larger than 256 KiB")],
        ));
        assert_eq!(err.violations()[0].field, "");
    }

    #[test]
    fn unknown_other_code_name_falls_back() {
        let err = SdkError::Other {
            code: "SOMETHING_NEW".into(),
            message: "m".into(),
        };
        assert_eq!(err.code(), "UNKNOWN");
    }
}
