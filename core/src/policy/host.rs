//! Host names and host patterns: the endpoint host rules, middleware selector patterns, and
//! whether a selector can reach an endpoint.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr};

use super::glob::{self, Budget, Token};

/// Longest host accepted, in bytes (the DNS limit).
pub const MAX_HOST_BYTES: usize = 253;
/// Longest DNS label accepted, in bytes.
pub const MAX_LABEL_BYTES: usize = 63;

/// Why an endpoint `host` (non-empty) is refused, if it is.
///
/// Upstream's rules: a `*` may stand for a whole label anywhere after the first and for part
/// of the first label (`*-api.example.com`); `**` only as the whole first label; no bare `*` or
/// `**`; and no wildcard host of two labels or fewer (`*.com`), which would cover a whole
/// top-level domain. This project also keeps its syntax bound (see docs/policy.md): letters,
/// digits, `-`, `_`, `.` and wildcards, no empty labels, DNS length limits, or an IP literal.
pub(crate) fn endpoint_host_problem(host: &str) -> Option<String> {
    if is_ip_literal(host) {
        return None;
    }
    if host == "*" || host == "**" {
        return Some(format!(
            "wildcard {host:?} would match every host; name a domain, e.g. *.example.com"
        ));
    }
    if let Some(bad) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*')))
    {
        return Some(format!(
            "host {host:?} may contain only letters, digits, '-', '_', '.' and '*' wildcards \
             (or be an IP address), found {bad:?}"
        ));
    }
    if host.len() > MAX_HOST_BYTES {
        return Some(format!(
            "host is {} bytes; the limit is {MAX_HOST_BYTES}",
            host.len()
        ));
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels.iter().any(|label| label.is_empty()) {
        return Some(format!(
            "host {host:?} has an empty label (a leading, trailing or doubled '.')"
        ));
    }
    if let Some(long) = labels.iter().find(|label| label.len() > MAX_LABEL_BYTES) {
        return Some(format!(
            "host {host:?} has a label of {} bytes ({long:?}); the limit is {MAX_LABEL_BYTES}",
            long.len()
        ));
    }
    if !host.contains('*') {
        return None;
    }
    let first = labels[0];
    let recursive_misplaced = (first.contains("**") && first != "**")
        || labels[1..].iter().any(|label| label.contains("**"));
    if recursive_misplaced {
        return Some(format!(
            "host {host:?}: the recursive wildcard '**' is allowed only as the whole first label, \
             as in **.example.com"
        ));
    }
    if labels[1..]
        .iter()
        .any(|label| label.contains('*') && *label != "*")
    {
        return Some(format!(
            "host {host:?}: a wildcard after the first label must be the whole label '*', \
             as in api.*.example.com"
        ));
    }
    if labels.len() <= 2 {
        return Some(format!(
            "wildcard {host:?} covers a whole top-level domain; name at least two labels \
             after the wildcard, e.g. *.example.com"
        ));
    }
    None
}

/// An IPv4 or IPv6 address, the latter also in brackets.
pub(crate) fn is_ip_literal(host: &str) -> bool {
    host.parse::<IpAddr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<Ipv6Addr>().is_ok())
}

/// A compiled DNS host pattern, as middleware selectors use them: case-insensitive, `*`, `?`
/// and `[...]` within one label, and a whole `**` label for one or more labels.
#[derive(Debug, Clone)]
pub(crate) struct HostPattern {
    source: String,
    labels: Vec<Label>,
}

#[derive(Debug, Clone)]
enum Label {
    Recursive,
    Glob {
        source: String,
        tokens: Vec<Token>,
        literal: bool,
    },
}

impl HostPattern {
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("host pattern must not be empty".into());
        }
        if pattern.chars().any(char::is_whitespace) {
            return Err("host pattern must not contain whitespace".into());
        }
        if pattern.contains(['{', '}']) {
            return Err(
                "host pattern must not contain brace alternates; list each pattern separately"
                    .into(),
            );
        }
        let source = pattern.to_ascii_lowercase();
        if source.split('.').any(str::is_empty) {
            return Err("host pattern must not contain empty DNS labels".into());
        }
        let labels = source
            .split('.')
            .map(|label| {
                if label == "**" {
                    return Ok(Label::Recursive);
                }
                Ok(Label::Glob {
                    source: label.to_string(),
                    tokens: glob::label_tokens(label)?,
                    literal: !label.contains(['*', '?', '[']),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { source, labels })
    }

    /// True when the concrete host matches.
    pub(crate) fn matches(&self, host: &str, budget: &Budget) -> bool {
        let host = host.to_ascii_lowercase();
        let parts: Vec<&str> = host.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return false;
        }
        let mut pending = vec![(0usize, 0usize)];
        let mut seen = HashSet::new();
        while let Some((p, h)) = pending.pop() {
            if !budget.spend() {
                return true;
            }
            if !seen.insert((p, h)) {
                continue;
            }
            if p == self.labels.len() && h == parts.len() {
                return true;
            }
            if h == parts.len() {
                continue;
            }
            match self.labels.get(p) {
                Some(Label::Recursive) => {
                    pending.push((p + 1, h + 1));
                    pending.push((p, h + 1));
                }
                Some(Label::Glob { tokens, .. }) if glob::tokens_match(tokens, parts[h]) => {
                    pending.push((p + 1, h + 1));
                }
                Some(Label::Glob { .. }) | None => {}
            }
        }
        false
    }

    fn literal(&self) -> Option<&str> {
        self.labels
            .iter()
            .all(|label| matches!(label, Label::Glob { literal: true, .. }))
            .then_some(self.source.as_str())
    }

    fn is_universal(&self) -> bool {
        matches!(self.labels.as_slice(), [Label::Recursive])
    }

    /// Whether some concrete host could match both patterns. Two non-literal labels are assumed
    /// to overlap: refusing a policy for a conflict that cannot happen is the safe mistake here.
    fn overlaps(&self, other: &Self, budget: &Budget) -> bool {
        let mut pending = vec![(0usize, 0usize)];
        let mut seen = HashSet::new();
        while let Some((l, r)) = pending.pop() {
            if !budget.spend() {
                return true;
            }
            if !seen.insert((l, r)) {
                continue;
            }
            if l == self.labels.len() && r == other.labels.len() {
                return true;
            }
            let (Some(left), Some(right)) = (self.labels.get(l), other.labels.get(r)) else {
                continue;
            };
            // Each step consumes one shared label, so `**` consumes at least one.
            match (left, right) {
                (Label::Recursive, Label::Recursive) => {
                    pending.extend([(l + 1, r + 1), (l, r + 1), (l + 1, r)]);
                }
                (Label::Recursive, Label::Glob { .. }) => {
                    pending.extend([(l + 1, r + 1), (l, r + 1)]);
                }
                (Label::Glob { .. }, Label::Recursive) => {
                    pending.extend([(l + 1, r + 1), (l + 1, r)]);
                }
                (a, b) if labels_may_overlap(a, b) => pending.push((l + 1, r + 1)),
                _ => {}
            }
        }
        false
    }
}

fn labels_may_overlap(a: &Label, b: &Label) -> bool {
    match (a, b) {
        (
            Label::Glob {
                source: sa,
                tokens: ta,
                literal: la,
            },
            Label::Glob {
                source: sb,
                tokens: tb,
                literal: lb,
            },
        ) => match (la, lb) {
            (true, true) => sa == sb,
            (true, false) => glob::tokens_match(tb, sa),
            (false, true) => glob::tokens_match(ta, sb),
            (false, false) => true,
        },
        _ => true,
    }
}

/// A middleware's compiled `endpoints` selector.
pub(crate) struct HostSelector {
    includes: Vec<HostPattern>,
    excludes: Vec<HostPattern>,
}

impl HostSelector {
    /// `None` when any pattern is malformed or nothing is included; validation reports why.
    pub(crate) fn new(include: &[String], exclude: &[String]) -> Option<Self> {
        if include.is_empty() {
            return None;
        }
        let compile = |list: &[String]| {
            list.iter()
                .map(|p| HostPattern::new(p).ok())
                .collect::<Option<Vec<_>>>()
        };
        Some(Self {
            includes: compile(include)?,
            excludes: compile(exclude)?,
        })
    }

    /// Whether this selector could select some host that `candidate` admits. An exclusion
    /// counts only when it provably covers the overlap: a concrete host the two share, or
    /// exactly one of the two patterns.
    pub(crate) fn may_match_pattern(&self, candidate: &HostPattern, budget: &Budget) -> bool {
        self.includes.iter().any(|include| {
            if !include.overlaps(candidate, budget) {
                return false;
            }
            let shared_host = candidate.literal().or_else(|| include.literal());
            let excluded = match shared_host {
                Some(host) => self.excludes.iter().any(|e| e.matches(host, budget)),
                None => self.excludes.iter().any(|e| {
                    e.is_universal() || e.source == include.source || e.source == candidate.source
                }),
            };
            !excluded
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn m(pattern: &str, host: &str) -> bool {
        HostPattern::new(pattern)
            .unwrap()
            .matches(host, &Budget::default())
    }

    #[test]
    fn selector_patterns_match_by_label() {
        assert!(m("*.Example.COM", "API.example.com"));
        assert!(!m("*.example.com", "example.com"));
        assert!(!m("*.example.com", "deep.api.example.com"));
        assert!(m("**.example.com", "deep.api.example.com"));
        assert!(!m("**.example.com", "example.com"));
        assert!(m("*-api.example.com", "tenant-api.example.com"));
        assert!(m("**", "localhost"));
        assert!(!m("**", "a..b"));
    }

    #[test]
    fn malformed_selector_patterns_are_refused() {
        for bad in [
            "",
            "api .example.com",
            "api[.example.com",
            "*.{a,b}.com",
            "api**.x.com",
            "a..b",
        ] {
            assert!(HostPattern::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn selectors_reaching_patterns() {
        let sel = |inc: &[&str], exc: &[&str]| {
            HostSelector::new(
                &inc.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                &exc.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
            .unwrap()
        };
        let p = |s: &str| HostPattern::new(s).unwrap();
        let b = Budget::default();
        let s = sel(&["*.example.com"], &["api.example.com"]);
        assert!(!s.may_match_pattern(&p("api.example.com"), &b));
        assert!(s.may_match_pattern(&p("*.example.com"), &b));
        assert!(s.may_match_pattern(&p("web.example.com"), &b));
        let s = sel(&["api.example.com"], &[]);
        assert!(s.may_match_pattern(&p("*.example.com"), &b));
        assert!(!s.may_match_pattern(&p("*.other.com"), &b));
    }

    #[test]
    fn endpoint_hosts() {
        for ok in [
            "api.github.com",
            "*.github.com",
            "**.example.org",
            "*-aiplatform.googleapis.com",
            "*.s3.*.amazonaws.com",
            "10.0.0.1",
            "::1",
            "[2001:db8::1]",
            "my_host.internal",
            "localhost",
        ] {
            assert_eq!(endpoint_host_problem(ok), None, "{ok}");
        }
        for bad in [
            "*",
            "**",
            "*.com",
            "**.io",
            "github.*",
            "*.s3.us-*.amazonaws.com",
            "a**.example.com",
            "api.**.example.com",
            "a..b.com",
            ".github.com",
            "https://github.com",
            "host with space",
        ] {
            assert!(endpoint_host_problem(bad).is_some(), "{bad}");
        }
    }
}
