//! The plumbing of `benches/race.rs` (the race against Flux), without Flux
//! or an API server: the fleet it generates, the smart-HTTP server in front
//! of `git http-backend` that every side reads the fleet through (the git
//! CLI and libgit2 clone and fetch through it, before and after a push), and
//! the `/proc` readings its figures come from. The bench itself is run by
//! hand (`cargo bench --bench race`); CI builds no Flux.

#[path = "../benches/support/fleet.rs"]
mod fleet;
#[path = "../benches/support/http_git.rs"]
mod http_git;
#[path = "../benches/support/measure.rs"]
mod measure;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A 40-file fleet (standalone services only, as the race uses), served
/// bare under `served/fleet.git`.
fn served_fleet(tmp: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let work = tmp.join("work");
    let served = tmp.join("served");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&served).unwrap();
    fleet::git(&work, &["init", "-q", "-b", "main"]);
    let w = fleet::write_with(&work, 0, 40, false);
    assert_eq!(w.files, 40);
    fleet::git(&work, &["add", "-A"]);
    fleet::git(&work, &["commit", "-q", "-m", "fleet"]);
    fleet::git(
        &served,
        &["init", "-q", "--bare", "-b", "main", "fleet.git"],
    );
    let bare = served.join("fleet.git");
    fleet::git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    (work, served)
}

/// (kind, namespace, name) of every document under `dir`; panics on a
/// name defined twice.
fn ids(dir: &std::path::Path) -> std::collections::BTreeSet<(String, String, String)> {
    fn walk(d: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), out);
            } else {
                out.push(e.path());
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    assert_eq!(files.len(), 40);
    let mut seen = std::collections::BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for doc in text.split("\n---\n") {
            let value = |l: &str| l.split('#').next().unwrap().trim().to_owned();
            let kind = doc
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .map(value);
            let meta = doc.split("metadata:\n").nth(1).unwrap();
            let name = meta
                .lines()
                .find_map(|l| l.strip_prefix("  name: "))
                .map(value);
            let ns = meta
                .lines()
                .find_map(|l| l.strip_prefix("  namespace: "))
                .map(value);
            let id = (kind.unwrap(), ns.unwrap(), name.unwrap());
            assert!(seen.insert(id.clone()), "{id:?} defined twice");
        }
    }
    seen
}

#[test]
fn the_race_fleet_defines_every_object_once_and_hops_one_nova() {
    // With the Glances' backends (the other benches): each renamed with its
    // Glance, since several Glances share a namespace.
    let tmp = tempfile::tempdir().unwrap();
    fleet::write(tmp.path(), 0, 40);
    let with = ids(tmp.path());
    assert_eq!(with.len(), 60, "{with:?}");
    // Without (the race: the upstream CRDs define no GlanceBackend).
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    fleet::write_with(work, 0, 40, false);
    let seen = ids(work);
    assert_eq!(seen.len(), 40, "{seen:?}");
    let namespaces = fleet::standalone_namespaces(40);
    assert_eq!(namespaces.len(), 40, "{namespaces:?}");
    for (kind, ns, _) in &seen {
        assert!(kind == "Nova" || kind == "Glance", "{kind}");
        assert!(namespaces.contains(ns), "{ns} missing from {namespaces:?}");
    }
    let rel = fleet::hop_nova(work, 6);
    let text = std::fs::read_to_string(work.join(&rel)).unwrap();
    assert!(text.contains("name: nova-00006\n"), "{text}");
    assert!(text.contains("openStackRelease: \"2026.2\""), "{text}");
    assert!(text.contains("tag: \"2026.2\""), "{text}");
    assert!(!text.contains("2026.1"), "{text}");
}

#[test]
fn git_http_backend_serves_clones_and_fetches_to_git_and_libgit2() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, served) = served_fleet(tmp.path());
    let http = http_git::GitHttp::start(&served);
    let url = http.url("fleet.git");
    let head = fleet::git(&work, &["rev-parse", "HEAD"]);

    // The git CLI: protocol v2 (its default) and a full clone.
    let listed = fleet::git(tmp.path(), &["ls-remote", &url, "refs/heads/main"]);
    assert_eq!(listed, format!("{head}\trefs/heads/main"));
    fleet::git(tmp.path(), &["clone", "-q", &url, "cli"]);
    assert_eq!(
        fleet::git(&tmp.path().join("cli"), &["rev-parse", "HEAD"]),
        head
    );
    assert_eq!(
        fleet::git(&tmp.path().join("cli"), &["ls-files"])
            .lines()
            .count(),
        40
    );

    // libgit2, as lockstep fetches: a clone, then a fetch of one new commit.
    let repo = git2::Repository::init_bare(tmp.path().join("mirror")).unwrap();
    let mut remote = repo.remote_anonymous(&url).unwrap();
    remote
        .fetch(&["+refs/heads/main:refs/heads/main"], None, None)
        .unwrap();
    assert_eq!(
        repo.refname_to_id("refs/heads/main").unwrap().to_string(),
        head
    );
    fleet::hop_nova(&work, 0);
    fleet::git(&work, &["commit", "-q", "-am", "nova-00000 to 2026.2"]);
    let bare = served.join("fleet.git");
    fleet::git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let next = fleet::git(&work, &["rev-parse", "HEAD"]);
    remote
        .fetch(&["+refs/heads/main:refs/heads/main"], None, None)
        .unwrap();
    assert_eq!(
        repo.refname_to_id("refs/heads/main").unwrap().to_string(),
        next
    );
    // An incremental fetch with the CLI too (a negotiation with haves).
    fleet::git(&tmp.path().join("cli"), &["pull", "-q", "--ff-only"]);
    assert_eq!(
        fleet::git(&tmp.path().join("cli"), &["rev-parse", "HEAD"]),
        next
    );

    // A repository that is not there is a 404, not a hang.
    let out = Command::new("git")
        .args(["ls-remote", &http.url("nothere.git")])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(http.served.load(Ordering::Relaxed) >= 6);
}

#[test]
fn proc_readings_follow_a_busy_child() {
    // A child that holds 64 MiB and spins (in the shell itself, no forks).
    let mut child = Command::new("sh")
        .args([
            "-c",
            "x=$(head -c 67108864 /dev/zero | tr '\\0' a); i=0; while [ $i -lt 20000000 ]; do i=$((i+1)); done; sleep 30",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    let phase = measure::Phase::start(&[pid]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while measure::cpu_seconds(pid) < 0.5 {
        assert!(Instant::now() < deadline, "no CPU time read for {pid}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let cost = phase.end();
    assert!(cost.cpu_s >= 0.5, "{cost:?}");
    assert!(cost.wall_s > 0.0 && cost.cpu_percent() > 0.0, "{cost:?}");
    assert!(cost.peak_mib >= 64.0, "peak {cost:?}");
    assert!(cost.rss_mib >= 60.0, "rss {cost:?}");
    assert!(cost.peak_mib >= cost.rss_mib - 1.0, "{cost:?}");
    let _ = child.kill();
    let _ = child.wait();
    // A process that is gone reads as nothing, not a panic.
    assert_eq!(measure::cpu_seconds(pid), 0.0);
    assert_eq!(measure::rss_mib(pid), 0.0);

    // The ratios the table prints.
    assert_eq!(measure::ratio(100.0, 250.0), "2.5×");
    assert_eq!(measure::ratio(10.0, 1230.0), "123×");
    assert_eq!(measure::ratio(0.0, 5.0), "—");
    // CPU read no tick (10 ms) on our side: at least them over one tick.
    assert_eq!(measure::cpu_ratio(0.0, 0.03), "> 3.0×");
    assert_eq!(measure::cpu_ratio(0.0, 0.0), "—");
    assert_eq!(measure::cpu_ratio(0.02, 0.05), "2.5×");
    let ms = |v: u64| Duration::from_millis(v);
    assert_eq!(measure::median(&[ms(9), ms(1), ms(5), ms(7), ms(3)]), ms(5));
}
