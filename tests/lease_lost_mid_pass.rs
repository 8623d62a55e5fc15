//! A leader that loses the lease during a pass (a slow fetch, an API server
//! away for longer than the lease's grace) while a follower takes over
//! must not go on applying from what it read before: two writers would
//! start the same hops. Leadership is checked before every write, not only
//! when a pass starts. The simulated cluster behind a wrapper that ends
//! the lease at the first apply (no real Lease can be made to expire at a
//! chosen call).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{FleetRepo, nova};
use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{ApplyRequest, Cluster, ClusterError, ClusterObject};
use lockstep::daemon::{Daemon, Options};
use lockstep::forge::delivery::StatusQueue;
use lockstep::kind::Key;
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

/// The simulated cluster; the first apply ends this process's lease.
#[derive(Clone)]
struct LeaseEnds {
    inner: MemoryCluster,
    applies: Arc<Mutex<Vec<Key>>>,
    lease: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Cluster for LeaseEnds {
    crate::forward_cluster!(all_but apply);
    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        self.applies.lock().unwrap().push(req.key.clone());
        let r = self.inner.apply(req).await;
        self.lease.send_replace(false);
        r
    }
}

#[tokio::test]
async fn a_leader_that_loses_the_lease_mid_pass_applies_no_further() {
    let repo = FleetRepo::new();
    for n in ["nova-a", "nova-b", "nova-c"] {
        repo.write(
            &format!("standalone/compute/{n}.yaml"),
            nova(n, "2026.1", "2026.1"),
        );
    }
    repo.commit("three novas at 2026.1");
    for n in ["nova-a", "nova-b", "nova-c"] {
        repo.write(
            &format!("standalone/compute/{n}.yaml"),
            nova(n, "2026.2", "2026.2"),
        );
    }
    repo.commit("three novas to 2026.2");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let (lease, leader) = tokio::sync::watch::channel(true);
    let cluster = LeaseEnds {
        inner: mem.clone(),
        applies: Arc::default(),
        lease: Arc::new(lease),
    };
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(10),
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(&mem, &source, &opts).expect("seeded");
    let mut d = Daemon::new(
        opts,
        source,
        cluster.clone(),
        clock,
        StatusQueue::new(100),
        Arc::new(Metrics::new()),
    );
    d.lead_with(leader);
    d.pass().await;
    let first: Vec<Key> = cluster.applies.lock().unwrap().clone();
    assert_eq!(
        first.len(),
        1,
        "applied after the lease was lost: {first:?}"
    );
    // Leading again (a lease of its own, this time kept), it takes the
    // rest on.
    let (_kept, leader) = tokio::sync::watch::channel(true);
    d.lead_with(leader);
    for _ in 0..20 {
        d.pass().await;
        mem.step(Duration::from_secs(60)).expect("step");
    }
    let mut applied: Vec<String> = cluster
        .applies
        .lock()
        .unwrap()
        .iter()
        .map(|k| k.name.clone())
        .collect();
    applied.sort();
    applied.dedup();
    assert_eq!(applied, ["nova-a", "nova-b", "nova-c"]);
}
