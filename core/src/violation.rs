//! A single validation finding, addressed by the field path an operator would edit.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One validation problem.
///
/// `field` is a dotted path into the checked document, with list indices in brackets, e.g.
/// `network_policies.github.endpoints[2].ports[0]`. It is empty when the problem concerns the
/// document as a whole (too large, not parseable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub field: String,
    pub message: String,
}

impl Violation {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A problem with the document as a whole rather than one field.
    pub fn document(message: impl Into<String>) -> Self {
        Self::new("", message)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for Violation {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn display_with_field() {
        let v = Violation::new("version", "must be 1");
        assert_eq!(v.to_string(), "version: must be 1");
    }

    #[test]
    fn display_without_field() {
        let v = Violation::document("policy is empty");
        assert_eq!(v.to_string(), "policy is empty");
        assert_eq!(v.field, "");
    }

    #[test]
    fn serde_round_trip() {
        let v = Violation::new("a.b[0]", "bad");
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(json, r#"{"field":"a.b[0]","message":"bad"}"#);
        let back: Violation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v);
    }
}
