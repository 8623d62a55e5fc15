//! The gate for plans: a plan is judged like a manifest, before it can
//! start anything. Refused: a target that is behind a selected object (one
//! several releases ahead is walked one hop at a time), a wave (or plan) that selects nothing, an object
//! selected twice (by two waves, or by two active plans), an unparseable
//! window or duration, a digest-pinned object (no plan can derive the next
//! release's digest).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::gate::Reason;
use crate::kind::{Key, Kind};
use crate::manifest::{Document, Spec};
use crate::release::{Pin, Release, Step, step};

use super::{API_VERSION, Located, UpgradePlan};

/// What a plan can select: a ControlPlane or a standalone service, as the
/// tree has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    pub key: Key,
    pub file: Arc<str>,
    pub line: u32,
    /// The release as the gate reads it (Keystone: its tag's release).
    pub release: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Pinned by digest somewhere a bump would have to change.
    pub digest: bool,
}

/// The units of a tree's documents.
pub fn units(docs: &[Document]) -> Vec<Unit> {
    docs.iter()
        .map(|d| {
            let (release, digest) = match &d.spec {
                Spec::Plane(p) => (
                    Some(p.release.value.clone()),
                    p.services.iter().any(|s| {
                        s.image
                            .as_ref()
                            .is_some_and(|i| matches!(i.value.pin, Pin::Digest(_)))
                    }),
                ),
                Spec::Service(s) => (
                    match &s.release {
                        Some(r) => Some(r.value.clone()),
                        None => s.image.value.tag_release().map(|t| t.release.to_string()),
                    },
                    matches!(s.image.value.pin, Pin::Digest(_)),
                ),
            };
            Unit {
                key: d.key.clone(),
                file: d.file.clone(),
                line: d.line,
                release,
                labels: d.labels.clone(),
                digest,
            }
        })
        .collect()
}

/// One reason a plan is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
}

fn refuse(reason: Reason, message: impl Into<String>) -> Refusal {
    Refusal {
        reason,
        message: message.into(),
    }
}

/// The units each wave selects, in wave order; a unit already claimed by an
/// earlier wave is not selected again (that is an overlap, refused).
pub fn resolve(plan: &UpgradePlan, units: &[Unit]) -> Vec<Vec<Key>> {
    plan.spec
        .waves
        .iter()
        .map(|w| {
            let mut keys: Vec<Key> = units
                .iter()
                .filter(|u| w.select.iter().any(|s| s.matches(&u.key, &u.labels)))
                .map(|u| u.key.clone())
                .collect();
            keys.sort();
            keys.dedup();
            keys
        })
        .collect()
}

/// Whether a plan still has work: not paused and some selected unit below
/// its target.
pub fn active(plan: &UpgradePlan, units: &[Unit]) -> bool {
    if plan.spec.paused {
        return false;
    }
    let by_key: BTreeMap<&Key, &Unit> = units.iter().map(|u| (&u.key, u)).collect();
    let to = Release::parse_strict(&plan.spec.to).ok();
    resolve(plan, units).iter().flatten().any(|k| {
        by_key.get(k).is_some_and(|u| {
            // An object at or past the plan's release is done with it (a
            // later plan, or a hand commit, took it further).
            let at = u
                .release
                .as_deref()
                .and_then(|r| Release::parse_strict(r).ok());
            match (at, to) {
                (Some(at), Some(to)) => at < to,
                _ => u.release.as_deref() != Some(&*plan.spec.to),
            }
        })
    })
}

/// The longest soak: longer is a pause, and past year 9999 a soak's end
/// could not be represented at all.
pub const MAX_SOAK: std::time::Duration = std::time::Duration::from_secs(720 * 3600);

/// Judges one plan against the tree's units and the tree's other plans, as
/// the gate does when a commit writes it.
pub fn validate(plan: &Located, units: &[Unit], others: &[Located]) -> Vec<Refusal> {
    validate_as(plan, units, others, true)
}

/// [`validate`] for a plan already in the tree, as the daemon runs it: an
/// object past the plan's release is done with it, not a refusal (a later
/// plan, or a hand commit, took it further after the plan completed; a
/// complete plan must not turn failed, nor lose its windows, for that).
pub fn validate_in_effect(plan: &Located, units: &[Unit], others: &[Located]) -> Vec<Refusal> {
    validate_as(plan, units, others, false)
}

fn validate_as(plan: &Located, units: &[Unit], others: &[Located], judging: bool) -> Vec<Refusal> {
    let p = &plan.plan;
    let mut out = Vec::new();
    if p.api_version != API_VERSION {
        out.push(refuse(
            Reason::PlanInvalid,
            format!(
                "apiVersion {} is not served; use {API_VERSION}",
                p.api_version
            ),
        ));
    }
    if p.spec.waves.is_empty() {
        out.push(refuse(
            Reason::PlanInvalid,
            "a plan needs at least one wave",
        ));
    }
    // The name is a Kubernetes object name, as for every other object: it
    // goes into a commit status context, a branch and a notes line, where
    // a `/`, a `: ` or a space spelled another context or a forged line
    // (`a: failure — forged`), and two names could share a branch.
    if !crate::manifest::valid_dns_name(&p.metadata.name) {
        out.push(refuse(
            Reason::PlanInvalid,
            format!(
                "metadata.name {:?} is not a valid object name (lower-case RFC 1123, at most 253 characters); it names the plan's commit status, branches and notes",
                p.metadata.name
            ),
        ));
    }
    // A plan's name keys its proposal branches, its status context and its
    // state in the notes: two plans of one name would share them, one
    // plan's status speaking for the other's waves.
    if let Some(o) = others.iter().find(|o| {
        o.plan.metadata.name == p.metadata.name && (o.file != plan.file || o.line != plan.line)
    }) {
        out.push(refuse(
            Reason::PlanInvalid,
            format!(
                "the name {} is also the plan at {}:{}; give each plan its own metadata.name (it names the plan's branches and its commit status)",
                p.metadata.name, o.file, o.line
            ),
        ));
    }
    let mut names = BTreeSet::new();
    for w in &p.spec.waves {
        if !names.insert(w.name.as_str()) {
            out.push(refuse(
                Reason::PlanInvalid,
                format!("wave name {:?} is used twice", w.name),
            ));
        }
        if w.max_parallel == 0 {
            out.push(refuse(
                Reason::PlanInvalid,
                format!("wave {}: maxParallel must be at least 1", w.name),
            ));
        }
        match crate::duration::positive(&w.soak) {
            Err(_) if w.soak != "0s" => out.push(refuse(
                Reason::PlanInvalid,
                format!(
                    "wave {}: soak {:?} is not a duration like 0s, 30m, 2h",
                    w.name, w.soak
                ),
            )),
            Ok(d) if d > MAX_SOAK => out.push(refuse(
                Reason::PlanInvalid,
                format!(
                    "wave {}: soak {:?} is longer than 720h (30 days); to hold a plan longer, pause it (`paused: true`)",
                    w.name, w.soak
                ),
            )),
            _ => {}
        }
        if w.select.is_empty() {
            out.push(refuse(
                Reason::PlanSelectsNothing,
                format!("wave {} has no selector", w.name),
            ));
        }
        let mut ordered = BTreeSet::new();
        for o in &w.order {
            let kind = Kind::ALL
                .iter()
                .find(|x| x.as_str().eq_ignore_ascii_case(o) || x.service() == o.as_str());
            match kind {
                None => out.push(refuse(
                    Reason::PlanInvalid,
                    format!(
                        "wave {}: order names {o:?}, which is not a C5C3 kind",
                        w.name
                    ),
                )),
                Some(k) if !ordered.insert(*k) => out.push(refuse(
                    Reason::PlanInvalid,
                    format!("wave {}: order names {k} twice", w.name),
                )),
                Some(_) => {}
            }
        }
        for s in &w.select {
            if let Some(k) = &s.kind
                && !Kind::ALL.iter().any(|x| x.as_str().eq_ignore_ascii_case(k))
            {
                out.push(refuse(
                    Reason::PlanInvalid,
                    format!("wave {}: unknown kind {k:?}", w.name),
                ));
            }
        }
    }
    if let Err(e) = super::window::parse_all(&p.spec.windows) {
        out.push(refuse(Reason::PlanWindowInvalid, e.to_string()));
    }

    for g in &p.spec.gates {
        if g.object.key().is_none() {
            out.push(refuse(
                Reason::PlanInvalid,
                format!("gate on unknown kind {:?}", g.object.kind),
            ));
        }
    }
    let to = match Release::parse_strict(&p.spec.to) {
        Ok(r) => Some(r),
        Err(e) => {
            out.push(refuse(
                Reason::PlanTargetInvalid,
                format!("to {:?}: {e}", p.spec.to),
            ));
            None
        }
    };
    // Selection: every wave selects something, nothing twice.
    let waves = resolve(p, units);
    let by_key: BTreeMap<&Key, &Unit> = units.iter().map(|u| (&u.key, u)).collect();
    let mut seen: BTreeMap<&Key, &str> = BTreeMap::new();
    for (w, keys) in p.spec.waves.iter().zip(&waves) {
        if keys.is_empty() && !w.select.is_empty() {
            out.push(refuse(
                Reason::PlanSelectsNothing,
                format!("wave {} selects no ControlPlane or service", w.name),
            ));
        }
        for k in keys {
            if let Some(first) = seen.insert(k, &w.name) {
                out.push(refuse(
                    Reason::PlanOverlap,
                    format!("{k} is selected by waves {first} and {}", w.name),
                ));
            }
        }
    }
    // The target: at or ahead of every selected object.
    if let Some(to) = to {
        for k in seen.keys() {
            let Some(u) = by_key.get(k) else { continue };
            if u.digest {
                out.push(refuse(
                    Reason::PlanInvalid,
                    format!(
                        "{k} ({}:{}) is pinned by digest; a plan cannot derive the {} digest: pin a tag or bump it by hand",
                        u.file, u.line, p.spec.to
                    ),
                ));
            }
            let Some(cur) = u
                .release
                .as_deref()
                .and_then(|r| Release::parse_strict(r).ok())
            else {
                out.push(refuse(
                    Reason::PlanTargetInvalid,
                    format!("{k} has no release the plan can start from"),
                ));
                continue;
            };
            // Several hops ahead is a fast-forward: the plan walks it one
            // release at a time (`schedule::current_hop`).
            match step(cur, to) {
                Step::Same | Step::Next | Step::Skip => {}
                Step::Down if !judging => {}
                Step::Down => out.push(refuse(
                    Reason::PlanTargetInvalid,
                    format!("{k} is already at {cur}, past {to}"),
                )),
            }
        }
    }
    // Another active plan selecting the same objects.
    if active(p, units) {
        for o in others {
            if o.plan.metadata.name == p.metadata.name && o.file == plan.file {
                continue;
            }
            if !active(&o.plan, units) {
                continue;
            }
            let theirs: BTreeSet<Key> = resolve(&o.plan, units).into_iter().flatten().collect();
            if let Some(k) = seen.keys().find(|k| theirs.contains(**k)) {
                out.push(refuse(
                    Reason::PlanOverlap,
                    format!(
                        "{k} is also selected by active plan {} ({}:{})",
                        o.plan.metadata.name, o.file, o.line
                    ),
                ));
            }
        }
    }
    out
}
