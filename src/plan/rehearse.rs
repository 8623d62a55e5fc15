//! `lockstep rehearse --plan`: the predicted schedule of the repository's
//! plans. The daemon's own engine (`daemon::simulate`) runs on a throwaway
//! clone against the simulated operator in virtual time (from `start`),
//! with any injected faults: it writes the plan's hop commits, judges and
//! applies them, follows and repairs them. This module renders its journal:
//! when each wave starts, each object's phases and completion, each hop's
//! end, repairs and holds, and the total.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;

use crate::cluster::memory::MemoryCluster;
use crate::daemon::{self, Did, Options};
use crate::escape::Escaped;
use crate::kind::Key;
use crate::sim::{Fault, Params, World};
use crate::source::{Origin, Source};

/// The prediction.
#[derive(Debug, Default)]
pub struct Schedule {
    pub lines: Vec<String>,
    pub total: Duration,
    pub commits: usize,
    /// A plan held (a failure a person must look at) or did not finish.
    pub failed: bool,
    /// Each hop's completion, `(unit, commit) → virtual time`.
    pub completed: BTreeMap<(Key, String), Duration>,
    /// The hops as the dashboard draws them (`--html`).
    pub timeline: Vec<crate::view::Hop>,
    pub ended: Duration,
}

fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("+{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Why a plan rehearsal could not run.
#[derive(Debug, thiserror::Error)]
pub enum RehearseError {
    #[error("creating a temporary directory for the clone: {0}")]
    Temp(#[source] std::io::Error),
    #[error(transparent)]
    Git(#[from] crate::git::Error),
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error(transparent)]
    Seed(#[from] daemon::SeedError),
    #[error(transparent)]
    UnknownFault(#[from] crate::sim::UnknownFaultObject),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
}

/// Rehearses the plans of `branch` in `repo` (which is not touched: the run
/// happens on a clone).
pub async fn rehearse(
    repo: &Path,
    branch: &str,
    faults: Vec<Fault>,
    start: Timestamp,
) -> Result<Schedule, RehearseError> {
    let tmp = tempfile::tempdir().map_err(RehearseError::Temp)?;
    let clone = tmp.path().join("fleet");
    {
        let src = repo.to_string_lossy().into_owned();
        let mut b = git2::build::RepoBuilder::new();
        b.branch(branch);
        b.clone(&src, &clone).map_err(|e| {
            crate::git::Error::classify(
                &e,
                format!("cloning branch {branch:?} of {}", repo.display()),
                repo,
            )
        })?;
    }
    // Without a plan the engine still rehearses the branch's own commits,
    // as the daemon would apply them; the output says so first, so it is not
    // read as a plan's timeline.
    let has_plans = {
        let git = crate::git::GitRepo::open(&clone)?;
        match git.resolve("HEAD")? {
            crate::git::Resolved::Commit(head) => {
                !super::exec::read(&git, head, &[], crate::manifest::DEFAULT_MAX_FILE_BYTES)?
                    .plans
                    .is_empty()
            }
            crate::git::Resolved::Tree(_) => false,
        }
    };
    let mut world = World::new(Params::default());
    world.faults = faults;
    let world = MemoryCluster::new(world);
    let source = Source::open(Origin::Local(clone.clone()), branch)?;
    let opts = Options {
        cluster_name: "rehearsal".into(),
        branch: branch.to_owned(),
        // No host to ask: a proposed wave is rehearsed as merged at once.
        plan_merge_proposals: true,
        ..Options::default()
    };
    if let Some(head) = daemon::Repo::head(&source) {
        daemon::seed_simulation(&world, &clone, head, &opts)?;
    }
    let sim = daemon::simulate(source, world.clone(), opts, start).await;
    if let Some(e) = world.world()?.fault_without_object() {
        return Err(e.into());
    }
    let git = crate::git::GitRepo::open(&clone)?;
    let git = git.raw();
    let mut out = Schedule {
        timeline: crate::view::timeline(
            &crate::ui::events(sim.journal.iter(), &sim.events),
            sim.ended.as_secs(),
        ),
        ended: sim.ended,
        ..Schedule::default()
    };
    if !has_plans {
        out.lines.push(format!(
            "no UpgradePlan in {}: rehearsing the branch's own commits as the daemon would apply them (`lockstep plan status` lists plans)",
            branch
        ));
    }
    let mut applied: BTreeMap<(Key, String), (Option<String>, Option<String>)> = BTreeMap::new();
    let mut plans: BTreeMap<String, String> = BTreeMap::new();
    for e in &sim.journal {
        let at = clock(e.at);
        match &e.what {
            Did::PlanCommit { sha } => {
                let Some(c) = git2::Oid::from_str(sha)
                    .ok()
                    .and_then(|oid| git.find_commit(oid).ok())
                else {
                    continue;
                };
                out.commits += 1;
                let summary = c.summary().ok().flatten().unwrap_or("").to_owned();
                let objects: Vec<String> = c
                    .body()
                    .ok()
                    .flatten()
                    .unwrap_or("")
                    .lines()
                    .filter(|l| l.trim_start().starts_with("- "))
                    .map(|l| l.trim().trim_start_matches("- ").to_owned())
                    .collect();
                out.lines
                    .push(format!("{at} {summary}: {}", objects.join(", ")));
            }
            Did::Applied {
                unit,
                sha,
                from,
                to,
                reassert,
            } => {
                if !reassert {
                    applied.insert((unit.clone(), sha.clone()), (from.clone(), to.clone()));
                }
            }
            Did::Phase {
                object,
                phase: Some(p),
            } => out.lines.push(format!("{at} {object}: {p}")),
            Did::Phase { phase: None, .. } => {}
            Did::Complete { object } => out.lines.push(format!("{at} {object}: complete")),
            Did::HopComplete { unit, sha } => {
                let short: String = sha.chars().take(10).collect();
                let range = match applied.get(&(unit.clone(), sha.clone())) {
                    Some((Some(f), Some(t))) if f != t => format!(" {f} → {t}"),
                    Some((_, Some(t))) => format!(" {t}"),
                    _ => String::new(),
                };
                out.completed.insert((unit.clone(), sha.clone()), e.at);
                out.lines
                    .push(format!("{at} {unit}{range} (commit {short}): hop complete"));
            }
            Did::Repaired { object, message } => {
                out.lines.push(format!("{at} {object}: repair: {message}"));
            }
            Did::NeedsPerson {
                object, message, ..
            } => out.lines.push(format!("{at} {object}: {message}")),
            // The operator's own Events say it (the text shows repairs).
            Did::Failed { .. } => {}
            Did::PlanDecision { plan, description } => {
                out.lines.push(format!("{at} plan {plan}: {description}"));
                plans.insert(plan.clone(), description.clone());
            }
        }
    }
    out.total = sim.ended;
    // A hop a pre-flight gate holds would not start.
    for (key, u) in &sim.units {
        if let Some(w) = &u.waiting {
            out.lines.push(format!("{key}: not applied, {}", w.message));
        }
    }
    // A plan that did not complete, or a hop that waits on a person or a
    // pre-flight gate (a repository without plans is judged by its hops
    // alone).
    out.failed = plans.values().any(|d| !d.starts_with("complete"))
        || sim.units.values().any(|u| {
            u.needs_person.is_some()
                || u.stalled.is_some()
                || u.waiting.is_some()
                || matches!(u.next, crate::rollout::Next::Blocked(_))
        });
    Ok(out)
}

/// The schedule and its hops as one self-contained HTML page (`--html`).
pub fn html(s: &Schedule, start: Timestamp) -> String {
    let mut summary = vec![format!(
        "plan rehearsal from {start}: {} plan commit(s), total {}{}",
        s.commits,
        clock(s.total),
        if s.failed {
            " — a plan held or did not finish"
        } else {
            ""
        }
    )];
    summary.extend(s.lines.iter().cloned());
    crate::ui::html::standalone(
        "lockstep plan rehearsal",
        &summary,
        &s.timeline,
        s.ended.as_secs(),
    )
}

/// The report for people.
pub fn text(s: &Schedule, start: Timestamp) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "plan rehearsal from {start} (virtual time; the simulated operator's phase durations):"
    );
    // Lines quote commit summaries and plan, wave and file names from Git.
    for l in &s.lines {
        let _ = writeln!(t, "  {}", Escaped(l));
    }
    let _ = writeln!(
        t,
        "total {} ({} hop commit{}){}",
        clock(s.total).trim_start_matches('+'),
        s.commits,
        if s.commits == 1 { "" } else { "s" },
        if s.failed {
            "; the plan did not complete (see above)"
        } else {
            ""
        }
    );
    t
}
