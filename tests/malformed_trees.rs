//! Trees Git never writes, built with the object database the way an
//! attacker (or a broken tool) can push them: a name that is not UTF-8 (two
//! such names read as one), a name twice in a directory, entries out of
//! Git's order, a file and a directory of one name. Each lets two readers
//! see different files (the gate one, the daemon's lookup by path or a
//! checkout another), so the commit holding one is refused whole, naming
//! the entry; the commit after it that fixes the tree is judged as usual.

mod common;

use std::path::Path;
use std::process::Command;

use git2::{ObjectType, Oid, Repository, Signature};
use serde_json::Value;

/// A raw tree object: `(mode, name bytes, id)` in the order given, however
/// wrong.
fn raw_tree(repo: &Repository, entries: &[(&str, &[u8], Oid)]) -> Oid {
    let mut bytes = Vec::new();
    for (mode, name, id) in entries {
        bytes.extend_from_slice(mode.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend_from_slice(id.as_bytes());
    }
    repo.odb()
        .unwrap()
        .write(ObjectType::Tree, &bytes)
        .expect("write the tree")
}

/// `standalone/compute/` holding `entries`, as the root tree.
fn root(repo: &Repository, entries: &[(&str, &[u8], Oid)]) -> Oid {
    let compute = raw_tree(repo, entries);
    let standalone = raw_tree(repo, &[("40000", b"compute", compute)]);
    raw_tree(repo, &[("40000", b"standalone", standalone)])
}

fn commit(repo: &Repository, tree: Oid, parent: Option<Oid>, message: &str) -> Oid {
    let sig = Signature::new("t", "t@example.org", &git2::Time::new(1_700_000_000, 0)).unwrap();
    let tree = repo.find_tree(tree).unwrap();
    let parents: Vec<git2::Commit<'_>> = parent
        .map(|p| repo.find_commit(p).unwrap())
        .into_iter()
        .collect();
    let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
    let id = repo
        .commit(None, &sig, &sig, message, &tree, &parents)
        .unwrap();
    repo.reference("refs/heads/main", id, true, message)
        .unwrap();
    id
}

fn check(dir: &Path, base: &str, head: Oid) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["check", "--repo"])
        .arg(dir)
        .args(["--base", base, "--head", &head.to_string(), "-o", "json"])
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

struct Fleet {
    dir: tempfile::TempDir,
    repo: Repository,
    nova_2026_1: Oid,
    nova_2025_1: Oid,
    base: Oid,
}

/// A first commit with Nova compute/nova at 2026.1 in `nova.yaml`.
fn fleet() -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repository::init(dir.path()).unwrap();
    let nova_2026_1 = repo
        .blob(common::nova("nova", "2026.1", "2026.1").as_bytes())
        .unwrap();
    let nova_2025_1 = repo
        .blob(common::nova("nova", "2025.1", "2025.1").as_bytes())
        .unwrap();
    let tree = root(&repo, &[("100644", b"nova.yaml", nova_2026_1)]);
    let base = commit(&repo, tree, None, "nova at 2026.1");
    Fleet {
        dir,
        repo,
        nova_2026_1,
        nova_2025_1,
        base,
    }
}

/// The one refusal of the single judged commit: its file and message.
fn refusal(code: i32, json: &Value) -> (String, String) {
    assert_eq!(code, 1, "{json:#}");
    let commit = &json["commits"][0];
    assert_eq!(commit["verdict"], "refused", "{json:#}");
    let o = &commit["objects"][0];
    assert_eq!(o["reason"], "ManifestInvalid", "{json:#}");
    (
        o["file"].as_str().unwrap_or("").to_owned(),
        o["message"].as_str().unwrap_or("").to_owned(),
    )
}

#[test]
fn a_name_that_is_not_utf8_is_refused_and_cannot_hide_a_downgrade() {
    let f = fleet();
    // Two names that both read `\u{FFFD}.yaml` when decoded lossily: the
    // second (a downgrade of the same Nova) used to be invisible.
    let harmless = f
        .repo
        .blob(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
        .unwrap();
    let tree = root(
        &f.repo,
        &[
            ("100644", b"nova.yaml", f.nova_2026_1),
            ("100644", b"\xfe.yaml", f.nova_2025_1),
            ("100644", b"\xff.yaml", harmless),
        ],
    );
    let head = commit(&f.repo, tree, Some(f.base), "hidden downgrade");
    let (code, json) = check(f.dir.path(), &f.base.to_string(), head);
    let (file, message) = refusal(code, &json);
    assert_eq!(file, "standalone/compute/\\xfe.yaml");
    assert!(message.contains("not UTF-8"), "{message}");
    // From the empty tree too: the first commit is fine, the second refused.
    let (code, json) = check(
        f.dir.path(),
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        head,
    );
    assert_eq!(code, 1, "{json:#}");
    assert_eq!(json["commits"][0]["verdict"], "accepted", "{json:#}");
    assert_eq!(json["commits"][1]["verdict"], "refused", "{json:#}");
}

#[test]
fn a_name_twice_in_a_directory_is_refused() {
    let f = fleet();
    // `git show main:…/nova.yaml` reads the first, a checkout writes the
    // last, libgit2's lookup by path finds either.
    let tree = root(
        &f.repo,
        &[
            ("100644", b"nova.yaml", f.nova_2025_1),
            ("100644", b"nova.yaml", f.nova_2026_1),
        ],
    );
    let head = commit(&f.repo, tree, Some(f.base), "nova.yaml twice");
    let (file, message) = refusal_of(&f, head);
    assert_eq!(file, "standalone/compute/nova.yaml");
    assert!(message.contains("twice"), "{message}");

    // A file and a directory of one name, apart in Git's order.
    let sub = raw_tree(&f.repo, &[("100644", b"nova.yaml", f.nova_2025_1)]);
    let tree = root(
        &f.repo,
        &[
            ("100644", b"nova.yaml", f.nova_2026_1),
            ("100644", b"nova.yaml.bak", f.nova_2026_1),
            ("40000", b"nova.yaml", sub),
        ],
    );
    let head = commit(&f.repo, tree, Some(f.base), "a file and a directory");
    let (file, message) = refusal_of(&f, head);
    assert_eq!(file, "standalone/compute/nova.yaml");
    assert!(message.contains("twice"), "{message}");
}

#[test]
fn entries_out_of_order_are_refused() {
    let f = fleet();
    let tree = root(
        &f.repo,
        &[
            ("100644", b"nova.yaml", f.nova_2026_1),
            ("100644", b"another.yaml", f.nova_2025_1),
        ],
    );
    let head = commit(&f.repo, tree, Some(f.base), "out of order");
    let (file, message) = refusal_of(&f, head);
    assert_eq!(file, "standalone/compute/another.yaml");
    assert!(message.contains("Git's order"), "{message}");
}

#[test]
fn the_commit_that_repairs_the_tree_is_judged_as_usual() {
    let f = fleet();
    let bad = root(
        &f.repo,
        &[
            ("100644", b"nova.yaml", f.nova_2025_1),
            ("100644", b"nova.yaml", f.nova_2026_1),
        ],
    );
    let bad = commit(&f.repo, bad, Some(f.base), "nova.yaml twice");
    let nova_2026_2 = f
        .repo
        .blob(common::nova("nova", "2026.2", "2026.2").as_bytes())
        .unwrap();
    let good = root(&f.repo, &[("100644", b"nova.yaml", nova_2026_2)]);
    let good = commit(&f.repo, good, Some(bad), "nova to 2026.2");
    let (code, json) = check(f.dir.path(), &f.base.to_string(), good);
    assert_eq!(code, 1, "{json:#}");
    assert_eq!(json["commits"][0]["verdict"], "refused", "{json:#}");
    let second = &json["commits"][1];
    assert_eq!(second["verdict"], "accepted", "{json:#}");
    assert_eq!(second["objects"][0]["from"], "2026.1", "{json:#}");
    assert_eq!(second["objects"][0]["to"], "2026.2", "{json:#}");
    // The text names the entry without a line number.
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["check", "--repo"])
        .arg(f.dir.path())
        .args(["--base", &f.base.to_string(), "--head", &bad.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("      standalone/compute/nova.yaml: the name appears twice"),
        "{text}"
    );
}

fn refusal_of(f: &Fleet, head: Oid) -> (String, String) {
    let (code, json) = check(f.dir.path(), &f.base.to_string(), head);
    refusal(code, &json)
}

/// A file lockstep never reads may have any name (a Latin-1 `résumé.txt`):
/// the commit is judged as usual. Such a name cannot stand in for a
/// directory spelled with U+FFFD either: the directory's downgrade is seen.
#[test]
fn a_name_lockstep_never_reads_may_be_anything() {
    let f = fleet();
    let notes = f.repo.blob(b"notes\n").unwrap();
    let nova_2026_2 = f
        .repo
        .blob(common::nova("nova", "2026.2", "2026.2").as_bytes())
        .unwrap();
    let tree = root(
        &f.repo,
        &[
            ("100644", b"nova.yaml", nova_2026_2),
            ("100644", b"r\xe9sum\xe9.txt", notes),
        ],
    );
    let head = commit(&f.repo, tree, Some(f.base), "nova to 2026.2, and notes");
    let (code, json) = check(f.dir.path(), &f.base.to_string(), head);
    assert_eq!(code, 0, "{json:#}");
    assert_eq!(json["commits"][0]["objects"][0]["to"], "2026.2", "{json:#}");

    // `x\u{FFFD}` (a directory, valid UTF-8) holding a downgrade, and
    // `x\xff` (a file no one reads) that reads as the same name lossily.
    let sub = raw_tree(&f.repo, &[("100644", b"nova.yaml", f.nova_2025_1)]);
    let tree = root(
        &f.repo,
        &[
            ("100644", b"nova.yaml.off", f.nova_2026_1),
            ("40000", "x\u{FFFD}".as_bytes(), sub),
            ("100644", b"x\xff", notes),
        ],
    );
    let head = commit(&f.repo, tree, Some(f.base), "nova moved down");
    let (code, json) = check(f.dir.path(), &f.base.to_string(), head);
    assert_eq!(code, 1, "{json:#}");
    let o = &json["commits"][0]["objects"][0];
    assert_eq!(o["reason"], "DowngradeNotSupported", "{json:#}");
}
