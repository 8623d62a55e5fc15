//! Leader election against a real kube-apiserver (tests/peers/kube): two and
//! then three candidates on one Lease, through a graceful handover, a crash
//! and a frozen API server, with both leadership flags sampled every 50 ms
//! throughout so that any overlap fails the test.
//!
//! Lease 3 s, grace 1 s: a healthy leader renews 2 s after its last renewal
//! and stands down 2.5 s after it if that renewal is not seen.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};
use lockstep::cluster::kube::KubeCluster;
use lockstep::lease::{Leadership, LeaseConfig, parse_holder};
use tokio::sync::watch;

use common::ApiServer;

const NS: &str = "lockstep";
const NAME: &str = "lockstep";
const DURATION: Duration = Duration::from_secs(3);
const GRACE: Duration = Duration::from_secs(1);

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig {
        namespace: NS.into(),
        name: NAME.into(),
        identity: identity.into(),
        duration: DURATION,
        grace: GRACE,
    }
}

async fn candidate(client: &Client, identity: &str, sampler: &Sampler) -> Leadership {
    let l = Leadership::start(client.clone(), config(identity))
        .await
        .expect("joins the election");
    sampler.watch(identity, l.subscribe());
    l
}

/// Polls `f` every 20 ms; the time it took to become true, or `None`.
async fn within(limit: Duration, f: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f().then(|| start.elapsed())
}

/// Waits for `holder` to renew, so that at least `left` of its term remains;
/// returns when the Lease would expire by `renewTime + leaseDurationSeconds`.
async fn fresh_term(api: &Api<Lease>, holder: &str, left: Duration) -> SystemTime {
    let start = Instant::now();
    loop {
        let spec = api.get(NAME).await.unwrap().spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(holder));
        let renewed = SystemTime::from(spec.renew_time.unwrap().0);
        let expires = renewed + Duration::from_secs(spec.lease_duration_seconds.unwrap() as u64);
        if expires
            .duration_since(SystemTime::now())
            .is_ok_and(|d| d >= left)
        {
            return expires;
        }
        assert!(
            start.elapsed() < DURATION * 2,
            "{holder} did not renew its Lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each candidate's identity and leadership flag.
type Flags = Arc<Mutex<Vec<(String, watch::Receiver<bool>)>>>;

/// Reads every candidate's flag every 50 ms, for the whole test.
struct Sampler {
    flags: Flags,
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Samples>,
}

#[derive(Debug, Default)]
struct Samples {
    total: usize,
    one_leader: usize,
    overlaps: Vec<(Duration, Vec<String>)>,
}

impl Sampler {
    fn start() -> Self {
        let flags = Flags::default();
        let done = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (flags, done) = (flags.clone(), done.clone());
            async move {
                let start = Instant::now();
                let mut s = Samples::default();
                let mut tick = tokio::time::interval(Duration::from_millis(50));
                while !done.load(Ordering::SeqCst) {
                    tick.tick().await;
                    let leaders: Vec<String> = flags
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|(_, rx)| *rx.borrow())
                        .map(|(id, _)| id.clone())
                        .collect();
                    s.total += 1;
                    match leaders.len() {
                        0 => {}
                        1 => s.one_leader += 1,
                        _ => s.overlaps.push((start.elapsed(), leaders)),
                    }
                }
                s
            }
        });
        Self { flags, done, task }
    }

    fn watch(&self, identity: &str, rx: watch::Receiver<bool>) {
        self.flags.lock().unwrap().push((identity.into(), rx));
    }

    async fn finish(self) -> Samples {
        self.done.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// SIGSTOPs the kube-apiserver: requests hang without an error, the worst
/// case for a leader. Continued when dropped, so stop.sh can stop it.
struct Frozen(String);

impl Frozen {
    fn api_server(server: &ApiServer) -> Self {
        let pid_file = server.kubeconfig().with_file_name("kube-apiserver.pid");
        let pid = std::fs::read_to_string(pid_file).unwrap().trim().to_owned();
        assert!(
            Command::new("kill")
                .args(["-STOP", &pid])
                .status()
                .unwrap()
                .success()
        );
        Self(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_through_handover_crash_and_a_frozen_api_server() {
    let server = ApiServer::start();
    let began = Instant::now();
    let client = KubeCluster::from_kubeconfig(&server.kubeconfig())
        .await
        .unwrap()
        .client()
        .clone();
    let body: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &body)
        .await
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let sampler = Sampler::start();

    // 1. Two candidates: exactly one leads, and both name it as the holder.
    let (id_a, id_b) = ("lockstep-a@127.0.0.1:18081", "lockstep-b@127.0.0.1:18082");
    let a = candidate(&client, id_a, &sampler).await;
    let b = candidate(&client, id_b, &sampler).await;
    let elected = within(Duration::from_secs(5), || a.is_leader() || b.is_leader()).await;
    let elected = elected.expect("someone is elected within 5 s");
    assert!(a.is_leader() != b.is_leader(), "exactly one leader");
    let (leader, follower, id_leader, id_follower) = if a.is_leader() {
        (a, b, id_a, id_b)
    } else {
        (b, a, id_b, id_a)
    };
    // Still the same one after a full renewal cycle.
    tokio::time::sleep(DURATION).await;
    assert!(
        leader.is_leader() && !follower.is_leader(),
        "leadership is stable"
    );
    assert_eq!(leader.holder().await.unwrap().as_deref(), Some(id_leader));
    assert_eq!(follower.holder().await.unwrap().as_deref(), Some(id_leader));
    let (_, addr) = parse_holder(id_leader).unwrap();
    assert_eq!(addr.port(), if id_leader == id_a { 18081 } else { 18082 });

    // 2. The leader resigns with 1.7 s of its term left, which is after the
    //    follower's kube-lease-manager re-read the Lease (it does so `grace`
    //    after each renewal, then sleeps until the term ends): only a
    //    follower watching the Lease sees the release before the term ends.
    let expires = fresh_term(&leases, id_leader, Duration::from_millis(2200)).await;
    let left = expires.duration_since(SystemTime::now()).unwrap();
    tokio::time::sleep(left.saturating_sub(Duration::from_millis(1700))).await;
    let resigned = Instant::now();
    let rx_leader = leader.subscribe();
    leader.resign().await;
    assert!(!*rx_leader.borrow(), "a resigned leader is not a leader");
    let handover = within(Duration::from_secs(3), || follower.is_leader()).await;
    let handover = handover.expect("the follower takes over after a resignation");
    assert!(
        SystemTime::now() < expires,
        "the handover waited for the old term to expire ({:?} after resigning)",
        resigned.elapsed()
    );
    assert_eq!(
        follower.holder().await.unwrap().as_deref(),
        Some(id_follower)
    );
    let (leader, id_leader) = (follower, id_follower);

    // 3. A third candidate joins; the leader crashes (dropped without
    //    releasing): no takeover while its term runs, then one soon after.
    let id_c = "lockstep-c@127.0.0.1:18083";
    let c = candidate(&client, id_c, &sampler).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!c.is_leader(), "a newcomer does not unseat a live leader");
    let expires = fresh_term(&leases, id_leader, Duration::from_millis(2200)).await;
    let crashed = Instant::now();
    let rx_leader = leader.subscribe();
    drop(leader);
    assert!(
        !*rx_leader.borrow(),
        "a dropped Leadership reports no leadership"
    );
    assert_eq!(
        c.holder().await.unwrap().as_deref(),
        Some(id_leader),
        "the crashed leader still holds the Lease"
    );
    while SystemTime::now() + Duration::from_millis(300) < expires {
        assert!(
            !c.is_leader(),
            "took over {:?} after the crash, before the Lease expired",
            crashed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let takeover = within(Duration::from_millis(2500), || c.is_leader()).await;
    let takeover = takeover.expect("the candidate takes over once the Lease expired");
    let takeover_after_expiry = SystemTime::now()
        .duration_since(expires)
        .unwrap_or_default();
    let crash_to_leader = crashed.elapsed();
    assert_eq!(c.holder().await.unwrap().as_deref(), Some(id_c));

    // 4. The API server freezes: requests hang, no error comes back. The
    //    leader stands down by its own clock before its term can expire.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(c.is_leader());
    let frozen = Frozen::api_server(&server);
    let stood_down = within(DURATION, || !c.is_leader()).await;
    let stood_down =
        stood_down.expect("a leader that cannot renew stands down within the lease duration");
    // Stand-down is due 2.5 s after the last renewal seen, which came
    // before the freeze; the Lease expires for others only at 3 s.
    assert!(
        stood_down <= Duration::from_millis(2750),
        "stood down only after {stood_down:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !c.is_leader(),
        "no leadership while the API server is frozen"
    );
    drop(frozen);
    let recovered = within(Duration::from_secs(10), || c.is_leader()).await;
    let recovered = recovered.expect("leadership comes back with the API server");

    let samples = sampler.finish().await;
    eprintln!(
        "elected in {elected:?}; handover after resign {handover:?}; \
         crash: leader again {crash_to_leader:?} after the crash ({takeover:?} of waiting at the end, \
         {takeover_after_expiry:?} after expiry); frozen: stood down after {stood_down:?}, \
         back {recovered:?} after thaw; {} samples, {} with one leader; \
         {:?} since the API server was up",
        samples.total,
        samples.one_leader,
        began.elapsed()
    );
    assert!(
        samples.overlaps.is_empty(),
        "two leaders at once: {:?}",
        samples.overlaps
    );
    assert!(
        samples.total >= 100,
        "the sampler ran ({} samples)",
        samples.total
    );
    assert!(
        samples.one_leader >= 50,
        "the sampler saw a leader ({} of {} samples)",
        samples.one_leader,
        samples.total
    );
    c.resign().await;
}
