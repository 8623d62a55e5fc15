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
        "lockstep/eu-de-1/review: failure — refused: nova 2026.1→2027.1 skips 2026.2 (UpgradePathInvalid)"
    );
    let hop = notes(repo.path(), "HEAD");
    assert_eq!(
        hop,
        "lockstep/eu-de-1/review: success — accepted: nova 2026.1→2026.2 upgrade"
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
    assert!(
        both.contains("lockstep/eu-de-1/review: success")
            && both.contains("lockstep/us-1/review: success")
    );
}

/// A new bare repository at `path`.
fn bare(path: &std::path::Path) {
    let st = std::process::Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(path)
        .status()
        .expect("git");
    assert!(st.success());
}

/// The notes a bare repository holds for `main`.
fn notes_in(bare: &std::path::Path) -> String {
    let out = std::process::Command::new("git")
        .args(["notes", "--ref=lockstep", "show", "main"])
        .current_dir(bare)
        .output()
        .expect("git notes");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `check --report notes` of `repo` with `extra`, which must succeed; its
/// standard error.
/// `--push-notes` without `--report notes` (none, or a host's) is a usage
/// error, not a check that silently pushes nothing.
#[test]
fn push_notes_without_report_is_a_usage_error() {
    let repo = FleetRepo::new();
    let path = repo.path().to_string_lossy().into_owned();
    for extra in [&[][..], &["--report", "github"][..]] {
        let mut args = vec!["check", "--repo", &path, "--push-notes"];
        args.extend_from_slice(extra);
        let out = lockstep(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--report"),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn check_pushing(repo: &FleetRepo, extra: &[&str]) -> String {
    let path = repo.path().to_string_lossy().into_owned();
    let mut args = vec!["check", "--repo", &path, "--report", "notes"];
    args.extend_from_slice(extra);
    let out = lockstep(&args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    err
}

#[test]
fn notes_are_pushed_to_the_remote() {
    let remote = tempfile::tempdir().expect("tmp");
    let up = remote.path().join("fleet.git");
    bare(&up);
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    repo.commit("fleet");
    repo.git(&["remote", "add", "origin", &up.to_string_lossy()]);
    repo.git(&["push", "-q", "-u", "origin", "main"]);
    let err = check_pushing(&repo, &["--push-notes"]);
    let text = notes_in(&up);
    assert!(
        text.contains("lockstep/default/review: success — accepted: nova 2026.1 installed"),
        "{text}"
    );
    assert!(
        err.contains("pushed refs/notes/lockstep to origin"),
        "the branch's remote"
    );
}

/// A remote whose URL is a relative path is taken from the top of the work
/// tree, as `git push` takes it, wherever lockstep was started (libgit2
/// alone would take it from the working directory: here the crate's, where
/// no such repository is).
#[test]
fn notes_go_to_a_relative_remote_as_git_push_takes_it() {
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    repo.commit("fleet");
    let (up, pushed) = (repo.path().join("up.git"), repo.path().join("pushed.git"));
    bare(&up);
    bare(&pushed);
    std::fs::write(
        repo.path().join(".git/info/exclude"),
        "up.git/\npushed.git/\n",
    )
    .unwrap();
    repo.git(&["remote", "add", "origin", "./up.git"]);
    repo.git(&["push", "-q", "-u", "origin", "main"]);
    check_pushing(&repo, &["--push-notes", "origin"]);
    assert!(notes_in(&up).contains("lockstep/default/review: success"));

    // A push URL, relative too, is where they go (fetched from there as
    // well when the push is refused), not the fetch URL.
    repo.git(&["config", "remote.origin.pushurl", "pushed.git"]);
    repo.git(&["push", "-q", "origin", "main"]);
    check_pushing(&repo, &["--cluster", "second", "--push-notes", "origin"]);
    assert!(notes_in(&pushed).contains("lockstep/second/review: success"));
    assert!(!notes_in(&up).contains("lockstep/second"));
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

/// A status with a link, delivered to notes twice, is written once: notes
/// keep no link, so the link is not compared (every linked status was
/// written again on every pass).
#[tokio::test]
async fn a_linked_status_already_in_the_notes_is_not_written_again() {
    use lockstep::forge::delivery::{Outcome, RetryPolicy, deliver};
    use lockstep::forge::notes::Notes;
    use lockstep::forge::{State, Status};
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    let sha = repo.commit("fleet");
    let writer = Notes::open(repo.path()).unwrap();
    let status = Status {
        state: State::Success,
        context: "lockstep/t".into(),
        description: "accepted".into(),
        target_url: Some("https://ci.example/job/1".into()),
    };
    let policy = RetryPolicy::default();
    let first = deliver(&writer, &policy, &sha, &status).await.unwrap();
    assert_eq!(first, Outcome::Posted);
    let again = deliver(&writer, &policy, &sha, &status).await.unwrap();
    assert_eq!(again, Outcome::AlreadyThere);
}

/// Two clusters, each with its own lockstep and its own contexts, report as
/// notes into one repository. Whoever pushes second is refused (the
/// remote's notes moved on): it fetches them, merges them line by context,
/// and pushes again. Nothing either cluster wrote is lost; a context both
/// wrote keeps the pusher's own line. One cluster pushes to a named remote,
/// the other to the source's URL (the daemon's way, with its credentials).
#[tokio::test]
async fn notes_from_two_clusters_merge_on_one_remote() {
    use lockstep::forge::notes::{Notes, NotesRemote};
    use lockstep::forge::{Forge, State, Status};
    use lockstep::source::{Auth, PushTarget};

    let tmp = tempfile::tempdir().expect("tmp");
    let bare = tmp.path().join("fleet.git");
    let run = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    let c1 = repo.commit("fleet");
    repo.write("nova.yaml", nova("nova", "2026.2", "2026.2"));
    let c2 = repo.commit("hop");
    run(
        tmp.path(),
        &["init", "-q", "--bare", &bare.to_string_lossy()],
    );
    repo.git(&["push", "-q", &bare.to_string_lossy(), "main"]);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    for d in [&a, &b] {
        run(
            tmp.path(),
            &["clone", "-q", &bare.to_string_lossy(), &d.to_string_lossy()],
        );
    }
    let status = |ctx: &str, state: State, d: &str| Status {
        state,
        context: ctx.to_owned(),
        description: d.to_owned(),
        target_url: None,
    };
    let na = Notes::open(&a).expect("notes a");
    let nb = Notes::open(&b).expect("notes b");
    let to_a = NotesRemote::Named("origin".into());
    let to_b = NotesRemote::Source(
        PushTarget::new(&format!("file://{}", bare.display()), Auth::default()).expect("target"),
    );

    na.post(&c1, &status("lockstep/a", State::Success, "applied: a"))
        .await
        .expect("post");
    na.post(&c1, &status("lockstep/shared", State::Success, "a's word"))
        .await
        .expect("post");
    na.push_to(&to_a).expect("first push");
    // b has not seen a's notes: its push is refused, merged, pushed.
    nb.post(&c1, &status("lockstep/b", State::Failure, "refused: b"))
        .await
        .expect("post");
    nb.post(&c1, &status("lockstep/shared", State::Failure, "b's word"))
        .await
        .expect("post");
    nb.post(&c2, &status("lockstep/b", State::Pending, "waiting: b"))
        .await
        .expect("post");
    nb.push_to(&to_b).expect("second push merges");
    // a again, behind b's merge now.
    na.post(&c2, &status("lockstep/a", State::Running, "migrating: a"))
        .await
        .expect("post");
    na.push_to(&to_a).expect("third push merges");

    let shown = |rev: &str| {
        run(
            tmp.path(),
            &[
                "--git-dir",
                &bare.to_string_lossy(),
                "notes",
                "--ref=lockstep",
                "show",
                rev,
            ],
        )
    };
    let n1 = shown(&c1);
    assert!(n1.contains("lockstep/a: success — applied: a"), "{n1}");
    assert!(n1.contains("lockstep/b: failure — refused: b"), "{n1}");
    // The last pusher merged last: its own line for the shared context.
    assert!(n1.contains("lockstep/shared: success — a's word"), "{n1}");
    assert!(!n1.contains("b's word"), "{n1}");
    let n2 = shown(&c2);
    assert!(n2.contains("lockstep/a: running — migrating: a"), "{n2}");
    assert!(n2.contains("lockstep/b: pending — waiting: b"), "{n2}");
    // Both histories are kept: the remote's notes ref descends from each
    // cluster's first push.
    let log = run(
        tmp.path(),
        &[
            "--git-dir",
            &bare.to_string_lossy(),
            "log",
            "--format=%s",
            "refs/notes/lockstep",
        ],
    );
    assert_eq!(log.matches("Notes merged from").count(), 2, "{log}");
    // And b, merging again, gets everything without losing its own.
    nb.push_to(&to_b).expect("nothing new to push");
    let mine = nb.statuses(&c2).await.expect("statuses");
    assert!(mine.iter().any(|p| p.context == "lockstep/b"), "{mine:?}");
}
