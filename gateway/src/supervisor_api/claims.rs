//! What a supervisor may claim to run, checked before anything it says
//! reaches the store or an operation.
//!
//! Two rules, one place for every path a claim arrives by (a push session's
//! bootstrap result or `ConfigUpdateResult`, a poll-mode `ReportPolicyStatus`):
//!
//! - **Range**: every revision number fits the store's signed 64-bit columns.
//!   A larger one would be kept as a floating-point value by SQLite (and make
//!   every later read of the sandbox fail), or fail every retry of its
//!   statement on PostgreSQL. Identifiers are bounded in length.
//! - **Provenance**: the claimed configuration is one this gateway handed that
//!   supervisor. A supervisor credential could otherwise end an operation with
//!   a revision it never received, or move the applied revision backwards.

use openshell_core::Violation;
use openshell_proto::v1 as pb;

use crate::error::GatewayError;
use crate::metrics::{Metrics, ReasonLabel};
use crate::operations::resolution::ReportedRevisions;

/// Largest revision the store holds (its columns are signed 64-bit).
pub const MAX_REVISION: u64 = i64::MAX as u64;
/// Longest policy hash or provider environment revision accepted (a SHA-256 in hex is 64).
pub const MAX_IDENTIFIER_CHARS: usize = 128;

/// Reads the revisions a supervisor reports, refusing any that the store cannot hold.
/// `field` is the path of the message's revisions, as the refusal names it.
pub fn revisions(
    revisions: Option<&pb::AppliedRevisions>,
    field: &str,
) -> Result<ReportedRevisions, GatewayError> {
    let Some(r) = revisions else {
        return Ok(ReportedRevisions::default());
    };
    let mut violations = Vec::new();
    for (name, value) in [
        ("policy_revision", r.policy_revision),
        ("global_policy_revision", r.global_policy_revision),
        ("global_settings_revision", r.global_settings_revision),
        ("workspace_settings_revision", r.workspace_settings_revision),
        ("sandbox_settings_revision", r.sandbox_settings_revision),
    ] {
        if value > MAX_REVISION {
            violations.push(Violation::new(
                format!("{field}.{name}"),
                format!("{value} is above the largest revision, {MAX_REVISION}"),
            ));
        }
    }
    for (name, value) in [
        ("policy_hash", &r.policy_hash),
        ("provider_env_revision", &r.provider_env_revision),
    ] {
        let chars = value.chars().count();
        if chars > MAX_IDENTIFIER_CHARS {
            violations.push(Violation::new(
                format!("{field}.{name}"),
                format!("{chars} characters; at most {MAX_IDENTIFIER_CHARS}"),
            ));
        }
    }
    if !violations.is_empty() {
        return Err(GatewayError::from_violations(violations));
    }
    Ok(ReportedRevisions {
        policy_revision: r.policy_revision,
        policy_hash: r.policy_hash.clone(),
        global_policy_revision: r.global_policy_revision,
        global_settings_revision: r.global_settings_revision,
        workspace_settings_revision: r.workspace_settings_revision,
        sandbox_settings_revision: r.sandbox_settings_revision,
        provider_env_revision: r.provider_env_revision.clone(),
    })
}

/// Counts a refused report by why: `out_of_range` or `never_sent`.
pub fn count_refused(metrics: &Metrics, reason: &'static str) {
    metrics
        .refused_claims
        .get_or_create(&ReasonLabel { reason })
        .inc();
}

/// The refusal of a claim no one vouches for; names what was claimed, never a value.
pub fn unhanded(claim: &ReportedRevisions, sandbox_id: &str) -> String {
    format!(
        "the reported configuration (policy revision {}, hash {:.16}, settings revisions {}/{}/{}, provider environment {:.16}) was never sent to sandbox {sandbox_id}",
        claim.policy_revision,
        claim.policy_hash,
        claim.global_settings_revision,
        claim.workspace_settings_revision,
        claim.sandbox_settings_revision,
        claim.provider_env_revision,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn applied(policy_revision: u64, hash: &str) -> pb::AppliedRevisions {
        pb::AppliedRevisions {
            policy_revision,
            policy_hash: hash.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_revision_above_the_stores_range_is_refused_by_its_field() {
        let mut claim = applied(MAX_REVISION, "h");
        assert!(revisions(Some(&claim), "revisions").is_ok());
        claim.policy_revision = MAX_REVISION + 1;
        claim.sandbox_settings_revision = u64::MAX;
        let status = tonic::Status::from(revisions(Some(&claim), "revisions").unwrap_err());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("revisions.policy_revision"),
            "{}",
            status.message()
        );
        assert!(
            status.message().contains("2 problems"),
            "{}",
            status.message()
        );
    }

    #[test]
    fn an_overlong_hash_is_refused() {
        let claim = applied(1, &"a".repeat(MAX_IDENTIFIER_CHARS + 1));
        let status = tonic::Status::from(revisions(Some(&claim), "r").unwrap_err());
        assert!(
            status.message().contains("r.policy_hash"),
            "{}",
            status.message()
        );
    }
}
