//! Several gateway processes, and what the scenarios that load or kill them need: replicas
//! of one PostgreSQL store (each with its own port and data directory, sharing the peer
//! secret and the credential key), a fleet whose supervisors each get every replica's
//! address, where each session is held now, a gateway's resident memory, and clients with
//! tokens other than the run's own.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use openshell_proto::v1 as pb;
use tonic::transport::Endpoint;

use super::prng::Prng;
use super::{ChaosConfig, Fleet, GatewayProcess, Member, Run, workload};
use crate::{Api, Backend, BearerToken, POLICY, TestStore};

/// Shared by the replicas of a run: with it they hint each other about writes.
pub const PEER_SECRET: &str = "chaos-replicas-share-this";
/// Shared by the replicas of a run: each opens the provider values another sealed (32
/// bytes, base64).
pub const CREDENTIAL_KEY: &str = "Y2hhb3MtcmVwbGljYXMtc2hhcmUtb25lLWtleS0zMiE=";

/// Starts `count` push-mode replicas, `replica-0` … , on one fresh PostgreSQL database.
pub async fn start_replicas(count: usize) -> Vec<GatewayProcess> {
    let url = crate::fresh_postgres_database().await;
    (0..count)
        .map(|n| {
            let store = TestStore {
                backend: Backend::Postgres,
                url: url.clone(),
                dir: tempfile::tempdir().unwrap(),
            };
            let extra = [
                "--replica-id".to_string(),
                format!("replica-{n}"),
                "--peer-secret".into(),
                PEER_SECRET.into(),
                "--credential-key".into(),
                CREDENTIAL_KEY.into(),
            ];
            GatewayProcess::start_with(store, &extra)
        })
        .collect()
}

/// Every address of `gateways`, comma-separated, starting at the `first`-th (modulo their
/// number): rotating the start per supervisor spreads the first connections.
pub fn addresses_from(gateways: &[&GatewayProcess], first: usize) -> String {
    let endpoints: Vec<String> = gateways.iter().map(|g| g.endpoint()).collect();
    let n = endpoints.len().max(1);
    (0..endpoints.len())
        .map(|i| endpoints[(first + i) % n].clone())
        .collect::<Vec<_>>()
        .join(",")
}

/// Sandbox id → index (in `gateways`) of the live gateway that lists its session. A gateway
/// lists only the sessions it holds itself; one that is down or does not answer lists none.
pub async fn sessions_by_gateway(gateways: &[&GatewayProcess]) -> HashMap<String, usize> {
    let mut held = HashMap::new();
    for (index, gateway) in gateways.iter().enumerate() {
        if !gateway.is_up() {
            continue;
        }
        let Ok(listed) = gateway
            .api()
            .list_sessions(pb::ListSessionsRequest {})
            .await
        else {
            continue;
        };
        for session in listed.into_inner().sessions {
            held.insert(session.sandbox_id, index);
        }
    }
    held
}

/// Waits until a live gateway of `gateways` lists a session of every sandbox in `ids`;
/// `Err` names the ones still missing at `deadline`.
pub async fn wait_sessions_listed(
    gateways: &[&GatewayProcess],
    ids: &[String],
    deadline: Duration,
) -> Result<HashMap<String, usize>, Vec<String>> {
    let start = tokio::time::Instant::now();
    loop {
        let held = sessions_by_gateway(gateways).await;
        let missing: Vec<String> = ids
            .iter()
            .filter(|id| !held.contains_key(*id))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(held);
        }
        if start.elapsed() > deadline {
            return Err(missing);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl GatewayProcess {
    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.guard.as_ref().map(|g| g.child.id())
    }

    /// Resident memory of the process now, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib_of(self.pid()?)
    }
}

/// Resident memory of process `pid` now (`VmRSS` of `/proc/PID/status`), in KiB.
pub fn rss_kib_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A client of the gateway at `endpoint` that authenticates with `token`, connecting lazily,
/// each call cut off after `timeout` (a server-side wait can be long; a call cut off is
/// retried with its key).
pub fn api_as(endpoint: &str, token: &str, timeout: Duration) -> Api {
    let channel = Endpoint::from_shared(endpoint.to_string())
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(timeout)
        .connect_lazy();
    crate::Api::new(channel, BearerToken(Some(token.into())))
}

impl Fleet {
    /// [`Fleet::start`] with each supervisor connecting where `endpoints(n)` says (one
    /// address, or several comma-separated), for its `n`-th sandbox.
    pub async fn start_each(
        api: &mut Api,
        root: &Path,
        count: usize,
        env: &[(String, String)],
        endpoints: impl Fn(usize) -> String,
    ) -> Self {
        let mut members = Vec::with_capacity(count);
        for n in 0..count {
            let name = format!("chaos-{n}");
            let (id, credential) = crate::create_sandbox(api, &name, POLICY).await;
            let mut member = Member {
                id,
                name: name.clone(),
                credential,
                dir: root.join(&name),
                supervisor: None,
                env: env.to_vec(),
            };
            member.start_supervisor(&endpoints(n));
            members.push(member);
        }
        Self { members }
    }
}

impl Run {
    /// A run on a `gateway` and a `fleet` the scenario started itself (the provider already
    /// created through [`workload::create_provider`]); the workload and the checker go
    /// through `gateway`.
    pub fn assemble(
        backend: Backend,
        config: ChaosConfig,
        gateway: GatewayProcess,
        fleet: Fleet,
    ) -> Self {
        let mut rng = Prng::new(config.seed);
        let workload_rng = rng.fork();
        Self {
            config,
            gateway,
            fleet,
            history: workload::SharedHistory::default(),
            rng,
            workload_rng,
            workload: None,
            backend,
            fanouts: 0,
            mounts: Vec::new(),
        }
    }
}
