//! Log output: `tracing` to stderr as text or JSON lines. Stdout stays the workload's.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::args::LogFormat;

/// Installs the global subscriber. Fails on a malformed filter.
pub fn init(format: LogFormat, filter: &str) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(filter).map_err(|err| format!("invalid --log filter: {err}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(|err| format!("cannot install the logger: {err}"))
}
