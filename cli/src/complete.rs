//! Shell completion that knows the gateway's names: sandboxes, providers,
//! operations, and the saved gateways.
//!
//! The shell runs `openshell` itself to complete (clap_complete's dynamic
//! completion: `COMPLETE=SHELL openshell -- WORDS`), and the completers
//! below ask the gateway the environment and the selected saved gateway
//! point at, with a short timeout: a gateway that is down or slow costs a
//! moment and completes nothing, never an error in the shell.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
use openshell_sdk::Client;

use crate::context::{Ctx, GlobalArgs};
use crate::gateways::Store;
use crate::output::OutputFormat;

/// The environment variable that turns a run of `openshell` into a completion request.
pub const COMPLETE_VAR: &str = "COMPLETE";

/// Bound on asking the gateway for names: a person is waiting at the prompt.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The script that registers completion with `shell`, for `openshell completions`.
pub fn registration(shell: clap_complete::Shell, out: &mut dyn Write) -> std::io::Result<()> {
    let completer: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::PowerShell => &Powershell,
        // Zsh, and any shell clap_complete adds later, which zsh's script suits best.
        _ => &Zsh,
    };
    completer.write_registration(COMPLETE_VAR, "openshell", "openshell", "openshell", out)
}

pub fn sandbox_names() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        ask_gateway(|client| async move {
            let list = client.list_sandboxes(None, false).await.ok()?;
            let mut names = BTreeSet::new();
            for sb in list {
                names.insert(sb.name.clone());
                names.insert(format!("{}/{}", sb.workspace, sb.name));
            }
            Some(names.into_iter().map(CompletionCandidate::new).collect())
        })
    })
}

pub fn provider_names() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        ask_gateway(|client| async move {
            let list = client.list_providers(None).await.ok()?;
            let names: BTreeSet<String> = list.into_iter().map(|p| p.name).collect();
            Some(names.into_iter().map(CompletionCandidate::new).collect())
        })
    })
}

pub fn operation_ids() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        ask_gateway(|client| async move {
            let list = client.list_operations(None, &[], 50).await.ok()?;
            Some(
                list.into_iter()
                    .map(|op| {
                        let help = format!("{} {}", op.state, op.target);
                        CompletionCandidate::new(op.id).help(Some(help.into()))
                    })
                    .collect(),
            )
        })
    })
}

pub fn gateway_names() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        let Ok(file) = Store::locate().and_then(|store| {
            store
                .load()
                .map_err(|err| crate::exit::UsageError(err.to_string()))
        }) else {
            return Vec::new();
        };
        file.gateways
            .into_iter()
            .map(|(name, saved)| CompletionCandidate::new(name).help(Some(saved.url.into())))
            .collect()
    })
}

/// Runs `query` against the gateway commands would use, bounded by
/// [`QUERY_TIMEOUT`]; nothing on any failure.
fn ask_gateway<F, Fut>(query: F) -> Vec<CompletionCandidate>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Option<Vec<CompletionCandidate>>>,
{
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    // The words being completed are not parsed, so flags on them do not
    // count: the environment and the selected saved gateway do.
    let ctx = Ctx::new(GlobalArgs {
        gateway: std::env::var("OPENSHELL_GATEWAY").ok(),
        gateway_endpoint: std::env::var("OPENSHELL_GATEWAY_ENDPOINT").ok(),
        token: std::env::var("OPENSHELL_TOKEN").ok(),
        ca_cert: std::env::var_os("OPENSHELL_CA_CERT").map(Into::into),
        output: OutputFormat::Table,
        no_headers: false,
        quiet: true,
        yes: false,
    });
    runtime.block_on(async {
        let work = async {
            let target = ctx.target().ok()?;
            let client = target.connect(QUERY_TIMEOUT, QUERY_TIMEOUT).await.ok()?;
            query(client).await
        };
        tokio::time::timeout(QUERY_TIMEOUT, work)
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    })
}
