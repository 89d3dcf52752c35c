//! The pushed `sandbox_config` snapshot and upstream's `GetSandboxConfigResponse`
//! are one wire shape; only the Rust types differ (the policy as shared bytes, or
//! as a message tree). Converting is re-reading the same bytes.

use prost::Message;

use crate::sandbox::v1 as sb;
use crate::v1;

impl v1::SandboxConfigSnapshot {
    /// This snapshot as upstream's message, the policy decoded. Only the policy is read
    /// again: re-reading the whole encoding cost a supervisor a tenth of its CPU in a
    /// fanout, most of it on the fields that need no decoding.
    pub fn to_response(&self) -> Result<sb::GetSandboxConfigResponse, prost::DecodeError> {
        let policy = if self.policy.is_empty() {
            // An empty embedded message is not written, so the bytes of the whole
            // snapshot read as upstream's message have no policy.
            None
        } else {
            Some(sb::SandboxPolicy::decode(self.policy.clone())?)
        };
        Ok(sb::GetSandboxConfigResponse {
            policy,
            ..self.to_response_without_policy()
        })
    }

    /// Upstream's message with every field of this snapshot but the policy, for a reader
    /// that keeps the policy apart (a supervisor shares one decoded policy between the
    /// snapshots that carry the same bytes). Every field is named (no `..`), so a field
    /// added to upstream's message fails to compile here, and one added to the snapshot
    /// alone fails the wire-shape test below.
    pub fn to_response_without_policy(&self) -> sb::GetSandboxConfigResponse {
        sb::GetSandboxConfigResponse {
            policy: None,
            version: self.version,
            policy_hash: self.policy_hash.clone(),
            settings: self.settings.clone(),
            config_revision: self.config_revision,
            policy_source: self.policy_source,
            global_policy_version: self.global_policy_version,
            provider_env_revision: self.provider_env_revision,
            supervisor_middleware_services: self.supervisor_middleware_services.clone(),
            workspace: self.workspace.clone(),
            policy_validation_failure_mode: self.policy_validation_failure_mode.clone(),
            sandbox_id: self.sandbox_id.clone(),
            policy_revision: self.policy_revision,
            global_policy_revision: self.global_policy_revision,
            global_settings_revision: self.global_settings_revision,
            workspace_settings_revision: self.workspace_settings_revision,
            sandbox_settings_revision: self.sandbox_settings_revision,
            provider_env_fingerprint: self.provider_env_fingerprint.clone(),
            built_at: self.built_at,
        }
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
    /// or typed differently, changes the bytes and fails here; and `to_response` gives
    /// what reading the snapshot's bytes as upstream's message gives.
    #[test]
    fn the_snapshot_and_upstreams_response_are_one_wire_shape() {
        let response = full_response();
        let snapshot = v1::SandboxConfigSnapshot::from_response(&response);
        assert!(!snapshot.policy.is_empty());
        assert_eq!(snapshot.encode_to_vec(), response.encode_to_vec());
        assert_eq!(snapshot.to_response().unwrap(), response);
        // What the bytes of the whole snapshot say upstream's message is, with and
        // without a policy.
        let reread = |s: &v1::SandboxConfigSnapshot| {
            sb::GetSandboxConfigResponse::decode(s.encode_to_vec().as_slice()).unwrap()
        };
        assert_eq!(snapshot.to_response().unwrap(), reread(&snapshot));
        let no_policy = v1::SandboxConfigSnapshot {
            policy: prost::bytes::Bytes::new(),
            ..snapshot.clone()
        };
        assert_eq!(no_policy.to_response().unwrap(), reread(&no_policy));
        assert_eq!(no_policy.to_response().unwrap().policy, None);
        let torn_policy = v1::SandboxConfigSnapshot {
            policy: snapshot.policy.slice(..snapshot.policy.len() - 1),
            ..snapshot.clone()
        };
        assert!(torn_policy.to_response().is_err());
        assert!(
            sb::GetSandboxConfigResponse::decode(torn_policy.encode_to_vec().as_slice()).is_err()
        );
        assert_eq!(
            sb::SandboxPolicy::decode(snapshot.policy.clone()).unwrap(),
            response.policy.clone().unwrap()
        );
        let without_policy = sb::GetSandboxConfigResponse {
            policy: None,
            ..response.clone()
        };
        assert_eq!(snapshot.to_response_without_policy(), without_policy);
    }
}
