//! Repairing forward: what lockstep does about a hop that stopped, as a pure
//! decision. Projected services have no abort path (the plane re-asserts
//! them), so the only ways out are forward: re-run a permanently failed
//! phase Job by deleting it (the operator never re-creates one itself,
//! `docs/operators.md` §6.1), or re-assert the accepted target on the
//! plane after an out-of-band edit parked a child (§6.3). A release is never
//! lowered. Standalone services are reported; `lockstep retry` does the
//! same repair by hand.
//!
//! The repairs already made (Job re-runs, and re-asserts of a parked
//! child's ControlPlane) count against one budget per hop. They are
//! recorded on the object itself, in lockstep's annotation
//! [`RECORD_ANNOTATION`] (a [`RepairRecord`]: target release, attempts
//! towards it, when the last was made), written by its own field manager
//! [`RECORD_MANAGER`] with a patch of that one annotation: lockstep's
//! server-side apply of the Git document (manager `lockstep`) never sends
//! it, so never removes it, and the operator's fields are not touched. A
//! restart reads the budget back from the object; a record that cannot be
//! read spends the budget (fail closed), it never refills it. Every repair
//! is also a Kubernetes Event (`RepairJobDeleted`, `RepairPlaneReasserted`)
//! for people to read;
//! nothing parses Events.

use std::time::Duration;

use crate::follow::Progress;
use crate::kind::Key;

#[derive(Clone, Debug)]
pub struct RepairPolicy {
    /// Job re-runs per hop before lockstep stops and reports.
    pub budget: u32,
    /// Wait before the first re-run; doubles each time.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RepairPolicy {
    fn default() -> Self {
        Self {
            budget: 3,
            backoff: Duration::from_secs(60),
            max_backoff: Duration::from_secs(15 * 60),
        }
    }
}

/// What has been done for this hop so far.
#[derive(Clone, Debug, Default)]
pub struct RepairHistory {
    pub retries: u32,
    pub last: Option<Duration>,
    /// The object's repair record could not be read: the budget counts as
    /// spent, and this says why (fail closed, never a refilled budget).
    pub unreadable: Option<String>,
}

impl RepairHistory {
    /// What the object's record (the raw annotation, if any) says was done
    /// towards `target`; an unreadable record spends `budget`. `now` stands
    /// for when the last re-run was made (the backoff starts again: a
    /// restart never shortens it).
    pub fn from_record(record: Option<&str>, target: &str, budget: u32, now: Duration) -> Self {
        match past_attempts(record, target) {
            Ok(retries) => Self {
                retries,
                last: (retries > 0).then_some(now),
                unreadable: None,
            },
            Err(why) => Self {
                retries: budget,
                last: Some(now),
                unreadable: Some(why),
            },
        }
    }
}

impl RepairHistory {
    /// Takes what the object's record says when it says more was done
    /// than this process knows of (another replica led and repaired
    /// meanwhile, or the record became unreadable): the count never goes
    /// down, and the backoff starts again from `record`'s `last` (now).
    pub fn catch_up(&mut self, record: RepairHistory) {
        if record.retries > self.retries || record.unreadable.is_some() {
            self.retries = self.retries.max(record.retries);
            self.last = record.last.or(self.last);
            self.unreadable = record.unreadable.or(self.unreadable.take());
        }
    }
}

/// The annotation holding lockstep's [`RepairRecord`] on an object.
pub const RECORD_ANNOTATION: &str = "lockstep.c5c3.io/repair";

/// The field manager that writes [`RECORD_ANNOTATION`]: not `lockstep`,
/// whose server-side apply of the Git document would otherwise own the
/// annotation and drop it on the next apply.
pub const RECORD_MANAGER: &str = "lockstep-repair";

/// lockstep's record of the forward repairs made on one object, for one
/// target release: `{"target":"2026.2","attempts":2,"last":"2026-12-01T10:00:00Z"}`.
/// A new target starts again at zero attempts.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepairRecord {
    /// The release (or tag) the hop repaired was heading to
    /// (`rollout::Target::follow_to`); the hop's image for a kind that
    /// tracks no release (a Horizon, a Keystone pinned by digest).
    pub target: String,
    pub attempts: u32,
    /// When the last re-run was made (RFC 3339, UTC).
    pub last: String,
}

impl RepairRecord {
    /// Reads an annotation's value; anything but a whole record is an error.
    pub fn parse(text: &str) -> Result<Self, String> {
        let r: Self = serde_json::from_str(text)
            .map_err(|e| format!("{RECORD_ANNOTATION} is not a repair record: {e}"))?;
        r.last.parse::<jiff::Timestamp>().map_err(|e| {
            format!(
                "{RECORD_ANNOTATION}: last is not a time: {}: {e}",
                crate::escape::escape(&r.last)
            )
        })?;
        Ok(r)
    }

    /// The annotation's value.
    pub fn to_json(&self) -> String {
        // `Value`'s Display is JSON, strings quoted and escaped.
        format!(
            r#"{{"target":{},"attempts":{},"last":{}}}"#,
            serde_json::Value::from(self.target.as_str()),
            self.attempts,
            serde_json::Value::from(self.last.as_str())
        )
    }
}

/// The re-runs already made towards `target`, from an object's record
/// (`None`: no annotation, nothing made). A record for another target is
/// an older hop's: zero. An unreadable record is an error, never zero.
pub fn past_attempts(record: Option<&str>, target: &str) -> Result<u32, String> {
    match record {
        None => Ok(0),
        Some(text) => {
            let r = RepairRecord::parse(text)?;
            Ok(if r.target == target { r.attempts } else { 0 })
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// Not yet: the backoff runs until then.
    WaitUntil(Duration),
    /// Delete the failed phase Job so the operator runs it again.
    DeleteJob {
        namespace: String,
        name: String,
        attempt: u32,
    },
    /// Apply the accepted target to the plane again (the `attempt`-th
    /// repair of this child's hop, counted like a Job's re-run).
    ReassertPlane {
        plane: String,
        attempt: u32,
    },
    /// Nothing lockstep may do: tell a person.
    Report(String),
}

/// The phase Job a failure reason names.
pub fn failed_job(reason: &str, object: &str) -> Option<String> {
    let suffix = match reason {
        "ExpandFailed" => "db-expand",
        "MigrateFailed" => "db-migrate",
        "ContractFailed" => "db-contract",
        "DBSyncFailed" => "db-sync",
        _ => return None,
    };
    Some(format!("{object}-{suffix}"))
}

/// Decides the next repair step for one object's hop.
pub fn plan(
    key: &Key,
    projected_by: Option<&str>,
    progress: &Progress,
    history: &RepairHistory,
    now: Duration,
    policy: &RepairPolicy,
) -> Action {
    let Progress::Failed { reason, message } = progress else {
        if let Progress::Stalled { .. } = progress {
            return Action::Report(format!(
                "{key}: {}; lockstep never goes backwards: look at the operator's events",
                progress.describe()
            ));
        }
        return Action::Nothing;
    };
    if let Some(job) = failed_job(reason, &key.name) {
        if projected_by.is_none() {
            return Action::Report(format!(
                "{key}: {reason}: {message}; run `lockstep retry {}/{}/{}` to re-run {job} once the cause is fixed",
                key.kind.as_str().to_lowercase(),
                key.namespace,
                key.name
            ));
        }
        if let Some(held) = budget(
            history,
            now,
            policy,
            |why| {
                format!(
                    "{key}: {reason}: lockstep's repair record cannot be read ({why}), so the retry budget counts as spent and {job} is not re-run; fix or remove the annotation {RECORD_ANNOTATION} once the cause is fixed: {message}"
                )
            },
            |n| {
                format!(
                    "{key}: {reason} again after {n} repairs of this hop (re-runs of its phase Jobs and re-asserts of its ControlPlane share one budget); the retry budget is spent and {job} is not re-run: {message}"
                )
            },
        ) {
            return held;
        }
        return Action::DeleteJob {
            namespace: key.namespace.clone(),
            name: job,
            attempt: history.retries + 1,
        };
    }
    match (reason.as_str(), projected_by) {
        // A child parked by an edit outside Git: its plane's accepted step
        // is applied again, within the budget and backoff of a Job's re-run
        // (a plane whose apply never clears the park, because something
        // keeps editing the child or its operator keeps refusing, was
        // applied every pass, for ever, and nobody was told).
        ("UpgradeTargetChanged" | "ImageReleaseMismatch", Some(plane)) => {
            if let Some(held) = budget(
                history,
                now,
                policy,
                |why| {
                    format!(
                        "{key}: {reason}: lockstep's repair record cannot be read ({why}), so the retry budget counts as spent and the ControlPlane {plane} is not applied again; fix or remove the annotation {RECORD_ANNOTATION} once the cause is fixed: {message}"
                    )
                },
                |n| {
                    format!(
                        "{key}: {reason} again after {n} repairs of this hop (re-asserts of its ControlPlane {plane} and re-runs of its phase Jobs share one budget); the retry budget is spent: something outside Git keeps this child off the plane's step (an edit, another tool): {message}"
                    )
                },
            ) {
                return held;
            }
            Action::ReassertPlane {
                plane: plane.to_owned(),
                attempt: history.retries + 1,
            }
        }
        _ => Action::Report(format!("{key}: {reason}: {message}")),
    }
}

/// What holds one more repair of this hop back, if anything: a record that
/// cannot be read or a spent budget (a report, `unreadable(why)` or
/// `spent(repairs made)`), or the backoff, which doubles with each repair
/// made (a wait).
fn budget(
    history: &RepairHistory,
    now: Duration,
    policy: &RepairPolicy,
    unreadable: impl FnOnce(&str) -> String,
    spent: impl FnOnce(u32) -> String,
) -> Option<Action> {
    if let Some(why) = &history.unreadable {
        return Some(Action::Report(unreadable(why)));
    }
    if history.retries >= policy.budget {
        return Some(Action::Report(spent(history.retries)));
    }
    let wait = policy
        .backoff
        .saturating_mul(2u32.saturating_pow(history.retries))
        .min(policy.max_backoff);
    history
        .last
        .map(|last| last + wait)
        .filter(|until| now < *until)
        .map(Action::WaitUntil)
}

/// How often, and when last, this process applied one step of a unit
/// (`sha`) that then left it again: the cluster moved off Git's step
/// outside Git (an edit, another tool), and lockstep applies it again, as
/// Flux or Argo CD self-heal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applies {
    pub sha: String,
    pub times: u32,
    pub last: Duration,
}

impl Applies {
    /// The record after applying `sha` at `now`: one more time of the
    /// same step; a first drift (two) when the last apply of it held for
    /// twice the longest backoff (a drift days later is not fought as the
    /// one before was); one for another step.
    pub fn after(
        previous: Option<&Applies>,
        sha: &str,
        now: Duration,
        policy: &RepairPolicy,
    ) -> Self {
        let times = match previous {
            Some(p) if p.sha == sha && now.saturating_sub(p.last) <= policy.max_backoff * 2 => {
                p.times.saturating_add(1)
            }
            Some(p) if p.sha == sha => 2,
            _ => 1,
        };
        Self {
            sha: sha.to_owned(),
            times,
            last: now,
        }
    }

    /// Until when applying `sha` again waits, if it must. The first drift is
    /// answered at once (an edit by hand is set right on the next pass);
    /// each later one waits the repair backoff, doubled per apply and
    /// capped, so that a tool that keeps changing the object back is not
    /// fought at the speed of both controllers (every watch event a pass,
    /// every pass an apply).
    pub fn wait(&self, sha: &str, now: Duration, policy: &RepairPolicy) -> Option<Duration> {
        if self.sha != sha
            || self.times < 2
            || now.saturating_sub(self.last) > policy.max_backoff * 2
        {
            return None;
        }
        let wait = policy
            .backoff
            .saturating_mul(2u32.saturating_pow(self.times - 2))
            .min(policy.max_backoff);
        let until = self.last + wait;
        (now < until).then_some(until)
    }
}

/// Carries out a planned repair on a cluster: every repair is a log line
/// and a Kubernetes Event on the object, so an audit reads the same in both;
/// a re-run is first counted in the object's [`RepairRecord`] (towards
/// `target`, at `wall`). Returns whether something was changed.
pub async fn execute<C: crate::cluster::Cluster>(
    cluster: &C,
    key: &Key,
    action: &Action,
    history: &mut RepairHistory,
    now: Duration,
    target: &str,
    wall: jiff::Timestamp,
) -> Result<bool, crate::cluster::ClusterError> {
    match action {
        Action::DeleteJob {
            namespace,
            name,
            attempt,
        } => {
            // Only a Job that failed for good is deleted. The condition can
            // be stale while the operator, or a person with `lockstep
            // retry`, already runs the Job again, and deleting a running
            // migration is never a repair (nor a re-run to count).
            let Some(uid) = failed_job_uid(cluster, key, name).await? else {
                tracing::debug!(object = %key, job = %name, "repair forward waits: the Job the condition names has not failed (running again, or gone)");
                return Ok(false);
            };
            // Counted before the Job is deleted: a crash between the two
            // leaves the budget one re-run shorter, never longer.
            count(cluster, key, history, *attempt, target, now, wall).await?;
            // Only the Job read failed: one created again under its name
            // meanwhile (a person's `lockstep retry`, the operator after a
            // hash change) runs, and is not deleted.
            let deleted = cluster.delete_job(namespace, name, uid.as_deref()).await?;
            if !deleted {
                // Counted all the same: the budget is one re-run shorter,
                // never longer. No Event: nothing was deleted.
                tracing::info!(object = %key, job = %name, attempt, "repair forward: the failed Job was gone, or another Job of its name runs, before it was deleted; nothing deleted");
                return Ok(false);
            }
            let message = format!(
                "deleted failed Job {name} (attempt {attempt}) so the operator runs it again"
            );
            tracing::warn!(object = %key, job = %name, attempt, deleted, "repair forward: {message}");
            // The Job is gone and the re-run counted: an Event that cannot
            // be written (no RBAC for Events, an API hiccup) is said in the
            // log, and does not turn the repair into a failure.
            if let Err(e) = cluster
                .record_event(key, "RepairJobDeleted", &message, false)
                .await
            {
                tracing::warn!(object = %key, error = %e, "the repair's Event could not be written");
            }
            Ok(deleted)
        }
        Action::Report(m) => {
            tracing::error!(object = %key, "{m}");
            if let Err(e) = cluster.record_event(key, "RepairNeeded", m, true).await {
                tracing::warn!(object = %key, error = %e, "the report's Event could not be written");
            }
            Ok(false)
        }
        // Re-asserting the plane is an apply of the accepted hop, which the
        // caller owns (it has the document): here it is counted, before
        // the apply, as a re-run is before its Job is deleted.
        Action::ReassertPlane { plane, attempt } => {
            count(cluster, key, history, *attempt, target, now, wall).await?;
            let message = format!(
                "parked by an edit outside Git: the ControlPlane {plane}'s accepted step is applied again (attempt {attempt})"
            );
            if let Err(e) = cluster
                .record_event(key, "RepairPlaneReasserted", &message, false)
                .await
            {
                tracing::warn!(object = %key, error = %e, "the repair's Event could not be written");
            }
            Ok(true)
        }
        // Waiting and nothing need no audit.
        Action::WaitUntil(_) | Action::Nothing => Ok(false),
    }
}

/// Counts the `attempt`-th repair towards `target` in the object's record
/// (and in `history`), before the repair is made.
async fn count<C: crate::cluster::Cluster>(
    cluster: &C,
    key: &Key,
    history: &mut RepairHistory,
    attempt: u32,
    target: &str,
    now: Duration,
    wall: jiff::Timestamp,
) -> Result<(), crate::cluster::ClusterError> {
    let record = RepairRecord {
        target: target.to_owned(),
        attempts: attempt,
        last: jiff::Timestamp::from_second(wall.as_second())
            .unwrap_or(wall)
            .to_string(),
    };
    cluster.set_repair_record(key, &record.to_json()).await?;
    history.retries = attempt;
    history.last = Some(now);
    Ok(())
}

/// Whether the object's Job `name` exists and failed for good: the one
/// test before any deletion, by the daemon's repair and by `lockstep
/// retry`. A `DatabaseReady` condition can be stale while the Job already
/// runs again, and deleting a running migration is never a repair.
/// `Some(uid)` when the Job `name` of `key` has failed (the uid, when the
/// cluster gives one); `None` when it runs again or is gone.
async fn failed_job_uid<C: crate::cluster::Cluster>(
    cluster: &C,
    key: &Key,
    name: &str,
) -> Result<Option<Option<String>>, crate::cluster::ClusterError> {
    Ok(cluster
        .jobs(key)
        .await?
        .into_iter()
        .find(|j| j.name == name && j.failed)
        .map(|j| j.uid))
}

/// What `lockstep retry` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retried {
    /// The failed Job was deleted; the operator runs it again.
    Deleted(String),
    /// Nothing failed that a re-run could fix.
    Nothing(String),
}

/// `lockstep retry`: the forward repair, by hand. Deletes the permanently
/// failed phase Job the object's `DatabaseReady` names (never touching its
/// release) and records an Event saying who asked.
pub async fn retry<C: crate::cluster::Cluster>(
    cluster: &C,
    key: &Key,
) -> Result<Retried, crate::cluster::ClusterError> {
    let Some(obj) = cluster.get(key).await? else {
        return Err(crate::cluster::ClusterError::NotFound(key.clone()));
    };
    let db = obj.status.condition("DatabaseReady").cloned();
    let Some(job) = db
        .as_ref()
        .filter(|c| c.status == "False")
        .and_then(|c| failed_job(&c.reason, &key.name))
    else {
        let why = db.map_or_else(
            || "no DatabaseReady condition yet".to_owned(),
            |c| format!("DatabaseReady is {} ({})", c.status, c.reason),
        );
        return Ok(Retried::Nothing(format!(
            "{key}: no failed phase Job to re-run: {why}"
        )));
    };
    let Some(uid) = failed_job_uid(cluster, key, &job).await? else {
        return Ok(Retried::Nothing(format!(
            "{key}: {job} is not a failed Job (already re-running, or deleted by someone else)"
        )));
    };
    if !cluster
        .delete_job(&key.namespace, &job, uid.as_deref())
        .await?
    {
        return Ok(Retried::Nothing(format!(
            "{key}: {job} is not a failed Job (already re-running, or deleted by someone else)"
        )));
    }
    cluster
        .record_event(
            key,
            "RetryRequested",
            &format!("lockstep retry: deleted failed Job {job} so the operator runs it again"),
            false,
        )
        .await?;
    Ok(Retried::Deleted(job))
}

#[cfg(test)]
mod tests {
    /// A step applied again and again backs off: at once the first time
    /// it drifted, then 60 s, 120 s, ... up to the cap; another step, or a
    /// drift after a long quiet, starts over.
    #[test]
    fn applying_a_drifting_step_again_backs_off() {
        let policy = RepairPolicy::default();
        let s = |n: u64| Duration::from_secs(n);
        let mut a = Applies::after(None, "x", s(0), &policy);
        assert_eq!(a.times, 1);
        assert_eq!(a.wait("x", s(1), &policy), None, "the first drift: at once");
        let mut waits = Vec::new();
        let mut now = s(1);
        for _ in 0..7 {
            a = Applies::after(Some(&a), "x", now, &policy);
            let until = a.wait("x", now, &policy).expect("waits");
            assert_eq!(a.wait("x", until, &policy), None);
            waits.push((until - now).as_secs());
            now = until;
        }
        assert_eq!(waits, [60, 120, 240, 480, 900, 900, 900]);
        assert_eq!(a.wait("y", now, &policy), None, "another step");
        assert_eq!(Applies::after(Some(&a), "y", now, &policy).times, 1);
        let later = now + s(1800) + s(1);
        assert_eq!(a.wait("x", later, &policy), None);
        let again = Applies::after(Some(&a), "x", later, &policy);
        assert_eq!(again.times, 2, "a first drift again");
        assert_eq!(again.wait("x", later + s(59), &policy), Some(later + s(60)));
    }

    use super::*;
    use crate::kind::Kind;

    fn failed(reason: &str) -> Progress {
        Progress::Failed {
            reason: reason.into(),
            message: "job has permanently failed".into(),
        }
    }

    #[test]
    fn projected_failures_are_rerun_with_backoff_within_a_budget() {
        let key = Key::new(Kind::Nova, "openstack", "prod-nova");
        let p = RepairPolicy::default();
        let mut h = RepairHistory::default();
        let now = Duration::from_secs(1000);
        let a = plan(&key, Some("prod"), &failed("ExpandFailed"), &h, now, &p);
        assert_eq!(
            a,
            Action::DeleteJob {
                namespace: "openstack".into(),
                name: "prod-nova-db-expand".into(),
                attempt: 1
            }
        );
        h.retries = 1;
        h.last = Some(now);
        // The second re-run waits twice the backoff.
        let a = plan(
            &key,
            Some("prod"),
            &failed("ExpandFailed"),
            &h,
            now + Duration::from_secs(60),
            &p,
        );
        assert_eq!(a, Action::WaitUntil(now + Duration::from_secs(120)));
        let a = plan(
            &key,
            Some("prod"),
            &failed("ExpandFailed"),
            &h,
            now + Duration::from_secs(120),
            &p,
        );
        assert!(matches!(a, Action::DeleteJob { attempt: 2, .. }));
        h.retries = 3;
        assert!(matches!(
            plan(&key, Some("prod"), &failed("ContractFailed"), &h, now * 10, &p),
            Action::Report(m) if m.contains("budget")
        ));
    }

    /// A condition that names a failed Job while the Job runs again (the
    /// operator, or a person's `lockstep retry`, was quicker), or is gone:
    /// nothing is deleted and no re-run is counted.
    #[tokio::test]
    async fn a_job_that_has_not_failed_is_never_deleted() {
        use crate::cluster::Cluster;
        use crate::cluster::memory::MemoryCluster;
        let mem = MemoryCluster::new(crate::sim::World::new(crate::sim::Params::default()));
        let key = Key::new(Kind::Nova, "openstack", "prod-nova");
        let mut h = RepairHistory::default();
        let action = Action::DeleteJob {
            namespace: "openstack".into(),
            name: "prod-nova-db-expand".into(),
            attempt: 1,
        };
        let wall = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let changed = execute(
            &mem,
            &key,
            &action,
            &mut h,
            Duration::from_secs(5),
            "2026.2",
            wall,
        )
        .await
        .unwrap();
        assert!(!changed);
        assert_eq!((h.retries, h.last), (0, None));
        assert!(mem.jobs(&key).await.unwrap().is_empty());
        let w = mem.world().unwrap();
        assert_eq!(
            w.annotation(&key, RECORD_ANNOTATION),
            None,
            "no re-run counted"
        );
    }

    /// The record round-trips, counts only towards its own target, and
    /// anything unreadable is an error that spends the budget.
    #[test]
    fn repair_records_read_back_and_fail_closed() {
        let r = RepairRecord {
            target: "2026.2".into(),
            attempts: 2,
            last: "2026-12-01T10:00:00Z".into(),
        };
        let text = r.to_json();
        assert_eq!(
            text,
            r#"{"target":"2026.2","attempts":2,"last":"2026-12-01T10:00:00Z"}"#
        );
        assert_eq!(RepairRecord::parse(&text), Ok(r));
        assert_eq!(
            RepairRecord::parse(
                r#"{"target":"2026.2","attempts":2,"last":"2026-12-01T10:00:00Z"}"#
            )
            .map(|r| r.attempts),
            Ok(2)
        );
        assert_eq!(past_attempts(None, "2026.2"), Ok(0));
        assert_eq!(past_attempts(Some(&text), "2026.2"), Ok(2));
        assert_eq!(past_attempts(Some(&text), "2026.3"), Ok(0), "a new target");
        for bad in [
            "",
            "attempt 2",
            "{}",
            r#"{"target":"2026.2","attempts":-1,"last":"2026-12-01T10:00:00Z"}"#,
            r#"{"target":"2026.2","attempts":"2","last":"2026-12-01T10:00:00Z"}"#,
            r#"{"target":"2026.2","attempts":2,"last":"yesterday"}"#,
            r#"{"target":"2026.2","attempts":2}"#,
        ] {
            assert!(past_attempts(Some(bad), "2026.2").is_err(), "{bad:?}");
        }
        let now = Duration::from_secs(500);
        let h = RepairHistory::from_record(Some(&text), "2026.2", 3, now);
        assert_eq!((h.retries, h.last, h.unreadable), (2, Some(now), None));
        let h = RepairHistory::from_record(None, "2026.2", 3, now);
        assert_eq!((h.retries, h.last), (0, None));
        // Unreadable: spent, and the report says why.
        let h = RepairHistory::from_record(Some("{"), "2026.2", 3, now);
        assert_eq!(h.retries, 3);
        let key = Key::new(Kind::Nova, "openstack", "prod-nova");
        let a = plan(
            &key,
            Some("prod"),
            &failed("ExpandFailed"),
            &h,
            now * 100,
            &RepairPolicy::default(),
        );
        assert!(
            matches!(&a, Action::Report(m) if m.contains("repair record cannot be read") && m.contains(RECORD_ANNOTATION)),
            "{a:?}"
        );
        // Even with a larger budget, nothing is re-run.
        let a = plan(
            &key,
            Some("prod"),
            &failed("ExpandFailed"),
            &h,
            now * 100,
            &RepairPolicy {
                budget: 10,
                ..RepairPolicy::default()
            },
        );
        assert!(matches!(a, Action::Report(_)), "{a:?}");
    }

    #[test]
    fn standalone_failures_are_reported_with_the_manual_retry() {
        let key = Key::new(Kind::Glance, "image", "glance");
        let a = plan(
            &key,
            None,
            &failed("MigrateFailed"),
            &RepairHistory::default(),
            Duration::ZERO,
            &RepairPolicy::default(),
        );
        assert!(matches!(a, Action::Report(m) if m.contains("lockstep retry glance/image/glance")));
    }

    #[test]
    fn parked_children_get_the_plane_reasserted() {
        let key = Key::new(Kind::Glance, "openstack", "prod-glance");
        for reason in ["UpgradeTargetChanged", "ImageReleaseMismatch"] {
            let a = plan(
                &key,
                Some("prod"),
                &failed(reason),
                &RepairHistory::default(),
                Duration::ZERO,
                &RepairPolicy::default(),
            );
            assert_eq!(
                a,
                Action::ReassertPlane {
                    plane: "prod".into(),
                    attempt: 1,
                }
            );
            // Within the budget and its backoff, like a Job's re-run.
            let after = |retries: u32, last: u64, now: u64| {
                plan(
                    &key,
                    Some("prod"),
                    &failed(reason),
                    &RepairHistory {
                        retries,
                        last: Some(Duration::from_secs(last)),
                        unreadable: None,
                    },
                    Duration::from_secs(now),
                    &RepairPolicy::default(),
                )
            };
            assert_eq!(
                after(1, 100, 130),
                Action::WaitUntil(Duration::from_secs(220))
            );
            assert_eq!(
                after(1, 100, 220),
                Action::ReassertPlane {
                    plane: "prod".into(),
                    attempt: 2,
                }
            );
            assert!(matches!(
                after(3, 100, 100_000),
                Action::Report(m) if m.contains("after 3 repairs of this hop (re-asserts of its ControlPlane prod") && m.contains("budget is spent")
            ));
            let unreadable = plan(
                &key,
                Some("prod"),
                &failed(reason),
                &RepairHistory::from_record(Some("{"), "2026.2", 3, Duration::ZERO),
                Duration::ZERO,
                &RepairPolicy::default(),
            );
            assert!(matches!(unreadable, Action::Report(m) if m.contains("cannot be read")));
        }
        // A refusal is not repaired: nothing forward exists for a downgrade.
        let a = plan(
            &key,
            Some("prod"),
            &failed("DowngradeNotSupported"),
            &RepairHistory::default(),
            Duration::ZERO,
            &RepairPolicy::default(),
        );
        assert!(matches!(a, Action::Report(_)));
        assert_eq!(
            plan(
                &key,
                Some("prod"),
                &Progress::Complete,
                &RepairHistory::default(),
                Duration::ZERO,
                &RepairPolicy::default()
            ),
            Action::Nothing
        );
    }
}
