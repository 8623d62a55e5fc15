//! Signed commits (`docs/gate.md`, "Signed commits"), end to end: keys made
//! here with `ssh-keygen` and `gpg` (a throwaway GNUPGHOME), commits signed
//! by the real `git commit -S`, judged by the real binary with
//! `check --allowed-signers` / `--trusted-keys`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{FleetRepo, lockstep, nova};
use serde_json::Value;

const NOVA: &str = "standalone/compute/nova.yaml";
const EMAIL: &str = "fleet@example.invalid";
/// A committer time the tests pin (`GIT_COMMITTER_DATE`).
const WHEN: &str = "2024-06-01T12:00:00Z";

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn need(tool: &str) {
    let found = Command::new(tool).arg("--version").output().is_ok();
    assert!(
        found,
        "{tool} is missing: run `bash tests/peers/install.sh` (it installs gnupg and openssh-client)"
    );
}

/// An ed25519 key pair in `dir`; returns the private key's path and the
/// public key line.
fn ssh_key(dir: &Path, name: &str) -> (PathBuf, String) {
    need("ssh-keygen");
    let key = dir.join(name);
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key));
    let public = std::fs::read_to_string(key.with_extension("pub")).expect("public key");
    (key, public.trim().to_owned())
}

/// `SHA256:...` of a public key, as `ssh-keygen -l` prints it.
fn ssh_fingerprint(key: &Path) -> String {
    let out = run(Command::new("ssh-keygen")
        .arg("-lf")
        .arg(key.with_extension("pub")));
    out.split_whitespace()
        .nth(1)
        .expect("fingerprint")
        .to_owned()
}

/// A repository with one unsigned commit (the base, taken as given) and
/// a directory beside it for keys and trust files.
struct Fixture {
    repo: FleetRepo,
    keys: tempfile::TempDir,
    gnupg: Option<PathBuf>,
}

impl Fixture {
    fn new() -> Self {
        let repo = FleetRepo::new();
        repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
        repo.commit("base");
        Self {
            repo,
            keys: tempfile::tempdir().expect("tempdir"),
            gnupg: None,
        }
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.keys.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.to_string_lossy().into_owned()
    }

    /// `git` in the repository, at the pinned time, with the test's GNUPGHOME.
    fn git(&self, args: &[&str], when: &str) -> String {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(self.repo.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_COMMITTER_DATE", when)
            .env("GIT_AUTHOR_DATE", when)
            // The committer is who the repository's config says (CI sets
            // an identity in the environment, which would win over it).
            .env_remove("GIT_COMMITTER_NAME")
            .env_remove("GIT_COMMITTER_EMAIL")
            .env_remove("GIT_AUTHOR_NAME")
            .env_remove("GIT_AUTHOR_EMAIL");
        if let Some(g) = &self.gnupg {
            cmd.env("GNUPGHOME", g);
        }
        run(&mut cmd)
    }

    /// Commits a change, signed by the SSH key `key` (or unsigned).
    fn commit_ssh(&self, release: &str, key: Option<&Path>, when: &str) -> String {
        self.repo.write(NOVA, nova("nova", release, release));
        self.commit_all(release, key, when)
    }

    /// Commits the work tree as it is, signed by the SSH key `key` (or
    /// unsigned); returns the commit's id.
    fn commit_all(&self, message: &str, key: Option<&Path>, when: &str) -> String {
        self.git(&["add", "-A"], when);
        match key {
            Some(k) => {
                let k = format!("user.signingkey={}", k.display());
                self.git(
                    &[
                        "-c",
                        "gpg.format=ssh",
                        "-c",
                        &k,
                        "commit",
                        "-q",
                        "--allow-empty",
                        "-S",
                        "-m",
                        message,
                    ],
                    when,
                )
            }
            None => self.git(&["commit", "-q", "--allow-empty", "-m", message], when),
        };
        self.git(&["rev-parse", "HEAD"], when)
    }

    fn check(&self, extra: &[&str]) -> (i32, Value) {
        let path = self.repo.path().to_string_lossy().into_owned();
        let mut args = vec!["check", "--repo", &path, "-o", "json"];
        args.extend_from_slice(extra);
        let out = lockstep(&args);
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), json)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(g) = &self.gnupg {
            let _ = Command::new("gpgconf")
                .args(["--kill", "gpg-agent"])
                .env("GNUPGHOME", g)
                .output();
        }
    }
}

/// The refusal of the last judged commit: (reason, message).
fn refusal(json: &Value) -> (String, String) {
    let c = json["commits"]
        .as_array()
        .and_then(|c| c.last())
        .expect("a judged commit");
    assert_eq!(c["verdict"], "refused", "{c:#}");
    let o = &c["objects"][0];
    (
        o["reason"].as_str().unwrap_or_default().to_owned(),
        o["message"].as_str().unwrap_or_default().to_owned(),
    )
}

fn accepted(code: i32, json: &Value) {
    assert_eq!(code, 0, "{json:#}");
    for c in json["commits"].as_array().expect("commits") {
        assert_eq!(c["verdict"], "accepted", "{c:#}");
    }
}

#[test]
fn ssh_signed_by_a_trusted_key_is_accepted_and_others_are_refused() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let (mallory, _) = ssh_key(f.keys.path(), "mallory");
    let signers = f.file(
        "allowed_signers",
        &format!("# the fleet's committers\n{EMAIL} namespaces=\"git\" {alice_pub}\n"),
    );
    let flag = ["--allowed-signers", signers.as_str()];

    // Good: accepted, the hop judged as usual.
    f.commit_ssh("2026.2", Some(&alice), WHEN);
    let (code, json) = f.check(&flag);
    accepted(code, &json);
    assert_eq!(json["commits"][0]["objects"][0]["transition"], "upgrade");

    // The same commit without the policy is judged on content alone.
    let (code, _) = f.check(&[]);
    assert_eq!(code, 0);

    // Unknown key: the refusal names it, and nothing of the commit is judged.
    f.commit_ssh("2027.1", Some(&mallory), WHEN);
    let (code, json) = f.check(&flag);
    assert_eq!(code, 1);
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains(&ssh_fingerprint(&mallory)), "{message}");
    assert!(message.contains("not trusted"), "{message}");
    assert_eq!(
        json["commits"][0]["objects"].as_array().map(Vec::len),
        Some(1)
    );

    // Unsigned.
    f.commit_ssh("2027.1", None, WHEN);
    let (code, json) = f.check(&flag);
    assert_eq!(code, 1);
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains("not signed"), "{message}");
    assert!(message.contains(EMAIL), "{message}");

    // A good commit after the refused ones is judged against the last
    // accepted state (2026.2): 2027.1 is one hop.
    let base = f.git(&["rev-parse", "HEAD~3"], WHEN);
    f.commit_ssh("2027.1", Some(&alice), WHEN);
    // (Landing commit by commit: the range moves Nova two hops in all.)
    let (code, json) = f.check(&[
        "--base",
        &base,
        "--allowed-signers",
        &signers,
        "--lands-commit-by-commit",
    ]);
    assert_eq!(code, 1, "two refused commits in the range");
    let verdicts: Vec<&str> = json["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .map(|c| c["verdict"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(verdicts, ["accepted", "refused", "refused", "accepted"]);
    assert_eq!(json["commits"][3]["objects"][0]["from"], "2026.2");
}

/// The look back for floors, under a trust policy, lets untrusted history
/// raise a floor, never lower it: an unsigned `recreate-below` (refused, so
/// never applied) does not let a later signed re-add below the floor
/// through. Before, the look back judged content only, took the unsigned
/// re-add as accepted and its annotation as the new floor, and called that
/// untrusted commit the "last accepted release".
#[test]
fn an_untrusted_commit_cannot_lower_a_floor_for_a_later_signed_one() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let signers = f.file(
        "allowed_signers",
        &format!("{EMAIL} namespaces=\"git\" {alice_pub}\n"),
    );
    let sign = |msg: &str, key: Option<&Path>| f.commit_all(msg, key, WHEN);
    f.commit_ssh("2026.2", Some(&alice), WHEN);
    std::fs::remove_file(f.repo.path().join(NOVA)).expect("rm");
    sign("unsigned: rm", None);
    let lowered = nova("nova", "2026.1", "2026.1").replacen(
        "  namespace: compute\n",
        "  namespace: compute\n  annotations:\n    lockstep.c5c3.io/recreate-below: \"2026.2\"\n",
        1,
    );
    assert!(lowered.contains("recreate-below"), "{lowered}");
    f.repo.write(NOVA, lowered);
    sign("unsigned: re-add below, recreated", None);
    std::fs::remove_file(f.repo.path().join(NOVA)).expect("rm");
    sign("unsigned: rm again", None);
    f.repo.write("README.md", "fleet\n");
    let base = sign("signed: unrelated", Some(&alice));
    f.repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let head = sign("signed: re-add at 2026.1", Some(&alice));
    let (code, json) = f.check(&[
        "--base",
        &base,
        "--head",
        &head,
        "--allowed-signers",
        &signers,
    ]);
    assert_eq!(code, 1, "{json:#}");
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "DowngradeNotSupported", "{message}");
    assert!(message.contains("2026.2"), "{message}");
    // Without the policy the same range is judged on content alone, and
    // the recreated floor holds (as it always did).
    let (code, json) = f.check(&["--base", &base, "--head", &head]);
    assert_eq!(code, 0, "{json:#}");
}

/// The key types git users sign with besides ed25519.
#[test]
fn ssh_rsa_and_ecdsa_signatures_verify() {
    let f = Fixture::new();
    let mut lines = String::new();
    let mut keys = Vec::new();
    for (name, args) in [
        ("rsa", ["-t", "rsa", "-b", "2048"]),
        ("ecdsa", ["-t", "ecdsa", "-b", "256"]),
        ("ecdsa384", ["-t", "ecdsa", "-b", "384"]),
    ] {
        let key = f.keys.path().join(name);
        run(Command::new("ssh-keygen")
            .args(["-q", "-N", "", "-C", name])
            .args(args)
            .arg("-f")
            .arg(&key));
        let public = std::fs::read_to_string(key.with_extension("pub")).expect("pub");
        lines.push_str(&format!("{EMAIL} {}\n", public.trim()));
        keys.push(key);
    }
    let signers = f.file("allowed_signers", &lines);
    for key in &keys {
        // The first commit upgrades, the others change nothing: each is
        // judged on its signature.
        f.commit_ssh("2026.2", Some(key), WHEN);
        let (code, json) = f.check(&["--allowed-signers", &signers]);
        accepted(code, &json);
    }
}

#[test]
fn ssh_key_trusted_only_within_its_validity_at_the_commit_time() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let signers = f.file(
        "allowed_signers",
        &format!("{EMAIL} valid-after=\"20200101Z\",valid-before=\"20230101Z\" {alice_pub}\n"),
    );
    // Signed today, with a committer time after valid-before: expired.
    f.commit_ssh("2026.2", Some(&alice), WHEN);
    let (code, json) = f.check(&["--allowed-signers", &signers]);
    assert_eq!(code, 1);
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains("no longer valid"), "{message}");
    assert!(message.contains(&ssh_fingerprint(&alice)), "{message}");
    assert!(message.contains(EMAIL), "{message}");

    // Committed while the key was valid: accepted.
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_ssh("2026.2", Some(&alice), "2022-06-01T12:00:00Z");
    let (code, json) = f.check(&["--allowed-signers", &signers]);
    accepted(code, &json);

    // Before valid-after: not yet valid.
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_ssh("2026.2", Some(&alice), "2019-06-01T12:00:00Z");
    let (code, json) = f.check(&["--allowed-signers", &signers]);
    assert_eq!(code, 1);
    assert!(refusal(&json).1.contains("not yet valid"));
}

#[test]
fn ssh_principals_must_match_the_committer() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let signers = f.file(
        "allowed_signers",
        &format!("alice@example.com,*@ops.example.com {alice_pub}\n"),
    );
    // The committer is fleet@example.invalid: the key is not trusted for it.
    f.commit_ssh("2026.2", Some(&alice), WHEN);
    let (code, json) = f.check(&["--allowed-signers", &signers]);
    assert_eq!(code, 1);
    let (_, message) = refusal(&json);
    assert!(
        message.contains("alice@example.com,*@ops.example.com"),
        "{message}"
    );
    assert!(message.contains(EMAIL), "{message}");

    // A glob that matches the committer.
    f.repo
        .git(&["config", "user.email", "robot@ops.example.com"]);
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_ssh("2026.2", Some(&alice), WHEN);
    let (code, json) = f.check(&["--allowed-signers", &signers]);
    accepted(code, &json);
}

#[test]
fn a_commit_changed_after_signing_is_refused() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let signers = f.file("allowed_signers", &format!("{EMAIL} {alice_pub}\n"));
    let good = f.commit_ssh("2026.2", Some(&alice), WHEN);

    // The same signature on the commit with another message.
    let repo = git2::Repository::open(f.repo.path()).expect("open");
    let oid = git2::Oid::from_str(&good).expect("oid");
    let (sig, data) = repo.extract_signature(&oid, None).expect("signed");
    let data = std::str::from_utf8(&data).expect("utf-8").to_owned();
    let forged = data.replacen("\n\n2026.2", "\n\nharmless docs change", 1);
    assert_ne!(forged, data);
    let sig = std::str::from_utf8(&sig).expect("utf-8");
    let tampered = repo
        .commit_signed(&forged, sig, Some("gpgsig"))
        .expect("write the forged commit");
    repo.reference("refs/heads/main", tampered, true, "tamper")
        .expect("move main");

    let (code, json) = f.check(&["--allowed-signers", &signers]);
    assert_eq!(code, 1);
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains("changed after it was signed"), "{message}");
    assert!(message.contains(&ssh_fingerprint(&alice)), "{message}");
    assert_eq!(json["head"], tampered.to_string());
}

/// A signature is read from the commit's header only, as `git
/// verify-commit` reads it: a `gpgsig` block moved from the header to the end
/// of the message leaves an unsigned commit (libgit2's own extraction reads
/// on into the message and finds the original signed bytes there).
#[test]
fn a_signature_pasted_into_the_message_signs_nothing() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let signers = f.file("allowed_signers", &format!("{EMAIL} {alice_pub}\n"));
    let good = f.commit_ssh("2026.2", Some(&alice), WHEN);

    let repo = git2::Repository::open(f.repo.path()).expect("open");
    let odb = repo.odb().expect("odb");
    let raw = odb
        .read(git2::Oid::from_str(&good).expect("oid"))
        .expect("read")
        .data()
        .to_vec();
    let text = String::from_utf8(raw).expect("utf-8");
    let (header, message) = text.split_once("\n\n").expect("a message");
    let mut kept = Vec::new();
    let mut block = Vec::new();
    for line in header.lines() {
        if line.starts_with("gpgsig ") || (!block.is_empty() && line.starts_with(' ')) {
            block.push(line);
        } else {
            kept.push(line);
        }
    }
    assert!(!block.is_empty(), "the commit is signed");
    let moved = format!("{}\n\n{message}{}\n", kept.join("\n"), block.join("\n"));
    let moved = odb
        .write(git2::ObjectType::Commit, moved.as_bytes())
        .expect("write the commit");
    repo.reference("refs/heads/main", moved, true, "move the signature")
        .expect("move main");
    let verify = Command::new("git")
        .args(["verify-commit", &moved.to_string()])
        .current_dir(f.repo.path())
        .output()
        .expect("git verify-commit");
    assert!(!verify.status.success(), "git sees no signature either");

    let (code, json) = f.check(&["--allowed-signers", &signers]);
    assert_eq!(code, 1, "{json:#}");
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains("not signed"), "{message}");
    assert_eq!(json["head"], moved.to_string());
}

/// First-parent judging makes the merge the unit: its own signature is what
/// counts, the side branch's commits are not judged one by one.
#[test]
fn a_trusted_merge_vouches_for_its_side_branch() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let (mallory, _) = ssh_key(f.keys.path(), "mallory");
    let signers = f.file("allowed_signers", &format!("{EMAIL} {alice_pub}\n"));
    let base = f.git(&["rev-parse", "HEAD"], WHEN);
    f.git(&["checkout", "-q", "-b", "side"], WHEN);
    f.commit_ssh("2026.2", None, WHEN);
    f.commit_ssh("2026.2", Some(&mallory), WHEN);
    f.git(&["checkout", "-q", "main"], WHEN);

    // Merged and signed by a trusted key: accepted.
    let k = format!("user.signingkey={}", alice.display());
    f.git(
        &[
            "-c",
            "gpg.format=ssh",
            "-c",
            &k,
            "merge",
            "-q",
            "--no-ff",
            "-S",
            "-m",
            "merge side",
            "side",
        ],
        WHEN,
    );
    let (code, json) = f.check(&["--base", &base, "--allowed-signers", &signers]);
    accepted(code, &json);
    assert_eq!(
        json["commits"].as_array().map(Vec::len),
        Some(1),
        "{json:#}"
    );
    assert_eq!(json["commits"][0]["objects"][0]["to"], "2026.2");

    // The same merge unsigned: refused, whatever the side branch carries.
    f.git(&["reset", "-q", "--hard", &base], WHEN);
    f.git(
        &["merge", "-q", "--no-ff", "-m", "merge side", "side"],
        WHEN,
    );
    let (code, json) = f.check(&["--base", &base, "--allowed-signers", &signers]);
    assert_eq!(code, 1);
    assert!(refusal(&json).1.contains("not signed"));
}

#[test]
fn check_cli_messages_and_exit_codes() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let (mallory, _) = ssh_key(f.keys.path(), "mallory");
    let path = f.repo.path().to_string_lossy().into_owned();

    // A bad line: exit 2, naming the file and line.
    let bad = f.file(
        "bad_signers",
        &format!("# ok\n{EMAIL} {alice_pub}\n{EMAIL} cert-authority {alice_pub}\n"),
    );
    f.commit_ssh("2026.2", Some(&alice), WHEN);
    let out = lockstep(&["check", "--repo", &path, "--allowed-signers", &bad]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{bad}:3: ")), "{err}");
    assert!(err.contains("cert-authority"), "{err}");

    // A missing file: exit 2.
    let out = lockstep(&[
        "check",
        "--repo",
        &path,
        "--allowed-signers",
        "/nonexistent/signers",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/signers"));

    // Text output: the reason and the signer, on escaped lines; exit 1.
    let good = f.file("allowed_signers", &format!("{EMAIL} {alice_pub}\n"));
    f.repo
        .git(&["config", "user.email", "evil\u{1b}[2J@example.invalid"]);
    f.commit_ssh("2027.1", Some(&mallory), WHEN);
    let out = lockstep(&["check", "--repo", &path, "--allowed-signers", &good]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("✗ commit: UntrustedCommit"), "{text}");
    assert!(text.contains(&ssh_fingerprint(&mallory)), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(text.contains("evil\\x1b[2J@example.invalid"), "{text}");

    // A keyring directory without keys: exit 2.
    let dir = f.keys.path().join("empty");
    std::fs::create_dir(&dir).expect("mkdir");
    let out = lockstep(&[
        "check",
        "--repo",
        &path,
        "--trusted-keys",
        &dir.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2), "an empty keyring is an error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trusted key"));
}

// ------------------------------------------------------------ OpenPGP

impl Fixture {
    /// A fixture with a GnuPG home of its own.
    fn with_gnupg() -> Fixture {
        let mut f = Fixture::new();
        let home = f.keys.path().join("gnupg");
        std::fs::create_dir(&home).expect("mkdir");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        }
        f.gnupg = Some(home);
        f
    }

    /// `fpr`'s armored public key, as trusted in `dir`.
    fn trust_gpg(&self, dir: &std::path::Path, name: &str, fpr: &str) {
        let armored = self.gpg(&["--armor", "--export", fpr]);
        std::fs::write(dir.join(format!("{name}.asc")), armored).expect("write key");
    }

    fn gpg(&self, args: &[&str]) -> String {
        let g = self.gnupg.as_ref().expect("GNUPGHOME");
        run(Command::new("gpg")
            .args([
                "--batch",
                "--quiet",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(args)
            .env("GNUPGHOME", g))
    }

    /// A new OpenPGP key for `uid`; returns its fingerprint.
    fn gpg_key(&self, uid: &str, expire: &str) -> String {
        self.gpg(&["--quick-gen-key", uid, "ed25519", "sign", expire]);
        let listing = self.gpg(&["--with-colons", "--list-keys", uid]);
        listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .and_then(|l| l.split(':').find(|f| !f.is_empty()))
            .expect("fingerprint")
            .to_owned()
    }

    fn commit_gpg(&self, release: &str, fpr: &str, when: &str) {
        self.repo.write(NOVA, nova("nova", release, release));
        self.git(&["add", "-A"], when);
        let k = format!("user.signingkey={fpr}");
        self.git(
            &[
                "-c",
                "gpg.format=openpgp",
                "-c",
                &k,
                "commit",
                "-q",
                "--allow-empty",
                "-S",
                "-m",
                release,
            ],
            when,
        );
    }
}

/// What a key file says of a key is read from its self-signatures as gpg
/// reads it: a revoked key, a revoked user ID and an expiry that a later
/// user-ID revocation (which says no expiry of its own) must not lift.
/// Each was accepted before.
#[test]
fn openpgp_revocations_and_expiry_are_read_from_self_signatures() {
    need("gpg");
    let f = Fixture::with_gnupg();
    let dir = f.keys.path().join("trusted");
    std::fs::create_dir(&dir).expect("mkdir");
    // Commit times are taken after the key they are signed with was made
    // (a commit dated before its key's creation is refused for that).
    let now = jiff::Timestamp::now;
    let check = |f: &Fixture| f.check(&["--trusted-keys", &dir.to_string_lossy()]);

    // A key whose file holds its revocation (gpg --import of the
    // revocation certificate gpg wrote when it made the key).
    let revoked = f.gpg_key(&format!("Revoked <{EMAIL}>"), "never");
    f.commit_gpg("2026.2", &revoked, &now().to_string());
    let rev = f
        .gnupg
        .as_ref()
        .unwrap()
        .join(format!("openpgp-revocs.d/{revoked}.rev"));
    let cert = std::fs::read_to_string(&rev).expect("revocation certificate");
    let cert = cert.replacen(":-----BEGIN", "-----BEGIN", 1);
    let cert_file = f.keys.path().join("revoke.asc");
    std::fs::write(&cert_file, cert).expect("write");
    // An older export without the revocation, in a file read first: the
    // revocation in the other file stands all the same.
    f.trust_gpg(&dir, "00-older-copy", &revoked);
    f.gpg(&["--import", &cert_file.to_string_lossy()]);
    f.trust_gpg(&dir, "revoked", &revoked);
    let (code, json) = check(&f);
    assert_eq!(code, 1, "{json:#}");
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains("holds its revocation"), "{message}");
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    // The revoked key kept in the directory beside a valid one (read after
    // it): a commit the valid key signs is accepted. A revoked key refuses
    // only what it signed.
    let valid = f.gpg_key(&format!("Valid <{EMAIL}>"), "never");
    // Certified by someone else's key too, as a web of trust has it: the
    // export carries that certification, which is not the key's own.
    let certifier = f.gpg_key("Certifier <certifier@example.invalid>", "never");
    f.gpg(&["-u", &certifier, "--quick-sign-key", &valid]);
    f.trust_gpg(&dir, "valid", &valid);
    f.commit_gpg("2026.2", &valid, &now().to_string());
    let (code, json) = check(&f);
    accepted(code, &json);
    std::fs::remove_file(dir.join("revoked.asc")).expect("rm");
    std::fs::remove_file(dir.join("00-older-copy.asc")).expect("rm");
    std::fs::remove_file(dir.join("valid.asc")).expect("rm");
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);

    // The committer's user ID revoked, another one kept: it names no one.
    let uid = format!("Moved On <{EMAIL}>");
    let moved = f.gpg_key(&uid, "never");
    f.gpg(&[
        "--quick-add-uid",
        &moved,
        "Moved On <elsewhere@example.invalid>",
    ]);
    f.gpg(&["--quick-revuid", &moved, &uid]);
    f.trust_gpg(&dir, "moved", &moved);
    f.commit_gpg("2026.2", &moved, &now().to_string());
    let (code, json) = check(&f);
    assert_eq!(code, 1, "{json:#}");
    let (_, message) = refusal(&json);
    assert!(message.contains("not for the committer"), "{message}");
    std::fs::remove_file(dir.join("moved.asc")).expect("rm");
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);

    // A key that expires in a day, whose newest self-signature is the
    // revocation of another user ID (which says no expiry): still expired
    // at a commit time three days on, fine now.
    let expiring = f.gpg_key(&format!("Expiring <{EMAIL}>"), "1d");
    f.gpg(&[
        "--quick-add-uid",
        &expiring,
        "Expiring <old@example.invalid>",
    ]);
    f.gpg(&[
        "--quick-revuid",
        &expiring,
        "Expiring <old@example.invalid>",
    ]);
    f.trust_gpg(&dir, "expiring", &expiring);
    let made = now();
    f.commit_gpg("2026.2", &expiring, &made.to_string());
    let (code, json) = check(&f);
    accepted(code, &json);
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    let later = made
        .checked_add(jiff::SignedDuration::from_hours(72))
        .expect("time");
    f.commit_gpg("2026.2", &expiring, &later.to_string());
    let (code, json) = check(&f);
    assert_eq!(code, 1, "{json:#}");
    let (_, message) = refusal(&json);
    assert!(message.contains("expired"), "{message}");
}

#[test]
fn openpgp_signed_commits() {
    need("gpg");
    let f = Fixture::with_gnupg();
    let trusted = f.gpg_key(&format!("Fleet Tester <{EMAIL}>"), "never");
    let stranger = f.gpg_key(&format!("Stranger <{EMAIL}>"), "never");
    let short_lived = f.gpg_key(&format!("Short Lived <{EMAIL}>"), "1d");
    // A certify-only primary key with a signing subkey, as many people keep
    // them: the subkey signs, the primary's user ID names the committer.
    f.gpg(&[
        "--quick-gen-key",
        &format!("Sub Signer <{EMAIL}>"),
        "ed25519",
        "cert",
        "never",
    ]);
    let listing = f.gpg(&["--with-colons", "--list-keys", "Sub Signer"]);
    let fprs: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.strip_prefix("fpr:"))
        .filter_map(|l| l.split(':').find(|x| !x.is_empty()))
        .collect();
    let sub_primary = fprs[0].to_owned();
    f.gpg(&["--quick-add-key", &sub_primary, "ed25519", "sign", "never"]);
    let listing = f.gpg(&["--with-colons", "--list-keys", "Sub Signer"]);
    let subkey = listing
        .lines()
        .skip_while(|l| !l.starts_with("sub:"))
        .find_map(|l| l.strip_prefix("fpr:"))
        .and_then(|l| l.split(':').find(|x| !x.is_empty()))
        .expect("subkey fingerprint")
        .to_owned();
    // A primary key that expires in a day, with a signing subkey that never
    // does: the subkey is no longer trusted once its primary key expired.
    f.gpg(&[
        "--quick-gen-key",
        &format!("Short Primary <{EMAIL}>"),
        "ed25519",
        "cert",
        "1d",
    ]);
    let listing = f.gpg(&["--with-colons", "--list-keys", "Short Primary"]);
    let short_primary = listing
        .lines()
        .find_map(|l| l.strip_prefix("fpr:"))
        .and_then(|l| l.split(':').find(|x| !x.is_empty()))
        .expect("primary fingerprint")
        .to_owned();
    f.gpg(&[
        "--quick-add-key",
        &short_primary,
        "ed25519",
        "sign",
        "never",
    ]);
    let listing = f.gpg(&["--with-colons", "--list-keys", "Short Primary"]);
    let short_primary_sub = listing
        .lines()
        .skip_while(|l| !l.starts_with("sub:"))
        .find_map(|l| l.strip_prefix("fpr:"))
        .and_then(|l| l.split(':').find(|x| !x.is_empty()))
        .expect("subkey fingerprint")
        .to_owned();
    let dir = f.keys.path().join("trusted");
    std::fs::create_dir(&dir).expect("mkdir");
    for (name, fpr) in [
        ("fleet", &trusted),
        ("short", &short_lived),
        ("sub", &sub_primary),
        ("short-primary", &short_primary),
    ] {
        f.trust_gpg(&dir, name, fpr);
    }
    let dir = dir.to_string_lossy().into_owned();
    let now = jiff::Timestamp::now();

    // Good.
    f.commit_gpg("2026.2", &trusted, &now.to_string());
    let (code, json) = f.check(&["--trusted-keys", &dir]);
    accepted(code, &json);

    // Signed by a trusted key's signing subkey: accepted.
    f.commit_gpg("2027.1", &format!("{subkey}!"), &now.to_string());
    let (code, json) = f.check(&["--trusted-keys", &dir]);
    accepted(code, &json);
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);

    // A key not in the directory: refused, naming it.
    f.commit_gpg("2027.1", &stranger, &now.to_string());
    let (code, json) = f.check(&["--trusted-keys", &dir]);
    assert_eq!(code, 1);
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains(&stranger), "{message}");

    // A key that expired before the commit's time.
    let later = now
        .checked_add(jiff::SignedDuration::from_hours(72))
        .expect("time");
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_gpg("2027.1", &short_lived, &later.to_string());
    let (code, json) = f.check(&["--trusted-keys", &dir]);
    assert_eq!(code, 1);
    let (_, message) = refusal(&json);
    assert!(message.contains("expired"), "{message}");
    assert!(message.contains(&short_lived), "{message}");
    // Its subkey signs now, within the primary's day: accepted; at a commit
    // time after the primary expired: refused, though the subkey never
    // expires.
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_gpg("2027.1", &format!("{short_primary_sub}!"), &now.to_string());
    let (code, json) = f.check(&["--trusted-keys", &dir]);
    accepted(code, &json);
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_gpg(
        "2027.1",
        &format!("{short_primary_sub}!"),
        &later.to_string(),
    );
    let (code, json) = f.check(&["--trusted-keys", &dir]);
    assert_eq!(code, 1);
    let (reason, message) = refusal(&json);
    assert_eq!(reason, "UntrustedCommit");
    assert!(message.contains("expired"), "{message}");
    assert!(message.contains(&short_primary), "{message}");

    // Tampered: the same signature over another message.
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_gpg("2027.1", &trusted, &now.to_string());
    let repo = git2::Repository::open(f.repo.path()).expect("open");
    let head = repo.head().expect("head").target().expect("oid");
    let (sig, data) = repo.extract_signature(&head, None).expect("signed");
    let forged =
        std::str::from_utf8(&data)
            .expect("utf-8")
            .replacen("\n\n2027.1", "\n\nnothing to see", 1);
    let tampered = repo
        .commit_signed(
            &forged,
            std::str::from_utf8(&sig).expect("utf-8"),
            Some("gpgsig"),
        )
        .expect("forge");
    repo.reference("refs/heads/main", tampered, true, "tamper")
        .expect("move main");
    let (code, json) = f.check(&["--trusted-keys", &dir]);
    assert_eq!(code, 1);
    assert!(refusal(&json).1.contains("changed after it was signed"));

    // OpenPGP-signed with only SSH keys trusted: refused, saying which flag.
    let (_, alice_pub) = ssh_key(f.keys.path(), "alice");
    let signers = f.file("allowed_signers", &format!("{EMAIL} {alice_pub}\n"));
    f.git(&["reset", "-q", "--hard", "HEAD~1"], WHEN);
    f.commit_gpg("2027.1", &trusted, &now.to_string());
    let (code, json) = f.check(&["--allowed-signers", &signers]);
    assert_eq!(code, 1);
    assert!(refusal(&json).1.contains("--trusted-keys"));
    // Both policies at once: accepted.
    let (code, json) = f.check(&["--allowed-signers", &signers, "--trusted-keys", &dir]);
    accepted(code, &json);
}

// ------------------------------------------------------------- the daemon

/// `lockstep run --until-idle` in sim mode on the fixture's repository,
/// judging after its base, with none of the caller's `LOCKSTEP_*` settings.
fn run_until_idle(f: &Fixture, base: &str, extra: &[&str]) -> (Option<i32>, String) {
    let mut c = Command::new(common::lockstep_bin());
    c.args(["run", "--until-idle", "--repo"])
        .arg(f.repo.path())
        .args(["--since", base])
        .args(extra);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LOCKSTEP_") || k == "KUBECONFIG" {
            c.env_remove(k);
        }
    }
    c.env("LOCKSTEP_LOG", "warn")
        .env("LOCKSTEP_LISTEN", "127.0.0.1:0")
        .env("LOCKSTEP_METRICS_LISTEN", "127.0.0.1:0");
    let out = c.output().expect("lockstep runs");
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), all)
}

#[test]
fn the_daemon_judges_the_branch_with_the_same_policy() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let (mallory, _) = ssh_key(f.keys.path(), "mallory");
    let signers = f.file("allowed_signers", &format!("{EMAIL} {alice_pub}\n"));
    let base = f.git(&["rev-parse", "HEAD"], WHEN);

    // The head signed by a key nobody trusts: refused, a person must act.
    let bad = f.commit_ssh("2026.2", Some(&mallory), WHEN);
    let (code, out) = run_until_idle(&f, &base, &["--allowed-signers", &signers]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("commit {}", &bad[..10])), "{out}");
    assert!(out.contains("UntrustedCommit"), "{out}");

    // The same change signed by a trusted key on top: applied, exit 0.
    f.commit_ssh("2026.2", Some(&alice), WHEN);
    let (code, out) = run_until_idle(&f, &base, &["--allowed-signers", &signers]);
    assert_eq!(code, Some(0), "{out}");

    // With a policy, where judging starts is a full commit id: a name
    // could be moved past commits that were never judged.
    let (code, out) = run_until_idle(&f, "HEAD~1", &["--allowed-signers", &signers]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("source.since \"HEAD~1\": with a trust policy, give the full commit id"),
        "{out}"
    );

    // The YAML configuration says the same as the flag.
    let config = f.file(
        "config.yaml",
        &format!("trust:\n  allowedSignersFile: {signers}\n"),
    );
    f.commit_ssh("2027.1", None, WHEN);
    let (code, out) = run_until_idle(&f, &base, &["--config", &config]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("UntrustedCommit"), "{out}");
}

/// lockstep's own plan commits are judged like anyone's: a signing key the
/// policy does not trust stops the start.
#[test]
fn the_daemon_refuses_to_start_with_an_untrusted_plan_signing_key() {
    let f = Fixture::new();
    let (_, alice_pub) = ssh_key(f.keys.path(), "alice");
    let (mallory, _) = ssh_key(f.keys.path(), "mallory");
    let signers = f.file(
        "allowed_signers",
        &format!("lockstep@localhost {alice_pub}\n"),
    );
    let base = f.git(&["rev-parse", "HEAD"], WHEN);
    let config = f.file(
        "config.yaml",
        &format!(
            "plans:\n  signingKeyFile: {}\ntrust:\n  allowedSignersFile: {signers}\n",
            mallory.display()
        ),
    );
    let (code, out) = run_until_idle(&f, &base, &["--config", &config]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("plans.signingKeyFile"), "{out}");
    assert!(out.contains(&ssh_fingerprint(&mallory)), "{out}");

    // The same key, trusted for lockstep's author email: it starts.
    let trusted = f.file(
        "allowed_signers_2",
        &format!(
            "lockstep@localhost {}\n",
            std::fs::read_to_string(mallory.with_extension("pub"))
                .expect("pub")
                .trim()
        ),
    );
    let config = f.file(
        "config2.yaml",
        &format!(
            "plans:\n  signingKeyFile: {}\ntrust:\n  allowedSignersFile: {trusted}\n",
            mallory.display()
        ),
    );
    let (code, out) = run_until_idle(&f, &base, &["--config", &config]);
    assert_eq!(code, Some(0), "{out}");
}

/// lockstep's own SSH-signed plan commits pass its own trust policy: the
/// signature was written with `ssh-keygen`'s trailing newline as a blank
/// header line, which lockstep then could not read, so a plan with trust on
/// refused its own hop and never finished. And a plan writes nothing on top
/// of a head the policy refuses: its commit is judged against the last
/// accepted state, so it would carry the untrusted change (here an image
/// from another registry) under lockstep's trusted signature.
#[test]
fn signed_plan_commits_are_trusted_and_never_written_on_an_untrusted_head() {
    let f = Fixture::new();
    let (alice, alice_pub) = ssh_key(f.keys.path(), "alice");
    let (planner, planner_pub) = ssh_key(f.keys.path(), "planner");
    let signers = f.file(
        "allowed_signers",
        &format!("{EMAIL} {alice_pub}\nlockstep@localhost {planner_pub}\n"),
    );
    let base = f.git(&["rev-parse", "HEAD"], WHEN);
    let config = f.file(
        "config.yaml",
        &format!(
            "plans:\n  signingKeyFile: {}\ntrust:\n  allowedSignersFile: {signers}\n",
            planner.display()
        ),
    );
    let plan = |name: &str, to: &str| {
        format!(
            "apiVersion: lockstep.c5c3.io/v1alpha1\nkind: UpgradePlan\nmetadata:\n  name: {name}\nspec:\n  to: \"{to}\"\n  waves:\n    - name: all\n      select: [{{kind: Nova, namespace: compute, name: nova}}]\n"
        )
    };
    let signing = format!("user.signingkey={}", alice.display());
    f.repo.write("plans/p.yaml", plan("p", "2026.2"));
    f.git(&["add", "-A"], WHEN);
    f.git(
        &[
            "-c",
            "gpg.format=ssh",
            "-c",
            &signing,
            "commit",
            "-q",
            "-S",
            "-m",
            "plan p",
        ],
        WHEN,
    );
    let (code, out) = run_until_idle(&f, &base, &["--config", &config]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("plan/p: success — complete: every wave at 2026.2"),
        "{out}"
    );
    let head = f.git(&["rev-parse", "HEAD"], WHEN);
    assert_eq!(
        f.git(&["log", "-1", "--format=%an"], WHEN),
        "lockstep",
        "the plan's hop commit"
    );
    let (code, json) = f.check(&["--base", "HEAD~1", "--allowed-signers", &signers]);
    accepted(code, &json);

    // An unsigned commit on top: a plan to 2027.1 and Nova's image from
    // elsewhere. Refused, and the plan writes nothing.
    f.git(&["reset", "-q", "--hard"], WHEN);
    f.repo.write("plans/p.yaml", plan("p", "2027.1"));
    let text = std::fs::read_to_string(f.repo.path().join(NOVA)).expect("nova");
    let swapped = text.replacen("ghcr.io/c5c3/nova", "evil.example.invalid/nova", 1);
    assert_ne!(swapped, text);
    f.repo.write(NOVA, swapped);
    f.git(&["add", "-A"], WHEN);
    f.git(&["commit", "-q", "-m", "unsigned: plan and image"], WHEN);
    let untrusted = f.git(&["rev-parse", "HEAD"], WHEN);
    let (code, out) = run_until_idle(&f, &base, &["--config", &config]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "plan/p: failure — held in wave 1/1 (all): the branch head {} is refused; a plan writes nothing on top of a refused commit",
            &untrusted[..10]
        )),
        "{out}"
    );
    assert_eq!(
        f.git(&["rev-parse", "HEAD"], WHEN),
        untrusted,
        "nothing written"
    );
    assert_ne!(untrusted, head);
}
