//! The configuration file's JSON Schema under plans/ is generated from the
//! Rust types; this fails when the two drift. Regenerate with
//! `cargo run -- config-schema > plans/lockstep-config.schema.json`.

use std::path::Path;

fn committed() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/lockstep-config.schema.json"),
    )
    .expect("plans/lockstep-config.schema.json exists")
}

#[test]
fn the_committed_schema_is_the_generated_one() {
    let generated = lockstep::config::schema_json();
    assert!(
        committed() == generated,
        "plans/lockstep-config.schema.json is stale: run `cargo run -- config-schema > plans/lockstep-config.schema.json`"
    );
}

#[test]
fn the_schema_accepts_the_samples_and_refuses_mistakes() {
    let schema: serde_json::Value = serde_json::from_str(&committed()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("plans");
    let mut samples = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("lockstep-config") || !name.ends_with(".yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        // And the daemon itself loads it.
        let c = lockstep::config::Config::load(&path).unwrap();
        c.validate().unwrap();
        samples += 1;
    }
    assert!(samples >= 2, "expected the config samples under plans/");
    for bad in [
        serde_json::json!({"source": {"repo": "/x", "brnch": "main"}}),
        serde_json::json!({"source": {"repo": "/x", "pollInterval": "soon"}}),
        serde_json::json!({"cluster": {"mode": "docker"}}),
        serde_json::json!({"report": {"kind": "bitbucket"}}),
    ] {
        assert!(!validator.is_valid(&bad), "the schema accepted {bad}");
    }
}
