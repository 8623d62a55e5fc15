//! Applying a step: one server-side apply of the document the step carries
//! from judgment. Git is not read here: what was judged is what is applied,
//! whole, or nothing is.

use std::time::Instant;

use super::{Daemon, Repo};
use crate::cluster::{ApplyRequest, Cluster, ClusterError};
use crate::kind::Kind;
use crate::metrics::Metrics;
use crate::release::ImageRef;
use crate::rollout::Chain;

/// Why an accepted step was not applied.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApplyError {
    /// The accepted document could not be read from Git when it was
    /// judged: nothing is applied rather than part of it.
    #[error("cannot read what to apply: {0}; nothing applied")]
    Document(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl ApplyError {
    pub fn retryable(&self) -> bool {
        match self {
            ApplyError::Document(_) => false,
            ApplyError::Cluster(e) => e.retryable(),
        }
    }
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Applies step `i` of `chain`.
    pub(super) async fn apply(&self, chain: &Chain, i: usize) -> Result<(), ApplyError> {
        let Some(step) = chain.steps.get(i) else {
            return Err(ApplyError::Document(format!(
                "{} has no step {i}",
                chain.unit
            )));
        };
        // The whole accepted document, or nothing: a smaller apply (release
        // and image alone) would silently drop what server-side apply owns.
        let document = step
            .document
            .as_ref()
            .map_err(|e| ApplyError::Document(e.clone()))?;
        // Kept as text since judgment (`rollout::Document`); text that does
        // not read back is this step's error, never a smaller apply.
        let document = document.parse().map_err(|e| {
            ApplyError::Document(format!(
                "the document of {} at {} does not read back: {e}",
                chain.unit,
                step.sha.get(..10).unwrap_or(&step.sha)
            ))
        })?;
        let image = step
            .image
            .as_deref()
            .and_then(|r| ImageRef::parse_reference(r).ok());
        let req = ApplyRequest {
            key: chain.unit.clone(),
            release: step.release.clone(),
            image,
            overrides: plane_overrides(&document),
            document: Some(document),
        };
        let t = Instant::now();
        let r = self.cluster.apply(&req).await;
        Metrics::observe(
            &self.metrics.cluster_seconds,
            "apply",
            r.is_ok(),
            t.elapsed(),
        );
        r?;
        tracing::info!(
            commit = %step.sha,
            object = %chain.unit,
            from = step.from.as_deref().unwrap_or("new"),
            to = step.release.as_deref().unwrap_or(""),
            at_secs = self.clock.now().as_secs(),
            "applied"
        );
        Ok(())
    }
}

/// A plane's `services.<svc>.image` overrides.
fn plane_overrides(doc: &serde_json::Value) -> Vec<(Kind, ImageRef)> {
    let Some(services) = doc.pointer("/spec/services").and_then(|s| s.as_object()) else {
        return Vec::new();
    };
    services
        .iter()
        .filter_map(|(svc, v)| {
            let kind = Kind::from_service(svc)?;
            let i = v.get("image")?;
            let image = ImageRef::new(
                i.get("repository").and_then(|r| r.as_str()),
                i.get("tag").and_then(|r| r.as_str()),
                i.get("digest").and_then(|r| r.as_str()),
            )
            .ok()?;
            Some((kind, image))
        })
        .collect()
}
