//! Statuses as git notes under `refs/notes/lockstep`: the default when no Git
//! host is configured. One line per context, so every cluster's verdict and
//! every object's progress on a commit read at a glance:
//!
//! ```text
//! $ git log --notes=lockstep
//! Notes (lockstep):
//!     lockstep/prod: failure — refused: nova 2026.1→2027.1 skips 2026.2 (UpgradePathInvalid)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use git2::{Oid, Repository, Signature};

use super::{Forge, ForgeError, Limits, Posted, State, Status};

pub const NOTES_REF: &str = "refs/notes/lockstep";

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
        let mut out = BTreeMap::new();
        if let Ok(note) = repo.find_note(Some(NOTES_REF), oid)
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

    /// Pushes the notes to `remote` (the watched branch's remote). Non-forced:
    /// notes another writer pushed meanwhile are never overwritten.
    pub fn push(&self, remote: &str) -> Result<(), ForgeError> {
        let repo = self
            .repo
            .lock()
            .map_err(|_| ForgeError::Notes("notes lock poisoned".into()))?;
        let mut r = repo.find_remote(remote).map_err(err)?;
        r.push(&[format!("{NOTES_REF}:{NOTES_REF}")], None)
            .map_err(|e| {
                ForgeError::Notes(format!("pushing {NOTES_REF} to {remote}: {}", e.message()))
            })
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
        // Descriptions are one line; a newline would split the record.
        let description = status.description.replace(['\n', '\r'], " ");
        lines.insert(
            status.context.clone(),
            format!(
                "{}: {} — {description}",
                status.context,
                status.state.as_str()
            ),
        );
        let text: Vec<&str> = lines.values().map(String::as_str).collect();
        clear_stale_lock(&repo);
        let sig = repo
            .signature()
            .or_else(|_| Signature::now("lockstep", "lockstep@localhost"))
            .map_err(err)?;
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
}
