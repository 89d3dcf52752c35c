//! `Debug` for the messages that carry credentials, so logging a request,
//! a response or a snapshot can never print one.

use std::fmt;

use crate::v1;

const HIDDEN: &str = "***";

impl fmt::Debug for v1::ProviderValueInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credential = self.class == v1::ValueClass::Credential as i32;
        f.debug_struct("ProviderValueInput")
            .field("name", &self.name)
            .field(
                "value",
                &if credential {
                    HIDDEN
                } else {
                    self.value.as_str()
                },
            )
            .field("class", &self.class)
            .finish()
    }
}

impl fmt::Debug for v1::EnvValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credential = self.class == v1::ValueClass::Credential as i32;
        f.debug_struct("EnvValue")
            .field("name", &self.name)
            .field(
                "value",
                &if credential {
                    HIDDEN
                } else {
                    self.value.as_str()
                },
            )
            .field("class", &self.class)
            .field("provider", &self.provider)
            .finish()
    }
}

impl fmt::Debug for v1::SupervisorIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SupervisorIdentity")
            .field("sandbox_id", &self.sandbox_id)
            .field("credential", &HIDDEN)
            .finish()
    }
}

impl fmt::Debug for v1::CreateSandboxResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateSandboxResponse")
            .field("sandbox", &self.sandbox)
            .field("supervisor_credential", &HIDDEN)
            .field("operation", &self.operation)
            .finish()
    }
}

impl fmt::Debug for v1::PeerNotifyConfigUpdateRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerNotifyConfigUpdateRequest")
            .field("scope", &self.scope)
            .field("scope_id", &self.scope_id)
            .field("session_id", &self.session_id)
            .field("components", &self.components)
            .field("from_replica", &self.from_replica)
            .field("peer_secret", &HIDDEN)
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show_in_debug() {
        let secret = "sk-live-do-not-print";
        let request = v1::CreateProviderRequest {
            name: "gh".into(),
            values: vec![
                v1::ProviderValueInput {
                    name: "TOKEN".into(),
                    value: secret.into(),
                    class: v1::ValueClass::Credential as i32,
                },
                v1::ProviderValueInput {
                    name: "ORG".into(),
                    value: "acme".into(),
                    class: v1::ValueClass::NonSecret as i32,
                },
            ],
            ..Default::default()
        };
        let snapshot = v1::ProviderEnvironmentSnapshot {
            values: vec![v1::EnvValue {
                name: "TOKEN".into(),
                value: secret.into(),
                class: v1::ValueClass::Credential as i32,
                provider: "gh".into(),
            }],
            ..Default::default()
        };
        let identity = v1::SupervisorIdentity {
            sandbox_id: "sb-1".into(),
            credential: secret.into(),
        };
        let created = v1::CreateSandboxResponse {
            supervisor_credential: secret.into(),
            ..Default::default()
        };
        for text in [
            format!("{request:?}"),
            format!("{snapshot:#?}"),
            format!("{identity:?}"),
            format!("{created:?}"),
        ] {
            assert!(!text.contains(secret), "{text}");
        }
        // Plain values stay visible: they help debugging.
        assert!(format!("{request:?}").contains("acme"));
    }
}
