//! Statuses: the fifth step of a pass. Every status the judged history and
//! the unit reports imply (`rollout::statuses`), queued when it changed;
//! delivery (`delivery.rs`) takes them from the queue.

use super::{Daemon, Repo};
use crate::cluster::Cluster;
use crate::forge::Status;
use crate::history::CheckReport;
use crate::rollout;

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Queues every status the state implies (only changed ones are sent).
    pub(super) async fn reconcile_statuses(&mut self, report: &CheckReport) {
        let statuses = rollout::statuses(
            &self.opts.cluster_name,
            report,
            &self.units,
            self.opts.target_url.as_deref(),
        );
        // Commits of a unit never read since the start: nothing is known
        // of their work (done, or not), so nothing is said until it is
        // read. (One read before keeps what was said of it then.)
        let unknown: std::collections::HashSet<&str> = self
            .unread
            .iter()
            .filter(|(k, _)| !self.units.contains_key(*k))
            .flat_map(|(_, (c, _))| c.steps.iter().flat_map(|s| s.commits.iter()))
            .map(String::as_str)
            .collect();
        let statuses: Vec<_> = statuses
            .into_iter()
            .filter(|(sha, _)| !unknown.contains(sha.as_str()))
            .collect();
        for (sha, s) in statuses {
            self.queue_status(sha, s).await;
        }
    }

    /// Queues one status unless the same one was queued before.
    pub(super) async fn queue_status(&mut self, sha: String, s: Status) {
        let key = (sha.clone(), s.context.clone());
        let value = (s.state, s.description.clone());
        if self.posted.get(&key) == Some(&value) {
            return;
        }
        self.posted.insert(key, value);
        self.queue.push(&sha, s).await;
    }
}
