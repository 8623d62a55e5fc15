//! The kube-rs cluster against a real kube-apiserver (v1.34, built from the
//! Go module proxy by `tests/peers/kube/build.sh`) and etcd, with the
//! upstream CRDs installed from `../shared/fixtures/crds`: the CRDs' own
//! schema and CEL rules judge every patch lockstep sends.

mod common;

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use lockstep::cluster::kube::KubeCluster;
use lockstep::cluster::{ApplyRequest, Cluster, ClusterError};
use lockstep::kind::{Key, Kind};
use lockstep::release::ImageRef;

use common::ApiServer;

fn document(rel: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/fleet")
            .join(rel),
    )
    .unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.into_iter().next().unwrap()
}

fn img(svc: &str, tag: &str) -> ImageRef {
    ImageRef::new(Some(&format!("ghcr.io/c5c3/{svc}")), Some(tag), None).unwrap()
}

use lockstep::cluster::kube::dynamic_api as dynamic;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_cluster_against_a_real_api_server() {
    let server = ApiServer::start();
    let c = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap();
    let client = c.client().clone();
    let ns: Api<Namespace> = Api::all(client.clone());
    for n in ["compute", "openstack"] {
        let body: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": n}})).unwrap();
        ns.create(&PostParams::default(), &body).await.unwrap();
    }

    // Watch everything C5C3 from the start.
    let mut changes = c.watch();

    // Install: lockstep applies the whole Git document.
    let nova = Key::new(Kind::Nova, "compute", "nova");
    let doc = document("standalone/compute/nova.yaml");
    let installed = c
        .apply(&ApplyRequest {
            key: nova.clone(),
            release: Some("2026.1".into()),
            image: Some(img("nova", "2026.1")),
            overrides: vec![],
            document: Some(doc.clone()),
        })
        .await
        .expect("the CRD accepts the install");
    assert_eq!(installed.generation, 1);

    // A hop: release and image together, the rest of the document kept.
    let hop = ApplyRequest {
        key: nova.clone(),
        release: Some("2026.2".into()),
        image: Some(img("nova", "2026.2")),
        overrides: vec![],
        document: Some(doc.clone()),
    };
    let after = c.apply(&hop).await.expect("the CRD accepts the hop");
    assert_eq!(after.generation, 2);
    assert_eq!(after.release.as_deref(), Some("2026.2"));
    assert_eq!(after.image, Some(img("nova", "2026.2")));
    let raw = dynamic(&client, &nova).get("nova").await.unwrap();
    assert_eq!(
        raw.data["spec"]["region"], "RegionTwo",
        "fields of the document survive"
    );
    let managers: Vec<String> = raw
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["lockstep"]);

    // The watch saw the Nova change (install and hop).
    {
        use futures::StreamExt;
        let seen = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            while let Some(k) = changes.next().await {
                if k == nova {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(seen, Ok(true), "the watcher reports the Nova");
    }

    // The same hop again writes nothing (no new generation).
    assert_eq!(c.apply(&hop).await.unwrap().generation, 2);

    // A drift by hand: `kubectl set image` (an update under its own field
    // manager) now owns the image. An unforced apply of lockstep's image
    // conflicts, for ever; the re-apply of the step takes it back.
    dynamic(&client, &nova)
        .patch(
            "nova",
            &PatchParams {
                field_manager: Some("kubectl-set".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(serde_json::json!({"spec": {"image": {"tag": "2026.2-hotfix"}}})),
        )
        .await
        .unwrap();
    match c.apply(&hop).await {
        Err(ClusterError::Conflict { .. }) => {}
        other => panic!("an unforced apply over an edit's field: {other:?}"),
    }
    let back = c
        .reapply(&hop)
        .await
        .expect("the re-apply takes the field back");
    assert_eq!(back.image, Some(img("nova", "2026.2")));
    assert_eq!(
        c.apply(&hop).await.unwrap().image,
        Some(img("nova", "2026.2"))
    );
    let hop_generation = back.generation;

    // lockstep's repair record: one annotation under its own manager. It
    // moves no generation, and lockstep's applies of the whole document
    // (manager `lockstep`, which never sends it) leave it in place, whether
    // the document brings annotations of its own or stops bringing them.
    let record = r#"{"target":"2026.2","attempts":1,"last":"2026-12-01T10:00:00Z"}"#;
    c.set_repair_record(&nova, record).await.unwrap();
    let read = c.get(&nova).await.unwrap().unwrap();
    assert_eq!(read.status.repair_record.as_deref(), Some(record));
    assert_eq!(read.generation, hop_generation, "metadata only");
    let mut annotated = doc.clone();
    annotated["metadata"]["annotations"] = serde_json::json!({"team": "compute"});
    c.apply(&ApplyRequest {
        document: Some(annotated),
        ..hop.clone()
    })
    .await
    .unwrap();
    let read = c.get(&nova).await.unwrap().unwrap();
    assert_eq!(read.status.repair_record.as_deref(), Some(record));
    assert_eq!(c.apply(&hop).await.unwrap().generation, hop_generation);
    let raw = dynamic(&client, &nova).get("nova").await.unwrap();
    let annotations = raw.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get(lockstep::repair::RECORD_ANNOTATION)
            .map(String::as_str),
        Some(record)
    );
    assert!(
        !annotations.contains_key("team"),
        "lockstep's own annotation went with the document"
    );
    let managers: Vec<String> = raw
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["lockstep", lockstep::repair::RECORD_MANAGER]);

    // Moving to a digest: the tag is omitted, never blanked, and CEL's
    // exactly-one rule accepts it.
    let digest = ImageRef::new(
        Some("ghcr.io/c5c3/nova"),
        None,
        Some(&format!("sha256:{}", "c".repeat(64))),
    )
    .unwrap();
    let pinned = c
        .apply(&ApplyRequest {
            image: Some(digest.clone()),
            ..hop.clone()
        })
        .await
        .expect("CEL accepts a digest without a tag");
    assert_eq!(pinned.image, Some(digest));

    // What the schema refuses comes back as a refusal, not a retry.
    let err = c
        .apply(&ApplyRequest {
            release: Some("2026.3".into()),
            ..hop.clone()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClusterError::Invalid { ref message, .. } if message.contains("openStackRelease")),
        "{err}"
    );

    // A dry run gets the same answer, and stores nothing when it is a yes:
    // how a commit's objects are applied all or none.
    let err = c
        .dry_run(&ApplyRequest {
            release: Some("2026.3".into()),
            ..hop.clone()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClusterError::Invalid { ref message, .. } if message.contains("openStackRelease")),
        "{err}"
    );
    let before = c.get(&nova).await.unwrap().unwrap();
    c.dry_run(&ApplyRequest {
        release: Some("2027.1".into()),
        image: Some(img("nova", "2027.1")),
        ..hop.clone()
    })
    .await
    .expect("the CRD accepts the next hop");
    let after = c.get(&nova).await.unwrap().unwrap();
    assert_eq!(
        after.generation, before.generation,
        "a dry run stores nothing"
    );
    assert_eq!(after.release, before.release);
    assert_eq!(after.resource_version, before.resource_version);

    // A second writer forces the release: lockstep reports the conflict, never forces back.
    let other = serde_json::json!({
        "apiVersion": "nova.openstack.c5c3.io/v1alpha1", "kind": "Nova",
        "metadata": {"name": "nova", "namespace": "compute"},
        "spec": {"openStackRelease": "2026.1"}
    });
    dynamic(&client, &nova)
        .patch(
            "nova",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    let err = c.apply(&hop).await.unwrap_err();
    match &err {
        ClusterError::Conflict { message, .. } => {
            assert!(message.contains("someone-else"), "{message}")
        }
        other => panic!("expected a conflict, got {other}"),
    }
    assert_eq!(
        c.get(&nova).await.unwrap().unwrap().release.as_deref(),
        Some("2026.1"),
        "nothing forced"
    );

    // Status as the operator writes it is read back, conditions and all.
    let status = serde_json::json!({"status": {
        "installedRelease": "2026.1", "targetRelease": "2026.2", "upgradePhase": "Expanding", "observedGeneration": 3,
        "conditions": [{"type": "DatabaseReady", "status": "False", "reason": "ExpandFailed",
                        "message": "Expand job nova-db-expand failed: job has permanently failed: compute/nova-db-expand",
                        "lastTransitionTime": "2026-11-29T10:00:00Z", "observedGeneration": 3}]}});
    dynamic(&client, &nova)
        .patch_status("nova", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let seen = c.get(&nova).await.unwrap().unwrap();
    assert_eq!(seen.status.upgrade_phase.as_deref(), Some("Expanding"));
    assert_eq!(
        seen.status.condition("DatabaseReady").unwrap().reason,
        "ExpandFailed"
    );

    // Deployments: the second roll is done when every annotated role runs the
    // installed release and has converged.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "compute");
    for (name, annotated) in [("nova-conductor", true), ("nova", false)] {
        let mut annotations = serde_json::Map::new();
        if annotated {
            annotations.insert("nova.c5c3.io/installed-release".into(), "2026.1".into());
        }
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": annotations},
                                  "spec": {"containers": [{"name": "c", "image": "ghcr.io/c5c3/nova:2026.2"}]}}}
        }))
        .unwrap();
        deployments
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
        let converged = serde_json::json!({"status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}});
        deployments
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&converged))
            .await
            .unwrap();
    }
    let roles = c.deployments(&nova).await.unwrap();
    assert_eq!(roles.len(), 2);
    assert!(roles.iter().all(|d| d.rolled_out), "{roles:?}");
    let obs = lockstep::cluster::observe(&c, &nova)
        .await
        .unwrap()
        .unwrap();
    assert!(obs.second_roll_done, "annotation matches installed 2026.1");
    let promoted = serde_json::json!({"status": {"installedRelease": "2026.2", "targetRelease": null, "upgradePhase": null}});
    dynamic(&client, &nova)
        .patch_status("nova", &PatchParams::default(), &Patch::Merge(&promoted))
        .await
        .unwrap();
    let obs = lockstep::cluster::observe(&c, &nova)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !obs.second_roll_done,
        "the conductor still carries 2026.1: the second roll is pending"
    );
    assert!(matches!(
        lockstep::follow::assess("2026.2", &obs),
        lockstep::follow::Progress::Failed { .. } | lockstep::follow::Progress::Settling { .. }
    ));

    // The snapshot a full pass reads (a paged LIST per kind and of the
    // Deployments) holds what the reads one by one give, the Deployments
    // matched to their service the same way; kinds with no object and
    // names nobody has are absent.
    let snap = c.snapshot().await.unwrap().expect("the kube cluster lists");
    assert_eq!(snap.get(&nova), c.get(&nova).await.unwrap());
    assert!(snap.get(&nova).is_some());
    assert_eq!(snap.deployments(&nova), c.deployments(&nova).await.unwrap());
    assert_eq!(snap.deployments(&nova).len(), 2);
    let ghost = Key::new(Kind::Cinder, "compute", "nova");
    assert_eq!(snap.get(&ghost), None);
    assert_eq!(
        lockstep::cluster::observation(&nova, snap.get(&nova).unwrap(), &snap.deployments(&nova)),
        obs,
        "the tracker sees the same from either read"
    );

    // Jobs: the failed phase Job is found and deleted (background propagation).
    let jobs: Api<Job> = Api::namespaced(client.clone(), "compute");
    for name in ["nova-db-expand", "nova-db-sync", "unrelated"] {
        let j: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"backoffLimit": 4, "template": {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "ghcr.io/c5c3/nova:2026.2"}]}}}
        }))
        .unwrap();
        jobs.create(&PostParams::default(), &j).await.unwrap();
    }
    let failed = serde_json::json!({"status": {
        "failed": 5, "startTime": "2026-11-29T10:00:00Z",
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2026-11-29T10:17:00Z"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2026-11-29T10:17:15Z"}]}});
    jobs.patch_status(
        "nova-db-expand",
        &PatchParams::default(),
        &Patch::Merge(&failed),
    )
    .await
    .unwrap();
    let listed = c.jobs(&nova).await.unwrap();
    let mut names: Vec<&str> = listed.iter().map(|j| j.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["nova-db-expand", "nova-db-sync"]);
    let expand = listed.iter().find(|j| j.name == "nova-db-expand").unwrap();
    assert!(
        expand.failed
            && expand
                .message
                .as_deref()
                .is_some_and(|m| m.contains("backoff limit"))
    );
    // A delete names the Job it read failed by uid: another Job under the
    // name (created again meanwhile) is not deleted, and that is no error.
    assert!(
        !c.delete_job(
            "compute",
            "nova-db-expand",
            Some("00000000-0000-4000-8000-000000000000")
        )
        .await
        .unwrap(),
        "another Job's uid deleted this one"
    );
    assert!(
        c.jobs(&nova)
            .await
            .unwrap()
            .iter()
            .any(|j| j.name == "nova-db-expand"),
        "the Job is still there"
    );
    assert!(
        c.delete_job("compute", "nova-db-expand", expand.uid.as_deref())
            .await
            .unwrap()
    );
    assert!(
        !c.delete_job("compute", "nova-db-expand", None)
            .await
            .unwrap(),
        "a Job deleted by someone else is no error"
    );

    // `lockstep retry` by hand: the failed Job named by DatabaseReady is deleted.
    let again_job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "nova-db-expand"},
        "spec": {"backoffLimit": 4, "template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "ghcr.io/c5c3/nova:2026.2"}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &again_job)
        .await
        .unwrap();
    jobs.patch_status(
        "nova-db-expand",
        &PatchParams::default(),
        &Patch::Merge(&failed),
    )
    .await
    .unwrap();
    let kc = server.kubeconfig();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .args(["retry", "nova/compute/nova", "--kubeconfig"])
            .arg(kc)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted failed Job nova-db-expand"));
    assert!(
        jobs.get_opt("nova-db-expand")
            .await
            .unwrap()
            .is_none_or(|j| j.metadata.deletion_timestamp.is_some())
    );
    // Nothing failed any more: retry says so and changes nothing.
    let again = lockstep::repair::retry(&c, &nova).await.unwrap();
    assert!(
        matches!(again, lockstep::repair::Retried::Nothing(ref m) if m.contains("not a failed Job")),
        "{again:?}"
    );

    // Every repair is an Event on the object.
    c.record_event(
        &nova,
        "RepairJobDeleted",
        "deleted failed Job nova-db-expand (attempt 1) so the operator runs it again",
        false,
    )
    .await
    .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "compute");
    let list = events.list(&Default::default()).await.unwrap();
    let e = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("RepairJobDeleted"))
        .expect("the event");
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RetryRequested")),
        "retry recorded its Event"
    );
    assert_eq!(e.regarding.as_ref().unwrap().name.as_deref(), Some("nova"));
    assert_eq!(e.reporting_controller.as_deref(), Some("c5c3.io/lockstep"));
    // A report quoting a long condition message in another script: the
    // API server counts bytes, and the Event is kept, shortened.
    c.record_event(&nova, "RepairNeeded", &"→".repeat(700), true)
        .await
        .expect("a long multi-byte note is shortened, not refused");

    // A ControlPlane: the plane's release and its override move together.
    let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
    let pdoc = document("clusters/prod/controlplane.yaml");
    let override_img = |tag: &str| {
        ImageRef::new(
            Some("registry.example.internal/mirror/c5c3/placement"),
            Some(tag),
            None,
        )
        .unwrap()
    };
    c.apply(&ApplyRequest {
        key: plane.clone(),
        release: Some("2026.1".into()),
        image: None,
        overrides: vec![(Kind::Placement, override_img("2026.1"))],
        document: Some(pdoc.clone()),
    })
    .await
    .expect("the plane installs");
    let hopped = c
        .apply(&ApplyRequest {
            key: plane.clone(),
            release: Some("2026.2".into()),
            image: None,
            overrides: vec![(Kind::Placement, override_img("2026.2"))],
            document: Some(pdoc),
        })
        .await
        .expect("the plane's CRD and CEL rules accept the hop");
    assert_eq!(hopped.release.as_deref(), Some("2026.2"));
    let raw = dynamic(&client, &plane).get("prod").await.unwrap();
    assert_eq!(
        raw.data["spec"]["services"]["placement"]["image"]["tag"],
        "2026.2"
    );
    assert_eq!(
        raw.data["spec"]["services"]["glance"]["backends"][0]["name"], "primary",
        "the rest of the plane is kept"
    );

    // A CR deleted mid-upgrade reads as gone, and a partial apply cannot recreate it.
    dynamic(&client, &nova)
        .delete("nova", &Default::default())
        .await
        .unwrap();
    assert_eq!(c.get(&nova).await.unwrap(), None);
    let err = c
        .apply(&ApplyRequest {
            document: None,
            ..hop
        })
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Invalid { .. }), "{err}");

    // Two cluster names in one namespace: each daemon's record and history
    // is a key of one ConfigMap, and a write of one never removes the
    // other's (one field manager for every key did: an apply drops what its
    // manager owned and did not send).
    let other = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap();
    for round in 0..2 {
        let before = |name: &str| (round > 0).then(|| format!("{name} {}", round - 1));
        c.save_record(
            "verdicts.eu",
            &format!("eu {round}"),
            before("eu").as_deref(),
        )
        .await
        .unwrap();
        other
            .save_record(
                "verdicts.us",
                &format!("us {round}"),
                before("us").as_deref(),
            )
            .await
            .unwrap();
        assert_eq!(
            c.load_record("verdicts.eu").await.unwrap().as_deref(),
            Some(format!("eu {round}").as_str())
        );
        assert_eq!(
            other.load_record("verdicts.us").await.unwrap().as_deref(),
            Some(format!("us {round}").as_str())
        );
        let (eu, us) = (
            c.history_store("eu").unwrap(),
            other.history_store("us").unwrap(),
        );
        eu.save(format!("eu history {round}")).await.unwrap();
        us.save(format!("us history {round}")).await.unwrap();
        assert_eq!(
            eu.load().await.unwrap(),
            Some(format!("eu history {round}"))
        );
        assert_eq!(
            us.load().await.unwrap(),
            Some(format!("us history {round}"))
        );
    }

    // A record is written only over what the writer read: a save from a
    // stale read (another process wrote since) is refused and changes
    // nothing; so is a first write when another process created it first.
    let stale = c
        .save_record("verdicts.eu", "stale", Some("eu 0"))
        .await
        .unwrap_err();
    assert!(matches!(stale, ClusterError::RecordChanged(_)), "{stale}");
    assert_eq!(
        c.load_record("verdicts.eu").await.unwrap().as_deref(),
        Some("eu 1")
    );
    c.save_record("verdicts.new", "first", None).await.unwrap();
    let second = other
        .save_record("verdicts.new", "second", None)
        .await
        .unwrap_err();
    assert!(matches!(second, ClusterError::RecordChanged(_)), "{second}");
    assert_eq!(
        other.load_record("verdicts.new").await.unwrap().as_deref(),
        Some("first")
    );
    {
        // The ConfigMap deleted: the first write creates it again.
        let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
        cms.delete(
            lockstep::cluster::kube::RECORD_CONFIGMAP,
            &Default::default(),
        )
        .await
        .unwrap();
        c.save_record("verdicts.eu", "eu again", None)
            .await
            .unwrap();
        assert_eq!(
            other.load_record("verdicts.eu").await.unwrap().as_deref(),
            Some("eu again")
        );
        // What the write's second half relies on: a forced server-side
        // apply that carries a resourceVersion read before another write
        // is refused (409), not applied.
        let read = cms
            .get(lockstep::cluster::kube::RECORD_CONFIGMAP)
            .await
            .unwrap();
        other
            .save_record("verdicts.us", "us meanwhile", None)
            .await
            .unwrap();
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": lockstep::cluster::kube::RECORD_CONFIGMAP,
                "resourceVersion": read.metadata.resource_version,
            },
            "data": {"verdicts.eu": "from a stale read"},
        });
        let refused = cms
            .patch(
                lockstep::cluster::kube::RECORD_CONFIGMAP,
                &PatchParams::apply("lockstep/verdicts.eu").force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, kube::Error::Api(s) if s.code == 409),
            "{refused}"
        );
        assert_eq!(
            c.load_record("verdicts.eu").await.unwrap().as_deref(),
            Some("eu again")
        );
    }

    // Four cluster names, each record at its bound (gzip'd text does not
    // compress further), fit the one ConfigMap the API server caps at 1 MiB.
    let full = |c: char| {
        let mut t = String::with_capacity(lockstep::daemon::record::MAX_BYTES);
        let mut x: u32 = c as u32;
        while t.len() < lockstep::daemon::record::MAX_BYTES {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            t.push(char::from(b'A' + (x >> 16) as u8 % 26));
        }
        t
    };
    for name in ["eu", "us", "ap", "sa"] {
        let text = full(name.chars().next().unwrap());
        let key = format!("verdicts.{name}");
        let base = c.load_record(&key).await.unwrap();
        c.save_record(&key, &text, base.as_deref())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            c.load_record(&format!("verdicts.{name}")).await.unwrap(),
            Some(text)
        );
    }

    // A kind the API server does not serve (its CRD deleted here; not yet
    // established after a restart in life): its objects are unknown, never
    // absent. A GET and the listing both say so; an object of a served
    // kind that is not there is absent.
    {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let name = format!("{}.{}", Kind::Barbican.plural(), Kind::Barbican.group());
        crds.delete(&name, &Default::default()).await.unwrap();
        let barbican = Key::new(Kind::Barbican, "openstack", "barbican");
        let t = std::time::Instant::now();
        let got = loop {
            match c.get(&barbican).await {
                Ok(None) if t.elapsed() < std::time::Duration::from_secs(20) => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await
                }
                other => break other,
            }
        };
        match got {
            Err(ClusterError::Unavailable(m)) => {
                assert!(m.contains("does not serve barbicans"), "{m}")
            }
            other => panic!("a kind not served read as {other:?}"),
        }
        let snap = c.snapshot().await.unwrap().expect("a listing");
        assert_eq!(snap.unserved, vec![Kind::Barbican]);
        assert!(matches!(
            snap.lookup(&barbican),
            Err(ClusterError::Unavailable(_))
        ));
        let absent = Key::new(Kind::Nova, "compute", "no-such-nova");
        assert!(matches!(c.get(&absent).await, Ok(None)));
        assert!(matches!(snap.lookup(&absent), Ok(None)));
    }
}
