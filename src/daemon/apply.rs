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
    /// The object came back without the digest the apply wrote (a webhook
    /// or another tool strips it): the next pass could not tell that the
    /// document runs and would apply it again and again.
    #[error("{0}")]
    Unmarked(String),
}

impl ApplyError {
    pub fn retryable(&self) -> bool {
        match self {
            ApplyError::Document(_) | ApplyError::Unmarked(_) => false,
            ApplyError::Cluster(e) => e.retryable(),
        }
    }
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Applies step `i` of `chain`.
    /// `again`: the step is one this process (or, by its digest, an
    /// earlier one) applied and the cluster left: taken back whole
    /// ([`Cluster::reapply`]).
    pub(super) async fn apply(
        &self,
        chain: &Chain,
        i: usize,
        again: bool,
    ) -> Result<(), ApplyError> {
        let (req, digest) = request(chain, i)?;
        let Some(step) = chain.steps.get(i) else {
            return Err(ApplyError::Document(format!(
                "{} has no step {i}",
                chain.unit
            )));
        };
        let t = Instant::now();
        let r = if again {
            self.cluster.reapply(&req).await
        } else {
            self.cluster.apply(&req).await
        };
        Metrics::observe(
            &self.metrics.cluster_seconds,
            "apply",
            r.is_ok(),
            t.elapsed(),
        );
        let stored = r?;
        if stored.status.applied.as_deref() != Some(digest.as_str()) {
            return Err(ApplyError::Unmarked(format!(
                "{} was applied, but the API server returned it without annotation {}: lockstep cannot tell that the document runs; let the annotation through (an admission webhook may strip it)",
                chain.unit,
                crate::rollout::APPLIED_ANNOTATION
            )));
        }
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

/// The server-side apply of step `i` of `chain`: the whole accepted
/// document with lockstep's digest annotation, and that digest.
pub(super) fn request(chain: &Chain, i: usize) -> Result<(ApplyRequest, String), ApplyError> {
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
    let digest = document.digest();
    let mut document = document.parse().map_err(|e| {
        ApplyError::Document(format!(
            "the document of {} at {} does not read back: {e}",
            chain.unit,
            step.sha.get(..10).unwrap_or(&step.sha)
        ))
    })?;
    // Which document the cluster runs, for the next pass and a
    // restarted daemon: release and image alone cannot tell a
    // reconfiguration (`rollout::APPLIED_ANNOTATION`). A copy in Git is
    // replaced, never trusted.
    if let Some(metadata) = document
        .as_object_mut()
        .map(|d| d.entry("metadata").or_insert_with(|| serde_json::json!({})))
        .and_then(|m| m.as_object_mut())
    {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| serde_json::json!({}));
        if !annotations.is_object() {
            *annotations = serde_json::json!({});
        }
        if let Some(a) = annotations.as_object_mut() {
            a.insert(
                crate::rollout::APPLIED_ANNOTATION.to_owned(),
                serde_json::Value::String(digest.clone()),
            );
        }
    }
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
    Ok((req, digest))
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
