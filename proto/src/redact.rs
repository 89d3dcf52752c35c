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
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Names every variable and where it comes from; never a value, since the
/// environment holds the provider credentials.
impl fmt::Debug for v1::GetSandboxProviderEnvironmentResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.environment.keys().map(String::as_str).collect();
        f.debug_struct("GetSandboxProviderEnvironmentResponse")
            .field("environment", &format_args!("{names:?} (values {HIDDEN})"))
            .field("provider_env_revision", &self.provider_env_revision)
            .field("credential_expires_at_ms", &self.credential_expires_at_ms)
            .field("sandbox_id", &self.sandbox_id)
            .field("provider_env_fingerprint", &self.provider_env_fingerprint)
            .field("attachment_epoch", &self.attachment_epoch)
            .field("sources", &self.sources)
            .field("expires_at", &self.expires_at)
            .field("built_at", &self.built_at)
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

impl fmt::Debug for v1::CreateTokenResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateTokenResponse")
            .field("token", &self.token)
            .field("secret", &HIDDEN)
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
                    expires_at: None,
                },
                v1::ProviderValueInput {
                    name: "ORG".into(),
                    value: "acme".into(),
                    class: v1::ValueClass::NonSecret as i32,
                    expires_at: None,
                },
            ],
            ..Default::default()
        };
        let snapshot = v1::GetSandboxProviderEnvironmentResponse {
            environment: [("TOKEN".to_string(), secret.to_string())].into(),
            ..Default::default()
        };
        let created = v1::CreateSandboxResponse {
            supervisor_credential: secret.into(),
            ..Default::default()
        };
        let token = v1::CreateTokenResponse {
            secret: secret.into(),
            ..Default::default()
        };
        for text in [
            format!("{request:?}"),
            format!("{snapshot:#?}"),
            format!("{created:?}"),
            format!("{token:?}"),
        ] {
            assert!(!text.contains(secret), "{text}");
        }
        // Plain values stay visible: they help debugging.
        assert!(format!("{request:?}").contains("acme"));
        // Variable names stay visible too.
        assert!(format!("{snapshot:?}").contains("TOKEN"));
    }
}
