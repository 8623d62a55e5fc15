//! The compiler keeps the core pure: `lockstep-core` (core/) may not depend
//! on the shell's runtime crates, directly or through another crate. Read
//! from core/Cargo.toml (the tables a build uses) and from the workspace's
//! Cargo.lock (everything core's dependencies pull in), so the check needs
//! neither cargo nor the network.

use std::collections::{BTreeMap, BTreeSet};

/// The crates of the shell: an async runtime, Git, the cluster, HTTP, the
/// file watcher.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "git2",
    "libgit2-sys",
    "kube",
    "kube-client",
    "kube-runtime",
    "k8s-openapi",
    "reqwest",
    "axum",
    "hyper",
    "hyper-util",
    "notify",
];

fn read(path: &str) -> String {
    let path = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The crates named in a manifest's dependency tables that a build uses:
/// `[dependencies]`, `[build-dependencies]`, their `[target.'…'.…]` forms
/// and `[dependencies.NAME]` tables; a renamed entry counts under its
/// `package`. Dev-dependencies are left out: tests may use what they like.
fn build_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_table = false;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            let last = header
                .rsplit_once('.')
                .filter(|(head, _)| head.ends_with("dependencies"));
            if let Some((_, name)) = last {
                // `[dependencies.tokio]`: the table is one dependency.
                if !header.contains("dev-dependencies") {
                    out.insert(name.trim_matches('"').to_owned());
                }
                in_table = false;
            } else {
                in_table = (header.ends_with("dependencies")
                    && !header.ends_with("dev-dependencies"))
                    || header == "workspace.dependencies";
            }
            continue;
        }
        if !in_table || line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        out.insert(name.trim().trim_matches('"').to_owned());
        if let Some(package) = value
            .split("package")
            .nth(1)
            .and_then(|rest| rest.split('"').nth(1))
        {
            out.insert(package.to_owned());
        }
    }
    out
}

/// Every package `root` pulls in according to a Cargo.lock (dev-
/// dependencies included: the lock does not tell them apart).
fn lock_closure(lock: &str, root: &str) -> BTreeSet<String> {
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for package in lock.split("[[package]]").skip(1) {
        let Some(name) = package
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_owned())
        else {
            continue;
        };
        let list: Vec<String> = package
            .split_once("dependencies = [")
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(list, _)| {
                list.split(',')
                    .filter_map(|d| d.trim().trim_matches('"').split(' ').next())
                    .filter(|d| !d.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        deps.entry(name).or_default().extend(list);
    }
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            todo.extend(deps.get(&name).into_iter().flatten().cloned());
        }
    }
    seen
}

fn forbidden_in(names: &BTreeSet<String>) -> Vec<&'static str> {
    FORBIDDEN
        .iter()
        .copied()
        .filter(|f| names.contains(*f))
        .collect()
}

#[test]
fn core_manifest_names_no_shell_crate() {
    let manifest = read("core/Cargo.toml");
    let deps = build_dependencies(&manifest);
    assert!(
        deps.contains("serde") && deps.contains("thiserror"),
        "the manifest was read: {deps:?}"
    );
    assert_eq!(
        forbidden_in(&deps),
        Vec::<&str>::new(),
        "core/Cargo.toml depends on a shell crate; keep that code in the top crate"
    );
}

#[test]
fn nothing_core_pulls_in_is_a_shell_crate() {
    let lock = read("Cargo.lock");
    let closure = lock_closure(&lock, "lockstep-core");
    assert!(
        closure.contains("serde") && closure.contains("jiff"),
        "lockstep-core is in Cargo.lock: {closure:?}"
    );
    assert_eq!(
        forbidden_in(&closure),
        Vec::<&str>::new(),
        "a dependency of lockstep-core pulls in a shell crate"
    );
    // The shell does use them: the closure walk finds them when they are there.
    let shell = lock_closure(&lock, "lockstep");
    assert!(forbidden_in(&shell).contains(&"tokio"), "{shell:?}");
}

/// The checker finds a shell crate however the manifest names it.
#[test]
fn the_check_catches_every_spelling() {
    for manifest in [
        "[dependencies]\ntokio = \"1\"\n",
        "[dependencies]\nserde = \"1\"\nrt = { package = \"tokio\", version = \"1\" }\n",
        "[dependencies.git2]\nversion = \"0.21\"\n",
        "[target.'cfg(unix)'.dependencies]\nnotify = \"8\"\n",
        "[build-dependencies]\nreqwest = \"0.13\"\n",
        "[dependencies]\n\"kube\" = \"5\" # a comment\n",
    ] {
        assert_eq!(
            forbidden_in(&build_dependencies(manifest)).len(),
            1,
            "{manifest}"
        );
    }
    assert!(
        forbidden_in(&build_dependencies(
            "[dependencies]\nserde = \"1\"\n[dev-dependencies]\ntokio = \"1\"\n"
        ))
        .is_empty(),
        "dev-dependencies are the tests' business"
    );
}
