//! The Git source of `lockstep run`, against real parts: a real `git daemon`
//! serving a bare repository that the git CLI pushes to, a real OpenSSH
//! server for ssh with a key and known_hosts, a real local repository
//! watched with inotify, and (for the token) a plain HTTP server that
//! refuses every request the way a forge refuses a bad token.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::{FleetRepo, GitDaemon};
use git2::Oid;
use lockstep::secret::Secret;
use lockstep::source::{Auth, Origin, Refresh, Source, SourceError, watch_local};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn oid(hex: &str) -> Oid {
    Oid::from_str(hex).expect("oid")
}

/// A bare `fleet.git` served by git daemon, a work clone that pushes to
/// it, and a cache directory for the source.
struct Served {
    root: tempfile::TempDir,
    work: FleetRepo,
    daemon: GitDaemon,
    first: String,
}

/// A bare `srv/fleet.git` with one commit on main, and the work clone that
/// pushes to it: (root, work, first commit).
fn bare_fleet() -> (tempfile::TempDir, FleetRepo, String) {
    let root = tempfile::tempdir().expect("tempdir");
    let bare = root.path().join("srv/fleet.git");
    std::fs::create_dir_all(&bare).expect("mkdir");
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    let work = FleetRepo::new();
    work.git(&["remote", "add", "origin", &bare.to_string_lossy()]);
    work.write(
        "clusters/prod/controlplane.yaml",
        common::prod("2025.2", "2025.2"),
    );
    let first = work.commit("first");
    work.git(&["push", "-q", "origin", "HEAD:refs/heads/main"]);
    (root, work, first)
}

impl Served {
    fn new() -> Served {
        let (root, work, first) = bare_fleet();
        let daemon = GitDaemon::start(&root.path().join("srv"));
        Served {
            root,
            work,
            daemon,
            first,
        }
    }

    fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    fn origin(&self) -> Origin {
        Origin::Remote {
            url: self.daemon.url("fleet.git"),
            cache_dir: self.cache(),
            auth: Auth::default(),
        }
    }

    fn open(&self) -> Source {
        Source::open(self.origin(), "main").expect("open")
    }

    /// A new commit on main, pushed; returns its id.
    fn push_commit(&self, message: &str) -> String {
        self.work.write("notes.txt", message);
        let id = self.work.commit(message);
        self.work
            .git(&["push", "-q", "origin", "HEAD:refs/heads/main"]);
        id
    }
}

/// Every file under `dir` with its size and mtime: any write shows.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), (meta.len(), meta.modified().expect("mtime")));
            }
        }
    }
    out
}

fn cache_ref(source: &Source, name: &str) -> Option<Oid> {
    git2::Repository::open_bare(source.path())
        .expect("cache opens")
        .refname_to_id(name)
        .ok()
}

#[test]
fn open_clones_into_the_cache_and_refresh_fetches_only_when_the_branch_moves() {
    let served = Served::new();
    let mut source = served.open();
    assert!(
        source.path().starts_with(served.cache()),
        "{}",
        source.path().display()
    );
    assert!(git2::Repository::open_bare(source.path()).is_ok());
    assert_eq!(source.head(), Some(oid(&served.first)));
    assert_eq!(source.fetches(), 1);
    assert!(source.pulls().is_empty());
    // What the daemon does next: read the commit through the git edge.
    let repo = lockstep::git::GitRepo::open(source.path()).expect("git edge opens the cache");
    assert_eq!(
        repo.resolve("HEAD").expect("HEAD"),
        lockstep::git::Resolved::Commit(oid(&served.first))
    );

    // Nothing new: answered from the ref listing, nothing fetched or written.
    let before = snapshot(source.path());
    assert_eq!(source.refresh().expect("refresh"), Refresh::Unchanged);
    assert_eq!(source.fetches(), 1);
    assert_eq!(snapshot(source.path()), before);

    let second = served.push_commit("second");
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.head(), Some(oid(&second)));
    assert_eq!(source.fetches(), 2);
    assert_ne!(snapshot(source.path()), before);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Unchanged);

    // History rewritten and force-pushed: followed, not refused.
    served.work.git(&["reset", "-q", "--hard", &served.first]);
    served.work.write("notes.txt", "rewritten");
    let rewritten = served.work.commit("rewritten");
    served
        .work
        .git(&["push", "-q", "-f", "origin", "HEAD:refs/heads/main"]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.head(), Some(oid(&rewritten)));
    assert_eq!(cache_ref(&source, "refs/heads/main"), Some(oid(&rewritten)));
    let repo = lockstep::git::GitRepo::open(source.path()).expect("git edge");
    assert_eq!(
        repo.first_parent(oid(&rewritten)).expect("parent"),
        Some(oid(&served.first))
    );
}

#[test]
fn pull_request_heads_come_and_go() {
    let served = Served::new();
    let mut source = served.open();
    served
        .work
        .git(&["push", "-q", "origin", "HEAD:refs/pull/7/head"]);
    // Not a head: GitHub's test merge is not what lockstep judges.
    served
        .work
        .git(&["push", "-q", "origin", "HEAD:refs/pull/8/merge"]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.pulls(), vec![(7, oid(&served.first))]);
    assert_eq!(source.head(), Some(oid(&served.first)));

    // A GitLab merge request on its own commit, which must be fetched.
    served.work.git(&["checkout", "-q", "-b", "feature"]);
    served.work.write("feature.txt", "f");
    let feature = served.work.commit("feature");
    served
        .work
        .git(&["push", "-q", "origin", "HEAD:refs/merge-requests/9/head"]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(
        source.pulls(),
        vec![(7, oid(&served.first)), (9, oid(&feature))]
    );
    let cache = git2::Repository::open_bare(source.path()).expect("cache");
    assert!(cache.find_commit(oid(&feature)).is_ok());
    assert_eq!(source.refresh().expect("refresh"), Refresh::Unchanged);

    // Deleted on the server: gone locally too, without a fetch.
    let fetches = source.fetches();
    served
        .work
        .git(&["push", "-q", "origin", ":refs/pull/7/head"]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.pulls(), vec![(9, oid(&feature))]);
    assert_eq!(cache_ref(&source, "refs/lockstep/pr/7"), None);
    assert_eq!(
        cache_ref(&source, "refs/lockstep/pr/9"),
        Some(oid(&feature))
    );
    assert_eq!(source.fetches(), fetches);

    // Force-pushed pull request: followed.
    served
        .work
        .git(&["commit", "-q", "--amend", "-m", "feature v2"]);
    let amended = served.work.git(&["rev-parse", "HEAD"]);
    served.work.git(&[
        "push",
        "-q",
        "-f",
        "origin",
        "HEAD:refs/merge-requests/9/head",
    ]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.pulls(), vec![(9, oid(&amended))]);
}

#[test]
fn an_existing_cache_is_reused_and_a_corrupt_one_is_cloned_again() {
    let served = Served::new();
    let path = served.open().path().to_owned();
    let marker = path.join("lockstep-test-marker");
    std::fs::write(&marker, "kept unless re-cloned").expect("marker");

    let second = served.push_commit("second");
    let source = served.open();
    assert_eq!(source.path(), path);
    assert!(marker.exists(), "the cache was cloned again");
    // Reopened caches are brought up to date before open returns.
    assert_eq!(source.head(), Some(oid(&second)));
    assert_eq!(source.fetches(), 1);
    drop(source);

    // Every object lost: the refs point at nothing.
    for e in std::fs::read_dir(path.join("objects")).expect("objects") {
        let p = e.expect("entry").path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "info") {
            for f in std::fs::read_dir(&p).expect("dir") {
                std::fs::remove_file(f.expect("entry").path()).expect("rm");
            }
        }
    }
    let source = served.open();
    assert_eq!(source.path(), path);
    assert!(!marker.exists(), "a corrupt cache was reused");
    assert_eq!(source.head(), Some(oid(&second)));
    drop(source);

    // Not a repository at all (say, an interrupted copy).
    std::fs::remove_dir_all(&path).expect("rm");
    std::fs::create_dir_all(&path).expect("mkdir");
    std::fs::write(path.join("junk"), "junk").expect("junk");
    let source = served.open();
    assert_eq!(source.head(), Some(oid(&second)));
    assert!(!path.join("junk").exists());

    // No clone leftovers beside the cache.
    let entries: Vec<_> = std::fs::read_dir(served.cache())
        .expect("cache dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
}

#[test]
fn an_unreachable_remote_keeps_the_last_good_state_until_it_is_back() {
    let mut served = Served::new();
    served
        .work
        .git(&["push", "-q", "origin", "HEAD:refs/pull/3/head"]);
    let mut source = served.open();
    let good_pulls = source.pulls();
    assert_eq!(good_pulls, vec![(3, oid(&served.first))]);

    served.daemon.stop();
    let second = served.push_commit("second while down");
    let err = source.refresh().expect_err("the daemon is down");
    let message = err.to_string();
    assert!(
        message.contains(&served.daemon.url("fleet.git")),
        "{message}"
    );
    assert!(matches!(err, SourceError::Remote { .. }), "{err:?}");
    assert_eq!(source.head(), Some(oid(&served.first)));
    assert_eq!(source.pulls(), good_pulls);

    served.daemon.restart();
    assert_eq!(source.refresh().expect("back"), Refresh::Changed);
    assert_eq!(source.head(), Some(oid(&second)));
}

#[test]
fn a_missing_or_invalid_branch_is_named() {
    let served = Served::new();
    let err = Source::open(served.origin(), "release").expect_err("no such branch");
    assert!(matches!(err, SourceError::NoBranch { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("\"release\"") && message.contains(&served.daemon.url("fleet.git")),
        "{message}"
    );
    // Nothing half-made left behind.
    let left = std::fs::read_dir(served.cache())
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0);

    for bad in ["main:refs/heads/evil", "*", "a..b", ""] {
        let err = Source::open(served.origin(), bad).expect_err("invalid branch");
        assert!(
            matches!(err, SourceError::InvalidBranch { .. }),
            "{bad}: {err:?}"
        );
    }
    let err = Source::open(Origin::Local(served.work.path().to_owned()), "release")
        .expect_err("no such local branch");
    assert!(err.to_string().contains("release"), "{err}");
}

/// ssh as users run it: an OpenSSH server, a deploy key, a known_hosts
/// entry for `[host]:port`. Clone, fetch when the branch moves, push a
/// branch with the same credentials (plan commits and proposals go so),
/// and fail closed, naming the file, when the host key changed or the key
/// is not authorised.
#[test]
fn ssh_with_a_key_and_known_hosts_fetches_pushes_and_fails_closed() {
    let sshd = common::sshd::Sshd::start();
    let (root, work, first) = bare_fleet();
    let bare = root.path().join("srv/fleet.git");
    let auth = Auth {
        ssh_key: Some(sshd.client_key()),
        known_hosts: Some(sshd.known_hosts()),
        ..Auth::default()
    };
    let origin = |cache: &str, auth: Auth| Origin::Remote {
        url: sshd.url(&bare),
        cache_dir: root.path().join(cache),
        auth,
    };

    let mut source = Source::open(origin("cache", auth.clone()), "main")
        .unwrap_or_else(|e| panic!("ssh clone: {e}\nsshd: {}", sshd.log()));
    assert_eq!(source.head(), Some(oid(&first)));
    assert_eq!(source.refresh().expect("refresh"), Refresh::Unchanged);
    work.write("notes.txt", "second");
    let second = work.commit("second");
    work.git(&["push", "-q", "origin", "HEAD:refs/heads/main"]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.head(), Some(oid(&second)));
    assert_eq!(source.fetches(), 2);
    assert!(
        sshd.log().contains("Accepted publickey"),
        "not through sshd: {}",
        sshd.log()
    );

    // A push with the source's credentials, as plan write-back does.
    let target = source.push_target().expect("a remote source pushes");
    let cache = git2::Repository::open_bare(source.path()).expect("cache");
    let head = cache.find_commit(oid(&second)).expect("head in the cache");
    cache.branch("lockstep/probe", &head, true).expect("branch");
    let errs = std::cell::RefCell::new(None);
    lockstep::plan::writeback::push_branch(
        source.path(),
        target.url(),
        "lockstep/probe",
        target.callbacks(&errs),
    )
    .unwrap_or_else(|e| panic!("ssh push: {e} ({:?})\nsshd: {}", errs.borrow(), sshd.log()));
    assert_eq!(git(&bare, &["rev-parse", "lockstep/probe"]), second);

    // The server's host key changed (or a man in the middle): refused
    // before anything is fetched, naming the known_hosts file.
    let other = root.path().join("other_known_hosts");
    let another_host = common::sshd::keygen(&root.path().join("another_host"));
    std::fs::write(
        &other,
        format!("[127.0.0.1]:{} {another_host}\n", sshd.port),
    )
    .expect("known_hosts");
    let err = Source::open(
        origin(
            "cache-mismatch",
            Auth {
                known_hosts: Some(other.clone()),
                ..auth.clone()
            },
        ),
        "main",
    )
    .expect_err("a changed host key");
    assert!(matches!(err, SourceError::HostKey { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("other_known_hosts")
            && message.contains("127.0.0.1")
            && message.contains("differs from the recorded one"),
        "{message}"
    );
    assert!(!message.contains("BEGIN OPENSSH PRIVATE KEY"), "{message}");

    // A key the server does not know: refused by the server, said so.
    let stranger = root.path().join("id_stranger");
    common::sshd::keygen(&stranger);
    let err = Source::open(
        origin(
            "cache-stranger",
            Auth {
                ssh_key: Some(stranger),
                ..auth
            },
        ),
        "main",
    )
    .expect_err("an unauthorised key");
    let message = err.to_string();
    assert!(
        matches!(
            err,
            SourceError::AuthRefused {
                what: "ssh key",
                ..
            }
        ),
        "{err:?}: {message}"
    );
    assert!(
        message.contains(&format!("127.0.0.1:{}", sshd.port)),
        "{message}"
    );
}

#[test]
fn ssh_without_known_hosts_is_refused_before_connecting() {
    // Counts and drops connections, so that an attempt shows (and fails
    // fast instead of waiting for an ssh banner).
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let connections = Arc::new(Mutex::new(0usize));
    let counter = Arc::clone(&connections);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            *counter.lock().expect("lock") += 1;
            drop(stream);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("id_ed25519");
    std::fs::write(&key, "not read").expect("key");
    let url = format!("ssh://git@127.0.0.1:{port}/x.git");
    let err = Source::open(
        Origin::Remote {
            url: url.clone(),
            cache_dir: dir.path().join("cache"),
            auth: Auth {
                ssh_key: Some(key.clone()),
                ..Auth::default()
            },
        },
        "main",
    )
    .expect_err("ssh without known_hosts");
    assert!(matches!(err, SourceError::NoKnownHosts { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("known_hosts")
            && message.contains(&format!("ssh://127.0.0.1:{port}/x.git")),
        "{message}"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(*connections.lock().expect("lock"), 0, "ssh connected");
    assert!(!dir.path().join("cache").exists());

    // A known_hosts file that cannot be read is no better than none.
    let err = Source::open(
        Origin::Remote {
            url: url.clone(),
            cache_dir: dir.path().join("cache"),
            auth: Auth {
                ssh_key: Some(key),
                known_hosts: Some(dir.path().join("missing_known_hosts")),
                ..Auth::default()
            },
        },
        "main",
    )
    .expect_err("unreadable known_hosts");
    assert!(matches!(err, SourceError::KnownHostsFile { .. }), "{err:?}");
    assert!(err.to_string().contains("missing_known_hosts"), "{err}");
}

/// Answers every HTTP request with 401 and records the Authorization
/// headers it was sent, as a forge does with a revoked token.
struct Refusing {
    port: u16,
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Refusing {
    fn start() -> Refusing {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&buf);
                let auth = text.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("authorization")
                        .then(|| v.trim().to_owned())
                });
                record.lock().expect("lock").push(auth);
                let _ = stream.write_all(
                    b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"fleet\"\r\n\
                      Content-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        Refusing { port, seen }
    }
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[test]
fn a_refused_token_is_sent_a_bounded_number_of_times_and_never_printed() {
    const TOKEN: &str = "tok-3f9a1c-not-for-logs";
    const URL_PASSWORD: &str = "url-pw-5b2e";
    let dir = tempfile::tempdir().expect("tempdir");
    for (token_user, user) in [(None, "x-access-token"), (Some("oauth2"), "oauth2")] {
        let server = Refusing::start();
        let url = format!(
            "http://someone:{URL_PASSWORD}@127.0.0.1:{}/org/fleet.git",
            server.port
        );
        let auth = Auth {
            token: Some(Secret::new(TOKEN)),
            token_user: token_user.map(str::to_owned),
            ..Auth::default()
        };
        let origin = Origin::Remote {
            url: url.clone(),
            cache_dir: dir.path().join("cache"),
            auth,
        };
        let shown = format!("{origin:?}");
        assert!(
            !shown.contains(TOKEN) && !shown.contains(URL_PASSWORD),
            "{shown}"
        );
        let err = Source::open(origin, "main").expect_err("refused");
        assert!(matches!(err, SourceError::AuthRefused { .. }), "{err:?}");
        let printed = format!("{err} {err:?}");
        assert!(
            printed.contains(&format!("http://127.0.0.1:{}/org/fleet.git", server.port)),
            "{printed}"
        );
        assert!(!printed.contains(TOKEN), "{printed}");
        assert!(!printed.contains(URL_PASSWORD), "{printed}");

        let seen = server.seen.lock().expect("lock").clone();
        assert!(
            seen.contains(&Some(basic(user, TOKEN))),
            "the token was not offered as {user}: {seen:?}"
        );
        assert!(seen.len() <= 3, "credentials retried: {seen:?}");
    }

    // A token over plain http to another machine is refused outright.
    let err = Source::open(
        Origin::Remote {
            url: "http://git.example.invalid/fleet.git".into(),
            cache_dir: dir.path().join("cache"),
            auth: Auth {
                token: Some(Secret::new(TOKEN)),
                ..Auth::default()
            },
        },
        "main",
    )
    .expect_err("cleartext token");
    assert!(matches!(err, SourceError::InsecureToken { .. }), "{err:?}");
}

#[test]
fn a_working_source_does_not_print_its_credentials() {
    const TOKEN: &str = "tok-77e0-also-not-for-logs";
    let served = Served::new();
    let auth = Auth {
        token: Some(Secret::new(TOKEN)),
        ..Auth::default()
    };
    assert!(!format!("{auth:?}").contains(TOKEN));
    let source = Source::open(
        Origin::Remote {
            url: served.daemon.url("fleet.git"),
            cache_dir: served.cache(),
            auth,
        },
        "main",
    )
    .expect("open");
    let shown = format!("{source:?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(shown.contains(&served.daemon.url("fleet.git")), "{shown}");
    assert_eq!(source.head(), Some(oid(&served.first)));
    // The cache's config records the URL, and nothing secret.
    let config = std::fs::read_to_string(source.path().join("config")).expect("config");
    assert!(config.contains(&served.daemon.url("fleet.git")), "{config}");
    assert!(!config.contains(TOKEN));

    fn send<T: Send>(_: &T) {}
    send(&source);
}

#[test]
fn a_local_repository_is_read_in_place_work_tree_or_bare() {
    let repo = FleetRepo::new();
    repo.write("a.txt", "a");
    let first = repo.commit("first");
    let mut source =
        Source::open(Origin::Local(repo.path().to_owned()), "main").expect("open work tree");
    assert_eq!(source.path(), repo.path());
    assert_eq!(source.head(), Some(oid(&first)));
    assert_eq!(source.refresh().expect("refresh"), Refresh::Unchanged);

    repo.git(&["update-ref", "refs/pull/4/head", &first]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.pulls(), vec![(4, oid(&first))]);
    repo.git(&["update-ref", "-d", "refs/pull/4/head"]);
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert!(source.pulls().is_empty());

    let bare_dir = tempfile::tempdir().expect("tempdir");
    let bare = bare_dir.path().join("fleet.git");
    git(
        bare_dir.path(),
        &[
            "clone",
            "-q",
            "--bare",
            &repo.path().to_string_lossy(),
            &bare.to_string_lossy(),
        ],
    );
    let source = Source::open(Origin::Local(bare.clone()), "main").expect("open bare");
    assert_eq!(source.head(), Some(oid(&first)));
    assert!(lockstep::git::GitRepo::open(source.path()).is_ok());
}

#[tokio::test]
async fn watching_a_local_repository_signals_a_commit_promptly() {
    let repo = FleetRepo::new();
    repo.write("a.txt", "a");
    let first = repo.commit("first");
    let mut source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("open");
    let (_watcher, mut rescans) = watch_local(repo.path()).expect("watch");
    tokio::time::sleep(Duration::from_millis(200)).await;
    while rescans.try_recv().is_ok() {}

    // Reading is not a change: were it one, every rescan would cause the
    // next, forever.
    assert_eq!(source.refresh().expect("refresh"), Refresh::Unchanged);
    let git_edge = lockstep::git::GitRepo::open(source.path()).expect("git edge");
    git_edge.resolve("refs/heads/main").expect("resolve");
    repo.git(&["log", "--oneline", "-1"]);
    let hint = tokio::time::timeout(Duration::from_millis(500), rescans.recv()).await;
    assert!(hint.is_err(), "reading the repository signalled a rescan");

    repo.write("a.txt", "b");
    let second = repo.commit("second");
    let hint = tokio::time::timeout(Duration::from_secs(5), rescans.recv()).await;
    assert_eq!(hint, Ok(Some(())), "no rescan within 5 s of a commit");
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.head(), Some(oid(&second)));

    // A burst (a commit writes many files) leaves at most one hint pending.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut pending = 0;
    while rescans.try_recv().is_ok() {
        pending += 1;
    }
    assert!(pending <= 1, "{pending} hints queued");

    // A pull-request ref appearing is a ref move too.
    repo.git(&["update-ref", "refs/pull/5/head", &second]);
    let hint = tokio::time::timeout(Duration::from_secs(5), rescans.recv()).await;
    assert_eq!(hint, Ok(Some(())), "no rescan within 5 s of a new ref");
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.pulls(), vec![(5, oid(&second))]);

    // A ref moved in place that HEAD does not point at (a force-pushed pull
    // request): only refs/pull/5/ changes, so the watch must reach into it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rescans.try_recv().is_ok() {}
    repo.git(&["update-ref", "refs/pull/5/head", &first]);
    let hint = tokio::time::timeout(Duration::from_secs(5), rescans.recv()).await;
    assert_eq!(
        hint,
        Ok(Some(())),
        "no rescan within 5 s of a nested ref move"
    );
    assert_eq!(source.refresh().expect("refresh"), Refresh::Changed);
    assert_eq!(source.pulls(), vec![(5, oid(&first))]);
}
