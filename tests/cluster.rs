//! The cluster trait: the in-memory cluster (the simulated operator), and
//! the kube-rs implementation against a mock API server (wiremock) for the
//! error paths a real server does not produce on demand: 409 storms, 500s,
//! timeouts. The real API server tests are in `cluster_kube.rs`.

use std::time::Duration;

use lockstep::cluster::kube::KubeCluster;
use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{ApplyRequest, Cluster, ClusterError, with_backoff};
use lockstep::kind::{Key, Kind};
use lockstep::release::ImageRef;
use lockstep::sim::{Params, World};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn img(svc: &str, tag: &str) -> ImageRef {
    ImageRef::new(Some(&format!("ghcr.io/c5c3/{svc}")), Some(tag), None).unwrap()
}

#[tokio::test]
async fn memory_cluster_applies_follows_and_repairs() {
    let mut w = World::new(Params::default());
    let nova = Key::new(Kind::Nova, "compute", "nova");
    w.install_steady(
        nova.clone(),
        Some("2026.1".into()),
        img("nova", "2026.1"),
        None,
    );
    w.faults.push(lockstep::sim::Fault::JobFails {
        object: "nova".into(),
        job: lockstep::sim::JobKind::Expand,
        tries: 5,
    });
    let c = MemoryCluster::new(w);
    let mut changes = c.watch();
    let before = c.get(&nova).await.unwrap().unwrap();
    let after = c
        .apply(&ApplyRequest {
            key: nova.clone(),
            release: Some("2026.2".into()),
            image: Some(img("nova", "2026.2")),
            overrides: vec![],
            document: None,
        })
        .await
        .unwrap();
    assert_eq!(after.generation, before.generation + 1);
    assert_eq!(after.release.as_deref(), Some("2026.2"));
    assert_eq!(after.status.upgrade_phase.as_deref(), Some("Expanding"));
    // Watchers hear of the apply, and of the operator's status changes.
    assert_eq!(next_key(&mut changes).await, Some(nova.clone()));
    assert!(
        c.step(Duration::from_secs(600)).unwrap(),
        "the expand is running"
    );
    assert_eq!(
        next_key(&mut changes).await,
        None,
        "600 s in, the failing expand has changed no status"
    );
    assert!(c.step(Duration::from_secs(3600)).unwrap());
    assert_eq!(
        next_key(&mut changes).await,
        Some(nova.clone()),
        "ExpandFailed is announced"
    );
    // The same apply again is no edit (server-side apply is idempotent).
    let again = c
        .apply(&ApplyRequest {
            key: nova.clone(),
            release: Some("2026.2".into()),
            image: Some(img("nova", "2026.2")),
            overrides: vec![],
            document: None,
        })
        .await
        .unwrap();
    assert_eq!(again.generation, after.generation);
    {
        let mut w = c.world().unwrap();
        w.run_until(|w| {
            w.job("compute", "nova-db-expand")
                .is_some_and(|j| j.state == lockstep::sim::JobState::Failed)
        });
    }
    let obs = lockstep::cluster::observe(&c, &nova)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(lockstep::follow::assess("2026.2", &obs), lockstep::follow::Progress::Failed { ref reason, .. } if reason == "ExpandFailed")
    );
    assert_eq!(
        c.deployments(&nova).await.unwrap().len(),
        5,
        "the five Nova roles"
    );
    let jobs = c.jobs(&nova).await.unwrap();
    let failed: Vec<_> = jobs
        .iter()
        .filter(|j| j.failed)
        .map(|j| j.name.as_str())
        .collect();
    assert_eq!(failed, ["nova-db-expand"]);
    let uid = jobs
        .iter()
        .find(|j| j.name == "nova-db-expand")
        .and_then(|j| j.uid.clone())
        .expect("a uid");
    // Deleted and created again under its name (a person's retry): the
    // delete of the Job read failed leaves the new one running.
    let failed_job = c
        .world()
        .unwrap()
        .job("compute", "nova-db-expand")
        .cloned()
        .unwrap();
    let mut rerun = failed_job.clone();
    rerun.uid = 10_000;
    rerun.state = lockstep::sim::JobState::Running;
    c.world()
        .unwrap()
        .jobs
        .insert(("compute".into(), "nova-db-expand".into()), rerun);
    assert!(
        !c.delete_job("compute", "nova-db-expand", Some(&uid))
            .await
            .unwrap(),
        "the running Job was deleted"
    );
    assert!(
        c.world()
            .unwrap()
            .job("compute", "nova-db-expand")
            .is_some()
    );
    c.world()
        .unwrap()
        .jobs
        .insert(("compute".into(), "nova-db-expand".into()), failed_job);
    assert!(
        c.delete_job("compute", "nova-db-expand", Some(&uid))
            .await
            .unwrap()
    );
    assert!(
        !c.delete_job("compute", "nova-db-expand", None)
            .await
            .unwrap(),
        "already gone"
    );
    c.record_event(
        &nova,
        "RepairJobDeleted",
        "deleted nova-db-expand (attempt 1)",
        false,
    )
    .await
    .unwrap();
    assert!(
        c.world()
            .unwrap()
            .event_reasons(&nova)
            .contains(&"RepairJobDeleted")
    );
    let ev = c.events(&nova).await.unwrap();
    assert_eq!(
        ev.first().map(|e| e.reason.as_str()),
        Some("UpgradeInitiated")
    );
    assert!(ev.iter().any(|e| e.reason == "ExpandFailed" && e.warning));
    // A plane refuses a downgrade at admission.
    let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
    c.world()
        .unwrap()
        .install_plane(plane.clone(), "2026.2".into());
    let err = c
        .apply(&ApplyRequest {
            key: plane,
            release: Some("2026.1".into()),
            image: None,
            overrides: vec![],
            document: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Invalid { .. }), "{err}");
}

async fn next_key(s: &mut futures::stream::BoxStream<'static, Key>) -> Option<Key> {
    use futures::StreamExt;
    tokio::time::timeout(Duration::from_secs(2), s.next())
        .await
        .ok()
        .flatten()
}

async fn mock_cluster(server: &MockServer, timeout: Option<Duration>) -> KubeCluster {
    let mut config = kube::Config::new(server.uri().parse().unwrap());
    config.read_timeout = timeout;
    config.connect_timeout = Some(Duration::from_secs(2));
    KubeCluster::new(kube::Client::try_from(config).unwrap())
}

const NOVA_PATH: &str = "/apis/nova.openstack.c5c3.io/v1alpha1/namespaces/compute/novas/nova";

fn status(code: u16, reason: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "reason": reason, "code": code
    }))
}

fn nova_object(generation: i64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "nova.openstack.c5c3.io/v1alpha1", "kind": "Nova",
        "metadata": {"name": "nova", "namespace": "compute", "generation": generation, "resourceVersion": "42"},
        "spec": {"openStackRelease": "2026.2", "image": {"repository": "ghcr.io/c5c3/nova", "tag": "2026.2"}},
        "status": {"installedRelease": "2026.1", "targetRelease": "2026.2", "upgradePhase": "Expanding",
                   "conditions": [{"type": "Ready", "status": "False", "reason": "NotAllReady", "observedGeneration": generation}]}
    })
}

fn request() -> ApplyRequest {
    ApplyRequest {
        key: Key::new(Kind::Nova, "compute", "nova"),
        release: Some("2026.2".into()),
        image: Some(img("nova", "2026.2")),
        overrides: vec![],
        document: None,
    }
}

#[tokio::test]
async fn kube_apply_is_server_side_unforced_and_parses_status() {
    let server = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(NOVA_PATH))
        .and(query_param("fieldManager", "lockstep"))
        .respond_with(ResponseTemplate::new(200).set_body_json(nova_object(5)))
        .expect(1)
        .mount(&server)
        .await;
    let c = mock_cluster(&server, None).await;
    let o = c.apply(&request()).await.unwrap();
    assert_eq!(o.generation, 5);
    assert_eq!(o.status.upgrade_phase.as_deref(), Some("Expanding"));
    let sent = &server.received_requests().await.unwrap()[0];
    assert_eq!(
        sent.headers.get("content-type").unwrap().to_str().unwrap(),
        "application/apply-patch+yaml"
    );
    assert!(
        !sent.url.query().unwrap_or("").contains("force=true"),
        "never forced: {}",
        sent.url
    );
    let body: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(
        body["spec"]["image"],
        serde_json::json!({"repository": "ghcr.io/c5c3/nova", "tag": "2026.2"})
    );
}

#[tokio::test]
async fn kube_conflicts_are_reported_not_forced() {
    let server = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(NOVA_PATH))
        .respond_with(status(
            409,
            "Conflict",
            "Apply failed with 1 conflict: conflict with \"flux\": .spec.openStackRelease",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let c = mock_cluster(&server, None).await;
    let req = request();
    let err = with_backoff(4, Duration::from_millis(5), || c.apply(&req))
        .await
        .unwrap_err();
    match err {
        ClusterError::Conflict { message, .. } => assert!(message.contains("flux")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn kube_500_storms_are_ridden_out_and_timeouts_retried() {
    let server = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(NOVA_PATH))
        .respond_with(status(500, "InternalError", "etcdserver: leader changed"))
        .up_to_n_times(3)
        .expect(3)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path(NOVA_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(nova_object(6)))
        .expect(1)
        .mount(&server)
        .await;
    let c = mock_cluster(&server, None).await;
    let req = request();
    let o = with_backoff(5, Duration::from_millis(5), || c.apply(&req))
        .await
        .unwrap();
    assert_eq!(o.generation, 6);

    // A server slower than the read timeout: unavailable, retried, then given up.
    let slow = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(NOVA_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(nova_object(1))
                .set_delay(Duration::from_secs(3)),
        )
        .expect(2)
        .mount(&slow)
        .await;
    let c = mock_cluster(&slow, Some(Duration::from_millis(200))).await;
    let err = with_backoff(2, Duration::from_millis(5), || c.get(&req.key))
        .await
        .unwrap_err();
    assert!(err.retryable(), "{err}");

    // Down: connection refused is retryable too.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let mut config = kube::Config::new(gone.parse().unwrap());
    config.connect_timeout = Some(Duration::from_millis(300));
    let c = KubeCluster::new(kube::Client::try_from(config).unwrap());
    assert!(c.get(&request().key).await.unwrap_err().retryable());
}

#[tokio::test]
async fn kube_schema_refusals_and_missing_objects() {
    let server = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(NOVA_PATH))
        .respond_with(status(422, "Invalid", "Nova.nova.openstack.c5c3.io \"nova\" is invalid: spec.image: Invalid value: \"object\": exactly one of image.tag or image.digest must be set"))
        .mount(&server)
        .await;
    // As the API server answers for an object it does not have: the
    // details name it (a kind it does not serve gets none).
    Mock::given(method("GET"))
        .and(path(NOVA_PATH))
        .respond_with(ResponseTemplate::new(404).set_body_json(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "novas.nova.openstack.c5c3.io \"nova\" not found",
            "reason": "NotFound", "code": 404,
            "details": {"name": "nova", "group": "nova.openstack.c5c3.io", "kind": "novas"}
        })))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(
            "/apis/batch/v1/namespaces/compute/jobs/nova-db-expand",
        ))
        .respond_with(status(
            404,
            "NotFound",
            "jobs.batch \"nova-db-expand\" not found",
        ))
        .mount(&server)
        .await;
    let c = mock_cluster(&server, None).await;
    let err = c.apply(&request()).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::Invalid { ref message, .. } if message.contains("exactly one")),
        "{err}"
    );
    assert!(!err.retryable());
    assert_eq!(
        c.get(&request().key).await.unwrap(),
        None,
        "a deleted CR reads as absent"
    );
    assert!(
        !c.delete_job("compute", "nova-db-expand", None)
            .await
            .unwrap()
    );
}
