//! The gateway's domain error, and the one mapping of it (the store's error
//! inside it included) to gRPC status codes, done only at the API edge.

use openshell_core::Violation;
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use crate::store::{Constraint, StoreError};

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

/// Longest line of a status message, in bytes: a violation or a reason. Errors may quote
/// input (a name, a value, a parser's view of a document), and an unbounded quote of a
/// megabyte-sized input would overflow the response headers.
pub const MAX_STATUS_LINE_BYTES: usize = 512;

/// Most bytes a status takes in the response's headers: its `grpc-message` (percent-encoded,
/// so a space or a non-ASCII byte takes three) and its `grpc-status-details-bin` (base64 of a
/// `google.rpc.Status` that repeats the message and carries the field violations), together.
/// Clients bound the header list they accept as a whole: hyper (the Rust SDK and the CLI) at
/// 16 KiB, where it fails the call with an h2 protocol error, and gRPC core (grpc-python) at
/// 8 KiB, where it reports RESOURCE_EXHAUSTED; either way the client never sees the error.
/// Half of the smaller bound leaves room for the other headers.
pub const MAX_STATUS_HEADER_BYTES: usize = 4 * 1024;

/// Lines or violations a bounded status can list at most: each costs at least the three
/// bytes of an encoded newline, so more never fit, and a status of a million violations is
/// not built a million lines long only to be cut.
const MAX_STATUS_ITEMS: usize = MAX_STATUS_HEADER_BYTES / 3;

/// Cuts a line of a status message to [`MAX_STATUS_LINE_BYTES`] (at a character boundary),
/// saying so.
fn bounded_line(line: &str) -> String {
    if line.len() <= MAX_STATUS_LINE_BYTES {
        return line.to_string();
    }
    let mut cut = MAX_STATUS_LINE_BYTES;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} more bytes cut)", &line[..cut], line.len() - cut)
}

/// What a status adds to the response headers: the encoded message and details.
fn header_bytes(status: &tonic::Status) -> usize {
    let mut headers = http::HeaderMap::new();
    if status.add_header(&mut headers).is_err() {
        return usize::MAX;
    }
    ["grpc-message", "grpc-status-details-bin"]
        .iter()
        .filter_map(|name| headers.get(*name))
        .map(http::HeaderValue::len)
        .sum()
}

/// `build(k)` for the largest `k` of `least..=most` whose headers fit in
/// [`MAX_STATUS_HEADER_BYTES`]; `build(least)` when none does (it must be small: `least`
/// lines of at most [`MAX_STATUS_LINE_BYTES`]). The size grows with `k`, so a binary search
/// finds it in a few builds.
fn largest_fitting(
    least: usize,
    most: usize,
    build: impl Fn(usize) -> tonic::Status,
) -> tonic::Status {
    let all = build(most);
    if most <= least || header_bytes(&all) <= MAX_STATUS_HEADER_BYTES {
        return all;
    }
    let (mut fits, mut too_big) = (least, most);
    while too_big - fits > 1 {
        let mid = fits + (too_big - fits) / 2;
        if header_bytes(&build(mid)) <= MAX_STATUS_HEADER_BYTES {
            fits = mid;
        } else {
            too_big = mid;
        }
    }
    build(fits)
}

/// A status of `code` whose message is `message`, bounded line by line and then as many of
/// its lines as fit, the rest counted in a last line.
fn bounded_status(code: tonic::Code, message: &str) -> tonic::Status {
    let lines: Vec<String> = message
        .split('\n')
        .take(MAX_STATUS_ITEMS + 1)
        .map(bounded_line)
        .collect();
    let total = message.split('\n').count();
    largest_fitting(1, lines.len().min(MAX_STATUS_ITEMS), |kept| {
        let mut text = lines[..kept].join("\n");
        if kept < total {
            text.push_str(&format!("\n… and {} more line(s)", total - kept));
        }
        tonic::Status::new(code, text)
    })
}

impl From<GatewayError> for tonic::Status {
    fn from(err: GatewayError) -> Self {
        let status = unbounded_status(err);
        // INVALID_ARGUMENT is bounded as it is built: cutting it again here
        // would drop its details.
        if status.code() == tonic::Code::InvalidArgument
            || header_bytes(&status) <= MAX_STATUS_HEADER_BYTES
        {
            return status;
        }
        bounded_status(status.code(), status.message())
    }
}

/// The last line of a list cut short, and the last field violation of its details.
fn more_violations(left_out: usize) -> String {
    format!("… and {left_out} more violations")
}

/// INVALID_ARGUMENT with every violation twice: as the standard `google.rpc.BadRequest` details,
/// which SDKs read field paths from, and as `field: message` lines under the summary for
/// people and for clients that read only the message.
///
/// Both travel in the response headers, so together they are bounded to
/// [`MAX_STATUS_HEADER_BYTES`]: each line is cut to [`MAX_STATUS_LINE_BYTES`], and only the
/// first violations that fit are listed, in the message and in the details alike, each list
/// ending with "… and N more violations".
fn invalid_argument(summary: String, violations: &[Violation]) -> tonic::Status {
    let lines: Vec<(String, String, String)> = violations
        .iter()
        .take(MAX_STATUS_ITEMS)
        .map(|v| {
            (
                bounded_line(&v.to_string()),
                bounded_line(&v.field),
                bounded_line(&v.message),
            )
        })
        .collect();
    let total = violations.len();
    let summary = bounded_line(&summary);
    let build = |kept: usize| {
        let left_out = total - kept;
        let listed = lines[..kept].iter().map(|(line, _, _)| line.clone());
        let message = match lines.as_slice() {
            [(one, _, _)] if total == 1 => one.clone(),
            _ => std::iter::once(summary.clone())
                .chain(listed)
                .chain((left_out > 0).then(|| more_violations(left_out)))
                .collect::<Vec<_>>()
                .join("\n"),
        };
        let details = ErrorDetails::with_bad_request(
            lines[..kept]
                .iter()
                .map(|(_, field, message)| FieldViolation::new(field.clone(), message.clone()))
                .chain((left_out > 0).then(|| FieldViolation::new("", more_violations(left_out))))
                .collect::<Vec<_>>(),
        );
        tonic::Status::with_error_details(tonic::Code::InvalidArgument, message, details)
    };
    // A single violation is always listed: it is the whole message.
    largest_fitting(usize::from(total == 1), lines.len(), build)
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
        // The callers that know which object is gone or taken say so themselves; this is
        // the answer to any other write the database refused. Not an outage, so neither
        // UNAVAILABLE (which clients retry) nor an ERROR in the log.
        StoreError::Constraint { kind, source } => {
            tracing::warn!(error = %source, constraint = %kind, "store refused a write");
            constraint_status(kind)
        }
        // Said apart from an outage: retrying soon will not help, freeing space will, and
        // the database rolled the write back.
        err @ StoreError::Database(_) if err.is_disk_full() => {
            tracing::error!(error = %err, "store out of disk space");
            tonic::Status::resource_exhausted(
                "the gateway's store is out of disk space: the write was not made; retry once \
                 space is freed",
            )
        }
        open @ StoreError::Open { .. } => {
            tracing::error!(error = %open, "store error");
            tonic::Status::unavailable("the gateway's store is unavailable; retry later")
        }
        StoreError::Database(e) => {
            tracing::error!(error = %e, "store error");
            tonic::Status::unavailable("the gateway's store is unavailable; retry later")
        }
    }
}

fn constraint_status(kind: Constraint) -> tonic::Status {
    match kind {
        Constraint::ForeignKey => tonic::Status::failed_precondition(
            "the write refers to an object deleted meanwhile, or deletes one that is still in \
             use; nothing was written: read the objects again and retry",
        ),
        Constraint::Unique => tonic::Status::already_exists(
            "an object with the same name or key was written meanwhile; nothing was written",
        ),
        Constraint::Check => tonic::Status::failed_precondition(
            "a value of the write is outside what the store allows; nothing was written",
        ),
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
        assert!(status.message().len() < MAX_STATUS_LINE_BYTES + 64);
        assert!(status.message().contains("more bytes cut"));

        let many: Vec<Violation> = (0..500)
            .map(|i| Violation {
                field: format!("values[{i}].name"),
                message: huge[..2000].to_string(),
            })
            .collect();
        let status = tonic::Status::from(GatewayError::from_violations(many));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(header_bytes(&status) <= MAX_STATUS_HEADER_BYTES);
        assert!(
            status
                .message()
                .starts_with("500 problems found\nvalues[0].name: ")
        );
        assert!(status.message().ends_with("more violations"));

        // Many lines of spaces and non-ASCII text, each byte of which the header encodes
        // as three.
        let lines = (0..2000)
            .map(|i| format!("line {i}: {}", "é ".repeat(100)))
            .collect::<Vec<_>>()
            .join("\n");
        let status = tonic::Status::from(GatewayError::FailedPrecondition(lines));
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(header_bytes(&status) <= MAX_STATUS_HEADER_BYTES);
        assert!(status.message().starts_with("line 0: é é"));
        assert!(
            status.message().ends_with("more line(s)"),
            "{}",
            status.message()
        );
    }

    /// A line is cut by bytes, at a character boundary: 512 characters of four bytes each
    /// are 6 KiB once percent-encoded.
    #[test]
    fn a_line_of_wide_characters_is_cut_by_bytes() {
        let line = bounded_line(&"🦀".repeat(600));
        assert!(line.starts_with(&"🦀".repeat(128)), "{line}");
        assert!(line.ends_with("… (1888 more bytes cut)"), "{line}");
        let status = tonic::Status::from(GatewayError::invalid("name", "🦀".repeat(600)));
        assert!(header_bytes(&status) <= MAX_STATUS_HEADER_BYTES);
    }

    /// Probe: 2,000 bad ports under a 200-character policy key made a
    /// `grpc-status-details-bin` of about 27 KB (only the message was bounded); the CLI saw
    /// an h2 protocol error and grpc-python RESOURCE_EXHAUSTED. The message and details
    /// together now fit the header budget, and both say how many violations were left out.
    #[test]
    fn many_long_violations_fit_the_header_budget_and_say_how_many_are_left_out() {
        use tonic_types::StatusExt;
        let key = "k".repeat(200);
        let violations: Vec<Violation> = (0..2000)
            .map(|i| {
                Violation::new(
                    format!("network_policies.{key}.endpoints[{i}].port"),
                    "must be 1-65535, got 70000",
                )
            })
            .collect();
        let status = tonic::Status::from(GatewayError::from_violations(violations));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            header_bytes(&status) <= MAX_STATUS_HEADER_BYTES,
            "{} bytes of headers",
            header_bytes(&status)
        );
        let details = status.get_details_bad_request().unwrap();
        let (last, listed) = details.field_violations.split_last().unwrap();
        assert!(!listed.is_empty());
        let left_out = 2000 - listed.len();
        assert_eq!(last.field, "");
        assert_eq!(
            last.description,
            format!("… and {left_out} more violations")
        );
        assert_eq!(
            listed[0].field,
            format!("network_policies.{key}.endpoints[0].port")
        );
        assert_eq!(listed[0].description, "must be 1-65535, got 70000");
        let lines: Vec<&str> = status.message().lines().collect();
        assert_eq!(lines[0], "2000 problems found");
        assert_eq!(lines.len(), listed.len() + 2, "{}", status.message());
        assert_eq!(
            lines[1],
            format!("network_policies.{key}.endpoints[0].port: must be 1-65535, got 70000")
        );
        assert_eq!(
            lines.last().copied(),
            Some(format!("… and {left_out} more violations").as_str())
        );
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

    /// Probe: an attach racing a provider delete answered UNAVAILABLE "store is unavailable"
    /// (and logged an ERROR) for the foreign key the database enforced. A constraint the
    /// database enforces is told apart from an outage, and never answered UNAVAILABLE.
    #[tokio::test]
    async fn a_broken_constraint_is_not_an_outage() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_for_tests(dir.path()).await;
        insert_sandbox(&store, "sb-1", "web").await.unwrap();
        let mut tx = store.begin_write().await.unwrap();
        let err = tx.attach("sb-1", "pv-gone").await.unwrap_err();
        assert_eq!(err.constraint(), Some(Constraint::ForeignKey), "{err:?}");
        let status = tonic::Status::from(GatewayError::from(err));
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert!(
            status.message().contains("nothing was written"),
            "{status:?}"
        );
        drop(tx);

        let mut tx = store.begin_write().await.unwrap();
        let taken = sqlx::query("INSERT INTO workspaces (name, created_at) VALUES ('default', 0)")
            .execute(tx.conn())
            .await
            .unwrap_err();
        let err = StoreError::from(taken);
        assert!(err.is_unique_violation(), "{err:?}");
        let status = tonic::Status::from(GatewayError::from(err));
        assert_eq!(status.code(), tonic::Code::AlreadyExists, "{status:?}");
    }

    #[test]
    fn short_messages_pass_unchanged() {
        let status = tonic::Status::from(GatewayError::invalid("policy.version", "must be 1"));
        assert_eq!(status.message(), "policy.version: must be 1");
    }
}
