//! An in-process fake gateway: a real tonic `Supervisor` server on 127.0.0.1:0 whose answers
//! the test scripts, and which records everything the supervisor sends.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openshell_core::Secret;
use openshell_proto::v1::config_update::Snapshot;
use openshell_proto::v1::gateway_message::Message as Out;
use openshell_proto::v1::supervisor_message::Message as In;
use openshell_proto::v1::supervisor_server::{Supervisor as SupervisorService, SupervisorServer};
use openshell_proto::v1::*;
use openshell_supervisor::{BackoffConfig, Identity, SupervisorOptions};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

pub const SANDBOX: &str = "sb-test";
pub const CREDENTIAL: &str = "cred-0123456789";
pub const PROVIDER_SECRET: &str = "ghp_providersecret99";

/// How the fake answers a hello.
#[derive(Clone)]
pub enum Answer {
    Reject {
        reason: String,
        permanent: bool,
    },
    Accept {
        apply: bool,
        heartbeat_ms: u32,
        poll_ms: u32,
    },
}

#[derive(Default)]
pub struct Recorded {
    pub hellos: Vec<SupervisorHello>,
    /// Every frame after the hello, in arrival order.
    pub frames: Vec<In>,
    pub reports: Vec<ReportPolicyStatusRequest>,
    pub get_config_calls: u64,
    pub get_env_calls: u64,
    pub sessions_ended: u64,
}

impl Recorded {
    pub fn heartbeats(&self) -> usize {
        self.frames
            .iter()
            .filter(|f| matches!(f, In::Heartbeat(_)))
            .count()
    }

    pub fn bootstrap_results(&self) -> Vec<BootstrapResult> {
        self.frames
            .iter()
            .filter_map(|f| match f {
                In::BootstrapResult(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn update_results(&self) -> Vec<ConfigUpdateResult> {
        self.frames
            .iter()
            .filter_map(|f| match f {
                In::ConfigUpdateResult(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }
}

struct Shared {
    answer: Mutex<Answer>,
    config: Mutex<(SandboxConfigSnapshot, ProviderEnvironmentSnapshot)>,
    recorded: Mutex<Recorded>,
    /// Sender of the current session's outbound stream, to push frames from the test.
    session: Mutex<Option<mpsc::Sender<Result<GatewayMessage, Status>>>>,
    changed: watch::Sender<u64>,
}

impl Shared {
    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

#[derive(Clone)]
pub struct FakeGateway {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Service(Arc<Shared>);

fn check_identity(identity: Option<&SupervisorIdentity>) -> Result<(), Status> {
    match identity {
        Some(id) if id.sandbox_id == SANDBOX && id.credential == CREDENTIAL => Ok(()),
        _ => Err(Status::unauthenticated("bad identity")),
    }
}

#[tonic::async_trait]
impl SupervisorService for Service {
    type ConnectSupervisorStream = ReceiverStream<Result<GatewayMessage, Status>>;

    async fn connect_supervisor(
        &self,
        request: Request<Streaming<SupervisorMessage>>,
    ) -> Result<Response<Self::ConnectSupervisorStream>, Status> {
        let mut inbound = request.into_inner();
        let hello = match inbound.message().await? {
            Some(SupervisorMessage {
                message: Some(In::Hello(hello)),
            }) => hello,
            _ => return Err(Status::invalid_argument("first frame must be a hello")),
        };
        self.0.recorded.lock().unwrap().hellos.push(hello.clone());
        self.0.bump();
        let (tx, rx) = mpsc::channel(16);
        let answer = self.0.answer.lock().unwrap().clone();
        match answer {
            Answer::Reject { reason, permanent } => {
                let _ = tx
                    .send(Ok(GatewayMessage {
                        message: Some(Out::Rejected(SessionRejected { reason, permanent })),
                    }))
                    .await;
            }
            Answer::Accept {
                apply,
                heartbeat_ms,
                poll_ms,
            } => {
                let (config, env) = self.0.config.lock().unwrap().clone();
                let bootstrap = apply && hello.supports_config_apply;
                let accepted = SessionAccepted {
                    session_id: format!("sess-{}", self.0.recorded.lock().unwrap().hellos.len()),
                    config_push_enabled: hello.supports_config_snapshots,
                    config_apply_enabled: bootstrap,
                    bootstrap_config: bootstrap.then(|| config_update(1, 1, config)),
                    bootstrap_provider_environment: bootstrap.then(|| env_update(2, 2, env)),
                    heartbeat_interval_ms: heartbeat_ms,
                    poll_interval_ms: poll_ms,
                    replica_id: "fake".into(),
                };
                let _ = tx
                    .send(Ok(GatewayMessage {
                        message: Some(Out::Accepted(accepted)),
                    }))
                    .await;
                *self.0.session.lock().unwrap() = Some(tx.clone());
                let shared = self.0.clone();
                tokio::spawn(async move {
                    while let Ok(Some(frame)) = inbound.message().await {
                        if let Some(message) = frame.message {
                            shared.recorded.lock().unwrap().frames.push(message);
                            shared.bump();
                        }
                    }
                    shared.recorded.lock().unwrap().sessions_ended += 1;
                    shared.bump();
                });
            }
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_sandbox_config(
        &self,
        request: Request<GetSandboxConfigRequest>,
    ) -> Result<Response<SandboxConfigSnapshot>, Status> {
        check_identity(request.get_ref().identity.as_ref())?;
        self.0.recorded.lock().unwrap().get_config_calls += 1;
        self.0.bump();
        Ok(Response::new(self.0.config.lock().unwrap().0.clone()))
    }

    async fn get_sandbox_provider_environment(
        &self,
        request: Request<GetSandboxProviderEnvironmentRequest>,
    ) -> Result<Response<ProviderEnvironmentSnapshot>, Status> {
        check_identity(request.get_ref().identity.as_ref())?;
        self.0.recorded.lock().unwrap().get_env_calls += 1;
        self.0.bump();
        Ok(Response::new(self.0.config.lock().unwrap().1.clone()))
    }

    async fn report_policy_status(
        &self,
        request: Request<ReportPolicyStatusRequest>,
    ) -> Result<Response<ReportPolicyStatusResponse>, Status> {
        check_identity(request.get_ref().identity.as_ref())?;
        self.0
            .recorded
            .lock()
            .unwrap()
            .reports
            .push(request.into_inner());
        self.0.bump();
        Ok(Response::new(ReportPolicyStatusResponse {
            resolved_operations: 0,
        }))
    }

    async fn push_sandbox_logs(
        &self,
        _request: Request<Streaming<SandboxLogBatch>>,
    ) -> Result<Response<PushSandboxLogsResponse>, Status> {
        Ok(Response::new(PushSandboxLogsResponse { accepted_lines: 0 }))
    }
}

impl FakeGateway {
    pub async fn start(answer: Answer) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (changed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            answer: Mutex::new(answer),
            config: Mutex::new(snapshot_pair(1, "env-1")),
            recorded: Mutex::new(Recorded::default()),
            session: Mutex::new(None),
            changed,
        });
        let service = SupervisorServer::new(Service(shared.clone()));
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Self { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_answer(&self, answer: Answer) {
        *self.shared.answer.lock().unwrap() = answer;
    }

    pub fn set_config(&self, pair: (SandboxConfigSnapshot, ProviderEnvironmentSnapshot)) {
        *self.shared.config.lock().unwrap() = pair;
    }

    pub fn recorded<T>(&self, f: impl FnOnce(&Recorded) -> T) -> T {
        f(&self.shared.recorded.lock().unwrap())
    }

    /// Sends a frame on the current session.
    pub async fn push(&self, message: Out) {
        let tx = self
            .shared
            .session
            .lock()
            .unwrap()
            .clone()
            .expect("no session");
        tx.send(Ok(GatewayMessage {
            message: Some(message),
        }))
        .await
        .unwrap();
    }

    /// Ends the current session from the gateway's side.
    pub fn close_session(&self) {
        self.shared.session.lock().unwrap().take();
    }

    /// Waits until `cond` holds on what was recorded; panics after a generous deadline.
    pub async fn wait_until(&self, what: &str, cond: impl Fn(&Recorded) -> bool) {
        let mut changed = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if self.recorded(&cond) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                panic!("timed out waiting for: {what}");
            }
        }
    }
}

pub fn identity() -> Identity {
    Identity::new(SANDBOX, Secret::new(CREDENTIAL))
}

/// Options with every interval short, so tests take milliseconds.
pub fn fast_options(gateway: &FakeGateway) -> SupervisorOptions {
    let mut options = SupervisorOptions::new(gateway.url(), identity());
    options.poll_interval = Duration::from_millis(50);
    options.heartbeat_interval = Duration::from_millis(50);
    options.accept_timeout = Duration::from_secs(10);
    options.rpc_timeout = Duration::from_secs(5);
    options.reconnect_backoff =
        BackoffConfig::fast(Duration::from_millis(20), Duration::from_millis(200));
    options.report_backoff =
        BackoffConfig::fast(Duration::from_millis(20), Duration::from_millis(200));
    options.apply_retry_backoff =
        BackoffConfig::fast(Duration::from_millis(20), Duration::from_millis(200));
    options
}

pub const POLICY_YAML: &str = "version: 1\nnetwork_policies:\n  github:\n    endpoints:\n      - host: api.github.com\n        port: 443\n";

/// A consistent snapshot pair for the test sandbox.
pub fn snapshot_pair(
    policy_revision: u64,
    env_revision: &str,
) -> (SandboxConfigSnapshot, ProviderEnvironmentSnapshot) {
    let policy = openshell_core::parse_and_validate(POLICY_YAML).unwrap();
    (
        SandboxConfigSnapshot {
            sandbox_id: SANDBOX.into(),
            policy_json: policy.canonical_json(),
            policy_source: PolicySource::Sandbox as i32,
            policy_revision,
            policy_hash: policy.policy_hash(),
            global_policy_revision: 0,
            settings: vec![Setting {
                key: "log_level".into(),
                value: Some(SettingValue {
                    kind: Some(setting_value::Kind::StringValue("info".into())),
                }),
                scope: SettingScope::Default as i32,
            }],
            global_settings_revision: 3,
            workspace_settings_revision: 0,
            sandbox_settings_revision: 4,
            provider_env_revision: env_revision.into(),
            built_at: None,
            lifecycle: SandboxLifecycle::Running as i32,
        },
        ProviderEnvironmentSnapshot {
            sandbox_id: SANDBOX.into(),
            values: vec![EnvValue {
                name: "GITHUB_TOKEN".into(),
                value: PROVIDER_SECRET.into(),
                class: ValueClass::Credential as i32,
                provider: "github".into(),
            }],
            provider_env_revision: env_revision.into(),
            attachment_epoch: 1,
            expires_at: None,
            built_at: None,
        },
    )
}

pub fn config_update(delivery_id: u64, sequence: u64, c: SandboxConfigSnapshot) -> ConfigUpdate {
    ConfigUpdate {
        delivery_id,
        sequence,
        component: ConfigComponent::SandboxConfig as i32,
        fingerprint: format!("cfg-{}-{}", c.policy_revision, c.provider_env_revision),
        snapshot: Some(Snapshot::SandboxConfig(c)),
    }
}

pub fn env_update(delivery_id: u64, sequence: u64, e: ProviderEnvironmentSnapshot) -> ConfigUpdate {
    ConfigUpdate {
        delivery_id,
        sequence,
        component: ConfigComponent::ProviderEnvironment as i32,
        fingerprint: format!("env-{}", e.provider_env_revision),
        snapshot: Some(Snapshot::ProviderEnvironment(e)),
    }
}
