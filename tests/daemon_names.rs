//! The daemon keeps a names index in memory (`names::NameIndex::in_memory`,
//! `docs/names-index.md`): a commit that adds an object reads again only
//! the directories that could define the new name. These tests push
//! commits between passes, as a person would, and check that a name
//! defined twice is refused however warm the index is, in a directory the
//! index skipped before and in one changed since, and that nothing is
//! written into the Git directory.
//!
//! The cluster is the in-process simulated operator (the real C5C3
//! operators cannot run here); the repository is real Git.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::tree::{commit, notes};
use git2::Repository;
use lockstep::cluster::memory::MemoryCluster;
use lockstep::daemon::{Daemon, Options, deliver_now};
use lockstep::forge::AnyForge;
use lockstep::forge::delivery::{RetryPolicy, StatusQueue};
use lockstep::forge::notes::Notes;
use lockstep::kind::{Key, Kind};
use lockstep::metrics::Metrics;
use lockstep::sim::{Params, World};
use lockstep::source::{Origin, Source};

/// Twelve directories of five Novas each (`nova-D-F` in `fleet/dD/`), so
/// every directory has an entry in the index.
fn fleet() -> Vec<(String, String)> {
    let mut files = vec![(
        "platform/namespaces.yaml".to_owned(),
        common::example("platform/namespaces.yaml"),
    )];
    for d in 0..12 {
        for f in 0..5 {
            files.push((
                format!("fleet/d{d}/nova-{d}-{f}.yaml"),
                common::nova(&format!("nova-{d}-{f}"), "2026.1", "2026.1"),
            ));
        }
    }
    files
}

fn nova_key(name: &str) -> Key {
    Key::new(Kind::Nova, "compute", name)
}

/// Why `check` (no index) refuses `sha`, judged alone.
fn refusal(dir: &Path, sha: &str) -> String {
    let git = lockstep::git::GitRepo::open(dir).unwrap();
    let r = lockstep::history::check(
        &git,
        &lockstep::history::CheckOptions {
            head: sha.to_owned(),
            ..Default::default()
        },
    )
    .unwrap();
    r.commits
        .iter()
        .flat_map(|c| &c.objects)
        .map(|o| o.message.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn settle(
    daemon: &mut Daemon<MemoryCluster, Source>,
    mem: &MemoryCluster,
    q: &StatusQueue,
    dir: &Path,
) {
    let forge = AnyForge::Notes(Notes::open(dir).unwrap());
    let metrics = Metrics::new();
    for _ in 0..200 {
        let out = daemon.pass().await;
        assert!(deliver_now(q, &forge, &metrics, &RetryPolicy::default()).await);
        let busy = mem.step(Duration::from_secs(3600)).unwrap();
        if !out.busy && !busy {
            return;
        }
    }
    panic!("never idle");
}

#[tokio::test]
async fn a_name_defined_twice_is_refused_however_warm_the_daemons_index() {
    let dir = tempfile::tempdir().unwrap();
    Repository::init(dir.path()).unwrap();
    let mut files = fleet();
    commit(dir.path(), &files, "the fleet");
    let mem = MemoryCluster::new(World::new(Params::default()));
    let source = Source::open(Origin::Local(dir.path().to_owned()), "main").unwrap();
    let opts = Options {
        cluster_name: "prod".into(),
        poll: Duration::from_millis(10),
        ..Options::default()
    };
    let clock = lockstep::daemon::virtual_start(&mem, &source, &opts).unwrap();
    let queue = StatusQueue::new(10_000);
    let mut daemon = Daemon::new(
        opts,
        source,
        mem.clone(),
        clock,
        queue.clone(),
        Arc::new(Metrics::new()),
    );
    settle(&mut daemon, &mem, &queue, dir.path()).await;
    assert!(daemon.unit_reports().contains_key(&nova_key("nova-4-0")));

    // A new name: every other directory is read, and gets its entry.
    files.push((
        "fleet/d0/nova-new-a.yaml".into(),
        common::nova("nova-new-a", "2026.1", "2026.1"),
    ));
    let add = commit(dir.path(), &files, "add nova-new-a");
    settle(&mut daemon, &mem, &queue, dir.path()).await;
    assert!(
        notes(dir.path(), &add).contains("success"),
        "{}",
        notes(dir.path(), &add)
    );
    assert!(daemon.unit_reports().contains_key(&nova_key("nova-new-a")));
    // Cold: every other file was read (60), and given to the index.
    let cold = daemon.names_index().blobs_read();
    assert!(cold >= 60, "the index read {cold} blobs: not in use");

    // Another new name, in another directory: the entries are used.
    files.push((
        "fleet/d1/nova-new-b.yaml".into(),
        common::nova("nova-new-b", "2026.1", "2026.1"),
    ));
    let add_b = commit(dir.path(), &files, "add nova-new-b");
    settle(&mut daemon, &mem, &queue, dir.path()).await;
    assert!(notes(dir.path(), &add_b).contains("success"));
    // Warm: only the directories changed since (d0, d1) are read again;
    // each commit is judged twice (from Git, then with the live state).
    let warm = daemon.names_index().blobs_read() - cold;
    assert!(
        warm * 2 < cold,
        "a warm index read {warm} blobs, cold {cold}"
    );

    // A name d4 defines, added again in d2: d4's entry holds the name's
    // windows, so d4 is read and the duplicate found.
    let mut dup = files.clone();
    dup.push((
        "fleet/d2/copy.yaml".into(),
        common::nova("nova-4-0", "2026.1", "2026.1"),
    ));
    let refused = commit(dir.path(), &dup, "nova-4-0 again");
    settle(&mut daemon, &mem, &queue, dir.path()).await;
    let said = notes(dir.path(), &refused);
    assert!(
        said.contains("failure") && said.contains("fleet/d2/copy.yaml"),
        "the duplicate went through: {said}"
    );
    assert!(refusal(dir.path(), &refused).contains("nova-4-0 is defined more than once"));

    // A name that exists only since a directory changed (its entry was
    // built before): the new directory's id has no entry, so it is read.
    files.push((
        "fleet/d5/nova-late.yaml".into(),
        common::nova("nova-late", "2026.1", "2026.1"),
    ));
    commit(dir.path(), &files, "add nova-late in d5");
    settle(&mut daemon, &mem, &queue, dir.path()).await;
    let mut dup = files.clone();
    dup.push((
        "fleet/d3/late-copy.yaml".into(),
        common::nova("nova-late", "2026.1", "2026.1"),
    ));
    let refused = commit(dir.path(), &dup, "nova-late again");
    settle(&mut daemon, &mem, &queue, dir.path()).await;
    let said = notes(dir.path(), &refused);
    assert!(
        said.contains("failure") && said.contains("fleet/d3/late-copy.yaml"),
        "the duplicate went through: {said}"
    );
    assert!(refusal(dir.path(), &refused).contains("nova-late is defined more than once"));

    // The index lives in memory: nothing under the Git directory.
    let kept = dir.path().join(".git").join("lockstep");
    assert!(!kept.exists(), "{} was written", kept.display());
}
