//! One module per command group; each turns parsed arguments into SDK calls
//! and returns the process exit code.

mod doctor;
mod gateway;
mod logs;
mod operations;
mod policy;
mod provider;
mod sandbox;
mod sessions;
mod settings;
mod token;

use std::io::{self, IsTerminal, Read};

use anyhow::Context as _;
use clap::CommandFactory;
use openshell_sdk::Client;

use crate::cli::{Cli, Command, DocsCommand};
use crate::context::Ctx;
use crate::exit::{self, UsageError};
use crate::output::write_stdout;

pub async fn run(cli: Cli) -> anyhow::Result<u8> {
    let ctx = Ctx::new(cli.global);
    match cli.command {
        Command::Sandbox(cmd) => sandbox::run(&ctx, cmd).await,
        Command::Policy(cmd) => policy::run(&ctx, cmd).await,
        Command::Settings(cmd) => settings::run(&ctx, cmd).await,
        Command::Provider(cmd) => provider::run(&ctx, cmd).await,
        Command::Operations(cmd) => operations::run(&ctx, cmd).await,
        Command::Sessions(cmd) => sessions::run(&ctx, cmd).await,
        Command::Gateway(cmd) => gateway::run(&ctx, cmd).await,
        Command::Token(cmd) => token::run(&ctx, cmd).await,
        Command::Status => doctor::status(&ctx).await,
        Command::Doctor => doctor::doctor(&ctx).await,
        Command::Logs(args) => logs::run(&ctx, args).await,
        Command::Completions { shell } => {
            // Rendered to memory first: a write to a closed pipe must not panic.
            let mut script = Vec::new();
            crate::complete::registration(shell, &mut script)
                .context("rendering the completion script")?;
            write_stdout(&String::from_utf8_lossy(&script))?;
            Ok(exit::SUCCESS)
        }
        Command::Docs(DocsCommand::Markdown) => {
            write_stdout(&crate::docs::markdown())?;
            Ok(exit::SUCCESS)
        }
        Command::Docs(DocsCommand::Man { out_dir }) => {
            let written = crate::docs::write_man_pages(&Cli::command(), &out_dir)?;
            ctx.note(format!(
                "{written} man pages written to {}",
                out_dir.display()
            ));
            Ok(exit::SUCCESS)
        }
    }
}

/// Reads a file argument; `-` means stdin so policies can be piped in.
pub fn read_input(path: &str, what: &str) -> anyhow::Result<String> {
    if path == "-" {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read the {what} from stdin"))?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {what} file {path}"))
    }
}

/// How a file argument is named in messages and diff headers.
pub fn source_label(path: &str) -> String {
    if path == "-" {
        "stdin".to_owned()
    } else {
        path.to_owned()
    }
}

/// Reads a policy file argument (`-` for stdin) and refuses an empty one:
/// the API reads an empty policy as "leave the policy alone", so sending it
/// would quietly commit nothing instead of what the operator meant.
pub fn read_policy(ctx: &Ctx, path: &str) -> anyhow::Result<String> {
    if path == "-" && io::stdin().is_terminal() {
        ctx.note("reading the policy from stdin; end it with Ctrl-D");
    }
    let text = read_input(path, "policy")?;
    if text.trim().is_empty() {
        return Err(UsageError(format!(
            "the policy from {} is empty; it needs at least `version: 1`",
            source_label(path)
        ))
        .into());
    }
    Ok(text)
}

/// Sandboxes a fleet write reaches, for confirmation prompts.
pub async fn sandbox_count(client: &Client) -> anyhow::Result<usize> {
    Ok(client.list_sandboxes(None, false).await?.len())
}
