//! lockstep's record of live verdicts is written only over what the
//! writer read. Between a pass's read of the record and its write, another
//! process may write it: a replica that led meanwhile, or this one's
//! successor while this one has not yet noticed it lost the lease. A write
//! over that would put back an older watermark and drop the other's
//! verdicts. The write hands back the text it judged from, and is refused
//! when the record moved: nothing that record decided is applied, and the
//! next pass judges again from the other's record.
//!
//! The simulated cluster behind a wrapper that writes the record as
//! another process would, right after this one reads it (no real process
//! can be made to write at a chosen call; `tests/cluster_kube.rs` checks
//! the compare and swap against a real API server).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{FleetRepo, nova};
use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{Cluster, ClusterError};
use lockstep::daemon::record::{self, Record};
use lockstep::daemon::{Daemon, Options};
use lockstep::forge::delivery::StatusQueue;
use lockstep::kind::{Key, Kind};
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

const NOVA: &str = "standalone/compute/nova.yaml";

/// The simulated cluster; armed, the next read of the record is followed
/// by another process's write of it (`other`'s text), once.
#[derive(Clone)]
struct WrittenMeanwhile {
    inner: MemoryCluster,
    armed: Arc<AtomicBool>,
    other: Arc<std::sync::Mutex<String>>,
}

impl Cluster for WrittenMeanwhile {
    crate::forward_cluster!(
        applied_object,
        save_record,
        get,
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
    async fn load_record(&self, name: &str) -> Result<Option<String>, ClusterError> {
        let read = self.inner.load_record(name).await?;
        if self.armed.swap(false, Ordering::SeqCst) {
            let other = self.other.lock().expect("text").clone();
            self.inner
                .save_record(name, &other, read.as_deref())
                .await?;
        }
        Ok(read)
    }
}

fn key() -> Key {
    Key {
        kind: Kind::Nova,
        namespace: "compute".into(),
        name: "nova".into(),
    }
}

/// A daemon on `repo`'s main over `cluster`. Every pass reads every unit
/// (`resync` zero): this harness's passes do not read the watch.
fn daemon<C: Cluster + 'static>(
    repo: &FleetRepo,
    cluster: C,
    mem: &MemoryCluster,
) -> Daemon<C, Source> {
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(10),
        resync: Duration::ZERO,
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

fn release(mem: &MemoryCluster) -> Option<String> {
    mem.world()
        .expect("world")
        .objects
        .get(&key())
        .and_then(|o| o.release.clone())
}

async fn until_idle<C: Cluster + 'static>(d: &mut Daemon<C, Source>, mem: &MemoryCluster) {
    for _ in 0..2_000 {
        let out = d.pass().await;
        let busy = mem.step(Duration::from_secs(60)).expect("step");
        if !out.busy && !busy {
            return;
        }
    }
    panic!("never idle");
}

#[tokio::test]
async fn a_record_written_meanwhile_is_not_written_over() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let first = repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let cluster = WrittenMeanwhile {
        inner: mem.clone(),
        armed: Arc::default(),
        other: Arc::default(),
    };
    let mut d = daemon(&repo, cluster.clone(), &mem);
    until_idle(&mut d, &mem).await;
    assert_eq!(release(&mem).as_deref(), Some("2026.1"));
    let name = record::name("t");
    let ours = mem
        .load_record(&name)
        .await
        .expect("read")
        .expect("written");
    assert!(ours.contains(&first), "the watermark is the head: {ours}");

    // A hop pushed; as this process reads the record, another writes it:
    // its own record, with an entry this one has never seen (a deletion
    // it saw, of an object this test's Git does not hold).
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    let hop = repo.commit("nova to 2026.2");
    let mut theirs = Record::parse(&ours).expect("parsed");
    let elsewhere = Key::new(Kind::Glance, "image", "elsewhere");
    theirs.set_deleted(&[(elsewhere, "2026.1".to_owned())].into());
    let (theirs, _) = theirs.fit(0).expect("fits");
    *cluster.other.lock().expect("text") = theirs.clone();
    cluster.armed.store(true, Ordering::SeqCst);

    let out = d.pass().await;
    assert_eq!(
        mem.load_record(&name).await.expect("read").as_deref(),
        Some(theirs.as_str()),
        "the other process's record was written over"
    );
    assert!(
        out.source_error
            .as_deref()
            .is_some_and(|e| e.contains("another lockstep process")),
        "the pass says why it judged nothing: {:?}",
        out.source_error
    );
    assert_eq!(
        release(&mem).as_deref(),
        Some("2026.1"),
        "nothing is applied on a judgment that could not be recorded"
    );

    // The next pass reads the other's record and judges from it.
    until_idle(&mut d, &mem).await;
    assert_eq!(release(&mem).as_deref(), Some("2026.2"));
    let now = mem.load_record(&name).await.expect("read").expect("kept");
    assert!(now.contains(&hop), "the watermark moved on: {now}");
}

/// Passes until idle; the releases the cluster's Nova had along the way,
/// repeats folded.
async fn releases_until_idle(
    d: &mut Daemon<MemoryCluster, Source>,
    mem: &MemoryCluster,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..2_000 {
        let out = d.pass().await;
        let now = release(mem).unwrap_or_else(|| "absent".into());
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        let busy = mem.step(Duration::from_secs(60)).expect("step");
        if !out.busy && !busy {
            return seen;
        }
    }
    panic!("never idle: {seen:?}");
}

/// Another process led for a while (this one had not noticed it lost the
/// lease): Nova was added in Git at 2026.1, it installed it, saw it
/// deleted by hand and recorded the deletion. This one never saw Nova;
/// its next write of the record keeps that deletion all the same, since
/// the record's list changed since this one last read it. Written over,
/// Nova would be created afresh at Git's 2026.2, its 2026.1 database
/// migrated as if new.
#[tokio::test]
async fn a_deletion_another_process_recorded_is_kept() {
    let repo = FleetRepo::new();
    repo.write(
        "standalone/compute/other.yaml",
        nova("other", "2026.1", "2026.1"),
    );
    repo.commit("another nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let mut d = daemon(&repo, mem.clone(), &mem);
    assert_eq!(releases_until_idle(&mut d, &mem).await, ["absent"]);
    let name = record::name("t");
    let ours = mem
        .load_record(&name)
        .await
        .expect("read")
        .expect("written");

    // The other process: Nova added, installed, deleted by hand; its
    // deletion recorded over this one's record, with its watermark.
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let added = repo.commit("nova at 2026.1");
    let mut theirs = Record::parse(&ours).expect("parsed");
    theirs.watermark = Some(added);
    theirs.set_deleted(&[(key(), "2026.1".to_owned())].into());
    let (theirs, _) = theirs.fit(0).expect("fits");
    mem.save_record(&name, &theirs, Some(&ours))
        .await
        .expect("written meanwhile");

    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    assert_eq!(
        releases_until_idle(&mut d, &mem).await,
        ["2026.1", "2026.2"],
        "re-created where it was, then the hop"
    );
    let end =
        Record::parse(&mem.load_record(&name).await.expect("read").expect("kept")).expect("parsed");
    assert!(
        end.deleted().is_empty(),
        "back in the cluster: {:?}",
        end.deleted()
    );
}

/// The same through the write of the deleted objects alone (no new head,
/// so no judgment writes the record): this process sees Nova deleted; as
/// it reads the record to write that down, another process writes the
/// record with a deletion of its own. The write keeps both.
#[tokio::test]
async fn a_deletion_written_meanwhile_is_kept_beside_this_one_s() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let cluster = WrittenMeanwhile {
        inner: mem.clone(),
        armed: Arc::default(),
        other: Arc::default(),
    };
    let mut d = daemon(&repo, cluster.clone(), &mem);
    until_idle(&mut d, &mem).await;
    let name = record::name("t");
    let ours = mem
        .load_record(&name)
        .await
        .expect("read")
        .expect("written");
    let elsewhere = Key::new(Kind::Glance, "image", "elsewhere");
    let mut theirs = Record::parse(&ours).expect("parsed");
    theirs.set_deleted(&[(elsewhere.clone(), "2026.1".to_owned())].into());
    let (theirs, _) = theirs.fit(0).expect("fits");
    *cluster.other.lock().expect("text") = theirs.clone();

    // Nova deleted by hand.
    mem.world().expect("world").objects.remove(&key());
    cluster.armed.store(true, Ordering::SeqCst);
    // One pass: the other's write comes as this one reads the record; the
    // write of Nova's deletion that follows keeps the other's beside it.
    d.pass().await;
    assert!(!cluster.armed.load(Ordering::SeqCst), "the record was read");
    let now = Record::parse(&mem.load_record(&name).await.expect("read").expect("kept"))
        .expect("parsed")
        .deleted();
    assert_eq!(
        now.get(&key()).map(String::as_str),
        Some("2026.1"),
        "{now:?}"
    );
    assert_eq!(
        now.get(&elsewhere).map(String::as_str),
        Some("2026.1"),
        "the other's deletion was written over: {now:?}"
    );
}
