//! Leader election for `lockstep run` with several replicas, on a
//! `coordination.k8s.io/v1` Lease.
//!
//! Replicas exist for availability, not for throughput: two of them
//! reconciling at once would race each other's patches and could both start
//! the same gated hop. So exactly one replica, the holder of the Lease, writes;
//! the others keep their caches warm and forward webhook triggers to it.
//!
//! kube-lease-manager does the acquiring, renewing and releasing. What it does
//! not do is say "lost" when a renewal fails (see [`Leadership`]), so this
//! module checks every renewal against the Lease itself and stands down on a
//! local timer that needs no answer from the API server.
//!
//! RBAC: `get`, `list`, `watch`, `create` and `patch` on
//! `leases.coordination.k8s.io` in [`LeaseConfig::namespace`]; `get` on
//! `pods` there, for a follower to check the holder before it forwards a
//! webhook delivery (`src/forward.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use sha2::{Digest, Sha256};
use thiserror::Error;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Where the election happens and who takes part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The daemon's own namespace (`POD_NAMESPACE`), so the Lease lives and
    /// dies with the deployment.
    pub namespace: String,
    /// Every replica of one deployment must use the same name; two deployments
    /// (say, one per fleet) need two names.
    pub name: String,
    /// Unique per replica, and the holder's identity is how followers find
    /// the leader: the daemon uses `<POD_NAME>@<address of its webhook port>`,
    /// e.g. `lockstep-7d9-abc@10.1.2.3:8080` (see [`identity`] and
    /// [`parse_holder`]). Two replicas with one identity would both believe
    /// they hold the Lease, so there is no default: [`Leadership::start`]
    /// refuses an empty one.
    pub identity: String,
    /// How long a silent leader keeps the Lease: the worst-case handover after
    /// a crash. Whole seconds, because the Lease counts in seconds.
    pub duration: Duration,
    /// The leader renews this long before the Lease expires. Half of it is the
    /// room for the renewal to land, the other half is the clock skew between
    /// replicas (and the time an in-flight write takes) that is tolerated
    /// before two leaders could overlap; a newly won Lease is also acted on
    /// only after `grace/2` (see [`Leadership`]). Whole seconds, less than
    /// `duration`.
    pub grace: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            namespace: "default".into(),
            name: "lockstep".into(),
            identity: String::new(),
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
        }
    }
}

impl LeaseConfig {
    /// Refused here rather than by kube-lease-manager, which panics on a grace
    /// that is zero or not below the duration.
    fn seconds(&self) -> Result<(u64, u64), LeaseError> {
        let bad = |why: &str| Err(LeaseError::Config(why.into()));
        if self.identity.is_empty() {
            return bad("identity is empty: it must name this replica, e.g. pod@ip:port");
        }
        if self.duration.subsec_nanos() != 0 || self.grace.subsec_nanos() != 0 {
            return bad("duration and grace must be whole seconds (the Lease counts in seconds)");
        }
        let (duration, grace) = (self.duration.as_secs(), self.grace.as_secs());
        if grace == 0 || grace >= duration {
            return bad("grace must be at least 1 s and less than duration");
        }
        if i32::try_from(duration).is_err() {
            return bad("duration does not fit leaseDurationSeconds");
        }
        Ok((duration, grace))
    }

    fn builder(&self, client: Client, (duration, grace): (u64, u64)) -> LeaseManagerBuilder {
        // kube-lease-manager's default field manager embeds the identity and
        // can pass the API server's 128-character limit with an IPv6 address.
        let digest = Sha256::digest(self.identity.as_bytes());
        let field_manager = format!("lockstep-lease-{}", &hex::encode(digest)[..16]);
        LeaseManagerBuilder::new(client, self.name.clone())
            .with_namespace(self.namespace.clone())
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .with_identity(self.identity.clone())
            .with_field_manager(field_manager)
            .with_duration(duration)
            .with_grace(grace)
    }
}

/// The identity a replica runs under: its pod name and the address its
/// webhook port can be reached at.
pub fn identity(pod_name: &str, webhook: SocketAddr) -> String {
    format!("{pod_name}@{webhook}")
}

/// Splits a holder identity `name@ip:port` (`name@[v6]:port`) so a follower
/// can forward a webhook trigger to the leader; `None` for anything else,
/// since the Lease may be held by something that is not lockstep.
pub fn parse_holder(identity: &str) -> Option<(&str, SocketAddr)> {
    let (name, addr) = identity.rsplit_once('@')?;
    if name.is_empty() {
        return None;
    }
    Some((name, addr.parse().ok()?))
}

#[derive(Debug, Error)]
pub enum LeaseError {
    #[error("lease config: {0}")]
    Config(String),
    #[error("lease: {0}")]
    Manager(#[from] LeaseManagerError),
    #[error("lease: reading the Lease: {0}")]
    Kube(#[from] kube::Error),
}

/// Whether this replica may write, kept current by a background task.
///
/// # What "leader" promises, and why it is more than kube-lease-manager's flag
///
/// kube-lease-manager 0.13 never reports losing the Lease when a renewal
/// fails: a failed renew comes back as an error that leaves its own leader
/// flag set (its `watch()` logs it, backs off 1–30 s and retries, while the
/// channel still says `true`), and a failed read leaves its cached holder as
/// it was. kube's client has no read timeout by default, so a renewal sent to
/// a hung API server simply waits. The flag turns false only after a later
/// read succeeds and names someone else, i.e. after the other replica has
/// already taken over. Trusted alone, a leader cut off from the API server
/// would keep writing after its Lease expired.
///
/// So this module drives the manager's `changed()` itself and
/// [`is_leader`](Self::is_leader) is true only while (1) the manager says
/// we hold the Lease, (2) the Lease, watched, names us, and (3) our latest
/// renewal seen there is recent: we stand down at `renewTime + duration −
/// grace/2` on our own clock, by a timer, whatever the API server does. The
/// manager renews at `renewTime + duration − grace`, so a healthy leader never
/// reaches that point; another replica may take the Lease only once it sees
/// `renewTime + duration` pass on its clock. Two replicas therefore never both
/// report leadership as long as their clocks differ by less than `grace/2`.
///
/// kube-lease-manager's takeover of an expired Lease and its renewals are
/// blind patches (no resourceVersion precondition), so a replica acting on a
/// stale read can overwrite a fresh holder. A newly won (or re-won) Lease is
/// therefore reported only after it has stayed ours for `grace/2`, so that
/// such a write is seen before we act on the win.
///
/// What it cannot promise: the Lease is no fence. A write already sent when
/// the flag drops still lands, and the API server would accept a stale
/// leader's writes. Check the flag right before each write and keep writes
/// shorter than `grace/2`.
///
/// Dropping a `Leadership` is a crash as far as the others can tell: it stops
/// renewing without releasing, and they wait for the Lease to expire. Use
/// [`resign`](Self::resign) on a graceful shutdown.
pub struct Leadership {
    shared: Arc<Shared>,
    rx: watch::Receiver<bool>,
    election: Option<Election>,
}

struct Election {
    identity: String,
    name: String,
    api: Api<Lease>,
    /// The pods of the Lease's namespace, where every replica runs.
    pods: Api<Pod>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    /// How long resigning may take before we give up on the release.
    patience: Duration,
}

impl Leadership {
    /// Joins the election. Fails fast (namespace missing, no RBAC, bad
    /// config) because it creates the Lease if it does not exist yet; after
    /// that, API errors are retried in the background and only ever make us
    /// a follower.
    pub async fn start(client: Client, config: LeaseConfig) -> Result<Leadership, LeaseError> {
        let seconds = config.seconds()?;
        let manager = config.builder(client.clone(), seconds).build().await?;
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            tx,
            stopped: AtomicBool::new(false),
        });
        let (stop, stopped) = oneshot::channel();
        let api = Api::<Lease>::namespaced(client.clone(), &config.namespace);
        let election = Election {
            identity: config.identity.clone(),
            name: config.name.clone(),
            api: api.clone(),
            pods: Api::namespaced(client.clone(), &config.namespace),
            stop: Some(stop),
            task: tokio::spawn(
                Campaign {
                    config: config.clone(),
                    seconds,
                    client,
                    api,
                    shared: shared.clone(),
                }
                .run(manager, stopped),
            ),
            patience: config.duration,
        };
        Ok(Leadership {
            shared,
            rx,
            election: Some(election),
        })
    }

    /// A single replica, `sim` mode and tests have nobody to elect against.
    pub fn always() -> Leadership {
        let (tx, rx) = watch::channel(true);
        Leadership {
            shared: Arc::new(Shared {
                tx,
                stopped: AtomicBool::new(false),
            }),
            rx,
            election: None,
        }
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Turns false before the Lease is released or given up, and stays false
    /// once this `Leadership` is resigned or dropped.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.shared.tx.subscribe()
    }

    /// Read from the API server rather than from our watch, so a follower
    /// forwarding a trigger gets the freshest answer. It may name a crashed
    /// leader until its Lease expires and someone takes over: treat a failed
    /// forward as "try again later". `None` under [`always`](Self::always).
    pub async fn holder(&self) -> Result<Option<String>, LeaseError> {
        let Some(election) = &self.election else {
            return Ok(None);
        };
        let lease = election.api.get_opt(&election.name).await?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// This replica's identity in the election; `None` under
    /// [`always`](Self::always).
    pub fn identity(&self) -> Option<&str> {
        self.election.as_ref().map(|e| e.identity.as_str())
    }

    /// The pods of the Lease's namespace, where the replicas run (a
    /// follower checks the holder's pod before it forwards anything to it:
    /// `src/forward.rs`). `None` under [`always`](Self::always).
    pub fn pods(&self) -> Option<Api<Pod>> {
        self.election.as_ref().map(|e| e.pods.clone())
    }

    /// Hands over at once (a follower watching the Lease sees it freed)
    /// instead of after `duration`. Gives up on the release after `duration`
    /// if the API server does not answer; the Lease then expires as after a
    /// crash.
    pub async fn resign(mut self) {
        let Some(mut election) = self.election.take() else {
            return;
        };
        if let Some(stop) = election.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(election.patience, &mut election.task)
            .await
            .is_err()
        {
            tracing::warn!(
                identity = election.identity,
                "lease release timed out; the Lease will expire instead"
            );
            election.task.abort();
        }
        self.shared.stop(&election.identity, "resigned");
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        match &self.election {
            Some(election) => {
                // Abort before publishing false: no renewal and no release
                // after this point, like a crash.
                election.task.abort();
                self.shared
                    .stop(&election.identity, "dropped without resigning");
            }
            None => self.shared.stop("", "dropped"),
        }
    }
}

struct Shared {
    tx: watch::Sender<bool>,
    /// Set once resigned or dropped: an aborted task finishing its last poll
    /// must not turn the flag back on.
    stopped: AtomicBool,
}

impl Shared {
    fn publish(&self, identity: &str, leader: bool, why: &str) {
        let changed = self.tx.send_if_modified(|v| {
            if self.stopped.load(Ordering::SeqCst) || *v == leader {
                return false;
            }
            *v = leader;
            true
        });
        if changed && leader {
            tracing::info!(identity, "became leader");
        } else if changed {
            tracing::info!(identity, reason = why, "lost leadership");
        }
    }

    fn stop(&self, identity: &str, why: &str) {
        self.stopped.store(true, Ordering::SeqCst);
        if self.tx.send_replace(false) && !identity.is_empty() {
            tracing::info!(identity, reason = why, "lost leadership");
        }
    }
}

/// What the background task has seen of the Lease itself.
#[derive(Debug, Default)]
struct Observed {
    /// The holder as last seen; `None` before the first sighting.
    holder: Option<Option<String>>,
    /// Until when our latest renewal lets us act, if the Lease names us.
    confirmed_until: Option<Instant>,
    /// Since when the Lease has named us without a break.
    mine_since: Option<Instant>,
}

/// The parts of a Lease the election depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sighting {
    holder: Option<String>,
    renewed: Option<SystemTime>,
    duration_secs: Option<i32>,
}

impl Sighting {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            renewed: spec.renew_time.map(|t| SystemTime::from(t.0)),
            duration_secs: spec.lease_duration_seconds,
        }
    }

    fn gone() -> Self {
        Self {
            holder: None,
            renewed: None,
            duration_secs: None,
        }
    }
}

/// How much longer a renewal at `renewed` lets the holder act, seen at `now`
/// on the holder's own clock (the renewal time is written with it).
fn confirmed_for(
    renewed: SystemTime,
    duration_secs: i32,
    grace: Duration,
    now: SystemTime,
) -> Option<Duration> {
    let duration = Duration::from_secs(u64::try_from(duration_secs).ok()?);
    let stand_down = renewed.checked_add(duration)?.checked_sub(grace / 2)?;
    stand_down.duration_since(now).ok().filter(|d| !d.is_zero())
}

impl Observed {
    /// Returns whether the Lease just became free after being held, which
    /// kube-lease-manager would only notice when the old term runs out.
    fn see(
        &mut self,
        s: &Sighting,
        identity: &str,
        grace: Duration,
        now: Instant,
        wall: SystemTime,
    ) -> bool {
        let before = self.holder.replace(s.holder.clone());
        if s.holder.as_deref() == Some(identity) {
            let left = s
                .renewed
                .zip(s.duration_secs)
                .and_then(|(r, d)| confirmed_for(r, d, grace, wall));
            self.confirmed_until = left.map(|d| now + d);
            if self.confirmed_until.is_none() {
                self.mine_since = None;
            } else if self.mine_since.is_none() {
                self.mine_since = Some(now);
            }
        } else {
            self.confirmed_until = None;
            self.mine_since = None;
        }
        s.holder.is_none() && matches!(before, Some(Some(_)))
    }

    /// A renewal not seen in time is a lost Lease, whatever the manager says.
    fn lapse(&mut self, now: Instant) {
        if self.confirmed_until.is_some_and(|t| t <= now) {
            self.confirmed_until = None;
            self.mine_since = None;
        }
    }

    fn mine(&self, now: Instant) -> bool {
        self.confirmed_until.is_some_and(|t| t > now)
    }

    /// `Ok` if we may act now; otherwise why not (for the log).
    fn verdict(&self, claims: bool, settle: Duration, now: Instant) -> Result<(), &'static str> {
        if !claims {
            return Err("the lease manager no longer holds the Lease");
        }
        if !self.mine(now) {
            return Err(match &self.holder {
                Some(Some(_)) | None => "renewal not confirmed before the stand-down deadline",
                Some(None) => "the Lease was released",
            });
        }
        match self.mine_since {
            Some(since) if since + settle <= now => Ok(()),
            _ => Err("the Lease was just won and is settling"),
        }
    }

    /// The next instant at which the verdict can change without any event.
    fn wake(&self, claims: bool, settle: Duration, now: Instant) -> Option<Instant> {
        let until = self.confirmed_until.filter(|_| claims)?;
        let settled = self.mine_since.map(|s| s + settle).filter(|t| *t > now);
        Some(settled.map_or(until, |s| s.min(until)))
    }
}

/// What the lease manager came back with.
enum Step {
    Changed(Result<bool, LeaseManagerError>),
    Rebuilt(Result<Arc<LeaseManager>, LeaseManagerError>),
}

fn drive(manager: Arc<LeaseManager>, delay: Duration) -> BoxFuture<'static, Step> {
    Box::pin(async move {
        tokio::time::sleep(delay).await;
        Step::Changed(manager.changed().await)
    })
}

struct Campaign {
    config: LeaseConfig,
    /// `config`'s duration and grace, checked.
    seconds: (u64, u64),
    client: Client,
    api: Api<Lease>,
    shared: Arc<Shared>,
}

impl Campaign {
    /// A fresh manager reads the Lease at once, where the old one would sleep
    /// until the old term ends before noticing that it was released.
    fn rebuild(&self, delay: Duration) -> BoxFuture<'static, Step> {
        let builder = self.config.builder(self.client.clone(), self.seconds);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Step::Rebuilt(builder.build().await.map(Arc::new))
        })
    }

    async fn run(self, first: LeaseManager, mut stop: oneshot::Receiver<()>) {
        let identity = self.config.identity.as_str();
        let grace = self.config.grace;
        let settle = grace / 2;
        let mut manager = Arc::new(first);
        let mut engine = drive(manager.clone(), Duration::ZERO);
        let mut claims = false;
        let mut retry = Duration::ZERO;
        let mut seen = Observed::default();
        let mut listed = false;
        let selector = format!("metadata.name={}", self.config.name);
        let mut events = watcher(
            self.api.clone(),
            watcher::Config::default().fields(&selector),
        )
        .default_backoff()
        .boxed();
        let mut watching = true;

        loop {
            let now = Instant::now();
            seen.lapse(now);
            match seen.verdict(claims, settle, now) {
                Ok(()) => self.shared.publish(identity, true, ""),
                Err(why) => self.shared.publish(identity, false, why),
            }
            let wake = seen.wake(claims, settle, now);
            let mut freed = false;
            tokio::select! {
                signal = &mut stop => {
                    if signal.is_err() {
                        // The Leadership went away without resigning.
                        return;
                    }
                    break;
                }
                step = &mut engine => match step {
                    Step::Changed(Ok(holds)) => {
                        claims = holds;
                        retry = Duration::ZERO;
                        engine = drive(manager.clone(), retry);
                    }
                    Step::Changed(Err(e)) => {
                        tracing::warn!(identity, error = %e, "lease manager failed; retrying");
                        retry = (retry * 2).clamp(Duration::from_millis(250), self.config.duration);
                        engine = if matches!(e, LeaseManagerError::NonexistentLease(_)) {
                            self.rebuild(retry)
                        } else {
                            drive(manager.clone(), retry)
                        };
                    }
                    Step::Rebuilt(Ok(fresh)) => {
                        manager = fresh;
                        claims = false;
                        engine = drive(manager.clone(), Duration::ZERO);
                    }
                    Step::Rebuilt(Err(e)) => {
                        tracing::warn!(identity, error = %e, "lease manager rebuild failed");
                        retry = (retry * 2).clamp(Duration::from_millis(250), self.config.duration);
                        engine = drive(manager.clone(), retry);
                    }
                },
                event = events.next(), if watching => {
                    let (now, wall) = (Instant::now(), SystemTime::now());
                    match event {
                        Some(Ok(watcher::Event::Init)) => listed = false,
                        Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => {
                            listed = true;
                            freed = seen.see(&Sighting::of(&l), identity, grace, now, wall);
                        }
                        Some(Ok(watcher::Event::InitDone)) if !listed => {
                            freed = seen.see(&Sighting::gone(), identity, grace, now, wall);
                        }
                        Some(Ok(watcher::Event::Delete(_))) => {
                            freed = seen.see(&Sighting::gone(), identity, grace, now, wall);
                        }
                        Some(Ok(watcher::Event::InitDone)) => {}
                        Some(Err(e)) => {
                            tracing::debug!(identity, error = %e, "lease watch interrupted");
                        }
                        None => {
                            // Without sightings no renewal is confirmed, so
                            // this replica stays a follower: safe, and loud.
                            tracing::warn!(identity, "lease watch ended");
                            watching = false;
                        }
                    }
                }
                _ = sleep_until(wake), if wake.is_some() => {}
            }
            if freed {
                engine = self.rebuild(Duration::ZERO);
            }
        }

        self.shared.publish(identity, false, "resigned");
        let release = seen.mine(Instant::now());
        drop(engine);
        // Release is a blind patch: only while our own renewal is confirmed,
        // so a replica that was cut off cannot free its successor's Lease.
        if release {
            match tokio::time::timeout(grace, manager.release()).await {
                Ok(Ok(())) => tracing::info!(identity, "lease released"),
                Ok(Err(e)) => tracing::warn!(identity, error = %e, "lease release failed"),
                Err(_) => tracing::warn!(identity, "lease release timed out"),
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(2);
    const SETTLE: Duration = Duration::from_secs(1);

    fn sighting(holder: Option<&str>, age: Duration, wall: SystemTime) -> Sighting {
        Sighting {
            holder: holder.map(str::to_owned),
            renewed: Some(wall - age),
            duration_secs: Some(10),
        }
    }

    #[test]
    fn holder_identities_split_into_name_and_address() {
        assert_eq!(
            parse_holder("lockstep-7d9-abc@10.1.2.3:8080"),
            Some(("lockstep-7d9-abc", "10.1.2.3:8080".parse().unwrap()))
        );
        assert_eq!(
            parse_holder("p@[fd00::1]:8080"),
            Some(("p", "[fd00::1]:8080".parse().unwrap()))
        );
        let addr: SocketAddr = "[fd00::1]:8080".parse().unwrap();
        assert_eq!(parse_holder(&identity("p", addr)), Some(("p", addr)));
        for bad in [
            "",
            "@",
            "pod",
            "pod@",
            "@10.1.2.3:8080",
            "pod@10.1.2.3",
            "pod@10.1.2.3:99999",
            "pod@host.example:8080",
            "pod@fd00::1:8080",
            "pod@10.1.2.3:8080@x",
            "ünïcödé@@",
        ] {
            assert_eq!(parse_holder(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn config_is_checked_before_kube_lease_manager_can_panic() {
        let good = LeaseConfig {
            identity: "a@10.0.0.1:8080".into(),
            ..LeaseConfig::default()
        };
        assert_eq!(good.seconds().unwrap(), (15, 5));
        for bad in [
            LeaseConfig {
                identity: String::new(),
                ..good.clone()
            },
            LeaseConfig {
                grace: Duration::ZERO,
                ..good.clone()
            },
            LeaseConfig {
                grace: good.duration,
                ..good.clone()
            },
            LeaseConfig {
                duration: Duration::from_millis(15_500),
                ..good.clone()
            },
            LeaseConfig {
                duration: Duration::from_secs(u64::from(u32::MAX)),
                ..good.clone()
            },
        ] {
            assert!(
                matches!(bad.seconds(), Err(LeaseError::Config(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_renewal_counts_until_half_the_grace_before_expiry() {
        let now = SystemTime::now();
        let at = |age| confirmed_for(now - Duration::from_secs(age), 10, GRACE, now);
        assert_eq!(at(0), Some(Duration::from_secs(9)));
        assert_eq!(at(8), Some(Duration::from_secs(1)));
        assert_eq!(at(9), None, "at the stand-down point");
        assert_eq!(at(30), None);
        assert_eq!(confirmed_for(now, -1, GRACE, now), None);
    }

    #[test]
    fn a_won_lease_is_reported_only_after_it_settles() {
        let (t0, wall) = (Instant::now(), SystemTime::now());
        let mut o = Observed::default();
        assert!(!o.see(
            &sighting(Some("me"), Duration::ZERO, wall),
            "me",
            GRACE,
            t0,
            wall
        ));
        assert!(o.verdict(true, SETTLE, t0).is_err());
        assert_eq!(o.wake(true, SETTLE, t0), Some(t0 + SETTLE));
        assert_eq!(o.verdict(true, SETTLE, t0 + SETTLE), Ok(()));
        assert!(
            o.verdict(false, SETTLE, t0 + SETTLE).is_err(),
            "the manager's word is needed too"
        );
    }

    #[test]
    fn an_unconfirmed_renewal_stands_down_by_the_clock_alone() {
        let (t0, wall) = (Instant::now(), SystemTime::now());
        let mut o = Observed::default();
        o.see(
            &sighting(Some("me"), Duration::ZERO, wall),
            "me",
            GRACE,
            t0,
            wall,
        );
        let deadline = t0 + Duration::from_secs(9);
        assert_eq!(o.wake(true, SETTLE, t0 + SETTLE), Some(deadline));
        assert_eq!(o.verdict(true, SETTLE, deadline - SETTLE), Ok(()));
        o.lapse(deadline);
        assert!(o.verdict(true, SETTLE, deadline).is_err());
        assert_eq!(o.wake(true, SETTLE, deadline), None);

        // A renewal seen later starts a new settling period.
        let later = deadline + Duration::from_secs(1);
        let wall_later = wall + Duration::from_secs(10);
        o.see(
            &sighting(Some("me"), Duration::ZERO, wall_later),
            "me",
            GRACE,
            later,
            wall_later,
        );
        assert!(o.verdict(true, SETTLE, later).is_err());
        assert_eq!(o.verdict(true, SETTLE, later + SETTLE), Ok(()));
    }

    #[test]
    fn a_renewal_that_arrives_stale_confirms_nothing() {
        let (t0, wall) = (Instant::now(), SystemTime::now());
        let mut o = Observed::default();
        o.see(
            &sighting(Some("me"), Duration::from_secs(9), wall),
            "me",
            GRACE,
            t0,
            wall,
        );
        assert!(o.verdict(true, SETTLE, t0 + SETTLE).is_err());
        assert_eq!(o.wake(true, SETTLE, t0), None);
    }

    #[test]
    fn another_holder_or_a_release_ends_leadership_at_once() {
        let (t0, wall) = (Instant::now(), SystemTime::now());
        let mut o = Observed::default();
        o.see(
            &sighting(Some("me"), Duration::ZERO, wall),
            "me",
            GRACE,
            t0,
            wall,
        );
        let t1 = t0 + SETTLE;
        assert_eq!(o.verdict(true, SETTLE, t1), Ok(()));
        assert!(!o.see(
            &sighting(Some("other"), Duration::ZERO, wall),
            "me",
            GRACE,
            t1,
            wall
        ));
        assert!(o.verdict(true, SETTLE, t1).is_err());

        o.see(
            &sighting(Some("me"), Duration::ZERO, wall),
            "me",
            GRACE,
            t1,
            wall,
        );
        assert!(
            o.see(&sighting(None, Duration::ZERO, wall), "me", GRACE, t1, wall),
            "a freed Lease is reported"
        );
        assert_eq!(
            o.verdict(true, SETTLE, t1 + SETTLE),
            Err("the Lease was released")
        );
    }

    #[test]
    fn only_a_lease_freed_after_being_held_is_news() {
        let (t0, wall) = (Instant::now(), SystemTime::now());
        let mut o = Observed::default();
        assert!(
            !o.see(&Sighting::gone(), "me", GRACE, t0, wall),
            "first sighting"
        );
        assert!(!o.see(&sighting(None, Duration::ZERO, wall), "me", GRACE, t0, wall));
        o.see(
            &sighting(Some("x"), Duration::ZERO, wall),
            "me",
            GRACE,
            t0,
            wall,
        );
        assert!(o.see(&Sighting::gone(), "me", GRACE, t0, wall), "deleted");
    }

    #[test]
    fn always_leads_until_dropped() {
        let l = Leadership::always();
        let rx = l.subscribe();
        assert!(l.is_leader());
        assert!(*rx.borrow());
        drop(l);
        assert!(!*rx.borrow());
    }
}
