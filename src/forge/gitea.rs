//! Gitea and Forgejo: `POST /api/v1/repos/{owner}/{repo}/statuses/{sha}`.

use serde::Deserialize;

use super::github::{check_owner_repo, check_sha};
use super::http::{client, get_json, join, send};
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
        let list: Vec<ApiStatus> = get_json(
            "gitea",
            &what,
            self.request(
                reqwest::Method::GET,
                &format!("repos/{}/commits/{sha}/statuses?limit=50", self.repo),
            ),
        )
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
