//! What the daemon does next, as pure functions over Git's accepted history
//! and the cluster's state: which hop of which unit to apply, which to
//! follow, and what every commit status says.
//!
//! lockstep keeps no state of its own. Git says where each unit must go (the
//! chain of accepted steps); the cluster's spec says how far lockstep got
//! (the last step it applied) and its status how far the operator got. Both
//! survive a restart, so a restarted daemon computes the same next action:
//! it never applies a hop twice, never skips one, and re-posts the statuses
//! the state implies (the forge deduplicates).
//!
//! A *unit* is what lockstep applies: a ControlPlane (with its projected
//! children, which it follows) or a standalone service. A *step* is one
//! accepted target of a unit; steps of consecutive commits that keep the
//! release are folded into one (applying the intermediate image would be a
//! roll for nothing), so every step is at most one release hop from the
//! previous one and the daemon applies them one at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::follow::Progress;
use crate::gate::{Transition, Verdict};
use crate::kind::{Key, Kind, ReleaseSource};
use crate::release::ImageRef;
use crate::status::describe;
use crate::status::{Context, State, Status};
use crate::verdict::CheckReport;

/// One accepted target of a unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The newest commit folded into this step: its tree holds the document
    /// to apply.
    pub sha: String,
    /// Every commit folded into this step, oldest first.
    pub commits: Vec<String>,
    /// What each commit a later one was folded over asked its followed
    /// objects to run, aligned with `commits` (all but the newest, whose
    /// targets are the step's own): how [`settled`] tells such a commit's
    /// work over while the step is applied again for the later one.
    pub earlier: Vec<Vec<(Key, Target)>>,
    /// The file (in `sha`'s tree) holding the unit's document.
    pub file: Arc<str>,
    pub from: Option<String>,
    pub release: Option<String>,
    /// A standalone service's image reference.
    pub image: Option<String>,
    /// A plane's projected children that this step changes, with their
    /// targets; children carried over from earlier steps stay listed.
    pub children: BTreeMap<Key, Target>,
    /// An accepted abort (`docs/gate.md`, "Live rules in the daemon"): sets a
    /// standalone service back to the release it still has installed while
    /// the hop before it is in flight. It is applied without waiting for
    /// that hop, which it ends.
    pub abort: bool,
    /// A commit folded into the step changed the document but neither
    /// release nor image (`Transition::Reconfigure`): the step is applied
    /// even where the cluster carries no [`APPLIED_ANNOTATION`] to compare
    /// with (an object applied by an older lockstep, or adopted).
    pub reconfigured: bool,
    /// The unit's whole document at `sha`, parsed when the step was judged:
    /// what an apply sends (server-side apply owns what it sends, so a
    /// smaller apply would drop fields). An apply never reads Git again; a
    /// document that could not be read is an error naming file and commit,
    /// and nothing of the step is applied.
    pub document: StepDocument,
}

/// A step's document, or why it could not be read from its commit.
pub type StepDocument = Result<Document, String>;

/// A unit's whole document as compact JSON text, shared.
///
/// Every step of every chain keeps its document for as long as the daemon
/// runs (an apply never reads Git again), so the form kept matters: a
/// parsed `serde_json::Value` tree costs several times its text in small
/// allocations, which for a fleet of thousands of units was most of the
/// daemon's memory (docs/performance.md, "The daemon"). The text is parsed when the step is
/// applied; a text that does not parse is an error naming the step, and
/// nothing of it is applied. Clones share one allocation: the shell hands
/// out one `Document` per distinct text, so steps that carry the same
/// document (a blob read at several commits) hold it once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Document {
    text: Arc<str>,
    /// [`Document::digest`], computed once.
    digest: [u8; 16],
}

/// The annotation each apply writes on the unit's object: the
/// [`Document::digest`] of the document applied. It is how a later pass
/// (or a restarted daemon) tells that the cluster runs a step's document,
/// not only its release and image (a reconfiguration changes neither).
pub const APPLIED_ANNOTATION: &str = "lockstep.c5c3.io/applied";

impl Document {
    /// The document as JSON text (one line, no insignificant space).
    pub fn from_value(value: &serde_json::Value) -> Result<Self, String> {
        serde_json::to_string(value)
            .map(|t| Self::from_text(Arc::from(t)))
            .map_err(|e| format!("cannot keep the document: {e}"))
    }

    /// Text already produced by [`Document::from_value`] (or an interned
    /// copy of one).
    pub fn from_text(text: Arc<str>) -> Self {
        use sha2::Digest as _;
        let mut digest = [0u8; 16];
        digest.copy_from_slice(&sha2::Sha256::digest(text.as_bytes())[..16]);
        Self { text, digest }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The shared text, for interning.
    pub fn shared(&self) -> &Arc<str> {
        &self.text
    }

    /// The first 16 bytes of the text's SHA-256, in hex: what
    /// [`APPLIED_ANNOTATION`] holds once this document is applied.
    pub fn digest(&self) -> String {
        hex::encode(self.digest)
    }

    /// The document again as a value, for an apply.
    pub fn parse(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.text)
    }

    /// Whether two documents are one allocation (not only equal text).
    pub fn same(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.text, &b.text)
    }
}

/// Where one followed object must end up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub release: Option<String>,
    pub image: Option<String>,
}

impl Target {
    /// What the tracker compares `installedRelease` with: Keystone's is its
    /// tag; Horizon tracks none.
    pub fn follow_to(&self, kind: Kind) -> String {
        match kind.release_source() {
            ReleaseSource::Field => self.release.clone().unwrap_or_default(),
            ReleaseSource::ImageTag => self
                .image
                .as_deref()
                .and_then(|i| ImageRef::parse_reference(i).ok())
                .and_then(|i| i.tag().map(str::to_owned))
                .unwrap_or_default(),
            ReleaseSource::None => String::new(),
        }
    }
}

/// A unit's accepted steps, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub unit: Key,
    /// The release before the first step (`None`: the unit is new).
    pub from: Option<String>,
    pub steps: Vec<Step>,
    /// Set when an accepted commit after the last step removed the unit
    /// from Git, or handed a standalone service to a ControlPlane that now
    /// projects it (a later step clears it). Git's branch no longer holds
    /// the unit as its own object, so nothing of its chain is applied any
    /// more: not an install of an object the cluster lacks, not a hop the
    /// cluster has not started. Nothing is deleted either; a hop already in
    /// flight is still followed to its end (`docs/gate.md`, "Identity over
    /// time").
    pub removed: Option<Removal>,
}

/// Why a unit's chain ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// The accepted commit that removed it.
    pub sha: String,
    /// The ControlPlane (name) projecting the object since, when a
    /// standalone service was handed to one.
    pub plane: Option<String>,
}

impl Removal {
    /// "removed from Git in <commit>", or "handed to ControlPlane <name>
    /// in <commit>".
    pub fn describe(&self) -> String {
        match &self.plane {
            None => format!("removed from Git in {}", short(&self.sha)),
            Some(p) => format!("handed to ControlPlane {p} in {}", short(&self.sha)),
        }
    }
}

impl Step {
    /// The commit a step's per-object statuses go on: its first, the one
    /// that moved the release. Later commits of the same release fold into
    /// the step (`push_step`) and move `sha`; a status posted on the commit
    /// of the moment would be left behind on an older one, pending.
    pub fn hop_commit(&self) -> &str {
        self.commits.first().unwrap_or(&self.sha)
    }
}

impl Chain {
    /// The followed objects of step `i`: a plane's children, or the unit.
    pub fn followed(&self, i: usize) -> Vec<(Key, Target)> {
        let Some(s) = self.steps.get(i) else {
            return Vec::new();
        };
        if self.unit.kind == Kind::ControlPlane {
            s.children
                .iter()
                .map(|(k, t)| (k.clone(), t.clone()))
                .collect()
        } else {
            vec![(
                self.unit.clone(),
                Target {
                    release: s.release.clone(),
                    image: s.image.clone(),
                },
            )]
        }
    }
}

/// The chains of every unit that an accepted commit of `report` changes.
/// Removals are never applied (nothing is deleted from a cluster); they end
/// the chain ([`Chain::removed`]).
/// `plane_key(name, file, sha)` finds a ControlPlane's key when a commit
/// changes only its children (an override's image): verdicts name the plane
/// of a child, not its namespace.
pub fn chains<M>(
    report: &CheckReport<M>,
    plane_key: impl Fn(&str, &str, &str) -> Option<Key>,
    document: impl Fn(&str, &str, &Key) -> StepDocument,
) -> BTreeMap<Key, Chain> {
    let mut out = BTreeMap::new();
    extend_chains(&mut out, &report.commits, plane_key, document);
    out.into_iter()
        .map(|(k, c)| (k, Arc::unwrap_or_clone(c)))
        .collect()
}

/// Extends `out` with the accepted commits of `commits` (the next ones after
/// those `out` was built from). Only the chains these commits touch get a
/// new `Arc`: the daemon tells changed units by pointer. `document(sha,
/// file, key)` reads a step's document from Git, once per step as judged
/// (a step that later commits fold into is read once more, at its newest
/// commit).
pub fn extend_chains(
    out: &mut BTreeMap<Key, Arc<Chain>>,
    commits: &[crate::verdict::CommitReport],
    plane_key: impl Fn(&str, &str, &str) -> Option<Key>,
    document: impl Fn(&str, &str, &Key) -> StepDocument,
) {
    // The steps these commits pushed or folded into: their documents are
    // read once, after the last fold.
    let mut touched: BTreeMap<Key, std::collections::BTreeSet<usize>> = BTreeMap::new();
    // A held commit is on the branch, queued behind the hop in flight: its
    // steps wait in the chain like any later step.
    for c in commits
        .iter()
        .filter(|c| matches!(c.verdict, Verdict::Accepted | Verdict::Held))
    {
        // Children first collected per plane name, then attached to the
        // plane's step of this commit; `None`: the plane no longer projects
        // the child (its service block dropped: the operator keeps it
        // running, and the plane's steps stop following it).
        let mut children: BTreeMap<String, Vec<(Key, Option<Target>)>> = BTreeMap::new();
        let mut planes: BTreeMap<String, PlaneChange> = BTreeMap::new();
        // Planes this commit removes: their children go with them.
        let gone: std::collections::BTreeSet<&str> = c
            .objects
            .iter()
            .filter(|o| {
                o.transition == Transition::Remove
                    && o.projected_by.is_none()
                    && o.kind == Some(Kind::ControlPlane)
            })
            .filter_map(|o| o.name.as_deref())
            .collect();
        for o in &c.objects {
            let Some(key) = o.key() else { continue };
            // A unit gone from Git (a plane, or a standalone service; a
            // child leaving with its plane is the plane's removal), or a
            // standalone service a plane projects from now on (a child's
            // key has a chain of its own only as a standalone service).
            let ended = match (&o.projected_by, o.transition) {
                (None, Transition::Remove) => Some(None),
                (Some(plane), t) if t != Transition::Remove => Some(Some(plane.clone())),
                _ => None,
            };
            if let Some(plane) = ended
                && let Some(chain) = out.get_mut(&key)
            {
                Arc::make_mut(chain).removed = Some(Removal {
                    sha: c.sha.clone(),
                    plane,
                });
            }
            if o.transition == Transition::Remove {
                if let Some(plane) = &o.projected_by
                    && !gone.contains(plane.as_str())
                {
                    children.entry(plane.clone()).or_default().push((key, None));
                }
                continue;
            }
            if !applies(o) {
                continue;
            }
            let target = Target {
                release: as_spec_release(key.kind, o.to.as_deref()),
                image: o.to_image.clone(),
            };
            match (&o.projected_by, key.kind) {
                (Some(plane), _) => children
                    .entry(plane.clone())
                    .or_default()
                    .push((key, Some(target))),
                (None, Kind::ControlPlane) => {
                    planes.insert(
                        key.name.clone(),
                        (
                            key,
                            o.from.clone(),
                            o.to.clone(),
                            o.file.clone(),
                            o.transition,
                        ),
                    );
                }
                (None, kind) => push_step(
                    out,
                    &mut touched,
                    key,
                    &c.sha,
                    o.file.clone(),
                    as_spec_release(kind, o.from.as_deref()),
                    target,
                    BTreeMap::new(),
                    o.transition,
                ),
            }
        }
        // A child changing without its plane (an override's image) is still
        // a step of the plane: find the plane's key from an earlier step.
        for (plane, kids) in children {
            if !planes.contains_key(&plane) && kids.iter().all(|(_, t)| t.is_none()) {
                // Only children dropped: nothing to roll (the operator
                // keeps them running), so no step and no apply; the plane's
                // steps stop following them.
                let file = kids
                    .first()
                    .and_then(|(k, _)| child_file(c, k))
                    .unwrap_or_else(|| Arc::from(""));
                if let Some(key) = plane_key(&plane, &file, &c.sha)
                    && let Some(chain) = out.get_mut(&key)
                    && let Some(last) = Arc::make_mut(chain).steps.last_mut()
                {
                    for (k, _) in &kids {
                        last.children.remove(k);
                    }
                }
                continue;
            }
            let (key, from, to, file, how) = match planes.remove(&plane) {
                Some(p) => p,
                None => {
                    let file = kids
                        .first()
                        .map(|(k, _)| k.clone())
                        .and_then(|k| child_file(c, &k))
                        .unwrap_or_else(|| Arc::from(""));
                    let Some(key) = plane_key(&plane, &file, &c.sha) else {
                        continue;
                    };
                    let last = out.get(&key).and_then(|ch| ch.steps.last());
                    let release = last.and_then(|s| s.release.clone());
                    (key, release.clone(), release, file, Transition::Patch)
                }
            };
            let mut map: BTreeMap<Key, Target> = out
                .get(&key)
                .and_then(|ch| ch.steps.last())
                .map(|s| s.children.clone())
                .unwrap_or_default();
            for (k, t) in kids {
                match t {
                    Some(t) => map.insert(k, t),
                    None => map.remove(&k),
                };
            }
            push_step(
                out,
                &mut touched,
                key,
                &c.sha,
                file,
                from,
                Target {
                    release: to,
                    image: None,
                },
                map,
                how,
            );
        }
        for (_, (key, from, to, file, how)) in planes {
            let map = out
                .get(&key)
                .and_then(|ch| ch.steps.last())
                .map(|s| s.children.clone())
                .unwrap_or_default();
            push_step(
                out,
                &mut touched,
                key,
                &c.sha,
                file,
                from,
                Target {
                    release: to,
                    image: None,
                },
                map,
                how,
            );
        }
    }
    for (key, steps) in touched {
        let Some(chain) = out.get_mut(&key) else {
            continue;
        };
        let chain = Arc::make_mut(chain);
        for i in steps {
            if let Some(s) = chain.steps.get_mut(i) {
                s.document = document(&s.sha, &s.file, &key);
            }
        }
    }
}

/// A release as a verdict names it, the way the cluster's specs are read
/// ([`spec_release`]): Keystone's release is its image tag, and its patch
/// tag `2026.1-p1` is release 2026.1, so the patch folds into the step of
/// its release like any other kind's image patch. Read as written, a
/// Keystone patch was a step of a release the cluster never showed: the
/// unit was applied back and forth between the patch and the step before
/// it, for ever.
fn as_spec_release(kind: Kind, release: Option<&str>) -> Option<String> {
    let r = release?;
    Some(match kind.release_source() {
        ReleaseSource::ImageTag => crate::release::TaggedRelease::parse(r)
            .map(|t| t.release.to_string())
            .unwrap_or_else(|_| r.to_owned()),
        ReleaseSource::Field | ReleaseSource::None => r.to_owned(),
    })
}

/// Whether an accepted object is something lockstep applies (a step of its
/// unit's chain): removals are never applied, unchanged objects need nothing.
fn applies(o: &crate::gate::ObjectVerdict) -> bool {
    matches!(
        o.transition,
        Transition::Install
            | Transition::Upgrade
            | Transition::Patch
            | Transition::Reconfigure
            | Transition::Abort
            | Transition::Queued
    )
}

/// A plane's own change in one commit: key, from, to, file, transition.
type PlaneChange = (Key, Option<String>, Option<String>, Arc<str>, Transition);

fn child_file(c: &crate::verdict::CommitReport, key: &Key) -> Option<Arc<str>> {
    c.objects
        .iter()
        .find(|o| o.key().as_ref() == Some(key))
        .map(|o| o.file.clone())
}

#[allow(clippy::too_many_arguments)]
fn push_step(
    out: &mut BTreeMap<Key, Arc<Chain>>,
    touched: &mut BTreeMap<Key, std::collections::BTreeSet<usize>>,
    key: Key,
    sha: &str,
    file: Arc<str>,
    from: Option<String>,
    target: Target,
    children: BTreeMap<Key, Target>,
    how: Transition,
) {
    let abort = how == Transition::Abort;
    let reconfigured = how == Transition::Reconfigure;
    let chain = Arc::make_mut(out.entry(key.clone()).or_insert_with(|| {
        Arc::new(Chain {
            unit: key,
            from: from.clone(),
            steps: Vec::new(),
            removed: None,
        })
    }));
    // Back in Git (re-added, from its floor): the chain goes on.
    chain.removed = None;
    if let Some(last) = chain.steps.last_mut()
        && last.release == target.release
        && !abort
        && !last.abort
    {
        // Same release: fold into the previous step (a patch on top of a
        // hop is applied as one).
        let asked = if chain.unit.kind == Kind::ControlPlane {
            last.children
                .iter()
                .map(|(k, t)| (k.clone(), t.clone()))
                .collect()
        } else {
            vec![(
                chain.unit.clone(),
                Target {
                    release: last.release.clone(),
                    image: last.image.clone(),
                },
            )]
        };
        last.earlier.push(asked);
        last.sha = sha.to_owned();
        last.commits.push(sha.to_owned());
        last.file = file;
        last.image = target.image.or(last.image.take());
        last.children = children;
        last.reconfigured |= reconfigured;
        touched
            .entry(chain.unit.clone())
            .or_default()
            .insert(chain.steps.len() - 1);
        return;
    }
    touched
        .entry(chain.unit.clone())
        .or_default()
        .insert(chain.steps.len());
    chain.steps.push(Step {
        sha: sha.to_owned(),
        commits: vec![sha.to_owned()],
        earlier: Vec::new(),
        file,
        from,
        release: target.release,
        image: target.image,
        children,
        abort,
        reconfigured,
        document: Err(NOT_READ.into()),
    });
}

/// A step's document before `extend_chains` reads it (never seen outside).
const NOT_READ: &str = "the document was not read";

/// The cluster's view of a unit: its spec (what lockstep applied last) and
/// the followed objects' specs and progress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitState {
    /// `None`: the unit does not exist in the cluster.
    pub spec: Option<Target>,
    /// Per followed object: its spec and the tracker's progress towards the
    /// step the spec matches.
    pub objects: BTreeMap<Key, ObjectState>,
    /// The ControlPlane the cluster shows projecting the unit's object, if
    /// one does (`LiveStatus::projected_by`).
    pub projected_by: Option<Key>,
    /// The unit object's [`APPLIED_ANNOTATION`]: the digest of the document
    /// lockstep applied to it last (`None`: none there).
    pub applied: Option<String>,
    /// The release the cluster had for the unit when it was last read,
    /// when it is absent now: deleted outside Git (a person, another tool).
    /// Its database outlives it, so re-creating it at Git's newest release
    /// would have the operator migrate the database across every release
    /// in between. `None`: never seen, or unknown (a restart forgets it).
    pub gone_from: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectState {
    pub spec: Target,
    pub progress: Progress,
    /// `status.installedRelease`: the release the operator last finished a
    /// hop to (`None`: none reported, or a kind that tracks none).
    pub installed: Option<String>,
}

impl ObjectState {
    /// Whether the spec the cluster shows is the one `t` asks for (a kind
    /// without a release field is matched on its image alone).
    pub fn spec_matches(&self, kind: Kind, t: &Target) -> bool {
        let tracks = kind.release_source() != ReleaseSource::None;
        (!tracks || t.release.is_none() || self.spec.release == t.release)
            && (t.image.is_none() || self.spec.image.is_none() || self.spec.image == t.image)
    }
}

/// The release an object's spec names, the way Git's verdicts name it.
pub fn spec_release(kind: Kind, release: Option<&str>, image: Option<&ImageRef>) -> Option<String> {
    match kind.release_source() {
        ReleaseSource::Field => release.map(str::to_owned),
        ReleaseSource::ImageTag => image
            .and_then(|i| i.tag_release())
            .map(|t| t.release.to_string()),
        ReleaseSource::None => release.map(str::to_owned),
    }
}

/// The daemon's next move for one unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Apply step `i` (server-side apply of its document).
    Apply(usize),
    /// Step `i` is applied and in flight: follow (and repair) it.
    Follow(usize),
    /// The last step is applied and complete.
    Done(usize),
    /// The cluster is somewhere Git's accepted chain does not lead through:
    /// lockstep will not guess (it never goes backwards).
    Blocked(String),
    /// Git removed the unit (or handed it to a plane, `by`) before step
    /// `at` reached the cluster: steps before `at` are done, the others are
    /// never applied ([`Chain::removed`]). Nothing waits and no person needs
    /// to act.
    Removed { at: usize, by: Removal },
}

/// Decides the next move. `complete(i)` says whether every followed object
/// of step `i` is complete (the caller's trackers know).
pub fn next(chain: &Chain, state: &UnitState, complete: impl Fn(usize) -> bool) -> Next {
    // Gone from Git: an apply would put back what the branch no longer
    // holds (and, for a standalone service a plane took over, fight the
    // plane). Nothing waits on a person either: the unit is not Git's.
    if let Some(by) = &chain.removed {
        return match next_step(chain, state, complete) {
            Next::Apply(i) => Next::Removed {
                // Not in the cluster: none of the steps reached it.
                at: if state.spec.is_some() { i } else { 0 },
                by: by.clone(),
            },
            Next::Blocked(_) => Next::Removed {
                at: passed(chain, state),
                by: by.clone(),
            },
            n => n,
        };
    }
    // A standalone unit whose object a live ControlPlane projects: the same
    // rule `check --live` refuses it by (`gate::projected_in_cluster`).
    if chain.unit.kind != Kind::ControlPlane
        && let Some(plane) = &state.projected_by
    {
        return Next::Blocked(crate::gate::projected_in_cluster(&chain.unit, plane));
    }
    let n = next_step(chain, state, complete);
    // Whatever the chain says, an apply never takes a running object to a
    // lower release: the gate keeps accepted chains from going down, and
    // this keeps a re-creation below the floor (`docs/gate.md`, "Identity
    // over time") from downgrading an object that was never deleted.
    if let Next::Apply(i) = n
        && !chain.steps[i].abort
        && let Some(spec) = &state.spec
        && let (Some(running), Some(wanted)) = (
            spec.release.as_deref().and_then(release_of),
            chain.steps[i].release.as_deref().and_then(release_of),
        )
        && wanted < running
    {
        return Next::Blocked(format!(
            "{} runs {running} in the cluster and Git's accepted step is {wanted}: lockstep never applies a lower release; delete the object first if it is really to be created again from scratch",
            chain.unit
        ));
    }
    // Nor below what the operator finished installing: a spec set back
    // outside Git (`kubectl edit`) matches an older step, whose apply would
    // ask the operator for a downgrade. Git's step at the installed release
    // is re-asserted instead. The same holds for a step already applied
    // and followed: the operator refuses to go down (or waits), so
    // following it would wedge the chain for ever, Git's later steps
    // queued behind it. Only the step's own objects count: a plane's
    // former child (a service it dropped, run standalone since) is not
    // the plane's to follow.
    if let Next::Apply(i) | Next::Follow(i) = n
        && !chain.steps[i].abort
        && let Some(wanted) = chain.steps[i].release.as_deref().and_then(release_of)
        && let Some(installed) = installed_of(chain, i, state)
        && wanted < installed
    {
        if let Some(j) = chain
            .steps
            .iter()
            .rposition(|s| !s.abort && s.release.as_deref().and_then(release_of) == Some(installed))
            && j > i
        {
            return Next::Apply(j);
        }
        return Next::Blocked(format!(
            "{} has {installed} installed in the cluster and Git's accepted step is {wanted}: lockstep never applies a lower release; set the release in Git forward, or delete the object first if it is really to be created again from scratch",
            chain.unit
        ));
    }
    // Nor past a hop the operator never finished: a spec set forward
    // outside Git (`kubectl edit` to a later accepted release) matches a
    // later step, whose apply or follow would count the hops between as
    // done (their statuses success) and ask the operator to skip them.
    // A plane's children each count: one still mid-hop below `from`
    // (Nova migrating while Keystone finished) is a hop not finished.
    if let Next::Apply(i) | Next::Follow(i) = n
        && !chain.steps[i].abort
        && let Some(from) = chain.steps[i].from.as_deref().and_then(release_of)
        && let Some(installed) = installed_on(chain, i, state).min()
        && installed < from
    {
        return Next::Blocked(format!(
            "{} has {installed} installed in the cluster, but its spec is at Git's step to {} (from {from}): the hops between were never made; set the spec back to Git's next step from {installed} (`kubectl edit`), and lockstep goes on from there",
            chain.unit,
            chain.steps[i].release.as_deref().unwrap_or("?"),
        ));
    }
    n
}

/// The releases the operator reports installed on step `i`'s own objects
/// (a plane's children, or the service itself).
fn installed_on(
    chain: &Chain,
    i: usize,
    state: &UnitState,
) -> impl Iterator<Item = crate::release::Release> {
    chain
        .followed(i)
        .into_iter()
        .filter_map(|(k, _)| state.objects.get(&k))
        .filter_map(|o| o.installed.as_deref().and_then(release_of))
}

/// The highest of them: where the cluster is furthest on.
fn installed_of(chain: &Chain, i: usize, state: &UnitState) -> Option<crate::release::Release> {
    installed_on(chain, i, state).max()
}

/// How many steps of a removed unit the cluster is past, when it runs a
/// release off the chain (a plane that took the object over moved it on):
/// those below the release it runs.
fn passed(chain: &Chain, state: &UnitState) -> usize {
    let running = state
        .spec
        .as_ref()
        .and_then(|s| s.release.as_deref())
        .and_then(release_of);
    chain
        .steps
        .iter()
        .take_while(|s| {
            matches!(
                (running, s.release.as_deref().and_then(release_of)),
                (Some(r), Some(x)) if x < r
            )
        })
        .count()
}

/// The next move for a unit the cluster does not have. A fresh install
/// needs no migration, so it goes straight to the newest accepted state.
/// One deleted outside Git ([`UnitState::gone_from`]) is re-created where
/// it was, when a step of the chain is there (the hops after it follow as
/// usual), or at the newest step when that is one hop from where it was;
/// anything further waits for a person: lockstep never has a database
/// migrated across releases.
fn absent(chain: &Chain, state: &UnitState, last: usize) -> Next {
    let Some(was) = state.gone_from.as_deref().and_then(release_of) else {
        return Next::Apply(last);
    };
    let release = |i: usize| chain.steps[i].release.as_deref().and_then(release_of);
    // Git's last install of the object (a first install, or a re-creation
    // from scratch after a removal): the steps before it are an earlier
    // life. Deleting the object is how a re-creation from scratch is made
    // (`next` asks for it), so when no step of the current life is at the
    // release it was at, Git's re-creation is what is applied.
    let life = (0..=last)
        .rev()
        .find(|&i| chain.steps[i].from.is_none())
        .unwrap_or(0);
    if let Some(i) = (life..=last).rev().find(|&i| release(i) == Some(was)) {
        return Next::Apply(i);
    }
    if life > 0 {
        return Next::Apply(last);
    }
    match release(last) {
        Some(newest) if newest > was.next() => Next::Blocked(format!(
            "{} was deleted from the cluster outside Git at {was}; re-creating it at {newest} would migrate its database across {} releases at once. Re-create it at {was} (or {}) by hand and lockstep takes it on from there, or remove it from Git",
            chain.unit,
            was.hops_to(newest),
            was.next(),
        )),
        Some(newest) if newest < was => Next::Blocked(format!(
            "{} was deleted from the cluster outside Git at {was}; re-creating it at {newest} would take its database back. Re-create it at {was} by hand, or remove it from Git",
            chain.unit,
        )),
        _ => Next::Apply(last),
    }
}

fn release_of(s: &str) -> Option<crate::release::Release> {
    crate::release::TaggedRelease::parse(s)
        .ok()
        .map(|t| t.release)
}

fn next_step(chain: &Chain, state: &UnitState, complete: impl Fn(usize) -> bool) -> Next {
    let Some(last) = chain.steps.len().checked_sub(1) else {
        return Next::Done(0);
    };
    let Some(spec) = &state.spec else {
        return absent(chain, state, last);
    };
    let at = chain
        .steps
        .iter()
        .rposition(|s| s.release.is_some() && s.release == spec.release)
        .or_else(|| {
            // Kinds without a release (Horizon) match on the image.
            chain
                .steps
                .iter()
                .rposition(|s| s.release.is_none() && s.image.is_some() && s.image == spec.image)
        });
    let Some(i) = at else {
        if chain.from.is_some() && chain.from == spec.release {
            return Next::Apply(0);
        }
        return Next::Blocked(format!(
            "{} is at {} in the cluster; Git's accepted chain goes {} → {}",
            chain.unit,
            spec.release.as_deref().unwrap_or("no release"),
            chain.from.as_deref().unwrap_or("new"),
            chain.steps[last].release.as_deref().unwrap_or("?"),
        ));
    };
    if !applied(chain, i, state) {
        // Removed from Git: nothing is re-asserted, but a hop in flight at
        // this release is still followed (a child parked by an edit outside
        // Git then waits for a person: `src/daemon/follow.rs`).
        if chain.removed.is_some()
            && state
                .objects
                .values()
                .any(|o| o.progress != Progress::Complete)
        {
            return Next::Follow(i);
        }
        // Same release, other image (a patch, or an edit made outside Git):
        // Git's accepted state is re-asserted.
        return Next::Apply(i);
    }
    // An accepted abort ends the hop it returns from wherever that hop
    // stands, with any commit held behind it (`abort_for`): it is applied
    // at once (the operator deletes the phase Jobs and returns to the
    // installed release), never after a completion that a wedged Job will
    // not bring.
    if let Some(a) = abort_for(chain, i) {
        let abort = &chain.steps[a];
        if let Some(by) = &chain.removed {
            // Removed from Git with its abort: the abort is not applied,
            // and the hop it would have ended goes on, followed to its end.
            return if complete(i) {
                Next::Removed {
                    at: i + 1,
                    by: by.clone(),
                }
            } else {
                Next::Follow(i)
            };
        }
        if complete(i) {
            return Next::Blocked(format!(
                "{} completed its hop to {} before the abort in {} reached the cluster; lockstep never goes backwards: move Git forward to {} again",
                chain.unit,
                chain.steps[i].release.as_deref().unwrap_or("?"),
                short(&abort.sha),
                chain.steps[i].release.as_deref().unwrap_or("?"),
            ));
        }
        return Next::Apply(a);
    }
    if !complete(i) {
        return Next::Follow(i);
    }
    if i < last {
        Next::Apply(i + 1)
    } else {
        Next::Done(i)
    }
}

/// Whether the cluster's specs are exactly step `i`'s.
fn applied(chain: &Chain, i: usize, state: &UnitState) -> bool {
    let s = &chain.steps[i];
    if !document_applied(s, state) {
        return false;
    }
    if chain.unit.kind != Kind::ControlPlane {
        return state
            .spec
            .as_ref()
            .is_some_and(|t| s.image.is_none() || t.image == s.image);
    }
    // The plane is at the step's release. A child not projected yet, or
    // still at the release the hop starts from, is the operator catching up
    // with the plane: applying it again would change nothing.
    let lagging = |o: &ObjectState| s.from.is_some() && image_release(&o.spec) == s.from;
    s.children.iter().all(|(k, t)| {
        state.objects.get(k).is_none_or(|o| {
            t.image.is_none() || o.spec.image.is_none() || o.spec.image == t.image || lagging(o)
        })
    })
}

/// Whether the unit runs step `s`'s whole document, by the digest its last
/// apply left ([`APPLIED_ANNOTATION`]). Without one (an object an older
/// lockstep applied, or one adopted as the cluster ran it) release and
/// image decide as they always did, unless the step reconfigures: then only
/// an apply brings the document. A document that could not be read is
/// applied (and refused with its error) only for a reconfiguration, for
/// which release and image say nothing.
fn document_applied(s: &Step, state: &UnitState) -> bool {
    match (&state.applied, &s.document) {
        (Some(a), Ok(d)) => *a == d.digest(),
        (None, Ok(_)) | (_, Err(_)) => !s.reconfigured,
    }
}

/// Whether the unit's object carries step `s`'s own document digest
/// ([`APPLIED_ANNOTATION`]): some lockstep applied exactly this step to it
/// before, whatever the spec shows now. A restarted daemon, which keeps no
/// count of its own, tells a drift off the step from a new hop by it.
pub fn applied_before(s: &Step, state: &UnitState) -> bool {
    matches!((&state.applied, &s.document), (Some(a), Ok(d)) if *a == d.digest())
}

/// The release a spec's image tag names (a projected child's image always
/// carries its release, Horizon's included).
fn image_release(t: &Target) -> Option<String> {
    t.image
        .as_deref()
        .and_then(|i| ImageRef::parse_reference(i).ok())
        .and_then(|i| i.tag_release())
        .map(|t| t.release.to_string())
}

/// What a pass found for one unit, for statuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitReport {
    pub chain: Arc<Chain>,
    pub next: Next,
    /// Progress of the followed objects of the step in flight (or last done).
    pub progress: BTreeMap<Key, Progress>,
    /// A repair lockstep may not make: a person must act (the hop's
    /// statuses go failure).
    pub needs_person: Option<String>,
    /// A hop that made no progress within its phase's deadline, as it was
    /// reported to a person. Unlike `needs_person` its statuses stay
    /// pending: a slow migration may still finish by itself, and a failure
    /// posted now would turn success later (statuses settle once).
    pub stalled: Option<String>,
    /// The followed objects a person was asked to act on (`needs_person`
    /// names one of them): their failure is for good until someone acts,
    /// and their statuses say failure. Another object failing while
    /// lockstep repairs it reads pending.
    pub asked: BTreeSet<Key>,
    /// The step to apply waits: on what, and why, as its pending status
    /// says it.
    pub waiting: Option<Wait>,
    /// The release the unit's spec names in the cluster, as read this pass
    /// (`None`: not in the cluster, not read, or a kind without a release
    /// field). A blocked unit is off Git's chain, so only the cluster can
    /// say where it is.
    pub cluster_release: Option<String>,
    /// Commits of the step the unit is at whose work is over although a
    /// later commit was folded over them, and how ([`settled`]): their
    /// statuses stay success while that later commit is applied.
    pub settled: BTreeMap<String, Settled>,
}

/// Why a step lockstep may apply is not applied yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub on: WaitOn,
    /// What the step's pending status says.
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOn {
    /// A pre-flight gate of a policy fails on the live state
    /// (`core/src/preflight.rs`).
    Gate,
    /// A plan over the unit is outside its maintenance windows.
    Window,
    /// A gate of a plan over the unit (`spec.gates`) does not hold.
    PlanGate,
    /// The cluster left a step this process applied, again: it is applied
    /// once more after the repair backoff (`repair::Applies`).
    Drift,
    /// Another object of the same commit could not be asked in a dry run
    /// (the API server did not answer): a commit's objects are applied all
    /// or none (`docs/gate.md`, "A commit is applied whole").
    Commit,
}

impl Wait {
    pub fn new(on: WaitOn, message: impl Into<String>) -> Self {
        Self {
            on,
            message: message.into(),
        }
    }
}

/// How a commit a later one was folded over is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The cluster ran what it asked to completion (or, for the commit that
    /// moved the release, installed the release).
    Own,
    /// The cluster runs what a later commit of the step asked instead (the
    /// newest such): what this one asked may never have run.
    By(String),
}

/// The commits of the step `next` is at (applying, following or done) whose
/// work is over already, by the cluster's state. A later commit of the same
/// release was folded over them (`push_step`), so the step is applied again
/// for that later commit; without this a commit whose hop completed passes
/// ago would read pending again (`docs/gate.md`, "After acceptance": never
/// back from success to pending). Only Git and the cluster are read, so a
/// restarted daemon computes the same.
///
/// Nothing is over before every followed object runs the step's release as
/// installed (`status.installedRelease`; kinds that report none, Horizon,
/// count as installed). Then:
/// - the commit that moved the release is over: the hop is done, and what
///   it asked beyond the hop a later commit replaced;
/// - any other folded-over commit (a patch) is over once every followed
///   object either runs the image the commit asked, to completion, or runs
///   the image a later commit of the step asked.
pub fn settled(chain: &Chain, next: &Next, state: &UnitState) -> BTreeMap<String, Settled> {
    let mut out = BTreeMap::new();
    let i = match next {
        Next::Apply(i) | Next::Follow(i) | Next::Done(i) => *i,
        Next::Blocked(_) | Next::Removed { .. } => return out,
    };
    let Some(step) = chain.steps.get(i).filter(|s| !s.earlier.is_empty()) else {
        return out;
    };
    // Nothing of a step is over before its release is installed: a patch
    // folded over while the hop is in flight waits for the hop.
    if !release_installed(chain, i, state) {
        return out;
    }
    let newest = chain.followed(i);
    for (k, (sha, asked)) in step.commits.iter().zip(&step.earlier).enumerate() {
        if k == 0 && step.from != step.release {
            out.insert(sha.clone(), Settled::Own);
            continue;
        }
        let runs = |key: &Key, t: &Target| {
            state.objects.get(key).is_some_and(|o| {
                t.image.is_none() || (o.spec.image == t.image && o.progress == Progress::Complete)
            })
        };
        if asked.iter().all(|(key, t)| runs(key, t)) {
            out.insert(sha.clone(), Settled::Own);
            continue;
        }
        // The newest later commit of the step (the step's own targets for
        // the newest) whose images the cluster runs where this one asked one.
        let by = (k + 1..step.commits.len()).rev().find(|&j| {
            let theirs = step.earlier.get(j).unwrap_or(&newest);
            asked.iter().all(|(key, t)| {
                t.image.is_none()
                    || state.objects.get(key).is_some_and(|o| {
                        o.spec.image.is_some()
                            && theirs
                                .iter()
                                .any(|(k2, l)| k2 == key && l.image == o.spec.image)
                    })
            })
        });
        if let Some(j) = by {
            out.insert(sha.clone(), Settled::By(step.commits[j].clone()));
        }
    }
    out
}

/// Whether every followed object of step `i` runs the step's release as
/// installed. Objects of a kind that reports no installed release (Horizon)
/// or whose target names none count as installed; a step that follows
/// nothing never is.
fn release_installed(chain: &Chain, i: usize, state: &UnitState) -> bool {
    let followed = chain.followed(i);
    !followed.is_empty()
        && followed.iter().all(|(k, t)| {
            let Some(want) = t.release.as_deref().and_then(release_of) else {
                return true;
            };
            if k.kind.release_source() == ReleaseSource::None {
                return true;
            }
            state
                .objects
                .get(k)
                .and_then(|o| o.installed.as_deref())
                .and_then(release_of)
                == Some(want)
        })
}

/// Every status the state implies, `(sha, status)`, oldest commit first:
/// the verdict on each judged commit under `lockstep/<cluster>` (refused →
/// failure; accepted → pending until every step it carries is complete, then
/// success) and one progress status per followed object on the commit of the
/// step it is in.
pub fn statuses<M>(
    cluster: &str,
    report: &CheckReport<M>,
    units: &BTreeMap<Key, UnitReport>,
    target_url: Option<&str>,
) -> Vec<(String, Status)> {
    let mut out = Vec::new();
    // Where each commit's steps stand.
    let mut by_commit: BTreeMap<&str, Vec<(&UnitReport, usize)>> = BTreeMap::new();
    for u in units.values() {
        for (i, s) in u.chain.steps.iter().enumerate() {
            for c in &s.commits {
                by_commit.entry(c.as_str()).or_default().push((u, i));
            }
        }
    }
    for c in &report.commits {
        let verdict = describe::daemon_status(cluster, c, target_url);
        if c.verdict == Verdict::Refused {
            out.push((c.sha.clone(), verdict));
            continue;
        }
        let Some(steps) = by_commit.get(c.sha.as_str()) else {
            // Judged, not yet planned (a new commit's verdict goes out before
            // its units are read): what it carries is still to be applied.
            // Success is for work done, never for work accepted.
            let state = if c.objects.iter().any(applies) {
                Status {
                    state: State::Pending,
                    description: verdict.description.replacen(
                        "accepted:",
                        "accepted, applying:",
                        1,
                    ),
                    ..verdict
                }
            } else {
                verdict
            };
            out.push((c.sha.clone(), state));
            continue;
        };
        let mut waiting = None;
        let mut failed = None;
        let mut superseded = None;
        for (u, i) in steps {
            if position(&u.next) == Some(*i)
                && let Some(how) = u.settled.get(c.sha.as_str())
            {
                if let Settled::By(newer) = how {
                    superseded.get_or_insert(format!(
                        "{}; {} replaced it at the same release",
                        describe::done(c).replacen("applied: ", "accepted: ", 1),
                        short(newer)
                    ));
                }
                continue;
            }
            match step_state(u, *i) {
                StepState::Done => {}
                StepState::Superseded(m) => {
                    superseded.get_or_insert(m);
                }
                StepState::Failed(m) => {
                    failed.get_or_insert(m);
                }
                StepState::Pending(m) => {
                    // A later commit of a release the cluster has installed
                    // (a patch, a reconfiguration): the step's hop is long
                    // over, so its own words say what is being applied.
                    // A commit the gate held, still behind the hop it waits
                    // for, says so in the gate's words (`held: … waits for
                    // the upgrade to … in flight`), not as a queued step.
                    let step = &u.chain.steps[*i];
                    let held = c.objects.iter().any(|o| o.verdict == Verdict::Held)
                        && position(&u.next).is_some_and(|p| p < *i);
                    let m = if held {
                        verdict.description.clone()
                    } else if position(&u.next) == Some(*i)
                        && c.sha != step.hop_commit()
                        && u.settled.contains_key(step.hop_commit())
                    {
                        verdict
                            .description
                            .replacen("accepted:", "accepted, applying:", 1)
                    } else {
                        m
                    };
                    waiting.get_or_insert(m);
                }
            }
        }
        // Settled either way: a step Git removed before it was applied
        // never will be, and the commit says so instead of "done".
        let (state, description) = match (failed, waiting, superseded) {
            (Some(m), _, _) => (State::Failure, m),
            (None, Some(m), _) => (State::Pending, m),
            (None, None, Some(m)) => (State::Success, m),
            (None, None, None) => (State::Success, describe::done(c)),
        };
        out.push((
            c.sha.clone(),
            Status {
                state,
                description,
                ..verdict
            },
        ));
    }
    // Per object, on the commit of the step it is in; and every hop before
    // it in the chain, complete (one hop at a time: a later step is only
    // applied once the one before completed), so the first hop of a chain
    // does not stay at the last progress it was seen with.
    for u in units.values() {
        let done_before = match u.next {
            Next::Apply(i) | Next::Follow(i) | Next::Done(i) => i,
            Next::Removed { at, .. } => at,
            Next::Blocked(_) => 0,
        };
        for (j, step) in u.chain.steps.iter().enumerate().take(done_before) {
            let Some(from) = step.from.as_deref() else {
                continue;
            };
            let (state, phase) = match ended_by(u, j) {
                Some(a) => (State::Failure, format!("aborted by {}", short(&a.sha))),
                None if step.abort => (State::Success, "aborted".to_owned()),
                None => (State::Success, "complete".to_owned()),
            };
            for (key, target) in u.chain.followed(j) {
                out.push((
                    step.hop_commit().to_owned(),
                    Status {
                        state,
                        context: Context::object(cluster, &key.namespace, &key.name).to_string(),
                        description: describe::progress(
                            &key.name,
                            from,
                            target.release.as_deref().unwrap_or(""),
                            &phase,
                        ),
                        target_url: target_url.map(str::to_owned),
                    },
                ));
            }
        }
        let i = match u.next {
            Next::Follow(i) | Next::Done(i) => i,
            _ => continue,
        };
        let Some(step) = u.chain.steps.get(i) else {
            continue;
        };
        // An install has no hop to follow: the commit's verdict says it all
        // (a new fleet would otherwise post one status per object).
        if step.from.is_none() {
            continue;
        }
        // The hop's commit settled while a later commit of its release is
        // applied: the hop's objects are done with it.
        let hop_settled = u.settled.contains_key(step.hop_commit());
        for (key, target) in u.chain.followed(i) {
            let p = if hop_settled {
                Progress::Complete
            } else {
                u.progress.get(&key).cloned().unwrap_or(Progress::Waiting)
            };
            let from = step.from.as_deref().unwrap_or("new");
            let to = target.release.as_deref().unwrap_or("");
            // Failure only when a person must act: a failed phase Job
            // lockstep is re-running, or a stall (no progress yet, reported),
            // may still end in success, and a status goes pending to
            // success or failure once.
            let (state, phase) = match &p {
                Progress::Complete if step.abort => (State::Success, "aborted".to_owned()),
                Progress::Complete => (State::Success, "complete".to_owned()),
                Progress::Failed { .. } if u.asked.contains(&key) => (State::Failure, p.describe()),
                Progress::Failed { .. } => (State::Pending, format!("repairing: {}", p.describe())),
                _ => (State::Pending, p.describe()),
            };
            out.push((
                step.hop_commit().to_owned(),
                Status {
                    state,
                    context: Context::object(cluster, &key.namespace, &key.name).to_string(),
                    description: describe::progress(&key.name, from, to, &phase),
                    target_url: target_url.map(str::to_owned),
                },
            ));
        }
    }
    out
}

/// The abort step that ended step `i`, if the next step is one.
fn aborted_by(chain: &Chain, i: usize) -> Option<&Step> {
    abort_for(chain, i).map(|a| &chain.steps[a])
}

/// The index of the abort step that ends step `i`: the first abort after
/// it, when the hop that abort returns from (the last step before it that
/// starts at the release it returns to) is `i`, or is before `i` and `i`
/// was queued behind it (a commit held while that hop was in flight, never
/// applied). The abort is applied at once in both cases: a held step
/// between a wedged hop and its abort must not keep the abort waiting for
/// a completion the wedged Job never brings.
fn abort_for(chain: &Chain, i: usize) -> Option<usize> {
    let a = (i + 1..chain.steps.len()).find(|&a| chain.steps[a].abort)?;
    let back = chain.steps[a].release.as_deref();
    let hop = (0..a).rev().find(|&h| {
        let s = &chain.steps[h];
        !s.abort && s.from.as_deref() == back && s.from != s.release
    })?;
    (hop <= i).then_some(a)
}

/// The abort that ended step `i`, once the unit got that far (from the
/// moment the abort is its step, never success first); an abort Git removed
/// with its unit before it was applied ended nothing.
fn ended_by(u: &UnitReport, i: usize) -> Option<&Step> {
    let abort = aborted_by(&u.chain, i)?;
    let reached = match &u.next {
        Next::Removed { at, .. } => *at > i + 1,
        n => position(n).is_some_and(|j| j > i),
    };
    reached.then_some(abort)
}

/// The step a unit is at, if any.
fn position(n: &Next) -> Option<usize> {
    match n {
        Next::Apply(j) | Next::Follow(j) | Next::Done(j) => Some(*j),
        Next::Removed { at, .. } => Some(*at),
        Next::Blocked(_) => None,
    }
}

/// A commit as statuses name it.
fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

enum StepState {
    Done,
    /// Never applied: Git removed the unit first.
    Superseded(String),
    Pending(String),
    Failed(String),
}

fn step_state(u: &UnitReport, i: usize) -> StepState {
    let name = &u.chain.unit.name;
    let step = &u.chain.steps[i];
    let hop = format!(
        "{name} {}→{}",
        step.from.as_deref().unwrap_or("new"),
        step.release.as_deref().unwrap_or("?")
    );
    // A hop an accepted abort ended: failed, for good, from the moment the
    // abort is the unit's step (never success first).
    if let Some(abort) = ended_by(u, i) {
        return StepState::Failed(format!("{hop}: aborted by {}", short(&abort.sha)));
    }
    match &u.next {
        Next::Blocked(m) => StepState::Failed(format!("blocked: {m}")),
        Next::Removed { at, by } if i >= *at => StepState::Superseded(format!(
            "accepted, not applied: {hop} was {} before it reached the cluster",
            by.describe()
        )),
        Next::Removed { .. } | Next::Done(_) => StepState::Done,
        Next::Apply(j) | Next::Follow(j) if *j > i => StepState::Done,
        Next::Apply(j) if *j == i => match &u.needs_person {
            // The cluster rejected the apply: tried again, but a person must act.
            Some(m) => StepState::Failed(m.clone()),
            // A pre-flight gate holds it: pending, saying why.
            None => match &u.waiting {
                Some(w) => StepState::Pending(format!("{hop}: {}", w.message)),
                None => StepState::Pending(format!("accepted: applying {hop}")),
            },
        },
        Next::Follow(j) if *j == i => {
            if let Some(m) = &u.needs_person {
                return StepState::Failed(m.clone());
            }
            // A stall reads as what it is ("stalled in Migrating: no
            // progress for over 1h"), pending: reported to a person, not
            // yet a failure.
            let (phase, failing) = summarize(&u.progress);
            let text = format!("{hop}: {phase}");
            if failing {
                StepState::Pending(format!("repairing {text}"))
            } else {
                StepState::Pending(text)
            }
        }
        Next::Apply(j) | Next::Follow(j) => {
            let cur = &u.chain.steps[*j];
            StepState::Pending(format!(
                "queued: {name} →{} after →{}",
                step.release.as_deref().unwrap_or("?"),
                cur.release.as_deref().unwrap_or("?")
            ))
        }
    }
}

/// One line for a hop that moves several objects at once (a ControlPlane
/// bumps all its services together): how many are complete, and the one
/// that says most about what holds the hop. A failing object first (it is
/// being repaired); else the least advanced object inside the phase
/// machine (the laggard decides when the hop completes); else one settling;
/// else the operator has not picked anything up yet. Ties go to key order,
/// so the line is stable between passes. A single object reads as before:
/// just its progress.
fn summarize(progress: &BTreeMap<Key, Progress>) -> (String, bool) {
    fn rank(p: &Progress) -> (u8, u8) {
        match p {
            Progress::Failed { .. } | Progress::Stalled { .. } => (0, 0),
            Progress::Phase { step, .. } => (1, *step),
            Progress::Settling { .. } => (2, 0),
            Progress::Waiting => (3, 0),
            Progress::Complete => (4, 0),
        }
    }
    let Some((key, p)) = progress
        .iter()
        .filter(|(_, p)| !matches!(p, Progress::Complete))
        .min_by_key(|(_, p)| rank(p))
    else {
        return ("settling".into(), false);
    };
    let failing = matches!(p, Progress::Failed { .. });
    if progress.len() == 1 {
        return (p.describe(), failing);
    }
    let done = progress
        .values()
        .filter(|p| matches!(p, Progress::Complete))
        .count();
    (
        format!(
            "{done}/{} complete, {} {}",
            progress.len(),
            key.name,
            p.describe()
        ),
        failing,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::ObjectVerdict;
    use crate::verdict::CommitReport;

    fn ov(key: &Key, from: Option<&str>, to: &str, image: &str, t: Transition) -> ObjectVerdict {
        ObjectVerdict {
            kind: Some(key.kind),
            namespace: Some(key.namespace.clone()),
            name: Some(key.name.clone()),
            file: Arc::from("f.yaml"),
            line: 1,
            projected_by: None,
            from: from.map(str::to_owned),
            to: Some(to.to_owned()),
            from_image: None,
            to_image: Some(image.to_owned()),
            transition: t,
            verdict: Verdict::Accepted,
            reason: None,
            message: String::new(),
        }
    }

    fn commit(sha: &str, verdict: Verdict, objects: Vec<ObjectVerdict>) -> CommitReport {
        CommitReport {
            sha: sha.into(),
            summary: sha.into(),
            verdict,
            objects,
            skipped: Vec::new(),
            files_changed: 1,
        }
    }

    fn report(commits: Vec<CommitReport>) -> CheckReport {
        CheckReport {
            verdict: Verdict::Accepted,
            base: None,
            head: commits.last().map(|c| c.sha.clone()).unwrap_or_default(),
            commits,
            memory: Default::default(),
        }
    }

    fn nova() -> Key {
        Key::new(Kind::Nova, "compute", "nova")
    }

    fn img(r: &str) -> String {
        format!("ghcr.io/c5c3/nova:{r}")
    }

    /// 2026.1 → 2026.2 (then a patch on 2026.2) → 2027.1, with a refused
    /// skip in between.
    fn story() -> CheckReport {
        let n = nova();
        let mut skip = ov(
            &n,
            Some("2026.2"),
            "2027.2",
            &img("2027.2"),
            Transition::Skip,
        );
        skip.verdict = Verdict::Refused;
        report(vec![
            commit(
                "a",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.1"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Upgrade,
                )],
            ),
            commit(
                "b",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.2"),
                    "2026.2",
                    &img("2026.2-p1"),
                    Transition::Patch,
                )],
            ),
            commit("c", Verdict::Refused, vec![skip]),
            commit(
                "d",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.2"),
                    "2027.1",
                    &img("2027.1"),
                    Transition::Upgrade,
                )],
            ),
        ])
    }

    fn at(release: &str, image: &str) -> UnitState {
        UnitState {
            spec: Some(Target {
                release: Some(release.into()),
                image: Some(image.into()),
            }),
            objects: BTreeMap::new(),
            projected_by: None,
            applied: None,
            gone_from: None,
        }
    }

    /// A unit deleted outside Git is re-created where it was, not at Git's
    /// newest step: its database outlives it, and the operator would
    /// migrate it across every release in between. Where no step of the
    /// chain is there and the newest is more than one hop on (or behind),
    /// a person decides. Never seen before: a fresh install, at the newest.
    #[test]
    fn a_unit_deleted_outside_git_is_recreated_where_it_was() {
        let chains = chains(&story(), |_, _, _| None, |_, _, _| Err(String::new()));
        let c = &chains[&nova()];
        let gone = |was: Option<&str>| {
            next(
                c,
                &UnitState {
                    gone_from: was.map(str::to_owned),
                    ..UnitState::default()
                },
                |_| false,
            )
        };
        assert_eq!(gone(None), Next::Apply(1), "a fresh install");
        assert_eq!(gone(Some("2026.2")), Next::Apply(0), "where it was");
        assert_eq!(gone(Some("2027.1")), Next::Apply(1));
        for was in ["2026.1", "2027.2", "2025.2"] {
            let Next::Blocked(why) = gone(Some(was)) else {
                panic!("{was}: {:?}", gone(Some(was)));
            };
            assert!(
                why.contains(&format!("deleted from the cluster outside Git at {was}")),
                "{why}"
            );
        }
        // One hop from where it was: the newest step is an ordinary hop.
        let mut one = c.clone();
        one.steps.truncate(1);
        let n = next(
            &one,
            &UnitState {
                gone_from: Some("2026.1".into()),
                ..UnitState::default()
            },
            |_| false,
        );
        assert_eq!(n, Next::Apply(0));
        // Git re-created the object from scratch (removed, then installed
        // again at 2026.1 with `recreate-below`), and `next` asked for the
        // running 2027.1 object to be deleted first: deleted, it is Git's
        // re-creation that is applied, not the earlier life's 2027.1 step.
        let mut again = c.clone();
        let mut install = again.steps[0].clone();
        install.from = None;
        install.release = Some("2026.1".into());
        again.steps.push(install);
        let n = next(
            &again,
            &UnitState {
                gone_from: Some("2027.1".into()),
                ..UnitState::default()
            },
            |_| false,
        );
        assert_eq!(n, Next::Apply(2));
    }

    #[test]
    fn chains_fold_patches_and_skip_refused_commits() {
        let chains = chains(&story(), |_, _, _| None, |_, _, _| Err(String::new()));
        let c = &chains[&nova()];
        assert_eq!(c.from.as_deref(), Some("2026.1"));
        let steps: Vec<(&str, Option<&str>, Vec<&str>)> = c
            .steps
            .iter()
            .map(|s| {
                (
                    s.sha.as_str(),
                    s.image.as_deref(),
                    s.commits.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        let p1 = img("2026.2-p1");
        let r3 = img("2027.1");
        assert_eq!(
            steps,
            vec![
                ("b", Some(p1.as_str()), vec!["a", "b"]),
                ("d", Some(r3.as_str()), vec!["d"])
            ]
        );
    }

    /// Steps carry their documents from judgment: read once per step, at
    /// the newest commit folded into it (never at an older one, which would
    /// apply a patch's document without the patch), and a read that failed
    /// stays an error on the step.
    #[test]
    fn steps_carry_the_document_of_their_newest_commit_read_once() {
        let reads = std::cell::RefCell::new(Vec::new());
        let chains = chains(
            &story(),
            |_, _, _| None,
            |sha, file, key| {
                if *key == nova() {
                    reads.borrow_mut().push(sha.to_owned());
                }
                match sha {
                    "d" => Err(format!("{file} at d holds no {key}")),
                    _ => Document::from_value(&serde_json::json!({ "at": sha })),
                }
            },
        );
        let c = &chains[&nova()];
        assert_eq!(*reads.borrow(), vec!["b", "d"], "one read per step");
        assert_eq!(
            c.steps[0].document.as_ref().map(|d| d.parse().unwrap()),
            Ok(serde_json::json!({ "at": "b" }))
        );
        assert!(
            c.steps[1]
                .document
                .as_ref()
                .is_err_and(|e| e.contains("holds no"))
        );
    }

    /// A document is kept as its JSON text and read back whole; a clone is
    /// the same allocation, and text that is not JSON is an error at apply,
    /// never a smaller document.
    #[test]
    fn documents_are_kept_as_shared_text_and_read_back_whole() {
        let v = serde_json::json!({
            "kind": "Nova",
            "metadata": {"name": "nova", "namespace": "compute", "labels": {"a": "b"}},
            "spec": {"openStackRelease": "2026.2", "replicas": 3, "debug": false, "x": null}
        });
        let d = Document::from_value(&v).unwrap();
        assert_eq!(d.parse().unwrap(), v);
        assert!(!d.text().contains(' '), "compact: {}", d.text());
        let c = d.clone();
        assert!(Document::same(&d, &c));
        let e = Document::from_value(&v).unwrap();
        assert_eq!(d, e, "equal text");
        assert!(!Document::same(&d, &e), "but two allocations");
        assert!(
            Document::from_text(Arc::from("{\"kind\":"))
                .parse()
                .is_err()
        );
    }

    #[test]
    fn a_plane_is_applied_once_while_the_operator_catches_up() {
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        let ks = Key::new(Kind::Keystone, "openstack", "prod-keystone");
        let kimg = |t: &str| format!("ghcr.io/c5c3/keystone:{t}");
        let step = |from: Option<&str>, to: &str, tag: &str| Step {
            sha: to.into(),
            commits: vec![to.into()],
            earlier: Vec::new(),
            file: Arc::from("p.yaml"),
            from: from.map(str::to_owned),
            release: Some(to.into()),
            image: None,
            children: [(
                ks.clone(),
                Target {
                    release: Some(to.into()),
                    image: Some(kimg(tag)),
                },
            )]
            .into_iter()
            .collect(),
            abort: false,
            reconfigured: false,
            document: Err(String::new()),
        };
        let c = Chain {
            unit: plane.clone(),
            from: None,
            steps: vec![
                step(None, "2026.1", "2026.1"),
                step(Some("2026.1"), "2026.2", "2026.2-p1"),
            ],
            removed: None,
        };
        let state = |release: &str, child: Option<&str>| UnitState {
            spec: Some(Target {
                release: Some(release.into()),
                image: None,
            }),
            objects: child
                .map(|t| {
                    let spec = Target {
                        release: Some(t.into()),
                        image: Some(kimg(t)),
                    };
                    (
                        ks.clone(),
                        ObjectState {
                            spec,
                            progress: Progress::Complete,
                            installed: Some(t.into()),
                        },
                    )
                })
                .into_iter()
                .collect(),
            projected_by: None,
            applied: None,
            gone_from: None,
        };
        assert_eq!(
            next(&c, &state("2026.1", Some("2026.1")), |_| true),
            Next::Apply(1)
        );
        // Applied; the children are not re-projected (or projected) yet.
        assert_eq!(
            next(&c, &state("2026.2", Some("2026.1")), |_| false),
            Next::Follow(1)
        );
        assert_eq!(next(&c, &state("2026.1", None), |_| false), Next::Follow(0));
        // Another image of the step's release (a patch folded into the
        // step after the hop was applied): applied again.
        assert_eq!(
            next(&c, &state("2026.2", Some("2026.2")), |_| false),
            Next::Apply(1)
        );
        assert_eq!(
            next(&c, &state("2026.2", Some("2026.2-p1")), |_| true),
            Next::Done(1)
        );
    }

    /// A plane set forward outside Git (`kubectl edit` to Git's next
    /// step) while one child is still mid-hop: applying or following the
    /// next step would count the unfinished hop as done and ask the
    /// operator for a second migration on top of the first.
    #[test]
    fn a_plane_set_forward_while_a_child_is_mid_hop_is_blocked() {
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        let ks = Key::new(Kind::Keystone, "openstack", "prod-keystone");
        let nv = Key::new(Kind::Nova, "openstack", "prod-nova");
        let target = |k: &Key, r: &str| Target {
            release: Some(r.into()),
            image: Some(format!(
                "ghcr.io/c5c3/{}:{r}",
                k.kind.as_str().to_lowercase()
            )),
        };
        let step = |from: Option<&str>, to: &str| Step {
            sha: to.into(),
            commits: vec![to.into()],
            earlier: Vec::new(),
            file: Arc::from("p.yaml"),
            from: from.map(str::to_owned),
            release: Some(to.into()),
            image: None,
            children: [(ks.clone(), target(&ks, to)), (nv.clone(), target(&nv, to))]
                .into_iter()
                .collect(),
            abort: false,
            reconfigured: false,
            document: Err(String::new()),
        };
        let c = Chain {
            unit: plane.clone(),
            from: None,
            steps: vec![
                step(None, "2026.1"),
                step(Some("2026.1"), "2026.2"),
                step(Some("2026.2"), "2027.1"),
            ],
            removed: None,
        };
        let child = |k: &Key, spec: &str, installed: &str, progress: Progress| {
            (
                k.clone(),
                ObjectState {
                    spec: target(k, spec),
                    progress,
                    installed: Some(installed.into()),
                },
            )
        };
        let migrating = || Progress::Phase {
            phase: "Migrating".into(),
            step: 2,
        };
        let state = |plane_at: &str, children: Vec<(Key, ObjectState)>| UnitState {
            spec: Some(Target {
                release: Some(plane_at.into()),
                image: None,
            }),
            objects: children.into_iter().collect(),
            projected_by: None,
            applied: None,
            gone_from: None,
        };
        // Keystone finished 2026.2, Nova is still migrating to it; the
        // plane is edited to 2027.1 by hand.
        let edited = state(
            "2027.1",
            vec![
                child(&ks, "2026.2", "2026.2", Progress::Complete),
                child(&nv, "2026.2", "2026.1", migrating()),
            ],
        );
        let n = next(&c, &edited, |_| false);
        assert!(
            matches!(&n, Next::Blocked(m) if m.contains("2026.1 installed") && m.contains("never made")),
            "{n:?}"
        );
        // Left at Git's step, the hop in flight is followed as before.
        let at_step = state(
            "2026.2",
            vec![
                child(&ks, "2026.2", "2026.2", Progress::Complete),
                child(&nv, "2026.2", "2026.1", migrating()),
            ],
        );
        assert_eq!(next(&c, &at_step, |_| false), Next::Follow(1));
    }

    #[test]
    fn a_re_creation_below_the_floor_never_downgrades_a_running_object() {
        let n = nova();
        // 2026.1 → 2026.2, then (removed and) re-created from scratch at
        // 2025.2 with the recreate annotation: an install the gate accepted.
        let r = report(vec![
            commit(
                "a",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.1"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Upgrade,
                )],
            ),
            commit(
                "b",
                Verdict::Accepted,
                vec![ov(&n, None, "2025.2", &img("2025.2"), Transition::Install)],
            ),
        ]);
        let c = &chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))[&n];
        // Still running 2026.2: blocked, a person deletes it first.
        assert!(matches!(
            next(c, &at("2026.2", &img("2026.2")), |_| true),
            Next::Blocked(m) if m.contains("never applies a lower release")
        ));
        // Gone from the cluster: created at 2025.2.
        assert_eq!(next(c, &UnitState::default(), |_| true), Next::Apply(1));
    }

    /// A spec set back outside Git (`kubectl edit` to 2026.1) on an object
    /// the operator finished at 2026.2: the spec matches the install step,
    /// but applying it would ask for a downgrade. Git's step at the
    /// installed release is re-asserted; with none, the unit is blocked.
    #[test]
    fn a_spec_set_back_outside_git_never_applies_below_the_installed_release() {
        let n = nova();
        let r = report(vec![
            commit(
                "a",
                Verdict::Accepted,
                vec![ov(&n, None, "2026.1", &img("2026.1"), Transition::Install)],
            ),
            commit(
                "b",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.1"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Upgrade,
                )],
            ),
        ]);
        let c = &chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))[&n];
        // The unit's spec at `spec`, its object seen with `progress` and the
        // operator reporting `installed`.
        let seen = |spec: &str, progress: Progress, installed: &str| {
            let mut s = at(spec, &img(spec));
            s.objects.insert(
                n.clone(),
                ObjectState {
                    spec: s.spec.clone().unwrap(),
                    progress,
                    installed: Some(installed.into()),
                },
            );
            s
        };
        let edited = |installed: &str| seen("2026.1", Progress::Complete, installed);
        assert_eq!(next(c, &edited("2026.2"), |_| true), Next::Apply(1));
        // Installed past every step Git has: nothing to re-assert.
        assert!(matches!(
            next(c, &edited("2027.1"), |_| true),
            Next::Blocked(m) if m.contains("2027.1 installed") && m.contains("never applies a lower release")
        ));
        // Installed at 2026.1 (nothing set back): the hop, as before.
        assert_eq!(next(c, &edited("2026.1"), |_| true), Next::Apply(1));

        // The step in flight (spec at 2026.2, not complete) below what the
        // operator installed (a hand upgrade, then the spec set back):
        // following it would wait for ever. Git's step at the installed
        // release is applied, or the unit is blocked with what to do.
        let r3 = report(vec![
            r.commits[0].clone(),
            r.commits[1].clone(),
            commit(
                "c",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.2"),
                    "2027.1",
                    &img("2027.1"),
                    Transition::Upgrade,
                )],
            ),
        ]);
        let c3 = &chains(&r3, |_, _, _| None, |_, _, _| Err(String::new()))[&n];
        let in_flight = |installed: &str| seen("2026.2", Progress::Waiting, installed);
        // Mid-hop, as usual: followed.
        assert_eq!(next(c3, &in_flight("2026.1"), |_| false), Next::Follow(1));
        // Another object's installed release (a plane's former child, run
        // standalone since) is not this step's to answer for.
        let mut other = in_flight("2026.1");
        other.objects.insert(
            Key::new(Kind::Glance, "openstack", "prod-glance"),
            ObjectState {
                spec: other.spec.clone().unwrap(),
                progress: Progress::Complete,
                installed: Some("2027.1".into()),
            },
        );
        assert_eq!(next(c3, &other, |_| false), Next::Follow(1));
        assert_eq!(next(c3, &in_flight("2027.1"), |_| false), Next::Apply(2));
        assert!(matches!(
            next(c, &in_flight("2027.1"), |_| false),
            Next::Blocked(m) if m.contains("2027.1 installed") && m.contains("set the release in Git forward")
        ));

        // The spec set forward outside Git to a later accepted step, over a
        // hop never made (installed 2026.1, the step to 2027.1 starts from
        // 2026.2): blocked, never applied or followed as if 2026.2 were
        // done (its statuses would read success).
        let ahead = seen("2027.1", Progress::Waiting, "2026.1");
        assert!(
            matches!(
                next(c3, &ahead, |_| false),
                Next::Blocked(ref m) if m.contains("2026.1 installed") && m.contains("never made")
            ),
            "{:?}",
            next(c3, &ahead, |_| false)
        );
        // Parked on a changed image at that release too (an apply due).
        let mut parked = ahead.clone();
        if let Some(spec) = parked.spec.as_mut() {
            spec.image = Some(img("2026.2"));
        }
        assert!(matches!(next(c3, &parked, |_| false), Next::Blocked(_)));
        // At the release the step starts from, it is the hop itself.
        assert_eq!(
            next(c3, &seen("2027.1", Progress::Waiting, "2026.2"), |_| false),
            Next::Follow(2)
        );
    }

    /// A hop wedged in flight, a commit held behind it (queued in the
    /// chain), then an abort back to the installed release: the abort is
    /// applied at once, over the held step, which is never applied and
    /// ends failed with the hop ("aborted by"). The abort waited for ever
    /// behind the held step when only the step right after a hop counted.
    #[test]
    fn an_abort_behind_a_held_commit_is_applied_at_once() {
        let n = nova();
        let r = report(vec![
            commit(
                "hop",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.1"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Upgrade,
                )],
            ),
            commit(
                "held",
                Verdict::Accepted,
                vec![ObjectVerdict {
                    verdict: Verdict::Held,
                    ..ov(
                        &n,
                        Some("2026.2"),
                        "2027.1",
                        &img("2027.1"),
                        Transition::Queued,
                    )
                }],
            ),
            commit(
                "abort",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2027.1"),
                    "2026.1",
                    &img("2026.1"),
                    Transition::Abort,
                )],
            ),
        ]);
        let c = &chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))[&n];
        assert_eq!(c.steps.len(), 3, "{c:#?}");
        // The hop in flight, wedged: the abort, not the held step.
        assert_eq!(
            next(c, &at("2026.2", &img("2026.2")), |_| false),
            Next::Apply(2)
        );
        // Once the hop completed, lockstep never goes backwards.
        assert!(matches!(
            next(c, &at("2026.2", &img("2026.2")), |i| i == 0),
            Next::Blocked(m) if m.contains("before the abort")
        ));
        // Aborted: the abort step is followed like any other.
        assert_eq!(
            next(c, &at("2026.1", &img("2026.1")), |_| false),
            Next::Follow(2)
        );
        let unit = UnitReport {
            chain: Arc::new(c.clone()),
            next: Next::Apply(2),
            progress: BTreeMap::new(),
            needs_person: None,
            stalled: None,
            asked: BTreeSet::new(),
            waiting: None,
            cluster_release: None,
            settled: BTreeMap::new(),
        };
        let units: BTreeMap<Key, UnitReport> = [(n.clone(), unit)].into_iter().collect();
        let st = statuses("prod", &r, &units, None);
        let of = |sha: &str| {
            st.iter()
                .find(|(x, s)| x == sha && s.context == "lockstep/prod")
                .map(|(_, s)| (s.state, s.description.clone()))
                .expect("a status")
        };
        assert_eq!(of("hop").0, State::Failure, "{:?}", of("hop"));
        assert_eq!(of("held").0, State::Failure, "{:?}", of("held"));
        assert!(
            of("held").1.contains("aborted by abort"),
            "{:?}",
            of("held")
        );
        assert_eq!(of("abort").0, State::Pending, "{:?}", of("abort"));
        // Before the abort, the held commit says it is held, in the
        // gate's words.
        let waiting = UnitReport {
            next: Next::Follow(0),
            ..units[&n].clone()
        };
        let st = statuses(
            "prod",
            &r,
            &[(n.clone(), waiting)].into_iter().collect(),
            None,
        );
        let held = st
            .iter()
            .find(|(x, s)| x == "held" && s.context == "lockstep/prod")
            .map(|(_, s)| (s.state, s.description.clone()))
            .expect("a status");
        assert_eq!(held.0, State::Pending);
        assert!(
            held.1
                .starts_with("held: nova 2026.2→2027.1 waits for the upgrade"),
            "{held:?}"
        );
        // A completed hop before the aborted one is not ended by it.
        let r2 = report(vec![
            commit(
                "first",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2025.2"),
                    "2026.1",
                    &img("2026.1"),
                    Transition::Upgrade,
                )],
            ),
            commit(
                "second",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.1"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Upgrade,
                )],
            ),
            commit(
                "back",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.2"),
                    "2026.1",
                    &img("2026.1"),
                    Transition::Abort,
                )],
            ),
        ]);
        let c2 = &chains(&r2, |_, _, _| None, |_, _, _| Err(String::new()))[&n];
        assert_eq!(abort_for(c2, 0), None);
        assert_eq!(abort_for(c2, 1), Some(2));
    }

    /// Keystone's release is its tag: a patch tag (`2026.1-p1`) is release
    /// 2026.1 as the cluster's spec is read, so the patch folds into the
    /// step of its release and the unit settles. Kept as written, the patch
    /// was a step of a release the cluster never showed, and the daemon
    /// applied the patch and the step before it in turn, for ever.
    #[test]
    fn a_keystone_patch_folds_into_its_release() {
        let k = Key::new(Kind::Keystone, "identity", "keystone");
        let ks = |t: &str| format!("ghcr.io/c5c3/keystone:{t}");
        let r = report(vec![
            commit(
                "install",
                Verdict::Accepted,
                vec![ov(&k, None, "2026.1", &ks("2026.1"), Transition::Install)],
            ),
            commit(
                "patch",
                Verdict::Accepted,
                vec![ov(
                    &k,
                    Some("2026.1"),
                    "2026.1-p1",
                    &ks("2026.1-p1"),
                    Transition::Patch,
                )],
            ),
        ]);
        let c = &chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))[&k];
        assert_eq!(c.steps.len(), 1, "{c:#?}");
        assert_eq!(c.steps[0].release.as_deref(), Some("2026.1"));
        let spec = |tag: &str| UnitState {
            spec: Some(Target {
                release: spec_release(
                    Kind::Keystone,
                    None,
                    ImageRef::parse_reference(&ks(tag)).ok().as_ref(),
                ),
                image: Some(ks(tag)),
            }),
            ..UnitState::default()
        };
        assert_eq!(next(c, &spec("2026.1"), |_| true), Next::Apply(0));
        assert_eq!(next(c, &spec("2026.1-p1"), |_| true), Next::Done(0));
    }

    #[test]
    fn one_hop_at_a_time_from_where_the_cluster_is() {
        let c = &chains(&story(), |_, _, _| None, |_, _, _| Err(String::new()))[&nova()];
        // Not applied yet: the first step.
        assert_eq!(
            next(c, &at("2026.1", &img("2026.1")), |_| true),
            Next::Apply(0)
        );
        // Applied, in flight: follow, do not go on.
        assert_eq!(
            next(c, &at("2026.2", &img("2026.2-p1")), |_| false),
            Next::Follow(0)
        );
        // Complete: the next hop.
        assert_eq!(
            next(c, &at("2026.2", &img("2026.2-p1")), |i| i == 0),
            Next::Apply(1)
        );
        // The first commit's image only (a restart after applying it, or an
        // edit outside Git): the step's image is applied.
        assert_eq!(
            next(c, &at("2026.2", &img("2026.2")), |_| true),
            Next::Apply(0)
        );
        assert_eq!(
            next(c, &at("2027.1", &img("2027.1")), |_| false),
            Next::Follow(1)
        );
        assert_eq!(
            next(c, &at("2027.1", &img("2027.1")), |_| true),
            Next::Done(1)
        );
        // Missing from the cluster: installed at the newest accepted state.
        assert_eq!(next(c, &UnitState::default(), |_| false), Next::Apply(1));
        // Somewhere Git never led: lockstep does not guess.
        assert!(
            matches!(next(c, &at("2025.2", &img("2025.2")), |_| true), Next::Blocked(m) if m.contains("2025.2"))
        );
    }

    #[test]
    fn a_plane_hop_names_what_holds_it_not_the_first_child_in_key_order() {
        let child = |name: &str| Key::new(Kind::Keystone, "openstack", name);
        let phase = |phase: &str, step: u8| Progress::Phase {
            phase: phase.into(),
            step,
        };
        let map = |items: Vec<(&str, Progress)>| -> BTreeMap<Key, Progress> {
            items.into_iter().map(|(n, p)| (child(n), p)).collect()
        };
        // "a-barbican" sorts first and waits; keystone is the one at work.
        let (line, failing) = summarize(&map(vec![
            ("a-barbican", Progress::Waiting),
            ("keystone", phase("Migrating", 2)),
            ("glance", Progress::Complete),
        ]));
        assert_eq!(line, "1/3 complete, keystone Migrating (2/4)");
        assert!(!failing);
        // The laggard among those in the machine.
        let (line, _) = summarize(&map(vec![
            ("glance", phase("Contracting", 4)),
            ("nova", phase("Expanding", 1)),
            (
                "placement",
                Progress::Settling {
                    what: "second roll",
                },
            ),
        ]));
        assert_eq!(line, "0/3 complete, nova Expanding (1/4)");
        // A failure outranks everything, and marks the line as failing.
        let (line, failing) = summarize(&map(vec![
            ("glance", phase("Expanding", 1)),
            (
                "nova",
                Progress::Failed {
                    reason: "MigrateFailed".into(),
                    message: "boom".into(),
                },
            ),
        ]));
        assert_eq!(line, "0/2 complete, nova MigrateFailed: boom");
        assert!(failing);
        // Nothing picked up yet; all complete; one object reads as before.
        let (line, _) = summarize(&map(vec![
            ("glance", Progress::Waiting),
            ("nova", Progress::Waiting),
        ]));
        assert_eq!(line, "0/2 complete, glance waiting for the operator");
        let (line, _) = summarize(&map(vec![("glance", Progress::Complete)]));
        assert_eq!(line, "settling");
        let (line, _) = summarize(&map(vec![("nova", phase("RollingUpdate", 3))]));
        assert_eq!(line, "RollingUpdate (3/4)");
    }

    #[test]
    fn statuses_move_from_pending_to_success_and_refusals_fail() {
        let r = story();
        let c = Arc::new(
            chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))
                .remove(&nova())
                .unwrap(),
        );
        let unit = |next: Next, p: Progress| UnitReport {
            chain: c.clone(),
            next,
            progress: [(nova(), p)].into_iter().collect(),
            needs_person: None,
            stalled: None,
            asked: BTreeSet::new(),
            waiting: None,
            cluster_release: None,
            settled: BTreeMap::new(),
        };
        let find = |list: &[(String, Status)], sha: &str, ctx: &str| {
            list.iter()
                .find(|(s, st)| s == sha && st.context == ctx)
                .map(|(_, st)| (st.state, st.description.clone()))
                .unwrap()
        };
        let units: BTreeMap<Key, UnitReport> = [(
            nova(),
            unit(
                Next::Follow(0),
                Progress::Phase {
                    phase: "Migrating".into(),
                    step: 2,
                },
            ),
        )]
        .into_iter()
        .collect();
        let s = statuses("prod", &r, &units, None);
        let (st, d) = find(&s, "a", "lockstep/prod");
        assert_eq!(st, State::Pending);
        assert!(d.contains("nova 2026.1→2026.2: Migrating (2/4)"), "{d}");
        assert_eq!(find(&s, "c", "lockstep/prod").0, State::Failure);
        let (st, d) = find(&s, "d", "lockstep/prod");
        assert_eq!(st, State::Pending);
        assert!(d.starts_with("queued"), "{d}");
        // The object's progress goes on the hop's commit, never on the
        // patch folded over it (a later fold would leave it behind).
        let (st, d) = find(&s, "a", "lockstep/prod/compute/nova");
        assert_eq!(st, State::Pending);
        assert!(d.contains("Migrating (2/4)"), "{d}");
        assert!(
            !s.iter()
                .any(|(sha, st)| sha == "b" && st.context == "lockstep/prod/compute/nova")
        );

        let units: BTreeMap<Key, UnitReport> = [(nova(), unit(Next::Done(1), Progress::Complete))]
            .into_iter()
            .collect();
        let s = statuses("prod", &r, &units, None);
        for sha in ["a", "b", "d"] {
            let (st, d) = find(&s, sha, "lockstep/prod");
            assert_eq!(st, State::Success, "{sha}");
            assert!(d.starts_with("applied:"), "{d}");
        }
        assert_eq!(
            find(&s, "d", "lockstep/prod/compute/nova").0,
            State::Success
        );

        let mut failed = unit(
            Next::Follow(1),
            Progress::Failed {
                reason: "MigrateFailed".into(),
                message: "boom".into(),
            },
        );
        failed.needs_person = Some("nova: MigrateFailed: boom; run lockstep retry".into());
        failed.asked.insert(nova());
        let units: BTreeMap<Key, UnitReport> = [(nova(), failed)].into_iter().collect();
        let s = statuses("prod", &r, &units, None);
        assert_eq!(find(&s, "a", "lockstep/prod").0, State::Success);
        let (st, d) = find(&s, "d", "lockstep/prod");
        assert_eq!(st, State::Failure);
        assert!(d.contains("lockstep retry"), "{d}");
        assert_eq!(
            find(&s, "d", "lockstep/prod/compute/nova").0,
            State::Failure
        );

        // The same failure while lockstep re-runs the Job (no person
        // asked for yet), and a stall (told, may still move): pending,
        // commit and object alike, so that success can follow once.
        let repairing = unit(
            Next::Follow(1),
            Progress::Failed {
                reason: "MigrateFailed".into(),
                message: "boom".into(),
            },
        );
        let mut stalled = unit(
            Next::Follow(1),
            Progress::Stalled {
                phase: "Migrating".into(),
                over: std::time::Duration::from_secs(3600),
            },
        );
        stalled.stalled = Some("compute/nova: stalled in Migrating".into());
        for (u, words) in [
            (
                repairing,
                "repairing nova 2026.2→2027.1: MigrateFailed: boom",
            ),
            (
                stalled,
                "nova 2026.2→2027.1: stalled in Migrating: no progress for over 1h",
            ),
        ] {
            let units: BTreeMap<Key, UnitReport> = [(nova(), u)].into_iter().collect();
            let s = statuses("prod", &r, &units, None);
            let (st, d) = find(&s, "d", "lockstep/prod");
            assert_eq!((st, d.as_str()), (State::Pending, words));
            let (st, d) = find(&s, "d", "lockstep/prod/compute/nova");
            assert_eq!(st, State::Pending, "{d}");
        }
        // A person asked about another object of the unit (a plane's Glance
        // whose budget is spent): the hop's commit fails, but this object,
        // still being repaired, reads pending.
        let mut other = unit(
            Next::Follow(1),
            Progress::Failed {
                reason: "MigrateFailed".into(),
                message: "boom".into(),
            },
        );
        other.needs_person = Some("glance: budget spent".into());
        other
            .asked
            .insert(Key::new(Kind::Glance, "compute", "glance"));
        let units: BTreeMap<Key, UnitReport> = [(nova(), other)].into_iter().collect();
        let s = statuses("prod", &r, &units, None);
        assert_eq!(find(&s, "d", "lockstep/prod").0, State::Failure);
        assert_eq!(
            find(&s, "d", "lockstep/prod/compute/nova").0,
            State::Pending
        );

        // A hop a pre-flight gate holds: pending, saying why, never failure
        // (it is not refused) and never "applying" (it is not applied).
        let mut held = unit(Next::Apply(1), Progress::Complete);
        held.waiting = Some(Wait::new(
            WaitOn::Gate,
            "waiting: last backup of nova 31h old, need 24h",
        ));
        let units: BTreeMap<Key, UnitReport> = [(nova(), held)].into_iter().collect();
        let s = statuses("prod", &r, &units, None);
        assert_eq!(find(&s, "a", "lockstep/prod").0, State::Success);
        let (st, d) = find(&s, "d", "lockstep/prod");
        assert_eq!(st, State::Pending);
        assert!(
            d.ends_with(": waiting: last backup of nova 31h old, need 24h")
                && d.starts_with("nova "),
            "{d}"
        );
    }

    /// Found by `tests/gate_property.rs`: a unit removed from Git is never
    /// applied again (not installed, not moved on), a hop already in flight
    /// is followed to its end, the commits it never reached settle saying
    /// so, and a re-add takes the chain on.
    #[test]
    fn a_unit_removed_from_git_is_not_applied_and_its_commits_settle() {
        let n = nova();
        let mut r = story();
        let gone = |sha: &str| {
            commit(
                sha,
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2027.1"),
                    "2027.1",
                    &img("2027.1"),
                    Transition::Remove,
                )],
            )
        };
        r.commits.push(gone("e"));
        let c = Arc::new(
            chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))
                .remove(&n)
                .unwrap(),
        );
        let by = || Removal {
            sha: "e".into(),
            plane: None,
        };
        assert_eq!(c.removed, Some(by()));
        // Not in the cluster: nothing is installed, no step reached it.
        assert_eq!(
            next(&c, &UnitState::default(), |_| true),
            Next::Removed { at: 0, by: by() }
        );
        // The first hop done, the second not started: it never is.
        let first = at("2026.2", &img("2026.2-p1"));
        assert_eq!(
            next(&c, &first, |i| i == 0),
            Next::Removed { at: 1, by: by() }
        );
        // In flight when Git removed it: followed, never abandoned midway.
        assert_eq!(next(&c, &first, |_| false), Next::Follow(0));
        // At a step's release with another image (an edit outside Git, or
        // a patch never applied): never re-asserted; followed while the
        // object is in flight towards its own spec, else not applied.
        let mut edited = at("2027.1", &img("2027.1-edited"));
        assert_eq!(
            next(&c, &edited, |_| false),
            Next::Removed { at: 1, by: by() }
        );
        let object = |progress| ObjectState {
            spec: edited.spec.clone().unwrap(),
            progress,
            installed: None,
        };
        edited.objects.insert(
            n.clone(),
            object(Progress::Phase {
                phase: "Migrating".into(),
                step: 2,
            }),
        );
        assert_eq!(next(&c, &edited, |_| false), Next::Follow(1));
        edited.objects.insert(n.clone(), object(Progress::Complete));
        assert_eq!(
            next(&c, &edited, |_| false),
            Next::Removed { at: 1, by: by() }
        );
        assert_eq!(
            next(&c, &at("2027.1", &img("2027.1")), |_| true),
            Next::Done(1)
        );

        let units: BTreeMap<Key, UnitReport> = [(
            n.clone(),
            UnitReport {
                chain: c.clone(),
                next: Next::Removed { at: 1, by: by() },
                progress: [(n.clone(), Progress::Complete)].into_iter().collect(),
                needs_person: None,
                stalled: None,
                asked: BTreeSet::new(),
                waiting: None,
                cluster_release: None,
                settled: BTreeMap::new(),
            },
        )]
        .into_iter()
        .collect();
        let s = statuses("prod", &r, &units, None);
        let of = |sha: &str| {
            s.iter()
                .find(|(c, st)| c == sha && st.context == "lockstep/prod")
                .map(|(_, st)| (st.state, st.description.clone()))
                .unwrap()
        };
        for sha in ["a", "b"] {
            let (st, d) = of(sha);
            assert_eq!(st, State::Success, "{sha}");
            assert!(d.starts_with("applied:"), "{d}");
        }
        // Settled (never left pending), and not called applied.
        let (st, d) = of("d");
        assert_eq!(st, State::Success);
        assert_eq!(
            d,
            "accepted, not applied: nova 2026.2→2027.1 was removed from Git in e before it reached the cluster"
        );
        assert_eq!(of("e").0, State::Success);

        // Added back (at its floor): the chain goes on from there.
        r.commits.push(commit(
            "f",
            Verdict::Accepted,
            vec![ov(
                &n,
                Some("2027.1"),
                "2027.1",
                &img("2027.1-p1"),
                Transition::Patch,
            )],
        ));
        let c = &chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))[&n];
        assert_eq!(c.removed, None);
        assert_eq!(next(c, &UnitState::default(), |_| true), Next::Apply(1));
        // Removed with an abort not applied yet: the hop in flight goes on
        // (followed, not aborted), and the abort is never applied.
        let r = report(vec![
            commit(
                "h",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.1"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Upgrade,
                )],
            ),
            commit(
                "x",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.2"),
                    "2026.1",
                    &img("2026.1"),
                    Transition::Abort,
                )],
            ),
            gone("g"),
        ]);
        let c = &chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))[&n];
        let hop = at("2026.2", &img("2026.2"));
        assert_eq!(next(c, &hop, |_| false), Next::Follow(0));
        assert_eq!(
            next(c, &hop, |_| true),
            Next::Removed {
                at: 1,
                by: Removal {
                    sha: "g".into(),
                    plane: None
                }
            }
        );
    }

    /// Found by `tests/gate_property.rs`: a standalone service that a
    /// ControlPlane projects from a later commit on is the plane's now; the
    /// standalone chain's own steps (a patch) are never applied after it.
    #[test]
    fn a_standalone_service_handed_to_a_plane_ends_its_own_chain() {
        let n = Key::new(Kind::Nova, "openstack", "prod-nova");
        let mut child = ov(
            &n,
            Some("2027.2"),
            "2028.1",
            &img("2028.1"),
            Transition::Upgrade,
        );
        child.projected_by = Some("prod".into());
        let r = report(vec![
            commit(
                "a",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2027.2"),
                    "2027.2",
                    &img("2027.2-p1"),
                    Transition::Patch,
                )],
            ),
            commit("b", Verdict::Accepted, vec![child]),
        ]);
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        let all = chains(
            &r,
            |_, _, _| Some(plane.clone()),
            |_, _, _| Err(String::new()),
        );
        let c = &all[&n];
        let by = Removal {
            sha: "b".into(),
            plane: Some("prod".into()),
        };
        assert_eq!(c.removed, Some(by.clone()));
        assert_eq!(by.describe(), "handed to ControlPlane prod in b");
        // The cluster still runs the unpatched 2027.2: the patch is not
        // re-asserted over what the plane projects.
        assert_eq!(
            next(c, &at("2027.2", &img("2027.2")), |_| true),
            Next::Removed { at: 0, by }
        );
        assert_eq!(
            all[&plane].steps[0].children[&n].release.as_deref(),
            Some("2028.1")
        );
        // Projected now, and moved on by the plane: not blocked (it is not
        // Git's standalone object any more), its step passed.
        let mut moved = at("2028.1", &img("2028.1"));
        moved.projected_by = Some(plane.clone());
        assert_eq!(
            next(c, &moved, |_| true),
            Next::Removed {
                at: 1,
                by: c.removed.clone().unwrap()
            }
        );
    }

    /// A plane that drops a service block keeps the child running (the
    /// operator does not delete it) but no longer projects it: its steps
    /// stop following the child, and the drop alone is no step to apply. A
    /// plane removed from Git takes its children with it (the plane's
    /// chain ends, nothing is dropped one by one).
    #[test]
    fn a_plane_dropping_a_service_stops_following_that_child() {
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        let kid = |name: &str, from: Option<&str>, to: &str, t: Transition| {
            let k = Key::new(Kind::Nova, "openstack", name);
            let mut o = ov(&k, from, to, &img(to), t);
            o.projected_by = Some("prod".into());
            o
        };
        let own = |from: Option<&str>, to: &str, t: Transition| {
            let mut o = ov(&plane, from, to, &img(to), t);
            o.to_image = None;
            o
        };
        let mut r = report(vec![
            commit(
                "a",
                Verdict::Accepted,
                vec![
                    own(None, "2026.1", Transition::Install),
                    kid("prod-nova", None, "2026.1", Transition::Install),
                    kid("prod-cells", None, "2026.1", Transition::Install),
                ],
            ),
            commit(
                "b",
                Verdict::Accepted,
                vec![kid(
                    "prod-cells",
                    Some("2026.1"),
                    "2026.1",
                    Transition::Remove,
                )],
            ),
        ]);
        let build = |r: &CheckReport| {
            chains(
                r,
                |_, _, _| Some(plane.clone()),
                |_, _, _| Err(String::new()),
            )
        };
        let names = |c: &Chain, i: usize| -> Vec<String> {
            c.steps[i].children.keys().map(|k| k.name.clone()).collect()
        };
        let c = &build(&r)[&plane];
        assert_eq!(c.steps.len(), 1);
        assert_eq!(c.steps[0].commits, vec!["a"]);
        assert_eq!(names(c, 0), vec!["prod-nova"]);
        assert_eq!(c.removed, None);
        r.commits.push(commit(
            "c",
            Verdict::Accepted,
            vec![
                own(Some("2026.1"), "2026.2", Transition::Upgrade),
                kid("prod-nova", Some("2026.1"), "2026.2", Transition::Upgrade),
            ],
        ));
        let c = &build(&r)[&plane];
        assert_eq!(names(c, 1), vec!["prod-nova"]);
        // Removed with its children: the chain ends, no step is added.
        r.commits.push(commit(
            "d",
            Verdict::Accepted,
            vec![
                own(Some("2026.2"), "2026.2", Transition::Remove),
                kid("prod-nova", Some("2026.2"), "2026.2", Transition::Remove),
            ],
        ));
        let c = &build(&r)[&plane];
        assert_eq!(c.steps.len(), 2);
        assert_eq!(names(c, 1), vec!["prod-nova"]);
        assert_eq!(c.removed.as_ref().map(|r| r.sha.as_str()), Some("d"));
    }

    /// A chain of `hops` hops of nova from 2026.1, some commits patches on
    /// the hop before, some refused skips in between.
    fn random_story(kinds: &[u8]) -> CheckReport {
        let rel = |i: usize| format!("{}.{}", 2026 + i / 2, 1 + i % 2);
        let n = nova();
        let mut commits = Vec::new();
        let mut at = 0usize;
        let mut patch = 0;
        // Whether the last step is a hop an abort may end.
        let mut abortable = false;
        for (k, kind) in kinds.iter().enumerate() {
            let sha = format!("c{k}");
            let kind = match kind % 5 {
                3 if !abortable => 1,
                k => k,
            };
            abortable = matches!(kind, 0 | 4);
            let c = match kind {
                3 => {
                    // The set-back of the hop in flight, release and image.
                    at -= 1;
                    patch = 0;
                    commit(
                        &sha,
                        Verdict::Accepted,
                        vec![ov(
                            &n,
                            Some(&rel(at + 1)),
                            &rel(at),
                            &img(&rel(at)),
                            Transition::Abort,
                        )],
                    )
                }
                4 => {
                    // The next release while the hop before is in flight.
                    at += 1;
                    patch = 0;
                    let mut held = ov(
                        &n,
                        Some(&rel(at - 1)),
                        &rel(at),
                        &img(&rel(at)),
                        Transition::Queued,
                    );
                    held.verdict = Verdict::Held;
                    commit(&sha, Verdict::Held, vec![held])
                }
                0 => {
                    at += 1;
                    patch = 0;
                    commit(
                        &sha,
                        Verdict::Accepted,
                        vec![ov(
                            &n,
                            Some(&rel(at - 1)),
                            &rel(at),
                            &img(&rel(at)),
                            Transition::Upgrade,
                        )],
                    )
                }
                1 => {
                    patch += 1;
                    commit(
                        &sha,
                        Verdict::Accepted,
                        vec![ov(
                            &n,
                            Some(&rel(at)),
                            &rel(at),
                            &img(&format!("{}-p{patch}", rel(at))),
                            Transition::Patch,
                        )],
                    )
                }
                _ => {
                    let mut skip = ov(
                        &n,
                        Some(&rel(at)),
                        &rel(at + 2),
                        &img(&rel(at + 2)),
                        Transition::Skip,
                    );
                    skip.verdict = Verdict::Refused;
                    commit(&sha, Verdict::Refused, vec![skip])
                }
            };
            commits.push(c);
        }
        report(commits)
    }

    proptest::proptest! {
        /// The status rules (`docs/gate.md`, "After acceptance"), over a
        /// unit walking its chain one hop at a time: an accepted commit is
        /// pending until every step it carries completed, then success;
        /// no (commit, context) ever goes from success back to pending;
        /// when the chain is done, nothing is left pending, and every
        /// per-object status of every hop, mid-chain included, is success.
        /// With `cut`, Git removes the unit in a last commit once the unit
        /// completed its first `cut` steps: the others settle too, as
        /// success that says they were not applied.
        #[test]
        fn statuses_settle_once_and_never_before_the_work(
            kinds in proptest::collection::vec(0u8..5, 1..10),
            cut in proptest::option::of(0usize..10),
        ) {
            let mut r = random_story(&kinds);
            if cut.is_some() {
                let n = nova();
                r.commits.push(commit("gone", Verdict::Accepted, vec![ov(&n, None, "2026.1", &img("2026.1"), Transition::Remove)]));
            }
            let chain = chains(&r, |_, _, _| None, |_, _, _| Err(String::new())).remove(&nova());
            let cut = cut.map(|k| k.min(chain.as_ref().map_or(0, |c| c.steps.len())));
            let mut seen: BTreeMap<(String, String), Vec<State>> = BTreeMap::new();
            let mut record = |list: Vec<(String, Status)>| {
                for (sha, st) in list {
                    seen.entry((sha, st.context)).or_default().push(st.state);
                }
            };
            // Judged, before any unit was read (the verdicts go out first).
            record(statuses("prod", &r, &BTreeMap::new(), None));
            let mut walk = Vec::new();
            if let Some(c) = &chain {
                let c = Arc::new(c.clone());
                let phase = Progress::Phase { phase: "Migrating".into(), step: 2 };
                for i in 0..cut.unwrap_or(c.steps.len()) {
                    walk.push((c.clone(), Next::Apply(i), Progress::Waiting));
                    walk.push((c.clone(), Next::Follow(i), phase.clone()));
                    walk.push((c.clone(), Next::Follow(i), Progress::Settling { what: "second roll of the workers" }));
                }
                match (cut, &c.removed) {
                    (Some(at), Some(by)) => walk.push((c.clone(), Next::Removed { at, by: by.clone() }, Progress::Complete)),
                    (Some(_), None) => proptest::prop_assert!(false, "the removal did not end the chain"),
                    (None, _) => walk.push((c.clone(), Next::Done(c.steps.len() - 1), Progress::Complete)),
                }
            }
            for (c, next, p) in walk {
                let units: BTreeMap<Key, UnitReport> = [(
                    nova(),
                    UnitReport { chain: c, next, progress: [(nova(), p)].into_iter().collect(), needs_person: None, stalled: None, asked: BTreeSet::new(), waiting: None, cluster_release: None, settled: BTreeMap::new() },
                )]
                .into_iter()
                .collect();
                record(statuses("prod", &r, &units, None));
            }
            for ((sha, ctx), states) in &seen {
                let first_success = states.iter().position(|s| *s == State::Success);
                if let Some(f) = first_success {
                    proptest::prop_assert!(
                        states[f..].iter().all(|s| *s == State::Success),
                        "{sha} {ctx} went back from success: {states:?}"
                    );
                }
                let last = states.last().copied();
                proptest::prop_assert_ne!(last, Some(State::Pending), "{} {} left pending", sha, ctx);
            }
            // Accepted (and held) commits that carry a step were pending first.
            let stepped = |sha: &str| chain.as_ref().is_some_and(|c| c.steps.iter().any(|s| s.commits.iter().any(|x| x == sha)));
            for c in r.commits.iter().filter(|c| c.verdict != Verdict::Refused && stepped(&c.sha)) {
                let states = &seen[&(c.sha.clone(), "lockstep/prod".to_owned())];
                proptest::prop_assert_eq!(states[0], State::Pending, "{} success before the apply", c.sha);
            }
            // Nothing here needs a person: a failure is an abort's, final,
            // and only on a hop an abort ended.
            for ((sha, ctx), states) in &seen {
                if let Some(f) = states.iter().position(|s| *s == State::Failure) {
                    proptest::prop_assert!(
                        states[f..].iter().all(|s| *s == State::Failure),
                        "{sha} {ctx} left failure: {states:?}"
                    );
                    let refused = r.commits.iter().any(|c| c.sha == *sha && c.verdict == Verdict::Refused);
                    let aborted = chain.as_ref().is_some_and(|c| {
                        c.steps.windows(2).any(|w| w[1].abort && w[0].commits.contains(sha))
                    });
                    proptest::prop_assert!(refused || aborted, "{sha} {ctx} failed: {states:?}");
                }
            }
            // The steps the removal overtook: success, saying so, and only
            // those (the last status each got, on the commit's context).
            if let (Some(at), Some(c)) = (cut, &chain) {
                let last = |sha: &str| {
                    statuses("prod", &r, &[(nova(), UnitReport {
                        chain: Arc::new(c.clone()),
                        next: Next::Removed { at, by: c.removed.clone().expect("removed") },
                        progress: [(nova(), Progress::Complete)].into_iter().collect(),
                        needs_person: None, stalled: None, asked: BTreeSet::new(), waiting: None, cluster_release: None, settled: BTreeMap::new(),
                    })].into_iter().collect(), None)
                    .into_iter()
                    .find(|(x, st)| x == sha && st.context == "lockstep/prod")
                    .map(|(_, st)| st)
                };
                for (i, step) in c.steps.iter().enumerate() {
                    for sha in &step.commits {
                        let st = last(sha).expect("a status");
                        // An abort ends the hop before it only if it was
                        // applied, before the cut.
                        let ended = c.steps.get(i + 1).is_some_and(|s| s.abort) && i + 1 < at;
                        let want = if ended { State::Failure } else { State::Success };
                        proptest::prop_assert_eq!(st.state, want, "step {} (cut {}) of {}: {}", i, at, sha, &st.description);
                        proptest::prop_assert_eq!(st.description.contains("not applied"), i >= at,
                            "step {} (cut {}) of {}: {}", i, at, sha, &st.description);
                    }
                }
            }
        }
    }

    /// One standalone object in the cluster, as the arrival property plays
    /// it: its spec, installed release and progress.
    #[derive(Clone, Debug)]
    struct Played {
        spec: Target,
        installed: Option<String>,
        progress: Progress,
    }

    impl Played {
        fn state(&self) -> UnitState {
            UnitState {
                spec: Some(self.spec.clone()),
                objects: [(
                    nova(),
                    ObjectState {
                        spec: self.spec.clone(),
                        progress: self.progress.clone(),
                        installed: self.installed.clone(),
                    },
                )]
                .into_iter()
                .collect(),
                projected_by: None,
                applied: None,
                gone_from: None,
            }
        }

        /// One pass over the unit as `src/daemon/units.rs` makes it
        /// (`reconcile`): decide, then apply or follow; the operator moves
        /// one stage per pass (a hop: waiting, migrating, the second roll,
        /// complete; the same release: a roll, complete).
        fn pass(&mut self, chain: &Arc<Chain>) -> UnitReport {
            let state = self.state();
            let complete = |i: usize| {
                chain.followed(i).iter().all(|(k, t)| {
                    state.objects.get(k).is_some_and(|o| {
                        o.progress == Progress::Complete && o.spec_matches(k.kind, t)
                    })
                })
            };
            let decided = next(chain, &state, complete);
            let mut report = UnitReport {
                chain: chain.clone(),
                next: decided.clone(),
                progress: BTreeMap::new(),
                needs_person: None,
                stalled: None,
                asked: BTreeSet::new(),
                waiting: None,
                cluster_release: self.spec.release.clone(),
                settled: settled(chain, &decided, &state),
            };
            match decided {
                Next::Apply(i) => {
                    let s = &chain.steps[i];
                    self.progress = if s.release != self.installed {
                        Progress::Waiting
                    } else {
                        Progress::Settling { what: "a roll" }
                    };
                    self.spec = Target {
                        release: s.release.clone(),
                        image: s.image.clone(),
                    };
                    report.next = Next::Follow(i);
                }
                Next::Follow(_) => {
                    report.progress.insert(nova(), self.progress.clone());
                    self.progress = match &self.progress {
                        Progress::Waiting => Progress::Phase {
                            phase: "Migrating".into(),
                            step: 2,
                        },
                        Progress::Phase { .. } => {
                            self.installed = self.spec.release.clone();
                            Progress::Settling {
                                what: "second roll of the workers",
                            }
                        }
                        _ => Progress::Complete,
                    };
                }
                Next::Done(_) => {
                    report.progress.insert(nova(), Progress::Complete);
                }
                Next::Blocked(_) | Next::Removed { .. } => {}
            }
            report
        }
    }

    proptest::proptest! {
        /// The status rules again, with commits arriving one at a time as
        /// the daemon judges them, a random number of passes apart: a patch
        /// may land while the hop before it is applied, in flight or long
        /// complete (then it is folded into that hop's step, which is
        /// applied again). No (commit, context) goes back from success; an
        /// accepted commit is pending first and success only once the
        /// cluster installed its release; nothing is left pending.
        #[test]
        fn statuses_settle_as_commits_arrive(
            kinds in proptest::collection::vec(0u8..4, 1..10),
            gaps in proptest::collection::vec(0usize..7, 10),
        ) {
            // Hops, patches, refused skips and held hops; aborts depend on
            // when they arrive, which the story does not know.
            let kinds: Vec<u8> = kinds.iter().map(|k| [0, 1, 2, 4][usize::from(*k)]).collect();
            let story = random_story(&kinds);
            let mut played = Played {
                spec: Target {
                    release: Some("2026.1".into()),
                    image: Some(img("2026.1")),
                },
                installed: Some("2026.1".into()),
                progress: Progress::Complete,
            };
            let mut seen: BTreeMap<(String, String), Vec<State>> = BTreeMap::new();
            let mut units: BTreeMap<Key, UnitReport> = BTreeMap::new();
            let mut chain = None;
            let n = story.commits.len();
            for k in 1..=n {
                let r = report(story.commits[..k].to_vec());
                let passes = if k == n { 80 } else { gaps[k - 1] };
                // Judged first: the verdicts go out with the last pass's units.
                let mut lists = vec![statuses("prod", &r, &units, None)];
                chain = chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))
                    .remove(&nova())
                    .map(Arc::new);
                for _ in 0..passes {
                    let Some(c) = &chain else { break };
                    units = [(nova(), played.pass(c))].into_iter().collect();
                    lists.push(statuses("prod", &r, &units, None));
                }
                for list in lists {
                    for (sha, st) in list {
                        // Success only once the cluster installed the
                        // commit's release (the commit's own context).
                        if st.state == State::Success && st.context == "lockstep/prod" {
                            let to = r.commits.iter().find(|c| c.sha == sha)
                                .and_then(|c| c.objects.first())
                                .and_then(|o| o.to.as_deref())
                                .and_then(release_of);
                            let installed = played.installed.as_deref().and_then(release_of);
                            proptest::prop_assert!(to <= installed, "{} success at {:?}: {}", sha, played.installed, st.description);
                        }
                        seen.entry((sha, st.context)).or_default().push(st.state);
                    }
                }
            }
            if let Some(c) = &chain {
                proptest::prop_assert_eq!(&units[&nova()].next, &Next::Done(c.steps.len() - 1));
            }
            for ((sha, ctx), states) in &seen {
                if let Some(f) = states.iter().position(|s| *s == State::Success) {
                    proptest::prop_assert!(
                        states[f..].iter().all(|s| *s == State::Success),
                        "{} {} went back from success: {:?}", sha, ctx, states
                    );
                }
                proptest::prop_assert_ne!(states.last().copied(), Some(State::Pending), "{} {} left pending", sha, ctx);
            }
            for c in story.commits.iter().filter(|c| c.verdict != Verdict::Refused) {
                let states = &seen[&(c.sha.clone(), "lockstep/prod".to_owned())];
                proptest::prop_assert_eq!(states[0], State::Pending, "{} success before the apply", &c.sha);
            }
        }
    }

    /// Horizon installs no release: a commit another was folded over is told
    /// done by its image alone. Once the cluster ran it to completion it
    /// stays success while the later one is applied; one the cluster never
    /// ran is success (saying what replaced it) only once a later commit's
    /// image runs.
    #[test]
    fn a_kind_without_releases_settles_folded_commits_by_image() {
        let h = Key::new(Kind::Horizon, "dashboard", "horizon");
        let himg = |t: &str| format!("ghcr.io/c5c3/horizon:{t}");
        let patch = |sha: &str, tag: &str, t: Transition| {
            let mut o = ov(&h, None, "x", &himg(tag), t);
            o.to = None;
            commit(sha, Verdict::Accepted, vec![o])
        };
        let r = report(vec![
            patch("h0", "a", Transition::Install),
            patch("h1", "b", Transition::Patch),
            patch("h2", "c", Transition::Patch),
        ]);
        let c = Arc::new(
            chains(&r, |_, _, _| None, |_, _, _| Err(String::new()))
                .remove(&h)
                .unwrap(),
        );
        assert_eq!(c.steps.len(), 1);
        assert_eq!(c.steps[0].commits, vec!["h0", "h1", "h2"]);
        let state = |tag: &str, progress: Progress| UnitState {
            spec: Some(Target {
                release: None,
                image: Some(himg(tag)),
            }),
            objects: [(
                h.clone(),
                ObjectState {
                    spec: Target {
                        release: None,
                        image: Some(himg(tag)),
                    },
                    progress,
                    installed: None,
                },
            )]
            .into_iter()
            .collect(),
            projected_by: None,
            applied: None,
            gone_from: None,
        };
        let settle = |s: &UnitState| settled(&c, &Next::Apply(0), s);
        // h1 ran to completion; h2 is still to be applied.
        let done = settle(&state("b", Progress::Complete));
        assert_eq!(done.get("h1"), Some(&Settled::Own));
        assert_eq!(done.get("h0"), Some(&Settled::By("h1".into())));
        // h2 applied and rolling: h0 and h1 are both replaced by it.
        let rolling = state("c", Progress::Settling { what: "a roll" });
        let done = settle(&rolling);
        assert_eq!(done.get("h0"), Some(&Settled::By("h2".into())));
        assert_eq!(done.get("h1"), Some(&Settled::By("h2".into())));
        assert!(!done.contains_key("h2"));
        // The cluster still runs an image none of them asked, mid-roll:
        // nothing is over.
        assert!(settle(&state("z", Progress::Settling { what: "a roll" })).is_empty());
        assert!(!settle(&state("b", Progress::Settling { what: "a roll" })).contains_key("h1"));
        // What the statuses say of them while h2 rolls.
        let units: BTreeMap<Key, UnitReport> = [(
            h.clone(),
            UnitReport {
                chain: c.clone(),
                next: Next::Follow(0),
                progress: [(h.clone(), Progress::Settling { what: "a roll" })]
                    .into_iter()
                    .collect(),
                needs_person: None,
                stalled: None,
                asked: BTreeSet::new(),
                waiting: None,
                cluster_release: None,
                settled: settled(&c, &Next::Follow(0), &rolling),
            },
        )]
        .into_iter()
        .collect();
        let s = statuses("prod", &r, &units, None);
        let of = |sha: &str| {
            s.iter()
                .find(|(x, st)| x == sha && st.context == "lockstep/prod")
                .map(|(_, st)| st.clone())
                .unwrap()
        };
        assert_eq!(of("h2").state, State::Pending);
        for sha in ["h0", "h1"] {
            let st = of(sha);
            assert_eq!(st.state, State::Success, "{sha}");
            assert!(
                st.description.starts_with("accepted: ")
                    && st
                        .description
                        .ends_with("; h2 replaced it at the same release"),
                "{}",
                st.description
            );
        }
    }

    /// A reconfiguration folds into the step of its release and makes it
    /// applied again: the cluster's [`APPLIED_ANNOTATION`] names the
    /// document it runs. Without the annotation (an older lockstep's apply,
    /// an adopted object) release and image decide, as before, unless the
    /// step reconfigures.
    #[test]
    fn a_reconfiguration_is_applied_by_the_digest_of_the_document() {
        let n = nova();
        let doc = |text: &str| Document::from_text(Arc::from(text));
        let r = report(vec![
            commit(
                "a",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.1"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Upgrade,
                )],
            ),
            commit(
                "b",
                Verdict::Accepted,
                vec![ov(
                    &n,
                    Some("2026.2"),
                    "2026.2",
                    &img("2026.2"),
                    Transition::Reconfigure,
                )],
            ),
        ]);
        let texts = |sha: &str| format!("{{\"at\":\"{sha}\"}}");
        let c = chains(&r, |_, _, _| None, |sha, _, _| Ok(doc(&texts(sha))))
            .remove(&n)
            .unwrap();
        assert_eq!(c.steps.len(), 1, "folded into the hop's step");
        let step = &c.steps[0];
        assert_eq!(step.commits, vec!["a", "b"]);
        assert!(step.reconfigured);
        assert_eq!(
            step.document.as_ref().map(Document::text),
            Ok(texts("b").as_str())
        );
        let first = doc(&texts("a")).digest();
        let newest = doc(&texts("b")).digest();
        assert_ne!(first, newest);
        assert_eq!(newest.len(), 32);
        let mut state = at("2026.2", &img("2026.2"));
        state.objects.insert(
            n.clone(),
            ObjectState {
                spec: state.spec.clone().unwrap(),
                progress: Progress::Complete,
                installed: Some("2026.2".into()),
            },
        );
        // The hop's document runs: the reconfiguration is applied.
        state.applied = Some(first.clone());
        assert_eq!(next(&c, &state, |_| true), Next::Apply(0));
        // Its own runs: done.
        state.applied = Some(newest.clone());
        assert_eq!(next(&c, &state, |_| true), Next::Done(0));
        // No annotation: a reconfiguring step is applied, another is not.
        state.applied = None;
        assert_eq!(next(&c, &state, |_| true), Next::Apply(0));
        let hop_only = chains(
            &report(r.commits[..1].to_vec()),
            |_, _, _| None,
            |sha, _, _| Ok(doc(&texts(sha))),
        )
        .remove(&n)
        .unwrap();
        assert!(!hop_only.steps[0].reconfigured);
        assert_eq!(next(&hop_only, &state, |_| true), Next::Done(0));
        // An annotation from another document: applied again, also for a
        // step that does not reconfigure.
        state.applied = Some(newest);
        assert_eq!(next(&hop_only, &state, |_| true), Next::Apply(0));
        // While it is applied again, the hop's commit stays settled, and
        // the reconfiguration says what is applied (not the long-done hop).
        state.applied = Some(first);
        let how = settled(&c, &Next::Apply(0), &state);
        assert_eq!(how.get("a"), Some(&Settled::Own));
        let units: BTreeMap<Key, UnitReport> = [(
            n.clone(),
            UnitReport {
                chain: Arc::new(c.clone()),
                next: Next::Follow(0),
                progress: [(n.clone(), Progress::Settling { what: "a roll" })]
                    .into_iter()
                    .collect(),
                needs_person: None,
                stalled: None,
                asked: BTreeSet::new(),
                waiting: None,
                cluster_release: None,
                settled: how,
            },
        )]
        .into_iter()
        .collect();
        let s = statuses("prod", &r, &units, None);
        let of = |sha: &str| {
            s.iter()
                .find(|(x, st)| x == sha && st.context == "lockstep/prod")
                .map(|(_, st)| (st.state, st.description.clone()))
                .unwrap()
        };
        assert_eq!(of("a").0, State::Success);
        assert_eq!(
            of("b"),
            (
                State::Pending,
                "accepted, applying: nova reconfigured".to_owned()
            )
        );
    }
}
