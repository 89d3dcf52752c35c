//! What the harness reads from the operating system: the machine it runs on, a clock shared by
//! all of its processes, and a process's own memory and CPU use from `/proc/self`.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::{SysconfVar, sysconf};
use serde::{Deserialize, Serialize};

/// The machine a result was measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub memory_mib: u64,
    pub kernel: String,
}

impl Machine {
    pub fn detect() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let memory_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| status_field_kib(&text, "MemTotal:"))
            .map_or(0, |kib| kib / 1024);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Self {
            cores,
            cpu_model,
            memory_mib,
            kernel,
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} cores ({}), {} MiB RAM, Linux {}",
            self.cores, self.cpu_model, self.memory_mib, self.kernel
        )
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC`, which every process of the machine shares, so times taken
/// in the swarm child and in the coordinator can be subtracted.
pub fn mono_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => {
            let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(ts.tv_nsec()).unwrap_or(0);
            secs.saturating_mul(1_000_000_000).saturating_add(nanos)
        }
        Err(_) => 0,
    }
}

/// Milliseconds from `start_ns` to `end_ns` (both from [`mono_ns`]); 0 when `end` is earlier.
pub fn ms_between(start_ns: u64, end_ns: u64) -> f64 {
    end_ns.saturating_sub(start_ns) as f64 / 1e6
}

/// Memory and CPU of the calling process, from `/proc/self`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Resident set size now.
    pub rss_kib: u64,
    /// Peak resident set size over the process's life.
    pub hwm_kib: u64,
    /// User + system CPU time so far.
    pub cpu_ms: f64,
    /// When this was read ([`mono_ns`]).
    pub at_ns: u64,
    pub threads: u64,
}

impl Usage {
    pub fn read_self() -> Result<Self> {
        let status = std::fs::read_to_string("/proc/self/status")
            .context("cannot read /proc/self/status")?;
        let rss_kib = status_field_kib(&status, "VmRSS:").ok_or_else(|| anyhow!("no VmRSS"))?;
        let hwm_kib = status_field_kib(&status, "VmHWM:").ok_or_else(|| anyhow!("no VmHWM"))?;
        let threads = status_field_kib(&status, "Threads:").unwrap_or(0);
        let stat =
            std::fs::read_to_string("/proc/self/stat").context("cannot read /proc/self/stat")?;
        let ticks = cpu_ticks(&stat).ok_or_else(|| anyhow!("malformed /proc/self/stat"))?;
        let per_sec = sysconf(SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0)
            .unwrap_or(100);
        Ok(Self {
            rss_kib,
            hwm_kib,
            cpu_ms: ticks as f64 * 1000.0 / per_sec as f64,
            at_ns: mono_ns(),
            threads,
        })
    }
}

/// Resident set size of process `pid` (a child such as the etcd server).
pub fn rss_kib_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field_kib(&status, "VmRSS:")
}

/// The number after `key` in a `/proc/*/status` or `/proc/meminfo` text (kB for memory fields).
fn status_field_kib(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l[key.len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// utime + stime (fields 14 and 15) of a `/proc/*/stat` line. The command name (field 2) may
/// contain spaces, so fields are counted after its closing parenthesis.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field N is at index N - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// The whole machine's busy CPU time so far, from `/proc/stat`: every process's (gateways,
/// swarms, the database) and the kernel's on their behalf.
#[derive(Debug, Clone, Copy)]
pub struct MachineCpu {
    busy_ticks: u64,
}

impl MachineCpu {
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|line| line.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|field| field.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
        let busy_ticks = [0, 1, 2, 5, 6, 7]
            .iter()
            .map(|&i| ticks.get(i).copied().unwrap_or(0))
            .sum();
        Some(Self { busy_ticks })
    }

    /// CPU seconds the machine spent busy since `earlier`.
    pub fn busy_s_since(&self, earlier: &Self) -> f64 {
        let per_sec = sysconf(SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0)
            .unwrap_or(100);
        self.busy_ticks.saturating_sub(earlier.busy_ticks) as f64 / per_sec as f64
    }
}

/// Raises the soft open-file limit to the hard limit. Shared HTTP/2 channels keep the socket
/// count small, so this is headroom, not a requirement; failure is harmless.
pub fn raise_fd_limit() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).ok()?;
    }
    getrlimit(Resource::RLIMIT_NOFILE).ok().map(|(s, _)| s)
}

/// Sleeps, in a way that reads well at call sites.
pub async fn pause(d: Duration) {
    tokio::time::sleep(d).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_fields() {
        let stat = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 3 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(status_field_kib(status, "VmHWM:"), Some(2048));
        assert_eq!(status_field_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn the_machine_cpu_counts_this_process_busy() {
        let (machine, own) = (MachineCpu::read().unwrap(), Usage::read_self().unwrap());
        let mut x = 0u64;
        while Usage::read_self().unwrap().cpu_ms < own.cpu_ms + 200.0 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let busy = MachineCpu::read().unwrap().busy_s_since(&machine);
        // This process alone spent 0.2 s; the tick counts round to 10 ms.
        assert!(busy >= 0.18, "{busy}");
    }

    #[test]
    fn reads_own_usage() {
        let u = Usage::read_self().unwrap();
        assert!(u.rss_kib > 0 && u.hwm_kib >= u.rss_kib);
        assert!(mono_ns() > 0);
    }
}
