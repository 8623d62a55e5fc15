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
pub async fn deliver_forever(
    queue: StatusQueue,
    forge: Arc<AnyForge>,
    metrics: Arc<Metrics>,
    policy: RetryPolicy,
    push_notes: Option<crate::forge::notes::NotesRemote>,
) {
    loop {
        let t = Instant::now();
        let r = queue.drain(&*forge, &policy).await;
        record_drain(&metrics, &r, t.elapsed());
        if r.posted > 0
            && let Some(remote) = &push_notes
        {
            push_notes_to(&forge, remote).await;
        }
        if r.deferred {
            tokio::time::sleep(Duration::from_secs(5)).await;
        } else if queue.is_empty().await {
            queue.wait().await;
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
