//! The seeded random workload and the history it records.
//!
//! One writer issues writes one at a time (so "the last committed write to a target" is
//! well defined): sandbox policies (some with a port the supervisors refuse), sandbox,
//! workspace and global settings, provider value changes, attachments and detachments, stops
//! and starts of the fleet's sandboxes, and sandboxes created and deleted again (churn, with
//! no supervisor). When the run ends, the writer heals what it did: every fleet sandbox is
//! started and every churn sandbox deleted, so that the checker can expect each supervisor
//! to converge and no churn sandbox to be left. Each
//! write carries its own idempotency key where the API takes one and is retried with it while
//! the answer is a transport failure or UNAVAILABLE, as a careful client does, until it gets a
//! definite answer or the run ends. An observer polls every operation the writer got back and
//! records each state it sees, for the checker's state-machine check.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openshell_proto::v1 as pb;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::Code;

use super::prng::Prng;
use crate::{Api, policy_with_port, raw_setting, sandbox_ref, to_global, to_sandbox, to_workspace};

/// The provider every run creates and the workload updates, attaches and detaches.
pub const PROVIDER: &str = "chaos";
/// The provider's one (non-secret) value.
pub const PROVIDER_VALUE: &str = "CHAOS_VALUE";

/// Ports in this range make a policy the supervisors' on-apply hook
/// ([`super::REFUSING_HOOK`]) refuses: a configuration the gateway accepts and the
/// supervisor's validation does not, so last-known-good is exercised on every run.
pub const REFUSED_PORTS: std::ops::Range<u32> = 6600..6700;

/// The setting each scope's writes change: a string at sandbox and workspace scope, an int
/// at global scope, each write a value of its own so the final value names the write.
pub const SANDBOX_SETTING: &str = "environment_label";
pub const WORKSPACE_SETTING: &str = "environment_label";
pub const GLOBAL_SETTING: &str = "log_rate_limit_per_second";

/// What a write asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteKind {
    /// A sandbox policy with its first port set to `port`; `refused` when the supervisors'
    /// hook refuses it.
    Policy {
        sandbox: String,
        port: u32,
        refused: bool,
    },
    SandboxSetting {
        sandbox: String,
        value: String,
    },
    WorkspaceSetting {
        value: String,
    },
    GlobalSetting {
        value: i64,
    },
    ProviderValue {
        value: String,
    },
    Attachment {
        sandbox: String,
        attach: bool,
    },
    /// Stops a fleet sandbox (its session is closed and refused until it starts again, its
    /// pending operations end INACTIVE), or starts it again.
    Lifecycle {
        sandbox: String,
        stop: bool,
    },
    /// Creates a churn sandbox (with the example policy; no supervisor ever runs for it).
    CreateSandbox {
        sandbox: String,
    },
    DeleteSandbox {
        sandbox: String,
    },
}

/// Names of the sandboxes the workload creates and deletes again.
pub const CHURN_PREFIX: &str = "churn-";

/// How a write ended, from the client's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The gateway said it committed (possibly on a retry that replayed the first attempt).
    Committed {
        operation: Option<Box<pb::Operation>>,
        /// The sandbox policy revision and hash after a policy write.
        policy_revision: u64,
        policy_hash: String,
    },
    /// The gateway gave a definite refusal: nothing of it may be visible.
    Refused { code: Code, message: String },
    /// No definite answer before the run ended: it may or may not have committed.
    Unknown { last_error: String },
}

#[derive(Debug, Clone)]
pub struct WriteRecord {
    pub seq: u64,
    /// The idempotency key sent (empty where the API takes none).
    pub key: String,
    pub kind: WriteKind,
    pub outcome: Outcome,
    /// Attempts made, 1 when the first answer was definite.
    pub attempts: u32,
    /// When the first attempt was sent and when the last answer came: two writes to one
    /// target whose spans overlap may have committed in either order.
    pub sent_at: Instant,
    pub answered_at: Instant,
}

/// Everything the workload saw.
#[derive(Debug, Default)]
pub struct History {
    pub writes: Vec<WriteRecord>,
    /// Operation id → every state the observer saw, in order, without repeats.
    pub operation_states: HashMap<String, Vec<pb::OperationState>>,
    /// Faults the scenario injected, with when.
    pub faults: Vec<(Instant, String)>,
    /// When the last fault healed.
    pub healed_at: Option<Instant>,
    /// What a scenario found wrong on the spot (a state directory seen right after a crash).
    pub violations: Vec<String>,
}

pub type SharedHistory = Arc<Mutex<History>>;

impl History {
    pub fn fault(history: &SharedHistory, what: impl Into<String>) {
        history
            .lock()
            .unwrap()
            .faults
            .push((Instant::now(), what.into()));
    }

    pub fn healed(history: &SharedHistory) {
        history.lock().unwrap().healed_at = Some(Instant::now());
    }

    fn observe(&mut self, id: &str, state: pb::OperationState) {
        let seen = self.operation_states.entry(id.to_string()).or_default();
        if seen.last() != Some(&state) {
            seen.push(state);
        }
    }
}

/// What the workload writes to.
#[derive(Debug, Clone)]
pub struct Targets {
    pub sandboxes: Vec<String>,
    pub seed: u64,
    /// Whether fleet sandboxes are stopped and started: scenarios that wait for every
    /// supervisor's session in the middle of the run leave it off.
    pub lifecycle: bool,
}

/// The running writer and observer.
pub struct Workload {
    stop: watch::Sender<bool>,
    writer: JoinHandle<()>,
    observer: JoinHandle<()>,
    pub history: SharedHistory,
}

impl Workload {
    /// Starts writing through `api` (a lazily reconnecting client).
    pub fn start(api: Api, targets: Targets, rng: Prng, history: SharedHistory) -> Self {
        let (stop, stopped) = watch::channel(false);
        let writer = tokio::spawn(write_loop(
            api.clone(),
            targets,
            rng,
            history.clone(),
            stopped.clone(),
        ));
        let observer = tokio::spawn(observe_loop(api, history.clone(), stopped));
        Self {
            stop,
            writer,
            observer,
            history,
        }
    }

    /// Stops writing; a write in progress finishes (or gives up) first.
    pub async fn stop(self) -> SharedHistory {
        self.stop.send(true).ok();
        self.writer.await.unwrap();
        self.observer.await.unwrap();
        self.history
    }
}

async fn write_loop(
    mut api: Api,
    targets: Targets,
    mut rng: Prng,
    history: SharedHistory,
    stopped: watch::Receiver<bool>,
) {
    let mut seq = 0u64;
    let mut lives = Lives::default();
    loop {
        if *stopped.borrow() {
            break;
        }
        seq += 1;
        let kind = choose(&mut rng, &targets, &lives, seq);
        lives.note(&kind);
        let key =
            key_of(&kind).map_or_else(String::new, |()| format!("chaos-{}-{seq}", targets.seed));
        let sent_at = Instant::now();
        let (outcome, attempts) = write(&mut api, &kind, &key, &stopped).await;
        let record = WriteRecord {
            seq,
            key,
            kind,
            outcome,
            attempts,
            sent_at,
            answered_at: Instant::now(),
        };
        {
            let mut h = history.lock().unwrap();
            // The write's answer is the first state seen of its operation.
            if let Outcome::Committed {
                operation: Some(op),
                ..
            } = &record.outcome
            {
                h.observe(&op.id, crate::state(op));
            }
            h.writes.push(record);
        }
        tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
    }
    heal(&mut api, &targets, lives, &history).await;
}

/// What the writer stopped or created, so that its next choices make sense and the end of
/// the run can undo them. A sandbox whose stop or create had no definite answer counts as
/// stopped or created: undoing is harmless where it did not happen.
#[derive(Debug, Default)]
struct Lives {
    stopped: BTreeSet<String>,
    churn: BTreeSet<String>,
}

impl Lives {
    fn note(&mut self, kind: &WriteKind) {
        match kind {
            WriteKind::Lifecycle {
                sandbox,
                stop: true,
            } => {
                self.stopped.insert(sandbox.clone());
            }
            WriteKind::Lifecycle {
                sandbox,
                stop: false,
            } => {
                self.stopped.remove(sandbox);
            }
            WriteKind::CreateSandbox { sandbox } => {
                self.churn.insert(sandbox.clone());
            }
            WriteKind::DeleteSandbox { sandbox } => {
                self.churn.remove(sandbox);
            }
            _ => {}
        }
    }
}

/// Starts every fleet sandbox the run stopped and deletes every churn sandbox it created,
/// each write retried until it gets a definite answer.
async fn heal(api: &mut Api, targets: &Targets, lives: Lives, history: &SharedHistory) {
    let undo = lives
        .stopped
        .into_iter()
        .map(|sandbox| WriteKind::Lifecycle {
            sandbox,
            stop: false,
        })
        .chain(
            lives
                .churn
                .into_iter()
                .map(|sandbox| WriteKind::DeleteSandbox { sandbox }),
        );
    for (n, kind) in undo.enumerate() {
        let key = format!("chaos-{}-heal-{n}", targets.seed);
        write_recorded(api, kind, key, history).await;
    }
}

/// Makes one write of the scenario's own choosing (say, a fanout right before a fault) the
/// way the writer makes its writes, and records it.
pub async fn write_recorded(
    api: &mut Api,
    kind: WriteKind,
    key: String,
    history: &SharedHistory,
) -> Outcome {
    let (_never, stopped) = watch::channel(false);
    let sent_at = Instant::now();
    let (outcome, attempts) = write(api, &kind, &key, &stopped).await;
    let mut h = history.lock().unwrap();
    if let Outcome::Committed {
        operation: Some(op),
        ..
    } = &outcome
    {
        h.observe(&op.id, crate::state(op));
    }
    let seq = u64::try_from(h.writes.len()).unwrap_or(0) + 1_000_000;
    h.writes.push(WriteRecord {
        seq,
        key,
        kind,
        outcome: outcome.clone(),
        attempts,
        sent_at,
        answered_at: Instant::now(),
    });
    outcome
}

fn choose(rng: &mut Prng, targets: &Targets, lives: &Lives, seq: u64) -> WriteKind {
    let sandbox = targets.sandboxes[rng.index(targets.sandboxes.len())].clone();
    match rng.below(100) {
        0..33 => {
            let refused = rng.chance(10);
            let port = if refused {
                REFUSED_PORTS.start + u32::try_from(rng.below(100)).unwrap_or(0)
            } else {
                10_000 + u32::try_from(rng.below(50_000)).unwrap_or(0)
            };
            WriteKind::Policy {
                sandbox,
                port,
                refused,
            }
        }
        33..57 => WriteKind::SandboxSetting {
            sandbox,
            value: format!("sb-{seq}"),
        },
        57..66 => WriteKind::WorkspaceSetting {
            value: format!("ws-{seq}"),
        },
        66..75 => WriteKind::GlobalSetting {
            value: 1000 + i64::try_from(seq).unwrap_or(0),
        },
        75..82 => WriteKind::ProviderValue {
            value: format!("pv-{seq}"),
        },
        82..90 => WriteKind::Attachment {
            sandbox,
            attach: rng.chance(60),
        },
        // A stopped sandbox is started again soon: most of the run, the fleet is running.
        90..95 if targets.lifecycle => WriteKind::Lifecycle {
            stop: !lives.stopped.contains(&sandbox),
            sandbox,
        },
        90..95 => WriteKind::SandboxSetting {
            sandbox,
            value: format!("sb-{seq}"),
        },
        _ => match lives.churn.first() {
            Some(sandbox) if rng.chance(50) => WriteKind::DeleteSandbox {
                sandbox: sandbox.clone(),
            },
            _ => WriteKind::CreateSandbox {
                sandbox: format!("{CHURN_PREFIX}{}-{seq}", targets.seed),
            },
        },
    }
}

/// Codes after which the write may or may not have happened, or that say "try again": the
/// write is retried with its key.
fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::Unknown
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Internal
    )
}

/// Makes one write, retrying with its key until a definite answer, or until the run stops
/// and a last grace period passed.
async fn write(
    api: &mut Api,
    kind: &WriteKind,
    key: &str,
    stopped: &watch::Receiver<bool>,
) -> (Outcome, u32) {
    let mut attempts = 0;
    let mut stopped_at: Option<Instant> = None;
    loop {
        attempts += 1;
        let answer = send(api, kind, key).await;
        match answer {
            Ok(outcome) => return (outcome, attempts),
            Err(status) if retryable(status.code()) => {
                let stopping = *stopped.borrow();
                if stopping {
                    let since = *stopped_at.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(30) {
                        return (
                            Outcome::Unknown {
                                last_error: format!("{:?}: {}", status.code(), status.message()),
                            },
                            attempts,
                        );
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // A write without a key that was retried may have committed on an earlier
            // attempt: a refusal now ("already attached") says nothing about that one.
            Err(status) if attempts > 1 && key_of(kind).is_none() => {
                return (
                    Outcome::Unknown {
                        last_error: format!(
                            "refused on a retry ({:?}: {})",
                            status.code(),
                            status.message()
                        ),
                    },
                    attempts,
                );
            }
            Err(status) => {
                return (
                    Outcome::Refused {
                        code: status.code(),
                        message: status.message().to_string(),
                    },
                    attempts,
                );
            }
        }
    }
}

/// Whether the write's API takes an idempotency key (`Some(())`), which makes a retry a replay.
fn key_of(kind: &WriteKind) -> Option<()> {
    match kind {
        WriteKind::ProviderValue { .. }
        | WriteKind::Attachment { .. }
        | WriteKind::Lifecycle { .. }
        | WriteKind::CreateSandbox { .. }
        | WriteKind::DeleteSandbox { .. } => None,
        _ => Some(()),
    }
}

async fn send(api: &mut Api, kind: &WriteKind, key: &str) -> Result<Outcome, tonic::Status> {
    let committed = |operation: Option<pb::Operation>| Outcome::Committed {
        operation: operation.map(Box::new),
        policy_revision: 0,
        policy_hash: String::new(),
    };
    match kind {
        WriteKind::Policy { sandbox, port, .. } => {
            let response = api
                .update_config(pb::UpdateConfigRequest {
                    policy_text: policy_with_port(*port),
                    request_id: key.into(),
                    ..to_sandbox(sandbox)
                })
                .await?
                .into_inner();
            Ok(Outcome::Committed {
                operation: response.operation.map(Box::new),
                policy_revision: u64::from(response.version),
                policy_hash: response.policy_hash,
            })
        }
        WriteKind::SandboxSetting { sandbox, value } => {
            let response = api
                .update_config(pb::UpdateConfigRequest {
                    settings: vec![raw_setting(SANDBOX_SETTING, value)],
                    request_id: key.into(),
                    ..to_sandbox(sandbox)
                })
                .await?
                .into_inner();
            Ok(committed(response.operation))
        }
        WriteKind::WorkspaceSetting { value } => {
            let response = api
                .update_config(pb::UpdateConfigRequest {
                    settings: vec![raw_setting(WORKSPACE_SETTING, value)],
                    request_id: key.into(),
                    ..to_workspace("default")
                })
                .await?
                .into_inner();
            Ok(committed(response.operation))
        }
        WriteKind::GlobalSetting { value } => {
            let response = api
                .update_config(pb::UpdateConfigRequest {
                    settings: vec![raw_setting(GLOBAL_SETTING, &value.to_string())],
                    request_id: key.into(),
                    ..to_global()
                })
                .await?
                .into_inner();
            Ok(committed(response.operation))
        }
        WriteKind::ProviderValue { value } => {
            let response = api
                .update_provider(pb::UpdateProviderRequest {
                    provider: PROVIDER.into(),
                    values: vec![provider_value(value)],
                    ..Default::default()
                })
                .await?
                .into_inner();
            Ok(committed(response.operation))
        }
        WriteKind::Attachment { sandbox, attach } => {
            let response = if *attach {
                api.attach_provider(pb::AttachProviderRequest {
                    sandbox: sandbox_ref(sandbox),
                    provider: PROVIDER.into(),
                })
                .await?
            } else {
                api.detach_provider(pb::DetachProviderRequest {
                    sandbox: sandbox_ref(sandbox),
                    provider: PROVIDER.into(),
                })
                .await?
            };
            Ok(committed(response.into_inner().operation))
        }
        WriteKind::Lifecycle { sandbox, stop } => {
            let lifecycle = if *stop {
                pb::SandboxLifecycle::Stopped
            } else {
                pb::SandboxLifecycle::Pending
            };
            api.set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
                sandbox: sandbox_ref(sandbox),
                lifecycle: lifecycle as i32,
            })
            .await?;
            Ok(committed(None))
        }
        WriteKind::CreateSandbox { sandbox } => {
            api.create_sandbox(pb::CreateSandboxRequest {
                name: sandbox.clone(),
                policy: crate::POLICY.into(),
                ..Default::default()
            })
            .await?;
            Ok(committed(None))
        }
        WriteKind::DeleteSandbox { sandbox } => {
            api.delete_sandbox(pb::DeleteSandboxRequest {
                sandbox: sandbox_ref(sandbox),
            })
            .await?;
            Ok(committed(None))
        }
    }
}

/// The provider's one value, non-secret so the checker can read it back.
pub fn provider_value(value: &str) -> pb::ProviderValueInput {
    pb::ProviderValueInput {
        name: PROVIDER_VALUE.into(),
        value: value.into(),
        class: pb::ValueClass::NonSecret as i32,
        expires_at: None,
    }
}

/// Creates the run's provider with a first value.
pub async fn create_provider(api: &mut Api) {
    api.create_provider(pb::CreateProviderRequest {
        name: PROVIDER.into(),
        r#type: "generic".into(),
        values: vec![provider_value("pv-0")],
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn observe_loop(mut api: Api, history: SharedHistory, stopped: watch::Receiver<bool>) {
    loop {
        if *stopped.borrow() {
            break;
        }
        observe_once(&mut api, &history).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Reads every operation not yet seen terminal once, recording its state.
pub async fn observe_once(api: &mut Api, history: &SharedHistory) {
    let open: Vec<String> = {
        let h = history.lock().unwrap();
        let mut ids: Vec<String> = h
            .writes
            .iter()
            .filter_map(|w| match &w.outcome {
                Outcome::Committed {
                    operation: Some(op),
                    ..
                } => Some(op.id.clone()),
                _ => None,
            })
            .filter(|id| {
                !h.operation_states
                    .get(id)
                    .and_then(|s| s.last())
                    .is_some_and(|s| s.is_terminal())
            })
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    for id in open {
        if let Ok(op) = api
            .get_operation(pb::GetOperationRequest { id: id.clone() })
            .await
        {
            let state = crate::state(op.get_ref());
            history.lock().unwrap().observe(&id, state);
        }
    }
}
