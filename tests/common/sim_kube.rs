//! The simulated C5C3 operator driving a real API server: the [`sim`]
//! world is the operator's brain, and each [`KubeOperator::step`] reads what
//! changed in the cluster (specs, Jobs deleted by someone else), lets virtual
//! time pass, and writes back what the real operators write: the status
//! subresource, phase Jobs (and their status, as the Job controller would),
//! Events, and the projected children a ControlPlane re-asserts.
//!
//! It exists so that lockstep's kube implementation, follow and repair can be
//! tested end to end against a real kube-apiserver with the upstream CRDs,
//! where no real operator can run. It projects Keystone, Glance and Nova
//! children (from templates of the example fleet), enough for those tests.
//!
//! [`sim`]: lockstep::sim

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};

use lockstep::cluster::kube::{dynamic_api, spec_image};
use lockstep::cluster::{ClusterError, image_json};
use lockstep::kind::{Key, Kind, ReleaseSource, VERSION};
use lockstep::release::ImageRef;
use lockstep::sim::{JobState, World};

/// The manager the real operators project children as.
pub const OPERATOR_MANAGER: &str = "cobaltcore-operator";

/// The label on the Jobs the simulated operator creates.
const JOB_LABEL_KEY: &str = "app.kubernetes.io/managed-by";
const JOB_LABEL_VALUE: &str = "lockstep-operator-sim";
const JOB_LABEL: &str = "app.kubernetes.io/managed-by=lockstep-operator-sim";

pub struct KubeOperator {
    client: Client,
    pub world: World,
    /// Plane → its children and their spec templates (all but release and image).
    planes: BTreeMap<Key, Vec<(Key, Value)>>,
    /// Jobs written to the cluster, and the state last written.
    written_jobs: HashMap<(String, String), JobState>,
    events_posted: usize,
    /// Each object's status as last written (without its transition
    /// times): an operator writes status when it changes, not every round.
    written_status: HashMap<Key, Value>,
    /// The virtual instant the world started at, for Event times.
    epoch: k8s_openapi::jiff::Timestamp,
}

fn err(e: kube::Error) -> ClusterError {
    ClusterError::Other(format!("simulated operator: {e}"))
}

impl KubeOperator {
    pub fn new(client: Client, world: World) -> Self {
        Self {
            client,
            world,
            planes: BTreeMap::new(),
            written_jobs: HashMap::new(),
            events_posted: 0,
            written_status: HashMap::new(),
            epoch: k8s_openapi::jiff::Timestamp::now(),
        }
    }

    /// Takes over a standalone object already in the cluster, as installed
    /// and Ready at its current spec.
    pub async fn adopt(&mut self, key: &Key) -> Result<(), ClusterError> {
        let obj = dynamic_api(&self.client, key)
            .get(&key.name)
            .await
            .map_err(err)?;
        let spec = obj.data.get("spec").cloned().unwrap_or_default();
        let image =
            spec_image(&spec).ok_or_else(|| ClusterError::Other(format!("{key}: no image")))?;
        let release = spec
            .get("openStackRelease")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.world.install_steady(key.clone(), release, image, None);
        if let Some(o) = self.world.objects.get_mut(key) {
            o.generation = obj.metadata.generation.unwrap_or(1);
        }
        self.write_status(key).await
    }

    /// Takes over a ControlPlane: projects its children (created from the
    /// templates, release and image from the plane), installed and Ready.
    pub async fn adopt_plane(
        &mut self,
        plane: &Key,
        templates: Vec<(Kind, Value)>,
    ) -> Result<(), ClusterError> {
        let obj = dynamic_api(&self.client, plane)
            .get(&plane.name)
            .await
            .map_err(err)?;
        let spec = obj.data.get("spec").cloned().unwrap_or_default();
        let release = spec
            .get("openStackRelease")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.world.install_plane(plane.clone(), release.clone());
        let mut children = Vec::new();
        for (kind, template) in templates {
            let key = Key::new(
                kind,
                plane.namespace.clone(),
                format!("{}-{}", plane.name, kind.service()),
            );
            let image = child_image(&spec, kind, &release);
            self.project(
                &key,
                &template,
                &release,
                &image,
                (plane, obj.metadata.uid.as_deref()),
            )
            .await?;
            let rel = (kind.release_source() == ReleaseSource::Field).then(|| release.clone());
            self.world
                .install_steady(key.clone(), rel, image, Some(plane.clone()));
            let generation = dynamic_api(&self.client, &key)
                .get(&key.name)
                .await
                .map_err(err)?
                .metadata
                .generation;
            if let Some(o) = self.world.objects.get_mut(&key) {
                o.generation = generation.unwrap_or(1);
            }
            self.write_status(&key).await?;
            children.push((key, template));
        }
        self.planes.insert(plane.clone(), children);
        Ok(())
    }

    /// Writes a child's spec as the operator does: server-side apply, forced.
    async fn project(
        &self,
        key: &Key,
        template: &Value,
        release: &str,
        image: &ImageRef,
        (plane, uid): (&Key, Option<&str>),
    ) -> Result<(), ClusterError> {
        let mut spec = template.clone();
        spec["image"] = image_json(image);
        if key.kind.release_source() == ReleaseSource::Field {
            spec["openStackRelease"] = release.into();
        }
        let body = json!({
            "apiVersion": key.kind.api_version(), "kind": key.kind.as_str(),
            "metadata": {"name": key.name, "namespace": key.namespace},
            "spec": spec,
        });
        // The ownership marker the operator sets (`docs/operators.md` §4.1):
        // a controller ownerReference in the plane's namespace, labels across.
        let mut body = body;
        if plane.namespace == key.namespace {
            body["metadata"]["ownerReferences"] = json!([{
                "apiVersion": Kind::ControlPlane.api_version(), "kind": "ControlPlane",
                "name": plane.name, "uid": uid.unwrap_or_default(),
                "controller": true, "blockOwnerDeletion": true,
            }]);
        } else {
            body["metadata"]["labels"] = json!({
                "c5c3.io/controlplane-name": plane.name,
                "c5c3.io/controlplane-namespace": plane.namespace,
            });
        }
        dynamic_api(&self.client, key)
            .patch(
                &key.name,
                &PatchParams::apply(OPERATOR_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(err)?;
        Ok(())
    }

    /// One round: read the cluster, let time pass to the next thing due (at
    /// most `max_wait`), write the cluster. Returns false when the simulated
    /// operator has nothing left to do.
    pub async fn step(&mut self, max_wait: Duration) -> Result<bool, ClusterError> {
        self.read().await?;
        self.world.settle();
        let busy = match self.world.next_due() {
            Some(t) => {
                let t = t.min(self.world.now + max_wait);
                self.world.advance_to(t);
                true
            }
            None => false,
        };
        self.write().await?;
        Ok(busy)
    }

    /// Every object of `kind` in the cluster, by key: one list, not a GET
    /// per object (a round reads a whole fleet).
    async fn list(&self, kind: Kind) -> Result<HashMap<Key, DynamicObject>, ClusterError> {
        let gvk = GroupVersionKind::gvk(kind.group(), VERSION, kind.as_str());
        let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural());
        let list = Api::<DynamicObject>::all_with(self.client.clone(), &ar)
            .list(&ListParams::default())
            .await
            .map_err(err)?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|o| {
                let key = Key::new(
                    kind,
                    o.metadata.namespace.clone()?,
                    o.metadata.name.clone()?,
                );
                Some((key, o))
            })
            .collect())
    }

    async fn read(&mut self) -> Result<(), ClusterError> {
        // Planes: a new release or override is re-asserted on every child.
        let planes: Vec<(Key, Vec<(Key, Value)>)> = self
            .planes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut live = if planes.is_empty() {
            HashMap::new()
        } else {
            self.list(Kind::ControlPlane).await?
        };
        for (plane, children) in planes {
            let Some(obj) = live.remove(&plane) else {
                return Err(ClusterError::NotFound(plane));
            };
            let spec = obj.data.get("spec").cloned().unwrap_or_default();
            let release = spec
                .get("openStackRelease")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let images: Vec<(Key, ImageRef)> = children
                .iter()
                .map(|(k, _)| (k.clone(), child_image(&spec, k.kind, &release)))
                .collect();
            let changed = self
                .world
                .planes
                .get(&plane)
                .is_none_or(|p| p.release != release)
                || images
                    .iter()
                    .any(|(k, i)| self.world.objects.get(k).is_some_and(|o| &o.image != i));
            if changed {
                // The real plane has no admission webhook here; the world's
                // refusal of a downgrade stands in for it.
                if self.world.apply_plane(&plane, &release, &images).is_ok() {
                    for ((key, template), (_, image)) in children.iter().zip(&images) {
                        self.project(
                            key,
                            template,
                            &release,
                            image,
                            (&plane, obj.metadata.uid.as_deref()),
                        )
                        .await?;
                    }
                }
            }
        }
        // Specs lockstep (or anyone) applied to standalone objects; generations.
        let kinds: BTreeSet<Kind> = self.world.objects.keys().map(|k| k.kind).collect();
        let mut live = HashMap::new();
        for kind in kinds {
            live.extend(self.list(kind).await?);
        }
        let keys: Vec<Key> = self.world.objects.keys().cloned().collect();
        for key in keys {
            let Some(obj) = live.get(&key) else {
                self.world.objects.remove(&key);
                self.written_status.remove(&key);
                continue;
            };
            let spec = obj.data.get("spec").cloned().unwrap_or_default();
            let projected = self
                .world
                .objects
                .get(&key)
                .and_then(|o| o.projected_by.clone())
                .is_some();
            if !projected && let Some(image) = spec_image(&spec) {
                let release = spec
                    .get("openStackRelease")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let _ = self.world.apply(&key, release, image);
            }
            if let Some(o) = self.world.objects.get_mut(&key) {
                o.generation = obj.metadata.generation.unwrap_or(o.generation);
            }
        }
        // Jobs deleted by someone else (lockstep's repair): the operator notices.
        if !self.written_jobs.is_empty() {
            let jobs: Api<Job> = Api::all(self.client.clone());
            let live: HashSet<(String, String)> = jobs
                .list(&ListParams::default().labels(JOB_LABEL))
                .await
                .map_err(err)?
                .items
                .into_iter()
                .filter(|j| j.metadata.deletion_timestamp.is_none())
                .filter_map(|j| Some((j.metadata.namespace?, j.metadata.name?)))
                .collect();
            let gone: Vec<(String, String)> = self
                .written_jobs
                .keys()
                .filter(|id| !live.contains(*id))
                .cloned()
                .collect();
            for (ns, name) in gone {
                self.written_jobs.remove(&(ns.clone(), name.clone()));
                self.world.delete_job(&ns, &name);
            }
        }
        Ok(())
    }

    async fn write(&mut self) -> Result<(), ClusterError> {
        let keys: Vec<Key> = self.world.objects.keys().cloned().collect();
        for key in &keys {
            self.write_status(key).await?;
        }
        // Jobs: create what the world runs, record how they ended, delete
        // what the world dropped (an abort).
        let world_jobs: Vec<((String, String), String, JobState)> = self
            .world
            .jobs
            .iter()
            .map(|(id, j)| (id.clone(), j.image.clone(), j.state))
            .collect();
        for (id, image, state) in &world_jobs {
            let japi: Api<Job> = Api::namespaced(self.client.clone(), &id.0);
            if !self.written_jobs.contains_key(id) {
                let job: Job = serde_json::from_value(json!({
                    "metadata": {"name": id.1, "labels": {JOB_LABEL_KEY: JOB_LABEL_VALUE}},
                    "spec": {"backoffLimit": self.world.params.backoff_limit, "template": {"spec": {
                        "restartPolicy": "Never", "containers": [{"name": "db", "image": image}]}}}
                }))
                .map_err(|e| ClusterError::Other(e.to_string()))?;
                match japi.create(&PostParams::default(), &job).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(err(e)),
                }
                self.written_jobs.insert(id.clone(), JobState::Running);
            }
            if self.written_jobs.get(id) != Some(state) && *state != JobState::Running {
                let now = self.stamp();
                let status = match state {
                    JobState::Complete => {
                        json!({"status": {"startTime": now, "completionTime": now, "succeeded": 1,
                        "conditions": [
                            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now},
                            {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]}})
                    }
                    _ => {
                        json!({"status": {"startTime": now, "failed": self.world.params.backoff_limit + 1,
                        "conditions": [
                            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now},
                            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now}]}})
                    }
                };
                japi.patch_status(&id.1, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .map_err(err)?;
                self.written_jobs.insert(id.clone(), *state);
            }
        }
        let dropped: Vec<(String, String)> = self
            .written_jobs
            .keys()
            .filter(|id| !self.world.jobs.contains_key(*id))
            .cloned()
            .collect();
        for id in dropped {
            let japi: Api<Job> = Api::namespaced(self.client.clone(), &id.0);
            let _ = japi.delete(&id.1, &DeleteParams::background()).await;
            self.written_jobs.remove(&id);
        }
        // Events, as the operators record them.
        let new: Vec<lockstep::sim::Event> = self.world.events[self.events_posted..].to_vec();
        for e in new {
            let evs: Api<Event> = Api::namespaced(self.client.clone(), &e.key.namespace);
            let ev = Event {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{}.", e.key.name).replace('.', "-")),
                    ..ObjectMeta::default()
                },
                event_time: Some(MicroTime(self.virtual_now())),
                action: Some("Reconcile".into()),
                reason: Some(e.reason.clone()),
                note: Some(e.message.clone()),
                type_: Some(if e.warning { "Warning" } else { "Normal" }.into()),
                reporting_controller: Some(format!("{}-operator", e.key.kind.service())),
                reporting_instance: Some("operator-sim".into()),
                regarding: Some(ObjectReference {
                    api_version: Some(e.key.kind.api_version()),
                    kind: Some(e.key.kind.as_str().into()),
                    name: Some(e.key.name.clone()),
                    namespace: Some(e.key.namespace.clone()),
                    ..ObjectReference::default()
                }),
                ..Event::default()
            };
            evs.create(&PostParams::default(), &ev).await.map_err(err)?;
            self.events_posted += 1;
        }
        Ok(())
    }

    fn virtual_now(&self) -> k8s_openapi::jiff::Timestamp {
        let secs = i64::try_from(self.world.now.as_secs()).unwrap_or(i64::MAX);
        self.epoch
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
            .unwrap_or(self.epoch)
    }

    fn stamp(&self) -> String {
        // RFC 3339 to the second, as metav1.Time serialises.
        self.virtual_now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    /// The status subresource, as the operator writes it (`Status().Update()`
    /// in the real ones; a merge patch here), when it changed since the last
    /// write.
    async fn write_status(&mut self, key: &Key) -> Result<(), ClusterError> {
        let Some(o) = self.world.objects.get(key) else {
            return Ok(());
        };
        let conditions: Vec<Value> = o
            .status
            .conditions
            .iter()
            .map(|c| json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
                            "observedGeneration": o.generation}))
            .collect();
        let opt = |v: &Option<String>| v.clone().map_or(Value::Null, Value::from);
        let mut status = json!({
            "observedGeneration": o.generation,
            "conditions": conditions,
        });
        if key.kind != Kind::Horizon {
            status["installedRelease"] = opt(&o.status.installed_release);
            status["targetRelease"] = opt(&o.status.target_release);
        }
        if key.kind.has_phase_machine() {
            status["upgradePhase"] = opt(&o.status.upgrade_phase);
        }
        if matches!(key.kind, Kind::Placement | Kind::Barbican | Kind::Neutron) {
            status["installedImage"] = opt(&o.status.installed_image);
        }
        if self.written_status.get(key) == Some(&status) {
            return Ok(());
        }
        let mut body = status.clone();
        let now = self.stamp();
        if let Some(cs) = body["conditions"].as_array_mut() {
            for c in cs {
                c["lastTransitionTime"] = now.clone().into();
            }
        }
        dynamic_api(&self.client, key)
            .patch_status(
                &key.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": body})),
            )
            .await
            .map_err(err)?;
        self.written_status.insert(key.clone(), status);
        Ok(())
    }
}

/// A child's image: the plane's override, else `ghcr.io/c5c3/<svc>:<release>`.
fn child_image(plane_spec: &Value, kind: Kind, release: &str) -> ImageRef {
    plane_spec
        .get("services")
        .and_then(|s| s.get(kind.service()))
        .and_then(spec_image)
        .unwrap_or_else(|| ImageRef::default_for(kind.service(), release))
}
