//! An in-process fake gateway: a real tonic `OpenShell` server on 127.0.0.1:0 serving the
//! supervisor calls (the others answer UNIMPLEMENTED), whose answers the test scripts, and
//! which records everything the supervisor sends. Like a real gateway it authenticates every
//! call by its `authorization: Bearer <credential>` metadata and the sandbox id it names.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openshell_core::{SandboxPolicy, Secret};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1::config_update::Snapshot;
use openshell_proto::v1::gateway_message::Payload as Out;
use openshell_proto::v1::open_shell_server::{OpenShell, OpenShellServer};
use openshell_proto::v1::supervisor_message::Payload as In;
use openshell_proto::v1::*;
use openshell_supervisor::{BackoffConfig, Identity, SupervisorOptions};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::codegen::BoxStream;
use tonic::metadata::MetadataMap;
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
    /// As upstream OpenShell's gateway answers: accepted with upstream's two fields only, so
    /// nothing is pushed and the supervisor polls.
    AcceptUpstream {
        heartbeat_secs: u32,
    },
    /// Reads the hello and never answers the call, as when the request is lost on its way.
    Silent,
}

/// The configuration the fake serves: the two poll answers, which are also the snapshots it
/// pushes.
pub type ConfigPair = (
    sb::GetSandboxConfigResponse,
    GetSandboxProviderEnvironmentResponse,
);

#[derive(Default)]
pub struct Recorded {
    /// Every hello received, refused ones included.
    pub hellos: Vec<SupervisorHello>,
    /// The supervisor's end of the TCP connection each hello came on, in the same order.
    pub hello_peers: Vec<Option<SocketAddr>>,
    /// Every frame after the hello, in arrival order.
    pub frames: Vec<In>,
    pub reports: Vec<ReportPolicyStatusRequest>,
    pub get_config_calls: u64,
    pub get_env_calls: u64,
    pub sessions_ended: u64,
    /// Calls refused for a missing or wrong `authorization` metadata or sandbox id.
    pub unauthenticated: u64,
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
    config: Mutex<ConfigPair>,
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

impl Service {
    /// The gateway's check: the call's bearer credential is the test sandbox's, and so is the
    /// sandbox the request names.
    fn authenticate(&self, metadata: &MetadataMap, sandbox_id: &str) -> Result<(), Status> {
        let bearer = metadata
            .get("authorization")
            .and_then(|value| value.to_str().ok());
        if bearer == Some(&format!("Bearer {CREDENTIAL}")) && sandbox_id == SANDBOX {
            return Ok(());
        }
        self.0.recorded.lock().unwrap().unauthenticated += 1;
        self.0.bump();
        Err(Status::unauthenticated(
            "missing or wrong supervisor credential",
        ))
    }
}

#[tonic::async_trait]
impl OpenShell for Service {
    async fn connect_supervisor(
        &self,
        request: Request<Streaming<SupervisorMessage>>,
    ) -> Result<Response<BoxStream<GatewayMessage>>, Status> {
        let peer = request.remote_addr();
        let (metadata, _, mut inbound) = request.into_parts();
        let hello = match inbound.message().await? {
            Some(SupervisorMessage {
                payload: Some(In::Hello(hello)),
            }) => hello,
            _ => return Err(Status::invalid_argument("first frame must be a hello")),
        };
        // Recorded before the check: a refused hello was sent all the same.
        {
            let mut recorded = self.0.recorded.lock().unwrap();
            recorded.hellos.push(hello.clone());
            recorded.hello_peers.push(peer);
        }
        self.0.bump();
        self.authenticate(&metadata, &hello.sandbox_id)?;
        let (tx, rx) = mpsc::channel(16);
        let answer = self.0.answer.lock().unwrap().clone();
        match answer {
            Answer::Silent => std::future::pending::<()>().await,
            Answer::Reject { reason, permanent } => {
                let _ = tx
                    .send(Ok(GatewayMessage {
                        payload: Some(Out::SessionRejected(SessionRejected { reason, permanent })),
                    }))
                    .await;
            }
            Answer::Accept { .. } | Answer::AcceptUpstream { .. } => {
                let session_id = format!("sess-{}", self.0.recorded.lock().unwrap().hellos.len());
                let accepted = match answer {
                    Answer::Accept {
                        apply,
                        heartbeat_ms,
                        poll_ms,
                    } => {
                        let (config, env) = self.0.config.lock().unwrap().clone();
                        let bootstrap = apply && hello.supports_config_apply;
                        SessionAccepted {
                            session_id,
                            config_push_enabled: hello.supports_config_snapshots,
                            config_apply_enabled: bootstrap,
                            bootstrap_config: bootstrap.then(|| config_update(1, 1, config)),
                            bootstrap_provider_environment: bootstrap
                                .then(|| env_update(2, 2, env)),
                            heartbeat_interval_ms: heartbeat_ms,
                            poll_interval_ms: poll_ms,
                            replica_id: "fake".into(),
                            ..SessionAccepted::default()
                        }
                    }
                    _ => SessionAccepted {
                        session_id,
                        heartbeat_interval_secs: match answer {
                            Answer::AcceptUpstream { heartbeat_secs } => heartbeat_secs,
                            _ => 0,
                        },
                        ..SessionAccepted::default()
                    },
                };
                let _ = tx
                    .send(Ok(GatewayMessage {
                        payload: Some(Out::SessionAccepted(accepted)),
                    }))
                    .await;
                *self.0.session.lock().unwrap() = Some(tx.clone());
                let shared = self.0.clone();
                tokio::spawn(async move {
                    while let Ok(Some(frame)) = inbound.message().await {
                        if let Some(payload) = frame.payload {
                            shared.recorded.lock().unwrap().frames.push(payload);
                            shared.bump();
                        }
                    }
                    shared.recorded.lock().unwrap().sessions_ended += 1;
                    shared.bump();
                });
            }
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_sandbox_config(
        &self,
        request: Request<sb::GetSandboxConfigRequest>,
    ) -> Result<Response<sb::GetSandboxConfigResponse>, Status> {
        self.authenticate(request.metadata(), &request.get_ref().sandbox_id)?;
        self.0.recorded.lock().unwrap().get_config_calls += 1;
        self.0.bump();
        Ok(Response::new(self.0.config.lock().unwrap().0.clone()))
    }

    async fn get_sandbox_provider_environment(
        &self,
        request: Request<GetSandboxProviderEnvironmentRequest>,
    ) -> Result<Response<GetSandboxProviderEnvironmentResponse>, Status> {
        self.authenticate(request.metadata(), &request.get_ref().sandbox_id)?;
        self.0.recorded.lock().unwrap().get_env_calls += 1;
        self.0.bump();
        Ok(Response::new(self.0.config.lock().unwrap().1.clone()))
    }

    async fn report_policy_status(
        &self,
        request: Request<ReportPolicyStatusRequest>,
    ) -> Result<Response<ReportPolicyStatusResponse>, Status> {
        self.authenticate(request.metadata(), &request.get_ref().sandbox_id)?;
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
        let service = OpenShellServer::new(Service(shared.clone()));
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

    pub fn set_config(&self, pair: ConfigPair) {
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
            payload: Some(message),
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

/// The policy the fake serves.
pub fn policy() -> SandboxPolicy {
    openshell_core::parse_and_validate(POLICY_YAML).unwrap()
}

/// `policy` as the sandbox config carries it.
pub fn policy_message(policy: &SandboxPolicy) -> sb::SandboxPolicy {
    sb::SandboxPolicy::from(policy)
}

fn log_level(value: &str) -> sb::EffectiveSetting {
    sb::EffectiveSetting {
        value: Some(sb::SettingValue {
            value: Some(sb::setting_value::Value::StringValue(value.into())),
        }),
        scope: sb::SettingScope::Default as i32,
    }
}

/// A consistent snapshot pair for the test sandbox, as this project's gateway builds it.
pub fn snapshot_pair(policy_revision: u64, env_revision: &str) -> ConfigPair {
    let policy = policy();
    (
        sb::GetSandboxConfigResponse {
            policy: Some(policy_message(&policy)),
            version: u32::try_from(policy_revision).unwrap(),
            policy_hash: policy.policy_hash(),
            settings: [("log_level".to_string(), log_level("info"))].into(),
            policy_source: sb::PolicySource::Sandbox as i32,
            sandbox_id: SANDBOX.into(),
            policy_revision,
            global_policy_revision: 0,
            global_settings_revision: 3,
            workspace_settings_revision: 0,
            sandbox_settings_revision: 4,
            provider_env_fingerprint: env_revision.into(),
            ..sb::GetSandboxConfigResponse::default()
        },
        GetSandboxProviderEnvironmentResponse {
            environment: [("GITHUB_TOKEN".to_string(), PROVIDER_SECRET.to_string())].into(),
            sandbox_id: SANDBOX.into(),
            provider_env_fingerprint: env_revision.into(),
            attachment_epoch: 1,
            sources: [(
                "GITHUB_TOKEN".to_string(),
                EnvValueSource {
                    class: ValueClass::Credential as i32,
                    provider: "github".into(),
                },
            )]
            .into(),
            ..GetSandboxProviderEnvironmentResponse::default()
        },
    )
}

/// A snapshot pair as upstream OpenShell's gateway answers the polls: upstream's fields only
/// (its own policy hash, a policy `version`, a numeric provider environment revision), none
/// of this project's extensions.
pub fn upstream_pair(version: u32, provider_env_revision: u64) -> ConfigPair {
    (
        sb::GetSandboxConfigResponse {
            policy: Some(policy_message(&policy())),
            version,
            policy_hash: "0f".repeat(32),
            settings: [("log_level".to_string(), log_level("info"))].into(),
            config_revision: 11,
            policy_source: sb::PolicySource::Sandbox as i32,
            provider_env_revision,
            workspace: "default".into(),
            policy_validation_failure_mode: "retain_last_valid".into(),
            ..sb::GetSandboxConfigResponse::default()
        },
        GetSandboxProviderEnvironmentResponse {
            environment: [("GITHUB_TOKEN".to_string(), PROVIDER_SECRET.to_string())].into(),
            provider_env_revision,
            ..GetSandboxProviderEnvironmentResponse::default()
        },
    )
}

pub fn config_update(
    delivery_id: u64,
    sequence: u64,
    c: sb::GetSandboxConfigResponse,
) -> ConfigUpdate {
    ConfigUpdate {
        delivery_id,
        sequence,
        component: ConfigComponent::SandboxConfig as i32,
        fingerprint: format!("cfg-{}-{}", c.policy_revision, c.provider_env_fingerprint),
        snapshot: Some(Snapshot::SandboxConfig(
            openshell_proto::v1::SandboxConfigSnapshot::from_response(&c),
        )),
    }
}

pub fn env_update(
    delivery_id: u64,
    sequence: u64,
    e: GetSandboxProviderEnvironmentResponse,
) -> ConfigUpdate {
    ConfigUpdate {
        delivery_id,
        sequence,
        component: ConfigComponent::ProviderEnvironment as i32,
        fingerprint: format!("env-{}", e.provider_env_fingerprint),
        snapshot: Some(Snapshot::ProviderEnvironment(e)),
    }
}
