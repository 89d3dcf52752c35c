//! The pushed `sandbox_config` snapshot and upstream's `GetSandboxConfigResponse`
//! are one wire shape; only the Rust types differ (the policy as shared bytes, or
//! as a message tree). Converting is re-reading the same bytes.

use prost::Message;

use crate::sandbox::v1 as sb;
use crate::v1;

impl v1::SandboxConfigSnapshot {
    /// This snapshot as upstream's message, the policy decoded.
    pub fn to_response(&self) -> Result<sb::GetSandboxConfigResponse, prost::DecodeError> {
        sb::GetSandboxConfigResponse::decode(self.encode_to_vec().as_slice())
    }

    /// Upstream's message as a snapshot, the policy encoded.
    pub fn from_response(response: &sb::GetSandboxConfigResponse) -> Self {
        // Both describe the same fields with the same wire types, so the bytes of one
        // always decode as the other.
        Self::decode(response.encode_to_vec().as_slice()).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn full_response() -> sb::GetSandboxConfigResponse {
        sb::GetSandboxConfigResponse {
            policy: Some(sb::SandboxPolicy {
                version: 1,
                network_policies: [(
                    "web".to_string(),
                    sb::NetworkPolicyRule {
                        name: "web".into(),
                        endpoints: vec![sb::NetworkEndpoint {
                            host: "api.example.com".into(),
                            port: 443,
                            ..Default::default()
                        }],
                        ..Default::default()
                    },
                )]
                .into(),
                ..Default::default()
            }),
            version: 3,
            policy_hash: "h".into(),
            settings: [(
                "log_level".to_string(),
                sb::EffectiveSetting {
                    value: Some(sb::SettingValue {
                        value: Some(sb::setting_value::Value::StringValue("debug".into())),
                    }),
                    scope: sb::SettingScope::Workspace as i32,
                },
            )]
            .into(),
            config_revision: 9,
            policy_source: sb::PolicySource::Global as i32,
            global_policy_version: 2,
            provider_env_revision: 7,
            supervisor_middleware_services: vec![sb::SupervisorMiddlewareService {
                name: "m".into(),
                ..Default::default()
            }],
            workspace: "team".into(),
            policy_validation_failure_mode: "fail_closed".into(),
            sandbox_id: "sb-1".into(),
            policy_revision: 3,
            global_policy_revision: 2,
            global_settings_revision: 4,
            workspace_settings_revision: 5,
            sandbox_settings_revision: 6,
            provider_env_fingerprint: "e1-abc".into(),
            built_at: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: 2,
            }),
        }
    }

    /// Every field set: a field added to one message and not the other, or numbered
    /// or typed differently, changes the bytes and fails here.
    #[test]
    fn the_snapshot_and_upstreams_response_are_one_wire_shape() {
        let response = full_response();
        let snapshot = v1::SandboxConfigSnapshot::from_response(&response);
        assert!(!snapshot.policy.is_empty());
        assert_eq!(snapshot.encode_to_vec(), response.encode_to_vec());
        assert_eq!(snapshot.to_response().unwrap(), response);
        assert_eq!(
            sb::SandboxPolicy::decode(snapshot.policy.clone()).unwrap(),
            response.policy.clone().unwrap()
        );
    }
}
