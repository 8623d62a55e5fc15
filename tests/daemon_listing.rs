//! When the daemon reads the cluster. A pass that reads every unit lists
//! the cluster ([`Cluster::snapshot`]). The listing starts beside the
//! judgment, so that its round trips overlap the parse of the tree, and a
//! judgment that keeps failing with nothing judged does not list the
//! cluster on every pass. Watch events at the versions the last reads saw
//! (a watch's first listing, a re-list) start no pass.
//!
//! The cluster is the in-process simulated operator behind a wrapper that
//! logs lockstep's calls (the real C5C3 operators cannot run here; the
//! listing against a real kube-apiserver is `tests/run_kube.rs` and
//! `tests/cluster_kube.rs`). The repository is real Git.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{Cluster, ClusterError, ClusterObject, Snapshot};
use lockstep::daemon::{Daemon, Options};
use lockstep::forge::delivery::StatusQueue;
use lockstep::kind::Key;
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

const HOUR: Duration = Duration::from_secs(3600);

/// A watch the test feeds.
type Feed = tokio::sync::mpsc::UnboundedReceiver<(Key, Option<String>)>;

/// The simulated cluster, logging the calls this test is about; the first
/// `failing` reads of the record fail as an unreachable API server's would.
/// It keeps the version of each object as last read, and its watch is the
/// test's `feed` when there is one.
#[derive(Clone)]
struct Logged {
    inner: MemoryCluster,
    log: Arc<Mutex<Vec<&'static str>>>,
    failing: Arc<AtomicUsize>,
    read: Arc<Mutex<HashMap<Key, String>>>,
    feed: Arc<Mutex<Option<Feed>>>,
    /// Milliseconds the next read of the record takes (a slow judgment).
    slow: Arc<AtomicU64>,
}

impl Logged {
    fn note(&self, what: &'static str) {
        self.log.lock().unwrap().push(what);
    }

    fn calls(&self, what: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|w| **w == what)
            .count()
    }
}

impl Cluster for Logged {
    crate::forward_cluster!(
        apply,
        dry_run,
        applied_object,
        jobs,
        deployments,
        events,
        watch,
        delete_job,
        set_repair_record,
        record_event
    );
    fn snapshot(
        &self,
    ) -> impl Future<Output = Result<Option<Snapshot>, ClusterError>> + Send + 'static {
        self.note("snapshot");
        // No cheaper way than one read per object: the units step reads
        // them one by one, as the memory cluster itself says.
        self.inner.snapshot()
    }
    async fn load_record(&self, name: &str) -> Result<Option<String>, ClusterError> {
        let failing = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            self.note("load_record failed");
            return Err(ClusterError::Unavailable("connection refused".into()));
        }
        self.note("load_record");
        let slow = self.slow.swap(0, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(slow)).await;
        self.inner.load_record(name).await
    }
    async fn save_record(
        &self,
        name: &str,
        text: &str,
        base: Option<&str>,
    ) -> Result<(), ClusterError> {
        self.note("save_record");
        self.inner.save_record(name, text, base).await
    }
    async fn get(&self, key: &Key) -> Result<Option<ClusterObject>, ClusterError> {
        let o = self.inner.get(key).await?;
        if let Some(o) = &o {
            let mut read = self.read.lock().unwrap();
            read.insert(key.clone(), o.resource_version.clone());
        }
        Ok(o)
    }
    fn watch_versions(&self) -> futures::stream::BoxStream<'static, (Key, Option<String>)> {
        use futures::StreamExt;
        match self.feed.lock().unwrap().take() {
            Some(mut rx) => futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed(),
            None => self.inner.watch_versions(),
        }
    }
}

/// The example fleet in a real repository, and a daemon on it whose
/// cluster's first `failing` record reads fail, reading every unit again
/// every `resync`, polling every `poll`.
fn daemon(
    failing: usize,
    resync: Duration,
    poll: Duration,
) -> (Daemon<Logged, Source>, Logged, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let world = World::new(Params::default());
    let mem = MemoryCluster::new(world);
    let cluster = Logged {
        inner: mem.clone(),
        log: Arc::default(),
        failing: Arc::new(AtomicUsize::new(failing)),
        read: Arc::default(),
        feed: Arc::default(),
        slow: Arc::default(),
    };
    let source = Source::open(Origin::Local(dir.path().to_owned()), "main").unwrap();
    let opts = Options {
        poll,
        resync,
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(&mem, &source, &opts).unwrap();
    let d = Daemon::new(
        opts,
        source,
        cluster.clone(),
        clock,
        StatusQueue::new(10_000),
        Arc::new(Metrics::new()),
    );
    (d, cluster, dir)
}

#[tokio::test]
async fn the_first_pass_lists_the_cluster_before_it_judges() {
    let (mut d, cluster, _dir) = daemon(0, Duration::from_secs(600), HOUR);
    let out = d.pass().await;
    assert_eq!(out.source_error, None);
    assert!(
        !d.unit_reports().is_empty(),
        "the first pass read the units"
    );
    let log = cluster.log.lock().unwrap().clone();
    // The judgment reads the record, judges, then saves the record: the
    // listing was started before all of it.
    let at = |what: &str| log.iter().position(|w| *w == what);
    assert_eq!(cluster.calls("snapshot"), 1, "{log:?}");
    assert!(
        at("snapshot") < at("load_record") && at("load_record") < at("save_record"),
        "the listing starts before the judgment: {log:?}"
    );
    // A pass within the resync period lists nothing.
    d.pass().await;
    assert_eq!(cluster.calls("snapshot"), 1, "{log:?}");
}

#[tokio::test]
async fn a_listing_older_than_the_judgment_is_taken_again() {
    // The judgment outlasts the listing by more than 5 s: the units are not
    // decided on state read that long before.
    let (mut d, cluster, _dir) = daemon(0, Duration::from_secs(600), HOUR);
    cluster.slow.store(5_500, Ordering::SeqCst);
    d.pass().await;
    assert!(!d.unit_reports().is_empty());
    let log = cluster.log.lock().unwrap().clone();
    assert_eq!(
        log,
        ["snapshot", "load_record", "save_record", "snapshot"],
        "listed beside the judgment, then again after it"
    );
}

#[tokio::test]
async fn a_judgment_failing_with_nothing_judged_lists_the_cluster_once() {
    // Every pass reads every unit (resync 0), so every pass may list.
    let (mut d, cluster, _dir) = daemon(3, Duration::ZERO, HOUR);
    for _ in 0..3 {
        let out = d.pass().await;
        assert!(out.source_error.is_some(), "the record cannot be read");
        assert!(d.unit_reports().is_empty());
    }
    // The first failing pass started a listing and threw it away; the
    // next ones did not start one.
    assert_eq!(cluster.calls("load_record failed"), 3);
    assert_eq!(cluster.calls("snapshot"), 1);
    // The record is readable again: the pass judges, then lists the
    // cluster after the judgment (no longer beside it), and reads the units.
    let out = d.pass().await;
    assert_eq!(out.source_error, None);
    assert!(!d.unit_reports().is_empty());
    assert_eq!(cluster.calls("snapshot"), 2);
    let log = cluster.log.lock().unwrap().clone();
    let last = log.iter().rposition(|w| *w == "snapshot");
    let judged = log.iter().rposition(|w| *w == "save_record");
    assert!(judged < last, "listed after the judgment: {log:?}");
    // The judgment succeeded: the next pass lists beside it again (its
    // head is judged already, so it reads no record).
    d.pass().await;
    assert_eq!(cluster.calls("snapshot"), 3);
    let log = cluster.log.lock().unwrap().clone();
    assert_eq!(log.last(), Some(&"snapshot"), "{log:?}");
}

/// Runs the daemon (its watch fed by the test) beside `driver`, which is
/// given the feed, the versions the daemon read, and its pass count. The
/// driver starts once the example fleet's hops are done and passes come
/// only from the poll (none for 300 ms).
async fn with_fed_watch<F, Fut>(poll: Duration, driver: F)
where
    F: FnOnce(Feeder, Vec<(Key, String)>, Box<dyn Fn() -> u64 + Send>) -> Fut,
    Fut: Future<Output = ()>,
{
    let (mut d, cluster, _dir) = daemon(0, Duration::from_secs(600), poll);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    *cluster.feed.lock().unwrap() = Some(rx);
    let metrics = d.metrics().clone();
    let passes = move || metrics.passes.get();
    let (_triggers, triggers) = tokio::sync::mpsc::channel(1);
    let (_leader_tx, leader) = tokio::sync::watch::channel(true);
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = stop.clone();
    let drive = async move {
        let mut last = u64::MAX;
        while passes() != last {
            last = passes();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(last >= 1);
        let read: Vec<(Key, String)> = cluster.read.lock().unwrap().clone().into_iter().collect();
        assert!(read.len() >= 10, "the example fleet's objects: {read:?}");
        driver(tx, read, Box::new(passes)).await;
        stopped.notify_one();
    };
    let run = d.run(triggers, leader, stop.notified());
    tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(run, drive) })
        .await
        .expect("the test ends");
}

type Feeder = tokio::sync::mpsc::UnboundedSender<(Key, Option<String>)>;

/// A watch's listing: every object the daemon read, at the version it read.
fn listing(tx: &Feeder, read: &[(Key, String)]) {
    for (k, v) in read {
        tx.send((k.clone(), Some(v.clone()))).unwrap();
    }
}

#[tokio::test]
async fn watch_events_at_versions_already_read_start_no_pass() {
    // The poll is an hour away: every pass below is the watch's doing.
    with_fed_watch(HOUR, |tx, read, passes| async move {
        let before = passes();
        for _ in 0..5 {
            listing(&tx, &read);
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(passes(), before, "no pass for versions already read");
        // One object at another version: a pass.
        let (k, _) = &read[0];
        tx.send((k.clone(), Some("another".into()))).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while passes() == before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "a change starts a pass"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn the_poll_is_not_delayed_by_watch_events_that_change_nothing() {
    // Events that change nothing every 100 ms for 2.4 s, polls every
    // 400 ms: the polls go on (were each event to restart the wait, the
    // poll would never come).
    with_fed_watch(Duration::from_millis(400), |tx, read, passes| async move {
        let before = passes();
        for _ in 0..24 {
            listing(&tx, &read);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let polled = passes() - before;
        assert!(polled >= 3, "{polled} passes in 2.4 s of 400 ms polls");
    })
    .await;
}
