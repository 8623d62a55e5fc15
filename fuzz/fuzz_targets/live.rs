//! Live files: what `kubectl get <kinds> -A -o yaml|json` printed (or
//! anything passed as `--live`).
//!
//! Asserts: `parse_live` never panics; an error names the file; the
//! accessors agree with the fields; and YAML and JSON read the same: the
//! documents re-written as one `kubectl -o json` List (`serde_json`, as
//! kubectl would print them, DEL and C1 controls raw) parse to the same
//! snapshot, and an item YAML refuses is refused in JSON too.
//!
//! The rule for nothing where an object could be (`src/live.rs`, module
//! doc): a document that holds no value (a stray `---`, `null`, a tag on
//! nothing) is no object, so it is no item of the JSON List either; a `null`
//! item of a List is refused, wherever it stands.
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
    // serde-saphyr drops untagged null documents itself; a tag on nothing
    // (`!x`) arrives here as null. Either way it is no item.
    let nulls = docs.iter().filter(|d| d.is_null()).count();
    let items: Vec<_> = docs.into_iter().filter(|d| !d.is_null()).collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let Ok(json) = serde_json::to_string_pretty(&list) else {
        return;
    };
    let again = parse_live(FILE, &json);
    match (&result, &again) {
        // The twin is the List and two levels deeper: only the nesting
        // limit may refuse it as a whole where YAML read the documents.
        (_, Err(LiveError::Parse { message, .. })) if message.starts_with(DEEP) => return,
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

    // A null document is skipped, but the same null as a List's item is a
    // hole where an object was: refused, naming the item, before any other.
    if nulls > 0 {
        let mut with_hole = vec![serde_json::Value::Null];
        with_hole.extend(items);
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": with_hole});
        let Ok(json) = serde_json::to_string_pretty(&list) else {
            return;
        };
        // The hole is the first line that is only `null` (the List's own
        // fields are strings).
        let hole = json
            .lines()
            .position(|l| matches!(l.trim(), "null" | "null,"))
            .and_then(|i| u32::try_from(i + 1).ok());
        match parse_live(FILE, &json) {
            Err(LiveError::NotObject {
                item, found, line, ..
            }) => {
                assert_eq!(
                    (item.as_str(), found, Some(line)),
                    ("items[0]", "null", hole),
                    "{json}"
                )
            }
            Err(LiveError::Parse { message, .. }) if message.starts_with(DEEP) => {}
            other => panic!("a null item gave {other:?}\n{json}"),
        }
    }
});

/// How the nesting limit's refusal starts (`src/yaml.rs`).
const DEEP: &str = "the snapshot nests lists and mappings more than";
