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
    let mut net = Net::default();
    for c in &report.commits {
        net.add(c);
    }
    net.skips.into_values().collect()
}

/// Each object's first accepted `from` and its last accepted verdict over
/// the commits added so far, and those whose two ends are a skip.
#[derive(Default)]
struct Net {
    ends: std::collections::BTreeMap<crate::kind::Key, (ObjectVerdict, Option<String>)>,
    skips: std::collections::BTreeMap<crate::kind::Key, ObjectVerdict>,
}

impl Net {
    fn add(&mut self, c: &CommitReport) {
        // Held is accepted in Git (`check --live`: the hop waits for the
        // one in flight); landed whole, it is applied at once all the same.
        let taken = |v: Verdict| matches!(v, Verdict::Accepted | Verdict::Held);
        if !taken(c.verdict) {
            return;
        }
        for o in c.objects.iter().filter(|o| taken(o.verdict)) {
            let Some(key) = o.key() else { continue };
            let (last, first_from) = self
                .ends
                .entry(key.clone())
                .and_modify(|(last, _)| *last = o.clone())
                .or_insert_with(|| (o.clone(), o.from.clone()));
            match skip(last, first_from.as_deref()) {
                Some(refusal) => {
                    self.skips.insert(key, refusal);
                }
                None => {
                    self.skips.remove(&key);
                }
            }
        }
    }
}

/// The refusal of an object whose release moves from `from` to its last
/// verdict's `to` more than one hop, if it does.
fn skip(last: &ObjectVerdict, from: Option<&str>) -> Option<ObjectVerdict> {
    use crate::gate::{Reason, Transition};
    use crate::release::{Step, TaggedRelease, step};
    let (from, to) = (from?, last.to.as_deref()?);
    let (a, b) = (
        TaggedRelease::parse(from).ok()?.release,
        TaggedRelease::parse(to).ok()?.release,
    );
    if step(a, b) != Step::Skip {
        return None;
    }
    let name = last.name.clone().unwrap_or_default();
    Some(ObjectVerdict {
        from: Some(from.to_owned()),
        transition: Transition::Skip,
        verdict: Verdict::Refused,
        reason: Some(Reason::UpgradePathInvalid),
        message: format!(
            "{name} {from}→{to} as one change skips {}: a merge commit, a squash, or Flux and Argo CD applying the head take it at once; land one hop per pull request, or pass --lands-commit-by-commit when lockstep applies this branch and the range is merged by rebase or fast-forward",
            a.next()
        ),
        ..last.clone()
    })
}

/// Gives each commit of a range the verdict of landing the range up to it
/// as one change ([`as_one_change`] of that prefix): an object such a
/// landing moves more than one hop is refused on the commit, its own
/// verdict there giving way (one line per object), and the commit and the
/// report are refused. The head's is what a merge or a squash of the whole
/// range lands; an earlier commit's is what it lands as the head of a
/// shorter pull request, so a commit's verdict depends on the commits
/// before it only, never on which pull request it was judged in. `check`
/// does it for its range, the daemon for a pull request's. One pass over
/// the range.
pub fn land_whole<M>(report: &mut CheckReport<M>) {
    let mut net = Net::default();
    for c in &mut report.commits {
        net.add(c);
        if net.skips.is_empty() {
            continue;
        }
        c.objects
            .retain(|o| o.key().is_none_or(|k| !net.skips.contains_key(&k)));
        c.objects.extend(net.skips.values().cloned());
        c.verdict = Verdict::Refused;
        report.verdict = Verdict::Refused;
    }
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

    /// Each commit is landed with the commits before it: a pull request of
    /// A (→2026.2), B (→2027.1) and C (another object) refuses B and C, and
    /// the shorter request A, B refuses B the same, so B's verdict does not
    /// depend on which request it was judged in (a review found B green in
    /// the longer one, posted over its refusal in the shorter).
    #[test]
    fn each_commit_lands_with_the_commits_before_it() {
        let mut other = nova("2026.1", "2026.1-p1", Verdict::Accepted);
        other.name = Some("cell".into());
        let long = || {
            range(vec![
                nova("2026.1", "2026.2", Verdict::Accepted),
                nova("2026.2", "2027.1", Verdict::Accepted),
                other.clone(),
            ])
        };
        let mut r = long();
        land_whole(&mut r);
        let verdicts: Vec<Verdict> = r.commits.iter().map(|c| c.verdict).collect();
        assert_eq!(
            verdicts,
            [Verdict::Accepted, Verdict::Refused, Verdict::Refused]
        );
        assert_eq!(r.verdict, Verdict::Refused);
        // B's Nova line gives way to the one change's; C keeps its own line
        // and carries the refusal too.
        assert_eq!(r.commits[1].objects.len(), 1);
        assert!(r.commits[1].objects[0].message.contains("as one change"));
        assert_eq!(r.commits[2].objects.len(), 2);
        let mut short = long();
        short.commits.truncate(2);
        land_whole(&mut short);
        assert_eq!(short.commits[1].verdict, Verdict::Refused);
        assert_eq!(
            short.commits[1].objects[0].message,
            r.commits[1].objects[0].message
        );
        // One hop in all: nothing changes.
        let mut fine = range(vec![nova("2026.1", "2026.2", Verdict::Accepted), other]);
        land_whole(&mut fine);
        assert!(fine.commits.iter().all(|c| c.verdict == Verdict::Accepted));
        assert_eq!(fine.verdict, Verdict::Accepted);
    }
}
