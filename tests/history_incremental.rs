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
