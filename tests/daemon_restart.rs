//! Restart safety: lockstep keeps no state that Git and the cluster cannot
//! rebuild. A scripted upgrade (the example fleet's history: a ControlPlane
//! hop with nine children, refused commits, a standalone Nova hop, and a
//! Nova expand Job that fails for good once and is repaired forward) is run
//! once undisturbed, then again and again with the daemon killed at a
//! different point each time: before or after a cluster call of its own
//! (mid-apply, mid-phase, mid-repair, mid-status). A fresh daemon (nothing
//! carried over but the repository and the cluster) finishes the job. Every
//! run must end exactly like the undisturbed one: no duplicate apply, no
//! lost status, no skipped hop, no extra repair.
//!
//! The cluster is the in-process simulated operator (the real C5C3
//! operators cannot run here); the repository and its notes are real Git.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{
    ApplyRequest, Cluster, ClusterError, ClusterObject, DeploymentInfo, EventInfo, JobInfo,
};
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::kind::Key;
use lockstep::metrics::Metrics;
use lockstep::repair::{RECORD_ANNOTATION, RepairPolicy, RepairRecord};
use lockstep::sim::{Fault, JobKind, Params, World};
use lockstep::source::{Origin, Source};
use tokio::sync::Notify;

/// The simulated cluster, counting lockstep's calls; armed, it "kills" the
/// daemon at call number `at`: the call hangs forever, before or after
/// reaching the cluster, and the test drops the daemon.
#[derive(Clone)]
struct Chaos {
    inner: MemoryCluster,
    calls: Arc<AtomicUsize>,
    applies: Arc<AtomicUsize>,
    deletes: Arc<AtomicUsize>,
    at: Arc<AtomicUsize>,
    after: Arc<AtomicBool>,
    killed: Arc<Notify>,
    /// Events are refused (no RBAC for them, say).
    events_fail: Arc<AtomicBool>,
}

impl Chaos {
    fn new(inner: MemoryCluster) -> Self {
        Self {
            inner,
            calls: Arc::default(),
            applies: Arc::default(),
            deletes: Arc::default(),
            at: Arc::new(AtomicUsize::new(usize::MAX)),
            after: Arc::default(),
            killed: Arc::new(Notify::new()),
            events_fail: Arc::default(),
        }
    }

    /// Whether this call is the fatal one, and when it dies.
    fn tick(&self) -> Option<bool> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        (n == self.at.load(Ordering::SeqCst)).then(|| self.after.load(Ordering::SeqCst))
    }

    async fn die(&self) -> ! {
        self.killed.notify_one();
        std::future::pending::<()>().await;
        unreachable!()
    }
}

macro_rules! call {
    ($self:ident, $body:expr) => {{
        match $self.tick() {
            None => $body,
            Some(false) => $self.die().await,
            Some(true) => {
                let _ = $body;
                $self.die().await
            }
        }
    }};
}

impl Cluster for Chaos {
    async fn load_record(&self, name: &str) -> Result<Option<String>, ClusterError> {
        call!(self, self.inner.load_record(name).await)
    }
    async fn applied_object(&self) -> Result<Option<Key>, ClusterError> {
        call!(self, self.inner.applied_object().await)
    }
    async fn save_record(
        &self,
        name: &str,
        text: &str,
        base: Option<&str>,
    ) -> Result<(), ClusterError> {
        call!(self, self.inner.save_record(name, text, base).await)
    }
    async fn get(&self, key: &Key) -> Result<Option<ClusterObject>, ClusterError> {
        call!(self, self.inner.get(key).await)
    }
    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        call!(self, {
            self.applies.fetch_add(1, Ordering::SeqCst);
            self.inner.apply(req).await
        })
    }
    async fn dry_run(&self, req: &ApplyRequest) -> Result<(), ClusterError> {
        call!(self, self.inner.dry_run(req).await)
    }
    async fn jobs(&self, key: &Key) -> Result<Vec<JobInfo>, ClusterError> {
        call!(self, self.inner.jobs(key).await)
    }
    async fn deployments(&self, key: &Key) -> Result<Vec<DeploymentInfo>, ClusterError> {
        call!(self, self.inner.deployments(key).await)
    }
    async fn events(&self, key: &Key) -> Result<Vec<EventInfo>, ClusterError> {
        call!(self, self.inner.events(key).await)
    }
    fn watch(&self) -> futures::stream::BoxStream<'static, Key> {
        self.inner.watch()
    }
    async fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<bool, ClusterError> {
        call!(self, {
            self.deletes.fetch_add(1, Ordering::SeqCst);
            self.inner.delete_job(namespace, name, uid).await
        })
    }
    async fn set_repair_record(&self, key: &Key, record: &str) -> Result<(), ClusterError> {
        call!(self, self.inner.set_repair_record(key, record).await)
    }
    async fn record_event(
        &self,
        key: &Key,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> Result<(), ClusterError> {
        if self.events_fail.load(Ordering::SeqCst) {
            return Err(ClusterError::Other("events are forbidden".into()));
        }
        call!(
            self,
            self.inner.record_event(key, reason, message, warning).await
        )
    }
}

fn world() -> World {
    let mut w = World::new(Params::default());
    w.faults.push(Fault::JobFails {
        object: "prod-nova".into(),
        job: JobKind::Expand,
        tries: 5,
    });
    w
}

fn daemon(repo: &Path, chaos: &Chaos, queue: &StatusQueue) -> Daemon<Chaos, Source> {
    daemon_with(repo, chaos, queue, "test", RepairPolicy::default())
}

fn daemon_named(
    repo: &Path,
    chaos: &Chaos,
    queue: &StatusQueue,
    cluster: &str,
) -> Daemon<Chaos, Source> {
    daemon_with(repo, chaos, queue, cluster, RepairPolicy::default())
}

fn daemon_with(
    repo: &Path,
    chaos: &Chaos,
    queue: &StatusQueue,
    cluster: &str,
    repair: RepairPolicy,
) -> Daemon<Chaos, Source> {
    daemon_counting(
        repo,
        chaos,
        queue,
        cluster,
        repair,
        Arc::new(Metrics::new()),
    )
}

fn daemon_counting(
    repo: &Path,
    chaos: &Chaos,
    queue: &StatusQueue,
    cluster: &str,
    repair: RepairPolicy,
    metrics: Arc<Metrics>,
) -> Daemon<Chaos, Source> {
    let source = Source::open(Origin::Local(repo.to_owned()), "main").unwrap();
    let opts = Options {
        cluster_name: cluster.into(),
        poll: Duration::from_millis(10),
        repair,
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(&chaos.inner, &source, &opts).unwrap();
    Daemon::new(opts, source, chaos.clone(), clock, queue.clone(), metrics)
}

/// What a finished run leaves behind.
#[derive(Debug, PartialEq)]
struct End {
    /// Per object: release, image, installed release, phase.
    objects: BTreeMap<String, String>,
    planes: BTreeMap<String, (String, i64)>,
    /// Per commit: its notes (every status, latest per context).
    notes: BTreeMap<String, String>,
}

fn end(repo: &Path, mem: &MemoryCluster) -> End {
    let w = mem.world().unwrap();
    let objects = w
        .objects
        .iter()
        .map(|(k, o)| {
            (
                k.to_string(),
                format!(
                    "{:?} {} installed={:?} phase={:?} gen={}",
                    o.release,
                    o.image.reference(),
                    o.status.installed_release,
                    o.status.upgrade_phase,
                    o.generation
                ),
            )
        })
        .collect();
    let planes = w
        .planes
        .iter()
        .map(|(k, p)| (k.to_string(), (p.release.clone(), p.generation)))
        .collect();
    let r = git2::Repository::open(repo).unwrap();
    let mut notes = BTreeMap::new();
    if let Ok(iter) = r.notes(Some("refs/notes/lockstep")) {
        for n in iter.flatten() {
            let (note, commit) = n;
            let text = r.find_blob(note).unwrap().content().to_vec();
            notes.insert(commit.to_string(), String::from_utf8(text).unwrap());
        }
    }
    End {
        objects,
        planes,
        notes,
    }
}

/// Drives passes (and the simulated operator) until nothing is left to do.
/// Returns false when the daemon was killed.
async fn drive(
    d: &mut Daemon<Chaos, Source>,
    chaos: &Chaos,
    forge: &AnyForge,
    queue: &StatusQueue,
) -> bool {
    let metrics = Metrics::new();
    for _ in 0..20_000 {
        let killed = chaos.killed.notified();
        tokio::pin!(killed);
        killed.as_mut().enable();
        let out = tokio::select! {
            out = d.pass() => out,
            _ = &mut killed => return false,
        };
        assert!(deliver_now(queue, forge, &metrics, &RetryPolicy::default()).await);
        let busy = chaos.inner.step(Duration::from_secs(60)).unwrap();
        if !out.busy && !busy {
            return true;
        }
    }
    panic!("the upgrade did not finish");
}

struct Run {
    end: End,
    applies: usize,
    deletes: usize,
    calls: usize,
}

async fn run(kill_at: Option<(usize, bool)>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let mem = MemoryCluster::new(world());
    let chaos = Chaos::new(mem.clone());
    if let Some((at, after)) = kill_at {
        chaos.at.store(at, Ordering::SeqCst);
        chaos.after.store(after, Ordering::SeqCst);
    }
    let forge = AnyForge::Notes(Notes::open(dir.path()).unwrap());
    let mut queue = StatusQueue::new(10_000);
    let mut d = daemon(dir.path(), &chaos, &queue);
    let finished = drive(&mut d, &chaos, &forge, &queue).await;
    assert_eq!(
        finished,
        kill_at.is_none(),
        "a kill point inside the run must kill the daemon"
    );
    if !finished {
        // Killed: everything in memory is gone, queued statuses included.
        drop(d);
        queue = StatusQueue::new(10_000);
        chaos.at.store(usize::MAX, Ordering::SeqCst);
        let mut d = daemon(dir.path(), &chaos, &queue);
        assert!(drive(&mut d, &chaos, &forge, &queue).await, "killed twice");
    }
    Run {
        end: end(dir.path(), &mem),
        applies: chaos.applies.load(Ordering::SeqCst),
        deletes: chaos.deletes.load(Ordering::SeqCst),
        calls: chaos.calls.load(Ordering::SeqCst),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_anywhere_it_resumes_without_duplicates_losses_or_skips() {
    let reference = run(None).await;
    // The undisturbed run did the story: the plane hop (9 children), the
    // Nova hop, one forward repair of prod-nova's expand.
    assert_eq!(
        reference.applies, 2,
        "one apply per hop: {:?}",
        reference.end
    );
    assert_eq!(reference.deletes, 1, "one forward repair");
    let prod = &reference.end.planes["ControlPlane openstack/prod"];
    assert_eq!(prod.0, "2026.2");
    let nova = &reference.end.objects["Nova compute/nova"];
    assert!(
        nova.contains("installed=Some(\"2026.2\")") && nova.contains("phase=None"),
        "{nova}"
    );
    let statuses: usize = reference
        .end
        .notes
        .values()
        .map(|n| n.lines().count())
        .sum();
    assert!(
        statuses >= 7 + 9,
        "every commit and every followed object: {:?}",
        reference.end.notes
    );
    assert!(
        reference.end.notes.values().all(|n| !n.contains("pending")),
        "a finished run leaves no pending status: {:?}",
        reference.end.notes
    );

    // Kill points spread over the whole run, each before and after a call.
    let points = 24;
    for i in 1..=points {
        let at = reference.calls * i / (points + 1) + 1;
        for after in [false, true] {
            let r = run(Some((at, after))).await;
            let when = format!(
                "killed at call {at} of {} ({})",
                reference.calls,
                if after {
                    "after it reached the cluster"
                } else {
                    "before"
                }
            );
            assert_eq!(r.end, reference.end, "{when}: a different end state");
            assert_eq!(
                r.applies, reference.applies,
                "{when}: duplicate or missing apply"
            );
            assert_eq!(
                r.deletes, reference.deletes,
                "{when}: extra or missing repair"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// An abort through Git, killed anywhere: the verdict the live state decided
// (the set-back accepted as an abort while the hop was wedged) is recorded
// in the cluster before it is posted, so a daemon started after the abort
// completed (when the same set-back would read as a downgrade) gives it
// again, and nothing moves.

mod common;

/// The abort story in phases: Glance 2026.1 → 2026.2 wedges on its expand
/// Job (standalone: reported, a person acts); the person sets release and
/// image back; later the hop is made again and goes through.
fn abort_phase(repo: &common::FleetRepo, phase: usize) {
    let glance = "standalone/image/glance.yaml";
    match phase {
        0 => {
            repo.write(glance, common::glance_digest("2026.1", 'a'));
            repo.commit("Glance at 2026.1");
            repo.write(glance, common::glance_digest("2026.2", 'b'));
            repo.commit("Glance to 2026.2");
        }
        1 => {
            repo.write(glance, common::glance_digest("2026.1", 'a'));
            repo.commit("Abort Glance 2026.2");
        }
        _ => {
            repo.write(glance, common::glance_digest("2026.2", 'b'));
            repo.commit("Glance to 2026.2, again");
        }
    }
}

const ABORT_PHASES: usize = 3;

fn glance_world() -> World {
    let mut w = World::new(Params::default());
    w.faults.push(Fault::JobFails {
        object: "glance".into(),
        job: JobKind::Expand,
        tries: 5,
    });
    w
}

async fn run_abort(kill_at: Option<(usize, bool)>) -> Run {
    let repo = common::FleetRepo::new();
    abort_phase(&repo, 0);
    let mem = MemoryCluster::new(glance_world());
    let chaos = Chaos::new(mem.clone());
    if let Some((at, after)) = kill_at {
        chaos.at.store(at, Ordering::SeqCst);
        chaos.after.store(after, Ordering::SeqCst);
    }
    let forge = AnyForge::Notes(Notes::open(repo.path()).unwrap());
    let mut queue = StatusQueue::new(10_000);
    let mut d = daemon(repo.path(), &chaos, &queue);
    let mut killed = false;
    for phase in 0..ABORT_PHASES {
        if phase > 0 {
            abort_phase(&repo, phase);
        }
        if !drive(&mut d, &chaos, &forge, &queue).await {
            // Killed: everything in memory is gone, queued statuses included.
            assert!(!killed, "killed twice");
            killed = true;
            drop(d);
            queue = StatusQueue::new(10_000);
            chaos.at.store(usize::MAX, Ordering::SeqCst);
            d = daemon(repo.path(), &chaos, &queue);
            assert!(drive(&mut d, &chaos, &forge, &queue).await, "killed twice");
        }
    }
    assert_eq!(
        killed,
        kill_at.is_some(),
        "a kill point inside the run kills"
    );
    // Commit ids differ between runs (commit times): notes are compared by
    // commit subject, with the short ids in their text named the same way.
    let mut e = end(repo.path(), &mem);
    let subjects: Vec<(String, String)> = repo
        .git(&["log", "--format=%H %s"])
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(h, s)| (h.to_owned(), s.to_owned()))
        .collect();
    e.notes = e
        .notes
        .into_iter()
        .map(|(sha, mut text)| {
            for (h, s) in &subjects {
                text = text.replace(&h[..10], &format!("<{s}>"));
            }
            let subject = subjects
                .iter()
                .find(|(h, _)| *h == sha)
                .map_or(sha, |(_, s)| s.clone());
            (subject, text)
        })
        .collect();
    Run {
        end: e,
        applies: chaos.applies.load(Ordering::SeqCst),
        deletes: chaos.deletes.load(Ordering::SeqCst),
        calls: chaos.calls.load(Ordering::SeqCst),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_through_git_survives_a_kill_anywhere() {
    let reference = run_abort(None).await;
    // The hop, the abort, the hop again: one apply each; no repair (a
    // standalone service's failed Job is a person's to retry).
    assert_eq!(reference.applies, 3, "{:?}", reference.end);
    assert_eq!(reference.deletes, 0);
    let glance = &reference.end.objects["Glance image/glance"];
    assert!(
        glance.contains("installed=Some(\"2026.2\")") && glance.contains("phase=None"),
        "{glance}"
    );
    let notes = reference
        .end
        .notes
        .values()
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        notes.contains("lockstep/test: success — aborted: glance 2026.2→2026.1"),
        "{notes}"
    );
    assert!(
        notes.contains("lockstep/test: failure — glance 2026.1→2026.2: aborted by "),
        "{notes}"
    );
    assert!(!notes.contains("pending"), "{notes}");
    assert!(!notes.contains("DowngradeNotSupported"), "{notes}");

    let points = 12;
    for i in 1..=points {
        let at = reference.calls * i / (points + 1) + 1;
        for after in [false, true] {
            let r = run_abort(Some((at, after))).await;
            let when = format!(
                "killed at call {at} of {} ({})",
                reference.calls,
                if after {
                    "after it reached the cluster"
                } else {
                    "before"
                }
            );
            assert_eq!(r.end, reference.end, "{when}: a different end state");
            assert_eq!(
                r.applies, reference.applies,
                "{when}: duplicate or missing apply"
            );
        }
    }
}

/// A record deleted (or left behind by a move to another namespace) is not
/// a first start: Glance carries lockstep's applied annotation, so the
/// daemon stops judging instead of judging the abort again from Git alone,
/// where it is a downgrade, and applying the aborted hop again. The backup
/// restored, it goes on as before; an empty record, written by a person,
/// is the way to say "judge from Git alone", and does just that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_record_stops_judging_until_a_person_restores_it() {
    let repo = common::FleetRepo::new();
    abort_phase(&repo, 0);
    let mem = MemoryCluster::new(glance_world());
    let chaos = Chaos::new(mem.clone());
    let forge = AnyForge::Notes(Notes::open(repo.path()).unwrap());
    let queue = StatusQueue::new(10_000);
    let mut d = daemon(repo.path(), &chaos, &queue);
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    abort_phase(&repo, 1);
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    drop(d);
    assert_eq!(
        chaos.applies.load(Ordering::SeqCst),
        2,
        "the hop and its abort"
    );
    let glance = || end(repo.path(), &mem).objects["Glance image/glance"].clone();
    let aborted = glance();
    assert!(aborted.contains("installed=Some(\"2026.1\")"), "{aborted}");

    let name = lockstep::daemon::record::name("test");
    let backup = mem
        .remove_record(&name)
        .expect("the daemon wrote its record");
    let mut d = daemon(repo.path(), &chaos, &queue);
    let out = d.pass().await;
    let error = out.source_error.unwrap_or_default();
    assert!(
        error.contains("record of live verdicts (record verdicts.test) is missing, but Glance image/glance carries lockstep.c5c3.io/applied")
            && error.contains("write an empty record"),
        "{error}"
    );
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert_eq!(chaos.applies.load(Ordering::SeqCst), 2, "nothing applied");
    assert_eq!(glance(), aborted);
    assert!(mem.remove_record(&name).is_none(), "no record written");

    // The backup restored: the abort stands.
    mem.save_record(&name, &backup, None).await.unwrap();
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert_eq!(chaos.applies.load(Ordering::SeqCst), 2, "the abort stands");
    assert_eq!(glance(), aborted);
    drop(d);

    // An empty record: Git alone, as documented. The abort is a downgrade
    // there, so Git's last accepted release, 2026.2, is applied again.
    mem.remove_record(&name);
    mem.save_record(&name, r#"{"version":1}"#, None)
        .await
        .unwrap();
    let mut d = daemon(repo.path(), &chaos, &queue);
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert_eq!(chaos.applies.load(Ordering::SeqCst), 3, "{}", glance());
}

/// One repository, two clusters: the hop wedged in one and finished in the
/// other. The set-back commit is an abort where the hop is wedged and a
/// downgrade where it finished, each under its own cluster's context; the
/// later hop is accepted on the first and changes nothing on the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_judge_one_commit_each_against_its_own_state() {
    let repo = common::FleetRepo::new();
    abort_phase(&repo, 0);
    let wedged = Chaos::new(MemoryCluster::new(glance_world()));
    let done = Chaos::new(MemoryCluster::new(World::new(Params::default())));
    let forge = AnyForge::Notes(Notes::open(repo.path()).unwrap());
    let (qa, qb) = (StatusQueue::new(1_000), StatusQueue::new(1_000));
    let mut a = daemon_named(repo.path(), &wedged, &qa, "east");
    let mut b = daemon_named(repo.path(), &done, &qb, "west");
    for phase in 0..2 {
        if phase > 0 {
            abort_phase(&repo, phase);
        }
        assert!(drive(&mut a, &wedged, &forge, &qa).await);
        assert!(drive(&mut b, &done, &forge, &qb).await);
    }
    let abort = repo.git(&["rev-parse", "HEAD"]);
    let hop = repo.git(&["rev-parse", "HEAD~1"]);
    let e = end(repo.path(), &wedged.inner);
    let on_abort = &e.notes[&abort];
    assert!(
        on_abort.contains("lockstep/east: success — aborted: glance 2026.2→2026.1"),
        "{on_abort}"
    );
    assert!(
        on_abort.contains(
            "lockstep/west: failure — refused: glance 2026.2→2026.1 is a downgrade (DowngradeNotSupported)"
        ),
        "{on_abort}"
    );
    let on_hop = &e.notes[&hop];
    assert!(
        on_hop.contains("lockstep/east: failure — glance 2026.1→2026.2: aborted by "),
        "{on_hop}"
    );
    assert!(
        on_hop.contains("lockstep/west: success — applied: glance 2026.1→2026.2 upgrade"),
        "{on_hop}"
    );
    // Each cluster where its own verdicts put it.
    assert!(e.objects["Glance image/glance"].contains("installed=Some(\"2026.1\") phase=None"));
    let w = end(repo.path(), &done.inner);
    assert!(w.objects["Glance image/glance"].contains("installed=Some(\"2026.2\") phase=None"));
}

/// A world where prod-nova's expand Job fails every time it runs.
fn failing_forever() -> World {
    let mut w = World::new(Params::default());
    w.faults.push(Fault::JobFails {
        object: "prod-nova".into(),
        job: JobKind::Expand,
        tries: u32::MAX,
    });
    w
}

fn prod_nova(mem: &MemoryCluster) -> Key {
    let w = mem.world().unwrap();
    w.objects
        .keys()
        .find(|k| k.name == "prod-nova")
        .cloned()
        .expect("prod-nova is in the world")
}

/// The repair budget lives on the object, in lockstep's repair record: a
/// daemon started after the budget was spent, with every Event gone (the
/// API server expires them, `--event-ttl`), re-runs nothing and reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_budget_survives_a_restart_and_expired_events() {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let mem = MemoryCluster::new(failing_forever());
    let chaos = Chaos::new(mem.clone());
    let forge = AnyForge::Notes(Notes::open(dir.path()).unwrap());
    let queue = StatusQueue::new(10_000);
    let policy = RepairPolicy {
        budget: 2,
        ..RepairPolicy::default()
    };
    let mut d = daemon_with(dir.path(), &chaos, &queue, "test", policy.clone());
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert_eq!(chaos.deletes.load(Ordering::SeqCst), 2, "the budget, spent");
    assert!(
        d.needs_person()
            .iter()
            .any(|n| n.reason.contains("budget is spent")),
        "{:?}",
        d.needs_person()
    );
    drop(d);
    let key = prod_nova(&mem);
    let record = mem
        .world()
        .unwrap()
        .annotation(&key, RECORD_ANNOTATION)
        .expect("the repair record");
    let r = RepairRecord::parse(&record).unwrap();
    assert_eq!((r.target.as_str(), r.attempts), ("2026.2", 2), "{record}");

    // Restarted with no Event left: the budget stays spent.
    mem.world().unwrap().events.clear();
    let mut d = daemon_with(dir.path(), &chaos, &queue, "test", policy);
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert_eq!(
        chaos.deletes.load(Ordering::SeqCst),
        2,
        "a restart refilled the budget"
    );
    assert!(
        d.needs_person()
            .iter()
            .any(|n| n.subject.contains("prod") && n.reason.contains("budget is spent")),
        "{:?}",
        d.needs_person()
    );
    assert_eq!(
        mem.world().unwrap().annotation(&key, RECORD_ANNOTATION),
        Some(record),
        "nothing more counted"
    );
}

/// A repair record that cannot be read spends the budget (fail closed):
/// nothing is re-run, and what a person reads says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_repair_record_spends_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let mem = MemoryCluster::new(failing_forever());
    let chaos = Chaos::new(mem.clone());
    let forge = AnyForge::Notes(Notes::open(dir.path()).unwrap());
    let queue = StatusQueue::new(10_000);
    let mut d = daemon(dir.path(), &chaos, &queue);
    let key = prod_nova(&mem);
    mem.world()
        .unwrap()
        .annotations
        .entry(key.clone())
        .or_default()
        .insert(RECORD_ANNOTATION.into(), "deleted (attempt 1)".into());
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert_eq!(chaos.deletes.load(Ordering::SeqCst), 0, "nothing re-run");
    assert!(
        d.needs_person()
            .iter()
            .any(|n| n.reason.contains("repair record cannot be read")),
        "{:?}",
        d.needs_person()
    );
    let w = mem.world().unwrap();
    assert!(
        w.events.iter().any(|e| e.key == key
            && e.reason == "RepairNeeded"
            && e.message.contains(RECORD_ANNOTATION)),
        "the report is an Event too"
    );
}

/// A status the operators would never write (an image reference of 5,000
/// bytes) is refused as `check --live` refuses it in a snapshot file: the
/// commit waits, nothing is applied, and the record of live verdicts, which
/// would keep such a string for every commit judged with it until its
/// ConfigMap overflowed, does not take it. A sane status again, and the
/// hop goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_no_operator_writes_is_never_judged_with_nor_recorded() {
    let repo = common::FleetRepo::new();
    abort_phase(&repo, 0);
    let mem = MemoryCluster::new(World::new(Params::default()));
    let chaos = Chaos::new(mem.clone());
    let forge = AnyForge::Notes(Notes::open(repo.path()).unwrap());
    let queue = StatusQueue::new(10_000);
    let mut d = daemon(repo.path(), &chaos, &queue);
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    let applied = chaos.applies.load(Ordering::SeqCst);
    let glance = Key::new(lockstep::kind::Kind::Glance, "image", "glance");
    let sane = {
        let mut w = mem.world().unwrap();
        let o = w.objects.get_mut(&glance).expect("Glance in the cluster");
        let sane = o.status.installed_image.clone();
        o.status.installed_image = Some(format!("registry.example/{}", "r".repeat(5_000)));
        sane
    };
    repo.write(
        "standalone/image/glance.yaml",
        common::glance_digest("2027.1", 'c'),
    );
    repo.commit("Glance to 2027.1");
    for _ in 0..3 {
        let out = d.pass().await;
        let error = out.source_error.unwrap_or_default();
        assert!(
            error.contains("Glance image/glance")
                && error.contains("status.installedImage is 5017 bytes, more than the 1024"),
            "{error}"
        );
    }
    assert_eq!(
        chaos.applies.load(Ordering::SeqCst),
        applied,
        "nothing applied"
    );
    let record = mem
        .load_record(&lockstep::daemon::record::name("test"))
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(!record.contains("rrrr"), "{record}");

    mem.world()
        .unwrap()
        .objects
        .get_mut(&glance)
        .unwrap()
        .status
        .installed_image = sane;
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert!(
        chaos.applies.load(Ordering::SeqCst) > applied,
        "the hop went on"
    );
    let w = mem.world().unwrap();
    assert_eq!(
        w.objects[&glance].status.installed_release.as_deref(),
        Some("2027.1")
    );
}

/// `lockstep_repairs_total` counts repairs made, not passes that asked for
/// one: as many `rerun-job` as Jobs deleted, one `report` per object
/// however many passes follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_metric_counts_what_was_done() {
    async fn counts(repo: &Path, world: World, events_fail: bool) -> (u64, u64, u64) {
        let mem = MemoryCluster::new(world);
        let chaos = Chaos::new(mem.clone());
        chaos.events_fail.store(events_fail, Ordering::SeqCst);
        let forge = AnyForge::Notes(Notes::open(repo).unwrap());
        let queue = StatusQueue::new(10_000);
        let metrics = Arc::new(Metrics::new());
        let mut d = daemon_counting(
            repo,
            &chaos,
            &queue,
            "test",
            RepairPolicy::default(),
            metrics.clone(),
        );
        assert!(drive(&mut d, &chaos, &forge, &queue).await);
        for _ in 0..20 {
            d.pass().await;
        }
        let text = metrics.encode();
        let count = |action: &str| -> u64 {
            text.lines()
                .filter(|l| {
                    l.starts_with("lockstep_repairs_total{")
                        && l.contains(&format!("action=\"{action}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        (
            count("rerun-job"),
            count("report"),
            chaos.deletes.load(Ordering::SeqCst) as u64,
        )
    }
    // The example fleet: prod-nova's expand repaired forward.
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let (reruns, _, deletes) = counts(dir.path(), world(), false).await;
    assert!(deletes > 0, "the test needs a repair");
    assert_eq!(reruns, deletes);
    // Events refused (a Role without them): the repair is made and counted
    // all the same, not taken for a failure after the Job was deleted.
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    assert_eq!(
        counts(dir.path(), world(), true).await,
        (reruns, 0, deletes)
    );
    // A standalone Glance whose expand keeps failing: reported once.
    let repo = common::FleetRepo::new();
    abort_phase(&repo, 0);
    let (reruns, reports, deletes) = counts(repo.path(), glance_world(), false).await;
    assert_eq!((reruns, reports, deletes), (0, 1, 0));
}

/// Two replicas share the lease: while this one followed a failing hop,
/// another led and repaired it until the budget was spent (its count on
/// the object). This one, leading again, reads the count on every pass:
/// it re-runs nothing more and never writes a lower count back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_count_another_leader_raised_is_taken_not_written_over() {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let mem = MemoryCluster::new(failing_forever());
    let chaos = Chaos::new(mem.clone());
    let forge = AnyForge::Notes(Notes::open(dir.path()).unwrap());
    let queue = StatusQueue::new(10_000);
    let policy = RepairPolicy {
        budget: 3,
        ..RepairPolicy::default()
    };
    let mut d = daemon_with(dir.path(), &chaos, &queue, "test", policy);
    let metrics = Metrics::new();
    for _ in 0..20_000 {
        if chaos.deletes.load(Ordering::SeqCst) == 1 {
            break;
        }
        d.pass().await;
        assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
        chaos.inner.step(Duration::from_secs(60)).unwrap();
    }
    assert_eq!(chaos.deletes.load(Ordering::SeqCst), 1, "one re-run");
    // The other replica's two re-runs, as it records them.
    let key = prod_nova(&mem);
    let theirs = RepairRecord {
        target: "2026.2".into(),
        attempts: 3,
        last: "2026-12-04T12:00:00Z".into(),
    }
    .to_json();
    mem.world()
        .unwrap()
        .annotations
        .entry(key.clone())
        .or_default()
        .insert(RECORD_ANNOTATION.into(), theirs.clone());
    assert!(drive(&mut d, &chaos, &forge, &queue).await);
    assert_eq!(
        chaos.deletes.load(Ordering::SeqCst),
        1,
        "re-ran past the budget another leader spent"
    );
    assert_eq!(
        mem.world().unwrap().annotation(&key, RECORD_ANNOTATION),
        Some(theirs),
        "the count went down"
    );
    assert!(
        d.needs_person()
            .iter()
            .any(|n| n.reason.contains("budget is spent")),
        "{:?}",
        d.needs_person()
    );
}
