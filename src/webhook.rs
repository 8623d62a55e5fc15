//! The webhook receiver: push and pull-request events from GitHub, GitLab and
//! Gitea/Forgejo, verified, deduplicated and handed on as typed triggers.
//!
//! It answers fast and does no work itself: a verified event becomes a
//! [`Trigger`] on a channel, and the daemon's loop does the rest. A full
//! channel does not fail the delivery (polling is the backstop), a replayed
//! delivery id is acknowledged but not handed on, and a bad signature is a
//! 401 that never reaches the channel.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio::sync::mpsc;

use crate::secret::Secret;

/// Where an event came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    GitHub,
    GitLab,
    Gitea,
}

/// What the daemon should look at: a branch head or a pull request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub host: Host,
    /// `owner/name` (GitLab: the project path).
    pub repo: String,
    /// `refs/heads/main`, or the pull request's head ref
    /// (`refs/pull/7/head`, `refs/merge-requests/7/head`).
    pub git_ref: String,
    pub sha: String,
    pub pull_request: Option<u64>,
    /// The branch a pull request targets.
    pub base_ref: Option<String>,
    pub delivery: String,
}

#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub github: Option<Secret>,
    pub gitlab: Option<Secret>,
    pub gitea: Option<Secret>,
    /// Bodies larger than this are refused with 413 before they are read whole.
    pub max_body: usize,
    /// How many delivery ids are remembered for deduplication.
    pub remember: usize,
    /// Bytes of bodies the receiver holds at once, over every delivery in
    /// flight (at least `max_body`). A body counts as its bytes arrive, not
    /// at the length it declares: a delivery whose bytes would go past the
    /// budget is answered 503 at once, so connections sending large
    /// unsigned bodies cannot add up to the pod's memory, and connections
    /// that declare large bodies and send none hold nothing.
    pub in_flight: usize,
    /// How long a body may take to arrive whole, from the end of its headers:
    /// a slower one is answered 408 and what it sent is let go, so a
    /// trickle of bytes cannot hold the budget.
    pub body_deadline: std::time::Duration,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            github: None,
            gitlab: None,
            gitea: None,
            // GitHub caps payloads at 25 MB; a fleet's push is far smaller.
            max_body: 5 * 1024 * 1024,
            remember: 10_000,
            in_flight: 16 * 1024 * 1024,
            // A host sends a push of a few KB in milliseconds.
            body_deadline: std::time::Duration::from_secs(10),
        }
    }
}

struct AppState {
    config: WebhookConfig,
    tx: mpsc::Sender<Trigger>,
    seen: Mutex<Seen>,
}

/// What the receiver remembers of past deliveries: a SHA-256 of each
/// delivery id and of each body, never the id itself. The id is a header
/// the signature does not cover, so a replayed signed body may come under
/// any number of new ids of any length; remembering digests keeps memory
/// fixed (`remember` × two 32-byte digests), and remembering the body makes
/// such a replay (and a delivery with no id at all) a duplicate too.
#[derive(Default)]
struct Seen {
    order: VecDeque<[u8; 32]>,
    digests: HashSet<[u8; 32]>,
}

impl Seen {
    /// Records a delivery; false when its id or its body was seen before.
    fn first_time(&mut self, id: &str, body: &[u8], remember: usize) -> bool {
        let id = (!id.is_empty()).then(|| digest(b"id", id.as_bytes()));
        let body = digest(b"body", body);
        if id.is_some_and(|d| self.digests.contains(&d)) || self.digests.contains(&body) {
            return false;
        }
        for d in id.into_iter().chain([body]) {
            self.digests.insert(d);
            self.order.push_back(d);
        }
        while self.order.len() > remember.saturating_mul(2) {
            if let Some(old) = self.order.pop_front() {
                self.digests.remove(&old);
            }
        }
        true
    }
}

fn digest(domain: &[u8], bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = Sha256::new();
    h.update(domain);
    h.update([0]);
    h.update(bytes);
    h.finalize().into()
}

/// Longest delivery id kept or logged; real ones are UUIDs (36).
const MAX_DELIVERY_ID: usize = 64;

/// A delivery id as lockstep keeps and logs it: cut to
/// [`MAX_DELIVERY_ID`] characters (the log layer escapes what it prints).
fn short_id(id: &str) -> String {
    let mut out: String = id.chars().take(MAX_DELIVERY_ID).collect();
    if out.len() < id.len() {
        out.push('…');
    }
    out
}

/// The routes: `POST /hooks/github`, `/hooks/gitlab`, `/hooks/gitea`.
pub fn router(config: WebhookConfig, tx: mpsc::Sender<Trigger>) -> Router {
    let limit = config.max_body;
    let state = Arc::new(AppState {
        config,
        tx,
        seen: Mutex::new(Seen::default()),
    });
    Router::new()
        .route("/hooks/github", post(github))
        .route("/hooks/gitlab", post(gitlab))
        .route("/hooks/gitea", post(gitea))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// A status and a fixed body.
pub type Reply = (StatusCode, &'static str);

/// What the receiver checks before it reads a body: the deliveries the
/// headers alone refuse, and the shared budget of bytes in flight.
#[derive(Clone)]
struct Admission {
    config: Arc<WebhookConfig>,
    budget: Arc<tokio::sync::Semaphore>,
}

/// Puts `app` (the receiver's routes, with whatever wraps them, such as the
/// follower's forwarding in `src/forward.rs`) behind the checks made before
/// a body is read: a host that is not configured (404), a signature header
/// that is missing or not of the host's shape, a GitLab token that does not
/// match (401), a declared length over `max_body` (413). Only then is the
/// body read, within the budget of bytes held at once (503, `Retry-After`,
/// as the bytes arrive) and the body's deadline (408).
pub fn admitted(app: Router, config: &WebhookConfig) -> Router {
    let permits = config
        .in_flight
        .max(config.max_body)
        .min(tokio::sync::Semaphore::MAX_PERMITS);
    app.layer(axum::middleware::from_fn_with_state(
        Admission {
            config: Arc::new(config.clone()),
            budget: Arc::new(tokio::sync::Semaphore::new(permits)),
        },
        admit,
    ))
}

async fn admit(
    State(a): State<Admission>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let host = match host_of(req.uri().path()) {
        Some(host) if req.method() == axum::http::Method::POST => host,
        _ => return next.run(req).await,
    };
    if let Err(reply) = signed_headers(&a.config, host, req.headers()) {
        return reply.into_response();
    }
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > a.config.max_body as u64) {
        return (StatusCode::PAYLOAD_TOO_LARGE, "body too large\n").into_response();
    }
    let (parts, body) = req.into_parts();
    let read = read_within_budget(body, a.config.max_body, &a.budget);
    let (bytes, permit) = match tokio::time::timeout(a.config.body_deadline, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(BodyRefused::TooLarge)) => {
            return (StatusCode::PAYLOAD_TOO_LARGE, "body too large\n").into_response();
        }
        Ok(Err(BodyRefused::Busy)) => {
            tracing::warn!(
                host = ?host,
                "webhook delivery refused: the receiver holds as many bodies as its budget allows"
            );
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(axum::http::header::RETRY_AFTER, "5")],
                "too many deliveries in flight\n",
            )
                .into_response();
        }
        Ok(Err(BodyRefused::Broken)) => {
            return (StatusCode::BAD_REQUEST, "the body could not be read\n").into_response();
        }
        Err(_) => {
            tracing::warn!(host = ?host, "webhook delivery refused: its body did not arrive in time");
            return (
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time\n",
            )
                .into_response();
        }
    };
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    let response = next.run(req).await;
    drop(permit);
    response
}

/// What the receiver counts per chunk kept, besides its bytes.
const CHUNK_OVERHEAD: usize = 64;

enum BodyRefused {
    TooLarge,
    Busy,
    Broken,
}

/// Reads a body whole, taking from the shared budget as its bytes arrive
/// (not before, at a length a sender may declare and never send).
async fn read_within_budget(
    body: axum::body::Body,
    max: usize,
    budget: &Arc<tokio::sync::Semaphore>,
) -> Result<(Vec<u8>, Option<tokio::sync::OwnedSemaphorePermit>), BodyRefused> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    // The chunks as they came, joined once at the end: a buffer grown as
    // bytes arrive holds up to twice what the budget counts.
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| BodyRefused::Broken)?;
        if chunk.is_empty() {
            continue;
        }
        if len + chunk.len() > max {
            return Err(BodyRefused::TooLarge);
        }
        // Each chunk kept costs its bookkeeping too: a sender of one-byte
        // chunks must not hold thirty times what the budget counts.
        let n = u32::try_from(chunk.len() + CHUNK_OVERHEAD).map_err(|_| BodyRefused::TooLarge)?;
        let permit = budget
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| BodyRefused::Busy)?;
        match &mut held {
            Some(h) => h.merge(permit),
            None => held = Some(permit),
        }
        len += chunk.len();
        chunks.push(chunk);
    }
    Ok((chunks.concat(), held))
}

/// The checks of [`authentic`] that need no body: the host is configured,
/// its signature header is there and of its shape (GitHub `sha256=` and 64
/// hex digits, Gitea 64 hex digits), and GitLab's token, which is all of
/// GitLab's check, matches.
fn signed_headers(config: &WebhookConfig, host: Host, headers: &HeaderMap) -> Result<(), Reply> {
    let hex64 = |v: &str| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit());
    match host {
        Host::GitHub => {
            if config.github.is_none() {
                return authentic(config, host, headers, b"");
            }
            let shaped = header(headers, "x-hub-signature-256")
                .and_then(|s| s.trim().strip_prefix("sha256="))
                .is_some_and(hex64);
            if !shaped {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    "bad or missing X-Hub-Signature-256\n",
                ));
            }
            Ok(())
        }
        Host::GitLab => authentic(config, host, headers, b""),
        Host::Gitea => {
            if config.gitea.is_none() {
                return authentic(config, host, headers, b"");
            }
            let shaped = header(headers, "x-gitea-signature")
                .or_else(|| header(headers, "x-forgejo-signature"))
                .is_some_and(|v| hex64(v.trim()));
            if !shaped {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    "bad or missing X-Gitea-Signature\n",
                ));
            }
            Ok(())
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// HMAC-SHA256 of `body` under `secret`, checked in constant time against
/// the hex digest a host sent.
pub fn verify_hmac_hex(secret: &Secret, body: &[u8], hex_digest: &str) -> bool {
    let Ok(expected) = hex::decode(hex_digest.trim()) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// The hex HMAC-SHA256 a host would send (for tests and for signing replays).
pub fn sign_hex(secret: &Secret, body: &[u8]) -> String {
    match hmac::Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()) {
        Ok(mut mac) => {
            mac.update(body);
            hex::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// Which host a receiver path belongs to (`/hooks/github`, ...).
pub fn host_of(path: &str) -> Option<Host> {
    match path {
        "/hooks/github" => Some(Host::GitHub),
        "/hooks/gitlab" => Some(Host::GitLab),
        "/hooks/gitea" => Some(Host::Gitea),
        _ => None,
    }
}

/// Whether a delivery carries the host's signature (GitHub, Gitea: an
/// HMAC-SHA256 of the body; GitLab: the token), checked in constant time.
/// The answer on failure is the receiver's own, so a follower that checks
/// before forwarding (`src/forward.rs`) answers as the leader would.
pub fn authentic(
    config: &WebhookConfig,
    host: Host,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), Reply> {
    match host {
        Host::GitHub => {
            let Some(secret) = &config.github else {
                return Err((
                    StatusCode::NOT_FOUND,
                    "GitHub webhooks are not configured\n",
                ));
            };
            let signed = header(headers, "x-hub-signature-256")
                .and_then(|s| s.strip_prefix("sha256="))
                .is_some_and(|hex| verify_hmac_hex(secret, body, hex));
            if !signed {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    "bad or missing X-Hub-Signature-256\n",
                ));
            }
        }
        Host::GitLab => {
            let Some(secret) = &config.gitlab else {
                return Err((
                    StatusCode::NOT_FOUND,
                    "GitLab webhooks are not configured\n",
                ));
            };
            let ok =
                header(headers, "x-gitlab-token").is_some_and(|t| secret.matches(t.as_bytes()));
            if !ok {
                return Err((StatusCode::UNAUTHORIZED, "bad or missing X-Gitlab-Token\n"));
            }
        }
        Host::Gitea => {
            let Some(secret) = &config.gitea else {
                return Err((StatusCode::NOT_FOUND, "Gitea webhooks are not configured\n"));
            };
            // Gitea sends a bare hex digest; Forgejo sends the same under its own name too.
            let signed = header(headers, "x-gitea-signature")
                .or_else(|| header(headers, "x-forgejo-signature"))
                .is_some_and(|hex| verify_hmac_hex(secret, body, hex));
            if !signed {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    "bad or missing X-Gitea-Signature\n",
                ));
            }
        }
    }
    Ok(())
}

async fn github(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Reply {
    receive(&app, Host::GitHub, &headers, &body)
}

async fn gitlab(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Reply {
    receive(&app, Host::GitLab, &headers, &body)
}

async fn gitea(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Reply {
    receive(&app, Host::Gitea, &headers, &body)
}

fn receive(app: &AppState, host: Host, headers: &HeaderMap, body: &[u8]) -> Reply {
    match authentic(&app.config, host, headers, body) {
        Ok(()) => accept(app, host, headers, body),
        Err(reply) => reply,
    }
}

/// The event name and delivery id a host puts in its headers (empty when absent).
fn event_and_delivery(host: Host, headers: &HeaderMap) -> (&str, &str) {
    let (event, delivery) = match host {
        Host::GitHub => (
            header(headers, "x-github-event"),
            header(headers, "x-github-delivery"),
        ),
        Host::GitLab => (
            header(headers, "x-gitlab-event"),
            header(headers, "x-gitlab-event-uuid").or_else(|| header(headers, "idempotency-key")),
        ),
        Host::Gitea => (
            header(headers, "x-gitea-event-type")
                .or_else(|| header(headers, "x-gitea-event"))
                .or_else(|| header(headers, "x-forgejo-event")),
            header(headers, "x-gitea-delivery").or_else(|| header(headers, "x-forgejo-delivery")),
        ),
    };
    (event.unwrap_or_default(), delivery.unwrap_or_default())
}

fn is_ping(event: &str) -> bool {
    event == "ping" || event == "System Hook"
}

fn parser(host: Host) -> fn(&str, &Value, &str) -> Parsed {
    match host {
        Host::GitHub => github_trigger,
        Host::GitLab => gitlab_trigger,
        Host::Gitea => gitea_trigger,
    }
}

/// What an event turned into.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    Trigger(Trigger),
    Ignored,
    Malformed,
}

/// What a delivery's headers and body turn into, leaving out the signature
/// check, deduplication and the channel. Public only for the fuzz targets
/// under `fuzz/` (whoever can push to a watched repository shapes both);
/// not part of the API. A ping or a body that is not JSON is `Ignored` or
/// `Malformed` here, where the receiver answers them before parsing.
#[doc(hidden)]
pub fn parse_unverified(host: Host, headers: &HeaderMap, body: &[u8]) -> Parsed {
    let (event, delivery) = event_and_delivery(host, headers);
    if is_ping(event) {
        return Parsed::Ignored;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(json) => parser(host)(event, &json, delivery),
        Err(_) => Parsed::Malformed,
    }
}

fn accept(app: &AppState, host: Host, headers: &HeaderMap, body: &[u8]) -> Reply {
    let (event, delivery) = event_and_delivery(host, headers);
    if is_ping(event) {
        return (StatusCode::OK, "pong\n");
    }
    // A delivery is remembered only once it is one lockstep can read: the
    // host's redelivery after a fix must not be taken for a duplicate.
    if header(headers, "content-type").is_some_and(|t| {
        t.trim_start()
            .starts_with("application/x-www-form-urlencoded")
    }) {
        tracing::warn!(host = ?host, "webhook delivery refused: sent as a form; set the webhook's content type to application/json");
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "set the webhook's content type to application/json\n",
        );
    }
    let Ok(json) = serde_json::from_slice::<Value>(body) else {
        tracing::warn!(host = ?host, "webhook delivery refused: the body is not JSON");
        return (StatusCode::BAD_REQUEST, "body is not JSON\n");
    };
    let first = app
        .seen
        .lock()
        .map(|mut s| s.first_time(delivery, body, app.config.remember))
        .unwrap_or(true);
    if !first {
        return (StatusCode::OK, "duplicate delivery, already handled\n");
    }
    let delivery = short_id(delivery);
    match parser(host)(event, &json, &delivery) {
        Parsed::Trigger(t) => {
            tracing::info!(host = ?host, repo = %t.repo, git_ref = %t.git_ref, sha = %t.sha, pr = ?t.pull_request, delivery = %delivery, "webhook trigger");
            if let Err(e) = app.tx.try_send(t) {
                // Polling will catch up; the sender must not retry into a full queue.
                tracing::warn!(error = %e, "trigger queue full; left to the next poll");
            }
            (StatusCode::ACCEPTED, "queued\n")
        }
        Parsed::Ignored => (
            StatusCode::OK,
            "ignored: not a push or pull-request update\n",
        ),
        Parsed::Malformed => (
            StatusCode::BAD_REQUEST,
            "event is missing the fields lockstep needs\n",
        ),
    }
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn n(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_u64()
}

fn is_zero_sha(sha: &str) -> bool {
    !sha.is_empty() && sha.bytes().all(|b| b == b'0')
}

fn push_trigger(
    host: Host,
    json: &Value,
    repo: Option<&str>,
    sha: Option<&str>,
    delivery: &str,
) -> Parsed {
    match (repo, s(json, &["ref"]), sha) {
        // A deleted branch has nothing to judge.
        (_, _, Some(sha)) if is_zero_sha(sha) => Parsed::Ignored,
        (Some(repo), Some(r), Some(sha)) => Parsed::Trigger(Trigger {
            host,
            repo: repo.to_owned(),
            git_ref: r.to_owned(),
            sha: sha.to_owned(),
            pull_request: None,
            base_ref: None,
            delivery: delivery.to_owned(),
        }),
        _ => Parsed::Malformed,
    }
}

fn github_trigger(event: &str, json: &Value, delivery: &str) -> Parsed {
    let repo = s(json, &["repository", "full_name"]);
    match event {
        "push" => push_trigger(Host::GitHub, json, repo, s(json, &["after"]), delivery),
        "pull_request" => {
            let action = s(json, &["action"]).unwrap_or_default();
            if !matches!(action, "opened" | "synchronize" | "reopened" | "edited") {
                return Parsed::Ignored;
            }
            pr_trigger(
                Host::GitHub,
                repo,
                n(json, &["number"]),
                s(json, &["pull_request", "head", "sha"]),
                s(json, &["pull_request", "base", "ref"]),
                "refs/pull/{}/head",
                delivery,
            )
        }
        _ => Parsed::Ignored,
    }
}

fn gitlab_trigger(event: &str, json: &Value, delivery: &str) -> Parsed {
    let repo = s(json, &["project", "path_with_namespace"]);
    match event {
        "Push Hook" => {
            let sha = s(json, &["checkout_sha"]).or_else(|| s(json, &["after"]));
            push_trigger(Host::GitLab, json, repo, sha, delivery)
        }
        "Merge Request Hook" => {
            let action = s(json, &["object_attributes", "action"]).unwrap_or_default();
            if !matches!(action, "open" | "update" | "reopen") {
                return Parsed::Ignored;
            }
            pr_trigger(
                Host::GitLab,
                repo,
                n(json, &["object_attributes", "iid"]),
                s(json, &["object_attributes", "last_commit", "id"]),
                s(json, &["object_attributes", "target_branch"]),
                "refs/merge-requests/{}/head",
                delivery,
            )
        }
        _ => Parsed::Ignored,
    }
}

fn gitea_trigger(event: &str, json: &Value, delivery: &str) -> Parsed {
    let repo = s(json, &["repository", "full_name"]);
    match event {
        "push" => push_trigger(Host::Gitea, json, repo, s(json, &["after"]), delivery),
        // Gitea names pull-request updates in the event type header
        // (`pull_request_sync`) and in the action (`synchronized`).
        "pull_request" | "pull_request_sync" => {
            let action = s(json, &["action"]).unwrap_or_default();
            if !matches!(action, "opened" | "synchronized" | "reopened" | "edited") {
                return Parsed::Ignored;
            }
            pr_trigger(
                Host::Gitea,
                repo,
                n(json, &["number"]).or_else(|| n(json, &["pull_request", "number"])),
                s(json, &["pull_request", "head", "sha"]),
                s(json, &["pull_request", "base", "ref"]),
                "refs/pull/{}/head",
                delivery,
            )
        }
        _ => Parsed::Ignored,
    }
}

fn pr_trigger(
    host: Host,
    repo: Option<&str>,
    number: Option<u64>,
    sha: Option<&str>,
    base: Option<&str>,
    ref_pattern: &str,
    delivery: &str,
) -> Parsed {
    match (repo, number, sha) {
        (Some(repo), Some(number), Some(sha)) => Parsed::Trigger(Trigger {
            host,
            repo: repo.to_owned(),
            git_ref: ref_pattern.replace("{}", &number.to_string()),
            sha: sha.to_owned(),
            pull_request: Some(number),
            base_ref: base.map(|b| format!("refs/heads/{b}")),
            delivery: delivery.to_owned(),
        }),
        _ => Parsed::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn githubs_documented_signature_vector() {
        // https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
        let secret = Secret::new("It's a Secret to Everybody");
        let digest = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(sign_hex(&secret, b"Hello, World!"), digest);
        assert!(verify_hmac_hex(&secret, b"Hello, World!", digest));
        assert!(!verify_hmac_hex(&secret, b"Hello, World?", digest));
        assert!(!verify_hmac_hex(
            &Secret::new("wrong"),
            b"Hello, World!",
            digest
        ));
        assert!(!verify_hmac_hex(&secret, b"Hello, World!", "not hex"));
        assert!(!verify_hmac_hex(&secret, b"Hello, World!", &digest[..62]));
    }

    #[test]
    fn parse_unverified_reads_each_hosts_headers() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        let push = br#"{"ref":"refs/heads/main","after":"1111111111111111111111111111111111111111",
                        "repository":{"full_name":"ops/fleet"},"project":{"path_with_namespace":"ops/fleet"}}"#;
        // Forgejo's own header names, when Gitea's are absent.
        let h = headers(&[("x-forgejo-event", "push"), ("x-forgejo-delivery", "f1")]);
        let Parsed::Trigger(t) = parse_unverified(Host::Gitea, &h, push) else {
            panic!("a Forgejo push is a trigger");
        };
        assert_eq!(
            (t.delivery.as_str(), t.git_ref.as_str()),
            ("f1", "refs/heads/main")
        );
        // GitLab: the event UUID, else the idempotency key.
        let h = headers(&[("x-gitlab-event", "Push Hook"), ("idempotency-key", "k1")]);
        let Parsed::Trigger(t) = parse_unverified(Host::GitLab, &h, push) else {
            panic!("a GitLab push is a trigger");
        };
        assert_eq!(t.delivery, "k1");
        // Another host's header names are not read.
        let h = headers(&[("x-gitea-event", "push")]);
        assert_eq!(parse_unverified(Host::GitHub, &h, push), Parsed::Ignored);
        let h = headers(&[("x-github-event", "ping")]);
        assert_eq!(
            parse_unverified(Host::GitHub, &h, b"not json"),
            Parsed::Ignored
        );
        let h = headers(&[("x-github-event", "push")]);
        assert_eq!(
            parse_unverified(Host::GitHub, &h, b"not json"),
            Parsed::Malformed
        );
    }

    #[test]
    fn seen_is_bounded() {
        let mut s = Seen::default();
        assert!(s.first_time("a", b"1", 2));
        assert!(!s.first_time("a", b"1", 2));
        assert!(s.first_time("b", b"2", 2));
        assert!(s.first_time("c", b"3", 2));
        assert!(
            s.first_time("a", b"1", 2),
            "a was forgotten once the bound was reached"
        );
        assert_eq!(s.order.len(), 4, "two digests per delivery, bounded");
    }

    #[test]
    fn a_replayed_body_is_a_duplicate_under_any_id_and_memory_stays_flat() {
        let mut s = Seen::default();
        assert!(s.first_time("real-id", b"{\"signed\":1}", 100));
        // The same signed body under 2,000 new 60 KB ids, or none.
        for i in 0..2_000 {
            let id = format!("{i}{}", "x".repeat(60 * 1024));
            assert!(!s.first_time(&id, b"{\"signed\":1}", 100));
        }
        assert!(!s.first_time("", b"{\"signed\":1}", 100));
        assert_eq!(s.digests.len(), 2);
        // Distinct deliveries: at most 2 × remember digests of 32 bytes.
        for i in 0..1_000 {
            s.first_time(
                &format!("{i}{}", "y".repeat(60 * 1024)),
                i.to_string().as_bytes(),
                100,
            );
        }
        assert!(s.digests.len() <= 200 && s.order.len() <= 200);
    }

    #[test]
    fn delivery_ids_are_kept_short() {
        let short = short_id(&"a".repeat(60 * 1024));
        assert!(
            short.ends_with('…') && short.chars().count() == MAX_DELIVERY_ID + 1,
            "{short}"
        );
        assert_eq!(short_id("6f1a-uuid"), "6f1a-uuid");
    }
}
