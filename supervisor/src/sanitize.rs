//! Making failure reasons safe to send to the gateway and to log.
//!
//! A reason travels into operations that operators read and that are kept for a long time, so
//! it must never carry a provider value or a credential, and must stay small. Reasons are built
//! from our own messages, policy violations and hook stderr; the last one is arbitrary text a
//! hook may have filled with anything it read from `provider-env.json`.

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
    let mut secrets: Vec<&str> = secrets
        .into_iter()
        .filter(|s| s.len() >= MIN_MASKED_LEN)
        .collect();
    // Longest first, so a secret that contains another is masked whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    let mut out = text.to_string();
    for secret in secrets {
        if out.contains(secret) {
            out = out.replace(secret, MASK);
        }
    }
    let flat: String = out
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    truncate_bytes(flat.trim(), max_bytes)
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
