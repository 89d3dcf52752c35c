//! The Markdown command reference, `openshell docs markdown`, committed as
//! `docs/cli.md`.
//!
//! Commands, flags and their help are rendered from the clap tree, so the
//! reference cannot drift from the parser; the sections clap knows nothing
//! about (exit codes, output formats, JSON shapes, environment) are written
//! here, next to the generator, and JSON examples are serialized from the
//! real types. A test regenerates the file and fails when it differs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use clap::{Arg, ArgAction, Command, CommandFactory};
use openshell_sdk::{
    ApplyOutcome, FleetProgress, Operation, OperationState, PolicyChange, SettingDiff,
    SettingValue, TargetKind, UpdateResult,
};

use crate::cli::Cli;
use crate::diff::PolicyDiff;
use crate::exit;
use crate::validation::Validation;

/// How to regenerate it, printed in the file and by the drift test.
pub const REGENERATE: &str = "cargo run -q -p openshell-cli -- docs markdown > docs/cli.md";

/// The whole reference.
pub fn markdown() -> String {
    let root = Cli::command().term_width(0).max_term_width(0);
    let mut out = String::new();
    let _ = writeln!(out, "# `openshell` command reference\n");
    let _ = writeln!(
        out,
        "<!-- Generated from the CLI's clap definitions by `openshell docs markdown`; do not edit.\n     Regenerate with: {REGENERATE} -->\n"
    );
    if let Some(about) = root.get_long_about().or(root.get_about()) {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    let _ = writeln!(
        out,
        "Results go to stdout as a table, JSON or YAML (`-o`); progress, notes, warnings and errors go to stderr. \
         See [exit codes](#exit-codes), [output formats](#output-formats), [JSON shapes](#json-shapes) \
         and [environment variables](#environment-variables) at the end.\n"
    );

    let commands = walk(&root);
    out.push_str("## Contents\n\n");
    for (path, cmd) in &commands {
        let depth = path.len().saturating_sub(1);
        let _ = writeln!(
            out,
            "{}- [`{}`](#{}){}",
            "  ".repeat(depth),
            title(path),
            anchor(path),
            cmd.get_about()
                .map(|a| format!(": {}", one_line(&a.to_string())))
                .unwrap_or_default()
        );
    }
    out.push('\n');

    out.push_str(
        "## Global flags\n\nAccepted by every command, before or after the subcommand.\n\n",
    );
    let globals: Vec<&Arg> = root
        .get_arguments()
        .filter(|a| a.is_global_set() && !a.is_hide_set())
        .collect();
    out.push_str(&flag_table(&globals));
    out.push('\n');

    out.push_str("## Commands\n\n");
    for (path, cmd) in &commands {
        command_section(&mut out, path, cmd);
    }

    out.push_str(&exit_codes());
    out.push_str(OUTPUT_FORMATS);
    out.push_str(&json_shapes());
    out.push_str(&environment(&root));
    out
}

/// One man page per visible command, by file name (`openshell-sandbox-create.1`).
pub fn man_pages(root: &Command) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    fn visit(cmd: &Command, out: &mut BTreeMap<String, Vec<u8>>) -> anyhow::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            visit(sub, out)?;
        }
        let man = clap_mangen::Man::new(cmd.clone());
        let mut page = Vec::new();
        man.render(&mut page)?;
        out.insert(man.get_filename(), page);
        Ok(())
    }
    let mut root = root.clone().disable_help_subcommand(true);
    // Building names every subcommand by its path, as its page is titled.
    root.build();
    let mut out = BTreeMap::new();
    visit(&root, &mut out)?;
    Ok(out)
}

/// Writes [`man_pages`] into `dir`; how many.
pub fn write_man_pages(root: &Command, dir: &Path) -> anyhow::Result<usize> {
    let pages = man_pages(root)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, page) in &pages {
        let path = dir.join(name);
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(pages.len())
}

/// Every visible command below the root, depth first, with its path of names.
fn walk(root: &Command) -> Vec<(Vec<String>, Command)> {
    fn visit(cmd: &Command, path: &[String], out: &mut Vec<(Vec<String>, Command)>) {
        for sub in cmd.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let mut sub_path = path.to_vec();
            sub_path.push(sub.get_name().to_owned());
            out.push((sub_path.clone(), sub.clone()));
            visit(sub, &sub_path, out);
        }
    }
    let mut out = Vec::new();
    visit(root, &[], &mut out);
    out
}

fn title(path: &[String]) -> String {
    format!("openshell {}", path.join(" "))
}

/// GitHub's anchor for a `### openshell a b` heading.
fn anchor(path: &[String]) -> String {
    format!("openshell-{}", path.join("-"))
}

fn command_section(out: &mut String, path: &[String], cmd: &Command) {
    let _ = writeln!(out, "### {}\n", title(path));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    let aliases: Vec<String> = cmd
        .get_visible_aliases()
        .map(|a| format!("`{a}`"))
        .collect();
    if !aliases.is_empty() {
        let _ = writeln!(out, "Aliases: {}.\n", aliases.join(", "));
    }
    if cmd.has_subcommands() {
        out.push_str("| Subcommand | Description |\n|---|---|\n");
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            let mut sub_path = path.to_vec();
            sub_path.push(sub.get_name().to_owned());
            let _ = writeln!(
                out,
                "| [`{}`](#{}) | {} |",
                sub.get_name(),
                anchor(&sub_path),
                cell(&sub.get_about().map(ToString::to_string).unwrap_or_default())
            );
        }
        out.push('\n');
        return;
    }
    let usage = cmd.clone().bin_name(title(path)).render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let _ = writeln!(out, "```text\n{usage}\n```\n");

    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    let positionals: Vec<&Arg> = args.iter().copied().filter(|a| a.is_positional()).collect();
    let flags: Vec<&Arg> = args
        .iter()
        .copied()
        .filter(|a| !a.is_positional())
        .collect();
    if !positionals.is_empty() {
        out.push_str("| Argument | Description |\n|---|---|\n");
        for arg in positionals {
            let _ = writeln!(
                out,
                "| `{}` | {} |",
                positional_name(arg),
                cell(&describe(arg))
            );
        }
        out.push('\n');
    }
    if !flags.is_empty() {
        out.push_str(&flag_table(&flags));
        out.push('\n');
    }
    for group in cmd.get_groups() {
        // `is_multiple` wants `&mut`, for no reason that matters here.
        if group.is_required_set() && !group.clone().is_multiple() {
            let members: Vec<String> = group
                .get_args()
                .filter_map(|id| cmd.get_arguments().find(|a| a.get_id() == id))
                .map(|a| format!("`{}`", flag_name(a)))
                .collect();
            let _ = writeln!(out, "Exactly one of {} is required.\n", members.join(", "));
        }
    }
}

fn flag_table(flags: &[&Arg]) -> String {
    let mut out = String::from("| Flag | Description |\n|---|---|\n");
    for arg in flags {
        let _ = writeln!(out, "| `{}` | {} |", flag_name(arg), cell(&describe(arg)));
    }
    out
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

fn value_names(arg: &Arg) -> String {
    match arg.get_value_names() {
        Some(names) => names
            .iter()
            .map(|n| format!("<{n}>"))
            .collect::<Vec<_>>()
            .join(" "),
        None => format!("<{}>", arg.get_id().as_str().to_uppercase()),
    }
}

fn flag_name(arg: &Arg) -> String {
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    let mut text = names.join(", ");
    if takes_value(arg) {
        text.push(' ');
        text.push_str(&value_names(arg));
    }
    if matches!(arg.get_action(), ArgAction::Append) {
        text.push_str("...");
    }
    text
}

fn positional_name(arg: &Arg) -> String {
    let names = value_names(arg);
    let mut text = if arg.is_required_set() {
        names
    } else {
        format!("[{}]", names.trim_start_matches('<').trim_end_matches('>'))
    };
    if matches!(arg.get_action(), ArgAction::Append) {
        text.push_str("...");
    }
    text
}

/// Help text plus what clap knows besides: choices, default, environment variable.
fn describe(arg: &Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| one_line(&h.to_string()))
        .unwrap_or_default();
    let mut extra = Vec::new();
    if takes_value(arg) {
        let choices: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !choices.is_empty() {
            extra.push(format!("One of {}.", choices.join(", ")));
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect();
        if !defaults.is_empty() {
            extra.push(format!("Default {}.", defaults.join(", ")));
        }
    }
    if let Some(env) = arg.get_env() {
        extra.push(format!("Env `{}`.", env.to_string_lossy()));
    }
    if arg.is_required_set() && !arg.is_positional() {
        extra.push("Required.".to_owned());
    }
    if !extra.is_empty() && !text.is_empty() {
        // clap drops the final period of one-sentence help; put it back
        // before more sentences follow.
        if !text.ends_with(['.', '!', '?']) {
            text.push('.');
        }
        text.push(' ');
    }
    text.push_str(&extra.join(" "));
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A Markdown table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

fn exit_codes() -> String {
    let rows = [
        (
            exit::SUCCESS,
            "Applied or unchanged; SUPERSEDED (a newer revision reached the sandbox first; printed with a warning); committed with `--commit-only`; a fleet `--threshold` met; `policy diff`: no differences.",
        ),
        (
            exit::FAILURE,
            "An error (gateway unreachable before any wait began, not found, invalid policy, …), or the change failed to apply (FAILED: the last-known-good configuration stays active; with FAILED_CLOSED the sandbox is quarantined instead, all network access denied); `policy diff`: the policies differ, as with diff(1); `status`: the gateway did not answer; `doctor`: a check failed; `gateway login`: the gateway refused the token (nothing saved).",
        ),
        (
            exit::USAGE,
            "Usage error: bad flags or values, an invalid policy file for `policy diff`, an empty policy, an existing `--credential-file` without `--force`, a `--ca-cert` file with no PEM certificate in it, a `--gateway` name that is not a saved gateway, or a write that needs confirmation (`sandbox delete`, global writes, a policy removing network access) without `--yes` when stdin or stderr is not a terminal.",
        ),
        (
            exit::NOT_IN_EFFECT,
            "The change is not in effect: INACTIVE (sandbox stopped, a local policy file on the supervisor keeps precedence, or a global policy replaces the sandbox policy written: SHADOWED_BY_GLOBAL) or CANCELLED (sandbox deleted before it applied).",
        ),
        (
            exit::GATEWAY_UNAVAILABLE,
            "The gateway became unavailable while waiting (the connection broke, e.g. the gateway died, or it stopped answering); EX_UNAVAILABLE of sysexits(3). Not a failure: the operation may still complete. The message names it; check with `openshell operations get ID`.",
        ),
        (
            exit::WAIT_TIMED_OUT,
            "The wait timed out (as `timeout(1)` does); the operation is still pending and goes on. Follow it with `openshell operations wait ID`.",
        ),
        (
            exit::INTERRUPTED,
            "Interrupted with Ctrl-C while waiting (or at a prompt). Only the wait stopped: the operation is untouched on the gateway; the message names it and how to resume.",
        ),
    ];
    let mut out = String::from(
        "## Exit codes\n\nEvery command that waits for an operation (`--wait`, `--timeout`, `operations wait`) exits by the operation's final state, so scripts need not parse output.\n\n| Code | Meaning |\n|---|---|\n",
    );
    for (code, meaning) in rows {
        let _ = writeln!(out, "| {code} | {meaning} |");
    }
    out.push('\n');
    out
}

const OUTPUT_FORMATS: &str = "## Output formats

`-o table` (the default) prints aligned columns for people; `-o wide` prints the same tables
with every column; `-o json` and `-o yaml` print the same data for programs. Every command that
prints data accepts all four.

- **Tables that fit.** A cell is never broken across lines: ids and names are printed whole (a
  row too long for the terminal runs past its edge), and free text (errors, reasons, events) is
  cut with `…` to fit the terminal's width. Lists show names before ids, revisions, and an `AGE`
  column (`45s`, `3m`, `5h`, `4d`); `-o wide` adds ids, hashes, exact times and other details
  and cuts nothing. `--no-headers` drops a list's header line.
- **Pipes.** When stdout is not a terminal the layout is stable: nothing is cut unless `COLUMNS`
  is set (then tables are fitted to it), and headers print unless `--no-headers` is given.
- **Desired and applied.** `sandbox get`, `sandbox list`, `sessions list` and `sessions inspect`
  show the desired policy revision (the latest stored) beside the applied one (what the
  sandbox's supervisor last reported applied, `-` when none); `policy get` shows it as
  `revision 4 (applied: 3, pending)`.

- **Where things go.** Results go to stdout; progress, notes, warnings, errors and prompts go to
  stderr, so `-o json | jq` never sees anything but JSON.
- **Refusals.** A request the gateway refuses prints `error: ` and the gateway's summary (e.g.
  `2000 problems found`), then one `  - FIELD: MESSAGE` line per violation. The gateway's
  error lists as many violations as fit its 4 KiB bound and ends with `  - … and N more
  violations`; `policy validate -f FILE` lists every one, offline.
- **Color.** Tables, diffs and progress are styled only on a terminal and never when `NO_COLOR`
  is set to a non-empty value. Output that is not a terminal contains no control characters.
- **Escaping.** Text that comes from users or the gateway (names, idempotency keys, provider
  values, errors, reasons) never drives the terminal: in tables, plain output and on stderr its
  control characters are shown escaped, e.g. `\\x1b` for ESC (newlines and tabs stay);
  `-o json` and `-o yaml` escape them in their own syntax, so values read back unchanged.
- **Progress.** While waiting, a spinner with the stages `committed → delivered → applied` (one
  sandbox), or an `N/M applied` bar with failed and pending counts (global and workspace
  writes), is drawn on stderr when stderr is a terminal. Otherwise one plain line is printed per
  state change, e.g. `operation op-… DELIVERED (0.1s)`. `--quiet` prints neither.
- **Waiting.** A write with `--wait` is committed first and then followed through the gateway's
  `WaitForApply` stream; the final state and exit code are the same as a server-side
  `WAIT_FOR_APPLY`. Without `--wait` or `--commit-only`, writes wait when stdout is a terminal and
  return right after commit otherwise. Ctrl-C stops only the wait.
- **Confirmation.** `sandbox delete`, global writes (`settings set|delete --global`,
  `policy set --global`, `policy clear-global`) and a `policy set` that removes network access
  show what changes and ask, when stdin and stderr are terminals. `--yes` skips the question;
  without a terminal and without `--yes` they fail with exit code 2.
- **Policies.** `policy get SB -o yaml` prints the policy document itself (not a wrapper), which
  `policy set SB -f FILE` accepts unchanged; `-f -` reads stdin.

";

fn example_operation() -> Operation {
    Operation {
        id: "op-01936f3e-5c1a-7d2e-9b1f-2a6c0e4d8f10".into(),
        target_kind: TargetKind::Sandbox,
        target: "sb-01936f3d-0a4b-7c3e-8d2f-1b5a9e7c6d40".into(),
        state: OperationState::Applied,
        outcome: ApplyOutcome::Applied,
        error: None,
        policy_revision: 2,
        settings_revision: 0,
        global_policy_revision: 0,
        no_op: false,
        idempotency_key: Some("deploy-42".into()),
        created_at: Some("2026-11-29T09:30:00.000Z".into()),
        updated_at: Some("2026-11-29T09:30:00.180Z".into()),
        completed_at: Some("2026-11-29T09:30:00.180Z".into()),
        wait_timed_out: false,
        fleet: None,
        caller: "operator".into(),
    }
}

fn example_fleet_operation() -> Operation {
    Operation {
        target_kind: TargetKind::Global,
        target: String::new(),
        state: OperationState::Pending,
        outcome: ApplyOutcome::Unspecified,
        policy_revision: 0,
        settings_revision: 7,
        idempotency_key: None,
        completed_at: None,
        wait_timed_out: true,
        fleet: Some(FleetProgress {
            targets: 20,
            applied: 19,
            failed: 0,
            pending: 1,
            inactive: 0,
            superseded: 0,
            cancelled: 0,
        }),
        ..example_operation()
    }
}

fn example_dry_run() -> UpdateResult {
    UpdateResult {
        operation: None,
        idempotent_replay: false,
        kept_static_sections: vec!["filesystem_policy".into(), "process".into()],
        validate_only: true,
        policy_diff: Some(openshell_sdk::PolicyDiff {
            added_policies: vec!["npm".into()],
            removed_policies: vec![],
            changed_policies: vec![PolicyChange {
                name: "github".into(),
                added_endpoints: vec!["uploads.github.com:443".into()],
                removed_endpoints: vec![],
                changed_endpoints: vec!["api.github.com:443".into()],
                changed_fields: vec![],
            }],
            changed_static_sections: vec![],
            changed_sections: vec![],
            current_revision: 2,
            current_policy_hash: Some(
                "3b1f0c9e5d8a7f6e4c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6b".into(),
            ),
            new_policy_hash: "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29180f7e6d5c4b3a2918f0e1d2c3b4"
                .into(),
        }),
        setting_changes: vec![],
        merge_notes: vec![],
        shadowed_by_global_policy: None,
    }
}

fn json_block(value: &impl serde::Serialize) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    format!("```json\n{text}\n```\n\n")
}

fn json_shapes() -> String {
    let mut out = String::from(
        "## JSON shapes

`-o json` and `-o yaml` serialize the Rust SDK's view types (`openshell-sdk`), the same shapes
the Node and Python SDKs return, so they are stable: fields are only ever added. Timestamps are
RFC 3339 strings in UTC; absent values are `null`; enums are upper-case strings
(`PENDING`, `APPLIED`, …).

| Command | JSON value |
|---|---|
| `sandbox create` | `{sandbox, supervisor_credential, credential_file, operation}` (the credential is `null` when written to `--credential-file`) |
| `sandbox get`, `stop`, `start` | `Sandbox`: `{id, name, workspace, lifecycle, policy_revision, settings_revision, attachment_epoch, providers, created_at, updated_at}` |
| `sandbox list` | array of `Sandbox` |
| `sandbox delete` | `{sandbox, cancelled_operations}` |
| `sandbox logs` (`logs`) | `{lines, buffer_total, supervisor_dropped_lines, gateway_dropped_lines}`, each line `{time, timestamp_ms, level, source, target, message, fields}` |
| `sandbox logs --follow` | one JSON object per line (JSON Lines): `{type: \"line\", time, timestamp_ms, level, source, target, message, fields}` or `{type: \"dropped\", dropped_lines, message}`; with `-o yaml` one document per event |
| `policy set`, `policy clear-global`, `settings set`, `settings delete` | `UpdateResult`: `{operation, idempotent_replay, kept_static_sections, validate_only, policy_diff, setting_changes}` (the last two are set only by `--dry-run`) |
| `policy set --dry-run` | `UpdateResult` with `operation: null`, `validate_only: true`, `policy_diff: {added_policies, removed_policies, changed_policies: [{name, added_endpoints, removed_endpoints, changed_endpoints, changed_fields}], changed_static_sections, changed_sections, current_revision, current_policy_hash, new_policy_hash}` |
| `policy validate` | `{valid, violations: [{field, message}]}` |
| `policy get` | `{policy: {sandbox_id, revision, policy_hash, policy_yaml, created_at, operation_id}, effective_source, global_policy_revision}`; with `-o yaml` the policy document itself |
| `policy history` | array of `{sandbox_id, revision, policy_hash, policy_yaml: null, created_at, operation_id}` |
| `policy diff` | `{changed, removed_network_access, diff, kept_static_sections}` |
| `settings get` | `{scope, values, revision, effective}`, each setting `{key, value, scope}` |
| `settings keys` | array of `{key, kind, default_value, allowed_values, description}` |
| `provider create`, `update` | `{provider, operation}` |
| `provider get` | `Provider` (credential names only, never values) |
| `provider list` | array of `Provider` |
| `provider attach`, `detach` | `{sandbox, operation}` |
| `provider delete` | `{provider, deleted}` |
| `operations get`, `operations wait` | `Operation` |
| `operations list` | array of `Operation` |
| `sessions list` | array of `{sandbox_id, sandbox_name, session_id, mode, supervisor_version, protocol_revision, replica_id, connected_at, last_heartbeat_at}` |
| `sessions inspect` | `{sandbox, gateway_mode, connected, negotiated_mode, negotiated_reason, supervisor_version, protocol_revision, supports_config_snapshots, supports_config_apply, owner_replica, session_id, connected_at, last_heartbeat_at, components, pending_operations, recent_events, hints, last_report, last_report_at}` |
| `gateway info` | `{version, config_delivery_mode, store_backend, replica_id, protocol_revision, replicas, sessions, started_at, answered_at}` |

An `UpdateResult` of `policy set SB -f p.yaml --wait --idempotency-key deploy-42 -o json`:

",
    );
    out.push_str(&json_block(&UpdateResult {
        kept_static_sections: vec!["filesystem_policy".into(), "process".into()],
        ..UpdateResult::committed(example_operation(), false)
    }));
    out.push_str(
        "`kept_static_sections` names the static sections the file left out, which the sandbox keeps\n\
         from its current policy.\n\n\
         `policy set SB -f p.yaml --dry-run -o json`: nothing is written, so there is no operation;\n\
         endpoints are named by host, ports and path, or `endpoints[i]` when they have no host:\n\n",
    );
    out.push_str(&json_block(&example_dry_run()));
    out.push_str(
        "`settings set --sandbox SB log_level=debug --dry-run -o json` lists the keys that would change\n\
         in `setting_changes` (`old_value` is `null` when the key is not set at that scope, `new_value`\n\
         is `null` for a delete):\n\n",
    );
    out.push_str(&json_block(&UpdateResult {
        operation: None,
        idempotent_replay: false,
        kept_static_sections: vec![],
        validate_only: true,
        policy_diff: None,
        setting_changes: vec![SettingDiff {
            key: "log_level".into(),
            old_value: Some(SettingValue::String("info".into())),
            new_value: Some(SettingValue::String("debug".into())),
        }],
        merge_notes: vec![],
        shadowed_by_global_policy: None,
    }));
    out.push_str(
        "`policy validate -f p.yaml -o json` of an invalid file (exit 1); a valid one gives\n\
         `{\"valid\": true, \"violations\": []}` (exit 0):\n\n",
    );
    out.push_str(&json_block(&Validation::of(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - { host: '*.com', port: 443 }\n",
    )));
    out.push_str(
        "A fleet `Operation` (global or workspace target) carries per-sandbox counts in `fleet`; here a\n\
         `settings set --global … --wait --timeout 30s` that timed out with one sandbox still pending:\n\n",
    );
    out.push_str(&json_block(&example_fleet_operation()));
    out.push_str(
        "`policy diff SB -f p.yaml -o json` (`removed_network_access` lists network policies that lose a\n\
         host/port they have now):\n\n",
    );
    out.push_str(&json_block(&PolicyDiff {
        changed: true,
        removed_network_access: vec!["github".into()],
        diff: "--- demo (revision 2)\n+++ p.yaml\n@@ -6,7 +6,7 @@\n   github:\n     endpoints:\n     - host: api.github.com\n-      port: 443\n+      port: 8443\n".into(),
        kept_static_sections: vec![],
    }));
    out
}

fn environment(root: &Command) -> String {
    let mut out = String::from("## Environment variables\n\n| Variable | Meaning |\n|---|---|\n");
    for arg in root.get_arguments().filter(|a| a.get_env().is_some()) {
        if let Some(env) = arg.get_env() {
            let _ = writeln!(
                out,
                "| `{}` | Same as `{}`: {} |",
                env.to_string_lossy(),
                flag_name(arg),
                cell(&arg.get_help().map(ToString::to_string).unwrap_or_default())
            );
        }
    }
    out.push_str(
        "| `NO_COLOR` | Set to a non-empty value to turn off color in tables, diffs and progress (<https://no-color.org>). |\n\
         | *any* | `provider create/update --credential-from-env K` reads credential `K` from the variable `K`, so the value stays out of the process list. |\n\
         | `XDG_CONFIG_HOME`, `HOME` | Saved gateways live in `$XDG_CONFIG_HOME/openshell/` (when absolute), else `$HOME/.config/openshell/`: `gateways.yaml` and `tokens/NAME`, each mode 0600. |\n\
         | `COMPLETE` | Set by the scripts of `openshell completions SHELL`: the run completes the words after `--` instead of running a command. |\n\
         | `OPENSHELL_WAIT_RECONNECT_WINDOW` | How long a wait (`--wait`, `operations wait`) that lost its gateway keeps reconnecting, with a note, before it exits 69 (default `30s`, never past the wait's own `--timeout`): a gateway restart does not end a wait. |\n",
    );
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Where the generated reference is committed, relative to the workspace root.
    const DOCS_PATH: &str = "docs/cli.md";

    #[test]
    fn committed_reference_is_current() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(DOCS_PATH);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        let fresh = markdown();
        assert!(
            committed == fresh,
            "{DOCS_PATH} is stale: it no longer matches the CLI's clap definitions.\nRegenerate it from the workspace root with:\n  {REGENERATE}"
        );
    }

    #[test]
    fn every_visible_command_and_flag_is_documented() {
        let doc = markdown();
        for (path, cmd) in walk(&Cli::command()) {
            assert!(doc.contains(&format!("### {}\n", title(&path))), "{path:?}");
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = arg.get_long().filter(|l| *l != "help") {
                    assert!(doc.contains(&format!("--{long}")), "{path:?} --{long}");
                }
            }
        }
        assert!(
            !doc.contains("### openshell docs"),
            "hidden commands stay out"
        );
        assert!(doc.contains("openshell policy set"));
        assert!(doc.contains("| 124 |"));
        assert!(doc.contains("`OPENSHELL_GATEWAY`"));
        assert!(doc.contains("\"removed_network_access\""));
    }

    #[test]
    fn flags_show_values_defaults_and_env() {
        let root = Cli::command();
        let output = root
            .get_arguments()
            .find(|a| a.get_id() == "output")
            .unwrap();
        assert_eq!(flag_name(output), "-o, --output <OUTPUT>");
        let text = describe(output);
        assert!(
            text.contains("One of `table`, `wide`, `json`, `yaml`."),
            "{text}"
        );
        assert!(text.contains("Default `table`."), "{text}");
        let gateway = root
            .get_arguments()
            .find(|a| a.get_id() == "gateway")
            .unwrap();
        assert!(describe(gateway).contains("Env `OPENSHELL_GATEWAY`."));
    }

    /// How to regenerate the man pages.
    const REGENERATE_MAN: &str = "cargo run -q -p openshell-cli -- docs man --out-dir docs/man";

    #[test]
    fn committed_man_pages_are_current() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/man");
        let fresh = man_pages(&Cli::command()).unwrap();
        let mut committed = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            committed.insert(name, std::fs::read(entry.path()).unwrap());
        }
        assert!(
            committed == fresh,
            "docs/man is stale: it no longer matches the CLI's clap definitions.\nRegenerate it from the workspace root with:\n  rm -rf docs/man && {REGENERATE_MAN}"
        );
        assert!(fresh.contains_key("openshell.1"));
        assert!(fresh.contains_key("openshell-gateway-login.1"));
        assert!(
            !fresh.keys().any(|k| k.contains("docs")),
            "hidden commands stay out"
        );
    }

    #[test]
    fn cells_stay_on_one_line() {
        assert_eq!(cell("a | b\n  c"), "a \\| b c");
    }
}
