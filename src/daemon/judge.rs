//! Judge: the second step of a pass. On a new branch head, the new commits
//! are judged against the live state of the objects they hold (the rules
//! of `check --live`), with the verdicts that state decided recorded in the
//! cluster first ([`super::record`]), so every replica and every restart
//! reaches the same verdicts; the accepted (and held) ones extend the
//! chains of their units; each new step carries its document (compact JSON
//! text, one allocation per distinct document), so no apply reads Git again.
//! Pull-request heads are judged too, and new verdicts are queued before
//! anything is applied.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use git2::Oid;

use super::{Daemon, PassError, PassOutcome, Repo};
use crate::cluster::Cluster;
use crate::forge::describe;
use crate::gate::Verdict;
use crate::git::{GitRepo, Store};
use crate::history::{self, CheckOptions, CheckReport, EMPTY_TREE};
use crate::kind::{Key, Kind};
use crate::live::Live;
use crate::manifest::ParsedFile;
use crate::metrics::{Metrics, VerdictLabels};
use crate::rollout::{self, Chain, Document, StepDocument};

/// The commits whose verdict the live state decided, with the keys they
/// hold: what the record gets.
type Decided = Vec<(String, Vec<Key>)>;

/// The branch's judged history, and what it implies.
pub(super) struct Judged {
    pub head: Oid,
    pub report: Arc<CheckReport>,
    /// Shared with the unit reports: an unchanged chain keeps its `Arc`
    /// across heads, so a pass tells changed units by pointer.
    pub chains: Arc<BTreeMap<Key, Arc<Chain>>>,
    /// The head tree's upgrade plans and the units they can select.
    pub plans: Arc<crate::plan::exec::TreePlans>,
    /// The head tree's pre-flight gates.
    pub gates: Arc<crate::preflight::Gates>,
    /// The plans' maintenance windows, by unit.
    pub windows: Arc<PlanWindows>,
    /// The waits of the last accepted commit's tree, kept while heads stay
    /// refused so that each new refused head does not read them again.
    pub accepted_waits: Option<Arc<AcceptedWaits>>,
}

/// The pre-flight gates and maintenance windows of one accepted commit's
/// tree ([`in_effect`]): fixed by the commit, so kept by its id.
pub(super) struct AcceptedWaits {
    commit: Oid,
    gates: crate::preflight::Gates,
    windows: PlanWindows,
}

/// The maintenance windows and plan gates a hop of each unit waits for
/// ([`crate::plan::exec::holds`]).
pub(super) type PlanWindows = BTreeMap<Key, Vec<crate::plan::exec::Hold>>;

/// What the judge step hands on.
pub(super) struct Judgment {
    pub head: Oid,
    pub report: Arc<CheckReport>,
    pub chains: Arc<BTreeMap<Key, Arc<Chain>>>,
    /// The pre-flight gates checked before a hop is applied.
    pub gates: Arc<crate::preflight::Gates>,
    /// The plans' maintenance windows, checked before a hop is applied.
    pub windows: Arc<PlanWindows>,
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Judges a new head (and new pull-request heads); `None` when nothing
    /// was ever judged successfully.
    pub(super) async fn reconcile_judgment(
        &mut self,
        path: &Path,
        head: Oid,
        pulls: Vec<(u64, Oid)>,
        out: &mut PassOutcome,
    ) -> Option<Judgment> {
        let (mut fresh, mut judged_now) = (false, false);
        if self.judged.as_ref().is_none_or(|j| j.head != head) {
            judged_now = true;
            // Taken, so that the report and chains are extended in place
            // rather than copied.
            let prev = self.judged.take();
            match self.judge(path, head, prev).await {
                Ok((j, new)) => {
                    self.count_verdicts(&j.report, new);
                    self.judged = Some(j);
                    self.judge_error = None;
                    fresh = new > 0;
                }
                Err((e, prev)) => {
                    tracing::error!(error = %e, head = %head, "judging failed");
                    self.judged = prev;
                    out.source_error = Some(e.to_string());
                    out.waits_on_person = e.needs_person();
                    self.judge_error = e.needs_person().then(|| e.to_string());
                }
            }
        }
        // Plans that could not be read hold every hop: they are read again
        // each pass until they are, or a failure of Git for a moment would
        // hold the fleet until the next push.
        if !judged_now
            && let Some(j) = self.judged.as_mut()
            && j.plans.error.is_some()
            && let Ok(repo) = GitRepo::open(path)
        {
            let opts = CheckOptions {
                prefixes: self.opts.paths.clone(),
                max_file_bytes: self.opts.max_file_bytes,
                ..CheckOptions::default()
            };
            let plans = Arc::new(read_plans(&repo, j.head, &j.report, &opts));
            let (gates, windows, kept) = in_effect(
                &repo,
                j.head,
                &j.report,
                &plans,
                &opts,
                j.accepted_waits.clone(),
            );
            j.plans = plans;
            j.gates = Arc::new(gates);
            j.windows = Arc::new(windows);
            j.accepted_waits = kept;
        }
        if self.opts.pull_requests && self.judge_pulls(path, head, pulls).await {
            // More pull requests wait for a verdict: a bounded run goes on.
            out.busy = true;
        }
        let j = self.judged.as_ref()?;
        let judgment = Judgment {
            head: j.head,
            report: j.report.clone(),
            chains: j.chains.clone(),
            gates: j.gates.clone(),
            windows: j.windows.clone(),
        };
        // The new commits' verdicts go out before anything is applied: a
        // push is answered in the time it takes to judge it, not to apply
        // it. (The units are last pass's, so older commits' statuses are
        // unchanged and not sent again.) The first pass has no units yet:
        // its statuses wait for them.
        if fresh && self.walked.is_some() {
            self.reconcile_statuses(&judgment.report).await;
        }
        Some(judgment)
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

    /// Judges the branch. Commits are judged once against the live state
    /// of the moment they are first seen; where that decided the verdict
    /// (an abort, a held hop, a refusal by the cluster's state), the state
    /// is recorded in the cluster first ([`super::record`]) and every later
    /// judgment (a restart, another replica) judges the commit with it
    /// again: verdicts never move. History before the record's watermark
    /// is Git's alone.
    async fn judge(
        &mut self,
        path: &Path,
        head: Oid,
        prev: Option<Judged>,
    ) -> Result<(Judged, usize), (PassError, Option<Judged>)> {
        let (mut record, base) = match self.load_record().await {
            Ok(r) => r,
            Err(e) => return Err((e, prev)),
        };
        if self.leads() {
            self.adopt_deleted(&record);
        }
        let opts = CheckOptions {
            base: Some(self.opts.since.clone().unwrap_or_else(|| EMPTY_TREE.into())),
            head: head.to_string(),
            prefixes: self.opts.paths.clone(),
            live: None,
            max_file_bytes: self.opts.max_file_bytes,
            memory: None,
            trust: self.opts.trust.clone(),
            recorded: super::record::shared(&record),
            // The seed's parse of the first tree, on the first judgment only.
            sources: self.opts.parsed.take(),
            names: Some(self.names.clone()),
            keep_floors: true,
            // As each new head is judged (`history::check_after`).
            from_base: true,
        };
        let t = Instant::now();
        let r = self
            .judge_with_live(path, head, prev, &opts, &mut record)
            .await;
        Metrics::observe(&self.metrics.git_seconds, "judge", r.is_ok(), t.elapsed());
        let (judged, n, entries) = r?;
        // The record goes to the cluster before any verdict it decided is
        // posted or applied: a verdict that cannot be recorded is not given.
        let moved = record.watermark.as_deref() != Some(&head.to_string());
        if moved || !entries.is_empty() {
            record.watermark = Some(head.to_string());
            // The objects deleted outside Git as this process keeps them
            // (once it has read the record's).
            let mut with_deleted = self.gone_recorded.is_some();
            let stored = record.deleted.clone();
            if with_deleted {
                record.set_deleted(&self.gone);
            }
            // On failure nothing is posted; the next pass loads the record
            // afresh and judges the same commits again.
            let (text, dropped) = match record.fit(entries.len()) {
                Ok(t) => t,
                // More deleted objects than the record holds: the judgment
                // goes on with those it held (the units step says the rest
                // cannot be kept), so that the units are still walked and
                // each re-created one leaves the list.
                Err(super::record::RecordError::TooManyDeleted { .. }) if with_deleted => {
                    with_deleted = false;
                    record.deleted = stored;
                    match record.fit(entries.len()) {
                        Ok(t) => t,
                        Err(e) => return Err((e.into(), None)),
                    }
                }
                Err(e) => return Err((e.into(), None)),
            };
            if dropped > 0 {
                tracing::warn!(
                    dropped,
                    kept = record.commits.len(),
                    bytes = text.len(),
                    "the record of live verdicts reached its bound; its oldest commits were dropped and will be judged from Git alone after a restart"
                );
            }
            if !self.leads() {
                return Err((PassError::NotLeader, None));
            }
            if let Err(e) = self
                .cluster
                .save_record(
                    &super::record::name(&self.opts.cluster_name),
                    &text,
                    base.as_deref(),
                )
                .await
            {
                // Judged again next pass, from where the record stands
                // (written by another process: what it changed in the
                // deleted objects is taken then, `adopt_deleted`).
                return Err((
                    PassError::Cluster {
                        what: "lockstep's record of live verdicts (writing it)".into(),
                        source: Box::new(e),
                    },
                    None,
                ));
            }
            if with_deleted {
                self.gone_recorded = Some(self.gone.clone());
            }
        }
        Ok((judged, n))
    }

    /// The record, read from the cluster on every new head: another
    /// replica may have led (and recorded) since this one last did, and a
    /// stale copy saved back would lose its entries. With it, the text it
    /// was read from: a save hands that back, and is refused if another
    /// process wrote the record since (`Cluster::save_record`).
    /// A missing record is a first start only while no object carries
    /// lockstep's applied annotation: the record is written before the
    /// first apply, so otherwise it was lost, and judging from Git alone
    /// could turn an abort around (`docs/gate.md`, "Verdicts don't move").
    pub(super) async fn load_record(
        &mut self,
    ) -> Result<(super::record::Record, Option<String>), PassError> {
        let name = super::record::name(&self.opts.cluster_name);
        let cluster_error = |e| PassError::Cluster {
            what: "lockstep's record of live verdicts".into(),
            source: Box::new(e),
        };
        let text = self
            .cluster
            .load_record(&name)
            .await
            .map_err(cluster_error)?;
        match text {
            Some(t) => Ok((super::record::Record::parse(&t)?, Some(t))),
            None => match self.cluster.applied_object().await.map_err(cluster_error)? {
                None => Ok((super::record::Record::new(), None)),
                Some(key) => Err(super::record::RecordError::Lost {
                    location: self.cluster.record_location(&name),
                    object: key.to_string(),
                }
                .into()),
            },
        }
    }

    /// The judgment proper: Git (with the record) up to where the record
    /// says everything was judged, then the new commits against the live
    /// state. Returns the new entries of the record.
    #[expect(
        clippy::result_large_err,
        reason = "the error hands the last judgment back whole, once a pass: boxing it gains nothing"
    )]
    async fn judge_with_live(
        &self,
        path: &Path,
        head: Oid,
        prev: Option<Judged>,
        opts: &CheckOptions,
        record: &mut super::record::Record,
    ) -> Result<(Judged, usize, Decided), (PassError, Option<Judged>)> {
        let repo_path = path.to_owned();
        let descends = |from: Oid| {
            let p = repo_path.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    GitRepo::open(&p)
                        .ok()
                        .and_then(|r| r.raw().graph_descendant_of(head, from).ok())
                        .unwrap_or(false)
                })
                .await
                .unwrap_or(false)
            }
        };
        // Where the judgment starts from: the last judgment when the branch
        // moved forward; else (a first pass, or history rewritten) Git and
        // the record up to the watermark, when the head descends from it.
        // A judgment this process made before another led (and moved the
        // watermark on) is not extended: the commits after it are judged
        // again from Git and the record, as the other leader recorded them.
        let current = |p: &Judged| {
            record
                .watermark
                .as_deref()
                .is_none_or(|w| w == p.head.to_string())
        };
        let prev = match prev {
            Some(p) if p.head == head => return Ok((p, 0, Vec::new())),
            Some(p) if current(&p) && descends(p.head).await => p,
            other => {
                let watermark = record
                    .watermark
                    .as_deref()
                    .and_then(|w| Oid::from_str(w).ok())
                    .filter(|w| *w != head);
                let upto = match watermark {
                    Some(w) if descends(w).await => w,
                    // History after the watermark was rewritten (or the
                    // branch moved back): judged again from Git alone, a
                    // recorded abort would read as a downgrade and the hop
                    // it ended be applied again. Only forward history is
                    // judged; a person makes it descend again.
                    Some(w) => {
                        let p = repo_path.clone();
                        let (behind, held) = tokio::task::spawn_blocking(move || {
                            let r = GitRepo::open(&p).ok();
                            let held = r.as_ref().is_some_and(|r| r.raw().find_commit(w).is_ok());
                            let behind = r
                                .and_then(|r| r.raw().graph_descendant_of(w, head).ok())
                                .unwrap_or(false);
                            (behind, held)
                        })
                        .await
                        .unwrap_or((false, false));
                        let error = PassError::Rewritten {
                            branch: crate::escape::escape(&self.opts.branch).into_owned(),
                            head: head.to_string(),
                            watermark: w.to_string(),
                            behind,
                            held,
                        };
                        // What was judged up to the watermark (from Git and
                        // the record) goes on: hops in flight are followed
                        // and repaired, after a restart too, while nothing
                        // of the rewrite is judged.
                        let kept = match other {
                            Some(p) if p.head == w => Some(p),
                            other if held => {
                                let opts_w = CheckOptions {
                                    head: w.to_string(),
                                    ..opts.clone()
                                };
                                let p = repo_path.clone();
                                match tokio::task::spawn_blocking(move || {
                                    judge_blocking(&p, w, other, &opts_w, None)
                                })
                                .await
                                {
                                    Ok(Ok((j, _, _))) => Some(j),
                                    Ok(Err((_, prev))) => prev.filter(|p| p.head == w),
                                    Err(_) => None,
                                }
                            }
                            // Not held: nothing judged is walked (an older
                            // judgment would undo what was judged after it).
                            _ => None,
                        };
                        return Err((error, kept));
                    }
                    None => head,
                };
                let opts_upto = CheckOptions {
                    head: upto.to_string(),
                    ..opts.clone()
                };
                let p = repo_path.clone();
                let (j, n) = tokio::task::spawn_blocking(move || {
                    judge_blocking(&p, upto, other, &opts_upto, None)
                })
                .await
                .map_err(|e| (PassError::from(e), None))
                .and_then(|r| r)
                .map(|(j, n, _)| (j, n))?;
                if upto == head {
                    return Ok((j, n, Vec::new()));
                }
                j
            }
        };
        // The new commits, from Git alone first: which objects they hold,
        // so that exactly those are read from the cluster.
        let p = repo_path.clone();
        let o = opts.clone();
        let prev_head = prev.head;
        let prev_report = prev.report.clone();
        let keys = tokio::task::spawn_blocking(move || -> Result<Vec<Key>, PassError> {
            let repo = GitRepo::open(&p)?;
            let baseline = forward_baseline(&repo, &prev_report)?;
            let more = history::check_after(&repo, &o, prev_head, baseline, &prev_report.memory)?;
            let mut keys: Vec<Key> = more
                .commits
                .iter()
                .flat_map(|c| c.objects.iter().filter_map(|o| o.key()))
                .collect();
            keys.sort();
            keys.dedup();
            Ok(keys)
        })
        .await
        .map_err(PassError::from)
        .and_then(|r| r);
        let keys = match keys {
            Ok(k) => k,
            Err(e) => return Err((e, Some(prev))),
        };
        let live = match self.live_of(&keys).await {
            Ok(l) => Arc::new(l),
            Err(e) => return Err((e, Some(prev))),
        };
        let p = repo_path.clone();
        let o = opts.clone();
        let shared = live.clone();
        let (j, n, entries) = tokio::task::spawn_blocking(move || {
            judge_blocking(&p, head, Some(prev), &o, Some(&shared))
        })
        .await
        .map_err(|e| (PassError::from(e), None))
        .and_then(|r| r)?;
        for (sha, keys) in &entries {
            record.add(sha, &live, keys);
        }
        Ok((j, n, entries))
    }

    /// The cluster's status of `keys`, as the gate reads it. An object the
    /// cluster does not have is absent; a failed read fails the judgment
    /// (judged again next pass), never a judgment without the live state.
    async fn live_of(&self, keys: &[Key]) -> Result<Live, PassError> {
        let mut live = Live::default();
        for k in keys {
            match self.cluster.get(k).await {
                Ok(Some(o)) => {
                    if let Some(message) = o.status.problem() {
                        return Err(PassError::LiveUnreadable {
                            key: k.to_string(),
                            message: crate::escape::escape(&message).into_owned(),
                        });
                    }
                    live.objects.insert(k.clone(), o.status);
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(PassError::Cluster {
                        what: format!("the live status of {k}"),
                        source: Box::new(e),
                    });
                }
            }
        }
        Ok(live)
    }

    /// Pull-request heads get the verdict of their commits before merge.
    /// Judges the pull requests whose heads moved, at most [`PULLS_PER_PASS`]
    /// a pass: the newest first, then those held on the live state (judged
    /// again each pass). A host keeps the refs of closed pull requests, and
    /// thousands of them judged in one pass, before any unit is applied,
    /// held every hop back. Returns whether some wait for a later pass.
    async fn judge_pulls(&mut self, path: &Path, head: Oid, pulls: Vec<(u64, Oid)>) -> bool {
        // The branch's floors at its head: a pull request forked there
        // needs no look back through older history.
        let memory = self
            .judged
            .as_ref()
            .filter(|j| j.head == head)
            .map(|j| j.report.memory.clone());
        // A request lands on the branch's last accepted state, not on a
        // refused tip: judged from the tip, a request building on a refused
        // skip would read as a patch and go green (and be refused once
        // merged), and the fix would read as a downgrade. So it is judged
        // from the last commit accepted, with the refused commits after it
        // as part of what it lands; their statuses are the branch's, and
        // are not posted here.
        // The floors do not move on a refused commit: the branch's memory
        // at its head is the memory at the last accepted commit, and is
        // handed on as such (no look back through history per request).
        let mut memory = memory;
        let mut refused_tail: std::collections::HashSet<String> = Default::default();
        let base = match self.judged.as_ref().filter(|j| j.head == head) {
            Some(j)
                if j.report
                    .commits
                    .last()
                    .is_some_and(|c| c.verdict == Verdict::Refused) =>
            {
                let accepted = newest_not_refused(&j.report);
                let from = accepted.map_or(0, |a| {
                    j.report
                        .commits
                        .iter()
                        .rposition(|c| c.sha == a.sha)
                        .map_or(0, |i| i + 1)
                });
                refused_tail.extend(j.report.commits[from..].iter().map(|c| c.sha.clone()));
                match accepted {
                    Some(c) => {
                        if let (Some(m), Ok(at)) = (&memory, Oid::from_str(&c.sha)) {
                            memory = Some(Arc::new(history::Memory {
                                at: Some(at),
                                floors: m.floors.clone(),
                            }));
                        }
                        c.sha.clone()
                    }
                    None => j
                        .report
                        .base
                        .clone()
                        .unwrap_or_else(|| EMPTY_TREE.to_owned()),
                }
            }
            _ => head.to_string(),
        };
        if let Some(ui) = &mut self.ui {
            ui.keep_pulls(pulls.iter().map(|(n, _)| *n));
        }
        // What is no longer advertised is forgotten.
        let advertised: std::collections::HashSet<u64> = pulls.iter().map(|(n, _)| *n).collect();
        self.pulls.retain(|n, _| advertised.contains(n));
        self.held_pulls.retain(|(n, _)| advertised.contains(n));
        let mut due: Vec<(u64, Oid)> = pulls
            .into_iter()
            .filter(|(n, oid)| self.pulls.get(n) != Some(oid) && *oid != head)
            .collect();
        due.sort_by_key(|(n, oid)| (self.held_pulls.contains(&(*n, *oid)), std::cmp::Reverse(*n)));
        // Held ones wait on the cluster, not on a pass: only moved heads
        // left for later keep a bounded run going.
        let moved = due
            .iter()
            .filter(|(n, oid)| !self.held_pulls.contains(&(*n, *oid)))
            .count();
        let later = moved > PULLS_PER_PASS;
        due.truncate(PULLS_PER_PASS);
        for (n, oid) in due {
            let opts = CheckOptions {
                base: Some(base.clone()),
                head: oid.to_string(),
                prefixes: self.opts.paths.clone(),
                live: None,
                max_file_bytes: self.opts.max_file_bytes,
                memory: memory.clone(),
                trust: self.opts.trust.clone(),
                recorded: None,
                sources: None,
                names: Some(self.names.clone()),
                keep_floors: true,
                from_base: false,
            };
            let r = self.judge_pull(path, opts).await;
            match r {
                Ok(mut report) => {
                    // What the request becomes when it is merged or
                    // squashed: one change, as `check` judges it.
                    if !self.opts.lands_commit_by_commit {
                        crate::verdict::land_whole(&mut report);
                    }
                    if !refused_tail.is_empty() {
                        report.commits.retain(|c| !refused_tail.contains(&c.sha));
                    }
                    if let Some(ui) = &mut self.ui {
                        ui.pull(n, &oid.to_string(), &report.commits);
                    }
                    for c in &report.commits {
                        tracing::info!(pull = n, commit = %c.sha, verdict = ?c.verdict, "pull request judged");
                        let s = describe::pull_status(
                            &self.opts.cluster_name,
                            c,
                            self.opts.target_url.as_deref(),
                        );
                        self.queue_status(c.sha.clone(), s).await;
                    }
                    // A held request is judged again every pass: its status
                    // turns once the hop it waits for completes. Held is an
                    // object's verdict (its commit is accepted, as a person
                    // reads it: `describe::pull_status`).
                    let held = report
                        .commits
                        .iter()
                        .any(|c| c.objects.iter().any(|o| o.verdict == Verdict::Held));
                    if !held {
                        self.pulls.insert(n, oid);
                        self.held_pulls.retain(|(m, _)| *m != n);
                    } else {
                        self.pulls.remove(&n);
                        self.held_pulls.insert((n, oid));
                    }
                }
                Err(e) => {
                    tracing::warn!(pull = n, error = %e, "judging a pull request failed");
                    // Judged again, after those whose heads moved, like a
                    // held one: a failure that lasts neither takes every
                    // slot nor keeps a bounded run going.
                    self.held_pulls.insert((n, oid));
                }
            }
        }
        later
    }
}

/// How many pull requests a pass judges at most (`judge_pulls`).
const PULLS_PER_PASS: usize = 16;

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// A pull request against the live state, as `check --live` judges it:
    /// from Git first to learn the objects it holds, then again with their
    /// status in the cluster. Not recorded: a request's verdict is given
    /// again whenever its head moves.
    async fn judge_pull(
        &self,
        path: &Path,
        opts: CheckOptions,
    ) -> Result<history::CheckReport, PassError> {
        let p = path.to_owned();
        let o = opts.clone();
        let git = tokio::task::spawn_blocking(move || {
            let repo = GitRepo::open(&p)?;
            Ok::<_, PassError>(history::check(&repo, &o)?)
        })
        .await
        .map_err(PassError::from)
        .and_then(|r| r)?;
        let mut keys: Vec<Key> = git
            .commits
            .iter()
            .flat_map(|c| c.objects.iter().filter_map(|o| o.key()))
            .collect();
        keys.sort();
        keys.dedup();
        let live = self.live_of(&keys).await?;
        if live.objects.is_empty() {
            return Ok(git);
        }
        let p = path.to_owned();
        tokio::task::spawn_blocking(move || {
            let repo = GitRepo::open(&p)?;
            Ok::<_, PassError>(history::check(
                &repo,
                &CheckOptions {
                    live: Some(live),
                    ..opts
                },
            )?)
        })
        .await
        .map_err(PassError::from)
        .and_then(|r| r)
    }
}

/// The judgment itself, on the blocking pool: forward from the last head
/// when the branch moved forward, else the whole range again.
#[expect(
    clippy::result_large_err,
    reason = "the error hands the last judgment back whole, once a pass: boxing it gains nothing"
)]
fn judge_blocking(
    path: &Path,
    head: Oid,
    prev: Option<Judged>,
    opts: &CheckOptions,
    live: Option<&Live>,
) -> Result<(Judged, usize, Decided), (PassError, Option<Judged>)> {
    let repo = match GitRepo::open(path) {
        Ok(r) => r,
        Err(e) => return Err((e.into(), prev)),
    };
    // The judgment keeps what it parsed: steps take their documents from it.
    // Files parsed before under the same options (the seed's) are reused.
    let sources = opts.sources.clone().unwrap_or_default();
    let opts = &CheckOptions {
        sources: Some(sources.clone()),
        ..opts.clone()
    };
    let documents = Documents::new(&repo, sources);
    let forward = prev
        .as_ref()
        .is_some_and(|p| repo.descends_from(head, p.head));
    match prev {
        // The branch moved forward: judge only the new commits, from the
        // last accepted tree, and extend the chains they touch.
        Some(prev) if forward => {
            let more = forward_baseline(&repo, &prev.report).and_then(|baseline| {
                judge_forward(&repo, opts, prev.head, baseline, &prev.report.memory, live)
            });
            let (more, entries) = match more {
                Ok(m) => m,
                Err(e) => return Err((e.into(), Some(prev))),
            };
            let Judged {
                report,
                chains,
                plans: prev_plans,
                accepted_waits,
                ..
            } = prev;
            let mut chains = Arc::unwrap_or_clone(chains);
            rollout::extend_chains(
                &mut chains,
                &more.commits,
                |name, file, sha| documents.plane_key(sha, file, name),
                |sha, file, key| documents.step(sha, file, key),
            );
            let mut report = Arc::unwrap_or_clone(report);
            let n = more.commits.len();
            report.commits.extend(more.commits);
            report.memory = more.memory;
            if report.commits.iter().any(|c| c.verdict == Verdict::Refused) {
                report.verdict = Verdict::Refused;
            }
            report.head = head.to_string();
            // Plans are read again only when some exist or a new commit
            // touched one (units move with every hop).
            let touched = report.commits[report.commits.len() - n..]
                .iter()
                .any(|c| crate::plan::exec::touched(&repo, &c.sha, &opts.prefixes));
            let plans = if prev_plans.plans.is_empty() && prev_plans.error.is_none() && !touched {
                prev_plans
            } else {
                Arc::new(read_plans(&repo, head, &report, opts))
            };
            let (gates, windows, accepted_waits) =
                in_effect(&repo, head, &report, &plans, opts, accepted_waits);
            let (gates, windows) = (Arc::new(gates), Arc::new(windows));
            Ok((
                Judged {
                    head,
                    report: Arc::new(report),
                    chains: Arc::new(chains),
                    plans,
                    gates,
                    windows,
                    accepted_waits,
                },
                n,
                entries,
            ))
        }
        // First look, or history rewritten: all of it.
        prev => {
            let report = match history::check(&repo, opts) {
                Ok(r) => r,
                Err(e) => return Err((e.into(), prev)),
            };
            let mut chains = BTreeMap::new();
            rollout::extend_chains(
                &mut chains,
                &report.commits,
                |name, file, sha| documents.plane_key(sha, file, name),
                |sha, file, key| documents.step(sha, file, key),
            );
            // Units whose chain the rewrite did not change keep their `Arc`
            // (and so are not read again).
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
            let plans = read_plans(&repo, head, &report, opts);
            // A commit's tree does not change with a rewrite: what was
            // read of the last accepted one still holds if it still is.
            let kept = prev.and_then(|p| p.accepted_waits);
            let (gates, windows, accepted_waits) =
                in_effect(&repo, head, &report, &plans, opts, kept);
            let (gates, windows) = (Arc::new(gates), Arc::new(windows));
            Ok((
                Judged {
                    head,
                    report: Arc::new(report),
                    chains: Arc::new(chains),
                    plans: Arc::new(plans),
                    gates,
                    windows,
                    accepted_waits,
                },
                n,
                Vec::new(),
            ))
        }
    }
}

/// The plans of `head`'s tree, with the releases the daemon takes as given
/// for the units they select (those of `report`'s base tree).
fn read_plans(
    repo: &GitRepo,
    head: Oid,
    report: &CheckReport,
    opts: &CheckOptions,
) -> crate::plan::exec::TreePlans {
    // Not read is not "no plans": an empty set would lift every window.
    let mut tp = crate::plan::exec::read(repo, head, &opts.prefixes, opts.max_file_bytes)
        .unwrap_or_else(|e| crate::plan::exec::TreePlans {
            error: Some(e.to_string()),
            ..Default::default()
        });
    if !tp.plans.is_empty() {
        // A base that cannot be read gives nothing: every unit without a
        // report then waits (fail closed).
        let base = history::base_tree(repo, report).ok().flatten();
        tp.given = crate::plan::exec::given(repo, base, &tp, opts.max_file_bytes);
    }
    tp
}

/// The pre-flight gates and maintenance windows in effect at `head`.
/// Those of the head's tree, and, when the head is refused, those of the
/// last accepted commit's tree too: a refused commit (a skip, an untrusted
/// signer) can add a wait, never lift one, since nothing is applied on its
/// authority. A gate or a window it removed still holds the hops the last
/// accepted state holds. The last accepted commit's waits are read once
/// and handed back, to be passed in again (`kept`) with the next head.
fn in_effect(
    repo: &GitRepo,
    head: Oid,
    report: &CheckReport,
    plans: &crate::plan::exec::TreePlans,
    opts: &CheckOptions,
    kept: Option<Arc<AcceptedWaits>>,
) -> (
    crate::preflight::Gates,
    PlanWindows,
    Option<Arc<AcceptedWaits>>,
) {
    let mut gates = read_gates(repo, head, opts.max_file_bytes);
    // Fail closed: every hop waits, saying why.
    if let Some(e) = &plans.error {
        gates.error = Some(format!("the upgrade plans of {head} cannot be read: {e}"));
    }
    let mut windows = crate::plan::exec::holds(plans);
    let refused = report
        .commits
        .last()
        .is_some_and(|c| c.verdict == Verdict::Refused);
    if !refused {
        return (gates, windows, None);
    }
    let accepted = match last_accepted(repo, report) {
        Ok(Some(accepted)) => accepted,
        Ok(None) => return (gates, windows, None),
        // Fail closed: every hop waits, saying why.
        Err(e) => {
            gates.error = Some(format!(
                "the last accepted commit before the refused head {head} cannot be read: {e}"
            ));
            return (gates, windows, None);
        }
    };
    let before = match kept {
        Some(k) if k.commit == accepted => k,
        _ => {
            // Only the windows are wanted: the plans' given releases (read
            // from the range's base) play no part in them.
            let plans = match crate::plan::exec::read(
                repo,
                accepted,
                &opts.prefixes,
                opts.max_file_bytes,
            ) {
                Ok(p) => p,
                // Fail closed, and read again with the next head.
                Err(e) => {
                    gates.error = Some(format!(
                        "the plans of the last accepted commit {accepted} cannot be read: {e}"
                    ));
                    return (gates, windows, None);
                }
            };
            Arc::new(AcceptedWaits {
                commit: accepted,
                gates: read_gates(repo, accepted, opts.max_file_bytes),
                windows: crate::plan::exec::holds(&plans),
            })
        }
    };
    gates.gates.extend(before.gates.gates.iter().cloned());
    gates.error = gates.error.or_else(|| before.gates.error.clone());
    for (k, w) in &before.windows {
        windows
            .entry(k.clone())
            .or_default()
            .extend(w.iter().cloned());
    }
    (gates, windows, Some(before))
}

/// The newest commit of `report` whose verdict is not a refusal, else the
/// range's base commit (`None`: the empty tree, or a base given as a tree).
fn last_accepted(repo: &GitRepo, report: &CheckReport) -> Result<Option<Oid>, crate::git::Error> {
    if let Some(c) = newest_not_refused(report) {
        return Oid::from_str(&c.sha)
            .map(Some)
            .map_err(|_| crate::git::Error::InvalidId { id: c.sha.clone() });
    }
    match &report.base {
        None => Ok(None),
        Some(b) => match repo.resolve(b)? {
            crate::git::Resolved::Commit(c) => Ok(Some(c)),
            crate::git::Resolved::Tree(_) => Ok(None),
        },
    }
}

/// The pre-flight gates of the policies in `head`'s tree. What cannot be
/// read becomes the gates' error: every hop waits (fail closed).
fn read_gates(repo: &GitRepo, head: Oid, max: usize) -> crate::preflight::Gates {
    let read = || -> Result<crate::preflight::Gates, crate::git::Error> {
        let tree = repo.commit(head)?.tree;
        let Some(dir) = repo.subtree(tree, crate::policy::DIR)? else {
            return Ok(Default::default());
        };
        let (mut policies, mut errors) = (Vec::new(), Vec::new());
        for (name, blob) in repo.dir_files(dir)? {
            if !crate::manifest::is_manifest_path(&name) {
                continue;
            }
            let path = format!("{}/{name}", crate::policy::DIR);
            let bytes = repo.blob(blob)?;
            if bytes.content().len() > max {
                errors.push(crate::policy::PolicyError {
                    file: Arc::from(path.as_str()),
                    line: 1,
                    name: None,
                    message: format!("larger than {max} bytes"),
                });
                continue;
            }
            let (p, e) = crate::policy::parse(&path, &String::from_utf8_lossy(bytes.content()));
            policies.extend(p);
            errors.extend(e);
        }
        Ok(crate::preflight::Gates::of(&policies, &errors))
    };
    read().unwrap_or_else(|e| crate::preflight::Gates {
        gates: Vec::new(),
        error: Some(format!("the policies at {head} cannot be read: {e}")),
    })
}

/// The newest commit of `report` that was accepted (or held).
fn newest_not_refused(report: &CheckReport) -> Option<&crate::verdict::CommitReport> {
    report
        .commits
        .iter()
        .rev()
        .find(|c| matches!(c.verdict, Verdict::Accepted | Verdict::Held))
}

/// The tree the commits after `report` are judged from: its last
/// accepted (or held) commit's, or the range's base.
fn forward_baseline(
    repo: &GitRepo,
    report: &CheckReport,
) -> Result<Option<Oid>, crate::git::Error> {
    match newest_not_refused(report) {
        Some(c) => {
            let oid = Oid::from_str(&c.sha)
                .map_err(|_| crate::git::Error::InvalidId { id: c.sha.clone() })?;
            Ok(Some(repo.commit(oid)?.tree))
        }
        None => history::base_tree(repo, report),
    }
}

/// The commits after `after`, judged: from Git (and the record) alone when
/// `live` is `None`; else one at a time against `live`, each also from Git
/// alone, so that exactly the commits whose verdict the live state decided
/// are returned for the record (with the keys they hold). Judged one at a
/// time because each commit builds on the verdicts before it, as a replay
/// of the record will.
fn judge_forward(
    repo: &GitRepo,
    opts: &CheckOptions,
    after: Oid,
    baseline: Option<Oid>,
    memory: &Arc<history::Memory>,
    live: Option<&Live>,
) -> Result<(CheckReport, Decided), crate::git::Error> {
    let Some(live) = live else {
        return history::check_after(repo, opts, after, baseline, memory).map(|r| (r, Vec::new()));
    };
    let head = Oid::from_str(&opts.head).map_err(|_| crate::git::Error::InvalidId {
        id: opts.head.clone(),
    })?;
    let commits = repo.first_parent_range(Some(after), head)?;
    let mut memory = memory.clone();
    let mut baseline = baseline;
    let mut prev = after;
    let mut out = Vec::with_capacity(commits.len());
    let mut entries = Vec::new();
    for c in commits {
        let one = CheckOptions {
            head: c.id.to_string(),
            live: None,
            ..opts.clone()
        };
        let git = history::check_after(repo, &one, prev, baseline, &memory)?;
        let with = CheckOptions {
            live: Some(live.clone()),
            ..one
        };
        let judged = history::check_after(repo, &with, prev, baseline, &memory)?;
        let (Some(g), Some(l)) = (git.commits.first(), judged.commits.first()) else {
            // check_after of a one-commit range judges that commit.
            unreachable!("commit {} was not judged", c.id);
        };
        if super::record::differs(g, l) {
            let mut keys: Vec<Key> = l.objects.iter().filter_map(|o| o.key()).collect();
            keys.sort();
            keys.dedup();
            entries.push((l.sha.clone(), keys));
        }
        if matches!(l.verdict, Verdict::Accepted | Verdict::Held) {
            baseline = Some(c.tree);
        }
        memory = judged.memory.clone();
        prev = c.id;
        out.extend(judged.commits);
    }
    let verdict = if out.iter().any(|c| c.verdict == Verdict::Refused) {
        Verdict::Refused
    } else {
        Verdict::Accepted
    };
    Ok((
        CheckReport {
            verdict,
            base: Some(after.to_string()),
            head: head.to_string(),
            commits: out,
            memory,
        },
        entries,
    ))
}

/// Reads steps' documents during one judgment, from the judgment's own
/// parse ([`history::Sources`]): each object's whole document was kept as
/// compact JSON text (`manifest::Document::source`) when the gate read the
/// file, so no file is parsed twice. A file the judgment did not parse (a
/// test, or a step folded from an earlier judgment) is parsed here the
/// same way, once per blob. Each text is kept once (`rollout::Document`):
/// every step that names the same document, in that blob or in another
/// holding the same text, shares one allocation. (Steps used to keep a
/// deep-cloned `serde_json::Value` each, and later a second parse of every
/// blob: the daemon bench's peak RSS went from 130 to 360, then 150 MiB.)
struct Documents<'a> {
    repo: &'a GitRepo,
    /// What the judgment parsed: a file found here is not parsed again.
    sources: Arc<history::Sources>,
    /// Files parsed here, by blob and path.
    parsed: RefCell<HashMap<(Oid, String), Arc<ParsedFile>>>,
    /// Every text handed out, so equal documents are one allocation.
    texts: RefCell<HashSet<Arc<str>>>,
}

impl<'a> Documents<'a> {
    fn new(repo: &'a GitRepo, sources: Arc<history::Sources>) -> Self {
        Self {
            repo,
            sources,
            parsed: RefCell::new(HashMap::new()),
            texts: RefCell::new(HashSet::new()),
        }
    }

    /// The whole document of `key` as Git has it at `sha`: what lockstep
    /// applies (server-side apply owns what it sends).
    fn step(&self, sha: &str, file: &str, key: &Key) -> StepDocument {
        let short = sha.get(..10).unwrap_or(sha);
        let where_ = format!("{} at {short}", crate::escape::escape(file));
        let blob = blob_at(self.repo, sha, file).ok_or_else(|| format!("{where_} is missing"))?;
        let parsed = self
            .file(blob, file)
            .ok_or_else(|| format!("{where_} cannot be read"))?;
        let Some(doc) = parsed.documents.iter().find(|d| &d.key == key) else {
            return Err(match parsed.problems.first() {
                Some(p) => format!(
                    "{where_} holds no readable {key}: line {}: {}",
                    p.line, p.message
                ),
                None => format!("{where_} holds no {key}"),
            });
        };
        match &doc.source {
            Some(Ok(text)) => Ok(self.intern(text)),
            Some(Err(e)) => Err(format!("{where_}: {key}: {e}")),
            None => Err(format!("{where_}: {key} was read without its document")),
        }
    }

    /// A ControlPlane's key from the file holding it at a commit.
    fn plane_key(&self, sha: &str, file: &str, name: &str) -> Option<Key> {
        let parsed = self.file(blob_at(self.repo, sha, file)?, file)?;
        parsed
            .documents
            .iter()
            .find(|d| d.key.kind == Kind::ControlPlane && d.key.name == name)
            .map(|d| d.key.clone())
    }

    /// A file as the judgment parsed it, or parsed here the same way.
    fn file(&self, blob: Oid, path: &str) -> Option<Arc<ParsedFile>> {
        if let Some(p) = self.sources.file(blob, path) {
            return Some(p);
        }
        let at = (blob, path.to_owned());
        if let Some(p) = self.parsed.borrow().get(&at) {
            return Some(p.clone());
        }
        let bytes = self.repo.read_blob(blob).ok()?;
        // The gate read this file within its byte limit: no other limit
        // here, or a file the gate judged would not be found to apply.
        let parsed = Arc::new(crate::manifest::parse_file_keeping(
            path,
            &bytes,
            bytes.len(),
            true,
        ));
        self.parsed.borrow_mut().insert(at, parsed.clone());
        Some(parsed)
    }

    /// The one allocation of `text`.
    fn intern(&self, text: &Arc<str>) -> Document {
        let mut texts = self.texts.borrow_mut();
        if let Some(t) = texts.get(text) {
            return Document::from_text(t.clone());
        }
        texts.insert(text.clone());
        Document::from_text(text.clone())
    }
}

fn blob_at(repo: &impl Store, sha: &str, file: &str) -> Option<Oid> {
    let oid = Oid::from_str(sha).ok()?;
    repo.entry_at(oid, file).ok().map(|e| e.oid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOVA_A: &str = "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata:\n  name: nova-a\n  namespace: compute\nspec:\n  openStackRelease: \"2026.1\"\n  image:\n    repository: ghcr.io/c5c3/nova\n    tag: \"2026.1\"\n";
    const NOVA_B: &str = "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata:\n  name: nova-b\n  namespace: compute\nspec:\n  openStackRelease: \"2026.1\"\n  image:\n    repository: ghcr.io/c5c3/nova\n    tag: \"2026.1\"\n";
    const PLANE: &str = "apiVersion: c5c3.io/v1alpha1\nkind: ControlPlane\nmetadata:\n  name: prod\n  namespace: openstack\nspec:\n  openStackRelease: \"2026.1\"\n";

    /// The tree of `files` (paths may name directories).
    fn tree(repo: &git2::Repository, files: &[(&str, &str)]) -> git2::Oid {
        let mut tb = repo.treebuilder(None).unwrap();
        let mut dirs: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
        for (name, text) in files {
            match name.split_once('/') {
                Some((dir, rest)) => dirs.entry(dir).or_default().push((rest, text)),
                None => {
                    let blob = repo.blob(text.as_bytes()).unwrap();
                    tb.insert(name, blob, 0o100_644).unwrap();
                }
            }
        }
        for (dir, inner) in dirs {
            tb.insert(dir, tree(repo, &inner), 0o040_000).unwrap();
        }
        tb.write().unwrap()
    }

    /// Commits `files` (the whole tree) on top of HEAD.
    fn commit(repo: &git2::Repository, files: &[(&str, &str)]) -> String {
        let tree = repo.find_tree(tree(repo, files)).unwrap();
        let sig = git2::Signature::now("t", "t@example.invalid").unwrap();
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, "c", &tree, &parents)
            .unwrap()
            .to_string()
    }

    /// A refused head that drops a plan's windows (or a policy's gates)
    /// lifts nothing: the last accepted tree's windows and gates hold too.
    /// One that is not refused decides them alone.
    #[test]
    fn a_refused_head_can_add_a_wait_but_never_lift_one() {
        const PLAN: &str = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata: {name: p}\nspec:\n  to: \"2026.2\"\n  waves:\n    - name: all\n      select: [{kind: ControlPlane, namespace: openstack, name: prod}]\n";
        const POLICY: &str = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePolicy\nmetadata:\n  name: ready\nspec:\n  preflight:\n    - kinds: [ControlPlane]\n      childrenReady: true\n";
        let windowed = format!(
            "{PLAN}  windows:\n    - {{start: \"0 0 * * *\", duration: 16m, timeZone: UTC}}\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let raw = git2::Repository::init(dir.path()).unwrap();
        let accepted = commit(
            &raw,
            &[
                ("p.yaml", PLANE),
                ("plan.yaml", &windowed),
                (".lockstep/policies/ready.yaml", POLICY),
            ],
        );
        let head = commit(&raw, &[("p.yaml", PLANE), ("plan.yaml", PLAN)]);
        let repo = GitRepo::open(dir.path()).unwrap();
        let opts = CheckOptions::default();
        let commit_report = |sha: &str, verdict| crate::verdict::CommitReport {
            sha: sha.to_owned(),
            summary: String::new(),
            verdict,
            objects: Vec::new(),
            skipped: Vec::new(),
            files_changed: 0,
        };
        let report = |verdict| CheckReport {
            verdict,
            base: None,
            head: head.clone(),
            commits: vec![
                commit_report(&accepted, Verdict::Accepted),
                commit_report(&head, verdict),
            ],
            memory: Default::default(),
        };
        let head = Oid::from_str(&head).unwrap();
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        let at_head = read_plans(&repo, head, &report(Verdict::Accepted), &opts);
        let (gates, windows, kept) = in_effect(
            &repo,
            head,
            &report(Verdict::Accepted),
            &at_head,
            &opts,
            None,
        );
        assert!(gates.gates.is_empty() && gates.error.is_none());
        assert!(windows.is_empty(), "an accepted head lifts both");
        assert!(kept.is_none(), "nothing to keep for an accepted head");
        let (gates, windows, kept) = in_effect(
            &repo,
            head,
            &report(Verdict::Refused),
            &at_head,
            &opts,
            None,
        );
        assert_eq!(gates.gates.len(), 1, "{gates:?}");
        assert_eq!(windows.get(&plane).map(Vec::len), Some(1), "{windows:?}");
        // The next refused head takes the accepted commit's waits as they
        // were read, without reading them again.
        let kept = kept.expect("the accepted commit's waits are kept");
        let (gates, windows, again) = in_effect(
            &repo,
            head,
            &report(Verdict::Refused),
            &at_head,
            &opts,
            Some(kept.clone()),
        );
        assert!(again.is_some_and(|a| Arc::ptr_eq(&a, &kept)), "read again");
        assert_eq!(gates.gates.len(), 1, "{gates:?}");
        assert_eq!(windows.get(&plane).map(Vec::len), Some(1), "{windows:?}");
        // Waits kept for another commit are not taken for this one's.
        let other = Arc::new(AcceptedWaits {
            commit: head,
            gates: Default::default(),
            windows: Default::default(),
        });
        let (gates, windows, mine) = in_effect(
            &repo,
            head,
            &report(Verdict::Refused),
            &at_head,
            &opts,
            Some(other),
        );
        assert!(mine.is_some_and(|m| m.commit.to_string() == accepted));
        assert_eq!(gates.gates.len(), 1, "{gates:?}");
        assert_eq!(windows.get(&plane).map(Vec::len), Some(1), "{windows:?}");
    }

    /// Plans that cannot be read (Git fails on the tree: a blob gone, an
    /// I/O error) are not "no plans": every hop waits, saying why, and the
    /// next judgment reads them again rather than keep the empty set.
    #[test]
    fn plans_that_cannot_be_read_hold_every_hop() {
        const PLAN: &str = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata: {name: p}\nspec:\n  to: \"2026.2\"\n  windows:\n    - {start: \"0 0 * * *\", duration: 16m, timeZone: UTC}\n  waves:\n    - name: all\n      select: [{kind: ControlPlane, namespace: openstack, name: prod}]\n";
        let dir = tempfile::tempdir().unwrap();
        let raw = git2::Repository::init(dir.path()).unwrap();
        let head = commit(&raw, &[("p.yaml", PLANE), ("plan.yaml", PLAN)]);
        // The plan's blob removed from the object store (written loose).
        let blob = raw
            .revparse_single(&format!("{head}:plan.yaml"))
            .unwrap()
            .id()
            .to_string();
        std::fs::remove_file(
            dir.path()
                .join(".git/objects")
                .join(&blob[..2])
                .join(&blob[2..]),
        )
        .unwrap();
        let repo = GitRepo::open(dir.path()).unwrap();
        let opts = CheckOptions::default();
        let report = CheckReport {
            verdict: Verdict::Accepted,
            base: None,
            head: head.clone(),
            commits: vec![crate::verdict::CommitReport {
                sha: head.clone(),
                summary: String::new(),
                verdict: Verdict::Accepted,
                objects: Vec::new(),
                skipped: Vec::new(),
                files_changed: 0,
            }],
            memory: Default::default(),
        };
        let head = Oid::from_str(&head).unwrap();
        let plans = read_plans(&repo, head, &report, &opts);
        assert!(
            plans.plans.is_empty() && plans.error.is_some(),
            "{:?}",
            plans.error
        );
        let (gates, _, _) = in_effect(&repo, head, &report, &plans, &opts, None);
        assert!(
            gates
                .error
                .as_deref()
                .is_some_and(|e| e.contains("upgrade plans") && e.contains("cannot be read")),
            "every hop waits: {:?}",
            gates.error
        );
        assert!(!gates.is_empty(), "the gates hold");
    }

    /// A plan that a later commit made invalid without touching it (its
    /// canary wave's plane removed) still holds its other units to its
    /// windows: an invalid plan runs nothing, and lifting its windows let a
    /// hand commit through at any hour.
    #[test]
    fn a_plan_made_invalid_keeps_its_windows() {
        const PLAN: &str = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata: {name: p}\nspec:\n  to: \"2026.2\"\n  waves:\n    - name: canary\n      select: [{kind: ControlPlane, namespace: openstack-staging, name: staging}]\n    - name: production\n      select: [{kind: ControlPlane, namespace: openstack, name: prod}]\n  windows:\n    - {start: \"0 0 * * *\", duration: 16m, timeZone: UTC}\n";
        let dir = tempfile::tempdir().unwrap();
        let raw = git2::Repository::init(dir.path()).unwrap();
        let head = commit(&raw, &[("p.yaml", PLANE), ("plan.yaml", PLAN)]);
        let repo = GitRepo::open(dir.path()).unwrap();
        let tp =
            crate::plan::exec::read(&repo, Oid::from_str(&head).unwrap(), &[], 1 << 20).unwrap();
        let all: Vec<_> = tp.plans.iter().map(|(p, _)| p.clone()).collect();
        assert!(
            !crate::plan::validate::validate_in_effect(&tp.plans[0].0, &tp.units, &all).is_empty(),
            "the canary selects nothing: invalid"
        );
        let windows = crate::plan::exec::holds(&tp);
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        assert_eq!(windows.get(&plane).map(Vec::len), Some(1), "{windows:?}");
    }

    /// A plan writer on `dir`'s default branch (these tests write nothing).
    fn writer(dir: &std::path::Path) -> crate::plan::exec::Writer {
        crate::plan::exec::Writer {
            repo: dir.to_owned(),
            branch: "master".into(),
            author: crate::git::Author {
                name: "t".into(),
                email: "t@example.invalid".into(),
            },
            signing_key: None,
            push: None,
            merge_proposals: false,
        }
    }

    /// A wave's soak counts from when it is done, the last time: a plane
    /// that joins a finished canary wave (or one that fails) makes it not
    /// done, and the soak starts again once it is done again. The first
    /// completion was kept, and production started at once.
    #[test]
    fn a_wave_no_longer_done_forgets_when_it_was() {
        const PLAN: &str = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata: {name: p}\nspec:\n  to: \"2026.2\"\n  waves:\n    - name: canary\n      select: [{kind: ControlPlane, namespace: openstack, name: prod}]\n      soak: 1h\n    - name: production\n      select: [{kind: ControlPlane, namespace: openstack, name: other}]\n";
        let other = PLANE.replace("name: prod", "name: other");
        let canary = PLANE.replace("2026.1", "2026.2");
        let dir = tempfile::tempdir().unwrap();
        let raw = git2::Repository::init(dir.path()).unwrap();
        let head = commit(
            &raw,
            &[("p.yaml", &canary), ("o.yaml", &other), ("plan.yaml", PLAN)],
        );
        let head = Oid::from_str(&head).unwrap();
        let repo = GitRepo::open(dir.path()).unwrap();
        let tp = crate::plan::exec::read(&repo, head, &[], 1 << 20).unwrap();
        let writer = writer(dir.path());
        let prod = Key::new(Kind::ControlPlane, "openstack", "prod");
        let mut completed_at = BTreeMap::new();
        let t0 = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let pass = |done: bool, now: jiff::Timestamp, at: &mut BTreeMap<_, _>| {
            crate::plan::exec::run(
                &tp,
                head,
                now,
                |k, _| crate::plan::schedule::ObjectView {
                    started: false,
                    complete: *k != prod || done,
                    failed: None,
                    stalled: None,
                },
                |_| Ok(()),
                at,
                &writer,
                None,
            )
        };
        let soaking =
            |passes: &[crate::plan::exec::PlanPass]| passes[0].description.contains("soak");
        assert!(
            soaking(&pass(true, t0, &mut completed_at)),
            "{completed_at:?}"
        );
        let key = ("p@2026.2".to_owned(), 0);
        assert_eq!(completed_at.get(&key), Some(&t0));
        // Not done any more (a plane joined, or failed): forgotten.
        let later = t0 + jiff::SignedDuration::from_mins(50);
        pass(false, later, &mut completed_at);
        assert_eq!(completed_at.get(&key), None, "{completed_at:?}");
        // Done again: the soak counts from now, not from t0.
        let again = t0 + jiff::SignedDuration::from_mins(70);
        let passes = pass(true, again, &mut completed_at);
        assert_eq!(completed_at.get(&key), Some(&again));
        assert!(soaking(&passes), "{:?}", passes[0].description);
    }

    /// A complete plan stays complete when the next plan (or a hand commit)
    /// takes its objects further, whatever that later hop does: it neither
    /// turns failed nor starts a hop past its own release.
    #[test]
    fn objects_past_a_plan_leave_it_complete() {
        const PLAN: &str = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata: {name: p}\nspec:\n  to: \"2026.2\"\n  waves:\n    - name: all\n      select: [{kind: ControlPlane, namespace: openstack}]\n";
        let other = PLANE
            .replace("name: prod", "name: other")
            .replace("2026.1", "2026.2");
        let past = PLANE.replace("2026.1", "2027.1");
        let dir = tempfile::tempdir().unwrap();
        let raw = git2::Repository::init(dir.path()).unwrap();
        let head = commit(
            &raw,
            &[("p.yaml", &past), ("o.yaml", &other), ("plan.yaml", PLAN)],
        );
        let head = Oid::from_str(&head).unwrap();
        let repo = GitRepo::open(dir.path()).unwrap();
        let tp = crate::plan::exec::read(&repo, head, &[], 1 << 20).unwrap();
        let writer = writer(dir.path());
        let prod = Key::new(Kind::ControlPlane, "openstack", "prod");
        // prod's hop to 2027.1 is in flight, and has failed.
        let passes = crate::plan::exec::run(
            &tp,
            head,
            jiff::Timestamp::from_second(1_800_000_000).unwrap(),
            |k, _| crate::plan::schedule::ObjectView {
                started: false,
                complete: *k != prod,
                failed: (*k == prod).then(|| "ExpandFailed".to_owned()),
                stalled: None,
            },
            |_| Ok(()),
            &mut BTreeMap::new(),
            &writer,
            None,
        );
        assert_eq!(passes.len(), 1);
        assert_eq!(
            passes[0].decision,
            crate::plan::schedule::Decision::Complete,
            "{}",
            passes[0].description
        );
        assert!(passes[0].wrote.is_none());
    }

    /// One allocation per document: a blob read at two commits, and another
    /// blob holding the same text, hand every step the same `Document`.
    #[test]
    fn steps_naming_the_same_document_share_one_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let raw = git2::Repository::init(dir.path()).unwrap();
        let two = format!("{NOVA_A}---\n{NOVA_B}");
        let c1 = commit(&raw, &[("a.yaml", &two), ("p.yaml", PLANE)]);
        let c2 = commit(
            &raw,
            &[("a.yaml", &two), ("p.yaml", PLANE), ("c.yaml", NOVA_A)],
        );
        let repo = GitRepo::open(dir.path()).unwrap();
        let docs = Documents::new(&repo, Arc::default());
        let a = Key::new(Kind::Nova, "compute", "nova-a");
        let b = Key::new(Kind::Nova, "compute", "nova-b");
        let at1 = docs.step(&c1, "a.yaml", &a).unwrap();
        let at2 = docs.step(&c2, "a.yaml", &a).unwrap();
        let copy = docs.step(&c2, "c.yaml", &a).unwrap();
        assert!(Document::same(&at1, &at2), "one blob at two commits");
        assert!(Document::same(&at1, &copy), "the same text in another blob");
        let nb = docs.step(&c1, "a.yaml", &b).unwrap();
        assert!(!Document::same(&at1, &nb));
        assert_eq!(nb.parse().unwrap()["metadata"]["name"], "nova-b");
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        assert_eq!(docs.plane_key(&c1, "p.yaml", "prod"), Some(plane.clone()));
        let pd = docs.step(&c2, "p.yaml", &plane).unwrap();
        // Three blobs read (a, c, p), three distinct documents kept.
        assert_eq!(docs.parsed.borrow().len(), 3);
        assert_eq!(docs.texts.borrow().len(), 3);
        assert!(Document::same(
            &pd,
            &docs.step(&c1, "p.yaml", &plane).unwrap()
        ));
        // What cannot be found is an error naming file and commit.
        let missing = docs.step(&c1, "c.yaml", &a).unwrap_err();
        assert!(missing.contains("c.yaml at") && missing.contains("is missing"));
        let other = Key::new(Kind::Nova, "compute", "nova-x");
        assert!(
            docs.step(&c1, "a.yaml", &other)
                .unwrap_err()
                .contains("holds no")
        );
    }

    /// After a whole judgment, every step carries its document, and there
    /// are exactly as many allocations as distinct documents.
    #[test]
    fn a_judgment_keeps_one_allocation_per_distinct_document() {
        let dir = tempfile::tempdir().unwrap();
        crate::demo::build_repository(dir.path()).unwrap();
        let raw = git2::Repository::open(dir.path()).unwrap();
        let head = raw.head().unwrap().peel_to_commit().unwrap().id();
        let opts = CheckOptions {
            base: Some(EMPTY_TREE.into()),
            head: head.to_string(),
            prefixes: Vec::new(),
            live: None,
            max_file_bytes: crate::manifest::DEFAULT_MAX_FILE_BYTES,
            memory: None,
            trust: None,
            recorded: None,
            sources: None,
            names: None,
            keep_floors: true,
            from_base: true,
        };
        let Ok((j, _, _)) = judge_blocking(dir.path(), head, None, &opts, None) else {
            panic!("judging the demo repository failed");
        };
        let docs: Vec<&Document> = j
            .chains
            .values()
            .flat_map(|c| c.steps.iter())
            .map(|s| s.document.as_ref().unwrap())
            .collect();
        assert!(docs.len() > j.chains.len(), "some unit has several steps");
        let texts: HashSet<&str> = docs.iter().map(|d| d.text()).collect();
        let allocations: HashSet<*const u8> = docs.iter().map(|d| d.shared().as_ptr()).collect();
        assert_eq!(allocations.len(), texts.len());
    }

    /// Steps take their documents from the judgment's own parse: no file is
    /// parsed a second time, and each document is the whole object the file
    /// holds (as a YAML reader gives it).
    #[test]
    fn steps_take_their_documents_from_the_judgment() {
        let dir = tempfile::tempdir().unwrap();
        crate::demo::build_repository(dir.path()).unwrap();
        let raw = git2::Repository::open(dir.path()).unwrap();
        let head = raw.head().unwrap().peel_to_commit().unwrap().id();
        let repo = GitRepo::open(dir.path()).unwrap();
        let sources = Arc::new(history::Sources::default());
        let opts = CheckOptions {
            base: Some(EMPTY_TREE.into()),
            head: head.to_string(),
            sources: Some(sources.clone()),
            ..CheckOptions::default()
        };
        let report = history::check(&repo, &opts).unwrap();
        assert!(!sources.is_empty());
        let docs = Documents::new(&repo, sources);
        let mut read = 0;
        for c in &report.commits {
            for o in c.objects.iter().filter(|o| o.projected_by.is_none()) {
                let (Some(key), Verdict::Accepted) = (o.key(), o.verdict) else {
                    continue;
                };
                let doc = docs.step(&c.sha, &o.file, &key).unwrap();
                let oid = Oid::from_str(&c.sha).unwrap();
                let blob = repo.entry_at(oid, &o.file).unwrap().oid;
                let text = String::from_utf8(repo.read_blob(blob).unwrap()).unwrap();
                let values: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
                let whole = values
                    .into_iter()
                    .find(|v| v["metadata"]["name"] == key.name.as_str())
                    .unwrap();
                assert_eq!(doc.parse().unwrap(), whole, "{key} at {}", c.sha);
                read += 1;
            }
        }
        assert!(read > 3, "only {read} steps read");
        assert!(docs.parsed.borrow().is_empty(), "a file was parsed again");
    }
}
