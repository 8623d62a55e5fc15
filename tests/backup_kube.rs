//! The backup pre-flight gate end to end: `lockstep run --cluster-mode kube`
//! (the real binary) against a real kube-apiserver with the upstream C5C3
//! CRDs and mariadb-operator's real `Backup` CRD (v0.38.1, fetched from the
//! Go module proxy by tests/peers/mariadb/fetch-crd.sh). No mariadb-operator
//! runs here (it needs a MariaDB and Jobs that run): the test creates the
//! Backup objects and writes their status through the status subresource,
//! as the operator would (`Complete` condition, reason `JobComplete`); the
//! simulated C5C3 operator (`sim_kube::KubeOperator`) stands in for Nova's.
//!
//! A Nova hop is accepted at once (the gate is never judged with the
//! commit), then held pending, not applied, while the newest successful
//! Backup of its MariaDB is missing, running, failed or too old, each time
//! saying why in its commit status; once a fresh Backup completes it is
//! applied, once, and completes.

mod common;

use std::time::{Duration, Instant};

use common::kube::{CLUSTER, Daemon, Rounds, world};
use common::sim_kube::KubeOperator;
use common::{ApiServer, FleetRepo};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use lockstep::cluster::Cluster;
use lockstep::cluster::kube::KubeCluster;
use lockstep::kind::{Key, Kind};
use serde_json::json;

const POLICY: &str = r#"apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: backups
spec:
  preflight:
    - kinds: [Nova]
      backup:
        mariaDb: openstack-db
        namespace: openstack
        maxAge: 24h
"#;

fn nova() -> Key {
    Key::new(Kind::Nova, "compute", "nova")
}

/// `(state, description)` of the commit's `lockstep/kube` note line.
fn status(repo: &FleetRepo, sha: &str) -> Option<(String, String)> {
    let out = std::process::Command::new("git")
        .args(["notes", "--ref=lockstep", "show", sha])
        .current_dir(repo.path())
        .output()
        .ok()?;
    let note = String::from_utf8_lossy(&out.stdout).into_owned();
    let prefix = format!("lockstep/{CLUSTER}: ");
    note.lines().find_map(|l| {
        let rest = l.strip_prefix(&prefix)?;
        let (state, desc) = rest.split_once(" — ").unwrap_or((rest, ""));
        Some((state.to_owned(), desc.to_owned()))
    })
}

fn backups(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("k8s.mariadb.com", "v1alpha1", "Backup");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "backups");
    Api::namespaced_with(client.clone(), "openstack", &ar)
}

/// Creates a Backup of `openstack-db` (as a person or a schedule would).
async fn create_backup(client: &kube::Client, name: &str) {
    let b: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "k8s.mariadb.com/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name, "namespace": "openstack"},
        "spec": {
            "mariaDbRef": {"name": "openstack-db"},
            "storage": {"persistentVolumeClaim": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}
            }}
        }
    }))
    .unwrap();
    backups(client)
        .create(&PostParams::default(), &b)
        .await
        .unwrap_or_else(|e| panic!("the Backup CRD accepts {name}: {e}"));
}

/// Writes the Backup's `Complete` condition through the status
/// subresource, as mariadb-operator does (`pkg/condition/complete.go`).
async fn set_complete(
    client: &kube::Client,
    name: &str,
    status: &str,
    reason: &str,
    ago: Duration,
) {
    let at = jiff::Timestamp::now() - jiff::SignedDuration::try_from(ago).unwrap();
    let at = at.round(jiff::Unit::Second).unwrap();
    let body = json!({"status": {"conditions": [{
        "type": "Complete", "status": status, "reason": reason,
        "message": if status == "True" { "Success" } else { "Running" },
        "lastTransitionTime": at.to_string(),
    }]}});
    backups(client)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

struct Fleet {
    cluster: KubeCluster,
    op: KubeOperator,
    adopted: bool,
    rounds: Rounds,
}

impl Fleet {
    async fn tick(&mut self) {
        let t = Instant::now();
        let mut adopted = Ok(());
        if !self.adopted && self.cluster.get(&nova()).await.ok().flatten().is_some() {
            adopted = self.op.adopt(&nova()).await.map_err(|e| e.to_string());
            self.adopted = adopted.is_ok();
        }
        self.rounds.run(&mut self.op, t, adopted).await;
    }

    /// Steps the operator until `done` holds.
    async fn drive(&mut self, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        loop {
            if done() {
                eprintln!("{what}: {:.1}s", start.elapsed().as_secs_f64());
                return;
            }
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
            self.tick().await;
        }
    }

    async fn release(&self) -> Option<String> {
        self.cluster
            .get(&nova())
            .await
            .unwrap()
            .and_then(|o| o.release)
    }

    async fn installed(&self) -> Option<String> {
        self.cluster
            .get(&nova())
            .await
            .unwrap()
            .and_then(|o| o.status.installed_release)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_waits_for_a_fresh_backup_then_is_applied() {
    let server = ApiServer::start();
    let cluster = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap();
    // Without mariadb-operator's CRD the read fails, saying so (a gate
    // that wants backups then waits).
    let e = cluster.backups().await.unwrap_err().to_string();
    assert!(e.contains("backups.k8s.mariadb.com is not served"), "{e}");
    server.install_crds(&common::backup_crd_dir());
    let client = cluster.client().clone();
    let ns: Api<Namespace> = Api::all(client.clone());
    for n in ["compute", "openstack"] {
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": n}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let mut fleet = Fleet {
        cluster,
        op: KubeOperator::new(client.clone(), world()),
        adopted: false,
        rounds: Rounds::default(),
    };

    let repo = FleetRepo::new();
    repo.write(".lockstep/policies/backups.yaml", POLICY);
    repo.write(
        "standalone/compute/nova.yaml",
        common::nova("nova", "2026.1", "2026.1"),
    );
    let install = repo.commit("Nova at 2026.1, and the backup gate");
    let logs = tempfile::tempdir().unwrap();
    let daemon = Daemon::start("lockstep", &server, repo.path(), logs.path(), &[], &[]);

    // An install is no hop: the gate does not hold it.
    fleet
        .drive(
            "installed without a backup",
            Duration::from_secs(60),
            || status(&repo, &install).is_some_and(|s| s.0 == "success"),
        )
        .await;

    // The hop is accepted (a backup may be taken later), then waits.
    repo.write(
        "standalone/compute/nova.yaml",
        common::nova("nova", "2026.2", "2026.2"),
    );
    let hop = repo.commit("Nova to 2026.2");
    let said = |want: &'static str| {
        let repo = &repo;
        let hop = hop.clone();
        move || status(repo, &hop).is_some_and(|(s, d)| s == "pending" && d.contains(want))
    };
    fleet
        .drive(
            "waiting with no backup at all",
            Duration::from_secs(60),
            said("waiting: no successful backup of nova (MariaDB openstack/openstack-db; none matches), need one at most 24h old"),
        )
        .await;

    // An old one: waits, saying how old.
    create_backup(&client, "nova-old").await;
    set_complete(
        &client,
        "nova-old",
        "True",
        "JobComplete",
        Duration::from_secs(31 * 3600),
    )
    .await;
    fleet
        .drive(
            "waiting on a 31h old backup",
            Duration::from_secs(60),
            said("waiting: last backup of nova 31h"),
        )
        .await;
    let (_, d) = status(&repo, &hop).unwrap();
    assert!(
        d.contains("old, need 24h (Backup openstack/nova-old"),
        "{d}"
    );

    // A fresh one still running, then failed (a failed Job is
    // Complete=True, reason JobFailed): still the old one that counts.
    create_backup(&client, "nova-fresh").await;
    set_complete(&client, "nova-fresh", "False", "JobRunning", Duration::ZERO).await;
    for _ in 0..10 {
        fleet.tick().await;
    }
    set_complete(&client, "nova-fresh", "True", "JobFailed", Duration::ZERO).await;
    for _ in 0..10 {
        fleet.tick().await;
    }
    let (s, d) = status(&repo, &hop).unwrap();
    assert!(
        s == "pending" && d.contains("last backup of nova 31h"),
        "{s}: {d}"
    );
    assert_eq!(
        fleet.release().await.as_deref(),
        Some("2026.1"),
        "not applied while waiting"
    );
    assert!(
        !daemon.applied().iter().any(|(_, to)| to == "2026.2"),
        "{:?}",
        daemon.applied()
    );

    // A fresh backup completes: the hop is applied, once, and completes.
    create_backup(&client, "nova-now").await;
    set_complete(
        &client,
        "nova-now",
        "True",
        "JobComplete",
        Duration::from_secs(60),
    )
    .await;
    fleet
        .drive(
            "the hop applied and complete",
            Duration::from_secs(90),
            || status(&repo, &hop).is_some_and(|s| s.0 == "success"),
        )
        .await;
    assert_eq!(fleet.release().await.as_deref(), Some("2026.2"));
    assert_eq!(fleet.installed().await.as_deref(), Some("2026.2"));
    let hops: Vec<_> = daemon
        .applied()
        .into_iter()
        .filter(|(o, to)| o == &nova().to_string() && to == "2026.2")
        .collect();
    assert_eq!(hops.len(), 1, "applied once: {:?}", daemon.applied());

    // What the daemon read: every Backup, as the CRD stores it.
    let mut read = fleet.cluster.backups().await.unwrap();
    read.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = read.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["nova-fresh", "nova-now", "nova-old"]);
    for b in &read {
        assert_eq!(
            (b.mariadb.as_str(), b.mariadb_namespace.as_str()),
            ("openstack-db", "openstack")
        );
    }
    assert_eq!(read[0].succeeded_at(), None, "JobFailed is no success");
    assert!(read[1].succeeded_at() > read[2].succeeded_at());
}
