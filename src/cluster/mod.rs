//! The cluster edge: exactly what lockstep reads and writes, behind one small
//! trait, with a real implementation over kube-rs ([`kube`]) and an
//! in-process one over the simulated operator ([`memory`]).
//!
//! Writes are few and careful (`docs/operators.md` §8): one
//! server-side-apply patch per object carrying release and image together,
//! field manager `lockstep`, never forced (a conflict with another manager
//! is reported, not won); deleting a permanently failed phase Job;
//! recording an Event for every repair. Status is never written: the
//! operators own it.

pub mod kube;
pub mod memory;

use std::future::Future;
use std::time::Duration;

use thiserror::Error;

use crate::kind::{Key, Kind};
use crate::live::LiveStatus;
use crate::release::ImageRef;

/// The field manager lockstep applies as.
pub const FIELD_MANAGER: &str = "lockstep";

/// A C5C3 object as the cluster has it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterObject {
    pub key: Key,
    pub generation: i64,
    pub resource_version: String,
    /// `spec.openStackRelease`, where the kind has one.
    pub release: Option<String>,
    /// `spec.image` (services); `None` for a ControlPlane.
    pub image: Option<ImageRef>,
    pub status: LiveStatus,
}

/// A phase or sync Job of a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub name: String,
    /// Its `metadata.uid`: a delete is made only of the Job that was read
    /// failed, not of one created again under its name meanwhile.
    pub uid: Option<String>,
    pub complete: bool,
    pub failed: bool,
    /// The failure's message, when Kubernetes gives one.
    pub message: Option<String>,
}

/// A Deployment of a service, as far as following a hop needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploymentInfo {
    pub name: String,
    /// Fully converged (`docs/operators.md` §5.4): observed the current
    /// generation, and updated = ready = total = desired replicas.
    pub rolled_out: bool,
    /// The pod template's second-roll annotation
    /// (`nova.c5c3.io/installed-release`, `cinder.c5c3.io/installed-release`).
    pub installed_release: Option<String>,
}

/// The pod-template annotation that makes Nova's and Cinder's workers roll
/// a second time after contract (`docs/operators.md` §7).
pub fn second_roll_annotation(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Nova => Some("nova.c5c3.io/installed-release"),
        Kind::Cinder => Some("cinder.c5c3.io/installed-release"),
        _ => None,
    }
}

/// What the tracker needs of a child: its status, and whether its annotated
/// workers finished the second roll.
pub async fn observe<C: Cluster>(
    cluster: &C,
    key: &Key,
) -> Result<Option<crate::follow::Observation>, ClusterError> {
    match cluster.get(key).await? {
        None => Ok(None),
        Some(obj) => observe_object(cluster, key, obj).await.map(Some),
    }
}

/// [`observe`] of an object read already: a unit's read asks the API
/// server for each object once.
pub async fn observe_object<C: Cluster>(
    cluster: &C,
    key: &Key,
    obj: ClusterObject,
) -> Result<crate::follow::Observation, ClusterError> {
    let deployments = if second_roll_annotation(key.kind).is_some() {
        cluster.deployments(key).await?
    } else {
        Vec::new()
    };
    Ok(observation(key, obj, &deployments))
}

/// What the tracker needs of an object, from the object and its
/// Deployments (read one by one, or from a [`Snapshot`]).
pub fn observation(
    key: &Key,
    obj: ClusterObject,
    deployments: &[DeploymentInfo],
) -> crate::follow::Observation {
    let second_roll_done = if second_roll_annotation(key.kind).is_some() {
        let installed = obj.status.installed_release.clone();
        deployments.iter().all(|d| {
            d.rolled_out && (d.installed_release.is_none() || d.installed_release == installed)
        })
    } else {
        true
    };
    crate::follow::Observation {
        kind: key.kind,
        generation: obj.generation,
        image_reference: obj
            .image
            .as_ref()
            .map(|i| i.reference())
            .unwrap_or_default(),
        status: obj.status,
        second_roll_done,
    }
}

/// A Deployment as [`Cluster::deployments`] reads it, before it is matched
/// to a service: its name, whether it has rolled out, and the second-roll
/// annotations its pod template carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploymentFacts {
    pub name: String,
    pub rolled_out: bool,
    /// (annotation, value) for the [`second_roll_annotation`]s present.
    pub annotations: Vec<(&'static str, String)>,
}

/// The Deployments of `key` among a namespace's: `<name>` and
/// `<name>-<role>` (`<name>-db-…` are Jobs' names, never Deployments').
pub fn deployments_of(key: &Key, facts: &[DeploymentFacts]) -> Vec<DeploymentInfo> {
    let role_prefix = format!("{}-", key.name);
    let annotation = second_roll_annotation(key.kind);
    facts
        .iter()
        .filter(|d| d.name == key.name || d.name.starts_with(&role_prefix))
        .map(|d| DeploymentInfo {
            name: d.name.clone(),
            rolled_out: d.rolled_out,
            installed_release: annotation.and_then(|a| {
                d.annotations
                    .iter()
                    .find(|(k, _)| *k == a)
                    .map(|(_, v)| v.clone())
            }),
        })
        .collect()
}

/// The cluster's C5C3 objects and Deployments, each kind read with one
/// paged LIST: what a pass that reads every unit reads, instead of a GET
/// (and a Deployments LIST) per object. At 5,000 objects the reads one by
/// one took 13 s with eight in flight.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub objects: std::collections::HashMap<Key, ClusterObject>,
    /// Deployments by namespace.
    pub deployments: std::collections::HashMap<String, Vec<DeploymentFacts>>,
    /// Kinds the API server did not serve (404 on the LIST): their objects
    /// are unknown, not absent ([`Snapshot::lookup`]).
    pub unserved: Vec<Kind>,
}

impl Snapshot {
    pub fn get(&self, key: &Key) -> Option<ClusterObject> {
        self.objects.get(key).cloned()
    }

    /// An object as the listing saw it. One of a kind the API server did
    /// not serve is an error, never "absent": a CRD not (yet) established,
    /// after an API server restart say, would otherwise read as every
    /// object of its kind deleted, and be installed again at Git's newest
    /// step, over the live one, skipping every hop between.
    pub fn lookup(&self, key: &Key) -> Result<Option<ClusterObject>, ClusterError> {
        if self.unserved.contains(&key.kind) {
            return Err(ClusterError::Unavailable(unserved(key.kind)));
        }
        Ok(self.get(key))
    }

    pub fn deployments(&self, key: &Key) -> Vec<DeploymentInfo> {
        self.deployments
            .get(&key.namespace)
            .map(|f| deployments_of(key, f))
            .unwrap_or_default()
    }
}

/// An Event about an object, as the operators (or lockstep) recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    pub reason: String,
    pub message: String,
    pub warning: bool,
    /// Who recorded it (`reportingController`).
    pub reporter: String,
}

/// One object's release and image, as lockstep applies them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyRequest {
    pub key: Key,
    /// `spec.openStackRelease` (planes and the kinds that have it).
    pub release: Option<String>,
    /// `spec.image` of a service.
    pub image: Option<ImageRef>,
    /// A plane's `services.<svc>.image` overrides lockstep carries.
    pub overrides: Vec<(Kind, ImageRef)>,
    /// The whole document from Git, when lockstep is the object's applier:
    /// server-side apply owns what it sends, and a later apply that left out
    /// fields sent before would remove them. With a document, the hop's
    /// release and image are written into it and the whole of it is applied;
    /// without, only release and image are (another manager owns the rest).
    pub document: Option<serde_json::Value>,
}

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("{0} does not exist in the cluster")]
    NotFound(Key),
    /// Another field manager owns a field lockstep tried to set to another value.
    #[error("{key}: conflict with another writer, not forced: {message}")]
    Conflict { key: Key, message: String },
    /// The API server (schema, CEL rules, admission webhooks) refused the object.
    #[error("{key}: refused by the API server: {message}")]
    Invalid { key: Key, message: String },
    /// Down, slow, throttled or failing: worth another try later.
    #[error("API server unavailable: {0}")]
    Unavailable(String),
    /// The record (at the location named) no longer reads what this
    /// process judged from: it is read again and the pass judged again.
    #[error(
        "{0} was written by another lockstep process since this one read it; read again and judged again next pass"
    )]
    RecordChanged(String),
    #[error("cluster: {0}")]
    Other(String),
}

/// Why objects of `kind` cannot be read.
pub fn unserved(kind: Kind) -> String {
    format!(
        "the API server does not serve {} ({}): its CRD is missing or not established yet; its objects are unknown, and lockstep waits rather than take them for deleted",
        kind.plural(),
        kind.api_version()
    )
}

/// The compare of `Cluster::save_record`'s compare and swap, given what
/// the record reads `now`: `Ok(true)` write `text`; `Ok(false)` nothing to
/// write (another process wrote just this); `RecordChanged` (at
/// `location`) when it no longer reads `base`.
pub(crate) fn record_write(
    now: Option<&str>,
    text: &str,
    base: Option<&str>,
    location: impl FnOnce() -> String,
) -> Result<bool, ClusterError> {
    if now == Some(text) {
        Ok(false)
    } else if now == base {
        Ok(true)
    } else {
        Err(ClusterError::RecordChanged(location()))
    }
}

impl ClusterError {
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ClusterError::Unavailable(_) | ClusterError::RecordChanged(_)
        )
    }
}

/// The dashboard's history in the cluster: one text value, read at start
/// and replaced by the daemon (`ui::keep` says what is in it). Never read
/// by a decision. Its futures own what they need, so a write can run in a
/// task of its own while passes go on.
pub trait HistoryStore: Send + Sync {
    fn load(&self) -> futures::future::BoxFuture<'static, Result<Option<String>, ClusterError>>;
    fn save(&self, text: String) -> futures::future::BoxFuture<'static, Result<(), ClusterError>>;
}

pub trait Cluster: Send + Sync {
    fn get(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<ClusterObject>, ClusterError>> + Send;

    /// Server-side apply of release and image together; returns the object
    /// as stored (with its new generation).
    fn apply(
        &self,
        req: &ApplyRequest,
    ) -> impl Future<Output = Result<ClusterObject, ClusterError>> + Send;

    /// [`Cluster::apply`] as a dry run (`dryRun=All`): the schema, CEL
    /// rules and admission webhooks answer, nothing is stored. How the
    /// objects a commit starts together are applied all or none
    /// (`docs/gate.md`, "A commit is applied whole").
    fn dry_run(&self, req: &ApplyRequest) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// [`Cluster::apply`] of a step the cluster left (a drift, after its
    /// backoff), taking back the fields another manager took: an edit
    /// (`kubectl edit`, `kubectl set image`) owns what it changed, and an
    /// unforced apply of other values would conflict for ever. Only
    /// lockstep's own step again, never a new hop (`docs/operators.md`
    /// §8.3). A cluster without field ownership applies as usual.
    fn reapply(
        &self,
        req: &ApplyRequest,
    ) -> impl Future<Output = Result<ClusterObject, ClusterError>> + Send {
        self.apply(req)
    }

    /// The `<name>-db-*` Jobs of a service.
    fn jobs(&self, key: &Key) -> impl Future<Output = Result<Vec<JobInfo>, ClusterError>> + Send;

    /// The Deployments of a service (`<name>` and `<name>-<role>`).
    fn deployments(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Vec<DeploymentInfo>, ClusterError>> + Send;

    /// Events about an object, oldest first (the operators' phase events:
    /// `UpgradeInitiated`, `ExpandFailed`, `UpgradeCheckWarnings`, …).
    fn events(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Vec<EventInfo>, ClusterError>> + Send;

    /// Every C5C3 object and Deployment at once ([`Snapshot`]), for a pass
    /// that reads every unit. `None`, the default: no cheaper way than one
    /// read per object (the simulated cluster, whose reads cost nothing).
    /// The future owns what it needs (`'static`): the daemon starts it
    /// before the judgment and reads it after, so the listing's round trips
    /// overlap the parse.
    fn snapshot(
        &self,
    ) -> impl Future<Output = Result<Option<Snapshot>, ClusterError>> + Send + 'static {
        async { Ok(None) }
    }

    /// The keys of C5C3 objects as they change (spec or status), for
    /// reacting at once; polling stays on as the backstop, so a missed or
    /// duplicated key costs nothing but a look.
    fn watch(&self) -> futures::stream::BoxStream<'static, Key>;

    /// [`Cluster::watch`] with each object's `resourceVersion` where the
    /// cluster has one. A watch's first listing (and every re-list) reports
    /// each object whether or not it changed; the daemon skips one it last
    /// read at that very version: at 5,000 objects, the listing's keys made
    /// the daemon read every unit a second time after its first pass.
    fn watch_versions(&self) -> futures::stream::BoxStream<'static, (Key, Option<String>)> {
        use futures::StreamExt;
        self.watch().map(|k| (k, None)).boxed()
    }

    /// Deletes a Job with background propagation; false when it was already
    /// gone, or (with `uid`, a precondition) another Job has its name now.
    fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> impl Future<Output = Result<bool, ClusterError>> + Send;

    /// lockstep's own record in the cluster under `name` (the verdicts the
    /// live state decided, `daemon::record`); `None` before the first write.
    fn load_record(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<String>, ClusterError>> + Send;

    /// Where the record under `name` is kept, for a person to find it.
    fn record_location(&self, name: &str) -> String {
        format!("record {name}")
    }

    /// One object that carries [`crate::rollout::APPLIED_ANNOTATION`]
    /// (the least key, for a message that does not change from pass to
    /// pass), or `None`. Read when the verdict record is missing: lockstep
    /// writes its record before its first apply, so an object it applied
    /// to beside no record means the record was lost (`docs/gate.md`,
    /// "Verdicts don't move"). No default: a cluster that answered `None`
    /// without looking would let a lost record pass for a first start.
    fn applied_object(&self) -> impl Future<Output = Result<Option<Key>, ClusterError>> + Send;

    /// Replaces the record under `name` if it still reads `base`, what
    /// this process loaded and judged from (`None`: there was none), and
    /// fails with [`ClusterError::RecordChanged`] otherwise. Another
    /// process (a replica that led meanwhile, a leader that has not yet
    /// noticed it lost the lease) may have written it since; saving over
    /// that would put back an older watermark and drop its verdicts.
    fn save_record(
        &self,
        name: &str,
        text: &str,
        base: Option<&str>,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Where the dashboard's history is kept between processes
    /// (`docs/ui.md`, "What survives a restart"), under the cluster name
    /// `cluster`: a handle a pass hands a write to without waiting for it.
    /// `None`, the default: nothing is kept (the memory cluster of sim mode
    /// and the rehearsals starts empty every time).
    fn history_store(&self, cluster: &str) -> Option<std::sync::Arc<dyn HistoryStore>> {
        let _ = cluster;
        None
    }

    /// Writes lockstep's repair record on the object: the one annotation
    /// `repair::RECORD_ANNOTATION` set to `record`, by the field manager
    /// `repair::RECORD_MANAGER`, with a patch that sends nothing else (the
    /// operator's fields and lockstep's applied spec are untouched; the
    /// apply of the Git document never sends the annotation, so never
    /// removes it).
    fn set_repair_record(
        &self,
        key: &Key,
        record: &str,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// mariadb-operator's `Backup` objects (`k8s.mariadb.com/v1alpha1`) in
    /// every namespace, for the pre-flight gates (`core/src/preflight.rs`).
    /// Read only when a policy's gate asks for them, just before a hop
    /// would be applied. A cluster without them (the default) has none:
    /// a backup gate then waits (fail closed).
    fn backups(
        &self,
    ) -> impl Future<Output = Result<Vec<crate::preflight::Backup>, ClusterError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Records a Kubernetes Event on the object (every repair is one).
    fn record_event(
        &self,
        key: &Key,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
}

/// Retries an operation on a cluster that is down, slow or throttling,
/// with exponential backoff and jitter. Other errors return at once. The
/// writes lockstep makes are idempotent (a server-side apply of the same
/// fields, a delete), so a retry never duplicates an edit.
pub async fn with_backoff<T, F, Fut>(
    attempts: u32,
    base: Duration,
    mut op: F,
) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClusterError>>,
{
    let mut n = 0;
    loop {
        match op().await {
            Err(e) if e.retryable() && n + 1 < attempts => {
                n += 1;
                let ceiling = base
                    .saturating_mul(2u32.saturating_pow(n - 1))
                    .min(Duration::from_secs(60));
                tracing::warn!(error = %e, attempt = n, "cluster call failed; retrying");
                tokio::time::sleep(ceiling.mul_f64(0.5 + fastrand::f64() / 2.0)).await;
            }
            other => return other,
        }
    }
}

/// The server-side-apply body for a request: only the fields lockstep owns.
/// The unused one of tag and digest is omitted, never sent empty (the CRDs'
/// CEL rule uses `has()`, `docs/operators.md` §2.2).
pub fn apply_body(req: &ApplyRequest) -> serde_json::Value {
    let kind = req.key.kind;
    let mut spec = match req.document.as_ref().and_then(|d| d.get("spec")) {
        Some(serde_json::Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    if let Some(r) = &req.release
        && (kind == Kind::ControlPlane
            || kind.release_source() == crate::kind::ReleaseSource::Field)
    {
        spec.insert("openStackRelease".into(), r.clone().into());
    }
    if let Some(i) = &req.image {
        spec.insert("image".into(), image_json(i));
    }
    if !req.overrides.is_empty() {
        let services = spec
            .entry("services")
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        if let serde_json::Value::Object(services) = services {
            for (k, i) in &req.overrides {
                let entry = services
                    .entry(k.service())
                    .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
                if let serde_json::Value::Object(e) = entry {
                    // The override replaces the whole ImageSpec
                    // (`docs/operators.md` §4.2).
                    e.insert("image".into(), image_json(i));
                }
            }
        }
    }
    let mut metadata = serde_json::json!({ "name": req.key.name, "namespace": req.key.namespace });
    if let Some(m) = req.document.as_ref().and_then(|d| d.get("metadata")) {
        for k in ["labels", "annotations"] {
            if let Some(v) = m.get(k) {
                metadata[k] = v.clone();
            }
        }
    }
    // The repair record is another manager's (`Cluster::set_repair_record`):
    // a copy in Git would make this apply own it, and conflict with it.
    if let Some(a) = metadata
        .get_mut("annotations")
        .and_then(|a| a.as_object_mut())
    {
        a.remove(crate::repair::RECORD_ANNOTATION);
    }
    serde_json::json!({
        "apiVersion": kind.api_version(),
        "kind": kind.as_str(),
        "metadata": metadata,
        "spec": spec,
    })
}

/// An ImageSpec as the CRDs want it: the unused one of tag and digest omitted.
pub fn image_json(i: &ImageRef) -> serde_json::Value {
    match &i.pin {
        crate::release::Pin::Tag(t) => serde_json::json!({ "repository": i.repository, "tag": t }),
        crate::release::Pin::Digest(d) => {
            serde_json::json!({ "repository": i.repository, "digest": d })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_only_lockstep_fields_and_one_pin() {
        let img = ImageRef::new(
            Some("ghcr.io/c5c3/glance"),
            None,
            Some(&format!("sha256:{}", "a".repeat(64))),
        )
        .unwrap();
        let b = apply_body(&ApplyRequest {
            key: Key::new(Kind::Glance, "image", "glance"),
            release: Some("2026.2".into()),
            image: Some(img),
            overrides: vec![],
            document: None,
        });
        assert_eq!(b["spec"]["openStackRelease"], "2026.2");
        assert!(b["spec"]["image"].get("tag").is_none(), "no empty tag: {b}");
        assert_eq!(b["apiVersion"], "glance.openstack.c5c3.io/v1alpha1");
        let ks = apply_body(&ApplyRequest {
            key: Key::new(Kind::Keystone, "identity", "keystone"),
            release: Some("2026.2".into()),
            image: Some(ImageRef::default_for("keystone", "2026.2")),
            overrides: vec![],
            document: None,
        });
        assert!(
            ks["spec"].get("openStackRelease").is_none(),
            "Keystone has no such field"
        );
        let plane = apply_body(&ApplyRequest {
            key: Key::new(Kind::ControlPlane, "openstack", "prod"),
            release: Some("2026.2".into()),
            image: None,
            overrides: vec![(
                Kind::Placement,
                ImageRef::default_for("placement", "2026.2"),
            )],
            document: None,
        });
        assert_eq!(
            plane["spec"]["services"]["placement"]["image"]["tag"],
            "2026.2"
        );
        assert_eq!(plane["spec"].as_object().unwrap().len(), 2);
    }

    #[test]
    fn a_document_is_applied_whole_with_the_hops_values() {
        let doc = serde_json::json!({
            "apiVersion": "glance.openstack.c5c3.io/v1alpha1", "kind": "Glance",
            "metadata": {"name": "glance", "namespace": "image", "labels": {"team": "images"}},
            "spec": {"openStackRelease": "2026.1", "region": "RegionTwo",
                     "image": {"repository": "ghcr.io/c5c3/glance", "tag": "2026.1"}}
        });
        let digest = format!("sha256:{}", "b".repeat(64));
        let b = apply_body(&ApplyRequest {
            key: Key::new(Kind::Glance, "image", "glance"),
            release: Some("2026.2".into()),
            image: Some(ImageRef::new(Some("ghcr.io/c5c3/glance"), None, Some(&digest)).unwrap()),
            overrides: vec![],
            document: Some(doc),
        });
        assert_eq!(
            b["spec"]["region"], "RegionTwo",
            "the rest of the document is kept"
        );
        assert_eq!(b["spec"]["openStackRelease"], "2026.2");
        assert_eq!(
            b["spec"]["image"],
            serde_json::json!({"repository": "ghcr.io/c5c3/glance", "digest": digest}),
            "the old tag is gone, not blanked"
        );
        assert_eq!(b["metadata"]["labels"]["team"], "images");
    }

    /// lockstep's repair record is never sent by the apply, even when Git
    /// carries a copy: another manager owns it.
    #[test]
    fn the_repair_record_is_never_applied_from_git() {
        let doc = serde_json::json!({
            "metadata": {"name": "nova", "namespace": "compute", "annotations": {
                "team": "compute",
                crate::repair::RECORD_ANNOTATION: "{\"target\":\"2026.2\",\"attempts\":0,\"last\":\"2026-01-01T00:00:00Z\"}"
            }},
            "spec": {}
        });
        let b = apply_body(&ApplyRequest {
            key: Key::new(Kind::Nova, "compute", "nova"),
            release: Some("2026.2".into()),
            image: Some(ImageRef::default_for("nova", "2026.2")),
            overrides: vec![],
            document: Some(doc),
        });
        assert_eq!(
            b["metadata"]["annotations"],
            serde_json::json!({"team": "compute"})
        );
    }
}
