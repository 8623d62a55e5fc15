//! Gitea and Forgejo: `POST /api/v1/repos/{owner}/{repo}/statuses/{sha}`;
//! for plans in propose mode, `GET`/`POST /api/v1/repos/{owner}/{repo}/pulls`.

use serde::Deserialize;

use super::github::{check_owner_repo, check_sha};
use super::http::{client, get_json, get_pages, join, send, with_query};
use super::propose::{NewProposal, Proposal, ProposalState, Propose, already_open, check_branch};
use super::{Forge, ForgeError, Limits, Posted, State, Status};
use crate::secret::Secret;

pub struct Gitea {
    client: reqwest::Client,
    base: String,
    repo: String,
    token: Option<Secret>,
}

impl Gitea {
    /// `base` is the server (`https://gitea.example.com`); `repo` is `owner/name`.
    pub fn new(base: &str, repo: &str, token: Option<Secret>) -> Result<Self, ForgeError> {
        check_owner_repo(repo)?;
        Ok(Self {
            client: client()?,
            base: join(base, "api/v1"),
            repo: repo.to_owned(),
            token,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .request(method, join(&self.base, path))
            .header("Accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("token {}", t.expose()));
        }
        req
    }
}

#[derive(Deserialize)]
struct ApiStatus {
    #[serde(default)]
    id: Option<u64>,
    // Gitea answers with `status`; some versions also send `state`.
    #[serde(default, alias = "state")]
    status: String,
    #[serde(default)]
    context: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    target_url: Option<String>,
}

/// Statuses asked for a page (the host's most).
const STATUS_PAGE: usize = 50;

impl Forge for Gitea {
    fn host(&self) -> &'static str {
        "gitea"
    }

    fn limits(&self) -> Limits {
        Limits {
            description: 255,
            context: 255,
        }
    }

    fn state_name(&self, state: State) -> &'static str {
        match state {
            State::Pending | State::Running => "pending",
            State::Success => "success",
            State::Failure => "failure",
            State::Error => "error",
        }
    }

    async fn statuses(&self, sha: &str) -> Result<Vec<Posted>, ForgeError> {
        check_sha(sha)?;
        let what = format!("reading the statuses of {sha}");
        let list: Vec<ApiStatus> = get_pages("gitea", &what, STATUS_PAGE, |n| {
            self.request(
                reqwest::Method::GET,
                &format!(
                    "repos/{}/commits/{sha}/statuses?limit={STATUS_PAGE}&page={n}",
                    self.repo
                ),
            )
        })
        .await?;
        Ok(list
            .into_iter()
            .map(|s| Posted {
                state: s.status,
                context: s.context,
                description: s.description.unwrap_or_default(),
                target_url: s.target_url.filter(|u| !u.is_empty()),
                id: s.id,
            })
            .collect())
    }

    async fn post(&self, sha: &str, status: &Status) -> Result<(), ForgeError> {
        check_sha(sha)?;
        let body = serde_json::json!({
            "state": self.state_name(status.state),
            "context": status.context,
            "description": status.description,
            "target_url": status.target_url.clone().unwrap_or_default(),
        });
        send(
            "gitea",
            &format!("posting {} on {sha}", status.context),
            self.request(
                reqwest::Method::POST,
                &format!("repos/{}/statuses/{sha}", self.repo),
            )
            .json(&body),
        )
        .await?;
        Ok(())
    }
}

#[derive(Deserialize)]
struct ApiPullHead {
    #[serde(default, rename = "ref")]
    branch: String,
    /// The branch name, also when the branch is gone (then `ref` names
    /// `refs/pull/N/head`).
    #[serde(default)]
    label: String,
    #[serde(default)]
    sha: Option<String>,
    /// The repository the branch is in: the base's for lockstep's own
    /// requests, another for a fork's.
    #[serde(default)]
    repo_id: Option<i64>,
}

#[derive(Deserialize)]
struct ApiPullBase {
    #[serde(default, rename = "ref")]
    branch: String,
    #[serde(default)]
    repo_id: Option<i64>,
}

#[derive(Deserialize)]
struct ApiPull {
    number: u64,
    #[serde(default)]
    html_url: Option<String>,
    /// `open` or `closed`.
    #[serde(default)]
    state: String,
    #[serde(default)]
    merged: bool,
    head: ApiPullHead,
    #[serde(default)]
    base: Option<ApiPullBase>,
}

impl ApiPull {
    fn proposal(self) -> Proposal {
        Proposal {
            number: self.number,
            url: self.html_url.unwrap_or_default(),
            state: match (self.state.as_str(), self.merged) {
                (_, true) => ProposalState::Merged,
                ("open", _) => ProposalState::Open,
                _ => ProposalState::Closed,
            },
            head_sha: self.head.sha,
        }
    }
}

/// Gitea lists pull requests without a head filter; this many pages of the
/// most recently updated (at most 50 each) are searched.
const PAGES: u32 = 5;
const PAGE: usize = 50;

impl Propose for Gitea {
    async fn proposals(&self, head: &str, base: &str) -> Result<Vec<Proposal>, ForgeError> {
        check_branch(head)?;
        check_branch(base)?;
        let mut out = Vec::new();
        for page in 1..=PAGES {
            let list: Vec<ApiPull> = get_json(
                "gitea",
                &format!("listing the pull requests into {base}"),
                self.request(
                    reqwest::Method::GET,
                    &with_query(
                        &format!("repos/{}/pulls", self.repo),
                        &[
                            ("state", "all"),
                            ("sort", "recentupdate"),
                            ("base_branch", base),
                            ("limit", &PAGE.to_string()),
                            ("page", &page.to_string()),
                        ],
                    ),
                ),
            )
            .await?;
            let n = list.len();
            out.extend(
                list.into_iter()
                    // A fork's request from a branch of the same name is
                    // not ours: taken for ours, its closing would decline
                    // the wave. Without both repository ids, it is not ours.
                    .filter(|p| {
                        (p.head.branch == head || p.head.label == head)
                            && p.base.as_ref().is_some_and(|b| {
                                b.branch == base
                                    && b.repo_id.is_some()
                                    && b.repo_id == p.head.repo_id
                            })
                    })
                    .map(ApiPull::proposal),
            );
            if n < PAGE {
                break;
            }
        }
        Ok(out)
    }

    async fn propose(&self, p: &NewProposal) -> Result<Proposal, ForgeError> {
        check_branch(&p.head)?;
        check_branch(&p.base)?;
        let body = serde_json::json!({
            "head": p.head,
            "base": p.base,
            "title": p.title,
            "body": p.body,
        });
        let what = format!("opening a pull request from {} into {}", p.head, p.base);
        let r = get_json::<ApiPull>(
            "gitea",
            &what,
            self.request(reqwest::Method::POST, &format!("repos/{}/pulls", self.repo))
                .json(&body),
        )
        .await;
        match r {
            Ok(pull) => Ok(pull.proposal()),
            // "pull request already exists for these targets"
            Err(e @ ForgeError::Http { status: 409, .. }) => already_open(self, p, e).await,
            Err(e) => Err(e),
        }
    }
}
