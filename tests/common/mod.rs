//! Test support: real Git repositories built with the git CLI, and manifests
//! derived from the example fleet so that every fixture stays valid against
//! the upstream CRD schemas (checked in `crd_schema.rs`).

#![allow(dead_code)]

pub mod counted;
pub mod forward;
pub mod gitea;
pub mod kube;
pub mod prism;
pub mod sim_kube;
pub mod sshd;
pub mod tree;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

pub const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fleet");

pub fn example(rel: &str) -> String {
    std::fs::read_to_string(Path::new(EXAMPLES).join(rel)).expect("example file")
}

/// A standalone Nova manifest at `release` with image tag `tag`.
pub fn nova(name: &str, release: &str, tag: &str) -> String {
    example("standalone/compute/nova.yaml")
        .replacen("name: nova\n", &format!("name: {name}\n"), 1)
        .replacen(
            "openStackRelease: \"2026.1\"",
            &format!("openStackRelease: \"{release}\""),
            1,
        )
        .replacen("tag: \"2026.1\"", &format!("tag: \"{tag}\""), 1)
}

/// The digest-pinned standalone Glance (plus its backend) at `release`.
pub fn glance_digest(release: &str, digest_hex: char) -> String {
    let text = example("standalone/image/glance.yaml");
    let start = text.find("sha256:").expect("digest in example") + 7;
    let old = &text[start..start + 64];
    text.replacen(old, &digest_hex.to_string().repeat(64), 1)
        .replacen(
            "openStackRelease: \"2026.1\"",
            &format!("openStackRelease: \"{release}\""),
            1,
        )
}

/// The staging ControlPlane (keystone, glance, placement, horizon) at `release`.
pub fn staging(release: &str) -> String {
    example("clusters/staging/controlplane.yaml").replacen(
        "openStackRelease: \"2026.1\"",
        &format!("openStackRelease: \"{release}\""),
        1,
    )
}

/// The prod ControlPlane at `release` with its placement override tagged `override_tag`.
pub fn prod(release: &str, override_tag: &str) -> String {
    example("clusters/prod/controlplane.yaml")
        .replacen(
            "openStackRelease: \"2026.1\"",
            &format!("openStackRelease: \"{release}\""),
            1,
        )
        .replacen("tag: \"2026.1\"", &format!("tag: \"{override_tag}\""), 1)
}

/// The ring of cloud `i` in the 20-cloud fleet of the plan tests
/// (`plan_run.rs`, `plan_kube.rs`): two canaries, eight in the EU, ten
/// general.
pub fn ring(i: usize) -> &'static str {
    match i {
        0..2 => "canary",
        2..10 => "eu",
        _ => "general",
    }
}

/// The plan over that fleet: canary (one at a time), then the EU (three),
/// then the rest (five), to 2026.2, with the given soaks after the first two
/// waves.
pub fn rings_plan(canary_soak: &str, eu_soak: &str) -> String {
    format!(
        r#"apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata:
  name: rings
spec:
  to: "2026.2"
  waves:
    - name: canary
      select: [{{kind: ControlPlane, labels: {{ring: canary}}}}]
      maxParallel: 1
      soak: {canary_soak}
    - name: eu
      select: [{{kind: ControlPlane, labels: {{ring: eu}}}}]
      maxParallel: 3
      soak: {eu_soak}
    - name: rest
      select: [{{kind: ControlPlane, labels: {{ring: general}}}}]
      maxParallel: 5
"#
    )
}

/// Cloud `i` of that fleet: staging's ControlPlane (keystone, glance,
/// placement, horizon) named `cNN` in namespace `cloud-NN`, labelled
/// `ring: <ring(i)>`, at 2026.1.
pub fn ringed_plane(i: usize) -> String {
    example("clusters/staging/controlplane.yaml")
        .replacen("name: staging ", &format!("name: c{i:02} "), 1)
        .replacen(
            "namespace: openstack-staging",
            &format!("namespace: cloud-{i:02}\n  labels:\n    ring: {}", ring(i)),
            1,
        )
}

pub struct FleetRepo {
    pub dir: tempfile::TempDir,
}

impl FleetRepo {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = Self { dir };
        r.git(&["init", "-q", "-b", "main"]);
        r.git(&["config", "user.name", "Fleet Tester"]);
        r.git(&["config", "user.email", "fleet@example.invalid"]);
        r.git(&["config", "commit.gpgsign", "false"]);
        r
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> &Self {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, content).expect("write");
        self
    }

    pub fn remove(&self, rel: &str) -> &Self {
        std::fs::remove_file(self.path().join(rel)).expect("remove");
        self
    }

    /// Commits, on top of `main`, a tree Git would never write: `nova.yaml`
    /// as mode 120755 pointing at `notes.txt` (git checks out a link,
    /// libgit2 reads a file holding the string), beside `notes.txt`
    /// holding `notes`. Returns the commit id.
    pub fn commit_odd_mode(&self, notes: &str) -> String {
        self.write("notes.txt", notes);
        self.commit("notes");
        let hash = |args: &[&str], input: &[u8]| -> String {
            use std::io::Write;
            let mut c = Command::new("git")
                .args(args)
                .current_dir(self.path())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("git");
            c.stdin
                .take()
                .expect("stdin")
                .write_all(input)
                .expect("write");
            let out = c.wait_with_output().expect("git");
            assert!(out.status.success(), "git {args:?}");
            String::from_utf8(out.stdout)
                .expect("utf8")
                .trim()
                .to_owned()
        };
        let link = hash(&["hash-object", "-w", "--stdin"], b"notes.txt");
        let notes = self.git(&["rev-parse", "HEAD:notes.txt"]);
        let raw = |hex: &str| -> Vec<u8> {
            (0..20)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
                .collect()
        };
        let mut tree = Vec::new();
        tree.extend_from_slice(b"100644 notes.txt\0");
        tree.extend(raw(&notes));
        tree.extend_from_slice(b"120755 nova.yaml\0");
        tree.extend(raw(&link));
        let tree = hash(
            &["hash-object", "-t", "tree", "-w", "--literally", "--stdin"],
            &tree,
        );
        let head = hash(&["commit-tree", &tree, "-p", "HEAD", "-m", "odd mode"], b"");
        self.git(&["update-ref", "refs/heads/main", &head]);
        head
    }

    /// Commits everything; returns the new commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }
}

pub fn lockstep_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lockstep"))
}

pub fn lockstep(args: &[&str]) -> Output {
    Command::new(lockstep_bin())
        .args(args)
        .output()
        .expect("lockstep runs")
}

/// Runs `lockstep check -o json` and returns (exit code, parsed JSON).
pub fn check_json(repo: &FleetRepo, extra: &[&str]) -> (i32, serde_json::Value) {
    let path = repo.path().to_string_lossy().into_owned();
    let mut args = vec!["check", "--repo", &path, "-o", "json"];
    args.extend_from_slice(extra);
    let out = lockstep(&args);
    let code = out.status.code().unwrap_or(-1);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, json)
}

/// The objects of the last judged commit.
pub fn last_objects(json: &serde_json::Value) -> Vec<serde_json::Value> {
    json["commits"]
        .as_array()
        .and_then(|c| c.last())
        .and_then(|c| c["objects"].as_array())
        .cloned()
        .unwrap_or_default()
}

pub fn find<'a>(objects: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {objects:#?}"))
}

/// A real etcd + kube-apiserver (tests/peers/kube) with the upstream CRDs
/// from ../shared, in a temporary directory, stopped when dropped.
pub struct ApiServer {
    dir: tempfile::TempDir,
}

fn kube_peer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/kube")
}

/// The one sentence a test that needs the upstream CRDs fails with when
/// they are not there: which files, where it looked, which variable moves it.
pub fn missing_crds(dir: &Path) -> String {
    format!(
        "this test needs the upstream C5C3 CRDs (*.yaml) in {}: put the shared fixtures at ../shared beside the checkout, or set LOCKSTEP_SHARED to the directory holding fixtures/crds",
        dir.display()
    )
}

/// The directory of the upstream CRD schemas (`$LOCKSTEP_SHARED/fixtures/crds`,
/// else `../shared/fixtures/crds`); fails at once, with [`missing_crds`], when
/// it holds no `*.yaml`.
pub fn shared_crds() -> PathBuf {
    let shared = std::env::var_os("LOCKSTEP_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let dir = shared.join("fixtures/crds");
    let any = std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "yaml"))
    });
    assert!(any, "{}", missing_crds(&dir));
    dir
}

impl ApiServer {
    pub fn start() -> Self {
        let crds = shared_crds();
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("bash")
            .arg(kube_peer().join("start.sh"))
            .arg(dir.path())
            .arg("--crds")
            .arg(crds)
            .output()
            .expect("start.sh runs");
        assert!(
            out.status.success(),
            "the API server with the CRDs did not start (its binaries come from tests/peers/install.sh): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Installs the CRDs of a directory (tests/peers/kube/install-crds.sh)
    /// and waits until they are Established.
    pub fn install_crds(&self, dir: &Path) {
        let out = Command::new("bash")
            .arg(kube_peer().join("install-crds.sh"))
            .arg(self.dir.path())
            .arg(dir)
            .output()
            .expect("install-crds.sh runs");
        assert!(
            out.status.success(),
            "installing the CRDs of {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The directory holding mariadb-operator's Backup CRD, fetched from the Go
/// module proxy and cached by tests/peers/mariadb/fetch-crd.sh (which
/// tests/peers/install.sh runs; never committed here).
pub fn backup_crd_dir() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mariadb/fetch-crd.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("fetch-crd.sh runs");
    assert!(
        out.status.success(),
        "this test needs mariadb-operator's Backup CRD (tests/peers/install.sh fetches it from the Go module proxy): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(kube_peer().join("stop.sh"))
            .arg(self.dir.path())
            .status();
    }
}

/// A free TCP port on 127.0.0.1 (free when asked; bind it soon).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port()
}

/// `git daemon` serving every repository under `base` over git:// (push
/// enabled), killed when dropped. The git-daemon binary itself is run:
/// `git daemon` would run it as a child that a kill leaves behind.
pub struct GitDaemon {
    child: Option<std::process::Child>,
    base: PathBuf,
    pub port: u16,
}

impl GitDaemon {
    pub fn start(base: &Path) -> GitDaemon {
        for _ in 0..10 {
            if let Some(d) = GitDaemon::start_on(base, free_port()) {
                return d;
            }
        }
        panic!("git daemon did not start");
    }

    /// `None` when the daemon exits (port taken) or never accepts.
    pub fn start_on(base: &Path, port: u16) -> Option<GitDaemon> {
        use std::time::{Duration, Instant};
        let exec = Command::new("git")
            .arg("--exec-path")
            .output()
            .expect("git runs");
        let exec_path = String::from_utf8_lossy(&exec.stdout).trim().to_owned();
        let mut child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .arg("--reuseaddr")
            .arg(format!("--base-path={}", base.display()))
            .arg("--export-all")
            .arg("--enable=receive-pack")
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(base)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("git daemon runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return None;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(GitDaemon {
                    child: Some(child),
                    base: base.to_owned(),
                    port,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// `git://127.0.0.1:PORT/<name>` for a repository under the base.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Back on the same port, so the same URL works again.
    pub fn restart(&mut self) {
        use std::time::{Duration, Instant};
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(mut d) = GitDaemon::start_on(&self.base, self.port) {
                self.child = d.child.take();
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("git daemon did not come back on port {}", self.port);
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The user running the tests (the one local servers let in).
pub fn current_user() -> String {
    let out = Command::new("id").arg("-un").output().expect("id runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// One HTTP/1.0 exchange on a plain TCP connection: (status code, body).
/// For the test's own calls to local servers (the daemon's endpoints, the
/// Gitea peer's API), where a client library would add nothing.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .and_then(|()| s.write_all(body))
        .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line from {addr}: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// The range the rehearsal tests share: a plane and a standalone Nova
/// installed (the returned base), then three hops: the plane, Nova twice
/// (the second waits for the first).
pub fn hop_story() -> (FleetRepo, String) {
    let repo = FleetRepo::new();
    repo.write("prod.yaml", prod("2026.1", "2026.1"))
        .write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    let base = repo.commit("fleet");
    repo.write("prod.yaml", prod("2026.2", "2026.2"));
    repo.commit("prod to 2026.2");
    repo.write("nova.yaml", nova("nova", "2026.2", "2026.2"));
    repo.commit("nova to 2026.2");
    repo.write("nova.yaml", nova("nova", "2027.1", "2027.1"));
    repo.commit("nova to 2027.1");
    (repo, base)
}
