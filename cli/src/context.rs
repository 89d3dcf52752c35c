//! What every command needs: the global flags, how to print, and a way to
//! reach the gateway. Connecting is deferred so commands that never talk to
//! the gateway (completions, usage errors) work without one.

use std::fmt::Display;
use std::io::{self, IsTerminal};
use std::time::Duration;

use anyhow::Context as _;
use openshell_sdk::{Client, ClientOptions};

use crate::cli::GlobalArgs;
use crate::output::Output;

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

    /// Progress is for people watching a terminal, and only when not quiet.
    pub fn show_progress(&self) -> bool {
        !self.global.quiet && io::stderr().is_terminal()
    }
}
