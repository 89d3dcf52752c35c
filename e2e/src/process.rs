//! Real processes: the gateway, supervisor and CLI binaries built by cargo.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Path of a binary of this workspace.
pub fn binary(name: &str) -> PathBuf {
    assert_cmd::cargo::cargo_bin(name)
}

/// A child process killed when dropped.
pub struct ChildGuard {
    pub child: Child,
    pub log: PathBuf,
}

impl ChildGuard {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// Children run in their own process group so that killing one also kills
/// what it started, even after a SIGKILL. A supervisor's workload leads a group
/// of its own: the groups its children lead go too, or what the workload started
/// would run on (holding the test's output open) once the supervisor is gone.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        for group in child_groups(pid).into_iter().chain([pid]) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(group),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The process groups that children of `pid` lead.
fn child_groups(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|candidate| {
            // `PID (COMM) STATE PPID PGRP …`; the command may hold spaces and parentheses.
            std::fs::read_to_string(format!("/proc/{candidate}/stat")).is_ok_and(|stat| {
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest.split_whitespace().collect())
                    .unwrap_or_default();
                fields.get(1) == Some(&pid.to_string().as_str())
                    && fields.get(2) == Some(&candidate.to_string().as_str())
            })
        })
        .collect()
}

/// Starts `openshell-gateway` with `args`, stderr to `log`, and waits until it listens on `port`.
pub fn spawn_gateway(args: &[&str], envs: &[(&str, &str)], log: PathBuf, port: u16) -> ChildGuard {
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(binary("openshell-gateway"));
    cmd.process_group(0)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::from(file));
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let guard = ChildGuard { child, log };
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "gateway did not listen on {port}; log:\n{}",
            guard.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    guard
}

/// A free TCP port on loopback for a gateway process started later.
///
/// Chosen below the kernel's ephemeral range: a port from that range, once
/// released, can be taken by any in-process gateway of a concurrent test
/// (they bind port 0), and `spawn_gateway` would then find that gateway
/// listening instead of its own.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.max(10_001));
    for _ in 0..1000 {
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = low + u16::try_from(random % u64::from(high - low)).unwrap();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port found in {low}..{high}");
}

/// A supervisor process with its state dir and its workload's output file.
pub struct SupervisorProcess {
    pub guard: ChildGuard,
    pub state_dir: PathBuf,
    /// Lines the sample workload writes: `started …` once, `reload` per signal.
    pub workload_out: PathBuf,
}

impl SupervisorProcess {
    pub fn workload_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.workload_out)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Whether the workload has started: the sample workloads write `started` first.
    pub fn workload_started(&self) -> bool {
        self.workload_lines()
            .iter()
            .any(|l| l.starts_with("started"))
    }

    pub fn reloads(&self) -> usize {
        self.workload_lines()
            .iter()
            .filter(|l| l.as_str() == "reload")
            .count()
    }

    pub fn active_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.state_dir.join("active").join(name)).ok()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.guard.child.try_wait(), Ok(None))
    }

    /// Stops with SIGKILL, like a crash (its workload goes with it).
    pub fn kill(mut self) -> PathBuf {
        kill_group(&mut self.guard.child);
        self.state_dir.clone()
    }
}

/// A workload that records its start (and the provider env it got) and every SIGHUP.
/// `wait` (unlike a foreground `sleep`) is interrupted by the trap at once.
pub const SAMPLE_WORKLOAD: &str = r#"echo "started org=${GITHUB_ORG:-none} token_len=${#GITHUB_TOKEN}" >> "$WORKLOAD_OUT"; trap 'echo reload >> "$WORKLOAD_OUT"' HUP; trap 'exit 0' TERM; while :; do sleep 5 & wait $!; done"#;

/// Starts `openshell-supervisor` for one sandbox with the sample workload.
pub fn spawn_supervisor(
    gateway: &str,
    sandbox_id: &str,
    credential: &str,
    dir: &std::path::Path,
    extra: &[&str],
) -> SupervisorProcess {
    spawn_supervisor_with(gateway, sandbox_id, credential, dir, extra, &[])
}

/// The `openshell-supervisor` command for one sandbox, not started: its credential is
/// written to `dir/credential`, its state goes to `dir/state` and its log (stderr) to
/// `dir/supervisor.log`, which is returned. `options` come before the workload,
/// `sh -c WORKLOAD`. With a `prefix` (a program that execs the supervisor, such as
/// `nohup`) the command runs that first. It leads its own process group, so a test can end
/// it with everything it started.
pub fn supervisor_command(
    prefix: &[&str],
    gateway: &str,
    sandbox_id: &str,
    credential: &str,
    dir: &std::path::Path,
    options: &[&str],
    workload: &str,
) -> (Command, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let credential_file = dir.join("credential");
    std::fs::write(&credential_file, credential).unwrap();
    let log = dir.join("supervisor.log");
    let supervisor = binary("openshell-supervisor");
    let mut cmd = match prefix.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(&supervisor);
            cmd
        }
        None => Command::new(&supervisor),
    };
    cmd.process_group(0)
        .arg("--gateway")
        .arg(gateway)
        .arg("--sandbox")
        .arg(sandbox_id)
        .arg("--credential-file")
        .arg(&credential_file)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(options)
        .arg("--")
        .arg("sh")
        .arg("-c")
        .arg(workload)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    (cmd, log)
}

/// [`spawn_supervisor`] with extra environment for the supervisor (a test hook).
pub fn spawn_supervisor_with(
    gateway: &str,
    sandbox_id: &str,
    credential: &str,
    dir: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> SupervisorProcess {
    let mut options = vec![
        "--poll-interval",
        "200ms",
        "--heartbeat-interval",
        "500ms",
        "--log",
        // The transport crates' debug lines would bury the supervisor's own in a failure's
        // log tail.
        "debug,h2=info,hyper=info,hyper_util=info,tower=info,tonic=info",
    ];
    options.extend_from_slice(extra);
    let (mut cmd, log) = supervisor_command(
        &[],
        gateway,
        sandbox_id,
        credential,
        dir,
        &options,
        SAMPLE_WORKLOAD,
    );
    let workload_out = dir.join("workload.out");
    cmd.env("WORKLOAD_OUT", &workload_out)
        .envs(env.iter().copied());
    let child = cmd.spawn().unwrap();
    SupervisorProcess {
        guard: ChildGuard { child, log },
        state_dir: dir.join("state"),
        workload_out,
    }
}
