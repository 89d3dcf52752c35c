//! Python's `repr` of strings, for the `__repr__` of views, targets and clients.

/// Python's `repr` of a str, so reprs read like Python (`'demo'`, not `"demo"`).
pub(crate) fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('\'');
    for c in text.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("\\'"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c if c.is_control() => quoted.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// `quote` for optional text: `None` when absent.
pub(crate) fn quote_opt(text: Option<&str>) -> String {
    text.map_or_else(|| "None".to_owned(), quote)
}
