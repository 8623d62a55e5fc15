//! Delivery: the last step, in its own task. The queue the statuses step
//! fills is drained into the Git host (read before write, retries with
//! backoff, text fitted and escaped), and git notes are pushed when
//! configured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::forge::delivery::{RetryPolicy, StatusQueue};
use crate::forge::{AnyForge, Forge};
use crate::metrics::Metrics;

/// Runs status delivery until the process ends: newest status per commit
/// and context, late when the host was down. With git notes and a remote,
/// the notes are pushed after every delivery that wrote some.
///
/// Only while this process leads (`leader`): a drain in flight when the
/// lease is lost is dropped at once, so a follower never says a status
/// over the new leader's. A host that keeps deferring (down, or refusing
/// the token) is tried again after a pause that doubles from 5 s to five
/// minutes, not every 5 s.
pub async fn deliver_forever(
    queue: StatusQueue,
    forge: Arc<AnyForge>,
    metrics: Arc<Metrics>,
    policy: RetryPolicy,
    push_notes: Option<crate::forge::notes::NotesRemote>,
    mut leader: tokio::sync::watch::Receiver<bool>,
) {
    let mut deferred = 0u32;
    loop {
        if !*leader.borrow_and_update() {
            if leader.changed().await.is_err() {
                return;
            }
            continue;
        }
        let t = Instant::now();
        let drained = tokio::select! {
            r = queue.drain(&*forge, &policy) => Some(r),
            _ = lost_lead(&mut leader) => None,
        };
        let Some(r) = drained else {
            // Dropped mid-delivery: its status goes back (a cleared queue
            // takes nothing back), to be said if this process leads again.
            queue.restore_in_flight().await;
            continue;
        };
        record_drain(&metrics, &r, t.elapsed());
        if r.posted > 0
            && let Some(remote) = &push_notes
        {
            push_notes_to(&forge, remote).await;
        }
        if r.deferred {
            deferred = deferred.saturating_add(1);
            let pause = Duration::from_secs(5)
                .saturating_mul(1 << (deferred - 1).min(6))
                .min(Duration::from_secs(300));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = lost_lead(&mut leader) => {}
            }
        } else {
            deferred = 0;
            if queue.is_empty().await {
                tokio::select! {
                    _ = queue.wait() => {}
                    _ = lost_lead(&mut leader) => {}
                }
            }
        }
    }
}

/// Resolves when this process no longer leads. Leadership whose sender is
/// gone stays as it last was: leading, this never resolves.
async fn lost_lead(leader: &mut tokio::sync::watch::Receiver<bool>) {
    while *leader.borrow_and_update() {
        if leader.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Pushes git notes to `remote` (a remote named "": the branch's remote),
/// off the runtime; a push refused because another writer pushed first is
/// merged and tried again.
pub async fn push_notes_to(forge: &Arc<AnyForge>, remote: &crate::forge::notes::NotesRemote) {
    use crate::forge::notes::NotesRemote;
    let forge = forge.clone();
    let remote = remote.clone();
    let r = tokio::task::spawn_blocking(move || {
        let AnyForge::Notes(notes) = &*forge else {
            return Ok(());
        };
        let remote = match remote {
            NotesRemote::Named(n) if n.is_empty() => {
                NotesRemote::Named(notes.branch_remote().unwrap_or_else(|| "origin".into()))
            }
            r => r,
        };
        notes.push_to(&remote)
    })
    .await;
    match r {
        Ok(Err(e)) => tracing::warn!(error = %e, "pushing notes failed; next delivery tries again"),
        Err(e) => tracing::warn!(error = %e, "pushing notes failed"),
        Ok(Ok(())) => {}
    }
}

pub fn record_drain(metrics: &Metrics, r: &crate::forge::delivery::DrainReport, took: Duration) {
    use crate::metrics::ResultLabels;
    for (result, n) in [
        ("posted", r.posted),
        ("already_there", r.already_there),
        ("rejected", r.rejected.len()),
        ("deferred", usize::from(r.deferred)),
    ] {
        if n > 0 {
            metrics
                .status_deliveries
                .get_or_create(&ResultLabels {
                    result: result.into(),
                })
                .inc_by(n as u64);
        }
    }
    if r.posted + r.already_there > 0 || r.deferred {
        Metrics::observe(&metrics.forge_seconds, "drain", !r.deferred, took);
    }
}

/// Drains what is queued now (for `--until-idle` and tests).
pub async fn deliver_now<F: Forge>(
    queue: &StatusQueue,
    forge: &F,
    metrics: &Metrics,
    policy: &RetryPolicy,
) -> bool {
    let t = Instant::now();
    let r = queue.drain(forge, policy).await;
    record_drain(metrics, &r, t.elapsed());
    !r.deferred
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::{State, Status};

    /// Only the leader delivers: a follower (or a process that lost the
    /// lease) leaves the queue alone, and delivers once it leads.
    #[tokio::test]
    async fn only_the_leader_delivers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = git2::Repository::init(dir.path()).expect("init");
        let sig = git2::Signature::now("t", "t@example.invalid").expect("signature");
        let tree = repo
            .find_tree(repo.index().expect("index").write_tree().expect("tree"))
            .expect("tree");
        let sha = repo
            .commit(Some("HEAD"), &sig, &sig, "empty", &tree, &[])
            .expect("commit")
            .to_string();
        let forge = Arc::new(AnyForge::Notes(
            crate::forge::notes::Notes::open(dir.path()).expect("notes"),
        ));
        let queue = StatusQueue::new(8);
        queue
            .push(
                &sha,
                Status {
                    state: State::Success,
                    context: "lockstep/prod".into(),
                    description: "accepted".into(),
                    target_url: None,
                },
            )
            .await;
        let (lead, leader) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(deliver_forever(
            queue.clone(),
            forge.clone(),
            Arc::new(Metrics::default()),
            RetryPolicy::default(),
            None,
            leader,
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(queue.len().await, 1, "a follower delivered");
        assert!(forge.statuses(&sha).await.expect("read").is_empty());
        lead.send(true).expect("send");
        let deadline = Instant::now() + Duration::from_secs(10);
        while forge.statuses(&sha).await.expect("read").is_empty() {
            assert!(Instant::now() < deadline, "the leader did not deliver");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(queue.is_empty().await);
        task.abort();
    }
}
