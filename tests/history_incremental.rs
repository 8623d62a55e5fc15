//! The daemon extends its judged history commit by commit
//! (`history::check_after`) instead of judging everything again on every
//! push. Judging in pieces must give exactly what one whole judgment gives,
//! wherever the history is cut — refused commits included, since they must
//! not move the baseline the next piece starts from.

use git2::Oid;
use lockstep::gate::Verdict;
use lockstep::git::GitRepo;
use lockstep::history::{self, CheckOptions, EMPTY_TREE};

#[test]
fn judging_in_pieces_equals_judging_at_once() {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let repo = GitRepo::open(dir.path()).unwrap();
    let opts = |head: &str| CheckOptions {
        base: Some(EMPTY_TREE.into()),
        head: head.into(),
        ..CheckOptions::default()
    };
    let whole = history::check(&repo, &opts("main")).unwrap();
    let all = serde_json::to_value(&whole).unwrap();
    assert!(whole.commits.len() >= 7);
    assert!(whole.commits.iter().any(|c| c.verdict == Verdict::Refused));
    for cut in 1..whole.commits.len() {
        let first = history::check(&repo, &opts(&whole.commits[cut - 1].sha)).unwrap();
        let baseline = first
            .commits
            .iter()
            .rev()
            .find(|c| c.verdict == Verdict::Accepted)
            .map(|c| repo.commit(Oid::from_str(&c.sha).unwrap()).unwrap().tree);
        let after = Oid::from_str(&whole.commits[cut - 1].sha).unwrap();
        // With the first piece's memory, and without it (a look back
        // through the history before the cut): the same verdicts.
        for memory in [&*first.memory, &history::Memory::default()] {
            let rest = history::check_after(&repo, &opts("main"), after, baseline, memory).unwrap();
            let mut joined = serde_json::to_value(&first.commits).unwrap();
            joined.as_array_mut().unwrap().extend(
                serde_json::to_value(&rest.commits)
                    .unwrap()
                    .as_array()
                    .unwrap()
                    .clone(),
            );
            assert_eq!(joined, all["commits"], "cut after commit {cut}");
        }
    }
}

/// The simulated cluster's seed parses the first tree the daemon judges;
/// the first judgment takes those files instead of parsing the tree again
/// (`daemon::Options::parsed`). What is judged must not change, and the
/// judgment must really read the seed's files, not parse its own.
#[test]
fn a_judgment_reads_the_files_parsed_before_it() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let repo = GitRepo::open(dir.path()).unwrap();
    let opts = |sources: Option<Arc<history::Sources>>, max: usize| CheckOptions {
        base: Some(EMPTY_TREE.into()),
        head: "main".into(),
        max_file_bytes: max,
        sources,
        ..CheckOptions::default()
    };
    let plain = history::check(&repo, &opts(None, CheckOptions::default().max_file_bytes)).unwrap();
    let first = repo
        .commit(Oid::from_str(&plain.commits[0].sha).unwrap())
        .unwrap()
        .tree;

    // Seeded under the judgment's own options: the same report.
    let max = CheckOptions::default().max_file_bytes;
    let sources = Arc::new(history::Sources::default());
    let (desired, _) =
        history::tree_desired(&repo, Some(first), &opts(Some(sources.clone()), max)).unwrap();
    assert!(!desired.is_empty());
    let seeded_files = sources.len();
    assert!(seeded_files > 0, "the seed kept what it parsed");
    let reused = history::check(&repo, &opts(Some(sources.clone()), max)).unwrap();
    assert_eq!(
        serde_json::to_value(&reused.commits).unwrap(),
        serde_json::to_value(&plain.commits).unwrap()
    );
    assert!(sources.len() >= seeded_files);

    // Seeded under other options (every file over a 10-byte limit): the
    // judgment shows that parse, so it read the seed's files. This is why
    // the daemon seeds with exactly the options it judges with.
    let small = Arc::new(history::Sources::default());
    history::tree_desired(&repo, Some(first), &opts(Some(small.clone()), 10)).unwrap();
    let odd = history::check(&repo, &opts(Some(small), max)).unwrap();
    assert_eq!(odd.commits[0].verdict, Verdict::Refused);
    assert_eq!(plain.commits[0].verdict, Verdict::Accepted);
}
