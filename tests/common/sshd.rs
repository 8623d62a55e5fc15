//! A real OpenSSH server on 127.0.0.1 for Git over ssh: its own host key,
//! one authorised client key, the current user (key login only), killed
//! when dropped. Git runs `git-upload-pack`/`git-receive-pack` through it as
//! it does behind any ssh host. `tests/peers/install.sh` installs
//! `openssh-server`; without it the tests fail and say so.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Sshd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    pub port: u16,
}

/// The sshd binary: `$LOCKSTEP_SSHD`, or Debian's path.
fn sshd_bin() -> PathBuf {
    let bin = std::env::var_os("LOCKSTEP_SSHD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/sshd"));
    assert!(
        bin.exists(),
        "{} not found: install openssh-server (tests/peers/install.sh does) or set LOCKSTEP_SSHD",
        bin.display()
    );
    bin
}

/// A new ed25519 key pair at `path` (and `path.pub`); returns the public
/// key as known_hosts and authorized_keys spell it: `type base64`.
pub fn keygen(path: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "lockstep-test", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen runs");
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = std::fs::read_to_string(path.with_extension("pub")).expect("public key");
    public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Sshd {
    pub fn start() -> Sshd {
        let bin = sshd_bin();
        let dir = tempfile::tempdir().expect("tempdir");
        let host = keygen(&dir.path().join("host_ed25519"));
        let client = keygen(&dir.path().join("id_ed25519"));
        std::fs::write(dir.path().join("host_key"), host).expect("host key");
        std::fs::write(dir.path().join("authorized_keys"), client + "\n").expect("authorized_keys");
        // Privilege separation wants this directory when sshd runs as root.
        let _ = std::fs::create_dir_all("/run/sshd");
        for _ in 0..10 {
            let port = super::free_port();
            let config = dir.path().join("sshd_config");
            let d = dir.path().display();
            std::fs::write(
                &config,
                format!(
                    "ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host_ed25519\n\
                     AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\n\
                     UsePAM no\nStrictModes no\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                     PermitRootLogin prohibit-password\nLogLevel VERBOSE\n"
                ),
            )
            .expect("sshd_config");
            let log = std::fs::File::create(dir.path().join("sshd.log")).expect("log");
            let mut child = Command::new(&bin)
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("sshd runs");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Sshd {
                        child: Some(child),
                        dir,
                        port,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("sshd did not start: {}", Sshd::read_log(dir.path()));
    }

    fn read_log(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
    }

    /// What sshd logged (accepted and refused keys, commands).
    pub fn log(&self) -> String {
        Sshd::read_log(self.dir.path())
    }

    /// The client's private key, authorised on this server.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("id_ed25519")
    }

    /// A known_hosts file that names this server's host key, as
    /// `ssh-keyscan` would write it for a non-default port.
    pub fn known_hosts(&self) -> PathBuf {
        let host = std::fs::read_to_string(self.dir.path().join("host_key")).expect("host key");
        let path = self.dir.path().join("known_hosts");
        std::fs::write(
            &path,
            format!(
                "[127.0.0.1]:{} {host}
",
                self.port
            ),
        )
        .expect("known_hosts");
        path
    }

    /// `ssh://<user>@127.0.0.1:<port><absolute path>`.
    pub fn url(&self, repo: &Path) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            super::current_user(),
            self.port,
            repo.display()
        )
    }

    /// `GIT_SSH_COMMAND` for the git CLI with the client key and this
    /// server's known_hosts (strict).
    pub fn git_ssh_command(&self) -> String {
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes",
            self.client_key().display(),
            self.known_hosts().display()
        )
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
