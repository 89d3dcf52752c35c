//! The page size of every list call: one default, one limit, one refusal.

use crate::error::GatewayError;

/// Items a list call returns when asked for 0.
pub const DEFAULT_PAGE: u32 = 100;
/// Most items one list call returns. A larger page is refused, not cut: a client that
/// asked for more and got a page of 1,000 could not tell a cut page from the last one.
pub const MAX_PAGE: u32 = 1000;

/// The page size a list call asked for in `field` (`page_size`, or `limit` in upstream's
/// layout): [`DEFAULT_PAGE`] for 0, refused above [`MAX_PAGE`].
pub fn page_size(field: &str, requested: u32) -> Result<u32, GatewayError> {
    match requested {
        0 => Ok(DEFAULT_PAGE),
        n if n > MAX_PAGE => Err(GatewayError::invalid(
            field,
            format!("{n} is more than the limit of {MAX_PAGE} per page"),
        )),
        n => Ok(n),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn page_size_defaults_and_refuses_above_the_limit() {
        assert_eq!(page_size("page_size", 0).unwrap(), 100);
        assert_eq!(page_size("page_size", 1).unwrap(), 1);
        assert_eq!(page_size("page_size", 1000).unwrap(), 1000);
        let err = tonic::Status::from(page_size("limit", 1001).unwrap_err());
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            err.message(),
            "limit: 1001 is more than the limit of 1000 per page"
        );
    }
}
