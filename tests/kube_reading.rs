//! Files that kubectl, Argo CD and Flux read otherwise than YAML 1.2, through
//! `lockstep check` on a real repository: each is refused with its line,
//! while the same hop written plainly is accepted. What each construct makes
//! kubectl apply instead (a second `openStackRelease` after U+2028, a merge
//! key overriding the release, the items of a list, a JSON object before a
//! `:`) is in `core/src/kube_reading.rs`; the rules are in `docs/gate.md`,
//! "What is read". A `.json` manifest is read like a YAML one.

mod common;

use common::{FleetRepo, check_json, nova};

const NOVA: &str = "standalone/compute/nova.yaml";

fn at_2026_1() -> FleetRepo {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    repo.commit("nova at 2026.1");
    repo
}

/// The reason, file, line and message of the first refusal of the last
/// commit.
fn refusal(repo: &FleetRepo) -> (String, String, u64, String) {
    let (code, json) = check_json(repo, &[]);
    assert_eq!(code, 1, "{json:#}");
    let o = &common::last_objects(&json)[0];
    (
        o["reason"].as_str().unwrap_or("").to_owned(),
        o["file"].as_str().unwrap_or("").to_owned(),
        o["line"].as_u64().unwrap_or(0),
        o["message"].as_str().unwrap_or("").to_owned(),
    )
}

#[test]
fn the_plain_hop_is_accepted() {
    let repo = at_2026_1();
    repo.write(NOVA, nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 0, "{json:#}");
}

#[test]
fn what_kubernetes_reads_otherwise_is_refused_with_its_line() {
    let hop = nova("nova", "2026.2", "2026.2");
    let release_line = hop
        .lines()
        .position(|l| l.contains("openStackRelease"))
        .expect("a release line")
        + 1;
    let cases: Vec<(String, usize, &str)> = vec![
        (
            hop.replacen(
                "openStackRelease: \"2026.2\"",
                "openStackRelease: \"2026.2\" # hop\u{2028}  openStackRelease: \"2027.1\"",
                1,
            ),
            release_line,
            "U+2028",
        ),
        (
            hop.replacen(
                "openStackRelease: \"2026.2\"",
                "openStackRelease: \"2026.2\"\n  <<: {openStackRelease: \"2027.1\"}",
                1,
            ),
            release_line + 1,
            "merge key",
        ),
        (
            format!("{hop}...\n\"\n---#\n{}", nova("nova", "2027.1", "2027.1")),
            hop.lines().count() + 1,
            "document end marker",
        ),
        (
            format!(
                "apiVersion: v1\nkind: List\nitems:\n{}",
                hop.lines()
                    .enumerate()
                    .map(|(i, l)| if i == 0 {
                        format!("- {l}\n")
                    } else {
                        format!("  {l}\n")
                    })
                    .collect::<String>()
            ),
            4,
            "a top-level `items`",
        ),
        (
            "{\"apiVersion\": \"nova.openstack.c5c3.io/v1alpha1\", \"kind\": \"Nova\"}: x\n".into(),
            1,
            "kubectl reads it as JSON",
        ),
    ];
    for (text, line, needle) in cases {
        let repo = at_2026_1();
        repo.write(NOVA, &text);
        repo.commit("nova: one hop");
        let (reason, file, got_line, message) = refusal(&repo);
        assert_eq!(reason, "ManifestInvalid", "{needle}: {message}");
        assert_eq!(file, NOVA, "{needle}");
        assert_eq!(got_line, line as u64, "{needle}: {message}");
        assert!(message.contains(needle), "{needle}: {message}");
    }
}

#[test]
fn a_json_manifest_is_read_like_a_yaml_one() {
    let repo = at_2026_1();
    // The same Nova, in JSON, beside the YAML one: defined twice.
    let json = serde_json::json!({
        "apiVersion": "nova.openstack.c5c3.io/v1alpha1",
        "kind": "Nova",
        "metadata": {"name": "nova", "namespace": "compute"},
        "spec": {
            "openStackRelease": "2027.1",
            "image": {"repository": "ghcr.io/c5c3/nova", "tag": "2027.1"}
        }
    });
    repo.write("standalone/compute/zz-nova.json", json.to_string());
    repo.commit("a second nova, in JSON");
    let (reason, file, _, message) = refusal(&repo);
    assert_eq!(reason, "ManifestInvalid", "{message}");
    assert!(message.contains("defined more than once"), "{message}");
    assert!(
        format!("{file} {message}").contains("zz-nova.json"),
        "{file}: {message}"
    );
    // Alone (the YAML one removed), it is the object: a skip, refused.
    repo.remove(NOVA);
    repo.commit("only the JSON one");
    let (code, json) = check_json(&repo, &["--base", "HEAD~2"]);
    assert_eq!(code, 1, "{json:#}");
    let objects = common::last_objects(&json);
    let nova = common::find(&objects, "Nova", "nova");
    assert_eq!(nova["reason"], "UpgradePathInvalid", "{json:#}");
    assert_eq!(nova["file"], "standalone/compute/zz-nova.json", "{json:#}");
    // A JSON file that is no object is skipped, not refused.
    let repo = at_2026_1();
    repo.write(
        "tools/package.json",
        "{\"name\": \"tools\", \"version\": \"1.0.0\"}",
    );
    repo.commit("a package.json");
    let (code, json) = check_json(&repo, &[]);
    assert_eq!(code, 0, "{json:#}");
}
