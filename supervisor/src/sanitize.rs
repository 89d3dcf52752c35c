//! Making failure reasons safe to send to the gateway and to log.
//!
//! A reason travels into operations that operators read and that are kept for a long time, so
//! it must never carry a provider value or a credential, and must stay small. Reasons are built
//! from our own messages, policy violations and hook stderr; the last one is arbitrary text a
//! hook may have filled with anything it read from `provider-env.json`.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};

/// Longest reason sent to the gateway, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// Values shorter than this are not masked: replacing every "1" or "on" in a message would
/// make it unreadable, and values that short carry no secret worth the name.
pub const MIN_MASKED_LEN: usize = 4;

const MASK: &str = "***";

/// Masks every occurrence of `secrets`, flattens control characters (newlines included) to
/// spaces and cuts the result to [`MAX_REASON_BYTES`] on a character boundary.
pub fn sanitize_reason<'a>(text: &str, secrets: impl IntoIterator<Item = &'a str>) -> String {
    sanitize_text(text, secrets, MAX_REASON_BYTES)
}

/// [`sanitize_reason`] with another bound: log lines sent to the gateway go through it too.
/// Masking happens before the cut, so no prefix of a secret survives it.
pub fn sanitize_text<'a>(
    text: &str,
    secrets: impl IntoIterator<Item = &'a str>,
    max_bytes: usize,
) -> String {
    sanitize_with(&Masker::new(secrets), text, max_bytes)
}

/// [`sanitize_text`] with a [`Masker`] built once for many texts.
pub fn sanitize_with(masker: &Masker, text: &str, max_bytes: usize) -> String {
    let masked = masker.mask(text);
    let flat: String = masked
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    truncate_bytes(flat.trim(), max_bytes)
}

/// Finds and masks a set of secrets in text, all at once.
///
/// Besides each secret whole, it masks every line of a secret that spans several lines (a
/// PEM key, a JSON credential file), each as a secret of its own: output read line by line
/// shows such a value a line at a time, and each of those lines must be masked on its own.
pub struct Masker {
    search: Search,
    longest: usize,
}

enum Search {
    Nothing,
    Automaton(AhoCorasick),
    /// Only if the automaton cannot be built (it would be too large): slower, as safe.
    OneByOne(Vec<Vec<u8>>),
}

impl Default for Masker {
    fn default() -> Self {
        Self {
            search: Search::Nothing,
            longest: 0,
        }
    }
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("longest", &self.longest)
            .finish_non_exhaustive()
    }
}

/// What a [`Masker`] of `secrets` looks for: each secret and each line of a secret that spans
/// several lines, of at least [`MIN_MASKED_LEN`] bytes.
fn needles<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut needles = Vec::new();
    for secret in secrets {
        needles.push(secret);
        if secret.contains('\n') {
            // Trimmed: a line of a value shows as part of a line of output, and a line of
            // indentation alone would mask every run of blanks.
            needles.extend(secret.split('\n').map(str::trim));
        }
    }
    needles.retain(|n| n.len() >= MIN_MASKED_LEN);
    needles.sort_unstable();
    needles.dedup();
    needles
}

impl Masker {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let needles = needles(secrets);
        let longest = needles.iter().map(|n| n.len()).max().unwrap_or(0);
        let search = if needles.is_empty() {
            Search::Nothing
        } else {
            // Standard matching: overlapping search needs it. Not a DFA, which the crate picks
            // for few patterns: for one long repetitive value ("aaaa…", 64 KiB) building that
            // takes minutes, an NFA milliseconds.
            let build = |kind| {
                AhoCorasick::builder()
                    .match_kind(MatchKind::Standard)
                    .kind(Some(kind))
                    .build(&needles)
            };
            match build(AhoCorasickKind::ContiguousNFA)
                .or_else(|_| build(AhoCorasickKind::NoncontiguousNFA))
            {
                Ok(automaton) => Search::Automaton(automaton),
                Err(_) => Search::OneByOne(needles.iter().map(|n| n.as_bytes().to_vec()).collect()),
            }
        };
        Self { search, longest }
    }

    /// The length of the longest thing masked: output held back this long before a cut can
    /// never end in the first part of a secret.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// `text` with every secret replaced by `***`.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.mask_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // A secret is whole UTF-8, so it starts and ends on character boundaries, and
            // the text stays UTF-8 without it.
            Cow::Owned(bytes) => Cow::Owned(match String::from_utf8(bytes) {
                Ok(masked) => masked,
                Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
            }),
        }
    }

    /// [`Masker::mask`] of raw output, which need not be UTF-8. Every byte that belongs to
    /// some secret is masked, also where two secrets overlap (masking the first found would
    /// leave the rest of the other in clear); a stretch of such bytes becomes one `***`.
    pub fn mask_bytes<'t>(&self, text: &'t [u8]) -> Cow<'t, [u8]> {
        let spans = self.spans(text);
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = Vec::with_capacity(text.len());
        let mut from = 0;
        for (start, end) in spans {
            out.extend_from_slice(&text[from..start]);
            out.extend_from_slice(MASK.as_bytes());
            from = end;
        }
        out.extend_from_slice(&text[from..]);
        Cow::Owned(out)
    }

    /// Where secrets are in `text`: sorted, merged byte ranges.
    fn spans(&self, text: &[u8]) -> Vec<(usize, usize)> {
        let mut found: Vec<(usize, usize)> = match &self.search {
            Search::Nothing => return Vec::new(),
            Search::Automaton(automaton) => automaton
                .find_overlapping_iter(text)
                .map(|m| (m.start(), m.end()))
                .collect(),
            Search::OneByOne(needles) => needles
                .iter()
                .flat_map(|needle| {
                    text.windows(needle.len())
                        .enumerate()
                        .filter(move |(_, window)| window == needle)
                        .map(move |(at, _)| (at, at + needle.len()))
                })
                .collect(),
        };
        found.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(found.len());
        for (start, end) in found {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }
}

/// At most `max` bytes of `text`, cut on a character boundary, with "…" marking a cut.
pub fn truncate_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let ellipsis = "…";
    let mut end = max.saturating_sub(ellipsis.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

/// The last `max` bytes of `text`, starting on a character boundary.
pub fn tail_bytes(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while start < text.len() && !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const CREDENTIAL: &str = "ghp_abcdefSECRET123";

    #[test]
    fn masks_every_secret_occurrence() {
        let text = format!("hook said: token={CREDENTIAL}\nagain {CREDENTIAL} and plain-value");
        let out = sanitize_reason(&text, [CREDENTIAL, "plain-value"]);
        assert!(!out.contains(CREDENTIAL), "{out}");
        assert!(!out.contains("plain-value"), "{out}");
        assert!(!out.contains('\n'));
        assert_eq!(out, "hook said: token=*** again *** and ***");
    }

    #[test]
    fn overlapping_secrets_are_masked_whole() {
        let out = sanitize_reason("x abcdefgh y", ["abcd", "abcdefgh"]);
        assert_eq!(out, "x *** y");
    }

    #[test]
    fn secret_split_by_truncation_cannot_leak() {
        // Masking happens before truncation, so no prefix of a secret survives a cut.
        let text = format!("{}{CREDENTIAL}", "a".repeat(MAX_REASON_BYTES - 5));
        let out = sanitize_reason(&text, [CREDENTIAL]);
        assert!(out.len() <= MAX_REASON_BYTES);
        assert!(!out.contains("ghp_a"), "{out}");
    }

    #[test]
    fn bounded_to_one_kib_on_char_boundary() {
        let text = "é".repeat(2000);
        let out = sanitize_reason(&text, []);
        assert!(out.len() <= MAX_REASON_BYTES);
        assert!(out.ends_with('…'));
        let short = sanitize_reason("fine", []);
        assert_eq!(short, "fine");
    }

    #[test]
    fn each_line_of_a_secret_spanning_lines_is_masked_on_its_own() {
        let key = "-----BEGIN K-----\nAAAAsecretline1\r\nBBBBsecretline2\n-----END K-----";
        let m = Masker::new([key]);
        // Output read line by line shows it a line at a time.
        assert_eq!(m.mask("key=-----BEGIN K-----"), "key=***");
        assert_eq!(m.mask("> BBBBsecretline2"), "> ***");
        assert_eq!(m.mask("AAAAsecretline1 and more"), "*** and more");
        // Whole, it is one stretch of masked bytes.
        assert_eq!(m.mask(&format!("k={key}.")), "k=***.");
        // A line of blanks, or one too short to be a secret, is not looked for.
        let m = Masker::new(["ab\n    \nsecretpart"]);
        assert_eq!(m.mask("ab    x"), "ab    x");
        assert_eq!(m.mask("a secretpart"), "a ***");
    }

    #[test]
    fn overlapping_secrets_leave_nothing_of_either() {
        let m = Masker::new(["abcd1234", "1234wxyz"]);
        assert_eq!(m.mask("x abcd1234wxyz y"), "x *** y");
        assert_eq!(m.longest(), 8);
    }

    #[test]
    fn raw_output_is_masked_whatever_its_encoding() {
        let m = Masker::new(["secret-value"]);
        assert_eq!(
            m.mask_bytes(b"\xff secret-value \xfe").as_ref(),
            b"\xff *** \xfe"
        );
        assert!(matches!(m.mask_bytes(b"nothing here"), Cow::Borrowed(_)));
        assert_eq!(Masker::default().mask("secret-value"), "secret-value");
    }

    #[test]
    fn a_long_repetitive_secret_is_masked() {
        let secret = "a".repeat(64 * 1024);
        let m = Masker::new([secret.as_str()]);
        assert_eq!(m.mask(&format!("b{secret}b")), "b***b");
    }

    #[test]
    fn short_values_are_not_masked() {
        assert_eq!(sanitize_reason("exit 1 on", ["1", "on"]), "exit 1 on");
    }

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail_bytes("abcdef", 3), "def");
        assert_eq!(tail_bytes("ab", 3), "ab");
        let t = tail_bytes("ééé", 3);
        assert_eq!(t, "é");
    }
}
