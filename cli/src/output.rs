//! Printing results: tables for people, JSON or YAML of the SDK view types
//! for programs. Results go to stdout; progress, notes and errors to stderr.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::ValueEnum;
use comfy_table::{Attribute, Cell, Table, presets};
use serde::Serialize;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Narrowest a cut column gets (or its header, when wider): below this
/// the text says too little to be worth showing.
const MIN_CUT_WIDTH: usize = 10;

/// Columns of a list table sit this many spaces apart.
const COLUMN_GAP: usize = 2;

/// The `--output` format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Tables fitted to the terminal: free text is cut with "…", ids never are.
    Table,
    /// Tables with every column (ids, hashes, details), never cut.
    Wide,
    Json,
    Yaml,
}

impl OutputFormat {
    /// Table or wide: output for people rather than programs.
    pub fn is_table(self) -> bool {
        matches!(self, Self::Table | Self::Wide)
    }
}

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub format: OutputFormat,
    /// Styled tables; off under `NO_COLOR` or when stdout is not a terminal.
    pub color: bool,
    /// Width list tables are fitted to by cutting their free-text columns;
    /// `None` cuts nothing (`-o wide`, or stdout not a terminal and no
    /// `COLUMNS`), so scripts reading a pipe get whole values.
    pub width: Option<usize>,
    /// List tables without their header line (`--no-headers`).
    pub no_headers: bool,
}

impl Output {
    pub fn detect(format: OutputFormat, no_headers: bool) -> Self {
        let terminal = io::stdout().is_terminal();
        let columns = std::env::var("COLUMNS").ok();
        // comfy-table asks the terminal only when stdout is one.
        let terminal_width = Table::new().width().map(usize::from);
        Self {
            format,
            color: color_enabled(no_color(), terminal),
            width: fit_width(format, columns.as_deref(), terminal_width),
            no_headers,
        }
    }

    /// Plain output of `format` that cuts nothing.
    #[cfg(test)]
    pub fn plain(format: OutputFormat) -> Self {
        Self {
            format,
            color: false,
            width: None,
            no_headers: false,
        }
    }

    /// `-o wide`: list tables add their id, hash and detail columns.
    pub fn wide(&self) -> bool {
        self.format == OutputFormat::Wide
    }

    /// Renders `value` as JSON or YAML, or through `table` for the table formats.
    pub fn render<T: Serialize + ?Sized>(
        &self,
        value: &T,
        table: impl FnOnce(&Self) -> String,
    ) -> anyhow::Result<String> {
        match self.format {
            OutputFormat::Table | OutputFormat::Wide => Ok(table(self)),
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

    /// An empty list table with these column headers; every column is kept
    /// whole until [`ListTable::cut`] says otherwise.
    pub fn list(&self, headers: &[&str]) -> ListTable {
        ListTable {
            out: *self,
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            cut: vec![false; headers.len()],
            rows: Vec::new(),
        }
    }

    /// A list table of `items`, one row each, with the `columns` this
    /// format shows (wide-only ones under `-o wide` alone).
    pub fn table<T>(&self, items: &[T], columns: &[Column<'_, T>]) -> String {
        let shown: Vec<&Column<'_, T>> = columns
            .iter()
            .filter(|c| self.wide() || !c.wide_only)
            .collect();
        let headers: Vec<&str> = shown.iter().map(|c| c.header).collect();
        let mut table = self.list(&headers);
        for (i, column) in shown.iter().enumerate() {
            table.cut[i] = column.cut;
        }
        for item in items {
            table.add_row(shown.iter().map(|c| (c.value)(item)));
        }
        finish(table)
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

    /// A borderless table that never wraps a cell: a wrapped id copied from
    /// the terminal is a wrong id. Too-long rows run past the edge instead,
    /// as kubectl's do, unless a list table cut its free text to fit.
    fn base(&self) -> Table {
        let mut table = Table::new();
        table.load_preset(presets::NOTHING);
        if self.color {
            table.enforce_styling();
        } else {
            // Without this comfy-table would still style when stdout is a terminal.
            table.force_no_tty();
        }
        table
    }
}

/// The width list tables are fitted to: `COLUMNS` when set (a script can
/// ask for a width), else the terminal's; none for `-o wide` or a pipe.
fn fit_width(
    format: OutputFormat,
    columns: Option<&str>,
    terminal_width: Option<usize>,
) -> Option<usize> {
    if format != OutputFormat::Table {
        return None;
    }
    if let Some(width) = columns.and_then(|c| c.trim().parse::<usize>().ok()) {
        return Some(width).filter(|w| *w > 0);
    }
    // A pty nobody sized reports 0 columns.
    terminal_width.filter(|w| *w > 0)
}

/// One column of a list table: its header and how a row's cell is made.
pub struct Column<'a, T> {
    header: &'static str,
    value: Box<dyn Fn(&T) -> String + 'a>,
    cut: bool,
    wide_only: bool,
}

impl<'a, T> Column<'a, T> {
    /// A column kept whole: ids, names, numbers, states.
    pub fn new(header: &'static str, value: impl Fn(&T) -> String + 'a) -> Self {
        Self {
            header,
            value: Box::new(value),
            cut: false,
            wide_only: false,
        }
    }

    /// Free text (reasons, messages): cut with "…" when the row would not
    /// fit the terminal.
    pub fn cut(mut self) -> Self {
        self.cut = true;
        self
    }

    /// Shown under `-o wide` only.
    pub fn wide(mut self) -> Self {
        self.wide_only = true;
        self
    }
}

/// A list table whose rows can only be added through [`sanitize`].
pub struct ListTable {
    out: Output,
    headers: Vec<String>,
    /// Per column: free text that may be cut to fit.
    cut: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl ListTable {
    pub fn add_row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let cells = cells
            .into_iter()
            .map(|c| one_line(&sanitize(c.as_ref())))
            .collect();
        self.rows.push(cells);
        self
    }

    /// Lets the column with this header be cut with "…" to fit.
    pub fn cut(&mut self, header: &str) -> &mut Self {
        if let Some(i) = self.headers.iter().position(|h| h == header) {
            self.cut[i] = true;
        }
        self
    }

    /// Widths to cut the free-text columns to, or `None` for each column
    /// that keeps its whole text.
    fn cut_widths(&self) -> Vec<Option<usize>> {
        let columns = self.headers.len();
        let mut natural: Vec<usize> = (0..columns)
            .map(|i| {
                let header = if self.out.no_headers {
                    0
                } else {
                    self.headers[i].width()
                };
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.width())
                    .fold(header, usize::max)
            })
            .collect();
        let mut limits = vec![None; columns];
        let Some(width) = self.out.width else {
            return limits;
        };
        let total = natural.iter().sum::<usize>() + COLUMN_GAP * columns.saturating_sub(1);
        let mut excess = total.saturating_sub(width);
        // Take from the widest cuttable column first, never below its floor.
        while excess > 0 {
            let widest = (0..columns)
                .filter(|&i| self.cut[i] && natural[i] > self.floor(i))
                .max_by_key(|&i| natural[i]);
            let Some(i) = widest else { break };
            natural[i] -= 1;
            limits[i] = Some(natural[i]);
            excess -= 1;
        }
        limits
    }

    fn floor(&self, column: usize) -> usize {
        let header = if self.out.no_headers {
            0
        } else {
            self.headers[column].width()
        };
        header.max(MIN_CUT_WIDTH)
    }
}

impl From<ListTable> for Table {
    fn from(list: ListTable) -> Self {
        let limits = list.cut_widths();
        let mut table = list.out.base();
        if !list.out.no_headers {
            table.set_header(list.headers.iter().map(|h| list.out.strong(h)));
        }
        for row in &list.rows {
            let cells: Vec<Cell> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| match limits.get(i).copied().flatten() {
                    Some(limit) => Cell::new(truncate(cell, limit)),
                    None => Cell::new(cell),
                })
                .collect();
            table.add_row(cells);
        }
        table
    }
}

/// A list cell on one line: a line break inside a row would misalign it.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\t') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// `text` cut to `width` terminal columns, ending in "…" when cut. Widths
/// are display widths: a CJK character or emoji takes two columns.
pub fn truncate(text: &str, width: usize) -> Cow<'_, str> {
    if text.width() <= width {
        return Cow::Borrowed(text);
    }
    if width == 0 {
        return Cow::Borrowed("");
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        // One column stays free for the ellipsis.
        if used + w > width - 1 {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    Cow::Owned(out)
}

/// kubectl-style age of an RFC 3339 time at `now`: "45s", "3m", "5h", "4d";
/// "-" when unknown. A time ahead of this machine's clock reads "0s".
pub fn age(at: Option<&str>, now: SystemTime) -> String {
    let Some(at) = at.and_then(|t| humantime::parse_rfc3339(t).ok()) else {
        return "-".to_owned();
    };
    let secs = now.duration_since(at).unwrap_or(Duration::ZERO).as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3_600 => format!("{}m", secs / 60),
        3_600..172_800 => format!("{}h", secs / 3_600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// The first 12 characters of a hash, as `-o wide` and key/value views
/// show it; "-" when none.
pub fn short_hash(hash: Option<&str>) -> String {
    match hash {
        Some(h) if !h.is_empty() => h.chars().take(12).collect(),
        _ => "-".to_owned(),
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
    let last = table.column_count().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        // The last column gets none: styled headers end in a reset code,
        // and padding before it would survive the trim below.
        column.set_padding((0, if i == last { 0 } else { 2 }));
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
                color,
                ..Output::plain(OutputFormat::Table)
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

    fn fitted(width: usize) -> Output {
        Output {
            width: Some(width),
            ..Output::plain(OutputFormat::Table)
        }
    }

    #[test]
    fn truncate_cuts_by_display_width_with_an_ellipsis() {
        assert_eq!(truncate("short", 10), "short");
        assert!(matches!(truncate("exactly10!", 10), Cow::Borrowed(_)));
        assert_eq!(truncate("connection refused", 10), "connectio…");
        assert_eq!(truncate("connection refused", 10).width(), 10);
        // Wide characters take two columns: never cut one in half.
        assert_eq!(truncate("日本語のエラー", 6), "日本…");
        assert_eq!(truncate("日本語のエラー", 5), "日本…");
        assert_eq!(truncate("日本語のエラー", 5).width(), 5);
        assert_eq!(truncate("abc", 0), "");
        assert_eq!(truncate("abc", 1), "…");
    }

    #[test]
    fn fitted_tables_cut_free_text_and_never_ids() {
        let id = "op-0193a7c2-1111-7000-8000-0123456789ab";
        let error = "policy rejected: port 0 is not valid for endpoint api.example.com";
        for width in [20, 40, 60, 80] {
            let mut table = fitted(width).list(&["ID", "STATE", "ERROR"]);
            table.cut("ERROR");
            table.add_row([id, "FAILED", error]);
            let text = finish(table);
            let row = text.lines().nth(1).unwrap();
            assert!(row.starts_with(id), "{width}: {text}");
            assert!(row.contains("FAILED"), "{width}: {text}");
            assert!(row.ends_with('…'), "{width}: {text}");
            // Past the id and state the row fits, down to the error's floor.
            let floor = id.len() + 2 + "FAILED".len() + 2 + MIN_CUT_WIDTH;
            assert!(row.width() <= width.max(floor), "{width}: {row:?}");
            assert_eq!(text.lines().count(), 2, "{text}");
        }
        // Without a width (a pipe, or -o wide) nothing is cut.
        let mut table = Output::plain(OutputFormat::Table).list(&["ID", "ERROR"]);
        table.cut("ERROR");
        table.add_row([id, error]);
        assert!(finish(table).contains(error));
    }

    #[test]
    fn list_cells_stay_on_one_line_and_headers_can_go() {
        let mut out = fitted(80);
        out.no_headers = true;
        let mut table = out.list(&["NAME", "MESSAGE"]);
        table.add_row(["web", "first line\nsecond line"]);
        assert_eq!(finish(table), "web  first line second line\n");
    }

    #[test]
    fn width_comes_from_columns_then_the_terminal_and_never_for_wide() {
        assert_eq!(
            fit_width(OutputFormat::Table, Some("100"), Some(80)),
            Some(100)
        );
        assert_eq!(fit_width(OutputFormat::Table, None, Some(80)), Some(80));
        // A pipe: stable layout, nothing cut.
        assert_eq!(fit_width(OutputFormat::Table, None, None), None);
        // An unsized pty.
        assert_eq!(fit_width(OutputFormat::Table, None, Some(0)), None);
        assert_eq!(
            fit_width(OutputFormat::Table, Some("junk"), Some(90)),
            Some(90)
        );
        assert_eq!(fit_width(OutputFormat::Wide, Some("80"), Some(80)), None);
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now = humantime::parse_rfc3339("2026-12-01T12:00:00Z").unwrap();
        let ago = |t: &str| age(Some(t), now);
        assert_eq!(ago("2026-12-01T11:59:55.500Z"), "4s");
        assert_eq!(ago("2026-12-01T11:57:00Z"), "3m");
        assert_eq!(ago("2026-12-01T10:00:00Z"), "2h");
        assert_eq!(ago("2026-11-30T10:00:00Z"), "26h");
        assert_eq!(ago("2026-11-27T12:00:00Z"), "4d");
        // Ahead of this clock: not negative.
        assert_eq!(ago("2026-12-01T12:00:09Z"), "0s");
        assert_eq!(age(None, now), "-");
        assert_eq!(age(Some("yesterday"), now), "-");
    }

    #[test]
    fn kv_tables_align_without_trailing_blanks() {
        let out = Output::plain(OutputFormat::Table);
        let text = finish(out.kv([("id", "op-1".to_string()), ("state", "PENDING".to_string())]));
        assert_eq!(text, "id     op-1\nstate  PENDING\n");
    }
}
