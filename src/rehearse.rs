//! `lockstep rehearse`: the accepted hops of a range, run through the
//! simulated operator with lockstep's own apply, follow and repair logic, in
//! virtual time. It prints the predicted timeline per object (phases, Jobs,
//! rolls, events, repairs, total duration): the "rehearse before the
//! window" step of every upgrade runbook.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use thiserror::Error;

use crate::desired::Desired;
use crate::escape::Escaped;
use crate::follow::{Deadlines, Progress, Tracker};
use crate::gate::{Transition, Verdict};
use crate::history::CheckReport;
use crate::kind::{Key, Kind};
use crate::release::ImageRef;
use crate::repair::{self, Action, RepairHistory, RepairPolicy};
use crate::sim::{Fault, JobKind, Params, World};

#[derive(Debug, Error)]
pub enum RehearseError {
    #[error(
        "--fault {spec:?}: {why}; expected OBJECT:JOB:fail=N (JOB: sync, expand, migrate, contract), OBJECT:db-down=DURATION or OBJECT:roll-stall=DURATION"
    )]
    Fault { spec: String, why: String },
}

/// Parses `nova:expand:fail=2`, `prod-glance:db-down=15m`, `prod-nova:roll-stall=20m`.
pub fn parse_fault(spec: &str) -> Result<Fault, RehearseError> {
    let bad = |why: &str| RehearseError::Fault {
        spec: spec.to_owned(),
        why: why.to_owned(),
    };
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.as_slice() {
        [object, job, what] => {
            let job = match *job {
                "sync" => JobKind::Sync,
                "expand" => JobKind::Expand,
                "migrate" => JobKind::Migrate,
                "contract" => JobKind::Contract,
                _ => return Err(bad("unknown job")),
            };
            let n = what
                .strip_prefix("fail=")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad("expected fail=N"))?;
            Ok(Fault::JobFails {
                object: (*object).to_owned(),
                job,
                tries: n,
            })
        }
        [object, what] => {
            let (k, v) = what
                .split_once('=')
                .ok_or_else(|| bad("expected KEY=VALUE"))?;
            let d = parse_duration(v).ok_or_else(|| bad("bad duration (e.g. 90s, 15m, 1h)"))?;
            match k {
                "db-down" => Ok(Fault::DatabaseDown {
                    object: (*object).to_owned(),
                    until: d,
                }),
                "roll-stall" => Ok(Fault::RolloutStall {
                    object: (*object).to_owned(),
                    extra: d,
                }),
                _ => Err(bad("unknown fault")),
            }
        }
        _ => Err(bad("wrong number of parts")),
    }
}

pub fn parse_duration(s: &str) -> Option<Duration> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    Some(Duration::from_secs(n.checked_mul(per)?))
}

fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// One hop of one unit (a ControlPlane with its children, or a standalone object).
#[derive(Clone, Debug)]
struct Hop {
    commit: String,
    from: Option<String>,
    to: Option<String>,
    image: Option<ImageRef>,
    /// Children whose release or image this hop changes (planes only), with
    /// every child's image (the plane re-asserts all).
    changed: Vec<Key>,
    children: Vec<(Key, ImageRef)>,
}

#[derive(Clone, Debug)]
struct Target {
    release: Option<String>,
    image: Option<ImageRef>,
    projected_by: Option<String>,
}

/// Per child of a hop: its tracker, its repairs, and when it completed
/// (`Duration::MAX`: given up).
type Following = BTreeMap<Key, (Tracker, RepairHistory, Option<Duration>)>;

/// A hop being applied: the hop, when it started, its children.
type ActiveHop = (Hop, Duration, Following);

struct FinishedHop {
    unit: Key,
    hop: Hop,
    started: Duration,
    ended: Duration,
    completed: BTreeMap<Key, Option<Duration>>,
}

/// The prediction.
#[derive(Debug, Default)]
pub struct Rehearsal {
    pub total: Duration,
    pub lines: Vec<String>,
    pub failed: bool,
    pub hops: usize,
    pub repairs: usize,
}

/// Runs the accepted hops of `report`, starting from `baseline` (every
/// desired object of the base tree, installed and steady).
pub fn rehearse(
    baseline: &[Desired],
    report: &CheckReport,
    faults: Vec<Fault>,
    params: Params,
) -> Rehearsal {
    let mut world = World::new(params);
    world.faults = faults;
    let mut state: BTreeMap<Key, Target> = BTreeMap::new();
    for d in baseline {
        state.insert(
            d.key.clone(),
            Target {
                release: d.release.clone(),
                image: d.image.clone(),
                projected_by: d.projected_by.clone(),
            },
        );
    }
    seed(&mut world, baseline);

    // Hops per unit, in commit order.
    let mut queues: BTreeMap<Key, VecDeque<Hop>> = BTreeMap::new();
    let mut skipped = Vec::new();
    for c in report
        .commits
        .iter()
        .filter(|c| c.verdict == Verdict::Accepted)
    {
        let mut planes_touched: BTreeMap<String, Vec<Key>> = BTreeMap::new();
        for o in &c.objects {
            let Some(key) = o.key() else { continue };
            if o.transition == Transition::Remove || o.verdict == Verdict::Refused {
                continue;
            }
            let image = o
                .to_image
                .as_deref()
                .and_then(|r| ImageRef::parse_reference(r).ok());
            let prev = state.get(&key).cloned();
            state.insert(
                key.clone(),
                Target {
                    release: o.to.clone(),
                    image: image.clone(),
                    projected_by: o.projected_by.clone(),
                },
            );
            match (&o.projected_by, key.kind) {
                (Some(p), _) => planes_touched
                    .entry(p.clone())
                    .or_default()
                    .push(key.clone()),
                (None, Kind::ControlPlane) => {
                    planes_touched.entry(key.name.clone()).or_default();
                }
                (None, _) => {
                    if prev.is_none() {
                        skipped.push(format!(
                            "{key}: new object, installed by the operator (not rehearsed)"
                        ));
                        continue;
                    }
                    queues.entry(key.clone()).or_default().push_back(Hop {
                        commit: c.sha.clone(),
                        from: o.from.clone(),
                        to: o.to.clone(),
                        image,
                        changed: vec![key.clone()],
                        children: Vec::new(),
                    });
                }
            }
        }
        for (plane, changed) in planes_touched {
            let Some(pk) = state
                .keys()
                .find(|k| k.kind == Kind::ControlPlane && k.name == plane)
                .cloned()
            else {
                continue;
            };
            let children: Vec<(Key, ImageRef)> = state
                .iter()
                .filter(|(_, t)| t.projected_by.as_deref() == Some(plane.as_str()))
                .filter_map(|(k, t)| t.image.clone().map(|i| (k.clone(), i)))
                .collect();
            let from = report
                .commits
                .iter()
                .flat_map(|c| &c.objects)
                .find(|o| o.key().as_ref() == Some(&pk) && o.to == state[&pk].release)
                .and_then(|o| o.from.clone());
            queues.entry(pk.clone()).or_default().push_back(Hop {
                commit: c.sha.clone(),
                from,
                to: state[&pk].release.clone(),
                image: None,
                changed: changed
                    .into_iter()
                    .filter(|k| world.objects.contains_key(k))
                    .collect(),
                children,
            });
        }
    }

    let mut out = Rehearsal::default();
    let mut active: BTreeMap<Key, ActiveHop> = BTreeMap::new();
    let mut finished: Vec<FinishedHop> = Vec::new();
    let mut notes: BTreeMap<Key, Vec<String>> = BTreeMap::new();
    let policy = RepairPolicy::default();
    let mut guard = 0;
    loop {
        guard += 1;
        if guard > 200_000 {
            out.failed = true;
            break;
        }
        // Start the next hop of every idle unit.
        for (unit, q) in queues.iter_mut() {
            if active.contains_key(unit) {
                continue;
            }
            let Some(hop) = q.pop_front() else { continue };
            out.hops += 1;
            let applied = if unit.kind == Kind::ControlPlane {
                world.apply_plane(unit, hop.to.as_deref().unwrap_or_default(), &hop.children)
            } else {
                match &hop.image {
                    Some(i) => world.apply(unit, field_release(unit.kind, &hop.to), i.clone()),
                    None => Ok(()),
                }
            };
            if let Err(e) = applied {
                notes.entry(unit.clone()).or_default().push(format!(
                    "{} apply refused: {}",
                    clock(world.now),
                    e.0
                ));
                out.failed = true;
                continue;
            }
            let trackers = hop
                .changed
                .iter()
                .map(|k| {
                    let to = match k.kind {
                        Kind::Keystone => world
                            .objects
                            .get(k)
                            .and_then(|o| o.image.tag().map(str::to_owned)),
                        _ => hop.to.clone(),
                    };
                    (
                        k.clone(),
                        (
                            Tracker::new(to.unwrap_or_default(), Deadlines::default()),
                            RepairHistory::default(),
                            None,
                        ),
                    )
                })
                .collect();
            active.insert(unit.clone(), (hop, world.now, trackers));
        }
        world.settle();
        // Follow every active hop; repair forward where lockstep may.
        let now = world.now;
        let mut acted = false;
        let mut done_units = Vec::new();
        for (unit, (hop, started, trackers)) in active.iter_mut() {
            let mut all_done = true;
            for (child, (tracker, history, completed)) in trackers.iter_mut() {
                if completed.is_some() {
                    continue;
                }
                let Some(obs) = world.observe(child) else {
                    continue;
                };
                let p = tracker.observe(&obs, now);
                match &p {
                    Progress::Complete => *completed = Some(now),
                    Progress::Failed { .. } | Progress::Stalled { .. } => {
                        all_done = false;
                        let projected =
                            (unit.kind == Kind::ControlPlane).then_some(unit.name.as_str());
                        match repair::plan(child, projected, &p, history, now, &policy) {
                            Action::DeleteJob {
                                namespace,
                                name,
                                attempt,
                            } => {
                                world.delete_job(&namespace, &name);
                                history.retries = attempt;
                                history.last = Some(now);
                                out.repairs += 1;
                                acted = true;
                                notes.entry(child.clone()).or_default().push(format!(
                                    "{} repair: deleted failed Job {name} (attempt {attempt}) so the operator runs it again",
                                    clock(now)
                                ));
                            }
                            Action::ReassertPlane { .. } => {
                                let _ = world.apply_plane(
                                    unit,
                                    hop.to.as_deref().unwrap_or_default(),
                                    &hop.children,
                                );
                                acted = true;
                            }
                            Action::WaitUntil(_) | Action::Nothing => {}
                            Action::Report(m) => {
                                notes
                                    .entry(child.clone())
                                    .or_default()
                                    .push(format!("{} {m}", clock(now)));
                                *completed = Some(Duration::MAX);
                                out.failed = true;
                            }
                        }
                    }
                    _ => all_done = false,
                }
            }
            if all_done && trackers.values().all(|(_, _, c)| c.is_some()) {
                done_units.push((unit.clone(), *started));
            }
        }
        // A finished hop lets the unit's next one start at once.
        acted |= !done_units.is_empty();
        for (unit, started) in done_units {
            if let Some((hop, _, trackers)) = active.remove(&unit) {
                let per: BTreeMap<Key, Option<Duration>> =
                    trackers.into_iter().map(|(k, (_, _, c))| (k, c)).collect();
                finished.push(FinishedHop {
                    unit: unit.clone(),
                    hop,
                    started,
                    ended: now,
                    completed: per,
                });
            }
        }
        if active.is_empty() && queues.values().all(VecDeque::is_empty) {
            break;
        }
        if acted {
            // Let the operator answer the repair before time moves on.
            continue;
        }
        // Wake at the next due work, or at the next repair backoff.
        let next_repair = active
            .values()
            .flat_map(|(_, _, t)| t.values())
            .filter_map(|(_, h, c)| {
                if c.is_none() {
                    h.last.map(|l| {
                        l + policy
                            .backoff
                            .saturating_mul(2u32.saturating_pow(h.retries.saturating_sub(1)))
                    })
                } else {
                    None
                }
            })
            .filter(|t| *t > world.now)
            .min();
        match (world.next_due(), next_repair) {
            (Some(a), Some(b)) => world.advance_to(a.min(b)),
            (Some(a), None) | (None, Some(a)) => world.advance_to(a),
            (None, None) => {
                // Nothing will ever happen again: whatever is active is stuck.
                for (unit, (hop, _, trackers)) in active.iter() {
                    let waiting: Vec<String> = trackers
                        .iter()
                        .filter(|(_, (_, _, c))| c.is_none())
                        .filter_map(|(k, _)| {
                            let obs = world.observe(k)?;
                            let to = hop.to.clone().unwrap_or_default();
                            Some(format!(
                                "{} ({})",
                                k.name,
                                crate::follow::assess(&to, &obs).describe()
                            ))
                        })
                        .collect();
                    notes.entry(unit.clone()).or_default().push(format!(
                        "{} stuck: no work left in the simulated cluster; waiting on {}",
                        clock(world.now),
                        waiting.join(", ")
                    ));
                }
                out.failed = true;
                break;
            }
        }
    }
    out.total = world.now;

    // The timeline, per hop, with each child's events.
    for FinishedHop {
        unit,
        hop,
        started,
        ended,
        completed: per,
    } in &finished
    {
        let short: String = hop.commit.chars().take(10).collect();
        let range = match (&hop.from, &hop.to) {
            (Some(f), Some(t)) if f != t => format!("{f} → {t}"),
            (_, Some(t)) => t.clone(),
            _ => String::new(),
        };
        let failed = per.values().any(|c| *c == Some(Duration::MAX));
        out.lines.push(format!(
            "{unit} {range} (commit {short}): {} {} → {} ({})",
            if failed { "FAILED" } else { "applied" },
            clock(*started),
            clock(*ended),
            human(ended.saturating_sub(*started))
        ));
        for (child, completed) in per {
            let mut line = format!("    {}", child.name);
            for e in world
                .events
                .iter()
                .filter(|e| &e.key == child && e.at >= *started && e.at <= *ended)
            {
                let _ = write!(
                    line,
                    "  {} {}{}",
                    clock(e.at),
                    if e.warning { "⚠ " } else { "" },
                    e.reason
                );
            }
            match completed {
                Some(t) if *t != Duration::MAX => {
                    let _ = write!(line, "  {} complete", clock(*t));
                }
                _ => line.push_str("  (not complete)"),
            }
            out.lines.push(line);
            for n in notes.remove(child).unwrap_or_default() {
                out.lines.push(format!("      {n}"));
            }
        }
        for n in notes.remove(unit).unwrap_or_default() {
            out.lines.push(format!("      {n}"));
        }
    }
    for (unit, ns) in notes {
        for n in ns {
            out.lines.push(format!("{unit}: {n}"));
        }
    }
    for s in skipped {
        out.lines.push(s);
    }
    out
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s / 60) % 60),
    }
}

/// `openStackRelease` for the kinds that have it (Keystone's is its tag,
/// Horizon has none).
/// Installs every desired object the world lacks, steady at its desired
/// release: the state a simulated cluster starts from (and what the
/// simulated operator does for an object lockstep installs fresh).
pub fn seed(world: &mut World, desired: &[Desired]) {
    for d in desired {
        if d.key.kind == Kind::ControlPlane {
            if !world.planes.contains_key(&d.key) {
                world.install_plane(d.key.clone(), d.release.clone().unwrap_or_default());
            }
        } else if let (Some(plane), Some(existing)) = (&d.projected_by, world.objects.get(&d.key)) {
            // A plane that projects an object already running standalone
            // takes it over, as the operator does (server-side apply with
            // force): from now on the plane re-asserts it.
            if existing.projected_by.is_none() {
                let plane = plane_key(desired, plane, &d.key);
                if let Some(o) = world.objects.get_mut(&d.key) {
                    o.projected_by = Some(plane);
                }
            }
        } else if let Some(image) = &d.image
            && !world.objects.contains_key(&d.key)
        {
            let plane = d
                .projected_by
                .as_ref()
                .map(|p| plane_key(desired, p, &d.key));
            world.install_steady(
                d.key.clone(),
                field_release(d.key.kind, &d.release),
                image.clone(),
                plane,
            );
        }
    }
}

fn field_release(kind: Kind, release: &Option<String>) -> Option<String> {
    (kind.release_source() == crate::kind::ReleaseSource::Field)
        .then(|| release.clone())
        .flatten()
}

fn plane_key(baseline: &[Desired], plane: &str, child: &Key) -> Key {
    baseline
        .iter()
        .find(|d| {
            d.key.kind == Kind::ControlPlane
                && d.key.name == plane
                && &*d.file
                    == baseline
                        .iter()
                        .find(|c| &c.key == child)
                        .map_or("", |c| &*c.file)
        })
        .map(|d| d.key.clone())
        .unwrap_or_else(|| Key::new(Kind::ControlPlane, child.namespace.clone(), plane))
}

/// The report for people.
pub fn text(r: &Rehearsal) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "rehearsal: {} hop{} in the simulated cluster, {} repair{}",
        r.hops,
        if r.hops == 1 { "" } else { "s" },
        r.repairs,
        if r.repairs == 1 { "" } else { "s" }
    );
    // Lines name releases, commits and objects from Git: one line each.
    for l in &r.lines {
        let _ = writeln!(s, "{}", Escaped(l));
    }
    let _ = writeln!(
        s,
        "predicted total: {}{}",
        human(r.total),
        if r.failed {
            " — NOT all hops completed"
        } else {
            ""
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_or_explain() {
        assert_eq!(
            parse_fault("nova:expand:fail=2").unwrap(),
            Fault::JobFails {
                object: "nova".into(),
                job: JobKind::Expand,
                tries: 2
            }
        );
        assert_eq!(
            parse_fault("prod-glance:db-down=15m").unwrap(),
            Fault::DatabaseDown {
                object: "prod-glance".into(),
                until: Duration::from_secs(900)
            }
        );
        assert!(
            parse_fault("nova:explode:fail=1")
                .unwrap_err()
                .to_string()
                .contains("unknown job")
        );
        assert!(parse_fault("nova:db-down=soon").is_err());
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
