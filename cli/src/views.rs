//! Table layouts of the SDK view types. JSON and YAML need none: they
//! serialize the view types directly, so their shape is the SDK's.

use std::fmt::Write as _;

use openshell_sdk::{
    FleetProgress, GatewayInfo, Operation, PolicyRevision, Provider, Sandbox, SandboxPolicy,
    ScopeSettings, SessionInspection, SessionSummary, Setting, SettingDefinition, SettingScope,
    SettingValue, UpdateResult,
};

use crate::output::{Output, dash, finish, list_or_dash, revision, sanitize, section, yes_no};
use crate::progress::paint;

const GREEN: &str = "32";
const YELLOW_BOLD: &str = "1;33";

pub fn sandbox(out: &Output, sb: &Sandbox) -> String {
    finish(out.kv(sandbox_rows(sb)))
}

pub fn sandbox_rows(sb: &Sandbox) -> Vec<(&'static str, String)> {
    vec![
        ("id", sb.id.clone()),
        ("name", sb.name.clone()),
        ("workspace", sb.workspace.clone()),
        ("lifecycle", sb.lifecycle.to_string()),
        ("policy revision", revision(sb.policy_revision)),
        ("settings revision", revision(sb.settings_revision)),
        ("attachment epoch", sb.attachment_epoch.to_string()),
        ("providers", list_or_dash(&sb.providers)),
        ("created", dash(sb.created_at.as_deref())),
        ("updated", dash(sb.updated_at.as_deref())),
    ]
}

pub fn sandboxes(out: &Output, list: &[Sandbox]) -> String {
    let mut table = out.list(&[
        "NAME",
        "WORKSPACE",
        "ID",
        "LIFECYCLE",
        "POLICY REV",
        "PROVIDERS",
        "CREATED",
    ]);
    for sb in list {
        table.add_row(vec![
            sb.name.clone(),
            sb.workspace.clone(),
            sb.id.clone(),
            sb.lifecycle.to_string(),
            revision(sb.policy_revision),
            list_or_dash(&sb.providers),
            dash(sb.created_at.as_deref()),
        ]);
    }
    finish(table)
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

pub fn operations(out: &Output, list: &[Operation]) -> String {
    let mut table = out.list(&[
        "ID",
        "TARGET",
        "STATE",
        "OUTCOME",
        "POLICY REV",
        "SETTINGS REV",
        "CREATED",
        "ERROR",
    ]);
    for op in list {
        let target = if op.target.is_empty() {
            op.target_kind.to_string()
        } else {
            op.target.clone()
        };
        table.add_row(vec![
            op.id.clone(),
            target,
            op.state.to_string(),
            op.outcome.to_string(),
            revision(op.policy_revision),
            revision(op.settings_revision),
            dash(op.created_at.as_deref()),
            dash(op.error.as_deref()),
        ]);
    }
    finish(table)
}

pub fn policy(out: &Output, p: &SandboxPolicy) -> String {
    let rows = vec![
        ("sandbox id", dash(p.policy.sandbox_id.as_deref())),
        ("revision", revision(p.policy.revision)),
        ("hash", dash(Some(&p.policy.policy_hash))),
        ("effective source", p.effective_source.to_string()),
        ("global policy revision", revision(p.global_policy_revision)),
        ("created", dash(p.policy.created_at.as_deref())),
        ("operation", dash(p.policy.operation_id.as_deref())),
    ];
    finish(out.kv(rows))
}

pub fn policy_history(out: &Output, list: &[PolicyRevision]) -> String {
    let mut table = out.list(&["REVISION", "HASH", "CREATED", "OPERATION"]);
    for rev in list {
        table.add_row(vec![
            rev.revision.to_string(),
            rev.policy_hash.clone(),
            dash(rev.created_at.as_deref()),
            dash(rev.operation_id.as_deref()),
        ]);
    }
    finish(table)
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

pub fn provider(out: &Output, p: &Provider) -> String {
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
        ("expires", dash(p.expires_at.as_deref())),
        ("attached sandboxes", list_or_dash(&p.attached_sandbox_ids)),
    ];
    finish(out.kv(rows))
}

pub fn providers(out: &Output, list: &[Provider]) -> String {
    let mut table = out.list(&[
        "NAME",
        "WORKSPACE",
        "TYPE",
        "ID",
        "CREDENTIALS",
        "REVISION",
        "EXPIRES",
        "ATTACHED",
    ]);
    for p in list {
        table.add_row(vec![
            p.name.clone(),
            p.workspace.clone(),
            p.provider_type.clone(),
            p.id.clone(),
            list_or_dash(&p.credential_names),
            p.revision.to_string(),
            dash(p.expires_at.as_deref()),
            p.attached_sandbox_ids.len().to_string(),
        ]);
    }
    finish(table)
}

pub fn sessions(out: &Output, list: &[SessionSummary]) -> String {
    let mut table = out.list(&[
        "SANDBOX",
        "SANDBOX ID",
        "SESSION",
        "MODE",
        "SUPERVISOR",
        "PROTOCOL",
        "REPLICA",
        "CONNECTED",
        "LAST HEARTBEAT",
    ]);
    for s in list {
        table.add_row(vec![
            s.sandbox_name.clone(),
            s.sandbox_id.clone(),
            s.session_id.clone(),
            s.mode.to_string(),
            dash(Some(&s.supervisor_version)),
            s.protocol_revision.to_string(),
            dash(Some(&s.replica_id)),
            dash(s.connected_at.as_deref()),
            dash(s.last_heartbeat_at.as_deref()),
        ]);
    }
    finish(table)
}

pub fn inspection(out: &Output, i: &SessionInspection) -> String {
    let sandbox = i.sandbox.as_ref().map_or_else(
        || "-".to_owned(),
        |sb| format!("{}/{} ({}, {})", sb.workspace, sb.name, sb.id, sb.lifecycle),
    );
    let rows = vec![
        ("sandbox", sandbox),
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
        ("connected at", dash(i.connected_at.as_deref())),
        ("last heartbeat", dash(i.last_heartbeat_at.as_deref())),
        ("last report", dash(i.last_report.as_deref())),
        ("last report at", dash(i.last_report_at.as_deref())),
    ];
    let mut text = finish(out.kv(rows));
    // Hints first: they are the answer; the tables below are the evidence.
    text.push_str(&section("Hints", &hints(out, &i.hints)));

    let mut components = out.list(&[
        "COMPONENT",
        "DESIRED",
        "SENT",
        "SENT AT",
        "ACKED",
        "ACK STATUS",
        "ACKED AT",
        "DIRTY",
        "LANE",
        "HELD",
        "BACKOFF",
        "LAST FAILURE",
    ]);
    for c in &i.components {
        components.add_row(vec![
            c.component.clone(),
            dash(Some(&c.desired)),
            dash(Some(&c.sent)),
            dash(c.sent_at.as_deref()),
            dash(Some(&c.acked)),
            dash(Some(&c.ack_status)),
            dash(c.acked_at.as_deref()),
            yes_no(c.dirty),
            dash(c.lane.as_deref()),
            yes_no(c.held),
            dash(c.backoff.as_deref()),
            dash(c.last_failure.as_deref()),
        ]);
    }
    if i.components.is_empty() {
        text.push_str(&section("Components", "none\n"));
    } else {
        text.push_str(&section("Components", &finish(components)));
    }

    if i.pending_operations.is_empty() {
        text.push_str(&section("Pending operations", "none\n"));
    } else {
        text.push_str(&section(
            "Pending operations",
            &operations(out, &i.pending_operations),
        ));
    }

    if i.recent_events.is_empty() {
        text.push_str(&section("Recent events", "none\n"));
    } else {
        let mut events = out.list(&["AT", "EVENT"]);
        for e in &i.recent_events {
            events.add_row(vec![dash(e.at.as_deref()), e.text.clone()]);
        }
        text.push_str(&section("Recent events", &finish(events)));
    }
    text
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
    use openshell_sdk::{ApplyOutcome, OperationState};

    use super::*;
    use crate::cli::OutputFormat;
    use crate::exit::tests::operation as sample;

    fn plain(format: OutputFormat) -> Output {
        Output {
            format,
            color: false,
        }
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
            format: OutputFormat::Table,
            color: true,
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
        }
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
            format: OutputFormat::Table,
            color: true,
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
        };
        for color in [false, true] {
            let out = Output {
                format: OutputFormat::Table,
                color,
            };
            let texts = [
                operation(&out, &op),
                operations(&out, std::slice::from_ref(&op)),
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
        let text = operations(&plain(OutputFormat::Table), &ops);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("ID"));
        assert!(lines[1].contains("PENDING"));
        assert!(lines[2].contains("port 0 is not valid"));
    }
}
