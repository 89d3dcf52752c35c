//! The gateway under test runs in its own child process (`openshell-bench gateway`, hidden),
//! started in-process there with `openshell_gateway::start`. Its memory and CPU figures are
//! therefore the gateway's alone: no simulated supervisor, SDK client or harness bookkeeping
//! shares the process. A restart is a real process restart on the same address and store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use openshell_core::Secret;
use openshell_gateway::DeliveryMode;
use openshell_gateway::config::GatewayConfig;
use serde::{Deserialize, Serialize};

use crate::ctl::{ChildIo, ChildProc, init_child_logging};
use crate::sys::{Usage, raise_fd_limit};

/// Arguments of the hidden `gateway` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// `sqlite://…` or `postgres://…`.
    #[arg(long)]
    pub database_url: String,
    /// Directory of the credential key file (and the SQLite file).
    #[arg(long)]
    pub data_dir: PathBuf,
    #[arg(long, value_enum)]
    pub mode: DeliveryMode,
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    // Generated secrets (URL-safe base64) may start with `-`: they are still values.
    #[arg(long, allow_hyphen_values = true)]
    pub token: String,
    /// Store connection pool size; the gateway default when absent.
    #[arg(long)]
    pub db_pool: Option<u32>,
    #[arg(long, default_value = "warn")]
    pub log: String,
    /// This replica's id among gateways sharing one PostgreSQL database.
    #[arg(long, default_value = "gw-bench")]
    pub replica_id: String,
    /// Secret replicas sign their hints to each other with; none for a lone gateway.
    #[arg(long, value_parser = parse_secret, allow_hyphen_values = true)]
    pub peer_secret: Option<Secret>,
    /// Base64 of the 32-byte key sealing provider credentials, shared by replicas of one
    /// store; absent: a key file in --data-dir.
    #[arg(long, value_parser = parse_secret, allow_hyphen_values = true)]
    pub credential_key: Option<Secret>,
    /// Serve TLS with this PEM certificate (and --tls-key).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

fn parse_secret(value: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret::new(value))
}

/// What makes a gateway one of several replicas on one PostgreSQL database. Each registers
/// its listen address for peer hints (the gateway's default when no peer address is set), so
/// no port needs to be chosen ahead.
#[derive(Debug, Clone)]
pub struct ReplicaSpec {
    pub id: String,
    pub peer_secret: Secret,
    pub credential_key: Secret,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum GatewayCommand {
    Usage,
    Metrics,
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum GatewayReply {
    Listening {
        addr: String,
        db_pool: u32,
        usage: Usage,
    },
    Usage {
        usage: Usage,
        sessions: usize,
    },
    Metrics {
        text: String,
    },
    Stopped {
        usage: Usage,
    },
    Error {
        message: String,
    },
}

/// Body of the hidden `gateway` subcommand.
pub async fn child_main(args: GatewayArgs) -> Result<()> {
    init_child_logging(&args.log);
    raise_fd_limit();
    let mut io = ChildIo::new();
    let mut config = GatewayConfig::for_data_dir(&args.data_dir, &args.token);
    config.database_url = args.database_url.clone();
    config.config_delivery_mode = args.mode;
    config.listen = args.listen;
    config.metrics_listen = None;
    config.replica_id = args.replica_id.clone();
    config.peer_secret = args.peer_secret.clone();
    config.credential_key = args.credential_key.clone();
    if let (Some(cert), Some(key)) = (args.tls_cert.clone(), args.tls_key.clone()) {
        config.tls = Some(openshell_gateway::config::TlsFiles { cert, key });
    }
    if let Some(pool) = args.db_pool {
        config.db_pool_size = pool;
    }
    let db_pool = config.db_pool_size;
    let handle = match openshell_gateway::start(config).await {
        Ok(handle) => handle,
        Err(e) => {
            io.reply(&GatewayReply::Error {
                message: format!("gateway did not start: {e}"),
            })
            .await?;
            bail!("gateway did not start: {e}");
        }
    };
    io.reply(&GatewayReply::Listening {
        addr: handle.addr.to_string(),
        db_pool,
        usage: Usage::read_self()?,
    })
    .await?;
    loop {
        let command = match io.next::<GatewayCommand>().await {
            Ok(Some(command)) => command,
            // The coordinator went away: stop cleanly.
            Ok(None) | Err(_) => {
                handle.shutdown().await;
                return Ok(());
            }
        };
        match command {
            GatewayCommand::Usage => {
                let sessions = handle.state.sessions.count();
                io.reply(&GatewayReply::Usage {
                    usage: Usage::read_self()?,
                    sessions,
                })
                .await?;
            }
            GatewayCommand::Metrics => {
                io.reply(&GatewayReply::Metrics {
                    text: handle.state.metrics.render(),
                })
                .await?;
            }
            GatewayCommand::Stop => {
                handle.shutdown().await;
                io.reply(&GatewayReply::Stopped {
                    usage: Usage::read_self()?,
                })
                .await?;
                return Ok(());
            }
        }
    }
}

/// Where a gateway keeps its state; outlives gateway restarts.
#[derive(Debug, Clone)]
pub struct StoreSpec {
    pub backend: &'static str,
    pub url: String,
    pub data_dir: PathBuf,
    /// PostgreSQL database name (to clone or drop it).
    pub pg_database: Option<String>,
}

/// A self-signed certificate for 127.0.0.1 the gateways serve with `--tls`; it is its
/// own CA, which the clients and the swarm's supervisors are given.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca_pem: Vec<u8>,
}

impl TlsMaterial {
    pub fn create(dir: &std::path::Path) -> Result<Self> {
        let generated = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .context("cannot generate the benchmark's TLS certificate")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        let ca_pem = generated.cert.pem().into_bytes();
        std::fs::write(&cert, &ca_pem)
            .with_context(|| format!("cannot write {}", cert.display()))?;
        std::fs::write(&key, generated.signing_key.serialize_pem())
            .with_context(|| format!("cannot write {}", key.display()))?;
        Ok(Self { cert, key, ca_pem })
    }
}

/// The coordinator's handle on a running gateway process.
pub struct GatewayProc {
    proc: ChildProc,
    /// Serves TLS (`https://`).
    tls: bool,
    pub addr: SocketAddr,
    pub db_pool: u32,
    /// The store it runs on.
    pub store: StoreSpec,
}

/// How the coordinator starts gateways.
#[derive(Debug, Clone)]
pub struct GatewayLauncher {
    pub exe: PathBuf,
    pub token: String,
    pub log: String,
    pub log_path: PathBuf,
    pub db_pool: Option<u32>,
    /// A profiler command the gateway runs under (e.g. `heaptrack` or
    /// `valgrind --tool=callgrind`), split on whitespace; empty for none.
    pub wrapper: Vec<String>,
    /// `--tls`: every gateway serves TLS with it.
    pub tls: Option<TlsMaterial>,
}

impl GatewayLauncher {
    /// An operator client of a gateway this launcher started: its token, and its CA when
    /// the gateways serve TLS.
    pub async fn client(&self, endpoint: &str) -> Result<openshell_sdk::Client> {
        let mut options =
            openshell_sdk::ClientOptions::new(endpoint).with_token(self.token.as_str());
        if let Some(tls) = &self.tls {
            options = options.with_ca_cert_pem(tls.ca_pem.clone());
        }
        openshell_sdk::Client::connect(options)
            .await
            .map_err(|e| anyhow!("cannot connect to the gateway at {endpoint}: {e}"))
    }

    /// The CA file the swarm's supervisors trust, when the gateways serve TLS.
    pub fn ca_file(&self) -> Option<&std::path::Path> {
        self.tls.as_ref().map(|tls| tls.cert.as_path())
    }

    pub async fn start(
        &self,
        store: &StoreSpec,
        mode: DeliveryMode,
        listen: Option<SocketAddr>,
    ) -> Result<GatewayProc> {
        self.start_as(store, mode, listen, None).await
    }

    /// Starts a gateway as one replica of several sharing `store` (PostgreSQL).
    pub async fn start_replica(
        &self,
        store: &StoreSpec,
        mode: DeliveryMode,
        replica: &ReplicaSpec,
    ) -> Result<GatewayProc> {
        self.start_as(store, mode, None, Some(replica)).await
    }

    async fn start_as(
        &self,
        store: &StoreSpec,
        mode: DeliveryMode,
        listen: Option<SocketAddr>,
        replica: Option<&ReplicaSpec>,
    ) -> Result<GatewayProc> {
        let (program, mut args) = match self.wrapper.split_first() {
            Some((program, rest)) => {
                let mut args = rest.to_vec();
                args.push(self.exe.display().to_string());
                (PathBuf::from(program), args)
            }
            None => (self.exe.clone(), Vec::new()),
        };
        args.extend([
            "gateway".to_string(),
            "--database-url".into(),
            store.url.clone(),
            "--data-dir".into(),
            store.data_dir.display().to_string(),
            "--mode".into(),
            mode.as_str().into(),
            "--token".into(),
            self.token.clone(),
            "--log".into(),
            self.log.clone(),
        ]);
        if let Some(addr) = listen {
            args.push("--listen".into());
            args.push(addr.to_string());
        }
        if let Some(pool) = self.db_pool {
            args.push("--db-pool".into());
            args.push(pool.to_string());
        }
        if let Some(tls) = &self.tls {
            args.extend([
                "--tls-cert".to_string(),
                tls.cert.display().to_string(),
                "--tls-key".into(),
                tls.key.display().to_string(),
            ]);
        }
        if let Some(replica) = replica {
            args.extend([
                "--replica-id".to_string(),
                replica.id.clone(),
                "--peer-secret".into(),
                replica.peer_secret.expose().to_string(),
                "--credential-key".into(),
                replica.credential_key.expose().to_string(),
            ]);
        }
        // A restarted gateway binds the port its predecessor just released; retry briefly.
        let mut last_err = None;
        for _ in 0..20 {
            let mut proc = ChildProc::spawn("gateway", &program, &args, &self.log_path)?;
            match proc.recv::<GatewayReply>(Duration::from_secs(60)).await {
                Ok(GatewayReply::Listening { addr, db_pool, .. }) => {
                    let addr = addr
                        .parse()
                        .with_context(|| format!("gateway reported a bad address {addr}"))?;
                    return Ok(GatewayProc {
                        proc,
                        tls: self.tls.is_some(),
                        addr,
                        db_pool,
                        store: store.clone(),
                    });
                }
                Ok(GatewayReply::Error { message }) => {
                    last_err = Some(anyhow!(message));
                    proc.finish(Duration::from_secs(5)).await.ok();
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Ok(other) => bail!("unexpected reply from the gateway: {other:?}"),
                Err(e) => {
                    last_err = Some(e);
                    proc.finish(Duration::from_secs(5)).await.ok();
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow!("gateway did not start")))
    }
}

impl GatewayProc {
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// The gateway process's memory and CPU now, and its live session count.
    pub async fn usage(&mut self) -> Result<(Usage, usize)> {
        match self
            .proc
            .call(&GatewayCommand::Usage, Duration::from_secs(30))
            .await?
        {
            GatewayReply::Usage { usage, sessions } => Ok((usage, sessions)),
            other => bail!("unexpected reply from the gateway: {other:?}"),
        }
    }

    pub async fn metrics(&mut self) -> Result<String> {
        match self
            .proc
            .call(&GatewayCommand::Metrics, Duration::from_secs(30))
            .await?
        {
            GatewayReply::Metrics { text } => Ok(text),
            other => bail!("unexpected reply from the gateway: {other:?}"),
        }
    }

    /// Keeps a scrape of the gateway's metrics in `path`, for whoever reads the run's
    /// output; best effort, as nothing in the report depends on it.
    pub async fn save_metrics(&mut self, path: &std::path::Path) {
        if let Ok(text) = self.metrics().await {
            std::fs::write(path, text).ok();
        }
    }

    /// Graceful shutdown (sessions end, in-flight calls drain), then the process exits.
    pub async fn stop(mut self) -> Result<Usage> {
        let reply = self
            .proc
            .call(&GatewayCommand::Stop, Duration::from_secs(60))
            .await;
        // Generous: a profiler wrapper writes its data after the gateway exits.
        self.proc.finish(Duration::from_secs(120)).await?;
        match reply? {
            GatewayReply::Stopped { usage } => Ok(usage),
            other => bail!("unexpected reply from the gateway: {other:?}"),
        }
    }
}
