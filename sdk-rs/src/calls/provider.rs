//! Providers and their attachment to sandboxes.

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

use openshell_proto::v1 as pb;

use crate::retry::Idempotency;
use crate::timefmt::to_proto_timestamp;
use crate::types::{Attachment, Provider, ProviderWrite, Sandbox, SandboxRef};
use crate::{Client, SdkError};

/// A provider to create. `Debug` shows credential names, never values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProviderSpec {
    pub name: String,
    /// `None` means the gateway's default workspace.
    pub workspace: Option<String>,
    pub provider_type: String,
    /// Plain environment values.
    pub env: BTreeMap<String, String>,
    /// Secret values, encrypted at rest by the gateway and never returned.
    pub credentials: BTreeMap<String, String>,
    pub expires_at: Option<SystemTime>,
}

/// The complete new value set of an existing provider; it replaces the old set.
/// `Debug` shows credential names, never values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProviderUpdate {
    /// Provider id or name.
    pub provider: String,
    /// Workspace to resolve a name in; `None` means the default.
    pub workspace: Option<String>,
    pub env: BTreeMap<String, String>,
    pub credentials: BTreeMap<String, String>,
    /// `None` clears the expiry.
    pub expires_at: Option<SystemTime>,
}

impl fmt::Debug for ProviderSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSpec")
            .field("name", &self.name)
            .field("workspace", &self.workspace)
            .field("provider_type", &self.provider_type)
            .field("env", &self.env)
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl fmt::Debug for ProviderUpdate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderUpdate")
            .field("provider", &self.provider)
            .field("workspace", &self.workspace)
            .field("env", &self.env)
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Merges env and credentials into the wire's classified list; a name in
/// both would make the provider's environment ambiguous, so it is refused here.
fn values(
    env: &BTreeMap<String, String>,
    credentials: &BTreeMap<String, String>,
) -> Result<Vec<pb::ProviderValueInput>, SdkError> {
    if let Some(name) = env.keys().find(|k| credentials.contains_key(*k)) {
        return Err(SdkError::invalid(format!(
            "{name} is given both as an env value and as a credential"
        )));
    }
    let plain = env.iter().map(|(name, value)| pb::ProviderValueInput {
        name: name.clone(),
        value: value.clone(),
        class: pb::ValueClass::NonSecret.into(),
        expires_at: None,
    });
    let secret = credentials
        .iter()
        .map(|(name, value)| pb::ProviderValueInput {
            name: name.clone(),
            value: value.clone(),
            class: pb::ValueClass::Credential.into(),
            expires_at: None,
        });
    Ok(plain.chain(secret).collect())
}

fn provider_write(response: pb::ProviderWriteResponse) -> Result<ProviderWrite, SdkError> {
    Ok(ProviderWrite {
        provider: response
            .provider
            .ok_or_else(|| SdkError::missing("provider"))?
            .into(),
        operation: response.operation.map(Into::into),
    })
}

fn attachment(response: pb::AttachmentResponse) -> Result<Attachment, SdkError> {
    Ok(Attachment {
        sandbox: Sandbox::from(
            response
                .sandbox
                .ok_or_else(|| SdkError::missing("sandbox"))?,
        ),
        operation: response.operation.map(Into::into),
    })
}

impl Client {
    pub async fn create_provider(&self, spec: &ProviderSpec) -> Result<ProviderWrite, SdkError> {
        let request = pb::CreateProviderRequest {
            name: spec.name.clone(),
            workspace: spec.workspace.clone().unwrap_or_default(),
            r#type: spec.provider_type.clone(),
            values: values(&spec.env, &spec.credentials)?,
            expires_at: spec.expires_at.map(to_proto_timestamp),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.openshell.create_provider(r).await
            })
            .await?;
        provider_write(response)
    }

    /// Replaces a provider's values; attaching sandboxes receive the new environment.
    pub async fn update_provider(
        &self,
        update: &ProviderUpdate,
    ) -> Result<ProviderWrite, SdkError> {
        let request = pb::UpdateProviderRequest {
            provider: update.provider.clone(),
            workspace: update.workspace.clone().unwrap_or_default(),
            values: values(&update.env, &update.credentials)?,
            expires_at: update.expires_at.map(to_proto_timestamp),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.openshell.update_provider(r).await
            })
            .await?;
        provider_write(response)
    }

    /// Deletes a provider; the gateway refuses while a sandbox attaches it.
    pub async fn delete_provider(
        &self,
        provider: &str,
        workspace: Option<&str>,
    ) -> Result<(), SdkError> {
        let request = pb::DeleteProviderRequest {
            provider: provider.to_owned(),
            workspace: workspace.unwrap_or_default().to_owned(),
        };
        self.unary(Idempotency::Unsafe, request, |mut c, r| async move {
            c.openshell.delete_provider(r).await
        })
        .await?;
        Ok(())
    }

    pub async fn get_provider(
        &self,
        provider: &str,
        workspace: Option<&str>,
    ) -> Result<Provider, SdkError> {
        let request = pb::GetProviderRequest {
            provider: provider.to_owned(),
            workspace: workspace.unwrap_or_default().to_owned(),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.openshell.get_provider(r).await
            })
            .await?;
        Ok(response.into())
    }

    pub async fn list_providers(&self, workspace: Option<&str>) -> Result<Vec<Provider>, SdkError> {
        let request = pb::ListProvidersRequest {
            workspace: workspace.unwrap_or_default().to_owned(),
        };
        let response = self
            .unary(Idempotency::Safe, request, |mut c, r| async move {
                c.openshell.list_providers(r).await
            })
            .await?;
        Ok(response.providers.into_iter().map(Into::into).collect())
    }

    /// Attaches a provider (resolved in the sandbox's workspace) to a sandbox.
    pub async fn attach_provider(
        &self,
        sandbox: &SandboxRef,
        provider: &str,
    ) -> Result<Attachment, SdkError> {
        let request = pb::AttachProviderRequest {
            sandbox: Some(sandbox.to_proto()),
            provider: provider.to_owned(),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.plane.attach_provider(r).await
            })
            .await?;
        attachment(response)
    }

    pub async fn detach_provider(
        &self,
        sandbox: &SandboxRef,
        provider: &str,
    ) -> Result<Attachment, SdkError> {
        let request = pb::DetachProviderRequest {
            sandbox: Some(sandbox.to_proto()),
            provider: provider.to_owned(),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.plane.detach_provider(r).await
            })
            .await?;
        attachment(response)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_credential_values() {
        let spec = ProviderSpec {
            name: "gh".into(),
            provider_type: "github".into(),
            credentials: BTreeMap::from([("GITHUB_TOKEN".into(), "ghp_secret".into())]),
            ..Default::default()
        };
        let shown = format!("{spec:?}");
        assert!(shown.contains("GITHUB_TOKEN"));
        assert!(!shown.contains("ghp_secret"), "{shown}");
        let update = ProviderUpdate {
            provider: "gh".into(),
            credentials: spec.credentials.clone(),
            ..Default::default()
        };
        assert!(!format!("{update:?}").contains("ghp_secret"));
    }

    #[test]
    fn classifies_values_and_refuses_clashes() {
        let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let creds = BTreeMap::from([("B".to_string(), "s".to_string())]);
        let wire = values(&env, &creds).unwrap();
        assert_eq!(wire.len(), 2);
        assert_eq!(wire[0].class, pb::ValueClass::NonSecret as i32);
        assert_eq!(wire[1].class, pb::ValueClass::Credential as i32);

        let clash = BTreeMap::from([("A".to_string(), "s".to_string())]);
        let err = values(&env, &clash).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(!err.to_string().contains("\"s\""));
    }
}
