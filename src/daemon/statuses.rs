//! Statuses: the fifth step of a pass. Every status the judged history and
//! the unit reports imply (`rollout::statuses`), queued when it changed;
//! delivery (`delivery.rs`) takes them from the queue.

use super::{Daemon, Repo};
use crate::cluster::Cluster;
use crate::forge::Status;
use crate::history::CheckReport;
use crate::rollout;
use crate::status::Context;

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Queues every status the state implies (only changed ones are sent).
    pub(super) async fn reconcile_statuses(&mut self, report: &CheckReport) {
        let statuses = rollout::statuses(
            &self.opts.cluster_name,
            report,
            &self.units,
            self.opts.target_url.as_deref(),
        );
        // A unit never read since the start: nothing is known of its work
        // (done, or not), so neither its commits' verdict-and-progress
        // status nor its objects' statuses are said until it is read. (One
        // read before keeps what was said of it then.) Other units' object
        // statuses on the same commits go out as usual.
        let mut commits: std::collections::HashSet<&str> = Default::default();
        let mut objects: std::collections::HashSet<String> = Default::default();
        for (k, (c, _)) in &self.unread {
            if self.units.contains_key(k) {
                continue;
            }
            commits.extend(
                c.steps
                    .iter()
                    .flat_map(|s| s.commits.iter().map(String::as_str)),
            );
            let keys = std::iter::once(k).chain(c.steps.iter().flat_map(|s| s.children.keys()));
            objects.extend(keys.map(|o| {
                Context::object(&self.opts.cluster_name, &o.namespace, &o.name).to_string()
            }));
        }
        let commit = Context::commit(&self.opts.cluster_name).to_string();
        let statuses: Vec<_> = statuses
            .into_iter()
            .filter(|(sha, s)| {
                !(commits.contains(sha.as_str())
                    && (s.context == commit || objects.contains(&s.context)))
            })
            .collect();
        for (sha, s) in statuses {
            self.queue_status(sha, s).await;
        }
    }

    /// Takes back what the delivery queue lost ([`crate::forge::delivery::Lost`]),
    /// unless a newer status for its key was queued since: one pushed out of
    /// a full queue is queued again; one the host refused is forgotten, so
    /// the next time the state implies it, it is queued and sent again
    /// (a token put right, a permission granted).
    /// Returns whether some refused status was forgotten.
    pub(super) async fn take_back_lost(&mut self) -> bool {
        let mut forgot = false;
        for lost in self.queue.take_lost().await {
            let key = (lost.sha.clone(), lost.status.context.clone());
            let value = (lost.status.state, lost.status.description.clone());
            if self.posted.get(&key) != Some(&value) {
                continue;
            }
            if lost.evicted {
                self.queue.push(&lost.sha, lost.status).await;
            } else {
                self.posted.remove(&key);
                forgot = true;
            }
        }
        forgot
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
