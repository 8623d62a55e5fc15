//! Where the tools that apply a manifest read it otherwise than YAML does.
//!
//! lockstep judges a file as YAML 1.2 reads it. `kubectl apply`, Argo CD and
//! Flux read it through Kubernetes' own readers: a line-based document
//! splitter (`k8s.io/apimachinery/pkg/util/yaml`), a JSON sniffer for a
//! file starting with `{`, go-yaml v2 (YAML 1.1 line breaks, a merge key
//! that overrides keys written before it), and a resource builder that
//! applies the items of anything with a top-level `items` list. Where the
//! two readings can differ, a gate that judged one while the cluster got
//! the other would pass a skip it refuses; so a file using any of these is
//! refused, naming the line and saying how to write it plainly. Real
//! manifests use none of them. `docs/gate.md`, "What is read".

/// The first construct of `text` (a manifest file, UTF-8, byte-order mark
/// removed) that Kubernetes' readers take otherwise than YAML: its line
/// and why.
pub fn first_divergence(text: &str) -> Option<(u32, String)> {
    if let Some(why) = json_sniffed(text) {
        return Some((1, why));
    }
    // Every whole tree reads every file: most have none of the bytes any
    // rule needs, and are passed over without a look at their lines.
    if !may_diverge(text.as_bytes()) {
        return None;
    }
    for (i, line) in text.split('\n').enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        if let Some(why) = in_line(line) {
            return Some((n, why));
        }
    }
    None
}

/// Whether `bytes` hold anything [`in_line`] looks for: a CR, the lead
/// byte of U+0085 or of U+2028/U+2029, `<<`, or a line starting with `---`
/// or `...` (a document marker of any kind) or `%` (a directive).
fn may_diverge(bytes: &[u8]) -> bool {
    use memchr::memmem::find;
    memchr::memchr3(b'\r', 0xC2, 0xE2, bytes).is_some()
        || find(bytes, b"<<").is_some()
        || bytes.starts_with(b"---")
        || bytes.starts_with(b"...")
        || bytes.starts_with(b"%")
        || find(bytes, b"\n---").is_some()
        || find(bytes, b"\n...").is_some()
        || find(bytes, b"\n%").is_some()
}

fn in_line(line: &str) -> Option<String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.contains('\r') {
        return Some(
            "a carriage return that ends no line (a lone CR): YAML reads a line break there, kubectl's document splitter does not; use LF or CRLF line endings".into(),
        );
    }
    for (c, name) in [
        ('\u{2028}', "U+2028 LINE SEPARATOR"),
        ('\u{2029}', "U+2029 PARAGRAPH SEPARATOR"),
        ('\u{85}', "U+0085 NEXT LINE"),
    ] {
        if line.contains(c) {
            return Some(format!(
                "a {name}: YAML 1.2 reads it as text (even in a comment), Kubernetes' YAML library as a line break, so the two read different keys; remove it"
            ));
        }
    }
    if let Some(rest) = line.strip_prefix("---") {
        // Spaces and tabs only: kubectl trims every Unicode space after
        // `---` (a no-break space too) and splits there, where YAML reads
        // `---` followed by such a space as text, not a document marker.
        let blank = |c: char| c == ' ' || c == '\t';
        let plain = rest.chars().all(blank)
            || (rest.starts_with(blank) && rest.trim_start_matches(blank).starts_with('#'));
        if !plain {
            return Some(format!(
                "`---{}`: kubectl splits documents at every line starting with `---` and reads what follows it otherwise than YAML; put `---` on a line of its own",
                rest.chars()
                    .take(20)
                    .map(|c| if c.is_whitespace() && c != ' ' {
                        format!("\\u{{{:x}}}", u32::from(c))
                    } else {
                        crate::escape::escape(&c.to_string()).into_owned()
                    })
                    .collect::<String>()
            ));
        }
    }
    if let Some(rest) = line.strip_prefix("...")
        && (rest.is_empty() || rest.starts_with([' ', '\t']))
    {
        return Some(
            "a document end marker (`...`): kubectl passes the text after it to the YAML reader with the document before it, which drops it; separate documents with `---`".into(),
        );
    }
    if line.starts_with('%') {
        return Some(
            "a line starting with `%`: a directive (`%YAML`, `%TAG`) to Kubernetes' YAML library, even as the next line of a quoted value, and it refuses `%YAML 1.2` and reads tags otherwise, so kubectl, Argo CD and Flux would not apply the file as judged; remove the directive, or indent the line".into(),
        );
    }
    if merge_key(line) {
        return Some(
            "a merge key (`<<`): Kubernetes' YAML library lets it override keys written before it, YAML 1.2 does not, so the two read different values; write the keys out".into(),
        );
    }
    None
}

/// Whether a line uses `<<` as a mapping key: `<<` after the indentation,
/// a `- `, a `{` or a `,`, followed by a `:` and a space or the end.
fn merge_key(line: &str) -> bool {
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(i) = line[from..].find("<<").map(|i| i + from) {
        from = i + 2;
        let before = line[..i].trim_end_matches([' ', '\t']);
        let opens = before.is_empty() || before.ends_with(['{', ',', '-', '?']);
        let after = line[i + 2..].trim_start_matches([' ', '\t']);
        let colon = after.starts_with(':')
            && after[1..]
                .chars()
                .next()
                .is_none_or(|c| c == ' ' || c == '\t' || c == '*' || c == '{');
        if opens && colon {
            return true;
        }
        if from >= bytes.len() {
            break;
        }
    }
    false
}

/// kubectl reads a file whose first character (after white space) is `{`
/// as a stream of JSON objects, applying each one it decodes before any
/// error. Such a file must be JSON, so both read the same objects.
fn json_sniffed(text: &str) -> Option<String> {
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    values.find_map(Result::err).map(|e| {
        format!(
            "the file starts with `{{`, so kubectl reads it as JSON, but it is not JSON (line {}, column {}); write it as JSON or as block YAML",
            e.line(),
            e.column()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_manifests_read_alike() {
        for text in [
            "apiVersion: v1\nkind: ConfigMap\n",
            "---\na: 1\n--- # two\nb: 2\n---\t\nc: 3\n",
            "a: 1\r\n---\r\nb: 2\r\n",
            "data:\n  script: |\n    cat <<EOF\n    x\n    EOF\n",
            "a: \"<< not a key\"\n# <<: nor here\n",
            "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\"}\n",
            "{\"a\": 1}\n{\"b\": 2}\n",
            "a: ----\n",
        ] {
            assert_eq!(first_divergence(text), None, "{text:?}");
        }
    }

    #[test]
    fn what_kubernetes_reads_otherwise_is_named_with_its_line() {
        for (text, line, needle) in [
            ("a: 1 # x\u{2028}a: 2\n", 1, "U+2028"),
            ("a: 1\nb: 2 # \u{85}\n", 2, "U+0085"),
            ("a: 1\rb: 2\n", 1, "lone CR"),
            ("a: 1\n---#\nb: 2\n", 2, "`---#`"),
            ("a: 1\n--- {b: 2}\n", 2, "on a line of its own"),
            ("a: 1\n...\nb: 2\n", 2, "document end marker"),
            ("spec:\n  <<: *rel\n", 2, "merge key"),
            ("spec: {a: 1, <<: *rel}\n", 1, "merge key"),
            ("- <<: *x\n", 1, "merge key"),
            ("{\"kind\": \"Nova\"}: x\n", 1, "kubectl reads it as JSON"),
            // kubectl trims any Unicode space after `---` (Go's
            // `strings.TrimSpace`) and splits there; YAML reads text.
            ("!!null |\n---\u{a0}\nkind: Nova\n", 2, "`---\\u{a0}`"),
            ("a: |\n---\u{3000}\n", 2, "on a line of its own"),
            ("a: 1\n---\u{b}\n", 2, "on a line of its own"),
            ("a: 1\n--- \u{a0}# x\n", 2, "on a line of its own"),
            ("%YAML 1.2\n---\nkind: Nova\n", 1, "directive"),
            ("a: 1\n...\n%TAG ! tag:x,2026:\n---\n", 2, "document end"),
            ("a: 1\n---\n%TAG ! tag:x,2026:\n", 3, "directive"),
        ] {
            let Some((l, why)) = first_divergence(text) else {
                panic!("{text:?}: not refused");
            };
            assert_eq!(l, line, "{text:?}: {why}");
            assert!(why.contains(needle), "{text:?}: {why}");
        }
    }
}
