//! Plans: the fourth step of a pass. Reads the plans' gate conditions from
//! the cluster, decides each plan (`plan::exec::run`), writes a wave's hop
//! commit when it may start (the next pass judges and applies it like any
//! other) or proposes it (`mode: propose`), and queues each plan's status.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Instant;

use git2::Oid;

use super::{Daemon, Did, PassOutcome, Repo};
use crate::cluster::Cluster;
use crate::forge::Status;
use crate::kind::Key;
use crate::rollout::Next;

/// A proposal branch's last outcome.
pub(super) struct SeenProposal {
    keys: Vec<Key>,
    head: Oid,
    outcome: crate::plan::propose::Outcome,
    at: Instant,
}

/// The units whose newest judged change was refused, with why. Git holds
/// for them what no accepted commit brought and nothing will apply: a plan
/// whose own hop commit the gate refused (a policy's block, an
/// acknowledgement it lacks) would otherwise wait for that hop for ever,
/// "upgrading", and keep a bounded run from ending. A ControlPlane counts
/// its projected services' refusals. A later commit touching the unit that
/// is accepted or held (waiting, not refused) clears it.
fn refused_last(report: &crate::history::CheckReport) -> BTreeMap<Key, String> {
    use crate::gate::Verdict;
    let mut out = BTreeMap::new();
    for c in &report.commits {
        let why = || {
            let first = c
                .objects
                .iter()
                .find(|o| o.verdict == Verdict::Refused)
                .map(|o| match o.reason {
                    Some(r) => format!("{} ({})", o.message, r.as_str()),
                    None => o.message.clone(),
                })
                .unwrap_or_else(|| "the whole commit".into());
            let short = c.sha.get(..10).unwrap_or(&c.sha);
            format!("its commit {short} was refused: {first}")
        };
        for o in &c.objects {
            let plane = o.projected_by.as_ref().and_then(|p| {
                Some(Key::new(
                    crate::kind::Kind::ControlPlane,
                    o.namespace.clone()?,
                    p.clone(),
                ))
            });
            for k in o.key().into_iter().chain(plane) {
                if c.verdict == Verdict::Refused {
                    out.insert(k, why());
                } else {
                    out.remove(&k);
                }
            }
        }
    }
    out
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Runs the plans of the head tree; true when a status may have moved
    /// (plan statuses are queued here, so never).
    pub(super) async fn reconcile_plans(
        &mut self,
        path: &Path,
        head: Oid,
        out: &mut PassOutcome,
    ) -> bool {
        use crate::plan::schedule::{Decision, ObjectView};
        let plans = self
            .judged
            .as_ref()
            .map(|j| j.plans.clone())
            .unwrap_or_default();
        if !self.opts.plans || plans.plans.is_empty() {
            return false;
        }
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
        let now = self.clock.wall();
        let writer = crate::plan::exec::Writer {
            repo: path.to_owned(),
            branch: self.opts.branch.clone(),
            author: self.opts.plan_author.clone(),
            signing_key: self.opts.plan_signing_key.clone(),
            push: self.opts.plan_push.clone(),
            merge_proposals: self.opts.plan_merge_proposals,
        };
        let units = &self.units;
        let refused = self
            .judged
            .as_ref()
            .map(|j| refused_last(&j.report))
            .unwrap_or_default();
        let view = |k: &Key, u: &crate::plan::validate::Unit| {
            let r = units.get(k);
            let complete = crate::plan::schedule::complete_at(
                u.release.as_deref(),
                r,
                plans.given.get(k).map(String::as_str),
            );
            ObjectView {
                started: false,
                complete,
                // Git's release is not the last one lockstep accepted for
                // the unit, and the newest change to it was refused.
                failed: r.and_then(|r| r.needs_person.clone()).or_else(|| {
                    let accepted = match r {
                        Some(r) => r.chain.steps.last().and_then(|s| s.release.clone()),
                        None => plans.given.get(k).cloned(),
                    };
                    (accepted != u.release)
                        .then(|| refused.get(k).cloned())
                        .flatten()
                }),
                // A stall holds a plan as a failure does (`onFailure`): no
                // new wave starts while a hop makes no progress.
                stalled: r.and_then(|r| r.stalled.clone()),
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
        let refused_head = self.judged.as_ref().and_then(|j| {
            let c = j.report.commits.last()?;
            (c.sha == head.to_string() && c.verdict == crate::gate::Verdict::Refused).then(|| {
                format!(
                    "the branch head {} is refused; a plan writes nothing on top of a refused commit",
                    c.sha.get(..10).unwrap_or(&c.sha)
                )
            })
        });
        let passes = crate::plan::exec::run(
            &plans,
            head,
            now,
            view,
            gate,
            &mut self.plan_completed,
            &writer,
            refused_head.as_deref(),
        );
        let mut statuses = Vec::new();
        let mut failed = BTreeMap::new();
        let mut proposing = HashSet::new();
        let mut ui_plans = Vec::new();
        for mut p in passes {
            if let Some(oid) = p.wrote {
                out.busy = true;
                self.record(Did::PlanCommit {
                    sha: oid.to_string(),
                });
            }
            // A proposed wave waits on a person, not on time: not busy.
            let mut proposal = None;
            let proposed = match p.propose.take() {
                Some(req) => {
                    let o = self.propose_wave(path, &req).await;
                    p.description = req.describe(&o.what);
                    proposal = o.proposal.as_ref().map(|r| {
                        if r.url.is_empty() {
                            format!("#{}", r.number)
                        } else {
                            r.url.clone()
                        }
                    });
                    proposing.insert(req.branch);
                    Some(o.state)
                }
                None => None,
            };
            if self.ui.is_some() {
                let view = self.plan_view(&plans, &p, now, proposal);
                ui_plans.extend(view);
            }
            if !p.trouble
                && !matches!(
                    p.decision,
                    Decision::Complete | Decision::Held { .. } | Decision::Stalled { .. }
                )
            {
                // Running moves by itself only while one of its hops does:
                // hops that all wait on a gate of the plan wait on a person,
                // and a bounded run must not wait for them for ever.
                let running = matches!(p.decision, Decision::Running { .. })
                    && !self.only_gated(&plans, &p.name);
                out.busy |= running
                    || matches!(
                        p.decision,
                        Decision::Soaking { .. } | Decision::OutsideWindow { .. }
                    )
                    || (matches!(p.decision, Decision::Start { .. }) && proposed.is_none());
            }
            if self.plan_last.get(&p.name) != Some(&p.description) {
                self.record(Did::PlanDecision {
                    plan: p.name.clone(),
                    description: p.description.clone(),
                });
            }
            self.plan_last.insert(p.name.clone(), p.description.clone());
            let state = match p.decision {
                Decision::Complete => crate::forge::State::Success,
                Decision::Held { .. } => crate::forge::State::Failure,
                // Retried every pass; a bounded run ends with it.
                _ if p.trouble => crate::forge::State::Error,
                _ => proposed.unwrap_or(crate::forge::State::Pending),
            };
            if matches!(
                state,
                crate::forge::State::Failure | crate::forge::State::Error
            ) {
                failed.insert(p.name.clone(), p.description.clone());
            }
            // A plan selecting a unit never read since the start knows
            // nothing of where that unit stands: its status waits for the
            // read (a restart with the API server down must not turn a
            // complete plan pending).
            if self.selects_unread(&plans, &p.name) {
                continue;
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
        if let Some(ui) = &mut self.ui {
            ui.plans(ui_plans);
        }
        self.proposals.retain(|b, _| proposing.contains(b));
        self.plan_failed = failed;
        for (sha, s) in statuses {
            self.queue_status(sha, s).await;
        }
        false
    }

    /// Whether every unit plan `name` selects that is not done waits on a
    /// gate of a plan (and at least one does).
    fn only_gated(&self, plans: &crate::plan::exec::TreePlans, name: &str) -> bool {
        use crate::rollout::{Next, WaitOn};
        let Some((p, _)) = plans
            .plans
            .iter()
            .find(|(p, _)| p.plan.metadata.name == name)
        else {
            return false;
        };
        let mut gated = false;
        for k in crate::plan::validate::resolve(&p.plan, &plans.units)
            .into_iter()
            .flatten()
        {
            let Some(u) = self.units.get(&k) else {
                return false;
            };
            match (&u.next, &u.waiting) {
                (Next::Done(_) | Next::Removed { .. } | Next::Blocked(_), _) => {}
                (Next::Apply(_), Some(w)) if w.on == WaitOn::PlanGate => gated = true,
                _ => return false,
            }
        }
        gated
    }

    /// Whether plan `name` selects a unit no pass has read since the start.
    fn selects_unread(&self, plans: &crate::plan::exec::TreePlans, name: &str) -> bool {
        let unknown = |k: &Key| self.unread.contains_key(k) && !self.units.contains_key(k);
        if !self.unread.keys().any(unknown) {
            return false;
        }
        plans
            .plans
            .iter()
            .filter(|(l, _)| l.plan.metadata.name == name)
            .any(|(l, _)| {
                crate::plan::validate::resolve(&l.plan, &plans.units)
                    .iter()
                    .flatten()
                    .any(unknown)
            })
    }

    /// A plan as the dashboard shows it.
    fn plan_view(
        &self,
        plans: &crate::plan::exec::TreePlans,
        p: &crate::plan::exec::PlanPass,
        now: jiff::Timestamp,
        proposal: Option<String>,
    ) -> Option<crate::view::PlanView> {
        let (located, _) = plans
            .plans
            .iter()
            .find(|(l, _)| l.plan.metadata.name == p.name)?;
        let plan = &located.plan;
        let waves = crate::plan::validate::resolve(plan, &plans.units);
        let units = &self.units;
        let complete = |k: &Key| {
            units.get(k).is_some_and(|r| match r.next {
                Next::Done(i) => r
                    .chain
                    .steps
                    .get(i)
                    .is_some_and(|s| s.release.as_deref() == Some(plan.spec.to.as_str())),
                _ => false,
            })
        };
        Some(crate::view::plan_view(
            plan,
            &p.sha,
            &waves,
            &p.decision,
            &p.description,
            now,
            complete,
            proposal,
        ))
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
        let outcome = propose::step(&*forge, req, before.as_ref(), move |merged| {
            propose::prepare(&repo, &r, &author, key.as_deref(), &target, &merged)
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
}
