//! Typed settings: values at a scope, effective values, and the registry.

use std::fmt;

use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::SettingScope;

/// A typed setting value; serializes as a plain JSON bool, number or string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SettingValue {
    Bool(bool),
    Int(i64),
    String(String),
}

impl SettingValue {
    pub(crate) fn from_proto(value: Option<pb::SettingValue>) -> Option<Self> {
        use pb::setting_value::Kind;
        match value?.kind? {
            Kind::BoolValue(b) => Some(Self::Bool(b)),
            Kind::IntValue(i) => Some(Self::Int(i)),
            Kind::StringValue(s) => Some(Self::String(s)),
        }
    }
}

impl fmt::Display for SettingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool(b) => write!(f, "{b}"),
            Self::Int(i) => write!(f, "{i}"),
            Self::String(s) => f.write_str(s),
        }
    }
}

/// One setting as stored at a scope, or as effective for a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    pub key: String,
    pub value: Option<SettingValue>,
    /// Scope the value comes from (`DEFAULT` when the registry default applies).
    pub scope: SettingScope,
}

impl From<pb::Setting> for Setting {
    fn from(p: pb::Setting) -> Self {
        Self {
            key: p.key,
            value: SettingValue::from_proto(p.value),
            scope: p.scope.into(),
        }
    }
}

/// What `get_settings` returns for one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeSettings {
    /// The scope that was read.
    pub scope: SettingScope,
    /// Values stored at that scope.
    pub values: Vec<Setting>,
    /// Revision of that scope.
    pub revision: u64,
    /// Sandbox scope only: every registry key with its effective value and source.
    pub effective: Vec<Setting>,
}

/// A key of the settings registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingDefinition {
    pub key: String,
    /// `"bool"`, `"int"`, `"string"` or `"enum"`.
    pub kind: String,
    pub default_value: Option<SettingValue>,
    /// Allowed values of enum keys.
    pub allowed_values: Vec<String>,
    pub description: String,
}

impl From<pb::SettingDefinition> for SettingDefinition {
    fn from(p: pb::SettingDefinition) -> Self {
        Self {
            key: p.key,
            kind: p.kind,
            default_value: SettingValue::from_proto(p.default_value),
            allowed_values: p.allowed_values,
            description: p.description,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn values_serialize_as_plain_json() {
        let values = vec![
            SettingValue::Bool(true),
            SettingValue::Int(42),
            SettingValue::String("info".into()),
        ];
        let json = serde_json::to_string(&values).unwrap();
        assert_eq!(json, r#"[true,42,"info"]"#);
        let back: Vec<SettingValue> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, values);
    }

    #[test]
    fn converts_wire_setting() {
        let s = Setting::from(pb::Setting {
            key: "log_level".into(),
            value: Some(pb::SettingValue {
                kind: Some(pb::setting_value::Kind::StringValue("debug".into())),
            }),
            scope: pb::SettingScope::Global as i32,
        });
        assert_eq!(s.value, Some(SettingValue::String("debug".into())));
        assert_eq!(s.scope, SettingScope::Global);
        let unset = Setting::from(pb::Setting::default());
        assert_eq!(unset.value, None);
    }
}
