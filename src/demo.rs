//! `lockstep demo`: a scripted history over the embedded example fleet,
//! judged by the real gate, so a new user sees in one command what lockstep
//! accepts and refuses and why. Nothing outside a throwaway directory is
//! touched.

use std::path::{Path, PathBuf};

use git2::{Repository, Signature, Time};
use include_dir::{Dir, include_dir};
use thiserror::Error;

use crate::git::GitRepo;
use crate::history::{CheckOptions, CheckReport, EMPTY_TREE, check};

/// The example fleet, compiled in so the demo runs from any directory.
pub static FLEET: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/examples/fleet");

#[derive(Debug, Error)]
pub enum DemoError {
    #[error("demo: {0}")]
    Git(String),
    #[error("demo: the embedded fleet no longer contains {needle:?} in {file}")]
    Script { file: String, needle: String },
    #[error(transparent)]
    Check(#[from] crate::git::GitError),
    #[error("--keep {}: directory is not empty", dir.display())]
    NotEmpty { dir: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl From<git2::Error> for DemoError {
    fn from(e: git2::Error) -> Self {
        DemoError::Git(e.message().to_owned())
    }
}

/// Where an example repository is built: `keep` (created if missing, and
/// refused unless empty, so nothing of a person's is overwritten), else a
/// temporary directory, removed when the returned guard drops.
pub fn workdir(keep: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>), DemoError> {
    let io = |what: String| move |source| DemoError::Io { what, source };
    match keep {
        Some(d) => {
            let used = d.exists()
                && d.read_dir()
                    .map_err(io(format!("--keep {}", d.display())))?
                    .next()
                    .is_some();
            if used {
                return Err(DemoError::NotEmpty { dir: d.to_owned() });
            }
            std::fs::create_dir_all(d).map_err(io(format!("--keep {}", d.display())))?;
            Ok((d.to_owned(), None))
        }
        None => {
            let t = tempfile::tempdir().map_err(io("creating a temporary directory".into()))?;
            Ok((t.path().to_owned(), Some(t)))
        }
    }
}

/// One scripted commit: edits to apply, and what it shows.
pub struct Step {
    pub message: &'static str,
    pub edits: &'static [(&'static str, &'static str, &'static str)],
}

const PROD: &str = "clusters/prod/controlplane.yaml";
const STAGING: &str = "clusters/staging/controlplane.yaml";
const NOVA: &str = "standalone/compute/nova.yaml";

/// The story: a valid hop, a skip-level jump, a lone release bump, its fix,
/// a downgrade, and its revert.
pub const SCRIPT: &[Step] = &[
    Step {
        message: "Upgrade prod to 2026.2 (release and placement override together)",
        edits: &[
            (
                PROD,
                "openStackRelease: \"2026.1\"",
                "openStackRelease: \"2026.2\"",
            ),
            (PROD, "tag: \"2026.1\"", "tag: \"2026.2\""),
        ],
    },
    Step {
        message: "Jump nova straight to 2027.1",
        edits: &[
            (
                NOVA,
                "openStackRelease: \"2026.1\"",
                "openStackRelease: \"2027.1\"",
            ),
            (NOVA, "tag: \"2026.1\"", "tag: \"2027.1\""),
        ],
    },
    Step {
        message: "Nova to 2026.2 instead (release only)",
        edits: &[
            (
                NOVA,
                "openStackRelease: \"2027.1\"",
                "openStackRelease: \"2026.2\"",
            ),
            (NOVA, "tag: \"2027.1\"", "tag: \"2026.1\""),
        ],
    },
    Step {
        message: "Bump the nova image with its release",
        edits: &[(NOVA, "tag: \"2026.1\"", "tag: \"2026.2\"")],
    },
    Step {
        message: "Roll staging back to 2025.2",
        edits: &[(
            STAGING,
            "openStackRelease: \"2026.1\"",
            "openStackRelease: \"2025.2\"",
        )],
    },
    Step {
        message: "Revert \"Roll staging back to 2025.2\"",
        edits: &[(
            STAGING,
            "openStackRelease: \"2025.2\"",
            "openStackRelease: \"2026.1\"",
        )],
    },
];

/// Writes the fleet into `dir`, commits it, then commits each step of the
/// script. Returns the repository path.
pub fn build_repository(dir: &Path) -> Result<(), DemoError> {
    let repo = Repository::init_opts(dir, git2::RepositoryInitOptions::new().initial_head("main"))?;
    write_dir(&FLEET, dir).map_err(|e| DemoError::Git(e.to_string()))?;
    let mut when = 1_795_000_000i64; // A fixed clock keeps the demo's ids stable.
    commit_all(&repo, "Fleet at 2026.1", when)?;
    for step in SCRIPT {
        for (file, from, to) in step.edits {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path).map_err(|e| DemoError::Git(e.to_string()))?;
            if !text.contains(from) {
                return Err(DemoError::Script {
                    file: (*file).to_owned(),
                    needle: (*from).to_owned(),
                });
            }
            std::fs::write(&path, text.replacen(from, to, 1))
                .map_err(|e| DemoError::Git(e.to_string()))?;
        }
        when += 3600;
        commit_all(&repo, step.message, when)?;
    }
    Ok(())
}

fn write_dir(d: &Dir<'_>, root: &Path) -> std::io::Result<()> {
    for f in d.files() {
        let p = root.join(f.path());
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(p, f.contents())?;
    }
    for sub in d.dirs() {
        write_dir(sub, root)?;
    }
    Ok(())
}

fn commit_all(repo: &Repository, message: &str, when: i64) -> Result<(), DemoError> {
    let mut index = repo.index()?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let sig = Signature::new(
        "lockstep demo",
        "demo@lockstep.invalid",
        &Time::new(when, 0),
    )?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)?;
    Ok(())
}

/// Builds the repository in `dir` and judges its whole history.
pub fn run(dir: &Path) -> Result<CheckReport, DemoError> {
    build_repository(dir)?;
    let repo = GitRepo::open(dir)?;
    Ok(check(
        &repo,
        &CheckOptions {
            base: Some(EMPTY_TREE.to_owned()),
            ..CheckOptions::default()
        },
    )?)
}
