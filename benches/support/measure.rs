//! What the benches read of a running process, from `/proc/<pid>`: CPU time
//! (user + system) and resident memory, now and at its peak (the peak can
//! be reset, so a phase's own peak is read). Plus the medians and ratios
//! the race prints. Shared by `daemon.rs` and `race.rs`, smoke-tested by
//! `tests/race_plumbing.rs`.

#![allow(dead_code)]

use std::time::Duration;

/// USER_HZ on Linux: the unit of `/proc/<pid>/stat`'s times.
const HZ: f64 = 100.0;

/// CPU seconds (user + system) the process has used so far.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after ')'.
    let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    ticks as f64 / HZ
}

/// Whether the process runs (exists and is not a zombie).
pub fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    state.is_some_and(|s| s != "Z" && s != "X")
}

fn status_kib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// Resident memory now, MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:") / 1024.0
}

/// Peak resident memory since start or the last [`reset_peak`], MiB.
pub fn peak_rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmHWM:") / 1024.0
}

/// Resets the peak to the current RSS (`clear_refs` 5). False when the
/// kernel refuses (then the peak is the process's whole life).
pub fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// CPU and memory of a group of processes (Flux is two) over a phase.
#[derive(Clone, Debug)]
pub struct Phase {
    pids: Vec<u32>,
    cpu0: f64,
    start: std::time::Instant,
    pub peak_reset: bool,
}

/// What a phase cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// CPU seconds used during the phase, all processes.
    pub cpu_s: f64,
    /// The phase's wall time.
    pub wall_s: f64,
    /// The sum of the processes' peak RSS during the phase, MiB.
    pub peak_mib: f64,
    /// The sum of their RSS at the end, MiB.
    pub rss_mib: f64,
}

impl Cost {
    /// CPU as a share of one core, percent.
    pub fn cpu_percent(&self) -> f64 {
        if self.wall_s > 0.0 {
            100.0 * self.cpu_s / self.wall_s
        } else {
            0.0
        }
    }
}

impl Phase {
    pub fn start(pids: &[u32]) -> Phase {
        let peak_reset = pids.iter().all(|&p| reset_peak(p));
        Phase {
            pids: pids.to_vec(),
            cpu0: pids.iter().map(|&p| cpu_seconds(p)).sum(),
            start: std::time::Instant::now(),
            peak_reset,
        }
    }

    pub fn end(&self) -> Cost {
        Cost {
            cpu_s: self.pids.iter().map(|&p| cpu_seconds(p)).sum::<f64>() - self.cpu0,
            wall_s: self.start.elapsed().as_secs_f64(),
            peak_mib: self.pids.iter().map(|&p| peak_rss_mib(p)).sum(),
            rss_mib: self.pids.iter().map(|&p| rss_mib(p)).sum(),
        }
    }
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    percentile(&s, 0.5)
}

/// `them / us` as the race prints it: `12.3×`, or `—` when either is zero.
pub fn ratio(us: f64, them: f64) -> String {
    if us <= 0.0 || them <= 0.0 {
        return "—".into();
    }
    ratio_of(us, them)
}

/// [`ratio`] of CPU seconds read in ticks of 10 ms: when `us` read none,
/// the ratio is at least `them` over one tick (`> 12×`).
pub fn cpu_ratio(us: f64, them: f64) -> String {
    if us < 0.01 && them >= 0.01 {
        return format!("> {}", ratio_of(0.01, them));
    }
    ratio(us, them)
}

fn ratio_of(us: f64, them: f64) -> String {
    let r = them / us;
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.1}×")
    }
}
