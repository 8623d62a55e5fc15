//! A repair deletes the phase Job it read failed, and no other. Between
//! reading the Jobs and deleting one, lockstep counts the re-run on the
//! object (a round trip), and meanwhile the Job may be deleted and created
//! again under its name (a person's `lockstep retry`, the operator after a
//! hash change): the delete carries the failed Job's uid as a
//! precondition, so the new run is left alone. The simulated cluster
//! behind a wrapper that re-creates the Job at that moment (no real
//! operator can be made to act at a chosen call; `tests/cluster_kube.rs`
//! checks the precondition against a real API server).

mod common;

use std::time::Duration;

use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{ApplyRequest, Cluster, ClusterError};
use lockstep::kind::{Key, Kind};
use lockstep::repair::{Action, RepairHistory};
use lockstep::sim::{Fault, JobKind, JobState, Params, World};

/// The simulated cluster; counting a repair re-creates the Job, running.
#[derive(Clone)]
struct RerunMeanwhile {
    inner: MemoryCluster,
}

impl Cluster for RerunMeanwhile {
    crate::forward_cluster!(
        load_record,
        applied_object,
        save_record,
        get,
        jobs,
        deployments,
        events,
        watch,
        delete_job,
        record_event,
        dry_run,
        apply
    );
    async fn set_repair_record(&self, key: &Key, record: &str) -> Result<(), ClusterError> {
        self.inner.set_repair_record(key, record).await?;
        let mut w = self.inner.world().expect("world");
        let id = ("compute".to_owned(), "nova-db-expand".to_owned());
        let mut again = w.jobs.get(&id).cloned().expect("the failed Job");
        again.state = JobState::Running;
        again.uid += 1_000;
        w.jobs.insert(id, again);
        Ok(())
    }
}

#[tokio::test]
async fn a_job_created_again_while_the_repair_counts_is_not_deleted() {
    let nova = Key::new(Kind::Nova, "compute", "nova");
    let mut w = World::new(Params::default());
    w.install_steady(
        nova.clone(),
        Some("2026.1".into()),
        lockstep::release::ImageRef::parse_reference("ghcr.io/c5c3/nova:2026.1").expect("image"),
        None,
    );
    w.faults.push(Fault::JobFails {
        object: "nova".into(),
        job: JobKind::Expand,
        tries: u32::MAX,
    });
    let mem = MemoryCluster::new(w);
    mem.apply(&ApplyRequest {
        key: nova.clone(),
        release: Some("2026.2".into()),
        image: Some(
            lockstep::release::ImageRef::parse_reference("ghcr.io/c5c3/nova:2026.2")
                .expect("image"),
        ),
        overrides: vec![],
        document: None,
    })
    .await
    .expect("applied");
    for _ in 0..100 {
        mem.step(Duration::from_secs(600)).expect("step");
        let failed = mem
            .world()
            .expect("world")
            .job("compute", "nova-db-expand")
            .is_some_and(|j| j.state == JobState::Failed);
        if failed {
            break;
        }
    }
    let cluster = RerunMeanwhile { inner: mem.clone() };
    let mut history = RepairHistory::default();
    let deleted = lockstep::repair::execute(
        &cluster,
        &nova,
        &Action::DeleteJob {
            namespace: "compute".into(),
            name: "nova-db-expand".into(),
            attempt: 1,
        },
        &mut history,
        Duration::from_secs(1),
        "2026.2",
        jiff::Timestamp::from_second(1_800_000_000).expect("time"),
    )
    .await
    .expect("executed");
    assert!(!deleted, "reported a delete");
    let w = mem.world().expect("world");
    let job = w
        .job("compute", "nova-db-expand")
        .expect("the re-run was deleted");
    assert_eq!(job.state, JobState::Running);
    assert!(
        !w.events.iter().any(|e| e.reason == "RepairJobDeleted"),
        "an Event says a Job was deleted: {:?}",
        w.events
    );
}
