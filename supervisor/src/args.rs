//! Command line of `openshell-supervisor`. Every flag can also come from the environment
//! (`OPENSHELL_SUPERVISOR_<FLAG>`, `OPENSHELL_GATEWAY` for the gateway address and
//! `OPENSHELL_MIDDLEWARES` for the remote middleware).

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{Parser, ValueEnum};

use crate::middleware::{RegisteredMiddleware, parse_entry};
use crate::reload::ReloadSignal;
use crate::workload::Launch;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Receives sandbox configuration from an OpenShell gateway (or a local policy file), applies
/// it under the state directory and supervises the workload `CMD ARGS`.
#[derive(Debug, Clone, Parser)]
#[command(name = "openshell-supervisor", version, about)]
#[command(after_help = "Examples:\n  \
    openshell-supervisor --gateway http://gw:7070 --sandbox team/web --credential-file /run/cred -- my-app\n  \
    openshell-supervisor --standalone --policy-file policy.yaml -- my-app")]
pub struct Args {
    /// Gateway URL (http:// or https://), or the URLs of several replicas separated by
    /// commas: calls go to one that is up, and a lost session reconnects to another.
    #[arg(
        long,
        env = "OPENSHELL_GATEWAY",
        required_unless_present = "standalone"
    )]
    pub gateway: Option<String>,

    /// Sandbox this supervisor runs: its id, name, or WORKSPACE/NAME. A name must be the
    /// sandbox the credential was issued for; the gateway resolves it to the id at start.
    #[arg(
        long,
        env = "OPENSHELL_SUPERVISOR_SANDBOX",
        required_unless_present = "standalone"
    )]
    pub sandbox: Option<String>,

    /// File holding the sandbox's supervisor credential.
    #[arg(
        long,
        env = "OPENSHELL_SUPERVISOR_CREDENTIAL_FILE",
        required_unless_present = "standalone"
    )]
    pub credential_file: Option<PathBuf>,

    /// CA certificate (PEM) for an https gateway.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_CA_FILE")]
    pub ca_file: Option<PathBuf>,

    /// Where the active configuration is written.
    #[arg(
        long,
        env = "OPENSHELL_SUPERVISOR_STATE_DIR",
        default_value = "./openshell-state"
    )]
    pub state_dir: PathBuf,

    /// Local policy file. With --gateway it keeps precedence over the gateway's policy;
    /// with --standalone it is the whole configuration.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,

    /// Policy baked into the image, offered to the gateway on the sandbox's first start;
    /// the gateway keeps a stored policy if it has one, else validates and stores this one.
    #[arg(
        long,
        env = "OPENSHELL_SUPERVISOR_IMAGE_POLICY",
        conflicts_with = "standalone"
    )]
    pub image_policy: Option<PathBuf>,

    /// Shell command run after each activation; a failure rolls the activation back.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_ON_APPLY")]
    pub on_apply: Option<String>,

    /// Bound on one --on-apply run.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_ON_APPLY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub on_apply_timeout: Duration,

    /// Signal sent to the workload after a live change: SIGHUP, SIGUSR1, SIGUSR2 or none.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_RELOAD_SIGNAL", default_value = "SIGHUP", value_parser = parse_signal)]
    pub reload_signal: ReloadSignal,

    /// Poll interval while polling (the gateway may name another).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_POLL_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,

    /// Heartbeat interval on the session (the gateway may name another).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_HEARTBEAT_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub heartbeat_interval: Duration,

    /// Protocol revision to advertise; 0 behaves like a legacy supervisor (polls only).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_PROTOCOL_REVISION", default_value_t = crate::options::PROTOCOL_REVISION)]
    pub protocol_revision: u32,

    /// Receive pushed snapshots but do not apply them: keep polling (shadow push).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_NO_CONFIG_APPLY", value_parser = FalseyValueParser::new())]
    pub no_config_apply: bool,

    /// A remote middleware implementation and where it listens: NAME=HOST:PORT (repeatable;
    /// the environment variable takes a comma-separated list). Policy entries naming it are
    /// connected to before the workload starts; names under `openshell/` are built in.
    #[arg(
        long = "middleware",
        env = "OPENSHELL_MIDDLEWARES",
        value_name = "NAME=HOST:PORT",
        value_delimiter = ',',
        value_parser = parse_entry
    )]
    pub middlewares: Vec<RegisteredMiddleware>,

    /// How long the remote middleware may take to answer before the workload starts degraded
    /// (fail_open) or is held back until it answers (fail_closed).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_MIDDLEWARE_READY_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub middleware_ready_timeout: Duration,

    /// Run without a gateway from --policy-file, reloading it when it changes.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_STANDALONE", value_parser = FalseyValueParser::new(), requires = "policy_file", conflicts_with_all = ["gateway", "credential_file"])]
    pub standalone: bool,

    /// How often --policy-file is checked for edits (standalone and with a gateway).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_WATCH_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub watch_interval: Duration,

    /// Log format on stderr.
    #[arg(
        long,
        env = "OPENSHELL_SUPERVISOR_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,

    /// Log filter, e.g. `info` or `openshell_supervisor=debug`.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_LOG", default_value = "info")]
    pub log: String,

    /// The workload command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD ARGS")]
    pub command: Vec<String>,

    /// How the workload is started; the binary sets it, not the command line.
    #[arg(skip)]
    pub launch: Launch,
}

fn parse_signal(text: &str) -> Result<ReloadSignal, String> {
    text.parse()
        .map_err(|err: crate::reload::UnknownSignal| err.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn gateway_mode_with_defaults() {
        let a = Args::try_parse_from([
            "openshell-supervisor",
            "--gateway",
            "http://127.0.0.1:1",
            "--sandbox",
            "sb-1",
            "--credential-file",
            "/c",
            "--",
            "app",
            "--flag",
        ])
        .unwrap();
        assert_eq!(a.command, ["app", "--flag"]);
        assert_eq!(a.poll_interval, Duration::from_secs(10));
        assert_eq!(a.heartbeat_interval, Duration::from_secs(5));
        assert_eq!(a.protocol_revision, 1);
        assert_eq!(a.reload_signal, ReloadSignal::Hup);
        assert_eq!(a.state_dir, PathBuf::from("./openshell-state"));
        assert!(!a.no_config_apply);
        assert!(a.middlewares.is_empty());
        assert_eq!(a.middleware_ready_timeout, Duration::from_secs(10));
    }

    #[test]
    fn middleware_entries_repeat_and_bad_ones_name_the_flag() {
        let a = Args::try_parse_from([
            "s",
            "--standalone",
            "--policy-file",
            "p",
            "--middleware",
            "audit=127.0.0.1:9000",
            "--middleware",
            "trace=mw.local:80,dlp=[::1]:81",
            "--middleware-ready-timeout",
            "3s",
            "--",
            "app",
        ])
        .unwrap();
        let names: Vec<&str> = a.middlewares.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["audit", "trace", "dlp"]);
        assert_eq!(a.middleware_ready_timeout, Duration::from_secs(3));
        let err = Args::try_parse_from([
            "s",
            "--standalone",
            "--policy-file",
            "p",
            "--middleware",
            "audit=127.0.0.1",
            "--",
            "app",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--middleware"), "{err}");
        assert!(err.contains("audit=127.0.0.1"), "{err}");
        assert!(err.contains("NAME=HOST:PORT"), "{err}");
    }

    #[test]
    fn standalone_needs_policy_file_and_excludes_gateway() {
        assert!(
            Args::try_parse_from(["s", "--standalone", "--", "app"]).is_err(),
            "policy file required"
        );
        assert!(
            Args::try_parse_from([
                "s",
                "--standalone",
                "--policy-file",
                "p",
                "--gateway",
                "http://x",
                "--",
                "app"
            ])
            .is_err()
        );
        let a = Args::try_parse_from([
            "s",
            "--standalone",
            "--policy-file",
            "p.yaml",
            "--reload-signal",
            "none",
            "--",
            "app",
        ])
        .unwrap();
        assert!(a.standalone);
        assert_eq!(a.reload_signal, ReloadSignal::None);
    }

    #[test]
    fn command_is_required() {
        assert!(Args::try_parse_from(["s", "--standalone", "--policy-file", "p"]).is_err());
    }
}
