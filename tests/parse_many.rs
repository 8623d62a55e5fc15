//! A tree of more than 64 manifest files is parsed on every core, the blobs
//! streamed to the parser threads as they are read (`history.rs`,
//! `parse_many`). What the judgment sees must be what parsing each file on
//! its own gives, in the tree's order, whatever thread parsed it; and a
//! plan among those files must still be judged (the walk notes which blobs
//! cannot hold one while it streams them).

#[path = "../benches/support/fleet.rs"]
mod fleet;

use lockstep::desired::expand;
use lockstep::gate::Verdict;
use lockstep::git::{EntryKind, GitRepo, Resolved};
use lockstep::history::{self, CheckOptions};
use lockstep::manifest;

const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// 30 ControlPlanes and 60 standalone services, with files that do not
/// parse, are not UTF-8, or are not ours, spread among them.
fn fleet_with_oddities(work: &std::path::Path, plan: Option<&str>) -> GitRepo {
    fleet::git(work, &["init", "-q", "-b", "main"]);
    let written = fleet::write(work, 30, 60);
    assert!(written.files > 64, "the fleet must take the parallel path");
    let odd = work.join("standalone/odd");
    std::fs::create_dir_all(&odd).expect("mkdir");
    std::fs::write(odd.join("broken.yaml"), "kind: [unclosed\n").expect("write");
    std::fs::write(odd.join("latin1.yaml"), b"name: caf\xe9\n").expect("write");
    std::fs::write(odd.join("other.yaml"), "apiVersion: v1\nkind: ConfigMap\n").expect("write");
    if let Some(text) = plan {
        std::fs::create_dir_all(work.join("plans")).expect("mkdir");
        std::fs::write(work.join("plans/wave.yaml"), text).expect("write");
    }
    fleet::git(work, &["add", "-A"]);
    fleet::git(work, &["commit", "-q", "-m", "fleet"]);
    GitRepo::open(work).expect("open")
}

#[test]
fn a_tree_parsed_on_every_core_is_what_each_file_parsed_alone_gives() {
    let tmp = tempfile::tempdir().expect("tmp");
    let repo = fleet_with_oddities(tmp.path(), None);
    let Resolved::Commit(head) = repo.resolve("HEAD").expect("resolve") else {
        panic!("HEAD is a commit");
    };
    let tree = repo.commit(head).expect("commit").tree;
    let opts = CheckOptions::default();
    let (desired, problems) = history::tree_desired(&repo, Some(tree), &opts).expect("tree");

    let mut want_desired = Vec::new();
    let mut want_problems = Vec::new();
    let files = repo
        .files(tree, &[], manifest::is_manifest_path)
        .expect("files");
    assert!(files.len() > 64, "{} files", files.len());
    for (path, entry) in &files {
        assert_eq!(entry.kind, EntryKind::File);
        let blob = repo.blob(entry.oid).expect("blob");
        let parsed = manifest::parse_file(path, blob.content(), manifest::DEFAULT_MAX_FILE_BYTES);
        want_desired.extend(expand(&parsed.documents));
        want_problems.extend(parsed.problems);
    }
    assert_eq!(desired.len(), 30 * 9 + 60);
    assert_eq!(desired, want_desired);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(problems, want_problems);
}

#[test]
fn a_plan_among_many_files_is_still_judged() {
    let tmp = tempfile::tempdir().expect("tmp");
    let plan = "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata:\n  name: wave\nspec:\n  to: \"banana\"\n  waves:\n    - name: all\n      select:\n        - kind: ControlPlane\n      maxParallel: 1\n";
    let repo = fleet_with_oddities(tmp.path(), Some(plan));
    let report = history::check(
        &repo,
        &CheckOptions {
            base: Some(EMPTY_TREE.into()),
            ..CheckOptions::default()
        },
    )
    .expect("check");
    let refused: Vec<_> = report.commits[0]
        .objects
        .iter()
        .filter(|o| o.verdict == Verdict::Refused && &*o.file == "plans/wave.yaml")
        .collect();
    assert!(!refused.is_empty(), "the plan was not judged");
}
