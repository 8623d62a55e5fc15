//! `lockstep rehearse --plan`: the predicted schedule of the repository's
//! plans. The real daemon runs on a throwaway clone against the simulated
//! operator in virtual time (from `start`), with any injected faults: it
//! writes the plan's hop commits, judges and applies them, follows and
//! repairs them, and the rehearsal prints when each wave starts, each
//! object's phases and completion, repairs and holds, and the total.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::cluster::memory::MemoryCluster;
use crate::daemon::{Daemon, Options, deliver_now};
use crate::escape::Escaped;
use crate::forge::AnyForge;
use crate::forge::delivery::{RetryPolicy, StatusQueue};
use crate::forge::notes::Notes;
use crate::metrics::Metrics;
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
}

fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("+{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Rehearses the plans of `rev` in `repo` (which is not touched: the run
/// happens on a clone).
pub async fn rehearse(
    repo: &Path,
    branch: &str,
    faults: Vec<Fault>,
    start: Timestamp,
) -> Result<Schedule, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let clone = tmp.path().join("fleet");
    {
        let src = repo.to_string_lossy().into_owned();
        let mut b = git2::build::RepoBuilder::new();
        b.branch(branch);
        b.clone(&src, &clone)
            .map_err(|e| format!("cloning {}: {}", repo.display(), e.message()))?;
    }
    let mut world = World::new(Params::default());
    world.faults = faults;
    let mem = MemoryCluster::new(world);
    let forge = AnyForge::Notes(Notes::open(&clone).map_err(|e| e.to_string())?);
    let queue = StatusQueue::new(100_000);
    let source = Source::open(Origin::Local(clone.clone()), branch).map_err(|e| e.to_string())?;
    let mut d = Daemon::new(
        Options {
            cluster_name: "rehearsal".into(),
            branch: branch.to_owned(),
            // No host to ask: a proposed wave is rehearsed as merged at once.
            plan_merge_proposals: true,
            ..Options::default()
        },
        source,
        mem.clone(),
        Some(mem.clone()),
        queue.clone(),
        Arc::new(Metrics::new()),
    );
    d.set_clock_base(start);
    let metrics = Metrics::new();
    let mut out = Schedule::default();
    let repo_git = git2::Repository::open(&clone).map_err(|e| e.message().to_owned())?;
    // The head before the first pass: a wave that may start at once is
    // written by that pass and must be reported like any later one.
    let mut seen_head = repo_git.refname_to_id(&format!("refs/heads/{branch}")).ok();
    let mut phases: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut first_plan_pass = None;
    let mut plan_status: BTreeMap<String, String> = BTreeMap::new();
    let mut finished = false;
    for _ in 0..200_000 {
        let pass = d.pass().await;
        let _ = deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await;
        let now = mem.now();
        // New plan commits.
        if let Ok(head) = repo_git.refname_to_id(&format!("refs/heads/{branch}"))
            && seen_head != Some(head)
        {
            if seen_head.is_some()
                && let Ok(c) = repo_git.find_commit(head)
                && let Some(summary) = c.summary().ok().flatten()
            {
                out.commits += 1;
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
                    .push(format!("{} {summary}: {}", clock(now), objects.join(", ")));
            }
            seen_head = Some(head);
        }
        if first_plan_pass.is_none() {
            first_plan_pass = Some(now);
        }
        // Per-object phases.
        if let Ok(w) = mem.world_snapshot() {
            for (k, phase) in w {
                let last = phases.entry(k.clone()).or_insert(None);
                if *last != phase {
                    if let Some(p) = &phase {
                        out.lines.push(format!("{} {k}: {p}", clock(now)));
                    } else if last.is_some() {
                        out.lines.push(format!("{} {k}: complete", clock(now)));
                    }
                    *last = phase;
                }
            }
        }
        for (name, desc) in d.plan_descriptions() {
            if plan_status.get(&name) != Some(&desc) {
                out.lines
                    .push(format!("{} plan {name}: {desc}", clock(now)));
                plan_status.insert(name, desc);
            }
        }
        let busy = mem.step(Duration::from_secs(60)).unwrap_or(false);
        if pass.busy && !busy {
            mem.advance(Duration::from_secs(60));
        }
        if !pass.busy && !busy {
            finished = true;
            break;
        }
    }
    out.total = mem
        .now()
        .saturating_sub(first_plan_pass.unwrap_or_default());
    out.failed = !finished
        || plan_status.is_empty()
        || plan_status.values().any(|d| !d.starts_with("complete"));
    Ok(out)
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
