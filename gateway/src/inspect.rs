//! `InspectSession`: why a sandbox has, or has not, got its configuration,
//! with a plain-language hint for every abnormal state found.

use openshell_proto::v1 as pb;

use crate::api::convert;
use crate::config::DeliveryMode;
use crate::error::Result;
use crate::sessions::NegotiatedMode;
use crate::state::GatewayState;
use crate::store::{Lifecycle, OperationFilter, OperationState, SandboxRecord};

pub async fn inspect(
    state: &GatewayState,
    sandbox: &SandboxRecord,
) -> Result<pb::SessionInspection> {
    let pending = state
        .store
        .list_operations(&OperationFilter {
            sandbox_id: Some(sandbox.id.clone()),
            states: vec![OperationState::Pending, OperationState::Delivered],
            limit: 50,
            offset: 0,
        })
        .await?;
    let session = state.sessions.get(&sandbox.id);
    let gateway_mode = state.config.config_delivery_mode;
    let mut hints = Vec::new();
    match sandbox.lifecycle {
        Lifecycle::Deleted => hints.push("sandbox is deleted; nothing is delivered to it".to_string()),
        Lifecycle::Stopped => hints.push(
            "sandbox is stopped; configuration changes are stored but not in effect until it starts".to_string(),
        ),
        _ => {}
    }
    match &session {
        None if sandbox.lifecycle != Lifecycle::Deleted => hints.push(
            "no supervisor is connected for this sandbox; changes are stored and delivered when it connects"
                .to_string(),
        ),
        Some(s) => {
            if gateway_mode == DeliveryMode::Poll {
                hints.push("gateway is in poll mode: the supervisor picks up changes on its next poll (every 10 s by default)".to_string());
            } else if s.protocol_revision == 0 {
                hints.push("legacy supervisor (protocol revision 0) keeps polling; upgrade it to get pushed configuration".to_string());
            } else if s.mode == NegotiatedMode::ShadowPush {
                hints.push("supervisor receives pushed snapshots but cannot apply them (shadow push); it keeps polling".to_string());
            }
            if s.local_policy_override {
                hints.push("local policy override retained: the supervisor keeps its local policy file; gateway policy changes end INACTIVE".to_string());
            }
        }
        None => {}
    }
    if !pending.is_empty() && session.is_some() {
        hints.push(format!(
            "{} operation(s) waiting for the supervisor to report the new revision",
            pending.len()
        ));
    }
    Ok(pb::SessionInspection {
        sandbox: Some(convert::sandbox(sandbox)),
        gateway_mode: gateway_mode.as_str().to_string(),
        connected: session.is_some(),
        negotiated_mode: session
            .as_ref()
            .map_or(pb::DeliveryMode::Unspecified, |s| s.mode.to_pb())
            as i32,
        negotiated_reason: session
            .as_ref()
            .map(|s| s.mode_reason.clone())
            .unwrap_or_default(),
        supervisor_version: session
            .as_ref()
            .map(|s| s.supervisor_version.clone())
            .unwrap_or_default(),
        protocol_revision: session.as_ref().map_or(0, |s| s.protocol_revision),
        supports_config_snapshots: session
            .as_ref()
            .is_some_and(|s| s.supports_config_snapshots),
        supports_config_apply: session.as_ref().is_some_and(|s| s.supports_config_apply),
        owner_replica: session
            .as_ref()
            .map(|_| state.config.replica_id.clone())
            .unwrap_or_default(),
        session_id: session
            .as_ref()
            .map(|s| s.session_id.clone())
            .unwrap_or_default(),
        connected_at: session
            .as_ref()
            .map(|s| convert::timestamp(s.connected_at_ms)),
        last_heartbeat_at: session
            .as_ref()
            .map(|s| convert::timestamp(s.last_heartbeat_ms)),
        components: Vec::new(),
        pending_operations: pending.iter().map(convert::operation).collect(),
        recent_events: Vec::new(),
        hints,
        last_report: String::new(),
        last_report_at: None,
    })
}
