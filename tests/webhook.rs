//! The webhook receiver over real HTTP: GitHub's own example payloads (npm
//! `@octokit/webhooks-examples`, installed with the GitHub peer), signed in
//! the test; GitLab and Gitea payloads in their documented shapes.

use std::path::Path;
use std::time::Duration;

use lockstep::secret::Secret;
use lockstep::webhook::{Host, Trigger, WebhookConfig, admitted, router, sign_hex};
use serde_json::Value;
use tokio::sync::mpsc;

struct Server {
    url: String,
    rx: mpsc::Receiver<Trigger>,
}

async fn serve(config: WebhookConfig) -> Server {
    let (tx, rx) = mpsc::channel(64);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let app = admitted(router(config.clone(), tx), &config);
        axum::serve(listener, app).await.unwrap();
    });
    Server { url, rx }
}

fn config() -> WebhookConfig {
    WebhookConfig {
        github: Some(Secret::new("gh-hook-secret")),
        gitlab: Some(Secret::new("gl-hook-token")),
        gitea: Some(Secret::new("gitea-hook-secret")),
        max_body: 256 * 1024,
        remember: 100,
        in_flight: 1024 * 1024,
        // Long enough for the budget's checks below on a slow machine,
        // while bodies are held open.
        body_deadline: Duration::from_secs(6),
    }
}

/// GitHub's example payload for an event, chosen by a predicate.
fn github_example(event: &str, pick: impl Fn(&Value) -> bool) -> Vec<u8> {
    let index = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "tests/peers/github/node_modules/@octokit/webhooks-examples/api.github.com/index.json",
    );
    let text = std::fs::read_to_string(&index).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `npm ci --prefix tests/peers/github` (see README)",
            index.display()
        )
    });
    let all: Value = serde_json::from_str(&text).unwrap();
    let examples = all
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == event)
        .unwrap()["examples"]
        .as_array()
        .unwrap()
        .clone();
    let ex = examples.into_iter().find(|e| pick(e)).expect("an example");
    serde_json::to_vec(&ex).unwrap()
}

async fn send(url: &str, path: &str, headers: &[(&str, String)], body: Vec<u8>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

fn gh_headers(event: &str, delivery: &str, sig: String) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", event.to_owned()),
        ("X-GitHub-Delivery", delivery.to_owned()),
        ("X-Hub-Signature-256", format!("sha256={sig}")),
        ("Content-Type", "application/json".to_owned()),
    ]
}

async fn next(rx: &mut mpsc::Receiver<Trigger>) -> Trigger {
    tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .expect("a trigger arrives")
        .expect("channel open")
}

fn assert_quiet(rx: &mut mpsc::Receiver<Trigger>) {
    assert!(rx.try_recv().is_err(), "no trigger expected");
}

#[tokio::test]
async fn github_push_and_pull_request_become_triggers() {
    let mut s = serve(config()).await;
    let secret = Secret::new("gh-hook-secret");

    let push = github_example("push", |e| e["ref"] == "refs/heads/master");
    let (code, _) = send(
        &s.url,
        "/hooks/github",
        &gh_headers("push", "d-1", sign_hex(&secret, &push)),
        push,
    )
    .await;
    assert_eq!(code, 202);
    let t = next(&mut s.rx).await;
    assert_eq!(t.host, Host::GitHub);
    assert_eq!(t.repo, "Codertocat/Hello-World");
    assert_eq!(t.git_ref, "refs/heads/master");
    assert_eq!(t.sha, "6113728f27ae82c7b1a177c8d03f9e96e0adf246");
    assert_eq!(t.pull_request, None);

    let pr = github_example("pull_request", |e| e["action"] == "synchronize");
    let (code, _) = send(
        &s.url,
        "/hooks/github",
        &gh_headers("pull_request", "d-2", sign_hex(&secret, &pr)),
        pr,
    )
    .await;
    assert_eq!(code, 202);
    let t = next(&mut s.rx).await;
    assert_eq!(t.pull_request, Some(2));
    assert_eq!(t.sha, "ec26c3e57ca3a959ca5aad62de7213c562f8c821");
    assert_eq!(t.git_ref, "refs/pull/2/head");
    assert_eq!(t.base_ref.as_deref(), Some("refs/heads/master"));

    // A closed pull request and an unrelated event are acknowledged, not handed on.
    let closed = github_example("pull_request", |e| e["action"] == "closed");
    let (code, _) = send(
        &s.url,
        "/hooks/github",
        &gh_headers("pull_request", "d-3", sign_hex(&secret, &closed)),
        closed,
    )
    .await;
    assert_eq!(code, 200);
    let issues = github_example("issues", |_| true);
    let (code, body) = send(
        &s.url,
        "/hooks/github",
        &gh_headers("issues", "d-4", sign_hex(&secret, &issues)),
        issues,
    )
    .await;
    assert_eq!((code, body.starts_with("ignored")), (200, true));
    // A deleted tag (after = 000…) has nothing to judge.
    let deleted = github_example("push", |e| e["deleted"] == true);
    let (code, _) = send(
        &s.url,
        "/hooks/github",
        &gh_headers("push", "d-5", sign_hex(&secret, &deleted)),
        deleted,
    )
    .await;
    assert_eq!(code, 200);
    assert_quiet(&mut s.rx);
}

#[tokio::test]
async fn github_signatures_are_checked() {
    let mut s = serve(config()).await;
    let secret = Secret::new("gh-hook-secret");
    let push = github_example("push", |e| e["ref"] == "refs/heads/master");
    let good = sign_hex(&secret, &push);

    let mut tampered = push.clone();
    let at = tampered.iter().position(|b| *b == b'6').unwrap();
    tampered[at] = b'7';
    let (code, _) = send(
        &s.url,
        "/hooks/github",
        &gh_headers("push", "t-1", good.clone()),
        tampered,
    )
    .await;
    assert_eq!(code, 401, "tampered body");

    let wrong = sign_hex(&Secret::new("not-the-secret"), &push);
    let (code, _) = send(
        &s.url,
        "/hooks/github",
        &gh_headers("push", "t-2", wrong),
        push.clone(),
    )
    .await;
    assert_eq!(code, 401, "wrong secret");

    let (code, _) = send(
        &s.url,
        "/hooks/github",
        &[("X-GitHub-Event", "push".into())],
        push.clone(),
    )
    .await;
    assert_eq!(code, 401, "missing signature");

    let sha1 = vec![
        ("X-GitHub-Event", "push".to_owned()),
        ("X-Hub-Signature", format!("sha1={good}")),
    ];
    let (code, _) = send(&s.url, "/hooks/github", &sha1, push.clone()).await;
    assert_eq!(code, 401, "only SHA-256 signatures count");
    assert_quiet(&mut s.rx);

    // GitHub's documented test vector is accepted over HTTP (then refused as
    // not JSON, which proves the signature passed).
    let mut cfg = config();
    cfg.github = Some(Secret::new("It's a Secret to Everybody"));
    let v = serve(cfg).await;
    let headers = gh_headers(
        "push",
        "vector",
        "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".into(),
    );
    let (code, body) = send(&v.url, "/hooks/github", &headers, b"Hello, World!".to_vec()).await;
    assert_eq!((code, body.as_str()), (400, "body is not JSON\n"));
}

#[tokio::test]
async fn replays_are_deduplicated_and_bodies_bounded() {
    let mut s = serve(config()).await;
    let secret = Secret::new("gh-hook-secret");
    let push = github_example("push", |e| e["ref"] == "refs/heads/master");
    let h = gh_headers("push", "same-delivery", sign_hex(&secret, &push));
    assert_eq!(send(&s.url, "/hooks/github", &h, push.clone()).await.0, 202);
    next(&mut s.rx).await;
    let (code, body) = send(&s.url, "/hooks/github", &h, push.clone()).await;
    assert_eq!(code, 200);
    assert!(body.contains("duplicate"));
    assert_quiet(&mut s.rx);

    // The same signed body under a fresh delivery id (the id is not
    // signed) is a replay too.
    let h = gh_headers("push", "fresh-id-0", sign_hex(&secret, &push));
    let (code, body) = send(&s.url, "/hooks/github", &h, push.clone()).await;
    assert_eq!((code, body.contains("duplicate")), (200, true));
    assert_quiet(&mut s.rx);

    // A replay with a bad signature does not even count as seen.
    let mut other: serde_json::Value = serde_json::from_slice(&push).unwrap();
    other["after"] = "1111111111111111111111111111111111111111".into();
    let other = serde_json::to_vec(&other).unwrap();
    let mut bad = gh_headers("push", "fresh-id", "00".repeat(32));
    assert_eq!(
        send(&s.url, "/hooks/github", &bad, other.clone()).await.0,
        401
    );
    bad[2].1 = format!("sha256={}", sign_hex(&secret, &other));
    assert_eq!(
        send(&s.url, "/hooks/github", &bad, other.clone()).await.0,
        202
    );
    next(&mut s.rx).await;

    let huge = vec![b' '; 300 * 1024];
    let h = gh_headers("push", "big", sign_hex(&secret, &huge));
    assert_eq!(send(&s.url, "/hooks/github", &h, huge).await.0, 413);
    assert_quiet(&mut s.rx);
}

#[tokio::test]
async fn gitlab_push_and_merge_request() {
    let mut s = serve(config()).await;
    let push = serde_json::json!({
        "object_kind": "push", "ref": "refs/heads/main",
        "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
        "after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "checkout_sha": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "project": {"id": 15, "path_with_namespace": "platform/fleet"}
    });
    let headers = |event: &str, token: &str, id: &str| {
        vec![
            ("X-Gitlab-Event", event.to_owned()),
            ("X-Gitlab-Token", token.to_owned()),
            ("X-Gitlab-Event-UUID", id.to_owned()),
        ]
    };
    let body = serde_json::to_vec(&push).unwrap();
    assert_eq!(
        send(
            &s.url,
            "/hooks/gitlab",
            &headers("Push Hook", "wrong", "u1"),
            body.clone()
        )
        .await
        .0,
        401
    );
    assert_eq!(
        send(
            &s.url,
            "/hooks/gitlab",
            &headers("Push Hook", "gl-hook-token", "u1"),
            body
        )
        .await
        .0,
        202
    );
    let t = next(&mut s.rx).await;
    assert_eq!(
        (t.host, t.repo.as_str(), t.sha.as_str()),
        (
            Host::GitLab,
            "platform/fleet",
            "da1560886d4f094c3e6c9ef40349f7d38b5d27d7"
        )
    );

    let mr = serde_json::json!({
        "object_kind": "merge_request",
        "project": {"path_with_namespace": "platform/fleet"},
        "object_attributes": {"iid": 7, "action": "update", "source_branch": "upgrade", "target_branch": "main",
                              "last_commit": {"id": "b83d6e391c22777fca1ed3012fce84f633d7fed0"}}
    });
    let body = serde_json::to_vec(&mr).unwrap();
    assert_eq!(
        send(
            &s.url,
            "/hooks/gitlab",
            &headers("Merge Request Hook", "gl-hook-token", "u2"),
            body
        )
        .await
        .0,
        202
    );
    let t = next(&mut s.rx).await;
    assert_eq!(t.git_ref, "refs/merge-requests/7/head");
    assert_eq!(t.pull_request, Some(7));
    assert_eq!(t.base_ref.as_deref(), Some("refs/heads/main"));
}

#[tokio::test]
async fn gitea_push_and_pull_request_sync() {
    let mut s = serve(config()).await;
    let secret = Secret::new("gitea-hook-secret");
    let pr = serde_json::json!({
        "action": "synchronized", "number": 3,
        "pull_request": {"number": 3, "head": {"ref": "upgrade", "sha": "4f2a9c1e0b7d3a6f8e5c2b1d9a0f7e6c5b4a3d2e"},
                         "base": {"ref": "main"}},
        "repository": {"full_name": "ops/fleet"}
    });
    let body = serde_json::to_vec(&pr).unwrap();
    let headers = |sig: String, id: &str| {
        vec![
            ("X-Gitea-Event", "pull_request".to_owned()),
            ("X-Gitea-Event-Type", "pull_request_sync".to_owned()),
            ("X-Gitea-Delivery", id.to_owned()),
            ("X-Gitea-Signature", sig),
        ]
    };
    // Gitea's signature is bare hex, no "sha256=" prefix.
    let prefixed = format!("sha256={}", sign_hex(&secret, &body));
    assert_eq!(
        send(
            &s.url,
            "/hooks/gitea",
            &headers(prefixed, "g0"),
            body.clone()
        )
        .await
        .0,
        401
    );
    assert_eq!(
        send(
            &s.url,
            "/hooks/gitea",
            &headers(sign_hex(&secret, &body), "g1"),
            body
        )
        .await
        .0,
        202
    );
    let t = next(&mut s.rx).await;
    assert_eq!(
        (t.host, t.pull_request, t.git_ref.as_str()),
        (Host::Gitea, Some(3), "refs/pull/3/head")
    );

    let push = serde_json::json!({"ref": "refs/heads/main", "after": "1111111111111111111111111111111111111111",
                                  "repository": {"full_name": "ops/fleet"}});
    let body = serde_json::to_vec(&push).unwrap();
    let h = vec![
        ("X-Gitea-Event", "push".to_owned()),
        ("X-Gitea-Delivery", "g2".to_owned()),
        ("X-Gitea-Signature", sign_hex(&secret, &body)),
    ];
    assert_eq!(send(&s.url, "/hooks/gitea", &h, body).await.0, 202);
    assert_eq!(next(&mut s.rx).await.git_ref, "refs/heads/main");
}

#[tokio::test]
async fn unconfigured_hosts_and_a_full_channel() {
    let cfg = WebhookConfig {
        gitlab: None,
        ..config()
    };
    let (tx, mut rx) = mpsc::channel(1);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let app = admitted(router(cfg.clone(), tx), &cfg);
        axum::serve(listener, app).await.unwrap()
    });
    assert_eq!(
        send(
            &url,
            "/hooks/gitlab",
            &[("X-Gitlab-Token", "x".into())],
            b"{}".to_vec()
        )
        .await
        .0,
        404
    );
    // The channel holds one; the second delivery still answers 2xx (polling catches up).
    let secret = Secret::new("gh-hook-secret");
    let push = github_example("push", |e| e["ref"] == "refs/heads/master");
    for (id, after) in [("f1", "1"), ("f2", "2")] {
        // Two distinct deliveries (distinct bodies: a body seen before is a replay).
        let mut e: serde_json::Value = serde_json::from_slice(&push).unwrap();
        e["after"] = after.repeat(40).into();
        let body = serde_json::to_vec(&e).unwrap();
        let h = gh_headers("push", id, sign_hex(&secret, &body));
        assert_eq!(send(&url, "/hooks/github", &h, body).await.0, 202);
    }
    assert!(rx.try_recv().is_ok());
    assert!(rx.try_recv().is_err());
}

/// A raw request over TCP: the head is written, then `body`; the answer's
/// status code, or `None` when the server closed without one.
async fn raw(url: &str, head: String, body: &[u8]) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(head.as_bytes()).await.ok()?;
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    std::str::from_utf8(out.get(9..12)?).ok()?.parse().ok()
}

/// What the headers alone refuse is answered before a byte of the body is
/// read; bodies held at once share one budget, counted as their bytes
/// arrive, past which a delivery is answered 503; a body that does not
/// arrive in time is answered 408; a delivery sent as a form is refused 415 and not
/// remembered, so its redelivery as JSON is taken.
#[tokio::test]
async fn bodies_are_read_only_for_signed_deliveries_within_the_budget() {
    let mut s = serve(config()).await;
    let hook = |headers: &str, len: usize| {
        format!(
            "POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n{headers}Content-Length: {len}\r\n\r\n"
        )
    };
    // Unsigned, badly shaped, or unconfigured: answered at once, though the
    // declared body never comes.
    for (headers, code) in [
        ("", 401),
        ("X-Hub-Signature-256: sha256=00\r\n", 401),
        ("X-Hub-Signature-256: sha1=00\r\n", 401),
    ] {
        let t = std::time::Instant::now();
        assert_eq!(
            raw(&s.url, hook(headers, 200_000), b"").await,
            Some(code),
            "{headers:?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{headers:?} waited for the body"
        );
    }
    let gitlab = "POST /hooks/gitlab HTTP/1.1\r\nHost: x\r\nX-Gitlab-Token: wrong\r\nContent-Length: 200000\r\n\r\n";
    assert_eq!(
        raw(&s.url, gitlab.into(), b"").await,
        Some(401),
        "GitLab's token is in its headers"
    );
    let big = hook(
        &format!("X-Hub-Signature-256: sha256={}\r\n", "0".repeat(64)),
        300_000,
    );
    assert_eq!(
        raw(&s.url, big, b"").await,
        Some(413),
        "declared over max_body"
    );

    // Bodies count as their bytes arrive: four connections that declare
    // 262 KB and send a thousand bytes hold four thousand, and a signed
    // delivery beside them is taken. (Before, they held the whole budget.)
    let forged = format!("X-Hub-Signature-256: sha256={}\r\n", "ab".repeat(32));
    let addr = s.url.trim_start_matches("http://").to_owned();
    let hold = |sent: usize| {
        let (addr, head) = (addr.clone(), hook(&forged, 262_100));
        async move {
            use tokio::io::AsyncWriteExt;
            let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
            c.write_all(head.as_bytes()).await.unwrap();
            c.write_all(&vec![b' '; sent]).await.unwrap();
            c
        }
    };
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(hold(1000).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let secret = Secret::new("gh-hook-secret");
    let push = github_example("push", |e| e["ref"] == "refs/heads/master");
    let mut beside: Value = serde_json::from_slice(&push).unwrap();
    beside["after"] = "3333333333333333333333333333333333333333".into();
    let beside = serde_json::to_vec(&beside).unwrap();
    let h = gh_headers("push", "beside-the-trickle", sign_hex(&secret, &beside));
    assert_eq!(send(&s.url, "/hooks/github", &h, beside).await.0, 202);
    next(&mut s.rx).await;
    // A body that does not arrive in time is answered 408 and let go.
    let mut late = held.pop().unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(15),
        tokio::io::AsyncReadExt::read_to_end(&mut late, &mut answer),
    )
    .await;
    assert!(
        answer.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(held);

    // Four bodies of 230 KB sent (well shaped, wrongly signed, the last
    // bytes held back) nearly fill the 1 MiB budget (each chunk kept also
    // counts its bookkeeping); the next delivery's bytes are answered 503
    // at once.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(hold(230_000).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = std::time::Instant::now();
    assert_eq!(
        raw(&s.url, hook(&forged, 262_000), &[b' '; 200_000]).await,
        Some(503),
        "past the budget"
    );
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "the budget's refusal waited"
    );
    // A signed delivery (a large push) is refused while the budget is
    // spent, and taken once the held bodies are gone.
    let mut large: Value = serde_json::from_slice(&push).unwrap();
    large["after"] = "4444444444444444444444444444444444444444".into();
    large["padding"] = "x".repeat(150_000).into();
    let large = serde_json::to_vec(&large).unwrap();
    let h = gh_headers("push", "after-the-flood", sign_hex(&secret, &large));
    assert_eq!(
        send(&s.url, "/hooks/github", &h, large.clone()).await.0,
        503
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(send(&s.url, "/hooks/github", &h, large).await.0, 202);
    next(&mut s.rx).await;

    // A form delivery is refused for what it is, and not remembered.
    let mut other: Value = serde_json::from_slice(&push).unwrap();
    other["after"] = "2222222222222222222222222222222222222222".into();
    let json = serde_json::to_vec(&other).unwrap();
    let mut form = gh_headers("push", "form-then-json", sign_hex(&secret, &json));
    form[3].1 = "application/x-www-form-urlencoded".into();
    let (code, text) = send(&s.url, "/hooks/github", &form, json.clone()).await;
    assert_eq!(
        (code, text.as_str()),
        (415, "set the webhook's content type to application/json\n")
    );
    assert_quiet(&mut s.rx);
    let h = gh_headers("push", "form-then-json", sign_hex(&secret, &json));
    assert_eq!(
        send(&s.url, "/hooks/github", &h, json).await.0,
        202,
        "the redelivery is no duplicate"
    );
    assert_eq!(
        next(&mut s.rx).await.sha,
        "2222222222222222222222222222222222222222"
    );
}
