//! The one place where operations are resolved from what a supervisor
//! reports, whatever the transport (poll `ReportPolicyStatus` or push ack).
//!
//! A sandbox operation is APPLIED when the reported revisions equal its
//! exact `(policy_revision, settings_revision)` tuple, SUPERSEDED when the
//! report is newer in one part and not older in any, and stays live when the
//! report is older. A sandbox policy write is also SUPERSEDED when the report
//! carries a newer global policy revision than the write saw: the global
//! policy set (or cleared) since decides which policy runs, not the write.
//! Fleet targets follow the same rule with their scope's revisions: APPLIED
//! at their exact revisions, SUPERSEDED when a later write to the scope
//! reached the supervisor first.

use serde::{Deserialize, Serialize};

use std::collections::HashMap;

use crate::error::{GatewayError, Result};
use crate::store::{
    Backend, LastReport, Lifecycle, LiveTarget, OperationRecord, OperationState, Outcome,
    ReportRow, RoundInputs, Store, TargetKind, WriteTx,
};

/// Longest error text stored on an operation.
pub const MAX_ERROR_BYTES: usize = 1024;

/// What the supervisor says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReportStatus {
    /// The reported revisions are active.
    Applied,
    /// The reported revisions were rejected; last-known-good stays active.
    Failed { failed_closed: bool },
    /// Settings and provider environment are active; a local policy file keeps precedence.
    RetainedLocalOverride,
    /// Settings and provider environment are active; the policy of the reported revisions
    /// was rejected and the last-known-good policy stays in effect (the reason says which
    /// revision was rejected and why).
    RetainedRejectedPolicy,
}

impl ReportStatus {
    /// The status as kept with a sandbox's last report.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "APPLIED" => Self::Applied,
            "FAILED" => Self::Failed {
                failed_closed: false,
            },
            "FAILED_CLOSED" => Self::Failed {
                failed_closed: true,
            },
            "RETAINED_LOCAL_OVERRIDE" => Self::RetainedLocalOverride,
            "RETAINED_LAST_KNOWN_GOOD_POLICY" => Self::RetainedRejectedPolicy,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "APPLIED",
            Self::Failed {
                failed_closed: false,
            } => "FAILED",
            Self::Failed {
                failed_closed: true,
            } => "FAILED_CLOSED",
            Self::RetainedLocalOverride => "RETAINED_LOCAL_OVERRIDE",
            Self::RetainedRejectedPolicy => "RETAINED_LAST_KNOWN_GOOD_POLICY",
        }
    }
}

/// Revisions a supervisor reports as active (or attempted, on failure).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedRevisions {
    pub policy_revision: u64,
    pub policy_hash: String,
    pub global_policy_revision: u64,
    pub global_settings_revision: u64,
    pub workspace_settings_revision: u64,
    pub sandbox_settings_revision: u64,
    pub provider_env_revision: String,
}

/// One report from one sandbox's supervisor.
#[derive(Debug, Clone)]
pub struct SupervisorReport {
    pub sandbox_id: String,
    pub status: ReportStatus,
    pub revisions: ReportedRevisions,
    pub reason: String,
}

impl SupervisorReport {
    /// A sandbox's last report as kept, or None if it cannot be read back.
    pub fn from_last(sandbox_id: String, last: &LastReport) -> Option<Self> {
        Some(Self {
            sandbox_id,
            status: ReportStatus::parse(&last.status)?,
            revisions: serde_json::from_str(&last.revisions_json).ok()?,
            reason: last.reason.clone(),
        })
    }
}

/// Bounds and cleans supervisor-provided text before it is stored or shown.
pub fn sanitize_error(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .collect();
    if cleaned.len() <= MAX_ERROR_BYTES {
        return cleaned;
    }
    let mut end = MAX_ERROR_BYTES - 3;
    while !cleaned.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &cleaned[..end])
}

#[derive(Debug, PartialEq, Eq)]
enum Position {
    Exact,
    Newer,
    Older,
}

/// Where a report stands relative to an operation's tuple.
fn position(
    op_policy: u64,
    op_settings: u64,
    reported_policy: u64,
    reported_settings: u64,
) -> Position {
    if (reported_policy, reported_settings) == (op_policy, op_settings) {
        Position::Exact
    } else if reported_policy >= op_policy && reported_settings >= op_settings {
        Position::Newer
    } else {
        Position::Older
    }
}

/// Target sandboxes a no-op write settles per transaction.
const SETTLED_PER_TRANSACTION: usize = 256;

/// A no-op write tracks revisions the supervisor may already run: replay
/// each target sandbox's last report against it. The reports are read in
/// the transaction that resolves them, after their sandboxes are locked. A
/// supervisor's report being resolved as the no-op write committed read its
/// sandbox's live operations before that write's existed, and has not
/// committed yet (PostgreSQL): read before the lock, the last report would be
/// the one before it, and nothing would ever end the no-op's target. After
/// the lock it is the report itself.
pub async fn settle_from_last_reports(store: &Store, operation: &OperationRecord) -> Result<()> {
    let sandboxes = match &operation.sandbox_id {
        Some(id) => vec![id.clone()],
        None => store.operation_target_ids(&operation.id).await?,
    };
    for chunk in sandboxes.chunks(SETTLED_PER_TRANSACTION) {
        let mut tx = store.begin_write().await?;
        tx.lock_sandboxes(chunk).await?;
        let reports: Vec<SupervisorReport> = tx
            .last_reports_of(chunk)
            .await?
            .into_iter()
            .filter_map(|(sandbox_id, last)| SupervisorReport::from_last(sandbox_id, &last))
            // A failure is not replayed: the no-op write asked for nothing new.
            .filter(|report| !matches!(report.status, ReportStatus::Failed { .. }))
            .collect();
        resolve_batch(&mut tx, &reports, false).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Reports resolved between two looks at whether something waits; see
/// [`resolve_prefix`]. A write that arrives mid-step waits for the rest of
/// it: with 32 rather than 64, sandbox writes during a 10k fanout waited
/// p99 31-38 ms instead of 40-50 ms, and the fanout's operation completed
/// about 50 ms later (more, smaller statements).
pub(super) const REPORTS_BETWEEN_YIELDS: usize = 32;

/// Reports resolved per step on `backend`. PostgreSQL's writers wait only
/// for the rows they touch, so a step holds up nobody but an awaited
/// report, while every statement is a round trip from a runtime crowded
/// with a fanout's sessions: steps of 32 left a 10k fleet operation
/// completing hundreds of milliseconds after its last acknowledgement.
fn reports_per_step(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => REPORTS_BETWEEN_YIELDS,
        Backend::Postgres => 8 * REPORTS_BETWEEN_YIELDS,
    }
}

/// Resolves a prefix of `reports` in one transaction, as large as possible:
/// every [`reports_per_step`] reports, when `something_waits` (another
/// write waits for the SQLite writer, or a report someone waits for has
/// arrived), it commits and leaves the rest. A fanout's acks then commit in
/// large transactions, cheaper per report, yet a sandbox write or an awaited
/// ack waits behind only a short one. Returns what each resolved report
/// ended; their number is the prefix's length.
pub(super) async fn resolve_prefix(
    store: &Store,
    reports: &[SupervisorReport],
    record: bool,
    something_waits: &mut (dyn FnMut() -> bool + Send),
) -> Result<Vec<u32>> {
    let mut tx = store.begin_write().await?;
    let mut resolved = Vec::with_capacity(reports.len());
    for chunk in reports.chunks(reports_per_step(store.backend())) {
        resolved.extend(resolve_batch(&mut tx, chunk, record).await?);
        if something_waits() {
            break;
        }
    }
    tx.commit().await?;
    Ok(resolved)
}

/// [`resolve_batch`] in a transaction of its own.
pub(super) async fn resolve_reports(
    store: &Store,
    reports: &[SupervisorReport],
    record: bool,
) -> Result<Vec<u32>> {
    let mut tx = store.begin_write().await?;
    let resolved = resolve_batch(&mut tx, reports, record).await?;
    tx.commit().await?;
    Ok(resolved)
}

/// Resolves every operation the reports settle inside `tx`, as if each
/// report were resolved alone in order; returns how many operations each
/// one ended. `record` keeps each report as its sandbox's last one. Work
/// is set-based (a few statements per batch, not per report), in rounds
/// that hold at most one report per sandbox so a sandbox's reports keep
/// their order. A report for an unknown sandbox fails the whole batch.
async fn resolve_batch(
    tx: &mut WriteTx,
    reports: &[SupervisorReport],
    record: bool,
) -> Result<Vec<u32>> {
    let mut resolved = vec![0u32; reports.len()];
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (i, report) in reports.iter().enumerate() {
        let round = seen.entry(report.sandbox_id.as_str()).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(i);
        *round += 1;
    }
    for round in rounds {
        resolve_round(tx, reports, &round, record, &mut resolved).await?;
    }
    Ok(resolved)
}

/// One report per sandbox: `round` indexes `reports`.
async fn resolve_round(
    tx: &mut WriteTx,
    reports: &[SupervisorReport],
    round: &[usize],
    record: bool,
    resolved: &mut [u32],
) -> Result<()> {
    let ids: Vec<String> = round
        .iter()
        .map(|&i| reports[i].sandbox_id.clone())
        .collect();
    let by_sandbox: HashMap<&str, usize> = round
        .iter()
        .map(|&i| (reports[i].sandbox_id.as_str(), i))
        .collect();
    let RoundInputs {
        lifecycles,
        sandbox_operations,
        targets,
    } = tx.round_inputs(&ids).await?;
    if let Some(missing) = ids.iter().find(|id| !lifecycles.contains_key(*id)) {
        return Err(GatewayError::NotFound(format!(
            "sandbox {missing} not found"
        )));
    }
    let reasons: HashMap<usize, String> = round
        .iter()
        .map(|&i| (i, sanitize_error(&reports[i].reason)))
        .collect();

    for op in sandbox_operations {
        let Some(&i) = op.sandbox_id.as_deref().and_then(|id| by_sandbox.get(id)) else {
            continue;
        };
        if let Some((state, outcome, error)) = sandbox_verdict(&op, &reports[i], &reasons[&i])
            && tx.finish_operation(&op.id, state, outcome, &error).await?
        {
            resolved[i] += 1;
        }
    }

    // Targets of one operation with the same verdict end in one statement.
    let mut groups: Vec<TargetGroup> = Vec::new();
    for (sandbox_id, target) in targets {
        let Some(&i) = by_sandbox.get(sandbox_id.as_str()) else {
            continue;
        };
        let Some((state, outcome, error)) = target_verdict(&target, &reports[i], &reasons[&i])
        else {
            continue;
        };
        match groups.iter_mut().find(|g| {
            g.operation_id == target.operation_id
                && g.state == state
                && g.outcome == outcome
                && g.error == error
        }) {
            Some(group) => group.reports.push(i),
            None => groups.push(TargetGroup {
                operation_id: target.operation_id,
                state,
                outcome,
                error,
                reports: vec![i],
            }),
        }
    }
    groups.sort_by(|a, b| a.operation_id.cmp(&b.operation_id));
    for group in groups {
        let sandboxes: Vec<String> = group
            .reports
            .iter()
            .map(|&i| reports[i].sandbox_id.clone())
            .collect();
        let ended = tx
            .finish_targets(
                &group.operation_id,
                &sandboxes,
                group.state,
                group.outcome,
                &group.error,
            )
            .await?;
        // The report that ended the operation is the group's last one.
        if ended && let Some(&last) = group.reports.last() {
            resolved[last] += 1;
        }
    }

    if record {
        let rows: Vec<ReportRow<'_>> = round
            .iter()
            .map(|&i| ReportRow {
                sandbox_id: &reports[i].sandbox_id,
                status: reports[i].status.as_str(),
                revisions_json: serde_json::to_string(&reports[i].revisions).unwrap_or_default(),
                reason: &reasons[&i],
                policy_revision: reports[i].revisions.policy_revision,
                policy_hash: &reports[i].revisions.policy_hash,
            })
            .collect();
        tx.record_reports(&rows).await?;
    }
    let now_running: Vec<String> = round
        .iter()
        .filter(|&&i| {
            // Only a configuration in effect makes a sandbox running: a failed first apply,
            // whatever its mode, leaves nothing running under the gateway's configuration.
            lifecycles.get(&reports[i].sandbox_id) == Some(&Lifecycle::Pending)
                && matches!(
                    reports[i].status,
                    ReportStatus::Applied
                        | ReportStatus::RetainedLocalOverride
                        | ReportStatus::RetainedRejectedPolicy
                )
        })
        .map(|&i| reports[i].sandbox_id.clone())
        .collect();
    tx.mark_running(&now_running).await?;
    Ok(())
}

/// An attach or detach: APPLIED when the supervisor reports exactly the provider environment
/// revision it made desired. Each attach or detach raises the attachment epoch, so a report
/// of this epoch or a later one with another revision stands for a newer change (a later
/// attach, or a provider update) that reached the supervisor instead.
fn provider_env_verdict(
    expected: &str,
    report: &SupervisorReport,
    reason: &str,
) -> Option<Verdict> {
    let reported = &report.revisions.provider_env_revision;
    if reported == expected {
        return Some(match report.status {
            ReportStatus::Applied
            | ReportStatus::RetainedLocalOverride
            | ReportStatus::RetainedRejectedPolicy => {
                (OperationState::Applied, Outcome::Applied, String::new())
            }
            ReportStatus::Failed { failed_closed } => failed(failed_closed, reason),
        });
    }
    match (attachment_epoch_of(reported), attachment_epoch_of(expected)) {
        (Some(got), Some(wanted)) if got >= wanted => Some((
            OperationState::Superseded,
            Outcome::SupersededByNewer,
            "a newer provider environment reached the supervisor first".to_string(),
        )),
        _ => None,
    }
}

/// The verdict of a failed apply, however the operation is tracked: the sandbox quarantined
/// (`fail_closed`) or kept its last-known-good configuration.
fn failed(failed_closed: bool, reason: &str) -> Verdict {
    let outcome = if failed_closed {
        Outcome::FailedClosed
    } else {
        Outcome::FailedRetainedLastKnownGood
    };
    (OperationState::Failed, outcome, reason.to_string())
}

/// The attachment epoch a provider environment revision (`e{epoch}-{digest}`) was built at.
fn attachment_epoch_of(revision: &str) -> Option<u64> {
    revision.strip_prefix('e')?.split('-').next()?.parse().ok()
}

/// Fleet targets of one operation that one round ends the same way.
struct TargetGroup {
    operation_id: String,
    state: OperationState,
    outcome: Outcome,
    error: String,
    reports: Vec<usize>,
}

type Verdict = (OperationState, Outcome, String);

/// How a report settles one sandbox-scoped operation, if it does.
fn sandbox_verdict(
    op: &OperationRecord,
    report: &SupervisorReport,
    reason: &str,
) -> Option<Verdict> {
    if let Some(expected) = &op.provider_env_revision {
        return provider_env_verdict(expected, report, reason);
    }
    let r = &report.revisions;
    let pos = position(
        op.policy_revision,
        op.settings_revision,
        r.policy_revision,
        r.sandbox_settings_revision,
    );
    // A global policy written after this sandbox policy decides what runs now: set, it
    // replaces the sandbox's policy; cleared, that clear's own operation tracks it. A
    // supervisor that does not report global revisions (upstream's) reports 0 here.
    if op.touches_policy
        && pos != Position::Older
        && r.global_policy_revision > op.global_policy_revision
    {
        return Some((
            OperationState::Superseded,
            Outcome::SupersededByNewer,
            format!(
                "the global policy changed (revision {}) before this revision was applied; \
                 that write decides which policy runs",
                r.global_policy_revision
            ),
        ));
    }
    // The policy this operation wrote is the one the supervisor rejected (perhaps reported
    // together with newer settings): the operation failed, whatever came with it.
    if report.status == ReportStatus::RetainedRejectedPolicy
        && op.touches_policy
        && op.policy_revision == r.policy_revision
        && pos != Position::Older
    {
        return Some((
            OperationState::Failed,
            Outcome::FailedRetainedLastKnownGood,
            reason.to_string(),
        ));
    }
    match (pos, report.status) {
        (Position::Older, _) => None,
        (Position::Newer, _) => Some((
            OperationState::Superseded,
            Outcome::SupersededByNewer,
            "a newer revision reached the supervisor first".to_string(),
        )),
        (Position::Exact, ReportStatus::Applied) => {
            Some((OperationState::Applied, Outcome::Applied, String::new()))
        }
        (Position::Exact, ReportStatus::Failed { failed_closed }) => {
            Some(failed(failed_closed, reason))
        }
        (Position::Exact, ReportStatus::RetainedLocalOverride) if op.touches_policy => Some((
            OperationState::Inactive,
            Outcome::RetainedLocalOverride,
            "local policy file keeps precedence; the gateway policy is not in effect".to_string(),
        )),
        (
            Position::Exact,
            ReportStatus::RetainedLocalOverride | ReportStatus::RetainedRejectedPolicy,
        ) => Some((OperationState::Applied, Outcome::Applied, String::new())),
    }
}

/// How a report settles one fleet target, if it reached the target's scope revision.
pub(super) fn target_verdict(
    target: &LiveTarget,
    report: &SupervisorReport,
    reason: &str,
) -> Option<Verdict> {
    let r = &report.revisions;
    let pos = match target.target_kind {
        TargetKind::Global => position(
            target.global_policy_revision,
            target.settings_revision,
            r.global_policy_revision,
            r.global_settings_revision,
        ),
        TargetKind::Workspace => position(
            0,
            target.settings_revision,
            0,
            r.workspace_settings_revision,
        ),
        TargetKind::Sandbox | TargetKind::Provider => return None,
    };
    match pos {
        Position::Older => return None,
        // A later write to the scope (a global policy cleared after this one was set, say)
        // reached the supervisor first: this target's revision never ran there.
        Position::Newer => {
            return Some((
                OperationState::Superseded,
                Outcome::SupersededByNewer,
                "a newer revision of its scope reached the supervisor first".to_string(),
            ));
        }
        Position::Exact => {}
    }
    Some(match report.status {
        ReportStatus::Applied => (OperationState::Applied, Outcome::Applied, String::new()),
        ReportStatus::Failed { failed_closed } => failed(failed_closed, reason),
        ReportStatus::RetainedLocalOverride if target.touches_policy => (
            OperationState::Inactive,
            Outcome::RetainedLocalOverride,
            "local policy file keeps precedence".to_string(),
        ),
        ReportStatus::RetainedRejectedPolicy if target.touches_policy => (
            OperationState::Failed,
            Outcome::FailedRetainedLastKnownGood,
            reason.to_string(),
        ),
        ReportStatus::RetainedLocalOverride | ReportStatus::RetainedRejectedPolicy => {
            (OperationState::Applied, Outcome::Applied, String::new())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_report(revision: &str, status: ReportStatus) -> SupervisorReport {
        SupervisorReport {
            sandbox_id: "sb-1".into(),
            status,
            revisions: ReportedRevisions {
                provider_env_revision: revision.into(),
                ..Default::default()
            },
            reason: "bad".into(),
        }
    }

    #[test]
    fn provider_environment_operations_resolve_by_their_exact_revision() {
        let applied = env_report("e3-abc", ReportStatus::Applied);
        let verdict = provider_env_verdict("e3-abc", &applied, "");
        assert_eq!(verdict.map(|v| v.0), Some(OperationState::Applied));
        let failed = env_report(
            "e3-abc",
            ReportStatus::Failed {
                failed_closed: false,
            },
        );
        let verdict = provider_env_verdict("e3-abc", &failed, "bad");
        assert_eq!(verdict.map(|v| v.0), Some(OperationState::Failed));
        // An older environment says nothing yet; a newer one, or another at the same
        // epoch (a provider update since), supersedes.
        assert_eq!(
            provider_env_verdict("e3-abc", &env_report("e2-abc", ReportStatus::Applied), ""),
            None
        );
        for newer in ["e4-abc", "e3-def"] {
            let verdict =
                provider_env_verdict("e3-abc", &env_report(newer, ReportStatus::Applied), "");
            assert_eq!(
                verdict.map(|v| v.0),
                Some(OperationState::Superseded),
                "{newer}"
            );
        }
        assert_eq!(attachment_epoch_of("e12-0a1b2c"), Some(12));
        assert_eq!(attachment_epoch_of("garbage"), None);
    }

    #[test]
    fn exact_newer_and_older_reports() {
        assert_eq!(position(2, 1, 2, 1), Position::Exact);
        assert_eq!(position(2, 1, 3, 1), Position::Newer);
        assert_eq!(position(2, 1, 2, 2), Position::Newer);
        assert_eq!(position(2, 1, 1, 5), Position::Older);
        assert_eq!(position(2, 1, 2, 0), Position::Older);
    }

    #[test]
    fn errors_are_bounded_and_cleaned() {
        let long = "é".repeat(2000);
        let cleaned = sanitize_error(&long);
        assert!(cleaned.len() <= MAX_ERROR_BYTES);
        assert!(cleaned.ends_with("..."));
        assert_eq!(sanitize_error("bad\u{1b}[31m"), "bad [31m");
    }
}
