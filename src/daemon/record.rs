//! What the live state decided, written down. The daemon judges a new
//! commit with the cluster as it is at that moment (`docs/gate.md`, "Live
//! rules in the daemon"): an abort is accepted while a hop is in flight, a
//! next release is held behind it. Minutes later the same commit, judged
//! again, would read otherwise (the abort completed, so the set-back is now
//! a downgrade). So every commit whose live verdict differs from its Git-only
//! one is recorded with the live status it was judged with, in the cluster
//! it was judged against (`Cluster::save_record`), and a restarted or
//! newly elected daemon judges that commit with the recorded state again:
//! the verdict is a pure function of Git and the record, and never moves.
//!
//! The record also keeps a watermark: the branch head up to which every
//! commit was judged. Commits after it (pushed while no daemon ran) are new
//! and judged live; commits up to it, without a record entry, were judged
//! the same with or without the live state, so Git alone reproduces them.
//! A daemon's first start has no watermark: history is judged from Git
//! alone (its commits are the past, not requests to the cluster of today).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::kind::{Key, Kind};
use crate::live::{Live, LiveStatus};

/// The record format's version; a record of another version is refused.
const VERSION: u32 = 1;

/// At most this many commits are kept; the oldest go first. Live verdicts
/// are rare (aborts, held and refused hops while one is in flight); a
/// pruned commit is far behind the head and is judged from Git alone.
const MAX_COMMITS: usize = 2_000;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub version: u32,
    /// Every first-parent commit up to this one was judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<String>,
    /// Commits whose verdict the live state decided, in the order judged.
    #[serde(default)]
    pub commits: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub commit: String,
    pub objects: Vec<Object>,
}

/// What the gate read of one object's live status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Object {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_release: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_release: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_image: Option<String>,
    /// `kind/namespace/name` of the ControlPlane projecting the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projected_by: Option<String>,
}

#[derive(Debug, Error)]
pub enum RecordError {
    #[error(
        "lockstep's record of live verdicts cannot be read ({0}); lockstep will not judge until it can (a lost record could turn a posted verdict around). Restore the record's key in ConfigMap lockstep-records from a backup. To judge from Git alone instead, as on a first start, write an empty record, {{\"version\":1}}, under that key: a verdict the live state decided, such as an abort, is then judged again without it, and the hop it aborted may be applied again (docs/gate.md, \"Verdicts don't move\")"
    )]
    Malformed(String),
    #[error(
        "lockstep's record of live verdicts has version {0}, this lockstep reads version {VERSION}"
    )]
    Version(u32),
    /// No record, but an object lockstep applied to: a first start cannot
    /// look like that, since the record is written before the first apply.
    #[error(
        "lockstep's record of live verdicts ({location}) is missing, but {object} carries {annotation}: lockstep applied to this cluster before, so its record was lost (deleted, or lockstep now runs in another namespace or under another cluster name). lockstep will not judge until the record is back: without it, a verdict the live state decided, such as an abort, would be judged again from Git alone, and the hop it aborted applied again. Restore the record from a backup. To judge from Git alone instead, as on a first start, write an empty record, {{\"version\":1}}, under that key (docs/gate.md, \"Verdicts don't move\")",
        annotation = crate::rollout::APPLIED_ANNOTATION
    )]
    Lost { location: String, object: String },
}

fn kind_of(s: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| k.as_str() == s)
}

pub(crate) fn key_text(k: &Key) -> String {
    format!("{}/{}/{}", k.kind.as_str(), k.namespace, k.name)
}

pub(crate) fn key_of(s: &str) -> Option<Key> {
    let mut it = s.splitn(3, '/');
    let kind = kind_of(it.next()?)?;
    let ns = it.next()?;
    let name = it.next()?;
    Some(Key::new(kind, ns, name))
}

impl Record {
    pub fn new() -> Self {
        Self {
            version: VERSION,
            ..Self::default()
        }
    }

    pub fn parse(text: &str) -> Result<Self, RecordError> {
        let r: Record = serde_json::from_str(text).map_err(|e| {
            RecordError::Malformed(format!("line {}, column {}", e.line(), e.column()))
        })?;
        if r.version != VERSION {
            return Err(RecordError::Version(r.version));
        }
        for e in &r.commits {
            for o in &e.objects {
                if kind_of(&o.kind).is_none()
                    || o.projected_by
                        .as_deref()
                        .is_some_and(|p| key_of(p).is_none())
                {
                    return Err(RecordError::Malformed(format!(
                        "commit {}: object {} names no C5C3 kind or plane",
                        crate::escape::escape(&e.commit),
                        crate::escape::escape(&o.name)
                    )));
                }
            }
        }
        Ok(r)
    }

    pub fn to_text(&self) -> String {
        // Plain data of strings: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The recorded live state of every recorded commit, for the judge.
    pub fn lives(&self) -> HashMap<String, Live> {
        self.commits
            .iter()
            .map(|e| {
                let objects = e
                    .objects
                    .iter()
                    .filter_map(|o| {
                        Some((
                            Key::new(kind_of(&o.kind)?, &o.namespace, &o.name),
                            LiveStatus {
                                installed_release: o.installed_release.clone(),
                                target_release: o.target_release.clone(),
                                upgrade_phase: o.upgrade_phase.clone(),
                                installed_image: o.installed_image.clone(),
                                projected_by: o.projected_by.as_deref().and_then(key_of),
                                ..LiveStatus::default()
                            },
                        ))
                    })
                    .collect();
                (e.commit.clone(), Live { objects })
            })
            .collect()
    }

    /// Records that `commit` was judged with `live` (only the objects it
    /// holds are kept).
    pub fn add(&mut self, commit: &str, live: &Live, keys: &[Key]) {
        let mut objects: Vec<Object> = keys
            .iter()
            .filter_map(|k| live.get(k).map(|s| (k, s)))
            .map(|(k, s)| Object {
                kind: k.kind.as_str().to_owned(),
                namespace: k.namespace.clone(),
                name: k.name.clone(),
                installed_release: s.installed_release.clone(),
                target_release: s.target_release.clone(),
                upgrade_phase: s.upgrade_phase.clone(),
                installed_image: s.installed_image.clone(),
                projected_by: s.projected_by.as_ref().map(key_text),
            })
            .collect();
        objects.sort_by(|a, b| {
            (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name))
        });
        objects
            .dedup_by(|a, b| (&a.kind, &a.namespace, &a.name) == (&b.kind, &b.namespace, &b.name));
        self.commits.retain(|e| e.commit != commit);
        self.commits.push(Entry {
            commit: commit.to_owned(),
            objects,
        });
        if self.commits.len() > MAX_COMMITS {
            let extra = self.commits.len() - MAX_COMMITS;
            self.commits.drain(..extra);
        }
    }
}

/// The name a cluster's record is kept under.
pub fn name(cluster: &str) -> String {
    format!("verdicts.{cluster}")
}

/// The lives of a record, shared with the judge.
pub fn shared(r: &Record) -> Option<Arc<HashMap<String, Live>>> {
    (!r.commits.is_empty()).then(|| Arc::new(r.lives()))
}

/// Whether two judgments of one commit differ in anything a status or a
/// chain reads.
pub fn differs(a: &crate::history::CommitReport, b: &crate::history::CommitReport) -> bool {
    a.verdict != b.verdict || a.objects != b.objects
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glance() -> Key {
        Key::new(Kind::Glance, "openstack", "glance")
    }

    #[test]
    fn a_record_round_trips_and_replays_the_live_state() {
        let mut live = Live::default();
        live.objects.insert(
            glance(),
            LiveStatus {
                installed_release: Some("2026.1".into()),
                target_release: Some("2026.2".into()),
                upgrade_phase: Some("Expanding".into()),
                projected_by: Some(Key::new(Kind::ControlPlane, "openstack", "prod")),
                ..LiveStatus::default()
            },
        );
        let mut r = Record {
            watermark: Some("abc".into()),
            ..Record::new()
        };
        r.add("c1", &live, &[glance(), Key::new(Kind::Nova, "x", "y")]);
        let back = Record::parse(&r.to_text()).unwrap();
        assert_eq!(back, r);
        let lives = back.lives();
        let s = lives["c1"].get(&glance()).unwrap();
        assert_eq!(s.upgrade_phase.as_deref(), Some("Expanding"));
        assert_eq!(
            s.projected_by,
            Some(Key::new(Kind::ControlPlane, "openstack", "prod"))
        );
        // Only objects the live state had are kept.
        assert_eq!(back.commits[0].objects.len(), 1);
    }

    #[test]
    fn a_damaged_record_is_refused_not_read_as_empty() {
        for bad in [
            "",
            "{",
            r#"{"version":2,"commits":[]}"#,
            r#"{"version":1,"commits":[],"extra":1}"#,
            r#"{"version":1,"commits":[{"commit":"c","objects":[{"kind":"Pod","namespace":"a","name":"b"}]}]}"#,
        ] {
            let e = Record::parse(bad).unwrap_err().to_string();
            assert!(e.contains("record of live verdicts"), "{bad}: {e}");
            assert!(!e.contains("serde"), "{e}");
        }
    }

    #[test]
    fn the_record_keeps_the_newest_commits() {
        let mut r = Record::new();
        for i in 0..MAX_COMMITS + 5 {
            r.add(&format!("c{i}"), &Live::default(), &[]);
        }
        assert_eq!(r.commits.len(), MAX_COMMITS);
        assert_eq!(r.commits[0].commit, "c5");
    }
}
