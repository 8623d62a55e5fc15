//! The fast reader (`src/yaml_fast.rs`) against serde-saphyr, the reader it
//! stands in for: whenever the fast reader answers, serde-saphyr reads the
//! same text to the same nodes, lines and byte spans; and the manifests of
//! `examples/` take the fast path, so the speed it was built for is kept.

use std::path::Path;

use lockstep_core::manifest::{At, Node};
use lockstep_core::yaml::{Limit, options};
use lockstep_core::yaml_fast;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const LIMIT: Limit = Limit::manifest(8 * 1024 * 1024);

fn saphyr(text: &str) -> Result<Vec<At<Node>>, String> {
    serde_saphyr::from_multiple_with_options::<At<Node>>(text, options(&LIMIT, text.len()))
        .map_err(|e| e.to_string())
}

/// The fast reader's answer, when it gives one, is serde-saphyr's.
fn agree(text: &str) -> bool {
    let Some(fast) = yaml_fast::read(text, &LIMIT) else {
        return false;
    };
    match saphyr(text) {
        Ok(slow) => assert_eq!(fast, slow, "the readers differ on:\n{text}"),
        Err(e) => panic!("the fast reader accepted what serde-saphyr refuses ({e}):\n{text}"),
    }
    true
}

#[test]
fn the_examples_take_the_fast_path_and_read_as_serde_saphyr_reads_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files = vec![root];
    let mut read = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(agree(&text), "{} did not take the fast path", p.display());
            read += 1;
        }
    }
    assert!(read >= 5, "only {read} example manifests");
}

#[test]
fn what_the_fast_reader_leaves_to_serde_saphyr() {
    for text in [
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "base: {x: 1}\nm:\n  <<: {y: 2}\n",
        "a: 1\na: 2\n",
        "a: yes\n",
        // YAML 1.1 reads these keys as booleans: `n` is the key "false".
        "n: x\n",
        "on: x\n",
        "a: On\n",
        "a: 1.5\n",
        "a: 0x1F\n",
        "a: 017\n",
        "a: -0\n",
        "a: 10.0.0.1\n",
        "a: 1:30\n",
        "a: .inf\n",
        "a: 1_000\n",
        "a: 1234567890123456789\n",
        "? [a]\n: b\n",
        ": x\n",
        "%YAML 1.2\n---\na: 1\n",
        "---\n---\na: 1\n",
        "a: [1, 2\n",
        "a:\n\t- 1\n",
    ] {
        assert!(
            yaml_fast::read(text, &LIMIT).is_none(),
            "the fast reader read {text:?} itself"
        );
    }
}

/// Long maps (past the short scan for duplicate keys) read as serde-saphyr
/// reads them, and a duplicate far down one is still left to it, whether
/// the scan or the set of keys finds it.
#[test]
fn long_maps_and_their_duplicates() {
    let long: String = (0..40).map(|i| format!("k{i}: v{i}\n")).collect();
    assert!(agree(&long));
    for dup in ["k0", "k15", "k16", "k39"] {
        let text = format!("{long}{dup}: again\n");
        assert!(
            yaml_fast::read(&text, &LIMIT).is_none(),
            "{dup} twice was read"
        );
    }
    let huge: String = (0..10_000).map(|i| format!("k{i}: {i}\n")).collect();
    let docs = yaml_fast::read(&huge, &LIMIT).expect("a plain map");
    let Node::Map(m) = &docs[0].value else {
        panic!("not a map")
    };
    assert_eq!(m.len(), 10_000);
    assert!(agree(&huge));
}

/// A byte-order mark inside the stream, where serde-saphyr has its own
/// rule (an error before a document's content): whatever the fast reader
/// does with it, it does what serde-saphyr does.
#[test]
fn byte_order_marks_inside_the_stream() {
    for text in [
        "a: 1\n---\n\u{feff}b: 2\n",
        "\u{feff}a: 1\n",
        "a: \u{feff}x\n",
        "a: 1\n\u{feff}\nb: 2\n",
        "---\n\u{feff}\n",
    ] {
        agree(text);
    }
}

#[test]
fn plain_manifests_are_read_fast() {
    for text in [
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: \"1\"\n",
        "a: true\nb: false\nc: null\nd: ~\ne: 0\nf: -12\ng: nova-2026.1\ni: 100Gi\nj: 500m\nk: 10.0.0.0/8\nh: 'q'\nl:\nm: [a, ]\np: {o: }\n",
        "a:\n- 1\n- b: c\n  d: [e, {f: g}]\n---\nb: |\n  text\n  more\n",
        "# a comment\nkey: value # and another\n",
    ] {
        assert!(agree(text), "{text:?} was left to serde-saphyr");
    }
}

/// Scalar spellings where YAML's reading of a plain scalar is subtle.
const WORDS: &[&str] = &[
    "nova",
    "2026.1",
    "2026.2.1",
    "true",
    "True",
    "TRUE",
    "false",
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "n",
    "null",
    "Null",
    "~",
    "",
    "0",
    "00",
    "007",
    "-0",
    "+1",
    "12",
    "-12",
    "1.5",
    "1e3",
    "-1e3",
    ".5",
    ".inf",
    "-.inf",
    ".nan",
    "0x1F",
    "0X1F",
    "0o17",
    "0b11",
    "1_000",
    "123456789012345678",
    "1234567890123456789",
    "99999999999999999999999",
    "inf",
    "Infinity",
    "nan",
    "NaN",
    "a b",
    "a:b",
    "x: y",
    "-",
    "--",
    "<<",
    "#c",
    "é",
    "ñandú",
    "registry.example/nova:2026.1",
    "http://x/y",
    "/var/lib",
    "_x",
    "$x",
    "@x",
    "`x",
    "a\"b",
    "it's",
    "tab\there",
    "line\nbreak",
    " lead",
    "trail ",
    "!tag",
    "&a",
    "*a",
    "%x",
    "{a}",
    "[a]",
    "? x",
    "- x",
    "|",
    ">",
    "100Gi",
    "500m",
    "1 apple",
    "0.1.2",
    "1e",
    "e1",
    "+.inf",
    "-.5",
    "1:30",
    "0o",
    "0x",
    "12abc",
    "0xG",
    "1__0",
    "1e+5",
    "0.5Gi",
    ":x",
    "Yes",
    "nO",
    "oN",
    "NULL",
    "nULL",
    "True ",
    "0b",
    "1e999",
    "-9223372036854775808",
    "\u{feff}x",
    "x\u{feff}",
    "\u{feff}",
    "\r",
    "a\r\nb",
    "\u{85}",
    "\u{2028}x",
    "\0",
];

#[derive(Clone, Debug)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

#[derive(Clone, Debug)]
enum Tree {
    Scalar(String, Style),
    Seq(Vec<Tree>, bool),
    Map(Vec<(String, Style, Tree)>, bool),
}

fn style() -> impl Strategy<Value = Style> {
    prop_oneof![
        4 => Just(Style::Plain),
        1 => Just(Style::Single),
        1 => Just(Style::Double),
        1 => Just(Style::Literal),
    ]
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(WORDS).prop_map(str::to_owned),
        1 => "[a-z0-9.:/_-]{0,12}",
        1 => "[ -~]{0,8}",
    ]
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = (word(), style()).prop_map(|(w, s)| Tree::Scalar(w, s));
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..5), any::<bool>())
                .prop_map(|(v, f)| Tree::Seq(v, f)),
            (
                prop::collection::vec((word(), style(), inner), 0..6),
                any::<bool>()
            )
                .prop_map(|(v, f)| Tree::Map(v, f)),
        ]
    })
}

fn scalar(w: &str, s: &Style, flow: bool, indent: usize, out: &mut String) {
    match s {
        Style::Plain => out.push_str(w),
        Style::Single => {
            out.push('\'');
            out.push_str(&w.replace('\'', "''"));
            out.push('\'');
        }
        Style::Double => out.push_str(&serde_json::to_string(w).unwrap()),
        Style::Literal if flow => out.push_str(&serde_json::to_string(w).unwrap()),
        Style::Literal => {
            out.push_str("|\n");
            for line in w.split('\n') {
                out.push_str(&" ".repeat(indent + 2));
                out.push_str(line);
                out.push('\n');
            }
            // The caller adds a line break after a value; a literal has one.
            out.pop();
        }
    }
}

fn flow(t: &Tree, out: &mut String) {
    match t {
        Tree::Scalar(w, s) => scalar(w, s, true, 0, out),
        Tree::Seq(items, _) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(item, out);
            }
            out.push(']');
        }
        Tree::Map(entries, _) => {
            out.push('{');
            for (i, (k, s, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                scalar(k, s, true, 0, out);
                out.push_str(": ");
                flow(v, out);
            }
            out.push('}');
        }
    }
}

/// Writes `t` as the value after `key: ` or `- ` at `indent`.
fn block(t: &Tree, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match t {
        Tree::Seq(items, false) if !items.is_empty() => {
            out.push('\n');
            for item in items {
                out.push_str(&pad);
                out.push('-');
                if matches!(item, Tree::Scalar(..)) {
                    out.push(' ');
                }
                block(item, indent + 2, out);
            }
        }
        Tree::Map(entries, false) if !entries.is_empty() => {
            out.push('\n');
            for (k, s, v) in entries {
                out.push_str(&pad);
                scalar(k, s, true, indent, out);
                out.push(':');
                if matches!(v, Tree::Scalar(..)) || is_flow(v) {
                    out.push(' ');
                }
                block(v, indent + 2, out);
            }
        }
        Tree::Scalar(w, s) => {
            scalar(w, s, false, indent.saturating_sub(2), out);
            out.push('\n');
        }
        _ => {
            out.push(' ');
            flow(t, out);
            out.push('\n');
        }
    }
}

fn is_flow(t: &Tree) -> bool {
    match t {
        Tree::Seq(v, f) => *f || v.is_empty(),
        Tree::Map(v, f) => *f || v.is_empty(),
        Tree::Scalar(..) => false,
    }
}

fn document(t: &Tree) -> String {
    let mut out = String::new();
    match t {
        Tree::Map(entries, false) if !entries.is_empty() => {
            block(t, 0, &mut out);
            out.remove(0);
        }
        Tree::Seq(items, false) if !items.is_empty() => {
            block(t, 0, &mut out);
            out.remove(0);
        }
        _ => {
            flow(t, &mut out);
            out.push('\n');
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Random documents, many of them not YAML at all or ambiguous: where
    /// the fast reader answers, serde-saphyr answers the same.
    #[test]
    fn the_fast_reader_reads_as_serde_saphyr_reads(
        docs in prop::collection::vec((tree(), any::<bool>(), any::<bool>()), 1..4),
    ) {
        let mut text = String::new();
        for (i, (t, marker, comment)) in docs.iter().enumerate() {
            if *comment {
                text.push_str("# note\n");
            }
            if i > 0 || *marker {
                text.push_str("---\n");
            }
            text.push_str(&document(t));
        }
        agree(&text);
    }
}

/// The generator above reaches the fast path often enough to mean
/// something: the property is not satisfied by the fast reader refusing
/// everything.
#[test]
fn the_random_documents_often_take_the_fast_path() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = tree();
    let (mut fast, mut total) = (0, 0);
    for _ in 0..500 {
        let t = strategy.new_tree(&mut runner).unwrap().current();
        total += 1;
        if agree(&document(&t)) {
            fast += 1;
        }
    }
    assert!(
        fast * 5 >= total,
        "only {fast} of {total} took the fast path"
    );
}
