//! Gateway configuration: a TOML file, `OPENSHELL_*` environment variables
//! and command-line flags, merged as flag > env > file > default.
//!
//! clap resolves flag > env for each option; this module lays the file and
//! the defaults underneath.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use openshell_core::Secret;
use serde::Deserialize;

use crate::authz::Role;

/// How configuration reaches supervisors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// Supervisors poll every 10 s (the 0.1.x default).
    Poll,
    /// Configuration is pushed over the supervisor session.
    Push,
}

impl DeliveryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Poll => "poll",
            Self::Push => "push",
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Command-line flags; every one can also come from its `OPENSHELL_*` variable.
#[derive(Debug, Parser)]
#[command(
    name = "openshell-gateway",
    version,
    about = "The OpenShell configuration gateway"
)]
pub struct Flags {
    /// TOML configuration file.
    #[arg(long, env = "OPENSHELL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the operator and supervisor API.
    #[arg(long, env = "OPENSHELL_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Store URL: `sqlite://PATH` or `postgres://…`; default is a SQLite file in the data dir.
    #[arg(long, env = "OPENSHELL_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Directory for the SQLite store and generated key files.
    #[arg(long, env = "OPENSHELL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// `poll` (default in 0.1.x) or `push`.
    #[arg(long, env = "OPENSHELL_CONFIG_DELIVERY_MODE")]
    pub config_delivery_mode: Option<DeliveryMode>,
    /// Operator token, as `NAME=TOKEN` or just `TOKEN` (named "operator"); repeatable, or comma-separated in the env.
    #[arg(
        long = "operator-token",
        env = "OPENSHELL_OPERATOR_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub operator_tokens: Vec<String>,
    /// PEM certificate chain; with --tls-key, every listener serves TLS.
    #[arg(long, env = "OPENSHELL_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "OPENSHELL_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Base64 of the 32-byte key that encrypts provider credentials at rest.
    // A generated secret may start with `-` (URL-safe base64): it is still a value.
    #[arg(
        long,
        env = "OPENSHELL_CREDENTIAL_KEY",
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    pub credential_key: Option<String>,
    /// `text` or `json` log lines.
    #[arg(long, env = "OPENSHELL_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. `info` or `openshell_gateway=debug` (RUST_LOG syntax).
    #[arg(long, env = "OPENSHELL_LOG")]
    pub log: Option<String>,
    /// Id of this replica; default is generated at start.
    #[arg(long, env = "OPENSHELL_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// How long an idempotency key stays reserved, e.g. `24h`.
    #[arg(long, env = "OPENSHELL_IDEMPOTENCY_RETENTION", value_parser = humantime::parse_duration)]
    pub idempotency_retention: Option<Duration>,
    /// How long terminal operations are kept, e.g. `30d`.
    #[arg(long, env = "OPENSHELL_OPERATION_RETENTION", value_parser = humantime::parse_duration)]
    pub operation_retention: Option<Duration>,
    /// Server-side waits one operator token may hold open on this replica at once
    /// (`UpdateConfig` with WAIT_FOR_APPLY, `WaitForApply` streams); more are refused.
    #[arg(long, env = "OPENSHELL_MAX_WAITS_PER_TOKEN")]
    pub max_waits_per_token: Option<usize>,
    /// Supervisor sessions this replica holds at once; more are refused and retry.
    #[arg(long, env = "OPENSHELL_MAX_SESSIONS")]
    pub max_sessions: Option<usize>,
    /// Address of the Prometheus `/metrics` listener (`off` disables it).
    #[arg(long, env = "OPENSHELL_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Heartbeat interval of supervisor sessions, e.g. `5s`.
    #[arg(long, env = "OPENSHELL_HEARTBEAT_INTERVAL", value_parser = humantime::parse_duration)]
    pub heartbeat_interval: Option<Duration>,
    /// Secret shared by the replicas of one PostgreSQL store; with it they
    /// tell each other about writes at once instead of by reconcile.
    #[arg(
        long,
        env = "OPENSHELL_PEER_SECRET",
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    pub peer_secret: Option<String>,
    /// URL other replicas reach this one at, e.g. `http://10.0.0.5:7070`;
    /// default is the listen address.
    #[arg(long, env = "OPENSHELL_PEER_ADDRESS")]
    pub peer_address: Option<String>,
}

/// The TOML file; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub database_url: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub config_delivery_mode: Option<DeliveryMode>,
    #[serde(default)]
    pub operator_tokens: Vec<FileToken>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub credential_key: Option<Secret>,
    pub log_format: Option<LogFormat>,
    pub log: Option<String>,
    pub replica_id: Option<String>,
    #[serde(default, with = "humantime_serde_opt")]
    pub idempotency_retention: Option<Duration>,
    pub max_waits_per_token: Option<usize>,
    pub max_sessions: Option<usize>,
    pub metrics_listen: Option<String>,
    #[serde(default, with = "humantime_serde_opt")]
    pub heartbeat_interval: Option<Duration>,
    #[serde(default, with = "humantime_serde_opt")]
    pub operation_retention: Option<Duration>,
    pub peer_secret: Option<Secret>,
    pub peer_address: Option<String>,
    #[serde(default)]
    pub provider_refresh: Vec<FileRefreshHook>,
}

/// One `[[provider_refresh]]` table: a hook that renews a provider's credentials.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRefreshHook {
    /// `NAME` (workspace `default`) or `WORKSPACE/NAME`.
    pub provider: String,
    /// Program and arguments, run without a shell.
    pub command: Vec<String>,
    #[serde(default, with = "humantime_serde_opt")]
    pub timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde_opt")]
    pub lead: Option<Duration>,
    #[serde(default, with = "humantime_serde_opt")]
    pub max_backoff: Option<Duration>,
}

/// A credential refresh hook of one provider (see `provider_refresh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRefreshHook {
    pub workspace: String,
    pub provider: String,
    pub command: Vec<String>,
    /// The hook is stopped when it runs longer.
    pub timeout: Duration,
    /// How long before the first credential expires the refresh starts.
    pub lead: Duration,
    /// The longest wait between failed attempts.
    pub max_backoff: Duration,
}

impl ProviderRefreshHook {
    /// `WORKSPACE/NAME`, for logs.
    pub fn label(&self) -> String {
        format!("{}/{}", self.workspace, self.provider)
    }

    fn from_file(index: usize, hook: FileRefreshHook) -> Result<Self, ConfigError> {
        let invalid =
            |what: String| ConfigError::Invalid(format!("provider_refresh[{index}]: {what}"));
        let (workspace, provider) = match hook.provider.split_once('/') {
            Some((workspace, name)) => (workspace.to_string(), name.to_string()),
            None => ("default".to_string(), hook.provider.clone()),
        };
        if provider.is_empty() || workspace.is_empty() {
            return Err(invalid(format!(
                "provider {:?} must be NAME or WORKSPACE/NAME",
                hook.provider
            )));
        }
        if hook
            .command
            .first()
            .is_none_or(|program| program.is_empty())
        {
            return Err(invalid(
                "command must name a program, e.g. [\"/usr/local/bin/renew-token\", \"github\"]"
                    .into(),
            ));
        }
        let hook = Self {
            workspace,
            provider,
            command: hook.command,
            timeout: hook.timeout.unwrap_or(DEFAULT_REFRESH_TIMEOUT),
            lead: hook.lead.unwrap_or(DEFAULT_REFRESH_LEAD),
            max_backoff: hook.max_backoff.unwrap_or(DEFAULT_REFRESH_MAX_BACKOFF),
        };
        if hook.timeout.is_zero() || hook.max_backoff.is_zero() {
            return Err(invalid(
                "timeout and max_backoff must be greater than zero".into(),
            ));
        }
        Ok(hook)
    }
}

pub const DEFAULT_REFRESH_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_REFRESH_LEAD: Duration = Duration::from_secs(5 * 60);
pub const DEFAULT_REFRESH_MAX_BACKOFF: Duration = Duration::from_secs(5 * 60);
/// How often the refresh loop looks at the hooks' providers.
pub const DEFAULT_REFRESH_CHECK: Duration = Duration::from_secs(5);

/// One named operator token in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileToken {
    pub name: String,
    pub token: Secret,
    /// `viewer`, `operator` or `admin`; unset: `admin`, so a configuration
    /// written before roles existed keeps every right it had.
    pub role: Option<String>,
    /// Limits the token to this workspace; unset: every workspace.
    pub workspace: Option<String>,
}

mod humantime_serde_opt {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| humantime::parse_duration(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// An operator token and the principal it stands for.
#[derive(Debug, Clone)]
pub struct OperatorToken {
    pub name: String,
    pub token: Secret,
    pub role: Role,
    /// The only workspace the token may touch; None: every workspace.
    pub workspace: Option<String>,
}

impl OperatorToken {
    /// An admin token of every workspace: what a token without a role is.
    pub fn admin(name: impl Into<String>, token: Secret) -> Self {
        Self {
            name: name.into(),
            token,
            role: Role::Admin,
            workspace: None,
        }
    }
}

/// Shortest secret a configured operator token may have, in characters. A bearer token is
/// the whole of an operator's credential; 16 random characters are far out of reach of a
/// guess, while a word or a 1-character placeholder left in a configuration is not.
pub const MIN_TOKEN_SECRET_CHARS: usize = 16;

/// Where configured operator tokens came from: how an error names an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// `[[operator_tokens]]` of the file, or a configuration built in code: entries are
    /// `operator_tokens[i]`, and their names, a field apart from the secret, are quoted.
    File,
    /// `--operator-token` / `OPENSHELL_OPERATOR_TOKENS`: entries are counted from 1 and their
    /// names never quoted, since a bare secret holding `=` is read as `NAME=TOKEN`, and its
    /// "name" is then part of the secret.
    Flags,
}

impl TokenSource {
    fn entry(self, index: usize, name: &str) -> String {
        match self {
            Self::File => format!("operator_tokens[{index}] ({name:?})"),
            Self::Flags => format!(
                "operator token {} of --operator-token/OPENSHELL_OPERATOR_TOKENS",
                index + 1
            ),
        }
    }
}

/// Checks configured operator tokens before the gateway starts: each name follows the rule of
/// sandbox and created-token names and is used once (it is the caller recorded on
/// operations and the scope of idempotency keys, so two tokens of one name would be one
/// caller); each secret has at least [`MIN_TOKEN_SECRET_CHARS`] characters of printable
/// ASCII without spaces (it travels in an HTTP header) and is used once (one secret under
/// two names authenticates as whichever is checked last). An error names the entry by its
/// index (and, from the file, its name), never by its secret.
pub fn validate_operator_tokens(
    tokens: &[OperatorToken],
    source: TokenSource,
) -> Result<(), ConfigError> {
    let invalid = |index: usize, token: &OperatorToken, what: String| {
        ConfigError::Invalid(format!("{}: {what}", source.entry(index, &token.name)))
    };
    let mut names = std::collections::HashMap::new();
    let mut secrets = std::collections::HashMap::new();
    for (i, token) in tokens.iter().enumerate() {
        if let Err(v) = openshell_core::names::validate_name("name", &token.name) {
            let why = match source {
                TokenSource::File => v.message,
                TokenSource::Flags => "the name must be 1-63 lowercase letters, digits and '-' \
                    (give the token as NAME=TOKEN; a token without NAME= is named \"operator\")"
                    .to_string(),
            };
            return Err(invalid(i, token, why));
        }
        let secret = token.token.expose();
        if secret.chars().count() < MIN_TOKEN_SECRET_CHARS {
            return Err(invalid(
                i,
                token,
                format!("the token is shorter than {MIN_TOKEN_SECRET_CHARS} characters"),
            ));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                i,
                token,
                "the token must be printable ASCII without spaces (it is sent in an HTTP \
                 header)"
                    .into(),
            ));
        }
        if let Some(first) = names.insert(token.name.as_str(), i) {
            return Err(invalid(
                i,
                token,
                format!(
                    "the name is already taken by {}: give each token a name of its own",
                    source.entry(first, &tokens[first].name)
                ),
            ));
        }
        if let Some(first) = secrets.insert(secret, i) {
            return Err(invalid(
                i,
                token,
                format!(
                    "the same token as {}: each name needs a token of its own, or calls \
                     with it are recorded under only one of the names",
                    source.entry(first, &tokens[first].name)
                ),
            ));
        }
    }
    Ok(())
}

/// A token of the file, its role and workspace checked.
fn file_token(index: usize, token: FileToken) -> Result<OperatorToken, ConfigError> {
    let field = |name: &str| format!("operator_tokens[{index}].{name}");
    let role = match token.role.as_deref() {
        None => Role::Admin,
        Some(text) => Role::parse(text).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "{}: expected viewer, operator or admin, found {text:?}",
                field("role")
            ))
        })?,
    };
    if let Some(workspace) = &token.workspace {
        openshell_core::names::validate_name(&field("workspace"), workspace)
            .map_err(|v| ConfigError::Invalid(v.to_string()))?;
    }
    Ok(OperatorToken {
        name: token.name,
        token: token.token,
        role,
        workspace: token.workspace,
    })
}

/// The merged configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    pub database_url: String,
    pub data_dir: PathBuf,
    pub config_delivery_mode: DeliveryMode,
    pub operator_tokens: Vec<OperatorToken>,
    pub tls: Option<TlsFiles>,
    pub credential_key: Option<Secret>,
    pub log_format: LogFormat,
    pub log: String,
    pub replica_id: String,
    pub idempotency_retention: Duration,
    /// Terminal operations older than this are removed.
    pub operation_retention: Duration,
    /// Server-side waits one operator token may hold open on this replica at once.
    pub max_waits_per_token: usize,
    /// Supervisor sessions this replica holds at once.
    pub max_sessions: usize,
    /// Address of the Prometheus `/metrics` listener; None disables it.
    pub metrics_listen: Option<SocketAddr>,
    /// Heartbeat interval of supervisor sessions.
    pub heartbeat_interval: Duration,
    /// Push delivery intervals and bounds (production defaults).
    pub delivery: crate::delivery::DeliveryTuning,
    /// Connections in the store pool; build permits are sized from it.
    pub db_pool_size: u32,
    /// Secret of the peer service; None: this replica neither sends nor
    /// takes hints.
    pub peer_secret: Option<Secret>,
    /// URL this replica registers for its peers; None: the listen address.
    pub peer_address: Option<String>,
    /// Credential refresh hooks, one per provider.
    pub provider_refresh: Vec<ProviderRefreshHook>,
    /// How often the refresh loop looks at the hooks' providers.
    pub provider_refresh_check: Duration,
}

/// Certificate and key paths for TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is invalid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";
pub const DEFAULT_OPERATION_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
pub const DEFAULT_DB_POOL_SIZE: u32 = 8;
/// A CI job or a person follows a few writes at a time; a script that opens
/// waits without end is cut off here before it holds a replica's memory and
/// store re-reads.
pub const DEFAULT_MAX_WAITS_PER_TOKEN: usize = 32;
/// Twice the 10k sessions a replica is sized for (operator guide, Capacity):
/// about 400 MiB of idle push sessions, a bound well short of running out.
pub const DEFAULT_MAX_SESSIONS: usize = 20_000;
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";
/// Upstream OpenShell's gateway names 15 s in `SessionAccepted`, and its
/// supervisors expect about that. At 5 s, 10k idle push sessions kept a
/// sixth of a core busy with heartbeats alone (benchmark, issue 29).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
/// A session wakes its gateway at least once per interval; below this a
/// mistyped unit (`15ms` for `15s`) would keep a replica busy with heartbeats.
pub const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
pub const DEFAULT_IDEMPOTENCY_RETENTION: Duration = Duration::from_secs(24 * 3600);

impl GatewayConfig {
    /// Merges flags (already merged with env by clap) over the file over defaults.
    pub fn resolve(flags: Flags) -> Result<Self, ConfigError> {
        let file = match &flags.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let data_dir = flags
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("openshell-data"));
        let database_url = flags
            .database_url
            .or(file.database_url)
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("gateway.db").display()));
        let operator_tokens = if flags.operator_tokens.is_empty() {
            let tokens = file
                .operator_tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| file_token(i, t))
                .collect::<Result<Vec<_>, _>>()?;
            validate_operator_tokens(&tokens, TokenSource::File)?;
            tokens
        } else {
            let tokens = flags
                .operator_tokens
                .iter()
                .map(|raw| parse_token_flag(raw))
                .collect::<Result<Vec<_>, _>>()?;
            validate_operator_tokens(&tokens, TokenSource::Flags)?;
            tokens
        };
        let tls = match (
            flags.tls_cert.or(file.tls_cert),
            flags.tls_key.or(file.tls_key),
        ) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Invalid(
                    "tls_cert and tls_key must be given together".into(),
                ));
            }
        };
        let listen = match flags.listen.or(file.listen) {
            Some(addr) => addr,
            None => DEFAULT_LISTEN
                .parse()
                .map_err(|e| ConfigError::Invalid(format!("default listen address: {e}")))?,
        };
        let metrics_listen = match flags
            .metrics_listen
            .or(file.metrics_listen)
            .unwrap_or_else(|| DEFAULT_METRICS_LISTEN.into())
            .as_str()
        {
            "off" | "" => None,
            addr => Some(addr.parse().map_err(|e| {
                ConfigError::Invalid(format!("metrics_listen {addr:?} is not an address: {e}"))
            })?),
        };
        let peer_secret = flags
            .peer_secret
            .map(Secret::new)
            .or(file.peer_secret)
            .filter(|s| !s.is_empty());
        let peer_address = flags.peer_address.or(file.peer_address);
        let provider_refresh = file
            .provider_refresh
            .into_iter()
            .enumerate()
            .map(|(i, hook)| ProviderRefreshHook::from_file(i, hook))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(address) = &peer_address
            && !(address.starts_with("http://") || address.starts_with("https://"))
        {
            return Err(ConfigError::Invalid(format!(
                "peer_address {address:?} must be a URL such as http://10.0.0.5:7070"
            )));
        }
        let max_waits_per_token = flags
            .max_waits_per_token
            .or(file.max_waits_per_token)
            .unwrap_or(DEFAULT_MAX_WAITS_PER_TOKEN);
        let max_sessions = flags
            .max_sessions
            .or(file.max_sessions)
            .unwrap_or(DEFAULT_MAX_SESSIONS);
        if max_waits_per_token == 0 || max_sessions == 0 {
            let field = if max_sessions == 0 {
                "max_sessions"
            } else {
                "max_waits_per_token"
            };
            return Err(ConfigError::Invalid(format!("{field} must be at least 1")));
        }
        let heartbeat_interval = flags
            .heartbeat_interval
            .or(file.heartbeat_interval)
            .unwrap_or(DEFAULT_HEARTBEAT_INTERVAL);
        if heartbeat_interval < MIN_HEARTBEAT_INTERVAL {
            return Err(ConfigError::Invalid(format!(
                "heartbeat_interval must be at least {MIN_HEARTBEAT_INTERVAL:?}, got {heartbeat_interval:?}"
            )));
        }
        Ok(Self {
            max_waits_per_token,
            max_sessions,
            peer_secret,
            peer_address,
            provider_refresh,
            provider_refresh_check: DEFAULT_REFRESH_CHECK,
            operation_retention: flags
                .operation_retention
                .or(file.operation_retention)
                .unwrap_or(DEFAULT_OPERATION_RETENTION),
            delivery: crate::delivery::DeliveryTuning::default(),
            db_pool_size: DEFAULT_DB_POOL_SIZE,
            metrics_listen,
            heartbeat_interval,
            listen,
            database_url,
            data_dir,
            config_delivery_mode: flags
                .config_delivery_mode
                .or(file.config_delivery_mode)
                .unwrap_or(DeliveryMode::Poll),
            operator_tokens,
            tls,
            credential_key: flags
                .credential_key
                .map(Secret::new)
                .or(file.credential_key),
            log_format: flags
                .log_format
                .or(file.log_format)
                .unwrap_or(LogFormat::Text),
            log: flags.log.or(file.log).unwrap_or_else(|| "info".into()),
            replica_id: flags.replica_id.or(file.replica_id).unwrap_or_else(|| {
                format!("gw-{}", &uuid::Uuid::now_v7().simple().to_string()[20..])
            }),
            idempotency_retention: flags
                .idempotency_retention
                .or(file.idempotency_retention)
                .unwrap_or(DEFAULT_IDEMPOTENCY_RETENTION),
        })
    }

    /// A configuration for tests and embedding: SQLite in `data_dir`, one token.
    pub fn for_data_dir(data_dir: &Path, token: &str) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            database_url: format!("sqlite://{}", data_dir.join("gateway.db").display()),
            data_dir: data_dir.to_path_buf(),
            config_delivery_mode: DeliveryMode::Poll,
            operator_tokens: vec![OperatorToken::admin("operator", Secret::new(token))],
            tls: None,
            credential_key: None,
            log_format: LogFormat::Text,
            log: "info".into(),
            replica_id: "gw-test".into(),
            idempotency_retention: DEFAULT_IDEMPOTENCY_RETENTION,
            max_waits_per_token: DEFAULT_MAX_WAITS_PER_TOKEN,
            max_sessions: DEFAULT_MAX_SESSIONS,
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            delivery: crate::delivery::DeliveryTuning::default(),
            db_pool_size: DEFAULT_DB_POOL_SIZE,
            operation_retention: DEFAULT_OPERATION_RETENTION,
            peer_secret: None,
            peer_address: None,
            provider_refresh: Vec::new(),
            provider_refresh_check: DEFAULT_REFRESH_CHECK,
        }
    }
}

fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

fn parse_token_flag(raw: &str) -> Result<OperatorToken, ConfigError> {
    let (name, token) = match raw.split_once('=') {
        Some((name, token)) => (name.trim(), token.trim()),
        None => ("operator", raw.trim()),
    };
    if token.is_empty() || name.is_empty() {
        return Err(ConfigError::Invalid(
            "operator token must be NAME=TOKEN or TOKEN, and not empty".into(),
        ));
    }
    Ok(OperatorToken::admin(name, Secret::new(token)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let mut argv = vec!["openshell-gateway"];
        argv.extend_from_slice(args);
        Flags::parse_from(argv)
    }

    #[test]
    fn flag_beats_file_beats_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "config_delivery_mode = \"push\"\nlisten = \"127.0.0.1:9000\"\n[[operator_tokens]]\nname = \"ci\"\ntoken = \"t0ken-0123456789ab\"\n",
        )
        .unwrap();
        let cfg = GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(cfg.config_delivery_mode, DeliveryMode::Push);
        assert_eq!(cfg.listen.port(), 9000);
        assert_eq!(cfg.operator_tokens[0].name, "ci");

        let cfg = GatewayConfig::resolve(flags(&[
            "--config",
            path.to_str().unwrap(),
            "--config-delivery-mode",
            "poll",
        ]))
        .unwrap();
        assert_eq!(cfg.config_delivery_mode, DeliveryMode::Poll);

        let cfg = GatewayConfig::resolve(flags(&[])).unwrap();
        assert_eq!(cfg.config_delivery_mode, DeliveryMode::Poll);
        assert_eq!(cfg.listen.to_string(), DEFAULT_LISTEN);
    }

    #[test]
    fn file_tokens_take_a_role_and_workspace_and_default_to_admin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "[[operator_tokens]]\nname = \"root\"\ntoken = \"root-secret-0123456789\"\n\n\
             [[operator_tokens]]\nname = \"ci\"\ntoken = \"ci-secret-0123456789\"\nrole = \"viewer\"\nworkspace = \"team\"\n",
        )
        .unwrap();
        let cfg = GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(cfg.operator_tokens[0].role, Role::Admin);
        assert_eq!(cfg.operator_tokens[0].workspace, None);
        assert_eq!(cfg.operator_tokens[1].role, Role::Viewer);
        assert_eq!(cfg.operator_tokens[1].workspace.as_deref(), Some("team"));
        // A flag token has no role to give: admin, as before roles existed.
        let cfg = GatewayConfig::resolve(flags(&["--operator-token", "ops=ops-secret-0123456789"]))
            .unwrap();
        assert_eq!(cfg.operator_tokens[0].role, Role::Admin);

        std::fs::write(
            &path,
            "[[operator_tokens]]\nname = \"ci\"\ntoken = \"ci-secret-0123456789\"\nrole = \"root\"\n",
        )
        .unwrap();
        let err = GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()])).unwrap_err();
        assert!(err.to_string().contains("operator_tokens[0].role"), "{err}");
        assert!(!err.to_string().contains("ci-secret"), "{err}");
    }

    #[test]
    fn wait_and_session_limits_are_read_and_must_allow_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(&path, "max_waits_per_token = 5\n").unwrap();
        let cfg = GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(cfg.max_waits_per_token, 5);
        let cfg = GatewayConfig::resolve(flags(&[])).unwrap();
        assert_eq!(cfg.max_waits_per_token, DEFAULT_MAX_WAITS_PER_TOKEN);
        let err = GatewayConfig::resolve(flags(&["--max-waits-per-token", "0"])).unwrap_err();
        assert!(err.to_string().contains("max_waits_per_token"), "{err}");
        let err = GatewayConfig::resolve(flags(&["--max-sessions", "0"])).unwrap_err();
        assert!(err.to_string().contains("max_sessions"), "{err}");
        assert_eq!(cfg.max_sessions, DEFAULT_MAX_SESSIONS);
    }

    #[test]
    fn a_heartbeat_interval_below_the_floor_is_refused_by_name() {
        let cfg = GatewayConfig::resolve(flags(&["--heartbeat-interval", "2s"])).unwrap();
        assert_eq!(cfg.heartbeat_interval, Duration::from_secs(2));
        for too_short in ["0s", "50ms"] {
            let err = GatewayConfig::resolve(flags(&["--heartbeat-interval", too_short]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("heartbeat_interval must be at least 100ms"),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_file_key_is_rejected_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(&path, "config_delivery_mod = \"push\"\n").unwrap();
        let err = GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()])).unwrap_err();
        assert!(err.to_string().contains("config_delivery_mod"), "{err}");
    }

    #[test]
    fn refresh_hooks_are_read_with_defaults_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "[[provider_refresh]]\nprovider = \"team/github\"\ncommand = [\"/bin/renew\", \"gh\"]\nlead = \"10m\"\n\n[[provider_refresh]]\nprovider = \"openai\"\ncommand = [\"/bin/renew\"]\ntimeout = \"5s\"\n",
        )
        .unwrap();
        let cfg = GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(
            cfg.provider_refresh,
            vec![
                ProviderRefreshHook {
                    workspace: "team".into(),
                    provider: "github".into(),
                    command: vec!["/bin/renew".into(), "gh".into()],
                    timeout: DEFAULT_REFRESH_TIMEOUT,
                    lead: Duration::from_secs(600),
                    max_backoff: DEFAULT_REFRESH_MAX_BACKOFF,
                },
                ProviderRefreshHook {
                    workspace: "default".into(),
                    provider: "openai".into(),
                    command: vec!["/bin/renew".into()],
                    timeout: Duration::from_secs(5),
                    lead: DEFAULT_REFRESH_LEAD,
                    max_backoff: DEFAULT_REFRESH_MAX_BACKOFF,
                },
            ]
        );
        for (bad, named) in [
            (
                "provider = \"gh\"\ncommand = []\n",
                "provider_refresh[0]: command",
            ),
            (
                "provider = \"/gh\"\ncommand = [\"x\"]\n",
                "provider_refresh[0]: provider",
            ),
            (
                "provider = \"gh\"\ncommand = [\"x\"]\ntimeout = \"0s\"\n",
                "timeout and max_backoff",
            ),
            ("provider = \"gh\"\ncommand = [\"x\"]\nurl = \"y\"\n", "url"),
        ] {
            std::fs::write(&path, format!("[[provider_refresh]]\n{bad}")).unwrap();
            let err =
                GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()])).unwrap_err();
            assert!(err.to_string().contains(named), "{bad}: {err}");
        }
    }

    /// Probe: duplicate names, one secret under two names (the caller recorded as the last),
    /// a name with a space and a 1-character secret were all accepted.
    #[test]
    fn configured_tokens_are_checked_naming_the_entry_never_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        let file = |tokens: &[(&str, &str)]| {
            let text: String = tokens
                .iter()
                .map(|(name, token)| {
                    format!("[[operator_tokens]]\nname = {name:?}\ntoken = {token:?}\n\n")
                })
                .collect();
            std::fs::write(&path, text).unwrap();
            GatewayConfig::resolve(flags(&["--config", path.to_str().unwrap()]))
        };
        let (a, b) = ("first-secret-0123456789", "second-secret-0123456789");
        assert!(file(&[("ci", a), ("dashboard", b)]).is_ok());
        for (tokens, expected) in [
            (
                vec![("ci", a), ("ci", b)],
                "operator_tokens[1] (\"ci\"): the name is already taken by operator_tokens[0] \
                 (\"ci\"): give each token a name of its own",
            ),
            (
                vec![("ci", a), ("dashboard", a)],
                "operator_tokens[1] (\"dashboard\"): the same token as operator_tokens[0] \
                 (\"ci\"): each name needs a token of its own, or calls with it are recorded \
                 under only one of the names",
            ),
            (
                vec![("ci bot", a)],
                "operator_tokens[0] (\"ci bot\"): name may contain only lowercase letters, \
                 digits and '-', found ' '",
            ),
            (
                vec![("", a)],
                "operator_tokens[0] (\"\"): name is required (1-63 characters)",
            ),
            (
                vec![("ci", "x")],
                "operator_tokens[0] (\"ci\"): the token is shorter than 16 characters",
            ),
            (
                vec![("ci", "fifteen-chars-x")],
                "operator_tokens[0] (\"ci\"): the token is shorter than 16 characters",
            ),
            (
                vec![("ci", "a secret with spaces")],
                "operator_tokens[0] (\"ci\"): the token must be printable ASCII without spaces \
                 (it is sent in an HTTP header)",
            ),
        ] {
            let err = file(&tokens).unwrap_err().to_string();
            assert_eq!(err, expected, "{tokens:?}");
            for (_, secret) in &tokens {
                assert!(secret.len() < 2 || !err.contains(secret), "{err}");
            }
        }
        assert!(file(&[("ci", "sixteen-chars-xx")]).is_ok());
    }

    /// A flag token is named by its place, never by its name: a bare secret holding `=` is
    /// read as NAME=TOKEN, its name then part of the secret.
    #[test]
    fn flag_tokens_are_named_by_their_place() {
        let resolve = |args: &[&str]| GatewayConfig::resolve(flags(args));
        let secret = "flag-secret-0123456789";
        assert!(resolve(&["--operator-token", secret]).is_ok());
        // Two bare tokens are both named "operator".
        let err = resolve(&[
            "--operator-token",
            secret,
            "--operator-token",
            "other-secret-0123456789",
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "operator token 2 of --operator-token/OPENSHELL_OPERATOR_TOKENS: the name is \
             already taken by operator token 1 of --operator-token/OPENSHELL_OPERATOR_TOKENS: \
             give each token a name of its own"
        );
        let err = resolve(&[
            "--operator-token",
            &format!("ci={secret}"),
            "--operator-token",
            &format!("ops={secret}"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("operator token 2 of"), "{err}");
        assert!(err.contains("the same token as operator token 1"), "{err}");
        assert!(!err.contains(secret), "{err}");
        // A base64 secret with padding, given without a name: its "name" is the secret.
        let err = resolve(&["--operator-token", "QUJDREVGR0hJSktM=="])
            .unwrap_err()
            .to_string();
        assert!(err.contains("give the token as NAME=TOKEN"), "{err}");
        assert!(!err.contains("QUJD"), "{err}");
    }

    #[test]
    fn tokens_never_show_in_debug() {
        let cfg = GatewayConfig::resolve(flags(&[
            "--operator-token",
            "ci=supersecret-0123456789",
            "--peer-secret",
            "peersecret",
        ]))
        .unwrap();
        assert!(cfg.peer_secret.is_some());
        let debug = format!("{cfg:?}");
        assert!(
            !debug.contains("supersecret") && !debug.contains("peersecret"),
            "{debug}"
        );
    }

    #[test]
    fn secrets_may_start_with_a_hyphen() {
        let cfg = GatewayConfig::resolve(flags(&[
            "--peer-secret",
            "-cXg_peer",
            "--credential-key",
            "-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ]))
        .unwrap();
        assert_eq!(
            cfg.peer_secret.map(|s| s.expose().to_owned()).as_deref(),
            Some("-cXg_peer")
        );
    }

    #[test]
    fn a_peer_address_is_a_url() {
        let err = GatewayConfig::resolve(flags(&[
            "--operator-token",
            "operator-secret-0123456789",
            "--peer-address",
            "10.0.0.5:7070",
        ]))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "peer_address \"10.0.0.5:7070\" must be a URL such as http://10.0.0.5:7070"
        );
        let cfg = GatewayConfig::resolve(flags(&[
            "--operator-token",
            "operator-secret-0123456789",
            "--peer-address",
            "https://gw-2.internal:7070",
        ]))
        .unwrap();
        assert_eq!(
            cfg.peer_address.as_deref(),
            Some("https://gw-2.internal:7070")
        );
        assert!(cfg.peer_secret.is_none());
    }
}
