//! Manifest files: any bytes a commit can put in a `.yaml` file of the fleet.
//!
//! Asserts: `parse_file` never panics and is deterministic; an over-limit
//! file is one problem and nothing else; every accepted document has a valid
//! object name and namespace, a spec of its kind's shape (planes: services
//! in `Kind::SERVICES` order, once each), lines inside the file, and images
//! whose reference reads back as the same image; every problem and skip names
//! the file, a line inside it and a message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep::kind::Kind;
use lockstep::manifest::{DEFAULT_MAX_FILE_BYTES, Located, Spec, parse_file};
use lockstep::release::ImageRef;

const FILE: &str = "clusters/fuzz/manifest.yaml";

fuzz_target!(|data: &[u8]| {
    let parsed = parse_file(FILE, data, DEFAULT_MAX_FILE_BYTES);
    assert_eq!(
        parsed,
        parse_file(FILE, data, DEFAULT_MAX_FILE_BYTES),
        "not deterministic"
    );
    // A file's last line may lack its newline; an error at the very end
    // points one past it.
    let lines = u32::try_from(line_breaks(data))
        .unwrap_or(u32::MAX)
        .saturating_add(1);
    let in_file = |line: u32| (1..=lines.saturating_add(1)).contains(&line);

    for d in &parsed.documents {
        assert_eq!(&*d.file, FILE);
        assert!(in_file(d.line), "document line {} of {lines}", d.line);
        assert!(valid_dns_name(&d.key.name), "name {:?}", d.key.name);
        assert!(
            d.key.namespace.len() <= 63 && valid_label(&d.key.namespace),
            "namespace {:?}",
            d.key.namespace
        );
        match (&d.spec, d.key.kind) {
            (Spec::Plane(p), Kind::ControlPlane) => {
                assert!(in_file(p.release.line));
                let order: Vec<usize> = p
                    .services
                    .iter()
                    .map(|s| {
                        Kind::SERVICES
                            .iter()
                            .position(|k| *k == s.kind)
                            .unwrap_or_else(|| panic!("{:?} is not a service", s.kind))
                    })
                    .collect();
                assert!(
                    order.windows(2).all(|w| w[0] < w[1]),
                    "services out of order or repeated: {order:?}"
                );
                for s in &p.services {
                    assert!(in_file(s.line));
                    if let Some(img) = &s.image {
                        image(img, &in_file);
                    }
                }
            }
            (Spec::Service(s), kind) if kind != Kind::ControlPlane => {
                if let Some(r) = &s.release {
                    assert!(in_file(r.line));
                }
                image(&s.image, &in_file);
            }
            (spec, kind) => panic!("{kind:?} with {spec:?}"),
        }
    }
    for p in &parsed.problems {
        assert_eq!(&*p.file, FILE);
        assert!(
            in_file(p.line),
            "problem line {} of {lines}: {}",
            p.line,
            p.message
        );
        assert!(!p.message.is_empty());
    }
    for s in &parsed.skipped {
        assert_eq!(&*s.file, FILE);
        assert!(
            in_file(s.line),
            "skip line {} of {lines}: {}",
            s.line,
            s.message
        );
        assert!(!s.message.is_empty());
    }

    // The size limit is checked before anything is read.
    if !data.is_empty() {
        let over = parse_file(FILE, data, data.len() - 1);
        assert!(over.documents.is_empty() && over.skipped.is_empty());
        assert_eq!(over.problems.len(), 1);
        assert_eq!(over.problems[0].line, 1);
    }
});

fn image(img: &Located<ImageRef>, in_file: &dyn Fn(u32) -> bool) {
    assert!(in_file(img.line));
    let text = img.value.reference();
    assert_eq!(
        ImageRef::parse_reference(&text).as_ref(),
        Ok(&img.value),
        "{text:?}"
    );
}

/// Line breaks as YAML counts them: `\n`, `\r\n` and a lone `\r`.
fn line_breaks(data: &[u8]) -> usize {
    data.iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && data.get(i + 1) != Some(&b'\n')))
        .count()
}

/// RFC 1123 subdomain (Kubernetes object names).
fn valid_dns_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(valid_label)
}

/// RFC 1123 label, without the length limit.
fn valid_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}
