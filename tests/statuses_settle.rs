//! Statuses settle (`docs/gate.md`, "After acceptance"): a fleet with
//! chained hops on a standalone Nova and the prod ControlPlane, run by the
//! real binary with `run --until-idle` against the simulated operator. Every
//! notes commit lockstep wrote is read back in order, so the test sees each
//! status as it was posted over time, not only the last one: an accepted
//! commit goes pending → success exactly once (never success first, never
//! back to pending), every per-object status of every hop ends success,
//! mid-chain included, and nothing is left pending.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::counted::Counted;
use common::{FleetRepo, lockstep, nova, prod};
use lockstep::cluster::Cluster;
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

const NOVA: &str = "standalone/compute/nova.yaml";
const PROD: &str = "clusters/prod/controlplane.yaml";

/// A daemon on `repo`'s main in `sim` mode (cluster name `t`) over
/// `cluster` (the simulated cluster `mem`, or a wrapper around it), its
/// statuses queued on `queue`. Called again, it is a restart: nothing of the
/// first daemon survives but Git and the cluster.
fn simulated<C: Cluster + Clone + 'static>(
    repo: &FleetRepo,
    mem: &MemoryCluster,
    cluster: C,
    queue: &StatusQueue,
) -> Daemon<C, Source> {
    simulated_since(repo, mem, cluster, queue, None)
}

/// [`simulated`], judging only the commits after `since` (`--since`).
fn simulated_since<C: Cluster + Clone + 'static>(
    repo: &FleetRepo,
    mem: &MemoryCluster,
    cluster: C,
    queue: &StatusQueue,
    since: Option<String>,
) -> Daemon<C, Source> {
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(10),
        since,
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(mem, &source, &opts).expect("seeded");
    Daemon::new(
        opts,
        source,
        cluster,
        clock,
        queue.clone(),
        Arc::new(Metrics::new()),
    )
}

/// Passes, each followed by delivery into `forge` and a minute of the
/// simulated operator, until neither has anything left to do.
async fn until_idle<C: Cluster + Clone + 'static>(
    d: &mut Daemon<C, Source>,
    mem: &MemoryCluster,
    queue: &StatusQueue,
    forge: &AnyForge,
) {
    let metrics = Metrics::new();
    for _ in 0..2_000 {
        let out = d.pass().await;
        assert!(deliver_now(queue, forge, &metrics, &RetryPolicy::default()).await);
        let busy = mem.step(Duration::from_secs(60)).expect("step");
        if !out.busy && !busy {
            return;
        }
    }
    panic!("never idle");
}

/// The prod plane at 2026.1, then its hop to 2026.2: the repository and
/// the hop's commit.
fn prod_hop() -> (FleetRepo, String) {
    let repo = FleetRepo::new();
    repo.write(PROD, prod("2026.1", "2026.1"));
    repo.commit("prod at 2026.1");
    repo.write(PROD, prod("2026.2", "2026.2"));
    let hop = repo.commit("prod to 2026.2");
    (repo, hop)
}

/// A status queue, and git notes in `repo` to deliver it into.
fn notes_of(repo: &FleetRepo) -> (StatusQueue, AnyForge) {
    (
        StatusQueue::new(10_000),
        AnyForge::Notes(Notes::open(repo.path()).expect("notes")),
    )
}

/// For every (commit, context): the states it had, in the order lockstep
/// wrote them (oldest notes commit first, repeats folded).
fn status_history(repo: &FleetRepo) -> BTreeMap<(String, String), Vec<String>> {
    let r = git2::Repository::open(repo.path()).expect("open");
    let mut walk = r.revwalk().expect("revwalk");
    walk.push_ref("refs/notes/lockstep").expect("notes ref");
    walk.simplify_first_parent().expect("first parent");
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)
        .expect("sorting");
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for id in walk {
        let notes_commit = r.find_commit(id.expect("id")).expect("notes commit");
        let tree = notes_commit.tree().expect("tree");
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() != Some(git2::ObjectType::Blob) {
                return git2::TreeWalkResult::Ok;
            }
            let annotated = format!("{dir}{}", entry.name().unwrap_or("")).replace('/', "");
            let blob = r.find_blob(entry.id()).expect("blob");
            for line in String::from_utf8_lossy(blob.content()).lines() {
                let Some((ctx, rest)) = line.split_once(": ") else {
                    continue;
                };
                let state = rest.split(" — ").next().unwrap_or("").to_owned();
                let h = out.entry((annotated.clone(), ctx.to_owned())).or_default();
                if h.last() != Some(&state) {
                    h.push(state);
                }
            }
            git2::TreeWalkResult::Ok
        })
        .expect("walk notes tree");
    }
    out
}

fn chained_fleet() -> (FleetRepo, Vec<String>, String) {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"))
        .write(PROD, prod("2026.1", "2026.1"));
    let install = repo.commit("fleet at 2026.1");
    let mut hops = Vec::new();
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    hops.push(repo.commit("nova to 2026.2"));
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    hops.push(repo.commit("nova to 2027.1"));
    repo.write(PROD, prod("2026.2", "2026.2"));
    hops.push(repo.commit("prod to 2026.2"));
    repo.write(PROD, prod("2027.1", "2027.1"));
    hops.push(repo.commit("prod to 2027.1"));
    (repo, hops, install)
}

/// What every run must end with: each hop commit and each of its followed
/// objects (nova's one, prod's eight children) success, nothing pending.
fn assert_settled(
    history: &BTreeMap<(String, String), Vec<String>>,
    hops: &[String],
    install: &str,
) {
    for sha in hops.iter().map(String::as_str).chain([install]) {
        let states = &history[&(sha.to_owned(), "lockstep/t".to_owned())];
        assert_eq!(
            states.last().map(String::as_str),
            Some("success"),
            "{sha}: {states:?}"
        );
    }
    let objects = |sha: &str| {
        history
            .keys()
            .filter(|(s, ctx)| s == sha && ctx.starts_with("lockstep/t/"))
            .count()
    };
    assert_eq!(
        hops.iter().map(|h| objects(h)).collect::<Vec<_>>(),
        vec![1, 1, 8, 8],
        "every hop's objects, mid-chain included: {history:#?}"
    );
    for ((sha, ctx), states) in history {
        assert_eq!(
            states.last().map(String::as_str),
            Some("success"),
            "{sha} {ctx} ended {states:?}"
        );
    }
}

#[test]
fn run_until_idle_leaves_every_hop_and_object_settled() {
    let (repo, hops, install) = chained_fleet();
    let out = lockstep(&[
        "run",
        "--repo",
        &repo.path().to_string_lossy(),
        "--until-idle",
        "--cluster-name",
        "t",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_settled(&status_history(&repo), &hops, &install);
}

/// The same fleet driven pass by pass, every status delivered after the
/// pass that made it (as the long-running daemon delivers), so the notes
/// history shows each commit's status as it moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_status_goes_pending_to_success_once() {
    let (repo, hops, install) = chained_fleet();
    let mem = MemoryCluster::new(World::new(Params::default()));
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let history = status_history(&repo);
    assert_settled(&history, &hops, &install);
    for sha in &hops {
        let states = &history[&(sha.clone(), "lockstep/t".to_owned())];
        assert_eq!(
            states.first().map(String::as_str),
            Some("pending"),
            "{sha}: success before it was applied: {states:?}"
        );
    }
    for ((sha, ctx), states) in &history {
        if let Some(first) = states.iter().position(|s| s == "success") {
            assert!(
                states[first..].iter().all(|s| s == "success"),
                "{sha} {ctx} went back from success: {states:?}"
            );
        }
    }
    // Chained hops really were in flight one after the other: the second
    // nova hop's status was seen pending while the first was followed.
    let second = &history[&(hops[1].clone(), "lockstep/t".to_owned())];
    assert!(second.len() >= 2, "{second:?}");
}

/// A patch landing after its release's hop completed is folded into that
/// hop's step and applied again; the hop's commit and its objects stay
/// success throughout (they read pending again before `rollout::settled`),
/// and the patch goes pending → success. Driven pass by pass as above, for
/// the standalone Nova and the prod ControlPlane (an override's tag), with
/// the daemon restarted while the patch rolls: a new daemon knows nothing
/// of what was posted and must say the same from Git and the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_after_a_completed_hop_leaves_the_hop_settled() {
    use lockstep::kind::{Key, Kind};

    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"))
        .write(PROD, prod("2026.1", "2026.1"));
    repo.commit("fleet at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"))
        .write(PROD, prod("2026.2", "2026.2"));
    let hop = repo.commit("nova and prod to 2026.2");

    let mem = MemoryCluster::new(World::new(Params::default()));
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    // The hop completed and its statuses settled: now the patch.
    let history = status_history(&repo);
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())]
            .last()
            .map(String::as_str),
        Some("success"),
        "{history:#?}"
    );
    repo.write(NOVA, nova("nova", "2026.2", "2026.2-p1"))
        .write(PROD, prod("2026.2", "2026.2-p1"));
    let patch = repo.commit("nova and prod's override patched on 2026.2");
    let metrics = Metrics::new();
    for _ in 0..3 {
        let out = d.pass().await;
        assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
        let busy = mem.step(Duration::from_secs(60)).expect("step");
        assert!(out.busy || busy, "the patch finished before the restart");
    }
    // Restarted mid-roll: nothing of the old daemon survives.
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let history = status_history(&repo);
    for ((sha, ctx), states) in &history {
        if let Some(first) = states.iter().position(|s| s == "success") {
            assert!(
                states[first..].iter().all(|s| s == "success"),
                "{sha} {ctx} went back from success: {states:?}"
            );
        }
        assert_eq!(
            states.last().map(String::as_str),
            Some("success"),
            "{sha} {ctx} ended {states:?}"
        );
    }
    let states = &history[&(patch.clone(), "lockstep/t".to_owned())];
    assert_eq!(
        states.first().map(String::as_str),
        Some("pending"),
        "the patch: success before it was applied: {states:?}"
    );
    // The patch really was applied: the cluster runs its images.
    let image = |kind, namespace, name| {
        let mem = mem.clone();
        async move {
            mem.get(&Key::new(kind, namespace, name))
                .await
                .expect("read")
                .and_then(|o| o.image)
                .map(|i| i.reference())
        }
    };
    assert_eq!(
        image(Kind::Nova, "compute", "nova").await.as_deref(),
        Some("ghcr.io/c5c3/nova:2026.2-p1")
    );
    let patched = mem
        .world()
        .expect("world")
        .objects
        .values()
        .filter(|o| o.image.reference().ends_with(":2026.2-p1"))
        .count();
    assert_eq!(patched, 2, "nova and prod's overridden service");
}

/// A commit that changes a document but neither its release nor its image
/// (a reconfiguration, `docs/gate.md`) is applied: once, whole, with the
/// digest of what was applied left on the object, pending until then and
/// success after; a restarted daemon finds that digest and applies nothing
/// again. The hop before it keeps its success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconfiguration_is_applied_once_and_settles() {
    use lockstep::kind::{Key, Kind};
    use lockstep::rollout::{APPLIED_ANNOTATION, Document};

    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"))
        .write(PROD, prod("2026.1", "2026.1"));
    repo.commit("fleet at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    let hop = repo.commit("nova to 2026.2");
    let reconfigured = nova("nova", "2026.2", "2026.2").replace(
        "keystoneEndpoint: http://keystone.identity.svc:5000/v3",
        "keystoneEndpoint: http://keystone-2.identity.svc:5000/v3",
    );
    assert_ne!(reconfigured, nova("nova", "2026.2", "2026.2"));

    let mem = MemoryCluster::new(World::new(Params::default()));
    let cluster = Counted::new(mem.clone());
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, cluster.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let before = cluster.applies_of("nova");
    assert!(before >= 1, "the hop was applied");

    repo.write(NOVA, &reconfigured);
    let change = repo.commit("nova: another keystone endpoint");
    until_idle(&mut d, &mem, &queue, &forge).await;
    assert_eq!(
        cluster.applies_of("nova"),
        before + 1,
        "the reconfiguration, applied once"
    );
    // The object carries the digest of the document applied: the commit's.
    let parsed = lockstep::manifest::parse_file_keeping(
        NOVA,
        reconfigured.as_bytes(),
        lockstep::manifest::DEFAULT_MAX_FILE_BYTES,
        true,
    );
    let text = match &parsed.documents[0].source {
        Some(Ok(t)) => t.clone(),
        other => panic!("{other:?}"),
    };
    let key = Key::new(Kind::Nova, "compute", "nova");
    assert_eq!(
        mem.world()
            .expect("world")
            .annotation(&key, APPLIED_ANNOTATION),
        Some(Document::from_text(text).digest())
    );

    // Restarted: the digest says the document runs; nothing is applied.
    let mut d = simulated(&repo, &mem, cluster.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    assert_eq!(
        cluster.applies_of("nova"),
        before + 1,
        "applied again after a restart"
    );

    let history = status_history(&repo);
    let states = &history[&(change.clone(), "lockstep/t".to_owned())];
    assert_eq!(
        states.iter().map(String::as_str).collect::<Vec<_>>(),
        vec!["pending", "success"],
        "{history:#?}"
    );
    for ((sha, ctx), states) in &history {
        if let Some(first) = states.iter().position(|s| s == "success") {
            assert!(
                states[first..].iter().all(|s| s == "success"),
                "{sha} {ctx} went back from success: {states:?}"
            );
        }
        assert_eq!(
            states.last().map(String::as_str),
            Some("success"),
            "{sha} {ctx} ended {states:?}"
        );
    }
    assert!(history.contains_key(&(hop, "lockstep/t".to_owned())));
}

/// A pull request judged while the hop it builds on is in flight is held
/// (pending, "held: … waits for the upgrade"), and judged again on every
/// pass until that hop completes: then its status turns to the verdict.
/// It stayed pending for ever when only a commit-level held verdict (which
/// the gate never gives) counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_pull_request_turns_once_the_hop_it_waits_for_completes() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;

    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    let metrics = Metrics::new();
    // The hop is applied and in flight; the request builds on it.
    d.pass().await;
    assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
    repo.git(&["checkout", "-q", "-b", "pr"]);
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    let pr = repo.commit("nova to 2027.1");
    repo.git(&["update-ref", "refs/pull/5/head", &pr]);
    repo.git(&["checkout", "-q", "main"]);
    d.pass().await;
    assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
    let history = status_history(&repo);
    let states = &history[&(pr.clone(), "lockstep/t/review".to_owned())];
    assert_eq!(states, &["pending"], "held while the hop is in flight");
    let note = repo.git(&["notes", "--ref", "lockstep", "show", &pr]);
    assert!(note.contains("held: nova"), "{note}");

    until_idle(&mut d, &mem, &queue, &forge).await;
    let history = status_history(&repo);
    let states = &history[&(pr.clone(), "lockstep/t/review".to_owned())];
    assert_eq!(states, &["pending", "success"], "{history:#?}");
    let note = repo.git(&["notes", "--ref", "lockstep", "show", &pr]);
    assert!(note.contains("accepted: nova 2026.2→2027.1"), "{note}");
}

/// With `--since`, the simulated cluster starts from that commit's tree
/// (what the range takes as given), so the first judged commit is applied
/// like any other before its status says so. It started from the first
/// judged commit's own tree: its hop was "applied" without an apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_seeds_the_simulation_with_the_state_it_takes_as_given() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let since = repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    let hop = repo.commit("nova to 2026.2");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let counted = Counted::new(mem.clone());
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated_since(&repo, &mem, counted.clone(), &queue, Some(since));
    until_idle(&mut d, &mem, &queue, &forge).await;
    assert_eq!(counted.applies_of("nova"), 1, "the hop was applied once");
    let history = status_history(&repo);
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())],
        ["pending", "success"],
        "{history:#?}"
    );
}

/// A simulated world that never settles (every pass moves virtual time on
/// and finds it busy again) still stops when asked: the loop that goes on
/// at once in virtual time never looked at the stop, and SIGTERM was
/// ignored for as long as the world was busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_that_never_settles_still_stops_when_asked() {
    struct Restless(Arc<dyn lockstep::daemon::Clock>);
    impl lockstep::daemon::Clock for Restless {
        fn now(&self) -> Duration {
            self.0.now()
        }
        fn wall(&self) -> jiff::Timestamp {
            self.0.wall()
        }
        fn between_passes(&self, _busy: bool) -> Option<bool> {
            Some(true)
        }
    }
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        until_idle: true,
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(&mem, &source, &opts).expect("seeded");
    let mut d = Daemon::new(
        opts,
        source,
        mem.clone(),
        Arc::new(Restless(clock)),
        StatusQueue::new(100),
        Arc::new(Metrics::new()),
    );
    let (_tx, triggers) = tokio::sync::mpsc::channel(1);
    let (_leader_tx, leader) = tokio::sync::watch::channel(true);
    let started = std::time::Instant::now();
    let stopped = tokio::time::timeout(
        Duration::from_secs(30),
        d.run(
            triggers,
            leader,
            tokio::time::sleep(Duration::from_millis(300)),
        ),
    )
    .await;
    assert!(stopped.is_ok(), "still running 30 s after the stop");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// A process that loses the lease drops the statuses it queued and has not
/// delivered: the new leader says what holds now, and a pending delivered
/// late by the old one could land on the new one's success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_drops_what_was_queued() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(50),
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(&mem, &source, &opts).expect("seeded");
    // No delivery task: what is queued stays queued.
    let queue = StatusQueue::new(100);
    let mut d = Daemon::new(
        opts,
        source,
        mem.clone(),
        clock,
        queue.clone(),
        Arc::new(Metrics::new()),
    );
    let (_tx, triggers) = tokio::sync::mpsc::channel(1);
    let (leader_tx, leader) = tokio::sync::watch::channel(true);
    let q = queue.clone();
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = queued.clone();
    let lose = async move {
        let t = std::time::Instant::now();
        while q.len().await == 0 && t.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen.store(q.len().await, std::sync::atomic::Ordering::SeqCst);
        let _ = leader_tx.send(false);
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(leader_tx);
    };
    tokio::time::timeout(Duration::from_secs(30), d.run(triggers, leader, lose))
        .await
        .expect("stopped");
    assert!(
        queued.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "statuses were queued as leader"
    );
    assert_eq!(queue.len().await, 0, "dropped with the lease");
}

/// The simulated cluster, where applying a ControlPlane leaves its Horizon
/// child on the image it had while `hold` is set: the plane has not
/// projected the hop onto it yet (the simulated operator projects at once;
/// a real plane does so on its next reconcile, or later behind its gates).
#[derive(Clone)]
struct Unprojected {
    inner: MemoryCluster,
    hold: Arc<std::sync::atomic::AtomicBool>,
}

impl Cluster for Unprojected {
    crate::forward_cluster!(all_but apply);
    async fn apply(
        &self,
        req: &lockstep::cluster::ApplyRequest,
    ) -> Result<lockstep::cluster::ClusterObject, lockstep::cluster::ClusterError> {
        let before: Vec<_> = self
            .inner
            .world()?
            .objects
            .values()
            .filter(|o| o.key.kind == lockstep::kind::Kind::Horizon)
            .map(|o| (o.key.clone(), o.image.clone()))
            .collect();
        let out = self.inner.apply(req).await?;
        if self.hold.load(std::sync::atomic::Ordering::SeqCst) {
            let mut w = self.inner.world()?;
            for (k, image) in before {
                if let Some(o) = w.objects.get_mut(&k) {
                    o.image = image;
                }
            }
        }
        Ok(out)
    }
}

/// A ControlPlane hop whose Horizon child the plane has not projected yet:
/// Horizon tracks no release, and it stays Ready on its old image. Its
/// status for the hop must not read success (nor the hop's) until the
/// child runs the hop's image; once the plane projects it, both settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_the_plane_has_not_projected_yet_is_not_complete() {
    let (repo, hop) = prod_hop();

    let mem = MemoryCluster::new(World::new(Params::default()));
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let cluster = Unprojected {
        inner: mem.clone(),
        hold: hold.clone(),
    };
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, cluster, &queue);
    let metrics = Metrics::new();
    let horizon_ctx = |history: &BTreeMap<(String, String), Vec<String>>| {
        history
            .iter()
            .find(|((sha, ctx), _)| *sha == hop && ctx.contains("horizon"))
            .map(|(_, states)| states.clone())
            .unwrap_or_default()
    };
    // Ten minutes: the other children are under way, Horizon is Ready on
    // its old image from the first pass on.
    for _ in 0..10 {
        d.pass().await;
        assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
        mem.step(Duration::from_secs(60)).expect("step");
    }
    let history = status_history(&repo);
    let states = horizon_ctx(&history);
    assert_eq!(states, ["pending"], "{history:#?}");
    // The plane projects the hop onto it at last (its own reconcile: no
    // apply of lockstep's): the child and the hop settle.
    hold.store(false, std::sync::atomic::Ordering::SeqCst);
    for o in mem.world().expect("world").objects.values_mut() {
        if o.key.kind == lockstep::kind::Kind::Horizon {
            o.image = lockstep::release::ImageRef::default_for("horizon", "2026.2");
        }
    }
    until_idle(&mut d, &mem, &queue, &forge).await;
    let history = status_history(&repo);
    assert_eq!(
        horizon_ctx(&history),
        ["pending", "success"],
        "{history:#?}"
    );
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())],
        ["pending", "success"],
        "{history:#?}"
    );
}

/// Sets the prod plane's Horizon child on the hop's image, as the plane's
/// own reconcile does once its gate lets it (no apply of lockstep's).
fn project_horizon(mem: &MemoryCluster, hold: &std::sync::atomic::AtomicBool) {
    hold.store(false, std::sync::atomic::Ordering::SeqCst);
    for o in mem.world().expect("world").objects.values_mut() {
        if o.key.kind == lockstep::kind::Kind::Horizon {
            o.image = lockstep::release::ImageRef::default_for("horizon", "2026.2");
        }
    }
}

/// The states of the hop's commit for the Horizon child's context.
fn horizon_states(history: &BTreeMap<(String, String), Vec<String>>, hop: &str) -> Vec<String> {
    history
        .iter()
        .find(|((sha, ctx), _)| sha == hop && ctx.contains("horizon"))
        .map(|(_, states)| states.clone())
        .unwrap_or_default()
}

/// A Horizon its plane does not project for an hour (its Keystone
/// finishes the hop in about a quarter of it) stalls (the `other` deadline, twenty
/// minutes). A person is told, in the same words every pass (not a new
/// message, and a new status, each minute), and the statuses stay pending:
/// the stall may end by itself, and a failure posted now would turn
/// success later. Once projected, the object and the hop go success, and
/// nothing on the way read failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_that_ends_by_itself_is_told_and_settles_once() {
    let (repo, hop) = prod_hop();

    let mem = MemoryCluster::new(World::new(Params::default()));
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let cluster = Unprojected {
        inner: mem.clone(),
        hold: hold.clone(),
    };
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, cluster, &queue);
    let metrics = Metrics::new();
    let mut told = Vec::new();
    for _ in 0..60 {
        d.pass().await;
        assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
        mem.step(Duration::from_secs(60)).expect("step");
        told.extend(
            d.needs_person()
                .into_iter()
                .map(|n| format!("{}: {}", n.subject, n.reason)),
        );
    }
    assert!(
        !told.is_empty()
            && told
                .iter()
                .all(|t| t.contains("horizon") && t.contains("stalled")),
        "{told:#?}"
    );
    told.dedup();
    assert_eq!(told.len(), 1, "the same words every pass: {told:#?}");
    let history = status_history(&repo);
    assert_eq!(horizon_states(&history, &hop), ["pending"], "{history:#?}");
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())],
        ["pending"],
        "{history:#?}"
    );

    project_horizon(&mem, &hold);
    until_idle(&mut d, &mem, &queue, &forge).await;
    assert!(d.needs_person().is_empty());
    let history = status_history(&repo);
    assert_eq!(horizon_states(&history, &hop), ["pending", "success"]);
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())],
        ["pending", "success"],
        "{history:#?}"
    );
    for ((sha, ctx), states) in &history {
        assert!(
            !states.iter().any(|s| s == "failure"),
            "{sha} {ctx}: {states:?}"
        );
    }
}

/// A plane projects nothing onto a child while its Keystone is not Ready
/// (`docs/operators.md` §4.4). With every migration taking 45 minutes, the
/// Keystone's hop outlasts the `other` deadline by far, and the Horizon
/// waits for it on its old image the whole time: that is the upgrade going
/// as it should, so nobody is told of a stall, and the hop settles once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_waiting_behind_its_keystone_is_not_stalled() {
    let (repo, hop) = prod_hop();

    let mem = MemoryCluster::new(World::new(Params {
        migrate: Duration::from_secs(45 * 60),
        ..Params::default()
    }));
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let cluster = Unprojected {
        inner: mem.clone(),
        hold: hold.clone(),
    };
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, cluster, &queue);
    let metrics = Metrics::new();
    let keystone_done = |mem: &MemoryCluster| {
        mem.world().expect("world").objects.values().any(|o| {
            o.key.kind == lockstep::kind::Kind::Keystone
                && o.status.installed_release.as_deref() == Some("2026.2")
                && o.status.phase().is_none()
        })
    };
    let mut minutes = 0;
    while !keystone_done(&mem) {
        minutes += 1;
        assert!(minutes < 300, "the Keystone never finished");
        d.pass().await;
        assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
        mem.step(Duration::from_secs(60)).expect("step");
        let told = d.needs_person();
        assert!(
            told.is_empty(),
            "minute {minutes}: {:?}",
            told.first().map(|n| &n.reason)
        );
    }
    assert!(minutes > 45, "the Keystone took {minutes} minutes");
    project_horizon(&mem, &hold);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let history = status_history(&repo);
    assert_eq!(horizon_states(&history, &hop), ["pending", "success"]);
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())],
        ["pending", "success"],
        "{history:#?}"
    );
}

/// The simulated cluster, whose reads fail while `down` is set: the API
/// server is down (`Unavailable`, retried) or refuses lockstep (`Other`,
/// RBAC gone: a person must act).
#[derive(Clone)]
struct Unreadable {
    inner: MemoryCluster,
    down: Arc<std::sync::Mutex<Option<bool>>>,
}

impl Cluster for Unreadable {
    crate::forward_cluster!(
        load_record,
        applied_object,
        save_record,
        apply,
        dry_run,
        jobs,
        deployments,
        events,
        watch,
        delete_job,
        set_repair_record,
        record_event
    );
    async fn get(
        &self,
        key: &lockstep::kind::Key,
    ) -> Result<Option<lockstep::cluster::ClusterObject>, lockstep::cluster::ClusterError> {
        let down = *self.down.lock().expect("lock");
        match down {
            Some(true) => Err(lockstep::cluster::ClusterError::Unavailable(
                "connection refused".into(),
            )),
            Some(false) => Err(lockstep::cluster::ClusterError::Other(
                "controlplanes is forbidden".into(),
            )),
            None => self.inner.get(key).await,
        }
    }
}

/// A daemon restarted while the API server cannot be read knows nothing of
/// where its units stand: it must say nothing of their commits rather than
/// turn the done ones failure or pending (they were success, and statuses
/// settle once). A person is told while the reads fail; once they answer,
/// nothing changes, because nothing did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_cannot_read_the_cluster_changes_no_status() {
    let (repo, hops, install) = chained_fleet();
    let mem = MemoryCluster::new(World::new(Params::default()));
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let settled = status_history(&repo);
    assert_settled(&settled, &hops, &install);

    let down = Arc::new(std::sync::Mutex::new(Some(true)));
    let cluster = Unreadable {
        inner: mem.clone(),
        down: down.clone(),
    };
    let mut d = simulated(&repo, &mem, cluster, &queue);
    let metrics = Metrics::new();
    for refused in [true, true, false, false] {
        *down.lock().expect("lock") = Some(refused);
        let out = d.pass().await;
        assert_eq!(out.busy, refused, "retried while unavailable only");
        assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
        assert_eq!(status_history(&repo), settled);
        let told = d.needs_person();
        assert!(
            told.len() == 2
                && told
                    .iter()
                    .all(|n| n.reason.contains("cannot be read from the cluster")),
            "{told:#?}"
        );
    }
    *down.lock().expect("lock") = None;
    until_idle(&mut d, &mem, &queue, &forge).await;
    assert!(d.needs_person().is_empty());
    assert_eq!(status_history(&repo), settled);
}

/// A projected Nova's migration Job fails for good; lockstep deletes it,
/// the operator runs it again, and it succeeds. A repair that worked is
/// no failure: the object's status and the hop's read pending ("repairing")
/// throughout, then success, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_lockstep_re_runs_is_never_posted_as_a_failure() {
    let (repo, hop) = prod_hop();

    let mut world = World::new(Params::default());
    world.faults.push(lockstep::sim::Fault::JobFails {
        object: "prod-nova".into(),
        job: lockstep::sim::JobKind::Migrate,
        tries: world.params.backoff_limit + 2,
    });
    let mem = MemoryCluster::new(world);
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let child = lockstep::kind::Key::new(lockstep::kind::Kind::Nova, "openstack", "prod-nova");
    let repaired = mem
        .world()
        .expect("world")
        .event_reasons(&child)
        .iter()
        .filter(|r| **r == "RepairJobDeleted")
        .count();
    assert_eq!(repaired, 1, "one re-run of the migration");
    let history = status_history(&repo);
    let nova = history
        .iter()
        .find(|((sha, ctx), _)| *sha == hop && ctx.ends_with("/prod-nova"))
        .map(|(_, s)| s.clone())
        .unwrap_or_default();
    assert_eq!(nova, ["pending", "success"], "{history:#?}");
    for ((sha, ctx), states) in &history {
        assert_eq!(
            states.last().map(String::as_str),
            Some("success"),
            "{sha} {ctx}: {states:?}"
        );
        assert!(
            !states.iter().any(|s| s == "failure"),
            "{sha} {ctx}: {states:?}"
        );
    }
}

/// The same for a plan's status: a plan whose unit no pass has read since
/// the restart says nothing (before, its `complete` turned `wave 1/1: 1
/// upgrading`, pending, until the API server answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_cannot_read_the_cluster_leaves_a_plans_status_alone() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(
        "plans/p.yaml",
        "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata: {name: p}
spec:
  to: \"2026.2\"
  waves:
    - name: only
      select: [{kind: Nova, namespace: compute, name: nova}]
",
    );
    repo.commit("plan nova to 2026.2");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let settled = status_history(&repo);
    let plan: Vec<_> = settled
        .iter()
        .filter(|((_, ctx), _)| ctx == "lockstep/t/plan/p")
        .map(|(_, s)| s.last().cloned().unwrap_or_default())
        .collect();
    assert_eq!(
        plan.last().map(String::as_str),
        Some("success"),
        "{settled:#?}"
    );

    let down = Arc::new(std::sync::Mutex::new(Some(true)));
    let cluster = Unreadable {
        inner: mem.clone(),
        down: down.clone(),
    };
    let mut d = simulated(&repo, &mem, cluster, &queue);
    let metrics = Metrics::new();
    for _ in 0..3 {
        d.pass().await;
        assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
        assert_eq!(status_history(&repo), settled);
    }
    *down.lock().expect("lock") = None;
    until_idle(&mut d, &mem, &queue, &forge).await;
    assert_eq!(status_history(&repo), settled);
}

/// A hop that stalls in its migration, moves on, and stalls again in its
/// contraction is told twice (each stall says where), and still settles
/// pending → success with no failure in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stall_of_the_same_hop_is_told_again() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    let hop = repo.commit("nova to 2026.2");
    let two_hours = Duration::from_secs(2 * 3600);
    let mem = MemoryCluster::new(World::new(Params {
        migrate: two_hours,
        contract: two_hours,
        ..Params::default()
    }));
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let key = lockstep::kind::Key::new(lockstep::kind::Kind::Nova, "compute", "nova");
    let told: Vec<String> = mem
        .world()
        .expect("world")
        .events
        .iter()
        .filter(|e| e.key == key && e.reason == "RepairNeeded")
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(told.len(), 2, "{told:#?}");
    assert!(
        told[0].contains("Migrating") && told[1].contains("Contracting"),
        "{told:#?}"
    );
    let history = status_history(&repo);
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())],
        ["pending", "success"],
        "{history:#?}"
    );
}

/// A plane's Keystone whose migration fails every try spends the repair
/// budget: a person is asked, the Keystone's status and the hop's say
/// failure, and the other children, which the plane holds behind the
/// Keystone gate, wait without a stall clock. Nothing moves any more, so a
/// bounded run ends (it looped for ever while the gated children counted
/// as moving).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keystone_that_fails_for_good_ends_a_bounded_run() {
    let (repo, hop) = prod_hop();
    let mut world = World::new(Params::default());
    world.faults.push(lockstep::sim::Fault::JobFails {
        object: "prod-keystone".into(),
        job: lockstep::sim::JobKind::Migrate,
        tries: 10_000,
    });
    let mem = MemoryCluster::new(world);
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let cluster = Unprojected {
        inner: mem.clone(),
        hold,
    };
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, cluster, &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;
    let told = d.needs_person();
    assert!(
        told.len() == 1
            && told[0].reason.contains("prod-keystone")
            && told[0].reason.contains("budget is spent"),
        "{told:#?}"
    );
    let history = status_history(&repo);
    assert_eq!(
        history[&(hop.clone(), "lockstep/t".to_owned())],
        ["pending", "failure"]
    );
    assert_eq!(
        history[&(hop.clone(), "lockstep/t/openstack/prod-keystone".to_owned())],
        ["pending", "failure"]
    );
    assert_eq!(horizon_states(&history, &hop), ["pending"], "{history:#?}");
}

/// A pull request's verdict goes under `lockstep/<cluster>/review`. Merged
/// by fast-forward, its head commit is the branch's own: the branch's
/// status on it starts pending and reads success only once the hop is
/// applied and complete. Under one context, the request's success stood
/// on the commit through the whole hop (a pending never goes over a
/// success), success before the apply.
#[tokio::test]
async fn a_fast_forwarded_pull_request_is_pending_on_the_branch_until_applied() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let (queue, forge) = notes_of(&repo);
    let mut d = simulated(&repo, &mem, mem.clone(), &queue);
    until_idle(&mut d, &mem, &queue, &forge).await;

    repo.git(&["checkout", "-q", "-b", "pr"]);
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    let pr = repo.commit("nova to 2026.2");
    repo.git(&["update-ref", "refs/pull/7/head", &pr]);
    repo.git(&["checkout", "-q", "main"]);
    let metrics = Metrics::new();
    d.pass().await;
    assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
    let history = status_history(&repo);
    assert_eq!(
        history.get(&(pr.clone(), "lockstep/t/review".to_owned())),
        Some(&vec!["success".to_owned()]),
        "{history:#?}"
    );
    assert!(!history.contains_key(&(pr.clone(), "lockstep/t".to_owned())));

    // Merged by fast-forward: the reviewed commit is the branch's head.
    repo.git(&["merge", "-q", "--ff-only", "pr"]);
    d.pass().await;
    assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
    let history = status_history(&repo);
    assert_eq!(
        history.get(&(pr.clone(), "lockstep/t".to_owned())),
        Some(&vec!["pending".to_owned()]),
        "the hop is applied and in flight: {history:#?}"
    );
    until_idle(&mut d, &mem, &queue, &forge).await;
    let history = status_history(&repo);
    assert_eq!(
        history.get(&(pr.clone(), "lockstep/t".to_owned())),
        Some(&vec!["pending".to_owned(), "success".to_owned()]),
        "{history:#?}"
    );
    let note = repo.git(&["notes", "--ref", "lockstep", "show", &pr]);
    assert!(
        note.contains("lockstep/t: success — applied: nova 2026.1→2026.2"),
        "{note}"
    );
    assert!(
        note.contains("lockstep/t/review: success — accepted: nova 2026.1→2026.2"),
        "{note}"
    );
}
