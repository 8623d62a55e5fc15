//! Upgrade plans executed by the daemon, Git first, in `sim` mode (the
//! simulated C5C3 operator; real Git, real notes): a 3-wave plan over 20
//! ControlPlanes selected by labels. The daemon writes each wave's hop
//! commits itself; the gate judges them and the loop applies them like any
//! other commit. Checked: wave order, maxParallel, the soak between waves
//! (virtual clock), every commit accepted, every plane at the target, the
//! plan's own status, a restart in the middle of a wave (no object bumped
//! twice), pause, and hold on failure. `plan_kube.rs` runs the same fleet
//! and plan against the real kube-apiserver.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{ring, ringed_plane, rings_plan};
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::metrics::Metrics;
use lockstep::sim::{Fault, JobKind, Params, World};
use lockstep::source::{Origin, Source};

/// The rings plan with soaks of hours (virtual time).
fn plan() -> String {
    rings_plan("1h", "30m")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// 20 ControlPlanes (staging's four services each) labelled by ring, at
/// 2026.1, then a commit adding the plan.
fn fleet(dir: &Path, plan: &str) {
    fleet_at(dir, plan, "2026.1");
}

/// The same fleet at `release`.
fn fleet_at(dir: &Path, plan: &str, release: &str) {
    git(dir, &["init", "-q", "-b", "main"]);
    for i in 0..20 {
        let p = dir.join(format!("clouds/c{i:02}.yaml"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(
            p,
            ringed_plane(i).replace("\"2026.1\"", &format!("\"{release}\"")),
        )
        .unwrap();
    }
    git(dir, &["add", "-A"]);
    git(
        dir,
        &["commit", "-q", "-m", &format!("20 clouds at {release}")],
    );
    std::fs::create_dir_all(dir.join("plans")).unwrap();
    std::fs::write(dir.join("plans/rings.yaml"), plan).unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "plan: rings to 2026.2"]);
}

struct Rig {
    dir: tempfile::TempDir,
    mem: MemoryCluster,
    forge: AnyForge,
    queue: StatusQueue,
}

impl Rig {
    fn new(plan: &str, faults: Vec<Fault>) -> Self {
        Self::at(plan, faults, "2026.1")
    }

    fn at(plan: &str, faults: Vec<Fault>, release: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        fleet_at(dir.path(), plan, release);
        let mut w = World::new(Params::default());
        w.faults = faults;
        Self {
            forge: AnyForge::Notes(Notes::open(dir.path()).unwrap()),
            mem: MemoryCluster::new(w),
            queue: StatusQueue::new(10_000),
            dir,
        }
    }

    fn daemon(&self) -> Daemon<MemoryCluster, Source> {
        self.daemon_since(None)
    }

    /// A daemon judging only the commits after `since` (`--since`): the
    /// tree there is taken as given.
    fn daemon_since(&self, since: Option<String>) -> Daemon<MemoryCluster, Source> {
        let opts = Options {
            cluster_name: "sim".into(),
            since,
            ..Options::default()
        };
        let source = Source::open(Origin::Local(self.dir.path().to_owned()), "main").unwrap();
        let clock = lockstep::daemon::virtual_start(&self.mem, &source, &opts).unwrap();
        Daemon::new(
            opts,
            source,
            self.mem.clone(),
            clock,
            self.queue.clone(),
            Arc::new(Metrics::new()),
        )
    }

    /// Plan commits so far: (wave, objects).
    fn plan_commits(&self) -> Vec<(String, Vec<String>)> {
        self.hop_commits()
            .into_iter()
            .map(|(_, w, o)| (w, o))
            .collect()
    }

    /// Plan commits so far: (release they move to, wave, objects).
    fn hop_commits(&self) -> Vec<(String, String, Vec<String>)> {
        let log = git(
            self.dir.path(),
            &[
                "log",
                "--reverse",
                "--format=%H%x09%(trailers:key=Lockstep-Wave,valueonly)%x09%s%x09%b%x1e",
                "main",
            ],
        );
        log.split('\u{1e}')
            .filter_map(|rec| {
                let mut f = rec.trim().splitn(4, '\t');
                let _sha = f.next()?;
                let wave = f.next()?.trim().to_owned();
                let to = f.next()?.rsplit(" to ").next()?.trim().to_owned();
                let body = f.next().unwrap_or("");
                (!wave.is_empty()).then(|| {
                    let objs = body
                        .lines()
                        .filter(|l| l.contains("ControlPlane"))
                        .map(|l| l.trim().to_owned())
                        .collect();
                    (to, wave, objs)
                })
            })
            .collect()
    }

    fn note(&self, sha: &str) -> String {
        git(self.dir.path(), &["notes", "--ref=lockstep", "show", sha])
    }

    /// Drives passes and the simulator until idle (or `stop` says so);
    /// calls `watch` after every pass.
    async fn drive(
        &self,
        d: &mut Daemon<MemoryCluster, Source>,
        mut watch: impl FnMut(&World),
        mut stop: impl FnMut(&Rig) -> bool,
    ) -> bool {
        let metrics = Metrics::new();
        for _ in 0..50_000 {
            let out = d.pass().await;
            assert!(deliver_now(&self.queue, &self.forge, &metrics, &RetryPolicy::default()).await);
            watch(&self.mem.world().unwrap());
            if stop(self) {
                return false;
            }
            let busy = self.mem.step(Duration::from_secs(60)).unwrap();
            if out.busy && !busy {
                self.mem.advance(Duration::from_secs(60));
            }
            if !out.busy && !busy {
                return true;
            }
        }
        panic!("the plan did not finish");
    }
}

/// Planes of a wave with an upgrade in flight (any child with a target).
fn in_flight(w: &World) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for i in 0..20 {
        let busy = w.objects.values().any(|o| {
            o.key.namespace == format!("cloud-{i:02}") && o.status.target_release.is_some()
        });
        if busy {
            *out.entry(ring(i)).or_default() += 1;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_wave_plan_over_twenty_planes_with_a_restart_mid_wave() {
    let rig = Rig::new(&plan(), Vec::new());
    let mut peak: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut order: Vec<&'static str> = Vec::new();
    let mut record = |w: &World| {
        for (ring, n) in in_flight(w) {
            let p = peak.entry(ring).or_default();
            *p = (*p).max(n);
            if order.last() != Some(&ring) {
                order.push(ring);
            }
        }
    };
    // First daemon: killed once the second eu commit exists (mid-wave).
    let mut d = rig.daemon();
    let finished = rig
        .drive(&mut d, &mut record, |r| {
            r.plan_commits().iter().filter(|(w, _)| w == "eu").count() >= 2
        })
        .await;
    assert!(!finished, "the plan should still be running mid-wave");
    drop(d);
    // A fresh daemon, nothing carried over but Git and the cluster.
    let mut d = rig.daemon();
    assert!(rig.drive(&mut d, &mut record, |_| false).await);

    let commits = rig.plan_commits();
    let waves: Vec<&str> = commits.iter().map(|(w, _)| w.as_str()).collect();
    // Waves in order, each commit within its wave's parallelism.
    let first = |w: &str| waves.iter().position(|x| *x == w).unwrap();
    let last = |w: &str| waves.iter().rposition(|x| *x == w).unwrap();
    assert!(
        last("canary") < first("eu") && last("eu") < first("rest"),
        "{waves:?}"
    );
    for (w, objs) in &commits {
        let limit = match w.as_str() {
            "canary" => 1,
            "eu" => 3,
            _ => 5,
        };
        assert!(!objs.is_empty() && objs.len() <= limit, "{w}: {objs:?}");
    }
    // Every plane bumped exactly once, across the restart.
    let mut bumped: Vec<&String> = commits.iter().flat_map(|(_, o)| o).collect();
    let n = bumped.len();
    bumped.sort();
    bumped.dedup();
    assert_eq!((n, bumped.len()), (20, 20), "{commits:#?}");
    // Never more in flight than the wave allows; the rings never overlapped.
    assert!(peak.get("canary").copied().unwrap_or(0) <= 1, "{peak:?}");
    assert!(peak.get("eu").copied().unwrap_or(0) <= 3, "{peak:?}");
    assert!(peak.get("general").copied().unwrap_or(0) <= 5, "{peak:?}");
    assert!(
        peak.get("eu").copied().unwrap_or(0) >= 2,
        "eu ran in parallel: {peak:?}"
    );
    assert_eq!(order.first(), Some(&"canary"));
    // Every plane at 2026.2 in the cluster.
    let w = rig.mem.world().unwrap();
    for i in 0..20 {
        let plane = w
            .planes
            .values()
            .find(|p| p.key.name == format!("c{i:02}"))
            .unwrap();
        assert_eq!(plane.release, "2026.2", "c{i:02}");
    }
    drop(w);
    // Every plan commit was judged and applied (success), and the plan's
    // own commit says it is complete.
    let shas = git(rig.dir.path(), &["log", "--format=%H", "main"]);
    for sha in shas.lines() {
        let note = rig.note(sha);
        assert!(note.contains("lockstep/sim: success"), "{sha}: {note}");
    }
    let plan_commit = git(
        rig.dir.path(),
        &["log", "-1", "--format=%H", "main", "--", "plans/rings.yaml"],
    );
    let note = rig.note(&plan_commit);
    assert!(
        note.contains("lockstep/sim/plan/rings: success — complete"),
        "{note}"
    );
    // And `lockstep plan status` tells the same from Git and the notes.
    let text = plan_status(rig.dir.path());
    assert!(
        text.contains("lockstep/sim/plan/rings: success — complete"),
        "{text}"
    );
    for line in [
        "wave 1/3 canary (maxParallel 1, soak 1h): 2/2 committed at 2026.2",
        "wave 2/3 eu (maxParallel 3, soak 30m): 8/8 committed at 2026.2",
        "wave 3/3 rest (maxParallel 5, soak 0s): 10/10 committed at 2026.2",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    assert!(!text.contains('·'), "{text}");
}

/// The rings plan from 2025.2 to 2027.1 (three hops), with a soak after
/// the last wave too (it holds the next hop's canary).
fn fast_forward_plan() -> String {
    plan()
        .replacen("to: \"2026.2\"", "to: \"2027.1\"", 1)
        .replacen("maxParallel: 5\n", "maxParallel: 5\n      soak: 2h\n", 1)
}

/// A fast-forward over 20 ControlPlanes from 2025.2 to 2027.1: every plane
/// takes every hop in order, one release per commit, never two at once (no
/// child is ever more than one release below its plane's target), the
/// whole wave sequence once per hop, and the soaks (between waves and
/// between hops) honoured in virtual time; the daemon is restarted in the
/// middle of the second hop (no hop written twice or skipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_forward_over_twenty_planes_takes_every_hop_in_order() {
    let rig = Rig::at(&fast_forward_plan(), Vec::new(), "2025.2");
    let mut d = rig.daemon();
    fn prev(r: &str) -> &str {
        match r {
            "2026.1" => "2025.2",
            "2026.2" => "2026.1",
            "2027.1" => "2026.2",
            other => other,
        }
    }
    // Per plane, the releases its ControlPlane took in the cluster.
    let mut taken: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // When every plane of a ring was first complete at a release.
    let mut ring_done: BTreeMap<(&'static str, String), Duration> = BTreeMap::new();
    // When each plan commit was first seen: (release, wave) → first, last.
    let mut seen_at: BTreeMap<(String, String), (Duration, Duration)> = BTreeMap::new();
    let mut violations = Vec::new();
    let mem = rig.mem.clone();
    let mut seen_commits = 0;
    let mut restarted = false;
    let mut watch = |w: &World| {
        for p in w.planes.values() {
            let t = taken.entry(p.key.name.clone()).or_default();
            if t.last() != Some(&p.release) {
                t.push(p.release.clone());
            }
            // Never two hops at once: every child installed at the
            // plane's release or the one before it.
            for o in w
                .objects
                .values()
                .filter(|o| o.key.namespace == p.key.namespace)
            {
                if let Some(r) = o.status.installed_release.as_deref()
                    && r != p.release
                    && r != prev(&p.release)
                {
                    violations.push(format!("{} at {r} under plane {}", o.key, p.release));
                }
            }
        }
        for release in ["2026.1", "2026.2", "2027.1"] {
            for ring_name in ["canary", "eu", "general"] {
                let done = (0..20).filter(|i| ring(*i) == ring_name).all(|i| {
                    w.objects
                        .values()
                        .filter(|o| {
                            o.key.namespace == format!("cloud-{i:02}")
                                && o.key.kind != lockstep::kind::Kind::Horizon
                        })
                        .all(|o| {
                            o.status.installed_release.as_deref() == Some(release)
                                && o.status.upgrade_phase.is_none()
                        })
                });
                if done {
                    ring_done
                        .entry((ring_name, release.to_owned()))
                        .or_insert(w.now);
                }
            }
        }
    };
    let mut stop = |r: &Rig| {
        let commits = r.hop_commits();
        for (to, wave, _) in &commits[seen_commits..] {
            let now = mem.now();
            let e = seen_at
                .entry((to.clone(), wave.clone()))
                .or_insert((now, now));
            e.1 = now;
        }
        seen_commits = commits.len();
        // Killed once the second hop's eu wave has started.
        if !restarted && commits.iter().any(|(to, w, _)| to == "2026.2" && w == "eu") {
            restarted = true;
            return true;
        }
        false
    };
    assert!(
        !rig.drive(&mut d, &mut watch, &mut stop).await,
        "still running"
    );
    drop(d);
    // A fresh daemon: nothing carried over but Git and the cluster.
    let mut d = rig.daemon();
    assert!(rig.drive(&mut d, &mut watch, &mut stop).await);
    assert!(
        violations.is_empty(),
        "{:?}",
        &violations[..violations.len().min(5)]
    );
    // Every plane took every hop, in order, in the cluster.
    assert_eq!(taken.len(), 20);
    for (plane, releases) in &taken {
        assert_eq!(
            releases,
            &["2025.2", "2026.1", "2026.2", "2027.1"],
            "{plane}"
        );
    }
    // In Git: every plane bumped exactly once per hop, each commit one
    // release, the wave sequence once per hop.
    let commits = rig.hop_commits();
    let mut per_plane: BTreeMap<&String, Vec<&str>> = BTreeMap::new();
    for (to, _, objs) in &commits {
        for o in objs {
            per_plane.entry(o).or_default().push(to);
        }
    }
    assert_eq!(per_plane.len(), 20, "{commits:#?}");
    for (plane, hops) in &per_plane {
        assert_eq!(hops, &["2026.1", "2026.2", "2027.1"], "{plane}");
    }
    let order: Vec<(&str, &str)> = commits
        .iter()
        .map(|(to, w, _)| (to.as_str(), w.as_str()))
        .collect();
    let mut runs = order.clone();
    runs.dedup();
    assert_eq!(
        runs,
        [
            ("2026.1", "canary"),
            ("2026.1", "eu"),
            ("2026.1", "rest"),
            ("2026.2", "canary"),
            ("2026.2", "eu"),
            ("2026.2", "rest"),
            ("2027.1", "canary"),
            ("2027.1", "eu"),
            ("2027.1", "rest"),
        ],
        "{order:?}"
    );
    // Soaks: eu an hour after the canary completed, rest 30 minutes after
    // eu, and the next hop's canary two hours after the rest completed.
    let ring_of = |wave: &str| match wave {
        "rest" => "general",
        w => {
            if w == "canary" {
                "canary"
            } else {
                "eu"
            }
        }
    };
    for (release, next) in [
        ("2026.1", Some("2026.2")),
        ("2026.2", Some("2027.1")),
        ("2027.1", None),
    ] {
        for (before, after, soak) in [("canary", "eu", 3600), ("eu", "rest", 1800)] {
            let done = ring_done[&(ring_of(before), release.to_owned())];
            let started = seen_at[&(release.to_owned(), after.to_owned())].0;
            assert!(
                started >= done + Duration::from_secs(soak),
                "{release}: {after} started {}s after {before} completed",
                started.as_secs() as i64 - done.as_secs() as i64
            );
        }
        if let Some(next) = next {
            let done = ring_done[&("general", release.to_owned())];
            let started = seen_at[&(next.to_owned(), "canary".to_owned())].0;
            assert!(
                started >= done + Duration::from_secs(7200),
                "hop to {next} started {}s after the hop to {release} completed",
                started.as_secs() as i64 - done.as_secs() as i64
            );
        }
    }
    // Every commit judged and applied; the plan complete; `plan status`
    // agrees.
    for sha in git(rig.dir.path(), &["log", "--format=%H", "main"]).lines() {
        let note = rig.note(sha);
        assert!(note.contains("lockstep/sim: success"), "{sha}: {note}");
    }
    let text = plan_status(rig.dir.path());
    assert!(
        text.contains("lockstep/sim/plan/rings: success — complete: every wave at 2027.1"),
        "{text}"
    );
    assert!(text.contains("hop 3/3 (2026.2 → 2027.1)"), "{text}");
    assert!(
        text.contains("wave 3/3 rest (maxParallel 5, soak 2h): 10/10 committed at 2027.1"),
        "{text}"
    );
}

/// With `--since` at the fleet's commit, no accepted commit of the judged
/// history touched the 20 planes (no unit report for any): their releases
/// in that tree are taken as given (complete at 2025.2), so the
/// fast-forward starts and walks every plane to 2027.1. (Without a report,
/// only that release counts: `plan::schedule::complete_at`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_forward_starts_from_the_tree_since_takes_as_given() {
    let rig = Rig::at(&fast_forward_plan(), Vec::new(), "2025.2");
    let since = git(rig.dir.path(), &["rev-parse", "HEAD~1"]);
    let plan_commit = git(rig.dir.path(), &["rev-parse", "HEAD"]);
    let mut d = rig.daemon_since(Some(since));
    assert!(rig.drive(&mut d, |_| {}, |_| false).await);
    let mut per_plane: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (to, _, objs) in rig.hop_commits() {
        for o in objs {
            per_plane.entry(o).or_default().push(to.clone());
        }
    }
    assert_eq!(per_plane.len(), 20);
    for (plane, hops) in &per_plane {
        assert_eq!(hops, &["2026.1", "2026.2", "2027.1"], "{plane}");
    }
    let note = rig.note(&plan_commit);
    assert!(
        note.contains("lockstep/sim/plan/rings: success — complete: every wave at 2027.1"),
        "{note}"
    );
}

/// `lockstep plan status --repo DIR`'s output (it must succeed).
fn plan_status(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["plan", "status", "--repo"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_pause_and_hold() {
    // Soak: the first eu commit comes at least an hour (virtual) after the
    // canary completed.
    let rig = Rig::new(&plan(), Vec::new());
    let mut d = rig.daemon();
    let mut canary_done = None;
    let mut eu_started = None;
    let mem = rig.mem.clone();
    rig.drive(
        &mut d,
        |w| {
            let canaries_done = (0..2).all(|i| {
                w.planes
                    .values()
                    .any(|p| p.key.name == format!("c{i:02}") && p.release == "2026.2")
                    && w.objects
                        .values()
                        .filter(|o| {
                            o.key.namespace == format!("cloud-{i:02}")
                                && o.key.kind != lockstep::kind::Kind::Horizon
                        })
                        .all(|o| {
                            o.status.installed_release.as_deref() == Some("2026.2")
                                && o.status.upgrade_phase.is_none()
                        })
            });
            if canaries_done && canary_done.is_none() {
                canary_done = Some(w.now);
            }
        },
        |r| {
            if eu_started.is_none() && r.plan_commits().iter().any(|(w, _)| w == "eu") {
                eu_started = Some(mem.now());
            }
            eu_started.is_some()
        },
    )
    .await;
    let (done, started) = (canary_done.unwrap(), eu_started.unwrap());
    assert!(
        started >= done + Duration::from_secs(3600),
        "eu started {}s after the canary completed",
        started.as_secs() as i64 - done.as_secs() as i64
    );

    // Paused: nothing is written; the plan's status says so.
    let paused = plan().replacen("  to: \"2026.2\"", "  to: \"2026.2\"\n  paused: true", 1);
    let rig = Rig::new(&paused, Vec::new());
    let mut d = rig.daemon();
    assert!(rig.drive(&mut d, |_| {}, |_| false).await);
    assert!(rig.plan_commits().is_empty());
    let plan_commit = git(rig.dir.path(), &["log", "-1", "--format=%H", "main"]);
    assert!(
        rig.note(&plan_commit).contains("paused"),
        "{}",
        rig.note(&plan_commit)
    );

    // Hold: the first canary's Glance expand fails for good; repair forward
    // spends its budget, the plan holds and starts nothing more.
    let rig = Rig::new(
        &plan(),
        vec![Fault::JobFails {
            object: "c00-glance".into(),
            job: JobKind::Expand,
            tries: 1_000,
        }],
    );
    let mut d = rig.daemon();
    assert!(rig.drive(&mut d, |_| {}, |_| false).await);
    let commits = rig.plan_commits();
    assert_eq!(
        commits.len(),
        1,
        "only the first canary started: {commits:?}"
    );
    let plan_commit = git(
        rig.dir.path(),
        &["log", "--format=%H", "main", "--", "plans/rings.yaml"],
    );
    let note = rig.note(plan_commit.lines().next().unwrap());
    assert!(note.contains("plan/rings: failure — held"), "{note}");
}

#[test]
fn rehearse_plan_predicts_the_schedule_with_and_without_faults() {
    let dir = tempfile::tempdir().unwrap();
    fleet(dir.path(), &plan().replacen(
        "  waves:",
        "  windows:\n    - {start: \"0 22 * * *\", duration: 4h, timeZone: Europe/Berlin}\n  waves:",
        1,
    ));
    let head = git(dir.path(), &["rev-parse", "HEAD"]);
    let run = |faults: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockstep"));
        c.args([
            "rehearse",
            "--plan",
            "--start",
            "2026-12-01T12:00:00Z",
            "--repo",
        ])
        .arg(dir.path());
        for f in faults {
            c.args(["--fault", f]);
        }
        let out = c.output().unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    let (code, text) = run(&[]);
    assert_eq!(code, Some(0), "{text}");
    // Nothing starts before the window (22:00 Berlin = 21:00 UTC = +9h).
    assert!(text.contains("+0:00:00 plan rings: wave 1/3 (canary) waits for the maintenance window (opens 2026-12-01T21:00:00Z)"), "{text}");
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
    };
    assert!(at("+9:00:00 lockstep plan rings: wave canary (1/3)") < at("wave eu (2/3) to 2026.2"));
    assert!(at("wave eu (2/3) to 2026.2") < at("wave rest (3/3) to 2026.2"));
    assert!(at("previous wave soaking") < at("wave eu (2/3) to 2026.2"));
    assert!(
        text.contains("plan rings: complete: every wave at 2026.2"),
        "{text}"
    );
    assert!(
        text.contains("Glance cloud-05/c05-glance: Migrating"),
        "{text}"
    );
    // 2 canary commits, eu 8 by 3 (3), rest 10 by 5 (2) at least.
    let commits = text
        .lines()
        .filter(|l| l.contains("lockstep plan rings: wave"))
        .count();
    assert!(commits >= 7, "{commits} commits:\n{text}");
    // The repository itself is untouched: the rehearsal ran on a clone.
    assert_eq!(git(dir.path(), &["rev-parse", "HEAD"]), head);

    // With a permanent failure in the canary: held, exit 1.
    let (code, text) = run(&["c00-glance:expand:fail=1000"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("held in wave 1/3 (canary)"), "{text}");
    assert!(!text.contains("wave eu (2/3) to 2026.2"), "{text}");

    // A fault naming no object of the fleet injects nothing: refused.
    let (code, text) = run(&["c00-glanse:expand:fail=1000"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.is_empty(), "{text}");
}

/// `rehearse --plan` shows a fast-forward's whole chain: every hop's waves
/// in order, the soak between hops, every hop commit inside the window.
#[test]
fn rehearse_plan_shows_every_hop_of_a_fast_forward() {
    let dir = tempfile::tempdir().unwrap();
    fleet_at(
        dir.path(),
        &fast_forward_plan().replacen(
            "  waves:",
            "  windows:\n    - {start: \"0 20 * * *\", duration: 8h, timeZone: UTC}\n  waves:",
            1,
        ),
        "2025.2",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "rehearse",
            "--plan",
            "--start",
            "2026-12-01T12:00:00Z",
            "--repo",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
    };
    // Every hop, every wave, in order.
    let mut last = 0;
    for to in ["2026.1", "2026.2", "2027.1"] {
        for wave in ["canary (1/3)", "eu (2/3)", "rest (3/3)"] {
            let i = at(&format!("lockstep plan rings: wave {wave} to {to}: "));
            assert!(i > last, "{wave} to {to} out of order:\n{text}");
            last = i;
        }
    }
    assert!(
        text.contains("plan rings: hop 1/3 (2025.2 → 2026.1), wave 1/3 (canary) waits for the maintenance window"),
        "{text}"
    );
    assert!(
        at("hop 2/3 (2026.1 → 2026.2), wave 1/3 (canary) waits: previous hop soaking")
            < at("wave canary (1/3) to 2026.2")
    );
    assert!(
        at("hop 3/3 (2026.2 → 2027.1), wave 2/3 (eu) waits: previous wave soaking")
            < at("wave eu (2/3) to 2027.1")
    );
    assert!(
        text.contains("ControlPlane cloud-19/c19 2026.2 → 2027.1"),
        "{text}"
    );
    assert!(
        text.contains("plan rings: complete: every wave at 2027.1"),
        "{text}"
    );
    // Every hop commit inside the window (20:00-04:00 UTC; +8h is 20:00).
    for l in text
        .lines()
        .filter(|l| l.contains("lockstep plan rings: wave"))
    {
        let clock = l.trim().split(' ').next().unwrap().trim_start_matches('+');
        let hours: u64 = clock.split(':').next().unwrap().parse().unwrap();
        let of_day = (12 + hours) % 24;
        assert!(!(4..20).contains(&of_day), "outside the window: {l}");
    }
}

/// `lockstep plan status`, the command: each wave's progress at a revision,
/// and the `mode: propose` branches the repository knows. The proposal
/// branch here is made by hand (the shape `mode: propose` pushes, tested
/// against the hosts in `plan_propose.rs`) and reaches a clone the way it
/// reaches an operator's checkout: as a remote-tracking branch.
#[test]
fn plan_status_shows_waves_and_proposal_branches() {
    let origin = tempfile::tempdir().unwrap();
    fleet(origin.path(), &plan());
    let text = plan_status(origin.path());
    assert!(
        text.contains("plan rings (plans/rings.yaml:1) to 2026.2"),
        "{text}"
    );
    assert!(
        text.contains("wave 1/3 canary (maxParallel 1, soak 1h): 0/2 committed at 2026.2"),
        "{text}"
    );
    assert!(
        text.contains("wave 3/3 rest (maxParallel 5, soak 0s): 0/10 committed"),
        "{text}"
    );
    assert!(!text.contains("proposed on"), "{text}");

    // The first canary's hop on the wave's proposal branch.
    let branch = lockstep::plan::propose::branch("rings", 0);
    assert_eq!(branch, "lockstep/plan/rings/wave-1");
    git(origin.path(), &["switch", "-q", "-c", &branch]);
    let file = origin.path().join("clouds/c00.yaml");
    let bumped = std::fs::read_to_string(&file).unwrap().replace(
        "openStackRelease: \"2026.1\"",
        "openStackRelease: \"2026.2\"",
    );
    std::fs::write(&file, bumped).unwrap();
    git(
        origin.path(),
        &["commit", "-q", "-am", "rings: canary c00 to 2026.2"],
    );
    let tip = git(origin.path(), &["rev-parse", "--short=7", "HEAD"]);
    git(origin.path(), &["switch", "-q", "main"]);

    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &["clone", "-q", origin.path().to_str().unwrap(), "."],
    );
    let text = plan_status(work.path());
    assert!(
        text.contains(&format!(
            "proposed on origin/{branch} at {tip}, not in HEAD"
        )),
        "{text}"
    );
    assert!(text.contains("0/2 committed"), "{text}");
    assert_eq!(text.matches("proposed on").count(), 1, "{text}");

    // Merged (a merge commit, as the hosts make by default).
    git(
        work.path(),
        &[
            "merge",
            "-q",
            "--no-ff",
            "-m",
            "Merge wave 1",
            &format!("origin/{branch}"),
        ],
    );
    let text = plan_status(work.path());
    assert!(
        text.contains(&format!(
            "proposed on origin/{branch} at {tip}, merged into HEAD"
        )),
        "{text}"
    );
    assert!(text.contains("1/2 committed at 2026.2"), "{text}");
    assert!(
        text.contains("✓ ControlPlane cloud-00/c00 at 2026.2"),
        "{text}"
    );
}

/// Editing a fast-forward plan between its hops (a pause and a resume, as
/// the README suggests) restarts the count of hops but not the soak between
/// them: with hop 1 done by lockstep's own commits and the plan paused and
/// resumed after them, `rehearse --plan` still soaks the last wave's 6h
/// before hop 2 starts, as it does for the plan never edited.
#[test]
fn an_edit_between_hops_keeps_the_soak_before_the_next() {
    let plan = |to: &str, paused: bool| {
        format!(
            "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata:
  name: p
spec:
  to: \"{to}\"
  paused: {paused}
  waves:
    - name: canary
      select:
        - {{kind: ControlPlane, namespace: openstack-staging, name: staging}}
    - name: production
      select:
        - {{kind: ControlPlane, namespace: openstack, name: prod}}
        - {{kind: Nova, namespace: compute, name: nova}}
      soak: 6h
"
        )
    };
    // lockstep's own hop-1 commits, from a one-hop plan.
    let hop1 = tempfile::tempdir().unwrap();
    example_fleet(hop1.path());
    std::fs::write(hop1.path().join("plans/p.yaml"), plan("2026.2", false)).unwrap();
    git(hop1.path(), &["add", "-A"]);
    git(hop1.path(), &["commit", "-q", "-m", "plan to 2026.2"]);
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["run", "--cluster-mode", "sim", "--until-idle", "--repo"])
        .arg(hop1.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let patches = tempfile::tempdir().unwrap();
    git(
        hop1.path(),
        &[
            "format-patch",
            "-q",
            "-3",
            "-o",
            &patches.path().to_string_lossy(),
            "HEAD",
        ],
    );
    let mut files: Vec<_> = std::fs::read_dir(patches.path())
        .unwrap()
        .map(|e| e.unwrap().path().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "three hop commits");

    let rehearse = |dir: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .args([
                "rehearse",
                "--plan",
                "--start",
                "2027-01-04T08:00:00Z",
                "--repo",
            ])
            .arg(dir)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    for edited in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        example_fleet(dir.path());
        std::fs::write(dir.path().join("plans/p.yaml"), plan("2027.1", false)).unwrap();
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "-q", "-m", "plan to 2027.1"]);
        let mut am = vec!["am", "-q"];
        am.extend(files.iter().map(String::as_str));
        git(dir.path(), &am);
        if edited {
            for paused in [true, false] {
                std::fs::write(dir.path().join("plans/p.yaml"), plan("2027.1", paused)).unwrap();
                git(dir.path(), &["commit", "-q", "-am", "pause or resume"]);
            }
        }
        let text = rehearse(dir.path());
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("edited {edited}: no {needle:?} in\n{text}"))
        };
        assert!(
            at("waits: previous hop soaking until 2027-01-04T14:34:00Z")
                < at("+6:34:00 lockstep plan p: wave canary (1/2) to 2027.1"),
            "edited {edited}:\n{text}"
        );
    }
}

/// The soak between hops survives an edit of the plan after hop 1's
/// commit (a pause and a resume, which restart the count of hops) in a
/// plan of one wave: there the hop advances in the pass that sees its one
/// wave complete, so no wave of hop 1 is ever remembered complete. Hop 2
/// still waits the wave's 2h from when hop 1 completed. Before, it counted
/// as the plan's first hop and started at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_between_hops_of_a_one_wave_plan_keeps_the_soak() {
    let plan = r#"apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata:
  name: rings
spec:
  to: "2027.1"
  waves:
    - name: all
      select: [{kind: ControlPlane}]
      maxParallel: 20
      soak: 2h
"#;
    let rig = Rig::at(plan, Vec::new(), "2025.2");
    let mut d = rig.daemon();
    let hop1 = |r: &Rig| r.hop_commits().iter().any(|(to, _, _)| to == "2026.1");
    assert!(!rig.drive(&mut d, |_| {}, hop1).await, "hop 1 written");
    // lockstep commits to the branch, not to the work tree: bring it up,
    // then pause and resume the plan. The commit that last changed it has
    // every plane at 2026.1, so the count of hops starts there.
    git(rig.dir.path(), &["reset", "-q", "--hard", "main"]);
    let paused = plan.replacen("to: \"2027.1\"\n", "to: \"2027.1\"\n  paused: true\n", 1);
    assert_ne!(paused, plan);
    for (text, what) in [(paused.as_str(), "pause"), (plan, "resume")] {
        std::fs::write(rig.dir.path().join("plans/rings.yaml"), text).unwrap();
        git(rig.dir.path(), &["commit", "-q", "-am", what]);
    }
    let completed = std::cell::Cell::new(None);
    let watch = |w: &World| {
        let done = w.planes.len() == 20
            && w.objects
                .values()
                .filter(|o| o.key.kind != lockstep::kind::Kind::Horizon)
                .all(|o| {
                    o.status.installed_release.as_deref() == Some("2026.1")
                        && o.status.upgrade_phase.is_none()
                });
        if done && completed.get().is_none() {
            completed.set(Some(w.now));
        }
    };
    let started = std::cell::Cell::new(None);
    let stop = |r: &Rig| {
        let hop2 = r.hop_commits().iter().any(|(to, _, _)| to == "2026.2");
        if hop2 {
            started.set(Some(r.mem.now()));
        }
        hop2
    };
    assert!(!rig.drive(&mut d, watch, stop).await, "hop 2 started");
    let waited = started.get().expect("hop 2") - completed.get().expect("hop 1 completed");
    assert!(
        waited >= Duration::from_secs(7200),
        "hop 2 started {}s after hop 1 completed, within the wave's 2h soak",
        waited.as_secs()
    );
}

/// A wave's commit written in the last minute of its window is applied on a
/// later pass, when the window may have closed: the daemon checks the
/// plan's windows again before it applies a hop, so production (committed at
/// 00:15 in a window 00:00-00:16) starts the next night, not at 00:16.
#[test]
fn a_hop_committed_at_the_end_of_its_window_waits_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    example_fleet(dir.path());
    std::fs::write(
        dir.path().join("plans/p.yaml"),
        "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata: {name: p}
spec:
  to: \"2026.2\"
  waves:
    - name: canary
      select: [{kind: ControlPlane, namespace: openstack-staging, name: staging}]
    - name: production
      select: [{kind: ControlPlane, namespace: openstack, name: prod}]
  windows:
    - {start: \"0 0 * * *\", duration: 16m, timeZone: UTC}
",
    )
    .unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "plan"]);
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "rehearse",
            "--plan",
            "--start",
            "2027-01-04T00:00:00Z",
            "--repo",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
            .trim()
            .to_owned()
    };
    // Committed inside the window ...
    assert!(
        line("lockstep plan p: wave production (2/2) to 2026.2").starts_with("+0:15:00"),
        "{text}"
    );
    // ... applied when it opens again: the hop takes its 34 minutes from
    // 24:00, not from 00:16.
    let done = line("ControlPlane openstack/prod 2026.1 → 2026.2");
    let clock = done.split(' ').next().unwrap().trim_start_matches('+');
    let hours: u64 = clock.split(':').next().unwrap().parse().unwrap();
    assert!(
        hours >= 24,
        "applied before the next window: {done}\n{text}"
    );
}

/// A plan's gates hold the hops of the objects it selects when they are
/// applied, not only when the plan writes its commit: a hop committed by
/// hand (or a wave's pull request merged days later) while the gate fails
/// waits, saying which gate. Before, it was applied at once.
#[test]
fn a_plans_gate_holds_a_hop_at_the_apply() {
    let dir = tempfile::tempdir().unwrap();
    example_fleet(dir.path());
    let plan = "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata: {name: p}
spec:
  to: \"2026.2\"
  waves:
    - name: production
      select: [{kind: ControlPlane, namespace: openstack, name: prod}]
  gates:
    - object: {kind: Keystone, namespace: openstack, name: no-such-keystone}
      condition: Ready
";
    std::fs::write(dir.path().join("plans/p.yaml"), plan).unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "plan"]);
    let prod = dir.path().join("clusters/prod/controlplane.yaml");
    let text = std::fs::read_to_string(&prod).unwrap();
    assert!(text.contains("openStackRelease: \"2026.1\""), "{text}");
    std::fs::write(&prod, text.replace("\"2026.1\"", "\"2026.2\"")).unwrap();
    git(
        dir.path(),
        &["commit", "-q", "-am", "prod to 2026.2 by hand"],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["run", "--until-idle", "--log-format", "json", "--repo"])
        .arg(dir.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    // A bounded run ends: the hop waits on a person, not on time.
    assert_eq!(out.status.code(), Some(0), "{log}");
    let waits: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("hop waits on a plan's gate"))
        .collect();
    assert!(
        waits
            .iter()
            .any(|l| l.contains("waiting on a gate of plan p")
                && l.contains("no-such-keystone does not exist")),
        "{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("\"applied\"") && l.contains("openstack/prod")),
        "prod was applied past its plan's gate:\n{log}"
    );
}

/// A finished plan left in the tree governs the hops up to its release, not
/// the next plan's: prod, at 2026.2 where plan `a` (whose gate can never
/// hold) took it, goes to 2027.1 by hand under plan `b`, which has no gate.
/// Before, every plan selecting prod held every hop of it, so the next hop
/// waited on `a`'s gate (or on two plans' windows open at once) forever.
#[test]
fn a_finished_plan_does_not_hold_the_next_plans_hops() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("cp")
        .arg("-r")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet/."))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let prod = dir.path().join("clusters/prod/controlplane.yaml");
    let text = std::fs::read_to_string(&prod).unwrap();
    assert!(text.contains("openStackRelease: \"2026.1\""), "{text}");
    std::fs::write(&prod, text.replace("\"2026.1\"", "\"2026.2\"")).unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "fleet, prod at 2026.2"]);
    std::fs::create_dir_all(dir.path().join("plans")).unwrap();
    let plan = |name: &str, to: &str, gates: &str| {
        format!(
            "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata: {{name: {name}}}
spec:
  to: \"{to}\"
  waves:
    - name: production
      select: [{{kind: ControlPlane, namespace: openstack, name: prod}}]
{gates}"
        )
    };
    std::fs::write(
        dir.path().join("plans/a.yaml"),
        plan(
            "a",
            "2026.2",
            "  gates:
    - object: {kind: Keystone, namespace: openstack, name: no-such-keystone}
      condition: Ready
",
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("plans/b.yaml"), plan("b", "2027.1", "")).unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "plans a (done) and b"]);
    let text = std::fs::read_to_string(&prod).unwrap();
    std::fs::write(&prod, text.replace("\"2026.2\"", "\"2027.1\"")).unwrap();
    git(
        dir.path(),
        &["commit", "-q", "-am", "prod to 2027.1 by hand"],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["run", "--until-idle", "--log-format", "json", "--repo"])
        .arg(dir.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(
        !log.contains("waiting on a gate of plan a"),
        "a finished plan's gate held the next plan's hop:\n{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("\"applied\"")
            && l.contains("openstack/prod")
            && l.contains("2027.1")),
        "prod's hop to 2027.1 was not applied:\n{log}"
    );
}

/// `rehearse --plan` runs the branch's plans as the daemon does; the range
/// options of a plain rehearsal are refused with it rather than silently
/// ignored (a `--path` the daemon never reads would be rehearsed anyway),
/// and the plan options without it.
#[test]
fn rehearse_plan_refuses_the_options_it_would_ignore() {
    let dir = tempfile::tempdir().unwrap();
    example_fleet(dir.path());
    for extra in [
        &["--plan", "--path", "clusters/prod"][..],
        &["--plan", "--base", "HEAD~1"],
        &["--plan", "--head", "HEAD"],
        &["--start", "2027-01-04T00:00:00Z"],
        &["--branch", "main"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .arg("rehearse")
            .args(extra)
            .arg("--repo")
            .arg(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("--plan"), "{extra:?}: {err}");
    }
}

/// The example fleet (staging, prod, a standalone Nova at 2026.1) committed
/// in `dir`, with an empty `plans/`.
fn example_fleet(dir: &Path) {
    let out = Command::new("cp")
        .arg("-r")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet/."))
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "fleet at 2026.1"]);
    std::fs::create_dir_all(dir.join("plans")).unwrap();
}
