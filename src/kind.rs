//! The C5C3 kinds lockstep understands (contract §1) and what each one's
//! release and image mean (gate.md, "Objects").

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
pub enum Recognised {
    Ours(Kind),
    /// Our group and kind, but a version the operators do not serve.
    WrongVersion(Kind),
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
    pub fn recognise(api_version: &str, kind: &str) -> Option<Recognised> {
        let (group, version) = api_version.rsplit_once('/')?;
        let k = std::iter::once(Kind::ControlPlane)
            .chain(Kind::SERVICES)
            .find(|k| k.as_str() == kind && k.group() == group)?;
        Some(if version == VERSION {
            Recognised::Ours(k)
        } else {
            Recognised::WrongVersion(k)
        })
    }
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
