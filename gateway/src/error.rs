//! The gateway's domain error, and the one mapping of it (the store's error
//! inside it included) to gRPC status codes, done only at the API edge.

use openshell_core::Violation;
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use crate::store::StoreError;

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
    /// The sandbox's configuration must not reach its supervisor now (it is stopped or
    /// deleted); a session that asks for it is closed with this reason.
    #[error("{0}")]
    Undeliverable(String),
    /// The caller is not who it claims to be.
    #[error("{0}")]
    Unauthenticated(String),
    /// The store failed or reported a missing row or a taken name; database
    /// details are logged, not returned.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The gateway cannot serve the request now (it is stopping); retry.
    #[error("{0}")]
    Unavailable(String),
    /// Stored data the domain reads (a policy, sealed credentials) could not
    /// be decoded or sealed (corruption or a bad key).
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

/// Most field violations carried in a status's `google.rpc.BadRequest` details: they travel in
/// a response header too, so they are bounded like the message.
pub const MAX_DETAILED_VIOLATIONS: usize = 64;

impl From<GatewayError> for tonic::Status {
    fn from(err: GatewayError) -> Self {
        let status = unbounded_status(err);
        // INVALID_ARGUMENT is bounded as it is built: cutting it again here
        // would drop its details.
        if status.code() == tonic::Code::InvalidArgument
            || status.message().len() <= MAX_STATUS_LINE_CHARS
        {
            return status;
        }
        tonic::Status::new(status.code(), bounded_message(status.message()))
    }
}

/// INVALID_ARGUMENT with every violation twice: as the standard `google.rpc.BadRequest` details,
/// which SDKs read field paths from, and as `field: message` lines under the summary for
/// people and for clients that read only the message.
fn invalid_argument(summary: String, violations: &[Violation]) -> tonic::Status {
    let message = match violations {
        [one] => one.to_string(),
        many => std::iter::once(summary)
            .chain(many.iter().map(ToString::to_string))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let details = ErrorDetails::with_bad_request(
        violations
            .iter()
            .take(MAX_DETAILED_VIOLATIONS)
            .map(|v| FieldViolation::new(bounded_line(&v.field), bounded_line(&v.message)))
            .collect::<Vec<_>>(),
    );
    tonic::Status::with_error_details(
        tonic::Code::InvalidArgument,
        bounded_message(&message),
        details,
    )
}

fn unbounded_status(err: GatewayError) -> tonic::Status {
    match err {
        GatewayError::Invalid {
            summary,
            violations,
        } => invalid_argument(summary, &violations),
        GatewayError::NotFound(m) => tonic::Status::not_found(m),
        GatewayError::AlreadyExists(m) => tonic::Status::already_exists(m),
        GatewayError::FailedPrecondition(m) | GatewayError::Undeliverable(m) => {
            tonic::Status::failed_precondition(m)
        }
        GatewayError::Unauthenticated(m) => tonic::Status::unauthenticated(m),
        GatewayError::Unavailable(m) => tonic::Status::unavailable(m),
        GatewayError::Store(e) => store_status(e),
        GatewayError::Corrupt(m) => corrupt(&m),
    }
}

/// A store failure as the client sees it: a missing row or a taken name as
/// such, anything from the database itself as a generic message with the
/// detail in the log (it may quote SQL, hosts or rows).
fn store_status(err: StoreError) -> tonic::Status {
    match err {
        StoreError::NotFound(m) => tonic::Status::not_found(m),
        StoreError::AlreadyExists(m) => tonic::Status::already_exists(m),
        StoreError::Unavailable(m) => tonic::Status::unavailable(m),
        StoreError::Corrupt(m) => corrupt(&m),
        StoreError::BadUrl(m) => invalid_argument(
            format!("database_url: {m}"),
            &[Violation::new("database_url", m)],
        ),
        // Said apart from an outage: retrying soon will not help, freeing space will, and
        // the database rolled the write back.
        err @ StoreError::Database(_) if err.is_disk_full() => {
            tracing::error!(error = %err, "store out of disk space");
            tonic::Status::resource_exhausted(
                "the gateway's store is out of disk space: the write was not made; retry once \
                 space is freed",
            )
        }
        StoreError::Database(e) => {
            tracing::error!(error = %e, "store error");
            tonic::Status::unavailable("the gateway's store is unavailable; retry later")
        }
    }
}

fn corrupt(detail: &str) -> tonic::Status {
    tracing::error!(error = %detail, "stored data unreadable");
    tonic::Status::internal("stored data is unreadable; see the gateway log")
}

pub type Result<T, E = GatewayError> = std::result::Result<T, E>;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::{Store, sqlite_for_tests};

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

    /// Field paths travel as standard `google.rpc.BadRequest` details, so clients need not
    /// read them back out of the message.
    #[test]
    fn violations_travel_as_bad_request_details() {
        use tonic_types::StatusExt;
        let status = tonic::Status::from(GatewayError::from_violations(vec![
            Violation::new(
                "policy.network_policies.gh.endpoints[0].port",
                "must be 1-65535",
            ),
            Violation::new("settings.log_level", "expected one of trace, debug"),
        ]));
        let details = status.get_details_bad_request().unwrap();
        let fields: Vec<&str> = details
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "policy.network_policies.gh.endpoints[0].port",
                "settings.log_level"
            ]
        );
        assert_eq!(details.field_violations[0].description, "must be 1-65535");
        assert!(status.message().starts_with("2 problems found\n"));
    }

    async fn insert_sandbox(store: &Store, id: &str, name: &str) -> Result<(), StoreError> {
        let mut tx = store.begin_write().await?;
        tx.ensure_workspace("default").await?;
        tx.insert_sandbox(id, name, "default", "hash").await?;
        tx.commit().await
    }

    /// A name taken in the store reaches the client as ALREADY_EXISTS naming it, not as a
    /// failed store.
    #[tokio::test]
    async fn a_taken_name_is_already_exists() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        insert_sandbox(&store, "sb-1", "web").await.unwrap();
        let err = insert_sandbox(&store, "sb-2", "web").await.unwrap_err();
        let status = tonic::Status::from(GatewayError::from(err));
        assert_eq!(status.code(), tonic::Code::AlreadyExists);
        assert_eq!(
            status.message(),
            r#"a sandbox named "web" already exists in workspace "default""#
        );
    }

    /// A store that cannot be reached is UNAVAILABLE, and the client gets no database
    /// detail, only the generic message.
    #[tokio::test]
    async fn an_unreachable_store_is_unavailable_without_detail() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        store.close().await;
        let err = store.get_sandbox("sb-1").await.unwrap_err();
        assert!(matches!(err, StoreError::Database(_)), "{err:?}");
        let status = tonic::Status::from(GatewayError::from(err));
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(
            status.message(),
            "the gateway's store is unavailable; retry later"
        );
    }

    /// A write the database refused for want of space (SQLite's page limit makes the same
    /// SQLITE_FULL a full disk does) is RESOURCE_EXHAUSTED naming the full disk and saying the
    /// write was not made, without the driver's text; an outage stays UNAVAILABLE.
    #[tokio::test]
    async fn a_full_disk_is_resource_exhausted_saying_the_write_was_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        let mut tx = store.begin_write().await.unwrap();
        let full = sqlx::raw_sql(
            "CREATE TABLE filler (x BLOB); PRAGMA max_page_count = 1; \
             INSERT INTO filler VALUES (zeroblob(1000000));",
        )
        .execute(tx.conn())
        .await
        .unwrap_err();
        let err = StoreError::Database(full);
        assert!(err.is_disk_full(), "{err:?}");
        let status = tonic::Status::from(GatewayError::from(err));
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "the gateway's store is out of disk space: the write was not made; retry once space \
             is freed"
        );
        drop(tx);

        store.close().await;
        let closed = store.get_sandbox("sb-1").await.unwrap_err();
        assert!(!closed.is_disk_full(), "{closed:?}");
    }

    #[test]
    fn short_messages_pass_unchanged() {
        let status = tonic::Status::from(GatewayError::invalid("policy.version", "must be 1"));
        assert_eq!(status.message(), "policy.version: must be 1");
    }
}
