//! Sessions driven in process from wire bytes ([`supervisor_api`] and
//! `SupervisorApi::session_from_wire`), the seam the `gateway_session` fuzz target uses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use openshell_proto::v1 as pb;
use pb::gateway_message::Payload as Out;
use prost::Message;
use tonic::metadata::MetadataMap;

use super::supervisor_api;
use crate::config::{DeliveryMode, GatewayConfig};
use crate::crypto::hash_credential;
use crate::store::sqlite_for_tests;
use crate::supervisor_api::SupervisorApi;

const SANDBOX_ID: &str = "sb-00000000-0000-7000-8000-000000000001";
const CREDENTIAL: &str = "wire-test-credential";

async fn api(dir: &std::path::Path) -> (SupervisorApi, tokio::sync::watch::Sender<bool>) {
    let store = sqlite_for_tests(dir).await;
    let mut tx = store.begin_write().await.unwrap();
    tx.ensure_workspace("default").await.unwrap();
    tx.insert_sandbox(SANDBOX_ID, "wire", "default", &hash_credential(CREDENTIAL))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut config = GatewayConfig::for_data_dir(dir, "operator-token");
    config.config_delivery_mode = DeliveryMode::Push;
    let (stop, stopping) = tokio::sync::watch::channel(false);
    (supervisor_api(store, config, stopping), stop)
}

fn credential() -> MetadataMap {
    let mut metadata = MetadataMap::new();
    metadata.insert(
        "authorization",
        format!("Bearer {CREDENTIAL}").parse().unwrap(),
    );
    metadata
}

/// Length-prefixed gRPC frames, uncompressed.
fn body(frames: &[Vec<u8>]) -> prost::bytes::Bytes {
    let mut out = Vec::new();
    for frame in frames {
        out.push(0);
        out.extend_from_slice(&u32::try_from(frame.len()).unwrap().to_be_bytes());
        out.extend_from_slice(frame);
    }
    out.into()
}

fn hello() -> Vec<u8> {
    pb::SupervisorMessage {
        payload: Some(pb::supervisor_message::Payload::Hello(
            pb::SupervisorHello {
                sandbox_id: SANDBOX_ID.into(),
                protocol_revision: 1,
                supports_config_snapshots: true,
                supports_config_apply: true,
                ..Default::default()
            },
        )),
    }
    .encode_to_vec()
}

#[tokio::test]
async fn a_session_from_wire_bytes_is_accepted_with_its_bootstrap() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _stop) = api(dir.path()).await;
    let sent = api.session_from_wire(credential(), body(&[hello()])).await;
    let accepted = sent
        .iter()
        .find_map(|m| match &m.payload {
            Some(Out::SessionAccepted(a)) => Some(a),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no SessionAccepted in {sent:?}"));
    assert!(accepted.config_apply_enabled);
    assert!(accepted.bootstrap_config.is_some());
    assert!(accepted.bootstrap_provider_environment.is_some());
}

#[tokio::test]
async fn a_frame_that_does_not_decode_ends_the_session_before_acceptance() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _stop) = api(dir.path()).await;
    let sent = api
        .session_from_wire(credential(), body(&[vec![0xff, 0xff, 0xff]]))
        .await;
    let [
        pb::GatewayMessage {
            payload: Some(Out::SessionRejected(rejected)),
        },
    ] = sent.as_slice()
    else {
        panic!("expected one SessionRejected, got {sent:?}");
    };
    assert!(
        rejected.reason.starts_with("stream error before hello"),
        "{}",
        rejected.reason
    );
}
