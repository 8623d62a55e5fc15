//! When a plan may start what: a pure decision over the plan, where Git and
//! the cluster stand, and the clock. The daemon acts on it (it writes the
//! hop commits); `lockstep rehearse --plan` runs it against the simulator.
//!
//! Git first: an object whose release in Git is the plan's target has been
//! started (its hop commit exists), so a restarted daemon never writes a
//! wave's commit twice; the cluster says whether it is complete. The only
//! memory is when each wave was first seen complete (for the soak): a
//! restart starts the soak again, which only ever makes it longer.
//!
//! Fast-forward: a plan whose `to` is several releases ahead runs the whole
//! wave sequence once per hop ([`current_hop`]): every selected object
//! takes hop 1 (wave by wave, with the soaks), then hop 2 starts again at
//! the first wave once the last wave of hop 1 has soaked, and so on. Each
//! hop commit moves an object one release; no object is ever two hops
//! ahead of another, and none takes a hop before its previous one completed.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::kind::Key;
use crate::release::Release;

use super::UpgradePlan;
use super::window::{self, Schedule};

/// Where one selected object stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectView {
    /// Git's release for it is the plan's target (its hop was committed).
    pub started: bool,
    /// The cluster completed the hop to the target.
    pub complete: bool,
    /// A failure a person must look at (repair forward continues).
    pub failed: Option<String>,
    /// A hop that made no progress past its phase's deadline: told to a
    /// person, and it may still move by itself.
    pub stalled: Option<String>,
}

/// Where one selected object stands across hops: its release in Git and
/// whether the cluster completed that release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub release: Release,
    /// The cluster completed the hop to `release` (or never moved from it).
    pub complete: bool,
    pub failed: Option<String>,
    pub stalled: Option<String>,
}

/// Whether the cluster completed `release`, Git's release for a selected
/// unit, as lockstep saw it: its unit report says the last step is done and
/// took the unit there (for a plane, every child followed to the end). No
/// report means no accepted commit of the judged history touched the unit:
/// it is complete only at `given`, its release in the tree that history
/// starts from (`--since`), which the daemon takes as given like the rest
/// of that tree. Any other release came by a commit lockstep did not accept
/// and never applied: not complete, so no hop starts on the strength of it
/// (fail closed).
pub fn complete_at(
    release: Option<&str>,
    report: Option<&crate::rollout::UnitReport>,
    given: Option<&str>,
) -> bool {
    use crate::rollout::Next;
    match report {
        Some(r) => match r.next {
            Next::Done(i) => r
                .chain
                .steps
                .get(i)
                .is_some_and(|s| s.release.as_deref() == release),
            Next::Apply(_) | Next::Follow(_) | Next::Blocked(_) | Next::Removed { .. } => false,
        },
        None => release.is_some() && given == release,
    }
}

/// The hop a plan is on: every object moves from `from` to `to` in it
/// (objects already past `from` sit it out). `index` counts from 0 over
/// `count` hops from the plan's origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub from: Release,
    pub to: Release,
    pub index: usize,
    pub count: usize,
}

impl Hop {
    /// `hop 2/3 (2026.1 → 2026.2)`.
    pub fn describe(&self) -> String {
        format!(
            "hop {}/{} ({} → {})",
            self.index + 1,
            self.count,
            self.from,
            self.to
        )
    }
}

/// The hop a plan to `to` is on, and each object's view for that hop; `None`
/// when every object is complete at `to`. The hop's target is the lowest
/// release some object still has to reach: an object complete at `r` next
/// needs `r`'s successor, one whose hop to `r` runs still needs `r`. So a
/// hop starts only when every object completed the one before it, and an
/// object is never given a hop while its previous one runs. `origin` is the
/// lowest release of the selected objects when the plan was written (the
/// hop count starts there); without it, the current hop is the first.
pub fn current_hop(
    to: Release,
    origin: Option<Release>,
    positions: &BTreeMap<Key, Position>,
) -> Option<(Hop, BTreeMap<Key, ObjectView>)> {
    let need = |p: &Position| {
        if !p.complete {
            Some(p.release)
        } else if p.release < to {
            Some(p.release.next())
        } else {
            None
        }
    };
    let target = positions.values().filter_map(need).min()?;
    let from = target.prev().unwrap_or(target);
    let origin = origin.map_or(from, |o| o.min(from));
    let hop = Hop {
        from,
        to: target,
        index: origin.hops_to(from),
        count: origin.hops_to(to).max(1),
    };
    let views = positions
        .iter()
        .map(|(k, p)| {
            (
                k.clone(),
                ObjectView {
                    started: p.release >= target,
                    complete: p.release > target || (p.release == target && p.complete),
                    failed: p.failed.clone(),
                    stalled: p.stalled.clone(),
                },
            )
        })
        .collect();
    Some((hop, views))
}

/// What the daemon should do about a plan now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Every wave is complete.
    Complete,
    /// Commit the hops of these objects (wave index).
    Start { wave: usize, keys: Vec<Key> },
    /// Hops of the wave are running and the parallelism is used up, or
    /// nothing of the wave is left to start.
    Running { wave: usize, running: usize },
    /// The previous wave completed; it must stay healthy until `until`.
    Soaking { wave: usize, until: Timestamp },
    /// Outside every maintenance window; the next opens at `next`.
    OutsideWindow {
        wave: usize,
        next: Option<Timestamp>,
    },
    /// A gate condition does not hold.
    Gated { wave: usize, reason: String },
    /// `paused: true`: nothing new starts.
    Paused { wave: usize },
    /// An object failed (onFailure: hold); its repair goes on.
    Held { wave: usize, reason: String },
    /// An object's hop stalled: nothing new starts, as for a failure, but
    /// the plan's status stays pending (the stall may end by itself, and a
    /// failure posted now would turn back later).
    Stalled { wave: usize, reason: String },
}

impl Decision {
    pub fn describe(&self, plan: &UpgradePlan) -> String {
        let name = |w: &usize| {
            plan.spec
                .waves
                .get(*w)
                .map(|x| x.name.clone())
                .unwrap_or_default()
        };
        let n = plan.spec.waves.len();
        match self {
            Decision::Complete => format!("complete: every wave at {}", plan.spec.to),
            Decision::Start { wave, keys } => format!(
                "wave {}/{n} ({}): starting {} object(s)",
                wave + 1,
                name(wave),
                keys.len()
            ),
            Decision::Running { wave, running } => format!(
                "wave {}/{n} ({}): {running} upgrading",
                wave + 1,
                name(wave)
            ),
            Decision::Soaking { wave, until } => format!(
                "wave {}/{n} ({}) waits: previous {} soaking until {until}",
                wave + 1,
                name(wave),
                if *wave == 0 { "hop" } else { "wave" }
            ),
            Decision::OutsideWindow { wave, next } => format!(
                "wave {}/{n} ({}) waits for the maintenance window{}",
                wave + 1,
                name(wave),
                next.map(|t| format!(" (opens {t})")).unwrap_or_default()
            ),
            Decision::Gated { wave, reason } => {
                format!("wave {}/{n} ({}) gated: {reason}", wave + 1, name(wave))
            }
            Decision::Paused { wave } => {
                format!(
                    "paused before more of wave {}/{n} ({})",
                    wave + 1,
                    name(wave)
                )
            }
            Decision::Held { wave, reason } => {
                format!("held in wave {}/{n} ({}): {reason}", wave + 1, name(wave))
            }
            Decision::Stalled { wave, reason } => {
                format!(
                    "stalled in wave {}/{n} ({}): {reason}",
                    wave + 1,
                    name(wave)
                )
            }
        }
    }
}

/// Everything the decision reads.
pub struct Input<'a> {
    pub plan: &'a UpgradePlan,
    /// The objects of each wave, in order (`validate::resolve`).
    pub waves: &'a [Vec<Key>],
    pub objects: &'a BTreeMap<Key, ObjectView>,
    pub windows: &'a [Schedule],
    /// When each wave was first seen complete.
    pub completed_at: &'a BTreeMap<usize, Timestamp>,
    /// The plan's gate conditions: `Err(why)` when one does not hold.
    pub gates: Result<(), String>,
    pub now: Timestamp,
    /// When the previous hop (of a fast-forward plan) was first seen
    /// complete: its last wave soaks before this hop's first wave starts.
    /// `None` on the plan's first hop.
    pub previous_hop: Option<Timestamp>,
}

fn done(v: Option<&ObjectView>) -> bool {
    v.is_some_and(|v| v.started && v.complete)
}

/// The decision for now.
pub fn decide(i: &Input<'_>) -> Decision {
    let Some(wave) = i
        .waves
        .iter()
        .position(|keys| !keys.iter().all(|k| done(i.objects.get(k))))
    else {
        return Decision::Complete;
    };
    // A failure anywhere started holds the plan.
    for keys in &i.waves[..=wave] {
        for k in keys {
            if let Some(f) = i.objects.get(k).and_then(|v| v.failed.as_ref()) {
                return Decision::Held {
                    wave,
                    reason: format!("{k}: {f}"),
                };
            }
        }
    }
    // A stall holds it as well, told apart (no failure yet).
    for keys in &i.waves[..=wave] {
        for k in keys {
            if let Some(f) = i.objects.get(k).and_then(|v| v.stalled.as_ref()) {
                return Decision::Stalled {
                    wave,
                    reason: format!("{k}: {f}"),
                };
            }
        }
    }
    let keys = &i.waves[wave];
    let running = keys
        .iter()
        .filter(|k| i.objects.get(*k).is_some_and(|v| v.started && !v.complete))
        .count();
    // The wave before this one soaks: in this hop, or the previous hop's
    // last wave before this hop's first.
    let before = if wave > 0 {
        Some((wave - 1, i.completed_at.get(&(wave - 1)).copied()))
    } else {
        i.previous_hop
            .map(|t| (i.plan.spec.waves.len().saturating_sub(1), Some(t)))
    };
    if let Some((prev, since)) = before {
        let soak = i
            .plan
            .spec
            .waves
            .get(prev)
            .and_then(|w| crate::duration::positive(&w.soak).ok())
            .unwrap_or(Duration::ZERO);
        if !soak.is_zero() {
            let since = since.unwrap_or(i.now);
            // A soak too long to represent never ends (the gate refuses
            // one past `validate::MAX_SOAK`): never a soak of nothing.
            let until = jiff::SignedDuration::try_from(soak)
                .ok()
                .and_then(|d| since.checked_add(d).ok())
                .unwrap_or(jiff::Timestamp::MAX);
            if i.now < until {
                // A wave already under way (a restart forgot when the wave
                // before it completed, so its soak starts again) is
                // upgrading, and says so: it starts nothing more until the
                // soak ends either way.
                if running > 0 {
                    return Decision::Running { wave, running };
                }
                return Decision::Soaking { wave, until };
            }
        }
    }
    // Within the wave, kinds move in the wave's `order`: only the first
    // rank with work left may start.
    let spec = i.plan.spec.waves.get(wave);
    let rank = |k: &Key| spec.map_or(0, |w| w.rank(k.kind));
    let first = keys
        .iter()
        .filter(|k| !done(i.objects.get(*k)))
        .map(rank)
        .min()
        .unwrap_or(0);
    let pending: Vec<Key> = keys
        .iter()
        .filter(|k| i.objects.get(*k).is_none_or(|v| !v.started))
        .filter(|k| rank(k) == first)
        .cloned()
        .collect();
    if pending.is_empty() {
        // Everything of this rank started: later kinds wait for it.
        return Decision::Running { wave, running };
    }
    if i.plan.spec.paused {
        return Decision::Paused { wave };
    }
    if !window::is_open(i.windows, i.now) {
        return Decision::OutsideWindow {
            wave,
            next: window::next_open(i.windows, i.now),
        };
    }
    if let Err(reason) = &i.gates {
        return Decision::Gated {
            wave,
            reason: reason.clone(),
        };
    }
    let limit = i
        .plan
        .spec
        .waves
        .get(wave)
        .map_or(1, |w| w.max_parallel.max(1) as usize);
    let room = limit.saturating_sub(running);
    if room == 0 {
        return Decision::Running { wave, running };
    }
    Decision::Start {
        wave,
        keys: pending.into_iter().take(room).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Kind;
    use crate::plan::{PlanMetadata, PlanSpec, Selector, Wave, Window};

    fn plane(n: usize) -> Key {
        Key::new(Kind::ControlPlane, format!("cloud-{n}"), format!("p{n}"))
    }

    fn plan(waves: &[(&str, u32, &str)]) -> UpgradePlan {
        UpgradePlan {
            api_version: crate::plan::API_VERSION.into(),
            kind: "UpgradePlan".into(),
            metadata: PlanMetadata {
                name: "to-2026.2".into(),
                namespace: None,
                labels: Default::default(),
                annotations: Default::default(),
            },
            spec: PlanSpec {
                to: "2026.2".into(),
                waves: waves
                    .iter()
                    .map(|(n, p, s)| Wave {
                        name: (*n).into(),
                        select: vec![Selector::default()],
                        max_parallel: *p,
                        soak: (*s).into(),
                        order: Vec::new(),
                    })
                    .collect(),
                windows: Vec::new(),
                gates: Vec::new(),
                on_failure: Default::default(),
                paused: false,
                mode: Default::default(),
            },
        }
    }

    fn view(started: bool, complete: bool) -> ObjectView {
        ObjectView {
            started,
            complete,
            failed: None,
            stalled: None,
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    struct World {
        plan: UpgradePlan,
        waves: Vec<Vec<Key>>,
        objects: BTreeMap<Key, ObjectView>,
        windows: Vec<Schedule>,
        completed: BTreeMap<usize, Timestamp>,
        gates: Result<(), String>,
    }

    impl World {
        fn new(plan: UpgradePlan, sizes: &[usize]) -> Self {
            let mut n = 0;
            let waves: Vec<Vec<Key>> = sizes
                .iter()
                .map(|s| {
                    (0..*s)
                        .map(|_| {
                            n += 1;
                            plane(n)
                        })
                        .collect()
                })
                .collect();
            let objects = waves
                .iter()
                .flatten()
                .map(|k| (k.clone(), view(false, false)))
                .collect();
            Self {
                plan,
                waves,
                objects,
                windows: Vec::new(),
                completed: BTreeMap::new(),
                gates: Ok(()),
            }
        }
        fn decide(&self, now: &str) -> Decision {
            decide(&Input {
                plan: &self.plan,
                waves: &self.waves,
                objects: &self.objects,
                windows: &self.windows,
                completed_at: &self.completed,
                gates: self.gates.clone(),
                now: ts(now),
                previous_hop: None,
            })
        }
        fn set(&mut self, k: &Key, started: bool, complete: bool) {
            self.objects.insert(k.clone(), view(started, complete));
        }
    }

    #[test]
    fn kinds_move_in_the_waves_order() {
        let mut w = World::new(plan(&[("all", 4, "0s")]), &[0]);
        w.plan.spec.waves[0].order = vec!["placement".into(), "Nova".into()];
        let key = |k: Kind, n: &str| Key::new(k, "openstack", n);
        let (p1, p2) = (key(Kind::Placement, "p1"), key(Kind::Placement, "p2"));
        let (n1, n2) = (key(Kind::Nova, "n1"), key(Kind::Nova, "n2"));
        let g = key(Kind::Glance, "g");
        let mut keys = vec![n1.clone(), g.clone(), p1.clone(), n2.clone(), p2.clone()];
        keys.sort();
        w.waves = vec![keys.clone()];
        for k in &keys {
            w.set(k, false, false);
        }
        let now = "2026-12-01T10:00:00Z";
        let started = |d: Decision| match d {
            Decision::Start { keys, .. } => keys,
            other => panic!("{other:?}"),
        };
        // Placement first, whatever maxParallel would allow.
        let mut first = started(w.decide(now));
        first.sort();
        assert_eq!(first, vec![p1.clone(), p2.clone()]);
        w.set(&p1, true, false);
        w.set(&p2, true, true);
        assert!(matches!(
            w.decide(now),
            Decision::Running { running: 1, .. }
        ));
        w.set(&p1, true, true);
        let mut novas = started(w.decide(now));
        novas.sort();
        assert_eq!(novas, vec![n1.clone(), n2.clone()]);
        w.set(&n1, true, true);
        w.set(&n2, true, true);
        // Kinds the order does not name come last.
        assert_eq!(started(w.decide(now)), vec![g]);
    }

    #[test]
    fn waves_in_order_within_their_parallelism() {
        let mut w = World::new(plan(&[("canary", 1, "0s"), ("rest", 2, "0s")]), &[1, 3]);
        let now = "2026-12-01T10:00:00Z";
        let canary = w.waves[0][0].clone();
        assert_eq!(
            w.decide(now),
            Decision::Start {
                wave: 0,
                keys: vec![canary.clone()]
            }
        );
        w.set(&canary, true, false);
        assert_eq!(
            w.decide(now),
            Decision::Running {
                wave: 0,
                running: 1
            }
        );
        w.set(&canary, true, true);
        let rest = w.waves[1].clone();
        assert_eq!(
            w.decide(now),
            Decision::Start {
                wave: 1,
                keys: rest[..2].to_vec()
            }
        );
        w.set(&rest[0], true, false);
        w.set(&rest[1], true, false);
        assert_eq!(
            w.decide(now),
            Decision::Running {
                wave: 1,
                running: 2
            }
        );
        w.set(&rest[0], true, true);
        assert_eq!(
            w.decide(now),
            Decision::Start {
                wave: 1,
                keys: vec![rest[2].clone()]
            }
        );
        for k in &rest {
            w.set(k, true, true);
        }
        assert_eq!(w.decide(now), Decision::Complete);
    }

    #[test]
    fn a_completed_wave_soaks_before_the_next_starts() {
        let mut w = World::new(plan(&[("canary", 1, "2h"), ("rest", 5, "0s")]), &[1, 2]);
        let canary = w.waves[0][0].clone();
        w.set(&canary, true, true);
        w.completed.insert(0, ts("2026-12-01T10:00:00Z"));
        assert_eq!(
            w.decide("2026-12-01T11:59:00Z"),
            Decision::Soaking {
                wave: 1,
                until: ts("2026-12-01T12:00:00Z")
            }
        );
        assert!(matches!(
            w.decide("2026-12-01T12:00:00Z"),
            Decision::Start { wave: 1, .. }
        ));
        // Unknown completion time (a restart): the soak starts now.
        w.completed.clear();
        assert!(matches!(
            w.decide("2026-12-02T00:00:00Z"),
            Decision::Soaking { .. }
        ));
        // A restart in the middle of the next wave: it says it is
        // upgrading (not that it waits for the soak), and starts nothing
        // more until the soak it restarted ends.
        let rest = w.waves[1].clone();
        w.set(&rest[0], true, false);
        assert_eq!(
            w.decide("2026-12-02T00:00:00Z"),
            Decision::Running {
                wave: 1,
                running: 1
            }
        );
        w.set(&rest[0], true, true);
        assert!(matches!(
            w.decide("2026-12-02T00:00:00Z"),
            Decision::Soaking { wave: 1, .. }
        ));
    }

    #[test]
    fn failures_hold_pause_stops_new_starts_gates_and_windows_wait() {
        let mut w = World::new(plan(&[("all", 2, "0s")]), &[3]);
        let keys = w.waves[0].clone();
        w.objects.insert(
            keys[0].clone(),
            ObjectView {
                started: true,
                complete: false,
                failed: Some("MigrateFailed: boom".into()),
                stalled: None,
            },
        );
        assert!(
            matches!(w.decide("2026-12-01T10:00:00Z"), Decision::Held { reason, .. } if reason.contains("MigrateFailed"))
        );
        // A stall holds as well, told apart from a failure (its status
        // stays pending); a failure elsewhere still wins.
        let stall = ObjectView {
            started: true,
            complete: false,
            failed: None,
            stalled: Some("stalled in Migrating: no progress for over 1h".into()),
        };
        let second = w.objects.insert(keys[1].clone(), stall.clone());
        assert!(matches!(
            w.decide("2026-12-01T10:00:00Z"),
            Decision::Held { .. }
        ));
        w.objects.insert(keys[0].clone(), stall);
        let d = w.decide("2026-12-01T10:00:00Z");
        assert!(
            matches!(&d, Decision::Stalled { wave: 0, reason } if reason.contains("no progress")),
            "{d:?}"
        );
        assert!(
            d.describe(&w.plan)
                .starts_with("stalled in wave 1/1 (all): ")
        );
        match second {
            Some(v) => w.objects.insert(keys[1].clone(), v),
            None => w.objects.remove(&keys[1]),
        };
        w.set(&keys[0], true, false);
        w.plan.spec.paused = true;
        assert_eq!(
            w.decide("2026-12-01T10:00:00Z"),
            Decision::Paused { wave: 0 }
        );
        w.plan.spec.paused = false;
        w.gates = Err("Keystone openstack/prod-keystone is not Ready".into());
        assert!(matches!(
            w.decide("2026-12-01T10:00:00Z"),
            Decision::Gated { .. }
        ));
        w.gates = Ok(());
        w.windows = window::parse_all(&[Window {
            start: "0 22 * * *".into(),
            duration: "4h".into(),
            time_zone: "UTC".into(),
        }])
        .unwrap();
        assert_eq!(
            w.decide("2026-12-01T10:00:00Z"),
            Decision::OutsideWindow {
                wave: 0,
                next: Some(ts("2026-12-01T22:00:00Z"))
            }
        );
        // Inside the window: one more may start (one is running, limit 2).
        assert_eq!(
            w.decide("2026-12-01T23:00:00Z"),
            Decision::Start {
                wave: 0,
                keys: vec![keys[1].clone()]
            }
        );
        // A running hop is never stopped by a closing window: it is simply
        // not counted as something to start.
        w.set(&keys[1], true, false);
        w.set(&keys[2], true, false);
        assert_eq!(
            w.decide("2026-12-01T10:00:00Z"),
            Decision::Running {
                wave: 0,
                running: 3
            }
        );
    }
    fn rel(s: &str) -> Release {
        Release::parse_strict(s).unwrap()
    }

    #[test]
    fn complete_only_where_lockstep_saw_the_hop_end_or_took_the_release_as_given() {
        use crate::rollout::{Chain, Next, Step, UnitReport};
        use std::sync::Arc;
        let step = |release: &str| Step {
            sha: "a".repeat(40),
            commits: vec!["a".repeat(40)],
            earlier: Vec::new(),
            file: Arc::from("clouds/c01.yaml"),
            from: None,
            release: Some(release.into()),
            image: None,
            children: BTreeMap::new(),
            abort: false,
            reconfigured: false,
            document: Err("not read".into()),
        };
        let report = |next: Next| UnitReport {
            chain: Arc::new(Chain {
                unit: plane(1),
                from: Some("2025.2".into()),
                steps: vec![step("2026.1")],
                removed: None,
            }),
            next,
            progress: BTreeMap::new(),
            needs_person: None,
            stalled: None,
            asked: Default::default(),
            waiting: None,
            cluster_release: None,
            settled: Default::default(),
        };
        let done = report(Next::Done(0));
        assert!(complete_at(Some("2026.1"), Some(&done), None));
        // Done at another release than Git's (a later commit not in the
        // chain): not complete.
        assert!(!complete_at(Some("2026.2"), Some(&done), None));
        for next in [Next::Apply(0), Next::Follow(0), Next::Blocked("x".into())] {
            assert!(!complete_at(Some("2026.1"), Some(&report(next)), None));
        }
        // No report: the release of the tree the judged history starts
        // from is taken as given; none other, and nothing without a base.
        assert!(complete_at(Some("2025.2"), None, Some("2025.2")));
        assert!(!complete_at(Some("2026.1"), None, Some("2025.2")));
        assert!(!complete_at(Some("2026.1"), None, None));
        assert!(!complete_at(None, None, None));
    }

    fn at(release: &str, complete: bool) -> Position {
        Position {
            release: rel(release),
            complete,
            failed: None,
            stalled: None,
        }
    }

    #[test]
    fn the_current_hop_is_the_lowest_release_still_to_reach() {
        let (a, b, c) = (plane(1), plane(2), plane(3));
        let mut pos = BTreeMap::new();
        pos.insert(a.clone(), at("2025.2", true));
        pos.insert(b.clone(), at("2026.1", true));
        pos.insert(c.clone(), at("2025.2", true));
        let to = rel("2027.1");
        let (hop, views) = current_hop(to, Some(rel("2025.2")), &pos).unwrap();
        assert_eq!(hop.describe(), "hop 1/3 (2025.2 → 2026.1)");
        // b started the plan one release ahead: it sits this hop out.
        assert_eq!(views[&a], view(false, false));
        assert_eq!(views[&b], view(true, true));
        // a's hop runs: hop 1 still, and a is started but not complete.
        pos.insert(a.clone(), at("2026.1", false));
        pos.insert(c.clone(), at("2026.1", true));
        let (hop, views) = current_hop(to, Some(rel("2025.2")), &pos).unwrap();
        assert_eq!(hop.index, 0);
        assert_eq!(views[&a], view(true, false));
        assert_eq!(views[&c], view(true, true));
        // Every object complete at 2026.1: hop 2, nothing started.
        pos.insert(a.clone(), at("2026.1", true));
        let (hop, views) = current_hop(to, Some(rel("2025.2")), &pos).unwrap();
        assert_eq!(hop.describe(), "hop 2/3 (2026.1 → 2026.2)");
        assert!(views.values().all(|v| *v == view(false, false)));
        // Without an origin the current hop counts as the first.
        let (hop, _) = current_hop(to, None, &pos).unwrap();
        assert_eq!(hop.describe(), "hop 1/2 (2026.1 → 2026.2)");
        // Everything complete at the target: done.
        for p in pos.values_mut() {
            *p = at("2027.1", true);
        }
        assert_eq!(current_hop(to, None, &pos), None);
        // A one-hop plan is one hop of one.
        let one: BTreeMap<Key, Position> = [(a.clone(), at("2026.2", true))].into();
        assert_eq!(
            current_hop(to, Some(rel("2026.2")), &one)
                .unwrap()
                .0
                .describe(),
            "hop 1/1 (2026.2 → 2027.1)"
        );
    }

    #[test]
    fn the_last_waves_soak_holds_the_next_hops_first_wave() {
        let w = World::new(plan(&[("canary", 1, "30m"), ("rest", 5, "2h")]), &[1, 2]);
        let input = |now: &str, previous: Option<&str>| Input {
            plan: &w.plan,
            waves: &w.waves,
            objects: &w.objects,
            windows: &w.windows,
            completed_at: &w.completed,
            gates: Ok(()),
            now: ts(now),
            previous_hop: previous.map(ts),
        };
        assert_eq!(
            decide(&input("2026-12-01T11:00:00Z", Some("2026-12-01T10:00:00Z"))),
            Decision::Soaking {
                wave: 0,
                until: ts("2026-12-01T12:00:00Z")
            }
        );
        assert!(matches!(
            decide(&input("2026-12-01T12:00:00Z", Some("2026-12-01T10:00:00Z"))),
            Decision::Start { wave: 0, .. }
        ));
        assert!(matches!(
            decide(&input("2026-12-01T11:00:00Z", None)),
            Decision::Start { wave: 0, .. }
        ));
    }

    /// The whole engine's loop in miniature: 20 planes from 2025.2 to
    /// 2027.1 in two waves, each hop taking 10 minutes, a window every
    /// evening. Every plane takes every hop in order, one at a time, never
    /// before the previous hop's soak, never outside the window.
    #[test]
    fn a_fast_forward_walks_every_object_through_every_hop() {
        let mut p = plan(&[("canary", 1, "1h"), ("rest", 4, "2h")]);
        p.spec.to = "2027.1".into();
        p.spec.windows = vec![Window {
            start: "0 18 * * *".into(),
            duration: "6h".into(),
            time_zone: "UTC".into(),
        }];
        let windows = window::parse_all(&p.spec.windows).unwrap();
        let waves: Vec<Vec<Key>> =
            vec![(1..=2).map(plane).collect(), (3..=20).map(plane).collect()];
        let mut pos: BTreeMap<Key, Position> = waves
            .iter()
            .flatten()
            .map(|k| (k.clone(), at("2025.2", true)))
            .collect();
        // When each object's running hop completes.
        let mut running: BTreeMap<Key, Timestamp> = BTreeMap::new();
        let mut taken: BTreeMap<Key, Vec<(String, Timestamp)>> = BTreeMap::new();
        let mut completed: BTreeMap<(String, usize), Timestamp> = BTreeMap::new();
        let mut hop_done: BTreeMap<String, Timestamp> = BTreeMap::new();
        let origin = Some(rel("2025.2"));
        let to = rel("2027.1");
        let mut now = ts("2026-12-01T08:00:00Z");
        let step = jiff::SignedDuration::from_mins(1);
        for _ in 0..100_000 {
            for (k, until) in running.clone() {
                if now >= until {
                    pos.get_mut(&k).unwrap().complete = true;
                    running.remove(&k);
                }
            }
            let Some((hop, objects)) = current_hop(to, origin, &pos) else {
                break;
            };
            let key = hop.to.to_string();
            let previous_hop =
                (hop.index > 0).then(|| *hop_done.entry(hop.from.to_string()).or_insert(now));
            let mut seen = BTreeMap::new();
            for (i, keys) in waves.iter().enumerate() {
                if keys
                    .iter()
                    .all(|k| objects[k].started && objects[k].complete)
                {
                    seen.insert(i, *completed.entry((key.clone(), i)).or_insert(now));
                }
            }
            let d = decide(&Input {
                plan: &p,
                waves: &waves,
                objects: &objects,
                windows: &windows,
                completed_at: &seen,
                gates: Ok(()),
                now,
                previous_hop,
            });
            if let Decision::Start { wave, keys } = d {
                assert!(window::is_open(&windows, now), "started outside the window");
                if wave > 0 {
                    let soaked = completed[&(key.clone(), wave - 1)]
                        + jiff::SignedDuration::from_hours(if wave == 1 { 1 } else { 2 });
                    assert!(now >= soaked, "wave {wave} started before the soak ended");
                }
                if let Some(t) = previous_hop {
                    assert!(
                        now >= t + jiff::SignedDuration::from_hours(2),
                        "hop started before the last wave soaked"
                    );
                }
                for k in keys {
                    let p = pos.get_mut(&k).unwrap();
                    assert!(p.complete, "{k}: a hop started while the previous one runs");
                    assert_eq!(p.release.next(), hop.to);
                    p.release = hop.to;
                    p.complete = false;
                    running.insert(k.clone(), now + jiff::SignedDuration::from_mins(10));
                    taken.entry(k).or_default().push((hop.to.to_string(), now));
                }
                continue;
            }
            now += step;
        }
        assert!(
            current_hop(to, origin, &pos).is_none(),
            "the plan did not finish"
        );
        for k in waves.iter().flatten() {
            let hops: Vec<&str> = taken[k].iter().map(|(r, _)| r.as_str()).collect();
            assert_eq!(hops, ["2026.1", "2026.2", "2027.1"], "{k}");
        }
        // Hop-major: the last object of hop n started before the first of
        // hop n + 1.
        let last_of = |r: &str| {
            taken
                .values()
                .map(|h| h.iter().find(|x| x.0 == r).unwrap().1)
                .max()
                .unwrap()
        };
        let first_of = |r: &str| {
            taken
                .values()
                .map(|h| h.iter().find(|x| x.0 == r).unwrap().1)
                .min()
                .unwrap()
        };
        assert!(last_of("2026.1") < first_of("2026.2"));
        assert!(last_of("2026.2") < first_of("2027.1"));
    }
    /// Drives `decide` and `current_hop` like the daemon does, each hop of
    /// object `n` taking `minutes[n % len]` minutes; checks at every start
    /// that the object's previous hop completed, that no object is left
    /// more than one release behind the hop, the wave's parallelism, the
    /// window and the soaks. Returns each object's hops in order.
    fn run_plan(
        p: &UpgradePlan,
        waves: &[Vec<Key>],
        starts: &BTreeMap<Key, Release>,
        minutes: &[i64],
    ) -> BTreeMap<Key, Vec<Release>> {
        let windows = window::parse_all(&p.spec.windows).unwrap();
        let to = rel(&p.spec.to);
        let origin = starts.values().min().copied();
        let mut pos: BTreeMap<Key, Position> = starts
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    Position {
                        release: *r,
                        complete: true,
                        failed: None,
                        stalled: None,
                    },
                )
            })
            .collect();
        let index: BTreeMap<&Key, usize> = starts.keys().enumerate().map(|(i, k)| (k, i)).collect();
        let mut running: BTreeMap<Key, Timestamp> = BTreeMap::new();
        let mut taken: BTreeMap<Key, Vec<Release>> = BTreeMap::new();
        let mut completed: BTreeMap<(Release, usize), Timestamp> = BTreeMap::new();
        let mut hop_done: BTreeMap<Release, Timestamp> = BTreeMap::new();
        let soak = |w: usize| {
            jiff::SignedDuration::try_from(
                crate::duration::positive(&p.spec.waves[w].soak).unwrap_or_default(),
            )
            .unwrap()
        };
        let mut now = ts("2026-12-01T08:00:00Z");
        for _ in 0..200_000 {
            for (k, until) in running.clone() {
                if now >= until {
                    pos.get_mut(&k).unwrap().complete = true;
                    running.remove(&k);
                }
            }
            let Some((hop, objects)) = current_hop(to, origin, &pos) else {
                return taken;
            };
            let previous_hop = (hop.index > 0).then(|| *hop_done.entry(hop.from).or_insert(now));
            let mut seen = BTreeMap::new();
            for (i, keys) in waves.iter().enumerate() {
                if keys
                    .iter()
                    .all(|k| objects[k].started && objects[k].complete)
                {
                    seen.insert(i, *completed.entry((hop.to, i)).or_insert(now));
                }
            }
            let d = decide(&Input {
                plan: p,
                waves,
                objects: &objects,
                windows: &windows,
                completed_at: &seen,
                gates: Ok(()),
                now,
                previous_hop,
            });
            if let Decision::Start { wave, keys } = d {
                assert!(window::is_open(&windows, now), "started outside the window");
                if wave > 0 {
                    assert!(now >= seen[&(wave - 1)] + soak(wave - 1), "wave soak");
                } else if let Some(t) = previous_hop {
                    assert!(now >= t + soak(waves.len() - 1), "hop soak");
                }
                let running_here = waves[wave]
                    .iter()
                    .filter(|k| running.contains_key(*k))
                    .count();
                assert!(running_here + keys.len() <= p.spec.waves[wave].max_parallel as usize);
                // Nobody is left behind the hop.
                assert!(pos.values().all(|q| q.release >= hop.from));
                for k in keys {
                    assert!(waves[wave].contains(&k));
                    let q = pos.get_mut(&k).unwrap();
                    assert!(q.complete, "{k}: a hop started while the previous one runs");
                    assert_eq!(q.release.next(), hop.to);
                    q.release = hop.to;
                    q.complete = false;
                    let m = minutes[index[&k] % minutes.len()];
                    running.insert(k.clone(), now + jiff::SignedDuration::from_mins(m));
                    taken.entry(k).or_default().push(hop.to);
                }
                continue;
            }
            now += jiff::SignedDuration::from_mins(1);
        }
        panic!("the plan did not finish");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Any waves, parallelism, soaks, windows, starting releases and
        /// hop durations: every object takes each hop from where it
        /// started to the target, in order, one at a time.
        #[test]
        fn every_object_walks_from_its_start_to_the_target(
            sizes in proptest::collection::vec(1usize..5, 1..4),
            parallel in proptest::collection::vec(1u32..4, 3),
            soaks in proptest::collection::vec(0u32..3, 3),
            starts in proptest::collection::vec(0usize..3, 16),
            hops in 1usize..4,
            minutes in proptest::collection::vec(1i64..120, 1..6),
            windowed in proptest::bool::ANY,
        ) {
            let base = rel("2025.1");
            let releases: Vec<Release> = std::iter::successors(Some(base), |r| Some(r.next())).take(8).collect();
            let to = releases[2 + hops];
            let spec: Vec<(String, u32, String)> = sizes
                .iter()
                .enumerate()
                .map(|(i, _)| (format!("w{i}"), parallel[i], format!("{}h", soaks[i]).replace("0h", "0s")))
                .collect();
            let refs: Vec<(&str, u32, &str)> = spec.iter().map(|(n, p, s)| (n.as_str(), *p, s.as_str())).collect();
            let mut p = plan(&refs);
            p.spec.to = to.to_string();
            if windowed {
                p.spec.windows = vec![Window {
                    start: "0 20 * * *".into(),
                    duration: "5h".into(),
                    time_zone: "Europe/Berlin".into(),
                }];
            }
            let w = World::new(p.clone(), &sizes);
            let start: BTreeMap<Key, Release> = w
                .waves
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, k)| (k.clone(), releases[starts[i % starts.len()]]))
                .collect();
            let taken = run_plan(&p, &w.waves, &start, &minutes);
            for (k, from) in &start {
                let want: Vec<Release> = std::iter::successors(Some(from.next()), |r| Some(r.next()))
                    .take_while(|r| *r <= to)
                    .collect();
                let got = taken.get(k).cloned().unwrap_or_default();
                proptest::prop_assert_eq!(got, want, "{}", k);
            }
        }
    }
}
