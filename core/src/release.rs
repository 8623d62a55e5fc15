//! OpenStack release identifiers (`YYYY.N`) and image references.
//!
//! The rules mirror the operators' own parser (`docs/operators.md` §2) so
//! that a refusal in Git reads the same as the condition the cluster would
//! park on: `openStackRelease` is exactly `YYYY.N` with N in {1, 2}; an
//! image tag may carry a patch suffix after the first `-` (`2026.1-p1`) that
//! every comparison ignores.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};
use thiserror::Error;

/// An OpenStack release such as `2026.1`. Ordered by (year, minor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Release {
    year: u16,
    minor: u8,
}

/// Why a string is not a release, worded for the person who wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReleaseError {
    #[error("release is empty")]
    Empty,
    #[error("{0:?} is not a release: expected YYYY.N with N 1 or 2 (e.g. \"2026.1\")")]
    Malformed(String),
    #[error("{0:?} is not a release: the minor must be 1 or 2")]
    BadMinor(String),
    #[error("{0:?} is not a release: the year must be 2010 or later")]
    BadYear(String),
}

impl Release {
    /// Builds a release from parts, refusing what the operators refuse.
    pub fn new(year: u16, minor: u8) -> Result<Self, ReleaseError> {
        let text = format!("{year}.{minor}");
        if year < 2010 {
            return Err(ReleaseError::BadYear(text));
        }
        if !(1..=2).contains(&minor) {
            return Err(ReleaseError::BadMinor(text));
        }
        Ok(Self { year, minor })
    }

    pub fn year(self) -> u16 {
        self.year
    }

    pub fn minor(self) -> u8 {
        self.minor
    }

    /// Whether this is a SLURP release (Skip Level Upgrade Release Process):
    /// upstream OpenStack's `.1` releases, between which it supports a
    /// direct upgrade (`2025.1 → 2026.1`). The C5C3 operators do not: one
    /// release at a time.
    pub fn is_slurp(self) -> bool {
        self.minor == 1
    }

    /// The release before this one: `Y.2 → Y.1`, `Y.1 → (Y-1).2` (none
    /// before 2010.1).
    pub fn prev(self) -> Option<Self> {
        if self.minor == 2 {
            Some(Self {
                year: self.year,
                minor: 1,
            })
        } else if self.year > 2010 {
            Some(Self {
                year: self.year - 1,
                minor: 2,
            })
        } else {
            None
        }
    }

    /// How many hops lead from `self` to `to` (0 when `to` is not ahead).
    pub fn hops_to(self, to: Self) -> usize {
        if to <= self {
            return 0;
        }
        let a = usize::from(self.year) * 2 + usize::from(self.minor);
        let b = usize::from(to.year) * 2 + usize::from(to.minor);
        b - a
    }

    /// The one release an object may move to next: `Y.1 → Y.2`, `Y.2 → (Y+1).1`.
    pub fn next(self) -> Self {
        if self.minor == 1 {
            Self {
                year: self.year,
                minor: 2,
            }
        } else {
            Self {
                year: self.year.saturating_add(1),
                minor: 1,
            }
        }
    }

    /// Parses the strict `spec.openStackRelease` form: CRD pattern `^\d{4}\.[12]$`.
    pub fn parse_strict(s: &str) -> Result<Self, ReleaseError> {
        if s.is_empty() {
            return Err(ReleaseError::Empty);
        }
        let bytes = s.as_bytes();
        let shape_ok = bytes.len() == 6
            && bytes[..4].iter().all(u8::is_ascii_digit)
            && bytes[4] == b'.'
            && bytes[5].is_ascii_digit();
        if !shape_ok {
            return Err(ReleaseError::Malformed(s.to_owned()));
        }
        let year: u16 = s[..4]
            .parse()
            .map_err(|_| ReleaseError::Malformed(s.to_owned()))?;
        let minor = bytes[5] - b'0';
        Self::new(year, minor).map_err(|e| match e {
            ReleaseError::BadMinor(_) => ReleaseError::BadMinor(s.to_owned()),
            ReleaseError::BadYear(_) => ReleaseError::BadYear(s.to_owned()),
            other => other,
        })
    }
}

impl FromStr for Release {
    type Err = ReleaseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_strict(s)
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.year, self.minor)
    }
}

impl Serialize for Release {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A release as it appears in an image tag: `2026.1` or `2026.1-p1`.
/// The patch suffix is kept for display and ignored by every comparison.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaggedRelease {
    pub release: Release,
    pub patch: Option<String>,
}

impl TaggedRelease {
    /// Parses like the operators' `ParseRelease`: split at the first `-`,
    /// the base must be a release.
    pub fn parse(s: &str) -> Result<Self, ReleaseError> {
        if s.is_empty() {
            return Err(ReleaseError::Empty);
        }
        let (base, patch) = match s.split_once('-') {
            Some((b, p)) => (b, Some(p.to_owned())),
            None => (s, None),
        };
        let release = parse_loose_base(base).map_err(|e| match e {
            ReleaseError::Malformed(_) => ReleaseError::Malformed(s.to_owned()),
            ReleaseError::BadMinor(_) => ReleaseError::BadMinor(s.to_owned()),
            ReleaseError::BadYear(_) => ReleaseError::BadYear(s.to_owned()),
            other => other,
        })?;
        Ok(Self { release, patch })
    }
}

/// The base of a tag: two dot-separated integers, year ≥ 2010, minor in {1,2}
/// (the operators' parser does not insist on four digits here).
fn parse_loose_base(base: &str) -> Result<Release, ReleaseError> {
    let (y, m) = base
        .split_once('.')
        .ok_or_else(|| ReleaseError::Malformed(base.to_owned()))?;
    let digits = |t: &str| !t.is_empty() && t.len() <= 5 && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(y) || !digits(m) {
        return Err(ReleaseError::Malformed(base.to_owned()));
    }
    let year: u32 = y
        .parse()
        .map_err(|_| ReleaseError::Malformed(base.to_owned()))?;
    let minor: u32 = m
        .parse()
        .map_err(|_| ReleaseError::Malformed(base.to_owned()))?;
    let year = u16::try_from(year).map_err(|_| ReleaseError::BadYear(base.to_owned()))?;
    let minor = u8::try_from(minor).map_err(|_| ReleaseError::BadMinor(base.to_owned()))?;
    Release::new(year, minor)
}

/// How one release relates to another, in the gate's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Same,
    Next,
    Skip,
    Down,
}

/// Classifies `to` relative to `from`.
pub fn step(from: Release, to: Release) -> Step {
    match to.cmp(&from) {
        Ordering::Equal => Step::Same,
        Ordering::Less => Step::Down,
        Ordering::Greater if to == from.next() => Step::Next,
        Ordering::Greater => Step::Skip,
    }
}

/// How an image is pinned: exactly one of tag or digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pin {
    Tag(String),
    Digest(String),
}

/// A container image as the CRDs' `ImageSpec` holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageRef {
    pub repository: String,
    pub pin: Pin,
}

/// Why an image specification is invalid (schema rules of `ImageSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ImageError {
    #[error("image.repository is missing or empty")]
    NoRepository,
    #[error(
        "image.repository {0:?} is invalid: lower-case letters, digits and . _ : / - separators only"
    )]
    BadRepository(String),
    #[error("exactly one of image.tag or image.digest must be set; both are")]
    Both,
    #[error("exactly one of image.tag or image.digest must be set; neither is")]
    Neither,
    #[error(
        "image.tag {0:?} is invalid: 1-128 characters of [A-Za-z0-9_.-], not starting with . or -"
    )]
    BadTag(String),
    #[error("image.digest {0:?} is invalid: expected sha256: followed by 64 lower-case hex digits")]
    BadDigest(String),
}

impl ImageRef {
    /// Validates the parts by the CRD's patterns and the exactly-one rule.
    pub fn new(
        repository: Option<&str>,
        tag: Option<&str>,
        digest: Option<&str>,
    ) -> Result<Self, ImageError> {
        let repository = match repository {
            Some(r) if !r.is_empty() => r,
            _ => return Err(ImageError::NoRepository),
        };
        if !valid_repository(repository) {
            return Err(ImageError::BadRepository(repository.to_owned()));
        }
        let pin = match (tag, digest) {
            (Some(_), Some(_)) => return Err(ImageError::Both),
            (None, None) => return Err(ImageError::Neither),
            (Some(t), None) => {
                if !valid_tag(t) {
                    return Err(ImageError::BadTag(t.to_owned()));
                }
                Pin::Tag(t.to_owned())
            }
            (None, Some(d)) => {
                if !valid_digest(d) {
                    return Err(ImageError::BadDigest(d.to_owned()));
                }
                Pin::Digest(d.to_owned())
            }
        };
        Ok(Self {
            repository: repository.to_owned(),
            pin,
        })
    }

    /// The default image a ControlPlane projects: `ghcr.io/c5c3/<svc>:<release>`.
    pub fn default_for(service: &str, release: &str) -> Self {
        Self {
            repository: format!("ghcr.io/c5c3/{service}"),
            pin: Pin::Tag(release.to_owned()),
        }
    }

    pub fn tag(&self) -> Option<&str> {
        match &self.pin {
            Pin::Tag(t) => Some(t),
            Pin::Digest(_) => None,
        }
    }

    /// The release named by the tag, if the tag is in release form.
    /// `None` for digests and for tags that are not releases (`28.0.0`, `latest`).
    pub fn tag_release(&self) -> Option<TaggedRelease> {
        self.tag().and_then(|t| TaggedRelease::parse(t).ok())
    }

    /// Parses what [`ImageRef::reference`] prints.
    pub fn parse_reference(s: &str) -> Result<Self, ImageError> {
        if let Some((repo, digest)) = s.split_once('@') {
            return Self::new(Some(repo), None, Some(digest));
        }
        // The tag follows the last ':' after the last '/' (a registry port is not a tag).
        let slash = s.rfind('/').map_or(0, |i| i + 1);
        match s[slash..].rfind(':') {
            Some(i) => Self::new(Some(&s[..slash + i]), Some(&s[slash + i + 1..]), None),
            None => Self::new(Some(s), None, None),
        }
    }

    /// What the workloads run: `repository@digest` or `repository:tag`.
    pub fn reference(&self) -> String {
        match &self.pin {
            Pin::Tag(t) => format!("{}:{t}", self.repository),
            Pin::Digest(d) => format!("{}@{d}", self.repository),
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reference())
    }
}

impl Serialize for ImageRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `^[a-z0-9]+([._:/-][a-z0-9]+)*$`
fn valid_repository(s: &str) -> bool {
    let mut prev_sep = true;
    for b in s.bytes() {
        let alnum = b.is_ascii_lowercase() || b.is_ascii_digit();
        let sep = matches!(b, b'.' | b'_' | b':' | b'/' | b'-');
        if alnum {
            prev_sep = false;
        } else if sep && !prev_sep {
            prev_sep = true;
        } else {
            return false;
        }
    }
    !prev_sep
}

/// `^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`
fn valid_tag(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// `^sha256:[a-f0-9]{64}$`
fn valid_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(s: &str) -> Release {
        Release::parse_strict(s).unwrap()
    }

    #[test]
    fn strict_parse_accepts_only_the_crd_pattern() {
        assert_eq!(r("2026.1").to_string(), "2026.1");
        for bad in [
            "",
            "2026",
            "2026.3",
            "2026.0",
            "26.1",
            "2026.1-p1",
            "2026.10",
            " 2026.1",
            "latest",
            "28.0.0",
            "2025.2.3",
            "0999.1",
            "２０２６.1",
        ] {
            assert!(
                Release::parse_strict(bad).is_err(),
                "{bad:?} must not parse"
            );
        }
    }

    #[test]
    fn tagged_parse_follows_the_operator_parser() {
        let t = TaggedRelease::parse("2026.1-p1").unwrap();
        assert_eq!(t.release, r("2026.1"));
        assert_eq!(t.patch.as_deref(), Some("p1"));
        let t = TaggedRelease::parse("2026.1-rc1-x").unwrap();
        assert_eq!(t.patch.as_deref(), Some("rc1-x"));
        for bad in [
            "latest", "2025", "2025.2.3", "28.0.0", "2025.3", "", "1999.1", "-p1",
        ] {
            assert!(TaggedRelease::parse(bad).is_err(), "{bad:?} must not parse");
        }
    }

    #[test]
    fn next_and_step() {
        assert_eq!(r("2026.1").next(), r("2026.2"));
        assert_eq!(r("2026.2").next(), r("2027.1"));
        assert_eq!(step(r("2026.1"), r("2026.2")), Step::Next);
        assert_eq!(step(r("2026.2"), r("2027.1")), Step::Next);
        assert_eq!(step(r("2026.1"), r("2027.1")), Step::Skip);
        assert_eq!(step(r("2025.2"), r("2026.2")), Step::Skip);
        assert_eq!(step(r("2026.2"), r("2026.1")), Step::Down);
        assert_eq!(step(r("2026.2"), r("2026.2")), Step::Same);
    }

    #[test]
    fn image_rules() {
        let t = ImageRef::new(Some("ghcr.io/c5c3/nova"), Some("2026.1-p2"), None).unwrap();
        assert_eq!(t.reference(), "ghcr.io/c5c3/nova:2026.1-p2");
        assert_eq!(t.tag_release().unwrap().release, r("2026.1"));
        let d = format!("sha256:{}", "a".repeat(64));
        let di = ImageRef::new(Some("registry.local:5000/glance"), None, Some(&d)).unwrap();
        assert_eq!(di.reference(), format!("registry.local:5000/glance@{d}"));
        assert!(di.tag_release().is_none());
        assert_eq!(
            ImageRef::new(Some("x"), Some("1"), Some(&d)),
            Err(ImageError::Both)
        );
        assert_eq!(
            ImageRef::new(Some("x"), None, None),
            Err(ImageError::Neither)
        );
        assert_eq!(
            ImageRef::new(None, Some("1"), None),
            Err(ImageError::NoRepository)
        );
        assert!(matches!(
            ImageRef::new(Some("Ghcr.io/x"), Some("1"), None),
            Err(ImageError::BadRepository(_))
        ));
        assert!(matches!(
            ImageRef::new(Some("x//y"), Some("1"), None),
            Err(ImageError::BadRepository(_))
        ));
        assert!(matches!(
            ImageRef::new(Some("x"), Some(""), None),
            Err(ImageError::BadTag(_))
        ));
        assert!(matches!(
            ImageRef::new(Some("x"), Some(".a"), None),
            Err(ImageError::BadTag(_))
        ));
        assert!(matches!(
            ImageRef::new(Some("x"), None, Some("sha256:ABC")),
            Err(ImageError::BadDigest(_))
        ));
        for r in [
            "ghcr.io/c5c3/nova:2026.1-p2",
            "registry.local:5000/glance:2026.2",
            &format!("registry.local:5000/glance@sha256:{}", "a".repeat(64)),
        ] {
            assert_eq!(ImageRef::parse_reference(r).unwrap().reference(), r);
        }
        assert!(ImageRef::parse_reference("registry.local:5000/glance").is_err());
        assert!(
            ImageRef::new(Some("x"), Some("28.0.0"), None)
                .unwrap()
                .tag_release()
                .is_none()
        );
    }

    fn any_release() -> impl Strategy<Value = Release> {
        (2010u16..=9998, 1u8..=2).prop_map(|(y, m)| Release::new(y, m).unwrap())
    }

    proptest! {
        #[test]
        fn display_parse_roundtrip(rel in any_release()) {
            prop_assert_eq!(Release::parse_strict(&rel.to_string()).unwrap(), rel);
        }

        #[test]
        fn next_is_the_immediate_successor(a in any_release(), b in any_release()) {
            let n = a.next();
            prop_assert!(n > a);
            // Nothing lies strictly between a release and its next.
            prop_assert!(!(b > a && b < n));
            prop_assert_eq!(step(a, n), Step::Next);
        }

        #[test]
        fn order_is_by_year_then_minor(a in any_release(), b in any_release()) {
            let by_parts = (a.year(), a.minor()).cmp(&(b.year(), b.minor()));
            prop_assert_eq!(a.cmp(&b), by_parts);
            // String order agrees for four-digit years, which is why Git diffs read naturally.
            prop_assert_eq!(a.to_string().cmp(&b.to_string()), by_parts);
        }

        #[test]
        fn step_is_consistent_with_order(a in any_release(), b in any_release()) {
            let s = step(a, b);
            match a.cmp(&b) {
                Ordering::Equal => prop_assert_eq!(s, Step::Same),
                Ordering::Greater => prop_assert_eq!(s, Step::Down),
                Ordering::Less => prop_assert!(s == Step::Next || s == Step::Skip),
            }
            prop_assert_eq!(s == Step::Next, b == a.next());
        }

        #[test]
        fn patch_suffix_is_ignored(a in any_release(), p in "[a-z0-9]{1,6}(-[a-z0-9]{1,4})?") {
            let t = TaggedRelease::parse(&format!("{a}-{p}")).unwrap();
            prop_assert_eq!(t.release, a);
            prop_assert_eq!(t.patch, Some(p));
        }

        #[test]
        fn arbitrary_strings_never_panic(s in "\\PC{0,16}") {
            let _ = Release::parse_strict(&s);
            let _ = TaggedRelease::parse(&s);
        }
    }
}
