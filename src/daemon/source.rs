//! Source: the first step of a pass. Refreshes the repository on the
//! blocking pool (a remote is asked first and fetched only when it moved)
//! and hands on where it is, the branch head and the pull-request heads.

use std::path::PathBuf;
use std::time::Instant;

use git2::Oid;

use super::{Daemon, PassError, PassOutcome, Repo};
use crate::cluster::Cluster;
use crate::metrics::Metrics;

/// What the source step hands on.
pub(super) struct Refreshed {
    pub path: PathBuf,
    /// `None`: the branch has no commits yet.
    pub head: Option<Oid>,
    pub pulls: Vec<(u64, Oid)>,
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// A failed refresh keeps the last good state (and says so in `out`):
    /// a remote that is down must not stop hops in flight.
    pub(super) async fn reconcile_source(&mut self, out: &mut PassOutcome) -> Refreshed {
        let t = Instant::now();
        let repo = self.repo.clone();
        let refreshed = tokio::task::spawn_blocking(move || {
            let mut r = repo.lock().map_err(|_| PassError::Poisoned)?;
            r.refresh()?;
            Ok::<_, PassError>((r.path(), r.head(), r.pulls()))
        })
        .await
        .map_err(PassError::from)
        .and_then(|r| r);
        Metrics::observe(
            &self.metrics.git_seconds,
            "refresh",
            refreshed.is_ok(),
            t.elapsed(),
        );
        let (path, head, pulls) = match refreshed {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "source refresh failed; keeping the last good state");
                out.source_error = Some(e.to_string());
                match self.repo.lock() {
                    Ok(r) => (r.path(), r.head(), r.pulls()),
                    Err(_) => (PathBuf::new(), None, Vec::new()),
                }
            }
        };
        Refreshed { path, head, pulls }
    }
}
