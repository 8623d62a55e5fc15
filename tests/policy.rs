//! UpgradePolicy through `lockstep check` on real repositories: a blocked
//! edge refuses the hop with the policy's reason and URL (a plane's child
//! included), a commit can neither lift a block and cross it nor add one
//! and slip past it, an acknowledgement comes from the commit's trailer or
//! the policy, and a policy that cannot be used (malformed, or outside
//! `.lockstep/policies/`) is refused with its file and line. The promise
//! over random histories is in `gate_property.rs`.

mod common;

use common::{FleetRepo, check_json, find, last_objects};

const DIR: &str = ".lockstep/policies";

fn blocked(kinds: &str, from: &str, to: &str) -> String {
    format!(
        "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: cells
spec:
  blocked:
    - kinds: [{kinds}]
      from: \"{from}\"
      to: \"{to}\"
      reason: \"{to} breaks our cells layout\"
      url: https://tracker.example/CELLS-12
"
    )
}

const ACK: &str = "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: api-removal
spec:
  acknowledgements:
    - id: nova-os-hosts
      kinds: [Nova]
      from: \"*\"
      to: \"2027.1\"
      reason: 2027.1 removes the os-hosts API
      url: https://docs.example/os-hosts
";

fn nova_at<'a>(repo: &'a FleetRepo, release: &str) -> &'a FleetRepo {
    repo.write(
        "standalone/compute/nova.yaml",
        common::nova("nova", release, release),
    )
}

fn verdict(json: &serde_json::Value) -> (String, String, String) {
    let objects = last_objects(json);
    let o = objects
        .iter()
        .find(|o| o["verdict"] == "refused")
        .or_else(|| objects.first())
        .cloned()
        .unwrap_or_default();
    (
        o["verdict"].as_str().unwrap_or_default().to_owned(),
        o["reason"].as_str().unwrap_or_default().to_owned(),
        o["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_blocked_edge_refuses_the_hop_with_its_reason_and_url() {
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1").write(
        &format!("{DIR}/cells.yaml"),
        blocked("Nova", "2026.1", "2026.2"),
    );
    repo.commit("Nova at 2026.1, and the cells policy");
    nova_at(&repo, "2026.2");
    repo.commit("Nova to 2026.2");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1, "{json:#}");
    let (v, reason, message) = verdict(&json);
    assert_eq!((v.as_str(), reason.as_str()), ("refused", "UpgradeBlocked"));
    assert!(
        message.contains("2026.2 breaks our cells layout (https://tracker.example/CELLS-12)"),
        "{message}"
    );
    assert!(
        message.contains(".lockstep/policies/cells.yaml:1"),
        "{message}"
    );
    let objects = last_objects(&json);
    let o = find(&objects, "Nova", "nova");
    assert_eq!(o["line"], 7, "the release line: {o:#}");
}

#[test]
fn a_planes_child_is_blocked_too() {
    let repo = FleetRepo::new();
    repo.write(
        "clusters/prod/controlplane.yaml",
        common::prod("2026.1", "2026.1"),
    )
    .write(
        &format!("{DIR}/cells.yaml"),
        blocked("Nova", "2026.1", "2026.2"),
    );
    repo.commit("prod at 2026.1");
    repo.write(
        "clusters/prod/controlplane.yaml",
        common::prod("2026.2", "2026.2"),
    );
    repo.commit("prod to 2026.2");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1, "{json:#}");
    let child = find(&last_objects(&json), "Nova", "prod-nova").clone();
    assert_eq!(child["reason"], "UpgradeBlocked", "{child:#}");
    // The same policy for Glance leaves prod's hop alone... except Glance.
    let repo = FleetRepo::new();
    repo.write(
        "clusters/prod/controlplane.yaml",
        common::prod("2026.1", "2026.1"),
    )
    .write(
        &format!("{DIR}/cells.yaml"),
        blocked("Barbican", "2026.*", "*"),
    );
    repo.commit("prod at 2026.1");
    repo.write(
        "clusters/prod/controlplane.yaml",
        common::prod("2026.2", "2026.2"),
    );
    repo.commit("prod to 2026.2");
    let (_, json) = check_json(&repo, &[]);
    let objects = last_objects(&json);
    let refused: Vec<&str> = objects
        .iter()
        .filter(|o| o["verdict"] == "refused")
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(refused, vec!["prod-barbican"], "{objects:#?}");
}

#[test]
fn a_block_cannot_be_lifted_and_crossed_in_one_commit_nor_added_and_crossed() {
    // Lifted and crossed at once: the baseline's policy still holds.
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1").write(
        &format!("{DIR}/cells.yaml"),
        blocked("Nova", "2026.1", "2026.2"),
    );
    repo.commit("policy");
    nova_at(&repo, "2026.2").remove(&format!("{DIR}/cells.yaml"));
    repo.commit("lift the block and hop");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1);
    assert_eq!(verdict(&json).1, "UpgradeBlocked");
    // Lifted first, then crossed: accepted.
    repo.git(&["reset", "-q", "--hard", "HEAD~1"]);
    repo.remove(&format!("{DIR}/cells.yaml"));
    repo.commit("lift the block: CELLS-12 fixed");
    nova_at(&repo, "2026.2");
    repo.commit("hop");
    let (code, json) = check_json(&repo, &["--base", "HEAD~2"]);
    assert_eq!(code, 0, "{json:#}");
    // Added and crossed at once: the commit's own policy holds too.
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1");
    repo.commit("Nova");
    nova_at(&repo, "2026.2").write(
        &format!("{DIR}/cells.yaml"),
        blocked("Nova", "2026.1", "2026.2"),
    );
    repo.commit("block and hop");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1);
    assert_eq!(verdict(&json).1, "UpgradeBlocked");
}

#[test]
fn an_acknowledgement_comes_from_a_trailer_or_the_policy() {
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.2").write(&format!("{DIR}/acks.yaml"), ACK);
    repo.commit("Nova at 2026.2");
    nova_at(&repo, "2027.1");
    repo.commit("Nova to 2027.1");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1);
    let (_, reason, message) = verdict(&json);
    assert_eq!(reason, "AckRequired");
    assert!(message.contains("Lockstep-Ack: nova-os-hosts"), "{message}");
    assert!(
        message.contains("https://docs.example/os-hosts"),
        "{message}"
    );
    // With the trailer.
    repo.git(&[
        "commit",
        "-q",
        "--amend",
        "-m",
        "Nova to 2027.1\n\nWe moved off os-hosts.\n\nLockstep-Ack: nova-os-hosts",
    ]);
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 0, "{json:#}");
    // Given in the policy (an earlier commit).
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.2").write(
        &format!("{DIR}/acks.yaml"),
        format!("{ACK}  given: [nova-os-hosts]\n"),
    );
    repo.commit("Nova at 2026.2, acknowledged");
    nova_at(&repo, "2027.1");
    repo.commit("Nova to 2027.1");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 0, "{json:#}");
}

/// An acknowledgement id names one edge: a second team defining the same
/// id on another edge is refused, with both places, since one trailer
/// would acknowledge both edges. The same edge under one id twice is fine.
#[test]
fn an_acknowledgement_id_on_two_edges_is_refused() {
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.2").write(&format!("{DIR}/acks.yaml"), ACK);
    repo.commit("Nova at 2026.2");
    let theirs = ACK
        .replacen("name: api-removal", "name: glance-team", 1)
        .replacen("kinds: [Nova]", "kinds: [Glance]", 1);
    repo.write(&format!("{DIR}/glance.yaml"), &theirs);
    repo.commit("the Glance team's acknowledgement, same id");
    let (code, json) = check_json(&repo, &["--base", "HEAD~1"]);
    assert_eq!(code, 1, "{json:#}");
    let (_, reason, message) = verdict(&json);
    assert_eq!(reason, "PolicyInvalid");
    assert!(
        message.contains("acknowledgement nova-os-hosts is defined on another edge too")
            && message.contains("api-removal"),
        "{message}"
    );
    // The same edge again under the same id: no conflict.
    repo.write(
        &format!("{DIR}/glance.yaml"),
        ACK.replacen("name: api-removal", "name: again", 1),
    );
    repo.commit("the same edge twice");
    let (code, json) = check_json(&repo, &["--base", "HEAD~1"]);
    assert_eq!(code, 0, "{json:#}");
}

#[test]
fn an_unreadable_policy_refuses_every_commit_until_it_is_fixed() {
    // A policy lockstep cannot read might block anything: fail closed.
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1").write(
        &format!("{DIR}/cells.yaml"),
        "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePolicy\nspec: [\n",
    );
    repo.commit("a broken policy");
    nova_at(&repo, "2026.2");
    repo.commit("an unrelated hop");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1, "{json:#}");
    let (_, reason, message) = verdict(&json);
    assert_eq!(reason, "PolicyInvalid");
    assert!(message.contains("fix it first"), "{message}");
    repo.write(
        &format!("{DIR}/cells.yaml"),
        blocked("Glance", "2026.1", "2026.2"),
    );
    repo.commit("the policy fixed");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 0, "{json:#}");
}

#[test]
fn an_unusable_policy_is_refused_with_file_and_line() {
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1");
    repo.commit("Nova");
    repo.write(
        &format!("{DIR}/bad.yaml"),
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n".to_owned()
            + &blocked("Nova", "2026.3", "2027.1"),
    );
    repo.commit("a bad policy");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1);
    let (_, reason, message) = verdict(&json);
    assert_eq!(reason, "PolicyInvalid");
    assert!(message.contains("spec.blocked[0].from"), "{message}");
    let o = &last_objects(&json)[0];
    assert_eq!(
        (o["file"].as_str(), o["line"].as_u64()),
        (Some(".lockstep/policies/bad.yaml"), Some(6))
    );

    // Outside the policy directory it would be read nowhere: refused.
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1");
    repo.commit("Nova");
    repo.write("clusters/policy.yaml", blocked("Nova", "2026.1", "2026.2"));
    repo.commit("a policy in the wrong place");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1);
    let (_, reason, message) = verdict(&json);
    assert_eq!(reason, "PolicyInvalid");
    assert!(
        message.contains("read only from .lockstep/policies/"),
        "{message}"
    );
}

#[test]
fn the_committed_schema_is_the_generated_one_and_takes_the_sample() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(root.join("plans/upgradepolicy.schema.json"))
        .expect("plans/upgradepolicy.schema.json exists");
    assert_eq!(
        committed,
        lockstep::policy::schema_json(),
        "plans/upgradepolicy.schema.json is stale: run `cargo run -- policy-schema > plans/upgradepolicy.schema.json`"
    );
    let sample = std::fs::read_to_string(root.join("plans/upgradepolicy.sample.yaml")).unwrap();
    let (policies, errors) = lockstep::policy::parse(".lockstep/policies/fleet.yaml", &sample);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(policies.len(), 1);
    let schema: serde_json::Value = serde_json::from_str(&committed).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let doc: serde_json::Value = serde_saphyr::from_str(&sample).unwrap();
    assert!(validator.is_valid(&doc), "the schema refuses the sample");
    let mut bad = doc.clone();
    bad["spec"]["blocked"][0]["colour"] = "red".into();
    assert!(
        !validator.is_valid(&bad),
        "the schema takes an unknown field"
    );
}

/// Pre-flight gates are checked on the live cluster before a hop is
/// applied, never with the commit: a hop under a backup gate is accepted
/// by `check` (no backup exists, none is looked for), and a malformed gate
/// is refused with its field like any unusable policy.
#[test]
fn preflight_gates_never_refuse_a_commit_but_a_bad_one_is_invalid() {
    let gate = |max_age: &str| {
        format!(
            "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: backups
spec:
  preflight:
    - kinds: [Nova]
      backup:
        mariaDb: openstack-db
        maxAge: {max_age}
      childrenReady: true
"
        )
    };
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1").write(&format!("{DIR}/backups.yaml"), gate("24h"));
    repo.commit("Nova at 2026.1, and the backup gate");
    nova_at(&repo, "2026.2");
    repo.commit("Nova to 2026.2");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 0, "{json:#}");
    assert_eq!(verdict(&json).0, "accepted", "{json:#}");

    repo.write(&format!("{DIR}/backups.yaml"), gate("1d"));
    repo.commit("A max age in days");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1, "{json:#}");
    let (v, reason, message) = verdict(&json);
    assert_eq!((v.as_str(), reason.as_str()), ("refused", "PolicyInvalid"));
    assert!(
        message.contains("spec.preflight[0].backup.maxAge"),
        "{message}"
    );
}

/// The same gates in the simulated cluster (`run --until-idle` in sim
/// mode, what a rehearsal runs). A backup gate on Nova holds the standalone
/// Nova's hop and the plane's too (it moves prod-nova): the simulated
/// cluster has no Backups, so both wait, pending, saying why, and neither
/// is applied. Lifting the backup gate in a later commit lets both go; the
/// plane's childrenReady gate passes (the simulated children are Ready).
#[test]
fn in_the_simulated_cluster_gates_hold_or_pass_as_on_a_real_one() {
    let ready = "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: ready
spec:
  preflight:
    - kinds: [ControlPlane]
      childrenReady: true
";
    let backup = "apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePolicy
metadata:
  name: backup
spec:
  preflight:
    - kinds: [Nova]
      backup:
        mariaDb: openstack-db
        maxAge: 24h
";
    let repo = FleetRepo::new();
    nova_at(&repo, "2026.1")
        .write(
            "clusters/prod/controlplane.yaml",
            common::prod("2026.1", "2026.1"),
        )
        .write(&format!("{DIR}/ready.yaml"), ready)
        .write(&format!("{DIR}/backup.yaml"), backup);
    let base = repo.commit("fleet at 2026.1, and the gates");
    nova_at(&repo, "2026.2");
    let nova_hop = repo.commit("Nova to 2026.2");
    repo.write(
        "clusters/prod/controlplane.yaml",
        common::prod("2026.2", "2026.2"),
    );
    let prod_hop = repo.commit("prod to 2026.2");
    let run = || {
        let out = common::lockstep(&[
            "run",
            "--repo",
            &repo.path().to_string_lossy(),
            "--until-idle",
            "--cluster-name",
            "t",
        ]);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let line = |sha: &str| {
        repo.git(&["notes", "--ref=lockstep", "show", sha])
            .lines()
            .find(|l| l.starts_with("lockstep/t: "))
            .unwrap_or_default()
            .to_owned()
    };
    let applied = |log: &str, object: &str| {
        log.lines()
            .any(|l| l.contains(" applied ") && l.contains(object) && l.contains("2026.2"))
    };
    let log = run();
    for (sha, hop, name) in [
        (&nova_hop, "nova 2026.1→2026.2", "nova"),
        (&prod_hop, "prod 2026.1→2026.2", "prod"),
    ] {
        let l = line(sha);
        let want = format!(
            "{hop}: waiting: no successful backup of {name} (MariaDB openstack-db; none matches), need one at most 24h old (UpgradePolicy backup"
        );
        assert!(
            l.starts_with("lockstep/t: pending") && l.contains(&want),
            "{l}\n{log}"
        );
    }
    assert!(
        !applied(&log, "compute/nova") && !applied(&log, "openstack/prod"),
        "{log}"
    );

    // A rehearsal runs the same engine: the hops would not start.
    let out = common::lockstep(&[
        "rehearse",
        "--repo",
        &repo.path().to_string_lossy(),
        "--base",
        &base,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Nova compute/nova: not applied, waiting: no successful backup of nova"),
        "{text}"
    );

    // A refused commit lifts nothing: one that drops the gate but is itself
    // refused (here a skip; an untrusted commit alike) leaves the hops held
    // by the last accepted tree's gates.
    repo.remove(&format!("{DIR}/backup.yaml"));
    nova_at(&repo, "2027.2");
    let refused = repo.commit("drop the backup gate, and skip a release");
    let log = run();
    assert!(
        line(&refused).starts_with("lockstep/t: failure"),
        "{}\n{log}",
        line(&refused)
    );
    assert!(
        !applied(&log, "compute/nova") && !applied(&log, "openstack/prod"),
        "a refused head lifted the gate: {log}"
    );
    assert!(
        line(&prod_hop).contains("waiting: no successful backup of prod"),
        "{}",
        line(&prod_hop)
    );
    repo.git(&["reset", "-q", "--hard", "HEAD~1"]);

    repo.remove(&format!("{DIR}/backup.yaml"));
    let lifted = repo.commit("lift the backup gate");
    let log = run();
    assert!(
        applied(&log, "compute/nova") && applied(&log, "openstack/prod"),
        "the hops are applied once the gate is lifted: {log}"
    );
    for sha in [&nova_hop, &prod_hop, &lifted] {
        assert!(
            line(sha).starts_with("lockstep/t: success"),
            "{}\n{log}",
            line(sha)
        );
    }
}

/// An acknowledgement counts only where git shows it: for random messages
/// (titles that look like trailers, blank and white-space-only lines,
/// indented continuations, prose, comments, trailers of other tokens),
/// every id `acks_in_message` finds is in a `Lockstep-Ack` trailer that
/// `git interpret-trailers --parse` prints for the same message. lockstep
/// may see fewer (it wants a block made wholly of trailers, where git also
/// takes one a quarter trailers under a `Signed-off-by`), never more.
#[test]
fn an_acknowledgement_counts_only_where_git_reads_a_trailer() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use std::collections::BTreeSet;
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn git_acks(message: &str) -> BTreeSet<String> {
        let mut child = Command::new("git")
            .args(["interpret-trailers", "--parse", "--no-divider"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("git runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(message.as_bytes())
            .expect("write the message");
        let out = child.wait_with_output().expect("git answers");
        assert!(out.status.success(), "git interpret-trailers failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(token, _)| token.trim().eq_ignore_ascii_case("Lockstep-Ack"))
            .flat_map(|(_, v)| {
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    let id = prop::sample::select(vec!["nova-a", "cells-v2", "x1"]);
    let line = prop_oneof![
        id.clone().prop_map(|i| format!("Lockstep-Ack: {i}")),
        (id.clone(), id.clone()).prop_map(|(a, b)| format!("lockstep-ack : {a}, {b}")),
        id.clone().prop_map(|i| format!("Lockstep-Ack:{i}")),
        Just("Signed-off-by: A U Thor <a@example.org>".to_owned()),
        id.clone().prop_map(|i| format!("  {i}")),
        id.clone().prop_map(|i| format!("\tLockstep-Ack: {i}")),
        Just(String::new()),
        Just("   ".to_owned()),
        Just("nova: to 2026.2".to_owned()),
        Just("We read the release notes.".to_owned()),
        Just("# a comment".to_owned()),
        id.prop_map(|i| format!("Lockstep Ack: {i}")),
    ];
    let message = (prop::collection::vec(line, 1..9), any::<bool>()).prop_map(|(lines, nl)| {
        let mut m = lines.join("\n");
        if nl {
            m.push('\n');
        }
        m
    });
    let (some, none) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&message, |m| {
            let ours = lockstep::policy::acks_in_message(&m);
            let git = git_acks(&m);
            let side = if ours.is_empty() { &none } else { &some };
            side.set(side.get() + 1);
            prop_assert!(
                ours.is_subset(&git),
                "{m:?}: lockstep reads {ours:?}, git {git:?}"
            );
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    // The generator reaches both sides of the rule.
    let (some, none) = (some.get(), none.get());
    assert!(some > 20 && none > 20, "{some} with, {none} without");
}
