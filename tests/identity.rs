//! The ways around the gate, closed (`docs/gate.md`, "Identity over time"):
//! an object removed and re-added lower, hidden behind another extension,
//! renamed into another file, re-added as a plane's child; mistyped kinds
//! and groups; shallow clones; `--path` spellings. Real Git repositories,
//! the real binary, the message each case prints.

mod common;

use common::{FleetRepo, check_json, find, last_objects, lockstep, nova, prod};
use serde_json::Value;

const NOVA: &str = "standalone/compute/nova.yaml";
const PROD: &str = "clusters/prod/controlplane.yaml";

fn repo_path(repo: &FleetRepo) -> String {
    repo.path().to_string_lossy().into_owned()
}

/// nova installed at 2026.1, hopped to 2026.2: its floor is 2026.2.
fn hopped() -> FleetRepo {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("install nova");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    repo
}

fn verdict_of(json: &Value, summary: &str) -> Value {
    json["commits"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["summary"] == summary))
        .map(|c| c["verdict"].clone())
        .unwrap_or_else(|| panic!("no commit {summary:?} in {json:#}"))
}

fn nova_in(json: &Value, summary: &str) -> Value {
    let c = json["commits"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["summary"] == summary))
        .unwrap_or_else(|| panic!("no commit {summary:?} in {json:#}"));
    find(c["objects"].as_array().expect("objects"), "Nova", "nova").clone()
}

const EMPTY: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

#[test]
fn removed_then_re_added_lower_under_another_name_is_a_downgrade() {
    let repo = hopped();
    repo.remove(NOVA);
    repo.commit("drop nova");
    repo.write(
        "standalone/compute/nova-again.yaml",
        nova("nova", "2025.2", "2025.2"),
    );
    repo.commit("nova is back");
    // The whole history, and only the re-add (its base is past the removal,
    // like a pull request opened after the removal landed): the same answer.
    for base in [EMPTY, "HEAD~1"] {
        let (code, json) = check_json(&repo, &["--base", base]);
        assert_eq!(code, 1, "base {base}: {json:#}");
        let o = nova_in(&json, "nova is back");
        assert_eq!(o["reason"], "DowngradeNotSupported", "{o:#}");
        assert_eq!(o["from"], "2026.2");
        assert_eq!(o["to"], "2025.2");
        let msg = o["message"].as_str().expect("message");
        assert!(
            msg.starts_with("re-added; last accepted at 2026.2 (standalone/compute/nova.yaml at "),
            "{msg}"
        );
        assert!(
            msg.contains("lockstep.c5c3.io/recreate-below: \"2026.2\""),
            "{msg}"
        );
    }
    // The removal itself is accepted and says the object keeps running.
    let (_, json) = check_json(&repo, &["--base", EMPTY]);
    assert_eq!(verdict_of(&json, "drop nova"), "accepted");
    assert_eq!(nova_in(&json, "drop nova")["transition"], "remove");
}

#[test]
fn hidden_behind_another_extension_and_back_lower_is_refused() {
    let repo = hopped();
    let text = std::fs::read_to_string(repo.path().join(NOVA)).expect("read");
    repo.remove(NOVA)
        .write("standalone/compute/nova.yaml.off", text);
    repo.commit("park nova");
    repo.remove("standalone/compute/nova.yaml.off")
        .write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova back at 2026.1");
    let (code, json) = check_json(&repo, &["--base", EMPTY]);
    assert_eq!(code, 1, "{json:#}");
    assert_eq!(
        nova_in(&json, "nova back at 2026.1")["reason"],
        "DowngradeNotSupported"
    );
    // The text output names file, line, rule and the way out.
    let out = lockstep(&["check", "--repo", &repo_path(&repo), "--base", "HEAD~1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("standalone/compute/nova.yaml:7: re-added; last accepted at 2026.2"),
        "{text}"
    );
}

#[test]
fn re_adds_are_judged_as_transitions_from_the_floor() {
    for (release, verdict, transition, reason) in [
        ("2026.2", "accepted", "install", Value::Null),
        ("2027.1", "accepted", "upgrade", Value::Null),
        (
            "2027.2",
            "refused",
            "skip",
            Value::from("UpgradePathInvalid"),
        ),
    ] {
        let repo = hopped();
        repo.remove(NOVA);
        repo.commit("drop nova");
        repo.write("compute.yml", nova("nova", release, release));
        repo.commit("nova is back");
        let (code, json) = check_json(&repo, &["--base", "HEAD~1"]);
        let o = nova_in(&json, "nova is back");
        assert_eq!(
            (
                o["verdict"].clone(),
                o["transition"].clone(),
                o["reason"].clone()
            ),
            (Value::from(verdict), Value::from(transition), reason),
            "{release}: {o:#}"
        );
        assert_eq!(code, if verdict == "accepted" { 0 } else { 1 });
        assert_eq!(o["from"], "2026.2", "{o:#}");
    }
}

#[test]
fn the_recreate_annotation_drops_exactly_the_floor_it_names() {
    let annotated = |value: &str| {
        nova("nova", "2025.2", "2025.2").replacen(
            "  namespace: compute\n",
            &format!(
                "  namespace: compute\n  annotations:\n    lockstep.c5c3.io/recreate-below: \"{value}\"\n"
            ),
            1,
        )
    };
    let repo = hopped();
    repo.remove(NOVA);
    repo.commit("drop nova");
    repo.write(NOVA, annotated("2026.1"));
    repo.commit("wrong floor");
    repo.write(NOVA, annotated("2026.2"));
    repo.commit("recreate nova from scratch");
    let (code, json) = check_json(&repo, &["--base", "HEAD~2"]);
    assert_eq!(code, 1, "{json:#}");
    let wrong = nova_in(&json, "wrong floor");
    assert_eq!(wrong["reason"], "ManifestInvalid");
    assert!(
        wrong["message"]
            .as_str()
            .is_some_and(|m| m.contains("is \"2026.1\", but the floor it would drop is 2026.2")),
        "{wrong:#}"
    );
    let ok = nova_in(&json, "recreate nova from scratch");
    assert_eq!(ok["verdict"], "accepted", "{ok:#}");
    assert_eq!(ok["transition"], "install");
    assert!(
        ok["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("re-created from scratch below its floor 2026.2")),
        "{ok:#}"
    );
    // Once accepted, 2025.2 is the floor: the annotation left in the file
    // cannot wave a later drop through.
    repo.remove(NOVA);
    repo.commit("drop again");
    repo.write(NOVA, annotated("2026.2").replace("2025.2", "2025.1"));
    repo.commit("lower still");
    let (code, json) = check_json(&repo, &["--base", EMPTY]);
    assert_eq!(code, 1);
    assert_eq!(verdict_of(&json, "recreate nova from scratch"), "accepted");
    assert_eq!(nova_in(&json, "lower still")["reason"], "ManifestInvalid");
}

#[test]
fn a_projected_child_re_added_standalone_keeps_the_planes_floor() {
    let repo = FleetRepo::new();
    repo.write(PROD, prod("2026.1", "2026.1"));
    repo.commit("prod");
    repo.write(PROD, prod("2026.2", "2026.2"));
    repo.commit("prod to 2026.2");
    repo.remove(PROD);
    repo.commit("drop prod from Git");
    repo.write(
        "standalone/prod-nova.yaml",
        nova("prod-nova", "2026.1", "2026.1").replace("namespace: compute", "namespace: openstack"),
    );
    repo.commit("prod-nova standalone");
    let (code, json) = check_json(&repo, &["--base", "HEAD~1"]);
    assert_eq!(code, 1, "{json:#}");
    let o = find(&last_objects(&json), "Nova", "prod-nova").clone();
    assert_eq!(o["reason"], "DowngradeNotSupported", "{o:#}");
    assert_eq!(o["from"], "2026.2");
}

#[test]
fn mistyped_kinds_and_groups_are_refused_never_ignored() {
    for (api, kind, expect) in [
        (
            "nova.openstack.c5c3.io/v1alpha1",
            "NOVA",
            "did you mean Nova?",
        ),
        (
            "nova.openstack.c5c3.io/v1alpha1",
            "nova",
            "did you mean Nova?",
        ),
        (
            "nova.openstack.c5c3.io/v1alpha1",
            "\"Nova \"",
            "did you mean Nova?",
        ),
        (
            "nova.openstack.c5c3.io/v1alpha1",
            "NovaComptue",
            "did you mean NovaCompute?",
        ),
        (
            "nova.openstack.c5c3.oi/v1alpha1",
            "Nova",
            "did you mean nova.openstack.c5c3.io/v1alpha1?",
        ),
        (
            "Nova.openstack.c5c3.io/v1alpha1",
            "Nova",
            "did you mean nova.openstack.c5c3.io/v1alpha1?",
        ),
        (
            "octavia.openstack.c5c3.io/v1alpha1",
            "Octavia",
            "names no group the operators serve",
        ),
        (
            "nova.openstack.c5c3.io/v1beta1",
            "Nova",
            "not served for Nova",
        ),
        ("nova.openstack.c5c3.io", "Nova", "not served for Nova"),
        // A slash too many: our group, a version nobody serves (it read as
        // nobody's group, and the Nova as removed).
        (
            "nova.openstack.c5c3.io/v1alpha1/",
            "Nova",
            "not served for Nova",
        ),
        (
            "nova.openstack.c5c3.io/v1alpha1/extra",
            "Nova",
            "not served for Nova",
        ),
    ] {
        let repo = hopped();
        // The typo and a downgrade in one commit: the typo must not read as
        // a removal that lets the downgrade through elsewhere.
        let typo = nova("nova", "2025.2", "2025.2")
            .replacen("nova.openstack.c5c3.io/v1alpha1", api, 1)
            .replacen("kind: Nova", &format!("kind: {kind}"), 1);
        repo.write(NOVA, typo);
        repo.commit("typo");
        let (code, json) = check_json(&repo, &[]);
        assert_eq!(code, 1, "{api} {kind}: {json:#}");
        let objects = last_objects(&json);
        let o = objects
            .iter()
            .find(|o| o["reason"] == "ManifestInvalid")
            .unwrap_or_else(|| panic!("{api} {kind}: {objects:#?}"));
        assert_eq!(o["file"], NOVA);
        assert_eq!(o["line"], 1);
        assert!(
            o["message"].as_str().is_some_and(|m| m.contains(expect)),
            "{api} {kind}: {o:#}"
        );
        assert!(
            objects.iter().all(|o| o["transition"] != "remove"),
            "a typo is not a removal: {objects:#?}"
        );
    }
}

#[test]
fn companion_kinds_and_other_groups_stay_quiet() {
    let repo = hopped();
    repo.write(
        "standalone/compute/extra.yaml",
        "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: NovaCompute\nmetadata: {name: az1, namespace: compute}\nspec: {}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\napiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: y}\n",
    );
    repo.commit("companions");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 0, "{json:#}");
    assert!(last_objects(&json).is_empty(), "{json:#}");
}

#[test]
fn half_an_identity_is_refused() {
    let repo = hopped();
    repo.write(
        NOVA,
        nova("nova", "2026.2", "2026.2").replacen("kind: Nova\n", "", 1),
    );
    repo.commit("kind lost");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1, "{json:#}");
    let o = &last_objects(&json)[0];
    assert!(
        o["message"]
            .as_str()
            .is_some_and(|m| m.contains("is a C5C3 group but the document has no kind")),
        "{o:#}"
    );
}

/// `git clone --depth N` of a repository, the way CI checkouts are made.
fn shallow_clone(repo: &FleetRepo, depth: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new("git")
        .args([
            "clone",
            "-q",
            "--depth",
            &depth.to_string(),
            &format!("file://{}", repo.path().display()),
            &dir.path().join("c").to_string_lossy(),
        ])
        .output()
        .expect("git clone");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

#[test]
fn a_shallow_clone_is_an_error_not_a_root() {
    let repo = hopped();
    repo.remove(NOVA);
    repo.commit("drop nova");
    repo.write(NOVA, nova("nova", "2025.2", "2025.2"));
    repo.commit("nova is back lower");
    let one = shallow_clone(&repo, 1);
    let path = one.path().join("c");
    // No base: the head's parent is missing; judged from the empty tree the
    // downgrade would be an install.
    let out = lockstep(&["check", "--repo", &path.to_string_lossy()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("(a shallow clone)"), "{err}");
    assert!(err.contains("git fetch --unshallow"), "{err}");
    assert!(err.contains("fetch-depth: 0"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // With the parent there, the range is whole, but the re-added identity
    // needs the history before it: still an error, never an install.
    let two = shallow_clone(&repo, 2);
    let path = two.path().join("c");
    let out = lockstep(&["check", "--repo", &path.to_string_lossy()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A range that needs nothing older is judged: a hop in a depth-2 clone.
    let repo = hopped();
    let two = shallow_clone(&repo, 2);
    let (code, json) = {
        let out = lockstep(&[
            "check",
            "--repo",
            &two.path().join("c").to_string_lossy(),
            "-o",
            "json",
        ]);
        (
            out.status.code(),
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
        )
    };
    assert_eq!(code, Some(0), "{json:#}");
    assert_eq!(
        find(&last_objects(&json), "Nova", "nova")["transition"],
        "upgrade"
    );
}

#[test]
fn path_spellings_select_the_same_and_nonsense_is_a_usage_error() {
    let repo = hopped();
    repo.write(NOVA, nova("nova", "2027.2", "2027.2"));
    repo.write("README.md", "the fleet\n");
    std::os::unix::fs::symlink("standalone", repo.path().join("fleet")).expect("symlink");
    repo.commit("skip");
    for p in [
        "standalone",
        "./standalone",
        "standalone/",
        "standalone//compute/./nova.yaml",
        ".",
        "./",
    ] {
        let (code, json) = check_json(&repo, &["--path", p]);
        assert_eq!(code, 1, "--path {p}: {json:#}");
        assert_eq!(
            find(&last_objects(&json), "Nova", "nova")["reason"],
            "UpgradePathInvalid",
            "--path {p}"
        );
    }
    for (p, expect) in [
        ("/etc", "is absolute"),
        ("../x", "leaves the repository"),
        ("standalone/../..", "leaves the repository"),
        ("standalon", "matches no directory or manifest file"),
        ("clusters", "matches no directory or manifest file"),
        // A file that is no manifest, and a link to the fleet: they select
        // nothing, so the skip would pass unjudged.
        ("README.md", "matches no directory or manifest file"),
        ("fleet", "a symbolic link"),
        ("", "is empty"),
    ] {
        let out = lockstep(&["check", "--repo", &repo_path(&repo), "--path", p]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--path {p:?}: {err}");
        assert!(err.contains(expect), "--path {p:?}: {err}");
        assert!(out.stdout.is_empty(), "--path {p:?}: nothing judged");
    }
}

/// Found by `gate_property.rs`: the floor from older history must be the
/// one an unbroken judgment reaches. Here the plane's child at 2027.1 only
/// ever appeared in a refused commit, so prod-nova's floor is the standalone
/// 2025.1, and the plane coming back at 2027.1 is a skip for it, judged
/// from the root or from a cut after the removal.
#[test]
fn a_floor_from_older_history_ignores_what_was_refused_there() {
    let standalone = || {
        nova("prod-nova", "2025.1", "2025.1").replacen(
            "namespace: compute",
            "namespace: openstack",
            1,
        )
    };
    let repo = FleetRepo::new();
    repo.write(PROD, prod("2027.1", "2027.1"))
        .write("standalone/openstack/prod-nova.yaml", standalone());
    repo.commit("plane and its child standalone");
    repo.remove(PROD);
    repo.commit("drop the plane");
    let text = standalone();
    repo.remove("standalone/openstack/prod-nova.yaml")
        .write("standalone/openstack/prod-nova.bak", text);
    repo.commit("park prod-nova");
    repo.write(PROD, prod("2027.1", "2027.1"));
    repo.commit("the plane is back");
    for base in [EMPTY, "HEAD~1"] {
        let (code, json) = check_json(&repo, &["--base", base]);
        assert_eq!(code, 1, "base {base}: {json:#}");
        let o = find(&last_objects(&json), "Nova", "prod-nova").clone();
        assert_eq!(o["reason"], "UpgradePathInvalid", "base {base}: {o:#}");
        assert_eq!(o["from"], "2025.1", "base {base}: {o:#}");
    }
}

/// A commit bringing in a whole batch of new objects (past the number of
/// names the look back scans for one by one) still finds the floor of the
/// one that existed before, by judging the older history outright.
#[test]
fn a_re_add_inside_a_large_batch_keeps_its_floor() {
    let repo = hopped();
    repo.remove(NOVA);
    repo.commit("drop nova");
    for i in 0..70 {
        repo.write(
            &format!("standalone/batch/nova-{i:02}.yaml"),
            nova(&format!("nova-{i:02}"), "2026.1", "2026.1"),
        );
    }
    repo.write(
        "standalone/batch/nova.yaml",
        nova("nova", "2025.2", "2025.2"),
    );
    repo.commit("onboard a batch, nova among them");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 1, "{json:#}");
    let objects = last_objects(&json);
    assert_eq!(
        find(&objects, "Nova", "nova")["reason"],
        "DowngradeNotSupported"
    );
    assert_eq!(find(&objects, "Nova", "nova-69")["transition"], "install");
}

/// A standalone Keystone at `image` (`tag: "…"` or `digest: sha256:…`):
/// its release is its tag, and a digest names none.
fn keystone(image: &str) -> String {
    format!(
        "apiVersion: keystone.openstack.c5c3.io/v1alpha1\nkind: Keystone\nmetadata:\n  name: keystone\n  namespace: identity\nspec:\n  image:\n    repository: ghcr.io/c5c3/keystone\n    {image}\n"
    )
}

fn keystone_in(json: &Value, summary: &str) -> Value {
    let c = json["commits"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["summary"] == summary))
        .unwrap_or_else(|| panic!("no commit {summary:?} in {json:#}"));
    find(
        c["objects"].as_array().expect("objects"),
        "Keystone",
        "keystone",
    )
    .clone()
}

/// A Keystone pinned by digest names no release (the operator freezes its
/// release tracking where it was), and a tag written again is judged from
/// the last release the history accepted: pinning was a way past every
/// rule (a skip, a downgrade) when the gate forgot where the object stood.
/// The same from a range starting at the pin (the release looked up in the
/// history before it) and for a Keystone removed while pinned.
#[test]
fn a_pin_by_digest_keeps_the_release_it_froze() {
    const KS: &str = "standalone/identity/keystone.yaml";
    let digest = format!("digest: sha256:{}", "6c".repeat(32));
    let repo = FleetRepo::new();
    repo.write(KS, keystone("tag: \"2026.1\""));
    repo.commit("keystone at 2026.1");
    repo.write(KS, keystone(&digest));
    repo.commit("pin keystone");
    repo.write(KS, keystone("tag: \"2027.1\""));
    repo.commit("unpin to 2027.1");
    repo.write(KS, keystone("tag: \"2025.2\""));
    repo.commit("unpin to 2025.2");
    repo.write(KS, keystone("tag: \"2026.2\""));
    repo.commit("unpin to 2026.2");
    for base in [EMPTY, "HEAD~3"] {
        let (code, json) = check_json(&repo, &["--base", base]);
        assert_eq!(code, 1, "base {base}: {json:#}");
        let skip = keystone_in(&json, "unpin to 2027.1");
        assert_eq!(
            skip["reason"], "UpgradePathInvalid",
            "base {base}: {skip:#}"
        );
        assert_eq!(skip["from"], "2026.1", "base {base}: {skip:#}");
        assert!(
            skip["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the baseline names no release (pinned by digest); judged from the last accepted release 2026.1")),
            "base {base}: {skip:#}"
        );
        let down = keystone_in(&json, "unpin to 2025.2");
        assert_eq!(
            down["reason"], "DowngradeNotSupported",
            "base {base}: {down:#}"
        );
        let hop = keystone_in(&json, "unpin to 2026.2");
        assert_eq!(hop["verdict"], "accepted", "base {base}: {hop:#}");
        assert_eq!(hop["transition"], "upgrade", "base {base}: {hop:#}");
    }
    // Removed while pinned, re-added: from the release it froze.
    let repo = FleetRepo::new();
    repo.write(KS, keystone("tag: \"2026.1\""));
    repo.commit("keystone at 2026.1");
    repo.write(KS, keystone(&digest));
    repo.commit("pin keystone");
    repo.remove(KS);
    repo.commit("drop keystone");
    repo.write(KS, keystone("tag: \"2025.1\""));
    repo.commit("keystone back lower");
    for base in [EMPTY, "HEAD~1", "HEAD~2"] {
        let (code, json) = check_json(&repo, &["--base", base]);
        assert_eq!(code, 1, "base {base}: {json:#}");
        let o = keystone_in(&json, "keystone back lower");
        assert_eq!(o["reason"], "DowngradeNotSupported", "base {base}: {o:#}");
        assert_eq!(o["from"], "2026.1", "base {base}: {o:#}");
    }
}

/// A range whose base is a commit the gate refused for a release that does
/// not parse: the baseline is taken as given, but it names no release, so
/// the object is judged from the last release its history accepted. A skip
/// or a downgrade read as "the baseline had none that parses" before.
#[test]
fn a_base_with_a_release_that_does_not_parse_judges_from_history() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.x", "2026.1"));
    repo.commit("a typo");
    repo.write(NOVA, nova("nova", "2027.2", "2027.2"));
    repo.commit("past the typo, two releases on");
    let (code, json) = check_json(&repo, &["--base", "HEAD~1"]);
    assert_eq!(code, 1, "{json:#}");
    let o = nova_in(&json, "past the typo, two releases on");
    assert_eq!(o["reason"], "UpgradePathInvalid", "{o:#}");
    assert_eq!(o["from"], "2026.1", "{o:#}");
    repo.write(NOVA, nova("nova", "2025.1", "2025.1"));
    repo.commit("below");
    let (code, json) = check_json(&repo, &["--base", "HEAD~2"]);
    assert_eq!(code, 1, "{json:#}");
    assert_eq!(nova_in(&json, "below")["reason"], "DowngradeNotSupported");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("one hop");
    let (_, json) = check_json(&repo, &["--base", "HEAD~3"]);
    let hop = nova_in(&json, "one hop");
    assert_eq!(hop["verdict"], "accepted", "{hop:#}");
    assert_eq!(hop["transition"], "upgrade", "{hop:#}");
}

/// The re-creation annotation drops a floor only for a release below it:
/// above the floor it drops nothing, and a re-add two releases past the
/// floor is the skip it always was.
#[test]
fn the_recreate_annotation_never_lets_a_skip_past_the_floor() {
    let annotated = |release: &str| {
        nova("nova", release, release).replacen(
            "  namespace: compute\n",
            "  namespace: compute\n  annotations:\n    lockstep.c5c3.io/recreate-below: \"2026.2\"\n",
            1,
        )
    };
    let repo = hopped();
    repo.remove(NOVA);
    repo.commit("drop nova");
    repo.write(NOVA, annotated("2027.2"));
    repo.commit("back two releases on");
    repo.write(NOVA, annotated("2027.1"));
    repo.commit("back one release on");
    let (code, json) = check_json(&repo, &["--base", "HEAD~2"]);
    assert_eq!(code, 1, "{json:#}");
    let skip = nova_in(&json, "back two releases on");
    assert_eq!(skip["reason"], "UpgradePathInvalid", "{skip:#}");
    let hop = nova_in(&json, "back one release on");
    assert_eq!(hop["verdict"], "accepted", "{hop:#}");
    assert_eq!(hop["transition"], "upgrade", "{hop:#}");
}

/// A child in another namespace than its plane (`services.nova.namespace`)
/// defined standalone as well: the refusal points at the plane's file and
/// line and never names it in the child's namespace (it said "ControlPlane
/// cells/prod", a plane that does not exist). The plane's own namespace is
/// said when its document is among what the commit read.
#[test]
fn a_projected_child_elsewhere_names_its_plane_rightly() {
    let repo = FleetRepo::new();
    repo.write(
        PROD,
        prod("2026.1", "2026.1").replacen(
            "    nova:                         # requires placement, glance, neutron and infrastructure.messaging\n",
            "    nova:                         # requires placement, glance, neutron and infrastructure.messaging\n      namespace:\n        name: cells\n",
            1,
        ),
    );
    repo.commit("prod, nova in namespace cells");
    repo.write(
        "standalone/cells/prod-nova.yaml",
        nova("prod-nova", "2026.1", "2026.1").replacen("namespace: compute", "namespace: cells", 1),
    );
    repo.commit("prod-nova standalone too");
    let (code, json) = check_json(&repo, &["--base", "HEAD~1"]);
    assert_eq!(code, 1, "{json:#}");
    let o = find(&last_objects(&json), "Nova", "prod-nova").clone();
    assert_eq!(o["reason"], "ProjectedChildEdited", "{o:#}");
    let m = o["message"].as_str().unwrap_or_default();
    assert!(
        m.contains("projected by ControlPlane prod (clusters/prod/controlplane.yaml:")
            || m.contains(
                "projected by ControlPlane openstack/prod (clusters/prod/controlplane.yaml:"
            ),
        "{m}"
    );
    assert!(!m.contains("cells/prod "), "{m}");
}

/// A pull request forked before its target removed an object is judged
/// from the fork point, but with the target's floors: the merge will be
/// judged on the target with them, so the pull request's check must not
/// accept the re-add at a lower release that the merge is then refused for.
#[test]
fn a_pull_request_forked_before_a_removal_keeps_the_targets_floor() {
    let repo = FleetRepo::new();
    repo.write(
        "standalone/compute/namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: compute\n",
    );
    let fork = repo.commit("namespaces");
    repo.write(
        "standalone/compute/nova.yaml",
        common::nova("nova", "2026.1", "2026.1"),
    );
    repo.commit("nova at 2026.1");
    repo.write(
        "standalone/compute/nova.yaml",
        common::nova("nova", "2026.2", "2026.2"),
    );
    repo.commit("nova to 2026.2");
    repo.remove("standalone/compute/nova.yaml");
    repo.commit("nova removed");
    repo.git(&["checkout", "-q", "-b", "pr", &fork]);
    repo.write("moved/nova.yaml", common::nova("nova", "2025.1", "2025.1"));
    repo.commit("pr: nova at 2025.1");
    let (code, json) = check_json(&repo, &["--base", "main", "--head", "pr"]);
    assert_eq!(code, 1, "{json:#}");
    let objects = last_objects(&json);
    let nova = find(&objects, "Nova", "nova");
    assert_eq!(nova["reason"], "DowngradeNotSupported", "{json:#}");
    assert_eq!(nova["from"], "2026.2", "{json:#}");
    // Judged from the fork point all the same: one commit, the pull request's.
    assert_eq!(
        json["commits"].as_array().map(Vec::len),
        Some(1),
        "{json:#}"
    );
}

/// A pull request forked before its target raised an object, whose own
/// commits touch that object at the fork's release (a patch), remove it
/// and re-add it there: the patch is judged against the fork's tree and
/// leaves a floor below the target's, but the re-add is judged from the
/// target's floor all the same (the merge would be refused for it).
#[test]
fn a_pull_request_cannot_lower_the_targets_floor_through_its_own_commits() {
    const NOVA: &str = "standalone/compute/nova.yaml";
    let repo = FleetRepo::new();
    repo.write(NOVA, common::nova("nova", "2026.1", "2026.1"));
    let fork = repo.commit("nova at 2026.1");
    repo.write(NOVA, common::nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    repo.git(&["checkout", "-q", "-b", "pr", &fork]);
    repo.write(NOVA, common::nova("nova", "2026.1", "2026.1-p1"));
    repo.commit("pr: nova patched at 2026.1");
    repo.remove(NOVA);
    repo.commit("pr: nova removed");
    repo.write("moved/nova.yaml", common::nova("nova", "2026.1", "2026.1"));
    repo.commit("pr: nova back at 2026.1");
    let (code, json) = check_json(&repo, &["--base", "main", "--head", "pr"]);
    assert_eq!(code, 1, "{json:#}");
    let verdicts: Vec<&str> = json["commits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["verdict"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(verdicts, ["accepted", "accepted", "refused"], "{json:#}");
    let objects = last_objects(&json);
    let nova = find(&objects, "Nova", "nova");
    assert_eq!(nova["reason"], "DowngradeNotSupported", "{json:#}");
    assert_eq!(nova["from"], "2026.2", "{json:#}");
}

/// A head of an unrelated history (`git checkout --orphan`) shares nothing
/// with its base: every commit of its first-parent line is judged, in one
/// walk of the two histories (`git::GitRepo::first_parent_range`; asking
/// for each commit whether the base descends from it walked the base's
/// history once per commit). A head behind its base judges nothing.
#[test]
fn an_unrelated_head_is_judged_whole_and_a_head_behind_its_base_judges_nothing() {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    repo.git(&["checkout", "-q", "--orphan", "other"]);
    repo.write(NOVA, nova("nova", "2025.1", "2025.1"));
    repo.commit("other: nova at 2025.1");
    repo.write(NOVA, nova("nova", "2025.2", "2025.2"));
    repo.commit("other: nova to 2025.2");
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("other: nova to 2026.1");
    let (code, json) = check_json(&repo, &["--base", "main", "--head", "other"]);
    let judged: Vec<&str> = json["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .filter_map(|c| c["summary"].as_str())
        .collect();
    assert_eq!(
        judged,
        [
            "other: nova at 2025.1",
            "other: nova to 2025.2",
            "other: nova to 2026.1"
        ],
        "{json:#}"
    );
    // Judged from main's tree, the first is a downgrade.
    assert_eq!(code, 1, "{json:#}");
    let out = lockstep(&[
        "check",
        "--repo",
        &repo_path(&repo),
        "--base",
        "main",
        "--head",
        "main~1",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing to judge"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A partial clone (`git clone --filter=blob:none`, as some CI checkouts
/// are made) lacks the blobs of older commits: the check stops (exit 2)
/// and says it is a partial clone and how to clone instead, not "fetch the
/// history that has it" (a fetch brings no blobs there).
#[test]
fn a_partial_clone_is_named_with_its_fix() {
    let repo = hopped();
    repo.git(&["config", "uploadpack.allowFilter", "true"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let clone = dir.path().join("c");
    let out = std::process::Command::new("git")
        .args([
            "clone",
            "-q",
            "--no-checkout",
            "--filter=blob:none",
            &format!("file://{}", repo.path().display()),
            &clone.to_string_lossy(),
        ])
        .output()
        .expect("git clone");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = lockstep(&[
        "check",
        "--repo",
        &clone.to_string_lossy(),
        "--base",
        "HEAD~1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a partial clone (cloned with --filter)"),
        "{err}"
    );
    assert!(err.contains("clone without --filter"), "{err}");
    assert!(out.stdout.is_empty(), "nothing judged");
}
