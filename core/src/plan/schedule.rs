//! When a plan may start what: a pure decision over the plan, where Git and
//! the cluster stand, and the clock. The daemon acts on it (it writes the
//! hop commits); `lockstep rehearse --plan` runs it against the simulator.
//!
//! Git first: an object whose release in Git is the plan's target has been
//! started (its hop commit exists), so a restarted daemon never writes a
//! wave's commit twice; the cluster says whether it is complete. The only
//! memory is when each wave was first seen complete (for the soak): a
//! restart starts the soak again, which only ever makes it longer.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::kind::Key;

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
                "wave {}/{n} ({}) waits: previous wave soaking until {until}",
                wave + 1,
                name(wave)
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
    if wave > 0 {
        let soak = i
            .plan
            .spec
            .waves
            .get(wave - 1)
            .and_then(|w| crate::duration::positive(&w.soak).ok())
            .unwrap_or(Duration::ZERO);
        if !soak.is_zero() {
            let since = i.completed_at.get(&(wave - 1)).copied().unwrap_or(i.now);
            let until = since
                .checked_add(jiff::SignedDuration::try_from(soak).unwrap_or_default())
                .unwrap_or(since);
            if i.now < until {
                return Decision::Soaking { wave, until };
            }
        }
    }
    let keys = &i.waves[wave];
    let running = keys
        .iter()
        .filter(|k| i.objects.get(*k).is_some_and(|v| v.started && !v.complete))
        .count();
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
            },
        );
        assert!(
            matches!(w.decide("2026-12-01T10:00:00Z"), Decision::Held { reason, .. } if reason.contains("MigrateFailed"))
        );
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
}
