//! Termination signals sent to the supervisor itself, which it forwards to the workload.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// SIGTERM and SIGINT, installed once at start so none is lost before the workload runs.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next termination signal received.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.term.recv() => Signal::SIGTERM,
            Some(()) = self.int.recv() => Signal::SIGINT,
            // Both streams ended: no more signals will ever arrive.
            else => std::future::pending().await,
        }
    }
}

/// Exit code of a process ended by `signal`, as shells report it.
pub fn signal_exit_code(signal: Signal) -> i32 {
    128 + signal as i32
}
