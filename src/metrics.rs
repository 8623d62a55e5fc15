//! What an operator of lockstep graphs and alerts on, in the Prometheus
//! text format: verdicts by reason, hops, repairs, phase durations, and the
//! latency of every edge (Git, the cluster, the Git host). Served with
//! `/healthz` and `/readyz` on the server port, away from the webhooks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RepairLabels {
    pub kind: String,
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub kind: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub op: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

fn latency() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn long() -> Histogram {
    // 1 s .. ~9 h
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    pub commits_judged: Family<VerdictLabels, Counter>,
    pub hops_applied: Family<KindLabels, Counter>,
    pub hops_completed: Family<KindLabels, Counter>,
    pub repairs: Family<RepairLabels, Counter>,
    pub phase_seconds: Family<PhaseLabels, Histogram>,
    pub git_seconds: Family<OpLabels, Histogram>,
    pub cluster_seconds: Family<OpLabels, Histogram>,
    pub forge_seconds: Family<OpLabels, Histogram>,
    pub status_deliveries: Family<ResultLabels, Counter>,
    pub passes: Counter,
    pub pass_seconds: Histogram,
    pub leader: Gauge,
    pub units_blocked: Gauge,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("lockstep");
        let m = Self {
            commits_judged: Family::default(),
            hops_applied: Family::default(),
            hops_completed: Family::default(),
            repairs: Family::default(),
            phase_seconds: Family::new_with_constructor(long),
            git_seconds: Family::new_with_constructor(latency),
            cluster_seconds: Family::new_with_constructor(latency),
            forge_seconds: Family::new_with_constructor(latency),
            status_deliveries: Family::default(),
            passes: Counter::default(),
            pass_seconds: latency(),
            leader: Gauge::default(),
            units_blocked: Gauge::default(),
            ready: AtomicBool::new(false),
            registry: Registry::default(),
        };
        registry.register(
            "commits_judged",
            "Commits judged by the gate, by verdict and (first) reason",
            m.commits_judged.clone(),
        );
        registry.register(
            "hops_applied",
            "Release hops (and patches) applied to the cluster",
            m.hops_applied.clone(),
        );
        registry.register(
            "hops_completed",
            "Hops followed to completion",
            m.hops_completed.clone(),
        );
        registry.register(
            "repairs",
            "Forward repairs, by kind and action",
            m.repairs.clone(),
        );
        registry.register(
            "phase_duration_seconds",
            "Time spent in each phase of the operators' phase machine, as observed",
            m.phase_seconds.clone(),
        );
        registry.register(
            "git_duration_seconds",
            "Git operations (refresh, judge)",
            m.git_seconds.clone(),
        );
        registry.register(
            "cluster_request_duration_seconds",
            "Kubernetes API requests",
            m.cluster_seconds.clone(),
        );
        registry.register(
            "forge_request_duration_seconds",
            "Commit status deliveries to the Git host",
            m.forge_seconds.clone(),
        );
        registry.register(
            "status_deliveries",
            "Commit statuses by outcome (posted, already_there, deferred, rejected)",
            m.status_deliveries.clone(),
        );
        registry.register("reconcile_passes", "Reconcile passes run", m.passes.clone());
        registry.register(
            "reconcile_pass_duration_seconds",
            "One pass: source refresh, gate, units, statuses",
            m.pass_seconds.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the lease",
            m.leader.clone(),
        );
        registry.register(
            "units_blocked",
            "Units whose cluster state is off Git's accepted chain",
            m.units_blocked.clone(),
        );
        Self { registry, ..m }
    }

    pub fn observe(family: &Family<OpLabels, Histogram>, op: &str, ok: bool, took: Duration) {
        family
            .get_or_create(&OpLabels {
                op: op.to_owned(),
                result: if ok { "ok" } else { "error" }.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Ready once the first pass (or, on a follower, the first lease
    /// check) has finished.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// `/healthz` (the process serves), `/readyz` (it has done its first
/// pass), `/metrics`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve))
        .with_state(metrics)
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

async fn serve(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_up_with_their_labels() {
        let m = Metrics::new();
        m.commits_judged
            .get_or_create(&VerdictLabels {
                verdict: "refused".into(),
                reason: "UpgradePathInvalid".into(),
            })
            .inc();
        Metrics::observe(&m.git_seconds, "refresh", true, Duration::from_millis(3));
        let text = m.encode();
        assert!(
            text.contains(
                r#"lockstep_commits_judged_total{verdict="refused",reason="UpgradePathInvalid"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"lockstep_git_duration_seconds_count{op="refresh",result="ok"} 1"#)
        );
    }
}
