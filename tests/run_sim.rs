//! `lockstep run` end to end in sim mode (the in-process simulated C5C3
//! operator), through the real binary and real Git: the example fleet's
//! scripted history in a bare repository served by `git daemon` and pushed
//! to with the git CLI, webhooks signed the way GitHub signs them, the
//! health and metrics server, SIGTERM, a Git server that goes away and comes
//! back, and commit statuses on GitHub.
//!
//! GitHub is played by its peer (Prism serving GitHub's published OpenAPI
//! description, `tests/peers/github`) where a request must be valid; Prism
//! validates but stores nothing, so the test where GitHub is down and comes
//! back uses a wiremock stub that records the statuses it is sent, and says
//! so.

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::gitea::Gitea;
use common::prism::Prism;
use common::{GitDaemon, free_port, http, lockstep_bin};
use serde_json::Value;

const CLUSTER: &str = "e2e";
const SECRET: &str = "gh-hook-secret-e2e";

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

// ---------------------------------------------------------------------------
// The fleet: the example story in a bare repository, and a work repository
// that pushes to it.

struct Fleet {
    root: tempfile::TempDir,
    /// The story's commits, oldest first: (id, subject).
    story: Vec<(String, String)>,
}

impl Fleet {
    fn new() -> Fleet {
        let root = tempfile::tempdir().expect("tempdir");
        let work = root.path().join("work");
        lockstep::demo::build_repository(&work).expect("the example story builds");
        git(&work, &["config", "user.name", "Fleet Tester"]);
        git(&work, &["config", "user.email", "fleet@example.invalid"]);
        git(&work, &["config", "commit.gpgsign", "false"]);
        let bare = root.path().join("srv/fleet.git");
        std::fs::create_dir_all(&bare).expect("mkdir");
        git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        git(&work, &["remote", "add", "origin", &bare.to_string_lossy()]);
        git(&work, &["push", "-q", "origin", "main:refs/heads/main"]);
        let story = git(
            &work,
            &[
                "log",
                "--reverse",
                "--first-parent",
                "--format=%H %s",
                "main",
            ],
        )
        .lines()
        .map(|l| {
            let (id, subject) = l.split_once(' ').expect("id and subject");
            (id.to_owned(), subject.to_owned())
        })
        .collect::<Vec<_>>();
        assert_eq!(
            story.len(),
            STORY.len(),
            "the example story changed: {story:?}"
        );
        Fleet { root, story }
    }

    fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    fn srv(&self) -> PathBuf {
        self.root.path().join("srv")
    }

    fn bare(&self) -> PathBuf {
        self.srv().join("fleet.git")
    }

    fn cache_dir(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    /// The bare clone lockstep keeps under the cache directory.
    fn cache_repo(&self) -> PathBuf {
        let entries: Vec<PathBuf> = std::fs::read_dir(self.cache_dir())
            .expect("the cache directory exists")
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        assert_eq!(entries.len(), 1, "one cached repository: {entries:?}");
        entries[0].clone()
    }

    fn serve(&self) -> GitDaemon {
        GitDaemon::start(&self.srv())
    }

    /// Edits a file of the work tree (each `from` must be there), commits.
    fn commit_edit(&self, file: &str, edits: &[(&str, &str)], message: &str) -> String {
        let path = self.work().join(file);
        let mut text = std::fs::read_to_string(&path).expect("read");
        for (from, to) in edits {
            assert!(text.contains(from), "{file} has no {from:?}:\n{text}");
            text = text.replacen(from, to, 1);
        }
        std::fs::write(&path, text).expect("write");
        git(&self.work(), &["commit", "-q", "-am", message]);
        git(&self.work(), &["rev-parse", "HEAD"])
    }

    fn push(&self, refspec: &str) {
        git(&self.work(), &["push", "-q", "origin", refspec]);
    }

    /// nova 2026.2 → 2027.1 with its image, on main, pushed.
    fn push_nova_hop(&self) -> String {
        let id = self.commit_edit(
            "standalone/compute/nova.yaml",
            &[
                (
                    "openStackRelease: \"2026.2\"",
                    "openStackRelease: \"2027.1\"",
                ),
                ("tag: \"2026.2\"", "tag: \"2027.1\""),
            ],
            "Nova to 2027.1",
        );
        self.push("main:refs/heads/main");
        id
    }

    /// A pull request (refs/pull/7/head) jumping staging 2026.1 → 2027.1,
    /// not on main.
    fn push_skip_pull_request(&self) -> String {
        git(&self.work(), &["checkout", "-q", "-b", "pr-7"]);
        let id = self.commit_edit(
            "clusters/staging/controlplane.yaml",
            &[(
                "openStackRelease: \"2026.1\"",
                "openStackRelease: \"2027.1\"",
            )],
            "Staging straight to 2027.1",
        );
        self.push("HEAD:refs/pull/7/head");
        git(&self.work(), &["checkout", "-q", "main"]);
        id
    }
}

/// How each commit of the story ends: state, and what its description says.
const STORY: &[(&str, &str, &str)] = &[
    ("Fleet at 2026.1", "success", "applied: 16 installs"),
    ("Upgrade prod to 2026.2", "success", "applied: 9 upgrades"),
    (
        "Jump nova straight to 2027.1",
        "failure",
        "refused: nova 2026.1→2027.1 skips 2026.2 (UpgradePathInvalid)",
    ),
    (
        "Nova to 2026.2 instead",
        "failure",
        "(ImageReleaseMismatch)",
    ),
    (
        "Bump the nova image",
        "success",
        "applied: nova 2026.1→2026.2 upgrade",
    ),
    ("Roll staging back", "failure", "(DowngradeNotSupported)"),
    (
        "Revert \"Roll staging back",
        "success",
        "accepted: no C5C3 object changed",
    ),
];

/// The objects each story commit's hop is followed on (context suffix).
fn story_objects(subject: &str) -> Vec<String> {
    if subject.starts_with("Upgrade prod") {
        [
            "keystone",
            "horizon",
            "glance",
            "placement",
            "barbican",
            "neutron",
            "cinder",
            "nova",
        ]
        .iter()
        .map(|s| format!("openstack/prod-{s}"))
        .collect()
    } else if subject.starts_with("Bump the nova image") {
        vec!["compute/nova".to_owned()]
    } else {
        Vec::new()
    }
}

/// Statuses on one commit: context → (state, description).
type Statuses = BTreeMap<String, (String, String)>;

/// What `refs/notes/lockstep` says about a commit in `repo`.
fn notes(repo: &Path, sha: &str) -> Statuses {
    let mut out = Statuses::new();
    let Ok(r) = git2::Repository::open(repo) else {
        return out;
    };
    let Ok(oid) = git2::Oid::from_str(sha) else {
        return out;
    };
    if let Ok(n) = r.find_note(Some("refs/notes/lockstep"), oid) {
        for line in n.message().unwrap_or("").lines() {
            let Some((ctx, rest)) = line.split_once(": ") else {
                continue;
            };
            let (state, description) = rest.split_once(" — ").unwrap_or((rest, ""));
            out.insert(ctx.to_owned(), (state.to_owned(), description.to_owned()));
        }
    }
    out
}

/// Everything about the story's statuses that is not as it must end: empty
/// when every commit has its verdict under `lockstep/e2e`, every hop its
/// per-object statuses complete, and nothing is pending.
fn story_problems(fleet: &Fleet, statuses: impl Fn(&str) -> Statuses) -> Vec<String> {
    let mut problems = Vec::new();
    let commit_ctx = format!("lockstep/{CLUSTER}");
    for ((sha, subject), (prefix, state, says)) in fleet.story.iter().zip(STORY) {
        assert!(subject.starts_with(prefix), "{subject:?} vs {prefix:?}");
        let s = statuses(sha);
        let short = &sha[..10];
        match s.get(&commit_ctx) {
            Some((st, d)) if st == state && d.contains(says) => {}
            other => problems.push(format!(
                "{short} {subject}: {commit_ctx} is {other:?}, want {state} saying {says:?}"
            )),
        }
        let want = story_objects(subject);
        for obj in &want {
            let ctx = format!("{commit_ctx}/{obj}");
            match s.get(&ctx) {
                Some((st, d)) if st == "success" && d.ends_with(": complete") => {}
                other => problems.push(format!(
                    "{short} {subject}: {ctx} is {other:?}, want success \"… complete\""
                )),
            }
        }
        for (ctx, (st, d)) in &s {
            if ctx.starts_with(&format!("{commit_ctx}/"))
                && !want.iter().any(|o| *ctx == format!("{commit_ctx}/{o}"))
            {
                problems.push(format!("{short} {subject}: unexpected {ctx}: {st} — {d}"));
            }
            if st == "pending" {
                problems.push(format!("{short} {subject}: {ctx} left pending: {d}"));
            }
        }
    }
    problems
}

/// After the story: nova's hop to 2027.1 (`push_nova_hop`) applied and
/// followed to completion, and the pull request that jumps staging to
/// 2027.1 refused (under `lockstep/<cluster>/review`).
fn hop_applied_and_pull_refused(hop: &Statuses, pull: &Statuses) -> bool {
    let commit_ctx = format!("lockstep/{CLUSTER}");
    hop.get(&commit_ctx)
        .is_some_and(|(s, d)| s == "success" && d.contains("applied: nova 2026.2→2027.1"))
        && hop
            .get(&format!("{commit_ctx}/compute/nova"))
            .is_some_and(|(s, d)| s == "success" && d.ends_with(": complete"))
        && pull
            .get(&format!("{commit_ctx}/review"))
            .is_some_and(|(s, d)| s == "failure" && d.contains("skips 2026.2 (UpgradePathInvalid)"))
        // A pull request's verdict is a review, not the branch's progress.
        && !pull.contains_key(&commit_ctx)
}

// ---------------------------------------------------------------------------
// The lockstep process.

/// A running `lockstep run`, its stderr (JSON logs) in a file; killed when
/// dropped.
struct Lockstep {
    child: Option<Child>,
    dir: tempfile::TempDir,
    status: Option<ExitStatus>,
}

impl Lockstep {
    fn spawn(args: &[String], envs: &[(&str, &str)]) -> Lockstep {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = File::create(dir.path().join("stderr")).expect("log file");
        let out = File::create(dir.path().join("stdout")).expect("log file");
        let mut cmd = Command::new(lockstep_bin());
        cmd.arg("run")
            .args(args)
            .args(["--log-format", "json", "--cluster-name", CLUSTER])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("GIT_CONFIG_NOSYSTEM", "1");
        // Nothing from the environment may configure it behind the test's back.
        for (k, _) in std::env::vars() {
            if k.starts_with("LOCKSTEP_") || k == "KUBECONFIG" {
                cmd.env_remove(k);
            }
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("lockstep runs");
        Lockstep {
            child: Some(child),
            dir,
            status: None,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    /// The JSON log events so far.
    fn events(&self) -> Vec<Value> {
        self.stderr()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Log events whose message is `message`.
    fn logged(&self, message: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["fields"]["message"] == message)
            .collect()
    }

    /// Panics with the log: for every failed assertion.
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\n--- lockstep stderr ---\n{}\n--- lockstep stdout ---\n{}",
            self.stderr(),
            self.stdout()
        )
    }

    /// Polls `f` until it gives a value; panics after `timeout` with its last
    /// complaint and the log.
    fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&Lockstep) -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match f(self) {
                Ok(v) => return v,
                Err(e) => e,
            };
            if let Some(st) = self.try_status() {
                self.fail(&format!(
                    "lockstep exited ({st}) while waiting for {what}; last: {last}"
                ));
            }
            if Instant::now() > deadline {
                self.fail(&format!("no {what} within {timeout:?}; last: {last}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Some(c) = self.child.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            self.status = Some(st);
        }
        self.status
    }

    /// Waits for the process to end on its own.
    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_status() {
                return st;
            }
            if Instant::now() > deadline {
                self.fail(&format!("lockstep still running after {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn sigterm(&self) {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        assert_eq!(r, 0, "kill -TERM {pid}");
    }
}

impl Drop for Lockstep {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP over loopback, by hand (HTTP/1.0: one request, the whole answer).

fn get(addr: &str, path: &str) -> Result<(u16, String), String> {
    http(addr, "GET", path, &[], b"")
}

fn wait_ready(ls: &mut Lockstep, metrics: &str) {
    ls.wait_for("/readyz 200", Duration::from_secs(30), |_| {
        match get(metrics, "/readyz")? {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// GitHub's own example `push` payload (npm `@octokit/webhooks-examples`,
/// installed with the GitHub peer), pointed at our branch and commit.
fn github_push(sha: &str) -> Vec<u8> {
    let index = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "tests/peers/github/node_modules/@octokit/webhooks-examples/api.github.com/index.json",
    );
    let text = std::fs::read_to_string(&index).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `npm ci --prefix tests/peers/github` (see README)",
            index.display()
        )
    });
    let all: Value = serde_json::from_str(&text).expect("JSON");
    let mut push = all
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "push"))
        .and_then(|e| e["examples"].as_array())
        .and_then(|x| x.iter().find(|e| e["ref"] == "refs/heads/master"))
        .cloned()
        .expect("a push example");
    push["ref"] = "refs/heads/main".into();
    push["after"] = sha.into();
    serde_json::to_vec(&push).expect("JSON")
}

fn send_push_hook(listen: &str, delivery: &str, body: &[u8], signature: &str) -> u16 {
    http(
        listen,
        "POST",
        "/hooks/github",
        &[
            ("X-GitHub-Event", "push".into()),
            ("X-GitHub-Delivery", delivery.into()),
            ("X-Hub-Signature-256", format!("sha256={signature}")),
            ("Content-Type", "application/json".into()),
        ],
        body,
    )
    .expect("the webhook receiver answers")
    .0
}

fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

// ---------------------------------------------------------------------------
// 1. The whole story from a git:// remote, until idle, notes pushed back.

#[test]
fn until_idle_from_a_git_daemon_judges_applies_and_pushes_notes() {
    let fleet = Fleet::new();
    let server = fleet.serve();
    until_idle_story(&fleet, server.url("fleet.git"), &[]);
}

/// The same over ssh, as most fleets are reached: a real OpenSSH server, a
/// deploy key and a known_hosts file; the notes go back with the same key.
#[test]
fn until_idle_over_ssh_with_a_deploy_key_judges_applies_and_pushes_notes() {
    let fleet = Fleet::new();
    let sshd = common::sshd::Sshd::start();
    let ls = until_idle_story(
        &fleet,
        sshd.url(&fleet.bare()),
        &[
            "--ssh-key-file".into(),
            sshd.client_key().to_string_lossy().into_owned(),
            "--known-hosts-file".into(),
            sshd.known_hosts().to_string_lossy().into_owned(),
        ],
    );
    // Fetched and pushed through sshd, and the key never logged.
    let log = sshd.log();
    assert!(log.contains("Accepted publickey"), "{log}");
    let key = std::fs::read_to_string(sshd.client_key()).expect("key");
    let secret_line = key.lines().nth(1).expect("key body");
    assert!(!ls.stderr().contains(secret_line) && !ls.stdout().contains(secret_line));
}

/// `lockstep run --url URL --until-idle --push-notes origin` over the
/// example story: exit 0, every commit's verdict pushed to the served
/// repository's notes (the same as the cache's), the two hops applied.
fn until_idle_story(fleet: &Fleet, url: String, extra: &[String]) -> Lockstep {
    let started = Instant::now();
    let mut args = vec![
        "--url".into(),
        url,
        "--cache-dir".into(),
        fleet.cache_dir().to_string_lossy().into_owned(),
        "--until-idle".into(),
        "--poll".into(),
        "1s".into(),
        "--push-notes".into(),
        "origin".into(),
    ];
    args.extend_from_slice(extra);
    let mut ls = Lockstep::spawn(&args, &[]);
    let status = ls.wait_exit(Duration::from_secs(60));
    if status.code() != Some(0) {
        ls.fail(&format!("exit {status}, want 0"));
    }
    eprintln!("until-idle run: {:?}", started.elapsed());

    // Pushed to the served repository at stop: every commit has its verdict.
    let problems = story_problems(fleet, |sha| notes(&fleet.bare(), sha));
    if !problems.is_empty() {
        ls.fail(&format!(
            "statuses in the served repository's notes:\n{}",
            problems.join("\n")
        ));
    }
    // The cache holds the same notes it pushed.
    for (sha, _) in &fleet.story {
        assert_eq!(
            notes(&fleet.cache_repo(), sha),
            notes(&fleet.bare(), sha),
            "{sha}"
        );
    }

    // The log names what was applied.
    let applied = ls.logged("applied");
    for object in ["ControlPlane openstack/prod", "Nova compute/nova"] {
        if !applied.iter().any(|e| e["fields"]["object"] == object) {
            ls.fail(&format!("no \"applied\" event for {object}"));
        }
    }
    if applied.len() != 2 {
        ls.fail(&format!("two hops applied, got {applied:#?}"));
    }
    if ls.events().iter().any(|e| {
        e["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("pushing notes failed"))
    }) {
        ls.fail("pushing notes failed");
    }
    ls
}

// ---------------------------------------------------------------------------
// 2. Continuous: a webhook (not the poll) brings a new commit and a pull
//    request; metrics; SIGTERM.

#[test]
fn a_signed_push_webhook_brings_a_hop_and_a_pull_request_verdict_then_sigterm() {
    let fleet = Fleet::new();
    let server = fleet.serve();
    let secrets = tempfile::tempdir().expect("tempdir");
    let secret_file = secrets.path().join("github-secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).expect("write");
    let listen = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut ls = Lockstep::spawn(
        &[
            "--url".into(),
            server.url("fleet.git"),
            "--cache-dir".into(),
            fleet.cache_dir().to_string_lossy().into_owned(),
            "--poll".into(),
            "60s".into(),
            "--listen".into(),
            listen.clone(),
            "--metrics-listen".into(),
            metrics.clone(),
            "--github-webhook-secret-file".into(),
            secret_file.to_string_lossy().into_owned(),
        ],
        &[],
    );
    wait_ready(&mut ls, &metrics);
    let cache = fleet.cache_repo();
    ls.wait_for("the story's statuses", Duration::from_secs(20), |_| {
        let p = story_problems(&fleet, |sha| notes(&cache, sha));
        if p.is_empty() {
            Ok(())
        } else {
            Err(p.join("\n"))
        }
    });

    let hop = fleet.push_nova_hop();
    let pull = fleet.push_skip_pull_request();
    let merged = Command::new("git")
        .args(["merge-base", "--is-ancestor", &pull, "main"])
        .current_dir(fleet.bare())
        .status()
        .expect("git runs");
    assert!(!merged.success(), "the pull request is not on main");

    // The poll is a minute away: without a webhook nothing moves.
    std::thread::sleep(Duration::from_millis(1500));
    let early = notes(&cache, &hop);
    if !early.is_empty() || !notes(&cache, &pull).is_empty() {
        ls.fail(&format!("judged before any webhook: {early:?}"));
    }

    let body = github_push(&hop);
    assert_eq!(
        send_push_hook(
            &listen,
            "e2e-bad",
            &body,
            &hmac_hex("not-the-secret", &body)
        ),
        401,
        "a wrong signature is refused"
    );
    let sent = Instant::now();
    assert_eq!(
        send_push_hook(&listen, "e2e-1", &body, &hmac_hex(SECRET, &body)),
        202
    );
    ls.wait_for(
        "the new hop applied and the pull request refused",
        Duration::from_secs(10),
        |_| {
            let h = notes(&cache, &hop);
            let p = notes(&cache, &pull);
            if hop_applied_and_pull_refused(&h, &p) {
                Ok(())
            } else {
                Err(format!("hop {h:?}; pull request {p:?}"))
            }
        },
    );
    eprintln!("webhook to both statuses: {:?}", sent.elapsed());
    // Triggered by the webhook, once.
    let triggers = ls.logged("webhook trigger");
    if !triggers
        .iter()
        .any(|e| e["fields"]["sha"] == hop.as_str() && e["fields"]["delivery"] == "e2e-1")
    {
        ls.fail("no webhook trigger logged for the push");
    }
    // Still a pull request: the verdict came before any merge.
    let pulls = ls.logged("pull request judged");
    if !pulls
        .iter()
        .any(|e| e["fields"]["pull"] == 7 && e["fields"]["commit"] == pull.as_str())
    {
        ls.fail("pull request 7 was not judged as a pull request");
    }

    let (code, text) = get(&metrics, "/metrics").expect("metrics answer");
    assert_eq!(code, 200);
    for (series, at_least) in [
        (
            r#"lockstep_commits_judged_total{verdict="refused",reason="UpgradePathInvalid"}"#,
            1.0,
        ),
        (
            r#"lockstep_commits_judged_total{verdict="accepted",reason=""}"#,
            5.0,
        ),
        (r#"lockstep_hops_applied_total{kind="Nova"}"#, 2.0),
        (r#"lockstep_hops_applied_total{kind="ControlPlane"}"#, 1.0),
        (
            r#"lockstep_git_duration_seconds_count{op="refresh",result="ok"}"#,
            2.0,
        ),
        (
            r#"lockstep_git_duration_seconds_count{op="judge",result="ok"}"#,
            2.0,
        ),
    ] {
        match metric_value(&text, series) {
            Some(v) if v >= at_least => {}
            other => ls.fail(&format!(
                "{series} is {other:?}, want at least {at_least}:\n{text}"
            )),
        }
    }

    ls.sigterm();
    let stop = Instant::now();
    let status = ls.wait_exit(Duration::from_secs(10));
    if status.code() != Some(0) {
        ls.fail(&format!("exit {status} after SIGTERM, want 0"));
    }
    eprintln!("SIGTERM to exit: {:?}", stop.elapsed());
    assert!(
        TcpStream::connect(&metrics).is_err() && TcpStream::connect(&listen).is_err(),
        "the listeners are closed"
    );
}

/// Ready means SIGTERM is handled: a pod that Kubernetes stops right after
/// it turned ready (while its first hops are still in flight) stops cleanly
/// and delivers what it queued, instead of dying of the signal.
#[test]
fn sigterm_as_soon_as_ready_is_a_clean_stop() {
    let fleet = Fleet::new();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut ls = Lockstep::spawn(
        &[
            "--repo".into(),
            fleet.work().to_string_lossy().into_owned(),
            "--poll".into(),
            "60s".into(),
            "--metrics-listen".into(),
            metrics.clone(),
        ],
        &[],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(get(&metrics, "/readyz"), Ok((200, _))) {
        if Instant::now() > deadline || ls.try_status().is_some() {
            ls.fail("never ready");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    ls.sigterm();
    let status = ls.wait_exit(Duration::from_secs(10));
    if status.code() != Some(0) {
        ls.fail(&format!("exit {status} after SIGTERM at readiness, want 0"));
    }
    if ls.logged("stopping: delivering queued statuses").is_empty() {
        ls.fail("no orderly stop logged");
    }
    // What it had judged reached the notes before it stopped.
    for (sha, subject) in &fleet.story {
        if !notes(&fleet.work(), sha).contains_key(&format!("lockstep/{CLUSTER}")) {
            ls.fail(&format!("no verdict on {sha} ({subject}) after the stop"));
        }
    }
}

// ---------------------------------------------------------------------------
// 3. The Git server goes away and comes back.

#[test]
fn an_unreachable_remote_keeps_the_last_good_state_and_recovers() {
    let fleet = Fleet::new();
    let mut server = fleet.serve();
    let url = server.url("fleet.git");
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut ls = Lockstep::spawn(
        &[
            "--url".into(),
            url.clone(),
            "--cache-dir".into(),
            fleet.cache_dir().to_string_lossy().into_owned(),
            "--poll".into(),
            "1s".into(),
            "--metrics-listen".into(),
            metrics.clone(),
        ],
        &[],
    );
    wait_ready(&mut ls, &metrics);
    let cache = fleet.cache_repo();
    ls.wait_for("the story's statuses", Duration::from_secs(20), |_| {
        let p = story_problems(&fleet, |sha| notes(&cache, sha));
        if p.is_empty() {
            Ok(())
        } else {
            Err(p.join("\n"))
        }
    });
    let before: Vec<Statuses> = fleet.story.iter().map(|(s, _)| notes(&cache, s)).collect();

    server.stop();
    let down = Instant::now();
    ls.wait_for(
        "two warnings naming the URL",
        Duration::from_secs(10),
        |ls| {
            let n = ls
                .logged("source refresh failed; keeping the last good state")
                .iter()
                .filter(|e| {
                    e["level"] == "WARN"
                        && e["fields"]["error"]
                            .as_str()
                            .is_some_and(|m| m.contains(&url))
                })
                .count();
            if n >= 2 {
                Ok(())
            } else {
                Err(format!("{n} warnings"))
            }
        },
    );
    eprintln!("remote down to second warning: {:?}", down.elapsed());
    for path in ["/healthz", "/readyz"] {
        match get(&metrics, path) {
            Ok((200, _)) => {}
            other => ls.fail(&format!("{path} while the remote is down: {other:?}")),
        }
    }
    let (_, text) = get(&metrics, "/metrics").expect("metrics answer");
    match metric_value(
        &text,
        r#"lockstep_git_duration_seconds_count{op="refresh",result="error"}"#,
    ) {
        Some(v) if v >= 2.0 => {}
        other => ls.fail(&format!("failed refreshes counted: {other:?}\n{text}")),
    }
    let during: Vec<Statuses> = fleet.story.iter().map(|(s, _)| notes(&cache, s)).collect();
    if during != before {
        ls.fail(&format!(
            "statuses changed while the remote was down:\n{before:#?}\n{during:#?}"
        ));
    }

    server.restart();
    let hop = fleet.push_nova_hop();
    let back = Instant::now();
    let commit_ctx = format!("lockstep/{CLUSTER}");
    ls.wait_for(
        "the commit pushed after the outage judged and applied",
        Duration::from_secs(15),
        |_| {
            let h = notes(&cache, &hop);
            match h.get(&commit_ctx) {
                Some((s, d)) if s == "success" && d.contains("applied: nova 2026.2→2027.1") => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    );
    eprintln!(
        "remote back to the new commit applied: {:?}",
        back.elapsed()
    );
    if !ls
        .logged("judged")
        .iter()
        .any(|e| e["fields"]["commit"] == hop.as_str() && e["fields"]["verdict"] == "accepted")
    {
        ls.fail("no \"judged\" event for the new commit");
    }
}

// ---------------------------------------------------------------------------
// 4. GitHub: the validating peer, and a host that is down, then back.

#[test]
fn until_idle_posts_every_status_to_the_validating_github_peer() {
    let prism = Prism::start();
    let fleet = Fleet::new();
    let mut ls = Lockstep::spawn(
        &[
            "--repo".into(),
            fleet.work().to_string_lossy().into_owned(),
            "--until-idle".into(),
            "--report".into(),
            "github".into(),
            "--forge-url".into(),
            prism.url(),
            "--forge-repo".into(),
            "o/r".into(),
            "--token-env".into(),
            "E2E_GITHUB_TOKEN".into(),
        ],
        &[("E2E_GITHUB_TOKEN", "ghp-e2e-test")],
    );
    let status = ls.wait_exit(Duration::from_secs(60));
    if status.code() != Some(0) {
        ls.fail(&format!("exit {status}, want 0"));
    }
    if ls.stderr().contains("could not be delivered") {
        ls.fail("statuses left undelivered");
    }
    let errors: Vec<Value> = ls
        .events()
        .into_iter()
        .filter(|e| {
            e["level"] == "ERROR"
                || (e["level"] == "WARN"
                    && e["target"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("lockstep::forge")))
        })
        .collect();
    if !errors.is_empty() {
        ls.fail(&format!("delivery trouble logged: {errors:#?}"));
    }
    let requests = prism.requests();
    let posts: Vec<&(String, String, String)> = requests
        .iter()
        .filter(|(m, p, _)| m == "post" && p.starts_with("/repos/o/r/statuses/"))
        .collect();
    let want: usize = fleet
        .story
        .iter()
        .map(|(_, subject)| 1 + story_objects(subject).len())
        .sum();
    assert_eq!(
        posts.len(),
        want,
        "one POST per (commit, context), the newest: {requests:#?}"
    );
    for (_, path, log) in &posts {
        assert!(
            log.contains("The request passed the validation rules")
                && log.contains("Responding with \"201\"")
                && !log.contains("✖"),
            "Prism did not accept POST {path}:\n{log}"
        );
    }
    for (sha, subject) in &fleet.story {
        let n = posts
            .iter()
            .filter(|(_, p, _)| p.ends_with(sha.as_str()))
            .count();
        assert_eq!(
            n,
            1 + story_objects(subject).len(),
            "statuses posted on {sha} ({subject})"
        );
    }
    assert!(
        requests
            .iter()
            .filter(|(m, _, _)| m == "get")
            .any(|(_, p, _)| p.starts_with("/repos/o/r/commits/") && p.ends_with("/statuses")),
        "statuses are read before they are written"
    );
}

/// A stub of GitHub's two status endpoints that remembers what it was sent
/// (Prism validates but stores nothing): `GET
/// /repos/o/r/commits/{sha}/statuses` answers what was posted, newest first,
/// and `POST /repos/o/r/statuses/{sha}` records it, in arrival order.
#[derive(Clone, Default)]
struct GitHubStub {
    posts: Arc<Mutex<Vec<(String, Value)>>>,
    /// How many posts, from the first, are refused 422 (kept nowhere).
    refuse: Arc<std::sync::atomic::AtomicUsize>,
}

/// `lockstep run` on `fleet`, polling every `poll`, reporting to a GitHub
/// at `url` (repository `o/r`, a token from the environment).
fn github_daemon(fleet: &Fleet, poll: &str, metrics: &str, url: String) -> Lockstep {
    Lockstep::spawn(
        &[
            "--repo".into(),
            fleet.work().to_string_lossy().into_owned(),
            "--poll".into(),
            poll.into(),
            "--metrics-listen".into(),
            metrics.into(),
            "--report".into(),
            "github".into(),
            "--forge-url".into(),
            url,
            "--forge-repo".into(),
            "o/r".into(),
            "--token-env".into(),
            "E2E_GITHUB_TOKEN".into(),
        ],
        &[("E2E_GITHUB_TOKEN", "ghp-e2e-test")],
    )
}

impl GitHubStub {
    /// Newest per (commit, context): what the stub received last.
    fn newest(&self, sha: &str) -> Statuses {
        let mut out = Statuses::new();
        for (s, b) in self.posts.lock().expect("lock").iter() {
            if s == sha {
                out.insert(
                    b["context"].as_str().unwrap_or_default().to_owned(),
                    (
                        b["state"].as_str().unwrap_or_default().to_owned(),
                        b["description"].as_str().unwrap_or_default().to_owned(),
                    ),
                );
            }
        }
        out
    }
}

impl wiremock::Respond for GitHubStub {
    fn respond(&self, req: &wiremock::Request) -> wiremock::ResponseTemplate {
        let path = req.url.path().to_owned();
        let mut posts = self.posts.lock().expect("lock");
        if req.method == wiremock::http::Method::GET
            && let Some(sha) = path
                .strip_prefix("/repos/o/r/commits/")
                .and_then(|p| p.strip_suffix("/statuses"))
        {
            let list: Vec<Value> = posts
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, (s, _))| s == sha)
                .map(|(i, (_, b))| {
                    let mut b = b.clone();
                    b["id"] = (i as u64 + 1).into();
                    b
                })
                .collect();
            return wiremock::ResponseTemplate::new(200).set_body_json(list);
        }
        if req.method == wiremock::http::Method::POST
            && let Some(sha) = path.strip_prefix("/repos/o/r/statuses/")
            && let Ok(body) = serde_json::from_slice::<Value>(&req.body)
        {
            use std::sync::atomic::Ordering::SeqCst;
            if self
                .refuse
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return wiremock::ResponseTemplate::new(422).set_body_json(serde_json::json!({
                    "message": "Validation Failed",
                    "documentation_url": "https://docs.github.com/rest"
                }));
            }
            posts.push((sha.to_owned(), body.clone()));
            let mut answer = body;
            answer["id"] = (posts.len() as u64).into();
            return wiremock::ResponseTemplate::new(201).set_body_json(answer);
        }
        wiremock::ResponseTemplate::new(404)
    }
}

#[test]
fn statuses_reach_github_late_newest_first_when_it_comes_back() {
    let fleet = Fleet::new();
    // Nothing listens there yet.
    let port = free_port();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut ls = github_daemon(&fleet, "60s", &metrics, format!("http://127.0.0.1:{port}"));
    wait_ready(&mut ls, &metrics);
    // Judged and applied while GitHub is down; delivery fails and waits.
    ls.wait_for(
        "both hops applied and a failed delivery",
        Duration::from_secs(20),
        |ls| {
            let applied = ls.logged("applied").len();
            let failed = ls.logged("status delivery failed; retrying").len();
            if applied == 2 && failed >= 1 {
                Ok(())
            } else {
                Err(format!("{applied} applied, {failed} failed deliveries"))
            }
        },
    );
    // Let the simulated hops finish while the host is still down.
    std::thread::sleep(Duration::from_secs(1));

    let stub = GitHubStub::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let listener = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => break l,
                Err(e) if Instant::now() > deadline => panic!("port {port}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    };
    let server = rt.block_on(async {
        let s = wiremock::MockServer::builder()
            .listener(listener)
            .start()
            .await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(stub.clone())
            .mount(&s)
            .await;
        s
    });
    let up = Instant::now();

    ls.wait_for(
        "every status delivered once GitHub is back",
        Duration::from_secs(40),
        |_| {
            let p = story_problems(&fleet, |sha| stub.newest(sha));
            if p.is_empty() {
                Ok(())
            } else {
                Err(p.join("\n"))
            }
        },
    );
    eprintln!("GitHub back to every status delivered: {:?}", up.elapsed());

    // Never a stale status after a newer one: no pending after a final
    // state under the same (commit, context).
    let posts = stub.posts.lock().expect("lock").clone();
    let mut seen_final: BTreeMap<(String, String), String> = BTreeMap::new();
    for (sha, b) in &posts {
        let key = (sha.clone(), b["context"].as_str().unwrap_or("").to_owned());
        let state = b["state"].as_str().unwrap_or("").to_owned();
        if let Some(prev) = seen_final.get(&key)
            && state == "pending"
        {
            ls.fail(&format!(
                "pending posted after {prev} for {key:?}: {posts:#?}"
            ));
        }
        if state != "pending" {
            seen_final.insert(key, state);
        }
    }
    // Late, not lost, and not flooded: at most the one status in flight
    // when the host came back is an older one.
    let stale = posts
        .iter()
        .filter(|(_, b)| b["state"] == "pending")
        .count();
    assert!(stale <= 1, "stale statuses delivered: {posts:#?}");
    let want: usize = fleet
        .story
        .iter()
        .map(|(_, subject)| 1 + story_objects(subject).len())
        .sum();
    assert!(
        posts.len() <= want + 1,
        "{} posts for {want} statuses: {posts:#?}",
        posts.len()
    );
    ls.sigterm();
    let status = ls.wait_exit(Duration::from_secs(10));
    if status.code() != Some(0) {
        ls.fail(&format!("exit {status} after SIGTERM, want 0"));
    }
    drop(server);
}

/// Statuses GitHub refuses outright are not lost: the daemon, which had
/// counted them as said, says them again on a later pass, and every
/// commit and object ends with its final status. (A wiremock stub that
/// refuses the first posts 422: Prism cannot be told to.)
#[test]
fn statuses_github_refused_are_said_again() {
    let fleet = Fleet::new();
    let stub = GitHubStub::default();
    stub.refuse.store(6, std::sync::atomic::Ordering::SeqCst);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(async {
        let s = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(stub.clone())
            .mount(&s)
            .await;
        s
    });
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut ls = github_daemon(&fleet, "1s", &metrics, server.uri());
    wait_ready(&mut ls, &metrics);
    ls.wait_for(
        "every status delivered although the first six were refused",
        Duration::from_secs(40),
        |_| {
            let p = story_problems(&fleet, |sha| stub.newest(sha));
            if p.is_empty() {
                Ok(())
            } else {
                Err(p.join("\n"))
            }
        },
    );
    assert_eq!(
        stub.refuse.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the stub refused its six"
    );
    if ls
        .logged("host rejected a status; said again after a pause")
        .is_empty()
    {
        ls.fail("no refusal was logged");
    }
    ls.sigterm();
    let status = ls.wait_exit(Duration::from_secs(10));
    if status.code() != Some(0) {
        ls.fail(&format!("exit {status} after SIGTERM, want 0"));
    }
}

/// A status GitHub refuses on every try (an unknown commit, a commit's
/// full status list) is said again after a backoff that doubles, not on
/// every pass: before, each one-second poll posted each refused status
/// again, forever. (The wiremock stub above, refusing every post.)
#[test]
fn a_status_github_keeps_refusing_is_tried_again_after_a_growing_pause() {
    let fleet = Fleet::new();
    let stub = GitHubStub::default();
    stub.refuse
        .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(async {
        let s = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(stub.clone())
            .mount(&s)
            .await;
        s
    });
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut ls = github_daemon(&fleet, "1s", &metrics, server.uri());
    wait_ready(&mut ls, &metrics);
    std::thread::sleep(Duration::from_secs(14));
    let mut per_key: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in rt.block_on(server.received_requests()).unwrap_or_default() {
        if r.method != wiremock::http::Method::POST {
            continue;
        }
        let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        // One status: a commit, a context, a state and a text (a status
        // that moved on is a new one, posted at once).
        let key = (
            r.url.path().to_owned(),
            format!(
                "{} {} {}",
                body["context"].as_str().unwrap_or_default(),
                body["state"].as_str().unwrap_or_default(),
                body["description"].as_str().unwrap_or_default()
            ),
        );
        *per_key.entry(key).or_default() += 1;
    }
    if per_key.is_empty() {
        ls.fail("nothing was posted");
    }
    // Fourteen one-second passes: at most the first try and one after the
    // first pause (10 s).
    if let Some((k, n)) = per_key.iter().find(|(_, n)| **n > 2) {
        ls.fail(&format!("{k:?} was posted {n} times in 14 s"));
    }
    if !per_key.values().any(|n| *n == 2) {
        ls.fail(&format!("no refused status was tried again: {per_key:?}"));
    }
    ls.sigterm();
    ls.wait_exit(Duration::from_secs(10));
}

/// A bounded run whose statuses GitHub refuses (a token without access, a
/// wrong repository) must not end as if they had been delivered: CI would
/// go green while no pull request ever saw a verdict. GitHub is a wiremock
/// stub answering 401 here (Prism cannot be told to refuse a token).
#[test]
fn until_idle_fails_when_github_refuses_every_status() {
    let fleet = Fleet::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(async {
        let s = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(
                wiremock::ResponseTemplate::new(401).set_body_json(serde_json::json!({
                    "message": "Bad credentials",
                    "documentation_url": "https://docs.github.com/rest",
                    "status": "401"
                })),
            )
            .mount(&s)
            .await;
        s
    });
    let mut ls = Lockstep::spawn(
        &[
            "--repo".into(),
            fleet.work().to_string_lossy().into_owned(),
            "--until-idle".into(),
            "--report".into(),
            "github".into(),
            "--forge-url".into(),
            server.uri(),
            "--forge-repo".into(),
            "o/r".into(),
            "--token-env".into(),
            "E2E_GITHUB_TOKEN".into(),
        ],
        &[("E2E_GITHUB_TOKEN", "ghp-revoked")],
    );
    let status = ls.wait_exit(Duration::from_secs(60));
    let asked = rt
        .block_on(server.received_requests())
        .unwrap_or_default()
        .len();
    if asked == 0 {
        ls.fail("GitHub was never asked");
    }
    if status.code() != Some(1) {
        ls.fail(&format!(
            "exit {status} although GitHub refused all {asked} requests, want 1"
        ));
    }
    if !ls.stderr().contains("could not be delivered") {
        ls.fail("the refused statuses are not reported");
    }
}

/// Git notes are the default host, and a notes ref can be locked for a
/// while: another git process writing it, or a lock file a killed writer
/// left behind. Statuses wait for the lock to go instead of being dropped.
#[test]
fn statuses_wait_out_a_locked_notes_ref() {
    let fleet = Fleet::new();
    let lock = fleet.work().join(".git/refs/notes/lockstep.lock");
    std::fs::create_dir_all(lock.parent().expect("parent")).expect("mkdir");
    std::fs::write(&lock, "").expect("a stale lock");
    let mut ls = Lockstep::spawn(
        &[
            "--repo".into(),
            fleet.work().to_string_lossy().into_owned(),
            "--poll".into(),
            "60s".into(),
        ],
        &[],
    );
    ls.wait_for(
        "a delivery stopped by the lock",
        Duration::from_secs(20),
        |ls| {
            let blocked = ls.events().iter().any(|e| {
                e["fields"]["error"]
                    .as_str()
                    .is_some_and(|m| m.contains("lockstep.lock"))
            });
            if blocked {
                Ok(())
            } else {
                Err("no lock error yet".into())
            }
        },
    );
    std::fs::remove_file(&lock).expect("the lock goes");
    let freed = Instant::now();
    ls.wait_for(
        "every status written once the lock is gone",
        Duration::from_secs(30),
        |_| {
            let p = story_problems(&fleet, |sha| notes(&fleet.work(), sha));
            if p.is_empty() {
                Ok(())
            } else {
                Err(p.join("\n"))
            }
        },
    );
    eprintln!("lock gone to every status written: {:?}", freed.elapsed());
    if !ls.logged("host rejected a status; dropped").is_empty() {
        ls.fail("statuses were dropped because of the lock");
    }
}

// ---------------------------------------------------------------------------
// A real Gitea (built from the Go module proxy): the source cloned over
// http with a token, every status through Gitea's API, and Gitea's own
// webhooks (push, pull request) as the only triggers after the start.

/// The newest status per context Gitea holds for `sha`.
fn gitea_statuses(gitea: &Gitea, repo: &str, sha: &str) -> Statuses {
    let mut newest: BTreeMap<String, (u64, String, String)> = BTreeMap::new();
    for s in gitea.statuses(repo, sha) {
        let id = s["id"].as_u64().unwrap_or(0);
        let context = s["context"].as_str().unwrap_or("").to_owned();
        // Gitea answers with `status`; older versions also send `state`.
        let state = s["status"]
            .as_str()
            .or(s["state"].as_str())
            .unwrap_or("")
            .to_owned();
        let description = s["description"].as_str().unwrap_or("").to_owned();
        if newest.get(&context).is_none_or(|(seen, _, _)| *seen < id) {
            newest.insert(context, (id, state, description));
        }
    }
    newest
        .into_iter()
        .map(|(c, (_, s, d))| (c, (s, d)))
        .collect()
}

#[test]
fn a_real_gitea_gets_every_status_and_its_webhooks_drive_the_daemon() {
    let gitea = Gitea::start();
    let repo = gitea.create_repo("fleet");
    let fleet = Fleet::new();
    git(
        &fleet.work(),
        &["remote", "set-url", "origin", &gitea.push_url(&repo)],
    );
    fleet.push("main:refs/heads/main");
    gitea.wait_pushed(&repo);

    let secrets = tempfile::tempdir().expect("tempdir");
    let token_file = secrets.path().join("gitea-token");
    std::fs::write(&token_file, format!("{}\n", gitea.token)).expect("write");
    let secret_file = secrets.path().join("gitea-hook-secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).expect("write");
    let listen = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    // Gitea's own webhook, signed with the shared secret.
    gitea.must(
        "POST",
        &format!("/repos/{repo}/hooks"),
        Some(serde_json::json!({
            "type": "gitea",
            "config": {"url": format!("http://{listen}/hooks/gitea"), "content_type": "json", "secret": SECRET},
            "events": ["push", "pull_request"],
            "active": true,
        })),
        201,
    );
    let token = token_file.to_string_lossy().into_owned();
    let mut ls = Lockstep::spawn(
        &[
            "--url".into(),
            gitea.clone_url(&repo),
            "--git-token-file".into(),
            token.clone(),
            "--cache-dir".into(),
            fleet.cache_dir().to_string_lossy().into_owned(),
            // An hour: after the first pass only a webhook moves anything.
            "--poll".into(),
            "1h".into(),
            "--listen".into(),
            listen.clone(),
            "--metrics-listen".into(),
            metrics.clone(),
            "--gitea-webhook-secret-file".into(),
            secret_file.to_string_lossy().into_owned(),
            "--report".into(),
            "gitea".into(),
            "--forge-url".into(),
            gitea.url(),
            "--forge-repo".into(),
            repo.clone(),
            "--token-file".into(),
            token,
        ],
        &[],
    );
    wait_ready(&mut ls, &metrics);
    ls.wait_for(
        "the story's statuses on Gitea",
        Duration::from_secs(60),
        |_| {
            let p = story_problems(&fleet, |sha| gitea_statuses(&gitea, &repo, sha));
            if p.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{}\nGitea's errors:\n{}",
                    p.join("\n"),
                    gitea.errors()
                ))
            }
        },
    );

    // A hop pushed to main, and a pull request that skips a release.
    let hop = fleet.push_nova_hop();
    git(&fleet.work(), &["checkout", "-q", "-b", "pr-staging"]);
    let pull = fleet.commit_edit(
        "clusters/staging/controlplane.yaml",
        &[(
            "openStackRelease: \"2026.1\"",
            "openStackRelease: \"2027.1\"",
        )],
        "Staging straight to 2027.1",
    );
    fleet.push("HEAD:refs/heads/pr-staging");
    git(&fleet.work(), &["checkout", "-q", "main"]);
    let sent = Instant::now();
    let pr = gitea.must(
        "POST",
        &format!("/repos/{repo}/pulls"),
        Some(serde_json::json!({"head": "pr-staging", "base": "main", "title": "Staging straight to 2027.1"})),
        201,
    );
    let number = pr["number"].as_u64().expect("a pull request number");

    ls.wait_for(
        "Gitea's webhooks: the hop applied, the pull request refused before merge",
        Duration::from_secs(30),
        |_| {
            let h = gitea_statuses(&gitea, &repo, &hop);
            let p = gitea_statuses(&gitea, &repo, &pull);
            if hop_applied_and_pull_refused(&h, &p) {
                Ok(())
            } else {
                Err(format!(
                    "hop {h:?}; pull request {p:?}; Gitea's errors:\n{}",
                    gitea.errors()
                ))
            }
        },
    );
    eprintln!("Gitea webhooks to both statuses: {:?}", sent.elapsed());
    // Gitea's deliveries were the triggers (the poll is an hour away). Its
    // push queue runs behind: the delivery of the story's own push can come
    // after the start and already bring the hop in, so the hop's delivery
    // is waited for rather than expected first.
    ls.wait_for(
        "Gitea's push webhook for the hop",
        Duration::from_secs(30),
        |ls| {
            let triggers = ls.logged("webhook trigger");
            if triggers.iter().any(|e| {
                e["fields"]["sha"] == hop.as_str() && e["fields"]["git_ref"] == "refs/heads/main"
            }) {
                Ok(())
            } else {
                Err(format!("triggers: {triggers:#?}"))
            }
        },
    );
    let pulls = ls.logged("pull request judged");
    if !pulls
        .iter()
        .any(|e| e["fields"]["pull"] == number && e["fields"]["commit"] == pull.as_str())
    {
        ls.fail(&format!(
            "pull request {number} was not judged as a pull request"
        ));
    }
    // Still open, never merged: the verdict came before any merge.
    let pr = gitea.must("GET", &format!("/repos/{repo}/pulls/{number}"), None, 200);
    assert_eq!(pr["merged"], false, "{pr}");
    assert_eq!(pr["head"]["sha"], pull.as_str(), "{pr}");
}

// ---------------------------------------------------------------------------
// Abort through Git: a standalone Glance wedged on a failed expand Job
// (`run --fault`), set back in Git, release and image together.

/// Statuses of `sha` in a local repository's notes, until `ok` holds.
fn wait_notes(
    ls: &mut Lockstep,
    repo: &Path,
    sha: &str,
    what: &str,
    ok: impl Fn(&Statuses) -> bool,
) -> Statuses {
    ls.wait_for(what, Duration::from_secs(30), |_| {
        let n = notes(repo, sha);
        if ok(&n) { Ok(n) } else { Err(format!("{n:?}")) }
    })
}

#[test]
fn a_wedged_glance_is_aborted_by_a_commit_and_hops_again_later() {
    let repo = common::FleetRepo::new();
    let glance = "standalone/image/glance.yaml";
    repo.write(glance, common::glance_digest("2026.1", 'a'));
    let install = repo.commit("Glance at 2026.1");
    repo.write(glance, common::glance_digest("2026.2", 'b'));
    let hop = repo.commit("Glance to 2026.2");
    let mut ls = Lockstep::spawn(
        &[
            "--repo".into(),
            repo.path().to_string_lossy().into_owned(),
            "--poll".into(),
            "1s".into(),
            "--fault".into(),
            "glance:expand:fail=5".into(),
        ],
        &[],
    );
    let ctx = format!("lockstep/{CLUSTER}");
    let obj = format!("{ctx}/image/glance");
    let _ = install;
    // The hop wedges on its expand Job: a person must act.
    let wedged = wedge_reported(&mut ls, repo.path(), &hop, &obj);
    assert!(wedged.contains("xpand"), "{wedged}");

    // The abort: release and image back together, as the operators'
    // upgrade flow prescribes.
    repo.write(glance, common::glance_digest("2026.1", 'a'));
    let abort = repo.commit("Abort Glance 2026.2");
    // Each status is its own note write: wait for every one of them (the
    // commit's and the object's, on the abort and on the hop it ended),
    // then check what they say.
    let short = abort[..10].to_owned();
    let a = wait_notes(&mut ls, repo.path(), &abort, "the abort applied", |n| {
        n.get(&ctx).is_some_and(|(s, _)| s == "success")
            && n.get(&obj).is_some_and(|(s, _)| s == "success")
    });
    let (_, d) = &a[&ctx];
    assert!(d.starts_with("aborted: glance 2026.2→2026.1"), "{d}");
    assert!(a[&obj].1.ends_with(": aborted"), "{a:?}");
    let h = wait_notes(
        &mut ls,
        repo.path(),
        &hop,
        "the hop ended by the abort",
        |n| {
            [&ctx, &obj].iter().all(|c| {
                n.get(*c)
                    .is_some_and(|(_, d)| d.ends_with(&format!("aborted by {short}")))
            })
        },
    );
    assert_eq!(
        h.get(&ctx),
        Some(&(
            "failure".to_owned(),
            format!("glance 2026.1→2026.2: aborted by {short}")
        )),
        "{h:?}"
    );
    assert_eq!(h[&obj].0, "failure", "{h:?}");

    // The next hop of the same service goes through (the fault is spent).
    repo.write(glance, common::glance_digest("2026.2", 'b'));
    let again = repo.commit("Glance to 2026.2, again");
    wait_notes(&mut ls, repo.path(), &again, "the later hop applied", |n| {
        n.get(&ctx)
            .is_some_and(|(s, d)| s == "success" && d.contains("applied: glance 2026.1→2026.2"))
            && n.get(&obj)
                .is_some_and(|(s, d)| s == "success" && d.ends_with(": complete"))
    });
    // Nothing moved after the fact.
    assert_eq!(notes(repo.path(), &hop), h);
    assert_eq!(notes(repo.path(), &abort), a);
    ls.sigterm();
    let st = ls.wait_exit(Duration::from_secs(20));
    if st.code() != Some(0) {
        ls.fail(&format!("SIGTERM: exit {st}, want 0"));
    }
}

/// Waits until the hop's per-object status reports the failed Job, and
/// returns that description.
fn wedge_reported(ls: &mut Lockstep, repo: &Path, hop: &str, obj: &str) -> String {
    let n = wait_notes(ls, repo, hop, "the failed expand reported", |n| {
        n.get(obj).is_some_and(|(s, _)| s == "failure")
    });
    n[obj].1.clone()
}

/// A real Gitea lists a commit's statuses 50 a page, newest first. A hop
/// over many objects leaves more than that on its commit; the delivery reads
/// every page, so an object's success that has slid to page 2 is still seen
/// and no pending is posted over it (`forge::delivery::settles`).
#[test]
fn a_real_gitea_shows_a_success_past_its_first_page() {
    use lockstep::forge::delivery::{Outcome, RetryPolicy, deliver};
    use lockstep::forge::{State, Status};
    let gitea = Gitea::start();
    let repo = gitea.create_repo("many-statuses");
    let fleet = Fleet::new();
    git(
        &fleet.work(),
        &["remote", "set-url", "origin", &gitea.push_url(&repo)],
    );
    fleet.push("main:refs/heads/main");
    gitea.wait_pushed(&repo);
    let sha = fleet.story[0].0.clone();
    let post = |context: &str| {
        gitea.must(
            "POST",
            &format!("/repos/{repo}/statuses/{sha}"),
            Some(serde_json::json!({"state": "success", "context": context, "description": "applied"})),
            201,
        );
    };
    let nova = "lockstep/test/compute/nova";
    post(nova);
    // Gitea orders by the second a status was written, newest first.
    std::thread::sleep(Duration::from_millis(1100));
    for i in 0..60 {
        post(&format!("lockstep/test/ns/object-{i}"));
    }
    let first_page = gitea.statuses(&repo, &sha);
    assert_eq!(first_page.len(), 50, "Gitea's page size");
    assert!(
        first_page.iter().all(|s| s["context"] != nova),
        "nova's success is past the first page"
    );
    let forge = lockstep::forge::gitea::Gitea::new(
        &gitea.url(),
        &repo,
        Some(lockstep::secret::Secret::new(gitea.token.clone())),
    )
    .expect("forge");
    let pending = Status {
        state: State::Pending,
        context: nova.into(),
        description: "accepted, applying: nova 2026.1→2026.2".into(),
        target_url: None,
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let out = rt
        .block_on(deliver(&forge, &RetryPolicy::default(), &sha, &pending))
        .expect("delivered");
    assert_eq!(out, Outcome::Settled);
    let all = gitea.statuses(&repo, &sha);
    assert!(
        all.iter().all(|s| s["status"] == "success"),
        "no pending: {all:?}"
    );
}
