//! `openshell-bench`: starts a real gateway and thousands of simulated supervisors that speak
//! the real protocol through the supervisor library, runs the scenarios of
//! `docs/benchmarks.md`, and writes `report.json` and `report.md`.
//!
//! Three processes take part: this coordinator (SDK clients, scenario logic, report), the
//! gateway (hidden `gateway` subcommand) and the swarm of supervisors (hidden `swarm`
//! subcommand). Keeping the gateway alone in its process makes its memory and CPU readings
//! its own, and makes a restart a real process restart.

mod ctl;
mod etcd;
mod floor;
mod gateway;
mod pgbench;
mod report;
mod run;
mod setup;
mod stats;
mod swarm;
mod sys;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "openshell-bench",
    version,
    about = "Benchmarks an OpenShell gateway with simulated supervisors and writes a JSON + Markdown report",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: run::RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Internal: the gateway under test (started by the coordinator).
    #[command(hide = true)]
    Gateway(gateway::GatewayArgs),
    /// Internal: the simulated supervisors (started by the coordinator).
    #[command(hide = true)]
    Swarm(swarm::SwarmArgs),
}

// The gateway runs in this binary too; it gets the allocator the gateway
// binary has, and so do the simulated supervisors.
#[cfg(all(not(target_env = "msvc"), not(feature = "system-allocator")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Gateway(args)) => gateway::child_main(args).await,
        Some(Command::Swarm(args)) => swarm::child_main(args).await,
        None => run::run(cli.run).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("openshell-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
