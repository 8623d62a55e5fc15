//! The fast readers (`src/yaml_lines.rs`, line by line; `src/yaml_fast.rs`,
//! from the parser's events) against serde-saphyr, the reader they stand in
//! for: whenever one answers, serde-saphyr reads the same text to the same
//! nodes, lines and byte spans; and the manifests of `examples/` take the
//! fast path, so the speed it was built for is kept.

use std::path::Path;

use lockstep_core::manifest::{At, Node};
use lockstep_core::yaml::{Limit, manifest_options};
use lockstep_core::{yaml_fast, yaml_lines};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const LIMIT: Limit = Limit::manifest(8 * 1024 * 1024);

type Reader = fn(&str, &Limit) -> Option<Vec<At<Node>>>;

/// Each reader, by name: the line reader, the event reader, and the two
/// as `parse_file` calls them.
const READERS: [(&str, Reader); 3] = [
    ("the line reader", yaml_lines::read),
    ("the event reader", yaml_fast::events),
    ("the fast path", yaml_fast::read),
];

fn saphyr(text: &str) -> Result<Vec<At<Node>>, String> {
    serde_saphyr::from_multiple_with_options::<At<Node>>(text, manifest_options(&LIMIT, text.len()))
        .map_err(|e| e.to_string())
}

/// Every fast reader's answer, when it gives one, is serde-saphyr's; says
/// which answered (in the order of [`READERS`]).
fn answers(text: &str) -> [bool; 3] {
    let mut answered = [false; 3];
    let mut slow = None;
    for (i, (name, read)) in READERS.iter().enumerate() {
        let Some(fast) = read(text, &LIMIT) else {
            continue;
        };
        answered[i] = true;
        match slow.get_or_insert_with(|| saphyr(text)) {
            Ok(slow) => assert_eq!(&fast, slow, "{name} and serde-saphyr differ on:\n{text}"),
            Err(e) => {
                panic!("{name} accepted what serde-saphyr refuses ({e}):\n{text}")
            }
        }
    }
    answered
}

/// The fast path's answer, when it gives one, is serde-saphyr's; so is
/// each of its readers'.
fn agree(text: &str) -> bool {
    answers(text)[2]
}

/// As [`agree`], for the line reader.
fn lines_agree(text: &str) -> bool {
    answers(text)[0]
}

#[test]
fn the_examples_take_the_line_readers_path_and_read_as_serde_saphyr_reads_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files = vec![root];
    let mut read = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(
                lines_agree(&text),
                "{} did not take the line reader's path",
                p.display()
            );
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

/// What the line reader declines and the event reader still reads: each
/// text goes one step down, not straight to serde-saphyr.
#[test]
fn what_the_line_reader_leaves_to_the_event_reader() {
    for text in [
        "a: [1, 2]\n",
        "a: {b: c}\n",
        "a: |\n  text\n",
        "a: >\n  text\n",
        "a: b\n  continued\n",
        "a: b\n  # a deeper comment\nc: d\n",
        "a: \"tab\\there\"\n",
        "a: \"\\u00e9\"\n",
        "a: caf\u{e9}\n",
        "a:\n\t- 1\n",
        "a: 1\r\nb: 2\r\n",
        "- - a\n",
        "a b: c\n",
        "a: b\n...\n",
        "--- a\n",
        "\"a\" : b\n",
    ] {
        let declined = yaml_lines::read(text, &LIMIT).is_none();
        assert!(declined, "the line reader read {text:?}");
        if !text.contains('\t') {
            assert!(agree(text), "the event reader declined {text:?} too");
        }
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
    tree_of(word().boxed(), style().boxed(), true)
}

/// Words a manifest holds: names, versions, numbers, quantities, the
/// spellings of booleans and nulls.
fn manifest_word() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => prop::sample::select(WORDS).prop_map(str::to_owned),
        8 => "[a-z][a-z0-9.:/_-]{0,12}",
        2 => "-?[0-9]{1,4}(Gi|m)?",
    ]
}

/// Trees as manifests are written: block collections that are never
/// empty, scalars plain or quoted on one line.
fn manifest_tree() -> impl Strategy<Value = Tree> {
    let style = prop_oneof![
        5 => Just(Style::Plain),
        1 => Just(Style::Single),
        1 => Just(Style::Double),
    ];
    // A manifest's document is a map or a sequence.
    tree_of(manifest_word().boxed(), style.boxed(), false).prop_map(|t| match t {
        Tree::Scalar(..) => Tree::Map(vec![("kind".into(), Style::Plain, t)], false),
        t => t,
    })
}

fn tree_of(
    word: BoxedStrategy<String>,
    style: BoxedStrategy<Style>,
    empty_and_flow: bool,
) -> impl Strategy<Value = Tree> {
    let leaf = (word.clone(), style.clone()).prop_map(|(w, s)| Tree::Scalar(w, s));
    let (least, flow) = if empty_and_flow {
        (0, any::<bool>().boxed())
    } else {
        (1, Just(false).boxed())
    };
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), least..5), flow.clone())
                .prop_map(|(v, f)| Tree::Seq(v, f)),
            (
                prop::collection::vec((word.clone(), style.clone(), inner), least..6),
                flow.clone()
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

/// How a document is laid out: the spellings of one tree that block YAML
/// allows, which the line reader must all read alike.
#[derive(Clone, Debug)]
struct Layout {
    /// Columns a nested block is indented by.
    step: usize,
    /// A map in a sequence starts on its dash's line (`- k: v`).
    compact: bool,
    /// A sequence under a key stands at the key's column.
    indentless: bool,
    /// A comment after each scalar value, and a comment line before some
    /// entries.
    comments: bool,
    /// Blanks after a key's colon or an item's dash.
    blanks: usize,
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        1..5usize,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1..3usize,
    )
        .prop_map(|(step, compact, indentless, comments, blanks)| Layout {
            step,
            compact,
            indentless,
            comments,
            blanks,
        })
}

fn is_block(t: &Tree) -> bool {
    !is_flow(t) && !matches!(t, Tree::Scalar(..))
}

/// Writes the entries of block collection `t` at column `col`; the first
/// goes on the line already begun when `inline` (after a compact `- `).
fn entries(t: &Tree, col: usize, inline: bool, out: &mut String, lay: &Layout) {
    let pad = " ".repeat(col);
    let begin = |n: usize, out: &mut String| {
        if n > 0 || !inline {
            if lay.comments && n % 2 == 1 {
                out.push_str(&pad);
                out.push_str("# between\n");
            }
            out.push_str(&pad);
        }
    };
    match t {
        Tree::Seq(items, _) => {
            for (n, item) in items.iter().enumerate() {
                begin(n, out);
                out.push('-');
                value(item, col, true, out, lay);
            }
        }
        Tree::Map(entries, _) => {
            for (n, (k, s, v)) in entries.iter().enumerate() {
                begin(n, out);
                scalar(k, s, true, col, out);
                out.push(':');
                value(v, col, false, out, lay);
            }
        }
        Tree::Scalar(..) => unreachable!("entries of a scalar"),
    }
}

/// Writes `t` after a key's colon, or after a dash (`dash`), standing at
/// column `col`.
fn value(t: &Tree, col: usize, dash: bool, out: &mut String, lay: &Layout) {
    let blanks = " ".repeat(lay.blanks);
    match t {
        Tree::Scalar(w, s) => {
            out.push_str(&blanks);
            scalar(w, s, false, col, out);
            if lay.comments && !matches!(s, Style::Literal) {
                out.push_str(" # note");
            }
            out.push('\n');
        }
        Tree::Map(..) if is_block(t) && dash && lay.compact => {
            out.push_str(&blanks);
            entries(t, col + 1 + lay.blanks, true, out, lay);
        }
        Tree::Seq(..) if is_block(t) && !dash && lay.indentless => {
            out.push('\n');
            entries(t, col, false, out, lay);
        }
        _ if is_block(t) => {
            out.push('\n');
            entries(t, col + lay.step, false, out, lay);
        }
        _ => {
            out.push_str(&blanks);
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

fn document(t: &Tree, lay: &Layout) -> String {
    let mut out = String::new();
    if is_block(t) {
        entries(t, 0, false, &mut out, lay);
    } else {
        flow(t, &mut out);
        out.push('\n');
    }
    out
}

fn stream(docs: &[(Tree, bool, bool)], lay: &Layout) -> String {
    let mut text = String::new();
    for (i, (t, marker, comment)) in docs.iter().enumerate() {
        if *comment {
            text.push_str("# note\n");
        }
        if i > 0 || *marker {
            text.push_str("---\n");
        }
        text.push_str(&document(t, lay));
    }
    text
}

/// Fragments that change how YAML reads a text, for random edits.
const EDITS: &[&str] = &[
    " ", "  ", "\n", "\n  ", "\n ", "- ", "-", ": ", ":", "#", " #", "---\n", "...\n", "\t", "\r",
    "'", "\"", "\\", "a", "1", "&a ", "*a", "!", "|", ">", "{", "}", "[", "]", ",", "?", "%", "~",
    "\u{feff}", "é", "\n- ", "\nk: v\n", "  k: v", "- k: v", "<<: ",
];

/// A random edit of a text: a fragment inserted, or a range deleted.
#[derive(Clone, Debug)]
enum Edit {
    Insert(prop::sample::Index, &'static str),
    Delete(prop::sample::Index, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<prop::sample::Index>(), prop::sample::select(EDITS))
            .prop_map(|(at, f)| Edit::Insert(at, f)),
        1 => (any::<prop::sample::Index>(), 1..4usize).prop_map(|(at, n)| Edit::Delete(at, n)),
    ]
}

fn apply(text: &mut String, edit: &Edit) {
    let boundaries: Vec<usize> = (0..=text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    match edit {
        Edit::Insert(at, fragment) => text.insert_str(*at.get(&boundaries), fragment),
        Edit::Delete(at, n) => {
            let i = at.index(boundaries.len());
            let (from, to) = (boundaries[i], boundaries[(i + n).min(boundaries.len() - 1)]);
            text.replace_range(from..to, "");
        }
    }
}

proptest! {
    // 10,000 cases in CI; `PROPTEST_CASES` asks for more.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(10_000),
    ))]

    /// Random documents, many of them not YAML at all or ambiguous: where
    /// a fast reader answers, serde-saphyr answers the same.
    #[test]
    fn the_fast_readers_read_as_serde_saphyr_reads(
        docs in prop::collection::vec(
            (prop_oneof![tree(), manifest_tree()], any::<bool>(), any::<bool>()),
            1..4,
        ),
        lay in layout(),
    ) {
        answers(&stream(&docs, &lay));
    }

    /// The same documents after a few random edits, the spellings of
    /// indentation, continuation and markers no generator thinks of: where
    /// a fast reader answers, serde-saphyr answers the same.
    #[test]
    fn edited_documents_read_as_serde_saphyr_reads_them(
        docs in prop::collection::vec(
            (prop_oneof![tree(), manifest_tree()], any::<bool>(), any::<bool>()),
            1..3,
        ),
        lay in layout(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let mut text = stream(&docs, &lay);
        for e in &edits {
            apply(&mut text, e);
        }
        answers(&text);
    }
}

/// The generators above reach each fast reader often enough to mean
/// something: the properties are not satisfied by a reader refusing
/// everything.
#[test]
fn the_random_documents_often_take_the_fast_paths() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let total = 500;
    // Any document: the event reader and the fast path.
    let mut answered = [0; 3];
    let any = (tree(), layout());
    for _ in 0..total {
        let (t, lay) = any.new_tree(&mut runner).unwrap().current();
        for (n, a) in answered.iter_mut().zip(answers(&document(&t, &lay))) {
            *n += usize::from(a);
        }
    }
    for ((name, _), n) in READERS.iter().zip(answered).skip(1) {
        assert!(n * 5 >= total, "{name} read only {n} of {total}");
    }
    // Documents written as manifests are: the line reader, edited or not.
    let (mut lines, mut edited_lines) = (0, 0);
    let manifests = (manifest_tree(), layout(), edit());
    for _ in 0..total {
        let (t, lay, e) = manifests.new_tree(&mut runner).unwrap().current();
        let mut text = document(&t, &lay);
        lines += usize::from(lines_agree(&text));
        apply(&mut text, &e);
        edited_lines += usize::from(lines_agree(&text));
    }
    assert!(
        lines * 2 >= total,
        "the line reader read only {lines} of {total} manifests"
    );
    assert!(
        edited_lines * 5 >= total,
        "the line reader read only {edited_lines} of {total} edited manifests"
    );
}
