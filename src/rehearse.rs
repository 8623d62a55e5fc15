//! `lockstep rehearse`: the accepted hops of a range, run by the daemon's
//! own engine (`daemon::simulate`) against the simulated operator in
//! virtual time, and the predicted timeline printed per hop: phases, Jobs,
//! rolls (in the operators' roll order, with Nova's and Cinder's second
//! roll), repairs, what a hop waits on, and the total. This module only
//! renders: what it prints is what `run` would do, to the second.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::cluster::memory::MemoryCluster;
use crate::daemon::{self, Did, FixedHead, Options, Simulation};
use crate::escape::Escaped;
use crate::gate::Verdict;
use crate::git::{GitError, GitRepo, Resolved};
use crate::history::{self, CheckOptions};
use crate::kind::Key;
use crate::rollout::Next;
use crate::sim::{Fault, Params, World};

pub use crate::sim::{FaultError, parse_fault};

#[derive(Debug, Error)]
pub enum RehearseError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Seed(#[from] daemon::SeedError),
    #[error("--head {0}: names a tree, not a commit; a rehearsal runs commits")]
    HeadNotACommit(String),
    #[error(transparent)]
    UnknownFault(#[from] crate::sim::UnknownFaultObject),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
}

/// What to rehearse.
#[derive(Clone, Debug)]
pub struct Range {
    pub repo: PathBuf,
    /// Starting baseline; `None`: the head's first parent.
    pub base: Option<String>,
    pub head: String,
    pub paths: Vec<String>,
    pub faults: Vec<Fault>,
    pub params: Params,
}

/// The prediction.
#[derive(Debug, Default)]
pub struct Rehearsal {
    pub total: Duration,
    pub lines: Vec<String>,
    /// A hop did not complete, or a unit waits on a person.
    pub failed: bool,
    pub hops: usize,
    pub repairs: usize,
    /// Refused commits of the range (not rehearsed: the gate keeps them out).
    pub refused: usize,
    /// Each hop's completion, `(unit, commit) → virtual time`.
    pub completed: BTreeMap<(Key, String), Duration>,
    /// The hops as the dashboard draws them (`--html`).
    pub timeline: Vec<crate::view::Hop>,
    /// Virtual time when the engine had nothing left to do.
    pub ended: Duration,
}

/// Runs the accepted hops of the range from its base tree, every object of
/// which is installed and steady in the simulated world.
pub async fn rehearse(range: &Range) -> Result<Rehearsal, RehearseError> {
    let paths = crate::git::normalize_prefixes(&range.paths)?;
    let check = CheckOptions {
        base: range.base.clone(),
        head: range.head.clone(),
        prefixes: paths.clone(),
        // The range as the daemon applies it (`daemon::simulate`).
        from_base: true,
        ..CheckOptions::default()
    };
    let (path, head, since, refused, world) = {
        let git = GitRepo::open(&range.repo)?;
        let head = match git.resolve(&range.head)? {
            Resolved::Commit(c) => c,
            Resolved::Tree(_) => return Err(RehearseError::HeadNotACommit(range.head.clone())),
        };
        let report = history::check(&git, &check)?;
        let refused = report
            .commits
            .iter()
            .filter(|c| c.verdict == Verdict::Refused)
            .count();
        let mut world = World::new(range.params.clone());
        world.faults = range.faults.clone();
        let world = MemoryCluster::new(world);
        let opts = Options {
            paths: paths.clone(),
            ..Options::default()
        };
        daemon::seed_tree(&world, &git, history::base_tree(&git, &report)?, &opts)?;
        (
            range.repo.clone(),
            head,
            report.base.clone(),
            refused,
            world,
        )
    };
    let opts = Options {
        cluster_name: "rehearsal".into(),
        paths,
        since,
        // The range's hops only: a plan in the tree must not write commits
        // into the repository being read.
        plans: false,
        ..Options::default()
    };
    let sim = daemon::simulate(
        FixedHead { path, head },
        world.clone(),
        opts,
        jiff::Timestamp::now(),
    )
    .await;
    if let Some(e) = world.world()?.fault_without_object() {
        return Err(e.into());
    }
    let mut r = render(&sim);
    r.refused = refused;
    Ok(r)
}

/// One hop as the engine ran it.
struct Hop {
    unit: Key,
    sha: String,
    from: Option<String>,
    to: Option<String>,
    started: Duration,
    ended: Option<Duration>,
}

/// The hops of a simulation, in the order they were applied.
fn hops(sim: &Simulation) -> Vec<Hop> {
    let mut out: Vec<Hop> = Vec::new();
    for e in &sim.journal {
        match &e.what {
            Did::Applied {
                unit,
                sha,
                from,
                to,
                reassert: false,
            } => out.push(Hop {
                unit: unit.clone(),
                sha: sha.clone(),
                from: from.clone(),
                to: to.clone(),
                started: e.at,
                ended: None,
            }),
            Did::HopComplete { unit, sha } => {
                if let Some(h) = out
                    .iter_mut()
                    .rev()
                    .find(|h| &h.unit == unit && &h.sha == sha && h.ended.is_none())
                {
                    h.ended = Some(e.at);
                }
            }
            _ => {}
        }
    }
    out
}

/// The timeline, per hop, with each followed object's events.
fn render(sim: &Simulation) -> Rehearsal {
    let mut out = Rehearsal {
        timeline: crate::view::timeline(
            &crate::ui::events(sim.journal.iter(), &sim.events),
            sim.ended.as_secs(),
        ),
        ended: sim.ended,
        ..Rehearsal::default()
    };
    let hops = hops(sim);
    out.hops = hops.len();
    out.repairs = sim
        .journal
        .iter()
        .filter(|e| matches!(e.what, Did::Repaired { .. }))
        .count();
    let mut shown_notes = vec![false; sim.journal.len()];
    for h in &hops {
        let short: String = h.sha.chars().take(10).collect();
        let range = match (&h.from, &h.to) {
            (Some(f), Some(t)) if f != t => format!("{f} → {t}"),
            (_, Some(t)) => t.clone(),
            _ => String::new(),
        };
        let end = h.ended.unwrap_or(sim.ended);
        if let Some(t) = h.ended {
            out.completed.insert((h.unit.clone(), h.sha.clone()), t);
        } else {
            out.failed = true;
        }
        out.lines.push(format!(
            "{} {range} (commit {short}): {} {} → {} ({})",
            h.unit,
            if h.ended.is_some() {
                "applied"
            } else {
                "FAILED"
            },
            clock(h.started),
            clock(end),
            human(end.saturating_sub(h.started))
        ));
        let report = sim.units.get(&h.unit);
        let followed: Vec<Key> = report
            .and_then(|u| {
                let i = u.chain.steps.iter().position(|s| s.sha == h.sha)?;
                Some(u.chain.followed(i).into_iter().map(|(k, _)| k).collect())
            })
            .unwrap_or_else(|| vec![h.unit.clone()]);
        let in_window = |at: Duration| at >= h.started && at <= end;
        for child in &followed {
            let mut line = format!("    {}", child.name);
            for e in sim
                .events
                .iter()
                .filter(|e| &e.key == child && in_window(e.at))
                // lockstep's own Events: the notes below say them.
                .filter(|e| !e.reason.starts_with("Repair"))
            {
                let _ = write!(
                    line,
                    "  {} {}{}",
                    clock(e.at),
                    if e.warning { "⚠ " } else { "" },
                    e.reason
                );
            }
            let completed = sim.journal.iter().find_map(|e| match &e.what {
                Did::Complete { object } if object == child && in_window(e.at) => Some(e.at),
                _ => None,
            });
            match completed.or(h.ended) {
                Some(t) => {
                    let _ = write!(line, "  {} complete", clock(t));
                }
                None => {
                    // What the engine waits on for it.
                    let waits = report
                        .and_then(|u| u.progress.get(child))
                        .map(|p| p.describe())
                        .unwrap_or_else(|| "not seen".into());
                    let _ = write!(line, "  (not complete: {waits})");
                }
            }
            out.lines.push(line);
            for (n, e) in sim.journal.iter().enumerate() {
                let note = match &e.what {
                    Did::Repaired { object, message } if object == child => {
                        format!("repair: {message}")
                    }
                    Did::NeedsPerson {
                        object, message, ..
                    } if object == child => message.clone(),
                    _ => continue,
                };
                if in_window(e.at) && !shown_notes[n] {
                    shown_notes[n] = true;
                    out.lines.push(format!("      {} {note}", clock(e.at)));
                }
            }
        }
    }
    // What no hop shows: an apply the cluster refused, a unit off its chain.
    for (n, e) in sim.journal.iter().enumerate() {
        if let Did::NeedsPerson { unit, message, .. } = &e.what
            && !shown_notes[n]
        {
            out.lines.push(format!("{unit}: {} {message}", clock(e.at)));
        }
    }
    for (key, u) in &sim.units {
        if let Next::Blocked(m) = &u.next {
            out.lines.push(format!("{key}: blocked: {m}"));
        }
        // A hop a pre-flight gate holds (the simulated cluster has no
        // Backups unless one is put there): it would not start.
        if let Some(w) = &u.waiting {
            out.lines.push(format!("{key}: not applied, {}", w.message));
        }
        out.failed |= matches!(u.next, Next::Blocked(_))
            || u.needs_person.is_some()
            || u.stalled.is_some()
            || u.waiting.is_some();
    }
    out.total = if out.failed {
        sim.ended
    } else {
        out.completed.values().copied().max().unwrap_or_default()
    };
    out
}

fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s / 60) % 60),
    }
}

/// The same timeline as one self-contained HTML page (`--html FILE`).
pub fn html(r: &Rehearsal) -> String {
    let mut summary = vec![format!(
        "{} hop(s) in the simulated cluster, {} repair(s), predicted total {}{}",
        r.hops,
        r.repairs,
        human(r.total),
        if r.failed {
            " — NOT all hops completed"
        } else {
            ""
        }
    )];
    if r.refused > 0 {
        summary.push(format!(
            "{} refused commit(s) in the range are not rehearsed (see lockstep check)",
            r.refused
        ));
    }
    summary.extend(r.lines.iter().filter(|l| !l.starts_with(' ')).cloned());
    crate::ui::html::standalone(
        "lockstep rehearsal",
        &summary,
        &r.timeline,
        r.ended.as_secs(),
    )
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
    use crate::sim::JobKind;

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
        // Bounded: years of virtual time cost minutes of real time.
        assert!(parse_fault("nova:roll-stall=720h").is_ok());
        let e = parse_fault("nova:roll-stall=999999h")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 720h"), "{e}");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
