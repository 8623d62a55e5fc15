//! `deploy/` (the manifests that run `lockstep run` in a cluster) against a
//! real kube-apiserver v1.34 with the upstream CRDs (tests/peers/kube): the
//! manifests really apply, the ServiceAccount may do exactly what lockstep
//! does and nothing more (`kubectl auth can-i` as the ServiceAccount), and
//! lockstep's own cluster calls and leader election succeed with the
//! ServiceAccount's token. Pure tests pin the Deployment's security settings
//! and the agreement between the files.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube_lease_manager::LeaseManagerBuilder;
use lockstep::cluster::kube::KubeCluster;
use lockstep::cluster::{ApplyRequest, Cluster};
use lockstep::kind::{Key, Kind};
use lockstep::release::ImageRef;
use serde_json::Value;

use common::ApiServer;

const SA: &str = "system:serviceaccount:lockstep:lockstep";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(deploy_dir().join(rel)).unwrap_or_else(|e| panic!("deploy/{rel}: {e}"))
}

fn documents(rel: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&read(rel))
        .unwrap_or_else(|e| panic!("deploy/{rel} is not YAML: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn document(rel: &str) -> Value {
    let mut docs = documents(rel);
    assert_eq!(docs.len(), 1, "deploy/{rel} holds one object");
    docs.remove(0)
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs (tests/peers/install.sh installs it)")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn identity(o: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

/// The objects of deploy/ as the server has them (`kubectl get -k`).
fn stored(kubeconfig: &Path, dir: &str) -> Vec<Value> {
    let out = kubectl(kubeconfig, &["get", "-k", dir, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).expect("kubectl get -o json");
    list["items"].as_array().expect("items").clone()
}

/// Every object of deploy/ as (kind, namespace, name), from the files.
fn manifest_objects() -> BTreeSet<(String, String, String)> {
    let kustomization = document("kustomization.yaml");
    let files = kustomization["resources"].as_array().expect("resources");
    files
        .iter()
        .flat_map(|f| documents(f.as_str().expect("a file name")))
        .map(|d| identity(&d))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_applies_and_the_service_account_has_least_privilege() {
    let server = ApiServer::start();
    let kc = server.kubeconfig();
    let dir = deploy_dir();
    let dir = dir.to_str().expect("utf-8 path");

    // Apply for real (no dry run). PodSecurity admission warns when a
    // workload's pod template breaks the namespace's `restricted` level, and
    // kubectl prints deprecations: both come as warnings on stderr.
    let out = kubectl(&kc, &["apply", "-k", dir]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/ failed:\n{stdout}\n{stderr}"
    );
    assert!(
        !stderr.to_lowercase().contains("warning"),
        "kubectl apply -k deploy/ warned:\n{stderr}"
    );
    let expected = manifest_objects();
    assert_eq!(expected.len(), 15, "{expected:#?}");
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(" created")).count(),
        expected.len(),
        "every object is created:\n{stdout}"
    );
    // Every object is stored, where the files say, labelled.
    let items = stored(&kc, dir);
    let found: BTreeSet<(String, String, String)> = items.iter().map(identity).collect();
    assert_eq!(found, expected);
    for o in &items {
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/name"], "lockstep",
            "{} {} is labelled",
            o["kind"], o["metadata"]["name"]
        );
    }
    let deployment = items
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the Deployment is stored");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "lockstep"
    );

    // Applying again writes nothing: no object gets a new resourceVersion.
    // (kubectl says "configured" for Secrets with stringData and for a PDB's
    // selector on every client-side apply, so its words are no measure.)
    let again = kubectl(&kc, &["apply", "-k", dir]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let versions = |items: &[Value]| -> Vec<(String, String, String, String)> {
        items
            .iter()
            .map(|o| {
                let (k, ns, n) = identity(o);
                let rv = o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                (k, ns, n, rv.to_owned())
            })
            .collect()
    };
    assert_eq!(
        versions(&stored(&kc, dir)),
        versions(&items),
        "a second apply is a no-op"
    );

    // Least privilege, as the ServiceAccount (impersonated by the admin).
    // `kubectl auth can-i` answers "yes" (exit 0) or "no" (exit 1); a
    // resource the server does not know is a warning on stderr, so a typo
    // here cannot pass as a "no".
    let allowed = [
        "patch novas.nova.openstack.c5c3.io -n openstack",
        "patch novas.nova.openstack.c5c3.io/nova -n compute",
        "create controlplanes.c5c3.io -n openstack",
        "get keystones.keystone.openstack.c5c3.io -n openstack",
        "watch controlplanes.c5c3.io --all-namespaces",
        "list neutrons.neutron.openstack.c5c3.io --all-namespaces",
        "get jobs.batch -n openstack",
        "list jobs.batch -n openstack",
        "watch jobs.batch -n openstack",
        "delete jobs.batch -n openstack",
        "delete jobs.batch/nova-db-expand -n compute",
        "get deployments.apps -n openstack",
        "list deployments.apps -n openstack",
        "list deployments.apps --all-namespaces",
        "watch deployments.apps -n openstack",
        "create events.events.k8s.io -n openstack",
        "list events.events.k8s.io -n openstack",
        "get leases.coordination.k8s.io/lockstep -n lockstep",
        "update leases.coordination.k8s.io/lockstep -n lockstep",
        "patch leases.coordination.k8s.io/lockstep -n lockstep",
        "create leases.coordination.k8s.io -n lockstep",
        "list leases.coordination.k8s.io/lockstep -n lockstep",
        "watch leases.coordination.k8s.io/lockstep -n lockstep",
        "get pods -n lockstep",
        "get configmaps/lockstep-records -n lockstep",
        "patch configmaps/lockstep-records -n lockstep",
        "get configmaps/lockstep-history -n lockstep",
        "patch configmaps/lockstep-history -n lockstep",
        "create configmaps -n lockstep",
    ];
    let denied = [
        // No secrets anywhere, not even its own.
        "get secrets -n openstack",
        "get secrets -n lockstep",
        "list secrets --all-namespaces",
        // C5C3 objects: applied, never updated whole, deleted or forced
        // through status.
        "delete novas.nova.openstack.c5c3.io -n openstack",
        "delete controlplanes.c5c3.io -n openstack",
        "deletecollection keystones.keystone.openstack.c5c3.io -n openstack",
        "update novas.nova.openstack.c5c3.io -n openstack",
        "patch novas.nova.openstack.c5c3.io --subresource=status -n openstack",
        "patch controlplanes.c5c3.io --subresource=status -n openstack",
        // The CRDs themselves.
        "get customresourcedefinitions.apiextensions.k8s.io --all-namespaces",
        // Jobs and Deployments: followed, not written.
        "create jobs.batch -n openstack",
        "patch jobs.batch -n openstack",
        "deletecollection jobs.batch -n openstack",
        "patch deployments.apps -n openstack",
        "update deployments.apps -n openstack",
        "delete deployments.apps -n openstack",
        "patch deployments.apps --subresource=scale -n openstack",
        // Events: recorded and read, never rewritten or removed; the core
        // (v1) Events API is not the one lockstep uses.
        "delete events.events.k8s.io -n openstack",
        "patch events.events.k8s.io -n openstack",
        "create events -n openstack",
        // Leases: only its own, only in its namespace.
        "update leases.coordination.k8s.io/other -n lockstep",
        "get leases.coordination.k8s.io/other -n lockstep",
        "delete leases.coordination.k8s.io/lockstep -n lockstep",
        "update leases.coordination.k8s.io/lockstep -n kube-system",
        "get leases.coordination.k8s.io/lockstep -n kube-system",
        "create leases.coordination.k8s.io -n kube-system",
        "list leases.coordination.k8s.io -n lockstep",
        "watch leases.coordination.k8s.io -n lockstep",
        "list leases.coordination.k8s.io --all-namespaces",
        // Pods: a follower reads the Lease holder's, in its own namespace.
        "list pods -n lockstep",
        "watch pods -n lockstep",
        "get pods -n openstack",
        "get pods --subresource=log -n lockstep",
        "patch pods -n lockstep",
        // Its record and its hop history: only its own two ConfigMaps,
        // only in its namespace.
        "get configmaps/other -n lockstep",
        "patch configmaps/other -n lockstep",
        "update configmaps/lockstep-records -n lockstep",
        "delete configmaps/lockstep-records -n lockstep",
        "patch configmaps/lockstep-records -n kube-system",
        "update configmaps/lockstep-history -n lockstep",
        "delete configmaps/lockstep-history -n lockstep",
        "get configmaps/lockstep-history -n kube-system",
        "patch configmaps/lockstep-history -n kube-system",
        "list configmaps -n lockstep",
        // Nothing else (cluster-scoped ones with --all-namespaces: no namespace).
        "create pods -n openstack",
        "create pods --subresource=exec -n lockstep",
        "get configmaps -n lockstep",
        "create serviceaccounts/token -n lockstep",
        "impersonate serviceaccounts",
        "escalate clusterroles.rbac.authorization.k8s.io --all-namespaces",
        "bind clusterroles.rbac.authorization.k8s.io --all-namespaces",
        "create namespaces --all-namespaces",
        "get nodes --all-namespaces",
        "* *",
    ];
    let checks: Vec<(&str, bool)> = allowed
        .iter()
        .map(|c| (*c, true))
        .chain(denied.iter().map(|c| (*c, false)))
        .collect();
    // A few kubectl processes at a time: each one is mostly start-up.
    let mut wrong: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = checks
            .chunks(checks.len().div_ceil(3))
            .map(|chunk| {
                s.spawn(|| {
                    chunk
                        .iter()
                        .filter_map(|&(c, want)| can_i(&kc, c, want))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    // Every C5C3 kind, by the group and plural lockstep uses, through the
    // same authorizer (SubjectAccessReview, as the ServiceAccount's token
    // would be judged): the verbs lockstep needs, and none that it does not.
    let admin = client(&kc).await;
    for kind in std::iter::once(Kind::ControlPlane).chain(Kind::SERVICES) {
        let checks = [
            ("get", "openstack", "", true),
            ("list", "openstack", "", true),
            ("watch", "openstack", "", true),
            ("create", "openstack", "", true),
            ("patch", "openstack", "", true),
            ("list", "", "", true),
            ("watch", "", "", true),
            ("update", "openstack", "", false),
            ("delete", "openstack", "", false),
            ("deletecollection", "openstack", "", false),
            ("patch", "openstack", "status", false),
            ("update", "openstack", "status", false),
        ];
        for (verb, ns, sub, want) in checks {
            let got = access_review(&admin, kind.group(), kind.plural(), verb, ns, sub).await;
            if got != want {
                wrong.push(format!(
                    "SubjectAccessReview {verb} {}.{} {sub} in {ns:?}: want {want}, got {got}",
                    kind.plural(),
                    kind.group()
                ));
            }
        }
    }
    // mariadb-operator's Backups (the pre-flight gate): read, never
    // written or watched. A SubjectAccessReview needs no CRD installed.
    for (verb, ns, sub, want) in [
        ("get", "openstack", "", true),
        ("list", "openstack", "", true),
        ("list", "", "", true),
        ("watch", "", "", false),
        ("create", "openstack", "", false),
        ("patch", "openstack", "", false),
        ("delete", "openstack", "", false),
        ("patch", "openstack", "status", false),
    ] {
        let got = access_review(&admin, "k8s.mariadb.com", "backups", verb, ns, sub).await;
        if got != want {
            wrong.push(format!(
                "SubjectAccessReview {verb} backups.k8s.mariadb.com {sub} in {ns:?}: want {want}, got {got}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC is not least privilege:\n{}",
        wrong.join("\n")
    );

    // lockstep's own calls, with the ServiceAccount's token: every call the
    // kube cluster edge makes succeeds under this RBAC.
    let out = kubectl(
        &kc,
        &[
            "create",
            "token",
            "lockstep",
            "-n",
            "lockstep",
            "--duration",
            "10m",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_owned();
    let sa_kc = service_account_kubeconfig(&kc, &token).await;
    let out = kubectl(&kc, &["create", "namespace", "compute"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubectl(
        &kc,
        &[
            "create",
            "job",
            "nova-db-expand",
            "-n",
            "compute",
            "--image",
            "ghcr.io/c5c3/nova:2026.1",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let c = KubeCluster::from_kubeconfig(&sa_kc.1).await.unwrap();
    let mut changes = c.watch();
    let nova = Key::new(Kind::Nova, "compute", "nova");
    let installed = c
        .apply(&ApplyRequest {
            key: nova.clone(),
            release: Some("2026.1".into()),
            image: Some(ImageRef::new(Some("ghcr.io/c5c3/nova"), Some("2026.1"), None).unwrap()),
            overrides: vec![],
            document: Some(example_nova()),
        })
        .await
        .expect("server-side apply installs the Nova");
    assert_eq!(installed.generation, 1);
    assert!(c.get(&nova).await.unwrap().is_some());
    let jobs = c.jobs(&nova).await.expect("jobs are listed");
    assert_eq!(
        jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
        ["nova-db-expand"]
    );
    assert!(
        c.deployments(&nova)
            .await
            .expect("deployments are listed")
            .is_empty()
    );
    // A pass that reads every unit lists each kind and the Deployments
    // cluster-wide: allowed, and it finds the Nova.
    let snap = c
        .snapshot()
        .await
        .expect("the cluster is listed")
        .expect("the kube cluster lists");
    assert_eq!(snap.get(&nova), c.get(&nova).await.unwrap());
    c.record_event(&nova, "RepairRetriedJob", "deploy test", false)
        .await
        .expect("an Event is recorded");
    let events = c.events(&nova).await.expect("events are listed");
    assert!(
        events.iter().any(|e| e.reason == "RepairRetriedJob"),
        "{events:?}"
    );
    assert!(
        c.delete_job("compute", "nova-db-expand", None)
            .await
            .expect("a Job is deleted")
    );
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(k) = changes.next().await {
            if k == nova {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the cluster-wide watch sees the Nova");
    drop(changes);

    // The verdict record and the dashboard's history, each in its own
    // ConfigMap (created by the first apply, then patched): a full history
    // next to a record of 600 KiB, more than one ConfigMap's 1 MiB together,
    // so the history can never make the record's write fail.
    let history = c
        .history_store("prod")
        .expect("kube mode keeps the history");
    let full = "h".repeat(lockstep::ui::keep::BUDGET);
    history
        .save(full.clone())
        .await
        .expect("the history is written");
    let big = "r".repeat(600 * 1024);
    c.save_record("verdicts.prod", &big, None)
        .await
        .expect("the record is written beside a full history");
    history
        .save(full.clone())
        .await
        .expect("the history is written again");
    c.save_record("verdicts.prod", "small", Some(&big))
        .await
        .expect("the record is written again");
    assert_eq!(history.load().await.expect("read back"), Some(full));
    assert_eq!(
        c.load_record("verdicts.prod").await.expect("read back"),
        Some("small".to_owned())
    );
    let cms: Api<ConfigMap> = Api::namespaced(sa_kc.0.clone(), "lockstep");
    for (name, key) in [
        ("lockstep-records", "verdicts.prod"),
        ("lockstep-history", "history.prod"),
    ] {
        let keys: Vec<String> = cms
            .get(name)
            .await
            .expect("the ConfigMap is read")
            .data
            .unwrap_or_default()
            .into_keys()
            .collect();
        assert_eq!(keys, [key], "{name}");
    }

    // Leader election on the Lease `lockstep`, and nowhere else.
    let sa_client = sa_kc.0;
    let leader = LeaseManagerBuilder::new(sa_client.clone(), "lockstep")
        .with_namespace("lockstep")
        .with_identity("lockstep-0")
        .build()
        .await
        .expect("the Lease `lockstep` is created");
    let took = tokio::time::timeout(Duration::from_secs(10), leader.changed()).await;
    assert!(matches!(took, Ok(Ok(true))), "the Lease is taken: {took:?}");
    leader.release().await.expect("the Lease is released");
    // lockstep follows the holder with a watch selecting the Lease by name;
    // an unselected list is refused.
    let leases: Api<Lease> = Api::namespaced(sa_client.clone(), "lockstep");
    let by_name = ListParams::default().fields("metadata.name=lockstep");
    let listed = leases
        .list(&by_name)
        .await
        .expect("the Lease is listed by name");
    assert_eq!(listed.items.len(), 1);
    let mut watch = leases
        .watch(
            &WatchParams::default().fields("metadata.name=lockstep"),
            "0",
        )
        .await
        .expect("the Lease is watched by name")
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next()).await;
    assert!(
        matches!(first, Ok(Some(Ok(WatchEvent::Added(_))))),
        "the watch delivers the Lease: {first:?}"
    );
    drop(watch);
    let all = leases.list(&ListParams::default()).await;
    assert!(
        matches!(all, Err(kube::Error::Api(ref s)) if s.code == 403),
        "an unselected list is forbidden: {all:?}"
    );
    for (ns, name) in [("lockstep", "other"), ("kube-system", "lockstep")] {
        let denied = async {
            let m = LeaseManagerBuilder::new(sa_client.clone(), name)
                .with_namespace(ns)
                .with_identity("lockstep-0")
                .build()
                .await?;
            m.changed().await
        };
        let r = tokio::time::timeout(Duration::from_secs(10), denied).await;
        assert!(
            matches!(r, Ok(Err(_))),
            "the Lease {ns}/{name} is out of reach: {r:?}"
        );
    }
}

/// `kubectl auth can-i` as the ServiceAccount: None when it answers `want`.
fn can_i(kubeconfig: &Path, check: &str, want: bool) -> Option<String> {
    let mut args = vec!["auth", "can-i", "--as", SA];
    args.extend(check.split(' '));
    let out = kubectl(kubeconfig, &args);
    let (answer, stderr) = (text(&out.stdout), text(&out.stderr));
    let expected = if want {
        ("yes", Some(0))
    } else {
        ("no", Some(1))
    };
    ((answer.trim(), out.status.code()) != expected || !stderr.trim().is_empty()).then(|| {
        format!(
            "can-i {check}: want {}, got {:?} (exit {:?}) {}",
            expected.0,
            answer.trim(),
            out.status.code(),
            stderr.trim()
        )
    })
}

/// Whether the ServiceAccount may `verb` the resource (namespace "" for
/// all namespaces), as the API server's authorizer says.
async fn access_review(
    admin: &kube::Client,
    group: &str,
    resource: &str,
    verb: &str,
    namespace: &str,
    subresource: &str,
) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {
            "user": SA,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:lockstep", "system:authenticated"],
            "resourceAttributes": {
                "group": group, "resource": resource, "verb": verb,
                "namespace": namespace, "subresource": subresource,
            },
        }
    }))
    .unwrap();
    let done = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    done.status.expect("a review has a status").allowed
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let parsed = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn example_nova() -> Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet/standalone/compute/nova.yaml"),
    )
    .unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
}

/// A kube client and a kubeconfig file that authenticate with `token`
/// against the admin kubeconfig's server.
async fn service_account_kubeconfig(admin: &Path, token: &str) -> (kube::Client, PathBuf) {
    let text = std::fs::read_to_string(admin).unwrap();
    let mut kc: Value = serde_saphyr::from_str(&text).unwrap();
    kc["users"] = serde_json::json!([{"name": "lockstep", "user": {"token": token}}]);
    kc["contexts"][0]["context"]["user"] = "lockstep".into();
    // As in its pod: the client's namespace is lockstep's own, where its
    // ConfigMaps are.
    kc["contexts"][0]["context"]["namespace"] = "lockstep".into();
    let path = admin.with_file_name("lockstep-sa.kubeconfig");
    std::fs::write(&path, serde_json::to_vec_pretty(&kc).unwrap()).unwrap();
    (client(&path).await, path)
}

/// The Deployment's replicas, security settings, probes and mounts, without
/// a server.
#[test]
fn the_deployment_runs_hardened_with_probes_and_its_mounts() {
    let d: Value = serde_saphyr::from_str(&read("deployment.yaml")).expect("deployment.yaml");
    assert_eq!(d["kind"], "Deployment");
    assert_eq!(d["metadata"]["namespace"], "lockstep");
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "lockstep");
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true);
    assert_eq!(psc["runAsUser"], 65532);
    assert_eq!(psc["runAsGroup"], 65532);
    assert_eq!(psc["fsGroup"], 65532);
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
            ["topologyKey"],
        "kubernetes.io/hostname"
    );

    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["image"], "ghcr.io/c5c3/lockstep:0.1.0");
    assert_eq!(
        c["args"],
        serde_json::json!(["run", "--config", "/etc/lockstep/config.yaml"])
    );
    let csc = &c["securityContext"];
    assert_eq!(csc["allowPrivilegeEscalation"], false);
    assert_eq!(csc["readOnlyRootFilesystem"], true);
    assert_eq!(csc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(csc["capabilities"].get("add").is_none());
    assert!(csc.get("privileged").is_none_or(|p| p == false));

    let ports: Vec<(String, i64)> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    // The dashboard's port is declared; it answers only when `ui.listen`
    // is set in the ConfigMap (docs/ui.md).
    assert_eq!(
        ports,
        [
            ("webhook".into(), 8080),
            ("metrics".into(), 9090),
            ("ui".into(), 8081)
        ]
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "metrics");

    let res = &c["resources"];
    assert_eq!(res["requests"]["cpu"], "50m");
    assert_eq!(res["requests"]["memory"], "64Mi");
    assert_eq!(res["limits"]["memory"], "256Mi");
    assert!(res["limits"].get("cpu").is_none(), "no CPU limit");

    let env: Vec<(&str, &str)> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        env,
        [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
            ("POD_IP", "status.podIP")
        ]
    );

    // Mounts: secrets read-only where the config looks, writable scratch
    // only on emptyDirs (the root filesystem is read-only).
    let volumes = pod["volumes"].as_array().expect("volumes");
    let volume = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    let mounts = c["volumeMounts"].as_array().expect("volumeMounts");
    let mount = |path: &str| {
        let m = mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("nothing mounted at {path}"));
        (m, volume(m["name"].as_str().unwrap()))
    };
    for (path, secret) in [
        ("/etc/lockstep/git", "lockstep-git"),
        ("/etc/lockstep/forge", "lockstep-forge"),
        ("/etc/lockstep/webhook", "lockstep-webhook"),
    ] {
        let (m, v) = mount(path);
        assert_eq!(m["readOnly"], true, "{path} is read-only");
        assert_eq!(v["secret"]["secretName"], secret, "{path}");
    }
    let (m, v) = mount("/etc/lockstep/config.yaml");
    assert_eq!(m["readOnly"], true);
    assert_eq!(v["configMap"]["name"], "lockstep-config");
    for path in ["/var/cache/lockstep", "/tmp"] {
        let (m, v) = mount(path);
        assert!(v.get("emptyDir").is_some(), "{path} is an emptyDir");
        assert!(
            m.get("readOnly").is_none_or(|r| r == false),
            "{path} is writable"
        );
    }
    for m in mounts {
        let name = m["name"].as_str().unwrap();
        let v = volume(name);
        if v.get("emptyDir").is_none() {
            assert_eq!(m["readOnly"], true, "only emptyDirs are writable: {name}");
        }
    }
}

/// The files agree with each other and with lockstep: every file the config
/// names is mounted, the listeners are the container's ports and the
/// Service's, the Lease is the one the Role names, and the ClusterRole names
/// each C5C3 kind by the group and plural lockstep uses.
#[test]
fn config_mounts_ports_lease_and_kinds_agree() {
    let cm = document("configmap.yaml");
    assert_eq!(cm["metadata"]["name"], "lockstep-config");
    let config: Value = serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap())
        .expect("config.yaml is YAML");
    let d = document("deployment.yaml");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let mount_paths: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    let secrets = documents("secrets.yaml");
    let volumes = d["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
    for file in [
        &config["source"]["tokenFile"],
        &config["report"]["tokenFile"],
        &config["webhook"]["githubSecretFile"],
    ] {
        let file = Path::new(file.as_str().expect("a path"));
        let dir = file.parent().unwrap().to_str().unwrap();
        let key = file.file_name().unwrap().to_str().unwrap();
        assert!(mount_paths.contains(&dir), "{dir} is mounted");
        let m = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == dir)
            .unwrap();
        let v = volumes.iter().find(|v| v["name"] == m["name"]).unwrap();
        let secret = secrets
            .iter()
            .find(|s| s["metadata"]["name"] == v["secret"]["secretName"])
            .unwrap_or_else(|| panic!("the Secret mounted at {dir} is in secrets.yaml"));
        assert_eq!(secret["type"], "Opaque");
        assert_eq!(
            secret["stringData"][key], "REPLACE_ME",
            "{} carries the key {key} as a placeholder",
            secret["metadata"]["name"]
        );
    }
    assert!(mount_paths.contains(&config["source"]["cacheDir"].as_str().unwrap()));

    let port_of = |listen: &Value| -> i64 {
        listen
            .as_str()
            .and_then(|l| l.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .expect("host:port")
    };
    let svc = document("service.yaml");
    for (listen, name) in [
        (&config["webhook"]["listen"], "webhook"),
        (&config["server"]["listen"], "metrics"),
    ] {
        let port = port_of(listen);
        let cp = c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap();
        assert_eq!(cp["containerPort"], port, "{name}");
        let sp = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap();
        assert_eq!(sp["port"], port, "{name}");
        assert_eq!(sp["targetPort"], name);
    }
    assert_eq!(
        svc["spec"]["selector"],
        d["spec"]["selector"]["matchLabels"]
    );
    let pdb = document("poddisruptionbudget.yaml");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"], d["spec"]["selector"]);

    // RBAC.
    let rbac = documents("rbac.yaml");
    let of = |kind: &str| rbac.iter().find(|o| o["kind"] == kind).unwrap();
    let role = of("Role");
    let named: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r.get("resourceNames").is_some())
        .collect();
    assert_eq!(named.len(), 1);
    assert_eq!(config["leaderElection"]["enabled"], true);
    assert_eq!(
        named[0]["resourceNames"],
        serde_json::json!([config["leaderElection"]["leaseName"]])
    );
    let cluster_role = of("ClusterRole");
    let rules = cluster_role["rules"].as_array().unwrap();
    let mut c5c3 = BTreeSet::new();
    for r in rules {
        let verbs: Vec<&str> = r["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(!verbs.contains(&"*"), "no wildcard verbs: {r}");
        for g in r["apiGroups"].as_array().unwrap() {
            for res in r["resources"].as_array().unwrap() {
                assert_ne!(res, "*", "no wildcard resources");
                assert_ne!(res, "secrets", "no secrets");
                if g.as_str().unwrap().ends_with("c5c3.io") {
                    assert_eq!(
                        verbs,
                        ["get", "list", "watch", "create", "patch"],
                        "{g}/{res}"
                    );
                    c5c3.insert((
                        g.as_str().unwrap().to_owned(),
                        res.as_str().unwrap().to_owned(),
                    ));
                }
            }
        }
    }
    let kinds: BTreeSet<(String, String)> = std::iter::once(Kind::ControlPlane)
        .chain(Kind::SERVICES)
        .map(|k| (k.group().to_owned(), k.plural().to_owned()))
        .collect();
    assert_eq!(c5c3, kinds);
    for binding in [of("ClusterRoleBinding"), of("RoleBinding")] {
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "lockstep", "namespace": "lockstep"}])
        );
    }
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        "lockstep"
    );
}
