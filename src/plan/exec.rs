//! The daemon's side of plans, Git first: read the plans and the units of
//! the head tree, decide per plan ([`super::schedule::decide`]), and when a
//! wave may start, write its hop commit on the watched branch (`mode:
//! commit`) or hand the daemon a [`super::propose::Request`] (`mode:
//! propose`: the branch push and the host's API are the daemon's, off this
//! synchronous path). The normal loop then judges and applies the commit
//! like any other once it is on the watched branch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use git2::Oid;
use jiff::Timestamp;

use crate::git::{EntryKind, GitRepo, Store as _};
use crate::kind::Key;
use crate::manifest;
use crate::release::Release;

use crate::source::PushTarget;

use super::propose::{Object, Request};
use super::schedule::{self, Decision, ObjectView, Position};
use super::validate::{self, Unit};
use super::writeback::{self, Author, Bump};
use super::{KIND, Located, PlanMode};

/// The plans of a tree, with the units they can select and the commit that
/// last changed each plan (its status goes there).
#[derive(Clone, Debug, Default)]
pub struct TreePlans {
    pub plans: Vec<(Located, String)>,
    pub units: Vec<Unit>,
    /// Each plan's origin, by (file, name): the lowest release of its
    /// selected objects in the commit that last changed the plan. A
    /// fast-forward counts its hops from there ("hop 2/3").
    pub origins: BTreeMap<(String, String), Release>,
    /// Each plan's first origin, by (file, name): the lowest release of its
    /// selected objects in the commit that added the plan's file. Objects
    /// that have moved past it since took a hop while the plan was there,
    /// so the next hop soaks after it whatever the count since the last
    /// edit says ([`run`]).
    pub first_origins: BTreeMap<(String, String), Release>,
    /// The releases of the judged range's base tree ([`given`]), filled in
    /// by the daemon, which knows the range.
    pub given: BTreeMap<Key, String>,
    /// Plan documents that do not read (the gate refuses their commit as
    /// `PlanInvalid`); `lockstep plan status` shows them.
    pub unreadable: Vec<super::PlanError>,
    /// The tree could not be read (Git failed: an I/O error, a pack being
    /// replaced): which plans it holds is unknown, so the daemon holds
    /// every hop, and reads the plans again every pass until they read.
    pub error: Option<String>,
}

impl TreePlans {
    /// The origin of a plan (see [`TreePlans::origins`]).
    pub fn origin(&self, p: &Located) -> Option<Release> {
        self.origins
            .get(&(p.file.to_string(), p.plan.metadata.name.clone()))
            .copied()
    }

    /// The first origin of a plan (see [`TreePlans::first_origins`]).
    pub fn first_origin(&self, p: &Located) -> Option<Release> {
        self.first_origins
            .get(&(p.file.to_string(), p.plan.metadata.name.clone()))
            .copied()
    }
}

/// The releases of the units `plans` select, as `tree` has them (only the
/// files that hold them at the head are read; a unit moved or missing there
/// is left out).
fn releases_in(
    repo: &GitRepo,
    tree: Oid,
    plans: &[&super::UpgradePlan],
    units: &[Unit],
    max: usize,
) -> BTreeMap<Key, String> {
    let keys: std::collections::BTreeSet<Key> = plans
        .iter()
        .flat_map(|p| validate::resolve(p, units).into_iter().flatten())
        .collect();
    let files: std::collections::BTreeSet<String> = units
        .iter()
        .filter(|u| keys.contains(&u.key))
        .map(|u| u.file.to_string())
        .collect();
    let raw = repo.raw();
    let Ok(tree) = raw.find_tree(tree) else {
        return BTreeMap::new();
    };
    let mut docs = Vec::new();
    for f in &files {
        let Ok(entry) = tree.get_path(Path::new(f)) else {
            continue;
        };
        let Ok(blob) = raw.find_blob(entry.id()) else {
            continue;
        };
        docs.extend(manifest::parse_file(f, blob.content(), max).documents);
    }
    validate::units(&docs)
        .into_iter()
        .filter(|u| keys.contains(&u.key))
        .filter_map(|u| Some((u.key, u.release?)))
        .collect()
}

/// The lowest release of the units `plan` selects, as the tree of commit
/// `at` has them.
fn origin(
    repo: &GitRepo,
    at: &str,
    plan: &super::UpgradePlan,
    units: &[Unit],
    max: usize,
) -> Option<Release> {
    let tree = repo.commit(Oid::from_str(at).ok()?).ok()?.tree;
    releases_in(repo, tree, &[plan], units, max)
        .values()
        .filter_map(|r| Release::parse_strict(r).ok())
        .min()
}

/// The releases the daemon takes as given for the units `tp`'s plans
/// select: theirs in `base`, the tree its judged range starts from (the
/// empty tree, so none, unless it runs with `--since`). A selected unit
/// with no unit report (no accepted commit of the range touched it) counts
/// complete only at its release here: one that Git has elsewhere got there
/// by a commit lockstep did not accept, which it never applied.
pub fn given(
    repo: &GitRepo,
    base: Option<Oid>,
    tp: &TreePlans,
    max: usize,
) -> BTreeMap<Key, String> {
    let Some(base) = base else {
        return BTreeMap::new();
    };
    let plans: Vec<&super::UpgradePlan> = tp.plans.iter().map(|(p, _)| &p.plan).collect();
    if plans.is_empty() {
        return BTreeMap::new();
    }
    releases_in(repo, base, &plans, &tp.units, max)
}

/// Reads the plans of `head`'s tree (files mentioning the kind), and, when
/// there are any, every unit with its labels.
pub fn read(
    repo: &GitRepo,
    head: Oid,
    prefixes: &[String],
    max: usize,
) -> Result<TreePlans, crate::git::Error> {
    let tree = repo.commit(head)?.tree;
    let files = repo.files(tree, prefixes, manifest::is_manifest_path)?;
    let mut plans = Vec::new();
    let mut unreadable = Vec::new();
    let mut texts: Vec<(String, Oid)> = Vec::new();
    for (path, e) in files.iter().filter(|(_, e)| e.kind == EntryKind::File) {
        let blob = repo.blob(e.oid)?;
        if memchr::memmem::find(blob.content(), KIND.as_bytes()).is_some() {
            let (found, bad) = super::parse_plans(path, &String::from_utf8_lossy(blob.content()));
            plans.extend(found);
            unreadable.extend(bad);
        }
        texts.push((path.clone(), e.oid));
    }
    if plans.is_empty() {
        return Ok(TreePlans {
            unreadable,
            ..TreePlans::default()
        });
    }
    let mut docs = Vec::new();
    for (path, oid) in &texts {
        let blob = repo.blob(*oid)?;
        docs.extend(manifest::parse_file(path, blob.content(), max).documents);
    }
    let units = validate::units(&docs);
    let changes: Vec<(Located, (String, String))> = plans
        .into_iter()
        .map(|p| {
            let at = changes_of(repo, head, &p.file)
                .unwrap_or_else(|| (head.to_string(), head.to_string()));
            (p, at)
        })
        .collect();
    let (mut origins, mut first_origins) = (BTreeMap::new(), BTreeMap::new());
    for (p, (last, first)) in &changes {
        let key = (p.file.to_string(), p.plan.metadata.name.clone());
        let at_last = origin(repo, last, &p.plan, &units, max);
        // A plan never edited since its file was added: the same commit.
        let at_first = if first == last {
            at_last
        } else {
            origin(repo, first, &p.plan, &units, max)
        };
        if let Some(o) = at_last {
            origins.insert(key.clone(), o);
        }
        if let Some(o) = at_first {
            first_origins.insert(key, o);
        }
    }
    let plans = changes
        .into_iter()
        .map(|(p, (last, _))| (p, last))
        .collect();
    Ok(TreePlans {
        plans,
        units,
        origins,
        first_origins,
        given: BTreeMap::new(),
        unreadable,
        error: None,
    })
}

/// Whether commit `sha` adds or changes a file mentioning the plan kind (a
/// push that touches no plan need not re-read the tree's plans).
pub fn touched(repo: &GitRepo, sha: &str, prefixes: &[String]) -> bool {
    let Ok(oid) = Oid::from_str(sha) else {
        return true;
    };
    let Ok(c) = repo.commit(oid) else { return true };
    let parent = repo
        .first_parent(oid)
        .ok()
        .flatten()
        .and_then(|p| repo.commit(p).ok())
        .map(|p| p.tree);
    // The checked walk: libgit2's diff panics on a tree mode Git never
    // writes (git2's `DiffFile::mode`), and a commit refused for one must
    // not take the pass down. A tree that does not read counts as touched.
    let Ok(changes) = repo.changed_files_walk(parent, c.tree, prefixes, manifest::is_manifest_path)
    else {
        return true;
    };
    changes.iter().any(|ch| {
        ch.new
            .as_ref()
            .filter(|e| e.kind == EntryKind::File)
            .is_some_and(|e| {
                repo.blob(e.oid)
                    .map(|b| memchr::memmem::find(b.content(), KIND.as_bytes()).is_some())
                    .unwrap_or(true)
            })
            || ch.old.is_some() && ch.new.is_none()
    })
}

/// The newest first-parent commit that changed `file`, and the one that
/// added it (where its history along first parents begins): one walk.
fn changes_of(repo: &GitRepo, head: Oid, file: &str) -> Option<(String, String)> {
    let raw = repo.raw();
    let blob_at = |c: &git2::Commit<'_>| {
        c.tree()
            .ok()
            .and_then(|t| t.get_path(Path::new(file)).ok().map(|e| e.id()))
    };
    let mut cur = raw.find_commit(head).ok()?;
    let mut here = blob_at(&cur);
    let mut last = None;
    // One lookup per commit (the parent's, handed on), none for a commit
    // that changed no file.
    loop {
        let Ok(parent) = cur.parent(0) else {
            let at = cur.id().to_string();
            return Some((last.unwrap_or_else(|| at.clone()), at));
        };
        let before = if parent.tree_id() == cur.tree_id() {
            here
        } else {
            blob_at(&parent)
        };
        if last.is_none() && before != here {
            last = Some(cur.id().to_string());
        }
        if before.is_none() {
            let at = cur.id().to_string();
            return Some((last.unwrap_or_else(|| at.clone()), at));
        }
        here = before;
        cur = parent;
    }
}

/// How the daemon writes plan commits.
#[derive(Clone, Debug)]
pub struct Writer {
    pub repo: PathBuf,
    pub branch: String,
    pub author: Author,
    pub signing_key: Option<PathBuf>,
    /// Push the branch here after committing (a remote source's cache),
    /// with the source's credentials.
    pub push: Option<PushTarget>,
    /// Write propose-mode waves as commits, as if each request were merged
    /// the moment it was opened: for rehearsals, which have no host.
    pub merge_proposals: bool,
}

/// One plan's state for a pass.
#[derive(Clone, Debug)]
pub struct PlanPass {
    pub name: String,
    pub sha: String,
    pub decision: Decision,
    pub description: String,
    /// The commit written this pass, if any.
    pub wrote: Option<Oid>,
    /// A wave to propose (`mode: propose`): the daemon writes its branch
    /// and opens the request.
    pub propose: Option<Request>,
    /// The hop commit could not be written or pushed: the plan's status
    /// says why, and a bounded run ends with it rather than retrying for
    /// ever (a continuous run retries every pass).
    pub trouble: bool,
}

/// What a plan holds a hop of a unit it selects to, at the apply: its
/// maintenance windows and its gates.
#[derive(Clone, Debug)]
pub struct Hold {
    pub plan: String,
    /// The plan's release (`spec.to`), when it parses. A plan governs the
    /// hops up to it: a finished plan left in the tree must not hold the
    /// next plan's hops of the same objects to its own windows, which may
    /// never be open together with the next plan's.
    pub to: Option<Release>,
    /// The plan's windows, or why they do not parse: then no hop it
    /// governs can be known to fall inside one, and it waits.
    pub windows: Result<Vec<super::window::Schedule>, String>,
    pub gates: Vec<super::Gate>,
}

impl Hold {
    /// Whether this plan governs a hop to `release`: every hop when the
    /// plan's release does not parse (an invalid plan still holds, closed),
    /// otherwise those that do not go past it.
    pub fn governs(&self, release: Option<&str>) -> bool {
        match (&self.to, release.map(Release::parse_strict)) {
            (Some(to), Some(Ok(r))) => r <= *to,
            _ => true,
        }
    }
}

/// The maintenance windows and gates each unit must wait for before a hop
/// of it is applied: those of every plan with windows or gates that selects
/// it. A plan writes a wave's commits inside a window and while its gates
/// hold, but the apply comes a pass later, or hours later when a pre-flight
/// gate holds it, or days later when a person merges the wave's pull
/// request; the daemon checks both again then (`daemon::units`), so nothing
/// a plan governs starts after its window closed or while its gate fails.
pub fn holds(tp: &TreePlans) -> BTreeMap<Key, Vec<Hold>> {
    let mut out: BTreeMap<Key, Vec<Hold>> = BTreeMap::new();
    for (p, _) in &tp.plans {
        // A plan that a later commit made invalid without touching it (a
        // selected plane removed, a label changed) still holds its units
        // to its windows and gates: an invalid plan runs nothing, and
        // lifting them would let a hand commit through at any hour.
        if p.plan.spec.windows.is_empty() && p.plan.spec.gates.is_empty() {
            continue;
        }
        let hold = Hold {
            plan: p.plan.metadata.name.clone(),
            to: Release::parse_strict(&p.plan.spec.to).ok(),
            windows: super::window::parse_all(&p.plan.spec.windows).map_err(|e| e.to_string()),
            gates: p.plan.spec.gates.clone(),
        };
        for k in validate::resolve(&p.plan, &tp.units).into_iter().flatten() {
            out.entry(k).or_default().push(hold.clone());
        }
    }
    out
}

/// Decides every valid plan of the tree and acts on it. `view(key)` says
/// where the cluster has a unit (complete at Git's release, failed).
#[allow(clippy::too_many_arguments)]
pub fn run(
    tp: &TreePlans,
    head: Oid,
    now: Timestamp,
    view: impl Fn(&Key, &Unit) -> ObjectView,
    gates: impl Fn(&super::Gate) -> Result<(), String>,
    completed_at: &mut BTreeMap<(String, usize), Timestamp>,
    writer: &Writer,
    refused_head: Option<&str>,
) -> Vec<PlanPass> {
    let mut out = Vec::new();
    let all: Vec<Located> = tp.plans.iter().map(|(p, _)| p.clone()).collect();
    let by_key: BTreeMap<&Key, &Unit> = tp.units.iter().map(|u| (&u.key, u)).collect();
    let mut tip = head;
    for (p, sha) in &tp.plans {
        let name = p.plan.metadata.name.clone();
        let refusals = validate::validate_in_effect(p, &tp.units, &all);
        if let Some(r) = refusals.first() {
            out.push(PlanPass {
                name,
                sha: sha.clone(),
                decision: Decision::Held {
                    wave: 0,
                    reason: r.message.clone(),
                },
                description: format!("refused: {} ({})", r.message, r.reason.as_str()),
                wrote: None,
                propose: None,
                trouble: false,
            });
            continue;
        }
        let waves = validate::resolve(&p.plan, &tp.units);
        let Ok(target) = Release::parse_strict(&p.plan.spec.to) else {
            continue;
        };
        // Where each object stands: Git's release (validation saw that it
        // parses) and whether the cluster completed it. One past the plan's
        // release is done with this plan, wherever its later hop stands.
        let mut positions = BTreeMap::new();
        for k in waves.iter().flatten() {
            if let Some(u) = by_key.get(k)
                && let Some(release) = u
                    .release
                    .as_deref()
                    .and_then(|r| Release::parse_strict(r).ok())
            {
                let v = view(k, u);
                positions.insert(
                    k.clone(),
                    Position {
                        release,
                        complete: v.complete || release > target,
                        failed: v.failed.filter(|_| release <= target),
                        stalled: v.stalled.filter(|_| release <= target),
                    },
                );
            }
        }
        // The hop the plan is on (a one-hop plan has one); none: complete.
        let Some((hop, objects)) = schedule::current_hop(target, tp.origin(p), &positions) else {
            let decision = Decision::Complete;
            out.push(PlanPass {
                name,
                sha: sha.clone(),
                description: decision.describe(&p.plan),
                decision,
                wrote: None,
                propose: None,
                trouble: false,
            });
            continue;
        };
        let hop_to = hop.to.to_string();
        // Soaks are remembered per hop: `plan@release`.
        let clock = format!("{name}@{hop_to}");
        // Note when each wave is first seen complete (for the soak).
        let mut completed: BTreeMap<usize, Timestamp> = BTreeMap::new();
        for (i, keys) in waves.iter().enumerate() {
            let done = keys
                .iter()
                .all(|k| objects.get(k).is_some_and(|v| v.started && v.complete));
            if done {
                let at = *completed_at.entry((clock.clone(), i)).or_insert(now);
                completed.insert(i, at);
            } else {
                // Not done (an object joined the wave, or one failed): the
                // soak counts again from when it is done again.
                completed_at.remove(&(clock.clone(), i));
            }
        }
        // The previous hop completed when this one was first seen. There
        // was one when the plan's history since its last edit shows it,
        // when its objects stood below this hop's start when the plan's
        // file was added, or when this run saw a wave of it complete: an
        // edit (a pause and a resume) restarts the count of hops, never the
        // soak between them, and neither does a restart or a plan of one
        // wave (whose hop moves on in the pass that sees that wave done).
        let previous_clock = format!("{name}@{}", hop.from);
        let ran_before = completed_at.keys().any(|(c, _)| *c == previous_clock);
        let moved_since = tp.first_origin(p).is_some_and(|o| o < hop.from);
        let previous_hop = (hop.index > 0 || ran_before || moved_since).then(|| {
            *completed_at
                .entry((previous_clock, usize::MAX))
                .or_insert(now)
        });
        let windows = super::window::parse_all(&p.plan.spec.windows).unwrap_or_default();
        let gate = p.plan.spec.gates.iter().try_for_each(&gates);
        let decision = schedule::decide(&schedule::Input {
            plan: &p.plan,
            waves: &waves,
            objects: &objects,
            windows: &windows,
            completed_at: &completed,
            gates: gate,
            now,
            previous_hop,
        });
        // A plan commit is written on top of the head, and judged against
        // the last accepted state: on a refused head (an untrusted commit,
        // a policy's block) its diff would carry what was refused, under
        // lockstep's name and signature. Nothing is written then, and the
        // plan holds until a person moves the branch on: waiting as
        // "upgrading" for a hop whose commit was refused as a whole (no
        // object of it judged) would never end.
        let decision = match (decision, refused_head) {
            (Decision::Start { wave, .. } | Decision::Running { wave, .. }, Some(why)) => {
                Decision::Held {
                    wave,
                    reason: why.to_owned(),
                }
            }
            (d, _) => d,
        };
        let mut description = decision.describe(&p.plan);
        if hop.count > 1 {
            description = format!("{}, {description}", hop.describe());
        }
        let mut wrote = None;
        let mut propose = None;
        let mut trouble = false;
        if let Decision::Start { wave, keys } = &decision {
            let bumps: Vec<Bump> = keys
                .iter()
                .filter_map(|k| {
                    by_key.get(k).map(|u| Bump {
                        key: k.clone(),
                        file: u.file.to_string(),
                        to: hop_to.clone(),
                    })
                })
                .collect();
            let wave_name = p
                .plan
                .spec
                .waves
                .get(*wave)
                .map(|w| w.name.clone())
                .unwrap_or_default();
            let message = writeback::message(
                &name,
                &wave_name,
                *wave,
                p.plan.spec.waves.len(),
                &hop_to,
                keys,
            );
            if p.plan.spec.mode == PlanMode::Propose && !writer.merge_proposals {
                // Proposals start from the head the plan was read at, not
                // from another plan's commit written this pass: each is a
                // branch of its own.
                propose = Some(Request {
                    plan: name.clone(),
                    wave: *wave,
                    waves: p.plan.spec.waves.len(),
                    wave_name,
                    to: hop_to.clone(),
                    objects: keys
                        .iter()
                        .filter_map(|k| {
                            by_key.get(k).map(|u| Object {
                                key: k.clone(),
                                file: u.file.to_string(),
                                from: u.release.clone(),
                            })
                        })
                        .collect(),
                    head,
                    base: writer.branch.clone(),
                    branch: super::propose::hop_branch(&name, *wave, &hop_to, &p.plan.spec.to),
                    message,
                    hop: (hop.count > 1).then(|| hop.describe()),
                });
            } else {
                match writeback::commit_bumps(
                    &writer.repo,
                    &writer.branch,
                    tip,
                    &bumps,
                    &message,
                    &writer.author,
                    writer.signing_key.as_deref(),
                ) {
                    Ok(oid) => {
                        tracing::info!(plan = %name, wave = %wave_name, commit = %oid, objects = keys.len(), "plan: wrote the wave's hop commit");
                        let pushed = match &writer.push {
                            Some(target) => GitRepo::open(&writer.repo)
                                .and_then(|r| r.push(target, &writer.branch, false)),
                            None => Ok(()),
                        };
                        match pushed {
                            Ok(()) => {
                                tip = oid;
                                wrote = Some(oid);
                            }
                            // Not on the remote, so not the branch: the next
                            // fetch sets the cache's branch back, and the
                            // next pass writes the hop again.
                            Err(e) => {
                                tracing::warn!(plan = %name, error = %e, "plan: pushing the hop commit failed; next pass");
                                description =
                                    format!("{description}; pushing the hop commit failed: {e}");
                                trouble = true;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(plan = %name, error = %e, "plan: writing the hop commit failed; next pass");
                        description = format!("{description}; writing failed: {e}");
                        trouble = true;
                    }
                }
            }
        }
        out.push(PlanPass {
            name,
            sha: sha.clone(),
            decision,
            description,
            wrote,
            propose,
            trouble,
        });
    }
    out
}
