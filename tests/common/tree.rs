//! Whole trees committed with git2 (a test that pushes between a daemon's
//! passes writes the branch as a person would), and the statuses git notes
//! hold for a commit.

use std::path::Path;

use git2::{Repository, Signature};

/// Writes `files` (path, text) as one tree of regular files; its id.
pub fn write_tree<P: AsRef<str>, T: AsRef<str>>(
    repo: &Repository,
    files: impl IntoIterator<Item = (P, T)>,
) -> git2::Oid {
    let mut index = git2::Index::new().unwrap();
    for (path, text) in files {
        let text = text.as_ref();
        index
            .add(&git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                file_size: u32::try_from(text.len()).unwrap(),
                id: repo.blob(text.as_bytes()).unwrap(),
                flags: 0,
                flags_extended: 0,
                path: path.as_ref().as_bytes().to_vec(),
            })
            .unwrap();
    }
    index.write_tree_to(repo).unwrap()
}

/// Commits `files` (path, text) as main's whole tree; the new commit's id.
pub fn commit<P: AsRef<str>, T: AsRef<str>>(dir: &Path, files: &[(P, T)], message: &str) -> String {
    let repo = Repository::open(dir).unwrap();
    let tree = write_tree(&repo, files.iter().map(|(p, t)| (p.as_ref(), t.as_ref())));
    let tree = repo.find_tree(tree).unwrap();
    let sig = Signature::now("Fleet", "fleet@example.invalid").unwrap();
    let parent = repo
        .refname_to_id("refs/heads/main")
        .ok()
        .map(|id| repo.find_commit(id).unwrap());
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let id = repo
        .commit(
            Some("refs/heads/main"),
            &sig,
            &sig,
            message,
            &tree,
            &parents,
        )
        .unwrap();
    repo.set_head("refs/heads/main").unwrap();
    id.to_string()
}

/// The statuses git notes hold for `sha`, one per line.
pub fn notes(dir: &Path, sha: &str) -> String {
    let text = lockstep::forge::notes::history_text(dir, "main");
    let mut out = String::new();
    let mut on = false;
    for line in text.lines() {
        if !line.starts_with("    ") {
            on = line.starts_with(&sha[..10]);
        } else if on {
            out.push_str(line.trim());
            out.push('\n');
        }
    }
    out
}
