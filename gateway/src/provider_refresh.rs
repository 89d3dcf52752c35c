//! Credential refresh: before a provider's credentials expire, the gateway
//! asks a hook for new ones and writes them as a provider update, which
//! rebuilds only the sandboxes that attach that provider.
//!
//! Hooks are configured on the gateway (`[[provider_refresh]]` in its config
//! file), not through the API: a hook runs with the gateway's privileges, so
//! only whoever runs the gateway may name one. A hook is a command run
//! without a shell, which prints one JSON document on stdout:
//!
//! ```json
//! {"credentials": {"GITHUB_TOKEN": {"value": "…", "expires_at": "2026-12-02T10:00:00Z"}},
//!  "expires_at": "2026-12-02T10:00:00Z"}
//! ```
//!
//! `credentials` replaces values the provider already holds (others are kept);
//! `expires_at` of a value is its own expiry, the top-level one the provider's
//! (absent: no provider-wide expiry). An HTTP endpoint is reached through a
//! command (`curl -fsS -X POST https://…`), which brings its own TLS and proxy
//! settings. Neither the hook's output nor its stderr is ever logged: they
//! hold credentials.
//!
//! Every replica runs the loop; the write is conditional on the provider's
//! revision, so when two replicas refresh at once one write wins and the
//! other writes nothing. A failed refresh is tried again with exponential
//! backoff (1 s doubling to `max_backoff`); the credentials stay as they are,
//! and once one expires the supervisor withholds it from the workload.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openshell_core::Secret;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::config::ProviderRefreshHook;
use crate::providers;
use crate::state::Announcer;
use crate::store::{ProviderValues, Store, now_ms};

/// The longest hook output read; a refresh answer is a few credentials.
const MAX_OUTPUT_BYTES: u64 = 256 * 1024;
/// First wait after a failed refresh; it doubles up to the hook's `max_backoff`.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Why one refresh attempt did not write new credentials.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error("the hook could not be started: {0}")]
    Spawn(std::io::Error),
    #[error("the hook did not finish within {0:?}")]
    Timeout(Duration),
    #[error("the hook exited with {0}")]
    Exit(std::process::ExitStatus),
    #[error("the hook's output is not a refresh answer: {0}")]
    Answer(String),
    #[error("the hook returned {0}, which provider {1} does not hold as a credential")]
    UnknownCredential(String, String),
    #[error("the store refused the refreshed values: {0}")]
    Write(String),
}

/// What a hook prints.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    credentials: BTreeMap<String, AnswerValue>,
    #[serde(default)]
    expires_at: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerValue {
    value: Secret,
    #[serde(default)]
    expires_at: Option<String>,
}

impl std::fmt::Debug for AnswerValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerValue")
            .field("value", &self.value)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Where each hook stands between attempts.
#[derive(Debug, Default, Clone)]
struct HookState {
    failures: u32,
    /// No attempt before this time (ms since the epoch).
    not_before_ms: i64,
}

/// Runs the refresh loop until the gateway stops.
pub async fn run(
    store: Store,
    announcer: Announcer,
    hooks: Arc<Vec<ProviderRefreshHook>>,
    check_every: Duration,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    if hooks.is_empty() {
        return;
    }
    let mut states = vec![HookState::default(); hooks.len()];
    let mut tick = tokio::time::interval(check_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.changed() => return,
        }
        for (hook, state) in hooks.iter().zip(states.iter_mut()) {
            refresh_if_due(&store, &announcer, hook, state).await;
        }
    }
}

async fn refresh_if_due(
    store: &Store,
    announcer: &Announcer,
    hook: &ProviderRefreshHook,
    state: &mut HookState,
) {
    let now = now_ms();
    if now < state.not_before_ms {
        return;
    }
    let provider = match store
        .resolve_provider(&hook.provider, &hook.workspace)
        .await
    {
        Ok(provider) => provider,
        Err(e) => {
            tracing::warn!(provider = %hook.label(), error = %e, "credential refresh: provider not readable");
            state.not_before_ms = now + backoff_ms(hook, state.failures);
            return;
        }
    };
    let Some(expiry) = provider.earliest_credential_expiry() else {
        return;
    };
    let lead = i64::try_from(hook.lead.as_millis()).unwrap_or(i64::MAX);
    if now < expiry.saturating_sub(lead) {
        return;
    }
    match refresh(store, hook, &provider).await {
        Ok(Some(change)) => {
            state.failures = 0;
            state.not_before_ms = 0;
            tracing::info!(
                provider = %hook.label(),
                revision = change.provider.revision,
                sandboxes = change.provider.attached_sandbox_ids.len(),
                "credentials refreshed"
            );
            announcer.publish(change.publication).await;
        }
        Ok(None) => {
            tracing::info!(provider = %hook.label(), "credential refresh: the provider changed meanwhile; nothing written");
        }
        Err(e) => {
            state.failures = state.failures.saturating_add(1);
            let wait = backoff_ms(hook, state.failures);
            state.not_before_ms = now + wait;
            tracing::warn!(
                provider = %hook.label(),
                error = %e,
                failures = state.failures,
                retry_in_ms = wait,
                "credential refresh failed; the current credentials stay until they expire"
            );
        }
    }
}

fn backoff_ms(hook: &ProviderRefreshHook, failures: u32) -> i64 {
    let doubled = FIRST_BACKOFF.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    i64::try_from(doubled.min(hook.max_backoff).as_millis()).unwrap_or(i64::MAX)
}

/// One attempt: runs the hook and writes what it returned, unless the
/// provider moved on since it was read.
async fn refresh(
    store: &Store,
    hook: &ProviderRefreshHook,
    provider: &crate::store::ProviderRecord,
) -> Result<Option<providers::ProviderChange>, RefreshError> {
    let output = run_hook(hook, provider).await?;
    let answer: Answer =
        serde_json::from_slice(&output).map_err(|e| RefreshError::Answer(answer_error(&e)))?;
    let mut credentials = store
        .provider_credentials(&provider.id)
        .await
        .map_err(|e| RefreshError::Write(e.to_string()))?;
    let mut value_expires_at = provider.value_expires_at.clone();
    for (name, value) in answer.credentials {
        if !credentials.contains_key(&name) {
            return Err(RefreshError::UnknownCredential(name, hook.label()));
        }
        match value.expires_at.as_deref().map(parse_time).transpose()? {
            Some(at) => value_expires_at.insert(name.clone(), at),
            None => value_expires_at.remove(&name),
        };
        credentials.insert(name, value.value);
    }
    let values = ProviderValues {
        env: provider.env.clone(),
        credentials,
        expires_at: answer.expires_at.as_deref().map(parse_time).transpose()?,
        value_expires_at,
    };
    providers::write_values(store, provider, values, Some(provider.revision))
        .await
        .map_err(|e| RefreshError::Write(e.to_string()))
}

/// A JSON error without the text around it, which may hold a credential.
fn answer_error(e: &serde_json::Error) -> String {
    format!(
        "{:?} error at line {} column {}",
        e.classify(),
        e.line(),
        e.column()
    )
}

fn parse_time(text: &str) -> Result<i64, RefreshError> {
    let at = humantime::parse_rfc3339_weak(text)
        .map_err(|e| RefreshError::Answer(format!("expires_at {text:?}: {e}")))?;
    let since = at
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis();
    Ok(i64::try_from(since).unwrap_or(i64::MAX))
}

async fn run_hook(
    hook: &ProviderRefreshHook,
    provider: &crate::store::ProviderRecord,
) -> Result<Vec<u8>, RefreshError> {
    let Some((program, args)) = hook.command.split_first() else {
        return Err(RefreshError::Answer("the hook has no command".into()));
    };
    let expiry = provider
        .earliest_credential_expiry()
        .map(|ms| UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("OPENSHELL_PROVIDER", &provider.name)
        .env("OPENSHELL_PROVIDER_WORKSPACE", &provider.workspace)
        .env("OPENSHELL_PROVIDER_TYPE", &provider.provider_type)
        .env(
            "OPENSHELL_CREDENTIAL_NAMES",
            provider.credential_names.join(","),
        )
        .env(
            "OPENSHELL_CREDENTIALS_EXPIRE_AT",
            humantime::format_rfc3339_seconds(expiry).to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(RefreshError::Spawn)?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| RefreshError::Answer("the hook's stdout is not readable".into()))?;
    let finished = async {
        let mut output = Vec::new();
        (&mut stdout)
            .take(MAX_OUTPUT_BYTES)
            .read_to_end(&mut output)
            .await
            .map_err(|e| RefreshError::Answer(format!("reading its output: {e}")))?;
        let status = child
            .wait()
            .await
            .map_err(|e| RefreshError::Answer(format!("waiting for it: {e}")))?;
        Ok::<_, RefreshError>((status, output))
    };
    let (status, output) = tokio::time::timeout(hook.timeout, finished)
        .await
        .map_err(|_| RefreshError::Timeout(hook.timeout))??;
    if !status.success() {
        return Err(RefreshError::Exit(status));
    }
    Ok(output)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn hook(max_backoff: Duration) -> ProviderRefreshHook {
        ProviderRefreshHook {
            workspace: "default".into(),
            provider: "gh".into(),
            command: vec!["true".into()],
            timeout: Duration::from_secs(5),
            lead: Duration::from_secs(60),
            max_backoff,
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let h = hook(Duration::from_secs(10));
        let waits: Vec<i64> = (1..=6).map(|n| backoff_ms(&h, n)).collect();
        assert_eq!(waits, [1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(backoff_ms(&h, u32::MAX), 10_000);
    }

    #[test]
    fn an_answer_error_never_quotes_the_output() {
        let secret = "ghp_supersecretvalue";
        let text = format!("{{\"credentials\": {{\"GITHUB_TOKEN\": \"{secret}\"}}}}");
        let err = serde_json::from_str::<Answer>(&text).unwrap_err();
        let message = answer_error(&err);
        assert!(!message.contains(secret), "{message}");
        assert!(message.contains("line 1"), "{message}");
        let parsed: Answer = serde_json::from_str(&format!(
            "{{\"credentials\": {{\"GITHUB_TOKEN\": {{\"value\": \"{secret}\"}}}}}}"
        ))
        .unwrap();
        assert!(!format!("{parsed:?}").contains(secret));
    }
}
