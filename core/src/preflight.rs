//! Pre-flight gates: what must be true of the live cluster before a hop is
//! applied ("never start a hop without a fresh database backup", "every
//! child Ready first"). They are part of an `UpgradePolicy`
//! (`core/src/policy.rs`, `docs/policy.md`) but, unlike blocked edges and
//! acknowledgements, they are never judged with a commit: a pull request is
//! not refused for a backup that will be taken before the hop is applied.
//! The daemon checks them on the live state each time it is about to apply
//! a release hop; while one fails the hop waits (not refused, not applied)
//! and its commit status stays pending, saying why ([`wait`]).
//!
//! Everything here is pure: the shell reads mariadb-operator's `Backup`
//! objects (`k8s.mariadb.com/v1alpha1`) and the children's `Ready`
//! conditions, and hands them in with the calendar's time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::kind::{Key, Kind};

/// The API group, version and plural of mariadb-operator's Backup.
pub const BACKUP_GROUP: &str = "k8s.mariadb.com";
pub const BACKUP_VERSION: &str = "v1alpha1";
pub const BACKUP_KIND: &str = "Backup";
pub const BACKUP_PLURAL: &str = "backups";

/// The condition reasons mariadb-operator (v0.38.1, `pkg/condition/complete.go`)
/// sets with `Complete=True` when a backup succeeded: a one-shot Backup's
/// Job, or a scheduled Backup's CronJob (the operator's own spelling).
/// `Complete=True` alone is not success: a failed Job is `Complete=True`
/// with reason `JobFailed`. Any other reason is not counted (fail closed).
pub const SUCCESS_REASONS: [&str; 3] = ["JobComplete", "CronJobSucess", "CronJobSuccess"];

/// A Backup's completion timestamp may be ahead of lockstep's clock by this
/// much (clock skew between nodes) and still count; further ahead, it is
/// not believed.
pub const MAX_SKEW: Duration = Duration::from_secs(300);

/// A mariadb-operator `Backup`, as far as the gate reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backup {
    pub namespace: String,
    pub name: String,
    /// `spec.mariaDbRef.name`: the MariaDB it backs up.
    pub mariadb: String,
    /// `spec.mariaDbRef.namespace`, else the Backup's own namespace.
    pub mariadb_namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Its `Complete` condition, if any.
    pub complete: Option<Completion>,
}

/// A Backup's `Complete` condition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub status: String,
    pub reason: String,
    /// `lastTransitionTime` in seconds since the epoch; `None` when absent
    /// or unreadable (then the backup does not count).
    pub at: Option<i64>,
}

impl Backup {
    /// A Backup from its JSON (a list item from the API server, or the
    /// simulator's copy). `None` when it has no name or no MariaDB reference.
    pub fn from_json(v: &serde_json::Value) -> Option<Self> {
        let text = |p: &str| v.pointer(p).and_then(|x| x.as_str()).map(str::to_owned);
        let namespace = text("/metadata/namespace").unwrap_or_default();
        let name = text("/metadata/name")?;
        let mariadb = text("/spec/mariaDbRef/name").filter(|s| !s.is_empty())?;
        let mariadb_namespace = text("/spec/mariaDbRef/namespace")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| namespace.clone());
        let labels = v
            .pointer("/metadata/labels")
            .and_then(|l| l.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let complete = v
            .pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Complete"))
            })
            .map(|c| {
                let s = |k: &str| {
                    c.get(k)
                        .and_then(|x| x.as_str())
                        .unwrap_or_default()
                        .to_owned()
                };
                Completion {
                    status: s("status"),
                    reason: s("reason"),
                    at: c
                        .get("lastTransitionTime")
                        .and_then(|t| t.as_str())
                        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                        .map(|t| t.as_second()),
                }
            });
        Some(Self {
            namespace,
            name,
            mariadb,
            mariadb_namespace,
            labels,
            complete,
        })
    }

    /// When it completed successfully, if it did.
    pub fn succeeded_at(&self) -> Option<i64> {
        let c = self.complete.as_ref()?;
        (c.status == "True" && SUCCESS_REASONS.contains(&c.reason.as_str()))
            .then_some(c.at)
            .flatten()
    }
}

/// Which Backups stand for a unit's database: the MariaDB they name
/// (`spec.mariaDbRef`), and/or labels on the Backup. At least one is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupGate {
    /// `spec.mariaDbRef.name` of the Backups that count.
    pub mariadb: Option<String>,
    /// The MariaDB's namespace (`spec.mariaDbRef.namespace`, else the
    /// Backup's); any when absent.
    pub namespace: Option<String>,
    /// Labels every counted Backup carries.
    pub labels: BTreeMap<String, String>,
    /// How old the newest successful backup may be.
    pub max_age: Duration,
}

impl BackupGate {
    fn matches(&self, b: &Backup) -> bool {
        self.mariadb.as_ref().is_none_or(|m| *m == b.mariadb)
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| *n == b.mariadb_namespace)
            && self.labels.iter().all(|(k, v)| b.labels.get(k) == Some(v))
    }

    /// How the gate names the backups it wants, for a status.
    fn names(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.mariadb {
            match &self.namespace {
                Some(n) => parts.push(format!("MariaDB {n}/{m}")),
                None => parts.push(format!("MariaDB {m}")),
            }
        }
        if !self.labels.is_empty() {
            let l: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            parts.push(format!("labels {}", l.join(",")));
        }
        parts.join(", ")
    }
}

/// One pre-flight gate of an UpgradePolicy (`spec.preflight[i]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    pub policy: String,
    pub file: Arc<str>,
    pub line: u32,
    /// The kinds whose hops it holds (empty: every kind). A ControlPlane's
    /// hop is held when the plane or one of the children it moves is of one.
    pub kinds: Vec<Kind>,
    pub backup: Option<BackupGate>,
    /// Every object the hop moves (a ControlPlane's projected children, or
    /// the standalone service itself) has `Ready=True` first.
    pub children_ready: bool,
}

impl Gate {
    fn applies(&self, unit: &Key, moved: &[Key]) -> bool {
        self.kinds.is_empty()
            || self.kinds.contains(&unit.kind)
            || moved.iter().any(|k| self.kinds.contains(&k.kind))
    }
}

/// The pre-flight gates in effect: those of the policies in the branch
/// head's tree (a gate added after a hop was accepted holds it too; one
/// removed lets it go).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gates {
    pub gates: Vec<Gate>,
    /// The head's policies could not all be read: every hop waits (a
    /// policy lockstep cannot read might hold anything).
    pub error: Option<String>,
}

impl Gates {
    /// From the policies of one tree and their errors.
    pub fn of(policies: &[crate::policy::Policy], errors: &[crate::policy::PolicyError]) -> Self {
        Self {
            gates: policies
                .iter()
                .flat_map(|p| p.preflight.iter().cloned())
                .collect(),
            error: errors.first().map(|e| {
                format!(
                    "UpgradePolicy {}:{} cannot be read ({}); no hop is applied until it is fixed",
                    e.file, e.line, e.message
                )
            }),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.gates.is_empty() && self.error.is_none()
    }
}

/// An object's `Ready` condition as the cluster has it: `None` when the
/// object is not in the cluster, else `(status, reason)`.
pub type Readiness = Option<(String, String)>;

/// What the gates read of the live cluster.
#[derive(Clone, Debug, Default)]
pub struct LiveState<'a> {
    /// The calendar's time, seconds since the epoch.
    pub now: i64,
    pub backups: &'a [Backup],
    /// Every object the hop moves, with its readiness.
    pub moved: &'a [(Key, Readiness)],
}

/// Whether any gate wants the Backups read (the shell lists them only then).
pub fn needs_backups(gates: &[Gate], unit: &Key, moved: &[Key]) -> bool {
    gates
        .iter()
        .any(|g| g.backup.is_some() && g.applies(unit, moved))
}

/// Why the hop of `unit` must wait, or `None` when every gate passes. The
/// first failing gate in policy order speaks; its text is the commit
/// status ("waiting: last backup of nova 31h old, need 24h").
pub fn wait(gates: &[Gate], unit: &Key, live: &LiveState) -> Option<String> {
    let moved: Vec<Key> = live.moved.iter().map(|(k, _)| k.clone()).collect();
    for g in gates.iter().filter(|g| g.applies(unit, &moved)) {
        if let Some(b) = &g.backup
            && let Some(m) = backup_wait(b, unit, live)
        {
            return Some(format!(
                "{m} (UpgradePolicy {}, {}:{})",
                g.policy, g.file, g.line
            ));
        }
        if g.children_ready {
            for (k, r) in live.moved {
                let why = match r {
                    None => Some("not in the cluster".to_owned()),
                    Some((s, _)) if s == "True" => None,
                    Some((s, reason)) if reason.is_empty() => Some(format!("Ready is {s:?}")),
                    Some((s, reason)) => Some(format!("Ready is {s:?} ({reason})")),
                };
                if let Some(why) = why {
                    return Some(format!(
                        "waiting: {} not Ready before the hop of {}: {why} (UpgradePolicy {}, {}:{})",
                        k.name, unit.name, g.policy, g.file, g.line
                    ));
                }
            }
        }
    }
    None
}

fn backup_wait(g: &BackupGate, unit: &Key, live: &LiveState) -> Option<String> {
    let skew = MAX_SKEW.as_secs() as i64;
    let matching: Vec<&Backup> = live.backups.iter().filter(|b| g.matches(b)).collect();
    // The newest successful completion that is not in the future (beyond
    // clock skew): a timestamp lockstep cannot believe does not count.
    let newest = matching
        .iter()
        .filter_map(|b| b.succeeded_at().map(|t| (t, *b)))
        .filter(|(t, _)| *t <= live.now.saturating_add(skew))
        .max_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let Some((at, b)) = newest else {
        let last = if matching.is_empty() {
            "none matches".to_owned()
        } else {
            let states: Vec<String> = matching
                .iter()
                .take(3)
                .map(|b| match &b.complete {
                    None => format!("{}/{} not complete", b.namespace, b.name),
                    Some(c) => format!(
                        "{}/{} Complete={} {}",
                        b.namespace,
                        b.name,
                        c.status,
                        if c.reason.is_empty() { "-" } else { &c.reason }
                    ),
                })
                .collect();
            format!(
                "{} matching, none succeeded: {}",
                matching.len(),
                states.join("; ")
            )
        };
        return Some(format!(
            "waiting: no successful backup of {} ({}; {last}), need one at most {} old",
            unit.name,
            g.names(),
            age(g.max_age.as_secs())
        ));
    };
    let old = live.now.saturating_sub(at).max(0) as u64;
    (old > g.max_age.as_secs()).then(|| {
        format!(
            "waiting: last backup of {} {} old, need {} (Backup {}/{} of {})",
            unit.name,
            age(old),
            age(g.max_age.as_secs()),
            b.namespace,
            b.name,
            g.names()
        )
    })
}

/// An age as a person reads it: `31h`, `24h30s`, `45m`, `0s`.
pub fn age(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3600;
    const NOW: i64 = 1_800_000_000;

    fn backup(name: &str, db: &str, status: &str, reason: &str, at: Option<i64>) -> Backup {
        Backup {
            namespace: "openstack".into(),
            name: name.into(),
            mariadb: db.into(),
            mariadb_namespace: "openstack".into(),
            labels: BTreeMap::new(),
            complete: Some(Completion {
                status: status.into(),
                reason: reason.into(),
                at,
            }),
        }
    }

    fn ok(name: &str, at: i64) -> Backup {
        backup(name, "openstack-db", "True", "JobComplete", Some(at))
    }

    fn gate(max: u64) -> Gate {
        Gate {
            policy: "fleet".into(),
            file: Arc::from(".lockstep/policies/fleet.yaml"),
            line: 1,
            kinds: vec![],
            backup: Some(BackupGate {
                mariadb: Some("openstack-db".into()),
                namespace: None,
                labels: BTreeMap::new(),
                max_age: Duration::from_secs(max),
            }),
            children_ready: false,
        }
    }

    fn nova() -> Key {
        Key::new(Kind::Nova, "compute", "nova")
    }

    fn check(g: &Gate, backups: &[Backup], now: i64) -> Option<String> {
        wait(
            std::slice::from_ref(g),
            &nova(),
            &LiveState {
                now,
                backups,
                moved: &[],
            },
        )
    }

    #[test]
    fn a_fresh_backup_passes_and_an_old_one_waits_saying_how_old() {
        let g = gate(24 * H as u64);
        assert_eq!(check(&g, &[ok("b1", NOW - H)], NOW), None);
        let m = check(&g, &[ok("b1", NOW - 31 * H)], NOW).unwrap();
        assert!(
            m.starts_with("waiting: last backup of nova 31h old, need 24h"),
            "{m}"
        );
        assert!(m.contains("openstack/b1"), "{m}");
        assert!(m.contains("UpgradePolicy fleet"), "{m}");
    }

    #[test]
    fn clock_edges() {
        let g = gate(24 * H as u64);
        // Exactly max age: passes; one second more: waits.
        assert_eq!(check(&g, &[ok("b", NOW - 24 * H)], NOW), None);
        let m = check(&g, &[ok("b", NOW - 24 * H - 1)], NOW).unwrap();
        assert!(m.contains("24h1s old, need 24h"), "{m}");
        // Completed a little in the future (skew): counts, age zero.
        assert_eq!(check(&g, &[ok("b", NOW + 60)], NOW), None);
        // Far in the future: not believed.
        let m = check(&g, &[ok("b", NOW + 3 * H)], NOW).unwrap();
        assert!(
            m.starts_with("waiting: no successful backup of nova"),
            "{m}"
        );
        // No timestamp: does not count.
        let m = check(
            &g,
            &[backup("b", "openstack-db", "True", "JobComplete", None)],
            NOW,
        )
        .unwrap();
        assert!(m.contains("none succeeded"), "{m}");
    }

    #[test]
    fn failed_running_and_missing_backups_wait() {
        let g = gate(24 * H as u64);
        // A failed Job is Complete=True with reason JobFailed: not success.
        for b in [
            backup("f", "openstack-db", "True", "JobFailed", Some(NOW - 60)),
            backup("r", "openstack-db", "False", "JobRunning", Some(NOW - 60)),
            backup("s", "openstack-db", "False", "CronJobScheduled", Some(NOW)),
            Backup {
                complete: None,
                ..ok("n", NOW)
            },
        ] {
            let m = check(&g, std::slice::from_ref(&b), NOW).unwrap();
            assert!(m.contains("none succeeded"), "{m}");
            assert!(m.contains(&b.name), "{m}");
        }
        let m = check(&g, &[], NOW).unwrap();
        assert!(
            m.contains("no successful backup of nova (MariaDB openstack-db; none matches), need one at most 24h old"),
            "{m}"
        );
        // Another database's backup does not count.
        assert!(
            check(
                &g,
                &[backup("o", "other-db", "True", "JobComplete", Some(NOW))],
                NOW
            )
            .is_some()
        );
        // A scheduled Backup's success counts.
        assert_eq!(
            check(
                &g,
                &[backup(
                    "c",
                    "openstack-db",
                    "True",
                    "CronJobSucess",
                    Some(NOW)
                )],
                NOW
            ),
            None
        );
    }

    #[test]
    fn the_newest_success_among_several_decides() {
        let g = gate(24 * H as u64);
        let several = [
            ok("old", NOW - 40 * H),
            backup(
                "failed-later",
                "openstack-db",
                "True",
                "JobFailed",
                Some(NOW),
            ),
            ok("fresh", NOW - 2 * H),
            ok("older", NOW - 30 * H),
        ];
        assert_eq!(check(&g, &several, NOW), None);
        let m = check(&g, &several[..2], NOW).unwrap();
        assert!(m.contains("40h old") && m.contains("openstack/old"), "{m}");
    }

    #[test]
    fn labels_and_namespace_select_backups() {
        let mut g = gate(H as u64);
        let b = g.backup.as_mut().unwrap();
        b.mariadb = None;
        b.labels.insert("service".into(), "nova".into());
        b.namespace = Some("openstack".into());
        let mut labelled = ok("l", NOW);
        labelled.labels.insert("service".into(), "nova".into());
        assert!(check(&g, &[ok("plain", NOW)], NOW).is_some());
        assert_eq!(check(&g, std::slice::from_ref(&labelled), NOW), None);
        labelled.mariadb_namespace = "elsewhere".into();
        assert!(check(&g, &[labelled], NOW).is_some());
    }

    #[test]
    fn kinds_select_the_hops_a_gate_holds() {
        let mut g = gate(H as u64);
        g.kinds = vec![Kind::Glance];
        assert_eq!(check(&g, &[], NOW), None, "a Nova hop is not held");
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        let moved = [(Key::new(Kind::Glance, "image", "glance"), None)];
        let live = LiveState {
            now: NOW,
            backups: &[],
            moved: &moved,
        };
        assert!(wait(std::slice::from_ref(&g), &plane, &live).is_some());
        assert!(needs_backups(
            std::slice::from_ref(&g),
            &plane,
            &[moved[0].0.clone()]
        ));
        assert!(!needs_backups(std::slice::from_ref(&g), &nova(), &[]));
    }

    #[test]
    fn children_ready_waits_for_every_moved_object() {
        let g = Gate {
            backup: None,
            children_ready: true,
            ..gate(0)
        };
        let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
        let ready = |s: &str, r: &str| Some((s.to_owned(), r.to_owned()));
        let mut moved = vec![
            (
                Key::new(Kind::Glance, "image", "glance"),
                ready("True", "AllReady"),
            ),
            (
                Key::new(Kind::Nova, "compute", "nova"),
                ready("False", "NotAllReady"),
            ),
        ];
        let live = |moved: &[(Key, Readiness)]| {
            wait(
                std::slice::from_ref(&g),
                &plane,
                &LiveState {
                    now: NOW,
                    backups: &[],
                    moved,
                },
            )
        };
        let m = live(&moved).unwrap();
        assert!(
            m.starts_with(
                "waiting: nova not Ready before the hop of prod: Ready is \"False\" (NotAllReady)"
            ),
            "{m}"
        );
        moved[1].1 = None;
        assert!(live(&moved).unwrap().contains("not in the cluster"));
        moved[1].1 = ready("True", "AllReady");
        assert_eq!(live(&moved), None);
    }

    #[test]
    fn backups_are_read_from_the_crd_shape() {
        let v = serde_json::json!({
            "apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "Backup",
            "metadata": {"name": "nova-1", "namespace": "openstack", "labels": {"service": "nova"}},
            "spec": {"mariaDbRef": {"name": "openstack-db"}, "storage": {}},
            "status": {"conditions": [{"type": "Complete", "status": "True", "reason": "JobComplete",
                "message": "Success", "lastTransitionTime": "2026-12-01T10:00:00Z"}]}
        });
        let b = Backup::from_json(&v).unwrap();
        assert_eq!(b.mariadb_namespace, "openstack");
        assert_eq!(b.labels["service"], "nova");
        let at = "2026-12-01T10:00:00Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_second();
        assert_eq!(b.succeeded_at(), Some(at));
        // No MariaDB reference: not a backup of anything.
        let mut bad = v.clone();
        bad["spec"] = serde_json::json!({});
        assert_eq!(Backup::from_json(&bad), None);
    }

    #[test]
    fn ages_read_as_people_write_them() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(31 * 3600), "31h");
        assert_eq!(age(24 * 3600 + 1), "24h1s");
        assert_eq!(age(45 * 60), "45m");
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The gate passes exactly when some matching successful backup,
        /// not in the future beyond skew, is at most max age old.
        #[test]
        fn passes_iff_a_fresh_success_exists(
            now in 1_000_000_000i64..2_000_000_000,
            max in 1u64..200_000,
            bs in proptest::collection::vec(
                (any::<bool>(), 0u8..4, -1_000i64..300_000, any::<bool>()), 0..6),
        ) {
            let backups: Vec<Backup> = bs.iter().enumerate().map(|(i, (mine, state, ago, stamped))| Backup {
                namespace: "db".into(),
                name: format!("b{i}"),
                mariadb: if *mine { "openstack-db".into() } else { "other".into() },
                mariadb_namespace: "db".into(),
                labels: BTreeMap::new(),
                complete: Some(Completion {
                    status: if *state == 1 { "False".into() } else { "True".into() },
                    reason: ["JobComplete", "JobRunning", "JobFailed", "CronJobSucess"][*state as usize].into(),
                    at: stamped.then_some(now - ago),
                }),
            }).collect();
            let g = Gate {
                policy: "p".into(), file: Arc::from("f"), line: 1, kinds: vec![],
                backup: Some(BackupGate { mariadb: Some("openstack-db".into()), namespace: None,
                    labels: BTreeMap::new(), max_age: Duration::from_secs(max) }),
                children_ready: false,
            };
            let want = bs.iter().any(|(mine, state, ago, stamped)| {
                *mine && *stamped && (*state == 0 || *state == 3)
                    && *ago >= -(MAX_SKEW.as_secs() as i64) && (*ago).max(0) as u64 <= max
            });
            let unit = Key::new(Kind::Nova, "compute", "nova");
            let got = wait(&[g], &unit, &LiveState { now, backups: &backups, moved: &[] });
            prop_assert_eq!(got.is_none(), want, "{:?}", got);
        }
    }
}
