//! Confirmation before a write that is hard to take back: deleting a
//! sandbox, a global write, a policy that removes network access.
//!
//! Asked only when a person can answer (stdin and stderr are terminals);
//! `--yes` answers in advance; with no one to ask and no `--yes` such a
//! write is refused as a usage error (exit 2) instead of guessed.

use std::io;

use anyhow::Context as _;

use crate::exit::UsageError;
use crate::output::sanitize;

/// What to do about a write before sending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Safe, or confirmed in advance with `--yes`.
    Proceed,
    /// Show what changes and ask.
    Ask,
    /// Needs a confirmation that no one can give here.
    Refuse,
}

/// The decision matrix: only a risky write without `--yes` is asked, and
/// only where someone can answer.
pub fn decide(risky: bool, yes: bool, can_prompt: bool) -> Decision {
    match (risky, yes, can_prompt) {
        (false, _, _) | (true, true, _) => Decision::Proceed,
        (true, false, true) => Decision::Ask,
        (true, false, false) => Decision::Refuse,
    }
}

/// The error for [`Decision::Refuse`]; `action` completes "refusing to …".
pub fn refusal(action: &str) -> anyhow::Error {
    UsageError(format!(
        "refusing to {action} without confirmation: stdin or stderr is not a terminal, so no one can be asked; pass --yes to confirm"
    ))
    .into()
}

/// A person's answer to a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    /// Ctrl-C at the prompt.
    Interrupted,
}

/// Prints what changes to stderr and asks `question` (default: no).
///
/// `details` is printed as it is, color included; its builders sanitize
/// what came from a user or the gateway (see `Ctx::confirm`).
pub fn ask(details: &str, question: &str) -> anyhow::Result<Answer> {
    if !details.is_empty() {
        eprintln!("{}", details.trim_end());
    }
    let answer = dialoguer::Confirm::new()
        .with_prompt(sanitize(question))
        .default(false)
        .interact_on(&dialoguer::console::Term::stderr());
    match answer {
        Ok(true) => Ok(Answer::Yes),
        Ok(false) => Ok(Answer::No),
        Err(dialoguer::Error::IO(err)) if err.kind() == io::ErrorKind::Interrupted => {
            Ok(Answer::Interrupted)
        }
        Err(err) => Err(err).context("reading the confirmation"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_matrix() {
        // (risky, --yes, terminal) → decision
        let cases = [
            (false, false, false, Decision::Proceed),
            (false, false, true, Decision::Proceed),
            (false, true, false, Decision::Proceed),
            (false, true, true, Decision::Proceed),
            (true, true, false, Decision::Proceed),
            (true, true, true, Decision::Proceed),
            (true, false, true, Decision::Ask),
            (true, false, false, Decision::Refuse),
        ];
        for (risky, yes, terminal, want) in cases {
            assert_eq!(
                decide(risky, yes, terminal),
                want,
                "risky={risky} yes={yes} terminal={terminal}"
            );
        }
    }

    #[test]
    fn refusal_is_a_usage_error_naming_yes() {
        let err = refusal("delete sandbox demo");
        let usage = err.downcast_ref::<UsageError>().map(|u| u.0.clone());
        let text = usage.unwrap_or_default();
        assert!(
            text.starts_with("refusing to delete sandbox demo"),
            "{text}"
        );
        assert!(text.contains("--yes"), "{text}");
    }
}
