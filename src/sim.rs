//! A simulated C5C3 operator over an in-memory world with a virtual clock,
//! following `docs/operators.md` §2–§7: ControlPlane projection, the
//! release gates, the phase machine with its Jobs (backoffLimit 4),
//! conditions, reasons and events, the roll order and the second roll of
//! Nova and Cinder, abort and `UpgradeTargetChanged`.
//!
//! Phases take realistic durations in virtual time, so a whole fleet hop is
//! simulated in milliseconds; faults make a phase Job fail, a rollout stall
//! or the database be unreachable for a while. `cluster::memory` puts it
//! behind the `Cluster` trait, so the daemon's own engine runs against it
//! (`run` in sim mode, `rehearse`, `rehearse --plan`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::follow::Observation;
use crate::kind::{Key, Kind, ReleaseSource};
use crate::live::{Condition, LiveStatus};
use crate::release::{ImageRef, Release, Step, TaggedRelease, step};

/// Virtual durations of the operator's work.
#[derive(Clone, Debug)]
pub struct Params {
    pub sync: Duration,
    pub expand: Duration,
    pub migrate: Duration,
    pub contract: Duration,
    /// One Deployment's rollout.
    pub roll: Duration,
    /// What one failed Job try costs (the pod runs, fails, backs off).
    pub failed_try: Duration,
    pub backoff_limit: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            sync: Duration::from_secs(90),
            expand: Duration::from_secs(180),
            migrate: Duration::from_secs(120),
            contract: Duration::from_secs(300),
            roll: Duration::from_secs(150),
            failed_try: Duration::from_secs(207),
            backoff_limit: 4,
        }
    }
}

/// Which Job a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobKind {
    Sync,
    Expand,
    Migrate,
    Contract,
}

impl JobKind {
    /// The Job's name after the object's (`<name>-db-sync`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            JobKind::Sync => "db-sync",
            JobKind::Expand => "db-expand",
            JobKind::Migrate => "db-migrate",
            JobKind::Contract => "db-contract",
        }
    }

    fn phase(self) -> &'static str {
        match self {
            JobKind::Sync => "Sync",
            JobKind::Expand => "Expand",
            JobKind::Migrate => "Migrate",
            JobKind::Contract => "Contract",
        }
    }
}

/// Trouble to inject, by object name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next `tries` tries of this Job fail (across re-creations).
    JobFails {
        object: String,
        job: JobKind,
        tries: u32,
    },
    /// Every Job try of the object fails until this virtual time.
    DatabaseDown { object: String, until: Duration },
    /// Each rollout of the object's Deployments takes this much longer.
    RolloutStall { object: String, extra: Duration },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Complete,
    Failed,
}

#[derive(Clone, Debug)]
pub struct Job {
    pub owner: Key,
    pub kind: JobKind,
    pub image: String,
    pub state: JobState,
    pub created: Duration,
    pub done_at: Duration,
    pub failed_tries: u32,
    /// Its `metadata.uid`: a Job deleted and created again under the same
    /// name is another Job.
    pub uid: u64,
}

#[derive(Clone, Debug)]
pub struct Deployment {
    pub name: String,
    pub image: String,
    /// The second-roll annotation (`nova.c5c3.io/installed-release`), where used.
    pub annotation: Option<String>,
    pub rolling_until: Option<Duration>,
}

#[derive(Clone, Debug)]
pub struct Event {
    pub at: Duration,
    pub key: Key,
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// A service CR in the simulated cluster.
#[derive(Clone, Debug)]
pub struct Object {
    pub key: Key,
    pub generation: i64,
    pub release: Option<String>,
    pub image: ImageRef,
    pub status: LiveStatus,
    pub observed_generation: i64,
    pub projected_by: Option<Key>,
    pub deployments: Vec<Deployment>,
}

#[derive(Clone, Debug)]
pub struct Plane {
    pub key: Key,
    pub generation: i64,
    pub release: String,
}

/// The simulated cluster and its operator.
#[derive(Clone, Debug, Default)]
pub struct World {
    pub now: Duration,
    pub params: Params,
    pub faults: Vec<Fault>,
    pub objects: BTreeMap<Key, Object>,
    pub planes: BTreeMap<Key, Plane>,
    pub jobs: BTreeMap<(String, String), Job>,
    /// The last Job uid given out.
    pub uids: u64,
    pub events: Vec<Event>,
    /// Objects' annotations that are not the operator's (lockstep's repair
    /// record); the operator never touches them.
    pub annotations: BTreeMap<Key, BTreeMap<String, String>>,
    /// Reconcile passes run, for the benchmark.
    pub passes: u64,
    /// Objects a reconcile changed since whoever watches last took them:
    /// a watch without a copy of every status to compare against.
    pub changed: std::collections::BTreeSet<Key>,
    /// Objects whose reconcile may have work at the current time: written
    /// to, a Job deleted, a Job or a roll just finished. With `rolling`,
    /// what lets [`World::step_due`] touch only what is in flight instead of
    /// every object (a large fleet's daemon steps the world between every
    /// two passes). Kept by this type's own methods; whoever changes the
    /// fields directly calls `settle` or `advance_to` next, which look at
    /// everything and rebuild it.
    due: std::collections::BTreeSet<Key>,
    /// Objects with a Deployment mid-roll: with the running Jobs, all that
    /// can fall due later.
    rolling: std::collections::BTreeSet<Key>,
}

fn roles(kind: Kind, name: &str) -> Vec<(String, bool)> {
    // (Deployment name, carries the second-roll annotation), in roll order.
    let r = |s: &str, a: bool| (format!("{name}{s}"), a);
    match kind {
        Kind::Nova => vec![
            r("-conductor", true),
            r("-scheduler", true),
            r("-metadata", true),
            r("-novncproxy", true),
            r("", false),
        ],
        Kind::Cinder => vec![
            r("-scheduler", true),
            r("-volume-default", true),
            r("-backup", true),
            r("", false),
        ],
        Kind::Neutron => vec![
            r("", false),
            r("-periodic-workers", false),
            r("-ovn-maintenance-worker", false),
        ],
        _ => vec![r("", false)],
    }
}

/// Where each child's plane is defined, found once for a whole list of
/// desired objects: the key of the plane named `plane` that projects
/// `child` is the plane defined in the child's file (a plane's children
/// come from its document). A search of the list per child made seeding
/// quadratic (32 s for the 84,000 objects of a 20,000-file fleet).
struct PlaneIndex<'a> {
    /// The file that first defines each key.
    file_of: HashMap<&'a Key, &'a str>,
    /// The first plane of each (name, file).
    planes: HashMap<(&'a str, &'a str), &'a Key>,
}

impl<'a> PlaneIndex<'a> {
    fn new(desired: &'a [crate::desired::Desired]) -> Self {
        let mut file_of = HashMap::with_capacity(desired.len());
        let mut planes = HashMap::new();
        for d in desired {
            file_of.entry(&d.key).or_insert(&*d.file);
            if d.key.kind == Kind::ControlPlane {
                planes.entry((&*d.key.name, &*d.file)).or_insert(&d.key);
            }
        }
        Self { file_of, planes }
    }

    fn plane_of(&self, plane: &str, child: &Key) -> Key {
        let file = self.file_of.get(child).copied().unwrap_or("");
        self.planes
            .get(&(plane, file))
            .map(|k| (*k).clone())
            .unwrap_or_else(|| Key::new(Kind::ControlPlane, child.namespace.clone(), plane))
    }
}

/// The release an object's spec asks for (Keystone: its tag).
fn spec_release(o: &Object) -> Option<String> {
    match o.key.kind.release_source() {
        ReleaseSource::Field => o.release.clone(),
        ReleaseSource::ImageTag => o.image.tag().map(str::to_owned),
        ReleaseSource::None => None,
    }
}

fn parse(r: &str) -> Option<Release> {
    TaggedRelease::parse(r).ok().map(|t| t.release)
}

#[derive(Debug, PartialEq, Eq)]
pub struct Rejected(pub String);

impl World {
    pub fn new(params: Params) -> Self {
        Self {
            params,
            ..Self::default()
        }
    }

    /// An object's annotation, if it has it.
    pub fn annotation(&self, key: &Key, name: &str) -> Option<String> {
        self.annotations.get(key)?.get(name).cloned()
    }

    fn event(&mut self, key: &Key, warning: bool, reason: &str, message: String) {
        self.events.push(Event {
            at: self.now,
            key: key.clone(),
            warning,
            reason: reason.to_owned(),
            message,
        });
    }

    /// Creates an object already installed and Ready at its release: the
    /// starting state of a rehearsal.
    pub fn install_steady(
        &mut self,
        key: Key,
        release: Option<String>,
        image: ImageRef,
        projected_by: Option<Key>,
    ) {
        let mut o = Object {
            key: key.clone(),
            generation: 1,
            release,
            image: image.clone(),
            status: LiveStatus::default(),
            observed_generation: 1,
            projected_by,
            deployments: Vec::new(),
        };
        let installed = spec_release(&o);
        o.deployments = roles(key.kind, &key.name)
            .into_iter()
            .map(|(name, annotated)| Deployment {
                name,
                image: image.reference(),
                annotation: if annotated { installed.clone() } else { None },
                rolling_until: None,
            })
            .collect();
        o.status.installed_release = installed;
        if matches!(key.kind, Kind::Placement | Kind::Barbican | Kind::Neutron) {
            o.status.installed_image = Some(image.reference());
        }
        // Room for exactly its two conditions: a pushed-into Vec takes four,
        // and a large fleet holds one per object (benches/daemon.rs).
        o.status.conditions.reserve_exact(2);
        set_cond(&mut o, "DatabaseReady", true, "DatabaseSynced", "");
        set_cond(
            &mut o,
            "Ready",
            true,
            "AllReady",
            "All sub-conditions are ready",
        );
        let uid = self.fresh_uid();
        self.jobs.insert(
            (key.namespace.clone(), format!("{}-db-sync", key.name)),
            Job {
                owner: key.clone(),
                kind: JobKind::Sync,
                image: image.reference(),
                state: JobState::Complete,
                created: self.now,
                done_at: self.now,
                uid,
                failed_tries: 0,
            },
        );
        self.due.insert(key.clone());
        self.objects.insert(key, o);
    }

    /// Installs every desired object the world lacks, steady at its
    /// desired release: the state a simulated cluster starts from, and what
    /// the simulated operator does for an object lockstep installs fresh.
    /// A plane that projects an object already running standalone takes it
    /// over, as the operator does (server-side apply with force): from then
    /// on the plane re-asserts it.
    pub fn seed(&mut self, desired: &[crate::desired::Desired]) {
        let index = PlaneIndex::new(desired);
        for d in desired {
            if d.key.kind == Kind::ControlPlane {
                if !self.planes.contains_key(&d.key) {
                    self.install_plane(d.key.clone(), d.release.clone().unwrap_or_default());
                }
            } else if let (Some(plane), Some(existing)) =
                (&d.projected_by, self.objects.get(&d.key))
            {
                if existing.projected_by.is_none() {
                    let plane = index.plane_of(plane, &d.key);
                    if let Some(o) = self.objects.get_mut(&d.key) {
                        o.projected_by = Some(plane);
                        self.due.insert(d.key.clone());
                    }
                }
            } else if let Some(image) = &d.image
                && !self.objects.contains_key(&d.key)
            {
                let plane = d.projected_by.as_ref().map(|p| index.plane_of(p, &d.key));
                let release = (d.key.kind.release_source() == ReleaseSource::Field)
                    .then(|| d.release.clone())
                    .flatten();
                self.install_steady(d.key.clone(), release, image.clone(), plane);
            }
        }
    }

    pub fn install_plane(&mut self, key: Key, release: String) {
        self.planes.insert(
            key.clone(),
            Plane {
                key,
                generation: 1,
                release,
            },
        );
    }

    /// A server-side apply of release and image on a standalone object.
    pub fn apply(
        &mut self,
        key: &Key,
        release: Option<String>,
        image: ImageRef,
    ) -> Result<(), Rejected> {
        let Some(o) = self.objects.get_mut(key) else {
            return Err(Rejected(format!("{key} not found")));
        };
        if o.release != release || o.image != image {
            o.release = release;
            o.image = image;
            o.generation += 1;
            self.due.insert(key.clone());
        }
        Ok(())
    }

    /// What the ControlPlane webhook answers an apply of `release`, with
    /// nothing changed (a dry run asks only this).
    pub fn admits_plane(&self, key: &Key, release: &str) -> Result<(), Rejected> {
        let Some(p) = self.planes.get(key) else {
            return Err(Rejected(format!("{key} not found")));
        };
        if let (Some(old), Some(new)) = (parse(&p.release), parse(release))
            && step(old, new) == Step::Down
        {
            return Err(Rejected(format!(
                "admission webhook denied the request: openStackRelease {release} is lower than {}",
                p.release
            )));
        }
        Ok(())
    }

    /// A server-side apply on a ControlPlane: its webhook rejects downgrades
    /// (skip-level bumps are admitted), then the operator re-asserts every
    /// child's release and image.
    pub fn apply_plane(
        &mut self,
        key: &Key,
        release: &str,
        children: &[(Key, ImageRef)],
    ) -> Result<(), Rejected> {
        self.admits_plane(key, release)?;
        let Some(p) = self.planes.get_mut(key) else {
            return Err(Rejected(format!("{key} not found")));
        };
        if p.release != release {
            p.release = release.to_owned();
            p.generation += 1;
        }
        for (child, image) in children {
            let rel =
                (child.kind.release_source() == ReleaseSource::Field).then(|| release.to_owned());
            if let Some(o) = self.objects.get_mut(child)
                && (o.release != rel || o.image != *image)
            {
                o.release = rel;
                o.image = image.clone();
                o.generation += 1;
                self.due.insert(child.clone());
            }
        }
        Ok(())
    }

    /// A uid no Job had before.
    fn fresh_uid(&mut self) -> u64 {
        self.uids += 1;
        self.uids
    }

    /// Deleting a Job (background propagation): the operator re-creates it.
    pub fn delete_job(&mut self, namespace: &str, name: &str) -> bool {
        self.delete_job_if(namespace, name, None)
    }

    /// Deleting the Job `name` only while its uid is `uid` (a delete's
    /// precondition): false when it is gone or another Job has the name.
    pub fn delete_job_if(&mut self, namespace: &str, name: &str, uid: Option<u64>) -> bool {
        let id = (namespace.to_owned(), name.to_owned());
        if uid.is_some_and(|u| self.jobs.get(&id).is_some_and(|j| j.uid != u)) {
            return false;
        }
        match self.jobs.remove(&id) {
            Some(j) => {
                self.due.insert(j.owner);
                true
            }
            None => false,
        }
    }

    pub fn job(&self, namespace: &str, name: &str) -> Option<&Job> {
        self.jobs.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// What lockstep's tracker sees of a child.
    pub fn observe(&self, key: &Key) -> Option<Observation> {
        let o = self.objects.get(key)?;
        let installed = o.status.installed_release.clone();
        let second_roll_done = o.deployments.iter().all(|d| {
            d.rolling_until.is_none() && (d.annotation.is_none() || d.annotation == installed)
        });
        let mut status = o.status.clone();
        status.generation = Some(o.generation);
        Some(Observation {
            kind: o.key.kind,
            generation: o.generation,
            status,
            second_roll_done,
            image_reference: o.image.reference(),
        })
    }

    /// Lets time pass until `done` holds or nothing is left to happen;
    /// returns whether `done` held.
    pub fn run_until(&mut self, mut done: impl FnMut(&World) -> bool) -> bool {
        self.settle();
        loop {
            if done(self) {
                return true;
            }
            match self.next_due() {
                Some(t) => self.advance_to(t),
                None => return done(self),
            }
        }
    }

    /// Reasons of the events recorded for an object, in order.
    pub fn event_reasons(&self, key: &Key) -> Vec<&str> {
        self.events
            .iter()
            .filter(|e| &e.key == key)
            .map(|e| e.reason.as_str())
            .collect()
    }

    /// Settles only `keys`, for a change that touched only them. Objects
    /// reconcile independently (each reads itself, its own Jobs and the
    /// clock), so the others are unaffected; in a 23,000-object world a
    /// whole settle costs a quarter of a second per apply.
    pub fn settle_only(&mut self, keys: &[Key]) {
        for _ in 0..64 {
            let mut changed = false;
            for k in keys {
                changed |= self.reconcile(k);
            }
            if !changed {
                break;
            }
        }
    }

    /// Runs reconcile passes until nothing changes at the current time.
    pub fn settle(&mut self) {
        for _ in 0..64 {
            let keys: Vec<Key> = self.objects.keys().cloned().collect();
            let mut changed = false;
            for k in keys {
                changed |= self.reconcile(&k);
            }
            if !changed {
                break;
            }
        }
        // Everything was looked at: nothing is due, rolls are found again
        // (whoever changed the fields directly may have started one).
        self.due.clear();
        self.find_rolls();
    }

    fn find_rolls(&mut self) {
        self.rolling = self
            .objects
            .values()
            .filter(|o| o.deployments.iter().any(|d| d.rolling_until.is_some()))
            .map(|o| o.key.clone())
            .collect();
    }

    /// `settle` for the objects that are due only. Objects reconcile
    /// independently (each reads itself, its own Jobs and the clock), so
    /// one that is not due would change nothing: the world ends exactly as
    /// `settle` leaves it (`tests/sim_due.rs` compares the two over random
    /// histories). Jobs are named after their object, as the operators name
    /// them, so two kinds' objects of one namespace and name would share
    /// Jobs (a conflict in a real cluster too); such a world is outside
    /// that promise.
    fn settle_due(&mut self) {
        let mut keys: Vec<Key> = std::mem::take(&mut self.due).into_iter().collect();
        for _ in 0..64 {
            if keys.is_empty() {
                return;
            }
            keys.retain(|k| self.reconcile(k));
        }
        // Still changing after as many rounds as `settle` allows: the next
        // step goes on with them.
        self.due.extend(keys);
    }

    /// `settle`, then `advance_to` the next due time (at most `max_wait`
    /// ahead) for what is due and in flight only; the world ends exactly as
    /// those two leave it. Returns whether anything was due.
    pub fn step_due(&mut self, max_wait: Duration) -> bool {
        self.settle_due();
        match self.next_due_indexed() {
            Some(t) => {
                let t = t.min(self.now + max_wait);
                self.advance_due(t);
                true
            }
            None => false,
        }
    }

    /// `advance_to` for what is in flight only.
    pub fn advance_due(&mut self, t: Duration) {
        self.finish_until(t);
        self.settle_due();
    }

    /// Moves the clock to `t`; Jobs and rolls (of `rolling`) due by then
    /// finish, and their objects become due.
    fn finish_until(&mut self, t: Duration) {
        self.now = self.now.max(t);
        let now = self.now;
        let limit = self.params.backoff_limit;
        for j in self.jobs.values_mut() {
            if j.state == JobState::Running && j.done_at <= now {
                j.state = if j.failed_tries > limit {
                    JobState::Failed
                } else {
                    JobState::Complete
                };
                self.due.insert(j.owner.clone());
            }
        }
        let rolling = std::mem::take(&mut self.rolling);
        for k in rolling {
            let Some(o) = self.objects.get_mut(&k) else {
                continue;
            };
            let mut still = false;
            for d in &mut o.deployments {
                if d.rolling_until.is_some_and(|u| u <= now) {
                    d.rolling_until = None;
                    self.due.insert(k.clone());
                }
                still |= d.rolling_until.is_some();
            }
            if still {
                self.rolling.insert(k);
            }
        }
    }

    /// `next_due` from the running Jobs and the rolls in flight.
    fn next_due_indexed(&self) -> Option<Duration> {
        self.earliest(self.rolling.iter().filter_map(|k| self.objects.get(k)))
    }

    /// The next time something is due, if anything is.
    pub fn next_due(&self) -> Option<Duration> {
        self.earliest(self.objects.values())
    }

    /// The earliest end after now of a running Job or of a roll of `objects`.
    fn earliest<'a>(&'a self, objects: impl Iterator<Item = &'a Object>) -> Option<Duration> {
        let jobs = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Running)
            .map(|j| j.done_at);
        let rolls = objects.flat_map(|o| o.deployments.iter().filter_map(|d| d.rolling_until));
        jobs.chain(rolls).filter(|t| *t > self.now).min()
    }

    /// Moves the clock to `t` and lets everything due by then happen.
    pub fn advance_to(&mut self, t: Duration) {
        // Every roll, wherever it was started.
        self.find_rolls();
        self.finish_until(t);
        self.settle();
    }

    fn start_job(&mut self, key: &Key, kind: JobKind, image: String) {
        let mut failed = 0u32;
        let limit = self.params.backoff_limit + 1;
        let mut t = self.now;
        let name = key.name.clone();
        let base = match kind {
            JobKind::Sync => self.params.sync,
            JobKind::Expand => self.params.expand,
            JobKind::Migrate => self.params.migrate,
            JobKind::Contract => self.params.contract,
        };
        while failed < limit {
            let mut fails = false;
            for f in &mut self.faults {
                match f {
                    Fault::JobFails { object, job, tries }
                        if *object == name && *job == kind && *tries > 0 =>
                    {
                        *tries -= 1;
                        fails = true;
                    }
                    Fault::DatabaseDown { object, until } if *object == name && t < *until => {
                        fails = true
                    }
                    _ => {}
                }
            }
            if !fails {
                break;
            }
            failed += 1;
            t += self.params.failed_try;
        }
        let done_at = if failed >= limit { t } else { t + base };
        let uid = self.fresh_uid();
        self.jobs.insert(
            (
                key.namespace.clone(),
                format!("{}-{}", key.name, kind.suffix()),
            ),
            Job {
                owner: key.clone(),
                kind,
                image,
                state: JobState::Running,
                created: self.now,
                done_at,
                failed_tries: failed,
                uid,
            },
        );
    }

    /// Runs (or re-runs) a Job; its state, with a finished Job of another
    /// image deleted and re-created (the pod-spec hash changed).
    fn run_job(&mut self, key: &Key, kind: JobKind, image: &str) -> JobState {
        let id = (
            key.namespace.clone(),
            format!("{}-{}", key.name, kind.suffix()),
        );
        match self.jobs.get(&id) {
            Some(j) if j.image == image => j.state,
            Some(j) if j.state == JobState::Running => JobState::Running,
            _ => {
                self.start_job(key, kind, image.to_owned());
                JobState::Running
            }
        }
    }

    fn roll_stall(&self, name: &str) -> Duration {
        self.faults
            .iter()
            .map(|f| match f {
                Fault::RolloutStall { object, extra } if object == name => *extra,
                _ => Duration::ZERO,
            })
            .sum()
    }

    /// Rolls Deployments, one at a time in roll order, to `image` (and, where
    /// annotated, `annotation`). True when every one is there.
    fn roll(&mut self, key: &Key, image: &str, annotation: Option<&str>) -> bool {
        let extra = self.roll_stall(&key.name);
        let (now, roll) = (self.now, self.params.roll);
        let Some(o) = self.objects.get_mut(key) else {
            return true;
        };
        for d in &mut o.deployments {
            if d.rolling_until.is_some() {
                return false;
            }
            let want_ann = d
                .annotation
                .is_some()
                .then(|| annotation.map(str::to_owned))
                .flatten();
            let needs = d.image != image
                || (d.annotation.is_some() && want_ann.is_some() && d.annotation != want_ann);
            if needs {
                d.image = image.to_owned();
                if want_ann.is_some() {
                    d.annotation = want_ann;
                }
                d.rolling_until = Some(now + roll + extra);
                self.rolling.insert(key.clone());
                return false;
            }
        }
        true
    }

    fn reconcile(&mut self, key: &Key) -> bool {
        self.passes += 1;
        let Some(before) = self.objects.get(key).map(|o| {
            (
                o.status.clone(),
                o.deployments
                    .iter()
                    .map(|d| (d.image.clone(), d.rolling_until))
                    .collect::<Vec<_>>(),
            )
        }) else {
            return false;
        };
        let jobs_before = self.jobs.len();
        match key.kind {
            Kind::Horizon => self.reconcile_horizon(key),
            Kind::Placement | Kind::Barbican => self.reconcile_gated(key),
            _ => self.reconcile_phased(key),
        }
        let Some(o) = self.objects.get_mut(key) else {
            return true;
        };
        o.observed_generation = o.generation;
        let after = (
            o.status.clone(),
            o.deployments
                .iter()
                .map(|d| (d.image.clone(), d.rolling_until))
                .collect::<Vec<_>>(),
        );
        let changed = before != after;
        if changed {
            self.changed.insert(key.clone());
        }
        changed || self.jobs.len() != jobs_before
    }

    fn reconcile_horizon(&mut self, key: &Key) {
        let Some(image) = self.objects.get(key).map(|o| o.image.reference()) else {
            return;
        };
        let done = self.roll(key, &image, None);
        if let Some(o) = self.objects.get_mut(key) {
            set_ready(o, done);
        }
    }

    /// Placement and Barbican: one sync Job behind a release gate
    /// (`docs/operators.md` §2.4, §5.9).
    fn reconcile_gated(&mut self, key: &Key) {
        let Some(o) = self.objects.get(key) else {
            return;
        };
        let image = o.image.reference();
        let spec = o.release.clone().unwrap_or_default();
        let installed = o.status.installed_release.clone().unwrap_or_default();
        if let Some(reason) = lockstep_guard(o) {
            let o = self.objects.get_mut(key).map(|o| {
                set_cond(o, "DatabaseReady", false, "ImageReleaseMismatch", &reason);
            });
            let _ = o;
            return;
        }
        if !installed.is_empty() && installed != spec {
            let verdict = match (parse(&installed), parse(&spec)) {
                (Some(i), Some(s)) => match step(i, s) {
                    Step::Down => Some((
                        "DowngradeNotSupported",
                        format!("{installed} → {spec} is a downgrade"),
                    )),
                    Step::Skip => Some((
                        "UpgradePathInvalid",
                        format!("{installed} → {spec} is not a sequential upgrade"),
                    )),
                    _ => None,
                },
                _ => Some((
                    "VersionParseError",
                    format!("cannot parse {installed} or {spec}"),
                )),
            };
            if let Some((reason, msg)) = verdict {
                self.refuse(key, reason, msg);
                return;
            }
            if o.status.installed_image.as_deref() == Some(image.as_str()) {
                self.refuse(key, "ImageReleaseMismatch", format!("release bump {installed} → {spec} with an unchanged image {image}: nothing would migrate"));
                return;
            }
            if let Some(o) = self.objects.get_mut(key)
                && o.status.target_release.as_deref() != Some(spec.as_str())
            {
                o.status.target_release = Some(spec.clone());
            }
        }
        if self.sync(key, &image) {
            let newly = self
                .objects
                .get(key)
                .is_some_and(|o| o.status.installed_release.as_deref() != Some(spec.as_str()));
            if let Some(o) = self.objects.get_mut(key) {
                o.status.installed_release = Some(spec.clone());
                o.status.installed_image = Some(image.clone());
                o.status.target_release = None;
                set_cond(o, "DatabaseReady", true, "DatabaseSynced", "");
            }
            if newly {
                self.event(
                    key,
                    false,
                    "DatabaseSynced",
                    format!("database synced at {spec}"),
                );
            }
            let done = self.roll(key, &image, None);
            if let Some(o) = self.objects.get_mut(key) {
                set_ready(o, done);
            }
        }
    }

    fn refuse(&mut self, key: &Key, reason: &str, message: String) {
        let fresh = self
            .objects
            .get(key)
            .and_then(|o| o.status.condition("DatabaseReady"))
            .is_none_or(|c| c.reason != reason);
        if let Some(o) = self.objects.get_mut(key) {
            set_cond(o, "DatabaseReady", false, reason, &message);
            set_ready(o, false);
        }
        if fresh {
            self.event(key, true, reason, message);
        }
    }

    fn job_failed(&mut self, key: &Key, kind: JobKind) {
        let name = format!("{}-{}", key.name, kind.suffix());
        let reason = format!("{}Failed", kind.phase());
        let reason = if kind == JobKind::Sync {
            "DBSyncFailed".to_owned()
        } else {
            reason
        };
        let msg = format!(
            "{} job {name} failed: job has permanently failed: {}/{name}",
            kind.phase(),
            key.namespace
        );
        self.refuse(key, &reason, msg);
    }

    /// Keystone, Glance, Nova, Cinder, Neutron: the shared phase machine
    /// (`docs/operators.md` §5).
    fn reconcile_phased(&mut self, key: &Key) {
        let Some(o) = self.objects.get(key) else {
            return;
        };
        let image = o.image.reference();
        let spec = spec_release(o);
        let installed = o.status.installed_release.clone();
        let phase = o.status.upgrade_phase.clone().unwrap_or_default();
        let target = o.status.target_release.clone();
        let aborting = !phase.is_empty() && spec == installed;
        if !aborting && let Some(reason) = lockstep_guard(o) {
            if let Some(o) = self.objects.get_mut(key) {
                set_cond(o, "DatabaseReady", false, "ImageReleaseMismatch", &reason);
                set_ready(o, false);
            }
            return;
        }
        let ns = key.namespace.clone();
        if phase.is_empty() {
            let (Some(spec), Some(inst)) = (spec.clone(), installed.clone()) else {
                // Fresh install, or a digest-pinned Keystone: the steady sync only.
                return self.steady(key, &image, spec.as_deref());
            };
            let base = |r: &str| r.split('-').next().unwrap_or_default().to_owned();
            if base(&spec) == base(&inst) {
                return self.steady(key, &image, Some(&spec));
            }
            let refusal = match (parse(&inst), parse(&spec)) {
                (Some(i), Some(s)) => match step(i, s) {
                    Step::Down => Some((
                        "DowngradeNotSupported",
                        format!("{inst} → {spec} is a downgrade"),
                    )),
                    Step::Skip => Some((
                        "UpgradePathInvalid",
                        format!("{inst} → {spec} is not a sequential upgrade"),
                    )),
                    _ => None,
                },
                _ => Some(("VersionParseError", format!("cannot parse {inst} → {spec}"))),
            };
            if let Some((reason, msg)) = refusal {
                return self.refuse(key, reason, msg);
            }
            if let Some(o) = self.objects.get_mut(key) {
                o.status.target_release = Some(spec.clone());
                o.status.upgrade_phase = Some("Expanding".into());
                set_cond(
                    o,
                    "DatabaseReady",
                    false,
                    "ExpandInProgress",
                    &format!("expand phase running: {inst} → {spec}"),
                );
                set_ready(o, false);
            }
            self.event(
                key,
                false,
                "UpgradeInitiated",
                format!("upgrade initiated: {inst} → {spec}"),
            );
            return;
        }
        if aborting {
            for k in [JobKind::Expand, JobKind::Migrate, JobKind::Contract] {
                self.delete_job(&ns, &format!("{}-{}", key.name, k.suffix()));
            }
            if let Some(o) = self.objects.get_mut(key) {
                o.status.upgrade_phase = None;
                o.status.target_release = None;
            }
            self.event(
                key,
                false,
                "UpgradeAborted",
                format!("upgrade to {} aborted", target.unwrap_or_default()),
            );
            return;
        }
        if spec != target {
            return self.refuse(
                key,
                "UpgradeTargetChanged",
                format!(
                    "spec release {} differs from the upgrade target {}; set it back to continue or to {} to abort",
                    spec.unwrap_or_default(),
                    target.clone().unwrap_or_default(),
                    installed.unwrap_or_default()
                ),
            );
        }
        let (inst, tgt) = (installed.unwrap_or_default(), target.unwrap_or_default());
        let job_phase = |p: &str| match p {
            "Expanding" => Some((
                JobKind::Expand,
                "Migrating",
                "MigrateInProgress",
                "ExpandComplete",
            )),
            "Migrating" => Some((
                JobKind::Migrate,
                "RollingUpdate",
                "UpgradeRollingUpdate",
                "MigrateComplete",
            )),
            "Contracting" => Some((JobKind::Contract, "", "DatabaseSynced", "UpgradeComplete")),
            _ => None,
        };
        if let Some((job, next, next_reason, done_event)) = job_phase(&phase) {
            match self.run_job(key, job, &image) {
                JobState::Running => {
                    let reason = format!("{}InProgress", job.phase());
                    if let Some(o) = self.objects.get_mut(key) {
                        set_cond(
                            o,
                            "DatabaseReady",
                            false,
                            &reason,
                            &format!(
                                "{} phase running: {inst} → {tgt}",
                                job.phase().to_lowercase()
                            ),
                        );
                    }
                }
                JobState::Failed => self.job_failed(key, job),
                JobState::Complete => {
                    if let Some(o) = self.objects.get_mut(key) {
                        if next.is_empty() {
                            o.status.installed_release = Some(tgt.clone());
                            o.status.target_release = None;
                            o.status.upgrade_phase = None;
                            set_cond(o, "DatabaseReady", true, "DatabaseSynced", "");
                        } else {
                            o.status.upgrade_phase = Some(next.to_owned());
                            set_cond(
                                o,
                                "DatabaseReady",
                                false,
                                next_reason,
                                &format!("{next} phase running: {inst} → {tgt}"),
                            );
                        }
                    }
                    self.event(
                        key,
                        false,
                        done_event,
                        format!("{}: {inst} → {tgt}", done_event),
                    );
                }
            }
            return;
        }
        // RollingUpdate: workloads move to the new image, then Contracting.
        let annotation = self
            .objects
            .get(key)
            .and_then(|o| o.status.installed_release.clone());
        if self.roll(key, &image, annotation.as_deref()) {
            if let Some(o) = self.objects.get_mut(key) {
                o.status.upgrade_phase = Some("Contracting".into());
                set_cond(
                    o,
                    "DatabaseReady",
                    false,
                    "ContractInProgress",
                    &format!("contract phase running: {inst} → {tgt}"),
                );
            }
            self.event(
                key,
                false,
                "DeploymentRolloutComplete",
                format!("all roles rolled out: {inst} → {tgt}"),
            );
        }
    }

    /// Runs the db-sync Job on `image`; true once it has completed (while it
    /// runs, or after it failed for good, the conditions say so).
    fn sync(&mut self, key: &Key, image: &str) -> bool {
        match self.run_job(key, JobKind::Sync, image) {
            JobState::Complete => true,
            JobState::Failed => {
                self.job_failed(key, JobKind::Sync);
                false
            }
            JobState::Running => {
                if let Some(o) = self.objects.get_mut(key) {
                    set_cond(
                        o,
                        "DatabaseReady",
                        false,
                        "DBSyncInProgress",
                        "db sync running",
                    );
                    set_ready(o, false);
                }
                false
            }
        }
    }

    /// The steady path: db-sync on the current image, then the workloads
    /// (and, after an upgrade, the second roll of annotated roles).
    fn steady(&mut self, key: &Key, image: &str, spec: Option<&str>) {
        if self.sync(key, image) {
            if let Some(o) = self.objects.get_mut(key) {
                if o.status.installed_release.is_none() && spec.is_some() {
                    o.status.installed_release = spec.map(str::to_owned);
                }
                // Neutron records the image that migrated the schema
                // (`docs/operators.md` §3.1).
                if key.kind == Kind::Neutron {
                    o.status.installed_image = Some(image.to_owned());
                }
                set_cond(o, "DatabaseReady", true, "DatabaseSynced", "");
            }
            let annotation = self
                .objects
                .get(key)
                .and_then(|o| o.status.installed_release.clone());
            let done = self.roll(key, image, annotation.as_deref());
            if let Some(o) = self.objects.get_mut(key) {
                set_ready(o, done);
            }
        }
    }
}

/// The `ImageReleaseMismatch` guard (`docs/operators.md` §2.3): a tag
/// naming another release.
fn lockstep_guard(o: &Object) -> Option<String> {
    if o.key.kind.release_source() != ReleaseSource::Field {
        return None;
    }
    let spec = o.release.as_deref().and_then(parse)?;
    let tagged = o.image.tag_release()?;
    (tagged.release != spec).then(|| {
        format!(
            "image tag {} does not match openStackRelease {spec}",
            o.image.tag().unwrap_or_default()
        )
    })
}

fn set_cond(o: &mut Object, type_: &str, ok: bool, reason: &str, message: &str) {
    let gen_ = o.generation;
    let c = Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: Some(gen_),
    };
    match o.status.conditions.iter_mut().find(|x| x.type_ == type_) {
        Some(x) => *x = c,
        None => o.status.conditions.push(c),
    }
}

fn set_ready(o: &mut Object, workloads_done: bool) {
    let db_ok = o
        .status
        .condition("DatabaseReady")
        .is_none_or(|c| c.status == "True");
    let ok = db_ok && workloads_done && o.status.upgrade_phase.is_none();
    if ok {
        set_cond(o, "Ready", true, "AllReady", "All sub-conditions are ready");
    } else {
        set_cond(o, "Ready", false, "NotAllReady", "");
    }
}

impl Fault {
    /// The name of the object it troubles (`metadata.name`).
    pub fn object(&self) -> &str {
        match self {
            Fault::JobFails { object, .. }
            | Fault::DatabaseDown { object, .. }
            | Fault::RolloutStall { object, .. } => object,
        }
    }
}

/// A `--fault` naming no object the rehearsal had: it injected nothing, and
/// a timeline without trouble would read as one that weathered it.
#[derive(Debug, thiserror::Error)]
#[error(
    "--fault names \"{object}\", but no object of the rehearsal is named so; faults name an object by its metadata.name ({known})"
)]
pub struct UnknownFaultObject {
    pub object: String,
    pub known: String,
}

impl World {
    /// The first fault whose object was never in this world (seeded, or
    /// installed during the run), with the names it had, for the message.
    pub fn fault_without_object(&self) -> Option<UnknownFaultObject> {
        let names: std::collections::BTreeSet<&str> = self
            .objects
            .keys()
            .chain(self.planes.keys())
            .map(|k| k.name.as_str())
            .collect();
        let missing = self.faults.iter().find(|f| !names.contains(f.object()))?;
        const SHOWN: usize = 8;
        let mut known: Vec<String> = names
            .iter()
            .take(SHOWN)
            .map(|n| crate::escape::escape(n).into_owned())
            .collect();
        if names.len() > SHOWN {
            known.push(format!("and {} more", names.len() - SHOWN));
        }
        Some(UnknownFaultObject {
            object: crate::escape::escape(missing.object()).into_owned(),
            known: if known.is_empty() {
                "the rehearsal has no object".to_owned()
            } else {
                format!("the rehearsal has {}", known.join(", "))
            },
        })
    }
}

/// A `--fault` that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "--fault {spec:?}: {why}; expected OBJECT:JOB:fail=N (JOB: sync, expand, migrate, contract), OBJECT:db-down=DURATION or OBJECT:roll-stall=DURATION"
)]
pub struct FaultError {
    pub spec: String,
    pub why: String,
}

/// Parses `nova:expand:fail=2`, `prod-glance:db-down=15m`,
/// `prod-nova:roll-stall=20m`: one grammar for `rehearse --fault` and
/// `run --fault` (sim mode), so both inject the same trouble.
/// The longest fault a simulation takes (`db-down`, `roll-stall`).
pub const MAX_FAULT_DURATION: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

pub fn parse_fault(spec: &str) -> Result<Fault, FaultError> {
    let bad = |why: &str| FaultError {
        spec: spec.to_owned(),
        why: why.to_owned(),
    };
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.as_slice() {
        [object, job, what] => {
            let job = match *job {
                "sync" => JobKind::Sync,
                "expand" => JobKind::Expand,
                "migrate" => JobKind::Migrate,
                "contract" => JobKind::Contract,
                _ => return Err(bad("unknown job")),
            };
            let n = what
                .strip_prefix("fail=")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad("expected fail=N"))?;
            Ok(Fault::JobFails {
                object: (*object).to_owned(),
                job,
                tries: n,
            })
        }
        [object, what] => {
            let (k, v) = what
                .split_once('=')
                .ok_or_else(|| bad("expected KEY=VALUE"))?;
            let d =
                crate::duration::parse(v).map_err(|_| bad("bad duration (e.g. 90s, 15m, 1h)"))?;
            // Virtual time still costs a pass per simulated minute or so: a
            // fault of years ran for minutes of real time.
            if d > MAX_FAULT_DURATION {
                return Err(bad("at most 720h (30 days)"));
            }
            match k {
                "db-down" => Ok(Fault::DatabaseDown {
                    object: (*object).to_owned(),
                    until: d,
                }),
                "roll-stall" => Ok(Fault::RolloutStall {
                    object: (*object).to_owned(),
                    extra: d,
                }),
                _ => Err(bad("unknown fault")),
            }
        }
        _ => Err(bad("wrong number of parts")),
    }
}
