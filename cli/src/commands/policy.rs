//! `openshell policy …`: sandbox and global policies.

use openshell_core::policy::SandboxPolicy as PolicyDoc;
use openshell_sdk::{Client, EditSpecs, PolicySource, SandboxRef, SdkError, Target, UpdateConfig};

use crate::cli::{PolicyCommand, PolicyTarget};
use crate::commands::{read_input, read_policy, sandbox_count, source_label};
use crate::context::Ctx;
use crate::diff::{self, PolicyDiff};
use crate::output::{Output, OutputFormat, no_color, sanitize, write_stdout};
use crate::validation::Validation;
use crate::{exit, outcome, views};

pub async fn run(ctx: &Ctx, cmd: PolicyCommand) -> anyhow::Result<u8> {
    match cmd {
        PolicyCommand::Set {
            target: PolicyTarget { sandbox, .. },
            file,
            dry_run,
            expected_revision,
            wait,
        } => {
            // Read before connecting so a bad path fails without touching the gateway.
            let text = read_policy(ctx, &file)?;
            let client = ctx.client().await?;
            if dry_run {
                // Nothing is written, so there is nothing to confirm.
                let target = match sandbox {
                    Some(sb) => Target::Sandbox(SandboxRef::from(sb)),
                    None => Target::Global,
                };
                let mut update = UpdateConfig::new(target).policy(text);
                update.idempotency_key = wait.idempotency_key.filter(|k| !k.is_empty());
                update.expected_revision = expected_revision;
                return outcome::dry_run(ctx, &client, update).await;
            }
            let target = match sandbox {
                Some(sb) => {
                    let sb = SandboxRef::from(sb);
                    if let Some(code) =
                        confirm_network_removal(ctx, &client, &sb, &text, &file).await?
                    {
                        return Ok(code);
                    }
                    Target::Sandbox(sb)
                }
                None => {
                    let details = describe_global_policy(&client, &text);
                    if let Some(code) = ctx
                        .confirm(
                            true,
                            "set the global policy",
                            "Set the global policy?",
                            details,
                        )
                        .await?
                    {
                        return Ok(code);
                    }
                    Target::Global
                }
            };
            let mut update = UpdateConfig::new(target).policy(text);
            update.expected_revision = expected_revision;
            let update = outcome::configure(update, &wait);
            outcome::apply_update(ctx, &client, update).await
        }
        PolicyCommand::Update {
            target: PolicyTarget { sandbox, .. },
            edits,
            dry_run,
            expected_revision,
            wait,
        } => {
            let specs = EditSpecs::from(edits);
            let target = match sandbox {
                Some(sb) => Target::Sandbox(SandboxRef::from(sb)),
                None => Target::Global,
            };
            let global = matches!(target, Target::Global);
            // Checked before connecting, so a malformed flag fails without a gateway.
            let mut update = UpdateConfig::new(target).edit_specs(&specs)?;
            update.expected_revision = expected_revision;
            let client = ctx.client().await?;
            if dry_run {
                update.idempotency_key = wait.idempotency_key.filter(|k| !k.is_empty());
                return outcome::dry_run(ctx, &client, update).await;
            }
            if global {
                let details = async {
                    Ok(format!(
                        "This edits the global policy, which replaces the policy of every sandbox ({} now) in every workspace.",
                        sandbox_count(&client).await?
                    ))
                };
                if let Some(code) = ctx
                    .confirm(
                        true,
                        "edit the global policy",
                        "Edit the global policy?",
                        details,
                    )
                    .await?
                {
                    return Ok(code);
                }
            }
            let update = outcome::configure(update, &wait);
            outcome::apply_update(ctx, &client, update).await
        }
        PolicyCommand::Validate { file } => validate(ctx, &file),
        PolicyCommand::ClearGlobal { wait } => {
            let client = ctx.client().await?;
            let details = async {
                Ok(format!(
                    "This removes the global policy: each sandbox ({} now) goes back to its own policy.",
                    sandbox_count(&client).await?
                ))
            };
            if let Some(code) = ctx
                .confirm(
                    true,
                    "clear the global policy",
                    "Clear the global policy?",
                    details,
                )
                .await?
            {
                return Ok(code);
            }
            let update = outcome::configure(
                UpdateConfig::new(Target::Global).clear_global_policy(),
                &wait,
            );
            outcome::apply_update(ctx, &client, update).await
        }
        PolicyCommand::Get {
            target: PolicyTarget { sandbox, .. },
            revision,
        } => {
            let client = ctx.client().await?;
            let sandbox = sandbox.map(SandboxRef::from);
            let policy = match &sandbox {
                Some(sandbox) => client.get_sandbox_policy(sandbox, revision).await?,
                None => client.get_global_policy(revision).await?,
            };
            if ctx.out.format == OutputFormat::Yaml {
                // The policy text itself, so `policy get -o yaml > p.yaml`
                // round-trips into `policy set -f p.yaml`.
                let yaml = policy.policy.policy_yaml.as_deref().ok_or_else(|| {
                    if sandbox.is_none() && policy.policy.policy_hash.is_empty() {
                        anyhow::anyhow!(
                            "global policy revision {} cleared the global policy: it has no policy text",
                            policy.policy.revision
                        )
                    } else {
                        anyhow::anyhow!(
                            "revision {} came back without its policy text",
                            policy.policy.revision
                        )
                    }
                })?;
                let mut text = yaml.to_owned();
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                write_stdout(&text)?;
            } else {
                // The table sets the revision beside the one the supervisor
                // runs; JSON keeps the policy's own shape (`sandbox get`
                // carries the applied revision).
                match &sandbox {
                    Some(sandbox) => {
                        let sandbox = if ctx.out.format.is_table() {
                            Some(client.get_sandbox(sandbox).await?)
                        } else {
                            None
                        };
                        ctx.out
                            .print(&policy, |o| views::policy(o, &policy, sandbox.as_ref()))?;
                    }
                    None => ctx
                        .out
                        .print(&policy, |o| views::global_policy(o, &policy))?,
                }
            }
            Ok(exit::SUCCESS)
        }
        PolicyCommand::History {
            target: PolicyTarget { sandbox, .. },
            limit,
        } => {
            let client = ctx.client().await?;
            let revisions = match sandbox {
                Some(sandbox) => {
                    client
                        .list_sandbox_policies(&SandboxRef::from(sandbox), limit)
                        .await?
                }
                None => client.list_global_policies(limit).await?,
            };
            ctx.out
                .print(&revisions, |o| views::policy_history(o, &revisions))?;
            Ok(exit::SUCCESS)
        }
        PolicyCommand::Diff {
            target: PolicyTarget { sandbox, .. },
            file,
        } => {
            let text = read_policy(ctx, &file)?;
            let source = source_label(&file);
            let new = diff::parse(&text, &source)?;
            let client = ctx.client().await?;
            let (current, name) = match sandbox {
                Some(sandbox) => {
                    let sandbox = SandboxRef::from(sandbox);
                    (
                        current_policy(&client, &sandbox).await?,
                        sandbox.to_string(),
                    )
                }
                None => (
                    current_global_policy(&client).await?,
                    "the global policy".to_owned(),
                ),
            };
            let (doc, label) = match &current {
                Some((doc, revision, _)) => (Some(doc), format!("{name} (revision {revision})")),
                None => (None, format!("{name} (none set)")),
            };
            let result = diff::compare(doc, &new, &label, &source);
            ctx.out
                .print(&result, |o| diff_table(o, &result, &source, &label))?;
            if ctx.out.format.is_table() && !result.kept_static_sections.is_empty() {
                ctx.note(format!(
                    "kept from the current policy: {} (the file omits them)",
                    result.kept_static_sections.join(", ")
                ));
            }
            if name != "the global policy"
                && let Some((_, _, PolicySource::Global)) = current
            {
                ctx.note(
                    "note: a global policy is in effect; this sandbox's own policy applies once it is cleared",
                );
            }
            // Like diff(1): 0 the same, 1 different.
            Ok(if result.changed {
                exit::DIFFERENT
            } else {
                exit::SUCCESS
            })
        }
    }
}

/// `policy validate`: offline, so CI can check a file before any gateway sees it.
fn validate(ctx: &Ctx, file: &str) -> anyhow::Result<u8> {
    // An empty file is read, not refused: "empty" is one of the problems to report.
    let text = read_input(file, "policy")?;
    let result = Validation::of(&text);
    ctx.out.print(&result, |_| validation_text(&result))?;
    Ok(if result.valid {
        exit::SUCCESS
    } else {
        exit::INVALID
    })
}

/// `valid`, or one `field: message` line per problem, for people and for
/// `grep` alike.
fn validation_text(result: &Validation) -> String {
    if result.valid {
        return "valid\n".to_owned();
    }
    let mut text = String::new();
    for v in &result.violations {
        if v.field.is_empty() {
            text.push_str(&v.message);
        } else {
            text.push_str(&format!("{}: {}", v.field, v.message));
        }
        text.push('\n');
    }
    sanitize(&text).into_owned()
}

/// The sandbox's own latest policy, its revision and where the effective
/// policy comes from; `None` when it has no policy yet.
async fn current_policy(
    client: &Client,
    sandbox: &SandboxRef,
) -> anyhow::Result<Option<(PolicyDoc, u64, PolicySource)>> {
    // Ask for the sandbox first: "no such sandbox" is an error, "no policy yet" is not.
    if client.get_sandbox(sandbox).await?.policy_revision == 0 {
        return Ok(None);
    }
    let policy = client.get_sandbox_policy(sandbox, None).await?;
    let Some(yaml) = policy.policy.policy_yaml.as_deref() else {
        anyhow::bail!(
            "revision {} came back without its policy text",
            policy.policy.revision
        );
    };
    let doc = diff::parse(yaml, "the gateway's current policy")?;
    Ok(Some((doc, policy.policy.revision, policy.effective_source)))
}

/// The global policy in effect, its revision and source; `None` when none is set.
async fn current_global_policy(
    client: &Client,
) -> anyhow::Result<Option<(PolicyDoc, u64, PolicySource)>> {
    let policy = match client.get_global_policy(None).await {
        Ok(policy) => policy,
        Err(SdkError::NotFound(_)) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    // The latest revision may be the one that cleared it.
    let Some(yaml) = policy.policy.policy_yaml.as_deref() else {
        return Ok(None);
    };
    let doc = diff::parse(yaml, "the gateway's global policy")?;
    Ok(Some((doc, policy.policy.revision, PolicySource::Global)))
}

fn diff_table(out: &Output, result: &PolicyDiff, source: &str, label: &str) -> String {
    if !result.changed {
        return sanitize(&format!("no differences: {source} matches {label}\n")).into_owned();
    }
    let mut text = diff::colorize(&result.diff, out.color);
    if !result.removed_network_access.is_empty() {
        text.push_str(&sanitize(&format!(
            "\nremoves network access: {}\n",
            result.removed_network_access.join(", ")
        )));
    }
    text
}

/// Asks before a sandbox policy that takes network access away. Without
/// `--yes` this reads the current policy, so scripts that remove access must
/// say so; a file that does not parse is left for the gateway to report.
async fn confirm_network_removal(
    ctx: &Ctx,
    client: &Client,
    sandbox: &SandboxRef,
    text: &str,
    file: &str,
) -> anyhow::Result<Option<u8>> {
    if ctx.global.yes {
        return Ok(None);
    }
    let Ok(new) = diff::parse(text, &source_label(file)) else {
        return Ok(None);
    };
    let current = match client.get_sandbox_policy(sandbox, None).await {
        Ok(policy) => policy,
        // No sandbox or no policy yet: nothing to lose; the write reports the former.
        Err(SdkError::NotFound(_)) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let Some(Ok(old)) = current
        .policy
        .policy_yaml
        .as_deref()
        .map(|yaml| diff::parse(yaml, "the gateway's current policy"))
    else {
        return Ok(None);
    };
    let label = format!("{sandbox} (revision {})", current.policy.revision);
    let result = diff::compare(Some(&old), &new, &label, &source_label(file));
    if result.removed_network_access.is_empty() {
        return Ok(None);
    }
    let details = format!(
        "{}\n\n{}",
        sanitize(&format!(
            "This policy removes network access from sandbox {sandbox}: {}",
            result.removed_network_access.join(", ")
        )),
        diff::colorize(&result.diff, !no_color())
    );
    ctx.confirm(
        true,
        &format!("remove network access from sandbox {sandbox}"),
        "Apply this policy?",
        async { Ok(details) },
    )
    .await
}

/// What a global policy write reaches, for the confirmation prompt.
async fn describe_global_policy(client: &Client, text: &str) -> anyhow::Result<String> {
    let count = sandbox_count(client).await?;
    let mut details = format!(
        "This sets the global policy: while set, it replaces the policy of every sandbox ({count} now) in every workspace."
    );
    if let Ok(doc) = diff::parse(text, "the policy") {
        let names: Vec<&str> = doc.network_policies.keys().map(String::as_str).collect();
        details.push_str(&format!(
            "\nIts network policies: {}.",
            if names.is_empty() {
                "none (no network access)".to_owned()
            } else {
                names.join(", ")
            }
        ));
    }
    Ok(sanitize(&details).into_owned())
}
