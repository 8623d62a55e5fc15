//! `lockstep plan status`: where each plan of a tree stands, from Git alone
//! (which objects' hop commits exist, which `mode: propose` branches exist
//! and whether they are merged) and the statuses lockstep wrote as git notes
//! (the plan's own status, per cluster). It asks no Git host: a proposal's
//! review state lives there, its branch is what a fetch brings here.

use std::fmt::Write as _;
use std::path::Path;

use crate::escape::Escaped;
use crate::git::{Error, GitRepo, Resolved};

use std::collections::BTreeMap;

use crate::release::Release;

use super::exec;
use super::schedule;
use super::validate;

/// Renders the plans of `rev`'s tree for people. Plan, wave, file and
/// branch names and the notes' lines come from Git: every line is escaped
/// as a whole ([`crate::escape`]), so none of them can add or hide a line.
pub fn render(repo_path: &Path, rev: &str, prefixes: &[String]) -> Result<String, Error> {
    let repo = GitRepo::open(repo_path)?;
    let head = match repo.resolve(rev)? {
        Resolved::Commit(c) => c,
        Resolved::Tree(_) => {
            return Err(Error::UnknownRevision {
                rev: rev.to_owned(),
                path: repo_path.to_owned(),
                why: "names a tree, not a commit; plans are read at a commit".into(),
            });
        }
    };
    let tp = exec::read(
        &repo,
        head,
        prefixes,
        crate::manifest::DEFAULT_MAX_FILE_BYTES,
    )?;
    let mut out = String::new();
    // A plan that does not read is shown, not dropped: its commit was
    // refused, and a person looking for it needs to know why.
    for e in &tp.unreadable {
        let _ = writeln!(
            out,
            "{}",
            Escaped(format_args!(
                "plan {} ({}:{}): refused: {} (PlanInvalid)",
                e.name.as_deref().unwrap_or("(no name)"),
                e.file,
                e.line,
                e.message
            ))
        );
    }
    if tp.plans.is_empty() {
        if tp.unreadable.is_empty() {
            let _ = writeln!(out, "no UpgradePlan in {}", Escaped(rev));
        }
        return Ok(out);
    }
    let all: Vec<super::Located> = tp.plans.iter().map(|(p, _)| p.clone()).collect();
    for (p, sha) in &tp.plans {
        let spec = &p.plan.spec;
        let _ = writeln!(
            out,
            "{}",
            Escaped(format_args!(
                "plan {} ({}:{}) to {}{}",
                p.plan.metadata.name,
                p.file,
                p.line,
                spec.to,
                if spec.paused { " [paused]" } else { "" }
            ))
        );
        for r in validate::validate_in_effect(p, &tp.units, &all) {
            let _ = writeln!(
                out,
                "{}",
                Escaped(format_args!(
                    "  refused: {} ({})",
                    r.message,
                    r.reason.as_str()
                ))
            );
        }
        // The plan's statuses, as the daemons wrote them.
        if let Ok(oid) = git2::Oid::from_str(sha)
            && let Ok(note) = repo.raw().find_note(Some("refs/notes/lockstep"), oid)
        {
            for line in note.message().unwrap_or("").lines() {
                if line.contains("/plan/") {
                    let _ = writeln!(out, "  {}", Escaped(line));
                }
            }
        }
        let waves = validate::resolve(&p.plan, &tp.units);
        // The hop Git is on: the lowest release some object's commit has
        // not reached yet (Git alone: a committed hop counts as taken).
        let release = |k: &crate::kind::Key| {
            tp.units
                .iter()
                .find(|u| &u.key == k)
                .and_then(|u| Release::parse_strict(u.release.as_deref()?).ok())
        };
        let positions: BTreeMap<_, _> = waves
            .iter()
            .flatten()
            .filter_map(|k| {
                Some((
                    k.clone(),
                    schedule::Position {
                        release: release(k)?,
                        complete: true,
                        failed: None,
                        stalled: None,
                    },
                ))
            })
            .collect();
        let hop = Release::parse_strict(&spec.to)
            .ok()
            .and_then(|to| Some((to, tp.origin(p)?)))
            .map(|(to, origin)| {
                schedule::current_hop(to, Some(origin), &positions)
                    .map(|(h, _)| h)
                    .unwrap_or(schedule::Hop {
                        from: to.prev().unwrap_or(to),
                        to,
                        index: origin.hops_to(to).max(1) - 1,
                        count: origin.hops_to(to).max(1),
                    })
            });
        let target = match hop {
            Some(h) if h.count > 1 => {
                let _ = writeln!(
                    out,
                    "{}",
                    Escaped(format_args!("  {} committed so far", h.describe()))
                );
                Some(h.to)
            }
            _ => Release::parse_strict(&spec.to).ok(),
        };
        let target_text = target.map_or_else(|| spec.to.clone(), |t| t.to_string());
        for (i, (w, keys)) in spec.waves.iter().zip(&waves).enumerate() {
            let at: Vec<_> = keys
                .iter()
                .filter(|k| release(k).zip(target).is_some_and(|(r, t)| r >= t))
                .collect();
            let _ = writeln!(
                out,
                "{}",
                Escaped(format_args!(
                    "  wave {}/{} {} (maxParallel {}, soak {}): {}/{} committed at {}",
                    i + 1,
                    spec.waves.len(),
                    w.name,
                    w.max_parallel,
                    w.soak,
                    at.len(),
                    keys.len(),
                    target_text
                ))
            );
            let branch =
                super::propose::hop_branch(&p.plan.metadata.name, i, &target_text, &spec.to);
            for line in proposals(&repo, head, &branch, rev) {
                let _ = writeln!(out, "    {}", Escaped(line));
            }
            for k in keys {
                let release = tp
                    .units
                    .iter()
                    .find(|u| &u.key == k)
                    .and_then(|u| u.release.clone())
                    .unwrap_or_else(|| "?".into());
                let mark = if at.contains(&k) { "✓" } else { "·" };
                let _ = writeln!(
                    out,
                    "{}",
                    Escaped(format_args!("    {mark} {k} at {release}"))
                );
            }
        }
    }
    Ok(out)
}

/// The proposal branches of a wave (of the hop Git is on) that this
/// repository knows, by the branch's name: local
/// branches (a daemon's cache fetches them so) and remote-tracking ones (a
/// user's `git fetch` brings them), each with its tip and whether `head`
/// already contains it. A squash merge shows as not merged; the wave's
/// "committed" count still tells.
fn proposals(repo: &GitRepo, head: git2::Oid, branch: &str, rev: &str) -> Vec<String> {
    let raw = repo.raw();
    let mut out = Vec::new();
    for glob in [
        format!("refs/heads/{branch}"),
        format!("refs/remotes/*/{branch}"),
    ] {
        let Ok(refs) = raw.references_glob(&glob) else {
            continue;
        };
        for r in refs.flatten() {
            let (Ok(name), Ok(tip)) = (r.shorthand(), r.peel_to_commit()) else {
                continue;
            };
            let merged =
                tip.id() == head || raw.graph_descendant_of(head, tip.id()).unwrap_or(false);
            let id = tip.id().to_string();
            out.push(format!(
                "proposed on {name} at {}{}",
                &id[..7],
                if merged {
                    format!(", merged into {rev}")
                } else {
                    format!(", not in {rev}")
                }
            ));
        }
    }
    out
}
