//! Printing results: tables for people, JSON or YAML of the SDK view types
//! for programs. Results go to stdout; progress, notes and errors to stderr.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};

use anyhow::Context as _;
use comfy_table::{Attribute, Cell, ContentArrangement, Table, presets};
use serde::Serialize;

use crate::cli::OutputFormat;

/// Narrowest terminal that tables are wrapped to; below it they run long.
const MIN_WRAP_WIDTH: u16 = 40;

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub format: OutputFormat,
    /// Styled tables; off under `NO_COLOR` or when stdout is not a terminal.
    pub color: bool,
}

impl Output {
    pub fn detect(format: OutputFormat) -> Self {
        Self {
            format,
            color: color_enabled(no_color(), io::stdout().is_terminal()),
        }
    }

    /// Renders `value` as JSON or YAML, or through `table` for the table format.
    pub fn render<T: Serialize + ?Sized>(
        &self,
        value: &T,
        table: impl FnOnce(&Self) -> String,
    ) -> anyhow::Result<String> {
        match self.format {
            OutputFormat::Table => Ok(table(self)),
            OutputFormat::Json => {
                let mut text = serde_json::to_string_pretty(value).context("encoding JSON")?;
                text.push('\n');
                Ok(escape_json_controls(text))
            }
            OutputFormat::Yaml => serde_norway::to_string(value).context("encoding YAML"),
        }
    }

    /// Renders and prints to stdout.
    pub fn print<T: Serialize + ?Sized>(
        &self,
        value: &T,
        table: impl FnOnce(&Self) -> String,
    ) -> anyhow::Result<()> {
        let text = self.render(value, table)?;
        write_stdout(&text)
    }

    /// An empty list table with these column headers.
    pub fn list(&self, headers: &[&str]) -> ListTable {
        let mut table = self.base();
        table.set_header(headers.iter().map(|h| self.strong(h)));
        ListTable(table)
    }

    /// A two-column key/value table for one object.
    pub fn kv<K: AsRef<str>>(&self, rows: impl IntoIterator<Item = (K, String)>) -> Table {
        let mut table = self.base();
        for (key, value) in rows {
            table.add_row(vec![self.strong(key.as_ref()), Cell::new(sanitize(&value))]);
        }
        table
    }

    /// A bold cell when styling is on.
    pub fn strong(&self, text: &str) -> Cell {
        let cell = Cell::new(sanitize(text));
        if self.color {
            cell.add_attribute(Attribute::Bold)
        } else {
            cell
        }
    }

    fn base(&self) -> Table {
        let mut table = Table::new();
        table.load_preset(presets::NOTHING);
        if self.color {
            table.enforce_styling();
            // Wrap to the terminal only when its width is known and usable: a
            // pty nobody sized reports 0 columns, and wrapping to that prints
            // one character per line.
            if table.width().is_some_and(|w| w >= MIN_WRAP_WIDTH) {
                table.set_content_arrangement(ContentArrangement::Dynamic);
            }
        } else {
            // Without this comfy-table would still style when stdout is a terminal.
            table.force_no_tty();
        }
        table
    }
}

/// A list table whose rows can only be added through [`sanitize`].
pub struct ListTable(Table);

impl ListTable {
    pub fn add_row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let cells: Vec<Cell> = cells
            .into_iter()
            .map(|c| Cell::new(sanitize(c.as_ref())))
            .collect();
        self.0.add_row(cells);
        self
    }
}

impl From<ListTable> for Table {
    fn from(list: ListTable) -> Self {
        list.0
    }
}

/// Text from a user or the gateway, made safe to print on a terminal or in
/// table and plain output: control characters (C0 except newline and tab,
/// DEL, C1) are shown escaped, `\x1b` or `\u{9b}`, so a name, key, value
/// or message cannot move the cursor, recolor or retitle the terminal, or
/// hide what follows. The one place table and plain output is made safe;
/// JSON and YAML escape these themselves.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            let code = u32::from(c);
            let _ = if code < 0x80 {
                write!(out, "\\x{code:02x}")
            } else {
                write!(out, "\\u{{{code:x}}}")
            };
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `value` as one line of JSON (JSON Lines), for output that streams.
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string(value).context("encoding JSON")?;
    text.push('\n');
    Ok(escape_json_controls(text))
}

/// serde_json escapes only what JSON requires (C0), so DEL and C1 (such as
/// CSI, U+009B) would reach a terminal raw. Outside strings JSON text is
/// plain ASCII, so writing them as `\u00XX` keeps every value the same.
fn escape_json_controls(text: String) -> String {
    if !text.chars().any(char::is_control) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `NO_COLOR` asks for no color: set to anything non-empty
/// (https://no-color.org). Tables, progress and diffs all ask here.
pub fn no_color() -> bool {
    no_color_set(std::env::var_os("NO_COLOR").as_deref())
}

fn no_color_set(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty())
}

/// Styling needs a terminal and no `NO_COLOR`.
fn color_enabled(no_color: bool, stdout_is_terminal: bool) -> bool {
    stdout_is_terminal && !no_color
}

/// Table text with borderless columns two spaces apart and no trailing blanks.
pub fn finish(table: impl Into<Table>) -> String {
    let mut table = table.into();
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    let mut text = String::new();
    for line in table.to_string().lines() {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A titled section for multi-part table output.
pub fn section(title: &str, body: &str) -> String {
    format!("\n{title}:\n{body}")
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

pub fn dash(value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => v.to_owned(),
        _ => "-".to_owned(),
    }
}

pub fn yes_no(value: bool) -> String {
    if value { "yes" } else { "no" }.to_owned()
}

/// Revision numbers where 0 means "none".
pub fn revision(value: u64) -> String {
    if value == 0 {
        "-".to_owned()
    } else {
        value.to_string()
    }
}

pub fn list_or_dash(values: &[String]) -> String {
    if values.is_empty() {
        "-".to_owned()
    } else {
        values.join(", ")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn no_color_and_pipes_disable_styling() {
        assert!(color_enabled(no_color_set(None), true));
        assert!(!color_enabled(no_color_set(Some(OsStr::new("1"))), true));
        // An empty NO_COLOR does not count, per the convention.
        assert!(color_enabled(no_color_set(Some(OsStr::new(""))), true));
        assert!(!color_enabled(no_color_set(None), false));
    }

    #[test]
    fn sanitize_escapes_control_characters_only() {
        assert!(matches!(sanitize("plain ✔ text"), Cow::Borrowed(_)));
        assert_eq!(
            sanitize("keeps\nnew lines\tand tabs"),
            "keeps\nnew lines\tand tabs"
        );
        assert_eq!(sanitize("\u{1b}[31mred\u{1b}[0m"), "\\x1b[31mred\\x1b[0m");
        assert_eq!(
            sanitize("a\rb\u{0}c\u{7}d\u{7f}"),
            "a\\x0db\\x00c\\x07d\\x7f"
        );
        // C1: CSI and OSC as single characters.
        assert_eq!(sanitize("\u{9b}2J\u{9d}0;t"), "\\u{9b}2J\\u{9d}0;t");
        // Other non-ASCII is text, not control.
        assert_eq!(sanitize("é→\u{a0}"), "é→\u{a0}");
    }

    #[test]
    fn table_cells_are_sanitized_even_when_styled() {
        for color in [false, true] {
            let out = Output {
                format: OutputFormat::Table,
                color,
            };
            let evil = "\u{1b}]0;pwned\u{7}\u{1b}[31mkey".to_string();
            let kv = finish(out.kv([("idempotency key", evil.clone())]));
            let mut list = out.list(&["KEY"]);
            list.add_row([evil.clone()]);
            let list = finish(list);
            for text in [kv, list] {
                assert!(text.contains("\\x1b]0;pwned\\x07\\x1b[31mkey"), "{text:?}");
                assert!(!text.contains("\u{1b}]"), "{text:?}");
                assert!(!text.contains("\u{1b}[31m"), "{text:?}");
                assert!(!text.contains('\u{7}'), "{text:?}");
            }
        }
    }

    #[test]
    fn kv_tables_align_without_trailing_blanks() {
        let out = Output {
            format: OutputFormat::Table,
            color: false,
        };
        let text = finish(out.kv([("id", "op-1".to_string()), ("state", "PENDING".to_string())]));
        assert_eq!(text, "id     op-1\nstate  PENDING\n");
    }
}
