//! Reading the release-relevant part of C5C3 manifests out of YAML files.
//!
//! A file is parsed once into a tree that remembers the line of every node,
//! then only the fields the gate needs are extracted, with the line each came
//! from. Unknown fields are tolerated (the CRDs grow); documents of other
//! kinds are ignored; documents that are not Kubernetes objects are skipped
//! and reported. Anything that could hide a release edit (a syntax error, a
//! recognised kind with a broken spec, a file that is too big or not UTF-8)
//! is a problem that refuses the commit: the gate fails closed.

use std::fmt;
use std::sync::Arc;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::kind::{Key, Kind, Recognised};
use crate::release::ImageRef;

/// Files larger than this are refused rather than read: no real manifest is
/// this big, and an unbounded read is a denial of service.
pub const DEFAULT_MAX_FILE_BYTES: usize = 8 * 1024 * 1024;

/// A value and the 1-based line it was written on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub line: u32,
}

/// One recognised, well-formed object document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub key: Key,
    pub file: Arc<str>,
    /// The line where the document's content starts.
    pub line: u32,
    pub spec: Spec,
    /// `metadata.labels` (string values): what upgrade plans select by.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The [`RECREATE_ANNOTATION`]: the release floor a deliberate
    /// re-creation from scratch drops.
    pub recreate_below: Option<String>,
    /// The whole document as compact JSON text, when the parse was asked to
    /// keep it ([`parse_file_keeping`]): what the daemon applies for this
    /// object, taken from the gate's own parse so that the file is never
    /// read a second time (issue 11's "an apply never re-reads Git") and
    /// the applied object is the one that was judged.
    /// An error when the document holds what JSON cannot (a mapping key
    /// that is itself a mapping or a sequence): the gate judges such a
    /// document, but nothing of it can be applied, and the daemon says so
    /// rather than send something else.
    pub source: Option<Result<Arc<str>, String>>,
    /// What the whole document says, as a digest of its values (comments,
    /// layout and quoting aside; [`fingerprint`]): how the gate tells a
    /// document changed although its release and image did not.
    pub fingerprint: Fingerprint,
}

/// A digest of a document's values: SipHash-1-3 (128 bits) over its node
/// tree, each node tagged with its type and each string with its length, so
/// that two trees have the same digest only if they are equal (or collide,
/// at odds of 2^-128 for documents nobody chose to collide; a collision
/// only leaves a reconfiguration for the next apply). It is compared within
/// one process (baseline against next, the floors in memory), never stored.
pub type Fingerprint = [u8; 16];

/// The [`Fingerprint`] of a node tree.
pub fn fingerprint(node: &Node) -> Fingerprint {
    use siphasher::sip128::{Hasher128 as _, SipHasher13};
    use std::hash::Hasher as _;
    fn feed(h: &mut SipHasher13, node: &Node) {
        let text = |h: &mut SipHasher13, s: &str| {
            h.write_u64(s.len() as u64);
            h.write(s.as_bytes());
        };
        match node {
            Node::Null => h.write_u8(0),
            Node::Bool(b) => h.write(&[1, u8::from(*b)]),
            Node::Int(i) => {
                h.write_u8(2);
                h.write(&i.to_le_bytes());
            }
            Node::Float(f) => {
                h.write_u8(3);
                h.write_u64(f.to_bits());
            }
            Node::Str(s) => {
                h.write_u8(4);
                text(h, s);
            }
            Node::Seq(items) => {
                h.write_u8(5);
                h.write_u64(items.len() as u64);
                for i in items {
                    feed(h, i);
                }
            }
            Node::Map(entries) => {
                h.write_u8(6);
                h.write_u64(entries.len() as u64);
                for (k, v) in entries {
                    text(h, k);
                    feed(h, &v.value);
                }
            }
        }
    }
    let mut h = SipHasher13::new_with_keys(0, 0);
    feed(&mut h, node);
    h.finish128().as_bytes()
}

/// The one escape from an identity's release floor (`docs/gate.md`,
/// "Identity over time"): an object deleted from the cluster on purpose and
/// re-created from scratch below the release Git last accepted for it. The
/// value must name that release, so the annotation acknowledges one floor
/// and cannot be left in a file to wave through later ones.
pub const RECREATE_ANNOTATION: &str = "lockstep.c5c3.io/recreate-below";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    Plane(PlaneSpec),
    Service(ServiceSpec),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaneSpec {
    /// `spec.openStackRelease`, unparsed: the gate judges it.
    pub release: Located<String>,
    /// Enabled services, in `Kind::SERVICES` order.
    pub services: Vec<PlaneService>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaneService {
    pub kind: Kind,
    pub line: u32,
    /// `services.<svc>.image`: replaces the default image verbatim.
    pub image: Option<Located<ImageRef>>,
    /// `services.<svc>.namespace.name`: where the child lives, if not with the plane.
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// `spec.openStackRelease` for the kinds that have it.
    pub release: Option<Located<String>>,
    pub image: Located<ImageRef>,
}

/// Something that must refuse the commit (reason `ManifestInvalid`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: Arc<str>,
    pub line: u32,
    /// The object, when the document got far enough to name one.
    pub key: Option<Key>,
    pub message: String,
}

/// Content that is not a Kubernetes object and was passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub file: Arc<str>,
    pub line: u32,
    pub message: String,
}

/// Everything one file yielded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedFile {
    pub documents: Vec<Document>,
    pub problems: Vec<Problem>,
    pub skipped: Vec<Skip>,
}

/// Whether a path names a file lockstep reads: every file `kubectl apply
/// -R -f`, Argo CD and Flux read as manifests, JSON included (JSON is YAML
/// to lockstep's readers; a `.json` file that is not an object is skipped
/// like any other YAML that is not one).
pub fn is_manifest_path(path: &str) -> bool {
    path.ends_with(".yaml")
        || path.ends_with(".yml")
        || path.ends_with(".json")
        || is_jsonnet(path)
        || is_attributes(path)
}

/// A `.gitattributes` file: read only to refuse the attributes that make
/// a checkout's text differ from the committed text (`parse_file`). One
/// governs the files below its directory, so it is read wherever it is at
/// or above a judged path (`git::selected`).
pub fn is_attributes(path: &str) -> bool {
    path == ".gitattributes" || path.ends_with("/.gitattributes")
}

/// The first attribute of a `.gitattributes` text that makes git write
/// other text at checkout than it committed: `working-tree-encoding`
/// (re-encoded: a `¥` in Shift-JIS is the byte of `\`, and `\x2f` in a
/// quoted apiVersion is `/` to kubectl) or `ident` (`$Id$` expanded). Set in
/// a macro (`[attr]`) too. Its line and name.
fn rewriting_attribute(bytes: &[u8]) -> Option<(u32, &'static str)> {
    // Read more loosely than git does, never less: git splits words at
    // spaces, tabs, CRs and line feeds, takes a pattern whose quote does
    // not close as plain, and a line starting with a form feed or a
    // no-break space before `#` for a pattern. So: no comment is skipped
    // (a comment naming the attribute is refused too), every ASCII space
    // and `"` splits words, and the encoding's name anywhere is enough.
    let line_of = |at: usize| {
        u32::try_from(bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1).unwrap_or(u32::MAX)
    };
    if let Some(at) = memchr::memmem::find(bytes, b"working-tree-encoding") {
        return Some((line_of(at), "working-tree-encoding"));
    }
    let mut at = 0;
    for word in bytes.split(|b| b.is_ascii_whitespace() || *b == b'"') {
        let name = word.split(|&b| b == b'=').next().unwrap_or(word);
        if name == b"ident" {
            return Some((line_of(at), "ident"));
        }
        at += word.len() + 1;
    }
    None
}

/// Jsonnet, which Argo CD's directory source renders and applies: read only
/// to refuse one that speaks of our groups (`parse_file`).
fn is_jsonnet(path: &str) -> bool {
    path.ends_with(".jsonnet") || path.ends_with(".libsonnet")
}

/// Parses one manifest file. Never panics and never fails: what cannot be
/// read becomes a [`Problem`] naming the file and line.
pub fn parse_file(path: &str, bytes: &[u8], max_bytes: usize) -> ParsedFile {
    parse_file_keeping(path, bytes, max_bytes, false)
}

/// [`parse_file`], also keeping each object's whole document as
/// [`Document::source`] when `keep_source` is set (the daemon, which
/// applies what it judged; a one-shot `check` does not pay for it).
pub fn parse_file_keeping(
    path: &str,
    bytes: &[u8],
    max_bytes: usize,
    keep_source: bool,
) -> ParsedFile {
    let file: Arc<str> = Arc::from(path);
    let mut out = ParsedFile::default();
    if bytes.len() > max_bytes {
        out.problems.push(Problem {
            file,
            line: 1,
            key: None,
            message: format!(
                "file is {} bytes, larger than the manifest file limit of {}; split it, raise --max-file-bytes, or leave it out with --path",
                bytes.len(),
                crate::yaml::Bytes(max_bytes)
            ),
        });
        return out;
    }
    // Read as bytes: git reads attributes in any encoding.
    if is_attributes(path) {
        if let Some((line, name)) = rewriting_attribute(bytes) {
            out.problems.push(Problem {
                file,
                line,
                key: None,
                message: format!(
                    "names `{name}`: git rewrites the files it sets it on when it checks them out (re-encoded, or `$Id$` expanded), so kubectl, Argo CD and Flux read other text than lockstep judged; store the files as plain UTF-8 and remove the attribute (lockstep refuses the name anywhere in the file, a comment too)"
                ),
            });
        }
        return out;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let line = line_of_offset(bytes, e.valid_up_to());
            out.problems.push(Problem {
                file,
                line,
                key: None,
                message: format!(
                    "file is not UTF-8 (invalid byte at offset {}); YAML manifests must be UTF-8",
                    e.valid_up_to()
                ),
            });
            return out;
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // lockstep does not render Jsonnet; Argo CD does, and applies what it
    // makes: a C5C3 object there would reach the cluster unjudged.
    if is_jsonnet(path) {
        if let Some(at) = memchr::memmem::find(text.as_bytes(), b"c5c3.io") {
            out.problems.push(Problem {
                file,
                line: line_of_offset(text.as_bytes(), at),
                key: None,
                message: "is Jsonnet that names a C5C3 group; Argo CD renders Jsonnet and applies what it makes, lockstep does not render it: keep C5C3 objects as plain YAML or JSON files".into(),
            });
        }
        return out;
    }
    // A Git LFS pointer reads as one plain string, not an object: skipped,
    // it would judge a manifest's removal, while Argo CD (`enableLfs`) and a
    // checkout with LFS apply the file LFS stores.
    if text.starts_with("version https://git-lfs.github.com/spec/") {
        out.problems.push(Problem {
            file,
            line: 1,
            key: None,
            message: "is a Git LFS pointer; lockstep judges the text committed, while Argo CD (enableLfs) and a checkout with LFS apply the file LFS stores: commit the manifest itself, not through LFS".into(),
        });
        return out;
    }
    // What kubectl, Argo CD and Flux would read otherwise is refused before
    // lockstep reads it its own way.
    if let Some((line, why)) = crate::kube_reading::first_divergence(text) {
        out.problems.push(Problem {
            file,
            line,
            key: None,
            message: why,
        });
        return out;
    }
    // The parser's budget follows the byte limit: a file the limit admits
    // is never refused for its number of nodes or documents.
    let limit = crate::yaml::Limit::manifest(max_bytes);
    // Most manifests are plain block YAML; the fast readers build those
    // line by line (`yaml_lines`) or else from the parser's events, and hand
    // anything else (anchors, tags, merge keys, numbers past plain integers,
    // errors, limits) to serde-saphyr, whose reading they equal
    // (`core/tests/yaml_fast.rs`).
    let docs = crate::yaml_fast::read(text, &limit).map_or_else(
        || {
            let options = crate::yaml::manifest_options(&limit, text.len());
            serde_saphyr::from_multiple_with_options::<At<Node>>(text, options)
        },
        Ok,
    );
    let docs: Vec<At<Node>> = match docs {
        Ok(d) => d,
        Err(e) => {
            let d = crate::yaml::describe(&e, &limit);
            out.problems.push(Problem {
                file,
                line: d.line,
                key: None,
                message: if d.over_limit {
                    format!("file {}", d.message)
                } else {
                    format!("YAML does not parse: {}", d.message)
                },
            });
            return out;
        }
    };
    // Keys as kubectl decodes them: after tags and escapes, a key written
    // twice (`!x openStackRelease`, a `!!binary` key) is the last one to
    // Kubernetes' reader and the first to ours, and `<<` however spelled
    // (`!!merge <<`, `"\x3c\x3c"`, an anchored `<<`) is a merge key to it.
    for doc in &docs {
        if let Some((line, why)) = decoded_keys(&doc.value) {
            out.problems.push(Problem {
                file,
                line,
                key: None,
                message: why,
            });
            return out;
        }
    }
    for doc in docs {
        read_document(&file, doc, keep_source, &mut out);
    }
    // Argo CD skips a whole file that holds this marker anywhere (a
    // comment, a value): its objects would not be applied as judged, and
    // the next hop would skip the one left out.
    if !out.documents.is_empty()
        && let Some(at) = memchr::memmem::find(text.as_bytes(), ARGOCD_SKIP_FILE.as_bytes())
    {
        out.problems.push(Problem {
            file,
            line: line_of_offset(text.as_bytes(), at),
            key: None,
            message: format!(
                "{ARGOCD_SKIP_FILE}: Argo CD leaves a file holding it (anywhere, a comment included) out of what it applies; lockstep judges what is applied as written, so remove it"
            ),
        });
    }
    out
}

/// Argo CD's marker for a file its directory source does not render.
const ARGOCD_SKIP_FILE: &str = "+argocd:skip-file-rendering";

/// The first mapping of `node` with a key that decodes to `<<`
/// or to a key written before it in the same mapping: its line and why.
fn decoded_keys(node: &Node) -> Option<(u32, String)> {
    match node {
        Node::Map(map) => {
            // A set only for the rare large mapping (a ConfigMap's data).
            let mut seen =
                (map.len() > 32).then(|| std::collections::HashSet::with_capacity(map.len()));
            for (i, (k, v)) in map.iter().enumerate() {
                let at = to_line(v.line);
                if k == NULL_KEY {
                    return Some((
                        at,
                        "a null key (`~`, `null` or none): Kubernetes' YAML library cannot turn it into JSON and refuses the whole file, so kubectl, Argo CD and Flux would apply none of it while lockstep judged it; quote the key or remove it".into(),
                    ));
                }
                if k == "<<" {
                    return Some((
                        at,
                        "a merge key (`<<`, however it is written: a tag, quotes, escapes): Kubernetes' YAML library lets it override keys written before it, YAML 1.2 does not, so the two read different values; write the keys out".into(),
                    ));
                }
                let twice = match &mut seen {
                    Some(seen) => !seen.insert(k.as_str()),
                    None => map[..i].iter().any(|(other, _)| other == k),
                };
                if twice && k != COMPLEX_KEY {
                    return Some((
                        at,
                        format!(
                            "the key {:?} appears twice in one mapping once tags and escapes are read: Kubernetes' YAML library takes the last, lockstep the first; write it once",
                            crate::escape::escape(k)
                        ),
                    ));
                }
                if let Some(found) = decoded_keys(&v.value) {
                    return Some(found);
                }
            }
            None
        }
        Node::Seq(items) => items.iter().find_map(decoded_keys),
        _ => None,
    }
}

fn read_document(file: &Arc<str>, doc: At<Node>, keep_source: bool, out: &mut ParsedFile) {
    let line = to_line(doc.line);
    let Node::Map(root) = &doc.value else {
        out.skipped.push(Skip {
            file: file.clone(),
            line,
            message: format!(
                "YAML holding {} is not a Kubernetes object",
                doc.value.kind_name()
            ),
        });
        return;
    };
    // kubectl applies the items of anything with a top-level `items` field
    // (a `kind: List`, or any object carrying one) instead of the object:
    // judged as one object, or skipped as a foreign kind, the items would
    // reach the cluster unjudged.
    // Whatever `items` holds: kubectl's decoder takes any document with the
    // field for a list, and `items: null` applies nothing of it.
    if let Some(items) = get(root, "items") {
        out.problems.push(Problem {
            file: file.clone(),
            line: to_line(items.line),
            key: None,
            message: "a top-level `items`: kubectl applies each item instead of the document (a `kind: List`, or any object carrying `items`, even `items: null`, which applies nothing); write each object as its own document".into(),
        });
        return;
    }
    let api_version = get(root, "apiVersion").and_then(|n| n.value.as_str());
    let kind = get(root, "kind").and_then(|n| n.value.as_str());
    let (Some(api_version), Some(kind)) = (api_version, kind) else {
        // Half an identity that looks like ours is refused, not skipped: a
        // Nova whose `kind` went missing would otherwise read as removed.
        if let Some(why) = looks_like_ours(root, api_version, kind) {
            out.problems.push(Problem {
                file: file.clone(),
                line,
                key: None,
                message: why,
            });
            return;
        }
        out.skipped.push(Skip {
            file: file.clone(),
            line,
            message: "mapping without apiVersion and kind is not a Kubernetes object".into(),
        });
        return;
    };
    // Flux's post-build substitution (`${var}`, `${var:=default}`) runs
    // over every object before the apply: an identity spelled with it is
    // another object to the cluster than to the gate (a foreign apiVersion
    // here, a Nova there).
    for (field, value) in [("apiVersion", api_version), ("kind", kind)] {
        if value.contains("${") {
            out.problems.push(Problem {
                file: file.clone(),
                line,
                key: None,
                message: substituted(field),
            });
            return;
        }
    }
    let kind = match Kind::recognise(api_version, kind) {
        // Not ours: ignored silently, like any other YAML in the repo; and
        // the operators' companion kinds, which carry no release.
        None | Some(Recognised::Companion) => return,
        Some(Recognised::Unknown(u)) => {
            out.problems.push(Problem {
                file: file.clone(),
                line,
                key: None,
                message: u.message,
            });
            return;
        }
        Some(Recognised::WrongVersion(k)) => {
            out.problems.push(Problem {
                file: file.clone(),
                line,
                key: None,
                message: format!(
                    "apiVersion {api_version} is not served for {k}; the operators serve only {}",
                    k.api_version()
                ),
            });
            return;
        }
        Some(Recognised::Ours(k)) => k,
    };
    if let Some((at, field)) = substituted_key(&doc.value) {
        out.problems.push(Problem {
            file: file.clone(),
            line: at,
            key: None,
            message: substituted(&field),
        });
        return;
    }
    let mut ctx = Ctx {
        file,
        key: None,
        problems: Vec::new(),
    };
    if let Some(mut document) = extract(kind, root, line, &mut ctx) {
        document.fingerprint = fingerprint(&doc.value);
        if keep_source {
            document.source = Some(
                serde_json::to_string(&doc.value)
                    .map(Arc::from)
                    .map_err(|e| e.to_string()),
            );
        }
        out.documents.push(document);
    }
    out.problems.extend(ctx.problems);
}

fn substituted(field: &str) -> String {
    format!(
        "`${{` in {field}: Flux's post-build substitution replaces it before the apply, so the cluster would get another object than the one judged; write it out"
    )
}

/// The first place in a C5C3 document where Flux's substitution would
/// change what the gate reads as the object's identity or shape: a key
/// anywhere, or `metadata.name` and `metadata.namespace`. Other values
/// are the operators' business (a release or an image written so does not
/// parse and is refused as such).
fn substituted_key(node: &Node) -> Option<(u32, String)> {
    // Every node of every C5C3 document is walked: no allocation on the
    // way, the path is built only for what is found.
    fn walk(node: &Node, at: Level) -> Option<(u32, Vec<&str>)> {
        match node {
            Node::Map(map) => {
                for (k, v) in map {
                    let named = at == Level::Metadata
                        && (k == "name" || k == "namespace")
                        && v.value.as_str().is_some_and(|s| s.contains("${"));
                    if k.contains("${") || named {
                        return Some((to_line(v.line), vec![k.as_str()]));
                    }
                    let next = if at == Level::Root && k == "metadata" {
                        Level::Metadata
                    } else {
                        Level::Other
                    };
                    if let Some((line, mut path)) = walk(&v.value, next) {
                        path.push(k.as_str());
                        return Some((line, path));
                    }
                }
                None
            }
            Node::Seq(items) => items.iter().find_map(|i| walk(i, Level::Other)),
            _ => None,
        }
    }
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Level {
        Root,
        Metadata,
        Other,
    }
    let (line, mut path) = walk(node, Level::Root)?;
    path.reverse();
    let path = path.join(".");
    let is_name = path == "metadata.name" || path == "metadata.namespace";
    Some((
        line,
        if is_name {
            path
        } else {
            format!("the key {:?}", crate::escape::escape(&path))
        },
    ))
}

/// Why a mapping missing its `apiVersion` or `kind` (or holding one that is
/// not a string) is probably a C5C3 object, if it is.
fn looks_like_ours(root: &Map, api_version: Option<&str>, kind: Option<&str>) -> Option<String> {
    let written = |field: &str| match get(root, field) {
        None => "no".to_owned(),
        Some(n) => n.value.kind_name().to_owned(),
    };
    match (api_version, kind) {
        (Some(api), None) => Kind::recognise(api, "").map(|_| {
            format!(
                "apiVersion {api:?} is a C5C3 group but the document has {} kind (a string is required); lockstep refuses what it cannot read rather than skip a release edit",
                written("kind")
            )
        }),
        (None, Some(kind)) => Kind::ALL
            .iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(kind.trim()))
            .map(|k| {
                format!(
                    "kind {kind:?} has {} apiVersion (a string is required; {k} is {}); lockstep refuses what it cannot read rather than skip a release edit",
                    written("apiVersion"),
                    k.api_version()
                )
            }),
        _ => None,
    }
}

/// Collects problems for one document, naming the object once it is known.
struct Ctx<'a> {
    file: &'a Arc<str>,
    key: Option<Key>,
    problems: Vec<Problem>,
}

impl Ctx<'_> {
    fn fail(&mut self, line: u32, message: impl Into<String>) {
        self.problems.push(Problem {
            file: self.file.clone(),
            line,
            key: self.key.clone(),
            message: message.into(),
        });
    }
}

fn extract(kind: Kind, root: &Map, line: u32, ctx: &mut Ctx<'_>) -> Option<Document> {
    let Some(meta) = get(root, "metadata") else {
        ctx.fail(line, format!("{kind} has no metadata"));
        return None;
    };
    let Node::Map(meta_map) = &meta.value else {
        ctx.fail(to_line(meta.line), "metadata must be a mapping");
        return None;
    };
    let name = match get(meta_map, "name") {
        Some(n) => match n.value.as_str() {
            Some(s) if valid_dns_name(s) => s.to_owned(),
            Some(s) => {
                ctx.fail(
                    to_line(n.line),
                    format!("metadata.name {s:?} is not a valid object name (lower-case RFC 1123, at most 253 characters)"),
                );
                return None;
            }
            None => {
                ctx.fail(to_line(n.line), "metadata.name must be a string");
                return None;
            }
        },
        None => {
            ctx.fail(line, format!("{kind} has no metadata.name"));
            return None;
        }
    };
    let namespace = match get(meta_map, "namespace") {
        Some(n) => match n.value.as_str() {
            Some(s) if valid_dns_label(s) => s.to_owned(),
            _ => {
                ctx.fail(
                    to_line(n.line),
                    "metadata.namespace must be a valid namespace name (lower-case RFC 1123 label)",
                );
                return None;
            }
        },
        // All C5C3 kinds are namespaced, and where a document without a
        // namespace lands is the applying tool's choice (`kubectl -n`, an
        // Argo CD destination, a kustomization's `namespace`), not Git's:
        // judged as `default`, its history would be another object's.
        None => {
            ctx.fail(
                line,
                format!(
                    "{kind} {name} has no metadata.namespace: where it lands would be the applying tool's choice (kubectl -n, an Argo CD destination), so its history cannot be told; name the namespace"
                ),
            );
            return None;
        }
    };
    ctx.key = Some(Key::new(kind, namespace.clone(), name.clone()));
    let Some(spec) = get(root, "spec") else {
        ctx.fail(line, format!("{kind} {namespace}/{name} has no spec"));
        return None;
    };
    let Node::Map(spec_map) = &spec.value else {
        ctx.fail(to_line(spec.line), "spec must be a mapping");
        return None;
    };
    let spec_line = to_line(spec.line);
    let before = ctx.problems.len();
    let spec = if kind == Kind::ControlPlane {
        plane_spec(spec_map, spec_line, ctx).map(Spec::Plane)
    } else {
        service_spec(kind, spec_map, spec_line, ctx).map(Spec::Service)
    };
    if ctx.problems.len() > before {
        return None;
    }
    let labels = match get(meta_map, "labels").map(|l| &l.value) {
        Some(Node::Map(m)) => m
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.value.as_str()?.to_owned())))
            .collect(),
        _ => Default::default(),
    };
    // An annotation that makes the applying tool leave the object out, or
    // create it once and never update it: what lockstep judged would not
    // be what the cluster gets, and the next hop would skip the one left
    // out.
    for (field, label) in [("labels", true), ("annotations", false)] {
        let Some(Node::Map(m)) = get(meta_map, field).map(|a| &a.value) else {
            continue;
        };
        for (k, v) in m {
            if let Some(why) = left_out_by(k, v.value.as_str().unwrap_or_default(), label) {
                ctx.fail(
                    to_line(v.line),
                    format!(
                        "{} {}: {why}; lockstep judges what is applied as written, so remove it",
                        if label { "label" } else { "annotation" },
                        crate::escape::escape(k)
                    ),
                );
            }
        }
    }
    let recreate_below = match get(meta_map, "annotations").map(|a| &a.value) {
        Some(Node::Map(m)) => get(m, RECREATE_ANNOTATION).and_then(|v| match &v.value {
            Node::Str(s) => Some(s.clone()),
            other => {
                ctx.fail(
                    to_line(v.line),
                    format!(
                        "annotation {RECREATE_ANNOTATION} must be a quoted release string, not {}",
                        other.kind_name()
                    ),
                );
                None
            }
        }),
        _ => None,
    };
    if ctx.problems.len() > before {
        return None;
    }
    Some(Document {
        key: Key::new(kind, namespace, name),
        file: ctx.file.clone(),
        line,
        spec: spec?,
        labels,
        recreate_below,
        source: None,
        fingerprint: [0; 16],
    })
}

fn plane_spec(spec: &Map, spec_line: u32, ctx: &mut Ctx<'_>) -> Option<PlaneSpec> {
    let release = release_field(spec, spec_line, true, ctx);
    let mut services = Vec::new();
    if let Some(svcs) = get(spec, "services") {
        match &svcs.value {
            Node::Map(m) => {
                for svc in Kind::SERVICES {
                    let Some(entry) = get(m, svc.service()) else {
                        continue;
                    };
                    let entry_line = to_line(entry.line);
                    let entry_map = match &entry.value {
                        Node::Null => continue, // `nova:` with no body is not enabled.
                        Node::Map(em) => em,
                        other => {
                            ctx.fail(
                                entry_line,
                                format!(
                                    "spec.services.{} must be a mapping, not {}",
                                    svc.service(),
                                    other.kind_name()
                                ),
                            );
                            continue;
                        }
                    };
                    let field = format!("spec.services.{}.image", svc.service());
                    let image = get(entry_map, "image").and_then(|i| image_spec(i, &field, ctx));
                    // Where the child lives is its identity: a block that
                    // does not name a namespace the way the CRD requires
                    // (an RFC 1123 label) is refused, never read as the
                    // plane's own namespace.
                    let namespace = match get(entry_map, "namespace") {
                        // Null is absent, as Kubernetes reads it.
                        None => None,
                        Some(n) if n.value == Node::Null => None,
                        Some(n) => {
                            let name = match &n.value {
                                Node::Map(nm) => get(nm, "name")
                                    .and_then(|v| v.value.as_str())
                                    .filter(|v| valid_dns_label(v)),
                                _ => None,
                            };
                            if name.is_none() {
                                ctx.fail(
                                    to_line(n.line),
                                    format!(
                                        "spec.services.{}.namespace must be a mapping whose name is a namespace name (an RFC 1123 label: lower-case letters, digits and '-', at most 63); omit the block to keep the service in the ControlPlane's namespace",
                                        svc.service()
                                    ),
                                );
                                continue;
                            }
                            name.map(str::to_owned)
                        }
                    };
                    services.push(PlaneService {
                        kind: svc,
                        line: entry_line,
                        image,
                        namespace,
                    });
                }
            }
            Node::Null => {}
            other => ctx.fail(
                to_line(svcs.line),
                format!("spec.services must be a mapping, not {}", other.kind_name()),
            ),
        }
    }
    Some(PlaneSpec {
        release: release?,
        services,
    })
}

fn service_spec(kind: Kind, spec: &Map, spec_line: u32, ctx: &mut Ctx<'_>) -> Option<ServiceSpec> {
    let release = match kind.release_source() {
        crate::kind::ReleaseSource::Field => Some(release_field(spec, spec_line, true, ctx)?),
        _ => None,
    };
    let image = match get(spec, "image") {
        Some(i) => image_spec(i, "spec.image", ctx)?,
        None => {
            ctx.fail(spec_line, "spec.image is required");
            return None;
        }
    };
    Some(ServiceSpec { release, image })
}

fn release_field(
    spec: &Map,
    spec_line: u32,
    required: bool,
    ctx: &mut Ctx<'_>,
) -> Option<Located<String>> {
    let Some(node) = get(spec, "openStackRelease") else {
        if required {
            ctx.fail(spec_line, "spec.openStackRelease is required");
        }
        return None;
    };
    let line = to_line(node.line);
    match &node.value {
        Node::Str(s) => Some(Located {
            value: s.clone(),
            line,
        }),
        Node::Float(f) => {
            ctx.fail(
                line,
                format!(
                    "spec.openStackRelease is the number {f}, not a string; quote it (\"{f}\"): unquoted, 2026.10 and 2026.1 are the same number"
                ),
            );
            None
        }
        other => {
            ctx.fail(
                line,
                format!(
                    "spec.openStackRelease must be a string, not {}",
                    other.kind_name()
                ),
            );
            None
        }
    }
}

fn image_spec(node: &At<Node>, field: &str, ctx: &mut Ctx<'_>) -> Option<Located<ImageRef>> {
    let line = to_line(node.line);
    let Node::Map(m) = &node.value else {
        ctx.fail(
            line,
            format!("{field} must be a mapping with repository and tag or digest"),
        );
        return None;
    };
    let mut string_of = |key: &str| -> Result<Option<&str>, ()> {
        match get(m, key) {
            None => Ok(None),
            Some(n) => match &n.value {
                Node::Str(s) => Ok(Some(s.as_str())),
                other => {
                    ctx.fail(
                        to_line(n.line),
                        format!(
                            "{field}.{key} must be a string, not {}{}",
                            other.kind_name(),
                            if matches!(other, Node::Float(_) | Node::Int(_)) {
                                "; quote it"
                            } else {
                                ""
                            }
                        ),
                    );
                    Err(())
                }
            },
        }
    };
    let repository = string_of("repository");
    let tag = string_of("tag");
    let digest = string_of("digest");
    let (Ok(repository), Ok(tag), Ok(digest)) = (repository, tag, digest) else {
        return None;
    };
    // Point at the pin (tag or digest): that is the line a release bump edits.
    let pin_line = get(m, "tag")
        .or_else(|| get(m, "digest"))
        .map_or(line, |n| to_line(n.line));
    match ImageRef::new(repository, tag, digest) {
        Ok(image) => Some(Located {
            value: image,
            line: pin_line,
        }),
        Err(e) => {
            ctx.fail(line, format!("{field}: {e}"));
            None
        }
    }
}

/// RFC 1123 subdomain, as Kubernetes requires of most object names.
pub(crate) fn valid_dns_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(valid_dns_label_loose)
}

/// RFC 1123 label, as Kubernetes requires of namespace names.
fn valid_dns_label(s: &str) -> bool {
    s.len() <= 63 && valid_dns_label_loose(s)
}

fn valid_dns_label_loose(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn to_line(l: u64) -> u32 {
    u32::try_from(l).unwrap_or(u32::MAX).max(1)
}

fn line_of_offset(bytes: &[u8], offset: usize) -> u32 {
    let newlines = memchr::memchr_iter(b'\n', &bytes[..offset.min(bytes.len())]).count();
    u32::try_from(newlines + 1).unwrap_or(u32::MAX)
}

/// A mapping's entries in the order written.
pub type Map = Vec<(String, At<Node>)>;

/// A node and where it is written: the line for messages, the bytes for an
/// edit in place (`src/plan/writeback.rs`). serde-saphyr's `Spanned` holds
/// the same, but only serde-saphyr can make one, and the fast reader
/// (`yaml_fast`) builds nodes itself.
#[derive(Debug, PartialEq)]
pub struct At<T> {
    pub value: T,
    /// 1-based line of the node (of the alias, for an alias).
    pub line: u64,
    /// Byte offset and length of the node's text, when known.
    pub span: Option<(u64, u64)>,
    /// Written through an alias: the text at `span` is the alias, and the
    /// value lives at its anchor.
    pub aliased: bool,
}

impl<T> From<serde_saphyr::Spanned<T>> for At<T> {
    fn from(s: serde_saphyr::Spanned<T>) -> Self {
        let span = s.referenced.span();
        At {
            line: s.referenced.line(),
            span: span.byte_offset().zip(span.byte_len()),
            aliased: s.referenced != s.defined,
            value: s.value,
        }
    }
}

impl<'de> Deserialize<'de> for At<Node> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_saphyr::Spanned::<Node>::deserialize(d).map(At::from)
    }
}

fn get<'a>(map: &'a Map, key: &str) -> Option<&'a At<Node>> {
    map.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Why a label or an annotation (`label`: which) makes kustomize, Flux,
/// Argo CD or Helm leave an object out of what they apply, or apply it only
/// once, if it does.
fn left_out_by(key: &str, value: &str, label: bool) -> Option<&'static str> {
    match key {
        // Older kustomize drops it whatever the value, v5 unless exactly
        // "false": any value is refused.
        "config.kubernetes.io/local-config" if !label => {
            Some("kustomize leaves a local-config object out of what it builds")
        }
        // Flux reads these as labels or annotations, values in any case.
        "kustomize.toolkit.fluxcd.io/reconcile" if value.eq_ignore_ascii_case("disabled") => {
            Some("Flux does not apply an object whose reconciliation is disabled")
        }
        "kustomize.toolkit.fluxcd.io/ssa"
            if value.eq_ignore_ascii_case("IfNotPresent")
                || value.eq_ignore_ascii_case("Ignore") =>
        {
            Some(
                "Flux creates such an object once (IfNotPresent) or never (Ignore), and does not update it",
            )
        }
        "argocd.argoproj.io/hook" | "helm.sh/hook" if !label => Some(
            "a hook is applied at its phase of a sync, or never (Skip), not as part of the state",
        ),
        _ => None,
    }
}

/// A YAML node with the location of each child, enough to point a person at
/// the line to fix.
#[derive(Debug, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    /// No release-relevant field lives in a sequence; its items are kept
    /// for [`Document::source`], the whole document the daemon applies.
    Seq(Vec<Node>),
    Map(Map),
}

impl Node {
    fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// What the node is, with its article, for "must be a string, not …".
    fn kind_name(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a sequence",
            Node::Map(_) => "a mapping",
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
                Ok(Node::Int(v))
            }
            fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
                Ok(i128::try_from(v).map_or(Node::Float(v as f64), Node::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Str(v))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Node, E> {
                Ok(Node::Str(String::from_utf8_lossy(v).into_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut items = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1024));
                while let Some(n) = a.next_element::<Node>()? {
                    items.push(n);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0));
                while let Some(k) = a.next_key::<KeyText>()? {
                    v.push((k.0, a.next_value()?));
                }
                Ok(Node::Map(v))
            }
        }
        d.deserialize_any(NodeVisitor)
    }
}

/// As JSON, the way `serde_json::Value` would write the same YAML: a
/// non-finite float becomes `null`, keys keep their order.
impl serde::Serialize for Node {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Int(i) => match (i64::try_from(*i), u64::try_from(*i)) {
                (Ok(v), _) => s.serialize_i64(v),
                (_, Ok(v)) => s.serialize_u64(v),
                _ => s.serialize_i128(*i),
            },
            Node::Float(f) => s.serialize_f64(*f),
            Node::Str(t) => s.serialize_str(t),
            Node::Seq(items) => s.collect_seq(items),
            Node::Map(m) => {
                if m.iter().any(|(k, _)| k == COMPLEX_KEY) {
                    return Err(serde::ser::Error::custom(
                        "a mapping key is itself a mapping or a sequence, which JSON (and so the API server) cannot hold; write the key as text",
                    ));
                }
                s.collect_map(m.iter().map(|(k, v)| (k, &v.value)))
            }
        }
    }
}

/// Mapping keys as text: YAML allows `1: x` or `on: y`; Kubernetes objects
/// rarely use them, but reading them must not fail the whole file. A key
/// that YAML reads as a boolean or a number is written the way kubectl
/// (sigs.k8s.io/yaml) turns it into JSON, `on` as `"true"` and `0x10` as
/// `"16"`, so a kept document ([`Document::source`]) is the object kubectl
/// would send for the same file.
struct KeyText(String);

/// What a key that is a mapping or a sequence reads as: no key written in
/// a file spells it (YAML text cannot hold a NUL unescaped, and a key that
/// does anyway only makes its document unappliable, never another one).
const COMPLEX_KEY: &str = "\u{0}<complex key>";

/// What a null key (`~: x`, `null: x`, `? : x`) reads as. Kubernetes' YAML
/// library cannot turn one into JSON and refuses the whole file
/// (`decoded_keys`); a quoted `"null"` is a string and reads as `null`.
const NULL_KEY: &str = "\u{0}<null key>";

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Node::deserialize(d).map(|n| KeyText(key_text(n)))
    }
}

/// A key's node as the key's text ([`KeyText`]); the fast reader
/// (`yaml_fast`) names its keys with it too, so both read a key alike.
pub(crate) fn key_text(node: Node) -> String {
    match node {
        Node::Str(s) => s,
        Node::Int(i) => i.to_string(),
        Node::Float(f) => f.to_string(),
        Node::Bool(b) => b.to_string(),
        Node::Null => NULL_KEY.to_owned(),
        Node::Seq(_) | Node::Map(_) => COMPLEX_KEY.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::Pin;

    fn parse(text: &str) -> ParsedFile {
        parse_file("f.yaml", text.as_bytes(), DEFAULT_MAX_FILE_BYTES)
    }

    /// Each object's kept source, read as JSON, is the value a YAML reader
    /// gives for its whole document: what the daemon applies is what the
    /// file says, sequences, numbers and anchors included (merge keys are
    /// refused: `kube_reading`).
    fn assert_sources_are_the_documents(text: &str) {
        let kept = parse_file_keeping("f.yaml", text.as_bytes(), DEFAULT_MAX_FILE_BYTES, true);
        assert!(kept.problems.is_empty(), "{:?}", kept.problems);
        let values: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).unwrap();
        let ours: Vec<&serde_json::Value> = values
            .iter()
            .filter(|v| v["apiVersion"].as_str().is_some_and(|a| a.contains("c5c3")))
            .collect();
        assert_eq!(kept.documents.len(), ours.len());
        for (d, v) in kept.documents.iter().zip(ours) {
            let source = d.source.as_ref().expect("kept").as_deref().unwrap();
            let back: serde_json::Value = serde_json::from_str(source).unwrap();
            assert_eq!(&back, v, "{source}");
        }
        assert!(parse(text).documents.iter().all(|d| d.source.is_none()));
    }

    /// What Kubernetes' YAML library reads as a merge key or as a key
    /// written twice, however it is spelled, is refused with its line
    /// (each of these was accepted as written before, while kubectl applied
    /// the later value).
    #[test]
    fn keys_are_judged_as_they_decode() {
        let merges = [
            "  !!merge \"\\x3c\\x3c\": {openStackRelease: \"2025.1\"}\n",
            "  !!merge <<: {openStackRelease: \"2025.1\"}\n",
            "  !!merge '<<': {openStackRelease: \"2025.1\"}\n",
            "  &x <<: {openStackRelease: \"2025.1\"}\n",
            "  \"\\u003c<\": {openStackRelease: \"2025.1\"}\n",
        ];
        for extra in merges {
            let p = parse(&format!("{GLANCE}{extra}"));
            assert_eq!(p.problems.len(), 1, "{extra}: {:?}", p.problems);
            assert!(
                p.problems[0].message.contains("merge key"),
                "{extra}: {:?}",
                p.problems
            );
            assert_eq!(p.problems[0].line, 11, "{extra}");
        }
        let twice = [
            "  !x openStackRelease: \"2025.1\"\n",
            "  !!binary b3BlblN0YWNrUmVsZWFzZQ==: \"2025.1\"\n",
            "  \"open\\x53tackRelease\": \"2025.1\"\n",
        ];
        for extra in twice {
            let p = parse(&format!("{GLANCE}{extra}"));
            assert_eq!(p.problems.len(), 1, "{extra}: {:?}", p.problems);
            assert!(
                p.problems[0]
                    .message
                    .contains("\"openStackRelease\" appears twice"),
                "{extra}: {:?}",
                p.problems
            );
            assert!(p.documents.is_empty());
        }
        // The same deep in the document, and in a sequence's mapping.
        let deep = format!("{GLANCE}  extra:\n    - a: 1\n      !t a: 2\n");
        let p = parse(&deep);
        assert!(
            p.problems[0].message.contains("\"a\" appears twice"),
            "{:?}",
            p.problems
        );
        assert_eq!(p.problems[0].line, 13);
        // A large mapping is checked too.
        let mut big = format!("{GLANCE}  many:\n");
        for i in 0..40 {
            big.push_str(&format!("    k{i}: {i}\n"));
        }
        big.push_str("    !t k7: 8\n");
        assert!(
            parse(&big).problems[0]
                .message
                .contains("\"k7\" appears twice")
        );
    }

    /// Jsonnet naming a C5C3 group is refused (Argo CD renders it and
    /// applies what it makes); other Jsonnet is not ours, and no object.
    #[test]
    fn jsonnet_naming_our_groups_is_refused() {
        let nova = "{\n  apiVersion: 'nova.openstack.c5c3.io/v1alpha1',\n  kind: 'Nova',\n}\n";
        let p = parse_file("apps/nova.jsonnet", nova.as_bytes(), 1 << 20);
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert_eq!(p.problems[0].line, 2);
        assert!(p.problems[0].message.starts_with("is Jsonnet"));
        let lib = "{ replicas: 3 }\n";
        let p = parse_file("lib/util.libsonnet", lib.as_bytes(), 1 << 20);
        assert!(p.problems.is_empty() && p.documents.is_empty());
        assert!(is_manifest_path("a/b.jsonnet") && is_manifest_path("a/b.libsonnet"));
    }

    /// A manifest committed through Git LFS is its pointer in Git: refused,
    /// not skipped as a string that is no object (a removal, accepted).
    #[test]
    fn a_git_lfs_pointer_in_a_manifest_path_is_refused() {
        let pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n";
        let p = parse(pointer);
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert!(p.problems[0].message.contains("Git LFS pointer"));
    }

    /// Argo CD skips a whole file holding its skip marker, a comment
    /// included: a file with one of our objects and the marker is refused
    /// at the marker's line; a file of other objects is not ours to judge.
    #[test]
    fn argo_cds_skip_file_marker_is_refused_where_it_hides_our_objects() {
        let marked = format!("# +argocd:skip-file-rendering\n{GLANCE}");
        let p = parse(&marked);
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert_eq!(p.problems[0].line, 1);
        assert!(p.problems[0].message.contains("Argo CD leaves a file"));
        let in_a_value = GLANCE.replace(
            "  namespace: image\n",
            "  namespace: image\n  annotations:\n    note: \"+argocd:skip-file-rendering\"\n",
        );
        assert_eq!(parse(&in_a_value).problems.len(), 1);
        let other = "# +argocd:skip-file-rendering\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: y}\n";
        assert!(
            parse(other).problems.is_empty(),
            "{:?}",
            parse(other).problems
        );
    }

    /// An object the applying tool would leave out (or create once) is not
    /// judged as if it were applied; one without a namespace has no
    /// identity Git decides.
    #[test]
    fn what_a_tool_would_not_apply_as_written_is_refused() {
        let with = |k: &str, v: &str| {
            GLANCE.replace(
                "  namespace: image\n",
                &format!("  namespace: image\n  annotations:\n    {k}: \"{v}\"\n"),
            )
        };
        for (k, v) in [
            ("config.kubernetes.io/local-config", "true"),
            ("config.kubernetes.io/local-config", "false"),
            ("kustomize.toolkit.fluxcd.io/reconcile", "Disabled"),
            ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
            ("kustomize.toolkit.fluxcd.io/ssa", "IfNotPresent"),
            ("kustomize.toolkit.fluxcd.io/ssa", "ignore"),
            ("argocd.argoproj.io/hook", "Skip"),
            ("argocd.argoproj.io/hook", "PreSync"),
            ("helm.sh/hook", "pre-upgrade"),
        ] {
            let p = parse(&with(k, v));
            assert_eq!(p.problems.len(), 1, "{k}: {v}: {:?}", p.problems);
            assert!(
                p.problems[0]
                    .message
                    .starts_with(&format!("annotation {k}: ")),
                "{:?}",
                p.problems
            );
            assert_eq!(p.problems[0].line, 7);
        }
        for (k, v) in [
            ("kustomize.toolkit.fluxcd.io/ssa", "Merge"),
            ("kustomize.toolkit.fluxcd.io/reconcile", "enabled"),
            ("argocd.argoproj.io/sync-wave", "1"),
        ] {
            let p = parse(&with(k, v));
            assert!(p.problems.is_empty(), "{k}: {v}: {:?}", p.problems);
        }
        // Flux reads its keys as labels too.
        let labelled = GLANCE.replace(
            "  namespace: image\n",
            "  namespace: image\n  labels:\n    kustomize.toolkit.fluxcd.io/reconcile: disabled\n",
        );
        let p = parse(&labelled);
        assert!(
            p.problems[0]
                .message
                .starts_with("label kustomize.toolkit.fluxcd.io/reconcile: "),
            "{:?}",
            p.problems
        );
        let p = parse(&GLANCE.replace("  namespace: image\n", ""));
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert!(p.problems[0].message.contains("has no metadata.namespace"));
        assert!(p.documents.is_empty());
    }

    /// Any top-level `items`, whatever it holds: kubectl takes the document
    /// for a list, and `items: null` applies nothing.
    #[test]
    fn a_top_level_items_of_any_value_is_refused() {
        for items in [
            "items: null\n",
            "items: []\n",
            "items: {}\n",
            "items: 1\n",
            "items:\n  - a\n",
        ] {
            let p = parse(&format!("{GLANCE}{items}"));
            assert_eq!(p.problems.len(), 1, "{items}: {:?}", p.problems);
            assert!(
                p.problems[0].message.contains("top-level `items`"),
                "{items}"
            );
            assert!(p.documents.is_empty());
        }
    }

    #[test]
    fn a_complex_key_does_not_fail_the_file() {
        let text = format!("{GLANCE}  odd:\n    ? [a, b]\n    : 1\n    ? {{k: v}}\n    : 2\n");
        let p = parse(&text);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        assert_eq!(p.documents.len(), 1);
        // ... but such a document cannot be applied, and says why.
        let kept = parse_file_keeping("f.yaml", text.as_bytes(), DEFAULT_MAX_FILE_BYTES, true);
        assert!(kept.problems.is_empty());
        let why = kept.documents[0].source.clone().unwrap().unwrap_err();
        assert!(
            why.contains("mapping key is itself a mapping or a sequence"),
            "{why}"
        );
        // Keys YAML reads as other scalars are kept as kubectl writes them.
        let text = format!("{GLANCE}  odd: {{on: 1, 0x10: 2, \"null\": 3, \"yes\": 4}}\n");
        let kept = parse_file_keeping("f.yaml", text.as_bytes(), DEFAULT_MAX_FILE_BYTES, true);
        let source: serde_json::Value =
            serde_json::from_str(kept.documents[0].source.clone().unwrap().unwrap().as_ref())
                .unwrap();
        assert_eq!(
            source["spec"]["odd"],
            serde_json::json!({"true": 1, "16": 2, "null": 3, "yes": 4})
        );
    }

    /// kubectl cannot turn a null key into JSON and refuses the whole file
    /// ("unsupported map key of type: <nil>", checked with kubectl 1.32):
    /// judged, its objects would never reach the cluster, and the next hop
    /// would land there as a skip. Refused in any document of the file; a
    /// quoted `"null"` is a string.
    #[test]
    fn a_null_key_is_refused() {
        for key in ["~: x", "null: x", "NULL: x", "?\n  : x", ": x"] {
            let text = format!("{GLANCE}  {key}\n");
            let p = parse(&text);
            assert!(p.documents.is_empty(), "{key:?}");
            assert!(
                p.problems.len() == 1 && p.problems[0].message.contains("a null key"),
                "{key:?}: {:?}",
                p.problems
            );
        }
        let foreign = format!("{GLANCE}---\napiVersion: v1\nkind: ConfigMap\ndata:\n  ~: x\n");
        assert!(parse(&foreign).documents.is_empty());
        assert!(
            parse(&format!("{GLANCE}  \"null\": x\n"))
                .problems
                .is_empty()
        );
    }

    #[test]
    fn a_kept_source_is_the_whole_document() {
        assert_sources_are_the_documents(GLANCE);
        assert_sources_are_the_documents(
            "apiVersion: nova.openstack.c5c3.io/v1alpha1
kind: Nova
metadata:
  name: nova
  namespace: compute
  labels: {tier: \"gold\"}
  annotations: {base: &b {replicas: 2, ratio: 1.5, enabled: true}}
spec:
  openStackRelease: \"2026.1\"
  image: {repository: ghcr.io/c5c3/nova, tag: \"2026.1\"}
  api: *b
  cells:
    - name: cell1
      hosts: [a, b, 3, -4, 1e3, null, ~, 'x: y']
    - {name: cell2, big: 18446744073709551615}
  empty: {}
  none: []
  text: |
    two
    lines
---
- not an object
",
        );
    }

    proptest::proptest! {
        /// Any tree of maps, sequences and scalars under `spec` is kept as
        /// the YAML reader's value of it.
        #[test]
        fn any_spec_is_kept_as_read(extra in json_tree()) {
            let text = format!("{}  extra: {}\n", GLANCE, serde_json::to_string(&extra).unwrap());
            assert_sources_are_the_documents(&text);
        }
    }

    fn json_tree() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            (-1.0e6f64..1.0e6).prop_map(serde_json::Value::from),
            "[a-z0-9 ._-]{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    const GLANCE: &str = "apiVersion: glance.openstack.c5c3.io/v1alpha1
kind: Glance
metadata:
  name: glance
  namespace: image
spec:
  openStackRelease: \"2026.1\"
  image:
    repository: ghcr.io/c5c3/glance
    tag: \"2026.1\"
";

    /// Flux's post-build substitution rewrites `${…}` before the apply: in
    /// an identity or a key of ours, the cluster would get another object
    /// than the one judged (`nova.openstack.c5c3.io${x}/v1alpha1` a
    /// foreign group here, a Nova there). Refused, with the line; in a
    /// value it is the operators' business.
    #[test]
    fn flux_substitution_in_an_identity_or_a_key_is_refused() {
        for (text, line, needle) in [
            (
                GLANCE.replace(
                    "glance.openstack.c5c3.io/",
                    "${group:=glance.openstack.c5c3.io}/",
                ),
                1,
                "`${` in apiVersion",
            ),
            (
                "apiVersion: v1\nkind: ${k:=ConfigMap}\n".to_owned(),
                1,
                "`${` in kind",
            ),
            (
                GLANCE.replace("name: glance", "name: ${name:=glance}"),
                4,
                "metadata.name",
            ),
            (
                GLANCE.replace("namespace: image", "namespace: img${suffix}"),
                5,
                "metadata.namespace",
            ),
            (
                format!("{GLANCE}  ${{key}}: x\n"),
                11,
                "the key \"spec.${key}\"",
            ),
        ] {
            let p = parse(&text);
            assert!(p.documents.is_empty(), "{text}");
            assert_eq!(p.problems.len(), 1, "{text}: {:?}", p.problems);
            assert_eq!(p.problems[0].line, line, "{text}: {:?}", p.problems);
            assert!(
                p.problems[0].message.contains(needle),
                "{text}: {:?}",
                p.problems
            );
        }
        // Values are left alone, and foreign objects' names and keys.
        let region = format!("{GLANCE}  region: ${{REGION}}\n");
        assert!(parse(&region).problems.is_empty());
        let foreign =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${n}\ndata:\n  ${k}: v\n";
        assert!(parse(foreign).problems.is_empty());
    }

    /// A `.gitattributes` is read for the two attributes that make a
    /// checkout differ from the commit, set anywhere (a macro too); others
    /// (LFS for images, line endings, an unset `-ident`) are fine.
    #[test]
    fn attributes_that_rewrite_a_checkout_are_refused() {
        for (text, line, name) in [
            (
                "*.yaml working-tree-encoding=SHIFT-JIS\n",
                1,
                "working-tree-encoding",
            ),
            ("# notes\n*.png filter=lfs\n*.yml text ident\n", 3, "ident"),
            (
                "[attr]enc working-tree-encoding=UTF-16\n*.yaml enc\n",
                1,
                "working-tree-encoding",
            ),
            ("\"a b.yaml\" ident\n", 1, "ident"),
            // Where git reads more than a first reading would (a review's
            // three bypasses): a CR splits words, a quote that does not
            // close is a plain pattern, a form feed or a no-break space
            // before `#` makes a pattern, not a comment.
            (
                "*.yaml\rworking-tree-encoding=SHIFT-JIS\n",
                1,
                "working-tree-encoding",
            ),
            ("x\n*.yaml\rident\n", 2, "ident"),
            ("\"*.yaml ident\n", 1, "ident"),
            ("\u{c}#*.yaml ident\n", 1, "ident"),
            ("\u{a0}#*.yaml ident\n", 1, "ident"),
            (
                "# working-tree-encoding=SHIFT-JIS\n",
                1,
                "working-tree-encoding",
            ),
        ] {
            let p = parse_file("clusters/.gitattributes", text.as_bytes(), 1 << 20);
            assert_eq!(p.problems.len(), 1, "{text:?}");
            assert_eq!(p.problems[0].line, line, "{text:?}");
            assert!(
                p.problems[0].message.contains(name),
                "{text:?}: {:?}",
                p.problems
            );
            assert!(p.documents.is_empty() && p.skipped.is_empty());
        }
        for text in [
            "*.png filter=lfs diff=lfs merge=lfs -text\n",
            "* text=auto eol=lf\n*.yaml -ident\n# identity: none here\n",
            "",
        ] {
            let p = parse_file(".gitattributes", text.as_bytes(), 1 << 20);
            assert!(
                p.problems.is_empty() && p.skipped.is_empty(),
                "{text:?}: {:?}",
                p.problems
            );
        }
        // Not UTF-8 (git reads attributes in any encoding): read all the same.
        let latin1 = b"r\xe9sum\xe9.yaml ident\n";
        let p = parse_file(".gitattributes", latin1, 1 << 20);
        assert!(
            p.problems.len() == 1 && p.problems[0].message.contains("`ident`"),
            "{:?}",
            p.problems
        );
        assert!(
            parse_file(".gitattributes", b"r\xe9sum\xe9.txt -text\n", 1 << 20)
                .problems
                .is_empty()
        );
        assert!(is_attributes(".gitattributes") && is_attributes("a/.gitattributes"));
        assert!(!is_attributes("a.gitattributes"));
    }

    #[test]
    fn reads_a_service_with_lines() {
        let p = parse(&format!("# comment\n---\n{GLANCE}"));
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let d = &p.documents[0];
        assert_eq!(d.key, Key::new(Kind::Glance, "image", "glance"));
        assert_eq!(d.line, 3);
        let Spec::Service(s) = &d.spec else { panic!() };
        assert_eq!(s.release.as_ref().unwrap().value, "2026.1");
        assert_eq!(s.release.as_ref().unwrap().line, 9);
        assert_eq!(s.image.value.pin, Pin::Tag("2026.1".into()));
    }

    #[test]
    fn multi_document_and_foreign_kinds() {
        let text = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: image\n---\n{GLANCE}---\n- a list\n---\njust: a map\n"
        );
        let p = parse(&text);
        assert_eq!(p.documents.len(), 1);
        assert_eq!(p.documents[0].line, 6);
        assert_eq!(p.skipped.len(), 2);
        assert!(p.skipped[0].message.contains("sequence"));
        assert_eq!(p.skipped[0].line, 17);
        assert_eq!(p.skipped[1].line, 19);
    }

    #[test]
    fn unquoted_release_is_refused_with_advice() {
        let p = parse(&GLANCE.replace("\"2026.1\"\n  image", "2026.1\n  image"));
        assert!(p.documents.is_empty());
        assert_eq!(p.problems[0].line, 7);
        assert!(p.problems[0].message.contains("quote it"));
        assert_eq!(
            p.problems[0].key,
            Some(Key::new(Kind::Glance, "image", "glance"))
        );
    }

    #[test]
    fn both_tag_and_digest() {
        let text = GLANCE.replace(
            "tag: \"2026.1\"",
            &format!("tag: \"2026.1\"\n    digest: sha256:{}", "0".repeat(64)),
        );
        let p = parse(&text);
        assert_eq!(p.problems.len(), 1);
        assert!(p.problems[0].message.contains("both"), "{:?}", p.problems);
        assert_eq!(p.problems[0].line, 9);
    }

    #[test]
    fn missing_fields_and_bad_shapes() {
        for (edit, expect) in [
            ("  name: glance\n", "no metadata.name"),
            (
                "  openStackRelease: \"2026.1\"\n",
                "openStackRelease is required",
            ),
            (
                "  image:\n    repository: ghcr.io/c5c3/glance\n    tag: \"2026.1\"\n",
                "spec.image is required",
            ),
        ] {
            let p = parse(&GLANCE.replace(edit, ""));
            assert!(
                p.problems.iter().any(|x| x.message.contains(expect)),
                "{edit:?}: {:?}",
                p.problems
            );
            assert!(p.documents.is_empty());
        }
        let p = parse(&GLANCE.replace("v1alpha1", "v1beta1"));
        assert!(
            p.problems[0]
                .message
                .contains("only glance.openstack.c5c3.io/v1alpha1")
        );
        // Wrong types, named with the right article.
        for (from, to, expect) in [
            (
                "openStackRelease: \"2026.1\"",
                "openStackRelease: [x]",
                "must be a string, not a sequence",
            ),
            (
                "openStackRelease: \"2026.1\"",
                "openStackRelease: 7",
                "must be a string, not an integer",
            ),
            (
                "openStackRelease: \"2026.1\"",
                "openStackRelease: ~",
                "must be a string, not null",
            ),
        ] {
            let p = parse(&GLANCE.replacen(from, to, 1));
            assert!(
                p.problems.iter().any(|x| x.message.contains(expect)),
                "{to:?}: {:?}",
                p.problems
            );
        }
    }

    #[test]
    fn syntax_error_names_the_line() {
        let p = parse("a: 1\nb: [1, 2\nc: 3\n");
        assert_eq!(p.problems.len(), 1);
        assert_eq!(p.problems[0].line, 3);
        assert!(p.problems[0].message.starts_with("YAML does not parse"));
    }

    #[test]
    fn bombs_big_files_and_binary_are_problems() {
        let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
        for (i, c) in "bcdefghij".chars().enumerate() {
            let prev = (b'a' + i as u8) as char;
            bomb.push_str(&format!(
                "{c}: &{c} [{}]\n",
                vec![format!("*{prev}"); 10].join(",")
            ));
        }
        let p = parse(&bomb);
        assert_eq!(p.problems.len(), 1, "{:?}", p);
        assert_eq!(
            p.problems[0].message,
            "file expands aliases (*name) to more than 250000 YAML nodes; a fixed limit against alias bombs: write the repeated parts out"
        );
        let p = parse_file("big.yaml", &[b'#'; 100], 10);
        assert!(p.problems[0].message.contains("limit"));
        let p = parse_file("bin.yaml", b"a: 1\nb: \xff\xfe\n", 1000);
        assert_eq!(p.problems[0].line, 2);
        assert!(p.problems[0].message.contains("UTF-8"));
    }

    /// Thousands of documents in a file under the byte limit parse (the
    /// parser's fixed default was 1,024 documents and 250,000 nodes); past
    /// the budget a smaller limit allows, the message names that limit.
    #[test]
    fn the_yaml_budget_follows_the_byte_limit() {
        let text: String = (0..3000)
            .map(|i| {
                format!(
                    "---\n{}",
                    GLANCE.replace("name: glance\n", &format!("name: glance-{i}\n"))
                )
            })
            .collect();
        let p = parse(&text);
        assert!(p.problems.is_empty(), "{:?}", p.problems.first());
        assert_eq!(p.documents.len(), 3000);
        let p = parse_file("many.yaml", "---\n{}\n".repeat(2000).as_bytes(), 16 * 1024);
        assert_eq!(p.problems.len(), 1);
        assert_eq!(
            p.problems[0].message,
            "file holds more than 1024 YAML documents, the most the manifest file limit of 16 KiB allows (one per 16 bytes); split the file, or raise --max-file-bytes"
        );
        assert_eq!(p.problems[0].line, 2 * 1024 + 1);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = parse_file("f.yaml", &bytes, 1000);
        }

        #[test]
        fn mutated_manifests_never_panic(cut in 0usize..200, junk in "[ :\\-\\[\\]{}'\"#&*!|>\\n\\ta-z0-9]{0,12}") {
            let mut text = GLANCE.to_owned();
            let at = text.char_indices().map(|(i, _)| i).nth(cut % GLANCE.len()).unwrap_or(0);
            text.insert_str(at, &junk);
            let p = parse_file("f.yaml", text.as_bytes(), 1 << 20);
            // Whatever is read is whole: a named object with a valid image.
            for d in &p.documents {
                proptest::prop_assert!(!d.key.name.is_empty());
                proptest::prop_assert!(matches!(&d.spec, Spec::Service(s) if !s.image.value.repository.is_empty()));
            }
            proptest::prop_assert!(p.problems.iter().all(|x| x.line >= 1 && !x.message.is_empty()));
        }
    }

    #[test]
    fn plane_services_and_overrides() {
        let text = "apiVersion: c5c3.io/v1alpha1
kind: ControlPlane
metadata: {name: prod, namespace: openstack}
spec:
  openStackRelease: \"2026.1\"
  services:
    keystone: {}
    horizon:
    glance:
      namespace: {name: images}
    placement:
      image: {repository: registry.example.internal/placement, tag: \"2026.1\"}
    octavia: {}
";
        let p = parse(text);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let Spec::Plane(pl) = &p.documents[0].spec else {
            panic!()
        };
        let kinds: Vec<_> = pl.services.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, vec![Kind::Keystone, Kind::Glance, Kind::Placement]);
        assert_eq!(pl.services[1].namespace.as_deref(), Some("images"));
        assert_eq!(pl.services[2].image.as_ref().unwrap().line, 12);
        assert_eq!(p.documents[0].line, 1);
        // A namespace block that names no namespace the CRD allows is
        // refused, never read as the plane's own namespace (another
        // identity for the child).
        let p = parse(&text.replace("{name: images}", "~"));
        assert!(p.problems.is_empty(), "null is absent: {:?}", p.problems);
        for bad in [
            "{name: \"\"}",
            "{name: Images}",
            "images",
            "{}",
            "{name: 7}",
        ] {
            let p = parse(&text.replace("{name: images}", bad));
            assert_eq!(p.problems.len(), 1, "{bad}: {:?}", p.problems);
            assert_eq!(p.problems[0].line, 10, "{bad}");
            assert!(
                p.problems[0]
                    .message
                    .starts_with("spec.services.glance.namespace must be a mapping"),
                "{bad}: {:?}",
                p.problems
            );
        }
    }
}
