//! What every command needs: the global flags, how to print, and a way to
//! reach the gateway. Connecting is deferred so commands that never talk to
//! the gateway (completions, usage errors) work without one.

use std::fmt::Display;
use std::future::Future;
use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use openshell_sdk::{Client, ClientOptions};
use serde::Serialize;

use crate::confirm::{self, Answer, Decision};
use crate::exit::{self, UsageError};
use crate::gateways::{self, Store};
use crate::output::{Output, OutputFormat, no_color, sanitize};
use crate::progress::ProgressMode;

/// Default gateway address, the gateway's default listener.
pub const DEFAULT_GATEWAY: &str = "http://127.0.0.1:7070";

/// Flags accepted by every command.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Gateway address (http://HOST:PORT or https://HOST:PORT) or a saved
    /// gateway's name [default: the selected gateway, else http://127.0.0.1:7070].
    #[arg(
        long,
        global = true,
        env = "OPENSHELL_GATEWAY",
        value_name = "URL|NAME"
    )]
    pub gateway: Option<String>,
    /// Gateway address (http://HOST:PORT or https://HOST:PORT), as upstream's CLI takes it;
    /// with --gateway or OPENSHELL_GATEWAY too, both must name the same gateway.
    #[arg(
        long,
        global = true,
        env = "OPENSHELL_GATEWAY_ENDPOINT",
        value_name = "URL"
    )]
    pub gateway_endpoint: Option<String>,
    /// Operator token, sent as a bearer token (default: the saved gateway's
    /// token; prefer `openshell gateway login` to putting it on a command line).
    // A token may start with `-` (URL-safe base64): it is still the value.
    #[arg(
        long,
        global = true,
        env = "OPENSHELL_TOKEN",
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    pub token: Option<String>,
    /// PEM file of a CA to trust for an https gateway, beside the system's trusted roots.
    #[arg(long, global = true, env = "OPENSHELL_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Print list tables without their header line.
    #[arg(long, global = true)]
    pub no_headers: bool,
    /// Print no progress or notes on stderr (warnings and errors still print).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Answer yes to confirmation prompts; required for deletes, global writes and
    /// network-removing policies when not on a terminal.
    #[arg(short, long, global = true)]
    pub yes: bool,
}

/// Bound on reaching the gateway at all.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one ordinary call; the SDK adds any server-side wait on top.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Ctx {
    pub global: GlobalArgs,
    pub out: Output,
}

impl Ctx {
    pub fn new(global: GlobalArgs) -> Self {
        let out = Output::detect(global.output, global.no_headers);
        Self { global, out }
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        let target = self.target()?;
        target.connect(CONNECT_TIMEOUT, REQUEST_TIMEOUT).await
    }

    /// The gateway commands talk to and how to reach it: flags first, then
    /// the environment, then the selected saved gateway, then the default
    /// address. A saved gateway's token and CA go only to that gateway's
    /// address: `--gateway URL` never picks up a saved token.
    pub fn target(&self) -> anyhow::Result<Target> {
        let flag_token = self.global.token.clone().filter(|t| !t.is_empty());
        let has_flag_token = flag_token.is_some();
        let token_source = |from_saved: bool| -> Option<&'static str> {
            if has_flag_token {
                Some(
                    if env_holds("OPENSHELL_TOKEN", self.global.token.as_deref()) {
                        "OPENSHELL_TOKEN"
                    } else {
                        "--token"
                    },
                )
            } else if from_saved {
                Some("saved")
            } else {
                None
            }
        };
        let ca_source = || -> Option<&'static str> {
            let ca = self.global.ca_cert.as_ref()?;
            Some(if env_holds("OPENSHELL_CA_CERT", ca.to_str()) {
                "OPENSHELL_CA_CERT"
            } else {
                "--ca-cert"
            })
        };
        if let Some(endpoint) = self
            .global
            .gateway_endpoint
            .as_deref()
            .filter(|e| !e.is_empty())
        {
            let source = if env_holds("OPENSHELL_GATEWAY_ENDPOINT", Some(endpoint)) {
                "OPENSHELL_GATEWAY_ENDPOINT"
            } else {
                "--gateway-endpoint"
            };
            if !gateways::is_address(endpoint) {
                return Err(UsageError(format!(
                    "{source} takes an address like http://HOST:PORT, not {endpoint:?}; a saved \
                     gateway's name goes in OPENSHELL_GATEWAY or --gateway"
                ))
                .into());
            }
            gateways::check_url(endpoint)?;
            match self.global.gateway.as_deref().filter(|g| !g.is_empty()) {
                // Alone, it is the address, with no saved token or CA.
                None => {
                    return Ok(Target {
                        url: endpoint.to_owned(),
                        name: None,
                        url_source: source,
                        token_source: token_source(false),
                        token: flag_token.clone(),
                        ca_source: ca_source(),
                        ca_cert: self.global.ca_cert.clone(),
                    });
                }
                // Beside the other setting it is never silently ignored, nor does it win
                // silently: both must name one gateway (a saved name's token then applies).
                Some(other) => {
                    let other_url = if gateways::is_address(other) {
                        Some(other.to_owned())
                    } else {
                        Store::locate()
                            .ok()
                            .and_then(|store| store.load().ok())
                            .and_then(|file| file.gateways.get(other).map(|g| g.url.clone()))
                    };
                    let same = other_url.is_some_and(|url| {
                        url.trim_end_matches('/') == endpoint.trim_end_matches('/')
                    });
                    if !same {
                        let other_source = if env_holds("OPENSHELL_GATEWAY", Some(other)) {
                            "OPENSHELL_GATEWAY"
                        } else {
                            "--gateway"
                        };
                        return Err(UsageError(format!(
                            "{source} ({endpoint}) and {other_source} ({other}) name different \
                             gateways; set only one of them"
                        ))
                        .into());
                    }
                }
            }
        }
        let named = match self.global.gateway.as_deref() {
            Some(value) if gateways::is_address(value) => {
                return Ok(Target {
                    url: value.to_owned(),
                    name: None,
                    url_source: if env_holds("OPENSHELL_GATEWAY", Some(value)) {
                        "OPENSHELL_GATEWAY"
                    } else {
                        "--gateway"
                    },
                    token_source: token_source(false),
                    token: flag_token.clone(),
                    ca_source: ca_source(),
                    ca_cert: self.global.ca_cert.clone(),
                });
            }
            Some(name) => Some((
                name.to_owned(),
                if env_holds("OPENSHELL_GATEWAY", Some(name)) {
                    "OPENSHELL_GATEWAY"
                } else {
                    "--gateway"
                },
            )),
            None => None,
        };
        let store = match Store::locate() {
            Ok(store) => store,
            // Without a configuration directory nothing can be saved, so nothing is selected.
            Err(_) if named.is_none() => {
                return Ok(self.default_target(flag_token, token_source(false), ca_source()));
            }
            Err(err) => return Err(err.into()),
        };
        let file = store.load()?;
        let (name, url_source) = match named {
            Some(named) => named,
            None => match file.selected.clone() {
                Some(selected) => (selected, "selected"),
                None => {
                    return Ok(self.default_target(flag_token, token_source(false), ca_source()));
                }
            },
        };
        let Some(saved) = file.gateways.get(&name) else {
            return Err(UsageError(if url_source == "selected" {
                format!(
                    "the selected gateway {name:?} is not saved any more; \
                     choose one with `openshell gateway select NAME` (see `openshell gateway list`)"
                )
            } else {
                format!(
                    "no saved gateway is named {name:?} (see `openshell gateway list`); \
                     {url_source} takes an address like http://HOST:PORT or a saved gateway's name"
                )
            })
            .into());
        };
        let saved_token = match &flag_token {
            Some(_) => None,
            None => store.read_token(&name)?,
        };
        let from_saved = saved_token.is_some();
        let (ca_cert, ca_from) = match &self.global.ca_cert {
            Some(ca) => (Some(ca.clone()), ca_source()),
            None => (
                saved.ca_cert.clone(),
                saved.ca_cert.as_ref().map(|_| "saved"),
            ),
        };
        Ok(Target {
            url: saved.url.clone(),
            name: Some(name),
            url_source,
            token: flag_token.or(saved_token),
            token_source: token_source(from_saved),
            ca_cert,
            ca_source: ca_from,
        })
    }

    fn default_target(
        &self,
        token: Option<String>,
        token_source: Option<&'static str>,
        ca_source: Option<&'static str>,
    ) -> Target {
        Target {
            url: DEFAULT_GATEWAY.to_owned(),
            name: None,
            url_source: "default",
            token,
            token_source,
            ca_cert: self.global.ca_cert.clone(),
            ca_source,
        }
    }

    /// An informational line on stderr, suppressed by `--quiet`.
    pub fn note(&self, message: impl Display) {
        if !self.global.quiet {
            eprintln!("{}", sanitize(&message.to_string()));
        }
    }

    /// A warning on stderr; `--quiet` does not hide it.
    pub fn warn(&self, message: impl Display) {
        eprintln!("warning: {}", sanitize(&message.to_string()));
    }

    /// Prompts need a person on both ends: input to answer, stderr to show the question.
    pub fn can_prompt(&self) -> bool {
        io::stdin().is_terminal() && io::stderr().is_terminal()
    }

    /// Live progress is for people watching a terminal; logs get plain lines.
    pub fn progress_mode(&self) -> ProgressMode {
        ProgressMode::choose(self.global.quiet, io::stderr().is_terminal(), no_color())
    }

    /// Confirms a write before it is sent (see `confirm.rs`).
    ///
    /// `action` completes "refusing to …" and "did not …"; `details` says
    /// what changes and is only awaited when someone is asked, so its
    /// gateway reads cost nothing under `--yes` or in scripts. `details` is
    /// printed as it is, so it may carry color: build it with `sanitize`
    /// around anything from a user or the gateway.
    /// `Ok(None)` means go on; `Ok(Some(code))` means the person declined.
    pub async fn confirm(
        &self,
        risky: bool,
        action: &str,
        question: &str,
        details: impl Future<Output = anyhow::Result<String>>,
    ) -> anyhow::Result<Option<u8>> {
        match confirm::decide(risky, self.global.yes, self.can_prompt()) {
            Decision::Proceed => Ok(None),
            Decision::Refuse => Err(confirm::refusal(action)),
            Decision::Ask => match confirm::ask(&details.await?, question)? {
                Answer::Yes => Ok(None),
                Answer::No => {
                    eprintln!("aborted: did not {}; nothing was changed", sanitize(action));
                    Ok(Some(exit::FAILURE))
                }
                Answer::Interrupted => {
                    eprintln!(
                        "interrupted: did not {}; nothing was changed",
                        sanitize(action)
                    );
                    Ok(Some(exit::INTERRUPTED))
                }
            },
        }
    }
}

/// Whether environment variable `var` holds exactly `value`: then the value
/// came from it, not from the flag (as far as anyone needs to know).
fn env_holds(var: &str, value: Option<&str>) -> bool {
    value.is_some_and(|v| std::env::var(var).is_ok_and(|e| e == v))
}

/// The gateway a command reaches. `Debug` and `Serialize` never show the token.
#[derive(Clone, Serialize)]
pub struct Target {
    pub url: String,
    /// The saved gateway in use, if one is.
    pub name: Option<String>,
    /// Where the address came from: `--gateway`, `OPENSHELL_GATEWAY`,
    /// `selected` (the selected saved gateway) or `default`.
    pub url_source: &'static str,
    #[serde(skip)]
    pub token: Option<String>,
    /// Where the token came from: `--token`, `OPENSHELL_TOKEN` or `saved`; none without one.
    pub token_source: Option<&'static str>,
    pub ca_cert: Option<PathBuf>,
    /// Where the CA came from: `--ca-cert`, `OPENSHELL_CA_CERT` or `saved`.
    pub ca_source: Option<&'static str>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("name", &self.name)
            .field("url_source", &self.url_source)
            .field("token_source", &self.token_source)
            .field("ca_cert", &self.ca_cert)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// How messages name it: `NAME (URL)` for a saved gateway, else the URL.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{name} ({})", self.url),
            None => self.url.clone(),
        }
    }

    pub fn client_options(
        &self,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> anyhow::Result<ClientOptions> {
        let mut options = ClientOptions::new(self.url.clone())
            .with_connect_timeout(connect_timeout)
            .with_request_timeout(request_timeout);
        if let Some(token) = &self.token {
            options = options.with_token(token.as_str());
        }
        if let Some(path) = &self.ca_cert {
            options = options.with_ca_cert_pem(read_ca_pem(path)?);
        }
        Ok(options)
    }

    pub async fn connect(
        &self,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> anyhow::Result<Client> {
        let options = self.client_options(connect_timeout, request_timeout)?;
        Ok(Client::connect(options).await?)
    }
}

/// Reads a CA file and refuses one without a PEM certificate in it.
pub fn read_ca_pem(path: &Path) -> anyhow::Result<Vec<u8>> {
    let pem = std::fs::read(path)
        .with_context(|| format!("cannot read CA certificate {}", path.display()))?;
    check_ca_pem(path, &pem)?;
    Ok(pem)
}

/// Refuses a `--ca-cert` file without a PEM certificate in it. The SDK
/// ignores the bytes for an http gateway, and for https tonic keeps only the
/// certificates it finds, so a wrong file trusts nothing and fails later as
/// a TLS handshake error that does not name the file.
fn check_ca_pem(path: &Path, pem: &[u8]) -> Result<(), UsageError> {
    if has_pem_certificate(pem) {
        return Ok(());
    }
    Err(UsageError(format!(
        "CA certificate file {} (--ca-cert or OPENSHELL_CA_CERT) holds no PEM certificate: \
         expected a -----BEGIN CERTIFICATE----- block",
        path.display()
    )))
}

/// Whether `pem` holds at least one complete `CERTIFICATE` block with a
/// base64 body. The DER inside is left to TLS; this catches the wrong file
/// (a DER file, a key, a config), not a damaged certificate.
fn has_pem_certificate(pem: &[u8]) -> bool {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let Ok(text) = std::str::from_utf8(pem) else {
        return false;
    };
    let mut lines = text.lines().map(str::trim);
    while lines.any(|line| line == BEGIN) {
        let mut body = 0usize;
        let mut base64 = true;
        for line in lines.by_ref() {
            if line == END {
                if base64 && body > 0 && body.is_multiple_of(4) {
                    return true;
                }
                break;
            }
            base64 &= line
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
            body += line.len();
        }
    }
    false
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A syntactically complete PEM certificate block (the DER is not checked).
    const PEM: &str = "-----BEGIN CERTIFICATE-----\n\
        MIIBszCCAVmgAwIBAgIUJ0sk\n\
        bWFkZS11cA==\n\
        -----END CERTIFICATE-----\n";

    #[test]
    fn a_pem_certificate_block_is_accepted() {
        assert!(has_pem_certificate(PEM.as_bytes()));
        let bundle = format!("# a bundle\n{PEM}\n{PEM}");
        assert!(has_pem_certificate(bundle.as_bytes()));
        let crlf = PEM.replace('\n', "\r\n");
        assert!(has_pem_certificate(crlf.as_bytes()));
        // A key before the certificate does not hide it.
        let with_key =
            format!("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n{PEM}");
        assert!(has_pem_certificate(with_key.as_bytes()));
    }

    #[test]
    fn anything_without_a_certificate_block_is_refused() {
        let not_pem: [&[u8]; 8] = [
            b"",
            b"not a certificate\n",
            // DER starts like this; it is binary, not PEM.
            &[0x30, 0x82, 0x01, 0xb3, 0x30, 0x82, 0x01, 0x59, 0xff, 0x00],
            b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
            b"-----BEGIN CERTIFICATE-----\nMIIBszCC\n",
            b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
            b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
            b"-----BEGIN CERTIFICATE-----\nMIIBs\n-----END CERTIFICATE-----\n",
        ];
        for bytes in not_pem {
            assert!(!has_pem_certificate(bytes), "{bytes:?}");
        }
    }

    fn global(ca_cert: &Path) -> GlobalArgs {
        GlobalArgs {
            // Nothing listens here; a check that fails must fail before connecting.
            gateway: Some("http://127.0.0.1:9".into()),
            gateway_endpoint: None,
            token: None,
            ca_cert: Some(ca_cert.to_owned()),
            output: OutputFormat::Table,
            no_headers: false,
            quiet: true,
            yes: false,
        }
    }

    #[tokio::test]
    async fn a_non_pem_ca_cert_is_a_usage_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.der");
        std::fs::write(&path, [0x30, 0x82, 0x01, 0xb3, 0x30, 0x82]).unwrap();
        let err = Ctx::new(global(&path)).client().await.err().unwrap();
        let usage = err
            .downcast_ref::<UsageError>()
            .unwrap_or_else(|| panic!("not a usage error: {err:#}"));
        assert!(usage.0.contains(&path.display().to_string()), "{usage}");
        assert!(usage.0.contains("BEGIN CERTIFICATE"), "{usage}");
    }

    #[tokio::test]
    async fn a_pem_ca_cert_goes_on_to_connect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, PEM).unwrap();
        // Whether anything answers there does not matter, only that the file was not refused.
        if let Err(err) = Ctx::new(global(&path)).client().await {
            assert!(err.downcast_ref::<UsageError>().is_none(), "{err:#}");
        }
    }
}
