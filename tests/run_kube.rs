//! `lockstep run --cluster-mode kube` as users run it (the real binary, a
//! child process) against a real kube-apiserver with etcd and the upstream
//! CRDs (tests/peers/kube). The C5C3 operators cannot run here: the
//! simulated operator (`sim_kube::KubeOperator`) stands in for them, stepped
//! by the test, and talks to lockstep only through the API server (status
//! subresources, phase Jobs, Events, the children a ControlPlane projects).
//!
//! The repository is the demo's scripted history (`lockstep::demo`). The
//! cluster starts empty, so the branch first points at the first commit
//! only ("Fleet at 2026.1"), which the daemon installs; the branch is then
//! fast-forwarded to the rest of the story, which the daemon takes as hops
//! of a live fleet.
//!
//! - the story end to end: the prod ControlPlane hop (Nova's expand Job
//!   fails for good once and is repaired forward by lockstep), the
//!   standalone Nova hop, refused commits never applied, staging untouched,
//!   every verdict and completion as a git note;
//! - the API server killed and restarted mid-phase (etcd keeps running): the
//!   daemon survives and finishes the hop without applying it again;
//! - two replicas with leader election: only the Lease holder applies, a
//!   webhook sent to the follower reaches the leader, the leader is killed
//!   mid-phase and the follower takes over once the Lease expires, applying
//!   no hop twice and skipping none.

mod common;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::ApiServer;
use common::kube::{CLUSTER, Daemon, Rounds, template, world};
use common::sim_kube::KubeOperator;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use lockstep::cluster::kube::KubeCluster;
use lockstep::cluster::{Cluster, ClusterObject};
use lockstep::kind::{Key, Kind};
use lockstep::secret::Secret;
use lockstep::sim::{Fault, JobKind, World};
use serde_json::json;

// The story's commits (`lockstep::demo::SCRIPT` after the first).
const FLEET: usize = 0;
const PROD_HOP: usize = 1;
const NOVA_SKIP: usize = 2;
const NOVA_RELEASE_ONLY: usize = 3;
const NOVA_HOP: usize = 4;
const STAGING_DOWN: usize = 5;
const STAGING_REVERT: usize = 6;
/// Added by the leader-election test: Nova's next hop, 2026.2 → 2027.1.
const NOVA_NEXT: usize = 7;

fn prod() -> Key {
    Key::new(Kind::ControlPlane, "openstack", "prod")
}
fn staging() -> Key {
    Key::new(Kind::ControlPlane, "openstack-staging", "staging")
}
fn nova() -> Key {
    Key::new(Kind::Nova, "compute", "nova")
}
fn glance() -> Key {
    Key::new(Kind::Glance, "image", "glance")
}

const PROD_SERVICES: [&str; 8] = [
    "keystone",
    "horizon",
    "glance",
    "placement",
    "barbican",
    "neutron",
    "cinder",
    "nova",
];
const STAGING_SERVICES: [&str; 4] = ["keystone", "glance", "placement", "horizon"];

fn children(plane: &Key) -> Vec<Key> {
    let services: &[&str] = if plane.name == "prod" {
        &PROD_SERVICES
    } else {
        &STAGING_SERVICES
    };
    services
        .iter()
        .map(|s| {
            Key::new(
                Kind::from_service(s).unwrap(),
                plane.namespace.clone(),
                format!("{}-{s}", plane.name),
            )
        })
        .collect()
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Fleet Tester",
            "-c",
            "user.email=fleet@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The demo's repository, its branch rewound to the first commit.
struct Story {
    dir: tempfile::TempDir,
    shas: Vec<String>,
}

impl Story {
    fn new(nova_next: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        lockstep::demo::build_repository(dir.path()).unwrap();
        if nova_next {
            let file = dir.path().join("standalone/compute/nova.yaml");
            let text = std::fs::read_to_string(&file).unwrap();
            let next = text
                .replacen(
                    "openStackRelease: \"2026.2\"",
                    "openStackRelease: \"2027.1\"",
                    1,
                )
                .replacen("tag: \"2026.2\"", "tag: \"2027.1\"", 1);
            assert_ne!(text, next, "the demo's Nova ends at 2026.2");
            std::fs::write(&file, next).unwrap();
            git(dir.path(), &["commit", "-qam", "Nova to 2027.1"]).unwrap();
        }
        let shas: Vec<String> = git(dir.path(), &["rev-list", "--reverse", "main"])
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(shas.len(), 7 + usize::from(nova_next), "{shas:?}");
        let s = Self { dir, shas };
        s.advance(FLEET);
        s
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Moves the branch to commit `i` (a fast-forward, as a merge would).
    fn advance(&self, i: usize) {
        git(
            self.path(),
            &["update-ref", "refs/heads/main", &self.shas[i]],
        )
        .unwrap();
    }

    /// `(state, description)` of commit `i`'s `lockstep/kube` note line.
    fn status(&self, i: usize) -> Option<(String, String)> {
        let note = git(
            self.path(),
            &["notes", "--ref=lockstep", "show", &self.shas[i]],
        )?;
        let prefix = format!("lockstep/{CLUSTER}: ");
        note.lines().find_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (state, desc) = rest.split_once(" — ").unwrap_or((rest, ""));
            Some((state.to_owned(), desc.to_owned()))
        })
    }

    fn state(&self, i: usize) -> String {
        self.status(i).map(|s| s.0).unwrap_or_default()
    }
}

fn applied_pair(key: &Key, to: &str) -> (String, String) {
    (key.to_string(), to.to_owned())
}

/// The four units of the first commit, installed at 2026.1, and `more`:
/// what lockstep must have applied, once each, sorted.
fn installs_and(more: &[(Key, &str)]) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = [prod(), staging(), nova(), glance()]
        .iter()
        .map(|k| applied_pair(k, "2026.1"))
        .chain(more.iter().map(|(k, to)| applied_pair(k, to)))
        .collect();
    all.sort();
    all
}

/// The cluster as the test reads it, and the simulated operator it steps.
struct Fleet {
    cluster: KubeCluster,
    client: kube::Client,
    op: KubeOperator,
    adopted: BTreeSet<Key>,
    /// Operator rounds run, and the time they took.
    rounds: Rounds,
}

impl Fleet {
    async fn new(server: &ApiServer, world: World, extra_namespaces: &[&str]) -> Self {
        let cluster = KubeCluster::from_kubeconfig(&server.kubeconfig())
            .await
            .unwrap();
        let client = cluster.client().clone();
        // The example fleet's namespaces (platform/namespaces.yaml: plain
        // objects lockstep ignores, so the test creates them).
        let ns: Api<Namespace> = Api::all(client.clone());
        for n in ["openstack", "openstack-staging", "compute", "image"]
            .iter()
            .chain(extra_namespaces)
        {
            ns.create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": n}})).unwrap(),
            )
            .await
            .unwrap();
        }
        let op = KubeOperator::new(client.clone(), world);
        Self {
            cluster,
            client,
            op,
            adopted: BTreeSet::new(),
            rounds: Rounds::default(),
        }
    }

    async fn get(&self, key: &Key) -> Option<ClusterObject> {
        self.cluster.get(key).await.unwrap()
    }

    /// The operator takes over what lockstep created.
    async fn adopt_new(&mut self) -> Result<(), String> {
        for plane in [prod(), staging()] {
            if self.adopted.contains(&plane)
                || self.cluster.get(&plane).await.ok().flatten().is_none()
            {
                continue;
            }
            let templates = children(&plane)
                .iter()
                .map(|c| (c.kind, template(c.kind)))
                .collect();
            self.op
                .adopt_plane(&plane, templates)
                .await
                .map_err(|e| format!("adopting {plane}: {e}"))?;
            self.adopted.insert(plane);
        }
        for key in [nova(), glance()] {
            if self.adopted.contains(&key) || self.cluster.get(&key).await.ok().flatten().is_none()
            {
                continue;
            }
            self.op
                .adopt(&key)
                .await
                .map_err(|e| format!("adopting {key}: {e}"))?;
            self.adopted.insert(key);
        }
        Ok(())
    }

    /// One round of the operator; errors (the API server down) are retried
    /// by the next round, as a controller would.
    async fn tick(&mut self) {
        let t = Instant::now();
        let adopted = self.adopt_new().await;
        self.rounds.run(&mut self.op, t, adopted).await;
    }

    /// Steps the operator until `done` holds.
    async fn drive(
        &mut self,
        what: &str,
        limit: Duration,
        mut done: impl AsyncFnMut(&Fleet) -> bool,
    ) {
        let (start, before) = (Instant::now(), self.rounds);
        loop {
            if done(self).await {
                self.rounds.report(what, start, before);
                return;
            }
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
            self.tick().await;
        }
    }

    /// Waits without stepping the operator (it is "paused").
    async fn wait(&self, what: &str, limit: Duration, mut done: impl AsyncFnMut(&Fleet) -> bool) {
        let start = Instant::now();
        loop {
            if done(self).await {
                eprintln!("{what}: {:.1}s", start.elapsed().as_secs_f64());
                return;
            }
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether an object has finished its hop to `release` and is Ready at
    /// its current generation (Horizon tracks no release: its image's tag).
    async fn settled_at(&self, key: &Key, release: &str) -> bool {
        let Some(o) = self.get(key).await else {
            return false;
        };
        let at = match key.kind {
            Kind::Horizon => o.image.as_ref().and_then(|i| i.tag().map(str::to_owned)),
            _ => o.status.installed_release.clone(),
        };
        at.as_deref() == Some(release)
            && o.status.upgrade_phase.is_none()
            && o.status.target_release.is_none()
            && o.status
                .condition("Ready")
                .is_some_and(|r| r.status == "True" && r.observed_generation == Some(o.generation))
    }

    async fn plane_settled_at(&self, plane: &Key, release: &str) -> bool {
        for c in children(plane) {
            if !self.settled_at(&c, release).await {
                return false;
            }
        }
        self.get(plane).await.and_then(|p| p.release).as_deref() == Some(release)
    }

    /// Some child of the plane is in the middle of its phase machine.
    async fn plane_mid_phase(&self, plane: &Key) -> Option<String> {
        for c in children(plane) {
            if let Some(p) = self.get(&c).await.and_then(|o| o.status.upgrade_phase) {
                return Some(format!("{}: {p}", c.name));
            }
        }
        None
    }

    async fn generation(&self, key: &Key) -> i64 {
        self.get(key).await.expect("object exists").generation
    }

    /// Installs the first commit: the daemon applies, the operator adopts.
    async fn install(&mut self, story: &Story) {
        self.drive(
            "first commit installed and reported",
            Duration::from_secs(45),
            async |f| {
                story.state(FLEET) == "success"
                    && f.adopted.len() == 4
                    && f.plane_settled_at(&prod(), "2026.1").await
                    && f.plane_settled_at(&staging(), "2026.1").await
            },
        )
        .await;
        for k in [prod(), staging(), nova(), glance()] {
            assert_eq!(self.generation(&k).await, 1, "{k} created once");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_story_end_to_end() {
    let t0 = Instant::now();
    let server = ApiServer::start();
    eprintln!("API server ready: {:.1}s", t0.elapsed().as_secs_f64());
    let story = Story::new(false);
    let logs = tempfile::tempdir().unwrap();
    // Nova's expand Job fails five tries (backoffLimit 4): failed for good, once.
    let mut world = world();
    world.faults.push(Fault::JobFails {
        object: "prod-nova".into(),
        job: JobKind::Expand,
        tries: 5,
    });
    let mut fleet = Fleet::new(&server, world, &[]).await;
    let mut daemon = Daemon::start("lockstep", &server, story.path(), logs.path(), &[], &[]);

    fleet.install(&story).await;
    assert_eq!(daemon.applied_sorted(), installs_and(&[]));

    story.advance(STAGING_REVERT);
    let jobs: Api<Job> = Api::namespaced(fleet.client.clone(), "openstack");
    let mut first_expand = None;
    fleet
        .drive(
            "the story applied and reported",
            Duration::from_secs(90),
            async |f| {
                if first_expand.is_none()
                    && let Ok(Some(j)) = jobs.get_opt("prod-nova-db-expand").await
                {
                    first_expand = j.metadata.uid;
                }
                [PROD_HOP, NOVA_HOP, STAGING_REVERT]
                    .iter()
                    .all(|&i| story.state(i) == "success")
                    && f.plane_settled_at(&prod(), "2026.2").await
                    && f.settled_at(&nova(), "2026.2").await
            },
        )
        .await;
    assert!(daemon.alive(), "the daemon keeps running");

    // The cluster: prod and every projected child at 2026.2 and Ready, the
    // standalone Nova hopped once, staging and Glance untouched.
    let plane = fleet.get(&prod()).await.unwrap();
    assert_eq!(plane.release.as_deref(), Some("2026.2"));
    assert_eq!(plane.generation, 2, "one apply for the hop");
    for c in children(&prod()) {
        let o = fleet.get(&c).await.unwrap();
        if c.kind != Kind::Horizon {
            assert_eq!(o.status.installed_release.as_deref(), Some("2026.2"), "{c}");
        }
        assert!(fleet.settled_at(&c, "2026.2").await, "{c}: {:?}", o.status);
        // Read from the controller ownerReference the operator sets.
        assert_eq!(o.status.projected_by.as_ref(), Some(&prod()), "{c}");
    }
    let n = fleet.get(&nova()).await.unwrap();
    assert_eq!(
        n.status.projected_by, None,
        "a standalone Nova has no plane"
    );
    assert_eq!(
        (n.release.as_deref(), n.status.installed_release.as_deref()),
        (Some("2026.2"), Some("2026.2"))
    );
    assert_eq!(
        n.image.as_ref().map(|i| i.reference()).as_deref(),
        Some("ghcr.io/c5c3/nova:2026.2")
    );
    assert_eq!(
        n.generation, 2,
        "the refused Nova commits were never applied"
    );
    let s = fleet.get(&staging()).await.unwrap();
    assert_eq!(
        s.release.as_deref(),
        Some("2026.1"),
        "the downgrade never applied"
    );
    assert_eq!(s.generation, 1);
    for c in children(&staging()) {
        assert!(fleet.settled_at(&c, "2026.1").await, "{c}");
    }
    assert_eq!(fleet.generation(&glance()).await, 1);

    // What lockstep applied: the installs and the two accepted hops, once each.
    assert_eq!(
        daemon.applied_sorted(),
        installs_and(&[(prod(), "2026.2"), (nova(), "2026.2")])
    );

    // The verdicts, as git notes.
    for (i, state, reason) in [
        (FLEET, "success", ""),
        (PROD_HOP, "success", ""),
        (NOVA_SKIP, "failure", "UpgradePathInvalid"),
        (NOVA_RELEASE_ONLY, "failure", "ImageReleaseMismatch"),
        (NOVA_HOP, "success", ""),
        (STAGING_DOWN, "failure", "DowngradeNotSupported"),
        (STAGING_REVERT, "success", ""),
    ] {
        let (s, d) = story.status(i).unwrap_or_default();
        assert_eq!(s, state, "commit {i}: {d}");
        assert!(d.contains(reason), "commit {i}: {d}");
    }
    let (_, d) = story.status(PROD_HOP).unwrap();
    assert!(d.starts_with("applied:"), "{d}");

    // The repair: the expand Job failed for good, lockstep deleted it, the
    // operator ran it again (a new Job), and both sides left Events.
    let first_uid = first_expand.expect("the expand Job was seen");
    let expand = jobs.get("prod-nova-db-expand").await.unwrap();
    assert_ne!(expand.metadata.uid, Some(first_uid), "a new Job");
    assert!(job_has(&expand, "Complete"), "{:?}", expand.status);
    let prod_nova = Key::new(Kind::Nova, "openstack", "prod-nova");
    let events = fleet.cluster.events(&prod_nova).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.reason == "ExpandFailed" && e.warning && e.reporter == "nova-operator"),
        "{events:?}"
    );
    let repairs: Vec<_> = events
        .iter()
        .filter(|e| e.reason == "RepairJobDeleted")
        .collect();
    assert_eq!(repairs.len(), 1, "{events:?}");
    assert_eq!(repairs[0].reporter, "c5c3.io/lockstep");
    assert!(
        repairs[0]
            .message
            .contains("prod-nova-db-expand (attempt 1)"),
        "{:?}",
        repairs[0]
    );
    assert_eq!(
        events.last().map(|e| e.reason.as_str()),
        Some("UpgradeComplete")
    );
    // The re-run is counted on the object (what a restart reads back), by
    // lockstep's repair manager alone: no apply of a document owns it.
    let nova = fleet
        .cluster
        .get(&prod_nova)
        .await
        .unwrap()
        .expect("prod-nova");
    let record = lockstep::repair::RepairRecord::parse(
        nova.status
            .repair_record
            .as_deref()
            .expect("the repair record"),
    )
    .unwrap();
    assert_eq!((record.target.as_str(), record.attempts), ("2026.2", 1));
    let raw = lockstep::cluster::kube::dynamic_api(fleet.cluster.client(), &prod_nova)
        .get("prod-nova")
        .await
        .unwrap();
    let owners: Vec<&str> = raw
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.to_string().contains("f:lockstep.c5c3.io/repair"))
        })
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert_eq!(owners, [lockstep::repair::RECORD_MANAGER], "{owners:?}");
    let logged = daemon
        .records()
        .into_iter()
        .filter(|r| {
            r["level"] == "WARN"
                && r["fields"]["job"] == "prod-nova-db-expand"
                && r["fields"]["deleted"] == true
        })
        .count();
    assert_eq!(logged, 1, "the repair is a log line too");
    eprintln!("total: {:.1}s", t0.elapsed().as_secs_f64());
}

fn job_has(j: &Job, condition: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == condition && c.status == "True"))
}

/// The API server process of a fixture: killed and started again with the
/// same command line (same port, certificates and etcd, which keeps running).
struct Restarted {
    child: Option<Child>,
}

impl Restarted {
    fn pid_file(server: &ApiServer) -> PathBuf {
        server
            .kubeconfig()
            .parent()
            .unwrap()
            .join("kube-apiserver.pid")
    }

    /// SIGKILLs the running kube-apiserver; returns its command line.
    fn kill(server: &ApiServer) -> Vec<String> {
        let pid: i32 = std::fs::read_to_string(Self::pid_file(server))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap()
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert!(argv[0].ends_with("kube-apiserver"), "{argv:?}");
        // SAFETY: kill(2) on a pid read from the fixture's pid file.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        argv
    }

    fn start(server: &ApiServer, argv: &[String]) -> Self {
        let dir = server.kubeconfig().parent().unwrap().to_owned();
        let log = File::options()
            .append(true)
            .open(dir.join("kube-apiserver.log"))
            .unwrap();
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        // stop.sh stops it with the fixture.
        std::fs::write(Self::pid_file(server), child.id().to_string()).unwrap();
        Self { child: Some(child) }
    }
}

impl Drop for Restarted {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_restarts_mid_phase() {
    let t0 = Instant::now();
    let server = ApiServer::start();
    let story = Story::new(false);
    let logs = tempfile::tempdir().unwrap();
    let mut fleet = Fleet::new(&server, world(), &[]).await;
    let mut daemon = Daemon::start("lockstep", &server, story.path(), logs.path(), &[], &[]);
    fleet.install(&story).await;

    // The prod hop, until a child is mid-phase and lockstep follows it.
    story.advance(PROD_HOP);
    let mut phase = None;
    fleet
        .drive("prod mid-phase", Duration::from_secs(30), async |f| {
            phase = f.plane_mid_phase(&prod()).await;
            phase.is_some()
        })
        .await;
    fleet
        .wait(
            "lockstep follows the phase",
            Duration::from_secs(15),
            async |_| {
                story
                    .status(PROD_HOP)
                    .is_some_and(|(s, d)| s == "pending" && d.starts_with("prod 2026.1→2026.2: "))
            },
        )
        .await;
    let (_, following) = story.status(PROD_HOP).unwrap();
    assert!(!fleet.plane_settled_at(&prod(), "2026.2").await);
    assert_eq!(daemon.applied_sorted(), installs_and(&[(prod(), "2026.2")]));

    // The API server goes away (etcd stays) while the hop is in flight.
    let mark = daemon.text().len();
    let argv = Restarted::kill(&server);
    let down = Instant::now();
    fleet
        .wait("lockstep warns", Duration::from_secs(20), async |_| {
            daemon
                .records_from(mark)
                .iter()
                .any(|r| r["level"] == "WARN" || r["level"] == "ERROR")
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        daemon.alive(),
        "lockstep survives the API server going away"
    );
    let warnings: Vec<String> = daemon
        .records_from(mark)
        .iter()
        .filter(|r| r["level"] == "WARN")
        .map(|r| {
            r["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    eprintln!(
        "warnings while the API server was down: {:?}",
        warnings.iter().collect::<BTreeSet<_>>()
    );
    assert!(
        warnings.iter().any(|w| w.contains("next pass")),
        "{warnings:?}"
    );
    let _apiserver = Restarted::start(&server, &argv);
    let ns: Api<Namespace> = Api::all(fleet.client.clone());
    fleet
        .wait("API server back", Duration::from_secs(60), async |_| {
            ns.list(&Default::default()).await.is_ok()
        })
        .await;
    eprintln!(
        "API server down for {:.1}s ({phase:?}, status {following:?})",
        down.elapsed().as_secs_f64()
    );

    fleet
        .drive("the hop finishes", Duration::from_secs(60), async |f| {
            story.state(PROD_HOP) == "success" && f.plane_settled_at(&prod(), "2026.2").await
        })
        .await;
    assert!(daemon.alive(), "lockstep is still running");
    assert_eq!(fleet.generation(&prod()).await, 2, "one apply for the hop");
    assert_eq!(
        daemon.applied_sorted(),
        installs_and(&[(prod(), "2026.2")]),
        "nothing applied again after the restart"
    );
    eprintln!("total: {:.1}s", t0.elapsed().as_secs_f64());
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("lockstep")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_fails_over_mid_phase() {
    let t0 = Instant::now();
    let server = ApiServer::start();
    let story = Story::new(true);
    let logs = tempfile::tempdir().unwrap();
    let mut fleet = Fleet::new(&server, world(), &["lockstep"]).await;
    let leases: Api<Lease> = Api::namespaced(fleet.client.clone(), "lockstep");
    // Each replica's pod, as the downward API would describe it: a follower
    // forwards only to a holder it finds among them.
    for name in ["a", "b"] {
        common::kube::replica_pod(&fleet.client, "lockstep", name, "lockstep", "127.0.0.1").await;
    }

    let config = logs.path().join("lockstep.yaml");
    std::fs::write(&config, "leaderElection:\n  leaseDuration: 4s\n").unwrap();
    let secret_file = logs.path().join("github-secret");
    std::fs::write(&secret_file, "gh-hook-secret").unwrap();
    let mut replicas: Vec<(Daemon, String, u16)> = ["a", "b"]
        .iter()
        .map(|name| {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            let d = Daemon::start(
                name,
                &server,
                story.path(),
                logs.path(),
                &[
                    "--leader-election",
                    "--config",
                    config.to_str().unwrap(),
                    "--listen",
                    &listen,
                    "--github-webhook-secret-file",
                    secret_file.to_str().unwrap(),
                ],
                &[
                    ("POD_NAMESPACE", "lockstep"),
                    ("POD_NAME", name),
                    ("POD_IP", "127.0.0.1"),
                ],
            );
            (d, format!("{name}@{listen}"), port)
        })
        .collect();

    let mut first = None;
    fleet
        .wait("a leader elected", Duration::from_secs(30), async |_| {
            first = holder(&leases).await;
            first.is_some()
        })
        .await;
    let first = first.unwrap();
    let leader = replicas
        .iter()
        .position(|(_, id, _)| *id == first)
        .unwrap_or_else(|| panic!("holder {first} is neither replica"));
    let follower = 1 - leader;
    let (leader_id, follower_id) = (first.clone(), replicas[follower].1.clone());

    fleet.install(&story).await;
    assert_eq!(replicas[leader].0.applied_sorted(), installs_and(&[]));
    assert_eq!(
        replicas[follower].0.applied(),
        vec![],
        "only the leader applies"
    );

    // A signed push delivered to the follower is forwarded to the leader.
    let body = serde_json::to_vec(&json!({
        "ref": "refs/heads/main", "after": story.shas[FLEET],
        "repository": {"full_name": "example-org/fleet"}
    }))
    .unwrap();
    let signature = lockstep::webhook::sign_hex(&Secret::new("gh-hook-secret"), &body);
    let delivery = "run-kube-forwarded-1";
    let resp = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/hooks/github",
            replicas[follower].2
        ))
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", delivery)
        .header("X-Hub-Signature-256", format!("sha256={signature}"))
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "queued by the leader");
    let received = |d: &Daemon| {
        d.records().iter().any(|r| {
            r["fields"]["message"] == "webhook trigger" && r["fields"]["delivery"] == delivery
        })
    };
    fleet
        .wait(
            "the leader got the delivery",
            Duration::from_secs(5),
            async |_| received(&replicas[leader].0),
        )
        .await;
    assert!(
        !received(&replicas[follower].0),
        "the follower only forwards"
    );

    // The rest of the story: prod and Nova hop; Nova has a second hop queued.
    story.advance(NOVA_NEXT);
    fleet
        .drive(
            "prod and Nova mid-hop, Nova mid-phase",
            Duration::from_secs(30),
            async |f| {
                !f.plane_settled_at(&prod(), "2026.2").await
                    && f.get(&nova())
                        .await
                        .and_then(|o| o.status.upgrade_phase)
                        .is_some()
            },
        )
        .await;
    fleet
        .wait(
            "the leader follows the hops",
            Duration::from_secs(15),
            async |_| {
                [(PROD_HOP, "prod"), (NOVA_HOP, "nova")]
                    .iter()
                    .all(|&(i, name)| {
                        story.status(i).is_some_and(|(s, d)| {
                            s == "pending" && d.starts_with(&format!("{name} 2026.1→2026.2: "))
                        })
                    })
            },
        )
        .await;
    assert_eq!(
        replicas[leader].0.applied_sorted(),
        installs_and(&[(prod(), "2026.2"), (nova(), "2026.2")])
    );
    assert_eq!(
        replicas[follower].0.applied(),
        vec![],
        "only the leader applies"
    );
    assert_eq!(holder(&leases).await.as_deref(), Some(leader_id.as_str()));

    // kill -9 the leader mid-phase; the operator pauses until a new leader.
    replicas[leader].0.kill();
    let killed = SystemTime::now();
    let last_renewal = leases
        .get("lockstep")
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap();
    fleet
        .wait(
            "the follower takes the Lease",
            Duration::from_secs(20),
            async |_| holder(&leases).await.as_deref() == Some(follower_id.as_str()),
        )
        .await;
    let spec = leases.get("lockstep").await.unwrap().spec.unwrap();
    let acquired = SystemTime::from(spec.acquire_time.unwrap().0);
    let expired = SystemTime::from(last_renewal.0) + Duration::from_secs(4);
    assert!(
        acquired >= expired,
        "taken over at {acquired:?}, before the Lease expired at {expired:?}"
    );
    eprintln!(
        "takeover {:.1}s after the kill",
        acquired
            .duration_since(killed)
            .unwrap_or_default()
            .as_secs_f64()
    );
    assert!(replicas[follower].0.alive());

    fleet
        .drive(
            "the new leader finishes both hops",
            Duration::from_secs(90),
            async |f| {
                [PROD_HOP, NOVA_HOP, NOVA_NEXT]
                    .iter()
                    .all(|&i| story.state(i) == "success")
                    && f.plane_settled_at(&prod(), "2026.2").await
                    && f.settled_at(&nova(), "2027.1").await
            },
        )
        .await;

    // Each hop applied exactly once, by whoever led at the time.
    assert_eq!(
        fleet.generation(&prod()).await,
        2,
        "prod: one hop, one apply"
    );
    assert_eq!(
        fleet.generation(&nova()).await,
        3,
        "Nova: two hops, two applies"
    );
    assert_eq!(fleet.generation(&staging()).await, 1);
    assert_eq!(fleet.generation(&glance()).await, 1);
    assert_eq!(
        replicas[follower].0.applied_sorted(),
        vec![applied_pair(&nova(), "2027.1")],
        "the new leader applies only what was left, once"
    );
    // No hop skipped: Nova went 2026.1 → 2026.2 → 2027.1, one hop at a time.
    // (The operator's own record, in the order things happened; the Events
    // it posted carry virtual times that may tie.)
    let hops: Vec<String> = fleet
        .op
        .world
        .events
        .iter()
        .filter(|e| e.key == nova())
        .filter(|e| matches!(e.reason.as_str(), "UpgradeInitiated" | "UpgradeComplete"))
        .map(|e| format!("{} {}", e.reason, e.message))
        .collect();
    assert_eq!(
        hops,
        [
            "UpgradeInitiated upgrade initiated: 2026.1 → 2026.2",
            "UpgradeComplete UpgradeComplete: 2026.1 → 2026.2",
            "UpgradeInitiated upgrade initiated: 2026.2 → 2027.1",
            "UpgradeComplete UpgradeComplete: 2026.2 → 2027.1",
        ]
    );
    eprintln!("total: {:.1}s", t0.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------
// Aborts through Git against the real API server.

/// `(state, description)` of `sha`'s note line under `context`.
fn note(repo: &Path, sha: &str, context: &str) -> Option<(String, String)> {
    let text = git(repo, &["notes", "--ref=lockstep", "show", sha])?;
    let prefix = format!("{context}: ");
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(&prefix)?;
        let (state, desc) = rest.split_once(" — ").unwrap_or((rest, ""));
        Some((state.to_owned(), desc.to_owned()))
    })
}

/// Writes `text` to the standalone Glance and commits it on main.
fn commit_glance(repo: &Path, text: &str, message: &str) -> String {
    std::fs::write(repo.join("standalone/image/glance.yaml"), text).unwrap();
    git(repo, &["commit", "-qam", message]).unwrap();
    git(repo, &["rev-parse", "HEAD"]).unwrap()
}

/// A standalone Glance wedged on its expand Job is aborted by a commit that
/// sets release and image back; lockstep is killed after applying the
/// abort, the operator finishes it meanwhile, and a new process gives the
/// abort's verdict again (recorded in the cluster: judged again now, the
/// set-back would read as a downgrade). A pull request for the next release
/// is held while the hop is in flight. Later the hop is made again, and a
/// set-back during its Contracting is refused `AbortUnsafe`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_glance_is_aborted_through_git_and_a_contract_is_not() {
    let t0 = Instant::now();
    let server = ApiServer::start();
    let story = Story::new(false);
    let repo = story.path();
    let logs = tempfile::tempdir().unwrap();
    let mut world = world();
    world.faults.push(Fault::JobFails {
        object: "glance".into(),
        job: JobKind::Expand,
        tries: 5,
    });
    let mut fleet = Fleet::new(&server, world, &[]).await;
    let mut daemon = Daemon::start("lockstep", &server, repo, logs.path(), &[], &[]);
    fleet.install(&story).await;
    // The work tree follows the branch from here on.
    git(repo, &["checkout", "-qf", "main"]).unwrap();
    let installed = std::fs::read_to_string(repo.join("standalone/image/glance.yaml")).unwrap();
    let commit_ctx = format!("lockstep/{CLUSTER}");
    let object_ctx = format!("lockstep/{CLUSTER}/image/glance");

    // The hop wedges: the expand Job fails for good; standalone, so it is
    // reported for a person, not repaired.
    let hop = commit_glance(
        repo,
        &common::glance_digest("2026.2", 'b'),
        "Glance to 2026.2",
    );
    fleet
        .drive(
            "the failed expand reported",
            Duration::from_secs(60),
            async |_| note(repo, &hop, &object_ctx).is_some_and(|(s, _)| s == "failure"),
        )
        .await;
    let g = fleet.get(&glance()).await.unwrap();
    assert_eq!(
        g.status.upgrade_phase.as_deref(),
        Some("Expanding"),
        "{g:?}"
    );

    // A pull request for the next release waits for the hop in flight.
    git(repo, &["checkout", "-qb", "next"]).unwrap();
    let next = commit_glance(
        repo,
        &common::glance_digest("2027.1", 'c'),
        "Glance to 2027.1",
    );
    git(repo, &["checkout", "-qf", "main"]).unwrap();
    git(repo, &["update-ref", "refs/pull/1/head", &next]).unwrap();
    fleet
        .wait("the pull request held", Duration::from_secs(20), async |_| {
            note(repo, &next, &format!("{commit_ctx}/review")).is_some_and(|(s, d)| {
                s == "pending"
                    && d == "held: glance 2026.2→2027.1 waits for the upgrade to 2026.2 in flight (UpgradeInProgress)"
            })
        })
        .await;

    // The abort, applied while the operator is paused; lockstep is killed
    // before the abort completes.
    let abort = commit_glance(repo, &installed, "Abort Glance 2026.2");
    fleet
        .wait("the abort applied", Duration::from_secs(20), async |f| {
            f.get(&glance()).await.and_then(|o| o.release).as_deref() == Some("2026.1")
        })
        .await;
    let records: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(fleet.client.clone(), "default");
    let record = records.get("lockstep-records").await.unwrap();
    let text = record.data.unwrap_or_default()[&format!("verdicts.{CLUSTER}")].clone();
    assert!(
        text.contains(&abort),
        "the abort's verdict is recorded: {text}"
    );
    daemon.kill();
    fleet
        .drive("the abort completes", Duration::from_secs(60), async |f| {
            f.settled_at(&glance(), "2026.1").await
        })
        .await;

    // The record's key deleted: a process started now does not take that
    // for a first start (Glance carries lockstep's applied annotation), so
    // it does not judge the abort again from Git alone, where it is a
    // downgrade, and apply the aborted hop again. It waits for a person.
    let key = format!("verdicts.{CLUSTER}");
    let backup = records.get("lockstep-records").await.unwrap().data.unwrap()[&key].clone();
    let set = |value: serde_json::Value| {
        let records = records.clone();
        let key = key.clone();
        async move {
            records
                .patch(
                    "lockstep-records",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"data": {key: value}})),
                )
                .await
                .unwrap();
        }
    };
    set(serde_json::Value::Null).await;
    let mut lost = Daemon::start("lockstep-lost", &server, repo, logs.path(), &[], &[]);
    let refusal = format!(
        "lockstep's record of live verdicts (key {key} of ConfigMap default/lockstep-records) is missing, but "
    );
    fleet
        .wait(
            "the lost record named",
            Duration::from_secs(30),
            async |_| {
                lost.text().lines().any(|l| {
                    l.contains(&refusal) && l.contains(" carries lockstep.c5c3.io/applied: ")
                })
            },
        )
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(lost.applied().is_empty(), "{:?}", lost.applied());
    assert_eq!(
        fleet
            .get(&glance())
            .await
            .and_then(|o| o.release)
            .as_deref(),
        Some("2026.1")
    );
    lost.kill();
    set(json!(backup)).await;
    let daemon = Daemon::start("lockstep-2", &server, repo, logs.path(), &[], &[]);
    fleet
        // Each status is its own note write: wait for all three.
        .drive("the abort's verdict", Duration::from_secs(30), async |_| {
            note(repo, &abort, &commit_ctx)
                .is_some_and(|(s, d)| s == "success" && d == "aborted: glance 2026.2→2026.1")
                && note(repo, &abort, &object_ctx).is_some_and(|(s, _)| s == "success")
                && note(repo, &hop, &commit_ctx).is_some_and(|(_, d)| d.contains("aborted by"))
        })
        .await;
    let short = &abort[..10];
    assert_eq!(
        note(repo, &hop, &commit_ctx),
        Some((
            "failure".into(),
            format!("glance 2026.1→2026.2: aborted by {short}")
        ))
    );
    assert_eq!(
        note(repo, &abort, &object_ctx),
        Some(("success".into(), "glance 2026.2→2026.1: aborted".into()))
    );
    assert!(
        daemon.applied().is_empty(),
        "the new process applies nothing: {:?}",
        daemon.applied()
    );

    // The hop again (the fault is spent), and a set-back while it contracts.
    let again = commit_glance(
        repo,
        &common::glance_digest("2026.2", 'b'),
        "Glance to 2026.2, again",
    );
    fleet
        .drive("Contracting", Duration::from_secs(60), async |f| {
            f.get(&glance())
                .await
                .and_then(|o| o.status.upgrade_phase)
                .as_deref()
                == Some("Contracting")
        })
        .await;
    let late = commit_glance(repo, &installed, "Abort during contract");
    fleet
        .wait(
            "the late abort refused",
            Duration::from_secs(20),
            async |_| {
                note(repo, &late, &commit_ctx).is_some_and(|(s, d)| {
                    s == "failure" && d == "refused: glance abort while Contracting (AbortUnsafe)"
                })
            },
        )
        .await;
    fleet
        .drive("the hop completes", Duration::from_secs(60), async |f| {
            f.settled_at(&glance(), "2026.2").await
                && note(repo, &again, &commit_ctx).is_some_and(|(s, _)| s == "success")
        })
        .await;
    assert_eq!(
        daemon.applied(),
        vec![("Glance image/glance".to_owned(), "2026.2".to_owned())],
        "the second process applied the hop once and never the refused set-back"
    );
    eprintln!("total: {:.1}s", t0.elapsed().as_secs_f64());
}

/// `lockstep_cluster_request_duration_seconds_count` for `op` (ok), read
/// from the daemon's metrics; `None` while it does not answer.
fn requests(metrics: &str, op: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(metrics).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let series =
        format!(r#"lockstep_cluster_request_duration_seconds_count{{op="{op}",result="ok"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
}

/// A watch's first listing announces every object, changed or not. A
/// restarted lockstep reads each unit once (its first pass lists the
/// cluster and reads them all from that), not a second time for the
/// listing: at 5,000 objects that second read took half a minute. An object
/// that does change is read again, on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_each_unit_once_and_a_changed_one_again() {
    let server = ApiServer::start();
    let story = Story::new(false);
    let logs = tempfile::tempdir().unwrap();
    let mut fleet = Fleet::new(&server, world(), &[]).await;
    let mut first = Daemon::start("first", &server, story.path(), logs.path(), &[], &[]);
    fleet.install(&story).await;
    first.kill();

    // Nothing moves from here on: the operator is paused.
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut second = Daemon::start(
        "second",
        &server,
        story.path(),
        logs.path(),
        &["--metrics-listen", &metrics],
        &[],
    );
    // The first pass lists the cluster once (a LIST per kind) and reads
    // every unit from that.
    fleet
        .wait(
            "the restarted daemon listed the cluster",
            Duration::from_secs(30),
            async |_| requests(&metrics, "snapshot") == Some(1.0),
        )
        .await;
    // Polls every second and the watch's listing of all 22 objects: no unit
    // is read again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(second.alive());
    assert_eq!(requests(&metrics, "snapshot"), Some(1.0));
    assert_eq!(
        requests(&metrics, "get"),
        None,
        "the watch's listing made lockstep read units again"
    );

    // Glance changes (a label: a new resourceVersion): its unit, and only
    // it, is read again.
    let api = lockstep::cluster::kube::dynamic_api(&fleet.client, &glance());
    api.patch(
        &glance().name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    fleet
        .wait(
            "the changed Glance read again",
            Duration::from_secs(10),
            async |_| requests(&metrics, "get") == Some(1.0),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(requests(&metrics, "get"), Some(1.0));

    // A reconfiguration (another Keystone endpoint, same release and
    // digest) is applied through the API server, whole, with the digest of
    // the applied document left on the object (`docs/gate.md`).
    let digest_of = async || -> Option<String> {
        api.get(&glance().name)
            .await
            .ok()?
            .metadata
            .annotations?
            .get(lockstep::rollout::APPLIED_ANNOTATION)
            .cloned()
    };
    let before = digest_of().await;
    let path = story.path().join("standalone/image/glance.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replacen(
        "keystoneEndpoint: http://keystone.identity.svc:5000/v3",
        "keystoneEndpoint: http://keystone-2.identity.svc:5000/v3",
        1,
    );
    assert_ne!(edited, text);
    let change = commit_glance(story.path(), &edited, "glance: another keystone endpoint");
    fleet
        .wait(
            "the reconfiguration applied",
            Duration::from_secs(30),
            async |_| {
                api.get(&glance().name).await.ok().is_some_and(|o| {
                    o.data["spec"]["keystoneEndpoint"] == "http://keystone-2.identity.svc:5000/v3"
                })
            },
        )
        .await;
    let after = digest_of().await.expect("the applied document's digest");
    assert_eq!(after.len(), 32, "{after}");
    assert_ne!(Some(after), before, "the digest names the new document");
    // Accepted, and pending while the paused operator has not caught up.
    fleet
        .wait(
            "the reconfiguration's status",
            Duration::from_secs(10),
            async |_| {
                note(story.path(), &change, &format!("lockstep/{CLUSTER}"))
                    .is_some_and(|(s, _)| s == "pending")
            },
        )
        .await;

    // A finished unit deleted from the cluster while Git holds it: the
    // watch's deletion makes lockstep read it, and it is installed again at
    // once, not at the full resync ten minutes on (the watch announced only
    // changes, and a finished unit is otherwise not read).
    let novas = lockstep::cluster::kube::dynamic_api(&fleet.client, &nova());
    let uid = novas.get(&nova().name).await.unwrap().metadata.uid;
    novas
        .delete(&nova().name, &Default::default())
        .await
        .unwrap();
    fleet
        .wait(
            "the deleted Nova installed again",
            Duration::from_secs(20),
            async |_| {
                novas
                    .get(&nova().name)
                    .await
                    .ok()
                    .is_some_and(|o| o.metadata.uid.is_some() && o.metadata.uid != uid)
            },
        )
        .await;
}
