//! UpgradePlans in `mode: propose`, end to end with the daemon in process
//! (`sim` mode: the simulated C5C3 operator, virtual time) and real Git: the
//! fleet is a bare repository served by `git daemon`, which lockstep mirrors
//! and pushes the wave branches to; "a person" merges with the git CLI.
//!
//! GitHub is played by its peer (Prism serving GitHub's published OpenAPI
//! description, `tests/peers/github`), which validates every request
//! lockstep sends; Prism stores nothing, so the restart, decline and
//! moved-branch behaviour is checked against a small stateful stub of
//! GitHub's two pull-request endpoints (wiremock), and says so. Gitea runs
//! here for real (`tests/peers/gitea`, built from the Go module proxy): a
//! wave proposed, merged through Gitea's API and the next one proposed. The
//! one race a real server cannot be made to show (a create answered 409
//! because another replica just opened the request) is played by wiremock,
//! as is GitLab, which cannot run here; both mocks say so and match the
//! paths, queries, headers and bodies the APIs document.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::GitDaemon;
use common::prism::Prism;
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options, PassOutcome, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::gitea::Gitea;
use lockstep::forge::github::GitHub;
use lockstep::forge::gitlab::GitLab;
use lockstep::forge::notes::Notes;
use lockstep::metrics::Metrics;
use lockstep::secret::Secret;
use lockstep::sim::{Params, World};
use lockstep::source::{Auth, Origin, Source};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const WAVE1: &str = "lockstep/plan/fleet/wave-1";
const WAVE2: &str = "lockstep/plan/fleet/wave-2";
const TITLE1: &str = "lockstep plan fleet: wave canary (1/2) to 2026.2";

const PLAN: &str = r#"apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata:
  name: fleet
spec:
  to: "2026.2"
  mode: propose
  waves:
    - name: canary
      select:
        - {kind: ControlPlane, namespace: openstack-staging, name: staging}
    - name: production
      select:
        - {kind: ControlPlane, namespace: openstack, name: prod}
        - {kind: Nova, namespace: compute, name: nova}
      maxParallel: 2
"#;

/// The tip of `branch` in `bare`, or zeros while it does not exist: what a
/// fork copying lockstep's proposal branch would show as its head.
fn tip_or_zeros(bare: &Path, branch: &str) -> String {
    Command::new("git")
        .args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ])
        .current_dir(bare)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "0".repeat(40))
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "A Person")
        .env("GIT_AUTHOR_EMAIL", "person@example.invalid")
        .env("GIT_COMMITTER_NAME", "A Person")
        .env("GIT_COMMITTER_EMAIL", "person@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

// ---------------------------------------------------------------------------
// The fleet: staging, prod and the standalone Nova at 2026.1 with the plan,
// in a bare repository served by `git daemon`; a work clone for the person.

struct Fleet {
    root: tempfile::TempDir,
    daemon: GitDaemon,
}

impl Fleet {
    fn new(plan: &str) -> Fleet {
        let root = tempfile::tempdir().expect("tempdir");
        let work = root.path().join("work");
        std::fs::create_dir_all(&work).expect("mkdir");
        git(&work, &["init", "-q", "-b", "main"]);
        for (file, text) in [
            (
                "clusters/staging/controlplane.yaml",
                common::staging("2026.1"),
            ),
            (
                "clusters/prod/controlplane.yaml",
                common::prod("2026.1", "2026.1"),
            ),
            (
                "standalone/compute/nova.yaml",
                common::nova("nova", "2026.1", "2026.1"),
            ),
            ("plans/fleet.yaml", plan.to_owned()),
        ] {
            let p = work.join(file);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        git(&work, &["add", "-A"]);
        git(
            &work,
            &[
                "commit",
                "-q",
                "-m",
                "fleet at 2026.1, plan: fleet to 2026.2",
            ],
        );
        let bare = root.path().join("srv/fleet.git");
        std::fs::create_dir_all(&bare).expect("mkdir");
        git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        git(&work, &["remote", "add", "origin", &bare.to_string_lossy()]);
        git(&work, &["push", "-q", "origin", "main"]);
        let daemon = GitDaemon::start(&root.path().join("srv"));
        Fleet { root, daemon }
    }

    fn url(&self) -> String {
        self.daemon.url("fleet.git")
    }

    fn bare(&self) -> PathBuf {
        self.root.path().join("srv/fleet.git")
    }

    fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    /// A branch's tip on the served repository.
    fn tip(&self, branch: &str) -> Option<String> {
        let out = Command::new("git")
            .args([
                "rev-parse",
                "--verify",
                "-q",
                &format!("refs/heads/{branch}"),
            ])
            .current_dir(self.bare())
            .output()
            .expect("git runs");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// What a wave branch's commit changes against its parent, and its
    /// parent, subject and trailers.
    fn wave_commit(&self, branch: &str) -> (Vec<String>, String, String) {
        let bare = self.bare();
        let files = git(
            &bare,
            &["diff", "--name-only", &format!("{branch}^"), branch],
        )
        .lines()
        .map(str::to_owned)
        .collect();
        let parent = git(&bare, &["rev-parse", &format!("{branch}^")]);
        let message = git(&bare, &["log", "-1", "--format=%B", branch]);
        (files, parent, message)
    }

    /// The person merges the proposal (a merge commit, as a host's merge
    /// button makes) and pushes main.
    fn merge(&self, branch: &str) {
        let work = self.work();
        git(&work, &["fetch", "-q", "origin"]);
        git(&work, &["checkout", "-q", "main"]);
        git(&work, &["reset", "-q", "--hard", "origin/main"]);
        git(
            &work,
            &[
                "merge",
                "-q",
                "--no-ff",
                "-m",
                "Merge pull request #1347 from the wave branch",
                &format!("origin/{branch}"),
            ],
        );
        git(&work, &["push", "-q", "origin", "main"]);
    }

    /// Someone commits something unrelated to main.
    fn unrelated_commit(&self) {
        let work = self.work();
        git(&work, &["fetch", "-q", "origin"]);
        git(&work, &["checkout", "-q", "main"]);
        git(&work, &["reset", "-q", "--hard", "origin/main"]);
        let before = std::fs::read_to_string(work.join("README.md")).unwrap_or_default();
        std::fs::write(work.join("README.md"), format!("{before}the fleet\n")).expect("write");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "docs: a README"]);
        git(&work, &["push", "-q", "origin", "main"]);
    }
}

/// The daemon on the fleet's remote, in `sim` mode, with `forge` for
/// proposals. `poll` zero: every pass asks the host again.
fn daemon(
    fleet: &Fleet,
    forge: Arc<AnyForge>,
    mem: &MemoryCluster,
    queue: &StatusQueue,
) -> Daemon<MemoryCluster, Source> {
    daemon_at(
        fleet.url(),
        fleet,
        Auth::default(),
        forge,
        mem,
        queue.clone(),
    )
}

/// The daemon on `url` with `auth`, the fleet's cache; pushes go where the
/// source came from.
fn daemon_at(
    url: String,
    fleet: &Fleet,
    auth: Auth,
    forge: Arc<AnyForge>,
    mem: &MemoryCluster,
    queue: StatusQueue,
) -> Daemon<MemoryCluster, Source> {
    let source = Source::open(
        Origin::Remote {
            url,
            cache_dir: fleet.cache(),
            auth,
        },
        "main",
    )
    .expect("source opens");
    let target = source.push_target();
    assert!(target.is_some(), "a remote source has a push target");
    let opts = Options {
        cluster_name: "sim".into(),
        poll: Duration::ZERO,
        plan_push: target.clone(),
        plan_propose_to: target,
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(mem, &source, &opts).expect("seeded");
    let mut d = Daemon::new(
        opts,
        source,
        mem.clone(),
        clock,
        queue,
        Arc::new(Metrics::new()),
    );
    d.set_forge(forge);
    d
}

/// Passes (statuses delivered to `statuses` when given) and simulator
/// steps until nothing is left to do; returns the passes' outcomes.
async fn drive(
    d: &mut Daemon<MemoryCluster, Source>,
    mem: &MemoryCluster,
    queue: &StatusQueue,
    statuses: Option<&AnyForge>,
) -> Vec<PassOutcome> {
    let metrics = Metrics::new();
    let mut outs = Vec::new();
    for _ in 0..20_000 {
        let out = d.pass().await;
        if let Some(f) = statuses {
            deliver_now(queue, f, &metrics, &RetryPolicy::default()).await;
        }
        let busy = mem.step(Duration::from_secs(60)).expect("sim steps");
        if out.busy && !busy {
            mem.advance(Duration::from_secs(60));
        }
        let idle = !out.busy && !busy;
        outs.push(out);
        if idle {
            return outs;
        }
    }
    panic!("the daemon never went idle");
}

fn plan_status(d: &Daemon<MemoryCluster, Source>) -> String {
    d.plan_descriptions()
        .into_iter()
        .find(|(name, _)| name == "fleet")
        .map(|(_, d)| d)
        .unwrap_or_default()
}

/// Planes' and the Nova's release as applied to the simulated cluster.
fn applied(mem: &MemoryCluster) -> (String, String, String) {
    let w = mem.world().expect("world");
    let plane = |name: &str| {
        w.planes
            .values()
            .find(|p| p.key.name == name)
            .map(|p| p.release.clone())
            .unwrap_or_default()
    };
    let nova = w
        .objects
        .values()
        .find(|o| o.key.name == "nova" && o.key.namespace == "compute")
        .and_then(|o| o.release.clone())
        .unwrap_or_default();
    (plane("staging"), plane("prod"), nova)
}

fn cluster() -> MemoryCluster {
    MemoryCluster::new(World::new(Params::default()))
}

// ---------------------------------------------------------------------------
// GitHub: the validating peer.

fn accepted(log: &str, code: &str) -> bool {
    log.contains("The request passed the validation rules")
        && log.contains(&format!("Responding with \"{code}\""))
        && !log.contains('✖')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_a_wave_is_proposed_merged_applied_and_the_next_proposed() {
    let t = Instant::now();
    let prism = Prism::start();
    eprintln!("Prism up: {:?}", t.elapsed());
    let fleet = Fleet::new(PLAN);
    let main0 = fleet.tip("main").expect("main");
    let forge = Arc::new(AnyForge::GitHub(
        GitHub::new(&prism.url(), "o/r", Some(Secret::new("ghp-propose-test"))).expect("forge"),
    ));
    let (mem, queue) = (cluster(), StatusQueue::new(10_000));
    let mut d = daemon(&fleet, forge.clone(), &mem, &queue);

    // 1. The canary wave is proposed: its branch on the remote, one pull
    //    request, main untouched, nothing applied.
    drive(&mut d, &mem, &queue, Some(&forge)).await;
    let wave1 = fleet.tip(WAVE1).expect("the wave branch was pushed");
    assert_eq!(fleet.tip("main").as_deref(), Some(main0.as_str()));
    let (files, parent, message) = fleet.wave_commit(WAVE1);
    assert_eq!(files, ["clusters/staging/controlplane.yaml"]);
    assert_eq!(parent, main0, "the wave commit sits on main's head");
    assert!(message.starts_with(TITLE1), "{message}");
    assert!(
        message.contains("Lockstep-Plan: fleet") && message.contains("Lockstep-Wave: canary"),
        "{message}"
    );
    let staged = git(
        &fleet.bare(),
        &[
            "show",
            &format!("{WAVE1}:clusters/staging/controlplane.yaml"),
        ],
    );
    assert_eq!(staged, common::staging("2026.2").trim_end());
    let pulls = prism.requests_to("/repos/o/r/pulls");
    let posts: Vec<&(String, String)> = pulls.iter().filter(|(m, _)| m == "post").collect();
    assert_eq!(posts.len(), 1, "one pull request opened: {pulls:#?}");
    assert!(
        accepted(&posts[0].1, "201"),
        "Prism refused it:\n{}",
        posts[0].1
    );
    assert!(
        pulls
            .iter()
            .any(|(m, log)| m == "get" && accepted(log, "200")),
        "the open requests were looked for first: {pulls:#?}"
    );
    assert_eq!(
        plan_status(&d),
        "wave 1/2 (canary): proposed as https://github.com/octocat/Hello-World/pull/1347, waiting for merge"
    );
    assert_eq!(
        applied(&mem),
        ("2026.1".into(), "2026.1".into(), "2026.1".into())
    );

    // 2. Later passes (the host asked every time: poll is zero) open no
    //    second request and leave the branch alone. GitHub publishes the
    //    request's head as refs/pull/N/head; the daemon judges it before
    //    anyone merges (a status on the wave commit), still applying nothing.
    git(
        &fleet.bare(),
        &["update-ref", "refs/pull/1347/head", &wave1],
    );
    for _ in 0..3 {
        let out = d.pass().await;
        assert!(!out.busy, "waiting on a person is not busy");
    }
    deliver_now(&queue, &*forge, &Metrics::new(), &RetryPolicy::default()).await;
    let pulls = prism.requests_to("/repos/o/r/pulls");
    assert_eq!(
        pulls.iter().filter(|(m, _)| m == "post").count(),
        1,
        "{pulls:#?}"
    );
    assert!(
        pulls.iter().filter(|(m, _)| m == "get").count() >= 4,
        "{pulls:#?}"
    );
    assert_eq!(
        fleet.tip(WAVE1).as_deref(),
        Some(wave1.as_str()),
        "not rewritten"
    );
    let status_posts: Vec<(String, String, String)> = prism
        .requests()
        .into_iter()
        .filter(|(m, p, _)| m == "post" && p == &format!("/repos/o/r/statuses/{wave1}"))
        .collect();
    assert!(!status_posts.is_empty(), "the proposal's head was judged");
    assert!(status_posts.iter().all(|(_, _, log)| accepted(log, "201")));
    assert_eq!(
        applied(&mem),
        ("2026.1".into(), "2026.1".into(), "2026.1".into())
    );

    // 3. A person merges: the merge lands on main, the daemon judges and
    //    applies the canary, and proposes the production wave on top.
    fleet.merge(WAVE1);
    let merged = fleet.tip("main").expect("main");
    drive(&mut d, &mem, &queue, Some(&forge)).await;
    let (staging, prod, nova) = applied(&mem);
    assert_eq!(staging, "2026.2", "the merged wave was applied");
    assert_eq!((prod.as_str(), nova.as_str()), ("2026.1", "2026.1"));
    let (files, parent, message) = fleet.wave_commit(WAVE2);
    assert_eq!(
        files,
        [
            "clusters/prod/controlplane.yaml",
            "standalone/compute/nova.yaml"
        ]
    );
    assert_eq!(parent, merged, "the next wave sits on the merge");
    assert!(
        message.starts_with("lockstep plan fleet: wave production (2/2) to 2026.2"),
        "{message}"
    );
    assert_eq!(fleet.tip("main").as_deref(), Some(merged.as_str()));
    let pulls = prism.requests_to("/repos/o/r/pulls");
    let posts: Vec<&(String, String)> = pulls.iter().filter(|(m, _)| m == "post").collect();
    assert_eq!(posts.len(), 2, "one more pull request: {pulls:#?}");
    assert!(accepted(&posts[1].1, "201"), "{}", posts[1].1);
    assert!(
        plan_status(&d).starts_with("wave 2/2 (production): proposed as "),
        "{}",
        plan_status(&d)
    );
    eprintln!("whole test: {:?}", t.elapsed());
}

// ---------------------------------------------------------------------------
// GitHub's pull-request endpoints, remembered: a stub (wiremock), because
// Prism stores nothing and these checks need the host to remember.

#[derive(Clone)]
struct StoredPull {
    number: u64,
    head: String,
    sha: String,
    state: &'static str,
}

/// `GET /repos/o/r/pulls` answers the stored requests for the `head`
/// filter; `POST` stores one with the branch's tip on the served repository
/// as its head commit (as GitHub records it).
#[derive(Clone)]
struct PullsStub {
    bare: PathBuf,
    pulls: Arc<Mutex<Vec<StoredPull>>>,
}

impl PullsStub {
    fn json(p: &StoredPull) -> Value {
        json!({
            "number": p.number,
            "html_url": format!("https://github.example/o/r/pull/{}", p.number),
            "state": p.state,
            "merged_at": null,
            "head": {"ref": p.head, "sha": p.sha, "label": format!("o:{}", p.head)},
            "base": {"ref": "main"}
        })
    }

    fn posts(&self) -> usize {
        self.pulls.lock().expect("lock").len()
    }

    fn close_all(&self) {
        for p in self.pulls.lock().expect("lock").iter_mut() {
            p.state = "closed";
        }
    }
}

impl Respond for PullsStub {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut pulls = self.pulls.lock().expect("lock");
        if req.method == wiremock::http::Method::POST {
            let body: Value = serde_json::from_slice(&req.body).expect("JSON body");
            let head = body["head"].as_str().unwrap_or_default().to_owned();
            let sha = git(&self.bare, &["rev-parse", &format!("refs/heads/{head}")]);
            let p = StoredPull {
                number: 100 + pulls.len() as u64,
                head,
                sha,
                state: "open",
            };
            pulls.push(p.clone());
            return ResponseTemplate::new(201).set_body_json(Self::json(&p));
        }
        let filter = req
            .url
            .query_pairs()
            .find(|(k, _)| k == "head")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        let list: Vec<Value> = pulls
            .iter()
            .rev()
            .filter(|p| format!("o:{}", p.head) == filter)
            .map(Self::json)
            .collect();
        ResponseTemplate::new(200).set_body_json(list)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_stub_restart_decline_and_a_moved_branch() {
    let fleet = Fleet::new(PLAN);
    let server = MockServer::start().await;
    let stub = PullsStub {
        bare: fleet.bare(),
        pulls: Arc::default(),
    };
    Mock::given(method("GET"))
        .and(path("/repos/o/r/pulls"))
        .and(query_param("head", format!("o:{WAVE1}")))
        .and(query_param("base", "main"))
        .and(query_param("state", "all"))
        .and(header("authorization", "Bearer ghp-stub"))
        .respond_with(stub.clone())
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/o/r/pulls"))
        .and(header("authorization", "Bearer ghp-stub"))
        .and(body_partial_json(
            json!({"head": WAVE1, "base": "main", "title": TITLE1}),
        ))
        .respond_with(stub.clone())
        .mount(&server)
        .await;
    let forge = Arc::new(AnyForge::GitHub(
        GitHub::new(&server.uri(), "o/r", Some(Secret::new("ghp-stub"))).expect("forge"),
    ));
    let (mem, queue) = (cluster(), StatusQueue::new(10_000));

    let mut first = daemon(&fleet, forge.clone(), &mem, &queue);
    drive(&mut first, &mem, &queue, None).await;
    assert_eq!(stub.posts(), 1);
    let c1 = fleet.tip(WAVE1).expect("pushed");
    assert!(
        plan_status(&first)
            .ends_with("proposed as https://github.example/o/r/pull/100, waiting for merge"),
        "{}",
        plan_status(&first)
    );
    drop(first);

    // A restart: nothing in memory; the host's list and the remote say it all.
    let mut d = daemon(&fleet, forge.clone(), &mem, &queue);
    drive(&mut d, &mem, &queue, None).await;
    assert_eq!(stub.posts(), 1, "no second request after a restart");
    assert_eq!(
        fleet.tip(WAVE1).as_deref(),
        Some(c1.as_str()),
        "not rewritten"
    );
    assert!(plan_status(&d).contains("pull/100, waiting for merge"));

    // The person closes it without merging: declined, nothing reopened, the
    // branch left as it is.
    stub.close_all();
    for _ in 0..3 {
        d.pass().await;
    }
    assert_eq!(stub.posts(), 1, "a declined wave is not proposed again");
    assert_eq!(fleet.tip(WAVE1).as_deref(), Some(c1.as_str()));
    assert_eq!(
        plan_status(&d),
        "wave 1/2 (canary): declined: https://github.example/o/r/pull/100 was closed without merging; proposed again when main moves"
    );
    assert_eq!(applied(&mem).0, "2026.1");

    // main moves: the wave is written afresh on the new head (the branch
    // replaced) and proposed again.
    fleet.unrelated_commit();
    let main1 = fleet.tip("main").expect("main");
    drive(&mut d, &mem, &queue, None).await;
    assert_eq!(stub.posts(), 2);
    let c2 = fleet.tip(WAVE1).expect("pushed");
    assert_ne!(c2, c1);
    let (files, parent, _) = fleet.wave_commit(WAVE1);
    assert_eq!(
        (files.as_slice(), parent.as_str()),
        (
            ["clusters/staging/controlplane.yaml".to_owned()].as_slice(),
            main1.as_str()
        )
    );
    assert!(
        plan_status(&d).contains("pull/101, waiting for merge"),
        "{}",
        plan_status(&d)
    );
    assert_eq!(applied(&mem).0, "2026.1", "still nothing applied");

    // main moves again while the request is open: the branch stays as the
    // reviewers saw it (no rebase under an open request), nothing reopened.
    fleet.unrelated_commit();
    drive(&mut d, &mem, &queue, None).await;
    assert_eq!(stub.posts(), 2);
    assert_eq!(fleet.tip(WAVE1).as_deref(), Some(c2.as_str()));
    assert!(
        plan_status(&d).contains("pull/101, waiting for merge"),
        "{}",
        plan_status(&d)
    );

    // A reviewer's commit on the branch, and a request the host no longer
    // shows (closed here; past Gitea's search window there): main moves,
    // and the branch is not pushed over.
    let work = fleet.work();
    git(&work, &["fetch", "-q", "origin"]);
    git(
        &work,
        &["checkout", "-q", "-B", "review", &format!("origin/{WAVE1}")],
    );
    std::fs::write(work.join("REVIEW.md"), "a reviewer's note\n").expect("write");
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "review: a note"]);
    git(
        &work,
        &["push", "-q", "origin", &format!("HEAD:refs/heads/{WAVE1}")],
    );
    let reviewed = fleet.tip(WAVE1).expect("pushed");
    stub.close_all();
    fleet.unrelated_commit();
    for _ in 0..3 {
        d.pass().await;
    }
    assert_eq!(fleet.tip(WAVE1).as_deref(), Some(reviewed.as_str()), "kept");
    assert_eq!(stub.posts(), 2);
    assert!(
        plan_status(&d).contains("which lockstep did not write"),
        "{}",
        plan_status(&d)
    );

    // lockstep's commit amended by the reviewer keeps lockstep's message
    // and trailer, under another committer: still theirs, still kept.
    git(&work, &["checkout", "-q", "-B", "amend", &c2]);
    std::fs::write(work.join("REVIEW.md"), "folded in\n").expect("write");
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "--amend", "--no-edit"]);
    git(
        &work,
        &[
            "push",
            "-q",
            "-f",
            "origin",
            &format!("HEAD:refs/heads/{WAVE1}"),
        ],
    );
    let amended = fleet.tip(WAVE1).expect("pushed");
    fleet.unrelated_commit();
    for _ in 0..3 {
        d.pass().await;
    }
    assert_eq!(fleet.tip(WAVE1).as_deref(), Some(amended.as_str()), "kept");
    assert_eq!(stub.posts(), 2);
}

// ---------------------------------------------------------------------------
// GitLab and Gitea: no server can run here, so wiremock plays them (a
// mock): the matchers are the paths, queries, headers and bodies their API
// documents.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_a_merge_request_from_the_wave_branch() {
    let fleet = Fleet::new(PLAN);
    let server = MockServer::start().await;
    let list = "/api/v4/projects/group%2Ffleet/merge_requests";
    // The first look finds nothing; after the create, the list shows it.
    let opened = Arc::new(Mutex::new(None::<Value>));
    let seen = opened.clone();
    let fork_bare = fleet.bare();
    Mock::given(method("GET"))
        .and(path(list))
        .and(query_param("source_branch", WAVE1))
        .and(query_param("target_branch", "main"))
        .and(header("PRIVATE-TOKEN", "glpat-propose"))
        .respond_with(move |_: &Request| {
            // A fork's merge request from a branch of the same name and
            // the same commit (copied from lockstep's), open: taken for
            // lockstep's own, the wave would wait on someone else's request
            // (and be declined when they close it).
            let mut v = vec![json!({
                "iid": 4, "web_url": "https://gitlab.example/group/fleet/-/merge_requests/4",
                "state": "opened", "source_branch": WAVE1, "sha": tip_or_zeros(&fork_bare, WAVE1),
                "source_project_id": 77, "target_project_id": 12,
            })];
            v.extend(seen.lock().expect("lock").iter().cloned());
            ResponseTemplate::new(200).set_body_json(v)
        })
        .mount(&server)
        .await;
    let created = opened.clone();
    let bare = fleet.bare();
    Mock::given(method("POST"))
        .and(path(list))
        .and(header("PRIVATE-TOKEN", "glpat-propose"))
        .and(body_partial_json(json!({
            "source_branch": WAVE1, "target_branch": "main", "title": TITLE1
        })))
        .respond_with(move |req: &Request| {
            let body: Value = serde_json::from_slice(&req.body).expect("JSON");
            assert!(
                body["description"]
                    .as_str()
                    .is_some_and(|d| d.contains("`ControlPlane openstack-staging/staging`")
                        && d.contains("`2026.1` → `2026.2`")),
                "{body}"
            );
            let mr = json!({
                "iid": 5, "web_url": "https://gitlab.example/group/fleet/-/merge_requests/5",
                "state": "opened", "source_branch": WAVE1,
                "sha": git(&bare, &["rev-parse", WAVE1]),
                "source_project_id": 12, "target_project_id": 12,
            });
            *created.lock().expect("lock") = Some(mr.clone());
            ResponseTemplate::new(201).set_body_json(mr)
        })
        .expect(1)
        .mount(&server)
        .await;
    let forge = Arc::new(AnyForge::GitLab(
        GitLab::new(
            &server.uri(),
            "group/fleet",
            Some(Secret::new("glpat-propose")),
        )
        .expect("forge"),
    ));
    let (mem, queue) = (cluster(), StatusQueue::new(10_000));
    let mut d = daemon(&fleet, forge.clone(), &mem, &queue);
    drive(&mut d, &mem, &queue, None).await;
    for _ in 0..2 {
        d.pass().await;
    }
    assert!(fleet.tip(WAVE1).is_some());
    assert_eq!(
        plan_status(&d),
        "wave 1/2 (canary): proposed as https://gitlab.example/group/fleet/-/merge_requests/5, waiting for merge"
    );
    // A restart finds it too (the POST mock expects exactly one call).
    drop(d);
    let mut d = daemon(&fleet, forge, &mem, &queue);
    drive(&mut d, &mem, &queue, None).await;
    assert!(plan_status(&d).contains("merge_requests/5, waiting for merge"));
    assert_eq!(applied(&mem).0, "2026.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_gitea_a_wave_is_proposed_merged_there_applied_and_the_next_proposed() {
    let t = Instant::now();
    let peer = tokio::task::spawn_blocking(common::gitea::Gitea::start)
        .await
        .expect("gitea starts");
    eprintln!("Gitea up: {:?}", t.elapsed());
    let repo = peer.create_repo("fleet");
    let fleet = Fleet::new(PLAN);
    git(
        &fleet.work(),
        &["remote", "set-url", "origin", &peer.push_url(&repo)],
    );
    git(&fleet.work(), &["push", "-q", "origin", "main"]);
    peer.wait_pushed(&repo);
    let main0 = git(&fleet.work(), &["rev-parse", "main"]);
    let on_gitea = |branch: &str| {
        let line = git(
            &fleet.work(),
            &["ls-remote", "origin", &format!("refs/heads/{branch}")],
        );
        line.split_whitespace().next().map(str::to_owned)
    };
    let token = Secret::new(peer.token.clone());
    let forge = Arc::new(AnyForge::Gitea(
        Gitea::new(&peer.url(), &repo, Some(token.clone())).expect("forge"),
    ));
    let (mem, queue) = (cluster(), StatusQueue::new(10_000));
    // The source is Gitea's repository over http, with the same token (a
    // Gitea access token works as the password for any user name).
    let mut d = daemon_at(
        peer.clone_url(&repo),
        &fleet,
        Auth {
            token: Some(token),
            ..Auth::default()
        },
        forge.clone(),
        &mem,
        queue.clone(),
    );
    let open_pulls = || {
        let pulls = peer.must("GET", &format!("/repos/{repo}/pulls?state=open"), None, 200);
        pulls.as_array().cloned().unwrap_or_default()
    };

    // 1. The canary wave: its branch pushed to Gitea, one pull request that
    //    Gitea accepted, main untouched, nothing applied.
    drive(&mut d, &mem, &queue, Some(&forge)).await;
    let wave1 = on_gitea(WAVE1)
        .unwrap_or_else(|| panic!("the wave branch is not on Gitea: {}", plan_status(&d)));
    assert_eq!(on_gitea("main").as_deref(), Some(main0.as_str()));
    let pulls = open_pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr = &pulls[0];
    assert_eq!(pr["head"]["ref"], WAVE1, "{pr}");
    assert_eq!(pr["head"]["sha"], wave1.as_str(), "{pr}");
    assert_eq!(pr["base"]["ref"], "main", "{pr}");
    assert_eq!(pr["title"], TITLE1, "{pr}");
    let number = pr["number"].as_u64().expect("number");
    assert_eq!(
        plan_status(&d),
        format!(
            "wave 1/2 (canary): proposed as {}/{repo}/pulls/{number}, waiting for merge",
            peer.url()
        )
    );
    assert_eq!(
        applied(&mem),
        ("2026.1".into(), "2026.1".into(), "2026.1".into())
    );

    // 2. More passes open nothing new; Gitea publishes the request's head as
    //    refs/pull/N/head, so its commit is judged before the merge, and the
    //    verdict is a status Gitea holds.
    for _ in 0..3 {
        assert!(!d.pass().await.busy, "waiting on a person is not busy");
    }
    deliver_now(&queue, &*forge, &Metrics::new(), &RetryPolicy::default()).await;
    assert_eq!(open_pulls().len(), 1);
    assert_eq!(
        on_gitea(WAVE1).as_deref(),
        Some(wave1.as_str()),
        "not rewritten"
    );
    let statuses = peer.statuses(&repo, &wave1);
    assert!(
        statuses
            .iter()
            .any(|s| s["context"] == "lockstep/sim/review" && s["status"] == "success"),
        "the proposal's head judged on Gitea: {statuses:#?}"
    );
    assert_eq!(
        applied(&mem),
        ("2026.1".into(), "2026.1".into(), "2026.1".into())
    );

    // 3. A person presses merge in Gitea: the daemon applies the canary and
    //    proposes the production wave on top of Gitea's merge commit.
    peer.must(
        "POST",
        &format!("/repos/{repo}/pulls/{number}/merge"),
        Some(json!({"Do": "merge"})),
        200,
    );
    let merged = on_gitea("main").expect("main");
    assert_ne!(merged, main0);
    drive(&mut d, &mem, &queue, Some(&forge)).await;
    let (staging, prod, nova) = applied(&mem);
    assert_eq!(staging, "2026.2", "the merged wave was applied");
    assert_eq!((prod.as_str(), nova.as_str()), ("2026.1", "2026.1"));
    let pulls = open_pulls();
    assert_eq!(pulls.len(), 1, "the merged one closed, one new: {pulls:#?}");
    assert_eq!(pulls[0]["head"]["ref"], WAVE2, "{}", pulls[0]);
    let wave2 = on_gitea(WAVE2).expect("the next wave branch");
    git(&fleet.work(), &["fetch", "-q", "origin"]);
    assert_eq!(
        git(&fleet.work(), &["rev-parse", &format!("{wave2}^")]),
        merged,
        "the next wave sits on the merge"
    );
    assert!(
        plan_status(&d).starts_with("wave 2/2 (production): proposed as "),
        "{}",
        plan_status(&d)
    );
    eprintln!("whole test: {:?}", t.elapsed());
}

/// A fast-forward in `mode: propose` against a real Gitea: the same fleet
/// at 2026.1 and the plan to 2027.1 (two hops). Each wave of each hop is one
/// pull request, opened only once the one before it was merged and applied:
/// hop 1's on `wave-<n>-to-2026.2`, the last hop's on `wave-<n>`, so no hop
/// reuses another's branch; every wave branch is one commit on the merge
/// before it, moving its objects one release; nothing is applied before its
/// merge; the plan is complete at 2027.1 after the fourth merge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_gitea_a_fast_forward_is_proposed_one_hop_and_wave_at_a_time() {
    let t = Instant::now();
    let peer = tokio::task::spawn_blocking(common::gitea::Gitea::start)
        .await
        .expect("gitea starts");
    let repo = peer.create_repo("fleet");
    let fleet = Fleet::new(&PLAN.replacen("to: \"2026.2\"", "to: \"2027.1\"", 1));
    git(
        &fleet.work(),
        &["remote", "set-url", "origin", &peer.push_url(&repo)],
    );
    git(&fleet.work(), &["push", "-q", "origin", "main"]);
    peer.wait_pushed(&repo);
    let token = Secret::new(peer.token.clone());
    let forge = Arc::new(AnyForge::Gitea(
        Gitea::new(&peer.url(), &repo, Some(token.clone())).expect("forge"),
    ));
    let (mem, queue) = (cluster(), StatusQueue::new(10_000));
    let mut d = daemon_at(
        peer.clone_url(&repo),
        &fleet,
        Auth {
            token: Some(token),
            ..Auth::default()
        },
        forge.clone(),
        &mem,
        queue.clone(),
    );
    let open_pulls = || {
        let pulls = peer.must("GET", &format!("/repos/{repo}/pulls?state=open"), None, 200);
        pulls.as_array().cloned().unwrap_or_default()
    };
    let r = |s: &str| s.to_owned();
    // (branch, title, status prefix, what is applied before its merge)
    let steps = [
        (
            "lockstep/plan/fleet/wave-1-to-2026.2",
            "lockstep plan fleet: wave canary (1/2) to 2026.2",
            "hop 1/2 (2026.1 → 2026.2), wave 1/2 (canary): proposed as ",
            (r("2026.1"), r("2026.1"), r("2026.1")),
        ),
        (
            "lockstep/plan/fleet/wave-2-to-2026.2",
            "lockstep plan fleet: wave production (2/2) to 2026.2",
            "hop 1/2 (2026.1 → 2026.2), wave 2/2 (production): proposed as ",
            (r("2026.2"), r("2026.1"), r("2026.1")),
        ),
        (
            WAVE1,
            "lockstep plan fleet: wave canary (1/2) to 2027.1",
            "hop 2/2 (2026.2 → 2027.1), wave 1/2 (canary): proposed as ",
            (r("2026.2"), r("2026.2"), r("2026.2")),
        ),
        (
            WAVE2,
            "lockstep plan fleet: wave production (2/2) to 2027.1",
            "hop 2/2 (2026.2 → 2027.1), wave 2/2 (production): proposed as ",
            (r("2027.1"), r("2026.2"), r("2026.2")),
        ),
    ];
    for (branch, title, status, before) in steps {
        drive(&mut d, &mem, &queue, Some(&forge)).await;
        let pulls = open_pulls();
        assert_eq!(pulls.len(), 1, "one wave at a time: {pulls:#?}");
        let pr = &pulls[0];
        assert_eq!(pr["head"]["ref"], branch, "{pr}");
        assert_eq!(pr["title"], title, "{pr}");
        assert_eq!(pr["base"]["ref"], "main", "{pr}");
        assert!(
            plan_status(&d).starts_with(status),
            "{status}…: {}",
            plan_status(&d)
        );
        assert_eq!(applied(&mem), before, "{branch}: nothing before its merge");
        // One commit on main's tip, moving its objects one release.
        git(&fleet.work(), &["fetch", "-q", "origin"]);
        let tip = git(&fleet.work(), &["rev-parse", &format!("origin/{branch}")]);
        assert_eq!(
            git(&fleet.work(), &["rev-parse", &format!("{tip}^")]),
            git(&fleet.work(), &["rev-parse", "origin/main"]),
            "{branch} sits on main"
        );
        let number = pr["number"].as_u64().expect("number");
        peer.must(
            "POST",
            &format!("/repos/{repo}/pulls/{number}/merge"),
            Some(json!({"Do": "merge"})),
            200,
        );
    }
    drive(&mut d, &mem, &queue, Some(&forge)).await;
    assert!(open_pulls().is_empty());
    assert_eq!(
        applied(&mem),
        (r("2027.1"), r("2027.1"), r("2027.1")),
        "every object walked both hops"
    );
    assert_eq!(plan_status(&d), "complete: every wave at 2027.1");
    eprintln!("whole test: {:?}", t.elapsed());
}

/// The one race a real Gitea cannot be made to show: the create answered
/// 409 because another replica opened the same request a moment before.
/// wiremock plays Gitea here (a mock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_a_pull_request_and_one_that_already_exists() {
    let fleet = Fleet::new(PLAN);
    let server = MockServer::start().await;
    let pulls = "/api/v1/repos/o/r/pulls";
    // Gitea's list has no head filter: it answers every pull request into
    // main (here one from another branch, then lockstep's own once the
    // create has "raced" with another replica's).
    let existing = Arc::new(Mutex::new(false));
    let shown = existing.clone();
    let bare = fleet.bare();
    Mock::given(method("GET"))
        .and(path(pulls))
        .and(query_param("state", "all"))
        .and(query_param("base_branch", "main"))
        .and(header("authorization", "token gitea-propose"))
        .respond_with(move |_: &Request| {
            let mut v = vec![
                json!({
                    "number": 3, "html_url": "https://gitea.example/o/r/pulls/3", "state": "open",
                    "merged": false,
                    "head": {"ref": "feature", "label": "feature", "sha": "0".repeat(40), "repo_id": 5},
                    "base": {"ref": "main", "repo_id": 5}
                }),
                // A fork's request from a branch of the same name and the
                // same commit (copied from lockstep's), open: taken for
                // lockstep's own, the wave would wait on someone else's
                // request (and be declined when they close it).
                json!({
                    "number": 4, "html_url": "https://gitea.example/o/r/pulls/4", "state": "open",
                    "merged": false,
                    "head": {"ref": WAVE1, "label": WAVE1, "sha": tip_or_zeros(&bare, WAVE1), "repo_id": 6},
                    "base": {"ref": "main", "repo_id": 5}
                }),
            ];
            if *shown.lock().expect("lock") {
                v.push(json!({
                    "number": 9, "html_url": "https://gitea.example/o/r/pulls/9", "state": "open",
                    "merged": false,
                    "head": {"ref": WAVE1, "label": WAVE1, "sha": git(&bare, &["rev-parse", WAVE1]), "repo_id": 5},
                    "base": {"ref": "main", "repo_id": 5}
                }));
            }
            ResponseTemplate::new(200).set_body_json(v)
        })
        .mount(&server)
        .await;
    let made = existing.clone();
    Mock::given(method("POST"))
        .and(path(pulls))
        .and(header("authorization", "token gitea-propose"))
        .and(body_partial_json(
            json!({"head": WAVE1, "base": "main", "title": TITLE1}),
        ))
        .respond_with(move |_: &Request| {
            // Another replica opened it a moment ago: Gitea answers 409.
            *made.lock().expect("lock") = true;
            ResponseTemplate::new(409).set_body_json(json!({
                "message": "pull request already exists for these targets"
            }))
        })
        .expect(1)
        .mount(&server)
        .await;
    let forge = Arc::new(AnyForge::Gitea(
        Gitea::new(&server.uri(), "o/r", Some(Secret::new("gitea-propose"))).expect("forge"),
    ));
    let (mem, queue) = (cluster(), StatusQueue::new(10_000));
    let mut d = daemon(&fleet, forge, &mem, &queue);
    drive(&mut d, &mem, &queue, None).await;
    for _ in 0..2 {
        d.pass().await;
    }
    assert_eq!(
        plan_status(&d),
        "wave 1/2 (canary): proposed as https://gitea.example/o/r/pulls/9, waiting for merge",
        "the request another replica opened, not pull 3 from another branch nor the fork's pull 4"
    );
    assert!(fleet.tip(WAVE1).is_some());
}

// ---------------------------------------------------------------------------
// No host: git notes cannot propose.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_notes_cannot_propose_and_say_so() {
    let fleet = Fleet::new(PLAN);
    let (mem, queue) = (cluster(), StatusQueue::new(10_000));
    let mut d = daemon(
        &fleet,
        Arc::new(AnyForge::Notes(Notes::open(&fleet.bare()).expect("notes"))),
        &mem,
        &queue,
    );
    let outs = drive(&mut d, &mem, &queue, None).await;
    assert!(outs.len() < 20, "went idle promptly: {} passes", outs.len());
    assert_eq!(
        plan_status(&d),
        "wave 1/2 (canary): propose mode needs a Git host (github, gitlab or gitea); nothing proposed"
    );
    assert!(fleet.tip(WAVE1).is_none(), "no branch pushed");
    assert_eq!(applied(&mem).0, "2026.1");
}

// ---------------------------------------------------------------------------
// Pushing with the source's token: git's own smart-HTTP server
// (`git http-backend`, as CGI behind a minimal HTTP/1.1 loop in this test)
// that lets anyone read but wants a token to push, as a host does for a
// public repository. Plain http on loopback (the source allows a token
// there; anywhere else it insists on https).

const PUSH_TOKEN: &str = "ghs-push-token-9d1e";

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// `git http-backend` serving `root` on 127.0.0.1; pushes need
/// `x-access-token:PUSH_TOKEN`. Records (method, target, authorized).
struct HttpGit {
    port: u16,
    seen: Arc<Mutex<Vec<(String, String, bool)>>>,
}

impl HttpGit {
    fn start(root: &Path) -> HttpGit {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen: Arc<Mutex<Vec<(String, String, bool)>>> = Arc::default();
        let record = seen.clone();
        let root = root.to_owned();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (root, record) = (root.clone(), record.clone());
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let method = parts.next().unwrap_or_default().to_owned();
                    let target = parts.next().unwrap_or_default().to_owned();
                    let mut headers = Vec::new();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
                        }
                    }
                    let get =
                        |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                    let mut body = Vec::new();
                    if get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
                        loop {
                            let mut size = String::new();
                            if reader.read_line(&mut size).is_err() {
                                return;
                            }
                            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                            let mut chunk = vec![0u8; n + 2];
                            if reader.read_exact(&mut chunk).is_err() {
                                return;
                            }
                            if n == 0 {
                                break;
                            }
                            body.extend_from_slice(&chunk[..n]);
                        }
                    } else if let Some(n) = get("content-length").and_then(|n| n.parse().ok()) {
                        body = vec![0u8; n];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                    }
                    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
                    let push =
                        query.contains("git-receive-pack") || path.ends_with("git-receive-pack");
                    let authorized = get("authorization").as_deref()
                        == Some(&basic("x-access-token", PUSH_TOKEN));
                    record
                        .lock()
                        .expect("lock")
                        .push((method.clone(), target.clone(), authorized));
                    let mut out = stream;
                    if push && !authorized {
                        let _ = out.write_all(
                            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"fleet\"\r\n\
                              Content-Length: 0\r\nConnection: close\r\n\r\n",
                        );
                        return;
                    }
                    let mut cgi = Command::new("git");
                    cgi.arg("http-backend")
                        .env("GIT_PROJECT_ROOT", &root)
                        .env("GIT_HTTP_EXPORT_ALL", "1")
                        .env("GIT_CONFIG_NOSYSTEM", "1")
                        .env("REQUEST_METHOD", &method)
                        .env("PATH_INFO", path)
                        .env("QUERY_STRING", query)
                        .env("CONTENT_TYPE", get("content-type").unwrap_or_default())
                        .env("CONTENT_LENGTH", body.len().to_string())
                        .env("REMOTE_ADDR", "127.0.0.1")
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::null());
                    if authorized {
                        cgi.env("REMOTE_USER", "x-access-token");
                    }
                    let mut child = cgi.spawn().expect("git http-backend runs");
                    if let Some(mut stdin) = child.stdin.take() {
                        let _ = stdin.write_all(&body);
                    }
                    let output = child.wait_with_output().expect("http-backend output");
                    let raw = output.stdout;
                    let split = raw
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map(|i| (i, 4))
                        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
                    let Some((at, sep)) = split else { return };
                    let head = String::from_utf8_lossy(&raw[..at]).into_owned();
                    let content = &raw[at + sep..];
                    let mut status = "200 OK".to_owned();
                    let mut response = String::new();
                    for h in head.lines() {
                        match h.split_once(':') {
                            Some((k, v)) if k.eq_ignore_ascii_case("status") => {
                                status = v.trim().to_owned();
                            }
                            Some(_) => {
                                response.push_str(h.trim_end());
                                response.push_str("\r\n");
                            }
                            None => {}
                        }
                    }
                    let _ = out.write_all(
                        format!(
                            "HTTP/1.1 {status}\r\n{response}Content-Length: {}\r\nConnection: close\r\n\r\n",
                            content.len()
                        )
                        .as_bytes(),
                    );
                    let _ = out.write_all(content);
                });
            }
        });
        HttpGit { port, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/fleet.git", self.port)
    }

    fn pushes(&self) -> Vec<bool> {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, t, _)| m == "POST" && t.ends_with("git-receive-pack"))
            .map(|(_, _, ok)| *ok)
            .collect()
    }
}

fn http_daemon(
    fleet: &Fleet,
    server: &HttpGit,
    token: Option<&str>,
    forge: Arc<AnyForge>,
    mem: &MemoryCluster,
) -> Daemon<MemoryCluster, Source> {
    let auth = Auth {
        token: token.map(Secret::new),
        ..Auth::default()
    };
    daemon_at(
        server.url(),
        fleet,
        auth,
        forge,
        mem,
        StatusQueue::new(10_000),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_pushes_carry_the_source_token_over_http() {
    // Propose mode: without a token the push is refused and the plan says
    // so; with the source's token the wave branch arrives.
    let fleet = Fleet::new(PLAN);
    let server = HttpGit::start(&fleet.root.path().join("srv"));
    let host = MockServer::start().await;
    let stub = PullsStub {
        bare: fleet.bare(),
        pulls: Arc::default(),
    };
    Mock::given(path("/repos/o/r/pulls"))
        .respond_with(stub.clone())
        .mount(&host)
        .await;
    let forge = Arc::new(AnyForge::GitHub(
        GitHub::new(&host.uri(), "o/r", None).expect("forge"),
    ));
    let mem = cluster();
    let mut d = http_daemon(&fleet, &server, None, forge.clone(), &mem);
    d.pass().await;
    assert!(fleet.tip(WAVE1).is_none());
    assert_eq!(stub.posts(), 0);
    let status = plan_status(&d);
    assert!(
        status.contains(&format!("writing the branch {WAVE1} failed"))
            && status.contains("asks for credentials but no token is configured"),
        "{status}"
    );
    drop(d);
    let mut d = http_daemon(&fleet, &server, Some(PUSH_TOKEN), forge, &mem);
    d.pass().await;
    let wave1 = fleet.tip(WAVE1).expect("pushed with the token");
    assert_eq!(stub.posts(), 1);
    assert!(
        plan_status(&d).contains("waiting for merge"),
        "{}",
        plan_status(&d)
    );
    assert_eq!(server.pushes().last(), Some(&true), "{:?}", server.pushes());
    assert!(!status.contains(PUSH_TOKEN));

    // Commit mode over the same server: the hop commit reaches main.
    let fleet = Fleet::new(&PLAN.replace("mode: propose", "mode: commit"));
    let server = HttpGit::start(&fleet.root.path().join("srv"));
    let main0 = fleet.tip("main").expect("main");
    let mem = cluster();
    let host = MockServer::start().await;
    let forge = Arc::new(AnyForge::GitHub(
        GitHub::new(&host.uri(), "o/r", None).expect("forge"),
    ));
    let mut d = http_daemon(&fleet, &server, Some(PUSH_TOKEN), forge, &mem);
    d.pass().await;
    let main1 = fleet.tip("main").expect("main");
    assert_ne!(main1, main0, "the hop commit was pushed to main");
    let message = git(&fleet.bare(), &["log", "-1", "--format=%B", "main"]);
    assert!(message.starts_with(TITLE1), "{message}");
    assert!(
        server.pushes().iter().all(|ok| *ok),
        "{:?}",
        server.pushes()
    );
    assert_ne!(wave1, main1);
}

// ---------------------------------------------------------------------------
// The real binary: `lockstep run --until-idle` proposes and stops (a wave
// waiting for a person leaves nothing to do); run again, it opens nothing
// new. GitHub is the stateful stub (statuses accepted and forgotten).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockstep_run_proposes_once_across_runs() {
    let fleet = Fleet::new(PLAN);
    let host = MockServer::start().await;
    let stub = PullsStub {
        bare: fleet.bare(),
        pulls: Arc::default(),
    };
    Mock::given(path("/repos/o/r/pulls"))
        .and(header("authorization", "Bearer ghp-run"))
        .respond_with(stub.clone())
        .mount(&host)
        .await;
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex(
            r"^/repos/o/r/commits/[0-9a-f]{40}/statuses$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&host)
        .await;
    Mock::given(method("POST"))
        .and(wiremock::matchers::path_regex(
            r"^/repos/o/r/statuses/[0-9a-f]{40}$",
        ))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 1})))
        .mount(&host)
        .await;
    let run = || {
        let mut c = Command::new(common::lockstep_bin());
        c.args(["run", "--until-idle", "--url"])
            .arg(fleet.url())
            .arg("--cache-dir")
            .arg(fleet.cache())
            .args(["--report", "github", "--forge-url"])
            .arg(host.uri())
            .args(["--forge-repo", "o/r", "--token-env", "PROPOSE_TOKEN"])
            .env("PROPOSE_TOKEN", "ghp-run")
            .env("LOCKSTEP_LOG", "info");
        c
    };
    for n in 0..2 {
        let mut c = run();
        let out = tokio::task::spawn_blocking(move || c.output().expect("lockstep runs"))
            .await
            .expect("join");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "run {n}: {stderr}");
        assert_eq!(stub.posts(), 1, "run {n}: one request in all: {stderr}");
        assert!(fleet.tip(WAVE1).is_some(), "run {n}");
        if n == 0 {
            assert!(stderr.contains("plan: proposed the wave"), "{stderr}");
        } else {
            assert!(!stderr.contains("plan: proposed the wave"), "{stderr}");
        }
    }
}

// ---------------------------------------------------------------------------
// Rehearsals have no host: a proposed wave is rehearsed as merged at once.

#[test]
fn rehearse_takes_proposals_as_merged() {
    let fleet = Fleet::new(PLAN);
    let out = Command::new(common::lockstep_bin())
        .args([
            "rehearse",
            "--plan",
            "--start",
            "2026-12-01T12:00:00Z",
            "--repo",
        ])
        .arg(fleet.work())
        .output()
        .expect("lockstep runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("plan fleet: complete: every wave at 2026.2"),
        "{text}"
    );
    assert!(
        text.contains("lockstep plan fleet: wave canary (1/2) to 2026.2")
            && text.contains("lockstep plan fleet: wave production (2/2) to 2026.2"),
        "{text}"
    );
    assert!(!text.contains("needs a Git host"), "{text}");
    assert!(text.contains("(2 hop commits)"), "{text}");
    assert!(fleet.tip(WAVE1).is_none(), "a rehearsal pushes nothing");
}

/// Commit mode whose push the remote refuses (no token): the hop is not
/// applied (it is not on the branch), the plan says why, and the pass is
/// not busy, so a bounded run ends instead of writing the hop again for
/// ever; with the token the next pass pushes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_push_is_said_and_ends_a_bounded_run() {
    let fleet = Fleet::new(&PLAN.replace("mode: propose", "mode: commit"));
    let server = HttpGit::start(&fleet.root.path().join("srv"));
    let main0 = fleet.tip("main").expect("main");
    let mem = cluster();
    let host = MockServer::start().await;
    let forge = Arc::new(AnyForge::GitHub(
        GitHub::new(&host.uri(), "o/r", None).expect("forge"),
    ));
    let mut d = http_daemon(&fleet, &server, None, forge.clone(), &mem);
    for _ in 0..3 {
        let out = d.pass().await;
        mem.step(std::time::Duration::from_secs(60)).unwrap();
        let status = plan_status(&d);
        assert!(
            status.contains("pushing the hop commit failed")
                && status.contains("asks for credentials but no token is configured"),
            "{status}"
        );
        assert!(!out.busy, "{status}");
    }
    assert_eq!(fleet.tip("main").as_deref(), Some(main0.as_str()));
    assert_eq!(
        applied(&mem),
        ("2026.1".into(), "2026.1".into(), "2026.1".into())
    );
    drop(d);
    let mut d = http_daemon(&fleet, &server, Some(PUSH_TOKEN), forge, &mem);
    d.pass().await;
    assert_ne!(fleet.tip("main").as_deref(), Some(main0.as_str()), "pushed");
}
