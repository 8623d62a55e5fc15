//! GitHub (and GitHub Enterprise): `POST /repos/{owner}/{repo}/statuses/{sha}`;
//! for plans in propose mode, `GET`/`POST /repos/{owner}/{repo}/pulls`.

use serde::Deserialize;

use super::http::{client, get_json, get_pages, join, send, with_query};
use super::propose::{NewProposal, Proposal, ProposalState, Propose, already_open, check_branch};
use super::{Forge, ForgeError, Limits, Posted, State, Status};
use crate::secret::Secret;

pub const DEFAULT_API: &str = "https://api.github.com";

pub struct GitHub {
    client: reqwest::Client,
    api: String,
    repo: String,
    token: Option<Secret>,
}

impl GitHub {
    /// `api` is the REST base (`https://api.github.com`, or
    /// `https://ghe.example.com/api/v3`); `repo` is `owner/name`.
    pub fn new(api: &str, repo: &str, token: Option<Secret>) -> Result<Self, ForgeError> {
        check_owner_repo(repo)?;
        Ok(Self {
            client: client()?,
            api: api.to_owned(),
            repo: repo.to_owned(),
            token,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .request(method, join(&self.api, path))
            .header("Accept", "application/vnd.github+json, application/json")
            .header("X-GitHub-Api-Version", "2022-11-28");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t.expose());
        }
        req
    }
}

#[derive(Deserialize)]
struct ApiStatus {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    context: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    target_url: Option<String>,
}

/// Statuses asked for a page (the host's most).
const STATUS_PAGE: usize = 100;

impl Forge for GitHub {
    fn host(&self) -> &'static str {
        "github"
    }

    fn limits(&self) -> Limits {
        Limits {
            description: 140,
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
        let list: Vec<ApiStatus> = get_pages("github", &what, STATUS_PAGE, |n| {
            self.request(
                reqwest::Method::GET,
                &format!(
                    "repos/{}/commits/{sha}/statuses?per_page={STATUS_PAGE}&page={n}",
                    self.repo
                ),
            )
        })
        .await?;
        Ok(list
            .into_iter()
            .map(|s| Posted {
                state: s.state,
                context: s.context,
                description: s.description.unwrap_or_default(),
                target_url: s.target_url.filter(|u| !u.is_empty()),
                id: s.id,
            })
            .collect())
    }

    async fn post(&self, sha: &str, status: &Status) -> Result<(), ForgeError> {
        check_sha(sha)?;
        let mut body = serde_json::json!({
            "state": self.state_name(status.state),
            "context": status.context,
            "description": status.description,
        });
        if let Some(u) = &status.target_url {
            body["target_url"] = u.clone().into();
        }
        send(
            "github",
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

/// `owner/name`, each part a plain path segment.
pub(crate) fn check_owner_repo(repo: &str) -> Result<(), ForgeError> {
    let ok = repo.split('/').count() == 2
        && repo.split('/').all(|p| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        });
    if ok {
        Ok(())
    } else {
        Err(ForgeError::Config(format!(
            "repository {repo:?} is not of the form owner/name"
        )))
    }
}

/// A full commit id (SHA-1 or SHA-256), so nothing else reaches a URL path.
pub(crate) fn check_sha(sha: &str) -> Result<(), ForgeError> {
    if (sha.len() == 40 || sha.len() == 64) && sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(ForgeError::Config(format!(
            "{sha:?} is not a full commit id"
        )))
    }
}

#[derive(Deserialize)]
struct ApiPullHead {
    #[serde(default, rename = "ref")]
    branch: String,
    /// `owner:branch`: the owner of the repository the branch is in.
    #[serde(default)]
    label: String,
    #[serde(default)]
    sha: Option<String>,
}

#[derive(Deserialize)]
struct ApiPull {
    number: u64,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    merged_at: Option<String>,
    head: ApiPullHead,
}

impl ApiPull {
    fn proposal(self) -> Proposal {
        Proposal {
            number: self.number,
            url: self.html_url.unwrap_or_default(),
            state: match (self.state.as_str(), self.merged_at.is_some()) {
                ("open", _) => ProposalState::Open,
                (_, true) => ProposalState::Merged,
                _ => ProposalState::Closed,
            },
            head_sha: self.head.sha,
        }
    }
}

impl Propose for GitHub {
    async fn proposals(&self, head: &str, base: &str) -> Result<Vec<Proposal>, ForgeError> {
        check_branch(head)?;
        check_branch(base)?;
        let owner = self.repo.split('/').next().unwrap_or_default();
        let list: Vec<ApiPull> = get_json(
            "github",
            &format!("listing the pull requests from {head}"),
            self.request(
                reqwest::Method::GET,
                &with_query(
                    &format!("repos/{}/pulls", self.repo),
                    &[
                        ("head", &format!("{owner}:{head}")),
                        ("base", base),
                        ("state", "all"),
                        ("sort", "created"),
                        ("direction", "desc"),
                        ("per_page", "100"),
                    ],
                ),
            ),
        )
        .await?;
        // `head` filters on the host; checked again, because a request from
        // another branch, or from a fork's branch of the same name, must
        // never be mistaken for ours (GitHub compares owners without case).
        let label = format!("{owner}:{head}");
        Ok(list
            .into_iter()
            .filter(|p| p.head.branch == head && p.head.label.eq_ignore_ascii_case(&label))
            .map(ApiPull::proposal)
            .collect())
    }

    async fn propose(&self, p: &NewProposal) -> Result<Proposal, ForgeError> {
        check_branch(&p.head)?;
        check_branch(&p.base)?;
        let body = serde_json::json!({
            "title": p.title,
            "head": p.head,
            "base": p.base,
            "body": p.body,
        });
        let what = format!("opening a pull request from {} into {}", p.head, p.base);
        let r = get_json::<ApiPull>(
            "github",
            &what,
            self.request(reqwest::Method::POST, &format!("repos/{}/pulls", self.repo))
                .json(&body),
        )
        .await;
        match r {
            Ok(pull) => Ok(pull.proposal()),
            // "A pull request already exists for owner:branch."
            Err(e) if matches!(&e, ForgeError::Http { status: 422, body, .. } if body.contains("already exists")) => {
                already_open(self, p, e).await
            }
            Err(e) => Err(e),
        }
    }
}
