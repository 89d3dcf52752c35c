//! The SDK against an in-process fake of the OpenShell service: checks what
//! actually crosses the wire (token header, retries, paging, wait streams)
//! without needing the real gateway.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::Stream;
use openshell_proto::datamodel::v1::ObjectMeta;
use openshell_proto::datamodel::v1::workspace_selector::Selection;
use openshell_proto::v1 as pb;
use openshell_proto::v1::config_plane_server::{ConfigPlane, ConfigPlaneServer};
use openshell_proto::v1::open_shell_server::{OpenShell, OpenShellServer};
use openshell_sdk::{
    Client, ClientOptions, OperationState, SandboxRef, SdkError, Target, UpdateConfig, UpdateMode,
};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};
use tonic_types::StatusExt;

const TOKEN: &str = "operator-token";

#[derive(Default)]
struct Fake {
    /// Calls per RPC name.
    calls: Mutex<HashMap<&'static str, u32>>,
    /// How many more calls answer UNAVAILABLE, per RPC name.
    unavailable: Mutex<HashMap<&'static str, u32>>,
    wait_calls: AtomicU32,
}

impl Fake {
    fn enter<T>(&self, name: &'static str, request: &Request<T>) -> Result<(), Status> {
        *self.calls.lock().unwrap().entry(name).or_default() += 1;
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if auth != Some(&format!("Bearer {TOKEN}")) {
            return Err(Status::unauthenticated("missing or wrong operator token"));
        }
        let mut unavailable = self.unavailable.lock().unwrap();
        if let Some(left) = unavailable.get_mut(name)
            && *left > 0
        {
            *left -= 1;
            return Err(Status::unavailable("store restarting"));
        }
        Ok(())
    }

    fn calls(&self, name: &str) -> u32 {
        self.calls.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    fn fail_next(&self, name: &'static str, times: u32) {
        self.unavailable.lock().unwrap().insert(name, times);
    }
}

fn sandbox(name: &str) -> pb::Sandbox {
    pb::Sandbox {
        metadata: Some(ObjectMeta {
            id: format!("sb-{name}"),
            name: name.to_owned(),
            workspace: "default".into(),
            ..Default::default()
        }),
        lifecycle: pb::SandboxLifecycle::Running as i32,
        ..Default::default()
    }
}

fn op(id: &str, state: pb::OperationState) -> pb::Operation {
    pb::Operation {
        id: id.to_owned(),
        target_kind: pb::TargetKind::Sandbox as i32,
        target: "sb-demo".into(),
        state: state as i32,
        ..Default::default()
    }
}

type OpStream = Pin<Box<dyn Stream<Item = Result<pb::Operation, Status>> + Send>>;

#[tonic::async_trait]
impl OpenShell for Fake {
    async fn create_sandbox(
        &self,
        request: Request<pb::CreateSandboxRequest>,
    ) -> Result<Response<pb::CreateSandboxResponse>, Status> {
        self.enter("create_sandbox", &request)?;
        let name = request.into_inner().name;
        Ok(Response::new(pb::CreateSandboxResponse {
            sandbox: Some(sandbox(&name)),
            supervisor_credential: "cred-123".into(),
            operation: None,
        }))
    }

    async fn get_sandbox(
        &self,
        request: Request<pb::GetSandboxRequest>,
    ) -> Result<Response<pb::SandboxResponse>, Status> {
        self.enter("get_sandbox", &request)?;
        let req = request.into_inner();
        if req.name == "missing" {
            return Err(Status::not_found("sandbox missing not found"));
        }
        let mut found = sandbox(&req.name);
        if let Some(Selection::Workspace(workspace)) =
            req.workspace_scope.and_then(|scope| scope.selection)
            && let Some(metadata) = found.metadata.as_mut()
        {
            metadata.workspace = workspace;
        }
        Ok(Response::new(pb::SandboxResponse {
            sandbox: Some(found),
        }))
    }

    async fn list_sandboxes(
        &self,
        request: Request<pb::ListSandboxesRequest>,
    ) -> Result<Response<pb::ListSandboxesResponse>, Status> {
        self.enter("list_sandboxes", &request)?;
        let token = request.into_inner().page_token;
        let (names, next) = match token.as_str() {
            "" => (vec!["a", "b"], "page-2"),
            "page-2" => (vec!["c"], ""),
            _ => return Err(Status::invalid_argument("bad page token")),
        };
        Ok(Response::new(pb::ListSandboxesResponse {
            sandboxes: names.into_iter().map(sandbox).collect(),
            next_page_token: next.into(),
        }))
    }

    async fn update_config(
        &self,
        request: Request<pb::UpdateConfigRequest>,
    ) -> Result<Response<pb::UpdateConfigResponse>, Status> {
        self.enter("update_config", &request)?;
        let req = request.into_inner();
        if req.policy_text.contains("port: 0") {
            // As the gateway sends violations: standard BadRequest details beside the text.
            return Err(Status::with_error_details(
                tonic::Code::InvalidArgument,
                "2 problems found\nnetwork_policies.gh.endpoints[0].port: must be 1-65535\nversion: must be 1",
                tonic_types::ErrorDetails::with_bad_request(vec![
                    tonic_types::FieldViolation::new(
                        "network_policies.gh.endpoints[0].port",
                        "must be 1-65535",
                    ),
                    tonic_types::FieldViolation::new("version", "must be 1"),
                ]),
            ));
        }
        if req.validate_only {
            return Ok(Response::new(pb::UpdateConfigResponse {
                kept_static_sections: vec!["process".into()],
                policy_diff: Some(pb::PolicyDiff {
                    added_policies: vec!["github".into()],
                    changed_policies: vec![pb::PolicyChange {
                        name: "pypi".into(),
                        removed_endpoints: vec!["pypi.org:443".into()],
                        ..Default::default()
                    }],
                    current_revision: 2,
                    ..Default::default()
                }),
                ..Default::default()
            }));
        }
        let state = if req.mode == pb::UpdateMode::WaitForApply as i32 {
            pb::OperationState::Applied
        } else {
            pb::OperationState::Pending
        };
        let mut operation = op("op-upd", state);
        operation.idempotency_key = req.request_id;
        Ok(Response::new(pb::UpdateConfigResponse {
            operation: Some(operation),
            idempotent_replay: false,
            ..Default::default()
        }))
    }

    async fn get_gateway_info(
        &self,
        request: Request<pb::GetGatewayInfoRequest>,
    ) -> Result<Response<pb::GetGatewayInfoResponse>, Status> {
        self.enter("get_gateway_info", &request)?;
        Ok(Response::new(pb::GetGatewayInfoResponse {
            gateway_version: "0.1.0".into(),
            details: Some(pb::GatewayInfo {
                version: "0.1.0".into(),
                config_delivery_mode: "push".into(),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
}

#[tonic::async_trait]
impl ConfigPlane for Fake {
    async fn get_operation(
        &self,
        request: Request<pb::GetOperationRequest>,
    ) -> Result<Response<pb::Operation>, Status> {
        self.enter("get_operation", &request)?;
        let id = request.into_inner().id;
        Ok(Response::new(op(&id, pb::OperationState::Pending)))
    }

    async fn wait_for_apply(
        &self,
        request: Request<pb::WaitForApplyRequest>,
    ) -> Result<Response<OpStream>, Status> {
        self.enter("wait_for_apply", &request)?;
        let attempt = self.wait_calls.fetch_add(1, Ordering::SeqCst);
        let id = request.into_inner().id;
        use pb::OperationState::{Applied, Delivered, Pending};
        let items: Vec<Result<pb::Operation, Status>> = match id.as_str() {
            "op-ok" => vec![
                Ok(op(&id, Pending)),
                Ok(op(&id, Delivered)),
                Ok(op(&id, Applied)),
            ],
            "op-slow" => {
                let mut last = op(&id, Pending);
                last.wait_timed_out = true;
                vec![Ok(op(&id, Pending)), Ok(last)]
            }
            "op-flaky" if attempt == 0 => vec![
                Ok(op(&id, Pending)),
                Err(Status::unavailable("replica going away")),
            ],
            "op-flaky" => vec![Ok(op(&id, Applied))],
            _ => vec![Err(Status::not_found("no such operation"))],
        };
        Ok(Response::new(Box::pin(futures::stream::iter(items))))
    }

    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Result<Response<pb::ListOperationsResponse>, Status> {
        self.enter("list_operations", &request)?;
        let req = request.into_inner();
        let ops = req
            .states
            .iter()
            .map(|s| {
                op(
                    "op-x",
                    pb::OperationState::try_from(*s).unwrap_or(pb::OperationState::Unspecified),
                )
            })
            .collect();
        Ok(Response::new(pb::ListOperationsResponse {
            operations: ops,
            next_page_token: String::new(),
        }))
    }
}

/// Starts the fake on a loopback port and returns it with the endpoint URL.
async fn start() -> (std::sync::Arc<Fake>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = std::sync::Arc::new(Fake::default());
    let service = OpenShellServer::from_arc(fake.clone());
    let plane = ConfigPlaneServer::from_arc(fake.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .add_service(plane)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
    });
    (fake, format!("http://{addr}"))
}

async fn client(endpoint: &str) -> Client {
    Client::connect(
        ClientOptions::new(endpoint)
            .with_token(TOKEN)
            .with_request_timeout(Duration::from_secs(5)),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn token_travels_as_bearer_header() {
    let (_fake, endpoint) = start().await;
    let info = client(&endpoint).await.gateway_info().await.unwrap();
    assert_eq!(info.config_delivery_mode, "push");

    let anonymous = Client::connect(ClientOptions::new(&endpoint))
        .await
        .unwrap();
    let err = anonymous.gateway_info().await.unwrap_err();
    assert_eq!(err.code(), "UNAUTHENTICATED");
}

#[tokio::test]
async fn reads_retry_unavailable() {
    let (fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    fake.fail_next("get_sandbox", 2);
    let sb = client
        .get_sandbox(&SandboxRef::from("team/demo"))
        .await
        .unwrap();
    assert_eq!(sb.name, "demo");
    assert_eq!(sb.workspace, "team");
    assert_eq!(fake.calls("get_sandbox"), 3);

    fake.fail_next("get_sandbox", 5);
    let err = client.get_sandbox(&"demo".into()).await.unwrap_err();
    assert_eq!(err.code(), "UNAVAILABLE");
    assert_eq!(fake.calls("get_sandbox"), 6);

    let err = client.get_sandbox(&"missing".into()).await.unwrap_err();
    assert!(matches!(err, SdkError::NotFound(_)));
}

#[tokio::test]
async fn writes_without_key_are_sent_once() {
    let (fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    fake.fail_next("create_sandbox", 1);
    let err = client.create_sandbox("demo", None, None).await.unwrap_err();
    assert_eq!(err.code(), "UNAVAILABLE");
    assert_eq!(fake.calls("create_sandbox"), 1);

    let created = client.create_sandbox("demo", None, None).await.unwrap();
    assert_eq!(created.supervisor_credential.expose(), "cred-123");

    fake.fail_next("update_config", 1);
    let plain = UpdateConfig::new(Target::Global).set("log_level", "debug");
    assert!(client.update_config(plain).await.is_err());
    assert_eq!(fake.calls("update_config"), 1);
}

#[tokio::test]
async fn keyed_updates_retry_and_wait_mode_is_sent() {
    let (fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    fake.fail_next("update_config", 1);
    let update = UpdateConfig::new(Target::Sandbox("demo".into()))
        .policy("version: 1")
        .mode(UpdateMode::WaitForApply)
        .idempotency_key("deploy-1");
    let result = client.update_config(update).await.unwrap();
    assert_eq!(fake.calls("update_config"), 2);
    let operation = result.operation.unwrap();
    assert_eq!(operation.state, OperationState::Applied);
    assert_eq!(operation.idempotency_key.as_deref(), Some("deploy-1"));
}

#[tokio::test]
async fn a_validate_only_update_comes_back_without_an_operation_and_is_retried() {
    let (fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    // No idempotency key, yet retried: a dry run writes nothing.
    fake.fail_next("update_config", 1);
    let update = UpdateConfig::new(Target::Sandbox("demo".into()))
        .policy("version: 1")
        .validate_only();
    let result = client.update_config(update).await.unwrap();
    assert_eq!(fake.calls("update_config"), 2);
    assert!(result.validate_only);
    assert_eq!(result.operation, None);
    assert_eq!(result.kept_static_sections, ["process"]);
    let diff = result.policy_diff.unwrap();
    assert_eq!(diff.added_policies, ["github"]);
    assert_eq!(diff.changed_policies[0].removed_endpoints, ["pypi.org:443"]);
    assert_eq!(diff.current_policy_hash, None);
}

#[tokio::test]
async fn violations_survive_the_wire() {
    let (_fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    let err = client
        .update_config(UpdateConfig::new(Target::Sandbox("demo".into())).policy("port: 0"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert_eq!(err.to_string(), "2 problems found");
    let fields: Vec<&str> = err.violations().iter().map(|v| v.field.as_str()).collect();
    assert_eq!(fields, ["network_policies.gh.endpoints[0].port", "version"]);
}

#[tokio::test]
async fn lists_follow_page_tokens() {
    let (fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    let names: Vec<String> = client
        .list_sandboxes(None, false)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(fake.calls("list_sandboxes"), 2);

    let ops = client
        .list_operations(None, &[OperationState::Failed], 10)
        .await
        .unwrap();
    assert_eq!(ops[0].state, OperationState::Failed);
}

#[tokio::test]
async fn wait_final_reports_every_update_and_the_end() {
    let (_fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    let mut seen = Vec::new();
    let op = client
        .wait_for_apply_final("op-ok", Some(Duration::from_secs(5)), None, |op| {
            seen.push(op.state)
        })
        .await
        .unwrap();
    assert_eq!(op.state, OperationState::Applied);
    assert_eq!(
        seen,
        [
            OperationState::Pending,
            OperationState::Delivered,
            OperationState::Applied
        ]
    );
}

#[tokio::test]
async fn wait_final_times_out_with_the_live_operation() {
    let (_fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    let err = client
        .wait_for_apply_final("op-slow", Some(Duration::from_secs(1)), None, |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), "WAIT_TIMED_OUT");
    let SdkError::WaitTimedOut { operation } = err else {
        panic!("expected WaitTimedOut");
    };
    assert_eq!(operation.id, "op-slow");
    assert!(operation.wait_timed_out);
}

#[tokio::test]
async fn wait_final_resubscribes_after_a_broken_stream() {
    let (fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    let op = client
        .wait_for_apply_final("op-flaky", Some(Duration::from_secs(5)), None, |_| {})
        .await
        .unwrap();
    assert_eq!(op.state, OperationState::Applied);
    assert_eq!(fake.calls("wait_for_apply"), 2);
}

#[tokio::test]
async fn raw_wait_stream_yields_errors() {
    let (_fake, endpoint) = start().await;
    let client = client(&endpoint).await;
    let mut stream = client.wait_for_apply("op-none", None, None).await.unwrap();
    let first = futures::StreamExt::next(&mut stream).await.unwrap();
    assert_eq!(first.unwrap_err().code(), "NOT_FOUND");
    assert!(futures::StreamExt::next(&mut stream).await.is_none());
}
