//! End to end against a real kube-apiserver with the upstream CRDs: lockstep
//! (the kube cluster, follow, repair) and the simulated operator
//! (`sim_kube`, standing in for the C5C3 operators, which cannot run here)
//! talk only through the API server, as in production.
//!
//! - a full 2026.1 → 2026.2 hop of a ControlPlane projecting Keystone,
//!   Glance and Nova, with Nova's expand failing for good once and repaired
//!   forward by lockstep;
//! - an abort of a standalone Glance mid-upgrade.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::ApiServer;
use common::sim_kube::KubeOperator;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, PostParams};
use lockstep::cluster::kube::KubeCluster;
use lockstep::cluster::{ApplyRequest, Cluster, observe};
use lockstep::follow::{Deadlines, Progress, Tracker};
use lockstep::kind::{Key, Kind};
use lockstep::release::ImageRef;
use lockstep::repair::{self, Action, RepairHistory, RepairPolicy};
use lockstep::sim::{Fault, JobKind, Params, World};
use serde_json::{Value, json};

fn document(rel: &str) -> Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/fleet")
            .join(rel),
    )
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.into_iter().next().unwrap()
}

/// A projected child's spec template: the example's spec without release and image.
fn template(rel: &str) -> Value {
    let mut spec = document(rel)["spec"].clone();
    let m = spec.as_object_mut().unwrap();
    m.remove("image");
    m.remove("openStackRelease");
    spec
}

fn keystone_template() -> Value {
    json!({
        "database": {"clusterRef": {"name": "openstack-db"}, "database": "keystone",
                     "secretRef": {"name": "keystone-db", "key": "password"}},
        "cache": {"clusterRef": {"name": "openstack-memcached"}, "backend": "dogpile.cache.pymemcache"},
        "bootstrap": {"adminPasswordSecretRef": {"name": "keystone-admin", "key": "password"}}
    })
}

/// lockstep's side of a hop: follow every object, repair forward where
/// allowed, until all are complete. Returns each object's final progress and
/// the repairs made.
async fn follow(
    c: &KubeCluster,
    op: &mut KubeOperator,
    objects: &[(Key, &str, Option<&str>)],
) -> (BTreeMap<Key, Progress>, Vec<String>) {
    let mut trackers: BTreeMap<Key, (Tracker, RepairHistory)> = objects
        .iter()
        .map(|(k, to, _)| {
            (
                k.clone(),
                (
                    Tracker::new(*to, Deadlines::default()),
                    RepairHistory::default(),
                ),
            )
        })
        .collect();
    let mut repairs = Vec::new();
    let policy = RepairPolicy {
        backoff: Duration::from_secs(30),
        ..RepairPolicy::default()
    };
    for _ in 0..300 {
        let busy = op.step(Duration::from_secs(60)).await.unwrap();
        let now = op.world.now;
        let mut last = BTreeMap::new();
        for (key, to, plane) in objects {
            let obs = observe(c, key).await.unwrap().expect("object exists");
            let (tracker, history) = trackers.get_mut(key).unwrap();
            let p = tracker.observe(&obs, now);
            let action = repair::plan(key, *plane, &p, history, now, &policy);
            if repair::execute(c, key, &action, history, now, to, jiff::Timestamp::now())
                .await
                .unwrap()
                && let Action::DeleteJob { name, attempt, .. } = &action
            {
                repairs.push(format!("{name} attempt {attempt}"));
            }
            last.insert(key.clone(), p);
        }
        if last.values().all(|p| *p == Progress::Complete) {
            return (last, repairs);
        }
        if !busy
            && repairs.is_empty()
            && last.values().all(|p| matches!(p, Progress::Failed { .. }))
        {
            return (last, repairs);
        }
    }
    panic!("the hop did not finish in 300 steps");
}

async fn reasons(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut list = api.list(&Default::default()).await.unwrap().items;
    list.retain(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name));
    list.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    list.into_iter().filter_map(|e| e.reason).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_hop_with_a_repair_and_a_standalone_abort() {
    let server = ApiServer::start();
    let c = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap();
    let client = c.client().clone();
    let ns: Api<Namespace> = Api::all(client.clone());
    for n in ["openstack", "image"] {
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": n}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let placement = |tag: &str| {
        ImageRef::new(
            Some("registry.example.internal/mirror/c5c3/placement"),
            Some(tag),
            None,
        )
        .unwrap()
    };
    let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
    let pdoc = document("clusters/prod/controlplane.yaml");
    c.apply(&ApplyRequest {
        key: plane.clone(),
        release: Some("2026.1".into()),
        image: None,
        overrides: vec![(Kind::Placement, placement("2026.1"))],
        document: Some(pdoc.clone()),
    })
    .await
    .unwrap();
    let glance = Key::new(Kind::Glance, "image", "glance");
    let gdoc = document("standalone/image/glance.yaml");
    let digest = |c: char| {
        ImageRef::new(
            Some("ghcr.io/c5c3/glance"),
            None,
            Some(&format!("sha256:{}", c.to_string().repeat(64))),
        )
        .unwrap()
    };
    c.apply(&ApplyRequest {
        key: glance.clone(),
        release: Some("2026.1".into()),
        image: Some(digest('a')),
        overrides: vec![],
        document: Some(gdoc.clone()),
    })
    .await
    .unwrap();

    // The operator: Nova's expand will fail five tries (backoffLimit 4), once.
    let mut world = World::new(Params::default());
    world.faults.push(Fault::JobFails {
        object: "prod-nova".into(),
        job: JobKind::Expand,
        tries: 5,
    });
    let mut op = KubeOperator::new(client.clone(), world);
    op.adopt_plane(
        &plane,
        vec![
            (Kind::Keystone, keystone_template()),
            (Kind::Glance, template("standalone/image/glance.yaml")),
            (Kind::Nova, template("standalone/compute/nova.yaml")),
        ],
    )
    .await
    .expect("the CRDs accept the projected children and their status");
    op.adopt(&glance).await.unwrap();

    // lockstep applies the hop: the plane's release and its override, together.
    c.apply(&ApplyRequest {
        key: plane.clone(),
        release: Some("2026.2".into()),
        image: None,
        overrides: vec![(Kind::Placement, placement("2026.2"))],
        document: Some(pdoc),
    })
    .await
    .unwrap();
    let children: Vec<(Key, &str, Option<&str>)> = ["keystone", "glance", "nova"]
        .iter()
        .map(|s| {
            (
                Key::new(
                    Kind::from_service(s).unwrap(),
                    "openstack",
                    format!("prod-{s}"),
                ),
                "2026.2",
                Some("prod"),
            )
        })
        .collect();
    let (done, repairs) = follow(&c, &mut op, &children).await;
    assert!(done.values().all(|p| *p == Progress::Complete), "{done:?}");
    assert_eq!(
        repairs,
        ["prod-nova-db-expand attempt 1"],
        "one forward repair"
    );
    for (key, _, _) in &children {
        let o = c.get(key).await.unwrap().unwrap();
        assert_eq!(
            o.status.installed_release.as_deref(),
            Some("2026.2"),
            "{key}"
        );
        assert_eq!(
            o.status.condition("Ready").map(|r| r.status.as_str()),
            Some("True"),
            "{key}"
        );
    }
    let nova_events = reasons(&client, "openstack", "prod-nova").await;
    for r in [
        "UpgradeInitiated",
        "ExpandFailed",
        "RepairJobDeleted",
        "ExpandComplete",
        "MigrateComplete",
        "DeploymentRolloutComplete",
        "UpgradeComplete",
    ] {
        assert!(
            nova_events.iter().any(|e| e == r),
            "{r} missing from {nova_events:?}"
        );
    }
    let nova_key = Key::new(Kind::Nova, "openstack", "prod-nova");
    // The re-run is counted on the object, in lockstep's own annotation,
    // and survived the operator's applies of the child since.
    let nova = c.get(&nova_key).await.unwrap().unwrap();
    let record = lockstep::repair::RepairRecord::parse(
        nova.status.repair_record.as_deref().expect("repair record"),
    )
    .unwrap();
    assert_eq!((record.target.as_str(), record.attempts), ("2026.2", 1));
    let ev = c.events(&nova_key).await.unwrap();
    assert!(
        ev.iter()
            .any(|e| e.reason == "ExpandFailed" && e.warning && e.reporter == "nova-operator"),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| e.reason == "RepairJobDeleted"
            && !e.warning
            && e.reporter == "c5c3.io/lockstep"),
        "{ev:?}"
    );
    assert_eq!(
        ev.last().map(|e| e.reason.as_str()),
        Some("UpgradeComplete"),
        "oldest first"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), "openstack");
    let expand = jobs.get("prod-nova-db-expand").await.unwrap();
    assert!(
        expand
            .status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True"),
        "the re-created Job ran to completion"
    );

    // A standalone Glance: upgrade, then abort while Migrating.
    c.apply(&ApplyRequest {
        key: glance.clone(),
        release: Some("2026.2".into()),
        image: Some(digest('b')),
        overrides: vec![],
        document: Some(gdoc.clone()),
    })
    .await
    .unwrap();
    for _ in 0..50 {
        op.step(Duration::from_secs(30)).await.unwrap();
        if c.get(&glance)
            .await
            .unwrap()
            .unwrap()
            .status
            .upgrade_phase
            .as_deref()
            == Some("Migrating")
        {
            break;
        }
    }
    assert_eq!(
        c.get(&glance)
            .await
            .unwrap()
            .unwrap()
            .status
            .upgrade_phase
            .as_deref(),
        Some("Migrating")
    );
    c.apply(&ApplyRequest {
        key: glance.clone(),
        release: Some("2026.1".into()),
        image: Some(digest('a')),
        overrides: vec![],
        document: Some(gdoc),
    })
    .await
    .unwrap();
    let (done, _) = follow(&c, &mut op, &[(glance.clone(), "2026.1", None)]).await;
    assert_eq!(done[&glance], Progress::Complete);
    let g = c.get(&glance).await.unwrap().unwrap();
    assert_eq!(g.status.installed_release.as_deref(), Some("2026.1"));
    assert_eq!(g.status.upgrade_phase, None);
    assert!(
        reasons(&client, "image", "glance")
            .await
            .iter()
            .any(|e| e == "UpgradeAborted")
    );
    let image_jobs: Api<Job> = Api::namespaced(client.clone(), "image");
    for j in ["glance-db-expand", "glance-db-migrate"] {
        assert!(
            image_jobs.get_opt(j).await.unwrap().is_none(),
            "{j} deleted by the abort"
        );
    }
}
