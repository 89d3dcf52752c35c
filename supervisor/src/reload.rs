//! How the applier tells the workload that new configuration is active.
//!
//! The applier only bumps a generation in a watch channel; the workload task turns each bump
//! into a signal. Notices sent before the workload exists are absorbed when it starts, which is
//! how the very first activation goes unsignalled: the workload reads it at start instead.

use std::fmt;
use std::str::FromStr;

use tokio::sync::watch;

/// Signal sent to the workload after a live change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReloadSignal {
    #[default]
    Hup,
    Usr1,
    Usr2,
    /// Send nothing; the workload watches the state directory itself (for `STATE/active`
    /// being replaced: see `apply::state_dir`).
    None,
}

impl ReloadSignal {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadSignal::Hup => "SIGHUP",
            ReloadSignal::Usr1 => "SIGUSR1",
            ReloadSignal::Usr2 => "SIGUSR2",
            ReloadSignal::None => "none",
        }
    }

    pub fn to_nix(self) -> Option<nix::sys::signal::Signal> {
        use nix::sys::signal::Signal;
        match self {
            ReloadSignal::Hup => Some(Signal::SIGHUP),
            ReloadSignal::Usr1 => Some(Signal::SIGUSR1),
            ReloadSignal::Usr2 => Some(Signal::SIGUSR2),
            ReloadSignal::None => None,
        }
    }
}

impl fmt::Display for ReloadSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Returned for a name that is not a supported reload signal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reload signal {0:?}; expected SIGHUP, SIGUSR1, SIGUSR2 or none")]
pub struct UnknownSignal(pub String);

impl FromStr for ReloadSignal {
    type Err = UnknownSignal;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let upper = s.trim().to_ascii_uppercase();
        match upper.strip_prefix("SIG").unwrap_or(&upper) {
            "HUP" => Ok(ReloadSignal::Hup),
            "USR1" => Ok(ReloadSignal::Usr1),
            "USR2" => Ok(ReloadSignal::Usr2),
            "NONE" => Ok(ReloadSignal::None),
            _ => Err(UnknownSignal(s.to_string())),
        }
    }
}

/// The latest activation: a counter that moves on every live change, and the signal for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReloadNotice {
    pub generation: u64,
    pub signal: ReloadSignal,
}

pub type ReloadSender = watch::Sender<ReloadNotice>;
pub type ReloadReceiver = watch::Receiver<ReloadNotice>;

pub fn reload_channel() -> (ReloadSender, ReloadReceiver) {
    watch::channel(ReloadNotice::default())
}

/// Records one more activation that the workload should pick up.
pub fn notify(sender: &ReloadSender, signal: ReloadSignal) {
    sender.send_modify(|notice| {
        notice.generation = notice.generation.wrapping_add(1);
        notice.signal = signal;
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!("SIGHUP".parse::<ReloadSignal>().unwrap(), ReloadSignal::Hup);
        assert_eq!("usr1".parse::<ReloadSignal>().unwrap(), ReloadSignal::Usr1);
        assert_eq!(
            "SIGUSR2".parse::<ReloadSignal>().unwrap(),
            ReloadSignal::Usr2
        );
        assert_eq!("none".parse::<ReloadSignal>().unwrap(), ReloadSignal::None);
        assert!("SIGKILL".parse::<ReloadSignal>().is_err());
        assert_eq!(ReloadSignal::None.to_nix(), None);
    }

    #[test]
    fn notify_bumps_generation() {
        let (tx, mut rx) = reload_channel();
        rx.borrow_and_update();
        notify(&tx, ReloadSignal::Usr1);
        assert!(rx.has_changed().unwrap());
        let n = *rx.borrow_and_update();
        assert_eq!(n.generation, 1);
        assert_eq!(n.signal, ReloadSignal::Usr1);
    }
}
