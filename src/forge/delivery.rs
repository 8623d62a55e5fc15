//! Getting statuses onto a host that is slow, rate-limited or down.
//!
//! - Read before write: a status equal to the newest one already under its
//!   context is not posted again (GitHub keeps at most 1,000 per context and
//!   commit; a flapping reconciler would exhaust them).
//! - Retries with exponential backoff and full jitter on 5xx, timeouts,
//!   429 and rate-limited 403s, waiting at least as long as the host asks
//!   (`Retry-After`, `x-ratelimit-reset`).
//! - A bounded queue that keeps only the newest status per (commit,
//!   context): an outage delays statuses, it never reorders them, and the
//!   newest one is never the one dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, Notify};

use super::{Forge, ForgeError, Posted, State, Status, shorten};
use crate::escape::escape;

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 6,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `n` (1-based retry count): full jitter over an
    /// exponential ceiling, but never less than what the host asked for.
    pub fn delay(&self, n: u32, asked: Option<Duration>) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1)))
            .min(self.cap);
        let jittered = ceiling.mul_f64(fastrand::f64());
        match asked {
            Some(a) => a.max(jittered),
            None => jittered,
        }
    }
}

/// What a delivery did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Posted,
    /// The same status was already there.
    AlreadyThere,
    /// The commit's newest status in this context is already success, and
    /// this one is pending: a success never goes back to pending (a restart
    /// judging again). A failure is still posted: it is what a person must
    /// see. (A pull request's verdict goes under a context of its own,
    /// `lockstep/<cluster>/review`, so a fast-forward merge that brings the
    /// reviewed commit to the branch starts the branch's own status at
    /// pending.)
    Settled,
}

/// Fits a status into the host's limits and onto one line: control and
/// bidi characters from Git (a file name, a release) are escaped
/// ([`crate::escape`]) before the length is counted. Every status passes
/// here on its way to a host.
pub fn fit<F: Forge>(forge: &F, status: &Status) -> Status {
    let limits = forge.limits();
    Status {
        state: status.state,
        context: super::Context::from_text(escape(&status.context)).fit(limits.context),
        description: shorten(&escape(&status.description), limits.description),
        target_url: status.target_url.clone(),
    }
}

fn newest_for<'a>(posted: &'a [Posted], context: &str) -> Option<&'a Posted> {
    let mut matching = posted.iter().filter(|p| p.context == context);
    let first = matching.next()?;
    // Hosts disagree on order; ids, where present, do not lie.
    Some(matching.fold(first, |best, p| match (best.id, p.id) {
        (Some(b), Some(i)) if i > b => p,
        _ => best,
    }))
}

async fn retry<T, F, Fut>(policy: &RetryPolicy, mut op: F) -> Result<T, ForgeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ForgeError>>,
{
    let mut n = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.retryable() && n + 1 < policy.attempts => {
                n += 1;
                let wait = policy.delay(n, e.retry_after());
                tracing::warn!(error = %e, attempt = n, wait_ms = wait.as_millis() as u64, "status delivery failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Posts `status` on `sha` unless the same status is already there.
pub async fn deliver<F: Forge>(
    forge: &F,
    policy: &RetryPolicy,
    sha: &str,
    status: &Status,
) -> Result<Outcome, ForgeError> {
    let status = fit(forge, status);
    // Read before every attempt, not once: a retry waits up to minutes, and
    // meanwhile another writer (the new leader, a check in CI) may have
    // settled the commit; a late pending must not land on its success.
    retry(policy, || async {
        let existing = forge.statuses(sha).await?;
        if let Some(p) = newest_for(&existing, &status.context) {
            if p.state == forge.state_name(status.state)
                && p.description == status.description
                && (!forge.keeps_target_url() || p.target_url == status.target_url)
            {
                return Ok(Outcome::AlreadyThere);
            }
            if p.state == forge.state_name(State::Success)
                && status.state == State::Pending
                && settles(&status.context)
            {
                return Ok(Outcome::Settled);
            }
        }
        forge.post(sha, &status).await?;
        Ok(Outcome::Posted)
    })
    .await
}

/// Whether statuses in `context` settle once: a commit's verdict and an
/// object's hop on it do; a plan's progress (`lockstep/<cluster>/plan/<name>`,
/// on the commit that last changed the plan) follows the fleet, and moves on
/// when objects join it.
pub fn settles(context: &str) -> bool {
    let parts: Vec<&str> = context.split('/').collect();
    !(parts.len() == 4 && parts[2] == "plan")
}

/// A bounded queue of statuses waiting for delivery, newest per (commit,
/// context). Cloning shares the queue.
#[derive(Clone)]
pub struct StatusQueue {
    inner: Arc<Mutex<QueueState>>,
    wake: Arc<Notify>,
    capacity: usize,
}

#[derive(Default)]
struct QueueState {
    order: VecDeque<(String, String)>,
    pending: HashMap<(String, String), Status>,
    dropped: u64,
    /// What left the queue without reaching the host, for the daemon to
    /// take back ([`StatusQueue::take_lost`]): a status is never silently
    /// gone while the daemon believes it was said.
    lost: Vec<Lost>,
    /// Counts [`StatusQueue::clear`]s: a status taken out before a clear
    /// (in flight when the lease was lost) is neither put back nor handed
    /// back after it, or a stale one would be said over the new leader's.
    epoch: u64,
    /// More was lost between two [`StatusQueue::take_lost`]s than `lost`
    /// holds: the daemon cannot tell which, and says everything again.
    overflowed: bool,
    /// The status a drain took and has not settled yet: a drain dropped
    /// mid-delivery (leadership lost for a moment, shutdown) leaves it
    /// here, and [`StatusQueue::restore_in_flight`] puts it back.
    in_flight: Option<(String, Status, u64)>,
}

/// What [`StatusQueue::take_lost`] hands back.
#[derive(Debug, Default)]
pub struct TakenBack {
    pub lost: Vec<Lost>,
    /// Some lost status is not in `lost` (more were lost than the queue
    /// holds): every status is to be said again, not only those.
    pub overflowed: bool,
}

/// A status that left the queue without reaching the host.
#[derive(Clone, Debug, PartialEq)]
pub struct Lost {
    pub sha: String,
    pub status: Status,
    /// Pushed out by newer statuses while the host was down (the queue was
    /// full): to be queued again as it is. Otherwise the host refused it:
    /// to be said again only when the state says it anew.
    pub evicted: bool,
}

impl QueueState {
    fn lose(&mut self, sha: String, status: Status, evicted: bool, capacity: usize) {
        if self.lost.len() >= capacity {
            self.overflowed = true;
            return;
        }
        self.lost.push(Lost {
            sha,
            status,
            evicted,
        });
    }
}

impl StatusQueue {
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(QueueState::default())),
            wake: Arc::new(Notify::new()),
            capacity: capacity.max(1),
        }
    }

    /// Queues a status; a newer status for the same commit and context
    /// replaces the older one in place. When full, the oldest entry goes.
    pub async fn push(&self, sha: &str, status: Status) {
        let key = (sha.to_owned(), status.context.clone());
        let mut q = self.inner.lock().await;
        if q.pending.insert(key.clone(), status).is_none() {
            q.order.push_back(key);
            while q.order.len() > self.capacity {
                if let Some(old) = q.order.pop_front() {
                    if let Some(status) = q.pending.remove(&old) {
                        q.lose(old.0, status, true, self.capacity);
                    }
                    q.dropped += 1;
                }
            }
        }
        drop(q);
        self.wake.notify_one();
    }

    /// Empties the queue: what is queued is no longer this process's to
    /// say (it lost the lease; the new leader says what holds now).
    pub async fn clear(&self) {
        let mut q = self.inner.lock().await;
        q.order.clear();
        q.pending.clear();
        q.lost.clear();
        q.overflowed = false;
        q.in_flight = None;
        q.epoch += 1;
    }

    pub async fn len(&self) -> usize {
        self.inner.lock().await.order.len()
    }

    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }

    /// Resolves when something was pushed since the last wait (a push
    /// before the wait counts).
    pub async fn wait(&self) {
        self.wake.notified().await;
    }

    /// Entries evicted because the queue was full.
    pub async fn dropped(&self) -> u64 {
        self.inner.lock().await.dropped
    }

    /// What left the queue without reaching the host since the last call:
    /// at most as many as the queue holds, and whether more were lost.
    pub async fn take_lost(&self) -> TakenBack {
        let mut q = self.inner.lock().await;
        TakenBack {
            lost: std::mem::take(&mut q.lost),
            overflowed: std::mem::take(&mut q.overflowed),
        }
    }

    async fn pop(&self) -> Option<(String, Status, u64)> {
        let mut q = self.inner.lock().await;
        let key = q.order.pop_front()?;
        let status = q.pending.remove(&key)?;
        let epoch = q.epoch;
        q.in_flight = Some((key.0.clone(), status.clone(), epoch));
        Some((key.0, status, epoch))
    }

    /// Puts back the status a dropped drain had in flight (unless the
    /// queue was cleared since, or a newer one for its key is queued): a
    /// drain can be dropped at any await, and its status must not vanish
    /// while the daemon counts it as said.
    pub async fn restore_in_flight(&self) {
        let taken = self.inner.lock().await.in_flight.take();
        if let Some((sha, status, epoch)) = taken {
            self.requeue(sha, status, epoch).await;
        }
    }

    /// Puts back a status that could not be delivered, unless a newer one
    /// for the same key arrived meanwhile. It goes back to the front: an
    /// outage delays statuses, it never reorders them. (What fails the same
    /// way on every try, an answer that does not parse, is not put back.)
    async fn requeue(&self, sha: String, status: Status, epoch: u64) {
        let key = (sha, status.context.clone());
        let mut q = self.inner.lock().await;
        if q.epoch != epoch || q.pending.contains_key(&key) {
            return;
        }
        if q.order.len() < self.capacity {
            q.pending.insert(key.clone(), status);
            q.order.push_front(key);
        } else {
            q.dropped += 1;
            q.lose(key.0, status, true, self.capacity);
        }
    }

    /// Delivers until the queue is empty. A status that fails with a
    /// retryable error after the policy's attempts goes back to the queue
    /// and the drain stops (the host is down: try later); one the host
    /// rejects outright is logged and handed back ([`Self::take_lost`]).
    pub async fn drain<F: Forge>(&self, forge: &F, policy: &RetryPolicy) -> DrainReport {
        let mut report = DrainReport::default();
        while let Some((sha, status, epoch)) = self.pop().await {
            let delivered = deliver(forge, policy, &sha, &status).await;
            self.inner.lock().await.in_flight = None;
            match delivered {
                Ok(Outcome::Posted) => report.posted += 1,
                Ok(Outcome::AlreadyThere) => report.already_there += 1,
                Ok(Outcome::Settled) => {
                    tracing::info!(
                        context = %crate::escape::Escaped(&status.context),
                        sha = %sha,
                        state = ?status.state,
                        description = %crate::escape::Escaped(&status.description),
                        "the commit's status is already success; pending is not posted over it"
                    );
                    report.already_there += 1;
                }
                Err(e) if e.kept() => {
                    tracing::warn!(error = %e, context = %status.context, sha = %sha, "host unavailable; status kept for later");
                    self.requeue(sha, status, epoch).await;
                    report.deferred = true;
                    break;
                }
                Err(e) => {
                    tracing::error!(error = %e, context = %status.context, sha = %sha, "host rejected a status; said again after a pause");
                    report.rejected.push(e.to_string());
                    let mut q = self.inner.lock().await;
                    if q.epoch == epoch {
                        q.lose(sha, status, false, self.capacity);
                    }
                }
            }
        }
        report
    }

    /// Runs forever: drains whenever something is queued, and retries a
    /// deferred drain after `pause`.
    pub async fn run<F: Forge>(self, forge: F, policy: RetryPolicy, pause: Duration) {
        loop {
            let report = self.drain(&forge, &policy).await;
            if report.deferred {
                tokio::time::sleep(pause).await;
            } else if self.is_empty().await {
                self.wake.notified().await;
            }
        }
    }
}

#[derive(Debug, Default)]
pub struct DrainReport {
    pub posted: usize,
    pub already_there: usize,
    pub deferred: bool,
    pub rejected: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::{Limits, State, describe};
    use crate::gate::{ObjectVerdict, Reason, Transition, Verdict};
    use crate::history::CommitReport;
    use crate::kind::Kind;

    struct TestHost(Limits);

    impl Forge for TestHost {
        fn host(&self) -> &'static str {
            "test"
        }
        fn limits(&self) -> Limits {
            self.0
        }
        fn state_name(&self, state: State) -> &'static str {
            state.as_str()
        }
        async fn statuses(&self, _: &str) -> Result<Vec<Posted>, ForgeError> {
            Ok(Vec::new())
        }
        async fn post(&self, _: &str, _: &Status) -> Result<(), ForgeError> {
            Ok(())
        }
    }

    fn refused(file: &str, to: &str, reason: Reason) -> CommitReport {
        CommitReport {
            sha: "a".repeat(40),
            summary: "hostile".into(),
            verdict: Verdict::Refused,
            objects: vec![ObjectVerdict {
                kind: Some(Kind::Nova),
                namespace: Some("compute".into()),
                name: (reason != Reason::ManifestInvalid).then(|| "nova".into()),
                file: file.into(),
                line: 7,
                projected_by: None,
                from: Some("2026.1".into()),
                to: Some(to.into()),
                from_image: None,
                to_image: None,
                transition: Transition::Invalid,
                verdict: Verdict::Refused,
                reason: Some(reason),
                message: String::new(),
            }],
            skipped: Vec::new(),
            files_changed: 1,
        }
    }

    #[test]
    fn descriptions_from_git_are_escaped_onto_one_line_before_they_are_fitted() {
        let host = TestHost(Limits {
            description: 140,
            context: 100,
        });
        let c = refused(
            "standalone/nova.yaml",
            "2026.1\x1b[2J\nlockstep/prod: success — forged",
            Reason::VersionParseError,
        );
        let raw = describe::commit_status("prod\u{202e}", &c, None);
        assert!(
            raw.description.contains('\x1b'),
            "describe keeps Git's text; the sink escapes it"
        );
        let posted = fit(&host, &raw);
        assert_eq!(
            posted.description,
            "refused: nova: release 2026.1\\x1b[2J\\nlockstep/prod: success — forged does not parse (VersionParseError)"
        );
        assert_eq!(posted.context, "lockstep/prod\\u{202e}");

        // A file name is escaped before the length is counted.
        let c = refused(
            "standalone/\r\u{202e}\x1b[31mnova.yaml",
            "2026.1",
            Reason::ManifestInvalid,
        );
        let short = TestHost(Limits {
            description: 40,
            context: 100,
        });
        let posted = fit(&short, &describe::commit_status("prod", &c, None));
        assert_eq!(posted.description.chars().count(), 40);
        assert!(
            posted
                .description
                .starts_with("refused: standalone/\\r\\u{202e}\\x1b[31m"),
            "{}",
            posted.description
        );
        assert!(!posted.description.chars().any(crate::escape::is_escaped));
    }

    #[test]
    fn delay_grows_is_capped_and_honours_the_host() {
        let p = RetryPolicy {
            attempts: 10,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
        };
        for n in 1..10 {
            let d = p.delay(n, None);
            assert!(d <= Duration::from_secs(1), "{n}: {d:?}");
            let ceiling = Duration::from_millis(100 * 2u64.pow(n - 1)).min(Duration::from_secs(1));
            assert!(d <= ceiling);
        }
        assert!(p.delay(1, Some(Duration::from_secs(5))) >= Duration::from_secs(5));
    }

    /// A host that answers posts from a script, then with success, and
    /// keeps what it took.
    struct Scripted {
        answers: std::sync::Mutex<VecDeque<u16>>,
        took: std::sync::Mutex<Vec<(String, String)>>,
    }

    impl Forge for Scripted {
        fn host(&self) -> &'static str {
            "scripted"
        }
        fn limits(&self) -> Limits {
            Limits {
                description: 140,
                context: 100,
            }
        }
        fn state_name(&self, state: State) -> &'static str {
            state.as_str()
        }
        async fn statuses(&self, _: &str) -> Result<Vec<Posted>, ForgeError> {
            Ok(Vec::new())
        }
        async fn post(&self, sha: &str, s: &Status) -> Result<(), ForgeError> {
            let answer = self.answers.lock().unwrap().pop_front();
            match answer {
                None | Some(201) => {
                    self.took
                        .lock()
                        .unwrap()
                        .push((sha.to_owned(), s.context.clone()));
                    Ok(())
                }
                Some(status) => Err(ForgeError::Http {
                    host: "scripted",
                    what: "post".into(),
                    status,
                    body: String::new(),
                    retry_after: None,
                    retryable: status >= 500,
                }),
            }
        }
    }

    /// What cannot be delivered is never silently gone: a refused token
    /// (401) keeps the status queued, in its place, for a later drain;
    /// a status the host refuses outright, or one pushed out of a full
    /// queue, is handed back to the daemon (`take_lost`), which says it
    /// again.
    #[tokio::test]
    async fn statuses_that_do_not_reach_the_host_are_kept_or_handed_back() {
        let host = Scripted {
            answers: std::sync::Mutex::new([401, 422].into()),
            took: Default::default(),
        };
        let policy = RetryPolicy {
            attempts: 1,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(1),
        };
        let status = |context: &str| Status {
            state: State::Success,
            context: context.into(),
            description: "complete".into(),
            target_url: None,
        };
        let q = StatusQueue::new(2);
        q.push("a", status("one")).await;
        q.push("b", status("two")).await;
        let r = q.drain(&host, &policy).await;
        assert!(r.deferred && r.rejected.is_empty(), "{r:?}");
        assert_eq!(q.len().await, 2, "a refused token drops nothing");
        assert!(q.take_lost().await.lost.is_empty());
        // The kept status is tried first again (in order); the host now
        // refuses it outright, and takes the next.
        let r = q.drain(&host, &policy).await;
        assert!(
            !r.deferred && r.rejected.len() == 1 && r.posted == 1,
            "{r:?}"
        );
        assert_eq!(
            *host.took.lock().unwrap(),
            vec![("b".to_owned(), "two".to_owned())]
        );
        let lost = q.take_lost().await.lost;
        assert_eq!(lost.len(), 1);
        assert_eq!((lost[0].sha.as_str(), lost[0].evicted), ("a", false));
        assert!(q.take_lost().await.lost.is_empty(), "handed back once");
        // Pushed out of a full queue: handed back to be queued again.
        for (sha, c) in [("c", "three"), ("d", "four"), ("e", "five")] {
            q.push(sha, status(c)).await;
        }
        let lost = q.take_lost().await.lost;
        assert_eq!(lost.len(), 1);
        assert_eq!((lost[0].sha.as_str(), lost[0].evicted), ("c", true));
        assert_eq!(q.dropped().await, 1);
    }

    /// A host where the lease is lost while a status is in flight: the
    /// queue is cleared (`StatusQueue::clear`) before the post fails.
    struct LostLease {
        queue: StatusQueue,
        status: u16,
    }

    impl Forge for LostLease {
        fn host(&self) -> &'static str {
            "lost-lease"
        }
        fn limits(&self) -> Limits {
            Limits {
                description: 140,
                context: 100,
            }
        }
        fn state_name(&self, state: State) -> &'static str {
            state.as_str()
        }
        async fn statuses(&self, _: &str) -> Result<Vec<Posted>, ForgeError> {
            Ok(Vec::new())
        }
        async fn post(&self, _: &str, _: &Status) -> Result<(), ForgeError> {
            self.queue.clear().await;
            Err(ForgeError::Http {
                host: "lost-lease",
                what: "post".into(),
                status: self.status,
                body: String::new(),
                retry_after: None,
                retryable: self.status >= 500,
            })
        }
    }

    /// A status in flight when the lease is lost is the old leader's no
    /// more: it is neither put back in the cleared queue (where it would be
    /// said over the new leader's) nor handed back to be said again.
    #[tokio::test]
    async fn a_status_in_flight_when_the_queue_is_cleared_is_not_put_back() {
        let policy = RetryPolicy {
            attempts: 1,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(1),
        };
        for status in [503, 422] {
            let q = StatusQueue::new(4);
            q.push(
                "a",
                Status {
                    state: State::Pending,
                    context: "lockstep/prod".into(),
                    description: "upgrading".into(),
                    target_url: None,
                },
            )
            .await;
            let host = LostLease {
                queue: q.clone(),
                status,
            };
            q.drain(&host, &policy).await;
            assert!(q.is_empty().await, "{status}: put back after the clear");
            let taken = q.take_lost().await;
            assert!(
                taken.lost.is_empty() && !taken.overflowed,
                "{status}: handed back after the clear: {taken:?}"
            );
        }
    }

    /// A host that never answers a post.
    struct Silent;

    impl Forge for Silent {
        fn host(&self) -> &'static str {
            "silent"
        }
        fn limits(&self) -> Limits {
            Limits {
                description: 140,
                context: 100,
            }
        }
        fn state_name(&self, state: State) -> &'static str {
            state.as_str()
        }
        async fn statuses(&self, _: &str) -> Result<Vec<Posted>, ForgeError> {
            Ok(Vec::new())
        }
        async fn post(&self, _: &str, _: &Status) -> Result<(), ForgeError> {
            std::future::pending().await
        }
    }

    /// A drain dropped mid-delivery (leadership lost for a moment, a
    /// shutdown) leaves its status to be put back, not gone while the
    /// daemon counts it as said; after a clear, nothing comes back.
    #[tokio::test]
    async fn a_drain_dropped_mid_delivery_leaves_its_status_to_be_put_back() {
        let status = Status {
            state: State::Success,
            context: "lockstep/prod".into(),
            description: "applied".into(),
            target_url: None,
        };
        for cleared in [false, true] {
            let q = StatusQueue::new(4);
            q.push("a", status.clone()).await;
            let dropped = tokio::time::timeout(
                Duration::from_millis(50),
                q.drain(&Silent, &RetryPolicy::default()),
            )
            .await;
            assert!(dropped.is_err(), "the silent host answered");
            assert!(q.is_empty().await);
            if cleared {
                q.clear().await;
            }
            q.restore_in_flight().await;
            assert_eq!(q.len().await, usize::from(!cleared), "cleared: {cleared}");
        }
    }

    /// More lost between two takes than the queue holds: none is silently
    /// gone, the daemon is told to say everything again.
    #[tokio::test]
    async fn losing_more_than_the_queue_holds_is_said() {
        let q = StatusQueue::new(1);
        for sha in ["a", "b", "c", "d"] {
            q.push(
                sha,
                Status {
                    state: State::Success,
                    context: "c".into(),
                    description: "done".into(),
                    target_url: None,
                },
            )
            .await;
        }
        let taken = q.take_lost().await;
        assert_eq!(taken.lost.len(), 1);
        assert!(taken.overflowed);
        let taken = q.take_lost().await;
        assert!(taken.lost.is_empty() && !taken.overflowed, "told once");
    }

    /// An answer that does not parse is the same on every try: it is not
    /// retried in place, and it does not hold up the queue.
    #[test]
    fn an_answer_that_does_not_parse_is_not_worth_another_try() {
        let e = ForgeError::Answer {
            host: "gitea",
            what: "list statuses".into(),
            message: "unexpected answer".into(),
        };
        assert!(!e.retryable() && !e.kept());
        let refused = |status| ForgeError::Http {
            host: "github",
            what: "post".into(),
            status,
            body: String::new(),
            retry_after: None,
            retryable: false,
        };
        assert!(refused(401).kept() && refused(403).kept());
        assert!(!refused(401).retryable(), "not retried in place");
        assert!(!refused(404).kept() && !refused(422).kept());
    }

    #[test]
    fn newest_by_id() {
        let p = |id, d: &str| Posted {
            state: "success".into(),
            context: "c".into(),
            description: d.into(),
            target_url: None,
            id: Some(id),
        };
        let list = vec![p(3, "old"), p(9, "new"), p(5, "mid")];
        assert_eq!(newest_for(&list, "c").unwrap().description, "new");
        assert!(newest_for(&list, "other").is_none());
    }
}
