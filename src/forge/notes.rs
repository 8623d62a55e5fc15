//! Statuses as git notes under `refs/notes/lockstep`: the default when no Git
//! host is configured. One line per context, so every cluster's verdict and
//! every object's progress on a commit read at a glance:
//!
//! ```text
//! $ git log --notes=lockstep
//! Notes (lockstep):
//!     lockstep/prod: failure — refused: nova 2026.1→2027.1 skips 2026.2 (UpgradePathInvalid)
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use git2::{FetchOptions, Oid, PushOptions, RemoteCallbacks, Repository, Signature};

use super::{Forge, ForgeError, Limits, Posted, State, Status};
use crate::escape::escape;
use crate::source::{PushTarget, SourceError};

pub const NOTES_REF: &str = "refs/notes/lockstep";

/// Where the remote's notes are fetched to when a push is refused because
/// another writer (another cluster's lockstep) pushed first.
const THEIRS_REF: &str = "refs/notes/lockstep-remote";

/// Where notes are pushed: a remote named in the repository, or the
/// watched source's own remote with its credentials (a token, an ssh key).
#[derive(Clone, Debug)]
pub enum NotesRemote {
    Named(String),
    Source(PushTarget),
}

impl std::fmt::Display for NotesRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotesRemote::Named(n) => f.write_str(n),
            NotesRemote::Source(t) => f.write_str(t.location()),
        }
    }
}

pub struct Notes {
    repo: Mutex<Repository>,
    path: PathBuf,
}

fn err(e: git2::Error) -> ForgeError {
    match e.code() {
        git2::ErrorCode::Locked | git2::ErrorCode::Modified => {
            ForgeError::NotesBusy(e.message().to_owned())
        }
        _ => ForgeError::Notes(e.message().to_owned()),
    }
}

/// A notes write takes milliseconds; a lock file this old was left by a
/// writer that died mid-write (a killed replica) and would block every
/// status from now on. Git leaves such locks for a person; lockstep, which
/// is the only writer of its notes ref, removes them itself.
const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(30);

fn clear_stale_lock(repo: &Repository) {
    let lock = repo.path().join(format!("{NOTES_REF}.lock"));
    let Ok(meta) = std::fs::metadata(&lock) else {
        return;
    };
    let age = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .unwrap_or_default();
    if age >= STALE_LOCK && std::fs::remove_file(&lock).is_ok() {
        tracing::warn!(lock = %lock.display(), age_s = age.as_secs(), "removed a stale notes lock left by a writer that died");
    }
}

impl Notes {
    pub fn open(path: &Path) -> Result<Self, ForgeError> {
        let repo = Repository::open(path)
            .map_err(|e| ForgeError::Notes(format!("{}: {}", path.display(), e.message())))?;
        Ok(Self {
            repo: Mutex::new(repo),
            path: path.to_owned(),
        })
    }

    fn lines(repo: &Repository, oid: Oid) -> BTreeMap<String, String> {
        lines_in(repo, NOTES_REF, oid)
    }
}

/// A commit's note under `notes_ref`, one line per context.
fn lines_in(repo: &Repository, notes_ref: &str, oid: Oid) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(note) = repo.find_note(Some(notes_ref), oid)
        && let Ok(text) = note.message()
    {
        for line in text.lines() {
            if let Some((ctx, _)) = line.split_once(": ") {
                out.insert(ctx.to_owned(), line.to_owned());
            }
        }
    }
    out
}

/// Replaces a commit's note under lockstep's ref with `lines`.
fn write_note(
    repo: &Repository,
    oid: Oid,
    lines: &BTreeMap<String, String>,
) -> Result<(), ForgeError> {
    let text: Vec<&str> = lines.values().map(String::as_str).collect();
    let sig = signature(repo)?;
    repo.note(
        &sig,
        &sig,
        Some(NOTES_REF),
        oid,
        &(text.join("\n") + "\n"),
        true,
    )
    .map_err(err)?;
    Ok(())
}

/// The repository's identity, or lockstep's where it has none.
fn signature(repo: &Repository) -> Result<Signature<'static>, ForgeError> {
    repo.signature()
        .or_else(|_| Signature::now("lockstep", "lockstep@localhost"))
        .map_err(err)
}

/// The remote and the callbacks for one network operation on it.
fn connect<'r>(
    repo: &'r Repository,
    remote: &'r NotesRemote,
    errs: &'r RefCell<Option<SourceError>>,
) -> Result<(git2::Remote<'r>, RemoteCallbacks<'r>), ForgeError> {
    match remote {
        NotesRemote::Named(name) => Ok((
            crate::git::remote_for_push(repo, name).map_err(err)?,
            RemoteCallbacks::new(),
        )),
        NotesRemote::Source(t) => Ok((
            repo.remote_anonymous(t.url()).map_err(err)?,
            t.callbacks(errs),
        )),
    }
}

fn network_error(
    remote: &NotesRemote,
    op: &'static str,
    e: git2::Error,
    errs: &RefCell<Option<SourceError>>,
) -> ForgeError {
    let message = match remote {
        NotesRemote::Source(t) => t.explain(op, e, errs).to_string(),
        NotesRemote::Named(name) => format!("{op} {name}: {}", e.message()),
    };
    ForgeError::Notes(message)
}

/// One push; `Some(reason)` when the remote's notes moved on (refused as
/// not a fast-forward), other failures as errors.
fn try_push(repo: &Repository, remote: &NotesRemote) -> Result<Option<String>, ForgeError> {
    if repo.refname_to_id(NOTES_REF).is_err() {
        return Ok(None);
    }
    let errs = RefCell::new(None);
    let rejected: RefCell<Option<String>> = RefCell::new(None);
    let pushed = {
        let (mut r, mut callbacks) = connect(repo, remote, &errs)?;
        callbacks.push_update_reference(|_, status| {
            if let Some(s) = status {
                *rejected.borrow_mut() = Some(s.to_owned());
            }
            Ok(())
        });
        let mut opts = PushOptions::new();
        opts.remote_callbacks(callbacks);
        r.push(&[format!("{NOTES_REF}:{NOTES_REF}")], Some(&mut opts))
    };
    match pushed {
        Ok(()) => Ok(rejected.into_inner()),
        Err(e) if e.code() == git2::ErrorCode::NotFastForward => Ok(Some(e.message().to_owned())),
        Err(e) => Err(network_error(remote, "pushing notes to", e, &errs)),
    }
}

/// Fetches the remote's notes and merges them into ours: a commit with both
/// as parents, so that the next push is a fast-forward.
fn merge_theirs(repo: &Repository, remote: &NotesRemote) -> Result<(), ForgeError> {
    let errs = RefCell::new(None);
    {
        let (mut r, callbacks) = connect(repo, remote, &errs)?;
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(callbacks)
            .download_tags(git2::AutotagOption::None)
            .update_fetchhead(false);
        r.fetch(
            &[format!("+{NOTES_REF}:{THEIRS_REF}")],
            Some(&mut opts),
            None,
        )
        .map_err(|e| network_error(remote, "fetching notes from", e, &errs))?;
    }
    let Ok(theirs) = repo.refname_to_id(THEIRS_REF) else {
        return Ok(());
    };
    let ours = repo.refname_to_id(NOTES_REF).map_err(err)?;
    if ours == theirs || repo.graph_descendant_of(ours, theirs).map_err(err)? {
        return Ok(());
    }
    if repo.graph_descendant_of(theirs, ours).map_err(err)? {
        repo.reference(
            NOTES_REF,
            theirs,
            true,
            "notes: fast-forward to the remote's",
        )
        .map_err(err)?;
        return Ok(());
    }
    clear_stale_lock(repo);
    let annotated: Vec<Oid> = repo
        .notes(Some(THEIRS_REF))
        .map_err(err)?
        .filter_map(|n| n.ok().map(|(_, commit)| commit))
        .collect();
    for commit in annotated {
        let theirs_lines = lines_in(repo, THEIRS_REF, commit);
        let mut lines = lines_in(repo, NOTES_REF, commit);
        let before = lines.len();
        for (ctx, line) in theirs_lines {
            lines.entry(ctx).or_insert(line);
        }
        if lines.len() != before {
            write_note(repo, commit, &lines)?;
        }
    }
    let tip = repo
        .find_commit(repo.refname_to_id(NOTES_REF).map_err(err)?)
        .map_err(err)?;
    let their_commit = repo.find_commit(theirs).map_err(err)?;
    let tree = tip.tree().map_err(err)?;
    let sig = signature(repo)?;
    repo.commit(
        Some(NOTES_REF),
        &sig,
        &sig,
        &format!("Notes merged from {remote}"),
        &tree,
        &[&tip, &their_commit],
    )
    .map_err(err)?;
    Ok(())
}

/// The statuses per commit of `branch`'s first parents, oldest first, as
/// `git log --notes=lockstep` would show them (what a bounded `run` prints
/// at the end); every line escaped. Empty when the repository or branch
/// cannot be read.
pub fn history_text(repo: &Path, branch: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let Ok(r) = Repository::open(repo) else {
        return out;
    };
    let Ok(head) = r.revparse_single(&format!("refs/heads/{branch}")) else {
        return out;
    };
    let Ok(mut walk) = r.revwalk() else {
        return out;
    };
    let _ = walk.push(head.id());
    let _ = walk.simplify_first_parent();
    let _ = walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE);
    for id in walk.flatten() {
        let Ok(c) = r.find_commit(id) else { continue };
        let _ = writeln!(
            out,
            "{} {}",
            &id.to_string()[..10],
            escape(c.summary().ok().flatten().unwrap_or(""))
        );
        if let Ok(n) = r.find_note(Some(NOTES_REF), id) {
            for line in n.message().unwrap_or("").lines() {
                let _ = writeln!(out, "    {}", escape(line));
            }
        }
    }
    out
}

impl Notes {
    /// Pushes the notes to a named remote; see [`Notes::push_to`].
    pub fn push(&self, remote: &str) -> Result<(), ForgeError> {
        self.push_to(&NotesRemote::Named(remote.to_owned()))
    }

    /// Pushes the notes, never forced: notes another writer pushed meanwhile
    /// are never overwritten. Several clusters (each its own lockstep and
    /// its own contexts) report to one repository, so a refused push is
    /// normal: the remote's notes are fetched and merged, line by context
    /// (a context both wrote keeps ours: only this cluster writes its own),
    /// and the push is tried again.
    pub fn push_to(&self, remote: &NotesRemote) -> Result<(), ForgeError> {
        let repo = self
            .repo
            .lock()
            .map_err(|_| ForgeError::Notes("notes lock poisoned".into()))?;
        let mut refused = String::new();
        for _ in 0..4 {
            match try_push(&repo, remote)? {
                None => return Ok(()),
                Some(why) => {
                    tracing::info!(remote = %remote, reason = %why, "notes push refused; merging the remote's notes");
                    refused = why;
                    merge_theirs(&repo, remote)?;
                }
            }
        }
        Err(ForgeError::NotesBusy(format!(
            "pushing {NOTES_REF} to {remote}: still refused after merging the remote's notes: {refused}"
        )))
    }

    /// The remote of the checked-out branch (`branch.<name>.remote`), or
    /// `origin` when it exists and the branch names none.
    pub fn branch_remote(&self) -> Option<String> {
        let repo = self.repo.lock().ok()?;
        let head = repo.head().ok()?;
        let branch = head.shorthand().ok()?.to_owned();
        let config = repo.config().ok()?;
        if let Ok(r) = config.get_string(&format!("branch.{branch}.remote")) {
            return Some(r);
        }
        repo.find_remote("origin").ok().map(|_| "origin".to_owned())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn parse_line(line: &str) -> Option<Posted> {
    let (context, rest) = line.split_once(": ")?;
    let (state, description) = rest.split_once(" — ").unwrap_or((rest, ""));
    Some(Posted {
        state: state.to_owned(),
        context: context.to_owned(),
        description: description.to_owned(),
        target_url: None,
        id: None,
    })
}

impl Forge for Notes {
    fn host(&self) -> &'static str {
        "notes"
    }

    fn limits(&self) -> Limits {
        Limits {
            description: 500,
            context: 255,
        }
    }

    fn state_name(&self, state: State) -> &'static str {
        state.as_str()
    }

    fn keeps_target_url(&self) -> bool {
        false
    }

    async fn statuses(&self, sha: &str) -> Result<Vec<Posted>, ForgeError> {
        let oid = Oid::from_str(sha).map_err(err)?;
        let repo = self
            .repo
            .lock()
            .map_err(|_| ForgeError::Notes("notes lock poisoned".into()))?;
        Ok(Self::lines(&repo, oid)
            .values()
            .filter_map(|l| parse_line(l))
            .collect())
    }

    async fn post(&self, sha: &str, status: &Status) -> Result<(), ForgeError> {
        let oid = Oid::from_str(sha).map_err(err)?;
        let repo = self
            .repo
            .lock()
            .map_err(|_| ForgeError::Notes("notes lock poisoned".into()))?;
        repo.find_commit(oid)
            .map_err(|e| ForgeError::Notes(format!("commit {sha}: {}", e.message())))?;
        let mut lines = Self::lines(&repo, oid);
        // One line per context: a newline (or a carriage return, a bidi
        // override) from a file name or a release would forge another
        // cluster's line, or hide this one, in `git log --notes`.
        let context = escape(&status.context);
        lines.insert(
            context.to_string(),
            format!(
                "{context}: {} — {}",
                status.state.as_str(),
                escape(&status.description)
            ),
        );
        clear_stale_lock(&repo);
        write_note(&repo, oid, &lines)
    }
}
