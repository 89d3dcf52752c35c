//! Names of sandboxes, workspaces and providers.
//!
//! They follow the DNS label rule so a name can be used unchanged in hostnames, labels and
//! paths by whatever runtime hosts the sandbox.

use crate::violation::Violation;

/// Longest allowed name, the DNS label limit.
pub const MAX_NAME_CHARS: usize = 63;

/// Prefixes the gateway gives its ids (`sb-…` sandboxes, `pv-…` providers, `op-…` operations,
/// `ss-…` sessions). A reference starting with one is read as an id, so a name may not.
pub const ID_PREFIXES: &[&str] = &["sb-", "pv-", "op-", "ss-"];

/// Checks a sandbox, workspace or provider name: 1–63 characters of lowercase letters, digits
/// and `-`, starting with a letter or digit, not ending with `-`, and not shaped like an id.
pub fn validate_name(field: &str, name: &str) -> Result<(), Violation> {
    let fail = |message: String| Err(Violation::new(field, message));
    if name.is_empty() {
        return fail("name is required (1-63 characters)".to_string());
    }
    let len = name.chars().count();
    if len > MAX_NAME_CHARS {
        return fail(format!(
            "name is {len} characters; the limit is {MAX_NAME_CHARS}"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return fail(format!(
            "name may contain only lowercase letters, digits and '-', found {bad:?}"
        ));
    }
    if name.starts_with('-') {
        return fail("name must start with a lowercase letter or digit".to_string());
    }
    if name.ends_with('-') {
        return fail("name must not end with '-'".to_string());
    }
    if let Some(prefix) = ID_PREFIXES.iter().find(|p| name.starts_with(**p)) {
        return fail(format!(
            "name must not start with {prefix:?}: references starting so are read as ids; choose another name"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dns_labels() {
        for name in ["a", "dev", "team-1", "0abc", "a-b-c", &"x".repeat(63)] {
            assert!(validate_name("name", name).is_ok(), "{name}");
        }
    }

    /// Probe defect 8: `sb-zzz` was accepted as a name but then every lookup read it as an id.
    #[test]
    fn rejects_names_shaped_like_ids() {
        for name in ["sb-zzz", "pv-github", "op-1", "ss-x"] {
            let v = validate_name("name", name).unwrap_err();
            assert!(v.message.contains("read as ids"), "{name}: {}", v.message);
        }
        for name in ["sb", "sbx-1", "sandbox-pv-", "my-sb-1"] {
            let ok = validate_name("name", name);
            assert!(ok.is_ok() || name.ends_with('-'), "{name}");
        }
    }

    #[test]
    fn rejects_empty() {
        let v = validate_name("sandbox.name", "").unwrap_err();
        assert_eq!(v.field, "sandbox.name");
        assert!(v.message.contains("required"));
    }

    #[test]
    fn rejects_too_long() {
        let v = validate_name("name", &"x".repeat(64)).unwrap_err();
        assert!(v.message.contains("64 characters"), "{v}");
        assert!(v.message.contains("63"), "{v}");
    }

    #[test]
    fn rejects_bad_characters() {
        for name in ["Dev", "dev_1", "dev.1", "dev 1", "dév"] {
            let v = validate_name("workspace", name).unwrap_err();
            assert_eq!(v.field, "workspace");
            assert!(v.message.contains("lowercase letters"), "{name}: {v}");
        }
    }

    #[test]
    fn rejects_leading_and_trailing_dash() {
        let v = validate_name("name", "-dev").unwrap_err();
        assert!(v.message.contains("start"), "{v}");
        let v = validate_name("name", "dev-").unwrap_err();
        assert!(v.message.contains("end"), "{v}");
    }
}
