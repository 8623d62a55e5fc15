//! Following a hop in flight: each followed object's tracker, the forward
//! repairs `repair::plan` allows (a failed phase Job re-run, the plane
//! re-asserted) and what must be reported to a person.

use std::time::Instant;

use super::{Daemon, Did, PassOutcome, Repo};
use crate::cluster::{Cluster, observe};
use crate::follow::{Progress, Tracker};
use crate::kind::Kind;
use crate::metrics::{KindLabels, Metrics, PhaseLabels, RepairLabels};
use crate::repair::{self, Action, RepairHistory};
use crate::rollout::{Chain, UnitReport, UnitState};

/// A hop being followed: the tracker and the repairs made so far.
pub(super) struct Following {
    tracker: Tracker,
    history: RepairHistory,
    phase: Option<(String, std::time::Duration)>,
    /// What was last told to a person about this hop (told again only
    /// when it says something else).
    reported: Option<String>,
    completed: bool,
    /// The last observation was a failure (noted once per failure).
    failing: bool,
}

impl Following {
    /// Marks the object complete; false when it already was.
    pub(super) fn complete(&mut self) -> bool {
        !std::mem::replace(&mut self.completed, true)
    }
}

/// Which hop of an object a [`Following`] tracks: its release and its image
/// (a Horizon, or a Keystone pinned by digest, has no release to tell its
/// hops apart).
pub(super) type FollowId = (crate::kind::Key, String, Option<String>);

pub(super) fn follow_id(key: &crate::kind::Key, target: &crate::rollout::Target) -> FollowId {
    (
        key.clone(),
        target.follow_to(key.kind),
        target.image.clone(),
    )
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    pub(super) async fn follow(
        &mut self,
        chain: &Chain,
        i: usize,
        state: &UnitState,
        report: &mut UnitReport,
        out: &mut PassOutcome,
    ) {
        let now = self.clock.now();
        let projected = (chain.unit.kind == Kind::ControlPlane).then_some(chain.unit.name.as_str());
        let mut reassert = false;
        // Children parked while their plane is out of Git (nothing re-asserts
        // them), and whether a repair waits out its backoff.
        let mut parked: Vec<crate::kind::Key> = Vec::new();
        let mut repairing = false;
        // Trackers of these objects' earlier hops go: a patch folded in, or
        // a revert to an earlier step's image, starts from the object's
        // record again, never from a tracker's stale count and flags (and
        // the table does not grow by one entry per patch).
        let followed = chain.followed(i);
        let ids: std::collections::HashSet<FollowId> =
            followed.iter().map(|(k, t)| follow_id(k, t)).collect();
        let keys: std::collections::HashSet<&crate::kind::Key> =
            followed.iter().map(|(k, _)| k).collect();
        self.following
            .retain(|id, _| !keys.contains(&id.0) || ids.contains(id));
        // A plane projects nothing onto a child whose gate is not Ready
        // (its Keystone; a Nova's Placement too, `docs/operators.md` §4.4):
        // those gates are looked at first, and a child waiting behind one
        // that is not done with this hop has no stall clock running.
        let mut followed = followed;
        followed.sort_by_key(|(k, _)| gate_rank(k.kind));
        let mut gates_open: std::collections::BTreeMap<Kind, bool> = Default::default();
        for (key, target) in followed.iter().cloned() {
            let to = target.follow_to(key.kind);
            let id = follow_id(&key, &target);
            // What the repair record counts towards: the hop's release, or
            // its image for a kind that tracks none (a Horizon's hops all
            // have the release "").
            let record_target = if to.is_empty() {
                target.image.clone().unwrap_or_default()
            } else {
                to.clone()
            };
            let t = Instant::now();
            let obs = observe(&self.cluster, &key).await;
            Metrics::observe(
                &self.metrics.cluster_seconds,
                "observe",
                obs.is_ok(),
                t.elapsed(),
            );
            let obs = match obs {
                Ok(Some(obs)) => obs,
                Ok(None) => {
                    // Not there (yet): waiting, and no gate it closes (its
                    // children stall and are told, rather than wait for an
                    // object that may never come).
                    report.progress.insert(key.clone(), Progress::Waiting);
                    continue;
                }
                Err(e) => {
                    // Not answered: what the unit's read said this pass
                    // stands (an object already complete does not turn
                    // pending for one failed look).
                    tracing::debug!(error = %e, object = %key, "observing failed; next pass");
                    let p = state
                        .objects
                        .get(&key)
                        .map_or(Progress::Waiting, |o| o.progress.clone());
                    if gate_rank(key.kind) < 2 {
                        gates_open.insert(key.kind, p == Progress::Complete);
                    }
                    // And what a person was told of it last pass stands
                    // too (a failure does not turn "repairing" for one pass).
                    if let Some(b) = self.units.get(&chain.unit) {
                        if b.asked.contains(&key) {
                            report.asked.insert(key.clone());
                            report.needs_person =
                                report.needs_person.take().or(b.needs_person.clone());
                        }
                        report.stalled = report.stalled.take().or(b.stalled.clone());
                    }
                    report.progress.insert(key.clone(), p);
                    continue;
                }
            };
            // Repairs already made for this hop are in the object's repair
            // record: a restart does not refill the budget, and a record
            // that cannot be read spends it. Read on every pass, not only
            // when the hop is first followed: another replica may have led
            // meanwhile and repaired (this process's count would be
            // stale, and written back lower over theirs).
            let history = RepairHistory::from_record(
                obs.status.repair_record.as_deref(),
                &record_target,
                self.opts.repair.budget,
                now,
            );
            if let Some(why) = &history.unreadable
                && self
                    .following
                    .get(&id)
                    .is_none_or(|f| f.history.unreadable.is_none())
            {
                tracing::warn!(object = %key, error = %why, "the repair record cannot be read: the retry budget counts as spent");
            }
            if let Some(f) = self.following.get_mut(&id) {
                f.history.catch_up(history);
            } else {
                self.following.insert(
                    id.clone(),
                    Following {
                        tracker: Tracker::new(to.clone(), self.opts.deadlines.clone())
                            .with_image(target.image.clone()),
                        history,
                        phase: None,
                        reported: None,
                        completed: false,
                        failing: false,
                    },
                );
            }
            let leads = self.leads();
            let Some(f) = self.following.get_mut(&id) else {
                continue;
            };
            let gated = projected.is_some()
                && gates_of(key.kind)
                    .iter()
                    .any(|g| gates_open.get(g) == Some(&false));
            let p = f.tracker.observe_gated(&obs, now, gated);
            if gate_rank(key.kind) < 2 {
                let open = p == Progress::Complete;
                gates_open
                    .entry(key.kind)
                    .and_modify(|o| *o &= open)
                    .or_insert(open);
            }
            let mut did: Vec<Did> = Vec::new();
            let failing = matches!(p, Progress::Failed { .. });
            if failing && !f.failing {
                did.push(Did::Failed {
                    object: key.clone(),
                    reason: p.describe(),
                });
            }
            f.failing = failing;
            // Phase durations, as seen.
            let phase = obs.status.phase().map(str::to_owned);
            match (&f.phase, &phase) {
                (Some((old, since)), new) if Some(old) != new.as_ref() => {
                    self.metrics
                        .phase_seconds
                        .get_or_create(&PhaseLabels {
                            kind: key.kind.as_str().into(),
                            phase: phase_label(old).into(),
                        })
                        .observe(now.saturating_sub(*since).as_secs_f64());
                    f.phase = new.clone().map(|n| (n, now));
                    did.push(Did::Phase {
                        object: key.clone(),
                        phase: new.clone(),
                    });
                }
                (None, Some(new)) => {
                    f.phase = Some((new.clone(), now));
                    did.push(Did::Phase {
                        object: key.clone(),
                        phase: Some(new.clone()),
                    });
                }
                _ => {}
            }
            let action = repair::plan(&key, projected, &p, &f.history, now, &self.opts.repair);
            // One call to the cluster for whatever the action changes or
            // audits: a Job deleted, a re-assert counted (a plane out of
            // Git is not applied, so nothing is counted), a report's Event
            // the first time it says this (a second stall in a later phase,
            // or a failure after a stall, is told again).
            let first_report =
                matches!(&action, Action::Report(m) if f.reported.as_ref() != Some(m));
            let run = match &action {
                Action::DeleteJob { .. } => true,
                Action::ReassertPlane { .. } => chain.removed.is_none(),
                Action::Report(_) => first_report,
                Action::WaitUntil(_) | Action::Nothing => false,
            };
            let executed = if run && leads {
                let r = repair::execute(
                    &self.cluster,
                    &key,
                    &action,
                    &mut f.history,
                    now,
                    &record_target,
                    self.clock.wall(),
                )
                .await;
                if let Err(e) = &r {
                    tracing::warn!(error = %e, object = %key, "repair failed; next pass");
                    // A repair the cluster refuses (no RBAC for Jobs or the
                    // record) will not be made by waiting: a person must
                    // act, or the status would read "repairing" for ever.
                    if matches!(
                        e,
                        crate::cluster::ClusterError::Invalid { .. }
                            | crate::cluster::ClusterError::Other(_)
                    ) {
                        report.needs_person = Some(format!(
                            "{key}: {}: lockstep cannot make the repair: {e}",
                            p.describe()
                        ));
                        report.asked.insert(key.clone());
                    }
                }
                Some(r.is_ok_and(|changed| changed))
            } else {
                None
            };
            match &action {
                Action::Report(m) => {
                    if first_report && executed.is_some() {
                        did.push(Did::NeedsPerson {
                            unit: chain.unit.clone(),
                            object: key.clone(),
                            message: m.clone(),
                        });
                        self.metrics
                            .repairs
                            .get_or_create(&RepairLabels {
                                kind: key.kind.as_str().into(),
                                action: "report".into(),
                            })
                            .inc();
                    }
                    // Told only once it was (this process may not lead
                    // now; leading again, it tells it then).
                    if executed.is_some() {
                        f.reported = Some(m.clone());
                    }
                    // A stall is told, and its statuses stay pending
                    // (`UnitReport::stalled`); anything else reported
                    // waits on a person, and this object's status says so.
                    if matches!(p, Progress::Stalled { .. }) {
                        report.stalled = Some(m.clone());
                    } else {
                        report.needs_person = Some(m.clone());
                        report.asked.insert(key.clone());
                    }
                }
                // A Job re-run only when one was deleted (a Job that has
                // not failed is left alone).
                Action::DeleteJob { name, attempt, .. } if executed == Some(true) => {
                    out.repaired += 1;
                    did.push(Did::Repaired {
                        object: key.clone(),
                        message: format!(
                            "deleted failed Job {name} (attempt {attempt}) so the operator runs it again"
                        ),
                    });
                    self.metrics
                        .repairs
                        .get_or_create(&RepairLabels {
                            kind: key.kind.as_str().into(),
                            action: "rerun-job".into(),
                        })
                        .inc();
                }
                // Counted in the child's record (above) before the plane is
                // applied (below, once for every parked child of the pass).
                Action::ReassertPlane { .. } if chain.removed.is_some() => {
                    reassert = true;
                    parked.push(key.clone());
                }
                Action::ReassertPlane { .. } => reassert |= executed == Some(true),
                Action::DeleteJob { .. } | Action::WaitUntil(_) => repairing = true,
                _ => {}
            }
            if p == Progress::Complete && f.complete() {
                did.push(Did::Complete {
                    object: key.clone(),
                });
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
            for d in did {
                self.record(d);
            }
        }
        if reassert && let Some(by) = &chain.removed {
            // Git no longer holds the plane: nothing of it is applied, not
            // even the step the cluster already runs.
            report.asked.extend(parked);
            report.needs_person.get_or_insert_with(|| {
                format!(
                    "{}: a child was parked by an edit outside Git, and the plane was {}, so lockstep does not re-assert it; re-add the plane to Git, or fix the child in the cluster",
                    chain.unit,
                    by.describe()
                )
            });
        } else if reassert && self.leads() {
            tracing::warn!(plane = %chain.unit, "a child was parked by an edit outside Git; re-asserting the accepted target");
            if let Err(e) = self.apply(chain, i, false).await {
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
                if let Some(step) = chain.steps.get(i) {
                    self.record(Did::Applied {
                        unit: chain.unit.clone(),
                        sha: step.sha.clone(),
                        from: step.from.clone(),
                        to: step.release.clone(),
                        reassert: true,
                    });
                }
            }
        }
        // A hop that a person must look at, or that stalled, keeps the
        // unit where it is, but the pass has nothing more to do for it,
        // unless a repair of another of its objects waits out its backoff.
        if (report.needs_person.is_none() && report.stalled.is_none()) || repairing {
            out.busy = true;
        }
    }
}

/// The children a ControlPlane's child waits for (`docs/operators.md` §4.4):
/// Keystone for all the others, Placement too for Nova. (Neutron's OVN is
/// no object lockstep follows.)
fn gates_of(kind: Kind) -> &'static [Kind] {
    match kind {
        Kind::Keystone | Kind::ControlPlane => &[],
        Kind::Nova => &[Kind::Keystone, Kind::Placement],
        _ => &[Kind::Keystone],
    }
}

/// Gates first: Keystone, then Placement, then the rest (stable, so the
/// rest keep their order).
fn gate_rank(kind: Kind) -> u8 {
    match kind {
        Kind::Keystone => 0,
        Kind::Placement => 1,
        _ => 2,
    }
}

/// The phase as a metrics label: the phase machine's own names, anything
/// else `other`. The value comes from an object's status, which whoever
/// may patch it writes: each new string would be a series kept for ever.
fn phase_label(phase: &str) -> &'static str {
    match phase {
        "Expanding" => "Expanding",
        "Migrating" => "Migrating",
        "RollingUpdate" => "RollingUpdate",
        "Contracting" => "Contracting",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_phase_label_is_one_of_a_fixed_few() {
        for p in ["Expanding", "Migrating", "RollingUpdate", "Contracting"] {
            assert_eq!(super::phase_label(p), p);
        }
        assert_eq!(
            super::phase_label("x\u{202e}-anything-a-status-says"),
            "other"
        );
    }
}
