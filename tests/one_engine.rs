//! One engine: `run` (sim mode, `--until-idle`), `rehearse` and `rehearse
//! --plan` are the same daemon engine in virtual time, so on the same range
//! they agree on when every hop completes, to the second, with and without
//! an injected fault. Each is run as a user runs it (the real binary) and
//! its own output is read: `run`'s JSON log, the rehearsals' text.

mod common;

use std::collections::BTreeMap;

use common::{FleetRepo, lockstep};

/// (unit, first 10 characters of the commit) → seconds of virtual time.
type Completions = BTreeMap<(String, String), u64>;

/// `m:ss`, `h:mm:ss` or `+h:mm:ss` in seconds.
fn seconds(clock: &str) -> u64 {
    clock
        .trim_start_matches('+')
        .split(':')
        .fold(0, |acc, p| acc * 60 + p.parse::<u64>().expect("a clock"))
}

fn faults(fault: Option<&str>) -> Vec<&str> {
    fault.map(|f| vec!["--fault", f]).unwrap_or_default()
}

/// `lockstep run --until-idle`: every "hop complete" of its JSON log.
fn run(repo: &FleetRepo, fault: Option<&str>) -> Completions {
    let path = repo.path().to_string_lossy().into_owned();
    let mut args = vec![
        "run",
        "--repo",
        &path,
        "--until-idle",
        "--log-format",
        "json",
        "--log-level",
        "info",
    ];
    args.extend(faults(fault));
    let out = lockstep(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let mut done = Completions::new();
    for line in stderr.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let f = &v["fields"];
        if f["message"] != "hop complete" {
            continue;
        }
        let unit = f["unit"].as_str().expect("unit").to_owned();
        let commit: String = f["commit"]
            .as_str()
            .expect("commit")
            .chars()
            .take(10)
            .collect();
        done.insert((unit, commit), f["at_secs"].as_u64().expect("at_secs"));
    }
    done
}

/// `lockstep rehearse --base BASE`: the end of every hop line.
fn rehearse(repo: &FleetRepo, base: &str, fault: Option<&str>) -> Completions {
    let path = repo.path().to_string_lossy().into_owned();
    let mut args = vec!["rehearse", "--repo", &path, "--base", base];
    args.extend(faults(fault));
    let out = lockstep(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let mut done = Completions::new();
    // `Nova compute/nova 2026.1 → 2026.2 (commit 7aeb6e7738): applied 0:00 → 34:00 (34m00s)`
    for line in text.lines().filter(|l| l.contains("): applied ")) {
        let mut words = line.split(' ');
        let unit = format!(
            "{} {}",
            words.next().expect("kind"),
            words.next().expect("name")
        );
        let commit = line
            .split("(commit ")
            .nth(1)
            .and_then(|r| r.get(..10))
            .expect("commit");
        let end = line
            .split(" → ")
            .last()
            .and_then(|r| r.split(' ').next())
            .expect("end");
        done.insert((unit, commit.to_owned()), seconds(end));
    }
    done
}

/// `lockstep rehearse --plan`: every "hop complete" line.
fn rehearse_plan(repo: &FleetRepo, fault: Option<&str>) -> Completions {
    let path = repo.path().to_string_lossy().into_owned();
    let mut args = vec![
        "rehearse",
        "--plan",
        "--repo",
        &path,
        "--start",
        "2026-12-01T12:00:00Z",
    ];
    args.extend(faults(fault));
    let out = lockstep(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // No plan in this fleet: said first, so the timeline is not read as a plan's.
    assert!(
        text.lines().nth(1).is_some_and(
            |l| l.contains("no UpgradePlan in main: rehearsing the branch's own commits")
        ),
        "{text}"
    );
    let mut done = Completions::new();
    // `  +0:34:00 Nova compute/nova 2026.1 → 2026.2 (commit 7aeb6e7738): hop complete`
    for line in text.lines().filter(|l| l.ends_with("): hop complete")) {
        let mut words = line.split_whitespace();
        let at = seconds(words.next().expect("time"));
        let unit = format!(
            "{} {}",
            words.next().expect("kind"),
            words.next().expect("name")
        );
        let commit = line
            .split("(commit ")
            .nth(1)
            .and_then(|r| r.get(..10))
            .expect("commit");
        done.insert((unit, commit.to_owned()), at);
    }
    done
}

fn agree(fault: Option<&str>) -> Completions {
    let (repo, base) = common::hop_story();
    let run = run(&repo, fault);
    let rehearsed = rehearse(&repo, &base, fault);
    let planned = rehearse_plan(&repo, fault);
    eprintln!(
        "fault {fault:?}:\n  run       {run:?}\n  rehearse  {rehearsed:?}\n  --plan    {planned:?}"
    );
    assert_eq!(run.len(), 3, "three hops: {run:?}");
    assert_eq!(run, rehearsed, "run and rehearse");
    assert_eq!(run, planned, "run and rehearse --plan");
    run
}

#[test]
fn run_rehearse_and_rehearse_plan_agree_on_every_hop_to_the_second() {
    let clean = agree(None);
    let faulty = agree(Some("prod-nova:expand:fail=5"));
    let plane = |c: &Completions| {
        c.iter()
            .find(|((u, _), _)| u == "ControlPlane openstack/prod")
            .map(|(_, t)| *t)
            .expect("the plane's hop")
    };
    // The fault is seen alike by all three, and costs the plane's hop time:
    // five failed tries of the expand Job, then a repair and a re-run.
    assert!(plane(&faulty) > plane(&clean), "{clean:?} vs {faulty:?}");
    let nova = |c: &Completions| {
        c.iter()
            .filter(|((u, _), _)| u == "Nova compute/nova")
            .map(|(_, t)| *t)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(
        nova(&clean),
        nova(&faulty),
        "the standalone Nova is not faulted"
    );
}
