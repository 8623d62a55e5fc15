//! The desired state the gate judges: every release-bearing object a set of
//! documents asks for, with ControlPlanes expanded into their projected
//! children (`docs/operators.md` §4.1, §4.2), so a plane edit is judged
//! child by child.

use std::sync::Arc;

use crate::kind::{Key, Kind, ReleaseSource};
use crate::manifest::{Document, Spec};
use crate::release::ImageRef;

/// One object as Git wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub key: Key,
    pub file: Arc<str>,
    /// The line to point a person at: the document, or the plane's service entry.
    pub line: u32,
    /// The ControlPlane that projects this object, if any.
    pub projected_by: Option<String>,
    /// The object's release as written (unparsed); `None` for Horizon and a
    /// digest-pinned Keystone, which have none.
    pub release: Option<String>,
    pub release_line: u32,
    /// The release the image tag must agree with, when one applies: the
    /// object's own `openStackRelease`, or for a projected child the plane's.
    pub lockstep_release: Option<String>,
    /// `None` only for the ControlPlane itself (its images are its children's).
    pub image: Option<ImageRef>,
    pub image_line: u32,
    /// Whether the image is a ControlPlane override rather than the default.
    pub image_overridden: bool,
    /// The release floor this document deliberately drops
    /// ([`crate::manifest::RECREATE_ANNOTATION`]; a plane's applies to its children).
    pub recreate_below: Option<String>,
    /// The whole document's [`crate::manifest::Fingerprint`], for a unit
    /// lockstep applies (a ControlPlane or a standalone service; `None` for
    /// a projected child, whose document is its plane's): a change to it
    /// with the same release and image is a reconfiguration.
    pub fingerprint: Option<crate::manifest::Fingerprint>,
}

impl Desired {
    /// What the gate compares between two states: release and image.
    pub fn same_target(&self, other: &Desired) -> bool {
        self.release == other.release && self.image == other.image
    }
}

/// Expands documents into desired objects, children after their plane.
pub fn expand(documents: &[Document]) -> Vec<Desired> {
    let mut out = Vec::with_capacity(documents.len());
    for doc in documents {
        expand_one(doc, &mut out);
    }
    out
}

pub fn expand_one(doc: &Document, out: &mut Vec<Desired>) {
    match &doc.spec {
        Spec::Service(s) => {
            let (release, release_line) = match doc.key.kind.release_source() {
                ReleaseSource::Field => match &s.release {
                    Some(r) => (Some(r.value.clone()), r.line),
                    None => (None, doc.line),
                },
                ReleaseSource::ImageTag => (s.image.value.tag().map(str::to_owned), s.image.line),
                ReleaseSource::None => (None, doc.line),
            };
            let lockstep_release = match doc.key.kind.release_source() {
                ReleaseSource::Field => release.clone(),
                _ => None,
            };
            out.push(Desired {
                key: doc.key.clone(),
                file: doc.file.clone(),
                line: doc.line,
                projected_by: None,
                release,
                release_line,
                lockstep_release,
                image: Some(s.image.value.clone()),
                image_line: s.image.line,
                image_overridden: false,
                recreate_below: doc.recreate_below.clone(),
                fingerprint: Some(doc.fingerprint),
            });
        }
        Spec::Plane(p) => {
            let plane_release = &p.release.value;
            out.push(Desired {
                key: doc.key.clone(),
                file: doc.file.clone(),
                line: doc.line,
                projected_by: None,
                release: Some(plane_release.clone()),
                release_line: p.release.line,
                lockstep_release: None,
                image: None,
                image_line: doc.line,
                image_overridden: false,
                recreate_below: doc.recreate_below.clone(),
                fingerprint: Some(doc.fingerprint),
            });
            for svc in &p.services {
                let (image, image_line, overridden) = match &svc.image {
                    Some(i) => (i.value.clone(), i.line, true),
                    None => (
                        ImageRef::default_for(svc.kind.service(), plane_release),
                        p.release.line,
                        false,
                    ),
                };
                // The plane's rules run on the plane's release for every child
                // (Horizon included); only Keystone's release is its tag.
                let release = match svc.kind.release_source() {
                    ReleaseSource::Field | ReleaseSource::None => Some(plane_release.clone()),
                    ReleaseSource::ImageTag => image.tag().map(str::to_owned),
                };
                let namespace = svc
                    .namespace
                    .clone()
                    .unwrap_or_else(|| doc.key.namespace.clone());
                out.push(Desired {
                    key: Key::new(svc.kind, namespace, child_name(&doc.key.name, svc.kind)),
                    file: doc.file.clone(),
                    line: svc.line,
                    projected_by: Some(doc.key.name.clone()),
                    release,
                    release_line: p.release.line,
                    lockstep_release: Some(plane_release.clone()),
                    image: Some(image),
                    image_line,
                    image_overridden: overridden,
                    recreate_below: doc.recreate_below.clone(),
                    fingerprint: None,
                });
            }
        }
    }
}

/// `<plane>-<svc>`: how a ControlPlane names its children.
pub fn child_name(plane: &str, kind: Kind) -> String {
    format!("{plane}-{}", kind.service())
}

/// For a standalone object named like a projected child (`prod-glance`),
/// the plane name that would project it (`prod`).
pub fn plane_name_for(child: &Key) -> Option<&str> {
    if child.kind == Kind::ControlPlane {
        return None;
    }
    child
        .name
        .strip_suffix(child.kind.service())
        .and_then(|p| p.strip_suffix('-'))
        .filter(|p| !p.is_empty())
}
