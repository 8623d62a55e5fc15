//! Judging a range of Git history commit by commit.
//!
//! Each commit is compared with the *baseline tree*: the tree of the newest
//! accepted commit. A refused commit therefore never moves a baseline, and
//! the commit that fixes it is judged against the last good state, not
//! against the mistake. Only the files that differ from the baseline are
//! read, so the cost of a check grows with the change, not with the
//! repository; files a commit did not touch are read only when it introduces
//! an object name that could collide with them (and then only the files that
//! contain that name).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use git2::Oid;

use crate::desired::{Desired, expand, plane_name_for};
use crate::gate::{self, CommitInput, Floor, ObjectVerdict, Verdict};
use crate::git::{Change, EntryKind, GitError, GitRepo, Resolved};
use crate::kind::Key;
use crate::live::Live;
use crate::manifest::{self, ParsedFile, Problem};

#[derive(Clone)]
pub struct CheckOptions {
    /// Starting baseline; `None` means the head's first parent (or the empty
    /// tree for a root commit).
    pub base: Option<String>,
    pub head: String,
    pub prefixes: Vec<String>,
    pub live: Option<Live>,
    pub max_file_bytes: usize,
    /// What the caller already judged up to some commit (the daemon's
    /// branch): when the range starts exactly there, it replaces the look
    /// back through older history.
    pub memory: Option<Arc<Memory>>,
    /// Whose signatures make a commit trusted (`docs/gate.md`, "Signed
    /// commits"); `None`: commits are judged on their content alone.
    pub trust: Option<Arc<crate::trust::TrustPolicy>>,
    /// The live state a commit was judged with, by commit: the daemon's
    /// record of verdicts the cluster decided (`docs/gate.md`, "Verdicts
    /// don't move"). A commit found here is judged with its recorded state
    /// instead of `live`, so a restart reaches the verdict once posted.
    pub recorded: Option<Arc<HashMap<String, Live>>>,
    /// Where to keep the files the judgment parsed, each object with its
    /// whole document ([`Sources`]): the daemon applies what was judged
    /// without parsing the file again. `None`: nothing is kept. Files it
    /// holds already are not parsed again: whoever filled it did so under
    /// these same options (`prefixes` aside, which only choose files).
    pub sources: Option<Arc<Sources>>,
    /// The names index (`src/names.rs`): which directories can hold a name,
    /// so that a commit adding an object reads only those. `None`: every
    /// file of the tree is searched. The caller saves it after the check.
    pub names: Option<Arc<crate::names::NameIndex>>,
    /// Whether the report's [`Memory`] holds the floors at the head: a
    /// caller that judges on from there (the daemon, a look back) needs
    /// them. A one-shot `check` does not, and for a whole tree they are the
    /// largest table of the run (every object again, keyed by identity);
    /// without them the report's memory is valid nowhere (`at: None`).
    pub keep_floors: bool,
    /// How a `base` commit the head's first-parent line does not pass
    /// through is read. `false` (a pull request; `check --base`): the
    /// commits are judged from where that line forked, and a merge that
    /// brings in the base's work against the tree it brings it from
    /// ([`crate::git::Fork`]). `true` (the branch the daemon applies, from
    /// its `since`): every commit against the base's tree and what was
    /// accepted since, as the daemon judges each new head
    /// ([`check_after`]): what the cluster runs is the base's, whatever
    /// the line says, and a restart must reach the verdicts once posted.
    pub from_base: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            base: None,
            head: "HEAD".into(),
            prefixes: Vec::new(),
            live: None,
            max_file_bytes: manifest::DEFAULT_MAX_FILE_BYTES,
            memory: None,
            trust: None,
            recorded: None,
            sources: None,
            names: None,
            keep_floors: true,
            from_base: false,
        }
    }
}

/// The manifest files judgments parsed, by blob and path, with each
/// object's whole document as JSON text (`manifest::Document::source`).
/// The daemon reads a step's document here: from the gate's own parse, so a
/// blob is parsed once per judgment, and what is applied is what was judged.
#[derive(Default)]
pub struct Sources(std::sync::Mutex<HashMap<CacheKey, Arc<ParsedFile>>>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sources({} files)", self.len())
    }
}

impl Sources {
    fn absorb(&self, parsed: HashMap<CacheKey, Arc<ParsedFile>>) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend(parsed);
    }

    /// The file `path` as blob `blob`, if a judgment parsed it.
    pub fn file(&self, blob: Oid, path: &str) -> Option<Arc<ParsedFile>> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(&(blob, Arc::from(path))).cloned()
    }

    /// How many files are kept (for tests and the debug log).
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every identity's last accepted state along the judged first-parent
/// history, whether or not the object is still in the tree: the floors a
/// re-add is judged from (`docs/gate.md`, "Identity over time").
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// The commit the floors are valid at (the last judged one).
    pub at: Option<Oid>,
    /// Shared floors: the daemon judges each new head on a copy of the last
    /// head's memory while that one is still held, and a copy of every
    /// object's last definition was the peak of its memory at 20,000 files.
    pub floors: gate::Floors,
}

impl Memory {
    /// An accepted commit moves the floors of what it touched: what its
    /// files held before (the baseline, accepted already; this is how the
    /// starting baseline's objects enter) and what they hold now.
    /// `next` is taken by value: a whole tree's objects are moved into the
    /// floors, not cloned (a clone of every object was a tenth of a
    /// whole-tree judgment's sequential time), into a table grown once.
    fn accept(&mut self, baseline: &[Desired], next: Vec<Desired>, commit: &Arc<str>) {
        // The baseline's objects are mostly known already.
        self.floors.reserve(next.len());
        for b in baseline {
            if !self.floors.contains_key(&b.key) {
                self.floors
                    .insert(b.key.clone(), Arc::new(Floor::after(b.clone(), None, None)));
            }
        }
        for d in next {
            let key = d.key.clone();
            let floor = Floor::after(d, Some(commit.clone()), self.floors.get(&key));
            self.floors.insert(key, Arc::new(floor));
        }
    }
}

/// The judged report of a range, with the floors ([`Memory`]) to judge on
/// from; the report types themselves are the pure core's.
pub type CheckReport = lockstep_core::verdict::CheckReport<Arc<Memory>>;
pub use lockstep_core::verdict::{CommitReport, SkipReport};

/// Judges `base..head` of `repo`.
pub fn check(repo: &GitRepo, opts: &CheckOptions) -> Result<CheckReport, GitError> {
    // `--path ./standalone` must select what `--path standalone` does.
    let prefixes = crate::git::normalize_prefixes(&opts.prefixes)?;
    let normalized;
    let opts = if prefixes == opts.prefixes {
        opts
    } else {
        normalized = CheckOptions {
            prefixes,
            ..opts.clone()
        };
        &normalized
    };
    let head = match repo.resolve(&opts.head)? {
        Resolved::Commit(c) => c,
        Resolved::Tree(_) => {
            return Err(GitError::UnknownRevision {
                rev: opts.head.clone(),
                path: repo.path().to_owned(),
                why: "--head must name a commit".into(),
            });
        }
    };
    // Where the floors of identities new to the baseline are looked for:
    // the history up to the base's own tip.
    let mut floors_from = None;
    // The commits judged, oldest first, and where they start from.
    let mut range = None;
    let (base_commit, mut baseline_tree) = match opts.base.as_deref() {
        // Git's empty tree need not exist in the object database.
        Some(EMPTY_TREE) => (None, None),
        Some(rev) => match repo.resolve(rev)? {
            // A pull request whose target branch moved on since it forked is
            // judged from the fork point (like a three-dot diff): the target's
            // newer commits are not the pull request's to answer for. Their
            // floors are: the merge will be judged on the target with them,
            // so an object the target removed at 2026.2 after the fork is
            // not re-added at 2025.1 by the pull request either. The fork
            // point is on the head's first-parent line, the line that is
            // judged: a branch that merged its target in since it forked
            // (GitHub's "Update branch") descends from the target, but its
            // own first commits were written on the older target, and judged
            // against the newer one they would undo the target's work. The
            // merge that brought the target in is judged against the target
            // commit it merged: what the branch brings to the target
            // (`git::Fork::updates`). The daemon's own branch is judged
            // from its base (`CheckOptions::from_base`).
            Resolved::Commit(c) if opts.from_base => {
                let start = repo.fork_point(c, head)?;
                floors_from = Some(c);
                (Some(start), Some(repo.commit(start)?.tree))
            }
            Resolved::Commit(c) => {
                let fork = repo.first_parent_fork(Some(c), head)?;
                let start = fork.stop.unwrap_or(c);
                floors_from = Some(c);
                range = Some(fork);
                (Some(start), Some(repo.commit(start)?.tree))
            }
            Resolved::Tree(t) => (None, Some(t)),
        },
        None => match repo.first_parent(head)? {
            Some(p) => (Some(p), Some(repo.commit(p)?.tree)),
            None => (None, None),
        },
    };
    let empty_tree = Oid::from_str(EMPTY_TREE).ok();
    if baseline_tree == empty_tree {
        baseline_tree = None;
    }
    // A prefix that names nothing on either side judges nothing and would
    // accept everything: a typo, never a filter.
    let head_tree = repo.commit(head)?.tree;
    for p in &opts.prefixes {
        let in_base = match baseline_tree {
            Some(t) => repo.selects_manifests(t, p)?,
            None => false,
        };
        if !in_base && !repo.selects_manifests(head_tree, p)? {
            return Err(GitError::Path {
                raw: p.clone(),
                why: format!(
                    "matches no directory or manifest file (*.yaml, *.yml) in the base or in {} (a symbolic link, a submodule or another file selects nothing); paths are relative to the repository root and match whole names (clusters/prod, not clusters/pro)",
                    opts.head
                ),
            });
        }
    }
    let base_label = base_commit
        .map(|c| c.to_string())
        .or_else(|| baseline_tree.map(|t| t.to_string()));
    // From a bare tree or from nothing: the whole first-parent history.
    let (commits, updates) = match range {
        Some(fork) => (fork.commits, fork.updates),
        None => (repo.first_parent_range(base_commit, head)?, HashMap::new()),
    };
    // History before the range still holds floors: the caller's memory when
    // it was taken exactly at the start, else a look back from there.
    let floors_from = floors_from.or(base_commit);
    // Judged from below the base's tip (a pull request's fork point): the
    // base's floors are never lowered ([`Memory::accept`]).
    let forked = base_commit.is_some() && base_commit != floors_from;
    let (memory, look_back) = match (&opts.memory, floors_from) {
        (Some(m), Some(b)) if m.at == Some(b) => (Memory::clone(m), None),
        (_, b) => (Memory::default(), b),
    };
    judge_commits(
        repo,
        opts,
        commits,
        &updates,
        forked,
        baseline_tree,
        base_label,
        head,
        memory,
        look_back,
    )
}

/// Judges the commits after `after` up to `opts.head`, from `baseline` (the
/// tree of the last commit accepted up to `after`): how a long-running
/// daemon extends what it judged before instead of judging all history again.
pub fn check_after(
    repo: &GitRepo,
    opts: &CheckOptions,
    after: Oid,
    baseline: Option<Oid>,
    memory: &Memory,
) -> Result<CheckReport, GitError> {
    let head = match repo.resolve(&opts.head)? {
        Resolved::Commit(c) => c,
        Resolved::Tree(_) => {
            return Err(GitError::UnknownRevision {
                rev: opts.head.clone(),
                path: repo.path().to_owned(),
                why: "--head must name a commit".into(),
            });
        }
    };
    let commits = repo.first_parent_range(Some(after), head)?;
    // The memory covers everything up to `after`: no look back.
    let look_back = (memory.at != Some(after)).then_some(after);
    judge_commits(
        repo,
        opts,
        commits,
        &HashMap::new(),
        false,
        baseline,
        Some(after.to_string()),
        head,
        memory.clone(),
        look_back,
    )
}

#[allow(clippy::too_many_arguments)]
fn judge_commits(
    repo: &GitRepo,
    opts: &CheckOptions,
    commits: Vec<crate::git::CommitInfo>,
    updates: &HashMap<Oid, Oid>,
    forked: bool,
    mut baseline_tree: Option<Oid>,
    base_label: Option<String>,
    head: Oid,
    memory: Memory,
    look_back: Option<Oid>,
) -> Result<CheckReport, GitError> {
    // Forked, the base's floors are looked up even for identities the
    // range's commits left a floor for: from the history before the base,
    // or from the caller's memory taken at the base.
    let past = match look_back {
        Some(b) => Some(Past::new(b)),
        None if forked => memory.at.map(|at| Past {
            start: at,
            memory: Some(Arc::new(memory.clone())),
            trusted: None,
        }),
        None => None,
    };
    let mut walker = Walker {
        repo,
        opts,
        cache: HashMap::new(),
        memory,
        past,
        mentions: Mentions::default(),
        without_plans: Default::default(),
        without_policies: Default::default(),
        policies: HashMap::new(),
        forked,
    };
    // The floors the range started from: a merge that brings in the
    // base's work is judged with them (`git::Fork::updates`).
    let start_memory = (!updates.is_empty()).then(|| walker.memory.clone());
    let mut reports = Vec::with_capacity(commits.len());
    let last = commits.len().saturating_sub(1);
    for (i, c) in commits.into_iter().enumerate() {
        // An untrusted commit is refused before its content is read:
        // nothing of it is applied, whatever it holds (`docs/gate.md`,
        // "Signed commits").
        if let Some(trust) = &opts.trust
            && let Some(refusal) = untrusted(repo, trust, c.id)?
        {
            reports.push(CommitReport {
                sha: c.id.to_string(),
                summary: c.summary,
                verdict: Verdict::Refused,
                objects: vec![refusal],
                skipped: Vec::new(),
                files_changed: 0,
            });
            continue;
        }
        let sha = c.id.to_string();
        // A merge that brings the base's work into a branch is judged by
        // what the branch brings to the base: against the tree of the base
        // commit it merged, with the base's floors, which the branch's own
        // commits (judged from where it forked) must not have lowered. Its
        // changes hold all of theirs.
        let mut before_update = None;
        let judged_from = match (updates.get(&c.id), &start_memory) {
            (Some(p), Some(start)) => {
                before_update = Some(std::mem::replace(&mut walker.memory, start.clone()));
                Some(repo.commit(*p)?.tree)
            }
            _ => baseline_tree,
        };
        let judged = walker
            .judge(
                c.id,
                judged_from,
                c.tree,
                opts.recorded
                    .as_ref()
                    .and_then(|r| r.get(&sha))
                    .or(opts.live.as_ref()),
            )
            .and_then(|judged| {
                let plans = walker.judge_plans(c.tree, &judged.changes)?;
                Ok((judged, plans))
            });
        let (judged, plans) = match judged {
            // A tree Git would not write: refused whole, like an untrusted
            // commit (`git::Error::MalformedTree`).
            Err(GitError::MalformedTree { path, why }) => {
                if let Some(m) = before_update {
                    walker.memory = m;
                }
                reports.push(CommitReport {
                    sha,
                    summary: c.summary,
                    verdict: Verdict::Refused,
                    objects: vec![malformed_tree(&path, &why)],
                    skipped: Vec::new(),
                    files_changed: 0,
                });
                continue;
            }
            r => r?,
        };
        let (mut objects, skipped, files_changed) =
            (judged.objects, judged.skipped, judged.changes.len());
        objects.extend(plans);
        let verdict = gate::commit_verdict(&objects);
        // Refused, the merge moves nothing: the branch goes on from where
        // it was.
        if verdict == Verdict::Refused
            && let Some(m) = before_update
        {
            walker.memory = m;
        }
        // A held commit is accepted work queued behind the hop in flight:
        // what comes after it builds on it.
        if matches!(verdict, Verdict::Accepted | Verdict::Held) {
            baseline_tree = Some(c.tree);
            if i < last || opts.keep_floors {
                let sha: Arc<str> = Arc::from(c.id.to_string());
                walker.memory.accept(&judged.baseline, judged.next, &sha);
            }
        }
        reports.push(CommitReport {
            sha: c.id.to_string(),
            summary: c.summary,
            verdict,
            objects,
            skipped,
            files_changed,
        });
    }
    let verdict = if reports.iter().any(|r| r.verdict == Verdict::Refused) {
        Verdict::Refused
    } else {
        Verdict::Accepted
    };
    if let Some(sources) = &opts.sources {
        sources.absorb(std::mem::take(&mut walker.cache));
    }
    let memory = if opts.keep_floors {
        let mut floors = walker.memory.floors;
        floors.fold();
        Memory {
            at: Some(head),
            floors,
        }
    } else {
        Memory::default()
    };
    Ok(CheckReport {
        verdict,
        base: base_label,
        head: head.to_string(),
        commits: reports,
        memory: Arc::new(memory),
    })
}

/// The refusal of a commit whose signature the trust policy does not
/// accept; `None` when it does. The message names the signer (key and
/// principal) or says there is none.
fn untrusted(
    repo: &GitRepo,
    trust: &crate::trust::TrustPolicy,
    id: Oid,
) -> Result<Option<ObjectVerdict>, GitError> {
    let (why, email) = match repo.signature(id)? {
        None => (crate::trust::Untrusted::Unsigned, repo.committer_email(id)?),
        Some(s) => match trust.verify(&s.signature, &s.signed_data, s.when, &s.committer_email) {
            Ok(_) => return Ok(None),
            Err(why) => (why, s.committer_email),
        },
    };
    Ok(Some(whole_commit_refused(
        "",
        gate::Reason::UntrustedCommit,
        format!("commit by <{email}> is not trusted: {why}; nothing of it is applied"),
    )))
}

/// The refusal of a commit whose tree Git would not write, naming the
/// entry (its name escaped) and the fault.
fn malformed_tree(path: &str, why: &str) -> ObjectVerdict {
    whole_commit_refused(
        path,
        gate::Reason::ManifestInvalid,
        format!("{why}; nothing of the commit is applied"),
    )
}

/// A refusal of the commit as a whole, no object's: `file` (or none) and
/// no line.
fn whole_commit_refused(file: &str, reason: gate::Reason, message: String) -> ObjectVerdict {
    ObjectVerdict {
        kind: None,
        namespace: None,
        name: None,
        file: Arc::from(file),
        line: 0,
        projected_by: None,
        from: None,
        to: None,
        from_image: None,
        to_image: None,
        transition: gate::Transition::Invalid,
        verdict: Verdict::Refused,
        reason: Some(reason),
        message,
    }
}

/// Every desired object of a tree (`None`: the empty tree), with the
/// problems found on the way: the full picture a rehearsal starts from.
pub fn tree_desired(
    repo: &GitRepo,
    tree: Option<Oid>,
    opts: &CheckOptions,
) -> Result<(Vec<Desired>, Vec<Problem>), GitError> {
    let Some(tree) = tree else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut walker = Walker {
        repo,
        opts,
        cache: HashMap::new(),
        memory: Memory::default(),
        past: None,
        mentions: Mentions::default(),
        without_plans: Default::default(),
        without_policies: Default::default(),
        policies: HashMap::new(),
        forked: false,
    };
    let files = repo.files(tree, &opts.prefixes, manifest::is_manifest_path)?;
    walker.parse_many(
        files
            .iter()
            .filter(|(_, e)| e.kind == EntryKind::File)
            .map(|(p, e)| (p.as_str(), e.oid)),
    )?;
    let mut desired = Vec::new();
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    for (path, entry) in &files {
        desired.extend(walker.side(path, Some(entry), &mut problems, &mut skipped)?);
    }
    if let Some(sources) = &opts.sources {
        sources.absorb(std::mem::take(&mut walker.cache));
    }
    Ok((desired, problems))
}

/// The tree a report's `base` names (`None` for the empty tree).
pub fn base_tree(repo: &GitRepo, report: &CheckReport) -> Result<Option<Oid>, GitError> {
    match &report.base {
        None => Ok(None),
        Some(b) => match repo.resolve(b)? {
            Resolved::Commit(c) => Ok(Some(repo.commit(c)?.tree)),
            Resolved::Tree(t) => Ok(Some(t)),
        },
    }
}

/// Whether YAML text could hold a name that is not written out literally:
/// hex escapes (`"\x70rod"`, `"\u0070rod"`), an escaped line break inside a
/// double-quoted scalar (`"pr\<newline>od"`), or a `!!binary` scalar. Other
/// escapes (`\n`, `\t`, `\.`, ...) cannot produce the characters of an object
/// name, so a regex in a comment does not make a file a candidate.
fn may_spell_names_in_disguise(bytes: &[u8]) -> bool {
    memchr::memchr_iter(b'\\', bytes)
        .any(|i| matches!(bytes.get(i + 1), Some(b'x' | b'u' | b'U' | b'\n' | b'\r')))
        || memchr::memmem::find(bytes, b"binary").is_some()
        || tag_with_escapes(bytes)
        || memchr::memmem::find(bytes, b"%TAG").is_some()
}

/// Whether a tag (`!` and the characters up to white space) holds a `%`:
/// YAML decodes `%xx` in tags, so `!!bin%61ry` is `!!binary` to every
/// reader although the bytes never say so. (A `%TAG` directive can spell
/// `!!binary` under another handle: the caller looks for those too.) Each
/// byte is looked at once: a run of `!`s is one tag.
fn tag_with_escapes(bytes: &[u8]) -> bool {
    let mut i = 0;
    while let Some(at) = memchr::memchr(b'!', &bytes[i..]) {
        let tag = &bytes[i + at + 1..];
        let end = tag
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .unwrap_or(tag.len());
        if tag[..end].contains(&b'%') {
            return true;
        }
        i += at + 1 + end;
    }
    false
}

/// Above this many new identities in one commit, the look back judges the
/// older history rather than scan it for each name.
const MAX_SCANNED_NAMES: usize = 64;

/// Git's well-known empty tree.
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// A blob at a path (the path is part of what a parse reports).
type CacheKey = (Oid, Arc<str>);

struct Walker<'a> {
    repo: &'a GitRepo,
    opts: &'a CheckOptions,
    /// Parsed files by (blob, path): a blob is parsed once per run however
    /// many commits carry it.
    cache: HashMap<CacheKey, Arc<ParsedFile>>,
    /// Floors of the identities judged so far in this range.
    memory: Memory,
    /// The history before the range, looked into only for identities that
    /// appear in the range without a baseline or a floor.
    past: Option<Past>,
    /// Which blobs mention one of a set of names (the set, then the answers).
    mentions: Mentions,
    /// Blobs known not to hold an UpgradePlan (seen by `parse_many`):
    /// `judge_plans` need not read them again.
    without_plans: std::collections::HashSet<Oid>,
    /// Blobs known not to mention an UpgradePolicy (seen by `parse_many`):
    /// `judge_policy_files` need not read them again.
    without_policies: std::collections::HashSet<Oid>,
    /// The policies of a tree's policy directory, by the directory's id.
    policies: HashMap<Option<Oid>, Arc<TreePolicies>>,
    /// Judged from below the base's tip (a pull request's fork point): the
    /// range's own commits were judged against the older tree the branch
    /// forked from, so the floors they leave may lie below the base's. An
    /// identity the range re-adds takes the base's floor when it is higher
    /// (or a branch could reconfigure an object at the fork's release,
    /// remove it and re-add it below what the base accepted).
    forked: bool,
}

/// The `UpgradePolicy` documents of one tree's policy directory.
#[derive(Default)]
struct TreePolicies {
    policies: Vec<Arc<crate::policy::Policy>>,
    errors: Vec<crate::policy::PolicyError>,
}

/// Whether blobs name one of a set of needles, per blob, for the last set
/// asked about: a commit adding an object asks it of the whole tree in
/// `lookup` and again of the history in `ever_defined`, whose first commit
/// is often that same tree.
type Mentions = (BTreeSet<String>, HashMap<Oid, bool>);

/// What a names-index walk looks for: the needles, their searchers, and the
/// paths it skips (the files the commit changed).
struct Needles<'q> {
    needles: &'q BTreeSet<String>,
    finders: &'q [memchr::memmem::Finder<'q>],
    changed: &'q BTreeSet<&'q str>,
    /// Build entries for the directories the index lacks. The look back
    /// does not: the trees of older commits are mostly those the lookup
    /// just handed to the builder, and their files' answers are known
    /// (`Walker::mentions`), so it neither waits for the builder nor reads
    /// them again.
    grow: bool,
}

/// What a directory holds as far as names go, while its names-index entry
/// is built (its windows are gathered on the index's builder thread).
#[derive(Default)]
struct Built {
    disguised: bool,
    files: usize,
    /// Some file was not read (the commit changed it): no entry is kept.
    partial: bool,
}

/// One commit's judgment, with the two sides the memory needs.
struct Judged {
    objects: Vec<ObjectVerdict>,
    skipped: Vec<SkipReport>,
    /// The manifest files the commit changed relative to its baseline.
    changes: Vec<Change>,
    baseline: Vec<Desired>,
    next: Vec<Desired>,
}

/// The first-parent history before the judged range (from its starting
/// commit back to the root), judged once per run, and only when a commit in
/// the range introduces an identity its baseline lacks.
struct Past {
    start: Oid,
    /// The floors after judging that history; filled on first use.
    memory: Option<Arc<Memory>>,
    /// Under a trust policy, the floors of the same history judged with it
    /// too: a floor is the higher of the two ([`Walker::look_back`]).
    trusted: Option<Arc<Memory>>,
}

impl Past {
    fn new(start: Oid) -> Self {
        Self {
            start,
            memory: None,
            trusted: None,
        }
    }
}

impl Walker<'_> {
    /// Plans the commit adds or changes, judged against the whole tree
    /// (their selections and targets depend on every object) and the
    /// tree's other plans. Only refusals are reported.
    /// The policies of a tree (`None`: the empty tree), read from the one
    /// directory they may live in, once per version of that directory.
    fn tree_policies(&mut self, tree: Option<Oid>) -> Result<Arc<TreePolicies>, GitError> {
        let dir = match tree {
            Some(t) => self.repo.subtree(t, crate::policy::DIR)?,
            None => None,
        };
        if let Some(p) = self.policies.get(&dir) {
            return Ok(p.clone());
        }
        let mut out = TreePolicies::default();
        if let Some(d) = dir {
            for (name, blob) in self.repo.dir_files(d)? {
                if !manifest::is_manifest_path(&name) {
                    continue;
                }
                let bytes = self.repo.blob(blob)?;
                let path = format!("{}/{name}", crate::policy::DIR);
                if bytes.content().len() > self.opts.max_file_bytes {
                    out.errors.push(crate::policy::PolicyError {
                        file: Arc::from(path.as_str()),
                        line: 1,
                        name: None,
                        message: format!("larger than {} bytes", self.opts.max_file_bytes),
                    });
                    continue;
                }
                let (p, e) = crate::policy::parse(&path, &String::from_utf8_lossy(bytes.content()));
                out.policies.extend(p.into_iter().map(Arc::new));
                out.errors.extend(e);
            }
        }
        let conflicts = crate::policy::conflicting_acks(out.policies.iter().map(|p| &**p));
        out.errors.extend(conflicts);
        let out = Arc::new(out);
        self.policies.insert(dir, out.clone());
        Ok(out)
    }

    /// Refusals for policy documents the commit changed: one that cannot be
    /// read, or one outside the policy directory (read nowhere else, so it
    /// would silently not apply).
    fn judge_policy_files(
        &mut self,
        changes: &[Change],
        after: &TreePolicies,
    ) -> Result<Vec<ObjectVerdict>, GitError> {
        let mut out = Vec::new();
        let refused = |file: Arc<str>, line: u32, name: Option<String>, message: String| {
            document_refusal(file, line, None, name, gate::Reason::PolicyInvalid, message)
        };
        // A policy that cannot be read might block anything: every commit
        // whose tree holds one is refused until it is fixed (fail closed).
        for e in &after.errors {
            let message = if changes.iter().any(|c| *c.path == *e.file) {
                e.message.clone()
            } else {
                format!(
                    "{} (this commit does not touch it, but nothing is judged against policies lockstep cannot read: fix it first)",
                    e.message
                )
            };
            out.push(refused(e.file.clone(), e.line, e.name.clone(), message));
        }
        for ch in changes {
            let Some(new) = ch.new.as_ref().filter(|e| e.kind == EntryKind::File) else {
                continue;
            };
            if crate::policy::in_dir(&ch.path) || self.without_policies.contains(&new.oid) {
                continue;
            }
            let blob = self.repo.blob(new.oid)?;
            if memchr::memmem::find(blob.content(), crate::policy::KIND.as_bytes()).is_none() {
                continue;
            }
            let (found, _) =
                crate::policy::parse(&ch.path, &String::from_utf8_lossy(blob.content()));
            for p in found {
                out.push(refused(
                    p.file.clone(),
                    p.line,
                    Some(p.name.clone()),
                    format!(
                        "UpgradePolicy {} is read only from {}/ (one directory, so a one-file check stays one file's work); move it there",
                        p.name,
                        crate::policy::DIR
                    ),
                ));
            }
        }
        Ok(out)
    }

    fn judge_plans(
        &mut self,
        tree: Oid,
        changes: &[Change],
    ) -> Result<Vec<ObjectVerdict>, GitError> {
        use crate::plan;
        let mut changed_plans = Vec::new();
        let mut errors = Vec::new();
        for ch in changes {
            let Some(new) = ch.new.as_ref().filter(|e| e.kind == EntryKind::File) else {
                continue;
            };
            if self.without_plans.contains(&new.oid) {
                continue;
            }
            let blob = self.repo.blob(new.oid)?;
            if memchr::memmem::find(blob.content(), plan::KIND.as_bytes()).is_none() {
                continue;
            }
            let text = String::from_utf8_lossy(blob.content());
            let (plans, errs) = plan::parse_plans(&ch.path, &text);
            changed_plans.extend(plans);
            errors.extend(errs);
        }
        if changed_plans.is_empty() && errors.is_empty() {
            return Ok(Vec::new());
        }
        let refused = document_refusal;
        let mut out: Vec<ObjectVerdict> = errors
            .into_iter()
            .map(|e| {
                refused(
                    e.file,
                    e.line,
                    None,
                    e.name,
                    gate::Reason::PlanInvalid,
                    e.message,
                )
            })
            .collect();
        if changed_plans.is_empty() {
            return Ok(out);
        }
        // The whole tree: its units and its other plans.
        let files = self
            .repo
            .files(tree, &self.opts.prefixes, manifest::is_manifest_path)?;
        self.parse_many(
            files
                .iter()
                .filter(|(_, e)| e.kind == EntryKind::File)
                .map(|(p, e)| (p.as_str(), e.oid)),
        )?;
        let mut docs = Vec::new();
        let mut all_plans = Vec::new();
        for (path, e) in files.iter().filter(|(_, e)| e.kind == EntryKind::File) {
            let parsed = self.parse(path, e.oid)?;
            docs.extend(parsed.documents.iter().cloned());
            let blob = self.repo.blob(e.oid)?;
            if memchr::memmem::find(blob.content(), plan::KIND.as_bytes()).is_some() {
                all_plans
                    .extend(plan::parse_plans(path, &String::from_utf8_lossy(blob.content())).0);
            }
        }
        let units = plan::validate::units(&docs);
        for p in &changed_plans {
            for r in plan::validate::validate(p, &units, &all_plans) {
                out.push(refused(
                    p.file.clone(),
                    p.line,
                    p.plan.metadata.namespace.clone(),
                    Some(p.plan.metadata.name.clone()),
                    r.reason,
                    format!("UpgradePlan {}: {}", p.plan.metadata.name, r.message),
                ));
            }
        }
        Ok(out)
    }

    /// Whether a blob holds one of `needles` (searched with `finders`, one
    /// per needle) or could spell a name in disguise.
    fn mentions(
        &mut self,
        needles: &BTreeSet<String>,
        finders: &[memchr::memmem::Finder<'_>],
        oid: Oid,
    ) -> Result<bool, GitError> {
        if self.mentions.0 != *needles {
            self.mentions = (needles.clone(), HashMap::new());
        }
        if let Some(&m) = self.mentions.1.get(&oid) {
            return Ok(m);
        }
        let blob = self.repo.blob(oid)?;
        let bytes = blob.content();
        let m =
            finders.iter().any(|f| f.find(bytes).is_some()) || may_spell_names_in_disguise(bytes);
        self.mentions.1.insert(oid, m);
        Ok(m)
    }

    /// Appends to `out` the manifest files of directory `tree` (at `dir`,
    /// under the prefixes, in the order of `GitRepo::files`) that may
    /// mention a needle: what `mentions` says of each, except that a
    /// directory the names index proves free of every needle is skipped
    /// unread. A directory the index lacks is read whole and its entry
    /// built; with `build` (its parent is being built), what it holds is
    /// returned and its windows join the parent's.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &mut self,
        index: &crate::names::NameIndex,
        tree: Oid,
        dir: &str,
        q: &Needles<'_>,
        build: bool,
        out: &mut Vec<(String, Oid)>,
    ) -> Result<Option<Built>, GitError> {
        if let Some(e) = index.get(tree) {
            let built = build.then(|| {
                index.add_entry(&e);
                Built {
                    disguised: e.disguised,
                    files: e.files as usize,
                    partial: false,
                }
            });
            if !e.excludes(q.needles.iter().map(|n| n.as_bytes())) {
                self.scan_entries(index, tree, dir, q, false, out)?;
            }
            return Ok(built);
        }
        if !q.grow {
            self.scan_entries(index, tree, dir, q, false, out)?;
            return Ok(None);
        }
        index.open_dir();
        let built = self.scan_entries(index, tree, dir, q, true, out);
        // Closed on failure too (the builder's directories stay nested);
        // a directory that failed is not kept, nor is any above it.
        let keep = match &built {
            Ok(Some(b)) if !b.partial && b.files >= crate::names::MIN_FILES => {
                Some((tree, b.disguised, b.files))
            }
            _ => None,
        };
        index.close_dir(keep, build);
        built
    }

    #[allow(clippy::too_many_arguments)]
    fn scan_entries(
        &mut self,
        index: &crate::names::NameIndex,
        tree: Oid,
        dir: &str,
        q: &Needles<'_>,
        build: bool,
        out: &mut Vec<(String, Oid)>,
    ) -> Result<Option<Built>, GitError> {
        let mut built = build.then(Built::default);
        for (name, oid, mode) in self.repo.tree_entries(tree)? {
            match mode {
                0o040000 => {
                    let sub = format!("{dir}{name}/");
                    let s = self.scan(index, oid, &sub, q, build, out)?;
                    if let (Some(b), Some(s)) = (built.as_mut(), s) {
                        b.disguised |= s.disguised;
                        b.files += s.files;
                        b.partial |= s.partial;
                    }
                }
                // Links and submodules define nothing (`lookup` skips them).
                0o120000 | 0o160000 => {}
                _ => {
                    if !manifest::is_manifest_path(&name) {
                        continue;
                    }
                    let path = format!("{dir}{name}");
                    // A file the commit changed is judged as a change, not
                    // looked up, and not read here: the directory's entry
                    // is left to a run that reads it anyway (a whole tree
                    // judged from nothing builds no entry at all).
                    if q.changed.contains(path.as_str()) {
                        if let Some(b) = built.as_mut() {
                            b.partial = true;
                        }
                        continue;
                    }
                    let m = match built.as_mut() {
                        Some(b) => {
                            let blob = self.repo.blob(oid)?;
                            let bytes = blob.content();
                            let disguised = may_spell_names_in_disguise(bytes);
                            index.add_file(bytes);
                            b.disguised |= disguised;
                            b.files += 1;
                            let m = disguised || q.finders.iter().any(|f| f.find(bytes).is_some());
                            if self.mentions.0 != *q.needles {
                                self.mentions = (q.needles.clone(), HashMap::new());
                            }
                            self.mentions.1.insert(oid, m);
                            m
                        }
                        None => self.mentions(q.needles, q.finders, oid)?,
                    };
                    if m && crate::git::under_prefixes(&path, &self.opts.prefixes) {
                        out.push((path, oid));
                    }
                }
            }
        }
        Ok(built)
    }

    /// A file parsed before this walk under the same options
    /// ([`CheckOptions::sources`]).
    fn kept(&self, oid: Oid, path: &str) -> Option<Arc<ParsedFile>> {
        self.opts.sources.as_ref().and_then(|s| s.file(oid, path))
    }

    fn parse(&mut self, path: &str, oid: Oid) -> Result<Arc<ParsedFile>, GitError> {
        let path: Arc<str> = Arc::from(path);
        if let Some(p) = self.cache.get(&(oid, path.clone())) {
            return Ok(p.clone());
        }
        if let Some(p) = self.kept(oid, &path) {
            self.cache.insert((oid, path), p.clone());
            return Ok(p);
        }
        let blob = self.repo.blob(oid)?;
        let parsed = Arc::new(manifest::parse_file_keeping(
            &path,
            blob.content(),
            self.opts.max_file_bytes,
            self.opts.sources.is_some(),
        ));
        self.cache.insert((oid, path), parsed.clone());
        Ok(parsed)
    }

    /// Parses many files at once, spreading the YAML work over the cores:
    /// this thread reads the blobs (libgit2 handles are not shared across
    /// threads) and hands them to the parser threads in small batches as
    /// they are read, so reading overlaps parsing and only a few blobs are
    /// held at a time
    /// (reading them all first held a copy of the whole tree and left the
    /// parsers idle meanwhile). Parsing is pure.
    fn parse_many<'p>(
        &mut self,
        items: impl Iterator<Item = (&'p str, Oid)>,
    ) -> Result<(), GitError> {
        let items: Vec<(&str, Oid)> = items.collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let max = self.opts.max_file_bytes;
        let keep = self.opts.sources.is_some();
        if items.len() < 64 || threads < 2 {
            for (path, oid) in items {
                if let Some((key, bytes)) = self.unparsed_bytes(path, oid)? {
                    let parsed = manifest::parse_file_keeping(path, &bytes, max, keep);
                    self.cache.insert(key, Arc::new(parsed));
                }
            }
            return Ok(());
        }
        // Files are handed out in small batches, not in fixed slices: their
        // costs differ widely (a ControlPlane projects nine children, a
        // standalone service is one object) and often cluster by path, and
        // fixed halves left one core idle for most of a whole-tree judgment.
        // Blobs go out in batches of about 64 KiB: one hand-over per file
        // cost more in thread wake-ups than the files' reading.
        type Batch = Vec<(Arc<str>, Oid, Vec<u8>)>;
        const BATCH_BYTES: usize = 64 << 10;
        let (send, receive) = std::sync::mpsc::sync_channel::<Batch>(threads * 2);
        let receive = std::sync::Mutex::new(receive);
        let mut sent: Vec<CacheKey> = Vec::new();
        let (read, results) = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut out = Vec::new();
                        loop {
                            let batch = match receive.lock() {
                                Ok(r) => r.recv().ok(),
                                Err(_) => None,
                            };
                            let Some(batch) = batch else {
                                break;
                            };
                            for (path, oid, bytes) in batch {
                                let parsed = Arc::new(manifest::parse_file_keeping(
                                    &path, &bytes, max, keep,
                                ));
                                out.push(((oid, path), parsed));
                            }
                        }
                        out
                    })
                })
                .collect();
            let read = (|| {
                let mut batch: Batch = Vec::new();
                let mut bytes_in_batch = 0;
                for &(path, oid) in &items {
                    let Some(((_, path), bytes)) = self.unparsed_bytes(path, oid)? else {
                        continue;
                    };
                    sent.push((oid, path.clone()));
                    bytes_in_batch += bytes.len();
                    batch.push((path, oid, bytes));
                    if bytes_in_batch >= BATCH_BYTES {
                        bytes_in_batch = 0;
                        if send.send(std::mem::take(&mut batch)).is_err() {
                            // Every parser thread is gone (a bug); what
                            // they did not parse is parsed below.
                            return Ok(());
                        }
                    }
                }
                if !batch.is_empty() {
                    let _ = send.send(batch);
                }
                Ok::<(), GitError>(())
            })();
            drop(send);
            // A parser thread that panicked is a bug; its files are parsed
            // again below on this thread, so the run stays correct.
            let results: Vec<Vec<(CacheKey, Arc<ParsedFile>)>> =
                handles.into_iter().filter_map(|h| h.join().ok()).collect();
            (read, results)
        });
        for part in results {
            self.cache.extend(part);
        }
        read?;
        for (oid, path) in sent {
            if !self.cache.contains_key(&(oid, path.clone())) {
                let blob = self.repo.blob(oid)?;
                let parsed = manifest::parse_file_keeping(&path, blob.content(), max, keep);
                self.cache.insert((oid, path), Arc::new(parsed));
            }
        }
        Ok(())
    }

    /// The cache key and bytes of a file `parse_many` must parse, or `None`
    /// when a parse of it is at hand (this walk's or the kept one, which it
    /// takes). Notes on the way whether the blob can hold a plan.
    fn unparsed_bytes(
        &mut self,
        path: &str,
        oid: Oid,
    ) -> Result<Option<(CacheKey, Vec<u8>)>, GitError> {
        let key: CacheKey = (oid, Arc::from(path));
        if self.cache.contains_key(&key) {
            return Ok(None);
        }
        let blob = self.repo.blob(oid)?;
        if memchr::memmem::find(blob.content(), crate::plan::KIND.as_bytes()).is_none() {
            self.without_plans.insert(oid);
        }
        if memchr::memmem::find(blob.content(), crate::policy::KIND.as_bytes()).is_none() {
            self.without_policies.insert(oid);
        }
        if let Some(p) = self.kept(oid, path) {
            self.cache.insert(key, p);
            return Ok(None);
        }
        Ok(Some((key, blob.content().to_vec())))
    }

    fn side(
        &mut self,
        path: &str,
        entry: Option<&crate::git::Entry>,
        problems: &mut Vec<Problem>,
        skipped: &mut Vec<SkipReport>,
    ) -> Result<Vec<Desired>, GitError> {
        let Some(e) = entry else {
            return Ok(Vec::new());
        };
        match e.kind {
            EntryKind::File => {
                let parsed = self.parse(path, e.oid)?;
                problems.extend(parsed.problems.iter().cloned());
                skipped.extend(parsed.skipped.iter().map(SkipReport::from));
                Ok(expand(&parsed.documents))
            }
            EntryKind::Symlink => {
                problems.push(Problem {
                    file: Arc::from(path),
                    line: 1,
                    key: None,
                    message: "is a symbolic link; lockstep does not follow links (what the cluster gets could differ from what was judged): commit the file itself".into(),
                });
                Ok(Vec::new())
            }
            EntryKind::Submodule => {
                problems.push(Problem {
                    file: Arc::from(path),
                    line: 1,
                    key: None,
                    message: "is a submodule; its manifests are in another repository and were not judged, yet Argo CD (and Flux, with recurseSubmodules) would apply them: commit the files themselves, or keep the submodule outside the paths lockstep judges (--path)".into(),
                });
                Ok(Vec::new())
            }
        }
    }

    /// Fills the memory with the floors older history gives `keys`: the
    /// first-parent history before the range is judged by the same gate,
    /// from the root, once per run, and its floors are the ones an
    /// unbroken judgment would have reached. (Replaying one identity's
    /// definitions alone is not enough: a commit refused for another
    /// object's sake does not move a floor, and a floor set too high lets a
    /// skip through.) Cost: one judgment of that history, which reads only
    /// what each commit changed; see `docs/gate.md`, "Identity over time".
    fn look_back(&mut self, keys: &[&Key]) -> Result<(), GitError> {
        let Some(past) = self.past.as_ref() else {
            return Ok(());
        };
        // Most identities new to a baseline are new to history too: a scan
        // of what each older commit changed for the identity's name says
        // so without judging anything.
        // Scanning for hundreds of names at once costs more than judging
        // the older history outright (one substring search per name per
        // file changed): a commit that brings in a whole new fleet goes
        // straight to the judgment.
        if past.memory.is_none()
            && keys.len() <= MAX_SCANNED_NAMES
            && !self.ever_defined(past.start, keys)?
        {
            return Ok(());
        }
        let Some(past) = self.past.as_mut() else {
            return Ok(());
        };
        let (memory, trusted) = match &past.memory {
            Some(m) => (m.clone(), past.trusted.clone()),
            None => {
                let start = past.start;
                // The past is judged from Git alone: the live state is now's.
                // Floors come from what may be running, so the look back
                // judges content only (`docs/gate.md`, "Signed commits").
                // Under a trust policy it is judged with the policy as well,
                // and each floor is the higher of the two: an untrusted
                // commit may raise a floor (it may be running), never lower
                // one (a `recreate-below` it wrote was never applied).
                let judge = |trust: Option<Arc<crate::trust::TrustPolicy>>| {
                    let opts = CheckOptions {
                        base: None,
                        head: start.to_string(),
                        live: None,
                        memory: None,
                        trust,
                        // The floors are what this look back is for.
                        keep_floors: true,
                        ..self.opts.clone()
                    };
                    let commits = self.repo.first_parent_range(None, start)?;
                    let report = judge_commits(
                        self.repo,
                        &opts,
                        commits,
                        &HashMap::new(),
                        false,
                        None,
                        None,
                        start,
                        Memory::default(),
                        None,
                    )?;
                    Ok::<_, GitError>(report.memory)
                };
                let m = judge(None)?;
                let t = match &self.opts.trust {
                    Some(policy) => Some(judge(Some(policy.clone()))?),
                    None => None,
                };
                if let Some(past) = self.past.as_mut() {
                    past.memory = Some(m.clone());
                    past.trusted = t.clone();
                }
                (m, t)
            }
        };
        let release = |f: &Floor| f.released().and_then(|f| gate::parsed_release(&f.last));
        for k in keys {
            let content = memory.floors.get(k);
            let signed = trusted.as_ref().and_then(|t| t.floors.get(k));
            let past: &Arc<Floor> = match (content, signed) {
                (Some(c), Some(t)) => {
                    let higher = release(t).is_some_and(|t| release(c).is_none_or(|c| t > c));
                    if higher { t } else { c }
                }
                (Some(f), None) | (None, Some(f)) => f,
                (None, None) => continue,
            };
            match self.memory.floors.get(k) {
                None => {
                    self.memory.floors.insert((*k).clone(), past.clone());
                }
                // Forked: the base's floor when it is higher than the one
                // the range's own commits left.
                Some(now)
                    if self.forked
                        && release(now).is_some_and(|n| release(past).is_some_and(|p| p > n)) =>
                {
                    self.memory.floors.insert((*k).clone(), past.clone());
                }
                // Known since the range began, but without a release that
                // parses: the release the history before it accepted.
                Some(now) if now.released().is_none() => {
                    let released = if gate::parsed_release(&past.last).is_some() {
                        Some(past.clone())
                    } else {
                        past.released.clone()
                    };
                    if released.is_some() {
                        let floor = Floor {
                            released,
                            ..(**now).clone()
                        };
                        self.memory.floors.insert((*k).clone(), Arc::new(floor));
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Whether any first-parent commit up to `start` defined one of `keys`
    /// in a file it changed: one tree walk per commit, a substring scan of
    /// the files changed, and a parse of only those naming a key.
    fn ever_defined(&mut self, start: Oid, keys: &[&Key]) -> Result<bool, GitError> {
        let wanted: BTreeSet<&Key> = keys.iter().copied().collect();
        let needles: BTreeSet<String> = keys
            .iter()
            .flat_map(|k| {
                std::iter::once(k.name.clone()).chain(plane_name_for(k).map(str::to_owned))
            })
            .collect();
        let finders: Vec<memchr::memmem::Finder<'_>> = needles
            .iter()
            .map(|n| memchr::memmem::Finder::new(n.as_bytes()))
            .collect();
        let mut cur = Some(start);
        while let Some(id) = cur {
            let parent = self.repo.first_parent(id)?;
            let tree = self.repo.commit(id)?.tree;
            let parent_tree = parent
                .map(|p| self.repo.commit(p))
                .transpose()?
                .map(|c| c.tree);
            // A root commit changed every file of its tree: the names
            // index skips the directories that cannot hold a needle.
            if parent_tree.is_none()
                && let Some(index) = self.opts.names.clone()
            {
                let mut files = Vec::new();
                let none = BTreeSet::new();
                let needles = Needles {
                    needles: &needles,
                    finders: &finders,
                    changed: &none,
                    grow: false,
                };
                match self.scan(&index, tree, "", &needles, false, &mut files) {
                    Err(GitError::MalformedTree { .. }) => return Ok(true),
                    r => r?,
                };
                for (path, oid) in files {
                    let parsed = self.parse(&path, oid)?;
                    if expand(&parsed.documents)
                        .iter()
                        .any(|d| wanted.contains(&d.key))
                    {
                        return Ok(true);
                    }
                }
                cur = parent;
                continue;
            }
            let changes = match self.repo.changed_files_walk(
                parent_tree,
                tree,
                &self.opts.prefixes,
                manifest::is_manifest_path,
            ) {
                // A malformed tree cannot rule anything out: the judgment
                // of that history refuses the commit holding it.
                Err(GitError::MalformedTree { .. }) => return Ok(true),
                r => r?,
            };
            for ch in changes {
                let Some(new) = ch.new.filter(|e| e.kind == EntryKind::File) else {
                    continue;
                };
                if !self.mentions(&needles, &finders, new.oid)? {
                    continue;
                }
                let parsed = self.parse(&ch.path, new.oid)?;
                if expand(&parsed.documents)
                    .iter()
                    .any(|d| wanted.contains(&d.key))
                {
                    return Ok(true);
                }
            }
            cur = parent;
        }
        Ok(false)
    }

    fn judge(
        &mut self,
        commit: Oid,
        baseline_tree: Option<Oid>,
        tree: Oid,
        live: Option<&Live>,
    ) -> Result<Judged, GitError> {
        let changes: Vec<Change> = self.repo.changed_files_walk(
            baseline_tree,
            tree,
            &self.opts.prefixes,
            manifest::is_manifest_path,
        )?;
        self.parse_many(changes.iter().flat_map(|ch| {
            [(&ch.path, ch.old.as_ref()), (&ch.path, ch.new.as_ref())]
                .into_iter()
                .filter_map(|(p, e)| {
                    e.filter(|e| e.kind == EntryKind::File)
                        .map(|e| (p.as_str(), e.oid))
                })
        }))?;
        let mut problems = Vec::new();
        let mut skipped = Vec::new();
        let mut ignored_problems = Vec::new();
        let mut ignored_skips = Vec::new();
        let mut olds = Vec::with_capacity(changes.len());
        let mut news = Vec::with_capacity(changes.len());
        for ch in &changes {
            // The baseline is taken as given: its own problems are not re-reported.
            olds.push(self.side(
                &ch.path,
                ch.old.as_ref(),
                &mut ignored_problems,
                &mut ignored_skips,
            )?);
            news.push(self.side(&ch.path, ch.new.as_ref(), &mut problems, &mut skipped)?);
        }
        // Joined at their final size: a whole tree's tens of thousands of
        // objects, grown by doubling, were copied about twice over.
        let (baseline, next) = (joined(olds), joined(news));

        let base_keys: BTreeMap<&Key, &Desired> = baseline.iter().map(|d| (&d.key, d)).collect();
        let new_keys: Vec<&Key> = next
            .iter()
            .map(|d| &d.key)
            .filter(|k| !base_keys.contains_key(k))
            .collect();
        // An object that writes a release that parses where what the gate
        // knows of it names none (a baseline or a floor pinned by digest, a
        // starting baseline taken as given at a commit the gate refused, an
        // identity that came with the starting baseline so): the gate
        // judges it from the last release its history accepted
        // (`gate::Floor::released`), which may lie before the range.
        let unreleased: Vec<&Key> = next
            .iter()
            .filter(|d| match base_keys.get(&d.key) {
                Some(b) => {
                    b.release != d.release
                        && gate::parsed_release(b).is_none()
                        && gate::parsed_release(d).is_some()
                }
                None => {
                    self.memory.floors.contains_key(&d.key) && gate::parsed_release(d).is_some()
                }
            })
            .map(|d| &d.key)
            .filter(|k| {
                self.memory
                    .floors
                    .get(k)
                    .is_none_or(|f| f.released().is_none())
            })
            .collect();
        // From nothing, every manifest file of the tree is among the
        // changes, so none is elsewhere; looking found nothing but cost a
        // second walk of the tree and a set of every key.
        let elsewhere = if new_keys.is_empty() || baseline_tree.is_none() {
            Vec::new()
        } else {
            let changed: BTreeSet<&str> = changes.iter().map(|c| c.path.as_str()).collect();
            let mut needles: BTreeSet<String> = BTreeSet::new();
            for k in &new_keys {
                needles.insert(k.name.clone());
                if let Some(plane) = plane_name_for(k) {
                    needles.insert(plane.to_owned());
                }
            }
            let wanted: BTreeSet<Key> = next.iter().map(|d| d.key.clone()).collect();
            self.lookup(tree, &changed, &needles, &wanted)?
        };

        // Identities new to the baseline may have a past: look it up once.
        if !new_keys.is_empty() || !unreleased.is_empty() {
            let unknown: Vec<&Key> = new_keys
                .iter()
                .copied()
                .filter(|k| self.forked || !self.memory.floors.contains_key(k))
                .chain(unreleased)
                .collect();
            self.look_back(&unknown)?;
        }
        // The fleet's policies: the baseline's and the commit's own, so a
        // commit can neither lift a block and cross it, nor add one and
        // slip past it.
        let before = self.tree_policies(baseline_tree)?;
        let after = self.tree_policies(Some(tree))?;
        let policies = crate::policy::PolicySet {
            policies: before
                .policies
                .iter()
                .chain(&after.policies)
                .cloned()
                .collect(),
        };
        let acks = if policies.is_empty() {
            Default::default()
        } else {
            crate::policy::acks_in_message(&self.repo.message(commit)?)
        };
        let mut objects = gate::judge_commit(&CommitInput {
            baseline: &baseline,
            next: &next,
            elsewhere: &elsewhere,
            problems: &problems,
            live,
            floors: &self.memory.floors,
            policies: &policies,
            acks: &acks,
        });
        objects.extend(self.judge_policy_files(&changes, &after)?);
        Ok(Judged {
            objects,
            skipped,
            changes,
            baseline,
            next,
        })
    }

    /// Objects of files the commit did not change whose keys collide with
    /// `wanted`. A file can only define an object whose name it contains, so
    /// only files containing one of the needles are parsed (and, to stay
    /// closed, files that could spell a name some other way).
    fn lookup(
        &mut self,
        tree: Oid,
        changed: &BTreeSet<&str>,
        needles: &BTreeSet<String>,
        wanted: &BTreeSet<Key>,
    ) -> Result<Vec<Desired>, GitError> {
        // A searcher per name is built when the first file must be searched:
        // a whole tree judged from nothing changes every file, and building
        // one for each of its objects' names was a tenth of its sequential
        // time, for nothing.
        let build = || -> Vec<memchr::memmem::Finder<'_>> {
            needles
                .iter()
                .map(|n| memchr::memmem::Finder::new(n.as_bytes()))
                .collect()
        };
        let mut out = Vec::new();
        if let Some(index) = self.opts.names.clone() {
            let finders = build();
            let mut files = Vec::new();
            let q = Needles {
                needles,
                finders: &finders,
                changed,
                grow: true,
            };
            index.sync();
            self.scan(&index, tree, "", &q, false, &mut files)?;
            for (path, oid) in files {
                let parsed = self.parse(&path, oid)?;
                out.extend(
                    expand(&parsed.documents)
                        .into_iter()
                        .filter(|d| wanted.contains(&d.key)),
                );
            }
            return Ok(out);
        }
        let mut finders = None;
        for (path, entry) in
            self.repo
                .files(tree, &self.opts.prefixes, manifest::is_manifest_path)?
        {
            if changed.contains(path.as_str()) || entry.kind != EntryKind::File {
                continue;
            }
            let cached = self
                .cache
                .get(&(entry.oid, Arc::from(path.as_str())))
                .cloned();
            let parsed = match cached {
                Some(p) => p,
                None => {
                    let finders = finders.get_or_insert_with(build);
                    if !self.mentions(needles, finders, entry.oid)? {
                        continue;
                    }
                    self.parse(&path, entry.oid)?
                }
            };
            out.extend(
                expand(&parsed.documents)
                    .into_iter()
                    .filter(|d| wanted.contains(&d.key)),
            );
        }
        Ok(out)
    }
}

/// A refusal of a lockstep document (a plan or a policy) rather than of a
/// C5C3 object: no kind, no releases, the file and line to fix.
fn document_refusal(
    file: Arc<str>,
    line: u32,
    namespace: Option<String>,
    name: Option<String>,
    reason: gate::Reason,
    message: String,
) -> ObjectVerdict {
    ObjectVerdict {
        kind: None,
        namespace,
        name,
        file,
        line,
        projected_by: None,
        from: None,
        to: None,
        from_image: None,
        to_image: None,
        transition: gate::Transition::Invalid,
        verdict: Verdict::Refused,
        reason: Some(reason),
        message,
    }
}

/// The lists one after another, in one allocation of the final size.
fn joined<T>(lists: Vec<Vec<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(lists.iter().map(Vec::len).sum());
    for list in lists {
        out.extend(list);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_disguise_are_suspected_wherever_yaml_could_decode_them() {
        for text in [
            "name: \"\\x63ell\"",
            "name: !!binary Y2VsbA==",
            "name: !!bin%61ry Y2VsbA==",
            "name: !<tag:yaml.org,2002:b%69nary> Y2VsbA==",
            "a: !x!y%z",
            "%TAG !e! tag:yaml.org,2002:bi\n---\nname: !e!nary Y2VsbA==",
        ] {
            assert!(may_spell_names_in_disguise(text.as_bytes()), "{text}");
        }
        for text in [
            "name: cell",
            "a: !x 100%",
            "wow!!! 50% off",
            "note: \"100%\"",
        ] {
            assert!(!may_spell_names_in_disguise(text.as_bytes()), "{text}");
        }
        // A run of `!`s is one tag, looked at once: a long one answers at
        // once (quadratic before), whatever follows it.
        let mut long = vec![b'!'; 1 << 20];
        assert!(!tag_with_escapes(&long));
        long.push(b'%');
        assert!(tag_with_escapes(&long));
    }
}
