//! The gate's promise, proven over random histories rather than a table of
//! cases: for every identity (kind, namespace, name; a ControlPlane's
//! projected children included), the releases the gate accepts, in commit
//! order, never go down and never move more than one release past the
//! highest accepted before, whatever the history did in between: hops,
//! skips, downgrades, stale images, patches, removals and re-adds under
//! other paths and extensions, kind typos, a plane's child defined
//! standalone, merges. The same holds for a range judged from a cut
//! (looking back through older history), for a `--path` filter, and for
//! what the simulated cluster receives from the daemon, which runs until
//! idle at random points of the history (so the cluster holds older states
//! when later commits arrive) and is checked against its own judgment (the
//! live verdicts it recorded). A shallow clone either refuses or answers
//! exactly like the whole repository. A pull request that merged main in,
//! however the merge was resolved, is never accepted with an object below
//! main's release.
//!
//! Histories are written with libgit2 in process (real repositories, real
//! commits, real merges), so thousands run in `cargo test`. The number of
//! cases: `PROPTEST_CASES` (default 2000 for the gate, a twentieth of it
//! for the daemon); `PROPTEST_CASES=40000 cargo test --release --test
//! gate_property` is the long run.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use git2::{Oid, Repository, Signature};
use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{ApplyRequest, Cluster, ClusterError, ClusterObject};
use lockstep::daemon::record::Record;
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::gate::{Transition, Verdict};
use lockstep::git::{GitError, GitRepo};
use lockstep::history::{self, CheckOptions, CheckReport, EMPTY_TREE};
use lockstep::kind::Key;
use lockstep::metrics::Metrics;
use lockstep::release::{Release, TaggedRelease};
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};
use proptest::prelude::*;

const RELEASES: [&str; 7] = [
    "2025.1", "2025.2", "2026.1", "2026.2", "2027.1", "2027.2", "2028.1",
];

/// The objects a history plays with: two standalone Novas, the prod
/// ControlPlane (eight projected children), a standalone Nova named like
/// prod's own child, and a standalone Keystone, whose release is its image
/// tag and which may be pinned by digest (no release at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Obj {
    Nova,
    NovaB,
    Prod,
    ProdNova,
    Keystone,
}

const OBJS: [Obj; 5] = [
    Obj::Nova,
    Obj::NovaB,
    Obj::Prod,
    Obj::ProdNova,
    Obj::Keystone,
];

impl Obj {
    /// Where it may live: the usual file, another extension, another
    /// directory, and a name lockstep does not read.
    fn paths(self) -> [&'static str; 4] {
        match self {
            Obj::Nova => [
                "standalone/compute/nova.yaml",
                "standalone/compute/nova.yml",
                "moved/nova-again.yaml",
                "standalone/compute/nova.yaml.off",
            ],
            Obj::NovaB => [
                "standalone/compute/nova-b.yaml",
                "standalone/nova-b.yml",
                "moved/b.yaml",
                "standalone/compute/nova-b.yaml.disabled",
            ],
            Obj::Prod => [
                "clusters/prod/controlplane.yaml",
                "clusters/prod.yml",
                "moved/prod-plane.yaml",
                "clusters/prod/controlplane.yaml.off",
            ],
            Obj::ProdNova => [
                "standalone/openstack/prod-nova.yaml",
                "standalone/openstack/prod-nova.yml",
                "moved/prod-nova.yaml",
                "standalone/openstack/prod-nova.bak",
            ],
            Obj::Keystone => [
                "standalone/identity/keystone.yaml",
                "standalone/identity/keystone.yml",
                "moved/keystone.yaml",
                "standalone/identity/keystone.yaml.off",
            ],
        }
    }

    fn typos(self) -> [&'static str; 3] {
        match self {
            Obj::Prod => ["Controlplane", "CONTROLPLANE", "\"ControlPlane \""],
            Obj::Keystone => ["KEYSTONE", "keystone", "\"Keystone \""],
            _ => ["NOVA", "nova", "\"Nova \""],
        }
    }
}

/// One object as the history last wrote it.
#[derive(Clone, Debug, PartialEq)]
struct Written {
    path: usize,
    release: usize,
    /// The release the image tag names (a stale image keeps the old one).
    tag: usize,
    patch: bool,
    typo: Option<usize>,
    /// Keystone only: the image pinned by digest instead of a tag.
    pinned: bool,
}

#[derive(Clone, Debug)]
enum Op {
    /// Write the object at a release (added at its usual path if absent).
    Set {
        obj: Obj,
        release: usize,
        stale_image: bool,
    },
    /// A patch: same release, the image tag gets a suffix.
    Patch {
        obj: Obj,
    },
    Remove {
        obj: Obj,
    },
    /// Rename its file (to an unread name too).
    Move {
        obj: Obj,
        path: usize,
    },
    /// Add (or rewrite) it at another path and release.
    Add {
        obj: Obj,
        path: usize,
        release: usize,
    },
    Typo {
        obj: Obj,
        typo: usize,
    },
    FixTypo {
        obj: Obj,
    },
    /// Keystone's image pinned by digest, or back to its tag (no effect on
    /// the others).
    Pin,
    /// The fleet's UpgradePolicy blocking Nova 2026.1 → 2026.2: written
    /// (true) or removed (false).
    Policy(bool),
}

/// The policy `Op::Policy(true)` writes: Nova (standalone or projected)
/// may not cross 2026.1 → 2026.2.
const POLICY_FILE: &str = ".lockstep/policies/cells.yaml";
const POLICY: &str = "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: cells
spec:
  blocked:
    - kinds: [Nova]
      from: \"2026.1\"
      to: \"2026.2\"
      reason: 2026.2 breaks our cells layout
";

fn op() -> impl Strategy<Value = Op> {
    let obj = prop::sample::select(OBJS.to_vec());
    let rel = 0..RELEASES.len();
    prop_oneof![
        4 => (obj.clone(), rel.clone(), prop::bool::weighted(0.15))
            .prop_map(|(obj, release, stale_image)| Op::Set { obj, release, stale_image }),
        1 => obj.clone().prop_map(|obj| Op::Patch { obj }),
        2 => obj.clone().prop_map(|obj| Op::Remove { obj }),
        1 => (obj.clone(), 0..4usize).prop_map(|(obj, path)| Op::Move { obj, path }),
        2 => (obj.clone(), 0..4usize, rel).prop_map(|(obj, path, release)| Op::Add { obj, path, release }),
        1 => (obj.clone(), 0..3usize).prop_map(|(obj, typo)| Op::Typo { obj, typo }),
        1 => obj.prop_map(|obj| Op::FixTypo { obj }),
        1 => Just(Op::Pin),
        1 => prop::bool::ANY.prop_map(Op::Policy),
    ]
}

/// A commit: one or two edits, made directly on main or on a side branch
/// merged with `--no-ff` (first-parent history sees only the merge).
#[derive(Clone, Debug)]
struct Step {
    ops: Vec<Op>,
    merged: bool,
    /// The daemon runs until it has nothing left to do once main reaches
    /// this commit (it also always runs at the end): the cluster then holds
    /// this state when the later commits arrive.
    settle: bool,
}

fn history() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            prop::collection::vec(op(), 1..=2),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.25),
        )
            .prop_map(|(ops, merged, settle)| Step {
                ops,
                merged,
                settle,
            }),
        1..=12,
    )
}

fn content(obj: Obj, w: &Written) -> String {
    let tag = if w.patch {
        format!("{}-p1", RELEASES[w.tag])
    } else {
        RELEASES[w.tag].to_owned()
    };
    let release = RELEASES[w.release];
    let text = match obj {
        Obj::Nova => common::nova("nova", release, &tag),
        Obj::NovaB => common::nova("nova-b", release, &tag),
        Obj::ProdNova => common::nova("prod-nova", release, &tag).replacen(
            "namespace: compute",
            "namespace: openstack",
            1,
        ),
        Obj::Prod => common::prod(release, &tag),
        // Keystone's release is its tag: a stale image is a stale release.
        Obj::Keystone => {
            let image = if w.pinned {
                format!("digest: sha256:{}", "6c".repeat(32))
            } else {
                format!("tag: \"{tag}\"")
            };
            format!(
                "apiVersion: keystone.openstack.c5c3.io/v1alpha1\nkind: Keystone\nmetadata:\n  name: keystone\n  namespace: identity\nspec:\n  image:\n    repository: ghcr.io/c5c3/keystone\n    {image}\n"
            )
        }
    };
    match w.typo {
        None => text,
        Some(t) => {
            let kind = match obj {
                Obj::Prod => "kind: ControlPlane",
                Obj::Keystone => "kind: Keystone",
                _ => "kind: Nova",
            };
            text.replacen(kind, &format!("kind: {}", obj.typos()[t]), 1)
        }
    }
}

fn apply_op(state: &mut BTreeMap<Obj, Written>, op: &Op) {
    match op {
        Op::Set {
            obj,
            release,
            stale_image,
        } => {
            let w = state.entry(*obj).or_insert(Written {
                path: 0,
                release: *release,
                tag: *release,
                patch: false,
                typo: None,
                pinned: false,
            });
            if !stale_image {
                w.tag = *release;
                w.patch = false;
            }
            w.release = *release;
        }
        Op::Patch { obj } => {
            if let Some(w) = state.get_mut(obj) {
                w.patch = !w.patch;
            }
        }
        Op::Remove { obj } => {
            state.remove(obj);
        }
        Op::Move { obj, path } => {
            if let Some(w) = state.get_mut(obj) {
                w.path = *path;
            }
        }
        Op::Add { obj, path, release } => {
            state.insert(
                *obj,
                Written {
                    path: *path,
                    release: *release,
                    tag: *release,
                    patch: false,
                    typo: None,
                    pinned: false,
                },
            );
        }
        Op::Typo { obj, typo } => {
            if let Some(w) = state.get_mut(obj) {
                w.typo = Some(*typo);
            }
        }
        Op::FixTypo { obj } => {
            if let Some(w) = state.get_mut(obj) {
                w.typo = None;
            }
        }
        Op::Pin => {
            if let Some(w) = state.get_mut(&Obj::Keystone) {
                w.pinned = !w.pinned;
            }
        }
        Op::Policy(_) => {}
    }
}

fn tree_of(repo: &Repository, state: &BTreeMap<Obj, Written>, policy: bool) -> Oid {
    // Something that is not ours, so no tree is ever empty.
    let files = std::iter::once((
        "platform/namespaces.yaml".to_owned(),
        common::example("platform/namespaces.yaml"),
    ))
    .chain(policy.then(|| (POLICY_FILE.to_owned(), POLICY.to_owned())))
    .chain(
        state
            .iter()
            .map(|(o, w)| (o.paths()[w.path].to_owned(), content(*o, w))),
    );
    common::tree::write_tree(repo, files)
}

/// Writes the history into a new repository; returns main's commits
/// (first parent, oldest first).
fn build(dir: &Path, steps: &[Step]) -> Vec<Oid> {
    build_with_policy(dir, steps)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// [`build`], with whether each commit's tree holds the policy.
fn build_with_policy(dir: &Path, steps: &[Step]) -> Vec<(Oid, bool)> {
    // No hook samples or other template files: thousands of repositories.
    let repo = Repository::init_opts(
        dir,
        git2::RepositoryInitOptions::new().external_template(false),
    )
    .expect("init");
    let sig = Signature::new("Fleet", "fleet@example.invalid", &git2::Time::new(1, 0))
        .expect("signature");
    let mut state: BTreeMap<Obj, Written> = BTreeMap::new();
    let mut main: Vec<Oid> = Vec::new();
    let mut policy = false;
    let mut flags = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        for op in &step.ops {
            apply_op(&mut state, op);
            if let Op::Policy(on) = op {
                policy = *on;
            }
        }
        flags.push(policy);
        let tree = repo
            .find_tree(tree_of(&repo, &state, policy))
            .expect("tree");
        let parents: Vec<git2::Commit<'_>> = main
            .last()
            .map(|p| repo.find_commit(*p).expect("parent"))
            .into_iter()
            .collect();
        let parent_refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
        let msg = format!("step {i}: {:?}", step.ops);
        let id = if step.merged && !parents.is_empty() {
            let side = repo
                .commit(None, &sig, &sig, &format!("side {i}"), &tree, &parent_refs)
                .expect("side commit");
            let side = repo.find_commit(side).expect("side");
            let both = [parent_refs[0], &side];
            repo.commit(None, &sig, &sig, &format!("merge {msg}"), &tree, &both)
                .expect("merge")
        } else {
            repo.commit(None, &sig, &sig, &msg, &tree, &parent_refs)
                .expect("commit")
        };
        main.push(id);
    }
    let head = *main.last().expect("a commit");
    repo.reference("refs/heads/main", head, true, "history")
        .expect("main");
    repo.set_head("refs/heads/main").expect("HEAD");
    main.into_iter().zip(flags).collect()
}

/// The policy's promise: no accepted move of a Nova crosses 2026.1 →
/// 2026.2 while the policy is in the commit's tree or its baseline's (the
/// last accepted commit's).
fn never_crossing_the_blocked_edge(
    report: &CheckReport,
    main: &[(Oid, bool)],
) -> Result<(), String> {
    let (low, high) = (release_of("2026.1").unwrap(), release_of("2026.2").unwrap());
    let mut highest: HashMap<Key, Release> = HashMap::new();
    let mut baseline_policy = false;
    for c in &report.commits {
        let at = main
            .iter()
            .find(|(id, _)| id.to_string() == c.sha)
            .map(|(_, p)| *p)
            .ok_or("a judged commit not in main")?;
        if c.verdict != Verdict::Accepted {
            continue;
        }
        let in_effect = at || baseline_policy;
        for o in &c.objects {
            if o.verdict == Verdict::Refused || o.transition == Transition::Remove {
                continue;
            }
            let (Some(k), Some(r)) = (o.key(), o.to.as_deref().and_then(release_of)) else {
                continue;
            };
            if let Some(h) = highest.get(&k).copied()
                && in_effect
                && k.kind == lockstep::kind::Kind::Nova
                && h <= low
                && r >= high
                && o.transition != Transition::Install
            {
                return Err(format!(
                    "{k} crossed the blocked edge {h} → {r} at {}",
                    c.sha
                ));
            }
            let e = highest.entry(k).or_insert(r);
            *e = (*e).max(r);
        }
        baseline_policy = at;
    }
    Ok(())
}

fn release_of(text: &str) -> Option<Release> {
    TaggedRelease::parse(text).ok().map(|t| t.release)
}

/// The releases accepted per identity, in order, from accepted commits.
fn accepted(report: &CheckReport) -> Vec<(Key, Release, String)> {
    let mut out = Vec::new();
    for c in &report.commits {
        if c.verdict != Verdict::Accepted {
            continue;
        }
        for o in &c.objects {
            if o.verdict == Verdict::Refused || o.transition == Transition::Remove {
                continue;
            }
            if let (Some(k), Some(r)) = (o.key(), o.to.as_deref().and_then(release_of)) {
                out.push((k, r, c.sha.clone()));
            }
        }
    }
    out
}

/// The promise: per identity, never down, never past next(highest before).
fn never_down_never_skipping(seq: &[(Key, Release, String)]) -> Result<(), String> {
    let mut highest: HashMap<&Key, Release> = HashMap::new();
    for (k, r, sha) in seq {
        if let Some(h) = highest.get(k).copied() {
            if *r < h {
                return Err(format!("{k} went down {h} → {r} at {sha}"));
            }
            if *r > h.next() {
                return Err(format!("{k} skipped {h} → {r} at {sha}"));
            }
        }
        let e = highest.entry(k).or_insert(*r);
        *e = (*e).max(*r);
    }
    Ok(())
}

fn opts(base: &str, prefixes: &[&str]) -> CheckOptions {
    CheckOptions {
        base: Some(base.to_owned()),
        head: "main".into(),
        prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
        ..CheckOptions::default()
    }
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(2000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_gate_never_lets_a_release_go_down_or_skip(steps in history(), cut_seed in 0usize..1000, shallow_seed in 0u32..10) {
        let dir = tempfile::tempdir().expect("tempdir");
        let flagged = build_with_policy(dir.path(), &steps);
        let main: Vec<Oid> = flagged.iter().map(|(id, _)| *id).collect();
        let repo = GitRepo::open(dir.path()).expect("open");

        // The look back's own tree walk lists exactly what libgit2's diff
        // lists, commit by commit, with and without a prefix.
        let raw = Repository::open(dir.path()).expect("open");
        let mut parent = None;
        for id in &main {
            let tree = raw.find_commit(*id).expect("commit").tree_id();
            for prefixes in [vec![], vec!["standalone".to_owned()], vec!["clusters/prod".to_owned()]] {
                let key = |c: &lockstep::git::Change| (c.path.clone(), c.old.clone(), c.new.clone());
                let mut a: Vec<_> = repo
                    .changed_files(parent, tree, &prefixes, lockstep::manifest::is_manifest_path)
                    .expect("diff")
                    .iter()
                    .map(key)
                    .collect();
                let mut b: Vec<_> = repo
                    .changed_files_walk(parent, tree, &prefixes, lockstep::manifest::is_manifest_path)
                    .expect("walk")
                    .iter()
                    .map(key)
                    .collect();
                a.sort_by(|x, y| x.0.cmp(&y.0));
                b.sort_by(|x, y| x.0.cmp(&y.0));
                prop_assert_eq!(a, b, "commit {}, prefixes {:?}", id, prefixes);
            }
            parent = Some(tree);
        }

        // The whole first-parent history.
        let whole = history::check(&repo, &opts(EMPTY_TREE, &[])).expect("check");
        let seq = accepted(&whole);
        never_down_never_skipping(&seq).map_err(|e| TestCaseError::fail(format!("whole history: {e}")))?;
        never_crossing_the_blocked_edge(&whole, &flagged)
            .map_err(|e| TestCaseError::fail(format!("whole history: {e}")))?;

        // Judged from a cut at an accepted commit (its tree is the last
        // accepted state there): the older history is looked back into.
        let accepted_at: Vec<usize> = whole
            .commits
            .iter()
            .enumerate()
            .filter(|(_, c)| c.verdict == Verdict::Accepted)
            .map(|(i, _)| i)
            .collect();
        if !accepted_at.is_empty() {
            let k = accepted_at[cut_seed % accepted_at.len()];
            let cut = main[k].to_string();
            let after = history::check(&repo, &opts(&cut, &[])).expect("check from a cut");
            // The one-shot `check` drops the floors at the head; its
            // verdicts are the same (the look back still keeps its own).
            let one_shot = history::check(
                &repo,
                &CheckOptions { keep_floors: false, ..opts(&cut, &[]) },
            )
            .expect("one-shot check from a cut");
            prop_assert_eq!(
                serde_json::to_string(&one_shot.commits).expect("json"),
                serde_json::to_string(&after.commits).expect("json"),
                "keep_floors changed a verdict from the cut after commit {}", k
            );
            prop_assert!(one_shot.memory.at.is_none() && one_shot.memory.floors.is_empty());
            let before: Vec<(Key, Release, String)> = seq
                .iter()
                .filter(|(_, _, sha)| {
                    main.iter().position(|m| m.to_string() == *sha).is_some_and(|i| i <= k)
                })
                .cloned()
                .collect();
            let joined: Vec<_> = before.into_iter().chain(accepted(&after)).collect();
            never_down_never_skipping(&joined)
                .map_err(|e| TestCaseError::fail(format!("from the cut after commit {k}: {e}")))?;
        }

        // A path filter sees fewer files; the promise holds for what it sees.
        for prefix in ["standalone", "./clusters/"] {
            match history::check(&repo, &opts(EMPTY_TREE, &[prefix])) {
                Ok(r) => never_down_never_skipping(&accepted(&r))
                    .map_err(|e| TestCaseError::fail(format!("--path {prefix}: {e}")))?,
                // A prefix that names nothing anywhere is a usage error.
                Err(GitError::Path { .. }) => {}
                Err(e) => return Err(TestCaseError::fail(format!("--path {prefix}: {e}"))),
            }
        }

        // A shallow clone (one case in ten: a clone costs a process) either
        // refuses or answers exactly what the whole repository answers.
        if shallow_seed == 0 && main.len() > 1 {
            let depth = 1 + (cut_seed % main.len());
            let clone = tempfile::tempdir().expect("tempdir");
            let out = std::process::Command::new("git")
                .args(["clone", "-q", "--depth", &depth.to_string(), "--branch", "main"])
                .arg(format!("file://{}", dir.path().display()))
                .arg(clone.path().join("c"))
                .output()
                .expect("git clone");
            prop_assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let shallow = GitRepo::open(&clone.path().join("c")).expect("open clone");
            for base in [None, Some(main[main.len() - 2].to_string())] {
                let o = CheckOptions { base: base.clone(), head: "main".into(), ..CheckOptions::default() };
                let full = history::check(&repo, &o).expect("full");
                match history::check(&shallow, &o) {
                    Err(GitError::Shallow { .. }) => {}
                    // The base itself lies below the cut.
                    Err(GitError::UnknownRevision { why, .. }) if why.contains("shallow clone") => {}
                    Ok(r) => prop_assert_eq!(
                        serde_json::to_value(&r).expect("json"),
                        serde_json::to_value(&full).expect("json"),
                        "depth {}, base {:?}", depth, base
                    ),
                    Err(e) => return Err(TestCaseError::fail(format!("shallow: {e}"))),
                }
            }
        }
    }
}

/// One apply as the cluster saw it: the release it ran before, and the one
/// it was sent.
type Sent = (Key, Option<Release>, Release);

/// The simulated cluster, recording every apply lockstep sends it with
/// what the object ran at that moment (objects are never deleted, so that
/// is the floor the apply must respect).
#[derive(Clone)]
struct Recorder {
    inner: MemoryCluster,
    applies: Arc<Mutex<Vec<Sent>>>,
}

impl Cluster for Recorder {
    crate::forward_cluster!(all_but apply);
    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        let before = {
            let w = self.inner.world()?;
            w.planes
                .get(&req.key)
                .map(|p| p.release.clone())
                .or_else(|| w.objects.get(&req.key).and_then(|o| o.release.clone()))
        };
        if let Some(sent) = req.release.as_deref().and_then(release_of) {
            self.applies.lock().expect("lock").push((
                req.key.clone(),
                before.as_deref().and_then(release_of),
                sent,
            ));
        }
        self.inner.apply(req).await
    }
}

/// Runs the daemon on the history until nothing is left to do; returns
/// every apply the cluster received, in order.
fn daemon_applies(dir: &Path) -> Vec<Sent> {
    daemon_applies_at(dir, &[]).0
}

/// Where the daemon left each unit.
type Ends = Vec<(Key, lockstep::rollout::Next)>;

/// [`daemon_applies`], with main first moved to each of `stops` in turn
/// (the daemon runs until idle at each), then back to its head: the cluster
/// holds each stop's state when the later commits arrive. Also returns the
/// daemon's record of the verdicts the live state decided, and where it
/// left each unit.
fn daemon_applies_at(dir: &Path, stops: &[Oid]) -> (Vec<Sent>, Record, Ends) {
    let raw = Repository::open(dir).expect("open");
    let head = raw.refname_to_id("refs/heads/main").expect("main's head");
    let set_main = |id: Oid| {
        raw.reference("refs/heads/main", id, true, "the daemon's stop")
            .expect("move main");
    };
    let plan: Vec<Oid> = stops.iter().copied().chain(std::iter::once(head)).collect();
    set_main(plan[0]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mem = MemoryCluster::new(World::new(Params::default()));
        let rec = Recorder {
            inner: mem.clone(),
            applies: Arc::default(),
        };
        let queue = StatusQueue::new(10_000);
        let forge = AnyForge::Notes(Notes::open(dir).expect("notes"));
        let source = Source::open(Origin::Local(dir.to_owned()), "main").expect("source");
        let opts = Options {
            cluster_name: "prop".into(),
            poll: Duration::from_millis(10),
            ..Options::default()
        };
        let clock = lockstep::daemon::virtual_start(&mem, &source, &opts).expect("seeded");
        let mut d = Daemon::new(
            opts,
            source,
            rec.clone(),
            clock,
            queue.clone(),
            Arc::new(Metrics::new()),
        );
        let metrics = Metrics::new();
        for at in plan {
            set_main(at);
            // Passes as `run --until-idle` makes them: until nothing is in
            // flight and the simulated operator has nothing left to do.
            let mut last = None;
            let mut idle = false;
            for _ in 0..2_000 {
                let out = d.pass().await;
                assert!(deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await);
                let busy = mem.step(Duration::from_secs(3600)).expect("step");
                if !out.busy && !busy {
                    idle = true;
                    break;
                }
                last = Some((out.applied, out.blocked, busy));
            }
            if !idle {
                let w = mem.world().expect("world");
                let objects: Vec<String> = w
                    .objects
                    .values()
                    .map(|o| format!("{} {:?} {:?}", o.key, o.release, o.status.installed_release))
                    .collect();
                panic!(
                    "the daemon never settled (last pass applied, blocked, sim busy: {last:?}); the cluster: {objects:#?}"
                );
            }
        }
        let record = mem
            .load_record(&lockstep::daemon::record::name("prop"))
            .await
            .expect("the record")
            .map(|t| Record::parse(&t).expect("a record that parses"))
            .unwrap_or_default();
        let ends = d
            .unit_reports()
            .iter()
            .map(|(k, u)| (k.clone(), u.next.clone()))
            .collect();
        (rec.applies.lock().expect("lock").clone(), record, ends)
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(2000) / 20,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_cluster_never_receives_a_lower_or_skipped_release(steps in history()) {
        daemon_keeps_the_promise(&steps)?;
    }
}

/// The daemon's side of the promise, for one history: what the cluster
/// receives never goes down or skips from what the object runs, and was
/// accepted by the gate for that object.
fn daemon_keeps_the_promise(steps: &[Step]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let main = build(dir.path(), steps);
    let stops: Vec<Oid> = main
        .iter()
        .zip(steps)
        .filter(|(_, s)| s.settle)
        .map(|(id, _)| *id)
        .collect();
    let (sent, record, _) = daemon_applies_at(dir.path(), &stops);
    for (k, before, r) in &sent {
        if let Some(b) = before {
            prop_assert!(r >= b, "{} running {} was sent the lower {}", k, b, r);
            prop_assert!(
                *r <= b.next(),
                "{} running {} was sent {}, past {}",
                k,
                b,
                r,
                b.next()
            );
        }
    }
    let seq: Vec<(Key, Release, String)> = sent
        .iter()
        .map(|(k, _, r)| (k.clone(), *r, String::new()))
        .collect();
    never_down_never_skipping(&seq).map_err(|e| TestCaseError::fail(format!("applied: {e}")))?;
    // Everything sent was accepted by the gate for that object, judged as
    // the daemon judged: with the live state where it decided a verdict (a
    // commit the live cluster refused changes what later commits are
    // judged against). The promise holds for that judgment too.
    let repo = GitRepo::open(dir.path()).expect("open");
    let judged = CheckOptions {
        recorded: lockstep::daemon::record::shared(&record),
        ..opts(EMPTY_TREE, &[])
    };
    let whole = history::check(&repo, &judged).expect("check");
    let ok = accepted(&whole);
    never_down_never_skipping(&ok)
        .map_err(|e| TestCaseError::fail(format!("the daemon's judgment: {e}")))?;
    for (k, _, r) in &sent {
        prop_assert!(
            ok.iter().any(|(ak, ar, _)| ak == k && ar == r),
            "{} was sent {} which the gate never accepted for it",
            k,
            r
        );
    }
    Ok(())
}

/// Found by the property above: the live plane refused a standalone child
/// (a commit Git alone accepts), so a Nova added in that commit was never
/// accepted, and a later commit adding it two releases on is an install in
/// the daemon's judgment, not the skip Git alone sees. The daemon's own
/// judgment (its record) is the oracle, not Git's alone.
#[test]
fn a_live_refusal_changes_what_later_commits_are_judged_against() {
    let set = |obj, release| Op::Set {
        obj,
        release,
        stale_image: false,
    };
    let step = |ops: Vec<Op>, settle: bool| Step {
        ops,
        merged: false,
        settle,
    };
    let steps = vec![
        step(vec![Op::Patch { obj: Obj::Nova }], false),
        step(vec![set(Obj::Prod, 5)], false),
        step(
            vec![Op::Add {
                obj: Obj::ProdNova,
                path: 0,
                release: 5,
            }],
            true,
        ),
        step(vec![set(Obj::Nova, 0)], false),
        step(vec![Op::Remove { obj: Obj::Prod }], false),
        step(vec![set(Obj::Nova, 0)], false),
        step(
            vec![
                Op::Add {
                    obj: Obj::ProdNova,
                    path: 3,
                    release: 0,
                },
                set(Obj::Nova, 2),
            ],
            false,
        ),
    ];
    daemon_keeps_the_promise(&steps).unwrap();
}

/// Found by the property above: a plane removed from Git keeps running and
/// re-asserts its children, so a standalone manifest for one of them (one
/// hop above what the plane projects, which the gate accepts from Git alone)
/// would flap against the operator forever. The daemon sees the owner in the
/// cluster and waits for a person instead of applying.
#[test]
fn a_standalone_manifest_for_a_child_a_live_plane_projects_is_not_applied() {
    let steps = vec![
        Step {
            ops: vec![Op::Set {
                obj: Obj::Prod,
                release: 1,
                stale_image: false,
            }],
            merged: false,
            settle: false,
        },
        Step {
            ops: vec![Op::Remove { obj: Obj::Prod }],
            merged: false,
            settle: false,
        },
        Step {
            ops: vec![Op::Set {
                obj: Obj::ProdNova,
                release: 2,
                stale_image: false,
            }],
            merged: false,
            settle: false,
        },
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path(), &steps);
    let sent = daemon_applies(dir.path());
    assert!(
        !sent
            .iter()
            .any(|(k, _, _)| k.name == "prod-nova" && k.kind == lockstep::kind::Kind::Nova),
        "the standalone prod-nova was applied over its live plane: {sent:?}"
    );
}

/// Found by the property above (CI, 2026-12-02): a plane written under a
/// name lockstep does not read, a standalone Nova named like its child
/// added and removed, then the plane renamed to where it is read. The
/// child was sent the standalone's lower release after the plane had
/// projected the higher one.
#[test]
fn a_removed_standalone_child_is_not_applied_under_a_plane_that_appears_later() {
    let set = |obj, release| Op::Set {
        obj,
        release,
        stale_image: false,
    };
    let steps = vec![
        Step {
            ops: vec![
                set(Obj::Prod, 3),
                Op::Move {
                    obj: Obj::Prod,
                    path: 3,
                },
            ],
            merged: false,
            settle: false,
        },
        Step {
            ops: vec![set(Obj::ProdNova, 2)],
            merged: false,
            settle: false,
        },
        Step {
            ops: vec![Op::Remove { obj: Obj::ProdNova }],
            merged: false,
            settle: false,
        },
        Step {
            ops: vec![Op::Move {
                obj: Obj::Prod,
                path: 0,
            }],
            merged: false,
            settle: false,
        },
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path(), &steps);
    let sent = daemon_applies(dir.path());
    for (k, before, r) in &sent {
        if let Some(b) = before {
            assert!(r >= b, "{k} running {b} was sent the lower {r}: {sent:?}");
        }
    }
}

/// Found by the property above: a standalone Nova patched, then handed to a
/// plane that projects it one release on (the standalone file removed in
/// the same commit). The patch was re-asserted after the plane's hop.
#[test]
fn a_standalone_service_handed_to_a_plane_is_not_re_asserted() {
    let steps = vec![
        Step {
            ops: vec![Op::Add {
                obj: Obj::ProdNova,
                path: 0,
                release: 5,
            }],
            merged: false,
            settle: false,
        },
        Step {
            ops: vec![Op::Patch { obj: Obj::ProdNova }],
            merged: false,
            settle: false,
        },
        Step {
            ops: vec![
                Op::Set {
                    obj: Obj::Prod,
                    release: 6,
                    stale_image: false,
                },
                Op::Remove { obj: Obj::ProdNova },
            ],
            merged: false,
            settle: false,
        },
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path(), &steps);
    let (sent, _, ends) = daemon_applies_at(dir.path(), &[]);
    // Not Git's standalone object any more: nothing waits on a person.
    let standalone = ends
        .iter()
        .find(|(k, _)| k.name == "prod-nova")
        .map(|(_, n)| n.clone());
    assert!(
        matches!(standalone, Some(lockstep::rollout::Next::Removed { .. })),
        "{standalone:?}"
    );
    assert!(
        !sent
            .iter()
            .any(|(k, _, _)| k.kind == lockstep::kind::Kind::Nova),
        "the standalone prod-nova was applied after the plane took it: {sent:?}"
    );
    assert!(
        sent.iter()
            .any(|(k, _, r)| k.name == "prod" && r.to_string() == RELEASES[6]),
        "the plane was not applied: {sent:?}"
    );
}

/// Found by the property above: a patch never applied to a standalone
/// service, then the service removed from Git. The unit must settle (the
/// patch is not applied, nothing is in flight), not be followed forever
/// towards an image the cluster will never run.
#[test]
fn a_removed_service_with_a_patch_never_applied_settles() {
    let step = |ops: Vec<Op>| Step {
        ops,
        merged: false,
        settle: false,
    };
    let steps = vec![
        step(vec![Op::Add {
            obj: Obj::ProdNova,
            path: 0,
            release: 0,
        }]),
        step(vec![Op::Patch { obj: Obj::ProdNova }]),
        step(vec![Op::Remove { obj: Obj::ProdNova }]),
    ];
    daemon_keeps_the_promise(&steps).unwrap();
}

/// A pull request as hosts see one: main's history, a branch forked from
/// one of its commits with commits of its own, then main merged into the
/// branch ("Update branch", `git pull`) with any tree at all (each object
/// from either side, as a conflict may be resolved, plus edits of its own:
/// an evil merge), then more commits on the branch.
#[derive(Clone, Debug)]
struct PullRequest {
    main: Vec<Vec<Op>>,
    fork_seed: usize,
    before: Vec<Vec<Op>>,
    /// For each object, whether the merge takes the branch's side.
    ours: Vec<bool>,
    evil: Vec<Op>,
    after: Vec<Vec<Op>>,
}

fn pull_request() -> impl Strategy<Value = PullRequest> {
    let commits = |n| prop::collection::vec(prop::collection::vec(op(), 1..=2), n);
    (
        commits(1..=6),
        0usize..100,
        commits(0..=3),
        prop::collection::vec(prop::bool::ANY, OBJS.len() + 1),
        prop::collection::vec(op(), 0..=1),
        commits(0..=2),
    )
        .prop_map(|(main, fork_seed, before, ours, evil, after)| PullRequest {
            main,
            fork_seed,
            before,
            ours,
            evil,
            after,
        })
}

/// Writes `pr` into a new repository: main's tip and the branch's head.
fn build_pull_request(dir: &Path, pr: &PullRequest) -> (Oid, Oid) {
    let repo = Repository::init_opts(
        dir,
        git2::RepositoryInitOptions::new().external_template(false),
    )
    .expect("init");
    let sig = Signature::new("Fleet", "fleet@example.invalid", &git2::Time::new(1, 0))
        .expect("signature");
    type State = (BTreeMap<Obj, Written>, bool);
    let commit = |state: &State, parents: &[Oid], msg: &str| -> Oid {
        let tree = repo
            .find_tree(tree_of(&repo, &state.0, state.1))
            .expect("tree");
        let parents: Vec<git2::Commit<'_>> = parents
            .iter()
            .map(|p| repo.find_commit(*p).expect("parent"))
            .collect();
        let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
        repo.commit(None, &sig, &sig, msg, &tree, &refs)
            .expect("commit")
    };
    let step = |state: &mut State, ops: &[Op]| {
        for op in ops {
            apply_op(&mut state.0, op);
            if let Op::Policy(on) = op {
                state.1 = *on;
            }
        }
    };
    let mut state: State = (BTreeMap::new(), false);
    let mut main: Vec<(Oid, State)> = Vec::new();
    for (i, ops) in pr.main.iter().enumerate() {
        step(&mut state, ops);
        let parents: Vec<Oid> = main.last().map(|(p, _)| *p).into_iter().collect();
        main.push((
            commit(&state, &parents, &format!("main {i}: {ops:?}")),
            state.clone(),
        ));
    }
    let (tip, tip_state) = main.last().cloned().expect("a main commit");
    repo.reference("refs/heads/main", tip, true, "main")
        .expect("main");
    let (fork, mut branch) = main[pr.fork_seed % main.len()].clone();
    let mut head = fork;
    for (i, ops) in pr.before.iter().enumerate() {
        step(&mut branch, ops);
        head = commit(&branch, &[head], &format!("branch {i}: {ops:?}"));
    }
    // The merge: each object from the side `ours` says, then its own edits.
    let mut merged: State = (
        BTreeMap::new(),
        if pr.ours[OBJS.len()] {
            branch.1
        } else {
            tip_state.1
        },
    );
    for (n, obj) in OBJS.iter().enumerate() {
        let side = if pr.ours[n] { &branch.0 } else { &tip_state.0 };
        if let Some(w) = side.get(obj) {
            merged.0.insert(*obj, w.clone());
        }
    }
    step(&mut merged, &pr.evil);
    head = commit(&merged, &[head, tip], "merge main into the branch");
    let mut after = merged;
    for (i, ops) in pr.after.iter().enumerate() {
        step(&mut after, ops);
        head = commit(&after, &[head], &format!("after {i}: {ops:?}"));
    }
    (tip, head)
}

/// Each identity's release in a commit's tree (those that name one; an
/// identity defined twice, as a refused commit may leave main, has no one
/// release and is left out).
fn releases_at(repo: &GitRepo, commit: Oid) -> BTreeMap<Key, Release> {
    let tree = repo.commit(commit).expect("commit").tree;
    let (desired, _) =
        history::tree_desired(repo, Some(tree), &CheckOptions::default()).expect("tree");
    let mut count: BTreeMap<&Key, usize> = BTreeMap::new();
    for d in &desired {
        *count.entry(&d.key).or_default() += 1;
    }
    desired
        .iter()
        .filter(|d| count[&d.key] == 1)
        .filter_map(|d| Some((d.key.clone(), d.release.as_deref().and_then(release_of)?)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(2000) / 4,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A pull request that merged main in is judged from where it forked
    /// (`docs/gate.md`, "The baseline"), but what it would bring to main
    /// is never a downgrade: when `check --base main --head pr` accepts it,
    /// no object runs a lower release in the branch's head than in main's
    /// tip, however the merge was resolved. (A skip may remain: two hops on
    /// the branch read as one when merged with a merge commit, and the
    /// daemon refuses that merge.)
    #[test]
    fn an_accepted_pull_request_never_brings_main_a_downgrade(pr in pull_request()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (tip, head) = build_pull_request(dir.path(), &pr);
        let repo = GitRepo::open(dir.path()).expect("open");
        let report = history::check(
            &repo,
            &CheckOptions {
                base: Some(tip.to_string()),
                head: head.to_string(),
                ..CheckOptions::default()
            },
        )
        .expect("check");
        // The branch's own commits, the merge and those after it, judged.
        prop_assert_eq!(report.commits.len(), pr.before.len() + 1 + pr.after.len());
        if report.verdict == Verdict::Accepted {
            let before = releases_at(&repo, tip);
            for (key, now) in releases_at(&repo, head) {
                if let Some(was) = before.get(&key) {
                    prop_assert!(
                        now >= *was,
                        "{} goes down {} → {} from main's tip to the accepted branch: {:#?}",
                        key, was, now, report.commits
                    );
                }
            }
        }
    }
}
