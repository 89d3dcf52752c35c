//! Small glob languages used by policy validation: DNS-label globs for middleware selectors,
//! dot-delimited host globs and slash paths for endpoint overlap, and a product-automaton test
//! of whether two globs can match the same string.
//!
//! Nothing here matches traffic; the supervisor's enforcement does that. Validation only needs
//! to know whether a pattern is well formed and whether two patterns could ever select the same
//! host or path, so the answers lean towards "they may overlap" whenever a pattern is unusual.

use std::cell::Cell;
use std::collections::{HashSet, VecDeque};

/// Most search steps all glob comparisons of one validation may take together. Comparing
/// patterns is a search over pairs of positions, so a document of many long patterns could
/// otherwise cost minutes; real policies use a tiny fraction of this.
pub const MAX_GLOB_STEPS: usize = 2_000_000;

/// The search steps left for one validation. Once spent, comparisons answer "may overlap"
/// and the caller refuses the policy as too complex to check.
#[derive(Debug)]
pub(crate) struct Budget(Cell<usize>);

impl Budget {
    pub(crate) fn new(steps: usize) -> Self {
        Self(Cell::new(steps))
    }

    /// Takes one step; false when none are left.
    pub(crate) fn spend(&self) -> bool {
        match self.0.get() {
            0 => false,
            left => {
                self.0.set(left - 1);
                true
            }
        }
    }

    pub(crate) fn exhausted(&self) -> bool {
        self.0.get() == 0
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::new(MAX_GLOB_STEPS)
    }
}

/// One element of a compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Literal(char),
    /// `?`: exactly one character.
    One,
    /// `[a-z]`, or `[!a-z]` when negated.
    Class {
        ranges: Vec<(char, char)>,
        negated: bool,
    },
    /// `*` (stays within a delimited segment) or `**` (may cross the delimiter).
    Star {
        crosses: bool,
    },
}

/// Compiles one DNS label of a selector pattern: `*`, `?` and `[...]` classes, case folded.
/// A `**` inside a label is refused: only a whole `**` label means "one or more labels", and
/// the caller handles that case before getting here.
pub(crate) fn label_tokens(label: &str) -> Result<Vec<Token>, String> {
    if label.contains("**") {
        return Err(format!(
            "'**' must be a whole DNS label, as in **.example.com; found {label:?}"
        ));
    }
    let chars: Vec<char> = label.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => tokens.push(Token::Star { crosses: false }),
            '?' => tokens.push(Token::One),
            '[' => {
                let (token, next) = class_at(&chars, i).ok_or_else(|| {
                    format!("unclosed '[' character class in {label:?}; close it with ']'")
                })?;
                tokens.push(token);
                i = next;
                continue;
            }
            c => tokens.push(Token::Literal(c)),
        }
        i += 1;
    }
    Ok(tokens)
}

/// Reads the class starting at `chars[open] == '['`; returns it and the index after its `]`.
/// A `]` directly after `[` or `[!` is a member, as in POSIX globs.
fn class_at(chars: &[char], open: usize) -> Option<(Token, usize)> {
    let mut i = open + 1;
    let negated = chars.get(i) == Some(&'!');
    if negated {
        i += 1;
    }
    let first = i;
    let close = (first + 1..chars.len()).find(|&at| chars[at] == ']')?;
    let members = &chars[first..close];
    let mut ranges = Vec::new();
    let mut k = 0;
    while k < members.len() {
        if k + 2 < members.len() && members[k + 1] == '-' {
            ranges.push((members[k], members[k + 2]));
            k += 3;
        } else {
            ranges.push((members[k], members[k]));
            k += 1;
        }
    }
    Some((Token::Class { ranges, negated }, close + 1))
}

/// Tokens of a dot-delimited host glob as endpoint hosts use it: `*` within a label, `**`
/// (or more stars) across labels, every other character literal.
pub(crate) fn delimited_tokens(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '*' {
            let start = i;
            while i < chars.len() && chars[i] == '*' {
                i += 1;
            }
            tokens.push(Token::Star {
                crosses: i - start >= 2,
            });
        } else {
            tokens.push(Token::Literal(chars[i]));
            i += 1;
        }
    }
    tokens
}

/// Tokens of an HTTP path glob as the supervisor matches endpoint paths: every star may cross
/// `/`, `**` must be a whole path component. `None` for a pattern the matcher would refuse.
pub(crate) fn path_tokens(pattern: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '?' => {
                tokens.push(Token::One);
                i += 1;
            }
            '*' => {
                let start = i;
                while i < chars.len() && chars[i] == '*' {
                    i += 1;
                }
                let count = i - start;
                if count > 2 {
                    return None;
                }
                if count == 2 {
                    let opens = start == 0 || chars[start - 1] == '/';
                    let closes = i == chars.len() || chars[i] == '/';
                    if !(opens && closes) {
                        return None;
                    }
                    // `**/` also matches no directory at all, so the slash is part of it.
                    if i < chars.len() {
                        i += 1;
                    }
                }
                tokens.push(Token::Star { crosses: true });
            }
            '[' => {
                let (token, next) = class_at(&chars, i)?;
                tokens.push(token);
                i = next;
            }
            c => {
                tokens.push(Token::Literal(c));
                i += 1;
            }
        }
    }
    Some(tokens)
}

/// True when `tokens` match all of `text`. Stars here never meet a delimiter (labels have none).
pub(crate) fn tokens_match(tokens: &[Token], text: &str) -> bool {
    let text: Vec<char> = text.chars().map(|c| c.to_ascii_lowercase()).collect();
    // reachable[j]: the tokens consumed so far can end right before text[j].
    let mut reachable = vec![false; text.len() + 1];
    reachable[0] = true;
    for token in tokens {
        let mut next = vec![false; text.len() + 1];
        match token {
            Token::Star { .. } => {
                let mut on = false;
                for j in 0..=text.len() {
                    on |= reachable[j];
                    next[j] = on;
                }
            }
            _ => {
                for j in 0..text.len() {
                    if reachable[j] && single_matches(token, text[j]) {
                        next[j + 1] = true;
                    }
                }
            }
        }
        reachable = next;
    }
    reachable[text.len()]
}

fn single_matches(token: &Token, c: char) -> bool {
    match token {
        Token::Literal(l) => *l == c,
        Token::One | Token::Star { .. } => true,
        Token::Class { ranges, negated } => {
            ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
        }
    }
}

/// True when some string is matched by both globs. A product-automaton search: each state is a
/// position in each pattern, a star may be skipped or consume a character the other side can
/// also consume, and a non-crossing star never consumes `delimiter`.
pub(crate) fn tokens_overlap(
    left: &[Token],
    right: &[Token],
    delimiter: char,
    budget: &Budget,
) -> bool {
    let mut queue = VecDeque::from([(0usize, 0usize)]);
    let mut seen = HashSet::new();
    while let Some((l, r)) = queue.pop_front() {
        if !budget.spend() {
            return true;
        }
        if !seen.insert((l, r)) {
            continue;
        }
        if l == left.len() && r == right.len() {
            return true;
        }
        let left_token = left.get(l);
        let right_token = right.get(r);
        if matches!(left_token, Some(Token::Star { .. })) {
            queue.push_back((l + 1, r));
        }
        if matches!(right_token, Some(Token::Star { .. })) {
            queue.push_back((l, r + 1));
        }
        let (Some(a), Some(b)) = (left_token, right_token) else {
            continue;
        };
        if share_a_character(a, b, delimiter) {
            let next_l = if matches!(a, Token::Star { .. }) {
                l
            } else {
                l + 1
            };
            let next_r = if matches!(b, Token::Star { .. }) {
                r
            } else {
                r + 1
            };
            queue.push_back((next_l, next_r));
        }
    }
    false
}

/// Unicode scalar values as closed ranges, surrogates excluded.
const SCALARS: [(u32, u32); 2] = [(0, 0xD7FF), (0xE000, 0x10_FFFF)];

fn share_a_character(a: &Token, b: &Token, delimiter: char) -> bool {
    let left = char_set(a, delimiter);
    let right = char_set(b, delimiter);
    left.iter()
        .any(|(lo, hi)| right.iter().any(|(lo2, hi2)| lo <= hi2 && lo2 <= hi))
}

/// The characters a token can consume, as sorted disjoint closed ranges.
fn char_set(token: &Token, delimiter: char) -> Vec<(u32, u32)> {
    match token {
        Token::Literal(c) => vec![(u32::from(*c), u32::from(*c))],
        Token::One | Token::Star { crosses: true } => SCALARS.to_vec(),
        Token::Star { crosses: false } => {
            complement(&[(u32::from(delimiter), u32::from(delimiter))])
        }
        Token::Class { ranges, negated } => {
            let set = normalize(
                ranges
                    .iter()
                    .filter(|(lo, hi)| lo <= hi)
                    .map(|(lo, hi)| (u32::from(*lo), u32::from(*hi)))
                    .collect(),
            );
            if *negated { complement(&set) } else { set }
        }
    }
}

fn normalize(mut ranges: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    ranges.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn complement(set: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let set = normalize(set.to_vec());
    let mut out = Vec::new();
    for (start, end) in SCALARS {
        let mut cursor = start;
        for &(lo, hi) in &set {
            if hi < cursor || lo > end {
                continue;
            }
            if lo > cursor {
                out.push((cursor, lo - 1));
            }
            cursor = hi.saturating_add(1);
        }
        if cursor <= end {
            out.push((cursor, end));
        }
    }
    out
}

/// True when the pattern holds any glob metacharacter.
pub(crate) fn has_wildcard(pattern: &str) -> bool {
    pattern
        .bytes()
        .any(|b| matches!(b, b'*' | b'?' | b'[' | b']' | b'{' | b'}'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn label_globs_match_within_a_label() {
        let t = label_tokens("*-api").unwrap();
        assert!(tokens_match(&t, "tenant-api"));
        assert!(tokens_match(&t, "-api"));
        assert!(!tokens_match(&t, "tenant-apix"));
        let t = label_tokens("v[0-9]?").unwrap();
        assert!(tokens_match(&t, "v1a"));
        assert!(!tokens_match(&t, "vxa"));
        let t = label_tokens("[!0]x").unwrap();
        assert!(tokens_match(&t, "1x"));
        assert!(!tokens_match(&t, "0x"));
        assert!(tokens_match(&label_tokens("API").unwrap(), "api"));
    }

    #[test]
    fn malformed_labels_are_refused() {
        assert!(label_tokens("api[").is_err());
        assert!(label_tokens("a**").is_err());
        assert!(label_tokens("[]").is_err());
        assert!(label_tokens("[]]").is_ok());
    }

    #[test]
    fn host_globs_overlap_like_the_runtime() {
        let budget = Budget::default();
        let o = |a: &str, b: &str| {
            tokens_overlap(&delimited_tokens(a), &delimited_tokens(b), '.', &budget)
        };
        assert!(o("api.example.com", "*.example.com"));
        assert!(o(
            "us-aiplatform.googleapis.com",
            "*-aiplatform.googleapis.com"
        ));
        assert!(!o("api.example.com", "*.other.com"));
        assert!(o("*.example.com", "api.*.com"));
        assert!(o("**.example.com", "a.b.example.com"));
        assert!(!o("*.example.com", "a.b.example.com"));
        assert!(!o("*.example.com", "*.example.org"));
    }

    #[test]
    fn path_globs_overlap_like_the_runtime() {
        let budget = Budget::default();
        let o = |a: &str, b: &str| {
            tokens_overlap(
                &path_tokens(a).unwrap(),
                &path_tokens(b).unwrap(),
                '/',
                &budget,
            )
        };
        assert!(o("/v?", "/v1"));
        assert!(o("/v[12]", "/v[23]"));
        assert!(!o("/v[12]", "/v[34]"));
        assert!(o("/v[!0]", "/v1"));
        assert!(!o("/v[!0]", "/v0"));
        assert!(!o("/graphql", "/repos/**"));
        assert!(o("/repos/**", "/repos/a/b"));
        assert!(path_tokens("/a**").is_none());
        assert!(path_tokens("/***").is_none());
    }
}
