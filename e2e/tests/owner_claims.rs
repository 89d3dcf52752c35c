//! Session-owner claims go through one group-commit task: claims queued
//! together commit together, in order, each raising its sandbox's epoch.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use openshell_e2e::{Backend, POLICY, TestGateway, create_sandbox};
use openshell_gateway::store::OwnerClaim;

fn claim(sandbox_id: &str, session_id: &str) -> OwnerClaim {
    OwnerClaim {
        sandbox_id: sandbox_id.to_string(),
        replica_id: "replica-a".into(),
        session_id: session_id.to_string(),
        supervisor_version: "test".into(),
        protocol_revision: 1,
        mode: "push",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_queued_together_raise_each_sandboxs_epoch_in_order() {
    for backend in Backend::ALL {
        let gw = TestGateway::start(backend).await;
        let mut api = gw.api().await;
        let (first, _) = create_sandbox(&mut api, "first", POLICY).await;
        let (second, _) = create_sandbox(&mut api, "second", POLICY).await;
        let claims = gw.state().owner_claims.clone();
        // join_all polls, and so queues, the claims in this order.
        let epochs = futures::future::join_all([
            claims.claim(claim(&first, "ss-1")),
            claims.claim(claim(&second, "ss-2")),
            claims.claim(claim(&first, "ss-3")),
        ])
        .await;
        let epochs: Vec<u64> = epochs.into_iter().map(Result::unwrap).collect();
        assert_eq!(epochs, vec![1, 1, 2], "{backend:?}");
        let owner = gw
            .state()
            .store
            .session_owner(&first)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((owner.session_id.as_str(), owner.epoch), ("ss-3", 2));
        let owner = gw
            .state()
            .store
            .session_owner(&second)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((owner.session_id.as_str(), owner.epoch), ("ss-2", 1));
    }
}
