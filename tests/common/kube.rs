//! Support for end-to-end tests against the real kube-apiserver
//! (`run_kube.rs`, `plan_kube.rs`): `lockstep run --cluster-mode kube` as a
//! child process, and what the simulated C5C3 operator needs to project a
//! ControlPlane's children there.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::sim_kube::KubeOperator;
use lockstep::kind::Kind;
use lockstep::sim::{Params, World};
use serde_json::{Value, json};

use super::ApiServer;

/// The cluster's name in status contexts: `lockstep/kube`.
pub const CLUSTER: &str = "kube";

/// A projected child's spec template from a standalone example: its spec
/// without release and image (the plane sets those).
pub fn example_template(rel: &str) -> Value {
    let docs: Vec<Value> = serde_saphyr::from_multiple(&super::example(rel)).unwrap();
    let mut spec = docs[0]["spec"].clone();
    let m = spec.as_object_mut().unwrap();
    m.remove("image");
    m.remove("openStackRelease");
    spec
}

/// What the ControlPlane operator would project for each service: enough for
/// the CRDs' required fields and CEL rules.
pub fn template(kind: Kind) -> Value {
    let db = |name: &str| {
        json!({"clusterRef": {"name": "openstack-db"}, "database": name,
               "secretRef": {"name": format!("{name}-db"), "key": "password"}})
    };
    let cache = json!({"clusterRef": {"name": "openstack-memcached"}, "backend": "dogpile.cache.pymemcache"});
    let keystone = "http://keystone.openstack.svc:5000/v3";
    let user = |svc: &str| json!({"secretRef": {"name": format!("{svc}-service-user"), "key": "password"}});
    let messaging = json!({"secretRef": {"name": "transport-url", "key": "transport_url"}});
    match kind {
        Kind::Keystone => json!({
            "database": db("keystone"), "cache": cache,
            "bootstrap": {"adminPasswordSecretRef": {"name": "keystone-admin", "key": "password"}}
        }),
        Kind::Glance => example_template("standalone/image/glance.yaml"),
        Kind::Nova => example_template("standalone/compute/nova.yaml"),
        Kind::Placement | Kind::Barbican => json!({
            "database": db(kind.service()), "cache": cache,
            "keystoneEndpoint": keystone, "serviceUser": user(kind.service())
        }),
        Kind::Horizon => json!({
            "cache": cache, "keystoneEndpoint": keystone,
            "secretKeyRef": {"name": "horizon-secret-key", "key": "secret-key"}
        }),
        Kind::Cinder => json!({
            "database": db("cinder"), "cache": cache, "messaging": messaging,
            "keystoneEndpoint": keystone, "serviceUser": user("cinder")
        }),
        Kind::Neutron => json!({
            "database": db("neutron"), "cache": cache, "messaging": messaging,
            "keystoneEndpoint": keystone, "serviceUser": user("neutron"),
            "ovn": {"centralRef": {"name": "ovn-central"}}
        }),
        Kind::ControlPlane => unreachable!(),
    }
}

/// The simulated operator's world. Every phase takes one virtual minute, so
/// the children's phases end together and a hop takes few operator rounds
/// (each round reads and writes every object over the API server).
pub fn world() -> World {
    let minute = Duration::from_secs(60);
    World::new(Params {
        sync: minute,
        expand: minute,
        migrate: minute,
        contract: minute,
        roll: minute,
        failed_try: minute,
        ..Params::default()
    })
}

/// `lockstep run` as a child process, its stderr (JSON logs) in a file.
/// Killed when dropped; its log is printed when the test fails.
pub struct Daemon {
    name: String,
    child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(
        name: &str,
        server: &ApiServer,
        repo: &Path,
        logs: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let log = logs.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .arg("run")
            .arg("--repo")
            .arg(repo)
            .args(["--cluster-mode", "kube", "--kubeconfig"])
            .arg(server.kubeconfig())
            .args([
                "--cluster-name",
                CLUSTER,
                "--poll",
                "1s",
                "--report",
                "notes",
            ])
            .args(["--log-format", "json", "--log-level", "info"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("lockstep runs");
        Self {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Log records from byte `from` on.
    pub fn records_from(&self, from: usize) -> Vec<Value> {
        self.text()
            .get(from..)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn records(&self) -> Vec<Value> {
        self.records_from(0)
    }

    /// Every `applied` record: `(object, to)`.
    pub fn applied(&self) -> Vec<(String, String)> {
        self.records()
            .iter()
            .filter(|r| r["fields"]["message"] == "applied")
            .map(|r| {
                (
                    r["fields"]["object"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    r["fields"]["to"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Every `applied` record, sorted: a hop applied twice shows twice.
    pub fn applied_sorted(&self) -> Vec<(String, String)> {
        let mut a = self.applied();
        a.sort();
        a
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let text = self.text();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!(
                "---- {} stderr (last {} of {} lines) ----\n{}\n---- end of {} ----",
                self.name,
                tail.len(),
                lines.len(),
                tail.join("\n"),
                self.name
            );
        }
    }
}

/// Operator rounds a test has run, and the time they took.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rounds {
    pub count: usize,
    pub time: Duration,
}

impl Rounds {
    /// One round of the simulated operator, begun at `started` with the
    /// adoption of new objects (`adopted`); errors (the API server down) are
    /// retried by the next round, as a controller would. Pauses after it:
    /// briefly while work is due, longer when idle or failing.
    pub async fn run(
        &mut self,
        op: &mut KubeOperator,
        started: Instant,
        adopted: Result<(), String>,
    ) {
        let r = match adopted {
            Ok(()) => op
                .step(Duration::from_secs(60))
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        self.count += 1;
        self.time += started.elapsed();
        let pause = match r {
            Ok(true) => 20,
            Ok(false) => 100,
            Err(e) => {
                eprintln!("operator round failed (retrying): {e}");
                500
            }
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }

    /// Prints how long `what` took and the rounds run for it since `before`.
    pub fn report(&self, what: &str, start: Instant, before: Rounds) {
        eprintln!(
            "{what}: {:.1}s ({} operator rounds, {:.1}s in them)",
            start.elapsed().as_secs_f64(),
            self.count - before.count,
            (self.time - before.time).as_secs_f64()
        );
    }
}

/// A pod that stands for a replica of lockstep (the API server here runs
/// no kubelet, so the test writes the status a kubelet would): a follower
/// forwards webhook deliveries only to a Lease holder whose pod runs as its
/// own ServiceAccount at the holder's IP (`src/forward.rs`).
pub async fn replica_pod(client: &kube::Client, ns: &str, name: &str, account: &str, ip: &str) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "lockstep"}},
        "spec": {
            "serviceAccountName": account,
            "containers": [{"name": "lockstep", "image": "ghcr.io/c5c3/lockstep:test"}]
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}
