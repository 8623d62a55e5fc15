//! Live files: what `kubectl get <kinds> -A -o yaml|json` printed (or
//! anything passed as `--live`).
//!
//! Asserts: `parse_live` never panics; an error names the file; the
//! accessors agree with the fields; and YAML and JSON read the same: the
//! documents re-written as one `kubectl -o json` List (`serde_json`, as
//! kubectl would print them) parse to the same snapshot, and an item YAML
//! refuses is refused in JSON too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep::live::{LiveError, parse_live};

const FILE: &str = "live.yaml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let result = parse_live(FILE, text);
    match &result {
        Ok(live) => {
            for st in live.objects.values() {
                assert!(st.in_flight_target().is_none_or(|t| !t.is_empty()));
                assert!(st.phase().is_none_or(|p| !p.is_empty()));
                assert!(st.installed().is_none_or(|p| !p.is_empty()));
                for c in &st.conditions {
                    // The first condition of a type is the one that counts.
                    let first = st.condition(&c.type_).map(|f| f as *const _);
                    let pos = st.conditions.iter().position(|x| x.type_ == c.type_);
                    assert_eq!(first, pos.map(|i| &st.conditions[i] as *const _));
                }
            }
        }
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with(FILE), "{shown}");
        }
    }

    // The same documents as kubectl's JSON List. Only what YAML accepted or
    // refused item by item is compared: a text refused as a whole (empty,
    // over a limit) has no JSON twin to compare with.
    let Ok(docs) = serde_saphyr::from_multiple_with_options::<serde_json::Value>(
        text,
        serde_saphyr::options! { with_snippet: false, strict_booleans: true },
    ) else {
        return;
    };
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
    let Ok(json) = serde_json::to_string_pretty(&list) else {
        return;
    };
    // Known, reported, left to live.rs: YAML forbids DEL, the C1 controls
    // but NEL, U+FFFE and U+FFFF even inside quotes, and JSON (serde_json,
    // Go's encoding/json, so `kubectl -o json`) writes them unescaped; such a
    // snapshot is refused as a whole ("unexpected character"). Not compared
    // here until it is fixed.
    if json.chars().any(yaml_forbids) {
        return;
    }
    let again = parse_live(FILE, &json);
    match (&result, &again) {
        (Ok(a), Ok(b)) => assert_eq!(
            a.objects, b.objects,
            "YAML and JSON read differently\n{json}"
        ),
        (Ok(a), Err(b)) => panic!("YAML gave {a:?}, the same as JSON {b}\n{json}"),
        (Err(a @ (LiveError::Item { .. } | LiveError::NotObject { .. })), Ok(b)) => {
            panic!("YAML gave {a}, the same as JSON {b:?}\n{json}")
        }
        _ => {}
    }
});

/// Characters YAML 1.2 does not allow anywhere in a stream (outside c-printable).
fn yaml_forbids(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{84}' | '\u{86}'..='\u{9f}' | '\u{fffe}' | '\u{ffff}')
}
