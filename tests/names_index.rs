//! The names index (`src/names.rs`) changes what a check reads, never what
//! it answers: over random histories (names added, removed, renamed, moved
//! between directories, duplicated, made unparseable, spelled with
//! escapes), every commit's report is the same without the index, with an
//! index built in the run, and with the index saved by an earlier run. A
//! damaged index file is ignored, so it cannot hide a duplicate; a
//! repository where the index cannot be written is checked all the same.
//! The file is used unasked by a person's check at a terminal only: a
//! script's, a CI job's, a pod's, one posting statuses and one told
//! `--no-names-index` leave the Git directory as it was and ignore a forged
//! index that fools a check using it; so does every check while the file
//! or its directory is writable by others.
//!
//! Histories are written with libgit2 in process (real repositories);
//! `PROPTEST_CASES` sets the number of cases (default 48).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use git2::{Oid, Repository, Signature};
use lockstep::git::GitRepo;
use lockstep::history::{self, CheckOptions, EMPTY_TREE};
use lockstep::names::NameIndex;
use proptest::prelude::*;

/// Directories of the fleet, each holding fillers enough for an index entry.
const DIRS: [&str; 4] = ["d0", "d1", "d2/deep", "d3"];
/// Names the histories play with: distinct windows, one sharing most of
/// its windows with the fillers, one too short to ever skip anything.
const NAMES: [&str; 5] = ["alpha-nova", "bravo", "fill-d1-0", "zz", "kilo.x"];
const FILLERS: usize = 20;

fn nova() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet/standalone/compute/nova.yaml"),
    )
    .expect("example nova")
}

fn named(name: &str, ns: &str) -> String {
    nova()
        .replacen("name: nova\n", &format!("name: {name}\n"), 1)
        .replacen("namespace: compute\n", &format!("namespace: {ns}\n"), 1)
}

#[derive(Clone, Debug)]
enum Op {
    /// Name `n` defined in a new file `f` of directory `d`.
    Add { n: usize, d: usize, f: u8 },
    /// The `i`-th actor file (modulo their number) removed.
    Remove { i: usize },
    /// ... renamed within its directory.
    Rename { i: usize, f: u8 },
    /// ... moved to another directory.
    Move { i: usize, d: usize },
    /// ... copied: the same name defined twice.
    Duplicate { i: usize, d: usize, f: u8 },
    /// ... made unparseable, its name still in it.
    Break { i: usize },
    /// ... its name spelled with a hex escape.
    Disguise { i: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..NAMES.len(), 0..DIRS.len(), 0u8..4).prop_map(|(n, d, f)| Op::Add { n, d, f }),
        1 => (0usize..8).prop_map(|i| Op::Remove { i }),
        1 => (0usize..8, 0u8..4).prop_map(|(i, f)| Op::Rename { i, f }),
        1 => (0usize..8, 0..DIRS.len()).prop_map(|(i, d)| Op::Move { i, d }),
        2 => (0usize..8, 0..DIRS.len(), 0u8..4).prop_map(|(i, d, f)| Op::Duplicate { i, d, f }),
        1 => (0usize..8).prop_map(|i| Op::Break { i }),
        1 => (0usize..8).prop_map(|i| Op::Disguise { i }),
    ]
}

type Files = BTreeMap<String, String>;

fn fillers() -> Files {
    let mut out = Files::new();
    for d in DIRS {
        let tag = d.replace('/', "-");
        for i in 0..FILLERS {
            out.insert(
                format!("{d}/fill-{i}.yaml"),
                named(&format!("fill-{tag}-{i}"), "compute"),
            );
        }
    }
    out
}

fn actors(files: &Files) -> Vec<String> {
    files
        .keys()
        .filter(|p| p.contains("/act-"))
        .cloned()
        .collect()
}

fn apply(files: &mut Files, op: &Op) {
    let acts = actors(files);
    let pick = |i: usize| (!acts.is_empty()).then(|| acts[i % acts.len()].clone());
    match *op {
        Op::Add { n, d, f } => {
            files.insert(
                format!("{}/act-{n}-{f}.yaml", DIRS[d]),
                named(NAMES[n], "compute"),
            );
        }
        Op::Remove { i } => {
            if let Some(p) = pick(i) {
                files.remove(&p);
            }
        }
        Op::Rename { i, f } => {
            if let Some(p) = pick(i)
                && let Some(t) = files.remove(&p)
            {
                let dir = p.rsplit_once('/').map_or("", |(d, _)| d);
                files.insert(format!("{dir}/act-r{f}.yaml"), t);
            }
        }
        Op::Move { i, d } => {
            if let Some(p) = pick(i)
                && let Some(t) = files.remove(&p)
            {
                let name = p.rsplit_once('/').map_or(p.as_str(), |(_, n)| n);
                files.insert(format!("{}/{name}", DIRS[d]), t);
            }
        }
        Op::Duplicate { i, d, f } => {
            if let Some(p) = pick(i) {
                let t = files[&p].clone();
                files.insert(format!("{}/act-c{f}.yaml", DIRS[d]), t);
            }
        }
        Op::Break { i } => {
            if let Some(p) = pick(i)
                && let Some(t) = files.get_mut(&p)
            {
                t.push_str("  broken: [unclosed\n");
            }
        }
        Op::Disguise { i } => {
            if let Some(p) = pick(i)
                && let Some(t) = files.get_mut(&p)
                && let Some(start) = t.find("  name: ")
            {
                let line_end = start + t[start..].find('\n').unwrap_or(t.len() - start);
                let name = t[start + 8..line_end].to_owned();
                if let Some(first) = name.bytes().next() {
                    let spelled = format!("  name: \"\\x{first:02x}{}\"", &name[1..]);
                    t.replace_range(start..line_end, &spelled);
                }
            }
        }
    }
}

/// Writes `files` as a tree (directories nested as their paths say).
fn tree(repo: &Repository, files: &Files) -> Oid {
    fn build(repo: &Repository, files: &[(&str, &str)]) -> Oid {
        let mut b = repo.treebuilder(None).expect("treebuilder");
        let mut dirs: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
        for (p, t) in files {
            match p.split_once('/') {
                Some((d, rest)) => dirs.entry(d).or_default().push((rest, t)),
                None => {
                    let blob = repo.blob(t.as_bytes()).expect("blob");
                    b.insert(p, blob, 0o100644).expect("insert");
                }
            }
        }
        for (d, inner) in dirs {
            let sub = build(repo, &inner);
            b.insert(d, sub, 0o040000).expect("insert");
        }
        b.write().expect("tree")
    }
    let flat: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    build(repo, &flat)
}

/// A repository: the fillers, then one commit per step. Returns the commits.
fn history(dir: &Path, steps: &[Vec<Op>]) -> Vec<Oid> {
    let repo = Repository::init(dir).expect("init");
    let sig = Signature::now("t", "t@example.invalid").expect("sig");
    let mut files = fillers();
    let mut commits: Vec<Oid> = Vec::new();
    for (i, ops) in std::iter::once(&Vec::new()).chain(steps).enumerate() {
        for op in ops {
            apply(&mut files, op);
        }
        let t = repo.find_tree(tree(&repo, &files)).expect("tree");
        let parents: Vec<git2::Commit<'_>> = commits
            .last()
            .map(|c| repo.find_commit(*c).expect("commit"))
            .into_iter()
            .collect();
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        let c = repo
            .commit(
                Some("refs/heads/main"),
                &sig,
                &sig,
                &format!("step {i}"),
                &t,
                &parents,
            )
            .expect("commit");
        commits.push(c);
    }
    commits
}

/// Every report a test compares: each commit judged alone (a pull request,
/// which looks back through history for new names), and the whole range
/// from the empty tree.
fn reports(git: &GitRepo, commits: &[Oid], names: Option<Arc<NameIndex>>) -> Vec<String> {
    let mut out = Vec::new();
    let mut ranges: Vec<CheckOptions> = commits
        .iter()
        .map(|c| CheckOptions {
            head: c.to_string(),
            names: names.clone(),
            ..CheckOptions::default()
        })
        .collect();
    if let Some(last) = commits.last() {
        ranges.push(CheckOptions {
            base: Some(EMPTY_TREE.into()),
            head: last.to_string(),
            names: names.clone(),
            ..CheckOptions::default()
        });
    }
    for opts in ranges {
        let r = history::check(git, &opts).expect("check");
        out.push(serde_json::to_string_pretty(&r).expect("json"));
    }
    out
}

fn index_file(git: &GitRepo) -> std::path::PathBuf {
    NameIndex::new(git.common_dir())
        .path()
        .expect("a file")
        .to_owned()
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn the_index_never_changes_a_verdict(steps in prop::collection::vec(prop::collection::vec(op(), 1..4), 1..7)) {
        let dir = tempfile::tempdir().expect("tmp");
        let commits = history(dir.path(), &steps);
        let git = GitRepo::open(dir.path()).expect("open");
        let plain = reports(&git, &commits, None);
        // The daemon's: one index in memory across every check, never saved.
        let kept = reports(&git, &commits, Some(Arc::new(NameIndex::in_memory())));
        // And one trimmed to the tree in hand again and again.
        let tight = reports(&git, &commits, Some(Arc::new(NameIndex::in_memory_within(1))));
        prop_assert!(!index_file(&git).exists(), "an index in memory wrote a file");
        let cold = Arc::new(NameIndex::new(git.common_dir()));
        let built = reports(&git, &commits, Some(cold.clone()));
        // Saved when the run read enough to build entries (not when no
        // commit added a name, nor for a whole tree judged from nothing).
        cold.save().expect("save");
        let warm = Arc::new(NameIndex::new(git.common_dir()));
        let reused = reports(&git, &commits, Some(warm.clone()));
        for ((p, b), w) in plain.iter().zip(&built).zip(&reused) {
            prop_assert_eq!(p, b, "cold index");
            prop_assert_eq!(p, w, "saved index");
        }
        for ((p, k), t) in plain.iter().zip(&kept).zip(&tight) {
            prop_assert_eq!(p, k, "index in memory");
            prop_assert_eq!(p, t, "index in memory, trimmed");
        }
        prop_assert!(warm.blobs_read() <= cold.blobs_read(), "the saved index is used");
    }
}

/// A fleet whose last commit adds `alpha-nova` in d0 while d3 defines it
/// already: refused as a duplicate, and found only by reading d3.
fn duplicate_fleet(dir: &Path) -> (GitRepo, Oid) {
    let steps = vec![
        vec![Op::Add { n: 0, d: 3, f: 0 }],
        vec![Op::Add { n: 0, d: 0, f: 1 }],
    ];
    let commits = history(dir, &steps);
    let git = GitRepo::open(dir).expect("open");
    (git, *commits.last().expect("commits"))
}

fn check_last(git: &GitRepo, head: Oid, names: Option<Arc<NameIndex>>) -> String {
    let r = history::check(
        git,
        &CheckOptions {
            head: head.to_string(),
            names,
            ..CheckOptions::default()
        },
    )
    .expect("check");
    serde_json::to_string_pretty(&r).expect("json")
}

#[test]
fn a_damaged_index_cannot_hide_a_duplicate() {
    let dir = tempfile::tempdir().expect("tmp");
    let (git, head) = duplicate_fleet(dir.path());
    let plain = check_last(&git, head, None);
    assert!(plain.contains("\"refused\""), "{plain}");
    assert!(
        plain.contains("d3/act-0-0.yaml"),
        "names the other file: {plain}"
    );

    let cold = Arc::new(NameIndex::new(git.common_dir()));
    assert_eq!(check_last(&git, head, Some(cold.clone())), plain);
    assert!(cold.save().expect("save"));
    let file = index_file(&git);
    let good = std::fs::read(&file).expect("index written");

    // An index whose d3 entry says "no such windows" would hide it; every
    // accidental way of getting there is refused instead.
    let mut damaged: Vec<(&str, Vec<u8>)> = Vec::new();
    for at in [20, good.len() / 2, good.len() - 9, good.len() - 1] {
        let mut b = good.clone();
        b[at] ^= 0x01;
        damaged.push(("a flipped bit", b));
    }
    damaged.push(("truncated", good[..good.len() / 2].to_vec()));
    damaged.push(("empty", Vec::new()));
    let mut other = good.clone();
    other[8] = 9;
    damaged.push(("another version", other));
    damaged.push(("garbage", vec![0xA5; good.len()]));
    for (what, bytes) in damaged {
        std::fs::write(&file, &bytes).expect("write");
        let idx = Arc::new(NameIndex::new(git.common_dir()));
        assert_eq!(check_last(&git, head, Some(idx.clone())), plain, "{what}");
        assert!(
            idx.blobs_read() > 0,
            "{what}: the index was rebuilt, not trusted"
        );
    }
    // A good index is used: the directories without the name are not read.
    std::fs::write(&file, &good).expect("write");
    let idx = Arc::new(NameIndex::new(git.common_dir()));
    assert_eq!(check_last(&git, head, Some(idx.clone())), plain);
    assert!(
        idx.blobs_read() <= FILLERS + 2,
        "only d0 (changed) is read: {}",
        idx.blobs_read()
    );
}

#[test]
fn an_index_that_cannot_be_written_or_read_changes_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let (git, head) = duplicate_fleet(dir.path());
    let plain = check_last(&git, head, None);
    // `lockstep` under the Git directory is a file: nothing can be created
    // there (this holds for root too, unlike a read-only mode).
    let lockdir = git.common_dir().join("lockstep");
    std::fs::write(&lockdir, b"not a directory").expect("write");
    let idx = Arc::new(NameIndex::new(git.common_dir()));
    assert_eq!(check_last(&git, head, Some(idx.clone())), plain);
    assert!(idx.save().is_err(), "saving fails, for the caller to log");
    // The index file itself a directory: unreadable, ignored, unwritable.
    std::fs::remove_file(&lockdir).expect("rm");
    std::fs::create_dir_all(index_file(&git)).expect("mkdir");
    let idx = Arc::new(NameIndex::new(git.common_dir()));
    assert_eq!(check_last(&git, head, Some(idx.clone())), plain);
    assert!(idx.save().is_err());
}

/// Where `lockstep check` runs.
#[derive(Clone, Copy)]
enum Env {
    /// A person's shell: stderr a terminal (a pseudo-terminal here).
    Person,
    /// A script, or a runner no marker names: no terminal.
    Script,
    /// `CI=true` (GitHub, GitLab, Gitea and Forgejo Actions), even with a
    /// terminal.
    Ci,
    /// Jenkins sets no `CI`, but `JENKINS_URL`; with a terminal.
    Jenkins,
    /// A pod (Tekton, Argo Workflows): `KUBERNETES_SERVICE_HOST`; with a
    /// terminal.
    Pod,
}

/// `lockstep check` on `dir` (head `main`, JSON) in `env`: exit code and
/// stdout. The environment is emptied first, so that the CI this suite
/// runs in cannot decide for a test what the default is.
fn cli_in(env: Env, dir: &Path, extra: &[&str]) -> (Option<i32>, Vec<u8>) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lockstep"));
    cmd.env_clear();
    for keep in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    match env {
        Env::Person | Env::Script => {}
        Env::Ci => {
            cmd.env("CI", "true");
        }
        Env::Jenkins => {
            cmd.env("JENKINS_URL", "https://jenkins.example.invalid/");
        }
        Env::Pod => {
            cmd.env("KUBERNETES_SERVICE_HOST", "10.96.0.1");
        }
    }
    // Kept open until the check ends: its stderr is the terminal's other end.
    let _terminal = (!matches!(env, Env::Script)).then(|| {
        let (main, other) = pty();
        cmd.stderr(std::process::Stdio::from(other));
        main
    });
    let out = cmd
        .args(["check", "--repo"])
        .arg(dir)
        .args(["--head", "main", "-o", "json"])
        .args(extra)
        .output()
        .expect("run lockstep");
    (out.status.code(), out.stdout)
}

/// A pseudo-terminal: its main end and the end a process writes to.
fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd as _;
    let (mut main, mut other) = (-1, -1);
    // SAFETY: out-parameters for two descriptors; the name, settings and
    // window size are left to the system (null).
    let r = unsafe {
        libc::openpty(
            &mut main,
            &mut other,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here alone.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(main),
            std::os::fd::OwnedFd::from_raw_fd(other),
        )
    }
}

/// [`cli_in`] a person's shell.
fn cli(dir: &Path, extra: &[&str]) -> (Option<i32>, Vec<u8>) {
    cli_in(Env::Person, dir, extra)
}

/// The checks whose verdict others may take: they never open the file.
const OTHERS: [(Env, &[&str], &str); 6] = [
    (Env::Script, &[], "a script (no terminal)"),
    (Env::Ci, &[], "a CI job (CI=true)"),
    (Env::Jenkins, &[], "a Jenkins job (JENKINS_URL)"),
    (Env::Pod, &[], "a pod (KUBERNETES_SERVICE_HOST)"),
    (Env::Person, &["--no-names-index"], "--no-names-index"),
    (
        Env::Person,
        &["--report", "notes"],
        "a check posting statuses",
    ),
];

#[test]
fn a_check_others_may_take_writes_nothing_into_the_git_directory() {
    let dir = tempfile::tempdir().expect("tmp");
    let (git, _) = duplicate_fleet(dir.path());
    let lockdir = git.common_dir().join("lockstep");
    // Each check reads 80 untouched files, more than enough for an index
    // to be saved if one were kept.
    for (env, extra, why) in OTHERS {
        let out = cli_in(env, dir.path(), extra);
        assert_eq!(out.0, Some(1), "{why}: the duplicate is refused");
        assert!(
            !lockdir.exists(),
            "{why}: leaves {} absent",
            lockdir.display()
        );
    }
}

#[test]
fn a_person_s_check_keeps_the_index_and_answers_the_same() {
    let dir = tempfile::tempdir().expect("tmp");
    let (git, _) = duplicate_fleet(dir.path());
    let file = index_file(&git);
    let off = cli(dir.path(), &["--no-names-index"]);
    assert_eq!(off.0, Some(1), "the duplicate is refused");
    let cold = cli(dir.path(), &[]);
    assert!(file.is_file(), "a person's check keeps {}", file.display());
    assert!(
        decode_file(&file).is_some_and(|e| !e.is_empty()),
        "a whole index file with entries"
    );
    assert_eq!(cold, off, "cold: the same answer");
    assert_eq!(cli(dir.path(), &[]), off, "warm: the same");
    assert_eq!(
        cli_in(Env::Ci, dir.path(), &["--names-index"]),
        off,
        "asked for in CI, warm: the same"
    );
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).expect("mode").permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600, "the file is the user's alone");
        assert_eq!(
            mode(file.parent().expect("dir")),
            0o700,
            "so is its directory"
        );
    }
}

fn decode_file(file: &Path) -> Option<std::collections::HashMap<Oid, lockstep::names::Entry>> {
    lockstep::names::decode(&std::fs::read(file).ok()?)
}

/// The threat `docs/names-index.md` describes, shown rather than told: an
/// index forged with a valid checksum, claiming d3 holds no name windows,
/// hides d3's definition from the checks that use the file (the duplicate
/// is accepted): a person's, and one asked for it. It changes nothing for
/// the checks whose verdict others may take (a script's, a CI job's, a
/// pod's, one posting statuses, one told `--no-names-index`): none of them
/// opens the file. Nor for any check while the file or its directory is
/// writable by others (who could have forged it), or another user's.
#[test]
fn a_forged_index_fools_only_the_checks_that_use_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tmp");
    let (git, _) = duplicate_fleet(dir.path());
    let repo = Repository::open(dir.path()).expect("open");
    let d3 = repo.revparse_single("main:d3").expect("d3 in main").id();
    let empty = lockstep::names::Entry::new(&lockstep::names::Windows::default(), false, 99);
    let forged = lockstep::names::encode([(&d3, &empty)]);
    let file = index_file(&git);
    let lockdir = file.parent().expect("parent").to_owned();
    std::fs::create_dir_all(&lockdir).expect("mkdir");
    std::fs::write(&file, &forged).expect("write");
    let chmod = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    chmod(&lockdir, 0o755);
    chmod(&file, 0o644);

    for (env, extra, why) in OTHERS {
        let out = cli_in(env, dir.path(), extra);
        assert_eq!(out.0, Some(1), "{why} ignores the file");
        assert!(
            String::from_utf8_lossy(&out.1).contains("d3/act-0-0.yaml"),
            "{why}: and names the other definition"
        );
        assert_eq!(
            std::fs::read(&file).expect("still there"),
            forged,
            "{why}: nor rewrites it"
        );
    }
    for (path, mode, why) in [
        (&file, 0o664, "the file writable by its group"),
        (&file, 0o646, "the file writable by others"),
        (&lockdir, 0o775, "its directory writable by its group"),
    ] {
        chmod(path, mode);
        let out = cli(dir.path(), &["--names-index"]);
        assert_eq!(out.0, Some(1), "{why}: ignored, the duplicate refused");
        // Replaced by this user's own file, in a directory made this
        // user's alone (as one an older lockstep made under the umask).
        assert_ne!(
            std::fs::read(&file).expect("there"),
            forged,
            "{why}: replaced"
        );
        let mode = std::fs::metadata(&lockdir)
            .expect("dir")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode & 0o022, 0, "{why}: the directory made private");
        std::fs::write(&file, &forged).expect("forged again");
        chmod(&lockdir, 0o755);
        chmod(&file, 0o644);
    }
    for (env, extra, why) in [
        (Env::Person, &[][..], "a person's check"),
        (Env::Ci, &["--names-index"][..], "a CI job asking for it"),
    ] {
        let fooled = cli_in(env, dir.path(), extra);
        assert_eq!(
            fooled.0,
            Some(0),
            "{why}: the forged entry hides the duplicate (why others' checks never use the file unasked)"
        );
    }
}
