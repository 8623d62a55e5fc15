//! Repairing forward: what lockstep does about a hop that stopped, as a pure
//! decision. Projected services have no abort path (the plane re-asserts
//! them), so the only ways out are forward: re-run a permanently failed
//! phase Job by deleting it (the operator never re-creates one itself,
//! `docs/operators.md` §6.1), or re-assert the accepted target on the
//! plane after an out-of-band edit parked a child (§6.3). A release is never
//! lowered. Standalone services are reported; `lockstep retry` does the
//! same repair by hand.

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
    /// Apply the accepted target to the plane again.
    ReassertPlane {
        plane: String,
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
        if let Progress::Stalled { phase, for_ } = progress {
            return Action::Report(format!(
                "{key}: no progress in {phase} for {}s; lockstep never goes backwards: look at the operator's events",
                for_.as_secs()
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
        if history.retries >= policy.budget {
            return Action::Report(format!(
                "{key}: {reason} again after {} re-runs of {job}; the retry budget is spent: {message}",
                history.retries
            ));
        }
        let wait = policy
            .backoff
            .saturating_mul(2u32.saturating_pow(history.retries))
            .min(policy.max_backoff);
        if let Some(last) = history.last
            && now < last + wait
        {
            return Action::WaitUntil(last + wait);
        }
        return Action::DeleteJob {
            namespace: key.namespace.clone(),
            name: job,
            attempt: history.retries + 1,
        };
    }
    match (reason.as_str(), projected_by) {
        ("UpgradeTargetChanged" | "ImageReleaseMismatch", Some(plane)) => Action::ReassertPlane {
            plane: plane.to_owned(),
        },
        _ => Action::Report(format!("{key}: {reason}: {message}")),
    }
}

/// Carries out a planned repair on a cluster: every repair is a log line
/// and a Kubernetes Event on the object, so an audit reads the same in both.
/// Returns whether something was changed.
pub async fn execute<C: crate::cluster::Cluster>(
    cluster: &C,
    key: &Key,
    action: &Action,
    history: &mut RepairHistory,
    now: Duration,
) -> Result<bool, crate::cluster::ClusterError> {
    match action {
        Action::DeleteJob {
            namespace,
            name,
            attempt,
        } => {
            let deleted = cluster.delete_job(namespace, name).await?;
            let message = format!(
                "deleted failed Job {name} (attempt {attempt}) so the operator runs it again"
            );
            tracing::warn!(object = %key, job = %name, attempt, deleted, "repair forward: {message}");
            cluster
                .record_event(key, "RepairJobDeleted", &message, false)
                .await?;
            history.retries = *attempt;
            history.last = Some(now);
            Ok(deleted)
        }
        Action::Report(m) => {
            tracing::error!(object = %key, "{m}");
            cluster.record_event(key, "RepairNeeded", m, true).await?;
            Ok(false)
        }
        // Re-asserting the plane is an apply of the accepted hop, which the
        // caller owns (it has the document); waiting and nothing need no audit.
        Action::ReassertPlane { .. } | Action::WaitUntil(_) | Action::Nothing => Ok(false),
    }
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
    let jobs = cluster.jobs(key).await?;
    if !jobs.iter().any(|j| j.name == job && j.failed) {
        return Ok(Retried::Nothing(format!(
            "{key}: {job} is not a failed Job (already re-running, or deleted by someone else)"
        )));
    }
    cluster.delete_job(&key.namespace, &job).await?;
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
                    plane: "prod".into()
                }
            );
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
