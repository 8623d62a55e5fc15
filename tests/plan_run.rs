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
    git(dir, &["init", "-q", "-b", "main"]);
    for i in 0..20 {
        let p = dir.join(format!("clouds/c{i:02}.yaml"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, ringed_plane(i)).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "20 clouds at 2026.1"]);
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
        let dir = tempfile::tempdir().unwrap();
        fleet(dir.path(), plan);
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
        let opts = Options {
            cluster_name: "sim".into(),
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

    /// Plan commits so far: (virtual minute seen, wave, objects).
    fn plan_commits(&self) -> Vec<(String, Vec<String>)> {
        let log = git(
            self.dir.path(),
            &[
                "log",
                "--reverse",
                "--format=%H%x09%(trailers:key=Lockstep-Wave,valueonly)%x09%b%x1e",
                "main",
            ],
        );
        log.split('\u{1e}')
            .filter_map(|rec| {
                let mut f = rec.trim().splitn(3, '\t');
                let _sha = f.next()?;
                let wave = f.next()?.trim().to_owned();
                let body = f.next().unwrap_or("");
                (!wave.is_empty()).then(|| {
                    let objs = body
                        .lines()
                        .filter(|l| l.contains("ControlPlane"))
                        .map(|l| l.trim().to_owned())
                        .collect();
                    (wave, objs)
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
