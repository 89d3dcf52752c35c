//! The etcd baseline: the peer our fanout figures are judged against in the same run. Operators
//! use etcd for this very job (each agent watches a key; a put notifies them all), so the
//! harness starts a real etcd server, opens N watches on one key with the connection shape
//! the simulated supervisors use, puts the key and times how long until the last watcher has
//! the event. etcd's memory per watcher is read the same way as the gateway's per session.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use serde::Serialize;
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

use crate::ctl::ChildProc;
use crate::stats::{median, round3};
use crate::sys::{MachineCpu, mono_ns, ms_between, rss_kib_of};

#[allow(clippy::all, clippy::pedantic)]
mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::kv_client::KvClient;
use pb::watch_client::WatchClient;
use pb::watch_request::RequestUnion;

/// The key every watcher watches and every round puts.
const KEY: &[u8] = b"openshell-bench/fleet";
/// Watches opened at once while setting up.
const OPEN_BATCH: usize = 500;
/// How long a round may take before it counts as failed.
const ROUND_DEADLINE: Duration = Duration::from_secs(120);

/// The etcd part of a report: its runs, or why there are none.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EtcdBaseline {
    /// `etcd --version`'s first line.
    pub version: Option<String>,
    pub runs: Vec<EtcdRun>,
    /// Set when the comparison did not run (no etcd server on this machine, say).
    pub skipped: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EtcdRun {
    pub watchers: usize,
    /// Connections the watchers share; 0: one per watcher.
    pub channels: usize,
    /// Put start → the last watcher received the event, per round.
    pub rounds_ms: Vec<f64>,
    pub median_notify_all_ms: f64,
    /// etcd's resident memory growth from no watcher to all of them, per watcher.
    pub kib_per_watcher: f64,
    /// Median over the rounds of the CPU seconds the whole machine (etcd and the watchers)
    /// spent busy from the put to the last notification; `None` when not readable.
    pub median_machine_cpu_s: Option<f64>,
}

/// `etcd` as configured (`--etcd`), else the one on `PATH`.
pub fn find(configured: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = configured {
        return path.is_file().then(|| path.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    })
}

pub fn version(exe: &Path) -> Option<String> {
    let output = std::process::Command::new(exe)
        .arg("--version")
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .map(|line| line.trim().to_string())
}

/// A single-member etcd on loopback with its data in a directory of its own.
pub struct EtcdServer {
    process: ChildProc,
    endpoint: String,
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("no free port for etcd")?;
    Ok(listener.local_addr()?.port())
}

/// Starts of etcd tried before giving up. A port found free may be taken by someone else
/// before etcd binds it (a parallel test's outgoing connection, say): etcd then exits at
/// once, and a start on other ports succeeds.
const START_ATTEMPTS: usize = 5;

impl EtcdServer {
    pub async fn start(exe: &Path, data_dir: &Path, log_path: &Path) -> Result<Self> {
        let mut attempt = 1;
        loop {
            // A directory per attempt: one that failed may have left a member behind.
            let dir = data_dir.join(format!("attempt-{attempt}"));
            match Self::start_once(exe, &dir, log_path).await? {
                Some(server) => return Ok(server),
                None if attempt < START_ATTEMPTS => attempt += 1,
                None => bail!(
                    "etcd exited before it answered, {START_ATTEMPTS} times (see {})",
                    log_path.display()
                ),
            }
        }
    }

    /// One start on ports found free; None when etcd exited before it answered.
    async fn start_once(exe: &Path, data_dir: &Path, log_path: &Path) -> Result<Option<Self>> {
        let client = format!("http://127.0.0.1:{}", free_port()?);
        let peer = format!("http://127.0.0.1:{}", free_port()?);
        let args: Vec<String> = vec![
            "--name".into(),
            "bench".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--listen-client-urls".into(),
            client.clone(),
            "--advertise-client-urls".into(),
            client.clone(),
            "--listen-peer-urls".into(),
            peer.clone(),
            "--initial-advertise-peer-urls".into(),
            peer.clone(),
            "--initial-cluster".into(),
            format!("bench={peer}"),
        ];
        let process = ChildProc::spawn("etcd", exe, &args, log_path)?;
        let mut server = Self {
            process,
            endpoint: client,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match server.put(b"ready").await {
                Ok(_) => return Ok(Some(server)),
                Err(_) if server.process.has_exited() => return Ok(None),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(e.context("etcd did not answer within 30 s"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn channel(&self) -> Result<Channel> {
        Ok(Endpoint::from_shared(self.endpoint.clone())?
            .connect_timeout(Duration::from_secs(5))
            .connect_lazy())
    }

    /// Puts `value` at the key; returns the revision it made.
    async fn put(&self, value: &[u8]) -> Result<i64> {
        let response = KvClient::new(self.channel()?)
            .put(pb::PutRequest {
                key: KEY.to_vec(),
                value: value.to_vec(),
            })
            .await
            .context("etcd put failed")?
            .into_inner();
        Ok(response.header.map_or(0, |h| h.revision))
    }

    fn rss_kib(&self) -> Option<u64> {
        self.process.pid().and_then(rss_kib_of)
    }

    pub async fn stop(self) {
        self.process.finish(Duration::ZERO).await.ok();
    }
}

/// Opens `watchers` watches (each on a connection of its own when `channels` is 0, else over
/// `channels` shared ones), then times `rounds` puts until every watcher has the event.
pub async fn measure(
    server: &EtcdServer,
    watchers: usize,
    channels: usize,
    rounds: usize,
) -> Result<EtcdRun> {
    let before = server
        .rss_kib()
        .ok_or_else(|| anyhow!("cannot read etcd's memory"))?;
    let shared: Vec<Channel> = (0..channels)
        .map(|_| server.channel())
        .collect::<Result<_>>()?;
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(i64, u64)>();
    let mut watches = JoinSet::new();
    let mut opened = 0;
    while opened < watchers {
        let mut batch = JoinSet::new();
        for nth in opened..(opened + OPEN_BATCH).min(watchers) {
            let channel = match shared.get(nth % channels.max(1)) {
                Some(channel) => channel.clone(),
                None => server.channel()?,
            };
            batch.spawn(open_watch(channel));
        }
        while let Some(result) = batch.join_next().await {
            let (requests, mut events) = result.context("a watch task failed")??;
            let seen = seen_tx.clone();
            watches.spawn(async move {
                // Held: the stream ends when the client stops sending.
                let _requests = requests;
                while let Some(Ok(response)) = events.next().await {
                    let at = mono_ns();
                    for event in response.events {
                        let revision = event.kv.map_or(0, |kv| kv.mod_revision);
                        if seen.send((revision, at)).is_err() {
                            return;
                        }
                    }
                }
            });
            opened += 1;
        }
    }
    // Settled, as the gateway's idle memory is read after its sessions settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = server
        .rss_kib()
        .ok_or_else(|| anyhow!("cannot read etcd's memory"))?;

    let mut rounds_ms = Vec::with_capacity(rounds);
    let mut machine_cpu_s = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let cpu = MachineCpu::read();
        let start = mono_ns();
        let revision = server.put(format!("round-{round}").as_bytes()).await?;
        let mut notified = 0;
        let mut last = start;
        let deadline = tokio::time::Instant::now() + ROUND_DEADLINE;
        while notified < watchers {
            let Ok(Some((seen, at))) = tokio::time::timeout_at(deadline, seen_rx.recv()).await
            else {
                bail!(
                    "etcd round {round}: {notified} of {watchers} watchers notified within {ROUND_DEADLINE:?}"
                );
            };
            if seen == revision {
                notified += 1;
                last = last.max(at);
            }
        }
        rounds_ms.push(round3(ms_between(start, last)));
        machine_cpu_s.push(
            cpu.zip(MachineCpu::read())
                .map(|(before, after)| after.busy_s_since(&before)),
        );
    }
    let machine_cpu_s: Option<Vec<f64>> = machine_cpu_s.into_iter().collect();
    watches.abort_all();
    let growth = after.saturating_sub(before) as f64;
    Ok(EtcdRun {
        watchers,
        channels,
        median_notify_all_ms: round3(median(&rounds_ms)),
        rounds_ms,
        kib_per_watcher: round3(growth / watchers.max(1) as f64),
        median_machine_cpu_s: machine_cpu_s
            .filter(|cpu| !cpu.is_empty())
            .map(|cpu| round3(median(&cpu))),
    })
}

type WatchRequests = futures::channel::mpsc::UnboundedSender<pb::WatchRequest>;

/// One watch on the key, created (etcd said so) before it is returned.
async fn open_watch(
    channel: Channel,
) -> Result<(WatchRequests, tonic::Streaming<pb::WatchResponse>)> {
    let (requests, outgoing) = futures::channel::mpsc::unbounded();
    requests
        .unbounded_send(pb::WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(pb::WatchCreateRequest {
                key: KEY.to_vec(),
            })),
        })
        .map_err(|_| anyhow!("watch request not sent"))?;
    let mut events = WatchClient::new(channel)
        .watch(outgoing)
        .await
        .context("etcd watch failed")?
        .into_inner();
    loop {
        let response = events
            .message()
            .await
            .context("etcd watch stream failed")?
            .ok_or_else(|| anyhow!("etcd closed a watch before creating it"))?;
        if response.canceled {
            bail!("etcd cancelled a watch");
        }
        if response.created {
            return Ok((requests, events));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// An etcd that exits at once (as one does when its port was taken) is started again on
    /// other ports, and after the last attempt the error says so, instead of waiting out the
    /// answer deadline.
    #[tokio::test]
    async fn an_etcd_that_exits_at_once_is_retried_then_reported() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("etcd");
        let starts = dir.path().join("starts");
        std::fs::write(
            &exe,
            format!("#!/bin/sh\necho started >> {}\nexit 1\n", starts.display()),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = dir.path().join("etcd.log");
        let err = EtcdServer::start(&exe, &dir.path().join("data"), &log)
            .await
            .err()
            .expect("a failing etcd must not start");
        assert!(
            err.to_string().contains("exited before it answered"),
            "{err:#}"
        );
        let started = std::fs::read_to_string(&starts).unwrap();
        assert_eq!(started.lines().count(), START_ATTEMPTS);
    }
}
