//! The dashboard's history as it is kept in the cluster (`docs/ui.md`,
//! "What survives a restart"): the journal entries the hop timelines are
//! drawn from (applies, phases, completions, failed tries, repairs, "needs a
//! person"), each with its wall-clock time, as one JSON text in the
//! `lockstep-history` ConfigMap, its own: never the verdict record's
//! `lockstep-records`, which a large history could otherwise fill up. A
//! restarted or newly elected daemon reads it back, so the pages still show
//! what happened before it started.
//!
//! Bounded: the newest entries whose text fits [`BUDGET`] (a ConfigMap
//! holds 1 MiB in all). Read back as
//! untrusted input: a value that is too large or not this format is
//! dropped whole, an entry that is malformed, too large, names no C5C3
//! kind or lies in the future is skipped; the caller warns once. Nothing
//! here decides anything, and nothing read is printed unescaped (the pages
//! escape it like every other string).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::daemon::Did;
use crate::daemon::record::{key_of, key_text};

/// At most this many bytes of history are written: the newest entries that
/// fit. Half of what a ConfigMap may hold (etcd need not take a full
/// object for a page's sake). The history has a ConfigMap of its own, so
/// were it ever full, only the history's write would fail, never the
/// verdict record's.
pub const BUDGET: usize = 512 * 1024;

/// A stored value longer than this is not read at all (a ConfigMap cannot
/// hold more; whoever wrote it was not lockstep).
const MAX_VALUE: usize = 1024 * 1024;

/// An entry longer than this (its JSON text) is skipped, on write and read.
const MAX_ENTRY: usize = 16 * 1024;

/// Entries later than the reader's clock by more than this are skipped (a
/// little skew between the pods' clocks is allowed).
const SKEW: i64 = 300;

const VERSION: u32 = 1;

/// One journal entry with its wall-clock time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub wall: Timestamp,
    pub what: Did,
}

/// Whether the pages draw an entry, so whether it is kept.
pub fn shown(d: &Did) -> bool {
    match d {
        Did::Applied { reassert, .. } => !reassert,
        Did::Phase { .. }
        | Did::Complete { .. }
        | Did::HopComplete { .. }
        | Did::Failed { .. }
        | Did::Repaired { .. }
        | Did::NeedsPerson { .. } => true,
        Did::PlanDecision { .. } | Did::PlanCommit { .. } => false,
    }
}

/// An entry as stored: `t` in whole seconds since the Unix epoch, objects
/// as `Kind/namespace/name`.
#[derive(Serialize, Deserialize)]
#[serde(tag = "did", rename_all = "camelCase")]
enum Stored {
    Applied {
        t: i64,
        unit: String,
        sha: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
    },
    Phase {
        t: i64,
        object: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
    },
    Complete {
        t: i64,
        object: String,
    },
    HopComplete {
        t: i64,
        unit: String,
        sha: String,
    },
    Failed {
        t: i64,
        object: String,
        reason: String,
    },
    Repaired {
        t: i64,
        object: String,
        message: String,
    },
    NeedsPerson {
        t: i64,
        unit: String,
        object: String,
        message: String,
    },
}

#[derive(Deserialize)]
struct Outer {
    version: u32,
    entries: Vec<serde_json::Value>,
}

fn stored(k: &Kept) -> Option<Stored> {
    let t = k.wall.as_second();
    Some(match &k.what {
        Did::Applied {
            unit,
            sha,
            from,
            to,
            reassert: false,
        } => Stored::Applied {
            t,
            unit: key_text(unit),
            sha: sha.clone(),
            from: from.clone(),
            to: to.clone(),
        },
        Did::Phase { object, phase } => Stored::Phase {
            t,
            object: key_text(object),
            phase: phase.clone(),
        },
        Did::Complete { object } => Stored::Complete {
            t,
            object: key_text(object),
        },
        Did::HopComplete { unit, sha } => Stored::HopComplete {
            t,
            unit: key_text(unit),
            sha: sha.clone(),
        },
        Did::Failed { object, reason } => Stored::Failed {
            t,
            object: key_text(object),
            reason: reason.clone(),
        },
        Did::Repaired { object, message } => Stored::Repaired {
            t,
            object: key_text(object),
            message: message.clone(),
        },
        Did::NeedsPerson {
            unit,
            object,
            message,
        } => Stored::NeedsPerson {
            t,
            unit: key_text(unit),
            object: key_text(object),
            message: message.clone(),
        },
        _ => return None,
    })
}

fn kept(s: Stored) -> Option<Kept> {
    let (t, what) = match s {
        Stored::Applied {
            t,
            unit,
            sha,
            from,
            to,
        } => (
            t,
            Did::Applied {
                unit: key_of(&unit)?,
                sha,
                from,
                to,
                reassert: false,
            },
        ),
        Stored::Phase { t, object, phase } => (
            t,
            Did::Phase {
                object: key_of(&object)?,
                phase,
            },
        ),
        Stored::Complete { t, object } => (
            t,
            Did::Complete {
                object: key_of(&object)?,
            },
        ),
        Stored::HopComplete { t, unit, sha } => (
            t,
            Did::HopComplete {
                unit: key_of(&unit)?,
                sha,
            },
        ),
        Stored::Failed { t, object, reason } => (
            t,
            Did::Failed {
                object: key_of(&object)?,
                reason,
            },
        ),
        Stored::Repaired { t, object, message } => (
            t,
            Did::Repaired {
                object: key_of(&object)?,
                message,
            },
        ),
        Stored::NeedsPerson {
            t,
            unit,
            object,
            message,
        } => (
            t,
            Did::NeedsPerson {
                unit: key_of(&unit)?,
                object: key_of(&object)?,
                message,
            },
        ),
    };
    Some(Kept {
        wall: Timestamp::from_second(t).ok()?,
        what,
    })
}

/// The newest entries of `journal` (oldest first) whose text fits in
/// `budget` bytes, as the stored value; and how many it holds.
pub fn encode<'a>(
    journal: impl DoubleEndedIterator<Item = &'a Kept>,
    budget: usize,
) -> (String, usize) {
    const HEAD: &str = "{\"version\":1,\"entries\":[";
    const TAIL: &str = "]}";
    let mut size = HEAD.len() + TAIL.len();
    let mut texts: Vec<String> = Vec::new();
    for k in journal.rev() {
        let Some(s) = stored(k) else { continue };
        // Plain data of strings and numbers: serialising cannot fail.
        let Ok(text) = serde_json::to_string(&s) else {
            continue;
        };
        if text.len() > MAX_ENTRY {
            continue;
        }
        if size + text.len() + 1 > budget {
            break;
        }
        size += text.len() + 1;
        texts.push(text);
    }
    texts.reverse();
    let n = texts.len();
    (format!("{HEAD}{}{TAIL}", texts.join(",")), n)
}

/// Why a stored value was dropped whole.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeepError {
    #[error("it is {0} bytes, more than a ConfigMap holds")]
    TooLarge(usize),
    #[error("it is not lockstep's history (line {line}, column {column})")]
    Malformed { line: usize, column: usize },
    #[error("it has version {0}, this lockstep reads version {VERSION}")]
    Version(u32),
}

/// What was read back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Oldest first.
    pub entries: Vec<Kept>,
    /// Entries skipped: malformed, too large, naming no C5C3 kind, or
    /// later than `now`.
    pub skipped: usize,
}

/// Reads a stored value back (`now`: the reader's wall clock).
pub fn decode(text: &str, now: Timestamp) -> Result<Restored, KeepError> {
    if text.len() > MAX_VALUE {
        return Err(KeepError::TooLarge(text.len()));
    }
    let outer: Outer = serde_json::from_str(text).map_err(|e| KeepError::Malformed {
        line: e.line(),
        column: e.column(),
    })?;
    if outer.version != VERSION {
        return Err(KeepError::Version(outer.version));
    }
    let latest = now.as_second().saturating_add(SKEW);
    let mut out = Restored::default();
    for v in outer.entries {
        let k = (v.to_string().len() <= MAX_ENTRY)
            .then(|| serde_json::from_value::<Stored>(v).ok())
            .flatten()
            .and_then(kept)
            .filter(|k| k.wall.as_second() <= latest);
        match k {
            Some(k) => out.entries.push(k),
            None => out.skipped += 1,
        }
    }
    // Stable: the journal's own order holds within a second.
    out.entries.sort_by_key(|k| k.wall);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::{Key, Kind};

    fn nova() -> Key {
        Key::new(Kind::Nova, "compute", "nova")
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_790_000_000 + s).unwrap()
    }

    fn hop(start: i64, n: usize) -> Vec<Kept> {
        let mut v = vec![Kept {
            wall: at(start),
            what: Did::Applied {
                unit: nova(),
                sha: format!("{n:040x}"),
                from: Some("2026.1".into()),
                to: Some("2026.2".into()),
                reassert: false,
            },
        }];
        for (i, p) in ["Expanding", "Migrating", "RollingUpdate", "Contracting"]
            .into_iter()
            .enumerate()
        {
            v.push(Kept {
                wall: at(start + 60 * (i as i64 + 1)),
                what: Did::Phase {
                    object: nova(),
                    phase: Some(p.into()),
                },
            });
        }
        v.push(Kept {
            wall: at(start + 300),
            what: Did::Failed {
                object: nova(),
                reason: "Job nova-db-sync failed <script>x</script>".into(),
            },
        });
        v.push(Kept {
            wall: at(start + 400),
            what: Did::HopComplete {
                unit: nova(),
                sha: format!("{n:040x}"),
            },
        });
        v
    }

    #[test]
    fn the_history_round_trips_with_its_wall_clock_times() {
        let mut j = hop(0, 1);
        // Not drawn, so not kept.
        j.push(Kept {
            wall: at(500),
            what: Did::PlanCommit { sha: "x".into() },
        });
        j.push(Kept {
            wall: at(501),
            what: Did::Applied {
                unit: nova(),
                sha: "y".into(),
                from: None,
                to: None,
                reassert: true,
            },
        });
        let (text, n) = encode(j.iter(), BUDGET);
        assert_eq!(n, 7);
        let back = decode(&text, at(1000)).unwrap();
        assert_eq!(back.skipped, 0);
        assert_eq!(back.entries, j[..7]);
    }

    #[test]
    fn the_newest_entries_that_fit_the_budget_are_kept() {
        let j: Vec<Kept> = (0..400).flat_map(|n| hop(n * 1000, n as usize)).collect();
        let (all, _) = encode(j.iter(), usize::MAX);
        let budget = 20_000;
        assert!(all.len() > budget * 5, "{}", all.len());
        let (text, n) = encode(j.iter(), budget);
        assert!(text.len() <= budget, "{} > {budget}", text.len());
        // Nearly full: entries are small.
        assert!(text.len() > budget - 400, "{}", text.len());
        let back = decode(&text, at(1_000_000)).unwrap();
        assert_eq!(back.entries.len(), n);
        // The newest, in order, ending with the last thing that happened.
        assert_eq!(back.entries, j[j.len() - n..]);
        // The real budget holds thousands of entries, well under a
        // ConfigMap's 1 MiB.
        let (text, n) = encode(j.iter(), BUDGET);
        assert!(text.len() <= BUDGET && n > 2_000, "{} {n}", text.len());
        // An entry larger than any page should hold is left out, not the
        // history behind it.
        let mut big = hop(0, 1);
        big.insert(
            3,
            Kept {
                wall: at(70),
                what: Did::Repaired {
                    object: nova(),
                    message: "x".repeat(MAX_ENTRY),
                },
            },
        );
        let (text, n) = encode(big.iter(), BUDGET);
        assert_eq!(n, 7);
        assert!(!text.contains("xxxx"));
    }

    #[test]
    fn a_corrupt_value_is_dropped_and_corrupt_entries_are_skipped() {
        let now = at(10_000);
        for (bad, want) in [
            ("", "not lockstep's history"),
            ("{", "not lockstep's history"),
            ("[1,2]", "not lockstep's history"),
            (r#"{"version":2,"entries":[]}"#, "version 2"),
            (r#"{"version":1}"#, "not lockstep's history"),
        ] {
            let e = decode(bad, now).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
        let huge = format!(r#"{{"version":1,"entries":["{}"]}}"#, "a".repeat(MAX_VALUE));
        assert!(matches!(decode(&huge, now), Err(KeepError::TooLarge(_))));

        let (good, _) = encode(hop(0, 1).iter(), BUDGET);
        let bad_entries = [
            r#"7"#,
            r#"{"did":"applied"}"#,
            r#"{"did":"launch","t":1}"#,
            r#"{"did":"complete","t":1,"object":"Pod/a/b"}"#,
            r#"{"did":"complete","t":1,"object":"Nova"}"#,
            r#"{"did":"complete","t":"soon","object":"Nova/a/b"}"#,
            r#"{"did":"complete","t":99999999999999,"object":"Nova/a/b"}"#,
            // In the future: a clock far off, or not our writer.
            &format!(
                r#"{{"did":"complete","t":{},"object":"Nova/a/b"}}"#,
                at(20_000).as_second()
            ),
            &format!(
                r#"{{"did":"repaired","t":1,"object":"Nova/a/b","message":"{}"}}"#,
                "m".repeat(MAX_ENTRY)
            ),
        ];
        let spliced = good.replacen(
            "\"entries\":[",
            &format!("\"entries\":[{},", bad_entries.join(",")),
            1,
        );
        let back = decode(&spliced, now).unwrap();
        assert_eq!(back.skipped, bad_entries.len());
        assert_eq!(back.entries, hop(0, 1));
        // What the text says is kept as it is: escaping is the page's job.
        assert!(back.entries.iter().any(|k| matches!(
            &k.what,
            Did::Failed { reason, .. } if reason.contains("<script>")
        )));
    }
}
