//! Comparing a sandbox's current policy with a policy file: for `policy
//! diff`, and to show what a network-removing `policy set` changes before
//! asking.
//!
//! Both sides are parsed and rendered by `openshell-core` first, so
//! comments, key order and flow style in the file are not differences;
//! only content is. Validation stays with the gateway.

use openshell_core::policy::{SandboxPolicy as PolicyDoc, parse_policy};
use serde::Serialize;
use similar::TextDiff;

use crate::exit::UsageError;
use crate::output::sanitize;
use crate::progress::paint;

/// The result of `policy diff`, also its JSON and YAML shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyDiff {
    /// The file's policy differs in content from the current one.
    pub changed: bool,
    /// Network policies that lose reach (removed, or a host/port no longer
    /// covered), sorted; what `policy set` asks to confirm.
    pub removed_network_access: Vec<String>,
    /// Unified diff of the two normalized policies; empty when unchanged.
    pub diff: String,
    /// Static sections the file omits, which `policy set` keeps from the
    /// current policy and the comparison therefore takes from it too.
    pub kept_static_sections: Vec<String>,
}

/// Parses policy text the way the gateway reads it; a bad file is the
/// caller's mistake (exit 2), reported with the parser's reason.
pub fn parse(text: &str, source: &str) -> Result<PolicyDoc, UsageError> {
    parse_policy(text).map_err(|e| UsageError(format!("{source} is not a valid policy: {e}")))
}

/// Compares `current` (none when the sandbox has no policy yet) with `new`.
///
/// Static sections `new` omits are taken from `current` first, as the
/// gateway does when the file is set, so leaving them out is no difference.
pub fn compare(
    current: Option<&PolicyDoc>,
    new: &PolicyDoc,
    current_label: &str,
    new_label: &str,
) -> PolicyDiff {
    let (new, kept_static_sections) = match current {
        Some(current) => keep_static_sections(current, new),
        None => (new.clone(), Vec::new()),
    };
    let new = &new;
    let old_text = current.map(PolicyDoc::to_yaml).unwrap_or_default();
    let new_text = new.to_yaml();
    let changed = current != Some(new);
    PolicyDiff {
        changed,
        removed_network_access: current
            .map(|c| c.removes_network_access(new))
            .unwrap_or_default(),
        diff: if changed {
            unified(&old_text, &new_text, current_label, new_label)
        } else {
            String::new()
        },
        kept_static_sections,
    }
}

/// `new` with the static sections it omits taken from `current`, and their names.
fn keep_static_sections(current: &PolicyDoc, new: &PolicyDoc) -> (PolicyDoc, Vec<String>) {
    let mut merged = new.clone();
    let mut kept = Vec::new();
    if merged.filesystem_policy.is_none() && current.filesystem_policy.is_some() {
        merged
            .filesystem_policy
            .clone_from(&current.filesystem_policy);
        kept.push("filesystem_policy".to_owned());
    }
    if merged.landlock.is_none() && current.landlock.is_some() {
        merged.landlock.clone_from(&current.landlock);
        kept.push("landlock".to_owned());
    }
    if merged.process.is_none() && current.process.is_some() {
        merged.process.clone_from(&current.process);
        kept.push("process".to_owned());
    }
    (merged, kept)
}

/// A unified diff with three lines of context, like `diff -u`.
pub fn unified(old: &str, new: &str, old_label: &str, new_label: &str) -> String {
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_label, new_label)
        .missing_newline_hint(false)
        .to_string()
}

/// Colors removed lines red and added lines green, when color is on; the
/// text of the policies and their labels is sanitized either way.
pub fn colorize(diff: &str, color: bool) -> String {
    if !color {
        return sanitize(diff).into_owned();
    }
    let mut out = String::with_capacity(diff.len());
    for line in diff.lines() {
        let line = &*sanitize(line);
        let painted = match line.as_bytes().first() {
            _ if line.starts_with("---") || line.starts_with("+++") => paint(line, "1", true),
            Some(b'-') => paint(line, "31", true),
            Some(b'+') => paint(line, "32", true),
            Some(b'@') => paint(line, "36", true),
            _ => line.to_owned(),
        };
        out.push_str(&painted);
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const BASE: &str = "version: 1
network_policies:
  github:
    endpoints:
      - { host: api.github.com, port: 443 }
  pypi:
    endpoints:
      - { host: pypi.org, port: 443 }
";

    #[test]
    fn formatting_alone_is_no_change() {
        let reformatted = "# the same policy, other layout\n\
            version: 1\n\
            network_policies:\n  pypi:\n    endpoints:\n      - host: pypi.org\n        port: 443\n  \
            github:\n    endpoints:\n      - host: api.github.com\n        port: 443\n";
        let a = parse(BASE, "a").unwrap();
        let b = parse(reformatted, "b").unwrap();
        let d = compare(Some(&a), &b, "current", "file");
        assert!(!d.changed);
        assert!(d.diff.is_empty());
        assert!(d.removed_network_access.is_empty());
    }

    #[test]
    fn a_port_change_shows_in_the_diff_and_as_lost_reach() {
        let a = parse(BASE, "a").unwrap();
        let b = parse(
            &BASE.replace("port: 443 }\n  pypi", "port: 8443 }\n  pypi"),
            "b",
        )
        .unwrap();
        let d = compare(Some(&a), &b, "current (revision 1)", "p.yaml");
        assert!(d.changed);
        assert_eq!(d.removed_network_access, vec!["github".to_string()]);
        assert!(
            d.diff.starts_with("--- current (revision 1)\n+++ p.yaml\n"),
            "{}",
            d.diff
        );
        assert!(
            d.diff.contains("\n-") && d.diff.contains("443"),
            "{}",
            d.diff
        );
        assert!(
            d.diff.contains("\n+") && d.diff.contains("8443"),
            "{}",
            d.diff
        );
    }

    #[test]
    fn adding_a_policy_removes_nothing() {
        let a = parse(BASE, "a").unwrap();
        let more = format!(
            "{BASE}  npm:\n    endpoints:\n      - {{ host: registry.npmjs.org, port: 443 }}\n"
        );
        let b = parse(&more, "b").unwrap();
        let d = compare(Some(&a), &b, "current", "file");
        assert!(d.changed);
        assert!(d.removed_network_access.is_empty());
        assert!(
            !d.diff
                .lines()
                .any(|l| l.starts_with('-') && !l.starts_with("---")),
            "{}",
            d.diff
        );
    }

    #[test]
    fn omitted_static_sections_are_the_current_ones() {
        let with_process =
            format!("{BASE}process:\n  run_as_user: sandbox\n  run_as_group: sandbox\n");
        let a = parse(&with_process, "a").unwrap();
        let b = parse(BASE, "b").unwrap();
        let d = compare(Some(&a), &b, "current", "file");
        assert!(!d.changed, "{}", d.diff);
        assert_eq!(d.kept_static_sections, ["process"]);
        // Given with other content, it is a difference.
        let c = parse(
            &with_process.replace("run_as_user: sandbox", "run_as_user: '1500'"),
            "c",
        )
        .unwrap();
        let d = compare(Some(&a), &c, "current", "file");
        assert!(d.changed);
        assert!(d.kept_static_sections.is_empty());
        assert!(d.diff.contains("1500"), "{}", d.diff);
    }

    #[test]
    fn no_current_policy_is_all_additions() {
        let b = parse(BASE, "b").unwrap();
        let d = compare(None, &b, "current", "file");
        assert!(d.changed);
        assert!(d.removed_network_access.is_empty());
        assert!(d.diff.contains("+version: 1"), "{}", d.diff);
    }

    #[test]
    fn a_bad_file_is_a_usage_error_naming_the_source() {
        let err = parse("version: 1\nbogus: true\n", "p.yaml").unwrap_err();
        assert!(
            err.0.starts_with("p.yaml is not a valid policy"),
            "{}",
            err.0
        );
    }

    #[test]
    fn color_only_on_request() {
        let diff = unified("a\nb\n", "a\nc\n", "old", "new");
        assert_eq!(colorize(&diff, false), diff);
        let colored = colorize(&diff, true);
        assert!(colored.contains("\u{1b}[31m-b"), "{colored:?}");
        assert!(colored.contains("\u{1b}[32m+c"), "{colored:?}");
    }

    #[test]
    fn json_shape() {
        let d = PolicyDiff {
            changed: true,
            removed_network_access: vec!["github".into()],
            diff: "--- a\n+++ b\n".into(),
            kept_static_sections: vec![],
        };
        let value = serde_json::to_value(&d).unwrap();
        assert_eq!(value["changed"], true);
        assert_eq!(value["removed_network_access"][0], "github");
        assert_eq!(value["diff"], "--- a\n+++ b\n");
    }
}
