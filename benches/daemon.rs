//! Daemon benchmark: `lockstep run` (release build, `sim` cluster, notes)
//! watching the gate issue's large fleet (2,000 ControlPlanes projecting
//! nine services each, 3,000 standalone services) served by `git daemon`.
//! It prints:
//! - start-up: process start to the first commit's verdict;
//! - idle: CPU share and peak RSS while nothing happens, and the cost of
//!   one poll that finds nothing new (from the daemon's own histogram);
//! - push-to-first-status through the webhook: a one-file hop is pushed,
//!   a signed GitHub push event is sent, and the clock runs until the new
//!   commit's status is written (p50/p90/p99 over the runs).
//!
//! Run: `cargo bench --bench daemon` (`-- --quick`: a 10x smaller fleet and
//! fewer pushes; `LOCKSTEP_BENCH_FLEET=8000,12000`: the 20,000-file fleet).
//! It asserts nothing about the figures.

#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/hook.rs"]
mod hook;
#[path = "support/measure.rs"]
mod measure;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet::git;
use hook::{get, has_note, metric, post_push};
use measure::percentile;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The fleet as one commit in a work tree.
fn generate(work: &Path, planes: usize, standalone: usize) {
    git(work, &["init", "-q", "-b", "main"]);
    fleet::write(work, planes, standalone);
    git(work, &["add", "-A"]);
    git(work, &["commit", "-q", "-m", "fleet"]);
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cpu_ticks(pid: u32) -> u64 {
    (measure::cpu_seconds(pid) * 100.0).round() as u64
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (mut planes, mut standalone, mut pushes) = if quick {
        (200, 300, 10)
    } else {
        (2000, 3000, 30)
    };
    // LOCKSTEP_BENCH_FLEET=PLANES,STANDALONE: another fleet size (the
    // 20,000-file fleet is 8000,12000).
    if let Ok(v) = std::env::var("LOCKSTEP_BENCH_FLEET") {
        let sizes: Vec<usize> = v.split(',').filter_map(|n| n.trim().parse().ok()).collect();
        let [p, s] = sizes[..] else {
            panic!("LOCKSTEP_BENCH_FLEET={v}: give PLANES,STANDALONE, e.g. 8000,12000");
        };
        (planes, standalone) = (p, s);
    }
    // For profiling: LOCKSTEP_BENCH_PUSHES=N, LOCKSTEP_BENCH_IDLE=SECONDS,
    // LOCKSTEP_BENCH_LOG=FILE (the daemon's debug log),
    // LOCKSTEP_BENCH_REMOTE=file,
    // LOCKSTEP_BENCH_WRAP=COMMAND (see below).
    if let Some(n) = std::env::var("LOCKSTEP_BENCH_PUSHES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        pushes = n;
    }
    let log = std::env::var_os("LOCKSTEP_BENCH_LOG").map(PathBuf::from);
    let tmp = tempfile::tempdir().expect("tmp");
    let work = tmp.path().join("work");
    let served = tmp.path().join("served");
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::create_dir_all(&served).expect("mkdir");
    let t = Instant::now();
    generate(&work, planes, standalone);
    git(
        &served,
        &["init", "-q", "--bare", "-b", "main", "fleet.git"],
    );
    git(
        &work,
        &[
            "remote",
            "add",
            "origin",
            served.join("fleet.git").to_str().expect("utf-8"),
        ],
    );
    git(&work, &["push", "-q", "origin", "main"]);
    println!(
        "fleet: {planes} ControlPlanes, {standalone} standalone services ({} files), generated in {:.1}s",
        planes + standalone,
        t.elapsed().as_secs_f64()
    );

    let git_port = free_port();
    // git-daemon itself: the `git daemon` wrapper would leave it running
    // when killed.
    let exec_path = git(tmp.path(), &["--exec-path"]);
    let _daemon = Proc(
        Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={git_port}"),
                &format!("--base-path={}", served.display()),
                served.to_str().expect("utf-8"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", git_port)).is_err() {
        assert!(Instant::now() < deadline, "git daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }

    let secret = "bench-secret";
    let secret_file = tmp.path().join("secret");
    std::fs::write(&secret_file, secret).expect("write");
    let cache = tmp.path().join("cache");
    let (hook, metrics) = (free_port(), free_port());
    let started = Instant::now();
    // LOCKSTEP_BENCH_REMOTE=file: the daemon fetches over file:// instead
    // of git://. git-daemon's answers stall for a TCP delayed ACK (about
    // 40 ms on loopback: `git ls-remote git://...` shows it too), which
    // hides the daemon's own cost of a poll.
    let url = match std::env::var("LOCKSTEP_BENCH_REMOTE").as_deref() {
        Ok("file") => format!("file://{}", served.join("fleet.git").display()),
        _ => format!("git://127.0.0.1:{git_port}/fleet.git"),
    };
    // LOCKSTEP_BENCH_WRAP="heaptrack -o /tmp/ht" runs the daemon under a
    // profiler (its figures are then the profiler's too).
    let wrap: Vec<String> = std::env::var("LOCKSTEP_BENCH_WRAP")
        .map(|w| w.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let mut command = match wrap.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(env!("CARGO_BIN_EXE_lockstep"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_lockstep")),
    };
    let child = command
        .args(["run", "--url", &url])
        .args(["--cache-dir", cache.to_str().expect("utf-8")])
        .args(["--poll", "5s", "--cluster-name", "bench"])
        .args(["--listen", &format!("127.0.0.1:{hook}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .args([
            "--github-webhook-secret-file",
            secret_file.to_str().expect("utf-8"),
        ])
        .args([
            "--log-level",
            if log.is_some() {
                "lockstep=debug"
            } else {
                "warn"
            },
        ])
        .stdout(Stdio::null())
        .stderr(match &log {
            Some(f) => Stdio::from(std::fs::File::create(f).expect("log file")),
            None => Stdio::inherit(),
        })
        .spawn()
        .expect("lockstep run");
    let pid = child.id();
    let _lockstep = Proc(child);
    let root = git(&work, &["rev-parse", "HEAD"]);
    let deadline = Instant::now() + Duration::from_secs(600);
    let repo = loop {
        if let Some(r) = hook::mirror(&cache)
            && has_note(&r, &root)
        {
            break r;
        }
        assert!(Instant::now() < deadline, "no verdict on the fleet commit");
        std::thread::sleep(Duration::from_millis(20));
    };
    println!(
        "start-up: first verdict {:.2}s after process start",
        started.elapsed().as_secs_f64()
    );

    // Idle: nothing changes; polls every 5 s find nothing.
    std::thread::sleep(Duration::from_secs(3));
    let m0 = get(metrics, "/metrics").expect("metrics");
    let (c0, w0) = (cpu_ticks(pid), Instant::now());
    let idle = std::env::var("LOCKSTEP_BENCH_IDLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 15 } else { 60 });
    std::thread::sleep(Duration::from_secs(idle));
    let ticks = cpu_ticks(pid) - c0;
    let wall = w0.elapsed().as_secs_f64();
    let m1 = get(metrics, "/metrics").expect("metrics");
    let hz = 100.0; // USER_HZ on Linux
    let passes = metric(&m1, "lockstep_reconcile_pass_duration_seconds_count")
        - metric(&m0, "lockstep_reconcile_pass_duration_seconds_count");
    let pass_s = metric(&m1, "lockstep_reconcile_pass_duration_seconds_sum")
        - metric(&m0, "lockstep_reconcile_pass_duration_seconds_sum");
    println!(
        "idle ({planes} planes watched, {idle}s): CPU {:.2}% of a core, {passes:.0} quiet polls, {:.1} ms per poll (wall, the remote's answer included), {:.1} ms CPU per poll (all of the process's CPU while idle), peak RSS {:.0} MiB",
        100.0 * ticks as f64 / hz / wall,
        if passes > 0.0 {
            1000.0 * pass_s / passes
        } else {
            0.0
        },
        if passes > 0.0 {
            1000.0 * ticks as f64 / hz / passes
        } else {
            0.0
        },
        measure::peak_rss_mib(pid)
    );

    // Push-to-first-status through the webhook.
    let mut lat = Vec::new();
    for n in 0..pushes {
        let i = (n * 2) % standalone;
        fleet::hop_nova(&work, i);
        git(
            &work,
            &["commit", "-q", "-am", &format!("nova-{i:05} to 2026.2")],
        );
        git(&work, &["push", "-q", "origin", "main"]);
        let sha = git(&work, &["rev-parse", "HEAD"]);
        let t0 = Instant::now();
        assert!(post_push(hook, secret, &sha, n), "webhook refused");
        let deadline = t0 + Duration::from_secs(30);
        while !has_note(&repo, &sha) {
            assert!(Instant::now() < deadline, "no status for {sha}");
            std::thread::sleep(Duration::from_millis(2));
        }
        lat.push(t0.elapsed());
        // Let the hop finish before the next push (one hop at a time).
        std::thread::sleep(Duration::from_millis(300));
    }
    lat.sort();
    if lat.is_empty() {
        return; // LOCKSTEP_BENCH_PUSHES=0: start-up and idle only.
    }
    println!(
        "push-to-first-status via webhook ({pushes} pushes): p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&lat, 0.5).as_secs_f64() * 1000.0,
        percentile(&lat, 0.9).as_secs_f64() * 1000.0,
        percentile(&lat, 0.99).as_secs_f64() * 1000.0,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
    );
    println!(
        "peak RSS after the pushes: {:.0} MiB",
        measure::peak_rss_mib(pid)
    );

    // Push-to-first-status of commits that add an object: the gate must
    // find every other file that could define the new name ("every object
    // is defined once"), the one-file commit that is dearest to judge.
    let adds = pushes.div_ceil(3);
    let mut lat = Vec::new();
    for n in 0..adds {
        let rel = fleet::add_nova(&work, n);
        git(&work, &["add", &rel]);
        git(&work, &["commit", "-q", "-m", &format!("add {rel}")]);
        git(&work, &["push", "-q", "origin", "main"]);
        let sha = git(&work, &["rev-parse", "HEAD"]);
        let t0 = Instant::now();
        assert!(post_push(hook, secret, &sha, pushes + n), "webhook refused");
        let deadline = t0 + Duration::from_secs(30);
        while !has_note(&repo, &sha) {
            assert!(Instant::now() < deadline, "no status for {sha}");
            std::thread::sleep(Duration::from_millis(2));
        }
        lat.push(t0.elapsed());
        std::thread::sleep(Duration::from_millis(300));
    }
    lat.sort();
    println!(
        "push-to-first-status of a commit adding an object ({adds} pushes): p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
        percentile(&lat, 0.5).as_secs_f64() * 1000.0,
        percentile(&lat, 0.9).as_secs_f64() * 1000.0,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
    );
    println!(
        "peak RSS after the additions: {:.0} MiB",
        measure::peak_rss_mib(pid)
    );
}
