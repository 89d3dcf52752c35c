//! `openshell status` and `openshell doctor`: which gateway commands reach,
//! and what stands in the way when they cannot.

use std::time::{Duration, SystemTime};

use openshell_sdk::{GatewayInfo, SdkError};
use serde::Serialize;

use crate::context::{Ctx, Target};
use crate::exit;
use crate::gateways::{self, Store};
use crate::output::{Output, finish};
use crate::views;

/// Bound on each network check: a doctor answers quickly or says why not.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Clocks further apart than this fail the clock check. The `date` header
/// has whole seconds and the answer takes time, so a little skew is noise.
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);

/// What `openshell status` prints.
#[derive(Debug, Serialize)]
struct Status {
    #[serde(flatten)]
    target: Target,
    reachable: bool,
    gateway: Option<GatewayInfo>,
    error: Option<String>,
}

pub async fn status(ctx: &Ctx) -> anyhow::Result<u8> {
    let target = ctx.target()?;
    let answer = match target.connect(CHECK_TIMEOUT, CHECK_TIMEOUT).await {
        Ok(client) => client.gateway_info().await.map_err(anyhow::Error::from),
        Err(err) => Err(err),
    };
    let (gateway, error) = match answer {
        Ok(info) => (Some(info), None),
        Err(err) => (None, Some(format!("{err:#}"))),
    };
    let view = Status {
        target,
        reachable: gateway.is_some(),
        gateway,
        error,
    };
    ctx.out.print(&view, |o| status_table(o, &view))?;
    Ok(if view.reachable {
        exit::SUCCESS
    } else {
        exit::FAILURE
    })
}

fn status_table(out: &Output, s: &Status) -> String {
    let mut text = finish(out.kv(target_rows(&s.target)));
    text.push('\n');
    match (&s.gateway, &s.error) {
        (Some(info), _) => {
            text.push_str("connected\n");
            text.push_str(&views::gateway(out, info));
        }
        (None, error) => {
            text.push_str(&finish(
                out.kv([("error", error.clone().unwrap_or_default())]),
            ));
            text.push_str("run `openshell doctor` to find out why\n");
        }
    }
    text
}

fn target_rows(t: &Target) -> Vec<(&'static str, String)> {
    vec![
        ("gateway", t.name.clone().unwrap_or_else(|| "-".into())),
        ("address", t.url.clone()),
        ("address from", t.url_source.to_owned()),
        (
            "token",
            match t.token_source {
                Some(source) => format!("set (from {source})"),
                None => "none".to_owned(),
            },
        ),
        (
            "ca cert",
            match (&t.ca_cert, t.ca_source) {
                (Some(path), Some(source)) => format!("{} (from {source})", path.display()),
                (Some(path), None) => path.display().to_string(),
                (None, _) => "-".to_owned(),
            },
        ),
    ]
}

/// One check's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Ok,
    Fail,
    Skip,
}

#[derive(Debug, Serialize)]
struct Check {
    check: &'static str,
    status: Verdict,
    detail: String,
    /// What to do about a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

impl Check {
    fn ok(check: &'static str, detail: impl Into<String>) -> Self {
        Self {
            check,
            status: Verdict::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            check,
            status: Verdict::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn skip(check: &'static str, detail: impl Into<String>) -> Self {
        Self {
            check,
            status: Verdict::Skip,
            detail: detail.into(),
            fix: None,
        }
    }
}

pub async fn doctor(ctx: &Ctx) -> anyhow::Result<u8> {
    let checks = run_checks(ctx).await;
    ctx.out.print(&checks, |_| doctor_text(&checks))?;
    let failed = checks.iter().any(|c| c.status == Verdict::Fail);
    Ok(if failed { exit::FAILURE } else { exit::SUCCESS })
}

fn doctor_text(checks: &[Check]) -> String {
    let mut text = String::new();
    for c in checks {
        let mark = match c.status {
            Verdict::Ok => "ok  ",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
        };
        text.push_str(&format!("{mark}  {:<10} {}\n", c.check, c.detail));
        if let Some(fix) = &c.fix {
            text.push_str(&format!("      {:<10} fix: {fix}\n", ""));
        }
    }
    crate::output::sanitize(&text).into_owned()
}

/// The fix for a missing or refused token, by where the token came from.
fn token_fix(t: &Target) -> String {
    let login = match &t.name {
        Some(name) => format!("`openshell gateway login {name}`"),
        None => "`openshell gateway add NAME URL` then `openshell gateway login NAME`".into(),
    };
    match t.token_source {
        Some("--token") => format!("check --token, or save the token with {login}"),
        Some("OPENSHELL_TOKEN") => {
            format!("check OPENSHELL_TOKEN (or unset it to use a saved token), or use {login}")
        }
        _ => format!("save a valid operator token with {login}"),
    }
}

async fn run_checks(ctx: &Ctx) -> Vec<Check> {
    let mut checks = Vec::new();
    // Saved gateways: the file reads, and a saved token is private.
    if let Ok(store) = Store::locate() {
        match store.load() {
            Ok(file) if file.gateways.is_empty() => checks.push(Check::ok(
                "config",
                format!("no saved gateways ({})", store.config_path().display()),
            )),
            Ok(file) => checks.push(Check::ok(
                "config",
                format!(
                    "{} saved gateway(s) in {}",
                    file.gateways.len(),
                    store.config_path().display()
                ),
            )),
            Err(err) => checks.push(Check::fail(
                "config",
                format!("{err:#}"),
                format!("fix or remove {}", store.config_path().display()),
            )),
        }
    }
    let target = match ctx.target() {
        Ok(target) => target,
        Err(err) => {
            checks.push(Check::fail(
                "gateway",
                format!("{err:#}"),
                "pass --gateway URL, or select a saved gateway (`openshell gateway list`)",
            ));
            return checks;
        }
    };
    #[cfg(unix)]
    if let (Some(name), Some("saved")) = (&target.name, target.token_source)
        && let Ok(store) = Store::locate()
    {
        use std::os::unix::fs::PermissionsExt;
        let path = store.token_path(name);
        if let Ok(meta) = std::fs::metadata(&path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                checks.push(Check::fail(
                    "config",
                    format!(
                        "token file {} is readable by others (mode {mode:o})",
                        path.display()
                    ),
                    format!("chmod 600 {}", path.display()),
                ));
            }
        }
    }
    if let Err(err) = gateways::check_url(&target.url) {
        checks.push(Check::fail(
            "gateway",
            err.0,
            "give an address like http://HOST:PORT or https://HOST:PORT",
        ));
        return checks;
    }
    checks.push(Check::ok(
        "gateway",
        format!("{} (from {})", target.label(), target.url_source),
    ));

    // Reachable: a TCP connection to the address.
    let Some(host_port) = host_port(&target.url) else {
        checks.push(Check::fail(
            "reachable",
            format!("cannot read a host and port from {}", target.url),
            "give an address like http://HOST:PORT",
        ));
        return checks;
    };
    match tokio::time::timeout(CHECK_TIMEOUT, tokio::net::TcpStream::connect(&host_port)).await {
        Ok(Ok(_)) => checks.push(Check::ok(
            "reachable",
            format!("{host_port} accepts connections"),
        )),
        Ok(Err(err)) => {
            checks.push(Check::fail(
                "reachable",
                format!("cannot connect to {host_port}: {err}"),
                "start the gateway, or check the address (--gateway, OPENSHELL_GATEWAY, \
                 `openshell gateway list`) and any firewall between",
            ));
            return checks;
        }
        Err(_) => {
            checks.push(Check::fail(
                "reachable",
                format!(
                    "no answer from {host_port} within {}s",
                    CHECK_TIMEOUT.as_secs()
                ),
                "check the address and that no firewall drops the connection",
            ));
            return checks;
        }
    }

    // One call answers the rest: TLS (and that it speaks gRPC), the token, the clock.
    let https = target.url.starts_with("https://");
    let answer = match target.connect(CHECK_TIMEOUT, CHECK_TIMEOUT).await {
        Ok(client) => client.gateway_info().await,
        Err(err) => Err(match err.downcast::<SdkError>() {
            Ok(sdk) => sdk,
            Err(other) => {
                checks.push(Check::fail(
                    "tls",
                    format!("{other:#}"),
                    "give a PEM CA file with --ca-cert, or save one: \
                     `openshell gateway add NAME URL --ca-cert FILE`",
                ));
                return checks;
            }
        }),
    };
    let transport_failed = matches!(
        &answer,
        Err(SdkError::Transport(_) | SdkError::Unavailable(_) | SdkError::DeadlineExceeded(_))
    );
    match (&answer, https) {
        (Err(err), true) if transport_failed && err.to_string().contains("plain HTTP, not TLS") => {
            checks.push(Check::fail(
                "tls",
                format!("{} speaks plain HTTP, not TLS", target.url),
                format!(
                    "use its http:// address: --gateway {}",
                    target.url.replacen("https://", "http://", 1)
                ),
            ));
            return checks;
        }
        (Err(err), true) if transport_failed => {
            checks.push(Check::fail(
                "tls",
                format!("no TLS connection to {}: {err}", target.url),
                "trust the CA that signed the gateway's certificate: --ca-cert FILE, \
                 OPENSHELL_CA_CERT, or `openshell gateway add NAME URL --ca-cert FILE`; \
                 or, if the gateway serves plain http, use an http:// address",
            ));
            return checks;
        }
        (Err(err), false) if transport_failed => {
            checks.push(Check::fail(
                "tls",
                format!("the gateway did not answer plain http/2 gRPC: {err}"),
                "if the gateway serves TLS, use its https:// address with its CA (--ca-cert)",
            ));
            return checks;
        }
        (_, true) => checks.push(Check::ok(
            "tls",
            match &target.ca_cert {
                Some(ca) => format!("certificate trusted via {}", ca.display()),
                None => "certificate trusted".to_owned(),
            },
        )),
        (_, false) => checks.push(Check::ok(
            "tls",
            "plain http (no TLS): use https for a gateway beyond this machine",
        )),
    }

    let date = match answer {
        Ok(info) => {
            let date = info
                .answered_at
                .as_deref()
                .and_then(|t| humantime::parse_rfc3339(t).ok());
            checks.push(Check::ok(
                "token",
                format!(
                    "accepted (from {}); gateway {} answers",
                    target.token_source.unwrap_or("nowhere"),
                    info.version
                ),
            ));
            date
        }
        Err(SdkError::Unauthenticated(message)) => {
            let detail = match target.token_source {
                Some(source) => format!("the gateway refused the token from {source}: {message}"),
                None => format!("no token was given: {message}"),
            };
            checks.push(Check::fail("token", detail, token_fix(&target)));
            checks.push(Check::skip(
                "clock",
                "needs an answer, which needs a token the gateway accepts",
            ));
            return checks;
        }
        Err(err) => {
            checks.push(Check::fail(
                "token",
                format!("the gateway answered with an error: {err}"),
                "see the gateway's log; `openshell status` repeats the call",
            ));
            return checks;
        }
    };
    checks.push(clock_check(date, SystemTime::now()));
    checks
}

/// Compares the gateway's clock, from the `date` header of its answer, with ours.
fn clock_check(gateway: Option<SystemTime>, local: SystemTime) -> Check {
    let Some(gateway) = gateway else {
        return Check::skip(
            "clock",
            "the gateway's answer carried no date header, so its clock is unknown",
        );
    };
    let (skew, ahead) = match gateway.duration_since(local) {
        Ok(d) => (d, true),
        Err(e) => (e.duration(), false),
    };
    let seconds = skew.as_secs();
    let side = if ahead { "ahead of" } else { "behind" };
    if skew > MAX_CLOCK_SKEW {
        Check::fail(
            "clock",
            format!("the gateway's clock is {seconds}s {side} this machine's"),
            "synchronize the clocks with NTP on both machines (e.g. `timedatectl set-ntp true`); \
             expiry times and timestamps compare across them",
        )
    } else {
        Check::ok(
            "clock",
            format!(
                "within {}s of the gateway's ({seconds}s {side})",
                MAX_CLOCK_SKEW.as_secs()
            ),
        )
    }
}

/// `HOST:PORT` of an http(s) address, with the scheme's port when none is given.
fn host_port(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    if authority.is_empty() {
        return None;
    }
    let has_port = match authority.rsplit_once(':') {
        Some((host, port)) => {
            !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !host.ends_with(':')
        }
        None => false,
    };
    // A bare IPv6 address has colons but no port after its closing bracket.
    let bare_ipv6 = authority.starts_with('[') && authority.ends_with(']');
    if has_port && !bare_ipv6 {
        Some(authority.to_owned())
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        Some(format!("{authority}:{port}"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_come_from_the_address() {
        assert_eq!(
            host_port("http://127.0.0.1:7070").unwrap(),
            "127.0.0.1:7070"
        );
        assert_eq!(
            host_port("https://gw.example.com").unwrap(),
            "gw.example.com:443"
        );
        assert_eq!(host_port("http://gw/x").unwrap(), "gw:80");
        assert_eq!(host_port("https://[::1]:8443").unwrap(), "[::1]:8443");
        assert_eq!(host_port("https://[::1]").unwrap(), "[::1]:443");
        assert!(host_port("http://").is_none());
    }

    #[test]
    fn clock_skew_beyond_the_limit_fails_with_a_fix() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let close = clock_check(Some(now + Duration::from_secs(2)), now);
        assert_eq!(close.status, Verdict::Ok);
        assert!(close.detail.contains("2s ahead"), "{}", close.detail);
        let behind = clock_check(Some(now - Duration::from_secs(300)), now);
        assert_eq!(behind.status, Verdict::Fail);
        assert!(behind.detail.contains("300s behind"), "{}", behind.detail);
        assert!(behind.fix.unwrap().contains("NTP"));
        assert_eq!(clock_check(None, now).status, Verdict::Skip);
    }
}
