//! Upgrade policy beyond the operators: what a platform team knows and the
//! operators cannot. "2026.2 breaks our Nova cells layout: block it until
//! the fix" is a **blocked edge**; "nobody moves to 2027.1 without
//! acknowledging the removed API" is an **acknowledgement**. Both are
//! `UpgradePolicy` documents (`lockstep.c5c3.io/v1alpha1`) in the fleet
//! repository under [`DIR`], read by the gate with every commit
//! (`docs/policy.md`).
//!
//! Policies are read from one fixed directory, not searched for in every
//! file: a one-file check stays one file's work however large the fleet
//! (an `UpgradePolicy` anywhere else is refused, so none is silently
//! ignored). A commit is judged by the policies of its baseline and of its
//! own tree together: it can neither lift a block and cross it at once,
//! nor add one and slip past it.

use std::collections::BTreeSet;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::kind::Kind;
use crate::live::LiveStatus;
use crate::release::Release;

pub const KIND: &str = "UpgradePolicy";

/// Where policies live, relative to the repository root.
pub const DIR: &str = ".lockstep/policies";

/// The commit-message trailer that gives an acknowledgement.
pub const ACK_TRAILER: &str = "Lockstep-Ack";

/// Whether a document is meant as a policy: our group at any version (a
/// version lockstep does not serve is refused, not passed over, or the
/// policy's blocks and gates would silently do nothing).
pub fn is_policy(api_version: &str, kind: &str) -> bool {
    kind == KIND && api_version.split('/').next() == crate::plan::API_VERSION.split('/').next()
}

/// Whether `path` is where policies may live.
pub fn in_dir(path: &str) -> bool {
    path.strip_prefix(DIR)
        .is_some_and(|rest| rest.starts_with('/') && !rest[1..].contains('/'))
}

/// A release, or a pattern of releases: `*`, `2026.*`, `2026.1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Releases {
    Any,
    Year(u16),
    One(Release),
}

impl Releases {
    fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "*" {
            return Ok(Self::Any);
        }
        if let Some(y) = s.strip_suffix(".*") {
            return y
                .parse::<u16>()
                .ok()
                .filter(|y| *y >= 2010)
                .map(Self::Year)
                .ok_or_else(|| format!("{s:?} is not a release pattern (2026.*)"));
        }
        Release::parse_strict(s)
            .map(Self::One)
            .map_err(|e| format!("{s:?}: {e} (or a pattern: * or 2026.*)"))
    }

    fn matches(&self, r: Release) -> bool {
        match self {
            Self::Any => true,
            Self::Year(y) => r.year() == *y,
            Self::One(o) => *o == r,
        }
    }
}

/// One edge of the upgrade graph: kinds (empty: every kind), from, to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub kinds: Vec<Kind>,
    pub from: Releases,
    pub to: Releases,
    pub reason: String,
    pub url: Option<String>,
}

impl Edge {
    fn matches(&self, kind: Kind, from: Release, to: Release) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&kind))
            && self.from.matches(from)
            && self.to.matches(to)
    }

    fn why(&self) -> String {
        match &self.url {
            Some(u) => format!("{} ({u})", self.reason),
            None => self.reason.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub edge: Edge,
    /// Only while the object's live condition of this type has this status
    /// (`None`: always). Without a live state the block holds: the gate
    /// fails closed.
    pub when: Option<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub id: String,
    pub edge: Edge,
}

/// One `UpgradePolicy`, where it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    pub file: Arc<str>,
    pub line: u32,
    pub blocked: Vec<Blocked>,
    pub acks: Vec<Ack>,
    /// Acknowledgements given fleet-wide.
    pub given: Vec<String>,
    /// Pre-flight gates: checked on the live state before a hop is
    /// applied, never at judgment (`core/src/preflight.rs`).
    pub preflight: Vec<crate::preflight::Gate>,
}

/// A policy document that cannot be used: refused `PolicyInvalid` with the
/// file and line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub file: Arc<str>,
    pub line: u32,
    pub name: Option<String>,
    pub message: String,
}

/// An UpgradePolicy document: the fleet's own rules on top of the
/// operators' (docs/policy.md).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "UpgradePolicy (lockstep.c5c3.io/v1alpha1)")]
struct Doc {
    #[serde(rename = "apiVersion")]
    #[schemars(extend("const" = "lockstep.c5c3.io/v1alpha1"))]
    _api_version: String,
    #[serde(rename = "kind")]
    #[schemars(extend("const" = "UpgradePolicy"))]
    _kind: String,
    metadata: Metadata,
    spec: Spec,
}

#[derive(Deserialize, JsonSchema)]
struct Metadata {
    name: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    blocked: Vec<BlockedDoc>,
    #[serde(default)]
    acknowledgements: Vec<AckDoc>,
    #[serde(default)]
    given: Vec<String>,
    /// Checked on the live cluster before a hop is applied, never when a
    /// commit is judged: while one fails the hop waits, pending.
    #[serde(default)]
    preflight: Vec<PreflightDoc>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PreflightDoc {
    /// The kinds whose hops this gate holds (kind or service name); every
    /// kind when absent. A ControlPlane's hop is held when it moves a child
    /// of one of them.
    #[serde(default)]
    kinds: Vec<String>,
    /// A recent successful mariadb-operator Backup (k8s.mariadb.com).
    #[serde(default)]
    backup: Option<BackupDoc>,
    /// Every object the hop moves (a ControlPlane's children, or the
    /// service itself) is Ready=True first.
    #[serde(default, rename = "childrenReady")]
    children_ready: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct BackupDoc {
    /// The MariaDB the Backups back up (their spec.mariaDbRef.name).
    #[serde(default, rename = "mariaDb")]
    mariadb: Option<String>,
    /// The MariaDB's namespace (spec.mariaDbRef.namespace, else the
    /// Backup's own); any when absent.
    #[serde(default)]
    namespace: Option<String>,
    /// Labels every counted Backup carries.
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    /// How old the newest successful Backup may be: 90s, 15m, 24h.
    #[serde(rename = "maxAge")]
    #[schemars(schema_with = "crate::duration::schema")]
    max_age: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EdgeDoc {
    #[serde(default)]
    kinds: Vec<String>,
    from: String,
    to: String,
    reason: String,
    #[serde(default)]
    url: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct BlockedDoc {
    #[serde(flatten)]
    edge: EdgeDoc,
    #[serde(default)]
    when: Option<WhenDoc>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WhenDoc {
    condition: String,
    #[serde(default = "true_text")]
    status: String,
}

fn true_text() -> String {
    "True".into()
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AckDoc {
    id: String,
    #[serde(flatten)]
    edge: EdgeDoc,
}

fn kinds(kinds: &[String], at: &str) -> Result<Vec<Kind>, String> {
    kinds
        .iter()
        .map(|k| {
            Kind::ALL
                .into_iter()
                .find(|x| x.as_str().eq_ignore_ascii_case(k) || x.service() == k.as_str())
                .ok_or_else(|| format!("{at}: kind {k:?} is not a C5C3 kind"))
        })
        .collect()
}

fn preflight(
    d: PreflightDoc,
    at: &str,
    policy: &str,
    file: &Arc<str>,
    line: u32,
) -> Result<crate::preflight::Gate, String> {
    let kinds = kinds(&d.kinds, at)?;
    let backup = match d.backup {
        None => None,
        Some(b) => {
            let max_age = crate::duration::positive(&b.max_age)
                .map_err(|e| format!("{at}.backup.maxAge: {e}"))?;
            let empty = |s: &Option<String>| s.as_ref().is_some_and(|s| s.trim().is_empty());
            if empty(&b.mariadb) || empty(&b.namespace) {
                return Err(format!(
                    "{at}.backup: mariaDb and namespace, when given, name something"
                ));
            }
            if b.mariadb.is_none() && b.labels.is_empty() {
                return Err(format!(
                    "{at}.backup: say which Backups count (mariaDb, labels or both)"
                ));
            }
            Some(crate::preflight::BackupGate {
                mariadb: b.mariadb,
                namespace: b.namespace,
                labels: b.labels,
                max_age,
            })
        }
    };
    if backup.is_none() && !d.children_ready {
        return Err(format!(
            "{at}: a gate checks something (backup, childrenReady or both)"
        ));
    }
    Ok(crate::preflight::Gate {
        policy: policy.to_owned(),
        file: file.clone(),
        line,
        kinds,
        backup,
        children_ready: d.children_ready,
    })
}

fn edge(e: EdgeDoc, at: &str) -> Result<Edge, String> {
    let kinds = kinds(&e.kinds, at)?;
    let from = Releases::parse(&e.from).map_err(|m| format!("{at}.from: {m}"))?;
    let to = Releases::parse(&e.to).map_err(|m| format!("{at}.to: {m}"))?;
    if e.reason.trim().is_empty() {
        return Err(format!(
            "{at}.reason: say why (it is what the status shows)"
        ));
    }
    if let Some(u) = &e.url
        && !(u.starts_with("https://") || u.starts_with("http://"))
    {
        return Err(format!("{at}.url: {u:?} is not an http(s) URL"));
    }
    Ok(Edge {
        kinds,
        from,
        to,
        reason: e.reason,
        url: e.url,
    })
}

fn is_ack_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The JSON Schema of UpgradePolicy documents, as committed under `plans/`.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(Doc);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

/// The policies of one file (documents of other kinds are skipped).
pub fn parse(file: &str, text: &str) -> (Vec<Policy>, Vec<PolicyError>) {
    let file: Arc<str> = Arc::from(file);
    let mut out = Vec::new();
    let mut errors = Vec::new();
    if !text.contains(KIND) {
        return (out, errors);
    }
    let limit = crate::yaml::Limit::manifest(text.len());
    let options = crate::yaml::options(&limit, text.len());
    let docs = match serde_saphyr::from_multiple_with_options::<serde_json::Value>(text, options) {
        Ok(d) => d,
        Err(_) => {
            errors.push(PolicyError {
                file,
                line: 1,
                name: None,
                message: "the file is not YAML lockstep can read".into(),
            });
            return (out, errors);
        }
    };
    let starts = crate::plan::document_lines(text);
    for (i, doc) in docs.into_iter().enumerate() {
        let api = doc.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
        let kind = doc.get("kind").and_then(|v| v.as_str()).unwrap_or("");
        if !is_policy(api, kind) {
            continue;
        }
        let line = starts.get(i).copied().unwrap_or(1);
        let name = doc
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let fail = |message: String| PolicyError {
            file: file.clone(),
            line,
            name: name.clone(),
            message,
        };
        if api != crate::plan::API_VERSION {
            errors.push(fail(format!(
                "apiVersion {api} is not served; use {}",
                crate::plan::API_VERSION
            )));
            continue;
        }
        let d: Doc = match serde_path_to_error::deserialize(doc) {
            Ok(d) => d,
            Err(e) => {
                errors.push(fail(crate::yaml::field_error(&e)));
                continue;
            }
        };
        let mut policy = Policy {
            name: d.metadata.name,
            file: file.clone(),
            line,
            blocked: Vec::new(),
            acks: Vec::new(),
            given: Vec::new(),
            preflight: Vec::new(),
        };
        let mut bad = None;
        for (j, g) in d.spec.preflight.into_iter().enumerate() {
            match preflight(
                g,
                &format!("spec.preflight[{j}]"),
                &policy.name,
                &file,
                line,
            ) {
                Ok(g) => policy.preflight.push(g),
                Err(m) => bad = bad.or(Some(m)),
            }
        }
        for (j, b) in d.spec.blocked.into_iter().enumerate() {
            match edge(b.edge, &format!("spec.blocked[{j}]")) {
                Ok(edge) => policy.blocked.push(Blocked {
                    edge,
                    when: b.when.map(|w| (w.condition, w.status)),
                }),
                Err(m) => bad = bad.or(Some(m)),
            }
        }
        for (j, a) in d.spec.acknowledgements.into_iter().enumerate() {
            if !is_ack_id(&a.id) {
                bad = bad.or(Some(format!(
                    "spec.acknowledgements[{j}].id {:?}: letters, digits, '-', '_' and '.', at most 63",
                    a.id
                )));
                continue;
            }
            match edge(a.edge, &format!("spec.acknowledgements[{j}]")) {
                Ok(edge) => policy.acks.push(Ack { id: a.id, edge }),
                Err(m) => bad = bad.or(Some(m)),
            }
        }
        for (j, g) in d.spec.given.into_iter().enumerate() {
            if !is_ack_id(&g) {
                bad = bad.or(Some(format!(
                    "spec.given[{j}] {g:?} is not an acknowledgement id"
                )));
            }
            policy.given.push(g);
        }
        match bad {
            Some(m) => errors.push(fail(m)),
            None => out.push(policy),
        }
    }
    (out, errors)
}

/// The acknowledgements a commit message gives: its `Lockstep-Ack: <id>`
/// trailers (one id per line; a line of several ids, comma-separated, too).
///
/// Read as git reads trailers (`git interpret-trailers --parse`): the last
/// paragraph (paragraphs end at a line of nothing but white space), never
/// the first one, which is the title, and only when it is a trailer block, every line a `Token:
/// value` trailer at the start of the line (a token of letters, digits and
/// `-`) or a continuation of the one before (a line starting with a space or
/// a tab, folded into its value). A line `Lockstep-Ack: …` indented under
/// another trailer is that trailer's text, not an acknowledgement, and a
/// paragraph of prose that mentions one gives none: git would see none
/// there, and an acknowledgement a person cannot see in `git log
/// --format=%(trailers)` must not count.
pub fn acks_in_message(message: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = message.lines().collect();
    let blank = |line: &&str| line.trim().is_empty();
    let end = lines.iter().rposition(|l| !blank(l)).map_or(0, |i| i + 1);
    // The first paragraph is the title (git: "cannot be trailers"), so a
    // message of one paragraph has no trailer block, however it reads.
    let title_end = lines.iter().position(blank).unwrap_or(lines.len());
    let start = lines[..end].iter().rposition(blank).map_or(0, |i| i + 1);
    if start <= title_end {
        return BTreeSet::new();
    }
    let mut trailers: Vec<(&str, String)> = Vec::new();
    for line in &lines[start..end] {
        if line.starts_with([' ', '\t']) {
            match trailers.last_mut() {
                Some((_, value)) => {
                    value.push(' ');
                    value.push_str(line.trim());
                }
                None => return BTreeSet::new(),
            }
            continue;
        }
        let Some((token, value)) = line.split_once(':') else {
            return BTreeSet::new();
        };
        let token = token.trim_end();
        if token.is_empty() || !token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return BTreeSet::new();
        }
        trailers.push((token, value.to_owned()));
    }
    trailers
        .iter()
        .filter(|(token, _)| token.eq_ignore_ascii_case(ACK_TRAILER))
        .flat_map(|(_, v)| v.split(',').map(str::trim))
        .filter(|s| is_ack_id(s))
        .map(str::to_owned)
        .collect()
}

/// Every policy a commit is judged by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicySet {
    pub policies: Vec<Arc<Policy>>,
}

/// Why a hop may not be taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Blocked(String),
    AckRequired(String),
}

/// Acknowledgement ids defined on more than one edge across `policies` (a
/// tree's): refused, because one trailer (or one `given`) names the id and
/// would lift both, another team's edge among them. The same edge defined
/// twice under one id is harmless.
pub fn conflicting_acks<'a>(policies: impl IntoIterator<Item = &'a Policy>) -> Vec<PolicyError> {
    let mut first: std::collections::BTreeMap<&str, (&Edge, &Policy)> = Default::default();
    let mut out = Vec::new();
    for p in policies {
        for a in &p.acks {
            match first.get(a.id.as_str()) {
                None => {
                    first.insert(&a.id, (&a.edge, p));
                }
                Some((edge, _)) if **edge == a.edge => {}
                Some((_, q)) => out.push(PolicyError {
                    file: p.file.clone(),
                    line: p.line,
                    name: Some(p.name.clone()),
                    message: format!(
                        "acknowledgement {} is defined on another edge too (UpgradePolicy {}, {}:{}): one trailer would acknowledge both; give each edge its own id",
                        a.id, q.name, q.file, q.line
                    ),
                }),
            }
        }
    }
    out
}

impl PolicySet {
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Whether an object of `kind` may move `from → to` (any distance: a
    /// re-add judged from its floor crosses every edge in between, so each
    /// release step on the way is checked). `acks` are the commit's.
    pub fn judge(
        &self,
        kind: Kind,
        from: Release,
        to: Release,
        live: Option<&LiveStatus>,
        acks: &BTreeSet<String>,
    ) -> Option<Refusal> {
        if self.policies.is_empty() || to <= from {
            return None;
        }
        let given: BTreeSet<&str> = self
            .policies
            .iter()
            .flat_map(|p| p.given.iter().map(String::as_str))
            .collect();
        let mut a = from;
        let mut steps = 0;
        while a < to && steps < 64 {
            let b = a.next();
            for p in &self.policies {
                for bl in &p.blocked {
                    if !bl.edge.matches(kind, a, b) {
                        continue;
                    }
                    let active = match (&bl.when, live) {
                        (None, _) | (Some(_), None) => true,
                        (Some((cond, status)), Some(l)) => {
                            l.condition(cond).is_some_and(|c| &c.status == status)
                        }
                    };
                    if active {
                        let when = match &bl.when {
                            Some((c, s)) => format!(" while {c} is {s}"),
                            None => String::new(),
                        };
                        return Some(Refusal::Blocked(format!(
                            "{kind} {a} → {b} is blocked{when} by UpgradePolicy {} ({}:{}): {}",
                            p.name,
                            p.file,
                            p.line,
                            bl.edge.why()
                        )));
                    }
                }
                for ack in &p.acks {
                    if ack.edge.matches(kind, a, b)
                        && !acks.contains(&ack.id)
                        && !given.contains(ack.id.as_str())
                    {
                        return Some(Refusal::AckRequired(format!(
                            "{kind} {a} → {b} needs acknowledgement {} (UpgradePolicy {}): {}; add the trailer `{ACK_TRAILER}: {}` to the commit message, or list it under spec.given",
                            ack.id,
                            p.name,
                            ack.edge.why(),
                            ack.id
                        )));
                    }
                }
            }
            a = b;
            steps += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_field_is_named_by_its_path() {
        let text = include_str!("../../plans/upgradepolicy.sample.yaml").replacen(
            "kinds: [Nova]",
            "kinds: Nova",
            1,
        );
        let (policies, errors) = parse(".lockstep/policies/fleet.yaml", &text);
        assert!(policies.is_empty());
        let m = &errors[0].message;
        assert!(
            m.starts_with("spec.blocked[0]") && m.contains("invalid type"),
            "{m}"
        );
    }

    const POLICY: &str = r#"apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: fleet
spec:
  blocked:
    - kinds: [Nova]
      from: "2026.1"
      to: "2026.2"
      reason: 2026.2 breaks our cells layout
      url: https://tracker.example/1234
    - from: "*"
      to: "2028.*"
      reason: not certified yet
      when:
        condition: Certified
        status: "False"
  acknowledgements:
    - id: nova-api-removal
      kinds: [nova]
      from: "*"
      to: "2027.1"
      reason: 2027.1 removes os-hosts
"#;

    fn r(s: &str) -> Release {
        Release::parse_strict(s).unwrap()
    }

    fn set() -> PolicySet {
        let (p, e) = parse(".lockstep/policies/fleet.yaml", POLICY);
        assert!(e.is_empty(), "{e:?}");
        PolicySet {
            policies: p.into_iter().map(Arc::new).collect(),
        }
    }

    /// A policy at a version lockstep does not serve is refused with its
    /// line, never passed over: its blocks and gates would do nothing.
    #[test]
    fn a_policy_at_another_version_is_refused_not_ignored() {
        for v in ["v1", "v1beta1", "v1alpha2"] {
            let text = format!("# fleet\n---\n{}", POLICY.replacen("v1alpha1", v, 1));
            let (policies, errors) = parse(".lockstep/policies/fleet.yaml", &text);
            assert!(policies.is_empty(), "{v}: {policies:?}");
            assert_eq!(errors.len(), 1, "{v}: {errors:?}");
            assert_eq!(errors[0].line, 3, "{v}");
            assert_eq!(errors[0].name.as_deref(), Some("fleet"));
            assert!(
                errors[0].message
                    == format!(
                        "apiVersion lockstep.c5c3.io/{v} is not served; use lockstep.c5c3.io/v1alpha1"
                    ),
                "{}",
                errors[0].message
            );
        }
        // Another group's kind of that name is not ours to judge.
        let other = POLICY.replacen("lockstep.c5c3.io/v1alpha1", "example.com/v1", 1);
        let (policies, errors) = parse(".lockstep/policies/fleet.yaml", &other);
        assert!(policies.is_empty() && errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn a_blocked_edge_refuses_its_hop_and_only_it() {
        let s = set();
        let none = BTreeSet::new();
        let Some(Refusal::Blocked(m)) = s.judge(Kind::Nova, r("2026.1"), r("2026.2"), None, &none)
        else {
            panic!("blocked")
        };
        assert!(
            m.contains("cells layout (https://tracker.example/1234)"),
            "{m}"
        );
        assert!(m.contains(".lockstep/policies/fleet.yaml:1"), "{m}");
        assert_eq!(
            s.judge(Kind::Glance, r("2026.1"), r("2026.2"), None, &none),
            None
        );
        // A jump over it (a re-add from its floor) crosses it too.
        assert!(matches!(
            s.judge(Kind::Nova, r("2025.2"), r("2026.2"), None, &none),
            Some(Refusal::Blocked(_))
        ));
    }

    #[test]
    fn an_acknowledgement_comes_from_the_trailer_or_the_policy() {
        let s = set();
        let none = BTreeSet::new();
        let Some(Refusal::AckRequired(m)) =
            s.judge(Kind::Nova, r("2026.2"), r("2027.1"), None, &none)
        else {
            panic!("ack required")
        };
        assert!(m.contains("Lockstep-Ack: nova-api-removal"), "{m}");
        let acks = acks_in_message(
            "Nova to 2027.1\n\nWe read the notes.\n\nLockstep-Ack: nova-api-removal\n",
        );
        assert_eq!(
            s.judge(Kind::Nova, r("2026.2"), r("2027.1"), None, &acks),
            None
        );
        // A trailer in the body, not the last paragraph, is not one.
        let body =
            acks_in_message("Nova\n\nLockstep-Ack: nova-api-removal\n\nSigned-off-by: a <a@b>");
        assert!(body.is_empty(), "{body:?}");
        // As git reads trailers: an indented line is the trailer above
        // continued, and prose is no trailer block.
        for message in [
            "Nova\n\nSigned-off-by: x\n    Lockstep-Ack: nova-api-removal\n",
            "Nova\n\nWe acked it. Lockstep-Ack: nova-api-removal\n",
            "Nova\n\nThe trailer follows\nLockstep-Ack: nova-api-removal\n",
            "Nova\n\n Lockstep-Ack: nova-api-removal\n",
            "Nova\n\nLockstep Ack: nova-api-removal\n",
            // The title is never a trailer block, even with no body.
            "nova: to 2026.2\nLockstep-Ack: nova-api-removal\n",
            "Lockstep-Ack: nova-api-removal",
            "Lockstep-Ack: nova-api-removal\n\n\n",
        ] {
            let none = acks_in_message(message);
            assert!(none.is_empty(), "{message:?}: {none:?}");
        }
        // A line of spaces ends a paragraph, as in git.
        let spaced = acks_in_message("Nova\n  \nLockstep-Ack: nova-api-removal\n");
        assert_eq!(spaced.len(), 1, "{spaced:?}");
        let folded = acks_in_message(
            "Nova\n\nSigned-off-by: a <a@b>\nLockstep-Ack: nova-api-removal,\n  cells-v2\n",
        );
        assert_eq!(
            folded.into_iter().collect::<Vec<_>>(),
            ["cells-v2", "nova-api-removal"]
        );
        let mut given = s.clone();
        Arc::make_mut(&mut given.policies[0])
            .given
            .push("nova-api-removal".into());
        assert_eq!(
            given.judge(Kind::Nova, r("2026.2"), r("2027.1"), None, &none),
            None
        );
    }

    #[test]
    fn a_conditional_block_holds_without_a_live_state() {
        let s = set();
        let none = BTreeSet::new();
        assert!(matches!(
            s.judge(Kind::Glance, r("2027.2"), r("2028.1"), None, &none),
            Some(Refusal::Blocked(m)) if m.contains("while Certified is False")
        ));
        let certified = LiveStatus {
            conditions: vec![crate::live::Condition {
                type_: "Certified".into(),
                status: "True".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            s.judge(
                Kind::Glance,
                r("2027.2"),
                r("2028.1"),
                Some(&certified),
                &none
            ),
            None
        );
    }

    #[test]
    fn bad_policies_are_errors_naming_the_field() {
        for (bad, want) in [
            ("from: \"2026.3\"", "spec.blocked[0].from"),
            ("kinds: [Pod]", "kind \"Pod\""),
            ("reason: \"\"", "spec.blocked[0].reason"),
            ("url: ftp://x", "spec.blocked[0].url"),
            ("colour: red", "unknown field"),
        ] {
            let mut fields = vec![
                ("kinds", "kinds: [Nova]"),
                ("from", "from: \"2026.1\""),
                ("to", "to: \"2026.2\""),
                ("reason", "reason: because"),
            ];
            let key = bad.split(':').next().unwrap();
            fields.retain(|(k, _)| *k != key);
            let mut text = String::from(
                "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePolicy\nmetadata:\n  name: p\nspec:\n  blocked:\n",
            );
            for (i, (_, f)) in fields.iter().enumerate() {
                text.push_str(if i == 0 { "    - " } else { "      " });
                text.push_str(f);
                text.push('\n');
            }
            text.push_str("      ");
            text.push_str(bad);
            text.push('\n');
            let (p, e) = parse(".lockstep/policies/p.yaml", &text);
            assert!(p.is_empty(), "{bad}");
            assert_eq!(e.len(), 1, "{bad}: {e:?}");
            assert!(e[0].message.contains(want), "{bad}: {}", e[0].message);
        }
    }

    #[test]
    fn preflight_gates_parse_and_bad_ones_name_the_field() {
        let head = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePolicy\nmetadata:\n  name: p\nspec:\n  preflight:\n";
        let good = format!(
            "{head}    - kinds: [nova]\n      backup:\n        mariaDb: openstack-db\n        namespace: openstack\n        labels: {{service: nova}}\n        maxAge: 24h\n      childrenReady: true\n"
        );
        let (p, e) = parse(".lockstep/policies/p.yaml", &good);
        assert!(e.is_empty(), "{e:?}");
        let g = &p[0].preflight[0];
        assert_eq!(g.kinds, vec![Kind::Nova]);
        assert!(g.children_ready);
        let b = g.backup.as_ref().unwrap();
        assert_eq!(b.max_age, std::time::Duration::from_secs(24 * 3600));
        assert_eq!(b.mariadb.as_deref(), Some("openstack-db"));
        assert_eq!(b.labels["service"], "nova");
        for (bad, want) in [
            (
                "    - backup: {mariaDb: db, maxAge: 1d}\n",
                "spec.preflight[0].backup.maxAge",
            ),
            (
                "    - backup: {mariaDb: db, maxAge: 0s}\n",
                "longer than zero",
            ),
            ("    - backup: {maxAge: 1h}\n", "which Backups count"),
            (
                "    - backup: {mariaDb: \"\", maxAge: 1h}\n",
                "name something",
            ),
            ("    - kinds: [Nova]\n", "checks something"),
            (
                "    - childrenReady: true\n      kinds: [Pod]\n",
                "kind \"Pod\"",
            ),
            ("    - backup: {mariaDb: db}\n", "maxAge"),
        ] {
            let (p, e) = parse(".lockstep/policies/p.yaml", &format!("{head}{bad}"));
            assert!(p.is_empty(), "{bad}");
            assert!(e.len() == 1 && e[0].message.contains(want), "{bad}: {e:?}");
        }
    }

    #[test]
    fn policies_live_in_one_directory() {
        assert!(in_dir(".lockstep/policies/a.yaml"));
        assert!(!in_dir(".lockstep/policies/sub/a.yaml"));
        assert!(!in_dir(".lockstep/policiesx/a.yaml"));
        assert!(!in_dir("clusters/a.yaml"));
    }
}
