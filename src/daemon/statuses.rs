//! Statuses: the fifth step of a pass. Every status the judged history and
//! the unit reports imply (`rollout::statuses`), queued when it changed;
//! delivery (`delivery.rs`) takes them from the queue.

use super::{Daemon, Repo};
use crate::cluster::Cluster;
use crate::forge::Status;
use crate::history::CheckReport;
use crate::rollout;
use crate::status::Context;
use std::time::Duration;

/// A status the Git host refused, and when it is said again.
pub(super) struct Refused {
    value: (crate::forge::State, String),
    tries: u32,
    /// `None` once it was said again (until the host refuses it anew).
    again_at: Option<tokio::time::Instant>,
}

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
    /// a full queue is queued again; one the host refused is said again
    /// after a backoff that doubles with each refusal (10 s to an hour), so
    /// a token put right or a permission granted is seen, but a status the
    /// host will never take (an unknown commit, a full status list) is not
    /// posted on every pass. When more was lost than the queue could hand
    /// back, everything is said again (delivery reads before it writes).
    /// Returns whether some status is to be said again.
    pub(super) async fn take_back_lost(&mut self) -> bool {
        let taken = self.queue.take_lost().await;
        // The host's time, not the engine's: in virtual time a simulated
        // hour passes in milliseconds, and the host would be asked as often.
        let now = tokio::time::Instant::now();
        let mut again = false;
        if taken.overflowed {
            // Except what waits out a refusal's backoff.
            let refused = &self.refused;
            self.posted
                .retain(|k, _| refused.get(k).is_some_and(|r| r.again_at.is_some()));
            again = true;
        }
        for lost in taken.lost {
            let key = (lost.sha.clone(), lost.status.context.clone());
            let value = (lost.status.state, lost.status.description.clone());
            if self.posted.get(&key) != Some(&value) {
                continue;
            }
            if lost.evicted {
                self.queue.push(&lost.sha, lost.status).await;
                continue;
            }
            let r = self.refused.entry(key).or_insert_with(|| Refused {
                value: value.clone(),
                tries: 0,
                again_at: None,
            });
            if r.value != value {
                r.value = value;
                r.tries = 0;
            }
            r.tries += 1;
            let backoff = Duration::from_secs(10)
                .saturating_mul(1 << (r.tries - 1).min(9))
                .min(Duration::from_secs(3600));
            r.again_at = Some(now + backoff);
        }
        for (key, r) in &mut self.refused {
            if r.again_at.is_some_and(|t| t <= now) {
                r.again_at = None;
                if self.posted.get(key) == Some(&r.value) {
                    self.posted.remove(key);
                    again = true;
                }
            }
        }
        again
    }

    /// Queues one status unless the same one was queued before.
    pub(super) async fn queue_status(&mut self, sha: String, s: Status) {
        let key = (sha.clone(), s.context.clone());
        let value = (s.state, s.description.clone());
        if self.posted.get(&key) == Some(&value) {
            return;
        }
        if self.refused.get(&key).is_some_and(|r| r.value != value) {
            self.refused.remove(&key);
        }
        self.posted.insert(key, value);
        self.queue.push(&sha, s).await;
    }
}
