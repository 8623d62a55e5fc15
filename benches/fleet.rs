//! Fleet benchmark: generates a large fleet repository (2,000 ControlPlanes
//! and 3,000 standalone service CRs, each file the size of the examples) and
//! a 10x smaller one, then times the real `lockstep` binary from process
//! start to exit and reads its peak RSS from `wait4`.
//!
//! Run: `cargo bench --bench fleet` (add `-- --quick` for fewer repetitions).
//! It prints figures; it asserts nothing about them (targets are in the issue
//! notes, not in a timed test).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fleet");

fn example(rel: &str) -> String {
    std::fs::read_to_string(Path::new(EXAMPLES).join(rel)).expect("example")
}

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(["-c", "gc.auto=0"])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .status()
        .expect("git");
    assert!(st.success(), "git {args:?}");
}

struct Fleet {
    _dir: tempfile::TempDir,
    path: PathBuf,
    bytes: u64,
    files: usize,
}

/// Commit 1: the fleet. Commit 2: a one-file pull request (one Nova hop).
/// Commit 3: a one-file pull request adding a new Nova (forces the
/// collision lookup over untouched files).
fn generate(planes: usize, standalone: usize) -> Fleet {
    let dir = tempfile::tempdir().expect("tmp");
    // LOCKSTEP_BENCH_KEEP=DIR keeps the generated repositories for profiling.
    let path = match std::env::var_os("LOCKSTEP_BENCH_KEEP") {
        Some(keep) => {
            let p = PathBuf::from(keep).join(format!("fleet-{planes}"));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("mkdir");
            p
        }
        None => dir.path().to_owned(),
    };
    git(&path, &["init", "-q", "-b", "main"]);
    let plane = example("clusters/prod/controlplane.yaml");
    let nova = example("standalone/compute/nova.yaml");
    let glance = example("standalone/image/glance.yaml");
    let mut bytes = 0u64;
    let mut files = 0;
    let mut write = |rel: String, text: String| {
        let p = path.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        bytes += text.len() as u64;
        files += 1;
        std::fs::write(p, text).expect("write");
    };
    for i in 0..planes {
        let ns = format!("cloud-{i:05}");
        let text = plane
            .replacen("name: prod ", &format!("name: p{i:05} "), 1)
            .replacen("namespace: openstack ", &format!("namespace: {ns} "), 1);
        write(
            format!("regions/r{:02}/{ns}/controlplane.yaml", i % 40),
            text,
        );
    }
    for i in 0..standalone {
        let (text, rel) = if i % 2 == 0 {
            (
                nova.replacen("name: nova\n", &format!("name: nova-{i:05}\n"), 1)
                    .replacen(
                        "namespace: compute",
                        &format!("namespace: compute-{:03}", i % 300),
                        1,
                    ),
                format!("standalone/compute/c{:03}/nova-{i:05}.yaml", i % 300),
            )
        } else {
            (
                glance
                    .replacen("name: glance ", &format!("name: glance-{i:05} "), 1)
                    .replace(
                        "namespace: image",
                        &format!("namespace: image-{:03}", i % 300),
                    ),
                format!("standalone/image/i{:03}/glance-{i:05}.yaml", i % 300),
            )
        };
        write(rel, text);
    }
    git(&path, &["add", "-A"]);
    git(&path, &["commit", "-q", "-m", "fleet"]);
    let pr = "standalone/compute/c000/nova-00000.yaml";
    let t = std::fs::read_to_string(path.join(pr)).expect("read");
    std::fs::write(
        path.join(pr),
        t.replacen(
            "openStackRelease: \"2026.1\"",
            "openStackRelease: \"2026.2\"",
            1,
        )
        .replacen("tag: \"2026.1\"", "tag: \"2026.2\"", 1),
    )
    .expect("write");
    git(&path, &["commit", "-q", "-am", "nova-00000 to 2026.2"]);
    std::fs::write(
        path.join("standalone/compute/c000/nova-new.yaml"),
        nova.replacen("name: nova\n", "name: nova-new\n", 1),
    )
    .expect("write");
    git(&path, &["add", "-A"]);
    git(&path, &["commit", "-q", "-m", "add nova-new"]);
    // Clones and CI checkouts are packed.
    git(&path, &["gc", "-q", "--aggressive"]);
    Fleet {
        _dir: dir,
        path,
        bytes,
        files,
    }
}

struct Sample {
    wall: Duration,
    max_rss_kib: i64,
    code: i32,
}

fn run(args: &[&str]) -> Sample {
    let bin = env!("CARGO_BIN_EXE_lockstep");
    let start = Instant::now();
    let child = Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain FFI call; `usage` is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(r, pid, "wait4");
    std::mem::forget(child);
    Sample {
        wall,
        max_rss_kib: usage.ru_maxrss,
        code: libc::WEXITSTATUS(status),
    }
}

fn measure(label: &str, reps: usize, args: &[&str]) {
    let mut samples: Vec<Sample> = (0..reps).map(|_| run(args)).collect();
    samples.sort_by_key(|s| s.wall);
    let med = samples[samples.len() / 2].wall;
    let min = samples[0].wall;
    let max = samples[samples.len() - 1].wall;
    let rss = samples.iter().map(|s| s.max_rss_kib).max().unwrap_or(0);
    println!(
        "  {label:<44} median {:>8.1} ms  min {:>8.1}  max {:>8.1}  peak RSS {:>6.1} MiB  exit {}  (n={reps})",
        med.as_secs_f64() * 1e3,
        min.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        rss as f64 / 1024.0,
        samples[0].code,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 3 } else { 15 };
    for (planes, standalone) in [(200, 300), (2000, 3000)] {
        let t = Instant::now();
        let fleet = generate(planes, standalone);
        let repo = fleet.path.to_string_lossy().into_owned();
        println!(
            "fleet: {planes} ControlPlanes + {standalone} standalone CRs = {} files, {:.1} MiB of YAML, {} objects with children (generated in {:.1} s)",
            fleet.files,
            fleet.bytes as f64 / (1 << 20) as f64,
            planes * 9 + standalone,
            t.elapsed().as_secs_f64()
        );
        measure(
            "check, one-file PR (one Nova hop)",
            reps,
            &["check", "--repo", &repo, "--head", "HEAD~1", "-o", "json"],
        );
        measure(
            "check, one-file PR adding a new object",
            reps,
            &["check", "--repo", &repo, "-o", "json"],
        );
        measure(
            "full judgment of the whole tree",
            reps.min(5),
            &[
                "check",
                "--repo",
                &repo,
                "--base",
                "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
                "--head",
                "HEAD~2",
                "-o",
                "json",
            ],
        );
    }
}
