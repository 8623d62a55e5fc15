//! The live state of the cluster as the gate sees it: per object, the status
//! fields the operators write (`docs/operators.md` §3). Read from what
//! `kubectl get <kinds> -A -o yaml` prints (a `v1 List`), or from a stream of
//! documents; the cluster module fills the same type from the API server.
//!
//! The gate decides with the live state it is given, so a snapshot read
//! wrongly is a way around it: a file that is not a List or objects, or an
//! object of ours with a status the operators would never write (an
//! `installedRelease` that is not a release), would read as "nothing
//! installed". Such a file is an error naming the item and field; objects
//! of other kinds stay ignored whatever their shape.
//!
//! Nothing where an object could be: a document of a stream that holds no
//! value (a stray `---` or `...`, `null`, a tag on nothing) is skipped, since
//! concatenating `kubectl` outputs leaves such separators and they stand for
//! no object; a stream of nothing else is refused as empty. A `null` (or
//! empty) item of a List is refused: `kubectl` never prints one, and a hole
//! in a list of objects may be an object some tool failed to write, which
//! skipping would read as "not installed".
//!
//! `kubectl -o json` output is read as JSON: a text whose first character
//! after an optional byte order mark and whitespace is `{` or `[`, and which
//! is one JSON value, goes through serde_json, because YAML refuses what JSON
//! strings may hold raw (DEL, the C1 controls, U+FFFE) and keys over 1024
//! characters. The same byte limit, nesting depth and node budget apply, a
//! key twice in one mapping is refused as in YAML, the same checks run on
//! the same values, and messages name the same lines. Any other text,
//! including YAML flow style that is not JSON, is read as YAML.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use thiserror::Error;

use crate::kind::{Key, Kind, Recognised};
use crate::release::TaggedRelease;
use crate::yaml::{self, Limit, ReadError};

/// One object's release status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveStatus {
    pub installed_release: Option<String>,
    pub target_release: Option<String>,
    pub upgrade_phase: Option<String>,
    pub installed_image: Option<String>,
    pub generation: Option<i64>,
    pub conditions: Vec<Condition>,
    /// The ControlPlane that projects this object, from its metadata (a
    /// controller ownerReference to a ControlPlane, or the
    /// `c5c3.io/controlplane-name`/`-namespace` labels across namespaces;
    /// `docs/operators.md` §4). The plane re-asserts such an object on every
    /// pass, whatever Git says about the object itself.
    pub projected_by: Option<Key>,
    /// lockstep's own record of the forward repairs it made on this object
    /// (the `lockstep.c5c3.io/repair` annotation, raw: the shell's
    /// `repair::RepairRecord` reads it). Only the API server and the
    /// simulated cluster fill it; a snapshot file never does.
    pub repair_record: Option<String>,
    /// The digest of the document lockstep applied to this object last
    /// (`rollout::APPLIED_ANNOTATION`), filled like `repair_record`.
    pub applied: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub observed_generation: Option<i64>,
}

/// The longest image reference lockstep reads in a status: registry,
/// repository, tag and digest are a few hundred bytes at most (a
/// repository name is at most 255); a longer one was not written by an
/// operator. Kept in lockstep's record of live verdicts, a few such strings
/// would fill its ConfigMap.
pub const MAX_STATUS_IMAGE: usize = 1024;

/// The longest release or phase lockstep reads in a status (`2026.1-p1`,
/// `Contracting`).
pub const MAX_STATUS_WORD: usize = 64;

/// What is wrong with a status field's value, as the operators would never
/// write it: the same rule for a snapshot file (`check --live`) and the API
/// server (the daemon). A release that is not one would read as "nothing
/// installed".
pub fn status_text_problem(field: &str, value: &str) -> Option<String> {
    let most = if field == "installedImage" {
        MAX_STATUS_IMAGE
    } else {
        MAX_STATUS_WORD
    };
    if value.len() > most {
        return Some(format!(
            "status.{field} is {} bytes, more than the {most} lockstep reads (no operator writes one so long)",
            value.len()
        ));
    }
    if matches!(field, "installedRelease" | "targetRelease")
        && !value.is_empty()
        && TaggedRelease::parse(value).is_err()
    {
        return Some(format!(
            "status.{field} {value:?} is not a release (expected YYYY.N, e.g. 2026.1)"
        ));
    }
    None
}

impl LiveStatus {
    /// The first status field the operators would never write so
    /// ([`status_text_problem`]).
    pub fn problem(&self) -> Option<String> {
        [
            ("installedRelease", &self.installed_release),
            ("targetRelease", &self.target_release),
            ("upgradePhase", &self.upgrade_phase),
            ("installedImage", &self.installed_image),
        ]
        .into_iter()
        .find_map(|(field, v)| status_text_problem(field, v.as_deref()?))
    }

    /// The release an upgrade in flight is heading to, if one is.
    /// Phase-machine kinds show `upgradePhase`; Placement and Barbican only
    /// stamp `targetRelease` while their gated sync runs.
    pub fn in_flight_target(&self) -> Option<&str> {
        self.target_release.as_deref().filter(|t| !t.is_empty())
    }

    pub fn phase(&self) -> Option<&str> {
        self.upgrade_phase.as_deref().filter(|p| !p.is_empty())
    }

    pub fn installed(&self) -> Option<&str> {
        self.installed_release.as_deref().filter(|p| !p.is_empty())
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The whole live snapshot.
#[derive(Clone, Debug, Default)]
pub struct Live {
    pub objects: HashMap<Key, LiveStatus>,
}

impl Live {
    pub fn get(&self, key: &Key) -> Option<&LiveStatus> {
        self.objects.get(key)
    }
}

/// Live snapshots larger than this are refused (`--max-live-bytes`): a
/// `kubectl get` of every C5C3 kind in a large region, managedFields and
/// all, is a few megabytes per thousand objects.
pub const DEFAULT_MAX_LIVE_BYTES: usize = 64 * 1024 * 1024;

/// Why a live snapshot cannot be used. The gate decides with the live state
/// it is given, so a snapshot it cannot fully read is an error, never an
/// empty or partial state: every message names the file, the line, and the
/// item and field where it can.
#[derive(Debug, Error)]
pub enum LiveError {
    #[error("{file}: {reason}")]
    Read { file: String, reason: ReadError },
    /// The text is not YAML, or is beyond a limit.
    #[error("{file}:{line}: {message}")]
    Parse {
        file: String,
        line: u32,
        message: String,
    },
    #[error(
        "{file}: holds no YAML document; expected what `kubectl get <kinds> -A -o yaml` prints"
    )]
    Empty { file: String },
    /// A document or list item that is not an object at all.
    #[error(
        "{file}:{line}: {item} is a {found}, not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints"
    )]
    NotObject {
        file: String,
        line: u32,
        item: String,
        found: &'static str,
    },
    /// A field of an item with the wrong shape or value.
    #[error("{file}:{line}: {item}: {message}")]
    Item {
        file: String,
        line: u32,
        /// `items[3] Nova compute/nova`: where it is and, once known, what.
        item: String,
        message: String,
    },
}

/// [`parse_live_within`] under [`DEFAULT_MAX_LIVE_BYTES`].
pub fn parse_live(file: &str, text: &str) -> Result<Live, LiveError> {
    parse_live_within(file, text, DEFAULT_MAX_LIVE_BYTES)
}

/// Parses `kubectl get -o yaml|json` output: a `List` (or several), or a
/// stream of objects. Objects of kinds that are not ours are ignored,
/// whatever their shape; ours must have the shape the CRDs give them, and
/// their releases must be releases. `""` in a status field is "none" (the
/// operators write it when idle). JSON is read as JSON, and a document that
/// holds no value is skipped where a `null` item is refused (module doc).
pub fn parse_live_within(file: &str, text: &str, max_bytes: usize) -> Result<Live, LiveError> {
    let limit = Limit::live(max_bytes);
    if text.len() > max_bytes {
        return Err(LiveError::Read {
            file: file.to_owned(),
            reason: ReadError::TooLarge { limit },
        });
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let docs: Vec<Lined> = match json_document(file, text, &limit)? {
        Some(doc) => vec![doc],
        None => {
            serde_saphyr::from_multiple_with_options(text, parser_options(text.len(), max_bytes))
                .map_err(|e| parse_error(file, &e, &limit, None))?
        }
    };
    let mut reader = Reader {
        file,
        live: Live::default(),
    };
    let several = docs
        .iter()
        .filter(|d| !matches!(d.value, Value::Null))
        .count()
        > 1;
    let mut any = false;
    for (i, doc) in docs.iter().enumerate() {
        // A document that holds no value (a stray `---`, a tag on nothing)
        // stands for no object; a `null` item of a List is refused in
        // `list` (the module doc says why they differ).
        if matches!(doc.value, Value::Null) {
            continue;
        }
        any = true;
        let at = if several {
            format!("document {} ", i + 1)
        } else {
            String::new()
        };
        reader.document(doc, &at, i + 1)?;
    }
    if !any {
        return Err(LiveError::Empty {
            file: file.to_owned(),
        });
    }
    Ok(reader.live)
}

/// The parser options a snapshot of `len` bytes is read with under
/// `max_bytes` (public so that other readers of the same text, the fuzz
/// targets, parse it exactly as [`parse_live_within`] does).
pub fn parser_options(len: usize, max_bytes: usize) -> serde_saphyr::Options {
    let mut options = yaml::options(&Limit::live(max_bytes), len);
    options.strict_booleans = true;
    // Objects that are not ours may hold anything; a `.nan` there must not
    // fail the snapshot (and in a field of ours it is not a release anyway).
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::AsString;
    options
}

/// A parser's error in our words; `line` replaces the parser's where we
/// found the error ourselves (a key twice in a JSON mapping).
fn parse_error(file: &str, e: &serde_saphyr::Error, limit: &Limit, line: Option<u32>) -> LiveError {
    let d = yaml::describe(e, limit);
    LiveError::Parse {
        file: file.to_owned(),
        line: line.unwrap_or(d.line),
        message: if d.over_limit {
            format!("the snapshot {}", d.message)
        } else {
            format!("does not parse as YAML or JSON: {}", d.message)
        },
    }
}

/// `kubectl -o json` output, read as JSON (the module doc says why). `None`
/// when the text does not start like JSON, is not one JSON value, or is
/// beyond the nesting or node limit: YAML reads it then, refusing what is
/// beyond a limit in its own words, and its message is the one a person sees.
/// The limits are checked before serde_json builds anything, so it never
/// nests deeper than YAML's parser would.
fn json_document(file: &str, text: &str, limit: &Limit) -> Result<Option<Lined>, LiveError> {
    if !text
        .trim_start_matches([' ', '\t', '\r', '\n'])
        .starts_with(['{', '['])
    {
        return Ok(None);
    }
    let Some(lines) = json_lines(text, limit) else {
        return Ok(None);
    };
    let Ok(JsonNode(mut doc)) = serde_json::from_str::<JsonNode>(text) else {
        return Ok(None);
    };
    place_lines(&mut doc, &mut lines.into_iter())
        .map_err(|(e, line)| parse_error(file, &e, limit, Some(line)))?;
    Ok(Some(doc))
}

/// The line each value of a JSON text starts on, in the order
/// [`place_lines`] visits them (a value, then its items or its mapping's
/// values); `None` past YAML's nesting depth or node budget (keys count, as
/// they do in YAML). Any text is scanned without panicking; the lines are
/// only right for text serde_json accepts.
fn json_lines(text: &str, limit: &Limit) -> Option<Vec<u32>> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut line = 1u32;
    let mut nodes = 0usize;
    // Per open collection: is it a mapping.
    let mut open: Vec<bool> = Vec::new();
    // The next string is a mapping's key, not a value.
    let mut key_next = false;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\n' => line = line.saturating_add(1),
            b' ' | b'\t' | b'\r' => {}
            b':' => key_next = false,
            b',' => key_next = open.last() == Some(&true),
            b'}' | b']' => {
                open.pop();
            }
            _ => {
                nodes += 1;
                if nodes > limit.max_nodes() {
                    return None;
                }
                match b {
                    b'"' => {
                        if !key_next {
                            lines.push(line);
                        }
                        // To the closing quote (JSON strings hold no raw newline).
                        i += 1;
                        while let Some(&c) = bytes.get(i)
                            && c != b'"'
                        {
                            i += if c == b'\\' { 2 } else { 1 };
                        }
                    }
                    b'{' | b'[' => {
                        lines.push(line);
                        open.push(b == b'{');
                        if open.len() > yaml::MAX_DEPTH {
                            return None;
                        }
                        key_next = b == b'{';
                    }
                    // A number, true, false or null: to its end.
                    _ => {
                        lines.push(line);
                        while bytes.get(i + 1).is_some_and(|c| {
                            !matches!(c, b',' | b']' | b'}' | b' ' | b'\t' | b'\r' | b'\n')
                        }) {
                            i += 1;
                        }
                    }
                }
            }
        }
        i += 1;
    }
    Some(lines)
}

/// Gives every node of a JSON document its line, and refuses a key twice in
/// one mapping as YAML does (serde_json would keep both here, and the first
/// one found would win where Go's decoder keeps the last); the error is the
/// one YAML's parser gives, and the line of the second value.
fn place_lines(
    node: &mut Lined,
    lines: &mut std::vec::IntoIter<u32>,
) -> Result<(), (serde_saphyr::Error, u32)> {
    node.line = lines.next().unwrap_or(node.line);
    match &mut node.value {
        Value::Seq(items) => {
            for item in items {
                place_lines(item, lines)?;
            }
        }
        Value::Map(map) => {
            for (_, value) in map.iter_mut() {
                place_lines(value, lines)?;
            }
            let mut seen = std::collections::HashSet::with_capacity(map.len());
            for (key, value) in map.iter() {
                if !seen.insert(key.as_str()) {
                    let key = Some(key.clone());
                    let location = serde_saphyr::Location::UNKNOWN;
                    let e = serde_saphyr::Error::DuplicateMappingKey { key, location };
                    return Err((e, value.line));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

struct Reader<'a> {
    file: &'a str,
    live: Live,
}

impl Reader<'_> {
    fn not_object(&self, node: &Lined, item: String) -> LiveError {
        LiveError::NotObject {
            file: self.file.to_owned(),
            line: node.line,
            item,
            found: node.value.kind_name(),
        }
    }

    fn item(&self, line: u32, item: &str, message: String) -> LiveError {
        LiveError::Item {
            file: self.file.to_owned(),
            line,
            item: item.to_owned(),
            message,
        }
    }

    /// One top-level document; `at` is `""` or `"document N "`.
    fn document(&mut self, doc: &Lined, at: &str, number: usize) -> Result<(), LiveError> {
        let Value::Map(map) = &doc.value else {
            return Err(self.not_object(doc, format!("document {number}")));
        };
        if get(map, "items").is_some() {
            self.list(map, doc.line, at.trim_end(), at)
        } else {
            let name = if at.is_empty() {
                format!("document {number}")
            } else {
                at.trim_end().to_owned()
            };
            self.object(map, doc.line, &name)
        }
    }

    /// A `List`: `prefix` names it in messages, `at` starts its items' names.
    fn list(&mut self, map: &Map, line: u32, prefix: &str, at: &str) -> Result<(), LiveError> {
        let Some(items) = get(map, "items") else {
            return Ok(());
        };
        let entries = match &items.value {
            Value::Seq(entries) => entries,
            // `items: null`: a Go nil slice, no items.
            Value::Null => return Ok(()),
            other => {
                let who = if prefix.is_empty() {
                    "the List"
                } else {
                    prefix
                };
                return Err(self.item(
                    items.line.max(line),
                    who,
                    format!("items is a {}, not a list", other.kind_name()),
                ));
            }
        };
        for (i, entry) in entries.iter().enumerate() {
            let name = format!("{at}items[{i}]");
            let Value::Map(m) = &entry.value else {
                return Err(self.not_object(entry, name));
            };
            if get(m, "items").is_some() {
                self.list(m, entry.line, &name, &format!("{name}."))?;
            } else {
                self.object(m, entry.line, &name)?;
            }
        }
        Ok(())
    }

    /// One object: ignored unless it is one of ours, validated if it is.
    fn object(&mut self, map: &Map, line: u32, at: &str) -> Result<(), LiveError> {
        let text_field = |field: &str| -> Result<Option<&str>, LiveError> {
            match get(map, field) {
                None
                | Some(Lined {
                    value: Value::Null, ..
                }) => Ok(None),
                Some(Lined {
                    value: Value::Str(s),
                    ..
                }) => Ok(Some(s.as_str())),
                Some(other) => Err(self.item(
                    other.line,
                    at,
                    format!("{field} is a {}, not a string", other.value.kind_name()),
                )),
            }
        };
        let (Some(api_version), Some(kind)) = (text_field("apiVersion")?, text_field("kind")?)
        else {
            return Err(self.item(
                line,
                at,
                "has no apiVersion or kind: not a Kubernetes object".into(),
            ));
        };
        let kind = match Kind::recognise(api_version, kind) {
            Some(Recognised::Ours(k)) => k,
            // What the operators would serve under another version is ours,
            // and skipping it would judge as if the object were not there.
            Some(Recognised::WrongVersion(k)) => {
                return Err(self.item(
                    line,
                    &format!("{at} {k}"),
                    format!(
                        "apiVersion {api_version} is not the version lockstep reads; get {} objects as {}",
                        k,
                        k.api_version()
                    ),
                ));
            }
            // Not ours (or a companion kind with no release): any shape at all.
            _ => return Ok(()),
        };
        let what = format!("{at} {kind}");
        let (key, generation, projected_by) = self.metadata(map, line, kind, &what)?;
        let who = format!("{at} {kind} {}/{}", key.namespace, key.name);
        let status = self.status(map, &who)?;
        self.live.objects.insert(
            key,
            LiveStatus {
                generation,
                projected_by,
                ..status
            },
        );
        Ok(())
    }

    fn metadata(
        &self,
        map: &Map,
        line: u32,
        kind: Kind,
        who: &str,
    ) -> Result<(Key, Option<i64>, Option<Key>), LiveError> {
        let meta = match get(map, "metadata") {
            None => return Err(self.item(line, who, "metadata is missing".into())),
            Some(Lined {
                value: Value::Map(m),
                ..
            }) => m,
            Some(other) => {
                return Err(self.item(
                    other.line,
                    who,
                    format!("metadata is a {}, not a mapping", other.value.kind_name()),
                ));
            }
        };
        let string = |field: &str| -> Result<Option<&str>, LiveError> {
            match get(meta, field) {
                None
                | Some(Lined {
                    value: Value::Null, ..
                }) => Ok(None),
                Some(Lined {
                    value: Value::Str(s),
                    ..
                }) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
                Some(other) => Err(self.item(
                    other.line,
                    who,
                    format!(
                        "metadata.{field} is a {}, not a string",
                        other.value.kind_name()
                    ),
                )),
            }
        };
        let Some(name) = string("name")? else {
            return Err(self.item(line, who, "metadata.name is missing".into()));
        };
        let namespace = string("namespace")?.unwrap_or("default");
        let generation = match get(meta, "generation") {
            None
            | Some(Lined {
                value: Value::Null, ..
            }) => None,
            Some(Lined {
                value: Value::Int(g),
                line,
            }) => Some(i64::try_from(*g).map_err(|_| {
                self.item(
                    *line,
                    who,
                    format!("metadata.generation {g} is out of range"),
                )
            })?),
            Some(other) => {
                return Err(self.item(
                    other.line,
                    who,
                    format!(
                        "metadata.generation is a {}, not a whole number",
                        other.value.kind_name()
                    ),
                ));
            }
        };
        let projected_by = self.plane_of(meta, namespace, who)?;
        Ok((Key::new(kind, namespace, name), generation, projected_by))
    }

    /// The ControlPlane that projects the object, read as [`projecting_plane`]
    /// reads it. Ownership misread as "none" would let a standalone manifest
    /// fight the plane, so a malformed ownerReferences or labels is an error.
    fn plane_of(&self, meta: &Map, namespace: &str, who: &str) -> Result<Option<Key>, LiveError> {
        let bad = |l: &Lined, what: &str| {
            self.item(
                l.line,
                who,
                format!("metadata.{what} is a {}", l.value.kind_name()),
            )
        };
        let mut owners: Vec<(String, String, String)> = Vec::new();
        match get(meta, "ownerReferences") {
            None
            | Some(Lined {
                value: Value::Null, ..
            }) => {}
            Some(Lined {
                value: Value::Seq(refs),
                ..
            }) => {
                for (i, r) in refs.iter().enumerate() {
                    let Value::Map(m) = &r.value else {
                        return Err(bad(r, &format!("ownerReferences[{i}]")));
                    };
                    let text = |f: &str| match get(m, f) {
                        Some(Lined {
                            value: Value::Str(s),
                            ..
                        }) => s.clone(),
                        _ => String::new(),
                    };
                    owners.push((text("apiVersion"), text("kind"), text("name")));
                }
            }
            Some(other) => return Err(bad(other, "ownerReferences")),
        }
        let labels = match get(meta, "labels") {
            Some(Lined {
                value: Value::Map(m),
                ..
            }) => Some(m),
            None
            | Some(Lined {
                value: Value::Null, ..
            }) => None,
            Some(other) => return Err(bad(other, "labels")),
        };
        let label = |k: &str| match labels.and_then(|m| get(m, k)) {
            Some(Lined {
                value: Value::Str(s),
                ..
            }) => Some(s.as_str()),
            _ => None,
        };
        Ok(projecting_plane(
            namespace,
            owners
                .iter()
                .map(|(a, k, n)| (a.as_str(), k.as_str(), n.as_str())),
            label,
        ))
    }

    fn status(&self, map: &Map, who: &str) -> Result<LiveStatus, LiveError> {
        let status = match get(map, "status") {
            None
            | Some(Lined {
                value: Value::Null, ..
            }) => return Ok(LiveStatus::default()),
            Some(Lined {
                value: Value::Map(m),
                ..
            }) => m,
            Some(other) => {
                return Err(self.item(
                    other.line,
                    who,
                    format!("status is a {}, not a mapping", other.value.kind_name()),
                ));
            }
        };
        let string = |m: &Map, path: &str, field: &str| -> Result<Option<String>, LiveError> {
            match get(m, field) {
                None
                | Some(Lined {
                    value: Value::Null, ..
                }) => Ok(None),
                Some(Lined {
                    value: Value::Str(s),
                    ..
                }) => Ok(Some(s.clone())),
                Some(other) => Err(self.item(
                    other.line,
                    who,
                    format!(
                        "{path}.{field} is a {}, not a string{}",
                        other.value.kind_name(),
                        if matches!(other.value, Value::Int(_) | Value::Float) {
                            "; quote it"
                        } else {
                            ""
                        }
                    ),
                )),
            }
        };
        let checked = |field: &str| -> Result<Option<String>, LiveError> {
            let value = string(status, "status", field)?;
            if let Some(message) = value.as_deref().and_then(|v| status_text_problem(field, v)) {
                let line = get(status, field).map_or(1, |n| n.line);
                return Err(self.item(line, who, message));
            }
            Ok(value)
        };
        let installed_release = checked("installedRelease")?;
        let target_release = checked("targetRelease")?;
        let upgrade_phase = checked("upgradePhase")?;
        let installed_image = checked("installedImage")?;
        let conditions = match get(status, "conditions") {
            None
            | Some(Lined {
                value: Value::Null, ..
            }) => Vec::new(),
            Some(Lined {
                value: Value::Seq(list),
                ..
            }) => {
                let mut out = Vec::with_capacity(list.len());
                for (i, c) in list.iter().enumerate() {
                    let path = format!("status.conditions[{i}]");
                    let Value::Map(m) = &c.value else {
                        return Err(self.item(
                            c.line,
                            who,
                            format!("{path} is a {}, not a mapping", c.value.kind_name()),
                        ));
                    };
                    let observed_generation = match get(m, "observedGeneration") {
                        None
                        | Some(Lined {
                            value: Value::Null, ..
                        }) => None,
                        Some(Lined {
                            value: Value::Int(g),
                            line,
                        }) => Some(i64::try_from(*g).map_err(|_| {
                            self.item(
                                *line,
                                who,
                                format!("{path}.observedGeneration {g} is out of range"),
                            )
                        })?),
                        Some(other) => {
                            return Err(self.item(
                                other.line,
                                who,
                                format!(
                                    "{path}.observedGeneration is a {}, not a whole number",
                                    other.value.kind_name()
                                ),
                            ));
                        }
                    };
                    out.push(Condition {
                        type_: string(m, &path, "type")?.unwrap_or_default(),
                        status: string(m, &path, "status")?.unwrap_or_default(),
                        reason: string(m, &path, "reason")?.unwrap_or_default(),
                        message: string(m, &path, "message")?.unwrap_or_default(),
                        observed_generation,
                    });
                }
                out
            }
            Some(other) => {
                return Err(self.item(
                    other.line,
                    who,
                    format!(
                        "status.conditions is a {}, not a list",
                        other.value.kind_name()
                    ),
                ));
            }
        };
        Ok(LiveStatus {
            installed_release,
            target_release,
            upgrade_phase,
            installed_image,
            generation: None,
            conditions,
            projected_by: None,
            repair_record: None,
            applied: None,
        })
    }
}

/// The ControlPlane projecting an object, from its metadata
/// (`docs/operators.md` §4.1): a controller ownerReference to a
/// `c5c3.io` ControlPlane in the object's own namespace, or, across
/// namespaces, the labels `c5c3.io/controlplane-name` and
/// `c5c3.io/controlplane-namespace`. `owners` are (apiVersion, kind, name).
/// One reading for `kubectl get` snapshots and the API server.
pub fn projecting_plane<'a>(
    namespace: &str,
    owners: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    label: impl Fn(&str) -> Option<&'a str>,
) -> Option<Key> {
    let owned = owners.into_iter().find(|(api, kind, name)| {
        *kind == "ControlPlane" && api.split('/').next() == Some("c5c3.io") && !name.is_empty()
    });
    if let Some((_, _, name)) = owned {
        return Some(Key::new(Kind::ControlPlane, namespace, name));
    }
    let name = label("c5c3.io/controlplane-name").filter(|n| !n.is_empty())?;
    let ns = label("c5c3.io/controlplane-namespace")
        .filter(|n| !n.is_empty())
        .unwrap_or(namespace);
    Some(Key::new(Kind::ControlPlane, ns, name))
}

type Map = Vec<(String, Lined)>;

fn get<'a>(map: &'a Map, key: &str) -> Option<&'a Lined> {
    map.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A YAML value and the line it starts on: enough to point a person at
/// what to fix, without keeping serde-saphyr's full spans.
struct Lined {
    value: Value,
    line: u32,
}

enum Value {
    Null,
    Bool,
    Int(i128),
    Float,
    Str(String),
    Seq(Vec<Lined>),
    Map(Map),
}

impl Value {
    fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool => "boolean",
            Value::Int(_) => "number",
            Value::Float => "number",
            Value::Str(_) => "string",
            Value::Seq(_) => "list",
            Value::Map(_) => "mapping",
        }
    }
}

impl<'de> Deserialize<'de> for Lined {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = serde_saphyr::Spanned::<Value>::deserialize(d)?;
        Ok(Lined {
            value: s.value,
            line: u32::try_from(s.referenced.line())
                .unwrap_or(u32::MAX)
                .max(1),
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor::<Lined>(std::marker::PhantomData))
    }
}

/// A JSON value: serde_json keeps no positions, so [`place_lines`] sets the
/// lines afterwards from the text.
struct JsonNode(Lined);

impl<'de> Deserialize<'de> for JsonNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = d.deserialize_any(ValueVisitor::<JsonNode>(std::marker::PhantomData))?;
        Ok(JsonNode(Lined { value, line: 1 }))
    }
}

impl From<JsonNode> for Lined {
    fn from(node: JsonNode) -> Self {
        node.0
    }
}

/// Builds a [`Value`] whose items and mapping values are read as `N`:
/// [`Lined`] (serde-saphyr's spans) for YAML, [`JsonNode`] for JSON.
struct ValueVisitor<N>(std::marker::PhantomData<N>);

impl<'de, N: Deserialize<'de> + Into<Lined>> Visitor<'de> for ValueVisitor<N> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Bool)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(i128::try_from(v).map_or(Value::Float, Value::Int))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Float)
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1024));
        while let Some(x) = a.next_element::<N>()? {
            v.push(x.into());
        }
        Ok(Value::Seq(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        let mut v: Map = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1024));
        // A key twice after its tag is decoded (`kind: x` and `!t kind:`):
        // Kubernetes' reader takes the last and `get` the first, so the
        // snapshot would be read as another object than kubectl's. Refused,
        // as in YAML (`yaml::describe`) and in manifests.
        let mut seen: Option<std::collections::HashSet<String>> = None;
        while let Some(k) = a.next_key::<KeyText>()? {
            let twice = match &mut seen {
                Some(set) => !set.insert(k.0.clone()),
                None => {
                    let twice = v.iter().any(|(x, _)| *x == k.0);
                    if v.len() >= 16 {
                        seen = Some(
                            v.iter()
                                .map(|(x, _)| x.clone())
                                .chain([k.0.clone()])
                                .collect(),
                        );
                    }
                    twice
                }
            };
            if twice {
                return Err(serde::de::Error::custom(format!(
                    "the key {:?} appears twice in one mapping; keep one",
                    k.0
                )));
            }
            v.push((k.0, a.next_value::<N>()?.into()));
        }
        Ok(Value::Map(v))
    }
}

/// Mapping keys as text: YAML allows `1: x`; a key that is not text never
/// names a field lockstep reads, but must not fail the snapshot.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(KeyText(match Value::deserialize(d)? {
            Value::Str(s) => s,
            Value::Int(i) => i.to_string(),
            _ => String::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key twice once its tag is decoded (`!: kind:` is the key `kind`
    /// under the tag `!:`): kubectl's reader takes the last, ours took the
    /// first, so the snapshot read as another object (found by the `live`
    /// fuzz target: YAML skipped a `Co101`, its JSON twin refused a null
    /// kind). Refused, as in manifests.
    #[test]
    fn a_key_twice_after_its_tag_is_refused() {
        for text in [
            "apiVersion: v1\nkind: Co101\n!: kind: \n",
            "apiVersion: k6c3\u{feff}/leaderElection:v1Xap\nkind: Co101\n.ion: k6c3..\n!: kind: ",
        ] {
            let e = parse_live("live.yaml", text).unwrap_err().to_string();
            assert!(
                e.contains("the key \"kind\" appears twice in one mapping"),
                "{text:?}: {e}"
            );
        }
        // Many keys (the set, past sixteen) and one twice at the end.
        let mut many = String::from("apiVersion: v1\nkind: ConfigMap\ndata:\n");
        for i in 0..40 {
            many.push_str(&format!("  k{i}: x\n"));
        }
        many.push_str("  !t k3: y\n");
        let e = parse_live("live.yaml", &many).unwrap_err().to_string();
        assert!(e.contains("the key \"k3\" appears twice"), "{e}");
    }

    #[test]
    fn reads_a_kubectl_list() {
        let text = r#"apiVersion: v1
kind: List
items:
- apiVersion: nova.openstack.c5c3.io/v1alpha1
  kind: Nova
  metadata: {name: nova, namespace: compute, generation: 4}
  status:
    installedRelease: "2026.1"
    targetRelease: "2026.2"
    upgradePhase: Migrating
    conditions:
    - {type: Ready, status: "False", reason: NotAllReady, observedGeneration: 4}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: x, namespace: y}
- apiVersion: glance.openstack.c5c3.io/v1alpha1
  kind: Glance
  metadata: {name: g, namespace: image}
metadata: {resourceVersion: ""}
"#;
        let live = parse_live("live.yaml", text).unwrap();
        assert_eq!(live.objects.len(), 2);
        let n = live.get(&Key::new(Kind::Nova, "compute", "nova")).unwrap();
        assert_eq!(n.in_flight_target(), Some("2026.2"));
        assert_eq!(n.phase(), Some("Migrating"));
        assert_eq!(n.generation, Some(4));
        let ready = n.condition("Ready").unwrap();
        assert_eq!(ready.observed_generation, Some(4));
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NotAllReady")
        );
        let g = live.get(&Key::new(Kind::Glance, "image", "g")).unwrap();
        assert_eq!(g.in_flight_target(), None);
    }

    #[test]
    fn empty_status_fields_mean_none_and_keystone_tags_are_releases() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: nova.openstack.c5c3.io/v1alpha1\n  kind: Nova\n  metadata: {name: nova, namespace: compute}\n  status: {installedRelease: \"2026.1\", targetRelease: \"\", upgradePhase: \"\", installedImage: \"\"}\n- apiVersion: keystone.openstack.c5c3.io/v1alpha1\n  kind: Keystone\n  metadata: {name: keystone, namespace: identity}\n  status: {installedRelease: \"2026.1-p1\", targetRelease: null}\n";
        let live = parse_live("live.yaml", text).unwrap();
        let n = live.get(&Key::new(Kind::Nova, "compute", "nova")).unwrap();
        assert_eq!(
            (n.installed(), n.in_flight_target(), n.phase()),
            (Some("2026.1"), None, None)
        );
        let k = live
            .get(&Key::new(Kind::Keystone, "identity", "keystone"))
            .unwrap();
        assert_eq!(k.installed(), Some("2026.1-p1"));
    }

    #[test]
    fn objects_that_are_not_ours_may_have_any_shape() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: apps/v1, kind: Deployment, metadata: 7, status: [1, 2]}\n- {apiVersion: v1, kind: ConfigMap, data: {installedRelease: abc}}\n- {apiVersion: glance.openstack.c5c3.io/v1alpha1, kind: GlanceBackend, metadata: {name: b}, status: nonsense}\n";
        assert!(parse_live("live.yaml", text).unwrap().objects.is_empty());
    }

    /// Every wrong shape is an error naming the file, line, item and field.
    #[test]
    fn wrong_shapes_and_garbage_releases_are_errors() {
        let nova = |status: &str| {
            format!(
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: glance.openstack.c5c3.io/v1alpha1\n  kind: Glance\n  metadata: {{name: glance, namespace: image}}\n- apiVersion: nova.openstack.c5c3.io/v1alpha1\n  kind: Nova\n  metadata: {{name: nova, namespace: compute}}\n  status:\n{status}"
            )
        };
        let cases: Vec<(String, &str)> = vec![
            ("abc\n".into(), "live.yaml:1: document 1 is a string, not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints"),
            ("- a\n- b\n".into(), "live.yaml:1: document 1 is a list, not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints"),
            ("".into(), "live.yaml: holds no YAML document; expected what `kubectl get <kinds> -A -o yaml` prints"),
            ("---\n---\n".into(), "live.yaml: holds no YAML document; expected what `kubectl get <kinds> -A -o yaml` prints"),
            ("apiVersion: v1\nkind: List\nitems: abc\n".into(), "live.yaml:3: the List: items is a string, not a list"),
            ("apiVersion: v1\nkind: List\nitems:\n- 7\n".into(), "live.yaml:4: items[0] is a number, not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints"),
            ("apiVersion: v1\nkind: List\nitems:\n- {name: x}\n".into(), "live.yaml:4: items[0]: has no apiVersion or kind: not a Kubernetes object"),
            ("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: nova.openstack.c5c3.io/v1alpha1, kind: Nova, metadata: {namespace: compute}}\n".into(), "live.yaml:4: items[0] Nova: metadata.name is missing"),
            ("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: nova.openstack.c5c3.io/v1alpha1, kind: Nova}\n".into(), "live.yaml:4: items[0] Nova: metadata is missing"),
            ("apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata:\n  name: nova\n  generation: two\n".into(), "live.yaml:5: document 1 Nova: metadata.generation is a string, not a whole number"),
            ("apiVersion: nova.openstack.c5c3.io/v1beta1\nkind: Nova\nmetadata: {name: nova}\n".into(), "live.yaml:1: document 1 Nova: apiVersion nova.openstack.c5c3.io/v1beta1 is not the version lockstep reads; get Nova objects as nova.openstack.c5c3.io/v1alpha1"),
            (nova("    installedRelease: \"abc\"\n"), "live.yaml:11: items[1] Nova compute/nova: status.installedRelease \"abc\" is not a release (expected YYYY.N, e.g. 2026.1)"),
            (nova("    targetRelease: \"2026.3\"\n"), "live.yaml:11: items[1] Nova compute/nova: status.targetRelease \"2026.3\" is not a release (expected YYYY.N, e.g. 2026.1)"),
            (nova("    installedRelease: 2026.1\n"), "live.yaml:11: items[1] Nova compute/nova: status.installedRelease is a number, not a string; quote it"),
            (nova(&format!("    installedImage: \"{}\"\n", "r".repeat(MAX_STATUS_IMAGE + 1))), "live.yaml:11: items[1] Nova compute/nova: status.installedImage is 1025 bytes, more than the 1024 lockstep reads (no operator writes one so long)"),
            (nova(&format!("    upgradePhase: \"{}\"\n", "r".repeat(MAX_STATUS_WORD + 1))), "live.yaml:11: items[1] Nova compute/nova: status.upgradePhase is 65 bytes, more than the 64 lockstep reads (no operator writes one so long)"),
            (nova("    upgradePhase: [a]\n"), "live.yaml:11: items[1] Nova compute/nova: status.upgradePhase is a list, not a string"),
            (nova("    conditions: 7\n"), "live.yaml:11: items[1] Nova compute/nova: status.conditions is a number, not a list"),
            (nova("    conditions:\n    - {type: Ready}\n    - {type: Synced, observedGeneration: x}\n"), "live.yaml:13: items[1] Nova compute/nova: status.conditions[1].observedGeneration is a string, not a whole number"),
            (nova("    conditions:\n    - Ready\n"), "live.yaml:12: items[1] Nova compute/nova: status.conditions[0] is a string, not a mapping"),
            (nova("    conditions:\n    - {type: Ready, status: true}\n"), "live.yaml:12: items[1] Nova compute/nova: status.conditions[0].status is a boolean, not a string"),
            (format!("{}  status: 7\n", nova("").trim_end_matches("  status:\n")), "live.yaml:10: items[1] Nova compute/nova: status is a number, not a mapping"),
            ("{apiVersion: v1, kind: List, items: []}\n---\n- x\n".into(), "live.yaml:3: document 2 is a list, not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints"),
            ("a: [\n".into(), "live.yaml:1: does not parse as YAML or JSON: unclosed bracket '['"),
        ];
        for (text, expected) in cases {
            let err = parse_live("live.yaml", &text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            assert_eq!(err.to_string(), expected, "{text}");
        }
    }

    #[test]
    fn the_byte_limit_is_checked_and_named() {
        let text = "apiVersion: v1\nkind: List\nitems: []\n";
        assert!(parse_live_within("l.yaml", text, text.len()).is_ok());
        let err = parse_live_within("l.yaml", text, 16)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "l.yaml: is larger than the live snapshot limit of 16 bytes; raise --max-live-bytes, or select fewer kinds or namespaces"
        );
    }

    const NOT_OBJECT: &str =
        "not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints";

    /// A document holding no value stands for no object and is skipped; a
    /// `null` item of a List is a hole where an object was, and is refused
    /// (the module doc says why). The fuzz target's finding: a stream whose
    /// second document is `!:`, a tag on nothing, read as no object, while
    /// the same documents as a JSON List were refused.
    #[test]
    fn a_null_document_is_skipped_and_a_null_item_refused() {
        let nova = "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata: {name: nova, namespace: compute}\nstatus: {installedRelease: \"2026.1\"}\n";
        for stream in [
            format!("---\n{nova}---\n"),
            format!("{nova}...\n---\n---\n"),
            format!("{nova}---\nnull\n---\n~\n"),
            format!("!x\n---\n{nova}---\n!!null\n"),
            format!("{nova}...\n!: "),
        ] {
            let live = parse_live("live.yaml", &stream).unwrap_or_else(|e| panic!("{e}\n{stream}"));
            assert_eq!(live.objects.len(), 1, "{stream}");
            let n = live.get(&Key::new(Kind::Nova, "compute", "nova")).unwrap();
            assert_eq!(n.installed(), Some("2026.1"), "{stream}");
        }
        let found = "apiVersion: k6c3\u{feff}/v1Xap\nkind: Co101\n...\n!: ";
        assert!(parse_live("live.yaml", found).unwrap().objects.is_empty());
        // A stream of nothing else is no snapshot.
        for empty in ["!x\n", "---\n...\n---\n!:\n", "null\n", "\u{feff}~\n"] {
            assert_eq!(
                parse_live("live.yaml", empty).unwrap_err().to_string(),
                "live.yaml: holds no YAML document; expected what `kubectl get <kinds> -A -o yaml` prints",
                "{empty:?}"
            );
        }
        let hole =
            |line: u32, item: &str| format!("live.yaml:{line}: {item} is a null, {NOT_OBJECT}");
        let cases = [
            (
                "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap}\n- null\n".to_owned(),
                hole(5, "items[1]"),
            ),
            ("apiVersion: v1\nkind: List\nitems:\n- ~\n-\n".into(), hole(4, "items[0]")),
            ("apiVersion: v1\nkind: List\nitems:\n-\n".into(), hole(4, "items[0]")),
            (
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  items: [null]\n".into(),
                hole(6, "items[0].items[0]"),
            ),
            // The finding's documents as kubectl's JSON List, null kept.
            (
                "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[{\"apiVersion\":\"k6c3\u{feff}/v1Xap\",\"kind\":\"Co101\"},null]}".into(),
                hole(1, "items[1]"),
            ),
            (
                "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [\n    null\n  ]\n}\n".into(),
                hole(5, "items[0]"),
            ),
        ];
        for (text, expected) in cases {
            let err = parse_live("live.yaml", &text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            assert_eq!(err.to_string(), expected, "{text}");
        }
    }

    /// `kubectl -o json` writes DEL, the C1 controls and U+FFFE raw inside
    /// strings, and YAML refuses them anywhere: JSON is read as JSON.
    #[test]
    fn json_is_read_as_json_whatever_its_strings_hold() {
        let odd = "a\u{7f}b\u{85}c\u{9f}d\u{fffe}e\u{ffff}f\u{2028}g\u{feff}h";
        let mut data = serde_json::Map::new();
        // YAML allows no implicit key over 1024 characters; JSON has no such limit.
        data.insert("k".repeat(2000), odd.into());
        let json = serde_json::to_string_pretty(&serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": odd}, "data": data},
                {
                    "apiVersion": "nova.openstack.c5c3.io/v1alpha1",
                    "kind": "Nova",
                    "metadata": {"name": "nova", "namespace": "compute", "generation": 3},
                    "status": {
                        "installedRelease": "2026.1",
                        "conditions": [
                            {"type": "Ready", "status": "False", "message": odd, "observedGeneration": 3}
                        ]
                    }
                }
            ],
            "metadata": {"resourceVersion": ""}
        }))
        .unwrap();
        assert!(
            json.contains('\u{7f}') && json.contains('\u{fffe}'),
            "written raw"
        );
        let live = parse_live("live.json", &json).unwrap();
        assert_eq!(live.objects.len(), 1);
        let n = live.get(&Key::new(Kind::Nova, "compute", "nova")).unwrap();
        assert_eq!(n.installed(), Some("2026.1"));
        assert_eq!(n.generation, Some(3));
        let ready = n.condition("Ready").unwrap();
        assert_eq!(
            (ready.message.as_str(), ready.observed_generation),
            (odd, Some(3))
        );
        // After a byte order mark and blank lines, too.
        let marked = format!("\u{feff}\n \t\r\n{json}");
        assert_eq!(
            parse_live("live.json", &marked).unwrap().objects,
            live.objects
        );
        // Escapes are JSON's: a surrogate pair (Python's json.dumps writes them).
        let escaped = json.replace(odd, "\\ud83d\\ude00 \\u007f \\/");
        let live = parse_live("live.json", &escaped).unwrap();
        let n = live.get(&Key::new(Kind::Nova, "compute", "nova")).unwrap();
        assert_eq!(n.condition("Ready").unwrap().message, "\u{1f600} \u{7f} /");
        // What made this necessary: the same text as YAML (a trailing `---`
        // makes it a stream, which is not JSON) is refused.
        let err = parse_live("live.json", &format!("{json}---\n")).unwrap_err();
        assert!(
            err.to_string().contains("does not parse as YAML or JSON"),
            "{err}"
        );
    }

    /// The JSON reading checks what the YAML reading checks, with the same
    /// messages, lines and limits: each text is read as JSON and, followed
    /// by `---` (a stream, so not JSON), as YAML.
    #[test]
    fn json_and_yaml_readings_agree_on_messages_lines_and_limits() {
        let list = |items: &str| {
            format!(
                "{{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [\n{items}\n  ]\n}}\n"
            )
        };
        let nova = |meta: &str, status: &str| {
            format!(
                "    {{\n      \"apiVersion\": \"nova.openstack.c5c3.io/v1alpha1\",\n      \"kind\": \"Nova\",\n      \"metadata\": {{\n        \"name\": \"nova\",\n        \"namespace\": \"compute\"{meta}\n      }},\n      \"status\": {{\n{status}\n      }}\n    }}"
            )
        };
        let other = "    {\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"data\": {\"a\": [1, {\"b\": null}], \"c\": true}}";
        // `x` nested `n` deep in a List of no items: the List is one level.
        let deep = |n: usize| {
            format!(
                "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [], \"x\": {}{}}}",
                "[".repeat(n - 1),
                "]".repeat(n - 1)
            )
        };
        let many = format!(
            "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [], \"x\": [{}1]}}",
            "1,".repeat(300_000)
        );
        let cases: Vec<(String, &str)> = vec![
            (
                list(&format!(
                    "{other},\n{}",
                    nova(
                        ",\n        \"generation\": 2",
                        "        \"installedRelease\": \"2026.1\",\n        \"conditions\": [{\"type\": \"Ready\", \"observedGeneration\": 2}]"
                    )
                )),
                "ok: compute/nova 2026.1 2",
            ),
            (
                list(&format!(
                    "{other},\n{}",
                    nova("", "        \"installedRelease\": \"abc\"")
                )),
                "live.yaml:14: items[1] Nova compute/nova: status.installedRelease \"abc\" is not a release (expected YYYY.N, e.g. 2026.1)",
            ),
            (
                list(&nova(
                    "",
                    "        \"upgradePhase\": \"\",\n        \"installedRelease\": 2026.1",
                )),
                "live.yaml:14: items[0] Nova compute/nova: status.installedRelease is a number, not a string; quote it",
            ),
            (
                list(&nova(",\n        \"generation\": \"two\"", "")),
                "live.yaml:11: items[0] Nova: metadata.generation is a string, not a whole number",
            ),
            (
                list(&nova(
                    "",
                    "        \"conditions\": [\n          {\"type\": \"Ready\"},\n          {\"type\": \"Synced\", \"observedGeneration\": 1.5}\n        ]",
                )),
                "live.yaml:15: items[0] Nova compute/nova: status.conditions[1].observedGeneration is a number, not a whole number",
            ),
            (
                list(&format!("{other},\n    7")),
                "live.yaml:6: items[1] is a number, not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints",
            ),
            (
                "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": {\"a\": 1}\n}\n"
                    .into(),
                "live.yaml:4: the List: items is a mapping, not a list",
            ),
            (
                "[\n  {\"apiVersion\": \"v1\", \"kind\": \"List\"}\n]\n".into(),
                "live.yaml:1: document 1 is a list, not a Kubernetes object or List; expected what `kubectl get <kinds> -A -o yaml` prints",
            ),
            (
                list(&nova(",\n        \"name\": \"other\"", "")),
                "live.yaml:11: does not parse as YAML or JSON: the key \"name\" appears twice in one mapping; keep one",
            ),
            (deep(64), "ok: "),
            (
                deep(65),
                "live.yaml:1: the snapshot nests lists and mappings more than 64 levels deep (a fixed limit; no Kubernetes object nests this deep)",
            ),
            (
                many,
                "live.yaml:1: the snapshot holds more than 262144 YAML nodes, the most the live snapshot limit of 1 MiB allows (one per 4 bytes); raise --max-live-bytes, or select fewer kinds or namespaces",
            ),
        ];
        let read = |text: &str| match parse_live_within("live.yaml", text, 1 << 20) {
            Ok(live) => {
                let mut seen: Vec<String> = live
                    .objects
                    .iter()
                    .map(|(k, s)| {
                        format!(
                            "{}/{} {} {}",
                            k.namespace,
                            k.name,
                            s.installed().unwrap_or("-"),
                            s.generation.unwrap_or(-1)
                        )
                    })
                    .collect();
                seen.sort();
                format!("ok: {}", seen.join(", "))
            }
            Err(e) => e.to_string(),
        };
        // The CLI reads on the main thread (8 MiB of stack); a debug build of
        // the YAML parser needs more than a test thread's 2 MiB at 64 levels.
        let run = move || {
            for (json, expected) in cases {
                assert!(json.starts_with(['{', '[']));
                let (as_json, as_yaml) = (read(&json), read(&format!("{json}\n---\n")));
                assert_eq!(as_json, expected, "as JSON:\n{json}");
                assert_eq!(as_yaml, expected, "as YAML:\n{json}");
            }
        };
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(run)
            .unwrap()
            .join()
            .unwrap();
    }
}
