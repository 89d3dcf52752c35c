//! `openshell-supervisor`: see the library crate for what it does.

use clap::Parser;
use openshell_supervisor::args::Args;
use openshell_supervisor::{logging, run_cli};

fn main() {
    let args = Args::parse();
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
