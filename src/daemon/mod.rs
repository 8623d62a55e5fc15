//! `lockstep run`'s engine: the imperative shell around [`rollout`]. A pass
//! is an ordered list of sub-reconcilers, one per file, each taking what the
//! ones before it produced and returning what the ones after it need:
//!
//! | step | file | in | out |
//! |---|---|---|---|
//! | source | `source.rs` | the [`Repo`] | [`source::Refreshed`]: path, branch head, pull-request heads |
//! | judge | `judge.rs` (with `record.rs`) | the head, the last judgment, the objects' live status | [`judge::Judgment`]: report and chains (steps carry their documents); the record of live verdicts |
//! | units | `units.rs` (with `apply.rs`, `follow.rs`) | the chains, the cluster | [`units::Walked`]: a report per unit; applies, follows, repairs |
//! | plans | `plans.rs` | the head's plans, the unit reports | hop commits, plan statuses |
//! | statuses | `statuses.rs` | the judgment, the unit reports | statuses queued |
//! | delivery | `delivery.rs` | the queue | statuses on the Git host (its own task) |
//!
//! Nothing here survives a restart that a decision needs: Git (the accepted
//! chain, the notes) and the cluster (specs lockstep applied, the operators'
//! status, the repair records on the objects, lockstep's record of live
//! verdicts) hold the whole story, so a new process
//! picks up where a killed one stopped. (The dashboard's history is kept in
//! the cluster too, for people: [`History`]; no decision reads it.) Time
//! comes from a [`Clock`]: the
//! system's for a real cluster, the simulator's for `run` in sim mode and
//! the rehearsals ([`simulate`]), which run this same engine.

mod apply;
pub mod clock;
mod delivery;
mod follow;
pub mod journal;
mod judge;
mod plans;
pub mod record;
pub mod simulate;
mod source;
mod statuses;
mod units;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use git2::Oid;
use tokio::sync::mpsc;

use crate::cluster::Cluster;
use crate::follow::Deadlines;
use crate::forge::delivery::StatusQueue;
use crate::forge::{AnyForge, describe};
use crate::gate::Verdict;
use crate::kind::Key;
use crate::metrics::Metrics;
use crate::repair::RepairPolicy;
use crate::rollout::{Next, UnitReport};

pub use clock::{Clock, SystemClock, VirtualClock};
pub use delivery::{deliver_forever, deliver_now, push_notes_to, record_drain};
pub use journal::{Did, Entry};
pub use simulate::{
    FixedHead, SeedError, Simulation, seed_simulation, seed_tree, simulate, virtual_start,
};

/// What the loop needs besides its edges.
#[derive(Clone, Debug)]
pub struct Options {
    pub cluster_name: String,
    pub branch: String,
    pub paths: Vec<String>,
    /// Judge after this commit; `None`: the whole first-parent history.
    pub since: Option<String>,
    pub poll: Duration,
    pub pull_requests: bool,
    /// Pull requests land commit by commit (`source.landsCommitByCommit`):
    /// not judged as one change besides.
    pub lands_commit_by_commit: bool,
    pub target_url: Option<String>,
    pub deadlines: Deadlines,
    pub repair: RepairPolicy,
    pub max_file_bytes: usize,
    /// Whose signatures make a commit trusted, for the branch and pull
    /// requests alike (`docs/gate.md`, "Signed commits").
    pub trust: Option<std::sync::Arc<crate::trust::TrustPolicy>>,
    /// Stop once nothing is left to do (every hop complete or waiting on a
    /// person, every status delivered).
    pub until_idle: bool,
    /// Every unit is read again this often even when nothing announced a
    /// change (a missed watch event costs at most this long).
    pub resync: Duration,
    /// Run the head tree's upgrade plans. Off for `rehearse` of a range,
    /// which rehearses the range's hops and must not write plan commits
    /// into the repository it reads.
    pub plans: bool,
    /// How upgrade plans write their hop commits.
    pub plan_author: crate::plan::writeback::Author,
    pub plan_signing_key: Option<PathBuf>,
    /// Push plan commits to this remote (a remote source's origin, with its
    /// credentials); `None` for a local source, whose branch is the truth.
    pub plan_push: Option<crate::source::PushTarget>,
    /// Where `mode: propose` pushes a wave's branch: the remote source's
    /// origin, or a local repository's `origin` remote.
    pub plan_propose_to: Option<crate::source::PushTarget>,
    /// Rehearsals: write propose-mode waves as commits, as if each request
    /// were merged at once (a rehearsal has no host to ask).
    pub plan_merge_proposals: bool,
    /// Keep a [`journal`] of what the engine did, for rehearsals to render.
    /// Memory that grows with the run: off for the daemon.
    pub journal: bool,
    /// The files the simulated cluster's seed parsed from the first tree
    /// to judge, under these same options: the first judgment takes them
    /// instead of parsing that tree a second time (at 20,000 files, half
    /// of the time to the first verdict). Taken once; `None` afterwards.
    pub parsed: Option<std::sync::Arc<crate::history::Sources>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            cluster_name: "default".into(),
            branch: "main".into(),
            paths: Vec::new(),
            since: None,
            poll: Duration::from_secs(30),
            pull_requests: true,
            lands_commit_by_commit: false,
            target_url: None,
            deadlines: Deadlines::default(),
            repair: RepairPolicy::default(),
            max_file_bytes: crate::manifest::DEFAULT_MAX_FILE_BYTES,
            trust: None,
            until_idle: false,
            resync: Duration::from_secs(600),
            plans: true,
            plan_author: crate::plan::writeback::Author {
                name: "lockstep".into(),
                email: "lockstep@localhost".into(),
            },
            plan_signing_key: None,
            plan_push: None,
            plan_propose_to: None,
            plan_merge_proposals: false,
            journal: false,
            parsed: None,
        }
    }
}

/// Where the repository is read from, as the loop sees it: a refresh that
/// says whether anything moved, the branch head and the pull-request heads.
pub trait Repo: Send {
    fn refresh(&mut self) -> Result<bool, crate::source::SourceError>;
    fn path(&self) -> PathBuf;
    fn head(&self) -> Option<Oid>;
    fn pulls(&self) -> Vec<(u64, Oid)>;
}

impl Repo for crate::source::Source {
    fn refresh(&mut self) -> Result<bool, crate::source::SourceError> {
        crate::source::Source::refresh(self).map(|r| r == crate::source::Refresh::Changed)
    }
    fn path(&self) -> PathBuf {
        crate::source::Source::path(self).to_owned()
    }
    fn head(&self) -> Option<Oid> {
        crate::source::Source::head(self)
    }
    fn pulls(&self) -> Vec<(u64, Oid)> {
        crate::source::Source::pulls(self)
    }
}

/// Why a step of a pass could not read what it needed. Typed up to the
/// pass, which keeps the last good state and reports it
/// ([`PassOutcome::source_error`]).
/// (Boxed: it travels beside the last judgment, and stays small.)
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Source(Box<crate::source::SourceError>),
    #[error(transparent)]
    Git(Box<crate::git::Error>),
    /// A refresh panicked while holding the source.
    #[error("the source is unusable after a failed refresh; restart lockstep")]
    Poisoned,
    /// The blocking task running Git stopped (a panic, or shutdown).
    #[error("a Git task stopped before it finished: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// What judging against the live state needs from the cluster (an
    /// object's status, lockstep's record) could not be read or written:
    /// nothing is judged without it.
    #[error("cannot judge without {what}: {source}")]
    Cluster {
        what: String,
        source: Box<crate::cluster::ClusterError>,
    },
    #[error(transparent)]
    Record(#[from] record::RecordError),
    /// A status the operators would never write (the rule `check --live`
    /// applies to a snapshot file): nothing is judged with it.
    #[error(
        "cannot judge with the live status of {key}: {message}; lockstep judges nothing against a status no operator writes (docs/gate.md, \"Live rules in the daemon\")"
    )]
    LiveUnreadable { key: String, message: String },
    /// The branch head does not descend from the record's watermark, the
    /// last head judged for this cluster (`docs/gate.md`, "A rewritten
    /// branch").
    #[error(
        "{}",
        if *behind {
            format!("the head of {branch}, {head}, is behind {watermark}, the last commit lockstep judged for this cluster: the branch was reset back, or this copy of it is stale. lockstep judges and applies only forward history; it goes on with what it judged. Push {watermark} back and make the change as new commits on top of it (git revert), or wait for the next fetch (docs/gate.md, \"A rewritten branch\")")
        } else {
            format!("the history of {branch} was rewritten: its head {head} does not descend from {watermark}, the last commit lockstep judged for this cluster{}. Judged again from Git alone, a recorded abort would read as a downgrade and the hop it ended be applied again, so lockstep judges only forward history and goes on with what it judged. Push {watermark} back and make the change as new commits on top of it (git revert), or push a commit whose first parent is {watermark} and whose tree is the new head's, judged as one change: git commit-tree {head}^{{tree}} -p {watermark} -p {head} (docs/gate.md, \"A rewritten branch\")", if *held { "" } else { " (and which this copy of the repository does not hold: nothing judged is followed until it is pushed back)" })
        }
    )]
    Rewritten {
        branch: String,
        head: String,
        watermark: String,
        behind: bool,
        /// Whether the repository holds the watermark's commit (then what
        /// was judged up to it is followed).
        held: bool,
    },
    /// The lease was lost during the pass: the new leader records and
    /// judges from here.
    #[error("the lease was lost during the pass; the new leader judges")]
    NotLeader,
}

impl PassError {
    /// Whether only a person ends this error (passes alone never will).
    pub fn needs_person(&self) -> bool {
        match self {
            PassError::Rewritten { .. } => true,
            PassError::Record(e) => !matches!(e, record::RecordError::TooManyDeleted { .. }),
            _ => false,
        }
    }
}

impl From<crate::source::SourceError> for PassError {
    fn from(e: crate::source::SourceError) -> Self {
        PassError::Source(Box::new(e))
    }
}

impl From<crate::git::Error> for PassError {
    fn from(e: crate::git::Error) -> Self {
        PassError::Git(Box::new(e))
    }
}

/// What one pass found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassOutcome {
    /// Something was applied or repaired, or a hop is in flight.
    pub busy: bool,
    pub applied: usize,
    pub repaired: usize,
    pub blocked: usize,
    /// The source could not be refreshed or judged (the last good state
    /// was used): a [`PassError`], displayed for reporting.
    pub source_error: Option<String>,
    /// That error waits on a person (a rewritten branch, a lost record),
    /// not on time: a bounded run stops and says so.
    pub waits_on_person: bool,
}

/// Something a person must act on when a bounded run (`--until-idle`)
/// stops: a status that ends in failure (or error) and that only a person
/// can change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedsPerson {
    /// The object (`Nova compute/nova`), plan (`plan rings`) or commit.
    pub subject: String,
    /// The failure status's description.
    pub reason: String,
}

impl std::fmt::Display for NeedsPerson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.subject, self.reason)
    }
}

pub struct Daemon<C: Cluster, R: Repo> {
    opts: Options,
    repo: Arc<std::sync::Mutex<R>>,
    cluster: C,
    clock: Arc<dyn Clock>,
    queue: StatusQueue,
    metrics: Arc<Metrics>,
    judged: Option<judge::Judged>,
    pulls: HashMap<u64, Oid>,
    /// Pull-request heads held on the live state at their last judgment:
    /// judged again each pass, after those whose heads moved.
    held_pulls: std::collections::HashSet<(u64, Oid)>,
    /// Which directories can hold a name, in memory only: a commit or pull
    /// request that adds an object reads only the directories that could
    /// define it again, not every blob (`names::NameIndex::in_memory`).
    names: Arc<crate::names::NameIndex>,
    following: HashMap<follow::FollowId, follow::Following>,
    posted: HashMap<(String, String), (crate::forge::State, String)>,
    /// Units deleted outside Git, with the release they were at
    /// (`units::note_gone`), kept in lockstep's record as well
    /// (`record::Record::deleted`).
    gone: HashMap<Key, String>,
    /// The deleted objects the record holds, as last read or written;
    /// `None` until read since this process last began to lead. `gone`
    /// differing from it is what is still to be written.
    gone_recorded: Option<HashMap<Key, String>>,
    /// How many deleted objects there were when the record last could not
    /// hold them all: not tried again until there are fewer.
    gone_overflow: Option<usize>,
    /// Where each unit stood when last read present, while leading
    /// (`units::note_gone`).
    present: HashMap<Key, String>,
    /// Whether this process leads, as `run` was given it (`None`: a pass
    /// driven directly, which always leads). Checked right before each
    /// write to the cluster, not only when a pass starts: a pass can
    /// outlast the lease (a slow fetch, an API server away), and a leader
    /// that lost it while a follower took over must not apply from what it
    /// read before.
    leader: Option<tokio::sync::watch::Receiver<bool>>,
    /// Statuses the Git host refused, said again after a backoff.
    refused: HashMap<(String, String), statuses::Refused>,
    /// Units deleted outside Git whose deletion the record could not take:
    /// not decided until it does (a person is told).
    unrecorded: std::collections::BTreeSet<Key>,
    /// The last judging error that only a person ends
    /// ([`PassError::needs_person`]), cleared by the next judgment.
    judge_error: Option<String>,
    /// The last report of every unit: a quiet pass reuses them.
    units: BTreeMap<Key, UnitReport>,
    /// Counts over `units`, kept as reports change, so that a quiet pass
    /// over thousands of units reads none of them.
    tally: units::Tally,
    /// The judged head `units` were last walked against: while it is the
    /// same (so are the chains), nothing is in flight and the cluster
    /// announced nothing, a walk would want no unit and is skipped.
    walked: Option<Oid>,
    /// Objects the cluster announced as changed since the last pass.
    dirty: HashSet<Key>,
    /// Units the last pass could not read (the API server did not answer,
    /// or refused), with their chains and why. A person is told
    /// ([`Self::needs_person`]); the commits of one never read since the
    /// start get no status until it is read (a restart must not turn done
    /// commits pending or failed).
    unread: BTreeMap<Key, (Arc<crate::rollout::Chain>, String)>,
    /// The step this process last applied to each unit, and how often in a
    /// row: a step the cluster keeps leaving is applied again with a
    /// backoff (`repair::Applies`).
    applies: HashMap<Key, crate::repair::Applies>,
    /// The `resourceVersion` at which a unit's read last saw each object:
    /// a watch event at that same version is no change (`mark_changed`).
    seen: HashMap<Key, Box<str>>,
    /// This pass's dry runs of the objects each commit starts together,
    /// by commit (`units::CommitRefused`): asked once a pass, by the first
    /// of them to be applied, and answered to all of them.
    dry_runs: HashMap<String, Result<(), units::CommitRefused>>,
    last_full: Option<Instant>,
    /// Whether a pass that reads every unit starts its listing beside the
    /// judgment. Cleared when a judgment failed with nothing ever judged
    /// (the listing was thrown away), so that a source failing pass after
    /// pass does not list a large cluster each time; set again by the next
    /// judgment.
    list_early: bool,
    /// When each plan wave was first seen complete (soak); lost on restart,
    /// which only makes a soak longer.
    plan_completed: BTreeMap<(String, usize), jiff::Timestamp>,
    /// Each plan's last decision, described (for rehearsals and logs).
    plan_last: BTreeMap<String, String>,
    /// The plans of the head tree whose status last ended in failure or
    /// error, described (replaced on every plan pass).
    plan_failed: BTreeMap<String, String>,
    /// Where statuses go; plans in propose mode open their requests there.
    forge: Option<Arc<AnyForge>>,
    /// Each proposal branch's last outcome: spares the host between polls
    /// and bridges a request list that lags behind a create. Lost on
    /// restart, when the host and the remote say the same again.
    proposals: HashMap<String, plans::SeenProposal>,
    /// What the engine did, when `Options::journal` asks for it. Never read
    /// by a decision: rehearsals render it.
    journal: Vec<Entry>,
    /// The dashboard's side (`docs/ui.md`), when one is served: read-only,
    /// never read by a decision.
    ui: Option<crate::ui::Publisher>,
    /// Where the dashboard's history is kept between processes, when the
    /// cluster keeps it and a dashboard is served.
    history: Option<History>,
}

/// How long reading the kept history may hold up a pass (the first one, or
/// the first after the lease was won) before it is tried again next pass.
const HISTORY_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes of the history are this far apart at least: a busy rollout runs
/// a pass a second, and a value of up to 512 KiB each time would be a load
/// on etcd for a page's sake. A killed process loses at most this long.
const HISTORY_WRITE_EVERY: Duration = Duration::from_secs(10);

/// The dashboard's history in the cluster (`docs/ui.md`, "What survives a
/// restart"): read back before the first pass as leader, written in a task
/// of its own after a pass that noted something new, at most one write at a
/// time. A failed read or write is logged and tried again next pass; the
/// pass never waits on a write and never fails for either.
struct History {
    store: Arc<dyn crate::cluster::HistoryStore>,
    /// Read back since this process last became leader (nothing is written
    /// before: it would replace the stored history with this process's).
    loaded: bool,
    /// `Publisher::noted` when the last write began.
    written: u64,
    /// The write in flight.
    writing: Option<tokio::task::JoinHandle<Result<(), crate::cluster::ClusterError>>>,
    /// The last write failed: write again even if nothing new was noted.
    retry: bool,
    /// When the last write began.
    last_write: Option<Instant>,
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    pub fn new(
        opts: Options,
        repo: R,
        cluster: C,
        clock: Arc<dyn Clock>,
        queue: StatusQueue,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            opts,
            repo: Arc::new(std::sync::Mutex::new(repo)),
            cluster,
            clock,
            queue,
            metrics,
            judged: None,
            pulls: HashMap::new(),
            held_pulls: Default::default(),
            names: Arc::new(crate::names::NameIndex::in_memory()),
            following: HashMap::new(),
            posted: HashMap::new(),
            refused: HashMap::new(),
            gone: HashMap::new(),
            gone_recorded: None,
            gone_overflow: None,
            present: HashMap::new(),
            leader: None,
            judge_error: None,
            unrecorded: std::collections::BTreeSet::new(),
            units: BTreeMap::new(),
            tally: units::Tally::default(),
            walked: None,
            dirty: HashSet::new(),
            unread: BTreeMap::new(),
            applies: HashMap::new(),
            seen: HashMap::new(),
            dry_runs: HashMap::new(),
            last_full: None,
            list_early: true,
            plan_completed: BTreeMap::new(),
            plan_last: BTreeMap::new(),
            plan_failed: BTreeMap::new(),
            forge: None,
            proposals: HashMap::new(),
            journal: Vec::new(),
            ui: None,
            history: None,
        }
    }

    /// Publish a read-only snapshot for the dashboard at the end of every
    /// pass (`docs/ui.md`); its recent journal is kept bounded for the hop
    /// timelines.
    /// With a cluster that keeps it (`Cluster::history_store`: kube mode),
    /// the timelines' history is kept there and read back on start.
    pub fn set_ui(&mut self, publisher: crate::ui::Publisher) {
        self.ui = Some(publisher);
        self.history = self
            .cluster
            .history_store(&self.opts.cluster_name)
            .map(|store| History {
                store,
                loaded: false,
                written: 0,
                writing: None,
                retry: false,
                last_write: None,
            });
    }

    /// The Git host plans in `mode: propose` open their pull/merge requests
    /// on (the one statuses go to). Without one, or with git notes, such a
    /// plan's status says it needs a host and nothing is proposed.
    pub fn set_forge(&mut self, forge: Arc<AnyForge>) {
        self.forge = Some(forge);
    }

    /// Each plan's last decision, described.
    pub fn plan_descriptions(&self) -> Vec<(String, String)> {
        self.plan_last
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn until_idle(&self) -> bool {
        self.opts.until_idle
    }

    /// What the engine did so far (empty unless `Options::journal`).
    pub fn journal(&self) -> &[Entry] {
        &self.journal
    }

    /// The names index this daemon keeps in memory (tests read how many
    /// blobs it read to build its entries).
    pub fn names_index(&self) -> &crate::names::NameIndex {
        &self.names
    }

    /// The last report of every unit.
    pub fn unit_reports(&self) -> &BTreeMap<Key, UnitReport> {
        &self.units
    }

    /// What a person must act on now: every unit blocked (off its chain) or
    /// reported (a hop that failed for good, a repair budget spent, an
    /// apply the cluster rejected, a stall, a read the cluster failed), every plan held or unable to propose,
    /// and the branch head when the gate refused it (nothing of it is
    /// applied until a new commit fixes it). Refused commits below the head
    /// and pull-request heads are not here: their failure is the gate doing
    /// its job, and a later commit already moved past them. Objects first
    /// (in key order), then plans, then the head.
    pub fn needs_person(&self) -> Vec<NeedsPerson> {
        let mut out = Vec::new();
        for (key, u) in &self.units {
            let reason = match (&u.next, &u.needs_person, &u.stalled) {
                (Next::Blocked(m), _, _) => format!("blocked: {m}"),
                (_, Some(m), _) | (_, None, Some(m)) => m.clone(),
                _ => continue,
            };
            out.push(NeedsPerson {
                subject: key.to_string(),
                reason,
            });
        }
        for key in &self.unrecorded {
            out.push(NeedsPerson {
                subject: key.to_string(),
                reason: "deleted from the cluster outside Git, and lockstep's record of such deletions could not be written (see the log): it is not re-created until it is; re-create it by hand where its database is, or remove it from Git".into(),
            });
        }
        for (key, (_, why)) in &self.unread {
            out.push(NeedsPerson {
                subject: key.to_string(),
                reason: format!("cannot be read from the cluster: {why}"),
            });
        }
        let plans = self.judged.as_ref().map(|j| j.plans.clone());
        for (name, description) in &self.plan_failed {
            // Only plans the head tree still has.
            let current = plans
                .as_ref()
                .is_some_and(|p| p.plans.iter().any(|(l, _)| l.plan.metadata.name == *name));
            if current {
                out.push(NeedsPerson {
                    subject: format!("plan {name}"),
                    reason: description.clone(),
                });
            }
        }
        if let Some(why) = &self.judge_error {
            out.push(NeedsPerson {
                subject: format!("the branch {}", crate::escape::escape(&self.opts.branch)),
                reason: why.clone(),
            });
        }
        if let Some(j) = &self.judged {
            let head = j.head.to_string();
            if let Some(c) = j
                .report
                .commits
                .iter()
                .rev()
                .find(|c| c.sha == head)
                .filter(|c| c.verdict == Verdict::Refused)
            {
                let s = describe::commit_status(&self.opts.cluster_name, c, None);
                out.push(NeedsPerson {
                    subject: format!(
                        "commit {} (the head of {})",
                        &c.sha[..c.sha.len().min(10)],
                        self.opts.branch
                    ),
                    reason: s.description,
                });
            }
        }
        out
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Notes what the engine did, when a journal is kept.
    fn record(&mut self, what: Did) {
        let entry = Entry {
            at: self.clock.now(),
            what,
        };
        if let Some(ui) = &mut self.ui {
            ui.note(entry.clone(), self.clock.wall());
        }
        if self.opts.journal {
            self.journal.push(entry);
        }
    }

    /// Reads the kept history back into the dashboard, once per leadership.
    /// What cannot be read is dropped with one warning (then the next write
    /// replaces it); a cluster that does not answer is asked again next
    /// pass.
    async fn load_history(&mut self) {
        let (Some(h), Some(ui)) = (&mut self.history, &mut self.ui) else {
            return;
        };
        if h.loaded {
            return;
        }
        let text = match tokio::time::timeout(HISTORY_READ_TIMEOUT, h.store.load()).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the dashboard's kept history; next pass");
                return;
            }
            Err(_) => {
                tracing::warn!("reading the dashboard's kept history took too long; next pass");
                return;
            }
        };
        h.loaded = true;
        let Some(text) = text else { return };
        match crate::ui::keep::decode(&text, self.clock.wall()) {
            Ok(r) => {
                if r.skipped > 0 {
                    tracing::warn!(
                        skipped = r.skipped,
                        kept = r.entries.len(),
                        "entries of the dashboard's kept history are malformed, too large or in the future; skipped"
                    );
                }
                tracing::info!(entries = r.entries.len(), "dashboard history read back");
                ui.restore(r.entries);
            }
            Err(e) => tracing::warn!(
                error = %e,
                bytes = text.len(),
                "the dashboard's kept history cannot be read and is dropped; it is written anew"
            ),
        }
    }

    /// Writes the dashboard's history when something new was noted (or the
    /// last write failed), in a task of its own; a write still in flight, or
    /// one begun less than [`HISTORY_WRITE_EVERY`] ago, defers it to a
    /// later pass.
    fn keep_history(&mut self) {
        // The new leader writes it: a copy from here would overwrite its.
        if !self.leads() {
            return;
        }
        let (Some(h), Some(ui)) = (&mut self.history, &self.ui) else {
            return;
        };
        if !h.loaded {
            return;
        }
        if let Some(w) = &h.writing {
            if !w.is_finished() {
                return;
            }
            let failed = match h.writing.take().and_then(|w| w.now_or_never()) {
                Some(Ok(Ok(()))) => None,
                Some(Ok(Err(e))) => Some(e.to_string()),
                Some(Err(e)) => Some(e.to_string()),
                None => None,
            };
            if let Some(e) = failed {
                tracing::warn!(error = %e, "cannot write the dashboard's history; next pass");
                h.retry = true;
            }
        }
        let noted = ui.noted();
        if noted == h.written && !h.retry {
            return;
        }
        if h.last_write
            .is_some_and(|t| t.elapsed() < HISTORY_WRITE_EVERY)
        {
            return;
        }
        let (text, n) = ui.history(crate::ui::keep::BUDGET);
        tracing::debug!(
            entries = n,
            bytes = text.len(),
            "writing the dashboard's history"
        );
        h.written = noted;
        h.retry = false;
        h.last_write = Some(Instant::now());
        h.writing = Some(tokio::spawn(h.store.save(text)));
    }

    /// The dashboard's snapshot of this pass, when one is served.
    fn publish_ui(&mut self, out: &PassOutcome) {
        let Some(ui) = &mut self.ui else { return };
        let judged = self.judged.as_ref();
        ui.publish(crate::ui::PassState {
            cluster: &self.opts.cluster_name,
            branch: &self.opts.branch,
            head: judged.map(|j| j.head.to_string()),
            report: judged.map(|j| j.report.clone()),
            units: &self.units,
            now: self.clock.now(),
            wall: self.clock.wall(),
            source_error: out.source_error.clone(),
        });
    }

    /// Runs the loop until `shutdown` resolves (or, with `until_idle`, until
    /// nothing is left to do). Wakes on a trigger, a cluster change or the
    /// poll interval; in virtual time, at once, with the world moved on.
    pub async fn run(
        &mut self,
        mut triggers: mpsc::Receiver<()>,
        leader: tokio::sync::watch::Receiver<bool>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> PassOutcome {
        let mut changes = self.cluster.watch_versions();
        tokio::pin!(shutdown);
        let mut leader = leader;
        self.leader = Some(leader.clone());
        let mut last = PassOutcome::default();
        loop {
            while let Some(Some((k, v))) = changes.next().now_or_never() {
                self.mark_changed(k, v);
            }
            if *leader.borrow() {
                self.metrics.leader.set(1);
                last = self.pass().await;
                self.metrics.set_ready();
            } else {
                // Another process writes the history meanwhile: read it
                // again before writing as leader.
                if let Some(h) = &mut self.history {
                    h.loaded = false;
                }
                // And says the statuses: what this process queued is stale
                // (a pending posted late over the new leader's success), and
                // what it posted is unknown by the next time it leads.
                if !self.posted.is_empty() {
                    self.queue.clear().await;
                    self.posted.clear();
                    self.refused.clear();
                }
                // Another process moves the units meanwhile: where this one
                // last saw them is no evidence of a deletion later. What
                // the record keeps is read again when this one leads.
                self.gone.clear();
                self.gone_recorded = None;
                self.gone_overflow = None;
                self.unrecorded.clear();
                self.present.clear();
                // And judges: what this one judged is not extended nor
                // walked again when it leads next (the other may have
                // judged on, recorded, or seen the branch rewritten); it
                // is judged again from Git and the record.
                self.judged = None;
                self.walked = None;
                self.metrics.leader.set(0);
                self.metrics.set_ready();
            }
            let world = self.clock.between_passes(last.busy);
            let world_busy = world.unwrap_or(false);
            if self.opts.until_idle
                && !last.busy
                && !world_busy
                && (last.source_error.is_none() || last.waits_on_person)
            {
                break;
            }
            if world.is_some() && (world_busy || last.busy) {
                // Virtual time: go on at once (the clock moved the world),
                // but a stop asked for meanwhile still stops it: a world
                // that never settles ignored SIGTERM.
                tokio::task::yield_now().await;
                if shutdown.as_mut().now_or_never().is_some() {
                    return last;
                }
                continue;
            }
            // Wait for the poll, a trigger, leadership, or a watch event
            // that names a change. The poll's deadline holds across events
            // that change nothing, so a stream of them never delays it.
            let poll = tokio::time::sleep(self.opts.poll);
            tokio::pin!(poll);
            loop {
                tokio::select! {
                    _ = &mut shutdown => return last,
                    _ = &mut poll => break,
                    Some(()) = triggers.recv() => break,
                    _ = leader.changed() => break,
                    Some((k, v)) = changes.next() => {
                        // A burst of watch events is one pass.
                        self.mark_changed(k, v);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        while let Some(Some((k, v))) = changes.next().now_or_never() {
                            self.mark_changed(k, v);
                        }
                        // Events at versions already read (a watch's first
                        // listing, a re-list) are no reason for a pass.
                        if !self.dirty.is_empty() {
                            break;
                        }
                    }
                }
            }
        }
        last
    }

    /// Notes that the cluster announced `key` at `version`. A watch's first
    /// listing, and each re-list, announces every object: one the last read
    /// saw at this very version is unchanged (the version moves on every
    /// write), so its unit is not read again for it. Without a version, or
    /// at another one, the unit is read on the next pass.
    fn mark_changed(&mut self, key: Key, version: Option<String>) {
        let unchanged = version
            .as_deref()
            .is_some_and(|v| !v.is_empty() && self.seen.get(&key).is_some_and(|s| **s == *v));
        if !unchanged {
            self.dirty.insert(key);
        }
    }

    /// One pass over source, gate, cluster and statuses.
    /// The leadership this daemon checks before each write (`run` sets
    /// the one it is given; a pass driven directly leads otherwise).
    pub fn lead_with(&mut self, leader: tokio::sync::watch::Receiver<bool>) {
        self.leader = Some(leader);
    }

    /// Whether this process still leads (see `leader`).
    fn leads(&self) -> bool {
        self.leader.as_ref().is_none_or(|l| *l.borrow())
    }

    pub async fn pass(&mut self) -> PassOutcome {
        let t = Instant::now();
        self.load_history().await;
        let out = self.pass_inner().await;
        self.publish_ui(&out);
        self.keep_history();
        self.metrics.passes.inc();
        self.metrics.pass_seconds.observe(t.elapsed().as_secs_f64());
        out
    }

    /// The pass, in order. Each step's output is the next one's input;
    /// a step that has nothing to hand on ends the pass.
    async fn pass_inner(&mut self) -> PassOutcome {
        let mut out = PassOutcome::default();
        let t0 = Instant::now();
        // Source: the branch head and pull-request heads (the last good
        // state when the remote cannot be reached).
        let src = self.reconcile_source(&mut out).await;
        let t_refresh = t0.elapsed();
        let Some(head) = src.head else {
            tracing::warn!(branch = %self.opts.branch, "the branch has no commits yet");
            return out;
        };
        // A pass that reads every unit lists the cluster; the listing runs
        // beside the judgment (on the first pass, a parse of the whole
        // tree) and the units step reads it.
        let full = self.full_due();
        let listing = (full && self.list_early).then(|| units::Listing::start(&self.cluster));
        // Judge: new commits of the branch and pull requests, verdicts
        // queued before anything is applied.
        let Some(judgment) = self
            .reconcile_judgment(&src.path, head, src.pulls, &mut out)
            .await
        else {
            if listing.is_some() {
                self.list_early = false;
            }
            return out;
        };
        self.list_early = true;
        let t_judge = t0.elapsed();
        // Units: read, decide, apply, follow, repair.
        let walked = self
            .reconcile_units(&judgment, full, listing, &mut out)
            .await;
        let t_walk = t0.elapsed();
        // Plans: decide each wave; a hop commit when one may start (the
        // next pass judges and applies it).
        let plans_moved = self.leads() && self.reconcile_plans(&src.path, head, &mut out).await;
        let t_plans = t0.elapsed();
        // What left the delivery queue without reaching the host is taken
        // back first: a status is never gone while `posted` says it was said.
        let again = self.take_back_lost().await;
        // Statuses: every status the state implies, when something moved
        // (or a refused one is to be said again).
        if walked.changed || plans_moved || again {
            self.reconcile_statuses(&judgment.report).await;
        }
        // Delivery runs in its own task (`deliver_forever`), fed by the queue.
        tracing::debug!(
            quiet = walked.quiet,
            units = walked.read,
            refresh_ms = t_refresh.as_secs_f64() * 1e3,
            judge_ms = (t_judge - t_refresh).as_secs_f64() * 1e3,
            units_ms = (t_walk - t_judge).as_secs_f64() * 1e3,
            plans_ms = (t_plans - t_walk).as_secs_f64() * 1e3,
            statuses_ms = (t0.elapsed() - t_plans).as_secs_f64() * 1e3,
            "pass"
        );
        out
    }
}
