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

/// The page size of a list request's `field`, as the store's row limit.
pub fn page(field: &str, size: u32) -> Result<i64, tonic::Status> {
    Ok(i64::from(page_size(field, size)?))
}

/// [`page`] of upstream's signed page sizes: a negative size is refused.
pub fn signed_page(field: &str, size: i32) -> Result<i64, tonic::Status> {
    let size = u32::try_from(size).map_err(|_| {
        GatewayError::invalid(
            field,
            format!("{size} is negative; expected 0 (the default) to {MAX_PAGE}"),
        )
    })?;
    page(field, size)
}

pub fn offset(token: &str) -> Result<i64, tonic::Status> {
    if token.is_empty() {
        return Ok(0);
    }
    token
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            GatewayError::invalid("page_token", "not a token from a previous response").into()
        })
}

pub fn next_token(offset: i64, limit: i64, returned: usize) -> String {
    if i64::try_from(returned).unwrap_or(i64::MAX) < limit {
        String::new()
    } else {
        (offset + limit).to_string()
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
