//! A Git host keeps the heads of closed pull requests (`refs/pull/N/head`)
//! for ever. A daemon that judged every advertised head in one pass, before
//! applying anything, held every hop back for as long as thousands of
//! judgments took (and posted thousands of statuses at once). A pass judges
//! at most sixteen, the newest first; the rest wait for later passes, and a
//! bounded run goes on until all are judged. A real repository with the
//! refs a forge publishes; statuses in git notes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{FleetRepo, nova};
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::forge::{AnyForge, Forge};
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

const NOVA: &str = "standalone/compute/nova.yaml";

/// The options every test here starts from.
fn options() -> Options {
    Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(10),
        ..Options::default()
    }
}

/// A daemon on `repo`'s `main` over the simulated cluster, and its queue.
fn daemon(repo: &FleetRepo, opts: Options) -> (Daemon<MemoryCluster, Source>, StatusQueue) {
    let mem = MemoryCluster::new(World::new(Params::default()));
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let clock = lockstep::daemon::virtual_start(&mem, &source, &opts).expect("seeded");
    let queue = StatusQueue::new(10_000);
    let d = Daemon::new(
        opts,
        source,
        mem,
        clock,
        queue.clone(),
        Arc::new(Metrics::new()),
    );
    (d, queue)
}

#[tokio::test]
async fn a_pass_judges_a_bounded_number_of_pull_requests_newest_first() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let main = repo.commit("nova at 2026.1");
    // Forty pull requests, each one commit on main moving Nova one hop.
    let mut heads = Vec::new();
    for n in 1..=40u32 {
        repo.git(&["checkout", "-q", "-B", &format!("pr{n}"), &main]);
        repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
        let sha = repo.commit(&format!("pull request {n}"));
        repo.git(&["update-ref", &format!("refs/pull/{n}/head"), &sha]);
        heads.push(sha);
    }
    repo.git(&["checkout", "-q", "main"]);
    let (mut d, queue) = daemon(&repo, options());
    let forge = AnyForge::Notes(Notes::open(repo.path()).expect("notes"));
    let judged = async |forge: &AnyForge| -> Vec<usize> {
        let mut out = Vec::new();
        for (i, sha) in heads.iter().enumerate() {
            if !forge.statuses(sha).await.expect("notes").is_empty() {
                out.push(i + 1);
            }
        }
        out
    };
    let metrics = Metrics::new();
    let out = d.pass().await;
    deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await;
    assert!(out.busy, "pull requests left for later end no bounded run");
    assert_eq!(
        judged(&forge).await,
        (25..=40).collect::<Vec<_>>(),
        "the newest sixteen"
    );
    let mut passes = 1;
    loop {
        let out = d.pass().await;
        deliver_now(&queue, &forge, &metrics, &RetryPolicy::default()).await;
        passes += 1;
        if !out.busy {
            break;
        }
        assert!(passes < 10, "never idle");
    }
    assert_eq!(judged(&forge).await, (1..=40).collect::<Vec<_>>());
    assert_eq!(passes, 3, "sixteen a pass");
}

/// A pull request of two commits, each moving Nova one hop (2026.1 →
/// 2026.2 → 2027.1), is what a merge commit or a squash lands as one
/// change: a skip. Its head is refused, as `check` refuses it, saying so;
/// before, the daemon gave each commit its own verdict and the request
/// showed green, then its merge commit was refused on the branch. Where the
/// branch takes pull requests commit by commit (`source.landsCommitByCommit`),
/// both are accepted.
#[tokio::test]
async fn a_pull_request_is_judged_as_the_one_change_it_lands_as() {
    for by_commit in [false, true] {
        let repo = FleetRepo::new();
        repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
        let main = repo.commit("nova at 2026.1");
        repo.git(&["checkout", "-q", "-B", "pr", &main]);
        repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
        let first = repo.commit("nova to 2026.2");
        repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
        let head = repo.commit("nova to 2027.1");
        repo.git(&["update-ref", "refs/pull/7/head", &head]);
        repo.git(&["checkout", "-q", "main"]);
        let (mut d, queue) = daemon(
            &repo,
            Options {
                lands_commit_by_commit: by_commit,
                ..options()
            },
        );
        let forge = AnyForge::Notes(Notes::open(repo.path()).expect("notes"));
        d.pass().await;
        deliver_now(&queue, &forge, &Metrics::new(), &RetryPolicy::default()).await;
        let said = async |sha: &str| -> String {
            forge
                .statuses(sha)
                .await
                .expect("notes")
                .iter()
                .map(|s| format!("{:?} {}", s.state, s.description))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let (first, head) = (said(&first).await, said(&head).await);
        assert!(first.contains("success"), "{by_commit}: {first}");
        if by_commit {
            assert!(head.contains("success"), "{head}");
        } else {
            assert!(
                head.contains("failure") && head.contains("2026.1→2027.1"),
                "{head}"
            );
        }
    }
}

/// A commit whose tree holds a mode Git never writes (120755) reaches the
/// daemon's branch: it is refused, and the pass goes on. Before, the
/// daemon's check of whether the commit touched a plan went through
/// libgit2's diff, whose mode git2 does not know: a panic in the pass, the
/// judgment thrown away and the whole history judged again, every pass,
/// for anyone who could push.
#[tokio::test]
async fn a_tree_git_never_writes_is_refused_without_taking_the_pass_down() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    let (mut d, queue) = daemon(&repo, options());
    d.pass().await;
    // The new commit extends the judged history (the path that asks
    // whether it touched a plan).
    let odd = repo.commit_odd_mode(&nova("nova", "2027.1", "2027.1"));
    d.pass().await;
    let forge = AnyForge::Notes(Notes::open(repo.path()).expect("notes"));
    deliver_now(&queue, &forge, &Metrics::new(), &RetryPolicy::default()).await;
    let said: Vec<String> = forge
        .statuses(&odd)
        .await
        .expect("notes")
        .iter()
        .map(|s| format!("{:?} {}", s.state, s.description))
        .collect();
    assert!(said.iter().any(|s| s.contains("failure")), "{said:?}");
}

/// The branch's tip is refused (a skip pushed straight to main): pull
/// requests on top of it land on the last accepted state, Nova at 2026.1.
/// Judged from the tip, a request re-tagging the refused 2027.1 read as a
/// patch (green, and refused once merged), and the fix, 2026.2, as a
/// downgrade (red: the fix could not pass a required check).
#[tokio::test]
async fn a_pull_request_on_a_refused_tip_is_judged_from_the_last_accepted_state() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    let skip = repo.commit("nova to 2027.1, a skip");
    repo.write(
        "standalone/compute/notes.yaml",
        "# a second refused commit follows\n",
    );
    repo.write(NOVA, nova("nova", "2027.2", "2027.2"));
    let tip = repo.commit("nova to 2027.2, a skip again");
    let request = |n: u32, on: &str, release: &str, tag: &str| -> String {
        repo.git(&["checkout", "-q", "-B", &format!("pr{n}"), on]);
        repo.write(NOVA, nova("nova", release, tag));
        let sha = repo.commit(&format!("nova {tag}"));
        repo.git(&["update-ref", &format!("refs/pull/{n}/head"), &sha]);
        sha
    };
    let patch = request(1, &tip, "2027.2", "2027.2-p1");
    let fix = request(2, &tip, "2026.2", "2026.2");
    // Forked before the tip, at the first refused commit.
    let early_fix = request(3, &skip, "2026.2", "2026.2");
    repo.git(&["checkout", "-q", "main"]);
    let (mut d, queue) = daemon(&repo, options());
    let forge = AnyForge::Notes(Notes::open(repo.path()).expect("notes"));
    d.pass().await;
    deliver_now(&queue, &forge, &Metrics::new(), &RetryPolicy::default()).await;
    let said = async |sha: &str| -> Vec<(String, String)> {
        forge
            .statuses(sha)
            .await
            .expect("notes")
            .into_iter()
            .map(|s| (s.context, format!("{} {}", s.state, s.description)))
            .collect()
    };
    let patch = said(&patch).await;
    assert!(
        patch.len() == 1
            && patch[0].0 == "lockstep/t/review"
            && patch[0].1.starts_with("failure")
            && patch[0].1.contains("2026.1→2027.2"),
        "{patch:?}"
    );
    for fix in [&fix, &early_fix] {
        let fix = said(fix).await;
        assert!(
            fix.len() == 1 && fix[0].1.starts_with("success") && fix[0].1.contains("2026.1→2026.2"),
            "{fix:?}"
        );
    }
    // The refused commits' own statuses are the branch's: no review is
    // posted on them.
    for sha in [&skip, &tip] {
        let on = said(sha).await;
        assert!(on.iter().all(|(c, _)| c == "lockstep/t"), "{on:?}");
    }
}
