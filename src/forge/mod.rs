//! Commit statuses on Git hosts: lockstep's verdicts where teams look, on
//! the pull request's head commit before merge and on main as the upgrade
//! proceeds.
//!
//! One small trait (read a commit's statuses, post one) with an
//! implementation per host over plain HTTP (GitHub, GitLab, Gitea/Forgejo)
//! and one over Git itself (notes, the default when there is no host). What
//! to post is decided by [`describe`]; how to get it there despite outages,
//! rate limits and duplicate posts by [`delivery`]. Plans in propose mode
//! open pull/merge requests through [`propose`] on the same hosts.

pub mod delivery;
pub mod gitea;
pub mod github;
pub mod gitlab;
mod http;
/// The most of a host's answer read ([`http`]).
pub use http::MAX_ANSWER;
pub mod notes;
pub mod propose;

use std::future::Future;
use std::time::Duration;

use thiserror::Error;

/// The states, contexts and wording of statuses are the pure core's.
pub use lockstep_core::status::{Context, State, Status, describe, shorten};

/// A status as a host reports it back, in the host's own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    pub state: String,
    pub context: String,
    pub description: String,
    pub target_url: Option<String>,
    /// The host's id; higher is newer where ids exist.
    pub id: Option<u64>,
}

/// Field limits of a host; longer values are shortened, never rejected.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub description: usize,
    pub context: usize,
}

#[derive(Debug, Error)]
pub enum ForgeError {
    /// The host answered, but not with success.
    #[error("{host} answered {status} to {what}: {body}")]
    Http {
        host: &'static str,
        what: String,
        status: u16,
        body: String,
        /// How long the host asked us to wait (`Retry-After`, rate-limit reset).
        retry_after: Option<Duration>,
        retryable: bool,
    },
    /// The request never got an answer.
    #[error("{host}: {what} failed: {message}")]
    Transport {
        host: &'static str,
        what: String,
        message: String,
    },
    /// The host answered success with a body that is not what its API
    /// documents: trying again gets the same answer.
    #[error("{host}: {what}: {message}")]
    Answer {
        host: &'static str,
        what: String,
        message: String,
    },
    #[error("git notes: {0}")]
    Notes(String),
    /// The notes ref is locked or moved under us: another git process is
    /// writing it, or a killed writer left its lock file. Worth another try.
    #[error("git notes: {0}")]
    NotesBusy(String),
    #[error("forge configuration: {0}")]
    Config(String),
}

impl ForgeError {
    pub fn retryable(&self) -> bool {
        match self {
            ForgeError::Http { retryable, .. } => *retryable,
            ForgeError::Transport { .. } | ForgeError::NotesBusy(_) => true,
            ForgeError::Answer { .. } | ForgeError::Notes(_) | ForgeError::Config(_) => false,
        }
    }

    /// Whether a status that failed so is kept for a later drain rather
    /// than given up: what is worth another try, and a token the host
    /// refused (401) or that lacks a permission (403), which a person puts
    /// right (a rotated token, a granted scope) while the statuses wait.
    pub fn kept(&self) -> bool {
        self.retryable()
            || matches!(
                self,
                ForgeError::Http {
                    status: 401 | 403,
                    ..
                }
            )
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ForgeError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// "Set the status of commit S under context C", and read what is there.
pub trait Forge: Send + Sync {
    fn host(&self) -> &'static str;

    fn limits(&self) -> Limits;

    /// The host's word for a state (what it will report back).
    fn state_name(&self, state: State) -> &'static str;

    /// Whether what the host reports back holds a status's link (git
    /// notes keep none: comparing it would post every linked status again).
    fn keeps_target_url(&self) -> bool {
        true
    }

    /// Statuses already on the commit (for read-before-write deduplication).
    fn statuses(&self, sha: &str) -> impl Future<Output = Result<Vec<Posted>, ForgeError>> + Send;

    /// Posts one status. Fields are already within [`Forge::limits`].
    fn post(
        &self,
        sha: &str,
        status: &Status,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;
}

/// Any of the hosts, chosen at run time.
pub enum AnyForge {
    GitHub(github::GitHub),
    GitLab(gitlab::GitLab),
    Gitea(gitea::Gitea),
    Notes(notes::Notes),
}

impl Forge for AnyForge {
    fn host(&self) -> &'static str {
        match self {
            AnyForge::GitHub(f) => f.host(),
            AnyForge::GitLab(f) => f.host(),
            AnyForge::Gitea(f) => f.host(),
            AnyForge::Notes(f) => f.host(),
        }
    }

    fn limits(&self) -> Limits {
        match self {
            AnyForge::GitHub(f) => f.limits(),
            AnyForge::GitLab(f) => f.limits(),
            AnyForge::Gitea(f) => f.limits(),
            AnyForge::Notes(f) => f.limits(),
        }
    }

    fn state_name(&self, state: State) -> &'static str {
        match self {
            AnyForge::GitHub(f) => f.state_name(state),
            AnyForge::GitLab(f) => f.state_name(state),
            AnyForge::Gitea(f) => f.state_name(state),
            AnyForge::Notes(f) => f.state_name(state),
        }
    }

    fn keeps_target_url(&self) -> bool {
        !matches!(self, AnyForge::Notes(_))
    }

    async fn statuses(&self, sha: &str) -> Result<Vec<Posted>, ForgeError> {
        match self {
            AnyForge::GitHub(f) => f.statuses(sha).await,
            AnyForge::GitLab(f) => f.statuses(sha).await,
            AnyForge::Gitea(f) => f.statuses(sha).await,
            AnyForge::Notes(f) => f.statuses(sha).await,
        }
    }

    async fn post(&self, sha: &str, status: &Status) -> Result<(), ForgeError> {
        match self {
            AnyForge::GitHub(f) => f.post(sha, status).await,
            AnyForge::GitLab(f) => f.post(sha, status).await,
            AnyForge::Gitea(f) => f.post(sha, status).await,
            AnyForge::Notes(f) => f.post(sha, status).await,
        }
    }
}

/// Why a plan in propose mode cannot run on git notes.
pub const PROPOSE_NEEDS_HOST: &str = "propose mode needs a Git host (github, gitlab or gitea)";

impl AnyForge {
    /// Whether this host can open pull/merge requests (git notes cannot:
    /// there is no one to ask).
    pub fn can_propose(&self) -> bool {
        !matches!(self, AnyForge::Notes(_))
    }
}

impl propose::Propose for AnyForge {
    async fn proposals(
        &self,
        head: &str,
        base: &str,
    ) -> Result<Vec<propose::Proposal>, ForgeError> {
        match self {
            AnyForge::GitHub(f) => f.proposals(head, base).await,
            AnyForge::GitLab(f) => f.proposals(head, base).await,
            AnyForge::Gitea(f) => f.proposals(head, base).await,
            AnyForge::Notes(_) => Err(ForgeError::Config(PROPOSE_NEEDS_HOST.into())),
        }
    }

    async fn propose(&self, p: &propose::NewProposal) -> Result<propose::Proposal, ForgeError> {
        match self {
            AnyForge::GitHub(f) => f.propose(p).await,
            AnyForge::GitLab(f) => f.propose(p).await,
            AnyForge::Gitea(f) => f.propose(p).await,
            AnyForge::Notes(_) => Err(ForgeError::Config(PROPOSE_NEEDS_HOST.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repos_from_remote_urls() {
        for (url, want) in [
            ("https://github.com/octo/fleet.git", Some("octo/fleet")),
            ("git@github.com:octo/fleet.git", Some("octo/fleet")),
            (
                "ssh://git@gitlab.example.com:2222/group/sub/fleet.git",
                Some("group/sub/fleet"),
            ),
            ("https://gitea.example.com/octo/fleet", Some("octo/fleet")),
            ("/srv/git/fleet.git", None),
        ] {
            assert_eq!(repo_from_url(url).as_deref(), want, "{url}");
        }
    }
}

/// Which host to report to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForgeKind {
    GitHub,
    GitLab,
    Gitea,
    Notes,
}

/// Everything needed to build a forge, from flags, environment or a file.
#[derive(Clone, Debug)]
pub struct ForgeSpec {
    pub kind: ForgeKind,
    /// API base (GitHub) or server URL (GitLab, Gitea).
    pub url: Option<String>,
    /// `owner/name`, or a GitLab project path or id; derived from the
    /// repository's `origin` remote when absent.
    pub repo: Option<String>,
    pub token: Option<crate::secret::Secret>,
    /// The local repository (notes are written there; `origin` is read there).
    pub local: std::path::PathBuf,
}

impl AnyForge {
    pub fn build(spec: &ForgeSpec) -> Result<Self, ForgeError> {
        let repo = || -> Result<String, ForgeError> {
            spec.repo
                .clone()
                .or_else(|| origin_repo(&spec.local))
                .ok_or_else(|| {
                    ForgeError::Config(
                        "no --forge-repo given and no origin remote to derive owner/name from"
                            .into(),
                    )
                })
        };
        Ok(match spec.kind {
            ForgeKind::GitHub => AnyForge::GitHub(github::GitHub::new(
                spec.url.as_deref().unwrap_or(github::DEFAULT_API),
                &repo()?,
                spec.token.clone(),
            )?),
            ForgeKind::GitLab => AnyForge::GitLab(gitlab::GitLab::new(
                spec.url.as_deref().unwrap_or("https://gitlab.com"),
                &repo()?,
                spec.token.clone(),
            )?),
            ForgeKind::Gitea => AnyForge::Gitea(gitea::Gitea::new(
                spec.url.as_deref().ok_or_else(|| {
                    ForgeError::Config("Gitea/Forgejo needs --forge-url (the server)".into())
                })?,
                &repo()?,
                spec.token.clone(),
            )?),
            ForgeKind::Notes => AnyForge::Notes(notes::Notes::open(&spec.local)?),
        })
    }
}

/// `owner/name` (or `group/sub/name`) from the `origin` remote's URL:
/// `https://host/owner/name.git`, `git@host:owner/name.git`, `ssh://…`.
pub fn origin_repo(local: &std::path::Path) -> Option<String> {
    let repo = git2::Repository::open(local).ok()?;
    let remote = repo.find_remote("origin").ok()?;
    repo_from_url(remote.url().ok()?)
}

pub fn repo_from_url(url: &str) -> Option<String> {
    let path = if let Some(rest) = url.split_once("://").map(|(_, r)| r) {
        rest.split_once('/')?.1
    } else if let Some((_, p)) = url.split_once(':') {
        p
    } else {
        return None;
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    (path.contains('/') && !path.is_empty()).then(|| path.to_owned())
}

/// Posts the verdict of every judged commit under
/// `lockstep/<cluster>/review` (`Context::review`), oldest first (so a pull request's head ends up with its own verdict).
pub async fn publish<F: Forge>(
    forge: &F,
    policy: &delivery::RetryPolicy,
    cluster: &str,
    report: &crate::history::CheckReport,
    target_url: Option<&str>,
) -> Result<Vec<(String, delivery::Outcome)>, ForgeError> {
    let mut out = Vec::new();
    for c in &report.commits {
        let status = describe::review_status(cluster, c, target_url);
        let outcome = delivery::deliver(forge, policy, &c.sha, &status).await?;
        out.push((c.sha.clone(), outcome));
    }
    Ok(out)
}
