//! The fast path of reading a manifest: plain block YAML straight from the
//! parser's events into [`Node`]s.
//!
//! serde-saphyr reads any YAML, but through serde's visitor machinery; on a
//! whole tree of 20,000 manifests it spent twice what the parser beneath it
//! (granit-parser, the same one) takes to produce the events
//! (docs/performance.md). Manifests are nearly always maps, sequences,
//! strings, plain integers and booleans. This reader builds exactly those
//! and answers `None` for anything else, and the caller then reads the text
//! with serde-saphyr:
//!
//! - anchors, aliases, tags, merge keys (`<<`), complex or null keys,
//!   duplicate keys, a `%YAML` directive, an empty document;
//! - a plain scalar that YAML might read as something other than a string,
//!   unless it is `true`, `false`, a null spelling, or a decimal integer of
//!   at most 18 digits: floats, octal, hex, `yes`/`on`, `.inf` and the like
//!   (`100Gi` is certainly a string: no number holds a `G`);
//! - any parse error (serde-saphyr reports it, with its line);
//! - anything near the budget's limits (`crate::yaml::Limit`).
//!
//! So a value this reader returns is the one serde-saphyr returns for the
//! same text, line and byte span included: `core/tests/yaml_fast.rs` checks that
//! on random documents and on every manifest under `examples/`.
//!
//! [`read`] first tries `yaml_lines`, which reads the commonest manifests
//! without a parser at all; this module's event reader is for what that
//! declines (flow collections, block scalars, tabs, other scripts).

use std::borrow::Cow;
use std::collections::HashSet;

use granit_parser::{Event, Parser, ScalarStyle, Span, StrInput};

use crate::manifest::{At, Map, Node, key_text};
use crate::yaml::{Limit, MAX_DEPTH};

/// Up to this many keys, a map is searched for a duplicate key by a scan.
const SCAN_KEYS: usize = 16;

/// Reads every document of `text`, or says `None` when serde-saphyr must.
pub fn read(text: &str, limit: &Limit) -> Option<Vec<At<Node>>> {
    // Most manifests need no parser at all.
    if let Some(docs) = crate::yaml_lines::read(text, limit) {
        return Some(docs);
    }
    events(text, limit)
}

/// Reads every document of `text` from the parser's events, or says `None`
/// when serde-saphyr must. Public for its own differential test.
pub fn events(text: &str, limit: &Limit) -> Option<Vec<At<Node>>> {
    // Comments are events when another crate in the build (kube's
    // serde-saphyr) turns the parser's `comments` feature on; none is data.
    let mut parser_options = granit_parser::Options::default();
    parser_options.set_emit_comments(false);
    let mut r = Reader {
        parser: Parser::new_from_str_with_options(text, parser_options),
        // Half the budget: near a limit, serde-saphyr decides and words it.
        nodes_left: limit.max_nodes() / 2,
    };
    let mut docs = Vec::new();
    let max_documents = limit.max_documents() / 2;
    if !matches!(r.next()?.0, Event::StreamStart) {
        return None;
    }
    loop {
        match r.next()?.0 {
            Event::StreamEnd => break,
            Event::DocumentStart(_, None) => {}
            _ => return None,
        }
        let (event, span) = r.next()?;
        let root = r.node(event, span, 0)?;
        // An empty document reads as null; whether and how serde-saphyr
        // keeps one is its business.
        if matches!(root.value, Node::Null) || docs.len() >= max_documents {
            return None;
        }
        docs.push(root);
        if !matches!(r.next()?.0, Event::DocumentEnd) {
            return None;
        }
    }
    // Nothing may follow the end of the stream.
    r.parser.next_event().is_none().then_some(docs)
}

struct Reader<'a> {
    parser: Parser<'a, StrInput<'a>>,
    nodes_left: usize,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Option<(Event<'a>, Span)> {
        self.parser.next_event()?.ok()
    }

    fn node(&mut self, event: Event<'a>, span: Span, depth: usize) -> Option<At<Node>> {
        // Half the depth limit, for the same reason as the node budget.
        if depth > MAX_DEPTH / 2 {
            return None;
        }
        self.nodes_left = self.nodes_left.checked_sub(1)?;
        let value = match event {
            Event::Scalar(text, style, 0, None) => scalar(text, style)?,
            Event::SequenceStart(_, 0, None) => {
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::SequenceEnd) {
                        break;
                    }
                    items.push(self.node(event, span, depth + 1)?.value);
                }
                Node::Seq(items)
            }
            Event::MappingStart(_, 0, None) => Node::Map(self.map(depth)?),
            _ => return None,
        };
        Some(at(value, &span))
    }

    fn map(&mut self, depth: usize) -> Option<Map> {
        let mut map: Map = Vec::new();
        let mut keys = Keys::default();
        loop {
            let (event, _) = self.next()?;
            let key = match event {
                Event::MappingEnd => return Some(map),
                Event::Scalar(text, style, 0, None) => {
                    if style == ScalarStyle::Plain && text == "<<" {
                        return None;
                    }
                    // A null key is left to serde-saphyr with the rest.
                    match scalar(text, style)? {
                        Node::Null => return None,
                        key => key_text(key),
                    }
                }
                _ => return None,
            };
            // A key counts as a node, as in serde-saphyr's budget.
            self.nodes_left = self.nodes_left.checked_sub(1)?;
            if !keys.is_new(&map, &key) {
                return None;
            }
            let (event, span) = self.next()?;
            let value = self.node(event, span, depth + 1)?;
            map.push((key, value));
        }
    }
}

/// The keys of one map so far, for finding a duplicate: serde-saphyr
/// refuses one, so the fast readers leave such a file to it.
#[derive(Default)]
pub(crate) struct Keys {
    /// Filled once a map is long enough that a scan of its keys for each
    /// new one would make a file of many keys quadratic.
    seen: Option<HashSet<String>>,
}

impl Keys {
    /// Whether `key` is not yet among `map`'s keys (which it is about to
    /// join).
    pub(crate) fn is_new(&mut self, map: &Map, key: &str) -> bool {
        if let Some(set) = &mut self.seen {
            return set.insert(key.to_owned());
        }
        if map.len() < SCAN_KEYS {
            return map.iter().all(|(k, _)| k != key);
        }
        let mut set: HashSet<String> = map.iter().map(|(k, _)| k.clone()).collect();
        let new = set.insert(key.to_owned());
        self.seen = Some(set);
        new
    }
}

fn at(value: Node, span: &Span) -> At<Node> {
    let start = span.start.byte_offset();
    let end = span.end.byte_offset();
    At {
        value,
        line: span.start.line() as u64,
        span: start
            .zip(end)
            .map(|(s, e)| (s as u64, e.saturating_sub(s) as u64)),
        aliased: false,
    }
}

/// Every byte some numeric spelling may hold: digits, signs, points,
/// underscores, exponents, radix prefixes and hex digits, `inf`, `infinity`
/// and `nan` in any case, sexagesimal colons, inner blanks.
const NUMERIC: &[u8] = b"0123456789+-._:eExXoObBaAcCdDfFiInNtTyY \t";

/// What an untagged scalar reads as, when that is certain without
/// serde-saphyr's own rules.
fn scalar(text: Cow<'_, str>, style: ScalarStyle) -> Option<Node> {
    if style != ScalarStyle::Plain {
        return Some(Node::Str(text.into_owned()));
    }
    plain(&text)
}

/// What a plain scalar reads as, when that is certain without
/// serde-saphyr's own rules.
pub(crate) fn plain(text: &str) -> Option<Node> {
    let t = text.trim_matches([' ', '\t', '\r', '\n']);
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return Some(Node::Null);
    }
    match t {
        "true" => return Some(Node::Bool(true)),
        "false" => return Some(Node::Bool(false)),
        _ => {}
    }
    // YAML 1.1 booleans in any case, and what Rust's float parser takes for
    // a number although YAML does not.
    const WORDS: [&str; 11] = [
        "y", "yes", "on", "n", "no", "off", "true", "false", "inf", "infinity", "nan",
    ];
    if WORDS.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        return None;
    }
    let first = *t.as_bytes().first()?;
    if !first.is_ascii_digit() && !b"+-._~".contains(&first) {
        return Some(Node::Str(text.to_owned()));
    }
    // A byte no number of any spelling holds (`100Gi`, `500m`, `1/2`).
    if t.bytes().any(|b| !NUMERIC.contains(&b)) {
        return Some(Node::Str(text.to_owned()));
    }
    let (negative, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    let decimal = digits == "0"
        || (!digits.is_empty()
            && digits.len() <= 18
            && !digits.starts_with('0')
            && digits.bytes().all(|b| b.is_ascii_digit()));
    if !decimal || (negative && digits == "0") {
        return None;
    }
    let n: i128 = digits.parse().ok()?;
    Some(Node::Int(if negative { -n } else { n }))
}
