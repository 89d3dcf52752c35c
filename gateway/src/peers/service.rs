//! The peer service: another replica's hint that configuration changed
//! marks the sessions it concerns, as a local publication would.

use openshell_proto::v1::gateway_peer_server::GatewayPeer;
use openshell_proto::v1::{
    PeerNotifyConfigUpdateRequest, PeerNotifyConfigUpdateResponse, PeerNotifyResult, PeerScope,
};
use tonic::{Request, Response, Status};

use super::PeerContext;
use crate::config::DeliveryMode;
use crate::crypto::constant_time_eq;
use crate::delivery::{Component, Lane, Mark, Publication, PublicationScope};

/// Longest scope id a hint may name.
const MAX_SCOPE_ID_BYTES: usize = 256;

pub struct PeerApi {
    state: PeerContext,
}

impl PeerApi {
    pub fn new(state: PeerContext) -> Self {
        Self { state }
    }

    fn authenticate(&self, presented: &str) -> Result<(), Status> {
        let Some(secret) = &self.state.config.peer_secret else {
            return Err(Status::failed_precondition(
                "this replica takes no peer hints: it runs without a peer secret (--peer-secret)",
            ));
        };
        if constant_time_eq(secret.expose().as_bytes(), presented.as_bytes()) {
            Ok(())
        } else {
            Err(Status::unauthenticated("peer secret is not valid"))
        }
    }
}

/// The components a hint names; every one must be known.
fn parse_components(names: &[String]) -> Result<Vec<Component>, Status> {
    if names.is_empty() {
        return Err(Status::invalid_argument(
            "components: empty; expected sandbox_config and/or provider_environment",
        ));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            Component::ALL
                .into_iter()
                .find(|c| c.as_str() == name)
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "components[{i}]: unknown component {name:?}; expected sandbox_config or provider_environment"
                    ))
                })
        })
        .collect()
}

fn scope_of(request: &PeerNotifyConfigUpdateRequest) -> Result<PublicationScope, Status> {
    let id = request.scope_id.clone();
    if id.len() > MAX_SCOPE_ID_BYTES {
        return Err(Status::invalid_argument(format!(
            "scope_id: {} bytes, more than the {MAX_SCOPE_ID_BYTES} allowed",
            id.len()
        )));
    }
    let scope = PeerScope::try_from(request.scope).unwrap_or(PeerScope::Unspecified);
    let needs_id = |scope| {
        if id.is_empty() {
            Err(Status::invalid_argument(format!(
                "scope_id: empty; a {scope} hint names its {scope}"
            )))
        } else {
            Ok(id.clone())
        }
    };
    match scope {
        PeerScope::Sandbox => Ok(PublicationScope::Sandbox(needs_id("sandbox")?)),
        PeerScope::Provider => Ok(PublicationScope::Provider(needs_id("provider")?)),
        PeerScope::Workspace => Ok(PublicationScope::Workspace(needs_id("workspace")?)),
        PeerScope::Global => Ok(PublicationScope::Global),
        PeerScope::Unspecified => Err(Status::invalid_argument(
            "scope: unspecified; expected sandbox, provider, workspace or global",
        )),
    }
}

#[tonic::async_trait]
impl GatewayPeer for PeerApi {
    async fn peer_notify_config_update(
        &self,
        request: Request<PeerNotifyConfigUpdateRequest>,
    ) -> Result<Response<PeerNotifyConfigUpdateResponse>, Status> {
        let request = request.into_inner();
        self.authenticate(&request.peer_secret)?;
        let components = parse_components(&request.components)?;
        let scope = scope_of(&request)?;
        let result = if self.state.config.config_delivery_mode == DeliveryMode::Poll {
            // Its supervisors poll: there is nothing to push to.
            PeerNotifyResult::UnsupportedPeer
        } else if let PublicationScope::Sandbox(sandbox_id) = &scope {
            match self.state.publisher.get(sandbox_id) {
                None => PeerNotifyResult::NoSession,
                Some(delivery)
                    if !request.session_id.is_empty()
                        && delivery.session_id != request.session_id =>
                {
                    PeerNotifyResult::StaleOwner
                }
                Some(delivery) => {
                    delivery.mark(Mark::new(&components, Lane::Sandbox), true);
                    PeerNotifyResult::Delivered
                }
            }
        } else {
            let publication = Publication { scope, components };
            // Published here only: a hint is never passed on.
            let marked = self
                .state
                .publisher
                .publish(&self.state.store, &publication)
                .await;
            if marked == 0 {
                PeerNotifyResult::NoSession
            } else {
                PeerNotifyResult::Delivered
            }
        };
        tracing::debug!(
            from = %request.from_replica,
            scope = request.scope,
            scope_id = %request.scope_id,
            result = result.as_str_name(),
            "peer hint"
        );
        Ok(Response::new(PeerNotifyConfigUpdateResponse {
            result: result as i32,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn request(scope: PeerScope, scope_id: &str) -> PeerNotifyConfigUpdateRequest {
        PeerNotifyConfigUpdateRequest {
            scope: scope as i32,
            scope_id: scope_id.into(),
            ..Default::default()
        }
    }

    #[test]
    fn hints_name_known_components_and_a_scope() {
        assert_eq!(
            parse_components(&["provider_environment".into(), "sandbox_config".into()]).unwrap(),
            vec![Component::ProviderEnvironment, Component::SandboxConfig]
        );
        let unknown = parse_components(&["sandbox_config".into(), "policy".into()]).unwrap_err();
        assert!(
            unknown
                .message()
                .starts_with("components[1]: unknown component \"policy\"")
        );
        assert!(
            parse_components(&[])
                .unwrap_err()
                .message()
                .starts_with("components: empty")
        );

        assert_eq!(
            scope_of(&request(PeerScope::Sandbox, "sb-1")).unwrap(),
            PublicationScope::Sandbox("sb-1".into())
        );
        assert_eq!(
            scope_of(&request(PeerScope::Global, "")).unwrap(),
            PublicationScope::Global
        );
        let no_id = scope_of(&request(PeerScope::Workspace, "")).unwrap_err();
        assert_eq!(
            no_id.message(),
            "scope_id: empty; a workspace hint names its workspace"
        );
        let long = scope_of(&request(PeerScope::Sandbox, &"x".repeat(300))).unwrap_err();
        assert!(
            long.message().contains("more than the 256 allowed"),
            "{}",
            long.message()
        );
        let unspecified = scope_of(&request(PeerScope::Unspecified, "sb-1")).unwrap_err();
        assert!(unspecified.message().starts_with("scope: unspecified"));
    }
}
