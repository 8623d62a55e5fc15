//! The Git edge: revisions, first-parent ranges, tree diffs and blobs, over
//! libgit2. Everything here is read-only.

use std::path::{Path, PathBuf};

use git2::{DiffOptions, ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GitError {
    #[error("cannot open Git repository {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("unknown revision {rev:?} in {path}: {message}")]
    UnknownRevision {
        rev: String,
        path: PathBuf,
        message: String,
    },
    #[error("Git error while {context}: {message}")]
    Other { context: String, message: String },
    /// A walk reached a commit whose parents a shallow clone left out:
    /// judging from there would take a cut for a root and accept anything.
    #[error(
        "{path}: history is cut short at commit {commit} (a shallow clone), and lockstep judges against the whole first-parent history; fetch it all: `git fetch --unshallow` (GitHub Actions: actions/checkout with `fetch-depth: 0`; GitLab CI: `GIT_DEPTH: \"0\"`)"
    )]
    Shallow { path: PathBuf, commit: Oid },
    /// A `--path` that cannot select anything in this repository.
    #[error("--path {raw:?}: {why}")]
    Path { raw: String, why: String },
}

fn other(context: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
    let context = context.into();
    move |e| GitError::Other {
        context,
        message: e.message().to_owned(),
    }
}

/// What a tree entry is, as far as lockstep cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Symlink,
    Submodule,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub oid: Oid,
    pub kind: EntryKind,
}

/// One path a diff touched; `None` on the side where it does not exist.
#[derive(Clone, Debug)]
pub struct Change {
    pub path: String,
    pub old: Option<Entry>,
    pub new: Option<Entry>,
}

/// A commit as the reports name it.
#[derive(Clone, Debug)]
pub struct CommitInfo {
    pub id: Oid,
    pub tree: Oid,
    pub summary: String,
}

/// What a signed commit's signature covers and whom it must come from.
#[derive(Clone, Debug)]
pub struct CommitSignature {
    pub signature: Vec<u8>,
    pub signed_data: Vec<u8>,
    /// The committer timestamp, seconds since the epoch.
    pub when: i64,
    pub committer_email: String,
}

/// The CA certificate file libgit2's TLS context is missing, when
/// [`init_without_certificates`] left it out; loaded by
/// [`load_certificates`].
static DEFERRED_CERTIFICATES: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Initializes libgit2 without reading the system's CA certificates.
///
/// libgit2 is built with OpenSSL (for fetches over https), and its
/// initialization sets up a TLS context whether or not a connection is ever
/// opened: OpenSSL parses every certificate of the system's CA bundle, about
/// 20 ms of CPU, three quarters of a one-file `check`
/// (`cargo bench --bench fleet`). Here libgit2 initializes with OpenSSL's
/// certificate file pointed at `/dev/null`; the real one (the one libgit2
/// would have used: `SSL_CERT_FILE`, else what `openssl-probe` finds, which
/// libgit2's own initialization leaves in `SSL_CERT_FILE` as before) is
/// loaded by [`load_certificates`], which every libgit2 network operation
/// of such a command must call first.
///
/// # Safety
///
/// Sets and restores `SSL_CERT_FILE`: call it before any other thread
/// exists, and before anything else touches libgit2.
pub unsafe fn init_without_certificates() {
    const VAR: &str = "SSL_CERT_FILE";
    let Some(file) = openssl_probe::probe().cert_file else {
        // Nothing to defer: OpenSSL finds no bundle either.
        git2::opts::strict_hash_verification(false);
        return;
    };
    // SAFETY: single-threaded, by this function's contract.
    unsafe { std::env::set_var(VAR, "/dev/null") };
    git2::opts::strict_hash_verification(false);
    // SAFETY: as above.
    unsafe { std::env::set_var(VAR, &file) };
    if let Ok(mut d) = DEFERRED_CERTIFICATES.lock() {
        *d = Some(file);
    }
}

/// Loads the CA certificates [`init_without_certificates`] left out, once;
/// a no-op otherwise. Call before libgit2 opens a connection.
pub fn load_certificates() -> Result<(), GitError> {
    let Ok(mut deferred) = DEFERRED_CERTIFICATES.lock() else {
        return Ok(());
    };
    if let Some(file) = deferred.take() {
        // SAFETY: libgit2 is initialized; the option only loads a file into
        // its TLS context (no connection uses it concurrently: this runs
        // before the first).
        unsafe { git2::opts::set_ssl_cert_file(&file) }.map_err(other(format!(
            "loading CA certificates from {}",
            file.display()
        )))?;
    }
    Ok(())
}

pub struct GitRepo {
    repo: Repository,
    path: PathBuf,
    /// The commits a shallow clone cut below (`$GIT_DIR/shallow`): libgit2
    /// shows them as roots, which they are not.
    shallow: std::collections::HashSet<Oid>,
}

/// A revision resolved to what can be judged from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    Commit(Oid),
    /// A bare tree (e.g. the empty tree), usable as a starting baseline.
    Tree(Oid),
}

impl GitRepo {
    pub fn open(path: &Path) -> Result<Self, GitError> {
        // libgit2 re-hashes every object it reads; git itself trusts its
        // object database (integrity is checked when objects arrive, on
        // fetch). Skipping the re-hash halves the cost of a small check.
        git2::opts::strict_hash_verification(false);
        let repo = Repository::open(path).map_err(|e| GitError::Open {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
        let shallow = shallow_boundary(repo.commondir()).map_err(|e| GitError::Open {
            path: path.to_owned(),
            message: format!("cannot read its shallow boundary: {e}"),
        })?;
        Ok(Self {
            repo,
            path: path.to_owned(),
            shallow,
        })
    }

    /// Whether `id` is a commit whose parents this clone does not have.
    pub fn is_shallow_boundary(&self, id: Oid) -> bool {
        self.shallow.contains(&id)
    }

    pub fn raw(&self) -> &Repository {
        &self.repo
    }

    pub fn resolve(&self, rev: &str) -> Result<Resolved, GitError> {
        let unknown = |message: String| GitError::UnknownRevision {
            rev: rev.to_owned(),
            path: self.path.clone(),
            message,
        };
        let obj = self.repo.revparse_single(rev).map_err(|e| {
            if self.shallow.is_empty() {
                unknown(e.message().to_owned())
            } else {
                unknown(format!(
                    "{}; this is a shallow clone, so it may lie below its cut: fetch the whole history (`git fetch --unshallow`; actions/checkout: `fetch-depth: 0`)",
                    e.message()
                ))
            }
        })?;
        if let Ok(c) = obj.peel_to_commit() {
            return Ok(Resolved::Commit(c.id()));
        }
        match obj.peel(ObjectType::Tree) {
            Ok(t) => Ok(Resolved::Tree(t.id())),
            Err(_) => Err(unknown("names neither a commit nor a tree".into())),
        }
    }

    pub fn commit(&self, id: Oid) -> Result<CommitInfo, GitError> {
        let c = self
            .repo
            .find_commit(id)
            .map_err(other(format!("reading commit {id}")))?;
        Ok(CommitInfo {
            id,
            tree: c.tree_id(),
            summary: String::from_utf8_lossy(c.summary_bytes().unwrap_or_default()).into_owned(),
        })
    }

    /// A commit's signature (its `gpgsig` header) with the bytes it signs
    /// (the commit object without that header), the committer's time and
    /// email; `None` for an unsigned commit.
    pub fn signature(&self, id: Oid) -> Result<Option<CommitSignature>, GitError> {
        let c = self
            .repo
            .find_commit(id)
            .map_err(other(format!("reading commit {id}")))?;
        let committer = c.committer();
        let (signature, signed) = match self.repo.extract_signature(&id, None) {
            Ok(pair) => pair,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(other(format!("reading the signature of commit {id}"))(e)),
        };
        Ok(Some(CommitSignature {
            signature: signature.to_vec(),
            signed_data: signed.to_vec(),
            when: committer.when().seconds(),
            committer_email: String::from_utf8_lossy(committer.email_bytes()).into_owned(),
        }))
    }

    /// A commit's whole message (for trailers such as `Lockstep-Ack`).
    pub fn message(&self, id: Oid) -> Result<String, GitError> {
        let c = self
            .repo
            .find_commit(id)
            .map_err(other(format!("reading commit {id}")))?;
        Ok(String::from_utf8_lossy(c.message_bytes()).into_owned())
    }

    /// The id of the directory at `path` in a tree, if there is one.
    pub fn subtree(&self, tree: Oid, path: &str) -> Result<Option<Oid>, GitError> {
        let tree = self.repo.find_tree(tree).map_err(other("reading a tree"))?;
        Ok(tree
            .get_path(Path::new(path))
            .ok()
            .filter(|e| e.kind() == Some(git2::ObjectType::Tree))
            .map(|e| e.id()))
    }

    /// The files directly in a directory tree: `(name, blob)`.
    pub fn dir_files(&self, dir: Oid) -> Result<Vec<(String, Oid)>, GitError> {
        let tree = self.repo.find_tree(dir).map_err(other("reading a tree"))?;
        Ok(tree
            .iter()
            .filter(|e| e.kind() == Some(git2::ObjectType::Blob))
            .map(|e| (String::from_utf8_lossy(e.name_bytes()).into_owned(), e.id()))
            .collect())
    }

    /// The committer's email (for an unsigned commit's refusal).
    pub fn committer_email(&self, id: Oid) -> Result<String, GitError> {
        let c = self
            .repo
            .find_commit(id)
            .map_err(other(format!("reading commit {id}")))?;
        Ok(String::from_utf8_lossy(c.committer().email_bytes()).into_owned())
    }

    /// The first parent; `None` only for a real root. A shallow clone's
    /// cut is an error ([`GitError::Shallow`]), never a root.
    pub fn first_parent(&self, id: Oid) -> Result<Option<Oid>, GitError> {
        if self.shallow.contains(&id) {
            return Err(GitError::Shallow {
                path: self.path.clone(),
                commit: id,
            });
        }
        let c = self
            .repo
            .find_commit(id)
            .map_err(other(format!("reading commit {id}")))?;
        Ok(c.parent_ids().next())
    }

    /// The commits of `base..head` along `head`'s first parents, oldest
    /// first: walking stops at `base` or at any commit `base` already
    /// contains (so a pull request branched from an older main is judged
    /// from its own commits only).
    pub fn first_parent_range(
        &self,
        base: Option<Oid>,
        head: Oid,
    ) -> Result<Vec<CommitInfo>, GitError> {
        let mut out = Vec::new();
        let mut cur = Some(head);
        while let Some(id) = cur {
            if let Some(b) = base
                && (id == b
                    || self
                        .repo
                        .graph_descendant_of(b, id)
                        .map_err(other("walking history"))?)
            {
                break;
            }
            out.push(self.commit(id)?);
            cur = self.first_parent(id)?;
        }
        out.reverse();
        Ok(out)
    }

    /// `base` itself when it is an ancestor of `head` (or `head`), else the
    /// merge base of the two; `base` when they share no history.
    pub fn fork_point(&self, base: Oid, head: Oid) -> Result<Oid, GitError> {
        if base == head
            || self
                .repo
                .graph_descendant_of(head, base)
                .map_err(other("walking history"))?
        {
            return Ok(base);
        }
        match self.repo.merge_base(base, head) {
            Ok(m) => Ok(m),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(base),
            Err(e) => Err(other("finding the merge base")(e)),
        }
    }

    /// Manifest paths that differ between two trees (`None` = empty tree),
    /// restricted to `prefixes` when any are given. Cost grows with what
    /// changed: libgit2 skips subtrees whose ids are equal.
    pub fn changed_files(
        &self,
        old: Option<Oid>,
        new: Oid,
        prefixes: &[String],
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<Change>, GitError> {
        let old_tree = old
            .map(|o| self.repo.find_tree(o))
            .transpose()
            .map_err(other("reading the baseline tree"))?;
        let new_tree = self
            .repo
            .find_tree(new)
            .map_err(other("reading the commit tree"))?;
        let mut opts = DiffOptions::new();
        opts.include_typechange(true).ignore_submodules(false);
        for p in prefixes {
            opts.pathspec(p);
        }
        let diff = self
            .repo
            .diff_tree_to_tree(old_tree.as_ref(), Some(&new_tree), Some(&mut opts))
            .map_err(other("diffing trees"))?;
        let mut out = Vec::new();
        for delta in diff.deltas() {
            let side = |f: git2::DiffFile<'_>| -> Option<Entry> {
                if f.id().is_zero() || !f.exists() {
                    return None;
                }
                let kind = match f.mode() {
                    git2::FileMode::Link => EntryKind::Symlink,
                    git2::FileMode::Commit => EntryKind::Submodule,
                    git2::FileMode::Tree => return None,
                    _ => EntryKind::File,
                };
                Some(Entry { oid: f.id(), kind })
            };
            let path = delta
                .new_file()
                .path()
                .or_else(|| delta.old_file().path())
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !wanted(&path) || !under_prefixes(&path, prefixes) {
                continue;
            }
            out.push(Change {
                path,
                old: side(delta.old_file()),
                new: side(delta.new_file()),
            });
        }
        Ok(out)
    }

    /// What [`GitRepo::changed_files`] returns, by walking the two trees
    /// side by side and descending only into subtrees whose ids differ.
    /// libgit2's diff iterates every entry of each tree it enters (and
    /// builds a path string for each); across thousands of commits of a
    /// fleet with hundreds of entries per directory that is 1.3 ms a commit
    /// against tens of microseconds here. For walks over long histories
    /// (the look back for floors); `tests/gate_property.rs` checks that
    /// both agree on every commit of random histories.
    pub fn changed_files_walk(
        &self,
        old: Option<Oid>,
        new: Oid,
        prefixes: &[String],
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<Change>, GitError> {
        let tree = |id: Oid| self.repo.find_tree(id).map_err(other("reading a tree"));
        let old = old.map(tree).transpose()?;
        let new = tree(new)?;
        let mut out = Vec::new();
        self.walk_pair(old.as_ref(), Some(&new), "", prefixes, &wanted, &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn walk_pair(
        &self,
        old: Option<&git2::Tree<'_>>,
        new: Option<&git2::Tree<'_>>,
        dir: &str,
        prefixes: &[String],
        wanted: &dyn Fn(&str) -> bool,
        out: &mut Vec<Change>,
    ) -> Result<(), GitError> {
        use std::collections::BTreeMap;
        type Side = (Oid, i32);
        let mut both: BTreeMap<&str, (Option<Side>, Option<Side>)> = BTreeMap::new();
        let entries = |t: Option<&git2::Tree<'_>>| -> Vec<(String, Side)> {
            t.map(|t| {
                t.iter()
                    .map(|e| {
                        (
                            String::from_utf8_lossy(e.name_bytes()).into_owned(),
                            (e.id(), e.filemode()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
        };
        let old_entries = entries(old);
        let new_entries = entries(new);
        for (name, side) in &old_entries {
            both.entry(name.as_str()).or_default().0 = Some(*side);
        }
        for (name, side) in &new_entries {
            both.entry(name.as_str()).or_default().1 = Some(*side);
        }
        let is_tree = |s: &Option<Side>| s.is_some_and(|(_, m)| m == 0o040000);
        let file = |s: &Option<Side>| -> Option<Entry> {
            let (id, mode) = (*s)?;
            let kind = match mode {
                0o040000 => return None,
                0o120000 => EntryKind::Symlink,
                0o160000 => EntryKind::Submodule,
                _ => EntryKind::File,
            };
            Some(Entry { oid: id, kind })
        };
        for (name, (o, n)) in both {
            if o == n {
                continue;
            }
            let path = format!("{dir}{name}");
            if is_tree(&o) || is_tree(&n) {
                let sub = format!("{path}/");
                // Only directories a prefix lies in, or under one.
                let relevant = prefixes.is_empty()
                    || prefixes.iter().any(|p| {
                        let p = p.trim_end_matches('/');
                        p.starts_with(&sub) || p == path || under_prefixes(&path, prefixes)
                    });
                if relevant {
                    let load = |s: &Option<Side>| -> Result<Option<git2::Tree<'_>>, GitError> {
                        match s {
                            Some((id, 0o040000)) => self
                                .repo
                                .find_tree(*id)
                                .map(Some)
                                .map_err(other("reading a tree")),
                            _ => Ok(None),
                        }
                    };
                    let (ot, nt) = (load(&o)?, load(&n)?);
                    self.walk_pair(ot.as_ref(), nt.as_ref(), &sub, prefixes, wanted, out)?;
                }
            }
            // The non-tree side of a path (a file, or a file that became a
            // directory or the other way round).
            let (of, nf) = (file(&o), file(&n));
            if (of.is_some() || nf.is_some()) && wanted(&path) && under_prefixes(&path, prefixes) {
                out.push(Change {
                    path,
                    old: of,
                    new: nf,
                });
            }
        }
        Ok(())
    }

    /// Every wanted path of a tree, for the rare judgments that need files the
    /// commit did not touch.
    pub fn files(
        &self,
        tree: Oid,
        prefixes: &[String],
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, Entry)>, GitError> {
        let tree = self.repo.find_tree(tree).map_err(other("reading a tree"))?;
        let mut out = Vec::new();
        tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
            let name = entry.name().unwrap_or("");
            let kind = match entry.filemode() {
                0o120000 => EntryKind::Symlink,
                0o160000 => EntryKind::Submodule,
                0o040000 => return TreeWalkResult::Ok,
                _ => EntryKind::File,
            };
            let path = format!("{dir}{name}");
            if wanted(&path) && under_prefixes(&path, prefixes) {
                out.push((
                    path,
                    Entry {
                        oid: entry.id(),
                        kind,
                    },
                ));
            }
            TreeWalkResult::Ok
        })
        .map_err(other("walking a tree"))?;
        Ok(out)
    }

    /// Whether a tree has an entry (file or directory) at `path`.
    pub fn has_path(&self, tree: Oid, path: &str) -> Result<bool, GitError> {
        let tree = self.repo.find_tree(tree).map_err(other("reading a tree"))?;
        Ok(path.is_empty() || tree.get_path(Path::new(path)).is_ok())
    }

    pub fn blob(&self, oid: Oid) -> Result<git2::Blob<'_>, GitError> {
        self.repo
            .find_blob(oid)
            .map_err(other(format!("reading blob {oid}")))
    }
}

/// The shallow boundary of a repository: `$GIT_DIR/shallow` lists one
/// commit id per line (absent in a complete clone).
fn shallow_boundary(git_dir: &Path) -> std::io::Result<std::collections::HashSet<Oid>> {
    match std::fs::read_to_string(git_dir.join("shallow")) {
        Ok(text) => Ok(text
            .lines()
            .filter_map(|l| Oid::from_str(l.trim()).ok())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Default::default()),
        Err(e) => Err(e),
    }
}

/// A path prefix as a person may write it (`./standalone`, `clusters/prod/`,
/// `a/./b`, `.`) in the one spelling tree paths have (`standalone`,
/// `clusters/prod`, `a/b`, `` for the whole repository). Absolute paths and
/// `..` are refused: a prefix is relative to the repository's root, and one
/// that leaves it would silently match nothing.
pub fn normalize_prefix(raw: &str) -> Result<String, GitError> {
    let refuse = |why: &str| GitError::Path {
        raw: raw.to_owned(),
        why: why.to_owned(),
    };
    if raw.is_empty() {
        return Err(refuse(
            "is empty; name a directory or file relative to the repository root, like clusters/prod (or . for all of it)",
        ));
    }
    if raw.starts_with('/') {
        return Err(refuse(
            "is absolute; paths are relative to the repository root, like clusters/prod",
        ));
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(refuse(
                    "leaves the repository (..); paths are relative to its root, like clusters/prod",
                ));
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

/// Every prefix normalized ([`normalize_prefix`]); one naming the whole
/// repository makes the list empty (no filter).
pub fn normalize_prefixes(raw: &[String]) -> Result<Vec<String>, GitError> {
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let p = normalize_prefix(r)?;
        if p.is_empty() {
            return Ok(Vec::new());
        }
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Whether a path lies under one of the prefixes (all paths when none).
/// A prefix names a directory or a file; `clusters/prod` does not match
/// `clusters/production`.
pub fn under_prefixes(path: &str, prefixes: &[String]) -> bool {
    prefixes.is_empty()
        || prefixes.iter().any(|p| {
            let p = p.trim_end_matches('/');
            p.is_empty()
                || path == p
                || (path.starts_with(p) && path.as_bytes().get(p.len()) == Some(&b'/'))
        })
}

#[cfg(test)]
mod tests {
    use super::under_prefixes;

    #[test]
    fn prefixes_match_whole_components() {
        let p = vec!["clusters/prod".to_owned()];
        assert!(under_prefixes("clusters/prod/cp.yaml", &p));
        assert!(!under_prefixes("clusters/production/cp.yaml", &p));
        assert!(under_prefixes("anything.yaml", &[]));
        assert!(under_prefixes("a/b.yaml", &["a/".to_owned()]));
        assert!(under_prefixes("a/b.yaml", &["a/b.yaml".to_owned()]));
    }
}
