//! Units: the third step of a pass. Which units to read (all on a new head
//! or a resync; else those in flight, those whose chain changed and those
//! the cluster announced), then per unit: read its state, decide with
//! [`rollout::next`], and act (`apply.rs`, `follow.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tracing::Instrument;

use super::judge::Judgment;
use super::{Daemon, Did, PassOutcome, Repo};
use crate::cluster::{Cluster, ClusterError, Snapshot, observation, observe_object};
use crate::follow::{Progress, assess};
use crate::kind::{Key, Kind};
use crate::metrics::{KindLabels, Metrics};
use crate::release::ImageRef;
use crate::rollout::{self, Chain, Next, ObjectState, Target, UnitReport, UnitState, Wait, WaitOn};

/// How many unit reports are in flight (an apply or a hop being followed)
/// and how many are blocked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tally {
    in_flight: usize,
    blocked: usize,
}

impl Tally {
    pub fn of<'a>(reports: impl IntoIterator<Item = &'a UnitReport>) -> Self {
        let mut t = Tally::default();
        for r in reports {
            t.add(r, 1);
        }
        t
    }

    pub fn add(&mut self, r: &UnitReport, sign: isize) {
        let (f, b) = match r.next {
            Next::Apply(_) | Next::Follow(_) => (1, 0),
            Next::Blocked(_) => (0, 1),
            Next::Done(_) | Next::Removed { .. } => (0, 0),
        };
        self.in_flight = self.in_flight.saturating_add_signed(f * sign);
        self.blocked = self.blocked.saturating_add_signed(b * sign);
    }
}

/// What the units step hands on.
pub(super) struct Walked {
    /// A unit's report changed (or every unit was read): statuses may move.
    pub changed: bool,
    /// Nothing was wanted: a quiet poll.
    pub quiet: bool,
    /// How many units were read.
    pub read: usize,
}

/// The cluster's listing ([`Cluster::snapshot`]) running in a task of its
/// own, so that it overlaps the judgment. Dropped unread (the judgment
/// failed, no unit was wanted), it stops.
pub(super) struct Listing(tokio::task::JoinHandle<Listed>);

/// A listing, how long it took, and when it ended.
type Listed = (Result<Option<Snapshot>, ClusterError>, Duration, Instant);

/// A listing that ended longer ago than this (the judgment outlasted it:
/// a long history on the first start) is taken again: units are decided
/// on state read at most this long before, as when the listing followed
/// the judgment.
const LISTING_FRESH: Duration = Duration::from_secs(5);

impl Listing {
    pub(super) fn start<C: Cluster>(cluster: &C) -> Listing {
        let list = cluster.snapshot();
        Listing(tokio::spawn(async move {
            let t = Instant::now();
            let r = list.await;
            (r, t.elapsed(), Instant::now())
        }))
    }

    /// The listing and how long it took.
    async fn read(mut self) -> Listed {
        match (&mut self.0).await {
            Ok(r) => r,
            // Aborted or panicked: the pass reads object by object.
            Err(_) => (
                Err(ClusterError::Other(
                    "the listing stopped before it finished".into(),
                )),
                Duration::ZERO,
                Instant::now(),
            ),
        }
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How many units a pass reads ahead of its decisions, and how many of
/// those reads are in flight at once: enough to hide the API server's round
/// trips, few enough that a pass never holds much state read long before it
/// decides, nor floods the API server.
const READ_BATCH: usize = 64;
const READS_IN_FLIGHT: usize = 8;

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Whether this pass reads every unit: the first pass, then once per
    /// `resync`.
    pub(super) fn full_due(&self) -> bool {
        self.last_full
            .is_none_or(|t| t.elapsed() >= self.opts.resync)
    }

    /// `full` is [`Self::full_due`] at the pass's start; `listing`, the
    /// cluster's listing started then, if it was.
    pub(super) async fn reconcile_units(
        &mut self,
        judgment: &Judgment,
        full: bool,
        listing: Option<Listing>,
        out: &mut PassOutcome,
    ) -> Walked {
        let chains = &judgment.chains;
        // The objects deleted outside Git that the record keeps, before any
        // unit is decided: a restarted or newly elected leader must not
        // take such an object for a fresh install.
        if self.gone_recorded.is_none() && self.leads() {
            match self.load_record().await {
                Ok((r, _)) => self.adopt_deleted(&r),
                Err(e) => {
                    tracing::error!(error = %e, "reading lockstep's record failed; no unit is decided this pass");
                    out.source_error = Some(e.to_string());
                    return Walked {
                        changed: false,
                        quiet: true,
                        read: 0,
                    };
                }
            }
        }
        self.unread.retain(|k, _| chains.contains_key(k));
        self.unrecorded.retain(|k| chains.contains_key(k));
        self.applies.retain(|k, _| chains.contains_key(k));
        self.gone.retain(|k, _| chains.contains_key(k));
        self.present.retain(|k, _| chains.contains_key(k));
        if full {
            self.units.retain(|k, _| chains.contains_key(k));
            // Every unit is read again below, each refilling what it saw.
            self.seen.clear();
            self.tally = Tally::of(self.units.values());
            self.last_full = Some(Instant::now());
        }
        let dirty = std::mem::take(&mut self.dirty);
        self.dry_runs.clear();
        let mut changed = full;
        let quiet = !full
            && dirty.is_empty()
            && self.tally.in_flight == 0
            && self.walked == Some(judgment.head);
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
        let read = wanted.len();
        // A pass that reads every unit reads the cluster at once, a LIST per
        // kind; when that fails, object by object as any other pass.
        let snapshot = if full && !wanted.is_empty() {
            let listing = listing.unwrap_or_else(|| Listing::start(&self.cluster));
            let (mut s, mut took, ended) = listing.read().await;
            if ended.elapsed() > LISTING_FRESH {
                tracing::debug!(
                    age_ms = ended.elapsed().as_secs_f64() * 1e3,
                    "the listing is older than the judgment; listing again"
                );
                (s, took, _) = Listing::start(&self.cluster).read().await;
            }
            Metrics::observe(&self.metrics.cluster_seconds, "snapshot", s.is_ok(), took);
            s.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "listing the cluster failed; reading object by object");
                None
            })
        } else {
            None
        };
        let snapshot = snapshot.as_ref();
        // Units are read a batch ahead, several reads in flight (each is a
        // round trip to the API server: one at a time, 5,000 units took
        // 27 s), and decided one by one in order, as before: a unit's
        // objects are its own, so no decision changes another unit's read.
        for (b, batch) in wanted.chunks(READ_BATCH).enumerate() {
            if !self.leads() {
                // The lease was lost mid-pass: the new leader decides from
                // here; what is left is read when this process leads again.
                tracing::warn!("the lease was lost during the pass; no further unit is reconciled");
                for (key, _) in wanted.iter().skip(b * READ_BATCH) {
                    self.dirty.insert(key.clone());
                }
                break;
            }
            let mut states: Vec<_> = futures::stream::iter(batch)
                .map(|(key, chain)| {
                    let span = tracing::info_span!("unit", object = %key);
                    self.read_unit(chain, snapshot).instrument(span)
                })
                .buffered(READS_IN_FLIGHT)
                .collect()
                .await;
            // Deletions are written down before anything is decided on
            // them, once per batch: a crash or a lost lease after a
            // re-creation decided here must not leave the next leader
            // without them (and a namespace deleted at once is a few
            // writes, not one per object).
            let (mut deletions_kept, mut retry) = (true, false);
            if self.leads() {
                for ((key, chain), state) in batch.iter().zip(states.iter_mut()) {
                    if let Ok((state, _)) = state {
                        self.note_gone(key, chain, state);
                    }
                }
                if let Err(r) = self.save_deleted().await {
                    (deletions_kept, retry) = (false, r);
                }
            }
            for ((key, chain), state) in batch.iter().zip(states) {
                if !self.leads() {
                    // The lease was lost mid-pass: the new leader decides
                    // from here; what is left is read again when this
                    // process leads again.
                    tracing::warn!(
                        "the lease was lost during the pass; no further unit is reconciled"
                    );
                    self.dirty.insert(key.clone());
                    continue;
                }
                let span = tracing::info_span!("unit", object = %key);
                let state = match state {
                    Ok((state, versions)) => {
                        self.seen.extend(versions);
                        state
                    }
                    Err(e) => {
                        // Where the unit stands is unknown this pass: what
                        // was last said of it stands, and it is read again
                        // next pass. A report made of the failure turned
                        // its done commits failure, then success again once
                        // the API server answered (statuses settle once).
                        tracing::warn!(error = %e, object = %key, "reading the unit failed; next pass");
                        // Read again next pass either way; a refusal waits
                        // on a person, so a bounded run can stop.
                        out.busy |= e.retryable();
                        self.dirty.insert(key.clone());
                        self.unread
                            .insert(key.clone(), (chain.clone(), e.to_string()));
                        continue;
                    }
                };
                self.unread.remove(key);
                // Decided only once the record holds the deletion (one it
                // already held is decided as usual: a re-creation is how
                // the list gets shorter).
                if state.gone_from.is_some()
                    && !deletions_kept
                    && !self
                        .gone_recorded
                        .as_ref()
                        .is_some_and(|r| r.contains_key(key))
                {
                    self.dirty.insert(key.clone());
                    self.unrecorded.insert(key.clone());
                    // A write that failed (the API server, another
                    // process's write meanwhile) is tried again next pass;
                    // one only a person can mend (the list past the
                    // record's bound, writes forbidden) waits on them.
                    out.busy |= retry;
                    continue;
                }
                self.unrecorded.remove(key);
                let u = self
                    .reconcile(chain, state, judgment, snapshot, out)
                    .instrument(span)
                    .await;
                if self.units.get(key) != Some(&u) {
                    changed = true;
                    self.tally.add(&u, 1);
                    if let Some(old) = self.units.insert(key.clone(), u) {
                        self.tally.add(&old, -1);
                    }
                }
            }
        }
        self.walked = Some(judgment.head);
        out.blocked = self.tally.blocked;
        debug_assert_eq!(self.tally, Tally::of(self.units.values()));
        self.metrics.units_blocked.set(out.blocked as i64);
        let _ = self.save_deleted().await;
        Walked {
            changed,
            quiet,
            read,
        }
    }

    /// Takes the objects deleted outside Git that `record` keeps: all of
    /// them on the first read of a leadership (what this process saw since
    /// is kept over them), and on every later read what another process
    /// changed since this one last read or wrote the list (a replica that
    /// led meanwhile, while this one had not noticed it lost the lease):
    /// its additions are taken, and its removals (an object back in the
    /// cluster) unless this process changed that entry itself since.
    /// Every write of the list follows a read through here, so a write
    /// never drops another's deletion it did not see.
    pub(super) fn adopt_deleted(&mut self, record: &super::record::Record) {
        let theirs = record.deleted();
        match self.gone_recorded.take() {
            None => {
                for (k, r) in &theirs {
                    self.gone.entry(k.clone()).or_insert_with(|| r.clone());
                }
            }
            Some(known) => {
                // Each key the other changed is read again next pass: an
                // object present after all leaves the list then, rather
                // than be re-created later where the other last saw it.
                for (k, r) in &theirs {
                    if known.get(k) != Some(r) {
                        self.gone.insert(k.clone(), r.clone());
                        self.dirty.insert(k.clone());
                    }
                }
                for (k, r) in &known {
                    if !theirs.contains_key(k) && self.gone.get(k) == Some(r) {
                        self.gone.remove(k);
                        self.dirty.insert(k.clone());
                    }
                }
            }
        }
        self.gone_recorded = Some(theirs);
    }

    /// Writes the objects deleted outside Git to the record when they
    /// changed. On failure they stay in memory and are written next pass.
    /// `Ok`: the record holds them; `Err(retry)`: not written, and whether
    /// passes alone may write them (a failure of the API server or a write
    /// of another process meanwhile), or only a person (the list past the
    /// record's bound, a record that does not read, writes forbidden).
    async fn save_deleted(&mut self) -> Result<(), bool> {
        match &self.gone_recorded {
            Some(r) if *r == self.gone => return Ok(()),
            // Not read this leadership: nothing of it is known to be kept.
            None if !self.gone.is_empty() => return Err(false),
            None => return Ok(()),
            Some(_) => {}
        }
        // Past the record's bound: not tried again (a read, two gzips and
        // an error every pass) until some are back or gone from Git.
        if self.gone_overflow.is_some_and(|n| self.gone.len() >= n) {
            return Err(false);
        }
        let name = super::record::name(&self.opts.cluster_name);
        let text = match self.load_record().await {
            Ok((mut r, base)) => {
                // What another process changed in the list since this one
                // last read or wrote it is kept, not written over.
                self.adopt_deleted(&r);
                r.set_deleted(&self.gone);
                match r.fit(0) {
                    Ok((t, _)) => Ok((t, base)),
                    Err(e) => {
                        if matches!(e, super::record::RecordError::TooManyDeleted { .. }) {
                            self.gone_overflow = Some(self.gone.len());
                        }
                        Err(super::PassError::from(e))
                    }
                }
            }
            Err(e) => Err(e),
        };
        let saved = match text {
            Ok(_) if !self.leads() => return Err(false),
            Ok((t, base)) => self
                .cluster
                .save_record(&name, &t, base.as_deref())
                .await
                .map_err(|e| (e.retryable(), e.to_string())),
            Err(e) => {
                let retry =
                    matches!(&e, super::PassError::Cluster { source, .. } if source.retryable());
                Err((retry, e.to_string()))
            }
        };
        match saved {
            Ok(()) => {
                self.gone_overflow = None;
                self.gone_recorded = Some(self.gone.clone());
                Ok(())
            }
            Err((retry, e)) => {
                tracing::error!(
                    error = %e,
                    "writing the objects deleted outside Git to lockstep's record failed; such objects are not re-created until it is written"
                );
                Err(retry)
            }
        }
    }

    /// Remembers where a unit stood when it is read absent after it was
    /// read present (deleted outside Git), until it is back or Git removes
    /// it: `rollout::next` re-creates it there, not at Git's newest step
    /// (`UnitState::gone_from`). Where it stood is the lower of its spec's
    /// release and the release its operator reports installed (a spec
    /// edited forward outside Git is not where its database is). Seen only
    /// from reads made while this process leads (`run` forgets where units
    /// stood when it stops leading); a deletion seen is kept in lockstep's
    /// record ([`Self::save_deleted`]), so a restart or another leader
    /// keeps it too. A deletion made while no process led, of an object
    /// never read present since, cannot be told from a first install.
    fn note_gone(&mut self, key: &Key, chain: &Chain, state: &mut UnitState) {
        if chain.removed.is_some() {
            self.gone.remove(key);
            self.present.remove(key);
            return;
        }
        if let Some(spec) = &state.spec {
            self.gone.remove(key);
            // Only a release that parses is kept (the record refuses any
            // other): a spec edited to something that is no release says
            // nothing of where the database is, the installed release does.
            let r = |x: &str| {
                crate::release::TaggedRelease::parse(x)
                    .ok()
                    .map(|t| t.release)
            };
            let installed = state
                .objects
                .get(key)
                .and_then(|o| o.installed.as_deref())
                .filter(|i| r(i).is_some());
            let spec_release = spec.release.as_deref().filter(|s| r(s).is_some());
            let lower = match (spec_release, installed) {
                (Some(s), Some(i)) => match (r(s), r(i)) {
                    (Some(a), Some(b)) if b < a => Some(i),
                    _ => Some(s),
                },
                (s, i) => i.or(s),
            };
            match lower {
                Some(r) => {
                    self.present.insert(key.clone(), r.to_owned());
                }
                None => {
                    self.present.remove(key);
                }
            }
            return;
        }
        let was = self
            .gone
            .get(key)
            .cloned()
            .or_else(|| self.present.remove(key));
        if let Some(was) = was {
            if !self.gone.contains_key(key) {
                tracing::warn!(object = %key, release = %was, "the object was deleted outside Git");
            }
            self.gone.insert(key.clone(), was.clone());
            state.gone_from = Some(was);
        }
    }

    /// Reads one unit, decides and acts.
    async fn reconcile(
        &mut self,
        chain: &Arc<Chain>,
        state: UnitState,
        judgment: &Judgment,
        snapshot: Option<&Snapshot>,
        out: &mut PassOutcome,
    ) -> UnitReport {
        let (gates, windows) = (&*judgment.gates, &*judgment.windows);
        let next = next_of(chain, &state);
        tracing::debug!(?next, steps = chain.steps.len(), objects = ?state.objects, spec = ?state.spec, "decided");
        // The step the last pass had in flight, when this one is past it:
        // its hop ended now (the journal's hop ends; decisions never read it).
        if let Some(prev) = self.units.get(&chain.unit)
            && let Next::Follow(p) | Next::Apply(p) = prev.next
            && match next {
                Next::Done(q) => q >= p,
                Next::Apply(q) | Next::Follow(q) | Next::Removed { at: q, .. } => q > p,
                Next::Blocked(_) => false,
            }
            && let Some(step) = chain.steps.get(p)
        {
            // Objects the stateless read saw complete before a tracker did.
            for (k, t) in chain.followed(p) {
                let id = super::follow::follow_id(&k, &t);
                if self.following.get_mut(&id).is_none_or(|f| f.complete()) {
                    self.record(Did::Complete { object: k });
                }
            }
            tracing::info!(
                unit = %chain.unit,
                commit = %step.sha,
                at_secs = self.clock.now().as_secs(),
                "hop complete"
            );
            let sha = step.sha.clone();
            self.record(Did::HopComplete {
                unit: chain.unit.clone(),
                sha,
            });
        }
        let mut report = UnitReport {
            chain: chain.clone(),
            next: next.clone(),
            progress: BTreeMap::new(),
            needs_person: None,
            stalled: None,
            asked: Default::default(),
            waiting: None,
            cluster_release: state.spec.as_ref().and_then(|s| s.release.clone()),
            settled: rollout::settled(chain, &next, &state),
        };
        let closed = match next {
            Next::Apply(i) => self.window_wait(chain, i, &state, windows),
            _ => None,
        };
        if let Some(m) = closed {
            let m = Wait::new(WaitOn::Window, m);
            if self.units.get(&chain.unit).and_then(|u| u.waiting.as_ref()) != Some(&m) {
                tracing::info!(reason = %crate::escape::Escaped(&m.message), "hop waits for a maintenance window");
            }
            // Time opens it: a bounded run (and virtual time) goes on.
            out.busy = true;
            report.waiting = Some(m);
            return report;
        }
        let held = match next {
            Next::Apply(i) => match self.plan_gate_wait(chain, i, &state, windows).await {
                Some(m) => Some((WaitOn::PlanGate, m)),
                None => self
                    .preflight(chain, i, &state, gates)
                    .await
                    .map(|m| (WaitOn::Gate, m)),
            },
            _ => None,
        };
        if let Some((on, m)) = held {
            let m = Wait::new(on, m);
            if self.units.get(&chain.unit).and_then(|u| u.waiting.as_ref()) != Some(&m) {
                match on {
                    WaitOn::PlanGate => {
                        tracing::info!(reason = %crate::escape::Escaped(&m.message), "hop waits on a plan's gate")
                    }
                    _ => {
                        tracing::info!(reason = %crate::escape::Escaped(&m.message), "hop waits on a pre-flight gate")
                    }
                }
            }
            report.waiting = Some(m);
            return report;
        }
        match next {
            Next::Apply(i) => {
                let step = &chain.steps[i];
                let now = self.clock.now();
                // What this process applied of the unit; after a restart,
                // nothing, unless the object carries this very step's
                // digest: an earlier process applied it and the cluster
                // left it since, which is a drift to count as one, not a
                // new hop.
                let seeded = self.applies.get(&chain.unit).cloned().or_else(|| {
                    rollout::applied_before(step, &state).then(|| crate::repair::Applies {
                        sha: step.sha.clone(),
                        times: 1,
                        last: now,
                    })
                });
                let last = seeded.as_ref();
                // A fight past the repair budget is told to a person (it
                // ends nothing by itself), its statuses untouched.
                let (budget, max_backoff) = (self.opts.repair.budget, self.opts.repair.max_backoff);
                let fight = move |a: &crate::repair::Applies| {
                    (a.sha == step.sha && a.times > budget + 1).then(|| {
                        format!(
                            "{}: left Git's step outside Git {} times in a row (an edit, or another tool writing the same fields); lockstep applies it again after at most {}: find the other writer",
                            chain.unit,
                            a.times - 1,
                            crate::follow::short(max_backoff)
                        )
                    })
                };
                if let Some(until) = last.and_then(|a| a.wait(&step.sha, now, &self.opts.repair)) {
                    // The cluster left the step this process applied, again:
                    // applied once more after the backoff (time opens it).
                    tracing::debug!(commit = %step.sha, wait_secs = until.saturating_sub(now).as_secs(), "the unit left Git's step again; applying it once the backoff ends");
                    report.stalled = last.and_then(fight);
                    if let Some(a) = last {
                        report.waiting = Some(Wait::new(
                            WaitOn::Drift,
                            // Words that stay the same for the whole wait,
                            // so a status says them once.
                            format!(
                                "the cluster left Git's step again ({} in a row: an edit, or another tool); applied again after a backoff of {}",
                                a.times - 1,
                                crate::follow::short(until.saturating_sub(a.last))
                            ),
                        ));
                    }
                    out.busy |= report.stalled.is_none();
                    return report;
                }
                let again = last.is_some_and(|a| a.sha == step.sha);
                let span = tracing::info_span!("apply", commit = %step.sha, to = step.release.as_deref().unwrap_or(""));
                if !self.leads() {
                    return report;
                }
                // The objects this step's commits start together are
                // applied all or none: a dry run of each first (a new step
                // only; the same step again is that object's alone).
                if !again
                    && !step.abort
                    && let Err(refused) = self.commit_admits(&judgment.chains, step, snapshot).await
                {
                    if refused.retryable {
                        tracing::warn!(reason = %refused.message, "a dry run of the commit's objects did not answer; next pass");
                        out.busy = true;
                        // What a person was told stays told: a pass that
                        // could not ask turns no failure back to pending.
                        report.needs_person = self
                            .units
                            .get(&chain.unit)
                            .and_then(|u| u.needs_person.clone());
                        report.waiting = Some(Wait::new(WaitOn::Commit, refused.message));
                    } else {
                        self.tell_person(
                            chain,
                            &mut report,
                            format!("apply refused: {}", refused.message),
                        );
                    }
                    return report;
                }
                // The dry runs took time: the lease may have gone since.
                if !self.leads() {
                    return report;
                }
                match self.apply(chain, i, again).instrument(span).await {
                    Ok(()) => {
                        let applies =
                            crate::repair::Applies::after(last, &step.sha, now, &self.opts.repair);
                        if again {
                            tracing::warn!(commit = %step.sha, times = applies.times, "the unit left Git's step outside Git (an edit, another tool); applied it again");
                            self.metrics
                                .repairs
                                .get_or_create(&crate::metrics::RepairLabels {
                                    kind: chain.unit.kind.as_str().into(),
                                    action: "reapply-drift".into(),
                                })
                                .inc();
                            // Every repair is also an Event for people to
                            // read (an Event that cannot be written is only
                            // logged).
                            let message = format!(
                                "left Git's step {} outside Git: applied again (time {} in a row)",
                                step.sha.get(..10).unwrap_or(&step.sha),
                                applies.times
                            );
                            if let Err(e) = self
                                .cluster
                                .record_event(&chain.unit, "DriftReapplied", &message, true)
                                .await
                            {
                                tracing::warn!(error = %e, "the re-apply's Event could not be written");
                            }
                            report.stalled = fight(&applies);
                        } else {
                            self.metrics
                                .hops_applied
                                .get_or_create(&KindLabels {
                                    kind: chain.unit.kind.as_str().into(),
                                })
                                .inc();
                        }
                        self.applies.insert(chain.unit.clone(), applies);
                        out.applied += 1;
                        out.busy = true;
                        self.record(Did::Applied {
                            unit: chain.unit.clone(),
                            sha: step.sha.clone(),
                            from: step.from.clone(),
                            to: step.release.clone(),
                            // The same step again is no new hop.
                            reassert: again,
                        });
                        report.next = Next::Follow(i);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, commit = %step.sha, "apply failed");
                        // Tried again next pass either way; a rejection waits
                        // on a person, so a bounded run can stop.
                        out.busy |= e.retryable();
                        if !e.retryable() {
                            // Refused after its dry run passed (the cluster
                            // changed in between): the objects of its
                            // commits not applied yet this pass wait too.
                            let short = step.sha.get(..10).unwrap_or(&step.sha);
                            let held = CommitRefused::refused(
                                short,
                                &chain.unit,
                                &step.sha,
                                &e.to_string(),
                            );
                            for c in &step.commits {
                                self.dry_runs.insert(c.clone(), Err(held.clone()));
                            }
                            self.tell_person(chain, &mut report, format!("apply refused: {e}"));
                        }
                        report.next = Next::Apply(i);
                    }
                }
            }
            Next::Follow(i) => {
                self.follow(chain, i, &state, &mut report, out).await;
            }
            Next::Done(i) => {
                for (k, _) in chain.followed(i) {
                    report.progress.insert(k, Progress::Complete);
                }
            }
            Next::Blocked(ref m) => {
                tracing::warn!(reason = %m, "unit blocked");
            }
            Next::Removed { at, ref by } => {
                if let Some(i) = at.checked_sub(1) {
                    for (k, _) in chain.followed(i) {
                        report.progress.insert(k, Progress::Complete);
                    }
                }
                tracing::debug!(why = %by.describe(), "unit no longer in Git: nothing applied");
            }
        }
        report
    }

    /// Tells a person why the unit's step was not applied (recorded once
    /// while the words stay the same).
    fn tell_person(&mut self, chain: &Chain, report: &mut UnitReport, message: String) {
        if self
            .units
            .get(&chain.unit)
            .and_then(|u| u.needs_person.as_ref())
            != Some(&message)
        {
            self.record(Did::NeedsPerson {
                unit: chain.unit.clone(),
                object: chain.unit.clone(),
                message: message.clone(),
            });
        }
        report.needs_person = Some(message);
    }

    /// Whether the objects `step`'s commits start together may be applied:
    /// for each commit that more than one unit's chain carries, every unit
    /// whose next move is to apply a step holding that commit is read and
    /// its apply tried as a dry run. One refusal, and none of them is
    /// applied: a half-applied commit (Keystone moved, its Glance refused
    /// by a webhook) is a state nobody wrote in Git. Asked once a pass per
    /// commit, reading the units from the pass's listing when it has one.
    /// A unit that waits (a window, a gate) is asked too: its
    /// refusal would come later, with the others already applied. Objects
    /// applied by earlier passes are not asked again.
    async fn commit_admits(
        &mut self,
        chains: &BTreeMap<Key, Arc<Chain>>,
        step: &rollout::Step,
        snapshot: Option<&Snapshot>,
    ) -> Result<(), CommitRefused> {
        for commit in &step.commits {
            let answer = match self.dry_runs.get(commit) {
                Some(a) => a.clone(),
                None => {
                    let a = self.dry_run_commit(chains, commit, snapshot).await;
                    self.dry_runs.insert(commit.clone(), a.clone());
                    a
                }
            };
            answer?;
        }
        Ok(())
    }

    async fn dry_run_commit(
        &self,
        chains: &BTreeMap<Key, Arc<Chain>>,
        commit: &str,
        snapshot: Option<&Snapshot>,
    ) -> Result<(), CommitRefused> {
        let carries = |s: &rollout::Step| s.commits.iter().any(|c| c == commit);
        let members: Vec<&Arc<Chain>> = chains
            .values()
            .filter(|c| c.removed.is_none() && c.steps.iter().any(carries))
            .collect();
        if members.len() < 2 {
            // One object: its own apply answers.
            return Ok(());
        }
        let short = commit.get(..10).unwrap_or(commit);
        let asked = futures::stream::iter(members)
            .map(|chain| async move {
                let unit = &chain.unit;
                if !self.leads() {
                    return Err(CommitRefused::later(
                        short,
                        unit,
                        "this process no longer leads",
                    ));
                }
                let (mut state, _) = self.read_unit(chain, snapshot).await.map_err(|e| {
                    if e.retryable() {
                        CommitRefused::later(short, unit, &e.to_string())
                    } else {
                        CommitRefused::unread(short, unit, &e.to_string())
                    }
                })?;
                if state.spec.is_none() {
                    // Decided as the unit's own pass decides it
                    // (`note_gone`): deleted outside Git, it is re-created
                    // where it was, or blocked.
                    state.gone_from = self
                        .gone
                        .get(unit)
                        .or_else(|| self.present.get(unit))
                        .cloned();
                }
                let Next::Apply(j) = next_of(chain, &state) else {
                    return Ok(());
                };
                let Some(step) = chain.steps.get(j).filter(|s| carries(s)) else {
                    // On an earlier hop, or past the commit: asked when it
                    // comes to it, or never again.
                    return Ok(());
                };
                // An abort goes at once (it ends a hop in flight); a step
                // already applied that the cluster left is that object's
                // drift, set right on its own (`again`), never a reason to
                // hold the others.
                if step.abort
                    || rollout::applied_before(step, &state)
                    || self.applies.get(unit).is_some_and(|a| a.sha == step.sha)
                {
                    return Ok(());
                }
                let (req, _) = super::apply::request(chain, j)
                    .map_err(|e| CommitRefused::refused(short, unit, &step.sha, &e.to_string()))?;
                let t = Instant::now();
                let r = self.cluster.dry_run(&req).await;
                Metrics::observe(
                    &self.metrics.cluster_seconds,
                    "dry_run",
                    r.is_ok(),
                    t.elapsed(),
                );
                r.map_err(|e| {
                    if e.retryable() {
                        CommitRefused::later(short, unit, &e.to_string())
                    } else {
                        CommitRefused::refused(short, unit, &step.sha, &e.to_string())
                    }
                })
            })
            .buffered(READS_IN_FLIGHT);
        futures::pin_mut!(asked);
        // The first refusal ends the asking; a refusal outweighs a read
        // that did not answer (it waits on a person either way).
        let mut later = None;
        while let Some(a) = asked.next().await {
            match a {
                Ok(()) => {}
                Err(r) if !r.retryable => return Err(r),
                Err(r) => later = later.or(Some(r)),
            }
        }
        later.map_or(Ok(()), Err)
    }

    /// Why step `i` may not be applied now: every maintenance window of a
    /// plan that selects the unit is closed (`plan::exec::windows`). Only a
    /// release hop of an object already in the cluster waits, as for the
    /// pre-flight gates; an abort never does.
    fn window_wait(
        &self,
        chain: &Chain,
        i: usize,
        state: &UnitState,
        windows: &super::judge::PlanWindows,
    ) -> Option<String> {
        let plans = windows.get(&chain.unit)?;
        if !is_hop(&chain.steps[i], state) {
            return None;
        }
        let now = self.clock.wall();
        let release = chain.steps[i].release.as_deref();
        for hold in plans.iter().filter(|h| h.governs(release)) {
            // Windows that do not parse hold the hop on a person
            // (`plan_gate_wait`): no time opens them.
            let Ok(windows) = &hold.windows else {
                continue;
            };
            if windows.is_empty() || windows.iter().any(|s| s.open_at(now).is_some()) {
                continue;
            }
            let opens = windows.iter().filter_map(|s| s.next_start(now)).min();
            return Some(format!(
                "waiting for a maintenance window of plan {}{}",
                hold.plan,
                opens.map(|t| format!(" (opens {t})")).unwrap_or_default()
            ));
        }
        None
    }

    /// Why a hop of the unit must wait on a gate of a plan that selects it
    /// (`spec.gates`: "must hold before any hop starts"): checked when the
    /// hop is applied, not only when its commit was written, as the
    /// windows are. Whatever cannot be read holds the hop.
    async fn plan_gate_wait(
        &self,
        chain: &Chain,
        i: usize,
        state: &UnitState,
        holds: &super::judge::PlanWindows,
    ) -> Option<String> {
        let plans = holds.get(&chain.unit)?;
        if !is_hop(&chain.steps[i], state) {
            return None;
        }
        let release = chain.steps[i].release.as_deref();
        for hold in plans.iter().filter(|h| h.governs(release)) {
            if let Err(e) = &hold.windows {
                return Some(format!(
                    "waiting on plan {}: its maintenance windows do not parse ({e}); fix them",
                    hold.plan
                ));
            }
            for g in &hold.gates {
                let Some(key) = g.object.key() else {
                    return Some(format!(
                        "waiting on a gate of plan {} on unknown kind {:?}",
                        hold.plan, g.object.kind
                    ));
                };
                let why = match self.cluster.get(&key).await {
                    Ok(Some(o)) => match o.status.condition(&g.condition) {
                        Some(c) if c.status == g.status => continue,
                        Some(c) => format!("{key} {} is {} ({})", g.condition, c.status, c.reason),
                        None => format!("{key} has no {} condition yet", g.condition),
                    },
                    Ok(None) => format!("{key} does not exist"),
                    Err(e) => format!("{key}: {e}"),
                };
                return Some(format!("waiting on a gate of plan {}: {why}", hold.plan));
            }
        }
        None
    }

    /// Why step `i` may not be applied yet: a pre-flight gate of the
    /// policies that fails on the live state (`core/src/preflight.rs`).
    /// Only a release hop of an object already in the cluster is gated (not
    /// an install, a re-assert at the same release or an abort). Whatever
    /// cannot be read holds the hop: the gates fail closed.
    async fn preflight(
        &self,
        chain: &Chain,
        i: usize,
        state: &UnitState,
        gates: &crate::preflight::Gates,
    ) -> Option<String> {
        use crate::preflight::{LiveState, needs_backups, wait};
        let step = &chain.steps[i];
        if !is_hop(step, state) || gates.is_empty() {
            return None;
        }
        if let Some(e) = &gates.error {
            return Some(format!("waiting: {e}"));
        }
        let keys: Vec<Key> = if chain.unit.kind == Kind::ControlPlane {
            step.children.keys().cloned().collect()
        } else {
            vec![chain.unit.clone()]
        };
        let mut moved = Vec::with_capacity(keys.len());
        let ready = gates.gates.iter().any(|g| g.children_ready);
        for k in keys {
            let r = if ready {
                match self.cluster.get(&k).await {
                    Ok(Some(o)) => Some(
                        o.status
                            .condition("Ready")
                            .map(|c| (c.status.clone(), c.reason.clone()))
                            .unwrap_or_else(|| ("Unknown".into(), "no Ready condition".into())),
                    ),
                    Ok(None) => None,
                    Err(e) => return Some(format!("waiting: cannot read {k}: {e}")),
                }
            } else {
                None
            };
            moved.push((k, r));
        }
        let keys: Vec<Key> = moved.iter().map(|(k, _)| k.clone()).collect();
        let backups = if needs_backups(&gates.gates, &chain.unit, &keys) {
            match self.cluster.backups().await {
                Ok(b) => b,
                Err(e) => return Some(format!("waiting: cannot read the database Backups: {e}")),
            }
        } else {
            Vec::new()
        };
        wait(
            &gates.gates,
            &chain.unit,
            &LiveState {
                now: self.clock.wall().as_second(),
                backups: &backups,
                moved: &moved,
            },
        )
    }

    /// The unit's state, and the `resourceVersion` of each object read.
    async fn read_unit(
        &self,
        chain: &Chain,
        snapshot: Option<&Snapshot>,
    ) -> Result<(UnitState, Vec<(Key, Box<str>)>), ClusterError> {
        let get = async |k: &Key| match snapshot {
            Some(s) => s.lookup(k),
            None => self.cluster.get(k).await,
        };
        let unit = match snapshot {
            Some(s) => s.lookup(&chain.unit)?,
            None => {
                let t = Instant::now();
                let unit = self.cluster.get(&chain.unit).await;
                Metrics::observe(
                    &self.metrics.cluster_seconds,
                    "get",
                    unit.is_ok(),
                    t.elapsed(),
                );
                unit?
            }
        };
        let mut versions: Vec<(Key, Box<str>)> = Vec::new();
        if let Some(o) = &unit {
            versions.push((o.key.clone(), o.resource_version.as_str().into()));
        }
        let mut state = UnitState {
            spec: unit.as_ref().map(|o| Target {
                release: rollout::spec_release(o.key.kind, o.release.as_deref(), o.image.as_ref()),
                image: o.image.as_ref().map(ImageRef::reference),
            }),
            objects: BTreeMap::new(),
            projected_by: unit.as_ref().and_then(|o| o.status.projected_by.clone()),
            applied: unit.as_ref().and_then(|o| o.status.applied.clone()),
            gone_from: None,
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
                get(&k).await?
            };
            let Some(obj) = obj else { continue };
            if k != chain.unit {
                versions.push((k.clone(), obj.resource_version.as_str().into()));
            }
            let spec = Target {
                release: rollout::spec_release(k.kind, obj.release.as_deref(), obj.image.as_ref()),
                image: obj.image.as_ref().map(ImageRef::reference),
            };
            let installed = obj.status.installed().map(str::to_owned);
            let obs = match snapshot {
                Some(s) => observation(&k, obj, &s.deployments(&k)),
                None => {
                    let t = Instant::now();
                    let obs = observe_object(&self.cluster, &k, obj).await;
                    Metrics::observe(
                        &self.metrics.cluster_seconds,
                        "observe",
                        obs.is_ok(),
                        t.elapsed(),
                    );
                    obs?
                }
            };
            // Stateless here; the tracker adds stall detection when followed.
            let to = Target {
                release: spec.release.clone(),
                image: spec.image.clone(),
            }
            .follow_to(k.kind);
            let progress = assess(&to, &obs);
            state.objects.insert(
                k,
                ObjectState {
                    spec,
                    progress,
                    installed,
                },
            );
        }
        Ok((state, versions))
    }
}

/// Why the objects a commit starts together were not applied: one of
/// them was refused in a dry run, or could not be asked.
#[derive(Clone, Debug)]
pub(super) struct CommitRefused {
    pub retryable: bool,
    pub message: String,
}

impl CommitRefused {
    /// A dry run (or what it would send) was refused: a person must act.
    fn refused(commit: &str, unit: &Key, at: &str, why: &str) -> Self {
        let at = if at.starts_with(commit) {
            String::new()
        } else {
            format!(" (its document at {})", at.get(..10).unwrap_or(at))
        };
        CommitRefused {
            retryable: false,
            message: format!(
                "the objects of commit {commit} wait: a dry run of {unit}{at} was refused ({why}); lockstep applies none of a commit's objects while one of them is refused: fix it in Git"
            ),
        }
    }

    /// An object of the commit cannot be read, and will not be by itself.
    fn unread(commit: &str, unit: &Key, why: &str) -> Self {
        CommitRefused {
            retryable: false,
            message: format!(
                "the objects of commit {commit} wait: {unit} cannot be read ({why}); lockstep applies a commit's objects once each of them is asked in a dry run"
            ),
        }
    }

    /// Asked again next pass (the API server did not answer).
    fn later(commit: &str, unit: &Key, why: &str) -> Self {
        CommitRefused {
            retryable: true,
            message: format!(
                "the objects of commit {commit} wait: {unit} could not be asked in a dry run ({why}); asked again next pass"
            ),
        }
    }
}

/// The unit's next move, from what was read of it.
fn next_of(chain: &Chain, state: &UnitState) -> Next {
    let complete = |i: usize| {
        chain.followed(i).iter().all(|(k, t)| {
            state
                .objects
                .get(k)
                .is_some_and(|o| o.progress == Progress::Complete && o.spec_matches(k.kind, t))
        })
    };
    rollout::next(chain, state, complete)
}

/// Whether applying `step` moves an object already in the cluster to
/// another release: what pre-flight gates and maintenance windows hold (not
/// an install, a re-assert at the same release or an abort).
fn is_hop(step: &rollout::Step, state: &UnitState) -> bool {
    !step.abort
        && step.release.is_some()
        && step.from.is_some()
        && step.from != step.release
        && match &state.spec {
            Some(s) => s.release != step.release,
            // Re-created after a deletion outside Git one hop on from where
            // it was: the operator migrates its database, a hop like any.
            None => state
                .gone_from
                .as_ref()
                .is_some_and(|g| Some(g) != step.release.as_ref()),
        }
}
