//! `lockstep run`: the imperative shell around [`rollout`]. Each pass
//! refreshes the source, judges new heads (branch and pull requests), reads
//! the cluster, applies the next hop of every unit, follows and repairs the
//! hops in flight, and queues the statuses the state implies.
//!
//! Nothing here survives a restart and nothing needs to: Git (the accepted
//! chain, the notes) and the cluster (specs lockstep applied, the operators'
//! status, the Events of its repairs) hold the whole story, so a new process
//! picks up where a killed one stopped.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use git2::Oid;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::cluster::memory::MemoryCluster;
use crate::cluster::{ApplyRequest, Cluster, ClusterError, observe};
use crate::follow::{Deadlines, Progress, Tracker, assess};
use crate::forge::delivery::{RetryPolicy, StatusQueue};
use crate::forge::{AnyForge, Forge, Status, describe};
use crate::gate::Verdict;
use crate::git::GitRepo;
use crate::history::{self, CheckOptions, CheckReport, EMPTY_TREE};
use crate::kind::{Key, Kind};
use crate::metrics::{KindLabels, Metrics, PhaseLabels, RepairLabels, VerdictLabels};
use crate::release::ImageRef;
use crate::repair::{self, Action, RepairHistory, RepairPolicy};
use crate::rollout::{self, Chain, Next, ObjectState, Target, UnitReport, UnitState};

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
    pub target_url: Option<String>,
    pub deadlines: Deadlines,
    pub repair: RepairPolicy,
    pub max_file_bytes: usize,
    /// Stop once nothing is left to do (every hop complete or waiting on a
    /// person, every status delivered).
    pub until_idle: bool,
    /// Every unit is read again this often even when nothing announced a
    /// change (a missed watch event costs at most this long).
    pub resync: Duration,
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
            target_url: None,
            deadlines: Deadlines::default(),
            repair: RepairPolicy::default(),
            max_file_bytes: crate::manifest::DEFAULT_MAX_FILE_BYTES,
            until_idle: false,
            resync: Duration::from_secs(600),
            plan_author: crate::plan::writeback::Author {
                name: "lockstep".into(),
                email: "lockstep@localhost".into(),
            },
            plan_signing_key: None,
            plan_push: None,
            plan_propose_to: None,
            plan_merge_proposals: false,
        }
    }
}

/// Where the repository is read from, as the loop sees it: a refresh that
/// says whether anything moved, the branch head and the pull-request heads.
pub trait Repo: Send {
    fn refresh(&mut self) -> Result<bool, String>;
    fn path(&self) -> PathBuf;
    fn head(&self) -> Option<Oid>;
    fn pulls(&self) -> Vec<(u64, Oid)>;
}

impl Repo for crate::source::Source {
    fn refresh(&mut self) -> Result<bool, String> {
        crate::source::Source::refresh(self)
            .map(|r| r == crate::source::Refresh::Changed)
            .map_err(|e| e.to_string())
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

/// The branch's judged history, and what it implies.
struct Judged {
    head: Oid,
    report: Arc<CheckReport>,
    /// Shared with the unit reports: an unchanged chain keeps its `Arc`
    /// across heads, so a pass tells changed units by pointer.
    chains: Arc<BTreeMap<Key, Arc<Chain>>>,
    /// The head tree's upgrade plans and the units they can select.
    plans: Arc<crate::plan::exec::TreePlans>,
}

/// A hop being followed: the tracker and the repairs made so far.
struct Following {
    tracker: Tracker,
    history: RepairHistory,
    phase: Option<(String, Duration)>,
    reported: bool,
}

/// What one pass found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassOutcome {
    /// Something was applied or repaired, or a hop is in flight.
    pub busy: bool,
    pub applied: usize,
    pub repaired: usize,
    pub blocked: usize,
    /// The source could not be refreshed (the last good state was used).
    pub source_error: Option<String>,
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

/// How many unit reports are in flight (an apply or a hop being followed)
/// and how many are blocked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    in_flight: usize,
    blocked: usize,
}

impl Tally {
    fn of<'a>(reports: impl IntoIterator<Item = &'a UnitReport>) -> Self {
        let mut t = Tally::default();
        for r in reports {
            t.add(r, 1);
        }
        t
    }

    fn add(&mut self, r: &UnitReport, sign: isize) {
        let (f, b) = match r.next {
            Next::Apply(_) | Next::Follow(_) => (1, 0),
            Next::Blocked(_) => (0, 1),
            Next::Done(_) => (0, 0),
        };
        self.in_flight = self.in_flight.saturating_add_signed(f * sign);
        self.blocked = self.blocked.saturating_add_signed(b * sign);
    }
}

pub struct Daemon<C: Cluster, R: Repo> {
    opts: Options,
    repo: Arc<std::sync::Mutex<R>>,
    cluster: C,
    /// The simulated cluster, when that is what `cluster` is: its clock is
    /// virtual and new objects are installed by seeding it.
    sim: Option<MemoryCluster>,
    queue: StatusQueue,
    metrics: Arc<Metrics>,
    started: Instant,
    judged: Option<Judged>,
    pulls: HashMap<u64, Oid>,
    following: HashMap<(Key, String), Following>,
    posted: HashMap<(String, String), (crate::forge::State, String)>,
    seeded: bool,
    /// The last report of every unit: a quiet pass reuses them.
    units: BTreeMap<Key, UnitReport>,
    /// Counts over `units`, kept as reports change, so that a quiet pass
    /// over thousands of units reads none of them.
    tally: Tally,
    /// The judged head `units` were last walked against: while it is the
    /// same (so are the chains), nothing is in flight and the cluster
    /// announced nothing, a walk would want no unit and is skipped.
    walked: Option<Oid>,
    /// Objects the cluster announced as changed since the last pass.
    dirty: std::collections::HashSet<Key>,
    last_full: Option<Instant>,
    /// When each plan wave was first seen complete (soak); lost on restart,
    /// which only makes a soak longer.
    plan_completed: BTreeMap<(String, usize), jiff::Timestamp>,
    /// The wall clock at start: the simulator's virtual time counts from it.
    clock_base: jiff::Timestamp,
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
    proposals: HashMap<String, SeenProposal>,
}

struct SeenProposal {
    keys: Vec<Key>,
    head: Oid,
    outcome: crate::plan::propose::Outcome,
    at: Instant,
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    pub fn new(
        opts: Options,
        repo: R,
        cluster: C,
        sim: Option<MemoryCluster>,
        queue: StatusQueue,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            opts,
            repo: Arc::new(std::sync::Mutex::new(repo)),
            cluster,
            sim,
            queue,
            metrics,
            started: Instant::now(),
            judged: None,
            pulls: HashMap::new(),
            following: HashMap::new(),
            posted: HashMap::new(),
            seeded: false,
            units: BTreeMap::new(),
            tally: Tally::default(),
            walked: None,
            dirty: std::collections::HashSet::new(),
            last_full: None,
            plan_completed: BTreeMap::new(),
            clock_base: jiff::Timestamp::now(),
            plan_last: BTreeMap::new(),
            plan_failed: BTreeMap::new(),
            forge: None,
            proposals: HashMap::new(),
        }
    }

    /// The Git host plans in `mode: propose` open their pull/merge requests
    /// on (the one statuses go to). Without one, or with git notes, such a
    /// plan's status says it needs a host and nothing is proposed.
    pub fn set_forge(&mut self, forge: Arc<AnyForge>) {
        self.forge = Some(forge);
    }

    /// Where the simulator's virtual time starts (a rehearsal's `--start`).
    pub fn set_clock_base(&mut self, t: jiff::Timestamp) {
        self.clock_base = t;
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

    /// What a person must act on now: every unit blocked (off its chain) or
    /// reported (a hop that failed for good, a repair budget spent, an
    /// apply the cluster rejected), every plan held or unable to propose,
    /// and the branch head when the gate refused it (nothing of it is
    /// applied until a new commit fixes it). Refused commits below the head
    /// and pull-request heads are not here: their failure is the gate doing
    /// its job, and a later commit already moved past them. Objects first
    /// (in key order), then plans, then the head.
    pub fn needs_person(&self) -> Vec<NeedsPerson> {
        let mut out = Vec::new();
        for (key, u) in &self.units {
            let reason = match (&u.next, &u.needs_person) {
                (Next::Blocked(m), _) => format!("blocked: {m}"),
                (_, Some(m)) => m.clone(),
                _ => continue,
            };
            out.push(NeedsPerson {
                subject: key.to_string(),
                reason,
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

    /// The clock trackers and repair backoff run on: virtual in `sim`.
    fn now(&self) -> Duration {
        match &self.sim {
            Some(s) => s.now(),
            None => self.started.elapsed(),
        }
    }

    /// Runs the loop until `shutdown` resolves (or, with `until_idle`, until
    /// nothing is left to do). Wakes on a trigger, a cluster change or the
    /// poll interval.
    pub async fn run(
        &mut self,
        mut triggers: mpsc::Receiver<()>,
        leader: tokio::sync::watch::Receiver<bool>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> PassOutcome {
        let mut changes = self.cluster.watch();
        tokio::pin!(shutdown);
        let mut leader = leader;
        let mut last = PassOutcome::default();
        loop {
            while let Some(Some(k)) = changes.next().now_or_never() {
                self.dirty.insert(k);
            }
            if *leader.borrow() {
                self.metrics.leader.set(1);
                last = self.pass().await;
                self.metrics.set_ready();
            } else {
                self.metrics.leader.set(0);
                self.metrics.set_ready();
            }
            let sim_busy = match &self.sim {
                Some(s) => s.step(Duration::from_secs(60)).unwrap_or(false),
                None => false,
            };
            if self.opts.until_idle && !last.busy && !sim_busy && last.source_error.is_none() {
                break;
            }
            if sim_busy || (self.sim.is_some() && last.busy) {
                // Virtual time: go on at once; when only the clock can move
                // things (a soak, a maintenance window), move it.
                if !sim_busy && let Some(s) = &self.sim {
                    s.advance(Duration::from_secs(60));
                }
                tokio::task::yield_now().await;
                continue;
            }
            let poll = tokio::time::sleep(self.opts.poll);
            tokio::select! {
                _ = &mut shutdown => break,
                _ = poll => {}
                Some(()) = triggers.recv() => {}
                _ = leader.changed() => {}
                Some(k) = changes.next() => {
                    // A burst of watch events is one pass.
                    self.dirty.insert(k);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        last
    }

    /// One pass over source, gate, cluster and statuses.
    pub async fn pass(&mut self) -> PassOutcome {
        let t = Instant::now();
        let out = self.pass_inner().await;
        self.metrics.passes.inc();
        self.metrics.pass_seconds.observe(t.elapsed().as_secs_f64());
        out
    }

    async fn pass_inner(&mut self) -> PassOutcome {
        let mut out = PassOutcome::default();
        let t0 = Instant::now();
        // 1. The source.
        let t = Instant::now();
        let repo = self.repo.clone();
        let refreshed = tokio::task::spawn_blocking(move || {
            let mut r = repo
                .lock()
                .map_err(|_| "source lock poisoned".to_string())?;
            r.refresh()?;
            Ok::<_, String>((r.path(), r.head(), r.pulls()))
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        Metrics::observe(
            &self.metrics.git_seconds,
            "refresh",
            refreshed.is_ok(),
            t.elapsed(),
        );
        let (path, head, pulls) = match refreshed {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "source refresh failed; keeping the last good state");
                out.source_error = Some(e);
                let Ok(r) = self.repo.lock() else {
                    return out;
                };
                (r.path(), r.head(), r.pulls())
            }
        };
        let t_refresh = t0.elapsed();
        let Some(head) = head else {
            tracing::warn!(branch = %self.opts.branch, "the branch has no commits yet");
            return out;
        };
        // 2. The gate, on a new head.
        let full = self
            .last_full
            .is_none_or(|t| t.elapsed() >= self.opts.resync);
        let mut verdicts_first = false;
        if self.judged.as_ref().is_none_or(|j| j.head != head) {
            // Taken, so that the report and chains are extended in place
            // rather than copied.
            let prev = self.judged.take();
            match self.judge(&path, head, prev).await {
                Ok((j, new)) => {
                    self.count_verdicts(&j.report, new);
                    self.judged = Some(j);
                    verdicts_first = new > 0;
                }
                Err((e, prev)) => {
                    tracing::error!(error = %e, head = %head, "judging failed");
                    self.judged = prev;
                    out.source_error = Some(e);
                }
            }
        }
        if self.opts.pull_requests {
            self.judge_pulls(&path, head, pulls).await;
        }
        let Some(judged) = self.judged.as_ref() else {
            return out;
        };
        let report = judged.report.clone();
        let chains = judged.chains.clone();
        let judged_head = judged.head;
        let t_judge = t0.elapsed();
        // The new commits' verdicts go out before anything is applied: a
        // push is answered in the time it takes to judge it, not to apply
        // it. (The units are last pass's, so older commits' statuses are
        // unchanged and not sent again.)
        if verdicts_first && self.seeded {
            self.queue_statuses(&report).await;
        }
        // 3. A simulated cluster starts from the first judged commit's tree,
        //    "taken as given".
        if !self.seeded {
            self.seed(&path, &report).await;
            self.seeded = true;
        }
        // 4. The units: all of them on a new head or a resync; otherwise
        //    those in flight and those the cluster announced a change for
        //    (a quiet poll reads nothing).
        if full {
            self.units.retain(|k, _| chains.contains_key(k));
            self.tally = Tally::of(self.units.values());
            self.last_full = Some(Instant::now());
        }
        let dirty = std::mem::take(&mut self.dirty);
        let mut changed = full;
        let quiet = !full
            && dirty.is_empty()
            && self.tally.in_flight == 0
            && self.walked == Some(judged_head);
        // Which units to read: a merge of two sorted maps (no lookups: a
        // quiet pass over thousands of units costs a walk, not a search).
        let mut wanted: Vec<(Key, Arc<Chain>)> = Vec::new();
        if !quiet {
            let mut cached = self.units.iter().peekable();
            for (key, chain) in chains.iter() {
                while cached.peek().is_some_and(|(k, _)| *k < key) {
                    cached.next();
                }
                let u = cached.peek().filter(|(k, _)| *k == key).map(|(_, u)| *u);
                let want = full
                    || u.is_none_or(|u| {
                        !Arc::ptr_eq(&u.chain, chain)
                            || matches!(u.next, Next::Apply(_) | Next::Follow(_))
                            || (!dirty.is_empty()
                                && (dirty.contains(key)
                                    || u.chain
                                        .steps
                                        .iter()
                                        .any(|s| s.children.keys().any(|c| dirty.contains(c)))))
                    });
                if want {
                    wanted.push((key.clone(), chain.clone()));
                }
            }
        }
        let wanted_count = wanted.len();
        for (key, chain) in wanted {
            let span = tracing::info_span!("unit", object = %key);
            let u = self
                .reconcile(&path, &chain, &mut out)
                .instrument(span)
                .await;
            if self.units.get(&key) != Some(&u) {
                changed = true;
                self.tally.add(&u, 1);
                if let Some(old) = self.units.insert(key, u) {
                    self.tally.add(&old, -1);
                }
            }
        }
        self.walked = Some(judged_head);
        let t_walk = t0.elapsed();
        out.blocked = self.tally.blocked;
        debug_assert_eq!(self.tally, Tally::of(self.units.values()));
        self.metrics.units_blocked.set(out.blocked as i64);
        // 5. Upgrade plans: decide, and write a wave's hop commit when it
        //    may start (the next pass judges and applies it).
        let plans = judged_plans(&self.judged);
        if !plans.plans.is_empty() {
            changed |= self.run_plans(&path, head, &plans, &mut out).await;
        }
        let t_plans = t0.elapsed();
        // 6. Statuses, when something moved.
        if changed {
            self.queue_statuses(&report).await;
        }
        tracing::debug!(
            quiet,
            units = wanted_count,
            refresh_ms = t_refresh.as_secs_f64() * 1e3,
            judge_ms = (t_judge - t_refresh).as_secs_f64() * 1e3,
            units_ms = (t_walk - t_judge).as_secs_f64() * 1e3,
            plans_ms = (t_plans - t_walk).as_secs_f64() * 1e3,
            statuses_ms = (t0.elapsed() - t_plans).as_secs_f64() * 1e3,
            "pass"
        );
        out
    }

    /// Every status the judged history and the unit reports imply (only
    /// changed ones are sent).
    async fn queue_statuses(&mut self, report: &CheckReport) {
        let statuses = rollout::statuses(
            &self.opts.cluster_name,
            report,
            &self.units,
            self.opts.target_url.as_deref(),
        );
        for (sha, s) in statuses {
            self.queue_status(sha, s).await;
        }
    }

    /// Runs the plans of the head tree; true when a status may have moved.
    async fn run_plans(
        &mut self,
        path: &Path,
        head: Oid,
        plans: &crate::plan::exec::TreePlans,
        out: &mut PassOutcome,
    ) -> bool {
        use crate::plan::schedule::{Decision, ObjectView};
        // Gate conditions, read from the cluster first.
        let mut gates: BTreeMap<(Key, String, String), Result<(), String>> = BTreeMap::new();
        for (p, _) in &plans.plans {
            for g in &p.plan.spec.gates {
                let Some(key) = g.object.key() else { continue };
                let id = (key.clone(), g.condition.clone(), g.status.clone());
                if gates.contains_key(&id) {
                    continue;
                }
                let r = match self.cluster.get(&key).await {
                    Ok(Some(o)) => match o.status.condition(&g.condition) {
                        Some(c) if c.status == g.status => Ok(()),
                        Some(c) => Err(format!(
                            "{key} {} is {} ({})",
                            g.condition, c.status, c.reason
                        )),
                        None => Err(format!("{key} has no {} condition yet", g.condition)),
                    },
                    Ok(None) => Err(format!("{key} does not exist")),
                    Err(e) => Err(format!("{key}: {e}")),
                };
                gates.insert(id, r);
            }
        }
        let now = match &self.sim {
            Some(s) => self
                .clock_base
                .checked_add(jiff::SignedDuration::try_from(s.now()).unwrap_or_default())
                .unwrap_or(self.clock_base),
            None => jiff::Timestamp::now(),
        };
        let writer = crate::plan::exec::Writer {
            repo: path.to_owned(),
            branch: self.opts.branch.clone(),
            author: self.opts.plan_author.clone(),
            signing_key: self.opts.plan_signing_key.clone(),
            push: self.opts.plan_push.clone(),
            merge_proposals: self.opts.plan_merge_proposals,
        };
        let units = &self.units;
        let view = |k: &Key, u: &crate::plan::validate::Unit| {
            let r = units.get(k);
            let complete = r.is_some_and(|r| match r.next {
                Next::Done(i) => r.chain.steps.get(i).is_some_and(|s| s.release == u.release),
                _ => false,
            });
            ObjectView {
                started: false,
                complete,
                failed: r.and_then(|r| r.needs_person.clone()),
            }
        };
        let gate = |g: &crate::plan::Gate| {
            let Some(key) = g.object.key() else {
                return Err(format!("unknown kind {}", g.object.kind));
            };
            gates
                .get(&(key, g.condition.clone(), g.status.clone()))
                .cloned()
                .unwrap_or(Ok(()))
        };
        let passes = crate::plan::exec::run(
            plans,
            head,
            now,
            view,
            gate,
            &mut self.plan_completed,
            &writer,
        );
        let mut statuses = Vec::new();
        let mut failed = BTreeMap::new();
        let mut proposing = std::collections::HashSet::new();
        for mut p in passes {
            if p.wrote.is_some() {
                out.busy = true;
            }
            // A proposed wave waits on a person, not on time: not busy.
            let proposed = match p.propose.take() {
                Some(req) => {
                    let o = self.propose_wave(path, &req).await;
                    p.description = req.describe(&o.what);
                    proposing.insert(req.branch);
                    Some(o.state)
                }
                None => None,
            };
            if !matches!(p.decision, Decision::Complete | Decision::Held { .. }) {
                out.busy |= matches!(
                    p.decision,
                    Decision::Running { .. }
                        | Decision::Soaking { .. }
                        | Decision::OutsideWindow { .. }
                ) || (matches!(p.decision, Decision::Start { .. })
                    && proposed.is_none());
            }
            self.plan_last.insert(p.name.clone(), p.description.clone());
            let state = match p.decision {
                Decision::Complete => crate::forge::State::Success,
                Decision::Held { .. } => crate::forge::State::Failure,
                _ => proposed.unwrap_or(crate::forge::State::Pending),
            };
            if matches!(
                state,
                crate::forge::State::Failure | crate::forge::State::Error
            ) {
                failed.insert(p.name.clone(), p.description.clone());
            }
            statuses.push((
                p.sha.clone(),
                Status {
                    state,
                    context: format!("lockstep/{}/plan/{}", self.opts.cluster_name, p.name),
                    description: p.description,
                    target_url: self.opts.target_url.clone(),
                },
            ));
        }
        self.proposals.retain(|b, _| proposing.contains(b));
        self.plan_failed = failed;
        for (sha, s) in statuses {
            self.queue_status(sha, s).await;
        }
        false
    }

    /// One pass over a wave in `mode: propose` (see
    /// [`crate::plan::propose`]): the host is asked at most once per poll
    /// interval while nothing about the wave changed.
    async fn propose_wave(
        &mut self,
        path: &Path,
        req: &crate::plan::propose::Request,
    ) -> crate::plan::propose::Outcome {
        use crate::plan::propose::{self, Outcome};
        let Some(forge) = self.forge.clone().filter(|f| f.can_propose()) else {
            return Outcome::no_host();
        };
        let Some(target) = self.opts.plan_propose_to.clone() else {
            return Outcome::no_remote();
        };
        let keys = req.keys();
        let seen = self.proposals.get(&req.branch).filter(|s| s.keys == keys);
        if let Some(s) = seen
            && s.head == req.head
            && s.at.elapsed() < self.opts.poll
        {
            return s.outcome.clone();
        }
        let before = seen.and_then(|s| s.outcome.proposal.clone());
        let (repo, r) = (path.to_owned(), req.clone());
        let (author, key) = (
            self.opts.plan_author.clone(),
            self.opts.plan_signing_key.clone(),
        );
        let outcome = propose::step(&*forge, req, before.as_ref(), move || {
            propose::prepare(&repo, &r, &author, key.as_deref(), &target)
        })
        .await;
        if outcome.proposal.is_none() {
            tracing::info!(plan = %req.plan, wave = %req.wave_name, branch = %req.branch, outcome = %outcome.what, "plan: the wave waits without an open request");
        }
        self.proposals.insert(
            req.branch.clone(),
            SeenProposal {
                keys,
                head: req.head,
                outcome: outcome.clone(),
                at: Instant::now(),
            },
        );
        outcome
    }

    async fn queue_status(&mut self, sha: String, s: Status) {
        let key = (sha.clone(), s.context.clone());
        let value = (s.state, s.description.clone());
        if self.posted.get(&key) == Some(&value) {
            return;
        }
        self.posted.insert(key, value);
        self.queue.push(&sha, s).await;
    }

    /// Counts and logs the `new` commits at the end of `report`.
    fn count_verdicts(&self, report: &CheckReport, new: usize) {
        let skip = report.commits.len().saturating_sub(new);
        for c in report.commits.iter().skip(skip) {
            let reason = c
                .objects
                .iter()
                .find_map(|o| o.reason)
                .map_or("", |r| r.as_str());
            let verdict = match c.verdict {
                Verdict::Accepted => "accepted",
                Verdict::Refused => "refused",
                Verdict::Held => "held",
            };
            self.metrics
                .commits_judged
                .get_or_create(&VerdictLabels {
                    verdict: verdict.into(),
                    reason: reason.into(),
                })
                .inc();
            tracing::info!(commit = %c.sha, verdict, reason, summary = %c.summary, "judged");
        }
    }

    /// Judges the branch: Git only, so that every replica and every restart
    /// reaches the same verdicts (in-flight rules are the planner's: a hop
    /// waits for the one before it).
    async fn judge(
        &self,
        path: &Path,
        head: Oid,
        prev: Option<Judged>,
    ) -> Result<(Judged, usize), (String, Option<Judged>)> {
        let path = path.to_owned();
        let opts = CheckOptions {
            base: Some(self.opts.since.clone().unwrap_or_else(|| EMPTY_TREE.into())),
            head: head.to_string(),
            prefixes: self.opts.paths.clone(),
            live: None,
            max_file_bytes: self.opts.max_file_bytes,
            memory: None,
        };
        let t = Instant::now();
        let r = tokio::task::spawn_blocking(move || {
            let repo = match GitRepo::open(&path) {
                Ok(r) => r,
                Err(e) => return Err((e.to_string(), prev)),
            };
            let forward = prev.as_ref().is_some_and(|p| {
                repo.raw()
                    .graph_descendant_of(head, p.head)
                    .unwrap_or(false)
            });
            match prev {
                // The branch moved forward: judge only the new commits, from
                // the last accepted tree, and extend the chains they touch.
                Some(prev) if forward => {
                    let more = (|| {
                        let baseline = match prev
                            .report
                            .commits
                            .iter()
                            .rev()
                            .find(|c| c.verdict == Verdict::Accepted)
                        {
                            Some(c) => {
                                let oid = Oid::from_str(&c.sha).map_err(|e| e.to_string())?;
                                Some(repo.commit(oid).map_err(|e| e.to_string())?.tree)
                            }
                            None => history::base_tree(&repo, &prev.report)
                                .map_err(|e| e.to_string())?,
                        };
                        history::check_after(&repo, &opts, prev.head, baseline, &prev.report.memory)
                            .map_err(|e| e.to_string())
                    })();
                    let more = match more {
                        Ok(m) => m,
                        Err(e) => return Err((e, Some(prev))),
                    };
                    let Judged {
                        report,
                        chains,
                        plans: prev_plans,
                        ..
                    } = prev;
                    let mut chains = Arc::unwrap_or_clone(chains);
                    rollout::extend_chains(&mut chains, &more.commits, |name, file, sha| {
                        plane_key(&repo, sha, file, name)
                    });
                    let mut report = Arc::unwrap_or_clone(report);
                    let n = more.commits.len();
                    report.commits.extend(more.commits);
                    report.memory = more.memory;
                    if report.commits.iter().any(|c| c.verdict == Verdict::Refused) {
                        report.verdict = Verdict::Refused;
                    }
                    report.head = head.to_string();
                    // Plans are read again only when some exist or a new
                    // commit touched one (units move with every hop).
                    let touched = report.commits[report.commits.len() - n..]
                        .iter()
                        .any(|c| crate::plan::exec::touched(&repo, &c.sha, &opts.prefixes));
                    let plans = if prev_plans.plans.is_empty() && !touched {
                        prev_plans
                    } else {
                        Arc::new(
                            crate::plan::exec::read(
                                &repo,
                                head,
                                &opts.prefixes,
                                opts.max_file_bytes,
                            )
                            .unwrap_or_default(),
                        )
                    };
                    Ok((
                        Judged {
                            head,
                            report: Arc::new(report),
                            chains: Arc::new(chains),
                            plans,
                        },
                        n,
                    ))
                }
                // First look, or history rewritten: all of it.
                prev => {
                    let report = match history::check(&repo, &opts) {
                        Ok(r) => r,
                        Err(e) => return Err((e.to_string(), prev)),
                    };
                    let mut chains = BTreeMap::new();
                    rollout::extend_chains(&mut chains, &report.commits, |name, file, sha| {
                        plane_key(&repo, sha, file, name)
                    });
                    // Units whose chain the rewrite did not change keep
                    // their `Arc` (and so are not read again).
                    if let Some(old) = prev.as_ref() {
                        for (k, c) in chains.iter_mut() {
                            if let Some(o) = old.chains.get(k)
                                && **o == **c
                            {
                                *c = o.clone();
                            }
                        }
                    }
                    let n = report.commits.len();
                    let plans =
                        crate::plan::exec::read(&repo, head, &opts.prefixes, opts.max_file_bytes)
                            .unwrap_or_default();
                    Ok((
                        Judged {
                            head,
                            report: Arc::new(report),
                            chains: Arc::new(chains),
                            plans: Arc::new(plans),
                        },
                        n,
                    ))
                }
            }
        })
        .await
        .map_err(|e| (e.to_string(), None))
        .and_then(|r| r);
        Metrics::observe(&self.metrics.git_seconds, "judge", r.is_ok(), t.elapsed());
        r
    }

    /// Pull-request heads get the verdict of their commits before merge.
    async fn judge_pulls(&mut self, path: &Path, head: Oid, pulls: Vec<(u64, Oid)>) {
        // The branch's floors at its head: a pull request forked there
        // needs no look back through older history.
        let memory = self
            .judged
            .as_ref()
            .filter(|j| j.head == head)
            .map(|j| j.report.memory.clone());
        for (n, oid) in pulls {
            if self.pulls.get(&n) == Some(&oid) || oid == head {
                continue;
            }
            let p = path.to_owned();
            let opts = CheckOptions {
                base: Some(head.to_string()),
                head: oid.to_string(),
                prefixes: self.opts.paths.clone(),
                live: None,
                max_file_bytes: self.opts.max_file_bytes,
                memory: memory.clone(),
            };
            let r = tokio::task::spawn_blocking(move || {
                let repo = GitRepo::open(&p).map_err(|e| e.to_string())?;
                history::check(&repo, &opts).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
            match r {
                Ok(report) => {
                    for c in &report.commits {
                        tracing::info!(pull = n, commit = %c.sha, verdict = ?c.verdict, "pull request judged");
                        let s = describe::commit_status(
                            &self.opts.cluster_name,
                            c,
                            self.opts.target_url.as_deref(),
                        );
                        self.queue_status(c.sha.clone(), s).await;
                    }
                    self.pulls.insert(n, oid);
                }
                Err(e) => tracing::warn!(pull = n, error = %e, "judging a pull request failed"),
            }
        }
    }

    async fn seed(&self, path: &Path, report: &CheckReport) {
        let Some(sim) = &self.sim else { return };
        let Some(first) = report.commits.first() else {
            return;
        };
        let path = path.to_owned();
        let sha = first.sha.clone();
        let opts = CheckOptions {
            prefixes: self.opts.paths.clone(),
            max_file_bytes: self.opts.max_file_bytes,
            ..CheckOptions::default()
        };
        let desired = tokio::task::spawn_blocking(move || {
            let repo = GitRepo::open(&path).ok()?;
            let oid = Oid::from_str(&sha).ok()?;
            let tree = repo.commit(oid).ok()?.tree;
            history::tree_desired(&repo, Some(tree), &opts)
                .ok()
                .map(|(d, _)| d)
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
        if let Ok(mut w) = sim.world() {
            crate::rehearse::seed(&mut w, &desired);
            tracing::info!(objects = desired.len(), commit = %first.sha, "simulated cluster seeded with the first commit's tree");
        }
    }

    /// Reads one unit, decides and acts.
    async fn reconcile(
        &mut self,
        path: &Path,
        chain: &Arc<Chain>,
        out: &mut PassOutcome,
    ) -> UnitReport {
        let state = match self.read_unit(chain).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "reading the unit failed; next pass");
                out.busy = true;
                return UnitReport {
                    chain: chain.clone(),
                    next: Next::Follow(0),
                    progress: BTreeMap::new(),
                    needs_person: Some(format!("cluster unavailable: {e}")),
                };
            }
        };
        let complete = |i: usize| {
            chain.followed(i).iter().all(|(k, t)| {
                state
                    .objects
                    .get(k)
                    .is_some_and(|o| o.progress == Progress::Complete && o.spec_matches(k.kind, t))
            })
        };
        let next = rollout::next(chain, &state, complete);
        tracing::debug!(?next, steps = chain.steps.len(), objects = ?state.objects, spec = ?state.spec, "decided");
        let mut report = UnitReport {
            chain: chain.clone(),
            next: next.clone(),
            progress: BTreeMap::new(),
            needs_person: None,
        };
        match next {
            Next::Apply(i) => {
                let step = &chain.steps[i];
                let span = tracing::info_span!("apply", commit = %step.sha, to = step.release.as_deref().unwrap_or(""));
                match self.apply(path, chain, i).instrument(span).await {
                    Ok(()) => {
                        out.applied += 1;
                        out.busy = true;
                        self.metrics
                            .hops_applied
                            .get_or_create(&KindLabels {
                                kind: chain.unit.kind.as_str().into(),
                            })
                            .inc();
                        report.next = Next::Follow(i);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, commit = %step.sha, "apply failed");
                        // Tried again next pass either way; a rejection waits
                        // on a person, so a bounded run can stop.
                        out.busy = e.retryable();
                        report.needs_person =
                            (!e.retryable()).then(|| format!("apply refused: {e}"));
                        report.next = Next::Apply(i);
                    }
                }
            }
            Next::Follow(i) => {
                self.follow(path, chain, i, &state, &mut report, out).await;
            }
            Next::Done(i) => {
                for (k, _) in chain.followed(i) {
                    report.progress.insert(k, Progress::Complete);
                }
            }
            Next::Blocked(ref m) => {
                tracing::warn!(reason = %m, "unit blocked");
            }
        }
        report
    }

    async fn read_unit(&self, chain: &Chain) -> Result<UnitState, ClusterError> {
        let t = Instant::now();
        let unit = self.cluster.get(&chain.unit).await;
        Metrics::observe(
            &self.metrics.cluster_seconds,
            "get",
            unit.is_ok(),
            t.elapsed(),
        );
        let unit = unit?;
        let mut state = UnitState {
            spec: unit.as_ref().map(|o| Target {
                release: rollout::spec_release(o.key.kind, o.release.as_deref(), o.image.as_ref()),
                image: o.image.as_ref().map(ImageRef::reference),
            }),
            objects: BTreeMap::new(),
            projected_by: unit.as_ref().and_then(|o| o.status.projected_by.clone()),
        };
        // Followed objects: the unit, or every child any step names.
        let mut keys: Vec<Key> = Vec::new();
        if chain.unit.kind == Kind::ControlPlane {
            for s in &chain.steps {
                for k in s.children.keys() {
                    if !keys.contains(k) {
                        keys.push(k.clone());
                    }
                }
            }
        } else if unit.is_some() {
            keys.push(chain.unit.clone());
        }
        for k in keys {
            let obj = if k == chain.unit {
                unit.clone()
            } else {
                self.cluster.get(&k).await?
            };
            let Some(obj) = obj else { continue };
            let t = Instant::now();
            let obs = observe(&self.cluster, &k).await;
            Metrics::observe(
                &self.metrics.cluster_seconds,
                "observe",
                obs.is_ok(),
                t.elapsed(),
            );
            let Some(obs) = obs? else { continue };
            let spec = Target {
                release: rollout::spec_release(k.kind, obj.release.as_deref(), obj.image.as_ref()),
                image: obj.image.as_ref().map(ImageRef::reference),
            };
            // Stateless here; the tracker adds stall detection when followed.
            let to = Target {
                release: spec.release.clone(),
                image: spec.image.clone(),
            }
            .follow_to(k.kind);
            let progress = assess(&to, &obs);
            state.objects.insert(k, ObjectState { spec, progress });
        }
        Ok(state)
    }

    async fn apply(&self, path: &Path, chain: &Chain, i: usize) -> Result<(), ApplyError> {
        let step = &chain.steps[i];
        // The whole accepted document, or nothing: a smaller apply (release
        // and image alone) would silently drop what server-side apply owns.
        let document = Some(
            load_document(path, &step.sha, &step.file, &chain.unit)
                .await
                .map_err(ApplyError::Document)?,
        );
        let image = step
            .image
            .as_deref()
            .and_then(|r| ImageRef::parse_reference(r).ok());
        let overrides = document.as_ref().map(plane_overrides).unwrap_or_default();
        if let Some(sim) = &self.sim
            && let Some(d) = &document
        {
            // The simulated operator installs what lockstep creates.
            let desired = desired_of(d, &step.file);
            if let Ok(mut w) = sim.world() {
                crate::rehearse::seed(&mut w, &desired);
            }
        }
        let req = ApplyRequest {
            key: chain.unit.clone(),
            release: step.release.clone(),
            image,
            overrides,
            document,
        };
        let t = Instant::now();
        let r = self.cluster.apply(&req).await;
        Metrics::observe(
            &self.metrics.cluster_seconds,
            "apply",
            r.is_ok(),
            t.elapsed(),
        );
        r?;
        tracing::info!(
            commit = %step.sha,
            object = %chain.unit,
            from = step.from.as_deref().unwrap_or("new"),
            to = step.release.as_deref().unwrap_or(""),
            "applied"
        );
        Ok(())
    }

    async fn follow(
        &mut self,
        path: &Path,
        chain: &Chain,
        i: usize,
        state: &UnitState,
        report: &mut UnitReport,
        out: &mut PassOutcome,
    ) {
        let now = self.now();
        let projected = (chain.unit.kind == Kind::ControlPlane).then_some(chain.unit.name.as_str());
        let mut reassert = false;
        for (key, target) in chain.followed(i) {
            let to = target.follow_to(key.kind);
            let id = (key.clone(), to.clone());
            let t = Instant::now();
            let obs = observe(&self.cluster, &key).await;
            Metrics::observe(
                &self.metrics.cluster_seconds,
                "observe",
                obs.is_ok(),
                t.elapsed(),
            );
            let Ok(Some(obs)) = obs else {
                report.progress.insert(key.clone(), Progress::Waiting);
                continue;
            };
            if !self.following.contains_key(&id) {
                // Repairs already made for this hop are in the cluster's
                // Events: a restart does not refill the budget.
                let retries = self.past_repairs(&key).await;
                self.following.insert(
                    id.clone(),
                    Following {
                        tracker: Tracker::new(to.clone(), self.opts.deadlines.clone()),
                        history: RepairHistory {
                            retries,
                            last: (retries > 0).then_some(now),
                        },
                        phase: None,
                        reported: false,
                    },
                );
            }
            let Some(f) = self.following.get_mut(&id) else {
                continue;
            };
            let p = f.tracker.observe(&obs, now);
            // Phase durations, as seen.
            let phase = obs.status.phase().map(str::to_owned);
            match (&f.phase, &phase) {
                (Some((old, since)), new) if Some(old) != new.as_ref() => {
                    self.metrics
                        .phase_seconds
                        .get_or_create(&PhaseLabels {
                            kind: key.kind.as_str().into(),
                            phase: old.clone(),
                        })
                        .observe(now.saturating_sub(*since).as_secs_f64());
                    f.phase = new.clone().map(|n| (n, now));
                }
                (None, Some(new)) => f.phase = Some((new.clone(), now)),
                _ => {}
            }
            let action = repair::plan(&key, projected, &p, &f.history, now, &self.opts.repair);
            match &action {
                Action::DeleteJob { .. } | Action::Report(_) => {
                    let first_report = matches!(action, Action::Report(_)) && !f.reported;
                    if matches!(action, Action::DeleteJob { .. }) || first_report {
                        let r = repair::execute(&self.cluster, &key, &action, &mut f.history, now)
                            .await;
                        if let Err(e) = r {
                            tracing::warn!(error = %e, object = %key, "repair failed; next pass");
                        }
                    }
                    if let Action::Report(m) = &action {
                        f.reported = true;
                        report.needs_person = Some(m.clone());
                    } else {
                        out.repaired += 1;
                    }
                    self.metrics
                        .repairs
                        .get_or_create(&RepairLabels {
                            kind: key.kind.as_str().into(),
                            action: match action {
                                Action::DeleteJob { .. } => "rerun-job",
                                _ => "report",
                            }
                            .into(),
                        })
                        .inc();
                }
                Action::ReassertPlane { .. } => reassert = true,
                Action::WaitUntil(_) | Action::Nothing => {}
            }
            if p == Progress::Complete
                && state
                    .objects
                    .get(&key)
                    .is_some_and(|o| o.progress != Progress::Complete)
            {
                self.metrics
                    .hops_completed
                    .get_or_create(&KindLabels {
                        kind: key.kind.as_str().into(),
                    })
                    .inc();
            }
            report.progress.insert(key, p);
        }
        if reassert {
            tracing::warn!(plane = %chain.unit, "a child was parked by an edit outside Git; re-asserting the accepted target");
            if let Err(e) = self.apply(path, chain, i).await {
                tracing::warn!(error = %e, "re-asserting the plane failed; next pass");
            } else {
                out.repaired += 1;
                self.metrics
                    .repairs
                    .get_or_create(&RepairLabels {
                        kind: chain.unit.kind.as_str().into(),
                        action: "reassert-plane".into(),
                    })
                    .inc();
            }
        }
        // A hop that a person must look at keeps the unit where it is, but
        // the pass has nothing more to do for it.
        if report.needs_person.is_none() {
            out.busy = true;
        }
    }

    /// Re-runs lockstep already made for an object (its `RepairJobDeleted`
    /// Events): conservative when an older hop left some behind.
    async fn past_repairs(&self, key: &Key) -> u32 {
        match self.cluster.events(key).await {
            Ok(events) => events
                .iter()
                .filter(|e| e.reason == "RepairJobDeleted")
                .filter_map(|e| {
                    e.message
                        .split("(attempt ")
                        .nth(1)
                        .and_then(|r| r.split(')').next())
                        .and_then(|n| n.parse::<u32>().ok())
                })
                .max()
                .unwrap_or(0),
            Err(_) => 0,
        }
    }
}

impl ObjectState {
    fn spec_matches(&self, kind: Kind, t: &Target) -> bool {
        let tracks = kind.release_source() != crate::kind::ReleaseSource::None;
        (!tracks || t.release.is_none() || self.spec.release == t.release)
            && (t.image.is_none() || self.spec.image.is_none() || self.spec.image == t.image)
    }
}

fn judged_plans(j: &Option<Judged>) -> Arc<crate::plan::exec::TreePlans> {
    j.as_ref().map(|j| j.plans.clone()).unwrap_or_default()
}

/// Runs status delivery until the process ends: newest status per commit
/// and context, late when the host was down. With git notes and a remote,
/// the notes are pushed after every delivery that wrote some.
pub async fn deliver_forever(
    queue: StatusQueue,
    forge: Arc<AnyForge>,
    metrics: Arc<Metrics>,
    policy: RetryPolicy,
    push_notes: Option<crate::forge::notes::NotesRemote>,
) {
    loop {
        let t = Instant::now();
        let r = queue.drain(&*forge, &policy).await;
        record_drain(&metrics, &r, t.elapsed());
        if r.posted > 0
            && let Some(remote) = &push_notes
        {
            push_notes_to(&forge, remote).await;
        }
        if r.deferred {
            tokio::time::sleep(Duration::from_secs(5)).await;
        } else if queue.is_empty().await {
            queue.wait().await;
        }
    }
}

/// Pushes git notes to `remote` (a remote named "": the branch's remote),
/// off the runtime; a push refused because another writer pushed first is
/// merged and tried again.
pub async fn push_notes_to(forge: &Arc<AnyForge>, remote: &crate::forge::notes::NotesRemote) {
    use crate::forge::notes::NotesRemote;
    let forge = forge.clone();
    let remote = remote.clone();
    let r = tokio::task::spawn_blocking(move || {
        let AnyForge::Notes(notes) = &*forge else {
            return Ok(());
        };
        let remote = match remote {
            NotesRemote::Named(n) if n.is_empty() => {
                NotesRemote::Named(notes.branch_remote().unwrap_or_else(|| "origin".into()))
            }
            r => r,
        };
        notes.push_to(&remote)
    })
    .await;
    match r {
        Ok(Err(e)) => tracing::warn!(error = %e, "pushing notes failed; next delivery tries again"),
        Err(e) => tracing::warn!(error = %e, "pushing notes failed"),
        Ok(Ok(())) => {}
    }
}

pub fn record_drain(metrics: &Metrics, r: &crate::forge::delivery::DrainReport, took: Duration) {
    use crate::metrics::ResultLabels;
    for (result, n) in [
        ("posted", r.posted),
        ("already_there", r.already_there),
        ("rejected", r.rejected.len()),
        ("deferred", usize::from(r.deferred)),
    ] {
        if n > 0 {
            metrics
                .status_deliveries
                .get_or_create(&ResultLabels {
                    result: result.into(),
                })
                .inc_by(n as u64);
        }
    }
    if r.posted + r.already_there > 0 || r.deferred {
        Metrics::observe(&metrics.forge_seconds, "drain", !r.deferred, took);
    }
}

/// Drains what is queued now (for `--until-idle` and tests).
pub async fn deliver_now<F: Forge>(
    queue: &StatusQueue,
    forge: &F,
    metrics: &Metrics,
    policy: &RetryPolicy,
) -> bool {
    let t = Instant::now();
    let r = queue.drain(forge, policy).await;
    record_drain(metrics, &r, t.elapsed());
    !r.deferred
}

/// A ControlPlane's key from the file holding it at a commit.
fn plane_key(repo: &GitRepo, sha: &str, file: &str, name: &str) -> Option<Key> {
    let docs = documents_at(repo, sha, file)?;
    docs.into_iter().find_map(|d| {
        (d.get("kind")?.as_str()? == "ControlPlane"
            && d.pointer("/metadata/name")?.as_str()? == name)
            .then(|| {
                let ns = d
                    .pointer("/metadata/namespace")
                    .and_then(|n| n.as_str())
                    .unwrap_or("default");
                Key::new(Kind::ControlPlane, ns, name)
            })
    })
}

fn documents_at(repo: &GitRepo, sha: &str, file: &str) -> Option<Vec<serde_json::Value>> {
    let oid = Oid::from_str(sha).ok()?;
    let tree = repo.raw().find_commit(oid).ok()?.tree().ok()?;
    let entry = tree.get_path(Path::new(file)).ok()?;
    let blob = repo.raw().find_blob(entry.id()).ok()?;
    let text = std::str::from_utf8(blob.content()).ok()?;
    // The gate read this file within its byte limit: the same budget here,
    // or a file of thousands of documents would pass the gate and then not
    // be found to apply.
    let limit = crate::yaml::Limit::manifest(text.len());
    serde_saphyr::from_multiple_with_options::<serde_json::Value>(
        text,
        crate::yaml::options(&limit, text.len()),
    )
    .ok()
}

/// The whole document of `key` as Git has it at `sha`: what lockstep
/// applies (server-side apply owns what it sends).
async fn load_document(
    path: &Path,
    sha: &str,
    file: &str,
    key: &Key,
) -> Result<serde_json::Value, String> {
    let (path, sha, file, key) = (
        path.to_owned(),
        sha.to_owned(),
        file.to_owned(),
        key.clone(),
    );
    let short = sha.get(..10).unwrap_or(&sha).to_owned();
    let where_ = format!("{} at {short}", crate::escape::escape(&file));
    tokio::task::spawn_blocking(move || {
        let repo = GitRepo::open(&path).map_err(|e| e.to_string())?;
        let docs = documents_at(&repo, &sha, &file)
            .ok_or_else(|| format!("{where_} cannot be read as YAML"))?;
        docs.into_iter()
            .find(|d| {
                d.get("kind").and_then(|k| k.as_str()) == Some(key.kind.as_str())
                    && d.pointer("/metadata/name").and_then(|n| n.as_str())
                        == Some(key.name.as_str())
                    && d.pointer("/metadata/namespace")
                        .and_then(|n| n.as_str())
                        .unwrap_or("default")
                        == key.namespace
            })
            .ok_or_else(|| format!("{where_} holds no {key}"))
    })
    .await
    .map_err(|e| format!("reading what to apply: {e}"))?
}

/// Why an accepted step was not applied.
#[derive(Debug, thiserror::Error)]
enum ApplyError {
    /// The accepted document could not be read back from Git: nothing is
    /// applied rather than part of it.
    #[error("cannot read what to apply: {0}; nothing applied")]
    Document(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl ApplyError {
    fn retryable(&self) -> bool {
        match self {
            ApplyError::Document(_) => false,
            ApplyError::Cluster(e) => e.retryable(),
        }
    }
}

/// A plane's `services.<svc>.image` overrides.
fn plane_overrides(doc: &serde_json::Value) -> Vec<(Kind, ImageRef)> {
    let Some(services) = doc.pointer("/spec/services").and_then(|s| s.as_object()) else {
        return Vec::new();
    };
    services
        .iter()
        .filter_map(|(svc, v)| {
            let kind = Kind::from_service(svc)?;
            let i = v.get("image")?;
            let image = ImageRef::new(
                i.get("repository").and_then(|r| r.as_str()),
                i.get("tag").and_then(|r| r.as_str()),
                i.get("digest").and_then(|r| r.as_str()),
            )
            .ok()?;
            Some((kind, image))
        })
        .collect()
}

/// The desired objects of one document (a plane and its children).
fn desired_of(doc: &serde_json::Value, file: &str) -> Vec<crate::desired::Desired> {
    let Ok(text) = serde_json::to_string(doc) else {
        return Vec::new();
    };
    let parsed = crate::manifest::parse_file(file, text.as_bytes(), usize::MAX);
    crate::desired::expand(&parsed.documents)
}
