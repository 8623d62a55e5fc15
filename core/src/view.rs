//! The dashboard's view model (`docs/ui.md`): what the fleet, a unit's
//! history, a hop's timeline and the plans look like, built from the state
//! the daemon already holds (unit reports, the judged commits, plan
//! decisions, the engine's journal). Pure, so that the pages and the JSON
//! API (`/api/v1/...`, whose field names are these types' serde names)
//! show one computation, tested here; the shell only renders it.
//!
//! Every string here may come from Git, the cluster or a webhook: it is kept
//! raw (the JSON API is raw, as `check --format json` is) and escaped by the
//! renderer.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::follow::Progress;
use crate::gate::Verdict;
use crate::kind::{Key, Kind};
use crate::rollout::{Next, UnitReport, WaitOn};
use crate::verdict::CommitReport;

/// How urgently a unit wants a person; rows sort by it (most urgent first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Attention {
    /// A hop failed for good, a repair budget is spent or an apply was
    /// rejected: a person must act.
    Failed,
    /// The cluster is off Git's accepted chain.
    Blocked,
    /// A hop made no progress within its phase's deadline: reported, a
    /// person should look, and it may still move by itself.
    Stalled,
    /// A hop is running.
    Moving,
    /// An accepted step is about to be applied.
    Pending,
    /// At Git's newest accepted release.
    Done,
}

impl Attention {
    pub fn as_str(self) -> &'static str {
        match self {
            Attention::Failed => "failed",
            Attention::Blocked => "blocked",
            Attention::Stalled => "stalled",
            Attention::Moving => "moving",
            Attention::Pending => "pending",
            Attention::Done => "done",
        }
    }
}

/// A followed object of a unit (a ControlPlane's child, or the unit itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `progress` described (`Migrating (2/4)`, `complete`, ...).
    pub progress: String,
    /// The phase machine's step, 0 before it and 4 once contracted.
    pub step: u8,
    pub failed: bool,
}

/// One unit of the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnitView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The release the cluster runs as far as lockstep knows (the hop's
    /// start while one is in flight).
    pub installed: Option<String>,
    /// Git's newest accepted release for the unit.
    pub target: Option<String>,
    pub attention: Attention,
    /// Phase machine progress over the followed objects, `0..=4` (the
    /// least advanced child).
    pub step: u8,
    /// What the unit is doing or waiting on, in words.
    pub status: String,
    /// Why a person must act (blocked or failed), raw.
    pub reason: Option<String>,
    /// What a person can do about it.
    pub action: Option<String>,
    /// The commit of the step in flight or last applied.
    pub commit: Option<String>,
    pub children: Vec<ChildView>,
    pub labels: BTreeMap<String, String>,
}

impl UnitView {
    pub fn key_path(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

fn step_of(p: &Progress) -> u8 {
    match p {
        Progress::Waiting => 0,
        Progress::Phase { step, .. } => (*step).min(4),
        Progress::Stalled { .. } => 0,
        Progress::Settling { .. } | Progress::Complete => 4,
        Progress::Failed { .. } => 0,
    }
}

/// One unit's view from its report (and the labels of its document).
pub fn unit_view(key: &Key, r: &UnitReport, labels: BTreeMap<String, String>) -> UnitView {
    let chain = &r.chain;
    let last = chain.steps.last();
    let target = last.and_then(|s| s.release.clone());
    let step_at = |i: usize| chain.steps.get(i);
    let before = |i: usize| {
        step_at(i)
            .and_then(|s| s.from.clone())
            .or_else(|| chain.from.clone())
    };
    let (installed, commit) = match &r.next {
        Next::Apply(i) => (before(*i), step_at(*i).map(|s| s.sha.clone())),
        Next::Follow(i) => (before(*i), step_at(*i).map(|s| s.sha.clone())),
        Next::Done(i) => (
            step_at(*i)
                .and_then(|s| s.release.clone())
                .or(chain.from.clone()),
            step_at(*i).map(|s| s.sha.clone()),
        ),
        // Off Git's chain: the chain cannot say where the unit is, the
        // cluster can (the release its spec names, read this pass).
        Next::Blocked(_) => (r.cluster_release.clone(), last.map(|s| s.sha.clone())),
        // Where the removal found it: after the last step it reached.
        Next::Removed { at, .. } => match at.checked_sub(1) {
            Some(i) => (
                step_at(i).and_then(|s| s.release.clone()),
                step_at(i).map(|s| s.sha.clone()),
            ),
            None => (r.cluster_release.clone(), None),
        },
    };
    let children: Vec<ChildView> = r
        .progress
        .iter()
        .map(|(k, p)| ChildView {
            kind: k.kind.as_str().into(),
            namespace: k.namespace.clone(),
            name: k.name.clone(),
            progress: p.describe(),
            step: step_of(p),
            // Failing (being repaired, or for good); a stall is the unit's
            // `stalled`, not a failure.
            failed: matches!(p, Progress::Failed { .. }),
        })
        .collect();
    let least = children.iter().map(|c| c.step).min().unwrap_or(0);
    let unit_path = format!(
        "{}/{}/{}",
        key.kind.as_str().to_ascii_lowercase(),
        key.namespace,
        key.name
    );
    let (attention, step, status, reason, action) = match (&r.next, &r.needs_person) {
        (Next::Blocked(m), _) => (
            Attention::Blocked,
            0,
            "blocked".to_owned(),
            Some(m.clone()),
            Some(
                "move Git to where the cluster is (a commit on the branch naming the release it runs), or bring the cluster back onto Git's chain; lockstep never guesses"
                    .to_owned(),
            ),
        ),
        (_, Some(m)) => (
            Attention::Failed,
            least,
            "a person must act".to_owned(),
            Some(m.clone()),
            Some(format!(
                "fix the cause, then run `lockstep retry {unit_path}` (or commit a fix forward)"
            )),
        ),
        // A hop with no progress past its deadline, or a step the cluster
        // keeps leaving (another writer): told, not a failure.
        (_, None) if r.stalled.is_some() => (
            Attention::Stalled,
            least,
            "stalled".to_owned(),
            r.stalled.clone(),
            Some(
                "look at the operator's events and the phase Job's logs (a stalled phase), or at who else writes the object (a step it keeps leaving); lockstep never goes backwards"
                    .to_owned(),
            ),
        ),
        (Next::Follow(_), None) => {
            let status = children
                .iter()
                .find(|c| c.step == least)
                .map(|c| format!("{}: {}", c.name, c.progress))
                .unwrap_or_else(|| "in flight".into());
            (Attention::Moving, least, status, None, None)
        }
        (Next::Apply(_), None) if r.waiting.is_some() => {
            let w = r.waiting.as_ref().map(|w| (w.on, w.message.clone()));
            let (on, message) = w.unwrap_or((WaitOn::Gate, String::new()));
            let (status, action) = match on {
                // A pre-flight gate holds the hop (`core/src/preflight.rs`).
                WaitOn::Gate => (
                    "waiting on a pre-flight gate",
                    "meet the gate (a fresh database backup, every child Ready) or change the UpgradePolicy that sets it; the hop is applied once the gate passes",
                ),
                WaitOn::PlanGate => (
                    "waiting on a plan's gate",
                    "the hop is applied once the condition the plan's gates name holds; fix that object, or change the plan's gates",
                ),
                WaitOn::Window => (
                    "waiting for a maintenance window",
                    "the hop is applied once a window of the plan opens; change the plan's windows to apply it sooner",
                ),
                // Not yet past the repair budget (then it is `stalled`).
                WaitOn::Drift => (
                    "left Git's step, set right after a backoff",
                    "something outside Git changed the object back (an edit, another tool writing the same fields): find it; lockstep applies Git's step again after each backoff",
                ),
                WaitOn::Commit => (
                    "waiting on the rest of its commit",
                    "another object of the same commit could not be asked in a dry run (the API server did not answer for it): lockstep applies a commit's objects together once each is asked",
                ),
            };
            (
                Attention::Pending,
                0,
                status.to_owned(),
                Some(message),
                Some(action.to_owned()),
            )
        }
        (Next::Apply(_), None) => (
            Attention::Pending,
            0,
            "next step accepted, applying".to_owned(),
            None,
            None,
        ),
        (Next::Done(_), None) => (Attention::Done, 4, "at Git's release".to_owned(), None, None),
        // Nothing to do: the branch no longer holds it, lockstep never
        // deletes, and nothing more is applied.
        (Next::Removed { by, .. }, None) => (
            Attention::Done,
            4,
            by.describe(),
            None,
            None,
        ),
    };
    UnitView {
        kind: key.kind.as_str().into(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        installed,
        target,
        attention,
        step,
        status,
        reason,
        action,
        commit,
        children,
        labels,
    }
}

/// The fleet, most urgent first, then by kind, namespace and name. A
/// ControlPlane's children are folded into it (`children`); a standalone
/// service is its own row.
pub fn fleet<'a>(
    units: impl IntoIterator<Item = (&'a Key, &'a UnitReport)>,
    mut labels: impl FnMut(&Key, &UnitReport) -> BTreeMap<String, String>,
) -> Vec<UnitView> {
    let mut out: Vec<UnitView> = units
        .into_iter()
        .map(|(k, r)| unit_view(k, r, labels(k, r)))
        .collect();
    out.sort_by(|a, b| {
        (a.attention, &a.kind, &a.namespace, &a.name).cmp(&(
            b.attention,
            &b.kind,
            &b.namespace,
            &b.name,
        ))
    });
    out
}

/// The labels of a unit's document (compact JSON text, as a step carries
/// it): `metadata.labels`, string values only. Nothing for a document that
/// does not parse.
pub fn labels_of(document: &str) -> BTreeMap<String, String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(document) else {
        return BTreeMap::new();
    };
    v.pointer("/metadata/labels")
        .and_then(|l| l.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The fleet page's filters, from its GET query (so they work without
/// JavaScript). Empty fields filter nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    pub release: String,
    pub kind: String,
    pub namespace: String,
    /// `key=value` or `key` (any value).
    pub label: String,
    /// An [`Attention`] name (`blocked`, `failed`, ...).
    pub state: String,
}

impl Filter {
    /// From query pairs; unknown names are ignored, values trimmed.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut f = Filter::default();
        for (k, v) in pairs {
            let v = v.trim().to_owned();
            match k {
                "release" => f.release = v,
                "kind" => f.kind = v,
                "namespace" => f.namespace = v,
                "label" => f.label = v,
                "state" => f.state = v,
                _ => {}
            }
        }
        f
    }

    pub fn is_empty(&self) -> bool {
        self == &Filter::default()
    }

    /// Whether a unit passes. A release matches the installed or the target
    /// release; a kind matches the unit or one of its children.
    pub fn matches(&self, u: &UnitView) -> bool {
        let release = self.release.is_empty()
            || u.installed.as_deref() == Some(self.release.as_str())
            || u.target.as_deref() == Some(self.release.as_str());
        let kind = self.kind.is_empty()
            || u.kind.eq_ignore_ascii_case(&self.kind)
            || u.children
                .iter()
                .any(|c| c.kind.eq_ignore_ascii_case(&self.kind));
        let namespace = self.namespace.is_empty() || u.namespace == self.namespace;
        let label = self.label.is_empty()
            || match self.label.split_once('=') {
                Some((k, v)) => u.labels.get(k.trim()).map(String::as_str) == Some(v.trim()),
                None => u.labels.contains_key(&self.label),
            };
        let state = self.state.is_empty() || u.attention.as_str() == self.state;
        release && kind && namespace && label && state
    }
}

/// Counts for the fleet page's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub units: usize,
    pub failed: usize,
    pub blocked: usize,
    pub stalled: usize,
    pub moving: usize,
    pub pending: usize,
    pub done: usize,
}

pub fn counts(units: &[UnitView]) -> Counts {
    let mut c = Counts {
        units: units.len(),
        ..Counts::default()
    };
    for u in units {
        match u.attention {
            Attention::Failed => c.failed += 1,
            Attention::Blocked => c.blocked += 1,
            Attention::Stalled => c.stalled += 1,
            Attention::Moving => c.moving += 1,
            Attention::Pending => c.pending += 1,
            Attention::Done => c.done += 1,
        }
    }
    c
}

/// A pull request's last verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PullView {
    pub number: u64,
    pub head: String,
    /// `accepted`, `refused` or `held` (the worst of its commits).
    pub verdict: String,
    /// Per object that was not accepted: `(object, message)`.
    pub reasons: Vec<(String, String)>,
    /// What a person can do (for a held or refused request).
    pub action: Option<String>,
}

fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::Accepted => "accepted",
        Verdict::Refused => "refused",
        Verdict::Held => "held",
    }
}

/// A pull request's view from its judged commits.
pub fn pull_view(number: u64, head: &str, commits: &[CommitReport]) -> PullView {
    // An object held behind a hop in flight holds the request even where
    // the commit's own verdict says accepted.
    let any = |v: Verdict| {
        commits
            .iter()
            .any(|c| c.verdict == v || c.objects.iter().any(|o| o.verdict == v))
    };
    let worst = if any(Verdict::Refused) {
        Verdict::Refused
    } else if any(Verdict::Held) {
        Verdict::Held
    } else {
        Verdict::Accepted
    };
    let reasons = commits
        .iter()
        .flat_map(|c| c.objects.iter())
        .filter(|o| o.verdict != Verdict::Accepted)
        .map(|o| {
            let who = match o.key() {
                Some(k) => k.to_string(),
                None => format!("{}:{}", o.file, o.line),
            };
            (who, o.message.clone())
        })
        .collect();
    let action = match worst {
        Verdict::Held => Some(
            "nothing to do: the request is judged again every pass and turns green once the hop it waits for completes; merge after that"
                .to_owned(),
        ),
        Verdict::Refused => Some("push a commit that fixes the reasons below".to_owned()),
        Verdict::Accepted => None,
    };
    PullView {
        number,
        head: head.to_owned(),
        verdict: verdict_str(worst).into(),
        reasons,
        action,
    }
}

/// One judged commit as a unit's history shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRow {
    pub sha: String,
    pub summary: String,
    /// The commit's verdict.
    pub verdict: String,
    /// What the commit does to the unit (or its children).
    pub objects: Vec<HistoryObject>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryObject {
    pub object: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub verdict: String,
    pub message: String,
}

/// The judged commits that touch `unit` (or, for a ControlPlane, one of
/// the objects it projects), newest first.
pub fn unit_history(commits: &[CommitReport], unit: &Key) -> Vec<HistoryRow> {
    let concerns = |o: &crate::gate::ObjectVerdict| {
        o.key().as_ref() == Some(unit)
            || (unit.kind == Kind::ControlPlane
                && o.namespace.as_deref() == Some(unit.namespace.as_str())
                && o.projected_by.as_deref() == Some(unit.name.as_str()))
    };
    commits
        .iter()
        .rev()
        .filter_map(|c| {
            let objects: Vec<HistoryObject> = c
                .objects
                .iter()
                .filter(|o| concerns(o))
                .map(|o| HistoryObject {
                    object: o
                        .key()
                        .map(|k| k.to_string())
                        .unwrap_or_else(|| o.file.to_string()),
                    from: o.from.clone(),
                    to: o.to.clone(),
                    verdict: verdict_str(o.verdict).into(),
                    message: o.message.clone(),
                })
                .collect();
            (!objects.is_empty()).then(|| HistoryRow {
                sha: c.sha.clone(),
                summary: c.summary.clone(),
                verdict: verdict_str(c.verdict).into(),
                objects,
            })
        })
        .collect()
}

/// A link to a commit on the Git host, from a template with `{sha}` (the
/// `--target-url` style); `None` without a template. The result is raw: the
/// renderer escapes it as an attribute, and only `http(s)` links are kept.
pub fn commit_link(template: Option<&str>, sha: &str) -> Option<String> {
    let t = template?;
    if !(t.starts_with("https://") || t.starts_with("http://")) {
        return None;
    }
    // A sha is hex; anything else is not put into a URL.
    if sha.is_empty() || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(if t.contains("{sha}") {
        t.replace("{sha}", sha)
    } else {
        t.to_owned()
    })
}

/// What happened, as the timeline reads it: the engine's journal and the
/// operator's Events, mapped by the shell onto plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Applied {
        unit: Key,
        sha: String,
        from: Option<String>,
        to: Option<String>,
    },
    Phase {
        object: Key,
        phase: Option<String>,
    },
    Complete {
        object: Key,
    },
    HopComplete {
        unit: Key,
        sha: String,
    },
    Repaired {
        object: Key,
        message: String,
    },
    NeedsPerson {
        object: Key,
        message: String,
    },
    /// An Event the operator recorded on an object.
    Operator {
        object: Key,
        reason: String,
        warning: bool,
    },
}

/// A stretch of one object's hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Stage {
    /// Applied, not picked up by the operator yet.
    Waiting,
    Expand,
    Migrate,
    Roll,
    Contract,
    /// After contract: Nova's and Cinder's second roll, the steady db-sync.
    SecondRoll,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Waiting => "waiting",
            Stage::Expand => "expand",
            Stage::Migrate => "migrate",
            Stage::Roll => "roll",
            Stage::Contract => "contract",
            Stage::SecondRoll => "second roll",
        }
    }

    fn of_phase(p: &str) -> Stage {
        match p {
            "Expanding" => Stage::Expand,
            "Migrating" => Stage::Migrate,
            "RollingUpdate" | "Rolling" => Stage::Roll,
            "Contracting" => Stage::Contract,
            _ => Stage::Waiting,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    pub stage: Stage,
    /// Seconds from the timeline's start.
    pub from: u64,
    pub to: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MarkKind {
    /// A warning Event: a failed Job try, a database down.
    Failed,
    Repair,
    NeedsPerson,
    /// A Deployment rolled (or another normal Event).
    Event,
    Complete,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mark {
    pub at: u64,
    pub kind: MarkKind,
    pub text: String,
}

/// One followed object's lane in a hop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lane {
    pub object: String,
    pub segments: Vec<Segment>,
    pub marks: Vec<Mark>,
}

/// One hop, as the timeline draws it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hop {
    pub unit: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub sha: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Seconds from the timeline's start.
    pub started: u64,
    /// `None`: still in flight (or never completed).
    pub ended: Option<u64>,
    pub lanes: Vec<Lane>,
}

/// The hops of a run from its events `(seconds since start, event)` in
/// time order; `now` ends the open stretches of hops still in flight.
/// Each object's events are given to the hop of its unit in flight at the
/// time (a ControlPlane's children to the plane's hop).
pub fn timeline(events: &[(u64, Event)], now: u64) -> Vec<Hop> {
    struct Open {
        hop: Hop,
        lanes: BTreeMap<Key, (Lane, Option<(Stage, u64)>)>,
    }
    fn lane<'a>(o: &'a mut Open, k: &Key) -> &'a mut (Lane, Option<(Stage, u64)>) {
        o.lanes.entry(k.clone()).or_insert_with(|| {
            (
                Lane {
                    object: k.to_string(),
                    segments: Vec::new(),
                    marks: Vec::new(),
                },
                None,
            )
        })
    }
    fn close(l: &mut (Lane, Option<(Stage, u64)>), at: u64) {
        if let Some((s, from)) = l.1.take()
            && at > from
        {
            l.0.segments.push(Segment {
                stage: s,
                from,
                to: at,
            });
        }
    }
    fn finish(mut o: Open, at: u64) -> Hop {
        for (_, mut l) in std::mem::take(&mut o.lanes) {
            close(&mut l, at);
            o.hop.lanes.push(l.0);
        }
        o.hop
    }
    let mut done: Vec<Hop> = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    // The open hop an object's event belongs to: its own unit's, else the
    // plane projecting it (same namespace, a ControlPlane hop).
    let find = |open: &[Open], k: &Key| -> Option<usize> {
        open.iter()
            .position(|o| {
                o.hop.kind == k.kind.as_str()
                    && o.hop.namespace == k.namespace
                    && o.hop.name == k.name
            })
            .or_else(|| {
                open.iter().position(|o| {
                    o.hop.kind == Kind::ControlPlane.as_str() && o.hop.namespace == k.namespace
                })
            })
    };
    for (at, e) in events {
        let at = *at;
        match e {
            Event::Applied {
                unit,
                sha,
                from,
                to,
            } => {
                if let Some(i) = find(&open, unit).filter(|i| {
                    open[*i].hop.kind == unit.kind.as_str() && open[*i].hop.name == unit.name
                }) {
                    let o = open.remove(i);
                    done.push(finish(o, at));
                }
                open.push(Open {
                    hop: Hop {
                        unit: unit.to_string(),
                        kind: unit.kind.as_str().into(),
                        namespace: unit.namespace.clone(),
                        name: unit.name.clone(),
                        sha: sha.clone(),
                        from: from.clone(),
                        to: to.clone(),
                        started: at,
                        ended: None,
                        lanes: Vec::new(),
                    },
                    lanes: BTreeMap::new(),
                });
            }
            Event::HopComplete { unit, sha } => {
                if let Some(i) = open.iter().position(|o| {
                    &o.hop.sha == sha
                        && o.hop.kind == unit.kind.as_str()
                        && o.hop.namespace == unit.namespace
                        && o.hop.name == unit.name
                }) {
                    let mut o = open.remove(i);
                    o.hop.ended = Some(at);
                    done.push(finish(o, at));
                }
            }
            Event::Phase { object, phase } => {
                let Some(i) = find(&open, object) else {
                    continue;
                };
                let l = lane(&mut open[i], object);
                let prior = l.1.map(|(s, _)| s);
                close(l, at);
                let next = match phase {
                    Some(p) => Some(Stage::of_phase(p)),
                    // Out of the phase machine after contract: the second roll.
                    None if prior == Some(Stage::Contract) => Some(Stage::SecondRoll),
                    None => None,
                };
                l.1 = next.map(|s| (s, at));
            }
            Event::Complete { object } => {
                let Some(i) = find(&open, object) else {
                    continue;
                };
                let l = lane(&mut open[i], object);
                close(l, at);
                l.0.marks.push(Mark {
                    at,
                    kind: MarkKind::Complete,
                    text: "complete".into(),
                });
            }
            Event::Repaired { object, message } => {
                let Some(i) = find(&open, object) else {
                    continue;
                };
                lane(&mut open[i], object).0.marks.push(Mark {
                    at,
                    kind: MarkKind::Repair,
                    text: message.clone(),
                });
            }
            Event::NeedsPerson { object, message } => {
                let Some(i) = find(&open, object) else {
                    continue;
                };
                lane(&mut open[i], object).0.marks.push(Mark {
                    at,
                    kind: MarkKind::NeedsPerson,
                    text: message.clone(),
                });
            }
            Event::Operator {
                object,
                reason,
                warning,
            } => {
                let Some(i) = find(&open, object) else {
                    continue;
                };
                let l = lane(&mut open[i], object);
                if l.1.is_none() && l.0.segments.is_empty() && !*warning {
                    // Before the first phase is seen: the operator picked it up.
                    l.1 = Some((Stage::Waiting, at));
                }
                l.0.marks.push(Mark {
                    at,
                    kind: if *warning {
                        MarkKind::Failed
                    } else {
                        MarkKind::Event
                    },
                    text: reason.clone(),
                });
            }
        }
    }
    for o in open {
        done.push(finish(o, now));
    }
    done.sort_by_key(|h| h.started);
    done
}

/// A plan as the plans page shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub name: String,
    /// The commit that last changed the plan's file.
    pub sha: String,
    pub to: String,
    pub mode: String,
    pub paused: bool,
    /// The decision, in words.
    pub description: String,
    /// `complete`, `start`, `running`, `soaking`, `outsideWindow`, `gated`,
    /// `paused`, `held`.
    pub state: String,
    /// The wave the decision is about (0-based).
    pub wave: Option<usize>,
    pub waves: Vec<WaveView>,
    /// The maintenance windows, as written, and the time zone they are in.
    pub windows: Vec<String>,
    /// RFC 3339 in the plan's first window's time zone (else UTC).
    pub next_opening: Option<String>,
    pub soak_until: Option<String>,
    /// Seconds left of the soak (or to the next opening), from `now`.
    pub seconds_left: Option<i64>,
    /// The proposal's pull/merge request, when one is open.
    pub proposal: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaveView {
    pub name: String,
    pub max_parallel: u32,
    pub soak: String,
    pub objects: Vec<String>,
    /// Objects complete at the plan's release.
    pub complete: usize,
}

/// A plan's view from its decision. `waves` are the plan's resolved waves
/// (`plan::validate::resolve`); `complete(key)` says whether an object is
/// complete at the plan's release.
#[allow(clippy::too_many_arguments)]
pub fn plan_view(
    plan: &crate::plan::UpgradePlan,
    sha: &str,
    waves: &[Vec<Key>],
    decision: &crate::plan::schedule::Decision,
    description: &str,
    now: jiff::Timestamp,
    complete: impl Fn(&Key) -> bool,
    proposal: Option<String>,
) -> PlanView {
    use crate::plan::schedule::Decision as D;
    let (state, wave) = match decision {
        D::Complete => ("complete", None),
        D::Start { wave, .. } => ("start", Some(*wave)),
        D::Running { wave, .. } => ("running", Some(*wave)),
        D::Soaking { wave, .. } => ("soaking", Some(*wave)),
        D::OutsideWindow { wave, .. } => ("outsideWindow", Some(*wave)),
        D::Gated { wave, .. } => ("gated", Some(*wave)),
        D::Paused { wave } => ("paused", Some(*wave)),
        D::Held { wave, .. } => ("held", Some(*wave)),
        D::Stalled { wave, .. } => ("stalled", Some(*wave)),
    };
    let zone = plan
        .spec
        .windows
        .first()
        .and_then(|w| crate::plan::window::zone(&w.time_zone).ok())
        .unwrap_or(jiff::tz::TimeZone::UTC);
    let show = |t: &jiff::Timestamp| t.to_zoned(zone.clone()).to_string();
    let (next_opening, soak_until, seconds_left) = match decision {
        D::OutsideWindow { next: Some(t), .. } => {
            (Some(show(t)), None, Some(t.as_second() - now.as_second()))
        }
        D::Soaking { until, .. } => (
            None,
            Some(show(until)),
            Some(until.as_second() - now.as_second()),
        ),
        _ => (None, None, None),
    };
    let windows = plan
        .spec
        .windows
        .iter()
        .map(|w| format!("{} for {} ({})", w.start, w.duration, w.time_zone))
        .collect();
    PlanView {
        name: plan.metadata.name.clone(),
        sha: sha.to_owned(),
        to: plan.spec.to.clone(),
        mode: match plan.spec.mode {
            crate::plan::PlanMode::Propose => "propose".into(),
            crate::plan::PlanMode::Commit => "commit".into(),
        },
        paused: plan.spec.paused,
        description: description.to_owned(),
        state: state.into(),
        wave,
        waves: plan
            .spec
            .waves
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let keys = waves.get(i).map(Vec::as_slice).unwrap_or(&[]);
                WaveView {
                    name: w.name.clone(),
                    max_parallel: w.max_parallel,
                    soak: w.soak.clone(),
                    objects: keys.iter().map(|k| k.to_string()).collect(),
                    complete: keys.iter().filter(|k| complete(k)).count(),
                }
            })
            .collect(),
        windows,
        next_opening,
        soak_until,
        seconds_left,
        proposal,
    }
}

/// `1:02:05` / `4:05`: a time-axis label.
pub fn clock(secs: u64) -> String {
    if secs >= 3600 {
        format!("{}:{:02}:{:02}", secs / 3600, (secs / 60) % 60, secs % 60)
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

/// Whole seconds of a duration (the timeline's unit).
pub fn secs(d: Duration) -> u64 {
    d.as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{Chain, Document, Step, Wait};
    use std::sync::Arc;

    fn step(sha: &str, from: &str, to: &str) -> Step {
        Step {
            sha: sha.into(),
            commits: vec![sha.into()],
            earlier: Vec::new(),
            file: Arc::from("planes/a.yaml"),
            from: Some(from.into()),
            release: Some(to.into()),
            image: None,
            children: BTreeMap::new(),
            abort: false,
            reconfigured: false,
            document: Ok(Document::from_text(Arc::from(
                r#"{"metadata":{"name":"a","labels":{"tier":"gold","n":1}}}"#,
            ))),
        }
    }

    fn report(kind: Kind, name: &str, next: Next, needs: Option<&str>) -> (Key, UnitReport) {
        let key = Key::new(kind, "prod", name);
        let chain = Chain {
            unit: key.clone(),
            from: Some("2025.1".into()),
            steps: vec![
                step("aaaa", "2025.1", "2025.2"),
                step("bbbb", "2025.2", "2026.1"),
            ],
            removed: None,
        };
        let mut progress = BTreeMap::new();
        progress.insert(
            Key::new(Kind::Nova, "prod", "nova"),
            Progress::Phase {
                phase: "Migrating".into(),
                step: 2,
            },
        );
        progress.insert(Key::new(Kind::Glance, "prod", "glance"), Progress::Complete);
        (
            key,
            UnitReport {
                chain: Arc::new(chain),
                next,
                progress,
                needs_person: needs.map(str::to_owned),
                stalled: None,
                asked: Default::default(),
                waiting: None,
                cluster_release: None,
                settled: Default::default(),
            },
        )
    }

    #[test]
    fn a_blocked_unit_shows_the_release_the_cluster_runs() {
        let (key, mut r) = report(
            Kind::Nova,
            "edge",
            Next::Blocked("is at 2025.2 in the cluster".into()),
            None,
        );
        // Not read (the unit is not in the cluster): nothing is guessed.
        assert_eq!(unit_view(&key, &r, BTreeMap::new()).installed, None);
        r.cluster_release = Some("2025.2".into());
        let v = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(v.attention, Attention::Blocked);
        assert_eq!(v.installed.as_deref(), Some("2025.2"));
        assert_eq!(v.target.as_deref(), Some("2026.1"));
        // A unit on its chain reads the chain, not the cluster's spec.
        r.next = Next::Follow(1);
        r.cluster_release = Some("2026.1".into());
        assert_eq!(
            unit_view(&key, &r, BTreeMap::new()).installed.as_deref(),
            Some("2025.2")
        );
    }

    /// A stall is told apart from a failure: it is shown to a person (and
    /// ranks above the hops moving) without the failure's "lockstep retry".
    #[test]
    fn a_stalled_hop_reads_as_stalled_not_failed() {
        let (key, mut r) = report(Kind::Nova, "slow", Next::Follow(1), None);
        r.stalled = Some("Nova prod/nova: stalled in Migrating: no progress for over 1h".into());
        let v = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(v.attention, Attention::Stalled);
        assert_eq!(v.reason, r.stalled);
        assert!(
            !v.action.as_deref().unwrap_or("").contains("retry"),
            "{v:?}"
        );
        let (other, going) = report(Kind::Nova, "a", Next::Follow(1), None);
        let moving = unit_view(&other, &going, BTreeMap::new());
        assert!(v.attention < moving.attention);
        let c = counts(&[v, moving]);
        assert_eq!((c.stalled, c.moving, c.failed), (1, 1, 0));
        // A person must act: the failure wins.
        r.needs_person = Some("nova: MigrateFailed".into());
        assert_eq!(
            unit_view(&key, &r, BTreeMap::new()).attention,
            Attention::Failed
        );
    }

    #[test]
    fn a_unit_git_removed_reads_as_done_where_the_removal_found_it() {
        let by = crate::rollout::Removal {
            sha: "0123456789abcdef".into(),
            plane: None,
        };
        let (key, mut r) = report(
            Kind::Nova,
            "gone",
            Next::Removed {
                at: 1,
                by: by.clone(),
            },
            None,
        );
        let v = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(v.attention, Attention::Done);
        assert_eq!(v.status, "removed from Git in 0123456789");
        assert_eq!(v.installed.as_deref(), Some("2025.2"));
        assert_eq!(v.commit.as_deref(), Some("aaaa"));
        // No step reached the cluster: only the cluster can say.
        r.next = Next::Removed { at: 0, by };
        r.cluster_release = Some("2025.1".into());
        let v = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(v.installed.as_deref(), Some("2025.1"));
        assert_eq!(v.commit, None);
    }

    #[test]
    fn a_hop_held_by_a_gate_says_why_and_what_to_do() {
        let (key, mut r) = report(Kind::Nova, "gated", Next::Apply(0), None);
        let plain = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(plain.reason, None);
        let m = "waiting: last backup of nova 31h old, need 24h";
        r.waiting = Some(Wait::new(WaitOn::Gate, m));
        let v = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(v.attention, Attention::Pending);
        assert_eq!(v.status, "waiting on a pre-flight gate");
        assert_eq!(v.reason.as_deref(), Some(m));
        assert!(v.action.as_deref().unwrap().contains("backup"));
        // A closed maintenance window and a drift's backoff are told as what
        // they are, not as a gate to meet.
        let m = "waiting for a maintenance window of plan rings (opens 2026-12-05T02:00:00Z)";
        r.waiting = Some(Wait::new(WaitOn::Window, m));
        let v = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(v.status, "waiting for a maintenance window");
        assert_eq!(v.reason.as_deref(), Some(m));
        assert!(!v.action.as_deref().unwrap().contains("backup"));
        r.waiting = Some(Wait::new(
            WaitOn::Drift,
            "left Git's step outside Git 2 times",
        ));
        let v = unit_view(&key, &r, BTreeMap::new());
        assert_eq!(v.attention, Attention::Pending);
        assert_eq!(v.status, "left Git's step, set right after a backoff");
        assert!(v.action.as_deref().unwrap().contains("outside Git"));
    }

    #[test]
    fn the_fleet_puts_what_needs_a_person_first_with_reason_and_action() {
        let units: BTreeMap<Key, UnitReport> = [
            report(Kind::ControlPlane, "a-done", Next::Done(1), None),
            report(Kind::ControlPlane, "b-moving", Next::Follow(1), None),
            report(
                Kind::ControlPlane,
                "c-blocked",
                Next::Blocked("off the chain".into()),
                None,
            ),
            report(
                Kind::ControlPlane,
                "d-failed",
                Next::Follow(1),
                Some("budget spent"),
            ),
        ]
        .into_iter()
        .collect();
        let f = fleet(&units, |_, r| {
            labels_of(r.chain.steps[0].document.as_ref().unwrap().text())
        });
        let names: Vec<&str> = f.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["d-failed", "c-blocked", "b-moving", "a-done"]);
        assert_eq!(f[0].reason.as_deref(), Some("budget spent"));
        assert!(
            f[0].action
                .as_deref()
                .unwrap()
                .contains("lockstep retry controlplane/prod/d-failed")
        );
        assert_eq!(f[1].reason.as_deref(), Some("off the chain"));
        // In flight: from the hop's start to Git's newest, the least
        // advanced child's phase.
        assert_eq!(f[2].installed.as_deref(), Some("2025.2"));
        assert_eq!(f[2].target.as_deref(), Some("2026.1"));
        assert_eq!(f[2].step, 2);
        assert_eq!(f[2].status, "nova: Migrating (2/4)");
        assert_eq!(f[3].installed.as_deref(), Some("2026.1"));
        assert_eq!(f[3].step, 4);
        // Only string labels.
        assert_eq!(f[3].labels.len(), 1);
        assert_eq!(f[3].labels["tier"], "gold");
        let c = counts(&f);
        assert_eq!((c.failed, c.blocked, c.moving, c.done), (1, 1, 1, 1));
    }

    #[test]
    fn filters_by_release_kind_namespace_label_and_state() {
        let units: BTreeMap<Key, UnitReport> = [
            report(Kind::ControlPlane, "a", Next::Done(1), None),
            report(Kind::Keystone, "k", Next::Follow(0), None),
        ]
        .into_iter()
        .collect();
        let f = fleet(&units, |_, _| {
            [("tier".to_owned(), "gold".to_owned())]
                .into_iter()
                .collect()
        });
        let pass = |q: &[(&str, &str)]| {
            let filter = Filter::from_pairs(q.iter().copied());
            f.iter()
                .filter(|u| filter.matches(u))
                .map(|u| u.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(pass(&[]).len(), 2);
        // Installed or target: both head for 2026.1, only k still runs 2025.1.
        assert_eq!(pass(&[("release", "2026.1")]).len(), 2);
        assert_eq!(pass(&[("release", "2025.1")]), ["k"]);
        assert!(pass(&[("release", "2025.2")]).is_empty());
        // A kind matches a plane's children too.
        assert_eq!(pass(&[("kind", "nova")]).len(), 2);
        assert_eq!(pass(&[("kind", "keystone")]), ["k"]);
        assert_eq!(pass(&[("namespace", "other")]).len(), 0);
        assert_eq!(pass(&[("label", "tier=gold")]).len(), 2);
        assert_eq!(pass(&[("label", "tier = silver")]).len(), 0);
        assert_eq!(pass(&[("label", "tier")]).len(), 2);
        assert_eq!(pass(&[("state", "moving"), ("bogus", "x")]), ["k"]);
    }

    #[test]
    fn commit_links_only_for_http_templates_and_hex_shas() {
        assert_eq!(
            commit_link(Some("https://git.example/c/{sha}"), "ab12").as_deref(),
            Some("https://git.example/c/ab12")
        );
        assert_eq!(
            commit_link(Some("javascript:alert(1)//{sha}"), "ab12"),
            None
        );
        assert_eq!(commit_link(Some("https://x/{sha}"), "ab\"><x"), None);
        assert_eq!(commit_link(None, "ab12"), None);
    }

    fn k(kind: Kind, name: &str) -> Key {
        Key::new(kind, "prod", name)
    }

    #[test]
    fn a_hop_timeline_has_every_stage_failed_tries_and_repairs() {
        let plane = k(Kind::ControlPlane, "a");
        let nova = k(Kind::Nova, "nova");
        let ph = |p: Option<&str>| Event::Phase {
            object: nova.clone(),
            phase: p.map(str::to_owned),
        };
        let events = vec![
            (
                10,
                Event::Applied {
                    unit: plane.clone(),
                    sha: "cafe".into(),
                    from: Some("2025.2".into()),
                    to: Some("2026.1".into()),
                },
            ),
            (20, ph(Some("Expanding"))),
            (
                30,
                Event::Operator {
                    object: nova.clone(),
                    reason: "JobFailed".into(),
                    warning: true,
                },
            ),
            (
                35,
                Event::Repaired {
                    object: nova.clone(),
                    message: "re-ran expand".into(),
                },
            ),
            (50, ph(Some("Migrating"))),
            (70, ph(Some("RollingUpdate"))),
            (90, ph(Some("Contracting"))),
            (100, ph(None)),
            (
                130,
                Event::Complete {
                    object: nova.clone(),
                },
            ),
            (
                130,
                Event::HopComplete {
                    unit: plane.clone(),
                    sha: "cafe".into(),
                },
            ),
            // A second hop still in flight.
            (
                200,
                Event::Applied {
                    unit: k(Kind::Keystone, "keystone"),
                    sha: "beef".into(),
                    from: None,
                    to: Some("2026.1".into()),
                },
            ),
            (
                210,
                Event::Phase {
                    object: k(Kind::Keystone, "keystone"),
                    phase: Some("Expanding".into()),
                },
            ),
        ];
        let t = timeline(&events, 300);
        assert_eq!(t.len(), 2);
        let h = &t[0];
        assert_eq!((h.started, h.ended), (10, Some(130)));
        assert_eq!(h.lanes.len(), 1);
        let stages: Vec<(Stage, u64, u64)> = h.lanes[0]
            .segments
            .iter()
            .map(|s| (s.stage, s.from, s.to))
            .collect();
        assert_eq!(
            stages,
            [
                (Stage::Expand, 20, 50),
                (Stage::Migrate, 50, 70),
                (Stage::Roll, 70, 90),
                (Stage::Contract, 90, 100),
                (Stage::SecondRoll, 100, 130),
            ]
        );
        let marks: Vec<MarkKind> = h.lanes[0].marks.iter().map(|m| m.kind).collect();
        assert_eq!(
            marks,
            [MarkKind::Failed, MarkKind::Repair, MarkKind::Complete]
        );
        // In flight: open until now.
        assert_eq!(t[1].ended, None);
        assert_eq!(t[1].lanes[0].segments[0].to, 300);
    }

    #[test]
    fn a_unit_history_names_the_plane_children_newest_first() {
        use crate::gate::{ObjectVerdict, Transition};
        let ov = |name: &str, by: Option<&str>, v: Verdict| ObjectVerdict {
            kind: Some(Kind::Nova),
            namespace: Some("prod".into()),
            name: Some(name.into()),
            file: Arc::from("f.yaml"),
            line: 1,
            projected_by: by.map(str::to_owned),
            from: Some("2025.2".into()),
            to: Some("2026.1".into()),
            from_image: None,
            to_image: None,
            transition: Transition::Upgrade,
            verdict: v,
            reason: None,
            message: "<script>".into(),
        };
        let c = |sha: &str, objects| CommitReport {
            sha: sha.into(),
            summary: "s".into(),
            verdict: Verdict::Accepted,
            objects,
            skipped: vec![],
            files_changed: 1,
        };
        let commits = vec![
            c("01", vec![ov("nova", Some("a"), Verdict::Accepted)]),
            c("02", vec![ov("other", None, Verdict::Refused)]),
            c("03", vec![ov("nova", Some("a"), Verdict::Refused)]),
        ];
        let h = unit_history(&commits, &k(Kind::ControlPlane, "a"));
        let shas: Vec<&str> = h.iter().map(|r| r.sha.as_str()).collect();
        assert_eq!(shas, ["03", "01"]);
        assert_eq!(h[0].objects[0].verdict, "refused");
        // Raw here: the renderer escapes.
        assert_eq!(h[0].objects[0].message, "<script>");
        let standalone = unit_history(&commits, &k(Kind::Nova, "other"));
        assert_eq!(standalone.len(), 1);
    }

    #[test]
    fn a_held_pull_request_says_why_and_what_to_do() {
        let p = pull_view(7, "abc", &[]);
        assert_eq!(p.verdict, "accepted");
        assert_eq!(p.action, None);
        let held = CommitReport {
            sha: "abc".into(),
            summary: "bump".into(),
            verdict: Verdict::Held,
            objects: vec![],
            skipped: vec![],
            files_changed: 1,
        };
        let p = pull_view(7, "abc", std::slice::from_ref(&held));
        assert_eq!(p.verdict, "held");
        assert!(p.action.unwrap().contains("judged again every pass"));
        // The daemon's verdict: the commit accepted, an object held.
        let mut object_held = held;
        object_held.verdict = Verdict::Accepted;
        object_held.objects = vec![crate::gate::ObjectVerdict {
            kind: Some(Kind::Nova),
            namespace: Some("prod".into()),
            name: Some("nova".into()),
            file: Arc::from("f.yaml"),
            line: 1,
            projected_by: None,
            from: Some("2026.1".into()),
            to: Some("2026.2".into()),
            from_image: None,
            to_image: None,
            transition: crate::gate::Transition::Queued,
            verdict: Verdict::Held,
            reason: None,
            message: "held: the cluster is still upgrading".into(),
        }];
        let p = pull_view(7, "abc", &[object_held]);
        assert_eq!(p.verdict, "held");
        assert_eq!(
            p.reasons,
            [(
                "Nova prod/nova".to_owned(),
                "held: the cluster is still upgrading".to_owned()
            )]
        );
    }

    #[test]
    fn a_plan_waiting_for_its_window_says_when_in_its_time_zone() {
        use crate::plan::schedule::Decision;
        let text = r#"apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata:
  name: rings
spec:
  to: "2026.2"
  windows:
    - start: "0 3 1 1 *"
      duration: 1h
      timeZone: Europe/Berlin
  waves:
    - name: canary
      select: [{kind: ControlPlane, labels: {ring: canary}}]
      soak: 30m
    - name: rest
      select: [{kind: ControlPlane, labels: {ring: general}}]
      maxParallel: 5
"#;
        let (plans, errors) = crate::plan::parse_plans("plan.yaml", text);
        assert!(errors.is_empty(), "{errors:?}");
        let plan = &plans[0].plan;
        let now: jiff::Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let next: jiff::Timestamp = "2027-01-01T02:00:00Z".parse().unwrap();
        let a = k(Kind::ControlPlane, "a");
        let b = k(Kind::ControlPlane, "b");
        let waves = vec![vec![a.clone()], vec![b.clone()]];
        let d = Decision::OutsideWindow {
            wave: 0,
            next: Some(next),
        };
        let v = plan_view(plan, "cafe", &waves, &d, "waits", now, |x| x == &a, None);
        assert_eq!(v.state, "outsideWindow");
        assert_eq!(v.wave, Some(0));
        // 03:00 in Berlin, with the zone named.
        let opening = v.next_opening.unwrap();
        assert!(
            opening.starts_with("2027-01-01T03:00:00+01:00"),
            "{opening}"
        );
        assert!(opening.contains("Europe/Berlin"), "{opening}");
        assert_eq!(v.seconds_left, Some(next.as_second() - now.as_second()));
        assert_eq!(v.windows, ["0 3 1 1 * for 1h (Europe/Berlin)"]);
        assert_eq!(v.waves[0].complete, 1);
        assert_eq!(v.waves[1].objects, [b.to_string()]);
        assert_eq!(v.waves[1].max_parallel, 5);
        let soak = Decision::Soaking {
            wave: 1,
            until: next,
        };
        let v = plan_view(plan, "cafe", &waves, &soak, "soaks", now, |_| false, None);
        assert_eq!((v.state.as_str(), v.next_opening), ("soaking", None));
        assert!(v.soak_until.is_some());
    }
}
