//! Text that others wrote (commit summaries, file names, release strings,
//! image references, webhook refs and delivery ids), made safe to show.
//!
//! Git and a webhook can carry any character: an ANSI escape that recolours
//! or clears a terminal, a carriage return that overwrites the start of a
//! line, a newline that forges another cluster's line in a git note, a bidi
//! override that shows a file name in another order than it is read
//! ("Trojan Source"). Such characters are escaped where text is shown (the
//! sinks: text reports, commit statuses, git notes, text logs), never where
//! it is read: the cluster gets the manifest exactly as written, and JSON
//! output escapes by itself.
//!
//! The rendering is for people and is not meant to be parsed back: a
//! backslash is left as it is, so escaping twice changes nothing.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` is shown escaped: every control character (C0 including
/// tab, newline and carriage return, DEL, C1), the bidi embeddings,
/// overrides, isolates and marks, the line and paragraph separators, and
/// the invisible characters that make two different names look alike.
/// Zero-width joiners and variation selectors are kept: emoji and several
/// scripts need them, and they neither reorder nor hide text.
pub fn is_escaped(c: char) -> bool {
    matches!(
        c,
        // C0 (ESC, CR, LF, TAB, BEL, BS, …), DEL and C1 (CSI is U+009B).
        '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            // Soft hyphen, Arabic letter mark, Mongolian vowel separator.
            | '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            // Zero-width space, left-to-right and right-to-left marks.
            | '\u{200b}'
            | '\u{200e}'
            | '\u{200f}'
            // Line and paragraph separators.
            | '\u{2028}'
            | '\u{2029}'
            // Bidi embeddings and overrides.
            | '\u{202a}'..='\u{202e}'
            // Word joiner, invisible operators, bidi isolates, deprecated
            // format controls.
            | '\u{2060}'..='\u{206f}'
            // Zero-width no-break space, interlinear annotations, tags.
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

/// Writes one escaped character visibly: `\n`, `\r`, `\t`, `\x1b` for the
/// rest of ASCII, `\u{202e}` beyond.
fn write_escaped(out: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        c if c.is_ascii() => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:x}}}", c as u32),
    }
}

/// Writes `s` with every [`is_escaped`] character escaped, in runs: text
/// without any is one `write_str`.
fn write_str_escaped(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    let mut rest = s;
    while let Some((at, c)) = rest.char_indices().find(|&(_, c)| is_escaped(c)) {
        out.write_str(&rest[..at])?;
        write_escaped(out, c)?;
        rest = &rest[at + c.len_utf8()..];
    }
    out.write_str(rest)
}

/// `s` for one line of output: borrowed (no allocation) when there is
/// nothing to escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    let Some(first) = s.find(is_escaped) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    // Writing to a String cannot fail.
    let _ = write_str_escaped(&mut out, &s[first..]);
    Cow::Owned(out)
}

/// Displays a value with every [`is_escaped`] character escaped, without
/// an intermediate string: `format!("{}", Escaped(&summary))`, or a whole
/// line as `Escaped(format_args!(…))`. Width and fill flags are ignored.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<T>(pub T);

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapingWriter(f), "{}", self.0)
    }
}

/// Escapes whatever is written through it. Escaping is per character, so
/// where a value is cut into `write_str` calls does not matter.
struct EscapingWriter<W>(W);

impl<W: fmt::Write> fmt::Write for EscapingWriter<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_str_escaped(&mut self.0, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An oracle written apart from [`is_escaped`]: what must never reach
    /// a terminal or a note as itself.
    fn dangerous(c: char) -> bool {
        c.is_control()
            || matches!(
                c,
                '\u{202a}'..='\u{202e}'
                    | '\u{2066}'..='\u{2069}'
                    | '\u{200e}'
                    | '\u{200f}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{200b}'
                    | '\u{feff}'
            )
    }

    #[test]
    fn controls_become_visible() {
        assert_eq!(escape("2026.1\x1b[2J"), "2026.1\\x1b[2J");
        assert_eq!(escape("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(escape("\0\x07\x08\x7f"), "\\x00\\x07\\x08\\x7f");
        assert_eq!(escape("csi\u{9b}31m nel\u{85}"), "csi\\u{9b}31m nel\\u{85}");
        assert_eq!(
            escape("nova\u{202e}lmay.yaml"),
            "nova\\u{202e}lmay.yaml",
            "a right-to-left override (Trojan Source)"
        );
        assert_eq!(escape("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
        assert_eq!(escape("a\u{2028}b"), "a\\u{2028}b");
        assert_eq!(escape("no\u{200b}va"), "no\\u{200b}va");
        assert_eq!(escape("tag\u{e0041}"), "tag\\u{e0041}");
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        for s in [
            "",
            "Upgrade prod to 2026.2 (release and placement override together)",
            "clusters/prod/controlplane.yaml",
            "registry.example.com/nova@sha256:abc",
            "nova 2026.1 → 2026.2 ✓ ⏸ — ∅",
            "Grüße, 日本語, עברית, العربية",
            "family 👨\u{200d}👩\u{200d}👧 and ❤\u{fe0f}",
            "C:\\path\\x1b stays as typed",
        ] {
            assert!(matches!(escape(s), Cow::Borrowed(b) if b == s), "{s:?}");
        }
    }

    #[test]
    fn the_display_wrapper_agrees_with_escape() {
        let s = "fix\x1b[31m red\r\nlockstep/other: success — forged";
        assert_eq!(Escaped(s).to_string(), escape(s));
        assert_eq!(
            Escaped(format_args!("{} {}", "a\nb", 7)).to_string(),
            "a\\nb 7"
        );
    }

    /// Text mixing the characters that matter: controls, bidi and other
    /// invisible ones, ASCII, and any character at all.
    fn text() -> impl Strategy<Value = String> {
        let c = prop_oneof![
            (0u32..0x20).prop_map(|n| char::from_u32(n).unwrap_or('?')),
            (0x7fu32..0xa0).prop_map(|n| char::from_u32(n).unwrap_or('?')),
            prop::sample::select(vec![
                '\u{ad}',
                '\u{61c}',
                '\u{200b}',
                '\u{200c}',
                '\u{200d}',
                '\u{200e}',
                '\u{2028}',
                '\u{2029}',
                '\u{202a}',
                '\u{202e}',
                '\u{2066}',
                '\u{2069}',
                '\u{feff}',
                '\u{fe0f}',
                '\u{e0041}',
                '\\',
                '→',
                'ü',
            ]),
            prop::char::range(' ', '~'),
            any::<char>(),
        ];
        prop::collection::vec(c, 0..48).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn escaped_text_holds_nothing_dangerous(s in text()) {
            let e = escape(&s);
            prop_assert!(!e.chars().any(dangerous), "{:?} -> {:?}", s, e);
            prop_assert!(!e.chars().any(is_escaped));
            prop_assert_eq!(Escaped(&s).to_string(), e.as_ref());
            // Escaping twice changes nothing.
            prop_assert_eq!(escape(&e), e.clone());
        }

        #[test]
        fn text_without_dangerous_characters_is_unchanged(
            s in "[^\\p{Cc}\\p{Cf}\\p{Cn}\\p{Zl}\\p{Zp}]*"
        ) {
            prop_assert!(matches!(escape(&s), Cow::Borrowed(_)));
            prop_assert_eq!(escape(&s), s.as_str());
        }

        #[test]
        fn each_character_is_kept_or_escaped_alone(s in text()) {
            let mut want = String::new();
            for c in s.chars() {
                if is_escaped(c) {
                    write_escaped(&mut want, c).unwrap();
                } else {
                    want.push(c);
                }
            }
            prop_assert_eq!(escape(&s), want.as_str());
        }
    }
}
