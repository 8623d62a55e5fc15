//! The gate's judgment of a range of history, as plain values: what
//! `check` prints, what a status says and what `rollout` turns into chains
//! of steps. The shell's walker (`history`) fills them in from Git.

use std::sync::Arc;

use serde::Serialize;

use crate::gate::{ObjectVerdict, Verdict};
use crate::manifest::Skip;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport<M = ()> {
    pub verdict: Verdict,
    /// The starting baseline (commit or tree id), null for the empty tree.
    pub base: Option<String>,
    pub head: String,
    pub commits: Vec<CommitReport>,
    /// What the walker keeps to judge on from here (the shell's floors,
    /// tied to Git's object ids); the core never looks at it.
    #[serde(skip)]
    pub memory: M,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitReport {
    pub sha: String,
    pub summary: String,
    pub verdict: Verdict,
    pub objects: Vec<ObjectVerdict>,
    /// Content that is not a Kubernetes object, passed over.
    pub skipped: Vec<SkipReport>,
    /// Manifest files this commit changed relative to its baseline.
    pub files_changed: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct SkipReport {
    pub file: Arc<str>,
    pub line: u32,
    pub message: String,
}

impl From<&Skip> for SkipReport {
    fn from(s: &Skip) -> Self {
        Self {
            file: s.file.clone(),
            line: s.line,
            message: s.message.clone(),
        }
    }
}

/// A range judged as the one change it becomes when it lands whole: a
/// merge commit or a squash of a pull request, or Flux and Argo CD
/// applying its head. The gate judges each commit on its own, and a chain
/// of hops (2026.1 → 2026.2, then → 2027.1) is right for lockstep, which
/// applies one hop at a time; applied at once, it is a skip. Returns a
/// refusal for every object whose release the range moves more than one
/// hop in all (its first accepted `from` to its last accepted `to`), to be
/// added to the head commit, which is what lands.
pub fn as_one_change(report: &CheckReport<impl Sized>) -> Vec<ObjectVerdict> {
    use crate::gate::{Reason, Transition};
    use crate::release::{Step, TaggedRelease, step};
    let mut net: std::collections::BTreeMap<crate::kind::Key, (ObjectVerdict, Option<String>)> =
        Default::default();
    // Held is accepted in Git (`check --live`: the hop waits for the one
    // in flight); landed whole, it is applied at once all the same.
    let taken = |v: Verdict| matches!(v, Verdict::Accepted | Verdict::Held);
    for c in report.commits.iter().filter(|c| taken(c.verdict)) {
        for o in c.objects.iter().filter(|o| taken(o.verdict)) {
            let Some(key) = o.key() else { continue };
            net.entry(key)
                .and_modify(|(last, _)| *last = o.clone())
                .or_insert_with(|| (o.clone(), o.from.clone()));
        }
    }
    let mut out = Vec::new();
    for (last, first_from) in net.into_values() {
        let (Some(from), Some(to)) = (first_from.as_deref(), last.to.as_deref()) else {
            continue;
        };
        let (Ok(a), Ok(b)) = (TaggedRelease::parse(from), TaggedRelease::parse(to)) else {
            continue;
        };
        let (a, b) = (a.release, b.release);
        if step(a, b) != Step::Skip {
            continue;
        }
        let name = last.name.clone().unwrap_or_default();
        out.push(ObjectVerdict {
            from: Some(from.to_owned()),
            transition: Transition::Skip,
            verdict: Verdict::Refused,
            reason: Some(Reason::UpgradePathInvalid),
            message: format!(
                "{name} {from}→{to} as one change skips {}: a merge commit, a squash, or Flux and Argo CD applying the head take it at once; land one hop per pull request, or pass --lands-commit-by-commit when lockstep applies this branch and the range is merged by rebase or fast-forward",
                a.next()
            ),
            ..last
        });
    }
    out
}

/// Adds [`as_one_change`]'s refusals to the head commit, which is what
/// lands: the head's own verdict of such an object gives way to the whole
/// change's, one line per object, and the head and the report are refused.
/// `check` does it for its range, the daemon for a pull request's.
pub fn land_whole<M>(report: &mut CheckReport<M>) {
    let whole = as_one_change(report);
    if whole.is_empty() {
        return;
    }
    let Some(last) = report.commits.last_mut() else {
        return;
    };
    let keys: Vec<_> = whole.iter().filter_map(|o| o.key()).collect();
    last.objects
        .retain(|o| o.key().is_none_or(|k| !keys.contains(&k)));
    last.objects.extend(whole);
    last.verdict = Verdict::Refused;
    report.verdict = Verdict::Refused;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Transition;
    use crate::kind::Kind;

    fn nova(from: &str, to: &str, verdict: Verdict) -> ObjectVerdict {
        ObjectVerdict {
            kind: Some(Kind::Nova),
            namespace: Some("compute".into()),
            name: Some("nova".into()),
            file: Arc::from("nova.yaml"),
            line: 1,
            projected_by: None,
            from: Some(from.into()),
            to: Some(to.into()),
            from_image: None,
            to_image: None,
            transition: Transition::Upgrade,
            verdict,
            reason: None,
            message: String::new(),
        }
    }

    fn range(hops: Vec<ObjectVerdict>) -> CheckReport {
        CheckReport {
            verdict: Verdict::Accepted,
            base: None,
            head: "c".into(),
            commits: hops
                .into_iter()
                .enumerate()
                .map(|(i, o)| CommitReport {
                    sha: format!("{i}"),
                    summary: String::new(),
                    verdict: Verdict::Accepted,
                    objects: vec![o],
                    skipped: Vec::new(),
                    files_changed: 1,
                })
                .collect(),
            memory: (),
        }
    }

    /// Two hops in all are one skip when they land at once, a hop held on
    /// the live state included; one hop in all, or a refused hop, is not.
    #[test]
    fn a_range_moving_an_object_two_releases_is_one_skip() {
        for second in [Verdict::Accepted, Verdict::Held] {
            let r = range(vec![
                nova("2026.1", "2026.2", Verdict::Accepted),
                nova("2026.2", "2027.1", second),
            ]);
            let whole = as_one_change(&r);
            assert_eq!(whole.len(), 1, "{second:?}");
            assert_eq!(whole[0].from.as_deref(), Some("2026.1"));
            assert_eq!(whole[0].to.as_deref(), Some("2027.1"));
            assert_eq!(whole[0].verdict, Verdict::Refused);
        }
        let one = range(vec![
            nova("2026.1", "2026.2-p1", Verdict::Accepted),
            nova("2026.2-p1", "2026.2-p2", Verdict::Accepted),
        ]);
        assert!(as_one_change(&one).is_empty());
        let refused = range(vec![
            nova("2026.1", "2026.2", Verdict::Accepted),
            nova("2026.2", "2027.1", Verdict::Refused),
        ]);
        assert!(as_one_change(&refused).is_empty());
    }
}
