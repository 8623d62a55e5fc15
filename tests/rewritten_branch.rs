//! A branch whose history is rewritten after lockstep judged it (a rebase,
//! a force-push, a reset). Judged again from Git alone, a recorded abort
//! would read as a downgrade and the hop it ended be applied again, and the
//! new commits would never be judged against the live state: lockstep
//! judges only forward history, goes on with what it judged, and says how
//! to make the history descend again. The real engine over the simulated
//! operator, on a real repository.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{FleetRepo, nova};
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options, PassOutcome};
use lockstep::forge::delivery::StatusQueue;
use lockstep::kind::{Key, Kind};
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

const NOVA: &str = "standalone/compute/nova.yaml";

fn key() -> Key {
    Key::new(Kind::Nova, "compute", "nova")
}

fn daemon(repo: &FleetRepo, mem: &MemoryCluster) -> Daemon<MemoryCluster, Source> {
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(10),
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(mem, &source, &opts).expect("seeded");
    Daemon::new(
        opts,
        source,
        mem.clone(),
        clock,
        StatusQueue::new(10_000),
        Arc::new(Metrics::new()),
    )
}

fn release(mem: &MemoryCluster) -> String {
    mem.world()
        .expect("world")
        .objects
        .get(&key())
        .and_then(|o| o.release.clone())
        .unwrap_or_else(|| "absent".into())
}

/// Passes and simulated minutes until neither has work left (or `limit`
/// passes); the last pass's outcome.
async fn until_idle(
    d: &mut Daemon<MemoryCluster, Source>,
    mem: &MemoryCluster,
    limit: usize,
) -> PassOutcome {
    let mut out = PassOutcome::default();
    for _ in 0..limit {
        out = d.pass().await;
        let busy = mem.step(Duration::from_secs(60)).expect("step");
        if !out.busy && !busy && out.source_error.is_none() {
            break;
        }
    }
    out
}

#[tokio::test]
async fn a_rewritten_history_is_not_judged_again_from_git_alone() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let first = repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    let judged = repo.commit("nova to 2026.2");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let mut d = daemon(&repo, &mem);
    let out = until_idle(&mut d, &mem, 2_000).await;
    assert_eq!(out.source_error, None);
    assert_eq!(release(&mem), "2026.2");

    // Rebased: the same hop under another id, and a next hop on top.
    repo.git(&["reset", "-q", "--hard", &first]);
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2 (reworded)");
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    let rewritten = repo.commit("nova to 2027.1");
    let out = until_idle(&mut d, &mem, 20).await;
    let e = out.source_error.expect("the rewrite is an error");
    assert!(
        e.contains("was rewritten") && e.contains(&judged) && e.contains(&rewritten),
        "{e}"
    );
    assert!(e.contains("git commit-tree"), "says what to do: {e}");
    assert_eq!(release(&mem), "2026.2", "nothing of the rewrite is applied");

    // A restarted daemon reads the same watermark from the record, and
    // still walks the units as judged up to it (a hop in flight is
    // followed and repaired while the branch waits for a person).
    drop(d);
    let mut d = daemon(&repo, &mem);
    let out = until_idle(&mut d, &mem, 20).await;
    assert!(
        out.source_error
            .as_deref()
            .is_some_and(|e| e.contains("was rewritten")),
        "{out:?}"
    );
    assert_eq!(release(&mem), "2026.2");
    let unit = d
        .unit_reports()
        .get(&key())
        .expect("the units are walked after a restart");
    assert_eq!(
        unit.chain.steps.last().and_then(|s| s.release.as_deref()),
        Some("2026.2")
    );

    // A bounded run (`run --until-idle`) stops on it, telling a person,
    // rather than passing for ever.
    drop(d);
    let source = Source::open(Origin::Local(repo.path().to_owned()), "main").expect("source");
    let opts = Options {
        cluster_name: "t".into(),
        poll: Duration::from_millis(10),
        until_idle: true,
        ..Options::default()
    };
    let mut bounded = Daemon::new(
        opts,
        source,
        mem.clone(),
        Arc::new(lockstep::daemon::VirtualClock::new(mem.clone())),
        StatusQueue::new(10_000),
        Arc::new(Metrics::new()),
    );
    let (_triggers, rx) = tokio::sync::mpsc::channel(1);
    let (_lease, leader) = tokio::sync::watch::channel(true);
    let last = tokio::time::timeout(
        Duration::from_secs(60),
        bounded.run(rx, leader, std::future::pending()),
    )
    .await
    .expect("the bounded run stops");
    assert!(last.waits_on_person, "{last:?}");
    let people = bounded.needs_person();
    assert!(
        people
            .iter()
            .any(|p| p.subject == "the branch main" && p.reason.contains("was rewritten")),
        "{people:?}"
    );
    drop(bounded);
    let mut d = daemon(&repo, &mem);

    // Reset back behind what was judged: said as such.
    repo.git(&["reset", "-q", "--hard", &first]);
    let out = until_idle(&mut d, &mem, 20).await;
    let e = out.source_error.expect("a reset back is an error");
    assert!(e.contains("is behind") && e.contains(&judged), "{e}");
    assert_eq!(release(&mem), "2026.2", "nothing older is applied");

    // The way on: the new tree as one change on top of what was judged.
    let tree = format!("{rewritten}^{{tree}}");
    let merged = repo
        .git(&[
            "commit-tree",
            &tree,
            "-p",
            &judged,
            "-p",
            &rewritten,
            "-m",
            "the rewrite, as one change",
        ])
        .trim()
        .to_owned();
    repo.git(&["reset", "-q", "--hard", &merged]);
    let out = until_idle(&mut d, &mem, 2_000).await;
    assert_eq!(out.source_error, None);
    assert_eq!(release(&mem), "2027.1");
}

/// Two replicas: this one judged up to P, the other led meanwhile and
/// judged on to W (the record's watermark). The branch is then rewritten
/// from P. This one, leading again, must not extend its own old judgment
/// from P over the rewrite: the watermark decides what is forward.
#[tokio::test]
async fn a_replica_leading_again_does_not_extend_its_old_judgment_over_a_rewrite() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let first = repo.commit("nova at 2026.1");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let mut a = daemon(&repo, &mem);
    assert_eq!(until_idle(&mut a, &mem, 2_000).await.source_error, None);

    // The other replica leads and takes Nova to 2026.2.
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    let judged = repo.commit("nova to 2026.2");
    let mut b = daemon(&repo, &mem);
    assert_eq!(until_idle(&mut b, &mem, 2_000).await.source_error, None);
    assert_eq!(release(&mem), "2026.2");
    drop(b);

    // Rewritten from P (this replica's last judged head), and a hop on.
    repo.git(&["reset", "-q", "--hard", &first]);
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2 (reworded)");
    repo.write(NOVA, nova("nova", "2027.1", "2027.1"));
    repo.commit("nova to 2027.1");
    let out = until_idle(&mut a, &mem, 20).await;
    let e = out.source_error.expect("the rewrite is an error");
    assert!(e.contains("was rewritten") && e.contains(&judged), "{e}");
    assert_eq!(release(&mem), "2026.2", "the rewrite was applied");
}
