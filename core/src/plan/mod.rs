//! Declarative upgrade plans: ordered waves across control planes, kept in
//! the fleet repository next to what they upgrade and executed by the
//! daemon Git first (it writes the hop commits; the gate judges them like
//! any other).
//!
//! A ControlPlane cannot order its own services and no GitOps tool orders
//! upgrades across clusters by release; the runbooks do (one hop at a time,
//! a canary first, health gates between batches, a maintenance window).
//! A plan writes that down.

pub mod schedule;
pub mod validate;
pub mod window;

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kind::{Key, Kind};

/// The plan's group and version: our own, never a C5C3 one.
pub const API_VERSION: &str = "lockstep.c5c3.io/v1alpha1";
pub const KIND: &str = "UpgradePlan";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "UpgradePlan (lockstep.c5c3.io/v1alpha1)")]
pub struct UpgradePlan {
    /// `lockstep.c5c3.io/v1alpha1`.
    #[schemars(extend("const" = "lockstep.c5c3.io/v1alpha1"))]
    pub api_version: String,
    /// `UpgradePlan`.
    #[schemars(extend("const" = "UpgradePlan"))]
    pub kind: String,
    pub metadata: PlanMetadata,
    pub spec: PlanSpec,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanMetadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanSpec {
    /// The target release (`YYYY.N`), at or ahead of every selected
    /// object's current release. Several releases ahead, the plan walks
    /// each object one release at a time: the whole wave sequence runs once
    /// per hop, each hop starting when the previous one completed and its
    /// last wave soaked.
    #[schemars(regex(pattern = r"^\d{4}\.\d{1,2}$"))]
    pub to: String,
    /// In order: a wave starts when the one before it is complete, healthy
    /// and has soaked.
    pub waves: Vec<Wave>,
    /// Outside every window no new hop starts (a running phase machine is
    /// never interrupted). None: always open.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Window>,
    /// Conditions on named objects that must hold before any hop starts
    /// (e.g. Keystone Ready).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<Gate>,
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Stop starting new hops (running ones finish).
    #[serde(default)]
    pub paused: bool,
    /// `commit` writes the hop commits to the watched branch; `propose`
    /// pushes each wave's commit to `lockstep/plan/<name>/wave-<n>` and
    /// opens a pull/merge request for it instead (needs a Git host).
    #[serde(default)]
    pub mode: PlanMode,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Wave {
    pub name: String,
    /// ControlPlanes and standalone service CRs, by namespace/name or labels.
    pub select: Vec<Selector>,
    /// At most this many objects of the wave upgrading at once.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub max_parallel: u32,
    /// How long the wave must stay healthy after completing before the next
    /// one starts.
    #[serde(default = "zero")]
    #[schemars(schema_with = "crate::duration::schema_or_zero")]
    pub soak: String,
    /// Kinds in the order they move within the wave (`[placement, nova]`:
    /// every Placement of the wave completes before the first Nova starts,
    /// as the operators' runbook asks). Kinds not listed come after the
    /// listed ones. A ControlPlane is one unit (its operator orders its
    /// children).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<String>,
}

impl Wave {
    /// Where a unit of `kind` stands in the wave's `order` (unlisted kinds
    /// last).
    pub fn rank(&self, kind: Kind) -> usize {
        self.order
            .iter()
            .position(|o| o.eq_ignore_ascii_case(kind.as_str()) || o == kind.service())
            .unwrap_or(self.order.len())
    }
}

/// Selects units: `kind`/`namespace`/`name` narrow by identity (each
/// optional), `labels` by the object's own labels (all must match).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A maintenance window: opens at each time the cron expression names (in
/// `timeZone`), stays open for `duration`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Window {
    /// Five cron fields: minute hour day-of-month month day-of-week
    /// (`0 22 * * 1-5`: weekdays at 22:00).
    pub start: String,
    #[schemars(schema_with = "crate::duration::schema")]
    pub duration: String,
    /// An IANA time zone (`Europe/Berlin`); default UTC.
    #[serde(default = "utc")]
    pub time_zone: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gate {
    pub object: ObjectRef,
    /// A condition type on the object's status.
    #[serde(default = "ready")]
    pub condition: String,
    #[serde(default = "true_")]
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Start nothing new; repair forward continues on the failed object.
    #[default]
    Hold,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PlanMode {
    #[default]
    Commit,
    Propose,
}

fn one() -> u32 {
    1
}
fn zero() -> String {
    "0s".into()
}
fn utc() -> String {
    "UTC".into()
}
fn ready() -> String {
    "Ready".into()
}
fn true_() -> String {
    "True".into()
}

/// A plan as found in a tree: where it is written.
#[derive(Clone, Debug, PartialEq)]
pub struct Located {
    pub plan: UpgradePlan,
    pub file: Arc<str>,
    pub line: u32,
}

/// Whether a document is one of ours (by apiVersion group and kind).
pub fn is_plan(api_version: &str, kind: &str) -> bool {
    kind == KIND && api_version.split('/').next() == API_VERSION.split('/').next()
}

/// A plan document that does not parse: refused with the file and line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    pub file: Arc<str>,
    pub line: u32,
    pub name: Option<String>,
    pub message: String,
}

/// The plans in one file's text, and the plan documents that do not parse.
pub fn parse_plans(file: &str, text: &str) -> (Vec<Located>, Vec<PlanError>) {
    let file: Arc<str> = Arc::from(file);
    let mut plans = Vec::new();
    let mut errors = Vec::new();
    // Cheap rejection: most fleet files are not plans.
    if !text.contains(KIND) {
        return (plans, errors);
    }
    // The same budget the manifest reader gives this file (the caller read
    // it within its byte limit): a file the gate reads is never one whose
    // plans go unread. What does not parse is the manifest reader's problem
    // to report, with its line.
    let limit =
        crate::yaml::Limit::manifest(text.len().max(crate::manifest::DEFAULT_MAX_FILE_BYTES));
    let options = crate::yaml::options(&limit, text.len());
    let Ok(docs) = serde_saphyr::from_multiple_with_options::<serde_json::Value>(text, options)
    else {
        return (plans, errors);
    };
    // Document start lines, for messages.
    let starts = document_lines(text);
    for (i, doc) in docs.into_iter().enumerate() {
        let api = doc.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
        let kind = doc.get("kind").and_then(|v| v.as_str()).unwrap_or("");
        if !is_plan(api, kind) {
            continue;
        }
        let line = starts.get(i).copied().unwrap_or(1);
        let name = doc
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        if api != API_VERSION {
            errors.push(PlanError {
                file: file.clone(),
                line,
                name,
                message: format!("apiVersion {api} is not served; use {API_VERSION}"),
            });
            continue;
        }
        match serde_path_to_error::deserialize::<_, UpgradePlan>(doc) {
            Ok(plan) => plans.push(Located {
                plan,
                file: file.clone(),
                line,
            }),
            Err(e) => errors.push(PlanError {
                file: file.clone(),
                line,
                name,
                message: format!("not a valid UpgradePlan: {}", crate::yaml::field_error(&e)),
            }),
        }
    }
    (plans, errors)
}

/// 1-based line where each YAML document's content starts.
pub fn document_lines(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut pending = true;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_end();
        if t == "---" || t.starts_with("--- ") {
            pending = true;
            continue;
        }
        if pending && !t.is_empty() && !t.starts_with('#') {
            out.push(i as u32 + 1);
            pending = false;
        }
    }
    out
}

impl Selector {
    /// Whether the selector picks a unit with these labels.
    pub fn matches(&self, key: &Key, labels: &BTreeMap<String, String>) -> bool {
        self.kind
            .as_deref()
            .is_none_or(|k| k.eq_ignore_ascii_case(key.kind.as_str()))
            && self.namespace.as_deref().is_none_or(|n| n == key.namespace)
            && self.name.as_deref().is_none_or(|n| n == key.name)
            && self
                .labels
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|l| l == v))
    }
}

impl ObjectRef {
    pub fn key(&self) -> Option<Key> {
        let kind = Kind::ALL
            .iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(&self.kind))?;
        Some(Key::new(*kind, self.namespace.clone(), self.name.clone()))
    }
}

/// The JSON Schema of UpgradePlan documents, as committed under `plans/`.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(UpgradePlan);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field of the wrong type is named with its path, not only serde's
    /// words.
    #[test]
    fn a_bad_field_is_named_by_its_path() {
        let plan = include_str!("../../../plans/samples/two-waves.yaml").replacen(
            "maxParallel: 1",
            "maxParallel: many",
            1,
        );
        let (plans, errors) = parse_plans("plans.yaml", &plan);
        assert!(plans.is_empty());
        let m = &errors[0].message;
        assert!(
            m.starts_with("not a valid UpgradePlan: spec.waves[0].maxParallel: invalid type"),
            "{m}"
        );
    }

    /// A plan whose objects a later plan (or a hand commit) took past its
    /// release stays complete and inactive as the daemon runs it; the gate
    /// still refuses a commit that writes such a plan.
    #[test]
    fn objects_past_a_plan_are_done_with_it_not_a_refusal() {
        use crate::kind::{Key, Kind};
        use std::collections::BTreeMap;
        let text = include_str!("../../../plans/samples/two-waves.yaml");
        let (plans, errors) = parse_plans("plans.yaml", text);
        assert!(errors.is_empty(), "{errors:?}");
        let unit = |kind, ns: &str, name: &str, release: &str| validate::Unit {
            key: Key::new(kind, ns, name),
            file: "f.yaml".into(),
            line: 1,
            release: Some(release.into()),
            labels: BTreeMap::new(),
            digest: false,
        };
        let units = |nova: &str| {
            vec![
                unit(Kind::ControlPlane, "openstack-staging", "staging", "2026.2"),
                unit(Kind::ControlPlane, "openstack", "prod", "2026.2"),
                unit(Kind::Nova, "compute", "nova", nova),
            ]
        };
        let done = units("2026.2");
        assert!(validate::validate_in_effect(&plans[0], &done, &plans).is_empty());
        assert!(!validate::active(&plans[0].plan, &done));
        let past = units("2027.1");
        assert!(
            validate::validate_in_effect(&plans[0], &past, &plans).is_empty(),
            "{:?}",
            validate::validate_in_effect(&plans[0], &past, &plans)
        );
        assert!(!validate::active(&plans[0].plan, &past), "done with it");
        let judged = validate::validate(&plans[0], &past, &plans);
        assert!(
            judged
                .iter()
                .any(|r| r.message.contains("already at 2027.1, past 2026.2")),
            "{judged:?}"
        );
        // Behind it: active.
        assert!(validate::active(&plans[0].plan, &units("2026.1")));
    }

    /// A plan behind more documents than the parser's fixed default (1,024)
    /// is read: the manifest reader reads such a file, so its plans must
    /// not go unread.
    #[test]
    fn a_plan_among_thousands_of_documents_is_read() {
        let plan = include_str!("../../../plans/samples/two-waves.yaml");
        let mut text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n".repeat(3000);
        text.push_str("---\n");
        text.push_str(plan);
        let (plans, errors) = parse_plans("fleet/plans.yaml", &text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].plan.metadata.name, "fleet-to-2026.2");
        assert_eq!(plans[0].line, 4 * 3000 + 1 + 3);
    }
}
