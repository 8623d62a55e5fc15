//! The fastest path of reading a manifest: block YAML read line by line,
//! without a YAML parser's tokens and events.
//!
//! After the fast reader (`yaml_fast`), the parser beneath it was most of a
//! whole-tree check: granit-parser moves large tokens and events for every
//! scalar (docs/performance.md). Manifests written by hand or by a
//! generator are nearly always the same few shapes: `key: value` lines and
//! `- item` lines, indented with spaces, values plain or quoted on one line,
//! comments. This reader reads exactly those and answers `None` for
//! anything else; `yaml_fast` then reads the text with the parser:
//!
//! - any byte but printable ASCII and the line feed (tabs, carriage
//!   returns, byte-order marks, any other script);
//! - flow collections other than an empty `{}` or `[]`, block scalars (`|`, `>`), anchors, aliases, tags,
//!   directives, `...`, text after `---`, an empty document;
//! - a scalar continued on another line, or any line indented deeper than
//!   a scalar it follows (a comment included);
//! - double-quoted text with an escape, a key that is not a short plain
//!   word or quoted, a key followed by a blank before its colon;
//! - a `- -` item;
//! - a plain scalar whose reading is not certain (the same rules as
//!   `yaml_fast`'s), duplicate or null keys, merge keys;
//! - anything past half the budget's limits (`crate::yaml::Limit`).
//!
//! So a value this reader returns is the one serde-saphyr returns for the
//! same text, line and byte span included: `core/tests/yaml_fast.rs` checks
//! that on random documents, on random edits of them, and on every manifest
//! under `examples/`.

use crate::manifest::{At, Map, Node, key_text};
use crate::yaml::{Limit, MAX_DEPTH};
use crate::yaml_fast::{Keys, plain};

/// Longest plain key read here; YAML caps an implicit key at 1,024
/// characters, so keys near that are the parser's to judge.
const MAX_KEY: usize = 256;

/// Bytes that may not start a plain scalar here: YAML's indicators, and
/// the quotes, which start the quoted styles.
const INDICATORS: &[u8] = b"-?:,[]{}#&*!|>'\"%@`";

/// Reads every document of `text`, or says `None` when the parser must.
pub fn read(text: &str, limit: &Limit) -> Option<Vec<At<Node>>> {
    if !text
        .bytes()
        .all(|b| b == b'\n' || (b' '..=b'~').contains(&b))
    {
        return None;
    }
    let lines = lines(text)?;
    let mut r = Reader {
        text,
        lines,
        i: 0,
        nodes_left: limit.max_nodes() / 2,
    };
    let max_documents = limit.max_documents() / 2;
    let mut docs = Vec::new();
    // A marker before the first document only opens it.
    r.skip_comments();
    if r.kind() == Some(Kind::DocStart) {
        r.i += 1;
    }
    loop {
        if r.peek().is_none() || docs.len() >= max_documents {
            // An empty document: whether and how serde-saphyr keeps one is
            // its business.
            return None;
        }
        docs.push(r.block(0)?);
        if r.peek().is_some() {
            return None;
        }
        match r.kind() {
            None => return Some(docs),
            Some(_) => r.i += 1,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Content,
    Comment,
    /// `---` alone on its line.
    DocStart,
}

/// A line that is not blank.
struct Line {
    /// Byte offset of its first byte.
    start: usize,
    /// Byte offset of its line feed, or of the end of the text.
    end: usize,
    /// Spaces before its first other byte.
    indent: usize,
    /// 1-based.
    number: u64,
    kind: Kind,
}

fn lines(text: &str) -> Option<Vec<Line>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut number = 0;
    while start < bytes.len() {
        number += 1;
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |p| start + p);
        let line = &bytes[start..end];
        let indent = line.iter().take_while(|&&b| b == b' ').count();
        let kind = match line.get(indent) {
            None => None,
            Some(b'#') => Some(Kind::Comment),
            // Directives, document ends and text after a marker are the
            // parser's.
            Some(b'%') if indent == 0 => return None,
            _ if line == b"---" => Some(Kind::DocStart),
            _ if indent == 0 && (line.starts_with(b"---") || line.starts_with(b"...")) => {
                return None;
            }
            _ => Some(Kind::Content),
        };
        if let Some(kind) = kind {
            out.push(Line {
                start,
                end,
                indent,
                number,
                kind,
            });
        }
        start = end + 1;
    }
    Some(out)
}

/// A key read from a line: its text, and where its colon is.
struct Key {
    text: String,
    colon: usize,
}

struct Reader<'a> {
    text: &'a str,
    lines: Vec<Line>,
    /// The line being read.
    i: usize,
    nodes_left: usize,
}

impl<'a> Reader<'a> {
    fn kind(&self) -> Option<Kind> {
        self.lines.get(self.i).map(|l| l.kind)
    }

    fn skip_comments(&mut self) {
        while self.kind() == Some(Kind::Comment) {
            self.i += 1;
        }
    }

    /// The next content line of this document, past comments: its indent
    /// and whether it starts a sequence item there.
    fn peek(&mut self) -> Option<(usize, bool)> {
        self.skip_comments();
        let l = self.lines.get(self.i).filter(|l| l.kind == Kind::Content)?;
        Some((l.indent, dash(self.rest(self.i, l.start + l.indent))))
    }

    /// The rest of line `i` from byte offset `from`.
    fn rest(&self, i: usize, from: usize) -> &'a str {
        self.text.get(from..self.lines[i].end).unwrap_or("")
    }

    /// Counts one node at `depth` against the budget; `None` past half of
    /// it or of the depth limit, where serde-saphyr decides and words it.
    fn node(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH / 2 {
            return None;
        }
        self.nodes_left = self.nodes_left.checked_sub(1)?;
        Some(())
    }

    /// The block node that starts the current line: a sequence when it
    /// starts with `- `, else a map.
    fn block(&mut self, depth: usize) -> Option<At<Node>> {
        let (indent, is_dash) = self.peek()?;
        let line = &self.lines[self.i];
        let (start, number) = (line.start + indent, line.number);
        if is_dash {
            let value = self.seq(indent, depth)?;
            return Some(at(value, number, start, 0));
        }
        let value = Node::Map(self.map(indent, start, depth)?);
        Some(at(value, number, start, 0))
    }

    fn seq(&mut self, indent: usize, depth: usize) -> Option<Node> {
        self.node(depth)?;
        let mut items = Vec::new();
        loop {
            let line_start = self.lines[self.i].start;
            let dash_at = line_start + indent;
            let after = self.rest(self.i, dash_at + 1);
            let blanks = leading_blanks(after);
            let item = &after[blanks..];
            let from = dash_at + 1 + blanks;
            let value = if empty(item, blanks) {
                // Nothing on the dash's line: a block below it, or null.
                self.i += 1;
                match self.peek() {
                    Some((i, _)) if i > indent => self.block(depth + 1)?.value,
                    _ => {
                        self.node(depth + 1)?;
                        Node::Null
                    }
                }
            } else if blanks == 0 || dash(item) {
                // `-x` is no item; `- - x` is the parser's.
                return None;
            } else if key_line(item) {
                Node::Map(self.map(from - line_start, from, depth + 1)?)
            } else {
                self.node(depth + 1)?;
                self.inline(from, indent)?.value
            };
            items.push(value);
            match self.peek() {
                Some((i, true)) if i == indent => {}
                Some((i, _)) if i > indent => return None,
                _ => return Some(Node::Seq(items)),
            }
        }
    }

    /// A map whose keys stand at column `indent`; its first key starts at
    /// byte `from` of the current line (past a `- ` in a sequence).
    fn map(&mut self, indent: usize, mut from: usize, depth: usize) -> Option<Map> {
        self.node(depth)?;
        let mut map: Map = Vec::new();
        let mut keys = Keys::default();
        loop {
            let key = self.key(from)?;
            self.node(depth)?;
            if !keys.is_new(&map, &key.text) {
                return None;
            }
            let value = self.value(&key, indent, depth + 1)?;
            map.push((key.text, value));
            match self.peek() {
                Some((i, _)) if i == indent => from = self.lines[self.i].start + indent,
                Some((i, _)) if i > indent => return None,
                _ => return Some(map),
            }
        }
    }

    /// The value after `key`, in a map at column `indent`.
    fn value(&mut self, key: &Key, indent: usize, depth: usize) -> Option<At<Node>> {
        let line_at = self.i;
        let after = self.rest(self.i, key.colon + 1);
        let blanks = leading_blanks(after);
        let rest = &after[blanks..];
        if !empty(rest, blanks) {
            self.node(depth)?;
            return self.inline(key.colon + 1 + blanks, indent);
        }
        // Nothing on the key's line: a block below it, or null.
        self.i += 1;
        match self.peek() {
            Some((i, _)) if i > indent => self.block(depth),
            Some((i, true)) if i == indent => {
                // A sequence at its key's column; its node starts where its
                // first item does.
                let l = &self.lines[self.i];
                let (number, dash_at) = (l.number, l.start + indent);
                let after = self.rest(self.i, dash_at + 1);
                let blanks = leading_blanks(after);
                // Where the parser puts one whose first item is empty is its
                // business.
                if matches!(after.as_bytes().get(blanks), None | Some(b'#')) {
                    return None;
                }
                let value = self.seq(indent, depth)?;
                Some(at(value, number, dash_at + 1 + blanks, 0))
            }
            _ => {
                self.node(depth)?;
                Some(at(Node::Null, self.lines[line_at].number, key.colon, 0))
            }
        }
    }

    /// A key at byte `from` of the current line, through its colon.
    fn key(&self, from: usize) -> Option<Key> {
        let rest = self.rest(self.i, from);
        let (text, len) = match rest.as_bytes().first()? {
            b'"' | b'\'' => {
                let (text, len) = quoted(rest)?;
                (text, len)
            }
            _ => {
                let len = rest.find(':')?;
                let word = &rest[..len];
                let first = *word.as_bytes().first()?;
                if len > MAX_KEY
                    || !(first.is_ascii_alphanumeric() || first == b'_')
                    || !word
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b))
                {
                    return None;
                }
                match plain(word)? {
                    Node::Null => return None,
                    node => (key_text(node), len),
                }
            }
        };
        // The colon, then a blank or the end of the line.
        if rest.as_bytes().get(len) != Some(&b':')
            || !matches!(rest.as_bytes().get(len + 1), None | Some(b' '))
        {
            return None;
        }
        Some(Key {
            text,
            colon: from + len,
        })
    }

    /// A scalar on one line at byte `from` of the current line, in a block
    /// at column `indent`; moves to the next line.
    fn inline(&mut self, from: usize, indent: usize) -> Option<At<Node>> {
        let rest = self.rest(self.i, from);
        // Empty flow collections, which manifests write for "present,
        // all defaults" (`placement: {}`); the parser spans only their
        // opening bracket.
        for (empty, node) in [("{}", Node::Map(Vec::new())), ("[]", Node::Seq(Vec::new()))] {
            if let Some(tail) = rest.strip_prefix(empty) {
                return self.after_scalar(node, from, 1, tail, indent);
            }
        }
        let (node, len, tail) = match rest.as_bytes().first()? {
            b'"' | b'\'' => {
                let (text, len) = quoted(rest)?;
                (Node::Str(text), len, &rest[len..])
            }
            // `-12`, `-x`: a dash followed by a blank is an item instead.
            b'-' if rest.len() > 1 && !rest.starts_with("- ") => plain_scalar(rest)?,
            first if INDICATORS.contains(first) => return None,
            _ => plain_scalar(rest)?,
        };
        self.after_scalar(node, from, len, tail, indent)
    }

    /// Checks what follows a scalar spanning `len` bytes from byte `from`:
    /// `tail` on its line, then the next lines; moves to the next line.
    fn after_scalar(
        &mut self,
        node: Node,
        from: usize,
        len: usize,
        tail: &'a str,
        indent: usize,
    ) -> Option<At<Node>> {
        // After the scalar: blanks, then the end of the line or a comment.
        let tail_text = tail.trim_start_matches(' ');
        if !(tail_text.is_empty() || (tail_text.len() < tail.len() && tail_text.starts_with('#'))) {
            return None;
        }
        let number = self.lines[self.i].number;
        self.i += 1;
        // A deeper line next may continue the scalar: the parser's.
        if self
            .lines
            .get(self.i)
            .is_some_and(|l| l.kind != Kind::DocStart && l.indent > indent)
        {
            return None;
        }
        Some(at(node, number, from, len))
    }
}

/// A plain scalar on one line: its node, its length, and what follows it.
fn plain_scalar(rest: &str) -> Option<(Node, usize, &str)> {
    let end = rest.find(" #").unwrap_or(rest.len());
    let text = rest[..end].trim_end_matches(' ');
    // `a: b` inside a value is a mapping, or an error.
    if text.contains(": ") || text.ends_with(':') {
        return None;
    }
    Some((plain(text)?, text.len(), &rest[text.len()..]))
}

/// Whether the rest of a line, after `blanks` blanks, holds no value: it
/// is empty, or a comment (which needs a blank before its `#`).
fn empty(rest: &str, blanks: usize) -> bool {
    rest.is_empty() || (blanks > 0 && rest.starts_with('#'))
}

/// How many blanks `text` starts with.
fn leading_blanks(text: &str) -> usize {
    text.bytes().take_while(|&b| b == b' ').count()
}

/// Whether a line's text from its column on starts a sequence item.
fn dash(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// Whether an item's text is a `key: value` (or `key:`) rather than a
/// scalar; a text that might be either is taken for a key, which then
/// fails to read as one unless it is.
fn key_line(text: &str) -> bool {
    text.contains(": ") || text.ends_with(':')
}

/// A quoted scalar on one line: its text and the length it spans, quotes
/// included. Escapes in double quotes are the parser's.
fn quoted(text: &str) -> Option<(String, usize)> {
    let bytes = text.as_bytes();
    let quote = *bytes.first()?;
    if quote == b'"' {
        let close = text[1..].find(['"', '\\'])? + 1;
        if bytes[close] != b'"' {
            return None;
        }
        return Some((text[1..close].to_owned(), close + 1));
    }
    // Single quotes: `''` is one quote.
    let mut out = String::new();
    let mut at = 1;
    loop {
        let next = text[at..].find('\'')? + at;
        out.push_str(&text[at..next]);
        if bytes.get(next + 1) == Some(&b'\'') {
            out.push('\'');
            at = next + 2;
        } else {
            return Some((out, next + 1));
        }
    }
}

fn at(value: Node, line: u64, start: usize, len: usize) -> At<Node> {
    At {
        value,
        line,
        span: Some((start as u64, len as u64)),
        aliased: false,
    }
}
