//! Live progress of a wait, on stderr: a spinner with the delivery stages
//! (one sandbox) or an N/M bar (fleet) when stderr is a terminal, one plain
//! line per state change otherwise (fleet counts at most once per
//! [`LINE_INTERVAL`], and the final line), nothing under `--quiet`.
//!
//! Only presentation lives here; following the operation is `follow.rs`.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use openshell_sdk::{ApplyOutcome, FleetProgress, Operation, OperationState, TargetKind};

use crate::output::sanitize;

/// Where progress goes, decided once per command from the terminal, `NO_COLOR` and `--quiet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    Silent,
    /// One line per state change; no control characters, for logs and pipes.
    Lines,
    /// Redrawn in place; `color` off under `NO_COLOR`.
    Live {
        color: bool,
    },
}

impl ProgressMode {
    pub fn choose(quiet: bool, stderr_is_terminal: bool, no_color: bool) -> Self {
        match (quiet, stderr_is_terminal) {
            (true, _) => Self::Silent,
            (false, false) => Self::Lines,
            (false, true) => Self::Live { color: !no_color },
        }
    }
}

/// Progress of one wait, from the commit (or the start of the wait) to the end.
pub struct Progress {
    started: Instant,
    lines: ProgressLines,
    view: View,
    /// DELIVERED was seen, so a terminal state can say how far delivery got.
    delivered: bool,
    /// Where lines and notes go when no bar is drawn: stderr, except in tests.
    text: Box<dyn Write + Send>,
}

enum View {
    Silent,
    Lines,
    Bar {
        bar: ProgressBar,
        fleet: bool,
        color: bool,
        threshold: Option<f64>,
    },
}

impl Progress {
    /// Starts showing `op`; `started` is when the command began the write or wait.
    pub fn start(
        mode: ProgressMode,
        op: &Operation,
        threshold: Option<f64>,
        started: Instant,
    ) -> Self {
        Self::start_writing_to(mode, op, threshold, started, Box::new(io::stderr()))
    }

    /// [`Progress::start`] with lines and notes written to `text` instead of stderr.
    fn start_writing_to(
        mode: ProgressMode,
        op: &Operation,
        threshold: Option<f64>,
        started: Instant,
        text: Box<dyn Write + Send>,
    ) -> Self {
        let view = match mode {
            ProgressMode::Silent => View::Silent,
            ProgressMode::Lines => View::Lines,
            ProgressMode::Live { color } => {
                let fleet = is_fleet(op);
                let bar = live_bar(op, fleet, color, started.elapsed());
                View::Bar {
                    bar,
                    fleet,
                    color,
                    threshold,
                }
            }
        };
        let mut progress = Self {
            started,
            lines: ProgressLines::default(),
            view,
            delivered: false,
            text,
        };
        progress.update(op);
        progress
    }

    /// Shows a newer version of the operation.
    pub fn update(&mut self, op: &Operation) {
        self.delivered |= op.state == OperationState::Delivered;
        let elapsed = self.started.elapsed();
        match &self.view {
            View::Silent => {}
            View::Lines => {
                if let Some(line) = self.lines.observe(op, elapsed) {
                    print_line(&mut self.text, &line);
                }
            }
            View::Bar {
                bar,
                fleet,
                color,
                threshold,
            } => {
                if *fleet {
                    let counts = op.fleet.unwrap_or_default();
                    bar.set_length(u64::from(counts.targets));
                    bar.set_position(u64::from(counts.applied));
                    bar.set_message(fleet_counts(&counts, *threshold));
                } else {
                    bar.set_message(stages(op.state, self.delivered, *color));
                }
            }
        }
    }

    /// Shows the final version and leaves it on screen.
    pub fn finish(&mut self, op: &Operation) {
        if let View::Lines = self.view {
            // The last line prints whatever the throttle says: it is the result.
            if let Some(line) = self.lines.observe_final(op, self.started.elapsed()) {
                print_line(&mut self.text, &line);
            }
            return;
        }
        self.update(op);
        if let View::Bar {
            bar, fleet, color, ..
        } = &self.view
        {
            let summary = if *fleet {
                fleet_summary(op)
            } else {
                format!(
                    "operation {}: {}",
                    op.id,
                    stages(op.state, self.delivered, *color)
                )
            };
            bar.set_style(
                ProgressStyle::default_bar()
                    .template("{msg}")
                    .unwrap_or_else(
                        // A constant template cannot fail to parse; keep the old style if it ever does.
                        |_| ProgressStyle::default_bar(),
                    ),
            );
            bar.finish_with_message(format!("{summary} ({})", seconds(self.started.elapsed())));
        }
    }

    /// How long until a line held back by the interval is due, if one is.
    pub fn held_due(&self) -> Option<Duration> {
        match self.view {
            View::Lines => self.lines.held_due(self.started.elapsed()),
            View::Silent | View::Bar { .. } => None,
        }
    }

    /// Prints the line held back by the interval, once it is due.
    pub fn flush(&mut self) {
        if let View::Lines = self.view
            && let Some(line) = self.lines.flush(self.started.elapsed())
        {
            print_line(&mut self.text, &line);
        }
    }

    /// Prints a line about the wait itself (not the operation) on stderr,
    /// above a live bar rather than through it.
    pub fn note(&mut self, text: &str) {
        match &self.view {
            View::Bar { bar, .. } => bar.suspend(|| eprintln!("{}", sanitize(text))),
            View::Silent | View::Lines => print_line(&mut self.text, text),
        }
    }

    /// Stops drawing where it is, for an interrupted wait.
    pub fn abandon(&mut self) {
        if let View::Bar { bar, .. } = &self.view {
            bar.abandon();
        }
    }
}

/// A line of progress, cleaned. Progress is best effort: a line that cannot be written
/// (stderr closed) does not end the wait.
fn print_line(out: &mut dyn Write, line: &str) {
    let _ = writeln!(out, "{}", sanitize(line));
}

fn is_fleet(op: &Operation) -> bool {
    op.fleet.is_some() || op.target_kind != TargetKind::Sandbox
}

fn live_bar(op: &Operation, fleet: bool, color: bool, elapsed: Duration) -> ProgressBar {
    let template = match (fleet, color) {
        (false, false) => "{spinner} operation {prefix} {msg} ({elapsed})",
        (false, true) => "{spinner:.cyan} operation {prefix} {msg} ({elapsed})",
        (true, false) => {
            "{spinner} operation {prefix} [{bar:24}] {pos}/{len} applied, {msg} ({elapsed})"
        }
        (true, true) => {
            "{spinner:.cyan} operation {prefix} [{bar:24.green/blue}] {pos}/{len} applied, {msg} ({elapsed})"
        }
    };
    let style = ProgressStyle::default_spinner()
        .template(template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("=> ");
    let len = op.fleet.map(|f| u64::from(f.targets));
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr())
        .with_style(style)
        .with_prefix(sanitize(&op.id).into_owned())
        .with_elapsed(elapsed);
    // The spinner keeps moving while the gateway is quiet, so a long wait
    // does not look like a hang.
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// `1.2s`: tenths are enough to tell a push apply from a poll interval.
pub fn seconds(elapsed: Duration) -> String {
    format!("{:.1}s", elapsed.as_secs_f64())
}

/// The three stages of one sandbox's change, the current one marked.
///
/// A terminal state other than APPLIED replaces the last stage with itself.
pub fn stages(state: OperationState, delivered: bool, color: bool) -> String {
    const DONE: &str = "✔";
    const NEXT: &str = "▸";
    const TODO: &str = "·";
    const BAD: &str = "✘";
    let done = |name: &str| format!("{} {name}", paint(DONE, GREEN, color));
    let next = |name: &str| format!("{} {name}", paint(NEXT, CYAN, color));
    let todo = |name: &str| format!("{TODO} {name}");
    let parts = match state {
        OperationState::Pending | OperationState::Unspecified => {
            vec![done("committed"), next("delivered"), todo("applied")]
        }
        OperationState::Delivered => vec![done("committed"), done("delivered"), next("applied")],
        OperationState::Applied => vec![done("committed"), done("delivered"), done("applied")],
        OperationState::Failed
        | OperationState::Superseded
        | OperationState::Inactive
        | OperationState::Cancelled => {
            let tone = if state == OperationState::Failed {
                RED
            } else {
                YELLOW
            };
            let end = format!(
                "{} {}",
                paint(BAD, tone, color),
                paint(state.as_str(), tone, color)
            );
            if delivered {
                vec![done("committed"), done("delivered"), end]
            } else {
                vec![done("committed"), end]
            }
        }
    };
    parts.join(" → ")
}

fn fleet_counts(counts: &FleetProgress, threshold: Option<f64>) -> String {
    let mut text = format!("{} failed, {} pending", counts.failed, counts.pending);
    if let Some(t) = threshold {
        text.push_str(&format!(", threshold {:.0}%", t * 100.0));
    }
    text
}

fn fleet_summary(op: &Operation) -> String {
    let counts = op.fleet.unwrap_or_default();
    format!(
        "operation {} {}: {}/{} applied, {}",
        op.id,
        op.state,
        counts.applied,
        counts.targets,
        fleet_counts(&counts, None)
    )
}

const GREEN: &str = "32";
const CYAN: &str = "36";
const RED: &str = "31";
const YELLOW: &str = "33";

/// SGR-colored text, or the text alone when color is off.
pub fn paint(text: &str, sgr: &str, color: bool) -> String {
    if color {
        format!("\u{1b}[{sgr}m{text}\u{1b}[0m")
    } else {
        text.to_owned()
    }
}

/// Least time between two lines that only carry new fleet counts: a fleet
/// of 32 sandboxes applying within a second logs one line, not 32.
pub const LINE_INTERVAL: Duration = Duration::from_secs(1);

/// One plain line per observed change of an operation, for stderr that is
/// not a terminal: `operation op-… DELIVERED (0.1s)`. A change of state
/// always prints; a change of fleet counts alone prints at most once per
/// interval, and the final version always prints.
#[derive(Debug)]
pub struct ProgressLines {
    /// What the last printed line showed.
    last: Option<(OperationState, Option<FleetProgress>)>,
    /// When (since the start of the wait) the last line printed.
    printed_at: Option<Duration>,
    interval: Duration,
    /// A newer version held back by the interval, printed when it is due
    /// unless a newer one comes first.
    held: Option<Operation>,
}

impl Default for ProgressLines {
    fn default() -> Self {
        Self::with_interval(LINE_INTERVAL)
    }
}

impl ProgressLines {
    /// Count-only changes print at most once per `interval`.
    pub fn with_interval(interval: Duration) -> Self {
        Self {
            last: None,
            printed_at: None,
            interval,
            held: None,
        }
    }

    /// How long after `elapsed` a held-back version is due; None when none is held.
    pub fn held_due(&self, elapsed: Duration) -> Option<Duration> {
        self.held.as_ref()?;
        let at = self.printed_at.unwrap_or_default() + self.interval;
        Some(at.saturating_sub(elapsed))
    }

    /// The line of the held-back version, once it is due.
    pub fn flush(&mut self, elapsed: Duration) -> Option<String> {
        if self.held_due(elapsed)? > Duration::ZERO {
            return None;
        }
        let op = self.held.take()?;
        self.line(&op, elapsed, true)
    }

    /// The line to print for `op` seen `elapsed` into the wait, or `None`
    /// when nothing changed or only counts changed within the interval.
    pub fn observe(&mut self, op: &Operation, elapsed: Duration) -> Option<String> {
        self.line(op, elapsed, false)
    }

    /// The line for the version a wait ended on, unless the last line
    /// already showed it.
    pub fn observe_final(&mut self, op: &Operation, elapsed: Duration) -> Option<String> {
        self.line(op, elapsed, true)
    }

    fn line(&mut self, op: &Operation, elapsed: Duration, last: bool) -> Option<String> {
        let seen = (op.state, op.fleet);
        if self.last == Some(seen) {
            self.held = None;
            return None;
        }
        let same_state = self.last.is_some_and(|(state, _)| state == op.state);
        let too_soon = self
            .printed_at
            .is_some_and(|at| elapsed.saturating_sub(at) < self.interval);
        if same_state && too_soon && !last {
            self.held = Some(op.clone());
            return None;
        }
        self.held = None;
        self.last = Some(seen);
        self.printed_at = Some(elapsed);
        let mut line = format!("operation {} {}", op.id, op.state);
        if op.is_terminal()
            && op.outcome != ApplyOutcome::Unspecified
            && op.outcome.as_str() != op.state.as_str()
        {
            line.push_str(&format!(", outcome {}", op.outcome));
        }
        if let Some(fleet) = &op.fleet {
            line.push_str(&format!(
                ": {}/{} applied, {}",
                fleet.applied,
                fleet.targets,
                fleet_counts(fleet, None)
            ));
        }
        line.push_str(&format!(" ({})", seconds(elapsed)));
        Some(line)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::exit::tests::operation;

    #[test]
    fn mode_follows_quiet_terminal_and_no_color() {
        assert_eq!(
            ProgressMode::choose(true, true, false),
            ProgressMode::Silent
        );
        assert_eq!(
            ProgressMode::choose(true, false, false),
            ProgressMode::Silent
        );
        assert_eq!(
            ProgressMode::choose(false, false, false),
            ProgressMode::Lines
        );
        assert_eq!(
            ProgressMode::choose(false, true, false),
            ProgressMode::Live { color: true }
        );
        assert_eq!(
            ProgressMode::choose(false, true, true),
            ProgressMode::Live { color: false }
        );
    }

    #[test]
    fn plain_lines_name_state_and_elapsed_once_per_change() {
        let mut lines = ProgressLines::default();
        let pending = operation(OperationState::Pending);
        assert_eq!(
            lines
                .observe(&pending, Duration::from_millis(20))
                .as_deref(),
            Some("operation op-0193 PENDING (0.0s)")
        );
        assert_eq!(lines.observe(&pending, Duration::from_millis(60)), None);
        let delivered = operation(OperationState::Delivered);
        assert_eq!(
            lines
                .observe(&delivered, Duration::from_millis(140))
                .as_deref(),
            Some("operation op-0193 DELIVERED (0.1s)")
        );
        let mut applied = operation(OperationState::Applied);
        applied.outcome = ApplyOutcome::Applied;
        assert_eq!(
            lines
                .observe(&applied, Duration::from_millis(310))
                .as_deref(),
            Some("operation op-0193 APPLIED (0.3s)")
        );
    }

    #[test]
    fn plain_lines_carry_a_distinct_outcome_and_fleet_counts() {
        let mut failed = operation(OperationState::Failed);
        failed.outcome = ApplyOutcome::FailedRetainedLastKnownGood;
        let line = ProgressLines::default()
            .observe(&failed, Duration::from_secs(2))
            .unwrap();
        assert_eq!(
            line,
            "operation op-0193 FAILED, outcome FAILED_RETAINED_LAST_KNOWN_GOOD (2.0s)"
        );

        let mut fleet = operation(OperationState::Pending);
        fleet.fleet = Some(FleetProgress {
            targets: 10,
            applied: 3,
            failed: 1,
            pending: 6,
            ..FleetProgress::default()
        });
        let mut lines = ProgressLines::default();
        assert_eq!(
            lines.observe(&fleet, Duration::from_millis(400)).as_deref(),
            Some("operation op-0193 PENDING: 3/10 applied, 1 failed, 6 pending (0.4s)")
        );
        // A count change with the same state is a change worth a line, once
        // the interval since the last line has passed.
        fleet.fleet = Some(FleetProgress {
            targets: 10,
            applied: 4,
            failed: 1,
            pending: 5,
            ..FleetProgress::default()
        });
        assert!(lines.observe(&fleet, Duration::from_millis(1400)).is_some());
    }

    #[test]
    fn piped_fleet_progress_prints_at_most_one_line_per_interval_and_the_last() {
        let interval = Duration::from_millis(1000);
        let mut lines = ProgressLines::with_interval(interval);
        let mut op = operation(OperationState::Pending);
        op.target_kind = TargetKind::Global;
        let mut printed = Vec::new();
        // 32 sandboxes apply one after the other, 100 ms apart: 3.2 s of count changes.
        for applied in 0..32u32 {
            op.fleet = Some(FleetProgress {
                targets: 32,
                applied,
                pending: 32 - applied,
                ..FleetProgress::default()
            });
            let at = Duration::from_millis(100 * u64::from(applied));
            if let Some(line) = lines.observe(&op, at) {
                printed.push((at, line));
            }
        }
        // At 0 s, 1.0 s, 2.0 s and 3.0 s: one line per second, not 32.
        let times: Vec<u128> = printed.iter().map(|(at, _)| at.as_millis()).collect();
        assert_eq!(times, vec![0, 1000, 2000, 3000], "{printed:?}");
        // The final version (here 31/32 at 3.1 s, within the interval) still prints.
        let last = lines
            .observe_final(&op, Duration::from_millis(3100))
            .expect("the final version prints");
        assert!(last.contains("31/32 applied"), "{last}");
        // Once printed, the same version is not printed again.
        assert_eq!(lines.observe_final(&op, Duration::from_millis(3200)), None);
        // A change of state is never held back by the interval.
        op.state = OperationState::Applied;
        assert!(lines.observe(&op, Duration::from_millis(3300)).is_some());
    }

    #[test]
    fn a_held_back_change_prints_when_due_without_a_newer_one() {
        let mut lines = ProgressLines::with_interval(Duration::from_secs(1));
        let mut op = operation(OperationState::Pending);
        let counts = |applied| FleetProgress {
            targets: 2,
            applied,
            pending: 2 - applied,
            ..FleetProgress::default()
        };
        op.fleet = Some(counts(0));
        assert!(lines.observe(&op, Duration::ZERO).is_some());
        assert_eq!(lines.held_due(Duration::ZERO), None);
        op.fleet = Some(counts(1));
        assert_eq!(lines.observe(&op, Duration::from_millis(300)), None);
        assert_eq!(
            lines.held_due(Duration::from_millis(300)),
            Some(Duration::from_millis(700))
        );
        // Not due yet: nothing; due: the held version, once.
        assert_eq!(lines.flush(Duration::from_millis(900)), None);
        let line = lines.flush(Duration::from_millis(1000)).expect("due");
        assert!(line.contains("1/2 applied"), "{line}");
        assert_eq!(lines.held_due(Duration::from_millis(1000)), None);
        assert_eq!(lines.flush(Duration::from_secs(5)), None);
    }

    #[test]
    fn plain_lines_have_no_control_characters() {
        let mut lines = ProgressLines::default();
        for state in [
            OperationState::Pending,
            OperationState::Delivered,
            OperationState::Failed,
        ] {
            let line = lines
                .observe(&operation(state), Duration::from_secs(1))
                .unwrap();
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }

    #[test]
    fn stages_mark_the_current_step() {
        assert_eq!(
            stages(OperationState::Pending, false, false),
            "✔ committed → ▸ delivered → · applied"
        );
        assert_eq!(
            stages(OperationState::Delivered, true, false),
            "✔ committed → ✔ delivered → ▸ applied"
        );
        assert_eq!(
            stages(OperationState::Applied, true, false),
            "✔ committed → ✔ delivered → ✔ applied"
        );
        // Poll mode never reports DELIVERED; APPLIED still completes every stage.
        assert_eq!(
            stages(OperationState::Applied, false, false),
            "✔ committed → ✔ delivered → ✔ applied"
        );
        assert_eq!(
            stages(OperationState::Failed, true, false),
            "✔ committed → ✔ delivered → ✘ FAILED"
        );
        assert_eq!(
            stages(OperationState::Inactive, false, false),
            "✔ committed → ✘ INACTIVE"
        );
    }

    #[test]
    fn stages_are_colored_only_when_asked() {
        assert!(!stages(OperationState::Failed, true, false).contains('\u{1b}'));
        assert!(stages(OperationState::Failed, true, true).contains("\u{1b}[31m"));
    }

    #[test]
    fn fleet_text_shows_threshold() {
        let counts = FleetProgress {
            targets: 20,
            applied: 19,
            pending: 1,
            ..FleetProgress::default()
        };
        assert_eq!(
            fleet_counts(&counts, Some(0.95)),
            "0 failed, 1 pending, threshold 95%"
        );
        let mut op = operation(OperationState::Applied);
        op.fleet = Some(counts);
        assert_eq!(
            fleet_summary(&op),
            "operation op-0193 APPLIED: 19/20 applied, 0 failed, 1 pending"
        );
    }

    /// Bytes written through a `Progress`, read back by the test.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// A progress line without its elapsed time (` (0.0s)`), which the clock decides.
    fn without_elapsed(line: &str) -> &str {
        match line.rsplit_once(" (") {
            Some((head, tail)) if tail.ends_with("s)") => head,
            _ => line,
        }
    }

    #[test]
    fn silent_and_line_progress_never_draw() {
        let pending = operation(OperationState::Pending);
        let delivered = operation(OperationState::Delivered);
        let mut applied = operation(OperationState::Applied);
        applied.outcome = ApplyOutcome::Applied;

        // Silent: nothing at all about the operation.
        let quiet = Captured::default();
        let mut silent = Progress::start_writing_to(
            ProgressMode::Silent,
            &pending,
            None,
            Instant::now(),
            Box::new(quiet.clone()),
        );
        silent.update(&delivered);
        silent.finish(&applied);
        silent.abandon();
        assert_eq!(quiet.text(), "");

        // Lines: no bar; one plain line per change, the note, and the result once.
        let out = Captured::default();
        let mut lines = Progress::start_writing_to(
            ProgressMode::Lines,
            &pending,
            None,
            Instant::now(),
            Box::new(out.clone()),
        );
        assert!(matches!(lines.view, View::Lines));
        lines.update(&pending);
        lines.update(&delivered);
        lines.note("the connection to the gateway was lost; following again");
        lines.finish(&applied);
        lines.abandon();
        let text = out.text();
        assert!(
            !text.chars().any(|c| c != '\n' && c.is_control()),
            "{text:?}"
        );
        let printed: Vec<&str> = text.lines().map(without_elapsed).collect();
        assert_eq!(
            printed,
            [
                "operation op-0193 PENDING",
                "operation op-0193 DELIVERED",
                "the connection to the gateway was lost; following again",
                "operation op-0193 APPLIED",
            ],
            "{text:?}"
        );
        // Each operation line says how long the wait has taken.
        for line in text.lines().filter(|line| line.starts_with("operation")) {
            assert_ne!(without_elapsed(line), line, "{line:?}");
        }
    }
}
