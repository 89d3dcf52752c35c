//! `openshell-gateway`: reads configuration, sets up logging and runs the
//! gateway until SIGINT or SIGTERM.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use openshell_gateway::config::{Flags, GatewayConfig, LogFormat};
use tracing_subscriber::EnvFilter;

// Every session of a fanout allocates and frees its snapshot, frames and
// acks at once, from both runtime threads: jemalloc's thread caches cost
// less CPU there than the system allocator, and unlike mimalloc it does not
// raise idle memory per session (docs/benchmarks-history.md, fix 30).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // A configuration or store the gateway cannot start with is an expected failure:
            // one line saying what failed and why, each cause once, and never a backtrace,
            // whatever RUST_BACKTRACE says (anyhow's `Debug` of the error would add one).
            let mut line = err.to_string();
            for cause in err.chain().skip(1) {
                let cause = cause.to_string();
                if !line.contains(&cause) {
                    line.push_str(": ");
                    line.push_str(&cause);
                }
            }
            eprintln!("error: {line}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let config = GatewayConfig::resolve(Flags::parse()).context("invalid gateway configuration")?;
    let filter = EnvFilter::try_new(&config.log).context("invalid log filter")?;
    // Colour only on a terminal (and not under NO_COLOR): escape sequences in a log file
    // break grep and log shippers.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => subscriber.json().init(),
        LogFormat::Text => subscriber.init(),
    }
    let mut gateway = openshell_gateway::start(config).await?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
        _ = sigterm.recv() => tracing::info!("SIGTERM received, shutting down"),
        () = gateway.wait() => {
            tracing::error!("server ended unexpectedly");
            return Ok(());
        }
    }
    gateway.shutdown().await;
    Ok(())
}
