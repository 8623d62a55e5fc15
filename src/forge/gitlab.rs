//! GitLab: `POST /api/v4/projects/:id/statuses/:sha`; for plans in propose
//! mode, `GET`/`POST /api/v4/projects/:id/merge_requests`.

use serde::Deserialize;

use super::github::check_sha;
use super::http::{client, get_json, get_pages, join, send, with_query};
use super::propose::{NewProposal, Proposal, ProposalState, Propose, already_open, check_branch};
use super::{Forge, ForgeError, Limits, Posted, State, Status};
use crate::secret::Secret;

pub struct GitLab {
    client: reqwest::Client,
    base: String,
    project: String,
    token: Option<Secret>,
}

impl GitLab {
    /// `base` is the server (`https://gitlab.com`); `project` is the numeric
    /// id or the full path (`group/subgroup/fleet`).
    pub fn new(base: &str, project: &str, token: Option<Secret>) -> Result<Self, ForgeError> {
        let ok = !project.is_empty()
            && project.split('/').all(|p| {
                !p.is_empty()
                    && p != ".."
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            });
        if !ok {
            return Err(ForgeError::Config(format!(
                "GitLab project {project:?} is neither an id nor a group/name path"
            )));
        }
        Ok(Self {
            client: client()?,
            base: join(base, "api/v4"),
            // A path is one URL segment, its slashes encoded.
            project: project.replace('/', "%2F"),
            token,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .request(method, join(&self.base, path))
            .header("Accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("PRIVATE-TOKEN", &*t.expose());
        }
        req
    }
}

#[derive(Deserialize)]
struct ApiStatus {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    target_url: Option<String>,
}

/// Statuses asked for a page (the host's most).
const STATUS_PAGE: usize = 100;

impl Forge for GitLab {
    fn host(&self) -> &'static str {
        "gitlab"
    }

    fn limits(&self) -> Limits {
        Limits {
            description: 255,
            context: 255,
        }
    }

    fn state_name(&self, state: State) -> &'static str {
        match state {
            State::Pending => "pending",
            State::Running => "running",
            State::Success => "success",
            State::Failure | State::Error => "failed",
        }
    }

    async fn statuses(&self, sha: &str) -> Result<Vec<Posted>, ForgeError> {
        check_sha(sha)?;
        let what = format!("reading the statuses of {sha}");
        let list: Vec<ApiStatus> = get_pages("gitlab", &what, STATUS_PAGE, |n| {
            self.request(
                reqwest::Method::GET,
                &format!(
                    // Newest first, as the other hosts list them: GitLab's
                    // default is oldest first, and a list cut at its last
                    // page would keep the oldest.
                    "projects/{}/repository/commits/{sha}/statuses?all=true&order_by=id&sort=desc&per_page={STATUS_PAGE}&page={n}",
                    self.project
                ),
            )
        })
        .await?;
        Ok(list
            .into_iter()
            .map(|s| Posted {
                state: s.status,
                context: s.name,
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
            "name": status.context,
            "description": status.description,
        });
        if let Some(u) = &status.target_url {
            body["target_url"] = u.clone().into();
        }
        let result = send(
            "gitlab",
            &format!("posting {} on {sha}", status.context),
            self.request(
                reqwest::Method::POST,
                &format!("projects/{}/statuses/{sha}", self.project),
            )
            .json(&body),
        )
        .await;
        match result {
            Ok(_) => Ok(()),
            // GitLab refuses to "transition" a status to the state it already
            // has: the status is there, which is all we wanted.
            Err(ForgeError::Http {
                status: 400, body, ..
            }) if body.contains("Cannot transition status") => Ok(()),
            // 409: another pipeline status update raced ours; try again.
            Err(ForgeError::Http {
                status: 409,
                host,
                what,
                body,
                retry_after,
                ..
            }) => Err(ForgeError::Http {
                host,
                what,
                status: 409,
                body,
                retry_after,
                retryable: true,
            }),
            Err(e) => Err(e),
        }
    }
}

#[derive(Deserialize)]
struct ApiMergeRequest {
    iid: u64,
    #[serde(default)]
    web_url: Option<String>,
    /// `opened`, `closed`, `locked`, `merged`.
    #[serde(default)]
    state: String,
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    source_branch: String,
    /// The project the branch is in: the target for lockstep's own
    /// requests, a fork for another's.
    #[serde(default)]
    source_project_id: Option<u64>,
    #[serde(default)]
    target_project_id: Option<u64>,
}

impl ApiMergeRequest {
    fn proposal(self) -> Proposal {
        Proposal {
            number: self.iid,
            url: self.web_url.unwrap_or_default(),
            state: match self.state.as_str() {
                // A locked request is still open: being merged, or locked
                // for discussion; either way not declined.
                "opened" | "locked" => ProposalState::Open,
                "merged" => ProposalState::Merged,
                _ => ProposalState::Closed,
            },
            head_sha: self.sha,
        }
    }
}

impl Propose for GitLab {
    async fn proposals(&self, head: &str, base: &str) -> Result<Vec<Proposal>, ForgeError> {
        check_branch(head)?;
        check_branch(base)?;
        // No `state`: every state (GitLab's default).
        let list: Vec<ApiMergeRequest> = get_json(
            "gitlab",
            &format!("listing the merge requests from {head}"),
            self.request(
                reqwest::Method::GET,
                &with_query(
                    &format!("projects/{}/merge_requests", self.project),
                    &[
                        ("source_branch", head),
                        ("target_branch", base),
                        ("order_by", "created_at"),
                        ("sort", "desc"),
                        ("per_page", "100"),
                    ],
                ),
            ),
        )
        .await?;
        Ok(list
            .into_iter()
            // A fork's request from a branch of the same name is not ours
            // (taken for ours, its closing would decline the wave); without
            // both project ids, it is not ours.
            .filter(|m| {
                m.source_branch == head
                    && m.source_project_id.is_some()
                    && m.source_project_id == m.target_project_id
            })
            .map(ApiMergeRequest::proposal)
            .collect())
    }

    async fn propose(&self, p: &NewProposal) -> Result<Proposal, ForgeError> {
        check_branch(&p.head)?;
        check_branch(&p.base)?;
        let body = serde_json::json!({
            "source_branch": p.head,
            "target_branch": p.base,
            "title": p.title,
            "description": p.body,
        });
        let what = format!("opening a merge request from {} into {}", p.head, p.base);
        let r = get_json::<ApiMergeRequest>(
            "gitlab",
            &what,
            self.request(
                reqwest::Method::POST,
                &format!("projects/{}/merge_requests", self.project),
            )
            .json(&body),
        )
        .await;
        match r {
            Ok(m) => Ok(m.proposal()),
            // "Another open merge request already exists for this source branch: !5"
            Err(e @ ForgeError::Http { status: 409, .. }) => already_open(self, p, e).await,
            Err(e) => Err(e),
        }
    }
}
