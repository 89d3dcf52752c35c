//! Poll mode: fetch the snapshots with the unary RPCs, apply what changed, report the outcome.
//!
//! The loop runs on its own, independent of the session, so once the workload has started it
//! keeps working while the session is down; it pauses while a session has push apply
//! negotiated, and before the start it runs only under a session negotiated as poll (see
//! [`mode_after_session`]). When it takes over from a lost push session, its first poll waits a
//! random part of the interval (see [`Mode`]).
//!
//! A poll of unchanged content is skipped, so a configuration whose apply failed for a reason
//! that can pass is retried by [`PollRetries`] instead, which reports the success.

use std::time::Duration;

use openshell_proto::sandbox::v1::GetSandboxConfigRequest;
use openshell_proto::v1::{
    GetSandboxProviderEnvironmentRequest, GetSandboxProviderEnvironmentResponse, PolicyLoadStatus,
};
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::backoff::spread;
use crate::client::GatewayClient;
use crate::desired::{DesiredConfig, config_revisions, env_revision};
use crate::engine::{Engine, Mode, Origin, Outcome, Verdict, mode_for};
use crate::outbox::{Outbox, StatusReport};

pub(crate) struct PollLoop {
    /// Attaches the credential to every call.
    pub client: GatewayClient,
    pub sandbox_id: String,
    pub engine: Arc<Engine>,
    pub outbox: Outbox,
    pub rpc_timeout: Duration,
    /// The provider environment fetched last, reused while its revision is the expected one.
    pub cached_env: Option<GetSandboxProviderEnvironmentResponse>,
    /// Consecutive failed polls, so an unreachable gateway logs once, not every interval.
    pub failures: u32,
}

impl PollLoop {
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut schedule = Schedule::new(self.engine.mode());
        while schedule.next(&mut shutdown).await {
            // Fetching may be abandoned at shutdown; an apply, once started, is not.
            let fetched = tokio::select! {
                fetched = self.fetch() => fetched,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            self.apply(fetched).await;
        }
    }

    async fn apply(&mut self, fetched: Result<Option<DesiredConfig>, String>) {
        let desired = match fetched {
            Ok(Some(desired)) => desired,
            Ok(None) => return,
            Err(err) => {
                self.failures += 1;
                if self.failures == 1 {
                    warn!(error = %err, "polling the gateway failed; will keep trying");
                } else {
                    debug!(error = %err, failures = self.failures, "poll failed");
                }
                return;
            }
        };
        self.failures = 0;
        let outcome = self.engine.offer(desired, Origin::Poll).await;
        if let Some(report) = status_report(outcome) {
            self.outbox.submit(report);
        }
    }

    /// Both snapshots as a matching pair, or `None` when the pair does not match yet (the
    /// provider environment moved on between the two calls; the next poll sorts it out).
    async fn fetch(&mut self) -> Result<Option<DesiredConfig>, String> {
        let mut client = self.client.clone();
        let request = GetSandboxConfigRequest {
            sandbox_id: self.sandbox_id.clone(),
        };
        let config = rpc(self.rpc_timeout, client.get_sandbox_config(request)).await?;
        if self.cached_env.is_none() {
            self.cached_env = self.engine.last_gateway_env().await;
        }
        let expected = config_revisions(&config).provider_env_revision;
        let cached_matches = self
            .cached_env
            .as_ref()
            .is_some_and(|env| env_revision(env) == expected);
        if !cached_matches {
            let request = GetSandboxProviderEnvironmentRequest {
                sandbox_id: self.sandbox_id.clone(),
            };
            let env = rpc(
                self.rpc_timeout,
                client.get_sandbox_provider_environment(request),
            )
            .await?;
            self.cached_env = Some(env);
        }
        let env = self.cached_env.clone().unwrap_or_default();
        let desired = DesiredConfig::new(config, env);
        if !desired.pair_matches() {
            debug!(
                %expected,
                got = %env_revision(&desired.provider_env),
                "provider environment does not match the sandbox config yet; retrying next poll"
            );
            return Ok(None);
        }
        Ok(Some(desired))
    }
}

/// Retries a configuration that failed to apply for a reason that can pass while polling
/// applies, and reports the success.
pub(crate) struct PollRetries {
    pub engine: Arc<Engine>,
    pub outbox: Outbox,
}

impl PollRetries {
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = self.engine.retry_ready(Origin::Poll) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            if let Some(report) = self
                .engine
                .retry(Origin::Poll)
                .await
                .and_then(status_report)
            {
                self.outbox.submit(report);
            }
        }
    }
}

/// The report for an outcome; `None` when there is nothing new to say.
fn status_report(outcome: Outcome) -> Option<StatusReport> {
    let (status, reason, failed_closed) = match outcome.verdict {
        // Not reported: the gateway keeps it pending for the next supervisor.
        Verdict::Unchanged | Verdict::ShuttingDown => return None,
        Verdict::Applied => (PolicyLoadStatus::Loaded, String::new(), false),
        Verdict::RetainedLocalOverride => (
            PolicyLoadStatus::RetainedLocalOverride,
            crate::LOCAL_OVERRIDE_REASON.to_string(),
            false,
        ),
        Verdict::RetainedRejectedPolicy { reason } => {
            (PolicyLoadStatus::RetainedLastKnownGoodPolicy, reason, false)
        }
        Verdict::Failed {
            reason,
            failed_closed,
        } => (PolicyLoadStatus::Failed, reason, failed_closed),
    };
    Some(StatusReport {
        status,
        revisions: outcome.revisions,
        reason,
        failed_closed,
    })
}

async fn rpc<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

/// When the next poll is due.
pub(crate) struct Schedule {
    mode: watch::Receiver<Mode>,
    /// A poll was made under the mode last seen, so the next one waits a full interval.
    polled: bool,
}

impl Schedule {
    pub fn new(mode: watch::Receiver<Mode>) -> Self {
        Self {
            mode,
            polled: false,
        }
    }

    /// Waits until a poll is due: `first_poll_delay` after polling (re)starts, then every
    /// interval. A mode change starts over, so a session that comes back during the wait
    /// cancels the poll. `false` at shutdown.
    pub async fn next(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        loop {
            // The mode may have changed while the last poll was in flight.
            if self.mode.has_changed().unwrap_or(false) {
                self.polled = false;
            }
            let current = tokio::select! {
                m = self.mode.wait_for(|m| m.polling) => match m {
                    Ok(m) => *m,
                    Err(_) => return false,
                },
                _ = shutdown.wait_for(|stop| *stop) => return false,
            };
            let wait = if self.polled {
                current.poll_interval
            } else {
                current.first_poll_delay
            };
            if wait.is_zero() {
                self.polled = true;
                return true;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {
                    self.polled = true;
                    return true;
                }
                changed = self.mode.changed() => {
                    if changed.is_err() {
                        return false;
                    }
                    self.polled = false;
                }
                _ = shutdown.wait_for(|stop| *stop) => return false,
            }
        }
    }
}

/// Poll interval for a session's `poll_interval_ms`, falling back to the configured one.
pub(crate) fn effective_poll_interval(accepted_ms: u32, configured: Duration) -> Duration {
    if accepted_ms == 0 {
        configured
    } else {
        Duration::from_millis(u64::from(accepted_ms))
    }
}

/// The mode once a session ended, `current` being the mode it left behind, `accepted` whether
/// that session was accepted and `started` whether a configuration is in effect (the workload
/// starts with the first one).
///
/// Before the start, a sandbox starts only from an accepted bootstrap or, under a session
/// negotiated as poll, from its first successful poll: a refused startup (a failed, mismatched
/// or timed-out bootstrap, a rejected startup exchange) or a lost session must not let a poll
/// start it instead, so polling stops until a session negotiates it again. After the start,
/// nothing is pushed without a session, so polling takes over. Only a lost push session
/// (`accepted`, not yet polling) spreads the first poll over the interval; one that was never
/// accepted polls at once, and one already polling keeps its schedule.
pub(crate) fn mode_after_session(current: Mode, accepted: bool, started: bool) -> Mode {
    if !started {
        return mode_for(false, current.poll_interval);
    }
    if current.polling {
        return current;
    }
    let mut mode = mode_for(true, current.poll_interval);
    if accepted {
        mode.first_poll_delay = spread(current.poll_interval);
    }
    mode
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;
    use tokio::task::JoinHandle;
    use tokio::time::Instant;

    const INTERVAL: Duration = Duration::from_secs(10);

    /// A schedule driven like the poll loop drives it, recording when each poll would start.
    struct Polls {
        mode: watch::Sender<Mode>,
        stop: watch::Sender<bool>,
        turns: mpsc::UnboundedReceiver<Instant>,
        task: JoinHandle<()>,
    }

    impl Polls {
        /// Starts with a push session applying: no polling.
        fn start() -> Self {
            let (mode, modes) = watch::channel(mode_for(false, INTERVAL));
            let (stop, mut stopped) = watch::channel(false);
            let (tx, turns) = mpsc::unbounded_channel();
            let task = tokio::spawn(async move {
                let mut schedule = Schedule::new(modes);
                while schedule.next(&mut stopped).await {
                    let _ = tx.send(Instant::now());
                }
            });
            Self {
                mode,
                stop,
                turns,
                task,
            }
        }

        /// Sets `mode` the way the session runner does when the session of a started
        /// supervisor ends.
        fn session_ended(&self, accepted: bool) -> Mode {
            let mode = mode_after_session(*self.mode.borrow(), accepted, true);
            self.mode.send_replace(mode);
            mode
        }

        async fn next_turn(&mut self) -> Instant {
            self.turns.recv().await.expect("the schedule stopped")
        }

        /// No poll starts while `span` passes.
        async fn assert_no_turn_for(&mut self, span: Duration) {
            tokio::time::sleep(span).await;
            assert!(self.turns.try_recv().is_err(), "unexpected poll");
        }
    }

    /// The timer wheel ticks in milliseconds, so a random delay fires up to 1 ms late.
    fn assert_within_a_tick(actual: Duration, expected: Duration) {
        assert!(
            actual >= expected && actual <= expected + Duration::from_millis(1),
            "{actual:?} vs {expected:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_start_a_session_never_accepted_polls_at_once() {
        let mut polls = Polls::start();
        let start = Instant::now();
        let mode = polls.session_ended(false);
        assert!(mode.polling);
        assert_eq!(mode.first_poll_delay, Duration::ZERO);
        assert_eq!(polls.next_turn().await, start);
        assert_eq!(polls.next_turn().await, start + INTERVAL);
        assert_eq!(polls.next_turn().await, start + INTERVAL * 2);
    }

    #[tokio::test(start_paused = true)]
    async fn before_the_start_no_session_end_lets_a_poll_start_the_sandbox() {
        let mut polls = Polls::start();
        // A push startup refused before or after acceptance: no poll, not even much later.
        for accepted in [false, true] {
            let mode = mode_after_session(*polls.mode.borrow(), accepted, false);
            assert!(!mode.polling, "accepted: {accepted}");
            polls.mode.send_replace(mode);
            polls.assert_no_turn_for(Duration::from_secs(3600)).await;
        }
        // A session negotiated as poll polls at once; once it is lost before any poll
        // succeeded, polling stops until a session negotiates it again.
        let start = Instant::now();
        polls.mode.send_replace(mode_for(true, INTERVAL));
        assert_eq!(polls.next_turn().await, start);
        let mode = mode_after_session(*polls.mode.borrow(), true, false);
        assert!(!mode.polling);
        polls.mode.send_replace(mode);
        polls.assert_no_turn_for(Duration::from_secs(3600)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn plain_poll_mode_polls_at_once() {
        let mut polls = Polls::start();
        let start = Instant::now();
        polls.mode.send_replace(mode_for(true, INTERVAL));
        assert_eq!(polls.next_turn().await, start);
        assert_eq!(polls.next_turn().await, start + INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_push_session_spreads_the_first_poll_over_the_interval() {
        let mut polls = Polls::start();
        let start = Instant::now();
        let mode = polls.session_ended(true);
        assert!(mode.polling);
        assert!(mode.first_poll_delay < INTERVAL, "{mode:?}");
        let first = polls.next_turn().await;
        assert_within_a_tick(first - start, mode.first_poll_delay);
        assert!(first - start <= INTERVAL);
        // After that, the normal interval.
        assert_within_a_tick(polls.next_turn().await - first, INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_fallback_poll_waits_its_delay_and_a_session_back_cancels_it() {
        let mut polls = Polls::start();
        let fallback = Mode {
            first_poll_delay: Duration::from_secs(3),
            ..mode_for(true, INTERVAL)
        };
        polls.mode.send_replace(fallback);
        polls.assert_no_turn_for(Duration::from_secs(2)).await;
        // The push session is back before the delay ends: no poll, not even much later.
        polls.mode.send_replace(mode_for(false, INTERVAL));
        polls.assert_no_turn_for(Duration::from_secs(3600)).await;
        // Lost again: a fresh delay, then the interval.
        let start = Instant::now();
        polls.mode.send_replace(fallback);
        let first = polls.next_turn().await;
        assert_eq!(first, start + Duration::from_secs(3));
        assert_eq!(polls.next_turn().await, first + INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_is_honoured_during_the_delay() {
        let mut polls = Polls::start();
        polls.mode.send_replace(Mode {
            first_poll_delay: Duration::from_secs(3),
            ..mode_for(true, INTERVAL)
        });
        polls.assert_no_turn_for(Duration::from_secs(1)).await;
        let stopped_at = Instant::now();
        polls.stop.send_replace(true);
        polls.task.await.unwrap();
        assert_eq!(
            Instant::now(),
            stopped_at,
            "stopped without waiting out the delay"
        );
        assert!(polls.turns.try_recv().is_err(), "no poll after shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn a_mode_change_during_a_poll_starts_the_schedule_over() {
        let (mode, modes) = watch::channel(mode_for(true, INTERVAL));
        let (_stop, mut stopped) = watch::channel(false);
        let mut schedule = Schedule::new(modes);
        assert!(schedule.next(&mut stopped).await);
        // While that poll is in flight, a push session comes and goes.
        mode.send_replace(mode_for(false, INTERVAL));
        let fallback = Mode {
            first_poll_delay: Duration::from_secs(3),
            ..mode_for(true, INTERVAL)
        };
        mode.send_replace(fallback);
        let start = Instant::now();
        assert!(schedule.next(&mut stopped).await);
        assert_eq!(Instant::now() - start, Duration::from_secs(3));
    }

    #[test]
    fn a_session_ending_leaves_a_running_poll_schedule_alone() {
        // A failed reconnect after a fallback must not wake the poll loop early.
        let fallback = Mode {
            first_poll_delay: Duration::from_secs(3),
            ..mode_for(true, INTERVAL)
        };
        assert_eq!(mode_after_session(fallback, false, true), fallback);
        let plain = mode_for(true, INTERVAL);
        assert_eq!(mode_after_session(plain, true, true), plain);
    }
}
