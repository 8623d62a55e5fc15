//! Status delivery and webhook benchmark. Prints figures, asserts nothing.
//!
//! - statuses per second through `deliver` (a read and a post each) against
//!   wiremock and, when `npm ci --prefix tests/peers/github` has been run,
//!   against Prism serving GitHub's OpenAPI description;
//! - webhook-to-trigger latency: 1,000 signed GitHub push deliveries over
//!   loopback HTTP, from the request leaving the client to the trigger
//!   arriving on the channel (p50, p99, max).
//!
//! Run: `cargo bench --bench forge`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lockstep::forge::delivery::{RetryPolicy, deliver};
use lockstep::forge::github::GitHub;
use lockstep::forge::{State, Status};
use lockstep::secret::Secret;
use lockstep::webhook::{WebhookConfig, router, sign_hex};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const SHA: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";

async fn statuses_per_second(label: &str, gh: &GitHub, n: usize) {
    let policy = RetryPolicy::default();
    let start = Instant::now();
    for i in 0..n {
        let s = Status {
            state: State::Running,
            context: format!("lockstep/bench/ns/obj-{i}"),
            description: format!("nova 2026.1→2026.2: Migrating (2/4) #{i}"),
            target_url: None,
        };
        deliver(gh, &policy, SHA, &s).await.expect("delivered");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "  {label:<28} {n} statuses in {secs:.2} s = {:.0} statuses/s (each a GET and a POST)",
        n as f64 / secs
    );
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("status delivery:");
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .mount(&server)
        .await;
    let gh = GitHub::new(&server.uri(), "octo/fleet", Some(Secret::new("t"))).unwrap();
    statuses_per_second("wiremock", &gh, 1000).await;

    let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/github");
    if peer.join("node_modules/@stoplight/prism-cli").is_dir() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = Command::new("bash")
            .arg(peer.join("start-prism.sh"))
            .arg(port.to_string())
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() {
            let gh = GitHub::new(&format!("http://127.0.0.1:{port}"), "octo/fleet", None).unwrap();
            statuses_per_second("Prism (GitHub's OpenAPI)", &gh, 300).await;
        }
        let _ = Command::new("kill").arg(&pid).status();
    } else {
        println!("  Prism: not installed (npm ci --prefix tests/peers/github)");
    }

    println!("webhook to trigger:");
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let secret = Secret::new("bench-secret");
    let cfg = WebhookConfig {
        github: Some(secret.clone()),
        ..WebhookConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/github", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(cfg, tx)).await.unwrap() });
    let client = reqwest::Client::new();
    let mut lat = Vec::with_capacity(1000);
    for i in 0..1100 {
        let body = serde_json::to_vec(&serde_json::json!({
            "ref": "refs/heads/main",
            "after": format!("{:040x}", i + 1),
            "repository": {"full_name": "octo/fleet"},
            "commits": [{"id": format!("{:040x}", i + 1), "message": "nova 2026.1 → 2026.2", "modified": ["standalone/compute/nova.yaml"]}]
        }))
        .unwrap();
        let sig = format!("sha256={}", sign_hex(&secret, &body));
        let start = Instant::now();
        let resp = client
            .post(&url)
            .header("X-GitHub-Event", "push")
            .header("X-GitHub-Delivery", format!("bench-{i}"))
            .header("X-Hub-Signature-256", sig)
            .body(body)
            .send();
        let (resp, trig) = tokio::join!(resp, rx.recv());
        let elapsed = start.elapsed();
        assert_eq!(resp.unwrap().status().as_u16(), 202);
        assert!(trig.is_some());
        if i >= 100 {
            lat.push(elapsed); // the first 100 warm up connections and allocators
        }
    }
    lat.sort();
    println!(
        "  {} signed deliveries: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        lat.len(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3
    );
}
