//! The in-process cluster: the simulated operator's world behind the same
//! trait, for the embedded default and fast tests.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    ApplyRequest, Cluster, ClusterError, ClusterObject, DeploymentInfo, EventInfo, JobInfo,
};
use crate::kind::{Key, Kind};
use crate::sim::{Event, JobState, World};

#[derive(Clone)]
pub struct MemoryCluster {
    world: Arc<Mutex<World>>,
    changes: tokio::sync::broadcast::Sender<Key>,
    /// Nothing due and nothing written since the last step: the next step
    /// has nothing to do (an idle daemon does not re-run the operator over
    /// every object on every loop).
    quiet: Arc<std::sync::atomic::AtomicBool>,
    /// Someone changed the world's fields directly (`world()`): its index of
    /// what is in flight may be wrong, so the next step looks at every
    /// object once (`World::settle`) before stepping only what is due.
    stale: Arc<std::sync::atomic::AtomicBool>,
    /// lockstep's records (`Cluster::save_record`), kept with the world so
    /// a restarted daemon on the same cluster reads them back.
    records: Arc<Mutex<std::collections::BTreeMap<String, String>>>,
    /// mariadb-operator Backups, as a test or a rehearsal puts them there
    /// (the simulated operator takes none of its own).
    backups: Arc<Mutex<Vec<crate::preflight::Backup>>>,
}

impl MemoryCluster {
    pub fn new(world: World) -> Self {
        Self {
            world: Arc::new(Mutex::new(world)),
            changes: tokio::sync::broadcast::channel(4096).0,
            quiet: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            stale: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            records: Arc::default(),
            backups: Arc::default(),
        }
    }

    /// Adds (or replaces, by namespace and name) a Backup.
    pub fn put_backup(&self, b: crate::preflight::Backup) {
        if let Ok(mut bs) = self.backups.lock() {
            bs.retain(|x| (&x.namespace, &x.name) != (&b.namespace, &b.name));
            bs.push(b);
        }
    }

    /// Lets the simulated operator work until its next due event (at most
    /// `max_wait` of virtual time) and announces every object whose status
    /// changed to the watchers.
    pub fn step(&self, max_wait: std::time::Duration) -> Result<bool, ClusterError> {
        use std::sync::atomic::Ordering;
        if self.quiet.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let mut w = self.world_ro()?;
        if self.stale.swap(false, Ordering::SeqCst) {
            w.settle();
        }
        // Only what is in flight: the rest of a large fleet is steady.
        let busy = w.step_due(max_wait);
        for k in std::mem::take(&mut w.changed) {
            let _ = self.changes.send(k);
        }
        if !busy {
            self.quiet.store(true, Ordering::SeqCst);
        }
        Ok(busy)
    }

    /// The world, for driving the simulation (advancing its clock). Whoever
    /// takes it may change any field: the next step looks at everything.
    pub fn world(&self) -> Result<MutexGuard<'_, World>, ClusterError> {
        self.stale.store(true, std::sync::atomic::Ordering::SeqCst);
        self.world_tracked()
    }

    /// The world for a change through its own methods, which keep its index
    /// of what is in flight: the next step looks at what is due only.
    fn world_tracked(&self) -> Result<MutexGuard<'_, World>, ClusterError> {
        self.quiet.store(false, std::sync::atomic::Ordering::SeqCst);
        self.world_ro()
    }

    /// Takes the record under `name` away, as a person deleting its key
    /// from the ConfigMap would; returns what it held.
    pub fn remove_record(&self, name: &str) -> Option<String> {
        self.records.lock().ok()?.remove(name)
    }

    /// Moves the simulated clock forward by `d` (everything due happens).
    pub fn advance(&self, d: std::time::Duration) {
        if let Ok(mut w) = self.world_tracked() {
            let t = w.now + d;
            w.advance_due(t);
        }
    }

    /// Every object's upgrade phase, by its display name (for timelines).
    pub fn world_snapshot(&self) -> Result<Vec<(String, Option<String>)>, ClusterError> {
        Ok(self
            .world_ro()?
            .objects
            .values()
            .map(|o| (o.key.to_string(), o.status.upgrade_phase.clone()))
            .collect())
    }

    /// The simulated clock.
    pub fn now(&self) -> std::time::Duration {
        self.world_ro().map(|w| w.now).unwrap_or_default()
    }

    fn world_ro(&self) -> Result<MutexGuard<'_, World>, ClusterError> {
        self.world
            .lock()
            .map_err(|_| ClusterError::Other("simulated cluster poisoned".into()))
    }
}

impl Cluster for MemoryCluster {
    async fn backups(&self) -> Result<Vec<crate::preflight::Backup>, ClusterError> {
        self.backups
            .lock()
            .map(|b| b.clone())
            .map_err(|_| ClusterError::Other("simulated cluster poisoned".into()))
    }

    async fn load_record(&self, name: &str) -> Result<Option<String>, ClusterError> {
        let r = self
            .records
            .lock()
            .map_err(|_| ClusterError::Other("simulated cluster poisoned".into()))?;
        Ok(r.get(name).cloned())
    }

    async fn applied_object(&self) -> Result<Option<Key>, ClusterError> {
        let w = self.world_ro()?;
        Ok(w.annotations
            .iter()
            .find(|(_, a)| a.contains_key(crate::rollout::APPLIED_ANNOTATION))
            .map(|(k, _)| k.clone()))
    }

    async fn save_record(
        &self,
        name: &str,
        text: &str,
        base: Option<&str>,
    ) -> Result<(), ClusterError> {
        let mut r = self
            .records
            .lock()
            .map_err(|_| ClusterError::Other("simulated cluster poisoned".into()))?;
        let now = r.get(name).map(String::as_str);
        if super::record_write(now, text, base, || self.record_location(name))? {
            r.insert(name.to_owned(), text.to_owned());
        }
        Ok(())
    }

    async fn get(&self, key: &Key) -> Result<Option<ClusterObject>, ClusterError> {
        let w = self.world_ro()?;
        if key.kind == Kind::ControlPlane {
            return Ok(w.planes.get(key).map(|p| ClusterObject {
                key: key.clone(),
                generation: p.generation,
                resource_version: p.generation.to_string(),
                release: Some(p.release.clone()),
                image: None,
                status: crate::live::LiveStatus {
                    repair_record: w.annotation(key, crate::repair::RECORD_ANNOTATION),
                    applied: w.annotation(key, crate::rollout::APPLIED_ANNOTATION),
                    ..Default::default()
                },
            }));
        }
        Ok(w.objects.get(key).map(|o| {
            let mut status = o.status.clone();
            status.generation = Some(o.generation);
            status.projected_by = o.projected_by.clone();
            status.repair_record = w.annotation(key, crate::repair::RECORD_ANNOTATION);
            status.applied = w.annotation(key, crate::rollout::APPLIED_ANNOTATION);
            ClusterObject {
                key: key.clone(),
                generation: o.generation,
                resource_version: format!("{}-{}", o.generation, w.passes),
                release: o.release.clone(),
                image: Some(o.image.clone()),
                status,
            }
        }))
    }

    /// What [`Cluster::apply`] would refuse, nothing changed. A plane the
    /// world lacks is one the apply creates from its document.
    async fn dry_run(&self, req: &ApplyRequest) -> Result<(), ClusterError> {
        let w = self.world_ro()?;
        let invalid = |message: String| ClusterError::Invalid {
            key: req.key.clone(),
            message,
        };
        if req.key.kind == Kind::ControlPlane {
            if w.planes.contains_key(&req.key) {
                w.admits_plane(&req.key, req.release.as_deref().unwrap_or_default())
                    .map_err(|e| invalid(e.0))?;
            }
        } else if req.image.is_none() {
            return Err(invalid("spec.image is required".into()));
        }
        Ok(())
    }

    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        {
            let mut w = self.world_tracked()?;
            // The simulated operator installs what lockstep creates: whatever
            // the document holds that the world lacks is there, steady.
            if let Some(doc) = &req.document {
                w.seed(&desired_of(doc, &req.key));
            }
            if req.key.kind == Kind::ControlPlane {
                let release = req.release.clone().unwrap_or_default();
                // The plane re-asserts every child: defaults, or the overrides given.
                let children: Vec<_> = w
                    .objects
                    .values()
                    .filter(|o| o.projected_by.as_ref() == Some(&req.key))
                    .map(|o| {
                        let image = req
                            .overrides
                            .iter()
                            .find(|(k, _)| *k == o.key.kind)
                            .map(|(_, i)| i.clone())
                            .unwrap_or_else(|| {
                                crate::release::ImageRef::default_for(
                                    o.key.kind.service(),
                                    &release,
                                )
                            });
                        (o.key.clone(), image)
                    })
                    .collect();
                w.apply_plane(&req.key, &release, &children).map_err(|e| {
                    ClusterError::Invalid {
                        key: req.key.clone(),
                        message: e.0,
                    }
                })?;
            } else {
                let image = req.image.clone().ok_or_else(|| ClusterError::Invalid {
                    key: req.key.clone(),
                    message: "spec.image is required".into(),
                })?;
                let release = (req.key.kind.release_source() == crate::kind::ReleaseSource::Field)
                    .then(|| req.release.clone())
                    .flatten();
                w.apply(&req.key, release, image)
                    .map_err(|_| ClusterError::NotFound(req.key.clone()))?;
            }
            let mut touched = vec![req.key.clone()];
            touched.extend(
                w.objects
                    .values()
                    .filter(|o| o.projected_by.as_ref() == Some(&req.key))
                    .map(|o| o.key.clone()),
            );
            w.settle_only(&touched);
            // The annotation the apply carries, as the API server keeps it
            // (the simulated operator reads no other field of the document).
            if let Some(digest) = req
                .document
                .as_ref()
                .and_then(|d| d.pointer("/metadata/annotations"))
                .and_then(|a| a.get(crate::rollout::APPLIED_ANNOTATION))
                .and_then(|v| v.as_str())
            {
                w.annotations.entry(req.key.clone()).or_default().insert(
                    crate::rollout::APPLIED_ANNOTATION.to_owned(),
                    digest.to_owned(),
                );
            }
            // Announced here, once: the next step reports only what
            // changes after this.
            for k in touched {
                w.changed.remove(&k);
                let _ = self.changes.send(k);
            }
        }
        self.get(&req.key)
            .await?
            .ok_or_else(|| ClusterError::NotFound(req.key.clone()))
    }

    async fn jobs(&self, key: &Key) -> Result<Vec<JobInfo>, ClusterError> {
        let w = self.world_ro()?;
        Ok(w.jobs
            .iter()
            .filter(|((ns, _), j)| *ns == key.namespace && j.owner == *key)
            .map(|((_, name), j)| JobInfo {
                name: name.clone(),
                uid: Some(j.uid.to_string()),
                complete: j.state == JobState::Complete,
                failed: j.state == JobState::Failed,
                message: (j.state == JobState::Failed).then(|| {
                    "BackoffLimitExceeded: Job has reached the specified backoff limit".to_owned()
                }),
            })
            .collect())
    }

    async fn deployments(&self, key: &Key) -> Result<Vec<DeploymentInfo>, ClusterError> {
        let w = self.world_ro()?;
        Ok(w.objects
            .get(key)
            .map(|o| {
                o.deployments
                    .iter()
                    .map(|d| DeploymentInfo {
                        name: d.name.clone(),
                        rolled_out: d.rolling_until.is_none() && d.image == o.image.reference(),
                        installed_release: d.annotation.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    fn watch(&self) -> futures::stream::BoxStream<'static, Key> {
        use futures::StreamExt;
        // Cancellation-safe: dropping a pending `next()` loses nothing.
        tokio_stream::wrappers::BroadcastStream::new(self.changes.subscribe())
            // A slow watcher that lagged misses keys: polling covers them.
            .filter_map(|r| async move { r.ok() })
            .boxed()
    }

    async fn events(&self, key: &Key) -> Result<Vec<EventInfo>, ClusterError> {
        Ok(self
            .world_ro()?
            .events
            .iter()
            .filter(|e| &e.key == key)
            .map(|e| EventInfo {
                reason: e.reason.clone(),
                message: e.message.clone(),
                warning: e.warning,
                reporter: format!("{}-operator", key.kind.service()),
            })
            .collect())
    }

    async fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<bool, ClusterError> {
        let mut w = self.world_tracked()?;
        Ok(match uid {
            // A uid this world never gave is no Job of it.
            Some(u) => match u.parse() {
                Ok(u) => w.delete_job_if(namespace, name, Some(u)),
                Err(_) => false,
            },
            None => w.delete_job(namespace, name),
        })
    }

    async fn set_repair_record(&self, key: &Key, record: &str) -> Result<(), ClusterError> {
        // The operator never reads lockstep's annotations.
        let mut w = self.world_tracked()?;
        if !w.objects.contains_key(key) && !w.planes.contains_key(key) {
            return Err(ClusterError::NotFound(key.clone()));
        }
        w.annotations
            .entry(key.clone())
            .or_default()
            .insert(crate::repair::RECORD_ANNOTATION.into(), record.to_owned());
        Ok(())
    }

    async fn record_event(
        &self,
        key: &Key,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> Result<(), ClusterError> {
        let mut w = self.world_ro()?;
        let at = w.now;
        w.events.push(Event {
            at,
            key: key.clone(),
            warning,
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
        Ok(())
    }
}

/// The desired objects of one applied document (a plane and its children).
fn desired_of(doc: &serde_json::Value, key: &Key) -> Vec<crate::desired::Desired> {
    let Ok(text) = serde_json::to_string(doc) else {
        return Vec::new();
    };
    let parsed = crate::manifest::parse_file(&key.to_string(), text.as_bytes(), usize::MAX);
    crate::desired::expand(&parsed.documents)
}
