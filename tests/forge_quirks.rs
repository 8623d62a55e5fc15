//! Host quirks and delivery under trouble, one test each. GitLab cannot run
//! on this machine, and a real Gitea cannot be made to answer 429 or 5xx on
//! cue, so wiremock plays them (a mock, said so): the requests it answers
//! are asserted on method, path, headers and body. GitHub is tested against
//! its own OpenAPI description in `forge_github.rs`; statuses, webhooks and
//! pull requests on a real Gitea in `run_sim.rs` and `plan_propose.rs`.

use std::time::{Duration, Instant};

use lockstep::forge::delivery::{Outcome, RetryPolicy, StatusQueue, deliver};
use lockstep::forge::gitea::Gitea;
use lockstep::forge::github::GitHub;
use lockstep::forge::gitlab::GitLab;
use lockstep::forge::{AnyForge, Forge, State, Status};
use lockstep::secret::Secret;
use wiremock::matchers::{body_partial_json, header, headers, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts: 6,
        base: Duration::from_millis(5),
        cap: Duration::from_millis(40),
    }
}

fn status(desc: &str) -> Status {
    Status {
        state: State::Failure,
        context: "lockstep/eu-de-1".into(),
        description: desc.into(),
        target_url: Some("https://ci.example.com/1".into()),
    }
}

async fn empty_list(server: &MockServer, p: &str) {
    Mock::given(method("GET"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(server)
        .await;
}

const GL_LIST: &str = "/api/v4/projects/group%2Ffleet/repository/commits/0123456789abcdef0123456789abcdef01234567/statuses";
const GL_POST: &str =
    "/api/v4/projects/group%2Ffleet/statuses/0123456789abcdef0123456789abcdef01234567";

fn gitlab(server: &MockServer) -> GitLab {
    GitLab::new(
        &server.uri(),
        "group/fleet",
        Some(Secret::new("glpat-secret")),
    )
    .unwrap()
}

/// A pending whose post waits out a host's 503 is not posted once the
/// commit's newest status in its context became success meanwhile (the new
/// leader's, or a check's in CI): the statuses are read again before every
/// attempt, not once before the first.
#[tokio::test]
async fn a_pending_retried_after_another_writer_settled_the_commit_is_not_posted() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    #[derive(Clone)]
    struct Host(Arc<AtomicUsize>);
    impl wiremock::Respond for Host {
        fn respond(&self, req: &Request) -> ResponseTemplate {
            if req.method.as_str() == "POST" {
                self.0.fetch_add(1, Ordering::SeqCst);
                return ResponseTemplate::new(503);
            }
            // After the first (failed) post, someone else posted success.
            let list = if self.0.load(Ordering::SeqCst) == 0 {
                serde_json::json!([])
            } else {
                serde_json::json!([{"id": 7, "status": "success", "name": "lockstep/eu-de-1", "description": "applied"}])
            };
            ResponseTemplate::new(200).set_body_json(list)
        }
    }
    let server = MockServer::start().await;
    let posts = Arc::new(AtomicUsize::new(0));
    Mock::given(wiremock::matchers::any())
        .respond_with(Host(posts.clone()))
        .mount(&server)
        .await;
    let pending = Status {
        state: State::Pending,
        ..status("applying")
    };
    let out = deliver(&gitlab(&server), &fast(), SHA, &pending)
        .await
        .unwrap();
    assert_eq!(out, Outcome::Settled);
    assert_eq!(
        posts.load(Ordering::SeqCst),
        1,
        "one post, refused; none after"
    );
}

/// An answer larger than any page of statuses (a hostile host, or a proxy
/// in front of it) is refused, not held whole: reading stops at the cap.
#[tokio::test]
async fn an_answer_past_its_bound_is_refused_not_held() {
    let server = MockServer::start().await;
    let huge = format!(
        "[{}]",
        vec!["{\"id\": 1, \"status\": \"success\", \"name\": \"x\"}"; 120_000].join(",")
    );
    assert!(huge.len() > lockstep::forge::MAX_ANSWER);
    Mock::given(method("GET"))
        .and(path(GL_LIST))
        .respond_with(ResponseTemplate::new(200).set_body_string(huge))
        .mount(&server)
        .await;
    let e = gitlab(&server).statuses(SHA).await.unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
    assert!(
        !e.retryable() && !e.kept(),
        "the same answer again is no better"
    );
}

/// GitLab lists a commit's statuses oldest first unless told otherwise;
/// lockstep asks for newest first, as the other hosts list them, so a list
/// cut at its last page keeps the newest (the "already success" check
/// reads them).
#[tokio::test]
async fn gitlab_statuses_are_asked_for_newest_first() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(GL_LIST))
        .and(query_param("order_by", "id"))
        .and(query_param("sort", "desc"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            {"id": 9, "status": "success", "name": "lockstep/eu-de-1", "description": "applied"}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let list = gitlab(&server).statuses(SHA).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].state, "success");
}

#[tokio::test]
async fn gitlab_posts_with_its_own_vocabulary() {
    let server = MockServer::start().await;
    empty_list(&server, GL_LIST).await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .and(header("PRIVATE-TOKEN", "glpat-secret"))
        .and(body_partial_json(serde_json::json!({
            "state": "failed", "name": "lockstep/eu-de-1", "description": "refused: x",
            "target_url": "https://ci.example.com/1"
        })))
        .respond_with(ResponseTemplate::new(201).set_body_json(serde_json::json!({"id": 1})))
        .expect(1)
        .mount(&server)
        .await;
    let out = deliver(&gitlab(&server), &fast(), SHA, &status("refused: x"))
        .await
        .unwrap();
    assert_eq!(out, Outcome::Posted);
}

#[tokio::test]
async fn gitlab_cannot_transition_counts_as_done() {
    let server = MockServer::start().await;
    empty_list(&server, GL_LIST).await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(400).set_body_json(
            serde_json::json!({"message": "Cannot transition status via :drop from :failed (Reasons: ...)"}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    let out = deliver(&gitlab(&server), &fast(), SHA, &status("refused: x"))
        .await
        .unwrap();
    assert_eq!(out, Outcome::Posted);
}

#[tokio::test]
async fn gitlab_409_is_retried() {
    let server = MockServer::start().await;
    empty_list(&server, GL_LIST).await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(409).set_body_string("conflict"))
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    deliver(&gitlab(&server), &fast(), SHA, &status("d"))
        .await
        .unwrap();
}

#[tokio::test]
async fn other_4xx_are_not_retried_and_never_show_the_token() {
    let server = MockServer::start().await;
    empty_list(&server, GL_LIST).await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(403).set_body_string("insufficient_scope"))
        .expect(1)
        .mount(&server)
        .await;
    let err = deliver(&gitlab(&server), &fast(), SHA, &status("d"))
        .await
        .unwrap_err();
    assert!(!err.retryable());
    let text = format!("{err} {err:?}");
    assert!(
        text.contains("403") && text.contains("insufficient_scope"),
        "{text}"
    );
    assert!(!text.contains("glpat-secret"), "the token leaked: {text}");
}

#[tokio::test]
async fn retry_after_on_429_is_honoured() {
    let server = MockServer::start().await;
    empty_list(
        &server,
        "/api/v1/repos/octo/fleet/commits/0123456789abcdef0123456789abcdef01234567/statuses",
    )
    .await;
    Mock::given(method("POST"))
        .and(path(
            "/api/v1/repos/octo/fleet/statuses/0123456789abcdef0123456789abcdef01234567",
        ))
        .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "1"))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(
            "/api/v1/repos/octo/fleet/statuses/0123456789abcdef0123456789abcdef01234567",
        ))
        .and(header("Authorization", "token gitea-secret"))
        .and(body_partial_json(
            serde_json::json!({"state": "failure", "context": "lockstep/eu-de-1"}),
        ))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let forge = Gitea::new(
        &server.uri(),
        "octo/fleet",
        Some(Secret::new("gitea-secret")),
    )
    .unwrap();
    let started = Instant::now();
    deliver(&forge, &fast(), SHA, &status("d")).await.unwrap();
    // The policy alone would have waited at most 40 ms.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn bursts_of_5xx_are_ridden_out() {
    let server = MockServer::start().await;
    empty_list(&server, GL_LIST).await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(4)
        .expect(4)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    deliver(&gitlab(&server), &fast(), SHA, &status("d"))
        .await
        .unwrap();
    // More failures than attempts: the error comes back, retryable.
    let server = MockServer::start().await;
    empty_list(&server, GL_LIST).await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(502))
        .expect(6)
        .mount(&server)
        .await;
    let err = deliver(&gitlab(&server), &fast(), SHA, &status("d"))
        .await
        .unwrap_err();
    assert!(err.retryable());
}

#[tokio::test]
async fn github_rate_limit_403_waits_for_the_reset() {
    let server = MockServer::start().await;
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    Mock::given(method("GET"))
        .and(path(format!("/repos/octo/fleet/commits/{SHA}/statuses")))
        .respond_with(
            ResponseTemplate::new(403)
                .insert_header("x-ratelimit-remaining", "0")
                .insert_header("x-ratelimit-reset", reset.to_string().as_str())
                .set_body_string("API rate limit exceeded"),
        )
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    empty_list(
        &server,
        &format!("/repos/octo/fleet/commits/{SHA}/statuses"),
    )
    .await;
    Mock::given(method("POST"))
        .and(path(format!("/repos/octo/fleet/statuses/{SHA}")))
        .and(header("Authorization", "Bearer ghp-secret"))
        .and(headers(
            "Accept",
            vec!["application/vnd.github+json", "application/json"],
        ))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let forge = GitHub::new(&server.uri(), "octo/fleet", Some(Secret::new("ghp-secret"))).unwrap();
    let started = Instant::now();
    deliver(&forge, &fast(), SHA, &status("d")).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for the reset"
    );
}

#[tokio::test]
async fn an_equal_status_is_not_posted_again_and_fields_are_fitted() {
    let server = MockServer::start().await;
    let long = "refused: ".to_owned() + &"x".repeat(300);
    let fitted = lockstep::forge::shorten(&long, 140);
    Mock::given(method("GET"))
        .and(path(format!("/repos/octo/fleet/commits/{SHA}/statuses")))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            {"id": 9, "state": "failure", "context": "lockstep/eu-de-1", "description": fitted, "target_url": "https://ci.example.com/1"},
            {"id": 3, "state": "success", "context": "lockstep/eu-de-1", "description": "older", "target_url": null}
        ])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .expect(0)
        .mount(&server)
        .await;
    let forge = GitHub::new(&server.uri(), "octo/fleet", None).unwrap();
    let out = deliver(&forge, &fast(), SHA, &status(&long)).await.unwrap();
    assert_eq!(out, Outcome::AlreadyThere);
    assert_eq!(forge.limits().description, 140);
}

#[tokio::test]
async fn an_outage_delays_statuses_and_the_newest_wins() {
    let server = MockServer::start().await;
    empty_list(&server, GL_LIST).await;
    // Down for the first eight attempts.
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(8)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(GL_POST))
        .respond_with(ResponseTemplate::new(201))
        .mount(&server)
        .await;
    let forge = gitlab(&server);
    let policy = RetryPolicy {
        attempts: 2,
        ..fast()
    };
    let queue = StatusQueue::new(100);
    queue.push(SHA, status("first")).await;
    let r = queue.drain(&forge, &policy).await;
    assert!(r.deferred && r.posted == 0);
    // While the host is down, newer statuses for the same context replace older ones.
    queue.push(SHA, status("second")).await;
    queue.push(SHA, status("third")).await;
    assert_eq!(queue.len().await, 1);
    let other = Status {
        context: "lockstep/eu-de-1/compute/nova".into(),
        ..status("progress")
    };
    queue.push(SHA, other).await;
    let mut rounds = 0;
    loop {
        let r = queue.drain(&forge, &policy).await;
        rounds += 1;
        if !r.deferred {
            assert_eq!(r.posted, 2, "{r:?}");
            break;
        }
        assert!(rounds < 20, "the host came back");
    }
    let posts: Vec<serde_json::Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r: &&Request| r.method.as_str() == "POST" && r.url.path() == GL_POST)
        .filter_map(|r| serde_json::from_slice(&r.body).ok())
        .collect();
    let delivered: Vec<&str> = posts[8..]
        .iter()
        .filter_map(|p| p["description"].as_str())
        .collect();
    assert_eq!(
        delivered,
        ["third", "progress"],
        "late, in order, newest per context"
    );
    assert!(
        !posts.iter().any(|p| p["description"] == "second"),
        "superseded, never sent"
    );
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest_never_the_newest() {
    let q = StatusQueue::new(2);
    for i in 0..5 {
        let s = Status {
            context: format!("lockstep/c/ns/o{i}"),
            ..status("x")
        };
        q.push(SHA, s).await;
    }
    assert_eq!(q.len().await, 2);
    assert_eq!(q.dropped().await, 3);
}

#[test]
fn bad_configuration_is_refused_up_front() {
    assert!(GitHub::new("http://127.0.0.1:1", "no-slash", None).is_err());
    assert!(GitHub::new("http://127.0.0.1:1", "a/b/c", None).is_err());
    assert!(Gitea::new("http://127.0.0.1:1", "../x", None).is_err());
    assert!(GitLab::new("http://127.0.0.1:1", "group/../x", None).is_err());
    assert!(GitLab::new("http://127.0.0.1:1", "12345", None).is_ok());
}

#[tokio::test]
async fn a_sha_that_is_not_a_commit_id_never_reaches_a_url() {
    let forge = GitHub::new("http://127.0.0.1:1", "octo/fleet", None).unwrap();
    let err = forge.post("../../admin", &status("x")).await.unwrap_err();
    assert!(!err.retryable());
    assert!(err.to_string().contains("not a full commit id"));
}

/// A host (or the sign-in proxy in front of it) that answers a status POST
/// with a redirect: reqwest would follow it as a GET, land on a 200 page and
/// count the status delivered. lockstep follows no redirect: the delivery
/// fails (not retried), says where the host pointed, and never GETs it.
#[tokio::test]
async fn a_redirected_write_is_an_error_never_a_delivery() {
    for host in ["github", "gitlab", "gitea"] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/sso/login"))
            .respond_with(ResponseTemplate::new(200).set_body_string("<html>Sign in</html>"))
            .expect(0)
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string("[]"))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(302)
                    .insert_header("Location", format!("{}/sso/login", server.uri())),
            )
            .expect(1)
            .mount(&server)
            .await;
        let token = Some(Secret::new("host-secret"));
        let forge = match host {
            "github" => AnyForge::GitHub(GitHub::new(&server.uri(), "octo/fleet", token).unwrap()),
            "gitlab" => AnyForge::GitLab(GitLab::new(&server.uri(), "group/fleet", token).unwrap()),
            _ => AnyForge::Gitea(Gitea::new(&server.uri(), "octo/fleet", token).unwrap()),
        };
        let err = deliver(&forge, &fast(), SHA, &status("d"))
            .await
            .expect_err(host);
        assert!(!err.retryable(), "{host}: {err}");
        let text = err.to_string();
        assert!(
            text.contains("302") && text.contains("redirect") && text.contains("/sso/login"),
            "{host}: {text}"
        );
        assert!(!text.contains("host-secret"), "{host}: {text}");
        server.verify().await;
    }
}

/// A success never goes back to pending: over a commit's success, a later
/// pending (a restart judging again, the daemon taking over a commit a
/// pull request's check marked) is not posted, read from the host itself so
/// a restart keeps it too. A failure is posted (a person must see it), and
/// a plan's progress moves on (objects join a finished plan).
#[tokio::test]
async fn a_success_never_goes_back_to_pending() {
    for (context, posts) in [
        ("lockstep/eu-de-1", 0),
        ("lockstep/eu-de-1/compute/nova", 0),
        ("lockstep/eu-de-1/plan/rings", 1),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path(format!("/repos/octo/fleet/commits/{SHA}/statuses")))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
                {"id": 9, "state": "success", "context": context, "description": "applied", "target_url": null},
                {"id": 3, "state": "pending", "context": context, "description": "older", "target_url": null}
            ])))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(201))
            .expect(posts)
            .mount(&server)
            .await;
        let forge = GitHub::new(&server.uri(), "octo/fleet", None).unwrap();
        let mut s = status("accepted, applying: glance 2026.1→2026.2");
        s.state = State::Pending;
        s.context = context.into();
        let out = deliver(&forge, &fast(), SHA, &s).await.unwrap();
        let want = if posts == 0 {
            Outcome::Settled
        } else {
            Outcome::Posted
        };
        assert_eq!(out, want, "{context}");
        // A failure over it, and a success with another description, are
        // posted.
        let mut failed = status("apply refused: glance: conflict");
        failed.context = context.into();
        let mut ok = status("applied again");
        ok.state = State::Success;
        ok.context = context.into();
        server.reset().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
                {"id": 9, "state": "success", "context": context, "description": "applied", "target_url": null}
            ])))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(201))
            .expect(2)
            .mount(&server)
            .await;
        for s in [&failed, &ok] {
            assert_eq!(
                deliver(&forge, &fast(), SHA, s).await.unwrap(),
                Outcome::Posted,
                "{context}: {}",
                s.description
            );
        }
        server.verify().await;
    }
}

/// A commit a large hop touched carries more statuses than one page holds
/// (a context per object, several states each). The delivery reads every
/// page the host says follows (`Link: rel="next"`), building each request
/// itself: the link's own URL, here on another server, is never fetched,
/// since the token would go with it. So an object's success on page 2 is
/// seen and no pending goes over it, on each host's own pagination
/// parameters.
#[tokio::test]
async fn every_page_of_statuses_is_read_and_the_link_never_followed() {
    let elsewhere = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .expect(0)
        .mount(&elsewhere)
        .await;
    let context = "lockstep/eu-de-1/compute/nova";
    // (host, list path, page size parameter, size, status field, context field)
    let hosts = [
        (
            "github",
            format!("/repos/octo/fleet/commits/{SHA}/statuses"),
            "per_page",
            100,
            "state",
            "context",
        ),
        (
            "gitea",
            format!("/api/v1/repos/octo/fleet/commits/{SHA}/statuses"),
            "limit",
            50,
            "status",
            "context",
        ),
        (
            "gitlab",
            GL_LIST.to_owned(),
            "per_page",
            100,
            "status",
            "name",
        ),
    ];
    for (host, list, size_param, size, state, name) in hosts {
        let server = MockServer::start().await;
        let page = |items: Vec<serde_json::Value>, next: Option<u32>| {
            let mut r = ResponseTemplate::new(200).set_body_json(items);
            if let Some(n) = next {
                r = r.insert_header(
                    "Link",
                    format!(
                        "<{}{list}?page={n}>; rel=\"next\", <{}{list}?page=9>; rel=\"last\"",
                        elsewhere.uri(),
                        elsewhere.uri()
                    )
                    .as_str(),
                );
            }
            r
        };
        let others: Vec<serde_json::Value> = (0..size)
            .map(|i| {
                serde_json::json!({"id": 1000 - i, state: "success", name: format!("lockstep/eu-de-1/ns/o{i}"), "description": "applied"})
            })
            .collect();
        Mock::given(method("GET"))
            .and(path(list.clone()))
            .and(query_param("page", "1"))
            .and(query_param(size_param, size.to_string()))
            .respond_with(page(others, Some(2)))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path(list.clone()))
            .and(query_param("page", "2"))
            .respond_with(page(
                vec![serde_json::json!({"id": 7, state: "success", name: context, "description": "applied"})],
                None,
            ))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(201))
            .expect(0)
            .mount(&server)
            .await;
        let forge = match host {
            "github" => AnyForge::GitHub(GitHub::new(&server.uri(), "octo/fleet", None).unwrap()),
            "gitea" => AnyForge::Gitea(Gitea::new(&server.uri(), "octo/fleet", None).unwrap()),
            _ => AnyForge::GitLab(GitLab::new(&server.uri(), "group/fleet", None).unwrap()),
        };
        let mut s = status("accepted, applying: nova 2026.1→2026.2");
        s.state = State::Pending;
        s.context = context.into();
        assert_eq!(
            deliver(&forge, &fast(), SHA, &s).await.unwrap(),
            Outcome::Settled,
            "{host}"
        );
        server.verify().await;
    }
    elsewhere.verify().await;
}

/// When to stop reading pages: a host that always says another full page
/// follows is read ten pages deep, no more, and the status still goes out;
/// a short page ends the list even when its header links a next one
/// (Prism serves GitHub's example `Link` on every answer); a Gitea whose
/// administrator caps pages below what lockstep asks goes on while its
/// `X-Total-Count` says more are there.
#[tokio::test]
async fn pages_are_read_while_full_and_linked_and_ten_at_most() {
    let list = format!("/repos/octo/fleet/commits/{SHA}/statuses");
    let other = |i: usize| serde_json::json!({"id": i, "state": "success", "context": format!("lockstep/o{i}"), "description": "x"});
    let next = "<https://api.github.com/x?page=2>; rel=\"next\"";
    // (items a page, X-Total-Count, pages read)
    for (items, total, reads) in [(100, None, 10), (1, None, 1), (30, Some(40), 2)] {
        let server = MockServer::start().await;
        let path_of = if total.is_some() {
            format!("/api/v1/repos/octo/fleet/commits/{SHA}/statuses")
        } else {
            list.clone()
        };
        let mut answer = ResponseTemplate::new(200)
            .set_body_json((0..items).map(other).collect::<Vec<_>>())
            .insert_header("Link", next);
        if let Some(t) = total {
            answer = answer.insert_header("X-Total-Count", t.to_string().as_str());
        }
        Mock::given(method("GET"))
            .and(path(path_of))
            .respond_with(answer)
            .expect(reads)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(201))
            .expect(1)
            .mount(&server)
            .await;
        let forge = if total.is_some() {
            AnyForge::Gitea(Gitea::new(&server.uri(), "octo/fleet", None).unwrap())
        } else {
            AnyForge::GitHub(GitHub::new(&server.uri(), "octo/fleet", None).unwrap())
        };
        assert_eq!(
            deliver(&forge, &fast(), SHA, &status("refused"))
                .await
                .unwrap(),
            Outcome::Posted
        );
        server.verify().await;
    }
}

/// A token file rotated while lockstep runs (a mounted Kubernetes Secret
/// the kubelet swaps, a person's rewrite) is used from the next request
/// on: before, the token was read once at start, and every status after a
/// rotation was refused 401 until a restart. A file rewritten into
/// something that is no token (two lines) is not taken: the token read
/// before stays.
#[tokio::test]
async fn a_rotated_token_file_is_used_without_a_restart() {
    let server = MockServer::start().await;
    let list = format!("/repos/octo/fleet/commits/{SHA}/statuses");
    for token in ["ghp-old", "ghp-bad"] {
        Mock::given(method("GET"))
            .and(path(list.as_str()))
            .and(header("Authorization", format!("Bearer {token}").as_str()))
            .respond_with(
                ResponseTemplate::new(401)
                    .set_body_json(serde_json::json!({"message": "Bad credentials"})),
            )
            .mount(&server)
            .await;
    }
    Mock::given(method("GET"))
        .and(path(list.as_str()))
        .and(header("Authorization", "Bearer ghp-new"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(format!("/repos/octo/fleet/statuses/{SHA}")))
        .and(header("Authorization", "Bearer ghp-new"))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;

    // A Secret's mount: `token` links to `..data/token`, and `..data` to
    // the current version's directory, swapped in one rename.
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path();
    let version = |name: &str, token: &str| {
        std::fs::create_dir(mount.join(name)).unwrap();
        std::fs::write(mount.join(name).join("token"), token).unwrap();
        std::os::unix::fs::symlink(name, mount.join("..data_tmp")).unwrap();
        std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    };
    version("..v1", "ghp-old\n");
    std::os::unix::fs::symlink("..data/token", mount.join("token")).unwrap();
    let token = lockstep::secret::token(Some(&mount.join("token")), None)
        .unwrap()
        .unwrap();
    let forge = GitHub::new(&server.uri(), "octo/fleet", Some(token)).unwrap();
    let err = deliver(&forge, &fast(), SHA, &status("d"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");

    // Rewritten into two lines: not a token, not taken.
    version("..v2", "ghp-bad\nghp-new\n");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let err = deliver(&forge, &fast(), SHA, &status("d"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
    assert!(!err.to_string().contains("ghp-"), "{err}");

    // Rotated: the next request carries the new token.
    version("..v3", "ghp-new\n");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    deliver(&forge, &fast(), SHA, &status("d"))
        .await
        .expect("delivered with the rotated token");
}
