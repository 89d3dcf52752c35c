//! The one crossing of `SdkError` into JavaScript.
//!
//! napi rejects a promise with a plain `Error` whose only free-form part is
//! the message, so the message carries a small JSON document (`code`,
//! `message`, `violations`) that `errors.js` turns into the exported error
//! classes. Keeping the encoding here and the decoding there means the code
//! strings come from `SdkError::code()` alone and cannot drift.

use napi::Status;
use openshell_sdk::{FieldViolation, SdkError};

pub(crate) fn to_napi(err: SdkError) -> napi::Error {
    let payload = serde_json::json!({
        "code": err.code(),
        "message": err.to_string(),
        "violations": err.violations(),
    });
    napi::Error::new(Status::GenericFailure, payload.to_string())
}

/// An input the binding itself refuses, shaped like a gateway rejection so
/// callers handle both the same way.
pub(crate) fn invalid(field: &str, message: impl Into<String>) -> SdkError {
    let message = message.into();
    SdkError::InvalidArgument {
        message: format!("{field}: {message}"),
        violations: vec![FieldViolation {
            field: field.to_owned(),
            message,
        }],
    }
}

/// Lets call sites use `?` on sdk results inside napi functions.
pub(crate) trait IntoNapi<T> {
    fn into_napi(self) -> napi::Result<T>;
}

impl<T> IntoNapi<T> for Result<T, SdkError> {
    fn into_napi(self) -> napi::Result<T> {
        self.map_err(to_napi)
    }
}
