//! `openshell-supervisor`: see the library crate for what it does.

use clap::Parser;
use openshell_supervisor::args::Args;
use openshell_supervisor::workload::{Launch, SHIM_ARG, run_shim};
use openshell_supervisor::{logging, run_cli};

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|arg| arg == SHIM_ARG) {
        std::process::exit(run_shim(&argv[2..]));
    }
    let mut args = Args::parse();
    // Started through this binary, the workload dies with the supervisor even when the
    // supervisor is killed; without a path to it, the workload is started directly.
    if let Ok(exe) = std::env::current_exe() {
        args.launch = Launch::Shim(exe);
    }
    let code = match run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: Args) -> anyhow::Result<i32> {
    logging::init(args.log_format, &args.log).map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Runtime::new()?;
    Ok(runtime.block_on(run_cli(args))?)
}
