//! A unit Git's branch no longer holds (`docs/gate.md`, "Identity over
//! time"): the daemon applies nothing more of it, not even to repair, follows
//! a hop already in flight to its end, and the statuses of its commits
//! settle.
//!
//! The cluster is the in-process simulated operator behind a wrapper that
//! counts applies (the real C5C3 operators cannot run here); the repository
//! is real Git, changed between passes as a person would push.

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::counted::Counted;
use common::tree::commit;
use git2::Repository;
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::kind::{Key, Kind};
use lockstep::metrics::Metrics;
use lockstep::release::ImageRef;
use lockstep::rollout::{Next, WaitOn};
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

const PLANE: &str = "clusters/prod/controlplane.yaml";

fn namespaces() -> (&'static str, String) {
    (
        "platform/namespaces.yaml",
        common::example("platform/namespaces.yaml"),
    )
}

/// A daemon on the repository at `dir` and the cluster, as it starts.
fn daemon(
    dir: &std::path::Path,
    mem: &MemoryCluster,
    cluster: &Counted,
    queue: &StatusQueue,
    resync: Duration,
    metrics: Arc<Metrics>,
) -> Daemon<Counted, Source> {
    let source = Source::open(Origin::Local(dir.to_owned()), "main").unwrap();
    let opts = Options {
        cluster_name: "prod".into(),
        poll: Duration::from_millis(10),
        resync,
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(mem, &source, &opts).unwrap();
    Daemon::new(opts, source, cluster.clone(), clock, queue.clone(), metrics)
}

/// The prod plane at 2026.1 (the cluster's seed), then its hop to 2026.2;
/// a daemon on it that has applied the hop, with the operator one second
/// into it.
struct Story {
    dir: tempfile::TempDir,
    mem: MemoryCluster,
    cluster: Counted,
    daemon: Daemon<Counted, Source>,
    queue: StatusQueue,
    hop: String,
}

impl Story {
    async fn new() -> Story {
        Self::reading_every_unit_each(Options::default().resync).await
    }

    /// [`Story::new`], every unit read again each `resync` (a direct pass
    /// has no watch to tell it what changed; zero reads all every pass).
    async fn reading_every_unit_each(resync: Duration) -> Story {
        let dir = tempfile::tempdir().unwrap();
        Repository::init(dir.path()).unwrap();
        commit(
            dir.path(),
            &[namespaces(), (PLANE, common::prod("2026.1", "2026.1"))],
            "prod at 2026.1",
        );
        let hop = commit(
            dir.path(),
            &[namespaces(), (PLANE, common::prod("2026.2", "2026.2"))],
            "prod to 2026.2",
        );
        let mem = MemoryCluster::new(World::new(Params::default()));
        let cluster = Counted::new(mem.clone());
        let queue = StatusQueue::new(10_000);
        let mut daemon = daemon(
            dir.path(),
            &mem,
            &cluster,
            &queue,
            resync,
            Arc::new(Metrics::new()),
        );
        daemon.pass().await;
        assert_eq!(cluster.applies_of("prod"), 1, "the hop is applied");
        mem.step(Duration::from_secs(1)).unwrap();
        Story {
            dir,
            mem,
            cluster,
            daemon,
            queue,
            hop,
        }
    }

    /// A new daemon on the same repository and cluster, as after a restart
    /// (nothing of the old one's memory kept); its metrics are `metrics`.
    fn restart(&mut self, metrics: Arc<Metrics>) {
        self.daemon = daemon(
            self.dir.path(),
            &self.mem,
            &self.cluster,
            &self.queue,
            Duration::ZERO,
            metrics,
        );
    }

    /// The plane's file renamed to a name lockstep does not read.
    fn remove_the_plane(&self) -> String {
        commit(
            self.dir.path(),
            &[
                namespaces(),
                (
                    "clusters/prod/controlplane.yaml.off",
                    common::prod("2026.2", "2026.2"),
                ),
            ],
            "prod out of Git",
        )
    }

    /// Passes (statuses delivered to git notes) until the daemon and the
    /// operator have nothing left to do.
    async fn until_idle(&mut self) {
        let forge = AnyForge::Notes(Notes::open(self.dir.path()).unwrap());
        let metrics = Metrics::new();
        for _ in 0..500 {
            let out = self.daemon.pass().await;
            assert!(deliver_now(&self.queue, &forge, &metrics, &RetryPolicy::default()).await);
            let busy = self.mem.step(Duration::from_secs(3600)).unwrap();
            if !out.busy && !busy {
                return;
            }
        }
        panic!("never idle: {:?}", self.daemon.unit_reports());
    }

    fn plane(&self) -> Next {
        let key = Key::new(Kind::ControlPlane, "openstack", "prod");
        self.daemon.unit_reports()[&key].next.clone()
    }

    /// The statuses git notes hold for `sha`.
    fn notes(&self, sha: &str) -> String {
        common::tree::notes(self.dir.path(), sha)
    }
}

#[tokio::test]
async fn a_plane_removed_mid_hop_is_followed_to_its_end_and_not_applied_again() {
    let mut s = Story::new().await;
    let gone = s.remove_the_plane();
    s.until_idle().await;
    assert_eq!(
        s.cluster.applies_of("prod"),
        1,
        "nothing of the plane is applied after it left Git"
    );
    // The hop completed and is reported done (not blocked, not waiting).
    assert_eq!(s.plane(), Next::Done(1));
    let w = s.mem.world().unwrap();
    let nova = &w.objects[&Key::new(Kind::Nova, "openstack", "prod-nova")];
    assert_eq!(nova.status.installed_release.as_deref(), Some("2026.2"));
    drop(w);
    let hop = s.notes(&s.hop);
    assert!(
        hop.contains("success") && !hop.contains("pending"),
        "the hop's statuses settled: {hop}"
    );
    assert!(s.notes(&gone).contains("success"), "{}", s.notes(&gone));
}

#[tokio::test]
async fn a_parked_child_of_a_removed_plane_waits_for_a_person_instead_of_a_re_apply() {
    let mut s = Story::new().await;
    // An edit outside Git to one child's target, mid-hop: the operator
    // parks it (UpgradeTargetChanged), which lockstep repairs by applying
    // the plane's step again, while the plane is in Git.
    let child = Key::new(Kind::Nova, "openstack", "prod-nova");
    {
        let mut w = s.mem.world().unwrap();
        let image = w.objects[&child]
            .image
            .reference()
            .replace("2026.2", "2027.1");
        let image = ImageRef::parse_reference(&image).unwrap();
        w.apply(&child, Some("2027.1".into()), image).unwrap();
    }
    s.remove_the_plane();
    let mut last = None;
    for _ in 0..20 {
        last = Some(s.daemon.pass().await);
        s.mem.step(Duration::from_secs(60)).unwrap();
    }
    assert_eq!(
        s.cluster.applies_of("prod"),
        1,
        "the plane left Git: it is not re-applied to repair"
    );
    assert!(
        last.is_some_and(|o| !o.busy),
        "it waits on a person: a bounded run ends"
    );
    let person: Vec<String> = s
        .daemon
        .needs_person()
        .into_iter()
        .map(|p| format!("{p:?}"))
        .collect();
    assert!(
        person
            .iter()
            .any(|p| p.contains("does not re-assert it") && p.contains("removed from Git in")),
        "a person is asked: {person:?}; {:?}; {:?}",
        s.daemon.unit_reports(),
        s.mem.world().unwrap().objects[&child]
    );
}

/// A child parked again after every re-assert of its plane (a tool outside
/// Git that keeps editing it, or an operator that keeps refusing): the
/// plane is applied again within the repair budget and its backoff, each
/// re-assert counted in the child's repair record, then a person is told
/// and the unit stops asking. It was applied every pass, for ever.
#[tokio::test]
async fn a_child_parked_after_every_re_assert_is_reported_once_the_budget_is_spent() {
    let mut s = Story::new().await;
    let child = Key::new(Kind::Nova, "openstack", "prod-nova");
    // The release edited, the plane's image kept: the operator parks the
    // child (ImageReleaseMismatch), and only the plane's apply clears it.
    let park = |s: &Story| {
        let mut w = s.mem.world().unwrap();
        let image = w.objects[&child].image.clone();
        w.apply(&child, Some("2027.1".into()), image).unwrap();
    };
    park(&s);
    let mut applied = s.cluster.applies_of("prod");
    let mut last = None;
    for _ in 0..200 {
        let out = s.daemon.pass().await;
        if s.cluster.applies_of("prod") > applied {
            applied = s.cluster.applies_of("prod");
            park(&s);
        }
        s.mem.step(Duration::from_secs(60)).unwrap();
        last = Some(out);
    }
    assert_eq!(
        s.cluster.applies_of("prod"),
        1 + 3,
        "the hop, then three re-asserts (the default budget)"
    );
    let record = lockstep::cluster::Cluster::get(&s.mem, &child)
        .await
        .unwrap()
        .and_then(|o| o.status.repair_record)
        .unwrap_or_default();
    assert!(record.contains("\"attempts\":3"), "{record}");
    let person: Vec<String> = s
        .daemon
        .needs_person()
        .into_iter()
        .map(|p| format!("{p:?}"))
        .collect();
    assert!(
        person.iter().any(|p| p
            .contains("after 3 repairs of this hop (re-asserts of its ControlPlane prod")
            && p.contains("budget is spent")),
        "{person:?}"
    );
    assert!(
        last.is_some_and(|o| !o.busy),
        "the unit waits on a person, not busy"
    );
}

/// Something outside Git (another controller, a script) keeps setting a
/// child of the plane to its own image after the hop completed. lockstep
/// applies Git's step again, as a GitOps tool self-heals, but not every
/// pass: the first drift at once, then with the repair backoff (60 s,
/// doubling, capped at 15 minutes), so the two writers do not fight at the
/// speed of their watches. An hour of passes a minute apart: 60 applies
/// before, now seven.
/// A restart keeps no count of re-applies, but the object keeps the digest
/// of the step applied to it: the first drift after a restart is applied
/// again at once, as before, and counted as what it is, a re-apply with
/// its Event and metric, not as a new hop.
#[tokio::test]
async fn after_a_restart_the_first_drift_is_a_re_apply_not_a_new_hop() {
    let mut s = Story::reading_every_unit_each(Duration::ZERO).await;
    s.until_idle().await;
    assert!(matches!(s.plane(), Next::Done(_)), "{:?}", s.plane());
    let metrics = Arc::new(Metrics::new());
    s.restart(metrics.clone());
    s.daemon.pass().await;
    let before = s.cluster.applies_of("prod");
    let child = Key::new(Kind::Nova, "openstack", "prod-nova");
    let theirs = ImageRef::parse_reference("mirror.example/c5c3/nova:2026.2").unwrap();
    s.mem
        .world()
        .unwrap()
        .objects
        .get_mut(&child)
        .unwrap()
        .image = theirs.clone();
    s.daemon.pass().await;
    assert_eq!(
        s.cluster.applies_of("prod"),
        before + 1,
        "applied again at once"
    );
    let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
    let events: Vec<String> = s
        .mem
        .world()
        .unwrap()
        .event_reasons(&plane)
        .iter()
        .map(|r| r.to_string())
        .collect();
    assert_eq!(
        events.iter().filter(|r| *r == "DriftReapplied").count(),
        1,
        "{events:?}"
    );
    let text = metrics.encode();
    let value = |line: &str| {
        text.lines()
            .find(|l| l.starts_with(line))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(
        value(r#"lockstep_repairs_total{kind="ControlPlane",action="reapply-drift"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(r#"lockstep_hops_applied_total{kind="ControlPlane"}"#),
        None,
        "not a new hop: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_the_cluster_keeps_leaving_is_applied_again_with_a_backoff() {
    let mut s = Story::reading_every_unit_each(Duration::ZERO).await;
    s.until_idle().await;
    assert!(matches!(s.plane(), Next::Done(_)), "{:?}", s.plane());
    let child = Key::new(Kind::Nova, "openstack", "prod-nova");
    let theirs = ImageRef::parse_reference("mirror.example/c5c3/nova:2026.2").unwrap();
    let drift = |s: &Story| {
        s.mem
            .world()
            .unwrap()
            .objects
            .get_mut(&child)
            .unwrap()
            .image = theirs.clone();
    };
    let before = s.cluster.applies_of("prod");
    drift(&s);
    let mut applied_at = Vec::new();
    let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
    for minute in 0..60 {
        s.daemon.pass().await;
        let n = s.cluster.applies_of("prod");
        if n > before + applied_at.len() {
            applied_at.push(minute);
            drift(&s);
        }
        if minute == 2 {
            // Between two re-applies the unit says what it waits for (the
            // dashboard: not a pre-flight gate, not "applying").
            let w = s.daemon.unit_reports()[&plane].waiting.clone();
            assert!(
                w.as_ref().is_some_and(|w| w.on == WaitOn::Drift
                    && w.message.contains("(2 in a row")
                    && w.message.ends_with("after a backoff of 2m")),
                "{w:?}"
            );
        }
        s.mem.advance(Duration::from_secs(60));
    }
    // At once, then after 1, 2, 4, 8, 15 and 15 minutes.
    assert_eq!(applied_at, [0, 1, 3, 7, 15, 30, 45]);
    // Each one an Event; past the repair budget a person is told.
    let events = s
        .mem
        .world()
        .unwrap()
        .event_reasons(&plane)
        .iter()
        .filter(|r| **r == "DriftReapplied")
        .count();
    assert_eq!(events, applied_at.len());
    let told: Vec<String> = s
        .daemon
        .needs_person()
        .into_iter()
        .map(|n| n.reason)
        .collect();
    assert!(
        told.len() == 1
            && told[0].contains("left Git's step outside Git")
            && told[0].contains("find the other writer"),
        "{told:?}"
    );
    // The other writer stops: the next apply sets the child right for good.
    let n = s.cluster.applies_of("prod");
    for _ in 0..20 {
        s.daemon.pass().await;
        s.mem.advance(Duration::from_secs(60));
    }
    assert_eq!(
        s.cluster.applies_of("prod"),
        n + 1,
        "one more apply, then none"
    );
    assert!(s.daemon.needs_person().is_empty(), "the fight is over");
    assert_ne!(
        s.mem.world().unwrap().objects[&child].image,
        theirs,
        "Git's image is back"
    );
}
