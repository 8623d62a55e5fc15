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

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

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

impl LiveStatus {
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

/// Reads and parses a snapshot file, never reading more than `max_bytes`
/// (+1, to know it is over): `/dev/zero` fails at once.
pub fn read_live(path: &Path, max_bytes: usize) -> Result<Live, LiveError> {
    let file = path.display().to_string();
    let limit = Limit::live(max_bytes);
    let text = yaml::read_text(path, &limit).map_err(|reason| LiveError::Read {
        file: file.clone(),
        reason,
    })?;
    parse_live_within(&file, &text, max_bytes)
}

/// [`parse_live_within`] under [`DEFAULT_MAX_LIVE_BYTES`].
pub fn parse_live(file: &str, text: &str) -> Result<Live, LiveError> {
    parse_live_within(file, text, DEFAULT_MAX_LIVE_BYTES)
}

/// Parses `kubectl get -o yaml|json` output: a `List` (or several), or a
/// stream of objects. Objects of kinds that are not ours are ignored,
/// whatever their shape; ours must have the shape the CRDs give them, and
/// their releases must be releases. `""` in a status field is "none" (the
/// operators write it when idle).
pub fn parse_live_within(file: &str, text: &str, max_bytes: usize) -> Result<Live, LiveError> {
    let limit = Limit::live(max_bytes);
    if text.len() > max_bytes {
        return Err(LiveError::Read {
            file: file.to_owned(),
            reason: ReadError::TooLarge { limit },
        });
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let docs: Vec<Lined> =
        serde_saphyr::from_multiple_with_options(text, parser_options(text.len(), max_bytes))
            .map_err(|e| {
                let d = yaml::describe(&e, &limit);
                LiveError::Parse {
                    file: file.to_owned(),
                    line: d.line,
                    message: if d.over_limit {
                        format!("the snapshot {}", d.message)
                    } else {
                        format!("does not parse as YAML or JSON: {}", d.message)
                    },
                }
            })?;
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
        // An empty document (a stray `---`) holds nothing to misread.
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
        let release = |field: &str| -> Result<Option<String>, LiveError> {
            let value = string(status, "status", field)?;
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty())
                && TaggedRelease::parse(v).is_err()
            {
                let line = get(status, field).map_or(1, |n| n.line);
                return Err(self.item(
                    line,
                    who,
                    format!("status.{field} {v:?} is not a release (expected YYYY.N, e.g. 2026.1)"),
                ));
            }
            Ok(value)
        };
        let installed_release = release("installedRelease")?;
        let target_release = release("targetRelease")?;
        let upgrade_phase = string(status, "status", "upgradePhase")?;
        let installed_image = string(status, "status", "installedImage")?;
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
        struct V;
        impl<'de> Visitor<'de> for V {
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
                Value::deserialize(d)
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
                while let Some(x) = a.next_element::<Lined>()? {
                    v.push(x);
                }
                Ok(Value::Seq(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
                let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1024));
                while let Some(k) = a.next_key::<KeyText>()? {
                    v.push((k.0, a.next_value::<Lined>()?));
                }
                Ok(Value::Map(v))
            }
        }
        d.deserialize_any(V)
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
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.yaml");
        std::fs::write(&path, text).unwrap();
        assert!(read_live(&path, 1024).unwrap().objects.is_empty());
        assert!(
            read_live(&path, 16)
                .unwrap_err()
                .to_string()
                .contains("larger than the live snapshot limit of 16 bytes")
        );
    }
}
