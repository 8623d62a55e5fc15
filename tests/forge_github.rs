//! The GitHub client against GitHub's own published OpenAPI description,
//! served by Stoplight Prism as a validating mock (`tests/peers/github`,
//! installed with `npm ci --prefix tests/peers/github`). A request that does
//! not match the real schema is refused by Prism, so these tests fail when
//! lockstep's requests drift from what GitHub accepts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{FleetRepo, lockstep, nova};
use lockstep::forge::delivery::{Outcome, RetryPolicy, deliver};
use lockstep::forge::github::GitHub;
use lockstep::forge::{Forge, State, Status};
use lockstep::secret::Secret;

const SHA: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";

fn peer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/github")
}

/// A running Prism, stopped when dropped.
struct Prism {
    pid: String,
    port: u16,
}

impl Prism {
    fn start() -> Self {
        let dir = peer_dir();
        assert!(
            dir.join("node_modules/@stoplight/prism-cli").is_dir(),
            "the GitHub peer is not installed: run `npm ci --prefix tests/peers/github` (see README)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let out = Command::new("bash")
            .arg(dir.join("start-prism.sh"))
            .arg(port.to_string())
            .output()
            .expect("start-prism.sh runs");
        assert!(
            out.status.success(),
            "Prism did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Self { pid, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Prism {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.pid).status();
    }
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts: 2,
        base: std::time::Duration::from_millis(10),
        cap: std::time::Duration::from_millis(50),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_statuses_against_the_published_description() {
    let prism = Prism::start();
    let gh = GitHub::new(&prism.url(), "octo/fleet", Some(Secret::new("ghp-test"))).unwrap();

    // Reading: GitHub's documented response shape parses.
    let existing = gh
        .statuses(SHA)
        .await
        .expect("GET statuses validates and parses");
    assert!(
        !existing.is_empty(),
        "the description's example lists a status"
    );
    let example = &existing[0];
    assert_eq!(example.state, "success");

    // Posting: every state lockstep sends is valid for the real schema (201).
    for state in [
        State::Pending,
        State::Running,
        State::Success,
        State::Failure,
        State::Error,
    ] {
        let s = Status {
            state,
            context: "lockstep/eu-de-1".into(),
            description: format!("{state:?}: nova 2026.1→2026.2: Migrating (2/4)"),
            target_url: Some("https://ci.example.com/runs/1".into()),
        };
        let out = deliver(&gh, &fast(), SHA, &s)
            .await
            .expect("POST validates");
        assert_eq!(out, Outcome::Posted);
    }
    // A status with no link is valid too (target_url omitted, never sent as null).
    let s = Status {
        state: State::Failure,
        context: "lockstep/eu-de-1".into(),
        description: "refused".into(),
        target_url: None,
    };
    assert_eq!(
        deliver(&gh, &fast(), SHA, &s).await.unwrap(),
        Outcome::Posted
    );

    // Read-before-write: the status already there is not posted again.
    let same = Status {
        state: State::Success,
        context: example.context.clone(),
        description: example.description.clone(),
        target_url: example.target_url.clone(),
    };
    assert_eq!(
        deliver(&gh, &fast(), SHA, &same).await.unwrap(),
        Outcome::AlreadyThere
    );

    // The check can fail: requests that break the real schema are refused.
    let client = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        client
            .post(format!("{}/repos/octo/fleet/statuses/{SHA}", prism.url()))
            .header("Accept", "application/vnd.github+json, application/json")
            .json(&body)
            .send()
    };
    let bogus = post(serde_json::json!({"state": "bogus", "context": "x"}))
        .await
        .unwrap();
    assert_eq!(bogus.status().as_u16(), 422);
    assert!(bogus.text().await.unwrap().contains("state"));
    let missing = post(serde_json::json!({"context": "x"})).await.unwrap();
    assert_eq!(missing.status().as_u16(), 422);
    let wrong_type = post(serde_json::json!({"state": "success", "description": 5}))
        .await
        .unwrap();
    assert_eq!(wrong_type.status().as_u16(), 422);

    // A 403 that is not a rate limit is final: no retries.
    let forbidden = client
        .post(format!("{}/repos/octo/fleet/statuses/{SHA}", prism.url()))
        .header("Prefer", "code=403")
        .json(&serde_json::json!({"state": "success"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status().as_u16(), 403);

    // The CLI end to end: `check --report github` posts each judged commit.
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    repo.commit("fleet");
    repo.write("nova.yaml", nova("nova", "2026.2", "2026.2"));
    repo.commit("hop");
    let path = repo.path().to_string_lossy().into_owned();
    let url = prism.url();
    let out = tokio::task::spawn_blocking(move || {
        lockstep(&[
            "check",
            "--repo",
            &path,
            "--report",
            "github",
            "--forge-url",
            &url,
            "--forge-repo",
            "octo/fleet",
            "--cluster",
            "eu-de-1",
        ])
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("status lockstep/eu-de-1/review on") && err.contains("posted"),
        "{err}"
    );
}
