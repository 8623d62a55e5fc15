//! Upgrade plans are judged like manifests: through real Git and the real
//! binary (`lockstep check`), every refusal names the plan, the file and
//! the rule. The plan's JSON Schema under plans/ is generated from the
//! Rust types and must not drift; the samples must validate.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The demo fleet (prod and nova at 2026.2, staging at 2026.1) plus one
/// commit adding `plans` (file name → text); the check's JSON for it.
fn judge(plans: &[(&str, &str)]) -> (i32, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    git(dir.path(), &["checkout", "-q", "-f", "main"]);
    for (name, text) in plans {
        let p = dir.path().join("plans").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "a plan"]);
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["check", "--repo"])
        .arg(dir.path())
        .args(["-o", "json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

fn reasons(json: &serde_json::Value) -> Vec<(String, String)> {
    json["commits"][0]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["reason"].as_str().unwrap_or("").to_owned(),
                o["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

const SAMPLE: &str = include_str!("../plans/samples/two-waves.yaml");

fn with(replace: &[(&str, &str)]) -> String {
    let mut s = SAMPLE.to_owned();
    for (a, b) in replace {
        assert!(s.contains(a), "sample lacks {a:?}");
        s = s.replacen(a, b, 1);
    }
    s
}

fn refused_with(json: &serde_json::Value, reason: &str, needle: &str) {
    let r = reasons(json);
    assert!(
        r.iter().any(|(re, m)| re == reason && m.contains(needle)),
        "expected {reason} mentioning {needle:?}, got {r:?}"
    );
    assert_eq!(json["commits"][0]["verdict"], "refused");
}

#[test]
fn the_sample_plan_is_accepted() {
    let (code, json) = judge(&[("fleet.yaml", SAMPLE)]);
    assert_eq!(code, 0, "{json:#}");
    assert_eq!(json["commits"][0]["verdict"], "accepted");
    assert!(reasons(&json).is_empty(), "{json:#}");
}

#[test]
fn every_plan_refusal_names_the_rule() {
    // More than one hop from staging (2026.1): a fast-forward, accepted.
    let (code, json) = judge(&[("fleet.yaml", &with(&[("to: \"2026.2\"", "to: \"2027.1\"")]))]);
    assert_eq!(code, 0, "{json:#}");
    assert!(reasons(&json).is_empty(), "{json:#}");
    // Below where prod already is.
    let (code, json) = judge(&[("fleet.yaml", &with(&[("to: \"2026.2\"", "to: \"2025.2\"")]))]);
    assert_eq!(code, 1);
    refused_with(&json, "PlanTargetInvalid", "past 2025.2");
    // Not a release.
    let (_, json) = judge(&[("fleet.yaml", &with(&[("to: \"2026.2\"", "to: \"soon\"")]))]);
    refused_with(&json, "PlanTargetInvalid", "soon");
    // A wave that selects nothing.
    let (_, json) = judge(&[("fleet.yaml", &with(&[("name: staging", "name: nowhere")]))]);
    refused_with(&json, "PlanSelectsNothing", "wave canary");
    // The same object in two waves.
    let (_, json) = judge(&[(
        "fleet.yaml",
        &with(&[(
            "kind: Nova\n          namespace: compute\n          name: nova",
            "kind: ControlPlane\n          namespace: openstack-staging\n          name: staging",
        )]),
    )]);
    refused_with(
        &json,
        "PlanOverlap",
        "selected by waves canary and production",
    );
    // Another active plan selecting staging too.
    let other = with(&[("name: fleet-to-2026.2", "name: staging-only")]);
    let (_, json) = judge(&[("fleet.yaml", SAMPLE), ("other.yaml", &other)]);
    refused_with(&json, "PlanOverlap", "also selected by active plan");
    // ... unless that one is paused.
    let paused = other.replacen("onFailure: hold", "onFailure: hold\n  paused: true", 1);
    let (code, json) = judge(&[("fleet.yaml", SAMPLE), ("other.yaml", &paused)]);
    assert_eq!(code, 0, "{json:#}");
    // Two plans of one name (their branches and status would be one):
    // refused, each naming the other, though they select different things.
    let twin = SAMPLE.replacen("onFailure: hold", "onFailure: hold\n  paused: true", 1);
    let (code, json) = judge(&[("fleet.yaml", SAMPLE), ("twin.yaml", &twin)]);
    assert_eq!(code, 1, "{json:#}");
    refused_with(&json, "PlanInvalid", "also the plan at plans/twin.yaml");
    refused_with(&json, "PlanInvalid", "also the plan at plans/fleet.yaml");
    // A name that is no object name: it would spell another status context
    // or a forged notes line, or share a branch with another plan's.
    for name in ["\"a: failure — forged\"", "Fleet", "\"p 1\"", "a/b"] {
        let (code, json) = judge(&[(
            "fleet.yaml",
            &with(&[("name: fleet-to-2026.2", &format!("name: {name}"))]),
        )]);
        assert_eq!(code, 1, "{name}: {json:#}");
        refused_with(&json, "PlanInvalid", "is not a valid object name");
    }
    // A window that does not parse.
    let (_, json) = judge(&[("fleet.yaml", &with(&[("0 20 * * 1-5", "0 25 * * 1-5")]))]);
    refused_with(&json, "PlanWindowInvalid", "25");
    let (_, json) = judge(&[("fleet.yaml", &with(&[("Europe/Berlin", "Europe/Berln")]))]);
    refused_with(&json, "PlanWindowInvalid", "Berln");
    // The host's own zone is no zone a plan can name (CI and the daemon's
    // host could differ), nor is another spelling of one.
    let (_, json) = judge(&[("fleet.yaml", &with(&[("Europe/Berlin", "localtime")]))]);
    refused_with(&json, "PlanWindowInvalid", "localtime");
    let (_, json) = judge(&[("fleet.yaml", &with(&[("Europe/Berlin", "europe/berlin")]))]);
    refused_with(&json, "PlanWindowInvalid", "\"Europe/Berlin\"");
    // A window shorter than a pass of the daemon could be missed.
    let (_, json) = judge(&[("fleet.yaml", &with(&[("duration: 6h", "duration: 90s")]))]);
    refused_with(&json, "PlanWindowInvalid", "at least 5m");
    // A soak past 30 days is a pause (and past year 9999, nothing).
    let (_, json) = judge(&[("fleet.yaml", &with(&[("soak: 1h", "soak: 99999999h")]))]);
    refused_with(&json, "PlanInvalid", "longer than 720h");
    // A field that does not exist, and a bad soak.
    let (_, json) = judge(&[(
        "fleet.yaml",
        &with(&[(
            "maxParallel: 1\n      soak: 1h",
            "maxParalel: 1\n      soak: 1h",
        )]),
    )]);
    refused_with(&json, "PlanInvalid", "maxParalel");
    let (_, json) = judge(&[("fleet.yaml", &with(&[("soak: 1h", "soak: an hour")]))]);
    refused_with(&json, "PlanInvalid", "soak");
    // A digest-pinned object: no plan can derive its next digest.
    let glance = with(&[(
        "kind: Nova\n          namespace: compute\n          name: nova",
        "kind: Glance\n          namespace: image\n          name: glance",
    )]);
    let (_, json) = judge(&[("fleet.yaml", &glance)]);
    refused_with(&json, "PlanInvalid", "pinned by digest");
    // The refusal points at the plan's file.
    let o = &json["commits"][0]["objects"][0];
    assert_eq!(o["file"], "plans/fleet.yaml");
    assert_eq!(o["name"], "fleet-to-2026.2");
}

#[test]
fn the_committed_plan_schema_is_generated_and_the_samples_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(root.join("plans/upgradeplan.schema.json")).unwrap();
    assert!(
        committed == lockstep::plan::schema_json(),
        "plans/upgradeplan.schema.json is stale: run `cargo run -- plan-schema > plans/upgradeplan.schema.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&committed).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(root.join("plans/samples")).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        let (plans, errs) = lockstep::plan::parse_plans(&path.to_string_lossy(), &text);
        assert!(
            errs.is_empty() && plans.len() == 1,
            "{}: {errs:?}",
            path.display()
        );
        n += 1;
    }
    assert!(n >= 2);
    let bad = serde_json::json!({"apiVersion": "lockstep.c5c3.io/v1alpha1", "kind": "UpgradePlan",
        "metadata": {"name": "x"}, "spec": {"to": "2026.2", "waves": [{"name": "w", "select": [{}], "maxParallel": 0}]}});
    assert!(
        !validator.is_valid(&bad),
        "maxParallel 0 must be refused by the schema"
    );
}

/// `lockstep plan status` shows a plan that does not read, with the field
/// and the rule, instead of leaving it out as if it were not there.
#[test]
fn plan_status_shows_a_plan_that_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    lockstep::demo::build_repository(dir.path()).unwrap();
    let plan = include_str!("../plans/samples/two-waves.yaml").replacen(
        "maxParallel: 1",
        "maxParallel: many",
        1,
    );
    std::fs::write(dir.path().join("plan.yaml"), plan).unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "a broken plan"]);
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["plan", "status", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("plan fleet-to-2026.2 (plan.yaml:3): refused: not a valid UpgradePlan: spec.waves[0].maxParallel")
            && text.contains("(PlanInvalid)"),
        "{text}"
    );
    assert!(!text.contains("no UpgradePlan"), "{text}");
}
