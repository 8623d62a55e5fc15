//! The C5C3 kinds lockstep understands (`docs/operators.md` §1) and what
//! each one's release and image mean (`docs/gate.md`, "What is read").

use std::fmt;

use serde::{Serialize, Serializer};

/// The only version the operators serve.
pub const VERSION: &str = "v1alpha1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    ControlPlane,
    Keystone,
    Horizon,
    Glance,
    Placement,
    Barbican,
    Neutron,
    Cinder,
    Nova,
}

/// Where an object's release comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseSource {
    /// `spec.openStackRelease`.
    Field,
    /// Parsed from `spec.image.tag` (Keystone); none when digest-pinned.
    ImageTag,
    /// No release tracking (Horizon).
    None,
}

/// What a recognised group/kind pair resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recognised {
    Ours(Kind),
    /// Our group and kind, but a version the operators do not serve.
    WrongVersion(Kind),
    /// A kind the C5C3 operators serve that carries no release of its own
    /// (`GlanceBackend`, `KeystoneService`, ...): known, and not judged.
    Companion,
    /// In a C5C3 group (or a group spelled nearly like one) but no kind or
    /// group the operators serve. Never ignored: a typo there would hide a
    /// release edit (the object would read as removed while the cluster
    /// keeps it), so the document is refused with what was probably meant.
    Unknown(Unrecognised),
}

/// Why a document in (or near) a C5C3 group is not one lockstep knows, and
/// the closest thing it does know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrecognised {
    pub message: String,
}

impl Kind {
    /// The services a ControlPlane can project, in the plane's own order.
    /// Every kind lockstep reads, planes first.
    pub const ALL: [Kind; 9] = [
        Kind::ControlPlane,
        Kind::Keystone,
        Kind::Horizon,
        Kind::Glance,
        Kind::Placement,
        Kind::Barbican,
        Kind::Neutron,
        Kind::Cinder,
        Kind::Nova,
    ];

    pub const SERVICES: [Kind; 8] = [
        Kind::Keystone,
        Kind::Horizon,
        Kind::Glance,
        Kind::Placement,
        Kind::Barbican,
        Kind::Neutron,
        Kind::Cinder,
        Kind::Nova,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ControlPlane => "ControlPlane",
            Kind::Keystone => "Keystone",
            Kind::Horizon => "Horizon",
            Kind::Glance => "Glance",
            Kind::Placement => "Placement",
            Kind::Barbican => "Barbican",
            Kind::Neutron => "Neutron",
            Kind::Cinder => "Cinder",
            Kind::Nova => "Nova",
        }
    }

    /// The lower-case service name: the key under `ControlPlane.spec.services`,
    /// the suffix of a projected child's name and of the default image.
    pub fn service(self) -> &'static str {
        match self {
            Kind::ControlPlane => "controlplane",
            Kind::Keystone => "keystone",
            Kind::Horizon => "horizon",
            Kind::Glance => "glance",
            Kind::Placement => "placement",
            Kind::Barbican => "barbican",
            Kind::Neutron => "neutron",
            Kind::Cinder => "cinder",
            Kind::Nova => "nova",
        }
    }

    pub fn from_service(s: &str) -> Option<Kind> {
        Kind::SERVICES.into_iter().find(|k| k.service() == s)
    }

    pub fn group(self) -> &'static str {
        match self {
            Kind::ControlPlane => "c5c3.io",
            Kind::Keystone => "keystone.openstack.c5c3.io",
            Kind::Horizon => "horizon.openstack.c5c3.io",
            Kind::Glance => "glance.openstack.c5c3.io",
            Kind::Placement => "placement.openstack.c5c3.io",
            Kind::Barbican => "barbican.openstack.c5c3.io",
            Kind::Neutron => "neutron.openstack.c5c3.io",
            Kind::Cinder => "cinder.openstack.c5c3.io",
            Kind::Nova => "nova.openstack.c5c3.io",
        }
    }

    pub fn api_version(self) -> String {
        format!("{}/{VERSION}", self.group())
    }

    /// The resource plural, as `kubectl get` and the API paths name it.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::ControlPlane => "controlplanes",
            Kind::Keystone => "keystones",
            Kind::Horizon => "horizons",
            Kind::Glance => "glances",
            Kind::Placement => "placements",
            Kind::Barbican => "barbicans",
            Kind::Neutron => "neutrons",
            Kind::Cinder => "cinders",
            Kind::Nova => "novas",
        }
    }

    pub fn release_source(self) -> ReleaseSource {
        match self {
            Kind::Keystone => ReleaseSource::ImageTag,
            Kind::Horizon => ReleaseSource::None,
            _ => ReleaseSource::Field,
        }
    }

    /// Whether the kind runs the expand → migrate → roll → contract machine
    /// (and so can have an upgrade in flight that may be aborted).
    pub fn has_phase_machine(self) -> bool {
        matches!(
            self,
            Kind::Keystone | Kind::Glance | Kind::Nova | Kind::Cinder | Kind::Neutron
        )
    }

    /// Recognises `apiVersion` + `kind`; `None` for YAML that is not ours.
    /// Exact spelling is required (Kubernetes matches kinds and groups
    /// case-sensitively); anything in or near a C5C3 group that is not
    /// served exactly is [`Recognised::Unknown`], never `None`.
    pub fn recognise(api_version: &str, kind: &str) -> Option<Recognised> {
        // `apiVersion: nova.openstack.c5c3.io` (no version) is still our
        // group. The group ends at the first `/`: whatever follows is the
        // version, so `…c5c3.io/v1alpha1/` is our group with a version
        // nobody serves (refused), not a group of nobody's (skipped).
        let (group, version) = api_version.split_once('/').unwrap_or((api_version, ""));
        let served = GROUPS.iter().find(|g| g.group == group);
        let Some(served) = served else {
            return near_group(group).map(|near| {
                Recognised::Unknown(Unrecognised {
                    message: match near {
                        Some(g) => format!(
                            "apiVersion {api_version:?} names no group the C5C3 operators serve; did you mean {g}/{VERSION}? (lockstep refuses what it cannot read rather than skip a release edit)"
                        ),
                        None => format!(
                            "apiVersion {api_version:?} is in the C5C3 domain but names no group the operators serve ({}); lockstep refuses what it cannot read rather than skip a release edit",
                            GROUPS.iter().map(|g| g.group).collect::<Vec<_>>().join(", ")
                        ),
                    },
                })
            });
        };
        if let Some(k) = served.kinds.iter().copied().find(|k| k.as_str() == kind) {
            return Some(if version == VERSION {
                Recognised::Ours(k)
            } else {
                Recognised::WrongVersion(k)
            });
        }
        if served.companions.contains(&kind) {
            // Not release-bearing; its version is the operators' business.
            return Some(Recognised::Companion);
        }
        let known: Vec<&str> = served
            .kinds
            .iter()
            .map(|k| k.as_str())
            .chain(served.companions.iter().copied())
            .collect();
        let closest = known
            .iter()
            .copied()
            .min_by_key(|k| kind_distance(kind, k))
            .filter(|k| kind_distance(kind, k) <= 3 + k.len() / 4);
        Some(Recognised::Unknown(Unrecognised {
            message: format!(
                "kind {kind:?} is not served in group {group} (known: {}){}; Kubernetes matches kinds exactly, and lockstep refuses what it cannot read rather than skip a release edit",
                known.join(", "),
                closest.map_or(String::new(), |c| format!("; did you mean {c}?"))
            ),
        }))
    }
}

/// A group the C5C3 operators serve: its release-bearing kinds and its
/// companions (`docs/operators.md` §1; `docs/gate.md`, "What is read").
struct Group {
    group: &'static str,
    kinds: &'static [Kind],
    companions: &'static [&'static str],
}

const GROUPS: [Group; 11] = [
    Group {
        group: "c5c3.io",
        kinds: &[Kind::ControlPlane],
        companions: &[
            "CredentialRotation",
            "KeystoneService",
            "SecretAggregate",
            "KeystoneApplicationCredential",
            "KeystoneCatalogEntry",
            "KeystoneProject",
            "KeystoneRoleAssignment",
            "KeystoneUser",
            "MariaDBDatabase",
            "RabbitMQVhost",
            "SizingProfile",
        ],
    },
    Group {
        group: "keystone.openstack.c5c3.io",
        kinds: &[Kind::Keystone],
        companions: &["KeystoneIdentityBackend"],
    },
    Group {
        group: "horizon.openstack.c5c3.io",
        kinds: &[Kind::Horizon],
        companions: &[],
    },
    Group {
        group: "glance.openstack.c5c3.io",
        kinds: &[Kind::Glance],
        companions: &["GlanceBackend"],
    },
    Group {
        group: "placement.openstack.c5c3.io",
        kinds: &[Kind::Placement],
        companions: &[],
    },
    Group {
        group: "barbican.openstack.c5c3.io",
        kinds: &[Kind::Barbican],
        companions: &["BarbicanSecretStore"],
    },
    Group {
        group: "neutron.openstack.c5c3.io",
        kinds: &[Kind::Neutron],
        companions: &["NeutronMetadataAgent"],
    },
    Group {
        group: "cinder.openstack.c5c3.io",
        kinds: &[Kind::Cinder],
        companions: &["CinderBackend", "CinderBackupBackend"],
    },
    Group {
        group: "nova.openstack.c5c3.io",
        kinds: &[Kind::Nova],
        companions: &["NovaCompute"],
    },
    Group {
        group: "ovn.openstack.c5c3.io",
        kinds: &[],
        companions: &["OVNCentral", "OVNChassis"],
    },
    // lockstep's own: UpgradePlans are read and judged by `plan`,
    // UpgradePolicies by `policy`.
    Group {
        group: "lockstep.c5c3.io",
        kinds: &[],
        companions: &["UpgradePlan", "UpgradePolicy"],
    },
];

/// `None` when `group` is nowhere near C5C3's; `Some(Some(g))` when it is
/// probably a misspelling of the served group `g`; `Some(None)` when it is
/// in the C5C3 domain (`*.c5c3.io`, any case) but close to no served group.
fn near_group(group: &str) -> Option<Option<&'static str>> {
    let lower = group.trim().to_ascii_lowercase();
    let closest = GROUPS
        .iter()
        .map(|g| (g.group, kind_distance(&lower, g.group)))
        .min_by_key(|(_, d)| *d);
    match closest {
        // Case, stray spaces or a typo or two in a served group's name.
        Some((g, d)) if d <= 2 => Some(Some(g)),
        _ if lower == "c5c3.io" || lower.ends_with(".c5c3.io") => Some(None),
        _ => None,
    }
}

/// Edit distance (Levenshtein over chars, case-insensitive, surrounding
/// space ignored): how far a written kind or group is from a served one.
fn kind_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.trim().chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    // Names longer than any real kind or group are far from all of them.
    if a.len() > 128 {
        return usize::MAX;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// An object's identity in the cluster: two documents with the same key are
/// the same object (kind implies group; only one version is served).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}
