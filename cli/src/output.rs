//! Printing results: tables for people, JSON or YAML of the SDK view types
//! for programs. Results go to stdout; progress, notes and errors to stderr.

use std::ffi::OsStr;
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
                Ok(text)
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
    pub fn list(&self, headers: &[&str]) -> Table {
        let mut table = self.base();
        table.set_header(headers.iter().map(|h| self.strong(h)));
        table
    }

    /// A two-column key/value table for one object.
    pub fn kv<K: AsRef<str>>(&self, rows: impl IntoIterator<Item = (K, String)>) -> Table {
        let mut table = self.base();
        for (key, value) in rows {
            table.add_row(vec![self.strong(key.as_ref()), Cell::new(value)]);
        }
        table
    }

    /// A bold cell when styling is on.
    pub fn strong(&self, text: &str) -> Cell {
        let cell = Cell::new(text);
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
pub fn finish(mut table: Table) -> String {
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
    fn kv_tables_align_without_trailing_blanks() {
        let out = Output {
            format: OutputFormat::Table,
            color: false,
        };
        let text = finish(out.kv([("id", "op-1".to_string()), ("state", "PENDING".to_string())]));
        assert_eq!(text, "id     op-1\nstate  PENDING\n");
    }
}
