//! `policy validate`'s check of a policy file, offline. Apart from the command so that the
//! generated reference (`docs.rs`) can show its result without reaching into `commands/`.

use openshell_core::policy::parse_and_validate;
use openshell_sdk::FieldViolation;
use serde::Serialize;

/// The result of `policy validate`, also its JSON and YAML shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Validation {
    pub valid: bool,
    /// Every problem, each with the field path to edit (empty when it
    /// concerns the whole document).
    pub violations: Vec<FieldViolation>,
}

impl Validation {
    /// Checks policy text with `openshell-core`, the code the gateway runs.
    pub fn of(text: &str) -> Self {
        match parse_and_validate(text) {
            Ok(_) => Self {
                valid: true,
                violations: Vec::new(),
            },
            Err(err) => Self {
                valid: false,
                violations: err
                    .violations()
                    .into_iter()
                    .map(|v| FieldViolation {
                        field: v.field,
                        message: v.message,
                    })
                    .collect(),
            },
        }
    }
}
