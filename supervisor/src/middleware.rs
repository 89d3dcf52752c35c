//! Remote middleware readiness: before the workload starts, the supervisor connects to every
//! remote middleware the effective policy requires.
//!
//! A policy's `network_middlewares` entry names an implementation. Names under
//! [`BUILT_IN_PREFIX`] are built in and run in-process; any other name is a remote
//! implementation, reached at the `HOST:PORT` this supervisor was given for it
//! (`--middleware NAME=HOST:PORT`). The check is a bounded TCP connect with backoff up to a
//! readiness deadline. Unreachable `fail_open` middleware lets the workload start degraded; an
//! unreachable `fail_closed` one holds it back until it answers, because starting would mean
//! refusing every request that middleware should see.

use std::collections::BTreeMap;
use std::time::Duration;

use openshell_core::policy::SandboxPolicy;
use openshell_proto::v1 as pb;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::applier::BoxFuture;
use crate::backoff::{Backoff, BackoffConfig};
use crate::desired::DesiredConfig;

/// Implementation names in this namespace are built in (upstream reserves it) and need no
/// connection.
pub const BUILT_IN_PREFIX: &str = "openshell/";

/// Why a remote implementation without an endpoint counts as unreachable.
pub const NOT_REGISTERED: &str = "not registered on this supervisor (--middleware NAME=HOST:PORT)";

/// Longest error text kept per middleware; what the gateway stores and shows is bounded.
const MAX_ERROR_BYTES: usize = 256;

/// One `--middleware NAME=HOST:PORT` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredMiddleware {
    /// The implementation name policies use in `middleware:`.
    pub name: String,
    /// `HOST:PORT` (an IPv6 host in brackets).
    pub endpoint: String,
}

/// Parses one `NAME=HOST:PORT` entry; the error says what is wrong and the expected form.
pub fn parse_entry(text: &str) -> Result<RegisteredMiddleware, String> {
    let expected = "expected NAME=HOST:PORT, e.g. audit=127.0.0.1:9000";
    let Some((name, endpoint)) = text.split_once('=') else {
        return Err(format!("{text:?} has no '='; {expected}"));
    };
    let name = name.trim();
    let endpoint = endpoint.trim();
    if name.is_empty() {
        return Err(format!("{text:?} has an empty NAME; {expected}"));
    }
    if name.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err(format!(
            "{text:?}: NAME must not contain whitespace or ','; {expected}"
        ));
    }
    let Some((host, port)) = endpoint.rsplit_once(':') else {
        return Err(format!("{text:?} has no port; {expected}"));
    };
    let bracketed = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
    if host.is_empty() || (host.contains(':') && !bracketed) || host.contains(char::is_whitespace) {
        return Err(format!(
            "{text:?}: HOST must be a name or an address (IPv6 in brackets); {expected}"
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => {
            return Err(format!(
                "{text:?}: PORT must be a number from 1 to 65535; {expected}"
            ));
        }
    }
    Ok(RegisteredMiddleware {
        name: name.to_string(),
        endpoint: endpoint.to_string(),
    })
}

/// A name registered twice.
#[derive(Debug, thiserror::Error)]
#[error("--middleware {name} is given twice ({first} and {second}); give each NAME once")]
pub struct DuplicateMiddleware {
    pub name: String,
    pub first: String,
    pub second: String,
}

/// The remote middleware implementations this supervisor can reach, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MiddlewareRegistry {
    endpoints: BTreeMap<String, String>,
}

impl MiddlewareRegistry {
    pub fn new(
        entries: impl IntoIterator<Item = RegisteredMiddleware>,
    ) -> Result<Self, DuplicateMiddleware> {
        let mut endpoints: BTreeMap<String, String> = BTreeMap::new();
        for entry in entries {
            if let Some(first) = endpoints.get(&entry.name) {
                return Err(DuplicateMiddleware {
                    name: entry.name,
                    first: first.clone(),
                    second: entry.endpoint,
                });
            }
            endpoints.insert(entry.name, entry.endpoint);
        }
        Ok(Self { endpoints })
    }

    pub fn endpoint(&self, implementation: &str) -> Option<&str> {
        self.endpoints.get(implementation).map(String::as_str)
    }

    /// Whether `implementation` runs elsewhere and needs a connection. A registered name is
    /// remote even under [`BUILT_IN_PREFIX`], so an operator can move a built-in out.
    pub fn is_remote(&self, implementation: &str) -> bool {
        self.endpoints.contains_key(implementation) || !implementation.starts_with(BUILT_IN_PREFIX)
    }
}

/// A remote middleware a policy requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredMiddleware {
    /// The entry's key in `network_middlewares`.
    pub name: String,
    pub implementation: String,
    /// `None` when the implementation is not registered here.
    pub endpoint: Option<String>,
    pub fail_closed: bool,
}

/// The remote middleware of `policy`, in policy order (by key).
pub fn required(policy: &SandboxPolicy, registry: &MiddlewareRegistry) -> Vec<RequiredMiddleware> {
    policy
        .network_middlewares
        .iter()
        .filter(|(_, mw)| registry.is_remote(&mw.middleware))
        .map(|(key, mw)| RequiredMiddleware {
            name: key.clone(),
            implementation: mw.middleware.clone(),
            endpoint: registry.endpoint(&mw.middleware).map(str::to_string),
            fail_closed: mw.fails_closed(),
        })
        .collect()
}

/// The remote middleware the policy of `config` requires. The policy was validated when it
/// was applied; one that no longer converts requires nothing here (the apply refused it).
pub fn required_by(
    config: &DesiredConfig,
    registry: &MiddlewareRegistry,
) -> Vec<RequiredMiddleware> {
    config
        .policy()
        .and_then(|wire| SandboxPolicy::try_from(wire).ok())
        .map(|policy| required(&policy, registry))
        .unwrap_or_default()
}

/// Whether the workload runs, from the supervisor's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadStart {
    /// Every required middleware answered.
    Started,
    /// Started although some `fail_open` middleware did not answer.
    StartedDegraded,
    /// Not started: some `fail_closed` middleware does not answer.
    Blocked,
}

/// The outcome of checking one required middleware.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiddlewareState {
    pub name: String,
    pub implementation: String,
    /// Empty when not registered.
    pub endpoint: String,
    pub reachable: bool,
    pub fail_closed: bool,
    /// Why it is unreachable (sanitized, bounded); `None` when reachable.
    pub error: Option<String>,
}

impl MiddlewareState {
    fn unchecked(required: &RequiredMiddleware) -> Self {
        Self {
            name: required.name.clone(),
            implementation: required.implementation.clone(),
            endpoint: required.endpoint.clone().unwrap_or_default(),
            reachable: false,
            fail_closed: required.fail_closed,
            error: Some(if required.endpoint.is_some() {
                "not checked yet".to_string()
            } else {
                NOT_REGISTERED.to_string()
            }),
        }
    }

    fn failure_mode(&self) -> &'static str {
        if self.fail_closed {
            "fail_closed"
        } else {
            "fail_open"
        }
    }

    /// `middleware audit (fail_closed) unreachable at 127.0.0.1:9: connection refused`.
    pub fn describe(&self) -> String {
        let at = if self.endpoint.is_empty() {
            String::new()
        } else {
            format!(" at {}", self.endpoint)
        };
        match (&self.error, self.reachable) {
            (_, true) => format!(
                "middleware {} ({}) reachable{at}",
                self.name,
                self.failure_mode()
            ),
            (error, false) => format!(
                "middleware {} ({}) unreachable{at}: {}",
                self.name,
                self.failure_mode(),
                error.as_deref().unwrap_or("no answer")
            ),
        }
    }
}

/// Whether the workload may start, and the state of every required middleware.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub workload: WorkloadStart,
    pub middlewares: Vec<MiddlewareState>,
}

impl Readiness {
    /// Decides from the middleware states: any unreachable `fail_closed` one blocks, any other
    /// unreachable one degrades.
    pub fn decide(middlewares: Vec<MiddlewareState>) -> Self {
        let workload = if middlewares.iter().any(|m| !m.reachable && m.fail_closed) {
            WorkloadStart::Blocked
        } else if middlewares.iter().any(|m| !m.reachable) {
            WorkloadStart::StartedDegraded
        } else {
            WorkloadStart::Started
        };
        Self {
            workload,
            middlewares,
        }
    }

    pub fn unreachable(&self) -> impl Iterator<Item = &MiddlewareState> {
        self.middlewares.iter().filter(|m| !m.reachable)
    }

    /// One line for logs and the status: why the workload waits, or how it started.
    pub fn summary(&self) -> String {
        let problems: Vec<String> = self.unreachable().map(MiddlewareState::describe).collect();
        match self.workload {
            WorkloadStart::Started => {
                "workload started: every required middleware is reachable".to_string()
            }
            WorkloadStart::StartedDegraded => {
                format!("workload started degraded: {}", problems.join("; "))
            }
            WorkloadStart::Blocked => {
                format!("workload not started: {}", problems.join("; "))
            }
        }
    }

    pub fn to_pb(&self) -> pb::RuntimeReadiness {
        pb::RuntimeReadiness {
            workload_started: self.workload != WorkloadStart::Blocked,
            middlewares: self
                .middlewares
                .iter()
                .map(|m| pb::MiddlewareReadiness {
                    name: m.name.clone(),
                    implementation: m.implementation.clone(),
                    endpoint: m.endpoint.clone(),
                    reachable: m.reachable,
                    fail_closed: m.fail_closed,
                    error: m.error.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// Connects to a middleware endpoint; injectable so tests decide who answers.
pub trait Probe: Send + Sync {
    /// `Ok` once a connection to `endpoint` opened within `timeout`; the error says why not.
    fn connect<'a>(
        &'a self,
        endpoint: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// A TCP connect, closed again at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpProbe;

impl Probe for TcpProbe {
    fn connect<'a>(
        &'a self,
        endpoint: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(endpoint)).await {
                Ok(Ok(_stream)) => Ok(()),
                Ok(Err(err)) => Err(connect_error(&err)),
                Err(_) => Err(format!("no connection within {timeout:?}")),
            }
        })
    }
}

/// The OS error without its code suffix: "connection refused", as operators read it.
fn connect_error(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        _ => {
            let text = err.to_string();
            match text.split_once(" (os error") {
                Some((head, _)) => head.to_lowercase(),
                None => text,
            }
        }
    }
}

/// Bounds of the readiness check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadinessConfig {
    /// Bound on one connection attempt.
    pub attempt_timeout: Duration,
    /// Delays between attempts before the deadline.
    pub backoff: BackoffConfig,
    /// How long the first check may take before the workload starts degraded or is held back.
    pub deadline: Duration,
    /// Delays between checks while a `fail_closed` middleware holds the workload back.
    pub blocked_backoff: BackoffConfig,
}

impl Default for ReadinessConfig {
    /// 2 s per attempt, 200 ms doubling to 2 s between attempts, 10 s in all; then every 5 s
    /// at most while blocked.
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_secs(2),
            backoff: BackoffConfig {
                initial: Duration::from_millis(200),
                factor: 2.0,
                max: Duration::from_secs(2),
                jitter: 0.1,
            },
            deadline: Duration::from_secs(10),
            blocked_backoff: BackoffConfig {
                initial: Duration::from_secs(1),
                factor: 2.0,
                max: Duration::from_secs(5),
                jitter: 0.1,
            },
        }
    }
}

/// Tries every unreachable registered middleware of `states` once, concurrently, each attempt
/// bounded by `timeout`.
async fn probe_round(states: &mut [MiddlewareState], probe: &dyn Probe, timeout: Duration) {
    let attempts = states
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.reachable && !s.endpoint.is_empty())
        .map(|(i, s)| {
            let endpoint = s.endpoint.clone();
            async move { (i, probe.connect(&endpoint, timeout).await) }
        });
    for (i, result) in futures::future::join_all(attempts).await {
        let Some(state) = states.get_mut(i) else {
            continue;
        };
        match result {
            Ok(()) => {
                state.reachable = true;
                state.error = None;
            }
            Err(err) => {
                state.reachable = false;
                state.error = Some(crate::sanitize::truncate_bytes(
                    &crate::sanitize::sanitize_reason(&err, std::iter::empty()),
                    MAX_ERROR_BYTES,
                ));
            }
        }
    }
}

/// Checks `required` until every one answers or `config.deadline` passes.
pub async fn check(
    required: &[RequiredMiddleware],
    probe: &dyn Probe,
    config: &ReadinessConfig,
) -> Readiness {
    let mut states: Vec<MiddlewareState> =
        required.iter().map(MiddlewareState::unchecked).collect();
    let deadline = Instant::now() + config.deadline;
    let mut backoff = Backoff::new(config.backoff);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        probe_round(
            &mut states,
            probe,
            config
                .attempt_timeout
                .min(remaining)
                .max(Duration::from_millis(1)),
        )
        .await;
        let pending = states
            .iter()
            .any(|s| !s.reachable && !s.endpoint.is_empty());
        let remaining = deadline.saturating_duration_since(Instant::now());
        if !pending || remaining.is_zero() {
            break;
        }
        tokio::time::sleep(backoff.next_delay().min(remaining)).await;
    }
    Readiness::decide(states)
}

/// Checks until the workload may start: first [`check`] within the deadline, then, while an
/// unreachable `fail_closed` middleware blocks it, again after each `blocked_backoff` delay.
/// `required` is asked again before every check, so a policy change that drops the
/// middleware also unblocks. `publish` sees every outcome that differs from the one before.
pub async fn await_startable(
    mut required: impl FnMut() -> Vec<RequiredMiddleware>,
    probe: &dyn Probe,
    config: &ReadinessConfig,
    mut publish: impl FnMut(&Readiness),
) -> Readiness {
    let mut readiness = check(&required(), probe, config).await;
    publish(&readiness);
    let mut backoff = Backoff::new(config.blocked_backoff);
    while readiness.workload == WorkloadStart::Blocked {
        tokio::time::sleep(backoff.next_delay()).await;
        // One round per retry: the deadline was for the first start; a blocked workload
        // waits for as long as it takes.
        let mut states: Vec<MiddlewareState> =
            required().iter().map(MiddlewareState::unchecked).collect();
        probe_round(&mut states, probe, config.attempt_timeout).await;
        let next = Readiness::decide(states);
        if next != readiness {
            publish(&next);
        }
        readiness = next;
    }
    readiness
}

/// Logs an outcome: a degraded or blocked start is a warning.
pub fn log_readiness(readiness: &Readiness) {
    let summary = readiness.summary();
    match readiness.workload {
        WorkloadStart::Started => {
            if !readiness.middlewares.is_empty() {
                info!(middlewares = readiness.middlewares.len(), "{summary}");
            }
        }
        WorkloadStart::StartedDegraded => warn!("{summary}"),
        WorkloadStart::Blocked => warn!(
            "{summary}; checking again until it answers (on_error: fail_closed holds the workload back)"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
