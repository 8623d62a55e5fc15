//! The benches' fleet: ControlPlanes and standalone service CRs, each file
//! one of the examples renamed, written into a work tree and committed.
//! Shared by `fleet.rs`, `daemon.rs` and `race.rs` (included with `#[path]`,
//! so each bench uses only part of it).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fleet");

pub fn example(rel: &str) -> String {
    std::fs::read_to_string(Path::new(EXAMPLES).join(rel)).expect("example")
}

/// git in `dir` with a fixed identity and no automatic gc; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "gc.auto=0"])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// What was written.
pub struct Written {
    pub files: usize,
    pub bytes: u64,
}

/// `planes` ControlPlanes (`regions/rNN/cloud-NNNNN/controlplane.yaml`,
/// prod's eight services each) and `standalone` services, Novas (even `i`,
/// `standalone/compute/cNNN/nova-NNNNN.yaml` in namespace `compute-NNN`)
/// and digest-pinned Glances with their backend (odd `i`, namespace
/// `image-NNN`), all at 2026.1, in `work`'s tree (not committed).
pub fn write(work: &Path, planes: usize, standalone: usize) -> Written {
    write_with(work, planes, standalone, true)
}

/// [`write`], with or without the Glances' backends: the upstream CRDs
/// define no GlanceBackend, so an API server refuses them (lockstep does
/// not apply them; Flux applies every document of the path).
pub fn write_with(work: &Path, planes: usize, standalone: usize, backends: bool) -> Written {
    let plane = example("clusters/prod/controlplane.yaml");
    let nova = example("standalone/compute/nova.yaml");
    let mut glance = example("standalone/image/glance.yaml");
    if !backends {
        let end = glance
            .find("\n---\n")
            .expect("the example Glance has its backend");
        glance.truncate(end + 1);
    }
    let mut w = Written { files: 0, bytes: 0 };
    write_all(work, &mut w, planes, standalone, &plane, &nova, &glance);
    w
}

fn write_all(
    work: &Path,
    w: &mut Written,
    planes: usize,
    standalone: usize,
    plane: &str,
    nova: &str,
    glance: &str,
) {
    let mut put = |rel: String, text: String| {
        let p = work.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        w.bytes += text.len() as u64;
        w.files += 1;
        std::fs::write(p, text).expect("write");
    };
    for i in 0..planes {
        let ns = format!("cloud-{i:05}");
        put(
            format!("regions/r{:02}/{ns}/controlplane.yaml", i % 40),
            plane
                .replacen("name: prod ", &format!("name: p{i:05} "), 1)
                .replacen("namespace: openstack ", &format!("namespace: {ns} "), 1),
        );
    }
    for i in 0..standalone {
        if i % 2 == 0 {
            put(
                nova_path(i),
                nova.replacen("name: nova\n", &format!("name: nova-{i:05}\n"), 1)
                    .replacen(
                        "namespace: compute",
                        &format!("namespace: compute-{:03}", i % 300),
                        1,
                    ),
            );
        } else {
            // The backend is renamed with its Glance: several Glances share
            // a namespace, and an object is defined once.
            put(
                format!("standalone/image/i{:03}/glance-{i:05}.yaml", i % 300),
                glance
                    .replacen("name: glance ", &format!("name: glance-{i:05} "), 1)
                    .replacen(
                        "name: glance-primary",
                        &format!("name: glance-{i:05}-primary"),
                        1,
                    )
                    .replacen(
                        "    name: glance\n",
                        &format!("    name: glance-{i:05}\n"),
                        1,
                    )
                    .replace(
                        "namespace: image",
                        &format!("namespace: image-{:03}", i % 300),
                    ),
            );
        }
    }
}

/// The file of standalone service `i` (even: a Nova).
pub fn nova_path(i: usize) -> String {
    format!("standalone/compute/c{:03}/nova-{i:05}.yaml", i % 300)
}

/// The namespaces the standalone services live in.
pub fn standalone_namespaces(standalone: usize) -> Vec<String> {
    let n = standalone.min(300);
    (0..n)
        .flat_map(|i| {
            let mut v = Vec::new();
            if (0..standalone).step_by(2).any(|j| j % 300 == i) {
                v.push(format!("compute-{i:03}"));
            }
            if (1..standalone).step_by(2).any(|j| j % 300 == i) {
                v.push(format!("image-{i:03}"));
            }
            v
        })
        .collect()
}

/// Moves Nova `i` from 2026.1 to 2026.2, release and tag together (a hop).
pub fn hop_nova(work: &Path, i: usize) -> String {
    let rel = nova_path(i);
    let text = std::fs::read_to_string(work.join(&rel)).expect("read");
    let next = text
        .replacen(
            "openStackRelease: \"2026.1\"",
            "openStackRelease: \"2026.2\"",
            1,
        )
        .replacen("tag: \"2026.1\"", "tag: \"2026.2\"", 1);
    assert_ne!(text, next, "{rel} is not at 2026.1");
    std::fs::write(work.join(&rel), next).expect("write");
    rel
}

/// Adds a new Nova, a copy of Nova 0 named `nova-added-{n}` beside it: a
/// commit whose gate must find every other file that could define the name.
pub fn add_nova(work: &Path, n: usize) -> String {
    let from = nova_path(0);
    let text = std::fs::read_to_string(work.join(&from)).expect("read");
    let name = format!("nova-added-{n:03}");
    let next = text.replacen("name: nova-00000\n", &format!("name: {name}\n"), 1);
    assert_ne!(text, next, "{from} does not name nova-00000");
    let rel = format!("standalone/compute/c000/{name}.yaml");
    std::fs::write(work.join(&rel), next).expect("write");
    rel
}
