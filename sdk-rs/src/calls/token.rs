//! Operator tokens kept by the gateway: create (the secret is returned
//! once), list (never a secret) and revoke.

use openshell_proto::v1 as pb;

use crate::retry::Idempotency;
use crate::types::{CreatedToken, TokenInfo, TokenRole, TokenSecret};
use crate::{Client, SdkError};

impl Client {
    /// Creates a token of `role`, limited to `workspace` when given. The
    /// result holds the secret, the only copy.
    pub async fn create_token(
        &self,
        name: &str,
        role: TokenRole,
        workspace: Option<&str>,
    ) -> Result<CreatedToken, SdkError> {
        let request = pb::CreateTokenRequest {
            name: name.to_owned(),
            role: role.into(),
            workspace: workspace.unwrap_or_default().to_owned(),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.plane.create_token(r).await
            })
            .await?;
        Ok(CreatedToken {
            token: response
                .token
                .ok_or_else(|| SdkError::missing("token"))?
                .into(),
            secret: TokenSecret::new(response.secret),
        })
    }

    /// Lists the configured and the stored tokens, without their secrets.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>, SdkError> {
        let response = self
            .unary(
                Idempotency::Safe,
                pb::ListTokensRequest {},
                |mut c, r| async move { c.plane.list_tokens(r).await },
            )
            .await?;
        Ok(response.tokens.into_iter().map(Into::into).collect())
    }

    /// Revokes a stored token; its next call fails `UNAUTHENTICATED`.
    pub async fn revoke_token(&self, name: &str) -> Result<TokenInfo, SdkError> {
        let request = pb::RevokeTokenRequest {
            name: name.to_owned(),
        };
        let response = self
            .unary(Idempotency::Unsafe, request, |mut c, r| async move {
                c.plane.revoke_token(r).await
            })
            .await?;
        Ok(response
            .token
            .ok_or_else(|| SdkError::missing("token"))?
            .into())
    }
}
