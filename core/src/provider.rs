//! Provider values and the names they are keyed by.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::secret::Secret;
use crate::violation::Violation;

/// Longest provider type name.
pub const MAX_PROVIDER_TYPE_CHARS: usize = 63;
/// Longest environment variable name.
pub const MAX_ENV_NAME_CHARS: usize = 256;

/// Whether a provider value may be shown and logged, or must be treated as a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ValueClass {
    NonSecret,
    Credential,
}

impl ValueClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ValueClass::NonSecret => "NON_SECRET",
            ValueClass::Credential => "CREDENTIAL",
        }
    }
}

impl fmt::Display for ValueClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ValueClass {
    type Err = Violation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "NON_SECRET" => Ok(ValueClass::NonSecret),
            "CREDENTIAL" => Ok(ValueClass::Credential),
            other => Err(Violation::new(
                "class",
                format!("unknown value class {other:?}; expected NON_SECRET or CREDENTIAL"),
            )),
        }
    }
}

/// One provider value together with its class. The credential variant keeps its value inside
/// [`Secret`], so `Debug` and `Display` of a `ProviderValue` never show a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderValue {
    Plain(String),
    Credential(Secret),
}

impl ProviderValue {
    pub fn class(&self) -> ValueClass {
        match self {
            ProviderValue::Plain(_) => ValueClass::NonSecret,
            ProviderValue::Credential(_) => ValueClass::Credential,
        }
    }

    /// The raw value, for handing to the sandbox environment.
    pub fn expose(&self) -> &str {
        match self {
            ProviderValue::Plain(v) => v,
            ProviderValue::Credential(s) => s.expose(),
        }
    }

    pub fn new(class: ValueClass, value: impl Into<String>) -> Self {
        match class {
            ValueClass::NonSecret => ProviderValue::Plain(value.into()),
            ValueClass::Credential => ProviderValue::Credential(Secret::new(value)),
        }
    }
}

impl fmt::Display for ProviderValue {
    /// Plain values are safe to show; credentials print as `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderValue::Plain(v) => f.write_str(v),
            ProviderValue::Credential(s) => fmt::Display::fmt(s, f),
        }
    }
}

/// Checks a provider type such as `github` or `openai`: 1–63 characters of `[a-z0-9_-]`.
pub fn validate_provider_type(t: &str) -> Result<(), Violation> {
    let fail = |message: String| Err(Violation::new("type", message));
    if t.is_empty() {
        return fail("provider type is required".to_string());
    }
    let len = t.chars().count();
    if len > MAX_PROVIDER_TYPE_CHARS {
        return fail(format!(
            "provider type is {len} characters; the limit is {MAX_PROVIDER_TYPE_CHARS}"
        ));
    }
    if let Some(bad) = t.chars().find(|c| !is_slug_char(*c)) {
        return fail(format!(
            "provider type may contain only lowercase letters, digits, '_' and '-', found {bad:?}"
        ));
    }
    Ok(())
}

/// Checks an environment variable name against the POSIX rule `[A-Za-z_][A-Za-z0-9_]*`, at most
/// 256 characters. The violation's field is `{field_prefix}.{name}` (or `field_prefix` alone
/// for an empty name) so the operator sees which entry is wrong.
pub fn validate_env_name(field_prefix: &str, name: &str) -> Result<(), Violation> {
    let field = if name.is_empty() || field_prefix.is_empty() {
        if field_prefix.is_empty() {
            name.to_string()
        } else {
            field_prefix.to_string()
        }
    } else {
        format!("{field_prefix}.{name}")
    };
    let fail = |message: String| Err(Violation::new(field.clone(), message));
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return fail("environment variable name is empty".to_string());
    };
    let len = name.chars().count();
    if len > MAX_ENV_NAME_CHARS {
        return fail(format!(
            "environment variable name is {len} characters; the limit is {MAX_ENV_NAME_CHARS}"
        ));
    }
    if !(first.is_ascii_alphabetic() || first == '_') {
        return fail(format!(
            "environment variable name must start with a letter or '_', found {first:?}"
        ));
    }
    if let Some(bad) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_')) {
        return fail(format!(
            "environment variable name may contain only letters, digits and '_', found {bad:?}"
        ));
    }
    Ok(())
}

/// Checks that a value can be handed to a process as an environment variable: the C
/// environment ends a value at its first NUL byte, so such a value cannot arrive whole. The
/// violation names the variable, never the value (it may be a credential).
pub fn validate_env_value(field: &str, name: &str, value: &str) -> Result<(), Violation> {
    if value.contains('\0') {
        return Err(Violation::new(
            field,
            format!(
                "the value of {name} contains a NUL byte, which an environment variable cannot hold"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn is_slug_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn value_class_serde_names() {
        assert_eq!(
            serde_json::to_string(&ValueClass::NonSecret).unwrap(),
            "\"NON_SECRET\""
        );
        assert_eq!(
            serde_json::to_string(&ValueClass::Credential).unwrap(),
            "\"CREDENTIAL\""
        );
        let c: ValueClass = serde_json::from_str("\"CREDENTIAL\"").unwrap();
        assert_eq!(c, ValueClass::Credential);
        assert_eq!(
            "NON_SECRET".parse::<ValueClass>().unwrap(),
            ValueClass::NonSecret
        );
        assert!("secret".parse::<ValueClass>().is_err());
        assert_eq!(ValueClass::Credential.to_string(), "CREDENTIAL");
    }

    #[test]
    fn provider_value_class_and_redaction() {
        let plain = ProviderValue::Plain("https://api.example.com".to_string());
        let cred = ProviderValue::Credential(Secret::new("tok-123456"));
        assert_eq!(plain.class(), ValueClass::NonSecret);
        assert_eq!(cred.class(), ValueClass::Credential);
        assert_eq!(plain.to_string(), "https://api.example.com");
        assert_eq!(cred.to_string(), "***");
        assert!(!format!("{cred:?}").contains("tok-123456"));
        assert_eq!(cred.expose(), "tok-123456");
        assert_eq!(
            ProviderValue::new(ValueClass::Credential, "x").class(),
            ValueClass::Credential
        );
        assert_eq!(
            ProviderValue::new(ValueClass::NonSecret, "x"),
            ProviderValue::Plain("x".to_string())
        );
    }

    #[test]
    fn provider_type_rules() {
        for ok in ["github", "openai", "my_provider-2", &"a".repeat(63)] {
            assert!(validate_provider_type(ok).is_ok(), "{ok}");
        }
        let v = validate_provider_type("").unwrap_err();
        assert_eq!(v.field, "type");
        assert!(v.message.contains("required"));
        let v = validate_provider_type("GitHub").unwrap_err();
        assert!(v.message.contains("lowercase"), "{v}");
        let v = validate_provider_type("a.b").unwrap_err();
        assert!(v.message.contains("'.'"), "{v}");
        let v = validate_provider_type(&"a".repeat(64)).unwrap_err();
        assert!(v.message.contains("63"), "{v}");
    }

    #[test]
    fn env_name_rules() {
        for ok in ["PATH", "_x", "GITHUB_TOKEN", "a1", &"A".repeat(256)] {
            assert!(validate_env_name("env", ok).is_ok(), "{ok}");
        }
        let v = validate_env_name("env", "1ABC").unwrap_err();
        assert_eq!(v.field, "env.1ABC");
        assert!(v.message.contains("start with a letter"), "{v}");
        let v = validate_env_name("credentials", "MY-TOKEN").unwrap_err();
        assert_eq!(v.field, "credentials.MY-TOKEN");
        assert!(v.message.contains("'-'"), "{v}");
        let v = validate_env_name("env", "").unwrap_err();
        assert_eq!(v.field, "env");
        assert!(v.message.contains("empty"));
        let v = validate_env_name("env", &"A".repeat(257)).unwrap_err();
        assert!(v.message.contains("256"), "{v}");
        let v = validate_env_name("env", "A B").unwrap_err();
        assert!(v.message.contains("' '"), "{v}");
    }
}
