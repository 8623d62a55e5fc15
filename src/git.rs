//! The Git edge, over libgit2: revisions, first-parent ranges, tree diffs
//! and blobs, and the two writes lockstep makes (a commit, a branch push).
//! [`Store`] is the seam the engine is given; [`Error`] says what failed in
//! lockstep's words (no libgit2 class or code in a message).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use git2::{DiffOptions, ObjectType, Oid, Repository};
use thiserror::Error;

/// What went wrong with Git, in lockstep's words: each message names what
/// failed (a commit, a path at a commit, a repository, a remote) and what to
/// do about it. libgit2's own message is kept only as the [`Error::Other`]
/// source, never in a `Display`; names that come from Git (paths, refs,
/// revisions) are printed raw here and escaped at the sink
/// ([`crate::escape`]).
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot open Git repository {}: {why}", path.display())]
    Open { path: PathBuf, why: String },
    #[error("unknown revision {rev:?} in {}: {why}", path.display())]
    UnknownRevision {
        rev: String,
        path: PathBuf,
        why: String,
    },
    /// A commit, tree, blob or path that is not where it was looked for.
    #[error("{what} does not exist in {place}; check the name, or fetch the history that has it")]
    NotFound { what: String, place: String },
    /// An object that exists but does not read: a damaged repository.
    #[error(
        "{what} in {} cannot be read: the repository is damaged; run `git fsck` there, then fetch or clone it again",
        path.display()
    )]
    Corrupt { what: String, path: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(
        "{what}: the remote refused the credentials; check that the token or key is valid and may use the repository"
    )]
    Auth { what: String },
    #[error(
        "{what}: the remote could not be reached; check the URL and the network (lockstep tries again)"
    )]
    Network { what: String },
    /// The other side (a remote, a ref that moved) said no.
    #[error("{what} was refused: {why}")]
    Refused { what: String, why: String },
    /// What a remote's credential or host-key check refused, in the
    /// source's words.
    #[error(transparent)]
    Remote(Box<crate::source::SourceError>),
    /// A walk reached a commit whose parents a shallow clone left out:
    /// judging from there would take a cut for a root and accept anything.
    #[error(
        "{}: history is cut short at commit {commit} (a shallow clone), and lockstep judges against the whole first-parent history; fetch it all: `git fetch --unshallow` (GitHub Actions: actions/checkout with `fetch-depth: 0`; GitLab CI: `GIT_DEPTH: \"0\"`)",
        path.display()
    )]
    Shallow { path: PathBuf, commit: Oid },
    /// A tree Git itself would not write and `git fsck` reports: a name
    /// that is not UTF-8 (two such names can read as one), a name twice in
    /// one directory, or entries out of Git's order (which libgit2's lookup
    /// by path and its iteration then read differently). Judged as a
    /// refusal of the commit that holds it (`history::judge_commits`).
    #[error("{path}: {why}")]
    MalformedTree { path: String, why: String },
    /// An object a partial clone (`git clone --filter`) left on the
    /// server: lockstep reads the local object database and never fetches.
    #[error(
        "{what} is not in {}, a partial clone (cloned with --filter): lockstep reads only what the clone holds and fetches nothing; clone without --filter (GitHub Actions: leave actions/checkout's `filter` unset)",
        path.display()
    )]
    Partial { what: String, path: PathBuf },
    /// A `--path` that cannot select anything in this repository.
    #[error("--path {raw:?}: {why}")]
    Path { raw: String, why: String },
    #[error("{id:?} is not a Git object id (40 hexadecimal digits)")]
    InvalidId { id: String },
    #[error("signing with {}: {why}", key.display())]
    Sign { key: PathBuf, why: String },
    /// Anything else libgit2 reports; its message is the source.
    #[error("{what}: Git failed; if this persists, run `git fsck` in the repository")]
    Other {
        what: String,
        #[source]
        detail: Detail,
    },
}

/// The old name, for callers that matched on it.
pub type GitError = Error;

/// libgit2's message without its class and code, as an error's source.
#[derive(Debug)]
pub struct Detail(String);

impl std::fmt::Display for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Detail {}

impl Error {
    /// libgit2's error `e` while doing `what` in the repository at `path`,
    /// sorted by what a person can do about it.
    pub fn classify(e: &git2::Error, what: impl Into<String>, path: &Path) -> Error {
        use git2::{ErrorClass as C, ErrorCode as K};
        let what = what.into();
        match (e.code(), e.class()) {
            (K::NotFound, _) => Error::NotFound {
                what,
                place: path.display().to_string(),
            },
            (K::Auth, _) => Error::Auth { what },
            (K::Certificate, _) => Error::Refused {
                what,
                why: "the remote's certificate or host key did not verify; check the CA bundle (SSL_CERT_FILE) or known_hosts".into(),
            },
            (_, C::Net | C::Http | C::Ssl | C::Ssh) | (K::Eof, _) => Error::Network { what },
            (K::NotFastForward, _) => Error::Refused {
                what,
                why: "the remote has commits this one lacks (not a fast-forward); fetch and try again".into(),
            },
            (K::Locked | K::Modified, _) => Error::Refused {
                what,
                why: "someone else changed the reference at the same time; try again".into(),
            },
            (_, C::Zlib) | (K::GenericError | K::Invalid, C::Odb | C::Object) => Error::Corrupt {
                what,
                path: path.to_owned(),
            },
            _ => Error::Other {
                what,
                detail: Detail(e.message().to_owned()),
            },
        }
    }
}

fn other(context: impl Into<String>) -> impl FnOnce(git2::Error) -> Error {
    let context = context.into();
    move |e| Error::Other {
        what: context,
        detail: Detail(e.message().to_owned()),
    }
}

/// Who writes a commit lockstep makes: author and committer alike (the
/// daemon is both; a plan's owner is named in the message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// A commit to write: one parent, a tree already in the object database.
#[derive(Clone, Copy, Debug)]
pub struct NewCommit<'a> {
    pub parent: Oid,
    pub tree: Oid,
    pub message: &'a str,
    pub author: &'a Author,
    /// Sign with this OpenSSH key (see [`write_commit`]).
    pub signing_key: Option<&'a Path>,
}

/// The Git the engine needs, as a seam: what a commit holds, the
/// first-parent history between two commits, writing a commit and pushing
/// a branch. [`GitRepo`] is the real one (libgit2); the history walk
/// (`history`) uses its richer inherent methods directly.
pub trait Store {
    /// A commit: its tree and summary.
    fn commit(&self, id: Oid) -> Result<CommitInfo, Error>;
    /// The entry at `path` in `commit`'s tree ([`Error::NotFound`] naming
    /// both when there is none).
    fn entry_at(&self, commit: Oid, path: &str) -> Result<Entry, Error>;
    /// A blob's bytes.
    fn read_blob(&self, id: Oid) -> Result<Vec<u8>, Error>;
    /// `base..head` along first parents, oldest first
    /// ([`GitRepo::first_parent_range`]).
    fn first_parent_range(&self, base: Option<Oid>, head: Oid) -> Result<Vec<CommitInfo>, Error>;
    /// Writes a commit (no ref is moved).
    fn write_commit(&self, new: &NewCommit<'_>) -> Result<Oid, Error>;
    /// Pushes `refs/heads/<branch>` to `to`, forced or not (a refusal is
    /// [`Error::Refused`]).
    fn push(&self, to: &crate::source::PushTarget, branch: &str, force: bool) -> Result<(), Error>;
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

/// `base..head` along `head`'s first parents, as a pull request is judged
/// (`history::check`).
#[derive(Clone, Debug, Default)]
pub struct Fork {
    /// Oldest first.
    pub commits: Vec<CommitInfo>,
    /// Where the walk stopped: the newest commit of `head`'s first-parent
    /// line that `base` contains (`base` itself when `head` extends it
    /// along its first parents; where the branch forked when it did not,
    /// even when it merged `base` in since); `None` when the line reaches a
    /// root first.
    pub stop: Option<Oid>,
    /// Merges of the range that bring in work `base` contains and their
    /// first parent lacks (the target merged into the branch: GitHub's
    /// "Update branch", `git pull`), each with that parent: what such a
    /// merge brings to the target is itself against that parent's tree.
    pub updates: HashMap<Oid, Oid>,
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
pub fn load_certificates() -> Result<(), Error> {
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
    /// A partial clone: a missing object is one it left on the server.
    partial: bool,
}

/// A revision resolved to what can be judged from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    Commit(Oid),
    /// A bare tree (e.g. the empty tree), usable as a starting baseline.
    Tree(Oid),
}

impl GitRepo {
    pub fn open(path: &Path) -> Result<Self, Error> {
        // libgit2 re-hashes every object it reads; git itself trusts its
        // object database (integrity is checked when objects arrive, on
        // fetch). Skipping the re-hash halves the cost of a small check.
        git2::opts::strict_hash_verification(false);
        let repo = Repository::open(path).map_err(|e| Error::Open {
            path: path.to_owned(),
            why: match e.code() {
                git2::ErrorCode::NotFound => "no repository there; name a work tree or a bare repository (`git clone` one first)".into(),
                _ => "it cannot be read; check its permissions, or run `git fsck` there".into(),
            },
        })?;
        let shallow = shallow_boundary(repo.commondir()).map_err(|e| Error::Io {
            what: format!(
                "cannot read the shallow boundary of Git repository {}",
                path.display()
            ),
            source: e,
        })?;
        // A graft cuts or rewrites history for libgit2 as for old gits: a
        // range judged through one is judged across a cut (the floors
        // before it unseen), which "history must be whole" refuses.
        let grafts = std::fs::read(repo.commondir().join("info/grafts")).unwrap_or_default();
        if grafts.iter().any(|b| !b.is_ascii_whitespace()) {
            return Err(Error::Open {
                path: path.to_owned(),
                why: "it has grafts ($GIT_DIR/info/grafts), which cut or rewrite its history, and lockstep judges only whole history; remove the file (`git replace --convert-graft-file` keeps them as replace refs, which lockstep does not follow)".into(),
            });
        }
        let partial = repo.config().is_ok_and(|c| {
            c.get_string("extensions.partialclone").is_ok()
                || c.entries(Some(r"remote\..*\.promisor"))
                    .is_ok_and(|mut e| e.next().is_some())
        });
        Ok(Self {
            repo,
            path: path.to_owned(),
            shallow,
            partial,
        })
    }

    /// Where the repository was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// libgit2's error while doing `what`, in our words
    /// ([`Error::classify`]).
    fn fail(&self, what: impl Into<String>) -> impl FnOnce(git2::Error) -> Error + '_ {
        let what = what.into();
        move |e| match Error::classify(&e, what, &self.path) {
            Error::NotFound { what, .. } if self.partial => Error::Partial {
                what,
                path: self.path.clone(),
            },
            other => other,
        }
    }

    /// Whether `id` is a commit whose parents this clone does not have.
    pub fn is_shallow_boundary(&self, id: Oid) -> bool {
        self.shallow.contains(&id)
    }

    pub fn raw(&self) -> &Repository {
        &self.repo
    }

    /// Whether `commit` descends from `ancestor` (false when either is
    /// missing).
    pub fn descends_from(&self, commit: Oid, ancestor: Oid) -> bool {
        self.repo
            .graph_descendant_of(commit, ancestor)
            .unwrap_or(false)
    }

    pub fn resolve(&self, rev: &str) -> Result<Resolved, Error> {
        let unknown = |why: String| Error::UnknownRevision {
            rev: rev.to_owned(),
            path: self.path.clone(),
            why,
        };
        // A full id names that object or nothing: revparse would fall back
        // to a ref of that name when the object is missing.
        let full =
            (rev.len() == 40 || rev.len() == 64) && rev.bytes().all(|b| b.is_ascii_hexdigit());
        if !full && let Some(refs) = self.ambiguous_refs(rev) {
            return Err(unknown(format!(
                "it names more than one ref ({}), which point at different commits; give the full ref name",
                refs.join(", ")
            )));
        }
        let found = if full {
            Oid::from_str(rev).and_then(|id| self.repo.find_object(id, None))
        } else {
            self.repo.revparse_single(rev)
        };
        let obj = found.map_err(|e| {
            let why = match e.code() {
                git2::ErrorCode::Ambiguous => {
                    "the abbreviation names more than one object; give more of the id".to_owned()
                }
                git2::ErrorCode::NotFound | git2::ErrorCode::InvalidSpec => {
                    "no branch, tag or commit by that name".to_owned()
                }
                _ => "it cannot be read; run `git fsck` in the repository".to_owned(),
            };
            if self.shallow.is_empty() {
                unknown(why)
            } else {
                unknown(format!(
                    "{why}; this is a shallow clone, so it may lie below its cut: fetch the whole history (`git fetch --unshallow`; actions/checkout: `fetch-depth: 0`)"
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

    /// The refs a short name could mean, as git tries them (`refs/X`,
    /// `refs/tags/X`, `refs/heads/X`, `refs/remotes/X`,
    /// `refs/remotes/X/HEAD`), when more than one exists and they point at
    /// different objects. git takes the first and warns; a `--base
    /// origin/main` would then be whatever tag of that name someone pushed
    /// (tags come before remote branches), and the range judged from there.
    /// Only the name before any `^`, `~`, `:` or `@{` is looked at.
    fn ambiguous_refs(&self, rev: &str) -> Option<Vec<String>> {
        let name = rev
            .split(['^', '~', ':'])
            .next()
            .and_then(|n| n.split("@{").next())
            .filter(|n| !n.is_empty() && !n.starts_with("refs/"))?;
        let mut found: Vec<(String, Oid)> = Vec::new();
        for candidate in [
            format!("refs/{name}"),
            format!("refs/tags/{name}"),
            format!("refs/heads/{name}"),
            format!("refs/remotes/{name}"),
            format!("refs/remotes/{name}/HEAD"),
        ] {
            if let Ok(r) = self.repo.find_reference(&candidate)
                && let Ok(obj) = r.peel(ObjectType::Any)
            {
                let id = obj.peel_to_commit().map(|c| c.id()).unwrap_or(obj.id());
                found.push((candidate, id));
            }
        }
        let first = found.first()?.1;
        found
            .iter()
            .any(|(_, id)| *id != first)
            .then(|| found.into_iter().map(|(n, _)| n).collect())
    }

    pub fn commit(&self, id: Oid) -> Result<CommitInfo, Error> {
        let c = self
            .repo
            .find_commit(id)
            .map_err(self.fail(format!("commit {id}")))?;
        Ok(CommitInfo {
            id,
            tree: c.tree_id(),
            summary: String::from_utf8_lossy(c.summary_bytes().unwrap_or_default()).into_owned(),
        })
    }

    /// A commit's signature (its `gpgsig` header) with the bytes it signs
    /// (the commit object without that header), the committer's time and
    /// email; `None` for an unsigned commit.
    pub fn signature(&self, id: Oid) -> Result<Option<CommitSignature>, Error> {
        let c = self
            .repo
            .find_commit(id)
            .map_err(self.fail(format!("commit {id}")))?;
        let committer = c.committer();
        let odb = self
            .repo
            .odb()
            .map_err(self.fail(format!("the signature of commit {id}")))?;
        let raw = odb
            .read(id)
            .map_err(self.fail(format!("the signature of commit {id}")))?;
        let Some((signature, signed_data)) = split_signature(raw.data()) else {
            return Ok(None);
        };
        Ok(Some(CommitSignature {
            signature,
            signed_data,
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
        check_tree(&tree, "")?;
        Ok(tree
            .iter()
            .filter(|e| e.kind() == Some(git2::ObjectType::Blob))
            .map(|e| (String::from_utf8_lossy(e.name_bytes()).into_owned(), e.id()))
            .collect())
    }

    /// The committer's email (for an unsigned commit's refusal).
    pub fn committer_email(&self, id: Oid) -> Result<String, Error> {
        let c = self
            .repo
            .find_commit(id)
            .map_err(self.fail(format!("commit {id}")))?;
        Ok(String::from_utf8_lossy(c.committer().email_bytes()).into_owned())
    }

    /// The first parent; `None` only for a real root. A shallow clone's
    /// cut is an error ([`Error::Shallow`]), never a root.
    pub fn first_parent(&self, id: Oid) -> Result<Option<Oid>, Error> {
        if self.shallow.contains(&id) {
            return Err(Error::Shallow {
                path: self.path.clone(),
                commit: id,
            });
        }
        let c = self
            .repo
            .find_commit(id)
            .map_err(self.fail(format!("commit {id}")))?;
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
    ) -> Result<Vec<CommitInfo>, Error> {
        self.first_parent_fork(base, head).map(|f| f.commits)
    }

    /// [`GitRepo::first_parent_range`], where the walk stopped, and the
    /// merges of the range that bring in `base`'s work ([`Fork`]).
    pub fn first_parent_fork(&self, base: Option<Oid>, head: Oid) -> Result<Fork, Error> {
        // The commits `head` has and `base` lacks, in one walk of the
        // history (asking "is this an ancestor of base" for each commit
        // walked `base`'s history again every time: minutes for a head of
        // an unrelated history of tens of thousands of commits).
        let only = match base {
            Some(b) => {
                let fail = || self.fail(format!("the history of {head}"));
                let mut walk = self.repo.revwalk().map_err(fail())?;
                walk.push(head).map_err(fail())?;
                walk.hide(b).map_err(fail())?;
                let mut only = std::collections::HashSet::new();
                for id in walk {
                    only.insert(id.map_err(fail())?);
                }
                Some(only)
            }
            None => None,
        };
        let mut out = Vec::new();
        let mut updates = HashMap::new();
        let mut cur = Some(head);
        while let Some(id) = cur {
            if only.as_ref().is_some_and(|o| !o.contains(&id)) {
                break;
            }
            out.push(self.commit(id)?);
            cur = self.first_parent(id)?;
            if let (Some(only), Some(first)) = (&only, cur) {
                let c = self
                    .repo
                    .find_commit(id)
                    .map_err(self.fail(format!("commit {id}")))?;
                for p in c.parent_ids().skip(1) {
                    if only.contains(&p) || p == first {
                        continue;
                    }
                    let older = self
                        .repo
                        .graph_descendant_of(first, p)
                        .map_err(self.fail(format!("the history of {id}")))?;
                    if !older {
                        updates.insert(id, p);
                        break;
                    }
                }
            }
        }
        out.reverse();
        Ok(Fork {
            commits: out,
            stop: cur,
            updates,
        })
    }

    /// `base` itself when it is an ancestor of `head` (or `head`), else the
    /// merge base of the two; `base` when they share no history.
    pub fn fork_point(&self, base: Oid, head: Oid) -> Result<Oid, Error> {
        if base == head
            || self
                .repo
                .graph_descendant_of(head, base)
                .map_err(self.fail(format!("the history of {head}")))?
        {
            return Ok(base);
        }
        match self.repo.merge_base(base, head) {
            Ok(m) => Ok(m),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(base),
            Err(e) => Err(self.fail(format!("the merge base of {base} and {head}"))(e)),
        }
    }

    /// Manifest paths that differ between two trees (`None` = empty tree),
    /// restricted to `prefixes` when any are given. Cost grows with what
    /// changed: libgit2 skips subtrees whose ids are equal. Only for trees
    /// already checked (`check_tree`): git2 panics on a mode Git never
    /// writes; [`GitRepo::changed_files_walk`] checks every tree it reads.
    pub fn changed_files(
        &self,
        old: Option<Oid>,
        new: Oid,
        prefixes: &[String],
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<Change>, Error> {
        let old_tree = old
            .map(|o| self.repo.find_tree(o))
            .transpose()
            .map_err(self.fail("the baseline tree"))?;
        let new_tree = self
            .repo
            .find_tree(new)
            .map_err(self.fail(format!("tree {new}")))?;
        let mut opts = DiffOptions::new();
        opts.include_typechange(true).ignore_submodules(false);
        for p in prefixes {
            opts.pathspec(p);
        }
        let diff = self
            .repo
            .diff_tree_to_tree(old_tree.as_ref(), Some(&new_tree), Some(&mut opts))
            .map_err(self.fail(format!("the changes of tree {new}")))?;
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
            let (old, new) = (side(delta.old_file()), side(delta.new_file()));
            if !selected(
                &path,
                gitlink(&old) || gitlink(&new),
                symlink(&old) || symlink(&new),
                prefixes,
                &wanted,
            ) {
                continue;
            }
            out.push(Change { path, old, new });
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
    ) -> Result<Vec<Change>, Error> {
        let tree = |id: Oid| {
            self.repo
                .find_tree(id)
                .map_err(self.fail(format!("tree {id}")))
        };
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
    ) -> Result<(), Error> {
        use std::collections::BTreeMap;
        type Side = (Oid, i32);
        // Keyed by the names' bytes: a file lockstep never reads may have a
        // name that is not UTF-8 (`check_tree` allows it), and read lossily
        // it could take the place of a directory spelled with U+FFFD.
        let mut both: BTreeMap<&[u8], (Option<Side>, Option<Side>)> = BTreeMap::new();
        let entries = |t: Option<&git2::Tree<'_>>| -> Vec<(Vec<u8>, Side)> {
            t.map(|t| {
                t.iter()
                    .map(|e| (e.name_bytes().to_vec(), (e.id(), e.filemode())))
                    .collect()
            })
            .unwrap_or_default()
        };
        for t in [old, new].into_iter().flatten() {
            check_tree(t, dir)?;
        }
        let old_entries = entries(old);
        let new_entries = entries(new);
        for (name, side) in &old_entries {
            both.entry(name.as_slice()).or_default().0 = Some(*side);
        }
        for (name, side) in &new_entries {
            both.entry(name.as_slice()).or_default().1 = Some(*side);
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
            // Exact for every name that can be read (`check_tree`).
            let path = format!("{dir}{}", String::from_utf8_lossy(name));
            if is_tree(&o) || is_tree(&n) {
                let sub = format!("{path}/");
                // Only directories a prefix lies in, or under one.
                let relevant = prefixes.is_empty()
                    || prefixes.iter().any(|p| {
                        let p = p.trim_end_matches('/');
                        p.starts_with(&sub) || p == path || under_prefixes(&path, prefixes)
                    });
                if relevant {
                    let load = |s: &Option<Side>| -> Result<Option<git2::Tree<'_>>, Error> {
                        match s {
                            Some((id, 0o040000)) => self
                                .repo
                                .find_tree(*id)
                                .map(Some)
                                .map_err(self.fail(format!("tree {id}"))),
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
            if (of.is_some() || nf.is_some())
                && selected(
                    &path,
                    gitlink(&of) || gitlink(&nf),
                    symlink(&of) || symlink(&nf),
                    prefixes,
                    wanted,
                )
            {
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
    ) -> Result<Vec<(String, Entry)>, Error> {
        let tree = self
            .repo
            .find_tree(tree)
            .map_err(self.fail(format!("tree {tree}")))?;
        let mut out = Vec::new();
        self.files_under(&tree, "", prefixes, &wanted, &mut out)?;
        Ok(out)
    }

    fn files_under(
        &self,
        tree: &git2::Tree<'_>,
        dir: &str,
        prefixes: &[String],
        wanted: &dyn Fn(&str) -> bool,
        out: &mut Vec<(String, Entry)>,
    ) -> Result<(), Error> {
        check_tree(tree, dir)?;
        for entry in tree.iter() {
            // Exact for directories and manifests (`check_tree`); another
            // file's lossy name is never wanted.
            let name = String::from_utf8_lossy(entry.name_bytes());
            let path = format!("{dir}{name}");
            let kind = match entry.filemode() {
                0o120000 => EntryKind::Symlink,
                0o160000 => EntryKind::Submodule,
                0o040000 => {
                    let sub = format!("{path}/");
                    let relevant = prefixes.is_empty()
                        || prefixes.iter().any(|p| {
                            let p = p.trim_end_matches('/');
                            p.starts_with(&sub) || p == path || under_prefixes(&path, prefixes)
                        });
                    if relevant {
                        let t = self
                            .repo
                            .find_tree(entry.id())
                            .map_err(self.fail(format!("tree {}", entry.id())))?;
                        self.files_under(&t, &sub, prefixes, wanted, out)?;
                    }
                    continue;
                }
                _ => EntryKind::File,
            };
            if selected(
                &path,
                kind == EntryKind::Submodule,
                kind == EntryKind::Symlink,
                prefixes,
                wanted,
            ) {
                out.push((
                    path,
                    Entry {
                        oid: entry.id(),
                        kind,
                    },
                ));
            }
        }
        Ok(())
    }

    /// The entries of one tree, in Git's order: name, id and file mode.
    pub fn tree_entries(&self, tree: Oid) -> Result<Vec<(String, Oid, i32)>, Error> {
        let t = self
            .repo
            .find_tree(tree)
            .map_err(self.fail(format!("tree {tree}")))?;
        check_tree(&t, "")?;
        Ok(t.iter()
            .map(|e| {
                (
                    String::from_utf8_lossy(e.name_bytes()).into_owned(),
                    e.id(),
                    e.filemode(),
                )
            })
            .collect())
    }

    /// The Git directory shared by all worktrees (where objects live).
    pub fn common_dir(&self) -> &Path {
        self.repo.commondir()
    }

    /// Whether `path` in a tree can select manifests: a directory, or a
    /// regular file named like one. A symbolic link, a submodule or another
    /// file selects nothing, and a filter that selects nothing judges
    /// nothing.
    pub fn selects_manifests(&self, tree: Oid, path: &str) -> Result<bool, Error> {
        let tree = self
            .repo
            .find_tree(tree)
            .map_err(self.fail(format!("tree {tree}")))?;
        if path.is_empty() {
            return Ok(true);
        }
        Ok(tree
            .get_path(Path::new(path))
            .is_ok_and(|e| match e.filemode() {
                0o040000 => true,
                0o100644 | 0o100755 => crate::manifest::is_manifest_path(path),
                _ => false,
            }))
    }

    pub fn blob(&self, oid: Oid) -> Result<git2::Blob<'_>, Error> {
        self.repo
            .find_blob(oid)
            .map_err(self.fail(format!("blob {oid}")))
    }
}

impl Store for GitRepo {
    fn commit(&self, id: Oid) -> Result<CommitInfo, Error> {
        GitRepo::commit(self, id)
    }

    fn entry_at(&self, commit: Oid, path: &str) -> Result<Entry, Error> {
        let c = self
            .repo
            .find_commit(commit)
            .map_err(self.fail(format!("commit {commit}")))?;
        let tree = c
            .tree()
            .map_err(self.fail(format!("the tree of commit {commit}")))?;
        let entry = tree.get_path(Path::new(path)).map_err(|e| match e.code() {
            git2::ErrorCode::NotFound => Error::NotFound {
                what: format!("{path:?}"),
                place: format!("commit {commit} of {}", self.path.display()),
            },
            _ => Error::classify(&e, format!("{path:?} at commit {commit}"), &self.path),
        })?;
        let kind = match entry.filemode() {
            0o120000 => EntryKind::Symlink,
            0o160000 => EntryKind::Submodule,
            0o040000 => {
                return Err(Error::NotFound {
                    what: format!("a file {path:?} (it is a directory)"),
                    place: format!("commit {commit} of {}", self.path.display()),
                });
            }
            _ => EntryKind::File,
        };
        Ok(Entry {
            oid: entry.id(),
            kind,
        })
    }

    fn read_blob(&self, id: Oid) -> Result<Vec<u8>, Error> {
        Ok(self.blob(id)?.content().to_vec())
    }

    fn first_parent_range(&self, base: Option<Oid>, head: Oid) -> Result<Vec<CommitInfo>, Error> {
        GitRepo::first_parent_range(self, base, head)
    }

    fn write_commit(&self, new: &NewCommit<'_>) -> Result<Oid, Error> {
        let parent = self
            .repo
            .find_commit(new.parent)
            .map_err(self.fail(format!("commit {}", new.parent)))?;
        write_commit(
            &self.repo,
            &parent,
            new.tree,
            new.message,
            new.author,
            new.signing_key,
        )
    }

    fn push(&self, to: &crate::source::PushTarget, branch: &str, force: bool) -> Result<(), Error> {
        let errs = std::cell::RefCell::new(None);
        let pushed = push(&self.repo, to.url(), branch, force, to.callbacks(&errs));
        match (pushed, errs.into_inner()) {
            (Ok(()), _) => Ok(()),
            // What a callback refused (a token, a host key) says more.
            (Err(_), Some(found)) => Err(Error::Remote(Box::new(found))),
            (Err(e), None) => Err(e),
        }
    }
}

/// Writes (but does not point any ref at) the commit of `tree_id` on
/// `parent`, authored and committed by `author`. With `signing_key` (an
/// OpenSSH private key file, or a public key whose private half is in
/// ssh-agent) the commit carries git's SSH signature (`gpgsig`, made by
/// `ssh-keygen -Y sign -n git`), so branch protection that requires signed
/// commits accepts it.
pub fn write_commit(
    repo: &Repository,
    parent: &git2::Commit<'_>,
    tree_id: Oid,
    message: &str,
    author: &Author,
    signing_key: Option<&Path>,
) -> Result<Oid, Error> {
    let path = repo.path();
    let fail = |what: &str| {
        let what = what.to_owned();
        move |e: git2::Error| Error::classify(&e, what, path)
    };
    let tree = repo
        .find_tree(tree_id)
        .map_err(fail(&format!("tree {tree_id}")))?;
    let sig =
        git2::Signature::now(&author.name, &author.email).map_err(fail("the author signature"))?;
    let buffer = repo
        .commit_create_buffer(&sig, &sig, message, &tree, &[parent])
        .map_err(fail("formatting the commit"))?;
    let content = buffer
        .as_str()
        .map_err(fail("formatting the commit (author or message not UTF-8)"))?;
    let commit = match signing_key {
        Some(key) => {
            let signature = ssh_sign(content, key)?;
            repo.commit_signed(content, &signature, Some("gpgsig"))
                .map_err(fail("writing the signed commit"))?
        }
        None => repo
            .odb()
            .and_then(|odb| odb.write(ObjectType::Commit, content.as_bytes()))
            .map_err(fail("writing the commit"))?,
    };
    Ok(commit)
}

/// Signs `content` the way `git commit -S` with `gpg.format=ssh` does: the
/// payload in a file, `ssh-keygen -Y sign -n git -f KEY FILE`, the armored
/// signature from `FILE.sig`. No prompt can appear (no terminal input, no
/// askpass): a daemon cannot answer one, so a passphrase-protected key
/// fails here instead of hanging.
fn ssh_sign(content: &str, key: &Path) -> Result<String, Error> {
    use std::process::{Command, Stdio};
    let fail = |why: String| Error::Sign {
        key: key.to_owned(),
        why,
    };
    let dir =
        tempfile::tempdir().map_err(|e| fail(format!("creating a temporary directory: {e}")))?;
    let payload = dir.path().join("commit");
    std::fs::write(&payload, content).map_err(|e| fail(format!("writing the payload: {e}")))?;
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", "git", "-f"])
        .arg(key)
        .arg(&payload)
        .stdin(Stdio::null())
        .env("SSH_ASKPASS_REQUIRE", "never")
        .output()
        .map_err(|e| fail(format!("running ssh-keygen: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(fail(format!(
            "ssh-keygen -Y sign failed ({}): {}",
            out.status,
            stderr.trim()
        )));
    }
    let signature = std::fs::read_to_string(dir.path().join("commit.sig"))
        .map_err(|e| fail(format!("reading the signature: {e}")))?;
    if !signature.starts_with("-----BEGIN SSH SIGNATURE-----") {
        return Err(fail("ssh-keygen wrote no SSH signature".into()));
    }
    // The file ends with a newline; kept, it became a blank continuation
    // line of the `gpgsig` header that git does not write.
    Ok(signature.trim_end().to_owned())
}

/// Pushes `refs/heads/<branch>` to `remote` (a configured remote's name, or
/// a URL or path). Not forced, a push the remote does not take (it moved
/// on) is [`Error::Refused`]; forced, whatever the remote had there is
/// replaced (only for branches lockstep owns).
///
/// `callbacks` carries the caller's credentials; its
/// `push_update_reference` callback is replaced, because that is where the
/// server says whether it took the ref. Credentials in `remote` never reach
/// an error ([`redact`]).
pub fn push(
    repo: &Repository,
    remote: &str,
    branch: &str,
    force: bool,
    mut callbacks: git2::RemoteCallbacks<'_>,
) -> Result<(), Error> {
    use std::cell::RefCell;
    use std::rc::Rc;
    let refname = format!("refs/heads/{branch}");
    if !git2::Reference::is_valid_name(&refname) {
        return Err(Error::Refused {
            what: format!("pushing branch {branch:?}"),
            why: "it is not a valid branch name".into(),
        });
    }
    let shown = redact(remote);
    let what = format!("pushing {refname} to {shown}");
    let mut handle = remote_for_push(repo, remote)
        .map_err(|e| Error::classify(&e, format!("remote {shown}"), repo.path()))?;
    let refused: Rc<RefCell<Option<String>>> = Rc::new(RefCell::new(None));
    let slot = Rc::clone(&refused);
    callbacks.push_update_reference(move |_name, status| {
        if let Some(s) = status {
            *slot.borrow_mut() = Some(s.to_owned());
        }
        Ok(())
    });
    let mut opts = git2::PushOptions::new();
    opts.remote_callbacks(callbacks);
    let spec = format!("{}{refname}:{refname}", if force { "+" } else { "" });
    handle
        .push(&[spec.as_str()], Some(&mut opts))
        .map_err(|e| Error::classify(&e, what.clone(), repo.path()))?;
    if let Some(status) = refused.borrow_mut().take() {
        return Err(Error::Refused {
            what,
            why: redact(&status),
        });
    }
    Ok(())
}

/// A remote by name or by URL, to push to (and to fetch from before a
/// push, as the notes do: what is merged is what is there). A named
/// remote's push URL is used when it has one. A relative path
/// (`../fleet.git`, as a remote's URL or given as one) is taken from the
/// top of the work tree (a bare repository's Git directory), and `~/` from
/// the home directory, as `git push` takes them; libgit2 would take them
/// from wherever lockstep was started, and push to another repository or
/// to none. (Of several push URLs, as with libgit2, one is used.)
pub fn remote_for_push<'r>(
    repo: &'r Repository,
    name_or_url: &str,
) -> Result<git2::Remote<'r>, git2::Error> {
    match repo.find_remote(name_or_url) {
        Ok(r) => {
            let push = match r.pushurl() {
                Ok(Some(u)) => Some(u.to_owned()),
                _ => None,
            };
            let url = push.clone().or_else(|| r.url().ok().map(str::to_owned));
            match (url.and_then(|u| resolve_relative(repo, &u)), push) {
                (Some(resolved), _) => repo.remote_anonymous(&resolved),
                (None, Some(push)) => repo.remote_anonymous(&push),
                (None, None) => Ok(r),
            }
        }
        Err(_) => match resolve_relative(repo, name_or_url) {
            Some(resolved) => repo.remote_anonymous(&resolved),
            None => repo.remote_anonymous(name_or_url),
        },
    }
}

/// A remote URL that is a relative local path, made absolute against the
/// top of the work tree (a bare repository's Git directory), or `~/...`
/// against the home directory; `None` for anything else (a URL with a
/// scheme, `host:path`, an absolute path, `~user/...`).
pub fn resolve_relative(repo: &Repository, url: &str) -> Option<String> {
    if url.is_empty() || url.contains("://") || Path::new(url).is_absolute() {
        return None;
    }
    if let Some(rest) = url.strip_prefix("~/") {
        let home = std::env::var_os("HOME")?;
        return Some(Path::new(&home).join(rest).to_string_lossy().into_owned());
    }
    if url.starts_with('~') {
        return None;
    }
    // scp-like `host:path`: a colon before any slash, as git decides.
    if let Some((before, _)) = url.split_once(':')
        && !before.is_empty()
        && !before.contains('/')
    {
        return None;
    }
    let base = repo.workdir().unwrap_or_else(|| repo.path());
    Some(base.join(url).to_string_lossy().into_owned())
}

/// Drops `user:password@` from anything URL-like, so errors can be logged.
pub fn redact(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`'))
            .unwrap_or(tail.len());
        let (url, after) = tail.split_at(end);
        // Up to the URL's last `@`: userinfo, also a password whose `/` or
        // `?` ended the authority early. Then no query (`?access_token=`).
        let url = match url.rfind('@') {
            Some(at) => {
                out.push_str("<redacted>@");
                &url[at + 1..]
            }
            None => url,
        };
        match url.find(['?', '#']) {
            Some(q) => {
                out.push_str(&url[..q]);
                out.push_str("?…");
            }
            None => out.push_str(url),
        }
        rest = after;
    }
    out.push_str(rest);
    out
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
pub fn normalize_prefix(raw: &str) -> Result<String, Error> {
    let refuse = |why: &str| Error::Path {
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
pub fn normalize_prefixes(raw: &[String]) -> Result<Vec<String>, Error> {
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

/// A submodule (gitlink) is returned under the selected paths whatever its
/// name: a tool that clones submodules (Argo CD does, Flux on request)
/// would apply the manifests behind it, which lockstep never sees, so the
/// gate must get the chance to refuse it.
fn gitlink(e: &Option<Entry>) -> bool {
    e.as_ref().is_some_and(|e| e.kind == EntryKind::Submodule)
}

/// Whether a gitlink at `path` is lockstep's business: under a selected
/// path, or in place of a directory one lies in (`clusters` turned into a
/// submodule under `--path clusters/prod`: Argo CD would apply its
/// `prod/`).
fn gitlink_selected(path: &str, prefixes: &[String]) -> bool {
    under_prefixes(path, prefixes)
        || prefixes.iter().any(|p| {
            p.trim_end_matches('/')
                .strip_prefix(path)
                .is_some_and(|rest| rest.starts_with('/'))
        })
}

fn symlink(e: &Option<Entry>) -> bool {
    e.as_ref().is_some_and(|e| e.kind == EntryKind::Symlink)
}

/// Whether `path` is a selected path itself or a directory one lies in:
/// `clusters` or `clusters/prod` under `--path clusters/prod`.
fn at_or_above_prefix(path: &str, prefixes: &[String]) -> bool {
    prefixes.iter().any(|p| {
        let p = p.trim_end_matches('/');
        p == path
            || p.strip_prefix(path)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// A path the walks return: a wanted file under the selected paths, a
/// gitlink lockstep must see ([`gitlink_selected`]), or a symbolic link,
/// whatever its name, at a selected path or in place of a directory one
/// lies in (`clusters` made a link to `other` under `--path
/// clusters/prod`): whatever reads the path from a checkout (kubectl,
/// Argo CD's application path, Flux's kustomization path) follows it to
/// files lockstep never judged there. The gate refuses both.
fn selected(
    path: &str,
    is_gitlink: bool,
    is_symlink: bool,
    prefixes: &[String],
    wanted: &dyn Fn(&str) -> bool,
) -> bool {
    if is_gitlink {
        gitlink_selected(path, prefixes)
    } else if is_symlink && at_or_above_prefix(path, prefixes) {
        true
    } else if crate::manifest::is_attributes(path) {
        // It governs every file below its directory, judged or not.
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        dir.is_empty() || at_or_above_prefix(dir, prefixes) || under_prefixes(path, prefixes)
    } else {
        wanted(path) && under_prefixes(path, prefixes)
    }
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

/// A name as it can be shown and compared: UTF-8 as it is, any other byte
/// as `\xNN`.
pub fn shown_name(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Checks one tree's entries as `git fsck` does for the three faults that
/// let two readers see different files (`Error::MalformedTree`): names must
/// be UTF-8, unique, and in Git's order (bytes, a directory's name compared
/// as if it ended in `/`). `dir` is the tree's path, ending in `/` or empty.
fn check_tree(tree: &git2::Tree<'_>, dir: &str) -> Result<(), Error> {
    // One buffer for the names (a whole tree is thousands of entries).
    let mut names = Vec::new();
    let mut spans = Vec::with_capacity(tree.len());
    // A mode Git never writes: libgit2 reads it by its execute bits
    // (`120755` a plain executable file), git by its type bits (a link, a
    // submodule), so lockstep would judge another entry than the one a
    // checkout makes. `100664` is an old Git's plain file, read alike.
    let mut odd_mode = None;
    for e in tree.iter() {
        let start = names.len();
        names.extend_from_slice(e.name_bytes());
        let raw = e.filemode_raw();
        if odd_mode.is_none()
            && !matches!(
                raw,
                0o100644 | 0o100755 | 0o100664 | 0o120000 | 0o040000 | 0o160000
            )
        {
            odd_mode = Some((start, names.len(), raw));
        }
        spans.push((start, names.len(), e.filemode() == 0o040000));
    }
    let entries: Vec<(&[u8], bool)> = spans
        .iter()
        .map(|&(a, b, dir)| (&names[a..b], dir))
        .collect();
    let bad = |name: &[u8], why: &str| Error::MalformedTree {
        path: format!("{dir}{}", shown_name(name)),
        why: format!(
            "{why}; Git never writes such a tree (`git fsck` reports it), and lockstep cannot be sure which file it would judge: rewrite the commit without it"
        ),
    };
    if let Some((a, b, raw)) = odd_mode {
        return Err(bad(
            &names[a..b],
            &format!(
                "its mode {raw:o} is none Git writes (100644 or 100755 a file, 120000 a symbolic link, 040000 a directory, 160000 a submodule): Git and libgit2 read it as different kinds of entry"
            ),
        ));
    }
    for (i, (name, is_dir)) in entries.iter().enumerate() {
        // A name lockstep never reads (a `résumé.txt` in Latin-1) may be
        // anything; a directory or a manifest must be read by one name.
        if std::str::from_utf8(name).is_err()
            && (*is_dir || crate::manifest::is_manifest_path(&String::from_utf8_lossy(name)))
        {
            return Err(bad(name, "the name is not UTF-8"));
        }
        if let Some((prev, prev_dir)) = i.checked_sub(1).map(|j| entries[j]) {
            match git_order(prev, prev_dir, name, *is_dir) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    return Err(bad(name, "the name appears twice in its directory"));
                }
                std::cmp::Ordering::Greater => {
                    return Err(bad(
                        name,
                        "the entries of its directory are not in Git's order",
                    ));
                }
            }
        }
    }
    // In order, so the only copies left are a file and a directory of one
    // name, apart in Git's order (`a.yaml`, `a.yaml.bak`, `a.yaml/`): each
    // directory's name is looked up as a file's.
    for (name, _) in entries.iter().filter(|(_, dir)| *dir) {
        if entries
            .binary_search_by(|(n, dir)| git_order(n, *dir, name, false))
            .is_ok()
        {
            return Err(bad(name, "the name appears twice in its directory"));
        }
    }
    Ok(())
}

/// Git's order of tree entries: by bytes, a directory's name compared as
/// if followed by `/`.
fn git_order(a: &[u8], a_dir: bool, b: &[u8], b_dir: bool) -> std::cmp::Ordering {
    let tail = |dir: bool| if dir { Some(b'/') } else { None };
    a.iter()
        .copied()
        .chain(tail(a_dir))
        .cmp(b.iter().copied().chain(tail(b_dir)))
}

/// A raw commit object's `gpgsig` header (its continuation lines unfolded)
/// and the bytes it signs: the object without that header. Only the header
/// is searched, which ends at the first empty line, as git does
/// (`git verify-commit`): libgit2's `extract_signature` reads on into the
/// message, so a signature pasted there made an unsigned commit look signed
/// by whoever signed the commit it was copied from. Several `gpgsig`
/// headers are joined, as git joins them (and such a signature then fails
/// to verify). A `gpgsig-sha256` header (the signature over the commit as a
/// SHA-256 repository would write it) is left out of the signed bytes as
/// git leaves it, and is not this repository's signature.
pub fn split_signature(raw: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let header_end = raw
        .windows(2)
        .position(|w| w == b"\n\n")
        .map_or(raw.len(), |i| i + 1);
    let (header, rest) = raw.split_at(header_end);
    let mut signature = Vec::new();
    let mut signed = Vec::with_capacity(raw.len());
    // In a signature header: ours (`gpgsig`, this SHA-1 repository's), or
    // another (`gpgsig-sha256`, the other object format's, or any header
    // starting `gpgsig`), which git also leaves out of the signed bytes.
    let mut in_signature: Option<bool> = None;
    let mut found = false;
    for line in header.split_inclusive(|&b| b == b'\n') {
        if let Some(value) = line.strip_prefix(b"gpgsig ") {
            in_signature = Some(true);
            found = true;
            signature.extend_from_slice(value);
        } else if line.starts_with(b"gpgsig") {
            // `gpgsig-sha256`, or any other `gpgsig…` header, as git's
            // `parse_buffer_signed_by_header` leaves them out.
            in_signature = Some(false);
        } else if in_signature.is_some() && line.first() == Some(&b' ') {
            if in_signature == Some(true) {
                signature.extend_from_slice(&line[1..]);
            }
        } else {
            in_signature = None;
            signed.extend_from_slice(line);
        }
    }
    signed.extend_from_slice(rest);
    found.then_some((signature, signed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit holding `a.yaml`; its path, the commit
    /// and the blob.
    fn one_commit() -> (tempfile::TempDir, Oid, Oid) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let blob = repo.blob(b"kind: Nova\n").unwrap();
        let mut tb = repo.treebuilder(None).unwrap();
        tb.insert("a.yaml", blob, 0o100644).unwrap();
        let tree = repo.find_tree(tb.write().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let c = repo
            .commit(Some("HEAD"), &sig, &sig, "one", &tree, &[])
            .unwrap();
        (dir, c, blob)
    }

    #[test]
    fn a_full_id_names_its_object_never_a_ref_of_that_name() {
        let (dir, c, _) = one_commit();
        let raw = Repository::open(dir.path()).unwrap();
        let missing = "0123456789abcdef0123456789abcdef01234567";
        raw.branch(missing, &raw.find_commit(c).unwrap(), false)
            .unwrap();
        let repo = GitRepo::open(dir.path()).unwrap();
        assert!(
            repo.resolve(missing).is_err(),
            "a branch stood in for a missing id"
        );
        assert!(matches!(repo.resolve(&c.to_string()), Ok(Resolved::Commit(id)) if id == c));
        // Names still resolve as names.
        assert!(matches!(repo.resolve("HEAD"), Ok(Resolved::Commit(id)) if id == c));
    }

    #[test]
    fn both_signature_headers_are_left_out_of_the_signed_bytes() {
        let raw = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\ngpgsig -----BEGIN SSH SIGNATURE-----\n ours\n -----END SSH SIGNATURE-----\ngpgsig-sha256 -----BEGIN SSH SIGNATURE-----\n theirs\n -----END SSH SIGNATURE-----\n\nmessage\n";
        let (signature, signed) = split_signature(raw).unwrap();
        assert_eq!(
            signature,
            b"-----BEGIN SSH SIGNATURE-----\nours\n-----END SSH SIGNATURE-----\n"
        );
        assert_eq!(
            String::from_utf8(signed).unwrap(),
            "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\n\nmessage\n"
        );
        // The other format's signature alone signs nothing here.
        let only_theirs =
            b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ngpgsig-sha256 x\n y\n\nm\n";
        assert!(split_signature(only_theirs).is_none());
    }

    #[test]
    fn a_relative_remote_path_is_taken_from_the_top_of_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let work = Repository::init(dir.path().join("w")).unwrap();
        let bare = Repository::init_bare(dir.path().join("b.git")).unwrap();
        let top = work.workdir().unwrap().to_path_buf();
        let resolved = |url: &str| resolve_relative(&work, url);
        assert_eq!(
            resolved("../up.git"),
            Some(top.join("../up.git").to_string_lossy().into_owned())
        );
        assert_eq!(
            resolved("up.git"),
            Some(top.join("up.git").to_string_lossy().into_owned())
        );
        // A bare repository's paths are taken from its Git directory.
        assert_eq!(
            resolve_relative(&bare, "../up.git"),
            Some(bare.path().join("../up.git").to_string_lossy().into_owned())
        );
        // Everything else stays as it is.
        for url in [
            "",
            "/srv/git/fleet.git",
            "https://git.example/o/fleet.git",
            "file:///srv/git/fleet.git",
            "ssh://git@git.example/o/fleet.git",
            "git@git.example:o/fleet.git",
            "git.example:fleet.git",
        ] {
            assert_eq!(resolved(url), None, "{url}");
        }
        // A path whose first part holds a colon after a slash is a path.
        assert!(resolved("./a:b/fleet.git").is_some());
        // `~/` is the home directory, as git takes it; `~user` is left.
        if let Some(home) = std::env::var_os("HOME") {
            assert_eq!(
                resolved("~/fleet.git"),
                Some(
                    Path::new(&home)
                        .join("fleet.git")
                        .to_string_lossy()
                        .into_owned()
                )
            );
        }
        assert_eq!(resolved("~alice/fleet.git"), None);
    }

    /// No libgit2 phrasing ("class=", "code=", its own words) in what a
    /// person reads, source chain included.
    fn ours(e: &Error) -> String {
        let mut text = e.to_string();
        assert!(!text.contains("class="), "{text}");
        assert!(!text.contains("code="), "{text}");
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        assert!(
            !text.contains("class=") && !text.contains("code="),
            "{text}"
        );
        text
    }

    #[test]
    fn a_missing_commit_is_named_with_the_repository() {
        let (dir, _, _) = one_commit();
        let repo = GitRepo::open(dir.path()).unwrap();
        let missing = Oid::from_str("1234567890123456789012345678901234567890").unwrap();
        let e = repo.commit(missing).unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
        let text = ours(&e);
        assert!(
            text.contains("commit 1234567890123456789012345678901234567890"),
            "{text}"
        );
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        assert!(text.contains("fetch"), "{text}");
        let e = Store::first_parent_range(&repo, None, missing).unwrap_err();
        assert!(ours(&e).contains("1234567890"), "{e}");
    }

    #[test]
    fn a_missing_path_names_the_path_and_the_commit() {
        let (dir, head, blob) = one_commit();
        let repo = GitRepo::open(dir.path()).unwrap();
        let e = repo.entry_at(head, "standalone/nova.yaml").unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
        let text = ours(&e);
        assert!(text.contains("\"standalone/nova.yaml\""), "{text}");
        assert!(text.contains(&format!("commit {head}")), "{text}");
        let found = repo.entry_at(head, "a.yaml").unwrap();
        assert_eq!(found.oid, blob);
        assert_eq!(repo.read_blob(found.oid).unwrap(), b"kind: Nova\n");
    }

    #[test]
    fn an_unknown_revision_and_a_missing_repository_say_what_to_do() {
        let (dir, _, _) = one_commit();
        let repo = GitRepo::open(dir.path()).unwrap();
        let e = repo.resolve("no-such-branch").unwrap_err();
        let text = ours(&e);
        assert!(
            text.contains("\"no-such-branch\"") && text.contains("no branch, tag or commit"),
            "{text}"
        );
        let empty = tempfile::tempdir().unwrap();
        let e = GitRepo::open(&empty.path().join("fleet")).err().unwrap();
        let text = ours(&e);
        assert!(
            text.contains("fleet") && text.contains("no repository there"),
            "{text}"
        );
    }

    #[test]
    fn a_corrupt_object_says_the_repository_is_damaged() {
        let (dir, _, blob) = one_commit();
        let hex = blob.to_string();
        let loose = dir
            .path()
            .join(".git/objects")
            .join(&hex[..2])
            .join(&hex[2..]);
        let mut perms = std::fs::metadata(&loose).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&loose, perms).unwrap();
        std::fs::write(&loose, b"not zlib at all").unwrap();
        let repo = GitRepo::open(dir.path()).unwrap();
        let e = repo.read_blob(blob).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
        let text = ours(&e);
        assert!(text.contains(&format!("blob {blob}")), "{text}");
        assert!(text.contains("git fsck"), "{text}");
    }

    #[test]
    fn push_errors_carry_no_credentials() {
        let (dir, _, _) = one_commit();
        let repo = Repository::open(dir.path()).unwrap();
        let e = push(
            &repo,
            "https://user:s3cret@127.0.0.1:1/fleet.git",
            "main",
            false,
            git2::RemoteCallbacks::new(),
        )
        .unwrap_err();
        let text = ours(&e);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("<redacted>@127.0.0.1:1"), "{text}");
    }

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
