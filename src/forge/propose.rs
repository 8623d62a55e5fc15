//! Pull and merge requests: how an UpgradePlan in `mode: propose` asks a
//! person to merge a wave instead of committing it to the watched branch
//! itself.
//!
//! Two operations per host, next to its status code: list the requests
//! whose source is a given branch (any state, so that a request a person
//! closed is seen as declined rather than opened again), and open one.
//! Hosts answer "one already exists" in their own ways (GitHub 422, GitLab
//! and Gitea 409); opening then returns the open one, so two replicas or a
//! retry after a lost answer never make two.

use std::fmt;
use std::future::Future;

use super::ForgeError;

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProposalState {
    Open,
    Merged,
    /// Closed without merging: a person declined it.
    Closed,
}

/// A pull/merge request as the host reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// GitHub and Gitea: the pull request number; GitLab: the merge
    /// request's iid (what people type as `!N`).
    pub number: u64,
    /// The page people open; empty when the host sent none.
    pub url: String,
    pub state: ProposalState,
    /// The head commit as the host last saw it. GitHub and GitLab keep the
    /// commit a closed request had; Gitea reports the branch's current tip.
    pub head_sha: Option<String>,
}

impl fmt::Display for Proposal {
    /// The link when there is one (what a person can click in a status),
    /// else the number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.url.is_empty() {
            write!(f, "#{}", self.number)
        } else {
            f.write_str(&self.url)
        }
    }
}

/// A request to open: from `head` (a branch of the same repository) into
/// `base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewProposal {
    pub head: String,
    pub base: String,
    pub title: String,
    pub body: String,
}

/// Opening and finding pull/merge requests on a Git host.
pub trait Propose: Send + Sync {
    /// Requests from branch `head` into `base`, in any state, as far as the
    /// host lists them (newest first where it sorts).
    fn proposals(
        &self,
        head: &str,
        base: &str,
    ) -> impl Future<Output = Result<Vec<Proposal>, ForgeError>> + Send;

    /// Opens a request; when the host says one is already open for the
    /// branch, returns that one instead.
    fn propose(&self, p: &NewProposal)
    -> impl Future<Output = Result<Proposal, ForgeError>> + Send;
}

/// The host refused to open a request because one is already open for the
/// branch: that one, or the refusal, worth another try (a host's list can
/// lag behind its refusal).
pub(crate) async fn already_open<P: Propose>(
    host: &P,
    p: &NewProposal,
    refusal: ForgeError,
) -> Result<Proposal, ForgeError> {
    let open = host
        .proposals(&p.head, &p.base)
        .await?
        .into_iter()
        .find(|x| x.state == ProposalState::Open);
    open.ok_or(match refusal {
        ForgeError::Http {
            host,
            what,
            status,
            body,
            retry_after,
            ..
        } => ForgeError::Http {
            host,
            what,
            status,
            body,
            retry_after,
            retryable: true,
        },
        e => e,
    })
}

/// What every host refuses to carry in a branch name we put in a query or
/// path (the names lockstep makes never contain these; a configured base
/// branch might).
pub(crate) fn check_branch(branch: &str) -> Result<(), ForgeError> {
    if !branch.is_empty()
        && git2::Reference::is_valid_name(&format!("refs/heads/{branch}"))
        && !branch.contains(['?', '#', '%', ' '])
    {
        Ok(())
    } else {
        Err(ForgeError::Config(format!(
            "{branch:?} is not a branch name lockstep can propose from or to"
        )))
    }
}

/// The open request among `found`, if the host listed one.
pub fn open_one(found: &[Proposal]) -> Option<&Proposal> {
    found.iter().find(|p| p.state == ProposalState::Open)
}
