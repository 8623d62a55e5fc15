//! The names index: for each directory (Git tree) of a fleet, which
//! three-character windows of object-name characters its manifest files
//! contain. A check of a commit that adds an object must find every file of
//! the tree that could define the new name (`history.rs`, `lookup`); without
//! this index it inflates and searches every blob of the tree. A directory
//! whose files lack one of the name's windows cannot contain the name, so
//! it is skipped unread.
//!
//! Why it is exact: the search it saves is a substring search for the name
//! (plus a check for escapes that could spell a name in disguise). If a
//! blob contains a name made only of the index's alphabet (`a-z0-9.-`, the
//! characters of Kubernetes names), it contains every three-byte window of
//! that name, and the directory's window set is the union of its blobs'.
//! So "a window is missing" proves "no blob here mentions the name"; any
//! other answer means "read the files", as without the index. A directory
//! with a file that could spell names in disguise is never skipped, and a
//! name shorter than three characters or with other characters never skips
//! anything. A tree id names its content forever, so an entry never goes
//! stale.
//!
//! `lockstep check` keeps it in a file when a person runs it at a terminal,
//! and not in a CI job, a script or a check that posts statuses, unless
//! told otherwise ([`wanted`]): a forged file can hide a duplicate from such
//! a check (`docs/names-index.md`, "Threat model"). The daemon keeps one in its own memory only
//! ([`NameIndex::in_memory`]), built from blobs it read itself.
//!
//! Where it lives: `$GIT_DIR/lockstep/names-v1` (the common directory of
//! worktrees), derived data like Git's own commit-graph: safe to delete,
//! rebuilt by the next check that uses it. Written to a temporary file and renamed into
//! place; versioned and checksummed. A file that is missing, truncated,
//! corrupt, of another version or unreadable is ignored (and replaced when
//! the run has something worth saving); a repository lockstep cannot write
//! to is checked without saving. The checksum catches accidents, not an
//! attacker: whoever can write the repository's Git directory can rewrite
//! its history outright (`docs/names-index.md`).

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use git2::Oid;

/// Bumped whenever what an entry means changes (the alphabet, which files
/// count, what counts as a disguise): a file of another version is
/// ignored. 3: a `%` in a tag (`!!bin%61ry`), and a `%TAG` directive, are
/// disguises.
const VERSION: u32 = 3;
const MAGIC: &[u8; 8] = b"LSNAMES\0";
/// The file's name under `$GIT_DIR/lockstep/`.
pub const FILE: &str = "names-v1";

/// Whether `lockstep check` keeps and uses the index file. A flag
/// (`asked`: `--names-index`, `--no-names-index`) always wins. Without one
/// it is on only for a person at a terminal (stderr is one), where a
/// repeated check of a commit adding an object costs what a hop does; and
/// off wherever a wrong "no" could be taken as a verdict by others: a
/// check that posts statuses (`reports`), a CI job (any marker of one,
/// even at a terminal), and anything run without a terminal (a script, a
/// hook run by a tool, a runner no marker names), whose workspace may be
/// shared with other branches' or forks' jobs, one of which could forge
/// the file (`docs/names-index.md`, "Threat model"). When in doubt, off.
pub fn wanted(asked: Option<bool>, reports: bool) -> bool {
    use std::io::IsTerminal as _;
    decide(
        asked,
        reports,
        std::io::stderr().is_terminal(),
        is_ci::uncached() || ci_marked(|v| std::env::var_os(v)),
    )
}

/// [`wanted`] over what it reads from the process.
fn decide(asked: Option<bool>, reports: bool, terminal: bool, ci: bool) -> bool {
    asked.unwrap_or(!reports && terminal && !ci)
}

/// Markers of a CI job or a pod beyond those `is_ci` knows: any `CI` but
/// an empty one, `0` or `false` (`is_ci` takes only `true` and `1`);
/// TeamCity, Azure Pipelines, Bamboo (which exports `bamboo_buildKey`),
/// Jenkins without a root URL; and any process in a Kubernetes pod
/// (Tekton, Argo Workflows, a runner's pod), which is not a person's shell.
fn ci_marked(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    var("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
        || [
            "TEAMCITY_VERSION",
            "TF_BUILD",
            "bamboo_buildKey",
            "JENKINS_HOME",
            "KUBERNETES_SERVICE_HOST",
        ]
        .iter()
        .any(|m| var(m).is_some())
}

/// Whether `path` (the index file or its directory) is this user's alone:
/// owned by the effective user and writable by no group or other. A file
/// others can write (`core.sharedRepository`, a group-writable clone) is
/// one they could forge, and is neither read nor written.
fn private(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    meta.uid() == me && meta.mode() & 0o022 == 0
}

/// The index's directory, [`private`] (not followed if a link: a link
/// could only be planted by whoever may write there).
fn private_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && private(&m))
}

/// The index file and its directory, both [`private`].
fn private_file(file: &Path) -> bool {
    private_dir(file.parent().unwrap_or(Path::new(".")))
        && std::fs::symlink_metadata(file).is_ok_and(|m| m.is_file() && private(&m))
}

/// Directories with fewer manifest files than this are not kept: reading
/// their few blobs costs about what reading their entry would.
pub const MIN_FILES: usize = 4;
/// A run saves only when it read at least this many blobs to build entries
/// (a cold fill, or a part of the fleet rewritten since), so a check of a
/// small change does not rewrite the file every time.
const SAVE_AFTER_BLOBS: usize = 64;
/// Above this many entries the file keeps only those this run used or
/// built (old directories of a long history fall away).
const MAX_ENTRIES: usize = 200_000;

/// Characters of object names; each maps to 0..ALPHABET.
const ALPHABET: usize = 38;
/// Number of distinct windows (38^3 = 54,872, fits a u16).
const WINDOWS: usize = ALPHABET * ALPHABET * ALPHABET;
/// The code of every byte that is not a name character.
const OTHER: u8 = ALPHABET as u8;

const fn code_table() -> [u8; 256] {
    let mut t = [OTHER; 256];
    let mut i = 0;
    while i < 26 {
        t[b'a' as usize + i] = i as u8;
        i += 1;
    }
    let mut d = 0;
    while d < 10 {
        t[b'0' as usize + d] = 26 + d as u8;
        d += 1;
    }
    t[b'-' as usize] = 36;
    t[b'.' as usize] = 37;
    t
}
static CODE: [u8; 256] = code_table();

/// The id of a window of three name-character codes.
fn window_id(a: u8, b: u8, c: u8) -> usize {
    (a as usize * ALPHABET + b as usize) * ALPHABET + c as usize
}

/// The windows of a text, as a bit set being built (one per directory).
#[derive(Clone)]
pub struct Windows(Vec<u64>);

impl Default for Windows {
    fn default() -> Self {
        Self(vec![0; WINDOWS.div_ceil(64)])
    }
}

impl Windows {
    /// Adds every window of three name characters in `bytes`. About a
    /// nanosecond a byte (a branch-free variant that also set bits for
    /// windows with other bytes was slower: runs of spaces hit one word
    /// again and again), which is why a check builds entries on a thread of
    /// their own (`Builder`).
    pub fn add_text(&mut self, bytes: &[u8]) {
        let (mut a, mut b, mut run) = (0u8, 0u8, 0u32);
        for &byte in bytes {
            let c = CODE[byte as usize];
            if c == OTHER {
                run = 0;
                continue;
            }
            run += 1;
            if run >= 3 {
                let id = window_id(a, b, c);
                if let Some(w) = self.0.get_mut(id / 64) {
                    *w |= 1 << (id % 64);
                }
            }
            a = b;
            b = c;
        }
    }

    pub fn add(&mut self, other: &Windows) {
        for (x, y) in self.0.iter_mut().zip(&other.0) {
            *x |= y;
        }
    }

    fn add_ids(&mut self, ids: &[u16]) {
        for &id in ids {
            let id = id as usize;
            if let Some(w) = self.0.get_mut(id / 64) {
                *w |= 1 << (id % 64);
            }
        }
    }

    fn clear(&mut self) {
        self.0.fill(0);
    }

    fn ids(&self) -> Vec<u16> {
        let mut out = Vec::new();
        for (i, &w) in self.0.iter().enumerate() {
            let mut w = w;
            while w != 0 {
                let bit = w.trailing_zeros() as usize;
                out.push((i * 64 + bit) as u16);
                w &= w - 1;
            }
        }
        out
    }
}

/// What one directory's manifest files hold, as far as names go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Some file could spell a name in disguise (an escape, `!!binary`):
    /// the directory is never skipped.
    pub disguised: bool,
    /// How many manifest files the directory holds, at any depth.
    pub files: u32,
    /// The windows of its files, sorted.
    pub windows: Arc<[u16]>,
}

impl Entry {
    pub fn new(windows: &Windows, disguised: bool, files: usize) -> Self {
        Self {
            disguised,
            files: u32::try_from(files).unwrap_or(u32::MAX),
            windows: windows.ids().into(),
        }
    }

    /// Adds this entry's windows to a set being built (a parent directory).
    pub fn add_to(&self, w: &mut Windows) {
        w.add_ids(&self.windows);
    }

    /// Whether no file of the directory can contain any of `needles`:
    /// true only when each needle lacks one of its windows here.
    pub fn excludes<'n>(&self, mut needles: impl Iterator<Item = &'n [u8]>) -> bool {
        !self.disguised && needles.all(|n| self.lacks(n))
    }

    fn lacks(&self, needle: &[u8]) -> bool {
        if needle.len() < 3 || needle.iter().any(|&b| CODE[b as usize] == OTHER) {
            return false;
        }
        needle.windows(3).any(|w| {
            let id = window_id(
                CODE[w[0] as usize],
                CODE[w[1] as usize],
                CODE[w[2] as usize],
            );
            self.windows.binary_search(&(id as u16)).is_err()
        })
    }
}

/// The index of one repository, loaded on first use and saved by
/// [`NameIndex::save`]; shared by every walk of one run.
///
/// Entries are built on a thread of their own: the walk (`history.rs`,
/// `Walker::scan`) reads each blob anyway for its substring search and hands
/// a copy to the builder with [`NameIndex::add_file`], between
/// [`NameIndex::open_dir`] and [`NameIndex::close_dir`]. Recording the
/// windows costs about as much as the search itself; on a second core it
/// overlaps with it, so the first check with the index is not slower than
/// one without (README, fleet figures).
pub struct NameIndex {
    shared: Arc<Shared>,
    producer: Mutex<Producer>,
}

struct Shared {
    /// `None`: kept in memory only (the daemon's), never read or written.
    file: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    loaded: bool,
    entries: HashMap<Oid, Entry>,
    /// Entries used or built by this run.
    touched: HashSet<Oid>,
    /// Entries built by this run.
    built: usize,
    /// Blobs read to build them.
    blobs_read: usize,
    /// Bytes of windows held, for an index kept in memory.
    bytes: usize,
    /// For an index kept in memory: the entries used or built since the
    /// last walk began ([`NameIndex::sync`]), those of the tree in hand.
    current: HashSet<Oid>,
    /// For an index kept in memory: the bytes past which it is trimmed
    /// ([`MEMORY_BYTES`], or twice what the tree in hand alone needs).
    limit: usize,
}

/// The most an index kept in memory holds in windows: each commit that
/// changes a directory gives it and its parents new ids, so their entries
/// pile up. Past this, only the entries of the tree in hand stay (all of
/// them, even past the bound); the others are read again if ever needed.
const MEMORY_BYTES: usize = 8 << 20;

fn entry_bytes(e: &Entry) -> usize {
    2 * e.windows.len() + 64
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !s.loaded {
            s.loaded = true;
            let Some(file) = &self.file else {
                return s;
            };
            if !private_file(file) {
                tracing::debug!(file = %file.display(), "names index or its directory not this user's alone (another owner, or writable by a group or others): ignored");
                return s;
            }
            s.entries = match std::fs::read(file) {
                Ok(bytes) => match decode(&bytes) {
                    Some(e) => e,
                    None => {
                        tracing::debug!(file = %file.display(), "names index unreadable (corrupt, truncated or another version): ignored, rebuilt");
                        HashMap::new()
                    }
                },
                Err(_) => HashMap::new(),
            };
        }
        s
    }

    fn put(&self, tree: Oid, entry: Entry) {
        let mut s = self.state();
        s.built += 1;
        if self.file.is_none() {
            s.current.insert(tree);
            s.bytes += entry_bytes(&entry);
            if let Some(old) = s.entries.insert(tree, entry) {
                s.bytes -= entry_bytes(&old);
            }
            if s.bytes > s.limit {
                s.trim();
            }
            return;
        }
        s.touched.insert(tree);
        s.entries.insert(tree, entry);
    }
}

impl State {
    /// Keeps the entries of the tree in hand, whatever their size: a
    /// fleet whose one tree needs more than the bound keeps that tree's
    /// (and is trimmed again only once it holds twice as much).
    fn trim(&mut self) {
        let current = &self.current;
        let before = self.entries.len();
        self.entries.retain(|k, _| current.contains(k));
        self.bytes = self.entries.values().map(entry_bytes).sum();
        self.limit = self.limit.max(2 * self.bytes);
        tracing::debug!(
            kept = self.entries.len(),
            dropped = before - self.entries.len(),
            bytes = self.bytes,
            limit = self.limit,
            "names index in memory trimmed to the tree in hand"
        );
    }
}

/// One step of building, in the walk's order.
enum Op {
    /// A directory without an entry: its set starts empty.
    Open,
    /// A file of the open directory: `text[start..end]` of the batch.
    File(usize, usize),
    /// A subdirectory with an entry: its windows join the open set.
    Ids(Arc<[u16]>),
    /// The open directory is done: kept as an entry when `keep` says so
    /// (its id, whether a file could spell names in disguise, how many
    /// files), and joined to the directory below it when `merge`.
    Close {
        keep: Option<(Oid, bool, usize)>,
        merge: bool,
    },
    /// Everything before it is recorded: tell the walk.
    Synced(std::sync::mpsc::Sender<()>),
}

/// Steps batched with the bytes they refer to: one message per ~256 KiB
/// of text rather than one per file or directory.
#[derive(Default)]
struct Batch {
    ops: Vec<Op>,
    text: Vec<u8>,
}

const BATCH_BYTES: usize = 256 << 10;

impl Batch {
    /// A batch a very large manifest grew gives its memory back before it
    /// is filled again: the daemon's batches live as long as it does.
    fn shrunk(mut self) -> Self {
        if self.text.capacity() > 2 * BATCH_BYTES {
            self.text = Vec::with_capacity(BATCH_BYTES + (BATCH_BYTES >> 2));
        }
        self
    }
}
/// Batches in flight: bounds the copies held (a few MiB) when the builder
/// falls behind; the walk then waits for it.
const BATCHES_IN_FLIGHT: usize = 4;

#[derive(Default)]
struct Producer {
    batch: Batch,
    to: Option<std::sync::mpsc::SyncSender<Batch>>,
    /// Batches the builder is done with, to fill again: fresh memory for
    /// every batch cost more in page faults than building took.
    back: Option<std::sync::mpsc::Receiver<Batch>>,
    builder: Option<std::thread::JoinHandle<()>>,
    /// The builder could not be started or has stopped: nothing more is
    /// built this run (the check itself is unaffected).
    gone: bool,
    /// Until a batch fills, no thread is started: what a sync or the end
    /// finds (a warm run's few directories) is built here, on the walk's
    /// thread, between two walks (no directory is open then).
    inline: Build,
}

impl Producer {
    fn push(&mut self, shared: &Arc<Shared>, op: Op) {
        if self.gone {
            return;
        }
        self.batch.ops.push(op);
        if self.batch.text.len() >= BATCH_BYTES {
            self.send(shared);
        }
    }

    fn send(&mut self, shared: &Arc<Shared>) {
        if self.batch.ops.is_empty() || self.gone {
            return;
        }
        if self.to.is_none() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(BATCHES_IN_FLIGHT);
            let (back_tx, back_rx) = std::sync::mpsc::channel::<Batch>();
            let shared = shared.clone();
            match std::thread::Builder::new()
                .name("names-index".into())
                .spawn(move || build(&shared, &rx, &back_tx))
            {
                Ok(h) => {
                    self.to = Some(tx);
                    self.back = Some(back_rx);
                    self.builder = Some(h);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "names index builder not started: nothing built");
                    self.gone = true;
                    return;
                }
            }
        }
        let next = match self.back.as_ref().and_then(|b| b.try_recv().ok()) {
            Some(b) => b.shrunk(),
            None => Batch {
                ops: Vec::with_capacity(1024),
                text: Vec::with_capacity(BATCH_BYTES + (BATCH_BYTES >> 2)),
            },
        };
        let batch = std::mem::replace(&mut self.batch, next);
        if let Some(to) = &self.to
            && to.send(batch).is_err()
        {
            self.gone = true;
        }
    }

    fn build_here(&mut self, shared: &Arc<Shared>) {
        if !self.gone {
            let mut batch = std::mem::take(&mut self.batch);
            self.inline.apply(shared, &mut batch);
            self.batch = batch.shrunk();
        }
    }

    /// Sends what is left and waits until the builder is done.
    fn finish(&mut self, shared: &Arc<Shared>) {
        if self.to.is_none() {
            self.build_here(shared);
            return;
        }
        self.send(shared);
        self.to = None;
        if let Some(h) = self.builder.take()
            && h.join().is_err()
        {
            tracing::debug!("names index builder stopped: what it built is kept");
        }
    }
}

/// The sets of the open directories, innermost last.
#[derive(Default)]
struct Build {
    open: Vec<Windows>,
    spare: Vec<Windows>,
}

impl Build {
    fn apply(&mut self, shared: &Shared, batch: &mut Batch) {
        for op in batch.ops.drain(..) {
            match op {
                Op::Open => self.open.push(self.spare.pop().unwrap_or_default()),
                Op::File(start, end) => {
                    if let (Some(w), Some(text)) =
                        (self.open.last_mut(), batch.text.get(start..end))
                    {
                        w.add_text(text);
                    }
                }
                Op::Ids(ids) => {
                    if let Some(w) = self.open.last_mut() {
                        w.add_ids(&ids);
                    }
                }
                Op::Close { keep, merge } => {
                    let Some(mut w) = self.open.pop() else {
                        continue;
                    };
                    if let Some((tree, disguised, files)) = keep {
                        shared.put(tree, Entry::new(&w, disguised, files));
                    }
                    if merge && let Some(below) = self.open.last_mut() {
                        below.add(&w);
                    }
                    w.clear();
                    self.spare.push(w);
                }
                Op::Synced(tell) => {
                    let _ = tell.send(());
                }
            }
        }
        batch.text.clear();
    }
}

/// The builder thread.
fn build(
    shared: &Shared,
    from: &std::sync::mpsc::Receiver<Batch>,
    back: &std::sync::mpsc::Sender<Batch>,
) {
    let mut b = Build::default();
    while let Ok(mut batch) = from.recv() {
        b.apply(shared, &mut batch);
        // The walk may be done and gone: then the batch is dropped here.
        let _ = back.send(batch);
    }
}

impl NameIndex {
    /// The index of the repository whose (common) Git directory is
    /// `git_dir`; nothing is read until it is used.
    pub fn new(git_dir: &Path) -> Self {
        Self::with_file(Some(git_dir.join("lockstep").join(FILE)))
    }

    /// An index kept in this process's memory only, never read from or
    /// written to a file: the daemon's (`lockstep run`). It holds what this
    /// process read itself, so no one else can forge it (the threat model
    /// of the file, `docs/names-index.md`, does not apply), and it is
    /// bounded ([`MEMORY_BYTES`]).
    pub fn in_memory() -> Self {
        Self::in_memory_within(MEMORY_BYTES)
    }

    /// [`NameIndex::in_memory`] trimmed past `bytes` (tests pass 1 to
    /// trim as often as the tree in hand allows).
    pub fn in_memory_within(bytes: usize) -> Self {
        let index = Self::with_file(None);
        index.shared.state().limit = bytes;
        index
    }

    fn with_file(file: Option<PathBuf>) -> Self {
        Self {
            shared: Arc::new(Shared {
                file,
                state: Mutex::new(State::default()),
            }),
            producer: Mutex::new(Producer::default()),
        }
    }

    /// The file the index is kept in (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        self.shared.file.as_deref()
    }

    fn producer(&self) -> std::sync::MutexGuard<'_, Producer> {
        self.producer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry of directory `tree`, if known. (An entry still being
    /// built on the builder thread is not known yet: the directory is read
    /// again, as without the index.)
    pub fn get(&self, tree: Oid) -> Option<Entry> {
        let mut s = self.shared.state();
        let e = s.entries.get(&tree).cloned();
        if e.is_some() {
            // Kept in memory, only the tree in hand counts (`touched` is
            // for what a save keeps, and would grow for ever).
            if self.shared.file.is_none() {
                s.current.insert(tree);
            } else {
                s.touched.insert(tree);
            }
        }
        e
    }

    /// Starts building the set of a directory the index lacks (nested in
    /// the one open before, if any).
    pub fn open_dir(&self) {
        self.producer().push(&self.shared, Op::Open);
    }

    /// A manifest file of the open directory (copied for the builder).
    pub fn add_file(&self, bytes: &[u8]) {
        {
            let mut s = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            s.blobs_read += 1;
        }
        let mut p = self.producer();
        if p.gone {
            return;
        }
        let start = p.batch.text.len();
        p.batch.text.extend_from_slice(bytes);
        let end = p.batch.text.len();
        p.push(&self.shared, Op::File(start, end));
    }

    /// A subdirectory of the open directory whose entry is known.
    pub fn add_entry(&self, entry: &Entry) {
        self.producer()
            .push(&self.shared, Op::Ids(entry.windows.clone()));
    }

    /// Ends the open directory: `keep` records its entry (its id, whether
    /// any file could spell names in disguise, how many files it holds);
    /// `merge` adds its windows to the directory opened before it.
    pub fn close_dir(&self, keep: Option<(Oid, bool, usize)>, merge: bool) {
        self.producer()
            .push(&self.shared, Op::Close { keep, merge });
    }

    /// How many blobs this run read to build entries (for tests and the
    /// debug log).
    pub fn blobs_read(&self) -> usize {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .blobs_read
    }

    /// Waits until every entry handed to the builder so far is recorded:
    /// called before a walk, so that a second walk of the same run (a
    /// look back through history after a lookup, another commit of the
    /// range) finds the entries the first built instead of reading those
    /// directories again. The builder has mostly kept up by then.
    pub fn sync(&self) {
        self.wait_for_builder();
        // Kept in memory: what the walk about to begin uses is the tree in
        // hand (entries the builder recorded just now were the last walk's).
        if self.shared.file.is_none() {
            self.shared.state().current.clear();
        }
    }

    fn wait_for_builder(&self) {
        let mut p = self.producer();
        if p.gone {
            return;
        }
        if p.to.is_none() {
            p.build_here(&self.shared);
            return;
        }
        let (tell, told) = std::sync::mpsc::channel();
        p.batch.ops.push(Op::Synced(tell));
        p.send(&self.shared);
        if p.gone {
            // Not sent (no builder): nothing to wait for.
            p.batch = Batch::default();
            return;
        }
        drop(p);
        // An error: the builder is gone, nothing more will be recorded.
        let _ = told.recv();
    }

    /// Waits until every entry handed to the builder is recorded, and
    /// stops it.
    pub fn finish(&self) {
        self.producer().finish(&self.shared);
    }

    /// Writes the index when this run built enough of it to be worth
    /// keeping (a temporary file renamed into place), after the builder
    /// finished. `Ok(false)`: nothing to save. An error is for the caller
    /// to log; the check stands.
    pub fn save(&self) -> std::io::Result<bool> {
        self.finish();
        let Some(file) = &self.shared.file else {
            return Ok(false);
        };
        // Not `state()`: a check that built nothing (a hop) never loads the
        // file, and there is nothing to save.
        let s = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.built == 0 || s.blobs_read < SAVE_AFTER_BLOBS {
            return Ok(false);
        }
        let keep: Vec<(&Oid, &Entry)> = if s.entries.len() > MAX_ENTRIES {
            s.entries
                .iter()
                .filter(|(k, _)| s.touched.contains(k))
                .collect()
        } else {
            s.entries.iter().collect()
        };
        let bytes = encode(keep);
        let dir = file.parent().unwrap_or(Path::new("."));
        {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        // A directory of this user's that others may write (an older
        // lockstep made it under the umask, 0775 with per-user groups) is
        // made this user's alone, and what it holds is written anew; one
        // of another owner is left as it is, and nothing kept in it.
        if let Ok(m) = std::fs::symlink_metadata(dir)
            && m.is_dir()
            && !private(&m)
        {
            use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
            // SAFETY: geteuid has no preconditions and cannot fail.
            if m.uid() == unsafe { libc::geteuid() } {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            }
        }
        if !private_dir(dir) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the index's directory is not this user's alone",
            ));
        }
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(&bytes)?;
        tmp.persist(file).map_err(|e| e.error)?;
        Ok(true)
    }
}

impl Drop for NameIndex {
    /// The builder holds no lock a caller waits on; it is told to stop
    /// and joined, so no thread outlives the index.
    fn drop(&mut self) {
        let p = self.producer.get_mut().unwrap_or_else(|e| e.into_inner());
        p.batch = Batch::default();
        p.to = None;
        p.back = None;
        if let Some(h) = p.builder.take() {
            let _ = h.join();
        }
    }
}

/// A 64-bit checksum of the file's bytes: catches truncation and flipped
/// bits (not an attacker, see the module comment).
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h: u64 = 0x5EED_u64 ^ bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(K).rotate_left(29);
    }
    h ^ (h >> 32)
}

/// Layout (little endian): magic, version u32, id length u8, entry count
/// u32; per entry: id, flags u8 (bit 0: disguised), files u32, window
/// count u32, windows u16 each (strictly increasing); then the checksum
/// u64 of everything before it.
pub fn encode<'a>(entries: impl IntoIterator<Item = (&'a Oid, &'a Entry)>) -> Vec<u8> {
    let entries: Vec<(&Oid, &Entry)> = entries.into_iter().collect();
    let id_len = entries.first().map_or(20, |(k, _)| k.as_bytes().len());
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(id_len as u8);
    let entries: Vec<_> = entries
        .into_iter()
        .filter(|(k, _)| k.as_bytes().len() == id_len)
        .collect();
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (k, e) in entries {
        out.extend_from_slice(k.as_bytes());
        out.push(u8::from(e.disguised));
        out.extend_from_slice(&e.files.to_le_bytes());
        out.extend_from_slice(&(e.windows.len() as u32).to_le_bytes());
        for w in e.windows.iter() {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The entries of an index file; `None` for anything but a whole,
/// well-formed file of this version.
pub fn decode(bytes: &[u8]) -> Option<HashMap<Oid, Entry>> {
    let body_len = bytes.len().checked_sub(8)?;
    let (body, sum) = bytes.split_at(body_len);
    if checksum(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut r = Reader(body);
    if r.take(8)? != MAGIC || r.u32()? != VERSION {
        return None;
    }
    let id_len = *r.take(1)?.first()? as usize;
    let count = r.u32()? as usize;
    let mut out = HashMap::with_capacity(count.min(MAX_ENTRIES));
    for _ in 0..count {
        let id = Oid::from_bytes(r.take(id_len)?).ok()?;
        let flags = *r.take(1)?.first()?;
        if flags > 1 {
            return None;
        }
        let files = r.u32()?;
        let n = r.u32()? as usize;
        let raw = r.take(n.checked_mul(2)?)?;
        let windows: Vec<u16> = raw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        if windows.windows(2).any(|p| p[0] >= p[1])
            || windows.last().is_some_and(|&w| w as usize >= WINDOWS)
        {
            return None;
        }
        out.insert(
            id,
            Entry {
                disguised: flags == 1,
                files,
                windows: windows.into(),
            },
        );
    }
    if !r.0.is_empty() {
        return None;
    }
    Some(out)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_used_unasked_only_by_a_person_at_a_terminal() {
        // A flag wins everywhere.
        for (reports, terminal, ci) in [(false, true, false), (true, false, true)] {
            assert!(decide(Some(true), reports, terminal, ci));
            assert!(!decide(Some(false), reports, terminal, ci));
        }
        assert!(decide(None, false, true, false), "a person at a terminal");
        assert!(!decide(None, false, false, false), "no terminal: a script");
        assert!(!decide(None, false, true, true), "a CI job at a terminal");
        assert!(!decide(None, true, true, false), "posting statuses");
    }

    /// An environment of `pairs` only.
    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + use<> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |var| pairs.iter().find(|(k, _)| k == var).map(|(_, v)| v.into())
    }

    #[test]
    fn ci_markers_fail_closed() {
        for ci in ["true", "1", "yes", "False0", "woodpecker"] {
            assert!(ci_marked(env(&[("CI", ci)])), "CI={ci}");
        }
        for ci in ["", "0", "false"] {
            assert!(!ci_marked(env(&[("CI", ci)])), "CI={ci:?}");
        }
        assert!(!ci_marked(env(&[])), "no marker");
        for m in [
            "TEAMCITY_VERSION",
            "TF_BUILD",
            "bamboo_buildKey",
            "JENKINS_HOME",
            "KUBERNETES_SERVICE_HOST",
        ] {
            assert!(ci_marked(env(&[(m, "x")])), "{m}");
        }
    }

    fn entry(text: &str) -> Entry {
        let mut w = Windows::default();
        w.add_text(text.as_bytes());
        Entry::new(&w, false, 1)
    }

    /// An index in memory stays under its bound however many directories
    /// it is given, and keeps what was used since its last trim.
    #[test]
    fn an_index_in_memory_is_bounded_and_keeps_what_is_in_use() {
        let index = NameIndex::in_memory();
        // About 80 KB of windows each: every name character thrice over.
        let mut w = Windows::default();
        let alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-.";
        for a in alphabet.chars() {
            for b in alphabet.chars() {
                let text: String = alphabet.chars().flat_map(|c| [a, b, c, ' ']).collect();
                w.add_text(text.as_bytes());
            }
        }
        let big = Entry::new(&w, false, 4);
        assert!(entry_bytes(&big) > 60_000);
        let id = |n: u32| Oid::from_str(&format!("{n:040x}")).unwrap();
        let (mut trims, mut before) = (0, 0);
        index.shared.put(id(0), big.clone());
        for n in 0..1000 {
            // A walk begins; it uses the entry of its tree's root.
            index.sync();
            assert!(
                index.get(id(0)).is_some(),
                "the entry in use was dropped at {n}"
            );
            index.shared.put(id(n + 1), big.clone());
            let s = index.shared.state();
            assert!(s.bytes <= MEMORY_BYTES, "{} bytes held", s.bytes);
            assert_eq!(s.bytes, s.entries.values().map(entry_bytes).sum::<usize>());
            assert!(s.touched.is_empty() && s.current.len() <= 2);
            if s.entries.len() < before {
                trims += 1;
            }
            before = s.entries.len();
        }
        assert!(trims > 5, "never trimmed");
        assert!(!index.save().unwrap(), "an index in memory is never saved");
    }

    /// A tree whose entries alone pass the bound keeps them all, and the
    /// index is not trimmed on every entry after that.
    #[test]
    fn an_index_in_memory_keeps_a_tree_larger_than_its_bound() {
        let index = NameIndex::in_memory_within(1_000);
        let big = entry("metadata:\n  name: nova-00001\n  namespace: compute-001\n");
        let id = |n: u32| Oid::from_str(&format!("{n:040x}")).unwrap();
        index.sync();
        for n in 0..50 {
            index.shared.put(id(n), big.clone());
        }
        for n in 0..50 {
            assert!(
                index.get(id(n)).is_some(),
                "entry {n} of the tree in hand dropped"
            );
        }
        let limit = index.shared.state().limit;
        assert!(limit >= 50 * entry_bytes(&big), "limit {limit}");
        // The next walk's tree: the last one's entries go at the next trim.
        index.sync();
        for n in 100..300 {
            index.shared.put(id(n), big.clone());
        }
        assert!(index.get(id(0)).is_none(), "the old tree was kept");
        assert!(index.get(id(299)).is_some());
    }

    #[test]
    fn a_directory_is_excluded_only_when_a_window_is_missing() {
        let e = entry("metadata:\n  name: nova-00001\n  namespace: compute-001\n");
        // Present: never excluded.
        assert!(!e.excludes([&b"nova-00001"[..]].into_iter()));
        assert!(!e.excludes([&b"va-00"[..]].into_iter()));
        // All windows present although the name is not: read, not skipped.
        assert!(!e.excludes([&b"nova-0000"[..]].into_iter()));
        // A missing window excludes.
        assert!(e.excludes([&b"nova-new"[..]].into_iter()));
        // One needle that may be there is enough to read the files.
        assert!(!e.excludes([&b"nova-new"[..], &b"compute-001"[..]].into_iter()));
        // Too short, or characters outside the alphabet: never excluded.
        assert!(!e.excludes([&b"zz"[..]].into_iter()));
        assert!(!e.excludes([&b"Zebra"[..]].into_iter()));
        let mut d = e.clone();
        d.disguised = true;
        assert!(!d.excludes([&b"nova-new"[..]].into_iter()));
    }

    /// What `add_text` must compute, written the obvious way.
    fn reference(bytes: &[u8]) -> Vec<u16> {
        let mut ids: Vec<u16> = bytes
            .windows(3)
            .filter(|w| w.iter().all(|&b| CODE[b as usize] != OTHER))
            .map(|w| {
                window_id(
                    CODE[w[0] as usize],
                    CODE[w[1] as usize],
                    CODE[w[2] as usize],
                ) as u16
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    #[test]
    fn the_windows_are_those_of_three_name_characters() {
        let mut texts: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"ab".to_vec(),
            b"abc".to_vec(),
            b"..-".to_vec(),
            b"zz9".to_vec(),
            b"9.-z".to_vec(),
            b"metadata:\n  name: nova-00001\n  namespace: Compute_001 \xff\x00".to_vec(),
            (0..=255u8).collect(),
        ];
        // Pseudo-random bytes biased towards name characters.
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for len in [3usize, 17, 300, 5000] {
            let mut t = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let b = (x >> 24) as u8;
                t.push(if b.is_multiple_of(4) {
                    b
                } else {
                    b"az09-.:x "[(b % 9) as usize]
                });
            }
            texts.push(t);
        }
        let mut all = Windows::default();
        let mut union = Vec::new();
        for t in &texts {
            let mut w = Windows::default();
            w.add_text(t);
            assert_eq!(w.ids(), reference(t), "{:?}", String::from_utf8_lossy(t));
            all.add_text(t);
            union.extend(reference(t));
        }
        union.sort_unstable();
        union.dedup();
        assert_eq!(all.ids(), union);
        // Stored ids come back as the same windows.
        let mut back = Windows::default();
        back.add_ids(&union);
        assert_eq!(back.ids(), union);
    }

    #[test]
    fn round_trip_and_every_damage_is_refused() {
        let a = Oid::from_str("0123456789abcdef0123456789abcdef01234567").expect("oid");
        let b = Oid::from_str("89abcdef0123456789abcdef0123456789abcdef").expect("oid");
        let (ea, mut eb) = (entry("name: nova-1"), entry("name: glance-2"));
        eb.disguised = true;
        let bytes = encode([(&a, &ea), (&b, &eb)]);
        let back = decode(&bytes).expect("decodes");
        assert_eq!(back.get(&a), Some(&ea));
        assert_eq!(back.get(&b), Some(&eb));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_none(), "truncated at {cut}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_none(), "flipped byte {i}");
        }
        // Another version, with a valid checksum: refused.
        let mut other = bytes[..bytes.len() - 8].to_vec();
        other[8] = 2;
        let sum = checksum(&other);
        other.extend_from_slice(&sum.to_le_bytes());
        assert!(decode(&other).is_none());
        assert!(decode(b"").is_none());
        assert!(decode(&[0xff; 64]).is_none());
    }
}
