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

/// The version of a record that holds objects deleted outside Git
/// ([`Record::deleted`]). A record without any is written as version 1,
/// which older builds read; one with some is refused by them by its
/// version, not read as a damaged record (or, worse, without them).
const VERSION_DELETED: u32 = 2;

/// At most this many commits are kept; the oldest go first. Live verdicts
/// are rare (aborts, held and refused hops while one is in flight); a
/// pruned commit is far behind the head and is judged from Git alone.
const MAX_COMMITS: usize = 2_000;

/// At most this many bytes of text per cluster name, the oldest commits
/// going first. A ConfigMap holds 1 MiB in all and several cluster names
/// may share `lockstep-records`; a record written past that is refused by
/// the API server, and a record that cannot be written stops every pass.
pub const MAX_BYTES: usize = 200 * 1024;

/// Up to this size the record is plain JSON, readable with `kubectl`;
/// above it, the same JSON gzip'd and base64'd (`{"version":1,"gzip":…}`),
/// about a twelfth of the size: commits judged with the same objects
/// repeat the same names and releases.
const PLAIN_MAX: usize = 64 * 1024;

/// A gzip'd record that inflates past this is refused, not read: it was
/// not written by lockstep, which never writes more than [`MAX_BYTES`]
/// compressed from far less.
const MAX_INFLATED: u64 = 64 * 1024 * 1024;

/// The record stored compressed.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Packed {
    version: u32,
    gzip: String,
}

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
    /// Objects deleted from the cluster outside Git, with the release
    /// each was at (`daemon::units`, `note_gone`): kept here so that a
    /// restarted or newly elected daemon re-creates them there too, not
    /// at Git's newest release (which would migrate their databases
    /// across several releases at once). Sorted by object; never dropped
    /// to fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<Deleted>,
}

/// One object deleted outside Git.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    /// `kind/namespace/name`.
    pub object: String,
    /// The release it was at when it was last read present.
    pub release: String,
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
        "lockstep's record of live verdicts has version {0}, this lockstep reads versions {VERSION} and {VERSION_DELETED} (a record written by a newer lockstep: run that one, or a newer one)"
    )]
    Version(u32),
    /// No record, but an object lockstep applied to: a first start cannot
    /// look like that, since the record is written before the first apply.
    #[error(
        "lockstep's record of live verdicts ({location}) is missing, but {object} carries {annotation}: lockstep applied to this cluster before, so its record was lost (deleted, or lockstep now runs in another namespace or under another cluster name). lockstep will not judge until the record is back: without it, a verdict the live state decided, such as an abort, would be judged again from Git alone, and the hop it aborted applied again. Restore the record from a backup. To judge from Git alone instead, as on a first start, write an empty record, {{\"version\":1}}, under that key (docs/gate.md, \"Verdicts don't move\")",
        annotation = crate::rollout::APPLIED_ANNOTATION
    )]
    Lost { location: String, object: String },
    /// The objects deleted outside Git alone exceed the bound.
    #[error(
        "{count} objects deleted from the cluster outside Git take {bytes} bytes in lockstep's record, more than the {MAX_BYTES} bytes it keeps per cluster name; lockstep keeps each until it is back in the cluster or removed from Git (re-created at Git's newest release, its database would be migrated across several releases at once). Re-create them where they were, or remove them from Git"
    )]
    TooManyDeleted { count: usize, bytes: usize },
    /// This pass's own entries alone exceed the bound.
    #[error(
        "the live verdicts of {commits} new commit(s), over {objects} objects, take {bytes} bytes in lockstep's record, more than the {MAX_BYTES} bytes it keeps per cluster name; lockstep gives no verdict it cannot record, so it judges no further (a commit that moves thousands of objects while a hop is in flight; docs/gate.md, \"Verdicts don't move\")"
    )]
    TooLarge {
        commits: usize,
        objects: usize,
        bytes: usize,
    },
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
        let inflated;
        let text = match serde_json::from_str::<Packed>(text) {
            Ok(p) if p.version == VERSION || p.version == VERSION_DELETED => {
                inflated = inflate(&p.gzip).map_err(RecordError::Malformed)?;
                inflated.as_str()
            }
            Ok(p) => return Err(RecordError::Version(p.version)),
            Err(_) => text,
        };
        let r: Record = serde_json::from_str(text).map_err(|e| {
            RecordError::Malformed(format!("line {}, column {}", e.line(), e.column()))
        })?;
        if r.version != VERSION && r.version != VERSION_DELETED {
            return Err(RecordError::Version(r.version));
        }
        for d in &r.deleted {
            if key_of(&d.object).is_none()
                || crate::release::TaggedRelease::parse(&d.release).is_err()
            {
                return Err(RecordError::Malformed(format!(
                    "deleted object {} at {}: names no C5C3 kind, or no release",
                    crate::escape::escape(&d.object),
                    crate::escape::escape(&d.release)
                )));
            }
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

    /// The record as it is stored: plain JSON while small, gzip'd above
    /// [`PLAIN_MAX`].
    pub fn to_text(&self) -> String {
        // Plain data of strings: serialising cannot fail.
        let plain = serde_json::to_string(self).unwrap_or_default();
        if plain.len() <= PLAIN_MAX {
            return plain;
        }
        serde_json::to_string(&Packed {
            version: self.version,
            gzip: deflate(&plain),
        })
        .unwrap_or_default()
    }

    /// The text to store, after dropping the oldest commits until it is at
    /// most [`MAX_BYTES`]; returns it with the number dropped. The newest
    /// `keep` commits (this pass's) are never dropped: their verdicts are
    /// about to be posted, and a verdict that cannot be recorded is not
    /// given ([`RecordError::TooLarge`]). An older commit dropped is judged
    /// from Git alone after a restart, as one pruned by count is: the bound
    /// keeps every pass from failing on a record the API server would
    /// refuse.
    pub fn fit(&mut self, keep: usize) -> Result<(String, usize), RecordError> {
        self.version = if self.deleted.is_empty() {
            VERSION
        } else {
            VERSION_DELETED
        };
        let text = self.to_text();
        if text.len() <= MAX_BYTES {
            return Ok((text, 0));
        }
        let keep = keep.min(self.commits.len());
        let most = self.commits.len() - keep;
        let without = |drop: usize| Record {
            version: self.version,
            watermark: self.watermark.clone(),
            commits: self.commits[drop..].to_vec(),
            deleted: self.deleted.clone(),
        };
        if !self.deleted.is_empty() {
            let alone = Record {
                commits: Vec::new(),
                ..without(self.commits.len())
            };
            let bytes = alone.to_text().len();
            if bytes > MAX_BYTES {
                return Err(RecordError::TooManyDeleted {
                    count: self.deleted.len(),
                    bytes,
                });
            }
        }
        let bytes = without(most).to_text().len();
        if bytes > MAX_BYTES {
            return Err(RecordError::TooLarge {
                commits: keep,
                bytes,
                objects: self.commits[most..].iter().map(|e| e.objects.len()).sum(),
            });
        }
        // The fewest oldest commits to drop: dropping `most` fits, dropping
        // none does not.
        let (mut short, mut enough) = (0, most);
        while enough - short > 1 {
            let mid = short + (enough - short) / 2;
            if without(mid).to_text().len() <= MAX_BYTES {
                enough = mid;
            } else {
                short = mid;
            }
        }
        self.commits.drain(..enough);
        Ok((self.to_text(), enough))
    }

    /// The objects deleted outside Git, as the daemon keeps them.
    pub fn deleted(&self) -> HashMap<Key, String> {
        self.deleted
            .iter()
            .filter_map(|d| Some((key_of(&d.object)?, d.release.clone())))
            .collect()
    }

    /// Sets the objects deleted outside Git to `gone`.
    pub fn set_deleted(&mut self, gone: &HashMap<Key, String>) {
        self.deleted = gone
            .iter()
            .map(|(k, r)| Deleted {
                object: key_text(k),
                release: r.clone(),
            })
            .collect();
        self.deleted.sort_by(|a, b| a.object.cmp(&b.object));
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

fn deflate(text: &str) -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to memory cannot fail.
    let _ = gz.write_all(text.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap_or_default())
}

fn inflate(b64: &str) -> Result<String, String> {
    use base64::Engine as _;
    use std::io::Read as _;
    // A record restored by hand may come wrapped (GNU base64's 76 columns).
    let b64: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| "its gzip field is not base64".to_owned())?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(MAX_INFLATED + 1)
        .read_to_string(&mut text)
        .map_err(|_| "its gzip field is not gzip'd UTF-8 text".to_owned())?;
    if text.len() as u64 > MAX_INFLATED {
        return Err(format!(
            "its gzip field inflates past {} MiB",
            MAX_INFLATED >> 20
        ));
    }
    Ok(text)
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
            r#"{"version":3,"commits":[]}"#,
            r#"{"version":1,"commits":[],"extra":1}"#,
            r#"{"version":2,"deleted":[{"object":"Pod/a/b","release":"2026.1"}]}"#,
            r#"{"version":2,"deleted":[{"object":"Nova/a/b","release":"latest"}]}"#,
            r#"{"version":2,"deleted":[{"object":"Nova/a/b"}]}"#,
            r#"{"version":1,"commits":[{"commit":"c","objects":[{"kind":"Pod","namespace":"a","name":"b"}]}]}"#,
        ] {
            let e = Record::parse(bad).unwrap_err().to_string();
            assert!(e.contains("record of live verdicts"), "{bad}: {e}");
            assert!(!e.contains("serde"), "{e}");
        }
    }

    #[test]
    fn objects_deleted_outside_git_are_kept_and_mark_the_version() {
        let mut gone = HashMap::new();
        gone.insert(Key::new(Kind::Nova, "compute", "nova"), "2026.2".to_owned());
        gone.insert(glance(), "2026.1".to_owned());
        let mut r = busy(3, 2);
        r.set_deleted(&gone);
        let (text, _) = r.fit(0).unwrap();
        assert!(text.starts_with(r#"{"version":2,"#), "{text}");
        let back = Record::parse(&text).unwrap();
        assert_eq!(back.deleted(), gone);
        assert_eq!(back.deleted[0].object, "Glance/openstack/glance", "sorted");
        // None left: version 1 again, which older builds read.
        r.set_deleted(&HashMap::new());
        let (text, _) = r.fit(0).unwrap();
        assert!(text.starts_with(r#"{"version":1,"#), "{text}");
        assert!(!text.contains("deleted"), "{text}");
        // Gzip'd, the wrapper carries the version too.
        let mut big = busy(40, 150);
        big.set_deleted(&gone);
        let (text, _) = big.fit(1).unwrap();
        assert!(
            text.starts_with(r#"{"version":2,"gzip""#),
            "{}",
            &text[..40]
        );
        assert_eq!(Record::parse(&text).unwrap().deleted(), gone);
    }

    #[test]
    fn objects_deleted_outside_git_are_never_dropped_to_fit() {
        let mut r = busy(400, 150);
        let mut gone = HashMap::new();
        for i in 0..50 {
            gone.insert(
                Key::new(Kind::Nova, "compute", format!("nova-{i}")),
                "2026.1".to_owned(),
            );
        }
        r.set_deleted(&gone);
        let (text, dropped) = r.fit(1).unwrap();
        assert!(dropped > 0 && text.len() <= MAX_BYTES);
        assert_eq!(Record::parse(&text).unwrap().deleted().len(), 50);
        // More than fits alone is refused, naming what to do.
        let mut many = HashMap::new();
        for i in 0..40_000u64 {
            many.insert(
                Key::new(
                    Kind::Nova,
                    format!("ns-{:x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    format!("nova-{:x}", i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)),
                ),
                "2026.1".to_owned(),
            );
        }
        r.set_deleted(&many);
        let e = r.fit(0).unwrap_err().to_string();
        assert!(
            e.contains("40000 objects deleted from the cluster outside Git"),
            "{e}"
        );
    }

    /// Commits of `objects` objects each, with the strings an operator
    /// writes, and a few distinct bytes per commit (its id, a digest).
    fn busy(commits: usize, objects: usize) -> Record {
        let keys: Vec<Key> = (0..objects)
            .map(|i| Key::new(Kind::Nova, "compute", format!("region-{i:04}-nova")))
            .collect();
        let mut r = Record::new();
        for c in 0..commits {
            let mut live = Live::default();
            for (i, k) in keys.iter().enumerate() {
                live.objects.insert(
                    k.clone(),
                    LiveStatus {
                        installed_release: Some("2026.1".into()),
                        target_release: Some("2026.2".into()),
                        upgrade_phase: Some("Expanding".into()),
                        installed_image: Some(format!(
                            "registry.example/c5c3/nova@sha256:{:064x}",
                            (c * 7919 + i) as u128 * 0x9e37_79b9_7f4a_7c15
                        )),
                        ..LiveStatus::default()
                    },
                );
            }
            r.add(&format!("{c:040x}"), &live, &keys);
        }
        r.watermark = Some(format!("{commits:040x}"));
        r
    }

    #[test]
    fn a_large_record_is_stored_gzipped_and_reads_back() {
        let mut r = busy(40, 150);
        let plain = serde_json::to_string(&r).unwrap().len();
        let (text, dropped) = r.fit(1).unwrap();
        assert_eq!(dropped, 0, "{} bytes plain", plain);
        assert!(plain > MAX_BYTES, "the test needs a record past the bound");
        assert!(text.len() <= MAX_BYTES, "{} of {plain}", text.len());
        assert!(
            text.starts_with(r#"{"version":1,"gzip":""#),
            "{}",
            &text[..40]
        );
        assert_eq!(Record::parse(&text).unwrap(), r);
        // Small records stay plain JSON, for a person reading them.
        let mut small = busy(2, 3);
        let (text, _) = small.fit(1).unwrap();
        assert!(text.contains(r#""commits":[{"commit":"#), "{text}");
        assert_eq!(Record::parse(&text).unwrap(), small);
    }

    /// However many live-decided commits over however many objects, the
    /// stored text fits its share of the ConfigMap: the newest commits are
    /// kept, the oldest dropped, fewest first.
    #[test]
    fn a_record_past_its_bound_drops_its_oldest_commits() {
        let mut r = busy(400, 150);
        let newest = r.commits.last().unwrap().commit.clone();
        let (text, dropped) = r.fit(1).unwrap();
        assert!(dropped > 0 && dropped < 400, "{dropped}");
        assert!(text.len() <= MAX_BYTES, "{}", text.len());
        assert_eq!(r.commits.len(), 400 - dropped);
        assert_eq!(r.commits.last().unwrap().commit, newest);
        assert_eq!(r.commits[0].commit, format!("{dropped:040x}"));
        let back = Record::parse(&text).unwrap();
        assert_eq!(back, r);
        // One more commit's worth would not have fitted.
        let mut more = busy(400, 150);
        more.commits.drain(..dropped - 1);
        assert!(more.to_text().len() > MAX_BYTES);
        // This pass's own commits are never dropped: when they alone are
        // too large, nothing fits and nothing is dropped.
        let mut r = busy(400, 150);
        let e = r.fit(300).unwrap_err();
        assert!(
            matches!(
                e,
                RecordError::TooLarge {
                    commits: 300,
                    objects: 45_000,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("gives no verdict it cannot record"),
            "{e}"
        );
        assert_eq!(r.commits.len(), 400);
        let (_, dropped) = r.fit(10).unwrap();
        assert_eq!(r.commits.len(), 400 - dropped);
    }

    #[test]
    fn a_damaged_gzipped_record_is_refused() {
        use std::io::Write as _;
        let bomb = {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            let zeros = vec![b' '; 1 << 20];
            for _ in 0..(MAX_INFLATED >> 20) + 1 {
                gz.write_all(&zeros).unwrap();
            }
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap())
        };
        for (bad, why) in [
            (r#"{"version":1,"gzip":"!!"}"#.to_owned(), "not base64"),
            (
                r#"{"version":1,"gzip":"aGVsbG8="}"#.to_owned(),
                "not gzip'd",
            ),
            (
                format!(r#"{{"version":1,"gzip":"{bomb}"}}"#),
                "inflates past 64 MiB",
            ),
            (
                format!(r#"{{"version":1,"gzip":"{}"}}"#, deflate("{")),
                "line 1, column 1",
            ),
        ] {
            let e = Record::parse(&bad).unwrap_err().to_string();
            assert!(
                e.contains("record of live verdicts") && e.contains(why),
                "{e}"
            );
        }
        let e = Record::parse(&format!(r#"{{"version":3,"gzip":"{}"}}"#, deflate("{}")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("has version 3"), "{e}");
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
