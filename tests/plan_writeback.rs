//! Plan write-back against real Git: the edits are byte-exact, and the
//! commit they make is one the real gate accepts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{FleetRepo, example};
use git2::Oid;
use lockstep::gate::{Transition, Verdict};
use lockstep::git::GitRepo;
use lockstep::history::{CheckOptions, CheckReport, check};
use lockstep::kind::{Key, Kind};
use lockstep::plan::writeback::{
    Author, Bump, WritebackError, commit_bumps, edit_file, message, push_branch,
};

const NOVA: &str = "standalone/compute/nova.yaml";
const GLANCE: &str = "standalone/image/glance.yaml";
const PROD: &str = "clusters/prod/controlplane.yaml";
const STAGING: &str = "clusters/staging/controlplane.yaml";
const KEYSTONE: &str = "standalone/identity/keystone.yaml";

const KEYSTONE_TEXT: &str = "apiVersion: keystone.openstack.c5c3.io/v1alpha1
kind: Keystone
metadata:
  name: keystone
  namespace: identity
spec:
  image:
    repository: ghcr.io/c5c3/keystone
    tag: 2026.1-p3            # plain, and patched
";

fn bump(kind: Kind, ns: &str, name: &str, file: &str, to: &str) -> Bump {
    Bump {
        key: Key::new(kind, ns, name),
        file: file.into(),
        to: to.into(),
    }
}

fn nova_bump(to: &str) -> Bump {
    bump(Kind::Nova, "compute", "nova", NOVA, to)
}

fn prod_bump(to: &str) -> Bump {
    bump(Kind::ControlPlane, "openstack", "prod", PROD, to)
}

fn edit(file: &str, text: &str, bumps: &[Bump]) -> Result<String, WritebackError> {
    let refs: Vec<&Bump> = bumps.iter().collect();
    edit_file(file, text, &refs)
}

/// The lines that differ, 1-based, as (line, before, after); the line count
/// must not change.
fn changed_lines(before: &str, after: &str) -> Vec<(usize, String, String)> {
    let (b, a): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    assert_eq!(b.len(), a.len(), "line count changed:\n{after}");
    assert_eq!(before.ends_with('\n'), after.ends_with('\n'));
    b.iter()
        .zip(&a)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i + 1, (*x).to_owned(), (*y).to_owned()))
        .collect()
}

fn line(n: usize, before: &str, after: &str) -> (usize, String, String) {
    (n, before.to_owned(), after.to_owned())
}

#[test]
fn standalone_nova_moves_release_and_tag_and_nothing_else() {
    let text = example(NOVA);
    let out = edit(NOVA, &text, &[nova_bump("2026.2")]).unwrap();
    assert_eq!(
        changed_lines(&text, &out),
        vec![
            line(
                7,
                "  openStackRelease: \"2026.1\"",
                "  openStackRelease: \"2026.2\""
            ),
            line(
                10,
                "    tag: \"2026.1\"                 # bump together with openStackRelease",
                "    tag: \"2026.2\"                 # bump together with openStackRelease"
            ),
        ]
    );
    // The same wave written again changes nothing.
    assert_eq!(edit(NOVA, &out, &[nova_bump("2026.2")]).unwrap(), out);
    // And the next hop from there.
    let next = edit(NOVA, &out, &[nova_bump("2027.1")]).unwrap();
    assert_eq!(next, text.replace("\"2026.1\"", "\"2027.1\""));
}

#[test]
fn prod_plane_moves_release_and_its_placement_override() {
    let text = example(PROD);
    let out = edit(PROD, &text, &[prod_bump("2026.2")]).unwrap();
    assert_eq!(
        changed_lines(&text, &out),
        vec![
            line(
                7,
                "  openStackRelease: \"2026.1\"      # ^\\d{4}\\.[12]$; one hop per commit, never lowered",
                "  openStackRelease: \"2026.2\"      # ^\\d{4}\\.[12]$; one hop per commit, never lowered"
            ),
            line(
                62,
                "        tag: \"2026.1\"             # must name the same YYYY.N as openStackRelease",
                "        tag: \"2026.2\"             # must name the same YYYY.N as openStackRelease"
            ),
        ]
    );
    // A plane without overrides: the release alone (its children follow it).
    let staging = example(STAGING);
    let out = edit(
        STAGING,
        &staging,
        &[bump(
            Kind::ControlPlane,
            "openstack-staging",
            "staging",
            STAGING,
            "2026.2",
        )],
    )
    .unwrap();
    assert_eq!(changed_lines(&staging, &out).len(), 1);
}

#[test]
fn only_the_bumped_document_of_a_file_changes() {
    let first = common::nova("nova-a", "2026.1", "2026.1");
    let second = common::nova("nova-b", "2026.1", "2026.1-p2");
    let text = format!("# two cells\n{first}---\n{second}");
    let out = edit(
        "cells.yaml",
        &text,
        &[bump(
            Kind::Nova,
            "compute",
            "nova-b",
            "cells.yaml",
            "2026.2",
        )],
    )
    .unwrap();
    let offset = 1 + first.lines().count() + 1; // comment, first document, separator
    assert_eq!(
        changed_lines(&text, &out),
        vec![
            line(
                offset + 7,
                "  openStackRelease: \"2026.1\"",
                "  openStackRelease: \"2026.2\""
            ),
            line(
                offset + 10,
                "    tag: \"2026.1-p2\"                 # bump together with openStackRelease",
                "    tag: \"2026.2\"                 # bump together with openStackRelease"
            ),
        ]
    );
    assert!(out.starts_with(&format!("# two cells\n{first}---\n")));
    // Bumps for other files are not this file's business.
    let other = bump(Kind::Nova, "compute", "nova-a", "elsewhere.yaml", "2026.2");
    assert_eq!(edit("cells.yaml", &text, &[other]).unwrap(), text);
}

#[test]
fn comments_and_quoting_styles_are_kept() {
    let text = "# header comment
apiVersion: nova.openstack.c5c3.io/v1alpha1
kind: Nova
metadata: {name: nova, namespace: compute}   # flow style
spec:
  openStackRelease: '2026.1'    # single
  image:
    repository: ghcr.io/c5c3/nova
    tag: 2026.1-p3              # plain
  region: \"RegionTwo\"
";
    let out = edit(
        "n.yaml",
        text,
        &[bump(Kind::Nova, "compute", "nova", "n.yaml", "2026.2")],
    )
    .unwrap();
    assert_eq!(
        changed_lines(text, &out),
        vec![
            line(
                6,
                "  openStackRelease: '2026.1'    # single",
                "  openStackRelease: '2026.2'    # single"
            ),
            // Plain 2026.2 would be a number: quoted.
            line(
                9,
                "    tag: 2026.1-p3              # plain",
                "    tag: \"2026.2\"              # plain"
            ),
        ]
    );
    // Flow mappings and double quotes.
    let text = "apiVersion: nova.openstack.c5c3.io/v1alpha1
kind: Nova
metadata:
  name: nova
  namespace: compute
spec:
  openStackRelease: \"2026.2\"
  image: {repository: ghcr.io/c5c3/nova, tag: '2026.2-hotfix'}  # flow
";
    let out = edit(
        "n.yaml",
        text,
        &[bump(Kind::Nova, "compute", "nova", "n.yaml", "2027.1")],
    )
    .unwrap();
    assert_eq!(
        changed_lines(text, &out),
        vec![
            line(
                7,
                "  openStackRelease: \"2026.2\"",
                "  openStackRelease: \"2027.1\""
            ),
            line(
                8,
                "  image: {repository: ghcr.io/c5c3/nova, tag: '2026.2-hotfix'}  # flow",
                "  image: {repository: ghcr.io/c5c3/nova, tag: '2027.1'}  # flow"
            ),
        ]
    );
}

#[test]
fn keystone_release_is_its_tag() {
    let out = edit(
        KEYSTONE,
        KEYSTONE_TEXT,
        &[bump(
            Kind::Keystone,
            "identity",
            "keystone",
            KEYSTONE,
            "2026.2",
        )],
    )
    .unwrap();
    assert_eq!(
        changed_lines(KEYSTONE_TEXT, &out),
        vec![line(
            9,
            "    tag: 2026.1-p3            # plain, and patched",
            "    tag: \"2026.2\"            # plain, and patched"
        )]
    );
    assert!(!out.contains("openStackRelease"));
}

#[test]
fn digest_pinned_glance_is_refused_with_file_and_line() {
    let e = edit(
        GLANCE,
        &example(GLANCE),
        &[bump(Kind::Glance, "image", "glance", GLANCE, "2026.2")],
    )
    .unwrap_err();
    assert!(
        matches!(&e, WritebackError::DigestPinned { at, .. } if at.line == 10),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "standalone/image/glance.yaml:10: Glance image/glance spec.image is pinned by digest; \
         a plan cannot derive the 2026.2 digest: pin a tag or bump it by hand"
    );
    // A plane override pinned by digest, likewise.
    let digest = format!("digest: sha256:{}", "a".repeat(64));
    let prod = example(PROD).replacen("tag: \"2026.1\"", &digest, 1);
    let e = edit(PROD, &prod, &[prod_bump("2026.2")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "clusters/prod/controlplane.yaml:62: ControlPlane openstack/prod \
         spec.services.placement.image is pinned by digest; a plan cannot derive the 2026.2 \
         digest: pin a tag or bump it by hand"
    );
}

#[test]
fn a_tag_that_is_not_a_release_is_refused() {
    let text = common::nova("nova", "2026.1", "latest");
    let e = edit(NOVA, &text, &[nova_bump("2026.2")]).unwrap_err();
    assert!(
        matches!(&e, WritebackError::NotARelease { at, .. } if at.line == 10),
        "{e:?}"
    );
    assert!(
        e.to_string().starts_with(
            "standalone/compute/nova.yaml:10: Nova compute/nova spec.image.tag \"latest\" does not name a release"
        ),
        "{e}"
    );
    // A skip is refused too: a plan moves one hop.
    let e = edit(NOVA, &example(NOVA), &[nova_bump("2027.1")]).unwrap_err();
    assert!(
        matches!(&e, WritebackError::NotOneHop { at, .. } if at.line == 7),
        "{e:?}"
    );
    // A file the gate cannot read is not edited.
    let e = edit(NOVA, "a: [1,\n", &[nova_bump("2026.2")]).unwrap_err();
    assert!(matches!(e, WritebackError::Manifest { .. }), "{e:?}");
}

// ---- commits ----

fn fleet() -> FleetRepo {
    let repo = FleetRepo::new();
    copy_dir(Path::new(common::EXAMPLES), repo.path(), Path::new(""));
    repo.write(KEYSTONE, KEYSTONE_TEXT);
    repo.commit("Fleet at 2026.1");
    repo
}

fn copy_dir(from: &Path, root: &Path, rel: &Path) {
    for entry in std::fs::read_dir(from.join(rel)).unwrap() {
        let entry = entry.unwrap();
        let rel = rel.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(from, root, &rel);
        } else {
            std::fs::create_dir_all(root.join(&rel).parent().unwrap()).unwrap();
            std::fs::copy(from.join(&rel), root.join(&rel)).unwrap();
        }
    }
}

/// A bare clone of the fleet (how the daemon's remote caches look).
fn bare_clone(of: &Path, into: &Path) -> PathBuf {
    let dst = into.join("fleet.git");
    git_in(
        into,
        &["clone", "-q", "--bare", &of.to_string_lossy(), "fleet.git"],
    );
    dst
}

fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn tip(repo: &Path, branch: &str) -> Oid {
    Oid::from_str(&git_in(
        repo,
        &["rev-parse", &format!("refs/heads/{branch}")],
    ))
    .unwrap()
}

fn author() -> Author {
    Author {
        name: "lockstep planner".into(),
        email: "lockstep@fleet.example.invalid".into(),
    }
}

fn wave_bumps(to: &str) -> Vec<Bump> {
    vec![
        prod_bump(to),
        bump(
            Kind::ControlPlane,
            "openstack-staging",
            "staging",
            STAGING,
            to,
        ),
        nova_bump(to),
        bump(Kind::Keystone, "identity", "keystone", KEYSTONE, to),
    ]
}

fn write_wave(repo: &Path, to: &str, signing_key: Option<&Path>) -> Result<Oid, WritebackError> {
    let bumps = wave_bumps(to);
    let keys: Vec<Key> = bumps.iter().map(|b| b.key.clone()).collect();
    let msg = message("fleet-upgrade", "everything", 0, 1, to, &keys);
    commit_bumps(
        repo,
        "main",
        tip(repo, "main"),
        &bumps,
        &msg,
        &author(),
        signing_key,
    )
}

fn judge(repo: &Path, head: Oid) -> CheckReport {
    let git = GitRepo::open(repo).unwrap();
    check(
        &git,
        &CheckOptions {
            head: head.to_string(),
            ..CheckOptions::default()
        },
    )
    .unwrap()
}

fn assert_upgrades(report: &CheckReport, to: &str) {
    assert_eq!(report.commits.len(), 1);
    let commit = &report.commits[0];
    assert_eq!(commit.verdict, Verdict::Accepted, "{:#?}", commit.objects);
    for (kind, name) in [
        (Kind::ControlPlane, "prod"),
        (Kind::ControlPlane, "staging"),
        (Kind::Nova, "nova"),
        (Kind::Keystone, "keystone"),
        (Kind::Placement, "prod-placement"),
    ] {
        let o = commit
            .objects
            .iter()
            .find(|o| o.kind == Some(kind) && o.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{kind} {name} not judged: {:#?}", commit.objects));
        assert_eq!(o.transition, Transition::Upgrade, "{o:#?}");
        assert_eq!(o.verdict, Verdict::Accepted, "{o:#?}");
        assert_eq!(o.to.as_deref(), Some(to), "{o:#?}");
    }
}

#[test]
fn the_gate_accepts_the_plan_commit_and_the_next_hop_on_top() {
    let fleet = fleet();
    let tmp = tempfile::tempdir().unwrap();
    let bare = bare_clone(fleet.path(), tmp.path());
    let base = tip(&bare, "main");

    let first = write_wave(&bare, "2026.2", None).unwrap();
    assert_eq!(tip(&bare, "main"), first);
    assert_eq!(
        git_in(&bare, &["rev-parse", &format!("{first}^")]),
        base.to_string()
    );
    assert_upgrades(&judge(&bare, first), "2026.2");

    let second = write_wave(&bare, "2027.1", None).unwrap();
    assert_upgrades(&judge(&bare, second), "2027.1");

    // The message names the plan and wave where people and a restarted daemon look.
    let body = git_in(&bare, &["log", "-1", "--format=%B", &second.to_string()]);
    assert!(body.starts_with("lockstep plan fleet-upgrade: wave everything (1/1) to 2027.1\n"));
    let trailers = git_in(
        &bare,
        &[
            "log",
            "-1",
            "--format=%(trailers:only,unfold)",
            &second.to_string(),
        ],
    );
    assert_eq!(
        trailers,
        "Lockstep-Plan: fleet-upgrade\nLockstep-Wave: everything"
    );
}

#[test]
fn author_committer_and_only_the_bumped_files() {
    let fleet = fleet();
    let parent = tip(fleet.path(), "main");
    // A work tree works too (only refs and objects are written).
    let new = write_wave(fleet.path(), "2026.2", None).unwrap();
    let who = git_in(
        fleet.path(),
        &["log", "-1", "--format=%an|%ae|%cn|%ce", &new.to_string()],
    );
    assert_eq!(
        who,
        "lockstep planner|lockstep@fleet.example.invalid|lockstep planner|lockstep@fleet.example.invalid"
    );
    let files = git_in(
        fleet.path(),
        &["diff", "--name-only", &parent.to_string(), &new.to_string()],
    );
    let mut expected = vec![KEYSTONE, NOVA, PROD, STAGING];
    expected.sort();
    assert_eq!(files.lines().collect::<Vec<_>>(), expected);
    // Four lines for prod (release, override), two for nova, one each for the rest.
    let stat = git_in(
        fleet.path(),
        &["diff", "--numstat", &parent.to_string(), &new.to_string()],
    );
    let mut stat: Vec<&str> = stat.lines().collect();
    stat.sort();
    assert_eq!(
        stat,
        vec![
            "1\t1\tclusters/staging/controlplane.yaml",
            "1\t1\tstandalone/identity/keystone.yaml",
            "2\t2\tclusters/prod/controlplane.yaml",
            "2\t2\tstandalone/compute/nova.yaml",
        ]
    );
    // Already there: no empty commit.
    let e = write_wave(fleet.path(), "2026.2", None).unwrap_err();
    assert!(matches!(e, WritebackError::NothingToChange), "{e:?}");
    assert_eq!(tip(fleet.path(), "main"), new);
}

#[test]
fn a_moved_branch_is_refused_and_left_alone() {
    let fleet = fleet();
    let stale = tip(fleet.path(), "main");
    fleet.write("platform/extra.yaml", "a: 1\n");
    let moved = Oid::from_str(&fleet.commit("someone else's commit")).unwrap();
    let bumps = vec![nova_bump("2026.2")];
    let e = commit_bumps(fleet.path(), "main", stale, &bumps, "m\n", &author(), None).unwrap_err();
    match &e {
        WritebackError::BranchMoved {
            expected, actual, ..
        } => {
            assert_eq!(*expected, stale);
            assert_eq!(*actual, Some(moved));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("the branch moved"), "{e}");
    assert_eq!(tip(fleet.path(), "main"), moved);
    // A branch that does not exist has moved too.
    let e = commit_bumps(fleet.path(), "nope", stale, &bumps, "m\n", &author(), None).unwrap_err();
    assert!(
        matches!(e, WritebackError::BranchMoved { actual: None, .. }),
        "{e:?}"
    );
    // A file that is not in the tree.
    let e = commit_bumps(
        fleet.path(),
        "main",
        moved,
        &[bump(Kind::Nova, "compute", "nova", "gone.yaml", "2026.2")],
        "m\n",
        &author(),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, WritebackError::MissingFile { .. }), "{e:?}");
    assert_eq!(tip(fleet.path(), "main"), moved);
}

#[test]
fn a_signed_commit_verifies_with_git() {
    let fleet = fleet();
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("id_ed25519");
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "lockstep", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = std::fs::read_to_string(tmp.path().join("id_ed25519.pub")).unwrap();
    let allowed = tmp.path().join("allowed_signers");
    std::fs::write(
        &allowed,
        format!("{} namespaces=\"git\" {public}", author().email),
    )
    .unwrap();

    let new = write_wave(fleet.path(), "2026.2", Some(&key)).unwrap();
    let raw = git_in(fleet.path(), &["cat-file", "commit", &new.to_string()]);
    assert!(
        raw.contains("\ngpgsig -----BEGIN SSH SIGNATURE-----\n"),
        "{raw}"
    );
    let verify = |allowed: &Path| {
        Command::new("git")
            .args([
                "-c",
                "gpg.format=ssh",
                "-c",
                &format!("gpg.ssh.allowedSignersFile={}", allowed.display()),
                "verify-commit",
                "-v",
                &new.to_string(),
            ])
            .current_dir(fleet.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap()
    };
    let out = verify(&allowed);
    assert!(
        out.status.success(),
        "git verify-commit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("Good \"git\" signature"));
    // Another key is not this one.
    let other = tmp.path().join("other");
    Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .output()
        .unwrap();
    let other_pub = std::fs::read_to_string(tmp.path().join("other.pub")).unwrap();
    let wrong = tmp.path().join("wrong_signers");
    std::fs::write(&wrong, format!("{} {other_pub}", author().email)).unwrap();
    assert!(!verify(&wrong).status.success());
    // The signed commit is still one the gate accepts.
    assert_upgrades(&judge(fleet.path(), new), "2026.2");

    // A key that cannot sign: an error, and nothing moves.
    let before = tip(fleet.path(), "main");
    let e = write_wave(fleet.path(), "2027.1", Some(&tmp.path().join("missing"))).unwrap_err();
    assert!(matches!(e, WritebackError::Sign { .. }), "{e:?}");
    assert_eq!(tip(fleet.path(), "main"), before);
}

#[test]
fn push_to_a_bare_remote_and_refused_when_it_moved() {
    let fleet = fleet();
    let tmp = tempfile::tempdir().unwrap();
    let remote = bare_clone(fleet.path(), tmp.path());
    // The daemon's cache: a bare clone of the remote.
    let cache = tmp.path().join("cache.git");
    git_in(
        tmp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            &remote.to_string_lossy(),
            "cache.git",
        ],
    );

    let first = write_wave(&cache, "2026.2", None).unwrap();
    push_branch(
        &cache,
        &remote.to_string_lossy(),
        "main",
        git2::RemoteCallbacks::new(),
    )
    .unwrap();
    assert_eq!(tip(&remote, "main"), first);

    // Someone pushes to the remote; the cache's next hop is not on top of it.
    let other = tmp.path().join("other");
    git_in(
        tmp.path(),
        &["clone", "-q", &remote.to_string_lossy(), "other"],
    );
    std::fs::write(other.join("platform/extra.yaml"), "a: 1\n").unwrap();
    git_in(&other, &["add", "-A"]);
    git_in(
        &other,
        &[
            "-c",
            "user.name=x",
            "-c",
            "user.email=x@example.invalid",
            "commit",
            "-q",
            "-m",
            "elsewhere",
        ],
    );
    git_in(&other, &["push", "-q", "origin", "main"]);
    let moved = tip(&remote, "main");
    assert_ne!(moved, first);

    write_wave(&cache, "2027.1", None).unwrap();
    // By the configured remote's name this time.
    let e = push_branch(&cache, "origin", "main", git2::RemoteCallbacks::new()).unwrap_err();
    assert!(matches!(e, WritebackError::PushRejected { .. }), "{e:?}");
    assert_eq!(tip(&remote, "main"), moved);
}

/// A person's clone watched with `--repo`, its `main` checked out: the hop
/// reaches the work tree and the index too, so `git status` is clean and
/// the next `git commit -a` cannot set the hop back (the gate would accept
/// that as an abort). A file the hop edits that the person changed stops
/// the write, naming the file; other files they changed are theirs and
/// stay as they are. A linked work tree on `main` is kept fresh the same
/// way.
#[test]
fn a_checked_out_branch_gets_the_hop_in_its_work_tree_or_none_at_all() {
    let fleet = fleet();
    let dir = fleet.path();
    let readme = "README.md";
    fleet.write(readme, "notes\n");
    fleet.commit("readme");
    let linked = tempfile::tempdir().unwrap();
    let linked_path = linked.path().join("second");
    git_in(
        dir,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            &linked_path.to_string_lossy(),
        ],
    );

    // The person's own edit, in a file the hop edits.
    let nova_before = std::fs::read_to_string(dir.join(NOVA)).unwrap();
    std::fs::write(dir.join(NOVA), format!("{nova_before}# mine\n")).unwrap();
    let before = tip(dir, "main");
    let e = write_wave(dir, "2026.2", None).unwrap_err();
    assert!(
        matches!(&e, WritebackError::DirtyCheckout { file, .. } if file == NOVA),
        "{e:?}"
    );
    assert!(e.to_string().contains("commit or stash them"), "{e}");
    assert_eq!(tip(dir, "main"), before, "nothing written");

    // Their edit elsewhere is kept; the hop's files are updated in place.
    std::fs::write(dir.join(NOVA), &nova_before).unwrap();
    std::fs::write(dir.join(readme), "notes, mine\n").unwrap();
    let new = write_wave(dir, "2026.2", None).unwrap();
    assert_eq!(tip(dir, "main"), new);
    let status = git_in(dir, &["status", "--porcelain"]);
    // (`git_in` trims the leading blank of " M".)
    assert_eq!(status, "M README.md", "only the person's edit is left");
    // `git commit -a` now commits the person's edit, not a set-back.
    git_in(
        dir,
        &[
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@example.invalid",
            "commit",
            "-qam",
            "readme",
        ],
    );
    let files = git_in(dir, &["diff", "--name-only", &format!("{new}"), "HEAD"]);
    assert_eq!(files, readme);

    // A linked work tree with `main` checked out is kept fresh too.
    git_in(dir, &["checkout", "-q", "--detach"]);
    git_in(&linked_path, &["checkout", "-q", "main"]);
    let new = write_wave(dir, "2027.1", None).unwrap();
    assert_eq!(tip(dir, "main"), new);
    assert_eq!(git_in(&linked_path, &["status", "--porcelain"]), "");
    assert!(
        std::fs::read_to_string(linked_path.join(NOVA))
            .unwrap()
            .contains("2027.1")
    );

    // Written through the linked work tree, the main one on `main` follows.
    git_in(&linked_path, &["checkout", "-q", "--detach"]);
    git_in(dir, &["checkout", "-q", "main"]);
    let new = write_wave(&linked_path, "2027.2", None).unwrap();
    assert_eq!(tip(dir, "main"), new);
    assert_eq!(git_in(dir, &["status", "--porcelain"]), "");
    assert!(
        std::fs::read_to_string(dir.join(NOVA))
            .unwrap()
            .contains("2027.2")
    );
}

/// A file the hop edits that the work tree's index marks so that git does
/// not look at it (`--skip-worktree`, as sparse checkouts do, or
/// `--assume-unchanged`) reads clean whatever it holds: the person's
/// changes there would be overwritten unseen. The write stops, naming the
/// file and the mark, and goes on once the mark is cleared.
#[test]
fn a_file_git_is_told_not_to_look_at_stops_the_write_by_name() {
    let fleet = fleet();
    let dir = fleet.path();
    let nova_before = std::fs::read_to_string(dir.join(NOVA)).unwrap();
    let mine = format!("{nova_before}# mine\n");
    for flag in ["skip-worktree", "assume-unchanged"] {
        std::fs::write(dir.join(NOVA), &mine).unwrap();
        git_in(dir, &["update-index", &format!("--{flag}"), NOVA]);
        assert_eq!(
            git_in(dir, &["status", "--porcelain"]),
            "",
            "{flag} hides it"
        );
        let before = tip(dir, "main");
        let e = write_wave(dir, "2026.2", None).unwrap_err();
        assert!(
            matches!(&e, WritebackError::HiddenCheckout { file, flag: f, .. } if file == NOVA && *f == flag),
            "{e:?}"
        );
        assert!(e.to_string().contains(&format!("--no-{flag}")), "{e}");
        assert_eq!(tip(dir, "main"), before, "nothing written");
        assert_eq!(
            std::fs::read_to_string(dir.join(NOVA)).unwrap(),
            mine,
            "kept"
        );
        git_in(dir, &["update-index", &format!("--no-{flag}"), NOVA]);
    }
    // The mark cleared, the change shows and stops the write as any would.
    let e = write_wave(dir, "2026.2", None).unwrap_err();
    assert!(matches!(&e, WritebackError::DirtyCheckout { .. }), "{e:?}");
    std::fs::write(dir.join(NOVA), &nova_before).unwrap();
    // A split index is one lockstep's Git library cannot read: the write
    // fails and nothing is written.
    git_in(dir, &["update-index", "--split-index"]);
    let before = tip(dir, "main");
    let e = write_wave(dir, "2026.2", None).unwrap_err();
    assert!(e.to_string().contains("reading the index of"), "{e}");
    assert_eq!(tip(dir, "main"), before, "nothing written");
    git_in(dir, &["update-index", "--no-split-index"]);
    let new = write_wave(dir, "2026.2", None).unwrap();
    assert_eq!(tip(dir, "main"), new);
    assert_eq!(git_in(dir, &["status", "--porcelain"]), "");
}
