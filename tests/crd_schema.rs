//! The upstream CRD schemas (`../shared/fixtures/crds/`) judge every manifest
//! the project ships: the example fleet and the manifests the tests derive
//! from it. A manifest lockstep accepts must also be accepted by the CRD's
//! OpenAPI schema (strictly: unknown fields are errors, as with
//! `kubectl apply --validate=strict`) and by its CEL rules
//! (`x-kubernetes-validations`, evaluated with the `cel` crate; rules that
//! compare with `oldSelf` apply only to updates and are left out).
//!
//! The schemas are read from `../shared` (or `$LOCKSTEP_SHARED`), never
//! copied into the project.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

struct Crd {
    validator: jsonschema::Validator,
    schema: Value,
}

/// (group, kind) → schema, loaded once per test binary.
fn crds() -> &'static HashMap<(String, String), Crd> {
    static CRDS: std::sync::OnceLock<HashMap<(String, String), Crd>> = std::sync::OnceLock::new();
    CRDS.get_or_init(|| {
        let dir = common::shared_crds();
        let mut out = HashMap::new();
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read CRD");
            let crd: Value = serde_saphyr::from_str(&text).expect("CRD parses");
            let group = crd["spec"]["group"].as_str().expect("group").to_owned();
            let kind = crd["spec"]["names"]["kind"]
                .as_str()
                .expect("kind")
                .to_owned();
            let mut schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
            strict(&mut schema);
            let validator = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft7)
                .build(&schema)
                .expect("schema compiles");
            out.insert((group, kind), Crd { validator, schema });
        }
        assert!(
            out.len() >= 9,
            "expected the nine CRDs in {}",
            dir.display()
        );
        out
    })
}

/// Makes unknown fields errors, as the API server's strict field validation does.
fn strict(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let preserve = map
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if map.contains_key("properties")
                && !map.contains_key("additionalProperties")
                && !preserve
            {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            for v in map.values_mut() {
                strict(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strict),
        _ => {}
    }
}

#[derive(Default, Debug)]
struct CelTally {
    evaluated: usize,
    unsupported: Vec<String>,
    failures: Vec<String>,
    xor_checked: usize,
}

/// Evaluates every `x-kubernetes-validations` rule whose node is present.
fn cel_rules(schema: &Value, value: &Value, path: &str, tally: &mut CelTally) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for r in rules {
            let Some(rule) = r.get("rule").and_then(Value::as_str) else {
                continue;
            };
            if rule.contains("oldSelf") {
                continue;
            }
            let program = match cel::Program::compile(rule) {
                Ok(p) => p,
                Err(e) => {
                    tally.unsupported.push(format!("{path}: {rule}: {e}"));
                    continue;
                }
            };
            let mut ctx = cel::Context::default();
            let Ok(v) = cel::to_value(value) else {
                continue;
            };
            ctx.add_variable_from_value("self", v);
            match program.execute(&ctx) {
                Ok(cel::Value::Bool(true)) => {
                    tally.evaluated += 1;
                    if rule.contains("has(self.tag) != has(self.digest)") {
                        tally.xor_checked += 1;
                    }
                }
                Ok(other) => tally.failures.push(format!(
                    "{path}: rule {rule:?} gave {other:?}: {}",
                    r.get("message").and_then(Value::as_str).unwrap_or("")
                )),
                Err(e) => tally.unsupported.push(format!("{path}: {rule}: {e:?}")),
            }
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, v) in map {
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    cel_rules(s, v, &format!("{path}.{k}"), tally);
                } else if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object())
                {
                    cel_rules(s, v, &format!("{path}.{k}"), tally);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    cel_rules(s, v, &format!("{path}[{i}]"), tally);
                }
            }
        }
        _ => {}
    }
}

/// Validates one document; returns the schema and CEL errors (empty = valid).
fn validate(doc: &Value, tally: &mut CelTally) -> Option<Vec<String>> {
    let api = doc["apiVersion"].as_str()?;
    let group = api.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = doc["kind"].as_str()?;
    let crd = crds().get(&(group.to_owned(), kind.to_owned()))?;
    let mut errors: Vec<String> = crd
        .validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    let before = tally.failures.len();
    cel_rules(&crd.schema, doc, "", tally);
    errors.extend(tally.failures.drain(before..));
    Some(errors)
}

fn docs_of(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(text).expect("manifest parses")
}

/// Every shipped manifest: the example fleet, and what the tests derive from it.
fn shipped() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from(common::EXAMPLES)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("examples dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if lockstep::manifest::is_manifest_path(&p.to_string_lossy()) {
                out.push((
                    p.display().to_string(),
                    std::fs::read_to_string(&p).expect("read"),
                ));
            }
        }
    }
    for r in ["2025.2", "2026.1", "2026.2", "2027.1"] {
        out.push((format!("nova({r})"), common::nova("nova", r, r)));
        out.push((
            format!("nova({r}-p1)"),
            common::nova("nova", r, &format!("{r}-p1")),
        ));
        out.push((format!("staging({r})"), common::staging(r)));
        out.push((format!("prod({r})"), common::prod(r, r)));
        out.push((format!("glance_digest({r})"), common::glance_digest(r, 'b')));
    }
    out
}

#[test]
fn every_shipped_manifest_is_valid_for_the_upstream_crds() {
    let mut tally = CelTally::default();
    let mut validated = 0;
    for (name, text) in shipped() {
        for doc in docs_of(&text) {
            if let Some(errors) = validate(&doc, &mut tally) {
                assert!(
                    errors.is_empty(),
                    "{name}: {} {}: {errors:#?}",
                    doc["kind"],
                    doc["metadata"]["name"]
                );
                validated += 1;
            }
        }
    }
    assert!(validated >= 24, "validated only {validated} documents");
    assert!(tally.evaluated > 50, "CEL rules evaluated: {tally:#?}");
    assert!(
        tally.xor_checked >= 10,
        "the tag/digest rule must be evaluated: {tally:#?}"
    );
    eprintln!(
        "validated {validated} documents; {} CEL rules held; {} rules could not be evaluated by the cel crate",
        tally.evaluated,
        tally.unsupported.len()
    );
}

#[test]
fn lockstep_and_the_crds_agree_on_what_is_valid() {
    // Every shipped manifest lockstep reads without a problem.
    for (name, text) in shipped() {
        let parsed = lockstep::manifest::parse_file(&name, text.as_bytes(), 1 << 20);
        assert!(parsed.problems.is_empty(), "{name}: {:?}", parsed.problems);
    }
    // And what lockstep refuses as ManifestInvalid, the CRDs refuse too:
    // proof that this check can fail.
    let good = common::nova("nova", "2026.1", "2026.1");
    let broken = [
        good.replace(
            "    tag: \"2026.1\"",
            &format!("    tag: \"2026.1\"\n    digest: sha256:{}", "c".repeat(64)),
        ),
        good.replace("    tag: \"2026.1\"", ""),
        good.replace("openStackRelease: \"2026.1\"", "openStackRelease: 2026.1"),
        good.replace(
            "openStackRelease: \"2026.1\"",
            "openStackRelease: \"2026.3\"",
        ),
        good.replace("repository: ghcr.io/c5c3/nova", "repository: GHCR.io/Nova"),
        good.replace("tag: \"2026.1\"", "tag: \"\""),
    ];
    for text in &broken {
        let doc = &docs_of(text)[0];
        let mut tally = CelTally::default();
        let errors = validate(doc, &mut tally).expect("Nova CRD");
        assert!(!errors.is_empty(), "the CRD accepted:\n{text}");
        let parsed = lockstep::manifest::parse_file("n.yaml", text.as_bytes(), 1 << 20);
        let desired = lockstep::desired::expand(&parsed.documents);
        let gate_refuses = !parsed.problems.is_empty()
            || desired.iter().any(|d| {
                d.release
                    .as_deref()
                    .is_some_and(|r| lockstep::release::Release::parse_strict(r).is_err())
            });
        assert!(gate_refuses, "lockstep would accept:\n{text}");
    }
    // An unknown field is a CRD error (strict validation), though lockstep tolerates it.
    let doc =
        &docs_of(&good.replace("  region: RegionTwo", "  region: RegionTwo\n  regoin: typo"))[0];
    assert!(
        !validate(doc, &mut CelTally::default())
            .expect("Nova CRD")
            .is_empty()
    );
}
