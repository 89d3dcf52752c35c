//! The gateway's handling of supervisor stream messages: one whole `ConnectSupervisor`
//! session per input, in process, against a SQLite store in a temporary directory that holds
//! one sandbox. Each frame of the input becomes one gRPC frame of the request body, decoded
//! by the gateway's own decoder; the request carries the sandbox's credential, so a seed that
//! starts with a hello naming the sandbox gets past authentication into negotiation, the
//! startup exchange, the bootstrap, acks, readiness and heartbeats. The store persists across
//! inputs (policies committed by one session are there for the next), like a long-running
//! gateway's.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use openshell_fuzz::{CREDENTIAL, SANDBOX_ID, SANDBOX_NAME, frames, grpc_body};
use openshell_gateway::config::{DeliveryMode, GatewayConfig};
use openshell_gateway::crypto::{CredentialCipher, hash_credential};
use openshell_gateway::store::{Store, StoreOptions};
use openshell_gateway::supervisor_api::SupervisorApi;
use tonic::metadata::MetadataMap;

struct Harness {
    runtime: tokio::runtime::Runtime,
    api: SupervisorApi,
    metadata: MetadataMap,
    _dir: tempfile::TempDir,
    _stopping: tokio::sync::watch::Sender<bool>,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let api = runtime.block_on(async {
            let mut config = GatewayConfig::for_data_dir(dir.path(), "fuzz-operator-token");
            config.config_delivery_mode = DeliveryMode::Push;
            let cipher = CredentialCipher::load(None, dir.path()).expect("a credential key");
            let store = Store::open(
                &StoreOptions {
                    url: config.database_url.clone(),
                    max_connections: 2,
                    replica_id: "fuzz".into(),
                    wait_recheck_interval: std::time::Duration::from_secs(1),
                },
                cipher,
            )
            .await
            .expect("the store opens");
            let mut tx = store.begin_write().await.expect("a write");
            tx.ensure_workspace("default").await.expect("the workspace");
            tx.insert_sandbox(
                SANDBOX_ID,
                SANDBOX_NAME,
                "default",
                &hash_credential(CREDENTIAL),
            )
            .await
            .expect("the sandbox");
            tx.commit().await.expect("the commit");
            openshell_gateway::server::supervisor_api(store, config, stopping)
        });
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "authorization",
            format!("Bearer {CREDENTIAL}")
                .parse()
                .expect("a header value"),
        );
        Harness {
            runtime,
            api,
            metadata,
            _dir: dir,
            _stopping: stop,
        }
    })
}

fuzz_target!(
    init: openshell_fuzz::seeds::write_if_asked("gateway_session"),
    |data: &[u8]| {
    let harness = harness();
    let body = grpc_body(&frames(data));
    harness.runtime.block_on(
        harness
            .api
            .session_from_wire(harness.metadata.clone(), body.into()),
    );
}
);
