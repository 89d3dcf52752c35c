//! Real processes: the gateway, supervisor and CLI binaries built by cargo.

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
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `openshell-gateway` with `args`, stderr to `log`, and waits until it listens on `port`.
pub fn spawn_gateway(args: &[&str], envs: &[(&str, &str)], log: PathBuf, port: u16) -> ChildGuard {
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(binary("openshell-gateway"));
    cmd.args(args)
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

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
