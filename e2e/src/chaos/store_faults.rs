//! Faults of the gateway's store: a PostgreSQL server of the run's own that can be restarted
//! and killed (the shared test server serves every other test, so it is never touched), and
//! a small tmpfs the gateway's database lives on, filled to ENOSPC.
//!
//! Also the probe: policy writes to a sandbox of their own that only the scenario writes to,
//! so every revision of it is accounted for and a refused write that left a trace shows.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openshell_proto::v1 as pb;
use tempfile::TempDir;

use crate::{Api, policy_with_port, sandbox_ref, to_sandbox};

/// Where the machine's PostgreSQL binaries are.
pub const POSTGRES_BIN: &str = "/usr/lib/postgresql/15/bin";
/// The OS user the private server runs as: PostgreSQL refuses to run as root.
const POSTGRES_USER: &str = "postgres";

/// A tmpfs of its own, unmounted (and its mount point removed) when dropped. Whatever runs on
/// it must be stopped first.
pub struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`8m`). `Err` when this process may not mount (not root, no
    /// CAP_SYS_ADMIN), with the reason.
    pub fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("a temp dir: {e}"))?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("mount could not be run: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Fills the file system at `dir` with one filler file until it reports ENOSPC; returns the
/// filler, whose removal gives the space back.
pub fn fill_to_enospc(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    // What a partial chunk left: byte by byte to the last one.
    while file.write_all(&[0]).is_ok() {}
    path
}

/// A PostgreSQL cluster of one run: `initdb` into a temp dir owned by the `postgres` user,
/// listening on 127.0.0.1 on a free port with its socket in that dir, fsync on. Stopped
/// (immediately) and removed when dropped.
pub struct PrivatePostgres {
    root: TempDir,
    data: PathBuf,
    pub port: u16,
    /// The data dir's own file system, when asked for one.
    tmpfs: Option<Tmpfs>,
}

impl PrivatePostgres {
    /// Makes and starts the cluster; with `tmpfs_size`, its data dir is on a tmpfs of that
    /// size (for a scenario that fills it). `Err` with the reason when it cannot be made here
    /// (no `initdb`, no `postgres` user, no right to mount).
    pub fn start(tmpfs_size: Option<&str>) -> Result<Self, String> {
        let initdb = Path::new(POSTGRES_BIN).join("initdb");
        if !initdb.exists() {
            return Err(format!("{} not found", initdb.display()));
        }
        let root = tempfile::tempdir().map_err(|e| format!("a temp dir: {e}"))?;
        let tmpfs = tmpfs_size.map(Tmpfs::mount).transpose()?;
        let data = match &tmpfs {
            Some(tmpfs) => tmpfs.path().join("data"),
            None => root.path().join("data"),
        };
        let mut chown = Command::new("chown");
        chown.args(["-R", POSTGRES_USER]).arg(root.path());
        if let Some(tmpfs) = &tmpfs {
            chown.arg(tmpfs.path());
        }
        run(&mut chown)?;
        let port = crate::process::free_port();
        let cluster = Self {
            root,
            data,
            port,
            tmpfs,
        };
        // One-megabyte WAL segments keep the cluster small; initdb's own writes need no
        // fsync, the server's do. With a tmpfs, the WAL stays off it: PostgreSQL stops itself
        // when it cannot write its WAL, while a table that cannot grow fails only the write
        // that grows it, which is the fault meant.
        let mut initdb = as_postgres(&initdb);
        initdb
            .args(["--no-sync", "--auth=trust", "--username=postgres"])
            .args(["--wal-segsize=1", "--encoding=UTF8", "--locale=C"])
            .arg("-D")
            .arg(&cluster.data);
        if cluster.tmpfs.is_some() {
            initdb.arg(format!(
                "--waldir={}",
                cluster.root.path().join("wal").display()
            ));
        }
        run(&mut initdb)?;
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             fsync = on\nshared_buffers = 16MB\nmax_connections = 60\nmin_wal_size = 2MB\n\
             max_wal_size = 16MB\n",
            cluster.root.path().display()
        );
        let conf_path = cluster.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path)
            .map_err(|e| format!("{}: {e}", conf_path.display()))?;
        text.push_str(&conf);
        std::fs::write(&conf_path, text).map_err(|e| format!("{}: {e}", conf_path.display()))?;
        cluster.start_server()?;
        Ok(cluster)
    }

    /// The URL the gateway connects with.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The data dir's tmpfs, when it has one.
    pub fn tmpfs(&self) -> Option<&Path> {
        self.tmpfs.as_ref().map(Tmpfs::path)
    }

    fn pg_ctl(&self, action: &str) -> Command {
        let mut cmd = as_postgres(&Path::new(POSTGRES_BIN).join("pg_ctl"));
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.root.path().join("postgres.log"))
            .args(["-w", "-t", "120", action]);
        cmd
    }

    /// Starts the server and waits until it takes connections. After a SIGKILL of the
    /// postmaster its backends may still hold the shared memory a moment: the start is
    /// tried again until they are gone.
    pub fn start_server(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match run(&mut self.pg_ctl("start")) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("{e}\n{}", self.log_tail()));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }

    /// `pg_ctl -m fast restart`: open connections are ended, the server shuts down cleanly
    /// and starts again.
    pub fn restart_fast(&self) -> Result<(), String> {
        let mut cmd = self.pg_ctl("restart");
        cmd.args(["-m", "fast"]);
        run(&mut cmd).map_err(|e| format!("{e}\n{}", self.log_tail()))
    }

    /// SIGKILL of the postmaster (its pid from `postmaster.pid`): no shutdown at all; the
    /// next start recovers from the WAL.
    pub fn kill(&self) -> Result<(), String> {
        let pid_file = self.data.join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("{}: {e}", pid_file.display()))?;
        let pid: i32 = text
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| format!("{}: no pid on its first line", pid_file.display()))?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .map_err(|e| format!("kill -9 {pid}: {e}"))?;
        // Gone once it no longer takes signals.
        let deadline = Instant::now() + Duration::from_secs(30);
        while nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The server log's end, for a failure message.
    pub fn log_tail(&self) -> String {
        let text =
            std::fs::read_to_string(self.root.path().join("postgres.log")).unwrap_or_default();
        let start = text.len().saturating_sub(3000);
        text.get(start..).unwrap_or_default().to_string()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let mut stop = self.pg_ctl("stop");
        stop.args(["-m", "immediate"]);
        let _ = run(&mut stop);
        // The tmpfs before the root dir: the mount point is not in it, but the server was.
        self.tmpfs.take();
    }
}

fn as_postgres(program: &Path) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", POSTGRES_USER, "--"]).arg(program);
    cmd
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?} could not be run: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Policy writes to a sandbox only the scenario writes to: every revision of it is one the
/// probe saw committed, so a write that was refused and still left a revision shows.
#[derive(Clone)]
pub struct Probe {
    pub sandbox: String,
    /// The sandbox's policy revision as the probe's committed writes made it.
    pub revision: u64,
    writes: u32,
    prefix: String,
}

/// One probe write that failed: its key, to retry it with, and the status.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub key: String,
    pub port: u32,
    pub status: tonic::Status,
}

impl Probe {
    /// Creates the probe's sandbox, stopped: no supervisor runs for it, and the fleet's
    /// operations, which the checker expects to end, leave a stopped sandbox out.
    pub async fn create(api: &mut Api, prefix: &str) -> Self {
        let sandbox = format!("{prefix}-probe");
        crate::create_sandbox(api, &sandbox, crate::POLICY).await;
        api.set_sandbox_lifecycle(pb::SetSandboxLifecycleRequest {
            sandbox: sandbox_ref(&sandbox),
            lifecycle: pb::SandboxLifecycle::Stopped as i32,
        })
        .await
        .unwrap();
        let revision = latest_revision(api, &sandbox).await.unwrap();
        Self {
            sandbox,
            revision,
            writes: 0,
            prefix: prefix.into(),
        }
    }

    /// A new write with a key of its own; `Ok` with the response once committed (the
    /// revision it made must be the next one), `Err` with what a refusal said.
    pub async fn write(&mut self, api: &mut Api) -> Result<pb::UpdateConfigResponse, Refusal> {
        self.writes += 1;
        let key = format!("{}-probe-{}", self.prefix, self.writes);
        let port = 20_000 + self.writes;
        self.send(api, key, port).await
    }

    /// The same write again, with its key: after a failure it commits, and once committed it
    /// replays the first commit.
    pub async fn retry(
        &mut self,
        api: &mut Api,
        refusal: &Refusal,
    ) -> Result<pb::UpdateConfigResponse, Refusal> {
        self.send(api, refusal.key.clone(), refusal.port).await
    }

    async fn send(
        &mut self,
        api: &mut Api,
        key: String,
        port: u32,
    ) -> Result<pb::UpdateConfigResponse, Refusal> {
        let answer = api
            .update_config(pb::UpdateConfigRequest {
                policy_text: policy_with_port(port),
                request_id: key.clone(),
                ..to_sandbox(&self.sandbox)
            })
            .await;
        match answer {
            Ok(response) => {
                let response = response.into_inner();
                if u64::from(response.version) > self.revision {
                    self.revision = u64::from(response.version);
                }
                Ok(response)
            }
            Err(status) => Err(Refusal { key, port, status }),
        }
    }
}

/// The sandbox's latest policy revision.
pub async fn latest_revision(api: &mut Api, sandbox: &str) -> Result<u64, tonic::Status> {
    let response = api
        .get_sandbox_policy(pb::GetSandboxPolicyRequest {
            sandbox: sandbox_ref(sandbox),
            revision: 0,
            global: false,
        })
        .await?
        .into_inner();
    Ok(response.policy.map_or(0, |p| p.revision))
}

/// A client like [`super::lazy_api`] whose calls may wait longer than the store's own
/// connection wait (ten seconds), so it hears the gateway's answer, not its own deadline.
pub fn patient_api(endpoint: &str) -> Api {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(40))
        .connect_lazy();
    crate::Api::new(channel, crate::BearerToken(Some(crate::TOKEN.into())))
}
