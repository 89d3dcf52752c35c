//! The supervisor-facing calls speak upstream OpenShell's wire layout. These
//! tests write every message byte by byte from the facts of upstream's
//! contract (package `openshell.v1`, service `OpenShell`, the field and oneof
//! numbers written out below) and read the answers the same way, so they
//! fail if the gateway's layout drifts from upstream's, whatever this
//! project's own generated code says. The client is an upstream 0.1.x
//! supervisor: a hello with only a sandbox id and an instance id, then a
//! poll loop of `GetSandboxConfig` and version-only `ReportPolicyStatus`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use openshell_e2e::{POLICY, TestGateway, create_sandbox, eventually, policy_with_port};
use openshell_gateway::DeliveryMode;
use openshell_proto::v1 as pb;
use prost::bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

const DEADLINE: Duration = Duration::from_secs(30);

// --- protobuf by hand -------------------------------------------------------

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire_type));
}

fn put_varint(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, 0);
    varint(out, v);
}

fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[derive(Debug, Clone)]
enum Value {
    Varint(u64),
    Bytes(Vec<u8>),
}

/// Every field of one message, in order; fixed-width fields are skipped.
fn fields(mut buf: &[u8]) -> Vec<(u32, Value)> {
    fn read_varint(buf: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = buf[0];
            *buf = &buf[1..];
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        v
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = read_varint(&mut buf);
        let field = u32::try_from(key >> 3).unwrap();
        match key & 7 {
            0 => out.push((field, Value::Varint(read_varint(&mut buf)))),
            2 => {
                let len = usize::try_from(read_varint(&mut buf)).unwrap();
                out.push((field, Value::Bytes(buf[..len].to_vec())));
                buf = &buf[len..];
            }
            1 => buf = &buf[8..],
            5 => buf = &buf[4..],
            other => panic!("wire type {other} in {buf:?}"),
        }
    }
    out
}

fn bytes_of(msg: &[(u32, Value)], field: u32) -> Option<Vec<u8>> {
    msg.iter().find_map(|(f, v)| match v {
        Value::Bytes(b) if *f == field => Some(b.clone()),
        _ => None,
    })
}

fn string_of(msg: &[(u32, Value)], field: u32) -> String {
    String::from_utf8(bytes_of(msg, field).unwrap_or_default()).unwrap()
}

fn varint_of(msg: &[(u32, Value)], field: u32) -> u64 {
    msg.iter()
        .find_map(|(f, v)| match v {
            Value::Varint(n) if *f == field => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

/// Passes message bytes through untouched, so the test owns the encoding.
#[derive(Clone, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

/// An upstream supervisor's connection: raw calls with its bearer token.
struct Upstream {
    grpc: tonic::client::Grpc<Channel>,
    credential: String,
}

impl Upstream {
    async fn connect(gw: &TestGateway, credential: &str) -> Self {
        let channel = Channel::from_shared(gw.endpoint())
            .unwrap()
            .connect()
            .await
            .unwrap();
        Self {
            grpc: tonic::client::Grpc::new(channel),
            credential: credential.to_string(),
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", self.credential).parse().unwrap(),
        );
        request
    }

    async fn unary(&mut self, method: &str, body: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
        self.grpc.ready().await.unwrap();
        let path = format!("/openshell.v1.OpenShell/{method}").parse().unwrap();
        let request = self.request(body);
        Ok(self.grpc.unary(request, path, RawCodec).await?.into_inner())
    }
}

// --- upstream's messages ----------------------------------------------------

/// `SupervisorMessage { hello = 1: SupervisorHello { sandbox_id = 1, instance_id = 2 } }`
fn legacy_hello(sandbox_id: &str) -> Vec<u8> {
    let mut hello = Vec::new();
    put_bytes(&mut hello, 1, sandbox_id.as_bytes());
    put_bytes(&mut hello, 2, b"boot-1234");
    let mut message = Vec::new();
    put_bytes(&mut message, 1, &hello);
    message
}

/// `SupervisorMessage { heartbeat = 2: SupervisorHeartbeat {} }`
fn legacy_heartbeat() -> Vec<u8> {
    let mut message = Vec::new();
    put_bytes(&mut message, 2, &[]);
    message
}

/// `openshell.sandbox.v1.GetSandboxConfigRequest { sandbox_id = 1 }`
fn get_config(sandbox_id: &str) -> Vec<u8> {
    let mut request = Vec::new();
    put_bytes(&mut request, 1, sandbox_id.as_bytes());
    request
}

/// `ReportPolicyStatusRequest { sandbox_id = 1, version = 2, status = 3 (LOADED = 2) }`
fn report_loaded(sandbox_id: &str, version: u64) -> Vec<u8> {
    let mut request = Vec::new();
    put_bytes(&mut request, 1, sandbox_id.as_bytes());
    put_varint(&mut request, 2, version);
    put_varint(&mut request, 3, 2);
    request
}

/// What the supervisor of an upstream answer needs: `version` (2), `policy_hash` (3),
/// the ports of the typed policy's endpoints (`policy` 1 → `network_policies` 5 →
/// map value 2 → `endpoints` 2 → `port` 2), and `settings` (4) keys.
struct Config {
    version: u64,
    policy_hash: String,
    ports: Vec<u64>,
    settings: Vec<String>,
    config_revision: u64,
}

fn read_config(bytes: &[u8]) -> Config {
    let response = fields(bytes);
    let policy = fields(&bytes_of(&response, 1).expect("a typed policy at field 1"));
    let mut ports = Vec::new();
    for (field, value) in &policy {
        if let (5, Value::Bytes(entry)) = (field, value) {
            let rule = fields(&bytes_of(&fields(entry), 2).unwrap());
            for (f, endpoint) in &rule {
                if let (2, Value::Bytes(endpoint)) = (f, endpoint) {
                    ports.push(varint_of(&fields(endpoint), 2));
                }
            }
        }
    }
    let settings = response
        .iter()
        .filter_map(|(f, v)| match (f, v) {
            (4, Value::Bytes(entry)) => Some(string_of(&fields(entry), 1)),
            _ => None,
        })
        .collect();
    Config {
        version: varint_of(&response, 2),
        policy_hash: string_of(&response, 3),
        ports,
        settings,
        config_revision: varint_of(&response, 5),
    }
}

/// Upstream's `UpdateConfigRequest { name = 1, policy = 2 }` with a typed
/// `SandboxPolicy { version = 1, network_policies = 5 { "web": NetworkPolicyRule {
/// endpoints = 2 [NetworkEndpoint { host = 1, port = 2 }] } } }`.
fn update_policy(name: &str, host: &str, port: u64) -> Vec<u8> {
    let mut endpoint = Vec::new();
    put_bytes(&mut endpoint, 1, host.as_bytes());
    put_varint(&mut endpoint, 2, port);
    let mut rule = Vec::new();
    put_bytes(&mut rule, 2, &endpoint);
    let mut entry = Vec::new();
    put_bytes(&mut entry, 1, b"web");
    put_bytes(&mut entry, 2, &rule);
    let mut policy = Vec::new();
    put_varint(&mut policy, 1, 1);
    put_bytes(&mut policy, 5, &entry);
    let mut request = Vec::new();
    put_bytes(&mut request, 1, name.as_bytes());
    put_bytes(&mut request, 2, &policy);
    request
}

/// Upstream's `UpdateConfigRequest { name = 1, setting_key = 3, setting_value = 4
/// { string_value = 1 } }`.
fn update_setting(name: &str, key: &str, value: &str) -> Vec<u8> {
    let mut setting_value = Vec::new();
    put_bytes(&mut setting_value, 1, value.as_bytes());
    let mut request = Vec::new();
    put_bytes(&mut request, 1, name.as_bytes());
    put_bytes(&mut request, 3, key.as_bytes());
    put_bytes(&mut request, 4, &setting_value);
    request
}

async fn operation_state(gw: &TestGateway, id: &str) -> i32 {
    let mut api = gw.api().await;
    api.get_operation(pb::GetOperationRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
        .state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_supervisor_is_served_as_a_legacy_one_and_its_reports_resolve_operations() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "upstream", POLICY).await;
    let mut upstream = Upstream::connect(&gw, &credential).await;

    // The session: a bare hello is accepted (field 1 of GatewayMessage) with a
    // session id and a whole-second heartbeat interval, and nothing is pushed.
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    tx.send(legacy_hello(&id)).await.unwrap();
    upstream.grpc.ready().await.unwrap();
    let path = "/openshell.v1.OpenShell/ConnectSupervisor".parse().unwrap();
    let request = upstream.request(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut inbound = upstream
        .grpc
        .streaming(request, path, RawCodec)
        .await
        .unwrap()
        .into_inner();
    let first = fields(&inbound.message().await.unwrap().unwrap());
    let accepted = fields(&bytes_of(&first, 1).expect("SessionAccepted at field 1"));
    assert!(string_of(&accepted, 1).starts_with("ss-"), "{accepted:?}");
    assert!(
        varint_of(&accepted, 2) >= 1,
        "heartbeat_interval_secs: {accepted:?}"
    );
    // Push stays off for it: config_push_enabled (100) and the bootstrap (102) are absent.
    assert_eq!(varint_of(&accepted, 100), 0, "{accepted:?}");
    assert!(bytes_of(&accepted, 102).is_none(), "{accepted:?}");
    tx.send(legacy_heartbeat()).await.unwrap();
    let session = eventually("the legacy session to be listed", DEADLINE, || async {
        let mut api = gw.api().await;
        let sessions = api
            .list_sessions(pb::ListSessionsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .sessions;
        sessions.into_iter().find(|s| s.sandbox_id == id)
    })
    .await;
    assert_eq!(session.protocol_revision, 0, "{session:?}");
    assert_ne!(session.mode, pb::DeliveryMode::Push as i32, "{session:?}");

    // A sandbox setting first, so the policy operation below also waits for
    // settings revision 1, which the version-only report does not name.
    api.update_config(pb::UpdateConfigRequest {
        sandbox: String::from(&id),
        settings: vec![pb::SettingChange {
            key: "log_level".into(),
            change: Some(pb::setting_change::Change::Raw("debug".into())),
        }],
        mode: pb::UpdateMode::CommitOnly as i32,
        ..Default::default()
    })
    .await
    .unwrap();

    // The poll loop: revision 1, typed.
    let config = read_config(
        &upstream
            .unary("GetSandboxConfig", get_config(&id))
            .await
            .unwrap(),
    );
    assert_eq!(config.version, 1);
    assert_eq!(config.policy_hash.len(), 64, "a SHA-256 in hex");
    assert!(config.ports.contains(&443), "{:?}", config.ports);
    assert!(
        config.settings.contains(&"log_level".to_string()),
        "{:?}",
        config.settings
    );
    assert_ne!(config.config_revision, 0);

    // An operator change: revision 2 waits for the supervisor.
    let written = api
        .update_config(pb::UpdateConfigRequest {
            sandbox: String::from(&id),
            policy_text: policy_with_port(8443),
            mode: pb::UpdateMode::CommitOnly as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(
        operation_state(&gw, &written.id).await,
        pb::OperationState::Pending as i32
    );
    let next = read_config(
        &upstream
            .unary("GetSandboxConfig", get_config(&id))
            .await
            .unwrap(),
    );
    assert_eq!(next.version, 2);
    assert!(next.ports.contains(&8443), "{:?}", next.ports);
    assert_ne!(next.config_revision, config.config_revision);

    // Its version-only report settles the operation: the gateway reads it as
    // the snapshot it served with version 2, settings included.
    let answer = upstream
        .unary("ReportPolicyStatus", report_loaded(&id, 2))
        .await
        .unwrap();
    assert!(
        fields(&answer).iter().all(|(f, _)| *f >= 100),
        "only extensions in {answer:?}"
    );
    eventually("the operation to be applied", DEADLINE, || async {
        (operation_state(&gw, &written.id).await == pb::OperationState::Applied as i32)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_calls_need_the_sandbox_credential_not_an_operator_token() {
    let gw = TestGateway::start(openshell_e2e::Backend::Sqlite).await;
    let mut api = gw.api().await;
    let (id, _) = create_sandbox(&mut api, "guarded", POLICY).await;
    let (_, other_credential) = create_sandbox(&mut api, "other", POLICY).await;

    for credential in [
        openshell_e2e::TOKEN.to_string(),
        other_credential,
        String::new(),
    ] {
        let mut upstream = Upstream::connect(&gw, &credential).await;
        let err = upstream
            .unary("GetSandboxConfig", get_config(&id))
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::Unauthenticated,
            "{credential}: {err:?}"
        );
    }
    // And a supervisor credential opens none of the operator calls.
    let (_, credential) = create_sandbox(&mut api, "third", POLICY).await;
    let mut supervisor = gw.api_with_token(Some(&credential)).await;
    let err = supervisor
        .list_sandboxes(pb::ListSandboxesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_config_with_only_upstreams_fields_writes_a_revision() {
    let gw = TestGateway::start(openshell_e2e::Backend::Sqlite).await;
    let mut api = gw.api().await;
    create_sandbox(&mut api, "plain", POLICY).await;
    // An upstream CLI, with the operator token.
    let mut client = Upstream::connect(&gw, openshell_e2e::TOKEN).await;

    let answer = fields(
        &client
            .unary(
                "UpdateConfig",
                update_policy("plain", "api.example.com", 8443),
            )
            .await
            .unwrap(),
    );
    // `UpdateConfigResponse { version = 1, policy_hash = 2, settings_revision = 3 }`.
    assert_eq!(varint_of(&answer, 1), 2, "revision 2: {answer:?}");
    assert_eq!(string_of(&answer, 2).len(), 64, "{answer:?}");
    assert!(bytes_of(&answer, 1000).is_some(), "the operation extension");
    let stored = api
        .get_sandbox_policy(pb::GetSandboxPolicyRequest {
            sandbox: openshell_e2e::sandbox_ref("plain"),
            revision: 0,
            global: false,
        })
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap();
    assert_eq!(stored.revision, 2);
    assert!(
        stored.policy_yaml.contains("api.example.com"),
        "{}",
        stored.policy_yaml
    );
    assert!(
        stored.policy_yaml.contains("8443"),
        "{}",
        stored.policy_yaml
    );
    assert_eq!(stored.policy_hash, string_of(&answer, 2));

    let answer = fields(
        &client
            .unary(
                "UpdateConfig",
                update_setting("plain", "log_level", "debug"),
            )
            .await
            .unwrap(),
    );
    assert_eq!(varint_of(&answer, 3), 1, "settings revision 1: {answer:?}");
    assert_eq!(
        varint_of(&answer, 1),
        2,
        "the policy is unchanged: {answer:?}"
    );

    // A bad typed policy is refused with the document's field path, and changes nothing.
    let err = client
        .unary("UpdateConfig", update_policy("plain", "", 0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .contains("policy.network_policies.web.endpoints[0]"),
        "{err:?}"
    );
}

// --- upstream calls this gateway does not serve -------------------------------

/// Upstream's `RelayStream` (a bidirectional stream) is answered
/// `UNIMPLEMENTED` with where relay channels belong, for an upstream
/// supervisor's credential as for no credential at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_stream_is_unimplemented_and_says_where_it_belongs() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (_id, credential) = create_sandbox(&mut api, "relay", POLICY).await;
    for credential in [credential.as_str(), ""] {
        let mut upstream = Upstream::connect(&gw, credential).await;
        upstream.grpc.ready().await.unwrap();
        let path = "/openshell.v1.OpenShell/RelayStream".parse().unwrap();
        let frames = tokio_stream::iter([Vec::<u8>::new()]);
        let request = if credential.is_empty() {
            tonic::Request::new(frames)
        } else {
            upstream.request(frames)
        };
        let err = upstream
            .grpc
            .streaming(request, path, RawCodec)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented, "{err:?}");
        assert!(
            err.message()
                .contains("RelayStream is not served by this gateway"),
            "{err:?}"
        );
        assert!(err.message().contains("sandbox access"), "{err:?}");
    }
}

/// Upstream's `SubmitPolicyAnalysis` (unary) is answered `UNIMPLEMENTED`
/// with where policy analysis belongs; nothing reaches the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_policy_analysis_is_unimplemented_and_says_where_it_belongs() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let (id, credential) = create_sandbox(&mut api, "analysis", POLICY).await;
    let mut upstream = Upstream::connect(&gw, &credential).await;
    // Field 1 as upstream's requests name the sandbox; the body is never read.
    let mut body = Vec::new();
    put_bytes(&mut body, 1, id.as_bytes());
    let err = upstream
        .unary("SubmitPolicyAnalysis", body)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented, "{err:?}");
    assert!(
        err.message()
            .contains("SubmitPolicyAnalysis is not served by this gateway"),
        "{err:?}"
    );
    assert!(err.message().contains("policy advisor"), "{err:?}");
    // A served call on the same connection still works.
    let config = fields(
        &upstream
            .unary("GetSandboxConfig", get_config(&id))
            .await
            .unwrap(),
    );
    assert!(bytes_of(&config, 1).is_some(), "{config:?}");
}
