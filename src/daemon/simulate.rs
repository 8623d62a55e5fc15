//! The engine in virtual time over the simulated operator: `run` in sim
//! mode seeds the world and runs the daemon as usual; `rehearse` and
//! `rehearse --plan` run it to idle with a journal and render what it did.
//! There is no second engine: what a rehearsal predicts is what `run` does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use git2::Oid;
use jiff::Timestamp;
use thiserror::Error;

use super::{Daemon, Entry, NeedsPerson, Options, PassOutcome, Repo, VirtualClock};
use crate::cluster::memory::MemoryCluster;
use crate::forge::delivery::StatusQueue;
use crate::git::{GitError, GitRepo, Resolved};
use crate::history::{self, CheckOptions};
use crate::kind::Key;
use crate::metrics::Metrics;
use crate::rollout::UnitReport;

/// Why a simulated cluster could not be given its starting state.
#[derive(Debug, Error)]
pub enum SeedError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("the simulated cluster is unavailable: {0}")]
    Cluster(#[from] crate::cluster::ClusterError),
}

/// Gives a simulated cluster the state the daemon takes as given, every
/// object installed and steady: with `opts.since`, that revision's tree
/// (the range starts after it, so the cluster runs it); without, the tree
/// of the first commit of the head's first-parent history (the fleet as it
/// began). Returns how many objects that is. The first judged commit's
/// tree was seeded with `since` too, so its own changes were in the
/// cluster before any apply, and its status said "applied" for work
/// lockstep never did.
pub fn seed_simulation(
    world: &MemoryCluster,
    path: &Path,
    head: Oid,
    opts: &Options,
) -> Result<usize, SeedError> {
    let repo = GitRepo::open(path)?;
    let tree = match opts.since.as_deref() {
        Some(rev) => match repo.resolve(rev)? {
            Resolved::Commit(c) => repo.commit(c)?.tree,
            Resolved::Tree(t) => t,
        },
        None => match repo.first_parent_range(None, head)?.into_iter().next() {
            Some(first) => first.tree,
            None => return Ok(0),
        },
    };
    seed_tree(world, &repo, Some(tree), opts)
}

/// A simulated cluster made ready for the engine: seeded as
/// [`seed_simulation`] says (when the repository has a head yet), and its
/// virtual clock, whose zero is now on the calendar.
pub fn virtual_start<R: Repo>(
    world: &MemoryCluster,
    repo: &R,
    opts: &Options,
) -> Result<Arc<dyn super::Clock>, SeedError> {
    if let Some(head) = repo.head() {
        seed_simulation(world, &repo.path(), head, opts)?;
    }
    Ok(Arc::new(VirtualClock::new(world.clone())))
}

/// Installs every object of `tree` (`None`: nothing) in the simulated world.
pub fn seed_tree(
    world: &MemoryCluster,
    repo: &GitRepo,
    tree: Option<Oid>,
    opts: &Options,
) -> Result<usize, SeedError> {
    let check = CheckOptions {
        prefixes: opts.paths.clone(),
        max_file_bytes: opts.max_file_bytes,
        // What the seed parses, the first judgment reads (`Options::parsed`).
        sources: opts.parsed.clone(),
        ..CheckOptions::default()
    };
    let t = std::time::Instant::now();
    let (desired, _) = history::tree_desired(repo, tree, &check)?;
    let parse_ms = t.elapsed().as_secs_f64() * 1e3;
    world.world()?.seed(&desired);
    tracing::info!(
        objects = desired.len(),
        parse_ms,
        seed_ms = t.elapsed().as_secs_f64() * 1e3 - parse_ms,
        "simulated cluster seeded"
    );
    Ok(desired.len())
}

/// A repository read at one fixed head: a rehearsal of a range neither
/// fetches nor follows a branch.
pub struct FixedHead {
    pub path: PathBuf,
    pub head: Oid,
}

impl Repo for FixedHead {
    fn refresh(&mut self) -> Result<bool, crate::source::SourceError> {
        Ok(false)
    }
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    fn head(&self) -> Option<Oid> {
        Some(self.head)
    }
    fn pulls(&self) -> Vec<(u64, Oid)> {
        Vec::new()
    }
}

/// What the engine did in a simulation run to idle.
pub struct Simulation {
    /// Every apply, phase, completion, repair and report, in virtual time.
    pub journal: Vec<Entry>,
    /// What the simulated operator recorded (phases, Jobs, rolls, failures).
    pub events: Vec<crate::sim::Event>,
    /// Virtual time when the engine had nothing left to do.
    pub ended: Duration,
    /// Each unit's last report: where it stopped and on what it waits.
    pub units: BTreeMap<Key, UnitReport>,
    pub needs_person: Vec<NeedsPerson>,
    pub last: PassOutcome,
}

/// Runs the daemon's engine on `world` in virtual time from `start`, until
/// nothing is left to do, with a journal. Statuses are computed as always
/// and dropped: a simulation has no host.
pub async fn simulate<R: Repo + 'static>(
    repo: R,
    world: MemoryCluster,
    opts: Options,
    start: Timestamp,
) -> Simulation {
    let opts = Options {
        until_idle: true,
        journal: true,
        pull_requests: false,
        poll: Duration::ZERO,
        ..opts
    };
    let clock = Arc::new(VirtualClock::starting_at(world.clone(), start));
    let mut d = Daemon::new(
        opts,
        repo,
        world.clone(),
        clock,
        StatusQueue::new(1),
        Arc::new(Metrics::new()),
    );
    let (_triggers, rx) = tokio::sync::mpsc::channel(1);
    let (_leader, leader) = tokio::sync::watch::channel(true);
    let last = d.run(rx, leader, std::future::pending()).await;
    let needs_person = d.needs_person();
    let (events, ended) = match world.world() {
        Ok(w) => (w.events.clone(), w.now),
        Err(_) => (Vec::new(), world.now()),
    };
    Simulation {
        journal: d.journal,
        events,
        ended,
        needs_person,
        units: d.units,
        last,
    }
}
