//! Releases and image references: what a manifest's author writes in
//! `openStackRelease` and `image:`, and what a cluster reports back.
//!
//! Input: UTF-8 text. The whole text goes to `Release::parse_strict`,
//! `TaggedRelease::parse` and `ImageRef::parse_reference`; its lines are also
//! `ImageRef::new(repository, tag, digest)` (a missing line or `~`: absent).
//!
//! Asserts: accepted values display and re-parse to themselves (a reference
//! re-displays as exactly the text it came from), what the strict parser
//! accepts the tag parser accepts too, and the ordering helpers agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep::release::{ImageRef, Pin, Release, Step, TaggedRelease, step};

fuzz_target!(|data: &[u8]| {
    if data.len() >= 3 {
        from_parts(u16::from_le_bytes([data[0], data[1]]), data[2]);
    }
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    strict(s);
    tagged(s);
    reference(s);
    let mut lines = s.split('\n').map(|l| (l != "~").then_some(l));
    let (repo, tag, digest) = (
        lines.next().flatten(),
        lines.next().flatten(),
        lines.next().flatten(),
    );
    image_new(repo, tag, digest);
});

fn strict(s: &str) {
    match Release::parse_strict(s) {
        Ok(r) => {
            // The CRD pattern has one spelling per release.
            assert_eq!(r.to_string(), s);
            assert!(r.year() >= 2010 && (1..=2).contains(&r.minor()), "{r:?}");
            assert_eq!(s.parse::<Release>(), Ok(r));
            assert_eq!(
                TaggedRelease::parse(s),
                Ok(TaggedRelease {
                    release: r,
                    patch: None
                }),
                "the tag parser is looser than the strict one"
            );
            let n = r.next();
            assert!(n > r);
            assert_eq!(step(r, n), Step::Next);
            assert_eq!(step(r, r), Step::Same);
            assert_eq!(step(n, r), Step::Down);
            assert_eq!(
                serde_json::to_value(r).ok(),
                Some(serde_json::Value::String(s.to_owned()))
            );
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
        }
    }
}

fn tagged(s: &str) {
    let Ok(t) = TaggedRelease::parse(s) else {
        return;
    };
    assert!(t.release.year() >= 2010 && (1..=2).contains(&t.release.minor()));
    // The patch is whatever follows the first '-'.
    assert_eq!(t.patch.as_deref(), s.split_once('-').map(|(_, p)| p));
    // Re-displayed in canonical form, it parses to the same value.
    let shown = match &t.patch {
        Some(p) => format!("{}-{p}", t.release),
        None => t.release.to_string(),
    };
    assert_eq!(TaggedRelease::parse(&shown).as_ref(), Ok(&t), "{shown:?}");
    if t.release.year() <= 9999 {
        assert_eq!(Release::parse_strict(&t.release.to_string()), Ok(t.release));
    }
}

fn reference(s: &str) {
    let Ok(i) = ImageRef::parse_reference(s) else {
        return;
    };
    // One spelling per reference: it prints back exactly what was read.
    assert_eq!(i.reference(), s);
    assert_eq!(i.to_string(), s);
    image_invariants(&i);
}

fn image_new(repo: Option<&str>, tag: Option<&str>, digest: Option<&str>) {
    match ImageRef::new(repo, tag, digest) {
        Ok(i) => {
            assert_eq!(i.repository, repo.unwrap_or_default());
            match &i.pin {
                Pin::Tag(t) => assert_eq!((Some(t.as_str()), digest), (tag, None)),
                Pin::Digest(d) => assert_eq!((Some(d.as_str()), tag), (digest, None)),
            }
            image_invariants(&i);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

fn image_invariants(i: &ImageRef) {
    let text = i.reference();
    assert_eq!(
        ImageRef::parse_reference(&text).as_ref(),
        Ok(i),
        "{text:?} does not read back"
    );
    let (tag, digest) = match &i.pin {
        Pin::Tag(t) => (Some(t.as_str()), None),
        Pin::Digest(d) => (None, Some(d.as_str())),
    };
    assert_eq!(
        ImageRef::new(Some(&i.repository), tag, digest).as_ref(),
        Ok(i)
    );
    assert_eq!(i.tag(), tag);
    assert_eq!(
        i.tag_release(),
        tag.and_then(|t| TaggedRelease::parse(t).ok())
    );
    assert_eq!(
        serde_json::to_value(i).ok(),
        Some(serde_json::Value::String(text))
    );
}

fn from_parts(year: u16, minor: u8) {
    let Ok(r) = Release::new(year, minor) else {
        return;
    };
    assert_eq!((r.year(), r.minor()), (year, minor));
    // Never panics, even at the end of u16 (where `next` saturates: 65535.2
    // has no successor to name, and `step` never calls anything its next).
    let n = r.next();
    if year < u16::MAX {
        assert!(n > r);
        assert_eq!(step(r, n), Step::Next);
    }
    if year <= 9999 {
        assert_eq!(Release::parse_strict(&r.to_string()), Ok(r));
    }
}
