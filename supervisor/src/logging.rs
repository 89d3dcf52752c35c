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
        .with(BufferLayer::new(LogBuffer::global().clone()).with_filter(shipped_filter(filter)?))
        .try_init()
        .map_err(|err| format!("cannot install the logger: {err}"))
}

/// The crates that carry the pushes to the gateway. Their events stay on stderr but are not
/// shipped: at debug level every push would log lines for the next push to carry, forever.
const TRANSPORT_TARGETS: [&str; 5] = ["h2", "hyper", "hyper_util", "tower", "tonic"];

/// `filter` for the lines pushed to the gateway: the same, without the transport's events.
fn shipped_filter(filter: &str) -> Result<EnvFilter, String> {
    let mut shipped =
        EnvFilter::try_new(filter).map_err(|err| format!("invalid --log filter: {err}"))?;
    for target in TRANSPORT_TARGETS {
        let directive = format!("{target}=off")
            .parse()
            .map_err(|err| format!("invalid log directive for {target}: {err}"))?;
        shipped = shipped.add_directive(directive);
    }
    Ok(shipped)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn the_transport_events_are_not_shipped_even_at_trace_level() {
        let buffer = LogBuffer::new(100, usize::MAX);
        let subscriber = tracing_subscriber::registry()
            .with(BufferLayer::new(buffer.clone()).with_filter(shipped_filter("trace").unwrap()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "h2::codec::framed_write", "send frame");
            tracing::debug!(target: "tower::buffer::worker", "processing request");
            tracing::debug!(target: "openshell_supervisor::engine", "applied");
        });
        let (lines, _) = buffer.take(10);
        let messages: Vec<&str> = lines.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages, ["applied"]);
    }
}
