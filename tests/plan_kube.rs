//! An UpgradePlan executed end to end against the real kube-apiserver (etcd
//! and the upstream CRDs, tests/peers/kube): `lockstep run --cluster-mode
//! kube` as users run it (the real binary, a child process), the simulated
//! C5C3 operator (`sim_kube::KubeOperator`) standing in for the real ones,
//! stepped by the test as in `run_kube.rs`, statuses as git notes.
//!
//! The fleet is `plan_run.rs`'s: 20 ControlPlanes (staging's four services
//! each) labelled `ring: canary|eu|general`, and a 3-wave plan over the
//! rings (maxParallel 1, 3, 5; soaks of seconds, since time is real here; no
//! window). The cluster starts empty, so the branch first points at the
//! fleet commit only, which the daemon installs; the branch is then
//! fast-forwarded to the plan's commit, and the daemon writes every wave's
//! hop commit itself (authored as `plans.authorName`/`authorEmail` from its
//! configuration file).
//!
//! Checked from the API server (a sampler lists the ControlPlanes, then their
//! children, every ~150 ms, independently of lockstep) and from Git:
//!
//! - the install of all 20 planes and their 80 children at 2026.1 comes
//!   before any plane's `spec.openStackRelease` moves;
//! - wave order: no plane of a wave is bumped in the cluster while a plane
//!   of an earlier wave is not complete (children settled at the target);
//! - maxParallel: at no sampled moment are more planes of a wave bumped but
//!   not complete than the wave allows (and the parallelism was used), and
//!   no hop commit bumps more; each wave's first commit starts as many as
//!   it may;
//! - the soaks: a wave's first bump comes at least its predecessor's soak
//!   after that predecessor was seen complete;
//! - Git: every commit after the plan's carries `Lockstep-Plan: rings` and
//!   its `Lockstep-Wave:`, the configured author, changes exactly the files
//!   of the planes it lists (the release line, nothing else), and each of
//!   the 20 planes is bumped in exactly one commit; every commit's note is
//!   `lockstep/kube: success` and the plan's commit says
//!   `lockstep/kube/plan/rings: success — complete: every wave at 2026.2`;
//! - at the end every plane is at 2026.2 with `metadata.generation` 2 (one
//!   apply of the hop) and every child settled at 2026.2, projected once more
//!   (generation 2).
//!
//! A second test runs a fast-forward over the same fleet from 2025.2 to
//! 2027.1 (three hops, the whole wave sequence per hop): every plane walks
//! every release one apply at a time, never two hops at once, no plane moves
//! on before every plane completed the release before. Its order is checked
//! on every write the API server made (watches, in etcd revision order),
//! not on samples, which read the planes and the children at two moments.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::kube::{CLUSTER, Daemon, Rounds, template, world};
use common::sim_kube::KubeOperator;
use common::{ApiServer, FleetRepo, ring, ringed_plane, rings_plan};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchEvent,
    WatchParams,
};
use lockstep::cluster::kube::KubeCluster;
use lockstep::kind::{Key, Kind, ReleaseSource, VERSION};
use serde_json::json;

const N: usize = 20;
const FROM: &str = "2026.1";
const TO: &str = "2026.2";
/// Staging's services: what each plane projects.
const SERVICES: [Kind; 4] = [Kind::Keystone, Kind::Glance, Kind::Placement, Kind::Horizon];

struct Wave {
    name: &'static str,
    ring: &'static str,
    max_parallel: usize,
    soak: Duration,
}

/// The plan's waves, as the assertions read them.
const WAVES: [Wave; 3] = [
    Wave {
        name: "canary",
        ring: "canary",
        max_parallel: 1,
        soak: Duration::from_secs(3),
    },
    Wave {
        name: "eu",
        ring: "eu",
        max_parallel: 3,
        soak: Duration::from_secs(2),
    },
    Wave {
        name: "rest",
        ring: "general",
        max_parallel: 5,
        soak: Duration::ZERO,
    },
];

fn wave_of(i: usize) -> usize {
    WAVES.iter().position(|w| w.ring == ring(i)).unwrap()
}

fn members(w: usize) -> Vec<usize> {
    (0..N).filter(|i| wave_of(*i) == w).collect()
}

fn plane(i: usize) -> Key {
    Key::new(
        Kind::ControlPlane,
        format!("cloud-{i:02}"),
        format!("c{i:02}"),
    )
}

/// Every object of a kind, in every namespace.
fn api_all(client: &Client, kind: Kind) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(kind.group(), VERSION, kind.as_str());
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, kind.plural()),
    )
}

/// `cNN` or `cNN-<svc>` in `cloud-NN`: N.
fn index(o: &DynamicObject) -> Option<usize> {
    let name = o.metadata.name.as_deref()?;
    let plane = name.split_once('-').map_or(name, |(p, _)| p);
    let i: usize = plane.strip_prefix('c')?.parse().ok()?;
    (i < N && o.metadata.namespace.as_deref() == Some(&format!("cloud-{i:02}"))).then_some(i)
}

/// The release a child has finished its hop to and is Ready at, from its
/// spec and the status the operator wrote: image tag (and release field)
/// at it, installed there (Horizon tracks none), no phase, no target, Ready
/// at the current generation.
fn settled_release(kind: Kind, o: &DynamicObject) -> Option<String> {
    let spec = &o.data["spec"];
    let status = &o.data["status"];
    let tag = spec["image"]["tag"].as_str()?;
    if kind.release_source() == ReleaseSource::Field
        && spec["openStackRelease"].as_str() != Some(tag)
    {
        return None;
    }
    if kind != Kind::Horizon && status["installedRelease"].as_str() != Some(tag) {
        return None;
    }
    if !status["upgradePhase"].is_null() || !status["targetRelease"].is_null() {
        return None;
    }
    let generation = o.metadata.generation?;
    let ready = status["conditions"].as_array()?.iter().any(|c| {
        c["type"] == "Ready"
            && c["status"] == "True"
            && c["observedGeneration"].as_i64() == Some(generation)
    });
    ready.then(|| tag.to_owned())
}

/// One plane as the API server had it.
#[derive(Clone, Debug, Default)]
struct PlaneState {
    /// `spec.openStackRelease`; `None` before it exists.
    spec: Option<String>,
    generation: i64,
    /// Each child: its generation and the release it is settled at.
    children: BTreeMap<Kind, (i64, Option<String>)>,
}

impl PlaneState {
    /// The plane at `release` and all four children settled there.
    fn complete_at(&self, release: &str) -> bool {
        self.spec.as_deref() == Some(release)
            && self.children.len() == SERVICES.len()
            && self
                .children
                .values()
                .all(|(_, r)| r.as_deref() == Some(release))
    }

    fn bumped(&self) -> bool {
        self.spec.as_deref() == Some(TO)
    }
}

/// The fleet as the API server had it: the ControlPlanes listed first, then
/// the children. Specs and completions only ever move forward, so a plane
/// seen bumped while another is seen incomplete (read later) was bumped
/// while the other was incomplete: a violation seen here is real.
struct Snapshot {
    /// When the ControlPlanes were asked for, and when they had answered.
    at: Instant,
    planes_read: Instant,
    planes: Vec<PlaneState>,
}

async fn snapshot(client: &Client) -> Result<Snapshot, kube::Error> {
    let at = Instant::now();
    let mut planes = vec![PlaneState::default(); N];
    let lp = ListParams::default();
    for o in api_all(client, Kind::ControlPlane).list(&lp).await? {
        if let Some(i) = index(&o) {
            planes[i].spec = o.data["spec"]["openStackRelease"]
                .as_str()
                .map(str::to_owned);
            planes[i].generation = o.metadata.generation.unwrap_or_default();
        }
    }
    let planes_read = Instant::now();
    for kind in SERVICES {
        for o in api_all(client, kind).list(&lp).await? {
            if let Some(i) = index(&o) {
                let generation = o.metadata.generation.unwrap_or_default();
                planes[i]
                    .children
                    .insert(kind, (generation, settled_release(kind, &o)));
            }
        }
    }
    Ok(Snapshot {
        at,
        planes_read,
        planes,
    })
}

/// Takes snapshots until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(Vec<Snapshot>, usize)>,
}

impl Sampler {
    fn start(client: Client) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let (mut samples, mut errors) = (Vec::new(), 0);
            while !flag.load(Ordering::Relaxed) {
                match snapshot(&client).await {
                    Ok(s) => samples.push(s),
                    Err(e) => {
                        errors += 1;
                        eprintln!("sampling failed: {e}");
                    }
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            (samples, errors)
        });
        Self { stop, task }
    }

    async fn finish(self) -> (Vec<Snapshot>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// One write to a plane or a child, as a watch delivered it: the object's
/// state after the write, at its `resourceVersion`.
#[derive(Clone, Debug)]
struct Write {
    /// The API server's single etcd numbers every write of every kind with
    /// one counter (its revision), which `resourceVersion` carries: sorted
    /// by it, the writes of all five watches are in the order they happened.
    revision: u64,
    plane: usize,
    /// `None` for the ControlPlane itself.
    child: Option<Kind>,
    generation: i64,
    /// A plane's `spec.openStackRelease`; a child's settled release.
    release: Option<String>,
}

fn revision(o: &DynamicObject) -> u64 {
    o.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion (etcd's revision)")
}

fn write_of(kind: Kind, o: &DynamicObject) -> Option<Write> {
    let plane = index(o)?;
    let (child, release) = if kind == Kind::ControlPlane {
        let r = o.data["spec"]["openStackRelease"]
            .as_str()
            .map(str::to_owned);
        (None, r)
    } else {
        (Some(kind), settled_release(kind, o))
    };
    Some(Write {
        revision: revision(o),
        plane,
        child,
        generation: o.metadata.generation.unwrap_or_default(),
        release,
    })
}

/// Every write to the planes and their children, from watches on the five
/// kinds opened before anything exists: unlike samples, nothing is missed
/// and nothing read at two moments is compared as if read at one.
struct Recorder {
    writes: Arc<std::sync::Mutex<Vec<Write>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    async fn start(client: &Client) -> Self {
        let writes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for kind in std::iter::once(Kind::ControlPlane).chain(SERVICES) {
            let api = api_all(client, kind);
            let list = api.list(&ListParams::default()).await.unwrap();
            let mut from = list.metadata.resource_version.unwrap_or_default();
            let out = writes.clone();
            tasks.push(tokio::spawn(async move {
                // A watch the server ends (its timeout) is opened again
                // from the last revision seen: no write is lost.
                loop {
                    let mut events = api
                        .watch(&WatchParams::default().timeout(120), &from)
                        .await
                        .unwrap()
                        .boxed();
                    while let Some(e) = events.try_next().await.unwrap() {
                        match e {
                            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                                from = revision(&o).to_string();
                                if let Some(w) = write_of(kind, &o) {
                                    out.lock().unwrap().push(w);
                                }
                            }
                            WatchEvent::Deleted(o) => panic!("{kind:?} deleted: {o:?}"),
                            WatchEvent::Bookmark(b) => from = b.metadata.resource_version,
                            WatchEvent::Error(e) => panic!("watching {kind:?}: {e:?}"),
                        }
                    }
                }
            }));
        }
        Self { writes, tasks }
    }

    /// Every write, in the order the API server made them, once the last
    /// write to every plane and child is in (as a list shows them now).
    async fn finish(self, client: &Client) -> Vec<Write> {
        let start = Instant::now();
        loop {
            let mut latest: BTreeMap<(usize, Option<Kind>), u64> = BTreeMap::new();
            for kind in std::iter::once(Kind::ControlPlane).chain(SERVICES) {
                for o in api_all(client, kind)
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                {
                    if let Some(w) = write_of(kind, &o) {
                        latest.insert((w.plane, w.child), w.revision);
                    }
                }
            }
            let caught_up = {
                let writes = self.writes.lock().unwrap();
                latest.iter().all(|(id, rev)| {
                    writes
                        .iter()
                        .any(|w| (w.plane, w.child) == *id && w.revision == *rev)
                })
            };
            if caught_up {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the watches delivered every write"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for t in &self.tasks {
            assert!(!t.is_finished(), "a watch failed");
            t.abort();
        }
        let mut writes = std::mem::take(&mut *self.writes.lock().unwrap());
        writes.sort_by_key(|w| w.revision);
        writes
    }
}

/// The simulated operator, stepped by the test.
struct Operator {
    client: Client,
    op: KubeOperator,
    adopted: Vec<bool>,
    /// Operator rounds run, and the time they took.
    rounds: Rounds,
}

impl Operator {
    /// The operator takes over the planes lockstep created, projecting
    /// their children.
    async fn adopt_new(&mut self) -> Result<(), String> {
        if self.adopted.iter().all(|a| *a) {
            return Ok(());
        }
        let planes = api_all(&self.client, Kind::ControlPlane)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        for o in planes {
            let Some(i) = index(&o) else { continue };
            if self.adopted[i] {
                continue;
            }
            let templates = SERVICES.iter().map(|k| (*k, template(*k))).collect();
            self.op
                .adopt_plane(&plane(i), templates)
                .await
                .map_err(|e| format!("adopting c{i:02}: {e}"))?;
            self.adopted[i] = true;
        }
        Ok(())
    }

    /// One round of the operator; errors are retried by the next round.
    async fn tick(&mut self) {
        let t = Instant::now();
        let adopted = self.adopt_new().await;
        self.rounds.run(&mut self.op, t, adopted).await;
    }

    /// Steps the operator until `done` holds.
    async fn drive(&mut self, what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
        let (start, before) = (Instant::now(), self.rounds);
        loop {
            if done().await {
                self.rounds.report(what, start, before);
                return;
            }
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
            self.tick().await;
        }
    }
}

fn git_opt(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A hop commit the daemon wrote, as Git has it.
#[derive(Debug)]
struct WaveCommit {
    sha: String,
    author: String,
    plan: String,
    wave: String,
    /// The release it moves its planes to (its subject's `to X`).
    to: String,
    /// The planes its message lists.
    listed: Vec<usize>,
    /// The files it changes.
    files: Vec<String>,
}

/// The fleet repository: 20 clouds at 2026.1, then the plan; the branch
/// starts at the first.
struct Fleet {
    repo: FleetRepo,
    fleet: String,
    plan: String,
}

impl Fleet {
    fn new() -> Self {
        Self::with(FROM, &rings_plan("3s", "2s"))
    }

    /// 20 clouds at `release`, then `plan`.
    fn with(release: &str, plan: &str) -> Self {
        let repo = FleetRepo::new();
        for i in 0..N {
            repo.write(
                &format!("clouds/c{i:02}.yaml"),
                ringed_plane(i).replace("\"2026.1\"", &format!("\"{release}\"")),
            );
        }
        let fleet = repo.commit(&format!("20 clouds at {release}"));
        repo.write("plans/rings.yaml", plan);
        let plan = repo.commit("plan: rings to 2026.2");
        repo.git(&["update-ref", "refs/heads/main", &fleet, &plan]);
        Self { repo, fleet, plan }
    }

    fn path(&self) -> &Path {
        self.repo.path()
    }

    fn head(&self) -> String {
        self.repo.git(&["rev-parse", "refs/heads/main"])
    }

    /// The fast-forward to the plan's commit (as a merge would).
    fn add_plan(&self) {
        self.repo
            .git(&["update-ref", "refs/heads/main", &self.plan, &self.fleet]);
    }

    /// `(state, description)` of a commit's note line for `context`.
    fn status(&self, sha: &str, context: &str) -> Option<(String, String)> {
        let note = git_opt(self.path(), &["notes", "--ref=lockstep", "show", sha])?;
        let prefix = format!("{context}: ");
        note.lines().find_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (state, desc) = rest.split_once(" — ").unwrap_or((rest, ""));
            Some((state.to_owned(), desc.to_owned()))
        })
    }

    fn verdict(&self, sha: &str) -> Option<(String, String)> {
        self.status(sha, &format!("lockstep/{CLUSTER}"))
    }

    fn plan_status(&self) -> Option<(String, String)> {
        self.status(&self.plan, &format!("lockstep/{CLUSTER}/plan/rings"))
    }

    /// Every commit of the branch, oldest first.
    fn all_commits(&self) -> Vec<String> {
        self.repo
            .git(&["rev-list", "--reverse", "refs/heads/main"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The commits after the plan's, oldest first.
    fn wave_commits(&self) -> Vec<WaveCommit> {
        let range = format!("{}..refs/heads/main", self.plan);
        let shas = self.repo.git(&["rev-list", "--reverse", &range]);
        shas.lines()
            .map(|sha| {
                let field = |f: &str| self.repo.git(&["log", "-1", &format!("--format={f}"), sha]);
                let listed = field("%b")
                    .lines()
                    .filter_map(|l| l.strip_prefix("- ControlPlane cloud-"))
                    .map(|l| l[..2].parse().unwrap())
                    .collect();
                let files = self
                    .repo
                    .git(&["diff-tree", "--no-commit-id", "--name-only", "-r", sha])
                    .lines()
                    .map(str::to_owned)
                    .collect();
                WaveCommit {
                    sha: sha.to_owned(),
                    author: field("%an <%ae>"),
                    plan: field("%(trailers:key=Lockstep-Plan,valueonly,separator=%x2C)"),
                    wave: field("%(trailers:key=Lockstep-Wave,valueonly,separator=%x2C)"),
                    to: field("%s").rsplit(" to ").next().unwrap_or("").to_owned(),
                    listed,
                    files,
                }
            })
            .collect()
    }

    fn show(&self, rev: &str, file: &str) -> String {
        self.repo.git(&["show", &format!("{rev}:{file}")])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_wave_plan_over_twenty_planes_against_the_api_server() {
    let t0 = Instant::now();
    let server = ApiServer::start();
    eprintln!("API server ready: {:.1}s", t0.elapsed().as_secs_f64());
    let fleet = Fleet::new();
    let logs = tempfile::tempdir().unwrap();
    let config = logs.path().join("lockstep.yaml");
    std::fs::write(
        &config,
        "plans:\n  authorName: Plan Robot\n  authorEmail: plans@example.invalid\n",
    )
    .unwrap();
    let client = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap()
        .client()
        .clone();
    let ns: Api<Namespace> = Api::all(client.clone());
    for i in 0..N {
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": format!("cloud-{i:02}")}}))
                .unwrap(),
        )
        .await
        .unwrap();
    }
    let sampler = Sampler::start(client.clone());
    let mut op = Operator {
        client: client.clone(),
        op: KubeOperator::new(client.clone(), world()),
        adopted: vec![false; N],
        rounds: Rounds::default(),
    };
    let mut daemon = Daemon::start(
        "lockstep",
        &server,
        fleet.path(),
        logs.path(),
        &["--config", config.to_str().unwrap()],
        &[],
    );

    // The fleet commit: 20 planes installed at 2026.1, children projected.
    op.drive(
        "20 planes installed at 2026.1",
        Duration::from_secs(60),
        async || {
            fleet
                .verdict(&fleet.fleet)
                .is_some_and(|(s, _)| s == "success")
                && snapshot(&client)
                    .await
                    .is_ok_and(|s| s.planes.iter().all(|p| p.complete_at(FROM)))
        },
    )
    .await;
    let s = snapshot(&client).await.unwrap();
    for (i, p) in s.planes.iter().enumerate() {
        assert_eq!(p.generation, 1, "c{i:02} created once");
        for (k, (g, _)) in &p.children {
            assert_eq!(*g, 1, "c{i:02}'s {k:?} projected once");
        }
    }
    assert_eq!(fleet.head(), fleet.fleet, "no plan, no commit written");

    // The plan arrives; the daemon runs it to the end.
    let t_plan = Instant::now();
    fleet.add_plan();
    op.drive(
        "the plan rolled out and reported",
        Duration::from_secs(150),
        async || {
            snapshot(&client)
                .await
                .is_ok_and(|s| s.planes.iter().all(|p| p.complete_at(TO)))
                && fleet.plan_status().is_some_and(|(s, _)| s == "success")
                && fleet
                    .all_commits()
                    .iter()
                    .all(|c| fleet.verdict(c).is_some_and(|(s, _)| s == "success"))
        },
    )
    .await;
    let rollout = t_plan.elapsed();
    let (samples, errors) = sampler.finish().await;
    assert!(daemon.alive(), "the daemon keeps running");
    assert_eq!(errors, 0, "every sample of the API server succeeded");

    // ---- From the API server, over the whole run.
    let max_gap = samples.windows(2).map(|w| w[1].at - w[0].at).max().unwrap();
    eprintln!(
        "{} samples, at most {:.0} ms apart",
        samples.len(),
        max_gap.as_secs_f64() * 1e3
    );
    // Each plane's spec only moves forward, one apply at a time.
    for i in 0..N {
        let mut seen: Vec<Option<&str>> = Vec::new();
        for s in &samples {
            let p = &s.planes[i];
            if seen.last() != Some(&p.spec.as_deref()) {
                seen.push(p.spec.as_deref());
            }
            assert!(p.generation <= 2, "c{i:02}: generation {}", p.generation);
        }
        assert!(
            [
                &[None, Some(FROM), Some(TO)][..],
                &[Some(FROM), Some(TO)][..],
            ]
            .contains(&seen.as_slice()),
            "c{i:02}: {seen:?}"
        );
    }
    // The install first.
    let installed = samples
        .iter()
        .position(|s| s.planes.iter().all(|p| p.complete_at(FROM)))
        .expect("the install was seen complete");
    let first_bump = samples
        .iter()
        .position(|s| s.planes.iter().any(PlaneState::bumped))
        .expect("a bump was seen");
    assert!(installed < first_bump, "{installed} < {first_bump}");
    // Wave order and maxParallel, at every sampled moment.
    let mut peak = [0usize; 3];
    for s in &samples {
        let t = (s.at - t0).as_secs_f64();
        for i in (0..N).filter(|i| s.planes[*i].bumped()) {
            for j in (0..N).filter(|j| wave_of(*j) < wave_of(i)) {
                assert!(
                    s.planes[j].complete_at(TO),
                    "+{t:.1}s: c{i:02} ({}) bumped while c{j:02} ({}) is not complete: {:?}",
                    WAVES[wave_of(i)].name,
                    WAVES[wave_of(j)].name,
                    s.planes[j]
                );
            }
        }
        for (w, wave) in WAVES.iter().enumerate() {
            let upgrading = members(w)
                .into_iter()
                .filter(|i| s.planes[*i].bumped() && !s.planes[*i].complete_at(TO))
                .count();
            assert!(
                upgrading <= wave.max_parallel,
                "+{t:.1}s: {upgrading} of {} upgrading",
                wave.name
            );
            peak[w] = peak[w].max(upgrading);
        }
    }
    for (w, wave) in WAVES.iter().enumerate() {
        let first = |f: &dyn Fn(&PlaneState) -> bool, i: usize| {
            samples
                .iter()
                .find(|s| f(&s.planes[i]))
                .map_or(f64::NAN, |s| {
                    s.at.saturating_duration_since(t_plan).as_secs_f64()
                })
        };
        let spans: Vec<String> = members(w)
            .into_iter()
            .map(|i| {
                format!(
                    "c{i:02} {:.1}→{:.1}",
                    first(&PlaneState::bumped, i),
                    first(&|p| p.complete_at(TO), i)
                )
            })
            .collect();
        eprintln!(
            "{} (bumped→complete, s after the plan): {}",
            wave.name,
            spans.join(", ")
        );
    }
    eprintln!("most planes upgrading at once per wave: {peak:?}");
    assert_eq!(peak[0], 1, "the canaries upgraded");
    assert!(peak[1] >= 2 && peak[2] >= 2, "in parallel: {peak:?}");
    // The soaks. A wave first seen complete in sample k completed after
    // sample k-1 began; the next wave first seen bumped in sample m was
    // bumped before m's ControlPlanes answered. So m's answer comes at
    // least the soak after k-1 began.
    for (w, wave) in WAVES.iter().enumerate().take(2) {
        let k = samples
            .iter()
            .position(|s| members(w).iter().all(|i| s.planes[*i].complete_at(TO)))
            .unwrap();
        let m = samples
            .iter()
            .position(|s| members(w + 1).iter().any(|i| s.planes[*i].bumped()))
            .unwrap();
        assert!(k >= 1 && m >= k, "{w}: {k} {m}");
        let bound = samples[m]
            .planes_read
            .saturating_duration_since(samples[k - 1].at);
        eprintln!(
            "{} complete → {} started: {:.1}s after it was seen complete, at most {:.1}s (soak {:?})",
            wave.name,
            WAVES[w + 1].name,
            samples[m]
                .at
                .saturating_duration_since(samples[k].at)
                .as_secs_f64(),
            bound.as_secs_f64(),
            wave.soak
        );
        assert!(
            bound >= wave.soak,
            "{}: the next wave started within {bound:?} of its completion (soak {:?})",
            wave.name,
            wave.soak
        );
    }
    // The end: every plane applied once more (the hop), every child
    // projected once more and settled at the target.
    let end = snapshot(&client).await.unwrap();
    for (i, p) in end.planes.iter().enumerate() {
        assert_eq!(p.spec.as_deref(), Some(TO), "c{i:02}");
        assert_eq!(p.generation, 2, "c{i:02}: one apply of the hop");
        assert!(p.complete_at(TO), "c{i:02}: {p:?}");
        for (k, (g, _)) in &p.children {
            assert_eq!(*g, 2, "c{i:02}'s {k:?}: projected once for the hop");
        }
    }

    // ---- From Git.
    let commits = fleet.wave_commits();
    let mut bumped: Vec<usize> = Vec::new();
    let mut last_wave = 0;
    for (n, c) in commits.iter().enumerate() {
        assert_eq!(c.plan, "rings", "{c:?}");
        let w = WAVES
            .iter()
            .position(|w| w.name == c.wave)
            .unwrap_or_else(|| panic!("no wave trailer: {c:?}"));
        assert!(w >= last_wave, "waves in order: {commits:#?}");
        assert_eq!(c.author, "Plan Robot <plans@example.invalid>");
        assert!(
            !c.listed.is_empty() && c.listed.len() <= WAVES[w].max_parallel,
            "{c:?}"
        );
        if n == 0 || w != last_wave {
            // A wave starts as many as it may at once.
            assert_eq!(
                c.listed.len(),
                WAVES[w].max_parallel.min(members(w).len()),
                "{c:?}"
            );
        }
        last_wave = w;
        let mut files: Vec<String> = c
            .listed
            .iter()
            .map(|i| format!("clouds/c{i:02}.yaml"))
            .collect();
        files.sort();
        assert_eq!(c.files, files, "{c:?}");
        for i in &c.listed {
            assert_eq!(wave_of(*i), w, "{c:?}");
            let file = format!("clouds/c{i:02}.yaml");
            // Release and image together: a plane's images follow its
            // release, so the release line is the whole change.
            assert_eq!(
                fleet.show(&c.sha, &file),
                fleet.show(&format!("{}^", c.sha), &file).replacen(
                    &format!("openStackRelease: \"{FROM}\""),
                    &format!("openStackRelease: \"{TO}\""),
                    1
                ),
                "{c:?}"
            );
        }
        bumped.extend(&c.listed);
    }
    assert_eq!(last_wave, 2, "every wave ran: {commits:#?}");
    bumped.sort();
    assert_eq!(bumped, (0..N).collect::<Vec<_>>(), "each plane once");
    // Every commit accepted and applied; the plan complete.
    let all = fleet.all_commits();
    assert_eq!(all.len(), 2 + commits.len());
    for sha in &all {
        let (state, desc) = fleet.verdict(sha).unwrap();
        assert_eq!(state, "success", "{sha}: {desc}");
    }
    assert_eq!(
        fleet.plan_status(),
        Some((
            "success".to_owned(),
            format!("complete: every wave at {TO}")
        ))
    );
    let troubles: BTreeMap<String, usize> = daemon
        .records()
        .iter()
        .filter(|r| r["level"] == "WARN" || r["level"] == "ERROR")
        .fold(BTreeMap::new(), |mut m, r| {
            let what = format!("{} {}", r["level"], r["fields"]["message"]);
            *m.entry(what).or_default() += 1;
            m
        });
    eprintln!("lockstep's warnings and errors: {troubles:?}");
    assert!(
        !troubles.keys().any(|k| k.starts_with("ERROR")),
        "{troubles:?}"
    );
    // lockstep's own log agrees: 20 installs, 20 hops, once each.
    let mut expected: Vec<(String, String)> = (0..N)
        .flat_map(|i| [FROM, TO].map(|r| (plane(i).to_string(), r.to_owned())))
        .collect();
    expected.sort();
    assert_eq!(daemon.applied_sorted(), expected);
    eprintln!(
        "{} hop commits; rollout {:.1}s; total {:.1}s",
        commits.len(),
        rollout.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The release before `r` in the fast-forward below.
fn before(r: &str) -> &str {
    match r {
        "2026.1" => "2025.2",
        "2026.2" => "2026.1",
        "2027.1" => "2026.2",
        other => other,
    }
}

/// A fast-forward against the API server: the same 20 planes at 2025.2,
/// the rings plan to 2027.1 (three hops, a soak after the last wave too).
/// Checked from every write the API server made to the planes and their
/// children, in the order it made them (watches, sorted by etcd's revision):
/// every plane's spec walks 2025.2 → 2026.1 → 2026.2 → 2027.1, one apply
/// per hop (generations 1 to 4); no child settles outside its plane's
/// release and the one before it (never two hops at once); at the write
/// that moves a plane on from a release, every plane is complete at that
/// release or has moved on too (the whole wave sequence per hop). From
/// samples, the soaks: between the waves of each hop and between hops.
/// From Git: each plane bumped in exactly three commits, in release order,
/// the waves in order within each hop; every commit accepted; the plan
/// complete at 2027.1.
///
/// Samples alone cannot check the order: a sample lists the planes, then
/// the children, and a plane moved on in between (its children already
/// projected for the next release) reads as a plane left incomplete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_forward_over_twenty_planes_against_the_api_server() {
    const START: &str = "2025.2";
    const HOPS: [&str; 3] = ["2026.1", "2026.2", "2027.1"];
    const END: &str = "2027.1";
    let t0 = Instant::now();
    let server = ApiServer::start();
    let plan = rings_plan("3s", "2s")
        .replacen("to: \"2026.2\"", "to: \"2027.1\"", 1)
        .replacen("maxParallel: 5\n", "maxParallel: 5\n      soak: 2s\n", 1);
    let fleet = Fleet::with(START, &plan);
    let logs = tempfile::tempdir().unwrap();
    let client = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap()
        .client()
        .clone();
    let ns: Api<Namespace> = Api::all(client.clone());
    for i in 0..N {
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": format!("cloud-{i:02}")}}))
                .unwrap(),
        )
        .await
        .unwrap();
    }
    let recorder = Recorder::start(&client).await;
    let sampler = Sampler::start(client.clone());
    let mut op = Operator {
        client: client.clone(),
        op: KubeOperator::new(client.clone(), world()),
        adopted: vec![false; N],
        rounds: Rounds::default(),
    };
    let mut daemon = Daemon::start("lockstep", &server, fleet.path(), logs.path(), &[], &[]);
    op.drive(
        "20 planes installed at 2025.2",
        Duration::from_secs(60),
        async || {
            fleet
                .verdict(&fleet.fleet)
                .is_some_and(|(s, _)| s == "success")
                && snapshot(&client)
                    .await
                    .is_ok_and(|s| s.planes.iter().all(|p| p.complete_at(START)))
        },
    )
    .await;
    let t_plan = Instant::now();
    fleet.add_plan();
    op.drive(
        "the fast-forward rolled out and reported",
        Duration::from_secs(480),
        async || {
            snapshot(&client)
                .await
                .is_ok_and(|s| s.planes.iter().all(|p| p.complete_at(END)))
                && fleet.plan_status().is_some_and(|(s, _)| s == "success")
                && fleet
                    .all_commits()
                    .iter()
                    .all(|c| fleet.verdict(c).is_some_and(|(s, _)| s == "success"))
        },
    )
    .await;
    let rollout = t_plan.elapsed();
    let writes = recorder.finish(&client).await;
    let (samples, errors) = sampler.finish().await;
    assert!(daemon.alive(), "the daemon keeps running");
    assert_eq!(errors, 0, "every sample of the API server succeeded");

    // ---- From the API server: every write, in order.
    let mut planes = vec![PlaneState::default(); N];
    // Per plane, the releases its spec took, with the generation at each.
    let mut walks: Vec<Vec<(String, i64)>> = vec![Vec::new(); N];
    for w in &writes {
        let Some(kind) = w.child else {
            let p = &planes[w.plane];
            let old = p.spec.clone();
            if w.release != old {
                let new = w.release.as_deref().unwrap_or_default();
                if let Some(old) = old.as_deref() {
                    assert_eq!(before(new), old, "c{:02}: {old} → {new}", w.plane);
                    // Lockstep over the fleet: at the write that moves a
                    // plane on from `old`, every plane (this one included)
                    // is at `old`, complete there, or already moved on too.
                    for (j, q) in planes.iter().enumerate() {
                        let at = q.spec.as_deref().unwrap_or_default();
                        assert!(
                            at >= old && (at != old || q.complete_at(old)),
                            "revision {}: c{:02} moved to {new} while c{j:02} is not complete at {old}: {q:?}",
                            w.revision,
                            w.plane
                        );
                    }
                }
                walks[w.plane].push((new.to_owned(), w.generation));
            }
            let p = &mut planes[w.plane];
            p.spec = w.release.clone();
            p.generation = w.generation;
            continue;
        };
        planes[w.plane]
            .children
            .insert(kind, (w.generation, w.release.clone()));
        // Never two hops at once: no child settles outside its plane's
        // release and the one before it.
        let p = &planes[w.plane];
        if let (Some(spec), Some(r)) = (p.spec.as_deref(), w.release.as_deref()) {
            assert!(
                r == spec || r == before(spec),
                "revision {}: c{:02}'s {kind:?} settled at {r} under {spec}",
                w.revision,
                w.plane
            );
        }
    }
    for (i, walk) in walks.iter().enumerate() {
        let want: Vec<(String, i64)> = std::iter::once(START)
            .chain(HOPS)
            .zip(1..)
            .map(|(r, g)| (r.to_owned(), g))
            .collect();
        assert_eq!(walk, &want, "c{i:02}: every release, one apply each");
    }
    eprintln!(
        "{} writes to planes and children watched, in revision order",
        writes.len()
    );
    // What a check on samples would have made of it: a plane read at a
    // release but not complete there while another was read past it, its
    // children already projected for the next release (a generation above
    // the plane's, read before it was bumped): the plane moved on between
    // the two lists. Never a violation (the writes above say so); counted.
    let straddled = samples
        .iter()
        .filter(|s| {
            s.planes.iter().any(|p| {
                let Some(spec) = p.spec.as_deref().filter(|r| *r != START) else {
                    return false;
                };
                s.planes.iter().any(|q| {
                    q.spec.as_deref() == Some(before(spec))
                        && !q.complete_at(before(spec))
                        && q.children.values().any(|(g, _)| *g > q.generation)
                })
            })
        })
        .count();
    eprintln!(
        "{straddled} of {} samples read a plane before its bump and its children after it",
        samples.len()
    );

    // The soaks, per hop: each wave's first bump at least its
    // predecessor's soak after the predecessor completed (the hop's first
    // wave: the previous hop's last wave, soak 2s). A wave first seen
    // complete in sample k completed after sample k-1 began; the next wave
    // first seen bumped in sample m was bumped before m's ControlPlanes
    // answered: m's answer comes at least the soak after k-1 began.
    let soaks = [WAVES[0].soak, WAVES[1].soak, Duration::from_secs(2)];
    for (h, to) in HOPS.iter().enumerate() {
        for (w, wave) in WAVES.iter().enumerate() {
            let (pw, release) = match (w, h) {
                (0, 0) => continue,
                (0, _) => (WAVES.len() - 1, HOPS[h - 1]),
                _ => (w - 1, *to),
            };
            let k = samples
                .iter()
                .position(|s| {
                    members(pw)
                        .iter()
                        .all(|i| s.planes[*i].complete_at(release))
                })
                .unwrap();
            let m = samples
                .iter()
                .position(|s| {
                    members(w)
                        .iter()
                        .any(|i| s.planes[*i].spec.as_deref().is_some_and(|r| r >= *to))
                })
                .unwrap();
            assert!(k >= 1 && m >= k, "{to} {}: {k} {m}", wave.name);
            let bound = samples[m]
                .planes_read
                .saturating_duration_since(samples[k - 1].at);
            eprintln!(
                "{to}: {} complete at {release} → {} started within {:.1}s (soak {:?})",
                WAVES[pw].name,
                wave.name,
                bound.as_secs_f64(),
                soaks[pw]
            );
            assert!(
                bound >= soaks[pw],
                "{to}: {} started within {bound:?} of {} completing (soak {:?})",
                wave.name,
                WAVES[pw].name,
                soaks[pw]
            );
        }
    }
    let end = snapshot(&client).await.unwrap();
    for (i, p) in end.planes.iter().enumerate() {
        assert!(p.complete_at(END), "c{i:02}: {p:?}");
        assert_eq!(p.generation, 4, "c{i:02}: one apply per hop");
    }

    // ---- From Git.
    let commits = fleet.wave_commits();
    let mut per_plane: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    let mut last = (0, 0);
    for c in &commits {
        assert_eq!(c.plan, "rings", "{c:?}");
        let hop = HOPS
            .iter()
            .position(|h| *h == c.to)
            .unwrap_or_else(|| panic!("{c:?}"));
        let w = WAVES.iter().position(|w| w.name == c.wave).unwrap();
        assert!(
            (hop, w) >= last,
            "hops, and waves within a hop, in order: {commits:#?}"
        );
        last = (hop, w);
        assert!(
            !c.listed.is_empty() && c.listed.len() <= WAVES[w].max_parallel,
            "{c:?}"
        );
        for i in &c.listed {
            assert_eq!(wave_of(*i), w, "{c:?}");
            per_plane.entry(*i).or_default().push(&c.to);
        }
    }
    assert_eq!(per_plane.len(), N);
    for (i, hops) in &per_plane {
        assert_eq!(hops, &HOPS, "c{i:02}");
    }
    for sha in fleet.all_commits() {
        let (state, desc) = fleet.verdict(&sha).unwrap();
        assert_eq!(state, "success", "{sha}: {desc}");
    }
    assert_eq!(
        fleet.plan_status(),
        Some((
            "success".to_owned(),
            format!("complete: every wave at {END}")
        ))
    );
    eprintln!(
        "{} hop commits; fast-forward {:.1}s; total {:.1}s",
        commits.len(),
        rollout.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
