//! One module per command group; each turns parsed arguments into SDK calls
//! and returns the process exit code.

mod gateway;
mod operations;
mod policy;
mod provider;
mod sandbox;
mod sessions;
mod settings;

use std::io::{self, Read};

use anyhow::Context as _;
use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::context::Ctx;
use crate::exit;
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
        Command::Completions { shell } => {
            // Rendered to memory first: clap_complete panics when stdout is a closed pipe.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "openshell", &mut script);
            write_stdout(&String::from_utf8_lossy(&script))?;
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
