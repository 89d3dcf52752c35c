//! Log output: `tracing` to stderr as text or JSON lines, and a copy of the same events into
//! the buffer that is pushed to the gateway ([`crate::logs`]). Stdout stays the workload's.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::args::LogFormat;
use crate::logs::{BufferLayer, LogBuffer};

/// Installs the global subscriber. Fails on a malformed filter.
pub fn init(format: LogFormat, filter: &str) -> Result<(), String> {
    let parse = || EnvFilter::try_new(filter).map_err(|err| format!("invalid --log filter: {err}"));
    let stderr = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let stderr = match format {
        LogFormat::Text => stderr.boxed(),
        LogFormat::Json => stderr.json().boxed(),
    };
    tracing_subscriber::registry()
        .with(stderr.with_filter(parse()?))
        .with(BufferLayer::new(LogBuffer::global().clone()).with_filter(parse()?))
        .try_init()
        .map_err(|err| format!("cannot install the logger: {err}"))
}
