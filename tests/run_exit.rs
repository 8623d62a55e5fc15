//! How `lockstep run` ends. Kube mode needs a source: without one it is a
//! usage error (exit 2) before any call to the cluster, however kube mode
//! was asked for (flag, environment, config file); `--keep` only goes with
//! the example fleet. `--until-idle` exits 1 whenever a status ends in
//! failure that a person must act on (a hop whose repair budget is spent, an
//! apply the cluster rejected, a plan held, the branch head refused) and 0
//! when the only failures are refused commits a later commit moved past
//! (the embedded example fleet).
//!
//! The binary is run for what a user sees; the failing hop and the rejected
//! apply need the simulated operator's fault injection, which only the
//! library offers, so those drive the daemon the binary runs in-process.

mod common;

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockstep::cluster::memory::MemoryCluster;
use lockstep::cluster::{ApplyRequest, Cluster, ClusterError, ClusterObject};
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::kind::{Key, Kind};
use lockstep::metrics::Metrics;
use lockstep::sim::{Fault, JobKind, Params, World};
use lockstep::source::{Origin, Source};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Fleet Tester")
        .env("GIT_AUTHOR_EMAIL", "fleet@example.invalid")
        .env("GIT_COMMITTER_NAME", "Fleet Tester")
        .env("GIT_COMMITTER_EMAIL", "fleet@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `lockstep run ARGS` with none of the caller's `LOCKSTEP_*` settings.
fn run_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(common::lockstep_bin());
    c.arg("run").args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LOCKSTEP_") || k == "KUBECONFIG" {
            c.env_remove(k);
        }
    }
    c.env("LOCKSTEP_LOG", "warn");
    c
}

fn text(out: &Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------
// Kube mode without a source.

/// A kubeconfig whose API server is a TCP listener this test owns: any
/// cluster call lockstep makes arrives there.
struct Trap {
    listener: TcpListener,
    dir: tempfile::TempDir,
}

impl Trap {
    fn new() -> Trap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: trap\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: trap\n  user:\n    token: not-a-real-token\ncontexts:\n- name: trap\n  context:\n    cluster: trap\n    user: trap\n    namespace: default\ncurrent-context: trap\n"
            ),
        )
        .expect("write kubeconfig");
        Trap { listener, dir }
    }

    fn kubeconfig(&self) -> std::path::PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Whether anything connected (waiting up to `wait` for it).
    fn connected(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            match self.listener.accept() {
                Ok(_) => return true,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("accept: {e}"),
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn assert_needs_source(how: &str, out: &Output, trap: &Trap) {
    let (code, stdout, stderr) = text(out);
    assert_eq!(code, Some(2), "{how}: {stderr}");
    assert!(stdout.is_empty(), "{how}: nothing ran: {stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{how}: one line: {stderr}");
    for what in [
        "lockstep: error:",
        "kube",
        "--repo PATH",
        "--url URL",
        "source.repo",
        "source.url",
    ] {
        assert!(lines[0].contains(what), "{how}: {what:?} in {stderr}");
    }
    assert!(
        !stderr.contains("example fleet at"),
        "{how}: the example fleet was not built: {stderr}"
    );
    assert!(
        !trap.connected(Duration::ZERO),
        "{how}: lockstep called the cluster"
    );
}

#[test]
fn kube_mode_without_a_source_is_a_usage_error_before_any_cluster_call() {
    let trap = Trap::new();
    let kubeconfig = trap.kubeconfig();
    let kc = kubeconfig.to_str().expect("utf-8 path");

    // The flag, with the kubeconfig given as a flag, and --keep too (the
    // source rule comes first).
    let keep = trap.dir.path().join("keep");
    let out = run_cmd(&[
        "--until-idle",
        "--cluster-mode",
        "kube",
        "--kubeconfig",
        kc,
        "--keep",
        keep.to_str().expect("utf-8"),
    ])
    .output()
    .expect("lockstep runs");
    assert_needs_source("--cluster-mode kube", &out, &trap);
    assert!(!keep.exists(), "no example fleet kept");

    // The environment, kubeconfig from $KUBECONFIG.
    let out = run_cmd(&["--until-idle"])
        .env("LOCKSTEP_CLUSTER_MODE", "kube")
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("lockstep runs");
    assert_needs_source("LOCKSTEP_CLUSTER_MODE=kube", &out, &trap);

    // A config file: no source at all, and an empty one.
    for (name, yaml) in [
        (
            "none.yaml",
            format!("cluster:\n  mode: kube\n  kubeconfig: {kc}\n"),
        ),
        (
            "empty.yaml",
            format!("source: {{}}\ncluster:\n  mode: kube\n  kubeconfig: {kc}\n"),
        ),
    ] {
        let file = trap.dir.path().join(name);
        std::fs::write(&file, yaml).expect("write config");
        let out = run_cmd(&["--until-idle", "--config", file.to_str().expect("utf-8")])
            .output()
            .expect("lockstep runs");
        assert_needs_source(&format!("cluster.mode: kube in {name}"), &out, &trap);
    }

    // The control: with a source, the same kubeconfig does reach the
    // listener, so the silence above is lockstep not calling, not a trap
    // that cannot hear.
    let fleet = tempfile::tempdir().expect("tempdir");
    lockstep::demo::build_repository(fleet.path()).expect("example fleet");
    let mut child = run_cmd(&[
        "--until-idle",
        "--cluster-mode",
        "kube",
        "--repo",
        fleet.path().to_str().expect("utf-8"),
    ])
    .env("KUBECONFIG", &kubeconfig)
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("lockstep runs");
    let heard = trap.connected(Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        heard,
        "with a source, kube mode calls the trap's API server"
    );
}

#[test]
fn keep_without_the_example_fleet_is_a_usage_error() {
    let fleet = tempfile::tempdir().expect("tempdir");
    lockstep::demo::build_repository(fleet.path()).expect("example fleet");
    let keep = fleet.path().join("kept");
    let out = run_cmd(&[
        "--until-idle",
        "--repo",
        fleet.path().to_str().expect("utf-8"),
        "--keep",
        keep.to_str().expect("utf-8"),
    ])
    .output()
    .expect("lockstep runs");
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("--keep") && stderr.contains("only without a source"),
        "{stderr}"
    );
    assert!(!keep.exists());

    // A directory that holds something is never written into.
    let busy = tempfile::tempdir().expect("tempdir");
    std::fs::write(busy.path().join("mine.txt"), "keep out").expect("write");
    let out = run_cmd(&[
        "--until-idle",
        "--keep",
        busy.path().to_str().expect("utf-8"),
    ])
    .output()
    .expect("lockstep runs");
    let (code, _, stderr) = text(&out);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not empty"), "{stderr}");
    assert!(!busy.path().join(".git").exists(), "no repository made");
}

// ---------------------------------------------------------------------------
// `--until-idle` through the binary.

#[test]
fn until_idle_on_the_embedded_example_fleet_exits_0() {
    let out = run_cmd(&["--until-idle"]).output().expect("lockstep runs");
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // Three refused commits, none of them the head: the gate did its job.
    assert_eq!(
        stdout
            .matches("lockstep/default: failure — refused")
            .count(),
        3,
        "{stdout}"
    );
    assert!(!stderr.contains("waiting on a person"), "{stderr}");
}

/// The reader of lockstep's stderr goes away (a log shipper restarted, a
/// `| head`): the log lines after that cannot be written and are dropped.
/// The run goes on to its end and exits as it would have; reporting the
/// failed write on that same stderr panicked it (exit 101).
#[test]
fn a_closed_stderr_does_not_stop_the_run() {
    use std::io::BufRead;
    let mut child = run_cmd(&["--until-idle"])
        .env("LOCKSTEP_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lockstep runs");
    let mut first = String::new();
    std::io::BufReader::new(child.stderr.take().expect("stderr"))
        .read_line(&mut first)
        .expect("a first log line");
    assert!(!first.is_empty());
    // The reader is dropped here: every later write gets EPIPE.
    let status = child.wait().expect("lockstep ends");
    assert_eq!(status.code(), Some(0), "after {first:?}");
}

/// The example fleet in a temporary repository, plus `edit` committed on
/// top; returns the new commit.
fn commit_on(dir: &Path, file: &str, edits: &[(&str, &str)], message: &str) -> String {
    let path = dir.join(file);
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    for (from, to) in edits {
        if from.is_empty() {
            text = (*to).to_owned();
        } else {
            assert!(text.contains(from), "{from:?} in {file}");
            text = text.replacen(from, to, 1);
        }
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&path, text).expect("write");
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

fn until_idle_on(dir: &Path) -> (Option<i32>, String, String) {
    let out = run_cmd(&["--until-idle", "--repo", dir.to_str().expect("utf-8")])
        .output()
        .expect("lockstep runs");
    text(&out)
}

const NOVA: &str = "standalone/compute/nova.yaml";

#[test]
fn until_idle_exits_1_while_the_branch_head_is_refused_and_0_once_fixed() {
    let dir = tempfile::tempdir().expect("tempdir");
    lockstep::demo::build_repository(dir.path()).expect("example fleet");
    let skip = commit_on(
        dir.path(),
        NOVA,
        &[
            (
                "openStackRelease: \"2026.2\"",
                "openStackRelease: \"2027.2\"",
            ),
            ("tag: \"2026.2\"", "tag: \"2027.2\""),
        ],
        "Nova straight to 2027.2",
    );
    let (code, stdout, stderr) = until_idle_on(dir.path());
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let line: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("waiting on a person"))
        .collect();
    assert_eq!(
        line,
        [format!(
            "lockstep: 1 waiting on a person; first: commit {} (the head of main): refused: nova 2026.2→2027.2 skips 2027.1 (UpgradePathInvalid)",
            &skip[..10]
        )
        .as_str()],
        "{stderr}"
    );

    // The fix on top: the refused commit is history now.
    commit_on(
        dir.path(),
        NOVA,
        &[
            (
                "openStackRelease: \"2027.2\"",
                "openStackRelease: \"2027.1\"",
            ),
            ("tag: \"2027.2\"", "tag: \"2027.1\""),
        ],
        "Nova to 2027.1 instead",
    );
    let (code, stdout, stderr) = until_idle_on(dir.path());
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("failure — refused: nova 2026.2→2027.2 skips 2027.1"),
        "the refused commit keeps its failure: {stdout}"
    );
    assert!(
        stdout.contains("success — nova 2026.2→2027.1: complete"),
        "{stdout}"
    );
    assert!(!stderr.contains("waiting on a person"), "{stderr}");
}

#[test]
fn until_idle_exits_1_for_a_refused_plan_and_names_it_before_the_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    lockstep::demo::build_repository(dir.path()).expect("example fleet");
    commit_on(
        dir.path(),
        "plans/nowhere.yaml",
        &[(
            "",
            "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata:\n  name: nowhere\nspec:\n  to: \"2026.2\"\n  waves:\n    - name: all\n      select: [{kind: ControlPlane, labels: {ring: nowhere}}]\n",
        )],
        "A plan that selects nothing",
    );
    // A commit on top: the plan still in its tree, the gate refuses it too.
    let head = commit_on(
        dir.path(),
        "README.md",
        &[("", "A fleet.\n")],
        "Say what this is",
    );
    let (code, stdout, stderr) = until_idle_on(dir.path());
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("lockstep/default/plan/nowhere: failure — refused: wave all selects no ControlPlane or service (PlanSelectsNothing)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{} Say what this is\n    lockstep/default: failure — refused",
            &head[..10]
        )),
        "{stdout}"
    );
    let line: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("waiting on a person"))
        .collect();
    assert_eq!(
        line,
        [
            "lockstep: 2 waiting on a person; first: plan nowhere: refused: wave all selects no ControlPlane or service (PlanSelectsNothing)"
        ],
        "the plan and the refused head: {stderr}"
    );
}

/// A plan whose own hop commit the gate refuses (here a policy blocks the
/// Glance the ControlPlane's hop projects): the plan is held, naming the
/// commit and the rule, and the bounded run ends with exit 1. It waited
/// for that hop for ever, "upgrading", and the run never ended. Once the
/// block is lifted and the refused commit reverted, the plan writes its
/// hop again and completes.
#[test]
fn until_idle_exits_1_for_a_plan_whose_hop_commit_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    lockstep::demo::build_repository(dir.path()).expect("example fleet");
    commit_on(
        dir.path(),
        "plans/staging.yaml",
        &[(
            "",
            "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata:\n  name: staging-up\nspec:\n  to: \"2026.2\"\n  waves:\n    - name: only\n      select: [{kind: ControlPlane, namespace: openstack-staging, name: staging}]\n",
        )],
        "A plan for staging",
    );
    commit_on(
        dir.path(),
        ".lockstep/policies/block.yaml",
        &[(
            "",
            "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePolicy\nmetadata: {name: block-glance}\nspec:\n  blocked:\n    - {kinds: [Glance], from: \"2026.1\", to: \"2026.2\", reason: breaks our backend}\n",
        )],
        "Block Glance 2026.2",
    );
    let bounded = |dir: &Path| {
        let out = Command::new("timeout")
            .arg("120")
            .arg(common::lockstep_bin())
            .args([
                "run",
                "--until-idle",
                "--repo",
                dir.to_str().expect("utf-8"),
            ])
            .env("LOCKSTEP_LOG", "warn")
            .output()
            .expect("lockstep runs");
        text(&out)
    };
    let (code, stdout, stderr) = bounded(dir.path());
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let plan_commit = git(dir.path(), &["rev-parse", "HEAD"]);
    assert!(
        stdout.contains(&format!(
            "lockstep/default/plan/staging-up: failure — held in wave 1/1 (only): ControlPlane openstack-staging/staging: its commit {} was refused: Glance 2026.1 → 2026.2 is blocked by UpgradePolicy block-glance",
            &plan_commit[..10]
        )),
        "{stdout}"
    );
    assert!(stderr.contains("waiting on a person"), "{stderr}");

    // lockstep committed onto the branch, not into the work tree.
    git(dir.path(), &["reset", "-q", "--hard"]);
    git(dir.path(), &["rm", "-q", ".lockstep/policies/block.yaml"]);
    git(dir.path(), &["commit", "-qm", "Lift the block"]);
    git(dir.path(), &["revert", "--no-edit", &plan_commit]);
    let (code, stdout, stderr) = bounded(dir.path());
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout
            .contains("lockstep/default/plan/staging-up: success — complete: every wave at 2026.2"),
        "{stdout}"
    );
}

// ---------------------------------------------------------------------------
// The failing hop and the rejected apply: the daemon `lockstep run` runs,
// in-process, on a simulated operator with faults.

/// The simulated cluster, except that it rejects every apply of `reject`
/// the way an admission webhook would.
#[derive(Clone)]
struct Rejecting {
    inner: MemoryCluster,
    reject: Option<Key>,
}

impl Rejecting {
    fn admits(&self, req: &ApplyRequest) -> Result<(), ClusterError> {
        if self.reject.as_ref() == Some(&req.key) {
            return Err(ClusterError::Invalid {
                key: req.key.clone(),
                message: "admission webhook \"vnova.kb.io\" denied the request".into(),
            });
        }
        Ok(())
    }
}

impl Cluster for Rejecting {
    crate::forward_cluster!(all_but apply dry_run);
    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        self.admits(req)?;
        self.inner.apply(req).await
    }
    /// Admission webhooks answer a dry run as they answer the apply.
    async fn dry_run(&self, req: &ApplyRequest) -> Result<(), ClusterError> {
        self.admits(req)?;
        self.inner.dry_run(req).await
    }
}

/// Runs the daemon on the example fleet with `--until-idle` (bounded: a run
/// that never idles fails the test), delivers its statuses as git notes and
/// returns what needs a person, with the repository.
async fn bounded_run(
    world: World,
    reject: Option<Key>,
) -> (Vec<lockstep::daemon::NeedsPerson>, tempfile::TempDir) {
    let (needs, dir, _) = bounded_run_after(world, reject, |_| {}).await;
    (needs, dir)
}

/// [`bounded_run`] with commits of the test's own after the example
/// fleet's, and the simulated cluster it ran on.
async fn bounded_run_after(
    world: World,
    reject: Option<Key>,
    more: impl FnOnce(&Path),
) -> (
    Vec<lockstep::daemon::NeedsPerson>,
    tempfile::TempDir,
    MemoryCluster,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    lockstep::demo::build_repository(dir.path()).expect("example fleet");
    more(dir.path());
    let mem = MemoryCluster::new(world);
    let cluster = Rejecting {
        inner: mem.clone(),
        reject,
    };
    let (d, queue) = run_until_idle(dir.path(), &mem, cluster).await;
    let forge = AnyForge::Notes(Notes::open(dir.path()).expect("notes"));
    assert!(deliver_now(&queue, &forge, &Metrics::new(), &RetryPolicy::default()).await);
    (d.needs_person(), dir, mem)
}

/// Runs the daemon with `--until-idle` on `dir`'s `main` over `cluster`
/// (which wraps `mem`, seeded at the first commit); a run that never idles
/// fails the test. Returns the daemon and its status queue.
async fn run_until_idle<C: Cluster + 'static>(
    dir: &Path,
    mem: &MemoryCluster,
    cluster: C,
) -> (Daemon<C, Source>, StatusQueue) {
    let queue = StatusQueue::new(10_000);
    let source = Source::open(Origin::Local(dir.to_owned()), "main").expect("source");
    let opts = Options {
        poll: Duration::from_millis(10),
        until_idle: true,
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(mem, &source, &opts).expect("seeded");
    let mut d = Daemon::new(
        opts,
        source,
        cluster,
        clock,
        queue.clone(),
        Arc::new(Metrics::new()),
    );
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let (_leader_tx, leader) = tokio::sync::watch::channel(true);
    tokio::time::timeout(
        Duration::from_secs(120),
        d.run(rx, leader, std::future::pending::<()>()),
    )
    .await
    .expect("the bounded run stops");
    (d, queue)
}

/// The notes of the commit with this subject.
fn notes_of(dir: &Path, subject: &str) -> String {
    let log = git(dir, &["log", "--format=%H %s", "main"]);
    let sha = log
        .lines()
        .find_map(|l| l.strip_suffix(subject).map(str::trim))
        .unwrap_or_else(|| panic!("no commit {subject:?}: {log}"));
    git(dir, &["notes", "--ref=lockstep", "show", sha])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_whose_repair_budget_is_spent_needs_a_person() {
    let mut w = World::new(Params::default());
    w.faults.push(Fault::JobFails {
        object: "nova".into(),
        job: JobKind::Expand,
        tries: 1_000,
    });
    let (needs, dir) = bounded_run(w, None).await;
    assert_eq!(needs.len(), 1, "{needs:?}");
    assert_eq!(needs[0].subject, "Nova compute/nova");
    assert!(needs[0].reason.contains("nova"), "{}", needs[0]);
    let notes = notes_of(dir.path(), "Bump the nova image with its release");
    assert!(
        notes.contains("lockstep/default: failure") && notes.contains("compute/nova: failure"),
        "{notes}"
    );
    // The untouched run: nothing for a person.
    let (needs, _) = bounded_run(World::new(Params::default()), None).await;
    assert!(needs.is_empty(), "{needs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_the_cluster_rejects_ends_a_bounded_run_and_needs_a_person() {
    let nova = Key::new(Kind::Nova, "compute", "nova");
    let (needs, dir) = bounded_run(World::new(Params::default()), Some(nova)).await;
    assert_eq!(needs.len(), 1, "{needs:?}");
    assert_eq!(needs[0].subject, "Nova compute/nova");
    assert!(
        needs[0].reason.starts_with("apply refused: ") && needs[0].reason.contains("vnova.kb.io"),
        "{}",
        needs[0]
    );
    let notes = notes_of(dir.path(), "Bump the nova image with its release");
    assert!(
        notes.contains("lockstep/default: failure — apply refused"),
        "{notes}"
    );
}

/// One commit moves the staging plane and the standalone Nova; the
/// plane's admission webhook refuses it. Before, Nova was applied (its
/// hop ran to 2027.1) and the plane was not: a cluster half at the commit,
/// a state nobody wrote in Git. Now a dry run of both comes first, and
/// neither is applied; both wait on a person, saying which object was
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_is_applied_all_or_none() {
    let staging = Key::new(Kind::ControlPlane, "openstack-staging", "staging");
    let nova = Key::new(Kind::Nova, "compute", "nova");
    let edit = |dir: &Path| {
        for (file, edits) in [
            (
                "clusters/staging/controlplane.yaml",
                &[(
                    "openStackRelease: \"2026.1\"",
                    "openStackRelease: \"2026.2\"",
                )][..],
            ),
            (
                "standalone/compute/nova.yaml",
                &[
                    (
                        "openStackRelease: \"2026.2\"",
                        "openStackRelease: \"2027.1\"",
                    ),
                    ("tag: \"2026.2\"", "tag: \"2027.1\""),
                ][..],
            ),
        ] {
            let path = dir.join(file);
            let mut text = std::fs::read_to_string(&path).expect("read");
            for (from, to) in edits {
                assert!(text.contains(from), "{file}: {from}");
                text = text.replacen(from, to, 1);
            }
            std::fs::write(&path, text).expect("write");
        }
        git(dir, &["commit", "-qam", "Staging and nova on together"]);
    };
    let world = || World::new(Params::default());
    let (needs, dir, mem) = bounded_run_after(world(), Some(staging.clone()), edit).await;
    {
        let w = mem.world().expect("world");
        assert_eq!(
            w.objects[&nova].release.as_deref(),
            Some("2026.2"),
            "Nova stays where the commit before left it"
        );
    }
    let mut subjects: Vec<&str> = needs.iter().map(|n| n.subject.as_str()).collect();
    subjects.sort();
    assert_eq!(
        subjects,
        [
            "ControlPlane openstack-staging/staging",
            "Nova compute/nova"
        ],
        "{needs:?}"
    );
    for n in &needs {
        assert!(
            n.reason.contains("the objects of commit")
                && n.reason
                    .contains("a dry run of ControlPlane openstack-staging/staging was refused")
                && n.reason.contains("vnova.kb.io"),
            "{n}"
        );
    }
    let notes = notes_of(dir.path(), "Staging and nova on together");
    assert!(notes.contains("failure"), "{notes}");

    // Nothing refused: both are applied (the dry run is no refusal of its own).
    let (needs, _dir, mem) = bounded_run_after(world(), None, edit).await;
    assert!(needs.is_empty(), "{needs:?}");
    let w = mem.world().expect("world");
    assert_eq!(w.objects[&nova].release.as_deref(), Some("2027.1"));
    assert_eq!(w.planes[&staging].release, "2026.2");
}

/// An accepted hop whose document cannot be read back as JSON (a YAML
/// mapping with a sequence for a key: the gate reads it, JSON has no such
/// thing) is not applied in part: before, lockstep sent release and image
/// alone. Now nothing is applied and a person is told why.
#[test]
fn an_accepted_document_that_cannot_be_read_back_is_not_applied_in_part() {
    let repo = common::FleetRepo::new();
    const NOVA: &str = "standalone/compute/nova.yaml";
    repo.write(NOVA, common::nova("nova", "2026.1", "2026.1"));
    repo.commit("nova");
    repo.write(
        NOVA,
        common::nova("nova", "2026.2", "2026.2").replacen(
            "  region: RegionTwo\n",
            "  region: RegionTwo\n  extra: {? [a, b] : c}\n",
            1,
        ),
    );
    repo.commit("nova to 2026.2");
    let (code, json) = common::check_json(&repo, &[]);
    assert_eq!(code, 0, "the gate accepts it: {json:#}");
    let out = common::lockstep(&[
        "run",
        "--repo",
        &repo.path().to_string_lossy(),
        "--until-idle",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("lockstep/default: failure — apply refused: cannot read what to apply: standalone/compute/nova.yaml at "),
        "{stdout}"
    );
    assert!(stdout.contains("nothing applied"), "{stdout}");
}

/// The simulated cluster with a person fighting lockstep over Nova: after
/// every apply of it, `kubectl set image` puts a hotfix tag back, and from
/// then on an unforced apply of Nova (a dry run too) conflicts with that
/// field manager, as it would on a real API server.
#[derive(Clone)]
struct Fighting {
    inner: MemoryCluster,
    nova: Key,
    edited: Arc<std::sync::atomic::AtomicBool>,
}

impl Cluster for Fighting {
    crate::forward_cluster!(all_but apply dry_run);
    async fn apply(&self, req: &ApplyRequest) -> Result<ClusterObject, ClusterError> {
        let r = self.inner.apply(req).await;
        if req.key == self.nova && r.is_ok() {
            let mut w = self.inner.world().expect("world");
            if let Some(o) = w.objects.get_mut(&self.nova) {
                o.image = lockstep::release::ImageRef::new(
                    Some("ghcr.io/c5c3/nova"),
                    Some("2027.1-hotfix"),
                    None,
                )
                .expect("image");
            }
            self.edited.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        r
    }
    async fn dry_run(&self, req: &ApplyRequest) -> Result<(), ClusterError> {
        if req.key == self.nova && self.edited.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ClusterError::Conflict {
                key: req.key.clone(),
                message: "conflict with \"kubectl-set\": .spec.image.tag".into(),
            });
        }
        self.inner.dry_run(req).await
    }
}

/// An object of a commit that already ran its step, and that someone edits
/// since, is that object's drift (set right on its own, and told to a
/// person once it turns into a fight): it does not hold the other objects
/// of the commit when they come to it later. Staging is on an earlier hop
/// when Nova runs their common commit; by the time staging reaches it,
/// Nova's dry run would conflict with the person's edit. Before, staging
/// was held ("a dry run of Nova was refused") for as long as the fight went
/// on; now staging's hop runs, and only Nova needs a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_object_does_not_hold_the_rest_of_its_commit() {
    const STAGING: &str = "clusters/staging/controlplane.yaml";
    const NOVA: &str = "standalone/compute/nova.yaml";
    let repo = common::FleetRepo::new();
    repo.write(STAGING, common::staging("2026.1"));
    repo.write(NOVA, common::nova("nova", "2026.2", "2026.2"));
    repo.commit("staging at 2026.1, nova at 2026.2");
    repo.write(STAGING, common::staging("2026.2"));
    repo.commit("staging to 2026.2");
    repo.write(STAGING, common::staging("2027.1"));
    repo.write(NOVA, common::nova("nova", "2027.1", "2027.1"));
    repo.commit("staging and nova to 2027.1");

    let staging = Key::new(Kind::ControlPlane, "openstack-staging", "staging");
    let nova = Key::new(Kind::Nova, "compute", "nova");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let cluster = Fighting {
        inner: mem.clone(),
        nova: nova.clone(),
        edited: Default::default(),
    };
    let (d, _queue) = run_until_idle(repo.path(), &mem, cluster).await;
    let needs = d.needs_person();
    assert_eq!(
        mem.world().expect("world").planes[&staging].release,
        "2027.1",
        "staging's hop ran: {needs:?}"
    );
    assert!(
        needs.iter().all(|n| n.subject == "Nova compute/nova"),
        "{needs:?}"
    );
    assert!(!needs.is_empty(), "the fight over Nova is told to a person");
}
