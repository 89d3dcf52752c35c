//! Seed corpora of the targets whose inputs are encoded frames or carry a selector byte
//! (`settings`, `supervisor_push`, `gateway_session`): built from the repository's example and
//! accepted policy corpus. A target started with `OPENSHELL_FUZZ_SEEDS=DIR` writes its seeds
//! there and exits (`scripts/fuzz.sh` does this before fuzzing); the text targets (`policy`,
//! `cli_parsers`) are seeded by the script from the repository's files directly.

use std::path::{Path, PathBuf};

use openshell_core::SandboxPolicy;
use openshell_core::settings::{Scope, registry};
use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1::{self as pb, config_update::Snapshot};
use prost::Message;

use crate::{SANDBOX_ID, SANDBOX_NAME, join};

/// Environment variable naming the directory to write seeds to.
pub const SEEDS_VAR: &str = "OPENSHELL_FUZZ_SEEDS";

/// When [`SEEDS_VAR`] is set, writes `target`'s seeds into that directory and exits.
pub fn write_if_asked(target: &str) {
    let Some(dir) = std::env::var_os(SEEDS_VAR) else {
        return;
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let seeds = match target {
        "settings" => settings_seeds(),
        "supervisor_push" => push_seeds(&policies(&repo)),
        "gateway_session" => session_seeds(&policies(&repo)),
        _ => Vec::new(),
    };
    let written = write_all(Path::new(&dir), seeds);
    println!("{target}: wrote {written} seeds");
    std::process::exit(0);
}

fn write_all(dir: &Path, seeds: Vec<Vec<u8>>) -> usize {
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    for (i, seed) in seeds.iter().enumerate() {
        let path = dir.join(format!("seed-{i:03}"));
        if let Err(e) = std::fs::write(&path, seed) {
            eprintln!("cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
    }
    seeds.len()
}

/// The valid policies of the example and of a handful of the accepted corpus, as text.
fn policies(repo: &Path) -> Vec<String> {
    let mut texts = vec!["version: 1\n".to_string()];
    if let Ok(text) = std::fs::read_to_string(repo.join("examples/policy.yaml")) {
        texts.push(text);
    }
    let mut corpus: Vec<PathBuf> = std::fs::read_dir(repo.join("core/tests/corpus/accepted"))
        .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    corpus.sort();
    // Every seventh: the bootstrap seeds stay few, the variety of the corpus is kept.
    texts.extend(
        corpus
            .iter()
            .step_by(7)
            .filter_map(|p| std::fs::read_to_string(p).ok()),
    );
    texts
        .into_iter()
        .filter(|t| openshell_core::parse_and_validate(t).is_ok())
        .collect()
}

fn settings_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for (i, def) in registry().iter().enumerate() {
        let scope = u8::try_from(i % Scope::ALL.len()).unwrap_or(0);
        for raw in [
            def.default,
            "",
            " true ",
            "-1",
            "99999999999999999999",
            "\u{7f}x",
        ] {
            let mut seed = vec![scope];
            seed.extend_from_slice(format!("{}={raw}", def.key).as_bytes());
            seeds.push(seed);
        }
    }
    seeds.push(b"\x00no_such_key=1".to_vec());
    seeds
}

fn sandbox_config(
    policy: &SandboxPolicy,
    revision: u64,
    env: &str,
) -> sb::GetSandboxConfigResponse {
    sb::GetSandboxConfigResponse {
        sandbox_id: SANDBOX_ID.into(),
        version: u32::try_from(revision).unwrap_or(u32::MAX),
        policy_revision: revision,
        policy_hash: policy.policy_hash(),
        policy: Some(sb::SandboxPolicy::from(policy)),
        provider_env_fingerprint: env.into(),
        settings: [(
            "policy_validation_failure_mode".to_string(),
            sb::EffectiveSetting {
                value: Some(sb::SettingValue {
                    value: Some(sb::setting_value::Value::StringValue(
                        "retain_last_valid".into(),
                    )),
                }),
                scope: sb::SettingScope::Sandbox as i32,
            },
        )]
        .into(),
        ..Default::default()
    }
}

fn provider_env(env: &str) -> pb::GetSandboxProviderEnvironmentResponse {
    pb::GetSandboxProviderEnvironmentResponse {
        sandbox_id: SANDBOX_ID.into(),
        provider_env_fingerprint: env.into(),
        environment: [("GITHUB_HOST".to_string(), "github.example".to_string())].into(),
        ..Default::default()
    }
}

fn config_update(seq: u64, config: &sb::GetSandboxConfigResponse) -> pb::ConfigUpdate {
    pb::ConfigUpdate {
        delivery_id: seq,
        sequence: seq,
        component: pb::ConfigComponent::SandboxConfig as i32,
        fingerprint: String::new(),
        snapshot: Some(Snapshot::SandboxConfig(
            pb::SandboxConfigSnapshot::from_response(config),
        )),
    }
}

fn env_update(seq: u64, env: &str) -> pb::ConfigUpdate {
    pb::ConfigUpdate {
        delivery_id: seq,
        sequence: seq,
        component: pb::ConfigComponent::ProviderEnvironment as i32,
        fingerprint: String::new(),
        snapshot: Some(Snapshot::ProviderEnvironment(provider_env(env))),
    }
}

fn gateway(payload: pb::gateway_message::Payload) -> Vec<u8> {
    pb::GatewayMessage {
        payload: Some(payload),
    }
    .encode_to_vec()
}

fn push_seeds(policies: &[String]) -> Vec<Vec<u8>> {
    use pb::gateway_message::Payload as P;
    let parsed: Vec<SandboxPolicy> = policies
        .iter()
        .filter_map(|t| openshell_core::parse_and_validate(t).ok())
        .collect();
    let mut seeds = Vec::new();
    for (i, policy) in parsed.iter().enumerate() {
        let next = &parsed[(i + 1) % parsed.len()];
        let accepted = P::SessionAccepted(pb::SessionAccepted {
            session_id: "ss-fuzz".into(),
            config_push_enabled: true,
            config_apply_enabled: true,
            bootstrap_config: Some(config_update(1, &sandbox_config(policy, 1, "e1"))),
            bootstrap_provider_environment: Some(env_update(2, "e1")),
            heartbeat_interval_ms: 1000,
            ..Default::default()
        });
        seeds.push(join(&[
            gateway(P::StartupCandidate(pb::StartupConfigCandidate {
                origin: "image".into(),
                policy: policies[i % policies.len()].clone(),
            })),
            gateway(accepted),
            gateway(P::ConfigUpdate(config_update(
                3,
                &sandbox_config(next, 2, "e1"),
            ))),
            gateway(P::ConfigUpdate(env_update(4, "e2"))),
            gateway(P::ConfigUpdate(config_update(
                5,
                &sandbox_config(next, 3, "e2"),
            ))),
            gateway(P::Heartbeat(pb::GatewayHeartbeat::default())),
            gateway(P::ConfigUpdate(config_update(
                5,
                &sandbox_config(policy, 4, "e2"),
            ))),
        ]));
    }
    seeds
}

fn supervisor(payload: pb::supervisor_message::Payload) -> Vec<u8> {
    pb::SupervisorMessage {
        payload: Some(payload),
    }
    .encode_to_vec()
}

fn session_seeds(policies: &[String]) -> Vec<Vec<u8>> {
    use pb::supervisor_message::Payload as P;
    let hello = |sandbox: &str, revision: u32, apply: bool, image_policy: &str| {
        supervisor(P::Hello(pb::SupervisorHello {
            sandbox_id: sandbox.into(),
            instance_id: "fuzz-instance".into(),
            protocol_revision: revision,
            supervisor_version: "0.1.0".into(),
            supports_config_snapshots: revision > 0,
            supports_config_apply: apply,
            image_policy: image_policy.into(),
            local_policy_override: false,
        }))
    };
    let revisions = pb::AppliedRevisions {
        policy_revision: 1,
        policy_hash: String::new(),
        provider_env_revision: "e1".into(),
        ..Default::default()
    };
    let bootstrap = |applied: bool| {
        supervisor(P::BootstrapResult(pb::BootstrapResult {
            applied,
            revisions: Some(revisions.clone()),
            reason: if applied {
                String::new()
            } else {
                "refused".into()
            },
            kept_last_known_good: !applied,
            policy_rejected: false,
        }))
    };
    let ack = |delivery_id: u64, status: pb::ConfigApplyStatus| {
        supervisor(P::ConfigUpdateResult(pb::ConfigUpdateResult {
            delivery_id,
            component: pb::ConfigComponent::SandboxConfig as i32,
            revisions: Some(revisions.clone()),
            status: status as i32,
            reason: String::new(),
            failed_closed: false,
        }))
    };
    let readiness = supervisor(P::RuntimeReadiness(pb::RuntimeReadiness {
        workload_started: true,
        middlewares: vec![pb::MiddlewareReadiness {
            name: "guard".into(),
            implementation: "remote".into(),
            endpoint: "http://127.0.0.1:9".into(),
            reachable: false,
            fail_closed: true,
            error: "connection refused".into(),
        }],
    }));
    let heartbeat = supervisor(P::Heartbeat(pb::SupervisorHeartbeat::default()));
    let prepared = |result: pb::startup_config_prepared::Result| {
        supervisor(P::StartupPrepared(pb::StartupConfigPrepared {
            result: Some(result),
        }))
    };
    use pb::startup_config_prepared::Result as R;
    let mut seeds = vec![
        join(&[
            hello(SANDBOX_ID, 1, true, ""),
            bootstrap(true),
            readiness.clone(),
            ack(3, pb::ConfigApplyStatus::Applied),
            ack(4, pb::ConfigApplyStatus::Failed),
            heartbeat.clone(),
        ]),
        join(&[
            hello(SANDBOX_NAME, 1, true, ""),
            bootstrap(false),
            heartbeat.clone(),
        ]),
        join(&[
            hello(SANDBOX_ID, 1, false, ""),
            readiness,
            heartbeat.clone(),
        ]),
        join(&[hello(SANDBOX_ID, 0, false, ""), heartbeat.clone()]),
        join(&[hello("sb-unknown", 1, true, "")]),
        join(&[heartbeat.clone()]),
    ];
    for (i, policy) in policies.iter().enumerate().take(4) {
        let answer = match i % 3 {
            0 => R::Unchanged(true),
            1 => R::PreparedPolicy(policy.clone()),
            _ => R::Failure("cannot run here".into()),
        };
        seeds.push(join(&[
            hello(SANDBOX_ID, 1, true, policy),
            heartbeat.clone(),
            prepared(answer),
            bootstrap(true),
        ]));
    }
    seeds
}
