//! The release gate (`docs/gate.md`): a pure function from the baseline,
//! the state a commit asks for and, optionally, the live state, to one
//! verdict per changed object. No I/O happens here; the history walker feeds
//! it and the reporters print what it returns.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::desired::Desired;
use crate::kind::{Key, Kind};
use crate::live::{Live, LiveStatus};
use crate::manifest::Problem;
use crate::release::{Release, Step, TaggedRelease, step};

/// The operators' condition reasons (`docs/operators.md` §3.2), reused so
/// that a refusal in Git reads the same as what the cluster would have
/// parked on, plus the few of lockstep's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Reason {
    VersionParseError,
    ImageReleaseMismatch,
    ManifestInvalid,
    UpgradePathInvalid,
    DowngradeNotSupported,
    AbortUnsafe,
    UpgradeInProgress,
    UpgradeTargetChanged,
    UpgradeBlocked,
    AckRequired,
    PolicyInvalid,
    ProjectedChildEdited,
    /// An UpgradePlan that does not parse or breaks the plan schema.
    PlanInvalid,
    /// A plan's target does not parse or is behind a selected object's
    /// release (several releases ahead is a fast-forward, accepted).
    PlanTargetInvalid,
    /// A plan (or one of its waves) selects nothing.
    PlanSelectsNothing,
    /// An object selected twice: by two waves, or by two active plans.
    PlanOverlap,
    /// A maintenance window that does not parse.
    PlanWindowInvalid,
    /// A trust policy is configured and the commit is unsigned, badly
    /// signed, or signed by a key not trusted for its committer at its time.
    UntrustedCommit,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::VersionParseError => "VersionParseError",
            Reason::ImageReleaseMismatch => "ImageReleaseMismatch",
            Reason::ManifestInvalid => "ManifestInvalid",
            Reason::UpgradePathInvalid => "UpgradePathInvalid",
            Reason::DowngradeNotSupported => "DowngradeNotSupported",
            Reason::AbortUnsafe => "AbortUnsafe",
            Reason::UpgradeInProgress => "UpgradeInProgress",
            Reason::UpgradeTargetChanged => "UpgradeTargetChanged",
            Reason::UpgradeBlocked => "UpgradeBlocked",
            Reason::AckRequired => "AckRequired",
            Reason::PolicyInvalid => "PolicyInvalid",
            Reason::ProjectedChildEdited => "ProjectedChildEdited",
            Reason::PlanInvalid => "PlanInvalid",
            Reason::PlanTargetInvalid => "PlanTargetInvalid",
            Reason::PlanSelectsNothing => "PlanSelectsNothing",
            Reason::PlanOverlap => "PlanOverlap",
            Reason::PlanWindowInvalid => "PlanWindowInvalid",
            Reason::UntrustedCommit => "UntrustedCommit",
        }
    }
}

/// What a commit does to an object (what it attempts, when refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transition {
    Install,
    Remove,
    Unchanged,
    /// The document changed, its release and image did not (replicas, an
    /// endpoint, a dropped service block): applied like a patch.
    Reconfigure,
    Patch,
    Upgrade,
    Abort,
    Queued,
    Downgrade,
    Skip,
    Retarget,
    Invalid,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Accepted,
    Refused,
    Held,
}

/// The judgment of one object in one commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectVerdict {
    pub kind: Option<Kind>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub file: Arc<str>,
    pub line: u32,
    pub projected_by: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub from_image: Option<String>,
    pub to_image: Option<String>,
    pub transition: Transition,
    pub verdict: Verdict,
    pub reason: Option<Reason>,
    pub message: String,
}

impl ObjectVerdict {
    pub fn key(&self) -> Option<Key> {
        Some(Key::new(
            self.kind?,
            self.namespace.clone()?,
            self.name.clone()?,
        ))
    }
}

/// Everything the gate needs for one commit. `baseline` and `next` hold the
/// objects of the files the commit changed (relative to the baseline);
/// `elsewhere` holds objects of unchanged files that share a key, or a plane,
/// with them — enough for the cross-file rules without reading the whole tree.
pub struct CommitInput<'a> {
    pub baseline: &'a [Desired],
    pub next: &'a [Desired],
    pub elsewhere: &'a [Desired],
    pub problems: &'a [Problem],
    pub live: Option<&'a Live>,
    /// The last accepted state of identities the baseline does not hold
    /// (removed, renamed away, hidden behind another extension): an object
    /// of `next` without a baseline is judged from its floor, if it has one.
    pub floors: &'a Floors,
    /// The `UpgradePolicy` documents the commit is judged by (its
    /// baseline's and its own), and the acknowledgements its message gives.
    pub policies: &'a crate::policy::PolicySet,
    pub acks: &'a std::collections::BTreeSet<String>,
}

/// Every identity's floor. Shared: the daemon judges each new head (and
/// each pull request) on a copy of the last head's floors while that one is
/// still held, and a copy of the whole table (84,000 keys at 20,000 files)
/// was a tenth of every pass that judged a commit. A copy is now an `Arc`
/// of the table as of the last fold plus the few floors set since.
#[derive(Clone, Debug, Default)]
pub struct Floors {
    base: Arc<HashMap<Key, Arc<Floor>>>,
    over: HashMap<Key, Arc<Floor>>,
}

impl Floors {
    pub fn get(&self, key: &Key) -> Option<&Arc<Floor>> {
        self.over.get(key).or_else(|| self.base.get(key))
    }

    pub fn contains_key(&self, key: &Key) -> bool {
        self.over.contains_key(key) || self.base.contains_key(key)
    }

    pub fn insert(&mut self, key: Key, floor: Arc<Floor>) {
        self.over.insert(key, floor);
    }

    pub fn reserve(&mut self, n: usize) {
        self.over.reserve(n);
    }

    pub fn is_empty(&self) -> bool {
        self.base.is_empty() && self.over.is_empty()
    }

    /// Moves the floors set since the last fold into the shared table once
    /// they are more than 1,024 and a 64th of it, so that a copy stays small; the table is copied then
    /// only if another holder still shares it.
    pub fn fold(&mut self) {
        if self.over.len() <= 1024.max(self.base.len() / 64) {
            return;
        }
        if self.base.is_empty() {
            self.base = Arc::new(std::mem::take(&mut self.over));
            return;
        }
        // Taken, not drained: a drained map keeps its size, and a big
        // commit's would then be copied with every copy of the floors.
        let over = std::mem::take(&mut self.over);
        Arc::make_mut(&mut self.base).extend(over);
    }
}

/// What the judged history remembers of an identity: removing an object
/// from Git never deletes it from the cluster, so its last accepted release
/// stays the floor a re-add is judged from (`docs/gate.md`, "Identity over
/// time").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Floor {
    /// The last accepted definition (release and image, file and line).
    pub last: Desired,
    /// The commit that accepted it; `None` when it came with the starting
    /// baseline, taken as given.
    pub commit: Option<Arc<str>>,
    /// When `last` names no release that parses (a Keystone pinned by
    /// digest: the operator freezes its release where it was), the last
    /// accepted definition that did. A release written again later is
    /// judged from it, or a pin would forget where the object stands and
    /// let a skip or a downgrade through ([`Floor::released`]).
    pub released: Option<Arc<Floor>>,
}

impl Floor {
    /// A floor for `last`, accepted by `commit`, after `before` (the
    /// identity's floor until then).
    pub fn after(last: Desired, commit: Option<Arc<str>>, before: Option<&Arc<Floor>>) -> Self {
        // Nothing before (most of a whole tree judged from nothing): no
        // release to parse.
        let released = before.and_then(|b| {
            if parsed_release(&last).is_some() {
                None
            } else if parsed_release(&b.last).is_some() {
                Some(b.clone())
            } else {
                b.released.clone()
            }
        });
        Self {
            last,
            commit,
            released,
        }
    }

    /// The last accepted definition that names a release that parses:
    /// `last` itself, or the one before a pin.
    pub fn released(&self) -> Option<&Floor> {
        if parsed_release(&self.last).is_some() {
            Some(self)
        } else {
            self.released.as_deref()
        }
    }

    /// Where the floor comes from, for messages: `standalone/nova.yaml at 3f2a9c1e20`.
    fn origin(&self) -> String {
        match &self.commit {
            Some(c) => format!("{} at {}", self.last.file, &c[..c.len().min(10)]),
            None => format!("{} in the starting baseline", self.last.file),
        }
    }
}

/// Judges one commit. Objects whose release and image did not change are not
/// listed unless a rule refuses them.
pub fn judge_commit(input: &CommitInput<'_>) -> Vec<ObjectVerdict> {
    let mut out =
        Vec::with_capacity(input.problems.len() + input.next.len() + input.baseline.len());

    for p in input.problems {
        out.push(problem_verdict(p));
    }
    // Sets, not lists: a commit breaking many files is looked up once per
    // object, and a scan of the problems per object would be quadratic.
    let refused_by_problem: HashSet<&Key> = input
        .problems
        .iter()
        .filter_map(|p| p.key.as_ref())
        .collect();
    // A file that did not parse at all hides what it defines: none of its
    // baseline objects is reported as removed.
    let unreadable: HashSet<&str> = input
        .problems
        .iter()
        .filter(|p| p.key.is_none())
        .map(|p| &*p.file)
        .collect();

    // Cross-file rules: one definition per key; projected children are the plane's.
    // Hashed: the verdicts below follow `input.next`, never this map's order.
    let mut defined: HashMap<&Key, Vec<&Desired>> =
        HashMap::with_capacity(input.next.len() + input.elsewhere.len());
    for d in input.next.iter().chain(input.elsewhere) {
        defined.entry(&d.key).or_default().push(d);
    }
    let mut cross: HashMap<*const Desired, ObjectVerdict> = HashMap::new();
    for (key, defs) in &defined {
        if defs.len() < 2 {
            continue;
        }
        let projected: Vec<&&Desired> = defs.iter().filter(|d| d.projected_by.is_some()).collect();
        let standalone: Vec<&&Desired> = defs.iter().filter(|d| d.projected_by.is_none()).collect();
        let standalone_in_next = standalone
            .iter()
            .any(|s| input.next.iter().any(|n| std::ptr::eq(n, **s)));
        for d in input.next.iter().filter(|d| &&d.key == key) {
            if d.projected_by.is_some() && !standalone.is_empty() && standalone_in_next {
                // The standalone document is the one to fix; the plane's child
                // is judged on its own.
                continue;
            }
            let v = if !projected.is_empty() && !standalone.is_empty() {
                let (plane, child_doc): (&Desired, &Desired) = if d.projected_by.is_some() {
                    (d, standalone[0])
                } else {
                    (projected[0], d)
                };
                refuse(
                    d,
                    None,
                    Transition::Invalid,
                    Reason::ProjectedChildEdited,
                    format!(
                        "{key} is projected by ControlPlane {} ({}:{}) and also defined standalone at {}:{}; write the plane, never its children (the operator re-asserts them and would revert the edit)",
                        plane_ns(plane, input),
                        plane.file,
                        plane.line,
                        child_doc.file,
                        child_doc.line
                    ),
                )
            } else {
                let other = defs
                    .iter()
                    .find(|o| !std::ptr::eq(**o, d))
                    .copied()
                    .unwrap_or(d);
                refuse(
                    d,
                    None,
                    Transition::Invalid,
                    Reason::ManifestInvalid,
                    format!(
                        "{key} is defined more than once (also at {}:{}); every object must be defined once",
                        other.file, other.line
                    ),
                )
            };
            cross.insert(d as *const Desired, v);
        }
    }

    let base_by_key: HashMap<&Key, &Desired> =
        input.baseline.iter().rev().map(|d| (&d.key, d)).collect();
    let next_keys: HashMap<&Key, ()> = input.next.iter().map(|d| (&d.key, ())).collect();

    for d in input.next {
        if refused_by_problem.contains(&d.key) {
            continue;
        }
        if let Some(v) = cross.remove(&(d as *const Desired)) {
            out.push(v);
            continue;
        }
        let base = base_by_key.get(&d.key).copied();
        if let Some(b) = base
            && b.same_target(d)
            && b.projected_by == d.projected_by
        {
            if d.projected_by.is_none()
                && b.fingerprint.is_some()
                && d.fingerprint.is_some()
                && b.fingerprint != d.fingerprint
            {
                out.push(accept(
                    d,
                    Some(b),
                    Transition::Reconfigure,
                    "the document changed; release and image did not".to_owned(),
                ));
            }
            continue;
        }
        let live = input.live.and_then(|l| l.get(&d.key));
        let v = match (base, input.floors.get(&d.key)) {
            (None, Some(floor)) => judge_readd(floor, d, live),
            (Some(b), Some(floor))
                if parsed_release(b).is_none()
                    && parsed_release(d).is_some()
                    && let Some(released) = floor.released() =>
            {
                judge_from_released(b, released, d, live)
            }
            _ => judge_object(base, d, live),
        };
        out.push(apply_policies(v, d, live, input));
    }

    for b in input.baseline {
        if next_keys.contains_key(&b.key)
            || refused_by_problem.contains(&b.key)
            || unreadable.contains(&&*b.file)
        {
            continue;
        }
        // A document that failed to parse is refused above; it is not a removal.
        out.push(ObjectVerdict {
            transition: Transition::Remove,
            verdict: Verdict::Accepted,
            reason: None,
            message: match &b.projected_by {
                Some(p) => format!(
                    "no longer projected by ControlPlane {p}; the operator keeps the running child unless the plane allows its deletion (lockstep never deletes)"
                ),
                None => "removed from Git; lockstep never deletes from the cluster, the object keeps running".into(),
            },
            to: None,
            to_image: None,
            ..base_fields(b, Some(b))
        });
    }
    // A plane whose children moved carries its whole document with their
    // step anyway: its reconfiguration is not said twice. A child is in its
    // plane's file, so file and plane name find the plane. A child that only
    // left the plane (its service block dropped) moves nothing: the plane's
    // reconfiguration stays, and applies the plane without it.
    let moved: HashSet<(&str, &str)> = out
        .iter()
        .filter(|o| o.transition != Transition::Remove)
        .filter_map(|o| Some((&*o.file, o.projected_by.as_deref()?)))
        .collect();
    if !moved.is_empty() {
        let keep: Vec<bool> = out
            .iter()
            .map(|o| {
                !(o.transition == Transition::Reconfigure
                    && o.kind == Some(Kind::ControlPlane)
                    && o.name
                        .as_deref()
                        .is_some_and(|n| moved.contains(&(&*o.file, n))))
            })
            .collect();
        let mut keep = keep.into_iter();
        out.retain(|_| keep.next().unwrap_or(true));
    }
    out
}

/// The fleet's own rules on top of the operators' (`docs/policy.md`): an
/// accepted or held move to a higher release must cross no blocked edge
/// and carry every acknowledgement its edges ask for.
fn apply_policies(
    v: ObjectVerdict,
    d: &Desired,
    live: Option<&LiveStatus>,
    input: &CommitInput<'_>,
) -> ObjectVerdict {
    if input.policies.is_empty()
        || v.verdict == Verdict::Refused
        || !matches!(v.transition, Transition::Upgrade | Transition::Queued)
    {
        return v;
    }
    let release = |s: Option<&str>| {
        s.and_then(|s| TaggedRelease::parse(s).ok())
            .map(|t| t.release)
    };
    let (Some(kind), Some(from), Some(to)) =
        (v.kind, release(v.from.as_deref()), release(v.to.as_deref()))
    else {
        return v;
    };
    let (reason, message) = match input.policies.judge(kind, from, to, live, input.acks) {
        None => return v,
        Some(crate::policy::Refusal::Blocked(m)) => (Reason::UpgradeBlocked, m),
        Some(crate::policy::Refusal::AckRequired(m)) => (Reason::AckRequired, m),
    };
    ObjectVerdict {
        verdict: Verdict::Refused,
        reason: Some(reason),
        message,
        line: d.release_line,
        ..v
    }
}

/// The plane projecting `child`, as messages name it: `namespace/name`,
/// the plane's document found beside the child in its file. A child may
/// live in another namespace than its plane (`services.<svc>.namespace`),
/// so without the document only the name is said, never a guess.
fn plane_ns<'a>(child: &'a Desired, input: &'a CommitInput<'_>) -> String {
    let plane = child.projected_by.as_deref().unwrap_or_default();
    input
        .next
        .iter()
        .chain(input.elsewhere)
        .chain(input.baseline)
        .find(|d| d.key.kind == Kind::ControlPlane && d.key.name == plane && d.file == child.file)
        .map_or(plane.to_owned(), |d| format!("{}/{plane}", d.key.namespace))
}

/// A commit is refused when any of its objects is.
pub fn commit_verdict(objects: &[ObjectVerdict]) -> Verdict {
    if objects.iter().any(|o| o.verdict == Verdict::Refused) {
        Verdict::Refused
    } else {
        Verdict::Accepted
    }
}

fn problem_verdict(p: &Problem) -> ObjectVerdict {
    ObjectVerdict {
        kind: p.key.as_ref().map(|k| k.kind),
        namespace: p.key.as_ref().map(|k| k.namespace.clone()),
        name: p.key.as_ref().map(|k| k.name.clone()),
        file: p.file.clone(),
        line: p.line,
        projected_by: None,
        from: None,
        to: None,
        from_image: None,
        to_image: None,
        transition: Transition::Invalid,
        verdict: Verdict::Refused,
        reason: Some(Reason::ManifestInvalid),
        message: p.message.clone(),
    }
}

fn base_fields(d: &Desired, base: Option<&Desired>) -> ObjectVerdict {
    ObjectVerdict {
        kind: Some(d.key.kind),
        namespace: Some(d.key.namespace.clone()),
        name: Some(d.key.name.clone()),
        file: d.file.clone(),
        line: d.line,
        projected_by: d.projected_by.clone(),
        from: base.and_then(|b| b.release.clone()),
        to: d.release.clone(),
        from_image: base.and_then(|b| b.image.as_ref().map(|i| i.reference())),
        to_image: d.image.as_ref().map(|i| i.reference()),
        transition: Transition::Unchanged,
        verdict: Verdict::Accepted,
        reason: None,
        message: String::new(),
    }
}

fn accept(d: &Desired, base: Option<&Desired>, t: Transition, message: String) -> ObjectVerdict {
    ObjectVerdict {
        transition: t,
        message,
        ..base_fields(d, base)
    }
}

fn refuse(
    d: &Desired,
    base: Option<&Desired>,
    t: Transition,
    reason: Reason,
    message: String,
) -> ObjectVerdict {
    ObjectVerdict {
        transition: t,
        verdict: Verdict::Refused,
        reason: Some(reason),
        message,
        ..base_fields(d, base)
    }
}

/// An identity the baseline lacks but history knows: judged as a
/// transition from its last accepted state, wherever it was defined and
/// however long it was gone. The one way below the floor is the
/// [`crate::manifest::RECREATE_ANNOTATION`] naming exactly that floor.
fn judge_readd(floor: &Floor, d: &Desired, live: Option<&LiveStatus>) -> ObjectVerdict {
    // Removed while pinned by digest: it stands where its release was last
    // written ([`Floor::released`]).
    let floor = match floor.released() {
        Some(f) if parsed_release(d).is_some() => f,
        _ => floor,
    };
    let was = floor.last.release.as_deref().unwrap_or("no release");
    let origin = floor.origin();
    // The annotation drops the floor only for a release below it: at or
    // above the floor there is nothing to drop, and the object is judged
    // from its floor like any re-add (a skip past the floor stays a skip).
    let below = match (parsed_release(d), parsed_release(&floor.last)) {
        (Some(r), Some(f)) => r < f,
        _ => true,
    };
    if let Some(ack) = d.recreate_below.as_ref().filter(|_| below) {
        if floor.last.release.as_deref() == Some(ack.as_str()) {
            // Judged as new, against the live state only: the person says the
            // object was deleted and is created again from nothing.
            let mut v = judge_object(None, d, live);
            if v.verdict == Verdict::Accepted {
                v.message = format!(
                    "re-created from scratch below its floor {was} ({origin}), as annotation {} says; lockstep never deletes: the old object must be gone from the cluster{}",
                    crate::manifest::RECREATE_ANNOTATION,
                    if v.message.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", v.message)
                    }
                );
            }
            return v;
        }
        let mut v = refuse(
            d,
            Some(&floor.last),
            Transition::Invalid,
            Reason::ManifestInvalid,
            format!(
                "annotation {} is {ack:?}, but the floor it would drop is {was} ({origin}); write exactly the floor you mean to drop, or remove the annotation",
                crate::manifest::RECREATE_ANNOTATION
            ),
        );
        v.line = d.line;
        return v;
    }
    let mut v = judge_object(Some(&floor.last), d, live);
    let prefix = format!("re-added; last accepted at {was} ({origin}): ");
    match (v.verdict, v.transition) {
        (Verdict::Accepted, Transition::Unchanged) => {
            v.transition = Transition::Install;
            v.message = format!("re-added at its last accepted release {was} ({origin})");
        }
        (Verdict::Refused, Transition::Downgrade) => {
            v.message = format!(
                "{prefix}{}; removing an object from Git never deletes it from the cluster, so its floor stays (a deliberate re-creation from scratch: annotation {}: \"{was}\")",
                v.message,
                crate::manifest::RECREATE_ANNOTATION
            );
        }
        _ => v.message = format!("{prefix}{}", v.message),
    }
    v
}

/// Why a standalone definition of `key` must not be applied while the
/// cluster shows `plane` projecting it: the plane re-asserts its children on
/// every pass, also after it left Git (lockstep never deletes), so the two
/// writers would flap. One text for `check --live` and the daemon.
pub fn projected_in_cluster(key: &Key, plane: &Key) -> String {
    format!(
        "the cluster shows {key} projected by ControlPlane {}/{}, which re-asserts it on every pass (also after the plane left Git: lockstep never deletes); a standalone definition would flap against it. Change the plane in Git instead, or delete the plane from the cluster deliberately first",
        plane.namespace, plane.name
    )
}

/// The release `d` names, read as its kind reads it (Keystone's from its
/// image tag); `None` when it names none (Horizon, a digest) or one that
/// does not parse.
pub fn parsed_release(d: &Desired) -> Option<Release> {
    let raw = d.release.as_deref()?;
    if d.key.kind.release_source() == crate::kind::ReleaseSource::ImageTag {
        TaggedRelease::parse(raw).ok().map(|t| t.release)
    } else {
        Release::parse_strict(raw).ok()
    }
}

/// An object whose baseline names no release that parses (pinned by
/// digest, or a starting baseline taken as given at a commit the gate
/// refused) writes one again: it is judged from the last accepted release
/// its history knows, as if the release-less definitions between were not
/// there. The operator did the same: a digest freezes `installedRelease`
/// where it was.
fn judge_from_released(
    base: &Desired,
    floor: &Floor,
    d: &Desired,
    live: Option<&LiveStatus>,
) -> ObjectVerdict {
    let was = floor.last.release.as_deref().unwrap_or("no release");
    let origin = floor.origin();
    let mut v = judge_object(Some(&floor.last), d, live);
    let baseline = match &base.release {
        Some(r) => format!("names release {r:?}, which does not parse"),
        None => "names no release (pinned by digest)".to_owned(),
    };
    let prefix = format!(
        "the baseline {baseline}; judged from the last accepted release {was} ({origin}): "
    );
    if v.transition == Transition::Unchanged {
        v.transition = Transition::Patch;
        v.message = format!("{prefix}takes release {was} again");
    } else {
        v.message = format!("{prefix}{}", v.message);
    }
    v
}

/// The rules for one object (`docs/gate.md`, "Rules for one object in one commit").
pub fn judge_object(
    base: Option<&Desired>,
    d: &Desired,
    live: Option<&LiveStatus>,
) -> ObjectVerdict {
    let mut v = match live.and_then(|l| l.projected_by.as_ref()) {
        Some(plane) if d.projected_by.is_none() && d.key.kind != Kind::ControlPlane => refuse(
            d,
            base,
            Transition::Invalid,
            Reason::ProjectedChildEdited,
            projected_in_cluster(&d.key, plane),
        ),
        _ => judge_object_inner(base, d, live),
    };
    if v.verdict == Verdict::Refused {
        // Point at the field to fix, not just the document.
        v.line = match v.reason {
            Some(Reason::ImageReleaseMismatch) => d.image_line,
            Some(Reason::ManifestInvalid | Reason::ProjectedChildEdited) | None => d.line,
            Some(_) => d.release_line,
        };
    }
    v
}

fn judge_object_inner(
    base: Option<&Desired>,
    d: &Desired,
    live: Option<&LiveStatus>,
) -> ObjectVerdict {
    let what = d.key.kind;
    let image_text = d.image.as_ref().map(|i| i.reference()).unwrap_or_default();

    // 1. The release must parse.
    let rel = match &d.release {
        None => None,
        Some(raw) => {
            let parsed = if what.release_source() == crate::kind::ReleaseSource::ImageTag {
                TaggedRelease::parse(raw).map(|t| t.release)
            } else {
                Release::parse_strict(raw)
            };
            match parsed {
                Ok(r) => Some(r),
                Err(e) => {
                    let field = if what.release_source() == crate::kind::ReleaseSource::ImageTag {
                        "image tag (Keystone's release)"
                    } else {
                        "openStackRelease"
                    };
                    return refuse(
                        d,
                        base,
                        Transition::Invalid,
                        Reason::VersionParseError,
                        format!("{field}: {e}"),
                    );
                }
            }
        }
    };

    // 2. Release and image move together: a tag naming a release must name this one.
    if let (Some(lock), Some(image)) = (&d.lockstep_release, &d.image)
        && let (Some(tagged), Ok(lock_rel)) = (image.tag_release(), Release::parse_strict(lock))
        && tagged.release != lock_rel
    {
        let whose = if d.projected_by.is_some() {
            format!("the ControlPlane's openStackRelease is {lock}")
        } else {
            format!("openStackRelease is {lock}")
        };
        let advice = if d.image_overridden {
            "; the override replaces the default image verbatim, so bump its tag with the release (the plane's webhook does not check it, the child would park)"
        } else {
            "; bump them together"
        };
        return refuse(
            d,
            base,
            Transition::Invalid,
            Reason::ImageReleaseMismatch,
            format!(
                "image {image_text} names release {}, but {whose}{advice}",
                tagged.release
            ),
        );
    }

    // The last good release: Git's baseline, or where Git has none, the cluster's.
    let base_rel = base.and_then(parsed_release);
    let live_installed = live
        .and_then(LiveStatus::installed)
        .and_then(|s| TaggedRelease::parse(s).ok())
        .map(|t| t.release);
    let image_changed = match base {
        Some(b) => b.image != d.image,
        None => true,
    };

    // 3. An upgrade in flight in the cluster decides first.
    if let (Some(rel), Some(l)) = (rel, live)
        && let Some(target_raw) = l.in_flight_target()
        && let Ok(target) = TaggedRelease::parse(target_raw).map(|t| t.release)
    {
        let phase = l.phase().unwrap_or("syncing");
        let installed_text = l.installed().unwrap_or("nothing");
        if rel == target {
            // Still heading where the cluster is heading: judge against Git below.
        } else if Some(rel) == live_installed {
            if d.projected_by.is_some() || what == Kind::ControlPlane {
                return refuse(
                    d,
                    base,
                    Transition::Downgrade,
                    Reason::DowngradeNotSupported,
                    format!(
                        "the cluster is upgrading {installed_text} → {target} ({phase}); a projected service has no abort path (the plane re-asserts its children): keep {target} and let lockstep repair forward"
                    ),
                );
            }
            if !what.has_phase_machine() {
                return refuse(
                    d,
                    base,
                    Transition::Downgrade,
                    Reason::DowngradeNotSupported,
                    format!(
                        "{what} has no phase machine to abort: its single db sync to {target} may already have migrated the schema; keep {target}"
                    ),
                );
            }
            if l.phase() == Some("Contracting") {
                return refuse(
                    d,
                    base,
                    Transition::Abort,
                    Reason::AbortUnsafe,
                    format!(
                        "the cluster is Contracting {installed_text} → {target}; contract is the one non-additive phase, so aborting now is unsafe: let it finish"
                    ),
                );
            }
            return accept(
                d,
                base,
                Transition::Abort,
                format!(
                    "aborts the upgrade {installed_text} → {target} ({phase}); the operator deletes the phase Jobs and returns to {rel}"
                ),
            );
        } else if rel == target.next() {
            if !image_changed {
                return refuse(
                    d,
                    base,
                    Transition::Queued,
                    Reason::ImageReleaseMismatch,
                    format!(
                        "release moves to {rel} but the image stays {image_text}; bump the image in the same commit"
                    ),
                );
            }
            return ObjectVerdict {
                transition: Transition::Queued,
                verdict: Verdict::Held,
                reason: Some(Reason::UpgradeInProgress),
                message: format!(
                    "held: the cluster is still upgrading {installed_text} → {target} ({phase}); {rel} is applied once that completes"
                ),
                ..base_fields(d, base)
            };
        } else {
            return refuse(
                d,
                base,
                Transition::Retarget,
                Reason::UpgradeTargetChanged,
                format!(
                    "the cluster is upgrading {installed_text} → {target} ({phase}); {rel} is neither the target, the installed release nor the next hop {}: changing the target mid-upgrade stalls it",
                    target.next()
                ),
            );
        }
    }

    // 4. Never below what the cluster already runs.
    if let (Some(rel), Some(inst)) = (rel, live_installed)
        && rel < inst
    {
        return refuse(
            d,
            base,
            Transition::Downgrade,
            Reason::DowngradeNotSupported,
            format!(
                "the cluster already runs {inst} (status.installedRelease); {rel} would be a downgrade"
            ),
        );
    }

    // 5. Against the baseline (or, for an object Git did not have, the cluster).
    let from = base_rel.or(if base.is_none() { live_installed } else { None });
    let Some(from) = from else {
        if base.is_none() {
            return accept(d, base, Transition::Install, image_text.clone());
        }
        // No release on either side (Horizon, digest-pinned Keystone), or a
        // baseline whose release never parsed: only the image can move.
        return match (rel, image_changed) {
            (Some(r), _) => accept(
                d,
                base,
                Transition::Patch,
                format!("takes release {r} (the baseline had none that parses)"),
            ),
            (None, true) => accept(d, base, Transition::Patch, format!("image {image_text}")),
            (None, false) => accept(d, base, Transition::Unchanged, String::new()),
        };
    };
    let Some(rel) = rel else {
        // The object had a release and now has none (Keystone moved to a digest).
        return accept(
            d,
            base,
            Transition::Patch,
            format!(
                "pinned by digest {image_text}; the operator freezes its release tracking at {from}"
            ),
        );
    };
    match step(from, rel) {
        Step::Same if image_changed => accept(
            d,
            base,
            if base.is_none() {
                Transition::Install
            } else {
                Transition::Patch
            },
            format!("image {image_text}"),
        ),
        Step::Same => accept(
            d,
            base,
            if base.is_none() {
                Transition::Install
            } else {
                Transition::Unchanged
            },
            if base.is_none() {
                format!("adopts what the cluster already runs ({image_text})")
            } else {
                String::new()
            },
        ),
        Step::Next if what == Kind::ControlPlane => accept(
            d,
            base,
            Transition::Upgrade,
            "every projected service follows".to_owned(),
        ),
        Step::Next if !image_changed => refuse(
            d,
            base,
            Transition::Upgrade,
            Reason::ImageReleaseMismatch,
            format!(
                "release moves {from} → {rel} but the image stays {image_text}; bump the image in the same commit (the Jobs would run the old binary as no-ops and promote a release nothing migrated to)"
            ),
        ),
        Step::Next => accept(d, base, Transition::Upgrade, format!("image {image_text}")),
        Step::Skip => refuse(
            d,
            base,
            Transition::Skip,
            Reason::UpgradePathInvalid,
            if from.is_slurp() && rel == from.next().next() {
                format!(
                    "{from} → {rel} skips {mid}; upstream OpenStack supports this SLURP upgrade directly, but the C5C3 operators accept one release at a time: take it as two hops, {from} → {mid} first, then {rel} in a later commit, or let an UpgradePlan with to: \"{rel}\" walk it one hop at a time (plans/README.md)",
                    mid = from.next()
                )
            } else {
                format!(
                    "{from} → {rel} skips {}; move one release at a time: {from} → {} first, then {rel} in a later commit, or let an UpgradePlan with to: \"{rel}\" walk it one hop at a time (plans/README.md)",
                    skipped(from, rel),
                    from.next()
                )
            },
        ),
        Step::Down => refuse(
            d,
            base,
            Transition::Downgrade,
            Reason::DowngradeNotSupported,
            if d.projected_by.is_some() || what == Kind::ControlPlane {
                format!(
                    "{from} → {rel} is a downgrade; a ControlPlane has no abort or downgrade path: keep {from} (repair forward)"
                )
            } else {
                format!("{from} → {rel} is a downgrade; database schemas only move forward")
            },
        ),
    }
}

/// The releases strictly between `from` and `to`, for the message.
fn skipped(from: Release, to: Release) -> String {
    let mut between = Vec::new();
    let mut r = from.next();
    while r < to && between.len() < 4 {
        between.push(r.to_string());
        r = r.next();
    }
    if r < to {
        between.push("…".into());
    }
    between.join(", ")
}

#[cfg(test)]
mod floors_tests {
    use super::*;
    use proptest::prelude::*;

    fn floor(key: &Key, line: u32) -> Arc<Floor> {
        Arc::new(Floor {
            last: Desired {
                key: key.clone(),
                file: "f.yaml".into(),
                line,
                projected_by: None,
                release: Some("2026.1".into()),
                release_line: 1,
                lockstep_release: None,
                image: None,
                image_line: 0,
                image_overridden: false,
                recreate_below: None,
                fingerprint: None,
            },
            commit: None,
            released: None,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Floors answer as one plain map would, through any mix of sets,
        /// folds and copies, and a copy never sees what is set after it
        /// (the daemon judges on a copy while the original is held).
        #[test]
        fn floors_are_a_map_whose_copies_are_independent(
            ops in proptest::collection::vec((0u8..4, 0u32..3000, 0u32..5), 1..400),
        ) {
            let mut floors = Floors::default();
            let mut model: HashMap<Key, u32> = HashMap::new();
            let mut copies: Vec<(Floors, HashMap<Key, u32>)> = Vec::new();
            for (op, k, line) in ops {
                // Many keys for a few hundred operations: a fold happens.
                let key = Key::new(Kind::Nova, "ns", format!("n{}", k % 2000));
                match op {
                    0 | 1 => {
                        floors.insert(key.clone(), floor(&key, line));
                        model.insert(key.clone(), line);
                        for i in 0..24u32 {
                            let key = Key::new(Kind::Nova, "bulk", format!("b{k}-{i}"));
                            floors.insert(key.clone(), floor(&key, i));
                            model.insert(key, i);
                        }
                    }
                    2 => floors.fold(),
                    _ if copies.len() < 6 => copies.push((floors.clone(), model.clone())),
                    _ => {}
                }
                prop_assert_eq!(floors.get(&key).map(|f| f.last.line), model.get(&key).copied());
            }
            let final_keys: Vec<Key> = model.keys().cloned().collect();
            copies.push((floors, model));
            for (floors, model) in &copies {
                prop_assert_eq!(floors.is_empty(), model.is_empty());
                for (k, line) in model {
                    prop_assert!(floors.contains_key(k));
                    prop_assert_eq!(floors.get(k).map(|f| f.last.line), Some(*line));
                }
                // Nothing set after the copy was taken shows in it.
                for k in final_keys.iter().filter(|k| !model.contains_key(*k)) {
                    prop_assert!(!floors.contains_key(k) && floors.get(k).is_none());
                }
                let absent = Key::new(Kind::Nova, "ns", "absent");
                prop_assert!(!floors.contains_key(&absent) && floors.get(&absent).is_none());
            }
        }
    }
}
