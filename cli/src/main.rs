//! `openshell`: the operator command line for OpenShell.
//!
//! A thin front end over `openshell-sdk`: it parses arguments, calls the SDK,
//! prints results (tables, JSON or YAML on stdout; progress, notes and errors
//! on stderr) and maps outcomes to documented exit codes (see `exit.rs`).
//! It holds no API logic of its own (no retries, no validation beyond
//! argument syntax) so it behaves exactly like the Node and Python SDKs,
//! which share the same core.

mod cli;
mod commands;
mod complete;
mod confirm;
mod context;
mod diff;
mod docs;
mod exit;
mod follow;
mod gateways;
mod outcome;
mod output;
mod progress;
mod secret_file;
mod validation;
mod views;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use openshell_cli::parse;
use openshell_sdk::SdkError;

use crate::cli::Cli;
use crate::exit::UsageError;
use crate::output::sanitize;

fn main() -> ExitCode {
    // A shell asking for completions (COMPLETE=SHELL) is answered and the process exits here.
    clap_complete::CompleteEnv::with_factory(Cli::command)
        .var(complete::COMPLETE_VAR)
        .complete();
    let cli = Cli::parse();
    // One thread is plenty: the CLI makes one call at a time.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let code = match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(err) => report_error(&err),
    };
    ExitCode::from(code)
}

/// Prints an error the way every command does and picks its exit code.
fn report_error(err: &anyhow::Error) -> u8 {
    if let Some(usage) = err.downcast_ref::<UsageError>() {
        eprintln!("error: {}", sanitize(&usage.to_string()));
        return exit::USAGE;
    }
    eprintln!("error: {}", sanitize(&format!("{err:#}")));
    if let Some(sdk) = err.downcast_ref::<SdkError>() {
        for line in violation_lines(sdk) {
            eprintln!("{}", sanitize(&line));
        }
        if let SdkError::Unauthenticated(_) = sdk {
            eprintln!(
                "hint: save a valid operator token with `openshell gateway login NAME`, \
                 or give one with OPENSHELL_TOKEN; `openshell doctor` checks the way to the gateway"
            );
        }
    }
    exit::FAILURE
}

/// One `  - field: message` line per violation, unless the message already
/// is the single violation.
fn violation_lines(err: &SdkError) -> Vec<String> {
    let violations = err.violations();
    let render = |v: &openshell_sdk::FieldViolation| {
        if v.field.is_empty() {
            v.message.clone()
        } else {
            format!("{}: {}", v.field, v.message)
        }
    };
    if let [only] = violations
        && render(only) == err.to_string()
    {
        return Vec::new();
    }
    violations
        .iter()
        .map(|v| format!("  - {}", render(v)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use openshell_sdk::FieldViolation;

    use super::*;

    #[test]
    fn violations_print_one_per_line() {
        let err = SdkError::InvalidArgument {
            message: "2 problems found".into(),
            violations: vec![
                FieldViolation {
                    field: "network_policies.gh.endpoints[0].port".into(),
                    message: "must be 1-65535".into(),
                },
                FieldViolation {
                    field: String::new(),
                    message: "policy is too large".into(),
                },
            ],
        };
        assert_eq!(
            violation_lines(&err),
            vec![
                "  - network_policies.gh.endpoints[0].port: must be 1-65535".to_string(),
                "  - policy is too large".to_string(),
            ]
        );
    }

    #[test]
    fn single_violation_is_not_repeated() {
        let err = SdkError::InvalidArgument {
            message: "version: must be 1".into(),
            violations: vec![FieldViolation {
                field: "version".into(),
                message: "must be 1".into(),
            }],
        };
        assert!(violation_lines(&err).is_empty());
    }

    #[test]
    fn error_kinds_map_to_exit_codes() {
        let usage = anyhow::Error::new(UsageError("pass --yes".into()));
        assert_eq!(report_error(&usage), exit::USAGE);
        let sdk = anyhow::Error::new(SdkError::NotFound("no such sandbox".into()));
        assert_eq!(report_error(&sdk), exit::FAILURE);
    }
}
