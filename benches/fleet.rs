//! Fleet benchmark: generates fleet repositories of 500, 5,000 and 20,000
//! files (ControlPlanes and standalone service CRs, each file the size of the
//! examples), then times the real `lockstep` binary from process start to
//! exit and reads its peak RSS from `wait4`. Each figure is paired with a
//! yardstick run alternately with it (`git diff` of the same range for a
//! pull request, `git grep` of every file for a check that must search
//! them, `git archive` of the same tree for a whole-tree judgment):
//! the ratio of the two medians is what to compare across machines.
//!
//! Run: `cargo bench --bench fleet` (add `-- --quick` for fewer repetitions).
//! It prints figures; it asserts nothing about them (targets are in the issue
//! notes, not in a timed test). Knobs:
//! - `LOCKSTEP_BENCH_FLEETS=5000,20000`: only the fleets of these sizes;
//! - `LOCKSTEP_BENCH_BEFORE=PATH`: another `lockstep` binary (an older
//!   build) timed alongside, and its JSON output must be byte-identical to
//!   this build's on every check (the bench panics otherwise);
//! - `LOCKSTEP_BENCH_KEEP=DIR`: keep the generated repositories.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "support/fleet.rs"]
mod fleet;

use fleet::example;

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
    let nova = example("standalone/compute/nova.yaml");
    let fleet::Written { files, bytes } = fleet::write(&path, planes, standalone);
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

const BIN: &str = env!("CARGO_BIN_EXE_lockstep");

fn run(bin: &str, args: &[&str], dir: Option<&Path>) -> Sample {
    let start = Instant::now();
    let mut cmd = Command::new(bin);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let child = cmd
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

struct Summary {
    med: Duration,
    min: Duration,
    max: Duration,
    rss_kib: i64,
    code: i32,
}

fn summarize(mut samples: Vec<Sample>) -> Summary {
    samples.sort_by_key(|s| s.wall);
    Summary {
        med: samples[samples.len() / 2].wall,
        min: samples[0].wall,
        max: samples[samples.len() - 1].wall,
        rss_kib: samples.iter().map(|s| s.max_rss_kib).max().unwrap_or(0),
        code: samples[0].code,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print_row(label: &str, s: &Summary, reps: usize) {
    println!(
        "  {label:<44} median {:>8.1} ms  min {:>8.1}  max {:>8.1}  peak RSS {:>6.1} MiB  exit {}  (n={reps})",
        ms(s.med),
        ms(s.min),
        ms(s.max),
        s.rss_kib as f64 / 1024.0,
        s.code,
    );
}

fn measure(label: &str, reps: usize, args: &[&str]) {
    let samples: Vec<Sample> = (0..reps).map(|_| run(BIN, args, None)).collect();
    print_row(label, &summarize(samples), reps);
}

/// What a binary prints for `args` (its exit code and stdout).
fn output(bin: &str, args: &[&str]) -> (Option<i32>, Vec<u8>) {
    let out = Command::new(bin).args(args).output().expect("spawn");
    (out.status.code(), out.stdout)
}

/// `args` timed against a yardstick (`git` with `yard` in `repo`), the two
/// run alternately so that both see the same load; with
/// `LOCKSTEP_BENCH_BEFORE` the older binary is timed in the same rounds and
/// its output compared with this build's.
fn measure_paired(label: &str, reps: usize, args: &[&str], repo: &Path, yard: &[&str]) {
    measure_paired_with(label, reps, args, repo, yard, &|| {});
}

/// [`measure_paired`], with `prepare` run (untimed) before each run of
/// lockstep. An older build is given the same arguments without
/// `--names-index` and `--no-names-index` (builds before them have no such
/// flags; before the first, no index; before the second, none unasked).
fn measure_paired_with(
    label: &str,
    reps: usize,
    args: &[&str],
    repo: &Path,
    yard: &[&str],
    prepare: &dyn Fn(),
) {
    let before = std::env::var("LOCKSTEP_BENCH_BEFORE").ok();
    let old_args: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| *a != "--names-index" && *a != "--no-names-index")
        .collect();
    let old_args = old_args.as_slice();
    if let Some(old) = &before {
        prepare();
        let (new_code, new_out) = output(BIN, args);
        let (old_code, old_out) = output(old, old_args);
        assert_eq!(new_code, old_code, "{label}: exit codes differ");
        assert!(
            new_out == old_out,
            "{label}: output differs from {old}'s ({} vs {} bytes)",
            new_out.len(),
            old_out.len()
        );
    }
    let (mut ours, mut theirs, mut olds) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        theirs.push(run("git", yard, Some(repo)));
        prepare();
        ours.push(run(BIN, args, None));
        if let Some(old) = &before {
            olds.push(run(old, old_args, None));
        }
    }
    let (ours, theirs) = (summarize(ours), summarize(theirs));
    print_row(label, &ours, reps);
    if !olds.is_empty() {
        let olds = summarize(olds);
        print_row("  the same, LOCKSTEP_BENCH_BEFORE", &olds, reps);
        println!(
            "    before/after: {:.2}x (outputs identical)",
            ms(olds.med) / ms(ours.med)
        );
    }
    let yard_label = format!("  yardstick: git {}", yard.join(" "));
    print_row(&yard_label, &theirs, reps);
    println!(
        "    lockstep / yardstick (paired medians): {:.1}x",
        ms(ours.med) / ms(theirs.med)
    );
}

/// Two ways of running the same check timed in the same rounds (`prepare`
/// run untimed before each run of `b`): how a clone's first check with the
/// names index, the index removed before it, compares with the search
/// without it. Prints
/// both rows, the ratio of the medians and the median of the per-round
/// ratios (each round's two runs saw the same load).
fn measure_two(
    label_a: &str,
    a: &[&str],
    label_b: &str,
    b: &[&str],
    reps: usize,
    prepare: &dyn Fn(),
) {
    let (mut xs, mut ys, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..reps {
        // Alternate which goes first, so neither always follows the other.
        let (x, y) = if i % 2 == 0 {
            let x = run(BIN, a, None);
            prepare();
            (x, run(BIN, b, None))
        } else {
            prepare();
            let y = run(BIN, b, None);
            (run(BIN, a, None), y)
        };
        ratios.push(ms(y.wall) / ms(x.wall));
        xs.push(x);
        ys.push(y);
    }
    ratios.sort_by(f64::total_cmp);
    let (xs, ys) = (summarize(xs), summarize(ys));
    print_row(label_a, &xs, reps);
    print_row(label_b, &ys, reps);
    println!(
        "    second / first: {:.2}x (medians), {:.2}x (median of paired rounds; min {:.2}, max {:.2})",
        ms(ys.med) / ms(xs.med),
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1],
    );
}

/// Appends `n` one-file commits to main (a patch tag on one of the first
/// 100 Novas, round robin) and then a commit adding a new Nova: the shape of
/// a fleet repository after years of use. A check of that last commit has
/// to look back through all of it for the new identity's floor.
/// `git fast-import` writes the history in a second or two.
fn deepen(fleet: &Fleet, n: usize) {
    use std::io::Write as _;
    let nova = example("standalone/compute/nova.yaml");
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&fleet.path)
        .output()
        .expect("git rev-parse");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let mut stream = Vec::new();
    let commit = |stream: &mut Vec<u8>, i: usize, path: &str, text: &str, first: bool| {
        let msg = format!("commit {i}");
        write!(
            stream,
            "commit refs/heads/main\ncommitter bench <bench@example.invalid> {} +0000\ndata {}\n{msg}\n",
            1_700_000_000 + i,
            msg.len()
        )
        .expect("write");
        if first {
            writeln!(stream, "from {head}").expect("write");
        }
        write!(
            stream,
            "M 100644 inline {path}\ndata {}\n{text}\n",
            text.len()
        )
        .expect("write");
    };
    for i in 0..n {
        let k = (i % 100) * 2;
        let text = nova
            .replacen("name: nova\n", &format!("name: nova-{k:05}\n"), 1)
            .replacen(
                "namespace: compute",
                &format!("namespace: compute-{:03}", k % 300),
                1,
            )
            .replacen("tag: \"2026.1\"", &format!("tag: \"2026.1-p{i}\""), 1);
        let path = format!("standalone/compute/c{:03}/nova-{k:05}.yaml", k % 300);
        commit(&mut stream, i, &path, &text, i == 0);
    }
    let added = nova.replacen("name: nova\n", "name: nova-newest\n", 1);
    commit(
        &mut stream,
        n,
        "standalone/compute/c000/nova-newest.yaml",
        &added,
        n == 0,
    );
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(&fleet.path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("git fast-import");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&stream)
        .expect("feed fast-import");
    assert!(child.wait().expect("fast-import").success());
    git(&fleet.path, &["reset", "-q", "--hard", "main"]);
    git(&fleet.path, &["gc", "-q"]);
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 3 } else { 15 };
    let only: Option<Vec<usize>> = std::env::var("LOCKSTEP_BENCH_FLEETS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    for (planes, standalone) in [(200, 300), (2000, 3000), (8000, 12000)] {
        if only
            .as_ref()
            .is_some_and(|o| !o.contains(&(planes + standalone)))
        {
            continue;
        }
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
        measure_paired(
            "check, one-file PR (one Nova hop)",
            reps,
            &["check", "--repo", &repo, "--head", "HEAD~1", "-o", "json"],
            &fleet.path,
            &["diff", "HEAD~2", "HEAD~1"],
        );
        // The names index (`src/names.rs`, `names::wanted`): a person's
        // check at a terminal keeps it, so a check after the first costs
        // what a hop does (`--names-index` here, where no terminal is); a
        // CI job's or a script's searches every file (`--no-names-index`,
        // their default). The first check of a clone builds it, paired
        // with the full search.
        let index = fleet.path.join(".git/lockstep").join(lockstep::names::FILE);
        let forget = || {
            let _ = std::fs::remove_file(&index);
        };
        let person = ["check", "--repo", &repo, "-o", "json", "--names-index"];
        let search = ["check", "--repo", &repo, "-o", "json", "--no-names-index"];
        forget();
        output(BIN, &person);
        measure_paired(
            "check, one-file PR adding a new object (a person's)",
            reps,
            &person,
            &fleet.path,
            &["diff", "HEAD~1", "HEAD"],
        );
        if let Ok(len) = std::fs::metadata(&index).map(|m| m.len()) {
            println!("    names index: {:.2} MiB", len as f64 / (1 << 20) as f64);
        }
        measure_paired(
            "  without the index (a CI job's, a script's)",
            reps,
            &search,
            &fleet.path,
            &["diff", "HEAD~1", "HEAD"],
        );
        // What Git itself takes to search every file of the tree for one
        // name (the new one, in the tree before it: no match, so every blob
        // is read), which such a check cannot avoid: no file may define the
        // new name a second time (`docs/names-index.md`).
        measure_paired(
            "  the same, against Git searching every file",
            reps,
            &search,
            &fleet.path,
            &["grep", "-F", "-q", "-e", "nova-new", "HEAD~1"],
        );
        measure_two(
            "  --no-names-index again (paired with the next)",
            &search,
            "  a clone's first check (builds the index)",
            &person,
            reps,
            &forget,
        );
        measure_paired(
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
            &fleet.path,
            &["archive", "HEAD~2"],
        );
        if planes != 2000 {
            continue;
        }
        // Identity over time: a new object's floor comes from the whole
        // first-parent history before the judged range. The yardstick is
        // git itself listing what each of those commits changed.
        let commits = 10_000;
        let t = Instant::now();
        deepen(&fleet, commits);
        println!(
            "history: {commits} more one-file commits, then one adding a new Nova (written in {:.1} s)",
            t.elapsed().as_secs_f64()
        );
        measure(
            "check, the new Nova (looks back 10,003 commits)",
            reps.min(5),
            &["check", "--repo", &repo, "-o", "json"],
        );
        measure(
            "check, a patch (no look back)",
            reps.min(5),
            &["check", "--repo", &repo, "--head", "HEAD~1", "-o", "json"],
        );
        let t = Instant::now();
        let st = Command::new("git")
            .args([
                "log",
                "--first-parent",
                "--raw",
                "--no-abbrev",
                "--format=%H",
            ])
            .current_dir(&fleet.path)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("git log");
        assert!(st.success());
        println!(
            "  {:<44} {:>8.1} ms  (yardstick: git log --first-parent --raw, the same diffs)",
            "git log over the same history",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
}
