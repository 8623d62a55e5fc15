//! The simulated cluster behind a wrapper that logs every apply by unit
//! (the real C5C3 operators cannot run here): for tests that count what
//! lockstep applied.

use std::sync::{Arc, Mutex};

use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{ApplyRequest, Cluster, ClusterError, ClusterObject};
use lockstep::kind::Key;

#[derive(Clone)]
pub struct Counted {
    pub inner: MemoryCluster,
    pub applies: Arc<Mutex<Vec<Key>>>,
}

impl Counted {
    pub fn new(inner: MemoryCluster) -> Self {
        Self {
            inner,
            applies: Arc::default(),
        }
    }

    /// How many applies named a unit called `name`.
    pub fn applies_of(&self, name: &str) -> usize {
        self.applies
            .lock()
            .unwrap()
            .iter()
            .filter(|k| k.name == name)
            .count()
    }
}

impl Cluster for Counted {
    crate::forward_cluster!(all_but apply);
    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        self.applies.lock().unwrap().push(req.key.clone());
        self.inner.apply(req).await
    }
}
