//! Verdicts as git notes: written by `check --report notes` into a real
//! repository, read back with the git CLI, deduplicated, pushed to a remote.

mod common;

use common::{FleetRepo, lockstep, nova};

fn notes(repo: &std::path::Path, rev: &str) -> String {
    let out = std::process::Command::new("git")
        .args(["log", "-1", "--notes=lockstep", "--format=%N", rev])
        .current_dir(repo)
        .output()
        .expect("git log");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn verdicts_become_notes_readable_by_git() {
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    let base = repo.commit("fleet");
    repo.write("nova.yaml", nova("nova", "2027.1", "2027.1"));
    repo.commit("skip");
    repo.write("nova.yaml", nova("nova", "2026.2", "2026.2"));
    repo.commit("hop");
    let path = repo.path().to_string_lossy().into_owned();
    let run = || {
        lockstep(&[
            "check",
            "--repo",
            &path,
            "--base",
            &base,
            "--report",
            "notes",
            "--cluster",
            "eu-de-1",
        ])
    };
    let out = run();
    assert_eq!(out.status.code(), Some(1), "the skip is refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("posted").count(), 2, "{err}");

    let skip = notes(repo.path(), "HEAD~1");
    assert_eq!(
        skip,
        "lockstep/eu-de-1: failure — refused: nova 2026.1→2027.1 skips 2026.2 (UpgradePathInvalid)"
    );
    let hop = notes(repo.path(), "HEAD");
    assert_eq!(
        hop,
        "lockstep/eu-de-1: success — accepted: nova 2026.1→2026.2 upgrade"
    );

    // The same verdicts again are not written twice.
    let out = run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("already there").count(), 2, "{err}");

    // A second cluster adds its own line; neither overwrites the other.
    let out = lockstep(&[
        "check",
        "--repo",
        &path,
        "--base",
        &base,
        "--report",
        "notes",
        "--cluster",
        "us-1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let both = notes(repo.path(), "HEAD");
    assert_eq!(both.lines().count(), 2, "{both}");
    assert!(both.contains("lockstep/eu-de-1: success") && both.contains("lockstep/us-1: success"));
}

#[test]
fn notes_are_pushed_to_the_remote() {
    let remote = tempfile::tempdir().expect("tmp");
    let bare = remote.path().join("fleet.git");
    let st = std::process::Command::new("git")
        .args(["init", "-q", "--bare", &bare.to_string_lossy()])
        .status()
        .expect("git");
    assert!(st.success());
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    repo.commit("fleet");
    repo.git(&["remote", "add", "origin", &bare.to_string_lossy()]);
    repo.git(&["push", "-q", "-u", "origin", "main"]);
    let out = lockstep(&[
        "check",
        "--repo",
        &repo.path().to_string_lossy(),
        "--report",
        "notes",
        "--push-notes",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = std::process::Command::new("git")
        .args([
            "--git-dir",
            &bare.to_string_lossy(),
            "notes",
            "--ref=lockstep",
            "show",
            "main",
        ])
        .output()
        .expect("git notes");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("lockstep/default: success — accepted: nova 2026.1 installed"),
        "{text}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pushed refs/notes/lockstep to origin"),
        "the branch's remote"
    );
}

/// A replica killed mid-write leaves `refs/notes/lockstep.lock` behind. A
/// fresh lock is another writer at work and is respected (the status is
/// retried later); one older than any write could take is removed.
#[tokio::test]
async fn a_stale_notes_lock_from_a_dead_writer_is_cleared_a_fresh_one_is_not() {
    use lockstep::forge::notes::Notes;
    use lockstep::forge::{Forge, ForgeError, State, Status};
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    let sha = repo.commit("fleet");
    let lock = repo.path().join(".git/refs/notes/lockstep.lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, "").unwrap();
    let writer = Notes::open(repo.path()).unwrap();
    let status = Status {
        state: State::Success,
        context: "lockstep/t".into(),
        description: "accepted".into(),
        target_url: None,
    };
    let fresh = writer.post(&sha, &status).await;
    assert!(matches!(fresh, Err(ForgeError::NotesBusy(_))), "{fresh:?}");
    assert!(lock.exists(), "a fresh lock is left alone");
    // Age it past any write (touch -d sets the mtime).
    let st = std::process::Command::new("touch")
        .args(["-d", "1 hour ago"])
        .arg(&lock)
        .status()
        .unwrap();
    assert!(st.success());
    writer.post(&sha, &status).await.unwrap();
    assert!(!lock.exists());
    assert_eq!(notes(repo.path(), "HEAD"), "lockstep/t: success — accepted");
}
