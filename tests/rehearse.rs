//! `lockstep rehearse` on real repositories: the predicted timeline of the
//! accepted hops, with and without injected faults.

mod common;

use std::time::Duration;

use common::{FleetRepo, lockstep};
use lockstep::rehearse::{Range, Rehearsal, parse_fault, rehearse};
use lockstep::sim::Params;

fn run(repo: &FleetRepo, base: &str, faults: &[&str]) -> Rehearsal {
    let faults = faults.iter().map(|f| parse_fault(f).unwrap()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(rehearse(&Range {
        repo: repo.path().to_owned(),
        base: Some(base.into()),
        head: "HEAD".into(),
        paths: Vec::new(),
        faults,
        params: Params::default(),
    }))
    .unwrap()
}

#[test]
fn hops_run_one_at_a_time_per_object_and_in_parallel_across_objects() {
    let (repo, base) = common::hop_story();
    let r = run(&repo, &base, &[]);
    assert!(!r.failed, "{:#?}", r.lines);
    assert_eq!(r.hops, 3);
    let p = Params::default();
    // Nova: two hops back to back, each expand+migrate+5 rolls+contract+sync+4 second rolls.
    let nova_hop = p.expand + p.migrate + 5 * p.roll + p.contract + p.sync + 4 * p.roll;
    assert_eq!(r.total, 2 * nova_hop, "{:#?}", r.lines);
    let text = r.lines.join("\n");
    assert!(text.contains("Nova compute/nova 2026.1 → 2026.2"), "{text}");
    assert!(
        text.contains("Nova compute/nova 2026.2 → 2027.1 (commit"),
        "{text}"
    );
    // The second hop starts when the first completes, not before.
    assert!(text.contains("applied 34:00 → 1:08:00"), "{text}");
    assert!(
        text.contains("prod-placement") && text.contains("prod-horizon"),
        "every child is followed"
    );
}

#[test]
fn a_failed_expand_of_a_projected_service_is_repaired_forward() {
    let (repo, base) = common::hop_story();
    let r = run(&repo, &base, &["prod-nova:expand:fail=5"]);
    assert!(!r.failed, "{:#?}", r.lines);
    assert_eq!(r.repairs, 1);
    let text = r.lines.join("\n");
    assert!(
        text.contains("17:15 ⚠ ExpandFailed"),
        "five tries of 207 s: {text}"
    );
    assert!(
        text.contains("17:15 repair: deleted failed Job prod-nova-db-expand (attempt 1)"),
        "{text}"
    );
    assert!(
        text.contains("20:15 ExpandComplete"),
        "re-run at once, 3 min: {text}"
    );
}

#[test]
fn a_failed_standalone_service_is_reported_not_repaired() {
    let (repo, base) = common::hop_story();
    let r = run(&repo, &base, &["nova:contract:fail=9"]);
    assert!(r.failed);
    assert_eq!(r.repairs, 0);
    let text = r.lines.join("\n");
    assert!(
        text.contains("ContractFailed") && text.contains("lockstep retry nova/compute/nova"),
        "{text}"
    );
}

#[test]
fn the_cli_prints_the_timeline_and_exits_by_outcome() {
    let (repo, base) = common::hop_story();
    let path = repo.path().to_string_lossy().into_owned();
    let out = lockstep(&["rehearse", "--repo", &path, "--base", &base]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rehearsal: 3 hops") && text.contains("predicted total: 1h08m"),
        "{text}"
    );
    let out = lockstep(&[
        "rehearse",
        "--repo",
        &path,
        "--base",
        &base,
        "--fault",
        "nova:migrate:fail=5",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let out = lockstep(&["rehearse", "--repo", &path, "--fault", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fault \"nonsense\""));
    // A fault naming no object would inject nothing: the clean timeline
    // would read as one that weathered it.
    let out = lockstep(&[
        "rehearse",
        "--repo",
        &path,
        "--base",
        &base,
        "--fault",
        "nvoa:migrate:fail=5",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--fault names \"nvoa\", but no object of the rehearsal is named so")
            && err.contains("nova"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no timeline is printed");
    let _ = Duration::ZERO;
}
