//! `InspectSession`: why a sandbox has, or has not, got its configuration,
//! with a plain-language hint for every abnormal state found.

use openshell_proto::v1 as pb;

use crate::config::DeliveryMode;
use crate::delivery::task::ComponentState;
use crate::delivery::{Component, Publisher};
use crate::error::Result;
use crate::session_registry::NegotiatedMode;
use crate::session_registry::{SessionInfo, SessionRegistry};
use crate::store::{LastReport, Lifecycle, OperationFilter, OperationState, SandboxRecord, Store};
use crate::wire;

/// How long a session replacement stays worth mentioning.
const REPLACEMENT_WINDOW_MS: i64 = 10 * 60 * 1000;

/// What an inspection reads: the store, and this replica's sessions and
/// their delivery state.
pub struct InspectInputs<'a> {
    pub store: &'a Store,
    pub sessions: &'a SessionRegistry,
    pub publisher: &'a Publisher,
    pub gateway_mode: DeliveryMode,
    pub replica_id: &'a str,
}

pub async fn inspect(
    inputs: &InspectInputs<'_>,
    sandbox: &SandboxRecord,
) -> Result<pb::SessionInspection> {
    let pending = inputs
        .store
        .list_operations(&OperationFilter {
            sandbox_id: Some(sandbox.id.clone()),
            workspace: None,
            states: vec![OperationState::Pending, OperationState::Delivered],
            limit: 50,
            offset: 0,
        })
        .await?;
    let last_report = inputs.store.last_report(&sandbox.id).await?;
    let progress = inputs
        .store
        .policy_progress(std::slice::from_ref(&sandbox.id))
        .await?;
    let session = inputs.sessions.get(&sandbox.id);
    let gateway_mode = inputs.gateway_mode;
    let (components, events) = match inputs.publisher.get(&sandbox.id) {
        Some(d) => d.diagnostics(),
        None => (Vec::new(), Vec::new()),
    };
    let credential_expiry = credential_expiry(inputs.store, &sandbox.id).await?;
    let mut hints = lifecycle_hints(sandbox);
    expiry_hints(&mut hints, &credential_expiry, crate::store::now_ms());
    session_hints(&mut hints, sandbox, session.as_ref(), gateway_mode);
    if session.is_none()
        && let Some((at, reason)) = inputs.sessions.last_refusal(&sandbox.id)
    {
        hints.push(format!(
            "this gateway refused the sandbox's last session {}s ago: {reason}",
            (crate::store::now_ms() - at).max(0) / 1000
        ));
    }
    if let Some(s) = &session
        && let Some((at, reason)) = inputs.sessions.last_refusal(&sandbox.id)
        && at >= s.connected_at_ms
    {
        hints.push(format!(
            "while this session is open, this gateway refused another of the sandbox {}s ago: {reason}",
            (crate::store::now_ms() - at).max(0) / 1000
        ));
    }
    readiness_hints(&mut hints, session.as_ref());
    report_hints(&mut hints, sandbox, last_report.as_ref());
    component_hints(&mut hints, &components);
    if !pending.is_empty() && session.is_some() {
        hints.push(format!(
            "{} operation(s) waiting for the supervisor to report the new revision",
            pending.len()
        ));
    }
    Ok(pb::SessionInspection {
        sandbox: Some(wire::sandbox_with_applied(
            sandbox,
            progress.get(&sandbox.id),
        )),
        gateway_mode: gateway_mode.as_str().to_string(),
        connected: session.is_some(),
        negotiated_mode: session
            .as_ref()
            .map_or(pb::DeliveryMode::Unspecified, |s| s.mode.to_pb())
            as i32,
        negotiated_reason: session
            .as_ref()
            .map(|s| s.mode_reason.clone())
            .unwrap_or_default(),
        supervisor_version: session
            .as_ref()
            .map(|s| s.supervisor_version.clone())
            .unwrap_or_default(),
        protocol_revision: session.as_ref().map_or(0, |s| s.protocol_revision),
        supports_config_snapshots: session
            .as_ref()
            .is_some_and(|s| s.supports_config_snapshots),
        supports_config_apply: session.as_ref().is_some_and(|s| s.supports_config_apply),
        owner_replica: session
            .as_ref()
            .map(|_| inputs.replica_id.to_string())
            .unwrap_or_default(),
        session_id: session
            .as_ref()
            .map(|s| s.session_id.clone())
            .unwrap_or_default(),
        connected_at: session.as_ref().map(|s| wire::timestamp(s.connected_at_ms)),
        last_heartbeat_at: session
            .as_ref()
            .map(|s| wire::timestamp(s.last_heartbeat_ms)),
        components: components
            .iter()
            .map(|(component, c)| pb::ComponentDelivery {
                component: component.as_str().to_string(),
                desired: c.desired.clone(),
                sent: c.sent.clone(),
                sent_at: c.sent_at_ms.map(wire::timestamp),
                acked: c.acked.clone(),
                ack_status: c.ack_status.clone(),
                acked_at: c.acked_at_ms.map(wire::timestamp),
                dirty: c.dirty,
                lane: c.lane.clone(),
                held: c.held,
                last_failure: c.last_failure.clone(),
                backoff: Some(prost_types::Duration {
                    seconds: i64::try_from(c.backoff.as_secs()).unwrap_or(i64::MAX),
                    nanos: i32::try_from(c.backoff.subsec_nanos()).unwrap_or(0),
                }),
            })
            .collect(),
        pending_operations: pending.iter().map(wire::operation).collect(),
        recent_events: events
            .iter()
            .map(|(at, text)| pb::DeliveryEvent {
                at: Some(wire::timestamp(*at)),
                text: text.clone(),
            })
            .collect(),
        hints,
        last_report: last_report
            .as_ref()
            .map(|r| {
                if r.reason.is_empty() {
                    format!("{} {}", r.status, r.revisions_json)
                } else {
                    format!("{} {} ({})", r.status, r.revisions_json, r.reason)
                }
            })
            .unwrap_or_default(),
        last_report_at: last_report.as_ref().map(|r| wire::timestamp(r.reported_at)),
        runtime_readiness: session.as_ref().and_then(|s| s.runtime_readiness.clone()),
        credential_expiry: credential_expiry
            .iter()
            .map(|e| pb::CredentialExpiry {
                name: e.name.clone(),
                provider: e.provider.clone(),
                expires_at: Some(wire::timestamp(e.expires_at_ms)),
            })
            .collect(),
    })
}

/// One credential of an attached provider that expires.
struct Expiry {
    name: String,
    provider: String,
    expires_at_ms: i64,
}

/// The expiring credentials of a sandbox's providers, soonest first.
async fn credential_expiry(store: &Store, sandbox_id: &str) -> Result<Vec<Expiry>> {
    let mut out: Vec<Expiry> = store
        .attached_providers(sandbox_id)
        .await?
        .iter()
        .flat_map(|provider| {
            provider.credential_names.iter().filter_map(|name| {
                Some(Expiry {
                    name: name.clone(),
                    provider: provider.name.clone(),
                    expires_at_ms: provider.credential_expires_at(name)?,
                })
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.expires_at_ms
            .cmp(&b.expires_at_ms)
            .then(a.name.cmp(&b.name))
    });
    Ok(out)
}

/// Expired credentials, and ones about to expire, deserve a line of their own.
fn expiry_hints(hints: &mut Vec<String>, expiry: &[Expiry], now_ms: i64) {
    const SOON_MS: i64 = 10 * 60 * 1000;
    for e in expiry {
        let seconds = (e.expires_at_ms - now_ms) / 1000;
        if e.expires_at_ms <= now_ms {
            hints.push(format!(
                "credential {} of provider {} expired {}s ago: the supervisor withholds it from the workload until the provider is refreshed or updated",
                e.name, e.provider, -seconds
            ));
        } else if e.expires_at_ms - now_ms <= SOON_MS {
            hints.push(format!(
                "credential {} of provider {} expires in {}s",
                e.name, e.provider, seconds
            ));
        }
    }
}

/// A workload held back by unreachable fail_closed middleware is abnormal. (One started
/// without a fail_open middleware shows in the readiness itself: it runs, as configured.)
fn readiness_hints(hints: &mut Vec<String>, session: Option<&SessionInfo>) {
    let Some(readiness) = session.and_then(|s| s.runtime_readiness.as_ref()) else {
        return;
    };
    let blocking: Vec<&str> = readiness
        .middlewares
        .iter()
        .filter(|m| !m.reachable && m.fail_closed)
        .map(|m| m.name.as_str())
        .collect();
    if !readiness.workload_started && !blocking.is_empty() {
        hints.push(format!(
            "workload not started: waiting for fail_closed middleware {}; the supervisor starts it as soon as it answers",
            blocking.join(", ")
        ));
    }
}

fn lifecycle_hints(sandbox: &SandboxRecord) -> Vec<String> {
    let mut hints = Vec::new();
    match sandbox.lifecycle {
        Lifecycle::Deleted => hints.push("sandbox is deleted; nothing is delivered to it".to_string()),
        Lifecycle::Stopped => hints.push(
            "sandbox is stopped: the gateway delivers it nothing and refuses its supervisor's sessions; changes are stored and take effect when it starts".to_string(),
        ),
        _ => {}
    }
    hints
}

fn session_hints(
    hints: &mut Vec<String>,
    sandbox: &SandboxRecord,
    session: Option<&SessionInfo>,
    gateway_mode: DeliveryMode,
) {
    match session {
        None if sandbox.lifecycle != Lifecycle::Deleted => hints.push(
            "no supervisor is connected for this sandbox; changes are stored and delivered when it connects"
                .to_string(),
        ),
        Some(s) => {
            if gateway_mode == DeliveryMode::Poll {
                hints.push("gateway is in poll mode: the supervisor picks up changes on its next poll (every 10 s by default)".to_string());
            } else if s.protocol_revision == 0 {
                hints.push("legacy supervisor (protocol revision 0) keeps polling; upgrade it to get pushed configuration".to_string());
            } else if s.mode == NegotiatedMode::ShadowPush {
                hints.push("supervisor receives pushed snapshots but cannot apply them (shadow push); it keeps polling".to_string());
            }
            if s.replaced_sessions > 0
                && let Some(at) = s.last_replaced_at_ms
                && crate::store::now_ms() - at < REPLACEMENT_WINDOW_MS
            {
                hints.push(format!(
                    "this sandbox's session was replaced by a newer one {} time(s), last {}s ago; \
                     if the supervisors keep replacing each other, two of them are using this sandbox's credential",
                    s.replaced_sessions,
                    (crate::store::now_ms() - at) / 1000
                ));
            }
            if s.local_policy_override {
                hints.push("local policy override retained: the supervisor keeps its local policy file; gateway policy changes end INACTIVE".to_string());
            }
        }
        None => {}
    }
}

/// What the supervisor's last report says about the configuration it runs.
fn report_hints(
    hints: &mut Vec<String>,
    sandbox: &SandboxRecord,
    last_report: Option<&LastReport>,
) {
    if let Some(report) = last_report
        && report.status.starts_with("FAILED")
    {
        let attempted = serde_json::from_str::<crate::operations::resolution::ReportedRevisions>(
            &report.revisions_json,
        )
        .map(|r| format!(" (policy revision {} was rejected)", r.policy_revision))
        .unwrap_or_default();
        let reason = if report.reason.is_empty() {
            "no reason given"
        } else {
            report.reason.as_str()
        };
        // A sandbox still pending has never applied a configuration: there is no
        // last-known-good, and its workload has not started.
        if sandbox.lifecycle == Lifecycle::Pending {
            hints.push(format!(
                "sandbox has not started: its startup configuration failed on the supervisor: \
                 {reason}{attempted}; the workload waits for an accepted bootstrap and the \
                 supervisor retries its session with backoff"
            ));
            return;
        }
        hints.push(format!(
            "last update failed: {reason}{attempted}; the supervisor keeps its last-known-good configuration",
        ));
        if report.status == "FAILED_CLOSED" {
            hints.push("the sandbox is quarantined (fail_closed): network access is denied until a valid configuration applies".to_string());
        }
    }
    if let Some(report) = last_report
        && report.status == "RETAINED_LAST_KNOWN_GOOD_POLICY"
    {
        // The supervisor's reason reads "policy revision N was rejected: REASON; fix it first".
        hints.push(format!(
            "{}; settings and provider changes still apply, with the last-known-good policy",
            if report.reason.is_empty() {
                "the gateway's policy was rejected; fix it first"
            } else {
                report.reason.as_str()
            },
        ));
    }
    if let Some(report) = last_report
        && report.status == "RETAINED_LOCAL_OVERRIDE"
        && !hints.iter().any(|h| h.starts_with("local policy override"))
    {
        hints.push("local policy override retained: the supervisor keeps its local policy file; gateway policy changes end INACTIVE".to_string());
    }
}

fn component_hints(hints: &mut Vec<String>, components: &[(Component, ComponentState)]) {
    for (component, c) in components {
        if c.held {
            hints.push(format!(
                "{} update held: waiting for the supervisor to acknowledge the previous one",
                component.as_str()
            ));
        }
        if !c.backoff.is_zero() {
            hints.push(format!(
                "{} builds are backing off for {:?} after failures: {}",
                component.as_str(),
                c.backoff,
                c.last_failure
            ));
        }
    }
}
