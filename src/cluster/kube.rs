//! The cluster over kube-rs: dynamic objects for the C5C3 kinds (their
//! schemas are the operators', not ours), typed Jobs and Events.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};

use super::{
    ApplyRequest, Cluster, ClusterError, ClusterObject, DeploymentFacts, DeploymentInfo, EventInfo,
    FIELD_MANAGER, JobInfo, Snapshot, apply_body,
};
use crate::kind::{Key, Kind, VERSION};
use crate::live::{Condition, LiveStatus};
use crate::release::ImageRef;

pub struct KubeCluster {
    client: Client,
    /// Who reports lockstep's Events (the pod name, in a cluster).
    instance: String,
}

impl KubeCluster {
    pub fn new(client: Client) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "lockstep".into());
        Self { client, instance }
    }

    /// In-cluster configuration, or `$KUBECONFIG` / `~/.kube/config`.
    pub async fn infer() -> Result<Self, ClusterError> {
        let client = Client::try_default().await.map_err(|e| {
            let kubeconfig = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<kube::config::InferConfigError>())
                .and_then(|s| std::error::Error::source(s))
                .and_then(|s| s.downcast_ref::<kube::config::KubeconfigError>());
            ClusterError::Other(match kubeconfig {
                Some(k) => format!(
                    "cannot configure a Kubernetes client: not running in a cluster, and the kubeconfig ($KUBECONFIG, else ~/.kube/config): {}",
                    kubeconfig_problem(k)
                ),
                None => format!("cannot configure a Kubernetes client: {e}"),
            })
        })?;
        Ok(Self::new(client))
    }

    /// A client from an explicit kubeconfig file.
    pub async fn from_kubeconfig(path: &std::path::Path) -> Result<Self, ClusterError> {
        let problem = |e: kube::config::KubeconfigError| {
            ClusterError::Other(format!(
                "kubeconfig {}: {}",
                crate::escape::escape(&path.to_string_lossy()),
                kubeconfig_problem(&e)
            ))
        };
        let kc = kube::config::Kubeconfig::read_from(path).map_err(problem)?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(problem)?;
        let client = Client::try_from(config).map_err(|e| ClusterError::Other(e.to_string()))?;
        Ok(Self::new(client))
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A failure on the record's ConfigMap, said the way a person fixes it.
    fn record_error(&self, what: &str, e: kube::Error) -> ClusterError {
        record_error(&self.client, what, e)
    }

    fn api(&self, key: &Key) -> Api<DynamicObject> {
        dynamic_api(&self.client, key)
    }
}

/// What is wrong with a kubeconfig, said without quoting it: kube's own
/// message for a YAML error shows the lines around it, and a kubeconfig's
/// lines hold tokens, passwords and keys. The other errors name a context,
/// a cluster, a file or a kind of fault, never the file's text.
fn kubeconfig_problem(e: &kube::config::KubeconfigError) -> String {
    match e {
        kube::config::KubeconfigError::Parse(p) => match p.location() {
            Some(l) => format!(
                "line {}: not a kubeconfig (YAML that does not parse, or a field of the wrong type); its text is not shown, it may hold credentials",
                l.line()
            ),
            None => "not a kubeconfig (YAML that does not parse, or a field of the wrong type); its text is not shown, it may hold credentials".into(),
        },
        other => other.to_string(),
    }
}

/// A failure on the records' ConfigMap, said the way a person fixes it.
fn record_error(client: &Client, what: &str, e: kube::Error) -> ClusterError {
    configmap_error(client, RECORD_CONFIGMAP, what, e)
}

/// A failure on one of lockstep's own ConfigMaps (`name`), said the way a
/// person fixes it.
fn configmap_error(client: &Client, name: &str, what: &str, e: kube::Error) -> ClusterError {
    let at = format!(
        "cannot {what} ConfigMap {}/{name}",
        client.default_namespace()
    );
    match e {
        kube::Error::Api(s) if s.code == 403 => ClusterError::Other(format!(
            "{at}: forbidden; grant get and patch on it and create on configmaps (deploy/rbac.yaml, Role lockstep-records)"
        )),
        kube::Error::Api(s) if matches!(s.code, 408 | 429 | 500..=599) => {
            ClusterError::Unavailable(format!("{at}: {} {}", s.code, s.reason))
        }
        kube::Error::Api(s) => ClusterError::Other(format!("{at}: {} {}", s.code, s.message)),
        other => ClusterError::Unavailable(format!("{at}: {other}")),
    }
}

/// The API of a C5C3 object: dynamic, since the schemas are the operators'.
pub fn dynamic_api(client: &Client, key: &Key) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(key.kind.group(), VERSION, key.kind.as_str());
    let ar = ApiResource::from_gvk_with_plural(&gvk, key.kind.plural());
    Api::namespaced_with(client.clone(), &key.namespace, &ar)
}

/// `spec.image` of an object's spec, when it is a valid ImageSpec.
pub fn spec_image(spec: &serde_json::Value) -> Option<ImageRef> {
    let i = spec.get("image")?;
    ImageRef::new(
        i.get("repository").and_then(|v| v.as_str()),
        i.get("tag").and_then(|v| v.as_str()),
        i.get("digest").and_then(|v| v.as_str()),
    )
    .ok()
}

/// Every object of `api`, a page of 500 at a time (each page handed to
/// `each` and dropped, so a large cluster is never held as JSON at once).
impl KubeCluster {
    async fn server_side_apply(
        &self,
        req: &ApplyRequest,
        params: PatchParams,
    ) -> Result<ClusterObject, ClusterError> {
        let body = apply_body(req);
        let obj = self
            .api(&req.key)
            .patch(&req.key.name, &params, &Patch::Apply(&body))
            .await
            .map_err(|e| classify(&req.key, e))?;
        Ok(to_object(&req.key, &obj))
    }
}

/// `false` when the API server does not serve the kind (404): its
/// objects are unknown ([`Snapshot::unserved`]).
async fn list_pages<K>(
    api: &Api<K>,
    what: &str,
    mut each: impl FnMut(K),
) -> Result<bool, ClusterError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(500);
    loop {
        let page = match api.list(&params).await {
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            r => r,
        };
        let page = page.map_err(|e| match e {
            kube::Error::Api(s) => ClusterError::Unavailable(format!(
                "listing {what}: {} {}: {}",
                s.code, s.reason, s.message
            )),
            other => ClusterError::Unavailable(format!("listing {what}: {other}")),
        })?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        page.items.into_iter().for_each(&mut each);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(true),
        }
    }
}

/// What [`super::deployments_of`] reads of a Deployment.
fn deployment_facts(d: &Deployment) -> Option<DeploymentFacts> {
    let name = d.metadata.name.clone()?;
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let rolled_out = st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
        && st.updated_replicas.unwrap_or(0) == want
        && st.ready_replicas.unwrap_or(0) == want
        && st.replicas.unwrap_or(0) == want;
    let template = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref());
    let annotations = Kind::SERVICES
        .iter()
        .filter_map(|k| super::second_roll_annotation(*k))
        .filter_map(|a| Some((a, template?.get(a)?.clone())))
        .collect();
    Some(DeploymentFacts {
        name,
        rolled_out,
        annotations,
    })
}

/// Maps kube-rs errors onto what lockstep does about them.
fn classify(key: &Key, e: kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(s) => match s.code {
            404 => ClusterError::NotFound(key.clone()),
            409 => ClusterError::Conflict {
                key: key.clone(),
                message: s.message,
            },
            400 | 403 | 422 => ClusterError::Invalid {
                key: key.clone(),
                message: s.message,
            },
            408 | 429 | 500..=599 => {
                ClusterError::Unavailable(format!("{} {}: {}", s.code, s.reason, s.message))
            }
            _ => ClusterError::Other(format!("{} {}: {}", s.code, s.reason, s.message)),
        },
        // Connection refused, timeouts, TLS and the like: try again later.
        other => ClusterError::Unavailable(other.to_string()),
    }
}

fn to_object(key: &Key, obj: &DynamicObject) -> ClusterObject {
    let spec = obj.data.get("spec");
    let text = |v: Option<&serde_json::Value>, k: &str| {
        v.and_then(|v| v.get(k))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let image = spec.and_then(spec_image);
    let status = obj.data.get("status");
    let conditions: Vec<Condition> = status
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    ClusterObject {
        key: key.clone(),
        generation: obj.metadata.generation.unwrap_or_default(),
        resource_version: obj.metadata.resource_version.clone().unwrap_or_default(),
        release: text(spec, "openStackRelease"),
        image,
        status: LiveStatus {
            repair_record: obj
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::repair::RECORD_ANNOTATION))
                .cloned(),
            applied: obj
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::rollout::APPLIED_ANNOTATION))
                .cloned(),
            installed_release: text(status, "installedRelease"),
            target_release: text(status, "targetRelease"),
            upgrade_phase: text(status, "upgradePhase"),
            installed_image: text(status, "installedImage"),
            generation: obj.metadata.generation,
            conditions,
            projected_by: crate::live::projecting_plane(
                &key.namespace,
                obj.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .map(|o| (o.api_version.as_str(), o.kind.as_str(), o.name.as_str())),
                |k| {
                    obj.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(k))
                        .map(String::as_str)
                },
            ),
        },
    }
}

/// The ConfigMap holding lockstep's records, in the client's namespace
/// (the pod's own, in a cluster); one data key per record name.
pub const RECORD_CONFIGMAP: &str = "lockstep-records";

/// Writes of the record that meet a ConfigMap changed since its read
/// (another cluster's key, most often) before the pass gives up.
const RECORD_WRITE_TRIES: usize = 5;

/// A record name as a ConfigMap data key (`[-._a-zA-Z0-9]+`).
fn record_key(name: &str) -> String {
    let k: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if k.is_empty() || k.chars().all(|c| c == '.') {
        "_".into()
    } else {
        k
    }
}

/// The ConfigMap holding the dashboard's hop history, in the client's
/// namespace; one data key per cluster (`history.<cluster>`). Not
/// [`RECORD_CONFIGMAP`]: a ConfigMap holds 1 MiB in all, and display data
/// must never crowd out the verdict record (`docs/gate.md`, "Verdicts
/// don't move") and make its write fail.
pub const HISTORY_CONFIGMAP: &str = "lockstep-history";

/// The field manager that writes one data key of lockstep's ConfigMaps:
/// one manager per key. A server-side apply removes the fields its manager
/// owned and left out, and each write sends only its own key; with one
/// manager for every key, a daemon of another cluster name writing its
/// record removed this one's (a lost record: an abort judged again from
/// Git alone). Keys are `[-._a-zA-Z0-9]`, so the name is one a manager may
/// have; a manager name is at most 128 bytes.
fn key_manager(key: &str) -> String {
    let mut m = format!("lockstep/{key}");
    m.truncate(128);
    m
}

/// The dashboard's history as one key (`history.<cluster>`) of its own
/// ConfigMap, [`HISTORY_CONFIGMAP`].
struct KubeHistory {
    client: Client,
    key: String,
}

impl crate::cluster::HistoryStore for KubeHistory {
    fn load(&self) -> futures::future::BoxFuture<'static, Result<Option<String>, ClusterError>> {
        let (client, key) = (self.client.clone(), self.key.clone());
        Box::pin(async move {
            let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
            match api.get_opt(HISTORY_CONFIGMAP).await {
                Ok(Some(cm)) => Ok(cm.data.and_then(|mut d| d.remove(&key))),
                Ok(None) => Ok(None),
                Err(e) => Err(configmap_error(&client, HISTORY_CONFIGMAP, "read", e)),
            }
        })
    }

    fn save(&self, text: String) -> futures::future::BoxFuture<'static, Result<(), ClusterError>> {
        let (client, key) = (self.client.clone(), self.key.clone());
        let manager = key_manager(&key);
        Box::pin(async move {
            let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
            let body = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": HISTORY_CONFIGMAP,
                    "labels": {"app.kubernetes.io/managed-by": "lockstep"},
                },
                "data": { key: text },
            });
            let pp = PatchParams::apply(&manager).force();
            api.patch(HISTORY_CONFIGMAP, &pp, &Patch::Apply(&body))
                .await
                .map_err(|e| configmap_error(&client, HISTORY_CONFIGMAP, "write", e))?;
            Ok(())
        })
    }
}

impl Cluster for KubeCluster {
    fn history_store(
        &self,
        cluster: &str,
    ) -> Option<std::sync::Arc<dyn crate::cluster::HistoryStore>> {
        Some(std::sync::Arc::new(KubeHistory {
            client: self.client.clone(),
            key: record_key(&format!("history.{cluster}")),
        }))
    }

    async fn backups(&self) -> Result<Vec<crate::preflight::Backup>, ClusterError> {
        use crate::preflight::{BACKUP_GROUP, BACKUP_KIND, BACKUP_PLURAL, BACKUP_VERSION};
        let gvk = GroupVersionKind::gvk(BACKUP_GROUP, BACKUP_VERSION, BACKUP_KIND);
        let ar = ApiResource::from_gvk_with_plural(&gvk, BACKUP_PLURAL);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let list = api.list(&ListParams::default()).await.map_err(|e| match e {
            // No such resource: mariadb-operator's CRD is not installed.
            kube::Error::Api(s) if s.code == 404 => ClusterError::Other(format!(
                "{BACKUP_PLURAL}.{BACKUP_GROUP} is not served by this cluster (is mariadb-operator installed?)"
            )),
            kube::Error::Api(s) => {
                ClusterError::Unavailable(format!("{} {}: {}", s.code, s.reason, s.message))
            }
            other => ClusterError::Unavailable(other.to_string()),
        })?;
        Ok(list
            .items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .filter_map(|v| crate::preflight::Backup::from_json(&v))
            .collect())
    }

    async fn load_record(&self, name: &str) -> Result<Option<String>, ClusterError> {
        let api: Api<ConfigMap> = Api::default_namespaced(self.client.clone());
        match api.get_opt(RECORD_CONFIGMAP).await {
            Ok(Some(cm)) => Ok(cm.data.and_then(|mut d| d.remove(&record_key(name)))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.record_error("read", e)),
        }
    }

    fn record_location(&self, name: &str) -> String {
        format!(
            "key {} of ConfigMap {}/{RECORD_CONFIGMAP}",
            record_key(name),
            self.client.default_namespace()
        )
    }

    async fn applied_object(&self) -> Result<Option<Key>, ClusterError> {
        // The one listing a pass makes anyway; read only while the record
        // is missing (a first start), so its cost is once.
        Ok(self.snapshot().await?.and_then(|s| {
            s.objects
                .into_values()
                .filter(|o| o.status.applied.is_some())
                .map(|o| o.key)
                .min()
        }))
    }

    async fn save_record(
        &self,
        name: &str,
        text: &str,
        base: Option<&str>,
    ) -> Result<(), ClusterError> {
        let api: Api<ConfigMap> = Api::default_namespaced(self.client.clone());
        let key = record_key(name);
        // Compare and swap: read the key, refuse if it moved from `base`,
        // and write with the resourceVersion read as a precondition, so
        // nothing written between the read and the write is lost. A 409
        // means the ConfigMap changed in between (often another cluster's
        // key beside ours): read again and compare again.
        for _ in 0..RECORD_WRITE_TRIES {
            let current = api
                .get_opt(RECORD_CONFIGMAP)
                .await
                .map_err(|e| self.record_error("read", e))?;
            let value = current
                .as_ref()
                .and_then(|cm| cm.data.as_ref())
                .and_then(|d| d.get(&key));
            if !super::record_write(value.map(String::as_str), text, base, || {
                self.record_location(name)
            })? {
                return Ok(());
            }
            let manager = key_manager(&key);
            let exists = current.is_some();
            let written = match current.and_then(|cm| cm.metadata.resource_version) {
                // The API server always sets one; without it there would
                // be no precondition to write with.
                None if exists => {
                    return Err(ClusterError::Other(format!(
                        "{}: the ConfigMap has no resourceVersion",
                        self.record_location(name)
                    )));
                }
                Some(rv) => {
                    let body = serde_json::json!({
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": RECORD_CONFIGMAP,
                            "resourceVersion": rv,
                            "labels": {"app.kubernetes.io/managed-by": "lockstep"},
                        },
                        "data": { &key: text },
                    });
                    // Only lockstep writes this object: a field manager of
                    // the key's own, forced, so a record is never lost to a
                    // field conflict with a past instance, nor to the write
                    // of another cluster's record.
                    let pp = PatchParams::apply(&manager).force();
                    api.patch(RECORD_CONFIGMAP, &pp, &Patch::Apply(&body))
                        .await
                        .map(drop)
                }
                // None yet: created, which fails if another process
                // created it first.
                None => {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(RECORD_CONFIGMAP.into()),
                            labels: Some(
                                [("app.kubernetes.io/managed-by".into(), "lockstep".into())].into(),
                            ),
                            ..Default::default()
                        },
                        data: Some([(key.clone(), text.to_owned())].into()),
                        ..Default::default()
                    };
                    let pp = PostParams {
                        field_manager: Some(manager),
                        ..Default::default()
                    };
                    api.create(&pp, &cm).await.map(drop)
                }
            };
            match written {
                Ok(()) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(self.record_error("write", e)),
            }
        }
        Err(ClusterError::Unavailable(format!(
            "{}: changed by others on each of {RECORD_WRITE_TRIES} tries to write it",
            self.record_location(name)
        )))
    }

    async fn get(&self, key: &Key) -> Result<Option<ClusterObject>, ClusterError> {
        match self.api(key).get(&key.name).await {
            Ok(o) => Ok(Some(to_object(key, &o))),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                // Absent only when the API server says this object is not
                // found; a 404 without its name is the kind not served.
                if s.details.as_ref().is_some_and(|d| d.name == key.name) {
                    Ok(None)
                } else {
                    Err(ClusterError::Unavailable(super::unserved(key.kind)))
                }
            }
            Err(e) => Err(classify(key, e)),
        }
    }

    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        // No force: a field another manager owns with another value is a
        // conflict to report, not a fight to win (`docs/operators.md` §8.3).
        self.server_side_apply(req, PatchParams::apply(FIELD_MANAGER))
            .await
    }

    async fn dry_run(&self, req: &ApplyRequest) -> Result<(), ClusterError> {
        self.server_side_apply(req, PatchParams::apply(FIELD_MANAGER).dry_run())
            .await
            .map(drop)
    }

    async fn reapply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        self.server_side_apply(req, PatchParams::apply(FIELD_MANAGER).force())
            .await
    }

    async fn jobs(&self, key: &Key) -> Result<Vec<JobInfo>, ClusterError> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), &key.namespace);
        let prefix = format!("{}-db-", key.name);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| classify(key, e))?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|j| {
                let name = j.metadata.name.clone()?;
                if !name.starts_with(&prefix) {
                    return None;
                }
                let conds = j
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                let is = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
                let message = conds
                    .iter()
                    .find(|c| c.type_ == "Failed" && c.status == "True")
                    .and_then(|c| c.message.clone());
                Some(JobInfo {
                    name,
                    uid: j.metadata.uid.clone(),
                    complete: is("Complete"),
                    failed: is("Failed"),
                    message,
                })
            })
            .collect())
    }

    async fn deployments(&self, key: &Key) -> Result<Vec<DeploymentInfo>, ClusterError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &key.namespace);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| classify(key, e))?;
        let facts: Vec<DeploymentFacts> = list.items.iter().filter_map(deployment_facts).collect();
        Ok(super::deployments_of(key, &facts))
    }

    fn snapshot(
        &self,
    ) -> impl Future<Output = Result<Option<Snapshot>, ClusterError>> + Send + 'static {
        let client = self.client.clone();
        async move {
            // Every kind's listing at once: a page is a round trip, and the
            // kinds' pages do not wait on one another.
            let kinds = std::iter::once(Kind::ControlPlane)
                .chain(Kind::SERVICES)
                .map(|kind| {
                    let client = client.clone();
                    async move {
                        let gvk = GroupVersionKind::gvk(kind.group(), VERSION, kind.as_str());
                        let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural());
                        let api: Api<DynamicObject> = Api::all_with(client, &ar);
                        let mut objects = Vec::new();
                        let served = list_pages(&api, kind.plural(), |o: DynamicObject| {
                            let key = Key::new(
                                kind,
                                o.metadata.namespace.clone().unwrap_or_default(),
                                o.metadata.name.clone().unwrap_or_default(),
                            );
                            let obj = to_object(&key, &o);
                            objects.push((key, obj));
                        })
                        .await?;
                        Ok::<_, ClusterError>((kind, served, objects))
                    }
                });
            let deployments = async {
                let api: Api<Deployment> = Api::all(client.clone());
                let mut by_ns: std::collections::HashMap<String, Vec<DeploymentFacts>> =
                    std::collections::HashMap::new();
                list_pages(&api, "deployments", |d: Deployment| {
                    if let Some(f) = deployment_facts(&d) {
                        let ns = d.metadata.namespace.unwrap_or_default();
                        by_ns.entry(ns).or_default().push(f);
                    }
                })
                .await?;
                Ok::<_, ClusterError>(by_ns)
            };
            let (objects, deployments) =
                futures::future::try_join(futures::future::try_join_all(kinds), deployments)
                    .await?;
            let unserved = objects
                .iter()
                .filter(|(_, served, _)| !served)
                .map(|(kind, _, _)| *kind)
                .collect();
            Ok(Some(Snapshot {
                objects: objects.into_iter().flat_map(|(_, _, o)| o).collect(),
                deployments,
                unserved,
            }))
        }
    }

    fn watch(&self) -> futures::stream::BoxStream<'static, Key> {
        use futures::StreamExt;
        self.watch_versions().map(|(k, _)| k).boxed()
    }

    fn watch_versions(&self) -> futures::stream::BoxStream<'static, (Key, Option<String>)> {
        use futures::StreamExt;
        use kube::ResourceExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let streams = std::iter::once(Kind::ControlPlane)
            .chain(Kind::SERVICES)
            .map(|kind| {
                let gvk = GroupVersionKind::gvk(kind.group(), VERSION, kind.as_str());
                let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural());
                let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
                // Errors (a CRD not installed, the server restarting) are
                // retried with backoff inside the watcher; they yield no keys.
                // Deletions too: an object deleted while Git still holds it
                // is installed again at once, not at the next full resync.
                // A deleted object is announced without a version, so its
                // unit is always read again.
                watcher(api, watcher::Config::default())
                    .default_backoff()
                    .filter_map(move |r| async move {
                        let key = |o: &DynamicObject| {
                            Key::new(kind, o.namespace().unwrap_or_default(), o.name_any())
                        };
                        match r.ok()? {
                            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                                Some((key(&o), o.resource_version()))
                            }
                            watcher::Event::Delete(o) => Some((key(&o), None)),
                            watcher::Event::Init | watcher::Event::InitDone => None,
                        }
                    })
                    .boxed()
            });
        futures::stream::select_all(streams).boxed()
    }

    async fn events(&self, key: &Key) -> Result<Vec<EventInfo>, ClusterError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &key.namespace);
        let params = ListParams::default().fields(&format!(
            "regarding.name={},regarding.kind={}",
            key.name,
            key.kind.as_str()
        ));
        let mut items = api.list(&params).await.map_err(|e| classify(key, e))?.items;
        items.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
        Ok(items
            .into_iter()
            .map(|e| EventInfo {
                reason: e.reason.unwrap_or_default(),
                message: e.note.unwrap_or_default(),
                warning: e.type_.as_deref() == Some("Warning"),
                reporter: e.reporting_controller.unwrap_or_default(),
            })
            .collect())
    }

    async fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<bool, ClusterError> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            preconditions: uid.map(|u| kube::api::Preconditions {
                uid: Some(u.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(true),
            // Gone, or another Job under the name (the precondition).
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
            Err(e) => Err(classify(&Key::new(Kind::ControlPlane, namespace, name), e)),
        }
    }

    async fn set_repair_record(&self, key: &Key, record: &str) -> Result<(), ClusterError> {
        // A JSON merge patch of the one annotation, as its own manager: it
        // sends nothing else, so it changes nothing else, and the manager
        // `lockstep` (the document's server-side apply) never owns it.
        let body = serde_json::json!({
            "metadata": { "annotations": { crate::repair::RECORD_ANNOTATION: record } }
        });
        let params = PatchParams {
            field_manager: Some(crate::repair::RECORD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.api(key)
            .patch(&key.name, &params, &Patch::Merge(&body))
            .await
            .map_err(|e| classify(key, e))?;
        Ok(())
    }

    async fn record_event(
        &self,
        key: &Key,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> Result<(), ClusterError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &key.namespace);
        let now = k8s_openapi::jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                // A prefix may end in "-" (the API server masks it), never in ".".
                generate_name: Some(format!("{}.lockstep-", key.name)),
                namespace: Some(key.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some("Reconcile".into()),
            reason: Some(reason.to_owned()),
            note: Some(note(message)),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            reporting_controller: Some("c5c3.io/lockstep".into()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some(key.kind.api_version()),
                kind: Some(key.kind.as_str().into()),
                name: Some(key.name.clone()),
                namespace: Some(key.namespace.clone()),
                ..ObjectReference::default()
            }),
            ..Event::default()
        };
        api.create(&PostParams::default(), &event)
            .await
            .map_err(|e| classify(key, e))?;
        Ok(())
    }
}

/// An Event's note as the API server takes it: at most 1,024 bytes (not
/// characters: a longer note, say a condition message in another script,
/// is refused, and the Event lost), cut at a character with `…`.
/// An Event's note: escaped onto one line (a condition's message is a Job's
/// output, and `kubectl describe` prints it to a terminal: control and
/// bidi characters from it are shown, never acted on), then cut to the API
/// server's 1 KiB.
fn note(message: &str) -> String {
    const MAX: usize = 1024;
    let message = &*crate::escape::escape(message);
    if message.len() <= MAX {
        return message.to_owned();
    }
    let mut end = MAX - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod note_tests {
    #[test]
    fn notes_fit_the_api_servers_byte_limit() {
        assert_eq!(super::note("short"), "short");
        for m in [
            "x".repeat(5000),
            "→".repeat(1000),
            format!("a{}", "é".repeat(900)),
        ] {
            let n = super::note(&m);
            assert!(n.len() <= 1024 && n.ends_with('…'), "{} bytes", n.len());
            assert!(m.starts_with(n.trim_end_matches('…')));
        }
        // A Job's output carries terminal sequences and line breaks.
        assert_eq!(
            super::note("ExpandFailed: \x1b[2J\r\nlockstep: all fine\u{202e}"),
            "ExpandFailed: \\x1b[2J\\r\\nlockstep: all fine\\u{202e}"
        );
    }
}
