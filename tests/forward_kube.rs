//! A follower's webhook forwarding against a real kube-apiserver
//! (tests/peers/kube): the Lease names the leader, and whoever can write a
//! Lease can name any address. A follower forwards a delivery only when it
//! would have accepted it itself, and only to a holder whose pod is a
//! replica (its ServiceAccount, the holder's IP); everything else reaches
//! nobody. The leader here is the real receiver served in process; the
//! address a forged Lease names is a plain listener that counts
//! connections.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use axum::extract::Request;
use axum::middleware::{self, Next};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use lockstep::cluster::kube::KubeCluster;
use lockstep::lease::{Leadership, LeaseConfig};
use lockstep::secret::Secret;
use lockstep::webhook::{self, Trigger, WebhookConfig};
use serde_json::json;
use tokio::sync::mpsc;

use common::ApiServer;
use common::kube::replica_pod;

const NS: &str = "lockstep";
const SECRET: &str = "gh-hook-secret";

/// Serves `app` on 127.0.0.1; its port.
async fn serve(app: axum::Router) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// A listener that accepts and counts connections and never answers.
async fn sink() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            kept.push(s);
        }
    });
    (port, count)
}

fn config() -> WebhookConfig {
    WebhookConfig {
        github: Some(Secret::new(SECRET)),
        ..WebhookConfig::default()
    }
}

fn push(sha: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "ref": "refs/heads/main", "after": sha,
        "repository": {"full_name": "example-org/fleet"}
    }))
    .unwrap()
}

async fn deliver(port: u16, path: &str, id: &str, body: Vec<u8>, signed: bool) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}{path}"))
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", id)
        .header("Content-Type", "application/json");
    if signed {
        let sig = webhook::sign_hex(&Secret::new(SECRET), &body);
        req = req.header("X-Hub-Signature-256", format!("sha256={sig}"));
    }
    let resp = req.body(body).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Names `holder` in the Lease, freshly renewed for an hour, so the
/// follower stays a follower.
async fn hold(leases: &Api<Lease>, holder: &str) {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap());
    let patch = json!({"spec": {
        "holderIdentity": holder, "leaseDurationSeconds": 3600,
        "acquireTime": now, "renewTime": now
    }});
    leases
        .patch("lockstep", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_only_signed_deliveries_and_only_to_a_replica() {
    let server = ApiServer::start();
    let client = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap()
        .client()
        .clone();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "lockstep"}})).unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();

    // The leader: the real receiver, counting every request that reaches it.
    let (tx, mut triggers) = mpsc::channel::<Trigger>(16);
    let reached = Arc::new(AtomicUsize::new(0));
    let r = reached.clone();
    let leader_port = serve(webhook::router(config(), tx).layer(middleware::from_fn(
        move |req: Request, next: Next| {
            r.fetch_add(1, Ordering::SeqCst);
            next.run(req)
        },
    )))
    .await;
    let leader = format!("leader@127.0.0.1:{leader_port}");
    // Where a forged Lease points.
    let (evil_port, evil) = sink().await;

    replica_pod(&client, NS, "follower", "lockstep", "127.0.0.1").await;
    replica_pod(&client, NS, "leader", "lockstep", "127.0.0.1").await;
    // Runs as another ServiceAccount at the same IP.
    replica_pod(&client, NS, "intruder", "other", "127.0.0.1").await;
    // A replica, but not at the address a forged Lease gives for it.
    replica_pod(&client, NS, "elsewhere", "lockstep", "10.255.255.1").await;
    // A replica that stopped: the API still shows its IP, which the cluster
    // may have handed to another pod since.
    replica_pod(&client, NS, "stopped", "lockstep", "127.0.0.1").await;
    Api::<Pod>::namespaced(client.clone(), NS)
        .patch_status(
            "stopped",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();

    hold(&leases, &leader).await;
    let follower = Leadership::start(
        client.clone(),
        LeaseConfig {
            namespace: NS.into(),
            name: "lockstep".into(),
            identity: "follower@127.0.0.1:1".into(),
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
        },
    )
    .await
    .expect("joins the election");
    let (ftx, mut follower_triggers) = mpsc::channel::<Trigger>(16);
    let follower = Arc::new(follower);
    let follower_port = serve(lockstep::forward::leader_only(
        webhook::router(config(), ftx),
        Some(follower.clone()),
        config(),
    ))
    .await;
    assert!(!follower.is_leader(), "the Lease is held for an hour");

    // 1. A signed delivery reaches the leader through the follower.
    let (status, text) = deliver(follower_port, "/hooks/github", "d-1", push("a1"), true).await;
    assert_eq!((status, text.as_str()), (202, "queued\n"));
    let t = tokio::time::timeout(Duration::from_secs(5), triggers.recv())
        .await
        .expect("the leader got the delivery")
        .unwrap();
    assert_eq!((t.sha.as_str(), t.delivery.as_str()), ("a1", "d-1"));
    assert_eq!(reached.load(Ordering::SeqCst), 1);

    // 2. An unsigned (or wrongly signed) delivery is answered by the
    //    follower itself: nothing is sent on.
    let (status, _) = deliver(follower_port, "/hooks/github", "d-2", push("a2"), false).await;
    assert_eq!(status, 401);
    let mut forged = push("a2");
    let sig = webhook::sign_hex(&Secret::new("not-the-secret"), &forged);
    let resp = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{follower_port}/hooks/github"))
        .header("X-GitHub-Event", "push")
        .header("X-Hub-Signature-256", format!("sha256={sig}"))
        .body(std::mem::take(&mut forged))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    // Another path or host is not forwarded either.
    let (status, _) = deliver(follower_port, "/hooks/gitlab", "d-3", push("a3"), true).await;
    assert_eq!(status, 404, "GitLab is not configured here");
    let (status, _) = deliver(follower_port, "/elsewhere", "d-4", push("a4"), true).await;
    assert_eq!(status, 404);
    assert_eq!(
        reached.load(Ordering::SeqCst),
        1,
        "only the first got through"
    );

    // 3. A Lease naming what is not a replica gets nothing, signed or not.
    for holder in [
        format!("ghost@127.0.0.1:{evil_port}"),
        format!("intruder@127.0.0.1:{evil_port}"),
        format!("elsewhere@127.0.0.1:{evil_port}"),
        format!("stopped@127.0.0.1:{evil_port}"),
        format!("Leader@127.0.0.1:{evil_port}"),
    ] {
        hold(&leases, &holder).await;
        let (status, text) =
            deliver(follower_port, "/hooks/github", &holder, push("b1"), true).await;
        assert_eq!(
            (status, text.as_str()),
            (503, "leader not verified\n"),
            "{holder}"
        );
    }
    assert_eq!(
        evil.load(Ordering::SeqCst),
        0,
        "the forged address got nothing"
    );

    // 4. Back to the real leader: forwarding resumes.
    hold(&leases, &leader).await;
    let (status, _) = deliver(follower_port, "/hooks/github", "d-5", push("a5"), true).await;
    assert_eq!(status, 202);
    let t = tokio::time::timeout(Duration::from_secs(5), triggers.recv())
        .await
        .expect("the leader got the delivery")
        .unwrap();
    assert_eq!(t.sha, "a5");
    assert_eq!(evil.load(Ordering::SeqCst), 0);
    assert!(
        follower_triggers.try_recv().is_err(),
        "the follower only forwards"
    );
}
