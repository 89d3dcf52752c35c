//! What every command needs: the global flags, how to print, and a way to
//! reach the gateway. Connecting is deferred so commands that never talk to
//! the gateway (completions, usage errors) work without one.

use std::fmt::Display;
use std::future::Future;
use std::io::{self, IsTerminal};
use std::time::Duration;

use anyhow::Context as _;
use openshell_sdk::{Client, ClientOptions};

use crate::cli::GlobalArgs;
use crate::confirm::{self, Answer, Decision};
use crate::exit;
use crate::output::{Output, no_color};
use crate::progress::ProgressMode;

/// Bound on reaching the gateway at all.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one ordinary call; the SDK adds any server-side wait on top.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Ctx {
    pub global: GlobalArgs,
    pub out: Output,
}

impl Ctx {
    pub fn new(global: GlobalArgs) -> Self {
        let out = Output::detect(global.output);
        Self { global, out }
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        let mut options = ClientOptions::new(self.global.gateway.clone())
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_request_timeout(REQUEST_TIMEOUT);
        if let Some(token) = self.global.token.as_deref().filter(|t| !t.is_empty()) {
            options = options.with_token(token);
        }
        if let Some(path) = &self.global.ca_cert {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read CA certificate {}", path.display()))?;
            options = options.with_ca_cert_pem(pem);
        }
        Ok(Client::connect(options).await?)
    }

    /// An informational line on stderr, suppressed by `--quiet`.
    pub fn note(&self, message: impl Display) {
        if !self.global.quiet {
            eprintln!("{message}");
        }
    }

    /// A warning on stderr; `--quiet` does not hide it.
    pub fn warn(&self, message: impl Display) {
        eprintln!("warning: {message}");
    }

    pub fn stdout_is_terminal(&self) -> bool {
        io::stdout().is_terminal()
    }

    /// Prompts need a person on both ends: input to answer, stderr to show the question.
    pub fn can_prompt(&self) -> bool {
        io::stdin().is_terminal() && io::stderr().is_terminal()
    }

    /// Live progress is for people watching a terminal; logs get plain lines.
    pub fn progress_mode(&self) -> ProgressMode {
        ProgressMode::choose(self.global.quiet, io::stderr().is_terminal(), no_color())
    }

    /// Confirms a write before it is sent (see `confirm.rs`).
    ///
    /// `action` completes "refusing to …" and "did not …"; `details` says
    /// what changes and is only awaited when someone is asked, so its
    /// gateway reads cost nothing under `--yes` or in scripts.
    /// `Ok(None)` means go on; `Ok(Some(code))` means the person declined.
    pub async fn confirm(
        &self,
        risky: bool,
        action: &str,
        question: &str,
        details: impl Future<Output = anyhow::Result<String>>,
    ) -> anyhow::Result<Option<u8>> {
        match confirm::decide(risky, self.global.yes, self.can_prompt()) {
            Decision::Proceed => Ok(None),
            Decision::Refuse => Err(confirm::refusal(action)),
            Decision::Ask => match confirm::ask(&details.await?, question)? {
                Answer::Yes => Ok(None),
                Answer::No => {
                    eprintln!("aborted: did not {action}; nothing was changed");
                    Ok(Some(exit::FAILURE))
                }
                Answer::Interrupted => {
                    eprintln!("interrupted: did not {action}; nothing was changed");
                    Ok(Some(exit::INTERRUPTED))
                }
            },
        }
    }
}
