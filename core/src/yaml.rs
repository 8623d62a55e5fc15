//! Reading YAML within limits, and saying in our own words what went wrong.
//!
//! Every YAML input has a documented byte limit (manifests
//! `--max-file-bytes`, live snapshots `--max-live-bytes`, the `run`
//! configuration a fixed 1 MiB). The parser's own budget (nodes, documents,
//! events) used to be the library's fixed defaults, so a file well under its
//! byte limit (a `kubectl get -o yaml` of a thousand objects, a manifest of
//! 1,025 documents) failed with the library's debug output. Here the budget
//! follows the byte limit: what the byte limit admits, the budget admits.
//! Alias expansion is the one way a small file becomes a large tree, so it
//! keeps a fixed bound of its own, whatever the byte limit.
//!
//! Errors are described for the person who wrote the file: which limit was
//! hit and how to raise it, or what is wrong on which line; never the
//! library's internals (`Nodes { .. }`, option and type names).

use std::fmt;

use serde_saphyr::Error as YamlError;
use serde_saphyr::budget::BudgetBreach;
use thiserror::Error;

/// One node per this many bytes of the byte limit. A node is a scalar, a
/// sequence or a mapping; block YAML spends at least four bytes on each
/// (`- a\n`) and manifests far more, so only dense flow text (`[a,b,c]`)
/// or alias expansion comes near.
pub const BYTES_PER_NODE: usize = 4;

/// One document per this many bytes of the byte limit: no Kubernetes object
/// fits in sixteen bytes (`apiVersion:` alone is eleven).
pub const BYTES_PER_DOCUMENT: usize = 16;

/// Small limits never get a smaller budget than the parser's defaults.
const MIN_NODES: usize = 250_000;
const MIN_DOCUMENTS: usize = 1_024;

/// Nesting deeper than this is refused whatever the size: it protects the
/// stack, and no Kubernetes object nests a quarter as deep (managedFields in
/// `kubectl get -o yaml` reach about a dozen levels).
pub const MAX_DEPTH: usize = 64;

/// The most events aliases may replay in one input, whatever its byte limit:
/// the bound that refuses a "billion laughs" (ten anchors of ten aliases
/// each expand to 10^10 nodes from a few hundred bytes). Fleets that use
/// anchors repeat a label set or an image, far below this.
pub const MAX_ALIAS_EVENTS: usize = 250_000;

/// Text that aliases may add on top of the input's own (a replayed scalar is
/// copied each time).
const ALIAS_TEXT_BYTES: usize = 64 * 1024 * 1024;

/// The configuration file's limit. Fixed: a `lockstep run` configuration is
/// a few kilobytes, and a file a thousand times that is not one.
pub const CONFIG_MAX_BYTES: usize = 1024 * 1024;

/// A documented byte limit on one kind of input, and how a person raises it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The most bytes accepted.
    pub bytes: usize,
    /// What the input is, for messages ("manifest file", "live snapshot").
    pub what: &'static str,
    /// How to raise the limit, or why it cannot be raised.
    pub raise: &'static str,
}

impl Limit {
    /// A manifest file in the fleet repository (`--max-file-bytes`).
    pub const fn manifest(bytes: usize) -> Self {
        Self {
            bytes,
            what: "manifest file",
            raise: "split the file, or raise --max-file-bytes",
        }
    }

    /// A live snapshot given to `lockstep check --live` (`--max-live-bytes`).
    pub const fn live(bytes: usize) -> Self {
        Self {
            bytes,
            what: "live snapshot",
            raise: "raise --max-live-bytes, or select fewer kinds or namespaces",
        }
    }

    /// The `lockstep run --config` file.
    pub const CONFIG: Self = Self {
        bytes: CONFIG_MAX_BYTES,
        what: "configuration file",
        raise: "the limit is fixed: check that --config names the configuration file",
    };

    /// The most YAML nodes this limit admits.
    pub fn max_nodes(&self) -> usize {
        (self.bytes / BYTES_PER_NODE).max(MIN_NODES)
    }

    /// The most YAML documents this limit admits.
    pub fn max_documents(&self) -> usize {
        (self.bytes / BYTES_PER_DOCUMENT).max(MIN_DOCUMENTS)
    }

    /// `8 MiB` rather than `8388608`, where it is exact.
    fn human(&self) -> Bytes {
        Bytes(self.bytes)
    }
}

/// A byte count as people write it.
#[derive(Clone, Copy, Debug)]
pub struct Bytes(pub usize);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KIB: usize = 1024;
        const MIB: usize = 1024 * 1024;
        const GIB: usize = 1024 * 1024 * 1024;
        match self.0 {
            n if n >= GIB && n % GIB == 0 => write!(f, "{} GiB", n / GIB),
            n if n >= MIB && n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n if n >= KIB && n % KIB == 0 => write!(f, "{} KiB", n / KIB),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// Parser options whose budget follows `limit`, for an input of `len` bytes
/// (the text aliases may add is bounded relative to the input itself, so a
/// caller passing `usize::MAX` as its limit still gets a bounded expansion).
/// Callers set their own typing options on top (`strict_booleans`, ...).
pub fn options(limit: &Limit, len: usize) -> serde_saphyr::Options {
    let nodes = limit.max_nodes();
    let documents = limit.max_documents();
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = nodes;
    budget.max_documents = documents;
    // Every node is at most a start and an end event, every document two
    // more, every alias one: the event budget never trips before these.
    budget.max_events = nodes
        .saturating_mul(2)
        .saturating_add(documents.saturating_mul(2))
        .saturating_add(budget.max_aliases)
        .saturating_add(16);
    budget.max_depth = MAX_DEPTH;
    budget.max_total_scalar_bytes = len.saturating_mul(2).saturating_add(ALIAS_TEXT_BYTES);
    let mut aliases = serde_saphyr::options::AliasLimits::default();
    aliases.max_total_replayed_events = MAX_ALIAS_EVENTS;
    aliases.max_replay_stack_depth = MAX_DEPTH;
    serde_saphyr::options! {
        budget: Some(budget),
        alias_limits: aliases,
        with_snippet: false,
    }
}

/// [`options`] for a manifest that kubectl, Argo CD or Flux apply: a merge
/// key stays a key named `<<`, which the manifest reader refuses however
/// it was written (`!!merge "\x3c\x3c"` included). Expanded, it would be
/// read as YAML 1.1 reads it, not as Kubernetes' library, which lets it
/// override keys before it. lockstep's own files (its configuration,
/// policies, plans) keep merge keys as YAML reads them.
pub fn manifest_options(limit: &Limit, len: usize) -> serde_saphyr::Options {
    let mut o = options(limit, len);
    o.merge_keys = serde_saphyr::MergeKeyPolicy::AsOrdinary;
    o
}

/// Why a YAML input could not be read before parsing.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("cannot be read: {0}")]
    Io(#[source] std::io::Error),
    #[error(
        "is larger than the {} limit of {}; {}",
        limit.what,
        limit.human(),
        limit.raise
    )]
    TooLarge { limit: Limit },
    #[error("is not UTF-8 (an invalid byte on line {line}); YAML must be UTF-8")]
    NotUtf8 { line: u32 },
}

/// Bytes as UTF-8 text, or where they stop being UTF-8.
pub fn text(bytes: Vec<u8>) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = memchr::memchr_iter(b'\n', &bytes[..at.min(bytes.len())]).count() + 1;
        ReadError::NotUtf8 {
            line: u32::try_from(line).unwrap_or(u32::MAX),
        }
    })
}

/// A parser error as a person reads it: the line it points at and a
/// one-line message (no location suffix: the caller puts the file and line
/// in front).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// 1-based; 1 where the parser knows no line.
    pub line: u32,
    /// One line. Where `over_limit`, it starts with a verb whose subject is
    /// the input ("holds more than ..."), so the caller names the input
    /// first ("file holds more than ..."); otherwise it is about the text
    /// at `line`.
    pub message: String,
    /// A limit was hit (the text may be fine YAML); not a syntax error.
    pub over_limit: bool,
}

/// Describes a serde-saphyr error in our words. `limit` is the limit the
/// input was parsed under: a breach of the budget names it and says how to
/// raise it.
pub fn describe(e: &YamlError, limit: &Limit) -> Described {
    let line = e
        .location()
        .map_or(1, |l| u32::try_from(l.line()).unwrap_or(u32::MAX).max(1));
    Described {
        line,
        message: one_line(&message(e, limit)),
        over_limit: over_limit(e),
    }
}

fn over_limit(e: &YamlError) -> bool {
    match e {
        YamlError::WithSnippet { error, .. } | YamlError::AliasError { error, .. } => {
            over_limit(error)
        }
        YamlError::Budget { breach, .. } => !matches!(breach, BudgetBreach::SequenceUnbalanced),
        YamlError::AliasReplayLimitExceeded { .. }
        | YamlError::AliasReplayCounterOverflow { .. }
        | YamlError::AliasExpansionLimitExceeded { .. }
        | YamlError::AliasReplayStackDepthExceeded { .. } => true,
        _ => false,
    }
}

/// What aliases may do, said once for every alias-related breach.
const ALIAS_ADVICE: &str = "a fixed limit against alias bombs: write the repeated parts out";

fn message(e: &YamlError, limit: &Limit) -> String {
    match e {
        YamlError::WithSnippet { error, .. } | YamlError::AliasError { error, .. } => {
            message(error, limit)
        }
        YamlError::Budget { breach, .. } => breach_message(breach, limit),
        YamlError::AliasReplayLimitExceeded { .. }
        | YamlError::AliasReplayCounterOverflow { .. } => format!(
            "expands aliases (*name) to more than {MAX_ALIAS_EVENTS} YAML nodes; {ALIAS_ADVICE}"
        ),
        YamlError::AliasExpansionLimitExceeded { .. } => {
            format!("expands one anchor (&name) too often; {ALIAS_ADVICE}")
        }
        YamlError::AliasReplayStackDepthExceeded { .. } => format!(
            "nests aliases (*name) more than {MAX_DEPTH} deep inside each other; {ALIAS_ADVICE}"
        ),
        YamlError::UnknownAnchor { .. } => {
            "an alias (*name) refers to no anchor (&name) defined before it".into()
        }
        YamlError::RecursiveReferencesRequireWeakTypes { .. } => {
            "an alias (*name) refers to the anchor it is inside of".into()
        }
        YamlError::DuplicateMappingKey { key, .. } => match key {
            Some(k) => format!("the key {k:?} appears twice in one mapping; keep one"),
            None => "a key appears twice in one mapping; keep one".into(),
        },
        YamlError::MergeValueNotMapOrSeqOfMaps { .. } => {
            "a merge key (<<) must name a mapping or a list of mappings".into()
        }
        YamlError::Eof { .. } => "the YAML ends in the middle of a value".into(),
        YamlError::InvalidUtf8Input => "the text is not UTF-8; YAML must be UTF-8".into(),
        YamlError::NonFiniteFloat { value, .. } => {
            format!("{value} is not a finite number; quote it if it is text")
        }
        YamlError::InvalidBooleanStrict { .. } => {
            "expected true or false (quote other words)".into()
        }
        YamlError::NullIntoString { .. } => "a value is missing where text is expected".into(),
        YamlError::InvalidScalar { ty, .. } => format!("expected {}", type_words(ty)),
        YamlError::Unexpected { expected, .. } => format!("expected {}", type_words(expected)),
        YamlError::SerdeInvalidType {
            unexpected,
            expected,
            ..
        }
        | YamlError::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!("expected {}, found {unexpected}", type_words(expected)),
        YamlError::SerdeInvalidLength { len, expected, .. } => {
            format!("expected {}, found {len} entries", type_words(expected))
        }
        YamlError::SerdeUnknownVariant {
            variant, expected, ..
        } => format!("{variant:?} is not one of: {}", expected.join(", ")),
        YamlError::SerdeUnknownField {
            field, expected, ..
        } => format!(
            "unknown field {field:?}; the fields here are: {}",
            expected.join(", ")
        ),
        YamlError::SerdeMissingField { field, .. } => format!("the field {field:?} is required"),
        YamlError::MultipleDocuments { .. } => {
            "holds several YAML documents (---); expected one".into()
        }
        YamlError::IOError { cause } => format!("cannot be read: {cause}"),
        // The parser's own syntax messages ("unclosed bracket '['", "mapping
        // values are not allowed in this context") are already about the text.
        YamlError::ExternalMessage { msg, .. } | YamlError::Message { msg, .. } => msg.clone(),
        // Anything else: the library's message for people, without its
        // location suffix (we give the line ourselves).
        other => {
            use serde_saphyr::MessageFormatter as _;
            serde_saphyr::UserMessageFormatter
                .format_message(other)
                .into_owned()
        }
    }
}

fn breach_message(breach: &BudgetBreach, limit: &Limit) -> String {
    let grows = |count: usize, things: &str, per: usize| {
        format!(
            "holds more than {count} YAML {things}, the most the {} limit of {} allows (one per {per} bytes); {}",
            limit.what,
            limit.human(),
            limit.raise
        )
    };
    match breach {
        BudgetBreach::Nodes { .. } | BudgetBreach::Events { .. } => {
            grows(limit.max_nodes(), "nodes", BYTES_PER_NODE)
        }
        BudgetBreach::Documents { .. } => {
            grows(limit.max_documents(), "documents", BYTES_PER_DOCUMENT)
        }
        BudgetBreach::InputBytes { .. } => format!(
            "is larger than the {} limit of {}; {}",
            limit.what,
            limit.human(),
            limit.raise
        ),
        BudgetBreach::Depth { .. } => format!(
            "nests lists and mappings more than {MAX_DEPTH} levels deep (a fixed limit; no Kubernetes object nests this deep)"
        ),
        BudgetBreach::Aliases { aliases } => {
            format!(
                "uses more than {} aliases (*name); {ALIAS_ADVICE}",
                aliases.saturating_sub(1)
            )
        }
        BudgetBreach::Anchors { anchors } => {
            format!(
                "defines more than {} anchors (&name); {ALIAS_ADVICE}",
                anchors.saturating_sub(1)
            )
        }
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => format!(
            "uses {aliases} aliases (*name) for {anchors} anchors (&name), more than ten per anchor; {ALIAS_ADVICE}"
        ),
        BudgetBreach::ScalarBytes { .. }
        | BudgetBreach::RecordedAnchorEvents { .. }
        | BudgetBreach::RecordedAnchorBytes { .. } => {
            format!("copies too much text through aliases (*name); {ALIAS_ADVICE}")
        }
        BudgetBreach::MergeKeys { .. } => {
            format!("uses too many merge keys (<<); {ALIAS_ADVICE}")
        }
        BudgetBreach::SequenceUnbalanced => "a list or mapping ends that never started".into(),
        _ => format!(
            "is too large or too complex to read within the {} limit of {}; {}",
            limit.what,
            limit.human(),
            limit.raise
        ),
    }
}

/// Serde's and the parser's names for what was expected, as a person says
/// them: `struct SourceConfig` and `map` are a mapping, `u32` a whole number.
fn type_words(expected: &str) -> String {
    let e = expected.trim();
    let e = e
        .strip_prefix("a ")
        .or_else(|| e.strip_prefix("an "))
        .unwrap_or(e);
    let words = match e {
        _ if e.starts_with("struct ") || e.starts_with("map") || e == "mapping" => "a mapping",
        _ if e.starts_with("sequence") || e.starts_with("tuple") || e == "list" => "a list",
        _ if e.starts_with("enum ") => "one of the listed values",
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" | "floating point" => "a number",
        "bool" | "boolean" => "true or false",
        "char" => "a single character",
        _ if e.starts_with("string") || e == "str" => "text",
        _ if e.contains("scalar") => "a single value",
        _ => return expected.to_owned(),
    };
    words.to_owned()
}

/// The first line, without the parser's own "at line N, column M" suffix.
fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or_default();
    let first = match first.find(" at line ") {
        Some(i) => &first[..i],
        None => first,
    };
    first.trim().to_owned()
}

/// A document that did not read into its type, with the field it stopped
/// at (`spec.waves[0].maxParallel: invalid type: string "x", expected u32`)
/// rather than serde's message alone, which names no field.
pub fn field_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    if path.is_empty() || path == "." {
        e.inner().to_string()
    } else {
        format!("{path}: {}", e.inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, limit: &Limit) -> Result<usize, Described> {
        serde_saphyr::from_multiple_with_options::<serde_json::Value>(
            text,
            options(limit, text.len()),
        )
        .map(|d| d.len())
        .map_err(|e| describe(&e, limit))
    }

    fn bomb() -> String {
        let mut s = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
        for (i, c) in "bcdefghij".chars().enumerate() {
            let prev = (b'a' + i as u8) as char;
            s.push_str(&format!(
                "{c}: &{c} [{}]\n",
                vec![format!("*{prev}"); 10].join(",")
            ));
        }
        s
    }

    #[test]
    fn the_budget_grows_with_the_limit() {
        let small = Limit::manifest(1024);
        let big = Limit::manifest(64 * 1024 * 1024);
        assert_eq!(small.max_nodes(), MIN_NODES);
        assert_eq!(small.max_documents(), MIN_DOCUMENTS);
        assert_eq!(big.max_nodes(), 16 * 1024 * 1024);
        assert_eq!(big.max_documents(), 4 * 1024 * 1024);
        // 2,000 documents: over the parser's default of 1,024.
        let docs = "---\na: 1\n".repeat(2000);
        assert_eq!(parse(&docs, &Limit::manifest(8 << 20)), Ok(2000));
        // 300,000 nodes in flow style: over the default of 250,000.
        let nodes = format!("[{}]", vec!["1"; 300_000].join(","));
        assert_eq!(parse(&nodes, &Limit::manifest(8 << 20)), Ok(1));
    }

    #[test]
    fn a_breach_names_the_limit_and_how_to_raise_it() {
        let docs = "---\na: 1\n".repeat(1100);
        let e = parse(&docs, &Limit::manifest(1024)).unwrap_err();
        assert_eq!(
            e.message,
            "holds more than 1024 YAML documents, the most the manifest file limit of 1 KiB allows (one per 16 bytes); split the file, or raise --max-file-bytes"
        );
        assert_eq!(e.line, 2 * 1024 + 1);
        let nodes = format!("[{}]", vec!["1"; 270_000].join(","));
        let e = parse(&nodes, &Limit::live(1 << 20)).unwrap_err();
        assert!(
            e.message
                .starts_with("holds more than 262144 YAML nodes, the most the live snapshot limit of 1 MiB allows"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .ends_with("raise --max-live-bytes, or select fewer kinds or namespaces")
        );
        assert!(!e.message.contains("Nodes"), "{}", e.message);
        assert!(e.over_limit);
        assert!(!parse("a: [\n", &Limit::CONFIG).unwrap_err().over_limit);
    }

    #[test]
    fn alias_bombs_stay_refused_whatever_the_limit() {
        for limit in [Limit::manifest(8 << 20), Limit::live(usize::MAX)] {
            let e = parse(&bomb(), &limit).unwrap_err();
            assert!(
                e.message
                    .starts_with("expands aliases (*name) to more than 250000"),
                "{e:?}"
            );
            assert!(e.message.contains("alias bombs"), "{e:?}");
            assert!(e.line > 1, "{e:?}");
            assert!(e.over_limit, "{e:?}");
        }
        // A handful of aliases is fine.
        let ok = "a: &l {app: x}\nb: *l\nc: *l\n";
        assert_eq!(parse(ok, &Limit::manifest(8 << 20)), Ok(1));
    }

    #[test]
    fn parser_errors_read_as_plain_text_with_a_line() {
        let limit = Limit::manifest(8 << 20);
        let cases = [
            (
                "a: 1\na: 2\n",
                2,
                "the key \"a\" appears twice in one mapping; keep one",
            ),
            ("a: [\n", 1, "unclosed bracket '['"),
            (
                "a: *nope\n",
                1,
                "an alias (*name) refers to no anchor (&name) defined before it",
            ),
            (
                &format!("{}{}", "[".repeat(70), "]".repeat(70)),
                1,
                "nests lists and mappings more than 64 levels deep (a fixed limit; no Kubernetes object nests this deep)",
            ),
        ];
        for (text, line, message) in cases {
            let e = parse(text, &limit).unwrap_err();
            assert_eq!((e.line, e.message.as_str()), (line, message), "{text:?}");
        }
    }

    #[test]
    fn typed_errors_use_field_names_not_type_names() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            port: u16,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Outer {
            inner: Inner,
        }
        let limit = Limit::CONFIG;
        let msg = |text: &str| {
            let e = serde_saphyr::from_str_with_options::<Outer>(text, options(&limit, text.len()))
                .unwrap_err();
            describe(&e, &limit)
        };
        let e = msg("inner: 7\n");
        assert_eq!(e.message, "expected a mapping");
        assert!(!e.message.contains("Inner"));
        let e = msg("inner: {port: x}\n");
        assert_eq!(e.message, "expected a whole number, 0 or more");
        let e = msg("inner: {prot: 1}\n");
        assert_eq!(
            e.message,
            "unknown field \"prot\"; the fields here are: port"
        );
        assert_eq!(e.line, 1);
        let e = msg("inner: {}\n");
        assert_eq!(e.message, "the field \"port\" is required");
    }

    #[test]
    fn byte_counts_read_like_people_write_them() {
        assert_eq!(Bytes(8 << 20).to_string(), "8 MiB");
        assert_eq!(Bytes(1024).to_string(), "1 KiB");
        assert_eq!(Bytes(1000).to_string(), "1000 bytes");
        assert_eq!(Bytes(3 << 30).to_string(), "3 GiB");
    }
}
