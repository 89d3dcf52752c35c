//! Table layouts of the SDK view types. JSON and YAML need none: they
//! serialize the view types directly, so their shape is the SDK's.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::SystemTime;

use openshell_sdk::{
    FleetProgress, GatewayInfo, Operation, PolicyRevision, PolicySource, Provider, Sandbox,
    SandboxPolicy, ScopeSettings, SessionInspection, SessionSummary, Setting, SettingDefinition,
    SettingScope, SettingValue, UpdateResult,
};

use crate::output::{
    Column, Output, age, dash, finish, list_or_dash, revision, sanitize, section, short_hash,
    yes_no,
};
use crate::progress::paint;

const GREEN: &str = "32";
const YELLOW_BOLD: &str = "1;33";

pub fn sandbox(out: &Output, sb: &Sandbox) -> String {
    finish(out.kv(sandbox_rows(sb)))
}

pub fn sandbox_rows(sb: &Sandbox) -> Vec<(&'static str, String)> {
    vec![
        ("name", sb.name.clone()),
        ("workspace", sb.workspace.clone()),
        ("id", sb.id.clone()),
        ("lifecycle", lifecycle_text(sb)),
        ("desired policy revision", revision(sb.policy_revision)),
        ("applied policy revision", applied_text(sb)),
        ("settings revision", revision(sb.settings_revision)),
        ("attachment epoch", sb.attachment_epoch.to_string()),
        ("providers", list_or_dash(&sb.providers)),
        ("created", dash(sb.created_at.as_deref())),
        ("updated", dash(sb.updated_at.as_deref())),
    ]
}

/// The lifecycle, and a quarantine with its reason: "RUNNING, QUARANTINED: all network
/// access denied (hook failed …)".
fn lifecycle_text(sb: &Sandbox) -> String {
    match &sb.quarantine_reason {
        Some(reason) => format!(
            "{}, QUARANTINED: all network access denied until a configuration applies ({reason})",
            sb.lifecycle
        ),
        None => sb.lifecycle.to_string(),
    }
}

/// The applied revision with its hash, "3 (hash 1a2b3c4d5e6f)", or "-".
fn applied_text(sb: &Sandbox) -> String {
    if sb.applied_policy_revision == 0 {
        return "-".to_owned();
    }
    format!(
        "{} (hash {})",
        sb.applied_policy_revision,
        short_hash(sb.applied_policy_hash.as_deref())
    )
}

pub fn sandboxes(out: &Output, list: &[Sandbox]) -> String {
    let now = SystemTime::now();
    out.table(
        list,
        &[
            Column::new("NAME", |sb: &Sandbox| sb.name.clone()),
            Column::new("WORKSPACE", |sb: &Sandbox| sb.workspace.clone()),
            Column::new("ID", |sb: &Sandbox| sb.id.clone()).wide(),
            Column::new("LIFECYCLE", |sb: &Sandbox| match sb.quarantine_reason {
                Some(_) => format!("{} (QUARANTINED)", sb.lifecycle),
                None => sb.lifecycle.to_string(),
            }),
            Column::new("DESIRED", |sb: &Sandbox| revision(sb.policy_revision)),
            Column::new("APPLIED", |sb: &Sandbox| {
                revision(sb.applied_policy_revision)
            }),
            Column::new("APPLIED HASH", |sb: &Sandbox| {
                short_hash(sb.applied_policy_hash.as_deref())
            })
            .wide(),
            Column::new("SETTINGS REV", |sb: &Sandbox| {
                revision(sb.settings_revision)
            })
            .wide(),
            Column::new("PROVIDERS", |sb: &Sandbox| list_or_dash(&sb.providers)).cut(),
            Column::new("AGE", move |sb: &Sandbox| {
                age(sb.created_at.as_deref(), now)
            }),
            Column::new("CREATED", |sb: &Sandbox| dash(sb.created_at.as_deref())).wide(),
        ],
    )
}

fn fleet_text(fleet: &FleetProgress) -> String {
    format!(
        "{}/{} applied, {} failed, {} pending, {} inactive, {} superseded, {} cancelled",
        fleet.applied,
        fleet.targets,
        fleet.failed,
        fleet.pending,
        fleet.inactive,
        fleet.superseded,
        fleet.cancelled
    )
}

pub fn operation_rows(op: &Operation) -> Vec<(&'static str, String)> {
    let target = if op.target.is_empty() {
        op.target_kind.to_string()
    } else {
        format!("{} {}", op.target_kind, op.target)
    };
    let mut rows = vec![
        ("id", op.id.clone()),
        ("target", target),
        ("state", op.state.to_string()),
        ("outcome", op.outcome.to_string()),
    ];
    if let Some(error) = &op.error {
        rows.push(("error", error.clone()));
    }
    rows.extend([
        ("policy revision", revision(op.policy_revision)),
        ("settings revision", revision(op.settings_revision)),
        (
            "global policy revision",
            revision(op.global_policy_revision),
        ),
        ("no-op", yes_no(op.no_op)),
        ("idempotency key", dash(op.idempotency_key.as_deref())),
        ("caller", dash(Some(&op.caller))),
        ("created", dash(op.created_at.as_deref())),
        ("updated", dash(op.updated_at.as_deref())),
        ("completed", dash(op.completed_at.as_deref())),
    ]);
    if op.wait_timed_out {
        rows.push(("wait timed out", yes_no(true)));
    }
    if let Some(fleet) = &op.fleet {
        rows.push(("fleet", fleet_text(fleet)));
    }
    rows
}

pub fn operation(out: &Output, op: &Operation) -> String {
    finish(out.kv(operation_rows(op)))
}

pub fn update_result(out: &Output, result: &UpdateResult) -> String {
    let Some(operation) = &result.operation else {
        return dry_run(out, result);
    };
    let mut rows = operation_rows(operation);
    if result.idempotent_replay {
        rows.push(("idempotent replay", yes_no(true)));
    }
    finish(out.kv(rows))
}

/// A dry run's changes, one per line: `+ network policy github`,
/// `~ network policy api: - endpoint old.example.com:443`, `~ setting
/// log_level: info -> debug`. Colored like a diff when color is on.
pub fn dry_run(out: &Output, result: &UpdateResult) -> String {
    let mut text = String::new();
    if result.idempotent_replay {
        text.push_str(
            "dry run: the idempotency key matches an earlier, equal request; the write would change nothing\n",
        );
        return crate::diff::colorize(&text, out.color);
    }
    let lines = dry_run_lines(result);
    text.push_str("dry run: nothing was written\n");
    if let Some(diff) = &result.policy_diff {
        let against = if diff.current_revision == 0 {
            "no policy yet".to_owned()
        } else {
            format!("revision {}", diff.current_revision)
        };
        let _ = writeln!(text, "policy compared with: {against}");
    }
    if lines.is_empty() {
        text.push_str("no changes\n");
    }
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    crate::diff::colorize(&text, out.color)
}

fn dry_run_lines(result: &UpdateResult) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(diff) = &result.policy_diff {
        for section in &diff.changed_static_sections {
            lines.push(format!("~ static section {section}"));
        }
        for section in &diff.changed_sections {
            lines.push(format!("~ {section}"));
        }
        for name in &diff.added_policies {
            lines.push(format!("+ network policy {name}"));
        }
        for name in &diff.removed_policies {
            lines.push(format!("- network policy {name}"));
        }
        for change in &diff.changed_policies {
            let mut details = Vec::new();
            details.extend(
                change
                    .added_endpoints
                    .iter()
                    .map(|e| format!("+ endpoint {e}")),
            );
            details.extend(
                change
                    .removed_endpoints
                    .iter()
                    .map(|e| format!("- endpoint {e}")),
            );
            details.extend(
                change
                    .changed_endpoints
                    .iter()
                    .map(|e| format!("~ endpoint {e}")),
            );
            details.extend(change.changed_fields.iter().map(|f| format!("~ {f}")));
            if details.is_empty() {
                lines.push(format!("~ network policy {}", change.name));
            }
            for detail in details {
                lines.push(format!("~ network policy {}: {detail}", change.name));
            }
        }
    }
    for setting in &result.setting_changes {
        let show = |v: &Option<SettingValue>| {
            v.as_ref()
                .map_or_else(|| "(unset)".to_owned(), ToString::to_string)
        };
        let sign = match (&setting.old_value, &setting.new_value) {
            (None, Some(_)) => '+',
            (Some(_), None) => '-',
            _ => '~',
        };
        lines.push(format!(
            "{sign} setting {}: {} -> {}",
            setting.key,
            show(&setting.old_value),
            show(&setting.new_value)
        ));
    }
    lines
}

/// `names`: sandbox names by id, shown for sandbox targets; an id without
/// a name is shown as it is.
pub fn operations(out: &Output, list: &[Operation], names: &HashMap<String, String>) -> String {
    let now = SystemTime::now();
    out.table(
        list,
        &[
            Column::new("ID", |op: &Operation| op.id.clone()),
            Column::new("TARGET", |op: &Operation| {
                if op.target.is_empty() {
                    op.target_kind.to_string()
                } else {
                    names.get(&op.target).unwrap_or(&op.target).clone()
                }
            }),
            Column::new("TARGET ID", |op: &Operation| dash(Some(&op.target))).wide(),
            Column::new("KIND", |op: &Operation| op.target_kind.to_string()).wide(),
            Column::new("STATE", |op: &Operation| op.state.to_string()),
            Column::new("OUTCOME", |op: &Operation| op.outcome.to_string()).wide(),
            Column::new("POLICY REV", |op: &Operation| revision(op.policy_revision)),
            Column::new("SETTINGS REV", |op: &Operation| {
                revision(op.settings_revision)
            })
            .wide(),
            Column::new("GLOBAL REV", |op: &Operation| {
                revision(op.global_policy_revision)
            })
            .wide(),
            Column::new("AGE", move |op: &Operation| {
                age(op.created_at.as_deref(), now)
            }),
            Column::new("CREATED", |op: &Operation| dash(op.created_at.as_deref())).wide(),
            Column::new("CALLER", |op: &Operation| dash(Some(&op.caller))).wide(),
            Column::new("ERROR", |op: &Operation| dash(op.error.as_deref())).cut(),
        ],
    )
}

/// `policy get`: the revision read, and beside it what the sandbox's
/// supervisor runs, "4 (applied: 3, pending)", when `sandbox` is known. While
/// a global policy is set no sandbox revision runs, and the text says which does.
pub fn policy(out: &Output, p: &SandboxPolicy, sandbox: Option<&Sandbox>) -> String {
    let revision_text = if p.effective_source == PolicySource::Global {
        format!(
            "{} (not in effect: the global policy, revision {}, replaces it)",
            revision(p.policy.revision),
            p.global_policy_revision
        )
    } else {
        policy_revision_text(p.policy.revision, sandbox)
    };
    let mut rows = vec![
        ("sandbox id", dash(p.policy.sandbox_id.as_deref())),
        ("revision", revision_text),
        ("hash", dash(Some(&p.policy.policy_hash))),
    ];
    if let Some(sb) = sandbox {
        rows.push((
            "applied hash",
            short_hash(sb.applied_policy_hash.as_deref()),
        ));
    }
    rows.extend([
        ("effective source", p.effective_source.to_string()),
        ("global policy revision", revision(p.global_policy_revision)),
        ("created", dash(p.policy.created_at.as_deref())),
        ("operation", dash(p.policy.operation_id.as_deref())),
    ]);
    finish(out.kv(rows))
}

/// `policy get --global`: a global policy revision, and whether it is the one in effect.
pub fn global_policy(out: &Output, p: &SandboxPolicy) -> String {
    let cleared = p.policy.policy_hash.is_empty();
    let state = if cleared {
        "cleared the global policy".to_owned()
    } else if p.global_policy_revision == p.policy.revision {
        "in effect: replaces every sandbox's policy".to_owned()
    } else if p.global_policy_revision == 0 {
        "not in effect: the global policy is cleared".to_owned()
    } else {
        format!("not in effect: revision {} is", p.global_policy_revision)
    };
    finish(out.kv(vec![
        ("global policy revision", revision(p.policy.revision)),
        ("state", state),
        ("hash", dash(Some(&p.policy.policy_hash))),
        ("created", dash(p.policy.created_at.as_deref())),
        ("operation", dash(p.policy.operation_id.as_deref())),
    ]))
}

fn policy_revision_text(shown: u64, sandbox: Option<&Sandbox>) -> String {
    let Some(sb) = sandbox else {
        return revision(shown);
    };
    let applied = sb.applied_policy_revision;
    let latest = sb.policy_revision;
    let mut notes = Vec::new();
    if shown != latest && latest != 0 {
        notes.push(format!("latest: {latest}"));
    }
    if applied == latest && applied != 0 {
        notes.push(if shown == applied {
            "applied".to_owned()
        } else {
            format!("applied: {applied}")
        });
    } else {
        notes.push(format!("applied: {}", revision(applied)));
        notes.push("pending".to_owned());
    }
    format!("{} ({})", revision(shown), notes.join(", "))
}

pub fn policy_history(out: &Output, list: &[PolicyRevision]) -> String {
    let now = SystemTime::now();
    out.table(
        list,
        &[
            Column::new("REVISION", |r: &PolicyRevision| r.revision.to_string()),
            Column::new("HASH", |r: &PolicyRevision| {
                if r.policy_hash.is_empty() {
                    // A global policy revision that cleared it.
                    "(cleared)".to_owned()
                } else if out.wide() {
                    r.policy_hash.clone()
                } else {
                    short_hash(Some(&r.policy_hash))
                }
            }),
            Column::new("AGE", move |r: &PolicyRevision| {
                age(r.created_at.as_deref(), now)
            }),
            Column::new("CREATED", |r: &PolicyRevision| {
                dash(r.created_at.as_deref())
            })
            .wide(),
            Column::new("OPERATION", |r: &PolicyRevision| {
                dash(r.operation_id.as_deref())
            }),
        ],
    )
}

fn value_text(value: Option<&SettingValue>) -> String {
    value.map_or_else(|| "-".to_owned(), SettingValue::to_string)
}

fn settings_table(out: &Output, list: &[Setting], with_source: bool) -> String {
    let headers: &[&str] = if with_source {
        &["KEY", "VALUE", "SOURCE"]
    } else {
        &["KEY", "VALUE"]
    };
    let mut table = out.list(headers);
    for setting in list {
        let mut row = vec![setting.key.clone(), value_text(setting.value.as_ref())];
        if with_source {
            row.push(setting.scope.to_string());
        }
        table.add_row(row);
    }
    finish(table)
}

pub fn settings(out: &Output, s: &ScopeSettings) -> String {
    if s.scope == SettingScope::Sandbox {
        let mut text = settings_table(out, &s.effective, true);
        text.push_str(&format!(
            "\nsandbox scope revision {}, {} value(s) set at sandbox scope\n",
            s.revision,
            s.values.len()
        ));
        text
    } else {
        let mut text = settings_table(out, &s.values, false);
        text.push_str(&format!(
            "\n{} scope revision {}\n",
            s.scope.as_str().to_lowercase(),
            s.revision
        ));
        text
    }
}

pub fn setting_definitions(out: &Output, list: &[SettingDefinition]) -> String {
    let mut table = out.list(&["KEY", "KIND", "DEFAULT", "ALLOWED", "DESCRIPTION"]);
    table.cut("DESCRIPTION");
    for def in list {
        table.add_row(vec![
            def.key.clone(),
            def.kind.clone(),
            value_text(def.default_value.as_ref()),
            list_or_dash(&def.allowed_values),
            def.description.clone(),
        ]);
    }
    finish(table)
}

/// When a provider's credentials stop being valid, for its EXPIRES column: `-` when none
/// expires, `expired 3d ago` once the earliest has passed (the time itself when its age
/// cannot be told, before 1970), and the earliest time otherwise.
fn expiry(at: Option<&str>, now: SystemTime) -> String {
    let Some(at) = at else {
        return "-".to_owned();
    };
    // Every time the SDK gives has the same fixed-width UTC form, so text order is time order.
    let now_text = humantime::format_rfc3339_millis(now).to_string();
    if at > now_text.as_str() {
        return at.to_owned();
    }
    match age(Some(at), now) {
        known if known != "-" => format!("expired {known} ago"),
        _ => format!("expired {at}"),
    }
}

/// Each credential's expiry, one `NAME: when` line apiece, for the key/value view.
fn credential_expiry_lines(p: &Provider, now: SystemTime) -> String {
    if p.credential_expires_at.is_empty() {
        return "-".to_owned();
    }
    p.credential_expires_at
        .iter()
        .map(|(name, at)| format!("{name}: {}", expiry(Some(at), now)))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn provider(out: &Output, p: &Provider) -> String {
    let now = SystemTime::now();
    let env = if p.env.is_empty() {
        "-".to_owned()
    } else {
        p.env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let rows = vec![
        ("id", p.id.clone()),
        ("name", p.name.clone()),
        ("workspace", p.workspace.clone()),
        ("type", p.provider_type.clone()),
        ("env", env),
        ("credentials", list_or_dash(&p.credential_names)),
        ("revision", p.revision.to_string()),
        ("expires", expiry(p.expires_at.as_deref(), now)),
        ("credential expiry", credential_expiry_lines(p, now)),
        ("attached sandboxes", list_or_dash(&p.attached_sandbox_ids)),
        ("created", dash(p.created_at.as_deref())),
        ("updated", dash(p.updated_at.as_deref())),
    ];
    finish(out.kv(rows))
}

pub fn providers(out: &Output, list: &[Provider]) -> String {
    let now = SystemTime::now();
    out.table(
        list,
        &[
            Column::new("NAME", |p: &Provider| p.name.clone()),
            Column::new("WORKSPACE", |p: &Provider| p.workspace.clone()),
            Column::new("TYPE", |p: &Provider| p.provider_type.clone()),
            Column::new("ID", |p: &Provider| p.id.clone()).wide(),
            Column::new("REVISION", |p: &Provider| p.revision.to_string()),
            Column::new("ATTACHED", |p: &Provider| {
                p.attached_sandbox_ids.len().to_string()
            }),
            Column::new("EXPIRES", move |p: &Provider| {
                expiry(p.earliest_expiry(), now)
            }),
            Column::new("CREDENTIALS", |p: &Provider| {
                list_or_dash(&p.credential_names)
            })
            .cut(),
            Column::new("UPDATED", |p: &Provider| dash(p.updated_at.as_deref())).wide(),
            Column::new("AGE", move |p: &Provider| age(p.created_at.as_deref(), now)),
        ],
    )
}

pub fn sessions(out: &Output, list: &[SessionSummary]) -> String {
    let now = SystemTime::now();
    out.table(
        list,
        &[
            Column::new("SANDBOX", |s: &SessionSummary| s.sandbox_name.clone()),
            Column::new("SANDBOX ID", |s: &SessionSummary| s.sandbox_id.clone()).wide(),
            Column::new("SESSION", |s: &SessionSummary| s.session_id.clone()).wide(),
            Column::new("MODE", |s: &SessionSummary| s.mode.to_string()),
            Column::new("DESIRED", |s: &SessionSummary| revision(s.policy_revision)),
            Column::new("APPLIED", |s: &SessionSummary| {
                revision(s.applied_policy_revision)
            }),
            Column::new("SUPERVISOR", |s: &SessionSummary| {
                dash(Some(&s.supervisor_version))
            }),
            Column::new("PROTOCOL", |s: &SessionSummary| {
                s.protocol_revision.to_string()
            })
            .wide(),
            Column::new("REPLICA", |s: &SessionSummary| dash(Some(&s.replica_id))).wide(),
            Column::new("AGE", move |s: &SessionSummary| {
                age(s.connected_at.as_deref(), now)
            }),
            Column::new("HEARTBEAT", move |s: &SessionSummary| {
                age(s.last_heartbeat_at.as_deref(), now)
            }),
            Column::new("CONNECTED", |s: &SessionSummary| {
                dash(s.connected_at.as_deref())
            })
            .wide(),
        ],
    )
}

/// When the sandbox's provider credentials expire, soonest first; nothing
/// when none does.
fn credential_section(i: &SessionInspection, now: SystemTime) -> String {
    if i.credential_expiry.is_empty() {
        return String::new();
    }
    let mut lines = String::new();
    for c in &i.credential_expiry {
        let at = c.expires_at.as_deref();
        let when = match at.map(humantime::parse_rfc3339_weak) {
            Some(Ok(t)) if t <= now => format!("expired {} ago", age(at, now)),
            // The time left is the age of now, seen from the expiry.
            Some(Ok(t)) => format!(
                "expires in {}",
                age(Some(&humantime::format_rfc3339_seconds(now).to_string()), t)
            ),
            _ => "expiry unknown".to_owned(),
        };
        let _ = writeln!(
            lines,
            "{} ({}): {when} ({})",
            sanitize(&c.name),
            sanitize(&c.provider),
            dash(at)
        );
    }
    section("Credentials", &lines)
}

pub fn inspection(out: &Output, i: &SessionInspection) -> String {
    let now = SystemTime::now();
    let at = |time: Option<&str>| match time {
        Some(t) => format!("{} ago ({t})", age(Some(t), now)),
        None => "-".to_owned(),
    };
    let mut rows = Vec::new();
    match &i.sandbox {
        Some(sb) => rows.extend([
            ("sandbox", format!("{}/{}", sb.workspace, sb.name)),
            ("sandbox id", sb.id.clone()),
            ("lifecycle", sb.lifecycle.to_string()),
            ("desired policy revision", revision(sb.policy_revision)),
            ("applied policy revision", applied_text(sb)),
        ]),
        None => rows.push(("sandbox", "-".to_owned())),
    }
    rows.extend([
        ("gateway mode", dash(Some(&i.gateway_mode))),
        ("connected", yes_no(i.connected)),
        ("negotiated mode", i.negotiated_mode.to_string()),
        ("negotiated reason", dash(Some(&i.negotiated_reason))),
        ("supervisor version", dash(Some(&i.supervisor_version))),
        ("protocol revision", i.protocol_revision.to_string()),
        (
            "supports config snapshots",
            yes_no(i.supports_config_snapshots),
        ),
        ("supports config apply", yes_no(i.supports_config_apply)),
        ("owner replica", dash(i.owner_replica.as_deref())),
        ("session id", dash(i.session_id.as_deref())),
        ("connected at", at(i.connected_at.as_deref())),
        ("last heartbeat", at(i.last_heartbeat_at.as_deref())),
    ]);
    match i.last_report.as_deref().filter(|r| !r.is_empty()) {
        Some(raw) => {
            let report = LastReport::decode(raw);
            rows.push(("last report", report.state.to_owned()));
            if let Some(revisions) = &report.revisions {
                rows.push((
                    "reported revision",
                    format!(
                        "{} (hash {})",
                        revision(revisions.policy_revision),
                        short_hash(Some(&revisions.policy_hash))
                    ),
                ));
            }
            if let Some(error) = report.error {
                rows.push(("report error", error.to_owned()));
            }
            rows.push(("reported", at(i.last_report_at.as_deref())));
        }
        None => rows.push(("last report", "-".to_owned())),
    }
    let mut text = finish(out.kv(rows));
    // Hints first: they are the answer; the tables below are the evidence.
    text.push_str(&section("Hints", &hints(out, &i.hints)));
    text.push_str(&middleware_section(i));
    text.push_str(&credential_section(i, now));

    if i.components.is_empty() {
        text.push_str(&section("Components", "none\n"));
    } else {
        // One block per component: three revision summaries side by side
        // would not fit a terminal.
        let mut blocks = String::new();
        for c in &i.components {
            let mut state = vec![if c.dirty {
                format!("dirty ({})", dash(c.lane.as_deref()))
            } else {
                "clean".to_owned()
            }];
            if c.held {
                state.push("held".to_owned());
            }
            if let Some(backoff) = c.backoff.as_deref().filter(|b| !b.is_empty() && *b != "0s") {
                state.push(format!("backing off {backoff}"));
            }
            let mut rows = vec![
                ("  desired", dash(Some(&c.desired))),
                ("  sent", with_age(&c.sent, c.sent_at.as_deref(), now)),
                (
                    "  acked",
                    with_age(
                        &if c.ack_status.is_empty() {
                            c.acked.clone()
                        } else {
                            format!("{} {}", c.ack_status, c.acked)
                        },
                        c.acked_at.as_deref(),
                        now,
                    ),
                ),
                ("  state", state.join(", ")),
            ];
            if let Some(failure) = c.last_failure.as_deref().filter(|f| !f.is_empty()) {
                rows.push(("  last failure", failure.to_owned()));
            }
            let _ = writeln!(blocks, "{}", sanitize(&c.component));
            blocks.push_str(&finish(out.kv(rows)));
        }
        text.push_str(&section("Components", &blocks));
    }

    let names: HashMap<String, String> = i
        .sandbox
        .iter()
        .map(|sb| (sb.id.clone(), sb.name.clone()))
        .collect();
    if i.pending_operations.is_empty() {
        text.push_str(&section("Pending operations", "none\n"));
    } else {
        text.push_str(&section(
            "Pending operations",
            &operations(out, &i.pending_operations, &names),
        ));
    }

    if i.recent_events.is_empty() {
        text.push_str(&section("Recent events", "none\n"));
    } else {
        let events = out.table(
            &i.recent_events,
            &[
                Column::new("AGE", move |e: &openshell_sdk::DeliveryEvent| {
                    age(e.at.as_deref(), now)
                }),
                Column::new("AT", |e: &openshell_sdk::DeliveryEvent| {
                    dash(e.at.as_deref())
                })
                .wide(),
                Column::new("EVENT", |e: &openshell_sdk::DeliveryEvent| e.text.clone()).cut(),
            ],
        );
        text.push_str(&section("Recent events", &events));
    }
    text
}

/// The supervisor's readiness, when it reported remote middleware or a workload it holds
/// back: one line per middleware, then whether the workload runs.
fn middleware_section(i: &SessionInspection) -> String {
    let Some(r) = &i.runtime_readiness else {
        return String::new();
    };
    if r.middlewares.is_empty() && r.workload_started {
        return String::new();
    }
    let mut body = String::new();
    for m in &r.middlewares {
        let state = if m.reachable {
            "reachable".to_owned()
        } else {
            format!("unreachable: {}", m.error.as_deref().unwrap_or("no answer"))
        };
        let mode = if m.fail_closed {
            "fail_closed"
        } else {
            "fail_open"
        };
        let line = format!(
            "  {}  {}  {state}  {mode}",
            m.name,
            m.endpoint.as_deref().unwrap_or("-")
        );
        let _ = writeln!(body, "{}", sanitize(&line));
    }
    let verdict = if !r.workload_started {
        format!(
            "workload not started: waiting for fail_closed middleware {}",
            r.blocked_by().join(", ")
        )
    } else if r.degraded() {
        "started degraded".to_owned()
    } else {
        "workload started".to_owned()
    };
    let _ = writeln!(body, "  {}", sanitize(&verdict));
    section("Middleware", &body)
}

/// A revision summary with how long ago it happened: "policy r2 … (4s ago)".
fn with_age(summary: &str, at: Option<&str>, now: SystemTime) -> String {
    if summary.is_empty() {
        return "-".to_owned();
    }
    match at {
        Some(t) => format!("{summary} ({} ago)", age(Some(t), now)),
        None => summary.to_owned(),
    }
}

/// The revisions of a supervisor report, as the gateway keeps them.
#[derive(Debug, Default, serde::Deserialize)]
struct ReportedRevisions {
    #[serde(default)]
    policy_revision: u64,
    #[serde(default)]
    policy_hash: String,
}

/// A sandbox's last report as `sessions inspect` carries it,
/// `STATE {revisions as JSON} (error)`, taken apart for reading.
#[derive(Debug)]
struct LastReport<'a> {
    state: &'a str,
    revisions: Option<ReportedRevisions>,
    error: Option<&'a str>,
}

impl<'a> LastReport<'a> {
    fn decode(raw: &'a str) -> Self {
        let (state, rest) = raw.split_once(' ').unwrap_or((raw, ""));
        let rest = rest.trim_start();
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<ReportedRevisions>();
        let (revisions, rest) = match stream.next() {
            Some(Ok(revisions)) => (Some(revisions), &rest[stream.byte_offset()..]),
            _ => (None, rest),
        };
        let rest = rest.trim();
        let error = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(rest);
        Self {
            state,
            revisions,
            error: Some(error).filter(|e| !e.is_empty()),
        }
    }
}

/// One marked line per hint, in yellow when styled, so abnormal states
/// stand out from the tables around them.
fn hints(out: &Output, hints: &[String]) -> String {
    if hints.is_empty() {
        return format!("  {}\n", paint("delivery looks healthy", GREEN, out.color));
    }
    hints
        .iter()
        .map(|h| format!("  {} {}\n", paint("!", YELLOW_BOLD, out.color), sanitize(h)))
        .collect()
}

pub fn gateway(out: &Output, g: &GatewayInfo) -> String {
    let rows = vec![
        ("version", g.version.clone()),
        ("config delivery mode", g.config_delivery_mode.clone()),
        ("store backend", g.store_backend.clone()),
        ("replica id", g.replica_id.clone()),
        ("protocol revision", g.protocol_revision.to_string()),
        ("replicas", list_or_dash(&g.replicas)),
        ("sessions", g.sessions.to_string()),
        ("started", dash(g.started_at.as_deref())),
    ];
    finish(out.kv(rows))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;

    use openshell_sdk::{ApplyOutcome, OperationState};

    use super::*;
    use crate::exit::tests::operation as sample;
    use crate::output::OutputFormat;

    fn plain(format: OutputFormat) -> Output {
        Output::plain(format)
    }

    fn failed_op() -> Operation {
        let mut op = sample(OperationState::Failed);
        op.outcome = ApplyOutcome::FailedRetainedLastKnownGood;
        op.error = Some("port 0 is not valid".into());
        op
    }

    #[test]
    fn operation_table_has_no_ansi_without_color() {
        let out = plain(OutputFormat::Table);
        let text = out
            .render(&failed_op(), |o| operation(o, &failed_op()))
            .unwrap();
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(text.contains("op-0193"));
        assert!(text.contains("FAILED_RETAINED_LAST_KNOWN_GOOD"));
        assert!(text.contains("port 0 is not valid"));
        let state_line = text.lines().find(|l| l.starts_with("state")).unwrap();
        assert!(state_line.ends_with("FAILED"), "{state_line:?}");
        assert!(text.lines().all(|l| l == l.trim_end()));
    }

    #[test]
    fn operation_table_is_styled_with_color() {
        let out = Output {
            color: true,
            ..Output::plain(OutputFormat::Table)
        };
        let text = operation(&out, &failed_op());
        assert!(text.contains('\u{1b}'), "{text:?}");
    }

    #[test]
    fn operation_json_is_the_sdk_shape() {
        let op = failed_op();
        let text = plain(OutputFormat::Json)
            .render(&op, |_| unreachable!())
            .unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["id"], "op-0193");
        assert_eq!(value["state"], "FAILED");
        assert_eq!(value["outcome"], "FAILED_RETAINED_LAST_KNOWN_GOOD");
        assert_eq!(value["target_kind"], "SANDBOX");
        assert_eq!(value["policy_revision"], 2);
        assert!(value["fleet"].is_null());
        assert!(text.ends_with("}\n"));
        let back: Operation = serde_json::from_str(&text).unwrap();
        assert_eq!(back, op);
    }

    #[test]
    fn operation_yaml_round_trips() {
        let op = failed_op();
        let text = plain(OutputFormat::Yaml)
            .render(&op, |_| unreachable!())
            .unwrap();
        assert!(text.contains("state: FAILED"), "{text}");
        assert!(text.contains("id: op-0193"), "{text}");
        let back: Operation = serde_norway::from_str(&text).unwrap();
        assert_eq!(back, op);
    }

    #[test]
    fn fleet_progress_is_shown() {
        let mut op = sample(OperationState::Pending);
        op.fleet = Some(FleetProgress {
            targets: 10,
            applied: 7,
            pending: 3,
            ..FleetProgress::default()
        });
        let text = operation(&plain(OutputFormat::Table), &op);
        assert!(text.contains("7/10 applied"), "{text}");
    }

    fn inspection(hints: Vec<String>) -> SessionInspection {
        SessionInspection {
            sandbox: None,
            gateway_mode: "push".into(),
            connected: false,
            negotiated_mode: openshell_sdk::DeliveryMode::Unspecified,
            negotiated_reason: String::new(),
            supervisor_version: String::new(),
            protocol_revision: 0,
            supports_config_snapshots: false,
            supports_config_apply: false,
            owner_replica: None,
            session_id: None,
            connected_at: None,
            last_heartbeat_at: None,
            components: Vec::new(),
            pending_operations: Vec::new(),
            recent_events: Vec::new(),
            hints,
            last_report: None,
            last_report_at: None,
            runtime_readiness: None,
            credential_expiry: Vec::new(),
        }
    }

    #[test]
    fn inspection_lists_when_credentials_expire() {
        let mut i = inspection(Vec::new());
        let in_ten_minutes = humantime::format_rfc3339_seconds(
            SystemTime::now() + std::time::Duration::from_secs(600),
        )
        .to_string();
        i.credential_expiry = vec![
            openshell_sdk::CredentialExpiry {
                name: "OLD_TOKEN".into(),
                provider: "legacy".into(),
                expires_at: Some("2020-01-01T00:00:00Z".into()),
            },
            openshell_sdk::CredentialExpiry {
                name: "GITHUB_TOKEN".into(),
                provider: "github".into(),
                expires_at: Some(in_ten_minutes.clone()),
            },
        ];
        let text = super::inspection(&plain(OutputFormat::Table), &i);
        assert!(text.contains("Credentials"), "{text}");
        assert!(
            text.contains("OLD_TOKEN (legacy): expired ")
                && text.contains("d ago (2020-01-01T00:00:00Z)"),
            "{text}"
        );
        let soon = "GITHUB_TOKEN (github): expires in ";
        assert!(
            text.contains(soon) && text.contains(&in_ten_minutes),
            "{text}"
        );
        let none = super::inspection(&plain(OutputFormat::Table), &inspection(Vec::new()));
        assert!(!none.contains("Credentials"));
    }

    #[test]
    fn inspection_shows_the_middleware_the_workload_waits_for() {
        let middleware =
            |name: &str, reachable: bool, fail_closed: bool| openshell_sdk::MiddlewareReadiness {
                name: name.into(),
                implementation: format!("{name}-impl"),
                endpoint: Some("127.0.0.1:9".into()),
                reachable,
                fail_closed,
                error: (!reachable).then(|| "connection refused".into()),
            };
        let mut i = inspection(Vec::new());
        let text = super::inspection(&plain(OutputFormat::Table), &i);
        assert!(!text.contains("Middleware:"), "{text}");
        i.runtime_readiness = Some(openshell_sdk::RuntimeReadiness {
            workload_started: false,
            middlewares: vec![
                middleware("audit", false, true),
                middleware("trace", true, false),
            ],
        });
        let text = super::inspection(&plain(OutputFormat::Table), &i);
        assert!(
            text.contains(
                "\nMiddleware:\n  audit  127.0.0.1:9  unreachable: connection refused  fail_closed\n  trace  127.0.0.1:9  reachable  fail_open\n  workload not started: waiting for fail_closed middleware audit\n"
            ),
            "{text}"
        );
        i.runtime_readiness = Some(openshell_sdk::RuntimeReadiness {
            workload_started: true,
            middlewares: vec![middleware("trace", false, false)],
        });
        let text = super::inspection(&plain(OutputFormat::Table), &i);
        assert!(text.contains("  started degraded\n"), "{text}");
    }

    #[test]
    fn inspection_lists_each_hint_before_the_evidence() {
        let i = inspection(vec![
            "no supervisor is connected".into(),
            "gateway is in poll mode".into(),
        ]);
        let text = super::inspection(&plain(OutputFormat::Table), &i);
        let hints_at = text.find("\nHints:\n").unwrap();
        assert!(hints_at < text.find("\nComponents:").unwrap(), "{text}");
        assert!(
            text.contains("Hints:\n  ! no supervisor is connected\n  ! gateway is in poll mode\n"),
            "{text}"
        );
        assert!(!text.contains("delivery looks healthy"));
        assert!(!text.contains('\u{1b}'));
        let styled = Output {
            color: true,
            ..Output::plain(OutputFormat::Table)
        };
        assert!(super::inspection(&styled, &i).contains("\u{1b}[1;33m!"));
    }

    #[test]
    fn inspection_without_hints_says_healthy() {
        let text = super::inspection(&plain(OutputFormat::Table), &inspection(Vec::new()));
        assert!(
            text.contains("Hints:\n  delivery looks healthy\n"),
            "{text}"
        );
    }

    fn provider_expiring(expires_at: Option<&str>, credential: Option<&str>) -> Provider {
        Provider {
            id: "pv-1".into(),
            name: "gh".into(),
            workspace: "default".into(),
            provider_type: "github".into(),
            env: BTreeMap::new(),
            credential_names: vec!["TOKEN".into()],
            revision: 1,
            expires_at: expires_at.map(Into::into),
            attached_sandbox_ids: Vec::new(),
            created_at: Some("2026-11-29T09:30:00.000Z".into()),
            updated_at: None,
            credential_expires_at: credential
                .map(|at| ("TOKEN".to_string(), at.to_string()))
                .into_iter()
                .collect(),
        }
    }

    /// Probe: `provider list` showed `-` for a credential that had expired (its own expiry,
    /// or one before 1970). It says expired, and shows the earliest expiry of any credential.
    #[test]
    fn provider_list_shows_expired_credentials_as_expired() {
        let out = plain(OutputFormat::Table);
        let expiring = |provider: Provider| {
            let text = providers(&out, std::slice::from_ref(&provider));
            let header = text.lines().next().unwrap().to_owned();
            let row = text.lines().nth(1).unwrap().to_owned();
            let at = header.find("EXPIRES").unwrap();
            row[at..].split("  ").next().unwrap().trim().to_owned()
        };
        assert_eq!(expiring(provider_expiring(None, None)), "-");
        let own = expiring(provider_expiring(None, Some("2020-01-01T00:00:00.000Z")));
        assert!(
            own.starts_with("expired ") && own.ends_with("d ago"),
            "{own}"
        );
        assert_eq!(
            expiring(provider_expiring(None, Some("1960-01-01T00:00:00.000Z"))),
            "expired 1960-01-01T00:00:00.000Z"
        );
        // The earlier of the provider's and the credential's own.
        assert_eq!(
            expiring(provider_expiring(
                Some("9000-01-01T00:00:00.000Z"),
                Some("8000-01-01T00:00:00.000Z")
            )),
            "8000-01-01T00:00:00.000Z"
        );
        let text = super::provider(
            &out,
            &provider_expiring(
                Some("2020-01-01T00:00:00.000Z"),
                Some("1960-01-01T00:00:00.000Z"),
            ),
        );
        assert!(
            text.contains("TOKEN: expired 1960-01-01T00:00:00.000Z"),
            "{text}"
        );
        assert!(text.contains("expires             expired "), "{text}");
    }

    #[test]
    fn user_and_gateway_text_never_reaches_the_terminal_raw() {
        let mut op = failed_op();
        op.idempotency_key = Some("deploy-\u{1b}[31m42".into());
        op.error = Some("bad\u{1b}]0;owned\u{7} policy".into());
        let mut i = inspection(vec!["hint \u{1b}[2J".into()]);
        i.pending_operations = vec![op.clone()];
        let provider = Provider {
            id: "pv-1".into(),
            name: "gh".into(),
            workspace: "default".into(),
            provider_type: "github".into(),
            env: [("GH_HOST".to_string(), "\u{1b}[8mhidden".to_string())].into(),
            credential_names: vec!["TOKEN".into()],
            revision: 1,
            expires_at: None,
            attached_sandbox_ids: Vec::new(),
            created_at: Some("2026-11-29T09:30:00.000Z".into()),
            updated_at: None,
            credential_expires_at: BTreeMap::new(),
        };
        for color in [false, true] {
            let out = Output {
                color,
                ..Output::plain(OutputFormat::Table)
            };
            let texts = [
                operation(&out, &op),
                operations(&out, std::slice::from_ref(&op), &HashMap::new()),
                super::inspection(&out, &i),
                super::provider(&out, &provider),
                providers(&out, std::slice::from_ref(&provider)),
            ];
            for text in texts {
                // Styling, when on, is the CLI's own SGR; nothing else may start an escape.
                let raw = text.replace("\u{1b}[1m", "").replace("\u{1b}[0m", "");
                let raw = raw.replace("\u{1b}[1;33m", "").replace("\u{1b}[32m", "");
                assert!(!raw.contains('\u{1b}'), "{text:?}");
                assert!(!raw.contains('\u{7}'), "{text:?}");
            }
            let table = operation(&out, &op);
            assert!(table.contains("deploy-\\x1b[31m42"), "{table:?}");
            assert!(table.contains("bad\\x1b]0;owned\\x07 policy"), "{table:?}");
            assert!(super::provider(&out, &provider).contains("GH_HOST=\\x1b[8mhidden"));
            assert!(super::inspection(&out, &i).contains("hint \\x1b[2J"));
        }
    }

    #[test]
    fn json_and_yaml_escape_control_characters_themselves() {
        let mut op = failed_op();
        let key = "deploy-\u{1b}[31m42\u{9b}\u{7f}";
        op.idempotency_key = Some(key.into());
        for format in [OutputFormat::Yaml, OutputFormat::Json] {
            let text = plain(format).render(&op, |_| unreachable!()).unwrap();
            let raw = text.chars().find(|c| c.is_control() && *c != '\n');
            assert_eq!(raw, None, "{format:?} {text:?}");
        }
        // Escaped, not altered: the value reads back the same.
        let json = plain(OutputFormat::Json)
            .render(&op, |_| unreachable!())
            .unwrap();
        let back: Operation = serde_json::from_str(&json).unwrap();
        assert_eq!(back.idempotency_key.as_deref(), Some(key));
    }

    #[test]
    fn list_tables_have_headers_and_rows() {
        let ops = vec![sample(OperationState::Pending), failed_op()];
        let text = operations(&plain(OutputFormat::Table), &ops, &HashMap::new());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("ID"));
        assert!(lines[1].contains("PENDING"));
        assert!(lines[2].contains("port 0 is not valid"));
    }

    fn sandbox(desired: u64, applied: u64) -> Sandbox {
        Sandbox {
            id: "sb-0193a7c2-1111-7000-8000-0123456789ab".into(),
            name: "web".into(),
            workspace: "default".into(),
            lifecycle: openshell_sdk::SandboxLifecycle::Running,
            policy_revision: desired,
            settings_revision: 0,
            attachment_epoch: 0,
            providers: Vec::new(),
            created_at: Some("2026-11-29T09:30:00.000Z".into()),
            updated_at: None,
            applied_policy_revision: applied,
            applied_policy_hash: (applied > 0).then(|| "ab".repeat(32)),
            quarantine_reason: None,
        }
    }

    #[test]
    fn operations_name_their_sandbox_and_wide_adds_the_rest() {
        let mut op = failed_op();
        op.target = "sb-0193a7c2-1111-7000-8000-0123456789ab".into();
        let names = HashMap::from([(op.target.clone(), "web".to_owned())]);
        let text = operations(
            &plain(OutputFormat::Table),
            std::slice::from_ref(&op),
            &names,
        );
        let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            ["ID", "TARGET", "STATE", "POLICY", "REV", "AGE", "ERROR"],
            "{text}"
        );
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(&row[..3], ["op-0193", "web", "FAILED"], "{text}");
        assert!(!text.contains(&op.target), "{text}");
        let wide = operations(
            &plain(OutputFormat::Wide),
            std::slice::from_ref(&op),
            &names,
        );
        for column in ["TARGET ID", "OUTCOME", "SETTINGS REV", "CREATED", "CALLER"] {
            assert!(
                wide.lines().next().unwrap().contains(column),
                "{column}: {wide}"
            );
        }
        assert!(wide.contains(&op.target), "{wide}");
        assert!(wide.contains("FAILED_RETAINED_LAST_KNOWN_GOOD"), "{wide}");
    }

    #[test]
    fn sandboxes_show_desired_beside_applied() {
        let list = [sandbox(2, 1), sandbox(1, 0)];
        let text = sandboxes(&plain(OutputFormat::Table), &list);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[0],
            [
                "NAME",
                "WORKSPACE",
                "LIFECYCLE",
                "DESIRED",
                "APPLIED",
                "PROVIDERS",
                "AGE"
            ]
        );
        assert_eq!(&rows[1][..5], ["web", "default", "RUNNING", "2", "1"]);
        // Never applied: a dash, not 0.
        assert_eq!(&rows[2][3..5], ["1", "-"]);
        assert!(!text.contains("sb-0193"), "{text}");
        let wide = sandboxes(&plain(OutputFormat::Wide), &list);
        assert!(
            wide.contains("sb-0193a7c2-1111-7000-8000-0123456789ab"),
            "{wide}"
        );
        assert!(wide.contains("abababababab"), "{wide}");
        let kv = super::sandbox(&plain(OutputFormat::Table), &list[0]);
        assert!(kv.contains("desired policy revision  2\n"), "{kv}");
        assert!(
            kv.contains("applied policy revision  1 (hash abababababab)\n"),
            "{kv}"
        );
        let kv = super::sandbox(&plain(OutputFormat::Table), &list[1]);
        assert!(kv.contains("applied policy revision  -\n"), "{kv}");
    }

    #[test]
    fn policy_revision_reads_against_the_applied_one() {
        assert_eq!(policy_revision_text(2, None), "2");
        assert_eq!(policy_revision_text(2, Some(&sandbox(2, 2))), "2 (applied)");
        assert_eq!(
            policy_revision_text(4, Some(&sandbox(4, 3))),
            "4 (applied: 3, pending)"
        );
        assert_eq!(
            policy_revision_text(1, Some(&sandbox(1, 0))),
            "1 (applied: -, pending)"
        );
        // An older revision asked for by number.
        assert_eq!(
            policy_revision_text(2, Some(&sandbox(4, 4))),
            "2 (latest: 4, applied: 4)"
        );
    }

    #[test]
    fn the_last_report_is_decoded() {
        let hash = "cd".repeat(32);
        let raw = format!(
            "FAILED {{\"policy_revision\":3,\"policy_hash\":\"{hash}\",\"global_policy_revision\":0}} (port 0 is not valid)"
        );
        let report = LastReport::decode(&raw);
        assert_eq!(report.state, "FAILED");
        assert_eq!(report.revisions.as_ref().unwrap().policy_revision, 3);
        assert_eq!(report.error, Some("port 0 is not valid"));
        let applied = LastReport::decode("APPLIED {\"policy_revision\":2,\"policy_hash\":\"\"}");
        assert_eq!(applied.state, "APPLIED");
        assert_eq!(applied.error, None);
        // Not the gateway's form: shown as it came, not lost.
        let odd = LastReport::decode("APPLIED something else");
        assert!(odd.revisions.is_none());
        assert_eq!(odd.error, Some("something else"));

        let mut i = inspection(Vec::new());
        i.last_report = Some(raw);
        i.last_report_at = Some("2026-11-29T09:30:00.000Z".into());
        let text = super::inspection(&plain(OutputFormat::Table), &i);
        assert!(
            text.contains("last report                FAILED\n"),
            "{text}"
        );
        assert!(
            text.contains("reported revision          3 (hash cdcdcdcdcdcd)\n"),
            "{text}"
        );
        assert!(
            text.contains("report error               port 0 is not valid\n"),
            "{text}"
        );
        assert!(!text.contains("policy_hash"), "{text}");
    }

    #[test]
    fn setting_descriptions_are_cut_to_fit_and_keys_never_are() {
        let def = SettingDefinition {
            key: "policy_validation_failure_mode".into(),
            kind: "enum".into(),
            default_value: None,
            allowed_values: vec!["retain_last_valid".into(), "fail_closed".into()],
            description: "What a supervisor does when a policy revision fails validation".into(),
        };
        let out = Output {
            width: Some(100),
            ..plain(OutputFormat::Table)
        };
        let text = setting_definitions(&out, std::slice::from_ref(&def));
        let row = text.lines().nth(1).unwrap();
        assert!(row.starts_with("policy_validation_failure_mode"), "{text}");
        assert!(row.ends_with('…'), "{text}");
        assert!(unicode_width::UnicodeWidthStr::width(row) <= 100, "{text}");
        let whole = setting_definitions(&plain(OutputFormat::Table), &[def]);
        assert!(whole.contains("fails validation\n"), "{whole}");
    }
}
