//! Writing a plan's hops back to Git: "the lockstep edits" for one wave's
//! objects, as one commit on the watched branch.
//!
//! The daemon never applies a plan to a cluster directly. It writes the edit
//! a person would have written (release and image together, one hop) and the
//! gate judges that commit like any other; so a plan can do nothing a person
//! could not, every hop has a commit to read and revert, and a restarted
//! daemon (or a second replica) finds its own work in history.
//!
//! Edits are byte-exact: only the scalars that name the release change, found
//! through the same span-keeping YAML reader the gate uses, never by pattern
//! matching. Comments, key order, quoting and every other byte of the file
//! stay as the people who own the file wrote them, so the diff of a plan
//! commit is exactly the lines a reviewer expects. After editing, the file is
//! read again and checked to mean what was intended; anything else is an
//! error, not a commit.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, FileMode, Oid, RemoteCallbacks, Repository};
use thiserror::Error;

use crate::desired::{Desired, expand};
use crate::kind::{Key, Kind, Recognised, ReleaseSource};
use crate::manifest::{self, Map, Node};
use crate::release::{Release, TaggedRelease};

/// One object to move one release forward, release and image together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bump {
    pub key: Key,
    /// The file that holds the object, as a path in the tree
    /// (`standalone/compute/nova.yaml`).
    pub file: String,
    /// The release to move to (`YYYY.N`): the next one after the object's.
    pub to: String,
}

/// Who writes the plan commits: author and committer alike.
pub use crate::git::Author;

/// Where a refused field is written: `file:line: Kind ns/name field`.
/// (Boxed in [`WritebackError`]: errors stay small on the happy path.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub file: String,
    pub line: u32,
    pub key: Key,
    /// The YAML path: `spec.openStackRelease`, `spec.image`,
    /// `spec.services.placement.image.tag`.
    pub field: String,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {} {}",
            self.file, self.line, self.key, self.field
        )
    }
}

/// Why a plan's edits could not be written. Every refusal of an edit names
/// the file and line a person would fix, and what to do instead.
#[derive(Debug, Error)]
pub enum WritebackError {
    #[error("{to:?} is not a release to move to: {message}")]
    BadTarget { to: String, message: String },
    /// The file does not read as valid manifests (the gate would refuse any
    /// commit touching it as it is).
    #[error("{file}:{line}: {message}")]
    Manifest {
        file: String,
        line: u32,
        message: String,
    },
    #[error("{file}: {key} is not in this file (the tree changed since the plan was read?)")]
    NotFound { file: String, key: Key },
    #[error("{file}: {key} is bumped to both {first} and {second}")]
    Conflict {
        file: String,
        key: Key,
        first: Release,
        second: Release,
    },
    #[error(
        "{at} is pinned by digest; a plan cannot derive the {to} digest: pin a tag or bump it by hand"
    )]
    DigestPinned { at: Box<Field>, to: Release },
    #[error(
        "{at} {value:?} does not name a release (YYYY.N, optionally with a -patch suffix); a plan cannot derive the {to} one: tag it by release or bump it by hand"
    )]
    NotARelease {
        at: Box<Field>,
        value: String,
        to: Release,
    },
    #[error(
        "{at} is {from}; {to} is not one hop forward from it (the next release is {next}): a plan moves one release at a time"
    )]
    NotOneHop {
        at: Box<Field>,
        /// As written (a tag keeps its patch suffix).
        from: String,
        to: Release,
        next: Release,
    },
    /// A field written in a way a byte-exact edit cannot change safely
    /// (an alias, an anchor others may share, a multi-line scalar).
    #[error("{at} {why}; bump it by hand")]
    Unsupported { at: Box<Field>, why: &'static str },
    /// The edited file did not read back as intended: a bug, never committed.
    #[error(
        "{file}: the edited file does not read back as intended ({message}); nothing was written"
    )]
    Verify { file: String, message: String },
    #[error("{file}: not in the tree of {commit}")]
    MissingFile { file: String, commit: Oid },
    #[error("{file}: is a {what}, not a regular file; a plan edits files only")]
    NotAFile { file: String, what: &'static str },
    #[error("{file}: is not UTF-8")]
    NotUtf8 { file: String },
    #[error("every bumped object already names its target release; there is nothing to commit")]
    NothingToChange,
    #[error("{branch:?} is not a valid branch name")]
    InvalidBranch { branch: String },
    /// Someone else moved the branch: re-read it, re-plan, retry.
    #[error(
        "refs/heads/{branch} is at {}, not {expected}: the branch moved; re-read it and retry",
        actual.map_or_else(|| "nothing (it does not exist)".to_owned(), |a| a.to_string())
    )]
    BranchMoved {
        branch: String,
        expected: Oid,
        actual: Option<Oid>,
    },
    /// The branch is checked out in a work tree whose copy of a file the
    /// hop edits differs from the branch's: moving the branch under it would
    /// leave those changes to undo the hop at the next `git commit -a`.
    #[error(
        "refs/heads/{branch} is checked out in {worktree}, where {file} has changes that are not committed; lockstep writes the hop only over a clean file (as git's receive.denyCurrentBranch=updateInstead does): commit or stash them, and the next pass writes it"
    )]
    DirtyCheckout {
        branch: String,
        worktree: String,
        file: String,
    },
    /// A file the hop edits is marked in that work tree's index so that
    /// git does not look at it (`--skip-worktree`, a sparse checkout, or
    /// `--assume-unchanged`): its status reads clean whatever the file
    /// holds, so writing the hop there could overwrite someone's changes.
    #[error(
        "refs/heads/{branch} is checked out in {worktree}, where {file} is marked {flag} in the index, so git does not show whether it has changes of its own; lockstep writes the hop only over a file it can see is clean: clear the mark (git update-index --no-{flag} {file}, or widen the sparse checkout) and the next pass writes it"
    )]
    HiddenCheckout {
        branch: String,
        worktree: String,
        file: String,
        flag: &'static str,
    },
    #[error("signing with {key}: {message}")]
    Sign { key: PathBuf, message: String },
    /// The remote did not take the push (it moved on: fetch, re-plan, retry).
    #[error("{remote} refused refs/heads/{branch}: {message}")]
    PushRejected {
        remote: String,
        branch: String,
        message: String,
    },
    #[error("Git error while {context}: {message}")]
    Git { context: String, message: String },
    #[error(transparent)]
    Store(#[from] crate::git::Error),
}

fn git(context: impl Into<String>) -> impl FnOnce(git2::Error) -> WritebackError {
    let context = context.into();
    move |e| WritebackError::Git {
        context,
        message: e.message().to_owned(),
    }
}

/// The commit message for a wave. `index` is the wave's position in
/// `spec.waves` counted from 0 (as `enumerate` gives it); the subject
/// counts from 1. The trailers let a restarted daemon, and people reading
/// `git log`, recognise plan commits without any state outside Git.
pub fn message(
    plan: &str,
    wave: &str,
    index: usize,
    waves: usize,
    to: &str,
    keys: &[Key],
) -> String {
    // A line break in a name would end the subject or forge a trailer.
    let one_line = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    };
    let (plan, wave, to) = (one_line(plan), one_line(wave), one_line(to));
    let mut m = format!(
        "lockstep plan {plan}: wave {wave} ({}/{waves}) to {to}\n\n",
        index.saturating_add(1)
    );
    let _ = writeln!(
        m,
        "Moves {} one release forward, release and image together:",
        if keys.len() == 1 {
            "this object".to_owned()
        } else {
            format!("these {} objects", keys.len())
        }
    );
    m.push('\n');
    for k in keys {
        let _ = writeln!(m, "- {}", one_line(&k.to_string()));
    }
    let _ = write!(m, "\nLockstep-Plan: {plan}\nLockstep-Wave: {wave}\n");
    m
}

/// One scalar to replace: `text[start..end]` becomes `with`.
struct Edit {
    start: usize,
    end: usize,
    with: String,
}

/// What a scalar names: the strict `openStackRelease` form or a tag.
#[derive(Clone, Copy)]
enum Role {
    Release,
    Tag,
}

/// Where a field is: which object, which file, which field, for messages.
struct At<'a> {
    file: &'a str,
    key: &'a Key,
    field: String,
}

impl At<'_> {
    fn place(&self, line: u32) -> Box<Field> {
        Box::new(Field {
            file: self.file.to_owned(),
            line,
            key: self.key.clone(),
            field: self.field.clone(),
        })
    }
}

/// A node and where it is written (the gate's reader's type).
type Spanned<T> = manifest::At<T>;

fn get<'a>(map: &'a Map, key: &str) -> Option<&'a Spanned<Node>> {
    // The first entry, like the gate's reader: an edit must change what the
    // gate reads.
    map.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn as_str(node: &Spanned<Node>) -> Option<&str> {
    match &node.value {
        Node::Str(s) => Some(s),
        _ => None,
    }
}

fn line_of(node: &Spanned<Node>) -> u32 {
    u32::try_from(node.line).unwrap_or(u32::MAX).max(1)
}

/// The object a document is, by the gate's rules (`default` namespace when
/// none is written).
fn document_key(root: &Map) -> Option<Key> {
    let api_version = as_str(get(root, "apiVersion")?)?;
    let kind = as_str(get(root, "kind")?)?;
    let kind = match Kind::recognise(api_version, kind)? {
        Recognised::Ours(k) => k,
        Recognised::WrongVersion(_) | Recognised::Companion | Recognised::Unknown(_) => {
            return None;
        }
    };
    let Node::Map(meta) = &get(root, "metadata")?.value else {
        return None;
    };
    let name = as_str(get(meta, "name")?)?;
    let namespace = match get(meta, "namespace") {
        Some(n) => as_str(n)?,
        None => "default",
    };
    Some(Key::new(kind, namespace, name))
}

/// Rewrites one file's text so that every bumped object in it names its
/// target release: `spec.openStackRelease` (kinds that have it), the
/// standalone `spec.image.tag`, and a ControlPlane's
/// `spec.services.<svc>.image.tag` overrides. A tag keeps nothing of its old
/// value: `2026.1-p3` becomes `2026.2` (a patch of the old release says
/// nothing about the new one).
///
/// Quoting is kept: `'2026.1'` becomes `'2026.2'`, `"2026.1"` becomes
/// `"2026.2"`. A plain scalar becomes double-quoted, because a plain
/// `2026.2` is a number to YAML and the CRDs want a string.
///
/// Refused: digest-pinned images (no plan can know the next digest), tags
/// that are not releases (`latest`), a target that is not one hop from what
/// the file says, and fields written through aliases or anchors. A field that
/// already names the target is left alone, so writing the same wave twice
/// changes nothing. Bumps for other files are ignored, so a caller may pass
/// a whole wave.
pub fn edit_file(path: &str, text: &str, bumps: &[&Bump]) -> Result<String, WritebackError> {
    // The gate's reader strips a byte order mark before parsing; spans are
    // relative to what it parsed.
    let (bom, body) = match text.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", text),
    };
    // One target per object; the same bump twice is one bump.
    let mut targets: BTreeMap<&Key, Release> = BTreeMap::new();
    for b in bumps.iter().filter(|b| b.file == path) {
        let to = Release::parse_strict(&b.to).map_err(|e| WritebackError::BadTarget {
            to: b.to.clone(),
            message: e.to_string(),
        })?;
        if let Some(prev) = targets.insert(&b.key, to)
            && prev != to
        {
            return Err(WritebackError::Conflict {
                file: path.to_owned(),
                key: b.key.clone(),
                first: prev,
                second: to,
            });
        }
    }
    if targets.is_empty() {
        return Ok(text.to_owned());
    }

    // The gate's reading of the file as it is: an edit to a file the gate
    // already refuses would only produce a refused commit.
    let before = manifest::parse_file(path, text.as_bytes(), usize::MAX);
    if let Some(p) = before.problems.first() {
        return Err(WritebackError::Manifest {
            file: path.to_owned(),
            line: p.line,
            message: p.message.clone(),
        });
    }
    // The gate's budget for this file (it read the file above without a
    // byte limit): what the gate reads, the edit reads.
    let limit = crate::yaml::Limit::manifest(usize::MAX);
    let options = crate::yaml::options(&limit, body.len());
    let docs: Vec<Spanned<Node>> = serde_saphyr::from_multiple_with_options(body, options)
        .map_err(|e| {
            let d = crate::yaml::describe(&e, &limit);
            WritebackError::Manifest {
                file: path.to_owned(),
                line: d.line,
                message: d.message,
            }
        })?;

    let mut edits = Vec::new();
    for (key, to) in &targets {
        let root = docs.iter().find_map(|d| match &d.value {
            Node::Map(m) if document_key(m).as_ref() == Some(*key) => Some(m),
            _ => None,
        });
        let Some(root) = root else {
            return Err(WritebackError::NotFound {
                file: path.to_owned(),
                key: (*key).clone(),
            });
        };
        object_edits(body, path, key, root, *to, &mut edits)?;
    }

    // Replace from the end so earlier offsets stay valid.
    edits.sort_by_key(|e| std::cmp::Reverse(e.start));
    let mut out = body.to_owned();
    let mut limit = usize::MAX;
    for e in &edits {
        if e.end > limit {
            return Err(WritebackError::Verify {
                file: path.to_owned(),
                message: "two edits overlap".into(),
            });
        }
        out.replace_range(e.start..e.end, &e.with);
        limit = e.start;
    }
    let out = format!("{bom}{out}");
    verify(path, &before, &out, &targets)?;
    Ok(out)
}

/// The edits one object needs.
fn object_edits(
    text: &str,
    file: &str,
    key: &Key,
    root: &Map,
    to: Release,
    edits: &mut Vec<Edit>,
) -> Result<(), WritebackError> {
    // The gate's parse succeeded, so the object has a spec mapping.
    let Some(Node::Map(spec)) = get(root, "spec").map(|s| &s.value) else {
        return Err(WritebackError::Verify {
            file: file.to_owned(),
            message: format!("{key} has no spec mapping"),
        });
    };
    let at = |field: &str| At {
        file,
        key,
        field: field.to_owned(),
    };
    // Present for these kinds: the gate's reader requires it.
    if (key.kind == Kind::ControlPlane || key.kind.release_source() == ReleaseSource::Field)
        && let Some(node) = get(spec, "openStackRelease")
    {
        edits.extend(scalar_edit(
            text,
            node,
            &at("spec.openStackRelease"),
            Role::Release,
            to,
        )?);
    }
    if key.kind == Kind::ControlPlane {
        let Some(Node::Map(services)) = get(spec, "services").map(|s| &s.value) else {
            return Ok(());
        };
        for svc in Kind::SERVICES {
            let Some(Node::Map(entry)) = get(services, svc.service()).map(|e| &e.value) else {
                continue;
            };
            if let Some(image) = get(entry, "image") {
                let field = format!("spec.services.{}.image", svc.service());
                edits.extend(image_edit(text, image, &at(&field), to)?);
            }
        }
    } else if let Some(image) = get(spec, "image") {
        edits.extend(image_edit(text, image, &at("spec.image"), to)?);
    }
    Ok(())
}

/// The edit of an image's tag; a digest is refused.
fn image_edit(
    text: &str,
    image: &Spanned<Node>,
    at: &At<'_>,
    to: Release,
) -> Result<Option<Edit>, WritebackError> {
    let Node::Map(m) = &image.value else {
        return Ok(None);
    };
    if let Some(tag) = get(m, "tag") {
        let at = At {
            field: format!("{}.tag", at.field),
            ..*at
        };
        return scalar_edit(text, tag, &at, Role::Tag, to);
    }
    if let Some(digest) = get(m, "digest") {
        return Err(WritebackError::DigestPinned {
            at: at.place(line_of(digest)),
            to,
        });
    }
    Ok(None)
}

/// The edit of one release-naming scalar, or none when it already names `to`.
fn scalar_edit(
    text: &str,
    node: &Spanned<Node>,
    at: &At<'_>,
    role: Role,
    to: Release,
) -> Result<Option<Edit>, WritebackError> {
    let line = line_of(node);
    let unsupported = |why: &'static str| WritebackError::Unsupported {
        at: at.place(line),
        why,
    };
    // An alias: editing it means editing what it points at, which other
    // fields share.
    if node.aliased {
        return Err(unsupported("is written through a YAML alias"));
    }
    let Node::Str(value) = &node.value else {
        return Err(unsupported("is not a string"));
    };
    let from = match role {
        Role::Release => Release::parse_strict(value).ok(),
        Role::Tag => TaggedRelease::parse(value).ok().map(|t| t.release),
    };
    let Some(from) = from else {
        return Err(WritebackError::NotARelease {
            at: at.place(line),
            value: value.clone(),
            to,
        });
    };
    if from == to {
        return Ok(None);
    }
    if from.next() != to {
        return Err(WritebackError::NotOneHop {
            at: at.place(line),
            from: value.clone(),
            to,
            next: from.next(),
        });
    }
    let Some((start, len)) = node.span else {
        return Err(unsupported("has no byte position"));
    };
    let (Ok(start), Ok(len)) = (usize::try_from(start), usize::try_from(len)) else {
        return Err(unsupported("has no byte position"));
    };
    let end = start.saturating_add(len);
    let Some(raw) = text.get(start..end) else {
        return Err(unsupported("has no byte position"));
    };
    if raw.contains(['\n', '\r']) || raw.starts_with(['|', '>']) {
        return Err(unsupported("is written across lines"));
    }
    // An anchored scalar may be aliased elsewhere: changing it would change
    // those fields too.
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    if text[line_start..start]
        .split_whitespace()
        .rev()
        .take(2)
        .any(|t| t.starts_with('&'))
    {
        return Err(unsupported("carries a YAML anchor other fields may alias"));
    }
    let with = if raw.starts_with('\'') {
        format!("'{to}'")
    } else {
        // Double quotes as they were, or instead of plain: a plain 2026.2 is
        // a number.
        format!("\"{to}\"")
    };
    Ok(Some(Edit { start, end, with }))
}

/// Reads the edited text the way the gate will and checks that it says what
/// the plan meant: every bumped object on `to`, release and images, and
/// every other object exactly as before.
fn verify(
    path: &str,
    before: &manifest::ParsedFile,
    out: &str,
    targets: &BTreeMap<&Key, Release>,
) -> Result<(), WritebackError> {
    let fail = |message: String| WritebackError::Verify {
        file: path.to_owned(),
        message,
    };
    let after = manifest::parse_file(path, out.as_bytes(), usize::MAX);
    if let Some(p) = after.problems.first() {
        return Err(fail(format!("line {}: {}", p.line, p.message)));
    }
    if after.documents.len() != before.documents.len() {
        return Err(fail("the number of objects changed".into()));
    }
    for (b, a) in before.documents.iter().zip(&after.documents) {
        if a.key != b.key {
            return Err(fail(format!("{} became {}", b.key, a.key)));
        }
        let (old, new): (Vec<Desired>, Vec<Desired>) = (
            expand(std::slice::from_ref(b)),
            expand(std::slice::from_ref(a)),
        );
        let Some(to) = targets.get(&a.key) else {
            if old.len() != new.len() || old.iter().zip(&new).any(|(o, n)| !o.same_target(n)) {
                return Err(fail(format!("{} changed but was not bumped", a.key)));
            }
            continue;
        };
        let on = |s: Option<&str>| {
            s.is_none_or(|s| TaggedRelease::parse(s).is_ok_and(|t| t.release == *to))
        };
        for d in &new {
            if !on(d.release.as_deref()) || !on(d.image.as_ref().and_then(|i| i.tag())) {
                return Err(fail(format!("{} is not on {to}", d.key)));
            }
        }
    }
    Ok(())
}

/// Creates one commit on `branch` whose parent is `expect_parent` (the tip
/// the plan was made from), changing only the files of `bumps`, and moves
/// the branch to it with compare-and-swap. If the branch is no longer at
/// `expect_parent`, nothing is written and [`WritebackError::BranchMoved`]
/// tells the caller to re-read and retry: a plan's hop is never stacked on
/// a commit nobody judged it against.
///
/// `author` is author and committer. With `signing_key` (an OpenSSH private
/// key file, or a public key whose private half is in ssh-agent) the commit
/// carries git's SSH signature (`gpgsig`, made by `ssh-keygen -Y sign -n
/// git`), so branch protection that requires signed commits accepts it.
///
/// The object database and `refs/heads/<branch>` are written. Where the
/// branch is checked out (a person's clone watched with `--repo`), the
/// edited files are written to that work tree and its index as well, as
/// git's `receive.denyCurrentBranch=updateInstead` does, and only if the
/// person has no changes of their own in those files
/// ([`WritebackError::DirtyCheckout`]): a branch moved under a stale index
/// would show the hop as reverted, and the next `git commit -a` would
/// commit that set-back, which the gate accepts as an abort.
pub fn commit_bumps(
    repo_path: &Path,
    branch: &str,
    expect_parent: Oid,
    bumps: &[Bump],
    message: &str,
    author: &Author,
    signing_key: Option<&Path>,
) -> Result<Oid, WritebackError> {
    let refname = format!("refs/heads/{branch}");
    if !git2::Reference::is_valid_name(&refname) {
        return Err(WritebackError::InvalidBranch {
            branch: branch.to_owned(),
        });
    }
    let repo = Repository::open(repo_path).map_err(git(format!(
        "opening the repository {}",
        repo_path.display()
    )))?;
    let tip = branch_tip(&repo, &refname)?;
    if tip != Some(expect_parent) {
        return Err(WritebackError::BranchMoved {
            branch: branch.to_owned(),
            expected: expect_parent,
            actual: tip,
        });
    }
    let parent = repo
        .find_commit(expect_parent)
        .map_err(git(format!("reading commit {expect_parent}")))?;
    let tree = wave_tree(&repo, &parent, bumps)?;
    let files: std::collections::BTreeSet<&str> = bumps.iter().map(|b| b.file.as_str()).collect();
    let checkouts = checked_out(&repo, &refname)?;
    let clean = || -> Result<(), WritebackError> {
        for wt in &checkouts {
            let index = wt
                .index()
                .map_err(git(format!("reading the index of {}", worktree_name(wt))))?;
            for file in &files {
                if let Some(flag) = index
                    .get_path(Path::new(file), 0)
                    .and_then(|e| hidden_by(&e))
                {
                    return Err(WritebackError::HiddenCheckout {
                        branch: branch.to_owned(),
                        worktree: worktree_name(wt),
                        file: (*file).to_owned(),
                        flag,
                    });
                }
                let status = wt
                    .status_file(Path::new(file))
                    .map_err(git(format!("reading the status of {file}")))?;
                if !status.is_empty() {
                    return Err(WritebackError::DirtyCheckout {
                        branch: branch.to_owned(),
                        worktree: worktree_name(wt),
                        file: (*file).to_owned(),
                    });
                }
            }
        }
        Ok(())
    };
    clean()?;
    let commit = write_commit(&repo, &parent, tree, message, author, signing_key)?;
    // Signing can wait on an agent or a hardware key for a long while: the
    // files are checked again right before the branch moves, so the
    // checkout below overwrites nothing a person wrote meanwhile (the
    // commit object left unreferenced is harmless).
    clean()?;
    let log = format!(
        "lockstep: {}",
        message.lines().next().unwrap_or("plan write-back")
    );
    match repo.reference_matching(&refname, commit, true, expect_parent, &log) {
        Ok(_) => {
            // The commit is on the branch: a work tree that cannot follow
            // (a file edited since the check above, a held index.lock) is
            // said in the log, never a failed write, so the push goes on.
            for wt in &checkouts {
                if let Err(e) = update_checkout(wt, tree, &files) {
                    tracing::warn!(
                        branch,
                        worktree = %worktree_name(wt),
                        error = %e,
                        "plan: the hop commit is on the branch, but the work tree where it is checked out keeps the old files; run `git status` there"
                    );
                }
            }
            Ok(commit)
        }
        // Moved between the check above and now: the swap refused.
        Err(e) if e.code() == ErrorCode::Modified => Err(WritebackError::BranchMoved {
            branch: branch.to_owned(),
            expected: expect_parent,
            actual: branch_tip(&repo, &refname).ok().flatten(),
        }),
        Err(e) => Err(git(format!("moving {refname}"))(e)),
    }
}

/// The tree of `parent` with the files of `bumps` edited
/// ([`edit_file`]); [`WritebackError::NothingToChange`] when every object
/// already names its target. The same bumps on the same parent give the
/// same tree, which is how a proposal branch that already carries a wave's
/// edits is recognised and reused.
pub fn wave_tree(
    repo: &Repository,
    parent: &git2::Commit<'_>,
    bumps: &[Bump],
) -> Result<Oid, WritebackError> {
    let expect_parent = parent.id();
    let base_tree = parent
        .tree()
        .map_err(git(format!("reading the tree of {expect_parent}")))?;
    let mut by_file: BTreeMap<&str, Vec<&Bump>> = BTreeMap::new();
    for b in bumps {
        by_file.entry(b.file.as_str()).or_default().push(b);
    }
    let mut update = git2::build::TreeUpdateBuilder::new();
    let mut changed = 0usize;
    for (file, file_bumps) in &by_file {
        let entry =
            base_tree
                .get_path(Path::new(file))
                .map_err(|_| WritebackError::MissingFile {
                    file: (*file).to_owned(),
                    commit: expect_parent,
                })?;
        let mode = match entry.filemode() {
            0o100644 => FileMode::Blob,
            0o100755 => FileMode::BlobExecutable,
            0o120000 => {
                return Err(WritebackError::NotAFile {
                    file: (*file).to_owned(),
                    what: "symbolic link",
                });
            }
            0o160000 => {
                return Err(WritebackError::NotAFile {
                    file: (*file).to_owned(),
                    what: "submodule",
                });
            }
            _ => {
                return Err(WritebackError::NotAFile {
                    file: (*file).to_owned(),
                    what: "directory",
                });
            }
        };
        let blob = repo
            .find_blob(entry.id())
            .map_err(git(format!("reading {file}")))?;
        let text = std::str::from_utf8(blob.content()).map_err(|_| WritebackError::NotUtf8 {
            file: (*file).to_owned(),
        })?;
        let edited = edit_file(file, text, file_bumps)?;
        if edited != text {
            let oid = repo
                .blob(edited.as_bytes())
                .map_err(git(format!("writing {file}")))?;
            update.upsert(*file, oid, mode);
            changed += 1;
        }
    }
    if changed == 0 {
        return Err(WritebackError::NothingToChange);
    }
    update
        .create_updated(repo, &base_tree)
        .map_err(git("writing the new tree"))
}

/// Writes (but does not point any ref at) the commit of `tree` on
/// `parent`, authored and committed by `author`, signed with
/// `signing_key` when given ([`crate::git::write_commit`]).
pub fn write_commit(
    repo: &Repository,
    parent: &git2::Commit<'_>,
    tree_id: Oid,
    message: &str,
    author: &Author,
    signing_key: Option<&Path>,
) -> Result<Oid, WritebackError> {
    crate::git::write_commit(repo, parent, tree_id, message, author, signing_key).map_err(|e| {
        match e {
            crate::git::Error::Sign { key, why } => WritebackError::Sign { key, message: why },
            e => e.into(),
        }
    })
}

/// The work trees (the repository's own and its linked ones) that have
/// `refname` checked out.
fn checked_out(repo: &Repository, refname: &str) -> Result<Vec<Repository>, WritebackError> {
    let on_branch = |r: &Repository| {
        !r.is_bare()
            && r.find_reference("HEAD")
                .ok()
                .and_then(|h| h.symbolic_target().ok().flatten().map(|t| t == refname))
                .unwrap_or(false)
    };
    let mut out = Vec::new();
    // `--repo` may itself be a linked work tree: the main one and every
    // linked one are found through the common directory.
    let main = Repository::open(repo.commondir()).map_err(git("opening the repository"))?;
    let names = main.worktrees().map_err(git("listing the work trees"))?;
    for name in names.iter().filter_map(|n| n.ok().flatten()) {
        let Ok(wt) = main.find_worktree(name) else {
            continue;
        };
        // A work tree whose directory is gone (not yet pruned) has nothing
        // to keep fresh.
        if wt.validate().is_err() {
            continue;
        }
        let r = Repository::open_from_worktree(&wt)
            .map_err(git(format!("opening the work tree {name}")))?;
        if on_branch(&r) {
            out.push(r);
        }
    }
    if on_branch(&main) {
        out.insert(0, main);
    }
    Ok(out)
}

/// The index mark that makes git skip a file's work-tree copy, if any:
/// `assume-unchanged` (the entry's "valid" bit) or `skip-worktree` (set by
/// sparse checkouts too).
fn hidden_by(entry: &git2::IndexEntry) -> Option<&'static str> {
    const ASSUME_VALID: u16 = 0x8000;
    const SKIP_WORKTREE: u16 = 0x4000;
    if entry.flags_extended & SKIP_WORKTREE != 0 {
        Some("skip-worktree")
    } else if entry.flags & ASSUME_VALID != 0 {
        Some("assume-unchanged")
    } else {
        None
    }
}

fn worktree_name(wt: &Repository) -> String {
    wt.workdir()
        .unwrap_or_else(|| wt.path())
        .display()
        .to_string()
}

/// Writes `files` as `tree` has them into the work tree and its index
/// (checked clean right before the branch moved).
fn update_checkout(
    wt: &Repository,
    tree: Oid,
    files: &std::collections::BTreeSet<&str>,
) -> Result<(), WritebackError> {
    let tree = wt
        .find_tree(tree)
        .map_err(git(format!("reading tree {tree}")))?;
    let mut co = git2::build::CheckoutBuilder::new();
    co.force().disable_pathspec_match(true);
    for f in files {
        co.path(f);
    }
    wt.checkout_tree(tree.as_object(), Some(&mut co))
        .map_err(git(format!("updating the work tree {}", worktree_name(wt))))
}

fn branch_tip(repo: &Repository, refname: &str) -> Result<Option<Oid>, WritebackError> {
    match repo.refname_to_id(refname) {
        Ok(id) => Ok(Some(id)),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(git(format!("reading {refname}"))(e)),
    }
}

/// Pushes `refs/heads/<branch>` to `remote` (a configured remote's name, or
/// a URL or path), never forced: if the remote moved on, the push is refused
/// ([`WritebackError::PushRejected`]) and the caller fetches, re-plans and
/// writes the hop again on the new tip. This is how a plan commit made in a
/// remote source's cache reaches the real branch.
///
/// `callbacks` carries the caller's credentials (built like the source's:
/// token over https, key and known_hosts over ssh); its
/// `push_update_reference` callback is replaced, because that is where the
/// server says whether it took the ref.
pub fn push_branch(
    repo_path: &Path,
    remote: &str,
    branch: &str,
    callbacks: RemoteCallbacks<'_>,
) -> Result<(), WritebackError> {
    push(repo_path, remote, branch, false, callbacks)
}

/// Pushes `refs/heads/<branch>` over whatever the remote has there. Only
/// for branches lockstep owns (a wave's proposal branch while no open
/// request uses it): the watched branch is only ever pushed by
/// [`push_branch`].
pub fn force_push_branch(
    repo_path: &Path,
    remote: &str,
    branch: &str,
    callbacks: RemoteCallbacks<'_>,
) -> Result<(), WritebackError> {
    push(repo_path, remote, branch, true, callbacks)
}

fn push(
    repo_path: &Path,
    remote: &str,
    branch: &str,
    force: bool,
    callbacks: RemoteCallbacks<'_>,
) -> Result<(), WritebackError> {
    if !git2::Reference::is_valid_name(&format!("refs/heads/{branch}")) {
        return Err(WritebackError::InvalidBranch {
            branch: branch.to_owned(),
        });
    }
    let repo = Repository::open(repo_path).map_err(git(format!(
        "opening the repository {}",
        repo_path.display()
    )))?;
    crate::git::push(&repo, remote, branch, force, callbacks).map_err(|e| match e {
        crate::git::Error::Refused { why, .. } => WritebackError::PushRejected {
            remote: crate::git::redact(remote),
            branch: branch.to_owned(),
            message: why,
        },
        e => e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::redact;

    const NOVA: &str = "apiVersion: nova.openstack.c5c3.io/v1alpha1
kind: Nova
metadata:
  name: nova
  namespace: compute
spec:
  openStackRelease: \"2026.1\"
  image:
    repository: ghcr.io/c5c3/nova
    tag: \"2026.1\"
";

    fn bump(kind: Kind, ns: &str, name: &str, to: &str) -> Bump {
        Bump {
            key: Key::new(kind, ns, name),
            file: "f.yaml".into(),
            to: to.into(),
        }
    }

    fn edit(text: &str, b: &[Bump]) -> Result<String, WritebackError> {
        let refs: Vec<&Bump> = b.iter().collect();
        edit_file("f.yaml", text, &refs)
    }

    #[test]
    fn aliases_and_anchors_are_refused() {
        let text = NOVA
            .replace(
                "openStackRelease: \"2026.1\"",
                "openStackRelease: &rel \"2026.1\"",
            )
            .replace("tag: \"2026.1\"", "tag: *rel");
        let e = edit(&text, &[bump(Kind::Nova, "compute", "nova", "2026.2")]).unwrap_err();
        assert!(
            matches!(&e, WritebackError::Unsupported { at, .. } if at.line == 7),
            "{e}"
        );
        assert!(e.to_string().contains("bump it by hand"), "{e}");
        assert!(e.to_string().contains("anchor"), "{e}");
        // The tag as an alias of a value defined elsewhere.
        let text = NOVA
            .replace(
                "  namespace: compute\n",
                "  namespace: compute\n  annotations: {release: &rel \"2026.1\"}\n",
            )
            .replace("tag: \"2026.1\"", "tag: *rel");
        let e = edit(&text, &[bump(Kind::Nova, "compute", "nova", "2026.2")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.yaml:11: Nova compute/nova spec.image.tag is written through a YAML alias; bump it by hand"
        );
    }

    #[test]
    fn bom_and_crlf_survive() {
        let text = format!("\u{feff}{}", NOVA.replace('\n', "\r\n"));
        let out = edit(&text, &[bump(Kind::Nova, "compute", "nova", "2026.2")]).unwrap();
        assert_eq!(
            out,
            format!(
                "\u{feff}{}",
                NOVA.replace("2026.1", "2026.2").replace('\n', "\r\n")
            )
        );
    }

    #[test]
    fn targets_and_conflicts() {
        let e = edit(NOVA, &[bump(Kind::Nova, "compute", "nova", "2026.3")]).unwrap_err();
        assert!(matches!(e, WritebackError::BadTarget { .. }), "{e}");
        let e = edit(
            NOVA,
            &[
                bump(Kind::Nova, "compute", "nova", "2026.2"),
                bump(Kind::Nova, "compute", "nova", "2027.1"),
            ],
        )
        .unwrap_err();
        assert!(matches!(e, WritebackError::Conflict { .. }), "{e}");
        let e = edit(NOVA, &[bump(Kind::Nova, "compute", "nova", "2027.1")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.yaml:7: Nova compute/nova spec.openStackRelease is 2026.1; 2027.1 is not one hop forward from it (the next release is 2026.2): a plan moves one release at a time"
        );
        let e = edit(NOVA, &[bump(Kind::Nova, "other", "nova", "2026.2")]).unwrap_err();
        assert!(matches!(e, WritebackError::NotFound { .. }), "{e}");
        // Already there: nothing to do, nothing changes.
        let there = NOVA.replace("2026.1", "2026.2");
        assert_eq!(
            edit(&there, &[bump(Kind::Nova, "compute", "nova", "2026.2")]).unwrap(),
            there
        );
    }

    #[test]
    fn message_has_subject_body_and_trailers() {
        let m = message(
            "fleet-2026-2",
            "canary",
            0,
            3,
            "2026.2",
            &[
                Key::new(Kind::ControlPlane, "openstack", "staging"),
                Key::new(Kind::Nova, "compute", "nova"),
            ],
        );
        assert_eq!(
            m,
            "lockstep plan fleet-2026-2: wave canary (1/3) to 2026.2\n\n\
             Moves these 2 objects one release forward, release and image together:\n\n\
             - ControlPlane openstack/staging\n\
             - Nova compute/nova\n\n\
             Lockstep-Plan: fleet-2026-2\n\
             Lockstep-Wave: canary\n"
        );
        let m = message("p", "a\nLockstep-Plan: forged", 1, 2, "2026.2", &[]);
        assert!(
            m.lines()
                .filter(|l| l.starts_with("Lockstep-Plan:"))
                .count()
                == 1,
            "{m}"
        );
    }

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(
            redact("failed https://x-access-token:s3cret@example.com/a.git: nope"),
            "failed https://<redacted>@example.com/a.git: nope"
        );
        assert_eq!(redact("/srv/git/fleet.git"), "/srv/git/fleet.git");
        assert_eq!(redact("ssh://git@host/x"), "ssh://<redacted>@host/x");
        for (text, shown) in [
            (
                "'https://u:pa/SECRET@host/x.git' failed",
                "'https://<redacted>@host/x.git' failed",
            ),
            (
                "at https://u:p?SECRET@host/x",
                "at https://<redacted>@host/x",
            ),
            (
                "https://host/x.git?access_token=SECRET: 403",
                "https://host/x.git?… 403",
            ),
        ] {
            assert_eq!(redact(text), shown);
        }
    }
}
