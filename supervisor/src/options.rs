//! What a gateway-backed supervisor is configured with, and what it says of itself to the
//! gateway: the hello of every session and the client its calls go through.

use std::sync::LazyLock;
use std::time::Duration;

use openshell_proto::v1::SupervisorHello;
use tonic::transport::Channel;

use crate::backoff::BackoffConfig;
use crate::client::{GatewayClient, client, lazy_channel};
use crate::error::SupervisorError;
use crate::identity::Identity;
use crate::local_policy::LocalPolicy;
use crate::logs::LogBuffer;

/// Protocol revision this supervisor speaks by default.
pub const PROTOCOL_REVISION: u32 = 1;

/// This process among the supervisors of a sandbox (`SupervisorHello.instance_id`): random,
/// drawn once per process start, so a restarted supervisor is told apart from the one before
/// it. Supervisors sharing a process (the fleet benchmark) share it; their sandbox ids differ.
pub fn instance_id() -> &'static str {
    static INSTANCE_ID: LazyLock<String> =
        LazyLock::new(|| format!("{:032x}", rand::random::<u128>()));
    &INSTANCE_ID
}

/// Everything a gateway-backed supervisor needs. [`SupervisorOptions::new`] fills in the
/// production defaults; tests shorten the intervals.
#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    /// Gateway URL, e.g. `http://127.0.0.1:7070`.
    pub gateway: String,
    /// A ready channel to use instead of connecting to `gateway` (lets many simulated
    /// supervisors share connections).
    pub channel: Option<Channel>,
    /// PEM CA certificate for an `https` gateway.
    pub ca_pem: Option<Vec<u8>>,
    pub identity: Identity,
    /// 0 emulates a legacy supervisor: it advertises no capability at all.
    pub protocol_revision: u32,
    /// Advertise `supports_config_apply` (false: `--no-config-apply`, snapshots only).
    pub config_apply: bool,
    /// A local policy file that keeps precedence over the gateway's policy.
    pub local_policy: Option<LocalPolicy>,
    /// Image policy text offered in the hello for the startup exchange.
    pub image_policy: Option<String>,
    pub poll_interval: Duration,
    /// Used unless the gateway's `SessionAccepted` names one.
    pub heartbeat_interval: Duration,
    /// Silence after which a session that has seen gateway heartbeats counts as lost;
    /// `None`: four heartbeat intervals, at least 20 s.
    pub idle_timeout: Option<Duration>,
    /// Bound on waiting for `SessionAccepted` (the gateway may take 45 s to build a bootstrap).
    pub accept_timeout: Duration,
    pub connect_timeout: Duration,
    /// Bound on each unary call (polls and reports).
    pub rpc_timeout: Duration,
    pub reconnect_backoff: BackoffConfig,
    /// A session accepted for longer than this resets the reconnect backoff.
    pub backoff_reset_after: Duration,
    pub report_backoff: BackoffConfig,
    /// Delays between attempts to apply a configuration that failed for a reason that can pass
    /// (a full disk, say); see [`BackoffConfig::apply_retry`].
    pub apply_retry_backoff: BackoffConfig,
    /// Log lines to push to the gateway (`PushSandboxLogs`); `None` pushes none.
    pub logs: Option<LogBuffer>,
    /// How long log lines gather before a push.
    pub log_flush_interval: Duration,
}

/// A client of the gateway on the options' channel, or else on a new lazily connecting one:
/// each call makes a connection of its own, which is how a session that went silent gets away
/// from a connection that may be dead.
pub(crate) fn gateway_client(
    options: &SupervisorOptions,
) -> Result<GatewayClient, SupervisorError> {
    let channel = match &options.channel {
        Some(channel) => channel.clone(),
        None => lazy_channel(
            &options.gateway,
            options.ca_pem.as_deref(),
            options.connect_timeout,
        )?,
    };
    client(channel, &options.identity)
}

impl SupervisorOptions {
    pub fn new(gateway: impl Into<String>, identity: Identity) -> Self {
        Self {
            gateway: gateway.into(),
            channel: None,
            ca_pem: None,
            identity,
            protocol_revision: PROTOCOL_REVISION,
            config_apply: true,
            local_policy: None,
            image_policy: None,
            poll_interval: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(5),
            idle_timeout: None,
            accept_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            rpc_timeout: Duration::from_secs(30),
            reconnect_backoff: BackoffConfig::default(),
            backoff_reset_after: Duration::from_secs(30),
            report_backoff: BackoffConfig::default(),
            apply_retry_backoff: BackoffConfig::apply_retry(),
            logs: None,
            log_flush_interval: Duration::from_millis(500),
        }
    }

    /// Advertises receiving snapshots.
    pub fn supports_config_snapshots(&self) -> bool {
        self.protocol_revision > 0
    }

    /// Advertises applying and acknowledging snapshots.
    pub fn supports_config_apply(&self) -> bool {
        self.protocol_revision > 0 && self.config_apply
    }

    /// The first frame of every session. The credential is not in it: it travels as metadata
    /// of the call (see [`crate::client`]).
    pub fn hello(&self) -> SupervisorHello {
        SupervisorHello {
            sandbox_id: self.identity.sandbox_id.clone(),
            instance_id: instance_id().to_string(),
            protocol_revision: self.protocol_revision,
            supervisor_version: env!("CARGO_PKG_VERSION").to_string(),
            supports_config_snapshots: self.supports_config_snapshots(),
            supports_config_apply: self.supports_config_apply(),
            image_policy: self.image_policy.clone().unwrap_or_default(),
            local_policy_override: self.local_policy.is_some(),
        }
    }
}
