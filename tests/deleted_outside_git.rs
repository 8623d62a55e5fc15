//! An object deleted from the cluster outside Git (`kubectl delete` by a
//! person, another tool) while lockstep runs. Its database outlives it, so
//! re-creating it at Git's newest release would have the operator migrate
//! the database across every release in between: lockstep re-creates it
//! where it was and takes the hops from there, or, when Git holds no step
//! there, waits for a person. The real engine over the simulated operator.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{FleetRepo, nova};
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options};
use lockstep::forge::delivery::StatusQueue;
use lockstep::kind::{Key, Kind};
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

const NOVA: &str = "standalone/compute/nova.yaml";

fn key() -> Key {
    Key {
        kind: Kind::Nova,
        namespace: "compute".into(),
        name: "nova".into(),
    }
}

/// A daemon on `repo`'s main over `mem`, judging the commits after
/// `since` (`--since`: the tree there is taken as given), or all.
fn daemon(
    repo: &FleetRepo,
    mem: &MemoryCluster,
    since: Option<String>,
) -> Daemon<MemoryCluster, Source> {
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
        mem.clone(),
        clock,
        StatusQueue::new(10_000),
        Arc::new(Metrics::new()),
    )
}

/// The same daemon restarted: the simulated cluster is left as it is (not
/// seeded from Git again, as a real cluster would not be).
fn restarted(
    repo: &FleetRepo,
    mem: &MemoryCluster,
    since: Option<String>,
) -> Daemon<MemoryCluster, Source> {
    restarted_on(repo, mem.clone(), mem, since)
}

/// [`restarted`], talking to `cluster` (a wrapper around `mem`).
fn restarted_on<C: lockstep::cluster::Cluster + 'static>(
    repo: &FleetRepo,
    cluster: C,
    mem: &MemoryCluster,
    since: Option<String>,
) -> Daemon<C, Source> {
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(10),
        since,
        ..Options::default()
    };
    Daemon::new(
        opts,
        source,
        cluster,
        Arc::new(lockstep::daemon::VirtualClock::new(mem.clone())),
        StatusQueue::new(10_000),
        Arc::new(Metrics::new()),
    )
}

/// Passes and simulated minutes until neither has work left; the releases
/// the cluster's Nova had along the way, repeats folded.
async fn until_idle(d: &mut Daemon<MemoryCluster, Source>, mem: &MemoryCluster) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..2_000 {
        let out = d.pass().await;
        let release = mem
            .world()
            .expect("world")
            .objects
            .get(&key())
            .and_then(|o| o.release.clone())
            .unwrap_or_else(|| "absent".into());
        if seen.last() != Some(&release) {
            seen.push(release);
        }
        let busy = mem.step(Duration::from_secs(60)).expect("step");
        if !out.busy && !busy {
            return seen;
        }
    }
    panic!("never idle: {seen:?}");
}

/// `kubectl delete` of the Nova, as the watch reports it.
fn deleted(mem: &MemoryCluster) {
    let mut w = mem.world().expect("world");
    w.objects.remove(&key());
    w.changed.insert(key());
}

#[tokio::test]
async fn a_deleted_object_is_recreated_where_it_was_and_hops_from_there() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let mut d = daemon(&repo, &mem, None);
    assert_eq!(
        until_idle(&mut d, &mem).await.last().map(String::as_str),
        Some("2026.2")
    );
    // Two hops in Git, and Nova deleted by hand before they start.
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    repo.commit("nova to 2027.1");
    repo.write(NOVA, nova("nova", "2027.2", "2027.2"));
    repo.commit("nova to 2027.2");
    deleted(&mem);
    let seen = until_idle(&mut d, &mem).await;
    assert_eq!(
        seen,
        ["2026.2", "2027.1", "2027.2"],
        "re-created at 2026.2, then one hop at a time (before: at 2027.2 at once)"
    );
}

#[tokio::test]
async fn a_deleted_object_with_no_step_where_it_was_waits_for_a_person() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    // Taken as given: Git holds no step at 2026.1 to re-create it from.
    let given = repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let mut d = daemon(&repo, &mem, Some(given));
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    repo.commit("nova to 2027.1");
    // One pass reads Nova at 2026.1 (and starts its hop); then it is
    // deleted by hand.
    d.pass().await;
    deleted(&mem);
    let seen = until_idle(&mut d, &mem).await;
    assert_eq!(seen, ["absent"], "re-created past its database's release");
    let people = d.needs_person();
    assert!(
        people.iter().any(|p| p
            .reason
            .contains("deleted from the cluster outside Git at 2026.1")),
        "{people:?}"
    );
    // A person re-creates it where it was: lockstep takes it from there.
    {
        let mut w = mem.world().expect("world");
        w.changed.insert(key());
        w.install_steady(
            key(),
            Some("2026.1".into()),
            lockstep::release::ImageRef::parse_reference("ghcr.io/c5c3/nova:2026.1")
                .expect("image"),
            None,
        );
    }
    // (The kube watch reports the new object; this harness's passes do not
    // read the watch, so a restarted daemon, which reads every unit, finds
    // it.)
    let mut d = daemon(&repo, &mem, None);
    let seen = until_idle(&mut d, &mem).await;
    assert_eq!(
        seen.last().map(String::as_str),
        Some("2027.1"),
        "{seen:?} {:?}",
        d.needs_person()
    );
}

/// The record of what was deleted outside Git, as the cluster keeps it.
async fn recorded_deletions(mem: &MemoryCluster) -> String {
    use lockstep::cluster::Cluster as _;
    let name = lockstep::daemon::record::name("t");
    let text = mem
        .load_record(&name)
        .await
        .expect("the record reads")
        .expect("a record");
    lockstep::daemon::record::Record::parse(&text)
        .expect("a record that parses")
        .deleted
        .iter()
        .map(|d| format!("{}@{}", d.object, d.release))
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test]
async fn a_deletion_seen_outlives_a_restart() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let given = repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let mut d = daemon(&repo, &mem, Some(given.clone()));
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    repo.commit("nova to 2027.1");
    d.pass().await;
    deleted(&mem);
    assert_eq!(until_idle(&mut d, &mem).await, ["absent"]);
    assert_eq!(recorded_deletions(&mem).await, "Nova/compute/nova@2026.1");
    // Someone restarts lockstep to "unstick" it. Before the record kept
    // the deletion, the new process took the Nova for a fresh install and
    // created it at 2027.1: its database migrated 2026.1 → 2027.1 at once.
    drop(d);
    let mut d = restarted(&repo, &mem, Some(given.clone()));
    assert_eq!(
        until_idle(&mut d, &mem).await,
        ["absent"],
        "created past its database's release after a restart"
    );
    let people = d.needs_person();
    assert!(
        people.iter().any(|p| p
            .reason
            .contains("deleted from the cluster outside Git at 2026.1")),
        "{people:?}"
    );
    // A person re-creates it where it was: the record forgets it, and
    // lockstep takes it on from there.
    {
        let mut w = mem.world().expect("world");
        w.changed.insert(key());
        w.install_steady(
            key(),
            Some("2026.1".into()),
            lockstep::release::ImageRef::parse_reference("ghcr.io/c5c3/nova:2026.1")
                .expect("image"),
            None,
        );
    }
    drop(d);
    let mut d = restarted(&repo, &mem, Some(given));
    let seen = until_idle(&mut d, &mem).await;
    assert_eq!(seen.last().map(String::as_str), Some("2027.1"), "{seen:?}");
    assert_eq!(recorded_deletions(&mem).await, "");
}

/// The simulated cluster; every apply also notes what lockstep's record
/// says was deleted at that moment.
#[derive(Clone)]
struct RecordAtApply {
    inner: MemoryCluster,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl lockstep::cluster::Cluster for RecordAtApply {
    crate::forward_cluster!(all_but apply);
    async fn apply(
        &self,
        req: &lockstep::cluster::ApplyRequest,
    ) -> Result<lockstep::cluster::ClusterObject, lockstep::cluster::ClusterError> {
        let recorded = recorded_deletions(&self.inner).await;
        self.seen
            .lock()
            .expect("seen")
            .push(format!("{} {:?} [{recorded}]", req.key, req.release));
        self.inner.apply(req).await
    }
}

/// A deletion is in the record before the re-creation it decides is
/// applied: a crash right after the apply leaves the next leader the same
/// evidence.
#[tokio::test]
async fn a_deletion_is_recorded_before_its_re_creation_is_applied() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let mut d = daemon(&repo, &mem, None);
    until_idle(&mut d, &mem).await;
    drop(d);
    deleted(&mem);
    let cluster = RecordAtApply {
        inner: mem.clone(),
        seen: Arc::default(),
    };
    // The process that sees the deletion knew the object before it.
    let mut d = restarted_on(&repo, cluster.clone(), &mem, None);
    {
        let mut w = mem.world().expect("world");
        w.install_steady(
            key(),
            Some("2026.2".into()),
            lockstep::release::ImageRef::parse_reference("ghcr.io/c5c3/nova:2026.2")
                .expect("image"),
            None,
        );
    }
    d.pass().await;
    deleted(&mem);
    // (This harness's passes do not read the watch: a new commit has the
    // unit read again.)
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    repo.commit("nova to 2027.1");
    for _ in 0..500 {
        let out = d.pass().await;
        let busy = mem.step(Duration::from_secs(60)).expect("step");
        if !out.busy && !busy {
            break;
        }
    }
    let seen = cluster.seen.lock().expect("seen").clone();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("Nova compute/nova Some(\"2026.2\") [Nova/compute/nova@2026.2]"),
        "re-created at 2026.2 with the deletion recorded first: {seen:?}"
    );
    assert_eq!(recorded_deletions(&mem).await, "", "forgotten once back");
}
