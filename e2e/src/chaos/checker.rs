//! Reads the histories at the end of a run and names every violation:
//!
//! - **terminal**: every operation a write got back ends in a terminal state within the bound
//!   after the last fault healed, and the states seen of it are a legal path (PENDING, then
//!   DELIVERED, then one terminal state that never changes);
//! - **applied is true**: an operation of a sandbox that ended APPLIED names revisions that
//!   sandbox's supervisor recorded as active in its apply log; a refused policy never ended
//!   APPLIED;
//! - **nothing lost**: every committed write's operation exists with its key, every committed
//!   policy revision is in the sandbox's history with its hash, and each target's final value
//!   is its last committed write's (or a later write's whose outcome is unknown);
//! - **nothing refused is visible**: no operation carries the key of a write that was refused;
//! - **last-known-good**: no supervisor's apply log holds a policy its hook refused, and none
//!   has one active;
//! - **converged**: within the bound after the heal, every live supervisor's active
//!   configuration is the store's desired one (policy revision and hash, the three settings
//!   revisions, attachment epoch and provider value).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use openshell_proto::v1 as pb;
use openshell_supervisor::file_applier::apply_log::{self, ApplyLogEntry};
use serde_json::Value;

use super::workload::{
    CHURN_PREFIX, GLOBAL_SETTING, History, Outcome, PROVIDER, PROVIDER_VALUE, REFUSED_PORTS,
    SANDBOX_SETTING, SharedHistory, WORKSPACE_SETTING, WriteKind, WriteRecord, observe_once,
};
use crate::{Api, sandbox_ref};

/// A supervisor as the checker sees it.
#[derive(Debug, Clone)]
pub struct SupervisorView {
    pub sandbox_id: String,
    pub state_dir: PathBuf,
    /// Running now: it must have converged.
    pub live: bool,
}

/// A file each run appends its [`Report`] to, one JSON line (see [`Report::append_to_report_file`]).
pub const REPORT_ENV: &str = "OPENSHELL_CHAOS_REPORT";

/// The figures of a run and what went wrong in it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Report {
    pub scenario: String,
    pub backend: String,
    pub seed: u64,
    pub supervisors: usize,
    pub faults: usize,
    pub writes: usize,
    pub committed: usize,
    pub refused: usize,
    pub unknown: usize,
    pub retried: usize,
    /// Of the writes, sandbox stops, starts, creations and deletions.
    pub sandbox_lifecycle_writes: usize,
    pub operations: usize,
    pub applied: usize,
    pub failed: usize,
    pub lost_updates: usize,
    pub stuck_operations: usize,
    pub apply_log_entries: usize,
    /// From the last heal until every live supervisor matched the store.
    pub convergence_ms: u64,
    pub violations: Vec<String>,
}

impl Report {
    /// Appends the report as one JSON line to `OPENSHELL_CHAOS_REPORT`, when set.
    pub fn append_to_report_file(&self) {
        if let Ok(path) = std::env::var(REPORT_ENV) {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            writeln!(file, "{}", serde_json::to_string(self).unwrap()).unwrap();
        }
    }
}

/// Checks a finished run. `api` reaches a healthy gateway; the workload has stopped.
pub async fn check(
    api: &Api,
    history: &SharedHistory,
    supervisors: &[SupervisorView],
    bound: Duration,
) -> Report {
    let mut api = api.clone();
    let healed = history
        .lock()
        .unwrap()
        .healed_at
        .unwrap_or_else(Instant::now);
    let mut report = Report::default();

    // Terminal: poll until every operation ended or the bound passed.
    loop {
        observe_once(&mut api, history).await;
        if open_operations(&history.lock().unwrap()).is_empty() || healed.elapsed() > bound {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let stuck = open_operations(&history.lock().unwrap());
    let mut stuck_why = Vec::with_capacity(stuck.len());
    for id in &stuck {
        stuck_why.push(why_stuck(&mut api, id).await);
    }
    let store = StoreView::read(&mut api, supervisors).await;
    let converged = converge(&mut api, supervisors, &store, healed, bound).await;

    let h = history.lock().unwrap();
    report.violations.extend(h.violations.iter().cloned());
    report.faults = h.faults.len();
    report.writes = h.writes.len();
    report.retried = h.writes.iter().filter(|w| w.attempts > 1).count();
    report.sandbox_lifecycle_writes = h
        .writes
        .iter()
        .filter(|w| {
            matches!(
                w.kind,
                WriteKind::Lifecycle { .. }
                    | WriteKind::CreateSandbox { .. }
                    | WriteKind::DeleteSandbox { .. }
            )
        })
        .count();
    for w in &h.writes {
        match &w.outcome {
            Outcome::Committed { .. } => report.committed += 1,
            Outcome::Refused { .. } => report.refused += 1,
            Outcome::Unknown { .. } => report.unknown += 1,
        }
    }
    report.operations = h.operation_states.len();
    report.stuck_operations = stuck.len();
    for (id, why) in stuck.iter().zip(stuck_why) {
        report.violations.push(format!(
            "operation {id} is not terminal {bound:?} after the heal (seen: {:?}; {})\n{why}",
            h.operation_states.get(id),
            written_by(&h, id, healed)
        ));
    }
    for (id, states) in &h.operation_states {
        if let Some(why) = illegal_path(states) {
            report.violations.push(format!(
                "operation {id} took an illegal path {states:?}: {why}"
            ));
        }
        match states.last() {
            Some(pb::OperationState::Applied) => report.applied += 1,
            Some(pb::OperationState::Failed) => report.failed += 1,
            _ => {}
        }
    }

    // By sandbox: two supervisors sharing one sandbox's credential both count.
    let mut logs: HashMap<String, Vec<ApplyLogEntry>> = HashMap::new();
    for s in supervisors {
        let entries = apply_log::read(&s.state_dir).unwrap_or_default();
        logs.entry(s.sandbox_id.clone())
            .or_default()
            .extend(entries);
    }
    report.apply_log_entries = logs.values().map(Vec::len).sum();

    check_applied_is_true(&h, &logs, &store, &mut report);
    check_nothing_lost(&h, &store, &mut report);
    check_last_known_good(&h, &logs, supervisors, &mut report);
    match converged {
        Ok(after) => report.convergence_ms = u64::try_from(after.as_millis()).unwrap_or(0),
        Err(diffs) => report.violations.extend(diffs),
    }
    report
}

/// Which write made operation `id`, and when, against the run's faults.
fn written_by(h: &History, id: &str, healed: Instant) -> String {
    let Some(write) = h.writes.iter().find(
        |w| matches!(&w.outcome, Outcome::Committed { operation: Some(op), .. } if op.id == id),
    ) else {
        return "no write of the run got it back".into();
    };
    let before_heal = |at: Instant| healed.saturating_duration_since(at);
    let faults: Vec<String> = h
        .faults
        .iter()
        .map(|(at, what)| format!("{:?} before the heal: {what}", before_heal(*at)))
        .collect();
    format!(
        "write {} {:?} key {:?}, sent {:?} and answered {:?} before the heal after {} \
         attempt(s); faults: {faults:?}",
        write.seq,
        write.kind,
        write.key,
        before_heal(write.sent_at),
        before_heal(write.answered_at),
        write.attempts
    )
}

/// What the gateway says of a stuck operation: the operation, and for each sandbox it still
/// waits for (at most a few), its session as `InspectSession` shows it.
async fn why_stuck(api: &mut Api, id: &str) -> String {
    const SANDBOXES_SHOWN: u32 = 3;
    let op = match api
        .get_operation(pb::GetOperationRequest { id: id.into() })
        .await
    {
        Ok(op) => op.into_inner(),
        Err(status) => return format!("  GetOperation failed: {status}"),
    };
    let mut why = format!(
        "  operation: kind {:?}, target {:?}, policy revision {}, settings revision {}, \
         global policy revision {}, no-op {}, fleet {:?}",
        op.target_kind(),
        op.target,
        op.policy_revision,
        op.settings_revision,
        op.global_policy_revision,
        op.no_op,
        op.fleet
    );
    let waiting_for = if op.fleet.is_some() {
        match api
            .list_operation_targets(pb::ListOperationTargetsRequest {
                operation_id: id.into(),
                states: vec![
                    pb::OperationState::Pending as i32,
                    pb::OperationState::Delivered as i32,
                ],
                page_size: SANDBOXES_SHOWN,
                page_token: String::new(),
            })
            .await
        {
            Ok(page) => page
                .into_inner()
                .targets
                .into_iter()
                .map(|t| t.sandbox_id)
                .collect(),
            Err(status) => {
                why.push_str(&format!("\n  ListOperationTargets failed: {status}"));
                Vec::new()
            }
        }
    } else {
        vec![op.target.clone()]
    };
    for sandbox in waiting_for {
        let inspection = api
            .inspect_session(pb::InspectSessionRequest {
                sandbox: sandbox_ref(&sandbox),
            })
            .await;
        match inspection {
            Ok(s) => {
                let s = s.into_inner();
                why.push_str(&format!(
                    "\n  sandbox {sandbox}: lifecycle {:?}, connected {}, owner {:?}, \
                     last report {:?}, components {:?}, pending {:?}, hints {:?}",
                    s.sandbox.as_ref().map(|b| b.lifecycle()),
                    s.connected,
                    s.owner_replica,
                    s.last_report,
                    s.components,
                    s.pending_operations
                        .iter()
                        .map(|o| (&o.id, o.policy_revision, o.settings_revision))
                        .collect::<Vec<_>>(),
                    s.hints
                ));
            }
            Err(status) => why.push_str(&format!("\n  sandbox {sandbox}: {status}")),
        }
    }
    why
}

fn open_operations(h: &History) -> Vec<String> {
    let mut ids: Vec<String> = h
        .operation_states
        .iter()
        .filter(|(_, states)| !states.last().is_some_and(|s| s.is_terminal()))
        .map(|(id, _)| id.clone())
        .collect();
    ids.sort();
    ids
}

/// Why a sequence of observed states is not a path of the state machine.
pub fn illegal_path(states: &[pb::OperationState]) -> Option<String> {
    use pb::OperationState as S;
    let rank = |s: S| match s {
        S::Unspecified => 0,
        S::Pending => 1,
        S::Delivered => 2,
        _ => 3,
    };
    for pair in states.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        if from.is_terminal() {
            return Some(format!("left the terminal state {from:?} for {to:?}"));
        }
        if rank(to) < rank(from) {
            return Some(format!("went back from {from:?} to {to:?}"));
        }
    }
    if states.first() == Some(&S::Unspecified) {
        return Some("UNSPECIFIED state".into());
    }
    None
}

/// What the store holds at the end.
#[derive(Debug, Default)]
struct StoreView {
    sandboxes: HashMap<String, SandboxView>,
    global_settings_revision: u64,
    workspace_settings_revision: u64,
    global_value: Option<String>,
    workspace_value: Option<String>,
    provider_value: Option<String>,
    /// Names of the live (not deleted) sandboxes the workload created as churn.
    churn_live: HashSet<String>,
    /// Every operation by id.
    operations: HashMap<String, pb::Operation>,
}

#[derive(Debug, Default)]
struct SandboxView {
    sandbox: pb::Sandbox,
    setting_value: Option<String>,
    /// Revision → (hash, refused by the hook).
    policies: BTreeMap<u64, (String, bool)>,
}

impl StoreView {
    async fn read(api: &mut Api, supervisors: &[SupervisorView]) -> Self {
        let mut view = Self::default();
        let global = settings(api, pb::SettingScope::Global, None, "").await;
        view.global_settings_revision = global.revision;
        view.global_value = value_of(&global.values, GLOBAL_SETTING);
        let workspace = settings(api, pb::SettingScope::Workspace, None, "default").await;
        view.workspace_settings_revision = workspace.revision;
        view.workspace_value = value_of(&workspace.values, WORKSPACE_SETTING);
        let provider = api
            .get_provider(pb::GetProviderRequest {
                provider: PROVIDER.into(),
                workspace: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        view.provider_value = provider.env.get(PROVIDER_VALUE).cloned();
        for s in supervisors {
            let sandbox = crate::get_sandbox(api, &s.sandbox_id).await;
            let scoped = settings(api, pb::SettingScope::Sandbox, Some(&s.sandbox_id), "").await;
            let mut policies = BTreeMap::new();
            for revision in 1..=sandbox.policy_revision {
                let read = api
                    .get_sandbox_policy(pb::GetSandboxPolicyRequest {
                        sandbox: sandbox_ref(&s.sandbox_id),
                        revision,
                        global: false,
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .policy
                    .unwrap_or_default();
                policies.insert(
                    read.revision,
                    (read.policy_hash, has_refused_port(&read.policy_yaml)),
                );
            }
            view.sandboxes.insert(
                s.sandbox_id.clone(),
                SandboxView {
                    sandbox,
                    setting_value: value_of(&scoped.values, SANDBOX_SETTING),
                    policies,
                },
            );
        }
        view.churn_live = paged(|page_token| {
            let mut api = api.clone();
            async move {
                let page = api
                    .list_sandboxes(pb::ListSandboxesRequest {
                        page_size: 1000,
                        page_token,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                (page.sandboxes, page.next_page_token)
            }
        })
        .await
        .into_iter()
        .filter(|s| s.name().starts_with(CHURN_PREFIX))
        .map(|s| s.name().to_string())
        .collect();
        view.operations = paged(|page_token| {
            let mut api = api.clone();
            async move {
                let page = api
                    .list_operations(pb::ListOperationsRequest {
                        page_size: 1000,
                        page_token,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                (page.operations, page.next_page_token)
            }
        })
        .await
        .into_iter()
        .map(|op| (op.id.clone(), op))
        .collect();
        view
    }
}

/// Every item of a paged listing; `fetch` gets a page token and answers the page's items and
/// the next token (empty after the last page).
async fn paged<T, F, Fut>(mut fetch: F) -> Vec<T>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = (Vec<T>, String)>,
{
    let mut items = Vec::new();
    let mut page_token = String::new();
    loop {
        let (page, next) = fetch(page_token).await;
        items.extend(page);
        if next.is_empty() {
            return items;
        }
        page_token = next;
    }
}

async fn settings(
    api: &mut Api,
    scope: pb::SettingScope,
    sandbox: Option<&str>,
    workspace: &str,
) -> pb::GetSettingsResponse {
    api.get_settings(pb::GetSettingsRequest {
        scope: scope as i32,
        sandbox: sandbox.and_then(sandbox_ref),
        workspace: workspace.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

fn value_of(values: &[pb::Setting], key: &str) -> Option<String> {
    values
        .iter()
        .find(|s| s.key == key)
        .and_then(|s| s.value.as_ref()?.kind.as_ref())
        .map(|kind| match kind {
            pb::setting_value::Kind::StringValue(v) => v.clone(),
            pb::setting_value::Kind::IntValue(v) => v.to_string(),
            pb::setting_value::Kind::BoolValue(v) => v.to_string(),
        })
}

/// True when a policy (YAML or JSON text) has a port the supervisors' hook refuses.
pub fn has_refused_port(text: &str) -> bool {
    text.match_indices("port").any(|(at, _)| {
        let rest = text[at + 4..].trim_start_matches(['"', ':', ' ']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits
            .parse::<u32>()
            .is_ok_and(|port| REFUSED_PORTS.contains(&port))
    })
}

fn check_applied_is_true(
    h: &History,
    logs: &HashMap<String, Vec<ApplyLogEntry>>,
    store: &StoreView,
    report: &mut Report,
) {
    for w in &h.writes {
        let Outcome::Committed {
            operation: Some(op),
            ..
        } = &w.outcome
        else {
            continue;
        };
        let final_state = h
            .operation_states
            .get(&op.id)
            .and_then(|s| s.last().copied());
        if final_state != Some(pb::OperationState::Applied) {
            continue;
        }
        let (sandbox, policy, settings) = match &w.kind {
            WriteKind::Policy {
                sandbox, refused, ..
            } => {
                if *refused {
                    report.violations.push(format!(
                        "write {} (a policy the supervisor refuses) ended APPLIED: {op:?}",
                        w.seq
                    ));
                }
                (sandbox, op.policy_revision, 0)
            }
            WriteKind::SandboxSetting { sandbox, .. } => (sandbox, 0, op.settings_revision),
            _ => continue,
        };
        let id = store
            .sandboxes
            .values()
            .find(|s| s.sandbox.name() == sandbox || s.sandbox.id() == sandbox)
            .map_or(sandbox.clone(), |s| s.sandbox.id().to_string());
        let Some(log) = logs.get(&id) else { continue };
        let recorded = log
            .iter()
            .any(|e| e.policy_revision >= policy && e.sandbox_settings_revision >= settings);
        if !recorded {
            report.violations.push(format!(
                "operation {} of {sandbox} ended APPLIED (policy revision {policy}, settings \
                 revision {settings}) but its supervisor's apply log never had it active",
                op.id
            ));
        }
    }
}

fn check_nothing_lost(h: &History, store: &StoreView, report: &mut Report) {
    let keys: HashMap<&str, &pb::Operation> = store
        .operations
        .values()
        .filter(|op| !op.idempotency_key.is_empty())
        .map(|op| (op.idempotency_key.as_str(), op))
        .collect();
    let lost = |report: &mut Report, what: String| {
        report.lost_updates += 1;
        report.violations.push(what);
    };
    for w in &h.writes {
        match &w.outcome {
            Outcome::Committed {
                operation,
                policy_revision,
                policy_hash,
            } => {
                if let Some(op) = operation
                    && !store.operations.contains_key(&op.id)
                {
                    lost(
                        report,
                        format!("write {} committed as {} but it is gone", w.seq, op.id),
                    );
                }
                if !w.key.is_empty()
                    && operation.is_some()
                    && keys.get(w.key.as_str()).map(|op| &op.id)
                        != operation.as_ref().map(|op| &op.id)
                {
                    lost(
                        report,
                        format!(
                            "write {} committed with key {} but no operation of that key is {:?}",
                            w.seq,
                            w.key,
                            operation.as_ref().map(|op| &op.id)
                        ),
                    );
                }
                if let WriteKind::Policy { sandbox, .. } = &w.kind {
                    let stored = store
                        .sandboxes
                        .values()
                        .find(|s| s.sandbox.name() == sandbox)
                        .and_then(|s| s.policies.get(policy_revision));
                    if stored.map(|(hash, _)| hash) != Some(policy_hash) {
                        lost(
                            report,
                            format!(
                                "write {}: policy revision {policy_revision} of {sandbox} \
                                 committed with hash {policy_hash}, the store has {stored:?}",
                                w.seq
                            ),
                        );
                    }
                }
            }
            Outcome::Refused { code, message } => {
                if let Some(op) = keys.get(w.key.as_str()) {
                    report.violations.push(format!(
                        "write {} was refused ({code:?}: {message}) but operation {} carries \
                         its key",
                        w.seq, op.id
                    ));
                }
            }
            Outcome::Unknown { .. } => {}
        }
    }

    let last = possible_final_values(&h.writes);
    let by_name = |name: &str| store.sandboxes.values().find(|s| s.sandbox.name() == name);
    for (target, allowed) in &last {
        let actual = if let Some(name) = target.strip_prefix("setting of ") {
            by_name(name).and_then(|s| s.setting_value.clone())
        } else if let Some(name) = target.strip_prefix("stop of ") {
            by_name(name)
                .map(|s| (s.sandbox.lifecycle == pb::SandboxLifecycle::Stopped as i32).to_string())
        } else if let Some(name) = target.strip_prefix("churn ") {
            let live = store.churn_live.contains(name);
            Some(if live { "live" } else { "deleted" }.to_string())
        } else if let Some(name) = target.strip_prefix("attachment of ") {
            by_name(name).map(|s| {
                s.sandbox
                    .providers()
                    .iter()
                    .any(|p| p == PROVIDER)
                    .to_string()
            })
        } else {
            match target.as_str() {
                "workspace setting" => store.workspace_value.clone(),
                "global setting" => store.global_value.clone(),
                "provider value" => store.provider_value.clone(),
                _ => None,
            }
        };
        if !actual.as_ref().is_some_and(|a| allowed.contains(a)) {
            lost(
                report,
                format!("{target} is {actual:?}; the last committed write set {allowed:?}"),
            );
        }
    }
}

/// Target → the values it may finally hold. A write is superseded when a committed write to the
/// same target was sent after its answer came: that one surely committed later. Any write not
/// superseded (a committed one, or one with no definite answer) may hold the final value, since
/// writes whose spans overlap (a fanout beside the workload, a retry through a restart) may
/// have committed in either order.
fn possible_final_values(writes: &[WriteRecord]) -> HashMap<String, Vec<String>> {
    let mut by_target: HashMap<String, Vec<(&WriteRecord, String)>> = HashMap::new();
    for w in writes {
        if matches!(w.outcome, Outcome::Refused { .. }) {
            continue;
        }
        if let Some((target, value)) = final_value_of(&w.kind) {
            by_target.entry(target).or_default().push((w, value));
        }
    }
    by_target
        .into_iter()
        .map(|(target, writes)| {
            let latest_committed_send = writes
                .iter()
                .filter(|(w, _)| matches!(w.outcome, Outcome::Committed { .. }))
                .map(|(w, _)| w.sent_at)
                .max();
            let allowed = writes
                .iter()
                .filter(|(w, _)| latest_committed_send.is_none_or(|sent| w.answered_at >= sent))
                .map(|(_, value)| value.clone())
                .collect();
            (target, allowed)
        })
        .collect()
}

/// The target a write sets and the value it leaves there, for the writes whose final value the
/// checker can read back from the store.
fn final_value_of(kind: &WriteKind) -> Option<(String, String)> {
    Some(match kind {
        WriteKind::SandboxSetting { sandbox, value } => {
            (format!("setting of {sandbox}"), value.clone())
        }
        WriteKind::WorkspaceSetting { value } => ("workspace setting".into(), value.clone()),
        WriteKind::GlobalSetting { value } => ("global setting".into(), value.to_string()),
        WriteKind::ProviderValue { value } => ("provider value".into(), value.clone()),
        WriteKind::Attachment { sandbox, attach } => {
            (format!("attachment of {sandbox}"), attach.to_string())
        }
        WriteKind::Lifecycle { sandbox, stop } => (format!("stop of {sandbox}"), stop.to_string()),
        WriteKind::CreateSandbox { sandbox } => (format!("churn {sandbox}"), "live".into()),
        WriteKind::DeleteSandbox { sandbox } => (format!("churn {sandbox}"), "deleted".into()),
        WriteKind::Policy { .. } => return None,
    })
}

fn check_last_known_good(
    h: &History,
    logs: &HashMap<String, Vec<ApplyLogEntry>>,
    supervisors: &[SupervisorView],
    report: &mut Report,
) {
    let refused: HashSet<&str> = h
        .writes
        .iter()
        .filter_map(|w| match (&w.kind, &w.outcome) {
            (WriteKind::Policy { refused: true, .. }, Outcome::Committed { policy_hash, .. }) => {
                Some(policy_hash.as_str())
            }
            _ => None,
        })
        .collect();
    for (sandbox, entries) in logs {
        for e in entries {
            if refused.contains(e.policy_hash.as_str()) {
                report.violations.push(format!(
                    "the supervisor of {sandbox} ran policy revision {} ({}), which its hook \
                     refuses: {e:?}",
                    e.policy_revision, e.policy_hash
                ));
            }
        }
    }
    for s in supervisors {
        let policy =
            std::fs::read_to_string(s.state_dir.join("active/policy.json")).unwrap_or_default();
        if has_refused_port(&policy) {
            report.violations.push(format!(
                "the supervisor of {} has a refused policy active",
                s.sandbox_id
            ));
        }
    }
}

/// Waits until every live supervisor's active files match the store, or the bound passes;
/// returns the time since the heal, or what still differs.
async fn converge(
    api: &mut Api,
    supervisors: &[SupervisorView],
    store: &StoreView,
    healed: Instant,
    bound: Duration,
) -> Result<Duration, Vec<String>> {
    let _ = api;
    loop {
        let diffs: Vec<String> = supervisors
            .iter()
            .filter(|s| s.live)
            .filter_map(|s| {
                let want = store.sandboxes.get(&s.sandbox_id)?;
                difference(&s.state_dir, want, store)
                    .map(|d| format!("the supervisor of {} has not converged: {d}", s.sandbox_id))
            })
            .collect();
        if diffs.is_empty() {
            return Ok(healed.elapsed());
        }
        if healed.elapsed() > bound {
            return Err(diffs);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What differs between a supervisor's active configuration and the store's, if anything.
fn difference(state_dir: &Path, want: &SandboxView, store: &StoreView) -> Option<String> {
    let read = |name: &str| -> Value {
        std::fs::read(state_dir.join("active").join(name))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or(Value::Null)
    };
    let revisions = read("revisions.json");
    let env = read("provider-env.json");
    let active_policy = revisions["policy_revision"].as_u64().unwrap_or(0);
    let latest = want.sandbox.policy_revision;
    let mut diffs = Vec::new();
    match want.policies.get(&latest) {
        // The latest is refused: a last-known-good revision before it, any that was accepted.
        Some((_, true))
            if !(active_policy < latest
                && want.policies.get(&active_policy).is_some_and(|(_, r)| !r)) =>
        {
            diffs.push(format!(
                "policy revision {active_policy} is active; the latest ({latest}) is refused, \
                 so an accepted earlier one should be"
            ));
        }
        Some((_, true)) => {}
        _ if active_policy != latest => {
            diffs.push(format!(
                "policy revision {active_policy}, the store's is {latest}"
            ));
        }
        _ => {}
    }
    if let Some((hash, _)) = want.policies.get(&active_policy)
        && revisions["policy_hash"].as_str() != Some(hash.as_str())
    {
        diffs.push(format!(
            "policy hash {} for revision {active_policy}, the store's is {hash}",
            revisions["policy_hash"]
        ));
    }
    for (field, expected) in [
        ("global_settings_revision", store.global_settings_revision),
        (
            "workspace_settings_revision",
            store.workspace_settings_revision,
        ),
        ("sandbox_settings_revision", want.sandbox.settings_revision),
        ("attachment_epoch", want.sandbox.attachment_epoch),
    ] {
        if revisions[field].as_u64() != Some(expected) {
            diffs.push(format!(
                "{field} {}, the store's is {expected}",
                revisions[field]
            ));
        }
    }
    if let Err(mix) = whole_generation(state_dir) {
        diffs.push(mix);
    }
    let attached = want.sandbox.providers().iter().any(|p| p == PROVIDER);
    let value = env["values"][PROVIDER_VALUE]["value"].as_str();
    let expected = attached
        .then_some(store.provider_value.as_deref())
        .flatten();
    if value != expected {
        diffs.push(format!(
            "{PROVIDER_VALUE} is {value:?}, the store's is {expected:?}"
        ));
    }
    (!diffs.is_empty()).then(|| diffs.join("; "))
}

/// Checks that the state directory's active generation is one whole configuration: the
/// policy's hash, the settings' revisions and the provider environment's revision are the
/// ones `revisions.json` names.
///
/// The supervisor may be switching generations while this reads (it removes the previous
/// one right after a switch), so a reading is trusted only when `active` pointed at the same
/// generation before and after it, and a failing one is read again a few times: a real mix
/// stays on disk until the next apply, a reader overtaken by a switch does not.
pub fn whole_generation(state_dir: &Path) -> Result<(), String> {
    const READINGS: usize = 10;
    let active = state_dir.join("active");
    let resolve = || match std::fs::read_link(&active) {
        Ok(target) => Ok(Some(target)),
        // Never started far enough to have one.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(format!("{}: {err}", active.display())),
    };
    let mut last = Ok(());
    for _ in 0..READINGS {
        let Some(before) = resolve()? else {
            return Ok(());
        };
        let verdict = read_generation(&state_dir.join(&before));
        let stable = resolve()?.is_some_and(|after| after == before);
        match verdict {
            Ok(()) if stable => return Ok(()),
            Err(err) if stable => last = Err(err),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    last
}

/// One reading of generation `target`, every file read once.
fn read_generation(target: &Path) -> Result<(), String> {
    let read = |name: &str| std::fs::read(target.join(name)).ok();
    let Some(revisions) = read("revisions.json") else {
        // An empty generation (nothing applied yet) holds no file at all; a quarantine with
        // nothing known good to keep (a refused first configuration, or one refused after a
        // damaged generation was set aside) holds the deny-all marker alone.
        let names: Vec<String> = std::fs::read_dir(target)
            .map_err(|err| format!("{}: {err}", target.display()))?
            .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
            .collect();
        let marker_alone = names == [openshell_supervisor::file_applier::stage::QUARANTINE_FILE];
        return if names.is_empty() || marker_alone {
            Ok(())
        } else {
            Err(format!(
                "{} has {names:?} but no revisions.json",
                target.display()
            ))
        };
    };
    let json = |bytes: Option<Vec<u8>>, name: &str| -> Result<Value, String> {
        let bytes = bytes.ok_or_else(|| format!("{name} is missing from {}", target.display()))?;
        serde_json::from_slice(&bytes).map_err(|err| format!("{name} is not JSON: {err}"))
    };
    let revisions = json(Some(revisions), "revisions.json")?;
    let policy = read("policy.json").ok_or("policy.json is missing")?;
    let policy_text = String::from_utf8_lossy(&policy);
    let hash = openshell_core::policy::hash_of_canonical_json(policy_text.trim_end_matches('\n'));
    let mut mix = Vec::new();
    if revisions["policy_hash"].as_str() != Some(hash.as_str()) {
        mix.push(format!(
            "policy.json hashes to {hash}, revisions.json names {}",
            revisions["policy_hash"]
        ));
    }
    let settings = json(read("settings.json"), "settings.json")?;
    for (scope, field) in [
        ("global", "global_settings_revision"),
        ("workspace", "workspace_settings_revision"),
        ("sandbox", "sandbox_settings_revision"),
    ] {
        if settings["revisions"][scope] != revisions[field] {
            mix.push(format!(
                "settings.json has {scope} revision {}, revisions.json {}",
                settings["revisions"][scope], revisions[field]
            ));
        }
    }
    let env = json(read("provider-env.json"), "provider-env.json")?;
    if env["provider_env_revision"] != revisions["provider_env_revision"] {
        mix.push(format!(
            "provider-env.json has revision {}, revisions.json {}",
            env["provider_env_revision"], revisions["provider_env_revision"]
        ));
    }
    if mix.is_empty() {
        Ok(())
    } else {
        Err(format!("{} is a mix: {}", target.display(), mix.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::OperationState as S;

    #[test]
    fn legal_and_illegal_paths() {
        assert_eq!(illegal_path(&[S::Pending, S::Delivered, S::Applied]), None);
        assert_eq!(illegal_path(&[S::Pending, S::Superseded]), None);
        assert!(illegal_path(&[S::Applied, S::Failed]).is_some());
        assert!(illegal_path(&[S::Delivered, S::Pending]).is_some());
        assert!(illegal_path(&[S::Failed, S::Pending]).is_some());
    }

    fn global_write(value: i64, sent_ms: u64, answered_ms: u64, outcome: Outcome) -> WriteRecord {
        let zero = Instant::now();
        WriteRecord {
            seq: 0,
            key: String::new(),
            kind: WriteKind::GlobalSetting { value },
            outcome,
            attempts: 1,
            sent_at: zero + Duration::from_millis(sent_ms),
            answered_at: zero + Duration::from_millis(answered_ms),
        }
    }

    fn committed() -> Outcome {
        Outcome::Committed {
            operation: None,
            policy_revision: 0,
            policy_hash: String::new(),
        }
    }

    fn final_globals(writes: &[WriteRecord]) -> Vec<String> {
        let mut values = possible_final_values(writes)
            .remove("global setting")
            .unwrap_or_default();
        values.sort();
        values
    }

    #[test]
    fn overlapping_writes_may_each_hold_the_final_value() {
        // A write retried through a gateway restart is answered after a fanout that committed
        // after it: either may be the last one the store kept.
        let writes = [
            global_write(1066, 0, 900, committed()),
            global_write(50007, 300, 400, committed()),
        ];
        assert_eq!(final_globals(&writes), ["1066", "50007"]);
    }

    #[test]
    fn a_write_sent_after_another_was_answered_supersedes_it() {
        let writes = [
            global_write(1, 0, 100, committed()),
            global_write(2, 200, 300, committed()),
            global_write(
                3,
                50,
                150,
                Outcome::Unknown {
                    last_error: String::new(),
                },
            ),
            global_write(
                4,
                250,
                260,
                Outcome::Refused {
                    code: tonic::Code::InvalidArgument,
                    message: String::new(),
                },
            ),
        ];
        assert_eq!(final_globals(&writes), ["2"]);
    }

    #[test]
    fn a_quarantine_with_nothing_to_keep_is_a_whole_generation() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_generation(dir.path()), Ok(()), "empty");
        std::fs::write(dir.path().join("quarantine.json"), b"{}").unwrap();
        assert_eq!(read_generation(dir.path()), Ok(()), "the marker alone");
        std::fs::write(dir.path().join("settings.json"), b"{}").unwrap();
        assert!(
            read_generation(dir.path()).is_err(),
            "settings without revisions"
        );
    }

    #[test]
    fn refused_ports_are_found_in_yaml_and_json() {
        assert!(has_refused_port("  port: 6612\n"));
        assert!(has_refused_port(r#"{"port":6699,"x":1}"#));
        assert!(!has_refused_port("port: 443\n  port: 16612\n"));
        assert!(!has_refused_port(r#"{"ports":[443]}"#));
    }
}
