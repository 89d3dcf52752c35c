//! What one supervisor was handed: the configurations a push session sent it,
//! or the snapshots a polling supervisor was served. A supervisor's report is
//! believed only for a configuration listed here, so a credential cannot end
//! an operation with a revision that was never delivered, or move the
//! applied revision to one it invented. Bounded: the last [`REMEMBERED`] of
//! each component.

use std::collections::VecDeque;

use openshell_proto::sandbox::v1 as sb;
use openshell_proto::v1 as pb;

use crate::operations::resolution::ReportedRevisions;

/// Configurations of each component remembered: enough for the ones in flight, the one
/// active, and the ones a retried apply may still name.
pub const REMEMBERED: usize = 16;

/// The `sandbox_config` part of a report: what a `sandbox_config` snapshot carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ConfigPart {
    policy_revision: u64,
    policy_hash: String,
    global_policy_revision: u64,
    global_settings_revision: u64,
    workspace_settings_revision: u64,
    sandbox_settings_revision: u64,
}

impl ConfigPart {
    fn of_report(r: &ReportedRevisions) -> Self {
        Self {
            policy_revision: r.policy_revision,
            policy_hash: r.policy_hash.clone(),
            global_policy_revision: r.global_policy_revision,
            global_settings_revision: r.global_settings_revision,
            workspace_settings_revision: r.workspace_settings_revision,
            sandbox_settings_revision: r.sandbox_settings_revision,
        }
    }

    /// A report about the provider environment alone names no configuration.
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The configurations handed to one supervisor, most recent last.
#[derive(Debug, Default, Clone)]
pub struct Handed {
    configs: VecDeque<ConfigPart>,
    environments: VecDeque<String>,
}

impl Handed {
    /// A `sandbox_config` served by poll.
    pub fn served(&mut self, snapshot: &sb::GetSandboxConfigResponse) {
        self.config(
            ConfigPart {
                policy_revision: snapshot.policy_revision,
                policy_hash: snapshot.policy_hash.clone(),
                global_policy_revision: snapshot.global_policy_revision,
                global_settings_revision: snapshot.global_settings_revision,
                workspace_settings_revision: snapshot.workspace_settings_revision,
                sandbox_settings_revision: snapshot.sandbox_settings_revision,
            },
            &snapshot.provider_env_fingerprint,
        );
    }

    /// A snapshot of either component sent on a push session (or in its bootstrap).
    pub fn sent(&mut self, update: &pb::ConfigUpdate) {
        match &update.snapshot {
            Some(pb::config_update::Snapshot::SandboxConfig(c)) => self.config(
                ConfigPart {
                    policy_revision: c.policy_revision,
                    policy_hash: c.policy_hash.clone(),
                    global_policy_revision: c.global_policy_revision,
                    global_settings_revision: c.global_settings_revision,
                    workspace_settings_revision: c.workspace_settings_revision,
                    sandbox_settings_revision: c.sandbox_settings_revision,
                },
                &c.provider_env_fingerprint,
            ),
            Some(pb::config_update::Snapshot::ProviderEnvironment(e)) => {
                self.environment(&e.provider_env_fingerprint);
            }
            None => {}
        }
    }

    /// A configuration, and the provider environment it names: a supervisor may report
    /// that one while it waits for it.
    fn config(&mut self, part: ConfigPart, expected_environment: &str) {
        remember(&mut self.configs, part);
        self.environment(expected_environment);
    }

    fn environment(&mut self, revision: &str) {
        if !revision.is_empty() {
            remember(&mut self.environments, revision.to_string());
        }
    }

    /// Whether every part of `report` was handed over (a part left empty claims nothing).
    pub fn vouches_for(&self, report: &ReportedRevisions) -> bool {
        let config = ConfigPart::of_report(report);
        let config_handed = config.is_empty() || self.configs.contains(&config);
        let env_handed = report.provider_env_revision.is_empty()
            || self.environments.contains(&report.provider_env_revision);
        config_handed && env_handed
    }
}

fn remember<T: PartialEq>(list: &mut VecDeque<T>, item: T) {
    if let Some(at) = list.iter().position(|known| *known == item) {
        list.remove(at);
    }
    if list.len() == REMEMBERED {
        list.pop_front();
    }
    list.push_back(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(policy_revision: u64, hash: &str) -> sb::GetSandboxConfigResponse {
        sb::GetSandboxConfigResponse {
            policy_revision,
            policy_hash: hash.into(),
            sandbox_settings_revision: 2,
            provider_env_fingerprint: "env-1".into(),
            ..Default::default()
        }
    }

    fn report(policy_revision: u64, hash: &str) -> ReportedRevisions {
        ReportedRevisions {
            policy_revision,
            policy_hash: hash.into(),
            sandbox_settings_revision: 2,
            provider_env_revision: "env-1".into(),
            ..ReportedRevisions::default()
        }
    }

    #[test]
    fn only_a_configuration_handed_over_is_vouched_for() {
        let mut handed = Handed::default();
        handed.served(&snapshot(2, "h2"));
        assert!(handed.vouches_for(&report(2, "h2")));
        // Another revision, or the right revision with an invented hash.
        assert!(!handed.vouches_for(&report(7, "h7")));
        assert!(!handed.vouches_for(&report(2, "forged")));
        // Other settings revisions than the ones sent.
        let mut settings = report(2, "h2");
        settings.sandbox_settings_revision = 3;
        assert!(!handed.vouches_for(&settings));
        // A provider environment never sent.
        let mut other_env = report(2, "h2");
        other_env.provider_env_revision = "env-9".into();
        assert!(!handed.vouches_for(&other_env));
        // A report of the provider environment alone.
        let env_only = ReportedRevisions {
            provider_env_revision: "env-1".into(),
            ..ReportedRevisions::default()
        };
        assert!(handed.vouches_for(&env_only));
        assert!(!Handed::default().vouches_for(&env_only));
    }

    #[test]
    fn a_pushed_update_is_handed_over_like_a_served_snapshot() {
        let mut handed = Handed::default();
        handed.sent(&pb::ConfigUpdate {
            snapshot: Some(pb::config_update::Snapshot::SandboxConfig(
                pb::SandboxConfigSnapshot::from_response(&snapshot(4, "h4")),
            )),
            ..Default::default()
        });
        assert!(handed.vouches_for(&report(4, "h4")));
        handed.sent(&pb::ConfigUpdate {
            snapshot: Some(pb::config_update::Snapshot::ProviderEnvironment(
                pb::GetSandboxProviderEnvironmentResponse {
                    provider_env_fingerprint: "env-2".into(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        });
        let mut with_new_env = report(4, "h4");
        with_new_env.provider_env_revision = "env-2".into();
        assert!(handed.vouches_for(&with_new_env));
    }

    #[test]
    fn the_oldest_configurations_are_forgotten_first() {
        let mut handed = Handed::default();
        for revision in 1..=(REMEMBERED as u64 + 1) {
            handed.served(&snapshot(revision, &format!("h{revision}")));
        }
        assert!(!handed.vouches_for(&report(1, "h1")));
        assert!(handed.vouches_for(&report(2, "h2")));
    }
}
